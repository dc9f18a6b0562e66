# Target for test_load.py: N threads (argv[1], default 100) that each run
# hashlib.pbkdf2_hmac over and over, which releases the GIL for the whole
# derivation: all N are runnable all the time, and on a 2-core machine
# each gets a sliver of a CPU. The main thread sleeps. Each worker
# runs in a function of its own, busy_N, so the profile says which of them
# were sampled. Prints "ready {json}" once every worker has started; ends
# by itself after LIFETIME seconds (SPY_TARGET_LIFETIME overrides). 3.8+.
import hashlib
import json
import os
import sys
import threading
import time

LIFETIME = float(os.environ.get("SPY_TARGET_LIFETIME", "120"))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 100
# About half a second of a CPU per call (a 32 MB digest was 80 ms): each
# return wants the GIL back, and with 100 threads on 2 cores the holder is
# often preempted, so returns that came often left threads asleep on the
# GIL for a real share of the time (24% under a loaded CI), which -i
# rightly counts as idle. Rare returns keep that share to the edges.
ITERATIONS = 1000000
started = threading.Semaphore(0)


def make(i):
    def body():
        started.release()
        end = time.time() + LIFETIME
        while time.time() < end:
            hashlib.pbkdf2_hmac("sha256", b"spy", b"load", ITERATIONS)
    # The name is what the profile shows: one function per worker.
    name = "busy_%d" % i
    body.__code__ = body.__code__.replace(co_name=name, co_qualname=name) \
        if hasattr(body.__code__, "co_qualname") else body.__code__.replace(co_name=name)
    return body


for i in range(N):
    threading.Thread(target=make(i), name="w%d" % i, daemon=True).start()
for i in range(N):
    started.acquire()
print("ready " + json.dumps({"pid": os.getpid(), "threads": N}))
sys.stdout.flush()
time.sleep(LIFETIME)
