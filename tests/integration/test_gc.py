#!/usr/bin/env python3
"""The garbage collector's state in profiles (record --slice, -f chrome)
against real interpreters (targets/gc_target.py).

The target alternates a full gc.collect() over a large heap, in
collect_here, with a Python loop as long that allocates no container (so
no collection starts elsewhere). Per interpreter, one line:
  - 3.7 and later: record --slice 0.5 writes `# gc: sampled`; most of
    collect_here's samples end in the synthetic <GC> frame right above it
    (at least 30%; the collection is nearly all of collect_here's time),
    and at least 90% of the <GC> samples are under collect_here;
    `report --trend` has a [gc] row whose mean share is at least 10%.
  - 2.7 and 3.6, whose runtime does not say where its collector's flag is:
    `# gc: unknown` and no <GC> frame are checked, then the line is a SKIP
    saying so.
"""

import os
import re
import shutil
import tempfile

import harness
from test_record import Profile, func_of

TARGET = harness.target_path("gc_target.py")
GC = "<GC>"
TREND_GC = re.compile(r"^\s*[-+][\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+\[gc\]$", re.M)


def spy(args, timeout=60):
    r = harness.run_spy(args, timeout=timeout, env=harness.spy_env(keep_log=False))
    if r.rc != 0 or r.timed_out:
        raise harness.SpyFailed(r.describe())
    return r.out


def run_one(interp):
    d = tempfile.mkdtemp(prefix="spy-gc-")
    try:
        path = os.path.join(d, "gc.folded")
        with harness.Target(interp, TARGET) as t:
            spy(["record", "-q", "-F", "--slice", "0.5", "-r", "100", "-d", "3", "-o", path,
                 "--pid", str(t.pid)])
        p = Profile(path)
        gc_total = sum(c for fr, c in p.stacks if GC in fr)
        if interp.version < (3, 7):
            probs = []
            if p.meta.get("gc") != "unknown":
                probs.append("# gc: %r, want 'unknown'" % p.meta.get("gc"))
            if gc_total:
                probs.append("%d samples in <GC> on a Python that does not say" % gc_total)
            if probs:
                return probs
            raise harness.SkipInterp("Python %s keeps its collector's flag where spy cannot find "
                                     "it (# gc: unknown, no <GC> frames, as expected)"
                                     % interp.minor)
        probs = []
        if p.meta.get("gc") != "sampled":
            probs.append("# gc: %r, want 'sampled'" % p.meta.get("gc"))
        in_collect = p.count_with("collect_here")
        gc_there = sum(c for fr, c in p.stacks
                       if fr[-1] == GC and len(fr) > 1 and func_of(fr[-2]) == "collect_here")
        if in_collect == 0 or gc_there < 0.3 * in_collect:
            probs.append("%d of collect_here's %d samples end in collect_here;<GC> (want >= 30%%)"
                         % (gc_there, in_collect))
        if gc_total and gc_there < 0.9 * gc_total:
            probs.append("only %d of %d <GC> samples under collect_here" % (gc_there, gc_total))
        out = spy(["report", "--trend", path])
        m = TREND_GC.search(out)
        if not m:
            probs.append("report --trend: no [gc] row: %r" % out[:400])
        elif float(m.group(1)) < 10:
            probs.append("report --trend: [gc] mean %s%%, want >= 10" % m.group(1))
        return probs
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    rep = harness.reporter("gc")
    harness.for_each_interp(rep, run_one)


if __name__ == "__main__":
    main()
