"""The `watchlock` CLI on Redis Cluster (redis-cluster://) against a real
cluster of 3 masters with one replica each (tests/harness/cluster.py),
shared by this module: run + status (renewed on the slot's master past its
lease), list (SCAN on every master), release --force, check, and an
unreachable cluster. The binary is $WATCHLOCK_CLI, else build/cli/watchlock
(as in test_cli.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from cluster import RedisCluster, key_slot  # noqa: E402
from helpers import lock_key  # noqa: E402
from redis_server import free_port  # noqa: E402
import waiting  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EX_WARNINGS, EX_UNAVAILABLE = 1, 69


def cli_exe() -> str:
    exe = os.environ.get("WATCHLOCK_CLI") or str(REPO / "build" / "cli" / "watchlock")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"watchlock binary not found at {exe}: build it or set WATCHLOCK_CLI")
    return exe


def cli(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("WATCHLOCK_URL", None)
    return subprocess.run([cli_exe(), *args], env=env, capture_output=True, text=True, timeout=timeout, **kw)


def wait_for(cond, what: str, timeout: float = 60, interval: float = 0.02):
    return waiting.wait_for(cond, what, timeout, interval)


@pytest.fixture(scope="module")
def cluster():
    with RedisCluster() as c:
        yield c


@pytest.fixture(autouse=True)
def healthy(request):
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").wait_healthy()
    yield


@pytest.fixture
def name(request):
    return f"cli-cluster:{request.node.name}:{uuid.uuid4().hex[:8]}"


def names_on_every_master(cluster, prefix):
    """One name per master, chosen by key slot against the slot map of now."""
    ranges = {m.port: cluster.slots_of(m) for m in cluster.masters()}
    out = {}
    i = 0
    while len(out) < len(ranges):
        n = f"{prefix}:{i}"
        i += 1
        slot = key_slot(lock_key(n))
        port = next(p for p, rs in ranges.items() if any(a <= slot <= b for a, b in rs))
        out.setdefault(port, n)
    return out


def test_run_and_status(cluster, name, tmp_path):
    url = cluster.url()
    assert cli("status", "--url", url, name).returncode == 1
    script = "touch ready; while [ ! -e stop ]; do sleep 0.05; done"
    run = subprocess.Popen([cli_exe(), "run", "--url", url, "--ttl", "2s", name, "--", "sh", "-c", script],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or run.poll() is not None, "the command to start")
        assert run.poll() is None, run.communicate()
        master = cluster.master_for_key(lock_key(name))
        token = master.command("GET", lock_key(name))
        assert isinstance(token, bytes) and token
        r = cli("status", "--json", "--url", url, name)
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        assert st["held"] is True, st
        # renewals on the slot's master keep it past its 2 s lease
        t0 = time.monotonic()
        wait_for(lambda: time.monotonic() - t0 > 2.5 or run.poll() is not None, "2.5 s of holding")
        assert run.poll() is None, run.communicate()
        assert master.command("GET", lock_key(name)) == token
        assert 0 < master.command("PTTL", lock_key(name)) <= 2000
        r = cli("status", "--url", url, name)
        assert r.returncode == 0 and name in r.stdout, (r.stdout, r.stderr)
    finally:
        (tmp_path / "stop").touch()
        out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert cli("status", "--url", url, name).returncode == 1
    assert master.command("EXISTS", lock_key(name)) == 0
    # the command's own status comes through
    r = cli("run", "--url", url, name, "--", "sh", "-c", "exit 3")
    assert r.returncode == 3, r.stderr


def test_list_shows_names_from_all_masters(cluster, name):
    import watchlock
    spread = names_on_every_master(cluster, name)
    assert len(spread) == 3
    with watchlock.Client(cluster.url()) as c:
        locks = [c.lock(n, ttl=30) for n in spread.values()]
        for lk in locks:
            assert lk.acquire(blocking=False)
        r = cli("list", "--json", "--url", cluster.url(), f"{name}:*")
        assert r.returncode == 0, r.stderr
        listed = json.loads(r.stdout)
        assert sorted(x["name"] for x in listed) == sorted(spread.values()), listed
        assert all(x["held"] is True for x in listed if "held" in x), listed
        r = cli("list", "--url", cluster.url(), f"{name}:*")
        assert r.returncode == 0, r.stderr
        for n in spread.values():
            assert n in r.stdout, r.stdout
        for lk in locks:
            lk.release()
    r = cli("list", "--json", "--url", cluster.url(), f"{name}:*")
    assert r.returncode == 0 and json.loads(r.stdout) == [], (r.stdout, r.stderr)


def test_release_force_routes_by_name(cluster, name):
    import watchlock
    with watchlock.Client(cluster.url()) as c:
        for n in names_on_every_master(cluster, name).values():
            lk = c.lock(n, ttl=30)
            assert lk.acquire(blocking=False)
            r = cli("release", "--force", "--url", cluster.url(), n)
            assert r.returncode == 0, (r.stdout, r.stderr)
            assert cluster.master_for_key(lock_key(n)).command("EXISTS", lock_key(n)) == 0
            assert cli("status", "--url", cluster.url(), n).returncode == 1


def test_check_runs(cluster):
    r = cli("check", "--json", "--url", cluster.url())
    assert r.returncode in (0, EX_WARNINGS), (r.returncode, r.stdout, r.stderr)
    report = json.loads(r.stdout)
    assert report["ok"] is (r.returncode == 0), report
    codes = [f["code"] for f in report["findings"]]
    assert (r.returncode == EX_WARNINGS) == bool(codes), report
    # the harness's nodes keep nothing on disk: a finding check must make
    assert "no_persistence" in codes, report
    r = cli("check", "--url", cluster.url())
    assert r.returncode == EX_WARNINGS and r.stdout.strip(), (r.stdout, r.stderr)


def test_unreachable_cluster_exits_69(name):
    url = f"redis-cluster://127.0.0.1:{free_port()},127.0.0.1:{free_port()}?connect_timeout=500ms"
    for sub in (["status", name], ["list"], ["check"], ["run", name, "--", "true"]):
        r = cli(sub[0], "--url", url, *sub[1:])
        assert r.returncode == EX_UNAVAILABLE, (sub, r.stdout, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("watchlock: "), lines
