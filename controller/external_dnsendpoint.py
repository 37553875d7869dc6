"""Former home of the ``dnsendpoint`` provider, now :mod:`controller.external.dnsendpoint`.

Kept only while tests/controller/test_external_dnsendpoint.py (owned by another
change) still imports it from here; delete it once that file imports
``controller.external.dnsendpoint``.
"""

from controller.external.dnsendpoint import DnsEndpointProvider

__all__ = ["DnsEndpointProvider"]
