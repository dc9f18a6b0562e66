#!/usr/bin/env python3
"""The command-line contract (shared docs cli.md): help, version, usage
errors and the exit codes for a missing process and a non-Python process.
One PASS/FAIL/SKIP line per check; no Python interpreter is needed."""

import os
import re
import shutil
import subprocess
import sys

import harness

def spy(*args):
    # SPY_LOG off: the one-line-on-stderr rule is about errors, not logging.
    return harness.run_spy(list(args), env=harness.spy_env(keep_log=False))


def expect(r, rc, out=(), err=(), one_err_line=False):
    """Problems with a spy run: exit code rc, each string of `out` in stdout
    and each of `err` in stderr (case-insensitive), optionally exactly one
    stderr line."""
    p = []
    if r.timed_out:
        return ["timed out"]
    if r.rc != rc:
        p.append("exit %s, expected %d (stderr: %s)"
                 % (r.rc, rc, " | ".join(r.err_lines()[:3]) or "empty"))
    for s in out:
        if s.lower() not in r.out.lower():
            p.append("stdout lacks %r: %r" % (s, r.out[:300]))
    for s in err:
        if s.lower() not in r.err.lower():
            p.append("stderr lacks %r: %r" % (s, r.err[:300]))
    if one_err_line and len(r.err_lines()) != 1:
        p.append("expected exactly one line on stderr, got %d: %r"
                 % (len(r.err_lines()), r.err[:500]))
    return p


def free_pid():
    """A pid with no process: that of a child we started and reaped."""
    for _ in range(20):
        p = harness.spawn([sys.executable, "-c", "pass"])
        p.wait()
        harness.kill(p)
        if not os.path.exists("/proc/%d" % p.pid):
            return p.pid
    raise harness.HarnessError("could not find a free pid")


def main():
    rep = harness.reporter("cli")

    version = os.environ.get("SPY_EXPECTED_VERSION")
    r = spy("--version")
    p = expect(r, 0)
    if version and version not in r.out:
        p.append("stdout %r lacks the version %s" % (r.out, version))
    elif not re.search(r"\d+\.\d+\.\d+", r.out):
        p.append("stdout %r holds no version number" % r.out[:200])
    rep.check("spy --version", p)

    rep.check("spy help", expect(spy("help"), 0, out=["dump"]))
    rep.check("spy help dump", expect(spy("help", "dump"), 0, out=["--pid"]))
    rep.check("spy dump --help", expect(spy("dump", "--help"), 0,
                                        out=["--pid"]))

    rep.check("spy dump --bogus", expect(spy("dump", "--bogus"), 2,
                                         err=["bogus", "spy dump --help"],
                                         one_err_line=True))
    rep.check("spy frobnicate", expect(spy("frobnicate"), 2,
                                       err=["frobnicate"]))
    rep.check("spy (no command)", expect(spy(), 2, err=["usage"]))
    rep.check("spy dump (no --pid)", expect(spy("dump"), 2))
    rep.check("spy dump --pid (no value)", expect(spy("dump", "--pid"), 2))
    rep.check("spy dump --pid abc", expect(spy("dump", "--pid", "abc"), 2,
                                           err=["abc"]))
    rep.check("spy record --help", expect(spy("record", "--help"), 0,
                                          out=["--pid", "--rate"]))
    rep.check("spy record (no --pid or program)", expect(spy("record"), 2))
    rep.check("spy top --help", expect(spy("top", "--help"), 0,
                                       out=["--pid", "--refresh", "--sort"]))

    # An argument too many: the same one line from every command (cmd_parse_options),
    # with the hint where a program could have been meant.
    for args, hint in ((("record", "--pid", "1"), "goes after '--'"), (("top", "--pid", "1"), "goes after '--'"),
                       (("dump", "--pid", "1"), ""), (("report", "a.txt"), ""), (("diff", "a", "b"), ""),
                       (("agent", "--push", "http://127.0.0.1:1"), "")):
        rep.check("spy %s: an argument too many" % args[0],
                  expect(spy(*(args + ("extra",))), 2,
                         err=["unexpected argument 'extra'", hint, "spy %s --help" % args[0]], one_err_line=True))

    pid = free_pid()
    # One ceiling for --rate (cli.md: at most 1,000,000): past it a usage
    # error, at it the options pass and the missing process is the error.
    for cmd in ("record", "top"):
        rep.check("spy %s --rate 1000001" % cmd,
                  expect(spy(cmd, "--rate", "1000001", "--pid", str(pid)), 2,
                         err=["at most 1000000"], one_err_line=True))
        rep.check("spy %s --rate 1000000" % cmd,
                  expect(spy(cmd, "--rate", "1000000", "--pid", str(pid)), 3,
                         err=[str(pid)]))
    rep.check("spy dump --pid <no such process>",
              expect(spy("dump", "--pid", str(pid)), 3, err=[str(pid)],
                     one_err_line=True))

    label = "spy dump --pid <sleep, not Python>"
    no_ptrace = harness.ptrace_problem()
    sleep = shutil.which("sleep")
    if no_ptrace:
        rep.skip(label, no_ptrace)
    elif not sleep:
        rep.skip(label, "no sleep program on PATH")
    else:
        victim = harness.spawn([sleep, "30"])
        try:
            rep.check(label, expect(spy("dump", "--pid", str(victim.pid)), 4,
                                    err=["python"], one_err_line=True)
                      + ([] if victim.poll() is None and
                         harness.proc_state(victim.pid) not in ("t", "T")
                         else ["sleep was left stopped or died: state %s"
                               % harness.proc_state(victim.pid)]))
        finally:
            harness.kill(victim)
    rep.finish()


if __name__ == "__main__":
    try:
        main()
    except (harness.HarnessError, OSError, subprocess.SubprocessError) as e:
        print("FAIL cli: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
