#!/usr/bin/env python3
"""spy dump --tasks and record --async against asyncio tasks whose tree is known.

targets/tasks.py runs two event loops (MainThread's and "side-loop"'s) with
a gather of named tasks, a chain three coroutines deep, a task blocked on an
asyncio.Queue, an unnamed task ("Task-1", asyncio.run's) awaiting another,
and a task running CPU work. On every interpreter found:

  3.14+      dump --tasks (text and --json): every task's name, state,
             coroutine chain (functions and lines, innermost first, lines
             from the target's "# @name" markers) and awaited-by edges,
             exactly; the running task's stack; the await tree as drawn.
             record --async on the busy variant: samples of each CPU task
             under its `task "NAME"` frame, then its coroutines, with none
             of the event loop's frames (no _run_once) beneath a task; with
             -t under the thread root; the flame graph has each task. On
             the Debian root's interpreters, dump --tasks --core of a
             gcore of the target gives the same tree.
  3.8-3.13   the same checks, read from the _asyncio module's own state
             (pystate/tasks-legacy.c), but nothing there keeps the order
             tasks were made in: they come in name order ("Task-2" before
             "Task-10"), in the list and among siblings of the tree. Before
             3.11 code objects have no qualified name: "get", not
             "Queue.get".
  older      both commands refuse with exit 4 and exactly the version line.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile

import harness

TARGET = harness.target_path("tasks.py")
OLD_TARGET = harness.target_path("record_target.py")
M = harness.markers(TARGET)


# The tree, per loop thread: task -> (chain innermost first as (function,
# marker or None for a library frame), awaited by, running).
HERE = ("tasks.py",)
MAIN_LOOP = [
    ("Task-1", [("main", "main")], [], False),
    ("chain", [("leaf", "leaf"), ("middle", "middle"), ("top", "top")], ["Task-1"], False),
    ("consumer", [("Queue.get", None), ("consume", "consume")], [], False),
    ("gatherer", [("gather_two", "gather_two")], [], False),
    ("cruncher", [("crunch", "crunch")], [], True),
    ("w1", [("worker", "worker")], ["gatherer"], False),
    ("w2", [("worker", "worker")], ["gatherer"], False),
]
SIDE_LOOP = [
    ("side-main", [("side", "side")], [], False),
    ("sleeper", [("nap", "nap")], ["side-main"], False),
]
MAIN_TREE = [
    '\u251c\u2500\u2500 "Task-1" main',
    '\u2502   \u2514\u2500\u2500 "chain" top',
    '\u251c\u2500\u2500 "consumer" consume',
    '\u251c\u2500\u2500 "gatherer" gather_two',
    '\u2502   \u251c\u2500\u2500 "w1" worker',
    '\u2502   \u2514\u2500\u2500 "w2" worker',
    '\u2514\u2500\u2500 "cruncher" crunch (running)',
]
SIDE_TREE = [
    '\u2514\u2500\u2500 "side-main" side',
    '    \u2514\u2500\u2500 "sleeper" nap',
]


def natural(name):
    """The sort key of pystate/tasks-legacy.c's name order."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t)
            for t in re.split(r"([0-9]+)", name) if t]


def by_name(loop):
    """A loop's expected tasks as 3.8-3.13 list them."""
    return sorted(loop, key=lambda t: natural(t[0]))


def tree_by_name(lines):
    """An expected await tree with each node's children in name order."""
    def parse(i, depth):
        kids = []
        while i < len(lines):
            d = lines[i].index("\u2500\u2500 ") // 4
            if d < depth:
                break
            node, i = lines[i][4 * d + 4:], i + 1
            sub, i = parse(i, depth + 1)
            kids.append((node, sub))
        return kids, i

    def render(kids, prefix, out):
        kids = sorted(kids, key=lambda k: natural(k[0].split('"')[1]))
        for j, (node, sub) in enumerate(kids):
            last = j == len(kids) - 1
            out.append(prefix + ("\u2514\u2500\u2500 " if last else "\u251c\u2500\u2500 ") + node)
            render(sub, prefix + ("    " if last else "\u2502   "), out)
        return out

    return render(parse(0, 0)[0], "", [])


def legacy(interp):
    return interp.version[:2] < (3, 14)


def old_names(interp, func):
    """Before 3.11 a frame's function is co_name: no class in it."""
    return func.rsplit(".", 1)[-1] if interp.version[:2] < (3, 11) else func


def chain_problems(interp, name, got, want):
    """got: [{"function", "file", "line"}]; want: [(function, marker)]."""
    funcs = [old_names(interp, w[0]) for w in want]
    if [f["function"] for f in got] != funcs:
        return ["task %s: chain %r, expected %r" % (name, [f["function"] for f in got], funcs)]
    p = []
    for f, (func, marker) in zip(got, want):
        if marker is None:
            # The standard library's own line moves between releases.
            if not f["file"].endswith("/asyncio/queues.py") or not f["line"]:
                p.append("task %s: %s at %s:%s" % (name, func, f["file"], f["line"]))
        elif os.path.basename(f["file"]) != "tasks.py" or f["line"] != M[marker]:
            p.append("task %s: %s at %s:%s, expected tasks.py:%d"
                     % (name, func, f["file"], f["line"], M[marker]))
    return p


