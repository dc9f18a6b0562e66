# Target for test_hostile.py: many threads, one of them busy.
#
#   crowd.py threads N   N sleeping threads, then one more thread that
#                        is busy in main_hash hashing without the GIL (so
#                        only its state says it runs): the busy one is the
#                        last thread the kernel lists, the main one sleeps;
#   crowd.py dstate      a thread stuck in uninterruptible sleep (D): it
#                        clone()s with CLONE_VM|CLONE_VFORK a child that
#                        runs libc's sleep(), so the parent waits in the
#                        kernel's killable vfork wait, which no ptrace
#                        interrupt ends; the main thread spins in main_spin.
# Prints "ready {json}" once set up; exits after LIFETIME seconds.
import ctypes
import hashlib
import json
import os
import sys
import threading
import time

LIFETIME = 120.0


def sleeper():
    time.sleep(LIFETIME)


def stuck_in_d(ready):
    libc = ctypes.CDLL(None, use_errno=True)
    stack = ctypes.create_string_buffer(1 << 16)
    top = ctypes.addressof(stack) + len(stack) - 64
    fn = ctypes.cast(libc.sleep, ctypes.c_void_p)
    libc.clone.restype = ctypes.c_int
    libc.clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    CLONE_VM, CLONE_VFORK, SIGCHLD = 0x100, 0x4000, 17
    ready.set()
    while True:
        # The child sleeps 30 s in libc alone (no Python), then exits;
        # this thread is in D state all along.
        pid = libc.clone(fn, top, CLONE_VM | CLONE_VFORK | SIGCHLD, 30)
        if pid > 0:
            os.waitpid(pid, 0)
        else:
            time.sleep(1)


def main_spin():
    n = 0
    while True:
        n += 1


def main_hash():
    big = b"x" * (1 << 22)
    while True:
        hashlib.sha256(big).digest()  # main_spin: the GIL released


def main():
    threading.Timer(LIFETIME, lambda: os._exit(0)).start()
    if sys.argv[1] == "threads":
        for _ in range(int(sys.argv[2])):
            t = threading.Thread(target=sleeper)
            t.daemon = True
            t.start()
    else:
        ready = threading.Event()
        t = threading.Thread(target=stuck_in_d, args=(ready,))
        t.daemon = True
        t.start()
        ready.wait()
        time.sleep(0.3)
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid(), "threads": threading.active_count()}))
    sys.stdout.flush()
    if sys.argv[1] == "threads":
        t = threading.Thread(target=main_hash)
        t.daemon = True
        t.start()
        sleeper()
    else:
        main_spin()


main()
