#!/usr/bin/env python3
"""The committed layout table is what tools/gen-offsets makes of the headers.

pystate/offsets_table.c is generated, never edited by hand. This runs the
generator against every header set it finds (pyenv, /usr/include, the
tools/pyroot root, the free-threaded 3.13t of tools/pyroot build-ft) and
compares its output with the committed file, so that
a hand edit, or a header set that changed under us (a new Debian micro
release in the root), shows up as a failure with the diff. When some header
set the committed table was made from is missing here, the comparison
would be meaningless: it prints SKIP with what is missing and exits 77.
"""
import difflib
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TABLE = os.path.join(REPO, "pystate", "offsets_table.c")
TOOL = os.path.join(REPO, "tools", "gen-offsets")


def sources(text):
    """The header sets a table names, one per row and per comparison note."""
    return sorted(set(re.findall(r"CPython ([0-9][^ ]*(?: debug build| free-threaded build)?) headers",
                                 text)))


def main():
    with open(TABLE) as f:
        committed = f.read()
    r = subprocess.run([sys.executable, TOOL, "--stdout"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if r.returncode != 0:
        print("FAIL gen-offsets exited %d:\n%s" % (r.returncode, r.stderr[-2000:]))
        return 1
    missing = [s for s in sources(committed) if s not in sources(r.stdout)]
    if missing:
        print("SKIP offsets table: the headers of %s are not installed here "
              "(tools/pyroot build, tools/pyroot build-ft, pyenv) so the table cannot be "
              "regenerated to compare"
              % ", ".join(missing))
        return 77
    if r.stdout == committed:
        print("PASS offsets table: tools/gen-offsets reproduces pystate/offsets_table.c "
              "(%d header sets)" % len(sources(committed)))
        return 0
    diff = difflib.unified_diff(committed.splitlines(), r.stdout.splitlines(),
                                "pystate/offsets_table.c", "tools/gen-offsets --stdout", lineterm="")
    print("FAIL offsets table differs from what tools/gen-offsets generates:")
    for i, line in enumerate(diff):
        if i > 80:
            print("...")
            break
        print(line)
    return 1


if __name__ == "__main__":
    sys.exit(main())
