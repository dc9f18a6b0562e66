# Target for test_agent.py: a process that never stops naming new
# functions, each with a unique name of about 4 KB, and spends its time in
# a stack of DEPTH of them -- what a profiler keeping every name it meets
# for the life of the process cannot bound (at 19 Hz, about 1.5 MB of new
# names a second).
#
#   churn_names.py MARKER
#
# Prints "ready {json}" once running. Runs on every CPython from 2.7 on.
import json
import os
import sys

PAD = "x" * 4000
DEPTH = 20


def main():
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid()}))
    sys.stdout.flush()
    i = 0
    while True:
        names = ["f%d_%d_%s" % (i, j, PAD) for j in range(DEPTH)]
        src = "".join("def %s():\n    return %s()\n" % (names[j], names[j + 1]) for j in range(DEPTH - 1))
        src += "def %s():\n    t = 0\n    for k in range(20000):\n        t += k\n    return t\n" % names[-1]
        ns = {}
        exec(compile(src, "churn_%d.py" % i, "exec"), ns)
        ns[names[0]]()
        i += 1


if __name__ == "__main__":
    main()
