"""Headless Chromium for the browser checks (check-browser.py for the SVG,
check-html.py for the HTML report, test_demo.py for both): finding and
running it, loading an instrumented copy of a page and reading back what
the copy's driver script wrote, the broken copies a check must reject, and
a check's exit code and lines.

An instrumented copy carries a driver script that writes its results, as
JSON, into the RESULT_ATTR attribute of the root element; Chromium's DOM
dump (--dump-dom) brings them back.
"""
import html
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
# Chromium on a closed network waits for services it cannot reach unless
# told not to; as root it refuses to start without --no-sandbox.
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
    "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--virtual-time-budget=5000",
]
TIMEOUT_S = 60
RESULT_ATTR = "data-spy-check"
# The colour the drivers look for in a highlighted frame.
HIT_COLOUR = "#e020e0"
EXIT_SKIP = 77

# Goes before an SVG's own script, so a throw there is recorded too.
SVG_COLLECTOR = """<script type="text/ecmascript"><![CDATA[
window.__spyErrors=[];
window.addEventListener('error',function(e){
 window.__spyErrors.push(String(e.message)+' @'+e.lineno+':'+e.colno);});
]]></script>
"""


def find_chromium():
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def run_chromium(chromium, args, url):
    """Run Chromium in a fresh profile; returns its stdout. Raises on failure."""
    with tempfile.TemporaryDirectory(prefix="spy-chromium-") as profile:
        cmd = [chromium] + CHROMIUM_FLAGS + ["--user-data-dir=" + profile] + args + [url]
        # Its own session, so a hang is ended with every helper process it
        # started, and only those.
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        try:
            out, err = p.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise RuntimeError("chromium did not finish within %d s" % TIMEOUT_S)
        if p.returncode != 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-3:]
            raise RuntimeError("chromium exited %d: %s" % (p.returncode, " | ".join(tail)))
        return out.decode("utf-8", "replace")


def instrument_svg(text, attr, value, before, after):
    """The SVG with attr=value on its root (none if value is None), the
    script before right after the root's tag and the script after just
    before its close. Raises RuntimeError if it has no root element."""
    start = re.search(r"<svg\b[^>]*>", text)
    close = text.rfind("</svg>")
    if not start or close < 0:
        raise RuntimeError("no <svg> root element")
    root = start.group(0)
    if value is not None:
        root = root[:-1] + ' %s="%s">' % (attr, html.escape(value, quote=True))
    return text[:start.start()] + root + "\n" + before + text[start.end():close] + after + text[close:]


def driven(chromium, text, name, args=(), keep=None):
    """Load text (an instrumented copy, saved as name in a scratch
    directory) in Chromium with args; the driver's results, or None if it
    left none. keep(path) runs on the copy before it is removed."""
    with tempfile.TemporaryDirectory(prefix="spy-browser-") as d:
        copy = os.path.join(d, name)
        with open(copy, "w", encoding="utf-8") as f:
            f.write(text)
        dom = run_chromium(chromium, ["--dump-dom"] + list(args), "file://" + copy)
        m = re.search(RESULT_ATTR + r'="([^"]*)"', dom)
        res = json.loads(html.unescape(m.group(1))) if m else None
        if res is not None and keep:
            keep(copy)
    return res


def mutants_caught(text, mutants, path, check):
    """Failures unless every broken copy is rejected. mutants: (what is
    broken, text to replace, by what, a word the failure must hold); each
    copy is written to path and check(path) gives its failures."""
    bad = []
    for what, old, new, word in mutants:
        if old not in text:
            bad.append("mutant %r: %r not in the file" % (what, old))
            continue
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))
        found = check(path)
        if not any(word in msg for msg in found):
            bad.append("mutant %r passed the check (found: %s)" % (what, found))
    return bad


def main_with(check):
    """A check's exit code: EXIT_SKIP, saying why, without Chromium; else
    check(chromium) gives (failures, lines to say), each failure a FAIL
    line, then the lines and the count; 1 if anything failed or raised."""
    chromium = find_chromium()
    if not chromium:
        print("SKIP: no Chromium (looked for %s on PATH); .ci/install-deps installs it"
              % ", ".join(CHROMIUM_NAMES))
        return EXIT_SKIP
    try:
        bad, said = check(chromium)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print("FAIL: %s" % e)
        return 1
    for msg in bad:
        print("FAIL: " + msg)
    for line in said:
        print(line)
    print("%d passed, %d failed" % (0 if bad else 1, 1 if bad else 0))
    return 1 if bad else 0
