# Target for test_native.py and bench/native-overhead: drives the C extension
# targets/native_ext.c (built by the test into EXT_DIR).
#
#   native_target.py EXT_DIR callback ITERS
#       caller() calls spyext.spin_and_call(callback, ITERS) in a loop: C
#       spins, then calls back into callback(), which spins in Python.
#   native_target.py EXT_DIR deep DEPTH ITERS
#       deep_caller() calls spyext.deep(DEPTH, ITERS) in a loop: C recursion
#       DEPTH deep, spinning at the bottom.
#   native_target.py EXT_DIR workers D1,D2,...
#       spyext.start_workers((D1, D2, ...)): one C thread per duty that
#       never touches Python, spinning D% of the time in
#       spin_native_worker; the main thread spins in Python (spin_python).
#       The ready line carries their TIDs ("workers").
#
# Prints "ready {json}" once running; ends by itself after LIFETIME seconds
# (SPY_TARGET_LIFETIME overrides). Runs on 2.7 and 3.x.
import json
import os
import sys
import time

LIFETIME = float(os.environ.get("SPY_TARGET_LIFETIME", "120"))
START = time.time()

sys.path.insert(0, sys.argv[1])
import spyext  # noqa: E402


def callback():
    # Spin in Python for about as long as the C side spins.
    t = time.time()
    x = 0
    while time.time() - t < 0.005:
        x += 1
    return x


def caller(iters):
    while time.time() - START < LIFETIME:
        spyext.spin_and_call(callback, iters)


def deep_caller(depth, iters):
    while time.time() - START < LIFETIME:
        spyext.deep(depth, iters)


def spin_python():
    x = 0
    while time.time() - START < LIFETIME:
        for i in range(1000):
            x += i


def main():
    mode = sys.argv[2]
    ready = {"pid": os.getpid()}
    if mode == "workers":
        duties = tuple(int(d) for d in sys.argv[3].split(","))
        ready["workers"] = list(spyext.start_workers(duties))
    sys.stdout.write("ready %s\n" % json.dumps(ready))
    sys.stdout.flush()
    if mode == "workers":
        spin_python()
    if mode == "callback":
        caller(int(sys.argv[3]))
    elif mode == "deep":
        deep_caller(int(sys.argv[3]), int(sys.argv[4]))


main()
