"""Shared code for spy's integration tests (Python 3.7+, stdlib only).

Each test_*.py script runs the built spy (path in $SPY) against small target
scripts in targets/, once per Python interpreter found on this machine, and
prints one line per interpreter (or per check):

    PASS 3.11.7 (pyenv)
    FAIL 3.11.2 (/usr/bin/python3.11): main thread: expected ..., got ...
    PASS 3.14.10 (debian sid, container)
    SKIP 3.9 (not installed): no Python 3.9 found (searched pyenv, PATH, /usr/bin, debian sid root)

then exits 0 (something ran, nothing failed), 1 (something failed) or 77,
meson's skip code, only when nothing could run at all, saying why.

What is in here:
  - interpreter discovery (SPY_PYTHONS overrides; else pyenv, the
    free-threaded 3.13t of tools/pyroot build-ft, PATH, /usr/bin, and the
    Debian development-suite root of tools/pyroot: each of its interpreters
    run inside it as a container would, and under a plain chroot),
  - starting a target and waiting for its "ready {json}" line,
  - running spy with a timeout,
  - parsing `spy dump` text output,
  - /proc/PID/stat and per-task states,
  - markers: expected line numbers come from "# @name" comments in the
    target source, never from numbers written in a test,
  - the per-interpreter reporter.

Every process a test starts goes through spawn(), and only those are ever
signalled or killed (see cleanup()).
"""

import ast
import atexit
import copy
import glob
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# The minor versions spy supports. Every interpreter found is tested,
# whatever its version (one that spy does not support FAILs: exit 4); these
# are the versions a test that asks for it (for_each_interp(expect=...))
# reports as "SKIP <minor> (not installed)" when none of them is found, so
# the matrix shows what was not covered.
SUPPORTED = ("2.7", "3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12",
             "3.13", "3.14", "3.15")

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = os.path.join(HERE, "targets")
REPO = os.path.dirname(os.path.dirname(HERE))
PYROOT = os.path.join(REPO, "tools", "pyroot")

# Which interpreters of the root are run, and how (tools/pyroot run MODE):
# every release build both ways (a container keeps the target's files
# behind /proc/PID/root, a chroot shows them with the root's prefix in
# /proc/PID/maps) in the tests that concern those files (for_each_interp's
# chroot), in a container in the rest; the debug build, whose runtime
# differs, in a container, on one version.
ROOT_RUNS = (("release", None, ("container", "chroot")),
             ("debug", "3.14", ("container",)))
ROOT_NAME = "debian sid root"
# The free-threaded build of tools/pyroot build-ft, run on this machine.
FT_NAME = "free-threaded, tools/pyroot build-ft"
# What a target reads from its environment: pyroot runs programs with a
# clean one, so these are passed in by name.
TARGET_ENV = ("SPY_TARGET_LIFETIME", "PYTHON_JIT")

EXIT_SKIP = 77


class HarnessError(Exception):
    """Something went wrong around spy (a target would not start, ...)."""


class SpyFailed(HarnessError):
    """spy itself failed where a check needs its output to go on: the
    check's FAIL, reported as spy's (not the harness's) with spy's words."""


class SkipInterp(Exception):
    """Raised by a run_one to report this interpreter as SKIP, with why
    (e.g. its C headers are missing, so a test extension cannot be built)."""


# ---------------------------------------------------------------------------
# Processes we started, and only those.

_started = []


def spawn(argv, **kwargs):
    """subprocess.Popen that remembers the child, so cleanup() can reap it."""
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    p = subprocess.Popen(argv, **kwargs)
    _started.append(p)
    return p


def kill(p, sig=signal.SIGKILL, timeout=10):
    """Signal a process started by spawn() (if it still runs) and reap it."""
    if p.poll() is None:
        try:
            p.send_signal(sig)
        except OSError:
            pass
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    for f in (p.stdout, p.stderr):
        if f is not None:
            f.close()
    if p in _started:
        _started.remove(p)


def cleanup():
    while _started:
        kill(_started.pop())


def _on_term(signum, frame):
    # meson sends SIGTERM on timeout or ^C: leave nothing behind.
    cleanup()
    sys.exit(128 + signum)


atexit.register(cleanup)
signal.signal(signal.SIGTERM, _on_term)


# ---------------------------------------------------------------------------
# Interpreters.

