#!/usr/bin/env python3
"""A target gets nothing it could not read itself (issue 23).

files  -- per interpreter (the root's in a container): as root, a target
          that gives up root for nobody (targets/trust.py) runs code whose
          file name is a root-only 0600 file the test writes (a unique
          marker on every line), code whose file name is a link it planted
          to that file, and code from a file of its own. `record --pid`
          into SVG, -f lines, -f folded and -f json: the marker is in no
          output, on no stderr; the target's own file still shows its
          lines; the profile names the two withheld files (json metadata,
          the lines view), and not the readable one. While a recording
          runs, spy's helper (the child that opens files for the target)
          holds nobody's ids, no capability (effective, permitted,
          bounding, ambient), no_new_privs, and is not dumpable.
sudo   -- the same target launched by `record -- /usr/bin/python3 ...` as
          root with SUDO_UID/SUDO_GID of nobody (sudo's way): the same.
          Once, with the system's interpreter (the only one nobody can run).
caps   -- once, with the system's interpreter: a copy of spy given
          CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH by setcap (the agent's
          rights, without sudo), run as uid 1234, records the same target
          (nobody) as -f json to stdout: the marker is nowhere, the secret
          is named withheld (such a spy cannot take nobody's ids, so it
          reads none of the target's files, rather than reading them as
          itself with its capabilities: not even the target's own file's
          lines are there). Run as nobody itself, the same
          copy drops its capabilities for the opens: the target's own file
          shows its lines, the secret and the planted link are withheld.
race   -- once, with the system's interpreter, 20 times: targets/exec_race.py
          (nobody) has its own file and the root-only secret on its stack,
          and execs a set-uid-root copy of sleep the moment anyone opens
          its own file (inotify): `record -f json` must not have the
          secret's marker, however the opens and the exec interleave (the
          rights come from the credentials taken when spy opened the
          process, the less privileged of those and now). How many runs
          saw the exec before the recording ended is printed.
relay  -- once, with the system's interpreter, 20 times: targets/exec_relay.py,
          root, started without address randomisation (setarch -R), is
          recorded with --nonblocking (no exec is seen by a tracer); once
          opened it gives up root and execs exec_race.py (so the same
          interpreter sits at the same addresses, and spy goes on reading
          it), which execs the set-uid-root copy of sleep when its own file
          is opened (by spy, or by the test 0.5 s after the first exec:
          a spy that opens no such file does not set it off). The
          credentials spy took were root's, and are root's
          again when the secret is opened: the stacks read after the first
          exec must have their files withheld (an exec is seen after each
          tick). No run's output (json, html, lines, svg, speedscope in
          turn) has the secret's marker; how many runs reached the set-uid
          program, and how many json runs said files were withheld for the
          exec, is printed; neither may be 0.
gather -- per interpreter from 3.8: targets/selfgather.py awaits a gather
          whose 4096 _children are a task and the gather itself 4095 times.
          `dump --tasks` ends within 2 s (wall time, timeout 20 s), lists
          the tasks, and leaves the target running (not stopped).

names  -- per interpreter: targets/wide_names.py, 200 threads whose Thread
          objects carry 16,000 attributes each, _name last. `record -r 100
          -d 4` with SPY_LOG=debug keeps the names' lookup within its
          budget: the log's most remote reads in a tick is at most 1,024
          plus one step's 24 (the rate reached is printed, not judged: a
          loaded machine takes ticks too); then `record -d 4 -i -t` (every thread
          in the profile) names at least 100 of the 200 threads (the rest
          come over the next seconds: 2.7's tables of 32,768 slots per
          Thread take about a tick each).
          Then 20,000 fake entries in threading._active ahead of 4 real
          threads: the real threads are named all the same (-d 4: a pass
          over 20,000 entries takes about half a second of 1,024-read
          ticks).

files, sudo, caps, race and relay need root (SKIP otherwise): only root can read what its target cannot.
"""

import json
import os
import shutil
import subprocess
import sys
import uuid

import harness

