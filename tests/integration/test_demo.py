#!/usr/bin/env python3
"""The first ten minutes (issue 27): the demo as tools/demo records it.

Per interpreter (Python 3: the demo is), spy launches examples/demo.py
twice, as a new user would (a root's interpreter, tools/pyroot's, runs a
copy in a directory the root shares):

  - `spy record -o demo.svg -- python examples/demo.py`: opened in
    Chromium at 1280x800 and at 1920x1080, the labels of find_user and
    handle (the hot spot and its caller) are whole on the first screen,
    without scrolling; the header shows no error, or says in words what
    they were (launch mode folds the start-up into one <start-up> frame,
    and says so);
  - `spy record -f html -o demo.html -- python examples/demo.py`: the
    report's every view passes tests/unit/check-html.py's checks at both
    sizes: find_user and handle on the first screen, the table lists
    find_user, the source view shows `for user in users` with its samples,
    search, zoom, sort and the thread filter work, no console error, no
    request.

A third, shorter launch at 1 kHz into a folded profile checks the
start-up's fold itself: one <start-up> frame under the process root
holding as many samples as "# startup:" says, the program's stacks whole.

Needs Chromium (SKIP, saying so, without it) and ptrace.
"""

import importlib.util
import os
import re
import shutil

import harness

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(SOURCE, "examples", "demo.py")
_spec = importlib.util.spec_from_file_location(
    "check_html", os.path.join(SOURCE, "tests", "unit", "check-html.py"))
ch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ch)

HOT = ["find_user", "handle"]
SIZES = ((1280, 800), (1920, 1080))


def demo_command(interp, d, seconds):
    """The demo's command line; a root's interpreter runs a copy in d,
    which the root shares (as harness.Target does for targets)."""
    if not interp.root:
        return interp.argv([DEMO, "--seconds", seconds])
    copy = os.path.join(d, "demo.py")
    if not os.path.exists(copy):
        shutil.copy(DEMO, copy)
    return interp.command([copy, "--seconds", seconds], binds=(d,))


def record(interp, d, out, fmt=None):
    args = ["record", "-q", "-o", out] + (["-f", fmt] if fmt else [])
    r = harness.run_spy(args + ["--"] + demo_command(interp, d, "2"), timeout=90,
                        env=harness.spy_env(keep_log=False))
    if r.timed_out or r.rc != 0:
        raise harness.SpyFailed("spy record %s: %s" % (os.path.basename(out), r.describe()))


def header_problems(svg):
    """The header's errors: none, or said in words ("1 stack cut short by
    the walk ..."), not as the metadata's "1 (truncated 1)"."""
    with open(svg, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"errors: ([^|<]*)", text)
    if not m:
        return ["the SVG's header has no errors item"]
    if m.group(1).strip() != "0" and not re.match(r"\d+ [a-z]+ [a-z]", m.group(1)):
        return ["the SVG's header shows errors not in words: %r" % m.group(0)]
    return []


def startup_problems(interp, d):
    """Launch mode folds the interpreter's start-up: at 1 kHz a launch has
    start-up samples, all in one <start-up> frame under the process root,
    said in the metadata; the program's own stacks are kept whole."""
    folded = os.path.join(d, "demo.folded")
    r = harness.run_spy(["record", "-q", "-r", "1000", "-o", folded, "--"] + demo_command(interp, d, "1"),
                        timeout=90, env=harness.spy_env(keep_log=False))
    if r.timed_out or r.rc != 0:
        raise harness.SpyFailed("spy record demo.folded: %s" % r.describe())
    with open(folded, encoding="utf-8") as f:
        lines = f.read().splitlines()
    meta = dict(l[2:].split(": ", 1) for l in lines if l.startswith("# ") and ": " in l)
    stacks = [l.rsplit(" ", 1) for l in lines if l and not l.startswith("#")]
    bad = []
    m = re.match(r"(\d+) (\d+)$", meta.get("startup", ""))
    folded_n = sum(int(n) for s, n in stacks if s.split(";")[1:] == ["<start-up>"])
    if not m or int(m.group(1)) < 1:
        bad.append("no start-up folded (# startup: %r)" % meta.get("startup"))
    elif folded_n != int(m.group(1)):
        bad.append("# startup: %s, but %d samples in a <start-up> frame under the process root"
                   % (meta["startup"], folded_n))
    if sum(1 for s, n in stacks if "<start-up>" in s) != 1:
        bad.append("<start-up> is not one stack")
    if not any("find_user (" in s and "<module> (" in s for s, n in stacks):
        bad.append("no whole stack of the program (<module> ... find_user)")
    return bad


def run_one(interp, chromium):
    if interp.version < (3, 0):
        raise harness.SkipInterp("examples/demo.py is Python 3 code")
    bad = []
    d = harness.shared_dir("spy-demo-")
    try:
        svg, page = os.path.join(d, "demo.svg"), os.path.join(d, "demo.html")
        record(interp, d, svg)
        record(interp, d, page, "html")
        bad += header_problems(svg)
        bad += startup_problems(interp, d)
        want = {"visible": HOT, "fn": "find_user", "line": "for user in users"}
        for size in SIZES:
            bad += ["svg %dx%d: %s" % (size + (m,)) for m in ch.svg_first_screen(chromium, svg, HOT, size)]
            found, _ = ch.check(chromium, page, want, size)
            bad += ["html %dx%d: %s" % (size + (m,)) for m in found]
    finally:
        harness.remove_shared_dir(interp, d)
    return bad


def main():
    rep = harness.reporter("demo")
    chromium = ch.cb.find_chromium()
    if not chromium:
        rep.skip("demo", "no Chromium on PATH (.ci/install-deps installs it)")
        rep.finish()
    harness.for_each_interp(rep, lambda interp: run_one(interp, chromium))


if __name__ == "__main__":
    main()
