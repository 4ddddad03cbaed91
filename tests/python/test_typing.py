"""Type hints: the package passes `mypy --strict`, its stub of the SWIG
module matches the generated one, and a user's mistakes (timeout=, a
duration of the wrong type) are caught statically. Skipped when mypy is not
installed (scripts/test installs it)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import watchlock

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PACKAGE = os.path.join(ROOT, "python", "watchlock")


def mypy(*args: str, cwd: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy")
    env = dict(os.environ, MYPYPATH=os.path.join(ROOT, "python"))
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           "--cache-dir", os.devnull, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_package_passes_mypy_strict(tmp_path):
    out = mypy(PACKAGE, cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_user_code_is_checked(tmp_path):
    (tmp_path / "user.py").write_text(
        "import datetime\n"
        "import watchlock\n"
        "client = watchlock.Client()\n"
        "ok = client.lock('x', ttl='30s', blocking_timeout=datetime.timedelta(seconds=5), max_renewals=3)\n"
        "ok.acquire(timeout='500ms')\n"
        "ok.extend(1.5)\n"
        "bad1 = client.lock('x', timeout=5)\n"
        "bad2 = client.lock('x', ttl=[30])\n"
        "@client.synchronized('r:{n}', blocking_timeout=None)\n"
        "def f(n: int) -> int:\n"
        "    return n\n"
        "s: str = f(1)\n")
    out = mypy("user.py", cwd=str(tmp_path))
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["7", "8", "12"], out.stdout


def test_stub_matches_the_generated_module():
    """Every name python/watchlock/_native.pyi declares exists in the module SWIG built."""
    with open(os.path.join(PACKAGE, "_native.pyi"), encoding="utf-8") as f:
        declared = [line.split("(")[0][4:] if line.startswith("def ") else line.split(":")[0]
                    for line in f if line.startswith(("def ", "WATCHLOCK_"))]
    missing = [n for n in declared if n != "__getattr__" and not hasattr(watchlock._native, n)]
    assert declared and not missing
