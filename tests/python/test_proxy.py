"""The fault-injection proxy (tests/harness/proxy.py) against a real
redis-server: pass-through, delays, pause/resume, blackhole, resets, a lost
reply, refused connections, list/stats, the ctl command line and the ways the
proxy process ends. Clients speak RESP over plain sockets (RespConn)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import watchlock
from conftest import wait_for

from proxy import Proxy, ProxyError, control  # tests/harness (on sys.path via conftest)
from redis_server import RedisError, _encode, _read_reply

pytestmark = pytest.mark.timeout(60)

PROXY_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness", "proxy.py")
RESET_ERRORS = (ConnectionError, BrokenPipeError)  # ConnectionResetError and EOF included


class RespConn:
    """A minimal RESP client on one socket (no redis package in the test
    venv), with the encoder and reply reader of tests/harness/redis_server.py."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.file = self.sock.makefile("rb")

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    @staticmethod
    def encode(*args) -> bytes:
        return _encode(args)

    def send(self, *args) -> None:
        self.sock.sendall(self.encode(*args))

    def reply(self):
        r = _read_reply(self.file)
        return RuntimeError(*r.args) if isinstance(r, RedisError) else r

    def command(self, *args):
        self.send(*args)
        return self.reply()

    def timed(self, *args):
        """(reply, round trip in ms)."""
        start = time.monotonic()
        r = self.command(*args)
        return r, (time.monotonic() - start) * 1000.0


@pytest.fixture
def proxy(redis_server):
    with Proxy(redis_server.port) as px:
        yield px


@pytest.fixture
def conns():
    """Connections opened by a test, closed at its end."""
    opened = []
    yield opened
    for c in opened:
        c.close()


def connect(px: Proxy, conns: list) -> RespConn:
    c = RespConn(px.port)
    conns.append(c)
    return c


def pending(px: Proxy, cid: int):
    return next(c for c in px.connections() if c["id"] == cid)


def test_pass_through(proxy, conns, redis_server, name):
    c = connect(proxy, conns)
    assert c.command("PING") == "PONG"
    assert c.command("SET", name, "v1") == "OK"
    assert c.command("GET", name) == b"v1"
    assert redis_server.command("GET", name) == b"v1"
    big = os.urandom(4 << 20)  # larger than socket buffers: partial writes both ways
    assert c.command("SET", name, big) == "OK"
    assert c.command("GET", name) == big
    assert proxy.url == f"redis://127.0.0.1:{proxy.port}"
    assert proxy.command("ping") == "PONG"


def test_delay_up_200ms(proxy, conns):
    c = connect(proxy, conns)
    assert c.command("PING") == "PONG"
    proxy.delay(up_ms=200)
    reply, ms = c.timed("PING")
    assert reply == "PONG"
    assert 200 <= ms < 400, ms
    proxy.delay(up_ms=0)
    reply, ms = c.timed("PING")
    assert reply == "PONG" and ms < 100, ms


def test_delay_down_and_both(proxy, conns):
    c = connect(proxy, conns)
    proxy.delay(down_ms=100)
    reply, ms = c.timed("PING")
    assert reply == "PONG" and 100 <= ms < 300, ms
    proxy.command("delay both 60")
    reply, ms = c.timed("PING")
    assert reply == "PONG" and 120 <= ms < 320, ms


def test_delay_keeps_the_order(proxy, conns):
    """A chunk read after a shorter delay is set never overtakes an earlier one."""
    c = connect(proxy, conns)
    assert c.command("PING") == "PONG"
    proxy.delay(up_ms=150)
    start = time.monotonic()
    c.send("ECHO", "first")
    assert wait_for(lambda: pending(proxy, 0)["pending_up"] > 0, timeout=5)
    proxy.delay(up_ms=0)
    c.send("ECHO", "second")
    assert c.reply() == b"first"
    assert c.reply() == b"second"
    assert (time.monotonic() - start) * 1000 >= 150


def test_delay_applies_to_new_connections_and_per_connection(proxy, conns):
    proxy.delay(up_ms=150)
    a = connect(proxy, conns)
    b = connect(proxy, conns)
    assert proxy.wait_accepted(2)
    proxy.delay(up_ms=0, conn=1)  # conn 1 overrides the global delay
    _, slow = a.timed("PING")
    _, fast = b.timed("PING")
    assert slow >= 150 and fast < 100, (slow, fast)
    proxy.clear()  # drops the overrides and the global delay
    _, ms = a.timed("PING")
    assert ms < 100, ms


