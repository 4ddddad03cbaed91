"""COMMAND of the CLI worker: runs under `watchlock run`, holding the lock.

Records "acquired" (fencing token from WATCHLOCK_FENCING_TOKEN, its pid and
watchlock's pid), does the resource work of common.Work, and records
"release_call" before it exits (watchlock releases after that). The only
way COMMAND learns of a loss is SIGTERM from watchlock: the handler records
"told" (how=sigterm) and from then on nothing is written. Run with
`python3 -S` (no site import: starts fast).
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import History, Redis, Work  # noqa: E402


def main() -> int:
    t_start = time.monotonic_ns()
    e = os.environ
    hold = int(e["FAULTS_HOLD"])
    name = e["FAULTS_NAME"]
    hist = History(e["FAULTS_HISTORY"], e["FAULTS_W"])
    told = {"t": None}

    def on_term(signum, frame):
        if told["t"] is None:
            told["t"] = time.monotonic_ns()
            hist.emit("told", t=told["t"], hold=hold, lock=name, how="sigterm", reason="sigterm",
                      fence=fence)

    stopping = {"now": False}

    def on_usr1(signum, frame):  # the worker is asked to stop: finish this iteration
        stopping["now"] = True

    fence = int(e.get("WATCHLOCK_FENCING_TOKEN", "0"))
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, on_usr1)
    spawned = int(e.get("FAULTS_SPAWNED_NS", "0"))  # when the worker started `watchlock run` (the same clock)
    hist.emit("acquired", t=t_start, hold=hold, lock=name, fence=fence, pid=os.getpid(), ppid=os.getppid(),
              **({"t_call": spawned} if spawned else {}))
    res = Redis(int(e["FAULTS_RESOURCE_PORT"]))
    work = Work(hist, res, e["FAULTS_SCRIPTS"], name)
    iters = int(e["FAULTS_ITERS"])
    idles = [int(x) for x in e["FAULTS_IDLE"].split(",")]

    def check():
        if told["t"] is None:
            return True
        return False

    for k in range(iters):
        if stopping["now"]:
            break
        if not work.once(hold, fence, check, idles[k % len(idles)], left=iters - 1 - k):
            break
    hist.emit("release_call", hold=hold, lock=name, held=told["t"] is None)
    res.close()
    return 0 if told["t"] is None else 143


if __name__ == "__main__":
    sys.exit(main())
