"""One decorator for every kind (issue 30.5): client.synchronized and the
lock objects that are decorators (fair_lock, semaphore, read_lock,
write_lock, multi_lock) go through one implementation (_decorate.py) and
keep the same rules, against a real redis-server:

- each call is a holder of its own: a call that re-enters the decorated
  function waits for the outer call's hold like any other holder, so an
  exclusive kind times out with LockTimeout (the multi-lock's decorator used
  to share one object between calls: a re-entered call took the outer hold
  again and ran beside it); a shared kind (semaphore, read side) shows two
  holders;
- blocking_timeout is the one the lock was made with;
- coroutine functions are locked with ``async with``, others with ``with``;
  exceptions propagate after the release; functools.wraps keeps the name.
"""
from __future__ import annotations

import asyncio
import inspect

import pytest

import watchlock

EXCLUSIVE = ["lock", "fair", "write", "multi"]
SHARED = ["semaphore", "read"]


def decorator(client, kind, name, **options):
    """The decorator of `kind` over `name` (a multi-lock: name:a and name:b)."""
    if kind == "lock":
        return client.synchronized(name, **options)
    if kind == "fair":
        return client.fair_lock(name, **options)
    if kind == "semaphore":
        return client.semaphore(name, permits=2, **options)
    if kind == "read":
        return client.rwlock(name).read_lock(**options)
    if kind == "write":
        return client.rwlock(name).write_lock(**options)
    if kind == "multi":
        return client.multi_lock([name + ":a", name + ":b"], **options)
    raise AssertionError(kind)


def holders(client, kind, name):
    """Holds now on the (first) name of `kind`, read from the server."""
    return client.name_info(name + ":a" if kind == "multi" else name).holders


@pytest.mark.parametrize("kind", EXCLUSIVE)
def test_a_reentered_call_waits_for_the_outer_hold(client, name, kind):
    seen = []

    @decorator(client, kind, name, ttl=10, blocking_timeout=0.2)
    def work(depth):
        seen.append(holders(client, kind, name))
        if depth > 0:
            with pytest.raises(watchlock.LockTimeout):
                work(depth - 1)
        return depth

    assert work(1) == 1
    assert seen == [1]  # the inner call never ran
    assert holders(client, kind, name) == 0


@pytest.mark.parametrize("kind", SHARED)
def test_a_reentered_call_is_a_second_holder(client, name, kind):
    seen = []

    @decorator(client, kind, name, ttl=10, blocking_timeout=5)
    def work(depth):
        seen.append(holders(client, kind, name))
        if depth > 0:
            work(depth - 1)

    work(1)
    assert seen == [1, 2]
    assert holders(client, kind, name) == 0


@pytest.mark.parametrize("kind", EXCLUSIVE + SHARED)
def test_async_functions_hold_the_lock_while_they_run(client, name, kind):
    @decorator(client, kind, name, ttl=10, blocking_timeout=5)
    async def job(x):
        """The job."""
        await asyncio.sleep(0)
        return x, holders(client, kind, name)

    assert inspect.iscoroutinefunction(job)
    assert job.__name__ == "job" and job.__doc__ == "The job."
    assert asyncio.run(job(7)) == (7, 1)
    assert holders(client, kind, name) == 0


@pytest.mark.parametrize("kind", EXCLUSIVE + SHARED)
def test_exceptions_propagate_after_the_release(client, name, kind):
    @decorator(client, kind, name, ttl=10)
    def work():
        """The work."""
        assert holders(client, kind, name) == 1
        raise KeyError("from the function")

    assert work.__name__ == "work" and work.__doc__ == "The work."
    with pytest.raises(KeyError):
        work()
    assert holders(client, kind, name) == 0


@pytest.mark.parametrize("kind", EXCLUSIVE)
def test_blocking_timeout_is_the_decorators(client, name, kind):
    @decorator(client, kind, name, ttl=10, blocking_timeout=0.2)
    def work():
        return "ran"

    other = decorator(client, kind, name, ttl=10)
    holder = other if kind != "lock" else client.lock(name, ttl=10)
    with holder:
        with pytest.raises(watchlock.LockTimeout):
            work()
    assert work() == "ran"
