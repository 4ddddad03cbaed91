"""The state a Client and its Locks share: the core's client handle, the
closed flag, the lock options the core accepted, and the lost-event
dispatcher.

Layering (tests/python/test_layering.py keeps it): _util, exceptions <
_runtime < _lock < _client < __init__. A Client owns one Runtime
(``Client._runtime``, declared by :class:`HasRuntime` here); a Lock gets it
from the Client it is made for and uses only the Runtime, never the Client's
own members. Loss events reach a Lock through :class:`LostListener`, the one
method of a Lock the Runtime calls.
"""
from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any, Optional, Protocol, Set

from . import _native, _util
from ._util import ECLOSED, ETIMEDOUT, OK, Name, fmt_name
from .exceptions import ClientClosedError

log = logging.getLogger("watchlock")


class LostListener(Protocol):
    """What the dispatcher calls when the core reports that a lock was lost
    (implemented by Lock)."""

    @property
    def name(self) -> Name: ...

    def _on_lost_event(self, code: int) -> None: ...


class Runtime:
    """One core client: its handle, whether it is closed, and the loss
    dispatcher thread. Thread-safe."""

    def __init__(self, h: _native.ClientHandle, url: str) -> None:
        self.h = h
        self.url = url  # redacted: for messages
        self.closed = False
        self.pid = os.getpid()  # only for close(): see there
        self.mu = threading.Lock()
        self.watched: "weakref.WeakValueDictionary[int, LostListener]" = weakref.WeakValueDictionary()
        self.dispatcher: Optional[threading.Thread] = None
        # Lock options the core accepted on this client (Lock._options): a
        # Lock with options in here gets its core handle at its first use.
        self.accepted: Set[Any] = set()
        self.forks = _util.forks  # a Lock made after a fork asks the core at once (EFORKED)
        self.async_hub: Any = None  # _async.Hub, made at the first asyncio use (issue 25.2)

    def handle(self) -> _native.ClientHandle:
        """The core's client; never after close(), which may free it (a
        forked child's copy: the core answers EFORKED)."""
        if self.closed:
            raise ClientClosedError(f"client for {self.url} is closed", status=ECLOSED)
        return self.h

    def accept(self, options: Any) -> None:
        """Remembers lock options the core accepted (bounded: forgets all when full)."""
        if len(self.accepted) >= 256:
            self.accepted.clear()
        self.accepted.add(options)

    def watch(self, lock_id: int, listener: LostListener) -> None:
        """Delivers the core's loss events for the lock `lock_id` (the core's
        watchlock_lock_id) to `listener`, held weakly."""
        with self.mu:
            h = self.handle()
            self.watched[lock_id] = listener
            if self.dispatcher is not None:
                return
            st = _native.client_enable_lost_events(h, 1)
            if st != OK:
                _util.raise_status(st, "cannot enable lost events")
            # A private handle keeps the core's client memory alive until the
            # dispatcher has made its last call, whenever close() runs.
            st, keepalive = _native.lock_new(h, b"watchlock-python:dispatcher")
            if st != OK:
                _util.raise_status(st, "cannot start the lost-lock dispatcher")
            t = threading.Thread(target=_dispatch, args=(h, keepalive, self.watched),
                                 name="watchlock-on-lost", daemon=True)
            t.start()
            self.dispatcher = t

    def close(self) -> None:
        """Closes the core's client (releasing what its locks hold, best
        effort) and stops the dispatcher. Idempotent. In a forked child it
        does nothing: the core leaves the parent's client alone, and self.mu
        may have been held by a parent thread."""
        if self.pid != os.getpid():
            return
        with self.mu:
            if self.closed:
                return
            self.closed = True
            dispatcher = self.dispatcher
        _native.client_close(self.h)  # wakes the dispatcher (ECLOSED)
        if dispatcher is not None and dispatcher is not threading.current_thread():
            dispatcher.join(timeout=30)


class HasRuntime:
    """Base of Client: declares the Runtime its Locks share, so that a Lock
    reads it here and not among the Client's own members."""

    _runtime: Runtime


def _dispatch(h: _native.ClientHandle, keepalive: _native.LockHandle,
              watched: "weakref.WeakValueDictionary[int, LostListener]") -> None:
    """The dispatcher thread: waits (GIL released) for the core's loss events
    and runs each lock's on_lost as Python code. Holds no reference to the
    Client or the Runtime, so an unused Client can still be collected (and
    closed)."""
    try:
        while True:
            st, lock_id, reason = _native.client_next_lost_event(h, -1)
            if st == OK:
                lock = watched.get(lock_id)
                if lock is not None:
                    try:
                        lock._on_lost_event(reason)
                    except Exception:
                        log.exception("watchlock: handling the loss of lock %s failed", fmt_name(lock.name))
                    del lock
            elif st != ETIMEDOUT:
                break  # ECLOSED: the client was closed
    finally:
        _native.lock_free(keepalive)
