"""Client.check() against real redis-servers, each started with a setting
that breaks lock safety (and one without any, so that the check can pass).
Every test asserts the exact list of finding codes, so a finding that goes
missing or appears wrongly fails it."""
from __future__ import annotations

import pytest

import watchlock
from watchlock import CheckCode, CheckFinding

from conftest import wait_for
from redis_server import RedisServer

SAFE = ["--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"]


def check(url: str) -> list[CheckFinding]:
    with watchlock.Client(url) as client:
        findings = client.check()
    for f in findings:
        assert isinstance(f, CheckFinding)
        assert isinstance(f.code, CheckCode)
        assert f.message and "\n" not in f.message
    return findings


def codes(url: str) -> list[str]:
    return sorted(f.code.value for f in check(url))


def message(url: str, code: CheckCode) -> str:
    found = [f.message for f in check(url) if f.code == code]
    assert found, f"no {code} finding"
    return found[0]


def acl_user(srv: RedisServer, name: str, *rules: str) -> str:
    assert srv.command("ACL", "SETUSER", name, "reset", "on", ">pw", *rules) == "OK"
    return f"redis://{name}:pw@127.0.0.1:{srv.port}"


@pytest.fixture
def safe_redis():
    """A server set up the way locks need it: AOF, fsync always, noeviction."""
    with RedisServer(extra_args=SAFE) as srv:
        yield srv


def test_safe_server_passes(safe_redis):
    assert check(safe_redis.url) == []


def test_eviction():
    with RedisServer(extra_args=SAFE + ["--maxmemory-policy", "allkeys-lru"]) as srv:
        (finding,) = check(srv.url)
        assert finding.code == CheckCode.EVICTION == "eviction"
        assert "allkeys-lru" in finding.message
        assert str(finding.code) == "eviction"
        # Lock keys all have a TTL: volatile-* policies evict them too.
        assert srv.command("CONFIG", "SET", "maxmemory-policy", "volatile-lru") == "OK"
        assert codes(srv.url) == ["eviction"]
        assert srv.command("CONFIG", "SET", "maxmemory-policy", "noeviction") == "OK"
        assert codes(srv.url) == []


def test_no_persistence(fresh_redis):
    # The harness default: --save "" --appendonly no.
    assert codes(fresh_redis.url) == ["no_persistence"]


def test_snapshot_only(fresh_redis):
    assert fresh_redis.command("CONFIG", "SET", "save", "3600 1") == "OK"
    assert codes(fresh_redis.url) == ["snapshot_only"]
    assert 'save "3600 1"' in message(fresh_redis.url, CheckCode.SNAPSHOT_ONLY)


def test_fsync_everysec():
    with RedisServer(extra_args=SAFE + ["--appendfsync", "everysec"]) as srv:
        assert codes(srv.url) == ["fsync"]
        assert "appendfsync everysec" in message(srv.url, CheckCode.FSYNC)


def test_acl_user_without_evalsha(safe_redis):
    url = acl_user(safe_redis, "noevalsha", "~*", "&*", "+@all", "-evalsha")
    assert codes(url) == ["acl_commands"]
    assert "may not run EVALSHA:" in message(url, CheckCode.ACL_COMMANDS)


def test_acl_least_privilege_user_is_probed(safe_redis):
    # No ACL, CONFIG or INFO rights: permissions are probed. The scripts call
    # TIME, which +@read +@write +@scripting do not grant.
    url = acl_user(safe_redis, "narrow", "~watchlock:*", "&watchlock:*", "+@read", "+@write", "+@scripting",
                   "+@pubsub", "+ping")
    assert codes(url) == ["acl_commands", "unchecked", "unchecked"]
    assert "may not run TIME:" in message(url, CheckCode.ACL_COMMANDS)
    # The same user can really not lock: the finding is true.
    with watchlock.Client(url) as client:
        with pytest.raises(watchlock.PermissionDeniedError):
            client.lock("denied").acquire(blocking=False)
    assert safe_redis.command("ACL", "SETUSER", "narrow", "+time") == "OK"
    assert codes(url) == ["unchecked", "unchecked"]
    with watchlock.Client(url) as client:
        lock = client.lock("granted")
        assert lock.acquire(blocking=False)
        lock.release()


def test_acl_user_with_resetchannels(safe_redis):
    url = acl_user(safe_redis, "nochan", "~*", "resetchannels", "+@all")
    assert codes(url) == ["acl_channels"]
    text = message(url, CheckCode.ACL_CHANNELS)
    assert "SUBSCRIBE" in text and "PUBLISH" in text
    url = acl_user(safe_redis, "nochan2", "~watchlock:*", "resetchannels", "+@read", "+@write", "+@scripting",
                   "+@pubsub", "+ping", "+time")
    assert codes(url) == ["acl_channels", "unchecked", "unchecked"]


def test_acl_user_without_lock_keys(safe_redis):
    url = acl_user(safe_redis, "appkeys", "~app:*", "&*", "+@all")
    assert codes(url) == ["acl_keys"]
    url = acl_user(safe_redis, "readonly", "%R~watchlock:*", "&*", "+@read", "+@write", "+@scripting",
                   "+@pubsub", "+ping", "+time")
    assert codes(url) == ["acl_keys", "unchecked", "unchecked"]


def test_replica_attached(safe_redis):
    master = safe_redis
    with RedisServer(extra_args=SAFE + ["--replicaof", "127.0.0.1", str(master.port)]) as replica:
        assert wait_for(lambda: b"connected_slaves:1" in master.command("INFO", "replication"), timeout=30)
        assert codes(master.url) == ["replicas"]
        assert "1 replica connected" in message(master.url, CheckCode.REPLICAS)
        assert codes(replica.url) == ["replica_role"]
        assert f"127.0.0.1:{master.port}" in message(replica.url, CheckCode.REPLICA_ROLE)
        assert master.command("CONFIG", "SET", "min-replicas-to-write", "1") == "OK"
        assert codes(master.url) == []


def test_unreachable_raises_connection_error():
    srv = RedisServer().start()
    try:
        client = watchlock.Client(srv.url)
        srv.stop()
        with pytest.raises(watchlock.ConnectionError) as info:
            client.check()
        assert "cannot check the server" in str(info.value)
        client.close()
    finally:
        srv.close()


def test_closed_client(redis_url):
    client = watchlock.Client(redis_url)
    client.close()
    with pytest.raises(watchlock.ClientClosedError):
        client.check()
