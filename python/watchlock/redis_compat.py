"""A redis-py compatible lock class: migrate in one line.

    import redis
    from watchlock.redis_compat import Lock as WatchLock

    r = redis.Redis(host="cache", port=6379)
    with r.lock("orders:42", timeout=10, blocking_timeout=5, lock_class=WatchLock):
        ...

``r.lock(name, ..., lock_class=Lock)`` makes this class with redis-py's
arguments and gets redis-py's semantics where they differ from watchlock's
own :class:`watchlock.Lock`:

- the keys are redis-py's (the C core's name layout,
  watchlock_lock_set_key_layout): the lock is the key named like the lock,
  holding the holder's token (``lock.local.token``, ``acquire(token=...)``;
  1 .. 32 bytes without '.'), so a redis-py ``Lock`` and this one on one name
  exclude each other, neither releases nor extends the other's hold, and
  ``r.delete(name)`` frees it: half a fleet may run redis-py while the other
  half runs this (docs/python.md, "Migrating from redis-py");
- ``timeout`` is a hard cap, as redis-py's key TTL: the lease is ``timeout``
  and the watchdog does not renew it (``auto_renew=False``). With
  ``timeout=None`` the key never expires, as redis-py's (a crashed holder
  keeps it until ``r.delete(name)``; watchlock_lock_set_no_expiry): for a
  lease that frees the lock of a crashed holder and is renewed while the
  holder lives, use :class:`watchlock.Lock`;
- ``blocking``/``blocking_timeout`` are what ``with`` and a bare
  ``acquire()`` wait; ``sleep`` is accepted and checked but not used:
  waiters are woken by the release (pub/sub), not by polling;
- ``extend(additional_time, replace_ttl=False)`` adds to the time left (or
  replaces it) and returns True; ``reacquire()`` resets it to ``timeout``;
  both raise LockError for a lock made without a timeout, as redis-py;
- ``raise_on_release_error=False`` makes the ``with`` exit log, not raise,
  a release that failed because the lock was no longer owned;
- ``thread_local=True`` (the default): only the thread that acquired may
  release, extend or reacquire, and ``owned()`` is per thread;
- errors are redis-py's own classes (``redis.exceptions.LockError``,
  ``LockNotOwnedError``) when redis is installed, and also watchlock's
  (``watchlock.LockError``, ``watchlock.LockNotOwnedError``).

Underneath it is a :class:`watchlock.Lock` on a :class:`watchlock.Client`
made from the redis client's connection pool (host, port, db, username,
password, TLS files, unix socket path, timeouts), one per pool: fencing
tokens (``fencing_token``, counted under ``watchlock:{name}:fence``) and
loss detection work as with any watchlock lock.
"""
from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
import uuid
import weakref
from typing import Any, Dict, List, Optional, Tuple, Type, Union
from urllib.parse import quote

from . import exceptions as _wl
from ._client import Client
from ._lock import Lock as _WatchLock, set_hold_token, use_redis_py_keys
from ._util import OK, raise_status

__all__ = ["Lock", "AsyncLock", "LockError", "LockNotOwnedError", "client_for", "url_for"]

log = logging.getLogger("watchlock")

try:  # redis-py's classes when it is installed, so that `except redis.exceptions.LockError` works
    from redis import exceptions as _rx
except ImportError:  # pragma: no cover - redis is installed where this is tested
    _rx = None  # type: ignore[assignment]

_LockErrorBases: Tuple[type, ...] = ((_rx.LockError,) if _rx is not None else ()) + (_wl.LockError,)


class LockError(*_LockErrorBases):  # type: ignore[misc]
    """redis-py's ``LockError`` (when redis is installed) and a
    :class:`watchlock.LockError`: ``message`` and ``lock_name`` as redis-py's."""

    def __init__(self, message: Optional[str] = None, lock_name: Union[str, bytes, None] = None) -> None:
        Exception.__init__(self, message)
        self.message = message
        self.lock_name = lock_name
        self.detail = ""


_NotOwnedBases: Tuple[type, ...] = ((_rx.LockNotOwnedError,) if _rx is not None else ()) + (
    LockError, _wl.LockNotOwnedError)


class LockNotOwnedError(*_NotOwnedBases):  # type: ignore[misc]
    """redis-py's ``LockNotOwnedError`` (when redis is installed) and a
    :class:`watchlock.LockNotOwnedError`: the lock is not (or no longer) held."""


# ---- a watchlock Client per redis connection pool ------------------------------

_clients: "weakref.WeakKeyDictionary[Any, Client]" = weakref.WeakKeyDictionary()
_clients_mu = threading.Lock()


