"""The `watchlock` CLI over TLS (rediss://) against TLS-only redis-servers
(tests/harness/tls.py certificates): run + status, check, and the exit
codes of TLS failures. The binary is $WATCHLOCK_CLI, else build/cli/watchlock
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
from redis_server import RedisServer  # noqa: E402
from tls import make_certs  # noqa: E402
import waiting  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EX_WARNINGS, EX_USAGE, EX_UNAVAILABLE = 1, 64, 69
SAFE = ["--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"]


def cli_exe() -> str:
    exe = os.environ.get("WATCHLOCK_CLI") or str(REPO / "build" / "cli" / "watchlock")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"watchlock binary not found at {exe}: build it or set WATCHLOCK_CLI")
    return exe


def cli(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("WATCHLOCK_URL", None)
    return subprocess.run([cli_exe(), *args], env=env, capture_output=True, text=True, timeout=timeout, **kw)


def one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("watchlock: "), lines
    return lines[0]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(str(tmp_path_factory.mktemp("certs")))


@pytest.fixture(scope="module")
def tls_server(certs):
    with RedisServer(SAFE, tls=certs) as srv:
        yield srv


@pytest.fixture
def name(request):
    return f"cli-tls:{request.node.name}:{uuid.uuid4().hex[:8]}"


def wait_for(cond, what: str, timeout: float = 60, interval: float = 0.02):
    return waiting.wait_for(cond, what, timeout, interval)


def test_run_and_status_over_tls(tls_server, name, tmp_path):
    url = tls_server.url
    r = cli("status", "--url", url, name)
    assert r.returncode == 1, r.stderr
    script = "touch ready; while [ ! -e stop ]; do sleep 0.05; done"
    run = subprocess.Popen([cli_exe(), "run", "--url", url, "--ttl", "2s", name, "--", "sh", "-c", script],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or run.poll() is not None, "the command to start")
        assert run.poll() is None, run.communicate()
        r = cli("status", "--json", "--url", url, name)
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        assert st["held"] is True
        # renewals over TLS keep it past its 2 s lease
        t0 = time.monotonic()
        wait_for(lambda: time.monotonic() - t0 > 2.5 or run.poll() is not None, "2.5 s of holding")
        assert run.poll() is None, run.communicate()
        assert cli("status", "--url", url, name).returncode == 0
    finally:
        (tmp_path / "stop").touch()
        out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert cli("status", "--url", url, name).returncode == 1


def test_check_over_tls(tls_server):
    r = cli("check", "--json", "--url", tls_server.url)
    assert r.returncode == 0, (r.stdout, r.stderr)
    report = json.loads(r.stdout)
    assert report["ok"] is True and report["findings"] == [], report
    # the same server's settings, findings included, read over TLS
    tls_server.command("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    try:
        r = cli("check", "--json", "--url", tls_server.url)
        assert r.returncode == EX_WARNINGS, (r.stdout, r.stderr)
        assert [f["code"] for f in json.loads(r.stdout)["findings"]] == ["eviction"], r.stdout
    finally:
        tls_server.command("CONFIG", "SET", "maxmemory-policy", "noeviction")


def test_tls_failures_exit_69_with_one_line(tls_server, certs, name):
    for opts, needle in (({"cacert": certs.wrong_ca}, "certificate"),
                         ({"cacert": certs.ca, "sni": "other.example"}, "hostname mismatch")):
        url = tls_server.tls_url(**opts)
        for sub in (["status", name], ["check"], ["run", name, "--", "true"]):
            r = cli(*sub[:1], "--url", url, *sub[1:])
            assert r.returncode == EX_UNAVAILABLE, (sub, r.stdout, r.stderr)
            assert needle in one_error_line(r.stderr), r.stderr


def test_missing_ca_file_is_a_usage_error(tls_server, name, tmp_path):
    r = cli("status", "--url", tls_server.tls_url(cacert=str(tmp_path / "missing.pem")), name)
    assert r.returncode == EX_USAGE, r.stderr
    one_error_line(r.stderr)
