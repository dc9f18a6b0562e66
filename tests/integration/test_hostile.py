#!/usr/bin/env python3
"""Fault trials: hostile targets against the built spy. One PASS/FAIL/SKIP
line per trial, each on one interpreter (the newest found that can run the
target): what is tried does not depend on the Python version.

names   -- targets/hostile.py: function, file, process name and argv are
           terminal escapes, a newline forging a frame, C1, bidi controls.
           `spy dump`, `spy top` (piped) and `spy record -f table` print
           them visibly, with no control character but the line ends; an
           error line quoting a hostile file name is escaped too.
numbers -- `record --rate 1e-300` and "# rate-hz:" lines of 1e-300,
           denormals, 1e308, nan and -inf through every writer: no crash.
sighup  -- SIGHUP stops `record --pid` like SIGTERM, profile written.
"""

import os
import sys
import tempfile

import harness

HOSTILE = harness.target_path("hostile.py")
BIDI = set(range(0x202a, 0x202f)) | set(range(0x2066, 0x206a)) | {
    0x061c, 0x200e, 0x200f, 0x2028, 0x2029}


def raw_controls(what, data):
    """Problems with data (bytes): control bytes other than '\\n', C1 or
    bidi controls, invalid UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return ["%s: invalid UTF-8 at byte %d: %r" % (what, e.start, data[max(0, e.start - 20):e.start + 20])]
    for i, c in enumerate(text):
        o = ord(c)
        if (o < 0x20 and c != "\n") or 0x7f <= o <= 0x9f or o in BIDI:
            return ["%s: raw U+%04X at %d: %r" % (what, o, i, text[max(0, i - 30):i + 30])]
    return []


def run_raw(args, timeout=30):
    """spy with bytes out and err (run_spy decodes with replacement)."""
    p = harness.spawn([harness.spy_path()] + args, stdout=harness.subprocess.PIPE,
                      stderr=harness.subprocess.PIPE, env=harness.spy_env(keep_log=False))
    try:
        out, err = p.communicate(timeout=timeout)
    except harness.subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    harness.kill(p)
    return p.returncode, out, err


def trial_names(interp):
    if interp.version < (3, 8):
        raise harness.SkipInterp("needs code.replace (3.8+)")
    p = []
    with harness.Target(interp, HOSTILE, ["\x1b]0;title\x07\u202e"]) as t:
        rc, out, err = run_raw(["dump", "--pid", str(t.pid)])
        if rc != 0:
            p.append("dump exited %s: %r" % (rc, err[-300:]))
        p += raw_controls("dump stdout", out) + raw_controls("dump stderr", err)
        if b"\n    forged" in out:
            p.append("dump: a newline in a name forged a frame line")
        if b"forged" not in out:
            p.append("dump: the hostile function is not shown: %r" % out[-400:])
        rc, out, err = run_raw(["top", "--pid", str(t.pid), "-d", "1.2", "--refresh", "0.5"])
        if rc != 0:
            p.append("top exited %s: %r" % (rc, err[-300:]))
        p += raw_controls("top stdout", out) + raw_controls("top stderr", err)
        if b"forged" not in out:
            p.append("top: the hostile function is not shown: %r" % out[-400:])
        d = tempfile.mkdtemp(prefix="spy-hostile-")
        try:
            for fmt in ("table", "folded"):
                path = os.path.join(d, "out." + fmt)
                rc, out, err = run_raw(["record", "--pid", str(t.pid), "-d", "1", "-f", fmt, "-o", path])
                if rc != 0:
                    p.append("record -f %s exited %s: %r" % (fmt, rc, err[-300:]))
                    continue
                with open(path, "rb") as f:
                    data = f.read()
                os.unlink(path)
                p += raw_controls("record -f " + fmt, data) + raw_controls("record stderr", err)
                if b"forged" not in data:
                    p.append("record -f %s: the hostile function is missing" % fmt)
        finally:
            os.rmdir(d)
    d = tempfile.mkdtemp(prefix="spy-hostile-")
    try:
        rc, out, err = run_raw(["report", os.path.join(d, "no\x1b]52;c;aGk=\x07\nsuch.folded")])
        if rc == 0:
            p.append("report of a missing file exited 0")
        p += raw_controls("report error line", err)
    finally:
        os.rmdir(d)
    return p


def trial_numbers(interp):
    """A rate of 1e-300 Hz is a period of 1e309 ns; a crafted "# rate-hz:"
    the same in every writer. Undefined casts once (SIGFPE in the ticker)."""
    p = []
    d = tempfile.mkdtemp(prefix="spy-hostile-")
    try:
        out = os.path.join(d, "tiny.folded")
        rc, _, err = run_raw(["record", "--rate", "1e-300", "-d", "0.5", "-o", out, "--",
                              interp.path, "-c", "import time; time.sleep(1)"])
        if rc not in (0, 2):
            p.append("record --rate 1e-300: exit %s: %r" % (rc, err[-200:]))
        crafted = os.path.join(d, "crafted.folded")
        for rate in ("1e-300", "4.9e-324", "1e308", "nan", "-inf"):
            with open(crafted, "w") as f:
                f.write("# rate-hz: %s\nmain (a.py:1);f (a.py:2) 3\n" % rate)
            for fmt in ("pprof", "chrome", "speedscope", "table", "svg", "json"):
                rc, _, err = run_raw(["report", crafted, "-f", fmt, "-o", os.path.join(d, "o." + fmt)])
                if rc not in (0, 5):
                    p.append("report rate-hz %s -f %s: exit %s: %r" % (rate, fmt, rc, err[-200:]))
    finally:
        harness.shutil.rmtree(d)
    return p


def trial_sighup(interp):
    """SIGHUP (a closed terminal or ssh session) stops a recording like
    SIGTERM: the profile is written, with the same exit code."""
    p = []
    d = tempfile.mkdtemp(prefix="spy-hostile-")
    try:
        with harness.Target(interp, HOSTILE) as t:
            rcs = {}
            for sig in (harness.signal.SIGTERM, harness.signal.SIGHUP):
                out = os.path.join(d, "sig%d.folded" % sig)
                spy = harness.start_spy(["record", "--pid", str(t.pid), "-o", out],
                                        env=harness.spy_env(keep_log=False))
                harness.time.sleep(1.0)
                spy.send_signal(sig)
                try:
                    spy.communicate(timeout=10)
                except harness.subprocess.TimeoutExpired:
                    p.append("signal %d: spy did not stop" % sig)
                harness.kill(spy)
                rcs[sig] = spy.returncode
                if not os.path.exists(out) or b"forged" not in open(out, "rb").read():
                    p.append("signal %d: no recording written (exit %s)" % (sig, spy.returncode))
            if rcs[harness.signal.SIGHUP] != rcs[harness.signal.SIGTERM]:
                p.append("SIGHUP exit %s, SIGTERM exit %s" % (rcs[harness.signal.SIGHUP],
                                                             rcs[harness.signal.SIGTERM]))
            if harness.proc_state(t.pid) in ("t", "T"):
                p.append("target left stopped")
    finally:
        harness.shutil.rmtree(d)
    return p


TRIALS = [("names", trial_names), ("numbers", trial_numbers), ("sighup", trial_sighup)]


def newest(interps):
    return interps[-1] if interps else None


def main():
    rep = harness.reporter("hostile")
    interps, _ = harness.discover()
    interp = newest(interps)
    no_ptrace = harness.ptrace_problem()
    only = sys.argv[1:]
    for name, fn in TRIALS:
        if only and name not in only:
            continue
        if interp is None:
            rep.skip(name, "no Python interpreter found (searched %s)" % harness.searched_where())
            continue
        if no_ptrace:
            rep.skip(name, no_ptrace)
            continue
        label = "%s (%s)" % (name, interp.label)
        try:
            rep.check(label, fn(interp))
        except harness.SkipInterp as e:
            rep.skip(label, str(e))
        except (harness.HarnessError, OSError, ValueError,
                harness.subprocess.SubprocessError) as e:
            rep.fail(label, "%s: %s" % (type(e).__name__, e))
        finally:
            harness.cleanup()
    rep.finish()


if __name__ == "__main__":
    main()
