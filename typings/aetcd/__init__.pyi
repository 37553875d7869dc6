# Stubs for aetcd 1.0 (it ships no types): only the names feddns, controller and
# stubzone use, with the signatures of aetcd's own code (aetcd/__init__.py). Add a
# name here, read from aetcd's source, before using it.

from . import exceptions as exceptions
from . import rpc as rpc
from . import transactions as transactions
from . import watcher as watcher
from .client import Client as Client
from .client import Status as Status
from .leases import Lease as Lease
from .rtypes import Event as Event
from .rtypes import EventKind as EventKind
from .rtypes import Get as Get
from .rtypes import GetRange as GetRange
from .rtypes import KeyValue as KeyValue
from .rtypes import ResponseHeader as ResponseHeader
from .rtypes import Watch as Watch