class Interp(object):
    """One Python interpreter: path to run, exact version, label to print.

    An interpreter of tools/pyroot's root (root is set) runs inside it:
    path is its path there, command() wraps it in `tools/pyroot run MODE`, and
    host_path() says where a file of the root is on this side.
    """

    def __init__(self, path, version, executable, origin, root=None,
                 mode=None, free_threaded=False, nodebug=False, env=None):
        # Run its sys.executable: a pyenv shim given in SPY_PYTHONS would
        # otherwise stand between us and the interpreter (a shell process
        # whose pid is not the target's).
        if root:
            self.path = executable
        else:
            self.path = executable if os.access(executable, os.X_OK) else path
        self.given = path                 # where it was found
        self.version = version            # (3, 11, 7)
        self.executable = executable      # its sys.executable
        self.origin = origin              # "pyenv", or where it was found
        self.root = root                  # the pyroot's host path, or None
        self.mode = mode                  # "container" or "chroot" with root
        # A --disable-gil build; gil: whether it runs with a GIL, which a
        # free-threaded build does only when told (with_gil()).
        self.free_threaded = free_threaded
        self.gil = not free_threaded
        # The root's debug files hidden (tools/pyroot run --no-debug), as
        # on a machine without the -dbg packages.
        self.nodebug = nodebug
        self.env = dict(env or {})        # set in the target's environment
        self.minor = "%d.%d" % version[:2]
        vs = "%d.%d.%d" % version
        self.vstring = vs
        self.label = "%s (%s)" % (vs, origin)

    def argv(self, args):
        """The command line of the interpreter's process running args."""
        return [self.path] + list(args)

    def with_gil(self):
        """This free-threaded interpreter run with PYTHON_GIL=1, which spy
        must treat as a GIL build: a copy, labelled so."""
        c = copy.copy(self)
        c.gil, c.env = True, dict(self.env, PYTHON_GIL="1")
        c.label = "%s, PYTHON_GIL=1)" % self.label[:-1]
        return c

    def command(self, args, binds=()):
        """What to start (spawn it, or give it to spy to launch) to run the
        interpreter with args. In the root, targets/ and each directory of
        binds (shared with the target) are at the same path as here, so
        file names compare as they do outside; every step of tools/pyroot
        execs, so the process started is the interpreter itself."""
        # env execs too: the process keeps the pid started.
        argv = ((["env"] + ["%s=%s" % kv for kv in sorted(self.env.items())]
                 if self.env else []) + self.argv(args))
        if not self.root:
            return argv
        return _pyroot_run(self.mode, argv, binds, self.nodebug)

    def variant(self, what, nodebug=False, env=None):
        """The same interpreter run another way, labelled with what."""
        v = Interp(self.given, self.version, self.executable,
                   "%s, %s" % (self.origin, what), self.root, self.mode,
                   self.free_threaded, nodebug, env)
        v.path = self.path
        return v

    def tool(self, argv, binds=()):
        """argv to run a program of the interpreter's own system: inside
        the root (as a container) when it has that program, so that the
        tool matches the target's libc; else this machine's; None if
        neither has it."""
        if self.root and os.path.exists(self.host_path("/usr/bin/" + argv[0])):
            return _pyroot_run("container", argv, binds)
        found = shutil.which(argv[0])
        return [found] + list(argv[1:]) if found else None

    def host_path(self, path):
        """Where a path the interpreter sees is, seen from here."""
        return self.root + path if self.root else path

    def __repr__(self):
        return "Interp(%r, %r)" % (self.path, self.label)


def _pyroot_run(mode, argv, binds=(), nodebug=False):
    cmd = [PYROOT, "run", "--" + mode] + (["--no-debug"] if nodebug else [])
    for d in (TARGETS,) + tuple(binds):
        cmd += ["--bind", d]
    for name in TARGET_ENV:
        cmd += ["--env", name]
    return cmd + ["--"] + list(argv)


_PY_NAME = re.compile(r"^python(2\.7|3\.\d+t?)$")


