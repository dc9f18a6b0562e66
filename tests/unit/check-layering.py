#!/usr/bin/env python3
"""The module picture, enforced: each module includes only its own headers
and the modules below it (doc/architecture.md): cmd on top of profiler and
flamegraph; profiler, the only module that uses sampler, pystate and
symbolize together; those three and flamegraph are siblings and never
include each other; common at the bottom. cmd reaches pystate's value types
(a thread, a local, a task, as dump prints them) only through
profiler/profiler.h, and no sampler or symbolize header at all. Exits 1
naming every file:line that crosses the picture.

    check-layering.py ROOT        check the tree at ROOT
    check-layering.py --self-test plant a sibling include in a scratch tree
                                  and check that it is caught
"""
import os
import re
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
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^/"]+)/[^"]+"')


def problems(root):
    found = []
    for module, allowed in sorted(ALLOWED.items()):
        top = os.path.join(root, module)
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) in ALLOWED and m.group(1) not in allowed:
                            found.append("%s:%d: %s includes %s's header: %s"
                                         % (os.path.relpath(path, root), n, module,
                                            m.group(1), line.strip()))
    return found


def self_test():
    with tempfile.TemporaryDirectory() as d:
        for module in ALLOWED:
            os.mkdir(os.path.join(d, module))
        with open(os.path.join(d, "sampler", "ok.c"), "w") as f:
            f.write('#include "sampler/sampler.h"\n#include "common/err.h"\n')
        if problems(d):
            return ["a clean tree was flagged: %r" % problems(d)]
        with open(os.path.join(d, "sampler", "bad.c"), "w") as f:
            f.write('#include "common/err.h"\n#include "pystate/pystate.h"\n')
        got = problems(d)
        if len(got) != 1 or "sampler/bad.c:2" not in got[0]:
            return ["a sibling include was not caught: %r" % got]
        os.remove(os.path.join(d, "sampler", "bad.c"))
        with open(os.path.join(d, "cmd", "bad.c"), "w") as f:
            f.write('#include "profiler/profiler.h"\n#include "sampler/process.h"\n')
        got = problems(d)
        if len(got) != 1 or "cmd/bad.c:2" not in got[0]:
            return ["cmd reaching past profiler was not caught: %r" % got]
    return []


def main():
    if sys.argv[1:] == ["--self-test"]:
        found = self_test()
    elif len(sys.argv) == 2:
        found = problems(sys.argv[1])
    else:
        sys.exit(__doc__)
    for p in found:
        print(p)
    print("%d passed, %d failed" % (0 if found else 1, len(found)))
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
