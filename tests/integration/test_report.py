#!/usr/bin/env python3
"""spy report: re-render a saved folded profile (plain or gzip) as svg,
folded, table, json, speedscope, pprof or chrome; usage errors exit 2, unreadable or malformed profiles
exit 5 with one stderr line naming FILE:LINE. One PASS/FAIL line per check;
no Python interpreter is needed (the profiles are written here).

The output path against what can be planted at a name in a shared
directory (sticky like /tmp, and not): report and diff, in every format
family (folded, folded.gz, svg, json), given a link to a victim file never
write the victim (a link of ours is replaced; someone else's, made by chown
when run as root, is refused with exit 5); given a FIFO they write through it.

`-o -` is standard output for every format, binary ones too: folded, svg,
pprof and the diff's json through a pipe, a folded profile piped from one
report into another, and never a file named "-" (or any other) in the
working directory."""

import gzip
import json
import os
import shutil
import subprocess
import sys
import select
import tempfile
import time
import xml.dom.minidom

import harness

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit"))
chrome_check = __import__("check-chrome")

PROFILE = (
    "# spy-version: 0.1.0\n"
    "# python: 3.12.1\n"
    "# rate-hz: 100\n"
    "# samples: 20\n"
    "# command: python3 app.py\n"
    # In the order spy writes (children sorted), so that it round-trips.
    "process 1;</text><script>alert(1)</script> (]]>.py:3) 3\n"
    "process 1;main (app.py:10);sleep (libc.so.6) 5\n"
    "process 1;main (app.py:10);work (app.py:20) 12\n"
)


def spy(*args, **kw):
    return harness.run_spy(list(args), env=harness.spy_env(keep_log=False), **kw)


def expect(r, rc, out=(), err=(), one_err_line=False):
    p = []
    if r.timed_out:
        return ["timed out"]
    if r.rc != rc:
        p.append("exit %s, expected %d (stderr: %s)"
                 % (r.rc, rc, " | ".join(r.err_lines()[:3]) or "empty"))
    for s in out:
        if s not in r.out:
            p.append("stdout lacks %r: %r" % (s, r.out[:300]))
    for s in err:
        if s not in r.err:
            p.append("stderr lacks %r: %r" % (s, r.err[:300]))
    if one_err_line and len(r.err_lines()) != 1:
        p.append("expected one stderr line, got %r" % r.err[:500])
    return p


def svg_problems(path):
    try:
        doc = xml.dom.minidom.parse(path)
    except Exception as e:  # noqa: BLE001 - any parse error is the failure
        return ["%s is not XML: %s" % (path, e)]
    n = len(doc.getElementsByTagName("script"))
    return [] if n == 1 else ["%s has %d script elements" % (path, n)]


OTHER_UID = 65534  # nobody


def planted_problems(d, plain):
    """Links and FIFOs planted at the output name (see the top of this file)."""
    p = []
    victim = os.path.join(d, "victim")
    for kind, mode in (("sticky", 0o1777), ("shared", 0o777)):
        shared = os.path.join(d, kind)
        os.mkdir(shared)
        os.chmod(shared, mode)
        for name in ("p.folded", "p.folded.gz", "p.svg", "p.json"):
            for owner in ("ours", "theirs"):
                if owner == "theirs" and os.geteuid() != 0:
                    print("SKIP planted link of another user: not root, cannot make one")
                    continue
                with open(victim, "w") as f:
                    f.write("secret")
                out = os.path.join(shared, owner + "-" + name)
                os.symlink(victim, out)
                if owner == "theirs":
                    os.lchown(out, OTHER_UID, -1)
                for cmd in (["report", plain, "-o", out], ["diff", "-q", "-o", out, plain, plain]):
                    r = spy(*cmd)
                    with open(victim, "rb") as f:
                        if f.read() != b"secret":
                            p.append("%s: wrote through a link to the victim" % " ".join(cmd))
                    want = 0 if owner == "ours" else 5
                    if r.rc != want and not (cmd[0] == "diff" and name.endswith((".folded", ".gz"))):
                        p.append("%s: exit %d, expected %d: %s" % (" ".join(cmd), r.rc, want, r.err.strip()))
                    if owner == "theirs" and not os.path.islink(out):
                        p.append("%s: someone else's link was replaced" % out)
                if not os.path.islink(out):
                    os.unlink(out)
                    os.symlink(victim, out)
        # A FIFO of ours: written through, to a reader there before spy or
        # one that comes after spy wrote (spy waits for it to read).
        for first in ("reader", "spy"):
            fifo = os.path.join(shared, "p.fifo-%s.folded" % first)
            os.mkfifo(fifo)
            rc, got = fifo_report(plain, fifo, first)
            if rc != 0 or got != PROFILE:
                p.append("report -o FIFO in %s, %s first: exit %s, read %r" % (kind, first, rc, got[:80]))
    return p


