"""Read-write lock (issue 23 item 1), against a real redis-server; dead
readers and writers in real processes."""
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


def test_readers_overlap_and_the_writer_is_exclusive(client, name):
    rw = client.rwlock(name)
    readers = [rw.read_lock(ttl=10) for _ in range(3)]
    for r in readers:
        assert r.acquire(blocking=False)  # readers share the name
    info = client.name_info(name)
    assert (info.kind, info.in_use, info.writer) == ("rwlock", 3, False)
    w = rw.write_lock(ttl=10)
    assert w.acquire(blocking=False) is False
    for r in readers:
        r.release()
    assert w.acquire(blocking=False)
    assert client.name_info(name).writer
    assert rw.read_lock().acquire(blocking=False) is False
    assert rw.write_lock().acquire(blocking=False) is False
    w.release()


def test_reader_after_a_waiting_writer_waits(client, name):
    rw = client.rwlock(name)
    r1 = rw.read_lock(ttl=10)
    assert r1.acquire()
    w = rw.write_lock(ttl=10)
    order = []
    tw = threading.Thread(target=lambda: (w.acquire(timeout=30) and order.append("w")))
    tw.start()
    wait_queue(client, name, 1)
    r2 = rw.read_lock(ttl=10)
    tr = threading.Thread(target=lambda: (r2.acquire(timeout=30) and order.append("r2")))
    tr.start()
    wait_queue(client, name, 2)  # r2 queued behind the writer, not let in with r1
    assert not r2.owned()
    r1.release()
    tw.join(30)
    assert order == ["w"]
    w.release()
    tr.join(30)
    assert order == ["w", "r2"]
    r2.release()


def test_writer_not_starved_by_a_reader_stream(client, name):
    rw = client.rwlock(name)
    stop_flag = threading.Event()
    errors = []

    def reader_stream():
        try:
            while not stop_flag.is_set():
                with rw.read_lock(ttl=10):
                    time.sleep(0.005)
        except BaseException as e:
            errors.append(e)

    ts = [threading.Thread(target=reader_stream) for _ in range(4)]
    for t in ts:
        t.start()
    try:
        w = rw.write_lock(ttl=10)
        start = time.monotonic()
        assert w.acquire(timeout=20)
        waited = time.monotonic() - start
        w.release()
    finally:
        stop_flag.set()
        for t in ts:
            t.join(30)
    assert not errors, errors
    assert waited < 5, f"the writer waited {waited:.1f} s behind a reader stream"


def test_downgrade_without_a_gap(client, name):
    rw = client.rwlock(name)
    w = rw.write_lock(ttl=10)
    assert w.acquire()
    token = w.fencing_token
    w.downgrade()
    assert w.owned() and w.kind == "read" and w.fencing_token == token
    other = rw.read_lock()
    assert other.acquire(blocking=False)  # readers share with the downgraded writer
    assert rw.write_lock().acquire(blocking=False) is False
    other.release()
    w.release()
    assert rw.write_lock().acquire(blocking=False)


def test_sigkill_of_a_reader_frees_its_share(redis_server, client, name):
    ttl = 1.5
    p = worker(redis_server, "hold", "read", name, ttl)
    try:
        expect_line(p, "held")
        w = client.rwlock(name).write_lock(ttl=10)
        assert w.acquire(blocking=False) is False
        os.kill(p.pid, signal.SIGKILL)
        killed = time.monotonic()
        assert w.acquire(timeout=ttl + 30)
        assert time.monotonic() - killed < ttl + 5
        w.release()
    finally:
        stop(p)


def test_sigkill_of_the_writer_and_of_a_queued_reader(redis_server, client, name):
    ttl = 1.5
    pw = worker(redis_server, "hold", "write", name, ttl)
    pr = None
    try:
        token = int(expect_line(pw, "held").split()[1])
        pr = worker(redis_server, "wait", "read", name, ttl)
        expect_line(pr, "waiting")
        wait_queue(client, name, 1)
        os.kill(pr.pid, signal.SIGKILL)
        os.kill(pw.pid, signal.SIGKILL)
        w = client.rwlock(name).write_lock(ttl=10)
        assert w.acquire(timeout=ttl + 30)
        assert w.fencing_token > token
        assert client.name_info(name).queue_length == 0
        w.release()
    finally:
        stop(pw, *(p for p in (pr,) if p is not None))


def test_readers_lost_updates_are_none_for_writers(redis_server, client, name):
    """Writers increment a counter with GET/SET under the write side; readers
    check that it never changes while they hold the read side."""
    r = RedisAt(redis_server.port)
    r.command("SET", name + ":c", "0")
    rw = client.rwlock(name)
    errors = []

    def writer():
        try:
            for _ in range(20):
                with rw.write_lock(ttl=10):
                    v = int(r.command("GET", name + ":c"))
                    r.command("SET", name + ":c", str(v + 1))
        except BaseException as e:
            errors.append(e)

    def reader():
        try:
            for _ in range(20):
                with rw.read_lock(ttl=10):
                    a = r.command("GET", name + ":c")
                    time.sleep(0.002)
                    assert r.command("GET", name + ":c") == a, "a writer ran while a reader held the lock"
        except BaseException as e:
            errors.append(e)

    ts = [threading.Thread(target=f) for f in (writer, writer, reader, reader, reader)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    assert int(r.command("GET", name + ":c")) == 40


def test_rwlock_idioms_and_kinds(client, name):
    rw = client.rwlock(name)

    @rw.read_lock(ttl=5)
    def read():
        return client.name_info(name).in_use

    assert read() == 1

    async def main():
        async with rw.write_lock(ttl=5) as w:
            return w.owned()

    assert asyncio.run(main())
    r = rw.read_lock(ttl=5)
    assert r.acquire()
    with pytest.raises(watchlock.WrongTypeError):
        client.fair_lock(name).acquire(blocking=False)
    with pytest.raises(watchlock.WrongTypeError):
        client.lock(name).acquire(blocking=False)
    r.release()