def test_pause_buffers_and_resume_delivers(proxy, conns, redis_server, name):
    c = connect(proxy, conns)
    assert c.command("PING") == "PONG"
    proxy.pause()
    request = RespConn.encode("SET", name, "paused-write")
    c.sock.sendall(request)
    assert wait_for(lambda: pending(proxy, 0)["pending_up"] == len(request), timeout=5)
    assert pending(proxy, 0)["state"] == "paused"
    assert redis_server.command("GET", name) is None  # still buffered in the proxy
    proxy.resume()
    assert c.reply() == "OK"
    assert redis_server.command("GET", name) == b"paused-write"
    assert pending(proxy, 0) == {"id": 0, "pending_up": 0, "pending_down": 0, "state": "normal"}


def test_pause_buffers_replies_and_new_connections(proxy, conns, redis_server, name):
    """A paused reply waits in the proxy; a connection made while paused starts paused."""
    c = connect(proxy, conns)
    assert c.command("PING") == "PONG"
    proxy.delay(down_ms=100)
    c.send("SET", name, "x")
    assert wait_for(lambda: redis_server.command("GET", name) == b"x", timeout=5)
    proxy.pause()
    assert wait_for(lambda: pending(proxy, 0)["pending_down"] == len(b"+OK\r\n"), timeout=5)
    late = connect(proxy, conns)
    assert proxy.wait_accepted(2)
    assert pending(proxy, 1)["state"] == "paused"
    late.send("PING")
    assert wait_for(lambda: pending(proxy, 1)["pending_up"] > 0, timeout=5)
    resumed = time.monotonic()
    proxy.resume()
    assert c.reply() == "OK"
    # Buffered bytes leave one delay after the resume (down: 100 ms).
    assert (time.monotonic() - resumed) * 1000 >= 100
    assert late.reply() == "PONG"


def test_per_connection_pause(proxy, conns):
    a = connect(proxy, conns)
    b = connect(proxy, conns)
    assert proxy.wait_accepted(2)
    proxy.pause(conn=0)
    a.send("ECHO", "a")
    assert b.command("ECHO", "b") == b"b"  # conn 1 is not paused
    assert wait_for(lambda: pending(proxy, 0)["pending_up"] > 0, timeout=5)
    assert [c["state"] for c in proxy.connections()] == ["paused", "normal"]
    proxy.resume(conn=0)
    assert a.reply() == b"a"


def test_blackhole_discards_both_directions(proxy, conns, redis_server, name):
    c = connect(proxy, conns)
    assert c.command("PING") == "PONG"
    # Up: a request sent into the blackhole never reaches the server.
    proxy.blackhole()
    lost = RespConn.encode("SET", name, "lost") + RespConn.encode("ECHO", "lost")
    c.sock.sendall(lost)
    assert wait_for(lambda: proxy.stats()["discarded"] == len(lost), timeout=5)
    assert proxy.connections()[0]["state"] == "blackhole"
    proxy.resume()
    assert c.command("ECHO", "kept") == b"kept"  # the first reply to arrive
    assert redis_server.command("GET", name) is None
    # Down: a reply held back by a delay is discarded when the blackhole starts.
    proxy.delay(down_ms=300)
    c.send("SET", name, "done")
    assert wait_for(lambda: redis_server.command("GET", name) == b"done", timeout=5)
    assert wait_for(lambda: pending(proxy, 0)["pending_down"] > 0, timeout=5)
    proxy.blackhole()
    assert pending(proxy, 0)["pending_down"] == 0
    assert proxy.stats()["discarded"] == len(lost) + len(b"+OK\r\n")
    proxy.clear()
    assert c.command("ECHO", "after") == b"after"


def test_reset(proxy, conns):
    a = connect(proxy, conns)
    b = connect(proxy, conns)
    assert a.command("PING") == "PONG" and b.command("PING") == "PONG"
    assert proxy.reset(conn=0) == 1
    with pytest.raises(RESET_ERRORS):
        a.command("PING")
    assert b.command("PING") == "PONG"
    assert proxy.reset() == 1
    with pytest.raises(RESET_ERRORS):
        b.command("PING")
    assert wait_for(lambda: proxy.stats()["conns"] == 0, timeout=5)
    with pytest.raises(ProxyError, match="no connection 0"):
        proxy.pause(conn=0)


def test_drop_reply_once(proxy, conns, redis_server, name):
    c = connect(proxy, conns)
    assert c.command("PING") == "PONG"
    proxy.drop_reply_once()
    with pytest.raises(RESET_ERRORS):
        c.command("SET", name, "ran")
    assert redis_server.command("GET", name) == b"ran"  # the request ran, the reply was lost
    assert proxy.stats()["conns"] == 0
    assert proxy.stats()["discarded"] == len(b"+OK\r\n")
    again = connect(proxy, conns)  # once only
    assert again.command("GET", name) == b"ran"
    assert again.command("PING") == "PONG"


