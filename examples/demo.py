"""A small program with one obvious hot spot, for trying spy on.

main() keeps asking is_member() whether a random number is in a list of a
million numbers; `x in items` scans the list from the front, so nearly all
the time goes to that one line. (A set would answer in constant time: that
is the fix a profile should point you to.)

    python3 examples/demo.py --seconds 30 &
    sudo build/spy dump --pid $!
"""

import argparse
import os
import random
import sys
import time

SIZE = 1000000


def is_member(items, x):
    return x in items  # the hot spot: a linear scan of SIZE elements


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0,
                    help="how long to run (default: 30)")
    args = ap.parse_args()

    items = list(range(SIZE))
    rng = random.Random(1)
    deadline = time.monotonic() + args.seconds
    print("demo: pid %d, searching a list of %d numbers for %g s"
          % (os.getpid(), SIZE, args.seconds), file=sys.stderr, flush=True)
    lookups = hits = 0
    while time.monotonic() < deadline:
        if is_member(items, rng.randrange(2 * SIZE)):
            hits += 1
        lookups += 1
    print("demo: %d lookups, %d hits" % (lookups, hits), file=sys.stderr)


if __name__ == "__main__":
    main()
