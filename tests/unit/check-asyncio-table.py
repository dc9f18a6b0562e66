#!/usr/bin/env python3
"""pystate/asyncio_table.c: generated, and true of every interpreter here.

Two checks:
  1. tools/gen-asyncio-offsets reproduces the committed file (SKIP when a
     build it was made from has no DWARF here, or none has);
  2. every Python 3.8-3.13 the integration harness finds, including the
     stripped builds no DWARF describes (Debian's /usr/bin/python3.11, the
     root's python3.13), and the free-threaded 3.13t, agrees with its row: a probe run by that
     interpreter creates a task blocked on a future and reads the task's
     and the future's own memory through ctypes at the row's offsets,
     comparing with what the objects say (get_loop(), get_coro(),
     get_name(), _fut_waiter, the states, the FutureIter's future,
     __basicsize__).
Exits 1 on any failure, 77 when nothing could be checked.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TABLE = os.path.join(REPO, "pystate", "asyncio_table.c")
TOOL = os.path.join(REPO, "tools", "gen-asyncio-offsets")
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import harness  # noqa: E402

PROBE = r'''
import asyncio, ctypes, json, sys, sysconfig
rows = json.loads(sys.argv[1])
ft = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
row = rows.get("%d.%d%s" % (sys.version_info[0], sys.version_info[1], ft))
if row is None:
    print("NOROW"); sys.exit(0)
def ptr(o, k): return ctypes.c_void_p.from_address(id(o) + row[k]).value
def i32(o, k): return ctypes.c_int.from_address(id(o) + row[k]).value
bad = []
def check(what, ok):
    if not ok: bad.append(what)
async def blocked(fut):
    await fut
async def main():
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    t = loop.create_task(blocked(fut), name="probe-task")
    await asyncio.sleep(0)
    check("task_loop", ptr(t, "task_loop") == id(loop))
    check("task_coro", ptr(t, "task_coro") == id(t.get_coro()))
    check("task_name", ptr(t, "task_name") == id(t.get_name()))
    check("task_fut_waiter", ptr(t, "task_fut_waiter") == id(fut))
    check("task_state pending", i32(t, "task_state") == row["state_pending"])
    check("fut_loop", ptr(fut, "fut_loop") == id(loop))
    check("fut_state pending", i32(fut, "fut_state") == row["state_pending"])
    it = fut.__await__()
    check("futureiter_future", ptr(it, "futureiter_future") == id(fut))
    check("task_size", type(t).__basicsize__ == row["task_size"])
    check("fut_size", type(fut).__basicsize__ == row["fut_size"])
    t.cancel()
    try:
        await t
    except asyncio.CancelledError:
        pass
    check("state_cancelled", i32(t, "task_state") == row["state_cancelled"])
    f2 = loop.create_future()
    f2.set_result(1)
    check("state_finished", i32(f2, "fut_state") == row["state_finished"])
asyncio.run(main())
print("BAD " + ",".join(bad) if bad else "OK")
'''


def committed_rows(text):
    rows = {}
    for m in re.finditer(r"\.version = 0x03([0-9a-f]{2})0000,(.*?)\}", text, re.S):
        row = {k: int(v, 16) for k, v in re.findall(r"\.(\w+) = 0x([0-9a-f]+)", m.group(2))}
        ft = "t" if ".build = PYBUILD_FT," in m.group(2) else ""
        rows["3.%d%s" % (int(m.group(1), 16), ft)] = row
    return rows


def sources(text):
    return sorted(set(re.findall(r"from (.*?)\.\n|\* (.*?) gives an identical row", text)))


def main():
    import json
    with open(TABLE) as f:
        committed = f.read()
    failed = ran = 0
    r = subprocess.run([sys.executable, TOOL, "--stdout"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if r.returncode == 77:
        print("SKIP regenerating: no _asyncio build with DWARF here (%s)" % r.stderr.strip()[-200:])
    elif r.returncode != 0:
        print("FAIL gen-asyncio-offsets exited %d:\n%s" % (r.returncode, r.stderr[-2000:]))
        failed += 1
    elif sources(r.stdout) != sources(committed):
        print("SKIP regenerating: the _asyncio builds with DWARF here are not those the table "
              "was made from")
    elif r.stdout != committed:
        print("FAIL pystate/asyncio_table.c differs from tools/gen-asyncio-offsets --stdout")
        failed += 1
    else:
        print("PASS asyncio table: tools/gen-asyncio-offsets reproduces pystate/asyncio_table.c")
        ran += 1
    rows = json.dumps(committed_rows(committed))
    interps, _ = harness.discover()
    for interp in interps:
        if not ((3, 8) <= interp.version[:2] <= (3, 13)):
            continue
        try:
            p = subprocess.run(interp.command(["-c", PROBE, rows]), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
        except subprocess.SubprocessError as e:
            print("FAIL %s: probe: %s" % (interp.label, e))
            failed += 1
            continue
        out = p.stdout.strip()
        if p.returncode != 0 or not out:
            print("FAIL %s: probe exited %d: %s" % (interp.label, p.returncode, p.stderr[-500:]))
            failed += 1
        elif out == "NOROW":
            print("FAIL %s: no row in pystate/asyncio_table.c" % interp.label)
            failed += 1
        elif out != "OK":
            print("FAIL %s: the row disagrees with the running interpreter: %s" % (interp.label, out))
            failed += 1
        else:
            print("PASS %s: its _asyncio row matches a live task and future" % interp.label)
            ran += 1
    if failed:
        return 1
    return 0 if ran else 77


if __name__ == "__main__":
    sys.exit(main())
