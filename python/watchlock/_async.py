"""asyncio for watchlock.Lock: waiting costs a task, not a thread.

Per client (its Runtime) a Hub holds

- one worker thread that runs the calls that take one round trip or none
  (a try-once acquire, release, extend, inspect) one after the other, for
  every task of every event loop; the loop only hands it a job and gets the
  outcome back through ``call_soon_threadsafe``;
- per lock name that tasks wait for, one queue of waiting tasks and one
  thread that waits in the core for the task at its head (the core's wait:
  woken by the holder's release through the client's subscriber, bounded by
  the holder's lease, never polling the server). When the head has the lock,
  or gave up, the next task in the queue is waited for. 1,000 tasks waiting
  for one name therefore cost one thread, and each release sends one
  acquire, not one per waiting task or per time slice.

Both kinds of threads start when there is work and end once idle, so a
client that no task uses has none, and a cancelled wait leaves neither a
thread nor a subscription behind (watchlock_lock_forget_wait drops the
subscription the core kept for the cancelled wait).

Cancellation and timeouts are decided on the loop, under a small mutex
shared with the thread doing the job (``_Job``): whichever of "the job
finished" and "the task gave up" comes first wins, and a lock acquired for
a task that had given up is released on the worker: a cancelled task never
leaks a hold. Nothing here blocks the event loop: a job is queued with
one non-blocking put, and the loop never waits for a thread.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, Optional, Tuple

from ._util import Name
from .exceptions import Error

if TYPE_CHECKING:
    from ._runtime import Runtime

_IDLE_S = 2.0  # a worker with nothing to do for this long ends (it starts again on demand)


class _Job:
    """One call done for a task on another thread: its outcome goes to the
    task's future unless the task gave up first (cancelled, timed out)."""

    __slots__ = ("loop", "future", "mu", "done", "gave_up", "result", "cancelled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.mu = threading.Lock()
        self.done = self.gave_up = False
        self.result: Any = None
        self.cancelled = threading.Event()  # tells a waiting thread to stop (between slices)

    def finish(self, result: Any, exc: Optional[BaseException]) -> bool:
        """On the thread: records the outcome; False when the task had given up."""
        with self.mu:
            self.done, self.result = True, result
            if self.gave_up:
                return False
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
            self.loop.call_soon_threadsafe(self._deliver, result, exc)
        return True

    def _deliver(self, result: Any, exc: Optional[BaseException]) -> None:
        if self.future.done():
            return
        if exc is not None:
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)

    def give_up(self) -> Tuple[bool, Any]:
        """On the loop: the task stops waiting. Returns (done, result): done
        when the job had already finished (its delivery may still be queued)."""
        with self.mu:
            if not self.done:
                self.gave_up = True
                self.cancelled.set()
            return self.done, self.result


class _Worker:
    """One thread running jobs in order; it ends once idle for _IDLE_S."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._mu = threading.Lock()
        self._jobs: "queue.SimpleQueue[Callable[[], None]]" = queue.SimpleQueue()
        self._running = False

    def submit(self, fn: Callable[[], None]) -> None:
        self._jobs.put(fn)
        with self._mu:
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._run, name=self._name, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                fn = self._jobs.get(timeout=_IDLE_S)
            except queue.Empty:
                with self._mu:
                    if self._jobs.empty():
                        self._running = False
                        return
                continue
            fn()


#: attempt(wait_ms, owner, cancelled): Lock._acquire for a task; True when acquired.
Attempt = Callable[[int, object, Optional[threading.Event]], bool]


class _Waiter:
    __slots__ = ("attempt", "forget_wait", "release", "owner", "deadline", "job")

    def __init__(self, attempt: Attempt, forget_wait: Callable[[], None], release: Callable[[], None],
                 owner: object, deadline: Optional[float], job: _Job) -> None:
        self.attempt, self.forget_wait, self.release = attempt, forget_wait, release
        self.owner, self.deadline, self.job = owner, deadline, job


class Hub:
    """A client's asyncio machinery (see the module's docstring)."""

    def __init__(self) -> None:
        self.pid = os.getpid()  # threads do not survive fork(): a child makes its own Hub
        self.worker = _Worker("watchlock-async")
        self._mu = threading.Lock()
        self._queues: Dict[Any, Deque[_Waiter]] = {}

    # ---- calls of one round trip ----------------------------------------

    def call(self, fn: Callable[[], Any], on_abandoned: Optional[Callable[[Any], None]] = None) -> _Job:
        """Runs fn on the worker. on_abandoned(result) runs there too when
        the task gave up before fn returned."""
        job = _Job(asyncio.get_running_loop())

        def run() -> None:
            try:
                result = fn()
            except BaseException as exc:  # handed to the awaiting task
                job.finish(None, exc)
                return
            if not job.finish(result, None) and on_abandoned is not None:
                on_abandoned(result)

        self.worker.submit(run)
        return job

    # ---- waiting for a name ----------------------------------------------

    def wait(self, name: Name, waiter: _Waiter) -> None:
        """Queues a task waiting for `name`; the name's thread waits for it
        when its turn comes. The job's result: True when acquired."""
        # a multi-lock's name is its tuple of names: one queue per tuple
        key: Any = name.encode() if isinstance(name, str) else name if isinstance(name, tuple) else bytes(name)
        with self._mu:
            found = self._queues.get(key)
            start = found is None
            q: Deque[_Waiter] = collections.deque() if found is None else found
            if start:
                self._queues[key] = q
            q.append(waiter)
        if start:
            threading.Thread(target=self._wait_for_name, args=(key, q), name="watchlock-async-wait",
                             daemon=True).start()

    def _wait_for_name(self, key: bytes, q: Deque[_Waiter]) -> None:
        while True:
            with self._mu:
                while q and q[0].job.cancelled.is_set():
                    q.popleft()
                if not q:
                    del self._queues[key]
                    return
                w = q.popleft()
            self._wait_one(w)

    @staticmethod
    def _wait_one(w: _Waiter) -> None:
        job = w.job
        wait = -1
        if w.deadline is not None:
            wait = max(0, int((w.deadline - time.monotonic()) * 1000 + 0.999))
        try:
            ok = w.attempt(wait, w.owner, job.cancelled)  # cut in slices: stops once job.cancelled is set
        except BaseException as exc:
            job.finish(None, exc)
            return
        if not ok:
            # The core keeps a timed-out wait (its subscription) for the next
            # acquire; this task is done waiting: give it up now.
            w.forget_wait()
        if not job.finish(ok, None) and ok:
            release_quietly(w.release)


