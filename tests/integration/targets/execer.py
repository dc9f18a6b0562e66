# Target for test_hostile.py: runs before_exec for a second (a worker
# thread asleep beside it), then os.execv()s a new interpreter that spins
# in after_exec. What spy resolved in the first image means nothing in the
# second. Prints "ready {json}" at once; the new program ends after
# LIFETIME seconds.
import json
import os
import sys
import threading
import time

LIFETIME = 60


def worker():
    while True:
        time.sleep(0.01)


def before_exec():
    t = time.time()
    while time.time() - t < 1.0:
        pass


threading.Thread(target=worker, daemon=True).start()
sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid()}))
sys.stdout.flush()
before_exec()
os.execv(sys.executable, [sys.executable, "-c",
                          "import time\ndef after_exec(end):\n    while time.time() < end: pass\n"
                          "after_exec(time.time() + %d)\n" % LIFETIME])
