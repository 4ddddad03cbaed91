"""watchlock.Lock: one lock handle, with threading.Lock-style methods.

The core's handle keeps every rule (option checks and defaults, waiting,
its hold count, loss, fork); this layer maps its statuses to exceptions and
adds idioms: ``with``, ``async with``, on_lost callables and "interrupt",
and a guard. The core's handle is reentrant for whoever calls it; so that a
Lock shared by threads behaves like a threading.Lock, the thread (or task)
that takes it from free owns it here (``_owner``) until the core's hold
count is back to 0, and the others wait on ``_cond``. Any thread may
release (hand-offs). C calls run outside ``_mu``, without the GIL.

Making a Lock is cheap (``with client.lock(name):`` makes one per block):

- the core's handle is made at its first use (``_h``),
  when the core has already accepted the same options on this client (a set
  of the option values it accepted, per client) and the name is one the core
  takes (non-empty, at most WATCHLOCK_MAX_NAME bytes). Any other lock gets
  its handle at once, so that the core's checks raise from ``client.lock()``
  with the core's message, as before; Python repeats none of them;
- the guard's state is protected by one module-wide mutex (``_mu``, held
  for a few bytecodes at a time, never around a C call that waits); a
  Lock's Condition is made over it only when a thread has to wait for
  another in-process owner;
- durations are converted once per value (``_util.to_ms``);
- attributes live in ``__slots__`` (``__dict__`` stays, for callers' own
  attributes), and the hot C functions are called without SWIG's proxies.
"""
from __future__ import annotations

import asyncio
import ctypes
import importlib
import logging
import math
import sys
import threading
import time
import types
import warnings
from typing import (TYPE_CHECKING, Any, Callable, Coroutine, Iterable, List, NoReturn, Optional, Tuple, Type,
                    TypedDict, Union)

from . import _async, _native, _util
from ._runtime import Runtime
from ._util import (CACHEABLE, ECLOSED, ECONN, ENOTOWNER, ETIMEDOUT, HELD, LOST, OK, Duration, LostReason,
                    Name, ms_cache, fmt_name, raise_status, to_ms, wait_ms)

# The hot path calls the C functions of the SWIG module directly: its
# Python proxies (_native.lock_acquire, ...) add one Python call each.
# Same functions, same arguments and results.
_c = importlib.import_module(f"{__package__}.__native")
_lock_new: Callable[[_native.ClientHandle, Name], Tuple[int, _native.LockHandle]] = _c.lock_new
_lock_free: Callable[[Optional[_native.LockHandle]], None] = _c.lock_free
_lock_abandon: Callable[[Optional[_native.LockHandle]], int] = _c.lock_abandon
_lock_acquire: Callable[[_native.LockHandle, int], int] = _c.lock_acquire
_lock_release: Callable[[_native.LockHandle], int] = _c.lock_release
_lock_hold_count: Callable[[Optional[_native.LockHandle]], int] = _c.lock_hold_count
_lock_state: Callable[[Optional[_native.LockHandle]], int] = _c.lock_state
_LOST_NONE = _native.WATCHLOCK_LOST_NONE
_MAX_NAME = _native.WATCHLOCK_MAX_NAME
#: watchlock_lock_member_status() codes as Lock.members shows them.
MEMBER_VERDICTS = {_native.WATCHLOCK_MEMBER_UNKNOWN: "unknown", _native.WATCHLOCK_MEMBER_GRANTED: "granted",
                   _native.WATCHLOCK_MEMBER_HELD: "held", _native.WATCHLOCK_MEMBER_UNREACHABLE: "unreachable",
                   _native.WATCHLOCK_MEMBER_RESTARTED: "restarted"}
_new_mu = threading.Lock()  # makes lazy handles one at a time: one Lock, one owner
_mu = threading.Lock()      # every Lock's guard state (_owner, _acquiring, _cond)
from .exceptions import Error, FencingTokenUnavailable, InvalidArgument, LockLostError, LockTimeout
from ._renew import RenewOption, renew_option, set_renew

if TYPE_CHECKING:
    from ._client import Client

log = logging.getLogger("watchlock")

#: None, a callable(lock, reason) run on the client's dispatcher thread, or "interrupt".
OnLost = Union[None, str, Callable[["Lock", LostReason], object]]



