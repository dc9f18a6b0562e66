#!/usr/bin/env python3
"""spy diff and spy report --trend against real recordings
(targets/diff_target.py), on Python 3.11 and 2.7 (the first of each found;
other interpreters of the machine print a SKIP line: the diff reads files,
not processes, so one old and one new interpreter cover it, and the test
stays short), on the free-threaded 3.13t (tools/pyroot build-ft), and on
every interpreter of the Debian root (tools/pyroot): what they record
differs (newer runtimes, debug and free-threaded builds, files seen through
a container or a chroot).

Per interpreter, one PASS/FAIL line covering:
  - two recordings of the same version (one with -F, one without and
    gzip-compressed) diff with --fail-over 5 to exit 0 (a second pair is
    recorded if the first fails by chance: shares are estimates);
  - the version with render slowed down diffs against it to exit 1, with
    render named on stderr as the offender and parse not; -f json holds
    the same verdict (render in "failed", its total_delta > 5);
  - -o diff.svg writes an SVG that parses as XML with one script, whose
    string table has render's before/after tooltip line;
  - --min-samples above every count silences the gate (exit 0);
  - grow recorded with --slice 0.25: lookup, whose cost grows with every
    round, is first in `spy report --trend`, with a positive slope, and
    steady, whose cost is fixed, has a negative one.
On 3.11 only (the gate reads files; one interpreter shows the statistics
hold on real recordings), the significance gate against
targets/gate_target.py, whose truth is its own CPU time per function:
two recordings of the same program pass `--fail-over 2`, and a build with
one function made 5 points heavier (by the target's own timing) fails it,
naming that function, with the json saying the change is significant.
Then, once: across versions (2.7 BASE, 3.11 NEW), the same program passes
--fail-over 15 and the slowed one fails --fail-over 5 naming render;
malformed and missing profiles exit 5 naming FILE:LINE; usage errors exit 2;
--trend on a profile without windows exits 5, --slice without a folded
output exits 2.
"""

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import xml.dom.minidom

import harness

TARGET = harness.target_path("diff_target.py")
WANTED = ("2.7", "3.11")
SECONDS = "2"


def spy(*args, **kw):
    return harness.run_spy(list(args), env=harness.spy_env(keep_log=False), **kw)


def record(interp, out, mode, *extra):
    """Record SECONDS of a running target, attached once its imports are
    done (start-up time varies with load and would blur the shares)."""
    with harness.Target(interp, TARGET, [mode, "60"]) as t:
        # 1000 Hz for 2 s: ~2000 samples, so two recordings of one program
        # differ by a point or two, well under the 5-point gate.
        r = spy("record", "-q", "-r", "1000", "-d", SECONDS, "-p", str(t.pid),
                "-o", out, *extra, timeout=60)
    if r.rc != 0:
        raise harness.SpyFailed("record %s: %s" % (mode, r.describe()))
    return out


def offenders(err):
    """Functions named on `spy diff: FUNC (FILE): ...` stderr lines."""
    return set(m.group(1) for m in re.finditer(r"^spy diff: (\S+) \(", err, re.M))


def check_gate(base, new, label, slow, pct="5"):
    """diff BASE NEW --fail-over PCT: exit 1 naming render when slow, else 0."""
    p = []
    r = spy("diff", "--fail-over", pct, base, new)
    want = 1 if slow else 0
    if r.rc != want:
        return ["%s: exit %s, expected %d (%s)" % (label, r.rc, want, r.describe())]
    names = offenders(r.err)
    if slow and names != {"render"}:
        p.append("%s: offenders %s, expected only render" % (label, sorted(names)))
    if not slow and names:
        p.append("%s: offenders %s on identical programs" % (label, sorted(names)))
    if "render (" not in r.out:
        p.append("%s: table lacks render: %r" % (label, r.out[:300]))
    return p


def check_json(base, new):
    r = spy("diff", "-f", "json", "--fail-over", "5", base, new)
    if r.rc != 1:
        return ["json: exit %s, expected 1" % r.rc]
    try:
        doc = json.loads(r.out)
    except ValueError as e:
        return ["json: does not parse: %s" % e]
    failed = [f["func"] for f in doc.get("failed", [])]
    if failed != ["render"]:
        return ["json: failed %s, expected [render]" % failed]
    f = doc["failed"][0]
    if not f["total_delta"] > 5 or f["over"] != ["total"]:
        return ["json: render %r" % f]
    if doc["new"]["samples"] <= 0 or doc["gate"]["fail_over"] != 5:
        return ["json: header %r" % {k: doc[k] for k in ("base", "new", "gate")}]
    return []


def check_svg(base, new, d):
    out = os.path.join(d, "diff.svg")
    r = spy("diff", "-q", "-o", out, base, new)
    if r.rc != 0:
        return ["svg: " + r.describe()]
    try:
        doc = xml.dom.minidom.parse(out)
    except Exception as e:  # noqa: BLE001 - any parse error is the failure
        return ["svg: not XML: %s" % e]
    scripts = doc.getElementsByTagName("script")
    if len(scripts) != 1:
        return ["svg: %d scripts" % len(scripts)]
    text = "".join(n.data for n in scripts[0].childNodes)
    if not re.search(r'"base [0-9.]+% total, [0-9.]+% self; new [0-9.]+%, [0-9.]+%; '
                     r'change \+[0-9.]+, \+[0-9.]+ points"', text):
        return ["svg: no tooltip line for a function that grew"]
    return []


