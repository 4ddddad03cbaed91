"""Threads: the GIL is released while waiting; Lock objects shared by threads
exclude them; per-use locks exclude each other; release from another thread."""
from __future__ import annotations

import threading
import time

import pytest

import watchlock
from conftest import wait_for
from helpers import RedisAt, release_subscribers


def test_blocked_acquire_releases_the_gil(client, name):
    holder = client.lock(name)
    holder.acquire()
    waiter_started = threading.Event()
    result = {}

    def waiter():
        waiter_started.set()
        result["acquired"] = client.lock(name).acquire(timeout=30)

    t = threading.Thread(target=waiter)
    t.start()
    waiter_started.wait()
    # While the waiter is blocked in the C acquire, this thread keeps running
    # Python code; with the GIL held by the waiter it would not count at all.
    count = 0
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        count += 1
    assert t.is_alive(), "the waiter should still be blocked"
    assert count > 1000
    # And another Python thread (not the main one) counts too.
    counted = []

    def counter():
        n = 0
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            n += 1
        counted.append(n)

    c = threading.Thread(target=counter)
    c.start()
    c.join(timeout=30)
    assert counted and counted[0] > 1000
    holder.release()
    t.join(timeout=30)
    assert result == {"acquired": True}


def test_waiter_is_woken_by_release(client, name, redis_server):
    holder = client.lock(name, ttl=60)
    holder.acquire()
    got = threading.Event()

    def waiter():
        with client.lock(name, blocking_timeout=50):
            got.set()

    t = threading.Thread(target=waiter)
    t.start()
    assert wait_for(lambda: release_subscribers(redis_server, name) >= 1, timeout=30)  # it waits
    assert not got.is_set()
    holder.release()
    # Woken by the release (pub/sub), not by the 60 s lease running out.
    assert got.wait(30)
    t.join(timeout=30)


def test_a_lock_object_shared_by_threads_excludes_them(client, name, redis_server):
    """Like a threading.Lock: `with shared:` in many threads is mutually exclusive."""
    shared = client.lock(name)
    r = RedisAt(redis_server.port)
    key = f"{name}:counter"
    r.command("SET", key, "0")
    inside = []
    overlap = []
    errors = []

    def work():
        try:
            for _ in range(15):
                with shared:
                    inside.append(1)
                    if len(inside) > 1:
                        overlap.append(1)
                    v = int(r.command("GET", key))
                    r.command("SET", key, str(v + 1))
                    inside.pop()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert not overlap
    assert int(r.command("GET", key)) == 6 * 15
    assert not shared.owned() and not shared.locked()


def test_shared_lock_nonblocking_and_timeout_from_another_thread(client, name):
    shared = client.lock(name)
    shared.acquire()
    out = {}

    def other():
        out["try"] = shared.acquire(blocking=False)
        t0 = time.monotonic()
        out["timeout"] = shared.acquire(timeout=0.3)
        out["waited"] = time.monotonic() - t0

    t = threading.Thread(target=other)
    t.start()
    t.join(timeout=30)
    assert out["try"] is False and out["timeout"] is False and out["waited"] >= 0.29
    shared.release()


def test_release_from_another_thread(client, name):
    lock = client.lock(name)
    lock.acquire()
    t = threading.Thread(target=lock.release)
    t.start()
    t.join(timeout=30)
    assert not lock.owned() and not lock.locked()
    # and the lock can then be taken by another thread
    got = []
    t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=5)))
    t.start()
    t.join(timeout=30)
    assert got == [True]
    lock.release()


def test_per_use_locks_from_many_threads_count_exactly(client, name, redis_server):
    r = RedisAt(redis_server.port)
    key = f"{name}:counter"
    r.command("SET", key, "0")

    def work():
        for _ in range(20):
            with client.lock(name, ttl=10, blocking_timeout=60):
                v = int(r.command("GET", key))
                r.command("SET", key, str(v + 1))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert int(r.command("GET", key)) == 8 * 20


def test_ctrl_c_interrupts_a_wait_in_the_main_thread(client, name):
    """A wait in the main thread is cut into slices so signal handlers run."""
    import signal
    holder = client.lock(name)
    holder.acquire()

    def raise_keyboard_interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, raise_keyboard_interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            client.lock(name).acquire()  # would wait forever
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert wait_for(lambda: holder.owned())
    holder.release()
    assert not client.inspect(name).held


def test_client_used_by_many_threads_at_once(client, name):
    errors = []

    def work(i):
        try:
            for j in range(10):
                with client.lock(f"{name}:{i}:{j}", blocking_timeout=10) as lock:
                    assert lock.owned()
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert isinstance(client, watchlock.Client)


def test_unconfirmed_release_lets_other_threads_take_a_shared_lock(fresh_redis, name):
    """A release the server never confirmed (ConnectionError) ends the
    releasing thread's ownership of a shared Lock at once: another thread's
    acquire on it goes to the core, which finishes that release first."""
    from proxy import Proxy
    with Proxy(fresh_redis.port) as proxy:
        with watchlock.Client(proxy.url + "?command_timeout=200ms&connect_timeout=200ms") as client:
            shared = client.lock(name, ttl=30)
            assert shared.acquire()
            proxy.pause()
            with pytest.raises(watchlock.ConnectionError):
                shared.release()
            got = []
            t = threading.Thread(target=lambda: got.append(shared.acquire(timeout=20)))
            t.start()
            time.sleep(0.3)
            proxy.resume()
            t.join(timeout=60)
            assert got == [True] and shared.owned()
            shared.release()
            assert not shared.locked()


def test_releasing_an_unheld_shared_lock_keeps_its_waiters_apart(client, name, redis_server):
    """A release() that finds nothing held (LockNotOwnedError) while a thread
    waits in the core for the shared Lock must not let a second thread into
    the core's acquire too: the handle would then count both as holders."""
    holder = client.lock(name)
    holder.acquire()
    shared = client.lock(name)
    events = []

    def worker(tag):
        assert shared.acquire(timeout=30)
        events.append(("in", tag))
        time.sleep(0.3)
        events.append(("out", tag))
        shared.release()

    a = threading.Thread(target=worker, args=("a",))
    a.start()
    assert wait_for(lambda: release_subscribers(redis_server, name) >= 1, timeout=30)  # a waits in the core
    with pytest.raises(watchlock.LockNotOwnedError):
        shared.release()
    b = threading.Thread(target=worker, args=("b",))
    b.start()
    time.sleep(0.3)
    holder.release()
    a.join(timeout=60)
    b.join(timeout=60)
    assert [e[0] for e in events] == ["in", "out", "in", "out"], events
