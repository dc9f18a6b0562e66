# Target for test_record.py and bench/record-overhead. One script, several
# shapes, picked by argv[1]:
#
#   split    the main thread loops over units of identical cost: 7 in
#            work_a, 3 in work_b per round (in a random order), so a profile
#            must show them 70/30; a second
#            thread sleeps in sleeper (idle: absent without -i).
#   deep     the main thread recurses DEPTH (argv[2], default 200) levels in
#            recurse, then spins in deep_leaf; with THREADS (argv[3]) > 1,
#            that many threads do so, taking turns at the GIL.
#   churn    the main thread recurses DEPTH (argv[2], default 100) levels
#            in churn, spins UNITS (argv[3], default 20) units at the
#            bottom, unwinds and starts again: a deep stack that is torn
#            down and rebuilt every 1-2 ms (bench/sample-cost --target).
#   gil      two threads spin in spin_one and spin_two; only one holds the GIL
#            at a time. With N (argv[2]) > 2, N - 1 threads spin in spin_two
#            (named spinner-1 ...); without a GIL all N run at once.
#   hash     N (argv[2]) threads hash in hash_work with the GIL released
#            (in C all along but for a moment a call), the main thread spins
#            in spin_one: many threads running, one holding the GIL.
#   short    spins in short_work for 0.5 s (argv[2] seconds if given),
#            then exits 0.
#   parent   starts a child (this script, mode child), is ready once the
#            child says it runs, forks another 0.3 s later, then spins in
#            parent_work; the children spin in child_work. For -s: children
#            present and future.
#   bench    spins N (argv[2]) units in bench_unit at depth argv[3], prints
#            the wall time it took, and exits (bench/record-overhead).
#
# Once in place it prints one line, "ready {json}" with its pid. It ends on
# its own after LIFETIME seconds (SPY_TARGET_LIFETIME overrides, for long
# benchmarks), so it never outlives a crashed test long.
# Runs on every CPython from 2.7 on: no f-strings, explicit flushes.
import json
import os
import random
import sys
import threading
import time

LIFETIME = float(os.environ.get("SPY_TARGET_LIFETIME", "120"))
START = time.time()


def unit():
    # One unit of CPU work; identical for every caller, so the split of
    # samples between callers follows the number of calls.
    x = 0
    for i in range(2000):
        x += i * i
    return x


def work_a():
    unit()


def work_b():
    unit()


def sleeper():
    time.sleep(LIFETIME)


def ready(**extra):
    d = {"pid": os.getpid()}
    d.update(extra)
    sys.stdout.write("ready %s\n" % json.dumps(d))
    sys.stdout.flush()


def split():
    t = threading.Thread(target=sleeper, name="sleeper")
    t.daemon = True
    t.start()
    ready()
    # Shuffled each round, so a sampling rate that beats with the loop's
    # period cannot favour one function: the split is 70/30 in expectation.
    order = [work_a] * 7 + [work_b] * 3
    while time.time() - START < LIFETIME:
        random.shuffle(order)
        for f in order:
            f()


def deep_leaf(announce=True):
    if announce:
        ready()
    while time.time() - START < LIFETIME:
        unit()


def recurse(n, announce=True):
    if n <= 1:
        deep_leaf(announce)
    else:
        recurse(n - 1, announce)


def churn(n, units):
    if n > 1:
        return churn(n - 1, units)
    for _ in range(units):
        unit()


def churn_loop(depth, units):
    ready()
    while time.time() - START < LIFETIME:
        churn(depth, units)


def spin_one():
    while time.time() - START < LIFETIME:
        unit()


def spin_two():
    while time.time() - START < LIFETIME:
        unit()


def gil(n=2):
    for i in range(n - 1):
        t = threading.Thread(target=spin_two,
                             name="spinner" if n == 2 else "spinner-%d" % (i + 1))
        t.daemon = True
        t.start()
    ready()
    spin_one()


def hash_work():
    import hashlib
    data = b"x" * (1 << 20)
    while time.time() - START < LIFETIME:
        hashlib.sha1(data).digest()


def hash_threads(n):
    # The hashers start once ready is out: on 2.7's GIL, with no handoff,
    # a dozen of them retaking it after each hash kept the main thread
    # from starting the rest, and from printing, for over a minute.
    go = threading.Event()

    def hasher():
        go.wait()
        hash_work()

    for i in range(n):
        t = threading.Thread(target=hasher, name="hasher-%d" % (i + 1))
        t.daemon = True
        t.start()
    ready()
    go.set()
    spin_one()


def short_work():
    ready()
    end = time.time() + (float(sys.argv[2]) if len(sys.argv) > 2 else 0.5)
    while time.time() < end:
        unit()


def parent_work():
    while time.time() - START < LIFETIME:
        unit()


def child_work():
    # Ends with its parent, whoever kills that.
    ppid = os.getppid()
    while time.time() - START < LIFETIME and os.getppid() == ppid:
        unit()


def parent():
    import subprocess
    argv = [sys.executable, os.path.abspath(__file__), "child"]
    # Ready once the child says it runs child_work: a new interpreter can
    # take seconds to start (on a loaded machine, or an emulated one ten
    # times slower), and -s is to find it sampled in its work, not only
    # in its start-up. Its pipe is closed (readline returns) if it died.
    children = [subprocess.Popen(argv, stdout=subprocess.PIPE)]
    children[0].stdout.readline()
    ready()
    # Started after spy has attached, so -s must find a future child too.
    # Forked, not a new interpreter: it runs child_work at once, where a new
    # interpreter can take seconds to start on a loaded machine (3.13t's
    # start-up spins in sched_yield, some 1,800 times).
    time.sleep(0.3)
    forked = os.fork()
    if forked == 0:
        child_work()
        os._exit(0)
    try:
        parent_work()
    finally:
        for child in children:
            child.kill()
        os.kill(forked, 9)


def bench_depth(n, units):
    if n > 1:
        return bench_depth(n - 1, units)
    t0 = time.time()
    for _ in range(units):
        unit()
    return time.time() - t0


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "split"
    if mode == "split":
        split()
    elif mode == "deep":
        depth = int(sys.argv[2]) if len(sys.argv) > 2 else 200
        threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
        sys.setrecursionlimit(depth + 100)
        for _ in range(threads - 1):
            t = threading.Thread(target=recurse, args=(depth, False))
            t.daemon = True
            t.start()
        recurse(depth)
    elif mode == "churn":
        depth = int(sys.argv[2]) if len(sys.argv) > 2 else 100
        sys.setrecursionlimit(depth + 100)
        churn_loop(depth, int(sys.argv[3]) if len(sys.argv) > 3 else 20)
    elif mode == "gil":
        gil(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
    elif mode == "hash":
        hash_threads(int(sys.argv[2]))
    elif mode == "short":
        short_work()
    elif mode == "parent":
        parent()
    elif mode == "child":
        sys.stdout.write("running\n")
        sys.stdout.flush()
        child_work()
    elif mode == "bench":
        units = int(sys.argv[2])
        depth = int(sys.argv[3]) if len(sys.argv) > 3 else 1
        sys.setrecursionlimit(depth + 100)
        ready()
        sys.stdout.write("elapsed %.6f\n" % bench_depth(depth, units))
        sys.stdout.flush()
    else:
        sys.exit("unknown mode %r" % mode)
    os._exit(0)


if __name__ == "__main__":
    main()
