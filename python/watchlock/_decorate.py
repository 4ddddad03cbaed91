"""The one decorator of the package: a function run while holding a lock.

``client.synchronized(...)``, ``watchlock.synchronized(...)`` and every lock
object that is also a decorator (``@client.fair_lock(name)``,
``@client.semaphore(...)``, ``@rw.read_lock()``, ``@rw.write_lock()``,
``@client.multi_lock([...])``) go through :func:`decorate`, so they share
one set of rules:

- each call holds a lock of its own, made for that call by ``make`` from the
  call's arguments (synchronized formats the name from them; a lock object
  makes a fresh copy of itself, same kind, name(s) and options). Calls from
  several threads or tasks are holders of their own, and a call that
  re-enters the decorated function waits for the outer call's hold like any
  other holder (a LockTimeout after blocking_timeout), whatever the kind;
- the options (ttl, blocking_timeout, ...) are those the lock was made with:
  LockTimeout when not acquired in time, LockLostError at exit if lost;
- a coroutine function is locked with ``async with`` (the wait does not block
  the event loop); any other callable with ``with``. Exceptions propagate,
  the lock is released first; ``functools.wraps`` keeps the name and
  docstring.
"""
from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, Callable, Dict, Tuple, TypeVar

if TYPE_CHECKING:
    from ._lock import Lock

F = TypeVar("F", bound=Callable[..., Any])


def decorate(fn: F, make: Callable[[Tuple[Any, ...], Dict[str, Any]], "Lock"]) -> F:
    """``fn`` wrapped so that each call runs holding ``make(args, kwargs)``."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            async with make(args, kwargs):
                return await fn(*args, **kwargs)
        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with make(args, kwargs):
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]
