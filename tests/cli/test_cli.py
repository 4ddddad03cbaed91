"""Tests of the `watchlock` command-line tool against real redis-servers.

The binary is $WATCHLOCK_CLI (the project's test script points it at the
build tree), else build/cli/watchlock in the source tree. Every test uses its
own lock names on the session's server (tests/conftest.py), or a server of its
own when it needs one (password, unreachable port).

No test depends on the machine being fast: waits are on conditions (a file
appearing, a status changing) with generous limits.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from redis_server import RedisServer, free_port  # noqa: E402
import waiting  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LONG = 120  # seconds: upper bound for anything that should take well under one

EX_USAGE, EX_UNAVAILABLE, EX_TEMPFAIL, EX_PROTOCOL, EX_NOPERM, EX_LOCK_LOST = 64, 69, 75, 76, 77, 79


def cli_exe() -> str:
    exe = os.environ.get("WATCHLOCK_CLI") or str(REPO / "build" / "cli" / "watchlock")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"watchlock binary not found at {exe}: build it or set WATCHLOCK_CLI")
    return exe


def wait_for(cond, what: str, timeout: float = LONG, interval: float = 0.02):
    return waiting.wait_for(cond, what, timeout, interval)


def one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, f"expected exactly one line on stderr, got {lines!r}"
    assert lines[0].startswith("watchlock: "), lines[0]
    return lines[0]


class Cli:
    def __init__(self, url: str, tmp: Path):
        self.exe = cli_exe()
        self.url = url
        self.tmp = tmp

    def env(self, url=None, **extra):
        env = dict(os.environ)
        env["WATCHLOCK_URL"] = self.url if url is None else url
        env.pop("WATCHLOCK_NAME", None)
        env.pop("WATCHLOCK_FENCING_TOKEN", None)
        env.update(extra)
        return env

    def run(self, *args, url=None, timeout=LONG, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([self.exe, *args], env=self.env(url), capture_output=True,
                              text=True, timeout=timeout, **kw)

    def popen(self, *args, url=None, **kw) -> subprocess.Popen:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("env", self.env(url))
        return subprocess.Popen([self.exe, *args], text=True, **kw)

    def popen_logged(self, *args, log: Path, **kw) -> subprocess.Popen:
        """Popen with stderr going to the file `log` (read it while it runs)."""
        with open(log, "w") as f:
            return self.popen(*args, stderr=f, **kw)

    def status(self, name: str) -> dict:
        """`status --json NAME`, parsed; its exit code must say the same (0 held, 1 free)."""
        r = self.run("status", "--json", name)
        assert r.returncode in (0, 1), r.stderr
        st = json.loads(r.stdout)
        assert r.returncode == (0 if st["held"] else 1), (r.returncode, st)
        return st


@pytest.fixture
def cli(redis_url, tmp_path):
    return Cli(redis_url, tmp_path)


@pytest.fixture
def name(request):
    return f"cli-test:{request.node.name}:{uuid.uuid4().hex[:8]}"


class Holder:
    """A `watchlock run NAME -- sh ...` whose command signals that it started
    (file `ready`, its fencing token in `token`) and runs until `finish()`."""

    def __init__(self, cli: Cli, name: str, *opts: str, tag: str = "holder"):
        self.dir = cli.tmp / f"{tag}-{uuid.uuid4().hex[:6]}"
        self.dir.mkdir()
        script = ('echo "$WATCHLOCK_FENCING_TOKEN" > token; touch ready; '
                  'while [ ! -e stop ]; do sleep 0.05; done; echo end >> "$LOG"')
        self.proc = cli.popen("run", *opts, name, "--", "sh", "-c", script, cwd=self.dir,
                              env=cli.env(LOG=str(cli.tmp / "order.log")))

    def wait_ready(self):
        wait_for(lambda: (self.dir / "ready").exists() or self.proc.poll() is not None,
                 "the holder's command to start")
        assert self.proc.poll() is None, self.proc.communicate()
        return int((self.dir / "token").read_text())

    def finish(self) -> int:
        (self.dir / "stop").touch()
        self.proc.communicate(timeout=LONG)
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            (self.dir / "stop").touch()
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def holders():
    started = []
    yield started
    for h in started:
        h.kill()


def hold(holders, cli, name, *opts, tag="holder") -> Holder:
    h = Holder(cli, name, *opts, tag=tag)
    holders.append(h)
    h.wait_ready()
    return h


# ---- basics -------------------------------------------------------------------


def test_version(cli):
    r = cli.run("--version")
    assert r.returncode == 0
    assert r.stdout.startswith("watchlock 0.1.0 ")
    assert "libwatchlock 0.1.0" in r.stdout
    assert r.stderr == ""


@pytest.mark.parametrize("args, needle", [
    (["--help"], "Usage: watchlock run"),
    (["help"], "Usage: watchlock run"),
    (["run", "--help"], "--kill-after"),
    (["help", "run"], "--kill-after"),
    (["status", "--help"], "--json"),
    (["list", "--help"], "PATTERN"),
    (["help", "list"], "PATTERN"),
    (["run", "--help"], "--conflict-exit-code"),
    (["run", "--help"], "--label"),
    (["release", "--help"], "--force"),
])
def test_help(cli, args, needle):
    r = cli.run(*args)
    assert r.returncode == 0, r.stderr
    assert needle in r.stdout
    assert "Example" in r.stdout
    assert r.stderr == ""


@pytest.mark.parametrize("code", [0, 3, 42])
def test_exit_status_is_passed_through(cli, name, code):
    r = cli.run("run", name, "--", "sh", "-c", f"exit {code}")
    assert r.returncode == code, r.stderr
    assert r.stderr == ""
    assert cli.status(name)["held"] is False


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV])
def test_killed_by_signal_exits_128_plus_n(cli, name, sig):
    r = cli.run("run", name, "--", "sh", "-c", f"kill -{int(sig)} $$")
    assert r.returncode == 128 + int(sig), r.stderr
    assert cli.status(name)["held"] is False


def test_double_dash_is_optional(cli, name):
    r = cli.run("run", name, "sh", "-c", "exit 4")
    assert r.returncode == 4, r.stderr


def test_command_not_found_127_not_executable_126(cli, name, tmp_path):
    r = cli.run("run", name, "--", "watchlock-no-such-command-xyz")
    assert r.returncode == 127
    assert "watchlock-no-such-command-xyz" in one_error_line(r.stderr)
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    r = cli.run("run", name, "--", str(script))
    assert r.returncode == 126
    one_error_line(r.stderr)
    assert cli.status(name)["held"] is False


def test_command_gets_name_and_fencing_token(cli, name):
    r = cli.run("run", name, "--", "sh", "-c",
                'echo "$WATCHLOCK_NAME"; echo "$WATCHLOCK_FENCING_TOKEN"')
    assert r.returncode == 0, r.stderr
    got_name, token = r.stdout.splitlines()
    assert got_name == name
    assert int(token) > 0
    assert cli.status(name)["fencing_token"] == int(token)
    r2 = cli.run("run", name, "--", "sh", "-c", 'echo "$WATCHLOCK_FENCING_TOKEN"')
    assert int(r2.stdout) > int(token)


def test_lock_is_held_while_command_runs_and_released_after(cli, name, holders):
    h = hold(holders, cli, name)
    st = cli.status(name)
    assert st["held"] is True
    assert h.finish() == 0
    assert cli.status(name)["held"] is False


def test_stdin_and_stdout_pass_through(cli, name):
    r = cli.run("run", name, "--", "tr", "a-z", "A-Z", input="hello\n")
    assert r.returncode == 0
    assert r.stdout == "HELLO\n"


def test_redis_sockets_are_not_inherited_but_passed_fds_are(cli, name):
    rfd, wfd = os.pipe()
    try:
        script = ("for f in /proc/$$/fd/*; do readlink \"$f\"; done; "
                  f"echo via-passed-fd > /dev/fd/{wfd}")
        r = subprocess.run([cli.exe, "run", name, "--", "sh", "-c", script], env=cli.env(),
                           capture_output=True, text=True, timeout=LONG, pass_fds=(wfd,))
        os.close(wfd)
        wfd = -1
        assert r.returncode == 0, r.stderr
        assert "socket:" not in r.stdout, r.stdout
        assert os.read(rfd, 100) == b"via-passed-fd\n"
    finally:
        os.close(rfd)
        if wfd >= 0:
            os.close(wfd)


def test_verbose_prints_events_quiet_prints_nothing(cli, name):
    r = cli.run("run", "--verbose", "--ttl", "300ms", name, "--", "sleep", "1")
    assert r.returncode == 0
    assert "acquired" in r.stderr and "fencing token" in r.stderr
    assert "renewed" in r.stderr
    assert "released" in r.stderr
    assert all(line.startswith("watchlock: ") for line in r.stderr.splitlines())
    r = cli.run("run", "--quiet", name, "--", "true")
    assert r.returncode == 0 and r.stderr == ""


def test_url_flag_wins_over_environment(cli, name):
    dead = f"redis://127.0.0.1:{free_port()}"
    r = cli.run("run", "--url", cli.url, name, "--", "true", url=dead)
    assert r.returncode == 0, r.stderr


# ---- busy locks ---------------------------------------------------------------------


@pytest.mark.parametrize("opts", [["--wait", "0"], ["-n"], ["--wait", "300ms"], ["-w", "0.5"]])
def test_busy_lock_exits_75_without_running(cli, name, holders, tmp_path, opts):
    h = hold(holders, cli, name)
    marker = tmp_path / "ran"
    r = cli.run("run", *opts, name, "--", "touch", str(marker))
    assert r.returncode == EX_TEMPFAIL
    assert "held by another owner" in one_error_line(r.stderr)
    assert not marker.exists()
    r = cli.run("run", "--quiet", *opts, name, "--", "touch", str(marker))
    assert r.returncode == EX_TEMPFAIL and r.stderr == ""
    assert not marker.exists()
    assert h.finish() == 0


def test_waiter_runs_after_holder_finishes(cli, name, holders, tmp_path):
    h = hold(holders, cli, name)
    log = tmp_path / "order.log"
    waiter = cli.popen_logged("run", "--verbose", name, "--", "sh", "-c", 'echo waiter >> "$LOG"',
                              env=cli.env(LOG=str(log)), log=tmp_path / "waiter.err")
    wait_for(lambda: "waiting" in (tmp_path / "waiter.err").read_text(), "the waiter to wait")
    assert waiter.poll() is None
    assert not log.exists()
    assert h.finish() == 0
    waiter.communicate(timeout=LONG)
    assert waiter.returncode == 0
    assert log.read_text().splitlines() == ["end", "waiter"]


def test_wait_is_woken_by_release_not_by_lease(cli, name, holders, tmp_path):
    # The holder's lease is long (60 s) and it releases early: a waiter with
    # --wait 45s can only succeed if the release itself wakes it.
    h = hold(holders, cli, name, "--ttl", "60s")
    waiter = cli.popen_logged("run", "--verbose", "--wait", "45s", name, "--", "true",
                              log=tmp_path / "waiter.err")
    wait_for(lambda: "waiting" in (tmp_path / "waiter.err").read_text(), "the waiter to wait")
    assert h.finish() == 0
    waiter.communicate(timeout=LONG)
    assert waiter.returncode == 0, (tmp_path / "waiter.err").read_text()


def test_signal_while_waiting_ends_watchlock_without_running(cli, name, holders, tmp_path):
    h = hold(holders, cli, name)
    marker = tmp_path / "ran"
    waiter = cli.popen_logged("run", "--verbose", name, "--", "touch", str(marker),
                              log=tmp_path / "waiter.err")
    wait_for(lambda: "waiting" in (tmp_path / "waiter.err").read_text(), "the waiter to wait")
    waiter.send_signal(signal.SIGTERM)
    waiter.wait(timeout=LONG)
    assert waiter.returncode == -signal.SIGTERM  # died by the signal, like flock(1)
    assert not marker.exists()
    st = cli.status(name)
    assert st["held"] is True and st["fencing_token"] == h.wait_ready()
    assert h.finish() == 0
    assert not marker.exists()


# ---- signal forwarding ------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1])
def test_signals_are_forwarded_to_command(cli, name, tmp_path, sig):
    signame = signal.Signals(sig).name[3:]
    script = (f'trap "echo got-{signame} > marker; exit 7" {signame}; touch ready; '
              'while :; do sleep 0.05; done')
    # The signal's default disposition, whatever the test runner inherited
    # (under nohup SIGHUP is ignored, and an ignored signal is by design not
    # forwarded: test_ignored_signal_stays_ignored).
    proc = cli.popen("run", name, "--", "sh", "-c", script, cwd=tmp_path,
                     preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    wait_for(lambda: (tmp_path / "ready").exists() or proc.poll() is not None,
             "the command to start")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=LONG)
    assert proc.returncode == 7, err
    assert (tmp_path / "marker").read_text() == f"got-{signame}\n"
    assert cli.status(name)["held"] is False


def test_forwarded_sigterm_kills_default_command(cli, name, tmp_path):
    proc = cli.popen("run", name, "--", "sh", "-c", "touch ready; exec sleep 600", cwd=tmp_path)
    wait_for(lambda: (tmp_path / "ready").exists(), "the command to start")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=LONG)
    assert proc.returncode == 128 + signal.SIGTERM
    assert cli.status(name)["held"] is False


def test_ignored_signal_stays_ignored(cli, name, tmp_path):
    # nohup-style: SIGHUP ignored when watchlock starts -> not forwarded, and
    # the command inherits "ignored".
    script = 'touch ready; while [ ! -e stop ]; do sleep 0.05; done; exit 9'
    proc = subprocess.Popen([cli.exe, "run", name, "--", "sh", "-c", script], cwd=tmp_path,
                            env=cli.env(), text=True, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    wait_for(lambda: (tmp_path / "ready").exists(), "the command to start")
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert proc.poll() is None
    (tmp_path / "stop").touch()
    proc.communicate(timeout=LONG)
    assert proc.returncode == 9


# ---- COMMAND never outlives watchlock -----------------------------------------------------


def process_running(pid: int) -> bool:
    """True while `pid` exists and has not exited. A zombie (exited, not yet
    reaped by whoever inherited it: PID 1 of a container may never reap)
    counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def test_command_dies_when_watchlock_is_killed(cli, name, tmp_path):
    """SIGKILL to watchlock alone (not its process group): COMMAND must not
    keep running without the lock while the next holder gets in one lease
    later. COMMAND appends a line every 20 ms; after the kill the file must
    stop growing and COMMAND's process must be gone."""
    ticks = tmp_path / "ticks"
    pidfile = tmp_path / "pid"
    script = (
        "import os, time\n"
        f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "while True:\n"
        f"    with open({str(ticks)!r}, 'a') as f: f.write('tick\\n')\n"
        "    time.sleep(0.02)\n")
    # No pipes: a surviving COMMAND would hold them open.
    proc = cli.popen("run", "--ttl", "1s", name, "--", sys.executable, "-c", script,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid = None
    try:
        wait_for(lambda: (ticks.exists() and ticks.stat().st_size >= 3 * len("tick\n"))
                 or proc.poll() is not None, "the command to start writing")
        assert proc.poll() is None, proc.returncode
        pid = int(pidfile.read_text())
        proc.kill()  # SIGKILL to watchlock's pid only
        proc.wait(timeout=LONG)

        def stopped_growing():
            before = ticks.stat().st_size
            time.sleep(0.2)  # ten of COMMAND's 20 ms periods
            return ticks.stat().st_size == before

        wait_for(stopped_growing, "the command to stop writing after watchlock was killed",
                 timeout=5, interval=0)
        wait_for(lambda: not process_running(pid), f"the command (pid {pid}) to be gone",
                 timeout=5)
        # The killed holder's lease (1s) runs out; the next run gets the lock.
        r = cli.run("run", "--ttl", "1s", "--wait", "30s", name, "--", "true")
        assert r.returncode == 0, r.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pid is not None and process_running(pid):
            os.kill(pid, signal.SIGKILL)


# ---- flock(1) habits: -n, -w SECS, -E CODE, -c, -s, -x, options after NAME ----------------


def test_conflict_exit_code_E(cli, name, holders, tmp_path):
    hold(holders, cli, name)
    marker = tmp_path / "marker"
    for opts, code in ([["-n"], EX_TEMPFAIL], [["-n", "-E", "3"], 3], [["-E", "0", "-n"], 0],
                       [["--nonblock", "--conflict-exit-code", "42"], 42],
                       [["-n", "--conflict-exit-code=7"], 7], [["-nE9"], 9]):
        r = cli.run("run", *opts, name, "--", "touch", str(marker))
        assert r.returncode == code, (opts, r.stderr)
        assert "held by another owner" in one_error_line(r.stderr)
        assert not marker.exists()
    # -E is only for the conflict: COMMAND's own status is passed through.
    free = name + ":free"
    r = cli.run("run", "-E", "3", free, "--", "sh", "-c", "exit 4")
    assert r.returncode == 4, r.stderr


def test_w_seconds_times_out_with_E_and_waits_like_flock(cli, name, holders, tmp_path):
    h = hold(holders, cli, name)
    start = time.monotonic()
    r = cli.run("run", "-w", "0.3", "-E", "1", name, "true")
    assert r.returncode == 1, r.stderr
    assert time.monotonic() - start >= 0.3
    assert "still held" in one_error_line(r.stderr)
    # -w with a bare number of seconds waits for the holder, then runs.
    waiter = cli.popen_logged("run", "-v", "-w", "600", name, "--", "touch", str(tmp_path / "ran"),
                              log=tmp_path / "waiter.err")
    wait_for(lambda: "waiting" in (tmp_path / "waiter.err").read_text(), "the waiter to wait")
    assert h.finish() == 0
    waiter.wait(timeout=LONG)
    assert waiter.returncode == 0, (tmp_path / "waiter.err").read_text()
    assert (tmp_path / "ran").exists()


def test_c_runs_a_shell_string(cli, name, tmp_path):
    out = tmp_path / "out"
    r = cli.run("run", name, "-c", f'echo "$WATCHLOCK_NAME $0" | tr a-z A-Z > {out}; exit 7')
    assert r.returncode == 7, r.stderr
    assert out.read_text() == f"{name.upper()} /BIN/SH\n"
    # before NAME too, and the long form
    r = cli.run("run", "-c", "exit 5", name)
    assert r.returncode == 5, r.stderr
    r = cli.run("run", "--command=test -n \"$WATCHLOCK_FENCING_TOKEN\"", name)
    assert r.returncode == 0, r.stderr
    # a shell that is not found is 127 as from sh itself
    r = cli.run("run", name, "-c", "watchlock-no-such-command-xyz")
    assert r.returncode == 127
    assert cli.status(name)["held"] is False


def test_options_after_name(cli, name, tmp_path):
    r = cli.run("run", name, "--ttl", "5s", "-v", "--", "sh", "-c", "exit 3")
    assert r.returncode == 3, r.stderr
    assert "lease 5s" in r.stderr  # --ttl after NAME was used; -v printed it
    # Without --, COMMAND starts at the first word after NAME that is not an
    # option: its own options (-c here) are never read as watchlock's.
    r = cli.run("run", name, "-q", "-n", "sh", "-c", "exit 4")
    assert r.returncode == 4, r.stderr
    r = cli.run("run", "--", name, "--", "sh", "-c", "exit 6")
    assert r.returncode == 6, r.stderr
    r = cli.run("run", "-x", name, "--exclusive", "true")  # flock's -x: accepted, exclusive anyway
    assert r.returncode == 0, r.stderr


def test_kind_flags_conflict_clearly(cli, name, tmp_path):
    # -s takes the read side (tests/cli/test_cli_family.py); one kind per run
    for opts in (("-s", "--fair"), ("--shared", "--permits", "2"), ("--fair", "--permits", "2")):
        r = cli.run("run", *opts, name, "--", "touch", str(tmp_path / "marker"))
        assert r.returncode == EX_USAGE
        line = one_error_line(r.stderr)
        assert "kind" in line, line
    assert not (tmp_path / "marker").exists()


# ---- owner info: status --json, list ------------------------------------------------------


def test_status_json_shows_owner_of_run(cli, name, holders):
    h = hold(holders, cli, name, "--ttl", "40s")
    token = h.wait_ready()
    r = cli.run("status", "--json", name)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    # the program's name only: its arguments may hold secrets (issue 19.13)
    assert st["owner"] == {"host": socket.gethostname(), "pid": h.proc.pid, "label": "sh"}
    assert st["held"] is True and st["fencing_token"] == token and 0 < st["remaining_ms"] <= 40000
    assert h.finish() == 0
    r = cli.run("status", "--json", name)
    assert r.returncode == 1
    assert json.loads(r.stdout)["owner"] is None


def test_owner_label_of_c_and_of_a_long_command(cli, name, holders, tmp_path):
    proc = cli.popen("run", name, "-c", f"touch {tmp_path}/ready; exec sleep 600")
    try:
        wait_for(lambda: (tmp_path / "ready").exists(), "the command to start")
        owner = cli.status(name)["owner"]
        assert owner["label"] == "touch"  # the -c string's first word
        assert owner["pid"] == proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=LONG)
    # A long program name is cut to 256 bytes, on a character boundary; the
    # arguments are never recorded.
    prog = tmp_path / ("é" * 120)
    prog.write_text(f"#!/bin/sh\ntouch {tmp_path}/ready2; exec sleep 600\n")
    prog.chmod(0o755)
    proc = cli.popen("run", name, "--", str(prog), "an-argument")
    try:
        wait_for(lambda: (tmp_path / "ready2").exists(), "the command to start")
        label = cli.status(name)["owner"]["label"]
        assert label.endswith("...") and "\ufffd" not in label
        assert len(label.encode()) <= 256
        assert label.startswith(str(tmp_path) + "/é") and "an-argument" not in label
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=LONG)


