#!/usr/bin/env python3
"""spy record keeps the sampled source lines; `-f lines` shows them.

Per interpreter, against targets/hot_line.py (one line, marked @hot, does
nearly all the work; the line below it, @hostile, is a comment holding a
terminal escape, a bidi override and markup):

  - record --pid into a folded profile: it carries the hot line's text in
    its "# source-line:" block, read through /proc/PID/root (the root's
    interpreters run in a container and a chroot, so that path is the
    one that works there);
  - report -f lines: in spin()'s listing the line with the largest self
    share is the @hot line, with its text; the @hostile line is shown
    escaped, and no control byte reaches the terminal;
  - report -f json: the hot frame's "source" is the line's text; the SVG
    parses as XML with one script, and the hostile text adds no markup;
  - the same profile without its source block: report -f lines still gives
    the hot line with its figures and says the source is unavailable, and
    diff compares it with the one that has it;
  - record -f lines, launching the target by a relative name from its
    directory (before 3.9 the main script's file name stays relative: the
    file is found through the target's working directory); not for the
    root's interpreters, whose working directory is the root's.

Shares are sampled, so the check is "the hot line has the largest self
share", not a number.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.dom.minidom

import harness

TARGET = harness.target_path("hot_line.py")
MARKS = harness.markers(TARGET)
HOT, HOSTILE = MARKS["hot"], MARKS["hostile"]
HOT_TEXT = "total += (i * i) % 7 + (i ^ 5) * 3"
HOSTILE_SHOWN = "# \\x1b]0;pwned\\x07 \\u202e </script><script>alert(1)</script> ]]>"


def spy(args, timeout=60, env=None):
    return harness.run_spy(list(args), timeout=timeout,
                           env=harness.spy_env(env, keep_log=False))


def failed(r, what):
    if r.timed_out or r.rc != 0:
        return ["%s: %s" % (what, r.describe())]
    return []


def control_bytes(text):
    return sorted(set("%02x" % ord(c) for c in text
                      if (ord(c) < 0x20 and c != "\n") or ord(c) == 0x7f))


def parse_lines(text, func):
    """{line: (self, total, text)} of func's listing in `-f lines` output,
    and its header; ({}, None) when the function is not listed."""
    rows, header, cols, src = {}, None, None, None
    lines = text.split("\n")
    for i, l in enumerate(lines):
        if l.startswith(func + " ("):
            header = l
            body = lines[i + 1:]
            break
    else:
        return {}, None
    for l in body:
        if not l:
            break
        if l.lstrip().startswith("line "):
            # Columns are right-aligned under their labels; the text starts
            # under "source" (absent when no text is kept).
            src = l.find("source")
            cols = [m.end() for m in re.finditer(r"\S+", l[:src if src > 0 else len(l)])]
            continue
        if cols is None or l.strip() == "..." or l.startswith("  ("):
            continue
        vals, start = [], 0
        for end in cols:
            vals.append(l[start:end].strip())
            start = end
        num = lambda s: int(s) if s else 0
        rows[int(vals[0])] = (num(vals[1]), num(vals[3]),
                              l[src + 0:] if src and src > 0 and len(l) > src else "")
    return rows, header


def hot_problems(text, what, with_source=True):
    p = []
    bad = control_bytes(text)
    if bad:
        p.append("%s: control bytes %s in the output" % (what, bad))
    rows, header = parse_lines(text, "spin")
    if not rows:
        return p + ["%s: spin() not listed: %r" % (what, text[:400])]
    top = max(rows, key=lambda l: rows[l][0])
    if top != HOT:
        p.append("%s: largest self share on line %d, expected %d (@hot): %r"
                 % (what, top, HOT, sorted(rows.items())))
    if with_source:
        if HOT_TEXT not in rows.get(HOT, (0, 0, ""))[2]:
            p.append("%s: line %d's text missing: %r" % (what, HOT, rows.get(HOT)))
        if HOSTILE in rows and HOSTILE_SHOWN not in rows[HOSTILE][2]:
            p.append("%s: line %d not shown escaped: %r" % (what, HOSTILE, rows[HOSTILE]))
    elif "source unavailable" not in text:
        p.append("%s: no word that the source is unavailable: %r" % (what, text[:300]))
    return p


def folded_source(path):
    """{(file, line): text} of a folded profile's source block."""
    files, out = {}, {}
    with open(path, encoding="utf-8") as f:
        for l in f:
            if not l.startswith("# "):
                break
            key, _, v = l[2:].rstrip("\n").partition(": ")
            if key == "source-file":
                i, _, name = v.partition(" ")
                files[i] = name
            elif key == "source-line":
                ref, _, text = v.partition(" ")
                i, _, line = ref.partition(":")
                out[(files[i], int(line))] = text
    return out