def trend(interp, d):
    prof = record(interp, os.path.join(d, "grow.folded"), "grow", "--slice", "0.25")
    r = spy("report", "--trend", prof)
    if r.rc != 0:
        return ["trend: " + r.describe()]
    # Rows start with the signed slope; the summary and header lines do not.
    rows = [l.split() for l in r.out.splitlines() if l.lstrip()[:1] in ("+", "-")]
    if not rows:
        return ["trend: no rows: %r" % r.out[:400]]
    first = rows[0]
    if "lookup" not in first or not float(first[0]) > 0:
        return ["trend: first row %r, expected lookup with a positive slope" % " ".join(first)]
    # steady does the same work every round, so its share can only fall.
    steady = [r for r in rows if "steady" in r]
    if not steady or not float(steady[0][0]) < 0:
        return ["trend: steady %r, expected a negative slope" % steady]
    return []


def same_program(interp, d):
    """Two recordings of one program (-F, and lines gzipped) pass the gate.

    Shares are estimates from a thousand or two samples: on a loaded
    machine two recordings can differ by a few points by chance (up to 6
    seen). One new pair is recorded when the first fails; a real fault
    (functions not matched across -F, .gz misread) fails both."""
    p = []
    for attempt in ("", "-2"):
        base_f = record(interp, os.path.join(d, "base-F%s.folded" % attempt), "normal", "-F")
        base_gz = record(interp, os.path.join(d, "base%s.folded.gz" % attempt), "normal")
        p = check_gate(base_f, base_gz, "same version (-F vs lines, gz)", False)
        if not p:
            return base_f, base_gz, []
        sys.stderr.write("%s: %s; recording the pair again\n" % (interp.label, p))
    return base_f, base_gz, p


GATE_TARGET = harness.target_path("gate_target.py")
# 1000 Hz for 6 s: ~6000 samples, enough for a 5-point change to be told
# from noise at the default dispersion; calls of ~0.5 ms, so that samples
# a millisecond apart are seldom in the same call.
GATE_ARGS = ("-r", "1000", "-d", "6")


def truth_shares(path):
    with open(path) as f:
        return {l.split()[0]: float(l.split()[1]) for l in f if l.strip()}


def gate_recordings(interp, d, mode, n):
    """n recordings of one run of gate_target in mode, and its own shares."""
    truth = os.path.join(d, "truth-%s" % mode)
    outs = []
    with harness.Target(interp, GATE_TARGET, [mode, "120", "0.5", truth]) as t:
        for i in range(n):
            out = os.path.join(d, "gate-%s-%d.folded" % (mode, i))
            r = spy("record", "-q", *GATE_ARGS, "-p", str(t.pid), "-o", out, timeout=60)
            if r.rc != 0:
                raise harness.SpyFailed("record gate %s: %s" % (mode, r.describe()))
            outs.append(out)
        # SIGTERM: the target writes its truth file and exits.
        harness.kill(t.proc, signal.SIGTERM)
    return outs, truth_shares(truth)


def significance_gate(interp, d):
    p = []
    (b1, b2), normal = gate_recordings(interp, d, "normal", 2)
    (heavy_f,), heavy = gate_recordings(interp, d, "heavy", 1)
    planted = heavy["c"] - normal["c"]
    sys.stderr.write("%s: gate_target truth: c %.2f%% -> %.2f%% (+%.2f points)\n"
                     % (interp.label, normal["c"], heavy["c"], planted))
    if not 3.5 <= planted <= 6.5:
        return ["gate: the target's own c share moved %.2f points, not ~5: %r -> %r"
                % (planted, normal, heavy)]
    r = spy("diff", "--fail-over", "2", b1, b2)
    if r.rc != 0:
        p.append("gate: same program failed --fail-over 2: %s" % r.describe())
    r = spy("diff", "-f", "json", "--fail-over", "2", b1, heavy_f)
    if r.rc != 1:
        return p + ["gate: planted +%.1f points passed --fail-over 2: exit %s, %s"
                    % (planted, r.rc, r.err.strip())]
    doc = json.loads(r.out)
    failed = [f["func"] for f in doc["failed"]]
    if failed != ["c"]:
        p.append("gate: planted regression failed on %s, expected [c]" % failed)
    elif not doc["failed"][0]["total_significant"] or not doc["failed"][0]["total_p"] <= 0.05:
        p.append("gate: c %r" % doc["failed"][0])
    return p


def run_one(interp, d):
    base_f, base_gz, p = same_program(interp, d)
    slow = record(interp, os.path.join(d, "slow.folded"), "slow")
    p += check_gate(base_f, slow, "slowed render", True)
    p += check_json(base_gz, slow)
    p += check_svg(base_f, slow, d)
    r = spy("diff", "--fail-over", "5", "--min-samples", "1000000", base_f, slow)
    if r.rc != 0:
        p.append("--min-samples 1000000: exit %s, expected 0" % r.rc)
    p += trend(interp, d)
    return p


