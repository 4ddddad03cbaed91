"""Redis Cluster (redis-cluster://, rediss-cluster://) against a real cluster
of 3 masters with one replica each (tests/harness/cluster.py), shared by
this module. Every test starts from a cluster that agrees (cluster_state ok,
same slot owners and roles everywhere, replicas linked). Which node is a
master changes as the tests go (failovers, migrations): every test asks the
cluster where a key lives now (master_for_key), never remembers it.

The tests that change the topology (migrations, failovers, a SIGKILL) come
last and leave a cluster that agrees again; the TLS tests get a cluster of
their own.

What a failover must never do to a holder: let it go on believing it holds
the lock while the new master has no key of its hold (the same rule, and
the same check, as tests/python/test_sentinel.py): either the key on the new
master holds the holder's token after a renewal, or the holder is told
(on_lost)."""
from __future__ import annotations

import threading
import time
from typing import Dict, List

import pytest

import watchlock
from cluster import ClusterNode, RedisCluster, RedisError, key_slot
from conftest import wait_for
from helpers import lock_key, watch_holder
from redis_server import free_port


@pytest.fixture(scope="module")
def cluster():
    with RedisCluster() as c:
        yield c


@pytest.fixture(autouse=True)
def healthy(request):
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").wait_healthy()
    yield


# ---- helpers


def get(node: ClusterNode, key: bytes, asking: bool = False):
    """GET key on node: the value, None (no key or the node does not answer),
    or a RedisError (MOVED: the node does not serve the key's slot)."""
    try:
        if asking:
            return node.pipeline(("ASKING",), ("GET", key))[1]
        return node.command("GET", key)
    except OSError:
        return None


def pttl(node: ClusterNode, key: bytes, asking: bool = False):
    if asking:
        return node.pipeline(("ASKING",), ("PTTL", key))[1]
    return node.command("PTTL", key)


def replica_get(node: ClusterNode, key: bytes):
    """GET on a replica (READONLY first: a replica answers MOVED otherwise)."""
    try:
        return node.pipeline(("READONLY",), ("GET", key))[1]
    except OSError:
        return None


def shard_subscribers(node: ClusterNode, channel: bytes) -> int:
    """Clients subscribed to the sharded channel on node (PUBSUB SHARDNUMSUB)."""
    try:
        r = node.command("PUBSUB", "SHARDNUMSUB", channel)
    except OSError:
        return 0
    return r[1] if isinstance(r, list) and len(r) == 2 else 0


def channel_of(name: str) -> bytes:
    return lock_key(name) + b":released"


def names_on_every_master(cluster: RedisCluster, prefix: str, per_master: int = 1) -> Dict[int, List[str]]:
    """{master port: names whose keys that master serves}, per_master names
    for each master, chosen by key slot against the slot map of now."""
    ranges = {m.port: cluster.slots_of(m) for m in cluster.masters()}
    assert len(ranges) == 3, ranges
    out: Dict[int, List[str]] = {p: [] for p in ranges}
    i = 0
    while any(len(v) < per_master for v in out.values()):
        n = f"{prefix}:{i}"
        i += 1
        slot = key_slot(lock_key(n))
        port = next(p for p, rs in ranges.items() if any(a <= slot <= b for a, b in rs))
        if len(out[port]) < per_master:
            out[port].append(n)
    return out


def name_in_slot(prefix: str, slot: int) -> str:
    """A lock name whose keys hash to slot (the core puts the name itself in
    the hash tag, so a name is chosen by trying)."""
    i = 0
    while True:
        n = f"{prefix}:s{i}"
        if key_slot(lock_key(n)) == slot:
            return n
        i += 1


def other_master(cluster: RedisCluster, than: ClusterNode) -> ClusterNode:
    return next(m for m in cluster.masters() if m is not than)


# ---- names over all masters


