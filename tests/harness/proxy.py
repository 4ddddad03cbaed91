#!/usr/bin/env python3
"""A controllable TCP proxy for fault-injection tests (latency, partitions,
lost replies, resets, refused connections).

The proxy sits between a client and one upstream server (normally a
redis-server started by redis_server.py). Every accepted client connection
gets its own upstream connection and an id: 0, 1, 2 ... in accept order. A
single-threaded event loop (epoll via selectors) moves the bytes and keeps a
per-direction queue of chunks with a due time (time.monotonic), so delays are
precise to about a millisecond and chunks never overtake each other.

Running it
----------
    python3 tests/harness/proxy.py --upstream 127.0.0.1:PORT

listens on 127.0.0.1 at a free port for clients and at a second free port for
control, prints exactly one line ``READY <listen_port> <control_port>`` on
stdout (flushed) and runs until

  * its stdin reaches EOF (the parent closed the pipe or died); stdin that
    cannot be watched (/dev/null, a regular file) is ignored, as with
    ``--ignore-stdin``;
  * it gets SIGTERM, SIGINT or SIGHUP, or the control command ``quit``;
  * its parent process dies (PR_SET_PDEATHSIG, then a getppid() check for the
    race where the parent died before that).

``--upstream`` defaults to 127.0.0.1:$WATCHLOCK_TEST_PORT (set by
``redis_server.py -- CMD``). With ``-- CMD ARGS...`` at the end the proxy runs
CMD instead of printing READY, with WATCHLOCK_PROXY_URL, WATCHLOCK_PROXY_PORT
and WATCHLOCK_PROXY_CONTROL_PORT in its environment, and exits with CMD's
status:

    python3 tests/harness/redis_server.py -- \\
        python3 tests/harness/proxy.py -- lua5.4 tests/lua/run.lua

Control protocol
----------------
One text line per command on the control port (several control connections
may be open at once), one reply line per command: ``OK ...`` or
``ERR message``. Words are separated by blanks; MS is a number of
milliseconds (fractions allowed). "up" is client -> server, "down" is
server -> client.

  delay up|down|both MS [up|down|both MS]...
        every chunk read in that direction from now on is forwarded MS ms
        after it was read, in order (a chunk never overtakes an earlier one).
        Applies to all current and future connections that have no override.
  pause
        stop forwarding in both directions on every current and future
        connection, but keep reading and buffering what arrives (a network
        partition after which TCP retransmits everything).
  blackhole
        discard everything that arrives, in both directions (data already
        buffered too); the sockets stay open. A close (FIN) by either side is
        held back until ``resume``.
  resume
        end ``pause``/``blackhole`` everywhere: buffered chunks are forwarded
        one delay after the resume at the earliest (as retransmitted packets
        would cross a slow link) and forwarding continues.
  reset
        close every live connection on both sides with RST (SO_LINGER 0).
  drop-reply-once
        the next server -> client chunk read on any connection is discarded
        and that connection is reset on both sides right away: the request
        reached the server, the reply is lost.
  refuse on|off
        while on, new client connections are accepted and reset at once (the
        server looks unreachable). They get no id.
  conn ID hold-up-at TEXT
        split the next client -> server write that contains TEXT (bytes,
        case-sensitive, no blanks): what comes before TEXT is forwarded as
        usual, TEXT and everything after it on that connection is held until
        ``resume`` or ``conn ID resume``. Splits a pipeline between two of its
        commands (e.g. ``conn 0 hold-up-at INCR``), which a delay cannot: a
        delay moves the whole write. Held bytes count as pending_up in
        ``list``.
  conn ID delay ... | conn ID pause | conn ID resume | conn ID blackhole |
  conn ID reset | conn ID drop-reply-once
        the same for one connection only. A per-connection delay overrides the
        global one for that direction; ``conn ID resume`` ends that
        connection's pause/blackhole only.
  list
        ``OK id:pending_up:pending_down:state ...`` for the live connections
        (pending = bytes read but not yet forwarded; state = normal, paused or
        blackhole); just ``OK`` when there are none.
  stats
        ``OK conns=N accepted=M refused=R discarded=B`` (live connections,
        connections proxied since the start, connections refused by
        ``refuse on``, bytes thrown away by blackhole and drop-reply-once).
  clear
        delays 0 (per-connection overrides dropped), resume everything,
        refuse off, drop-reply-once off.
  ping  -> ``OK PONG``;   quit -> ``OK``, then the proxy exits.

From a shell (or Lua's os.execute / io.popen):

    python3 tests/harness/proxy.py ctl CONTROL_PORT pause

prints the reply line and exits 0 on OK, 1 on ERR (2 when it cannot connect).

From Python
-----------
    from proxy import Proxy
    with Proxy(redis.port) as px:              # a subprocess of the test
        client = watchlock.Client(px.url)      # "redis://127.0.0.1:PORT"
        px.delay(up_ms=200)                    # px.delay(down_ms=50, conn=0)
        px.pause(); px.resume(); px.blackhole(); px.reset(); px.drop_reply_once()
        px.refuse(True); px.connections(); px.stats(); px.clear()

C tests use tests/c/proxy_harness.h, which runs this program the same way.

From Lua (or a shell), start it with a pipe, read READY, end it with quit:

    local f = io.popen("python3 tests/harness/proxy.py --upstream 127.0.0.1:" .. port)
    local lport, cport = f:read("l"):match("^READY (%d+) (%d+)$")
    os.execute("python3 tests/harness/proxy.py ctl " .. cport .. " pause")
    ...
    os.execute("python3 tests/harness/proxy.py ctl " .. cport .. " quit"); f:close()
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import errno
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence

UP, DOWN = 0, 1
NORMAL, PAUSED, BLACKHOLE = "normal", "paused", "blackhole"
_DIRECTIONS = {"up": (UP,), "down": (DOWN,), "both": (UP, DOWN)}
_PER_CONN_COMMANDS = ("delay", "pause", "resume", "blackhole", "reset", "drop-reply-once", "hold-up-at")
_HELD = float("inf")  # the due time of chunks held by hold-up-at until resume
_RECV_SIZE = 65536
_MAX_CONTROL_LINE = 4096


class _Flow:
    """One direction of one connection: chunks read from src waiting for dst.

    queue holds [due, data] lists (data None marks the source's EOF); pending
    counts the bytes in it; blocked is set while dst's send buffer is full.
    """

    __slots__ = ("src", "dst", "queue", "pending", "read_open", "last_due", "blocked", "done")

    def __init__(self, src: socket.socket, dst: socket.socket):
        self.src, self.dst = src, dst
        self.queue: collections.deque = collections.deque()
        self.pending = 0
        self.read_open = True  # src has not reached EOF
        self.last_due = 0.0  # due time of the newest chunk (keeps the order)
        self.blocked = False
        self.done = False  # EOF passed on to dst (shutdown SHUT_WR)


class _Conn:
    """A proxied client connection and its upstream connection."""

    def __init__(self, cid: int, client: socket.socket, upstream: socket.socket, mode: str):
        self.id = cid
        self.client, self.upstream = client, upstream
        self.connected = False  # upstream connect() finished
        self.mode = mode
        self.delay: List[Optional[float]] = [None, None]  # per-direction override (s)
        self.drop_reply = False
        self.hold_at: Optional[bytes] = None  # hold-up-at: split before these bytes
        self.held = False  # chunks are held (due _HELD) until resume
        self.flows = (_Flow(client, upstream), _Flow(upstream, client))
        self.closed = False


class ProxyServer:
    """The event loop behind the program; run() blocks until stop()."""

    def __init__(self, upstream: tuple, host: str = "127.0.0.1", stdin_fd: Optional[int] = None):
        self.upstream = upstream
        self.sel = selectors.DefaultSelector()
        self.listener = self._listen(host)
        self.control = self._listen(host)
        self.port = self.listener.getsockname()[1]
        self.control_port = self.control.getsockname()[1]
        self.conns: Dict[int, _Conn] = {}
        self.next_id = 0
        self.refused = 0
        self.discarded = 0  # bytes thrown away by blackhole and drop-reply-once
        self.mode = NORMAL
        self.delay = [0.0, 0.0]  # global delays (s)
        self.drop_reply = False
        self.refusing = False
        self.stopping = False
        self.exit_status = 0
        self._masks: Dict[socket.socket, int] = {}
        self._control_bufs: Dict[socket.socket, bytes] = {}
        self.child: Optional[subprocess.Popen] = None
        self._pidfd: Optional[int] = None
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, ("listen", None))
        self.sel.register(self.control, selectors.EVENT_READ, ("control-listen", None))
        self.sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        if stdin_fd is not None:
            try:
                self.sel.register(stdin_fd, selectors.EVENT_READ, ("stdin", None))
            except (PermissionError, ValueError, OSError):
                pass  # /dev/null or a regular file: cannot be watched, ignored

    def watch_child(self, child: subprocess.Popen) -> None:
        """run() ends when child exits, returning its exit status."""
        self.child = child
        self._pidfd = os.pidfd_open(child.pid)
        self.sel.register(self._pidfd, selectors.EVENT_READ, ("child", None))

    @staticmethod
    def _listen(host: str) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        s.listen(128)
        s.setblocking(False)
        return s

    # ----------------------------------------------------------------- loop

    def wake(self) -> None:
        """Makes run() look at stopping (safe from signal handlers and threads)."""
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def stop(self) -> None:
        self.stopping = True
        self.wake()

    def run(self) -> int:
        try:
            while not self.stopping:
                for key, mask in self.sel.select(self._timeout()):
                    self._dispatch(key, mask)
                    if self.stopping:
                        break
                for conn in list(self.conns.values()):
                    self._pump(conn)
        finally:
            self._close_all()
        return self.exit_status

    def _timeout(self) -> Optional[float]:
        """Seconds until the earliest chunk is due (None: nothing scheduled)."""
        first = None
        for conn in self.conns.values():
            if conn.mode != NORMAL or not conn.connected:
                continue
            for flow in conn.flows:
                if flow.queue and not flow.blocked and flow.queue[0][0] != _HELD:
                    due = flow.queue[0][0]
                    if first is None or due < first:
                        first = due
        if first is None:
            return None
        return max(0.0, first - time.monotonic())

    def _dispatch(self, key, mask: int) -> None:
        kind, conn = key.data
        if kind == "client" or kind == "upstream":
            if conn.closed:
                return
            if kind == "upstream" and not conn.connected:
                self._finish_connect(conn)
            else:
                direction = UP if kind == "client" else DOWN
                if mask & selectors.EVENT_WRITE:
                    conn.flows[1 - direction].blocked = False
                if mask & selectors.EVENT_READ:
                    self._read(conn, direction)
            if not conn.closed:
                self._pump(conn)
        elif kind == "listen":
            self._accept()
        elif kind == "control-listen":
            self._accept_control()
        elif kind == "control":
            self._control_read(key.fileobj)
        elif kind == "wake":
            try:
                while self._wake_r.recv(512):
                    pass
            except BlockingIOError:
                pass
        elif kind == "stdin":
            try:
                data = os.read(key.fd, 4096)
            except OSError:
                data = b""
            if not data:
                self.stopping = True
        elif kind == "child":
            self.exit_status = self.child.wait()
            self.stopping = True

    # --------------------------------------------------------- connections

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # EMFILE, ECONNABORTED ...: try again at the next event
            client.setblocking(False)
            if self.refusing:
                self.refused += 1
                _abort(client)
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            upstream.setblocking(False)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(self.next_id, client, upstream, self.mode)
            self.next_id += 1
            self.conns[conn.id] = conn
            err = upstream.connect_ex(self.upstream)
            if err == 0:
                conn.connected = True
            elif err not in (errno.EINPROGRESS, errno.EAGAIN):
                self._reset(conn)  # upstream refused: so is the client
                continue
            self._sync(conn)

    def _finish_connect(self, conn: _Conn) -> None:
        err = conn.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err != 0:
            self._reset(conn)
            return
        conn.connected = True
        self._sync(conn)

    def _read(self, conn: _Conn, direction: int) -> None:
        flow = conn.flows[direction]
        try:
            data = flow.src.recv(_RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._reset(conn)  # RST or error on one side: reset the other too
            return
        now = time.monotonic()
        if data and direction == DOWN and conn.mode != BLACKHOLE and (conn.drop_reply or self.drop_reply):
            if conn.drop_reply:
                conn.drop_reply = False
            else:
                self.drop_reply = False
            self.discarded += len(data)
            self._reset(conn)
            return
        if not data:
            flow.read_open = False
        elif conn.mode == BLACKHOLE:
            self.discarded += len(data)
            return
        delay = conn.delay[direction]
        if delay is None:
            delay = self.delay[direction]
        if data and direction == UP and conn.hold_at is not None and conn.hold_at in data:
            at = data.index(conn.hold_at)
            conn.hold_at = None
            if at > 0:
                self._enqueue(flow, max(now + delay, flow.last_due), data[:at])
            conn.held = True
            flow.last_due = _HELD  # this chunk and every later one wait for resume
            data = data[at:]
        self._enqueue(flow, max(now + delay, flow.last_due), data)
        if not data:
            self._sync(conn)

    @staticmethod
    def _enqueue(flow: _Flow, due: float, data: bytes) -> None:
        flow.last_due = due
        flow.queue.append([due, data or None])
        flow.pending += len(data)

    def _unhold(self, conn: _Conn) -> None:
        """Ends hold-up-at: the held chunks are due now (after the delay)."""
        if not conn.held:
            return
        conn.held = False
        flow = conn.flows[UP]
        delay = conn.delay[UP] if conn.delay[UP] is not None else self.delay[UP]
        due = time.monotonic() + delay
        for item in flow.queue:
            if item[0] == _HELD:
                item[0] = due
        flow.last_due = due if flow.queue else 0.0

    def _pump(self, conn: _Conn) -> None:
        """Forwards every chunk that is due (normal mode, upstream connected)."""
        if conn.closed or conn.mode != NORMAL or not conn.connected:
            return
        now = time.monotonic()
        for flow in conn.flows:
            while flow.queue and not flow.blocked and flow.queue[0][0] <= now:
                item = flow.queue[0]
                data = item[1]
                if data is None:
                    flow.queue.popleft()
                    flow.done = True
                    try:
                        flow.dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    continue
                try:
                    n = flow.dst.send(data)
                except (BlockingIOError, InterruptedError):
                    n = 0
                except OSError:
                    self._reset(conn)
                    return
                flow.pending -= n
                if n < len(data):
                    item[1] = data[n:]
                    flow.blocked = True
                else:
                    flow.queue.popleft()
        if conn.flows[UP].done and conn.flows[DOWN].done:
            self._close(conn, abort=False)
        else:
            self._sync(conn)

    def _sync(self, conn: _Conn) -> None:
        """Registers each socket of conn for the events it needs now."""
        if conn.closed:
            return
        up, down = conn.flows
        want = {conn.client: (selectors.EVENT_READ if up.read_open else 0)
                | (selectors.EVENT_WRITE if down.blocked else 0)}
        if conn.connected:
            want[conn.upstream] = ((selectors.EVENT_READ if down.read_open else 0)
                                   | (selectors.EVENT_WRITE if up.blocked else 0))
        else:
            want[conn.upstream] = selectors.EVENT_WRITE
        for sock, mask in want.items():
            old = self._masks.get(sock, 0)
            if mask == old:
                continue
            data = ("client" if sock is conn.client else "upstream", conn)
            if old == 0:
                self.sel.register(sock, mask, data)
            elif mask == 0:
                self.sel.unregister(sock)
            else:
                self.sel.modify(sock, mask, data)
            if mask:
                self._masks[sock] = mask
            else:
                self._masks.pop(sock, None)

    def _close(self, conn: _Conn, abort: bool) -> None:
        if conn.closed:
            return
        conn.closed = True
        self.conns.pop(conn.id, None)
        for sock in (conn.client, conn.upstream):
            if self._masks.pop(sock, 0):
                self.sel.unregister(sock)
            if abort:
                _abort(sock)
            else:
                sock.close()

    def _reset(self, conn: _Conn) -> None:
        self._close(conn, abort=True)

    def _close_all(self) -> None:
        for conn in list(self.conns.values()):
            self._close(conn, abort=False)
        for sock in list(self._control_bufs):
            sock.close()
        self._control_bufs.clear()
        for s in (self.listener, self.control, self._wake_r, self._wake_w):
            s.close()
        self.sel.close()
        if self._pidfd is not None:
            os.close(self._pidfd)

    # ---------------------------------------------------- mode transitions

    def _set_mode(self, conn: _Conn, mode: str) -> None:
        if mode == BLACKHOLE:
            for flow in conn.flows:
                kept = [item for item in flow.queue if item[1] is None]
                flow.queue = collections.deque(kept)
                self.discarded += flow.pending
                flow.pending = 0
        elif mode == NORMAL and conn.mode != NORMAL:
            now = time.monotonic()
            for direction, flow in enumerate(conn.flows):
                delay = conn.delay[direction]
                if delay is None:
                    delay = self.delay[direction]
                earliest = now + delay
                for item in flow.queue:
                    item[0] = max(item[0], earliest)
                flow.last_due = max(flow.last_due, earliest if flow.queue else 0.0)
        conn.mode = mode

    # ------------------------------------------------------------- control

    def _accept_control(self) -> None:
        while True:
            try:
                sock, _ = self.control.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            sock.settimeout(2.0)  # recv only runs when readable; bounds sendall
            self._control_bufs[sock] = b""
            self.sel.register(sock, selectors.EVENT_READ, ("control", None))

    def _control_close(self, sock: socket.socket) -> None:
        self._control_bufs.pop(sock, None)
        self.sel.unregister(sock)
        sock.close()

    def _control_read(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(4096)
        except OSError:
            data = b""
        if not data:
            self._control_close(sock)
            return
        buf = self._control_bufs[sock] + data
        replies = []
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            replies.append(self.execute(line.decode("utf-8", "replace")))
        self._control_bufs[sock] = buf
        if len(buf) > _MAX_CONTROL_LINE:
            replies.append("ERR line too long")
        try:
            if replies:
                sock.sendall("".join(r + "\n" for r in replies).encode())
        except OSError:
            self._control_close(sock)
            return
        if len(buf) > _MAX_CONTROL_LINE:
            self._control_close(sock)

    def execute(self, line: str) -> str:
        """Runs one control command; returns the reply line (without newline)."""
        words = line.split()
        if not words:
            return "ERR empty command"
        conn = None
        if words[0].lower() == "conn":
            if len(words) < 3:
                return "ERR usage: conn ID COMMAND ..."
            try:
                cid = int(words[1])
            except ValueError:
                return f"ERR bad connection id {words[1]!r}"
            conn = self.conns.get(cid)
            if conn is None:
                return f"ERR no connection {cid}"
            words = words[2:]
        cmd, args = words[0].lower(), words[1:]
        if conn is not None and cmd not in _PER_CONN_COMMANDS:
            return f"ERR {cmd} has no per-connection form"
        handler = getattr(self, "_cmd_" + cmd.replace("-", "_"), None)
        if handler is None:
            return f"ERR unknown command {cmd!r}"
        try:
            reply = handler(conn, args)
        except ValueError as e:
            return f"ERR {e}"
        return "OK" if not reply else "OK " + reply

    @staticmethod
    def _no_args(cmd: str, args: Sequence[str]) -> None:
        if args:
            raise ValueError(f"{cmd} takes no arguments")

    def _cmd_delay(self, conn: Optional[_Conn], args: Sequence[str]) -> str:
        if not args or len(args) % 2:
            raise ValueError("usage: delay up|down|both MS [up|down|both MS]...")
        settings = []
        for i in range(0, len(args), 2):
            dirs = _DIRECTIONS.get(args[i].lower())
            if dirs is None:
                raise ValueError(f"bad direction {args[i]!r} (up, down or both)")
            try:
                ms = float(args[i + 1])
            except ValueError:
                raise ValueError(f"bad delay {args[i + 1]!r}") from None
            if not 0 <= ms <= 3600_000:
                raise ValueError(f"delay out of range: {args[i + 1]}")
            settings += [(d, ms / 1000.0) for d in dirs]
        target = conn.delay if conn is not None else self.delay
        for d, seconds in settings:
            target[d] = seconds
        return ""

    def _apply_mode(self, conn: Optional[_Conn], mode: str) -> None:
        if conn is not None:
            self._set_mode(conn, mode)
            return
        self.mode = mode
        for c in self.conns.values():
            self._set_mode(c, mode)

    def _cmd_pause(self, conn, args) -> str:
        self._no_args("pause", args)
        self._apply_mode(conn, PAUSED)
        return ""

    def _cmd_blackhole(self, conn, args) -> str:
        self._no_args("blackhole", args)
        self._apply_mode(conn, BLACKHOLE)
        return ""

    def _cmd_resume(self, conn, args) -> str:
        self._no_args("resume", args)
        self._apply_mode(conn, NORMAL)
        for c in [conn] if conn is not None else list(self.conns.values()):
            c.hold_at = None
            self._unhold(c)
        return ""

    def _cmd_hold_up_at(self, conn, args) -> str:
        if conn is None or len(args) != 1:
            raise ValueError("usage: conn ID hold-up-at TEXT")
        conn.hold_at = args[0].encode()
        return ""

    def _cmd_reset(self, conn, args) -> str:
        self._no_args("reset", args)
        targets = [conn] if conn is not None else list(self.conns.values())
        for c in targets:
            self._reset(c)
        return str(len(targets))

    def _cmd_drop_reply_once(self, conn, args) -> str:
        self._no_args("drop-reply-once", args)
        if conn is not None:
            conn.drop_reply = True
        else:
            self.drop_reply = True
        return ""

    def _cmd_refuse(self, conn, args) -> str:
        if len(args) != 1 or args[0].lower() not in ("on", "off"):
            raise ValueError("usage: refuse on|off")
        self.refusing = args[0].lower() == "on"
        return ""

    def _cmd_list(self, conn, args) -> str:
        self._no_args("list", args)
        return " ".join(f"{c.id}:{c.flows[UP].pending}:{c.flows[DOWN].pending}:{c.mode}"
                        for c in sorted(self.conns.values(), key=lambda c: c.id))

    def _cmd_stats(self, conn, args) -> str:
        self._no_args("stats", args)
        return (f"conns={len(self.conns)} accepted={self.next_id} refused={self.refused} "
                f"discarded={self.discarded}")

    def _cmd_clear(self, conn, args) -> str:
        self._no_args("clear", args)
        self.delay = [0.0, 0.0]
        self.refusing = False
        self.drop_reply = False
        for c in self.conns.values():
            c.delay = [None, None]
            c.drop_reply = False
            c.hold_at = None
            self._unhold(c)
        self._apply_mode(None, NORMAL)
        return ""

    def _cmd_ping(self, conn, args) -> str:
        return "PONG"

    def _cmd_quit(self, conn, args) -> str:
        self.stop()
        return ""


def _abort(sock: socket.socket) -> None:
    """Closes a socket with RST instead of FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


# ---------------------------------------------------------------- client side


class ProxyError(Exception):
    """An ERR reply from the proxy's control port."""


def control(control_port: int, line: str, timeout: float = 10.0) -> str:
    """Sends one command on a fresh control connection; returns the reply line."""
    with socket.create_connection(("127.0.0.1", control_port), timeout=timeout) as s:
        s.sendall(line.encode() + b"\n")
        return _read_line(s)


def _read_line(s: socket.socket) -> str:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError("proxy control connection closed")
        buf += chunk
    return buf.decode().rstrip("\r\n")


class Proxy:
    """A proxy subprocess in front of 127.0.0.1:upstream_port.

    The subprocess dies with the test process (its stdin is a pipe from us;
    it also sets PR_SET_PDEATHSIG). Create and stop it from the same thread:
    PR_SET_PDEATHSIG fires when the thread that started it exits. Methods may
    be called from any thread (one control connection behind a lock).
    """

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1",
                 python: str = sys.executable):
        self.upstream = (upstream_host, upstream_port)
        self.python = python
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0
        self.control_port = 0
        self._sock: Optional[socket.socket] = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> "Proxy":
        host, port = self.upstream
        self.proc = subprocess.Popen(
            [self.python, os.path.abspath(__file__), "--upstream", f"{host}:{port}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        line = b""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.stop()
                    raise RuntimeError("proxy did not print READY in time")
                chunk = os.read(fd, 256)
                if not chunk:
                    self.stop()
                    raise RuntimeError("proxy exited before READY")
                line += chunk
        words = line.split()
        if len(words) != 3 or words[0] != b"READY":
            self.stop()
            raise RuntimeError(f"unexpected proxy output {line!r}")
        self.port, self.control_port = int(words[1]), int(words[2])
        return self

    def stop(self) -> None:
        """Ends the proxy (closing every proxied connection) and waits for it."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> "Proxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def command(self, line: str) -> str:
        """Sends one control line; returns the text after "OK" or raises ProxyError."""
        with self._lock:
            if self._sock is None:
                self._sock = socket.create_connection(("127.0.0.1", self.control_port), timeout=10)
            try:
                self._sock.sendall(line.encode() + b"\n")
                reply = _read_line(self._sock)
            except OSError:
                self._sock.close()
                self._sock = None
                raise
        if reply == "OK" or reply.startswith("OK "):
            return reply[3:]
        raise ProxyError(reply[4:] if reply.startswith("ERR ") else reply)

    @staticmethod
    def _prefix(conn: Optional[int]) -> str:
        return "" if conn is None else f"conn {int(conn)} "

    def delay(self, up_ms: float = 0, down_ms: float = 0, conn: Optional[int] = None) -> None:
        """Sets both directions' delays at once (globally, or for one connection)."""
        self.command(f"{self._prefix(conn)}delay up {up_ms:g} down {down_ms:g}")

    def pause(self, conn: Optional[int] = None) -> None:
        self.command(self._prefix(conn) + "pause")

    def resume(self, conn: Optional[int] = None) -> None:
        self.command(self._prefix(conn) + "resume")

    def blackhole(self, conn: Optional[int] = None) -> None:
        self.command(self._prefix(conn) + "blackhole")

    def reset(self, conn: Optional[int] = None) -> int:
        """Resets connections with RST; returns how many."""
        return int(self.command(self._prefix(conn) + "reset"))

    def drop_reply_once(self, conn: Optional[int] = None) -> None:
        self.command(self._prefix(conn) + "drop-reply-once")

    def hold_up_at(self, text: str, conn: int) -> None:
        """Splits conn's next write containing text: text and what follows wait for resume()."""
        self.command(f"conn {int(conn)} hold-up-at {text}")

    def refuse(self, on: bool = True) -> None:
        self.command("refuse on" if on else "refuse off")

    def connections(self) -> List[dict]:
        """[{"id", "pending_up", "pending_down", "state"}] of the live connections."""
        out = []
        for word in self.command("list").split():
            cid, up, down, state = word.split(":")
            out.append({"id": int(cid), "pending_up": int(up), "pending_down": int(down),
                        "state": state})
        return out

    def stats(self) -> Dict[str, int]:
        """{"conns": live, "accepted": proxied so far, "refused": refused so far,
        "discarded": bytes thrown away by blackhole and drop-reply-once}."""
        return {k: int(v) for k, v in (w.split("=") for w in self.command("stats").split())}

    def clear(self) -> None:
        self.command("clear")

    def wait_accepted(self, n: int, timeout: float = 10.0) -> bool:
        """Waits until at least n connections were accepted (proxied) in total."""
        deadline = time.monotonic() + timeout
        while self.stats()["accepted"] < n:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        return True


# ---------------------------------------------------------------- program


def _die_with_parent() -> None:
    """SIGTERM when the parent dies; exit now if it already has."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent == 1 or os.getppid() != parent:
        sys.exit(0)


def _parse_hostport(text: str) -> tuple:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return (host or "127.0.0.1", int(port))


def _ctl_main(argv: Sequence[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: proxy.py ctl CONTROL_PORT COMMAND [ARGS...]", file=sys.stderr)
        return 2
    try:
        reply = control(int(argv[0]), " ".join(argv[1:]))
    except OSError as e:
        print(f"ERR cannot reach the proxy control port {argv[0]}: {e}")
        return 2
    print(reply)
    return 0 if reply == "OK" or reply.startswith("OK ") else 1


def main(argv: Sequence[str]) -> int:
    if argv and argv[0] == "ctl":
        return _ctl_main(argv[1:])
    command: List[str] = []
    if "--" in argv:
        i = list(argv).index("--")
        argv, command = list(argv[:i]), list(argv[i + 1:])
    parser = argparse.ArgumentParser(description="Controllable TCP proxy for fault-injection tests.")
    parser.add_argument("--upstream", type=_parse_hostport,
                        help="HOST:PORT of the server (default 127.0.0.1:$WATCHLOCK_TEST_PORT)")
    parser.add_argument("--ignore-stdin", action="store_true",
                        help="do not exit at EOF on stdin (SIGTERM, quit or the parent's death end it)")
    args = parser.parse_args(argv)
    upstream = args.upstream
    if upstream is None:
        port = os.environ.get("WATCHLOCK_TEST_PORT", "")
        if not port.isdigit():
            parser.error("--upstream is required (or WATCHLOCK_TEST_PORT)")
        upstream = ("127.0.0.1", int(port))

    _die_with_parent()
    server = ProxyServer(upstream, stdin_fd=None if (args.ignore_stdin or command) else sys.stdin.fileno())

    def on_signal(signum, frame):
        server.stopping = True
        server.wake()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    if command:
        env = dict(os.environ, WATCHLOCK_PROXY_URL=f"redis://127.0.0.1:{server.port}",
                   WATCHLOCK_PROXY_PORT=str(server.port),
                   WATCHLOCK_PROXY_CONTROL_PORT=str(server.control_port))
        try:
            server.watch_child(subprocess.Popen(command, env=env))
        except OSError as e:
            print(f"proxy.py: cannot run {command[0]}: {e}", file=sys.stderr)
            return 127
    else:
        print(f"READY {server.port} {server.control_port}", flush=True)
    status = server.run()
    if server.child is not None and server.child.poll() is None:
        server.child.terminate()
        status = server.child.wait()
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