def fifo_report(plain, fifo, first):
    """spy report -o fifo, the reader opening it before spy starts or
    0.5 s after: (spy's exit code, what the reader read until EOF)."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK) if first == "reader" else -1
    proc = subprocess.Popen([os.path.abspath(harness.spy_path()), "report", plain, "-o", fifo],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=harness.spy_env(keep_log=False))
    data = b""
    try:
        if fd < 0:
            time.sleep(0.5)
            # Non-blocking: with no writer left (spy gone, its bytes dropped), EOF at once.
            fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        deadline = time.time() + 10
        while time.time() < deadline:
            if not select.select([fd], [], [], 0.2)[0]:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                # EOF: no writer. Before spy opened it too, if the reader came first.
                if first == "reader" and proc.poll() is None and not data:
                    time.sleep(0.05)
                    continue
                break
            data += chunk
        return proc.wait(10), data.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return "timeout", data.decode("utf-8", "replace")
    finally:
        if fd >= 0:
            os.close(fd)


def piped(args, cwd, stdin=None):
    """spy's exit code, stdout as bytes through a pipe, stderr."""
    p = subprocess.Popen([os.path.abspath(harness.spy_path())] + list(args), cwd=cwd, stdin=stdin,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=harness.spy_env(keep_log=False))
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    return p.returncode, out, err.decode("utf-8", "replace")


def stdout_problems(d, plain):
    """-o - in each format family, run in an empty directory that must stay so."""
    cwd = os.path.join(d, "dash")
    os.mkdir(cwd)
    p = []

    def run(label, args, stdin=None):
        rc, out, err = piped(args, cwd, stdin)
        if rc != 0:
            p.append("%s: exit %s (%s)" % (label, rc, err.strip()[:200]))
        left = os.listdir(cwd)
        if left:
            p.append("%s left %s in the working directory" % (label, left))
            for f in left:
                os.unlink(os.path.join(cwd, f))
        return out

    out = run("report -f folded -o -", ["report", "-f", "folded", "-o", "-", plain])
    if out.decode("utf-8", "replace") != PROFILE:
        p.append("report -f folded -o -: stdout is not the profile: %r" % out[:200])
    out = run("report -f pprof -o -", ["report", "-f", "pprof", "-o", "-", plain])
    try:
        data = gzip.decompress(out)
        if b"work" not in data or b"app.py" not in data:
            p.append("report -f pprof -o -: the pprof's strings lack work/app.py")
    except (OSError, EOFError) as e:
        p.append("report -f pprof -o -: stdout is not gzip'd pprof (%s): %r" % (e, out[:40]))
    out = run("report -o - (svg)", ["report", "-o", "-", plain])
    svg = os.path.join(d, "from-stdout.svg")
    with open(svg, "wb") as f:
        f.write(out)
    p += ["report -o -: %s" % e for e in svg_problems(svg)]
    # One report's stdout as the next one's stdin, through a real pipe.
    first = subprocess.Popen([os.path.abspath(harness.spy_path()), "report", "-f", "folded",
                              "-o", "-", plain], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             env=harness.spy_env(keep_log=False))
    out = run("report -f folded -o - | report -f table -", ["report", "-f", "table", "-"],
              stdin=first.stdout)
    first.stdout.close()
    if first.wait(timeout=30) != 0:
        p.append("report -f folded -o - (piped): exit %s" % first.returncode)
    if b"work (app.py:20)" not in out:
        p.append("report -f table - of the piped profile lacks work: %r" % out[:200])
    out = run("diff -f json -o -", ["diff", "-f", "json", "-o", "-", plain, plain])
    try:
        if json.loads(out.decode("utf-8")).get("format") != "spy-diff":
            p.append("diff -f json -o -: not the diff document")
    except ValueError as e:
        p.append("diff -f json -o -: stdout is not JSON: %s" % e)
    return p


