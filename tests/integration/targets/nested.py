# Target for test_dump.py and test_detach.py: two threads with known stacks.
#
# Main thread:   <module> -> outer -> Spinner.middle -> inner, spinning on the
#                @spin line for ever, so it holds the GIL.
# Second thread: (threading internals) -> sleeper_outer -> sleeper_inner,
#                in time.sleep() on the @sleep line, so it is idle.
#
# The tests take expected line numbers from the "# @name" markers, so lines
# may move freely; keep every marked statement on one line.
#
# Once both threads are in place it prints one line to stdout,
#     ready {json}
# with its pid, version, thread idents and the sleeper's own view of its
# stack (from sys._current_frames()), which the tests compare with spy's.
# The sleeper ends the process after LIFETIME seconds, so a target can never
# outlive a crashed test for long.
#
# Runs on every CPython from 2.7 on: no f-strings, explicit flushes.
import json
import os
import re
import sys
import threading
import time

LIFETIME = 300.0
sleeping = threading.Event()


def sleeper_inner():
    sleeping.set()
    time.sleep(LIFETIME)  # @sleep
    os._exit(0)


def sleeper_outer():
    sleeper_inner()  # @call_sleeper_inner


def inner():
    n = 0
    while True: n += 1  # @spin


class Spinner(object):
    def middle(self):
        inner()  # @call_inner


def outer():
    Spinner().middle()  # @call_middle


def marker(name):
    with open(__file__) as f:
        for n, line in enumerate(f, 1):
            if re.search(r"#\s*@" + name + r"\s*$", line):
                return n


def describe(frame):
    """Innermost first: [function, file, line]; qualified names on 3.11+."""
    out = []
    while frame is not None:
        code = frame.f_code
        out.append([getattr(code, "co_qualname", code.co_name),
                    code.co_filename, frame.f_lineno])
        frame = frame.f_back
    return out


def announce():
    t = threading.Thread(target=sleeper_outer, name="sleeper")
    t.daemon = True
    t.start()
    sleeping.wait(60)
    sleep_line = marker("sleep")
    deadline = time.time() + 60
    while True:
        f = sys._current_frames().get(t.ident)
        if f is not None and f.f_code is sleeper_inner.__code__ \
                and f.f_lineno == sleep_line:
            break
        if time.time() > deadline:
            sys.stderr.write("sleeper never reached line %d\n" % sleep_line)
            sys.exit(3)
        time.sleep(0.01)
    get_native_id = getattr(threading, "get_native_id", None)
    info = {
        "pid": os.getpid(),
        "version": list(sys.version_info[:3]),
        "executable": sys.executable,
        "main_ident": threading.current_thread().ident,
        "main_native_id": get_native_id() if get_native_id else None,
        "sleeper_ident": t.ident,
        "sleeper_native_id": getattr(t, "native_id", None),
        "sleeper_stack": describe(f),
    }
    sys.stdout.write("ready " + json.dumps(info) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    announce()
    outer()  # @call_outer
