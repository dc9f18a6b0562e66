#!/usr/bin/env python3
"""Check the SVG flame graph writer's output with a real XML parser.

Runs test-flamegraph-svg with a temporary directory (it saves the SVGs it
writes there), then for each file: it parses as XML (xml.dom.minidom); it
has exactly one <script> and only the elements the writer emits; its tag
counts equal those of the plain profile's file, so hostile names added no
element; the script's string table decodes back to exactly the hostile
names (invalid UTF-8 as U+FFFD); the root's total is the sample count.

Usage: check-svg.py PATH/TO/test-flamegraph-svg
"""
import collections
import os
import re
import subprocess
import sys
import tempfile
import xml.dom.minidom

ALLOWED = {"svg", "title", "style", "rect", "text", "g", "path", "script"}

HOSTILE = [
    b"</text><script>alert(1)</script>",
    b"\"'><g onload=alert(1)>",
    b"]]><script>alert(2)</script><![CDATA[",
    b"x\\\";alert(3);//",
    b"line\nbreak\r\ttab",
    b"sep\xe2\x80\xa8ara\xe2\x80\xa9tor",
    b"bad \xff\xfe utf8 \xc0\xaf \xed\xa0\x80 trunc \xe2\x82",
    b"astral \xf0\x9f\x94\xa5 &amp; &#60;",
    b"</script><script>alert(4)</script>",
]

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def js_strings(script, var):
    """Decode the JS string literals of `var VAR=[...]`."""
    m = re.search(r"var %s=\[" % var, script)
    if not m:
        fail("no var %s" % var)
        return []
    i, out = m.end(), []
    while script[i] != "]":
        if script[i] in ",\n":
            i += 1
            continue
        if script[i] != '"':
            fail("unexpected %r in %s" % (script[i], var))
            return out
        i += 1
        units = []
        while script[i] != '"':
            c = script[i]
            if c == "\\":
                e = script[i + 1]
                if e == "x":
                    units.append(int(script[i + 2:i + 4], 16))
                    i += 4
                elif e == "u":
                    units.append(int(script[i + 2:i + 6], 16))
                    i += 6
                elif e in '"\\':
                    units.append(ord(e))
                    i += 2
                else:
                    fail("unexpected escape \\%s" % e)
                    i += 2
            else:
                if ord(c) < 0x20 or ord(c) > 0x7e or c in "<>&":
                    fail("raw %r in a JS string" % c)
                units.append(ord(c))
                i += 1
        i += 1
        raw = b"".join(u.to_bytes(2, "little") for u in units)
        out.append(raw.decode("utf-16-le"))
    return out


def check_file(path):
    with open(path, "rb") as f:
        data = f.read()
    try:
        data.decode("ascii")
    except UnicodeDecodeError:
        fail("%s: not ASCII" % path)
    try:
        doc = xml.dom.minidom.parseString(data)
    except Exception as e:  # noqa: BLE001 - any parse error is the failure
        fail("%s: not well-formed XML: %s" % (path, e))
        return None
    tags = collections.Counter()
    for el in doc.getElementsByTagName("*"):
        tags[el.tagName] += 1
        if el.tagName not in ALLOWED:
            fail("%s: unexpected element <%s>" % (path, el.tagName))
        for k in el.attributes.keys():
            if k.lower().startswith("on"):
                fail("%s: event attribute %s" % (path, k))
    if tags["script"] != 1:
        fail("%s: %d script elements" % (path, tags["script"]))
    root = doc.documentElement
    if root.tagName != "svg" or root.getAttribute("xmlns") != "http://www.w3.org/2000/svg":
        fail("%s: root is not an SVG element" % path)
    script = doc.getElementsByTagName("script")[0]
    text = "".join(n.data for n in script.childNodes)
    nodes = re.search(r"var N=\[([-0-9,\n]*)\]", text)
    if not nodes:
        fail("%s: no node array" % path)
        return None
    nums = [int(x) for x in re.split(r"[,\n]+", nodes.group(1)) if x]
    if len(nums) % 4 or nums[:2] != [0, -1]:
        fail("%s: node array does not start with the root" % path)
    return doc, tags, text, nums


def run_writer(exe, d):
    """Run a unit test that saves its SVGs in d; its exit status counts."""
    r = subprocess.run([exe, d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sys.stdout.write(r.stdout.decode(errors="replace"))
    if r.returncode:
        fail("%s exited %d" % (exe, r.returncode))


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        run_writer(exe, d)
        names = sorted(n for n in os.listdir(d) if n.endswith(".svg"))
        expect = ["svg-basic.svg", "svg-empty.svg", "svg-hostile.svg", "svg-inverted.svg", "svg-merged.svg"]
        if names != expect:
            fail("files written: %s" % names)
        res = {n: check_file(os.path.join(d, n)) for n in names}

    basic, hostile = res.get("svg-basic.svg"), res.get("svg-hostile.svg")
    if basic and hostile:
        if basic[1] != hostile[1]:
            fail("element counts differ: basic %s, hostile %s" % (dict(basic[1]), dict(hostile[1])))
        strings = set(js_strings(hostile[2], "S"))
        for name in HOSTILE:
            want = name.decode("utf-8", errors="replace")
            # Python's decoder folds a truncated sequence into one U+FFFD,
            # the writer's gives one per byte (both are allowed by Unicode).
            want = want.replace("trunc \ufffd", "trunc \ufffd\ufffd")
            want = want.replace("\ud800", "")
            if want not in strings:
                fail("hostile name %r not found decoded (have %r)" % (want, sorted(strings)))
        title = hostile[0].getElementsByTagName("title")[0]
        if title.firstChild.data != "</title><script>alert(6)</script>":
            fail("title text %r" % title.firstChild.data)
        if hostile[3][2] != sum(10 + i for i in range(9)):
            fail("hostile root total %d" % hostile[3][2])
    if basic:
        if basic[3][2] != 20:
            fail("basic root total %d" % basic[3][2])
        text = "".join(n.toxml() for n in basic[0].getElementsByTagName("text"))
        for want in ("Python 3.12.1", "20 samples", "rate 100 Hz", "errors: 0"):
            if want not in text:
                fail("header lacks %r" % want)
    print("check-svg: %d files, %d failures" % (len(res), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
