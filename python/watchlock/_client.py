"""watchlock.Client, the default client, decorators and loss dispatch."""
from __future__ import annotations

import atexit
import enum
import inspect
import logging
import os
import re
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, TypeVar, Union

from . import _decorate, _native, _util
from ._kinds import FairLock, NameInfo, RWLock, Semaphore, name_info, set_permits
from ._lock import Lock, LockOptions, check_options
from ._runtime import HasRuntime, Runtime
from ._stats import client_stats
from ._util import OK, Name, fmt_name
from .exceptions import InvalidArgument

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._multi import MultiLock

log = logging.getLogger("watchlock")

DEFAULT_URL = "redis://127.0.0.1:6379"
F = TypeVar("F", bound=Callable[..., Any])


def redact_url(url: str) -> str:
    """The URL without its password, for messages."""
    url = re.sub(r"^([a-z][a-z0-9+.-]*://[^/@:,]*):[^@/]*@", r"\1:***@", url, flags=re.I)
    return re.sub(r"([?&](?:sentinel_)?password=)[^&]*", r"\1***", url, flags=re.I)


class Owner(NamedTuple):
    """Who holds a lock, as its holder recorded it (``Client.lock(..., label=)``,
    ``watchlock run``). Text that is not UTF-8 is decoded with U+FFFD."""

    host: str   #: the holder's host name
    pid: int    #: the holder's process id when it acquired
    label: str  #: the label it set (``watchlock run``: the command line)


class LockInfo(NamedTuple):
    """A lock as the server sees it (:meth:`Client.inspect`)."""

    held: bool                   #: some owner holds it
    remaining: Optional[float]   #: seconds of lease left (0 when free, None when held with no expiry)
    fencing_token: int           #: the fencing counter: the last token issued, or more (attempts that found it held spend numbers); 0 when none
    owner: Optional[Owner] = None  #: the current holder, None when free or it recorded none


class ListedLock(NamedTuple):
    """One held lock as :meth:`Client.list` found it."""

    name: bytes                  #: the lock's name (bytes: names are binary-safe)
    remaining: Optional[float]   #: seconds of lease left when listed (None: no expiry)
    fencing_token: int           #: the name's fencing counter, as LockInfo's
    owner: Optional[Owner] = None  #: the holder's record, None when it recorded none


class CheckCode(str, enum.Enum):
    """What a :class:`CheckFinding` is about. A str: compares equal to its
    name ("eviction", ...), the same names as ``watchlock check`` prints."""

    EVICTION = "eviction"              #: maxmemory-policy is not noeviction: lock keys can be evicted
    NO_PERSISTENCE = "no_persistence"  #: no AOF and no RDB: a restart forgets every lock
    FSYNC = "fsync"                    #: AOF without appendfsync always: a crash may lose the last second
    ACL_COMMANDS = "acl_commands"      #: the ACL user may not run EVALSHA/EVAL or a command the scripts call
    ACL_KEYS = "acl_keys"              #: the ACL user may not read and write keys watchlock:*
    ACL_CHANNELS = "acl_channels"      #: the ACL user may not SUBSCRIBE/PUBLISH watchlock:*: no wake-ups
    REPLICAS = "replicas"              #: connected replicas but min-replicas-to-write is 0
    SNAPSHOT_ONLY = "snapshot_only"    #: RDB only: a restart forgets the locks since the last snapshot
    REPLICA_ROLE = "replica_role"      #: the server is a replica: locks cannot be taken there
    UNCHECKED = "unchecked"            #: CONFIG GET or INFO denied: those settings were not checked
    RESTARTED = "restarted"            #: quorum: a member restarted; it counts toward no majority for one lease
    MEMBER_UNREACHABLE = "member_unreachable"  #: quorum: a member could not be checked (it counts against majorities)

    def __str__(self) -> str:
        return self.value


