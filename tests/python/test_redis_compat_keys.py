"""issue 31 item 1: watchlock.redis_compat uses redis-py's keys (the lock is
the key named like it, holding the holder's token), so a fleet half on
redis-py's Lock and half on redis_compat stays exclusive: each excludes the
other in both orders, neither releases nor extends the other's hold,
r.delete(name) frees the lock, acquire(token=...) and lock.local.token work
as in redis-py, and a redis_compat waiter behind a redis-py holder gets the
lock soon after that holder's release (redis-py publishes nothing)."""
from __future__ import annotations

import threading

import pytest

redis = pytest.importorskip("redis")

from watchlock import redis_compat  # noqa: E402
from watchlock.redis_compat import Lock  # noqa: E402


@pytest.fixture
def r(redis_server):
    client = redis.Redis(host="127.0.0.1", port=redis_server.port)
    yield client
    client.close()


def test_redis_py_and_redis_compat_exclude_each_other_in_both_orders(r, name):
    theirs, ours = r.lock(name, timeout=30), r.lock(name, timeout=30, lock_class=Lock)
    assert theirs.acquire(blocking=False)
    assert not ours.acquire(blocking=False)
    assert r.get(name) == theirs.local.token
    theirs.release()
    assert ours.acquire(blocking=False)
    assert r.get(name) == ours.local.token and 25_000 < r.pttl(name) <= 30_000
    assert not theirs.acquire(blocking=False)
    assert ours.locked() and theirs.locked()
    ours.release()
    assert not r.exists(name)


def test_neither_releases_nor_extends_the_others_hold(r, name):
    ours = r.lock(name, timeout=30, lock_class=Lock)
    assert ours.acquire(blocking=False)
    r.delete(name)  # its hold is gone (as for redis-py): a redis-py holder comes in
    theirs = r.lock(name, timeout=30)
    assert theirs.acquire(blocking=False)
    for op in (lambda: ours.extend(5), lambda: ours.reacquire(), ours.release):
        with pytest.raises(redis.exceptions.LockNotOwnedError):
            op()
        ours.local.token = ours.local.token or b"x"  # (release forgets it: keep trying the others)
    assert r.get(name) == theirs.local.token
    theirs.release()

    assert ours.acquire(blocking=False)
    r.delete(name)
    assert theirs.acquire(blocking=False)
    r.delete(name)
    ours2 = r.lock(name, timeout=30, lock_class=Lock)
    assert ours2.acquire(blocking=False)  # theirs believes it holds; ours2 does
    for op in (lambda: theirs.extend(5), theirs.reacquire, theirs.release):
        with pytest.raises(redis.exceptions.LockNotOwnedError):
            op()
        theirs.local.token = theirs.local.token or b"x"
    assert r.get(name) == ours2.local.token
    ours2.release()


def test_a_token_that_is_a_prefix_of_the_holders_does_not_release_it(r, name):
    theirs = r.lock(name, timeout=30)
    assert theirs.acquire(blocking=False, token="abc123")
    r_ours = r.lock(name, timeout=30, lock_class=Lock)
    r_ours.local.token = b"abc"  # as if it had held it with token "abc"
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        r_ours.release()
    assert r.get(name) == b"abc123"
    theirs.release()


def test_delete_frees_the_lock_and_tokens_are_redis_pys(r, name):
    ours = r.lock(name, lock_class=Lock)
    assert ours.acquire(blocking=False, token="mine")
    assert r.get(name) == b"mine" and ours.local.token == b"mine" and ours.owned()
    assert r.delete(name) == 1
    other = r.lock(name, lock_class=Lock)
    assert other.acquire(blocking=False)
    assert r.get(name) == other.local.token and len(other.local.token) == 32
    other.release()
    assert not r.exists(name)


def test_a_lock_lost_to_its_timeout_acquires_again(r, name):
    from conftest import wait_for
    lock = r.lock(name, timeout=0.3, lock_class=Lock)
    assert lock.acquire(blocking=False)
    wait_for(lambda: lock.watchlock_lock.lost)  # the 0.3 s cap ran out
    assert lock.acquire(blocking_timeout=30, token="again")  # a fresh hold (once the key expired: soon after)
    assert r.get(name) == b"again"
    lock.release()


def test_a_waiter_behind_a_redis_py_holder_gets_the_lock_after_its_release(r, name):
    """redis-py's release publishes nothing: the waiter must look again
    rather than sleep to the end of the holder's 60 s lease."""
    theirs = r.lock(name, timeout=60)
    assert theirs.acquire(blocking=False)
    ours = r.lock(name, timeout=30, thread_local=False, lock_class=Lock)  # acquired in a thread, released here
    got = []
    waiter = threading.Thread(target=lambda: got.append(ours.acquire(blocking_timeout=30)))
    waiter.start()
    try:
        from conftest import wait_for
        channel = f"watchlock:{{{name}}}:released".encode()
        wait_for(lambda: r.pubsub_numsub(channel)[0][1] >= 1)  # it waits (subscribed to the wake-ups)
        theirs.release()
    finally:
        waiter.join(60)
    assert got == [True]  # within 30 s of a 60 s lease: woken by looking again, not by the expiry
    ours.release()
