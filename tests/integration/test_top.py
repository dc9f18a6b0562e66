#!/usr/bin/env python3
"""spy top against real interpreters (targets/record_target.py).

Per interpreter, one PASS/FAIL line: `spy top --pid PID -d 3 --refresh 1`
with stdout a pipe on the "split" target (work_a and work_b each call the
same unit of work, 7 and 3 times a round):
  - at least 2 plain snapshots, each starting with a "spy top" line, no
    terminal escapes;
  - work_a's %Total above work_b's in the last full interval, and their
    TotalTime since the start split 70/30 (+- 10 points); %Own cannot show
    that split here, since both spend their time in unit(), which is what
    %Own names;
  - the sleeping thread absent (no -i), bar 2% for its start;
  - exit 0 with the summary line on stderr, target not left stopped.
Then, once, on the newest interpreter: -i shows the sleeper; --lines splits
unit() over its lines (one row per function otherwise); launch mode
(`spy top -d 2 -- PYTHON target split`); a target that exits mid-top (exit
0); -s on the "parent" target (a child present at the start and one
started later: child_work shown beside parent_work, the header counting 3
processes); -s of a bash that starts the Python (short 1) a second later
(the header says "no Python process yet", then "its descendants' Python",
short_work shown, exit 0 at the tree's end) and -s -d 1 of sleep (exit 4,
one line); SIGINT to spy (exit 0, target running); on a pseudo-terminal, the
alternate screen and in-place redraw, and the terminal given back (screen,
cursor, termios modes) after 'q', SIGTERM, SIGHUP and a crash (SIGSEGV); and the usage and process
errors of the contract (exit 2, 3, 4).
"""

import os
import pty
import re
import select
import shlex
import signal
import subprocess
import resource
import termios
import time

import harness
from test_cli import free_pid
from test_record import expect_rc, not_stopped

TARGET = harness.target_path("record_target.py")
ROW = re.compile(r"^\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(.+?) \((.*)\)$")


def top(args, timeout=30):
    return harness.run_spy(["top"] + list(args), timeout=timeout,
                           env=harness.spy_env(keep_log=False))


class Snapshot(object):
    def __init__(self, lines):
        self.header = lines[0]
        self.rows = {}   # func -> (own%, total%, own_s, total_s)
        self.nrows = {}  # func -> rows naming it (more than 1 with --lines)
        for l in lines[1:]:
            m = ROW.match(l)
            if m:
                self.rows[m.group(5)] = tuple(float(m.group(i)) for i in range(1, 5))
                self.nrows[m.group(5)] = self.nrows.get(m.group(5), 0) + 1

    def get(self, func):
        return self.rows.get(func, (0.0, 0.0, 0.0, 0.0))


def snapshots(out):
    snaps, cur = [], None
    for line in out.splitlines():
        if line.startswith("spy top"):
            cur = [line]
            snaps.append(cur)
        elif cur is not None:
            cur.append(line)
    return [Snapshot(s) for s in snaps]


def check_split(snaps, what):
    """Problems with the split target's view."""
    p = []
    if len(snaps) < 2:
        return ["%s: %d snapshots, expected at least 2" % (what, len(snaps))]
    full = snaps[-2] if len(snaps) > 2 else snaps[-1]
    a, b = full.get("work_a"), full.get("work_b")
    if not a[1] > b[1]:
        p.append("%s: %%Total work_a %.2f not above work_b %.2f" % (what, a[1], b[1]))
    a, b = snaps[-1].get("work_a"), snaps[-1].get("work_b")
    if a[3] + b[3] <= 0:
        p.append("%s: no TotalTime for work_a/work_b: %r" % (what, snaps[-1].rows))
    else:
        share = 100.0 * a[3] / (a[3] + b[3])
        if abs(share - 70.0) > 10.0:
            p.append("%s: work_a has %.1f%% of work_a+work_b TotalTime, expected 70 +- 10"
                     % (what, share))
    return p


def run_one(interp):
    p = []
    with harness.Target(interp, TARGET, ["split"]) as t:
        r = top(["--pid", str(t.pid), "-r", "200", "-d", "3", "--refresh", "1"])
        p += expect_rc(r, 0, "pid")
        if p:
            return p
        if "\033" in r.out:
            p.append("pid: terminal escapes in piped output")
        snaps = snapshots(r.out)
        p += check_split(snaps, "pid")
        # The sleeper may run for a moment right after "ready" (starting up).
        if snaps and snaps[-1].get("sleeper")[3] > 0.02 * snaps[-1].get("split")[3]:
            p.append("pid: idle thread shown without -i: %r" % (snaps[-1].get("sleeper"),))
        if snaps and snaps[-1].nrows.get("unit") != 1:
            p.append("pid: unit() on %s rows, expected one (function level)"
                     % snaps[-1].nrows.get("unit"))
        if "samples" not in r.err:
            p.append("pid: no summary on stderr: %r" % r.err[:200])
        p += not_stopped(t.pid)
    return p


