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
descriptors -- targets/crowd.py with 100 threads, spy under `ulimit -n 64`
           (soft only, then soft and hard): the busy thread is sampled, or
           the failures are counted -- never silently taken as idle.
dstate  -- targets/crowd.py with a thread in uninterruptible sleep (a
           CLONE_VFORK parent whose child sleeps): 100 Hz for 3 s must give
           about 300 samples, not one per 250 ms pause timeout.
sudo    -- as root with SUDO_UID/SUDO_GID set, `record -- python3 -c ...`
           runs the program as that user and group (no root groups), and
           a malformed SUDO_UID runs nothing (SKIP unless root).
launch  -- a launched program in which no interpreter appears is not left
           running when spy gives up.
exec    -- targets/execer.py execs a new interpreter mid-recording: spy
           stops there and says so; the new program runs on.
locals  -- `dump --locals` of targets/wide.py (4 threads x 900 frames x
           300 locals) peaks under 200 MiB and marks what it left out.
ctrlz   -- an interactive bash on a pty (job control on) runs `spy record
           -- python targets/nested.py`; Ctrl-Z stops the job, `fg` resumes
           it: spy and the target both run again (the target is not left
           stopped), spy samples on, and when the target is ended the
           profile is written and nothing is left stopped or traced. (A
           SIGTSTP the target reports only after the SIGCONT, spy being
           stopped in between, is passed on and does not stop it: the
           kernel cancels a dequeued stop signal on SIGCONT.)
