# Target for test_subinterp.py: a thread that runs a sub-interpreter.
#
# Main thread:   <module> -> outer_loop -> (enter: Interpreter.exec on 3.14+,
#                _interpreters.exec on 3.13, _xxsubinterpreters.run_string
#                on 3.12), over and over; the code run in the sub-interpreter
#                spins in sub_spin for SPIN seconds each time, so the thread
#                is nearly always inside the sub-interpreter, holding its GIL.
# Second thread: other_outer -> other_spin, spinning in the main
#                interpreter only.
# Third thread:  started by the sub-interpreter's threading (sub_worker ->
#                sub_sleep), asleep, in the sub-interpreter only.
#
# Once both run it prints one line to stdout,
#     ready {json}
# with its pid, the native TIDs of the three threads and the sub-interpreter's
# id. The process ends itself after LIFETIME seconds.
import json
import os
import sys
import threading
import time

LIFETIME = 120.0
SPIN = 0.5

CODE = """
import time

def sub_spin():
    deadline = time.monotonic() + %r
    n = 0
    while time.monotonic() < deadline: n += 1

sub_spin()
""" % SPIN

# Run once first: a thread of the sub-interpreter's own (its threading's),
# which only ever has that interpreter's thread state, asleep.
START = """
import os, threading, time

def sub_sleep():
    # Told from in here: from the first look on, sub_sleep is on its stack.
    os.write(FD, str(threading.get_native_id()).encode() + b"\\n")
    time.sleep(LIFETIME)

def sub_worker():
    sub_sleep()

threading.Thread(target=sub_worker, name="sub-worker").start()
""".replace("LIFETIME", repr(LIFETIME))

if sys.version_info >= (3, 14):
    from concurrent import interpreters

    interp = interpreters.create()
    interp_id = interp.id

    def enter(code=CODE):
        interp.exec(code)
    enter_funcs = ["Interpreter.exec"]
elif sys.version_info >= (3, 13):
    import _interpreters

    interp_id = _interpreters.create()

    def enter(code=CODE):
        _interpreters.exec(interp_id, code)
    enter_funcs = ["enter"]
else:
    import _xxsubinterpreters

    interp_id = _xxsubinterpreters.create()

    def enter(code=CODE):
        _xxsubinterpreters.run_string(interp_id, code)
    enter_funcs = ["enter"]

# 3.12's id is an object whose last reference, dropped, destroys the
# interpreter: kept as it is, and told as an int.

started = threading.Event()
other_tid = []


def other_spin():
    other_tid.append(threading.get_native_id())
    started.set()
    n = 0
    while True: n += 1


def other_outer():
    other_spin()


def start_sub_worker():
    """The sub-interpreter's own thread's TID, which it writes to a pipe
    (a chroot has no /proc to find it in)."""
    r, w = os.pipe()
    enter(START.replace("FD", str(w)))
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(r, 64)
        if not chunk:
            sys.exit("the sub-interpreter's thread did not start")
        line += chunk
    return int(line)


def outer_loop():
    sub_tid = start_sub_worker()
    end = time.monotonic() + LIFETIME
    told = False
    while time.monotonic() < end:
        if not told:
            told = True
            print("ready " + json.dumps({
                "pid": os.getpid(),
                "main_tid": threading.get_native_id(),
                "other_tid": other_tid[0],
                "sub_tid": sub_tid,
                "interp_id": int(interp_id),
                "enter_funcs": enter_funcs,
            }))
            sys.stdout.flush()
        enter()
    os._exit(0)


t = threading.Thread(target=other_outer, name="other", daemon=True)
t.start()
started.wait()
outer_loop()