def test_names_spread_over_all_masters(cluster, name):
    spread = names_on_every_master(cluster, name, per_master=2)
    with watchlock.Client(cluster.url()) as c:
        locks = {n: c.lock(n, ttl=10) for ns in spread.values() for n in ns}
        for lk in locks.values():
            assert lk.acquire(blocking=False)
        for port, ns in spread.items():
            owner = cluster.node_at(port)
            for n in ns:
                key = lock_key(n)
                assert cluster.master_for_key(key) is owner
                value = get(owner, key)
                assert isinstance(value, bytes) and value, f"{key!r} is not on its master {owner}: {value!r}"
                assert 0 < pttl(owner, key) <= 10000
                assert int(get(owner, key + b":fence")) == locks[n].fencing_token
                # every other master answers MOVED for it: the key is on one node only
                for m in cluster.masters():
                    if m is not owner:
                        moved = get(m, key)
                        assert isinstance(moved, RedisError) and str(moved).startswith("MOVED"), moved
        # a second client on the same URL sees each of them held
        with watchlock.Client(cluster.url()) as other:
            for n in locks:
                assert other.lock(n).acquire(blocking=False) is False
        for lk in locks.values():
            lk.release()
        for port, ns in spread.items():
            for n in ns:
                assert cluster.node_at(port).command("EXISTS", lock_key(n)) == 0


def test_names_with_braces_and_binary_bytes(cluster, name):
    """The core escapes '{', '}' and '%' in a name, so the hash tag is the
    whole (escaped) name: every name, braces or not, lands on the master of
    the slot of its escaped key, with its fence beside it."""
    names = [f"{name}:{{tag}}", f"{{{name}}}", f"}}{{{name}", f"{name}%7B", f"{name}:{{}}",
             (name + ":\x00\xff{b}").encode().decode("unicode_escape").encode("latin-1")]
    with watchlock.Client(cluster.url()) as c:
        for n in names:
            key = lock_key(n)
            lk = c.lock(n, ttl=10)
            assert lk.acquire(blocking=False)
            owner = cluster.master_for_key(key)
            assert owner.command("EXISTS", key) == 1, (n, key)
            assert key_slot(key + b":fence") == key_slot(key)
            assert int(get(owner, key + b":fence")) == lk.fencing_token
            assert c.inspect(n).held
            lk.release()
            assert owner.command("EXISTS", key) == 0


def test_extend_and_close_on_every_master(cluster, name):
    spread = names_on_every_master(cluster, name)
    c = watchlock.Client(cluster.url())
    try:
        locks = [c.lock(ns[0], ttl=2) for ns in spread.values()]
        for lk in locks:
            assert lk.acquire(blocking=False)
            lk.extend(30)
            owner = cluster.master_for_key(lock_key(lk.name))
            assert 20000 < pttl(owner, lock_key(lk.name)) <= 30000
    finally:
        c.close()  # releases what it holds, on every master
    for ns in spread.values():
        assert cluster.master_for_key(lock_key(ns[0])).command("EXISTS", lock_key(ns[0])) == 0


def test_inspect_and_force_release_route_by_name(cluster, name):
    spread = names_on_every_master(cluster, name)
    lost: Dict[str, str] = {}
    with watchlock.Client(cluster.url()) as a, watchlock.Client(cluster.url()) as admin:
        locks = {n: a.lock(n, ttl=1.5, on_lost=lambda lk, reason: lost.setdefault(lk.name, reason))
                 for ns in spread.values() for n in ns}
        for lk in locks.values():
            assert lk.acquire(blocking=False)
        for n, lk in locks.items():
            info = admin.inspect(n)
            assert info.held and 0 < info.remaining <= 1.5, info
            assert info.fencing_token == lk.fencing_token
        free = admin.inspect(f"{name}:never")
        assert not free.held and free.fencing_token == 0
        for port, ns in spread.items():
            for n in ns:
                assert admin.force_release(n) is True
                assert cluster.node_at(port).command("EXISTS", lock_key(n)) == 0
                assert not admin.inspect(n).held
                assert admin.force_release(n) is False
        # each holder learns it at its next renewal (every 0.5 s)
        assert wait_for(lambda: len(lost) == len(locks), timeout=5), lost
        assert set(lost.values()) == {"taken"}, lost
        for lk in locks.values():
            assert not lk.owned()


