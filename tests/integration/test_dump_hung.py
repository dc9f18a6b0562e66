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
    states and frames as the live dump (when gdb's gcore is installed);
    --core --native-all the same merged native and Python stacks, the
    interpreter's own frames included, as a live dump --native-all taken
    just before the core (the threads sit still in C: in the lock's futex
    wait, the main thread in its sleep), each thread's with a native frame
    innermost;
  - a crash in C: targets/crash.py segfaults in libc's strlen under
    ctypes, run under gdb (the root's for its Pythons), which dumps the
    core at the fault; dump --core --native-all of it must name the
    crashing thread's native frames as gdb's own backtrace of that moment
    does, from the fault out to libffi's ffi_call (gdb's "??" where spy
    has file+0xADDR, its DWARF name where spy has gcc's symbol, like
    string_at.lto_priv.0), with the Python frame that called it, crash()
    at @crash, further out (on pyenv's 2.7 and 3.13 and every other
    build, not again for a free-threaded build's PYTHON_GIL=1 run: the
    same binary).
Then, once: the kernel's own core of crash.py (on the first interpreter
outside the root; SKIP where kernel.core_pattern writes no file into the
process's directory) is read as gdb reads it; a truncated core and a file
that is no core exit 5, with
--native too; a core of a program that is not Python (sleep) exits 4; --pid with --core, --exe
or --root without --core, and --core without its file are usage errors (2).

Expected lines come from "# @name" markers in the target; expected values
from what the target reports of itself in its ready line.
"""

import json
import re
import resource
import subprocess
import os
import shutil
import sys
import tempfile
import time

import harness
from harness import Frame

HUNG = harness.target_path("hung.py")
CRASH = harness.target_path("crash.py")
# A frame of gdb's backtrace: "#1  0x00007f... in string_at (size=-1, ..." or "#0  strlen () at ...".
GDB_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-fA-F]+ in )?(\S+) \(")
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


def native_problems(live_native, core_native):
    """--core --native-all against the live one of the same still process."""
    p = []
    for t in live_native.threads:
        if not t.frames or t.frames[0].line is not None:
            p.append("live --native-all: thread %d has no native frame innermost: %r"
                     % (t.tid, t.frames[:1]))
    want = [(t.tid, t.frames) for t in live_native.threads]
    got = [(t.tid, t.frames) for t in core_native.threads]
    if got != want:
        p.append("--core --native-all differs from the live one: %r vs %r" % (got, want))
    return p


def check_core(interp, target, live):
    tmp = tempfile.mkdtemp(prefix="spy-core.")
    # Just before the core: the threads sit in C, so their native stacks hold still.
    live_native = parse(dump(target.pid, "--native-all"))
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
        if harness.slowness() > 1:
            # Not run in the emulated arm64 guest yet (its PAC mask from the core, untried there).
            return p
        res = harness.run_spy(["dump", "--core", core, "--native-all"] + root, timeout=60)
        if res.rc != 0:
            return p + ["--core --native-all: " + res.describe()]
        return p + native_problems(live_native, parse(res.out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def to_ffi_call(names):
    """The innermost frames' names, through the first ffi_call, else through
    _ctypes_callproc (arm64's libffi names neither its frames nor ffi_call,
    for spy and gdb alike), else all."""
    for last in ("ffi_call", "_ctypes_callproc"):
        if last in names:
            return names[:names.index(last) + 1]
    return names


def crash_problems(interp, core, gdb_out, what):
    """dump --core --native-all of a core of crash.py against gdb's bt of it."""
    lines = gdb_out.decode(errors="replace").splitlines()
    # The backtrace is the last run from "#0" (gdb shows frame 0 once when it loads a core).
    first = max([i for i, l in enumerate(lines) if l.startswith("#0 ")] or [0])
    gdb = [m.group(1) for m in (GDB_FRAME.match(l) for l in lines[first:]) if m]
    root = ["--root", interp.root] if interp.mode == "container" else []
    res = harness.run_spy(["dump", "--core", core, "--native-all"] + root, timeout=60)
    if res.rc != 0:
        return ["%s: --core --native-all: %s" % (what, res.describe())]
    d = parse(res.out)
    frames = d.threads[0].frames if d.threads else []
    lead = []
    for f in frames:
        if f.line is not None:
            break
        lead.append(f.func)
    want = to_ffi_call(gdb)
    got = to_ffi_call(lead)
    # gdb names a function by its DWARF name, the symbol table by gcc's
    # (string_at.lto_priv.0, .constprop.0, .cold): the same function.
    same = len(got) == len(want) and all(
        g.split(".")[0] == w or (w == "??" and "+0x" in g) for g, w in zip(got, want))
    p = []
    if not want or not same:
        p.append("%s: spy's innermost native frames %r, gdb's backtrace %r" % (what, got, want))
    if Frame("crash", CRASH, harness.markers(CRASH)["crash"]) not in frames:
        p.append("%s: no crash() frame at @crash in %r" % (what, frames))
    return p


def crash_checked(interp):
    """Whether check_crash runs on interp: gdb's run costs 0.6-2 s an
    interpreter (4 s free-threaded), so of pyenv's builds of one recipe only
    the oldest and newest; every other build (stripped system, free-threaded,
    the root's release and debug ones), but a free-threaded build's
    PYTHON_GIL=1 run is the same binary again."""
    if interp.free_threaded and interp.gil:
        return False
    # gdb's run and the unwind of a core under emulation (the arm64 guest): not measured yet.
    if harness.slowness() > 1:
        return False
    return interp.origin != "pyenv" or interp.minor in ("2.7", "3.13")


def check_crash(interp):
    tmp = tempfile.mkdtemp(prefix="spy-crash.")
    core = os.path.join(tmp, "core")
    argv = interp.tool(["gdb", "-batch", "-nx", "-ex", "run", "-ex", "gcore " + core,
                        "-ex", "bt 40", "-ex", "kill", "--args"] + interp.argv([CRASH]),
                       binds=(tmp,))
    if not argv:
        shutil.rmtree(tmp, ignore_errors=True)
        return []
    try:
        r = harness.spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = r.communicate(timeout=120)
        if not os.path.exists(core):
            return ["gdb made no core of the crash: %s" % err.decode(errors="replace")[-200:]]
        return crash_problems(interp, core, out, "crash")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def kernel_core(rep):
    """The kernel's own core of crash.py (what a crash leaves with no
    debugger attached: written and anonymous memory only, the text read
    back from the files), on this machine's first interpreter outside the
    root, against gdb's bt of that core. Needs a core_pattern that writes
    a file in the crashing process's directory."""
    label = "kernel core of a crash"
    with open("/proc/sys/kernel/core_pattern") as f:
        pattern = f.read().strip()
    if pattern.startswith("|") or "/" in pattern:
        return rep.skip(label, "kernel.core_pattern %r does not write a core into the "
                        "process's directory" % pattern)
    interps = [i for i in harness.discover(False, False)[0] if not i.root]
    gdb = shutil.which("gdb")
    if not interps or not gdb:
        return rep.skip(label, "no gdb" if interps else "no interpreter outside the root")
    interp = interps[0]
    tmp = tempfile.mkdtemp(prefix="spy-kcore.")
    try:
        def allow_core():
            resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY,) * 2)
        r = harness.spawn(interp.argv([CRASH]), cwd=tmp, preexec_fn=allow_core,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r.wait(timeout=60)
        cores = [n for n in os.listdir(tmp) if n.startswith(pattern.split("%")[0] or "core")]
        if r.returncode != -11 or not cores:
            return rep.check(label, ["%s: exit %s, no core in %s (%r)"
                                     % (interp.label, r.returncode, tmp, os.listdir(tmp))])
        core = os.path.join(tmp, cores[0])
        g = harness.spawn([gdb, "-batch", "-nx", "-ex", "bt 40", interp.path, core],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        out, _ = g.communicate(timeout=120)
        rep.check("%s, %s" % (label, interp.label), crash_problems(interp, core, out, "kernel core"))
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
    if crash_checked(interp):
        problems += check_crash(interp)
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
        for (path, code), native in [(c, n) for c in cases for n in ([], ["--native"])]:
            res = harness.run_spy(["dump", "--core", path] + native)
            lines = res.err_lines()
            if res.rc != code or len(lines) != 1:
                p.append("--core %s%s: expected exit %d and one line, got %d: %r"
                         % (os.path.basename(path), " --native" * len(native), code,
                            res.rc, lines))
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
    kernel_core(rep)
    harness.for_each_interp(rep, run_one, expect=harness.SUPPORTED, gil_too=True)


if __name__ == "__main__":
    main()
