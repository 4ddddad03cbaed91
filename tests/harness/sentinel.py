"""A Redis Sentinel setup on free loopback ports: one master, its replicas
and three sentinels (quorum 2), for the Sentinel and min_replicas tests.

    with SentinelGroup() as g:          # started, and every sentinel sees everything
        g.url()                         # redis-sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/watchlock-master
        g.master(), g.replica()         # the RedisServer nodes in those roles right now
        g.failover()                    # SENTINEL FAILOVER; returns when the replica is the master
        g.kill_master()                 # SIGKILL; then g.wait_master_changed(old), g.restart(node)
        g.sentinels[0].stop()           # one sentinel down (.start() brings it back on its port)
        with g.paused(g.replica()): ... # SIGSTOP: it acknowledges no writes (WAIT)
        g.wait_healthy()                # one master, every replica linked, sentinels agree

    python3 tests/harness/sentinel.py --serve [--tls]
        starts a group, prints one line "url=... master=PORT replica=PORT sentinels=P1,P2,P3
        [tls_dir=DIR]" and keeps it up until stdin closes (for the C tests).

Failover timing: down-after-milliseconds 1000 and failover-timeout 5000, so
a killed master is replaced in about 2-4 s. Every wait is on a condition
with a deadline; nothing sleeps a fixed time.

With tls (a tls.Certs), every process listens with TLS only, replication and
the sentinels' own links use TLS (tls-replication yes), and url() is
rediss-sentinel://...?cacert=CA.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_server import (RedisError, RedisServer, _encode, _read_reply, connect, die_with_parent,  # noqa: E402
                          free_port, tls_query)

MASTER_NAME = "watchlock-master"


class Timeout(AssertionError):
    pass


def wait_until(pred, timeout: float, what: str, interval: float = 0.05):
    """Polls pred() until it returns a true value (returned); raises Timeout."""
    deadline = time.monotonic() + timeout
    last_exc: Optional[BaseException] = None
    while True:
        try:
            value = pred()
            if value:
                return value
        except (OSError, RedisError) as e:
            last_exc = e
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout:.0f} s waiting for {what}"
                          + (f" (last error: {last_exc})" if last_exc else ""))
        time.sleep(interval)


def _pairs(reply) -> dict:
    """A flat [k1, v1, k2, v2 ...] reply as a dict of str."""
    if not isinstance(reply, list):
        return {}
    out = {}
    for k, v in zip(reply[::2], reply[1::2]):
        out[k.decode() if isinstance(k, bytes) else str(k)] = v.decode() if isinstance(v, bytes) else v
    return out


def _info(text) -> dict:
    if isinstance(text, bytes):
        text = text.decode()
    if not isinstance(text, str):
        return {}
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))


class Sentinel:
    """One sentinel process (redis-server CONFIG --sentinel) with a config
    file of its own in its own directory (sentinels rewrite their config)."""

    def __init__(self, group: "SentinelGroup", index: int):
        self.group = group
        self.index = index
        self.dir = os.path.join(group.dir, f"sentinel{index}")
        os.makedirs(self.dir, exist_ok=True)
        self.conf = os.path.join(self.dir, "sentinel.conf")
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None

    def _write_conf(self, master_port: int) -> None:
        g = self.group
        lines = [f"bind 127.0.0.1",
                 f"dir {self.dir}",
                 f"logfile {os.path.join(self.dir, 'sentinel.log')}",
                 "loglevel notice",
                 "daemonize no"]
        if g.tls is None:
            lines.append(f"port {self.port}")
        else:
            cert, key = g.tls.pair("server")
            lines += ["port 0", f"tls-port {self.port}", f"tls-cert-file {cert}", f"tls-key-file {key}",
                      f"tls-ca-cert-file {g.tls.ca}", "tls-auth-clients no", "tls-replication yes"]
        lines += [f"sentinel monitor {g.name} 127.0.0.1 {master_port} {g.quorum}",
                  f"sentinel down-after-milliseconds {g.name} {g.down_after_ms}",
                  f"sentinel failover-timeout {g.name} {g.failover_timeout_ms}",
                  f"sentinel parallel-syncs {g.name} 1"]
        if g.password:
            lines.append(f"sentinel auth-pass {g.name} {g.password}")
        if g.sentinel_password:
            lines += [f"requirepass {g.sentinel_password}", f"sentinel sentinel-pass {g.sentinel_password}"]
        with open(self.conf, "w") as fh:
            fh.write("\n".join(lines) + "\n")

    def start(self) -> "Sentinel":
        """Starts the sentinel: the first time on a free port with a fresh
        config, later on the same port with the config it rewrote (so it
        comes back knowing the master, replicas and sentinels it knew)."""
        exe = shutil.which("redis-sentinel")
        head = [exe] if exe else [shutil.which("redis-server") or "redis-server"]
        first = not self.port
        for _ in range(20 if first else 1):
            if first:
                self.port = free_port()
                self._write_conf(self.group.master_port_at_start)
            self.proc = subprocess.Popen(head + [self.conf] + ([] if exe else ["--sentinel"]),
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         preexec_fn=RedisServer.preexec)
            try:
                wait_until(lambda: self.proc.poll() is not None or self.command("PING") == "PONG", 10,
                           f"sentinel {self.index} to answer PING", interval=0.02)
            except Timeout:
                pass
            if self.proc.poll() is None:
                return self
            self.kill()
        raise RuntimeError(f"sentinel {self.index} did not start (log in {self.dir})")

    def command(self, *args):
        with connect(self.port, self.group.tls) as s:
            f = s.makefile("rb")
            if self.group.sentinel_password:
                s.sendall(_encode(("AUTH", self.group.sentinel_password)))
                _read_reply(f)
            s.sendall(_encode(args))
            return _read_reply(f)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def master_addr(self) -> Optional[Tuple[str, int]]:
        r = self.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.group.name)
        if not isinstance(r, list) or len(r) != 2:
            return None
        return r[0].decode(), int(r[1])

    def stop(self) -> None:
        if self.proc is not None:
            try:
                self.proc.send_signal(signal.SIGCONT)
            except OSError:
                pass
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None


class SentinelGroup:
    """A master, `replicas` replicas and `sentinels` sentinels, all on
    127.0.0.1. Nodes are RedisServer objects; which one is the master is
    asked of the sentinels (it changes with failovers)."""

    def __init__(self, name: str = MASTER_NAME, replicas: int = 1, sentinels: int = 3, quorum: int = 2,
                 down_after_ms: int = 1000, failover_timeout_ms: int = 5000, tls=None,
                 extra_args=(), password: Optional[str] = None, sentinel_password: Optional[str] = None):
        self.name = name
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.tls = tls
        self.password = password                    # the nodes' requirepass (and masterauth)
        self.sentinel_password = sentinel_password  # the sentinels' own requirepass
        self.dir = tempfile.mkdtemp(prefix="watchlock-sentinel-")
        # replication must start at once (the default diskless sync waits 5 s for more replicas)
        self.node_args = ["--repl-diskless-sync-delay", "0"] + (["--tls-replication", "yes"] if tls else [])
        if password:
            self.node_args += ["--masterauth", password]  # every node may become a replica
        self.node_args += list(extra_args)
        self.nodes: List[RedisServer] = [RedisServer(self.node_args, password=password, tls=tls)
                                         for _ in range(1 + replicas)]
        self.sentinels: List[Sentinel] = [Sentinel(self, i) for i in range(sentinels)]
        self.master_port_at_start = 0

    # ---- life cycle

    def start(self, timeout: float = 30.0) -> "SentinelGroup":
        try:
            master = self.nodes[0].start()
            self.master_port_at_start = master.port
            for node in self.nodes[1:]:
                node.extra_args = self.node_args + ["--replicaof", "127.0.0.1", str(master.port)]
                node.start()
            wait_until(lambda: all(_info(n.command("INFO", "replication")).get("master_link_status") == "up"
                                   for n in self.nodes[1:]), timeout, "the replicas to sync")
            for s in self.sentinels:
                s.start()
            self.wait_healthy(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for s in self.sentinels:
            s.stop()
        for n in self.nodes:
            n.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "SentinelGroup":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- addresses

    def url(self, db: Optional[int] = None, sentinels: Optional[List[Sentinel]] = None, name: Optional[str] = None,
            **options) -> str:
        """redis-sentinel://[:password@]127.0.0.1:S1,.../NAME[/db][?options] (rediss-sentinel://
        and cacert= first with tls; sentinel_password= when the sentinels have one, unless
        given). Options are appended as given (min_replicas=1, ...; None leaves one out)."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in (sentinels or self.sentinels))
        scheme = "redis-sentinel"
        if self.tls is not None:
            scheme = "rediss-sentinel"
            options = {"cacert": self.tls.ca, **options}
        if self.sentinel_password and "sentinel_password" not in options:
            options = {"sentinel_password": self.sentinel_password, **options}
        auth = f":{self.password}@" if self.password else ""
        path = f"/{name or self.name}" + (f"/{db}" if db is not None else "")
        return f"{scheme}://{auth}{hosts}{path}{tls_query(**options)}"

    def node_at(self, port: int) -> RedisServer:
        for n in self.nodes:
            if n.port == port:
                return n
        raise KeyError(f"no node on port {port}")

    def master_addr(self) -> Tuple[str, int]:
        """The master as the first running sentinel that answers names it."""
        for s in self.sentinels:
            if s.running():
                try:
                    a = s.master_addr()
                except OSError:
                    continue
                if a is not None:
                    return a
        raise RuntimeError("no sentinel names a master")

    def master(self) -> RedisServer:
        return self.node_at(self.master_addr()[1])

    def replica(self) -> RedisServer:
        """A replica node (the first that is not the master)."""
        m = self.master_addr()[1]
        return next(n for n in self.nodes if n.port != m)

    @staticmethod
    def role(node: RedisServer) -> Optional[str]:
        try:
            r = node.command("ROLE")
        except OSError:
            return None
        if isinstance(r, list) and r:
            return r[0].decode() if isinstance(r[0], bytes) else str(r[0])
        return None

    # ---- conditions

    def _agreed_master(self) -> Optional[int]:
        ports = set()
        for s in self.sentinels:
            if not s.running():
                continue
            a = s.master_addr()
            if a is None:
                return None
            ports.add(a[1])
        return ports.pop() if len(ports) == 1 else None

    def healthy(self) -> bool:
        """Every running sentinel names the same master; it is a master with
        every other node linked to it as a replica; every running sentinel
        sees those replicas up and the other running sentinels, and passes
        CKQUORUM."""
        m = self._agreed_master()
        if m is None:
            return False
        master = self.node_at(m)
        if master.proc is None or self.role(master) != "master":
            return False
        others = [n for n in self.nodes if n is not master and n.proc is not None]
        for n in others:
            i = _info(n.command("INFO", "replication"))
            if i.get("role") != "slave" or i.get("master_port") != str(m) or i.get("master_link_status") != "up":
                return False
        running = [s for s in self.sentinels if s.running()]
        for s in running:
            flags = _pairs(s.command("SENTINEL", "MASTER", self.name)).get("flags", "").split(",")
            if flags != ["master"]:  # not s_down, o_down, failover_in_progress ...
                return False
            reps = [_pairs(r) for r in (s.command("SENTINEL", "REPLICAS", self.name) or [])]
            # (their link status as a sentinel saw it may be 10 s old: each node's own INFO above is not)
            up = {int(r["port"]) for r in reps if r.get("flags") == "slave"}
            if any(n.port not in up for n in others):
                return False
            # every sentinel found the others (hello messages every 2 s), so a failover can be authorized
            if len(running) == len(self.sentinels) and not str(s.command("SENTINEL", "CKQUORUM", self.name)).startswith("OK"):
                return False
        return True

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Waits until healthy(). A former master that still says it is a
        master once the sentinels agree on another one is told REPLICAOF
        the new master first: the sentinels would do the same, but only
        after 8-20 s (+convert-to-slave waits for INFO rounds), and tests
        should not wait that long between them."""
        def settled():
            m = self._agreed_master()
            if m is not None:
                for n in self.nodes:
                    if n.port != m and n.proc is not None and self.role(n) == "master":
                        n.command("REPLICAOF", "127.0.0.1", str(m))
            return self.healthy()
        wait_until(settled, timeout, "the sentinel group to settle (one master, replicas linked, "
                   "sentinels agree and see each other)")

    def wait_master_changed(self, old_port: int, timeout: float = 30.0) -> RedisServer:
        """Waits until the running sentinels agree on a master other than
        old_port and that node's ROLE says master; returns it."""
        def changed():
            m = self._agreed_master()
            if m is None or m == old_port:
                return None
            node = self.node_at(m)
            return node if self.role(node) == "master" else None
        return wait_until(changed, timeout, f"a new master instead of port {old_port}")

    # ---- faults

    def failover(self, timeout: float = 30.0) -> RedisServer:
        """SENTINEL FAILOVER (retried while a sentinel answers INPROG or
        NOGOODSLAVE); returns the new master once the sentinels agree on it
        and its ROLE is master. The old master is left as it is: a master
        that still takes writes until the sentinels demote it (8-20 s
        later), which is what clients must cope with; wait_healthy()
        demotes it at once."""
        old = self.master_addr()[1]

        def ask():
            for s in self.sentinels:
                if s.running():
                    r = s.command("SENTINEL", "FAILOVER", self.name)
                    if r == "OK":
                        return True
            return False
        wait_until(ask, timeout, "a sentinel to accept SENTINEL FAILOVER", interval=0.2)
        return self.wait_master_changed(old, timeout)

    def kill_master(self) -> RedisServer:
        """SIGKILL of the master; returns its node (stopped; restart() brings it back)."""
        node = self.master()
        node.proc.kill()
        node.proc.wait()
        node.proc = None
        return node

    def restart(self, node: RedisServer, timeout: float = 30.0) -> None:
        """Starts a stopped node again on its port, as a replica of the
        current master (as an operator would bring back a failed master)."""
        m = self.master_addr()[1]
        node.extra_args = self.node_args + ["--replicaof", "127.0.0.1", str(m)]
        node.start(port=node.port)

    @contextlib.contextmanager
    def paused(self, node: RedisServer):
        """SIGSTOP of node for the block, SIGCONT after."""
        node.proc.send_signal(signal.SIGSTOP)
        try:
            yield node
        finally:
            node.proc.send_signal(signal.SIGCONT)


def _serve(argv: List[str]) -> int:
    RedisServer.preexec = staticmethod(die_with_parent)  # nothing outlives this process
    tls = None
    cert_dir = None
    if "--tls" in argv:
        from tls import make_certs
        cert_dir = tempfile.mkdtemp(prefix="watchlock-certs-")
        tls = make_certs(cert_dir)
    try:
        with SentinelGroup(tls=tls) as g:
            line = (f"url={g.url()} master={g.master().port} replica={g.replica().port} "
                    f"sentinels={','.join(str(s.port) for s in g.sentinels)}")
            if cert_dir:
                line += f" tls_dir={cert_dir}"
            print(line, flush=True)
            sys.stdin.read()  # until the caller closes our stdin (or dies)
    finally:
        if cert_dir:
            shutil.rmtree(cert_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--serve":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # tear down on SIGTERM too
        sys.exit(_serve(sys.argv[2:]))
    sys.exit("usage: sentinel.py --serve [--tls]")
