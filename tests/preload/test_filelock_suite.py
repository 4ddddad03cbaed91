"""py-filelock's own test suite under the preload shim (issue 33).

py-filelock's code and tests are not in this repository: the sdist of a pinned version is
fetched with `pip download` into BUILD/py-filelock/ at test time (reused when there), as
tests/python/test_redispy_lock.py does for redis-py. Its suite runs twice in this process's
Python: without the shim, then with it and WATCHLOCK_PATHS covering every file the suite locks
(its tmp_path files, under a --basetemp of ours). With the shim no test may fail or time out that
does not also fail or time out without it: the suite's own exclusion tests (threads and
processes hammering one lock file) are the exclusion check, and the shim must not turn any of
its non-blocking or timed calls into errors or hangs. Needs pytest-mock (scripts/test installs
it); test_virtualenv.py (virtualenv's plugin, no locking) is left out.
"""
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from test_preload import BUILD, SHIM

VERSION = "3.16.1"
WORK = Path(BUILD) / "py-filelock"


def fetch() -> Path:
    top = WORK / f"filelock-{VERSION}"
    if (top / "tests" / "test_filelock.py").exists():
        return top
    WORK.mkdir(parents=True, exist_ok=True)
    sdist = WORK / f"filelock-{VERSION}.tar.gz"
    if not sdist.exists():
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
                               f"filelock=={VERSION}", "-d", str(WORK)], capture_output=True, text=True)
        if proc.returncode != 0 or not sdist.exists():
            raise RuntimeError(f"cannot download the filelock {VERSION} sdist: {proc.stderr[-2000:]}")
    with tarfile.open(sdist) as tar:
        tar.extractall(WORK, filter="data")
    return top


def run_suite(top: Path, tag: str, env: dict, basetemp: Path) -> tuple[set, set, int]:
    xml = WORK / f"junit-{tag}.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "120",
                           f"--basetemp={basetemp}", f"--junitxml={xml}", "--ignore", "tests/test_virtualenv.py",
                           "tests"], cwd=top, env=env, capture_output=True, text=True, timeout=1800)
    failed, timeouts, passed = set(), set(), 0
    for case in ET.parse(xml).getroot().iter("testcase"):
        tid = f"{case.get('classname')}::{case.get('name')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is None:
            passed += case.find("skipped") is None
        elif "Timeout" in (bad.get("message") or "") + (bad.text or ""):
            timeouts.add(tid)
        else:
            failed.add(tid)
    assert passed > 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return failed, timeouts, passed


def test_py_filelock_suite_under_the_shim(tmp_path, redis_server):
    try:
        import pytest_mock  # noqa: F401
    except ImportError:
        pytest.fail("py-filelock's suite needs pytest-mock (pip install pytest-mock)")
    top = fetch()
    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "WATCHLOCK_PATHS")}
    base["PYTHONPATH"] = str(top / "src")
    plain_failed, plain_timeouts, plain_passed = run_suite(top, "plain", base, tmp_path / "plain")
    shim_tmp = tmp_path / "shim"
    env = dict(base, LD_PRELOAD=SHIM, WATCHLOCK_URL=redis_server.url, WATCHLOCK_PRELOAD_LOG=str(tmp_path / "log"),
               WATCHLOCK_PATHS=f"{shim_tmp}/*/*:{shim_tmp}/*/*/*", WATCHLOCK_PRELOAD_LEASE="10s")
    shim_failed, shim_timeouts, shim_passed = run_suite(top, "shim", env, shim_tmp)
    print(f"\npy-filelock {VERSION}: {plain_passed} passed plainly ({len(plain_failed)} failed, "
          f"{len(plain_timeouts)} timeouts); under the shim {shim_passed} passed ({len(shim_failed)} failed, "
          f"{len(shim_timeouts)} timeouts)")
    assert shim_failed <= plain_failed | plain_timeouts, sorted(shim_failed - plain_failed)
    assert shim_timeouts <= plain_timeouts | plain_failed, sorted(shim_timeouts - plain_timeouts)
    # the locks were managed: the suite's files got fencing counters on the server
    import redis
    fenced = redis.Redis.from_url(redis_server.url).keys(f"watchlock:{{{shim_tmp}/*:fence")
    assert len(fenced) > 10, fenced
