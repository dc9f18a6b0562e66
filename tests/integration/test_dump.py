#!/usr/bin/env python3
"""`spy dump --pid`, exactly, on every interpreter found (the version matrix).

Each interpreter runs two targets, and its one PASS/FAIL line covers both:

targets/nested.py -- the main thread spins in <module> -> outer ->
  Spinner.middle -> inner; a second thread sleeps.
targets/matrix.py (+ matrix_py3.py on 3.5+) -- three threads:
  main     idle, <module> in time.sleep();
  sleeper  idle, sleeper_inner <- sleeper_outer <- threading internals;
  spinner  running and holding the GIL, innermost first:
           计算 (non-ASCII name) <- outer.<locals>.<lambda> <- acall <- coro
           (coroutines, driven by coro.send(None)) <- drive <- gen (generator)
           <- Klass.method <- outer.<locals>.inner <- outer <- threading.
           On 2.7, which has neither async def nor non-ASCII identifiers, the
           coroutine frames are absent and `compute` stands in for 计算.

What is checked, for each target:
  - the header: pid, command line, the interpreter's own sys.version_info
    as X.Y.Z (not just X.Y), and a runtime file really mapped in the target;
  - the threads: their number, order (by native TID), native TIDs and
    Python thread ids (as the target itself reports them), states, name,
    and which one holds the GIL (exactly the spinning one; none on a
    free-threaded build, whose header says it runs without a GIL, unless
    run again with PYTHON_GIL=1: then it is a GIL build to spy);
  - every frame of every thread: function name, file and line. Names are
    written out here (qualified -- Klass.method, outer.<locals>.<lambda> --
    on 3.11+, bare co_name before); lines come from "# @name" markers in
    the targets; only the threading module's frames below our own are taken
    from what the target saw of itself through sys._current_frames(), after
    checking that the rest of that view agrees with the markers.
A thread may be caught in transit (the main thread between printing "ready"
and sleeping), so up to ATTEMPTS dumps are taken; the first fully correct one
passes. A FAIL line gives the first mismatch of the last dump and how many
more there were; stderr (meson's log) gets all of them and spy's output.

Every interpreter found is run; a minor version of harness.SUPPORTED with no
interpreter on the machine prints "SKIP X.Y (not installed)".
"""

import os
import sys
import time

import harness
from harness import Frame

ATTEMPTS = 6
PAUSE = 0.3       # seconds between attempts
NESTED = harness.target_path("nested.py")
MATRIX = harness.target_path("matrix.py")
MATRIX_PY3 = harness.target_path("matrix_py3.py")


def qual(interp, name):
    """Function names are qualified names from 3.11 on (co_qualname)."""
    return name if interp.version >= (3, 11) else name.rsplit(".", 1)[-1]


def check_frames(what, got, want):
    if got == want:
        return None
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return "%s frame %d: expected %r, got %r" % (what, i, w, g)
    return "%s: expected %d frames %r, got %d %r" % (what, len(want), want,
                                                      len(got), got)


def self_view(info, key, ours, what):
    """The target's own view of a thread's stack (innermost first), after
    checking that its top agrees with `ours` (from the markers) and that
    only threading frames follow; else the target, not spy, is broken."""
    seen = [Frame(f, p, l) for f, p, l in info[key]]
    if seen[:len(ours)] != ours:
        raise harness.HarnessError(
            "target self-check: %s sees %r, markers say %r"
            % (what, seen[:len(ours)], ours))
    tail = seen[len(ours):]
    if not tail or any(os.path.basename(f.file) != "threading.py"
                       for f in tail):
        raise harness.HarnessError("target self-check: %s: expected only "
                                   "threading frames below ours, got %r"
                                   % (what, tail))
    return seen


def check_header(interp, target, d):
    p = []
    if d.pid != target.pid:
        p.append("header: pid %s, expected %d" % (d.pid, target.pid))
    if d.cmdline != " ".join(target.argv):
        p.append("header: command line %r, expected %r"
                 % (d.cmdline, " ".join(target.argv)))
    if d.version != interp.vstring:
        p.append("header: Python %s, expected %s" % (d.version,
                                                     interp.vstring))
    # A free-threaded build says so, and whether its GIL is on (PYTHON_GIL).
    no_gil = None if not interp.free_threaded else not interp.gil
    if d.no_gil != no_gil:
        p.append("header: %s, expected %s" % tuple(
            {None: "no free-threaded build", True: "free-threaded without a GIL",
             False: "free-threaded with its GIL on"}[x] for x in (d.no_gil, no_gil)))
    if d.binary not in harness.mapped_files(target.pid):
        p.append("header: runtime binary %r is not mapped in the target"
                 % d.binary)
    return p