def test_list_with_pattern(cli, name, holders):
    a = hold(holders, cli, f"{name}:a", "--ttl", "40s", tag="a")
    b = hold(holders, cli, f"{name}:b", "--ttl", "50s", tag="b")
    other = hold(holders, cli, f"other-{name}", tag="other")
    r = cli.run("list", "--json", f"{name}:*")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert [e["name"] for e in got] == [f"{name}:a", f"{name}:b"]
    for e, h, ttl in zip(got, (a, b), (40000, 50000)):
        assert e["held"] is True and 0 < e["remaining_ms"] <= ttl
        assert e["fencing_token"] == h.wait_ready()
        assert e["owner"]["pid"] == h.proc.pid and e["owner"]["host"] == socket.gethostname()
        assert e["owner"]["label"] == "sh"
    # ? and [classes] match single characters of the name
    r = cli.run("list", "--json", f"{name}:[b-z]")
    assert [e["name"] for e in json.loads(r.stdout)] == [f"{name}:b"]
    r = cli.run("list", "--json", f"{name}:?")
    assert len(json.loads(r.stdout)) == 2
    # every lock, for people: one line each, owner last
    r = cli.run("list")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if name in ln]
    assert len(lines) == 3
    line_a = next(ln for ln in lines if ln.startswith(f"{name}:a  "))
    assert line_a.endswith(f"  fencing token {a.wait_ready()}  pid {a.proc.pid} on {socket.gethostname()}: sh")
    assert " left  " in line_a
    # no match: exit 0, nothing on stdout ("[]" with --json)
    r = cli.run("list", f"{name}:nothing*")
    assert r.returncode == 0 and r.stdout == ""
    assert "no held locks match" in one_error_line(r.stderr)
    r = cli.run("list", "-q", f"{name}:nothing*")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    r = cli.run("list", "--json", f"{name}:nothing*")
    assert r.returncode == 0 and json.loads(r.stdout) == []
    for h in (a, b, other):
        assert h.finish() == 0
    r = cli.run("list", "--json", f"*{name}*")
    assert json.loads(r.stdout) == []


