"""tests/faults/preload_keeper.py - the fault suite's preload scenario (issue 33), variant
"keeper" of tests/faults/run (`tests/faults/run -s keeper`): SIGKILL of a host's keeper while
its programs hold their locks through the shim, and its restart.

Two "hosts" are mount namespaces with a private tmpfs on the lock directory (as in
tests/preload; needs root, skipped without). On each host two Python workers, run under the
shim, loop: flock(LOCK_EX) on one file, enter (a mkdir witness in a directory both hosts share),
check their WATCHLOCK_FENCE against the shared counter (a stale token is a violation), hold,
leave, unlock. In each trial the runner waits until a worker of host A is inside on a long hold
and SIGKILLs host A's keeper (the owner pid of the distributed lock). The host's locks are then
lost (their leases run out), so the contract is: the holder's process group is told (SIGTERM
from the keeper's guardian) before any worker of host B gets in, the holder stops (its handler
records the moment and exits), no two workers are ever inside at once, and the next lock call on
host A starts a new keeper (a later hold of host A shows another owner pid). The checks are
orders and counts, not times; the waits for each step are bounded generously (30-60 s) and
only say that a step never came. The lock's redis-server is the variant's (tests/faults/run's
Env); the results go into run's report like every variant's.
"""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any, Dict

LEASE = "2s"

WORKER = textwrap.dedent("""
    import ctypes, fcntl, os, random, signal, sys, time
    lock, shared, host, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    rnd = random.Random(seed)
    inside = os.path.join(shared, "inside")
    log = os.path.join(shared, "events")
    def event(*words):
        with open(log, "a") as f:
            f.write(" ".join(str(w) for w in (time.monotonic(), host, os.getpid()) + words) + "\\n")
    def told(sig, frame):
        event("told")
        try:
            if open(os.path.join(inside, "who")).read() == str(os.getpid()):
                os.unlink(os.path.join(inside, "who"))
                os.rmdir(inside)
        except OSError:
            pass
        os._exit(0)
    signal.signal(signal.SIGTERM, told)
    f = open(lock, "w")
    while not os.path.exists(os.path.join(shared, "stop")):
        fcntl.flock(f, fcntl.LOCK_EX)
        fence = int(libc.getenv(b"WATCHLOCK_FENCE") or 0)
        try:
            os.mkdir(inside)
            open(os.path.join(inside, "who"), "w").write(str(os.getpid()))
        except FileExistsError:
            event("overlap")
        counter = os.path.join(shared, "counter")
        last = int(open(counter).read()) if os.path.exists(counter) else 0
        if fence <= last:
            event("stale", fence, last)
        open(counter + ".tmp", "w").write(str(fence))
        os.rename(counter + ".tmp", counter)
        long = os.path.exists(os.path.join(shared, "long-" + host))
        event("enter", fence, "long" if long else "short")
        end = time.monotonic() + (8.0 if long else rnd.uniform(0.01, 0.05))
        while time.monotonic() < end:
            time.sleep(0.005)
        event("leave")
        try:
            os.unlink(os.path.join(inside, "who"))
            os.rmdir(inside)
        except OSError:
            pass
        fcntl.flock(f, fcntl.LOCK_UN)
        time.sleep(rnd.uniform(0.0, 0.03))
""")


