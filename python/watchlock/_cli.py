"""The `watchlock` console script of the Python package: replaces itself
(exec, same pid) with the command-line tool built into the package
(watchlock/bin/watchlock, the same C program the CMake install puts in
bin/), so that exit codes, signals and `watchlock exec` (which finds the
preload shim beside that program) behave as with the CMake install.
See docs/cli.md."""
from __future__ import annotations

import os
import signal
import sys


def program() -> str:
    """The path of the packaged command-line tool."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "watchlock")


def main() -> int:
    exe = program()
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"watchlock: the command-line tool is not in this installation ({exe} is "
                         "missing): reinstall the package from a wheel or an sdist\n")
        return 70
    # CPython ignores SIGPIPE and SIGXFSZ at start-up, and an ignored signal
    # stays ignored across exec: give the tool (and the command it runs)
    # the defaults a shell would.
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["watchlock"] + sys.argv[1:])
    return 70  # not reached: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main())
