#!/usr/bin/env python3
"""Check a spy flame graph SVG in a real browser (headless Chromium).

A copy of the SVG gets two extra scripts: one before the writer's own that
collects every error a script throws, and one after it that drives the page
the way a user would and writes what it saw into an attribute of the root
element. Chromium loads the copy and dumps the resulting DOM, which this
script parses. A second run saves a screenshot of the same page (zoom
undone, search highlighted) as a test artefact.

What must hold, or the check fails:
 - no script error (the writer's script, then the driver);
 - frames are drawn (the <path> data of #frames is not empty);
 - a click on a frame narrower than the graph zooms: that frame then spans
   the whole width, the drawing changes, and Escape brings the first
   drawing back;
 - hovering the frames shows, in the tooltip, the source line the profile
   keeps for them (the meson test's profile keeps one, with markup in it,
   which must arrive as text);
 - a search (through the same Ctrl-F handler a user presses; window.prompt
   is answered by the driver) highlights at least one frame and prints a
   "Matched: P%" line; with --expect-pct that P is checked against the
   caller's own figure.

Usage:
  check-browser.py SVG [--search TERM] [--expect-pct P] [--screenshot PNG]
  check-browser.py --spy SPY --artefacts DIR   (the meson test: builds its
      SVG from a folded profile with `spy report`, computes the expected
      match share from that profile itself, saves DIR/browser-svg.png)
  check-browser.py --render SVG PNG            (only the screenshot of SVG,
      unmodified, the first screen of a 1280x800 window, or the whole of a
      taller one: tools/screenshot-svg uses it for the README picture)

Exits 77 (skip) only when no Chromium is installed, saying so.
"""
import argparse
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
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
HIT_COLOUR = "#e020e0"

# Runs before the writer's script, so a throw there is recorded too.
COLLECTOR = """<script type="text/ecmascript"><![CDATA[
window.__spyErrors=[];
window.addEventListener('error',function(e){
 window.__spyErrors.push(String(e.message)+' @'+e.lineno+':'+e.colno);});
]]></script>
"""

