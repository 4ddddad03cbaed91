"""Redlock quorum from Python, issue 29 items 6 and 7, where users meet them:
a release is OK once a majority of members is known free of the hold's key
(an error answer on a minority no longer fails it), and a waiter kept out
only by a restart window gets in when the window closes. The rules live in
C (tests/c/test_quorum_contention.c); these are the binding's view.
"""
from __future__ import annotations

import threading
import time

import watchlock
from helpers import lock_key
from quorum import Quorum

OPTS = "?connect_timeout=1s&command_timeout=1s"


def urls_of(q: Quorum):
    return [u + OPTS if "?" not in u else u + "&" + OPTS[1:] for u in q.urls]


def test_release_ok_when_a_majority_is_free_of_our_key(name):
    with Quorum(5) as q:
        q.wait_settled(2)
        with watchlock.Client(urls_of(q)) as a, watchlock.Client(urls_of(q)) as b:
            lock = a.lock(name, ttl=2)
            assert lock.acquire(timeout=10)
            key = lock_key(name)
            assert q.holders(key) >= 3
            # members 0 and 1 refuse writes: their answer to the release is an error
            for i in (0, 1):
                q.member(i).command("CONFIG", "SET", "min-replicas-to-write", "1")
            # members 3 and 4 answer 0.3 s late (stopped, then resumed)
            q.pause(3, 4)
            timer = threading.Timer(0.3, q.resume, (3, 4))
            timer.start()
            try:
                # 2, 3, 4 confirm: OK (ConnectionError before: the call ended at the first
                # three answers, two of them errors)
                lock.release()
                assert q.holders(key, [2, 3, 4]) == 0
                other = b.lock(name, ttl=2)
                assert other.acquire(blocking=False)
                other.release()
            finally:
                timer.join()
                for i in (0, 1):
                    q.member(i).command("CONFIG", "SET", "min-replicas-to-write", "0")


def test_waiter_in_a_restart_window_gets_in_when_it_closes(name):
    ttl = 1.0
    with Quorum(5) as q:
        q.wait_settled(ttl)
        with watchlock.Client(urls_of(q)) as c:
            lock = c.lock(name, ttl=ttl)
            with lock:  # this client uses a lease of ttl: its restart window
                pass
            key = lock_key(name)
            for i in (0, 1):  # another owner's keys, for much longer than the window
                q.member(i).command("SET", key, "someone-else", "PX", "30000")
            t0 = time.monotonic()
            q.restart_empty(2)
            q.restart_empty(3)
            # 2, 3 (once their window closed) and 4 are a majority: it timed out before,
            # sleeping until the other owner's keys ended. From a thread: the main thread
            # waits in slices (for signal handlers), each a fresh attempt, which hid it.
            got = []
            th = threading.Thread(target=lambda: got.append(lock.acquire(timeout=8)))
            th.start()
            th.join()
            assert got == [True]
            assert time.monotonic() - t0 >= ttl * 0.99
            assert lock.members[4] == "granted"
            lock.release()