def check_subprocesses_of(interp):
    """top -s: the children's functions counted beside the parent's."""
    p = []
    with harness.Target(interp, TARGET, ["parent"]) as t:
        r = top(["-s", "--pid", str(t.pid), "-d", "2", "--refresh", "0.5"])
        p += expect_rc(r, 0, "-s")
        snaps = snapshots(r.out)
        if not snaps:
            return p + ["-s: no snapshot: %r" % r.out[:300]]
        last = snaps[-1]
        for func in ("parent_work", "child_work"):
            if last.get(func)[3] <= 0:
                p.append("-s: %s has no TotalTime: %r" % (func, sorted(last.rows)[:20]))
        counts = [l for l in r.out.splitlines() if l.startswith("samples:")]
        if not counts or "processes: 3," not in counts[-1]:
            p.append("-s: the last snapshot does not count 3 processes: %r" % counts[-1:])
        p += not_stopped(t.pid)
    return p


def check_watched(interp):
    """top -s of a bash that starts the Python a second later: the header
    says so before and after, the child's short_work is shown, exit 0 at
    the tree's end; -s -d 1 of sleep: exit 4, one line."""
    p = []
    cmd = " ".join(shlex.quote(a) for a in interp.command([TARGET, "short", "1"]))
    sh = harness.spawn(["bash", "-c", "sleep 1; %s >/dev/null; true" % cmd])
    try:
        r = top(["-s", "--pid", str(sh.pid), "--refresh", "0.5"])
    finally:
        harness.kill(sh)
    p += expect_rc(r, 0, "-s of bash")
    snaps = snapshots(r.out)
    heads = [s.header for s in snaps]
    if not heads or "no Python process yet" not in heads[0]:
        p.append("-s of bash: the first header does not say no Python yet: %r" % heads[:1])
    if not any("its descendants' Python " in h for h in heads):
        p.append("-s of bash: no header names its descendants' Python: %r" % heads[-1:])
    if not snaps or snaps[-1].get("short_work")[3] <= 0:
        p.append("-s of bash: short_work has no TotalTime: %r"
                 % (sorted(snaps[-1].rows)[:10] if snaps else r.out[:300]))
    sleeper = harness.spawn(["sleep", "30"])
    try:
        r = top(["-s", "-d", "1", "--pid", str(sleeper.pid), "--refresh", "0.5"])
    finally:
        harness.kill(sleeper)
    p += expect_rc(r, 4, "-s of sleep")
    if len(r.err_lines()) != 1 or "no Python interpreter found" not in r.err:
        p.append("-s of sleep: expected one 'no Python interpreter found' line, got %r" % r.err[:300])
    return p