def use_redis_py_keys(lock: "Lock", no_expiry: bool) -> int:
    """redis_compat's lock: the key named like the lock holds the token (the
    core's name layout, WATCHLOCK_KEYS_NAME), with no expiry if asked (as
    redis-py's timeout=None). A status, before the handle's first hold."""
    st = _native.lock_set_key_layout(lock._h, _native.WATCHLOCK_KEYS_NAME)
    if st == OK and no_expiry:
        st = _native.lock_set_no_expiry(lock._h, 1)
    return int(st)


def set_hold_token(lock: "Lock", text: str) -> int:
    """The token of the lock's next hold (redis-py's acquire(token=...)): a status."""
    return int(_native.lock_set_token(lock._h, text))


class LockOptions(TypedDict, total=False):
    """The keyword options of :meth:`Client.lock`, synchronized() and watchlock.lock()."""
    ttl: Optional[Duration]
    blocking: bool
    blocking_timeout: Optional[Duration]
    auto_renew: bool
    max_renewals: Optional[int]
    max_hold: Optional[Duration]
    renew_interval: Union[None, Duration, str]  # also "1/3", "25%": a fraction of the ttl
    on_lost: OnLost


def check_options(options: Iterable[str]) -> None:
    """TypeError for keyword options a Lock does not take; for ``timeout=``,
    which means the lease in redis-py and the wait elsewhere, it names both."""
    unknown = sorted(set(options) - set(LockOptions.__annotations__))
    if "timeout" in unknown:
        raise TypeError(
            "lock() got an unexpected keyword argument 'timeout': for how long `with lock:` and acquire() wait "
            "say blocking_timeout=; for the lease say ttl=, but note that a ttl is renewed by the watchdog "
            "while the lock is held, whereas redis-py's timeout= is a hard cap on the hold: for that say "
            "ttl=..., auto_renew=False (or keep renewing and cap it with max_hold= or max_renewals=), "
            "or use watchlock.redis_compat.Lock, which takes redis-py's arguments as they are")
    if unknown:
        raise TypeError(f"lock() got unexpected keyword argument(s): {', '.join(unknown)}")


#: (ttl ms, renew_interval ms, max_hold ms, max_renewals, auto_renew) as the core's setters take
#: them; None = not given (the core's default).
_Options = Tuple[Optional[int], Optional[RenewOption], Optional[int], Optional[int], bool]
_OPTION_NAMES = ("ttl", "renew_interval", "max_hold", "max_renewals", "auto_renew")
_SETTERS: Tuple[Callable[[_native.LockHandle, Any], int], ...] = (
    _c.lock_set_lease,  # first: renew_interval is checked against it
    set_renew,  # _renew.py: an interval in ms, or a (num, den) fraction of the lease
    _c.lock_set_max_hold, _c.lock_set_max_renewals, _c.lock_set_auto_renew)


def _new_handle(runtime: Runtime, name: Name, options: _Options,
                given: Optional[Tuple[object, ...]],
                new: Optional[Callable[[_native.ClientHandle, Name], Tuple[int, _native.LockHandle]]] = None
                ) -> _native.LockHandle:
    """The core's handle for `name` with `options` set; the core checks every
    value (EINVAL) and raises with its message, naming the value as `given`.
    `new` makes the handle of another lock kind (_kinds.py); None: a plain lock."""
    st, h = (new or _lock_new)(runtime.handle(), name)
    if st != OK:
        raise_status(st, f"cannot create lock {fmt_name(name)}", name)
    try:
        # Lock waits in slices (_acquire_native): the calls of one acquire are
        # one wait for the core (a queued kind keeps its place, the stats count
        # one timeout when it ends without the lock, at _forget_wait)
        if (st := _native.lock_set_wait_slices(h, 1)) != OK:
            raise_status(st, f"cannot create lock {fmt_name(name)}", name)
        for i, arg in enumerate(options):
            if arg is not None and (st := _SETTERS[i](h, arg)) != OK:
                raise_status(st, f"{_OPTION_NAMES[i]}={(given[i] if given is not None else arg)!r}", name)
    except BaseException:
        _lock_free(h)
        raise
    return h


