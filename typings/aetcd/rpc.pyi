# aetcd.rpc: gRPC names re-exported from grpc.aio, and the protobuf messages and
# service stubs (generated rpc_pb2*.py, kv_pb2.py) that feddns uses directly. Message
# fields are those of etcd's rpc.proto and kv.proto; unused fields are left out.

from collections.abc import Sequence

from grpc import StatusCode as StatusCode
from grpc.aio import AioRpcError as AioRpcError
from grpc.aio import Channel as Channel
from grpc.aio import StreamStreamMultiCallable, UnaryUnaryMultiCallable
from grpc.aio import insecure_channel as insecure_channel
from grpc.aio import secure_channel as secure_channel

class ResponseHeader:
    cluster_id: int
    member_id: int
    revision: int
    raft_term: int

class KeyValue:
    key: bytes
    create_revision: int
    mod_revision: int
    version: int
    value: bytes
    lease: int

class AuthenticateRequest:
    name: str
    password: str
    def __init__(self, *, name: str = ..., password: str = ...) -> None: ...

class AuthenticateResponse:
    header: ResponseHeader
    token: str

class RangeRequest:
    key: bytes
    range_end: bytes
    limit: int
    revision: int
    serializable: bool
    keys_only: bool
    count_only: bool
    def __init__(self, *, key: bytes = ..., range_end: bytes = ..., limit: int = ..., revision: int = ...,
                 serializable: bool = ..., keys_only: bool = ..., count_only: bool = ...) -> None: ...

class RangeResponse:
    header: ResponseHeader
    kvs: Sequence[KeyValue]
    more: bool
    count: int

class LeaseKeepAliveResponse:
    header: ResponseHeader
    ID: int
    TTL: int

class StatusRequest:
    def __init__(self) -> None: ...

class StatusResponse:
    header: ResponseHeader
    version: str
    dbSize: int
    leader: int
    raftIndex: int
    raftTerm: int

class ResponseOp: ...

class WatchRequest: ...
class WatchResponse: ...

class AuthStub:
    Authenticate: UnaryUnaryMultiCallable[AuthenticateRequest, AuthenticateResponse]
    def __init__(self, channel: Channel) -> None: ...

class KVStub:
    Range: UnaryUnaryMultiCallable[RangeRequest, RangeResponse]
    def __init__(self, channel: Channel) -> None: ...

class ClusterStub:
    def __init__(self, channel: Channel) -> None: ...

class LeaseStub:
    def __init__(self, channel: Channel) -> None: ...

class MaintenanceStub:
    Status: UnaryUnaryMultiCallable[StatusRequest, StatusResponse]
    def __init__(self, channel: Channel) -> None: ...

class WatchStub:
    Watch: StreamStreamMultiCallable[WatchRequest, WatchResponse]
    def __init__(self, channel: Channel) -> None: ...
