#!/usr/bin/env python3
"""A thread inside a sub-interpreter is one thread, with one stack.

On every interpreter with sub-interpreters (3.12+: _xxsubinterpreters on
3.12, _interpreters on 3.13, concurrent.interpreters from 3.14; the root's
in a container and in a chroot, the free-threaded 3.13t), targets/
subinterp.py's main thread enters a sub-interpreter over and over, the
code run there spinning in sub_spin, while a second thread spins in the
main interpreter only, and a thread the sub-interpreter's threading
started sleeps in it (its only thread state). A thread inside a
sub-interpreter has a thread state in each
interpreter, and spy used to sample it once per thread state: two
unrelated stacks of one thread a tick, and every share in the process
wrong. Checked:

  - record -t -i, 100 Hz for 2 s: each thread's samples at most the ticks
    taken (one stack per thread per tick; 2 per tick before) and at least
    80% of them; the main thread's sub_spin samples sit on
    `<interpreter N>` (N the target's own id for it), which sits on the
    frame that entered it (Interpreter.exec from 3.14, the target's enter
    on 3.12/3.13, whose entering function is C), most of them in sub_spin;
    no stack of the other thread has such a frame;
  - the sub-interpreter's own thread: one stack a tick too, in sub_sleep,
    with no `<interpreter N>` frame;
  - dump, text and --json: one entry per thread; the main thread's header
    names both interpreters (`in interpreter N entered from 0`; json
    interpreter N, entered_from [0]), its stack the same order as above;
    the other thread's interpreter 0, the sub-interpreter's thread's N,
    each entered from none, and that one named "sub-worker" by its
    interpreter's threading; --locals gives outer_loop (below the
    marker) its own locals.

One line per interpreter; before 3.12 a SKIP (no sub-interpreters to enter
from Python).
"""

import json
import os
import tempfile

import harness
from test_record import Profile, func_of

TARGET = harness.target_path("subinterp.py")
RATE, SECONDS = 100, 2


def check_order(what, funcs, marker, enter):
    """funcs innermost first: sub_spin ... <module>, marker, enter ..."""
    if "sub_spin" not in funcs:
        return []
    if marker not in funcs:
        return ["%s: sub_spin without %s: %r" % (what, marker, funcs)]
    m = funcs.index(marker)
    if funcs.index("sub_spin") > m:
        return ["%s: sub_spin below %s: %r" % (what, marker, funcs)]
    if m + 1 >= len(funcs) or funcs[m + 1] != enter:
        return ["%s: %s not on %s: %r" % (what, marker, enter, funcs)]
    if funcs.count(marker) != 1 or "outer_loop" not in funcs[m:]:
        return ["%s: not one stack of two parts: %r" % (what, funcs)]
    return []


def check_record(t, d, marker, enter):
    out = os.path.join(d, "p.folded")
    r = harness.run_spy(["record", "--pid", str(t.pid), "-t", "-i", "-r", str(RATE),
                         "-d", str(SECONDS), "-f", "folded", "-o", out], timeout=60)
    if r.rc != 0:
        return ["record: " + r.describe()]
    prof = Profile(out)
    meta, stacks = prof.meta, prof.stacks
    ticks = int(meta.get("samples", 0))
    if ticks < RATE * SECONDS // 2:
        return ["record: only %d ticks taken of %d" % (ticks, RATE * SECONDS)]
    p = []
    main_root = 'thread %d "' % t.info["main_tid"]
    other_root = 'thread %d "' % t.info["other_tid"]
    sub_root = 'thread %d "sub-worker"' % t.info["sub_tid"]
    main = [(fr, c) for fr, c in stacks if len(fr) > 1 and fr[1].startswith(main_root)]
    other = [(fr, c) for fr, c in stacks if len(fr) > 1 and fr[1].startswith(other_root)]
    sub = [(fr, c) for fr, c in stacks if len(fr) > 1 and fr[1] == sub_root]
    for what, mine in (("main", main), ("other", other), ("sub-worker", sub)):
        n = sum(c for _, c in mine)
        if n > ticks or n < 0.8 * ticks:
            p.append("record: %s thread has %d samples in %d ticks, expected one a tick"
                     % (what, n, ticks))
    spin = 0
    for fr, c in main:
        funcs = [func_of(f) for f in reversed(fr[2:])]
        p += check_order("record", funcs, marker, enter)
        spin += c * ("sub_spin" in funcs)
    total = sum(c for _, c in main)
    if total and spin < 0.5 * total:
        p.append("record: sub_spin in %d of the main thread's %d samples, expected most"
                 % (spin, total))
    for what, mine in (("other", other), ("sub-worker", sub)):
        if any(f.startswith("<interpreter ") for fr, _ in mine for f in fr):
            p.append("record: the %s thread's stack has an <interpreter> frame" % what)
    if any("sub_sleep" not in [func_of(f) for f in fr] for fr, _ in sub):
        p.append("record: a sub-worker stack without sub_sleep: %r" % sub)
    return p


