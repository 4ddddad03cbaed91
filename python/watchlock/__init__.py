"""watchlock: a Redis distributed lock with a watchdog.

    import watchlock
    client = watchlock.Client("redis://127.0.0.1:6379/0")   # or WATCHLOCK_URL
    with client.lock("orders:42", ttl="10s", blocking_timeout=5):
        ...   # LockTimeout if not acquired in 5 s; LockLostError at exit if lost

    @client.synchronized("report:{customer_id}", ttl=10, blocking_timeout=5)
    def build_report(customer_id): ...

The C core (compiled into watchlock.__native) does the work: the watchdog
renews held locks, loss is reported, fencing tokens increase per name.
Blocking calls release the GIL. See docs/python.md.
"""
from __future__ import annotations

from . import _native
from ._client import CheckCode, CheckFinding, Client, ListedLock, LockInfo, Owner, default_client, lock, synchronized
from ._kinds import FairLock, NameInfo, ReadLock, RWLock, Semaphore, WriteLock
from ._lock import Lock, LockOptions, OnLost
from ._multi import MultiLock
from ._stats import Histogram
from ._util import Duration, LostReason
from .exceptions import (AuthenticationError, ClientClosedError, ConnectionError, Error, FencingTokenUnavailable,
                         ForkedError, InternalError, InvalidArgument, LockError, LockLostError, LockNotOwnedError, LockTimeout,
                         OutOfMemoryError, PermissionDeniedError, ReplicationError, ServerError, WrongTypeError)

__version__: str = _native.version_string()
#: Version of the C core compiled into this package (same as __version__).
core_version: str = _native.version_string()

__all__ = [
    "Client", "Lock", "MultiLock", "LockInfo", "ListedLock", "Owner", "CheckCode", "CheckFinding", "LostReason", "default_client", "lock", "synchronized",
    "Duration", "LockOptions", "OnLost", "Histogram",
    "Error", "LockError", "LockTimeout", "LockNotOwnedError", "LockLostError", "ConnectionError",
    "AuthenticationError", "PermissionDeniedError", "ReplicationError", "InvalidArgument", "ServerError", "ClientClosedError", "ForkedError",
    "OutOfMemoryError", "InternalError", "FencingTokenUnavailable", "__version__",
    "FairLock", "NameInfo", "Semaphore", "RWLock", "ReadLock", "WriteLock", "WrongTypeError",
]
