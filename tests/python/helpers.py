"""Helpers shared by the tests and the worker processes they start."""
from __future__ import annotations

import os
import sys
from typing import Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from redis_server import RedisServer  # noqa: E402


class RedisAt(RedisServer):
    """RedisServer.command() for a server someone else started (by port)."""

    def __init__(self, port: int, password: Optional[str] = None):  # noqa: D107 - no temp dir, no process
        self.port = port
        self.password = password
        self.proc = None


def lock_key(name: str | bytes) -> bytes:
    """The Redis key of a lock name (core/src/keys.c: escape %, {, })."""
    data = name.encode() if isinstance(name, str) else name
    esc = data.replace(b"%", b"%25").replace(b"{", b"%7B").replace(b"}", b"%7D")
    return b"watchlock:{" + esc + b"}"
