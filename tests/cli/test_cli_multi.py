"""issue 23: `watchlock run NAME --also NAME2 ... -- COMMAND`: a multi-lock
(every name or none, one lease). COMMAND runs while all names are held and
sees each name's fencing token; a busy name means nothing is taken (exit
75, no key left); the loss of any name stops COMMAND and exits 79 naming
that name; two runs over [a,b] and [b,a] never deadlock."""
from __future__ import annotations

import subprocess

from test_cli import (EX_LOCK_LOST, EX_TEMPFAIL, EX_USAGE, LONG, Cli, Holder, cli, hold, holders,  # noqa: F401
                      name, one_error_line, wait_for)


def test_command_runs_holding_every_name(cli, name):
    a, b, c = f"{name}:a", f"{name}:b", f"{name}:c"
    r = subprocess.run([cli.exe, "run", a, "--also", b, "--also", c, "--", "sh", "-c",
                        'echo "$WATCHLOCK_NAME"; echo "$WATCHLOCK_FENCING_TOKEN"; echo "$WATCHLOCK_FENCING_TOKENS"; '
                        f'"$EXE" status "{b}" >/dev/null && echo b-held'],
                       env=cli.env(EXE=cli.exe), capture_output=True, text=True, timeout=LONG)
    assert r.returncode == 0, r.stderr
    got_name, token, tokens, held = r.stdout.splitlines()
    assert got_name == a and held == "b-held"
    tokens = [int(t) for t in tokens.split()]
    assert len(tokens) == 3 and tokens[0] == int(token)
    for n, t in zip((a, b, c), tokens):
        st = cli.status(n)
        assert st["held"] is False and st["fencing_token"] == t


def test_a_busy_name_takes_nothing(cli, name, holders):
    a, b = f"{name}:a", f"{name}:b"
    hold(holders, cli, b)
    r = cli.run("run", "-w", "300ms", a, "--also", b, "--", "true")
    assert r.returncode == EX_TEMPFAIL, r.stderr
    assert cli.status(a)["held"] is False
    r = cli.run("run", "-n", "--also", b, a, "--", "true")
    assert r.returncode == EX_TEMPFAIL, r.stderr
    assert cli.status(a)["held"] is False


def test_loss_of_one_name_stops_the_command_exit_79(cli, name, tmp_path):
    a, b = f"{name}:a", f"{name}:b"
    proc = cli.popen("run", "--ttl", "1s", "--kill-after", "5s", a, "--also", b, "--", "sh", "-c",
                     "touch ready; while :; do sleep 0.05; done", cwd=tmp_path)
    wait_for(lambda: (tmp_path / "ready").exists() or proc.poll() is not None, "the command to start")
    assert proc.poll() is None
    r = cli.run("release", "--force", b)
    assert r.returncode == 0, r.stderr
    out, err = proc.communicate(timeout=LONG)
    assert proc.returncode == EX_LOCK_LOST, err
    line = one_error_line("\n".join(ln for ln in err.splitlines() if ln != "Terminated"))
    assert "lost lock" in line and b in line
    assert cli.status(a)["held"] is False


def test_opposite_orders_never_deadlock(cli, name):
    a, b = f"{name}:a", f"{name}:b"
    loop = ('i=0; while [ $i -lt 30 ]; do "$EXE" run -q "$1" --also "$2" -- true || exit 1; '
            'i=$((i+1)); done')
    procs = [subprocess.Popen(["sh", "-c", loop, "sh", x, y], env=cli.env(EXE=cli.exe))
             for x, y in ((a, b), (b, a))]
    for p in procs:
        assert p.wait(timeout=LONG) == 0
    assert cli.status(a)["held"] is False and cli.status(b)["held"] is False


def test_usage(cli, name):
    r = cli.run("run", name, "--also", "", "--", "true")
    assert r.returncode == EX_USAGE
    r = cli.run("run", name, "--also", name, "--", "true")
    assert r.returncode == EX_USAGE, r.stderr
    assert "twice" in r.stderr
    r = cli.run("run", "--help")
    assert "--also NAME2" in r.stdout
