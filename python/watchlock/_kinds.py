"""The queued lock kinds: FairLock, Semaphore, and RWLock's ReadLock/WriteLock.

Each is a :class:`watchlock.Lock` whose core handle comes from another
constructor of the C core (watchlock_fair_lock_new, watchlock_semaphore_new,
watchlock_rwlock_new); every rule (the waiter queue in Redis, the direct
hand-off, permits, phase-fair readers and writers, kinds on one name) lives
in the core. What this layer adds is the Lock's idioms (``with``,
``async with``, on_lost, exceptions) and, for a semaphore, the number of
permits one acquire takes.

A name used as another kind raises :class:`watchlock.WrongTypeError`
(WATCHLOCK_EWRONGTYPE), as does a semaphore made with a ``permits`` count
that differs from the name's.

One object is one holder, like a Lock: threads of one process that share a
FairLock (or a Semaphore, a ReadLock) take turns on it. For several holders
in one process (readers that overlap, several permits held by different
threads) make one object each; a decorator (``@client.fair_lock(name)``,
``@rw.read_lock()``) makes one per call.
"""
from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, NamedTuple, Optional, Tuple, TypeVar

from . import _native
from ._decorate import decorate
from ._lock import UNSET as _UNSET, Lock
from ._util import OK, Duration, Name, fmt_name, raise_status

if TYPE_CHECKING:
    from ._client import Client

_c = importlib.import_module(f"{__package__}.__native")
# The C functions of the SWIG module, without its Python proxies (as _lock.py).
_fair_lock_new: Callable[[_native.ClientHandle, Name], Tuple[int, _native.LockHandle]] = _c.fair_lock_new
_semaphore_new: Callable[[_native.ClientHandle, Name, int], Tuple[int, _native.LockHandle]] = _c.semaphore_new
_semaphore_acquire: Callable[[_native.LockHandle, int, int], int] = _c.semaphore_acquire
_set_wait_slices: Callable[[_native.LockHandle, int], int] = _c.lock_set_wait_slices


def _sliced(made: Tuple[int, _native.LockHandle]) -> Tuple[int, _native.LockHandle]:
    """A new handle of a queued kind that keeps its place in the queue when
    one of the Lock's wait slices (_lock.py, _SLICE_MS) times out: the core
    takes a waiter whose acquire timed out out of the queue otherwise, and a
    fair waiter in the main thread would go to the back every 250 ms."""
    st, h = made
    if st == OK:
        _set_wait_slices(h, 1)
    return st, h

_rwlock_new: Callable[[_native.ClientHandle, Name, int], Tuple[int, _native.LockHandle]] = _c.rwlock_new
F = TypeVar("F", bound=Callable[..., Any])


class _Kind(Lock):
    """What the kinds share: the arguments they were made with (a decorator
    makes a fresh object per call with them), being a decorator, and waits
    that keep their place in the queue across the Lock's wait slices."""

    _kind_label = "lock"

    def __init__(self, client: Client, name: Name, **options: Any) -> None:
        self._made_with: Tuple[Client, Name, Dict[str, Any]] = (client, name, dict(options))
        super().__init__(client, name, **options)

    def _fresh(self) -> _Kind:
        client, name, options = self._made_with
        return type(self)(client, name, **options)

    def __call__(self, fn: F) -> F:
        """Decorator: runs ``fn`` holding a fresh lock of this kind, name and
        options (one per call, so that calls from several threads or tasks
        are holders of their own)."""
        return decorate(fn, lambda args, kwargs: self._fresh())

    @property
    def kind(self) -> str:
        """"fair", "semaphore", "read" or "write" (the core's watchlock_lock_kind)."""
        return _KIND_NAMES.get(_native.lock_kind(self._h), "lock")

    def __repr__(self) -> str:
        return f"<watchlock.{type(self).__name__} {fmt_name(self._name)} {'held' if self.owned() else 'unlocked'}>"

    def __reduce__(self) -> Any:
        raise TypeError(f"watchlock.{type(self).__name__} cannot be pickled: create one in each process")


class FairLock(_Kind):
    """A fair lock (FIFO, direct hand-off): waiters get it in the order they
    asked, each release (or a holder's expiry) hands it to the oldest live
    waiter, and nobody barges in. Made with :meth:`Client.fair_lock`; the
    same options, methods and exceptions as :class:`Lock`."""

    _native_new = staticmethod(lambda client, name: _sliced(_fair_lock_new(client, name)))


