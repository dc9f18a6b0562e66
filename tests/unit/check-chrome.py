#!/usr/bin/env python3
"""Check chrome trace files (Trace Event Format) strictly.

validate(doc) is the checker, shared with the integration tests (they
import this file): the document is a JSON object whose "traceEvents" is a
list of objects; every event has the keys and types its phase requires
(ph, pid and tid integers, name, ts a number >= 0 for B/E, cat a string,
args an object); per thread, B/E events nest properly (each E closes the
innermost open B of the same name) and timestamps never go back; every
thread with events has a thread_name metadata event and every process a
process_name; nothing is left open; counter events (C, the process's
resources) have a name, a ts >= 0 that never goes back per (pid, name), a
non-empty args object of numbers >= 0, and a named process. It returns the
failures and, per (pid, tid), the sum of the outermost slices' durations in
microseconds.

Run with the path of test-flamegraph-timeline, it has that program save its
traces and checks them, including that the outermost slices add up to the
samples' time (worked out by hand in TOTALS below), then checks that
validate() rejects deliberately broken traces.

Usage: check-chrome.py PATH/TO/test-flamegraph-timeline
       check-chrome.py --file TRACE.json [--total-us US]
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

NUMBER = (int, float)
PHASES = set("BEXiIMCbnesftPOND") | {"(", ")"}
NAMES_WITH_ARG = {"process_name", "thread_name"}

# Outermost slices' total per file, from the samples test-flamegraph-timeline
# feeds: 9 samples at 100 Hz, 9 samples at 100 Hz, 3 samples at the default
# 100 Hz.
TOTALS = {
    "recorded.trace.json": 90000.0,
    "layout.trace.json": 90000.0,
    "plain.trace.json": 30000.0,
}

# Counter events per file: recorded.trace.json's profile holds 3 resource
# readings (rss and threads at each, cpu, switches and io between): 12.
COUNTERS = {"recorded.trace.json": 12}


def _typed(ev, key, types, what, bad, required=True):
    if key not in ev:
        if required:
            bad.append("%s: no %r" % (what, key))
        return not required
    if isinstance(ev[key], bool) or not isinstance(ev[key], types):
        bad.append("%s: %r is %r" % (what, key, ev[key]))
        return False
    return True


def _check_event(i, ev, bad):
    what = "event %d" % i
    if not isinstance(ev, dict):
        bad.append("%s is not an object" % what)
        return False
    ok = _typed(ev, "ph", str, what, bad) and ev["ph"] in PHASES
    if "ph" in ev and not ok:
        bad.append("%s: unknown phase %r" % (what, ev.get("ph")))
    ok &= _typed(ev, "pid", int, what, bad)
    ok &= _typed(ev, "tid", int, what, bad)
    if not ok:
        return False
    ph = ev["ph"]
    ok &= _typed(ev, "name", str, what, bad, required=ph in "BMX")
    ok &= _typed(ev, "cat", str, what, bad, required=False)
    ok &= _typed(ev, "args", dict, what, bad, required=ph == "M")
    if ph == "C":
        ok &= _typed(ev, "name", str, what, bad)
        ok &= _typed(ev, "args", dict, what, bad)
        if ok and (not ev["args"] or any(isinstance(v, bool) or not isinstance(v, NUMBER) or v < 0
                                         for v in ev["args"].values())):
            bad.append("%s: counter args %r (want numbers >= 0)" % (what, ev["args"]))
            ok = False
    if ph in "BEXC":
        ok &= _typed(ev, "ts", NUMBER, what, bad)
        if ok and ev["ts"] < 0:
            bad.append("%s: negative ts" % what)
            ok = False
    if ph == "M" and ev.get("name") in NAMES_WITH_ARG:
        ok &= _typed(ev.get("args", {}), "name", str, what + " args", bad)
    return ok


def validate(doc):
    """(failures, {(pid, tid): outermost slices' total in us})."""
    bad = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["not an object with a traceEvents list"], {}
    if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        bad.append("displayTimeUnit %r" % doc["displayTimeUnit"])
    if "otherData" in doc and not isinstance(doc["otherData"], dict):
        bad.append("otherData is not an object")
    open_, last, totals, last_counter = {}, {}, {}, {}
    named_threads, named_procs, used, counted = set(), set(), set(), set()
    for i, ev in enumerate(doc["traceEvents"]):
        if not _check_event(i, ev, bad):
            continue
        key, ph = (ev["pid"], ev["tid"]), ev["ph"]
        if ph == "M":
            if ev["name"] == "thread_name":
                named_threads.add(key)
            elif ev["name"] == "process_name":
                named_procs.add(ev["pid"])
            continue
        if ph == "C":
            ckey = (ev["pid"], ev["name"])
            if ev["ts"] < last_counter.get(ckey, 0):
                bad.append("event %d: counter ts %r before %r for %r" % (i, ev["ts"], last_counter[ckey], ckey))
            last_counter[ckey] = ev["ts"]
            counted.add(ev["pid"])
            continue
        if ph not in "BE":
            bad.append("event %d: phase %r (spy writes only B, E, C and M)" % (i, ph))
            continue
        used.add(key)
        if ev["ts"] < last.get(key, 0):
            bad.append("event %d: ts %r before %r on thread %r" % (i, ev["ts"], last[key], key))
        last[key] = ev["ts"]
        stack = open_.setdefault(key, [])
        if ph == "B":
            stack.append((ev["name"], ev["ts"]))
            continue
        if not stack:
            bad.append("event %d: E with nothing open on thread %r" % (i, key))
            continue
        name, start = stack.pop()
        if "name" in ev and ev["name"] != name:
            bad.append("event %d: E %r closes B %r" % (i, ev["name"], name))
        if not stack:
            totals[key] = totals.get(key, 0.0) + ev["ts"] - start
    for key, stack in open_.items():
        if stack:
            bad.append("thread %r: %d slices left open" % (key, len(stack)))
    for key in sorted(used - named_threads):
        bad.append("thread %r has no thread_name" % (key,))
    for pid in sorted(({k[0] for k in used} | counted) - named_procs):
        bad.append("process %r has no process_name" % pid)
    return bad, totals


def check_file(path, total_us=None, counters=0):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        return ["%s: %s" % (path, e)]
    bad, totals = validate(doc)
    if not totals:
        bad.append("no slice at all")
    ncount = sum(1 for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "C")
    if ncount < counters:
        bad.append("%d counter events, want >= %d" % (ncount, counters))
    if total_us is not None and abs(sum(totals.values()) - total_us) > 0.5:
        bad.append("outermost slices add up to %.3f us, expected %.3f"
                   % (sum(totals.values()), total_us))
    return ["%s: %s" % (os.path.basename(path), m) for m in bad]


def mutants(doc):
    """Broken copies of a good trace, each with what validate must say."""
    evs = doc["traceEvents"]
    first_b = next(i for i, e in enumerate(evs) if e["ph"] == "B")
    first_e = next(i for i, e in enumerate(evs) if e["ph"] == "E")
    out = []

    def mut(word, fn):
        d = copy.deepcopy(doc)
        fn(d["traceEvents"])
        out.append((word, d))

    mut("left open", lambda ev: ev.pop(first_e))
    mut("nothing open", lambda ev: ev.pop(first_b))
    # An event whose successor on the same thread can be moved back in time.
    later = next(i + 1 for i in range(len(evs) - 1)
                 if evs[i]["ph"] in "BE" and evs[i]["ts"] > 0 and evs[i + 1]["ph"] in "BE"
                 and (evs[i]["pid"], evs[i]["tid"]) == (evs[i + 1]["pid"], evs[i + 1]["tid"]))
    mut("before", lambda ev: ev[later].__setitem__("ts", ev[later - 1]["ts"] / 2))
    mut("no thread_name", lambda ev: ev.__setitem__(slice(None), [
        e for e in ev if e.get("name") != "thread_name"]))
    mut("'ts' is", lambda ev: ev[first_b].__setitem__("ts", "0"))
    mut("no 'pid'", lambda ev: ev[first_b].pop("pid"))
    mut("closes B", lambda ev: ev[first_e].__setitem__("name", "not-the-same"))
    counters = [i for i, e in enumerate(evs) if e["ph"] == "C"]
    if counters:
        c0 = counters[0]
        mut("counter args", lambda ev: ev[c0].__setitem__("args", {"MB": "12"}))
        mut("counter args", lambda ev: ev[c0].__setitem__("args", {}))
        # The second reading of the same counter moved before the first.
        same = next(i for i in counters[1:] if evs[i]["name"] == evs[c0]["name"])
        mut("counter ts", lambda ev: (ev[c0].__setitem__("ts", 5.0),
                                      ev[same].__setitem__("ts", 1.0)))
    return out


def check_mutants(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    bad = []
    for word, broken in mutants(doc):
        found, _ = validate(broken)
        if not any(word in m for m in found):
            bad.append("a trace broken for %r passed (found: %s)" % (word, found))
    return bad


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--file":
        total = float(sys.argv[4]) if len(sys.argv) >= 5 and sys.argv[3] == "--total-us" else None
        bad = check_file(sys.argv[2], total)
        checked = 1
    else:
        with tempfile.TemporaryDirectory(prefix="spy-chrome-") as d:
            r = subprocess.run([sys.argv[1], d], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=60)
            sys.stdout.write(r.stdout.decode("utf-8", "replace"))
            bad = [] if r.returncode == 0 else ["%s exited %d" % (sys.argv[1], r.returncode)]
            for name, total in sorted(TOTALS.items()):
                bad += check_file(os.path.join(d, name), total, COUNTERS.get(name, 0))
            if os.path.exists(os.path.join(d, "recorded.trace.json")):
                bad += check_mutants(os.path.join(d, "recorded.trace.json"))
            checked = len(TOTALS) + 1
    for m in bad:
        print("FAIL: " + m)
    print("check-chrome: %d checked, %d failures" % (checked, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
