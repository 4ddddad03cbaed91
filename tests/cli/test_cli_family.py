"""`watchlock run --fair`, `--permits N [--take K]`, `-s/--shared`, and
`status`/`list` of the queued kinds (issues 22 and 23), against a real
redis-server. Holders are real `watchlock run` processes (test_cli.py's
Holder); waits are on conditions (files, `status --json`), never fixed sleeps."""
from __future__ import annotations

import json
import os
import signal
import socket
import time

import pytest

from test_cli import EX_PROTOCOL, EX_TEMPFAIL, EX_USAGE, LONG, Cli, hold, holders, name, one_error_line, wait_for  # noqa: F401

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def cli(redis_url, tmp_path):
    return Cli(redis_url, tmp_path)


def queue_length(cli: Cli, name: str) -> int:
    st = cli.status(name)
    return st.get("queue", {}).get("length", 0)


def test_shared_readers_overlap_and_a_plain_run_is_excluded(cli, name, holders, tmp_path):
    r1 = hold(holders, cli, name, "-s", tag="r1")
    r2 = hold(holders, cli, name, "--shared", tag="r2")  # both hold the read side at once
    st = cli.status(name)
    assert st["held"] and st["kind"] == "rwlock" and st["readers"] == 2 and st["writer"] is False, st
    # a plain run of a name in use as a read-write lock takes the write side: excluded
    marker = tmp_path / "plain"
    r = cli.run("run", "-n", name, "--", "touch", str(marker))
    assert r.returncode == EX_TEMPFAIL, r.stderr
    assert not marker.exists()
    # ... and waits for both readers, then runs alone
    log = tmp_path / "order.log"
    w = cli.popen_logged("run", "--verbose", name, "--", "sh", "-c", 'echo writer >> "$LOG"',
                         env=cli.env(LOG=str(log)), log=tmp_path / "w.err")
    wait_for(lambda: queue_length(cli, name) == 1, "the plain run to queue as the writer")
    assert r1.finish() == 0
    assert w.poll() is None and log.read_text().splitlines() == ["end"]  # r2 still reads
    assert r2.finish() == 0
    w.communicate(timeout=LONG)
    assert w.returncode == 0, (tmp_path / "w.err").read_text()
    assert log.read_text().splitlines() == ["end", "end", "writer"]


def test_shared_waits_for_a_plain_writer(cli, name, holders, tmp_path):
    r1 = hold(holders, cli, name, "-s", tag="r1")  # the name is an rwlock now
    w = cli.popen_logged("run", name, "--", "sh", "-c", 'touch "$D/w-ready"; while [ ! -e "$D/w-stop" ]; do sleep 0.05; done',
                         env=cli.env(D=str(tmp_path)), log=tmp_path / "w.err")
    wait_for(lambda: queue_length(cli, name) == 1, "the writer to queue")
    # a reader arriving after a waiting writer waits behind it (phase-fair)
    r = cli.run("run", "-s", "-n", name, "--", "true")
    assert r.returncode == EX_TEMPFAIL, r.stderr
    assert r1.finish() == 0
    wait_for(lambda: (tmp_path / "w-ready").exists(), "the writer to run")
    st = cli.status(name)
    assert st["writer"] is True and st["readers"] == 0, st
    assert cli.run("run", "-s", "-n", name, "--", "true").returncode == EX_TEMPFAIL
    (tmp_path / "w-stop").touch()
    w.communicate(timeout=LONG)
    assert w.returncode == 0, (tmp_path / "w.err").read_text()


def test_fair_runs_in_arrival_order(cli, name, holders, tmp_path):
    h = hold(holders, cli, name, "--fair")
    log = tmp_path / "order.log"
    waiters = []
    for i in range(5):
        waiters.append(cli.popen("run", "--fair", name, "--", "sh", "-c", f'echo {i} >> "$LOG"',
                                 env=cli.env(LOG=str(log))))
        wait_for(lambda: queue_length(cli, name) == i + 1, f"waiter {i} to queue")
    st = cli.status(name)
    assert st["kind"] == "fair" and st["queue"]["length"] == 5 and st["queue"]["oldest_wait_ms"] >= 0, st
    assert h.finish() == 0
    for p in waiters:
        p.communicate(timeout=LONG)
        assert p.returncode == 0
    assert log.read_text().split() == ["end", "0", "1", "2", "3", "4"]


def test_permits_limit_and_take(cli, name, holders, tmp_path):
    a = hold(holders, cli, name, "--permits", "3", "--take", "2", tag="a")
    st = cli.status(name)
    assert (st["kind"], st["permits"], st["in_use"]) == ("semaphore", 3, 2), st
    b = hold(holders, cli, name, "--permits", "3", tag="b")  # the third permit
    r = cli.run("run", "-n", "--permits", "3", name, "--", "true")
    assert r.returncode == EX_TEMPFAIL, r.stderr
    # a mismatched N is a clear error (exit 76), not a fourth holder
    r = cli.run("run", "-n", "--permits", "4", name, "--", "true")
    assert r.returncode == EX_PROTOCOL, r.stderr
    assert "permit" in r.stderr or "4" in r.stderr, r.stderr
    assert a.finish() == 0 and b.finish() == 0