def test_waiters_woken_across_nodes(cluster, name):
    """A waiter per master, on another client than the holder: each is woken
    by the release through its node's sharded channel, long before the
    holder's lease would have ended (the waiters' own bound is shorter than
    that lease, so getting the lock at all means they were woken)."""
    ttl, bound = 30, 20
    names = [ns[0] for ns in names_on_every_master(cluster, name).values()]
    with watchlock.Client(cluster.url()) as a, watchlock.Client(cluster.url()) as b:
        holders = [a.lock(n, ttl=ttl) for n in names]
        for h in holders:
            assert h.acquire(blocking=False)
        got: Dict[str, float] = {}
        waiters = [b.lock(n, ttl=ttl) for n in names]

        def wait(lk):
            if lk.acquire(timeout=bound):
                got[lk.name] = time.monotonic()

        threads = [threading.Thread(target=wait, args=(w,)) for w in waiters]
        for th in threads:
            th.start()
        for n in names:
            assert wait_for(lambda: shard_subscribers(cluster.master_for_key(lock_key(n)), channel_of(n)) >= 1,
                            timeout=10), f"nobody subscribed to {channel_of(n)!r} on its master"
        t0 = time.monotonic()
        for h in holders:
            h.release()
        for th in threads:
            th.join(bound + 5)
        assert set(got) == set(names), f"not woken: {set(names) - set(got)}"
        print(f"hand-offs after {', '.join(f'{got[n] - t0:.3f}' for n in names)} s")
        assert all(got[n] - t0 < ttl for n in names)
        for w in waiters:
            assert w.owned()
            w.release()


def test_watchdog_keeps_locks_on_all_masters(cluster, name):
    spread = names_on_every_master(cluster, name, per_master=2)
    lost = []
    with watchlock.Client(cluster.url()) as c:
        locks = {n: c.lock(n, ttl=1, on_lost=lambda lk, reason: lost.append((lk.name, reason)))
                 for ns in spread.values() for n in ns}
        tokens = {}
        for n, lk in locks.items():
            assert lk.acquire(blocking=False)
            tokens[n] = get(cluster.master_for_key(lock_key(n)), lock_key(n))
        before = c.stats()["renewals"]
        time.sleep(3.0)  # three leases must pass
        for port, ns in spread.items():
            owner = cluster.node_at(port)
            for n in ns:
                assert locks[n].owned() and not locks[n].lost, (n, locks[n].lost_reason)
                assert get(owner, lock_key(n)) == tokens[n]
                assert 0 < pttl(owner, lock_key(n)) <= 1000
                assert locks[n].renewals >= 3, (n, locks[n].renewals)
        assert not lost
        stats = c.stats()
        assert stats["held_locks"] == len(locks)
        assert stats["renewals"] - before >= 3 * len(locks), stats
        for lk in locks.values():
            lk.release()


def test_min_replicas_through_a_cluster_url(cluster, name):
    spread = names_on_every_master(cluster, name)
    url = cluster.url(min_replicas=1, min_replicas_timeout="2s")
    with watchlock.Client(url) as c:
        locks = {}
        for port, (n,) in spread.items():
            lk = locks[n] = c.lock(n, ttl=1)
            assert lk.acquire(blocking=False)
            # WAIT on the acquiring connection returned 1: the master's replica has it now
            (replica,) = cluster.replicas(cluster.node_at(port))
            assert replica_get(replica, lock_key(n)) == get(cluster.node_at(port), lock_key(n)) is not None
        time.sleep(2.0)  # renewals with WAIT keep them past two leases
        for lk in locks.values():
            assert lk.owned() and lk.renewals >= 2, (lk.name, lk.lost_reason, lk.renewals)
            lk.release()


def test_min_replicas_with_one_replica_paused(cluster, name):
    """Replica acknowledgements are per node: with one master's replica
    frozen, names on that master fail with ReplicationError (and leave no
    key); names on the other masters are unaffected."""
    spread = names_on_every_master(cluster, name)
    victim = cluster.masters()[0]
    (replica,) = cluster.replicas(victim)
    url = cluster.url(min_replicas=1, min_replicas_timeout="300ms")
    with watchlock.Client(url) as c:
        with cluster.paused(replica):
            for port, (n,) in spread.items():
                lk = c.lock(n, ttl=10)
                if port == victim.port:
                    with pytest.raises(watchlock.ReplicationError):
                        lk.acquire(blocking=False)
                    assert victim.command("EXISTS", lock_key(n)) == 0, "the key was left on the master"
                    assert not lk.owned()
                else:
                    assert lk.acquire(blocking=False)
                    lk.release()
    cluster.wait_healthy()


# ---- seeds


def test_a_dead_seed_first(cluster, name):
    dead = f"127.0.0.1:{free_port()}"
    url = cluster.url(connect_timeout="500ms").replace("://", f"://{dead},", 1)
    assert url.startswith(f"redis-cluster://{dead},127.0.0.1:")
    with watchlock.Client(url) as c:
        for ns in names_on_every_master(cluster, name).values():
            lk = c.lock(ns[0], ttl=5)
            assert lk.acquire(blocking=False)
            assert cluster.master_for_key(lock_key(ns[0])).command("EXISTS", lock_key(ns[0])) == 1
            lk.release()


