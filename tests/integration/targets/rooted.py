"""Target for test_roots.py: runs inside a root filesystem (a container or a
chroot, see tools/pyroot) and sleeps in C code from a library the test
built, which it then replaces on disk with a FIFO -- what a hostile
container could do to the files a profiler opens by name.

argv: LIBRARY. Prints "ready {}" once the library is loaded and replaced,
then sleeps in plant_wait() forever. A FIFO hangs whoever opens it, gdb's
gcore included: once LIBRARY.swap exists, a thread replaces the FIFO with a
regular file of junk and writes LIBRARY.swapped.
"""
import ctypes
import os
import sys
import threading
import time


def replace_with(path, make):
    tmp = path + ".new"
    make(tmp)
    os.replace(tmp, path)


def write_junk(path):
    with open(path, "wb") as f:
        f.write(b"not the library" * 100)


def swap_on_request(path):
    while not os.path.exists(path + ".swap"):
        time.sleep(0.02)
    replace_with(path, write_junk)
    open(path + ".swapped", "w").close()


def leaf(lib):
    print("ready {}", flush=True)
    lib.plant_wait(1 << 30)  # @wait


def outer(lib):
    leaf(lib)  # @call


lib = ctypes.CDLL(sys.argv[1])
replace_with(sys.argv[1], os.mkfifo)
threading.Thread(target=swap_on_request, args=(sys.argv[1],), daemon=True).start()
outer(lib)  # @main
