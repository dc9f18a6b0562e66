#!/usr/bin/env python3
"""Check spy's HTML report (-f html) in a real browser (headless Chromium).

As check-browser.py does for the SVG (whose Chromium driver this reuses), a
copy of the page gets two extra scripts: one before the report's own that
collects every error, console error and blocked request, and one after it
that drives each view the way a user would and writes what it saw into an
attribute of the root element, read back from Chromium's DOM dump.

What must hold, or the check fails:
 - no script error, no console error, no request (the page's resource
   entries are empty, no Content-Security-Policy violation) and no URL in
   the file but the SVG namespace;
 - the first screen (the window size given) shows the labels of the
   functions named by --visible, whole, without scrolling;
 - the table lists the --function and sorts by own time and by name; a
   click on its row highlights frames in the graph and prints "Matched";
 - search highlights frames and prints "Matched: P%"; a click on a frame
   narrower than the graph zooms it to the full width, Escape restores;
 - the icicle button puts the root at the top;
 - the thread filter (when the profile has thread roots) leaves only the
   chosen thread's frames;
 - the source view shows the --line text with a sample count;
 - with windows in the profile, the charts are drawn;
 - hostile strings arrive as text: no script of theirs runs.

Usage:
  check-html.py HTML [--visible F ...] [--function F] [--line TEXT] [--size WxH]
  check-html.py --spy SPY --artefacts DIR   (the meson test: a hostile
      profile with threads, windows, readings and source lines, reported
      with `spy report -f html`, checked at 1280x800; then broken copies
      of the page, which the check must reject; then a profile with a
      90-frame tower, whose SVG and report must show the widest frames on
      the first screen at 1280x800 and 1920x1080, and must not without
      their scroll to the root)

Exits 77 (skip) only when no Chromium is installed, saying so.
"""
import argparse
import html
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("check_browser", os.path.join(HERE, "check-browser.py"))
cb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cb)

RESULT_ATTR = "data-spy-check"
HIT = "#e020e0"

COLLECTOR = """<script>
window.__spyErrors=[];
window.addEventListener('error',function(e){window.__spyErrors.push('error: '+e.message+' @'+e.lineno);});
document.addEventListener('securitypolicyviolation',function(e){
 window.__spyErrors.push('blocked request: '+e.blockedURI+' ('+e.violatedDirective+')');});
(function(){var ce=console.error;console.error=function(){
 window.__spyErrors.push('console.error: '+Array.prototype.join.call(arguments,' '));
 return ce.apply(console,arguments);};})();
</script>
"""