def test_only_the_last_seed_alive(cluster, name):
    dead = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    live = cluster.seeds(cluster.replicas()[-1:])  # a replica: the map still comes from CLUSTER SLOTS
    url = f"redis-cluster://{','.join(dead + live)}?connect_timeout=500ms"
    with watchlock.Client(url) as c, c.lock(name, ttl=5):
        assert cluster.master_for_key(lock_key(name)).command("EXISTS", lock_key(name)) == 1


def test_all_seeds_dead_is_a_clear_connection_error():
    ports = [free_port(), free_port()]
    url = f"redis-cluster://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
    t0 = time.monotonic()
    with pytest.raises(watchlock.ConnectionError) as info:
        watchlock.Client(url).close()
    assert time.monotonic() - t0 < 5
    # the detail after "cannot open watchlock client for URL: "
    detail = str(info.value).split(url + ": ", 1)[-1]
    # says why: the seed nodes could not be reached (not that the cluster serves no slot)
    assert f"127.0.0.1:{ports[0]}" in detail, detail
    assert "refused" in detail or "connect" in detail, detail


def test_malformed_cluster_urls_are_invalid(cluster):
    seed = cluster.seeds()[0]
    for url in ("redis-cluster://", "redis-cluster:///", "rediss-cluster://",
                "redis-cluster://:secret@",                     # credentials but no host
                f"redis-cluster://{seed}/0", f"redis-cluster://{seed}/3",  # a cluster has only db 0
                f"redis-cluster://{seed}?db=1", f"redis-cluster://{seed}/?db=2",
                f"redis-cluster://{seed},", f"redis-cluster://,{seed}", f"redis-cluster://{seed},,{seed}",
                f"redis-cluster://{seed},127.0.0.1:99999",
                f"redis-cluster://{seed},user:pw@127.0.0.1:1",  # credentials after the first host
                f"redis-cluster://{seed}?no_such_option=1",
                f"redis-cluster://{seed}?min_replicas=x"):
        with pytest.raises(watchlock.InvalidArgument):
            watchlock.Client(url).close()
    # a trailing slash (no database) is fine
    with watchlock.Client(f"redis-cluster://{seed}/") as c:
        assert c.inspect("x").held is False


# ---- resharding


def test_slot_migration_while_held(cluster, name):
    """The held name's slot moves to another master in steps. While it is
    migrating (keys moved, the source answers ASK) and after (MOVED), the
    renewals reach the new node: its copy of the key outlives the lease it
    carried when it moved. Release then deletes it there."""
    ttl = 2.0
    key = lock_key(name)
    slot = key_slot(key)
    lost = []
    with watchlock.Client(cluster.url()) as c:
        lock = c.lock(name, ttl=ttl, on_lost=lambda lk, reason: lost.append(reason))
        assert lock.acquire(blocking=False)
        src = cluster.master_for_key(key)
        dst = other_master(cluster, src)
        token = get(src, key)
        cluster.begin_migration(slot, dst)
        try:
            assert cluster.move_keys(slot) >= 2  # the lock and its fence
            assert isinstance(get(src, key), RedisError) and str(get(src, key)).startswith("ASK")
            time.sleep(ttl + 0.5)  # outlive the lease the moved key carried
            assert not lost and lock.owned(), (lost, lock.lost_reason)
            assert get(dst, key, asking=True) == token, "renewals did not follow ASK to the importing node"
            assert pttl(dst, key, asking=True) > 0
        finally:
            cluster.finish_migration(slot)
        assert cluster.master_for_key(key) is dst
        r0 = lock.renewals
        time.sleep(ttl + 0.5)
        assert not lost and lock.owned(), (lost, lock.lost_reason)
        assert lock.renewals >= r0 + 2
        assert get(dst, key) == token and 0 < pttl(dst, key) <= ttl * 1000
        moved = get(src, key)
        assert isinstance(moved, RedisError) and str(moved).startswith("MOVED"), moved
        lock.release()
        assert dst.command("EXISTS", key) == 0
        assert not lost


