"""Redis Sentinel (redis-sentinel://) and replica acknowledgement
(min_replicas) against a real group: one master, one replica and three
sentinels with quorum 2 (tests/harness/sentinel.py), shared by this module.
Every test starts from a healthy group (one master, the replica linked,
sentinels agreeing); tests that fail the master over or kill it leave the
group to the next test's health wait.

What a failover must never do to a holder: let it go on believing it holds
the lock while the new master has no key of its hold. Each failover test
polls both sides: the key on the new master must hold the holder's token
as long as the holder says it owns the lock (allowing one renewal interval
for the holder to learn otherwise), or the holder must have been told
(on_lost / lost)."""
from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import watchlock
from conftest import wait_for
from helpers import lock_key, watch_holder
from redis_server import _encode, _read_reply, connect, free_port
from sentinel import SentinelGroup

ReplicationError = getattr(watchlock, "ReplicationError", None)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def group():
    with SentinelGroup() as g:
        yield g


@pytest.fixture(autouse=True)
def healthy(request):
    if "group" in request.fixturenames:
        request.getfixturevalue("group").wait_healthy()
    yield


def get(node, key):
    try:
        return node.command("GET", key)
    except OSError:
        return None


def test_acquire_through_sentinel(group, name):
    master, replica = group.master(), group.replica()
    with watchlock.Client(group.url()) as c:
        lock = c.lock(name, ttl=10)
        assert lock.acquire(blocking=False)
        assert master.command("EXISTS", lock_key(name)) == 1
        assert wait_for(lambda: replica.command("EXISTS", lock_key(name)) == 1, timeout=10)
        assert c.inspect(name).held
        lock.release()
        assert master.command("EXISTS", lock_key(name)) == 0


def test_sentinel_url_with_a_database(group, name):
    with watchlock.Client(group.url(db=3)) as c, c.lock(name, ttl=10):
        master = group.master()
        assert master.command("EXISTS", lock_key(name)) == 0
        with connect(master.port) as sock:
            sock.sendall(_encode(("SELECT", 3)) + _encode(("EXISTS", lock_key(name))))
            f = sock.makefile("rb")
            assert _read_reply(f) == "OK" and _read_reply(f) == 1


def test_waiter_woken_through_sentinel(group, name):
    with watchlock.Client(group.url()) as a, watchlock.Client(group.url()) as b:
        holder = a.lock(name, ttl=30)
        assert holder.acquire(blocking=False)
        waiter = b.lock(name, ttl=30)
        got = {}
        th = threading.Thread(target=lambda: got.update(ok=waiter.acquire(timeout=20), t=time.monotonic()))
        th.start()
        assert wait_for(lambda: group.master().command("PUBSUB", "NUMSUB", lock_key(name) + b":released")[1] >= 1)
        t0 = time.monotonic()
        holder.release()
        th.join(25)
        assert got.get("ok") is True and got["t"] - t0 < 3.0
        waiter.release()


def test_wrong_master_name_is_a_clear_error(group):
    t0 = time.monotonic()
    with pytest.raises(watchlock.Error) as info:
        watchlock.Client(group.url(name="no-such-master")).close()
    assert "no-such-master" in str(info.value), str(info.value)
    assert isinstance(info.value, (watchlock.ConnectionError, watchlock.InvalidArgument)), repr(info.value)
    assert time.monotonic() - t0 < 10


def test_no_sentinel_reachable(group):
    url = f"redis-sentinel://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/{group.name}?connect_timeout=500ms"
    t0 = time.monotonic()
    with pytest.raises(watchlock.ConnectionError):
        watchlock.Client(url).close()
    assert time.monotonic() - t0 < 5


def test_one_sentinel_down(group, name):
    """The first sentinel of the URL is down: discovery asks the next one."""
    group.sentinels[0].stop()
    try:
        with watchlock.Client(group.url()) as c:
            with c.lock(name, ttl=5):
                assert group.master().command("EXISTS", lock_key(name)) == 1
    finally:
        group.sentinels[0].start()


def test_min_replicas_with_the_replica_up(group, name):
    with watchlock.Client(group.url(min_replicas=1, min_replicas_timeout="2s")) as c:
        lock = c.lock(name, ttl=10)
        assert lock.acquire(blocking=False)
        # WAIT returned 1: the replica has the key now, no waiting needed
        assert group.replica().command("EXISTS", lock_key(name)) == 1
        lock.release()