def json_svg_problems(d, prof):
    p = []
    r = spy(["report", "-f", "json", prof])
    p += failed(r, "report -f json")
    if not p:
        doc = json.loads(r.out)
        hot = [f for f in doc["frames"] if f["func"].endswith("spin") and f["line"] == HOT]
        if not hot or HOT_TEXT not in hot[0].get("source", ""):
            p.append("json: the hot frame has no source: %r" % hot)
    svg = os.path.join(d, "hot.svg")
    r = spy(["report", "-o", svg, prof])
    p += failed(r, "report -o hot.svg")
    if not r.rc:
        try:
            doc = xml.dom.minidom.parse(svg)
            n = len(doc.getElementsByTagName("script"))
            if n != 1:
                p.append("svg: %d script elements" % n)
        except Exception as e:  # noqa: BLE001 - any parse error is the failure
            p.append("svg is not XML: %s" % e)
        with open(svg, encoding="utf-8") as f:
            text = f.read()
        if "(i * i) % 7 + (i ^ 5) * 3" not in text:
            p.append("svg: the hot line's text is not in the tooltip strings")
        if control_bytes(text):
            p.append("svg: control bytes %s" % control_bytes(text))
    return p


def record_pid(interp, d):
    p = []
    prof = os.path.join(d, "hot.folded")
    with harness.Target(interp, TARGET) as t:
        r = spy(["record", "-q", "-r", "200", "-d", "3", "--pid", str(t.pid), "-o", prof])
        p += failed(r, "record --pid")
    if p:
        return p
    src = folded_source(prof)
    hot = [text for (name, line), text in src.items()
           if name.endswith("hot_line.py") and line == HOT]
    if not hot or HOT_TEXT not in hot[0]:
        p.append("folded: no source line %d of hot_line.py (%d lines kept)" % (HOT, len(src)))
    r = spy(["report", "-f", "lines", prof])
    p += failed(r, "report -f lines") or hot_problems(r.out, "report -f lines")
    p += json_svg_problems(d, prof)

    # Without the block: figures, and the word that the source is missing.
    bare = os.path.join(d, "bare.folded")
    with open(prof, encoding="utf-8") as f, open(bare, "w", encoding="utf-8") as g:
        g.writelines(l for l in f if not l.startswith("# source-"))
    r = spy(["report", "-f", "lines", bare])
    p += failed(r, "report -f lines (no source)") or \
        hot_problems(r.out, "report -f lines (no source)", with_source=False)
    r = spy(["diff", bare, prof])
    p += failed(r, "diff without and with source")
    return p


def record_launch(interp, d):
    if interp.root:
        return []
    out = os.path.join(d, "hot.lines.txt")
    # Launched from its directory by a relative name; ends on its own.
    r = harness.run_spy(["record", "-q", "-r", "200", "-o", out, "--"]
                        + interp.argv(["hot_line.py"]), timeout=60,
                        env=harness.spy_env({"SPY_TARGET_LIFETIME": "3"}, keep_log=False),
                        cwd=harness.TARGETS)
    p = failed(r, "record -f lines (launched)")
    if not p:
        with open(out, encoding="utf-8") as f:
            p += hot_problems(f.read(), "record -o hot.lines.txt")
    return p


def run_one(interp):
    d = tempfile.mkdtemp(prefix="spy-lines-")
    try:
        return record_pid(interp, d) + record_launch(interp, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    rep = harness.reporter("lines")
    harness.for_each_interp(rep, run_one,
                            expect=("2.7", "3.8", "3.11", "3.12", "3.13", "3.14", "3.15"), chroot=True)


if __name__ == "__main__":
    try:
        main()
    except (harness.HarnessError, OSError, subprocess.SubprocessError) as e:
        print("FAIL lines: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
