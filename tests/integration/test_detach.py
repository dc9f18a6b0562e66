#!/usr/bin/env python3
"""spy never leaves its target stopped.

On every interpreter found (2.7, 3.6-3.15, the Debian root's too: about a
second each), with targets/nested.py (a spinning main thread and a sleeping
one), five scenarios, each on a fresh target:
  dump     after `spy dump --pid` returns, no task of the target is stopped
           (state 't' or 'T' in /proc/PID/task/*/stat) and it uses CPU again;
  SIGINT   spy runs with SPY_TEST_HOLD_PAUSED_MS=20000, which makes it hold
  SIGTERM  the target paused after stopping it; once every task shows 't',
  SIGHUP   spy gets the signal. spy must exit (130 for SIGINT, 143 for
  SIGKILL  SIGTERM, 129 for SIGHUP; SIGKILL, SIGQUIT and SIGABRT -- an
  SIGQUIT  abort() -- kill it, with no core file (RLIMIT_CORE 0), and the
  SIGABRT  kernel detaches), and
           within a second of the signal the target must be running again,
           still alive, using CPU, and no task of it traced (TracerPid 0
           in /proc/PID/task/*/status).
A dump held past its limit (SPY_TEST_HOLD_PAUSED_MS=5000, a walk slower
than the 2 s a dump may keep its target stopped) lets the target go at the
limit, prints what it has marked "Incomplete", and exits 0.
And one launch: `spy top -- targets/nohup.py`, a program that ignores
SIGHUP: a SIGHUP to spy (its terminal closed) ends spy within
HANGUP_TIMEOUT, the program running on, untraced, and the summary says so.
One line per interpreter; a FAIL names every scenario that went wrong. A
version of harness.SUPPORTED with no interpreter here prints
"SKIP X.Y (not installed)".
"""

import os
import re
import resource
import signal
import subprocess
import tempfile
import time

import harness

TARGET = harness.target_path("nested.py")
NOHUP = harness.target_path("nohup.py")
DUMP_LIMIT = 2.0        # how long a dump keeps its target stopped at most
HANGUP_TIMEOUT = 1.5     # from a SIGHUP to spy's exit, the launched program ignoring it
HOLD_MS = 20000
PAUSE_TIMEOUT = 15.0     # for spy to stop every task of the target
RESUME_TIMEOUT = 1.0     # from the signal to the target running again
EXIT_TIMEOUT = 5.0       # from the signal to spy's exit
STOPPED = ("t", "T")     # tracing stop, or left in a group stop


def stopped_tasks(pid):
    return {tid: s for tid, s in harness.task_states(pid).items()
            if s in STOPPED}


def all_traced(pid):
    states = harness.task_states(pid)
    return bool(states) and all(s == "t" for s in states.values())


def runs_again(target, within, what):
    """Problems if the target is not running (and using CPU) soon enough."""
    pid = target.pid
    if not harness.wait_for(lambda: not stopped_tasks(pid), within):
        return ["%s: target still stopped %.1f s later: %s"
                % (what, within, harness.task_states(pid))]
    if not target.alive():
        return ["%s: target died: %s" % (what, target.stderr())]
    t0 = harness.cpu_ticks(pid)
    if not harness.wait_for(lambda: harness.cpu_ticks(pid) > t0, 3.0):
        return ["%s: target uses no CPU (states %s)"
                % (what, harness.task_states(pid))]
    return []


def after_dump(interp):
    with harness.Target(interp, TARGET) as target:
        r = harness.run_spy(["dump", "--pid", str(target.pid)])
        problems = [] if r.rc == 0 else ["dump: " + r.describe()]
        if not r.out.startswith("Process %d:" % target.pid):
            # Without this a spy that never attached would pass.
            problems.append("dump: no dump of the target on stdout: %r"
                            % r.out[:200])
        if stopped_tasks(target.pid):
            problems.append("dump: tasks stopped right after spy returned: %s"
                            % harness.task_states(target.pid))
        return problems + runs_again(target, 0.5, "dump")