def _duration(seconds: Any) -> str:
    return f"{max(1, math.ceil(float(seconds) * 1000))}ms"


def url_for(redis_client: Any) -> str:
    """The watchlock URL of a redis-py client (sync or asyncio): its
    connection pool's host, port, db, username, password (or credential
    provider), TLS files, unix socket path and socket timeouts."""
    pool = redis_client.connection_pool
    kw: Dict[str, Any] = dict(pool.connection_kwargs)
    user, password = kw.get("username"), kw.get("password")
    provider = kw.get("credential_provider")
    if provider is not None:
        creds = provider.get_credentials()
        user, password = (None, creds[0]) if len(creds) == 1 else (creds[0], creds[1])
    params: List[Tuple[str, str]] = []
    if kw.get("db"):
        params.append(("db", str(int(kw["db"]))))
    for key, param in (("socket_connect_timeout", "connect_timeout"), ("socket_timeout", "command_timeout")):
        if kw.get(key) is not None:
            params.append((param, _duration(kw[key])))
    cls_name = pool.connection_class.__name__
    if kw.get("path"):  # UnixDomainSocketConnection
        if password is not None:
            params.append(("password", str(password)))
        query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params)
        return f"unix://{quote(kw['path'])}" + (f"?{query}" if query else "")
    auth = ""
    if password is not None:
        auth = f"{quote(str(user or ''), safe='')}:{quote(str(password), safe='')}@"
    elif user:
        auth = f"{quote(str(user), safe='')}@"
    host = kw.get("host") or "localhost"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    db = params.pop(0)[1] if params and params[0][0] == "db" else None
    scheme = "redis"
    if "SSL" in cls_name or kw.get("ssl_ca_certs") or kw.get("ssl_certfile"):
        scheme = "rediss"
        for key, param in (("ssl_ca_certs", "cacert"), ("ssl_ca_path", "cacertdir"), ("ssl_certfile", "cert"),
                           ("ssl_keyfile", "key")):
            if kw.get(key):
                params.append((param, kw[key]))
        reqs = kw.get("ssl_cert_reqs")
        if reqs in ("none", 0) or getattr(reqs, "name", "") == "CERT_NONE":
            params.append(("insecure", "1"))
    query = "&".join(f"{k}={quote(str(v), safe='/')}" for k, v in params)
    return (f"{scheme}://{auth}{host}:{int(kw.get('port') or 6379)}" + (f"/{db}" if db else "")
            + (f"?{query}" if query else ""))


def _forget_clients_in_child() -> None:  # a forked child opens its own (the parent's raise ForkedError)
    global _clients_mu
    _clients_mu = threading.Lock()
    _clients.clear()


os.register_at_fork(after_in_child=_forget_clients_in_child)


def client_for(redis_client: Any) -> Client:
    """The watchlock Client of a redis-py client's connection pool, opened
    at the first call and shared by every lock of that pool (a closed one
    is opened anew)."""
    pool = redis_client.connection_pool
    with _clients_mu:
        client = _clients.get(pool)
        if client is None or client.closed:
            client = _clients[pool] = Client(url_for(redis_client))
        return client


# ---- the lock ---------------------------------------------------------------------


