"""Private helpers: core statuses as exceptions, durations, loss reasons."""
from __future__ import annotations

import datetime
import enum
from typing import Dict, NoReturn, Optional, Tuple, Union

from . import _native
from .exceptions import error_class

Name = Union[str, bytes]
#: A duration: seconds (int or float), a timedelta, or text the core parses ("500ms", "30s", "2m", "1h").
Duration = Union[int, float, str, datetime.timedelta]

OK = _native.WATCHLOCK_OK
ETIMEDOUT = _native.WATCHLOCK_ETIMEDOUT
ENOTOWNER = _native.WATCHLOCK_ENOTOWNER
ECONN = _native.WATCHLOCK_ECONN
ECLOSED = _native.WATCHLOCK_ECLOSED
HELD = _native.WATCHLOCK_HELD
LOST = _native.WATCHLOCK_LOST

#: Set by the atexit hook that closes every client (see _client.py).
exiting = False
#: Forks this process has gone through (counted in the child, see _client.py):
#: a Client opened before a fork asks the core for every new lock handle, so
#: that a forked child gets the core's EFORKED at once.
forks = 0


class LostReason(str, enum.Enum):
    """Why a lock was lost (the core's watchlock_lost_reason_str). A str:
    compares equal to its text ("taken", ...)."""

    TAKEN = "taken"                        #: renewal found another owner or no key (deleted, expired)
    EXPIRED = "expired"                    #: the lease ran out without renewal (auto_renew off, process stopped)
    MAX_RENEWALS = "max renewals reached"  #: renewals stopped at max_renewals, then the lease ran out
    MAX_HOLD = "max hold reached"          #: renewals stopped at max_hold, then the lease ran out
    CONNECTION = "connection lost"         #: renewals failed on the network until the lease's deadline

    def __str__(self) -> str:
        return self.value

    @classmethod
    def from_code(cls, code: int) -> Optional[LostReason]:
        """The reason for a WATCHLOCK_LOST_* code; None for NONE (and codes newer than this package)."""
        try:
            return cls(_native.lost_reason_str(code)) if code else None
        except ValueError:
            return None


def fmt_name(name: Name) -> str:
    """How messages show a lock name: repr, cut when very long."""
    text = repr(name)
    return text if len(text) <= 200 else text[:197] + "..."


def raise_status(status: int, message: str, lock_name: Optional[Name] = None) -> NoReturn:
    """Raises the exception for a core status. Must run right after the failed
    call, on the same thread: it reads the core's thread-local detail message."""
    detail = _native.last_error() or ""
    text = f"{message}: {detail or _native.strerror(status)}"
    raise error_class(status)(text, lock_name=lock_name, status=status, detail=detail)


#: Conversions the core's parser made, (type, value) -> ms. Only successes
#: are kept: a value the parser refuses is asked again, so its error (and
#: message) is always the core's. Bounded: cleared when full.
ms_cache: Dict[Tuple[type, object], int] = {}
_MS_CACHE_MAX = 1024
CACHEABLE = frozenset((int, float, str, datetime.timedelta))


def to_ms(value: Duration, what: str, lock_name: Name) -> int:
    """A duration in ms, read by the core's one parser (watchlock_parse_duration),
    so that its forms and limits (plain decimal, >= 0, at most 30 days) are
    the CLI's and the URL options'. Numbers and timedeltas are seconds, given
    to it as decimal text; a NUL byte is shown to it as "\\0", which it refuses.

    The result is cached per (type, value): the parser is a pure function of
    the text, and the text is a function of the type and value, except for
    -0.0, which equals 0.0 but reads "-0" (refused): zeros of float type are
    never cached. The type is part of the key because True == 1 and 1.0 == 1
    hash alike but are refused or read differently. Only the exact types
    int, float, str and timedelta are cached (a subclass may hash or format
    in its own way)."""
    kind = type(value)
    key = (kind, value)
    if kind in CACHEABLE:
        ms = ms_cache.get(key)
        if ms is not None:
            return ms
    ms = _to_ms(value, what, lock_name)
    if kind in CACHEABLE and not (kind is float and value == 0):
        if len(ms_cache) >= _MS_CACHE_MAX:
            ms_cache.clear()
        ms_cache[key] = ms
    return ms


def _to_ms(value: Duration, what: str, lock_name: Name) -> int:
    """to_ms without the cache."""
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, float):
        text = f"{value:.3f}".rstrip("0").rstrip(".")  # "nan", "inf" and negatives: refused by the parser
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, str):
        text = value.replace("\0", "\\0")
    else:
        raise TypeError(f"{what} must be seconds (int or float), a duration such as '30s' or a "
                        f"timedelta, not {type(value).__name__}")
    status, ms = _native.parse_duration(text)
    if status != OK:
        raise_status(status, f"{what} of lock {fmt_name(lock_name)}", lock_name)
    return ms


def wait_ms(blocking: bool, timeout: Optional[Duration], lock_name: Name) -> int:
    """threading.Lock.acquire's (blocking, timeout) as the core's wait:
    -1 forever (timeout -1 or None), 0 try once, else ms."""
    if not blocking:
        if timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        return 0
    if timeout is None or timeout == -1:
        return -1
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout < 0:
        raise ValueError(f"timeout must be 0 or more seconds (or -1 / None: wait until free), got {timeout} "
                         f"(negative)")
    return to_ms(timeout, "timeout", lock_name)
