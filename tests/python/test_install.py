"""Packaging: an sdist of the tree builds and installs into a fresh virtualenv
(SWIG runs and the core is compiled at install time), and the installed
package works from outside the source tree."""
from __future__ import annotations

import os
import subprocess
import sys
import venv

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_sdist_installs_into_a_fresh_venv_and_works(tmp_path, redis_url, name):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(dist)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    (sdist,) = dist.glob("watchlock-*.tar.gz")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    # As a user would: pip builds it in isolation (fetching setuptools as
    # pyproject.toml asks), SWIG runs, the core is compiled in.
    out = subprocess.run([py, "-m", "pip", "install", "-q", str(sdist)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    code = ("import sys, watchlock\n"
            "assert watchlock.__file__.startswith(sys.prefix), watchlock.__file__\n"
            "with watchlock.Client() as c:\n"
            "    with c.lock(sys.argv[1], ttl=5, timeout=5) as lock:\n"
            "        assert lock.locked() and lock.fencing_token > 0\n"
            "print('ok', watchlock.__version__)\n")
    env = dict(os.environ, WATCHLOCK_URL=redis_url)
    env.pop("PYTHONPATH", None)
    run = subprocess.run([py, "-c", code, name], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("ok ")
    # py.typed ships, and the generated module is private
    site = subprocess.run([py, "-c", "import watchlock, os; print(os.path.dirname(watchlock.__file__))"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60).stdout.strip()
    files = os.listdir(site)
    assert "py.typed" in files and "_native.py" in files
    assert any(f.startswith("__native") and f.endswith(".so") for f in files)