def test_slot_migration_while_waiting(cluster, name):
    """A waiter subscribed on the source node; the slot moves (the source
    drops the subscription); the waiter joins the channel on the new node
    and is woken by the release there, long before the holder's lease would
    have ended (its own bound is shorter than that lease)."""
    ttl, bound = 30, 20
    key, channel = lock_key(name), channel_of(name)
    slot = key_slot(key)
    with watchlock.Client(cluster.url()) as a, watchlock.Client(cluster.url()) as b:
        holder = a.lock(name, ttl=ttl)
        assert holder.acquire(blocking=False)
        src = cluster.master_for_key(key)
        dst = other_master(cluster, src)
        waiter = b.lock(name, ttl=ttl)
        got = {}

        def wait():
            try:
                got.update(ok=waiter.acquire(timeout=bound), t=time.monotonic())
            except watchlock.Error as e:
                got.update(error=e)

        th = threading.Thread(target=wait)
        th.start()
        try:
            assert wait_for(lambda: shard_subscribers(src, channel) >= 1, timeout=10)
            cluster.migrate_slot(slot, dst)
            assert wait_for(lambda: shard_subscribers(dst, channel) >= 1, timeout=10), (
                "the waiter did not subscribe to the channel on the slot's new node")
            assert shard_subscribers(src, channel) == 0
            t0 = time.monotonic()
            holder.release()  # raises unless the new node deleted our key
            assert not holder.owned()  # (the waiter may hold the key again already)
            th.join(bound + 5)
        finally:
            if th.is_alive():
                b.close()  # wakes the blocked acquire: a failed test does not sit out the waiter's bound
            th.join(10)
        assert got.get("ok") is True, f"the waiter was not woken by the release on the new node: {got}"
        print(f"hand-off after the migration: {got['t'] - t0:.3f} s")
        assert got["t"] - t0 < ttl
        assert waiter.owned() and dst.command("EXISTS", key) == 1
        waiter.release()


def test_acquire_during_a_migration_retries_until_it_ends(cluster, name):
    """A free name in a slot under migration: the source answers ASK, the
    importing node TRYAGAIN (a script's keys are not all there yet) until
    the slot's owner is settled. An acquire retries within the command
    timeout (2 s) instead of failing: the migration ends 0.5 s in."""
    key = lock_key(name)
    slot = key_slot(key)
    src = cluster.master_for_key(key)
    dst = other_master(cluster, src)
    with watchlock.Client(cluster.url()) as c:
        lk = c.lock(name, ttl=5)  # kept: a Lock that goes away gives its hold back
        cluster.begin_migration(slot, dst)
        finisher = threading.Timer(0.5, cluster.finish_migration, (slot,))
        finisher.start()
        try:
            t0 = time.monotonic()
            try:
                got = lk.acquire(blocking=False)
            except watchlock.ConnectionError as e:
                pytest.fail(f"acquire failed {time.monotonic() - t0:.2f} s into a 0.5 s migration "
                            f"(command timeout 2 s): {e}")
        finally:
            finisher.join(35)
        assert got is True
        assert cluster.master_for_key(key) is dst and dst.command("EXISTS", key) == 1
        lk.release()


# ---- failover: keep running with the new master, or be told


