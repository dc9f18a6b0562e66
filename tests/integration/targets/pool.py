"""A thread pool, for bench/many-threads.

    pool.py pool N BUSY    N workers waiting on a queue; BUSY of them given a
                           task that spins in Python forever, the rest idle
    pool.py churn N BUSY   the same, and two threads that each start a short
                           thread, join it and start the next, forever

Prints "ready" once every worker waits (and the busy ones spin), then runs
until killed. Works on 2.7 and 3.x.
"""
import sys
import threading
import time

try:
    import queue
except ImportError:  # 2.7
    import Queue as queue


def spin():
    x = 0
    while True:
        for i in range(1000):
            x += i


def worker(q, started):
    started.release()
    while True:
        job = q.get()
        job()


def short():
    s = 0
    for i in range(2000):
        s += i
    return s


def churner():
    while True:
        t = threading.Thread(target=short)
        t.start()
        t.join()


def main():
    mode, n, busy = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    q = queue.Queue()
    started = threading.Semaphore(0)
    for _ in range(n):
        t = threading.Thread(target=worker, args=(q, started))
        t.daemon = True
        t.start()
    for _ in range(n):
        started.acquire()
    for _ in range(busy):
        q.put(spin)
    if mode == "churn":
        for _ in range(2):
            t = threading.Thread(target=churner)
            t.daemon = True
            t.start()
    elif mode != "pool":
        raise SystemExit("unknown mode %r" % mode)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        time.sleep(3600)


main()
