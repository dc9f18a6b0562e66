# Target for test_trust.py's race: a program that turns root the moment a
# profiler starts reading the files its stack names.
#
#   exec_race.py DIR SECRET SETUID
#
# Started as root, it gives up root (uid and gid 65534, no groups). Its
# stack names five files, innermost first: DIR/mine.py to DIR/mine4.py,
# large files of its own (a profiler takes milliseconds to read each), and
# SECRET, a root-only file it cannot open. A thread watches mine.py with
# inotify and, at its first open by anyone (the profiler reading source
# lines, innermost frame first), execs SETUID: a set-uid-root program (the
# test's copy of sleep). A profiler that decides whose rights open SECRET
# only when it opens it would by then find a root process and read SECRET
# as root. Prints
# "ready {json}" once running. Runs on Python 3.
import ctypes
import json
import os
import struct
import sys
import threading

IN_OPEN = 0x20
SRC_SECRET = "\n" * 9 + """def outer():
    return f4()
"""
SRC_MINE = {4: "f3", 3: "f2", 2: "inner"}
SRC_INNER = "\n" * 9 + """def inner():
    t = 0
    while True:
        t += 1
"""
LARGE = 3 << 20


def main():
    d, secret, setuid = sys.argv[1], sys.argv[2], sys.argv[3]
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    mine = os.path.join(d, "mine.py")
    line = "x = 1  # readable line, and more text to make the file large\n"
    for k in ("", "2", "3", "4"):
        with open(os.path.join(d, "mine%s.py" % k), "w") as f:
            f.write(line * (LARGE // len(line)))
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    if fd < 0 or libc.inotify_add_watch(fd, mine.encode(), IN_OPEN) < 0:
        sys.exit("inotify: errno %d" % ctypes.get_errno())

    def watch():
        while True:
            buf = os.read(fd, 4096)
            if len(buf) >= 16 and struct.unpack_from("iIII", buf)[1] & IN_OPEN:
                os.execv(setuid, [setuid, "30"])

    ns = {}
    exec(compile(SRC_SECRET, secret, "exec"), ns)
    for k, callee in SRC_MINE.items():
        src = "\n" * 9 + "def f%d():\n    return %s()\n" % (k, callee)
        exec(compile(src, os.path.join(d, "mine%d.py" % k), "exec"), ns)
    exec(compile(SRC_INNER, mine, "exec"), ns)
    # The watcher must not wait the default 5 ms for the spinning thread's GIL.
    sys.setswitchinterval(0.0001)
    t = threading.Thread(target=watch)
    t.daemon = True
    t.start()
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid(), "uid": os.getuid()}))
    sys.stdout.flush()
    ns["outer"]()


if __name__ == "__main__":
    main()
