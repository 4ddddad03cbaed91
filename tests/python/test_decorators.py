"""@client.synchronized, watchlock.lock and @watchlock.synchronized (default client)."""
from __future__ import annotations

import asyncio
import inspect
import threading

import pytest

import watchlock
import watchlock._client as wclient
from helpers import RedisAt


def test_key_is_formatted_from_bound_arguments_with_defaults(client, name):
    seen = []

    @client.synchronized(name + ":report:{customer_id}:{fmt}", ttl=10, blocking_timeout=5)
    def build_report(customer_id, fmt="pdf", *, verbose=False):
        """Docstring kept."""
        # which lock is held right now? probe each candidate
        for cand in (f"{name}:report:7:pdf", f"{name}:report:7:csv", f"{name}:report:8:pdf"):
            if client.inspect(cand).held:
                seen.append(cand)
        return customer_id

    assert build_report(7) == 7
    assert build_report(customer_id=7, fmt="csv") == 7
    assert build_report(8, verbose=True) == 8
    assert seen == [f"{name}:report:7:pdf", f"{name}:report:7:csv", f"{name}:report:8:pdf"]
    assert build_report.__name__ == "build_report" and build_report.__doc__ == "Docstring kept."
    assert list(inspect.signature(build_report).parameters) == ["customer_id", "fmt", "verbose"]
    assert not client.inspect(f"{name}:report:7:pdf").held


def test_attribute_lookup_and_methods(client, name):
    class Order:
        def __init__(self, id):
            self.id = id

    class Service:
        prefix = name

        @client.synchronized("{self.prefix}:order:{order.id}")
        def ship(self, order):
            return client.inspect(f"{name}:order:{order.id}").held

    assert Service().ship(Order(3)) is True


def test_callable_key_and_bad_template(client, name):
    @client.synchronized(lambda a, b: f"{name}:{a + b}")
    def add(a, b):
        return client.inspect(f"{name}:{a + b}").held

    assert add(1, 2) is True

    @client.synchronized(name + ":{missing}")
    def f(x):
        return x

    with pytest.raises(watchlock.InvalidArgument, match="missing"):
        f(1)
    with pytest.raises(TypeError):
        f()  # bad call: the same TypeError the function itself would raise
    with pytest.raises(TypeError):
        client.synchronized(name, bogus_option=1)


def test_decorated_function_is_mutually_exclusive(client, name, redis_server):
    r = RedisAt(redis_server.port)
    r.command("SET", name + ":n", "0")

    @client.synchronized(name, ttl=10, blocking_timeout=60)
    def bump():
        r.command("SET", name + ":n", str(int(r.command("GET", name + ":n")) + 1))

    threads = [threading.Thread(target=lambda: [bump() for _ in range(10)]) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert int(r.command("GET", name + ":n")) == 60


def test_timeout_and_exceptions_propagate(client, name):
    @client.synchronized(name, blocking_timeout=0.2)
    def work():
        raise KeyError("from the function")

    with pytest.raises(KeyError):
        work()
    holder = client.lock(name)
    holder.acquire()
    try:
        with pytest.raises(watchlock.LockTimeout, match=name):
            work()
    finally:
        holder.release()


def test_async_function(client, name):
    @client.synchronized(name + ":{n}", blocking_timeout=5)
    async def job(n):
        await asyncio.sleep(0)
        return client.inspect(f"{name}:{n}").held

    assert asyncio.iscoroutinefunction(job)
    assert asyncio.run(job(5)) is True


@pytest.fixture
def default_client_env(redis_server, monkeypatch):
    monkeypatch.setenv("WATCHLOCK_URL", redis_server.url)
    old = wclient._default
    wclient._default = None
    yield
    if wclient._default is not None:
        wclient._default.close()
    wclient._default = old


def test_module_level_lock_and_synchronized(default_client_env, redis_server, name):
    @watchlock.synchronized(name + ":{x}", ttl=5)
    def g(x):
        return watchlock.default_client().inspect(f"{name}:{x}").held

    assert wclient._default is None  # decorating does not connect
    assert g(1) is True
    c = watchlock.default_client()
    assert c is watchlock.default_client()  # one per process
    assert c.url == redis_server.url
    with watchlock.lock(name, blocking_timeout="5s") as lock:
        assert lock.client is c and lock.owned()
    c.close()
    assert watchlock.default_client() is not c  # reopened after close