# Runs after it: drives the page and stores what it found as JSON.
DRIVER = r"""<script type="text/ecmascript"><![CDATA[
(function(){
var R={errors:window.__spyErrors,steps:[]},root=document.documentElement;
var NS='http://www.w3.org/2000/svg';
function rects(){var out=[],ps=document.querySelectorAll('#frames path'),k,m,re;
 for(k=0;k<ps.length;k++){re=/M([-\d.]+) ([-\d.]+)h([\d.]+)/g;
  while((m=re.exec(ps[k].getAttribute('d')))){
   out.push({x:+m[1],y:+m[2],w:+m[3],fill:ps[k].getAttribute('fill')});}}
 return out;}
function sig(rs){return rs.map(function(r){return r.x+','+r.y+','+r.w;}).sort().join(';');}
function key(k,ctrl){document.dispatchEvent(new KeyboardEvent('keydown',
 {key:k,ctrlKey:!!ctrl,bubbles:true,cancelable:true}));}
try{
 var W=+root.getAttribute('width'),before=rects(),full=0,k;
 R.frames=before.length;
 for(k=0;k<before.length;k++){full=Math.max(full,before[k].w);}
 R.full=full;
 // The widest frame below the root that is still clearly narrower than
 // the graph and wide enough to hit.
 var pick=null;
 for(k=0;k<before.length;k++){var r=before[k];
  if(r.w<full*0.9&&r.w>=4&&(!pick||r.w>pick.w)){pick=r;}}
 R.picked=pick;
 if(pick){
  var box=root.getBoundingClientRect(),s=(box.width||W)/W,layer=document.getElementById('frames');
  layer.dispatchEvent(new MouseEvent('click',{bubbles:true,
   clientX:box.left+(pick.x+pick.w/2)*s,clientY:box.top+(pick.y+4)*s}));
  var after=rects(),spans=false;
  for(k=0;k<after.length;k++){
   if(Math.abs(after[k].y-pick.y)<0.5&&after[k].w>=full-1){spans=true;}}
  R.zoomChanged=sig(after)!==sig(before);
  R.zoomSpans=spans;
  R.resetOpacity=document.getElementById('reset').getAttribute('opacity');
  key('Escape');
  R.unzoomRestores=sig(rects())===sig(before);
 }
 // Hovered: the tooltip of each frame drawn; the source lines it showed.
 var src={},tips=document.getElementById('tip').getElementsByTagName('text'),box2=root.getBoundingClientRect(),s2=(box2.width||W)/W;
 for(k=0;k<before.length&&k<400;k++){var b=before[k];if(b.w<2){continue;}
  root.dispatchEvent(new MouseEvent('mousemove',{bubbles:true,
   clientX:box2.left+(b.x+b.w/2)*s2,clientY:box2.top+(b.y+4)*s2}));
  for(var q=0;q<tips.length;q++){var tx=tips[q].textContent;if(tx.charAt(0)==='\u203a'){src[tx]=1;}}}
 R.sources=Object.keys(src).sort();
 // Searched unzoomed, so every match is in view.
 var term=root.getAttribute('data-spy-search');
 if(!term){var ts=document.querySelectorAll('#frames text');
  for(k=0;k<ts.length&&!term;k++){var t=ts[k].textContent.split(' (')[0];
   if(t&&t!=='all'&&t.indexOf('..')<0&&!/^(process|thread) /.test(t)){term=t;}}}
 R.term=term;
 window.prompt=function(){return term;};
 key('f',true);
 var hits=0,rs=rects();
 for(k=0;k<rs.length;k++){if(rs[k].fill==='%HIT%'){hits++;}}
 R.hits=hits;
 R.matched=document.getElementById('matched').textContent;
}catch(e){R.errors.push('driver: '+e.message);}
root.setAttribute('%ATTR%',JSON.stringify(R));
})();
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


def svg_height(text):
    m = re.search(r'<svg[^>]*\sheight="(\d+)"', text)
    return int(m.group(1)) if m else 800


def screenshot(chromium, svg_path, png_path, size=None):
    """The whole SVG, or with size (width, height) the first screen of a
    window that size, as a user opening the file sees it."""
    with open(svg_path, encoding="utf-8") as f:
        height = min(max(svg_height(f.read()), 100), 4000)
    run_chromium(chromium, ["--screenshot=" + os.path.abspath(png_path),
                            "--window-size=%d,%d" % (size or (1200, height))],
                 "file://" + os.path.abspath(svg_path))
    with open(png_path, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            raise RuntimeError("%s is not a PNG" % png_path)


def instrument(text, term):
    """The SVG with the collector before its script and the driver after."""
    start = re.search(r"<svg\b[^>]*>", text)
    close = text.rfind("</svg>")
    if not start or close < 0:
        raise RuntimeError("no <svg> root element")
    driver = DRIVER.replace("%HIT%", HIT_COLOUR).replace("%ATTR%", RESULT_ATTR)
    root = start.group(0)
    if term:
        root = root[:-1] + ' data-spy-search="%s">' % html.escape(term, quote=True)
    return text[:start.start()] + root + "\n" + COLLECTOR + \
        text[start.end():close] + driver + text[close:]


def matched_pct(text):
    m = re.match(r"Matched: ([\d.]+)% \(", text or "")
    return float(m.group(1)) if m else None


def judge(res, expect_pct, expect_hits=None, expect_source=None):
    """The list of failures found in the driver's results."""
    bad = ["script error: " + e for e in res.get("errors", [])]
    if expect_source is not None and res.get("sources") != [expect_source]:
        bad.append("tooltips showed source lines %r, expected [%r]"
                   % (res.get("sources"), expect_source))
    if not res.get("frames"):
        bad.append("no frame drawn")
    if not res.get("picked"):
        bad.append("no frame narrower than the graph to click on")
    else:
        if not res.get("zoomChanged"):
            bad.append("click on %r did not change the drawing" % res["picked"])
        if not res.get("zoomSpans"):
            bad.append("zoomed frame does not span the graph")
        if res.get("resetOpacity") != "1":
            bad.append("'Reset zoom' not enabled after zooming")
        if not res.get("unzoomRestores"):
            bad.append("Escape did not restore the first drawing")
    if not res.get("term"):
        bad.append("no search term (no frame label to search for)")
    elif not res.get("hits"):
        bad.append("search for %r highlighted nothing" % res["term"])
    elif expect_hits is not None and res["hits"] != expect_hits:
        bad.append("search for %r highlighted %d frames, expected %d"
                   % (res["term"], res["hits"], expect_hits))
    pct = matched_pct(res.get("matched"))
    if pct is None or pct <= 0:
        bad.append("no 'Matched: P%%' line after search: %r" % res.get("matched"))
    elif expect_pct is not None and abs(pct - expect_pct) > 0.006:
        bad.append("matched %.2f%%, expected %.2f%%" % (pct, expect_pct))
    return bad


