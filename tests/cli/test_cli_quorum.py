"""The `watchlock` CLI on a Redlock quorum (issue 21): --url repeated,
WATCHLOCK_URL with several URLs separated by spaces, run's exit codes (75
only when a majority is held by others, 69 unreachable, 79 lost), and the
per-member views of status, list and check. 5 redis-servers from
tests/harness/quorum.py; members stopped with SIGSTOP. The binary is
$WATCHLOCK_CLI, else build/cli/watchlock (as in test_cli.py)."""
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
from quorum import Quorum  # noqa: E402
import waiting  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EX_FREE, EX_USAGE, EX_UNAVAILABLE, EX_TEMPFAIL, EX_LOCK_LOST = 1, 64, 69, 75, 79
OPTS = "?connect_timeout=300ms&command_timeout=400ms"


def cli_exe() -> str:
    exe = os.environ.get("WATCHLOCK_CLI") or str(REPO / "build" / "cli" / "watchlock")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"watchlock binary not found at {exe}: build it or set WATCHLOCK_CLI")
    return exe


def wait_for(cond, what: str, timeout: float = 30, interval: float = 0.02):
    return waiting.wait_for(cond, what, timeout, interval)


@pytest.fixture(scope="module")
def quorum():
    with Quorum(5) as q:
        # the restart rule: a member up for less than the lease in use is kept
        # out of majorities; every run here passes --ttl 3s or less
        q.wait_settled(3)
        yield q


@pytest.fixture
def name(request):
    return f"cli-quorum:{request.node.name}:{uuid.uuid4().hex[:8]}"


def url_args(q: Quorum):
    out = []
    for u in q.urls:
        out += ["--url", u + OPTS]
    return out


