"""asyncio: `async with lock:` and `await lock.acquire_async()` never block the loop."""
from __future__ import annotations

import asyncio
import time

import pytest

import watchlock
from conftest import wait_for
from helpers import RedisAt, lock_key


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_async_with(client, name):
    async def main():
        async with client.lock(name, blocking_timeout=5) as lock:
            assert lock.owned() and client.inspect(name).held
        assert not lock.owned()
    run(main())
    assert not client.inspect(name).held


def test_waiting_does_not_block_the_event_loop(client, name):
    holder = client.lock(name)
    holder.acquire()

    async def main():
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        t = asyncio.create_task(ticker())
        t0 = time.monotonic()
        got = await client.lock(name).acquire_async(timeout=1.0)
        waited = time.monotonic() - t0
        stop.set()
        await t
        return got, ticks, waited

    got, ticks, waited = run(main())
    holder.release()
    assert got is False and waited >= 0.99
    assert ticks >= 10  # the loop kept running while the acquire waited


def test_acquire_async_conventions(client, name):
    async def main():
        lock = client.lock(name)
        with pytest.raises(ValueError):
            await lock.acquire_async(blocking=False, timeout=1)
        assert await lock.acquire_async(blocking=False) is True
        assert await lock.acquire_async() is True  # reentrant in the same task
        assert lock.hold_count == 2
        lock.release()
        lock.release()
        other = client.lock(name)
        async with client.lock(name):
            assert await other.acquire_async(timeout=0.2) is False
    run(main())


def test_async_timeout_raises_lock_timeout(client, name):
    holder = client.lock(name)
    holder.acquire()

    async def main():
        with pytest.raises(watchlock.LockTimeout, match=name):
            async with client.lock(name, blocking_timeout=0.3):
                pytest.fail("entered a held lock")
    try:
        run(main())
    finally:
        holder.release()


def test_tasks_sharing_one_lock_object_exclude_each_other(client, name):
    shared = client.lock(name)

    async def main():
        inside = 0
        overlaps = 0

        async def worker():
            nonlocal inside, overlaps
            for _ in range(5):
                async with shared:
                    inside += 1
                    overlaps += inside > 1
                    await asyncio.sleep(0.01)
                    inside -= 1

        await asyncio.gather(*(worker() for _ in range(4)))
        return overlaps

    assert run(main()) == 0
    assert not client.inspect(name).held


def test_cancelled_waiter_does_not_leak_the_lock(client, name):
    holder = client.lock(name)
    holder.acquire()
    waiter = client.lock(name)

    async def main():
        task = asyncio.create_task(waiter.acquire_async())
        await asyncio.sleep(0.3)
        # release while the waiter's worker thread is in the middle of waiting,
        # then cancel: whatever the worker got must be given back
        holder.release()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert wait_for(lambda: not client.inspect(name).held and not waiter.owned(), timeout=20)
    assert holder.acquire(timeout=5)
    holder.release()


def test_cancelled_long_waiter_stops_waiting(client, name):
    holder = client.lock(name)
    holder.acquire()
    waiter = client.lock(name)

    async def main():
        task = asyncio.create_task(waiter.acquire_async())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    time.sleep(0.6)  # longer than one wait slice: the worker has stopped
    holder.release()
    time.sleep(0.6)
    assert not waiter.owned() and not client.inspect(name).held


def test_async_lost_lock_raises_at_exit(client, name, redis_server):
    async def main():
        with pytest.raises(watchlock.LockLostError, match=name):
            async with client.lock(name, ttl=1) as lock:
                RedisAt(redis_server.port).command("DEL", lock_key(name))
                while not lock.lost:
                    await asyncio.sleep(0.02)
    run(main())


def test_async_interrupt_cancels_the_holding_task(client, name, redis_server):
    async def main():
        inside = asyncio.Event()

        async def business():
            async with client.lock(name, ttl=1, on_lost="interrupt"):
                inside.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(business())
        await inside.wait()
        RedisAt(redis_server.port).command("DEL", lock_key(name))
        with pytest.raises(watchlock.LockLostError, match=name) as info:
            await task
        assert isinstance(info.value.__cause__, asyncio.CancelledError)
        assert info.value.reason == "taken"
    run(main())


def test_acquire_async_from_a_coroutine_without_a_task_context(client, name):
    async def main():
        lock = client.lock(name)
        assert await lock.acquire_async(timeout=5)
        lock.release()
        return True
    assert run(main())
