# Target for test_diff.py's gate check: four functions sharing the CPU in
# known proportions, each called for chunks of random length, that
# measures its own truth: each function's own CPU time by
# time.thread_time_ns() around every call, written as "func share%" lines
# to argv[4] when it exits (after argv[2] seconds, or on SIGTERM).
#
#   argv[1]  normal: work in the ratio a 40, b 30, c 20, d 10;
#            heavy:  c's work made a third heavier (20 -> 26.7), so c's
#            share grows from 20% to 25%: a planted 5-point regression.
#   argv[3]  the mean length of one call in ms: the longer the calls, the
#            longer the runs of consecutive samples in one function, and
#            the fewer independent samples a recording holds.
#
# It prints "ready" when its imports are done. Python 3 only (thread_time_ns).
import random
import signal
import sys
import time

WEIGHTS = {"a": 40.0, "b": 30.0, "c": 20.0, "d": 10.0}
spent = {k: 0 for k in WEIGHTS}


def spin(ns):
    end = time.thread_time_ns() + ns
    x = 0
    while time.thread_time_ns() < end:
        x += 1
    return x


def a(ns):
    return spin(ns)


def b(ns):
    return spin(ns)


def c(ns):
    return spin(ns)


def d(ns):
    return spin(ns)


def write_truth(path):
    tot = float(sum(spent.values())) or 1.0
    with open(path, "w") as f:
        for k in sorted(spent):
            f.write("%s %.3f\n" % (k, 100.0 * spent[k] / tot))


def main():
    mode, seconds, call_ms, truth = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    w = dict(WEIGHTS)
    if mode == "heavy":
        w["c"] = 80.0 / 3.0
    funcs = {"a": a, "b": b, "c": c, "d": d}
    names = sorted(w)
    total = sum(w.values())

    def stop(*_):
        write_truth(truth)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    rnd = random.Random()
    end = time.time() + seconds
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while time.time() < end:
        # Each function is called as often as the others, for a time in
        # proportion to its weight: random lengths, so no period can fall
        # into step with the sampler's.
        k = rnd.choice(names)
        ns = int(rnd.uniform(0.5, 1.5) * call_ms * 1e6 * 4 * w[k] / total)
        t0 = time.thread_time_ns()
        funcs[k](ns)
        spent[k] += time.thread_time_ns() - t0
    stop()


main()
