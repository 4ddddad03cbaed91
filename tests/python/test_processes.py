"""Several processes: exact counting under one lock, SIGKILLed holders,
interpreter shutdown while holding locks."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import watchlock
from helpers import RedisAt

HERE = os.path.dirname(os.path.abspath(__file__))


def _env(redis_server):
    env = dict(os.environ, WATCHLOCK_URL=redis_server.url, WATCHLOCK_TEST_PORT=str(redis_server.port))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH", "")) if p)
    return env


def _worker(redis_server, *args, **kw):
    return subprocess.Popen([sys.executable, os.path.join(HERE, "workers.py"), *args],
                            env=_env(redis_server), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def test_4_processes_x_8_threads_count_exactly(redis_server, name):
    r = RedisAt(redis_server.port)
    r.command("SET", name + ":counter", "0")
    procs = [_worker(redis_server, "counter", name, "8", "25") for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    assert int(r.command("GET", name + ":counter")) == 4 * 8 * 25


def test_sigkilled_holder_is_recovered_within_its_lease(redis_server, client, name):
    ttl = 2.0
    p = _worker(redis_server, "hold", name, str(ttl))
    try:
        line = p.stdout.readline()
        assert line.startswith("held"), p.stderr.read()
        token = int(line.split()[1])
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        killed_at = time.monotonic()
        lock = client.lock(name)
        # Still held right after the kill: nobody released it ...
        left = client.inspect(name)
        assert left.held and 0 < left.remaining <= ttl
        assert lock.acquire(blocking=False) is False
        # ... and free once its lease (at most ttl) has run out: the waiter
        # gets it, bounded by the remaining lease, not by a release message.
        assert lock.acquire(timeout=ttl + 30)
        waited = time.monotonic() - killed_at
        assert lock.fencing_token > token
        lock.release()
        assert waited >= left.remaining - 0.5  # it really waited for the lease
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _exit_holding(redis_server, client, name, how):
    parent = client.lock(f"{name}:parent")
    parent.acquire()
    p = _worker(redis_server, "exit_holding", name, how)
    out, err = p.communicate(timeout=60)  # a hang fails here
    assert parent.owned()
    parent.release()
    assert p.returncode == 0, err
    assert "holding" in out
    assert "Traceback" not in err and "Fatal" not in err, err
    # the client was closed at exit: its locks were released, not left to expire
    for suffix in ("0", "1", "2", "int", "default"):
        assert client.inspect(f"{name}:{suffix}").held is False, suffix


def test_interpreter_exit_while_holding_locks(redis_server, client, name):
    _exit_holding(redis_server, client, name, "return")


def test_sys_exit_while_holding_locks(redis_server, client, name):
    _exit_holding(redis_server, client, name, "sys.exit")


def test_client_is_usable_in_a_new_process(redis_server, name):
    code = ("import watchlock, os\n"
            "c = watchlock.Client()\n"
            "with c.lock(os.environ['N']) as l: print(l.locked())\n")
    env = dict(_env(redis_server), N=name)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr
    assert isinstance(watchlock.Client, type)
