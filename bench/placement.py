"""Where a benchmark's target and its profiler run: --cpus apart|same|free.

On this project's machines (virtual, 2 vCPUs) one ptrace stop costs the
tracer about ten times more when the target runs on another CPU than when
the two share one (bench/read-floor.c's stop, quiet: 19 against 4 us): the
interrupt is then an inter-processor interrupt, which a virtual machine pays
for in exits. Left to the scheduler, the placement changes from one
recording to the next, and so does every stopping figure, CPython's
--blocking as much as spy's. So the benchmarks that stop place both:
"apart" (the default) pins the target to the first CPU this process may
use and the profiler to the second, as a profiler on a node with more CPUs
than busy threads mostly runs; "same" pins both to the first; "free" pins
nothing.
"""
import os

CHOICES = ("apart", "same", "free")
# Read once: place() narrows this process's own set.
ALLOWED = sorted(os.sched_getaffinity(0))


def _cpus(mode):
    """(the target's CPU set, the profiler's), None where not pinned."""
    if mode == "free" or (mode == "apart" and len(ALLOWED) < 2):
        return None, None
    target = {ALLOWED[0]}
    return target, ({ALLOWED[1]} if mode == "apart" else target)


def place(mode, target_pid):
    """Pin every thread target_pid has now, and this process: the
    profilers it starts after inherit its CPU."""
    target, prof = _cpus(mode)
    if target is None:
        return
    os.sched_setaffinity(0, prof)
    for tid in os.listdir("/proc/%d/task" % target_pid):
        try:
            os.sched_setaffinity(int(tid), target)
        except ProcessLookupError:
            pass  # a thread that ended meanwhile


def describe(mode):
    target, prof = _cpus(mode)
    if target is None:
        return "CPUs not pinned"
    return "target on CPU %d, profiler on CPU %d" % (min(target), min(prof))
