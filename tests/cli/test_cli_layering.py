"""The CLI's files call each other in one direction only (issue 20).

Layers, lowest first: json.c < common.c < the subcommands (run.c, admin.c,
check.c: each its handler and its help) < main.c (the dispatch table). A
file may use a symbol defined by another CLI file only when that file is in
a lower layer; subcommands do not call each other and nothing calls back
into main.c, so there is no circle of calls between files.

Read from the symbols of the object files that built $WATCHLOCK_CLI
(`nm`: what each defines, what each leaves undefined), next to the binary
in the CMake build tree.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
from typing import Dict, List, Set

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

#: file -> layer; a file may use symbols of files in strictly lower layers.
LAYERS: Dict[str, int] = {
    "json.c": 0,
    "common.c": 1,
    "stats.c": 2,  # `watchlock stats`, and the stats run.c reports at exit (issue 25)
    "quorum.c": 2,  # per-member views of status/list/check and run's verdict line (issue 21)
    "run_args.c": 3, "run_child.c": 3, "run_exit.c": 3,  # the parts of `watchlock run` (cli/run.h, issue 30)
        "run.c": 4, "admin.c": 4, "check.c": 4, "exec.c": 4,  # exec.c: `watchlock exec` (issue 24)
    "main.c": 5,
}


def object_dir() -> pathlib.Path:
    exe = pathlib.Path(os.environ.get("WATCHLOCK_CLI") or REPO / "build" / "cli" / "watchlock")
    return exe.resolve().parent / "CMakeFiles" / "watchlock_cli.dir"


def nm(obj: pathlib.Path, *flags: str) -> Set[str]:
    out = subprocess.run(["nm", "-g", *flags, str(obj)], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def layering_violations(objdir: pathlib.Path) -> List[str]:
    objects = {p.name[:-2]: p for p in objdir.glob("*.c.o")}  # "run.c.o" -> "run.c"
    unknown = sorted(set(objects) - set(LAYERS))
    missing = sorted(set(LAYERS) - set(objects))
    problems = [f"{f}: not in LAYERS of tests/cli/test_cli_layering.py: give it a layer" for f in unknown]
    problems += [f"{f}: no object file in {objdir}" for f in missing]
    defined_by: Dict[str, str] = {}
    for f, obj in objects.items():
        for sym in nm(obj, "--defined-only"):
            defined_by[sym] = f
    for f, obj in sorted(objects.items()):
        for sym in sorted(nm(obj, "--undefined-only")):
            owner = defined_by.get(sym)
            if owner is None or owner == f or f not in LAYERS or owner not in LAYERS:
                continue
            if LAYERS[owner] >= LAYERS[f]:
                problems.append(f"{f} (layer {LAYERS[f]}) uses {sym} of {owner} (layer {LAYERS[owner]}): "
                                "a file may only call into lower layers")
    return problems


def test_cli_files_call_only_lower_layers() -> None:
    if shutil.which("nm") is None:
        pytest.fail("nm (binutils) is needed to read the CLI's object files")
    objdir = object_dir()
    if not objdir.is_dir():
        pytest.fail(f"CLI object files not found in {objdir}: build the CLI with CMake or set WATCHLOCK_CLI")
    problems = layering_violations(objdir)
    assert not problems, "CLI layering broken:\n  " + "\n  ".join(problems)
