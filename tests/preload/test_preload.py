"""The preload shim (libwatchlock_preload.so, docs/preload.md) with real
processes and a real redis-server.

Two "hosts" are two mount namespaces (unshare -m) that share pids, the
network and /tmp, each with a private tmpfs on the lock directory: both
kernel locks succeed, so only the distributed lock can keep the hosts apart.
Every test that claims exclusion also shows that without the shim the same
steps overlap (the test can fail). Needs root (unshare, mount, nsenter).
"""
import ctypes  # noqa: F401  (used in the worker source below)
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from proxy import Proxy, control  # noqa: E402
import waiting  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LONG = os.environ.get("WATCHLOCK_PRELOAD_LONG") == "1"


def _build_dir():
    cli = os.environ.get("WATCHLOCK_CLI")
    if cli:
        return os.path.dirname(os.path.dirname(os.path.abspath(cli)))
    return os.path.join(HERE, "..", "..", "build")


BUILD = _build_dir()
CLI = os.path.join(BUILD, "cli", "watchlock")
SHIM = os.environ.get("WATCHLOCK_PRELOAD_LIB") or os.path.join(BUILD, "preload", "libwatchlock_preload.so")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for unshare -m / mount")


def wait_for(pred, timeout=20.0, interval=0.005):
    return waiting.wait_for(pred, timeout=timeout, interval=interval)


