"""issue 25 item 5: Client.stats() counts every event exactly (acquires,
contended acquires, timeouts, losses by reason, release retries, wait/hold
time and renewal round-trip histograms), and the Prometheus collector of
docs/python.md exports them."""
from __future__ import annotations

import math
import re
import threading
import time
from pathlib import Path

import pytest

import watchlock
from proxy import Proxy  # tests/harness (on sys.path via conftest)
from waiting import wait_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"


def wait_until(cond, timeout=10.0):
    wait_for(cond, "the condition", timeout)


def test_histogram_shape(client):
    s = client.stats()
    for key in ("wait_time", "hold_time", "renew_rtt"):
        h = s[key]
        assert isinstance(h, watchlock.Histogram)
        assert len(h.buckets) == watchlock._native.WATCHLOCK_HIST_BUCKETS
        assert h.buckets[0][0] == pytest.approx(64e-6) and h.buckets[1][0] == pytest.approx(256e-6)
        assert h.buckets[-1][0] == math.inf
        assert h.count == 0 and h.sum == 0
    assert s["lost"] == {"taken": 0, "expired": 0, "max_renewals": 0, "max_hold": 0, "connection": 0}


def test_counts_after_known_operations(client, redis_url, name):
    a, b = client.lock(name), client.lock(name)
    with a:
        with a:  # reentrant: no new hold
            pass
        assert not b.acquire(blocking=False)
        assert not b.acquire(timeout=0.05)
    s = client.stats()
    assert (s["acquires"], s["contended_acquires"], s["acquire_timeouts"]) == (1, 0, 2)
    assert s["wait_time"].count == 1 and s["hold_time"].count == 1

    # a waits for an unrenewed 0.6 s holder: contended, ~0.6 s of wait, one expiry
    holder = client.lock(name, ttl=0.6, auto_renew=False)
    assert holder.acquire(blocking=False)
    t0 = time.monotonic()
    with b:
        waited = time.monotonic() - t0
    wait_until(lambda: holder.lost)
    s = client.stats()
    assert (s["acquires"], s["contended_acquires"]) == (3, 1)
    assert s["lost"]["expired"] == 1
    h = s["wait_time"]
    assert h.count == 3 and 0.26 <= h.sum <= waited + 0.01 + 0.5
    # the long wait is in the 262 ms .. 1.05 s bucket
    assert [n for upper, n in h.buckets if upper == pytest.approx(1.048576)] == [1]
    assert s["hold_time"].count == 2

    # taken (found by the watchdog, and by release), max renewals, max hold
    t = client.lock(name + ":t", ttl=0.9)
    r = client.lock(name + ":r")
    m = client.lock(name + ":m", ttl=0.6, max_renewals=2)
    mh = client.lock(name + ":h", ttl=0.6, max_hold=0.7)
    for lk in (t, r, m, mh):
        assert lk.acquire(blocking=False)
    client.force_release(name + ":t")
    client.force_release(name + ":r")
    with pytest.raises(watchlock.LockNotOwnedError):
        r.release()
    wait_until(lambda: t.lost and m.lost and mh.lost)
    s = client.stats()
    assert s["lost"] == {"taken": 2, "expired": 1, "max_renewals": 1, "max_hold": 1, "connection": 0}
    assert s["acquires"] == 7 and s["held_locks"] == 0
    assert s["renew_rtt"].count == s["renew_rounds"] >= 3 and s["renew_rtt"].sum > 0


def test_release_retry_and_connection_loss(redis_server, name):
    with Proxy(redis_server.port) as px:
        with watchlock.Client(f"redis://127.0.0.1:{px.port}?command_timeout=200ms&connect_timeout=200ms") as c:
            lk = c.lock(name)
            assert lk.acquire(blocking=False)
            px.drop_reply_once()
            lk.release()
            assert c.stats()["release_retries"] == 1
            px.command("clear")
            lk2 = c.lock(name, ttl=1)
            assert lk2.acquire(blocking=False)
            px.blackhole()
            wait_until(lambda: lk2.lost)
            assert c.stats()["lost"]["connection"] == 1
            px.command("clear")


def collector_source() -> str:
    text = DOC.read_text()
    section = text[text.index("## Stats and Prometheus"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_prometheus_collector_of_the_docs(client, name):
    import prometheus_client  # installed by scripts/test
    ns: dict = {}
    exec(compile(collector_source(), str(DOC), "exec"), ns)
    registry = prometheus_client.CollectorRegistry()
    registry.register(ns["WatchlockCollector"](client))
    a, b = client.lock(name), client.lock(name)
    for _ in range(3):
        with a:
            pass
    with a:
        assert not b.acquire(blocking=False)
    gone = client.lock(name + ":gone", ttl=1)
    assert gone.acquire(blocking=False)
    client.force_release(name + ":gone")
    wait_until(lambda: gone.lost)
    text = prometheus_client.generate_latest(registry).decode()

    def value(sample):
        m = re.search("^" + re.escape(sample) + r" (\S+)$", text, re.M)
        assert m, (sample, text)
        return float(m.group(1))

    assert value("watchlock_acquires_total") == 5
    assert value("watchlock_contended_acquires_total") == 0
    assert value("watchlock_acquire_timeouts_total") == 1
    assert value('watchlock_lost_total{reason="taken"}') == 1
    assert value('watchlock_lost_total{reason="expired"}') == 0
    assert value("watchlock_held_locks") == 0
    assert value("watchlock_wait_time_seconds_count") == 5
    assert value('watchlock_wait_time_seconds_bucket{le="+Inf"}') == 5
    assert value("watchlock_hold_time_seconds_count") == 4
    assert 0 < value("watchlock_hold_time_seconds_sum") < 5
    s = client.stats()
    assert value("watchlock_renew_rtt_seconds_count") <= s["renew_rtt"].count
    assert value("watchlock_renewals_total") <= s["renewals"]
    # buckets are cumulative and end at the count
    les = re.findall(r'^watchlock_wait_time_seconds_bucket\{le="([^"]+)"\} (\S+)$', text, re.M)
    counts = [float(n) for _, n in les]
    assert counts == sorted(counts) and counts[-1] == 5 and len(les) == watchlock._native.WATCHLOCK_HIST_BUCKETS