"""

import fcntl
import os
import resource
import select
import shlex
import sys
import tempfile
import termios

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
        rc, _, err = run_raw(["record", "--rate", "1e-300", "-d", "0.5", "-o", out, "--"]
                             + interp.command(["-c", "import time; time.sleep(1)"]))
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


CROWD = harness.target_path("crowd.py")
SUMMARY = harness.re.compile(rb"spy: (\d+) samples in ([\d.]+) s .*errors: (\d+)")


def record_summary(args, limit=None):
    """Run spy record; (rc, samples, seconds, errors, stderr, folded text)."""
    d = tempfile.mkdtemp(prefix="spy-hostile-")
    out = os.path.join(d, "out.folded")
    try:
        def lower():
            if limit:
                resource.setrlimit(resource.RLIMIT_NOFILE, limit)
        p = harness.spawn([harness.spy_path(), "record", "-o", out] + args,
                          stdout=harness.subprocess.PIPE, stderr=harness.subprocess.PIPE,
                          env=harness.spy_env(keep_log=False), preexec_fn=lower)
        try:
            _, err = p.communicate(timeout=60)
        except harness.subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        harness.kill(p)
        text = open(out, "rb").read() if os.path.exists(out) else b""
        m = SUMMARY.search(err)
        if not m:
            return p.returncode, 0, 0.0, 0, err, text
        return p.returncode, int(m.group(1)), float(m.group(2)), int(m.group(3)), err, text
    finally:
        harness.shutil.rmtree(d)


def trial_descriptors(interp):
    """A 100-thread target with `ulimit -n 64`: either the busy thread is
    sampled (spy raised its soft limit, or had descriptors enough), or the
    failures are counted as errors -- never a silent "idle"."""
    p = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with harness.Target(interp, CROWD, ["threads", "100"]) as t:
        for limit, what in (((64, hard), "soft 64"), ((64, 64), "soft and hard 64")):
            rc, n, secs, errors, err, text = record_summary(["--pid", str(t.pid), "-d", "2"], limit)
            spun = sum(int(l.rsplit(b" ", 1)[1]) for l in text.splitlines()
                       if b"main_hash" in l and not l.startswith(b"#"))
            if rc != 0:
                p.append("%s: exit %s: %r" % (what, rc, err[-300:]))
            elif spun < 0.5 * n and errors == 0:
                p.append("%s: main_hash in %d of %d samples, and 0 errors" % (what, spun, n))
            if what == "soft 64" and hard > 256 and spun < 0.5 * n:
                p.append("%s: soft limit not raised to the hard one (%d): main_hash in %d of %d samples"
                         % (what, hard, spun, n))
    return p


def trial_dstate(interp):
    """A thread in uninterruptible sleep (D) must not stall the target: after
    the first pause gives up on it, later pauses do not wait for it."""
    p = []
    with harness.Target(interp, CROWD, ["dstate"]) as t:
        states = harness.task_states(t.pid)
        if "D" not in states.values():
            raise harness.SkipInterp("no thread in D state (clone with CLONE_VFORK refused?): %r" % (states,))
        start = harness.time.time()
        rc, n, secs, errors, err, text = record_summary(["--pid", str(t.pid), "-d", "3"])
        took = harness.time.time() - start
        if rc != 0:
            p.append("exit %s: %r" % (rc, err[-300:]))
        # 100 Hz for 3 s is 300; waiting 250 ms per pause gives 12. A loaded
        # machine misses ticks, hence the margin.
        if n < 60:
            p.append("%d samples in %.2f s (expected about 300): pauses wait for the D thread" % (n, secs))
        if took > 3 + 2.5:
            p.append("spy took %.1f s for -d 3 (detach waits for the D thread)" % took)
        if harness.proc_state(t.pid) in ("t", "T"):
            p.append("target left stopped")
    return p


def trial_sudo(interp):
    """`sudo spy record -- prog` must not run prog as root: spy (root, with
    SUDO_UID/SUDO_GID set as sudo sets them) launches a program that reports
    its credentials; they must be the sudo user's, supplementary groups
    included, while spy itself keeps root to trace it. A drop that cannot
    be done (a bad SUDO_UID) runs nothing."""
    if os.geteuid() != 0:
        raise harness.SkipInterp("needs root: spy drops privileges only as root")
    # The sudo user must be able to run the interpreter: the system one.
    py = next((p for p in ("/usr/bin/python3",) if os.access(p, os.X_OK)), None)
    if not py:
        raise harness.SkipInterp("no /usr/bin/python3 that another user can run")
    uid = gid = 65534
    p = []
    d = tempfile.mkdtemp(prefix="spy-hostile-")
    os.chmod(d, 0o755)
    try:
        out = os.path.join(d, "out.folded")
        code = ("import os, sys, time; time.sleep(0.5); "
                "sys.stdout.write('creds %d %d %d %d %r\\n' % (os.getuid(), os.geteuid(), "
                "os.getgid(), os.getegid(), sorted(os.getgroups())))")
        env = harness.spy_env({"SUDO_UID": str(uid), "SUDO_GID": str(gid), "SUDO_USER": "nobody"},
                              keep_log=False)
        r = harness.run_spy(["record", "-o", out, "--", py, "-c", code], env=env, timeout=60)
        line = [l for l in r.out.splitlines() if l.startswith("creds ")]
        if r.rc != 0:
            p.append("record exited %s: %s" % (r.rc, " | ".join(r.err_lines()[:3])))
        if not line:
            p.append("the program printed no credentials: %r" % r.out[-300:])
        else:
            got = line[0].split(" ", 5)[1:]
            if got[:4] != [str(uid), str(uid), str(gid), str(gid)]:
                p.append("the program ran as uid/euid/gid/egid %s, expected %d/%d/%d/%d"
                         % ("/".join(got[:4]), uid, uid, gid, gid))
            if "0," in got[4] or "[0]" in got[4]:
                p.append("the program kept root's supplementary group 0: %s" % got[4])
        if not os.path.exists(out):
            p.append("no recording written (spy could not trace the dropped program?)")
        env["SUDO_UID"] = "12x"
        marker = os.path.join(d, "ran")
        r = harness.run_spy(["record", "-o", out, "--", py, "-c", "open(%r, 'w')" % marker],
                            env=env, timeout=60)
        if r.rc == 0 or os.path.exists(marker):
            p.append("SUDO_UID=12x: exit %s, program ran: %s" % (r.rc, os.path.exists(marker)))
    finally:
        harness.shutil.rmtree(d)
    return p


def trial_launch(interp):
    """A launch that fails (no interpreter appears within 5 s) leaves no
    program running unsupervised."""
    p = []
    d = tempfile.mkdtemp(prefix="spy-hostile-")
    try:
        pidfile = os.path.join(d, "pid")
        r = harness.run_spy(["record", "-o", os.path.join(d, "o.folded"), "--", "/bin/sh", "-c",
                             "echo $$ > %s; exec sleep 60 >/dev/null 2>&1" % pidfile],
                            env=harness.spy_env(keep_log=False), timeout=60)
        if r.rc != 4:
            p.append("exit %s, expected 4: %s" % (r.rc, " | ".join(r.err_lines()[:2])))
        try:
            pid = int(open(pidfile).read())
        except (OSError, ValueError):
            return p + ["the program never ran"]
        if harness.proc_state(pid) not in (None, "Z", "X"):
            p.append("the program (process %d) is still running after spy gave up" % pid)
            os.kill(pid, harness.signal.SIGKILL)
    finally:
        harness.shutil.rmtree(d)
    return p


def trial_locals(interp):
    """`dump --locals` of 4 threads x 900 frames x 300 locals stays within
    its memory budget (32 MiB of values) and says what it left out."""
    p = []
    with harness.Target(interp, harness.target_path("wide.py"), ["4", "900"], ready_timeout=120) as t:
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        rc, out, err = run_raw(["dump", "--locals", "--pid", str(t.pid)], timeout=120)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if rc != 0:
            p.append("dump exited %s: %r" % (rc, err[-300:]))
        # ru_maxrss is the largest child so far: only a new maximum is spy's.
        if peak > before and peak > 200 * 1024:
            p.append("spy peaked at %d MiB (budget 32 MiB)" % (peak // 1024))
        if b"locals left out" not in out:
            p.append("no frame says its locals were left out")
        if b"local v1 = 1" not in out:
            p.append("no locals read at all")
    return p


def trial_exec(interp):
    """A target that execs: spy stops sampling at the exec and says so,
    rather than walk the new program with the old one's addresses (which
    dropped every later sample, silently), and leaves it running."""
    p = []
    with harness.Target(interp, harness.target_path("execer.py")) as t:
        rc, n, secs, errors, err, text = record_summary(["--pid", str(t.pid), "-d", "4"])
        if rc != 0:
            p.append("exit %s: %r" % (rc, err[-300:]))
        if b"replaced its program (exec)" not in err:
            p.append("the exec is not reported: %r" % err[-300:])
        if b"before_exec" not in text:
            p.append("nothing recorded before the exec")
        # Stack lines only: the kept source lines around before_exec's
        # call quote the execv line, which names after_exec.
        stacks = [l for l in text.splitlines() if not l.startswith(b"#")]
        if any(b"after_exec" in l for l in stacks):
            p.append("the new program was sampled with the old addresses")
        if harness.proc_state(t.pid) in ("t", "T", None):
            p.append("the target is not running after spy: %s" % harness.proc_state(t.pid))
    return p


class Pty(object):
    """An interactive bash on a new pty, its session leader (job control on)."""

    def __init__(self, env):
        self.master, slave = os.openpty()

        def ctty():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.bash = harness.spawn(["bash", "--norc", "--noprofile", "-i"], stdin=slave,
                                  stdout=slave, stderr=slave, env=env, start_new_session=True,
                                  preexec_fn=ctty)
        os.close(slave)
        self.text = b""

    def drain(self, secs=0.0):
        """Read what the pty has (a full pty would block the programs on it)."""
        end = harness.time.time() + secs
        while True:
            r, _, _ = select.select([self.master], [], [], max(0.0, end - harness.time.time()))
            if not r:
                return
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.text += chunk

    def type(self, data):
        os.write(self.master, data)

    def close(self):
        harness.kill(self.bash)
        os.close(self.master)


def trial_ctrlz(interp):
    """Ctrl-Z and `fg` of `spy record -- python target` on a terminal."""
    if not harness.shutil.which("bash"):
        raise harness.SkipInterp("no bash for an interactive shell")
    p = []
    d = tempfile.mkdtemp(prefix="spy-hostile-")
    env = harness.spy_env({"PS1": "$ ", "HISTFILE": "/dev/null", "TERM": "dumb"}, keep_log=False)
    sh = Pty(env)
    target = None
    try:
        out = os.path.join(d, "out.folded")
        cmd = [harness.spy_path(), "record", "-r", "200", "-o", out, "--"] + \
            interp.command([harness.target_path("nested.py")])
        sh.type((" ".join(shlex.quote(a) for a in cmd) + "\n").encode())

        def started():
            sh.drain()
            spies = harness.children(sh.bash.pid)
            kids = harness.children(spies[0]) if spies else []
            return (spies[0], kids[0]) if kids and b"ready" in sh.text else None
        pids = harness.wait_for(started, 60)
        if not pids:
            return ["spy or the target never started; the terminal says %r" % sh.text[-300:]]
        spy, target = pids
        sh.drain(1.0)

        sh.type(b"\x1a")
        if not harness.wait_for(lambda: sh.drain() or harness.proc_state(spy) == "T", 5):
            p.append("Ctrl-Z did not stop spy (state %s)" % harness.proc_state(spy))
        sh.drain(1.0)
        sh.type(b"fg\n")

        # Then every task must run again. A sample holds the target stopped
        # for a moment, and on a loaded machine a sleeping thread can show
        # 't' for a good part of a second: stuck is never seen running in 3 s.
        sh.drain(1.0)
        if harness.proc_state(spy) in ("T", "t", None):
            p.append("after fg spy is %s" % harness.proc_state(spy))
        stuck = None
        for _ in range(100):
            now = {t for t, s in harness.task_states(target).items() if s in ("T", "t")}
            stuck = now if stuck is None else stuck & now
            sh.drain(0.03)
        if stuck:
            p.append("after fg, target tasks left stopped: %s" % harness.task_states(target))
            return p
        t0 = harness.cpu_ticks(target)
        sh.drain(1.0)
        if harness.cpu_ticks(target) <= t0:
            p.append("after fg the target uses no CPU: %s" % harness.task_states(target))

        os.kill(target, harness.signal.SIGTERM)
        if not harness.wait_for(lambda: sh.drain() or harness.proc_state(spy) in (None, "Z"), 20):
            p.append("spy still running 20 s after its target ended: %s" % sh.text[-300:])
        text = open(out, "rb").read() if os.path.exists(out) else b""
        if b"inner" not in text:
            p.append("no profile of the target written (%d bytes); terminal: %r"
                     % (len(text), sh.text[-300:]))
        m = SUMMARY.search(sh.text)
        if m and float(m.group(2)) > 0 and int(m.group(1)) < 200 * 1.5 * 0.5:
            p.append("too few samples (%s in %s s): spy did not sample on after fg"
                     % (m.group(1), m.group(2)))
        elif not m:
            p.append("no summary line on the terminal: %r" % sh.text[-300:])
        left = harness.proc_state(target)
        if left in ("t", "T"):
            p.append("target left stopped (%s)" % left)
        traced = {t: tr for t, tr in harness.tracers(target).items() if tr}
        if traced and left not in (None, "Z"):
            p.append("target still traced: %s" % traced)
    finally:
        if target and harness.proc_state(target) not in (None, "Z", "X"):
            os.kill(target, harness.signal.SIGKILL)
        sh.close()
        harness.shutil.rmtree(d)
    return p


TRIALS = [("names", trial_names), ("numbers", trial_numbers), ("sighup", trial_sighup),
          ("descriptors", trial_descriptors), ("dstate", trial_dstate), ("sudo", trial_sudo),
          ("launch", trial_launch), ("locals", trial_locals),
          ("exec", trial_exec), ("ctrlz", trial_ctrlz)]


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
        rep.run("%s (%s)" % (name, interp.label), fn, interp)
    rep.finish()


if __name__ == "__main__":
    main()
