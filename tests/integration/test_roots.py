#!/usr/bin/env python3
"""spy and the files of a process that runs in another root.

Each Python of tools/pyroot's Debian root runs targets/rooted.py twice: in a
container (its own mount namespace, pivot_root: its files are not ours) and
under a plain chroot (our namespace: /proc/PID/maps paths carry the root's
prefix). The target sleeps in C inside a library the test built, which it
has replaced on disk with a FIFO. For each:
  - dump: the Python stack, at the target's marker lines;
  - dump --native-all: finishes (a FIFO opened by name would hang spy), and
    the native frames are named from the root's own files: plant_wait in
    the replaced library, and plant_nap inlined in it, which only the
    library's debug file in the root's /usr/lib/debug names (its DWARF in
    a dwz file too, when dwz is installed); clock_nanosleep in the root's
    libc, the eval loop in the root's python, with the Python frames above
    the library's;
  - dump --core of a gcore taken from here (once the target has swapped
    its FIFO for a file of junk, or gdb would hang): the container's core names
    paths of the container's root, which spy does not read unless told
    (exit 5, naming --root); with --root ROOT, and with --exe ROOT/usr/bin/
    python3.13, the stack is the live one. The chroot's core names our own
    paths, whose build-ids match: no option needed.
Needs root (namespaces, chroot), gcc, and the pyroot (`tools/pyroot build`):
SKIPs saying which is missing.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import harness
from harness import Frame

PYROOT = os.path.join(harness.REPO, "tools", "pyroot")
TARGET = harness.target_path("rooted.py")
PYTHONS = ("python3.13", "python3.14", "python3.15")
PLANT_C = """
#include <unistd.h>
int plant_wait(int n);
/* Inlined: its name is only in the DWARF of the library's debug file. */
static inline __attribute__((always_inline)) void plant_nap(void)
{
	usleep(50000);
}
int plant_wait(int n)
{
	int i;
	for (i = 0; i < n; i++) {
		plant_nap();
	}
	return i;
}
"""
TOOLS = ("gcc", "objcopy", "strip", "readelf")


def build_lib(tmp, root, placed):
    """libplant.so, stripped, its DWARF in a debug file placed in the root's
    /usr/lib/debug/.build-id, as a distro's -dbgsym package places it; with
    dwz (if installed) that file's DWARF is shared with a sibling through a
    dwz file under /usr/lib/debug/.dwz, as Debian's are. Returns the
    library; what it put in the root is added to placed, for the caller to
    remove."""
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        raise harness.SkipInterp("%s not found, cannot build the library"
                                 % ", ".join(missing))
    src = os.path.join(tmp, "plant.c")
    lib = os.path.join(tmp, "libplant.so")
    with open(src, "w") as f:
        f.write(PLANT_C)
    run = lambda *argv: subprocess.run(argv, check=True, stdout=subprocess.PIPE)
    run("gcc", "-shared", "-fPIC", "-O1", "-g", "-o", lib, src)
    if shutil.which("dwz"):
        sibling = os.path.join(tmp, "libsibling.so")
        shutil.copy(lib, sibling)
        alt = "/usr/lib/debug/.dwz/%s.debug" % os.path.basename(tmp)
        run("dwz", "-m", os.path.join(tmp, "common.debug"), "-M", alt, lib, sibling)
        os.makedirs(os.path.dirname(root + alt), exist_ok=True)
        placed.append(root + alt)
        shutil.copy(os.path.join(tmp, "common.debug"), root + alt)
    notes = run("readelf", "-n", lib).stdout.decode()
    build_id = notes.split("Build ID:")[1].split()[0]
    debug = os.path.join(root, "usr/lib/debug/.build-id", build_id[:2],
                         build_id[2:] + ".debug")
    os.makedirs(os.path.dirname(debug), exist_ok=True)
    placed.append(debug)
    run("objcopy", "--only-keep-debug", lib, debug)
    run("strip", "-s", lib)
    return lib


def pyroot_path():
    if os.geteuid() != 0:
        return None, "needs root (mount namespaces, chroot)"
    r = subprocess.run([PYROOT, "path"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL)
    if r.returncode != 0:
        return None, "no pyroot built (tools/pyroot build)"
    return r.stdout.decode().strip(), None


class RootTarget(harness.Target):
    """rooted.py under tools/pyroot run MODE; the PID is python's own."""

    def __init__(self, python, mode, tmp, lib):
        self.interp = None
        self.script = os.path.join(tmp, "rooted.py")
        self.argv = [PYROOT, "run", mode, "--bind", tmp, "--", python,
                     self.script, lib]
        self._err = tempfile.TemporaryFile()
        self.proc = harness.spawn(self.argv, stdout=subprocess.PIPE,
                                  stderr=self._err)
        self.pid = self.proc.pid
        self.info = self._wait_ready(60)


def main_thread(text, pid):
    try:
        d = harness.parse_dump(text)
    except harness.DumpParseError as e:
        return None, "cannot parse dump: %s" % e
    for t in d.threads:
        if t.tid == pid:
            return t, None
    return None, "no thread %d in the dump" % pid


def python_frames(frames):
    return [f for f in frames if f.line is not None]


