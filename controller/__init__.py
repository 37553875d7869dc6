"""The FederatedDNSController: member clusters' federated Services into Federated-DNS's etcd.

Modules, from the clusters to etcd (docs/controller.md):

- ``config``: the config file (docs/reference.md section 7), validated before anything connects;
- ``watch``: ``ResourceWatch``, the list-then-watch of one resource of one cluster in a thread (410, backoff);
- ``stubzones``: the leader keeps every member's stub zone forwarding to Federated-DNS;
- ``shards``: Kubernetes objects shrunk to shard records (pure functions);
- ``view``: the in-memory view of one cluster, fed by its watches;
- ``sync``: the writer: compare before put, resync, delete the keys no view wants any more;
- ``leader`` and ``etcdlink``: etcd lease election, and the connection per task with leader-guarded transactions;
- ``app``: the wiring; ``cli``: ``feddns controller``; ``metrics``: Prometheus;
- ``settings``: the time constants, grouped;
- ``external``: publishing LoadBalancer IPs to an external DNS provider (docs/external-dns.md).

``controller`` imports from ``feddns``, never from ``stubzone``.
"""
