#!/usr/bin/env python3
"""spy shows the names Python's threading module gave the threads.

On every interpreter found, targets/names.py runs named threads (one
renamed after it started, a non-ASCII name, a thread pool) and a thread
started from C that threading never registered. `spy dump` (text and
--json) must name each thread exactly as threading does, and the C thread
by the kernel's name. One line per interpreter.
"""

import json

import harness

TARGET = harness.target_path("names.py")


def comm(pid, tid):
    with open("/proc/%d/task/%d/comm" % (pid, tid)) as f:
        return f.read().rstrip("\n")


def run_one(interp):
    problems = []
    with harness.Target(interp, TARGET) as target:
        want = dict((int(k), v) for k, v in target.info["names"].items())
        for tid, v in list(want.items()):
            if v is None:
                want[tid] = comm(target.pid, tid)
        r = harness.run_spy(["dump", "--pid", str(target.pid)])
        if r.rc != 0:
            return ["dump: " + r.describe()]
        d = harness.parse_dump(r.out)
        got = dict((t.tid, t.name) for t in d.threads)
        if got != want:
            problems.append("text: names %r, expected %r" % (got, want))
        r = harness.run_spy(["dump", "--pid", str(target.pid), "--json"])
        if r.rc != 0:
            return problems + ["dump --json: " + r.describe()]
        doc = json.loads(r.out)
        got = dict((t["tid"], t["name"]) for t in doc["threads"])
        if got != want:
            problems.append("json: names %r, expected %r" % (got, want))
        os_names = dict((t["tid"], t["os_name"]) for t in doc["threads"])
        kernel = dict((tid, comm(target.pid, tid)) for tid in want)
        if os_names != kernel:
            problems.append("json: os_name %r, expected the kernel's %r"
                            % (os_names, kernel))
    return problems


def main():
    rep = harness.reporter("names")
    harness.for_each_interp(rep, run_one, expect=harness.SUPPORTED)


if __name__ == "__main__":
    main()
