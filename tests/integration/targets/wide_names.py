# Target for test_trust.py: threads that make their names costly to find.
#
#   wide_names.py [THREADS [ATTRS [FAKES]]]     (default 200, 16000, 0)
#
# THREADS threads wait on an event; each Thread object carries ATTRS extra
# attributes, with _name set again after them (last in its dict), so a
# lookup that scans an instance dict key by key reads ATTRS keys per
# thread. FAKES entries of unstarted Thread objects under idents no thread
# has are put in threading._active first, before the real threads'. The main thread spins. Prints "ready {json}" with the threads'
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
    nfakes = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    for i in range(nfakes):
        fake = threading.Thread(name="fake-%d" % i)
        fake.daemon = True
        threading._active[-1 - i] = fake
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
    sys.stdout.flush()
    # No interpreter shutdown: it would walk the fake entries.
    os._exit(0)


main()
