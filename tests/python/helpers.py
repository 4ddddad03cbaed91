"""Helpers shared by the tests and the worker processes they start."""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from redis_server import RedisServer  # noqa: E402


class RedisAt(RedisServer):
    """RedisServer.command() for a server someone else started (by port)."""

    def __init__(self, port: int, password: Optional[str] = None):  # noqa: D107 - no temp dir, no process
        self.port = port
        self.password = password
        self.proc = None


def lock_key(name: str | bytes) -> bytes:
    """The Redis key of a lock name (core/src/proto/keys.c: escape %, {, })."""
    data = name.encode() if isinstance(name, str) else name
    esc = data.replace(b"%", b"%25").replace(b"{", b"%7B").replace(b"}", b"%7D")
    return b"watchlock:{" + esc + b"}"


def watch_holder(lock, token: bytes, read_new: Callable[[], object], seconds: float, renew_interval: float) -> str:
    """After a failover: polls for `seconds`; the holder may own the lock only
    while the key on the new master (read_new()) holds its token; a mismatch
    must be followed by the loss report within one renewal interval (+1 s).
    Returns "kept" or "lost". (Sentinel and Cluster tests.)"""
    mismatch_since = None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = read_new()
        owned = lock.owned()  # read after the key: a renewal in between can only make it ours
        if lock.lost or not owned:
            return "lost"
        if value != token:
            mismatch_since = mismatch_since or time.monotonic()
            late = time.monotonic() - mismatch_since
            assert late < renew_interval + 1.0, (
                f"the holder still owns the lock {late:.1f} s after the new master "
                f"showed {value!r} instead of its token")
        else:
            mismatch_since = None
        time.sleep(0.02)
    return "lost" if lock.lost else "kept"


def release_subscribers(server, name: str | bytes) -> int:
    """PUBSUB NUMSUB of a lock's release channel on server: >= 1 once a
    waiter of the name waits (subscribed), the state a test waits for
    instead of sleeping ("let it block")."""
    return server.command("PUBSUB", "NUMSUB", lock_key(name) + b":released")[1]
