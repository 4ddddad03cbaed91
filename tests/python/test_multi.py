"""client.multi_lock([names]): several names held all or nothing (issue 23
item 2), against a real redis-server: with / async with / decorator; one
token per name; two threads locking [a,b] and [b,a] never deadlock; a wait
that times out or a cancelled task leaves no key; the loss of one name is
the loss of the whole hold, reported once, with that name."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

import watchlock
from conftest import wait_for
from helpers import RedisAt, lock_key


def names_of(name, *suffixes):
    return [f"{name}:{s}" for s in suffixes]


def existing(redis_server, names):
    r = RedisAt(redis_server.port)
    return [n for n in names if r.command("EXISTS", lock_key(n)) == 1]


def test_with_takes_all_and_gives_back_all(client, name, redis_server):
    a, b, c = names_of(name, "a", "b", "c")
    m = client.multi_lock([c, a, b], ttl=5)
    assert isinstance(m, watchlock.MultiLock) and m.names == [c, a, b]
    assert m.fencing_tokens == [0, 0, 0]
    with m:
        assert m.owned() and m.locked()
        assert existing(redis_server, [a, b, c]) == [a, b, c]
        tokens = m.fencing_tokens
        assert tokens == [client.inspect(n).fencing_token for n in (c, a, b)]
        assert m.fencing_token == tokens[0]
        assert client.lock(a).acquire(blocking=False) is False
        other = client.multi_lock([f"{name}:x", b])
        assert other.acquire(blocking=False) is False
        assert existing(redis_server, [f"{name}:x"]) == []  # all or nothing
    assert existing(redis_server, [a, b, c]) == []
    assert not m.owned() and not m.lost and m.lost_name is None
    with client.lock(b) as plain:  # the name's counter goes on across kinds
        assert plain.fencing_token > tokens[2]


def test_blocking_timeout_leaves_nothing(client, name, redis_server):
    a, b = names_of(name, "a", "b")
    with client.lock(b, ttl=30):
        m = client.multi_lock([a, b], blocking_timeout=0.3)
        t0 = time.monotonic()
        with pytest.raises(watchlock.LockTimeout):
            with m:
                pass
        assert 0.25 <= time.monotonic() - t0 < 10
        assert existing(redis_server, [a]) == []


def test_waiter_woken_by_release(client, name):
    a, b = names_of(name, "a", "b")
    holder = client.lock(b, ttl=30)
    holder.acquire()
    got = []
    m = client.multi_lock([a, b], ttl=5)

    def wait():
        got.append(m.acquire(timeout=20))
        got.append(time.monotonic())

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.2)  # let it wait (the outcome is checked either way)
    t0 = time.monotonic()
    holder.release()
    t.join()
    assert got[0] is True and got[1] - t0 < 10  # not the holder's 30 s lease
    m.release()


def test_opposite_orders_never_deadlock(redis_url, name, redis_server):
    a, b = names_of(name, "a", "b")
    inside = []
    errors = []

    def run(order):
        with watchlock.Client(redis_url) as c:
            m = c.multi_lock(order, ttl=3, blocking_timeout=20)
            try:
                for _ in range(300):
                    with m:
                        inside.append(1)
                        if len(inside) != 1:
                            errors.append("two holders at once")
                        inside.pop()
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(repr(exc))

    threads = [threading.Thread(target=run, args=(o,)) for o in ([a, b], [b, a])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "deadlocked"
    assert errors == []
    assert existing(redis_server, [a, b]) == []


def test_loss_of_one_name_is_the_loss_of_all(client, name, redis_server):
    a, b, c = names_of(name, "a", "b", "c")
    calls = []
    done = threading.Event()

    def on_lost(lock, reason):
        calls.append((lock, reason))
        done.set()

    m = client.multi_lock([a, b, c], ttl=1, on_lost=on_lost)
    m.acquire()
    RedisAt(redis_server.port).command("DEL", lock_key(b))
    assert done.wait(20)
    assert wait_for(lambda: m.lost, timeout=20)
    assert m.lost_name == b and m.lost_reason == "taken"
    time.sleep(1.5)  # more than a lease: no second report
    assert len(calls) == 1 and calls[0][0] is m and calls[0][1] == watchlock.LostReason.TAKEN
    with pytest.raises(watchlock.LockLostError) as info:
        m.release()
    assert b in str(info.value)
    assert existing(redis_server, [a, b, c]) == []
    with m:  # a fresh hold
        assert m.lost_name is None


def test_decorator_sync_and_async(client, name, redis_server):
    a, b = names_of(name, "a", "b")
    m = client.multi_lock([a, b], ttl=5)

    @m
    def job(x):
        assert existing(redis_server, [a, b]) == [a, b]
        return x * 2

    assert job(21) == 42
    assert existing(redis_server, [a, b]) == []

    @client.multi_lock([a, b], ttl=5)
    async def ajob():
        assert existing(redis_server, [a, b]) == [a, b]
        return "ok"

    assert asyncio.run(ajob()) == "ok"
    assert existing(redis_server, [a, b]) == []


def test_async_with_and_cancelled_wait_leaves_nothing(client, name, redis_server):
    a, b = names_of(name, "a", "b")

    async def main():
        async with client.multi_lock([a, b], ttl=5) as m:
            assert m.owned()
        holder = client.lock(b, ttl=30)
        holder.acquire()
        m = client.multi_lock([a, b], ttl=5)
        task = asyncio.ensure_future(m.acquire_async())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        holder.release()
        return m

    m = asyncio.run(main())
    assert wait_for(lambda: existing(redis_server, [a, b]) == [], timeout=10)
    # the give-back of a grant that came after the cancel deletes the keys
    # on the server before its release() returns to the handle (a clean-clone
    # run read owned() in between)
    assert wait_for(lambda: not m.owned(), timeout=10)


def test_bad_names(client, name):
    with pytest.raises(TypeError):
        client.multi_lock(name)
    with pytest.raises(TypeError):
        client.multi_lock([name, 3])
    with pytest.raises(watchlock.InvalidArgument):
        client.multi_lock([name, name])
    with pytest.raises(watchlock.InvalidArgument):
        client.multi_lock([])


def test_other_kind_is_a_clear_error(client, name, redis_server):
    a, q = names_of(name, "a", "q")
    RedisAt(redis_server.port).command("HSET", lock_key(q), "x", "1")
    with pytest.raises(watchlock.WrongTypeError, match="another lock kind"):
        client.multi_lock([a, q]).acquire(blocking=False)
    assert existing(redis_server, [a]) == []


def test_ctrl_c_while_waiting_leaves_nothing(client, name, redis_server, redis_url, tmp_path):
    """Ctrl-C (SIGINT) in a process whose main thread waits for a multi-lock:
    KeyboardInterrupt between the core's wait slices, and no name taken."""
    import signal
    import subprocess
    import sys
    a, b, c = names_of(name, "a", "b", "c")
    script = tmp_path / "wait.py"
    script.write_text(
        "import faulthandler, signal, sys, watchlock\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # not inherited SIG_IGN (a background job)\n"
        "faulthandler.dump_traceback_later(25, exit=True)  # a hang shows where, then fails the test\n"
        f"client = watchlock.Client({redis_url!r})\n"
        f"m = client.multi_lock([{a!r}, {b!r}, {c!r}], ttl=30)\n"
        "print('waiting', flush=True)\n"
        "try:\n"
        "    m.acquire(timeout=60)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(3)\n")
    with client.lock(b, ttl=30):
        p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        assert p.stdout.readline().strip() == "waiting"
        time.sleep(0.5)  # inside the wait (either way nothing may stay taken)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 3 and "interrupted" in out, (p.returncode, out, err)
        assert existing(redis_server, [a, c]) == []
