# Target for test_names.py's launch-mode check, after py-spy's own
# thread_names.py: started by `spy record -- python thread_names.py OUT`,
# so spy first sees it before threading is imported. Ten threads named
# thread0..thread9 nap in nap() at once; each writes its native id and
# threading's name for it, and the main thread its own, as one JSON object
# {native id: name} to OUT; the process ends after LIFETIME seconds.
import threading  # @import
import ctypes
import json
import platform
import time

LIFETIME = 3.0
ids = {}
lock = threading.Lock()
libc = ctypes.CDLL(None, use_errno=True)


def native_id():
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    # SYS_gettid: Pythons before 3.8 have no get_native_id().
    return libc.syscall({"aarch64": 178}.get(platform.machine(), 186))


def nap(end):
    with lock:
        ids[native_id()] = threading.current_thread().name
    while time.time() < end:
        time.sleep(0.01)  # @nap


end = time.time() + LIFETIME
threads = [threading.Thread(target=nap, name="thread%d" % i, args=(end,)) for i in range(10)]
for t in threads:
    t.start()
ids[native_id()] = threading.current_thread().name
while len(ids) < 11 and time.time() < end:
    time.sleep(0.01)
with open(__import__("sys").argv[1], "w") as f:
    json.dump(dict((str(k), v) for k, v in ids.items()), f)
for t in threads:
    t.join()
