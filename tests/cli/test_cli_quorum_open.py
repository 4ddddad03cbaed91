"""The `watchlock` CLI opening a Redlock quorum (issue 29): a fresh `run`
decides at a majority of answered probes, so frozen members cost it no
command timeout (29.8), and one server given twice is refused (29.5). 5
redis-servers from tests/harness/quorum.py; members frozen with SIGSTOP.
The binary is $WATCHLOCK_CLI, else build/cli/watchlock."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from quorum import Quorum  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT_S = 6.0  # what each frozen member's probe cost every fresh run before
OPTS = f"?connect_timeout=1s&command_timeout={int(COMMAND_TIMEOUT_S)}s"


def cli_exe() -> str:
    exe = os.environ.get("WATCHLOCK_CLI") or str(REPO / "build" / "cli" / "watchlock")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"watchlock binary not found at {exe}: build it or set WATCHLOCK_CLI")
    return exe


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "WATCHLOCK_URL"}
    return subprocess.run([cli_exe(), *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def quorum():
    with Quorum(5) as q:
        q.wait_settled(3)  # the restart rule: every run here passes --ttl 1s
        yield q


@pytest.fixture
def name(request):
    return f"cli-quorum-open:{request.node.name}:{uuid.uuid4().hex[:8]}"


def test_run_with_two_frozen_costs_no_command_timeout(quorum, name):
    """2 of 5 frozen (member 1, the client's own server, among them): a fresh
    run opens at the first majority of answers, acquires, runs, releases and
    exits well within one command timeout (it took the whole timeout before,
    waiting for the frozen members' probes)."""
    urls = [a for u in quorum.urls for a in ("--url", u + (OPTS if "?" not in u else "&" + OPTS[1:]))]
    assert cli("run", *urls, "--ttl", "1s", name, "--", "true").returncode == 0  # settles the restart window
    with quorum.paused(0, 1):
        t0 = time.monotonic()
        r = cli("run", *urls, "--ttl", "1s", "-w", "0", name, "--", "true")
        took = time.monotonic() - t0
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert took < COMMAND_TIMEOUT_S / 2, f"run took {took:.2f} s with 2 of 5 frozen (command timeout {COMMAND_TIMEOUT_S} s)"


def test_one_server_given_twice_is_refused(quorum, name):
    """127.0.0.1 and localhost are one server: it would grant a majority of 3
    alone. Refused (usage error), naming both."""
    port = quorum.ports[0]
    r = cli("run", "--url", f"redis://127.0.0.1:{port}", "--url", f"redis://localhost:{port}",
            "--url", quorum.urls[1], "--ttl", "1s", name, "--", "true")
    assert r.returncode != 0, r.stderr
    assert "one server" in r.stderr and f"127.0.0.1:{port}" in r.stderr and f"localhost:{port}" in r.stderr, r.stderr