TARGET = harness.target_path("trust.py")
NOBODY = 65534
HOT = (10, 14)   # the lines trust.py's functions sit on


def spy(args, timeout=60, env=None):
    return harness.run_spy(list(args), timeout=timeout, env=harness.spy_env(env, keep_log=False))


def make_files(d):
    """The root-only secret (its marker) and the target's own directory, in d."""
    marker = "SPYSECRET%s" % uuid.uuid4().hex
    os.chmod(d, 0o755)
    secret = os.path.join(d, "secret.txt")
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join("%s line %d\n" % (marker, i) for i in range(1, 31)))
    home = os.path.join(d, "home")
    os.mkdir(home, 0o755)
    os.chown(home, NOBODY, NOBODY)
    return marker, secret, home


def output_problems(what, r, path, marker):
    p = []
    if r.timed_out or r.rc != 0:
        return ["%s: %s" % (what, r.describe())]
    if marker in r.out or marker in r.err:
        p.append("%s: the secret's marker is on spy's stdout or stderr" % what)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        return p + ["%s: no output: %s" % (what, e)]
    if marker in text:
        n = text.count(marker)
        p.append("%s: the root-only file's content is in the output (%d times)" % (what, n))
    if "readable line %d" % HOT[0] not in text and "readable line %d" % (HOT[0] + 2) not in text:
        p.append("%s: the target's own file's lines are missing" % what)
    return p


def withheld_problems(what, text, secret, planted, mine):
    """The profile's withheld list names secret and planted, not mine."""
    p = []
    for name in (secret, planted):
        if json.dumps(name) not in text:
            p.append("%s: %s is not named as withheld" % (what, name))
    if json.dumps(mine) in text:
        p.append("%s: the readable %s is named as withheld" % (what, mine))
    return p


def record_formats(pid, d, marker, secret, home):
    p = []
    planted, mine = os.path.join(home, "planted.py"), os.path.join(home, "mine.py")
    for fmt, ext in ((None, "svg"), ("lines", "txt"), ("folded", "folded"), ("json", "json")):
        out = os.path.join(d, "out." + ext)
        args = ["record", "-q", "-r", "200", "-d", "1.5", "--pid", str(pid), "-o", out]
        r = spy(args + (["-f", fmt] if fmt else []))
        what = "record -f %s" % (fmt or "svg (default)")
        p += output_problems(what, r, out, marker)
        if p or fmt not in ("json", "lines"):
            continue
        with open(out, encoding="utf-8") as f:
            text = f.read()
        if fmt == "json":
            text = json.loads(text)["metadata"].get("withheld", "")
        elif "withheld: " not in text or "source withheld" not in text:
            p.append("%s: no withheld line: %r" % (what, text[:300]))
        p += withheld_problems(what, text, secret, planted, mine)
    return p


def status(pid):
    """{key: value} of /proc/PID/status, {} if gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            return dict(l.rstrip("\n").split(":\t", 1) for l in f if ":\t" in l)
    except OSError:
        return {}


def children(pid):
    out = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def helper_problems(pid, d):
    """Record pid for 3 s; its helper's credentials, looked at meanwhile."""
    sp = harness.start_spy(["record", "-q", "-d", "3", "--pid", str(pid), "-o", os.path.join(d, "h.folded")],
                           env=harness.spy_env(keep_log=False))
    try:
        kids = []
        deadline = harness.time.time() + 2.5
        while not kids and harness.time.time() < deadline:
            harness.time.sleep(0.2)
            kids = children(sp.pid)
        # Seen at once, it may still be setting itself up (a fork's copy of spy).
        harness.time.sleep(0.3)
        seen = [status(c) for c in kids]
        if not seen or not seen[0]:
            return ["no helper process under spy while it recorded"]
        st = seen[0]
        p = []
        want = {"Uid": "%d\t%d\t%d\t%d" % ((NOBODY,) * 4), "Gid": "%d\t%d\t%d\t%d" % ((NOBODY,) * 4),
                "CapEff": "0" * 16, "CapPrm": "0" * 16, "CapBnd": "0" * 16, "CapAmb": "0" * 16,
                "NoNewPrivs": "1"}
        for k, v in sorted(want.items()):
            if st.get(k, "").strip() != v:
                p.append("helper %s is %r, expected %r" % (k, st.get(k), v))
        if st.get("Groups", "").strip():
            p.append("helper keeps groups %r" % st.get("Groups"))
        return p
    finally:
        sp.communicate(timeout=30)
        harness.kill(sp)