def cli(*args: str, env_url=None, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("WATCHLOCK_URL", None)
    if env_url is not None:
        env["WATCHLOCK_URL"] = env_url
    return subprocess.run([cli_exe(), *args], env=env, capture_output=True, text=True, timeout=timeout, **kw)


def lock_key(name: str) -> str:
    return "watchlock:{" + name + "}"


def test_run_holds_on_every_member_and_releases(quorum, name, tmp_path):
    out = tmp_path / "seen"
    key = lock_key(name)
    probe = (f"for p in {' '.join(map(str, quorum.ports))}; do redis-cli -p $p EXISTS '{key}'; done | "
             f"grep -c 1 > {out}; echo $WATCHLOCK_FENCING_TOKEN >> {out}")
    r = cli("run", *url_args(quorum), "--ttl", "3s", name, "--", "sh", "-c", probe)
    assert r.returncode == 0, r.stderr
    holding, token = out.read_text().split()
    assert int(holding) >= 3 and int(token) > 0
    wait_for(lambda: quorum.holders(key) == 0, "released on every member", timeout=5)


def test_watchlock_url_space_separated(quorum, name):
    env_url = " ".join(u + OPTS for u in quorum.urls)
    r = cli("run", "--ttl", "3s", name, "--", "true", env_url=env_url)
    assert r.returncode == 0, r.stderr
    r = cli("status", "--json", name, env_url=env_url)
    assert r.returncode == EX_FREE, r.stderr
    st = json.loads(r.stdout)
    assert len(st["members"]) == 5 and st["verdict"] == "free"


def test_two_urls_refused(quorum, name):
    r = cli("run", *url_args(quorum)[:4], "--ttl", "3s", name, "--", "true")
    assert r.returncode == EX_USAGE, (r.returncode, r.stderr)
    assert "watchlock: " in r.stderr


def test_busy_only_when_a_majority_is_held(quorum, name, tmp_path):
    holder = subprocess.Popen([cli_exe(), "run", *url_args(quorum), "--ttl", "3s", name, "--", "sh", "-c",
                               f"touch {tmp_path}/ready; while [ ! -e {tmp_path}/stop ]; do sleep 0.05; done"],
                              env={k: v for k, v in os.environ.items() if k != "WATCHLOCK_URL"},
                              stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or holder.poll() is not None, "the holder")
        assert holder.poll() is None, holder.communicate()
        r = cli("run", *url_args(quorum), "--ttl", "3s", "-w", "0.3", name, "--", "true")
        assert r.returncode == EX_TEMPFAIL, r.stderr
        assert "held by another owner" in r.stderr
        # status: per-member view and the verdict (a majority holds the key;
        # grants that came after the decision were given back)
        key = lock_key(name)
        on = [i for i in range(5) if quorum.member(i).command("EXISTS", key) == 1]
        assert len(on) >= 3, on
        r = cli("status", *url_args(quorum), name)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert f"held on {len(on)} of 5 members (majority 3)" in lines[0], lines
        assert sum(ln.lstrip().startswith("member") and ": held," in ln for ln in lines[1:]) == len(on), lines
        r = cli("status", "--json", *url_args(quorum), name)
        st = json.loads(r.stdout)
        assert st["held"] and st["verdict"] == "held" and st["held_on"] == len(on) and st["majority"] == 3
        assert [m["held"] for m in st["members"]] == [i in on for i in range(5)]
        # list: the lock with its member count
        r = cli("list", "--json", *url_args(quorum), name)
        assert r.returncode == 0, r.stderr
        found = json.loads(r.stdout)
        assert [x["name"] for x in found] == [name] and found[0]["held_on"] == len(on)
        r = cli("list", *url_args(quorum), name)
        assert f"on {len(on)}/5 members" in r.stdout, r.stdout
        # two members stopped, a majority of holders left: still held (status), still busy (75)
        stop = ([i for i in range(5) if i not in on] + on)[:2]
        with quorum.paused(*stop):
            r = cli("status", "--json", *url_args(quorum), name)
            st = json.loads(r.stdout)
            assert r.returncode == 0 and st["held_on"] == len(set(on) - set(stop)), (r.returncode, st)
            assert [m["reachable"] for m in st["members"]] == [i not in stop for i in range(5)]
    finally:
        (tmp_path / "stop").touch()
        holder.communicate(timeout=60)
    assert holder.returncode == 0


def test_three_stopped_is_unreachable_not_busy(quorum, name):
    with quorum.paused(0, 1, 2):
        t0 = time.monotonic()
        r = cli("run", *url_args(quorum), "--ttl", "3s", "-w", "1s", name, "--", "true")
        took = time.monotonic() - t0
        assert r.returncode == EX_UNAVAILABLE, (r.returncode, r.stderr)
        assert "unreachable" in r.stderr
        assert "quorum member 1: quorum member" not in r.stderr, r.stderr
        assert took < 1 + 5, took
        wait_for(lambda: quorum.holders(lock_key(name), [3, 4]) == 0, "grants given back", timeout=5)
        r = cli("status", *url_args(quorum), name)
        assert r.returncode == EX_UNAVAILABLE, (r.returncode, r.stdout, r.stderr)
        assert "unknown on 0 of 5" in r.stdout and r.stdout.count(": unreachable: ") == 3, r.stdout
        r = cli("check", "--json", *url_args(quorum))
        assert r.returncode == EX_UNAVAILABLE, r.stderr
        ck = json.loads(r.stdout)
        assert ck["reachable"] == 2 and ck["verdict"] == "unavailable"


def test_run_opens_and_acquires_with_two_members_stopped(quorum, name):
    """A fresh `run` while 2 of 5 are frozen, member 1 (the client's own
    server) among them: the open needs a majority only, so run acquires,
    runs the command and releases (exit 0)."""
    with quorum.paused(0, 1):
        r = cli("run", *url_args(quorum), "--ttl", "3s", name, "--", "true")
        assert r.returncode == 0, (r.returncode, r.stderr)
        assert quorum.holders(lock_key(name), [2, 3, 4]) == 0


def test_two_stopped_while_held_renews_and_releases(quorum, name, tmp_path):
    """Two members stop while `run` holds: the watchdog renews on the live
    majority past two leases and the release succeeds (exit 0, not 79)."""
    proc = subprocess.Popen([cli_exe(), "run", *url_args(quorum), "--ttl", "1s", name, "--", "sh", "-c",
                             f"touch {tmp_path}/ready; while [ ! -e {tmp_path}/stop ]; do sleep 0.05; done"],
                            env={k: v for k, v in os.environ.items() if k != "WATCHLOCK_URL"},
                            stderr=subprocess.PIPE, text=True)
    key = lock_key(name)
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or proc.poll() is not None, "the holder")
        assert proc.poll() is None, proc.communicate()
        on = [i for i in range(5) if quorum.member(i).command("EXISTS", key) == 1]
        stop = ([i for i in range(5) if i not in on] + on)[:2]  # a majority of holders stays up
        with quorum.paused(*stop):
            live = [i for i in range(5) if i not in stop]
            t0 = time.monotonic()
            # renewed on the live members for 2.5 leases: their TTL is refreshed
            while time.monotonic() - t0 < 2.5:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.1)
            assert sum(quorum.pttl(i, key) > 0 for i in live) >= 3
            (tmp_path / "stop").touch()
            proc.wait(timeout=30)
            assert proc.returncode == 0, proc.stderr.read()
            wait_for(lambda: quorum.holders(key, live) == 0, "released on the live members", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_lost_exits_79_before_the_majority_expires(quorum, name, tmp_path):
    ttl = 2.0
    proc = subprocess.Popen([cli_exe(), "run", *url_args(quorum), "--ttl", "2s", name, "--", "sh", "-c",
                             f"touch {tmp_path}/ready; exec sleep 60"],
                            env={k: v for k, v in os.environ.items() if k != "WATCHLOCK_URL"},
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or proc.poll() is not None, "the holder")
        assert proc.poll() is None
        t_pause = time.monotonic()
        with quorum.paused(1, 2, 3):
            proc.wait(timeout=ttl + 30)
            t_exit = time.monotonic()
        assert proc.returncode == EX_LOCK_LOST, proc.stderr.read()
        # The command was stopped, and watchlock exited, after the loss; the
        # loss itself must come before t_pause + ttl. The exit adds the stop
        # of the command (SIGTERM, at once for sleep) and the close: 1.5 s.
        assert t_exit < t_pause + ttl + 1.5, f"exit {t_exit - t_pause:.2f} s after the pause"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_fencing_tokens_increase_across_runs(quorum, name, tmp_path):
    tokens = []
    for k in range(4):
        out = tmp_path / f"t{k}"
        r = cli("run", *url_args(quorum), "--ttl", "3s", name, "--", "sh", "-c",
                f"echo $WATCHLOCK_FENCING_TOKEN > {out}")
        assert r.returncode == 0, r.stderr
        tokens.append(int(out.read_text()))
    assert all(b > a for a, b in zip(tokens, tokens[1:])), tokens


def test_check_shows_every_member(quorum):
    r = cli("check", *url_args(quorum))
    assert r.returncode in (0, 1), r.stderr
    lines = r.stdout.splitlines()
    assert sum(ln.startswith("member ") for ln in lines) >= 5, lines
    assert lines[-1].startswith("quorum: 5 of 5 members reachable (majority 3)"), lines
    r = cli("check", "--json", *url_args(quorum))
    ck = json.loads(r.stdout)
    assert ck["reachable"] == 5 and len(ck["members"]) == 5 and ck["majority"] == 3


def test_help_mentions_repeated_url():
    for sub in ("run", "status", "list", "check", "release"):
        r = cli(sub, "--help")
        assert r.returncode == 0
        assert "quorum" in r.stdout, sub


def test_shared_runs_on_a_quorum(quorum, name, tmp_path):
    """Issue 30.3: -s takes a read share on the quorum: two -s runs at once; a
    plain run (the write side) is busy (75) while they read, and gets in after."""
    env = {k: v for k, v in os.environ.items() if k != "WATCHLOCK_URL"}
    readers = [subprocess.Popen([cli_exe(), "run", *url_args(quorum), "--ttl", "3s", "-s", name, "--", "sh", "-c",
                                 f"touch {tmp_path}/r{i}; while [ ! -e {tmp_path}/stop ]; do sleep 0.05; done"],
                                env=env, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        wait_for(lambda: all((tmp_path / f"r{i}").exists() for i in range(2))
                 or any(p.poll() is not None for p in readers), "two readers at once")
        assert all(p.poll() is None for p in readers), [p.communicate() for p in readers]
        r = cli("run", *url_args(quorum), "--ttl", "3s", "-n", name, "--", "true")
        assert r.returncode == EX_TEMPFAIL, (r.returncode, r.stderr)
    finally:
        (tmp_path / "stop").touch()
        for p in readers:
            p.wait(30)
    assert all(p.returncode == 0 for p in readers)
    r = cli("run", *url_args(quorum), "--ttl", "3s", "-w", "5", name, "--", "true")
    assert r.returncode == 0, r.stderr