def _pyenv_root():
    root = os.environ.get("PYENV_ROOT")
    if root:
        return root
    if shutil.which("pyenv"):
        try:
            out = subprocess.run(["pyenv", "root"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL,
                                 universal_newlines=True, timeout=20).stdout
            if out.strip():
                return out.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return os.path.expanduser("~/.pyenv")


def _is_elf(path):
    # PATH holds pyenv shims (shell scripts that pick a version at run time);
    # the real interpreters behind them are found through pyenv itself.
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _candidates():
    """[(path, origin, explicit)] in order of preference."""
    env = os.environ.get("SPY_PYTHONS", "")
    if env.strip():
        return [(p, p, True) for p in env.split(os.pathsep) if p.strip()]
    out = []
    versions = os.path.join(_pyenv_root(), "versions")
    for vdir in sorted(glob.glob(os.path.join(versions, "*"))):
        bindir = os.path.join(vdir, "bin")
        names = sorted(n for n in _listdir(bindir) if _PY_NAME.match(n))
        names += [n for n in ("python3", "python2", "python")
                  if not names and os.path.exists(os.path.join(bindir, n))]
        if names:
            out.append((os.path.join(bindir, names[0]), "pyenv", False))
    ft = ft_interp()
    if ft:
        out.append((ft, FT_NAME, False))
    for d in os.environ.get("PATH", "").split(os.pathsep):
        for n in sorted(_listdir(d)):
            p = os.path.join(d, n)
            if _PY_NAME.match(n) and _is_elf(p):
                out.append((p, p, False))
    for p in sorted(glob.glob("/usr/bin/python3.*")):
        if _PY_NAME.match(os.path.basename(p)) and _is_elf(p):
            out.append((p, p, False))
    return out


def _listdir(d):
    try:
        return os.listdir(d or ".")
    except OSError:
        return []


_PROBE = ("import sys, sysconfig; print(tuple(sys.version_info[:3])); "
          "print(sys.executable); "
          "print(bool(sysconfig.get_config_var('Py_GIL_DISABLED')))")


def probe(path, wrap=lambda argv: argv):
    """Run an interpreter to learn its exact version: ((x, y, z), executable,
    free-threaded). wrap(argv) gives the command that runs argv (for the
    root's)."""
    r = subprocess.run(wrap([path, "-c", _PROBE]), stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=60)
    if r.returncode != 0:
        raise HarnessError("exit %d: %s" % (r.returncode,
                                             _last_line(r.stderr)))
    lines = r.stdout.splitlines()
    version = tuple(ast.literal_eval(lines[0].strip()))
    if len(version) != 3 or not all(isinstance(v, int) for v in version):
        raise HarnessError("unexpected version output %r" % r.stdout)
    executable = lines[1].strip() if len(lines) > 1 else ""
    ft = len(lines) > 2 and lines[2].strip() == "True"
    return version, executable or path, ft


_discovered = []


_variants = []


def host_python():
    """The newest interpreter with a GIL found outside the root, for the
    benches that run a target as a plain command (a root's path means
    nothing on the host); None if there is none."""
    interps = [i for i in discover()[0] if not i.root and not i.env and not i.free_threaded]
    return interps[-1].path if interps else None


def discover(chroot=False, variants=False):
    """Find interpreters. Returns (interps, problems).

    interps are deduplicated by the real path of their sys.executable and
    sorted by version, the root's among the machine's; problems is
    [(label, reason, explicit)] for candidates that could not be run
    (explicit: it came from SPY_PYTHONS, or the root has it and it does not
    run) and for the root's that are absent, saying why. Found once per
    process.

    variants: also the root's release interpreters without their debug
    files, and with the JIT (root_variants), for the tests of what debug
    files change (native symbols).

    chroot: also the root's interpreters in chroot mode. Only tests of how
    spy reaches the target's files (its ELF files, sources, core mappings)
    need them: the two modes differ in the paths /proc shows, not in what
    the walker meets, so the rest run each of the root's interpreters once,
    in a container, as production does (every version still gets its line;
    SPY_PYTHONS, the caller's choice, is not cut).
    """
    if not _discovered:
        _discovered.append(_discover())
    interps, problems = _discovered[0]
    if variants:
        if not _variants:
            _variants.append(root_variants(interps))
        interps = sorted(interps + _variants[0][0],
                         key=lambda i: (i.version, i.label))
        problems = problems + _variants[0][1]
    if not chroot and not os.environ.get("SPY_PYTHONS", "").strip():
        interps = [i for i in interps if i.mode != "chroot"]
    return list(interps), list(problems)


_JIT_PROBE = "import sys; j = getattr(sys, '_jit', None); print(bool(j and j.is_available()))"


def root_variants(interps):
    """(interps, problems): each release interpreter of the root also
    without its debug files, and, from 3.14 (Debian builds them with the
    experimental JIT), without them and with PYTHON_JIT=1: the builds users
    run, which the -dbg packages the root installs would otherwise hide."""
    out, problems = [], []
    for i in interps:
        if not i.root or i.origin.split(",")[0] != _root_kind_name("release"):
            continue
        out.append(i.variant("no debug files", nodebug=True))
        if i.version < (3, 14):
            continue
        try:
            r = subprocess.run(i.command(["-c", _JIT_PROBE]),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True,
                               timeout=60)
            jit = r.stdout.strip() == "True"
        except (OSError, subprocess.SubprocessError) as e:
            problems.append((i.label + " JIT", "cannot probe: %s" % e, True))
            continue
        if jit:
            out.append(i.variant("no debug files, PYTHON_JIT=1", nodebug=True,
                                 env={"PYTHON_JIT": "1"}))
        else:
            problems.append(("%s (%s, PYTHON_JIT=1)" % (i.vstring, i.origin),
                             "this build has no JIT (sys._jit.is_available() "
                             "is false)", False))
    return out, problems


def _discover():
    interps, problems, seen = [], [], set()
    explicit_root = []
    for path, origin, explicit in _candidates():
        if path.startswith("pyroot-"):
            explicit_root.append(path)
            continue
        try:
            version, executable, ft = probe(path)
        except (OSError, ValueError, SyntaxError, IndexError,
                subprocess.SubprocessError, HarnessError) as e:
            # The free-threaded build is there, so not running is a breakage.
            problems.append((path, "cannot run it: %s" % e,
                             explicit or origin == FT_NAME))
            continue
        key = os.path.realpath(executable)
        if key in seen:
            continue
        seen.add(key)
        interps.append(Interp(path, version, executable, origin,
                              free_threaded=ft))
    if not os.environ.get("SPY_PYTHONS", "").strip() and not ft_interp():
        problems.append(("3.13t (%s)" % FT_NAME, _ft_missing[0], False))
    if explicit_root or not os.environ.get("SPY_PYTHONS", "").strip():
        found, absent = root_interps(explicit_root)
        interps += found
        problems += absent
    labels = {}
    for i in interps:
        labels.setdefault(i.label, []).append(i)
    for same in labels.values():
        if len(same) > 1:              # e.g. two pyenv builds of one version
            for i in same:
                i.label = "%s (%s %s)" % (i.vstring, i.origin, i.given)
    interps.sort(key=lambda i: (i.version, i.label))
    return interps, problems


_ft_missing = []


def ft_interp():
    """The free-threaded python3.13t of tools/pyroot build-ft, or None (then
    _ft_missing[0] says why: not built, or how its build failed)."""
    if _ft_missing:
        return None
    try:
        r = subprocess.run([PYROOT, "ft-path"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        _ft_missing.append("cannot run tools/pyroot: %s" % e)
        return None
    if r.returncode != 0 or not r.stdout.strip():
        why = _last_line(r.stderr)
        _ft_missing.append(why[len("pyroot: "):] if why.startswith("pyroot: ")
                           else why or "tools/pyroot ft-path failed")
        return None
    return os.path.join(r.stdout.strip(), "bin", "python3.13t")


def searched_where():
    if os.environ.get("SPY_PYTHONS", "").strip():
        return "SPY_PYTHONS=%s" % os.environ["SPY_PYTHONS"]
    return "%s/versions/*/bin, tools/pyroot build-ft's python3.13t, " \
        "python2.7/python3.N on PATH, /usr/bin/python3.N, the %s " \
        "(tools/pyroot)" % (_pyenv_root(), ROOT_NAME)


SEARCHED = "searched pyenv, PATH, /usr/bin, %s" % ROOT_NAME


# ---------------------------------------------------------------------------
# The root of tools/pyroot: Debian's development-suite Pythons.

def _root_kind_name(kind):
    return {"release": "debian sid",
            "debug": "debian sid debug"}.get(kind, kind)


def root_interps(explicit=()):
    """(interps, problems) of the pyroot, run as ROOT_RUNS says, or as
    explicit says: SPY_PYTHONS entries "pyroot-MODE=PATH" (PATH inside the
    root, e.g. pyroot-container=/usr/bin/python3.14d).

    A root that is not built, or cannot be run here, is one problem saying
    why and how to build it (not explicit: that is a SKIP); an interpreter
    the root holds that does not run under a mode is an explicit problem,
    a FAIL: the root is there, so that is a breakage, not an absence.
    """
    env = os.environ.get("SPY_PYROOT", "")
    if env == "off" and not explicit:
        return [], [(ROOT_NAME, "not used (SPY_PYROOT=off)", False)]
    how = ("build it with tools/pyroot build (a minute or two, 1.2 GB, cached "
           "outside the tree; .ci/install-deps does it)")
    try:
        r = subprocess.run([PYROOT, "list"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return [], [(ROOT_NAME, "cannot run tools/pyroot: %s" % e, False)]
    if r.returncode != 0:
        why = _last_line(r.stderr)
        if why.startswith("pyroot: "):
            why = why[len("pyroot: "):]
        return [], [(ROOT_NAME, "%s; %s" % (why, how),
                     bool(explicit))]
    if os.geteuid() != 0:
        return [], [(ROOT_NAME, "running in it needs root (mount namespaces, "
                     "chroot)", bool(explicit))]
    root = subprocess.run([PYROOT, "path"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, universal_newlines=True,
                          timeout=60).stdout.strip()
    have, problems = {}, []            # path inside -> kind
    for line in r.stdout.splitlines():
        f = line.split(None, 3)
        if len(f) >= 2 and f[0] != "missing":
            have[f[1]] = f[0]
        elif len(f) == 4 and not explicit:
            kind, name, why = f[1], f[2], f[3]
            if any(k == kind and (m is None or name.startswith("python" + m))
                   for k, m, _ in ROOT_RUNS):
                problems.append(("%s (%s)" % (name, _root_kind_name(kind)),
                                 why, False))
    runs = []                          # (path, kind, mode)
    if explicit:
        for spec in explicit:
            mode, _, path = spec[len("pyroot-"):].partition("=")
            if mode not in ("container", "chroot") or path not in have:
                problems.append((spec, "expected pyroot-container=PATH or "
                                 "pyroot-chroot=PATH, PATH one of %s"
                                 % ", ".join(sorted(have)), True))
                continue
            runs.append((path, have[path], mode))
    else:
        for path, kind in sorted(have.items()):
            for k, minor, modes in ROOT_RUNS:
                name = os.path.basename(path)
                if k == kind and (minor is None or
                                  name.startswith("python" + minor)):
                    runs += [(path, kind, mode) for mode in modes]
    interps = []
    for path, kind, mode in runs:
        origin = "%s, %s" % (_root_kind_name(kind), mode)
        wrap = lambda argv, mode=mode: _pyroot_run(mode, argv)
        try:
            version, executable, ft = probe(path, wrap)
        except (OSError, ValueError, SyntaxError, IndexError,
                subprocess.SubprocessError, HarnessError) as e:
            problems.append(("%s (%s)" % (path, origin),
                             "cannot run it: %s" % e, True))
            continue
        interps.append(Interp(path, version, executable, origin, root, mode,
                              ft))
    return interps, problems


def shared_dir(prefix):
    """A temporary directory to share with a target: pass it in
    Target(binds=...); remove_shared_dir() removes it, and what the root
    keeps of it (a copy under --chroot, the mount point in a container)."""
    return os.path.realpath(tempfile.mkdtemp(prefix=prefix))


def remove_shared_dir(interp, d):
    shutil.rmtree(d, ignore_errors=True)
    if not interp.root:
        return
    inside = os.path.join(interp.root, d.lstrip("/"))
    tmp = os.path.realpath(tempfile.gettempdir())
    # Only what shared_dir() made: a directory under the temp dir, reached
    # without a link.
    if os.path.dirname(d) == tmp and os.path.isdir(inside) \
            and not os.path.islink(inside):
        shutil.rmtree(inside, ignore_errors=True)


# ---------------------------------------------------------------------------
# ptrace permission.

_SEIZE_PROBE = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_SEIZE = 0x4206
r = libc.ptrace(ctypes.c_long(PTRACE_SEIZE), ctypes.c_long(int(sys.argv[1])),
                ctypes.c_void_p(0), ctypes.c_void_p(0))
e = ctypes.get_errno()
print("ok" if r == 0 else errno.errorcode.get(e, str(e)))
"""


def _ptrace_scope():
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return f.read().strip()
    except OSError:
        return None


def ptrace_problem():
    """None if a process like spy may ptrace a process like a target, else why.

    spy is never the target's ancestor (both are our children), which is what
    Yama's ptrace_scope=1 refuses; so the check is made the same way: a
    sibling process tries PTRACE_SEIZE on a child of ours.
    """
    victim = spawn([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        r = subprocess.run([sys.executable, "-c", _SEIZE_PROBE, str(victim.pid)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True,
                           timeout=60)
        answer = r.stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        answer = "probe failed: %s" % e
    finally:
        kill(victim)
    if answer == "ok":
        return None
    scope = _ptrace_scope()
    if answer.startswith("probe failed") or not answer:
        # No ctypes or the like: fall back to what the kernel settings say.
        if scope in (None, "0") or (os.geteuid() == 0 and scope in ("1", "2")):
            return None
        return "ptrace not permitted (kernel.yama.ptrace_scope=%s)" % scope
    return ("ptrace not permitted (%s, kernel.yama.ptrace_scope=%s): run as "
            "root, or set kernel.yama.ptrace_scope=0, or grant CAP_SYS_PTRACE"
            % (answer, scope if scope is not None else "absent"))


# ---------------------------------------------------------------------------
# Targets.

# A marker is a trailing comment that is only "# @name".
MARKER = re.compile(r"#\s*@([A-Za-z_][\w-]*)\s*$")


def markers(path):
    """{name: line} for every line ending in a "# @name" comment (1-based)."""
    found = {}
    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            for m in MARKER.finditer(text.rstrip("\n")):
                if m.group(1) in found:
                    raise HarnessError("%s: marker @%s on lines %d and %d"
                                       % (path, m.group(1),
                                          found[m.group(1)], n))
                found[m.group(1)] = n
    return found


def target_path(name):
    return os.path.join(TARGETS, name)


def wait_ready(proc, timeout):
    """Read proc's stdout until a target's "ready {json}" line; return the
    json. HarnessError when it does not come within timeout seconds or
    stdout ends first."""
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.time() + timeout
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.startswith(b"ready"):
                rest = line[len(b"ready"):].strip()
                return json.loads(rest.decode()) if rest else {}
        left = deadline - time.time()
        if left <= 0:
            raise HarnessError("did not get ready in %ds" % timeout)
        r, _, _ = select.select([fd], [], [], min(left, 0.5))
        if r:
            chunk = os.read(fd, 65536)
            if not chunk:
                proc.wait()
                raise HarnessError("exited (%s) before getting ready"
                                   % proc.returncode)
            buf += chunk


class Target(object):
    """A target script running under one interpreter, ready to be looked at.

    argv is the target's command line; binds are directories it shares
    with the test (see Interp.command)."""

    def __init__(self, interp, script, args=(), env=None, ready_timeout=60,
                 binds=()):
        self.interp = interp
        self.script = script
        self.argv = interp.argv([script] + list(args))
        self._err = tempfile.TemporaryFile()
        if interp.env:
            env = dict(os.environ if env is None else env)
            env.update(interp.env)
        self.proc = spawn(interp.command([script] + list(args), binds),
                          stdout=subprocess.PIPE, stderr=self._err, env=env)
        self.pid = self.proc.pid
        self.info = self._wait_ready(ready_timeout)

    def _wait_ready(self, timeout):
        try:
            return wait_ready(self.proc, timeout)
        except HarnessError as e:
            why = str(e)
            if self.proc.poll() is not None:
                why += ": " + self.stderr()
            self.stop()
            raise HarnessError("target %s %s" % (os.path.basename(self.script), why))

    def stderr(self):
        self._err.seek(0)
        return _last_line(self._err.read().decode("utf-8", "replace"))

    def alive(self):
        return self.proc.poll() is None and proc_state(self.pid) not in ("Z", "X", None)

    def stop(self):
        kill(self.proc)
        self._err.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# ---------------------------------------------------------------------------
# Running spy.

def spy_path():
    p = os.environ.get("SPY") or os.path.join(REPO, "build", "spy")
    if not os.access(p, os.X_OK):
        raise HarnessError("spy not found at %s (set SPY or build it: "
                           "meson setup build && meson compile -C build)" % p)
    return p


def slowness():
    """How many times slower than the machines the checks' windows were
    set for spy and its targets run here (SPY_TEST_SLOWNESS, default 1):
    .ci/arm64-guest sets it in the emulated arm64 system. A check that
    counts samples or shares in a fixed window dilates its time by it
    (longer windows, lower rates, longer target phases), so that it takes
    as many samples of the same shares as at native speed: what it proves
    is unchanged, only the clock is slower."""
    v = os.environ.get("SPY_TEST_SLOWNESS", "").strip()
    try:
        f = float(v) if v else 1.0
    except ValueError:
        f = 0.0
    if not 1.0 <= f <= 100.0:
        raise HarnessError("SPY_TEST_SLOWNESS=%r: want a factor from 1 to 100" % v)
    return f


def slow(seconds):
    """seconds dilated by slowness()."""
    return seconds * slowness()


def require_test_hooks(knob):
    """SkipInterp unless spy honours the SPY_TEST_* knobs: they are compiled
    only with -Dtest_hooks=true (tests/run sets it; meson tells us)."""
    if os.environ.get("SPY_TEST_HOOKS_BUILT", "1") != "1":
        raise SkipInterp("spy built without -Dtest_hooks=true: no %s" % knob)


def spy_env(extra=None, keep_log=True):
    env = dict(os.environ)
    if not keep_log:
        env.pop("SPY_LOG", None)     # debug logging would add stderr lines
    env.update(extra or {})
    return env


class SpyResult(object):
    def __init__(self, argv, rc, out, err, timed_out):
        self.argv, self.rc, self.out, self.err = argv, rc, out, err
        self.timed_out = timed_out

    def err_lines(self):
        return [l for l in self.err.splitlines() if l.strip()]

    def describe(self):
        """Short account for a FAIL line."""
        if self.timed_out:
            return "spy %s timed out" % " ".join(self.argv[1:])
        return "spy %s exited %s, stderr: %s" % (
            " ".join(self.argv[1:]), self.rc,
            " | ".join(self.err_lines()[:3]) or "(empty)")


def run_spy(args, timeout=30, env=None, cwd=None):
    """Run spy to completion (in cwd, if given); never leaves it running."""
    argv = [spy_path()] + list(args)
    p = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
              cwd=cwd)
    timed_out = False
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        p.kill()
        out, err = p.communicate()
    kill(p)
    return SpyResult(argv, p.returncode, out.decode("utf-8", "replace"),
                     err.decode("utf-8", "replace"), timed_out)


def start_spy(args, env=None):
    """Start spy without waiting; stop it with kill() or signals."""
    return spawn([spy_path()] + list(args), stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, env=env)


# ---------------------------------------------------------------------------
# `spy dump` output.

class Frame(object):
    __slots__ = ("func", "file", "line")

    def __init__(self, func, file, line):
        self.func, self.file, self.line = func, file, line

    def __eq__(self, other):
        return (self.func, self.file, self.line) == \
            (other.func, other.file, other.line)

    def __ne__(self, other):
        return not self == other

    def __repr__(self):
        if self.line is None:
            return "%s (%s)" % (self.func, self.file)
        return "%s (%s:%d)" % (self.func, self.file, self.line)


class DumpThread(object):
    def __init__(self, tid, pyid, name, state, gil):
        self.tid, self.pyid, self.name = tid, pyid, name
        self.native_only = pyid is None   # dump --native: no Python thread state
        self.state, self.gil = state, gil
        self.frames = []
        # The interpreters it is in, innermost first; [] when the process
        # has one (the header then does not say).
        self.interps = []
        self.locals = []     # per frame: [(kind "arg"/"local", name, repr)]

    def __repr__(self):
        return "Thread %d %s%s" % (self.tid, self.state,
                                   ", holds the GIL" if self.gil else "")


class Dump(object):
    def __init__(self):
        self.pid = None
        self.cmdline = None
        self.version = None      # "3.11.7"
        self.binary = None       # file holding the runtime
        # A free-threaded build: None if not, else whether it runs without
        # a GIL (True) or with the GIL switched on (False).
        self.no_gil = None
        self.threads = []
        self.hint = None         # the "Hint: ..." line's text, if any


class DumpParseError(Exception):
    pass


STATES = ("running", "idle", "waiting on a lock", "waiting for the GIL",
          "unknown")
_LOCAL = re.compile(r"^        (arg  |local) (\S+) = (.*)$")
GIL_MARK = ", holds the GIL"
# A thread without a Python thread state (dump --native) is `(native)`.
_THREAD = re.compile(r'^Thread (\d+) \((?:python 0x([0-9a-fA-F]+)|native)\) "(.*)" (.+)$')
_INTERPS = re.compile(r", in interpreter (\d+)((?: (?:entered )?from \d+)*)$")
_PROCESS = re.compile(r"^Process (\d+): (.*)$")
_PYTHON = re.compile(r"^Python (\S+)(?: free-threaded, (running without a GIL|"
                     r"GIL switched on))? \((.*)\)$")


def parse_frame(body):
    """`function (file:line)` -> Frame; `symbol (library)` -> Frame(line=None);
    `[marker]` -> Frame(file="").

    File paths may hold spaces and parens, so the location is what follows a
    " (" up to the final ")", and the line number what follows its last ':'.
    A Python function name (co_qualname: identifiers, dots, <locals>,
    <module>...) never contains " (", so for Python frames the first " ("
    ends the name, which keeps a path like "/a (copy)/x.py" whole; native
    symbols (C++ may have " (" in them) end at the last " (".
    """
    if body.startswith("[") and body.endswith("]") and " (" not in body:
        return Frame(body, "", None)    # a marker: --native frames not placed
    if re.match(r"^<interpreter \d+>$", body):
        return Frame(body, "", None)    # a marker: a sub-interpreter's stack above
    if not body.endswith(")") or " (" not in body:
        raise DumpParseError("bad frame %r" % body)
    m = re.match(r"^(.+?) \((.*):(\d+)\)$", body)
    if m:
        return Frame(m.group(1), m.group(2), int(m.group(3)))
    i = body.rfind(" (")
    if i <= 0 or i + 3 >= len(body):
        raise DumpParseError("bad frame %r" % body)
    return Frame(body[:i], body[i + 2:-1], None)


def parse_dump(text):
    """Parse `spy dump` text output (doc/spy-dump.md, "Output"); DumpParseError if bad."""
    d = Dump()
    lines = text.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise DumpParseError("output too short: %r" % text)
    m = _PROCESS.match(lines[0])
    if not m:
        raise DumpParseError("line 1: expected 'Process PID: cmdline', got %r"
                             % lines[0])
    d.pid, d.cmdline = int(m.group(1)), m.group(2)
    m = _PYTHON.match(lines[1])
    if not m:
        raise DumpParseError("line 2: expected 'Python X.Y.Z[ free-threaded, "
                             "...] (binary)', got %r" % lines[1])
    d.version, d.binary = m.group(1), m.group(3)
    if m.group(2):
        d.no_gil = m.group(2) == "running without a GIL"
    cur = None
    expect_blank = True
    for n, line in enumerate(lines[2:], 3):
        if line == "":
            cur, expect_blank = None, False
            continue
        if expect_blank:
            raise DumpParseError("line %d: expected a blank line, got %r"
                                 % (n, line))
        if line.startswith("Hint: ") and cur is None:
            d.hint = line[len("Hint: "):]
            continue
        if line.startswith("        ") and cur is not None and cur.frames:
            m = _LOCAL.match(line)
            if not m:
                raise DumpParseError("line %d: bad local %r" % (n, line))
            cur.locals[-1].append((m.group(1).strip(), m.group(2), m.group(3)))
            continue
        if line.startswith("    "):
            if cur is None:
                raise DumpParseError("line %d: frame outside a thread: %r"
                                     % (n, line))
            try:
                cur.frames.append(parse_frame(line[4:]))
                cur.locals.append([])
            except DumpParseError as e:
                raise DumpParseError("line %d: %s" % (n, e))
            continue
        if cur is not None:
            raise DumpParseError("line %d: expected a frame or a blank line, "
                                 "got %r" % (n, line))
        m = _THREAD.match(line)
        if not m:
            raise DumpParseError("line %d: expected a Thread line, got %r"
                                 % (n, line))
        tail = m.group(4)
        # A process with sub-interpreters: ", in interpreter 1 entered from 0".
        interps = []
        mi = _INTERPS.search(tail)
        if mi:
            tail = tail[:mi.start()]
            interps = [int(mi.group(1))] + [int(x) for x in
                                           re.findall(r"\d+", mi.group(2) or "")]
        gil = tail.endswith(GIL_MARK)
        if gil:
            tail = tail[:-len(GIL_MARK)]
        if tail not in STATES:
            raise DumpParseError("line %d: unknown thread state %r" % (n, tail))
        cur = DumpThread(int(m.group(1)),
                         int(m.group(2), 16) if m.group(2) else None, m.group(3),
                         tail, gil)
        cur.interps = interps
        d.threads.append(cur)
    return d


# ---------------------------------------------------------------------------
# /proc.

def read_stat(path):
    """Fields of a /proc/.../stat file after the comm, as a list, or None if
    it is gone. comm may contain spaces and ')': parse after the last ')'."""
    try:
        with open(path) as f:
            s = f.read()
    except OSError:
        return None
    return s[s.rindex(")") + 2:].split()


def proc_state(pid):
    """One-letter state of a process (R, S, t, T, Z, ...) or None if gone."""
    f = read_stat("/proc/%d/stat" % pid)
    return f[0] if f else None


def task_states(pid):
    """{tid: state letter} for every task (thread) of a process."""
    out = {}
    for t in _listdir("/proc/%d/task" % pid):
        f = read_stat("/proc/%d/task/%s/stat" % (pid, t))
        if f:
            out[int(t)] = f[0]
    return out


def tracers(pid):
    """{tid: TracerPid} of the tasks of a process that are traced."""
    out = {}
    for t in task_states(pid):
        try:
            with open("/proc/%d/task/%d/status" % (pid, t)) as f:
                for line in f:
                    if line.startswith("TracerPid:") and int(line.split()[1]):
                        out[t] = int(line.split()[1])
        except (OSError, ValueError):
            pass
    return out


def children(pid):
    """Direct children of a process (of every thread), or [] if it is gone."""
    out = []
    for t in task_states(pid):
        try:
            with open("/proc/%d/task/%d/children" % (pid, t)) as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def comm(pid, tid):
    """The kernel's name for a thread, or None if it is gone."""
    try:
        with open("/proc/%d/task/%d/comm" % (pid, tid)) as f:
            return f.read().rstrip("\n")
    except OSError:
        return None


def cpu_ticks(pid):
    """utime + stime of the whole process, in clock ticks."""
    f = read_stat("/proc/%d/stat" % pid)
    return int(f[11]) + int(f[12]) if f else None


def mapped_files(pid):
    """Paths of the files mapped into a process."""
    out = set()
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.rstrip("\n").split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                out.add(parts[5])
    return out


def wait_for(cond, timeout, step=0.02):
    """Poll cond() until it returns something true or timeout passes."""
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v or time.time() >= deadline:
            return v
        time.sleep(step)


# ---------------------------------------------------------------------------
# Reporting.

def _last_line(s):
    lines = [l for l in s.strip().splitlines() if l.strip()]
    return lines[-1] if lines else "(no output)"


def reporter(name):
    """A Reporter for test name, once spy is known to be built: if it is
    not, that is the test's one FAIL and it ends here."""
    rep = Reporter()
    try:
        spy_path()
    except HarnessError as e:
        rep.fail(name, str(e))
        rep.finish()
    return rep


class Reporter(object):
    """Collects PASS/FAIL/SKIP lines; finish() exits 0, 1 or 77."""

    def __init__(self):
        self.passed = self.failed = 0
        self.skips = []

    def _out(self, line):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def ok(self, label):
        self.passed += 1
        self._out("PASS %s" % label)

    def fail(self, label, reason):
        self.failed += 1
        self._out("FAIL %s: %s" % (label, reason))

    def skip(self, label, why):
        self.skips.append(why)
        self._out("SKIP %s: %s" % (label, why))

    def check(self, label, problems):
        """PASS if problems (a list of strings, or one string) is empty."""
        if isinstance(problems, str):
            problems = [problems]
        problems = [p for p in problems if p]
        if problems:
            self.fail(label, "; ".join(problems))
        else:
            self.ok(label)

    def run(self, label, fn, *args):
        """One labelled check: fn(*args) gives its problems. A SkipInterp
        is a SKIP, spy's or the harness's failure a FAIL with its message;
        processes it started are cleaned up whatever happens."""
        try:
            self.check(label, fn(*args))
        except SkipInterp as e:
            self.skip(label, str(e))
        except SpyFailed as e:
            self.fail(label, str(e))
        except (HarnessError, OSError, ValueError,
                subprocess.SubprocessError) as e:
            self.fail(label, "%s: %s" % (type(e).__name__, e))
        finally:
            cleanup()

    def finish(self, why_nothing=None):
        if self.failed:
            sys.exit(1)
        if self.passed:
            sys.exit(0)
        why = why_nothing or (self.skips and "; ".join(sorted(set(self.skips)))) \
            or "no checks ran"
        self._out("nothing could run: %s" % why)
        sys.exit(EXIT_SKIP)


def for_each_interp(rep, run_one, need_ptrace=True, expect=(), chroot=False,
                    gil_too=False, variants=False):
    """The common main loop: discover interpreters, skip what cannot run,
    call run_one(interp) -> list of problems for the rest, report each.

    expect: minor versions ("3.9") to report as SKIP when no interpreter of
    that version was found (only when discovering, not with SPY_PYTHONS,
    where the caller chose). A failure on one interpreter never stops the
    others.

    chroot, variants: as discover's.

    gil_too: also run each free-threaded interpreter with its GIL switched
    on (PYTHON_GIL=1), for the tests of what spy says about the GIL.
    """
    # The emulated arm64 CI job's budget has no room for them but the JIT's
    # variants in --native's test (.ci/arm64-guest): =0 none, =jit those.
    knob = os.environ.get("SPY_TEST_VARIANTS")
    if knob == "0":
        variants = False
    interps, problems = discover(chroot, variants)
    if variants and knob == "jit":
        interps = [i for i in interps if not i.nodebug or i.env.get("PYTHON_JIT") == "1"]
    if gil_too:
        interps = [v for i in interps
                   for v in ((i, i.with_gil()) if i.free_threaded else (i,))]
    report_problems(rep, problems)
    missing = []
    if not os.environ.get("SPY_PYTHONS", "").strip():
        found = set(i.minor for i in interps)
        missing = [m for m in expect if m not in found]
    if not interps:
        for minor in missing:
            rep.skip("%s (not installed)" % minor, "no Python %s found" % minor)
        rep.finish("no Python interpreter found (searched %s)"
                   % searched_where())
    no_ptrace = ptrace_problem() if need_ptrace else None
    key = lambda minor: tuple(int(x) for x in minor.split("."))
    for interp in interps:
        # Keep the lines in version order, absent versions in their place.
        while missing and key(missing[0]) < interp.version[:2]:
            rep.skip("%s (not installed)" % missing[0],
                     "no Python %s found (%s)" % (missing.pop(0), SEARCHED))
        if no_ptrace:
            rep.skip(interp.label, no_ptrace)
            continue
        rep.run(interp.label, run_one, interp)
    for minor in missing:
        rep.skip("%s (not installed)" % minor,
                 "no Python %s found (%s)" % (minor, SEARCHED))
    rep.finish(no_ptrace)


def picked_interps(rep, name, pick):
    """For a test that runs on the few interpreters pick(interps) chooses
    rather than on each: those, after reporting discover()'s problems; the
    test ends here (a SKIP saying why) if ptrace is refused or none is
    found."""
    interps, problems = discover()
    report_problems(rep, problems)
    no_ptrace = ptrace_problem()
    chosen = pick(interps)
    if not chosen or no_ptrace:
        rep.skip(name, no_ptrace or "no Python interpreter found (searched %s)" % searched_where())
        rep.finish()
    return chosen


def report_problems(rep, problems):
    """The lines for discover()'s problems: FAIL if explicit, else SKIP."""
    for label, why, explicit in problems:
        (rep.fail if explicit else rep.skip)(label, why)