def check_svg(chromium, svg_path, term=None, expect_pct=None, png=None, expect_hits=None,
              expect_source=None):
    """Runs the checks on svg_path; returns (failures, results)."""
    with open(svg_path, encoding="utf-8") as f:
        text = f.read()
    with tempfile.TemporaryDirectory(prefix="spy-browser-") as d:
        copy = os.path.join(d, "checked.svg")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(instrument(text, term))
        dom = run_chromium(chromium, ["--dump-dom"], "file://" + copy)
        m = re.search(RESULT_ATTR + r'="([^"]*)"', dom)
        if not m:
            return ["the driver script left no results (did the page load?)"], {}
        res = json.loads(html.unescape(m.group(1)))
        if png:
            screenshot(chromium, copy, png)
    return judge(res, expect_pct, expect_hits, expect_source), res


# The meson test's own profile: three threads' worth of stacks with one
# function (compute) reached from two callers, so its share is a sum the
# browser has to get right, not one stack's count.
FOLDED = """# rate-hz: 100
# source-file: 0 lib.py
# source-line: 0:4 def compute(data):
# source-line: 0:5         return crunch(data)  # </text><script>x()</script> \\x1b
process 7;thread 1;main (app.py:1);work (app.py:10);compute (lib.py:5) 600
process 7;thread 1;main (app.py:1);work (app.py:10);read_input (io.py:20) 250
process 7;thread 1;main (app.py:1);report (app.py:40);compute (lib.py:5) 90
process 7;thread 1;main (app.py:1);report (app.py:40);format_row (fmt.py:8) 110
process 7;thread 2;worker (pool.py:3);compute (lib.py:5) 70
process 7;thread 2;worker (pool.py:3);wait_job (pool.py:30) 180
"""


# What hovering compute's frames shows: the kept line, indentation dropped,
# the markup as text.
SOURCE_TIP = "\u203a return crunch(data)  # </text><script>x()</script> \\x1b"


def expected_search(folded, needle):
    """(percent of samples with a frame containing needle, each stack once;
    boxes that match: distinct call paths ending in such a frame)."""
    total = hit = 0
    boxes = set()
    for line in folded.splitlines():
        if not line or line.startswith("#"):
            continue
        stack, count = line.rsplit(" ", 1)
        frames = stack.split(";")
        total += int(count)
        if any(needle in fr for fr in frames):
            hit += int(count)
        boxes |= {tuple(frames[:i + 1]) for i, fr in enumerate(frames) if needle in fr}
    return 100.0 * hit / total, len(boxes)


