"""Exceptions raised by watchlock. All derive from :class:`watchlock.Error`.

Hierarchy (lock-state errors share :class:`LockError`, as in redis-py)::

    Error
    ├── LockError                 the lock's state refused the call
    │   ├── LockTimeout           not acquired in time
    │   └── LockNotOwnedError     not held by this handle
    │       └── LockLostError     was held, then lost
    ├── ConnectionError (also builtins.ConnectionError)
    │   └── AuthenticationError
    ├── PermissionDeniedError, ReplicationError, ServerError, FencingTokenUnavailable
    ├── WrongTypeError            the name is another lock kind (or another permit count)
    ├── InvalidArgument (also ValueError)
    ├── ClientClosedError, ForkedError
    └── OutOfMemoryError (also MemoryError), InternalError

Every status code of the C core maps to one class (``error_class``);
messages name the lock (or the server) they are about and add the core's
detail message.
"""
from __future__ import annotations

import builtins
from typing import Dict, List, Optional, Type, Union

from . import _native

__all__ = [
    "Error", "LockError", "LockTimeout", "LockNotOwnedError", "LockLostError", "ConnectionError",
    "AuthenticationError", "InvalidArgument", "ServerError", "ClientClosedError",
    "ForkedError", "OutOfMemoryError", "InternalError", "PermissionDeniedError", "ReplicationError",
    "FencingTokenUnavailable",
    "WrongTypeError",
]


class Error(Exception):
    """Base class of every watchlock exception.

    ``status``: the core's WATCHLOCK_E* code (or None); ``lock_name``: the
    lock's name (or None when not about one lock); ``detail``: the core's
    detail message (possibly empty); ``members``: after a failed acquire on
    a quorum client, what each member answered ("granted", "held",
    "unreachable", "restarted", "unknown"; see ``Lock.members``), else None.
    """
    status: Optional[int] = None
    members: Optional[List[str]] = None

    def __init__(self, message: str = "", *, lock_name: Union[str, bytes, None] = None,
                 status: Optional[int] = None, detail: str = "") -> None:
        super().__init__(message)
        self.lock_name = lock_name
        if status is not None:
            self.status = status
        self.detail = detail


class LockError(Error):
    """Base class of the lock-state errors: the lock was not acquired in time
    (:class:`LockTimeout`), is not held by this handle
    (:class:`LockNotOwnedError`) or was lost (:class:`LockLostError`).
    Server, connection and argument errors are not LockErrors."""


class LockTimeout(LockError):
    """The lock was not acquired in time (another owner holds it)."""
    status = _native.WATCHLOCK_ETIMEDOUT


class LockNotOwnedError(LockError):
    """The handle does not hold the lock: never acquired, already released, or lost."""
    status = _native.WATCHLOCK_ENOTOWNER


class LockLostError(LockNotOwnedError):
    """The lock was lost while held: its lease ran out, the key was taken or
    deleted, or renewals failed until the lease's deadline. ``reason`` is a
    :class:`watchlock.LostReason` (a str) when known."""
    reason: Optional[str] = None

    def __init__(self, message: str = "", *, lock_name: Union[str, bytes, None] = None,
                 status: Optional[int] = None, detail: str = "", reason: Optional[str] = None) -> None:
        super().__init__(message, lock_name=lock_name, status=status, detail=detail)
        if reason is not None:
            self.reason = reason


class ConnectionError(Error, builtins.ConnectionError):
    """The server is unreachable, refused or dropped the connection, or a
    command timed out. Also a builtin ConnectionError (an OSError)."""
    status = _native.WATCHLOCK_ECONN

    def __init__(self, message: str = "", *, lock_name: Union[str, bytes, None] = None,
                 status: Optional[int] = None, detail: str = "") -> None:
        Error.__init__(self, message, lock_name=lock_name, status=status, detail=detail)

    def __str__(self) -> str:  # OSError's would show its (errno, strerror) pair
        return str(self.args[0]) if self.args else ""


class AuthenticationError(ConnectionError):
    """Authentication failed or is required (wrong password, unknown user)."""
    status = _native.WATCHLOCK_EAUTH


class PermissionDeniedError(Error):
    """The server's ACL denies a command, key or channel the lock needs
    (NOPERM): the credentials are fine, the user's rights are not."""
    status = _native.WATCHLOCK_EPERM


class ReplicationError(Error):
    """Fewer replicas than the URL's ``min_replicas`` acknowledged the
    acquire (the key was given back) or the extend (the lock keeps its old
    deadline) within ``min_replicas_timeout``."""
    status = _native.WATCHLOCK_EREPLICAS


class FencingTokenUnavailable(Error):
    """A quorum client could not confirm the raise of this hold's fencing
    token on a majority of the members that granted it within the hold's
    validity: no token may be used for this hold (one that might not
    increase is never handed out). Release and acquire again."""
    status = _native.WATCHLOCK_EUNAVAIL


class InvalidArgument(Error, ValueError):
    """A bad argument: empty or too long name, bad duration, malformed URL..."""
    status = _native.WATCHLOCK_EINVAL


class ServerError(Error):
    """The server answered with an error (e.g. the key holds a non-string value)."""
    status = _native.WATCHLOCK_ESERVER


class ClientClosedError(Error):
    """The client (or the client of this lock) was closed."""
    status = _native.WATCHLOCK_ECLOSED


class ForkedError(Error):
    """A client or lock inherited across fork() was used in the child, which
    never owns, renews or releases its parent's locks: open a new Client there
    (the default client of watchlock.lock() is reopened by itself)."""
    status = _native.WATCHLOCK_EFORKED


class OutOfMemoryError(Error, MemoryError):
    """The C core ran out of memory."""
    status = _native.WATCHLOCK_ENOMEM


class InternalError(Error):
    """A bug or an unexpected system failure in the core."""
    status = _native.WATCHLOCK_EINTERNAL


class WrongTypeError(Error):
    """The name is in use as another lock kind (plain, fair, semaphore,
    read-write lock), or a semaphore was made with a permit count that is
    not the name's (change it with Client.set_permits)."""
    status = getattr(_native, "WATCHLOCK_EWRONGTYPE", 13)


_STATUS: Dict[Optional[int], Type[Error]] = {
    cls.status: cls for cls in (InvalidArgument, OutOfMemoryError, LockTimeout, LockNotOwnedError,
                                ConnectionError, AuthenticationError, ServerError, ClientClosedError,
                                PermissionDeniedError, ReplicationError, ForkedError, InternalError,
                                FencingTokenUnavailable, WrongTypeError)}


def error_class(status: int) -> Type[Error]:
    """The exception class for a core status code (Error for unknown codes)."""
    return _STATUS.get(status, Error)