class Semaphore(_Kind):
    """A semaphore with leased permits: at most ``permits`` permits of the
    name are held at once, across every process. Made with
    :meth:`Client.semaphore`. One acquire takes ``k`` permits (one hold,
    renewed by the watchdog, lost as a whole); release() gives them back.
    FIFO: a waiter at the head that wants more permits than are free blocks
    later ones (no starvation of large requests)."""

    def __init__(self, client: Client, name: Name, permits: int = 0, **options: Any) -> None:
        if type(permits) is not int:
            raise TypeError(f"permits must be an int >= 1 (or 0: the name's existing count), not "
                            f"{type(permits).__name__}")
        if permits < 0:
            raise ValueError(f"permits must be >= 1 (or 0: the name's existing count), got {permits} (negative)")
        self._permits = permits
        self._k = 1
        super().__init__(client, name, **options)
        self._made_with[2]["permits"] = permits

    def _native_new(self, client: _native.ClientHandle, name: Name) -> Tuple[int, _native.LockHandle]:
        return _sliced(_semaphore_new(client, name, self._permits))

    def _acquire_fn(self, h: _native.LockHandle, wait: int) -> int:
        return _semaphore_acquire(h, self._k, wait)

    @staticmethod
    def _check_k(k: int, what: str = "permits") -> int:
        if type(k) is not int:
            raise TypeError(f"{what} (the number of permits to take) must be an int >= 1, not {type(k).__name__}")
        if k < 1:
            raise ValueError(f"{what} (the number of permits to take) must be >= 1, got {k} "
                             f"({'zero' if k == 0 else 'negative'})")
        return k

    @staticmethod
    def _check_blocking(blocking: Optional[bool]) -> None:
        # acquire(k, ...) was the signature before threading.Semaphore's: say so
        if type(blocking) is int and blocking not in (0, 1):
            raise TypeError(f"blocking must be True or False, not {blocking}: the number of permits is "
                            f"keyword-only (acquire(permits={blocking}))")

    def _take(self, permits: int, k: Optional[int]) -> None:
        if k is not None:  # the keyword of earlier versions
            if permits != 1:
                raise TypeError("acquire() takes permits= or k= (its former name), not both")
            permits = self._check_k(k, "k")
        self._k = self._check_k(permits)

    def acquire(self, blocking: Optional[bool] = None,
                timeout: Optional[Duration] = _UNSET, *, permits: int = 1,
                blocking_timeout: Optional[Duration] = _UNSET, k: Optional[int] = None) -> bool:
        """threading.Semaphore.acquire(blocking=True, timeout=None): takes
        ``permits`` permits (keyword-only, 1 by default) as one hold: True
        when taken, False when the wait ran out; without blocking/timeout
        it waits as the semaphore was made to (its blocking_timeout, None =
        until free). ``blocking_timeout=`` is accepted for ``timeout``
        (redis-py's name). WrongTypeError when the name is another kind or
        ``permits`` is more than its count."""
        self._check_blocking(blocking)
        self._take(permits, k)
        return super().acquire(blocking, timeout, blocking_timeout=blocking_timeout)

    async def acquire_async(self, blocking: Optional[bool] = None,
                            timeout: Optional[Duration] = _UNSET, *, permits: int = 1,
                            blocking_timeout: Optional[Duration] = _UNSET, k: Optional[int] = None) -> bool:
        self._check_blocking(blocking)
        self._take(permits, k)
        return await super().acquire_async(blocking, timeout, blocking_timeout=blocking_timeout)

    def take(self, k: int) -> Semaphore:
        """For ``with sem.take(3):``: the next ``with`` takes ``k`` permits."""
        self._k = self._check_k(k)
        return self

    @property
    def permits(self) -> int:
        """The ``permits`` this object was made with (0: the name's own)."""
        return self._permits

    @property
    def held_permits(self) -> int:
        """The permits this semaphore holds (or last asked for)."""
        return _native.lock_permits(self._h)


class ReadLock(_Kind):
    """The read side of a read-write lock: many readers at once, never with
    a writer (:meth:`RWLock.read_lock`)."""

    _native_new = staticmethod(lambda client, name: _sliced(_rwlock_new(client, name, 0)))