def failover_case(cluster, name, fault, ttl):
    lost = []
    key = lock_key(name)
    slot = key_slot(key)
    with watchlock.Client(cluster.url()) as c:
        lock = c.lock(name, ttl=ttl, on_lost=lambda lk, reason: lost.append(reason))
        assert lock.acquire(blocking=False)
        old = cluster.master_for_key(key)
        (replica,) = cluster.replicas(old)
        token = get(old, key)
        assert isinstance(token, bytes)
        # the key reached the replica (else this is the async window, tested in tests/faults)
        assert wait_for(lambda: replica_get(replica, key) == token, timeout=10)
        fence_before = lock.fencing_token
        t0 = time.monotonic()
        killed = None
        if fault == "failover":
            new = cluster.failover(old, replica)
        else:
            killed = old
            new = cluster.kill_master(old)
        assert new is replica and cluster.master_for_key(key) is new
        took = time.monotonic() - t0
        try:
            # An unrenewed key had at most `ttl` left when the replica was
            # promoted: still there with our token ttl + 0.3 s later means a
            # renewal reached the new master.
            outcome = watch_holder(lock, token, lambda: get(new, lock_key(lock.name)), ttl + 0.3, ttl / 3)
            if outcome == "kept":
                value, left = get(new, key), pttl(new, key)
                assert value == token and left > 0, (
                    f"the holder still owns the lock {ttl + 0.3:.1f} s after the failover, but the new master "
                    f"({new}) has {value!r} (PTTL {left}) instead of its token: its renewals did not follow")
                with watchlock.Client(cluster.url()) as other:
                    assert other.lock(name).acquire(blocking=False) is False
                lock.release()
                assert new.command("EXISTS", key) == 0
            else:
                assert wait_for(lambda: lost, timeout=5), "LOST without an on_lost callback"
                assert lost[0] in ("taken", "expired", "connection lost"), lost

            # a new acquire through the same URL on another name of that slot
            # succeeds on the new master within a few seconds, on the old client and a new one
            def fresh(client, prefix):
                lk = client.lock(name_in_slot(prefix, slot), ttl=5)
                try:
                    return lk.acquire(blocking=False) and lk
                except watchlock.ConnectionError:
                    return None

            t1 = time.monotonic()
            lk = wait_for(lambda: fresh(c, f"{name}:old-client"), timeout=5, interval=0.1)
            assert lk, "the client that lived through the failover cannot acquire on the new master"
            print(f"first acquire in the slot {time.monotonic() - t1:.2f} s after the cluster agreed")
            assert new.command("EXISTS", lock_key(lk.name)) == 1
            lk.release()
            with watchlock.Client(cluster.url()) as other:
                lk = fresh(other, f"{name}:new-client")
                assert lk and new.command("EXISTS", lock_key(lk.name)) == 1
                lk.release()
                again = other.lock(name, ttl=5)
                assert wait_for(lambda: again.acquire(blocking=False), timeout=ttl + 5)
                assert again.fencing_token > fence_before
                again.release()
            return outcome, took
        finally:
            if killed is not None:
                cluster.restart(killed)


def test_cluster_failover_while_held(cluster, name):
    outcome, took = failover_case(cluster, name, "failover", ttl=2.0)
    print(f"CLUSTER FAILOVER: holder {outcome}; the cluster agreed after {took:.1f} s")


def test_sigkill_of_a_master_while_held(cluster, name):
    outcome, took = failover_case(cluster, name, "kill", ttl=3.0)
    print(f"SIGKILL of a master: holder {outcome}; the cluster agreed after {took:.1f} s")


# ---- TLS (rediss-cluster://): a cluster of its own


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    from tls import make_certs
    with RedisCluster(tls=make_certs(str(tmp_path_factory.mktemp("certs")))) as c:
        yield c


def test_tls_cluster_acquire_and_hand_off(tls_cluster, name):
    url = tls_cluster.url()
    assert url.startswith("rediss-cluster://") and "cacert=" in url
    names = [ns[0] for ns in names_on_every_master(tls_cluster, name).values()]
    with watchlock.Client(url) as a, watchlock.Client(url) as b:
        for n in names:  # one acquire/release on every master
            with a.lock(n, ttl=5) as lk:
                assert tls_cluster.master_for_key(lock_key(n)).command("GET", lock_key(n))
                assert lk.owned()
            assert tls_cluster.master_for_key(lock_key(n)).command("EXISTS", lock_key(n)) == 0
        # a waiter on another client is woken through the sharded channel over TLS
        holder = a.lock(names[0], ttl=30)
        assert holder.acquire(blocking=False)
        waiter = b.lock(names[0], ttl=30)
        got = {}
        th = threading.Thread(target=lambda: got.update(ok=waiter.acquire(timeout=20), t=time.monotonic()))
        th.start()
        node = tls_cluster.master_for_key(lock_key(names[0]))
        assert wait_for(lambda: shard_subscribers(node, channel_of(names[0])) >= 1, timeout=10)
        t0 = time.monotonic()
        holder.release()
        th.join(25)
        assert got.get("ok") is True and got["t"] - t0 < 30
        waiter.release()


def test_tls_cluster_needs_the_ca(tls_cluster):
    """Without cacert= the system store does not trust the test CA: a clear
    TLS error at open, not a hang."""
    url = tls_cluster.url().split("?", 1)[0] + "?connect_timeout=1s"
    with pytest.raises(watchlock.ConnectionError) as info:
        watchlock.Client(url).close()
    assert "certificate" in str(info.value) or "TLS" in str(info.value), str(info.value)
