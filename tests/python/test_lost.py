"""The watchdog and lost locks: renewal, detection, on_lost callbacks,
on_lost="interrupt", LockLostError at the end of a `with` block."""
from __future__ import annotations

import logging
import os
import threading
import time

import pytest

import watchlock
from conftest import wait_for
from helpers import RedisAt, lock_key


def test_watchdog_keeps_a_1s_lock_for_4s(client, name, redis_server):
    r = RedisAt(redis_server.port)
    lock = client.lock(name, ttl=1)
    with lock:
        start = time.monotonic()
        while time.monotonic() - start < 4.0:
            ttl_ms = r.command("PTTL", lock_key(name))
            assert 0 < ttl_ms <= 1000, ttl_ms
            assert lock.owned() and not lock.lost
            time.sleep(0.1)
        assert lock.renewals >= 3
        assert client.lock(name).acquire(blocking=False) is False
    assert not lock.lost


def test_lost_when_the_key_is_deleted_from_outside(client, name, redis_server):
    lock = client.lock(name, ttl=1)
    lock.acquire()
    RedisAt(redis_server.port).command("DEL", lock_key(name))
    assert wait_for(lambda: lock.lost, timeout=20)
    assert lock.lost_reason == watchlock.LostReason.TAKEN == "taken"
    assert not lock.owned()
    with pytest.raises(watchlock.LockLostError, match=name) as info:
        lock.release()
    assert info.value.reason == "taken" and info.value.lock_name == name
    assert lock.lost  # stays visible after the release
    with lock:  # a fresh hold clears it
        assert not lock.lost


def test_with_block_raises_lock_lost_at_exit(client, name, redis_server):
    with pytest.raises(watchlock.LockLostError, match=name):
        with client.lock(name, ttl=1) as lock:
            RedisAt(redis_server.port).command("DEL", lock_key(name))
            assert wait_for(lambda: lock.lost, timeout=20)


def test_with_block_exception_is_not_masked_by_the_loss(client, name, redis_server):
    with pytest.raises(ZeroDivisionError) as info:
        with client.lock(name, ttl=1) as lock:
            RedisAt(redis_server.port).command("DEL", lock_key(name))
            assert wait_for(lambda: lock.lost, timeout=20)
            1 / 0
    notes = getattr(info.value, "__notes__", [])
    assert any(name in n and "lost" in n for n in notes), notes


def test_expired_without_auto_renew(client, name):
    lock = client.lock(name, ttl=0.3, auto_renew=False)
    lock.acquire()
    assert wait_for(lambda: lock.lost, timeout=20)
    assert lock.lost_reason == watchlock.LostReason.EXPIRED
    assert client.lock(name).acquire(timeout=10)


def test_max_renewals_and_max_hold(client, name):
    a = client.lock(name + ":a", ttl=0.3, max_renewals=2)
    b = client.lock(name + ":b", ttl=0.3, max_hold=0.6)
    a.acquire()
    b.acquire()
    assert wait_for(lambda: a.lost and b.lost, timeout=20)
    assert a.lost_reason == watchlock.LostReason.MAX_RENEWALS
    assert b.lost_reason == watchlock.LostReason.MAX_HOLD
    assert a.renewals == 2 or a.renewals == 0  # renewals of the current hold (0 once lost, per core)


def test_on_lost_callback_gets_lock_and_reason(client, name, redis_server):
    calls = []
    done = threading.Event()

    def on_lost(lock, reason):
        calls.append((lock, reason, threading.current_thread().name))
        done.set()

    lock = client.lock(name, ttl=1, on_lost=on_lost)
    lock.acquire()
    RedisAt(redis_server.port).command("DEL", lock_key(name))
    assert done.wait(20)
    assert calls[0][0] is lock and calls[0][1] == watchlock.LostReason.TAKEN
    assert calls[0][2] != threading.current_thread().name  # the dispatcher thread
    with pytest.raises(watchlock.LockLostError):
        lock.release()


def test_on_lost_exceptions_are_logged(client, name, redis_server, caplog):
    def on_lost(lock, reason):
        raise RuntimeError("callback failed on purpose")

    lock = client.lock(name, ttl=1, on_lost=on_lost)
    with caplog.at_level(logging.ERROR, logger="watchlock"):
        lock.acquire()
        RedisAt(redis_server.port).command("DEL", lock_key(name))
        assert wait_for(lambda: any("callback failed on purpose" in (r.exc_text or "")
                                    or (r.exc_info and "callback failed" in str(r.exc_info[1]))
                                    for r in caplog.records), timeout=20)
    rec = [r for r in caplog.records if r.exc_info][0]
    assert name in rec.getMessage()
    # the dispatcher survives: a second loss still reaches a callback
    seen = threading.Event()
    other = client.lock(name + ":2", ttl=1, on_lost=lambda l, r: seen.set())
    other.acquire()
    RedisAt(redis_server.port).command("DEL", lock_key(name + ":2"))
    assert seen.wait(20)