def loop_problems(interp, loop, want, pid_tid, thread):
    p = []
    if loop["thread"] != thread or (pid_tid and loop["tid"] != pid_tid):
        p.append("loop %s: thread %r (tid %r), expected %r"
                 % (loop["loop"], loop["thread"], loop["tid"], thread))
    tasks = loop["tasks"]
    names = [t["name"] for t in tasks]
    if names != [w[0] for w in want]:
        return p + ["loop of %s: tasks %r, expected %r" % (thread, names, [w[0] for w in want])]
    by_addr = dict((t["address"], t["name"]) for t in tasks)
    for t, (name, chain, awaiters, running) in zip(tasks, want):
        p += chain_problems(interp, name, t["chain"], chain)
        got_aw = [by_addr.get(a, a) for a in t["awaited_by"]]
        if got_aw != awaiters:
            p.append("task %s: awaited by %r, expected %r" % (name, got_aw, awaiters))
        if t["state"] != "pending" or t["running"] != running or t["chain_truncated"]:
            p.append("task %s: state %s running %s truncated %s"
                     % (name, t["state"], t["running"], t["chain_truncated"]))
        if running:
            fr = (t["stack"] or {}).get("frames", [])
            funcs = [f["function"] for f in fr]
            if funcs[:2] != ["spin", "crunch"] or \
                    old_names(interp, "BaseEventLoop._run_once") not in funcs or \
                    fr[0]["line"] not in (M["spin"] - 1, M["spin"]) or fr[1]["line"] != M["crunch"]:
                p.append("task %s: running stack %r" % (name, funcs))
        elif t["stack"] is not None:
            p.append("task %s: a stack, but it is not running" % name)
    return p


def tree_lines(text, thread):
    """The await tree lines of the loop section of thread, indentation cut."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Event loop ") and ('"%s"' % thread) in line:
            j = lines.index("    await tree:", i)
            out = []
            for k in range(j + 1, len(lines)):
                if not lines[k].startswith("    "):
                    break
                out.append(lines[k][4:])
            return out
    return None


def check_dump(target):
    r = harness.run_spy(["dump", "--tasks", "--json", "--pid", str(target.pid)])
    if r.rc != 0:
        return ["dump --tasks --json: " + r.describe()]
    p = tree_problems(target.interp, json.loads(r.out)["asyncio"], target.pid)
    r = harness.run_spy(["dump", "--tasks", "--pid", str(target.pid)])
    if r.rc != 0:
        return p + ["dump --tasks: " + r.describe()]
    if "asyncio: 9 tasks in 2 event loops" not in r.out:
        p.append("text: no 'asyncio: 9 tasks in 2 event loops' line")
    for thread, want in (("MainThread", MAIN_TREE), ("side-loop", SIDE_TREE)):
        want = tree_by_name(want) if legacy(target.interp) else want
        got = tree_lines(r.out, thread)
        if got != want:
            p.append("text: await tree of %s %r, expected %r" % (thread, got, want))
    want_line = '        leaf (%s:%d)' % (TARGET, M["leaf"])
    if target.interp.mode != "chroot" and want_line not in r.out.splitlines():
        p.append("text: no line %r" % want_line)
    return p


def tree_problems(interp, doc, pid):
    """The checks of a --json document's "asyncio" against the known tree."""
    p = []
    if doc["error"] is not None or doc["total"] != len(MAIN_LOOP) + len(SIDE_LOOP):
        p.append("asyncio: error %r, total %r" % (doc["error"], doc["total"]))
    loops = dict((lp["thread"], lp) for lp in doc["loops"])
    if sorted(loops) != ["MainThread", "side-loop"]:
        return p + ["loops on threads %r" % sorted(loops)]
    order = by_name if legacy(interp) else list
    p += loop_problems(interp, loops["MainThread"], order(MAIN_LOOP), pid, "MainThread")
    p += loop_problems(interp, loops["side-loop"], order(SIDE_LOOP), None, "side-loop")
    return p


