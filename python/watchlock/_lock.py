"""watchlock.Lock: one lock handle, with threading.Lock-style methods.

Ownership, in two layers:
  - Between processes (and clients) the C core's handle is the owner: its
    random token is in Redis while it holds the lock; the watchdog renews it.
  - Inside one process the core handle is reentrant for whoever calls it
    (a hold count, not per thread). So that a Lock object shared by several
    threads still excludes them, as a threading.Lock would, this layer keeps
    a small guard: the thread (or asyncio task) that takes the lock from free
    owns it; others wait here as they would wait for another process. The
    owner may acquire again (reentrant, one release per acquire); any thread
    may release (like threading.Lock), which allows hand-offs.

Guard state (under self._cond): _owner (thread/task key, None when free),
_count (holds), _busy (acquire/release calls in flight). The guard is freed
when _count and _busy are both 0. C calls run outside it, with the GIL
released.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import logging
import os
import threading
import time
import types
from typing import TYPE_CHECKING, Any, Callable, Optional, Type, Union

from . import _native, _util
from ._util import ECONN, ENOTOWNER, ETIMEDOUT, HELD, LOST, OK, LostReason, Name, fmt_name
from .exceptions import ClientClosedError, Error, ForkedError, LockLostError, LockNotOwnedError, LockTimeout

if TYPE_CHECKING:
    from ._client import Client

log = logging.getLogger("watchlock")

OnLost = Union[None, str, Callable[["Lock", LostReason], Any]]

# Long C waits are cut into slices where something must be able to stop
# them: in the main thread (signal handlers such as Ctrl-C run between
# slices) and for asyncio (a cancelled task stops waiting).
_SLICE = 0.25
_MAIN_IDENT = threading.main_thread().ident


def _add_note(exc: BaseException, note: str) -> None:
    if hasattr(exc, "add_note"):  # Python 3.11+ (PEP 678)
        exc.add_note(note)
    else:  # pragma: no cover - older Pythons: keep it reachable at least
        notes = list(getattr(exc, "__notes__", []))
        notes.append(note)
        try:
            exc.__notes__ = notes  # type: ignore[attr-defined]
        except AttributeError:
            pass


class Lock:
    """A distributed lock on one name. Create it with :meth:`Client.lock`.

    ``with lock:`` acquires (waiting up to the lock's ``timeout``, raising
    :class:`LockTimeout`) and releases; at exit it raises
    :class:`LockLostError` if the lock was lost inside the block.
    """

    def __init__(self, client: "Client", name: Name, *, ttl: Any = 30.0, auto_renew: bool = True,
                 max_renewals: Optional[int] = None, max_hold: Any = None,
                 renew_interval: Any = None, on_lost: OnLost = None, timeout: Any = -1) -> None:
        self._h: Any = None
        self._name_bytes = _util.check_name(name)
        self._name: Name = name if isinstance(name, str) else self._name_bytes
        name = self._name
        if on_lost is not None and on_lost != "interrupt" and not callable(on_lost):
            raise TypeError("on_lost must be None, a callable(lock, reason) or \"interrupt\"")
        self._on_lost = on_lost
        lease_ms = _util.to_ms(ttl, "ttl", name)
        self._timeout = _util.wait_seconds(True, timeout, name)
        if not isinstance(auto_renew, bool):
            raise TypeError("auto_renew must be a bool")
        if max_renewals is not None:
            if isinstance(max_renewals, bool) or not isinstance(max_renewals, int):
                raise TypeError("max_renewals must be an int or None")
            if max_renewals < 0:
                raise _util.InvalidArgument(
                    f"max_renewals must be >= 0, got {max_renewals} (lock {fmt_name(name)})", lock_name=name)
        max_hold_ms = 0 if max_hold is None else _util.to_ms(max_hold, "max_hold", name)
        interval_ms = 0 if renew_interval is None else _util.to_ms(renew_interval, "renew_interval", name)
        if interval_ms and interval_ms >= lease_ms:
            raise _util.InvalidArgument(
                f"renew_interval ({interval_ms / 1000:g} s) must be shorter than ttl ({lease_ms / 1000:g} s) "
                f"(lock {fmt_name(name)})", lock_name=name)

        self._client = client
        self._ttl = lease_ms / 1000.0
        self._cond = threading.Condition(threading.Lock())
        self._owner: Any = None
        self._count = 0
        self._busy = 0
        self._gen = 0                # +1 at each fresh hold (count 0 -> 1)
        self._owner_thread: Optional[int] = None
        self._owner_task: Optional[tuple] = None   # (loop, task) when held by asyncio
        self._lost_gen = 0           # the hold (gen) seen lost, 0 = none
        self._lost_reason: Optional[LostReason] = None
        self._interrupted_gen = 0

        h = client._new_lock_handle(self._name_bytes, name)
        try:
            for setter, value, what in (
                    (_native.lock_set_lease, lease_ms, "ttl"),
                    (_native.lock_set_auto_renew, int(auto_renew and max_renewals != 0), "auto_renew"),
                    (_native.lock_set_renew_interval, interval_ms, "renew_interval"),
                    (_native.lock_set_max_renewals, max_renewals or 0, "max_renewals"),
                    (_native.lock_set_max_hold, max_hold_ms, "max_hold")):
                st = setter(h, value)
                if st != OK:
                    _util.raise_status(st, f"cannot set {what} of lock {fmt_name(name)}", name)
        except BaseException:
            _native.lock_free(h)
            raise
        self._h = h
        self._id: int = _native.lock_id(h)
        if on_lost is not None:
            client._watch(self)

    # ---- properties -----------------------------------------------------

    @property
    def name(self) -> Name:
        """The lock's name, as given (str or bytes)."""
        return self._name

    @property
    def client(self) -> "Client":
        return self._client

    @property
    def ttl(self) -> float:
        """The lease in seconds (renewed to this much by the watchdog)."""
        return self._ttl

    @property
    def timeout(self) -> Optional[float]:
        """Seconds ``with lock:`` waits (None = forever)."""
        return self._timeout

    def _handle(self) -> Any:
        """The core handle, after checking this process may use it."""
        if self._client._pid != os.getpid():
            raise ForkedError(
                f"lock {fmt_name(self._name)} belongs to the parent process (pid {self._client._pid}); "
                "a forked child never owns, renews or releases its parent's locks: open a new Client",
                lock_name=self._name, status=_util.EFORKED)
        if self._client._closed:
            raise ClientClosedError(f"lock {fmt_name(self._name)}: its client is closed",
                                    lock_name=self._name, status=_util.ECLOSED)
        return self._h

    def _state(self) -> int:
        if self._h is None or self._client._pid != os.getpid():
            return _util.UNLOCKED
        return _native.lock_state(self._h)

    def locked(self) -> bool:
        """True while this Lock holds the lock (and it was not lost).

        Whether anybody holds the name: :meth:`Client.inspect`."""
        return self._state() == HELD

    @property
    def lost(self) -> bool:
        """True when the current (or, once released, the last) hold was lost."""
        return self._state() == LOST or (self._gen > 0 and self._lost_gen == self._gen)

    @property
    def lost_reason(self) -> Optional[LostReason]:
        """Why the current or last hold was lost (None when it was not)."""
        if self._state() == LOST:
            return LostReason.from_code(_native.lock_lost_reason(self._h)) or self._lost_reason
        return self._lost_reason if self.lost else None

    @property
    def fencing_token(self) -> int:
        """Fencing token of the current (or last) hold; 0 before the first.
        Strictly increases per name across all holders: pass it to the
        storage you protect so it can refuse writes from a stale holder."""
        if self._h is None or self._client._pid != os.getpid():
            return 0
        return _native.lock_fencing_token(self._h)

    @property
    def remaining(self) -> float:
        """Seconds of validity left by the local deadline (conservative); 0 when not held."""
        if self._h is None or self._client._pid != os.getpid():
            return 0.0
        return _native.lock_remaining_ms(self._h) / 1000.0

    @property
    def hold_count(self) -> int:
        """How many times the lock is held (reentrant acquires); 0 when not held."""
        return self._count

    @property
    def renewals(self) -> int:
        """Successful watchdog renewals in the current hold."""
        if self._h is None or self._client._pid != os.getpid():
            return 0
        return _native.lock_renewals(self._h)

    # ---- acquire / release ---------------------------------------------

    def acquire(self, blocking: bool = True, timeout: Any = -1) -> bool:
        """Acquires the lock, like threading.Lock.acquire: True when acquired,
        False when ``blocking`` is False or ``timeout`` (seconds; -1 = wait
        forever) ran out. Other errors raise (ConnectionError, ...)."""
        wait = _util.wait_seconds(blocking, timeout, self._name)
        ident = threading.get_ident()
        return self._acquire(wait, ident, None, None, sliced=ident == _MAIN_IDENT)

    def _acquire(self, wait: Optional[float], owner: Any, cancelled: Optional[threading.Event],
                 task: Optional[tuple], sliced: bool) -> bool:
        h = self._handle()
        deadline = None if wait is None else time.monotonic() + wait
        with self._cond:
            # Wait for the in-process owner (if another thread/task) to let go.
            while self._owner is not None and self._owner != owner:
                if cancelled is not None and cancelled.is_set():
                    return False
                if deadline is None:
                    self._cond.wait(_SLICE if cancelled is not None else None)
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(min(left, _SLICE) if cancelled is not None else left)
            if self._count > 0 and _native.lock_state(h) == LOST:
                # Re-entering a hold that was lost: the outer block no longer
                # has the lock; do not silently start a new hold under it.
                raise self._lost_error("cannot re-acquire")
            self._owner = owner
            self._busy += 1
        ok = False
        try:
            ok = self._acquire_native(h, deadline, cancelled, sliced)
        finally:
            with self._cond:
                self._busy -= 1
                if ok:
                    if self._count == 0:
                        self._gen += 1
                        self._owner_thread = threading.get_ident() if task is None else None
                        self._owner_task = task
                        self._interrupted_gen = 0
                    self._owner = owner
                    self._count += 1
                self._maybe_free_guard()
        return ok

    def _acquire_native(self, h: Any, deadline: Optional[float], cancelled: Optional[threading.Event],
                        sliced: bool) -> bool:
        slicing = sliced or cancelled is not None
        while True:
            if deadline is None:
                wait_ms = int(_SLICE * 1000) if slicing else -1
            else:
                left = max(0.0, deadline - time.monotonic())
                if slicing:
                    left = min(left, _SLICE)
                wait_ms = int(left * 1000 + 0.999)  # ceil: never round a short wait down to "try once"
            st = _native.lock_acquire(h, wait_ms)
            if st == OK:
                return True
            if st == _util.ECLOSED and _util.exiting and threading.current_thread().daemon:
                # The interpreter is exiting and closed the clients: a daemon
                # thread still waiting just stays parked, as Python stops
                # daemon threads at exit, instead of failing noisily.
                threading.Event().wait()
            if st != ETIMEDOUT:
                _util.raise_status(st, f"cannot acquire lock {fmt_name(self._name)}", self._name)
            if deadline is not None and time.monotonic() >= deadline:
                return False
            if cancelled is not None and cancelled.is_set():
                return False
            # Another slice; in the main thread pending signal handlers run here.

    def _maybe_free_guard(self) -> None:
        if self._count == 0 and self._busy == 0 and self._owner is not None:
            self._owner = None
            self._owner_thread = None
            self._owner_task = None
            self._cond.notify()

    def release(self) -> None:
        """Releases one hold; at the last, deletes the key (only if it still
        holds this handle's token) and wakes waiters. May be called from any
        thread. Raises LockLostError if the lock was lost, LockNotOwnedError
        if it is not held, ConnectionError if the server could not be told
        (the hold is dropped locally and the key runs out by its lease)."""
        h = self._handle()
        with self._cond:
            if self._count == 0:
                if self._gen > 0 and self._lost_gen == self._gen:
                    raise self._lost_error("cannot release")  # e.g. an on_lost callback released it
                raise LockNotOwnedError(f"cannot release lock {fmt_name(self._name)}: not held",
                                        lock_name=self._name, status=ENOTOWNER)
            if _native.lock_state(h) == LOST:
                self._mark_lost(_native.lock_lost_reason(h))
            self._count -= 1
            self._busy += 1
        try:
            st = _native.lock_release(h)
            if st != OK:
                self._raise_release(st, h)
        finally:
            with self._cond:
                self._busy -= 1
                self._maybe_free_guard()

    def _raise_release(self, st: int, h: Any) -> None:
        if st == ENOTOWNER:
            with self._cond:
                lost = self._gen > 0 and self._lost_gen == self._gen
            if lost:
                raise self._lost_error("cannot release")
            _util.raise_status(st, f"cannot release lock {fmt_name(self._name)}", self._name)
        if st == ECONN:
            _util.raise_status(st, f"release of lock {fmt_name(self._name)} not confirmed by the server "
                                   "(dropped locally; the key runs out by its lease)", self._name)
        _util.raise_status(st, f"cannot release lock {fmt_name(self._name)}", self._name)

    def _mark_lost(self, code: int) -> None:
        """Records that the current hold was lost (caller holds self._cond)."""
        if self._gen > 0 and self._lost_gen != self._gen:
            self._lost_gen = self._gen
            self._lost_reason = LostReason.from_code(code)

    def _lost_error(self, what: str) -> LockLostError:
        reason = self._lost_reason
        if self._h is not None and self._state() == LOST:
            reason = LostReason.from_code(_native.lock_lost_reason(self._h)) or reason
        why = f" ({reason})" if reason else ""
        return LockLostError(f"{what} lock {fmt_name(self._name)}: it was lost{why}",
                             lock_name=self._name, status=ENOTOWNER, reason=reason)

    def extend(self, ttl: Any = None) -> None:
        """Sets the lease of the held lock to ``ttl`` seconds from now (the
        lock's ttl when None; a new ttl also applies to later renewals).
        LockLostError if it turns out lost, LockNotOwnedError if not held."""
        ms = 0 if ttl is None else _util.to_ms(ttl, "ttl", self._name)
        h = self._handle()
        st = _native.lock_extend(h, ms)
        if st == OK:
            if ms:
                self._ttl = ms / 1000.0
            return
        if st == ENOTOWNER and _native.lock_state(h) == LOST:
            with self._cond:
                self._mark_lost(_native.lock_lost_reason(h))
            raise self._lost_error("cannot extend")
        _util.raise_status(st, f"cannot extend lock {fmt_name(self._name)}", self._name)

    # ---- context manager ------------------------------------------------

    def __enter__(self) -> "Lock":
        if not self.acquire(timeout=-1 if self._timeout is None else self._timeout):
            raise self._timeout_error()
        return self

    def _timeout_error(self) -> LockTimeout:
        return LockTimeout(f"lock {fmt_name(self._name)} not acquired within {self._timeout or 0:g} s",
                           lock_name=self._name, status=ETIMEDOUT)

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[types.TracebackType]) -> None:
        self._exit(exc)

    def _exit(self, exc: Optional[BaseException]) -> None:
        """Releases at the end of a block. A loss or release failure is raised
        when the block succeeded; when the block raised, its exception goes
        on unchanged and the failure is attached to it as a note."""
        try:
            self.release()
        except LockLostError as lost:
            if exc is None:
                raise
            if isinstance(exc, LockLostError) and exc.lock_name == self._name:
                return  # the block already learned of this loss (on_lost="interrupt")
            _add_note(exc, f"watchlock: {lost}")
        except Error as err:
            if exc is None:
                raise
            _add_note(exc, f"watchlock: {err}")

    # ---- asyncio --------------------------------------------------------

    async def acquire_async(self, blocking: bool = True, timeout: Any = -1) -> bool:
        """Like :meth:`acquire`, awaitable: the wait runs in a worker thread so
        the event loop never blocks. The owner is the current task (reentrant
        per task). If the task is cancelled while waiting, the wait stops and
        a lock acquired meanwhile is released: cancellation never leaks a hold."""
        wait = _util.wait_seconds(blocking, timeout, self._name)
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        owner = ("task", id(task)) if task is not None else ("thread", threading.get_ident())
        cancelled = threading.Event()
        cfut = _util.executor().submit(self._acquire, wait, owner, cancelled,
                                       (loop, task) if task is not None else None, False)
        try:
            return await asyncio.shield(asyncio.wrap_future(cfut, loop=loop))
        except asyncio.CancelledError:
            cancelled.set()
            # On the concurrent future, not the asyncio one: this runs even
            # if the event loop is gone by the time the worker gets the lock.
            cfut.add_done_callback(self._give_back_if_acquired)
            raise

    def _give_back_if_acquired(self, fut: "concurrent.futures.Future[bool]") -> None:
        if fut.cancelled() or fut.exception() is not None or not fut.result():
            return
        _util.executor().submit(self._release_quietly)

    def _release_quietly(self) -> None:
        try:
            self.release()
        except Exception:  # the caller is gone; nothing to tell
            log.debug("watchlock: releasing lock %s after cancellation failed", fmt_name(self._name),
                      exc_info=True)

    async def __aenter__(self) -> "Lock":
        if not await self.acquire_async(timeout=-1 if self._timeout is None else self._timeout):
            raise self._timeout_error()
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[types.TracebackType]) -> None:
        interrupted = (isinstance(exc, asyncio.CancelledError) and self._interrupted_gen != 0
                       and self._interrupted_gen == self._gen)
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(_util.executor(), self._exit, None if interrupted else exc)
        try:
            await asyncio.shield(fut)
        except LockLostError as lost:
            if interrupted:
                self._uncancel()
                raise lost from exc
            raise
        if interrupted:  # lost, then released by someone else: still report the loss
            self._uncancel()
            raise self._lost_error("lost") from exc

    @staticmethod
    def _uncancel() -> None:
        task = asyncio.current_task()
        if task is not None and hasattr(task, "uncancel"):
            task.uncancel()

    # ---- loss events (dispatcher thread) -------------------------------

    def _on_lost_event(self, code: int) -> None:
        """Runs on the client's dispatcher thread when the core reports a loss."""
        reason = LostReason.from_code(code)
        with self._cond:
            h = self._h
            current = h is not None and _native.lock_state(h) == LOST
            if current:
                self._mark_lost(code)
            gen = self._gen
        on_lost = self._on_lost
        if on_lost == "interrupt":
            if current:
                self._interrupt(gen, reason)
        elif on_lost is not None:
            try:
                on_lost(self, reason)
            except Exception:
                log.exception("watchlock: on_lost callback of lock %s raised", fmt_name(self._name))

    def _interrupt(self, gen: int, reason: Optional[LostReason]) -> None:
        with self._cond:
            if self._gen != gen or self._count == 0:
                return  # released or re-acquired meanwhile
            self._interrupted_gen = gen
            thread, task = self._owner_thread, self._owner_task
        if task is not None:
            loop, t = task
            try:
                loop.call_soon_threadsafe(t.cancel)
            except RuntimeError:  # loop closed
                pass
            return
        if thread is None:
            return
        cls = self._interrupt_class(reason)
        n = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(cls))
        if n > 1:  # cannot happen for a valid id; undo as the docs say
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), None)

    def _interrupt_class(self, reason: Optional[LostReason]) -> type:
        """PyThreadState_SetAsyncExc raises a class with no arguments: make
        one whose instances carry this lock's message."""
        name, why = self._name, f" ({reason})" if reason else ""
        message = f"lock {fmt_name(name)} was lost while held{why}"

        def __init__(self: LockLostError, *args: Any) -> None:
            LockLostError.__init__(self, message, lock_name=name, status=ENOTOWNER, reason=reason)

        return type("LockLostError", (LockLostError,), {"__init__": __init__, "__module__": "watchlock"})

    # ---- lifetime -------------------------------------------------------

    def __del__(self) -> None:
        h = self.__dict__.get("_h")
        if h is None:
            return
        self._h = None
        client = self.__dict__.get("_client")
        if client is None or client._pid != os.getpid():
            return  # forked child: leave the parent's lock alone
        try:
            _native.lock_free(h)  # releases (best effort) if still held
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self) -> str:
        state = {HELD: "held", LOST: "lost"}.get(self._state(), "unlocked")
        return f"<watchlock.Lock {fmt_name(self._name)} {state} ttl={self._ttl:g}s>"

    def __reduce__(self) -> Any:
        raise TypeError("watchlock.Lock cannot be pickled: create a Lock in each process")

