"""Safety regressions in the Python layer (issue: one identity per hold,
loss that stays lost, no polling). Each test names the item it guards and
fails on the code before the fix."""
from __future__ import annotations

import re
import threading
import time

import pytest

import watchlock
from helpers import lock_key


def script_calls(server) -> int:
    """EVALSHA + EVAL calls the server has run so far (INFO commandstats)."""
    info = server.command("INFO", "commandstats")
    text = info.decode() if isinstance(info, bytes) else str(info)
    total = 0
    for cmd in ("evalsha", "eval"):
        m = re.search(rf"cmdstat_{cmd}:calls=(\d+)", text)
        total += int(m.group(1)) if m else 0
    return total


def test_main_thread_wait_sends_no_acquire_per_slice(fresh_redis, name):
    """Item 12: the main thread waits in short slices (so Ctrl-C stays
    responsive) but must not re-send the acquire script on each slice:
    before the fix, a 2 s wait sent about 16 scripts, one or two per 250 ms."""
    assert threading.current_thread() is threading.main_thread()
    with watchlock.Client(fresh_redis.url) as holder_client, watchlock.Client(fresh_redis.url) as waiter_client:
        holder = holder_client.lock(name, ttl=30, auto_renew=False)
        assert holder.acquire(blocking=False)
        waiter = waiter_client.lock(name, ttl=30)
        before = script_calls(fresh_redis)
        t0 = time.monotonic()
        assert waiter.acquire(timeout=2.0) is False
        assert time.monotonic() - t0 >= 2.0
        sent = script_calls(fresh_redis) - before
        # One try, one more once subscribed; nothing per slice.
        assert sent <= 3, f"{sent} acquire scripts for one 2 s wait"
        # The kept wait still wakes at the release, at once.
        done = threading.Event()
        # done is set before the release: the woken waiter may run before the timer thread does again
        threading.Timer(0.3, lambda: (done.set(), holder.release())).start()
        t1 = time.monotonic()
        assert waiter.acquire(timeout=10.0) is True
        assert done.is_set()
        assert time.monotonic() - t1 < 5.0
        waiter.release()


def test_url_with_nul_byte_is_refused():
    """Item 13: C strings end at NUL; the URL must not be cut silently."""
    with pytest.raises(watchlock.InvalidArgument, match="NUL"):
        watchlock.Client("redis://127.0.0.1:1/0\0?password=secret")


def test_acl_denial_is_permission_error_not_auth(fresh_redis, name):
    """Item 13: NOPERM is not an authentication failure."""
    assert fresh_redis.command("ACL", "SETUSER", "noscripts", "on", ">pw", "~*", "&*", "+@all",
                               "-evalsha", "-eval") in (b"OK", "OK")
    url = f"redis://noscripts:pw@127.0.0.1:{fresh_redis.port}"
    with watchlock.Client(url) as client:
        with pytest.raises(watchlock.PermissionDeniedError, match="NOPERM") as info:
            client.lock(name).acquire(blocking=False)
        assert not isinstance(info.value, watchlock.AuthenticationError)


def test_wrong_type_key_error_names_key_once(redis_server, client, name):
    """Item 13: a WRONGTYPE reply names the key, without the script SHA and
    without repeating "server error"."""
    key = lock_key(name)
    redis_server.command("RPUSH", key, "x")
    try:
        with pytest.raises(watchlock.ServerError) as info:
            client.lock(name).acquire(blocking=False)
        text = str(info.value)
        assert "WRONGTYPE" in text and key.decode() in text, text
        assert text.lower().count("server error") <= 1, text
        assert "script:" not in text and "user_script" not in text, text
    finally:
        redis_server.command("DEL", key)


def test_lost_stays_lost_after_late_extend_reply(fresh_redis, name):
    """Item 6: a reply that arrives after the local deadline never turns a
    LOST hold back into HELD."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "harness"))
    from proxy import Proxy

    with Proxy(fresh_redis.port) as proxy:
        with watchlock.Client(proxy.url) as client:
            lock = client.lock(name, ttl=1.0, auto_renew=False)
            assert lock.acquire(blocking=False)
            proxy.delay(up_ms=600, down_ms=600)  # extend's reply lands after the 1 s deadline
            seen_lost = threading.Event()

            def watch():
                while not seen_lost.is_set():
                    if lock.lost:
                        seen_lost.set()
                    time.sleep(0.002)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            with pytest.raises(watchlock.LockLostError):
                lock.extend(1.0)
            assert seen_lost.wait(5)
            assert lock.lost and not lock.owned()
            with pytest.raises(watchlock.LockLostError):
                lock.release()
