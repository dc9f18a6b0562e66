# Target for test_diff.py: one program in two versions, and one that gets
# slower the longer it runs. argv[1] picks the shape, argv[2] the seconds
# to run before it exits 0 (a cap: the test stops it sooner). It prints
# "ready" when its imports are done and the work begins, so that a test
# attaching then (spy record --pid) records no start-up: how long imports
# take varies with the machine's load, and would add noise to the shares.
#
#   normal   each round calls parse and render once; both do the same
#            amount of identical work, so each has about half the samples.
#   slow     the same program with a slowdown injected in render: it does
#            three times the work, so render's share grows from ~50% to ~75%.
#   grow     each round appends to a list in remember and scans the whole
#            list in lookup, plus a fixed amount of work in steady: lookup's
#            cost grows with the number of rounds, so its share of each
#            time window rises steadily while steady's falls.
#
# The work is written out in each function (no shared helper) so that each
# function's self share is its own. Runs on 2.7 and 3.x alike.
import random
import sys
import time

try:
    # 2.7's range builds a list: its allocations made the shares of two
    # recordings of this program differ by up to 7 points; xrange, like
    # 3.x's range, allocates nothing.
    range = xrange  # noqa: F821
except NameError:
    pass

# Iterations of one parse call (~1 ms on 3.11). Measured on a loaded
# 2-core machine at 1000 Hz: with calls of ~5 us two recordings of this
# same program differed by up to 19 points in a function's share; with
# ~1 ms calls, by 3 at most.
ROUND = 20000
# Iterations of steady in grow: light, so that lookup's growing scan takes
# over gradually within the first second or two.
STEADY = 1600


def parse(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def render(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def steady():
    x = 0
    for i in range(STEADY):
        x += i * i
    return x


def remember(seen, i):
    seen.append(i)


def lookup(seen):
    # A linear scan on purpose: the per-iteration cost that grows over time.
    hits = 0
    for v in seen:
        if v == -1:
            hits += 1
    return hits


def main():
    mode = sys.argv[1]
    end = time.time() + float(sys.argv[2])
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    if mode == "grow":
        seen = []
        i = 0
        while time.time() < end:
            steady()
            remember(seen, i)
            lookup(seen)
            i += 1
        return
    factor = 3 if mode == "slow" else 1
    rnd = random.Random(8)
    while time.time() < end:
        # Rounds of random length in random order: a fixed-length loop can
        # fall into step with the sampling period and bias the shares.
        n = rnd.randint(ROUND // 2, 3 * ROUND // 2)
        if rnd.random() < 0.5:
            parse(n)
            render(n * factor)
        else:
            render(n * factor)
            parse(n)


main()
