# Target for test_hostile.py: THREADS threads, each DEPTH frames deep in a
# function with 300 locals (more than spy reads per frame), all asleep.
# `spy dump --locals` of it would hold frames x threads x locals values.
# Prints "ready {json}" once every thread is in place.
import json
import os
import sys
import threading
import time

THREADS, DEPTH = int(sys.argv[1]), int(sys.argv[2])
sys.setrecursionlimit(DEPTH + 200)
body = "\n".join("    v%d = %d" % (i, i) for i in range(300))
ns = {"time": time}
exec("def wide(n, ready):\n%s\n    if n:\n        wide(n - 1, ready)\n    else:\n"
     "        ready.release()\n        time.sleep(300)\n" % body, ns)
wide = ns["wide"]
ready = threading.Semaphore(0)
for _ in range(THREADS):
    t = threading.Thread(target=wide, args=(DEPTH, ready))
    t.daemon = True
    t.start()
for _ in range(THREADS):
    ready.acquire()
sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid()}))
sys.stdout.flush()
time.sleep(300)
