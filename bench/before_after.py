#!/usr/bin/env python3
"""Before/after: the uncontended cycle of two builds of watchlock, interleaved
in one run against the same redis-servers, so that only ratios count.

    bench/before_after.py --before DIR [--after DIR] [--rounds 10] [--n 5000]
                          [--max-s 3] [--only c1,py1,pywith,c5,py5] [--no-pin]

DIR is a checkout (e.g. made by `git worktree add DIR COMMIT`); --after
defaults to this checkout. For each, the script builds what bench/run
builds: `wlbench` and the static library from bench/c/ into DIR/build-bench/
(cmake, incremental), and the Python package (`pip install --target
DIR/build-bench/py`, with the running interpreter's pip, rebuilt when a
commit changes core/, bindings/, python/ or setup.py; uncommitted edits
are not seen). Workers get one build each: its wlbench binary, or
py_worker.py (this checkout's) with PYTHONPATH=DIR/build-bench/py. Run it
with a Python that has pip and setuptools >= 70.1 (e.g. bench/.peers/venv
or a fresh venv); redis-py is not needed.

Jobs (each one worker process: 100 warm-up cycles, then N cycles or MAX_S):
  c1      wlbench cycle, a plain lock on one server (bench (a), watchlock-c)
  py1     py_worker cycle: one Lock, acquire() + release() (bench (a), watchlock-py)
  pywith  py_worker cycle-with: `with client.lock(name, ttl=10): pass`
  c5      wlbench cycle on a quorum of 5 masters (scenario (h), watchlock-c:5)
  py5     py_worker cycle on the same quorum (watchlock-py:5)

Each round runs every job once per build, the two builds back to back
(before first in odd rounds, after first in even ones), one server and the
5 masters and every worker pinned to one core (as bench/run pins (a) and
(h)). Per round, the ratio after/before of the µs per cycle; printed: the
median µs per build over the rounds, the median ratio and its interquartile
range over rounds, the ratio of each build's fastest run, and a verdict
("no regression" when the median ratio is <= 1.05). The verdict is a ratio
within one run on whatever machine this is, not an absolute time. On a
loaded machine the wall time of one run swings by +-50 % with what else
gets the core, so the CPU per cycle is printed too: the worker's own (its
cpu_us) plus the servers' (/proc/PID/task/*/schedstat over the worker's
run), and its after/before ratio per round, which the load moves far less
(a second verdict on it). Also per job and build: the server-side commands per
cycle (INFO commandstats over each worker run, warm-up included in the
count of cycles; for the quorum, summed over the 5 masters), which shows
an extra round trip or script call at once.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
PY_WORKER = os.path.join(BENCH, "py_worker.py")
sys.path.insert(0, os.path.join(ROOT, "tests", "harness"))
import redis_server as rs  # noqa: E402

MASTERS = 5
LEASE_S = 10  # the workers' lease (wlbench and py_worker): the quorum's restart rule waits for it
WARMUP = 100  # cycles each worker runs before it starts the clock
THRESHOLD = 1.05
JOBS = ["c1", "py1", "pywith", "c5", "py5"]
LABELS = {"c1": "C cycle, plain lock, 1 server (a)",
          "py1": "Python acquire()+release(), 1 server (a)",
          "pywith": "Python `with client.lock()`, 1 server (a)",
          "c5": "C cycle, quorum of 5 masters (h)",
          "py5": "Python acquire()+release(), quorum of 5 (h)"}


def log(msg: str) -> None:
    print(f"[before_after] {msg}", file=sys.stderr, flush=True)


def git_head(d: str) -> str:
    r = subprocess.run(["git", "-C", d, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


def build(checkout: str) -> dict:
    """Builds wlbench and the Python package of `checkout`; returns its paths."""
    bdir = os.path.join(checkout, "build-bench")
    for cmd in (["cmake", "-S", os.path.join(checkout, "bench", "c"), "-B", bdir,
                 "-DCMAKE_BUILD_TYPE=RelWithDebInfo"],
                ["cmake", "--build", bdir, "--target", "wlbench", "-j2"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"before_after: {' '.join(cmd)} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    py = os.path.join(bdir, "py")
    stamp = os.path.join(py, ".commit")
    # the last commit that changed what the package is built from (uncommitted edits: not seen)
    head = subprocess.run(["git", "-C", checkout, "log", "-1", "--format=%h", "--", "core", "bindings", "python",
                           "setup.py", "pyproject.toml"], capture_output=True, text=True).stdout.strip() or "?"
    have = open(stamp).read().strip() if os.path.exists(stamp) else ""
    if have != head:
        log(f"pip install --target {py} {checkout} (takes minutes)")
        shutil.rmtree(py, ignore_errors=True)
        r = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "install",
                            "--no-build-isolation", "--no-deps", "--target", py, checkout],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"before_after: pip install of {checkout} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
        with open(stamp, "w") as f:
            f.write(head + "\n")
    return {"dir": checkout, "commit": git_head(checkout), "wlbench": os.path.join(bdir, "wlbench"), "py": py}


def probe_python(b: dict) -> str:
    """Where `import watchlock` comes from under this build's PYTHONPATH (must be the build's)."""
    r = subprocess.run([sys.executable, "-c", "import watchlock, os; print(os.path.dirname(watchlock.__file__))"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=b["py"]), cwd=BENCH)
    where = r.stdout.strip()
    if r.returncode != 0 or not where.startswith(b["py"]):
        raise SystemExit(f"before_after: watchlock for {b['dir']} imports from {where!r}: {r.stderr[-2000:]}")
    return where


def commandstats(port: int) -> dict:
    with rs.connect(port) as sock:
        sock.sendall(rs._encode(("INFO", "commandstats")))
        raw = rs._read_reply(sock.makefile("rb"))
    raw = raw.decode() if isinstance(raw, bytes) else str(raw)
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"cmdstat_([a-z|_-]+):calls=(\d+)", raw)}


def run_time_ns(pids: list) -> int:
    """CPU time in ns of the processes so far (all threads; /proc/PID/task/TID/schedstat)."""
    total = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return total


def pin(cpu, pids: list) -> None:
    if cpu is not None:
        for pid in pids:
            subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), str(pid)], capture_output=True, check=True)


def cmd_of(job: str, b: dict, one: str, five: str, n: int, max_s: float) -> tuple:
    url = five if job.endswith("5") else one
    if job.startswith("c"):
        return [b["wlbench"], "cycle", url, str(n), str(max_s)], None
    mode = "cycle-with" if job == "pywith" else "cycle"
    return [sys.executable, PY_WORKER, mode, "watchlock", url, str(n), str(max_s)], \
        dict(os.environ, PYTHONPATH=b["py"])


def run_one(cmd: list, env, cpu, servers: list) -> tuple:
    """Runs one worker; returns (µs per cycle, server commands per cycle,
    client CPU µs per timed cycle or None, servers' CPU µs per cycle)."""
    for s in servers:
        s.command("CONFIG", "RESETSTAT")
    srv0 = run_time_ns([s.proc.pid for s in servers])
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=BENCH, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"before_after: {' '.join(cmd)} exited {r.returncode}: {r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    calls: dict = {}
    for s in servers:
        for k, v in commandstats(s.port).items():
            if k not in ("config|resetstat", "config", "info"):
                calls[k] = calls.get(k, 0) + v
    cycles = out["ops"] + WARMUP
    srv_us = (run_time_ns([s.proc.pid for s in servers]) - srv0) / 1e3 / cycles
    cpu = out["cpu_us"] / out["ops"] if "cpu_us" in out else None
    return out["seconds"] / out["ops"] * 1e6, {k: v / cycles for k, v in calls.items()}, cpu, srv_us


def quartiles(vals: list) -> tuple:
    if len(vals) < 4:
        return min(vals), max(vals)
    q = statistics.quantiles(vals, n=4)
    return q[0], q[2]


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="checkout of the 'before' commit")
    ap.add_argument("--after", default=ROOT, help="checkout of the 'after' commit (default: this one)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--n", type=int, default=5000, help="cycles per worker run")
    ap.add_argument("--max-s", type=float, default=3.0, help="time cap per worker run")
    ap.add_argument("--only", default=",".join(JOBS))
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--json", help="also write every sample to this file")
    a = ap.parse_args()
    jobs = [j for j in a.only.split(",") if j]
    bad = [j for j in jobs if j not in JOBS]
    if bad:
        ap.error(f"unknown jobs {bad}; known: {JOBS}")
    builds = {"before": build(os.path.abspath(a.before)), "after": build(os.path.abspath(a.after))}
    if any(j.startswith("py") for j in jobs):
        for b in builds.values():
            probe_python(b)
    cpu = None
    if not a.no_pin and shutil.which("taskset"):
        cpus = sorted(os.sched_getaffinity(0))
        cpu = cpus[-1] if len(cpus) > 1 else None
    load0 = loadavg()
    started = time.monotonic()
    one = rs.RedisServer().start()
    masters = [rs.RedisServer().start() for _ in range(MASTERS)] if any(j.endswith("5") for j in jobs) else []
    try:
        pin(cpu, [one.proc.pid] + [m.proc.pid for m in masters])
        five = " ".join(m.url for m in masters)
        # The quorum's restart rule counts a member only once its uptime exceeds the
        # longest lease (10 s): fresh servers look restarted. Wait that out.
        if masters:
            wait = LEASE_S + 1 - (time.monotonic() - started)
            if wait > 0:
                log(f"waiting {wait:.1f} s until the masters are older than the {LEASE_S} s lease")
                time.sleep(wait)
        us = {j: {"before": [], "after": []} for j in jobs}
        cmds = {j: {"before": [], "after": []} for j in jobs}
        cpus = {j: {"before": [], "after": []} for j in jobs}  # (client, servers) µs per cycle
        ratios = {j: [] for j in jobs}
        for rnd in range(a.rounds):
            order = ["before", "after"] if rnd % 2 == 0 else ["after", "before"]
            log(f"round {rnd + 1}/{a.rounds} ({' then '.join(order)}), loadavg {loadavg()}")
            for j in jobs:
                got = {}
                for which in order:
                    cmd, env = cmd_of(j, builds[which], one.url, five, a.n, a.max_s)
                    t, c, ccpu, scpu = run_one(cmd, env, cpu, masters if j.endswith("5") else [one])
                    got[which] = t
                    cpus[j][which].append((ccpu, scpu))
                    us[j][which].append(t)
                    cmds[j][which].append(c)
                ratios[j].append(got["after"] / got["before"])
    finally:
        one.close()
        for m in masters:
            m.close()
    load1 = loadavg()
    b, f = builds["before"], builds["after"]
    print(f"before/after, one run, {a.rounds} rounds interleaved (before/after alternating first), "
          f"{a.n} cycles or {a.max_s:g} s per worker run, "
          + (f"servers and workers pinned to cpu {cpu}" if cpu is not None else "not pinned"))
    print(f"before: {b['commit']} ({b['dir']})   after: {f['commit']} ({f['dir']})")
    print(f"loadavg {load0} at the start, {load1} at the end; {time.strftime('%Y-%m-%d %H:%M:%S %z')}")
    print()
    print("wall: µs per cycle, median over rounds; ratio: after/before per round, its median and "
          "interquartile range; best: the ratio of each build's fastest run")
    print(f"{'job':<44} {'before µs':>10} {'after µs':>10} {'ratio':>7} {'IQR':>13} {'best':>6}  verdict")
    worst = 0.0
    for j in jobs:
        mb, ma = statistics.median(us[j]["before"]), statistics.median(us[j]["after"])
        mr = statistics.median(ratios[j])
        lo, hi = quartiles(ratios[j])
        best = min(us[j]["after"]) / min(us[j]["before"])
        worst = max(worst, mr)
        v = "no regression" if mr <= THRESHOLD else "REGRESSION?"
        print(f"{LABELS[j]:<44} {mb:>10.1f} {ma:>10.1f} {mr:>7.3f} {lo:>6.3f}-{hi:<6.3f} {best:>6.3f}  {v}")
    print()
    print("CPU per cycle, µs, median over rounds: the worker's own (all its threads, timed cycles) and the "
          "servers' (all threads, the whole worker run / its cycles incl. warm-up); cpu ratio: "
          "(client + servers) after/before per round, median and IQR")
    print(f"{'job':<8} {'client before':>14} {'client after':>13} {'servers before':>15} {'servers after':>14}"
          f" {'cpu ratio':>10} {'IQR':>13}")
    cpu_worst = 0.0
    for j in jobs:
        def med(which, i):
            vals = [x[i] for x in cpus[j][which] if x[i] is not None]
            return f"{statistics.median(vals):.1f}" if vals else "-"
        cr = [(fa[0] + fa[1]) / (fb[0] + fb[1]) for fb, fa in zip(cpus[j]["before"], cpus[j]["after"])
              if fa[0] is not None and fb[0] is not None]
        ctxt = f"{statistics.median(cr):>10.3f} {quartiles(cr)[0]:>6.3f}-{quartiles(cr)[1]:<6.3f}" if cr else ""
        if cr:
            cpu_worst = max(cpu_worst, statistics.median(cr))
        print(f"{j:<8} {med('before', 0):>14} {med('after', 0):>13} {med('before', 1):>15} {med('after', 1):>14}"
              f" {ctxt}")
    print()
    print("server commands per cycle (median over rounds; quorum: summed over the 5 masters):")
    for j in jobs:
        for which in ("before", "after"):
            keys = sorted({k for c in cmds[j][which] for k in c})
            med = {k: statistics.median(c.get(k, 0.0) for c in cmds[j][which]) for k in keys}
            shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(med.items(), key=lambda kv: -kv[1]) if v >= 0.005)
            print(f"  {j:<7} {which:<6} total {sum(med.values()):6.2f}: {shown}")
    print()
    print(f"verdict (a ratio in one run, not an absolute time): "
          + ("no regression" if worst <= THRESHOLD else "REGRESSION?")
          + f" (largest median wall ratio {worst:.3f}; threshold {THRESHOLD})"
          + (f"; by CPU per cycle: " + ("no regression" if cpu_worst <= THRESHOLD else "REGRESSION?")
             + f" (largest median cpu ratio {cpu_worst:.3f})" if cpu_worst else ""))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"builds": builds, "rounds": a.rounds, "n": a.n, "max_s": a.max_s, "pinned_cpu": cpu,
                       "load_before": load0, "load_after": load1, "us": us, "ratios": ratios, "cpu_us_per_cycle": cpus,
                       "commands": cmds}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