def test_run_works_when_the_acl_denies_the_owner_record(fresh_redis, tmp_path, name):
    """The owner record is best effort: a user who may not HSET still runs
    (status then shows no owner)."""
    srv = fresh_redis
    assert srv.command("ACL", "SETUSER", "nohash", "on", ">nohash-secret", "~*", "&*", "+@all",
                       "-hset", "-hmget") == "OK"
    cli = Cli(f"redis://nohash:nohash-secret@127.0.0.1:{srv.port}", tmp_path)
    r = cli.run("run", name, "-c", f"watchlock_status=$({cli.exe} status --json {name}); echo \"$watchlock_status\"")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["held"] is True and st["owner"] is None
    assert cli.status(name)["held"] is False


def test_list_on_an_empty_database(tmp_path):
    with RedisServer() as srv:
        c = Cli(srv.url, tmp_path)
        r = c.run("list")
        assert r.returncode == 0 and r.stdout == ""
        assert "no locks are held" in one_error_line(r.stderr)
        r = c.run("list", "--json")
        assert r.returncode == 0 and r.stdout == "[]\n"


def _set_lock(redis_server, name: bytes, label: bytes | None = None) -> None:
    """A held lock (and owner record) written directly, for names argv cannot carry."""
    esc = name.replace(b"%", b"%25").replace(b"{", b"%7B").replace(b"}", b"%7D")
    key = b"watchlock:{" + esc + b"}"
    token = uuid.uuid4().hex.encode()
    assert redis_server.command("SET", key, token + b".1", "PX", "60000") == "OK"
    assert redis_server.command("SET", key + b":fence", "17", "PX", "60000") == "OK"
    if label is not None:
        redis_server.command("HSET", key + b":owner", "token", token + b".", "host", b"h\x1bst",
                             "pid", "99", "label", label)
        redis_server.command("PEXPIRE", key + b":owner", "60000")


