"""Semaphore with leased permits (issue 22), against a real redis-server;
crashed permit holders in real processes."""
from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

import watchlock
from helpers import RedisAt
from kinds_helpers import expect_line, stop, wait_queue, worker


def test_never_more_than_n_holders(redis_server, client, name):
    n, workers, rounds = 3, 8, 15
    r = RedisAt(redis_server.port)
    inside, peak, errors = [0], [0], []
    mu = threading.Lock()

    def work():
        try:
            sem = client.semaphore(name, permits=n, ttl=10)
            for _ in range(rounds):
                with sem:
                    with mu:
                        inside[0] += 1
                        peak[0] = max(peak[0], inside[0])
                    # a store's view, too: the server counts the holders
                    assert int(r.command("INCR", name + ":in")) <= n
                    r.command("DECR", name + ":in")
                    with mu:
                        inside[0] -= 1
        except BaseException as e:
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(workers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    assert 1 <= peak[0] <= n
    info = client.name_info(name)
    assert info.in_use == 0 and info.queue_length == 0


def test_permits_k_and_head_blocking(client, name):
    a = client.semaphore(name, permits=3, ttl=10)
    assert a.acquire(permits=2)
    assert a.held_permits == 2
    info = client.name_info(name)
    assert (info.kind, info.permits, info.in_use) == ("semaphore", 3, 2)
    big = client.semaphore(name, permits=3, ttl=10)
    got_big = threading.Event()
    t = threading.Thread(target=lambda: (big.acquire(timeout=30, permits=2) and got_big.set()))
    t.start()
    wait_queue(client, name, 1)
    # 1 permit is free, but the head of the queue wants 2: a later request
    # for 1 waits behind it (large requests are not starved)
    small = client.semaphore(name, permits=3, ttl=10)
    assert small.acquire(timeout=0.2) is False
    a.release()
    t.join(30)
    assert got_big.is_set() and big.owned()
    assert small.acquire(blocking=False)  # 3 - 2 = 1 free, nobody queued
    big.release()
    small.release()


def test_n_mismatch_is_a_clear_error(client, name):
    sem = client.semaphore(name, permits=2, ttl=5)
    assert sem.acquire()
    with pytest.raises(watchlock.WrongTypeError, match="2|permit"):
        client.semaphore(name, permits=3).acquire(blocking=False)
    assert client.semaphore(name).acquire(blocking=False)  # permits 0: the name's count
    with pytest.raises(watchlock.WrongTypeError):
        client.fair_lock(name).acquire(blocking=False)
    with pytest.raises(watchlock.WrongTypeError):
        client.lock(name).acquire(blocking=False)
    # the admin call changes N
    client.set_permits(name, 3)
    assert client.name_info(name).permits == 3
    third = client.semaphore(name, permits=3)
    assert third.acquire(blocking=False)
    sem.release()
    third.release()


def test_sigkill_of_a_permit_holder_gives_its_permits_back(redis_server, client, name):
    ttl = 1.5
    p = worker(redis_server, "hold", "sem:3:2", name, ttl)
    try:
        token = int(expect_line(p, "held").split()[1])
        sem = client.semaphore(name, permits=3, ttl=10)
        assert sem.acquire(blocking=False, permits=2) is False
        os.kill(p.pid, signal.SIGKILL)
        killed = time.monotonic()
        assert sem.acquire(timeout=ttl + 30, permits=2)
        assert time.monotonic() - killed < ttl + 5
        assert sem.fencing_token > token
        sem.release()
    finally:
        stop(p)


def test_sigkill_of_a_queued_waiter_leaves_the_queue(redis_server, client, name):
    holder = client.semaphore(name, permits=1, ttl=10)
    assert holder.acquire()
    p = worker(redis_server, "wait", "sem:1:1", name, 1.5)
    try:
        expect_line(p, "waiting")
        wait_queue(client, name, 1)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(30)
        killed = time.monotonic()
        holder.release()  # may grant the permit to the dead waiter: it comes back within its liveness
        nxt = client.semaphore(name, permits=1)
        assert nxt.acquire(timeout=30)
        assert time.monotonic() - killed < 1.5 + 5
        assert client.name_info(name).queue_length == 0
        nxt.release()
    finally:
        stop(p)


def test_semaphore_idioms(client, name):
    sem = client.semaphore(name, permits=4, ttl=5)
    with sem.take(3):
        assert sem.held_permits == 3 and client.name_info(name).in_use == 3
    seen = []

    @client.semaphore(name, permits=4, ttl=5)
    def job():
        seen.append(client.name_info(name).in_use)

    job()
    assert seen == [1]

    async def main():
        s = client.semaphore(name, permits=4, ttl=5)
        assert await s.acquire_async(permits=2)
        held = s.held_permits
        await s.release_async()
        async with client.semaphore(name, permits=4):
            pass
        return held

    assert asyncio.run(main()) == 2
    with pytest.raises(ValueError):
        sem.acquire(permits=0)
