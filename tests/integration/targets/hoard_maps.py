# A Python maps hoarder for test_agent.py and bench/agent-hoard (issue #37
# case 4): argv[1] is the marker the agent's --match picks, argv[2] how
# many separate small mappings to make (default 20000). Then it sleeps,
# waking twice a second to work for 50 ms (hoard_work), as a quiet service
# does: the agent's worker sees it run, and its windows have samples. Prints "ready {json}" once mapped; ends
# after SPY_TARGET_LIFETIME seconds (default 300).
import json
import mmap
import os
import sys
import time


def hoard_work(until):
    n = 0
    while time.time() < until:
        n += 1
    return n


def main():
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    end = time.time() + float(os.environ.get("SPY_TARGET_LIFETIME", "300"))
    # Anonymous shared: each is its own object, so the kernel never merges two neighbours.
    held = [mmap.mmap(-1, mmap.PAGESIZE) for _ in range(n)]
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid(), "maps": len(held)}))
    sys.stdout.flush()
    while time.time() < end:
        hoard_work(time.time() + 0.05)
        time.sleep(0.45)


main()