def test_min_replicas_with_the_replica_paused(group, name):
    assert ReplicationError is not None, "watchlock.ReplicationError is missing"
    master = group.master()
    with watchlock.Client(group.url(min_replicas=1, min_replicas_timeout="300ms")) as c:
        lock = c.lock(name, ttl=10)
        with group.paused(group.replica()):  # SIGSTOP: it acknowledges nothing
            t0 = time.monotonic()
            with pytest.raises(ReplicationError) as info:
                lock.acquire(blocking=False)
            took = time.monotonic() - t0
            assert master.command("EXISTS", lock_key(name)) == 0, "the key was left on the master"
        assert isinstance(info.value, watchlock.Error)
        assert 0.25 <= took < 3.0, f"took {took:.2f} s with min_replicas_timeout=300ms"
        assert not lock.owned()
        # with the replica back, the same handle gets it
        assert wait_for(lambda: lock.acquire(blocking=False), timeout=10)
        lock.release()


def test_min_replicas_on_a_server_without_replicas(redis_server, name):
    assert ReplicationError is not None, "watchlock.ReplicationError is missing"
    with watchlock.Client(redis_server.url + "?min_replicas=1&min_replicas_timeout=200ms") as c:
        with pytest.raises(ReplicationError):
            c.lock(name).acquire(blocking=False)
        assert redis_server.command("EXISTS", lock_key(name)) == 0


def test_bad_sentinel_urls_are_invalid(group):
    s0 = f"127.0.0.1:{group.sentinels[0].port}"
    for url in (f"redis-sentinel://{s0}",  # no master name
                f"redis-sentinel://{s0}/",
                f"redis-sentinel://{s0},/{group.name}",
                f"{group.url()}?min_replicas=x",
                f"{group.url()}?min_replicas_timeout=soon",
                f"{group.url()}?no_such_option=1"):
        with pytest.raises(watchlock.InvalidArgument):
            watchlock.Client(url).close()


def test_cli_status_through_sentinel(group, name):
    exe = os.environ.get("WATCHLOCK_CLI") or str(REPO / "build" / "cli" / "watchlock")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"watchlock binary not found at {exe}: build it or set WATCHLOCK_CLI")

    def status():
        return subprocess.run([exe, "status", "--url", group.url(), name], capture_output=True, text=True,
                              timeout=60)

    r = status()
    assert r.returncode == 1, (r.stdout, r.stderr)
    with watchlock.Client(group.url()) as c, c.lock(name, ttl=10):
        r = status()
        assert r.returncode == 0, (r.stdout, r.stderr)


