# -*- coding: utf-8 -*-
# Target for test_lines.py: the main thread spins in spin(), whose line
# marked @hot does nearly all the work, so a sampled profile's line with
# the largest self share is that one. The line below it is hostile text
# (a terminal escape, a bidi override, markup that would end an SVG's
# script) in a comment, kept as context: every output must escape it.
#
# Once in place it prints one line, "ready {json}" with its pid and the
# hot line's text. Ends on its own after LIFETIME seconds. Runs on every
# CPython from 2.7 on.
import json
import os
import sys
import time

LIFETIME = float(os.environ.get("SPY_TARGET_LIFETIME", "120"))
START = time.time()


def spin(n):
    total = 0
    for i in range(n):
        total += (i * i) % 7 + (i ^ 5) * 3 - (i >> 2) + (i | 9) * (i & 3) - (i % 11) * 2  # @hot
        # ]0;pwned ‮ </script><script>alert(1)</script> ]]> & # @hostile
    return total


def main():
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid()}))
    sys.stdout.flush()
    while time.time() - START < LIFETIME:
        spin(5000)


main()
