#!/usr/bin/env python3
"""watchlock benchmarks against redis-py, python-redis-lock, pottery and
Redisson, side by side on one redis-server. Entry point: bench/run.

Stages: set up (venv with the Python peers and watchlock, the C program,
the Redisson jar; whatever fails to set up is reported as n/a with the
reason), start a redis-server on a free loopback port, run the scenarios,
print a table, write results/latest.json and the plots.

Exit status: 0 when every watchlock measurement ran and was sound (mutual
exclusion held, no lock lost); 1 otherwise. Peers never fail the run, and
no timing number ever does: the bench is not a test.

Output: a peer that cannot be set up (not installed, not fetchable offline,
a failed build) is reported in one line as skipped, with the path of a log
that holds the tool's full output (bench/.peers/logs/); tool output never
goes to the terminal.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
PEERS_DIR = os.path.join(BENCH, ".peers")
LOGS = os.path.join(PEERS_DIR, "logs")
VENV = os.path.join(PEERS_DIR, "venv")
VPY = os.path.join(VENV, "bin", "python")
BUILD = os.path.join(ROOT, "build-bench")
WLBENCH = os.path.join(BUILD, "wlbench")
JAVA_DIR = os.path.join(BENCH, "java")
JAR = os.path.join(JAVA_DIR, "target", "redisson-bench.jar")
PY_WORKER = os.path.join(BENCH, "py_worker.py")

sys.path.insert(0, os.path.join(ROOT, "tests", "harness"))
from redis_server import RedisServer  # noqa: E402

# name -> (pip requirement, import name)
PY_PEERS = {
    "redis-py": ("redis", "redis"),
    "python-redis-lock": ("python-redis-lock", "redis_lock"),
    "pottery": ("pottery", "pottery"),
}
PLOT_REQ = ("matplotlib", "matplotlib")
# redis-py's C reply parser: issue 13 compares against redis-py at its fastest.
HIREDIS_REQ = ("hiredis", "hiredis")

# Libraries in table order. kind: c, py, java.
LIBS = [
    ("watchlock-c", "c"),
    ("watchlock-py", "py"),
    ("redis-py", "py"),
    ("python-redis-lock", "py"),
    ("pottery", "py"),
    ("redisson", "java"),
]

SCALES = {
    # cycle_*: scenario (a); handoff_s: (b); wd_*: (c), 3 s leases, the Redisson comparison;
    # big_*: (c) 3 s leases, many locks; held_*: (d) acquire cost while N locks with 30 s leases
    # are held (small vs large N; held_hold_s is the hold of the large run); threads_*: (e).
    "full": dict(cycle_n=20000, cycle_max_s=8.0, repeats=3, handoff_s=10.0, wd_locks=10000, wd_hold_s=60.0,
                 big_locks=300000, big_hold_s=60.0, held_small=10000, held_large=1000000,
                 held_hold_s=300.0, held_small_hold_s=20.0, probe=2000, threads_s=5.0,
                 cluster_locks=100000, cluster_hold_s=60.0,
                 cap_steps=[100000, 200000, 300000, 400000, 500000, 600000, 800000, 1000000], cap_hold_s=30.0),
    "quick": dict(cycle_n=5000, cycle_max_s=3.0, repeats=2, handoff_s=4.0, wd_locks=1000, wd_hold_s=10.0,
                  big_locks=30000, big_hold_s=15.0, held_small=10000, held_large=100000,
                  held_hold_s=20.0, held_small_hold_s=10.0, probe=1000, threads_s=2.0,
                  cluster_locks=30000, cluster_hold_s=10.0,
                  cap_steps=[30000, 60000, 100000], cap_hold_s=10.0),
    "smoke": dict(cycle_n=200, cycle_max_s=1.0, repeats=1, handoff_s=0.5, wd_locks=100, wd_hold_s=3.0,
                  big_locks=300, big_hold_s=2.0, held_small=100, held_large=1000,
                  held_hold_s=1.0, held_small_hold_s=1.0, probe=100, threads_s=0.5, queue_only=True,
                  cluster_locks=300, cluster_hold_s=2.0, cluster_smoke=True,
                  cap_steps=[300], cap_hold_s=2.0),
}
# Issue 12's figures (Cluster): cycle through the cluster client within 1.1x of one
# server's, and 100,000 locks over 3 masters on one watchdog with none lost.
CLUSTER_CYCLE_RATIO = 1.1
CLUSTER_LOCKS = 100000
# Issue 13's figures, for the targets table.
LONG_NAME = 10 * 1024
SHORT_NAME = 10
THREADS = 16
HELD_LEASE_MS = 30000
HANDOFF_PROCS = 8
T0 = time.monotonic()
HOLD_US = 1000
WD_LEASE_MS = 3000


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout=None, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def write_log(tag: str, cmd, returncode, out: str, err: str = "", cwd=None) -> str:
    """Writes a tool's whole output to bench/.peers/logs/<tag>.log; returns the
    path relative to the repository, for one-line messages."""
    os.makedirs(LOGS, exist_ok=True)
    path = os.path.join(LOGS, re.sub(r"[^A-Za-z0-9_.-]+", "-", tag) + ".log")
    with open(path, "w", encoding="utf-8", errors="replace") as f:
        f.write(f"$ {' '.join(map(str, cmd))}\n")
        if cwd:
            f.write(f"(in {cwd})\n")
        f.write(f"exit status: {returncode}\n\n--- stdout ---\n{out or ''}\n--- stderr ---\n{err or ''}\n")
    return os.path.relpath(path, ROOT)


def run_logged(tag: str, cmd, timeout=None, cwd=None, env=None):
    """run() whose output also goes to a log file. Returns (returncode, output,
    log path); a timeout is returncode -1, never an exception."""
    try:
        r = run(cmd, timeout=timeout, cwd=cwd, env=env)
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        rc = -1
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or ""))
        err += f"\n(timed out after {timeout} s)"
    except OSError as e:
        rc, out, err = -1, "", str(e)
    return rc, (out or "") + (err or ""), write_log(tag, cmd, rc, out, err, cwd)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def one_line(text: str, n: int = 160) -> str:
    """The first error line of a tool's output, without tool decorations
    ('[ERROR] ', ANSI colours, Maven's '-> [Help 1]'), at most n characters."""
    lines = [_ANSI.sub("", line).strip() for line in (text or "").splitlines()]
    lines = [line for line in lines if line]
    pick = next((line for line in lines if re.match(
        r"(\[ERROR\]|ERROR|E: |Exception in thread|[\w.$]*(Error|Exception)\b|.*\berror:)", line)),
                lines[-1] if lines else "no output")
    pick = re.sub(r"^(\[ERROR\]|ERROR:|error:|E:)\s*", "", pick)
    pick = re.sub(r"\s*-> \[Help \d+\]$", "", pick)
    return pick if len(pick) <= n else pick[:n - 3] + "..."


def skipped(reason: str, log_path: str = "") -> str:
    return f"skipped: {reason}" + (f" (log: {log_path})" if log_path else "")


def short(why: str, n: int = 90) -> str:
    """A status or error for a table cell: one line, no log path, and for
    'skipped: WHAT; DETAIL' only WHAT (the set-up lines have the detail)."""
    why = why.split(" (log: ")[0].replace("\n", " ")
    if why.startswith("skipped: "):
        why = why.split("; ", 1)[0]
    return why if len(why) <= n else why[:n - 3] + "..."


# ---- machine load and pinning -------------------------------------------------------
#
# The ratio tables (cycle vs floor, Python vs C and peers, long names, acquire
# cost while many locks are held) run client and server on one core
# (taskset): on this shared 2-vCPU machine, with client and server on
# different cores every round trip is a cross-core wake-up whose cost
# depends on what the other engineers run on the other core, and the
# scheduler moves both sides around between runs. On one core, a cycle and
# its floor pay the same context switches and meet the same neighbours, so
# the ratio measures the CPU work of a cycle (client + server), which is what
# the targets are about (issue 13 was measured that way). Scenarios that need
# both cores (threads, hand-off between 8 processes, watchdog scale) are not
# pinned. The load before and after the run is recorded next to the results.

PIN = {"cpu": None}  # the core of the pinned scenarios; None: not pinned


def pin_cpu() -> "int | None":
    """The core to pin to: the last one this process may use; None when
    taskset is missing or there is only one."""
    if shutil.which("taskset") is None:
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[-1] if len(cpus) > 1 else None


def pinned(cmd: list) -> list:
    return ["taskset", "-c", str(PIN["cpu"]), *map(str, cmd)] if PIN["cpu"] is not None else list(cmd)


def pin_pids(pids: list, on: bool) -> None:
    """Pins processes (all their threads) to the bench's core, or lets them run anywhere."""
    if PIN["cpu"] is None:
        return
    cpus = str(PIN["cpu"]) if on else ",".join(map(str, sorted(os.sched_getaffinity(0))))
    for pid in pids:
        run(["taskset", "-a", "-p", "-c", cpus, str(pid)], timeout=30)


def pin_server(srv: "RedisServer", on: bool) -> None:
    """Pins redis-server (all its threads) to the bench's core, or lets it run anywhere."""
    if srv.proc is not None:
        pin_pids([srv.proc.pid], on)


class Target:
    """What a scenario runs against: one redis-server or a Redis Cluster.
    url: the URL the workers open; admin: wlbench watchdog's HOST PORT (one
    server, or under Cluster "h1:p1,h2:p2,..." of every master and 0);
    flush(): FLUSHALL on every server that holds keys; pids: every
    redis-server process (for pinning)."""

    def __init__(self, label: str, url: str, admin: tuple, flush, pids: list, masters: list,
                 slots: "dict | None" = None):
        self.label, self.url, self.admin, self.flush, self.pids, self.masters = \
            label, url, admin, flush, pids, masters
        self.slots = slots or {}  # cluster: master address -> [(first, last)] slot ranges

    def master_of(self, name: str) -> str:
        """The master that holds lock name's keys (its slot's owner)."""
        if not self.slots:
            return self.masters[0]
        from cluster import key_slot
        slot = key_slot(f"watchlock:{{{name}}}")  # the core's key; NAME needs no escaping here
        return next(m for m, rs in self.slots.items() if any(a <= slot <= b for a, b in rs))

    @classmethod
    def server(cls, srv: "RedisServer", label: str = "single node", extra_pids: list = ()) -> "Target":
        return cls(label, srv.url, ("127.0.0.1", srv.port), lambda: srv.command("FLUSHALL"),
                   [srv.proc.pid, *extra_pids], [f"127.0.0.1:{srv.port}"])

    @classmethod
    def cluster(cls, c, label: str) -> "Target":
        masters = c.masters()
        return cls(label, c.url(), (",".join(m.address for m in masters), 0),
                   lambda: [m.call("FLUSHALL") for m in masters], [n.proc.pid for n in c.nodes],
                   [m.address for m in masters], {m.address: c.slots_of(m) for m in masters})


def as_target(x) -> Target:
    return x if isinstance(x, Target) else Target.server(x)


def _cpu_ticks() -> dict:
    """pid -> (command, utime + stime ticks) of every process."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(pid)] = (comm, int(fields[11]) + int(fields[12]))
    return out


def machine_load(seconds: float = 1.0) -> dict:
    """loadavg, the cores, and the processes that used more than 5% of a core
    over `seconds` (not this bench's own)."""
    load: dict = {"nproc": os.cpu_count(), "cpus_allowed": len(os.sched_getaffinity(0))}
    try:
        load["loadavg"] = [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        load["loadavg"] = None
    try:
        a = _cpu_ticks()
        time.sleep(seconds)
        b = _cpu_ticks()
    except OSError:
        return load
    hz = os.sysconf("SC_CLK_TCK")
    busy = []
    for pid, (comm, ticks) in b.items():
        if pid == os.getpid() or pid not in a:
            continue
        pct_core = (ticks - a[pid][1]) / hz / seconds * 100
        if pct_core >= 5:
            busy.append({"pid": pid, "command": comm, "cpu_pct": round(pct_core, 1)})
    load["busy"] = sorted(busy, key=lambda p: -p["cpu_pct"])[:10]
    return load


def fmt_load(load: dict) -> str:
    if not load:
        return "not recorded"
    la = load.get("loadavg")
    text = f"loadavg {' '.join(f'{x:.2f}' for x in la)}" if la else "loadavg ?"
    text += f", {load.get('nproc')} cores"
    busy = load.get("busy") or []
    text += "; busy: " + (", ".join(f"{p['command']} {p['cpu_pct']:.0f}%" for p in busy) if busy else "none")
    return text


# ---- set-up ------------------------------------------------------------------------


def venv_has(module: str) -> bool:
    return os.path.exists(VPY) and run([VPY, "-c", f"import {module}"], timeout=60).returncode == 0


def setup_python(mode: str, status: dict) -> None:
    if not os.path.exists(VPY):
        log("creating the venv")
        rc, out, path = run_logged("setup-venv", [sys.executable, "-m", "venv", VENV], timeout=300)
        if rc != 0:
            status["watchlock-py"] = f"FAILED: the venv could not be created: {one_line(out)} (log: {path})"
            for name in list(PY_PEERS) + ["plots"]:
                status[name] = skipped("the venv could not be created", path)
            return
    pip = [VPY, "-m", "pip", "--disable-pip-version-check", "-q"]
    for name, (req, module) in list(PY_PEERS.items()) + [("hiredis", HIREDIS_REQ), ("plots", PLOT_REQ)]:
        if venv_has(module):
            continue
        if mode == "smoke":
            status[name] = skipped("not installed; smoke mode installs no peers (bench/run --quick does)")
            continue
        log(f"installing {req}")
        rc, out, path = run_logged(f"setup-pip-{req}", pip + ["install", req], timeout=900)
        if rc != 0:
            status[name] = skipped(f"not installed; pip install {req} failed: {one_line(out)}", path)
    # watchlock itself, fresh from this checkout, every run.
    if not os.path.exists(os.path.join(ROOT, "setup.py")) and not os.path.exists(
            os.path.join(ROOT, "pyproject.toml")):
        status["watchlock-py"] = skipped("the Python binding is not in this checkout yet (no setup.py)")
        return
    # Build it with the venv's own setuptools (no per-run download); that needs
    # a setuptools with bdist_wheel built in (>= 70.1), installed once.
    isolation = ["--no-build-isolation"]
    if run([VPY, "-c", "import setuptools.command.bdist_wheel"], timeout=60).returncode != 0:
        if run(pip + ["install", "setuptools>=70.1"], timeout=600).returncode != 0:
            isolation = []  # offline and no usable setuptools: let pip try an isolated build
    log("installing watchlock (Python) from the checkout")
    t0 = time.monotonic()
    rc, out, path = run_logged("setup-pip-watchlock",
                               pip + ["install", *isolation, "--no-deps", "--force-reinstall", ROOT], timeout=1800)
    log(f"  took {time.monotonic() - t0:.0f} s")
    if rc != 0:
        status["watchlock-py"] = f"FAILED: pip install . failed: {one_line(out)} (log: {path})"
        return
    rc, out, path = run_logged("setup-probe-watchlock", [VPY, PY_WORKER, "probe", "watchlock"], timeout=60,
                               cwd=BENCH)
    if rc != 0:
        status["watchlock-py"] = f"FAILED: import watchlock failed: {one_line(out)} (log: {path})"


def setup_c(status: dict) -> None:
    log("building the C bench (cmake, build-bench/)")
    rc, out, path = run_logged("setup-cmake-configure", ["cmake", "-S", os.path.join(BENCH, "c"), "-B", BUILD,
                                                         "-DCMAKE_BUILD_TYPE=RelWithDebInfo"], timeout=600)
    if rc == 0:
        rc, out, path = run_logged("setup-cmake-build", ["cmake", "--build", BUILD, "--target", "wlbench", "-j2"],
                                   timeout=1800)
    if rc != 0:
        status["watchlock-c"] = f"FAILED: build failed: {one_line(out)} (log: {path})"


def newest_mtime(path: str) -> float:
    newest = 0.0
    for d, _, files in os.walk(path):
        if os.sep + "target" in d:
            continue
        for f in files:
            newest = max(newest, os.path.getmtime(os.path.join(d, f)))
    return newest


def setup_java(mode: str, status: dict) -> None:
    if shutil.which("java") is None or shutil.which("mvn") is None:
        status["redisson"] = skipped("java or mvn not found")
        return
    if os.path.exists(JAR) and os.path.getmtime(JAR) >= newest_mtime(JAVA_DIR):
        return
    log("building the Redisson harness (mvn package)")
    cmd = ["mvn", "-q", "-B", "package"]
    if mode == "smoke":
        cmd.insert(1, "-o")  # smoke: only from the local Maven cache
    rc, out, path = run_logged("setup-mvn-redisson", cmd, timeout=1800, cwd=JAVA_DIR)
    if rc == 0 and os.path.exists(JAR):
        return
    if mode == "smoke" and "offline" in out:
        why = ("not built; the local Maven cache lacks the build's plugins or Redisson (smoke mode builds offline, "
               "bench/run --quick fetches them)")
    elif rc == 0:
        why = f"not built; mvn package made no {os.path.relpath(JAR, ROOT)}"
    else:
        why = f"not built; mvn package failed: {one_line(out)}"
    status["redisson"] = skipped(why, path)


def versions(status: dict) -> dict:
    out = {}
    for name, module in [("watchlock-py", "watchlock"), ("redis-py", "redis"),
                         ("python-redis-lock", "redis_lock"), ("pottery", "pottery")]:
        if name in status:
            continue
        r = run([VPY, "-c", f"import importlib.metadata as m; print(m.version({module!r}.replace('_', '-')))"],
                timeout=60)
        if r.returncode != 0 and module == "redis_lock":
            r = run([VPY, "-c", "import importlib.metadata as m; print(m.version('python-redis-lock'))"], timeout=60)
        out[name] = r.stdout.strip() or "?"
    if "redisson" not in status:
        import re
        m = re.search(r"<redisson.version>([^<]+)<", open(os.path.join(JAVA_DIR, "pom.xml")).read())
        out["redisson"] = m.group(1) if m else "?"
    r = run(["redis-server", "--version"], timeout=30)
    out["redis-server"] = r.stdout.strip()
    return out


# ---- workers -----------------------------------------------------------------------


def worker_cmd(lib: str, kind: str, mode: str, *args) -> list:
    if kind == "c":
        return [WLBENCH, mode, *map(str, args)]
    if kind == "py":
        pylib = "watchlock" if lib == "watchlock-py" else lib
        if mode == "ping":
            return [VPY, PY_WORKER, "ping", *map(str, args)]
        return [VPY, PY_WORKER, mode, pylib, *map(str, args)]
    # Small heap is plenty; keeps 8 JVMs on a shared 2-core machine polite.
    return ["java", "-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-jar", JAR, mode, *map(str, args)]


def run_json(cmd: list, timeout: float, trace: "list | None" = None) -> dict:
    """trace: a list that gets the worker's stderr (WLBENCH_TRACE=1 set)."""
    r = run(cmd, timeout=timeout, cwd=BENCH, env=None if trace is None else dict(os.environ, WLBENCH_TRACE="1"))
    if trace is not None:
        trace.append(r.stderr)
    if r.returncode != 0:
        if cmd[0] == "taskset":
            cmd = cmd[3:]
        what = f"{os.path.basename(str(cmd[0]))} {cmd[1]}"
        if cmd[0] == "java":
            what = f"java {cmd[cmd.index('-jar') + 2]}"
        elif cmd[0] == VPY:
            what = f"py_worker {cmd[2]}" + (f" {cmd[3]}" if cmd[2] != "ping" else "")
        path = write_log(f"run-{what}", cmd, r.returncode, r.stdout, r.stderr, BENCH)
        raise RuntimeError(f"{what} exited {r.returncode}: {one_line(r.stderr)} (log: {path})")
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---- scenario (a): uncontended cycle -----------------------------------------------


def scenario_cycle(srv: RedisServer, scale: dict, status: dict) -> dict:
    url = srv.url
    n, max_s = scale["cycle_n"], scale["cycle_max_s"]
    jobs = []  # (key, lib, cmd)
    jobs.append(("floor:c", "watchlock-c", worker_cmd("", "c", "ping", "127.0.0.1", srv.port, n * 2, max_s)))
    jobs.append(("floor:py", "redis-py", worker_cmd("", "py", "ping", url, n * 2, max_s)))
    jobs.append(("floor:java", "redisson", worker_cmd("", "java", "ping", url, n * 2, max_s)))
    for lib, kind in LIBS:
        jobs.append((f"cycle:{lib}", lib, worker_cmd(lib, kind, "cycle", url, n, max_s)))
        if lib == "watchlock-py":  # `with client.lock(name):`, a new Lock per cycle
            jobs.append(("cycle:watchlock-py-with", lib, [VPY, PY_WORKER, "cycle-with", "watchlock", url, n, max_s]))
        if lib == "watchlock-c":  # names of 10 B and 10 KiB
            for size in (SHORT_NAME, LONG_NAME):
                jobs.append((f"cycle:watchlock-c-name{size}", lib, worker_cmd(lib, kind, "cycle", url, n, max_s, size)))
    samples: dict = {}
    errors: dict = {}
    pin_server(srv, True)
    for rep in range(scale["repeats"]):  # interleaved, so drift hits everyone alike
        for key, lib, cmd in jobs:
            if lib is not None and lib in status or key in errors:
                continue
            try:
                res = run_json(pinned(cmd), timeout=max_s * 10 + 120)
                samples.setdefault(key, []).append(res["ops"] / res["seconds"])
            except Exception as e:  # noqa: BLE001 - reported per library
                errors[key] = str(e)
                log(f"{key}: {e}")
    pin_server(srv, False)
    out = {"floors": {}, "cycles": {}, "errors": errors, "pinned_cpu": PIN["cpu"]}
    for key, vals in samples.items():
        ops = statistics.median(vals)
        entry = {"ops_per_s": ops, "us_per_op": 1e6 / ops, "samples_ops_per_s": vals}
        kind, name = key.split(":", 1)
        (out["floors"] if kind == "floor" else out["cycles"])[name] = entry
    return out


# ---- scenario (b): contended hand-off ---------------------------------------------


def pct(sorted_vals: list, q: float) -> float:
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


def run_handoff(srv, lib: str, kind: str, seconds: float, polite: bool) -> dict:
    """srv: a RedisServer or a Target (a cluster)."""
    target = as_target(srv)
    fd, shm = tempfile.mkstemp(prefix="wl-handoff-", suffix=".shm")
    os.write(fd, b"\0" * 64 * 8)
    os.close(fd)
    import mmap
    import struct
    target.flush()
    procs = []
    try:
        with open(shm, "r+b") as f:
            mm = mmap.mmap(f.fileno(), 64 * 8)
        for i in range(HANDOFF_PROCS):
            cmd = worker_cmd(lib, kind, "handoff", target.url, shm, i, HOLD_US, 1 if polite else 0)
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          cwd=BENCH))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            ready = sum(struct.unpack_from("<q", mm, (8 + i) * 8)[0] for i in range(HANDOFF_PROCS))
            if ready == HANDOFF_PROCS:
                break
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("workers did not get ready in 180 s")
        if any(p.poll() is not None for p in procs):
            bad = next(p for p in procs if p.poll() is not None)
            err = bad.stderr.read()
            path = write_log(f"run-handoff-{lib}", bad.args, bad.returncode, bad.stdout.read(), err, BENCH)
            raise RuntimeError(f"a worker exited early ({bad.returncode}): {one_line(err)} (log: {path})")
        start = time.monotonic_ns() + 50_000_000
        struct.pack_into("<q", mm, 3 * 8, start + int(seconds * 1e9))  # stop
        struct.pack_into("<q", mm, 6 * 8, start)  # start
        results = []
        for p in procs:
            out, err = p.communicate(timeout=seconds + 120)
            if p.returncode != 0:
                path = write_log(f"run-handoff-{lib}", p.args, p.returncode, out, err, BENCH)
                raise RuntimeError(f"worker exited {p.returncode}: {one_line(err)} (log: {path})")
            results.append(json.loads(out.strip().splitlines()[-1]))
        violations = struct.unpack_from("<q", mm, 5 * 8)[0]
        mm.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        os.unlink(shm)
    lat = sorted(x for r in results for x in r["handoff_ns"])
    turns = sum(r["turns"] for r in results)
    per_proc = [r["turns"] for r in results]
    return {
        "seconds": seconds,
        "turns": turns,
        "turns_per_s": turns / seconds,
        "handoffs": len(lat),
        "handoffs_per_s": len(lat) / seconds,
        "same_holder_turns": sum(r["same_holder"] for r in results),
        "turns_per_process": per_proc,
        "p50_ms": pct(lat, 0.50) / 1e6,
        "p99_ms": pct(lat, 0.99) / 1e6,
        "max_ms": (lat[-1] / 1e6) if lat else float("nan"),
        "mutual_exclusion_violations": violations,
        "latencies_ms": [x / 1e6 for x in lat],
    }


def scenario_handoff(srv: RedisServer, scale: dict, status: dict) -> dict:
    out: dict = {"errors": {}}
    modes = ((True, "queue"),) if scale.get("queue_only") else ((True, "queue"), (False, "greedy"))
    for _, label in modes:
        out[label] = {}
    for polite, label in modes:
        for lib, kind in LIBS:
            if lib in status:
                continue
            log(f"hand-off ({label}): {lib} ({time.monotonic() - T0:.0f} s)")
            try:
                out[label][lib] = run_handoff(srv, lib, kind, scale["handoff_s"], polite)
            except Exception as e:  # noqa: BLE001
                out["errors"][f"{label}:{lib}"] = str(e)
                log(f"hand-off {label} {lib}: {e}")
    return out


# ---- scenario (c): watchdog scale ---------------------------------------------------


def scenario_watchdog(srv: RedisServer, scale: dict, status: dict) -> dict:
    n, hold = scale["wd_locks"], scale["wd_hold_s"]
    out: dict = {"errors": {}}
    jobs = [("watchlock-c", [WLBENCH, "watchdog", srv.url, "127.0.0.1", srv.port, n, WD_LEASE_MS, hold,
                             "--sample-ms", 250]),
            ("redisson", worker_cmd("redisson", "java", "watchdog", srv.url, n, WD_LEASE_MS, hold))]
    for lib, cmd in jobs:
        if lib in status:
            continue
        log(f"watchdog: {lib} holds {n} locks for {hold:g} s")
        try:
            r = run_json([str(c) for c in cmd], timeout=hold * 3 + 300)
        except Exception as e:  # noqa: BLE001
            out["errors"][lib] = str(e)
            log(f"watchdog {lib}: {e}")
            continue
        rounds_expected = hold / (WD_LEASE_MS / 3000.0)
        r["lost"] = r.get("lost_server", 0) + r.get("lost_local", 0) + r.get("lost_callbacks", 0)
        r["rss_per_lock_b"] = (r["rss_max"] - r["rss_before"]) / n
        if "heap_held" in r:
            r["heap_per_lock_b"] = (r["heap_held"] - r["heap_before"]) / n
        r["renewal_cpu_us"] = r.get("watchdog_cpu_us", r["process_cpu_us"])
        r["renewal_cpu_pct"] = r["renewal_cpu_us"] / 1e6 / r["hold_s"] * 100
        r["script_calls_per_round"] = r["server_script_calls"] / rounds_expected
        if "renew_rounds" in r and r["renew_rounds"] > 0:
            r["renewals_per_roundtrip"] = r["renewals"] / max(1, r["renew_roundtrips"])
            r["roundtrips_per_round"] = r["renew_roundtrips"] / r["renew_rounds"]
        if lib == "watchlock-c":
            derive_watchdog(r)
        out[lib] = r
    for lib, why in [("redis-py", "no watchdog: its Lock never renews by itself"),
                     ("pottery", "no watchdog: Redlock only extends on request"),
                     ("python-redis-lock", "not run: auto_renewal starts one thread per lock"),
                     ("watchlock-py", "same C watchdog as watchlock-c")]:
        out.setdefault("n/a", {})[lib] = why
    return out


def derive_watchdog(r: dict) -> dict:
    """Adds what the targets read from a `wlbench watchdog` result: renewals
    per lock per renew interval (the core's default, lease/3: 1.0 = each lock
    renewed exactly at its interval), the smallest remaining lease as a
    fraction of the lease, lost locks and memory per lock."""
    n, lease = r["locks"], r["lease_ms"]
    intervals = r["hold_s"] * 1000.0 / (lease / 3.0)
    # lock keys no server had at the end of the hold (wlbench SCANs every server it was given)
    r["keys_missing"] = max(0, n - r["lock_keys"]) if "lock_keys" in r else 0
    r["lost"] = (r.get("lost_server", 0) + r.get("lost_local", 0) + r.get("lost_callbacks", 0)
                 + r["keys_missing"])
    r["rss_per_lock_b"] = (r["rss_max"] - r["rss_before"]) / n
    r["renewals_per_lock_interval"] = r["renewals"] / n / intervals if intervals >= 1 else None
    r["min_remaining_frac"] = r["min_remaining_ms"] / lease if r.get("min_remaining_ms", -1) >= 0 else None
    r["renewal_cpu_pct"] = r["watchdog_cpu_us"] / 1e6 / max(r["hold_s"], 1e-9) * 100
    return r


def wlbench_watchdog(srv, n: int, lease_ms: int, hold_s: float, probe: int = 0,
                     pin: bool = False) -> dict:
    """srv: a RedisServer or a Target (a cluster: server stats and key counts from every master)."""
    target = as_target(srv)
    cmd = [WLBENCH, "watchdog", target.url, *target.admin, n, lease_ms, hold_s, "--sample-ms", 250]
    if probe:
        cmd += ["--probe", probe]
    target.flush()
    if pin:
        pin_pids(target.pids, True)
    try:
        # acquire and release are one round trip per lock: allow 1 ms each, plus the hold
        trace: list = []
        r = run_json(pinned(cmd) if pin else [str(c) for c in cmd], timeout=hold_s * 2 + n * 0.002 + 600,
                     trace=trace)
    finally:
        if pin:
            pin_pids(target.pids, False)
    r["pinned"] = pin and PIN["cpu"] is not None
    # issue 32: the transient, renewals per lock per interval in 5 s windows from the first
    r["windows_renewals_per_interval"] = issue32.windows(trace[0] if trace else "", n, lease_ms)
    return derive_watchdog(r)


def scenario_many(srv: RedisServer, scale: dict, status: dict) -> dict:
    """(c) many locks with 3 s leases (not pinned), (d) acquire cost while a
    small and a large number of locks with 30 s leases are held (pinned;
    the large run is also the long hold: 1,000,000 locks for 5 minutes in
    full mode), (e) threads sharing one client (not pinned)."""
    out: dict = {"errors": {}}
    if "watchlock-c" in status:
        return out
    runs = [("big", scale["big_locks"], WD_LEASE_MS, scale["big_hold_s"], 0, False),
            ("held_small", scale["held_small"], HELD_LEASE_MS, scale["held_small_hold_s"], scale["probe"], True),
            ("held_large", scale["held_large"], HELD_LEASE_MS, scale["held_hold_s"], scale["probe"], True)]
    for key, n, lease, hold, probe, pin in runs:
        log(f"scale {key}: {n} locks, lease {lease} ms, held {hold:g} s"
            f"{', then ' + str(probe) + ' probe cycles' if probe else ''}{', pinned' if pin else ''}"
            f" ({time.monotonic() - T0:.0f} s)")
        try:
            out[key] = wlbench_watchdog(srv, n, lease, hold, probe, pin)
        except Exception as e:  # noqa: BLE001
            out["errors"][key] = str(e)
            log(f"scale {key}: {e}")
    srv.command("FLUSHALL")
    samples: dict = {}
    prof: dict = {}
    for _ in range(scale["repeats"]):  # interleaved
        for t in (1, THREADS):
            try:
                s0 = run_time_ns([srv.proc.pid])[0]
                r = run_json([str(c) for c in (WLBENCH, "threads", srv.url, t, 10 ** 9, scale["threads_s"])],
                             timeout=scale["threads_s"] * 5 + 120)
                s1 = run_time_ns([srv.proc.pid])[0]
                samples.setdefault(t, []).append(r["ops"] / r["seconds"])
                # the profile of what bounds (e): CPU per cycle of the client (its
                # measured window) and of the server (the whole worker run, its
                # 0.2 s warm-up included), and how busy the server's core was
                prof.setdefault(t, []).append({
                    "client_cpu_us": r.get("cpu_us", 0) / max(r["ops"], 1),
                    "server_cpu_us": (s1 - s0) / 1000 / max(r["ops"], 1),
                    "server_busy": (s1 - s0) / 1e9 / (r["seconds"] + 0.2)})
            except Exception as e:  # noqa: BLE001
                out["errors"][f"threads{t}"] = str(e)
                log(f"threads {t}: {e}")
    out["threads"] = {str(t): {"ops_per_s": statistics.median(v), "samples_ops_per_s": v,
                               **{k: statistics.median(p[k] for p in prof[t]) for k in prof[t][0]}}
                      for t, v in samples.items()}
    return out


# ---- scenario (g): capacity, the most holds one server keeps (issue 19) -----------


def scenario_capacity(srv: RedisServer, scale: dict, status: dict) -> dict:
    """(g) The largest number of holds one client keeps on one redis-server
    without a loss on this machine: `wlbench watchdog` at growing N (the
    issue's figures: 3 s lease, renewed every second), each step held
    cap_hold_s, stopping at the first step that loses a hold. Client and
    server not pinned (the watchdog and the server each get a core when the
    machine has two). A loss in a step is the measurement, not a failure;
    an error (wlbench failing, a timeout) is."""
    out: dict = {"errors": {}, "steps": []}
    if "watchlock-c" in status:
        return out
    hold = scale["cap_hold_s"]

    def step(n: int) -> bool:
        """Runs one step; True when it kept every hold."""
        log(f"capacity: {n} locks, lease {WD_LEASE_MS} ms, held {hold:g} s ({time.monotonic() - T0:.0f} s)")
        try:
            r = wlbench_watchdog(srv, n, WD_LEASE_MS, hold)
        except Exception as e:  # noqa: BLE001
            if "watchlock_lock_acquire" in str(e):
                # the server, busy renewing what was already held, answered an
                # acquire after its lease: this many holds cannot even be taken
                out["steps"].append({"locks": n, "lease_ms": WD_LEASE_MS, "hold_s": hold, "lost": None,
                                     "acquire_failed": short(str(e), 200)})
                log(f"  could not acquire them all: {short(str(e), 160)}")
            else:
                out["errors"][f"step {n}"] = str(e)
                log(f"capacity {n}: {e}")
            return False
        out["steps"].append({k: r.get(k) for k in ("locks", "lease_ms", "hold_s", "lost", "renewals",
                                                     "min_remaining_frac", "renewals_per_lock_interval",
                                                     "renewal_cpu_pct", "acquire_s",
                                                     "windows_renewals_per_interval")})
        log(f"  lost {r['lost']}, lowest remaining lease "
            f"{(r['min_remaining_frac'] or 0) * 100:.0f}%, {r['renewal_cpu_pct']:.1f}% watchdog CPU")
        return not r["lost"]

    good = 0
    for n in scale["cap_steps"]:
        if not step(n):
            # one more step half-way between the last good one and this one
            mid = (good + n) // 2 // 10000 * 10000
            if good and not out["errors"] and mid > good and step(mid):
                good = mid
            break
        good = n
    kept = [st["locks"] for st in out["steps"] if st["lost"] == 0]
    out["largest_without_loss"] = max(kept) if kept else 0
    failed = [st for st in out["steps"] if st["lost"] != 0]
    out["first_loss"] = min((st["locks"] for st in failed), default=None)
    return out


def capacity_table(res: dict) -> list:
    cap = res.get("capacity") or {}
    lines = ["(g) Capacity: the most holds one client keeps on one server without a loss "
             f"({WD_LEASE_MS // 1000} s lease, renewed every {WD_LEASE_MS // 3000} s; stepped, not pinned)"]
    if cap.get("not_run") or not cap.get("steps"):
        why = "not run (--only)" if cap.get("not_run") else short(str(cap.get("errors") or "not measured"), 120)
        return lines + ["  " + why, ""]
    for st in cap["steps"]:
        frac = st.get("min_remaining_frac")
        if st.get("acquire_failed"):
            lines.append(f"  {st['locks']:>9,} locks: could not all be acquired ({st['acquire_failed']})")
            continue
        lines.append(f"  {st['locks']:>9,} locks, {st['hold_s']:.0f} s: lost {st['lost']:>7,}, lowest remaining "
                     f"lease {(f'{frac * 100:.0f}%' if frac is not None else 'n/a'):>4}, "
                     f"{fmt(st.get('renewals_per_lock_interval'), '.2f')} renewals per lock per interval, "
                     f"{st.get('renewal_cpu_pct') or 0:.1f}% watchdog CPU; per 5 s window: "
                     + (" ".join(fmt(x, ".2f") for x in st.get("windows_renewals_per_interval") or [])
                        or "n/a (held < 5 s)"))
    first = cap.get("first_loss")
    lines.append(f"  largest without a loss: {cap['largest_without_loss']:,}"
                 + (f" (the smallest step that was not kept: {first:,})" if first
                    else " (no step lost a hold: the top step is a lower bound)"))
    return lines + [""]


# ---- scenario (f): Redis Cluster (issue 12) ---------------------------------------
#
# A 3-master, 3-replica cluster from tests/harness/cluster.py, next to
# standalone redis-servers started for this scenario, compared within it:
#
# - cycle: wlbench cycle --names with one name, and with one name per
#   master taken in turn (consecutive cycles go to different masters), the
#   same names on every topology; interleaved blocks, medians, client and
#   every redis-server process (replicas included) pinned to one core like
#   (a). Topologies: one server; one server + 1 replica; 3 masters without
#   replicas; 3 masters + 3 replicas. A replica costs a wake-up on that one
#   core per replicated script, so each cluster is compared with the single
#   node that does the same replication work (and 3+3 with the bare server
#   in the table). The verdict is on one name: with a name per master three
#   servers take turns on the one core, which a deployment does not do.
# - watchdog: one cluster client holds cluster_locks locks (3 s lease) over
#   the 3 masters; server stats and the lock keys at the end from every master.
# - hand-off: (b)'s queue method, single node then cluster, per library.

CLUSTER_TOPOLOGIES = [  # key, label
    ("single", "1 server"),
    ("single_replica", "1 server + 1 replica"),
    ("cluster_3", "cluster, 3 masters"),
    ("cluster_3_3", "cluster, 3 masters + 3 replicas"),
]
# cluster -> the single node that does the same replication work
CLUSTER_SAME = {"cluster_3": "single", "cluster_3_3": "single_replica", "single_replica": "single"}


def spread_names(target: Target, per_master: int = 1) -> tuple:
    """Names bench:cluster:I whose slots (of the lock key watchlock:{NAME})
    fall per_master on each master of target, in turn (m1, m2, m3, m1,
    ...). Returns (names, {master: count})."""
    by_master: dict = {m: [] for m in target.masters}
    i = 0
    while any(len(v) < per_master for v in by_master.values()) and i < 100000:
        name = f"bench:cluster:{i}"
        owner = by_master[target.master_of(name)]
        if len(owner) < per_master:
            owner.append(name)
        i += 1
    names = [by_master[m][k] for k in range(per_master) for m in target.masters if k < len(by_master[m])]
    return names, {m: len(v) for m, v in by_master.items()}


def scenario_cluster(srv: RedisServer, scale: dict, status: dict) -> dict:
    """(f): cycle, watchdog and hand-off through redis-cluster:// (see above)."""
    import contextlib
    out: dict = {"errors": {}}
    if "watchlock-c" in status:
        return out
    smoke = scale.get("cluster_smoke", False)
    try:
        from cluster import RedisCluster
    except Exception as e:  # noqa: BLE001
        out["skipped"] = f"the cluster harness does not load: {one_line(str(e))}"
        log(f"cluster: skipped: {out['skipped']}")
        return out
    with contextlib.ExitStack() as stack:
        targets: dict = {}
        t0 = time.monotonic()
        try:
            # Set-up problems (redis-cli missing, a node that does not start) are
            # not watchlock's: the scenario is skipped with the reason.
            c33 = stack.enter_context(RedisCluster(masters=3, replicas=1))
            targets["cluster_3_3"] = Target.cluster(c33, "cluster, 3 masters + 3 replicas")
            single = stack.enter_context(RedisServer())
            targets["single"] = Target.server(single, "1 server")
            if not smoke:
                c3 = RedisCluster(masters=3, replicas=0).start()
                stack.callback(c3.close)
                targets["cluster_3"] = Target.cluster(c3, "cluster, 3 masters")
                prim = stack.enter_context(RedisServer(extra_args=["--repl-diskless-sync-delay", "0"]))
                repl = stack.enter_context(RedisServer(extra_args=["--replicaof", "127.0.0.1", str(prim.port)]))
                deadline = time.monotonic() + 30
                while b"master_link_status:up" not in _as_bytes(repl.command("INFO", "replication")):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the single node's replica did not link up in 30 s")
                    time.sleep(0.05)
                targets["single_replica"] = Target.server(prim, "1 server + 1 replica", [repl.proc.pid])
        except Exception as e:  # noqa: BLE001
            out["skipped"] = f"the cluster could not be set up: {one_line(str(e))}"
            log(f"cluster: skipped: {out['skipped']}")
            return out
        out["setup_s"] = time.monotonic() - t0
        out["masters"] = targets["cluster_3_3"].masters

        # -- cycle: every topology with one name and with one name per master,
        # interleaved, pinned, with the client's and the servers' CPU per cycle
        names, per_master = spread_names(targets["cluster_3_3"])
        out["cycle_names"], out["cycle_names_per_master"] = names, per_master
        name_sets = {"one": names[:1], "spread": names}
        n, max_s = scale["cycle_n"], scale["cycle_max_s"]
        topo = [k for k, _ in CLUSTER_TOPOLOGIES if k in targets]
        pids = [pid for k in topo for pid in targets[k].pids]
        samples: dict = {}
        log(f"cluster: cycle on {', '.join(targets[k].label for k in topo)} ({time.monotonic() - T0:.0f} s)")
        pin_pids(pids, True)
        try:
            for _ in range(scale["repeats"]):
                for key in topo:
                    for ns, nm in name_sets.items():
                        run_key = f"{key}:{ns}"
                        if f"cycle:{run_key}" in out["errors"]:
                            continue
                        cmd = [WLBENCH, "cycle", targets[key].url, n, max_s, "--names", ",".join(nm)]
                        try:
                            s0, w0 = run_time_ns(targets[key].pids)
                            r = run_json(pinned(cmd), timeout=max_s * 10 + 120)
                            s1, w1 = run_time_ns(targets[key].pids)
                            r["server_cpu_us"], r["server_runs"] = (s1 - s0) / 1e3, w1 - w0
                            samples.setdefault(run_key, []).append(r)
                        except Exception as e:  # noqa: BLE001
                            out["errors"][f"cycle:{run_key}"] = str(e)
                            log(f"cluster cycle {run_key}: {e}")
        finally:
            pin_pids(pids, False)
        out["cycle"] = {}
        for run_key, rs in samples.items():
            # the median run by speed, and the median CPU figures per cycle
            ops = statistics.median(r["ops"] / r["seconds"] for r in rs)
            out["cycle"][run_key] = {
                "ops_per_s": ops, "us_per_op": 1e6 / ops,
                "samples_ops_per_s": [r["ops"] / r["seconds"] for r in rs],
                "client_cpu_us": statistics.median(r["cpu_us"] / r["ops"] for r in rs),
                "server_cpu_us": statistics.median(r["server_cpu_us"] / r["ops"] for r in rs),
                "client_switches": statistics.median((r["voluntary_switches"] + r["involuntary_switches"]) / r["ops"]
                                                     for r in rs),
                # times a server thread was put on the core, per cycle: its wake-ups and preemptions
                "server_runs": statistics.median(r["server_runs"] / r["ops"] for r in rs),
                "label": targets[run_key.split(":")[0]].label, "names": name_sets[run_key.split(":")[1]]}
        out["pinned_cpu"] = PIN["cpu"]
        # the comparison servers are not needed any more: fewer idle processes below
        for key in ("cluster_3", "single_replica"):
            targets.pop(key, None)
        if not smoke:
            c3.close()
            for s_ in (repl, prim):
                s_.close()

        # -- watchdog: many locks over the 3 masters on one client (not pinned)
        nl, hold = scale["cluster_locks"], scale["cluster_hold_s"]
        log(f"cluster: watchdog, {nl} locks, lease {WD_LEASE_MS} ms, held {hold:g} s "
            f"({time.monotonic() - T0:.0f} s)")
        try:
            out["watchdog"] = wlbench_watchdog(targets["cluster_3_3"], nl, WD_LEASE_MS, hold)
        except Exception as e:  # noqa: BLE001
            out["errors"]["watchdog"] = str(e)
            log(f"cluster watchdog: {e}")

        # -- hand-off: queue mode, single node then cluster, per library
        out["handoff"] = {}
        out["handoff_master"] = targets["cluster_3_3"].master_of("bench:handoff")
        libs = [lib for lib, _ in LIBS if lib.startswith("watchlock") and lib not in status]
        if smoke:
            libs = libs[:1]
        kinds = dict(LIBS)
        seconds = scale["handoff_s"]
        for lib in libs:
            for key in ("single", "cluster_3_3"):
                log(f"cluster: hand-off (queue) {lib} on {targets[key].label} ({time.monotonic() - T0:.0f} s)")
                try:
                    r = run_handoff(targets[key], lib, kinds[lib], seconds, True)
                    out["handoff"].setdefault(lib, {})[key] = r
                except Exception as e:  # noqa: BLE001
                    out["errors"][f"handoff:{lib}:{key}"] = str(e)
                    log(f"cluster hand-off {lib} {key}: {e}")
    return out


def run_time_ns(pids: list) -> tuple:
    """(CPU time in ns, times put on a core) of the processes (all their
    threads) so far, from /proc/PID/task/TID/schedstat (run time, wait
    time, timeslices); a process that ended counts 0."""
    total = runs = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    fields = f.read().split()
                total, runs = total + int(fields[0]), runs + int(fields[2])
            except (OSError, ValueError, IndexError):
                pass
    return total, runs


def _as_bytes(x) -> bytes:
    return x if isinstance(x, bytes) else str(x).encode()


# ---- targets, table ----------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


#: "a few %" above one renewal per lock per interval
RENEWAL_SLACK = 1.05


def evaluate13(res: dict) -> list:
    """Issue 13's targets: [(target, measured, verdict)], verdict 'met',
    'NOT met' or 'n/a' (not measured in this mode, or a part failed)."""
    t = []
    cyc, flo = res["cycle"]["cycles"], res["cycle"]["floors"]
    sc = res.get("many", {})
    pinned = "" if res["cycle"].get("pinned_cpu") is None else " (pinned)"

    name = "C cycle <= 1.25x two PING round trips" + pinned
    if "watchlock-c" in cyc and "c" in flo:
        ratio = cyc["watchlock-c"]["us_per_op"] / (2 * flo["c"]["us_per_op"])
        t.append((name, f"{cyc['watchlock-c']['us_per_op']:.1f} us vs 2x{flo['c']['us_per_op']:.1f} us = {ratio:.2f}x",
                  verdict(ratio <= 1.25)))
    else:
        t.append((name, "not measured", "n/a"))

    name = "Python `with client.lock()` <= 1.10x explicit cycle" + pinned
    w, e = cyc.get("watchlock-py-with"), cyc.get("watchlock-py")
    if w and e:
        ratio = w["us_per_op"] / e["us_per_op"]
        t.append((name, f"{w['us_per_op']:.1f} us vs {e['us_per_op']:.1f} us = {ratio:.2f}x", verdict(ratio <= 1.10)))
    else:
        t.append((name, "not measured", "n/a"))
    parser = " (hiredis parser)" if res.get("redis_py_hiredis") else ""
    for peer in ("redis-py", "python-redis-lock"):
        for lib, how in (("watchlock-py", "explicit"), ("watchlock-py-with", "with")):
            name = f"Python {how} cycles/s >= 2.5x {peer}{parser if peer == 'redis-py' else ''}"
            if lib in cyc and peer in cyc:
                ratio = cyc[lib]["ops_per_s"] / cyc[peer]["ops_per_s"]
                t.append((name, f"{cyc[lib]['ops_per_s']:.0f}/s vs {cyc[peer]['ops_per_s']:.0f}/s = {ratio:.2f}x",
                          verdict(ratio >= 2.5)))
            else:
                t.append((name, "not measured", "n/a"))

    runs = [("wd", res.get("watchdog", {}).get("watchlock-c")), ("big", sc.get("big")),
            ("held_large", sc.get("held_large"))]
    for key, r in runs:
        if r is None:
            continue
        what = f"{r['locks']} locks, lease {r['lease_ms'] / 1000:g} s"
        rpi = r.get("renewals_per_lock_interval")
        if rpi is not None:
            t.append((f"watchdog renewals per lock per interval <= {RENEWAL_SLACK:.2f} ({what})",
                      f"{rpi:.3f} ({r['renewals']} renewals in {r['hold_s']:.0f} s)", verdict(rpi <= RENEWAL_SLACK)))
        frac = r.get("min_remaining_frac")
        if frac is not None:
            t.append((f"watchdog remaining lease >= 50% ({what})",
                      f"min {r['min_remaining_ms']} ms = {frac * 100:.0f}%", verdict(frac >= 0.5)))

    large = sc.get("held_large")
    name = "1,000,000 locks, 30 s lease, 5 min: 0 lost, <= 1 KiB each"
    if large and large["locks"] >= 1000000 and large["hold_s"] >= 299:
        t.append((name, f"{large['lost']} lost, {large['rss_per_lock_b']:.0f} B/lock",
                  verdict(large["lost"] == 0 and large["rss_per_lock_b"] <= 1024)))
    elif large:
        t.append((name, f"full mode only; here {large['locks']} locks for {large['hold_s']:.0f} s: "
                        f"{large['lost']} lost, {large['rss_per_lock_b']:.0f} B/lock", "n/a"))
    else:
        t.append((name, "not measured", "n/a"))
    big = sc.get("big")
    name = "300,000 locks, 3 s lease: 0 lost"
    if big:
        scaled = "" if big["locks"] >= 300000 else f" (only {big['locks']} locks in this mode)"
        t.append((name, f"{big['lost']} lost in {big['hold_s']:.0f} s{scaled}",
                  verdict(big["lost"] == 0) if not scaled else "n/a"))
    else:
        t.append((name, "not measured", "n/a"))

    small = sc.get("held_small")
    name = "acquire cost with 1M locks held <= 1.1x with 10k held (pinned)"
    if small and large and small.get("probe_acquire_us") and large.get("probe_acquire_us"):
        ratio = large["probe_acquire_us"] / small["probe_acquire_us"]
        text = (f"{large['probe_acquire_us']:.1f} us at {large['locks']} vs {small['probe_acquire_us']:.1f} us "
                f"at {small['locks']} = {ratio:.2f}x")
        t.append((name, text, verdict(ratio <= 1.1) if large["locks"] >= 1000000 else "n/a"))
    else:
        t.append((name, "not measured", "n/a"))

    name = "10 KiB name <= 1.3x 10 B name per C cycle" + pinned
    a, b = cyc.get(f"watchlock-c-name{LONG_NAME}"), cyc.get(f"watchlock-c-name{SHORT_NAME}")
    if a and b:
        ratio = a["us_per_op"] / b["us_per_op"]
        t.append((name, f"{a['us_per_op']:.1f} us vs {b['us_per_op']:.1f} us = {ratio:.2f}x", verdict(ratio <= 1.3)))
    else:
        t.append((name, "not measured", "n/a"))

    th = sc.get("threads", {})
    name = f"{THREADS} threads >= 6x one thread's cycles/s (C, one client, not pinned)"
    if "1" in th and str(THREADS) in th:
        ratio = th[str(THREADS)]["ops_per_s"] / th["1"]["ops_per_s"]
        t.append((name, f"{th[str(THREADS)]['ops_per_s']:.0f}/s vs {th['1']['ops_per_s']:.0f}/s = {ratio:.2f}x",
                  verdict(ratio >= 6)))
    else:
        t.append((name, "not measured", "n/a"))
    return t


def evaluate12(res: dict) -> list:
    """Issue 12's targets (Cluster): [(target, measured, verdict)]; 'info'
    where the issue names no figure, 'n/a' when not measured (a smaller
    mode, or the cluster could not be set up)."""
    t = []
    cl = res.get("cluster") or {}
    if cl.get("not_run"):
        return [("Cluster scenario (f)", "not run (--only)", "n/a")]
    if cl.get("skipped"):
        return [("Cluster scenario (f)", "skipped: no cluster (reason in (f))", "n/a")]
    cyc = cl.get("cycle", {})
    what = {"cluster_3": "3 masters / 1 server", "cluster_3_3": "3+3 / 1 server + replica"}
    # The verdict is on one name (see bench/README.md: names on several
    # masters sharing one core measure the core's process switching).
    for ns, label, judged in (("one", "1 name", True), ("spread", "name per master", False)):
        for a in ("cluster_3", "cluster_3_3"):
            b = CLUSTER_SAME[a]
            ra, rb = cyc.get(f"{a}:{ns}"), cyc.get(f"{b}:{ns}")
            name = f"cluster cycle <= {CLUSTER_CYCLE_RATIO}x single, {label}: {what[a]}"
            if ra and rb:
                ratio = ra["us_per_op"] / rb["us_per_op"]
                t.append((name, f"{ra['us_per_op']:.1f} us vs {rb['us_per_op']:.1f} us = {ratio:.2f}x",
                          verdict(ratio <= CLUSTER_CYCLE_RATIO) if judged else "info"))
            else:
                t.append((name, "not measured" + (" in smoke mode" if res.get("mode") == "smoke" else ""), "n/a"))
    wd = cl.get("watchdog")
    name = f"{CLUSTER_LOCKS:,} locks over 3 masters on one watchdog: 0 lost"
    if wd:
        shares = "/".join(f"{s_['lock_keys'] / max(1, wd['locks']) * 100:.0f}" for s_ in wd.get("servers", []))
        text = f"{wd['lost']} lost of {wd['locks']}, keys {shares}%"
        t.append((name, text if wd["locks"] >= CLUSTER_LOCKS else f"full mode only: {text}",
                  verdict(wd["lost"] == 0) if wd["locks"] >= CLUSTER_LOCKS else "n/a"))
        what = f"{wd['locks']} locks, {wd['lease_ms'] / 1000:g} s"
        rpi = wd.get("renewals_per_lock_interval")
        if rpi is not None:
            t.append((f"cluster watchdog renewals/lock/interval <= {RENEWAL_SLACK:.2f} ({what})",
                      f"{rpi:.3f} ({wd['renewals']} renewals in {wd['hold_s']:.0f} s)",
                      verdict(rpi <= RENEWAL_SLACK)))
        frac = wd.get("min_remaining_frac")
        if frac is not None:
            t.append((f"cluster watchdog remaining lease >= 50% ({what})",
                      f"min {wd['min_remaining_ms']} ms = {frac * 100:.0f}%", verdict(frac >= 0.5)))
    else:
        t.append((name, "not measured", "n/a"))
    for lib, r in (cl.get("handoff") or {}).items():
        c, s1 = r.get("cluster_3_3"), r.get("single")
        name = f"cluster hand-off (queue) {lib} p50 / p99 (issue 12: no figure)"
        if c and s1:
            t.append((name, f"{c['p50_ms']:.3f} / {c['p99_ms']:.3f} ms (1 server: {s1['p50_ms']:.3f} / "
                            f"{s1['p99_ms']:.3f})", "info"))
        elif c:
            t.append((name, f"{c['p50_ms']:.3f} / {c['p99_ms']:.3f} ms", "info"))
    return t


def evaluate(res: dict) -> list:
    """Earlier issues' targets: [(target, measured, verdict)]."""
    t = []
    cyc = res["cycle"]["cycles"]
    for peer in ("pottery",):
        name = f"Python cycles/s >= 2x {peer}"
        if "watchlock-py" in cyc and peer in cyc:
            ratio = cyc["watchlock-py"]["ops_per_s"] / cyc[peer]["ops_per_s"]
            t.append((name, f"{ratio:.2f}x", "met" if ratio >= 2 else "NOT met"))
        else:
            t.append((name, "not measured", "n/a"))
    for mode in ("queue", "greedy"):
        if mode not in res["handoff"]:
            continue  # not run in this mode (smoke)
        ho = res["handoff"][mode]
        base = ho.get("redis-py")
        for lib in ("watchlock-c", "watchlock-py"):
            r = ho.get(lib)
            if r is None:
                for what in ("p50 <= 0.3 ms", "p99 <= 2 ms", ">= 20x redis-py hand-offs/s"):
                    t.append((f"hand-off ({mode}) {lib} {what}", "not measured", "n/a"))
                continue
            t.append((f"hand-off ({mode}) {lib} p50 <= 0.3 ms", f"{r['p50_ms']:.3f} ms",
                      "met" if r["p50_ms"] <= 0.3 else "NOT met"))
            t.append((f"hand-off ({mode}) {lib} p99 <= 2 ms", f"{r['p99_ms']:.3f} ms",
                      "met" if r["p99_ms"] <= 2 else "NOT met"))
            if base is not None and base["handoffs_per_s"] > 0:
                ratio = r["handoffs_per_s"] / base["handoffs_per_s"]
                t.append((f"hand-off ({mode}) {lib} >= 20x redis-py hand-offs/s",
                          f"{r['handoffs_per_s']:.0f}/s vs {base['handoffs_per_s']:.1f}/s = {ratio:.1f}x",
                          "met" if ratio >= 20 else "NOT met"))
            elif base is not None:
                t.append((f"hand-off ({mode}) {lib} >= 20x redis-py hand-offs/s",
                          f"{r['handoffs_per_s']:.0f}/s vs 0/s", "met"))
            else:
                t.append((f"hand-off ({mode}) {lib} >= 20x redis-py hand-offs/s", "redis-py not measured", "n/a"))
    wd = res["watchdog"].get("watchlock-c")
    if wd:
        t.append(("watchdog: zero locks lost", f"{wd['lost']} lost of {wd['locks']}",
                  "met" if wd["lost"] == 0 else "NOT met"))
        t.append(("watchdog: RSS per held lock < 1 KiB", f"{wd['rss_per_lock_b']:.0f} B",
                  "met" if wd["rss_per_lock_b"] < 1024 else "NOT met"))
        t.append(("watchdog: batching visible (renewals per round trip > 1)",
                  f"{wd.get('renewals_per_roundtrip', 0):.1f} renewals/round trip",
                  "met" if wd.get("renewals_per_roundtrip", 0) > 1 else "NOT met"))
    else:
        t.append(("watchdog", "not measured", "n/a"))
    return t


def fmt(v, spec: str) -> str:
    width = "".join(ch for ch in spec.split(".")[0] if ch.isdigit())
    return format("n/a", ">" + width) if v is None else format(v, spec)


def cluster_table(res: dict) -> list:
    """Section (f) of the table: lines, ending with an empty one."""
    cl = res.get("cluster")
    lines = ["(f) Redis Cluster: 3 masters + 3 replicas on loopback, redis-cluster:// URL"]
    if not cl or cl.get("not_run"):
        return lines + ["  not run" + (" (--only)" if cl else ""), ""]
    if cl.get("skipped"):
        return lines + [f"  {short('skipped: ' + cl['skipped'], 150)}", ""]
    cyc = cl.get("cycle", {})
    names = cl.get("cycle_names", [])
    pinned = "pinned to core %s" % cl["pinned_cpu"] if cl.get("pinned_cpu") is not None else "not pinned"
    lines.append(f"Cycle, client and every redis-server (replicas too) {pinned}. Names: one ({', '.join(names[:1])}), or "
                 f"one per master taken in turn ({', '.join(names)}). CPU: us per cycle, the client's (all "
                 f"threads) and all the topology's redis-servers'")
    lines.append(f"| {'topology':<32} | {'names':<6} | {'cycles/s':>8} | {'us/cycle':>8} | {'client CPU':>10} | "
                 f"{'server CPU':>10} | {'vs 1 server':>11} | {'vs same replication':>19} |")
    lines.append(f"|{'-' * 34}|{'-' * 8}|{'-' * 10}|{'-' * 10}|{'-' * 12}|{'-' * 12}|{'-' * 13}|{'-' * 21}|")
    for ns in ("one", "spread"):
        for key, label in CLUSTER_TOPOLOGIES:
            r = cyc.get(f"{key}:{ns}")
            nlabel = "1" if ns == "one" else str(len(names))
            if r is None:
                why = cl["errors"].get(f"cycle:{key}:{ns}") or (
                    "not run in smoke mode" if res.get("mode") == "smoke" else "n/a")
                lines.append(f"| {label:<32} | {nlabel:<6} | {'n/a':>8} | {'n/a':>8} | {'n/a':>10} | {'n/a':>10} | "
                             f"{'n/a':>11} | {'n/a':>19} |  {short(why)}")
                continue
            base = cyc.get(f"single:{ns}")
            vs1 = f"{r['us_per_op'] / base['us_per_op']:.2f}x" if base else "n/a"
            b2 = cyc.get(f"{CLUSTER_SAME.get(key, '')}:{ns}")
            vs2 = f"{r['us_per_op'] / b2['us_per_op']:.2f}x" if b2 and key.startswith("cluster") else "-"
            lines.append(f"| {label:<32} | {nlabel:<6} | {r['ops_per_s']:>8.0f} | {r['us_per_op']:>8.1f} | "
                         f"{r['client_cpu_us']:>10.1f} | {r['server_cpu_us']:>10.1f} | {vs1:>11} | {vs2:>19} |")
    wd = cl.get("watchdog")
    lines.append("")
    if wd:
        lines.append(f"Watchdog (not pinned): one cluster client holds {wd['locks']} locks, lease "
                     f"{wd['lease_ms']} ms, {wd['hold_s']:.0f} s")
        rpi = wd.get("renewals_per_lock_interval")
        frac = wd.get("min_remaining_frac")
        lines.append(f"  lost {wd['lost']}; renewals/lock/interval {fmt(rpi, '.3f')}; min remaining "
                     f"{f'{frac * 100:.0f}%' if frac is not None else 'n/a'}; RSS/lock "
                     f"{wd['rss_per_lock_b']:.0f} B peak ({(wd['rss_held'] - wd['rss_before']) / wd['locks']:.0f} B "
                     f"after acquiring); renew CPU {wd['renewal_cpu_pct']:.2f}%; round trips "
                     f"{wd['renew_roundtrips']} in {wd['renew_rounds']} rounds; acquire {wd['acquire_s']:.1f} s, "
                     f"release {wd['release_s']:.1f} s")
        rounds = wd["hold_s"] / (wd["lease_ms"] / 3000.0)
        for s_ in wd.get("servers", []):
            share = s_["lock_keys"] / max(1, wd["locks"]) * 100
            lines.append(f"  master {s_['addr']}: {s_['lock_keys']:>7} lock keys ({share:4.1f}%), "
                         f"{s_['script_calls'] / rounds:8.1f} script calls per lease/3")
    else:
        lines.append(f"Watchdog: {short(cl['errors'].get('watchdog', 'not measured'), 150)}")
    lines.append("")
    ho = cl.get("handoff") or {}
    lines.append(f"Hand-off, {HANDOFF_PROCS} processes, {HOLD_US // 1000} ms hold, queue (as (b)); the name's "
                 f"master: {cl.get('handoff_master', '?')}")
    lines.append(f"| {'library':<14} | {'topology':<34} | {'hand-offs/s':>11} | {'p50 ms':>8} | {'p99 ms':>8} | "
                 f"{'max ms':>8} | {'mutex viol.':>11} |")
    lines.append(f"|{'-' * 16}|{'-' * 36}|{'-' * 13}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 13}|")
    labels = dict(CLUSTER_TOPOLOGIES)
    for lib, by in ho.items():
        for key in ("single", "cluster_3_3"):
            r = by.get(key)
            if r is None:
                why = cl["errors"].get(f"handoff:{lib}:{key}", "n/a")
                lines.append(f"| {lib:<14} | {labels[key]:<34} | {'n/a':>11} | {'n/a':>8} | {'n/a':>8} | "
                             f"{'n/a':>8} | {'n/a':>11} |  {short(why)}")
                continue
            lines.append(f"| {lib:<14} | {labels[key]:<34} | {r['handoffs_per_s']:>11.1f} | {r['p50_ms']:>8.3f} | "
                         f"{r['p99_ms']:>8.3f} | {r['max_ms']:>8.2f} | {r['mutual_exclusion_violations']:>11} |")
    if not ho:
        lines.append("  not measured")
    return lines + [""]


def table(res: dict) -> str:
    st = res["status"]
    lines = []
    cyc, flo = res["cycle"]["cycles"], res["cycle"]["floors"]
    floor_of = {"watchlock-c": ("c", "hiredis PING"), "watchlock-py": ("py", "redis-py PING"),
                "redis-py": ("py", "redis-py PING"), "python-redis-lock": ("py", "redis-py PING"),
                "pottery": ("py", "redis-py PING"), "redisson": ("java", "RBucket.get"),
                "watchlock-py-with": ("py", "redis-py PING"), f"watchlock-c-name{SHORT_NAME}": ("c", "hiredis PING"),
                f"watchlock-c-name{LONG_NAME}": ("c", "hiredis PING")}
    for when in ("before", "after"):
        if res.get(f"load_{when}"):
            lines.append(f"Machine load {when} the run: {fmt_load(res[f'load_{when}'])}")
    cpu = res["cycle"].get("pinned_cpu", res.get("pinned_cpu", (res.get("cluster") or {}).get("pinned_cpu")))
    lines.append("Client and server pinned to core %s for (a), (d) and (f)'s cycle" % cpu if cpu is not None
                 else "Not pinned (taskset missing, one core, or --no-pin)")
    if res.get("redis_py_hiredis") is not None:
        lines.append(f"redis-py reply parser: {'hiredis' if res['redis_py_hiredis'] else 'pure Python'}")
    lines.append("")
    lines.append("(a) Uncontended acquire+release, one thread, one name")
    lines.append(f"| {'library':<18} | {'cycles/s':>9} | {'us/cycle':>9} | {'floor (1 RTT)':<22} | {'cycle/floor':>11} |")
    lines.append(f"|{'-' * 20}|{'-' * 11}|{'-' * 11}|{'-' * 24}|{'-' * 13}|")
    rows = []
    for lib, _ in LIBS:
        rows.append(lib)
        if lib == "watchlock-py":
            rows.append("watchlock-py-with")
    rows += [f"watchlock-c-name{SHORT_NAME}", f"watchlock-c-name{LONG_NAME}"]
    shown = {"watchlock-py-with": "watchlock-py with", f"watchlock-c-name{SHORT_NAME}": "watchlock-c 10 B",
             f"watchlock-c-name{LONG_NAME}": "watchlock-c 10 KiB"}
    for lib in rows:
        label = shown.get(lib, lib)
        fk, fname = floor_of[lib]
        f = flo.get(fk)
        ftxt = f"{fname} {f['us_per_op']:.1f} us" if f else "n/a"
        c = cyc.get(lib)
        if c is None:
            why = st.get(lib) or res["cycle"]["errors"].get(f"cycle:{lib}", "n/a")
            lines.append(f"| {label:<18} | {'n/a':>9} | {'n/a':>9} | {ftxt:<22} | {'n/a':>11} |  {short(why)}")
            continue
        ratio = f"{c['us_per_op'] / f['us_per_op']:.2f}x" if f else "n/a"
        lines.append(f"| {label:<18} | {c['ops_per_s']:>9.0f} | {c['us_per_op']:>9.1f} | {ftxt:<22} | {ratio:>11} |")
    lines.append("(watchlock-py: one Lock, acquire() + release(); with: `with client.lock(name):`, a new Lock "
                 "per cycle; watchlock-c 10 B / 10 KiB: names of that length)")
    for mode, desc in (("queue", "releaser waits until another process has the lock"),
                       ("greedy", "releaser contends again at once")):
        lines.append("")
        lines.append(f"(b) Hand-off, {HANDOFF_PROCS} processes, {HOLD_US // 1000} ms hold, {mode}: {desc}")
        if mode not in res["handoff"]:
            lines.append("not run (--only)" if res["handoff"].get("not_run")
                         else f"not run in {res.get('mode', 'this')} mode")
            continue
        lines.append(f"| {'library':<18} | {'hand-offs/s':>11} | {'turns/s':>8} | {'p50 ms':>8} | {'p99 ms':>8} | "
                     f"{'max ms':>8} | {'mutex viol.':>11} |")
        lines.append(f"|{'-' * 20}|{'-' * 13}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 13}|")
        for lib, _ in LIBS:
            r = res["handoff"].get(mode, {}).get(lib)
            if r is None:
                why = st.get(lib) or res["handoff"]["errors"].get(f"{mode}:{lib}", "n/a")
                lines.append(f"| {lib:<18} | {'n/a':>11} | {'n/a':>8} | {'n/a':>8} | {'n/a':>8} | {'n/a':>8} | "
                             f"{'n/a':>11} |  {short(why)}")
                continue
            lines.append(f"| {lib:<18} | {r['handoffs_per_s']:>11.1f} | {r['turns_per_s']:>8.1f} | "
                         f"{r['p50_ms']:>8.3f} | {r['p99_ms']:>8.3f} | {r['max_ms']:>8.2f} | "
                         f"{r['mutual_exclusion_violations']:>11} |")
    wd = res["watchdog"]
    lines.append("")
    lines.append(f"(c) Watchdog: one client holds {res['scale']['wd_locks']} locks, lease {WD_LEASE_MS} ms, "
                 f"for {res['scale']['wd_hold_s']:g} s")
    lines.append(f"| {'library':<18} | {'lost':>5} | {'renewals':>9} | {'round trips':>11} | {'renewals/RT':>11} | "
                 f"{'scripts/lease/3':>15} | {'renew CPU':>10} | {'memory/lock':>16} |")
    lines.append(f"|{'-' * 20}|{'-' * 7}|{'-' * 11}|{'-' * 13}|{'-' * 13}|{'-' * 17}|{'-' * 12}|{'-' * 18}|")
    for lib, _ in LIBS:
        r = wd.get(lib)
        if r is None:
            why = st.get(lib) or wd["errors"].get(lib) or wd.get("n/a", {}).get(lib, "n/a")
            lines.append(f"| {lib:<18} | {'n/a':>5} | {'n/a':>9} | {'n/a':>11} | {'n/a':>11} | {'n/a':>15} | "
                         f"{'n/a':>10} | {'n/a':>16} |  {short(why)}")
            continue
        mem = f"{r['rss_per_lock_b']:.0f} B RSS"
        if "heap_per_lock_b" in r:
            mem = f"{r['heap_per_lock_b']:.0f} B heap"
        lines.append(f"| {lib:<18} | {r['lost']:>5} | {fmt(r.get('renewals'), '>9')} | "
                     f"{fmt(r.get('renew_roundtrips'), '>11')} | {fmt(r.get('renewals_per_roundtrip'), '>11.1f')} | "
                     f"{r['script_calls_per_round']:>15.1f} | {r['renewal_cpu_pct']:>9.2f}% | {mem:>16} |")
    sc = res.get("many", {})
    lines.append("")
    lines.append("(d) Watchdog scale and acquire cost while locks are held (watchlock-c)")
    lines.append(f"| {'run':<10} | {'locks':>8} | {'lease':>6} | {'held':>6} | {'lost':>5} | {'renewals/lock/int.':>18} | "
                 f"{'min remaining':>13} | {'RSS/lock':>8} | {'renew CPU':>9} | {'acquire us':>10} | {'pinned':>6} |")
    lines.append(f"|{'-' * 12}|{'-' * 10}|{'-' * 8}|{'-' * 8}|{'-' * 7}|{'-' * 20}|{'-' * 15}|{'-' * 10}|{'-' * 11}|"
                 f"{'-' * 12}|{'-' * 8}|")
    for key in ("wd", "big", "held_small", "held_large"):
        r = res["watchdog"].get("watchlock-c") if key == "wd" else sc.get(key)
        if r is None:
            why = sc.get("errors", {}).get(key) or ("not run" if key != "wd" else "see (c)")
            lines.append(f"| {key:<10} | {short(why, 120)}")
            continue
        rpi = r.get("renewals_per_lock_interval")
        frac = r.get("min_remaining_frac")
        probe = f"{r['probe_acquire_us']:.1f}" if r.get("probe_acquire_us") else "-"
        lines.append(f"| {key:<10} | {r['locks']:>8} | {r['lease_ms'] / 1000:>5g}s | {r['hold_s']:>5.0f}s | "
                     f"{r['lost']:>5} | {fmt(rpi, '>18.3f')} | "
                     f"{(f'{frac * 100:.0f}%' if frac is not None else 'n/a'):>13} | "
                     f"{r['rss_per_lock_b']:>6.0f} B | {r.get('renewal_cpu_pct', 0):>8.2f}% | "
                     f"{probe:>10} | "
                     f"{'yes' if r.get('pinned') else 'no':>6} |")
    for key in ("big", "held_small", "held_large"):  # issue 32: the transient after acquiring
        w = (sc.get(key) or {}).get("windows_renewals_per_interval")
        if w:
            lines.append(f"  {key}: renewals/lock/interval per window (5 s, or one interval when longer) from "
                         "the first: "
                         + " ".join(fmt(x, ".3f") for x in w))
    th = sc.get("threads", {})
    lines.append("")
    lines.append(f"(e) Threads sharing one client, C, each cycling its own lock (not pinned)")
    if th:
        one = th.get("1", {}).get("ops_per_s")
        for t in sorted(th, key=int):
            v = th[t]["ops_per_s"]
            prof = (f"; CPU per cycle: client {th[t]['client_cpu_us']:.1f} us, server {th[t]['server_cpu_us']:.1f} us "
                    f"(server core {th[t]['server_busy'] * 100:.0f}% busy)" if "client_cpu_us" in th[t] else "")
            lines.append(f"  {t:>3} thread(s): {v:>9.0f} cycles/s" + (f"  ({v / one:.2f}x one thread)" if one else "")
                         + prof)
    else:
        lines.append("  not measured" + (f": {short(str(sc['errors']))}" if sc.get("errors") else ""))
    lines.append("")
    lines += capacity_table(res)
    lines += cluster_table(res)
    lines += wave_scenarios.table(res)
    lines += issue32.table(res)
    smoke = res.get("mode") == "smoke"
    note = " (smoke run: tiny samples on a shared machine; the verdicts say nothing about speed)" if smoke else ""
    groups = [(title, res.get(key, [])) for title, key in (
        ("Issue 13 targets", "targets13"), ("Issue 12 targets (Cluster)", "targets12"), ("Other targets", "targets"))]
    groups += wave_scenarios.targets(res)
    groups += issue32.targets(res)
    for title, rows in groups:
        lines.append(title + note)
        lines.append(f"| {'target':<72} | {'measured':<52} | {'verdict':<7} |")
        lines.append(f"|{'-' * 74}|{'-' * 54}|{'-' * 9}|")
        for name, measured, v in rows:
            lines.append(f"| {name:<72} | {measured:<52} | {v:<7} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ---- README table ---------------------------------------------------------------------


def readme_table(res: dict) -> str:
    """The performance table of the top-level README.md, from one run
    (`bench/run --readme bench/results/latest.json` prints it again)."""
    cyc, ho = res["cycle"]["cycles"], res.get("handoff", {}).get("queue", {})
    wd = res.get("watchdog", {})
    cols = [("watchlock C", "watchlock-c"), ("watchlock Python", "watchlock-py"), ("redis-py", "redis-py"),
            ("python-redis-lock", "python-redis-lock"), ("pottery", "pottery"), ("Redisson", "redisson")]

    def us(lib: str) -> str:
        c = cyc.get(lib)
        return f"{c['us_per_op']:.0f} µs" if c else "n/a"

    def cell_cycle(lib: str) -> str:
        if lib == "watchlock-py" and "watchlock-py-with" in cyc:
            return f"{us(lib)} (`with`: {us('watchlock-py-with')})"
        return us(lib)

    def ms(v: float) -> str:  # 0.45, 1.3, 63, 101 (not 1e+02)
        return f"{v:.0f}" if v >= 10 else f"{v:.2g}"

    def cell_ho(lib: str, what: str) -> str:
        r = ho.get(lib)
        if r is None:
            return "n/a"
        if what == "rate":
            return f"{r['handoffs_per_s']:.0f}"
        p50, p99 = r["p50_ms"], r["p99_ms"]
        return f"{ms(p50)} / {ms(p99)} ms"

    def cell_wd(lib: str) -> str:
        r = wd.get(lib)
        if lib == "watchlock-py":
            return "(same core)"
        if r is None:
            return {"redis-py": "no watchdog", "pottery": "no watchdog"}.get(lib, "n/a")
        if "heap_per_lock_b" in r:
            return f"{r['lost']} lost, {r['heap_per_lock_b']:.0f} B heap/lock, {r['renewal_cpu_pct']:.1f}% CPU"
        return f"{r['lost']} lost, {r['rss_per_lock_b']:.0f} B/lock, {r['renewal_cpu_pct']:.1f}% CPU"

    def cell_wd_run(r: dict) -> str:
        rpi = r.get("renewals_per_lock_interval")
        return (f"{r['lost']} lost, {r['rss_per_lock_b']:.0f} B/lock, "
                + (f"{rpi:.2f} renewals per interval, " if rpi is not None else "")
                + f"{r['renewal_cpu_pct']:.1f}% CPU")

    pinned = res["cycle"].get("pinned_cpu") is not None
    lines = ["| | " + " | ".join(c for c, _ in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    lines.append(f"| uncontended acquire+release{' (one core)' if pinned else ''} | "
                 + " | ".join(cell_cycle(lib) for _, lib in cols) + " |")
    lines.append(f"| hand-offs/s, {HANDOFF_PROCS} processes, {HOLD_US // 1000} ms hold | "
                 + " | ".join(cell_ho(lib, "rate") for _, lib in cols) + " |")
    lines.append("| hand-off latency p50 / p99 | " + " | ".join(cell_ho(lib, "lat") for _, lib in cols) + " |")
    lines.append(f"| {res['scale']['wd_locks']:,} locks on one watchdog, {WD_LEASE_MS // 1000} s lease, "
                 f"{res['scale']['wd_hold_s']:g} s | " + " | ".join(cell_wd(lib) for _, lib in cols) + " |")
    many = res.get("many", {})
    for key in ("big", "held_large"):
        r = many.get(key)
        if r:
            lines.append(f"| {r['locks']:,} locks on one watchdog, {r['lease_ms'] // 1000} s lease, "
                         f"{r['hold_s']:.0f} s | {cell_wd_run(r)} | (same core) | | | | |")
    cl = res.get("cluster") or {}
    one, base = cl.get("cycle", {}).get("cluster_3:one"), cl.get("cycle", {}).get("single:one")
    if one and base:
        lines.append("| uncontended acquire+release through a 3-master Cluster (one core) | "
                     f"{one['us_per_op']:.0f} µs ({one['us_per_op'] / base['us_per_op']:.2f}x one server) "
                     "| (same core) | | | | |")
    wd = cl.get("watchdog")
    if wd:
        lines.append(f"| {wd['locks']:,} locks on one Cluster watchdog (3 masters), {wd['lease_ms'] // 1000} s lease, "
                     f"{wd['hold_s']:.0f} s | {cell_wd_run(wd)} | (same core) | | | | |")
    ho_c = cl.get("handoff") or {}
    if ho_c:
        def cell_cl(lib: str) -> str:
            r = ho_c.get(lib, {}).get("cluster_3_3")
            return f"{r['p50_ms']:.2g} / {r['p99_ms']:.2g} ms" if r else "n/a"
        lines.append("| hand-off latency p50 / p99 on a Cluster | " + " | ".join(
            cell_cl(lib) if lib.startswith("watchlock") else "" for _, lib in cols) + " |")
    out = "\n".join(lines) + "\n"
    for title, key in (("Issue 13", "targets13"), ("Issue 12 (Cluster)", "targets12")):
        rows = res.get(key) or []
        if rows:
            out += f"\n{title} targets, same run:\n\n| target | measured | |\n|---|---|---|\n"
            out += "".join(f"| {name} | {measured} | {v} |\n" for name, measured, v in rows)
    return out


# ---- main ----------------------------------------------------------------------------


def machine() -> dict:
    info = {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                info["mem_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    r = run(["java", "-version"], timeout=30) if shutil.which("java") else None
    if r is not None:
        info["java"] = (r.stderr.strip().splitlines() or ["?"])[0]
    return info


import wave_scenarios  # noqa: E402 - issues 21-23's scenarios (bench/wave_scenarios.py)

wave_scenarios.B = sys.modules[__name__]
import issue32  # noqa: E402 - issue 32's figures (bench/issue32.py)

issue32.B = sys.modules[__name__]
WAVE = ("redlock", "fair", "rwlock", "issue32")
SCENARIOS = {"cycle": scenario_cycle, "handoff": scenario_handoff, "watchdog": scenario_watchdog,
             "many": scenario_many, "cluster": scenario_cluster, "capacity": scenario_capacity,
             "redlock": wave_scenarios.scenario_redlock, "fair": wave_scenarios.scenario_fair,
             "rwlock": wave_scenarios.scenario_rwlock, "issue32": issue32.scenario_issue32}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="smaller N and shorter runs (about 3 minutes)")
    g.add_argument("--smoke", action="store_true",
                   help="tiny N, seconds; installs no peers; writes to bench/.peers/smoke/")
    ap.add_argument("--out", help="output directory (default bench/results, smoke: bench/.peers/smoke)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--no-pin", action="store_true", help="do not pin client and server to one core")
    ap.add_argument("--only", metavar="SCENARIOS",
                    help="run only these scenarios (comma-separated: " + ",".join(SCENARIOS) + "); the others "
                         "show as not run")
    ap.add_argument("--readme", metavar="JSON", help="only print the README's performance table of a results file")
    ap.add_argument("--report", metavar="JSON", help="only print the table and redraw the plots of a results file")
    args = ap.parse_args()
    if args.readme:
        res = json.load(open(args.readme))
        res.setdefault("many", {})
        res["targets13"] = evaluate13(res)
        res["targets12"] = evaluate12(res)
        print(readme_table(res), end="")
        return 0
    if args.report:
        res = json.load(open(args.report))
        res.setdefault("many", {})
        res["targets13"] = evaluate13(res)
        res["targets12"] = evaluate12(res)
        res["targets"] = evaluate(res)
        print(table(res), end="")
        out_dir = os.path.dirname(os.path.abspath(args.report))
        with open(os.path.join(out_dir, "latest.md"), "w") as f:
            f.write(table(res))
        with open(os.path.join(out_dir, "readme-table.md"), "w") as f:
            f.write(readme_table(res))
        if not args.no_plots:
            rc, out, path = run_logged("plots", [VPY, os.path.join(BENCH, "plot.py"), args.report, out_dir],
                                       timeout=300)
            if rc != 0:
                log(f"plots failed: {one_line(out)} (log: {path})")
        return 0
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    only = [x.strip() for x in args.only.split(",") if x.strip()] if args.only else list(SCENARIOS)
    unknown = [x for x in only if x not in SCENARIOS]
    if unknown:
        ap.error(f"--only: unknown scenario(s) {', '.join(unknown)} (known: {', '.join(SCENARIOS)})")
    scale = dict(SCALES[mode], mode=mode)
    out_dir = args.out or (os.path.join(PEERS_DIR, "smoke") if mode == "smoke" else os.path.join(BENCH, "results"))
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(PEERS_DIR, exist_ok=True)
    t_start = time.monotonic()
    log("recording the machine's load")
    load_before = machine_load()
    log(f"  {fmt_load(load_before)}")
    PIN["cpu"] = None if args.no_pin else pin_cpu()
    if "redlock" in only:  # (h)'s masters age during the set-up (wave_scenarios.MASTER_MIN_AGE_S)
        wave_scenarios.start_masters()

    status: dict = {}  # library -> "skipped: why" or "FAILED: why" (one line); absent = available
    setup_c(status)
    if any(x in only for x in ("cycle", "handoff", "watchdog") + WAVE):
        setup_python(mode, status)
        if only != ["issue32"]:  # issue 32 measures watchlock alone
            setup_java(mode, status)
        else:
            status["redisson"] = skipped("not needed by --only issue32")
    else:  # --only many/cluster/capacity: watchlock-c alone, nothing to install
        for name in list(PY_PEERS) + ["watchlock-py", "redisson", "hiredis", "plots"]:
            status[name] = skipped("not needed by --only " + ",".join(only))
    if "redlock" in only:
        wave_scenarios.setup_go(mode, status)
        wave_scenarios.setup_node(mode, status)
    by_reason: dict = {}  # one line per reason: "redis-py, pottery: skipped: not installed; ..."
    for k, v in status.items():
        by_reason.setdefault(v, []).append(k)
    for v, names in by_reason.items():
        log(f"{', '.join(names)}: {v}")
    res: dict = {"mode": mode, "scale": scale, "status": status, "machine": machine(),
                 "handoff_processes": HANDOFF_PROCS, "hold_us": HOLD_US, "watchdog_lease_ms": WD_LEASE_MS,
                 "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "load_before": load_before,
                 "pinned_cpu": PIN["cpu"]}
    res["versions"] = versions(status)
    if "redis-py" not in status:
        r = run([VPY, PY_WORKER, "probe", "redis-py"], timeout=60, cwd=BENCH)
        try:
            res["redis_py_hiredis"] = json.loads(r.stdout.strip().splitlines()[-1]).get("hiredis")
        except (ValueError, IndexError):
            res["redis_py_hiredis"] = None
        if res["redis_py_hiredis"] is False:
            log("redis-py runs without the hiredis parser (pip install hiredis failed?): its numbers are slower")
    r = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], timeout=30)
    res["commit"] = r.stdout.strip() or "?"
    failed = any(v.startswith("FAILED") for k, v in status.items() if k.startswith("watchlock"))

    with RedisServer() as srv:
        res["redis_port"] = srv.port
        for name, fn in SCENARIOS.items():
            if name not in only:
                res[name] = {"errors": {}, "not_run": True}
                continue
            log(f"scenario {name} ({time.monotonic() - t_start:.0f} s)")
            try:
                res[name] = fn(srv, scale, status)
            except Exception:  # noqa: BLE001
                res[name] = {"errors": {"all": traceback.format_exc()}}
                failed = True
    res["cycle"].setdefault("cycles", {})
    res["cycle"].setdefault("floors", {})
    res["cycle"].setdefault("errors", {})
    res["handoff"].setdefault("errors", {})
    res["watchdog"].setdefault("errors", {})
    res["many"].setdefault("errors", {})
    res["cluster"].setdefault("errors", {})
    res["capacity"].setdefault("errors", {})
    for name in WAVE:
        res[name].setdefault("errors", {})
    res["only"] = only
    res["targets13"] = evaluate13(res)
    res["targets12"] = evaluate12(res)
    res["targets"] = evaluate(res)
    log("recording the machine's load")
    res["load_after"] = machine_load()
    res["elapsed_s"] = time.monotonic() - t_start

    # watchlock failures: any error in its own measurements, lost locks, overlaps.
    for msg in wave_scenarios.failures(res) + issue32.failures(res):
        failed = True
        log(f"watchlock failure in {msg}")
    for section in SCENARIOS:
        if section in WAVE:
            continue  # wave_scenarios.failures above
        for key, err in res[section].get("errors", {}).items():
            if ("watchlock" in key or key == "floor:c" or key == "all"
                    or section in ("many", "cluster", "capacity")):
                failed = True
                log(f"watchlock failure in {section} {key}: {err}")
    for m in ("queue", "greedy"):
        for lib, r in res["handoff"].get(m, {}).items():
            if r["mutual_exclusion_violations"]:
                log(f"{lib} ({m}): {r['mutual_exclusion_violations']} mutual exclusion violations")
                if lib.startswith("watchlock"):
                    failed = True
    wd = res["watchdog"].get("watchlock-c")
    if wd and (wd["lost"] or wd["release_failures"]):
        log(f"watchlock lost {wd['lost']} locks in the watchdog run")
        failed = True
    for key, r in [(k, res["many"].get(k)) for k in ("big", "held_small", "held_large")] + [
            ("cluster", res["cluster"].get("watchdog"))]:
        if r and (r["lost"] or r["release_failures"]):
            log(f"watchlock lost {r['lost']} locks ({r['release_failures']} release failures) in the {key} run")
            failed = True
    for lib, by in (res["cluster"].get("handoff") or {}).items():
        for key, r in by.items():
            if r["mutual_exclusion_violations"]:
                log(f"{lib} (cluster hand-off, {key}): {r['mutual_exclusion_violations']} mutual exclusion violations")
                failed = True

    text = table(res)
    print(text, end="")
    print(f"\nmode {mode}; {res['elapsed_s']:.0f} s; results in {os.path.relpath(out_dir, ROOT)}/ "
          f"(README table: readme-table.md)")
    with open(os.path.join(out_dir, "latest.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    with open(os.path.join(out_dir, "latest.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, "readme-table.md"), "w") as f:
        f.write(readme_table(res))
    if not args.no_plots:
        if "plots" not in status:  # else already reported as skipped at set-up
            rc, out, path = run_logged("plots", [VPY, os.path.join(BENCH, "plot.py"),
                                                 os.path.join(out_dir, "latest.json"), out_dir], timeout=300)
            if rc != 0:
                log(f"plots failed: {one_line(out)} (log: {path})")
    if failed:
        log("watchlock FAILED (see above)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
