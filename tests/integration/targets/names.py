# -*- coding: utf-8 -*-
# Target for test_names.py: threads with the names a program gives them.
#   main thread          MainThread
#   worker threads       "kafka-consumer", "heartbeat", a non-ASCII name
#   renamed              started as "before-rename", then .name = "renamed"
#   pool                 ThreadPoolExecutor-0_0 and -0_1 (3.x only)
#   from C               a thread started with pthread_create through ctypes,
#                        running Python through a ctypes callback: threading
#                        never registered it, so it keeps the kernel's name
# SIGUSR1 renames "kafka-consumer" to "kafka-consumer-2" (a rename while
# sampled). Prints "ready {json}" with {"names": {native id: expected name}} (the
# C-started thread maps to null), and ends itself after LIFETIME seconds.
import ctypes
import ctypes.util
import json
import os
import platform
import signal
import sys
import threading
import time

LIFETIME = 120.0
PY2 = sys.version_info[0] == 2
done = threading.Event()
ids = {}
lock = threading.Lock()


def native_id():
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    libc = ctypes.CDLL(None, use_errno=True)
    # SYS_gettid: Pythons before 3.8 have no get_native_id().
    return libc.syscall({"aarch64": 178}.get(platform.machine(), 186))


def worker(expect):
    with lock:
        ids[native_id()] = expect
    done.wait(LIFETIME)


def start(name, expect=None):
    t = threading.Thread(target=worker, args=(expect or name,), name=name)
    t.daemon = True
    t.start()
    return t


kafka = start("kafka-consumer")
start("heartbeat")
start("cafe-worker" if PY2 else u"caf\u00e9-worker")
r = threading.Thread(target=worker, args=("renamed",), name="before-rename")
r.daemon = True
r.start()
r.name = "renamed"

pool = None
if not PY2:
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(2)
    barrier = threading.Barrier(3)

    def pooled():
        with lock:
            ids[native_id()] = threading.current_thread().name
        barrier.wait()
        done.wait(LIFETIME)

    pool.submit(pooled)
    pool.submit(pooled)
    barrier.wait()

# A thread threading never saw: pthread_create straight from C.
CB = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)


def from_c(arg):
    with lock:
        ids[native_id()] = None
    done.wait(LIFETIME)
    return None


cb = CB(from_c)
libpthread = ctypes.CDLL(ctypes.util.find_library("pthread") or None)
tid = ctypes.c_ulong()
if libpthread.pthread_create(ctypes.byref(tid), None, cb, None) != 0:
    sys.exit("pthread_create failed")

deadline = time.time() + 30
while time.time() < deadline:
    with lock:
        if len(ids) == (7 if not PY2 else 5):
            break
    time.sleep(0.01)
ids[native_id()] = "MainThread"


def rename(signum, frame):
    kafka.name = "kafka-consumer-2"


signal.signal(signal.SIGUSR1, rename)
sys.stdout.write("ready " + json.dumps({"names": dict((str(k), v) for k, v in ids.items())}) + "\n")
sys.stdout.flush()
# Poll rather than block: a signal that arrives while a tracer holds the
# main thread stopped goes to another thread, and CPython runs the handler
# only when the main thread next runs Python code.
deadline = time.time() + LIFETIME
while time.time() < deadline:
    time.sleep(0.02)
os._exit(0)