class CheckFinding(NamedTuple):
    """One problem :meth:`Client.check` found with the server."""

    code: Union[CheckCode, str]  #: a CheckCode (a plain str for codes newer than this package)
    message: str                 #: one line for people: what is set, what it breaks, what to change


class Client(HasRuntime):
    """A connection to one Redis server, shared by all threads of a process.

    ``url``: ``redis://[[user]:password@]host[:port][/db][?connect_timeout=2s&command_timeout=2s]``,
    ``rediss://...?cacert=FILE`` (TLS; also cert, key, sni, insecure),
    ``redis-sentinel://h1:26379,h2:26379/MASTER`` (``rediss-sentinel://``),
    ``redis-cluster://h1:7000,h2:7001`` (``rediss-cluster://``),
    or ``unix:///path/to/redis.sock?db=N``; any takes ``min_replicas=N``
    (README "URLs"); when None, the ``WATCHLOCK_URL``
    environment variable, else ``redis://127.0.0.1:6379``. Connects once to
    check the server (ConnectionError, AuthenticationError otherwise).

    A list or tuple of URLs opens a Redlock quorum of independent masters
    (each any single-master URL above, with its own password and TLS):
    ``Client(["redis://a:6379", "redis://b:6379", "redis://c:6379"])``. A lock
    is held while a majority grants it; a failed acquire raises LockTimeout
    only when a majority is held by others, ConnectionError when a majority
    cannot be reached (``Lock.members`` says what each member answered).
    One URL is the plain client; two are refused (InvalidArgument): no
    majority survives the loss of either. ``WATCHLOCK_URL`` may hold several
    URLs separated by spaces.

    Thread-safe. One Client per process and server is enough: it runs one
    watchdog thread for all its locks. ``close()`` (or ``with Client() as c:``)
    releases what its locks hold. A Client cannot be used in a forked child
    (ForkedError): open a new one there.
    """

    def __init__(self, url: Union[None, str, Sequence[str]] = None) -> None:
        if url is None:
            env = os.environ.get("WATCHLOCK_URL", "")
            # several URLs separated by spaces: a quorum, as the CLI reads it
            url = env.split() if len(env.split()) > 1 else (env.strip() or DEFAULT_URL)
        if isinstance(url, (list, tuple)):
            urls = list(url)
            for i, u in enumerate(urls):
                if not isinstance(u, str):
                    raise TypeError(f"url[{i}] must be a str, not {type(u).__name__}")
            if not urls:
                raise InvalidArgument("a quorum needs at least one URL (the list is empty)")
            redacted = " ".join(redact_url(u) for u in urls)
            for u in urls:
                if "\0" in u:
                    raise InvalidArgument(f"malformed URL {redact_url(u)!r}: it contains a NUL byte")
            if len(urls) == 1:
                st, h = _native.client_open(urls[0])
            else:
                st, h = _native.client_open_quorum(urls)
            if st != OK:
                _util.raise_status(st, f"cannot open watchlock client for {redacted}")
            self._runtime = Runtime(h, redacted)
            _live_clients.add(self)
            return
        if not isinstance(url, str):
            raise TypeError(f"url must be a str or a list of str, not {type(url).__name__}")
        redacted = redact_url(url)
        if "\0" in url:  # C would silently cut the URL at the NUL
            raise InvalidArgument(f"malformed URL {redacted!r}: it contains a NUL byte")
        st, h = _native.client_open(url)
        if st != OK:
            _util.raise_status(st, f"cannot open watchlock client for {redacted}")
        # The handle, the closed flag and the loss dispatcher, shared with
        # this client's Locks (_runtime.py).
        self._runtime = Runtime(h, redacted)
        _live_clients.add(self)

    @property
    def url(self) -> str:
        """The server URL, password hidden."""
        return self._runtime.url

    @property
    def closed(self) -> bool:
        return self._runtime.closed

    def _handle(self) -> _native.ClientHandle:
        """The core's client (ClientClosedError after close())."""
        return self._runtime.handle()

    def lock(self, name: Name, *, label: Optional[str] = None, **options: Unpack[LockOptions]) -> Lock:
        """A new :class:`Lock` for ``name`` (str or bytes). No network I/O: cheap.

        Options (durations are seconds, "500ms"/"30s"/"2m" or timedeltas;
        None or absent = the core's default; the core checks every value):
        ttl (30 s): the lease, renewed by the watchdog every renew_interval
        (ttl/3) while held, unless auto_renew (True) is False; max_renewals,
        max_hold (0 or None = unlimited) cap the renewals, after which the
        lease runs out. blocking_timeout (None = forever, 0 = try once): what
        ``with lock:`` and a bare ``acquire()`` wait; blocking=False: they try
        once (redis-py's). on_lost: callable(lock, reason) run on this
        client's dispatcher thread when the lock is lost, or "interrupt" to
        raise LockLostError in the thread (or cancel the asyncio task) that
        holds it. ``timeout=`` is refused (TypeError): it means the lease in
        redis-py, a hard cap; say blocking_timeout= for the wait, or ttl= for
        the lease (renewed: auto_renew=False or max_hold= to cap it).
        label: who holds it, recorded with this host's name and pid at each
        acquire and shown by :meth:`inspect` and ``watchlock status``/``list``
        (at most 1024 bytes as UTF-8; None = record nothing).
        """
        return Lock(self, name, label=label, **options)

    def multi_lock(self, names: Iterable[Name], **options: Unpack[LockOptions]) -> "MultiLock":
        """A new :class:`MultiLock` over ``names`` (a list of str or bytes):
        every name held, or none, with one lease. Options as :meth:`lock`'s.
        Acquire takes the names all or nothing: one script when they share a
        server (or a Cluster slot), else one global order with rollback, so
        two multi-locks over overlapping names never deadlock and a wait that
        runs out (or is interrupted) leaves nothing taken. The loss of any
        name is the loss of the whole hold, reported once (on_lost,
        LockLostError); ``lost_name`` says which. ``fencing_tokens``: one per
        name. Also a decorator. No network I/O."""
        from ._multi import MultiLock
        return MultiLock(self, names, **options)

    def fair_lock(self, name: Name, *, label: Optional[str] = None,
                  **options: Unpack[LockOptions]) -> FairLock:
        """A new :class:`FairLock` for ``name``: FIFO by arrival with direct
        hand-off (a release, or the holder's expiry, grants the lock to the
        oldest live waiter; nobody barges in). The options of :meth:`lock`;
        also a decorator (``@client.fair_lock(name)``). A name in use as
        another kind raises :class:`WrongTypeError` at acquire."""
        return FairLock(self, name, label=label, **options)

    def semaphore(self, name: Name, permits: int = 0, *, label: Optional[str] = None,
                  **options: Unpack[LockOptions]) -> Semaphore:
        """A new :class:`Semaphore` for ``name`` with ``permits`` permits (set
        by the first user of the name; 0 = the name's existing count; another
        count than the name's raises :class:`WrongTypeError`: change it with
        :meth:`set_permits`). ``acquire(blocking, timeout, *, permits=1)``
        (threading.Semaphore's) takes that many permits as one hold (leased, renewed, fenced); ``with sem:`` takes 1,
        ``with sem.take(k):`` k. The other options are :meth:`lock`'s."""
        return Semaphore(self, name, permits, label=label, **options)

    def rwlock(self, name: Name) -> RWLock:
        """A read-write lock on ``name``: ``.read_lock(**options)`` and
        ``.write_lock(**options)`` make lock objects of its sides (many
        readers or one writer, phase-fair; ``write.downgrade()``)."""
        return RWLock(self, name)

    def name_info(self, name: Name) -> NameInfo:
        """What the server knows of ``name`` whatever its kind: the kind
        (None when not in use), permits, holders, readers/writer, the queue
        (length, oldest wait). One round trip."""
        return name_info(self, name)

    def set_permits(self, name: Name, permits: int) -> None:
        """Admin: changes the permit count of semaphore ``name``."""
        set_permits(self, name, permits)

    def synchronized(self, name: Union[Name, Callable[..., Name]],
                     **lock_options: Unpack[LockOptions]) -> Callable[[F], F]:
        """Decorator: run the function while holding the lock ``name``.

        ``name`` is a template formatted with the call's arguments, bound to
        the function's signature with defaults applied:
        ``@client.synchronized("report:{customer_id}", ttl=10, blocking_timeout=5)``;
        attribute and index lookups work ("{order.id}", "{args[0]}"). It may
        also be a callable taking the function's arguments and returning the
        name. Coroutine functions are locked with ``async with``.
        lock_options are those of :meth:`lock`.
        """
        return _synchronized(lambda: self, name, lock_options)

    def inspect(self, name: Name) -> LockInfo:
        """The state of lock ``name`` on the server, without taking it, and
        who holds it (``owner``) when the holder recorded a label. One round
        trip."""
        st, o, held, remaining_ms, fence = _native.client_inspect_owner(self._handle(), name)
        if st != OK:
            _util.raise_status(st, f"cannot inspect lock {fmt_name(name)}", name)
        owner = None
        if o is not None:
            try:
                owner = Owner(_native.owner_host(o).decode("utf-8", "replace"), _native.owner_pid(o),
                              _native.owner_label(o).decode("utf-8", "replace"))
            finally:
                _native.owner_free(o)
        return LockInfo(bool(held), None if remaining_ms < 0 else remaining_ms / 1000.0, fence, owner)

    def list(self, pattern: Name = "*") -> List[ListedLock]:
        """Admin: the locks now held whose names match ``pattern`` (a glob as
        Redis's MATCH: ``*``, ``?``, ``[abc]``, ``\\`` escapes; "*" = all),
        sorted by name, as ``watchlock list``. Found with SCAN, never KEYS:
        not a snapshot, and one round trip per SCAN page."""
        st, lst = _native.client_list(self._handle(), pattern)
        if st != OK:
            _util.raise_status(st, f"cannot list locks matching {fmt_name(pattern)}")
        try:
            found = []
            for i in range(_native.lock_list_count(lst)):
                remaining_ms = _native.lock_list_remaining_ms(lst, i)
                o = _native.lock_list_owner(lst, i)  # borrowed from the list
                owner = None if o is None else Owner(
                    _native.owner_host(o).decode("utf-8", "replace"), _native.owner_pid(o),
                    _native.owner_label(o).decode("utf-8", "replace"))
                found.append(ListedLock(_native.lock_list_name(lst, i) or b"", None if remaining_ms < 0 else
                                        remaining_ms / 1000.0, _native.lock_list_fence(lst, i), owner))
            return found
        finally:
            _native.lock_list_free(lst)

    def force_release(self, name: Name) -> bool:
        """Admin: deletes lock ``name`` whoever holds it and wakes its waiters.
        True if it was held. The former owner learns of the loss at its next
        renewal."""
        st, released = _native.client_force_release(self._handle(), name)
        if st != OK:
            _util.raise_status(st, f"cannot force-release lock {fmt_name(name)}", name)
        return bool(released)

    def check(self) -> List[CheckFinding]:
        """The server settings and ACL permissions that break lock safety
        (eviction, persistence, replicas, commands, keys, channels); an empty
        list when there is nothing to warn about. Changes nothing on the
        server. Raises ConnectionError when it cannot be asked at all."""
        st, report = _native.client_check(self._handle())
        if st != OK:
            _util.raise_status(st, f"cannot check the server at {self._runtime.url}")
        try:
            findings = []
            for i in range(_native.report_count(report)):
                name = _native.check_name(_native.report_code(report, i))
                code: Union[CheckCode, str]
                try:
                    code = CheckCode(name)
                except ValueError:
                    code = name
                findings.append(CheckFinding(code, _native.report_message(report, i)))
            return findings
        finally:
            _native.report_free(report)

    def stats(self) -> Dict[str, Any]:
        """Counters and histograms for monitoring, since the client opened
        (_stats.py): held_locks, renew_rounds, renew_roundtrips, renewals,
        watchdog_cpu_us, subscribe_denied, acquires, contended_acquires,
        acquire_timeouts, release_retries (ints); lost (a dict: taken,
        expired, max_renewals, max_hold, connection); wait_time, hold_time,
        renew_rtt (:class:`watchlock.Histogram`, seconds). Lock-free, no
        round trip."""
        return client_stats(self._handle())

    def close(self) -> None:
        """Releases held locks (best effort), stops the watchdog; later calls
        on this client and its locks raise ClientClosedError. Idempotent.
        In a forked child it does nothing: the core leaves the parent's
        client alone (Runtime.close)."""
        self._runtime.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        runtime = self.__dict__.get("_runtime")
        if runtime is None or runtime.closed:  # never opened, or closed
            return
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"<watchlock.Client {self._runtime.url}{' closed' if self._runtime.closed else ''}>"

    def __reduce__(self) -> Any:
        raise TypeError("watchlock.Client cannot be pickled: open a Client in each process")


