"""Dropped handles (issue 19.12): a Lock that is garbage-collected while it
holds its lock does not release it. The lock stays held, no longer renewed,
until its lease ends (or the client closes); the drop is reported with a
ResourceWarning naming the lock."""
from __future__ import annotations

import gc
import re
import time
import warnings

import pytest

import watchlock
from helpers import lock_key

TTL = 1.5  # renewed every 0.5 s while owned: a renewal would show as a PTTL that goes up


def other_client_gets_it(redis_url, name) -> bool:
    with watchlock.Client(redis_url) as other:
        lock = other.lock(name)
        if lock.acquire(blocking=False):
            lock.release()
            return True
        return False


def wait_for_expiry(redis_server, name, acquired_at: float, owner: bytes) -> float:
    """Polls the key until Redis expires it, checking on the way that it
    keeps its owner and that its PTTL only goes down (never renewed).
    Returns when it expired, in seconds after acquired_at."""
    key = lock_key(name)
    last = TTL * 1000
    deadline = acquired_at + TTL + 5.0
    while time.monotonic() < deadline:
        pttl = redis_server.command("PTTL", key)
        if pttl == -2:
            return time.monotonic() - acquired_at
        assert 0 <= pttl <= last, f"PTTL went from {last} to {pttl}: the dropped lock was renewed"
        last = pttl
        value = redis_server.command("GET", key)
        assert value in (None, owner), f"owner changed from {owner!r} to {value!r}"
        time.sleep(0.02)
    pytest.fail(f"the dropped lock's key was still there {time.monotonic() - acquired_at:.1f} s after "
                f"its acquire (ttl {TTL} s)")


def check_kept_then_expired(client, redis_server, redis_url, name, acquired_at: float) -> None:
    owner = redis_server.command("GET", lock_key(name))
    assert owner, "the dropped lock was released at once"
    assert client.inspect(name).held
    assert not other_client_gets_it(redis_url, name)  # still protected
    assert client.stats()["held_locks"] == 1
    expired_after = wait_for_expiry(redis_server, name, acquired_at, owner)
    assert expired_after >= TTL - 0.05, f"gone {expired_after:.3f} s after the acquire, before its lease"
    assert other_client_gets_it(redis_url, name)
    deadline = time.monotonic() + 5
    while client.stats()["held_locks"] != 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.stats()["held_locks"] == 0  # the client let go of it at its deadline


def check_dropped_warning(caught, name) -> None:
    """Exactly one ResourceWarning, naming the lock and saying what happens to it."""
    found = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert len(found) == 1, f"expected one ResourceWarning, got {[str(w.message) for w in caught]}"
    message = str(found[0].message)
    assert re.search(re.escape(repr(name)), message), message
    assert "garbage-collected" in message and "lease" in message, message


def test_if_acquire_on_a_temporary_keeps_the_lock(client, redis_server, redis_url, name):
    """`if client.lock(name).acquire(blocking=False): run_job()`: the
    temporary Lock is collected as soon as acquire returns; run_job still
    runs under the lock."""
    protected = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acquired_at = time.monotonic()
        if client.lock(name, ttl=TTL).acquire(blocking=False):
            gc.collect()
            protected.append(client.inspect(name).held and not other_client_gets_it(redis_url, name))
    assert protected == [True], "run_job() ran without the lock: the dropped Lock released it"
    check_dropped_warning(caught, name)
    check_kept_then_expired(client, redis_server, redis_url, name, acquired_at)


def test_a_function_local_lock_is_kept_after_return(client, redis_server, redis_url, name):
    def job():
        lock = client.lock(name, ttl=TTL)
        assert lock.acquire(blocking=False)
        return time.monotonic()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acquired_at = job()
        gc.collect()
    check_kept_then_expired(client, redis_server, redis_url, name, acquired_at)
    check_dropped_warning(caught, name)


def test_close_releases_a_dropped_lock(redis_server, redis_url, name):
    c = watchlock.Client(redis_url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c.lock(name).acquire()  # 30 s lease
        gc.collect()
    assert redis_server.command("EXISTS", lock_key(name)) == 1
    check_dropped_warning(caught, name)
    c.close()  # releases it with the other held locks
    assert redis_server.command("EXISTS", lock_key(name)) == 0


def test_no_warning_for_a_lock_that_holds_nothing(client, name):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.lock(name)  # never used
        lock = client.lock(name)
        lock.acquire()
        lock.release()
        del lock
        lock = client.lock(name, ttl=0.3, auto_renew=False)
        lock.acquire()
        deadline = time.monotonic() + 5
        while not lock.lost and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lock.lost
        del lock  # lost: nothing held any more
        with client.lock(name):
            pass
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert not client.inspect(name).held


def test_a_warning_filter_that_raises_is_not_raised_from_del(client, redis_server, name):
    """warnings as errors: __del__ must not raise (Python would print
    "Exception ignored in ..."); the lock is still left to its lease."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        unraisable = []
        import sys
        old, sys.unraisablehook = sys.unraisablehook, unraisable.append
        try:
            client.lock(name).acquire()
            gc.collect()
        finally:
            sys.unraisablehook = old
    assert unraisable == []
    assert redis_server.command("EXISTS", lock_key(name)) == 1