def meson_test(chromium, spy, artefacts):
    os.makedirs(artefacts, exist_ok=True)
    folded = os.path.join(artefacts, "browser-svg.folded")
    svg = os.path.join(artefacts, "browser-svg.svg")
    png = os.path.join(artefacts, "browser-svg.png")
    with open(folded, "w") as f:
        f.write(FOLDED)
    r = subprocess.run([spy, "report", "-f", "svg", "-o", svg, folded],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    if r.returncode != 0:
        return ["spy report exited %d: %s" % (r.returncode, r.stdout.decode().strip())], {}, None
    pct, boxes = expected_search(FOLDED, "compute (")
    bad, res = check_svg(chromium, svg, "compute", pct, png, boxes, SOURCE_TIP)
    bad += check_mutants(chromium, svg, artefacts)
    bad += check_diff_svg(chromium, spy, artefacts, folded, pct, boxes)
    return bad, res, png


def check_diff_svg(chromium, spy, artefacts, folded, pct, boxes):
    """spy diff's SVG is the same renderer with other colours: NEW's graph
    (this FOLDED) against a BASE where compute ran less; same checks."""
    base = os.path.join(artefacts, "browser-diff-base.folded")
    with open(base, "w") as f:
        f.write(FOLDED.replace(" 600\n", " 200\n"))
    svg = os.path.join(artefacts, "browser-diff.svg")
    r = subprocess.run([spy, "diff", "-q", "-o", svg, base, folded],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    if r.returncode != 0:
        return ["spy diff exited %d: %s" % (r.returncode, r.stdout.decode().strip())]
    bad, _ = check_svg(chromium, svg, "compute", pct,
                       os.path.join(artefacts, "browser-diff.png"), boxes, SOURCE_TIP)
    return ["diff svg: " + m for m in bad]


# Broken copies of the SVG the check must reject, so a check that passes
# everything cannot go unnoticed: (what is broken, text to replace, by what,
# a word the failure must contain).
MUTANTS = [
    ("script throws", '"use strict";', '"use strict";throw new Error("mutant");', "script error"),
    ("click does not zoom", "layer.addEventListener('click'", "layer.addEventListener('x-none'",
     "click on"),
    ("search highlights nothing", "hit[i]=m?1:0;", "hit[i]=0;", "highlighted nothing"),
]


def check_mutants(chromium, svg, artefacts):
    with open(svg, encoding="utf-8") as f:
        text = f.read()
    bad = []
    for what, old, new, word in MUTANTS:
        if old not in text:
            bad.append("mutant %r: %r not found in the SVG" % (what, old))
            continue
        path = os.path.join(artefacts, "browser-mutant.svg")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))
        found, _ = check_svg(chromium, path)
        if not any(word in msg for msg in found):
            bad.append("mutant %r passed the check (found: %s)" % (what, found))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("svg", nargs="?")
    ap.add_argument("--search")
    ap.add_argument("--expect-pct", type=float)
    ap.add_argument("--screenshot")
    ap.add_argument("--spy")
    ap.add_argument("--artefacts")
    ap.add_argument("--render", nargs=2, metavar=("SVG", "PNG"))
    a = ap.parse_args()
    if not (a.svg or a.render or (a.spy and a.artefacts)):
        ap.error("give an SVG, --render SVG PNG, or --spy and --artefacts")

    chromium = find_chromium()
    if not chromium:
        print("SKIP: no Chromium (looked for %s on PATH); .ci/install-deps installs it"
              % ", ".join(CHROMIUM_NAMES))
        return 77
    try:
        if a.render:
            # The first screen of a 1280x800 window; a taller SVG whole, in a
            # window its height (headless Chromium's screenshots do not show
            # the scroll the SVG makes to its root in a shorter window).
            with open(a.render[0], encoding="utf-8") as f:
                height = min(max(svg_height(f.read()), 800), 4000)
            screenshot(chromium, a.render[0], a.render[1], (1280, height))
            print("screenshot: %s" % os.path.abspath(a.render[1]))
            return 0
        if a.svg:
            png = a.screenshot
            bad, res = check_svg(chromium, a.svg, a.search, a.expect_pct, png)
        else:
            bad, res, png = meson_test(chromium, a.spy, a.artefacts)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print("FAIL: %s" % e)
        return 1
    for msg in bad:
        print("FAIL: " + msg)
    if res:
        print("browser: %d frame rects, clicked %s, search %r: %d highlighted, %s"
              % (res.get("frames", 0), res.get("picked"), res.get("term"),
                 res.get("hits", 0), res.get("matched")))
    if png and os.path.exists(png):
        print("screenshot: %s" % os.path.abspath(png))
    print("%d passed, %d failed" % (0 if bad else 1, 1 if bad else 0))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