def hold_then_signal(interp, sig, want_rc):
    name = signal.Signals(sig).name
    with harness.Target(interp, TARGET) as target:
        env = harness.spy_env({"SPY_TEST_HOLD_PAUSED_MS": str(HOLD_MS)})
        spy = harness.start_spy(["dump", "--pid", str(target.pid)], env=env)
        try:
            harness.wait_for(lambda: spy.poll() is not None
                             or all_traced(target.pid), PAUSE_TIMEOUT)
            if spy.poll() is not None:
                err = spy.stderr.read().decode("utf-8", "replace").strip()
                return ["%s: spy exited %s before every task was seen in 't' "
                        "(does it honour SPY_TEST_HOLD_PAUSED_MS?): %s"
                        % (name, spy.returncode, err or "(no stderr)")]
            if not all_traced(target.pid):
                return ["%s: target not stopped %.0f s after spy started: %s"
                        % (name, PAUSE_TIMEOUT,
                           harness.task_states(target.pid))]
            os.kill(spy.pid, sig)
            problems = runs_again(target, RESUME_TIMEOUT, name)
            try:
                spy.wait(timeout=EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                return problems + ["%s: spy still running %.0f s after the "
                                   "signal" % (name, EXIT_TIMEOUT)]
            if spy.returncode != want_rc:
                how = ("killed by signal %d" % -spy.returncode
                       if spy.returncode < 0 else "exit %d" % spy.returncode)
                problems.append("%s: spy ended with %s, expected %s"
                                % (name, how, "exit %d" % want_rc
                                   if want_rc >= 0 else "death by signal"))
            problems += runs_again(target, 0.5, name + ", after spy exit")
            traced = harness.tracers(target.pid)
            if traced:
                problems.append("%s: target still traced after spy exit: %s" % (name, traced))
            return problems
        finally:
            harness.kill(spy)


def dump_bounded(interp):
    with harness.Target(interp, TARGET) as target:
        env = harness.spy_env({"SPY_TEST_HOLD_PAUSED_MS": "5000"}, keep_log=False)
        start = time.time()
        r = harness.run_spy(["dump", "--pid", str(target.pid)], env=env)
        took = time.time() - start
        problems = [] if r.rc == 0 else ["bounded dump: " + r.describe()]
        if took > DUMP_LIMIT + 1.5:
            problems.append("bounded dump: took %.1f s, the limit is %.0f s" % (took, DUMP_LIMIT))
        if "Incomplete:" not in r.out:
            problems.append("bounded dump: not marked incomplete: %r" % r.out[-300:])
        if not r.out.startswith("Process %d:" % target.pid):
            problems.append("bounded dump: no header: %r" % r.out[:200])
        return problems + runs_again(target, 0.5, "bounded dump")


def launch_hangup(interp):
    # Files, not pipes: the program inherits them and outlives spy.
    with tempfile.TemporaryFile() as errf:
        spy = harness.spawn([harness.spy_path(), "top", "--"] + interp.command([NOHUP]),
                            stdout=subprocess.DEVNULL, stderr=errf,
                            env=harness.spy_env(keep_log=False))
        programs = []
        try:
            return hangup(spy, errf, programs)
        finally:
            harness.kill(spy)
            # The program ignores the signals spy forwards: on a failure
            # path nothing else would end it.
            for pid in programs:
                kill_nohup(pid)


def kill_nohup(pid):
    """SIGKILL pid if it still runs nohup.py (the launched program, ours)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if b"nohup.py" in f.read():
                os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def hangup(spy, errf, programs):
    def err_text():
        errf.seek(0)
        return errf.read().decode("utf-8", "replace")
    time.sleep(2.0)
    programs.extend(harness.children(spy.pid))
    if spy.poll() is not None:
        return ["hangup: spy exited %s before the signal: %s" % (spy.returncode, err_text()[-300:])]
    start = time.time()
    os.kill(spy.pid, signal.SIGHUP)
    try:
        spy.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return ["hangup: spy still running 10 s after SIGHUP"]
    took = time.time() - start
    err = err_text()
    problems = []
    if took > HANGUP_TIMEOUT:
        problems.append("hangup: spy took %.1f s to end" % took)
    m = re.search(r"\(process (\d+)\) is still running", err)
    if not m:
        return problems + ["hangup: the summary does not say the program runs on: %r" % err[-300:]]
    pid = int(m.group(1))
    try:
        if not os.path.exists("/proc/%d" % pid):
            problems.append("hangup: the program is gone")
        elif harness.tracers(pid):
            problems.append("hangup: the program is still traced: %s" % harness.tracers(pid))
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return problems


def run_one(interp):
    harness.require_test_hooks("SPY_TEST_HOLD_PAUSED_MS")
    problems = after_dump(interp)
    for sig, rc in ((signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129),
                    (signal.SIGKILL, -signal.SIGKILL), (signal.SIGQUIT, -signal.SIGQUIT),
                    (signal.SIGABRT, -signal.SIGABRT)):
        problems += hold_then_signal(interp, sig, rc)
        harness.cleanup()
    return problems + dump_bounded(interp) + launch_hangup(interp)


def main():
    # SIGQUIT and SIGABRT dump core by default: not into the tests' directory.
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    # Run in the background of a shell without job control, this process
    # inherits SIGQUIT ignored, and spy after it would not die of one.
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    rep = harness.reporter("detach")
    harness.for_each_interp(rep, run_one, expect=harness.SUPPORTED)


if __name__ == "__main__":
    main()