def run_files(interp):
    if os.geteuid() != 0:
        raise harness.SkipInterp("needs root: only root reads more than its target")
    d = harness.shared_dir("spy-trust-")
    try:
        marker, secret, home = make_files(d)
        with harness.Target(interp, TARGET, args=[home, secret], binds=(d,)) as t:
            if t.info.get("uid") != NOBODY:
                return ["the target runs as uid %r, not nobody" % t.info.get("uid")]
            return record_formats(t.pid, d, marker, secret, home) + helper_problems(t.pid, d)
    finally:
        harness.remove_shared_dir(interp, d)


def root_and_system_python(rep, label, why_root):
    """Whether the once-only checks can run: as root, with the system's interpreter (the only
    one nobody can run); else a SKIP saying why."""
    if os.geteuid() != 0:
        rep.skip(label, "needs root: " + why_root)
        return False
    if not os.access("/usr/bin/python3", os.X_OK):
        rep.skip(label, "no /usr/bin/python3 that nobody can run")
        return False
    return True


def run_sudo(rep):
    label = "sudo launch (/usr/bin/python3)"
    if not root_and_system_python(rep, label, "spy drops privileges only as root"):
        return
    d = harness.shared_dir("spy-trust-")
    try:
        marker, secret, home = make_files(d)
        env = {"SUDO_UID": str(NOBODY), "SUDO_GID": str(NOBODY), "SUDO_USER": "nobody",
               "SPY_TARGET_LIFETIME": "2"}
        p = []
        for fmt, ext in (("json", "json"), ("lines", "txt")):
            out = os.path.join(d, "launch." + ext)
            r = spy(["record", "-q", "-r", "200", "-f", fmt, "-o", out, "--",
                     "/usr/bin/python3", TARGET, home, secret], env=env)
            p += output_problems("record -f %s -- (sudo)" % fmt, r, out, marker)
            if not p and fmt == "json":
                with open(out, encoding="utf-8") as f:
                    meta = json.load(f)["metadata"]
                p += withheld_problems("record -f json -- (sudo)", meta.get("withheld", ""), secret,
                                       os.path.join(home, "planted.py"), os.path.join(home, "mine.py"))
        rep.check(label, p)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_caps(rep):
    label = "setcap'd spy, not root (/usr/bin/python3)"
    if not root_and_system_python(rep, label, "to give a copy of spy capabilities and run it as another user"):
        return
    setcap = shutil.which("setcap") or "/usr/sbin/setcap"
    if not os.access(setcap, os.X_OK):
        rep.skip(label, "no setcap (libcap2-bin)")
        return
    d = harness.shared_dir("spy-trust-")
    target = None
    try:
        marker, secret, home = make_files(d)
        copy = os.path.join(d, "spy-caps")
        shutil.copy(harness.spy_path(), copy)
        os.chmod(copy, 0o755)
        r = subprocess.run([setcap, "cap_sys_ptrace,cap_dac_read_search+ep", copy], capture_output=True, text=True)
        if r.returncode != 0:
            rep.skip(label, "setcap failed (a file system without security xattrs?): %s" % r.stderr.strip())
            return
        target = harness.spawn(["/usr/bin/python3", TARGET, home, secret], stdout=subprocess.PIPE)
        line = target.stdout.readline().decode()
        if not line.startswith("ready "):
            rep.fail(label, "the target did not start: %r" % line)
            return
        planted, mine = os.path.join(home, "planted.py"), os.path.join(home, "mine.py")
        p = []
        for uid, own in ((1234, False), (NOBODY, True)):
            def as_user(uid=uid):
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            env = harness.spy_env(keep_log=False)
            r = subprocess.run([copy, "record", "-q", "-r", "200", "-d", "1.5", "--pid", str(target.pid),
                                "-f", "json", "-o", "-"], capture_output=True, env=env, preexec_fn=as_user,
                               timeout=60, cwd="/")
            out, err = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
            what = "uid %d" % uid
            if r.returncode != 0:
                p.append("%s: exit %d: %s" % (what, r.returncode, err.strip()[-300:]))
                continue
            if marker in out or marker in err:
                p.append("%s: the root-only file's content is in the output (%d times)"
                         % (what, out.count(marker) + err.count(marker)))
                continue
            withheld = json.loads(out)["metadata"].get("withheld", "")
            seen_own = any("readable line %d" % n in out for n in (HOT[0], HOT[0] + 2))
            if not own and seen_own:
                p.append("%s: a file of the target's was read with spy's own rights" % what)
            if own and (json.dumps(secret) not in withheld or json.dumps(planted) not in withheld):
                p.append("%s: the secret and the link are not both named withheld: %r" % (what, withheld))
            if own and (not seen_own or json.dumps(mine) in withheld):
                p.append("%s: the target's own file was not read: withheld %r" % (what, withheld))
        rep.check(label, p)
    finally:
        if target:
            harness.kill(target)
        shutil.rmtree(d, ignore_errors=True)