# Runs after the report's script, synchronously: what it reads is what
# the page showed once loaded.
DRIVER = r"""<script>
(function(){
var R={errors:window.__spyErrors,steps:{}},S=R.steps,k,i;
var want=JSON.parse(document.documentElement.getAttribute('data-spy-want'));
function $(id){return document.getElementById(id);}
function rects(){var out=[],ps=document.querySelectorAll('#fg path'),m,re;
 for(k=0;k<ps.length;k++){re=/M([-\d.]+) ([-\d.]+)h([\d.]+)/g;
  while((m=re.exec(ps[k].getAttribute('d')))){out.push({x:+m[1],y:+m[2],w:+m[3],fill:ps[k].getAttribute('fill')});}}
 return out;}
function sig(){return rects().map(function(r){return r.x+','+r.y+','+r.w+r.fill;}).sort().join(';');}
function hits(){return rects().filter(function(r){return r.fill==='%HIT%';}).length;}
function labels(){return Array.prototype.map.call(document.querySelectorAll('#fg text'),function(t){return t.textContent;});}
function key(k){document.dispatchEvent(new KeyboardEvent('keydown',{key:k,bubbles:true,cancelable:true}));}
function visible(name){var ts=document.querySelectorAll('#fg text'),vw=window.innerWidth,vh=window.innerHeight;
 for(var q=0;q<ts.length;q++){if(ts[q].textContent.indexOf(name)!==0){continue;}var b=ts[q].getBoundingClientRect();
  if(b.top>=0&&b.left>=0&&b.bottom<=vh&&b.right<=vw&&b.width>0){return true;}}
 return false;}
function rowsText(){return Array.prototype.map.call(document.querySelectorAll('#rows tr'),function(tr){
 return [tr.cells[1].textContent,tr.cells[5].firstChild.textContent];});}
try{
 R.viewport=[window.innerWidth,window.innerHeight];
 S.firstScreen={};(want.visible||[]).forEach(function(f){S.firstScreen[f]=visible(f);});
 S.frames=rects().length;
 /* the table */
 var rows=rowsText();S.tableRows=rows.length;
 S.kindSplit=/by kind: [\d.]+% python, [\d.]+% native, [\d.]+% idle/.test($('rowsnote').textContent);
 S.tableHas=rows.some(function(r){return r[1]===want.fn;});
 document.querySelector('#tbl th[data-k="2"]').click();
 var own=rowsText().map(function(r){return parseFloat(r[0]);});
 S.sortOwn=own.length>1&&own.every(function(v,q){return !q||own[q-1]>=v;})&&own[0]>own[own.length-1];
 document.querySelector('#tbl th[data-k="0"]').click();
 var names=rowsText().map(function(r){return r[1];});
 S.sortName=names.length>1&&names.every(function(v,q){return !q||names[q-1]<=v;});
 var tr=Array.prototype.filter.call(document.querySelectorAll('#rows tr'),function(t){return t.cells[5].firstChild.textContent===want.fn;})[0];
 if(tr){tr.cells[5].click();S.rowHits=hits();S.rowMatched=$('matched').textContent;}
 key('Escape');
 /* search */
 var s=$('search');s.value=want.fn;s.dispatchEvent(new Event('input',{bubbles:true}));
 S.searchHits=hits();S.searchMatched=$('matched').textContent;
 s.value='';s.dispatchEvent(new Event('input',{bubbles:true}));S.searchCleared=hits()===0;
 /* zoom: the widest frame clearly narrower than the graph */
 var before=sig(),rs=rects(),full=0,pick=null;
 for(k=0;k<rs.length;k++){full=Math.max(full,rs[k].w);}
 for(k=0;k<rs.length;k++){if(rs[k].w<full*0.9&&rs[k].w>=4&&(!pick||rs[k].w>pick.w)){pick=rs[k];}}
 if(pick){var svg=$('fg'),b=svg.getBoundingClientRect();
  var h0=+svg.getAttribute('height');
  svg.dispatchEvent(new MouseEvent('click',{bubbles:true,clientX:b.left+pick.x+pick.w/2,clientY:b.top+pick.y+4}));
  /* The graph's height follows what the zoom shows; rows keep their distance from the root, at the bottom. */
  var after=rects(),h1=+svg.getAttribute('height');
  S.zoomSpans=after.some(function(r){return Math.abs((h1-r.y)-(h0-pick.y))<0.5&&r.w>=full-1;});
  S.resetEnabled=!$('reset').disabled;key('Escape');S.unzoom=sig()===before;}
 /* icicle: the root row moves from the bottom to the top */
 function rootY(){var ts=document.querySelectorAll('#fg text');for(var q=0;q<ts.length;q++){if(ts[q].textContent==='all'){return +ts[q].getAttribute('y');}}return -1;}
 var y0=rootY();$('mode').click();var y1=rootY();$('mode').click();
 S.icicle=y0>0&&y1>=0&&y1<y0&&rootY()===y0;
 /* the thread filter */
 var sel=$('thread');S.threads=sel.options.length-1;
 if(sel.options.length>2){var opt=sel.options[2],name=opt.textContent.split(' \u2014 ')[0];
  sel.value=opt.value;sel.dispatchEvent(new Event('change',{bubbles:true}));
  var ls=labels().filter(function(t){return t.indexOf('thread ')===0;});
  S.threadOnly=ls.length>0&&ls.every(function(t){return name.indexOf(t.replace(/\.\.$/,''))===0;});
  sel.value='-1';sel.dispatchEvent(new Event('change',{bubbles:true}));}
 /* the source view */
 S.sourceLine=Array.prototype.some.call(document.querySelectorAll('#src tr'),function(t){
  return t.cells.length>3&&t.cells[3].textContent.indexOf(want.line)>=0&&+t.cells[0].textContent.replace(/,/g,'')>0;});
 S.charts=document.querySelectorAll('#win .chart polyline').length;
 S.chartPoints=Array.prototype.every.call(document.querySelectorAll('#win polyline'),function(p){return p.getAttribute('points').split(' ').length>1;});
 S.requests=performance.getEntriesByType('resource').length;
 S.pwned=!!window.__pwned;
 S.title=document.title;
}catch(e){R.errors.push('driver: '+e.message+' '+e.stack);}
document.documentElement.setAttribute('%ATTR%',JSON.stringify(R));
})();
</script>
"""


