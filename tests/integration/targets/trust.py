# Target for test_trust.py: a program that names files it may not read.
#
#   trust.py DIR SECRET
#
# Started as root, it gives up root first (uid and gid 65534, no groups),
# as an unprivileged user's program would run; started as that user (a
# launch under sudo), it is already there. Then it compiles the same small
# function three times, each under another file name, and runs them in
# turn for ever:
#   - SECRET itself: a root-only file (0600) it cannot open;
#   - DIR/planted.py: a symlink it plants in its own directory, to SECRET;
#   - DIR/mine.py: a file it writes and can read.
# A profiler that reads source lines as root would copy SECRET's lines into
# the profile for the first two. Prints "ready {json}" once running. Ends
# on its own after LIFETIME seconds. Runs on every CPython from 2.7 on.
import json
import os
import sys
import time

LIFETIME = float(os.environ.get("SPY_TARGET_LIFETIME", "120"))
START = time.time()
# The function sits on lines 10-14 of each "file".
SRC = "\n" * 9 + """def spin(n):
    t = 0
    for i in range(n):
        t += (i * i) % 7
    return t
"""


def drop():
    if os.getuid() != 0:
        return
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def main():
    d, secret = sys.argv[1], sys.argv[2]
    drop()
    planted = os.path.join(d, "planted.py")
    mine = os.path.join(d, "mine.py")
    if os.path.lexists(planted):
        os.unlink(planted)
    os.symlink(secret, planted)
    with open(mine, "w") as f:
        f.write("".join("x = %d  # readable line %d\n" % (i, i) for i in range(1, 31)))
    funcs = []
    for name in (secret, planted, mine):
        ns = {}
        exec(compile(SRC, name, "exec"), ns)
        funcs.append(ns["spin"])
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid(), "uid": os.getuid()}))
    sys.stdout.flush()
    while time.time() - START < LIFETIME:
        for f in funcs:
            f(3000)


main()
