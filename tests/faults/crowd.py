#!/usr/bin/env python3
"""A crowd of waiters for fault scenario s (issue 29.14): one process whose
N threads each wait for the fair lock NAME (no history: they never get it
before they die). Prints "queued" once all N are in the queue (the server's
queue length reached at least N), then waits to be SIGKILLed.

python3 crowd.py URL NAME N LEASE_MS
"""
from __future__ import annotations

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import die_with_parent  # noqa: E402

import watchlock  # noqa: E402


def main() -> int:
    url, name, n, lease_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    die_with_parent()
    client = watchlock.Client(url)
    for _ in range(n):
        lock = client.fair_lock(name, ttl=lease_ms / 1000.0)
        threading.Thread(target=lock.acquire, daemon=True).start()
    while client.name_info(name).queue_length < n:
        time.sleep(0.01)
    print("queued", flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