def instrument(text, want):
    """The page with the collector before its first script and the driver after its last."""
    first = text.find('<script type="application/json"')
    last = text.rfind("</body>")
    head = text.find("<html")
    if first < 0 or last < 0 or head < 0:
        raise RuntimeError("not a spy HTML report (no data block or </body>)")
    text = text[:head + 5] + " data-spy-want=\"%s\"" % html.escape(json.dumps(want), quote=True) + text[head + 5:]
    first = text.find('<script type="application/json"')
    last = text.rfind("</body>")
    driver = DRIVER.replace("%HIT%", HIT).replace("%ATTR%", RESULT_ATTR)
    return text[:first] + COLLECTOR + text[first:last] + driver + text[last:]


def static_problems(text):
    """URLs other than the SVG namespace, or markup that fetches, outside
    the data block (JSON, never parsed as markup): anything the page could
    request."""
    text = re.sub(r'<script type="application/json" id="spy-data">.*?</script>', "", text, flags=re.S)
    urls = set(re.findall(r"(?:https?|ftp|wss?)://[^\s\"'<>)]*", text))
    urls.discard("http://www.w3.org/2000/svg")
    bad = ["the file names a URL: %s" % u for u in sorted(urls)]
    for pat in (r"<link\b", r"\bsrc\s*=", r"@import", r"\bfetch\(", r"XMLHttpRequest"):
        if re.search(pat, text):
            bad.append("the file holds %s" % pat)
    return bad


# The SVG's first screen: which labels are whole in the window, once its
# script has drawn (and scrolled) the graph.
SVG_DRIVER = r"""<script type="text/ecmascript"><![CDATA[
(function(){var R={errors:window.__spyErrors||[],seen:{}},root=document.documentElement;
try{var want=JSON.parse(root.getAttribute('data-spy-want')),ts=document.querySelectorAll('#frames text');
 R.viewport=[window.innerWidth,window.innerHeight];R.scroll=window.pageYOffset;
 want.forEach(function(name){R.seen[name]=false;
  for(var q=0;q<ts.length;q++){if(ts[q].textContent.indexOf(name)!==0){continue;}var b=ts[q].getBoundingClientRect();
   if(b.top>=0&&b.left>=0&&b.bottom<=window.innerHeight&&b.right<=window.innerWidth&&b.width>0){R.seen[name]=true;}}});
 /* The controls follow the view to the root: on the first screen too, over the frames. */
 var c=document.getElementById('reset').getBoundingClientRect(),top=document.elementFromPoint(c.left+2,c.top+c.height/2);
 R.controls=c.top>=0&&c.bottom<=window.innerHeight&&!!top&&top.id==='reset';
}catch(e){R.errors.push('driver: '+e.message);}
root.setAttribute('%ATTR%',JSON.stringify(R));})();
]]></script>
"""


