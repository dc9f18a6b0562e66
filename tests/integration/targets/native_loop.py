# Target for test_native.py: a pure-Python hot loop, <module> -> outer() ->
# inner(), calling no C of its own but a clock read now and then, so that
# every --native sample of it ends at a Python frame (or, with the JIT, at
# the code the JIT wrote for it).
#
# Prints "ready {json}" once running (jit: whether the JIT is on); ends by
# itself after LIFETIME seconds (SPY_TARGET_LIFETIME overrides).
import json
import os
import sys
import time

LIFETIME = float(os.environ.get("SPY_TARGET_LIFETIME", "120"))
START = time.time()


def inner():
    x = 0
    for i in range(2000):
        x += i * i
    return x


def outer():
    while time.time() - START < LIFETIME:
        for _ in range(200):
            inner()


jit = getattr(sys, "_jit", None)
sys.stdout.write("ready %s\n" % json.dumps(
    {"pid": os.getpid(), "jit": bool(jit and jit.is_enabled())}))
sys.stdout.flush()
outer()
