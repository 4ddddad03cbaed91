"""Exceptions raised by watchlock. All derive from :class:`watchlock.Error`.

Every status code of the C core maps to one class here (see ``_STATUS``);
messages name the lock (or the server) they are about and add the core's
detail message.
"""
from __future__ import annotations

import builtins
from typing import Dict, Optional, Type, Union

__all__ = [
    "Error", "LockTimeout", "LockNotOwnedError", "LockLostError", "ConnectionError",
    "AuthenticationError", "InvalidArgument", "ServerError", "ClientClosedError",
    "ForkedError", "OutOfMemoryError", "InternalError", "PermissionDeniedError",
]

Name = Union[str, bytes]


class Error(Exception):
    """Base class of every watchlock exception.

    Attributes: ``status`` (the core's WATCHLOCK_E* code, or None),
    ``lock_name`` (str or bytes, or None when not about one lock) and
    ``detail`` (the core's detail message, possibly empty).
    """

    status: Optional[int] = None

    def __init__(self, message: str = "", *, lock_name: Optional[Name] = None,
                 status: Optional[int] = None, detail: str = "") -> None:
        super().__init__(message)
        self.lock_name = lock_name
        if status is not None:
            self.status = status
        self.detail = detail


class LockTimeout(Error):
    """The lock was not acquired in time (another owner holds it)."""

    status = 3


class LockNotOwnedError(Error):
    """The handle does not hold the lock: never acquired, already released, or lost."""

    status = 4


class LockLostError(LockNotOwnedError):
    """The lock was lost while held: its lease ran out, the key was taken or
    deleted, or renewals failed until the lease's deadline.

    ``reason`` is a :class:`watchlock.LostReason` (a str) when known.
    A LockLostError is also a LockNotOwnedError: the holder no longer owns it.
    """

    reason: Optional[str] = None

    def __init__(self, message: str = "", *, lock_name: Optional[Name] = None,
                 status: Optional[int] = None, detail: str = "",
                 reason: Optional[str] = None) -> None:
        super().__init__(message, lock_name=lock_name, status=status, detail=detail)
        if reason is not None:
            self.reason = reason


class ConnectionError(Error, builtins.ConnectionError):
    """The server is unreachable, refused or dropped the connection, or a
    command timed out. Also a builtin ConnectionError (an OSError)."""

    status = 5

    def __init__(self, message: str = "", **kw) -> None:  # OSError takes positional args only
        Error.__init__(self, message, **kw)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class AuthenticationError(ConnectionError):
    """Authentication failed or is required (wrong password, unknown user)."""

    status = 6


class PermissionDeniedError(Error):
    """The server's ACL denies a command, key or channel the lock needs
    (NOPERM): the credentials are fine, the user's rights are not."""

    status = 11


class InvalidArgument(Error, ValueError):
    """A bad argument: empty or too long name, bad duration, malformed URL..."""

    status = 1


class ServerError(Error):
    """The server answered with an error (e.g. the key holds a non-string value)."""

    status = 7


class ClientClosedError(Error):
    """The client (or the client of this lock) was closed."""

    status = 8


class ForkedError(Error):
    """A client or lock inherited across fork() was used in the child.

    A forked child never owns, renews or releases its parent's locks: create a
    new Client in the child (the default client of watchlock.lock() is
    recreated automatically)."""

    status = 9


class OutOfMemoryError(Error, MemoryError):
    """The C core ran out of memory."""

    status = 2


class InternalError(Error):
    """A bug or an unexpected system failure in the core."""

    status = 10


_STATUS: Dict[int, Type[Error]] = {
    cls.status: cls  # type: ignore[misc]
    for cls in (InvalidArgument, OutOfMemoryError, LockTimeout, LockNotOwnedError,
                ConnectionError, AuthenticationError, ServerError, ClientClosedError, PermissionDeniedError,
                ForkedError, InternalError)
}


def error_class(status: int) -> Type[Error]:
    """The exception class for a core status code (Error for unknown codes)."""
    return _STATUS.get(status, Error)