class Host:
    def __init__(self, lockdir):
        self.proc = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             f"mount -t tmpfs none '{lockdir}' && echo ready && exec sleep 1000000 >/dev/null"],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def popen(self, args, env):
        return subprocess.Popen(["nsenter", "-t", str(self.proc.pid), "-m", "--"] + args, env=env,
                                start_new_session=True)

    def close(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


def events(shared):
    path = os.path.join(shared, "events")
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        w = line.split()
        if len(w) >= 4:
            out.append((float(w[0]), w[1], int(w[2]), w[3], w[4:]))
    return out


def wait_for(pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.005)
    return pred()


def scen_keeper(env: Any, trials: int) -> Dict[str, Any]:
    """The variant's trials on env (tests/faults/run's Env: its lock server, budget, fault
    events); returns the scenario's measurements and checks."""
    m: Dict[str, Any] = {"checks": [], "notes": [], "told_ms": [], "b_in_ms": []}
    if os.geteuid() != 0:
        m["skipped"] = "needs root for unshare -m / mount"
        return m
    cli = env.cfg.cli
    build = os.path.dirname(os.path.dirname(os.path.abspath(cli)))
    shim = os.environ.get("WATCHLOCK_PRELOAD_LIB") or os.path.join(build, "preload", "libwatchlock_preload.so")
    if not os.path.exists(shim):
        m["checks"].append((f"the preload shim {shim} is missing (WATCHLOCK_PRELOAD_LIB)", False))
        return m
    tmp = tempfile.mkdtemp(prefix="keeper-", dir=env.dir)
    lockdir, shared = os.path.join(tmp, "locks"), os.path.join(tmp, "shared")
    os.makedirs(lockdir)
    os.makedirs(shared)
    url = f"redis://127.0.0.1:{env.lock_srv.port}"
    hosts = [Host(lockdir), Host(lockdir)]
    penv = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    penv.update(LD_PRELOAD=shim, WATCHLOCK_URL=url, WATCHLOCK_PATHS=f"{lockdir}/*", WATCHLOCK_PRELOAD_LEASE=LEASE,
                WATCHLOCK_PRELOAD_LOG=os.path.join(tmp, "log"))
    lock = os.path.join(lockdir, "job.lock")
    workers = []
    failures = m["checks"]
    rnd = random.Random(env.rng.randrange(1 << 30))

    def fail(msg: str) -> None:
        failures.append((msg, False))

    def status():
        r = subprocess.run([cli, "status", "--json", "--url", url, lock], capture_output=True, text=True)
        return json.loads(r.stdout) if r.stdout else {}

    def spawn(h, name):
        workers.append(hosts[h].popen([sys.executable, "-c", WORKER, lock, shared, name, str(rnd.randrange(1 << 30))],
                                      penv))

    try:
        for h, name in ((0, "A"), (0, "A"), (1, "B"), (1, "B")):
            spawn(h, name)
        keepers_seen = set()
        for trial in range(trials):
            if env.left() < 10:
                break
            open(os.path.join(shared, "long-A"), "w").close()
            mark = len(events(shared))
            got = wait_for(lambda: [e for e in events(shared)[mark:] if e[1] == "A" and e[3] == "enter"
                                    and e[4][1] == "long"], 60)
            if not got:
                fail(f"trial {trial}: no worker of host A got in within 60 s")
                break
            os.unlink(os.path.join(shared, "long-A"))
            holder = got[0][2]
            keeper = status().get("owner", {}).get("pid")
            if not keeper:
                fail(f"trial {trial}: no owner pid for the held lock")
                break
            keepers_seen.add(keeper)
            t_kill = time.monotonic()
            os.kill(keeper, signal.SIGKILL)
            env.fault("keeper_sigkill", target="A", pids=[keeper], trial=trial, holder=holder)
            told = wait_for(lambda: [e for e in events(shared) if e[2] == holder and e[3] == "told"], 30)
            b_in = wait_for(lambda: [e for e in events(shared) if e[1] == "B" and e[3] == "enter" and e[0] > t_kill],
                            30)
            if not told:
                fail(f"trial {trial}: host A's holder {holder} was never told of the loss")
            elif b_in and b_in[0][0] < told[0][0]:
                fail(f"trial {trial}: host B got in {1000 * (told[0][0] - b_in[0][0]):.0f} ms before "
                     f"host A's holder was told")
            if told:
                m["told_ms"].append(1000 * (told[0][0] - t_kill))
            if b_in:
                m["b_in_ms"].append(1000 * (b_in[0][0] - t_kill))
            # the told holder exited: a new worker on host A; its next hold needs a new keeper
            spawn(0, "A")
            a_again = wait_for(lambda: [e for e in events(shared) if e[1] == "A" and e[3] == "enter" and
                                        e[0] > t_kill], 60)
            new_keeper = None
            if a_again:
                new_keeper = wait_for(lambda: (lambda st: st.get("owner", {}).get("pid") if st.get("writer")
                                               and st.get("owner", {}).get("pid") not in keepers_seen else None)(
                    status()), 20)
            if not a_again:
                fail(f"trial {trial}: host A never locked again after its keeper's SIGKILL")
            m.setdefault("notes", []).append(
                f"trial {trial}: keeper {keeper} SIGKILLed; holder told after {m['told_ms'][-1]:.0f} ms; host B in "
                f"after {m['b_in_ms'][-1]:.0f} ms; host A locked again"
                f"{' (new keeper ' + str(new_keeper) + ')' if new_keeper else ''}"
                if told and b_in and a_again else f"trial {trial}: incomplete")
        open(os.path.join(shared, "stop"), "w").close()
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()
        ev = events(shared)
        overlaps = [e for e in ev if e[3] == "overlap"]
        stale = [e for e in ev if e[3] == "stale"]
        m["holds"] = sum(1 for e in ev if e[3] == "enter")
        if m["told_ms"] and m["b_in_ms"]:
            m["notes"].append(f"keeper SIGKILL to the holder told: max {max(m['told_ms']):.0f} ms; to host B in: "
                              f"min {min(m['b_in_ms']):.0f} ms (lease {LEASE})")
        failures.append((f"no two workers inside at once through the shim ({m['holds']} holds, "
                         f"{len(overlaps)} overlaps)", not overlaps))
        failures.append((f"no stale fencing token accepted ({len(stale)})", not stale))
        return m
    finally:
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()
        for h in hosts:
            h.close()
