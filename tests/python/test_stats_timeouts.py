"""issue 31 item 5: acquire_timeouts counts what happened: an acquire that
returned without the lock, once, whatever number of wait slices (0.25 s
C calls, watchlock/_lock.py) it took; an acquire that waited many slices
and then got the lock counts no timeout (it counted one per wait before)."""
from __future__ import annotations

import threading

from conftest import wait_for


def _count_slices(lock):
    """Counts the lock's C acquire calls (its wait slices) on the lock object."""
    calls = [0]
    inner = lock._acquire_fn

    def counted(h, wait):
        calls[0] += 1
        return inner(h, wait)
    lock._acquire_fn = counted
    return calls


def test_a_wait_of_many_slices_that_gets_the_lock_is_no_timeout(client, name):
    holder, waiter = client.lock(name), client.lock(name)
    assert holder.acquire(blocking=False)
    calls = _count_slices(waiter)
    # the holder lets go once the waiter (main thread: sliced) has timed out 4 slices
    releaser = threading.Thread(target=lambda: (wait_for(lambda: calls[0] >= 5, timeout=60), holder.release()))
    releaser.start()
    try:
        assert waiter.acquire(timeout=120)  # main thread: 0.25 s slices
    finally:
        releaser.join()
    assert calls[0] >= 5
    waiter.release()
    s = client.stats()
    assert (s["acquires"], s["contended_acquires"], s["acquire_timeouts"]) == (2, 1, 0)


def test_a_wait_of_many_slices_that_gives_up_counts_one_timeout(client, name):
    holder, waiter = client.lock(name), client.lock(name)
    assert holder.acquire(blocking=False)
    calls = _count_slices(waiter)
    assert not waiter.acquire(timeout=1.3)  # six slices
    assert calls[0] >= 5
    assert client.stats()["acquire_timeouts"] == 1
    assert not waiter.acquire(timeout=0.6)  # another acquire: another timeout
    assert not waiter.acquire(blocking=False)
    assert client.stats()["acquire_timeouts"] == 3
    holder.release()
    with waiter:
        pass
    s = client.stats()
    assert (s["acquires"], s["acquire_timeouts"]) == (2, 3)


def test_a_thread_wait_that_gets_the_lock_is_no_timeout(client, name):
    """A semaphore's sliced wait (a queued kind) counts the same way."""
    sem_holder = client.semaphore(name, permits=1)
    assert sem_holder.acquire(blocking=False)
    sem_waiter = client.semaphore(name, permits=1)
    calls = _count_slices(sem_waiter)
    releaser = threading.Thread(target=lambda: (wait_for(lambda: calls[0] >= 4, timeout=60), sem_holder.release()))
    releaser.start()
    try:
        assert sem_waiter.acquire(timeout=120)
    finally:
        releaser.join()
    sem_waiter.release()
    assert client.stats()["acquire_timeouts"] == 0
