#!/usr/bin/env python3
"""Runnable is not idle: threads starved of CPU are sampled as busy.

targets/load.py runs N threads that derive keys with the GIL released, all
runnable all the time. Two ways to starve them (issue 28):
  crowd     100 of them on this machine's cores (2 in CI): each gets a
            sliver of a CPU. Default mode (no -i) must show all 100, and
            with -i their samples must be busy, not idle; the main
            thread, asleep, stays idle.
  cgroup    8 of them in a cgroup of the test's own capped at 20% of one
            CPU (cgroup v2 cpu.max "20000 100000", or v1's
            cpu.cfs_quota_us): all 8 shown, their samples busy. SKIP,
            saying why, where no cpu cgroup can be made.
Before spy told a thread waiting for a CPU from a sleeper (its state read
R twice in a row, see proc_task_ran), a starved thread that ran
under 5% of a tick was counted idle and left out.

Runs on 3.11, 3.12 and the newest interpreter of tools/pyroot's root
only (one of each): the rule is the kernel's, not the interpreter's, and
each run takes ~20 s of a loaded machine. Per interpreter, one
PASS/FAIL/SKIP line per scenario.
"""
import os
import re

import harness

TARGET = harness.target_path("load.py")
CROWD, CAPPED = 100, 8
BUSY = re.compile(r"busy_(\d+) \(")
# Of a busy thread's samples with -i, at most this share may be idle: a
# starved thread is busy all the time; a few ticks at the edges (the
# thread's first reading, a state read as it was being scheduled) may
# still say idle, and a thread that finished a digest may be asleep
# waiting for the GIL (the target's calls are long so that it seldom is).
MAX_IDLE = 0.2
MIN_MAIN_IDLE = 0.9
CGROUP_NAME = "spy-test-load-%d" % os.getpid()
seen_minors = set()


def spy(args, timeout=90):
    r = harness.run_spy(args, timeout=timeout, env=harness.spy_env(keep_log=False))
    if r.rc != 0 or r.timed_out:
        raise harness.SpyFailed(r.describe())
    return r


def folded(path):
    """{busy thread number: [busy samples, idle samples]}, and the main
    thread's [busy, idle], from a folded profile (-t -F)."""
    busy, main = {}, [0, 0]
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            stack, _, n = line.rstrip("\n").rpartition(" ")
            idle = stack.endswith(";idle")
            m = BUSY.search(stack)
            if m:
                busy.setdefault(int(m.group(1)), [0, 0])[idle] += int(n)
            elif '"MainThread"' in stack:
                main[idle] += int(n)
    return busy, main


def ticks(path):
    with open(path) as f:
        for line in f:
            if line.startswith("# samples: "):
                return int(line.split()[2])
    return 0


def check(label, n, plain, idle):
    probs = []
    got, _ = folded(plain)
    if len(got) != n:
        missing = sorted(set(range(n)) - set(got))
        probs.append("%s, no -i: %d of %d busy threads in the profile (missing %s)"
                     % (label, len(got), n, missing[:10]))
    # Every tick samples every busy thread, but for the few held up in a
    # GIL handover (asleep on its lock).
    b = sum(v[0] for v in got.values())
    if b < (1 - MAX_IDLE) * n * ticks(plain):
        probs.append("%s, no -i: %d busy threads' samples in %d ticks (want >= %d%% of %d a tick)"
                     % (label, b, ticks(plain), (1 - MAX_IDLE) * 100, n))
    got, main = folded(idle)
    b = sum(v[0] for v in got.values())
    i = sum(v[1] for v in got.values())
    print("  %s, -i: busy threads' samples %d busy, %d idle (%.1f%% idle)"
          % (label, b, i, 100.0 * i / max(1, b + i)))
    if b + i == 0 or i > MAX_IDLE * (b + i):
        probs.append("%s, -i: busy threads' samples %d busy, %d idle (at most %d%% idle)"
                     % (label, b, i, MAX_IDLE * 100))
    if sum(main) == 0 or main[1] < MIN_MAIN_IDLE * sum(main):
        probs.append("%s, -i: the sleeping main thread %d busy, %d idle (want >= %d%% idle)"
                     % (label, main[0], main[1], MIN_MAIN_IDLE * 100))
    return probs