class Want(object):
    """One expected thread."""

    def __init__(self, role, tid, pyid, state, gil, frames, names=()):
        self.role, self.tid, self.pyid = role, tid, pyid
        self.state, self.gil, self.frames = state, gil, frames
        self.names = names       # acceptable thread names; () = not checked


def check_threads(target, d, wants):
    """Problems with the thread blocks of a parsed dump, against wants (in
    any order: they are sorted by TID here, as spy must sort them)."""
    p = []
    tids = [t.tid for t in d.threads]
    if tids != sorted(tids):
        p.append("threads not sorted by TID: %s" % tids)
    wants = sorted(wants, key=lambda w: w.tid)
    if len(d.threads) != len(wants):
        p.append("expected %d threads (%s), got %d: %r"
                 % (len(wants), ", ".join("%s %d" % (w.role, w.tid)
                                          for w in wants),
                    len(d.threads), d.threads))
        return p
    for i, (t, w) in enumerate(zip(d.threads, wants)):
        what = "%s thread" % w.role
        if t.tid != w.tid or t.pyid != w.pyid:
            p.append("thread %d is %d (python 0x%x), expected the %s %d "
                     "(python 0x%x)" % (i + 1, t.tid, t.pyid, what, w.tid,
                                        w.pyid))
            continue
        if t.state != w.state:
            p.append("%s is %r, expected %r" % (what, t.state, w.state))
        if t.gil != w.gil:
            p.append("%s %s the GIL" % (what, "holds" if t.gil
                                        else "does not hold"))
        if w.names and t.name not in w.names:
            p.append("%s is named %r, expected one of %r"
                     % (what, t.name, w.names))
        p.append(check_frames(what, t.frames, w.frames))
    return [x for x in p if x]


def dump_until_right(interp, target, wants):
    """Dump up to ATTEMPTS times; ([], out) on the first correct dump, else
    (problems of the last dump, its output)."""
    problems, out = [], ""
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(PAUSE)
        r = harness.run_spy(["dump", "--pid", str(target.pid)])
        out = r.out + (("\n[stderr]\n" + r.err) if r.err.strip() else "")
        if r.rc != 0 or r.timed_out:
            return [r.describe()], out
        try:
            d = harness.parse_dump(r.out)
        except harness.DumpParseError as e:
            problems = ["cannot parse output: %s" % e]
        else:
            problems = check_header(interp, target, d) + \
                check_threads(target, d, wants(d))
        if not problems:
            return [], out
        if not target.alive():
            return problems + ["target died: %s" % target.stderr()], out
    problems[0] = "after %d dumps: %s" % (ATTEMPTS, problems[0])
    return problems, out


# ---------------------------------------------------------------------------
# nested.py

def nested_wants(interp, target):
    info, pid = target.info, target.pid
    m = harness.markers(NESTED)
    q = lambda name: qual(interp, name)
    main = [Frame(q("inner"), NESTED, m["spin"]),
            Frame(q("Spinner.middle"), NESTED, m["call_inner"]),
            Frame(q("outer"), NESTED, m["call_middle"]),
            Frame("<module>", NESTED, m["call_outer"])]
    sleeper = self_view(info, "sleeper_stack",
                        [Frame(q("sleeper_inner"), NESTED, m["sleep"]),
                         Frame(q("sleeper_outer"), NESTED,
                               m["call_sleeper_inner"])], "sleeper")
    sleeper_tid = info.get("sleeper_native_id") or \
        next((t for t in sorted(harness.task_states(pid)) if t != pid), None)
    # Only a GIL build has a holder (a free-threaded one run with PYTHON_GIL=1).
    return [Want("main", pid, info["main_ident"], "running", interp.gil, main),
            Want("sleeping", sleeper_tid, info["sleeper_ident"], "idle",
                 False, sleeper)]


# ---------------------------------------------------------------------------
# matrix.py

