"""Tests of `watchlock check` against real redis-servers, each started with a
setting that breaks lock safety (and one without any, so that the check can
pass). The binary is $WATCHLOCK_CLI, else build/cli/watchlock (as in
test_cli.py). Every test asserts the exact set of finding codes, so a
finding that goes missing or appears wrongly fails it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from redis_server import RedisServer, free_port  # noqa: E402
import waiting  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EX_WARNINGS, EX_USAGE, EX_UNAVAILABLE = 1, 64, 69
SAFE = ["--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"]


def cli_exe() -> str:
    exe = os.environ.get("WATCHLOCK_CLI") or str(REPO / "build" / "cli" / "watchlock")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"watchlock binary not found at {exe}: build it or set WATCHLOCK_CLI")
    return exe


def check(url: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("WATCHLOCK_URL", None)
    return subprocess.run([cli_exe(), "check", "--url", url, *args], env=env, capture_output=True,
                          text=True, timeout=60)


def codes(url: str) -> list[str]:
    """The codes of `check --json`, after checking that the text output agrees."""
    text = check(url)
    js = check(url, "--json")
    assert js.stderr == "" and text.stderr == "", (text.stderr, js.stderr)
    report = json.loads(js.stdout)
    found = [f["code"] for f in report["findings"]]
    assert report["ok"] is (not found)
    assert js.returncode == text.returncode == (EX_WARNINGS if found else 0), (text, js)
    if found:
        lines = text.stdout.splitlines()
        assert [line.split(":", 1)[0] for line in lines] == found, lines
        assert all(f["message"] and f"{f['code']}: {f['message']}" in lines for f in report["findings"])
    return found


def acl_user(srv: RedisServer, name: str, *rules: str) -> str:
    assert srv.command("ACL", "SETUSER", name, "reset", "on", ">pw", *rules) == "OK"
    return f"redis://{name}:pw@127.0.0.1:{srv.port}"


def wait_for(cond, what: str, timeout: float = 30.0, interval: float = 0.02):
    return waiting.wait_for(cond, what, timeout, interval)


def test_safe_server_passes():
    with RedisServer(extra_args=SAFE) as srv:
        r = check(srv.url)
        assert r.returncode == 0, r
        assert r.stdout == f"{srv.url}: no settings found that break lock safety\n"
        assert json.loads(check(srv.url, "--json").stdout) == {"url": srv.url, "ok": True, "findings": []}


def test_eviction():
    with RedisServer(extra_args=SAFE + ["--maxmemory-policy", "allkeys-lru"]) as srv:
        assert codes(srv.url) == ["eviction"]
        assert "allkeys-lru" in check(srv.url).stdout


def test_no_persistence():
    # The harness default: --save "" --appendonly no.
    with RedisServer() as srv:
        assert codes(srv.url) == ["no_persistence"]


def test_fsync_everysec():
    with RedisServer(extra_args=SAFE + ["--appendfsync", "everysec"]) as srv:
        assert codes(srv.url) == ["fsync"]
        assert "appendfsync everysec" in check(srv.url).stdout


def test_several_findings_one_line_each():
    with RedisServer(extra_args=["--maxmemory-policy", "volatile-lru"]) as srv:
        assert sorted(codes(srv.url)) == ["eviction", "no_persistence"]


def test_acl_user_without_evalsha():
    with RedisServer(extra_args=SAFE) as srv:
        # May run ACL DRYRUN: asked.
        url = acl_user(srv, "noevalsha", "~*", "&*", "+@all", "-evalsha")
        assert codes(url) == ["acl_commands"]
        assert "may not run EVALSHA:" in check(url).stdout
        # Least privilege, no ACL/CONFIG/INFO: probed.
        url = acl_user(srv, "narrow", "~watchlock:*", "&watchlock:*", "+@read", "+@write", "+@scripting",
                       "+@pubsub", "+ping", "+time", "-evalsha")
        assert sorted(codes(url)) == ["acl_commands", "unchecked", "unchecked"]
        assert "may not run EVALSHA:" in check(url).stdout


def test_acl_user_with_resetchannels():
    with RedisServer(extra_args=SAFE) as srv:
        url = acl_user(srv, "nochan", "~*", "resetchannels", "+@all")
        assert codes(url) == ["acl_channels"]
        url = acl_user(srv, "nochan2", "~watchlock:*", "resetchannels", "+@read", "+@write", "+@scripting",
                       "+@pubsub", "+ping", "+time")
        assert sorted(codes(url)) == ["acl_channels", "unchecked", "unchecked"]


def test_acl_user_without_lock_keys():
    with RedisServer(extra_args=SAFE) as srv:
        url = acl_user(srv, "appkeys", "~app:*", "&*", "+@all")
        assert codes(url) == ["acl_keys"]


def test_replica_attached():
    with RedisServer(extra_args=SAFE) as master:
        with RedisServer(extra_args=SAFE + ["--replicaof", "127.0.0.1", str(master.port)]) as replica:
            wait_for(lambda: b"connected_slaves:1" in master.command("INFO", "replication"),
                     "the replica to connect")
            assert codes(master.url) == ["replicas"]
            assert codes(replica.url) == ["replica_role"]
            assert master.command("CONFIG", "SET", "min-replicas-to-write", "1") == "OK"
            assert codes(master.url) == []


def test_password_is_not_shown():
    with RedisServer(extra_args=SAFE, password="s3cret") as srv:
        r = check(srv.url, "--json")
        assert r.returncode == 0, r
        assert "s3cret" not in r.stdout
        assert json.loads(r.stdout)["url"] == f"redis://:***@127.0.0.1:{srv.port}"


def test_url_from_environment():
    with RedisServer() as srv:
        env = dict(os.environ, WATCHLOCK_URL=srv.url)
        r = subprocess.run([cli_exe(), "check"], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == EX_WARNINGS, r
        assert r.stdout.startswith("no_persistence: ")


def test_unreachable_exits_69():
    r = check(f"redis://127.0.0.1:{free_port()}")
    assert r.returncode == EX_UNAVAILABLE, r
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("watchlock: cannot connect"), lines


@pytest.mark.parametrize("args", [["extra"], ["--bogus"], ["--url"]])
def test_usage_errors(args):
    r = subprocess.run([cli_exe(), "check", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == EX_USAGE, r
    assert r.stderr.startswith("watchlock: check: "), r.stderr


def test_help():
    for argv in (["check", "--help"], ["help", "check"]):
        r = subprocess.run([cli_exe(), *argv], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith("Usage: watchlock check"), r
    r = subprocess.run([cli_exe(), "--help"], capture_output=True, text=True, timeout=60)
    assert "watchlock check" in r.stdout
