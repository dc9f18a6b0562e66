# Target for test_trust.py: threads that make their names costly to find.
#
#   wide_names.py [THREADS [ATTRS]]     (default 200 and 16000)
#
# THREADS threads wait on an event; each Thread object carries ATTRS extra
# attributes, with _name set again after them (last in its dict), so a
# lookup that scans an instance dict key by key reads ATTRS keys per
# thread. The main thread spins. Prints "ready {json}" with the threads'
# names once every thread runs; ends on its own after LIFETIME seconds.
# Runs on every CPython from 2.7 on.
import json
import os
import sys
import threading
import time

LIFETIME = float(os.environ.get("SPY_TARGET_LIFETIME", "120"))
NAME = "_Thread__name" if sys.version_info[0] == 2 else "_name"


def main():
    nthreads = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    nattrs = int(sys.argv[2]) if len(sys.argv) > 2 else 16000
    done = threading.Event()
    keys = ["attr%d" % i for i in range(nattrs)]
    threads = []
    for i in range(nthreads):
        t = threading.Thread(target=done.wait, name="wide-%d" % i)
        t.daemon = True
        name = getattr(t, NAME)
        delattr(t, NAME)
        for k in keys:
            setattr(t, k, None)
        setattr(t, NAME, name)
        t.start()
        threads.append(t)
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid(), "threads": nthreads}))
    sys.stdout.flush()
    start = time.time()
    x = 0
    while time.time() - start < LIFETIME:
        for i in range(1000):
            x += i * i
    done.set()


main()
