#!/usr/bin/env python3
"""`spy dump` of hung processes, on every interpreter found: thread states,
the deadlock hint, --locals, --json, and --core against gcore's cores.

Targets are modes of targets/hung.py (see its header). For each interpreter:
  - deadlock: the two threads are "waiting on a lock", innermost frame at
    their @acquire_b / @acquire_a lines, the main thread is idle, and the
    hint names both threads;
  - --json of that same process parses and says what the text says
    (threads, TIDs, names, states, GIL holder, every frame, the hint);
  - recv: the receiver is idle at the @recv line;
  - gil: the spinner is "waiting for the GIL" while the main thread holds
    it, asleep in libc's sleep(), and the hint says so (a free-threaded
    build: the spinner runs, nothing holds a GIL, no hint; the same run
    again with PYTHON_GIL=1 is checked as a GIL build);
  - --locals: work()'s arguments and locals are shown with the reprs (or
    type and length, or type) the target itself computed for them, those
    captured by a closure (held in cells) included; hold_floats()'s 30
    float arguments (integral, huge, tiny, subnormal, inf, nan, -0.0...)
    each as the target's own repr(), in the text and in --json --locals;
  - --core: a gcore of the deadlocked process (taken from here; read with
    --root ROOT when the process runs in a container) dumps the same threads,
    states and frames as the live dump (when gdb's gcore is installed).
Then, once: a truncated core and a file that is no core exit 5; a core of a
program that is not Python (sleep) exits 4; --pid with --core, --exe
or --root without --core, and --core without its file are usage errors (2).

Expected lines come from "# @name" markers in the target; expected values
from what the target reports of itself in its ready line.
"""

import json
import subprocess
import os
import shutil
import sys
import tempfile
import time

import harness
from harness import Frame

HUNG = harness.target_path("hung.py")
ATTEMPTS = 12
PAUSE = 0.3


def dump(pid, *extra):
    r = harness.run_spy(["dump", "--pid", str(pid)] + list(extra))
    if r.rc != 0 or r.timed_out:
        raise harness.SpyFailed(r.describe())
    return r.out


def parse(text):
    try:
        return harness.parse_dump(text)
    except harness.DumpParseError as e:
        raise harness.HarnessError("cannot parse dump: %s\n%s" % (e, text))


def by_ident(d, ident):
    for t in d.threads:
        if t.pyid == ident:
            return t
    return None


def top(t):
    return t.frames[0] if t and t.frames else None


def until(pid, check, *extra):
    """Dump until check(parsed dump) returns no problems; the last problems."""
    problems = []
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(PAUSE)
        out = dump(pid, *extra)
        d = parse(out)
        problems = check(d)
        if not problems:
            return [], d, out
    sys.stderr.write("-- last dump:\n%s\n" % out)
    return problems, d, out


def qual(interp, name):
    return name if interp.version >= (3, 11) else name.rsplit(".", 1)[-1]


# ---------------------------------------------------------------------------

def check_deadlock(interp, target):
    m = harness.markers(HUNG)
    ids = target.info["threads"]
    want = {"ab": Frame("take_a_then_b", HUNG, m["acquire_b"]),
            "ba": Frame("take_b_then_a", HUNG, m["acquire_a"])}

    def check(d):
        p = []
        for name, (ident, _) in sorted(ids.items()):
            t = by_ident(d, ident)
            if t is None:
                p.append("thread %s (0x%x) missing" % (name, ident))
                continue
            if t.state != "waiting on a lock":
                p.append("thread %s is %r, expected 'waiting on a lock'" % (name, t.state))
            if top(t) != want[name]:
                p.append("thread %s innermost frame %r, expected %r" % (name, top(t), want[name]))
        main = [t for t in d.threads if t.tid == target.pid]
        if not main or main[0].state != "idle":
            p.append("main thread not idle: %r" % main)
        tids = [str(by_ident(d, ident).tid) for ident, _ in ids.values() if by_ident(d, ident)]
        if not d.hint or "deadlock" not in d.hint or not all(x in d.hint for x in tids):
            p.append("no deadlock hint naming threads %s (hint: %r)" % (tids, d.hint))
        return p

    return until(target.pid, check)


def as_records(d):
    """What the text and JSON must agree on."""
    return [(t.tid, t.pyid, t.name, t.state, t.gil,
             [(f.func, f.file, f.line) for f in t.frames]) for t in d.threads]


def json_records(doc):
    return [(t["tid"], int(t["thread_id"], 16), t["name"], t["state"], t["holds_gil"],
             [(f["function"], f["file"], f["line"]) for f in t["frames"]])
            for t in doc["threads"]]


