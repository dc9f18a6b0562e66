#!/usr/bin/env python3
"""spy --native against a C extension built at test time (targets/native_ext.c).

Per interpreter, the extension is compiled with gcc against that
interpreter's own headers (sysconfig's include dir; SKIP with the reason if
Python.h is missing or the build fails), then targets/native_target.py runs
caller() -> spyext.spin_and_call() [C, spins] -> callback() [Python, spins]
in a loop. One PASS/FAIL line covers:
  - record --native: some stack reads, root first, caller, then the C
    function by its symbol `spyext_spin_and_call (spyext.so)`, then
    callback, adjacent (the interpreter's own call frames between them are
    hidden); some stack ends in the C function (samples spinning in C); no
    eval-loop frame shows;
  - record without --native: only Python frames, caller then callback;
  - record --native-all: the eval loop's frames show;
  - dump --native: the C function sits between callback and caller;
  - failed unwinds (SPY_TEST_NATIVE_FAIL makes every native walk fail): the
    Python stacks are still recorded, and the failures are counted in the
    profile's errors.
Once, first: --native with --nonblocking, and dump --native --core, are
usage errors (exit 2).
"""

import os
import shutil
import subprocess
import sys

import harness
from test_record import Profile, func_of

TARGET = harness.target_path("native_target.py")
EXT_SRC = os.path.join(harness.TARGETS, "native_ext.c")
C_FUNC = "spyext_spin_and_call"
EXT_LIB = "spyext.so"
# Rounds of the C spin per call: a few ms, about the Python callback's 5 ms.
ITERS = "8000000"
EVAL_NAMES = ("_PyEval_EvalFrameDefault", "PyEval_EvalFrameEx")


def is_eval(frame):
    """A frame of the eval loop. GCC names a part it splits off a function
    (or a specialised copy) by the function's name and a suffix: Debian's
    3.13+ builds run most opcodes in _PyEval_EvalFrameDefault.cold (84 KB
    beside a 1 KB hot part), which is the eval loop as much as the rest."""
    return func_of(frame).split(".", 1)[0] in EVAL_NAMES


def include_dir(interp):
    """The interpreter's own headers, seen from here."""
    out = subprocess.check_output(
        interp.command(["-c",
                        "import sysconfig; print(sysconfig.get_paths()['include'])"]),
        timeout=30)
    return interp.host_path(out.decode().strip())


def build_ext(interp, outdir):
    """Compile the extension for interp into outdir; SkipInterp if it cannot be."""
    inc = include_dir(interp)
    flags = ["-I" + inc]
    if interp.root:
        # Debian's pyconfig.h includes <x86_64-linux-gnu/python3.X/pyconfig.h>:
        # the root's, searched after this machine's system headers.
        flags += ["-idirafter", interp.host_path("/usr/include")]
    if not os.path.exists(os.path.join(inc, "Python.h")):
        raise harness.SkipInterp("no Python.h in %s (install the headers, "
                                 "e.g. python3-dev)" % inc)
    gcc = shutil.which("gcc")
    if not gcc:
        raise harness.SkipInterp("gcc not found, cannot build the test extension")
    argv = [gcc, "-shared", "-fPIC", "-O1", "-g", "-fno-inline",
            "-fno-optimize-sibling-calls"] + flags + [EXT_SRC,
            "-o", os.path.join(outdir, EXT_LIB)]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=120)
    if p.returncode != 0:
        raise harness.SkipInterp("building the extension failed: %s"
                                 % p.stdout.decode(errors="replace")[-300:])


def record(pid, outdir, name, extra, env=None, seconds="1.5"):
    path = os.path.join(outdir, name + ".folded")
    r = harness.run_spy(["record", "-q", "-F", "-r", "200", "-d", seconds,
                         "-o", path, "--pid", str(pid)] + extra, timeout=60,
                        env=harness.spy_env(env, keep_log=False))
    if r.rc != 0:
        raise harness.SpyFailed(r.describe())
    return Profile(path)


def funcs(frames):
    return [func_of(f) for f in frames]


def adjacent(frames, seq):
    """True if the functions seq appear consecutively, in order, in frames."""
    fs = funcs(frames)
    return any(fs[i:i + len(seq)] == list(seq) for i in range(len(fs)))


