"""The queue scripts' hand-off rules as Python users meet them (issue 29
items 12 and 13; the C tests are tests/c/test_queue_scripts.c): a waiter
whose permits a lowered count can no longer give is refused, not left to
block the queue; a fair-lock holder that shortened its lease with extend()
and died is handed on after its short lease, not its first one."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

import watchlock
from kinds_helpers import expect_line, stop, wait_queue

HERE = os.path.dirname(os.path.abspath(__file__))


def test_set_permits_below_the_head_waiter(client, name):
    client.set_permits(name, 3)
    a = client.semaphore(name, ttl=10)
    assert a.acquire(permits=1)
    big, small = client.semaphore(name, ttl=10), client.semaphore(name, ttl=10)
    out = {}

    def take(key, sem, k):
        try:
            out[key] = sem.acquire(timeout=20, permits=k)
        except watchlock.Error as e:
            out[key] = e

    tb = threading.Thread(target=take, args=("big", big, 3))
    tb.start()
    wait_queue(client, name, 1)
    ts = threading.Thread(target=take, args=("small", small, 1))
    ts.start()
    wait_queue(client, name, 2)  # the small one waits behind the big one (FIFO)
    client.set_permits(name, 2)
    info = client.name_info(name)
    assert (info.queue_length, info.in_use) == (0, 2)  # set_permits itself served the small one
    ts.join(30)
    tb.join(30)
    assert out["small"] is True
    assert isinstance(out["big"], watchlock.InvalidArgument), out["big"]
    assert "3 permits" in str(out["big"])
    small.release()
    a.release()


HOLDER = """
import sys, watchlock
c = watchlock.Client()
l = c.fair_lock(sys.argv[1], ttl=30)
assert l.acquire()
l.extend(1.5)
print("held", flush=True)
sys.stdin.read()
"""


def test_shortened_fair_holder_handed_on(redis_server, client, name):
    env = dict(os.environ, WATCHLOCK_URL=redis_server.url)
    p = subprocess.Popen([sys.executable, "-c", HOLDER, name], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        expect_line(p, "held")
        waiter = client.fair_lock(name, ttl=5)
        assert not waiter.acquire(blocking=False)
        t0 = time.monotonic()
        p.kill()
        p.wait(30)
        # half the first lease: before the fix the waiter got it after 30 s
        assert waiter.acquire(timeout=15)
        print(f"handed on {time.monotonic() - t0:.2f} s after the SIGKILL")
        waiter.release()
    finally:
        stop(p)