RACE_RUNS = 20


def run_race(rep):
    label = "exec race x%d (/usr/bin/python3)" % RACE_RUNS
    if not root_and_system_python(rep, label, "a set-uid-root program of the test's own"):
        return
    d = harness.shared_dir("spy-trust-")
    p = []
    raced = 0
    try:
        marker, secret, home = make_files(d)
        setuid = os.path.join(d, "rootsleep")
        shutil.copy(shutil.which("sleep"), setuid)
        os.chmod(setuid, 0o4755)
        for run in range(RACE_RUNS):
            target = harness.spawn(["/usr/bin/python3", harness.target_path("exec_race.py"), home, secret, setuid],
                                   stdout=subprocess.PIPE)
            try:
                line = target.stdout.readline().decode()
                if not line.startswith("ready "):
                    p.append("run %d: the target did not start: %r" % (run, line))
                    break
                out = os.path.join(d, "race.json")
                r = spy(["record", "-q", "-r", "200", "-d", "1", "--pid", str(target.pid), "-f", "json", "-o", out])
                try:
                    exe = os.readlink("/proc/%d/exe" % target.pid)
                except OSError:
                    exe = ""
                raced += exe == setuid
                text = r.out + r.err
                if os.path.exists(out):
                    with open(out, encoding="utf-8", errors="replace") as f:
                        text += f.read()
                    os.unlink(out)
                if marker in text:
                    p.append("run %d: the root-only file's content is in the output (%d times)"
                             % (run, text.count(marker)))
            finally:
                harness.kill(target)
        sys.stdout.write("(race: %d of %d runs exec'd the set-uid program during the recording)\n"
                         % (raced, RACE_RUNS))
        if not p and raced == 0:
            p.append("no run exec'd: spy never opened the target's own file, the race was not run")
        rep.check(label, p)
    finally:
        shutil.rmtree(d, ignore_errors=True)


RELAY_FORMATS = ("json", "html", "lines", "svg", "speedscope")


