"""The cheap construction of a Lock (issue 13): the core's handle is made at
first use, the Condition only when a thread has to wait, durations are
converted once per value. These tests check behaviour only, never time."""
from __future__ import annotations

import datetime
import enum
import gc
import threading

import pytest

import watchlock
from watchlock import _util
from conftest import wait_for
from helpers import RedisAt

LOCK_COMMANDS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_set", "cmdstat_publish", "cmdstat_del")


def lock_commands(port: int) -> dict:
    """Calls of the commands a lock sends, from INFO commandstats."""
    info = RedisAt(port).command("INFO", "commandstats")
    text = info.decode() if isinstance(info, bytes) else str(info)
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in LOCK_COMMANDS:
            out[key] = rest.split(",")[0]
    return out


def test_an_unused_lock_makes_no_handle_and_sends_nothing(client, name, redis_server):
    client.lock(name, ttl=5)  # the core accepts these options once (its handle is made at once)
    before = lock_commands(redis_server.port)
    locks = [client.lock(name, ttl=5) for _ in range(50)]
    for lock in locks:
        assert lock._hnd is None
        # an unused Lock reads as a handle that was never acquired
        assert not lock.owned() and not lock.lost and lock.lost_reason is None
        assert lock.fencing_token == 0 and lock.hold_count == 0 and lock.renewals == 0
        assert lock.remaining == 0.0 and "unlocked" in repr(lock)
        assert lock._hnd is None
    del locks, lock
    gc.collect()
    assert lock_commands(redis_server.port) == before
    assert not client.inspect(name).held


def test_the_handle_is_made_at_first_use_with_the_options(client, name):
    client.lock(name, ttl=7, max_renewals=3)
    lock = client.lock(name, ttl=7, max_renewals=3)
    assert lock._hnd is None
    assert lock.ttl == 7.0  # the value the core accepted: still no handle
    assert lock._hnd is None
    assert client.lock(name).ttl == 30.0  # no ttl given: the core's default, asked of a handle
    assert lock.hold_count == 0 and lock._hnd is None
    assert lock.acquire(blocking=False)  # the first use makes the handle
    assert lock._hnd is not None
    lock.release()
    lazy = client.lock(name, ttl=7, max_renewals=3)
    with lazy:
        assert lazy.owned() and lazy.fencing_token > 0 and 6.0 < lazy.remaining <= 7.0
    assert not lazy.owned()


def test_options_the_core_refused_are_checked_at_every_construction(client, name):
    for _ in range(3):
        with pytest.raises(watchlock.InvalidArgument) as info:
            client.lock(name, ttl=5, renew_interval=5)
        assert "renew_interval=5" in str(info.value)
        with pytest.raises(watchlock.InvalidArgument):
            client.lock(name, ttl=0)
        with pytest.raises(watchlock.InvalidArgument, match="empty"):
            client.lock("")
        with pytest.raises(TypeError):
            client.lock(name, auto_renew="yes")  # type: ignore[arg-type]


def test_names_the_fast_path_does_not_judge_get_a_handle_at_once(client, name):
    client.lock(name)
    assert client.lock(name)._hnd is None            # ASCII str
    assert client.lock(name.encode())._hnd is None   # bytes
    assert client.lock(name + "é")._hnd is not None  # not ASCII: the core counts its bytes now
    with pytest.raises(watchlock.InvalidArgument):
        client.lock(b"x" * (watchlock._native.WATCHLOCK_MAX_NAME + 1))


def test_on_lost_and_label_make_the_handle_at_once(client, name):
    client.lock(name)
    assert client.lock(name, on_lost=lambda lock, reason: None)._hnd is not None
    assert client.lock(name, label="job")._hnd is not None


def test_a_lock_of_a_closed_client_is_refused_at_construction(redis_url, name):
    c = watchlock.Client(redis_url)
    c.lock(name)
    unused = c.lock(name)
    c.close()
    with pytest.raises(watchlock.ClientClosedError):
        c.lock(name)
    with pytest.raises(watchlock.ClientClosedError):
        unused.acquire()