def test_callback_that_releases_does_not_deadlock(client, name, redis_server):
    outcome = []

    def on_lost(lock, reason):
        try:
            lock.release()
        except watchlock.LockLostError as e:
            outcome.append(e)

    with pytest.raises(watchlock.LockLostError):
        with client.lock(name, ttl=1, on_lost=on_lost) as lock:
            RedisAt(redis_server.port).command("DEL", lock_key(name))
            assert wait_for(lambda: outcome, timeout=20)
    assert isinstance(outcome[0], watchlock.LockLostError)
    assert not lock.owned()
    # the lock works again afterwards
    with client.lock(name, blocking_timeout=10):
        pass


def test_callback_may_use_other_locks_and_the_client(client, name, redis_server):
    done = threading.Event()

    def on_lost(lock, reason):
        with client.lock(name + ":inner", blocking_timeout=10):
            done.set()

    lock = client.lock(name, ttl=1, on_lost=on_lost)
    lock.acquire()
    RedisAt(redis_server.port).command("DEL", lock_key(name))
    assert done.wait(20)


def test_interrupt_raises_lock_lost_in_the_holding_thread(client, name, redis_server):
    result = {}
    inside = threading.Event()

    def business():
        try:
            with client.lock(name, ttl=1, on_lost="interrupt"):
                inside.set()
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:  # pure-Python work
                    sum(range(100))
            result["outcome"] = "finished"
        except watchlock.LockLostError as e:
            result["outcome"] = e

    t = threading.Thread(target=business)
    t.start()
    assert inside.wait(20)
    RedisAt(redis_server.port).command("DEL", lock_key(name))
    t.join(timeout=60)
    assert not t.is_alive()
    e = result["outcome"]
    assert isinstance(e, watchlock.LockLostError), e
    assert e.lock_name == name and name in str(e) and e.reason == "taken"


def test_interrupt_reaches_a_thread_blocked_in_c_only_when_the_call_returns(client, name, redis_server):
    """README and docs/python.md: on_lost="interrupt" cannot break into a C
    call (here os.read on an empty pipe); the LockLostError is raised when
    the call has returned to Python."""
    r, w = os.pipe()
    result = {}
    inside = threading.Event()
    lock = client.lock(name, ttl=1, on_lost="interrupt")

    def business():
        try:
            with lock:
                inside.set()
                os.read(r, 1)   # blocked in C until the pipe has a byte
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    sum(range(100))
            result["outcome"] = "finished"
        except watchlock.LockLostError as e:
            result["outcome"] = e

    t = threading.Thread(target=business)
    t.start()
    try:
        assert inside.wait(20)
        RedisAt(redis_server.port).command("DEL", lock_key(name))
        assert wait_for(lambda: lock._interrupted != 0)   # the interrupt is posted
        assert lock.lost
        t.join(0.5)
        assert t.is_alive() and "outcome" not in result, "a C call was interrupted"
    finally:
        os.write(w, b"x")
        t.join(60)
    try:
        assert not t.is_alive()
        assert isinstance(result["outcome"], watchlock.LockLostError), result
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):   # the read returned (with the byte) before the raise
            os.read(r, 1)
    finally:
        os.close(r)
        os.close(w)


def test_interrupt_is_not_sent_after_release(client, name, redis_server):
    """A loss reported for a hold already released is not raised anywhere."""
    lock = client.lock(name, ttl=1, on_lost="interrupt")
    with lock:
        pass
    # a second lock object on the name, not interrupting, takes it
    with client.lock(name):
        time.sleep(0.5)
    assert not lock.lost


def test_lost_because_the_server_went_away(name, fresh_redis):
    c = watchlock.Client(fresh_redis.url + "?connect_timeout=0.2&command_timeout=0.2")
    try:
        lost = threading.Event()
        lock = c.lock(name, ttl=1, on_lost=lambda l, r: lost.set())
        lock.acquire()
        fresh_redis.stop()
        assert lost.wait(20)
        assert lock.lost_reason == watchlock.LostReason.CONNECTION
    finally:
        c.close()