def test_json_output_of_odd_names_and_labels(cli, name, redis_server):
    """The JSON helper's edge cases through the real tool: quotes,
    backslashes, control bytes, NUL and bytes that are not UTF-8, in names
    and owner labels, parse with json.loads; invalid UTF-8 becomes U+FFFD,
    and the exact bytes of such a name are given as name_hex."""
    pre = name.encode()
    names = {
        b"quote\"back\\slash": None,
        b"ctl\x01\x1b[31m\n\r\t\x7f": b"label\"\\\x00\x1f\xff\xc3\xa9",
        b"nul\x00byte": b"",
        b"bad\xff\xfeutf8": b"\xe2\x82",
        "caf\u00e9-\u20ac".encode(): "\U0001F512".encode(),
    }
    for n, label in names.items():
        _set_lock(redis_server, pre + n, label)
    r = subprocess.run([cli.exe, "list", "--json", name + "*"], env=cli.env(), capture_output=True,
                       timeout=LONG)
    assert r.returncode == 0, r.stderr
    r.stdout.decode("utf-8")  # strictly valid UTF-8
    got = {e["name"]: e for e in json.loads(r.stdout)}
    assert len(got) == len(names)
    for n, label in names.items():
        shown = (pre + n).decode("utf-8", errors="replace")
        e = got[shown]
        assert e["fencing_token"] == 17 and 0 < e["remaining_ms"] <= 60000
        if shown.encode() == pre + n:
            assert "name_hex" not in e
        else:
            assert bytes.fromhex(e["name_hex"]) == pre + n
        if label is None:
            assert e["owner"] is None
        else:
            assert e["owner"] == {"host": "h\x1bst", "pid": 99,
                                  "label": label.decode("utf-8", errors="replace")}
    # for people: nothing that moves the cursor or breaks the line
    r = subprocess.run([cli.exe, "list", name + "*"], env=cli.env(), capture_output=True, timeout=LONG)
    out = r.stdout.decode("utf-8")
    assert out.count("\n") == len(names)
    assert "\x1b" not in out and "\x00" not in out and "\r" not in out
    assert "ctl\\x01\\x1b[31m\\x0a\\x0d\\x09\\x7f" in out
    assert "bad\\xff\\xfeutf8" in out and "quote\"back\\\\slash" in out
    assert "pid 99 on h\\x1bst: label\"\\\\\\x00\\x1f\\xff\u00e9" in out


def test_status_json_of_odd_names_from_argv(cli, holders):
    for odd in [f'quote"back\\slash\ttab-{uuid.uuid4().hex[:6]}',
                f"ctl\x01\x1b\x7f-{uuid.uuid4().hex[:6]}",
                os.fsdecode(b"bad\xff\xfe-" + uuid.uuid4().hex[:6].encode())]:
        raw = os.fsencode(odd)
        r = subprocess.run([cli.exe, "status", "--json", raw], env=cli.env(), capture_output=True,
                           timeout=LONG)
        assert r.returncode == 1, r.stderr
        st = json.loads(r.stdout.decode("utf-8"))
        assert st["name"] == raw.decode("utf-8", errors="replace")
        assert ("name_hex" in st) == (b"\xff" in raw)
        if "name_hex" in st:
            assert bytes.fromhex(st["name_hex"]) == raw
        assert st["held"] is False and st["owner"] is None


# ---- status and release -----------------------------------------------------------------


def test_status_free_never_used(cli, name):
    r = cli.run("status", name)
    assert r.returncode == 1, r.stderr
    assert r.stdout == f"{name}: free\n"
    assert cli.status(name) == {"name": name, "held": False, "remaining_ms": 0,
                                "fencing_token": 0, "owner": None}


def test_status_held_and_after_release(cli, name, holders):
    h = hold(holders, cli, name, "--ttl", "40s")
    token = h.wait_ready()
    r = cli.run("status", name)
    assert r.returncode == 0
    assert r.stdout.startswith(f"{name}: held, ")
    assert f", by pid {h.proc.pid} on {socket.gethostname()}: sh\n" in r.stdout
    assert f"fencing token {token}" in r.stdout
    st = cli.status(name)
    assert st["held"] is True
    assert st["fencing_token"] == token
    assert 0 < st["remaining_ms"] <= 40000
    assert h.finish() == 0
    r = cli.run("status", name)
    assert r.returncode == 1
    assert r.stdout == f"{name}: free (last fencing token {token})\n"
    assert cli.status(name) == {"name": name, "held": False, "remaining_ms": 0,
                                "fencing_token": token, "owner": None}


def test_status_json_escapes_name(cli):
    odd = f'quote"back\\slash\ttab-{uuid.uuid4().hex[:6]}'
    st = cli.status(odd)
    assert st["name"] == odd


def test_release_without_force_is_refused(cli, name, holders):
    h = hold(holders, cli, name)
    r = cli.run("release", name)
    assert r.returncode == EX_USAGE
    assert "--force" in one_error_line(r.stderr)
    assert cli.status(name)["held"] is True
    assert h.finish() == 0


def test_force_release_frees_wakes_waiter_and_holder_loses(cli, name, holders, tmp_path):
    h = hold(holders, cli, name, "--ttl", "60s")
    log = tmp_path / "waiter.log"
    waiter = cli.popen_logged("run", "--verbose", "--wait", "45s", name, "--", "sh", "-c",
                              'echo "$WATCHLOCK_FENCING_TOKEN" > "$OUT"',
                              env=cli.env(OUT=str(log)), log=tmp_path / "waiter.err")
    wait_for(lambda: "waiting" in (tmp_path / "waiter.err").read_text(), "the waiter to wait")
    r = cli.run("release", "--force", name)
    assert r.returncode == 0, r.stderr
    assert "released" in one_error_line(r.stderr)
    waiter.communicate(timeout=LONG)
    assert waiter.returncode == 0
    assert int(log.read_text()) > h.wait_ready()
    # The holder finds the loss at its next renewal (every 20 s with a 60 s
    # lease), stops its command and exits with the lost-lock code.
    h.proc.communicate(timeout=LONG)
    assert h.proc.returncode == EX_LOCK_LOST
    r = cli.run("release", "--force", "--quiet", name)
    assert r.returncode == 0 and r.stderr == ""
    r = cli.run("release", "--force", name)
    assert r.returncode == 0 and "not held" in r.stderr


# ---- lost lock ---------------------------------------------------------------------------


def test_lost_lock_while_stopped_terminates_command(cli, name, tmp_path):
    """SIGSTOP watchlock past its lease, let another process take the lock,
    SIGCONT: the command gets SIGTERM and watchlock exits 79."""
    script = ('trap "echo got-TERM > marker; exit 5" TERM; touch ready; '
              'while :; do sleep 0.05; done')
    proc = cli.popen("run", "--ttl", "1s", "--kill-after", "30s", name, "--", "sh", "-c", script,
                     cwd=tmp_path)
    wait_for(lambda: (tmp_path / "ready").exists() or proc.poll() is not None,
             "the command to start")
    assert proc.poll() is None
    token = cli.status(name)["fencing_token"]
    proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: not cli.status(name)["held"], "the stopped holder's lease to run out",
                 interval=0.1)
        thief = Holder(cli, name, "--wait", "0", tag="thief")
        try:
            thief_token = thief.wait_ready()
            assert thief_token > token
            assert not (tmp_path / "marker").exists()
        finally:
            proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=LONG)
        assert proc.returncode == EX_LOCK_LOST, err
        assert (tmp_path / "marker").read_text() == "got-TERM\n"
        # The whole group got SIGTERM, its `sleep` too, which sh may report
        # ("Terminated"): watchlock itself prints one line.
        line = one_error_line("\n".join(ln for ln in err.splitlines() if ln != "Terminated"))
        assert "lost lock" in line and name in line
        # The thief's hold is untouched by the old holder's exit.
        st = cli.status(name)
        assert st["held"] is True and st["fencing_token"] == thief_token
        assert thief.finish() == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.communicate()


def test_lost_lock_sigkill_after_grace_period(cli, name, tmp_path):
    # The command ignores SIGTERM; --kill-after 300ms then SIGKILLs it.
    script = 'trap "" TERM; echo $$ > pid; touch ready; while :; do sleep 0.05; done'
    proc = cli.popen("run", "--ttl", "1s", "--kill-after", "300ms", name, "--", "sh", "-c",
                     script, cwd=tmp_path)
    wait_for(lambda: (tmp_path / "ready").exists(), "the command to start")
    child = int((tmp_path / "pid").read_text())
    r = cli.run("release", "--force", name)
    assert r.returncode == 0
    out, err = proc.communicate(timeout=LONG)
    assert proc.returncode == EX_LOCK_LOST
    assert "lost lock" in err and "SIGKILL" in err
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_max_hold_stops_command(cli, name, tmp_path):
    proc = cli.popen("run", "--ttl", "500ms", "--max-hold", "1s", name, "--", "sleep", "600")
    out, err = proc.communicate(timeout=LONG)
    assert proc.returncode == EX_LOCK_LOST
    assert "max hold" in one_error_line(err)
    # The watchdog declares the loss a drift margin before the server's
    # expiry; the key then runs out by itself.
    wait_for(lambda: not cli.status(name)["held"], "the lease to run out", interval=0.05)


