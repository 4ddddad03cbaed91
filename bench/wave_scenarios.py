"""Scenarios of issues 21-23 for bench/bench.py: Redlock over 5 masters
(`redlock`), the fair lock and semaphore (`fair`) and the read-write lock
(`rwlock`), each against its peers in the same run. bench.py sets `B` to
itself before calling anything here (the set-up helpers, workers, pinning
and the table's formatting live there).

A watchlock side whose kind is not in this checkout yet (wlbench or
py_worker exits 3: the quorum client, the fair lock, the semaphore or the
read-write lock come from other branches of the wave) is reported as
`skipped: not in this checkout`, like a peer that is not installed, and
does not fail the run. Any other watchlock failure does.
"""
from __future__ import annotations

import contextlib
import json
import mmap
import os
import re
import shutil
import statistics
import struct
import subprocess
import tempfile
import time

B = None  # the bench module (bench.py), set by it

GO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "go")
NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")

MASTERS = 5
CONTENDERS = 8
READERS = 8
# Targets (issues 21.11, 22.7, 23.6)
QUORUM_CYCLE_RATIO = 1.3
FAIR_CYCLE_RATIO = 1.3
READ_CYCLE_RATIO = 1.3
FAIR_P50_MS, FAIR_P99_MS = 0.2, 1.0
QUEUE_COST_RATIO = 1.2  # "no more than": 10,000 waiters vs 10, with 20% for noise

WAVE_SCALES = {
    "full": dict(q_wd_locks=10000, q_wd_hold_s=60.0, mix_s=10.0, queue_waiters=10000, queue_cycles=100,
                 queue_settle_ms=100),
    "quick": dict(q_wd_locks=1000, q_wd_hold_s=10.0, mix_s=4.0, queue_waiters=10000, queue_cycles=40,
                  queue_settle_ms=100),
    "smoke": dict(q_wd_locks=50, q_wd_hold_s=1.5, mix_s=0.5, queue_waiters=100, queue_cycles=10,
                  queue_settle_ms=10),
}

# How each library's waiters are designed to learn that the lock is free (the
# hand-off table's last column); scripts/acq shows what they did.
WAKEUP = {
    "watchlock-c": "release message (pub/sub)", "watchlock-py": "release message (pub/sub)",
    "pottery": "polled (retries at once)", "redsync": "polled (50-250 ms)",
    "node-redlock": "polled (200 ms + jitter)",
}

PEER_SETUP_SKIPS = ("redsync", "node-redlock")


# ---- set-up of the Go and Node peers ------------------------------------------------


def peer_bin(name: str) -> str:
    return os.path.join(B.PEERS_DIR, name)


def setup_go(mode: str, status: dict) -> None:
    exe = peer_bin("redsync-bench")
    if shutil.which("go") is None:
        status["redsync"] = B.skipped("go not found (Debian: apt-get install golang)")
        return
    if os.path.exists(exe) and os.path.getmtime(exe) >= B.newest_mtime(GO_DIR):
        return
    if mode == "smoke":
        status["redsync"] = B.skipped("not built; smoke mode builds no peers (bench/run --quick does)")
        return
    B.log("building the redsync peer (go build; modules from the Go module proxy)")
    rc, out, path = B.run_logged("setup-go-redsync", ["go", "build", "-o", exe, "."], timeout=1200, cwd=GO_DIR)
    if rc != 0 or not os.path.exists(exe):
        status["redsync"] = B.skipped(f"not built; go build failed: {B.one_line(out)}", path)


def node_modules() -> str:
    return os.path.join(B.PEERS_DIR, "node", "node_modules")


def setup_node(mode: str, status: dict) -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        status["node-redlock"] = B.skipped("node or npm not found")
        return
    dest = os.path.join(B.PEERS_DIR, "node")
    want = open(os.path.join(NODE_DIR, "package.json")).read()
    have_pkg = os.path.join(dest, "package.json")
    if (os.path.isdir(os.path.join(node_modules(), "redlock")) and os.path.exists(have_pkg)
            and open(have_pkg).read() == want):
        return
    if mode == "smoke":
        status["node-redlock"] = B.skipped("not installed; smoke mode installs no peers (bench/run --quick does)")
        return
    os.makedirs(dest, exist_ok=True)
    with open(have_pkg, "w") as f:
        f.write(want)
    B.log("installing node-redlock (npm install redlock ioredis)")
    rc, out, path = B.run_logged("setup-npm-redlock", ["npm", "install", "--no-audit", "--no-fund"],
                                 timeout=900, cwd=dest)
    if rc != 0 or not os.path.isdir(os.path.join(node_modules(), "redlock")):
        status["node-redlock"] = B.skipped(f"not installed; npm install failed: {B.one_line(out)}", path)


