"""issue 31 item 3: Python conventions. Semaphore.acquire has
threading.Semaphore's signature (blocking, timeout; the count keyword-only),
acquire() takes redis-py's blocking_timeout=, and a bad value is refused with
a message that says what is wrong with it (negative, zero, too large)."""
from __future__ import annotations

import asyncio
import threading

import pytest

import watchlock


def test_semaphore_acquire_has_threading_semaphores_signature(client, name):
    sem = client.semaphore(name, permits=2, ttl=10)
    other = client.semaphore(name, permits=2, ttl=10)
    assert sem.acquire(False)  # threading.Semaphore.acquire(blocking=False)
    assert other.acquire(True, 5)  # (blocking, timeout) positionally
    assert client.name_info(name).in_use == 2
    assert not client.semaphore(name, permits=2).acquire(False)
    sem.release()
    other.release()
    assert sem.acquire(blocking=True, timeout=5, permits=2)
    assert sem.held_permits == 2
    sem.release()
    assert sem.acquire(k=2)  # the former keyword still works
    sem.release()
    with pytest.raises(TypeError, match=r"keyword-only \(acquire\(permits=2\)\)"):
        sem.acquire(2)  # the former positional count: not taken for blocking=2
    for bad, words in ((0, r"permits .* must be >= 1, got 0 \(zero\)"),
                       (-1, r"permits .* must be >= 1, got -1 \(negative\)")):
        with pytest.raises(ValueError, match=words):
            sem.acquire(permits=bad)
    with pytest.raises(ValueError, match=r"permits must be >= 1 .*got -3 \(negative\)"):
        client.semaphore(name, permits=-3)


def test_semaphore_acquire_async_signature(client, name):
    async def main():
        sem = client.semaphore(name, permits=3, ttl=10)
        assert await sem.acquire_async(False, permits=2)
        assert sem.held_permits == 2
        await sem.release_async()
    asyncio.run(main())


def test_acquire_takes_redis_pys_blocking_timeout(client, name):
    holder = client.lock(name)
    assert holder.acquire(blocking=False)
    waiter = client.lock(name)
    assert waiter.acquire(blocking_timeout=0.2) is False
    with pytest.raises(TypeError, match="timeout= or blocking_timeout="):
        waiter.acquire(timeout=1, blocking_timeout=1)
    done = threading.Event()
    t = threading.Thread(target=lambda: waiter.acquire(blocking_timeout=None) and done.set())
    t.start()
    holder.release()
    t.join(60)
    assert done.is_set()
    waiter.release()
    sem = client.semaphore(name + ":sem", permits=1)
    assert sem.acquire(blocking_timeout=1)
    sem.release()

    async def main():
        assert await holder.acquire_async(blocking_timeout=5)
        await holder.release_async()
    asyncio.run(main())


@pytest.mark.parametrize("kwargs, words", [
    ({"ttl": -1}, r"ttl of lock .*duration '-1' is negative"),
    ({"ttl": "-5s"}, r"duration '-5s' is negative"),
    ({"ttl": 0}, r"lease must be 1 ms \.\. 30 days, got 0 ms \(zero"),
    ({"ttl": 0.0001}, r"got 0 ms \(zero"),
    ({"ttl": "31d"}, r"unit must be ms, s, m or h"),
    ({"ttl": 31 * 86400}, r"too long \(at most 30 days\)"),
    ({"blocking_timeout": -2}, r"duration '-2' is negative"),
    ({"max_hold": -1}, r"duration '-1' is negative"),
])
def test_bad_values_say_what_is_wrong(client, kwargs, words):
    with pytest.raises(ValueError, match=words):  # (not the name fixture: it holds the test's id, these words)
        client.lock("conventions:bad-value", **kwargs).acquire(blocking=False)


def test_bad_acquire_timeouts_say_what_is_wrong(client, name):
    lock = client.lock(name)
    with pytest.raises(ValueError, match=r"timeout must be 0 or more seconds .*got -2 \(negative\)"):
        lock.acquire(timeout=-2)
    with pytest.raises(ValueError, match=r"duration '-0.5s' is negative"):
        lock.acquire(timeout="-0.5s")
    with pytest.raises(ValueError, match=r"too long \(at most 30 days\)"):
        lock.acquire(timeout=40 * 86400)
    assert isinstance(pytest.raises(ValueError, lock.acquire, timeout=-2).value, ValueError)
    assert lock.acquire(timeout=0)  # zero: try once, as threading's
    lock.release()
    assert issubclass(watchlock.InvalidArgument, ValueError)
