"""Owner records from Python: Client.lock(..., label=) records host, pid and
label at acquire; Client.inspect(name).owner reads them (None when free or
not recorded, never an earlier hold's); LockInfo stays a 3-field-compatible
tuple; the label is checked."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

import watchlock
from conftest import wait_for


def test_owner_recorded_and_read(client, name):
    lock = client.lock(name, ttl=30, label="nightly backup \u00e9\n")
    with lock:
        info = client.inspect(name)
        assert info.held is True
        assert info.owner == watchlock.Owner(socket.gethostname(), os.getpid(), "nightly backup \u00e9\n")
        assert info.fencing_token == lock.fencing_token
    info = client.inspect(name)
    assert info.held is False and info.owner is None


def test_no_label_no_owner_and_no_stale_owner(client, name, redis_server):
    with client.lock(name):
        assert client.inspect(name).owner is None
    with client.lock(name, label="first"):
        pass
    # The next holder sets no label: the first one's record is still there, not shown.
    with client.lock(name):
        assert redis_server.command("EXISTS", f"watchlock:{{{name}}}:owner") == 1
        assert client.inspect(name).owner is None


def test_lockinfo_is_backward_compatible(client, name):
    held, remaining, token = client.inspect(name)[:3]
    assert (held, remaining, token) == (False, 0.0, 0)
    info = watchlock.LockInfo(True, 1.0, 5)  # three fields still make one
    assert info.owner is None and info == (True, 1.0, 5, None)


def test_label_is_checked(client, name):
    with pytest.raises(watchlock.InvalidArgument):
        client.lock(name, label="x" * 1025)
    client.lock(name, label="x" * 1024)
    client.lock(name, label="")
    with pytest.raises(watchlock.InvalidArgument):
        client.lock(name, label="a\0b")
    with pytest.raises(TypeError):
        client.lock(name, label=b"bytes")  # type: ignore[arg-type]


def test_owner_of_another_process_and_of_bytes_names(client, name, redis_url, tmp_path):
    """The pid is the acquiring process's, and bytes names work."""
    code = ("import sys, time, watchlock\n"
            "c = watchlock.Client(sys.argv[1])\n"
            "l = c.lock(sys.argv[2].encode() + b'\\xff', label='child')\n"
            "l.acquire()\n"
            "open(sys.argv[3], 'w').close()\n"
            "sys.stdin.read()\n")
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", code, redis_url, name, str(ready)], stdin=subprocess.PIPE)
    try:
        assert wait_for(lambda: ready.exists() or proc.poll() is not None, timeout=60)
        assert ready.exists()
        info = client.inspect(name.encode() + b"\xff")
        assert info.owner == watchlock.Owner(socket.gethostname(), proc.pid, "child")
    finally:
        proc.communicate(b"", timeout=60)
