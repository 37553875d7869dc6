"""``feddns links``: a mutating admission webhook that injects explicit links to federated services.

Legacy applications read their peers' addresses from environment variables.
This webhook gives every container of a pod ``PREFIX_SERVICE_HOST`` (the
federated service's DNS name, so DNS still picks the nearest shard at each
connection) and ``PREFIX_SERVICE_PORT[_NAME]`` for the links the pod declares
in an annotation or that a policy file gives it (docs/links.md).

Layers, each a module: ``expansion`` ($(VAR) as the kubelet expands it),
``link`` (the link and its annotation), ``selector`` and ``policy`` (the
policy file), ``inject`` (variables, conflicts, JSONPatch: pure functions),
``gating`` (existence through the cluster DNS), ``shards`` (the local
Services, listed and watched), ``review`` (one AdmissionReview), ``app``
(HTTP), ``files`` (reloaded files, the TLS context), ``cli``. It imports from
``feddns`` only, never from ``controller`` or ``stubzone``.
"""