def record_both(t, d, tag):
    plain = os.path.join(d, tag + "-plain.folded")
    idle = os.path.join(d, tag + "-idle.folded")
    spy(["record", "-p", str(t.pid), "-d", "4", "-t", "-F", "-q", "-f", "folded", "-o", plain])
    spy(["record", "-p", str(t.pid), "-d", "4", "-t", "-F", "-q", "-i", "-f", "folded", "-o", idle])
    return plain, idle


def cpu_cgroup():
    """(directory of a new cpu cgroup capped at 20% of a CPU, None) or
    (None, why not)."""
    v2 = "/sys/fs/cgroup"
    if os.path.exists(os.path.join(v2, "cgroup.controllers")):
        try:
            with open(os.path.join(v2, "cgroup.controllers")) as f:
                if "cpu" not in f.read().split():
                    return None, "cgroup v2 without the cpu controller"
            with open(os.path.join(v2, "cgroup.subtree_control")) as f:
                on = "cpu" in f.read().split()
            if not on:
                with open(os.path.join(v2, "cgroup.subtree_control"), "w") as f:
                    f.write("+cpu")
            g = os.path.join(v2, CGROUP_NAME)
            os.mkdir(g)
            with open(os.path.join(g, "cpu.max"), "w") as f:
                f.write("20000 100000")
            return g, None
        except OSError as e:
            return None, "cannot make a capped cgroup v2 under %s: %s" % (v2, e)
    v1 = "/sys/fs/cgroup/cpu"
    if not os.path.exists(os.path.join(v1, "cpu.cfs_quota_us")):
        return None, "no cgroup v2 at %s and no v1 cpu controller at %s" % (v2, v1)
    try:
        g = os.path.join(v1, CGROUP_NAME)
        os.mkdir(g)
        with open(os.path.join(g, "cpu.cfs_period_us"), "w") as f:
            f.write("100000")
        with open(os.path.join(g, "cpu.cfs_quota_us"), "w") as f:
            f.write("20000")
        return g, None
    except OSError as e:
        return None, "cannot make a capped v1 cpu cgroup under %s: %s" % (v1, e)


def remove_cgroup(g):
    # Its processes are ours and killed by now; the kernel needs a moment
    # to see them go.
    harness.wait_for(lambda: not _try_rmdir(g), 10, step=0.1)


def _try_rmdir(g):
    try:
        os.rmdir(g)
        return False
    except FileNotFoundError:
        return False
    except OSError:
        return True


def crowd(interp):
    d = harness.shared_dir("spy-load-")
    try:
        with harness.Target(interp, TARGET, [str(CROWD)], binds=[d]) as t:
            plain, idle = record_both(t, d, "crowd")
            return check("%d threads" % CROWD, CROWD, plain, idle)
    finally:
        harness.remove_shared_dir(interp, d)


def capped(interp):
    g, why = cpu_cgroup()
    if not g:
        raise harness.SkipInterp(why)
    d = harness.shared_dir("spy-load-")
    try:
        with harness.Target(interp, TARGET, [str(CAPPED)], binds=[d]) as t:
            with open(os.path.join(g, "cgroup.procs"), "w") as f:
                f.write(str(t.pid))
            plain, idle = record_both(t, d, "capped")
            return check("%d threads at 20%% of a CPU" % CAPPED, CAPPED, plain, idle)
    finally:
        harness.remove_shared_dir(interp, d)
        remove_cgroup(g)


def chosen(interp):
    """Whether this interpreter is one of those the test runs on."""
    newest = interp.root and interp.version[:2] >= (3, 15)
    if interp.minor not in ("3.11", "3.12") and not newest:
        return False
    key = (interp.minor, bool(interp.root))
    if key in seen_minors:
        return False
    seen_minors.add(key)
    return True


def run_one(interp, rep):
    if not chosen(interp):
        raise harness.SkipInterp("runs on 3.11, 3.12 and the root's newest only (one of each), "
                                 "to keep CI time: the rule is the kernel's")
    rep.run(interp.label + " cgroup", capped, interp)
    return crowd(interp)


def main():
    rep = harness.reporter("load")
    harness.for_each_interp(rep, lambda interp: run_one(interp, rep))


if __name__ == "__main__":
    main()
