"""watchlock.MultiLock: several names held all or nothing, with one lease.

The core does the work (core/src/locks/multi.c): one hold per name, renewed
in the watchdog's rounds; acquire takes every name or none (one script when
the names share a server or a Cluster slot, else in one global order with
rollback, so two multi-locks over overlapping names never deadlock);
the loss of any name is the loss of the whole hold, reported once. This
class is a :class:`Lock` whose core handle is a multi-lock: ``with``,
``async with``, acquire/release/extend, on_lost, ``owned()`` work as for one
name; it is also a decorator.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple, TypeVar, cast

from . import _native
from ._decorate import decorate
from ._lock import Lock
from ._util import Name

if TYPE_CHECKING:
    from ._client import Client

F = TypeVar("F", bound=Callable[..., Any])


def _multi_new(client_handle: _native.ClientHandle, names: Tuple[Name, ...]) -> Tuple[int, _native.LockHandle]:
    return _native.multi_lock_new(client_handle, list(names))


class MultiLock(Lock):
    """All-or-nothing lock over several names: :meth:`Client.multi_lock`.

    ``name`` is the tuple of names; :attr:`names` the same as a list.
    :attr:`fencing_tokens` has one token per name (in the order given), each
    from that name's counter; :attr:`fencing_token` is the first name's.
    :attr:`lost_name` tells which name's loss lost the hold."""

    __slots__ = ("_names", "_made_with")
    _native_new = staticmethod(_multi_new)

    def __init__(self, client: Client, names: Iterable[Name], **options: Any) -> None:
        if isinstance(names, (str, bytes)):
            raise TypeError("multi_lock() takes a list of names, not one name (for one name use lock())")
        given = tuple(names)
        for n in given:
            if not isinstance(n, (str, bytes)):
                raise TypeError(f"lock name must be str or bytes, not {type(n).__name__}")
        self._names: Tuple[Name, ...] = given
        self._made_with: Tuple[Client, Tuple[Name, ...], Dict[str, Any]] = (client, given, dict(options))
        super().__init__(client, cast(Any, given), **options)  # the Lock's name: the tuple

    @property
    def names(self) -> List[Name]:
        """The names, in the order given."""
        return list(self._names)

    @property
    def fencing_tokens(self) -> List[int]:
        """One fencing token per name (order as given) for the current or
        last hold; 0 each before the first."""
        h = self._h
        return [_native.lock_fencing_token_at(h, i) for i in range(len(self._names))]

    @property
    def lost_name(self) -> Optional[Name]:
        """The name whose loss lost the current or last hold; None if it was not lost."""
        raw = _native.lock_lost_name(self._h)
        if raw is None:
            return None
        for n in self._names:
            if (n.encode() if isinstance(n, str) else n) == raw:
                return n
        return raw

    def locked(self) -> bool:
        """True when anybody holds any of the names (one round trip per name)."""
        return any(self._client.inspect(n).held for n in self._names)

    def __call__(self, fn: F) -> F:
        """Decorator: runs ``fn`` (a function or a coroutine function) holding
        a fresh multi-lock over the same names with the same options, one per
        call (_decorate.py: the rules of every decorator)."""
        client, names, options = self._made_with
        return decorate(fn, lambda args, kwargs: MultiLock(client, names, **options))

    def __repr__(self) -> str:
        return f"<watchlock.MultiLock {list(self._names)!r} {'held' if self.owned() else 'not held'}>"