def test_sigkill_of_a_permit_holder(cli, name, holders, tmp_path):
    a = hold(holders, cli, name, "--permits", "1", "--ttl", "1500ms", tag="a")
    os.kill(a.proc.pid, signal.SIGKILL)  # watchlock itself: nobody releases
    start = time.monotonic()
    r = cli.run("run", "--wait", "30s", "--permits", "1", name, "--", "true")
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - start < 1.5 + 5


def test_kinds_on_one_name_exit_76_with_a_clear_message(cli, name, holders, tmp_path):
    h = hold(holders, cli, name, "--fair")
    for opts in (("--permits", "2"), ("-s",), ()):
        r = cli.run("run", "-n", *opts, name, "--", "true")
        assert r.returncode == EX_PROTOCOL, (opts, r.stderr)
        assert "kind" in r.stderr or "type" in r.stderr, r.stderr
    assert h.finish() == 0


def test_status_shows_kinds(cli, name, holders, tmp_path):
    f = hold(holders, cli, f"{name}:f", "--fair", tag="f")
    s = hold(holders, cli, f"{name}:s", "--permits", "2", tag="s")
    r = hold(holders, cli, f"{name}:r", "-s", tag="r")
    for n, kind in ((f"{name}:f", "fair"), (f"{name}:s", "semaphore"), (f"{name}:r", "rwlock")):
        st = cli.status(n)
        assert st["held"] and st["kind"] == kind and st["holders"] == 1 and st["queue"]["length"] == 0, st
    text = cli.run("status", f"{name}:s").stdout
    assert "semaphore, 1 of 2 permits in use (1 holder); nobody waiting" in text, text
    assert "fair lock, held; nobody waiting" in cli.run("status", f"{name}:f").stdout
    assert "rwlock, 1 reader; nobody waiting" in cli.run("status", f"{name}:r").stdout
    for h in (f, s, r):
        assert h.finish() == 0
    r = cli.run("status", f"{name}:s")
    assert r.returncode == 1, r.stdout  # free again: exit 1, as for a plain lock


def test_status_shows_each_holders_owner(cli, name, holders, tmp_path):
    """status/list of a queued kind show every hold's owner: host, pid and
    label, with its permits and side (issue 22.4)."""
    host = socket.gethostname()
    r1 = hold(holders, cli, f"{name}:r", "-s", "--label", "reader one", tag="r1")
    r2 = hold(holders, cli, f"{name}:r", "-s", "--label", "reader two", tag="r2")
    st = cli.status(f"{name}:r")
    assert st["holders"] == 2 and st["holds_not_listed"] == 0, st
    got = sorted((h["host"], h["pid"], h["label"], h["permits"], h["side"]) for h in st["holds"])
    assert got == sorted([(host, r1.proc.pid, "reader one", 1, "read"), (host, r2.proc.pid, "reader two", 1, "read")]), st
    assert all(0 < h["remaining_ms"] for h in st["holds"]), st
    text = cli.run("status", f"{name}:r").stdout
    assert f"read by pid {r1.proc.pid} on {host}: reader one" in text, text
    assert f"read by pid {r2.proc.pid} on {host}: reader two" in text, text
    f = hold(holders, cli, f"{name}:f", "--fair", "--label", "fair one", tag="f")
    st = cli.status(f"{name}:f")
    assert st["owner"] == {"host": host, "pid": f.proc.pid, "label": "fair one"}, st  # the one holder, as a plain lock
    assert [(h["pid"], h["label"], h["permits"]) for h in st["holds"]] == [(f.proc.pid, "fair one", 1)], st
    s = hold(holders, cli, f"{name}:s", "--permits", "3", "--take", "2", "--label", "two permits", tag="s")
    st = cli.status(f"{name}:s")
    assert [(h["pid"], h["label"], h["permits"]) for h in st["holds"]] == [(s.proc.pid, "two permits", 2)], st
    out = cli.run("list", "--json", f"{name}:*")
    listed = {e["name"]: e for e in json.loads(out.stdout)}
    assert len(listed[f"{name}:r"]["holds"]) == 2 and listed[f"{name}:s"]["holds"][0]["label"] == "two permits", listed
    text = cli.run("list", f"{name}:*").stdout
    assert f"by pid {f.proc.pid} on {host}: fair one" in text and "2 permits by pid" in text, text
    for h in (r1, r2, f, s):
        assert h.finish() == 0


def test_list_shows_kinds(cli, name, holders, tmp_path):
    f = hold(holders, cli, f"{name}:f", "--fair", tag="f")
    s = hold(holders, cli, f"{name}:s", "--permits", "2", tag="s")
    r = hold(holders, cli, f"{name}:r", "-s", tag="r")
    p = hold(holders, cli, f"{name}:p", tag="p")
    out = cli.run("list", "--json", f"{name}:*")
    assert out.returncode == 0, out.stderr
    listed = {e["name"]: e for e in json.loads(out.stdout)}
    assert {n: e.get("kind") for n, e in listed.items()} == {
        f"{name}:f": "fair", f"{name}:r": "rwlock", f"{name}:s": "semaphore", f"{name}:p": None}, listed
    assert listed[f"{name}:s"]["in_use"] == 1 and listed[f"{name}:s"]["permits"] == 2
    assert "queue" not in listed[f"{name}:p"]  # a plain lock's object is as before
    text = cli.run("list", f"{name}:*").stdout
    assert "fair lock, held" in text and "semaphore, 1 of 2 permits" in text and "rwlock, 1 reader" in text, text
    for h in (f, s, r, p):
        assert h.finish() == 0
