# Target for test_dump_hung.py: a process stuck in one known way, chosen by
# argv[1]. Each mode prints one line, "ready {json}", once its threads are
# where the test expects them (checked through sys._current_frames()):
#
#   deadlock  two threads each hold one lock and wait for the other's, at the
#             @acquire_b / @acquire_a lines; the main thread sleeps.
#   recv      a worker blocked in socket.recv at @recv; the main thread sleeps.
#   locals    a worker sleeps inside work(), whose arguments are an int, a
#             big int, a str, a list, a dict and more; the ready line gives
#             each one's repr (or type and length) as the target sees it;
#             a second worker sleeps inside hold_floats(), whose 30
#             arguments are the floats of FLOATS, each with its own repr().
#   gil       a spinning thread waits for the GIL while the main thread holds
#             it, asleep in libc's sleep() called through ctypes.PyDLL (which
#             does not release the GIL), at @gil_sleep.
#   threads N N sleeping threads, a few frames deep (for bench/dump-threads).
#
# Line numbers come from the "# @name" markers. The process ends itself after
# LIFETIME seconds, so it cannot outlive a crashed test for long. Runs on
# every CPython from 2.7 on: no f-strings, explicit flushes.
import json
import os
import socket
import sys
import threading
import time

LIFETIME = 120.0


def at_line(thread, func, marker_name, timeout=30):
    """Wait until thread's innermost frame is func at the marker's line."""
    line = marker(marker_name)
    deadline = time.time() + timeout
    while time.time() < deadline:
        f = sys._current_frames().get(thread.ident)
        if f is not None and f.f_code is func.__code__ and f.f_lineno == line:
            return
        time.sleep(0.01)
    sys.stderr.write("%s never reached line %d\n" % (func.__name__, line))
    os._exit(3)


def marker(name):
    with open(__file__) as f:
        for n, text in enumerate(f, 1):
            if text.rstrip().endswith("# @" + name):
                return n


def ready(info):
    info["pid"] = os.getpid()
    info["version"] = list(sys.version_info[:3])
    sys.stdout.write("ready " + json.dumps(info) + "\n")
    sys.stdout.flush()


def start(fn, name, *args):
    t = threading.Thread(target=fn, name=name, args=args)
    t.daemon = True
    t.start()
    return t


def ids(*threads):
    return dict((t.name, [t.ident, getattr(t, "native_id", None)])
                for t in threads)


def end_later():
    time.sleep(LIFETIME)  # @main_sleep
    os._exit(0)


# --- deadlock ---------------------------------------------------------------

lock_a, lock_b = threading.Lock(), threading.Lock()
holding = [threading.Event(), threading.Event()]


def take_a_then_b():
    lock_a.acquire()
    holding[0].set()
    holding[1].wait(30)
    lock_b.acquire()  # @acquire_b


def take_b_then_a():
    lock_b.acquire()
    holding[1].set()
    holding[0].wait(30)
    lock_a.acquire()  # @acquire_a


def deadlock():
    t1 = start(take_a_then_b, "ab")
    t2 = start(take_b_then_a, "ba")
    at_line(t1, take_a_then_b, "acquire_b")
    at_line(t2, take_b_then_a, "acquire_a")
    ready({"threads": ids(t1, t2)})
    end_later()


# --- recv -------------------------------------------------------------------

def receive(sock):
    sock.recv(1)  # @recv


def recv():
    a, b = socket.socketpair()
    t = start(receive, "receiver", b)
    at_line(t, receive, "recv")
    ready({"threads": ids(t)})
    end_later()
    a.close()


# --- locals -----------------------------------------------------------------

def work(small, big, text, items, table, ratio=1.5, data=b"xy", nothing=None, flag=True):
    total = small + 1
    captured = 7
    # text (an argument) and captured live in cells: the closure shares them.
    peek = lambda: (text, captured)
    time.sleep(LIFETIME)  # @work_sleep
    return total, peek


# Floats whose repr trips a formatter: integral values in fixed notation up
# to 16 digits, the exponent form from 1e16 and below 1e-4, subnormals, the
# extremes, powers of two whose nearest short decimal misses, and the specials.
FLOATS = [10.0, 30.0, 40.0, 120.0, -2.5, 0.0, -0.0, float("inf"), float("-inf"),
          float("nan"), 1e15, -1e15, 1e16, 1e17, 1e-5, 0.0001, 1e22, 5e-324,
          2.2250738585072014e-308, 1.7976931348623157e308, 0.1, 1 / 3.0,
          123456789.123, 2.0 ** 53, 9999999999999998.0, 2.0 ** -1017,
          1234567890123456.8, -7.5e-05, 0.30000000000000004, 3.14159e100]


def hold_floats(f00, f01, f02, f03, f04, f05, f06, f07, f08, f09,
                f10, f11, f12, f13, f14, f15, f16, f17, f18, f19,
                f20, f21, f22, f23, f24, f25, f26, f27, f28, f29):
    time.sleep(LIFETIME)  # @floats_sleep


def describe(v):
    if isinstance(v, (list, tuple, dict, set)):
        return ["container", type(v).__name__, len(v)]
    if type(v).__name__ not in ("int", "long", "float", "str", "bytes", "unicode",
                                "bool", "NoneType"):
        return ["other", type(v).__name__, None]
    r = repr(v)
    if sys.version_info[0] == 2 and isinstance(v, long):  # noqa: F821
        r = r.rstrip("L")
    return ["repr", type(v).__name__, r]


def locals_mode():
    args = dict(small=42, big=2 ** 100 + 7, text="hello world", items=[1, 2, 3],
                table={"a": 1, "b": 2})
    t = start(lambda: work(**args), "worker")
    ft = start(lambda: hold_floats(*FLOATS), "floats")
    at_line(t, work, "work_sleep")
    at_line(ft, hold_floats, "floats_sleep")
    want = dict((k, describe(v)) for k, v in args.items())
    for k, v in (("ratio", 1.5), ("data", b"xy"), ("nothing", None), ("flag", True),
                 ("total", 43), ("captured", 7), ("peek", lambda: None)):
        want[k] = describe(v)
    floats = [["f%02d" % i, repr(v)] for i, v in enumerate(FLOATS)]
    ready({"threads": ids(t, ft), "locals": want, "floats": floats})
    end_later()


# --- gil --------------------------------------------------------------------

def spin():
    n = 0
    while True: n += 1  # @spin


def gil():
    import ctypes
    libc = ctypes.PyDLL(None)  # PyDLL: the call keeps the GIL
    t = start(spin, "spinner")
    at_line(t, spin, "spin")
    ready({"threads": ids(t)})
    libc.sleep(int(LIFETIME))  # @gil_sleep
    os._exit(0)


# --- threads N --------------------------------------------------------------

def nest(depth, ev):
    if depth:
        return nest(depth - 1, ev)
    ev.wait(LIFETIME)


def many(n):
    started = [start(nest, "t%d" % i, 10, threading.Event()) for i in range(n)]
    time.sleep(0.5)
    ready({"threads": len(started)})
    end_later()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "deadlock":
        deadlock()
    elif mode == "recv":
        recv()
    elif mode == "locals":
        locals_mode()
    elif mode == "gil":
        gil()
    else:
        many(int(sys.argv[2]))