def check_dump(args, pid, want, what):
    r = harness.run_spy(args, timeout=60)
    if r.rc != 0 or r.timed_out:
        return None, "%s: %s" % (what, r.describe())
    t, why = main_thread(r.out, pid)
    if why:
        return None, "%s: %s" % (what, why)
    got = python_frames(t.frames)
    if got != want:
        return t, "%s: Python frames %s, expected %s" % (what, got, want)
    return t, None


def check_native(python, pid, want):
    t, why = check_dump(["dump", "--native-all", "--pid", str(pid)], pid,
                        want, "dump --native-all")
    if why:
        return [why]
    names = [(f.func, f.file) for f in t.frames]
    problems = []
    for func, lib in (("plant_wait", "libplant.so"),
                      ("plant_nap", "libplant.so"),
                      ("clock_nanosleep", "libc.so.6"),
                      ("PyEval_EvalCode", python)):
        if (func, lib) not in names:
            problems.append("dump --native-all: no %s (%s) in %s"
                            % (func, lib, names))
    if not problems:
        # The unwind went through the replaced library up to Python.
        at = names.index(("plant_wait", "libplant.so"))
        if t.frames[at + 1:] and not python_frames(t.frames[at + 1:]):
            problems.append("dump --native-all: no Python frame above "
                            "plant_wait: %s" % names)
    return problems


def swap_fifo(lib):
    """Have the target replace its FIFO with a regular file (gdb would hang)."""
    open(lib + ".swap", "w").close()
    if not harness.wait_for(lambda: os.path.exists(lib + ".swapped"), 10):
        raise harness.HarnessError("the target did not replace its FIFO")


def gcore(pid, tmp):
    exe = shutil.which("gcore")
    if not exe:
        return None, "gcore not installed"
    prefix = os.path.join(tmp, "core")
    r = subprocess.run([exe, "-o", prefix, str(pid)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    path = "%s.%d" % (prefix, pid)
    if r.returncode != 0 or not os.path.exists(path):
        return None, "gcore failed: %s" % r.stderr.decode(errors="replace")[-200:]
    return path, None


def check_cores(python, mode, pid, root, tmp, want):
    core, why = gcore(pid, tmp)
    if not core:
        return ["core: " + why]
    problems = []
    if mode == "--container":
        r = harness.run_spy(["dump", "--core", core], timeout=60)
        if r.rc != 5 or "--root" not in r.err:
            problems.append("core without --root: expected exit 5 naming "
                            "--root, got %s" % r.describe())
        variants = (["--root", root],
                    ["--exe", os.path.join(root, "usr/bin", python)])
    else:
        variants = ([],)
    for extra in variants:
        _, why = check_dump(["dump", "--core", core] + extra, pid, want,
                            "dump --core %s" % " ".join(extra))
        problems.append(why)
    os.unlink(core)
    return problems


def run_mode(python, mode, root):
    tmp = tempfile.mkdtemp(prefix="spy-roots-")
    copied = os.path.join(root, tmp.lstrip("/"))
    placed = []
    try:
        shutil.copy(TARGET, tmp)
        lib = build_lib(tmp, root, placed)
        m = harness.markers(TARGET)
        script = os.path.join(tmp, "rooted.py")
        want = [Frame("leaf", script, m["wait"]), Frame("outer", script, m["call"]),
                Frame("<module>", script, m["main"])]
        with RootTarget(python, mode, tmp, lib) as t:
            problems = []
            _, why = check_dump(["dump", "--pid", str(t.pid)], t.pid, want, "dump")
            problems.append(why)
            problems += check_native(python, t.pid, want)
            # Where the target sees the library: in the chroot, the copy under the root.
            swap_fifo(lib if mode == "--container" else os.path.join(copied, "libplant.so"))
            problems += check_cores(python, mode, t.pid, root, tmp, want)
            return [p for p in problems if p]
    finally:
        for path in placed:
            if os.path.exists(path):
                os.unlink(path)
            # And its directory, if this made it (.build-id/xx, .dwz).
            try:
                os.rmdir(os.path.dirname(path))
            except OSError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
        # --chroot copies the bound directory into the root, --container
        # makes an empty one there to mount it on.
        if copied.startswith(root + "/tmp/"):
            shutil.rmtree(copied, ignore_errors=True)


def main():
    rep = harness.reporter("roots")
    root, why = pyroot_path()
    if not root:
        rep.skip("roots", why)
        rep.finish(why)
    if not shutil.which("dwz"):
        rep.skip("dwz", "dwz not installed: debug files whose DWARF lives in a "
                 "dwz file (Debian's) are not checked")
    no_ptrace = harness.ptrace_problem()
    for python, mode in [(p, m) for p in PYTHONS for m in ("--container", "--chroot")]:
        label = "%s %s" % (python, mode.lstrip("-"))
        if not os.access(os.path.join(root, "usr/bin", python), os.X_OK):
            rep.skip(label, "the pyroot has no %s" % python)
            continue
        if no_ptrace:
            rep.skip(label, no_ptrace)
            continue
        rep.run(label, run_mode, python, mode, root)
    rep.finish()


if __name__ == "__main__":
    main()
