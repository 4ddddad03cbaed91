"""A Redlock quorum for the tests: N independent redis-servers (masters, no
replication between them) on free loopback ports.

    with Quorum(5) as q:                 # started; q.urls = ["redis://127.0.0.1:P1", ...]
        q.url_env                        # "redis://... redis://... ..." (WATCHLOCK_URL form)
        q.pause(0, 1)                    # SIGSTOP: the member answers nothing (connections stay open)
        q.resume(0, 1)                   # SIGCONT
        with q.paused(0, 1, 2): ...      # both, whatever the block does
        q.restart_empty(3)               # stop and start again on its port: no persistence, so empty
        q.wait_settled(3)                # every member up for more than 3 s (the restart rule, below)
        q.get(2, key), q.exists(key)     # a key on one member; on how many members a key is

Members can be TLS-only (`tls_members=(1,)` with a tls.Certs from
tls.make_certs) and the last one can be a Sentinel group (`sentinel=True`:
a SentinelGroup of its own, master + 1 replica + 3 sentinels; its member URL
is redis-sentinel://...). The quorum never replicates between members: each
member is its own master, as Redlock requires.

    python3 tests/harness/quorum.py --serve [--members N] -- COMMAND [ARGS...]
        runs COMMAND with WATCHLOCK_URL = the members' URLs separated by
        spaces, WATCHLOCK_QUORUM_PORTS = "P1,P2,..." and WATCHLOCK_QUORUM_PIDS =
        "PID1,PID2,..." (so that a test script can SIGSTOP/SIGCONT a member),
        and exits with its status (for the Lua tests).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_server import RedisServer, die_with_parent  # noqa: E402


class Quorum:
    def __init__(self, n: int = 5, tls_members: Sequence[int] = (), certs=None, sentinel: bool = False,
                 preexec=None):
        if tls_members and certs is None:
            raise ValueError("tls_members needs certs (tls.make_certs)")
        self.n = n
        self.tls_members = set(tls_members)
        self.certs = certs
        self.sentinel = sentinel
        self.group = None  # the SentinelGroup of the last member, when sentinel=True
        self.servers: List[RedisServer] = []
        self.preexec = preexec

    def start(self) -> "Quorum":
        try:
            plain = self.n - 1 if self.sentinel else self.n
            for i in range(plain):
                srv = RedisServer(tls=self.certs if i in self.tls_members else None)
                srv.preexec = self.preexec
                self.servers.append(srv.start())
            if self.sentinel:
                from sentinel import SentinelGroup
                self.group = SentinelGroup().start()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for srv in self.servers:
            if srv.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(srv.proc.pid, signal.SIGCONT)
            srv.close()
        self.servers = []
        if self.group is not None:
            self.group.close()
            self.group = None

    def __enter__(self) -> "Quorum":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- members
    def member(self, i: int) -> RedisServer:
        """The redis-server of member i (for the Sentinel member: its master now)."""
        if self.group is not None and i == self.n - 1:
            return self.group.master()
        return self.servers[i]

    @property
    def urls(self) -> List[str]:
        out = [s.url for s in self.servers]
        if self.group is not None:
            out.append(self.group.url())
        return out

    @property
    def url_env(self) -> str:
        """The members' URLs separated by spaces, as WATCHLOCK_URL takes them."""
        return " ".join(self.urls)

    @property
    def ports(self) -> List[int]:
        return [self.member(i).port for i in range(self.n)]

    def pause(self, *members: int) -> None:
        for i in members:
            os.kill(self.member(i).proc.pid, signal.SIGSTOP)

    def resume(self, *members: int) -> None:
        for i in members:
            os.kill(self.member(i).proc.pid, signal.SIGCONT)

    @contextlib.contextmanager
    def paused(self, *members: int):
        self.pause(*members)
        try:
            yield
        finally:
            self.resume(*members)

    def restart_empty(self, i: int) -> None:
        """Member i stopped and started again on its port: it comes back with no
        keys (no persistence), a new run_id and a small uptime."""
        srv = self.member(i)
        os.kill(srv.proc.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
        srv.restart()

    def uptime(self, i: int) -> int:
        info = self.member(i).command("INFO", "server")
        text = info.decode() if isinstance(info, bytes) else str(info)
        for line in text.splitlines():
            if line.startswith("uptime_in_seconds:"):
                return int(line.split(":", 1)[1])
        return 0

    def wait_settled(self, lease_s: float, timeout: float = 60.0) -> None:
        """Waits until every member has been up for longer than lease_s: the
        restart rule keeps a member whose uptime is below the longest lease a
        client uses out of majorities until one lease after it came back, so
        a quorum of fresh servers grants nothing at first (a condition wait,
        not a sleep: uptime is whole seconds, rounded down)."""
        deadline = time.monotonic() + timeout
        need = int(lease_s) + 1
        for i in range(self.n):
            while self.uptime(i) < need:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"member {i} not up for {need} s")
                time.sleep(0.05)

    # ---- reading keys from outside the library
    def get(self, i: int, key) -> Optional[bytes]:
        return self.member(i).command("GET", key)

    def pttl(self, i: int, key) -> int:
        return self.member(i).command("PTTL", key)

    def holders(self, key, members: Optional[Sequence[int]] = None) -> int:
        """On how many of `members` (default: all) the key exists."""
        idx = range(self.n) if members is None else members
        return sum(1 for i in idx if self.member(i).command("EXISTS", key) == 1)


def _serve(argv: List[str]) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="quorum.py --serve")
    p.add_argument("--members", type=int, default=5)
    p.add_argument("--settle", type=float, default=0.0,
                   help="wait until every member is up for longer than this lease (s) before COMMAND")
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("missing -- COMMAND")
    with Quorum(a.members, preexec=die_with_parent) as q:
        if a.settle:
            q.wait_settled(a.settle)
        env = dict(os.environ, WATCHLOCK_URL=q.url_env,
                   WATCHLOCK_QUORUM_PORTS=",".join(str(p) for p in q.ports),
                   WATCHLOCK_QUORUM_PIDS=",".join(str(s.proc.pid) for s in q.servers),
                   WATCHLOCK_TEST_PORT=str(q.ports[0]))
        return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--serve":
        sys.exit(_serve(sys.argv[2:]))
    sys.exit("usage: quorum.py --serve [--members N] -- COMMAND [ARGS...]")