def test_refuse(proxy, conns):
    proxy.refuse(True)
    with pytest.raises(RESET_ERRORS):  # at connect() (the RST may beat its check) or at the reply
        connect(proxy, conns).command("PING")
    assert wait_for(lambda: proxy.stats()["refused"] == 1, timeout=5)
    assert proxy.stats() == {"conns": 0, "accepted": 0, "refused": 1, "discarded": 0}
    proxy.refuse(False)
    assert connect(proxy, conns).command("PING") == "PONG"
    assert proxy.stats() == {"conns": 1, "accepted": 1, "refused": 1, "discarded": 0}


def test_upstream_down_resets_the_client(fresh_redis, conns):
    with Proxy(fresh_redis.port) as px:
        fresh_redis.stop()
        with pytest.raises(RESET_ERRORS):
            connect(px, conns).command("PING")
        assert px.stats()["accepted"] == 1
        assert wait_for(lambda: px.stats()["conns"] == 0, timeout=5)


def test_list_and_stats(proxy, conns):
    assert proxy.connections() == [] and proxy.command("list") == ""
    assert proxy.stats() == {"conns": 0, "accepted": 0, "refused": 0, "discarded": 0}
    a = connect(proxy, conns)
    b = connect(proxy, conns)
    assert a.command("PING") == "PONG" and b.command("PING") == "PONG"
    assert [c["id"] for c in proxy.connections()] == [0, 1]
    assert proxy.stats() == {"conns": 2, "accepted": 2, "refused": 0, "discarded": 0}
    a.close()
    assert wait_for(lambda: proxy.stats()["conns"] == 1, timeout=5)
    assert proxy.connections() == [{"id": 1, "pending_up": 0, "pending_down": 0, "state": "normal"}]
    assert proxy.stats()["accepted"] == 2


@pytest.mark.parametrize("line, message", [
    ("", "empty"), ("frobnicate", "unknown command"), ("delay sideways 5", "bad direction"),
    ("delay up", "usage"), ("delay up -1", "out of range"), ("delay up abc", "bad delay"),
    ("refuse maybe", "usage"), ("conn x pause", "bad connection id"), ("conn 7 pause", "no connection 7"),
    ("conn 0 stats", "no connection 0"), ("pause now", "no arguments"),
])
def test_control_errors(proxy, line, message):
    with pytest.raises(ProxyError, match=message):
        proxy.command(line)
    assert proxy.command("ping") == "PONG"  # the control connection survives


def test_ctl_command_line(proxy, conns):
    def ctl(*words):
        return subprocess.run([sys.executable, PROXY_PY, "ctl", str(proxy.control_port), *words],
                              capture_output=True, text=True, timeout=30)

    r = ctl("ping")
    assert (r.returncode, r.stdout) == (0, "OK PONG\n")
    r = ctl("bogus")
    assert r.returncode == 1 and r.stdout.startswith("ERR unknown command")
    assert ctl("delay", "both", "50").returncode == 0
    _, ms = connect(proxy, conns).timed("PING")
    assert ms >= 100, ms
    r = ctl("stats")
    assert (r.returncode, r.stdout) == (0, "OK conns=1 accepted=1 refused=0 discarded=0\n")
    assert control(proxy.control_port, "clear") == "OK"


def test_watchlock_client_through_the_proxy(proxy, name):
    client = watchlock.Client(proxy.url)
    try:
        lock = client.lock(name, ttl=5)
        assert lock.acquire(blocking=False)
        assert proxy.stats()["accepted"] >= 1
        lock.release()
    finally:
        client.close()


def _start_raw(upstream_port: int, *extra: str, **popen):
    proc = subprocess.Popen([sys.executable, PROXY_PY, "--upstream", f"127.0.0.1:{upstream_port}", *extra],
                            stdout=subprocess.PIPE, text=True, **popen)
    line = proc.stdout.readline().split()
    assert line[0] == "READY", line
    return proc, int(line[1]), int(line[2])


def test_ends_at_stdin_eof(redis_server):
    proc, port, _ = _start_raw(redis_server.port, stdin=subprocess.PIPE)
    try:
        assert RespConn(port).command("PING") == "PONG"
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()