def renewals_seen(log: Path) -> int:
    """The highest renewal count a --verbose run has reported so far."""
    counts = [int(line.split("(renewal ", 1)[1].split(",", 1)[0])
              for line in log.read_text().splitlines() if "(renewal " in line]
    return max(counts, default=0)


def test_max_renewals_stops_command(cli, name, tmp_path):
    """--max-renewals 1 with a 1 s lease and a COMMAND that outlives it: one
    renewal, then the lease runs out while COMMAND runs: the loss is
    reported, COMMAND stopped, exit 79."""
    log = tmp_path / "err"
    proc = cli.popen_logged("run", "-v", "--max-renewals", "1", "--ttl", "1s", name, "--",
                            "sleep", "600", log=log)
    proc.communicate(timeout=LONG)
    err = log.read_text()
    assert proc.returncode == EX_LOCK_LOST, err
    (lost,) = [line for line in err.splitlines() if "lost lock" in line]
    assert "(max renewals reached)" in lost and "sent SIGTERM" in lost, lost
    assert renewals_seen(log) <= 1, err
    wait_for(lambda: not cli.status(name)["held"], "the lease to run out", interval=0.05)


def test_no_renew_lets_the_lease_run_out(cli, name, tmp_path):
    r = cli.run("run", "-v", "--no-renew", "--ttl", "1s", name, "--", "sleep", "600")
    assert r.returncode == EX_LOCK_LOST, r.stderr
    (lost,) = [line for line in r.stderr.splitlines() if "lost lock" in line]
    assert "(expired)" in lost, lost
    assert "renewed" not in r.stderr
    # A COMMAND that ends within the lease is not affected.
    r = cli.run("run", "--no-renew", name, "--", "sh", "-c", "exit 3")
    assert r.returncode == 3, r.stderr


def run_stalled(cli, name, args, while_stalled):
    """`watchlock run -v ARGS` with its stderr a pipe filled up before it
    starts: its first write (-v's "acquired" line, made after the acquire
    and before COMMAND is started) blocks the main thread until the pipe is
    read, which is after `while_stalled()` returned (it runs once the lock
    is held). A stalled log pipe, or a process held up between the grant
    and COMMAND's start, as a loaded machine does it. Returns (exit code,
    what watchlock wrote)."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    for chunk in (4096, 1):
        try:
            while True:
                os.write(w, b"x" * chunk)
        except BlockingIOError:
            pass
    os.set_blocking(w, True)
    proc = cli.popen("run", "-v", *args, stdout=subprocess.DEVNULL, stderr=w)
    os.close(w)
    try:
        wait_for(lambda: cli.status(name)["held"] or proc.poll() is not None, "the grant")
        while_stalled()
        with os.fdopen(r, "rb") as f:
            text = f.read().lstrip(b"x").decode()
        proc.wait(timeout=LONG)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, text


@pytest.mark.parametrize("kind", [[], ["--fair"], ["--permits", "2"], ["--shared"], ["--also", "{name}:b"]],
                         ids=["plain", "fair", "semaphore", "read", "multi"])
def test_command_is_not_started_on_a_lock_lost_before_its_start(cli, name, tmp_path, kind):
    """watchlock held up between the grant and COMMAND's start for longer
    than the lease (here: its stderr pipe full, the watchdog off): COMMAND
    must not start on a lock already lost, where the next holder may be at
    work. Before the fix, COMMAND started and was sent SIGTERM only after
    it was running (a COMMAND ignoring it worked on without the lock).
    Every kind: the check reads the handle's state, whatever holds it."""
    kind = [k.format(name=name) for k in kind]
    code, text = run_stalled(
        cli, name, [*kind, "--no-renew", "--ttl", "1s", "--kill-after", "30s", name, "--",
                    "env", "--ignore-signal=TERM", "touch", str(tmp_path / "ran")],
        lambda: wait_for(lambda: not cli.status(name)["held"], "the lease to run out while watchlock is stalled",
                         interval=0.05))
    assert code == EX_LOCK_LOST, text
    # -v says when it starts COMMAND; a COMMAND started on a lost lock may
    # or may not get as far as ignoring the SIGTERM that follows it
    assert "started 'env'" not in text and not (tmp_path / "ran").exists(), text
    lost = [line for line in text.splitlines() if "lost lock" in line or "was lost" in line]
    assert len(lost) == 1, text
    assert "(expired)" in lost[0] and "before" in lost[0] and "not running" in lost[0], text


def test_renewals_go_on_while_the_main_thread_is_stalled(cli, name, tmp_path):
    """The same stall with the watchdog on: the library's threads renew the
    lease while watchlock's main thread is blocked, so the lock is still
    held when COMMAND starts, two leases later."""
    def two_leases_held():
        # the stall itself is what is tested: two leases of it, the lock held throughout
        t0 = time.monotonic()
        while time.monotonic() < t0 + 2.5:
            assert cli.status(name)["held"], "the lease ran out while only the main thread was stalled"
            time.sleep(0.1)

    code, text = run_stalled(cli, name, ["--ttl", "1s", name, "--", "touch", str(tmp_path / "ran")],
                             two_leases_held)
    assert code == 0, text
    assert (tmp_path / "ran").exists(), text
    assert "lost lock" not in text and "was lost" not in text, text


def test_renew_interval_sets_how_often_the_watchdog_renews(cli, name, tmp_path):
    """--renew-interval before --ttl (the lease is still set first): with a
    20 s lease the default interval (TTL/3) would not renew within 5 s."""
    log = tmp_path / "err"
    proc = cli.popen_logged("run", "-v", "--renew-interval", "100ms", "--ttl", "20s", name, "--",
                            "sh", "-c", "while [ ! -e stop ]; do sleep 0.05; done", cwd=tmp_path,
                            log=log)
    try:
        wait_for(lambda: renewals_seen(log) >= 3 or proc.poll() is not None, "three renewals",
                 timeout=5)
        assert proc.poll() is None, log.read_text()
    finally:
        (tmp_path / "stop").touch()
        proc.communicate(timeout=LONG)
    assert proc.returncode == 0, log.read_text()


@pytest.mark.parametrize("opts", [["--max-hold", "0"], ["--max-renewals", "0"],
                                  ["--max-hold", "0", "--max-renewals", "0"]])
def test_zero_caps_mean_unlimited(cli, name, tmp_path, opts):
    """0 is unlimited, as in C, Python and Lua: five renewals of a 300 ms
    lease outlast any cap a 0 could otherwise mean."""
    log = tmp_path / "err"
    proc = cli.popen_logged("run", "-v", "--ttl", "300ms", *opts, name, "--", "sh", "-c",
                            "while [ ! -e stop ]; do sleep 0.05; done", cwd=tmp_path, log=log)
    try:
        wait_for(lambda: renewals_seen(log) >= 5 or proc.poll() is not None, "five renewals")
        assert proc.poll() is None, log.read_text()
    finally:
        (tmp_path / "stop").touch()
        proc.communicate(timeout=LONG)
    assert proc.returncode == 0, log.read_text()


@pytest.mark.parametrize("args, refused, words", [
    (["--ttl", "0"], "--ttl 0", "lease must be 1 ms .. 30 days, got 0 ms"),
    (["--ttl", "30s", "--renew-interval", "40s"], "--renew-interval 40s",
     "renew interval must be 0 (lease/3) or 1 .. 29999 ms (below the lease), got 40000"),
    # the library's default lease, not one the CLI knows
    (["--renew-interval", "30s"], "--renew-interval 30s", "or 1 .. 29999 ms (below the lease)"),
    (["--renew-interval", "1s", "--ttl", "1s"], "--renew-interval 1s",
     "or 1 .. 999 ms (below the lease), got 1000"),
    (["--max-renewals", "-1"], "--max-renewals -1", "max renewals must be >= 0 (0 = unlimited)"),
])
def test_lock_option_values_are_judged_by_the_library(cli, tmp_path, args, refused, words):
    """Each option goes to the library's setter: its rule, its message, exit 64."""
    name = f"opt-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "marker"
    r = cli.run("run", *args, name, "--", "touch", str(marker))
    assert r.returncode == EX_USAGE, r.stderr
    line = one_error_line(r.stderr)
    assert line.startswith(f"watchlock: run: {refused}: lock '{name}': "), line
    assert words in line, line
    assert not marker.exists()


