# Target for test_gc.py: the garbage collector running in a known function.
#
# Builds a large heap of live containers (HEAP lists), then loops:
#   collect_here   calls gc.collect(), a full collection that walks the
#                  whole heap (tens of milliseconds);
#   spin           a Python loop as long, allocating no container, so no
#                  automatic collection starts anywhere else.
# Prints "ready {json}" once the heap is built; ends by itself after
# LIFETIME seconds (SPY_TARGET_LIFETIME overrides). Runs on 2.7 and 3.x.
import gc
import json
import os
import sys
import time

LIFETIME = float(os.environ.get("SPY_TARGET_LIFETIME", "120"))
START = time.time()
HEAP = 400000


def collect_here():
    t = time.time()
    gc.collect()
    return time.time() - t


def spin(seconds):
    until = time.time() + seconds
    x = 0
    while time.time() < until:
        for i in range(2000):
            x += i * i
    return x


def main():
    heap = [[i] for i in range(HEAP)]
    took = collect_here()
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid(), "collect_s": took}))
    sys.stdout.flush()
    while time.time() - START < LIFETIME:
        took = collect_here()
        spin(max(took, 0.01))
    return heap


main()