def cmd_of(lib: str, mode: str, *args, kind: str = "plain") -> list:
    """The worker command of `lib` (a library of this module's tables)."""
    a = list(map(str, args))
    if lib == "watchlock-c":
        env = [] if kind == "plain" else ["env", f"WLBENCH_KIND={kind}"]
        return env + [B.WLBENCH, mode, *a]
    if lib in ("relay-1t", "relay-2t"):  # the machine's hand-off floor (wlbench.c cmd_relay): no watchlock
        return ["env", f"WLBENCH_RELAY_THREADS={lib[6]}", B.WLBENCH, "relay" if mode == "handoff" else mode, *a]
    if lib == "watchlock-py":
        pylib = {"plain": "watchlock", "fair": "watchlock-fair", "sem": "watchlock-sem"}[kind]
        return [B.VPY, B.PY_WORKER, mode, pylib, *a]
    if lib in ("redis-py", "python-redis-lock", "pottery"):
        return [B.VPY, B.PY_WORKER, mode, lib, *a]
    if lib == "redisson":
        jkind = {"plain": "lock"}.get(kind, kind)
        return ["java", "-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", f"-Dbench.kind={jkind}", "-jar", B.JAR, mode, *a]
    if lib == "redsync":
        return [peer_bin("redsync-bench"), mode, *a]
    if lib == "node-redlock":
        return ["env", f"NODE_PATH={node_modules()}", "node", os.path.join(NODE_DIR, "redlock_bench.js"), mode, *a]
    raise ValueError(lib)


class Unsupported(Exception):
    """The worker said (exit 3) that this checkout's watchlock lacks the kind."""


def run_json(cmd: list, timeout: float, env: "dict | None" = None) -> dict:
    cmd = list(map(str, cmd))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=B.BENCH, env=env)
    if r.returncode == 3:
        raise Unsupported(B.one_line(r.stderr) or "not in this checkout")
    if r.returncode != 0:
        path = B.write_log(f"run-wave-{os.path.basename(cmd[-5] if len(cmd) > 5 else cmd[0])}", cmd,
                           r.returncode, r.stdout, r.stderr, B.BENCH)
        raise RuntimeError(f"{' '.join(map(str, cmd[:3]))}... exited {r.returncode}: {B.one_line(r.stderr)} "
                           f"(log: {path})")
    return json.loads(r.stdout.strip().splitlines()[-1])


def commandstats(port: int, field: str = "calls") -> dict:
    """cmdstat name -> calls (or usec: the server's time in it), from INFO commandstats."""
    import redis_server as rs
    with rs.connect(port) as sock:
        sock.sendall(rs._encode(("INFO", "commandstats")))
        raw = B._as_bytes(rs._read_reply(sock.makefile("rb"))).decode()
    return {m.group(1): int(m.group(3) if field == "usec" else m.group(2))
            for m in re.finditer(r"cmdstat_([a-z|_-]+):calls=(\d+),usec=(\d+)", raw)}


# ---- processes that contend through the shared file ---------------------------------

RELEASE_NS, TURNS, LAST_HOLDER, STOP_NS, IN_CS, VIOLATIONS, START_NS, OUT_OF_ORDER, READY = range(9)
READY = 8
SLOTS = 64


def run_group(cmds: list, seconds: float, flush) -> dict:
    """Starts the processes `cmds(shm_path)` (a list of commands), waits until
    every one is ready, lets them run `seconds`, and returns their JSON
    outputs and the shared counters (violations, out-of-order grants)."""
    fd, shm = tempfile.mkstemp(prefix="wl-wave-", suffix=".shm")
    os.write(fd, b"\0" * SLOTS * 8)
    os.close(fd)
    flush()
    procs = []
    try:
        with open(shm, "r+b") as f:
            mm = mmap.mmap(f.fileno(), SLOTS * 8)
        for cmd in cmds(shm):
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          cwd=B.BENCH))
        n = len(procs)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if sum(struct.unpack_from("<q", mm, (READY + i) * 8)[0] for i in range(n)) == n:
                break
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.02)
        else:
            raise RuntimeError("workers did not get ready in 180 s")
        bad = next((p for p in procs if p.poll() is not None), None)
        if bad is not None:
            err = bad.stderr.read()
            if bad.returncode == 3:
                raise Unsupported(B.one_line(err))
            path = B.write_log("run-wave-group", bad.args, bad.returncode, bad.stdout.read(), err, B.BENCH)
            raise RuntimeError(f"a worker exited early ({bad.returncode}): {B.one_line(err)} (log: {path})")
        start = time.monotonic_ns() + 50_000_000
        struct.pack_into("<q", mm, STOP_NS * 8, start + int(seconds * 1e9))
        struct.pack_into("<q", mm, START_NS * 8, start)
        results = []
        for p in procs:
            out, err = p.communicate(timeout=seconds + 120)
            if p.returncode != 0:
                path = B.write_log("run-wave-group", p.args, p.returncode, out, err, B.BENCH)
                raise RuntimeError(f"worker exited {p.returncode}: {B.one_line(err)} (log: {path})")
            results.append(json.loads(out.strip().splitlines()[-1]))
        counters = {"violations": struct.unpack_from("<q", mm, VIOLATIONS * 8)[0],
                    "out_of_order": struct.unpack_from("<q", mm, OUT_OF_ORDER * 8)[0]}
        mm.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        os.unlink(shm)
    return {"results": results, **counters}