def test_option_messages_are_the_same_words_as_python(cli, name, redis_url):
    """The CLI and the Python binding print the library's own message for
    the same refused value (the Lua tests check the Lua side)."""
    watchlock = pytest.importorskip("watchlock")
    client = watchlock.Client(redis_url)
    try:
        for py_opts, cli_opts in (({"ttl": 0}, ["--ttl", "0"]),
                                  ({"ttl": 1, "renew_interval": 2}, ["--ttl", "1", "--renew-interval", "2"]),
                                  ({"max_renewals": -3}, ["--max-renewals", "-3"]),
                                  ({"ttl": "5x"}, ["--ttl", "5x"])):
            with pytest.raises(watchlock.InvalidArgument) as exc:
                client.lock(name, **py_opts)
            assert exc.value.detail
            r = cli.run("run", *cli_opts, name, "--", "true")
            assert r.returncode == EX_USAGE
            assert f": {exc.value.detail} (see 'watchlock run --help')" in one_error_line(r.stderr)
    finally:
        client.close()


def test_watchdog_keeps_lock_past_its_lease(cli, name, holders):
    h = hold(holders, cli, name, "--ttl", "500ms")
    token = h.wait_ready()
    # Several leases go by; the lock stays held by the same hold.
    for _ in range(3):
        time.sleep(0.6)
        st = cli.status(name)
        assert st["held"] is True and st["fencing_token"] == token
    assert h.finish() == 0


# ---- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    [],
    ["frobnicate"],
    ["--bogus"],
    ["run"],
    ["run", "only-a-name"],
    ["run", "only-a-name", "--"],
    ["run", "--bogus", "n", "--", "touch", "MARKER"],
    ["run", "-Z", "n", "--", "touch", "MARKER"],
    ["run", "--ttl"],
    ["run", "n", "--bogus", "--", "touch", "MARKER"],
    ["run", "-s", "--fair", "n", "--", "touch", "MARKER"],
    ["run", "n", "--shared", "--permits", "2", "touch", "MARKER"],
    ["run", "--take", "2", "n", "--", "touch", "MARKER"],
    ["run", "--permits", "0", "n", "--", "touch", "MARKER"],
    ["run", "--permits", "2", "--take", "3", "n", "--", "touch", "MARKER"],
    ["run", "-E", "256", "n", "--", "touch", "MARKER"],
    ["run", "-E", "-1", "n", "--", "touch", "MARKER"],
    ["run", "-E", "x", "n", "--", "touch", "MARKER"],
    ["run", "n", "-E"],
    ["run", "n", "-c"],
    ["run", "n", "-c", "touch MARKER", "extra"],
    ["run", "-c", "touch MARKER"],
    ["run", "n", "-n"],
    ["list", "a", "b"],
    ["list", "--nope"],
    ["run", "", "--", "touch", "MARKER"],
    ["status"],
    ["status", "a", "b"],
    ["status", "--nope", "a"],
    ["release", "a"],
    ["release", "--force"],
    ["help", "frobnicate"],
    ["--version", "extra"],
])
def test_usage_errors_exit_64_with_one_line(cli, tmp_path, args):
    args = [str(tmp_path / "marker") if a == "MARKER" else a for a in args]
    r = cli.run(*args, cwd=tmp_path)
    assert r.returncode == EX_USAGE, (args, r.stdout, r.stderr)
    one_error_line(r.stderr)
    assert r.stdout == ""
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize("opt, value", [
    ("--ttl", "5x"), ("--ttl", "0"), ("--ttl", "-1s"), ("--wait", "soon"), ("--wait", "-1"),
    ("--max-hold", "abc"), ("--kill-after", "10 s"), ("--ttl", "31d"), ("--ttl", "999999h"),
    ("--renew-interval", "soon"), ("--renew-interval", "-1s"), ("--max-hold", "-1"),
    ("--max-renewals", "x"), ("--max-renewals", "1.5"), ("--max-renewals", ""),
])
def test_bad_duration(cli, name, tmp_path, opt, value):
    marker = tmp_path / "marker"
    r = cli.run("run", opt, value, name, "--", "touch", str(marker))
    assert r.returncode == EX_USAGE
    line = one_error_line(r.stderr)
    assert opt in line
    assert not marker.exists()


@pytest.mark.parametrize("sub", [["run", "n", "--", "touch", "MARKER"], ["status", "n"],
                                 ["release", "--force", "n"], ["list"], ["list", "--json", "n*"]])
def test_unreachable_server_exits_69(cli, tmp_path, sub):
    port = free_port()
    args = [str(tmp_path / "marker") if a == "MARKER" else a for a in sub]
    r = cli.run(*args, url=f"redis://127.0.0.1:{port}")
    assert r.returncode == EX_UNAVAILABLE, r.stderr
    line = one_error_line(r.stderr)
    assert "cannot connect" in line and str(port) in line
    assert not (tmp_path / "marker").exists()


def test_malformed_url_is_a_usage_error(cli, name):
    r = cli.run("status", name, url="http://nope")
    assert r.returncode == EX_USAGE
    assert "URL" in one_error_line(r.stderr)


def test_wrong_password_exits_69_with_clear_line(tmp_path, name):
    with RedisServer(password="right-secret") as srv:
        good = Cli(srv.url, tmp_path)
        wrong = f"redis://:wrong-secret@127.0.0.1:{srv.port}"
        for url in (wrong, f"redis://127.0.0.1:{srv.port}"):
            for sub in (["run", name, "--", "true"], ["status", name], ["list"],
                        ["release", "--force", name]):
                r = good.run(*sub, url=url)
                assert r.returncode == EX_UNAVAILABLE, (url, sub, r.stderr)
                line = one_error_line(r.stderr)
                assert "authentication" in line, line
                assert "wrong-secret" not in line  # passwords are not echoed
        r = good.run("run", name, "--", "sh", "-c", "exit 6")
        assert r.returncode == 6, r.stderr


def test_sentinel_passwords_are_not_echoed(cli, name):
    """A Sentinel URL whose sentinels are unreachable: the error line names
    the URL without the master's or the sentinels' password."""
    port = free_port()
    url = (f"redis-sentinel://:master-secret@127.0.0.1:{port}/mymaster"
           "?sentinel_password=sentinel-secret&connect_timeout=200ms")
    r = cli.run("status", name, url=url)
    assert r.returncode == EX_UNAVAILABLE, r.stderr
    line = one_error_line(r.stderr)
    assert "mymaster" in line, line
    assert "master-secret" not in line and "sentinel-secret" not in line, line


def test_lock_key_of_another_type_exits_76(cli, name, redis_server, tmp_path):
    """The server answers with an error (WRONGTYPE: the lock's key was set to
    a list by something else): EX_PROTOCOL, not "unreachable" (69), with the
    server's word for it on stderr; COMMAND is not run and the key is left
    alone."""
    key = f"watchlock:{{{name}}}"
    assert redis_server.command("RPUSH", key, "not-a-lock") == 1
    marker = tmp_path / "marker"
    try:
        for opts in ([], ["--wait", "0"], ["--wait", "5s"]):
            r = cli.run("run", *opts, name, "--", "touch", str(marker))
            assert r.returncode == EX_PROTOCOL, (opts, r.stderr)
            line = one_error_line(r.stderr)
            assert "WRONGTYPE" in line and name in line, line
        assert not marker.exists()
        assert redis_server.command("TYPE", key) == "list"
    finally:
        redis_server.command("DEL", key)
    r = cli.run("run", name, "--", "true")
    assert r.returncode == 0, r.stderr


def test_acl_denied_scripts_exit_77(fresh_redis, tmp_path, name):
    """A user that authenticates but whose ACL denies EVALSHA/EVAL gets
    EX_NOPERM (77), told apart from a failed authentication (69)."""
    srv = fresh_redis
    assert srv.command("ACL", "SETUSER", "limited", "on", ">limited-secret", "~*", "&*",
                       "+@all", "-evalsha", "-eval") == "OK"
    cli = Cli(srv.url, tmp_path)
    limited = f"redis://limited:limited-secret@127.0.0.1:{srv.port}"
    marker = tmp_path / "marker"
    for sub in (["run", name, "--", "touch", str(marker)], ["status", name],
                ["release", "--force", name]):
        r = cli.run(*sub, url=limited)
        assert r.returncode == EX_NOPERM, (sub, r.stderr)
        line = one_error_line(r.stderr)
        assert "NOPERM" in line, line
        assert "limited-secret" not in line
    assert not marker.exists()
    # list needs the script too once it has found a lock key (SCAN alone is allowed)
    assert srv.command("SET", f"watchlock:{{{name}}}", "x") == "OK"
    r = cli.run("list", url=limited)
    assert r.returncode == EX_NOPERM, r.stderr
    assert "NOPERM" in one_error_line(r.stderr)
    assert srv.command("DEL", f"watchlock:{{{name}}}") == 1
    # A wrong password for the same user is still an authentication failure.
    r = cli.run("run", name, "--", "true", url=limited.replace("limited-secret", "wrong"))
    assert r.returncode == EX_UNAVAILABLE, r.stderr
    # The default user is not limited.
    r = cli.run("run", name, "--", "true")
    assert r.returncode == 0, r.stderr


