"""Start and stop real redis-server processes on free loopback ports.

Used by the pytest fixtures (tests/conftest.py), the Lua and CLI test
drivers and the benchmarks. Every server is a child of the caller, has no
persistence and lives in its own temporary directory.

TLS: `RedisServer(tls=make_certs(dir))` (tests/harness/tls.py) listens with
TLS only (`--port 0 --tls-port P`); `.url` is then
`rediss://127.0.0.1:P?cacert=<ca.crt>` (plus the client certificate when
`tls_auth_clients="yes"`), and `.command()` speaks TLS (presenting the
client certificate, verifying nothing: the harness is not under test).
"""
from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.parse
from typing import Optional, Sequence


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the process (its thread, in
    fact) that started it dies. For single-threaded drivers such as
    `sentinel.py --serve`, whose caller may be killed at any moment."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL


def tls_client_context(certs=None) -> ssl.SSLContext:
    """The harness's own TLS context: presents the test client certificate
    (so that servers with --tls-auth-clients yes answer) and verifies nothing."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if certs is not None:
        ctx.load_cert_chain(certs.client_cert, certs.client_key)
    return ctx


def connect(port: int, certs=None, timeout: float = 5.0) -> socket.socket:
    """A connected socket to 127.0.0.1:port; TLS-wrapped when certs is given."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if certs is None:
        return s
    try:
        return tls_client_context(certs).wrap_socket(s)
    except BaseException:
        s.close()
        raise


def tls_query(**options) -> str:
    """"?cacert=...&sni=..." from keyword options (None values left out), in the given order."""
    items = [(k, v) for k, v in options.items() if v is not None]
    return "?" + urllib.parse.urlencode(items, safe="/:,") if items else ""


class RedisServer:
    """One redis-server on 127.0.0.1:<free port> (and a unix socket).

    tls: a tls.Certs; the server then listens with TLS only, presenting the
    certificate pair `tls_cert` ("server", "other-name" or "unknown", see
    tls.py) and asking clients for a certificate when tls_auth_clients is
    "yes" ("optional" also exists)."""

    tls = None  # class default: subclasses that skip __init__ (helpers.RedisAt) speak plain RESP
    preexec = None  # e.g. die_with_parent

    def __init__(self, extra_args: Sequence[str] = (), password: Optional[str] = None,
                 tls=None, tls_auth_clients: str = "no", tls_cert: str = "server"):
        self.extra_args = list(extra_args)
        self.password = password
        self.tls = tls
        self.tls_auth_clients = tls_auth_clients
        self.tls_cert = tls_cert
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None
        self.dir = tempfile.mkdtemp(prefix="watchlock-redis-")
        self.unixsocket = os.path.join(self.dir, "redis.sock")

    @property
    def url(self) -> str:
        """redis://[:password@]127.0.0.1:PORT, or for a TLS server
        rediss://...?cacert=CA (and cert=&key= when it asks for client certificates)."""
        auth = f":{self.password}@" if self.password else ""
        if self.tls is None:
            return f"redis://{auth}127.0.0.1:{self.port}"
        opts = {"cacert": self.tls.ca}
        if self.tls_auth_clients == "yes":
            opts.update(cert=self.tls.client_cert, key=self.tls.client_key)
        return self.tls_url(**opts)

    def tls_url(self, host: str = "127.0.0.1", **options) -> str:
        """rediss://[:password@]HOST:PORT?option=value... with exactly the options given
        (cacert=..., cert=..., key=..., sni=..., insecure=1, connect_timeout=...)."""
        auth = f":{self.password}@" if self.password else ""
        return f"rediss://{auth}{host}:{self.port}{tls_query(**options)}"

    def tls_args(self, port: int) -> list:
        """The redis-server (or sentinel) arguments of TLS mode on port."""
        cert, key = self.tls.pair(self.tls_cert)
        return ["--port", "0", "--tls-port", str(port), "--tls-cert-file", cert, "--tls-key-file", key,
                "--tls-ca-cert-file", self.tls.ca, "--tls-auth-clients", self.tls_auth_clients]

    def start(self, port: Optional[int] = None) -> "RedisServer":
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server not found (the test command installs it)")
        for _ in range(20):
            self.port = port or free_port()
            listen = ["--port", str(self.port)] if self.tls is None else self.tls_args(self.port)
            args = [exe, *listen, "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", "--dir", self.dir,
                    "--unixsocket", self.unixsocket, "--unixsocketperm", "700",
                    "--daemonize", "no", "--loglevel", "warning",
                    "--logfile", os.path.join(self.dir, "redis.log")]
            if self.password:
                args += ["--requirepass", self.password]
            self.proc = subprocess.Popen(args + self.extra_args, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, preexec_fn=self.preexec)
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
            except OSError:  # also ConnectionError and ssl.SSLError
                pass
            time.sleep(0.02)
        return False

    def command(self, *args: str | bytes):
        """Send one command with a throwaway socket; returns a simple decoded reply."""
        with connect(self.port, self.tls) as s:
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
    # `python3 tests/harness/redis_server.py [--tls] -- CMD ARGS...`: run CMD
    # with a fresh server; WATCHLOCK_URL and WATCHLOCK_TEST_PORT point at it.
    # --tls: a TLS-only server with the test certificates of tls.py, made in
    # a temporary directory named by WATCHLOCK_TEST_TLS_DIR.
    import sys
    argv = sys.argv[1:]
    use_tls = False
    if argv and argv[0] == "--tls":
        use_tls, argv = True, argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        sys.exit("usage: redis_server.py [--tls] -- COMMAND [ARGS...]")
    extra_env = {}
    certs = None
    if use_tls:
        from tls import make_certs
        cert_dir = tempfile.mkdtemp(prefix="watchlock-certs-")
        certs = make_certs(cert_dir)
        extra_env["WATCHLOCK_TEST_TLS_DIR"] = cert_dir
    try:
        with RedisServer(tls=certs) as srv:
            env = dict(os.environ, WATCHLOCK_URL=srv.url, WATCHLOCK_TEST_PORT=str(srv.port), **extra_env)
            code = subprocess.call(argv, env=env)
    finally:
        if certs is not None:
            shutil.rmtree(certs.dir, ignore_errors=True)
    sys.exit(code)
