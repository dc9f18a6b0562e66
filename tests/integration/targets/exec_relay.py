# Target for test_trust.py's relay race: a root program a profiler opens,
# which then becomes exec_race.py as nobody.
#
#   setarch -R python3 exec_relay.py DIR SECRET SETUID
#
# Runs as root, spinning in a function of this file, until SIGUSR1; then
# gives up root (uid and gid 65534, no groups) and execs the same
# interpreter on exec_race.py DIR SECRET SETUID. Without address space
# randomisation (setarch -R, kept across an exec that gains nothing) the
# new image's interpreter sits where the old one's did, so a profiler that
# goes on reading after the exec (--nonblocking sees no exec) walks
# exec_race.py's stack, which names SECRET, and that program execs a
# set-uid-root one the moment its own file is opened: a profiler holding
# the credentials it took of the root image, and finding root again when
# it opens SECRET, would read SECRET as root. Prints "ready {json}" once
# running. Runs on Python 3.
import json
import os
import signal
import sys

go = []


def relay(signum, frame):
    go.append(1)


def spin():
    t = 0
    while not go:
        t += 1


def main():
    signal.signal(signal.SIGUSR1, relay)
    sys.stdout.write("ready %s\n" % json.dumps({"pid": os.getpid(), "uid": os.getuid()}))
    sys.stdout.flush()
    spin()
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    race = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exec_race.py")
    os.execv(sys.executable, [sys.executable, race] + sys.argv[1:])


if __name__ == "__main__":
    main()
