"""Small helpers shared by the client and lock modules (private)."""
from __future__ import annotations

import concurrent.futures
import datetime
import enum
import math
import os
import queue
import threading
from typing import Any, Callable, NoReturn, Optional, Union

from . import _native
from .exceptions import InvalidArgument, error_class

Name = Union[str, bytes]
Seconds = Union[int, float, datetime.timedelta]

MAX_LEASE_MS = 30 * 24 * 3600 * 1000  # WATCHLOCK_MAX_LEASE_MS
MAX_NAME = _native.WATCHLOCK_MAX_NAME

#: Set by the atexit hook that closes every client (see _client.py).
exiting = False

OK = _native.WATCHLOCK_OK
ETIMEDOUT = _native.WATCHLOCK_ETIMEDOUT
ENOTOWNER = _native.WATCHLOCK_ENOTOWNER
ECONN = _native.WATCHLOCK_ECONN
ECLOSED = _native.WATCHLOCK_ECLOSED
EFORKED = _native.WATCHLOCK_EFORKED

UNLOCKED = _native.WATCHLOCK_UNLOCKED
HELD = _native.WATCHLOCK_HELD
LOST = _native.WATCHLOCK_LOST


class LostReason(str, enum.Enum):
    """Why a lock was lost. A str: compares equal to its text ("taken"...)."""

    TAKEN = "taken"                      #: renewal found another owner or no key (deleted, expired)
    EXPIRED = "expired"                  #: the lease ran out without renewal (auto_renew off, process stopped)
    MAX_RENEWALS = "max renewals reached"  #: renewals stopped at max_renewals, then the lease ran out
    MAX_HOLD = "max hold reached"        #: renewals stopped at max_hold, then the lease ran out
    CONNECTION = "connection lost"       #: renewals failed on the network until the lease's deadline

    def __str__(self) -> str:
        return self.value

    @classmethod
    def from_code(cls, code: int) -> Optional["LostReason"]:
        return _REASONS.get(code)


_REASONS = {
    _native.WATCHLOCK_LOST_TAKEN: LostReason.TAKEN,
    _native.WATCHLOCK_LOST_EXPIRED: LostReason.EXPIRED,
    _native.WATCHLOCK_LOST_MAX_RENEWALS: LostReason.MAX_RENEWALS,
    _native.WATCHLOCK_LOST_MAX_HOLD: LostReason.MAX_HOLD,
    _native.WATCHLOCK_LOST_CONNECTION: LostReason.CONNECTION,
}


def fmt_name(name: Name) -> str:
    """How messages show a lock name: repr, cut when very long."""
    text = repr(name)
    return text if len(text) <= 200 else text[:197] + "..."


def check_name(name: Any) -> bytes:
    """Validates a lock name; returns its bytes (str is encoded as UTF-8)."""
    if isinstance(name, str):
        data = name.encode("utf-8")
    elif isinstance(name, (bytes, bytearray, memoryview)):
        data = bytes(name)
    else:
        raise TypeError(f"lock name must be str or bytes, not {type(name).__name__}")
    if not data:
        raise InvalidArgument("lock name is empty", lock_name=name)
    if len(data) > MAX_NAME:
        raise InvalidArgument(f"lock name is {len(data)} bytes, more than the limit of {MAX_NAME}",
                              lock_name=name)
    return data


def seconds(value: Any, what: str, lock_name: Optional[Name] = None) -> float:
    """A duration argument as float seconds (int, float or timedelta)."""
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    return float(value)


def to_ms(value: Any, what: str, lock_name: Optional[Name], maximum: int = MAX_LEASE_MS) -> int:
    """A positive duration in seconds as milliseconds (at least 1)."""
    s = seconds(value, what, lock_name)
    where = f" (lock {fmt_name(lock_name)})" if lock_name is not None else ""
    if not math.isfinite(s) or s <= 0:
        raise InvalidArgument(f"{what} must be a positive number of seconds, got {value!r}{where}",
                              lock_name=lock_name)
    ms = max(1, int(round(s * 1000)))
    if ms > maximum:
        raise InvalidArgument(f"{what} {value!r} is too long (at most {maximum / 1000:g} s){where}",
                              lock_name=lock_name)
    return ms


def wait_seconds(blocking: bool, timeout: Any, lock_name: Name) -> Optional[float]:
    """threading.Lock.acquire's (blocking, timeout) as seconds to wait; None = forever."""
    if not blocking:
        if timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        return 0.0
    if timeout is None:
        return None
    s = seconds(timeout, "timeout", lock_name)
    if s == -1:
        return None
    if math.isnan(s) or s < 0:
        raise InvalidArgument(f"timeout value must be a non-negative number or -1, got {timeout!r} "
                              f"(lock {fmt_name(lock_name)})", lock_name=lock_name)
    if math.isinf(s):
        return None
    return s


def raise_status(status: int, message: str, lock_name: Optional[Name] = None,
                 cls: Optional[type] = None) -> NoReturn:
    """Raises the exception for a core status. Must run right after the failed
    call, on the same thread: it reads the core's thread-local detail message."""
    detail = _native.last_error() or ""
    klass = cls or error_class(status)
    text = f"{message}: {detail}" if detail else f"{message}: {_native.strerror(status)}"
    raise klass(text, lock_name=lock_name, status=status, detail=detail)


class DaemonExecutor(concurrent.futures.Executor):
    """Runs blocking acquire/release calls for asyncio.

    Its threads are daemons: unlike ThreadPoolExecutor's they are not joined
    at interpreter exit, so a task still waiting for a lock can never hang
    shutdown (the waits are sliced and also watch a cancel flag). Threads are
    created on demand and exit after a minute idle.
    """

    IDLE_SECONDS = 60.0

    def __init__(self) -> None:
        self._jobs: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._mu = threading.Lock()
        self._idle = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> "concurrent.futures.Future[Any]":
        fut: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
        with self._mu:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1  # claim an idle worker: it will take this job
        self._jobs.put((fut, fn, args, kwargs))
        if spawn:
            threading.Thread(target=self._work, name="watchlock-async", daemon=True).start()
        return fut

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self.IDLE_SECONDS)
            except queue.Empty:
                with self._mu:
                    if self._idle > 0:
                        self._idle -= 1
                        return
                continue  # claimed just now: a job is on its way
            fut, fn, args, kwargs = job
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # noqa: B902 - handed to the awaiting task
                    fut.set_exception(exc)
            del job, fut, fn, args, kwargs
            with self._mu:
                self._idle += 1


_executor: Optional[DaemonExecutor] = None
_executor_mu = threading.Lock()


def executor() -> DaemonExecutor:
    global _executor
    with _executor_mu:
        if _executor is None:
            _executor = DaemonExecutor()
        return _executor


def _after_fork_in_child() -> None:
    global _executor, _executor_mu
    _executor = None  # the parent's worker threads do not exist here
    _executor_mu = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