def test_ends_at_sigterm_and_quit(redis_server):
    proc, _, _ = _start_raw(redis_server.port, "--ignore-stdin", stdin=subprocess.PIPE)
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
    proc, _, cport = _start_raw(redis_server.port, stdin=subprocess.DEVNULL)  # /dev/null: not watched
    try:
        assert control(cport, "quit") == "OK"
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()


def test_ends_with_its_parent(redis_server):
    """A proxy whose parent is SIGKILLed exits (PR_SET_PDEATHSIG), stdin or not."""
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys, time
        p = subprocess.Popen([sys.executable, {PROXY_PY!r}, "--upstream", "127.0.0.1:{redis_server.port}",
                              "--ignore-stdin"], stdout=subprocess.PIPE, text=True)
        print(p.stdout.readline().split()[2], flush=True)
        time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        cport = int(parent.stdout.readline())
        assert control(cport, "ping") == "OK PONG"
    finally:
        parent.kill()
        parent.wait()

    def gone():
        try:
            control(cport, "ping", timeout=1)
            return False
        except OSError:
            return True
    assert wait_for(gone, timeout=10)


def test_wrapper_mode(redis_server):
    """`proxy.py -- CMD` runs CMD with WATCHLOCK_PROXY_* and returns its status."""
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(PROXY_PY)!r})
        from proxy import control
        from redis_server import _encode, _read_reply
        import socket
        port = int(os.environ["WATCHLOCK_PROXY_PORT"])
        assert os.environ["WATCHLOCK_PROXY_URL"] == f"redis://127.0.0.1:{{port}}"
        assert control(int(os.environ["WATCHLOCK_PROXY_CONTROL_PORT"]), "ping") == "OK PONG"
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(_encode(["PING"]))
            assert _read_reply(s.makefile("rb")) == "PONG"
        sys.exit(3)
        """)
    env = dict(os.environ, WATCHLOCK_TEST_PORT=str(redis_server.port))
    r = subprocess.run([sys.executable, PROXY_PY, "--", sys.executable, "-c", script],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 3, r.stderr
    assert "READY" not in r.stdout


def test_hold_up_at_splits_a_pipeline(proxy, conns, redis_server, name):
    """`conn ID hold-up-at TEXT`: the commands before TEXT in one write run,
    TEXT and what follows wait for resume (a delay would move the whole write)."""
    c = connect(proxy, conns)
    assert c.command("PING") == "PONG"
    direct = RespConn(redis_server.port)
    conns.append(direct)
    proxy.hold_up_at("INCR", conn=0)
    c.sock.sendall(c.encode("SET", name, "1") + c.encode("INCR", name))
    assert c.reply() == "OK"
    assert wait_for(lambda: proxy.connections()[0]["pending_up"] > 0, timeout=10)
    assert direct.command("GET", name) in (b"1", "1")  # the SET ran
    proxy.resume(conn=0)
    assert c.reply() == 2


def test_retried_release_after_a_waiter_got_in_is_no_loss(proxy, redis_url, name):
    """Issue 19 item 5: the first release ran (DEL + PUBLISH) but its reply
    came after the command timeout; a waiter got the lock; the retry finds
    the waiter's key. That is a release whose first try's outcome was
    unknown, not a loss: `with` must not raise LockLostError."""
    a_client = watchlock.Client(proxy.url + "?command_timeout=2s")
    b_client = watchlock.Client(redis_url)
    lost = []
    try:
        a = a_client.lock(name, ttl=30, on_lost=lambda *args: lost.append(args))
        b = b_client.lock(name, ttl=30)
        got = threading.Event()
        errors = []

        def waiter(retry_conn: int) -> None:
            try:
                assert b.acquire(timeout=10)  # woken by the first try's PUBLISH
                got.set()
                assert wait_for(lambda: any(c["id"] == retry_conn and c["pending_up"] > 0
                                            for c in proxy.connections()), timeout=10)
            except BaseException as e:  # reported by the main thread
                errors.append(e)
            finally:
                proxy.resume()

        with a:
            live = proxy.connections()
            assert len(live) == 1, live  # a's pooled connection
            proxy.pause()  # connections opened from now on (the retry's) wait
            proxy.resume(conn=live[0]["id"])
            proxy.delay(down_ms=60000, conn=live[0]["id"])  # the first try's reply is late
            th = threading.Thread(target=waiter, args=(proxy.stats()["accepted"],))
            th.start()
        th.join()
        assert not errors, errors
        assert got.is_set() and b.owned()
        assert not a.owned() and not a.lost and a.lost_reason is None
        b.release()
        assert not lost
    finally:
        a_client.close()
        b_client.close()
