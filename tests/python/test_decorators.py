"""@client.synchronized, watchlock.lock and @watchlock.synchronized (default client)."""
from __future__ import annotations

import asyncio
import inspect
import threading
import time

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


# ---- issue 25 item 4: renew options through the decorator -------------------

def _renewal_times(client, name, stop):
    """Seconds after the call at which the key's remaining lease jumped back
    up (the watchdog's renewals, seen from the server), polled until
    stop(times) or the key is gone."""
    t0, times, last = time.monotonic(), [], None
    while not stop(times):
        info = client.inspect(name)
        if not info.held:
            break
        if last is not None and info.remaining > last + 0.05:
            times.append(time.monotonic() - t0)
        last = info.remaining
        time.sleep(0.01)
    return times


def test_synchronized_renews_at_a_fraction_and_stops_at_max_renewals(client, name):
    lost = threading.Event()
    seen = {}

    def on_lost(lock, reason):
        seen["reason"], seen["renewals"] = reason, lock.renewals
        lost.set()

    # 1/10 of a 3 s ttl: every 0.3 s (the default ttl/3 would be 1 s); three
    # renewals, then the lease runs out.
    @client.synchronized(name, ttl=3, renew_interval="1/10", max_renewals=3, on_lost=on_lost)
    def job():
        seen["times"] = _renewal_times(client, name, lambda _: lost.is_set())
        assert lost.wait(10)

    with pytest.raises(watchlock.LockLostError):
        job()
    times = seen.pop("times")
    assert seen == {"reason": watchlock.LostReason.MAX_RENEWALS, "renewals": 3}
    assert not client.inspect(name).held
    # the three renewals, seen on the server, came at 1/10 of the ttl, and
    # no fourth one came
    assert len(times) == 3, times
    assert 0.27 <= times[0] < 0.8 and times[2] < 2.0, times  # ttl/3: the first at 1 s


def _first_renewal(client, name, ttl):
    """When the server saw the lease of `name` renewed first (time.monotonic()):
    at the first inspect that finds the remaining lease jumped back up, the
    renewal came ttl - remaining before that reply, so the poller's own delay
    drops out (a late reply only makes it look later)."""
    last = None
    while True:
        info = client.inspect(name)
        t = time.monotonic()
        assert info.held, "the lease ran out unrenewed"
        if last is not None and info.remaining > last + 0.05:
            return t - (ttl - info.remaining)
        last = info.remaining
        time.sleep(0.01)


@pytest.mark.parametrize("form", ["25%", "1/4", "1500ms", 1.5])
def test_synchronized_renew_interval_forms(client, name, form):
    """Every form of renew_interval sets the same 1.5 s for a 6 s ttl (the
    default, ttl/3, would be 2 s): the first renewal, seen on the server,
    comes 1.5 s after the acquire, never before, and before the default's
    2 s. The 0.5 s between the two is the room a loaded machine has to run
    the watchdog late (a 2 s ttl left 0.12 s, which a CPU-heavy neighbour
    overran: 0.71 s for 0.5 s)."""
    @client.synchronized(name, ttl=6, renew_interval=form)
    def job():
        acquired = time.monotonic()
        return acquired, _first_renewal(client, name, 6)

    called = time.monotonic()
    acquired, renewed = job()
    assert renewed - called >= 1.45, (called, renewed)  # not before its interval
    assert renewed - acquired < 1.95, (acquired, renewed)  # ttl/3 would not renew before 2 s


@pytest.mark.parametrize("bad", ["0/3", "3/3", "100%", "0%", "1/x", "2s", 2])
def test_renew_interval_not_below_the_ttl_is_refused(client, name, bad):
    with pytest.raises(watchlock.InvalidArgument) as e:
        client.lock(name, ttl=2, renew_interval=bad)
    assert "renew" in str(e.value), str(e.value)