def run_relay(rep):
    label = "exec relay race --nonblocking x%d (/usr/bin/python3)" % RACE_RUNS
    if not root_and_system_python(rep, label, "a root target and a set-uid-root program of the test's own"):
        return
    setarch = shutil.which("setarch")
    if not setarch:
        rep.skip(label, "no setarch (util-linux) to start the target without address randomisation")
        return
    d = harness.shared_dir("spy-trust-")
    p = []
    seen = raced = 0
    try:
        marker, secret, home = make_files(d)
        setuid = os.path.join(d, "rootsleep")
        shutil.copy(shutil.which("sleep"), setuid)
        os.chmod(setuid, 0o4755)
        for run in range(RACE_RUNS):
            fmt = RELAY_FORMATS[run % len(RELAY_FORMATS)]
            target = harness.spawn([setarch, "-R", "/usr/bin/python3", harness.target_path("exec_relay.py"),
                                    home, secret, setuid], stdout=subprocess.PIPE)
            sp = None
            try:
                line = target.stdout.readline().decode()
                if not line.startswith("ready "):
                    p.append("run %d: the target did not start: %r" % (run, line))
                    break
                out = os.path.join(d, "relay." + fmt)
                sp = harness.start_spy(["record", "-q", "--nonblocking", "-r", "200", "-d", "1.5", "--pid",
                                        str(target.pid), "-f", fmt, "-o", out], env=harness.spy_env(keep_log=False))
                # Opened while root; then nobody's exec_race.py, then set-uid root.
                harness.time.sleep(0.3)
                target.send_signal(harness.signal.SIGUSR1)
                # A spy that opens no file of the new image's does not set off
                # the set-uid exec: the test does, while spy still records.
                harness.time.sleep(0.5)
                try:
                    os.close(os.open(os.path.join(home, "mine.py"), os.O_RDONLY))
                except OSError:
                    pass
                o, e = sp.communicate(timeout=60)
                try:
                    exe = os.readlink("/proc/%d/exe" % target.pid)
                except OSError:
                    exe = ""
                raced += exe == setuid
                text = o.decode("utf-8", "replace") + e.decode("utf-8", "replace")
                if sp.returncode != 0:
                    p.append("run %d: record -f %s: exit %d: %s" % (run, fmt, sp.returncode, text.strip()[-300:]))
                if os.path.exists(out):
                    with open(out, encoding="utf-8", errors="replace") as f:
                        body = f.read()
                    text += body
                    os.unlink(out)
                    if fmt == "json":
                        seen += "named after it exec'd" in json.loads(body)["metadata"].get("withheld", "")
                if marker in text:
                    p.append("run %d: -f %s: the root-only file's content is in the output (%d times)"
                             % (run, fmt, text.count(marker)))
            finally:
                if sp:
                    harness.kill(sp)
                harness.kill(target)
        sys.stdout.write("(relay: %d of %d runs reached the set-uid program; %d of %d json runs said files "
                         "were withheld for the exec)\n" % (raced, RACE_RUNS, seen, RACE_RUNS // len(RELAY_FORMATS)))
        if not p and (raced == 0 or seen == 0):
            p.append("the race was not run: no run reached the set-uid program, or spy read no stack of "
                     "the exec'd image")
        rep.check(label, p)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_gather(interp):
    if interp.version < (3, 8):
        raise harness.SkipInterp("dump --tasks reads asyncio from 3.8 on")
    with harness.Target(interp, harness.target_path("selfgather.py"), args=["4096"]) as t:
        t0 = harness.time.time()
        r = spy(["dump", "--tasks", "--pid", str(t.pid)], timeout=20)
        took = harness.time.time() - t0
        p = []
        if r.timed_out:
            p.append("dump --tasks still running after 20 s (killed)")
        elif r.rc != 0:
            p.append("dump --tasks: %s" % r.describe())
        elif "sleeper" not in r.out:
            p.append("dump --tasks lists no sleeper task: %r" % r.out[:300])
        if took > 2.0:
            p.append("dump --tasks took %.2f s (limit 2 s)" % took)
        harness.time.sleep(0.2)
        st = harness.proc_state(t.pid)
        if st in ("t", "T"):
            p.append("target left stopped (state %s)" % st)
        return p


def folded_meta(path):
    meta = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for l in f:
            if not l.startswith("# "):
                break
            k, _, v = l[2:].rstrip("\n").partition(": ")
            meta[k] = v
    return meta


# The names' lookup in a sampler's tick: its budget of remote reads
# (PYRT_NAMES_TICK_READS), and how far one step of a pass may go past it
# (as test-pystate-names allows).
NAMES_TICK_READS = 1024
NAMES_STEP_READS = 24
NAMES_READS = harness.re.compile(r"thread names: at most (\d+) remote reads in a tick")


def run_names(interp):
    with harness.Target(interp, harness.target_path("wide_names.py"), args=["200", "16000"],
                        ready_timeout=120) as t:
        d = harness.shared_dir("spy-trust-")
        try:
            out = os.path.join(d, "names.folded")
            r = spy(["record", "-q", "-r", "100", "-d", "4", "--pid", str(t.pid), "-o", out],
                    env={"SPY_LOG": "debug"})
            if r.rc != 0 or r.timed_out:
                return ["record: %s" % r.describe()]
            meta = folded_meta(out)
            rate = int(meta["samples"]) / float(meta["duration-s"])
            log, m = r.err, NAMES_READS.search(r.err)
            # The names, with every thread in the profile (-i: idle ones too).
            r = spy(["record", "-q", "-d", "4", "-i", "-t", "--pid", str(t.pid), "-o", out])
            if r.rc != 0 or r.timed_out:
                return ["record -i -t: %s" % r.describe()]
            with open(out, encoding="utf-8", errors="replace") as f:
                named = set(harness.re.findall(r"wide-\d+", f.read()))
            p = []
            if not m:
                p.append("no count of the names' reads in the debug log: %r" % log[-600:])
            elif int(m.group(1)) > NAMES_TICK_READS + NAMES_STEP_READS:
                p.append("the names' lookup made %s remote reads in a tick, more than %d + %d"
                         % (m.group(1), NAMES_TICK_READS, NAMES_STEP_READS))
            if len(named) < 100:
                p.append("%d of the 200 threads named" % len(named))
            sys.stdout.write("(%s names: at most %s reads a tick, %.1f Hz, %d of 200 threads named)\n"
                             % (interp.label, m.group(1) if m else "?", rate, len(named)))
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return p + long_active_problems(interp)


def long_active_problems(interp):
    """Real threads behind 20,000 fake entries of threading._active are named."""
    with harness.Target(interp, harness.target_path("wide_names.py"), args=["4", "0", "20000"]) as t:
        d = harness.shared_dir("spy-trust-")
        try:
            out = os.path.join(d, "long.folded")
            r = spy(["record", "-q", "-d", "4", "-i", "-t", "--pid", str(t.pid), "-o", out])
            if r.rc != 0 or r.timed_out:
                return ["record (long _active): %s" % r.describe()]
            with open(out, encoding="utf-8", errors="replace") as f:
                named = set(harness.re.findall(r"wide-\d+", f.read()))
            if len(named) != 4:
                return ["behind 20,000 entries of threading._active, %d of 4 threads named" % len(named)]
            return []
        finally:
            shutil.rmtree(d, ignore_errors=True)


def main():
    rep = harness.reporter("trust")
    what = sys.argv[1:] or ["files", "sudo", "caps", "race", "relay", "gather", "names"]
    if "sudo" in what:
        run_sudo(rep)
    if "caps" in what:
        run_caps(rep)
    if "race" in what:
        run_race(rep)
    if "relay" in what:
        run_relay(rep)
    runs = []
    if "files" in what:
        runs.append(("files", run_files))
    if "gather" in what:
        runs.append(("gather", run_gather))
    if "names" in what:
        runs.append(("names", run_names))

    def run_one(interp):
        p = []
        for name, fn in runs:
            try:
                p += ["%s: %s" % (name, x) for x in fn(interp)]
            except harness.SkipInterp as e:
                if len(runs) == 1:
                    raise
                sys.stdout.write("(%s %s skipped: %s)\n" % (interp.label, name, e))
        return p
    harness.for_each_interp(rep, run_one,
                            expect=("2.7", "3.8", "3.11", "3.12", "3.13", "3.14", "3.15"))


if __name__ == "__main__":
    try:
        main()
    except (harness.HarnessError, OSError, subprocess.SubprocessError) as e:
        print("FAIL trust: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