def check_dump(t, marker, enter):
    """A look that finds the main thread between two entries (outside the
    sub-interpreter, or inside with no frame yet) is taken again, up to 5
    times: it is there a few ms in each SPIN s."""
    for _ in range(5):
        p, inside = check_dump_once(t, marker, enter)
        if inside:
            break
    if not inside:
        p.append("dump: the main thread was not seen in sub_spin in 5 looks")
    return p


def check_dump_once(t, marker, enter):
    p, inside = [], [True, True]
    iid, main_tid, other_tid = t.info["interp_id"], t.info["main_tid"], t.info["other_tid"]
    sub_tid = t.info["sub_tid"]
    every = sorted([main_tid, other_tid, sub_tid])
    inner = {main_tid: [iid, 0], other_tid: [0], sub_tid: [iid]}
    r = harness.run_spy(["dump", "--pid", str(t.pid)])
    if r.rc != 0:
        return ["dump: " + r.describe()], True
    try:
        d = harness.parse_dump(r.out)
    except harness.DumpParseError as e:
        return ["dump: %s in %r" % (e, r.out[:2000])], True
    tids = [th.tid for th in d.threads]
    if sorted(tids) != every:
        return ["dump: threads %r, expected one each of %r" % (tids, every)], True
    for th in d.threads:
        want = inner[th.tid]
        if th.tid == sub_tid and th.name != "sub-worker":
            p.append("dump: the sub-interpreter's thread named %r, not by its threading" % th.name)
        if th.interps != want:
            p.append("dump: thread %d in interpreters %r, expected %r" % (th.tid, th.interps, want))
        funcs = [f.func for f in th.frames]
        if th.tid == main_tid:
            p += check_order("dump", funcs, marker, enter)
            inside[0] = "sub_spin" in funcs
        elif any(f.startswith("<interpreter ") for f in funcs):
            p.append("dump: thread %d's stack has an <interpreter> frame" % th.tid)
    r = harness.run_spy(["dump", "--pid", str(t.pid), "--json", "--locals"])
    if r.rc != 0:
        return p + ["dump --json: " + r.describe()], True
    doc = json.loads(r.out)
    tids = [th["tid"] for th in doc["threads"]]
    if sorted(tids) != every:
        return p + ["json: threads %r, expected one each of %r" % (tids, every)], True
    for th in doc["threads"]:
        want = (inner[th["tid"]][0], inner[th["tid"]][1:])
        got = (th.get("interpreter"), th.get("entered_from"))
        if got != want:
            p.append("json: thread %d interpreter, entered_from %r, expected %r"
                     % (th["tid"], got, want))
        if th["tid"] == main_tid:
            funcs = [f["function"] for f in th["frames"]]
            p += check_order("json", funcs, marker, enter)
            inside[1] = "sub_spin" in funcs
            # Each frame its own locals, those below the marker too.
            loop = [f for f in th["frames"] if f["function"] == "outer_loop"]
            got = loop and dict((l["name"], l["repr"]) for l in loop[0].get("locals", []))
            if not got or got.get("sub_tid") != str(sub_tid):
                p.append("json --locals: outer_loop's locals %r, expected sub_tid = %d"
                         % (got, sub_tid))
    return p, all(inside)


def run_one(interp):
    if interp.version < (3, 12):
        raise harness.SkipInterp("no sub-interpreters to enter from Python before 3.12")
    with harness.Target(interp, TARGET) as t:
        marker = "<interpreter %d>" % t.info["interp_id"]
        enter = t.info["enter_funcs"][0]
        with tempfile.TemporaryDirectory() as d:
            p = check_record(t, d, marker, enter)
        return p + check_dump(t, marker, enter)


def main():
    rep = harness.reporter("subinterp")
    harness.for_each_interp(rep, run_one, chroot=True)


if __name__ == "__main__":
    main()
