# Target for test_resources.py: a resident set that grows at a known rate.
#
# Every STEP seconds, on a fixed schedule (a late step catches up, so the
# rate holds under load), keeps one more CHUNK-byte string whose every
# byte is written (so it is resident, not a lazily mapped zero page):
# RATE = CHUNK / STEP bytes per second, 5 MB/s. Spins in between, so
# the process also uses CPU. Stops growing after GROW_S seconds (the
# resident set then stays flat) and ends by itself after LIFETIME seconds
# (SPY_TARGET_LIFETIME overrides). Prints "ready {json}" with the rate
# once the first chunk is kept. Runs on 2.7 and 3.x.
import json
import os
import sys
import time

LIFETIME = float(os.environ.get("SPY_TARGET_LIFETIME", "120"))
CHUNK = 500000
STEP = 0.1
GROW_S = 30.0


def grow(keep, chunks):
    keep.append(b"x" * CHUNK)
    return chunks + 1


def spin(until):
    x = 0
    while time.time() < until:
        for i in range(200):
            x += i
    return x


def main():
    start = time.time()
    keep = []
    chunks = grow(keep, 0)
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid(), "bytes_per_s": CHUNK / STEP}))
    sys.stdout.flush()
    while time.time() - start < LIFETIME:
        now = time.time()
        while now - start < GROW_S and chunks * STEP <= now - start:
            chunks = grow(keep, chunks)
        spin(min(start + chunks * STEP, now + STEP))
    return keep


main()