def test_cli_exits_69_when_replicas_do_not_acknowledge(redis_server, name, tmp_path):
    """EREPLICAS is "Redis is not available as required" (EX_UNAVAILABLE, 69),
    not 75: a cron job that treats 75 as "another host has it" must not skip
    silently while replication is broken (docs/cli.md)."""
    exe = os.environ.get("WATCHLOCK_CLI") or str(REPO / "build" / "cli" / "watchlock")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"watchlock binary not found at {exe}: build it or set WATCHLOCK_CLI")
    marker = tmp_path / "ran"
    r = subprocess.run([exe, "run", "--url", redis_server.url + "?min_replicas=1&min_replicas_timeout=200ms",
                        name, "--", "touch", str(marker)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 69, (r.returncode, r.stderr)
    assert "replicas" in r.stderr, r.stderr
    assert not marker.exists()
    assert redis_server.command("EXISTS", lock_key(name)) == 0


# ---- failover: keep running with the new master, or be told


def failover_case(group, name, fault, ttl):
    lost = []
    with watchlock.Client(group.url()) as c:
        lock = c.lock(name, ttl=ttl, on_lost=lambda lk, reason: lost.append(reason))
        assert lock.acquire(blocking=False)
        old = group.master()
        token = old.command("GET", lock_key(name))
        assert token
        # the key reached the replica (else this is the async window, tested in tests/faults)
        assert wait_for(lambda: group.replica().command("GET", lock_key(name)) == token, timeout=10)
        fence_before = lock.fencing_token
        t0 = time.monotonic()
        killed = None
        if fault == "failover":
            new = group.failover()
        else:
            killed = group.kill_master()
            new = group.wait_master_changed(killed.port)
        t_switch = time.monotonic()
        try:
            # An unrenewed key had at most `ttl` left when the new master was
            # promoted: still there with our token ttl + 0.3 s later means a
            # renewal reached the new master.
            outcome = watch_holder(lock, token, lambda: get(new, lock_key(lock.name)), ttl + 0.3, ttl / 3)
            if outcome == "kept":
                value, pttl = get(new, lock_key(name)), new.command("PTTL", lock_key(name))
                assert value == token and pttl > 0, (
                    f"the holder still owns the lock {ttl + 0.3:.1f} s after the failover, but the new master "
                    f"(port {new.port}) has {value!r} (PTTL {pttl}) instead of its token: its renewals did "
                    f"not follow the failover")
                with watchlock.Client(group.url()) as other:
                    assert other.lock(name).acquire(blocking=False) is False
                lock.release()
                assert new.command("EXISTS", lock_key(name)) == 0
            else:
                assert lost or lock.lost or not lock.owned()
                assert wait_for(lambda: lost, timeout=5), "LOST without an on_lost callback"
                assert lost[0] in ("taken", "expired", "connection lost"), lost

            # a new acquire through the same URL succeeds on the new master within a few seconds,
            # on the old client and on a new one
            def fresh(client, suffix):
                lk = client.lock(f"{name}:{suffix}", ttl=5)
                try:
                    return lk.acquire(blocking=False) and lk
                except watchlock.ConnectionError:
                    return None
            lk = wait_for(lambda: fresh(c, "old-client"), timeout=15, interval=0.1)
            assert lk, "the client that lived through the failover cannot acquire on the new master"
            assert new.command("EXISTS", lock_key(f"{name}:old-client")) == 1
            lk.release()
            with watchlock.Client(group.url()) as other:
                lk = fresh(other, "new-client")
                assert lk and new.command("EXISTS", lock_key(f"{name}:new-client")) == 1
                lk.release()
                again = other.lock(name, ttl=5)
                assert wait_for(lambda: again.acquire(blocking=False), timeout=ttl + 5)
                assert again.fencing_token > fence_before
                again.release()
            return outcome, t_switch - t0
        finally:
            if killed is not None:
                group.restart(killed)


def test_waiter_resubscribes_on_the_new_master(group, name):
    """A waiter blocked across a SENTINEL FAILOVER subscribes again on the
    new master, and the holder's release (sent to the new master) wakes it,
    long before the holder's 30 s lease could end."""
    with watchlock.Client(group.url()) as a, watchlock.Client(group.url()) as b:
        holder = a.lock(name, ttl=30)
        assert holder.acquire(blocking=False)
        waiter = b.lock(name, ttl=30)
        got = {}
        th = threading.Thread(target=lambda: got.update(ok=waiter.acquire(timeout=40), t=time.monotonic()))
        th.start()
        channel = lock_key(name) + b":released"
        assert wait_for(lambda: group.master().command("PUBSUB", "NUMSUB", channel)[1] >= 1)
        new = group.failover()
        assert wait_for(lambda: new.command("PUBSUB", "NUMSUB", channel)[1] >= 1, timeout=10), \
            "the waiter did not subscribe on the new master"
        t0 = time.monotonic()
        holder.release()
        th.join(45)
        assert got.get("ok") is True and got["t"] - t0 < 3.0, (got, t0)
        assert new.command("EXISTS", lock_key(name)) == 1
        waiter.release()
        assert new.command("EXISTS", lock_key(name)) == 0


def test_sentinel_failover_while_held(group, name):
    outcome, took = failover_case(group, name, "failover", ttl=2.0)
    print(f"SENTINEL FAILOVER: holder {outcome}; new master agreed after {took:.1f} s")


def test_sigkill_of_the_master_while_held(group, name):
    outcome, took = failover_case(group, name, "kill", ttl=5.0)
    print(f"SIGKILL of the master: holder {outcome}; new master agreed after {took:.1f} s")


# ---- passwords: the master's (userinfo) and the sentinels' own (sentinel_password=)


@pytest.fixture(scope="module")
def auth_group():
    with SentinelGroup(password="node-secret", sentinel_password="sentinel-secret") as g:
        yield g


def test_master_and_sentinel_passwords(auth_group, name):
    assert ":node-secret@" in auth_group.url() and "sentinel_password=sentinel-secret" in auth_group.url()
    with watchlock.Client(auth_group.url()) as c, c.lock(name, ttl=5):
        assert auth_group.master().command("EXISTS", lock_key(name)) == 1
    bad = {"wrong sentinel password": auth_group.url(sentinel_password="wrong"),
           "no sentinel password": auth_group.url(sentinel_password=None),
           "no master password": auth_group.url().replace(":node-secret@", ""),
           "wrong master password": auth_group.url().replace(":node-secret@", ":wrong@")}
    for what, url in bad.items():
        with pytest.raises(watchlock.AuthenticationError) as info:
            watchlock.Client(url).close()
        assert "secret" not in str(info.value), (what, str(info.value))


# ---- the same over TLS (rediss-sentinel://): a group of its own


@pytest.fixture(scope="module")
def tls_group(tmp_path_factory):
    from tls import make_certs
    with SentinelGroup(tls=make_certs(str(tmp_path_factory.mktemp("certs")))) as g:
        yield g


def test_tls_sentinel_acquire_and_min_replicas(tls_group, name):
    assert tls_group.url().startswith("rediss-sentinel://")
    with watchlock.Client(tls_group.url(min_replicas=1, min_replicas_timeout="2s")) as c:
        lock = c.lock(name, ttl=10)
        assert lock.acquire(blocking=False)
        assert tls_group.master().command("EXISTS", lock_key(name)) == 1
        assert tls_group.replica().command("EXISTS", lock_key(name)) == 1
        lock.release()
