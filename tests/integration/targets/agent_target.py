# Target for test_agent.py and bench/agent: argv[1] is a marker the agent's
# --match picks (so that it touches no other process on the machine),
# argv[2] "busy" (spins in agent_busy, sleeping a tenth of the time) or
# "idle" (sleeps). Prints "ready {json}" once running; ends on its own
# after SPY_TARGET_LIFETIME seconds (default 300). Runs on 2.7 and 3.x.
import json
import os
import sys
import time


def agent_busy(until):
    n = 0
    while time.time() < until:
        n += 1
    return n


def main():
    mode = sys.argv[2] if len(sys.argv) > 2 else "busy"
    end = time.time() + float(os.environ.get("SPY_TARGET_LIFETIME", "300"))
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid()}))
    sys.stdout.flush()
    units = 0
    cpu0 = sum(os.times()[:2])
    while time.time() < end:
        if mode == "busy":
            units += agent_busy(time.time() + 0.09)
            time.sleep(0.01)
        else:
            time.sleep(0.5)
    # For bench/agent: how much work was done (loop turns while spinning)
    # and on how much CPU (its own user and system time): work per
    # CPU-second is what a profiler's stops cost it, whatever share of the
    # cores the scheduler gave it.
    sys.stdout.write("units %d cpu %.3f\n" % (units, sum(os.times()[:2]) - cpu0))
    sys.stdout.flush()


main()