def check_json(target, text_dump):
    out = dump(target.pid, "--json")
    try:
        doc = json.loads(out)
    except ValueError as e:
        return ["--json output does not parse: %s" % e]
    p = []
    if doc.get("pid") != target.pid or doc.get("python") != text_dump.version:
        p.append("--json header: pid %r python %r" % (doc.get("pid"), doc.get("python")))
    if json_records(doc) != as_records(text_dump):
        p.append("--json threads differ from the text: %r vs %r"
                 % (json_records(doc), as_records(text_dump)))
    if doc.get("hint") != text_dump.hint:
        p.append("--json hint %r, text %r" % (doc.get("hint"), text_dump.hint))
    return p


def check_recv(interp, target):
    m = harness.markers(HUNG)
    ident = target.info["threads"]["receiver"][0]
    want = Frame("receive", HUNG, m["recv"])

    def check(d):
        t = by_ident(d, ident)
        if t is None:
            return ["receiver thread missing"]
        p = []
        if t.state != "idle":
            p.append("receiver is %r, expected idle" % t.state)
        if top(t) != want:
            p.append("receiver innermost frame %r, expected %r" % (top(t), want))
        return p

    return until(target.pid, check)[0]


def check_gil(interp, target):
    m = harness.markers(HUNG)
    ident = target.info["threads"]["spinner"][0]

    def check(d):
        t = by_ident(d, ident)
        main = [x for x in d.threads if x.tid == target.pid]
        p = []
        if not main or top(main[0]) != Frame("gil", HUNG, m["gil_sleep"]):
            return ["main thread not yet at @gil_sleep: %r" % (main and top(main[0]))]
        if not interp.gil:
            # Free-threaded, without a GIL: nothing holds one, nothing
            # waits, the spinner runs, and no hint blames a GIL.
            if main[0].gil or (t is not None and t.gil):
                p.append("a thread holds the GIL of a build running without one")
            if t is None or t.state != "running":
                p.append("spinner is %r, expected 'running'" % (t and t.state))
            if d.hint:
                p.append("a hint without a GIL: %r" % d.hint)
            return p
        if not main[0].gil:
            p.append("main thread, asleep in PyDLL sleep(), does not hold the GIL")
        if t is None or t.state != "waiting for the GIL":
            p.append("spinner is %r, expected 'waiting for the GIL'" % (t and t.state))
        if not d.hint or "GIL" not in d.hint:
            p.append("no GIL hint (hint: %r)" % d.hint)
        return p

    return until(target.pid, check)[0]


def expected_repr(kind, tname, value):
    if kind == "container":
        return "<%s len=%d>" % (tname, value)
    if kind == "other":
        return "<%s>" % tname
    return value


def check_locals(interp, target):
    m = harness.markers(HUNG)
    ident = target.info["threads"]["worker"][0]
    want = target.info["locals"]
    args = ("small", "big", "text", "items", "table", "ratio", "data", "nothing", "flag")

    def check(d):
        t = by_ident(d, ident)
        if t is None or top(t) != Frame("work", HUNG, m["work_sleep"]):
            return ["worker not at @work_sleep: %r" % (t and top(t))]
        got = dict((name, (kind, r)) for kind, name, r in t.locals[0])
        p = []
        order = [name for kind, name, _ in t.locals[0] if kind == "arg"]
        if order != list(args):
            p.append("arguments shown as %r, expected in declared order %r" % (order, args))
        for name, (kind, tname, value) in sorted(want.items()):
            exp = ("arg" if name in args else "local", expected_repr(kind, tname, value))
            if got.get(name) != exp:
                p.append("local %s: expected %r, got %r" % (name, exp, got.get(name)))
        return p

    return until(target.pid, check, "--locals")[0] + check_floats(target)


def check_floats(target):
    """hold_floats()'s arguments, text and JSON, each the target's own repr()."""
    m = harness.markers(HUNG)
    ident = target.info["threads"]["floats"][0]
    want = [("arg", name, r) for name, r in target.info["floats"]]

    def check(d):
        t = by_ident(d, ident)
        if t is None or top(t) != Frame("hold_floats", HUNG, m["floats_sleep"]):
            return ["floats thread not at @floats_sleep: %r" % (t and top(t))]
        return ["float %s: expected %s, got %s" % (w[1], w[2], g and g[2])
                for w, g in zip(want, t.locals[0] + [None] * len(want)) if w != g]

    p = until(target.pid, check, "--locals")[0]
    try:
        doc = json.loads(dump(target.pid, "--json", "--locals"))
    except ValueError as e:
        return p + ["--json --locals output does not parse: %s" % e]
    ts = [t for t in doc["threads"] if int(t["thread_id"], 16) == ident]
    if not ts or not ts[0]["frames"]:
        return p + ["--json --locals: no floats thread"]
    got = [("arg" if x["arg"] else "local", x["name"], x["repr"])
           for x in ts[0]["frames"][0].get("locals", [])]
    for w, g in zip(want, got + [None] * len(want)):
        if w != g:
            p.append("--json float %s: expected %r, got %r" % (w[1], w, g))
    return p