# Long C waits are cut into slices where something must be able to stop
# them: in the main thread (signal handlers such as Ctrl-C run between
# slices) and for asyncio (a cancelled task stops waiting). The core keeps a
# wait that timed out for the next call, so slices cost no round trips.
_SLICE_MS = 250
#: acquire()'s "argument not given" (UNSET for the kinds' acquire, _kinds.py)
UNSET: Any = object()
_UNSET = UNSET
_MAIN_IDENT = threading.main_thread().ident


def _timeout_arg(timeout: Any, blocking_timeout: Any) -> Any:
    """acquire()'s timeout, also given as redis-py's blocking_timeout=."""
    if blocking_timeout is _UNSET:
        return timeout
    if timeout is not _UNSET:
        raise TypeError("acquire() takes timeout= or blocking_timeout= (redis-py's name for it), not both")
    return blocking_timeout
_get_ident = threading.get_ident


class Lock:
    """A distributed lock on one name. Create it with :meth:`Client.lock`.

    ``with lock:`` acquires (waiting up to ``blocking_timeout``, raising
    :class:`LockTimeout`) and releases; at exit it raises
    :class:`LockLostError` if the lock was lost inside the block.
    ``label``: as :meth:`Client.lock`'s.
    """

    __slots__ = ("_client", "_runtime", "_name", "_on_lost", "_blocking_ms", "_bt_ms", "_options", "_hnd", "_cond", "_owner",
                 "_acquiring", "_interrupted", "__dict__", "__weakref__")

    #: The other lock kinds (_kinds.py) set these: the core's constructor of
    #: their handle (None: watchlock_lock_new) and their acquire(h, wait_ms).
    _native_new: Optional[Callable[[_native.ClientHandle, Any], Tuple[int, _native.LockHandle]]] = None
    _acquire_fn: Callable[[_native.LockHandle, int], int] = staticmethod(_lock_acquire)

    def __init__(self, client: Client, name: Name, ttl: Optional[Duration] = None,
                 blocking_timeout: Optional[Duration] = None, auto_renew: bool = True,
                 blocking: bool = True,
                 max_renewals: Optional[int] = None, max_hold: Optional[Duration] = None,
                 renew_interval: Union[None, Duration, str] = None, on_lost: OnLost = None,
                 label: Optional[str] = None, **unexpected: NoReturn) -> None:
        if unexpected:
            check_options(unexpected)
        if not (on_lost is None or on_lost == "interrupt" or callable(on_lost)):
            raise TypeError("on_lost must be None, a callable(lock, reason) or \"interrupt\"")
        # The client's shared state (_runtime.py); of the Client itself a
        # Lock uses only its public methods.
        runtime = client._runtime  # declared by HasRuntime, Client's base
        if runtime.closed:
            runtime.handle()  # ClientClosedError now, not at the first use
        self._client, self._runtime, self._name, self._on_lost = client, runtime, name, on_lost
        # _bt_ms: blocking_timeout alone; _blocking_ms: what `with` and a bare
        # acquire() wait (0 = try once when blocking=False), as redis-py's Lock.
        self._bt_ms = -1 if blocking_timeout is None else to_ms(blocking_timeout, "blocking_timeout", name)
        self._blocking_ms = self._bt_ms if blocking else 0
        # The options as the core's setters take them (None: the core's default).
        lease = None
        if ttl is not None:  # to_ms(ttl), its cache looked up in line
            lease = ms_cache.get((type(ttl), ttl)) if type(ttl) in CACHEABLE else None
            if lease is None:
                lease = to_ms(ttl, "ttl", name)
        options = (lease,
                   None if renew_interval is None else renew_option(renew_interval, name),
                   None if max_hold is None else to_ms(max_hold, "max_hold", name),
                   max_renewals, auto_renew)
        self._options: _Options = options
        self._hnd: Optional[_native.LockHandle] = None   # the core's handle, made at first use (_h)
        self._cond: Optional[threading.Condition] = None  # made over _mu by the first waiter
        self._owner: object = None       # the thread ident or asyncio task that holds it here
        self._acquiring = False          # the owner is in the core's acquire
        self._interrupted = 0            # fencing token of the hold on_lost="interrupt" interrupted
        # Lazy only for what the core already accepted: these options on this
        # client (compared as values: max_renewals must be an int and
        # auto_renew a bool, as True == 1 would stand in for the other type),
        # and a name it takes (an ASCII str has as many bytes as characters).
        type_name = type(name)
        if (on_lost is not None or label is not None or self._native_new is not None
                or options not in runtime.accepted
                or runtime.forks != _util.forks
                or type(auto_renew) is not bool or not (max_renewals is None or type(max_renewals) is int)
                or not ((type_name is bytes or (type_name is str and name.isascii()))
                        and 0 < len(name) <= _MAX_NAME)):
            # The core checks now, with the values as given in its messages.
            self._hnd = _new_handle(runtime, name, options, (ttl, renew_interval, max_hold, max_renewals, auto_renew),
                                    self._native_new)
            runtime.accept(options)
            if on_lost is not None:
                runtime.watch(_native.lock_id(self._hnd), self)
        if label is not None:
            self._set_label(label)

    def _set_label(self, label: str) -> None:
        """The owner label recorded at each acquire (Client.lock(label=))."""
        name = self._name
        if not isinstance(label, str):
            raise TypeError(f"label must be a str, not {type(label).__name__}")
        if "\0" in label:  # C would cut the label at the NUL
            raise InvalidArgument(f"label of lock {fmt_name(name)} contains a NUL character", lock_name=name)
        st = _native.lock_set_owner_label(self._h, label)
        if st != OK:
            raise_status(st, f"label of lock {fmt_name(name)}", name)

    @property
    def _h(self) -> _native.LockHandle:
        """The core's handle, made at the first use of this Lock."""
        h = self._hnd
        return h if h is not None else self._make_handle()

    def _make_handle(self) -> _native.LockHandle:
        with _new_mu:  # two threads using a fresh Lock at once must get one handle
            h = self._hnd
            if h is None:
                h = self._hnd = _new_handle(self._runtime, self._name, self._options, None, self._native_new)
        return h

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
        lease = self._options[0]
        if self._hnd is None and lease is not None:
            return lease / 1000.0  # what the core was told (and accepted); no handle needed
        return _native.lock_lease(self._h) / 1000.0

    @property
    def blocking_timeout(self) -> Optional[float]:
        """Seconds ``with lock:`` and a bare acquire() wait (None = forever, 0 = try once)."""
        return None if self._bt_ms < 0 else self._bt_ms / 1000.0

    def locked(self) -> bool:
        """True when anybody holds the lock (the server's view, one round
        trip), as redis-py's and threading.Lock's locked(). This handle:
        :meth:`owned`."""
        return self._client.inspect(self._name).held

    def owned(self) -> bool:
        """True while this handle holds the lock (and it was not lost). No I/O."""
        return self._hnd is not None and _lock_state(self._h) == HELD

    @property
    def lost(self) -> bool:
        """True when the current hold, or the last one once released, was lost."""
        return self._hnd is not None and _native.lock_last_lost_reason(self._h) != _LOST_NONE

    @property
    def lost_reason(self) -> Optional[LostReason]:
        """Why the current or last hold was lost (None when it was not)."""
        return LostReason.from_code(_native.lock_last_lost_reason(self._h)) if self._hnd is not None else None

    @property
    def fencing_token(self) -> int:
        """Fencing token of the current (or last) hold; 0 before the first.
        Strictly increases per name across all holders: pass it to the
        storage you protect so it can refuse writes from a stale holder.
        On a quorum client the first read of a hold raises the token on the
        members that granted it (one round trip); FencingTokenUnavailable
        when that could not be confirmed within the hold's validity."""
        if self._hnd is None:
            return 0
        token = _native.lock_fencing_token(self._hnd)
        if token < 0:
            raise FencingTokenUnavailable(
                f"fencing token of lock {fmt_name(self._name)} unavailable: {_native.strerror(-token)}",
                lock_name=self._name, status=-token)
        return token

    @property
    def members(self) -> List[str]:
        """On a quorum client (``Client([url, ...])``): what each member
        answered to this lock's last acquire, in the order of the URLs:
        "granted", "held" (by another owner), "unreachable", "restarted"
        (counted out by the restart rule for one lease) or "unknown". One
        entry on a plain client; [] before the first acquire."""
        if self._hnd is None:
            return []
        h = self._hnd
        n = _native.client_member_count(self._runtime.handle())
        return [MEMBER_VERDICTS.get(_native.lock_member_status(h, i), "unknown") for i in range(n)]

    @property
    def remaining(self) -> float:
        """Seconds of validity left by the local deadline (conservative); 0 when not held."""
        return _native.lock_remaining_ms(self._h) / 1000.0 if self._hnd is not None else 0.0

    @property
    def hold_count(self) -> int:
        """How many times the lock is held (reentrant acquires); 0 when not held."""
        return _native.lock_hold_count(self._h) if self._hnd is not None else 0

    @property
    def renewals(self) -> int:
        """Successful watchdog renewals in the current hold."""
        return _native.lock_renewals(self._h) if self._hnd is not None else 0

    # ---- acquire / release ---------------------------------------------

    def acquire(self, blocking: Optional[bool] = None, timeout: Optional[Duration] = _UNSET, *,
                blocking_timeout: Optional[Duration] = _UNSET) -> bool:
        """Acquires the lock, like threading.Lock.acquire: True when acquired,
        False when it was not free and ``blocking`` is False, or the wait
        ran out. Other errors raise (ConnectionError, ...).

        Without arguments it waits as the lock was made to, like redis-py's
        acquire(): ``blocking_timeout`` (None = until free), or tries once
        when made with ``blocking=False``. Arguments override that:
        ``blocking=False`` tries once, ``blocking=True`` waits up to the
        lock's ``blocking_timeout``, ``timeout`` (a duration; -1 or None =
        forever) waits that long instead. ``blocking_timeout=`` is redis-py's
        name for ``timeout`` (None = forever), accepted here too."""
        if blocking_timeout is not _UNSET:  # (the common call pays no extra function call)
            timeout = _timeout_arg(timeout, blocking_timeout)
        wait = self._wait_for(blocking, timeout)
        ident = threading.get_ident()
        return self._acquire(wait, ident, None, sliced=ident == _MAIN_IDENT)

    def _wait_for(self, blocking: Optional[bool], timeout: Optional[Duration]) -> int:
        """acquire()'s arguments as the core's wait in ms (-1 forever, 0 once)."""
        if timeout is _UNSET:
            if blocking is None:
                return self._blocking_ms
            return self._bt_ms if blocking else 0
        return wait_ms(True if blocking is None else blocking, timeout, self._name)

    def _acquire(self, wait: int, owner: object, cancelled: Optional[threading.Event], sliced: bool) -> bool:
        deadline = None if wait < 0 else time.monotonic() + wait / 1000.0
        with _mu:
            held_by = self._owner
            if held_by is not None and held_by != owner and not self._wait_guard(owner, deadline, cancelled):
                return False
            fresh = self._owner is None
            self._owner, self._acquiring = owner, True
        try:
            ok = self._acquire_native(deadline, cancelled, sliced)
        except BaseException:
            self._acquire_failed(fresh)
            raise
        if ok:
            # No _mu needed: while _acquiring is set nobody else changes _owner
            # (release() leaves the guard alone), so this one store is all.
            self._acquiring = False
        else:
            self._acquire_failed(fresh)
        return ok

    def _acquire_failed(self, fresh: bool) -> None:
        """The owner's acquire failed: it keeps the guard only if it still
        holds (reentrant: an earlier hold of the same owner)."""
        with _mu:
            self._acquiring = False
            if fresh or self._hnd is None or _lock_hold_count(self._hnd) == 0:
                self._free_guard()

    def _wait_guard(self, owner: object, deadline: Optional[float], cancelled: Optional[threading.Event]) -> bool:
        """With _mu held: waits for another in-process owner to let go. False
        when the deadline passed or the wait was cancelled first."""
        cond = self._cond
        if cond is None:  # the first waiter: until now nobody needed one
            cond = self._cond = threading.Condition(_mu)
        while self._owner is not None and self._owner != owner:
            left = None if deadline is None else deadline - time.monotonic()
            if (left is not None and left <= 0) or (cancelled is not None and cancelled.is_set()):
                return False
            slice_s = _SLICE_MS / 1000.0  # a cancelled asyncio waiter stops within a slice
            cond.wait(left if cancelled is None else slice_s if left is None else min(left, slice_s))
        return True

    def _acquire_native(self, deadline: Optional[float], cancelled: Optional[threading.Event],
                        sliced: bool) -> bool:
        # The handle waits in slices (watchlock_lock_set_wait_slices, set when
        # it was made): a wait that ends without the lock, or is interrupted,
        # is given up now: a queued kind leaves the queue (a ghost at its head
        # would hold up the waiters behind it) and the core counts one timeout
        try:
            ok = self._acquire_slices(deadline, cancelled, sliced)
        except BaseException:
            self._forget_wait()
            raise
        if not ok:
            self._forget_wait()
        return ok

    def _acquire_slices(self, deadline: Optional[float], cancelled: Optional[threading.Event],
                        sliced: bool) -> bool:
        slicing = sliced or cancelled is not None
        h = self._hnd
        if h is None:
            h = self._make_handle()
        while True:
            if deadline is None:
                wait = _SLICE_MS if slicing else -1
            else:  # ceil: never round a short wait down to "try once"
                wait = max(0, math.ceil((deadline - time.monotonic()) * 1000))
                wait = min(wait, _SLICE_MS) if slicing else wait
            st = self._acquire_fn(h, wait)
            if st == OK:
                return True
            if st != ETIMEDOUT:
                self._acquire_error(st)
            if (deadline is not None and time.monotonic() >= deadline) or (cancelled and cancelled.is_set()):
                return False
            # another slice; in the main thread pending signal handlers run here

    def _acquire_error(self, st: int) -> NoReturn:
        if st == ECLOSED and _util.exiting and threading.current_thread().daemon:
            # The interpreter is exiting and closed the clients: a daemon
            # thread still waiting stays parked, as Python stops daemon
            # threads at exit, instead of failing noisily.
            threading.Event().wait()
        try:
            raise_status(st, f"cannot acquire lock {fmt_name(self._name)}", self._name)
        except Error as e:
            e.members = self._member_verdicts()
            raise

    def _member_verdicts(self) -> Optional[List[str]]:
        """Lock.members for an exception: None on a plain client or when unreadable."""
        try:
            members = self.members
        except Error:
            return None
        return members if len(members) > 1 else None

    def _free_guard(self) -> None:  # with self._mu
        self._owner = None
        if self._cond is not None:
            self._cond.notify_all()

    def release(self) -> None:
        """Releases one hold; at the last, deletes the key (only if it still
        holds this hold) and wakes waiters. May be called from any thread.
        Raises LockLostError if the lock was lost, LockNotOwnedError if it is
        not held, ConnectionError if the server could not be told (the core
        retries at the next acquire; the key runs out by its lease)."""
        h = self._hnd
        if h is None:
            h = self._make_handle()
        st = _lock_release(h)
        with _mu:
            # ECONN: the core finishes that release later; for this owner it is over.
            if not self._acquiring and (st == ECONN or _lock_hold_count(h) == 0):
                self._owner = None  # _free_guard(), inlined: once per cycle
                if self._cond is not None:
                    self._cond.notify_all()
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
        ident = _get_ident()
        if self._blocking_ms < 0:
            # Fast path of _acquire() for the usual `with client.lock(name):`
            # (wait forever): one try in line; anything but a free lock, or a
            # first slice that timed out, goes on in _acquire().
            h = self._hnd
            if h is None:
                h = self._make_handle()
            with _mu:
                free = self._owner is None
                if free:
                    self._owner, self._acquiring = ident, True
            if free:
                try:
                    st = self._acquire_fn(h, _SLICE_MS if ident == _MAIN_IDENT else -1)
                except BaseException:
                    self._acquire_failed(True)
                    raise
                if st == OK:
                    self._acquiring = False  # as in _acquire(): nobody else changes _owner meanwhile
                    return self
                self._acquire_failed(True)
                if st != ETIMEDOUT:
                    self._acquire_error(st)
        if not self._acquire(self._blocking_ms, ident, None, sliced=ident == _MAIN_IDENT):
            raise self._timeout_error()
        return self

    def _timeout_error(self) -> LockTimeout:
        e = LockTimeout(f"lock {fmt_name(self._name)} not acquired within {self._blocking_ms / 1000:g} s",
                        lock_name=self._name, status=ETIMEDOUT)
        e.members = self._member_verdicts()
        return e

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[types.TracebackType]) -> None:
        if exc is not None:
            self._exit(exc)
            return
        h = self._hnd  # release(), in line
        if h is None:
            h = self._make_handle()
        st = _lock_release(h)
        with _mu:
            if not self._acquiring and (st == ECONN or _lock_hold_count(h) == 0):
                self._owner = None
                if self._cond is not None:
                    self._cond.notify_all()
        if st != OK:
            self._raise(st, "release")

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

    async def acquire_async(self, blocking: Optional[bool] = None, timeout: Optional[Duration] = _UNSET, *,
                            blocking_timeout: Optional[Duration] = _UNSET) -> bool:
        """Like :meth:`acquire` (the same arguments, and without them the
        lock's own ``blocking``/``blocking_timeout``), awaitable, without
        blocking the event loop and without a thread per waiting task
        (watchlock/_async.py): one try on the client's asyncio worker thread,
        then a place in the name's queue, woken by the holder's release. The
        owner is the current task (reentrant per task). If the task is
        cancelled while waiting, the wait stops and a lock acquired meanwhile
        is released: cancellation never leaks a hold."""
        return await self._acquire_async(self._wait_for(blocking, _timeout_arg(timeout, blocking_timeout)))

    def _acquire_async(self, wait: int) -> Coroutine[Any, Any, bool]:
        return _async.acquire(self._runtime, self._name, self._acquire_for_task, self._forget_wait, self.release,
                              wait)

    def _acquire_for_task(self, wait: int, owner: object, cancelled: Optional[threading.Event]) -> bool:
        return self._acquire(wait, owner, cancelled, False)

    def _forget_wait(self) -> None:
        """Drops the wait the core kept for a timed-out acquire (its subscription)."""
        h = self._hnd
        if h is not None:
            _native.lock_forget_wait(h)

    async def release_async(self) -> None:
        """:meth:`release`, awaitable: the round trip runs on the client's
        asyncio worker thread. If the awaiting task is cancelled, the release
        still completes."""
        await _async.run(self._runtime, self.release)

    async def extend_async(self, ttl: Optional[Duration] = None) -> None:
        """:meth:`extend`, awaitable (the client's asyncio worker thread)."""
        await _async.run(self._runtime, lambda: self.extend(ttl))

    async def locked_async(self) -> bool:
        """:meth:`locked`, awaitable (the client's asyncio worker thread)."""
        return bool(await _async.run(self._runtime, self.locked))

    async def owned_async(self) -> bool:
        """:meth:`owned` (no I/O), as a coroutine for symmetry with redis-py's asyncio Lock."""
        return self.owned()

    async def __aenter__(self) -> Lock:
        if not await self._acquire_async(self._blocking_ms):
            raise self._timeout_error()
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[types.TracebackType]) -> None:
        interrupted = (isinstance(exc, asyncio.CancelledError) and self._interrupted != 0
                       and self._interrupted == _native.lock_fencing_token(self._h))  # raw: may be < 0
        try:
            await _async.run(self._runtime, lambda: self._exit(None if interrupted else exc))
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
        with _mu:
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
        # A dropped Lock is not an unlock (`if client.lock(n).acquire(...): job()`
        # drops the Lock as soon as acquire returns): the core keeps a held
        # lock, no longer renewed, until its lease ends or the client closes
        # (watchlock_lock_abandon, no I/O), and the drop is reported.
        h = getattr(self, "_hnd", None)  # None also when __init__ failed before setting it
        if h is None:
            return
        self._hnd = None
        try:
            dropped = _lock_abandon(h)  # leaves a forked child's copy alone
        except Exception:  # interpreter shutdown
            return
        if dropped:
            try:
                warnings.warn(f"watchlock: Lock {fmt_name(self._name)} was garbage-collected while held; "
                              "the lock stays held, no longer renewed, until its lease ends or the client "
                              "closes: release() it, or hold it with `with`", ResourceWarning, source=self)
            except Exception:  # a filter that turns warnings into errors: __del__ must not raise
                pass

    def __repr__(self) -> str:
        state = {HELD: "held", LOST: "lost"}.get(
            _native.lock_state(self._h) if self._hnd is not None else _native.WATCHLOCK_UNLOCKED, "unlocked")
        return f"<watchlock.Lock {fmt_name(self._name)} {state} ttl={self.ttl:g}s>"

    def __reduce__(self) -> NoReturn:
        raise TypeError("watchlock.Lock cannot be pickled: create a Lock in each process")