class Lock:
    """redis-py's ``redis.lock.Lock`` interface over a watchlock lock (see
    the module's docs for where it differs from watchlock's own Lock)."""

    def __init__(self, redis: Any, name: Union[str, bytes], timeout: Optional[float] = None,
                 sleep: float = 0.1, blocking: bool = True, blocking_timeout: Optional[float] = None,
                 thread_local: bool = True, raise_on_release_error: bool = True) -> None:
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self.local: Any = _Local() if self.thread_local else _Shared()
        self.local.token = None
        self._client = client_for(redis)
        self._mu = threading.Lock()
        self._inner = self._new_inner()
        self._extended = False  # extend() changed the lease: the next hold gets a fresh handle

    def _new_inner(self) -> _WatchLock:
        if self.timeout is None:
            inner = self._client.lock(self.name, auto_renew=False)
        else:
            inner = self._client.lock(self.name, ttl=self.timeout, auto_renew=False)  # a hard cap
        # redis-py's keys: the lock is the key `name`, holding the token
        st = use_redis_py_keys(inner, no_expiry=self.timeout is None)  # as redis-py's: a key without expiry
        if st != OK:
            raise_status(st, f"cannot use redis-py's keys for lock {self.name!r}", self.name)
        return inner

    def _set_token(self, inner: _WatchLock, token: Optional[Union[str, bytes]]) -> bytes:
        """The next hold's token (redis-py's acquire(token=...), else a fresh
        one as redis-py's uuid hex), set on the core's handle; as bytes."""
        if token is None:
            text = uuid.uuid4().hex
        else:
            text = token.decode() if isinstance(token, bytes) else str(token)
        if (st := set_hold_token(inner, text)) != OK:
            raise_status(st, f"acquire(token={token!r})", self.name)
        return text.encode()

    # ---- redis-py's API ---------------------------------------------------

    def __enter__(self) -> "Lock":
        if self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified", lock_name=self.name)

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Any) -> None:
        if self.raise_on_release_error:
            self.release()
            return
        try:
            self.release()
        except LockError:
            log.warning("watchlock: lock %r was no longer owned at the end of its with block", self.name)

    def acquire(self, sleep: Optional[float] = None, blocking: Optional[bool] = None,
                blocking_timeout: Optional[float] = None, token: Optional[Union[str, bytes]] = None) -> bool:
        """Waits as redis-py's: ``blocking`` (False: try once) and
        ``blocking_timeout`` (None: until free), the lock's own when not
        given. True when acquired, False when not."""
        blocking, blocking_timeout = self._acquire_args(sleep, blocking, blocking_timeout)
        deadline = None if blocking_timeout is None else time.monotonic() + float(blocking_timeout)
        inner = self._hold_handle()
        if inner.owned() and not self._wait_for_other_owner(inner, blocking, deadline):
            return False  # held through this object (another thread, or not released): not reentrant
        value = self._set_token(inner, token)
        if not blocking:
            ok = inner.acquire(blocking=False)
        else:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ok = inner.acquire(timeout=left)
        if ok:
            self.local.token = value
        return ok

    def _acquire_args(self, sleep: Optional[float], blocking: Optional[bool],
                      blocking_timeout: Optional[float]) -> Tuple[bool, Optional[float]]:
        """acquire()'s arguments checked, and the lock's own where not given."""
        if sleep is not None and sleep < 0:
            raise ValueError("sleep must not be negative")
        return (self.blocking if blocking is None else blocking,
                self.blocking_timeout if blocking_timeout is None else blocking_timeout)

    def _hold_handle(self) -> _WatchLock:
        with self._mu:
            inner = self._inner
            if self._extended and inner.hold_count == 0:  # the lease back to `timeout` for this hold
                inner = self._inner = self._new_inner()
                self._extended = False
            return inner

    def _wait_for_other_owner(self, inner: _WatchLock, blocking: bool, deadline: Optional[float]) -> bool:
        """This object's lock is held (redis-py's key exists): wait as for any
        holder, polling every `sleep` seconds, for it to be released."""
        while inner.owned():
            if not blocking:
                return False
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            time.sleep(self.sleep if deadline is None else min(self.sleep, deadline - now))
        return True

    def locked(self) -> bool:
        """True when anybody holds the lock (the server's view, one round
        trip): the key `name` exists, as redis-py's."""
        return bool(self.redis.exists(self.name))

    def owned(self) -> bool:
        """True when this lock (in this thread, when thread_local) holds it."""
        return self.local.token is not None and self._inner.owned()

    def release(self) -> None:
        """Releases; LockError when this lock (thread) does not hold it,
        LockNotOwnedError when it was lost (timeout ran out, key deleted)."""
        if self.local.token is None:
            raise LockError("Cannot release an unlocked lock", lock_name=self.name)
        self.local.token = None
        try:
            self._inner.release()
        except _wl.LockNotOwnedError as e:
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name) from e

    def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:
        """Adds ``additional_time`` seconds to the time left (``replace_ttl``:
        sets it to that). True; LockError for an unheld lock or one without
        timeout, LockNotOwnedError when it was lost."""
        inner, seconds = self._extend_args(additional_time, replace_ttl)
        self._extend(inner, seconds, "extend")
        return True

    def reacquire(self) -> bool:
        """Resets the time left to ``timeout``. True; errors as extend()."""
        inner, seconds = self._reacquire_args()
        self._extend(inner, seconds, "reacquire")
        return True

    def _check_held(self, what: str) -> None:
        """In the caller's thread (the token may be thread-local)."""
        if self.local.token is None:
            raise LockError(f"Cannot {what} an unlocked lock", lock_name=self.name)
        if self.timeout is None:
            raise LockError(f"Cannot {what} a lock with no timeout", lock_name=self.name)

    def _extend_args(self, additional_time: float, replace_ttl: bool) -> Tuple[_WatchLock, float]:
        self._check_held("extend")
        inner = self._inner
        # the local deadline is conservative: the lease set is never longer than redis-py's PEXPIRE
        seconds = float(additional_time) if replace_ttl else inner.remaining + float(additional_time)
        with self._mu:
            self._extended = True  # the next hold gets a fresh handle with lease = timeout
        return inner, seconds

    def _reacquire_args(self) -> Tuple[_WatchLock, float]:
        self._check_held("reacquire")
        return self._inner, float(self.timeout)  # type: ignore[arg-type]

    def _extend(self, inner: _WatchLock, seconds: float, what: str) -> None:
        try:
            inner.extend(max(seconds, 0.001))
        except _wl.LockNotOwnedError as e:
            raise LockNotOwnedError(f"Cannot {what} a lock that's no longer owned", lock_name=self.name) from e

    # ---- watchlock's extras ------------------------------------------------

    @property
    def fencing_token(self) -> int:
        """The fencing token of the current (or last) hold."""
        return self._inner.fencing_token

    @property
    def watchlock_lock(self) -> _WatchLock:
        """The watchlock.Lock underneath (lost, lost_reason, remaining...)."""
        return self._inner

    def __repr__(self) -> str:
        return f"<watchlock.redis_compat.Lock {self.name!r} timeout={self.timeout}>"