def check_core(interp, target, live):
    tmp = tempfile.mkdtemp(prefix="spy-core.")
    # The root's own gdb for its Pythons: this machine's gdb 13 writes a
    # thread stack that glibc 2.41+ guards with MADV_GUARD_INSTALL as zeros,
    # and 3.14 keeps each thread's entry frames on that stack.
    argv = interp.tool(["gcore", "-o", os.path.join(tmp, "core"), str(target.pid)],
                                binds=(tmp,))
    if not argv:
        shutil.rmtree(tmp, ignore_errors=True)
        return []
    try:
        r = harness.spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, err = r.communicate(timeout=120)
        core = os.path.join(tmp, "core.%d" % target.pid)
        if r.returncode != 0 or not os.path.exists(core):
            return ["gcore failed: %s" % err.decode(errors="replace")[-200:]]
        # A container's core names paths of its root, which spy reads only
        # when told where that is (doc/spy-dump.md); a chroot's names ours.
        root = ["--root", interp.root] if interp.mode == "container" else []
        res = harness.run_spy(["dump", "--core", core] + root, timeout=60)
        if res.rc != 0:
            return ["--core: " + res.describe()]
        d = parse(res.out)
        p = []
        want = [(t.tid, t.pyid, t.state, t.gil, t.frames) for t in live.threads]
        got = [(t.tid, t.pyid, t.state, t.gil, t.frames) for t in d.threads]
        if got != want:
            p.append("--core dump differs from the live one: %r vs %r" % (got, want))
        if d.pid != target.pid or d.version != interp.vstring:
            p.append("--core header: pid %s, Python %s" % (d.pid, d.version))
        return p
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_one(interp):
    problems = []
    with harness.Target(interp, HUNG, ["deadlock"]) as t:
        p, d, out = check_deadlock(interp, t)
        problems += p
        if not p:
            problems += check_json(t, d)
            problems += check_core(interp, t, d)
    for mode, check in (("recv", check_recv), ("gil", check_gil), ("locals", check_locals)):
        with harness.Target(interp, HUNG, [mode]) as t:
            problems += ["%s: %s" % (mode, x) for x in check(interp, t)]
        harness.cleanup()
    for x in problems:
        sys.stderr.write("%s: %s\n" % (interp.label, x))
    return problems[:1] + (["(+%d more, see stderr)" % (len(problems) - 1)]
                           if len(problems) > 1 else [])


# ---------------------------------------------------------------------------

def bad_inputs():
    """Exit codes for files that are no core, or no Python core."""
    p = []
    tmp = tempfile.mkdtemp(prefix="spy-badcore.")
    try:
        notcore = os.path.join(tmp, "notcore")
        with open(notcore, "w") as f:
            f.write("not an ELF file\n" * 100)
        cases = [(notcore, 5)]
        gcore = shutil.which("gcore")
        if gcore:
            sleeper = harness.spawn(["sleep", "100"])
            r = harness.spawn([gcore, "-o", os.path.join(tmp, "sleep"), str(sleeper.pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            r.wait(timeout=120)
            harness.kill(sleeper)
            core = os.path.join(tmp, "sleep.%d" % sleeper.pid)
            if os.path.exists(core):
                trunc = os.path.join(tmp, "truncated")
                with open(core, "rb") as src, open(trunc, "wb") as dst:
                    dst.write(src.read(os.path.getsize(core) // 3))
                cases += [(core, 4), (trunc, 5)]
            else:
                p.append("gcore of sleep made no core")
        for path, code in cases:
            res = harness.run_spy(["dump", "--core", path])
            lines = res.err_lines()
            if res.rc != code or len(lines) != 1:
                p.append("--core %s: expected exit %d and one line, got %d: %r"
                         % (os.path.basename(path), code, res.rc, lines))
        for args in (["--pid", "1", "--core", notcore], ["--exe", notcore, "--pid", "1"],
                     ["--root", "/", "--pid", "1"], ["--core"]):
            res = harness.run_spy(["dump"] + args)
            if res.rc != 2:
                p.append("dump %s: expected exit 2, got %d" % (" ".join(args), res.rc))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return p


def main():
    rep = harness.reporter("dump-hung")
    rep.check("bad --core input", bad_inputs())
    harness.for_each_interp(rep, run_one, expect=harness.SUPPORTED, gil_too=True)


if __name__ == "__main__":
    main()
