"""Self-test of tests/harness/cluster.py: the harness the Cluster tests
stand on creates a real 6-node cluster, computes key slots as Redis does,
moves a slot with its keys and fails a master over.

    python3 -m pytest -q tests/harness/test_cluster_harness.py
"""
import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import SLOTS, RedisCluster, RedisError, crc16, key_slot  # noqa: E402

# hash-tag edge cases from the Cluster spec, and the shapes of watchlock's own keys
KEYS = [b"", b"a", b"123456789", b"foo", b"watchlock:{name}", b"watchlock:{name}:fence",
        b"watchlock:{name}:queue", b"{user1000}.following", b"{user1000}.followers",
        b"foo{}{bar}", b"foo{{bar}}zap", b"foo{bar}{zap}", b"{}", b"}{", b"{a", b"a}", b"{{}}",
        "watchlock:{n\u00e4me}".encode(), b"\x00\xff{\x01}\xfe", b"x" * 300]


def test_crc16_and_hash_tags():
    assert crc16(b"123456789") == 0x31C3  # the CRC16-XMODEM check value
    assert key_slot(b"watchlock:{name}") == key_slot(b"watchlock:{name}:fence") == crc16(b"name") % SLOTS
    assert key_slot(b"foo{}{bar}") == crc16(b"foo{}{bar}") % SLOTS   # empty tag: whole key
    assert key_slot(b"foo{{bar}}zap") == crc16(b"{bar") % SLOTS      # first '{' to the next '}'
    assert key_slot(b"foo{bar}{zap}") == crc16(b"bar") % SLOTS       # first tag only
    assert key_slot("watchlock:{x}") == key_slot(b"x")               # str is UTF-8


@pytest.fixture(scope="module")
def cluster():
    with RedisCluster() as c:
        yield c


def test_created_topology(cluster):
    masters, replicas = cluster.masters(), cluster.replicas()
    assert len(masters) == 3 and len(replicas) == 3 and len(cluster.nodes) == 6
    for m in masters:
        assert m.role() == "master"
        (r,) = cluster.replicas(m)
        assert r.role() == "slave"
    assert sum(b - a + 1 for m in masters for a, b in cluster.slots_of(m)) == SLOTS
    assert cluster.node_for_slot(0) is masters[0] and cluster.node_for_slot(SLOTS - 1) is masters[-1]
    hosts = ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes)
    assert cluster.url() == f"redis-cluster://{hosts}"
    assert cluster.url(nodes=cluster.nodes[:2], connect_timeout=1) == \
        f"redis-cluster://{cluster.nodes[0].address},{cluster.nodes[1].address}?connect_timeout=1"
    assert cluster.seeds() == hosts.split(",")


def test_key_slot_matches_cluster_keyslot(cluster):
    node = cluster.nodes[0]
    for key in KEYS + [b"watchlock:{lock-%d}:fence" % i for i in range(50)]:
        assert key_slot(key) == node.call("CLUSTER", "KEYSLOT", key), key


def test_key_routing(cluster):
    owners = set()
    for i in range(30):
        key = b"watchlock:{route-%d}" % i
        m = cluster.master_for_key(key)
        owners.add(m.port)
        assert m.call("SET", key, "v") == "OK"  # no MOVED: the harness routes as the cluster does
    assert len(owners) == 3  # 30 names land on every master


def _other_master(cluster, node):
    return next(m for m in cluster.masters() if m is not node)


def test_migrate_slot(cluster):
    key, fence = b"watchlock:{migrated}", b"watchlock:{migrated}:fence"
    src = cluster.master_for_key(key)
    src.call("SET", key, "holder")
    src.call("SET", fence, "7")
    slot, dst = key_slot(key), _other_master(cluster, src)
    assert cluster.migrate_slot(slot, dst) == 2
    assert cluster.node_for_slot(slot) is dst and cluster.master_for_key(key) is dst
    assert dst.call("GET", key) == b"holder" and dst.call("GET", fence) == b"7"
    moved = src.command("GET", key)
    assert isinstance(moved, RedisError) and str(moved) == f"MOVED {slot} {dst.address}"
    for n in cluster.running():  # replicas too
        assert cluster.view(n)[dst.node_id].owns(slot)


def test_migration_in_steps(cluster):
    key, fence = b"watchlock:{stepwise}", b"watchlock:{stepwise}:fence"
    src = cluster.master_for_key(key)
    src.call("SET", key, "holder")
    src.call("SET", fence, "1")
    slot, dst = key_slot(key), _other_master(cluster, src)
    assert cluster.begin_migration(slot, dst) is src
    assert cluster.move_keys(slot, keys=[key]) == 1
    # mid-migration: the moved key is answered with ASK, the other one still by src
    ask = src.command("GET", key)
    assert isinstance(ask, RedisError) and str(ask) == f"ASK {slot} {dst.address}"
    assert src.call("GET", fence) == b"1"
    assert isinstance(dst.command("GET", key), RedisError)  # MOVED without ASKING
    assert dst.pipeline(("ASKING",), ("GET", key)) == ["OK", b"holder"]
    assert cluster.move_keys(slot) == 1
    cluster.finish_migration(slot)
    assert cluster.master_for_key(key) is dst
    assert dst.call("MGET", key, fence) == [b"holder", b"1"]


def test_failover(cluster):
    key = b"watchlock:{failover}"
    old = cluster.master_for_key(key)
    old.call("SET", key, "held")
    (replica,) = cluster.replicas(old)
    new = cluster.failover(old)
    assert new is replica and new.role() == "master" and old.role() == "slave"
    assert cluster.master_for_key(key) is new and cluster.replicas(new) == [old]
    assert new.call("GET", key) == b"held"  # a manual failover loses no write


def test_kill_master_and_restart(cluster):
    key = b"watchlock:{killed}"
    old = cluster.master_for_key(key)
    old.call("SET", key, "held")
    old.call("WAIT", "1", "2000")
    new = cluster.kill_master(old)
    assert not old.running() and new.role() == "master" and cluster.master_for_key(key) is new
    assert new.call("GET", key) == b"held"
    cluster.restart(old)
    assert old.role() == "slave" and cluster.replicas(new) == [old]


def test_tls_cluster():
    cert_dir = tempfile.mkdtemp(prefix="watchlock-certs-")
    try:
        from tls import make_certs
        certs = make_certs(cert_dir)
        with RedisCluster(tls=certs) as c:
            assert c.url().startswith("rediss-cluster://127.0.0.1:")
            assert c.url(connect_timeout=1).endswith(f"?cacert={certs.ca}&connect_timeout=1")
            key = b"watchlock:{tls}"
            src = c.master_for_key(key)
            src.call("SET", key, "v")
            dst = _other_master(c, src)
            assert c.migrate_slot(key_slot(key), dst) == 1  # MIGRATE over TLS (tls-cluster)
            assert dst.call("GET", key) == b"v"
    finally:
        shutil.rmtree(cert_dir, ignore_errors=True)