class WriteLock(_Kind):
    """The write side of a read-write lock: one writer, no readers
    (:meth:`RWLock.write_lock`)."""

    _native_new = staticmethod(lambda client, name: _sliced(_rwlock_new(client, name, 1)))

    def downgrade(self) -> None:
        """Turns the held write lock into a read share without a gap (no
        writer can get in between); release() then releases the read share.
        There is no upgrade: two readers upgrading at once would each wait
        for the other to leave."""
        st = _native.rwlock_downgrade(self._h)
        if st != OK:
            self._raise(st, "downgrade")


class RWLock:
    """A read-write lock on one name (:meth:`Client.rwlock`): ``read_lock()``
    and ``write_lock()`` make lock objects of its two sides. Phase-fair: a
    waiting writer blocks readers that arrive after it, and the readers
    queued before it enter together once it is done."""

    def __init__(self, client: Client, name: Name) -> None:
        self._client, self._name = client, name

    @property
    def name(self) -> Name:
        return self._name

    def read_lock(self, **options: Any) -> ReadLock:
        """A new read side (the options of :meth:`Client.lock`)."""
        return ReadLock(self._client, self._name, **options)

    def write_lock(self, **options: Any) -> WriteLock:
        """A new write side (the options of :meth:`Client.lock`)."""
        return WriteLock(self._client, self._name, **options)

    def __repr__(self) -> str:
        return f"<watchlock.RWLock {fmt_name(self._name)}>"


_KIND_NAMES: Dict[int, str] = {
    getattr(_native, "WATCHLOCK_KIND_PLAIN", 0): "lock",
    getattr(_native, "WATCHLOCK_KIND_FAIR", 1): "fair",
    getattr(_native, "WATCHLOCK_KIND_SEMAPHORE", 2): "semaphore",
    getattr(_native, "WATCHLOCK_KIND_READ", 3): "read",
    getattr(_native, "WATCHLOCK_KIND_WRITE", 4): "write",
    getattr(_native, "WATCHLOCK_KIND_MULTI", 5): "multi",
}


def set_permits(client: Client, name: Name, permits: int) -> None:
    """Admin: changes the number of permits of semaphore ``name``."""
    if type(permits) is not int or permits < 1:
        raise TypeError("permits must be an int >= 1")
    st = _native.client_set_permits(client._runtime.handle(), name, permits)
    if st != OK:
        raise_status(st, f"cannot set the permits of semaphore {fmt_name(name)}", name)


_NAME_KINDS: Dict[int, Optional[str]] = {
    getattr(_native, "WATCHLOCK_KIND_NONE", -1): None,
    getattr(_native, "WATCHLOCK_KIND_PLAIN", 0): "lock",
    getattr(_native, "WATCHLOCK_KIND_FAIR", 1): "fair",
    getattr(_native, "WATCHLOCK_KIND_SEMAPHORE", 2): "semaphore",
    getattr(_native, "WATCHLOCK_KIND_RWLOCK", 6): "rwlock",
}


class NameInfo(NamedTuple):
    """What the server knows of a name, whatever its kind (:meth:`Client.name_info`)."""
    kind: Optional[str]        #: None (not in use), "lock", "fair", "semaphore" or "rwlock"
    permits: int               #: a semaphore's N (1 for a lock or fair lock, 0 for an rwlock)
    in_use: int                #: permits in use, holders, or readers (rwlock)
    holders: int               #: holds now (each permit acquisition, reader share or writer)
    writer: bool               #: a writer holds the read-write lock
    queue_length: int          #: waiters in the queue
    oldest_wait: float         #: seconds the oldest waiter has waited (0 when none)
    fence: int                 #: the name's fencing counter
    remaining: Optional[float]  #: longest lease left among the holders, s (None: no expiry)


def name_info(client: Client, name: Name) -> NameInfo:
    st, info = _native.client_name_info(client._runtime.handle(), name)
    if st != OK:
        raise_status(st, f"cannot inspect name {fmt_name(name)}", name)
    try:
        remaining_ms = _native.name_info_remaining_ms(info)
        return NameInfo(_NAME_KINDS.get(_native.name_info_kind(info), "unknown"),
                        _native.name_info_permits(info), _native.name_info_in_use(info),
                        _native.name_info_holders(info), bool(_native.name_info_writer(info)),
                        _native.name_info_queue_length(info), _native.name_info_oldest_wait_ms(info) / 1000.0,
                        _native.name_info_fence(info), None if remaining_ms < 0 else remaining_ms / 1000.0)
    finally:
        _native.name_info_free(info)
