"""watchlock.Lock: one lock handle, with threading.Lock-style methods.

The core's handle keeps every rule (option checks and defaults, waiting,
its hold count, loss, fork); this layer maps its statuses to exceptions and
adds idioms: ``with``, ``async with``, on_lost callables and "interrupt",
and a guard. The core's handle is reentrant for whoever calls it; so that a
Lock shared by threads behaves like a threading.Lock, the thread (or task)
that takes it from free owns it here (``_owner``) until the core's hold
count is back to 0, and the others wait on ``_cond``. Any thread may
release (hand-offs). C calls run outside ``_cond``, without the GIL.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import logging
import math
import sys
import threading
import time
import types
from typing import TYPE_CHECKING, Callable, Iterable, NoReturn, Optional, Type, TypedDict, Union

from . import _native, _util
from ._util import (ECLOSED, ECONN, ENOTOWNER, ETIMEDOUT, HELD, LOST, OK, Duration, LostReason, Name,
                    fmt_name, in_daemon_thread, raise_status, to_ms, wait_ms)
from .exceptions import Error, LockLostError, LockTimeout

if TYPE_CHECKING:
    from ._client import Client

log = logging.getLogger("watchlock")

#: None, a callable(lock, reason) run on the client's dispatcher thread, or "interrupt".
OnLost = Union[None, str, Callable[["Lock", LostReason], object]]


class LockOptions(TypedDict, total=False):
    """The keyword options of :meth:`Client.lock`, synchronized() and watchlock.lock()."""
    ttl: Optional[Duration]
    blocking_timeout: Optional[Duration]
    auto_renew: bool
    max_renewals: Optional[int]
    max_hold: Optional[Duration]
    renew_interval: Optional[Duration]
    on_lost: OnLost


def check_options(options: Iterable[str]) -> None:
    """TypeError for keyword options a Lock does not take; for ``timeout=``,
    which means the lease in redis-py and the wait elsewhere, it names both."""
    unknown = sorted(set(options) - set(LockOptions.__annotations__))
    if "timeout" in unknown:
        raise TypeError("lock() got an unexpected keyword argument 'timeout': say ttl= for the lease "
                        "(redis-py's timeout=) or blocking_timeout= for how long `with lock:` waits")
    if unknown:
        raise TypeError(f"lock() got unexpected keyword argument(s): {', '.join(unknown)}")


# Long C waits are cut into slices where something must be able to stop
# them: in the main thread (signal handlers such as Ctrl-C run between
# slices) and for asyncio (a cancelled task stops waiting). The core keeps a
# wait that timed out for the next call, so slices cost no round trips.
_SLICE_MS = 250
_MAIN_IDENT = threading.main_thread().ident


class Lock:
    """A distributed lock on one name. Create it with :meth:`Client.lock`.

    ``with lock:`` acquires (waiting up to ``blocking_timeout``, raising
    :class:`LockTimeout`) and releases; at exit it raises
    :class:`LockLostError` if the lock was lost inside the block.
    """

    def __init__(self, client: Client, name: Name, ttl: Optional[Duration] = None,
                 blocking_timeout: Optional[Duration] = None, auto_renew: bool = True,
                 max_renewals: Optional[int] = None, max_hold: Optional[Duration] = None,
                 renew_interval: Optional[Duration] = None, on_lost: OnLost = None,
                 **unexpected: NoReturn) -> None:
        check_options(unexpected)
        if not (on_lost is None or on_lost == "interrupt" or callable(on_lost)):
            raise TypeError("on_lost must be None, a callable(lock, reason) or \"interrupt\"")
        self._client, self._name, self._on_lost = client, name, on_lost
        self._blocking_ms = -1 if blocking_timeout is None else to_ms(blocking_timeout, "blocking_timeout", name)
        st, h = _native.lock_new(client._handle(), name)
        if st != OK:
            raise_status(st, f"cannot create lock {fmt_name(name)}", name)
        try:  # None: the core's default. Its setters check every value (EINVAL).
            for what, value, setter in (
                    ("ttl", ttl, _native.lock_set_lease),  # first: renew_interval is checked against it
                    ("renew_interval", renew_interval, _native.lock_set_renew_interval),
                    ("max_hold", max_hold, _native.lock_set_max_hold)):
                if value is not None and (st := setter(h, to_ms(value, what, name))) != OK:
                    raise_status(st, f"{what}={value!r}", name)
            for what, count, set_count in (("max_renewals", max_renewals, _native.lock_set_max_renewals),
                                           ("auto_renew", auto_renew, _native.lock_set_auto_renew)):
                if count is not None and (st := set_count(h, count)) != OK:
                    raise_status(st, f"{what}={count!r}", name)
        except BaseException:
            _native.lock_free(h)
            raise
        self._h = h
        self._id = _native.lock_id(h)
        self._cond = threading.Condition(threading.Lock())
        self._owner: object = None       # the thread ident or asyncio task that holds it here
        self._acquiring = False          # the owner is in the core's acquire
        self._interrupted = 0            # fencing token of the hold on_lost="interrupt" interrupted
        if on_lost is not None:
            client._watch(self)

    # ---- properties -----------------------------------------------------

    @property
    def name(self) -> Name:
        """The lock's name, as given (str or bytes)."""
        return self._name

    @property
    def client(self) -> Client:
        return self._client

    @property
    def ttl(self) -> float:
        """The lease in seconds (renewed to this much by the watchdog)."""
        return _native.lock_lease(self._h) / 1000.0

    @property
    def blocking_timeout(self) -> Optional[float]:
        """Seconds ``with lock:`` waits (None = forever, 0 = try once)."""
        return None if self._blocking_ms < 0 else self._blocking_ms / 1000.0

    def locked(self) -> bool:
        """True when anybody holds the lock (the server's view, one round
        trip), as redis-py's and threading.Lock's locked(). This handle:
        :meth:`owned`."""
        return self._client.inspect(self._name).held

    def owned(self) -> bool:
        """True while this handle holds the lock (and it was not lost). No I/O."""
        return _native.lock_state(self._h) == HELD

    @property
    def lost(self) -> bool:
        """True when the current hold, or the last one once released, was lost."""
        return _native.lock_last_lost_reason(self._h) != _native.WATCHLOCK_LOST_NONE

    @property
    def lost_reason(self) -> Optional[LostReason]:
        """Why the current or last hold was lost (None when it was not)."""
        return LostReason.from_code(_native.lock_last_lost_reason(self._h))

    @property
    def fencing_token(self) -> int:
        """Fencing token of the current (or last) hold; 0 before the first.
        Strictly increases per name across all holders: pass it to the
        storage you protect so it can refuse writes from a stale holder."""
        return _native.lock_fencing_token(self._h)

    @property
    def remaining(self) -> float:
        """Seconds of validity left by the local deadline (conservative); 0 when not held."""
        return _native.lock_remaining_ms(self._h) / 1000.0

    @property
    def hold_count(self) -> int:
        """How many times the lock is held (reentrant acquires); 0 when not held."""
        return _native.lock_hold_count(self._h)

    @property
    def renewals(self) -> int:
        """Successful watchdog renewals in the current hold."""
        return _native.lock_renewals(self._h)

    # ---- acquire / release ---------------------------------------------

    def acquire(self, blocking: bool = True, timeout: Optional[Duration] = -1) -> bool:
        """Acquires the lock, like threading.Lock.acquire: True when acquired,
        False when ``blocking`` is False or ``timeout`` (a duration; -1 =
        wait forever) ran out. Other errors raise (ConnectionError, ...)."""
        wait = wait_ms(blocking, timeout, self._name)
        ident = threading.get_ident()
        return self._acquire(wait, ident, None, sliced=ident == _MAIN_IDENT)

    def _acquire(self, wait: int, owner: object, cancelled: Optional[threading.Event], sliced: bool) -> bool:
        deadline = None if wait < 0 else time.monotonic() + wait / 1000.0
        with self._cond:  # wait for another in-process owner to let go
            while self._owner is not None and self._owner != owner:
                left = None if deadline is None else deadline - time.monotonic()
                if (left is not None and left <= 0) or (cancelled is not None and cancelled.is_set()):
                    return False
                slice_s = _SLICE_MS / 1000.0  # a cancelled asyncio waiter stops within a slice
                self._cond.wait(left if cancelled is None else slice_s if left is None else min(left, slice_s))
            fresh = self._owner is None
            self._owner, self._acquiring = owner, True
        ok = False
        try:
            ok = self._acquire_native(deadline, cancelled, sliced)
        finally:
            with self._cond:
                self._acquiring = False
                if ok:
                    self._owner = owner
                elif fresh or _native.lock_hold_count(self._h) == 0:
                    self._free_guard()
        return ok

    def _acquire_native(self, deadline: Optional[float], cancelled: Optional[threading.Event],
                        sliced: bool) -> bool:
        slicing = sliced or cancelled is not None
        while True:
            if deadline is None:
                wait = _SLICE_MS if slicing else -1
            else:  # ceil: never round a short wait down to "try once"
                wait = max(0, math.ceil((deadline - time.monotonic()) * 1000))
                wait = min(wait, _SLICE_MS) if slicing else wait
            st = _native.lock_acquire(self._h, wait)
            if st == OK:
                return True
            if st == ECLOSED and _util.exiting and threading.current_thread().daemon:
                # The interpreter is exiting and closed the clients: a daemon
                # thread still waiting stays parked, as Python stops daemon
                # threads at exit, instead of failing noisily.
                threading.Event().wait()
            if st != ETIMEDOUT:
                raise_status(st, f"cannot acquire lock {fmt_name(self._name)}", self._name)
            if (deadline is not None and time.monotonic() >= deadline) or (cancelled and cancelled.is_set()):
                return False
            # another slice; in the main thread pending signal handlers run here

    def _free_guard(self) -> None:  # with self._cond
        self._owner = None
        self._cond.notify_all()

    def release(self) -> None:
        """Releases one hold; at the last, deletes the key (only if it still
        holds this hold) and wakes waiters. May be called from any thread.
        Raises LockLostError if the lock was lost, LockNotOwnedError if it is
        not held, ConnectionError if the server could not be told (the core
        retries at the next acquire; the key runs out by its lease)."""
        st = _native.lock_release(self._h)
        with self._cond:
            # ECONN: the core finishes that release later; for this owner it is over.
            if not self._acquiring and (st == ECONN or _native.lock_hold_count(self._h) == 0):
                self._free_guard()
        if st != OK:
            self._raise(st, "release")

    def extend(self, ttl: Optional[Duration] = None) -> None:
        """Sets the lease of the held lock to ``ttl`` from now (None or 0: the
        lock's ttl; another ttl also applies to later renewals).
        LockLostError if it turns out lost, LockNotOwnedError if not held."""
        st = _native.lock_extend(self._h, 0 if ttl is None else to_ms(ttl, "ttl", self._name))
        if st != OK:
            self._raise(st, "extend")

    def _raise(self, st: int, what: str) -> NoReturn:
        code = _native.lock_last_lost_reason(self._h)
        if st == ENOTOWNER and code != _native.WATCHLOCK_LOST_NONE:
            raise self._lost_error(f"cannot {what}", LostReason.from_code(code))
        raise_status(st, f"cannot {what} lock {fmt_name(self._name)}", self._name)

    def _lost_error(self, what: str, reason: Optional[LostReason]) -> LockLostError:
        why = f" ({reason})" if reason else ""
        return LockLostError(f"{what} lock {fmt_name(self._name)}: it was lost{why}",
                             lock_name=self._name, status=ENOTOWNER, reason=reason)

    # ---- context manager ------------------------------------------------

    def __enter__(self) -> Lock:
        ident = threading.get_ident()
        if not self._acquire(self._blocking_ms, ident, None, sliced=ident == _MAIN_IDENT):
            raise self._timeout_error()
        return self

    def _timeout_error(self) -> LockTimeout:
        return LockTimeout(f"lock {fmt_name(self._name)} not acquired within {self._blocking_ms / 1000:g} s",
                           lock_name=self._name, status=ETIMEDOUT)

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[types.TracebackType]) -> None:
        self._exit(exc)

    def _exit(self, exc: Optional[BaseException]) -> None:
        """Releases at the end of a block. A loss or release failure is raised
        when the block succeeded; when the block raised, its exception goes
        on unchanged and the failure is attached to it as a note (PEP 678)."""
        try:
            self.release()
        except Error as err:
            if exc is None:
                raise
            if isinstance(err, LockLostError) and isinstance(exc, LockLostError) and exc.lock_name == self._name:
                return  # the block already learned of this loss (on_lost="interrupt")
            if sys.version_info >= (3, 11):
                exc.add_note(f"watchlock: {err}")
            else:  # pragma: no cover
                exc.__notes__ = [*getattr(exc, "__notes__", []), f"watchlock: {err}"]  # type: ignore[attr-defined]

    # ---- asyncio --------------------------------------------------------

    async def acquire_async(self, blocking: bool = True, timeout: Optional[Duration] = -1) -> bool:
        """Like :meth:`acquire`, awaitable: the wait runs in a worker thread so
        the event loop never blocks. The owner is the current task (reentrant
        per task). If the task is cancelled while waiting, the wait stops and
        a lock acquired meanwhile is released: cancellation never leaks a hold."""
        return await self._acquire_async(wait_ms(blocking, timeout, self._name))

    async def _acquire_async(self, wait: int) -> bool:
        task = asyncio.current_task()
        owner: object = task if task is not None else threading.get_ident()
        cancelled = threading.Event()
        cfut = in_daemon_thread(lambda: self._acquire(wait, owner, cancelled, False))
        try:
            return await asyncio.shield(asyncio.wrap_future(cfut))
        except asyncio.CancelledError:
            cancelled.set()
            # On the concurrent future, not the asyncio one: this runs even
            # if the event loop is gone by the time the worker gets the lock.
            cfut.add_done_callback(self._give_back_if_acquired)
            raise

    def _give_back_if_acquired(self, fut: concurrent.futures.Future[bool]) -> None:
        if not fut.cancelled() and fut.exception() is None and fut.result():
            in_daemon_thread(self._release_quietly)

    def _release_quietly(self) -> None:
        with contextlib.suppress(Error):  # the task that wanted it was cancelled: nobody to tell
            self.release()

    async def __aenter__(self) -> Lock:
        if not await self._acquire_async(self._blocking_ms):
            raise self._timeout_error()
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[types.TracebackType]) -> None:
        interrupted = (isinstance(exc, asyncio.CancelledError) and self._interrupted != 0
                       and self._interrupted == self.fencing_token)
        try:
            await asyncio.shield(asyncio.wrap_future(in_daemon_thread(
                lambda: self._exit(None if interrupted else exc))))
        except LockLostError as lost:
            if not interrupted:
                raise
            self._uncancel()
            raise lost from exc
        if interrupted:  # lost, then released by someone else: still report the loss
            self._uncancel()
            raise self._lost_error("lost", self.lost_reason) from exc

    @staticmethod
    def _uncancel() -> None:
        task = asyncio.current_task()
        if task is not None and hasattr(task, "uncancel"):
            task.uncancel()

    # ---- loss events (dispatcher thread) -------------------------------

    def _on_lost_event(self, code: int) -> None:
        """Runs on the client's dispatcher thread when the core reports a loss."""
        reason = LostReason.from_code(code)
        if self._on_lost == "interrupt":
            self._interrupt(reason)
        elif callable(self._on_lost) and reason is not None:
            try:
                self._on_lost(self, reason)
            except Exception:
                log.exception("watchlock: on_lost callback of lock %s raised", fmt_name(self._name))

    def _interrupt(self, reason: Optional[LostReason]) -> None:
        with self._cond:
            if _native.lock_state(self._h) != LOST:
                return  # released or re-acquired meanwhile
            self._interrupted = _native.lock_fencing_token(self._h)
            owner = self._owner
        if isinstance(owner, asyncio.Task):
            try:
                owner.get_loop().call_soon_threadsafe(owner.cancel)
            except RuntimeError:  # loop closed
                pass
        elif isinstance(owner, int):
            cls = self._interrupt_class(reason)
            if ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(owner), ctypes.py_object(cls)) > 1:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(owner), None)  # as the docs say

    def _interrupt_class(self, reason: Optional[LostReason]) -> type:
        """PyThreadState_SetAsyncExc raises a class with no arguments: make
        one whose instances carry this lock's message."""
        name, why = self._name, f" ({reason})" if reason else ""

        def __init__(exc: LockLostError, *args: object) -> None:
            LockLostError.__init__(exc, f"lock {fmt_name(name)} was lost while held{why}", lock_name=name,
                                   status=ENOTOWNER, reason=reason)

        return type("LockLostError", (LockLostError,), {"__init__": __init__, "__module__": "watchlock"})

    # ---- lifetime -------------------------------------------------------

    def __del__(self) -> None:
        h = self.__dict__.pop("_h", None)
        if h is not None:
            try:
                _native.lock_free(h)  # releases if held; leaves a forked child's copy alone
            except Exception:  # interpreter shutdown
                pass

    def __repr__(self) -> str:
        state = {HELD: "held", LOST: "lost"}.get(_native.lock_state(self._h), "unlocked")
        return f"<watchlock.Lock {fmt_name(self._name)} {state} ttl={self.ttl:g}s>"

    def __reduce__(self) -> NoReturn:
        raise TypeError("watchlock.Lock cannot be pickled: create a Lock in each process")
