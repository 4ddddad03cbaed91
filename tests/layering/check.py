#!/usr/bin/env python3
"""The layering test (ctest `layering`): core/src's calls go one way.

Reads core/src/LAYERS (folders lowest first, files in order inside each
folder), then the symbols of every object file CMake built for the library
(nm): which file defines each function or variable, which file uses it. A
use is legal when the defining file is the same file, an earlier file of
the same folder, or any file of an earlier folder. Anything else (a call
into a higher layer or into a later file of one's own folder) fails the
test, naming the caller, the callee's file and the symbol; so does a
source file that LAYERS does not place, or a file in core/src over the
line limit.

It also checks the two dispatch tables (issue 30, docs/design.md "Two
tables"): a kind meets a placement only through the handle's wl_lock_ops
and the client's wl_placement, so outside a kind's or a placement's own
files no code tests which one it has: `->quorum` (the quorum placement)
only in the quorum's files (quorum*.c, quorum*.h), `->q` (a queued
kind's part of a handle) only in the queued kinds' files, and a
comparison with a kind (`->kind ==`, `== WATCHLOCK_KIND_...`) only in
the kinds' files (comments are not code: they may name them).

Usage: check.py NM LAYERS_FILE SRC_DIR OBJECT...
"""
import os
import subprocess
import sys

MAX_LINES = 600


def read_layers(path):
    rank = {}  # "folder/file" -> (folder index, file index)
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            folder, files = line.split(":", 1)
            fi = len({r[0] for r in rank.values()})
            for i, name in enumerate(files.split()):
                rank[folder.strip() + "/" + name] = (fi, i)
    return rank


def unit_of(obj):
    """core/.../src/<folder>/<file>.c.o (CMake) or <folder>/<file>.o -> "folder/file"."""
    parts = obj.replace("\\", "/").split("/")
    name = parts[-1]
    for ext in (".c.o", ".o", ".c.obj", ".obj"):
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    return parts[-2] + "/" + name


def symbols(nm, obj):
    out = subprocess.run([nm, "-P", obj], check=True, capture_output=True, text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        name, kind = f[0], f[1]
        if kind == "U":
            used.add(name)
        elif kind in "TDBRCV" or kind in "W":
            defined.add(name)
    return defined, used


import re

# pattern, what it tests, the files (relative to core/src) allowed to
# (quorum_rw.c: the read-write lock on a quorum, a queued kind's layout and a quorum's file)
QUEUED_FILES = {"locks/queue.c", "locks/waiter.c", "locks/kinds.c", "locks/quorum_rw.c"}
KIND_FILES = QUEUED_FILES | {
    "locks/multi.c",  # its own table (l->kind == &multi_kind)
    "locks/api.c",    # a kind's code -> text
    "client/info.c",  # a name's kind as inspected on the server, not a handle's
}
def is_quorum(rel):
    return os.path.basename(rel).startswith("quorum")


TABLE_RULES = [
    (re.compile(r"->quorum\b"), "tests the quorum placement (->quorum)", is_quorum),
    # a queued kind's part of a handle; in the quorum's files `q` is also
    # their wl_quorum (t->q, m->q), so there only a handle's (l->q) counts
    (re.compile(r"->q\b"), "tests a queued kind (->q)", lambda rel: rel in QUEUED_FILES or is_quorum(rel)),
    (re.compile(r"\b(?:l|cl|lock|sem)->q\b"), "tests a queued kind (->q)",
     lambda rel: not is_quorum(rel) or rel in QUEUED_FILES),
    (re.compile(r"->kind\s*[!=]=\s*&|[!=]=\s*WATCHLOCK_KIND_|WATCHLOCK_KIND_\w+\s*[!=]="),
     "tests a lock kind", lambda rel: rel in KIND_FILES),
]


def code_only(text):
    """The text with comments and string literals blanked (lines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def table_problems(src_dir):
    problems = []
    for root, _, files in os.walk(src_dir):
        for fn in sorted(files):
            if not fn.endswith((".c", ".h")):
                continue
            rel = os.path.relpath(os.path.join(root, fn), src_dir).replace(os.sep, "/")
            with open(os.path.join(root, fn)) as f:
                code = code_only(f.read())
            for no, line in enumerate(code.splitlines(), 1):
                for pat, what, allowed in TABLE_RULES:
                    if pat.search(line) and not allowed(rel):
                        problems.append("core/src/%s:%d %s outside its own files: dispatch through the "
                                        "handle's wl_lock_ops or the client's wl_placement" % (rel, no, what))
    return problems


def main(argv):
    nm, layers_file, src_dir = argv[1], argv[2], argv[3]
    objs = [o for arg in argv[4:] for o in arg.split(";") if o]  # CMake passes a list as one argument
    rank = read_layers(layers_file)
    folders = {}
    for unit, (fi, _) in rank.items():
        folders.setdefault(fi, unit.split("/")[0])
    problems = []

    # Every source file is placed, no placed file is missing, none is too long.
    sources = set()
    for root, _, files in os.walk(src_dir):
        for fn in files:
            if fn.endswith(".c"):
                rel = os.path.relpath(os.path.join(root, fn), src_dir)
                sources.add(rel[:-2])
                with open(os.path.join(root, fn)) as f:
                    n = sum(1 for _ in f)
                if n > MAX_LINES:  # a warning (issue 30.5): split a file by purpose, never mid-thought
                    print("layering: warning: core/src/%s: %d lines (more than %d): split it by purpose"
                          % (rel, n, MAX_LINES), file=sys.stderr)
    for unit in sorted(sources - set(rank)):
        problems.append("core/src/%s.c: not placed in %s" % (unit, layers_file))
    for unit in sorted(set(rank) - sources):
        problems.append("%s names %s, which is not in core/src" % (layers_file, unit))

    problems += table_problems(src_dir)

    owner, uses = {}, {}
    for obj in objs:
        unit = unit_of(obj)
        defined, used = symbols(nm, obj)
        uses[unit] = used
        for s in defined:
            owner[s] = unit
    edges = 0
    for unit in sorted(uses):
        if unit not in rank:
            continue
        for s in sorted(uses[unit]):
            callee = owner.get(s)
            if callee is None or callee == unit or callee not in rank:
                continue
            edges += 1
            (cf, ci), (df, di) = rank[unit], rank[callee]
            if df < cf or (df == cf and di < ci):
                continue
            why = "a higher layer" if df > cf else "a later file of its own folder"
            problems.append("%s.c calls %s (%s.c: %s)" % (unit, s, callee, why))

    if problems:
        print("layering: %d problem(s); the order is %s:" % (len(problems), layers_file))
        for p in problems:
            print("  " + p)
        return 1
    print("layering: %d calls between %d files, all downward (%s)"
          % (edges, len(uses), " < ".join(folders[i] for i in sorted(folders))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