# ---- install -------------------------------------------------------------------------------


def test_installed_binary_works_from_any_directory(cli, name, tmp_path):
    build_dir = Path(cli.exe).resolve().parent.parent
    if not (build_dir / "CMakeCache.txt").exists():
        pytest.fail(f"{cli.exe} is not in a CMake build tree; cannot test the install")
    # DESTDIR keeps every file (even one with an absolute destination) under
    # tmp_path; the tree then lives elsewhere than the prefix it was
    # installed for, which the $ORIGIN rpath must handle.
    destdir = tmp_path / "dest dir"
    r = subprocess.run(["cmake", "--install", str(build_dir), "--prefix", "/opt/watchlock"],
                       env=dict(os.environ, DESTDIR=str(destdir)), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    prefix = destdir / "opt" / "watchlock"
    exe = prefix / "bin" / "watchlock"
    assert exe.exists()
    assert (prefix / "share" / "man" / "man1" / "watchlock.1").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = cli.env()
    env.pop("LD_LIBRARY_PATH", None)
    r = subprocess.run([str(exe), "--version"], cwd=elsewhere, env=env, capture_output=True,
                       text=True, timeout=LONG)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("watchlock 0.1.0")
    # It loads the installed library, not the build tree's.
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, timeout=LONG).stdout
    lib_line = next(line for line in ldd.splitlines() if "libwatchlock" in line)
    assert str(prefix) in lib_line, ldd
    r = subprocess.run([str(exe), "run", name, "--", "sh", "-c", "exit 3"], cwd=elsewhere,
                       env=env, capture_output=True, text=True, timeout=LONG)
    assert r.returncode == 3, r.stderr
    # Moving the whole prefix keeps it working ($ORIGIN rpath).
    moved = tmp_path / "moved"
    shutil.move(str(prefix), str(moved))
    r = subprocess.run([str(moved / "bin" / "watchlock"), "--version"], cwd=elsewhere, env=env,
                       capture_output=True, text=True, timeout=LONG)
    assert r.returncode == 0, r.stderr


def test_terminal_ctrl_c_reaches_command_once(cli, name, tmp_path):
    """Ctrl-C on a terminal signals the whole foreground process group, so
    COMMAND gets SIGINT from the terminal; watchlock must not send it again.
    (A duplicate that lands while the first is still pending merges with it,
    so a regression is caught often rather than always.)"""
    import pty

    count = tmp_path / "count"
    # A Python child takes each SIGINT as soon as it is delivered (a shell
    # would run its trap only after its current `sleep`, and two SIGINTs
    # arriving meanwhile would merge into one), then waits a second more for
    # a duplicate.
    script = (
        "import signal, sys, time\n"
        "got = []\n"
        "def on_int(sig, frame):\n"
        f"    got.append(1); open({str(count)!r}, 'a').write('int\\n')\n"
        "signal.signal(signal.SIGINT, on_int)\n"
        f"open({str(tmp_path / 'ready')!r}, 'w').close()\n"
        "while not got: time.sleep(0.01)\n"
        "end = time.monotonic() + 1.0\n"
        "while time.monotonic() < end: time.sleep(0.01)\n"
        "sys.exit(3)\n")
    pid, master = pty.fork()
    if pid == 0:  # child: new session, the pty is its controlling terminal
        try:
            os.execve(cli.exe, [cli.exe, "run", name, "--", sys.executable, "-c", script],
                      cli.env())
        finally:
            os._exit(127)
    os.set_blocking(master, False)
    try:
        wait_for(lambda: (tmp_path / "ready").exists(), "the command to start")
        os.write(master, b"\x03")  # the terminal's INTR character
        deadline = time.monotonic() + LONG
        status = None
        while time.monotonic() < deadline:
            try:
                os.read(master, 4096)  # keep the pty drained
            except OSError:
                pass
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.02)
        assert status is not None and os.WIFEXITED(status), status
        assert os.WEXITSTATUS(status) == 3
        assert count.read_text() == "int\n"
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(master)


# ---- issue 19.13: COMMAND's arguments never reach the lock server -------------------------


def dump_server(srv) -> bytes:
    """Every key of every database of `srv` with everything it holds (SCAN +
    TYPE + GET/HGETALL/LRANGE/SMEMBERS/ZRANGE/XRANGE), and the CLIENT LIST,
    as one byte string to search."""
    out = []
    dbs = int(srv.command("CONFIG", "GET", "databases")[1])
    for db in range(dbs):
        cursor = b"0"
        while True:
            reply = _db_command(srv, db, "SCAN", cursor, "COUNT", "1000")
            cursor, keys = reply
            for key in keys:
                kind = _db_command(srv, db, "TYPE", key)
                out.append(b"key %d %s %s" % (db, key, kind.encode()))
                if kind == "string":
                    value = [_db_command(srv, db, "GET", key)]
                elif kind == "hash":
                    value = _db_command(srv, db, "HGETALL", key)
                elif kind == "list":
                    value = _db_command(srv, db, "LRANGE", key, "0", "-1")
                elif kind == "set":
                    value = _db_command(srv, db, "SMEMBERS", key)
                elif kind == "zset":
                    value = _db_command(srv, db, "ZRANGE", key, "0", "-1", "WITHSCORES")
                elif kind == "stream":
                    value = [repr(_db_command(srv, db, "XRANGE", key, "-", "+")).encode()]
                else:
                    value = [repr(_db_command(srv, db, "DUMP", key)).encode()]
                out.extend(v if isinstance(v, bytes) else str(v).encode() for v in value)
            if cursor in (b"0", 0, "0"):
                break
    # not a key, but also shown to clients: connection names
    out.append(srv.command("CLIENT", "LIST"))
    return b"\n".join(out)


def _db_command(srv, db: int, *args):
    """One command on database `db` of `srv` (SELECT first, on one connection)."""
    from redis_server import _encode, _read_reply, connect, RedisError
    with connect(srv.port, srv.tls) as s:
        f = s.makefile("rb")
        s.sendall(_encode(("SELECT", str(db))))
        assert _read_reply(f) == "OK"
        s.sendall(_encode(args))
        reply = _read_reply(f)
    assert not isinstance(reply, RedisError), (args, reply)
    return reply


@pytest.mark.parametrize("how", ["argv", "shell", "shell-assignment"])
def test_no_argument_of_command_reaches_the_server(fresh_redis, tmp_path, how):
    """The owner record is visible to every client of the server (status,
    list) and lives in its replicas and persistence: it carries the program's
    name only, never COMMAND's arguments (a password on the command line)."""
    secret = f"hunter2-{uuid.uuid4().hex[:8]}"
    c = Cli(fresh_redis.url, tmp_path)
    name = f"secret-test-{how}"
    ready = tmp_path / "ready"
    if how == "argv":
        cmd = ["--", "sh", "-c", f'touch "$0"; while [ ! -e "$0.stop" ]; do sleep 0.05; done',
               str(ready), f"--password={secret}", "-p" + secret]
        label = "sh"
    elif how == "shell":
        cmd = ["-c", f'sh -c \'touch "$0"; while [ ! -e "$0.stop" ]; do sleep 0.05; done\' '
                     f'{ready} --password={secret}']
        label = "sh"
    else:  # a leading variable assignment is not the program's name
        cmd = ["-c", f'PGPASSWORD={secret} SECRET={secret} sh -c \'touch "$0"; '
                     f'while [ ! -e "$0.stop" ]; do sleep 0.05; done\' {ready}']
        label = "sh"
    proc = c.popen("run", name, *cmd, stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: ready.exists() or proc.poll() is not None, "the command to start")
        assert proc.poll() is None, proc.communicate()
        dump = dump_server(fresh_redis)
        assert b"watchlock:{" + name.encode() + b"}" in dump  # the dump does see the lock
        assert secret.encode() not in dump, dump
        st = c.status(name)
        assert st["held"] is True and st["owner"]["label"] == label, st
        r = c.run("list", "--json")
        assert secret not in r.stdout and secret not in r.stderr
    finally:
        Path(str(ready) + ".stop").touch()
        proc.communicate(timeout=LONG)
    assert proc.returncode == 0


