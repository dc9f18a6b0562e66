#!/usr/bin/env python3
"""The aarch64 layout table differs from x86-64's exactly by glibc's pthread sizes.

pystate/offsets_table_aarch64.c is measured in the emulated arm64 root
(tools/gen-offsets --arch aarch64), which CI on x86-64 cannot afford to
redo. What it can do: measure the same headers here with aarch64's
pthread type sizes forced into glibc's (tools/gen-offsets --pthread-model
aarch64). Every value of every row must equal the committed aarch64 one:
then the two tables differ where a pthread_mutex_t (or another pthread
type) precedes a field, by what it grew, and nowhere else. The model must
change something against the x86-64 table, or the check would be empty.
Prints which fields moved, per row. SKIP (77) when a header set the
committed table was made from is not installed here, or off x86-64.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(REPO, "tools", "gen-offsets")
sys.path.insert(0, HERE)
import genoffsets  # noqa: E402


def rows(text):
    """{(version, build): {field: value text}} of a generated table; the
    fields of .dbg as dbg.NAME."""
    out = {}
    for body in re.findall(r"\n\t\{\n(.*?)\n\t\},", text, re.S):
        row = {}
        for prefix, name, value in re.findall(r"^\t\t(\t?)\.(\w+) = ([^{\n]*?),$", body, re.M):
            row[("dbg." if prefix else "") + name] = value
        key = (row.get("version"), row.get("build"))
        if key in out:
            raise ValueError("two rows for %s" % (key,))
        out[key] = row
    return out


def moved(a, b):
    """'field +N' for each value that differs, in hex bytes where numeric."""
    out = []
    for k in a:
        if a[k] != b.get(k):
            try:
                out.append("%s %+d" % (k, int(b[k], 16) - int(a[k], 16)))
            except (KeyError, ValueError):
                out.append("%s %s->%s" % (k, a[k], b.get(k)))
    return out


def main():
    tool = genoffsets.load()
    x86_path = os.path.join(REPO, "pystate", tool.TABLES["x86_64"])
    arm_path = os.path.join(REPO, "pystate", tool.TABLES["aarch64"])
    if not os.path.isfile(arm_path):
        print("FAIL no %s: tools/gen-offsets --arch aarch64 writes it" % os.path.relpath(arm_path, REPO))
        return 1
    with open(x86_path) as f:
        x86 = rows(f.read())
    with open(arm_path) as f:
        arm = rows(f.read())
    if sorted(x86) != sorted(arm):
        print("FAIL the tables have different rows: x86-64 %s, aarch64 %s" % (sorted(x86), sorted(arm)))
        return 1
    if os.uname().machine != "x86_64":
        print("SKIP offsets arch: the pthread model is measured on x86-64, this is %s" % os.uname().machine)
        return 77
    r = subprocess.run([sys.executable, TOOL, "--pthread-model", "aarch64", "--stdout"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if r.returncode != 0:
        print("FAIL gen-offsets --pthread-model exited %d:\n%s" % (r.returncode, r.stderr[-2000:]))
        return 1
    model = rows(r.stdout)
    missing = sorted("%s (%s)" % (k[0], arm[k]["source"]) for k in arm
                     if k not in model or model[k]["source"] != arm[k]["source"])
    if missing:
        print("SKIP offsets arch: these rows' headers are not installed here: %s" % ", ".join(missing))
        return 77
    failed = 0
    changed = 0
    for key in sorted(arm):
        wrong = moved(model[key], arm[key])
        if wrong:
            print("FAIL %s %s: aarch64 row is not x86-64's with aarch64 pthread sizes: %s"
                  % (key[0], key[1], ", ".join(wrong)))
            failed += 1
            continue
        diff = moved(x86[key], arm[key])
        changed += bool(diff)
        print("PASS %s %s: %s" % (key[0], key[1], ", ".join(diff) if diff else "same as x86-64"))
    if not changed:
        print("FAIL no row differs from x86-64's: the pthread model changed nothing")
        failed += 1
    print("%d rows, %d differ from x86-64, %d failed" % (len(arm), changed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
