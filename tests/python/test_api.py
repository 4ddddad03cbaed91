"""The Python contract of issue 14: redis-py's names (ttl=, blocking_timeout=),
threading.Lock's acquire(), locked() vs owned(), durations as numbers,
timedeltas or strings through the core's parser, options that mean what
they mean in C (defaults and checks from the core)."""
from __future__ import annotations

import datetime
import time

import pytest

import watchlock
from conftest import wait_for


def test_timeout_keyword_is_refused_naming_ttl_and_blocking_timeout(client, name):
    for make in (lambda: client.lock(name, timeout=5),
                 lambda: client.synchronized(name, timeout=5),
                 lambda: watchlock.synchronized(name, timeout=5),
                 lambda: watchlock.Lock(client, name, timeout=5)):
        with pytest.raises(TypeError, match="timeout") as info:
            make()
        assert "ttl=" in str(info.value) and "blocking_timeout=" in str(info.value)


def test_blocking_timeout_is_what_with_waits(client, name):
    lock = client.lock(name)
    assert lock.blocking_timeout is None  # forever
    assert client.lock(name, blocking_timeout="1.5s").blocking_timeout == 1.5
    holder = client.lock(name)
    holder.acquire()
    try:
        t0 = time.monotonic()
        with pytest.raises(watchlock.LockTimeout, match="0.4 s"):
            with client.lock(name, blocking_timeout=datetime.timedelta(milliseconds=400)):
                pass
        assert time.monotonic() - t0 >= 0.39
        # acquire() keeps threading.Lock's own timeout, whatever blocking_timeout says
        assert client.lock(name, blocking_timeout=60).acquire(timeout="100ms") is False
    finally:
        holder.release()


def test_durations_accept_numbers_timedeltas_and_strings(client, name):
    assert client.lock(name, ttl="2m").ttl == 120.0
    assert client.lock(name, ttl="500ms").ttl == 0.5
    assert client.lock(name, ttl=datetime.timedelta(seconds=2)).ttl == 2.0
    assert client.lock(name, ttl=1.5).ttl == 1.5
    assert client.lock(name, ttl=7).ttl == 7.0
    lock = client.lock(name, ttl="1s", renew_interval="100ms", max_hold="1h", auto_renew=True)
    with lock:
        lock.extend("5s")
        assert lock.ttl == 5.0 and 1 < lock.remaining <= 5
        lock.extend(datetime.timedelta(seconds=3))
        assert lock.ttl == 3.0
    with pytest.raises(watchlock.InvalidArgument, match="ttl of lock .*duration '-1s' is negative"):
        lock.extend("-1s")


def test_bad_durations_carry_the_core_parser_message(client, name):
    with pytest.raises(watchlock.InvalidArgument) as info:
        client.lock(name, ttl="10x")
    text = str(info.value)
    assert "ttl" in text and name in text and "unit must be ms, s, m or h" in text
    assert info.value.detail and info.value.detail in text
    with pytest.raises(watchlock.InvalidArgument, match="too long"):
        client.lock(name, ttl=31 * 24 * 3600)


def test_option_checks_are_the_cores(client, name):
    """The setters' EINVAL messages reach Python unchanged (no second check here)."""
    with pytest.raises(watchlock.InvalidArgument) as info:
        client.lock(name, ttl=5, renew_interval=5)
    assert "renew_interval=5" in str(info.value)
    assert info.value.detail.startswith(f"lock '{name}': renew interval must be")
    with pytest.raises(watchlock.InvalidArgument) as info:
        client.lock(name, ttl=0)
    assert "lease must be 1 ms" in info.value.detail
    with pytest.raises(watchlock.InvalidArgument) as info:
        client.lock(name, max_renewals=-1)
    assert "0 = unlimited" in info.value.detail
    with pytest.raises(watchlock.InvalidArgument) as info:
        client.lock("")
    assert info.value.detail == "lock name is empty"


def test_defaults_come_from_the_core(client, name):
    lock = client.lock(name)
    assert lock.ttl == 30.0
    assert lock.blocking_timeout is None and lock.hold_count == 0


def test_max_renewals_and_max_hold_zero_mean_unlimited_as_in_c(client, name):
    a = client.lock(name + ":a", ttl=0.3, max_renewals=0)
    b = client.lock(name + ":b", ttl=0.3, max_hold=0)
    with a, b:
        assert wait_for(lambda: a.renewals >= 4 and b.renewals >= 4, timeout=20)
        assert a.owned() and b.owned() and not a.lost and not b.lost
    # no renewals at all: auto_renew=False
    c = client.lock(name + ":c", ttl=0.3, auto_renew=False)
    with pytest.raises(watchlock.LockLostError):
        with c:
            assert wait_for(lambda: c.lost, timeout=20)
    assert c.renewals == 0 and c.lost_reason == watchlock.LostReason.EXPIRED


def test_hold_count_and_lost_are_the_cores(client, name):
    lock = client.lock(name, ttl=1)
    with lock, lock:
        assert lock.hold_count == watchlock._native.lock_hold_count(lock._h) == 2
    assert lock.hold_count == 0 and not lock.lost
    lock.acquire()
    client.force_release(name)
    assert wait_for(lambda: lock.lost, timeout=20)
    with pytest.raises(watchlock.LockLostError):
        lock.release()
    assert lock.lost and lock.lost_reason == "taken"  # kept after release, until the next hold
    with lock:
        assert not lock.lost


def test_every_loss_reason_code_has_a_lost_reason():
    for code in range(1, 6):
        reason = watchlock.LostReason.from_code(code)
        assert reason is not None and reason == watchlock._native.lost_reason_str(code)
    assert watchlock.LostReason.from_code(watchlock._native.WATCHLOCK_LOST_NONE) is None


def test_module_level_lock_refuses_timeout_before_connecting(monkeypatch):
    import watchlock._client as wclient
    monkeypatch.setattr(wclient, "_default", None)
    monkeypatch.setenv("WATCHLOCK_URL", "redis://127.0.0.1:1")  # nothing listens: no connection is tried
    with pytest.raises(TypeError, match="blocking_timeout="):
        watchlock.lock("x", timeout=5)
