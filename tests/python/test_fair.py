"""Fair lock (issue 22): FIFO by arrival with direct hand-off, against a real
redis-server; dead waiters and holders in real processes."""
from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

import watchlock
from kinds_helpers import expect_line, stop, wait_queue, worker


def test_fifo_order_of_20_waiters(client, name):
    holder = client.fair_lock(name, ttl=10)
    assert holder.acquire()
    order, errors = [], []
    threads = []
    for i in range(20):
        lock = client.fair_lock(name, ttl=10)

        def wait(i=i, lock=lock):
            try:
                assert lock.acquire(timeout=60)
                order.append(i)
                lock.release()
            except BaseException as e:  # reported below
                errors.append(e)

        t = threading.Thread(target=wait)
        t.start()
        threads.append(t)
        wait_queue(client, name, i + 1)  # i+1 queued: the next one arrives after it
    holder.release()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert order == list(range(20))
    assert client.name_info(name).queue_length == 0


def test_no_barging_under_a_greedy_releaser(client, name):
    a, b = client.fair_lock(name, ttl=10), client.fair_lock(name, ttl=10)
    assert a.acquire()
    for _ in range(10):
        got = threading.Event()
        t = threading.Thread(target=lambda: (b.acquire(timeout=30) and got.set()))
        t.start()
        wait_queue(client, name, 1)
        a.release()
        # the releaser wants it back at once: the queued waiter already has it
        assert a.acquire(blocking=False) is False
        t.join(30)
        assert got.is_set() and b.owned()
        a, b = b, a  # the new holder is the greedy one next round
    a.release()


def test_handoff_on_expiry_without_release(redis_server, client, name):
    ttl = 1.5
    p = worker(redis_server, "hold", "fair", name, ttl)
    try:
        token = int(expect_line(p, "held").split()[1])
        lock = client.fair_lock(name, ttl=10)
        done = threading.Event()
        t = threading.Thread(target=lambda: (lock.acquire(timeout=60) and done.set()))
        t.start()
        wait_queue(client, name, 1)
        os.kill(p.pid, signal.SIGKILL)  # no release: the lease runs out
        killed = time.monotonic()
        t.join(60)
        waited = time.monotonic() - killed
        assert done.is_set() and lock.owned()
        assert lock.fencing_token > token
        # within the holder's lease plus one liveness interval, not the waiter's 60 s
        assert waited < ttl + 5, waited
        lock.release()
    finally:
        stop(p)


def test_sigkill_of_a_queued_waiter_costs_at_most_its_liveness_lease(redis_server, client, name):
    holder = client.fair_lock(name, ttl=10)
    assert holder.acquire()
    p = worker(redis_server, "wait", "fair", name, 1.5)
    try:
        expect_line(p, "waiting")
        wait_queue(client, name, 1)
        behind = client.fair_lock(name, ttl=10)
        got = threading.Event()
        t = threading.Thread(target=lambda: (behind.acquire(timeout=60) and got.set()))
        t.start()
        wait_queue(client, name, 2)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(30)
        holder.release()  # granted to the dead waiter first, or it already left the queue
        start = time.monotonic()
        t.join(60)
        assert got.is_set(), "the waiter behind a dead one never got the lock"
        assert time.monotonic() - start < 1.5 + 5
        behind.release()
        assert client.name_info(name).queue_length == 0
    finally:
        stop(p)


def test_sigstop_past_the_lease(redis_server, client, name):
    ttl = 1.5
    p = worker(redis_server, "hold", "fair", name, ttl)
    try:
        token = int(expect_line(p, "held").split()[1])
        os.kill(p.pid, signal.SIGSTOP)
        lock = client.fair_lock(name, ttl=10)
        assert lock.acquire(timeout=ttl + 30)  # the frozen holder's lease ran out: handed on
        assert lock.fencing_token > token
        os.kill(p.pid, signal.SIGCONT)
        expect_line(p, "lost")  # the holder learns it lost the lock
        assert p.wait(30) == 3
        assert lock.owned()
        lock.release()
    finally:
        os.kill(p.pid, signal.SIGCONT) if p.poll() is None else None
        stop(p)


def test_waiter_timeout_leaves_the_queue_at_once(client, name):
    holder = client.fair_lock(name, ttl=10)
    assert holder.acquire()
    waiter = client.fair_lock(name, ttl=10)
    assert waiter.acquire(timeout=0.3) is False
    assert client.name_info(name).queue_length == 0
    # and the next release goes to nobody: a later acquire gets it at once
    holder.release()
    assert waiter.acquire(blocking=False)
    waiter.release()


def test_fair_lock_idioms(client, name):
    info = None
    with client.fair_lock(name, ttl=5) as lock:
        assert lock.owned() and lock.kind == "fair" and lock.fencing_token > 0
        info = client.name_info(name)
    assert info.kind == "fair" and info.holders == 1
    calls = []

    @client.fair_lock(name, ttl=5)
    def job(x):
        calls.append(client.name_info(name).holders)
        return x * 2

    assert job(21) == 42 and calls == [1]

    async def main():
        async with client.fair_lock(name, ttl=5) as lock:
            return lock.owned()

    assert asyncio.run(main())
    assert client.name_info(name).kind is None or client.name_info(name).holders == 0


def test_kinds_on_one_name_give_wrong_type(client, name):
    fair = client.fair_lock(name, ttl=5)
    assert fair.acquire()
    with pytest.raises(watchlock.WrongTypeError):
        client.semaphore(name, permits=2).acquire(blocking=False)
    with pytest.raises(watchlock.WrongTypeError):
        client.lock(name).acquire(blocking=False)  # a plain lock never barges past the fair one
    with pytest.raises(watchlock.WrongTypeError):
        client.rwlock(name).read_lock().acquire(blocking=False)
    fair.release()
    plain = client.lock(name + ":plain", ttl=5)
    assert plain.acquire()
    with pytest.raises(watchlock.WrongTypeError, match="lock"):
        client.fair_lock(name + ":plain").acquire(blocking=False)
    plain.release()


def test_a_main_thread_waiter_keeps_its_place_across_slices(client, name):
    """The main thread waits in slices (so that Ctrl-C works); the core takes
    a waiter out of the queue when its acquire times out, so a wait per slice
    would send it to the back every 250 ms: it must keep its place."""
    assert threading.current_thread() is threading.main_thread()
    holder = client.fair_lock(name, ttl=10)
    assert holder.acquire()
    order = []
    late = client.fair_lock(name, ttl=10)

    def second_waiter_then_release():
        wait_queue(client, name, 1)  # the main thread is queued
        def wait_late():
            if late.acquire(timeout=60):
                order.append("late")
                late.release()

        t = threading.Thread(target=wait_late)
        t.start()
        wait_queue(client, name, 2)
        resume_at = time.monotonic() + 1.0  # several of the main thread's slices
        while time.monotonic() < resume_at:
            assert client.name_info(name).queue_length == 2
            time.sleep(0.05)
        holder.release()
        t.join(60)

    helper = threading.Thread(target=second_waiter_then_release)
    helper.start()
    first = client.fair_lock(name, ttl=10)
    assert first.acquire(timeout=60)
    order.append("main")
    first.release()
    helper.join(60)
    assert order == ["main", "late"]
