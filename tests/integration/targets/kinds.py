# Target for test_kinds.py (the table's python% / native% / idle% split).
#
# The main thread repeats a cycle of CYCLE seconds, each phase lasting a
# fixed share of it by the wall clock, so the shares hold however loaded
# the machine is:
#   in_c        NATIVE of the cycle: libc's memset over a large buffer,
#               called through ctypes (no extension to build): with
#               --native the innermost frame is native. Called through
#               PyDLL, which keeps the GIL: a thread running C without it
#               that a loaded machine starves of CPU counts as idle
#               (waiting), and this target tests the split, not the load;
#   in_python   PYTHON of the cycle: a pure Python loop;
#   in_sleep    the rest: time.sleep (idle, kept with -i).
# A loaded machine stretches the phases (a sleep wakes late, and the next
# phase ends on time regardless), so with a file named (argv[1]) the target
# also says how long its phases really took: on SIGUSR1 it replaces the
# file with one line, "N NATIVE PYTHON SLEEP", N counting the signals and
# then the seconds spent in each phase since it started. Only on a signal:
# writing a file every cycle is time in none of the phases, and a loaded
# machine makes it long.
# A second argument dilates the cycle by that factor, for a CPU that many
# times slower (test_kinds.py passes harness.slowness): spy's lag between
# reading a thread's state and its stack is that many times longer there,
# and must stay as small a share of a phase as at native speed.
# Prints "ready {json}" (pid and the shares) once running; ends by itself
# after LIFETIME seconds (SPY_TARGET_LIFETIME overrides; dilated too). Runs
# on 2.7 and 3.x.
import ctypes
import json
import os
import signal
import sys
import time

SLOWNESS = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
LIFETIME = float(os.environ.get("SPY_TARGET_LIFETIME", "120")) * SLOWNESS
START = time.time()
# Not a multiple of spy's tick (10 ms at 100 Hz, 5 ms at 200 Hz): a cycle
# of whole ticks puts every tick at the same offsets cycle after cycle, and
# where one falls on a phase's edge (a sleeper waking late) that phase
# gains a tenth of the samples. 97.3 ms moves the offsets by 0.27 of a
# tick a cycle, so a recording's ticks cover the cycle evenly.
CYCLE = 0.0973 * SLOWNESS
NATIVE, PYTHON = 0.4, 0.4
# Large enough that the Python calling memset is a few % of the phase
# (one call takes a fraction of a millisecond), small enough to end on time.
BUF = ctypes.create_string_buffer(4 << 20)
MEMSET = ctypes.PyDLL(None).memset
MEMSET.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)


def in_c(until):
    while time.time() < until:
        MEMSET(BUF, 1, len(BUF))


# Small ints only (-5 to 256 exist once and for all): the loop allocates
# nothing, so it never calls into the allocator, which in a shared
# libpython reaches the thread state through __tls_get_addr: with
# --native that was a native leaf in 7-15% of 3.12's samples of this
# phase, time really spent in C.
ONES = (1,) * 2000


def in_python(until):
    # time.time() is C (with --native, a native leaf): checked seldom.
    x = 0
    while time.time() < until:
        for one in ONES:
            x = (x + one) & 127
    return x


def in_sleep(until):
    left = until - time.time()
    if left > 0:
        time.sleep(left)


SPENT = [0.0, 0.0, 0.0]
SAVED = [0]


def save(path):
    SAVED[0] += 1
    with open(path + ".tmp", "w") as f:
        f.write("%d %.6f %.6f %.6f\n" % tuple(SAVED + SPENT))
    os.rename(path + ".tmp", path)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else None
    if path:
        save(path)
        signal.signal(signal.SIGUSR1, lambda signum, frame: save(path))
    sys.stdout.write("ready %s\n" % json.dumps(
        {"pid": os.getpid(), "native": NATIVE, "python": PYTHON}))
    sys.stdout.flush()
    spent = SPENT
    t = time.time()
    while t - START < LIFETIME:
        t0 = time.time()
        in_c(t + NATIVE * CYCLE)
        t1 = time.time()
        in_python(t + (NATIVE + PYTHON) * CYCLE)
        t2 = time.time()
        in_sleep(t + CYCLE)
        t3 = time.time()
        spent[0] += t1 - t0
        spent[1] += t2 - t1
        spent[2] += t3 - t2
        t += CYCLE
        # Fallen behind (a stopped or starved process): skip the cycles
        # missed, keeping the grid. Starting afresh at the time of waking
        # tied the cycle to spy (a stall ends when spy lets the thread go,
        # just after a tick), so its ticks fell on the phases' edges.
        now = time.time()
        if now > t + CYCLE:
            t += CYCLE * int((now - t) / CYCLE)


main()