def handoff(lib: str, urls: str, seconds: float, polite: bool, flush, kind: str = "plain",
            ports: tuple = ()) -> dict:
    """CONTENDERS processes of `lib` contend for one name (bench.py's (b)
    hand-off); with `ports`, also the commands the servers ran per turn."""
    before = [commandstats(p) for p in ports]
    before_us = [commandstats(p, "usec") for p in ports]
    g = run_group(lambda shm: [cmd_of(lib, "handoff", urls, shm, i, B.HOLD_US, 1 if polite else 0, kind=kind)
                               for i in range(CONTENDERS)], seconds, flush)
    after = [commandstats(p) for p in ports]
    after_us = [commandstats(p, "usec") for p in ports]
    rs = g["results"]
    lat = sorted(x for r in rs for x in r["handoff_ns"])
    turns = sum(r["turns"] for r in rs)
    out = {
        "seconds": seconds, "turns": turns, "turns_per_s": turns / seconds,
        "handoffs": len(lat), "handoffs_per_s": len(lat) / seconds,
        "same_holder_turns": sum(r["same_holder"] for r in rs),
        "releaser_share": sum(r["same_holder"] for r in rs) / max(1, sum(r["same_holder"] for r in rs) + len(lat)),
        "turns_per_process": [r["turns"] for r in rs],
        "out_of_order": g["out_of_order"], "in_order_frac": 1 - g["out_of_order"] / max(1, turns),
        "p50_ms": B.pct(lat, 0.50) / 1e6, "p99_ms": B.pct(lat, 0.99) / 1e6,
        "max_ms": (lat[-1] / 1e6) if lat else float("nan"),
        "mutual_exclusion_violations": g["violations"], "latencies_ms": [x / 1e6 for x in lat],
    }
    # The C worker splits each hand-off at the grant (its fencing token is the
    # server's clock then; wlbench.c cmd_handoff): p50 of either side, in us
    for side in ("to_grant_us", "after_grant_us"):
        xs = sorted(x for r in rs for x in r.get(side, []))
        if xs:
            out[f"p50_{side}"] = B.pct(xs, 0.50)
            out[f"p99_{side}"] = B.pct(xs, 0.99)
    if ports:
        delta: dict = {}
        for b, a in zip(before, after):
            for k, v in a.items():
                delta[k] = delta.get(k, 0) + v - b.get(k, 0)
        delta.pop("info", None)
        scripts = sum(v for k, v in delta.items() if k in ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall"))
        out["commands"] = delta
        out["script_calls_per_acquire"] = scripts / max(1, turns)
        out["commands_per_acquire"] = sum(delta.values()) / max(1, turns)
        out["script_calls_per_acquire_per_master"] = scripts / max(1, turns) / len(ports)
        script_us = sum(a.get(k, 0) - b.get(k, 0) for b, a in zip(before_us, after_us)
                        for k in ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall"))
        out["script_us_per_acquire"] = script_us / max(1, turns)  # the server's own time in scripts, per turn
    return out


def cycles(jobs: list, scale: dict, pids: list, out: dict) -> None:
    """Interleaved, pinned cycle runs: jobs = [(key, cmd)], median cycles/s
    into out["cycles"][key]; Unsupported into out["skipped"]["cycle:" + key],
    errors into out["errors"]["cycle:" + key]."""
    samples: dict = {}
    B.pin_pids(pids, True)
    try:
        for _ in range(scale["repeats"]):
            for key, cmd in jobs:
                ck = "cycle:" + key
                if ck in out["errors"] or ck in out["skipped"]:
                    continue
                try:
                    r = run_json(B.pinned(cmd), timeout=scale["cycle_max_s"] * 10 + 120)
                    samples.setdefault(key, []).append(r["ops"] / r["seconds"])
                except Unsupported as e:
                    out["skipped"][ck] = f"skipped: not in this checkout ({e})"
                except Exception as e:  # noqa: BLE001
                    out["errors"][ck] = str(e)
                    B.log(f"{ck}: {e}")
    finally:
        B.pin_pids(pids, False)
    for key, vals in samples.items():
        ops = statistics.median(vals)
        out["cycles"][key] = {"ops_per_s": ops, "us_per_op": 1e6 / ops, "samples_ops_per_s": vals}


def guarded(out: dict, key: str, fn):
    """Runs fn() into out[section][key]-style results: returns its value,
    or records Unsupported / an error and returns None."""
    try:
        return fn()
    except Unsupported as e:
        out["skipped"][key] = f"skipped: not in this checkout ({e})"
    except Exception as e:  # noqa: BLE001
        out["errors"][key] = str(e)
        B.log(f"{key}: {e}")
    return None


def peer_ok(lib: str, status: dict, out: dict, key: str, smoke: bool) -> bool:
    if lib in status:
        out["skipped"][key] = status[lib]
        return False
    if smoke and not lib.startswith("watchlock"):
        out["skipped"][key] = "skipped: smoke runs only watchlock's side of this scenario"
        return False
    if smoke and lib == "watchlock-py":
        out["skipped"][key] = "skipped: smoke runs only the C side (the Python side is the bindings' tests')"
        return False
    return True


# ---- issue 21.11: Redlock over 5 masters --------------------------------------------

# The quorum client's restart rule (issue 21) keeps a member whose uptime is
# below the longest lease the client uses out of every majority: a server
# started a moment ago looks like one that just restarted. The workers' lease
# is 10 s, so the masters must be older than that before the first acquire.
# bench.py starts them before its set-up (builds, pip), which takes most of
# that time anyway; the scenario waits for the rest.
MASTER_MIN_AGE_S = 11.0
_masters: list = []
_masters_started = [0.0]


def start_masters() -> None:
    """Starts the 5 masters of (h) now (bench.py calls this before its set-up)."""
    if not _masters:
        _masters_started[0] = time.monotonic()
        for _ in range(MASTERS):
            _masters.append(B.RedisServer().start())


def stop_masters() -> None:
    while _masters:
        _masters.pop().close()

REDLOCK_LIBS = ["watchlock-c", "watchlock-py", "pottery", "redsync", "node-redlock"]


def scenario_redlock(srv, scale: dict, status: dict) -> dict:
    ws = WAVE_SCALES[scale["mode"]]
    smoke = scale["mode"] == "smoke"
    out: dict = {"errors": {}, "skipped": {}, "cycles": {}, "handoff": {}, "masters": MASTERS}
    start_masters()
    age = time.monotonic() - _masters_started[0]
    if age < MASTER_MIN_AGE_S:
        B.log(f"redlock: waiting {MASTER_MIN_AGE_S - age:.1f} s until the masters are older than the 10 s lease "
              "(the quorum's restart rule)")
        time.sleep(MASTER_MIN_AGE_S - age)
    out["master_wait_s"] = max(0.0, MASTER_MIN_AGE_S - age)
    with contextlib.ExitStack() as stack:
        stack.callback(stop_masters)
        servers = list(_masters)
        one, five = servers[0].url, " ".join(s.url for s in servers)
        pids = [s.proc.pid for s in servers]
        ports = tuple(s.port for s in servers)

        def flush():
            for s in servers:
                s.command("FLUSHALL")

        # Uncontended cycle, pinned with all 5 servers on the one core.
        jobs = []
        for lib in REDLOCK_LIBS:
            for n, urls in ((1, one), (MASTERS, five)):
                key = f"{lib}:{n}"
                if peer_ok(lib, status, out, "cycle:" + key, smoke):
                    jobs.append((key, cmd_of(lib, "cycle", urls, scale["cycle_n"], scale["cycle_max_s"])))
        B.log(f"redlock: uncontended cycles over 1 and {MASTERS} masters ({time.monotonic() - B.T0:.0f} s)")
        cycles(jobs, scale, pids, out)

        # Hand-off under 8 contenders, queue mode, over the 5 masters.
        for lib in REDLOCK_LIBS:
            if not peer_ok(lib, status, out, f"handoff:{lib}", smoke):
                continue
            B.log(f"redlock: hand-off {lib} over {MASTERS} masters ({time.monotonic() - B.T0:.0f} s)")
            r = guarded(out, f"handoff:{lib}",
                        lambda: handoff(lib, five, scale["handoff_s"], True, flush, ports=ports))
            if r is not None:
                out["handoff"][lib] = r

        # One watchdog holds many locks over the 5 masters.
        if "watchlock-c" not in status:
            admin = ",".join(f"127.0.0.1:{p}" for p in ports)
            n, hold = ws["q_wd_locks"], ws["q_wd_hold_s"]
            B.log(f"redlock: {n} locks over {MASTERS} masters for {hold:g} s ({time.monotonic() - B.T0:.0f} s)")
            flush()

            def wd():
                r = run_json([B.WLBENCH, "watchdog", five, admin, 0, n, B.WD_LEASE_MS, hold, "--sample-ms", 250],
                             timeout=hold * 4 + 600)
                return B.derive_watchdog(r)
            r = guarded(out, "watchdog:watchlock-c", wd)
            if r is not None:
                out["watchdog"] = r
    return out


# ---- issue 22.7: fair lock and semaphore --------------------------------------------

# (key, lib, kind) of the fair hand-off; greedy: each process contends again at once.
FAIR_HANDOFF = [("watchlock-c fair", "watchlock-c", "fair"), ("watchlock-c semaphore", "watchlock-c", "sem"),
                ("watchlock-py fair", "watchlock-py", "fair"), ("watchlock-c plain", "watchlock-c", "plain"),
                ("redis-py", "redis-py", "plain"), ("python-redis-lock", "python-redis-lock", "plain"),
                ("redisson RFairLock", "redisson", "fair"),
                ("redisson RPermitExpirableSemaphore", "redisson", "sem"), ("redisson RLock", "redisson", "plain")]
FAIR_CYCLE = [("watchlock-c plain", "watchlock-c", "plain"), ("watchlock-c fair", "watchlock-c", "fair"),
              ("watchlock-c semaphore", "watchlock-c", "sem"), ("watchlock-py plain", "watchlock-py", "plain"),
              ("watchlock-py fair", "watchlock-py", "fair"), ("redisson RLock", "redisson", "plain"),
              ("redisson RFairLock", "redisson", "fair"),
              ("redisson RPermitExpirableSemaphore", "redisson", "sem")]


def scenario_fair(srv, scale: dict, status: dict) -> dict:
    ws = WAVE_SCALES[scale["mode"]]
    smoke = scale["mode"] == "smoke"
    out: dict = {"errors": {}, "skipped": {}, "cycles": {}, "handoff": {}}
    flush = lambda: srv.command("FLUSHALL")  # noqa: E731
    jobs = [(key, cmd_of(lib, "cycle", srv.url, scale["cycle_n"], scale["cycle_max_s"], kind=kind))
            for key, lib, kind in FAIR_CYCLE if peer_ok(lib, status, out, f"cycle:{key}", smoke)]
    B.log(f"fair: uncontended cycles ({time.monotonic() - B.T0:.0f} s)")
    cycles(jobs, scale, [srv.proc.pid], out)
    for key, lib, kind in FAIR_HANDOFF:
        if not peer_ok(lib, status, out, f"handoff:{key}", smoke):
            continue
        B.log(f"fair: hand-off (greedy) {key} ({time.monotonic() - B.T0:.0f} s)")
        r = guarded(out, f"handoff:{key}", lambda: handoff(lib, srv.url, scale["handoff_s"], False, flush,
                                                           kind=kind, ports=(srv.port,)))
        if r is not None:
            out["handoff"][key] = r
    if "watchlock-c" not in status:
        out["queue_cost"] = {}
        for w in sorted({10, ws["queue_waiters"] // 10, ws["queue_waiters"]}):
            B.log(f"fair: the releaser's cost with {w} queued waiters ({time.monotonic() - B.T0:.0f} s)")
            flush()
            r = guarded(out, f"queue_cost:{w}", lambda: run_json(
                ["env", "WLBENCH_KIND=fair", f"WLBENCH_SETTLE_MS={ws['queue_settle_ms']}", B.WLBENCH, "queuecost",
                 srv.url, "127.0.0.1", srv.port, w, ws["queue_cycles"]], timeout=600))
            if r is not None:
                out["queue_cost"][str(w)] = r
    return out


# ---- issue 23.6: read-write lock ----------------------------------------------------


RW_CYCLE = [("watchlock-c plain", "watchlock-c", "plain"), ("watchlock-c read", "watchlock-c", "read"),
            ("watchlock-c write", "watchlock-c", "write"), ("redisson RLock", "redisson", "plain"),
            ("redisson read", "redisson", "read"), ("redisson write", "redisson", "write")]


def scenario_rwlock(srv, scale: dict, status: dict) -> dict:
    ws = WAVE_SCALES[scale["mode"]]
    smoke = scale["mode"] == "smoke"
    out: dict = {"errors": {}, "skipped": {}, "cycles": {}, "mix": {}, "readers": READERS}
    flush = lambda: srv.command("FLUSHALL")  # noqa: E731
    jobs = [(key, cmd_of(lib, "cycle", srv.url, scale["cycle_n"], scale["cycle_max_s"], kind=kind))
            for key, lib, kind in RW_CYCLE if peer_ok(lib, status, out, f"cycle:{key}", smoke)]
    B.log(f"rwlock: uncontended cycles ({time.monotonic() - B.T0:.0f} s)")
    cycles(jobs, scale, [srv.proc.pid], out)
    for lib in ("watchlock-c", "redisson"):
        if not peer_ok(lib, status, out, f"mix:{lib}", smoke):
            continue
        B.log(f"rwlock: {READERS} readers + 1 writer, {lib} ({time.monotonic() - B.T0:.0f} s)")

        def mix():
            g = run_group(lambda shm: [cmd_of(lib, "rwmix", srv.url, shm, i, B.HOLD_US, 1 if i == READERS else 0)
                                       for i in range(READERS + 1)], ws["mix_s"], flush)
            rd = [r for r in g["results"] if not r["write"]]
            wr = [r for r in g["results"] if r["write"]]
            rw = sorted(x for r in rd for x in r["wait_ns"])
            ww = sorted(x for r in wr for x in r["wait_ns"])
            s = ws["mix_s"]
            return {"seconds": s, "reads_per_s": sum(r["turns"] for r in rd) / s,
                    "writes_per_s": sum(r["turns"] for r in wr) / s,
                    "read_wait_p50_ms": B.pct(rw, 0.5) / 1e6, "read_wait_p99_ms": B.pct(rw, 0.99) / 1e6,
                    "write_wait_p50_ms": B.pct(ww, 0.5) / 1e6, "write_wait_p99_ms": B.pct(ww, 0.99) / 1e6,
                    "write_wait_max_ms": (ww[-1] / 1e6) if ww else float("nan"),
                    "writer_timeouts": sum(r["timeouts"] for r in wr),
                    "mutual_exclusion_violations": g["violations"]}
        r = guarded(out, f"mix:{lib}", mix)
        if r is not None:
            out["mix"][lib] = r
    return out


# ---- targets and tables -------------------------------------------------------------


def _ratio(cyc: dict, a: str, b: str):
    """us per cycle of a / of b, or None."""
    if a in cyc and b in cyc:
        return cyc[a]["us_per_op"] / cyc[b]["us_per_op"]
    return None


def targets(res: dict) -> list:
    """[(title, [(target, measured, verdict)])] of issues 21, 22 and 23."""
    groups = []
    t = []
    rl = res.get("redlock") or {}
    if rl.get("not_run"):
        t.append(("Redlock scenario", "not run (--only)", "n/a"))
    else:
        cyc = rl.get("cycles", {})
        for lib in ("watchlock-c", "watchlock-py"):
            r = _ratio(cyc, f"{lib}:{MASTERS}", f"{lib}:1")
            t.append((f"{lib}: cycle over {MASTERS} masters <= {QUORUM_CYCLE_RATIO}x over one",
                      f"{r:.2f}x" if r else "not measured", B.verdict(r <= QUORUM_CYCLE_RATIO) if r else "n/a"))
            for peer in ("pottery", "redsync", "node-redlock"):
                me, them = cyc.get(f"{lib}:{MASTERS}"), cyc.get(f"{peer}:{MASTERS}")
                name = f"{lib} faster than {peer} over {MASTERS} masters"
                if me and them:
                    x = me["ops_per_s"] / them["ops_per_s"]
                    t.append((name, f"{me['ops_per_s']:.0f} vs {them['ops_per_s']:.0f} cycles/s = {x:.2f}x",
                              B.verdict(x > 1)))
                else:
                    t.append((name, "not measured", "n/a"))
        for lib in ("watchlock-c", "watchlock-py"):
            h = rl.get("handoff", {}).get(lib)
            name = f"{lib} hand-off woken, not polled (<= 3 scripts/acquire/master)"
            if h:
                x = h["script_calls_per_acquire_per_master"]
                t.append((name, f"{x:.2f} scripts per acquire per master", B.verdict(x <= 3)))
            else:
                t.append((name, "not measured", "n/a"))
        wd = rl.get("watchdog")
        name = f"10,000 locks over {MASTERS} masters, one watchdog, 60 s: 0 lost"
        if wd:
            text = f"{wd['lost']} lost of {wd['locks']} in {wd['hold_s']:.0f} s"
            full = wd["locks"] >= 10000 and wd["hold_s"] >= 59
            t.append((name, text if full else f"full mode only; here {text}",
                      B.verdict(wd["lost"] == 0) if full else "n/a"))
        else:
            t.append((name, "not measured", "n/a"))
    groups.append(("Issue 21 targets (Redlock)", t))

    t = []
    fr = res.get("fair") or {}
    if fr.get("not_run"):
        t.append(("fair lock and semaphore scenario", "not run (--only)", "n/a"))
    else:
        ho, cyc = fr.get("handoff", {}), fr.get("cycles", {})
        base, prl = ho.get("redis-py"), ho.get("python-redis-lock")
        for key in ("watchlock-c fair", "watchlock-c semaphore", "watchlock-py fair"):
            h = ho.get(key)
            if h is None:
                t.append((f"{key} hand-off (greedy, 8 x 1 ms)", "not measured", "n/a"))
                continue
            t.append((f"{key}: hand-offs in arrival order", f"{h['in_order_frac'] * 100:.1f}% in order "
                      f"({h['out_of_order']} of {h['turns']} not)", B.verdict(h["in_order_frac"] >= 0.99)))
            t.append((f"{key}: p50 <= {FAIR_P50_MS} ms", f"{h['p50_ms']:.3f} ms", B.verdict(h["p50_ms"] <= FAIR_P50_MS)))
            t.append((f"{key}: p99 <= {FAIR_P99_MS} ms", f"{h['p99_ms']:.3f} ms", B.verdict(h["p99_ms"] <= FAIR_P99_MS)))
            t.append((f"{key}: releaser share <= 1/8", f"{h['releaser_share']:.3f}",
                      B.verdict(h["releaser_share"] <= 1 / 8)))
            for peer, need, r in (("redis-py", 20, base), ("python-redis-lock", 1, prl)):
                name = f"{key}: hand-offs/s >= {need}x {peer}"
                if r is None:
                    t.append((name, "not measured", "n/a"))
                    continue
                x = h["handoffs_per_s"] / r["handoffs_per_s"] if r["handoffs_per_s"] else float("inf")
                t.append((name, f"{h['handoffs_per_s']:.0f}/s vs {r['handoffs_per_s']:.1f}/s = {x:.1f}x",
                          B.verdict(x >= need)))
        for a, b in (("watchlock-c fair", "watchlock-c plain"), ("watchlock-c semaphore", "watchlock-c plain"),
                     ("watchlock-py fair", "watchlock-py plain")):
            r = _ratio(cyc, a, b)
            t.append((f"uncontended cycle: {a} <= {FAIR_CYCLE_RATIO}x {b}", f"{r:.2f}x" if r else "not measured",
                      B.verdict(r <= FAIR_CYCLE_RATIO) if r else "n/a"))
        qc = fr.get("queue_cost") or {}
        big = max((int(k) for k in qc), default=0)
        name = f"10,000 queued waiters cost the releaser <= {QUEUE_COST_RATIO}x what 10 do"
        if "10" in qc and big > 10:
            x = qc[str(big)]["release_us"] / qc["10"]["release_us"]
            text = (f"release {qc[str(big)]['release_us']:.0f} vs {qc['10']['release_us']:.0f} us = {x:.2f}x "
                    f"(server {qc[str(big)]['server_us_per_release']:.0f} vs {qc['10']['server_us_per_release']:.0f})")
            t.append((name, text if big >= 10000 else f"{big} waiters here: {text}",
                      B.verdict(x <= QUEUE_COST_RATIO) if big >= 10000 else "n/a"))
        else:
            t.append((name, "not measured", "n/a"))
    groups.append(("Issue 22 targets (fair lock, semaphore)", t))

    t = []
    rw = res.get("rwlock") or {}
    if rw.get("not_run"):
        t.append(("read-write lock scenario", "not run (--only)", "n/a"))
    else:
        r = _ratio(rw.get("cycles", {}), "watchlock-c read", "watchlock-c plain")
        t.append((f"read-lock cycle <= {READ_CYCLE_RATIO}x the plain lock's", f"{r:.2f}x" if r else "not measured",
                  B.verdict(r <= READ_CYCLE_RATIO) if r else "n/a"))
        m = rw.get("mix", {}).get("watchlock-c")
        t.append((f"{READERS} readers + 1 writer: exclusion held, the writer not starved",
                  f"{m['mutual_exclusion_violations']} violations, {m['writes_per_s']:.0f} writes/s, "
                  f"writer wait p99 {m['write_wait_p99_ms']:.2f} ms" if m else "not measured",
                  B.verdict(m["mutual_exclusion_violations"] == 0 and m["writes_per_s"] > 0) if m else "n/a"))
    groups.append(("Issue 23 targets (read-write lock)", t))
    return groups


def _why(sec: dict, key: str) -> str:
    return B.short(sec.get("skipped", {}).get(key) or sec.get("errors", {}).get(key) or "n/a")


def _handoff_rows(sec: dict, keys: list, extra: bool) -> list:
    lines = [f"| {'library':<36} | {'hand-offs/s':>11} | {'p50 ms':>7} | {'p99 ms':>7} | {'in order':>8} | "
             f"{'releaser':>8} | {'viol.':>5} |" + (f" {'scripts/acq':>11} | {'cmds/acq':>8} | waits for" if extra else ""),
             f"|{'-' * 38}|{'-' * 13}|{'-' * 9}|{'-' * 9}|{'-' * 10}|{'-' * 10}|{'-' * 7}|"
             + (f"{'-' * 13}|{'-' * 10}|{'-' * 26}" if extra else "")]
    for key in keys:
        h = sec.get("handoff", {}).get(key)
        if h is None:
            lines.append(f"| {key:<36} | {_why(sec, 'handoff:' + key)}")
            continue
        row = (f"| {key:<36} | {h['handoffs_per_s']:>11.1f} | {h['p50_ms']:>7.3f} | {h['p99_ms']:>7.3f} | "
               f"{h['in_order_frac'] * 100:>7.1f}% | {h['releaser_share']:>8.3f} | "
               f"{h['mutual_exclusion_violations']:>5} |")
        if extra:
            row += (f" {h.get('script_calls_per_acquire', 0):>11.1f} | {h.get('commands_per_acquire', 0):>8.1f} | "
                    f"{WAKEUP.get(key, '')}")
        lines.append(row)
    return lines


def table(res: dict) -> list:
    lines = []
    rl = res.get("redlock") or {}
    lines.append(f"(h) Redlock: {MASTERS} masters on loopback (issue 21)")
    if rl.get("not_run") or not rl:
        lines += ["  not run (--only)", ""]
    else:
        cyc = rl["cycles"]
        lines.append(f"| {'library':<14} | {'1 master c/s':>12} | {'us':>7} | {f'{MASTERS} masters c/s':>13} | "
                     f"{'us':>7} | {f'{MASTERS}/1':>6} |")
        lines.append(f"|{'-' * 16}|{'-' * 14}|{'-' * 9}|{'-' * 15}|{'-' * 9}|{'-' * 8}|")
        for lib in REDLOCK_LIBS:
            a, b = cyc.get(f"{lib}:1"), cyc.get(f"{lib}:{MASTERS}")
            if a is None and b is None:
                lines.append(f"| {lib:<14} | {_why(rl, f'cycle:{lib}:{MASTERS}')}")
                continue
            f = lambda c, s: format(c["ops_per_s"], ">12.0f") if c else format("n/a", ">12")  # noqa: E731
            us = lambda c: format(c["us_per_op"], ">7.1f") if c else format("n/a", ">7")  # noqa: E731
            lines.append(f"| {lib:<14} | {f(a, 12)} | {us(a)} | "
                         f"{(format(b['ops_per_s'], '>13.0f') if b else format('n/a', '>13'))} | {us(b)} | "
                         f"{(format(b['us_per_op'] / a['us_per_op'], '>5.2f') + 'x') if a and b else '   n/a'} |")
        lines.append(f"(uncontended acquire + release, pinned with all {MASTERS} servers on one core; "
                     f"hand-off: {CONTENDERS} processes, 1 ms hold, queue mode, over the {MASTERS} masters; "
                     "scripts/acq and cmds/acq: INFO commandstats deltas summed over the masters per turn)")
        lines += _handoff_rows(rl, REDLOCK_LIBS, True)
        wd = rl.get("watchdog")
        if wd:
            lines.append(f"  watchdog over {MASTERS} masters: {wd['locks']} locks, lease {wd['lease_ms']} ms, "
                         f"{wd['hold_s']:.0f} s: lost {wd['lost']}, renewals/lock/interval "
                         f"{B.fmt(wd.get('renewals_per_lock_interval'), '.3f')}, lowest remaining lease "
                         f"{(wd.get('min_remaining_frac') or 0) * 100:.0f}%, RSS/lock {wd['rss_per_lock_b']:.0f} B, "
                         f"watchdog CPU {wd.get('renewal_cpu_pct', 0):.1f}%")
        else:
            lines.append(f"  watchdog over {MASTERS} masters: {_why(rl, 'watchdog:watchlock-c')}")
    lines.append("")

    fr = res.get("fair") or {}
    lines.append("(i) Fair lock and semaphore (issue 22): hand-off, 8 processes, 1 ms hold, greedy "
                 "(each contends again at once)")
    if fr.get("not_run") or not fr:
        lines += ["  not run (--only)", ""]
    else:
        lines += _handoff_rows(fr, [k for k, _, _ in FAIR_HANDOFF], False)
        lines.append("  (in order: grants that found no earlier arrival still waiting; releaser: share of turns "
                     "the releaser took again)")
        lines.append("  uncontended cycle, pinned: " + "; ".join(
            f"{k} {fr['cycles'][k]['us_per_op']:.1f} us" if k in fr["cycles"] else f"{k} {_why(fr, 'cycle:' + k)}"
            for k, _, _ in FAIR_CYCLE))
        qc = fr.get("queue_cost") or {}
        if qc:
            lines.append("  releaser's cost with queued waiters: " + "; ".join(
                f"{k} waiters: release {v['release_us']:.1f} us, server {v.get('server_us_per_release', 0):.1f} us"
                for k, v in sorted(qc.items(), key=lambda kv: int(kv[0]))))
        else:
            lines.append(f"  releaser's cost with queued waiters: {_why(fr, 'queue_cost:10')}")
    lines.append("")

    rw = res.get("rwlock") or {}
    lines.append(f"(j) Read-write lock (issue 23): {READERS} readers + 1 writer, 1 ms holds, each contends again "
                 "at once")
    if rw.get("not_run") or not rw:
        lines += ["  not run (--only)", ""]
    else:
        lines.append(f"| {'library':<12} | {'reads/s':>8} | {'writes/s':>8} | {'read wait p50/p99 ms':>21} | "
                     f"{'write wait p50/p99/max ms':>26} | {'w. timeouts':>11} | {'viol.':>5} |")
        lines.append(f"|{'-' * 14}|{'-' * 10}|{'-' * 10}|{'-' * 23}|{'-' * 28}|{'-' * 13}|{'-' * 7}|")
        for lib in ("watchlock-c", "redisson"):
            m = rw.get("mix", {}).get(lib)
            if m is None:
                lines.append(f"| {lib:<12} | {_why(rw, 'mix:' + lib)}")
                continue
            lines.append(f"| {lib:<12} | {m['reads_per_s']:>8.0f} | {m['writes_per_s']:>8.1f} | "
                         f"{m['read_wait_p50_ms']:>10.3f} / {m['read_wait_p99_ms']:<8.3f} | "
                         f"{m['write_wait_p50_ms']:>8.2f} / {m['write_wait_p99_ms']:.2f} / "
                         f"{m['write_wait_max_ms']:<7.1f} | {m['writer_timeouts']:>11} | "
                         f"{m['mutual_exclusion_violations']:>5} |")
        lines.append("  uncontended cycle, pinned: " + "; ".join(
            f"{k} {rw['cycles'][k]['us_per_op']:.1f} us" if k in rw["cycles"] else f"{k} {_why(rw, 'cycle:' + k)}"
            for k, _, _ in RW_CYCLE))
    lines.append("")
    return lines


def failures(res: dict) -> list:
    """watchlock failures in these scenarios (messages); peers never fail the run."""
    bad = []
    for sec in ("redlock", "fair", "rwlock"):
        s = res.get(sec) or {}
        for key, err in s.get("errors", {}).items():
            if "watchlock" in key or key == "all" or key.startswith("queue_cost") or key.startswith("watchdog"):
                bad.append(f"{sec} {key}: {err}")
        for key, h in s.get("handoff", {}).items():
            if h["mutual_exclusion_violations"] and "watchlock" in key:
                bad.append(f"{sec} {key}: {h['mutual_exclusion_violations']} mutual exclusion violations")
        for key, m in s.get("mix", {}).items():
            if m["mutual_exclusion_violations"] and "watchlock" in key:
                bad.append(f"{sec} {key}: {m['mutual_exclusion_violations']} mutual exclusion violations")
    wd = (res.get("redlock") or {}).get("watchdog")
    if wd and (wd["lost"] or wd["release_failures"]):
        bad.append(f"redlock watchdog: {wd['lost']} lost, {wd['release_failures']} release failures")
    return bad