class AsyncLock(Lock):
    """redis-py's ``redis.asyncio.lock.Lock`` interface, for
    ``redis.asyncio.Redis.lock(name, ..., lock_class=AsyncLock)``: the same
    semantics as :class:`Lock`, every method (but the constructor) a
    coroutine, on watchlock.Lock's awaitables (the owner is the task):
    waiting costs a task, not a thread, and release, extend, reacquire and
    locked run their round trip on the client's asyncio worker thread, so
    the event loop never blocks on I/O.
    A cancelled release() finishes before the cancellation is re-raised:
    the lock is never left released on the server but owned here."""

    async def __aenter__(self) -> "AsyncLock":
        if await self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified", lock_name=self.name)

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Any) -> None:
        if self.raise_on_release_error:
            await self.release()
            return
        try:
            await self.release()
        except LockError:
            log.warning("watchlock: lock %r was no longer owned at the end of its with block", self.name)

    async def acquire(self, sleep: Optional[float] = None, blocking: Optional[bool] = None,  # type: ignore[override]
                      blocking_timeout: Optional[float] = None, token: Optional[Union[str, bytes]] = None) -> bool:
        blocking, blocking_timeout = self._acquire_args(sleep, blocking, blocking_timeout)
        loop = asyncio.get_running_loop()
        deadline = None if blocking_timeout is None else loop.time() + float(blocking_timeout)
        inner = self._hold_handle()
        while inner.owned():  # held through this object: not reentrant, wait as for any holder
            now = loop.time()
            if not blocking or (deadline is not None and now >= deadline):
                return False
            await asyncio.sleep(self.sleep if deadline is None else min(self.sleep, deadline - now))
        value = self._set_token(inner, token)
        if not blocking:
            ok = await inner.acquire_async(blocking=False)
        else:
            ok = await inner.acquire_async(timeout=None if deadline is None else max(0.0, deadline - loop.time()))
        if ok:
            self.local.token = value
        return ok

    async def locked(self) -> bool:  # type: ignore[override]
        return bool(await self.redis.exists(self.name))

    async def owned(self) -> bool:  # type: ignore[override]
        return Lock.owned(self)

    async def release(self) -> None:  # type: ignore[override]
        if self.local.token is None:
            raise LockError("Cannot release an unlocked lock", lock_name=self.name)
        fut = asyncio.ensure_future(self._inner.release_async())
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            await asyncio.wait([fut])  # finish it: then the token goes, as the hold did
            self.local.token = None
            raise
        except _wl.LockNotOwnedError as e:
            self.local.token = None
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name) from e
        self.local.token = None

    async def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:  # type: ignore[override]
        inner, seconds = self._extend_args(additional_time, replace_ttl)
        await self._extend_async(inner, seconds, "extend")
        return True

    async def reacquire(self) -> bool:  # type: ignore[override]
        inner, seconds = self._reacquire_args()
        await self._extend_async(inner, seconds, "reacquire")
        return True

    async def _extend_async(self, inner: _WatchLock, seconds: float, what: str) -> None:
        try:
            await inner.extend_async(max(seconds, 0.001))
        except _wl.LockNotOwnedError as e:
            raise LockNotOwnedError(f"Cannot {what} a lock that's no longer owned", lock_name=self.name) from e


class _Local(threading.local):
    """thread_local=True: a token per thread (None in threads that did not acquire)."""
    token: Optional[bytes] = None


class _Shared:
    """thread_local=False: one token for every thread, as redis-py's."""
    token: Optional[bytes] = None
