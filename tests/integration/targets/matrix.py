# -*- coding: utf-8 -*-
# Target for test_dump.py's version matrix: three threads, and one deep stack
# that goes through every kind of frame whose name spy must get right.
#
# Spinner thread (running, holds the GIL), innermost first:
#     3.5+: 计算 (matrix_py3.py, spins)      2.7: compute (spins; ASCII stand-in,
#           outer.<locals>.<lambda>                since 2.7 has no non-ASCII
#           acall      (coroutine, awaited)        identifiers and no async def)
#           coro       (coroutine)                 <lambda>
#           drive      (coro.send(None))           gen
#           gen        (generator, next())         ...
#           Klass.method
#           outer.<locals>.inner (nested function)
#           outer
#           (threading internals)
#   Names are qualified (co_qualname) on 3.11+ only; before, the bare co_name
#   (<lambda>, method, inner).
# Sleeper thread (idle): sleeper_inner in time.sleep(), sleeper_outer,
#   threading internals.
# Main thread (idle): <module>, in time.sleep().
#
# The coroutine and the non-ASCII name are Python 3 syntax, so they live in
# matrix_py3.py, imported only on 3.5+; this file is valid 2.7 and 3.x.
# Expected line numbers come from the "# @name" markers (in each file);
# keep every marked statement on one line.
#
# Once every thread is in place it prints
#     ready {json}
# with its version, the threads' idents and native ids, and the spinner's and
# sleeper's stacks as the interpreter itself sees them (sys._current_frames()),
# which give the tests the threading frames below our own. The process ends
# itself after LIFETIME seconds, so it cannot outlive a crashed test for long.
import json
import os
import re
import sys
import threading
import time

sys.dont_write_bytecode = True    # importing matrix_py3 must not litter
LIFETIME = 300.0


def compute():
    # 2.7's stand-in for matrix_py3.计算.
    n = 0
    while True: n += 1  # @spin


if sys.version_info >= (3, 5):
    import matrix_py3
    LEAF = matrix_py3.LEAF           # matrix_py3.计算
    DRIVE = matrix_py3.drive
else:
    LEAF = compute
    DRIVE = None


def gen(step):
    if DRIVE is not None:
        yield DRIVE(step)  # @gen_drive
    else:
        yield step()  # @gen_step


class Klass(object):
    def method(self, step):
        return next(gen(step))  # @call_gen


def outer():
    native_ids["spinner"] = native_id()
    work = lambda: LEAF()  # @lambda

    def inner():
        Klass().method(work)  # @call_method
    inner()  # @call_inner


sleeping = threading.Event()
native_ids = {}     # thread role -> kernel TID, set by each thread itself


def sleeper_inner():
    sleeping.set()
    time.sleep(LIFETIME)  # @sleep


def sleeper_outer():
    native_ids["sleeper"] = native_id()
    sleeper_inner()  # @call_sleeper_inner


# ---------------------------------------------------------------------------
# Getting ready, and telling the test.


def native_id():
    """The calling thread's kernel TID (threading.get_native_id is 3.8+)."""
    get = getattr(threading, "get_native_id", None)
    if get is not None:
        return get()
    try:
        return int(os.readlink("/proc/thread-self").rsplit("/", 1)[1])
    except (OSError, ValueError):
        return None



def marker(path, name):
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if re.search(br"#\s*@" + name.encode() + br"\s*$", line):
                return n
    raise SystemExit("no marker @%s in %s" % (name, path))


def describe(frame):
    """Innermost first: [function, file, line]; qualified names on 3.11+."""
    out = []
    while frame is not None:
        code = frame.f_code
        out.append([getattr(code, "co_qualname", code.co_name),
                    code.co_filename, frame.f_lineno])
        frame = frame.f_back
    return out


def wait_at(t, code, line, what):
    """The innermost frame of thread t, once it runs `code` at `line`."""
    deadline = time.time() + 60
    while True:
        f = sys._current_frames().get(t.ident)
        if f is not None and f.f_code is code and f.f_lineno == line:
            return f
        if time.time() > deadline:
            sys.stderr.write("%s never reached line %d: %r\n"
                             % (what, line, f and describe(f)))
            os._exit(3)
        time.sleep(0.01)



def main():
    sleeper = threading.Thread(target=sleeper_outer, name="sleeper")
    sleeper.daemon = True
    sleeper.start()
    sleeping.wait(60)
    spinner = threading.Thread(target=outer, name="spinner")
    spinner.daemon = True
    spinner.start()

    here = os.path.abspath(__file__)
    if DRIVE is not None:
        leaf_code = LEAF.__code__
        leaf_line = marker(leaf_code.co_filename, "spin")
    else:
        leaf_code, leaf_line = compute.__code__, marker(here, "spin")
    fs = wait_at(spinner, leaf_code, leaf_line, "spinner")
    fz = wait_at(sleeper, sleeper_inner.__code__, marker(here, "sleep"),
                 "sleeper")
    info = {
        "pid": os.getpid(),
        "version": list(sys.version_info[:3]),
        "executable": sys.executable,
        "main_ident": threading.current_thread().ident,
        "main_native_id": native_id(),
        "spinner_ident": spinner.ident,
        "spinner_native_id": native_ids.get("spinner"),
        "sleeper_ident": sleeper.ident,
        "sleeper_native_id": native_ids.get("sleeper"),
        "spinner_stack": describe(fs),
        "sleeper_stack": describe(fz),
        "py3_file": leaf_code.co_filename if DRIVE is not None else None,
    }
    del fs, fz
    sys.stdout.write("ready " + json.dumps(info) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
    time.sleep(LIFETIME)  # @main_sleep
    os._exit(0)