def _synchronized(get_client: Callable[[], Client], name: Union[Name, Callable[..., Name]],
                  lock_options: LockOptions) -> Callable[[F], F]:
    check_options(lock_options)
    if not (isinstance(name, (str, bytes)) or callable(name)):
        raise TypeError("synchronized() needs a lock name template (str or bytes) or a callable")

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn)

        def key(args: Any, kwargs: Any) -> Name:
            if callable(name):
                return name(*args, **kwargs)
            if isinstance(name, bytes):
                return name
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            try:
                return name.format(**bound.arguments)
            except (KeyError, IndexError, AttributeError) as e:
                raise InvalidArgument(f"lock name template {name!r} of {fn.__qualname__}() "
                                      f"cannot be formatted from its arguments: {e!r}", lock_name=name) from e

        return _decorate.decorate(fn, lambda args, kwargs: get_client().lock(key(args, kwargs), **lock_options))

    return decorate


# ---- the default client ------------------------------------------------------

_default: Optional[Client] = None
_default_mu = threading.Lock()


def default_client() -> Client:
    """The process's default client (WATCHLOCK_URL, else localhost), opened on
    first use and opened anew in a forked child or after it was closed."""
    global _default
    with _default_mu:
        if _default is None or _default.closed:
            _default = Client()
        return _default


def lock(name: Name, **lock_options: Unpack[LockOptions]) -> Lock:
    """``default_client().lock(name, ...)``."""
    check_options(lock_options)  # a TypeError for timeout= before connecting
    return default_client().lock(name, **lock_options)


def synchronized(name: Union[Name, Callable[..., Name]], **lock_options: Unpack[LockOptions]) -> Callable[[F], F]:
    """:meth:`Client.synchronized` on the default client (opened at the first call)."""
    return _synchronized(default_client, name, lock_options)


# ---- process lifetime -----------------------------------------------------------

_live_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


@atexit.register
def _close_all_at_exit() -> None:
    """Closes this process's clients before the interpreter goes away: held
    locks are released, watchdogs and dispatchers stop, no callback runs
    into a dying interpreter."""
    _util.exiting = True
    for client in list(_live_clients):
        try:
            client.close()  # a forked child's copy: left alone by the core
        except Exception:
            log.debug("watchlock: closing a client at exit failed", exc_info=True)


def _after_fork_in_child() -> None:
    global _default, _default_mu
    _util.forks += 1
    _default_mu = threading.Lock()  # may have been held by a parent thread at fork
    _default = None  # the parent's: a child opens its own


os.register_at_fork(after_in_child=_after_fork_in_child)