def matrix_spinner(interp, info):
    """The spinner's own frames, innermost first (from the markers)."""
    m = harness.markers(MATRIX)
    q = lambda name: qual(interp, name)
    if interp.version < (3, 5):
        # No async def, no non-ASCII identifiers: compute stands in for 计算.
        top = [Frame("compute", MATRIX, m["spin"]),
               Frame(q("outer.<locals>.<lambda>"), MATRIX, m["lambda"]),
               Frame("gen", MATRIX, m["gen_step"])]
    else:
        py3 = info.get("py3_file") or ""
        if os.path.realpath(py3) != os.path.realpath(MATRIX_PY3):
            raise harness.HarnessError("target self-check: 计算 comes from "
                                       "%r, not %s" % (py3, MATRIX_PY3))
        m3 = harness.markers(MATRIX_PY3)
        top = [Frame("计算", py3, m3["spin"]),
               Frame(q("outer.<locals>.<lambda>"), MATRIX, m["lambda"]),
               Frame("acall", py3, m3["acall_step"]),
               Frame("coro", py3, m3["coro_await"]),
               Frame("drive", py3, m3["drive_send"]),
               Frame("gen", MATRIX, m["gen_drive"])]
    return top + [Frame(q("Klass.method"), MATRIX, m["call_gen"]),
                  Frame(q("outer.<locals>.inner"), MATRIX, m["call_method"]),
                  Frame("outer", MATRIX, m["call_inner"])]


def matrix_wants(interp, target):
    info, pid = target.info, target.pid
    m = harness.markers(MATRIX)
    q = lambda name: qual(interp, name)
    for k in ("spinner_native_id", "sleeper_native_id"):
        if not info.get(k):
            raise harness.HarnessError("target could not tell its %s" % k)
    spinner = self_view(info, "spinner_stack", matrix_spinner(interp, info),
                        "spinner")
    sleeper = self_view(info, "sleeper_stack",
                        [Frame(q("sleeper_inner"), MATRIX, m["sleep"]),
                         Frame(q("sleeper_outer"), MATRIX,
                               m["call_sleeper_inner"])], "sleeper")
    main = [Frame("<module>", MATRIX, m["main_sleep"])]

    def names(tid, threading_name):
        # The name threading gave the thread, not the kernel's (doc/spy-dump.md).
        return (threading_name,)

    spin_tid, sleep_tid = info["spinner_native_id"], info["sleeper_native_id"]
    return lambda d: [
        Want("main", pid, info["main_ident"], "idle", False, main,
             names(pid, "MainThread")),
        Want("spinning", spin_tid, info["spinner_ident"], "running", interp.gil,
             spinner, names(spin_tid, "spinner")),
        Want("sleeping", sleep_tid, info["sleeper_ident"], "idle", False,
             sleeper, names(sleep_tid, "sleeper"))]


# ---------------------------------------------------------------------------

def run_target(interp, script, wants_for):
    with harness.Target(interp, script) as target:
        if target.info["version"] != list(interp.version):
            raise harness.HarnessError("target reports version %s"
                                       % target.info["version"])
        wants = wants_for(interp, target)
        if isinstance(wants, list):
            fixed = wants
            wants = lambda d: fixed
        return dump_until_right(interp, target, wants)


def run_one(interp):
    firsts, total = [], 0
    for script, wants_for in ((MATRIX, matrix_wants),
                              (NESTED, nested_wants)):
        name = os.path.basename(script)
        try:
            problems, out = run_target(interp, script, wants_for)
        except harness.HarnessError as e:
            problems, out = ["%s" % e], ""
        finally:
            harness.cleanup()
        if not problems:
            continue
        total += len(problems)
        firsts.append("%s: %s" % (name, problems[0]))
        sys.stderr.write("== %s, %s: %d problem(s)\n%s\n-- last spy output:\n"
                         "%s\n" % (interp.label, name, len(problems),
                                   "\n".join("  " + x for x in problems),
                                   out))
    if not firsts:
        return []
    more = total - len(firsts)
    return ["; ".join(firsts) + (" (+%d more, see stderr)" % more
                                 if more else "")]


def main():
    rep = harness.reporter("dump")
    harness.for_each_interp(rep, run_one, expect=harness.SUPPORTED, chroot=True,
                            gil_too=True)


if __name__ == "__main__":
    main()