def test_label_option_says_more(cli, name, tmp_path):
    """--label TEXT is recorded instead of the program's name (cut to 256 bytes
    on a character boundary, ending in "...")."""
    proc = cli.popen("run", "--label", "nightly backup of db1", name, "--", "sh", "-c",
                     f"touch {tmp_path}/ready; exec sleep 600", "secret-arg")
    try:
        wait_for(lambda: (tmp_path / "ready").exists(), "the command to start")
        owner = cli.status(name)["owner"]
        assert owner == {"host": socket.gethostname(), "pid": proc.pid, "label": "nightly backup of db1"}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=LONG)
    proc = cli.popen("run", name, "--label=" + "é" * 300, "-c", f"touch {tmp_path}/ready2; exec sleep 600")
    try:
        wait_for(lambda: (tmp_path / "ready2").exists(), "the command to start")
        label = cli.status(name)["owner"]["label"]
        assert label.endswith("...") and "\ufffd" not in label
        assert len(label.encode()) <= 256 and label.startswith("éé")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=LONG)


# ---- issue 19.14: watchlock run owns COMMAND's whole process tree ------------------------

# `sleep 300 | cat` (the README's `a | b` form), each stage recording its pid.
TREE_PIPELINE = ('echo $$ >> pids; sh -c \'echo $$ >> pids; exec sleep 300\' | '
                 'sh -c \'echo $$ >> pids; exec cat\'')
# A COMMAND that backgrounds a writer (a timestamp every 10 ms) and waits.
TREE_WRITER = ('echo $$ >> pids; (while :; do date +%s%N >> writes; sleep 0.01; done) & '
               'echo $! >> pids; wait')


def _tree_pids(d: Path, n: int) -> list:
    def got():
        try:
            pids = [int(x) for x in (d / "pids").read_text().split()]
        except (FileNotFoundError, ValueError):
            return None
        return pids if len(pids) >= n else None
    return wait_for(got, f"{n} pids of the tree")


def _last_write_ns(d: Path) -> int:
    lines = [ln for ln in (d / "writes").read_text().split("\n") if ln.strip().isdigit()]
    return int(lines[-1])


@pytest.mark.parametrize("event", ["loss", "sigkill", "sigterm"])
@pytest.mark.parametrize("tree", ["pipeline", "writer"])
def test_whole_tree_stops_on_loss_and_with_watchlock(cli, name, tmp_path, tree, event):
    """After a loss (force-release), after SIGKILL of watchlock alone, and
    after SIGTERM forwarded by watchlock, no process of COMMAND's tree
    survives and the background writer's last write is no later than
    100 ms after the event was reported (the loss line) or sent."""
    d = tmp_path / "tree"
    d.mkdir()
    script, npids = (TREE_PIPELINE, 3) if tree == "pipeline" else (TREE_WRITER, 2)
    log = tmp_path / "err"
    proc = cli.popen_logged("run", "--ttl", "1s", name, "-c", script, cwd=d, log=log,
                            stdout=subprocess.DEVNULL)
    pids: list = []
    try:
        pids = _tree_pids(d, npids)
        if tree == "writer":
            wait_for(lambda: (d / "writes").exists() and len((d / "writes").read_text().split()) >= 3,
                     "the writer to write")
        assert proc.poll() is None, log.read_text()
        if event == "loss":
            r = cli.run("release", "--force", name)
            assert r.returncode == 0, r.stderr
            wait_for(lambda: "lost lock" in log.read_text(), "the loss to be reported", interval=0.005)
            t_event = time.time_ns()
            proc.wait(timeout=LONG)
            assert proc.returncode == EX_LOCK_LOST, log.read_text()
        elif event == "sigkill":
            t_event = time.time_ns()
            proc.kill()  # watchlock's pid only, not its group
            proc.wait(timeout=LONG)
        else:
            t_event = time.time_ns()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=LONG)
            assert proc.returncode == 128 + signal.SIGTERM, log.read_text()
        wait_for(lambda: not any(process_running(p) for p in pids),
                 f"every process of the tree ({pids}) to be gone", timeout=5)
        if tree == "writer":
            late_ms = (_last_write_ns(d) - t_event) / 1e6
            assert late_ms <= 100, f"the writer wrote {late_ms:.0f} ms after the {event}"
            # and nothing more comes later
            size = (d / "writes").stat().st_size
            time.sleep(0.3)
            assert (d / "writes").stat().st_size == size
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in pids:
            if process_running(p):
                os.kill(p, signal.SIGKILL)


MINI_SHELL = r'''
import os, signal, sys, time
# A shell with job control, reduced to one job: watchlock in a process group
# of its own, in the foreground of the terminal; stopped, it gets the
# terminal back, waits for the file "fg" and continues the job ("fg").
d, argv = sys.argv[1], sys.argv[2:]
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
pid = os.fork()
if pid == 0:
    # as real shells do, in the child too (SIGTTOU still ignored): whichever
    # of the two runs first, watchlock starts in the foreground (left to the
    # parent alone, a watchlock scheduled first met the terminal from the
    # background, was stopped by SIGTTOU, and this shell waited for "fg")
    os.setpgid(0, 0)
    os.tcsetpgrp(0, os.getpid())
    signal.signal(signal.SIGTTOU, signal.SIG_DFL)
    os.execv(argv[0], argv)
try:
    os.setpgid(pid, pid)
except PermissionError:
    pass  # EACCES: the child made the call itself and has exec'd already (as shells ignore it)
os.tcsetpgrp(0, pid)
while True:
    _, status = os.waitpid(pid, os.WUNTRACED)
    if os.WIFSTOPPED(status):
        os.tcsetpgrp(0, os.getpgrp())
        open(os.path.join(d, "stopped"), "w").write(str(os.WSTOPSIG(status)))
        while not os.path.exists(os.path.join(d, "fg")):
            time.sleep(0.01)
        os.tcsetpgrp(0, pid)
        os.killpg(pid, signal.SIGCONT)
        continue
    break
open(os.path.join(d, "back"), "w").write(str(os.tcgetpgrp(0) == pid))
os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
'''

JOB = r'''
import os, sys, time
d = sys.argv[1]
tty = os.open("/dev/tty", os.O_RDWR)
def fg():
    return str(os.tcgetpgrp(tty) == os.getpgrp() and os.getpgrp() == os.getpid())
open(os.path.join(d, "pid"), "w").write(str(os.getpid()))
open(os.path.join(d, "fg1"), "w").write(fg())
open(os.path.join(d, "ready"), "w").close()
while not os.path.exists(os.path.join(d, "go")):
    time.sleep(0.01)
open(os.path.join(d, "fg2"), "w").write(fg())
sys.exit(3)
'''


def proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.mark.parametrize("how", ["job", "in-a-script"])
def test_job_control_on_a_terminal(cli, name, tmp_path, how):
    """Interactive use: COMMAND's group is the terminal's foreground group
    while it runs; Ctrl-Z stops COMMAND and watchlock's group (the shell sees
    its job stop and gets the terminal back); `fg` gives COMMAND the terminal
    again; at the end the terminal is back with watchlock's group. Also
    when watchlock runs inside a script (not a group leader, stdin not the
    terminal): Ctrl-Z stops the script's whole job, as before."""
    import pty

    run = [cli.exe, "run", name, "--", sys.executable, "-c", JOB, str(tmp_path)]
    if how == "in-a-script":
        run = ["/bin/sh", "-c", '"$@" < /dev/null; exit $?', "sh"] + run
    pid, master = pty.fork()
    if pid == 0:
        try:
            os.execve(sys.executable, [sys.executable, "-c", MINI_SHELL, str(tmp_path)] + run,
                      cli.env())
        finally:
            os._exit(127)
    os.set_blocking(master, False)
    out = []

    def drain():
        try:
            out.append(os.read(master, 4096))
        except OSError:
            pass

    def seen() -> str:
        """What a failure shows: the files the job and the shell wrote, the
        terminal's output, and the state of every process of the session."""
        files = {f.name: f.read_text()[:40] for f in tmp_path.iterdir()}
        procs = []
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit() and os.getsid(int(d.name)) == pid:
                    procs.append((d.name, proc_state(int(d.name)), (d / "cmdline").read_bytes()[:60]))
            except OSError:
                pass
        return f"files {files}; terminal {b''.join(out)[-400:]!r}; processes {procs}"

    try:
        assert wait_for(lambda: drain() or (tmp_path / "ready").exists(), 120), seen()
        assert (tmp_path / "fg1").read_text() == "True", seen()
        job = int((tmp_path / "pid").read_text())
        os.write(master, b"\x1a")  # the terminal's SUSP character (Ctrl-Z)
        assert wait_for(lambda: drain() or (tmp_path / "stopped").exists(), 120), seen()
        assert proc_state(job) == "T", seen()
        (tmp_path / "go").touch()
        (tmp_path / "fg").touch()
        status = None
        deadline = time.monotonic() + LONG
        while time.monotonic() < deadline:
            drain()
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.02)
        assert status is not None and os.WIFEXITED(status), (status, seen())
        assert os.WEXITSTATUS(status) == 3, seen()
        assert (tmp_path / "fg2").read_text() == "True", seen()
        assert (tmp_path / "back").read_text() == "True", seen()
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(master)
