#!/usr/bin/env python3
"""The module picture, enforced (doc/architecture.md): cmd on top of
profiler and flamegraph; profiler, the only module that uses sampler,
pystate and symbolize together; those three and flamegraph are siblings;
common at the bottom. Checked twice, since either can cross the picture
without the other:

- by include: each module includes only its own headers and those of the
  modules below it; profiler/profiler.h, the face record, top and the agent
  see, includes none of sampler's, pystate's or symbolize's (the few pystate
  value types dump prints reach cmd through profiler/look.h alone);
- by symbol: what each module's static archive leaves undefined (nm -u) and
  another module of spy defines must be defined by itself or a module below
  it. An include allowed for a type can otherwise carry a call: cmd calling
  pystate's functions through a header profiler hands on.

Exits 1 naming every file:line (include) or archive member (symbol) that
crosses the picture.

    check-layering.py ROOT [BUILD]  check the tree at ROOT; with BUILD (a meson
                                    build of it) the archives too
    check-layering.py --self-test   plant a sibling include, an include in
                                    profiler.h and a cross-layer call in a
                                    scratch tree, and check that each is caught
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ALLOWED = {
    "common": {"common"},
    "sampler": {"sampler", "common"},
    "pystate": {"pystate", "common"},
    "symbolize": {"symbolize", "common"},
    "flamegraph": {"flamegraph", "common"},
    "profiler": {"profiler", "sampler", "pystate", "symbolize", "common"},
    "cmd": {"cmd", "profiler", "flamegraph", "common"},
}
# Headers narrower than their module: what they may include.
HEADERS = {
    "profiler/profiler.h": {"profiler", "common"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^/"]+)/[^"]+"')


def include_problems(root):
    found = []
    for module, allowed in sorted(ALLOWED.items()):
        top = os.path.join(root, module)
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                may = HEADERS.get(rel, allowed)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) in ALLOWED and m.group(1) not in may:
                            what = rel if rel in HEADERS else module
                            found.append("%s:%d: %s includes %s's header: %s"
                                         % (rel, n, what, m.group(1), line.strip()))
    return found


def nm(nm_prog, path, *flags):
    """(member, symbol, type) rows of nm's POSIX output for an archive or object."""
    out = subprocess.run([nm_prog, "-A", "-P", *flags, path], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    rows = []
    for line in out.splitlines():
        head, _, rest = line.rpartition(": ")
        fields = rest.split()
        if len(fields) >= 2:
            m = re.search(r"\[([^]]+)\]$", head)
            rows.append((os.path.basename(m.group(1) if m else head), fields[0], fields[1]))
    return rows


def archives(build):
    """module -> its static archives (and, for cmd, the objects of spy's main)."""
    out = {}
    for module in ALLOWED:
        files = sorted(glob.glob(os.path.join(build, module, "*.a")))
        if module == "cmd":
            files += sorted(glob.glob(os.path.join(build, "spy.p", "*.o")))
        if files:
            out[module] = files
    return out


def symbol_problems(build, nm_prog="nm"):
    libs = archives(build)
    missing = sorted(set(ALLOWED) - set(libs))
    if missing:
        return ["%s: no archive of %s (not built?)" % (build, ", ".join(missing))]
    defined = {}
    for module, files in libs.items():
        for path in files:
            for _, sym, kind in nm(nm_prog, path, "-g", "--defined-only"):
                if kind not in "Uw":
                    defined.setdefault(sym, set()).add(module)
    found = []
    for module, files in sorted(libs.items()):
        for path in files:
            for member, sym, _ in nm(nm_prog, path, "-u"):
                by = defined.get(sym)
                if by and not by & ALLOWED[module]:
                    found.append("%s(%s): %s calls %s, defined by %s"
                                 % (os.path.relpath(path, build), member, module, sym,
                                    ", ".join(sorted(by))))
    return sorted(set(found))


def problems(root, build=None, nm_prog="nm"):
    return include_problems(root) + (symbol_problems(build, nm_prog) if build else [])


# Each a file planted in a clean tree, the line that must be flagged, and what it is.
PLANTED_INCLUDES = [
    ("sampler/bad.c", '#include "common/err.h"\n#include "pystate/pystate.h"\n', "a sibling include"),
    ("cmd/bad.c", '#include "profiler/profiler.h"\n#include "sampler/process.h"\n',
     "cmd reaching past profiler"),
    ("profiler/profiler.h", '#include "common/err.h"\n#include "pystate/pystate.h"\n',
     "profiler.h exposing pystate"),
]


def self_test_includes(d):
    for module in ALLOWED:
        os.mkdir(os.path.join(d, module))
    clean = {"sampler/ok.c": '#include "sampler/sampler.h"\n#include "common/err.h"\n',
             "profiler/look.h": '#include "profiler/profiler.h"\n#include "pystate/pystate.h"\n',
             "profiler/profiler.h": '#include "common/err.h"\n'}
    for rel, text in clean.items():
        with open(os.path.join(d, rel), "w") as f:
            f.write(text)
    if include_problems(d):
        return ["a clean tree was flagged: %r" % include_problems(d)]
    for rel, text, what in PLANTED_INCLUDES:
        with open(os.path.join(d, rel), "w") as f:
            f.write(text)
        got = include_problems(d)
        if len(got) != 1 or rel + ":2" not in got[0]:
            return ["%s was not caught: %r" % (what, got)]
        if rel in clean:
            with open(os.path.join(d, rel), "w") as f:
                f.write(clean[rel])
        else:
            os.remove(os.path.join(d, rel))
    return []


def self_test_symbols(d):
    """Archives of a scratch build: cmd calls profiler (allowed), then pystate."""
    cc, ar = os.environ.get("CC", "cc"), "ar"
    if not shutil.which(cc.split()[0]) or not shutil.which(ar) or not shutil.which("nm"):
        return ["the symbol self-test needs cc, ar and nm"]
    sources = {m: "int %s_fn(void) { return 1; }\n" % m for m in ALLOWED}
    sources["profiler"] = "int pystate_fn(void);\nint profiler_fn(void) { return pystate_fn(); }\n"
    sources["cmd"] = "int profiler_fn(void);\nint cmd_fn(void) { return profiler_fn(); }\n"

    def build(srcs):
        for m, text in srcs.items():
            os.makedirs(os.path.join(d, m), exist_ok=True)
            c, o, a = (os.path.join(d, m, m + ext) for ext in (".c", ".o", ".a"))
            with open(c, "w") as f:
                f.write(text)
            subprocess.run(cc.split() + ["-c", "-o", o, c], check=True)
            if os.path.exists(a):
                os.remove(a)
            subprocess.run([ar, "rcs", a, o], check=True)

    build(sources)
    if symbol_problems(d):
        return ["a clean build was flagged: %r" % symbol_problems(d)]
    build({"cmd": "int pystate_fn(void);\nint cmd_fn(void) { return pystate_fn(); }\n"})
    got = symbol_problems(d)
    if len(got) != 1 or "cmd calls pystate_fn, defined by pystate" not in got[0]:
        return ["cmd calling pystate was not caught: %r" % got]
    build({"cmd": sources["cmd"],
           "sampler": "int flamegraph_fn(void);\nint sampler_fn(void) { return flamegraph_fn(); }\n"})
    got = symbol_problems(d)
    if len(got) != 1 or "sampler calls flamegraph_fn, defined by flamegraph" not in got[0]:
        return ["a sibling's call was not caught: %r" % got]
    return []


def self_test():
    with tempfile.TemporaryDirectory() as d:
        found = self_test_includes(d)
    with tempfile.TemporaryDirectory() as d:
        found += self_test_symbols(d)
    return found


def main():
    args = sys.argv[1:]
    if args == ["--self-test"]:
        found = self_test()
    elif len(args) in (1, 2):
        found = problems(*args)
    else:
        sys.exit(__doc__)
    for p in found:
        print(p)
    print("%d passed, %d failed" % (0 if found else 1, len(found)))
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
