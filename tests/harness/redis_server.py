"""Start and stop real redis-server processes on free loopback ports.

Used by the pytest fixtures (tests/conftest.py), the Lua and CLI test
drivers and the benchmarks. Every server is a child of the caller, has no
persistence and lives in its own temporary directory.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Optional, Sequence


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One redis-server on 127.0.0.1:<free port> (and a unix socket)."""

    def __init__(self, extra_args: Sequence[str] = (), password: Optional[str] = None):
        self.extra_args = list(extra_args)
        self.password = password
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None
        self.dir = tempfile.mkdtemp(prefix="watchlock-redis-")
        self.unixsocket = os.path.join(self.dir, "redis.sock")

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}"

    def start(self, port: Optional[int] = None) -> "RedisServer":
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server not found (the test command installs it)")
        for _ in range(20):
            self.port = port or free_port()
            args = [exe, "--port", str(self.port), "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", "--dir", self.dir,
                    "--unixsocket", self.unixsocket, "--unixsocketperm", "700",
                    "--daemonize", "no", "--loglevel", "warning",
                    "--logfile", os.path.join(self.dir, "redis.log")]
            if self.password:
                args += ["--requirepass", self.password]
            self.proc = subprocess.Popen(args + self.extra_args,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_ready():
                return self
            self.stop()
            if port:
                break
        raise RuntimeError(f"redis-server did not start (log in {self.dir})")

    def _wait_ready(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            try:
                if self.command("PING") in ("PONG", "NOAUTH"):
                    return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def command(self, *args: str | bytes):
        """Send one command with a throwaway socket; returns a simple decoded reply."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            if self.password:
                s.sendall(_encode(("AUTH", self.password)))
                _read_reply(s.makefile("rb"))
            s.sendall(_encode(args))
            reply = _read_reply(s.makefile("rb"))
        if isinstance(reply, RedisError) and reply.args[0].startswith("NOAUTH"):
            return "NOAUTH"
        return reply

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        """Stop and start again on the same port (drops every connection)."""
        port = self.port
        self.stop()
        self.start(port=port)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class RedisError(Exception):
    pass


def _encode(args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def _read_reply(f):
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RedisError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read_reply(f) for _ in range(n)]
    raise ConnectionError(f"bad reply {line!r}")


if __name__ == "__main__":
    # `python3 tests/harness/redis_server.py -- CMD ARGS...`: run CMD with a
    # fresh server; WATCHLOCK_URL and WATCHLOCK_TEST_PORT point at it.
    import sys
    argv = sys.argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        sys.exit("usage: redis_server.py -- COMMAND [ARGS...]")
    with RedisServer() as srv:
        env = dict(os.environ, WATCHLOCK_URL=srv.url, WATCHLOCK_TEST_PORT=str(srv.port))
        sys.exit(subprocess.call(argv, env=env))
