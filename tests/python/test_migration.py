"""Issue 25.6 (migrating from redis-py): acquire() honours the lock's own
blocking/blocking_timeout, the LockError base, Client.list(), and the
timeout= TypeError that says ttl is renewed. Real redis-servers, no mocks."""
from __future__ import annotations

import threading
import time

import pytest

import watchlock


def test_bare_acquire_gives_up_after_the_locks_blocking_timeout(client, name):
    holder = client.lock(name)
    assert holder.acquire()
    try:
        waiter = client.lock(name, blocking_timeout=0.5)
        result = []
        t = threading.Thread(target=lambda: result.append(waiter.acquire()), daemon=True)
        started = time.monotonic()
        t.start()
        t.join(20)  # before the fix acquire() waited until the holder released: a hang
        assert not t.is_alive(), "acquire() ignored the lock's blocking_timeout"
        assert result == [False]
        assert time.monotonic() - started >= 0.45
    finally:
        holder.release()


def test_bare_acquire_of_a_non_blocking_lock_tries_once(client, name):
    holder = client.lock(name)
    assert holder.acquire()
    try:
        waiter = client.lock(name, blocking=False)
        done = threading.Event()
        result = []
        threading.Thread(target=lambda: (result.append(waiter.acquire()), done.set()), daemon=True).start()
        assert done.wait(10), "acquire() of a blocking=False lock waited"
        assert result == [False]
        with pytest.raises(watchlock.LockTimeout):  # `with` tries once too
            with client.lock(name, blocking=False):
                pass
    finally:
        holder.release()
    with client.lock(name, blocking=False):  # free: taken at the first try
        pass


def test_explicit_acquire_arguments_override_the_locks_settings(client, name):
    holder = client.lock(name)
    assert holder.acquire()
    try:
        lock = client.lock(name, blocking_timeout=60)
        started = time.monotonic()
        assert lock.acquire(blocking=False) is False  # once, not 60 s
        assert lock.acquire(timeout=0.2) is False      # 0.2 s, not 60 s
        assert time.monotonic() - started < 30
        once = client.lock(name, blocking=False, blocking_timeout=0.3)
        started = time.monotonic()
        assert once.acquire(blocking=True) is False    # the lock's blocking_timeout
        assert time.monotonic() - started >= 0.25
        with pytest.raises(ValueError):
            lock.acquire(blocking=False, timeout=1)    # as threading.Lock
    finally:
        holder.release()
    lock = client.lock(name, blocking=False)
    assert lock.acquire(timeout=-1) is True            # -1: forever, the lock's blocking=False overridden
    lock.release()


def test_lock_state_errors_share_lock_error():
    for cls in (watchlock.LockTimeout, watchlock.LockNotOwnedError, watchlock.LockLostError):
        assert issubclass(cls, watchlock.LockError) and issubclass(cls, watchlock.Error)
    assert issubclass(watchlock.LockError, watchlock.Error)
    for cls in (watchlock.ConnectionError, watchlock.InvalidArgument, watchlock.ServerError,
                watchlock.ClientClosedError):
        assert not issubclass(cls, watchlock.LockError)


def test_lock_error_catches_a_release_of_an_unheld_lock(client, name):
    with pytest.raises(watchlock.LockError):
        client.lock(name).release()


def test_client_list_returns_held_locks_with_lease_fence_and_owner(client, name):
    a = client.lock(f"{name}:a", ttl=20, label="job a")
    b = client.lock(f"{name}:b", ttl=20)
    other = client.lock(f"other:{name}", ttl=20)
    for lock in (a, b, other):
        assert lock.acquire()
    try:
        found = client.list(f"{name}:*")
        assert [x.name for x in found] == [f"{name}:a".encode(), f"{name}:b".encode()]
        assert all(isinstance(x, watchlock.ListedLock) for x in found)
        assert 0 < found[0].remaining <= 20 and 0 < found[1].remaining <= 20
        assert found[0].fencing_token == a.fencing_token and found[1].fencing_token == b.fencing_token
        assert found[0].owner is not None and found[0].owner.label == "job a"
        assert found[1].owner is None
        assert f"other:{name}".encode() in [x.name for x in client.list()]  # default "*": all
    finally:
        for lock in (a, b, other):
            lock.release()
    assert client.list(f"{name}:*") == []


def test_timeout_type_error_says_ttl_is_renewed_and_how_to_cap_it(client, name):
    with pytest.raises(TypeError) as info:
        client.lock(name, timeout=5)
    msg = str(info.value)
    assert "ttl=" in msg and "blocking_timeout=" in msg
    assert "renewed" in msg and "auto_renew=False" in msg and "max_hold" in msg