def check_errors(rep, d, good):
    bad = os.path.join(d, "bad.folded")
    with open(bad, "w") as f:
        f.write("main (a.py:1) 3\nmain (a.py:1) x3\n")
    badgz = os.path.join(d, "bad.folded.gz")
    with open(badgz, "wb") as f:
        f.write(gzip.compress(b"main (a.py:1) 3\n")[:-6])
    for label, args, rc, want in (
            ("malformed NEW", [good, bad], 5, bad + ":2"),
            ("malformed BASE", [bad, good], 5, bad + ":2"),
            ("truncated gzip", [good, badgz], 5, badgz),
            ("missing file", [good, os.path.join(d, "nope")], 5, "nope"),
            ("one profile", [good], 2, "diff"),
            ("bad --fail-over", ["--fail-over", "x", good, good], 2, "fail-over"),
            ("--dispersion under 1", ["--dispersion", "0.5", good, good], 2, "--dispersion"),
            ("-f pprof", ["-f", "pprof", good, good], 2, "pprof")):
        r = spy("diff", *args)
        p = []
        if r.rc != rc:
            p.append("exit %s, expected %d" % (r.rc, rc))
        if want not in r.err:
            p.append("stderr lacks %r: %r" % (want, r.err[:200]))
        if rc == 5 and len(r.err_lines()) != 1:
            p.append("expected one stderr line, got %r" % r.err)
        rep.check("diff %s -> exit %d" % (label, rc), p)
    for label, args, rc, want in (
            ("report --trend, no windows", ["report", "--trend", good], 5, "--slice"),
            ("record --slice to an svg", ["record", "--slice", "1", "-o",
                                          os.path.join(d, "x.svg"), "--", "true"], 2, "folded")):
        r = spy(*args)
        rep.check("%s -> exit %d" % (label, rc),
                  [] if r.rc == rc and want in r.err and len(r.err_lines()) == 1
                  else ["exit %s, stderr %r" % (r.rc, r.err[:200])])
    r = spy("diff", "--help")
    rep.check("diff --help", [] if r.rc == 0 and "--fail-over" in r.out
              and "--min-samples" in r.out and "--no-significance" in r.out
              and "--dispersion" in r.out else ["diff --help: " + r.describe()])


def main():
    rep = harness.reporter("diff")
    interps, problems = harness.discover()
    harness.report_problems(rep, problems)
    no_ptrace = harness.ptrace_problem()
    chosen = {}
    for i in interps:
        if not i.root and not i.free_threaded and i.minor in WANTED \
                and i.minor not in chosen:
            chosen[i.minor] = i
    d = tempfile.mkdtemp(prefix="spy-diff-")
    try:
        for n, i in enumerate(interps):
            # Builds whose runtime differs (the root's, a free-threaded
            # one) record differently: each is run.
            if not i.root and not i.free_threaded and chosen.get(i.minor) is not i:
                rep.skip(i.label, "diff is checked on %s, the free-threaded "
                         "build and the Debian root only (it reads files)"
                         % " and ".join(WANTED))
                continue
            if no_ptrace:
                rep.skip(i.label, no_ptrace)
                continue
            sub = os.path.join(d, i.minor if chosen.get(i.minor) is i else "run%d" % n)
            os.mkdir(sub)
            try:
                p = run_one(i, sub)
                if chosen.get("3.11") is i:
                    p += significance_gate(i, sub)
                rep.check(i.label, p)
            except (harness.HarnessError, OSError, ValueError,
                    subprocess.SubprocessError) as e:
                rep.fail(i.label, "%s: %s" % (type(e).__name__, e))
            finally:
                harness.cleanup()
        for minor in WANTED:
            if minor not in chosen:
                rep.skip("%s (not installed)" % minor, "no Python %s found" % minor)
        old, new = [os.path.join(d, m) for m in WANTED]
        if all(os.path.exists(os.path.join(x, "slow.folded")) for x in (old, new)):
            # Two interpreters need not spend the same share in each
            # function of one program: the same program passes a looser
            # gate, the slowed one still fails the 5-point one.
            p = check_gate(os.path.join(old, "base-F.folded"),
                           os.path.join(new, "base.folded.gz"),
                           "2.7 vs 3.11, same program", False, pct="15")
            p += check_gate(os.path.join(old, "base-F.folded"),
                            os.path.join(new, "slow.folded"),
                            "2.7 vs 3.11 slowed", True)
            rep.check("across versions (2.7 BASE, 3.11 NEW)", p)
        good = os.path.join(d, "good.folded")
        with open(good, "w") as f:
            f.write("main (a.py:1);work (a.py:5) 3\n")
        check_errors(rep, d, good)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    rep.finish()


if __name__ == "__main__":
    try:
        main()
    except (harness.HarnessError, OSError, subprocess.SubprocessError) as e:
        print("FAIL diff: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