def svg_first_screen(chromium, path, names, size):
    """Failures: a script error, or a name in names whose label is not whole
    on the first screen of a window of size (width, height)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = re.search(r"<svg\b[^>]*>", text)
    close = text.rfind("</svg>")
    if not start or close < 0:
        return ["%s: no <svg> root element" % path]
    root = start.group(0)[:-1] + ' data-spy-want="%s">' % html.escape(json.dumps(names), quote=True)
    copy_text = (text[:start.start()] + root + "\n" + cb.COLLECTOR + text[start.end():close]
                 + SVG_DRIVER.replace("%ATTR%", RESULT_ATTR) + text[close:])
    with tempfile.TemporaryDirectory(prefix="spy-svg-") as d:
        copy = os.path.join(d, "checked.svg")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(copy_text)
        dom = cb.run_chromium(chromium, ["--dump-dom", "--window-size=%d,%d" % size], "file://" + copy)
    m = re.search(RESULT_ATTR + r'="([^"]*)"', dom)
    if not m:
        return ["%s: the driver script left no results" % path]
    res = json.loads(html.unescape(m.group(1)))
    bad = ["script error: " + e for e in res.get("errors", [])]
    for name, ok in sorted(res.get("seen", {}).items()):
        if not ok:
            bad.append("%r is not on the SVG's first screen (%dx%d)" % ((name,) + tuple(size)))
    if not res.get("controls"):
        bad.append("the SVG's 'Reset zoom' is not on the first screen, on top (%dx%d)" % tuple(size))
    return bad


def run_page(chromium, path, want, size):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with tempfile.TemporaryDirectory(prefix="spy-html-") as d:
        copy = os.path.join(d, "checked.html")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(instrument(text, want))
        dom = cb.run_chromium(chromium, ["--dump-dom", "--window-size=%d,%d" % size], "file://" + copy)
    m = re.search(RESULT_ATTR + r'="([^"]*)"', dom)
    if not m:
        return None, text
    return json.loads(html.unescape(m.group(1))), text


def judge(res, want, windows):
    if res is None:
        return ["the driver script left no results (did the page load?)"]
    s = res.get("steps", {})
    bad = ["script error: " + e for e in res.get("errors", [])]
    for f, ok in sorted(s.get("firstScreen", {}).items()):
        if not ok:
            bad.append("%r is not on the first screen (%dx%d)" % ((f,) + tuple(res.get("viewport", (0, 0)))))
    checks = [
        ("frames", "no frame drawn"),
        ("tableHas", "the table does not list %r" % want["fn"]),
        ("kindSplit", "the table does not give the python/native/idle split"),
        ("sortOwn", "sorting by own time did not order the rows"),
        ("sortName", "sorting by name did not order the rows"),
        ("rowHits", "a click on %r's row highlighted nothing" % want["fn"]),
        ("searchHits", "search for %r highlighted nothing" % want["fn"]),
        ("searchCleared", "clearing the search left highlights"),
        ("zoomSpans", "the clicked frame does not span the graph"),
        ("resetEnabled", "'Reset zoom' not enabled after zooming"),
        ("unzoom", "Escape did not restore the first drawing"),
        ("icicle", "the icicle button did not put the root at the top"),
        ("sourceLine", "the source view does not show %r with samples" % want["line"]),
    ]
    for key, msg in checks:
        if not s.get(key):
            bad.append(msg)
    for key in ("rowMatched", "searchMatched"):
        if not re.match(r"Matched: [\d.]+% \(", s.get(key) or ""):
            bad.append("no 'Matched: P%%' line after %s: %r" % (key, s.get(key)))
    if s.get("threads", 0) > 1 and not s.get("threadOnly"):
        bad.append("the thread filter left other threads' frames")
    if windows and not (s.get("charts") and s.get("chartPoints")):
        bad.append("no charts of the windows (%r)" % s.get("charts"))
    if s.get("requests"):
        bad.append("%d requests left the page" % s["requests"])
    if s.get("pwned"):
        bad.append("a hostile string ran as script")
    return bad


def check(chromium, path, want, size=(1280, 800), windows=False, threads=False):
    res, text = run_page(chromium, path, want, size)
    bad = judge(res, want, windows) + static_problems(text)
    if threads and res and res.get("steps", {}).get("threads", 0) < 2:
        bad.append("the thread filter lists %r threads, expected 2 or more" % res["steps"].get("threads"))
    return bad, res


# The meson test's profile: two threads, hostile names (markup, a script
# close, a comment open, U+2028, bytes that are not UTF-8), kept source
# with markup, four windows in which compute's share rises, and readings.
EVIL = "ev</script><script>window.__pwned=1</script><!--\u2028<img src=x onerror=window.__pwned=1>"
FOLDED = """# rate-hz: 100
# command: app.py </script><b>x</b>
# resources: t-s user-ms sys-ms rss-kb threads ctxsw read-bytes write-bytes
# res-0: 0.000 0 0 8000 2 8 0 0
# res-1: 1.000 500 10 12000 2 50 0 0
# res-2: 2.000 1400 20 16000 2 90 0 0
# res-3: 3.000 2300 30 20000 2 120 0 0
# slice-s: 1
# slices: 4
# slice-0: 0:10 1:100 3:30 4:60
# slice-1: 0:30 1:80 3:30 4:60
# slice-2: 0:60 1:50 3:30 4:60
# slice-3: 0:100 1:20 3:20 4:60
# source-file: 0 lib.py
# source-line: 0:4 def compute(data):
# source-line: 0:5     for row in data:  # </script><script>window.__pwned=1</script>
# source-line: 0:6         crunch(row)
process 7;thread 1 "main";main (app.py:1);work (app.py:10);compute (lib.py:5) 200
process 7;thread 1 "main";main (app.py:1);work (app.py:10);read_input (io.py:20) 250
process 7;thread 1 "main";main (app.py:1);work (app.py:10);%s (evil.py:3) 40
process 7;thread 2 "pool";worker (pool.py:3);compute (lib.py:5) 110
process 7;thread 2 "pool";worker (pool.py:3);wait_job (pool.py:30) 240
""" % EVIL

# Broken copies the check must reject: (what, text to replace, by what, a word the failure holds).
MUTANTS = [
    ("script throws", '"use strict";', '"use strict";throw new Error("mutant");', "script error"),
    ("sort ignored", "sortk=+this.getAttribute('data-k');", "", "sorting"),
    ("filter ignored", "thr=+this.value;", "", "thread filter"),
    ("a request", "<title>", "<title><link rel=\"icon\" href=\"http://example.invalid/x.png\">", "URL"),
]


def meson_test(chromium, spy, artefacts):
    os.makedirs(artefacts, exist_ok=True)
    folded = os.path.join(artefacts, "report.folded")
    page = os.path.join(artefacts, "report.html")
    with open(folded, "wb") as f:
        f.write(FOLDED.encode("utf-8").replace(b"evil.py", b"ev\xffil.py"))
    r = subprocess.run([spy, "report", "-o", page, folded], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    if r.returncode != 0:
        return ["spy report exited %d: %s" % (r.returncode, r.stdout.decode().strip())], {}
    want = {"visible": ["compute", "work"], "fn": "compute", "line": "for row in data"}
    bad, res = check(chromium, page, want, windows=True, threads=True)
    s = res.get("steps", {}) if res else {}
    if s.get("charts", 0) < 5:
        bad.append("expected 5 charts (RSS, CPU, threads, GC, compute rising), got %r" % s.get("charts"))
    with open(page, encoding="utf-8") as f:
        text = f.read()
    for raw in ("__pwned=1</script>", "<!--", "\u2028", "<img", "<b>x</b>"):
        if raw in text:
            bad.append("the file holds %r raw" % raw)
    for what, old, new, word in MUTANTS:
        if old not in text:
            bad.append("mutant %r: %r not in the page" % (what, old))
            continue
        path = os.path.join(artefacts, "report-mutant.html")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))
        found, _ = check(chromium, path, want, windows=True, threads=True)
        if not any(word in m for m in found):
            bad.append("mutant %r passed the check (found: %s)" % (what, found))
    return bad + deep_test(chromium, spy, artefacts), res


# A profile whose deepest stack (a narrow tower of imports, as a launch's
# start-up is) is far taller than a screen: the widest frames must still be
# on the first screen, in the SVG and in the report, and not without the
# scroll that puts them there.
TOWER = ";".join("_find_and_load (<frozen importlib._bootstrap>:%d)" % i for i in range(90))
DEEP = """process 7;main (app.py:1);work (app.py:10);compute (lib.py:5) 900
process 7;main (app.py:1);work (app.py:10);read_input (io.py:20) 300
process 7;%s 4
""" % TOWER
DEEP_MUTANTS = [
    ("svg", "window.scrollTo(0,HEIGHT-window.innerHeight);", ""),
    ("svg", "head.parentNode.insertBefore(head,tip);", ""),
    ("svg", "follow();", ""),
    ("html", "wrap.scrollTop=wrap.scrollHeight;", ""),
]


def deep_test(chromium, spy, artefacts):
    folded = os.path.join(artefacts, "deep.folded")
    with open(folded, "w") as f:
        f.write(DEEP)
    bad, pages = [], {}
    for fmt in ("svg", "html"):
        pages[fmt] = os.path.join(artefacts, "deep." + fmt)
        r = subprocess.run([spy, "report", "-o", pages[fmt], folded], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
        if r.returncode != 0:
            return ["spy report -f %s exited %d: %s" % (fmt, r.returncode, r.stdout.decode().strip())]
    names = ["compute", "work"]
    want = {"visible": names, "fn": "compute", "line": "-"}

    def first_screen(fmt, path, size):
        if fmt == "svg":
            return svg_first_screen(chromium, path, names, size)
        res, _ = run_page(chromium, path, want, size)
        if res is None:
            return ["the driver script left no results"]
        return ["%r is not on the first screen" % n for n, ok in sorted(res["steps"]["firstScreen"].items())
                if not ok] + ["script error: " + e for e in res.get("errors", [])]

    for size in ((1280, 800), (1920, 1080)):
        for fmt in ("svg", "html"):
            bad += ["deep %s %dx%d: %s" % ((fmt,) + size + (m,)) for m in first_screen(fmt, pages[fmt], size)]
    for fmt, old, new in DEEP_MUTANTS:
        with open(pages[fmt], encoding="utf-8") as f:
            text = f.read()
        if old not in text:
            bad.append("deep mutant %s: %r not in the file" % (fmt, old))
            continue
        path = os.path.join(artefacts, "deep-mutant-%d.%s" % (DEEP_MUTANTS.index((fmt, old, new)), fmt))
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))
        if not any("first screen" in m for m in first_screen(fmt, path, (1280, 800))):
            bad.append("deep mutant %s (%r removed) passed the first-screen check" % (fmt, old))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("html", nargs="?")
    ap.add_argument("--visible", action="append", default=[])
    ap.add_argument("--function", default="find_user")
    ap.add_argument("--line", default="for user in users")
    ap.add_argument("--size", default="1280x800")
    ap.add_argument("--spy")
    ap.add_argument("--artefacts")
    a = ap.parse_args()
    if not (a.html or (a.spy and a.artefacts)):
        ap.error("give an HTML report, or --spy and --artefacts")
    chromium = cb.find_chromium()
    if not chromium:
        print("SKIP: no Chromium (looked for %s on PATH); .ci/install-deps installs it"
              % ", ".join(cb.CHROMIUM_NAMES))
        return 77
    try:
        if a.html:
            size = tuple(int(v) for v in a.size.split("x"))
            want = {"visible": a.visible, "fn": a.function, "line": a.line}
            bad, res = check(chromium, a.html, want, size)
        else:
            bad, res = meson_test(chromium, a.spy, a.artefacts)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print("FAIL: %s" % e)
        return 1
    for msg in bad:
        print("FAIL: " + msg)
    if res:
        print("html: %s" % json.dumps(res.get("steps", {}), sort_keys=True))
    print("%d passed, %d failed" % (0 if bad else 1, 1 if bad else 0))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