def on_terminal(pid, what, stop, want_rc=0):
    """Run spy top on a pseudo-terminal and stop it with stop(spy, master):
    problems if it does not redraw in place on the alternate screen, exit
    want_rc (-N: killed by signal N), and give the terminal back (screen,
    cursor, termios) as it found it."""
    master, slave = pty.openpty()
    p = []
    try:
        before = termios.tcgetattr(slave)
        # No core file from the crash case.
        spy = harness.spawn([harness.spy_path(), "top", "--pid", str(pid), "--refresh", "0.3"],
                            stdin=slave, stdout=slave, stderr=slave,
                            env=harness.spy_env(keep_log=False),
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
        out = b""
        deadline = time.time() + 15
        stopped = False
        while time.time() < deadline:
            r, _, _ = select.select([master], [], [], 0.1)
            if r:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
            if not stopped and out.count(b"spy top:") >= 3:
                stop(spy, master)
                stopped = True
            if spy.poll() is not None and not r:
                break
        if spy.poll() is None:
            p.append("%s: spy did not stop" % what)
        elif spy.returncode != want_rc:
            p.append("%s: exit %s, expected %d" % (what, spy.returncode, want_rc))
        harness.kill(spy)
        for esc, name in ((b"\033[?1049h", "enter the alternate screen"), (b"\033[H", "redraw in place"),
                          (b"\033[?1049l", "leave the alternate screen"), (b"\033[?25h", "show the cursor")):
            if esc not in out:
                p.append("%s: does not %s" % (what, name))
        if termios.tcgetattr(slave) != before:
            p.append("%s: terminal modes not restored" % what)
    finally:
        os.close(master)
        os.close(slave)
    return p


def check_once(interp):
    p = []
    with harness.Target(interp, TARGET, ["split"]) as t:
        r = top(["--pid", str(t.pid), "-i", "-d", "1.5", "--refresh", "0.5"])
        p += expect_rc(r, 0, "idle")
        if not any("sleeper" in s.rows for s in snapshots(r.out)):
            p.append("idle: sleeper absent with -i")

        spy = harness.start_spy(["top", "--pid", str(t.pid), "--refresh", "0.5"],
                                env=harness.spy_env(keep_log=False))
        time.sleep(1.5)
        spy.send_signal(signal.SIGINT)
        try:
            out, _ = spy.communicate(timeout=10)
            if spy.returncode != 0:
                p.append("sigint: exit %s, expected 0" % spy.returncode)
            if not snapshots(out.decode("utf-8", "replace")):
                p.append("sigint: no snapshot")
        except subprocess.TimeoutExpired:
            p.append("sigint: spy did not stop")
        harness.kill(spy)
        p += not_stopped(t.pid)

        p += on_terminal(t.pid, "tty q", lambda spy, master: os.write(master, b"q"))
        p += on_terminal(t.pid, "tty sigterm", lambda spy, master: spy.send_signal(signal.SIGTERM))
        p += on_terminal(t.pid, "tty sighup", lambda spy, master: spy.send_signal(signal.SIGHUP))
        # A crash (here a SIGSEGV sent to it) gives the terminal back too.
        p += on_terminal(t.pid, "tty sigsegv", lambda spy, master: spy.send_signal(signal.SIGSEGV),
                         -signal.SIGSEGV)
        p += not_stopped(t.pid)

        r = top(["--pid", str(t.pid), "--lines", "-d", "1.5", "--refresh", "0.5"])
        p += expect_rc(r, 0, "lines")
        snaps = snapshots(r.out)
        if not snaps or snaps[-1].nrows.get("unit", 0) < 2:
            p.append("lines: unit() not split over its lines: %r"
                     % (snaps[-1].nrows if snaps else r.out[:300]))

    # The program outlives spy (-d) and holds its stdout: a short lifetime
    # lets the pipe close soon after.
    r = harness.run_spy(["top", "-d", "2", "--refresh", "0.5", "--"] + interp.command([TARGET, "split"]),
                        timeout=30, env=harness.spy_env({"SPY_TARGET_LIFETIME": "4"}, keep_log=False))
    p += expect_rc(r, 0, "launch")
    if not r.rc:
        p += check_split(snapshots(r.out), "launch")

    with harness.Target(interp, TARGET, ["short"]) as t:
        r = top(["--pid", str(t.pid), "--refresh", "0.2"])
        p += expect_rc(r, 0, "target exits")

    p += check_subprocesses_of(interp)
    p += check_watched(interp)

    usage = [
        (["--pid", "1", "--rate", "0"], 2, "--rate 0"),
        ([], 2, "no pid"),
        (["--pid", "1", "--sort", "bogus"], 2, "--sort bogus"),
        (["--pid", "1", "--refresh", "0"], 2, "--refresh 0"),
        (["--pid", str(free_pid()), "-d", "1"], 3, "no such process"),
    ]
    for args, rc, what in usage:
        r = top(args)
        p += expect_rc(r, rc, what)
        if len(r.err_lines()) != 1:
            p.append("%s: expected one stderr line, got %r" % (what, r.err))
    sleeper = harness.spawn(["sleep", "30"])
    try:
        p += expect_rc(top(["--pid", str(sleeper.pid), "-d", "1"]), 4, "not Python")
    finally:
        harness.kill(sleeper)
    return p


def main():
    rep = harness.reporter("top")
    newest = []

    def one(interp):
        # The once-checks run on the machine's newest (the root's are
        # covered by run_one like every other interpreter).
        if not interp.root and (not newest or interp.version > newest[0].version):
            newest[:] = [interp]
        return run_one(interp)

    try:
        harness.for_each_interp(rep, one, expect=harness.SUPPORTED)
    except SystemExit:
        # for_each_interp has reported; the checks below still run once.
        if not newest:
            raise
    label = ("once on %s: idle, sigint, terminal, lines, launch, target exit, -s, -s of bash, errors"
             % newest[0].label)
    rep.run(label, check_once, newest[0])
    rep.finish()


if __name__ == "__main__":
    main()
