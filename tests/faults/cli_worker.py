#!/usr/bin/env python3
"""The CLI worker of the fault-injection suite (tests/faults).

Loops: ``watchlock run --ttl ... NAME -- python3 -S cli_job.py`` (one hold
per run; with --tree 1 the job runs in ``sh -c 'python3 -S cli_job.py | cat'``), recording "cli_spawn" (watchlock's pid) and "cli_exit" (its exit
code: 0, 75 not obtained, 79 lost while COMMAND ran, -9 killed ...). The job
(cli_job.py) does the resource work and records its own events into the
same history file. watchlock runs in a session of its own, so that a fault
can stop or kill it; its COMMAND leads a process group of its own
(watchlock's guardian kills that group if watchlock dies). SIGTERM ends the loop:
the job in progress gets SIGUSR1 (forwarded by watchlock) and stops after
its current iteration.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import History, die_with_parent, iterations, start_fields  # noqa: E402

stop = False


def relay_stderr(proc, hist, hold: int) -> None:
    """watchlock's -v lines (acquired, started, lost ..., released), each
    recorded with the time it was read ("cli_said": when watchlock itself
    got that far, give or take this thread's scheduling), and passed on to
    this worker's stderr as before. Not tied to the hold's events (no "hold"
    field): the checker does not read them; a person reading a failure does."""
    stats = False
    for raw in proc.stderr:
        line = raw.decode(errors="replace").rstrip("\n")
        stats = stats or line.endswith("stats of this run:")  # -v's closing table: not kept
        if stats:
            continue
        hist.emit("cli_said", of_hold=hold, pid=proc.pid, line=line)
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except OSError:
            pass
    proc.stderr.close()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cli", required=True)
    p.add_argument("--job-python", default="/usr/bin/python3")
    p.add_argument("--url", required=True)
    p.add_argument("--resource-port", type=int, required=True)
    p.add_argument("--scripts", required=True)
    p.add_argument("--id", required=True)
    p.add_argument("--history", required=True)
    p.add_argument("--name", default="faults")
    p.add_argument("--lease-ms", type=int, default=1000)
    p.add_argument("--duration-ms", type=int, default=600000)
    p.add_argument("--wait-ms", type=int, default=5000)
    p.add_argument("--kill-after-ms", type=int, default=1000)
    p.add_argument("--iters-max", type=int, default=3)
    p.add_argument("--idle-min-ms", type=int, default=50)
    p.add_argument("--idle-max-ms", type=int, default=300)
    p.add_argument("--gap-max-ms", type=int, default=30)
    p.add_argument("--long-pct", type=int, default=30)
    p.add_argument("--long-iters", type=int, default=16)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--tree", type=int, default=0,
                   help="1: COMMAND is a process tree, `sh -c 'JOB | cat'` (scenario h-tree)")
    p.add_argument("--cli-kind", default="plain",
                   help="fair | sem:N:K | read: watchlock run --fair / --permits N --take K / -s (issues 22, 23)")
    a = p.parse_args()

    die_with_parent()

    current = {"proc": None}

    def on_signal(signum, frame):
        # end the current run soon: watchlock forwards SIGUSR1 to the job,
        # which then stops after its current iteration (and releases)
        global stop
        stop = True
        p = current["proc"]
        if p is not None and p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGUSR1)
            except OSError:
                pass

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rng = random.Random(a.seed if a.seed is not None else os.getpid())
    hist = History(a.history, a.id)
    hist.emit("start", lease_ms=a.lease_ms, **start_fields("cli"))
    end = time.monotonic() + a.duration_ms / 1000.0
    hold = 0
    job = os.path.join(HERE, "cli_job.py")
    while not stop and time.monotonic() < end:
        hold += 1
        iters = iterations(rng, a.iters_max, a.long_pct, a.long_iters)
        env = dict(os.environ, FAULTS_HOLD=str(hold), FAULTS_W=a.id, FAULTS_HISTORY=a.history,
                   FAULTS_RESOURCE_PORT=str(a.resource_port), FAULTS_SCRIPTS=a.scripts,
                   FAULTS_NAME=a.name, FAULTS_ITERS=str(iters),
                   FAULTS_IDLE=",".join(str(rng.randint(a.idle_min_ms, a.idle_max_ms)) for _ in range(iters)))
        urls = [x for u in a.url.split() for x in ("--url", u)]  # several: a Redlock quorum
        cmd = [a.cli, "run", "-v", *urls, "--ttl", f"{a.lease_ms}ms", "--wait", f"{a.wait_ms}ms",
               "--kill-after", f"{a.kill_after_ms}ms"]
        if a.cli_kind == "fair":
            cmd.append("--fair")
        elif a.cli_kind == "read":
            cmd.append("--shared")
        elif a.cli_kind.startswith("sem:"):
            n, k = a.cli_kind[4:].split(":")
            cmd += ["--permits", n, "--take", k]
        cmd += [a.name, "--"]
        if a.tree:
            # The job is a grandchild of watchlock, in a pipeline (the README's
            # `-c 'a | b'`): PR_SET_PDEATHSIG does not reach it, only the group
            # does. sh and cat ignore the signals the job handles (USR1: stop
            # after this iteration; TERM: told of a loss) and wait for it.
            cmd += ["/bin/sh", "-c", 'trap "" USR1 TERM; "$0" -S "$1" | cat', a.job_python, job]
        else:
            cmd += [a.job_python, "-S", job]
        t = time.monotonic_ns()
        try:
            # FAULTS_SPAWNED_NS: the job's "acquired" event says its acquire was
            # called no earlier than this (t_call), so the checker can read the
            # grant time from the token instead of the job's own later start
            proc = subprocess.Popen(cmd, env=dict(env, FAULTS_SPAWNED_NS=str(t)), start_new_session=True,
                                    stderr=subprocess.PIPE)
        except OSError as e:
            hist.emit("cli_spawn_failed", t=t, hold=hold, error=str(e))
            time.sleep(0.1)
            continue
        current["proc"] = proc
        hist.emit("cli_spawn", t=t, hold=hold, lock=a.name, pid=proc.pid)
        said = threading.Thread(target=relay_stderr, args=(proc, hist, hold), daemon=True)
        said.start()
        while True:
            try:
                code = proc.wait()
                break
            except InterruptedError:
                continue
        said.join()
        hist.emit("cli_exit", hold=hold, lock=a.name, pid=proc.pid, code=code)
        if code == 75:
            continue
        time.sleep(rng.uniform(0, a.gap_max_ms / 1000.0))
    hist.emit("exit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