class Host:
    """A mount namespace with a private tmpfs on `lockdir`; commands run in it through nsenter.
    pidns: also a pid namespace of its own (with its own /proc), where /proc/locks hides the
    flock locks whose taker has exited (the keeper's probe fallback)."""

    def __init__(self, lockdir, pidns=False):
        # --kill-child: the namespace's pid 1 dies with unshare (else it would outlive the test)
        ns = ["-p", "-f", "--kill-child", "--mount-proc"] if pidns else []
        self.proc = subprocess.Popen(
            ["unshare", "-m", *ns, "--propagation", "private", "sh", "-c",
             f"mount -t tmpfs none '{lockdir}' && echo ready $$ && exec sleep 1000000 >/dev/null"],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        words = self.proc.stdout.readline().split()
        assert words[0] == "ready"
        self.target = self.proc.pid
        self.nsflags = ["-m"]
        if pidns:  # the namespace's pid 1 is unshare's child
            self.target = int(open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read().split()[0])
            self.nsflags = ["-m", "-p"]

    def argv(self, args):
        return ["nsenter", "-t", str(self.target), *self.nsflags, "--"] + list(args)

    def popen(self, args, env, **kw):
        return subprocess.Popen(self.argv(args), env=env, **kw)

    def run(self, args, env, timeout=60, **kw):
        return subprocess.run(self.argv(args), env=env, timeout=timeout, **kw)

    def close(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


@pytest.fixture
def world(request, tmp_path, redis_server):
    lockdir = tmp_path / "locks"
    lockdir.mkdir()
    shared = tmp_path / "shared"
    shared.mkdir()
    pidns = getattr(request, "param", False)
    hosts = [Host(str(lockdir), pidns), Host(str(lockdir), pidns)]
    base = dict(os.environ)
    base.pop("LD_PRELOAD", None)
    shim_env = dict(base, LD_PRELOAD=SHIM, WATCHLOCK_URL=redis_server.url,
                    WATCHLOCK_PATHS=f"{lockdir}/*", WATCHLOCK_PRELOAD_LOG=str(tmp_path / "log"),
                    WATCHLOCK_PRELOAD_LEASE="3s")

    class W:
        pass

    w = W()
    w.lockdir, w.shared, w.hosts, w.plain, w.env, w.url = lockdir, shared, hosts, base, shim_env, redis_server.url
    w.lock = str(lockdir / "job.lock")
    w.log = tmp_path / "log"
    yield w
    for h in hosts:
        h.close()


@pytest.fixture(scope="session")
def locker(tmp_path_factory):
    out = tmp_path_factory.mktemp("locker") / "locker"
    subprocess.run(["cc", "-O1", "-Wall", "-o", str(out), os.path.join(HERE, "locker.c")], check=True)
    return str(out)


def status(w, name):
    r = subprocess.run([CLI, "status", "--json", "--url", w.url, name], capture_output=True, text=True)
    return json.loads(r.stdout) if r.stdout else {}


def held(w, name):
    return status(w, name).get("held", False)


def keepers():
    """The pids of all watchlock-keeper processes (keepers and their guardians), from /proc."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"watchlock-keeper"):
            out.append(int(d))
    return out


def lock_name(path, method):
    """The distributed name of a lock taken with locker METHOD: flock locks are named by the
    path, POSIX and OFD locks (the other, independent family) by "posix:" + the path."""
    return path if method.startswith("flock") else "posix:" + path


class Holder:
    """A process holding a lock until told (stdin), in a host."""

    def __init__(self, host, env, args):
        self.p = host.popen(args, env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
        self.first = self.p.stdout.readline().strip()

    def say(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip() if line != "exit" else ""

    def finish(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
            except BrokenPipeError:
                pass
            self.p.wait(timeout=30)


# ---- flock(1): -n, -w, -c ------------------------------------------------------------------

def hold_with_flock(w, host, env):
    """flock(1) -c holding the lock in `host` until the file `release` appears."""
    entered, release = w.shared / "entered", w.shared / "release"
    for f in (entered, release):
        if f.exists():
            f.unlink()
    p = host.popen(["flock", "-n", w.lock, "-c",
                    f"touch {entered}; while [ ! -e {release} ]; do sleep 0.01; done"], env)
    assert wait_for(lambda: entered.exists() or p.poll() is not None, 20)
    return p


@pytest.mark.parametrize("shim", [True, False])
def test_flock_n_two_hosts(world, shim):
    env = world.env if shim else world.plain
    a = hold_with_flock(world, world.hosts[0], env)
    assert (world.shared / "entered").exists()
    b = world.hosts[1].run(["flock", "-n", world.lock, "-c", "true"], env)
    (world.shared / "release").touch()
    assert a.wait(timeout=30) == 0
    if shim:
        assert b.returncode == 1, "host B got inside while host A held the lock"
    else:
        assert b.returncode == 0  # without the shim both hosts are inside: the overlap


def test_flock_w_times_out_then_gets_it(world):
    a = hold_with_flock(world, world.hosts[0], world.env)
    t0 = time.monotonic()
    b = world.hosts[1].run(["flock", "-w", "0.5", world.lock, "-c", "true"], world.env)
    waited = time.monotonic() - t0
    assert b.returncode == 1 and 0.4 <= waited < 5, (b.returncode, waited)  # alarm() -> EINTR
    b = world.hosts[1].popen(["flock", "-w", "20", world.lock, "-c", f"touch {world.shared}/b"], world.env)
    time.sleep(0.3)  # a grace period only for the negative check below, not synchronisation
    assert not (world.shared / "b").exists() and b.poll() is None
    (world.shared / "release").touch()
    assert a.wait(timeout=30) == 0
    assert b.wait(timeout=20) == 0 and (world.shared / "b").exists()


def contend(world, env, rounds, cmd="flock"):
    """Both hosts run flock -c loops; returns the overlaps seen (mkdir as the witness)."""
    inside, overlaps = world.shared / "inside", world.shared / "overlaps"
    body = (f"if mkdir {inside} 2>/dev/null; then sleep 0.02; rmdir {inside}; "
            f"else echo x >> {overlaps}; fi")
    procs = [h.popen(["sh", "-c", f"for i in $(seq {rounds}); do {cmd} {world.lock} -c '{body}'; done"],
                     env) for h in world.hosts]
    for p in procs:
        assert p.wait(timeout=120) == 0
    return overlaps.read_text().count("x") if overlaps.exists() else 0


def test_flock_c_blocking_never_both_inside(world):
    assert contend(world, world.env, 8) == 0
    t0 = time.monotonic()
    assert wait_for(lambda: not held(world, world.lock), 5)  # the last keeper's release detection
    print(f"\nfree {(time.monotonic() - t0) * 1000:.0f} ms after the last contender exited")


def test_flock_c_without_shim_overlaps(world):
    """The witness above works: without the shim blocking loops on two hosts overlap."""
    n = 0
    for _ in range(5):
        n += contend(world, world.plain, 8)
        if n:
            break
    assert n > 0


# ---- the shell idiom: exec 9>f; flock -n 9 || exit 75 ----------------------------------------

@pytest.mark.parametrize("world", [False, True], ids=["", "pidns"], indirect=True)
@pytest.mark.parametrize("shim", [True, False])
def test_shell_exec_idiom(world, shim):
    env = world.env if shim else world.plain
    entered, release = world.shared / "entered", world.shared / "release"
    script = (f"exec 9>{world.lock}; flock -n 9 || exit 75; touch {entered}; "
              f"while [ ! -e {release} ]; do sleep 0.01; done")
    a = world.hosts[0].popen(["sh", "-c", script], env)
    assert wait_for(lambda: entered.exists() or a.poll() is not None)
    assert a.poll() is None  # flock(1) has exited; the shell keeps fd 9 (and the lock)
    b = world.hosts[1].run(["sh", "-c", f"exec 9>{world.lock}; flock -n 9 || exit 75; exit 0"], env)
    release.touch()
    assert a.wait(timeout=30) == 0
    assert b.returncode == (75 if shim else 0)
    if shim:  # the shell's exit closed fd 9: free again, for the other host
        assert wait_for(lambda: not held(world, world.lock), 5)
        c = world.hosts[1].run(["sh", "-c", f"exec 9>{world.lock}; flock -n 9 || exit 75"], env)
        assert c.returncode == 0


# ---- Python fcntl.flock / fcntl.lockf, C programs with F_SETLKW / F_OFD_SETLKW ----------------

PY_LOCKER = textwrap.dedent("""
    import fcntl, sys
    f = open(sys.argv[2], "w")
    how = {"flock": fcntl.flock, "lockf": fcntl.lockf}[sys.argv[1]]
    mode = fcntl.LOCK_SH if sys.argv[4:] == ["sh"] else fcntl.LOCK_EX
    try:
        how(f, mode | (fcntl.LOCK_NB if sys.argv[3] == "nb" else 0))
    except OSError as e:
        print("FAILED", e.errno, flush=True)
        sys.exit(1)
    print("LOCKED", flush=True)
    sys.stdin.readline()
""")


@pytest.mark.parametrize("how", ["flock", "lockf"])
def test_python_fcntl(world, how):
    a = Holder(world.hosts[0], world.env, [sys.executable, "-c", PY_LOCKER, how, world.lock, "block"])
    assert a.first == "LOCKED"
    b = world.hosts[1].run([sys.executable, "-c", PY_LOCKER, how, world.lock, "nb"], world.env,
                           capture_output=True, text=True, input="")
    assert b.stdout.split()[0] == "FAILED" and int(b.stdout.split()[1]) in (11,), b.stdout
    a.finish()
    assert wait_for(lambda: not held(world, lock_name(world.lock, how)), 5)
    b = world.hosts[1].run([sys.executable, "-c", PY_LOCKER, how, world.lock, "nb"], world.env,
                           capture_output=True, text=True, input="")
    assert b.stdout.strip() == "LOCKED"


@pytest.mark.parametrize("method,nb", [("setlkw", "setlk"), ("ofd-setlkw", "ofd-setlk"),
                                       ("flock", "flock-nb"), ("lockf", "tlockf")])
def test_c_programs(world, locker, method, nb):
    a = Holder(world.hosts[0], world.env, [locker, method, world.lock])
    assert a.first.startswith("LOCKED ") and a.first != "LOCKED -", a.first  # fence in the env
    b = world.hosts[1].run([locker, nb, world.lock], world.env, capture_output=True, text=True, input="")
    assert b.stdout.strip() in ("FAILED EWOULDBLOCK",), b.stdout  # EAGAIN == EWOULDBLOCK
    # a blocking request on the other host waits, and gets it once A unlocks
    c = Holder.__new__(Holder)
    c.p = world.hosts[1].popen([locker, method, world.lock], world.env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert a.say("unlock") == "UNLOCKED"
    c.first = c.p.stdout.readline().strip()
    assert c.first.startswith("LOCKED ") and int(c.first.split()[1]) > int(a.first.split()[1])
    c.finish()
    a.finish()


def test_c_program_without_shim_overlaps(world, locker):
    a = Holder(world.hosts[0], world.plain, [locker, "setlkw", world.lock])
    b = world.hosts[1].run([locker, "setlk", world.lock], world.plain, capture_output=True, text=True, input="")
    assert a.first == "LOCKED -" and b.stdout.strip() == "LOCKED -"
    a.finish()


# ---- 5 local + 5 remote contenders, a fenced counter --------------------------------------------

WORKER = textwrap.dedent("""
    import ctypes, fcntl, os, sys
    lock, shared, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    f = open(lock, "w")
    for _ in range(rounds):
        fcntl.flock(f, fcntl.LOCK_EX)
        fence = int(libc.getenv(b"WATCHLOCK_FENCE"))
        inside = os.path.join(shared, "inside")
        try:
            os.mkdir(inside)
        except FileExistsError:
            open(os.path.join(shared, "overlaps"), "a").write("x")
        counter = os.path.join(shared, "counter")
        last, count = map(int, open(counter).read().split()) if os.path.exists(counter) else (0, 0)
        if fence <= last:
            open(os.path.join(shared, "stale"), "a").write(f"{fence}<={last}\\n")
        open(counter + ".tmp", "w").write(f"{fence} {count + 1}")
        os.rename(counter + ".tmp", counter)
        try:
            os.rmdir(inside)
        except FileNotFoundError:
            pass
        fcntl.flock(f, fcntl.LOCK_UN)
""")


def test_five_local_five_remote_fenced_counter(world):
    rounds = 20 if LONG else 3  # per contender: 200 rounds in all in the long mode
    procs = []
    for h in world.hosts:
        for _ in range(5):
            procs.append(h.popen([sys.executable, "-c", WORKER, world.lock, str(world.shared), str(rounds)],
                                 world.env))
    t0 = time.monotonic()
    for p in procs:
        assert p.wait(timeout=600 if LONG else 180) == 0  # no deadlock: every contender finishes
    elapsed = time.monotonic() - t0
    last, count = map(int, (world.shared / "counter").read_text().split())
    assert count == 10 * rounds  # every round served
    assert not (world.shared / "overlaps").exists()
    assert not (world.shared / "stale").exists()
    print(f"\n10 contenders x {rounds} rounds: {elapsed:.2f} s, {elapsed / (10 * rounds) * 1000:.1f} ms/round")


# ---- crashes: holder, keeper ---------------------------------------------------------------------

def test_sigkill_of_the_holder_frees_the_lock(world, locker):
    a = Holder(world.hosts[0], world.env, [locker, "flock", world.lock])
    assert a.first.startswith("LOCKED")
    t0 = time.monotonic()
    os.killpg(a.p.pid, signal.SIGKILL)
    a.p.wait()
    b = world.hosts[1].run(["flock", "-w", "3", world.lock, "-c", "true"], world.env)  # one lease: 3s
    took = time.monotonic() - t0
    assert b.returncode == 0 and took < 3, took
    print(f"\nSIGKILL of the holder -> free on the other host after {took * 1000:.0f} ms")


def test_sigkill_of_the_keeper_frees_the_lock_within_a_lease(world, locker):
    a = Holder(world.hosts[0], world.env, [locker, "flock", world.lock])
    assert a.first.startswith("LOCKED")
    owner = status(world, world.lock)["owner"]  # the write side's one hold records its keeper
    keeper = owner["pid"]
    assert keeper in keepers() and owner["host"] == socket.gethostname() and world.lock in owner["label"], owner
    t0 = time.monotonic()
    os.kill(keeper, signal.SIGKILL)
    b = world.hosts[1].run(["flock", "-w", "6", world.lock, "-c", "true"], world.env)
    took = time.monotonic() - t0
    assert b.returncode == 0 and took < 3 + 1.5, took  # one lease (3s) plus process start-up
    print(f"\nSIGKILL of the keeper -> free on the other host after {took * 1000:.0f} ms")
    a.finish()


@pytest.mark.parametrize("how", ["unlock", "close", "exit"])
def test_release_detection(world, locker, how):
    a = Holder(world.hosts[0], world.env, [locker, "flock", world.lock])
    assert held(world, world.lock)
    t0 = time.monotonic()
    a.say(how)
    if how == "exit":
        a.p.wait()
    assert wait_for(lambda: not held(world, world.lock), 5, 0.002)
    ms = (time.monotonic() - t0) * 1000
    print(f"\nrelease detected {ms:.0f} ms after {how}")
    assert ms < 1000  # the design's figure is <= 100 ms; the bound is generous for a loaded machine
    a.finish()


def test_local_waiters_are_served_one_by_one(world, locker):
    """Two local blocking waiters: the kernel serves them in turn, and the keeper of the
    previous hold hands over (no wait for the release poll or the lease)."""
    a = Holder(world.hosts[0], world.env, [locker, "flock", world.lock])
    b = Holder.__new__(Holder)
    b.p = world.hosts[0].popen([locker, "flock", world.lock], world.env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    a.say("unlock")
    b.first = b.p.stdout.readline().strip()
    assert b.first.startswith("LOCKED"), b.first
    assert time.monotonic() - t0 < 2.5  # not the 3 s lease
    a.say("unlock")  # A re-locking the same fd while B holds: blocks in the kernel
    a.finish()
    b.finish()


# ---- loss under a partition ---------------------------------------------------------------------

TERM_REPORTER = textwrap.dedent("""
    import fcntl, signal, socket, sys
    path, port = sys.argv[1], int(sys.argv[2])
    conn = socket.create_connection(("127.0.0.1", port))  # straight to the server, not the proxy
    def command(*args):
        conn.sendall(("*%d\\r\\n" % len(args) + "".join("$%d\\r\\n%s\\r\\n" % (len(a), a) for a in args)).encode())
        return conn.recv(4096).decode().split("\\r\\n")
    def on_term(sig, frame):
        # the hold's own key: watchlock:{N}:q:h:<id> (the write side of the read-write lock)
        keys = command("KEYS", "watchlock:{%s}:q:h:*" % path)
        print("TERM", command("PTTL", keys[2])[0].lstrip(":") if len(keys) > 2 else "-2", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    f = open(path, "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    print("LOCKED", flush=True)
    while True:
        signal.pause()
""")


def test_loss_signals_the_process_group_before_the_key_expires(world, redis_server):
    with Proxy(redis_server.port) as px:
        # the loss is declared 1% of the lease + safety_margin before the server's expiry: a
        # margin that a loaded machine's scheduling cannot eat (the default is 10 ms)
        env = dict(world.env, WATCHLOCK_URL=px.url + "?safety_margin=300ms", WATCHLOCK_PRELOAD_LEASE="2s")
        a = Holder(world.hosts[0], env, [sys.executable, "-c", TERM_REPORTER, world.lock,
                                         str(redis_server.port)])
        assert a.first == "LOCKED"
        control(px.control_port, "blackhole")
        line = a.p.stdout.readline().split()  # the holder's SIGTERM handler asks the server
        assert line[0] == "TERM", line
        pttl = int(line[1])
        assert pttl > 0, pttl  # the server's key had not expired when the group got SIGTERM
        assert a.p.wait(timeout=10) == 0
        assert "lost the lock" in world.log.read_text()
        print(f"\nholder's group got SIGTERM with {pttl} ms of the server's lease left")
        control(px.control_port, "resume")


# ---- failure modes and pass-through -------------------------------------------------------------

def test_redis_unreachable_fails_closed_or_open(world, locker):
    env = dict(world.env, WATCHLOCK_URL="redis://127.0.0.1:1")
    r = world.hosts[0].run([locker, "flock-nb", world.lock], env, capture_output=True, text=True, input="")
    assert r.stdout.strip() == "FAILED ENOLCK"
    r = world.hosts[0].run([locker, "flock-nb", world.lock], dict(env, WATCHLOCK_PRELOAD_FAIL_OPEN="1"),
                           capture_output=True, text=True, input="")
    assert r.stdout.strip() == "LOCKED -"
    assert "fail-open" in world.log.read_text()


def test_bad_configuration_fails_with_enolck_and_logs_once(world, locker):
    env = dict(world.env, WATCHLOCK_PATHS="relative/*")
    r = world.hosts[0].run(["sh", "-c", f"{locker} flock-nb {world.lock} </dev/null; "
                                        f"{locker} setlk {world.lock} </dev/null"], env,
                           capture_output=True, text=True)
    assert r.stdout.split("\n")[:2] == ["FAILED ENOLCK", "FAILED ENOLCK"]
    env = dict(world.env, WATCHLOCK_PRELOAD_LEASE="bogus")
    r = world.hosts[0].run([locker, "flock-nb", world.lock], env, capture_output=True, text=True, input="")
    assert r.stdout.strip() == "FAILED ENOLCK"
    log = world.log.read_text()
    assert "absolute" in log and "WATCHLOCK_PRELOAD_LEASE" in log


def test_unconfigured_paths_and_other_programs_are_untouched(world, locker, tmp_path):
    other = str(tmp_path / "other.lock")
    for env in (world.env, world.plain):
        r = world.hosts[0].run([locker, "flock-nb", other], env, capture_output=True, text=True, input="")
        assert r.stdout.strip() == "LOCKED -"
    assert not held(world, other)
    prog = [sys.executable, "-c", "import os,sys; print(sorted(k for k in os.environ if 'FENCE' in k)); "
                                  "sys.stdout.write(open('/etc/hostname').read()[:0] + 'ok')"]
    with_shim = subprocess.run(prog, env=world.env, capture_output=True, text=True)
    without = subprocess.run(prog, env=world.plain, capture_output=True, text=True)
    assert (with_shim.returncode, with_shim.stdout, with_shim.stderr) == \
        (without.returncode, without.stdout, without.stderr)
    assert not world.log.exists()


def test_watchlock_exec_sets_up_the_shim(world):
    env = dict(world.plain, WATCHLOCK_URL=world.url)
    r = world.hosts[0].run([CLI, "exec", "--paths", f"{world.lockdir}/*", "--", "flock", "-n", world.lock,
                            "-c", f"{CLI} status --json {world.lock}"], env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["held"] and st["kind"] == "rwlock" and st["writer"], st  # flock -n: LOCK_EX, the write side
    # the hold's owner: the path and the host (issue 24.7)
    assert world.lock in st["owner"]["label"] and st["owner"]["host"] == socket.gethostname(), st
    assert f"on {socket.gethostname()}" in st["owner"]["label"], st
    assert [h["side"] for h in st["holds"]] == ["write"] and world.lock in st["holds"][0]["label"], st
    assert subprocess.run([CLI, "exec", "--", "true"], env=env).returncode == 64  # no --paths


RENAMER = textwrap.dedent("""
    import fcntl, os, subprocess, sys
    lockdir, cli, url = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(os.path.join(lockdir, "sub"), exist_ok=True)
    outside, inside = os.path.join(lockdir, "sub", "x.lock"), os.path.join(lockdir, "x.lock")
    f = open(outside, "w")
    for _ in range(3):  # unmanaged: the shim remembers that this file does not match
        fcntl.flock(f, fcntl.LOCK_EX)
        fcntl.flock(f, fcntl.LOCK_UN)
    os.rename(outside, inside)  # now it does: the next lock must be distributed
    fcntl.flock(f, fcntl.LOCK_EX)
    r = subprocess.run([cli, "status", url and "--url", url, inside], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    print("HELD" if r.returncode == 0 else "FREE", flush=True)
""")


def test_a_file_renamed_into_a_configured_path_is_managed_at_once(world):
    r = world.hosts[0].run([sys.executable, "-c", RENAMER, str(world.lockdir), CLI, world.url], world.env,
                           capture_output=True, text=True)
    assert r.stdout.strip() == "HELD", (r.stdout, r.stderr)


def test_name_prefix_and_map(world):
    env = dict(world.env, WATCHLOCK_PRELOAD_NAME_PREFIX="fleet:",
               WATCHLOCK_PRELOAD_NAME_MAP=f"{world.lockdir}/=/locks/")
    r = world.hosts[0].run(["flock", "-n", world.lock, "-c", f"{CLI} status --url {world.url} fleet:/locks/job.lock"],
                           env, capture_output=True, text=True)
    assert r.returncode == 0 and "rwlock, held by a writer" in r.stdout, (r.stdout, r.stderr)
    assert not held(world, world.lock)


def test_signal_none_only_logs(world, redis_server):
    with Proxy(redis_server.port) as px:
        env = dict(world.env, WATCHLOCK_URL=px.url, WATCHLOCK_PRELOAD_LEASE="1s",
                   WATCHLOCK_PRELOAD_SIGNAL="none")
        a = Holder(world.hosts[0], env, [sys.executable, "-c", TERM_REPORTER, world.lock,
                                         str(redis_server.port)])
        assert a.first == "LOCKED"
        control(px.control_port, "blackhole")
        assert wait_for(lambda: world.log.exists() and "lost the lock" in world.log.read_text(), 10)
        assert a.p.poll() is None  # no signal
        assert "no signal" in world.log.read_text()
        control(px.control_port, "resume")
        a.p.kill()
        a.p.wait()


def test_the_keeper_keeps_no_other_descriptor(world):
    """A keeper inherits the locker's descriptors (no close-on-exec in shells): it must close
    them all, however high, or a copy of another lock's description keeps that lock alive
    after its program closed it."""
    script = (f"ulimit -n 4096; exec 2000>{world.lockdir}/other.lock; flock -n 2000 || exit 74; "
              f"exec 9>{world.lock}; flock -n 9 || exit 75; exec 2000>&-; "
              f"flock -n {world.lockdir}/other.lock -c true || exit 76")
    r = world.hosts[0].run(["bash", "-c", script], world.env)
    assert r.returncode == 0


# ---- shared locks: the read side of the read-write lock ------------------------------------------
# LOCK_SH, F_RDLCK (POSIX and OFD) take a read share of the path's read-write lock, LOCK_EX,
# F_WRLCK and lockf its write side (docs/preload.md, "What is covered").

SHARED = [("flock-sh", "flock-sh-nb", "flock", "flock-nb"),
          ("rdlkw", "rdlk", "setlkw", "setlk"),
          ("ofd-rdlkw", "ofd-rdlk", "ofd-setlkw", "ofd-setlk")]
SHARED_IDS = ["flock", "posix", "ofd"]


def fence_of(line):
    return int(line.split()[1])


@pytest.mark.parametrize("sh,sh_nb,ex,ex_nb", SHARED, ids=SHARED_IDS)
def test_shared_locks_overlap_on_two_hosts(world, locker, sh, sh_nb, ex, ex_nb):
    """Two hosts each with a shared lock are inside at once: B's non-blocking request succeeds
    while A still holds, and the server shows the path's name as a read-write lock with two
    readers."""
    a = Holder(world.hosts[0], world.env, [locker, sh, world.lock])
    assert a.first.startswith("LOCKED ") and a.first != "LOCKED -", a.first
    b = Holder(world.hosts[1], world.env, [locker, sh_nb, world.lock])
    assert b.first.startswith("LOCKED ") and b.first != "LOCKED -", b.first
    assert a.p.poll() is None and b.p.poll() is None  # both inside at once
    name = lock_name(world.lock, sh)
    st = status(world, name)
    assert st["held"] and st["kind"] == "rwlock" and st["readers"] == 2 and not st["writer"], st
    text = subprocess.run([CLI, "status", "--url", world.url, name], capture_output=True, text=True)
    assert text.returncode == 0 and "rwlock, 2 readers" in text.stdout, text.stdout
    # each share's owner: its keeper on its host, with the path (issue 24.7)
    assert len(st["holds"]) == 2 and all(h["side"] == "read" and world.lock in h["label"] and
                                         h["host"] == socket.gethostname() for h in st["holds"]), st
    assert text.stdout.count("read by pid ") == 2 and f"preload {world.lock} on " in text.stdout, text.stdout
    # a reader's token is at least the last writer's and below the next writer's (clock-monotone
    # tokens, issue 29.3): both are fresh, and neither is above the status's fencing counter
    assert 0 < fence_of(a.first) and 0 < fence_of(b.first)
    assert max(fence_of(a.first), fence_of(b.first)) <= st["fencing_token"], st
    assert b.say("unlock") == "UNLOCKED"
    assert wait_for(lambda: status(world, name).get("readers") == 1, 5)
    assert a.say("unlock") == "UNLOCKED"
    assert wait_for(lambda: not held(world, name), 5)
    a.finish()
    b.finish()


@pytest.mark.parametrize("sh,sh_nb,ex,ex_nb", SHARED, ids=SHARED_IDS)
def test_exclusive_and_shared_exclude_each_other_across_hosts(world, locker, sh, sh_nb, ex, ex_nb):
    # a shared lock on A keeps an exclusive one out on B ...
    a = Holder(world.hosts[0], world.env, [locker, sh, world.lock])
    assert a.first.startswith("LOCKED ")
    r = world.hosts[1].run([locker, ex_nb, world.lock], world.env, capture_output=True, text=True, input="")
    assert r.stdout.strip() == "FAILED EWOULDBLOCK", r.stdout
    # ... a blocking one waits for it, and gets a writer's token above the reader's
    c = Holder.__new__(Holder)
    c.p = world.hosts[1].popen([locker, ex, world.lock], world.env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    name = lock_name(world.lock, sh)
    assert wait_for(lambda: status(world, name).get("queue", {}).get("length") == 1, 10)
    assert a.say("unlock") == "UNLOCKED"
    c.first = c.p.stdout.readline().strip()
    assert c.first.startswith("LOCKED ") and fence_of(c.first) > fence_of(a.first), (a.first, c.first)
    st = status(world, name)
    assert st["writer"] and st["readers"] == 0, st
    # ... and an exclusive lock on B keeps a shared one out on A
    r = world.hosts[0].run([locker, sh_nb, world.lock], world.env, capture_output=True, text=True, input="")
    assert r.stdout.strip() == "FAILED EWOULDBLOCK", r.stdout
    assert c.say("unlock") == "UNLOCKED"
    assert wait_for(lambda: not held(world, name), 5)
    r = world.hosts[0].run([locker, sh_nb, world.lock], world.env, capture_output=True, text=True, input="")
    assert r.stdout.startswith("LOCKED "), r.stdout
    c.finish()
    a.finish()


def test_python_fcntl_flock_shared_and_exclusive(world):
    def py(host, mode, nb):
        return world.hosts[host].run([sys.executable, "-c", PY_LOCKER, "flock", world.lock, nb, mode],
                                     world.env, capture_output=True, text=True, input="").stdout.split()
    a = Holder(world.hosts[0], world.env, [sys.executable, "-c", PY_LOCKER, "flock", world.lock, "block", "sh"])
    assert a.first == "LOCKED"
    assert py(1, "sh", "nb") == ["LOCKED"]  # shared + shared: both inside
    assert py(1, "ex", "nb")[:2] == ["FAILED", "11"]  # shared here keeps exclusive out there
    a.finish()
    assert wait_for(lambda: not held(world, world.lock), 5)
    a = Holder(world.hosts[0], world.env, [sys.executable, "-c", PY_LOCKER, "flock", world.lock, "block", "ex"])
    assert a.first == "LOCKED"
    assert py(1, "sh", "nb")[:2] == ["FAILED", "11"]  # exclusive here keeps shared out there
    a.finish()


def test_local_shared_lockers_share_and_an_exclusive_one_follows(world, locker):
    """Two local LOCK_SH holders are inside at once on the host's one read share (the keeper
    holds what the kernel's aggregate needs: a share while any shared lock exists); a local
    LOCK_EX waiter gets the kernel lock when both unlock and the write side at once (a
    conversion of the host's hold), not after a lease."""
    a = Holder(world.hosts[0], world.env, [locker, "flock-sh", world.lock])
    b = Holder(world.hosts[0], world.env, [locker, "flock-sh-nb", world.lock])
    assert a.first.startswith("LOCKED ") and b.first.startswith("LOCKED "), (a.first, b.first)
    assert status(world, world.lock)["readers"] == 1  # one share for the host
    c = Holder.__new__(Holder)
    c.p = world.hosts[0].popen([locker, "flock", world.lock], world.env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    assert a.say("unlock") == "UNLOCKED" and b.say("unlock") == "UNLOCKED"
    c.first = c.p.stdout.readline().strip()
    assert c.first.startswith("LOCKED "), c.first
    assert time.monotonic() - t0 < 2.5  # not the 3 s lease
    assert status(world, world.lock)["writer"]
    c.finish()
    a.finish()
    b.finish()


@pytest.mark.parametrize("sh,sh_nb,ex,ex_nb", SHARED, ids=SHARED_IDS)
def test_conversion_on_the_same_fd(world, locker, sh, sh_nb, ex, ex_nb):
    """LOCK_SH -> LOCK_EX on the same fd (F_RDLCK -> F_WRLCK) converts the kernel lock: the read
    share is released and the write side taken (not atomic across hosts, as flock(2) says of
    its own conversion); and back (the write side released, a read share taken). The old
    keeper still sees a lock of its locker in /proc/locks, so only the hand-over lets it go."""
    a = Holder(world.hosts[0], world.env, [locker, sh, world.lock])
    assert a.first.startswith("LOCKED ")
    up = a.say("take " + ex_nb)
    assert up.startswith("LOCKED "), up
    assert fence_of(up) > fence_of(a.first)
    name = lock_name(world.lock, sh)
    assert wait_for(lambda: (lambda st: st.get("writer") and st.get("holders") == 1)(status(world, name)), 5)
    r = world.hosts[1].run([locker, sh_nb, world.lock], world.env, capture_output=True, text=True, input="")
    assert r.stdout.strip() == "FAILED EWOULDBLOCK", r.stdout
    down = a.say("take " + sh_nb)
    assert down.startswith("LOCKED "), down
    assert wait_for(lambda: (lambda st: st.get("readers") == 1 and st.get("holders") == 1)(status(world, name)), 5)
    r = world.hosts[1].run([locker, sh_nb, world.lock], world.env, capture_output=True, text=True, input="")
    assert r.stdout.startswith("LOCKED "), r.stdout
    assert a.say("unlock") == "UNLOCKED"
    assert wait_for(lambda: not held(world, name), 5)
    a.finish()


MIXED = textwrap.dedent("""
    import fcntl, os, random, sys, time
    lock, shared, rounds, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    how = {"flock": fcntl.flock, "lockf": fcntl.lockf}[sys.argv[5]]  # lockf: F_RDLCK / F_WRLCK
    rnd = random.Random(seed)
    readers, writer = os.path.join(shared, "readers"), os.path.join(shared, "writer")
    os.makedirs(readers, exist_ok=True)
    me = os.path.join(readers, str(os.getpid()))
    f = os.fdopen(os.open(lock, os.O_RDWR | os.O_CREAT, 0o644), "r+")  # F_RDLCK needs read access
    def bad(what):
        open(os.path.join(shared, "overlaps"), "a").write(what + "\\\\n")
    for _ in range(rounds):
        if rnd.random() < 0.5:
            how(f, fcntl.LOCK_EX)
            try:
                os.mkdir(writer)
            except FileExistsError:
                bad("two writers")
            if os.listdir(readers):
                bad("a writer with readers")
            time.sleep(0.01)
            try:
                os.rmdir(writer)
            except FileNotFoundError:
                pass
        else:
            how(f, fcntl.LOCK_SH)
            open(me, "w").close()
            if os.path.exists(writer):
                bad("a reader with a writer")
            if len(os.listdir(readers)) > 1:
                open(os.path.join(shared, "together"), "a").write("x")
            time.sleep(0.01)
            os.unlink(me)
        how(f, fcntl.LOCK_UN)
""")


@pytest.mark.parametrize("how", ["flock", "lockf"])
@pytest.mark.parametrize("shim", [True, False])
def test_mixed_shared_and_exclusive_contenders(world, shim, how):
    """3 local + 3 remote contenders, each round LOCK_SH or LOCK_EX at random: no writer ever
    meets a reader or another writer, nobody deadlocks (local hand-over in both directions).
    Without the shim the two hosts' writers and readers meet (the witness can fail)."""
    env = world.env if shim else world.plain
    rounds = 12 if LONG else 5
    for attempt in range(1 if shim else 5):
        procs = [h.popen([sys.executable, "-c", MIXED, world.lock, str(world.shared), str(rounds),
                          str(i * 7 + attempt), how], env) for i, h in enumerate(world.hosts * 3)]
        for p in procs:
            assert p.wait(timeout=180) == 0  # every contender finishes
        if not shim and (world.shared / "overlaps").exists():
            break
    if shim:
        assert not (world.shared / "overlaps").exists(), (world.shared / "overlaps").read_text()
        assert wait_for(lambda: not held(world, lock_name(world.lock, how)), 5)
    else:
        assert (world.shared / "overlaps").exists()