def release_quietly(release: Callable[[], None]) -> None:
    with contextlib.suppress(Error):  # the task that wanted it gave up: nobody to tell
        release()


_hubs_mu = threading.Lock()


def hub(runtime: Runtime) -> Hub:
    """The client's Hub, made at its first asyncio use."""
    h: Optional[Hub] = runtime.async_hub
    if h is None or h.pid != os.getpid():
        with _hubs_mu:
            h = runtime.async_hub
            if h is None or h.pid != os.getpid():
                h = runtime.async_hub = Hub()
    return h


async def outcome(job: _Job, on_given_up: Optional[Callable[[Any], None]] = None) -> Any:
    """Awaits a job. If the task is cancelled first, the job is given up and
    on_given_up(result) runs (on the loop) when the job had already
    finished, so that its result (a lock acquired) is not lost."""
    try:
        return await job.future
    except asyncio.CancelledError:
        done, result = job.give_up()
        if done and on_given_up is not None:
            on_given_up(result)
        raise


async def acquire(runtime: Runtime, name: Name, attempt: Attempt, forget_wait: Callable[[], None],
                  release: Callable[[], None], wait: int) -> bool:
    """Lock.acquire_async: one try on the worker, then, if it must wait, a
    place in the name's queue (see the module's docstring)."""
    task = asyncio.current_task()
    owner: object = task if task is not None else threading.get_ident()
    h = hub(runtime)
    deadline = None if wait < 0 else time.monotonic() + wait / 1000.0

    def give_back(got: Any) -> None:
        if got:
            h.worker.submit(lambda: release_quietly(release))

    # Try once (also a reentrant acquire by the owner: no round trip).
    try_job = h.call(lambda: attempt(0, owner, None), on_abandoned=give_back)
    if await outcome(try_job, give_back):
        return True
    if wait == 0 or (deadline is not None and time.monotonic() >= deadline):
        return False
    job = _Job(asyncio.get_running_loop())
    h.wait(name, _Waiter(attempt, forget_wait, release, owner, deadline, job))
    timer = None
    if deadline is not None:
        def expire() -> None:
            if not job.give_up()[0] and not job.future.done():
                job.future.set_result(False)  # else the thread's outcome is on its way
        # The bound as a loop timer: a waiter behind others in the queue
        # times out without its thread; the thread stops waiting for the
        # head at its own deadline as well.
        timer = asyncio.get_running_loop().call_later(max(0.0, deadline - time.monotonic()), expire)
    try:
        return bool(await outcome(job, give_back))
    finally:
        if timer is not None:
            timer.cancel()


async def run(runtime: Runtime, fn: Callable[[], Any]) -> Any:
    """Runs fn (one round trip or none) on the client's worker. A cancelled
    task stops waiting for it; fn still completes there (a release is never
    cut in half)."""
    return await outcome(hub(runtime).call(fn))
