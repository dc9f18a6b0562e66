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
Then targets/native_loop.py, a pure-Python loop (<module> -> outer ->
inner), checks that Python frames sit where they run, whatever symbols the
interpreter has:
  - record --native: every sample's Python frames are <module>;outer or
    <module>;outer;inner, adjacent; a sample ending in inner ends there (or
    in one [jit] frame), one ending in outer ends there or in the clock read
    it makes, never in a frame of the process's start (the symptom of frames
    appended below _start); no frame is a bare [unknown]; the JIT variants
    show [jit] in at least a quarter of the samples, at most once per sample;
  - record --native-all: nothing sits outward of _start;
  - dump --native-all: inner, outer, <module> in order, _start last.
The root's release builds run here also without their debug files and, from
3.14, with PYTHON_JIT=1 (harness.root_variants): Debian's stripped builds
name only the hot part of their eval loop.
Once, first: --native with --nonblocking is a usage error (exit 2).
(dump --core --native: test_dump_hung.py.)
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import harness
from test_record import Profile, func_of

TARGET = harness.target_path("native_target.py")
EXT_SRC = os.path.join(harness.TARGETS, "native_ext.c")
C_FUNC = "spyext_spin_and_call"
EXT_LIB = "spyext.so"
# Rounds of the C spin per call: a few ms, about the Python callback's 5 ms
# (which the wall clock times); fewer on a slower CPU (harness.slowness), or
# the C spin outlasts the callback that many times, and few samples fall in
# the callback.
ITERS = 8000000
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
            "-fno-optimize-sibling-calls", "-pthread"] + flags + [EXT_SRC,
            "-o", os.path.join(outdir, EXT_LIB)]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=120)
    if p.returncode != 0:
        raise harness.SkipInterp("building the extension failed: %s"
                                 % p.stdout.decode(errors="replace")[-300:])