def main():
    d = tempfile.mkdtemp(prefix="spy-report-")
    try:
        checks(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def checks(d):
    rep = harness.reporter("report")
    plain = os.path.join(d, "prof.folded")
    gz = os.path.join(d, "prof2.folded.gz")
    with open(plain, "w") as f:
        f.write(PROFILE)
    with gzip.open(gz, "wt") as f:
        f.write(PROFILE)

    rep.check("spy report --help", expect(spy("report", "--help"), 0, out=["--format"]))
    rep.check("spy report (no profile)", expect(spy("report"), 2, one_err_line=True))
    # chrome from a folded file: the stacks laid out one after another, 20
    # samples at 100 Hz being 200 ms of outermost slices.
    r = spy("report", plain, "-f", "chrome")
    p = expect(r, 0)
    p += chrome_check.check_file(os.path.join(d, "prof.trace.json"), total_us=200000.0)
    rep.check("spy report -f chrome (beside the profile)", p)

    # json is text: stdout without -o.
    r = spy("report", plain, "-f", "json")
    p = expect(r, 0)
    try:
        doc = json.loads(r.out)
        if doc.get("samples") != 20 or sum(s["count"] for s in doc["stacks"]) != 20:
            p.append("json samples/counts do not add up to 20")
        if doc.get("metadata", {}).get("command") != "python3 app.py":
            p.append("json metadata lacks the command")
    except (ValueError, KeyError, TypeError) as e:
        p.append("stdout is not the json document: %s" % e)
    rep.check("spy report -f json (stdout)", p)

    # speedscope and pprof are files: beside the profile without -o.
    r = spy("report", plain, "-f", "speedscope")
    p = expect(r, 0)
    out = os.path.join(d, "prof.speedscope.json")
    try:
        with open(out) as f:
            ss = json.load(f)
        if ss.get("$schema") != "https://www.speedscope.app/file-format-schema.json":
            p.append("no speedscope $schema")
        elif abs(sum(sum(pr["weights"]) for pr in ss["profiles"]) - 0.2) > 1e-9:
            p.append("speedscope weights do not sum to 20 samples at 100 Hz")
    except (OSError, ValueError, KeyError, TypeError) as e:
        p.append("cannot read %s: %s" % (out, e))
    rep.check("spy report -f speedscope (beside the profile)", p)

    out = os.path.join(d, "x.pb.gz")
    p = expect(spy("report", gz, "-o", out), 0)
    try:
        with gzip.open(out, "rb") as f:
            data = f.read()
        # Names are plain strings in the string table.
        if b"work" not in data or b"app.py" not in data:
            p.append("pprof string table lacks work/app.py")
    except OSError as e:
        p.append("cannot read %s: %s" % (out, e))
    rep.check("spy report -o X.pb.gz (pprof)", p)
    r = spy("report", plain, "-f", "pprof")
    p = expect(r, 0)
    if not os.path.exists(os.path.join(d, "prof.pb.gz")):
        p.append("no prof.pb.gz beside the profile")
    rep.check("spy report -f pprof (beside the profile)", p)

    r = spy("report", plain)
    p = expect(r, 0)
    out = os.path.join(d, "prof.svg")
    p += svg_problems(out) if os.path.exists(out) else ["no %s" % out]
    rep.check("spy report PROFILE (svg beside it)", p)

    out = os.path.join(d, "x.svg")
    p = expect(spy("report", gz, "-o", out, "--inverted", "--title", "t<i>"), 0)
    p += svg_problems(out) if os.path.exists(out) else ["no %s" % out]
    rep.check("spy report PROFILE.gz -o x.svg --inverted", p)

    rep.check("spy report -f table",
              expect(spy("report", gz, "-f", "table"), 0,
                     out=["main (app.py:10)", "work (app.py:20)", "total%"]))
    r = spy("report", plain, "-f", "folded")
    p = expect(r, 0)
    if r.out != PROFILE:
        p.append("folded round trip differs: %r" % r.out[:300])
    rep.check("spy report -f folded (round trip)", p)

    # One case rule for file names: .GZ is gzip as much as .gz.
    for name, label in (("back.folded.gz", "spy report -o X.folded.gz"),
                        ("back.folded.GZ", "spy report -o X.folded.GZ (gzip)")):
        out = os.path.join(d, name)
        p = expect(spy("report", plain, "-o", out), 0)
        try:
            with gzip.open(out, "rt") as f:
                if f.read() != PROFILE:
                    p.append("gzip round trip differs")
        except OSError as e:
            p.append("cannot read %s: %s" % (out, e))
        rep.check(label, p)

    rep.check("spy report/diff -o - (stdout, every format, through a pipe)",
              stdout_problems(d, plain))
    rep.check("spy report/diff -o <link or FIFO planted in a shared directory>",
              planted_problems(d, plain))

    bad = os.path.join(d, "bad.folded")
    with open(bad, "w") as f:
        f.write("a;b 1\nthis is not a stack\n")
    rep.check("spy report <malformed>",
              expect(spy("report", bad), 5, err=["bad.folded:2:"], one_err_line=True))
    rep.check("spy report <missing>",
              expect(spy("report", os.path.join(d, "nope.folded")), 5,
                     err=["nope.folded"], one_err_line=True))
    if os.path.exists("/dev/full"):
        rep.check("spy report -o /dev/full",
                  expect(spy("report", plain, "-f", "table", "-o", "/dev/full"), 5,
                         one_err_line=True))
    rep.finish()


if __name__ == "__main__":
    try:
        main()
    except (harness.HarnessError, OSError, subprocess.SubprocessError) as e:
        print("FAIL report: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