def test_no_condition_until_a_thread_waits_and_waiters_still_wake(client, name):
    lock = client.lock(name, ttl=10)
    for _ in range(3):
        with lock:
            pass
    assert lock._cond is None  # one thread: nobody waited
    lock.acquire()
    got = threading.Event()

    def waiter():
        if lock.acquire(timeout=30):
            got.set()
            lock.release()

    t = threading.Thread(target=waiter)
    t.start()
    assert wait_for(lambda: lock._cond is not None)  # made by the waiter
    assert not got.is_set()
    lock.release()
    assert got.wait(30)
    t.join(30)
    assert not lock.owned()


def test_a_fresh_shared_lock_gets_one_handle_from_many_threads(client, name):
    lock = client.lock(name, ttl=10)
    client.lock(name, ttl=10)  # the options are known now: `lock2` is lazy
    lock2 = client.lock(name, ttl=10)
    assert lock2._hnd is None
    inside, overlaps, handles = [0], [0], set()
    start = threading.Barrier(8)

    def worker():
        start.wait()
        for _ in range(20):
            with lock2:
                handles.add(id(lock2._hnd))
                inside[0] += 1
                if inside[0] != 1:
                    overlaps[0] += 1
                inside[0] -= 1

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert overlaps[0] == 0 and len(handles) == 1
    del lock


class Seconds(enum.IntEnum):
    TWO = 2


class MyFloat(float):
    def __str__(self) -> str:
        return "99"


ODD_DURATIONS = [0, 0.0, -0.0, 1, 1.0, True, False, 0.0005, 0.0015, 1e-4, 2.5, 1 / 3, -1, -0.5,
                 10 ** 20, 30 * 24 * 3600, 30 * 24 * 3600 + 1, float("nan"), float("inf"), -float("inf"),
                 "1.5s", "500ms", "0", "-0", " 1s", "1e3", "10s\0junk", "", datetime.timedelta(0),
                 datetime.timedelta(milliseconds=1500), datetime.timedelta(seconds=-1), Seconds.TWO,
                 MyFloat(1.5), None, [30], b"1s"]


def outcome(fn, value):
    try:
        return ("ok", fn(value, "ttl", "x"))
    except Exception as e:  # the class and the whole message must match too
        return (type(e), str(e))


def test_cached_conversions_give_what_the_parser_gives():
    _util.ms_cache.clear()
    uncached = [outcome(_util._to_ms, v) for v in ODD_DURATIONS]
    for _ in range(2):  # cold, then warm (both orders of 0.0 and -0.0 were met)
        assert [outcome(_util.to_ms, v) for v in ODD_DURATIONS] == uncached
    assert [outcome(_util.to_ms, v) for v in reversed(ODD_DURATIONS)] == uncached[::-1]


def test_lock_options_behave_the_same_cold_and_warm(redis_url, name):
    """A fresh client (nothing accepted yet) and a warm one (everything
    accepted that could be) agree on every odd value."""
    def try_options(c, **options):
        try:
            lock = c.lock(name, **options)
            return ("ok", lock.ttl, lock.blocking_timeout)
        except Exception as e:
            return (type(e), str(e))

    cases = [{"ttl": v} for v in ODD_DURATIONS] + [{"blocking_timeout": v} for v in ODD_DURATIONS]
    cases += [{"max_renewals": v} for v in (0, 1, True, False, -1, 1.0, "1")]
    cases += [{"auto_renew": v} for v in (True, False, 1, 0, "yes", None)]
    with watchlock.Client(redis_url) as cold:
        first = []
        for case in cases:
            _util.ms_cache.clear()
            first.append(try_options(cold, **case))
    with watchlock.Client(redis_url) as warm:
        for _ in range(2):
            assert [try_options(warm, **case) for case in cases] == first
