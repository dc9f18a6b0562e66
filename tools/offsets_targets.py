"""Where tools/gen-offsets compiles and runs its measuring programs: on this
machine (Host, optionally with aarch64's pthread sizes forced in), or in
tools/arm64vm's arm64 Debian root under qemu-user (Arm64Root). Each gives
the include directories for a header set and runs a program built against
them, returning what it printed."""

import glob
import os
import shlex
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))

# glibc's pthread type sizes on aarch64 (LP64), x86-64's in parentheses:
# attr 64 (56), mutex 48 (40), mutexattr, condattr and barrierattr 8 (4).
# The only difference between the two in a layout spy reads, through the
# GIL's and the runtime's locks. --pthread-model aarch64 measures with them
# on x86-64; --arch aarch64 measures them in the root and refuses a table
# when the root's glibc disagrees.
AARCH64_PTHREAD_SIZES = {"attr": 64, "mutex": 48, "mutexattr": 8, "cond": 48, "condattr": 8,
                         "rwlock": 56, "rwlockattr": 8, "barrier": 32, "barrierattr": 8}


def debian_triplet_dirs(inc):
    """(triplet, dir) of Debian's per-architecture pyconfig.h for headers
    inc, kept in <parent>/<triplet>/pythonX.Y: inc's own pyconfig.h is a stub
    that includes <TRIPLET/pythonX.Y/pyconfig.h> through the system path."""
    base, parent = os.path.basename(inc), os.path.dirname(inc)
    found = sorted(d for d in glob.glob(os.path.join(parent, "*-linux-gnu*", base)) if os.path.isdir(d))
    return [(os.path.basename(os.path.dirname(d)), d) for d in found]


def with_internal(inc, path):
    """The include dirs for headers inc, found at path by the compiler: the
    internal pycore_*.h are included by bare name."""
    return [path, path + "/internal"] if os.path.isdir(os.path.join(inc, "internal")) else [path]


class Host:
    """Compiles and runs the measuring programs on this machine; with
    pthread_model, with glibc's aarch64 pthread type sizes forced in."""

    def __init__(self, tmp, pthread_model=False):
        self.tmp = tmp
        self.cc = os.environ.get("CC", "cc")
        self.flags = []
        if pthread_model:
            shim = os.path.join(tmp, "pthread-aarch64.h")
            with open(shim, "w") as f:
                f.write(pthread_shim())
            self.flags = ["-include", shim]
        self.compiler = subprocess.run([self.cc, "-dumpfullversion"], stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, universal_newlines=True).stdout.strip()
        self.notes = {}

    def includes(self, inc, v):
        dirs = with_internal(inc, inc)
        for triplet, d in debian_triplet_dirs(inc):
            dirs.append(d)
            # For headers outside / (a Debian root built by tools/pyroot)
            # point the stub's name at the root's own file without putting
            # the root's libc headers first.
            link_dir = os.path.join(self.tmp, "inc-%d%d" % v, triplet)
            os.makedirs(link_dir, exist_ok=True)
            link = os.path.join(link_dir, os.path.basename(d))
            if not os.path.islink(link):
                os.symlink(d, link)
            dirs.append(os.path.dirname(link_dir))
        return dirs

    def build_and_run(self, src, exe, incdirs, defines):
        cmd = [self.cc, "-std=gnu11", "-w", "-o", exe, src] + self.flags
        for d in incdirs:
            cmd += ["-I", d]
        r = subprocess.run(cmd + defines, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
        if r.returncode != 0:
            raise RuntimeError("compiling %s failed:\n%s" % (" ".join(incdirs[:1]), r.stdout[-3000:]))
        return subprocess.run([exe], stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout


def pthread_shim():
    """A header forced in before any other: glibc sizes its pthread types by
    these macros (bits/pthreadtypes-arch.h, include-guarded), so defining
    aarch64's first makes x86-64's types those sizes."""
    out = ["#include <bits/pthreadtypes-arch.h>"]
    for name, size in AARCH64_PTHREAD_SIZES.items():
        out += ["#undef __SIZEOF_PTHREAD_%s_T" % name.upper(),
                "#define __SIZEOF_PTHREAD_%s_T %d" % (name.upper(), size)]
    out.append("#include <pthread.h>")
    for name, size in AARCH64_PTHREAD_SIZES.items():
        out.append('_Static_assert(sizeof(pthread_%s_t) == %d, "pthread_%s_t");' % (name, size, name))
    return "\n".join(out) + "\n"


class Arm64Root:
    """Compiles (gcc) and runs the measuring programs in tools/arm64vm's
    arm64 Debian root under qemu-user. Headers from outside the root are
    copied into the temporary directory, the one directory bound in."""

    def __init__(self, tmp):
        self.tmp = tmp
        r = subprocess.run([os.path.join(HERE, "arm64vm"), "path"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, universal_newlines=True)
        if r.returncode != 0 or not r.stdout.strip():
            raise RuntimeError("no arm64 root (sudo tools/arm64vm build)")
        self.root = os.path.join(r.stdout.strip(), "rootfs")
        self.system_includes = [os.path.join(self.root, "usr", "include")]
        self.compiler = self.chroot(["gcc", "-dumpfullversion"]).strip() + " for aarch64, tools/arm64vm"
        self.notes = {}
        self.staged = {}

    def chroot(self, cmd):
        r = subprocess.run([os.path.join(HERE, "arm64vm"), "chroot", "--bind", self.tmp, "--"] + cmd,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        if r.returncode != 0:
            raise RuntimeError("in the arm64 root, %s failed:\n%s" % (cmd[0], r.stderr[-3000:]))
        return r.stdout

    def includes(self, inc, v):
        if os.path.realpath(inc).startswith(os.path.realpath(self.root) + os.sep):
            # The root's own: its pyconfig.h stub finds the aarch64 one itself.
            return with_internal(inc, "/" + os.path.relpath(inc, self.root))
        if inc in self.staged:
            return self.staged[inc]
        stage = os.path.join(self.tmp, "h%d" % len(self.staged))
        copy = os.path.join(stage, os.path.basename(inc))
        shutil.copytree(inc, copy)
        dirs = with_internal(inc, copy)
        triplets = dict(debian_triplet_dirs(inc))
        if triplets:
            # A Debian stub built for another architecture names
            # aarch64-linux-gnu here: give it that build's pyconfig.h, as
            # pyenv's x86-64 configured headers are used (see the header).
            theirs = triplets.get("aarch64-linux-gnu") or sorted(triplets.items())[0][1]
            shutil.copytree(theirs, os.path.join(stage, "aarch64-linux-gnu", os.path.basename(inc)))
            dirs.append(stage)
            if "aarch64-linux-gnu" not in triplets:
                self.notes[inc] = ["pyconfig.h: %s's, under aarch64-linux-gnu." %
                                   os.path.basename(os.path.dirname(theirs))]
        self.staged[inc] = dirs
        return dirs

    def build_and_run(self, src, exe, incdirs, defines):
        script = os.path.join(self.tmp, "run.sh")
        cmd = ["gcc", "-std=gnu11", "-w", "-o", exe, src]
        for d in incdirs:
            cmd += ["-I", d]
        with open(script, "w") as f:
            f.write("%s >%s.log 2>&1 || { cat %s.log >&2; exit 1; }\nexec %s\n" %
                    (" ".join(shlex.quote(a) for a in cmd + defines), exe, exe, exe))
        return self.chroot(["sh", script])