def check_core(interp, target):
    """dump --tasks --core of a gcore of the target: the same tree."""
    tmp = tempfile.mkdtemp(prefix="spy-tasks-core.")
    argv = interp.tool(["gcore", "-o", os.path.join(tmp, "core"), str(target.pid)], binds=(tmp,))
    if not argv:
        shutil.rmtree(tmp, ignore_errors=True)
        raise harness.SkipInterp("no gcore to take a core with")
    try:
        r = harness.spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, err = r.communicate(timeout=120)
        core = os.path.join(tmp, "core.%d" % target.pid)
        if r.returncode != 0 or not os.path.exists(core):
            return ["gcore failed: %s" % err.decode(errors="replace")[-200:]]
        root = ["--root", interp.root] if interp.mode == "container" else []
        res = harness.run_spy(["dump", "--tasks", "--json", "--core", core] + root, timeout=60)
        if res.rc != 0:
            return ["dump --tasks --core: " + res.describe()]
        return ["--core: " + x for x in tree_problems(interp, json.loads(res.out)["asyncio"], target.pid)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def folded_stacks(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#") and line.strip():
                stack, count = line.rstrip("\n").rsplit(" ", 1)
                yield stack.split(";"), int(count)


def check_record(interp):
    p = []
    tmp = tempfile.mkdtemp(prefix="spy-tasks.")
    try:
        with harness.Target(interp, TARGET, ["busy"]) as target:
            # --native merges native frames in; slow at first (symbols), so
            # it only needs some samples of each.
            for extra, least in (([], 20), (["-t"], 20), (["--native"], 1)):
                out = os.path.join(tmp, "a%s.folded" % len(extra))
                r = harness.run_spy(["record", "--async", "--pid", str(target.pid), "-d",
                                     "3" if least == 1 else "2", "-q", "-o", out] + extra,
                                    timeout=60)
                if r.rc != 0:
                    return p + ["record --async %s: %s" % (" ".join(extra), r.describe())]
                per_task = {}
                for frames, n in folded_stacks(out):
                    names = [f.split(" (")[0] for f in frames]
                    k = next((i for i, f in enumerate(names) if f.startswith('task "')), None)
                    if k is None:
                        continue
                    below = names[k + 1:]
                    if any(f.endswith("_run_once") or f.startswith("BaseEventLoop.") for f in below):
                        p.append("record --async: loop frames under a task: %s" % ";".join(names))
                    if extra == ["-t"] and \
                            not names[k - 1].startswith('thread %d "MainThread"' % target.pid):
                        p.append("record --async -t: %r above the task frame" % names[k - 1])
                    key = (names[k], below[0] if below else None,
                           frames[k + 1].rsplit(":", 1)[-1].rstrip(")") if below else None)
                    per_task[key] = per_task.get(key, 0) + n
                want = {('task "cruncher"', "crunch_slices", str(M["crunch_slices"])),
                        ('task "hasher"', "hash_loop", str(M["hash_loop"]))}
                for key in want:
                    # 2 s at 100 Hz, the two share one thread: ~100 each.
                    if per_task.get(key, 0) < least:
                        p.append("record --async %s: %d samples of %s;%s (line %s), got %r"
                                 % (" ".join(extra), per_task.get(key, 0), key[0], key[1],
                                    key[2], per_task))
            # The flame graph has each task and its coroutine (the SVG keeps
            # frame names in a script array, JSON-quoted; the folded checks
            # above say how they nest).
            svg = os.path.join(tmp, "a.svg")
            r = harness.run_spy(["record", "--async", "--pid", str(target.pid), "-d", "2",
                                 "-q", "-o", svg])
            if r.rc != 0:
                return p + ["record --async -o a.svg: " + r.describe()]
            with open(svg, encoding="utf-8") as f:
                text = f.read()
            for task, coro in (("cruncher", "crunch_slices"), ("hasher", "hash_loop")):
                if json.dumps('task "%s"' % task) not in text or json.dumps(coro) not in text:
                    p.append("record --async svg: no %s / %s frames" % (task, coro))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return p


def check_refusal(interp, script, args, want):
    p = []
    with harness.Target(interp, script, args) as target:
        for cmd in (["dump", "--tasks"], ["record", "--async", "-d", "1", "-q",
                                          "-o", os.devnull, "-f", "folded"]):
            r = harness.run_spy(cmd + ["--pid", str(target.pid)])
            if r.rc != 4 or r.err_lines() != [want]:
                p.append("%s: %s, expected exit 4 and %r" % (" ".join(cmd[:2]), r.describe(), want))
    return p


def run_one(interp):
    v = interp.version[:2]
    if v < (3, 8):
        return check_refusal(interp, OLD_TARGET, ["split"],
                             "spy: asyncio tasks need Python 3.8 or newer (this is Python %d.%d)" % v)
    p = []
    # A process that never imported asyncio: said (3.15 builds _asyncio in:
    # there it is loaded, with no task), and no failure.
    with harness.Target(interp, OLD_TARGET, ["split"]) as target:
        r = harness.run_spy(["dump", "--tasks", "--pid", str(target.pid)])
        if r.rc != 0 or ("\nasyncio: asyncio is not loaded in the target" not in r.out and
                         "\nasyncio: 0 tasks in 0 event loops\n" not in r.out):
            p.append("dump --tasks without asyncio: " + r.describe())
    with harness.Target(interp, TARGET) as target:
        p += check_dump(target)
        if interp.root:
            p += check_core(interp, target)
    return p + check_record(interp)


def main():
    rep = harness.reporter("tasks")
    harness.for_each_interp(rep, run_one, expect=harness.SUPPORTED, chroot=True)


if __name__ == "__main__":
    main()