def check_native(p):
    probs = []
    through = sum(c for fr, c in p.stacks
                  if adjacent(fr, ("caller", C_FUNC, "callback")))
    in_c = sum(c for fr, c in p.stacks
               if funcs(fr)[-1:] == [C_FUNC] and adjacent(fr, ("caller", C_FUNC)))
    if through < 10:
        probs.append("--native: %d samples read caller;%s;callback (want >= 10 of %d)"
                     % (through, C_FUNC, p.total()))
    if in_c < 5:
        probs.append("--native: %d samples end in %s under caller (want >= 5)"
                     % (in_c, C_FUNC))
    want = "%s (%s)" % (C_FUNC, EXT_LIB)
    if not any(want in fr for fr, _ in p.stacks):
        probs.append("--native: no frame reads %r" % want)
    if any(is_eval(f) for fr, _ in p.stacks for f in fr):
        probs.append("--native: an eval-loop frame is shown (hidden by default)")
    return probs


def is_native(frame):
    """`symbol (library)`: a location that is not a Python file (the
    synthetic process root has no location at all)."""
    i = frame.rfind(" (")
    if i < 0 or not frame.endswith(")"):
        return False
    return not frame[i + 2:-1].rsplit(":", 1)[0].endswith(".py")


def check_plain(p):
    probs = []
    native = [f for fr, _ in p.stacks for f in fr if is_native(f)]
    if native:
        probs.append("without --native: non-Python frame %r" % native[0])
    if p.count_with(C_FUNC):
        probs.append("without --native: %s shows" % C_FUNC)
    if not any(adjacent(fr, ("caller", "callback")) for fr, _ in p.stacks):
        probs.append("without --native: no caller;callback stack")
    return probs


def check_all(p):
    if not any(is_eval(f) for fr, _ in p.stacks for f in fr):
        return ["--native-all: no eval-loop frame shows"]
    return []


def check_failed_unwind(p):
    probs = []
    if not any(adjacent(fr, ("caller", "callback")) for fr, _ in p.stacks):
        probs.append("failed unwinds: the Python stacks are missing")
    if p.count_with(C_FUNC):
        probs.append("failed unwinds: %s shows anyway" % C_FUNC)
    errors = p.meta.get("errors", "")
    if "native" not in errors:
        probs.append("failed unwinds: not counted in '# errors: %s'" % errors)
    return probs


def check_dump(pid):
    """A few dumps: at least one must show callback above the C function above caller."""
    for _ in range(20):
        r = harness.run_spy(["dump", "--native", "--pid", str(pid)], timeout=30,
                            env=harness.spy_env(keep_log=False))
        if r.rc != 0:
            return ["dump --native: " + r.describe()]
        d = harness.parse_dump(r.out)
        main = d.threads[0] if d.threads else None
        if main and adjacent(["%s (%s)" % (f.func, f.file) for f in main.frames],
                             ("callback", C_FUNC, "caller")):
            return []
    return ["dump --native: in 20 dumps, never callback; %s; caller" % C_FUNC]


def check_usage():
    """--native needs paused threads and a live process: usage errors (exit 2)."""
    probs = []
    for args in (["record", "--native", "--nonblocking", "--pid", str(os.getpid())],
                 ["record", "--native-all", "--nonblocking", "--pid", str(os.getpid())],
                 ["dump", "--native", "--core", "/nonexistent.core"]):
        r = harness.run_spy(args, timeout=30, env=harness.spy_env(keep_log=False))
        if r.rc != 2 or len(r.err_lines()) < 1:
            probs.append("%s: want exit 2 and an error line; %s"
                         % (" ".join(args[:3]), r.describe()))
    return probs


def run_one(interp):
    harness.require_test_hooks("SPY_TEST_NATIVE_FAIL")
    # The extension is built here and loaded by the target: a directory
    # both see at one path, also inside the root.
    outdir = harness.shared_dir("spy-native-")
    try:
        build_ext(interp, outdir)
        with harness.Target(interp, TARGET, [outdir, "callback", ITERS],
                            binds=[outdir]) as t:
            probs = check_native(record(t.pid, outdir, "native", ["--native"]))
            probs += check_plain(record(t.pid, outdir, "plain", []))
            probs += check_all(record(t.pid, outdir, "all", ["--native-all"],
                                      seconds="0.5"))
            probs += check_failed_unwind(record(
                t.pid, outdir, "fail", ["--native"],
                env={"SPY_TEST_NATIVE_FAIL": "1"}, seconds="0.5"))
            probs += check_dump(t.pid)
            if not t.alive():
                probs.append("target died: %s" % t.stderr())
        return probs
    finally:
        harness.remove_shared_dir(interp, outdir)


def main():
    rep = harness.reporter("native")
    rep.check("native usage errors", check_usage())
    harness.for_each_interp(rep, run_one,
                            expect=("2.7", "3.8", "3.11", "3.12", "3.13",
                                    "3.14", "3.15"), chroot=True)


if __name__ == "__main__":
    try:
        main()
    except (harness.HarnessError, OSError, subprocess.SubprocessError) as e:
        print("FAIL native: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
