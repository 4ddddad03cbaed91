"""`watchlock run NAME --also NAME2 ...` on a Redlock quorum (issue 30.3):
the multi-lock is held on a majority of members for every name while
COMMAND runs, a busy name means nothing is taken (75), and a quorum hold
records its owner (host, pid, --label) on the members, shown by
`watchlock status --json`. 5 redis-servers from tests/harness/quorum.py
(the fixtures of test_cli_quorum.py)."""
from __future__ import annotations

import json
import os
import socket
import subprocess

from test_cli_quorum import (EX_TEMPFAIL, cli, cli_exe, lock_key, name, quorum, url_args,  # noqa: F401
                             wait_for)


def test_multi_lock_on_every_member(quorum, name, tmp_path):
    a, b = f"{name}:a", f"{name}:b"
    out = tmp_path / "seen"
    ports = " ".join(map(str, quorum.ports))
    probe = (f"for k in '{lock_key(a)}' '{lock_key(b)}'; do for p in {ports}; do redis-cli -p $p EXISTS \"$k\"; "
             f"done | grep -c 1; done > {out}; echo $WATCHLOCK_FENCING_TOKENS >> {out}")
    r = cli("run", *url_args(quorum), "--ttl", "3s", a, "--also", b, "--", "sh", "-c", probe)
    assert r.returncode == 0, r.stderr
    held_a, held_b, *tokens = out.read_text().split()
    assert int(held_a) >= 3 and int(held_b) >= 3
    assert len(tokens) == 2 and all(int(t) > 0 for t in tokens)
    for n in (a, b):
        wait_for(lambda n=n: quorum.holders(lock_key(n)) == 0, f"{n} released on every member", timeout=5)


def test_busy_name_takes_nothing(quorum, name, tmp_path):
    a, b = f"{name}:a", f"{name}:b"
    holder = subprocess.Popen([cli_exe(), "run", *url_args(quorum), "--ttl", "3s", "--label", "nightly", b, "--",
                               "sh", "-c", f"touch {tmp_path}/ready; while [ ! -e {tmp_path}/stop ]; do sleep 0.05; done"],
                              env={k: v for k, v in os.environ.items() if k != "WATCHLOCK_URL"},
                              stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or holder.poll() is not None, "the holder")
        assert holder.poll() is None, holder.communicate()
        r = cli("run", *url_args(quorum), "--ttl", "3s", "-w", "0.3", a, "--also", b, "--", "true")
        assert r.returncode == EX_TEMPFAIL, r.stderr
        wait_for(lambda: quorum.holders(lock_key(a)) == 0, "nothing of a left", timeout=5)
        # the quorum hold's owner record: this host, the holder's pid, its label
        r = cli("status", "--json", *url_args(quorum), b)
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        assert st["owner"] == {"host": socket.gethostname(), "pid": holder.pid, "label": "nightly"}, st
    finally:
        (tmp_path / "stop").touch()
        holder.communicate(timeout=60)
    assert holder.returncode == 0
    r = cli("run", *url_args(quorum), "--ttl", "3s", "-w", "5", a, "--also", b, "--", "true")
    assert r.returncode == 0, r.stderr