def record(pid, outdir, name, extra, env=None, seconds=1.5):
    """A recording of seconds, dilated by harness.slowness: an emulated CPU
    takes a few samples a second with --native, after its first unwinds
    spent seconds loading the interpreter's unwind tables."""
    path = os.path.join(outdir, name + ".folded")
    seconds = harness.slow(seconds)
    r = harness.run_spy(["record", "-q", "-F", "-r", "200", "-d", "%g" % seconds,
                         "-o", path, "--pid", str(pid)] + extra, timeout=60 + seconds,
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


def check_all(p, interp):
    """The interpreter's internals show. Without debug files the eval loop's
    frames are mostly unnamed (its .cold part): the interpreter's own
    frames, by file and offset, are what shows."""
    if interp.nodebug:
        exe = os.path.basename(interp.path)
        if not any(f.endswith(" (%s)" % exe) and func_of(f).startswith(exe + "+0x")
                   for fr, _ in p.stacks for f in fr):
            return ["--native-all: no frame of %s by offset shows" % exe]
        return []
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


LOOP = harness.target_path("native_loop.py")
MARKER = "[native stack incomplete]"
# What only the process's start runs: outward of every Python frame.
START_FUNCS = ("_start", "__libc_start_main", "__libc_start_call_main", "main",
               "Py_BytesMain", "Py_RunMain", "Py_Main")


def is_python(frame):
    return frame.endswith(")") and not is_native(frame) and " (" in frame


def loop_sample_problem(fr, jit):
    """Why one --native sample of the loop is wrong, or None."""
    fr = [f for f in fr if " (" in f or f == MARKER]    # the synthetic roots off
    py = [i for i, f in enumerate(fr) if is_python(f)]
    names = [func_of(fr[i]) for i in py]
    if names not in (["<module>", "outer"], ["<module>", "outer", "inner"]):
        return "Python frames %s" % names
    if py != list(range(py[0], py[0] + len(py))):
        return "Python frames not adjacent"
    if any(func_of(f) == "[unknown]" for f in fr):
        return "an [unknown] frame"
    tail = fr[py[-1] + 1:]
    jits = [f for f in tail if func_of(f) == "[jit]"]
    if len(jits) > 1 or (jits and not jit):
        return "%d [jit] frames" % len(jits)
    rest = [f for f in tail if func_of(f) != "[jit]"]
    # What the loop calls is the C library's (the clock, a copy, a TLS
    # lookup; by offset where not exported), never what started the process
    # (its unnamed start routine sits among the named ones: --native-all's
    # check sees that).
    if any(func_of(f) in START_FUNCS or func_of(f) == MARKER for f in rest):
        return "frames of the process's start inward of %s" % names[-1]
    return None


def check_loop_record(p, jit, interp):
    probs = []
    bad = {}
    for fr, c in p.stacks:
        why = loop_sample_problem(fr, jit)
        if why:
            bad.setdefault(why, [0, ";".join(fr)])[0] += c
    for why, (c, example) in sorted(bad.items(), key=lambda kv: -kv[1][0])[:3]:
        probs.append("--native, pure-Python loop: %d of %d samples: %s (e.g. %s)"
                     % (c, p.total(), why, example[-300:]))
    inner = p.count_with("inner")
    if inner * 10 < p.total() * 8:
        probs.append("--native, pure-Python loop: %d of %d samples in inner (want >= 80%%)"
                     % (inner, p.total()))
    if jit:
        with_jit = p.count_with("[jit]")
        if with_jit * 4 < p.total():
            probs.append("PYTHON_JIT=1: %d of %d samples show [jit] (want >= 25%%)"
                         % (with_jit, p.total()))
    return probs


def check_loop_all(p):
    """--native-all: the process's start is the outermost native frame."""
    for fr, c in p.stacks:
        fs = [func_of(f) for f in fr if " (" in f]
        if "_start" in fs and fs.index("_start") != 0:
            return ["--native-all, pure-Python loop: %d samples have %r outward of _start"
                    " (e.g. %s)" % (c, fs[:fs.index("_start")][-1], ";".join(fr)[-300:])]
    return []


def check_loop_dump(pid):
    for _ in range(5):
        r = harness.run_spy(["dump", "--native-all", "--pid", str(pid)], timeout=30,
                            env=harness.spy_env(keep_log=False))
        if r.rc != 0:
            return ["dump --native-all: " + r.describe()]
        d = harness.parse_dump(r.out)
        fs = [f.func for f in d.threads[0].frames] if d.threads else []
        py = [f for f in fs if f in ("inner", "outer", "<module>")]
        if py not in (["inner", "outer", "<module>"], ["outer", "<module>"]):
            return ["dump --native-all, pure-Python loop: Python frames %s: %s" % (py, fs)]
        if "_start" in fs and fs[-1] != "_start":
            return ["dump --native-all, pure-Python loop: %s below _start: %s"
                    % (fs[-1], fs)]
        if MARKER in fs:
            return ["dump --native-all, pure-Python loop: frames not placed: %s" % fs]
    return []


def run_loop(interp, outdir):
    with harness.Target(interp, LOOP) as t:
        jit = bool(t.info.get("jit"))
        if interp.env.get("PYTHON_JIT") == "1" and not jit:
            return ["PYTHON_JIT=1 but the JIT is not enabled in the target"]
        probs = check_loop_record(record(t.pid, outdir, "loop", ["--native"], seconds=1),
                                  jit, interp)
        probs += check_loop_all(record(t.pid, outdir, "loop-all", ["--native-all"],
                                       seconds=0.5))
        probs += check_loop_dump(t.pid)
        if not t.alive():
            probs.append("loop target died: %s" % t.stderr())
        return probs


def serve_debug_files(root):
    """A debuginfod server on localhost: /buildid/ID/debuginfo is the
    root's /usr/lib/debug/.build-id file for ID. Returns (server, hits)."""
    import http.server
    import threading
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            parts = self.path.strip("/").split("/")
            path = None
            if len(parts) == 3 and parts[0] == "buildid" and parts[2] == "debuginfo" \
                    and re.match(r"^[0-9a-f]{4,128}$", parts[1]):
                path = os.path.join(root, "usr/lib/debug/.build-id", parts[1][:2],
                                    parts[1][2:] + ".debug")
            if not path or not os.path.isfile(path):
                self.send_error(404)
                return
            with open(path, "rb") as f:
                data = f.read()
            hits.append(parts[1])
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, hits


def check_debuginfod(rep):
    """DEBUGINFOD_URLS set: a build without its debug files gets them from
    the server, and its eval loop's unexported .cold part is named."""
    interps, _ = harness.discover(variants=True)
    cands = [i for i in interps if i.nodebug and not i.env and i.mode == "container"]
    if not cands:
        rep.skip("native debuginfod", "no interpreter of the root without its debug "
                 "files (%s)" % harness.SEARCHED)
        return
    interp = cands[-1]
    tmp = tempfile.mkdtemp(prefix="spy-debuginfod-")
    server, hits = serve_debug_files(interp.root)
    probs = []
    try:
        env = {"DEBUGINFOD_URLS": "http://127.0.0.1:%d" % server.server_address[1],
               "DEBUGINFOD_CACHE_PATH": tmp, "DEBUGINFOD_TIMEOUT": "20"}
        with harness.Target(interp, LOOP) as t:
            names = set()
            for _ in range(5):
                r = harness.run_spy(["dump", "--native-all", "--pid", str(t.pid)], timeout=60,
                                    env=harness.spy_env(env, keep_log=False))
                if r.rc != 0:
                    probs.append("dump --native-all: " + r.describe())
                    break
                d = harness.parse_dump(r.out)
                if d.threads:
                    names.update(f.func for f in d.threads[0].frames)
            exe = os.path.basename(interp.path)
            if not hits:
                probs.append("DEBUGINFOD_URLS set: the server was never asked")
            if not any(n.startswith("_PyEval_EvalFrameDefault") for n in names):
                probs.append("DEBUGINFOD_URLS set: no eval-loop frame named: %s" % sorted(names))
            if any(n.startswith(exe + "+0x") for n in names):
                probs.append("DEBUGINFOD_URLS set: %s frames still by offset" % exe)
    finally:
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    rep.check("native debuginfod, %s" % interp.label, probs)


def check_usage():
    """--native needs paused threads: usage errors (exit 2)."""
    probs = []
    for args in (["record", "--native", "--nonblocking", "--pid", str(os.getpid())],
                 ["record", "--native-all", "--nonblocking", "--pid", str(os.getpid())]):
        r = harness.run_spy(args, timeout=30, env=harness.spy_env(keep_log=False))
        if r.rc != 2 or len(r.err_lines()) < 1:
            probs.append("%s: want exit 2 and an error line; %s"
                         % (" ".join(args[:3]), r.describe()))
    return probs


# targets/native_target.py's workers: C threads that never touch Python,
# spinning this share (%) of each period in WORKER_FUNC.
WORKER_DUTIES = (50, 100)
WORKER_FUNC = "spin_native_worker"
THREAD_ROOT = re.compile(r'^thread (\d+) "(.*)"( \[native\])?$')
PY_FRAME = re.compile(r"\.py(:\d+)?\)$")
UNSAMPLED = re.compile(r"(\d+) threads? without Python used ([0-9.]+) CPU-s, not sampled")


def task_cpu(pid):
    """{tid: utime + stime in clock ticks} of every thread, from /proc."""
    out = {}
    for t in os.listdir("/proc/%d/task" % pid):
        f = harness.read_stat("/proc/%d/task/%s/stat" % (pid, t))
        if f:
            out[int(t)] = int(f[11]) + int(f[12])
    return out


def cpu_used(before, after):
    return dict((tid, after[tid] - before.get(tid, 0)) for tid in after)


def task_runnable(pid):
    """{tid: ns on a CPU or waiting for one (schedstat's first two fields)} of every thread:
    what the activity rule counts as running, where CPU time alone misses a starved thread."""
    out = {}
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                run, wait = f.read().split()[:2]
            out[int(t)] = int(run) + int(wait)
        except (OSError, ValueError):
            pass
    return out


def by_thread(p):
    """{tid: (native-marked, [(frames below the thread root, count)])}."""
    out = {}
    for fr, c in p.stacks:
        m = THREAD_ROOT.match(fr[1]) if len(fr) > 1 else None
        if m:
            e = out.setdefault(int(m.group(1)), [bool(m.group(3)), []])
            e[0] = e[0] or bool(m.group(3))
            e[1].append((fr[2:], c))
    return out


def check_worker_record(p, used, runnable, workers):
    """record -n -t: every native worker with >= 5% of the process's CPU
    has its own [native] root, its share of the samples within 5 points of
    its share of the CPU (/proc's), or on a machine loaded past its CPUs of
    its share of the time runnable (a thread waiting for a CPU is read
    running: doc/kinds.md; the kernel's schedstat says how long), and its
    samples in WORKER_FUNC."""
    probs = []
    threads = by_thread(p)
    total, cpu = p.total(), sum(used.values())
    ready = float(sum(runnable.values())) or 1.0
    if not total or not cpu:
        return ["record -n -t: %d samples, %d ticks of CPU" % (total, cpu)]
    for tid in workers:
        share = 100.0 * used.get(tid, 0) / cpu
        native, stacks = threads.get(tid, (False, []))
        got = sum(c for _, c in stacks)
        if share < 5:
            continue
        if not native:
            probs.append("worker %d (%.0f%% of the CPU): no [native] thread root (roots: %s)"
                         % (tid, share, sorted(threads)))
            continue
        share_ready = 100.0 * runnable.get(tid, 0) / ready
        if abs(100.0 * got / total - share) > 5 and abs(100.0 * got / total - share_ready) > 5:
            probs.append("worker %d: %.1f%% of the samples, %.1f%% of the CPU, %.1f%% of the time "
                         "runnable (/proc; load average %.1f)"
                         % (tid, 100.0 * got / total, share, share_ready, os.getloadavg()[0]))
        inside = sum(c for fr, c in stacks if WORKER_FUNC in funcs(fr))
        leaf = sum(c for fr, c in stacks if funcs(fr)[-1:] == [WORKER_FUNC])
        # A thread read running and stopped a few ms later (each hold
        # waits for its thread to get a CPU) may be in its sleep by then:
        # on a loaded machine, 5 of 33 samples of the half-time worker.
        if inside < 0.75 * got or leaf < 0.5 * got:
            probs.append("worker %d: of %d samples %d in %s, %d ending there: %s"
                         % (tid, got, inside, WORKER_FUNC, leaf,
                            sorted(stacks, key=lambda s: -s[1])[:2]))
        if any(PY_FRAME.search(f) for fr, _ in stacks for f in fr):
            probs.append("worker %d: a Python frame in a native-only thread" % tid)
    for tid, (native, _) in threads.items():
        if native and tid not in workers:
            probs.append("thread %d has a [native] root but runs Python" % tid)
    return probs


def check_worker_plain(r, p, used, workers):
    """record without -n: no [native] root; the summary names the workers'
    CPU, at least half (spy starts reading after its first tick) and at most
    what /proc says they used while spy ran."""
    probs = []
    if any(native for native, _ in by_thread(p).values()):
        probs.append("record without -n: a [native] thread root")
    m = UNSAMPLED.search(r.err)
    truth = sum(used.get(t, 0) for t in workers) / float(os.sysconf("SC_CLK_TCK"))
    if not m:
        probs.append("record without -n: the summary does not name the native threads' "
                     "CPU (%.2f s): %r" % (truth, r.err_lines()[-1:]))
    elif int(m.group(1)) < len(workers) or not 0.5 * truth - 0.05 <= float(m.group(2)) <= truth + 0.05:
        probs.append("record without -n: summary says %s threads, %s CPU-s; /proc: %d, %.2f"
                     % (m.group(1), m.group(2), len(workers), truth))
    return probs


def check_worker_dump(pid, workers):
    """dump --native (text and --json) lists the workers as native threads
    with their C frames."""
    probs = []
    r = harness.run_spy(["dump", "--native", "--pid", str(pid)], timeout=60,
                        env=harness.spy_env(keep_log=False))
    if r.rc != 0:
        return ["dump --native: " + r.describe()]
    d = harness.parse_dump(r.out)
    listed = dict((t.tid, t) for t in d.threads)
    for tid in workers:
        t = listed.get(tid)
        names = [f.func for f in t.frames] if t else []
        if not t or not t.native_only or "worker_main" not in names:
            probs.append("dump --native: worker %d: %r %s" % (tid, t, names))
    # Within the innermost frames: the loop reads the clock through libc and the vDSO.
    if not any(WORKER_FUNC in [f.func for f in listed[t].frames[:5]]
               for t in workers if t in listed):
        probs.append("dump --native: no worker in %s" % WORKER_FUNC)
    r = harness.run_spy(["dump", "--native", "--json", "--pid", str(pid)], timeout=60,
                        env=harness.spy_env(keep_log=False))
    try:
        doc = json.loads(r.out)
    except ValueError as e:
        return probs + ["dump --native --json: %s: %s" % (e, r.describe())]
    for t in doc["threads"]:
        native = t["tid"] in workers
        if t["native_only"] != native or (t["thread_id"] is None) != native or \
                (native and any(f["kind"] != "native" for f in t["frames"])):
            probs.append("dump --native --json: thread %r" % t)
    return probs


def check_workers(interp, outdir):
    """A process whose busy threads are C threads without a thread state."""
    duties = ",".join(str(d) for d in WORKER_DUTIES)
    with harness.Target(interp, TARGET, [outdir, "workers", duties], binds=[outdir]) as t:
        workers = set(t.info["workers"])
        # Once more if it fails: shares part on a machine loaded past its
        # CPUs (the tests run beside others), which a second try often misses.
        for attempt in range(2):
            before, ready_before = task_cpu(t.pid), task_runnable(t.pid)
            p = record(t.pid, outdir, "workers", ["--native", "-t"], seconds=1.5)
            probs = check_worker_record(p, cpu_used(before, task_cpu(t.pid)),
                                        cpu_used(ready_before, task_runnable(t.pid)), workers)
            if not probs:
                break
        before = task_cpu(t.pid)
        path = os.path.join(outdir, "workers-plain.folded")
        # 1.5 s: spy's start (attach, the first tick) is in /proc's figure, not in the summary's.
        r = harness.run_spy(["record", "-F", "-t", "-d", "%g" % harness.slow(1.5), "-o", path,
                             "--pid", str(t.pid)], timeout=60,
                            env=harness.spy_env(keep_log=False))
        if r.rc != 0:
            return probs + ["record without -n: " + r.describe()]
        probs += check_worker_plain(r, Profile(path), cpu_used(before, task_cpu(t.pid)),
                                    workers)
        probs += check_worker_dump(t.pid, workers)
        if not t.alive():
            probs.append("workers target died: %s" % t.stderr())
    return probs


def run_one(interp):
    harness.require_test_hooks("SPY_TEST_NATIVE_FAIL")
    # The extension is built here and loaded by the target: a directory
    # both see at one path, also inside the root.
    outdir = harness.shared_dir("spy-native-")
    try:
        loop = run_loop(interp, outdir)
        try:
            build_ext(interp, outdir)
        except harness.SkipInterp:
            if loop:
                return loop
            raise
        iters = str(int(ITERS / harness.slowness()))
        with harness.Target(interp, TARGET, [outdir, "callback", iters],
                            binds=[outdir]) as t:
            probs = check_native(record(t.pid, outdir, "native", ["--native"]))
            probs += check_all(record(t.pid, outdir, "all", ["--native-all"],
                                      seconds=0.5), interp)
            probs += check_dump(t.pid)
            # What debug files and the JIT change nothing of: once per build.
            if not interp.nodebug:
                probs += check_plain(record(t.pid, outdir, "plain", []))
                probs += check_failed_unwind(record(
                    t.pid, outdir, "fail", ["--native"],
                    env={"SPY_TEST_NATIVE_FAIL": "1"}, seconds=0.5))
            if not t.alive():
                probs.append("target died: %s" % t.stderr())
        # Debug files, the JIT and chroot change nothing of what threads are sampled.
        if harness.slowness() > 1:
            # Not measured under emulation yet: its shares and timings are a
            # native machine's (the arm64 guest runs 10x slower).
            sys.stdout.write("(%s: the native-only threads' check is not run at SPY_TEST_SLOWNESS=%g)\n"
                             % (interp.label, harness.slowness()))
        elif not interp.nodebug and not interp.env and interp.mode != "chroot":
            probs += check_workers(interp, outdir)
        return loop + probs
    finally:
        harness.remove_shared_dir(interp, outdir)


def main():
    rep = harness.reporter("native")
    rep.check("native usage errors", check_usage())
    if harness.ptrace_problem() is None:
        check_debuginfod(rep)
    harness.for_each_interp(rep, run_one,
                            expect=("2.7", "3.8", "3.11", "3.12", "3.13",
                                    "3.14", "3.15"), chroot=True, variants=True)


if __name__ == "__main__":
    try:
        main()
    except (harness.HarnessError, OSError, subprocess.SubprocessError) as e:
        print("FAIL native: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
