#!/usr/bin/env python3
"""The process's resources over a recording (record --slice, report
--trend) against real interpreters (targets/rss_grow.py).

The target keeps 500 kB more, every byte written, each 0.1 s on a fixed
schedule: its resident set grows 5 MB/s, 18000 MB/h. Per interpreter, one
4 s recording with --slice 0.5, then:
  - the profile holds `# resources` and at least 6 `# res-I` readings, in
    time order, with RSS, CPU and threads known (the target's own
    /proc/PID/stat) and each field a number or `-`;
  - `report --trend` has an [rss] row whose slope is 18000 MB/h within
    20% and whose r2 is at least 0.6 (a line; a target stalled by load
    steps, so not 0.9), a [cpu] row whose
    mean is above 0 (the target spins), a [threads] row at 1 or more, and
    [ctxsw] and [io] rows (numbers, or "unknown" where io is unreadable).
"""

import os
import re
import shutil
import tempfile

import harness

TARGET = harness.target_path("rss_grow.py")
RATE_MB_H = 500000 / 0.1 * 3600 / 1e6
NUM = r"([-+]?[\d.]+)"
ROW = r"^\s*%s\s+%s\s+%s\s+%s\s+%s\s+\[%s\] \(" % (NUM, NUM, NUM, NUM, NUM, "%s")
UNKNOWN = r"^\s*-\s+-\s+-\s+-\s+-\s+\[%s\] \(unknown"


def spy(args, timeout=60):
    r = harness.run_spy(args, timeout=timeout, env=harness.spy_env(keep_log=False))
    if r.rc != 0 or r.timed_out:
        raise harness.SpyFailed(r.describe())
    return r.out


def row(out, name):
    m = re.search(ROW % name, out, re.M)
    return [float(g) for g in m.groups()] if m else None


def check_readings(path):
    probs = []
    readings = []
    layout = None
    with open(path) as f:
        for line in f:
            if line.startswith("# resources: "):
                layout = line[len("# resources: "):].strip()
            m = re.match(r"# res-(\d+): (.*)$", line)
            if m:
                readings.append(m.group(2).split(" "))
    if layout != "t-s user-ms sys-ms rss-kb threads ctxsw read-bytes write-bytes":
        probs.append("# resources: %r" % layout)
    if len(readings) < 6:
        probs.append("%d readings in 4 s of 0.5 s windows, want >= 6" % len(readings))
    t = [float(r[0]) for r in readings]
    if t != sorted(t):
        probs.append("readings out of time order: %r" % t)
    for r in readings:
        if len(r) != 8 or any(not (x == "-" or re.match(r"^\d+$", x)) for x in r[1:]):
            probs.append("malformed reading %r" % r)
            break
        if "-" in r[1:5]:
            probs.append("CPU, RSS or threads unknown in %r" % r)
            break
    return probs


def run_one(interp):
    d = tempfile.mkdtemp(prefix="spy-res-")
    try:
        path = os.path.join(d, "res.folded")
        with harness.Target(interp, TARGET) as t:
            spy(["record", "-q", "--slice", "0.5", "-r", "50", "-d", "4", "-o", path,
                 "--pid", str(t.pid)])
        probs = check_readings(path)
        out = spy(["report", "--trend", path])
        rss = row(out, "rss")
        if not rss:
            probs.append("report --trend: no [rss] row: %r" % out[-600:])
        else:
            slope, r2 = rss[0], rss[4]
            # The figure itself, for whoever reads the log (the bound is checked below).
            print("  %s: [rss] %+.0f MB/h (want %.0f), r2 %.2f" % (interp.label, slope, RATE_MB_H, r2))
            if abs(slope - RATE_MB_H) > 0.2 * RATE_MB_H:
                probs.append("[rss] slope %.0f MB/h, want %.0f +- 20%%" % (slope, RATE_MB_H))
            # A target stalled by the machine's load catches up in a step
            # (one run in ~15 read 0.72); a flat or noisy RSS reads near 0.
            if r2 < 0.6:
                probs.append("[rss] r2 %.2f, want >= 0.6 (a line)" % r2)
        cpu = row(out, "cpu")
        if not cpu or cpu[3] <= 0:
            probs.append("[cpu] row %r, want a mean above 0" % (cpu,))
        threads = row(out, "threads")
        if not threads or threads[2] < 1:
            probs.append("[threads] row %r, want >= 1" % (threads,))
        for name in ("ctxsw", "io"):
            if not row(out, name) and not re.search(UNKNOWN % name, out, re.M):
                probs.append("no [%s] row" % name)
        return probs
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    rep = harness.reporter("resources")
    harness.for_each_interp(rep, run_one)


if __name__ == "__main__":
    main()
