# aetcd.leases (aetcd/leases.py).

from .client import Client
from .rpc import LeaseKeepAliveResponse

class Lease:
    id: int
    ttl: int
    def __init__(self, lease_id: int, ttl: int, etcd_client: Client) -> None: ...
    async def revoke(self) -> None: ...
    async def refresh(self) -> LeaseKeepAliveResponse | None: ...
