#!/usr/bin/env python3
"""Check the differential SVG (spy diff -o x.svg) with a real XML parser.

Runs test-flamegraph-diff with a temporary directory, where it saves a
differential flame graph of a profile with hostile names, then applies
check-svg.py's per-file checks (well-formed ASCII XML, only the writer's
elements, one script, no event attributes, node array rooted) and the
diff's own: the hostile names decode back from the string table, the title
is escaped text, the function that grew most has the full "grew" colour,
and its tooltip line gives its before/after shares.

Usage: check-diff-svg.py PATH/TO/test-flamegraph-diff
"""
import importlib.util
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("check_svg", os.path.join(HERE, "check-svg.py"))
check_svg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_svg)
fail = check_svg.fail


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        check_svg.run_writer(exe, d)
        path = os.path.join(d, "diff-hostile.svg")
        if not os.path.exists(path):
            fail("no diff-hostile.svg written")
            return 1
        res = check_svg.check_file(path)
    if res:
        doc, tags, script, nums = res
        strings = check_svg.js_strings(script, "S")
        for want in ("</text><script>alert(1)</script>", "]]><![CDATA[", "\"'&.py"):
            if want not in strings:
                fail("hostile name %r not in the string table" % want)
        title = doc.getElementsByTagName("title")[0].firstChild.data
        if title != "diff <&> \"title\"":
            fail("title %r" % title)
        # helper: self 30% -> 60%, the largest change, so the full red.
        note = "base 30.00% total, 30.00% self; new 60.00%, 60.00%; change +30.00, +30.00 points"
        if note not in strings:
            fail("no tooltip line %r in %r" % (note, strings))
        if '"#d62020"' not in script:
            fail("the largest growth is not drawn in the full 'grew' colour")
        xs = re.search(r"var X=\[([-0-9,\n]*)\]", script)
        if not xs or not [x for x in re.split(r"[,\n]+", xs.group(1)) if x and x != "-1"]:
            fail("no frame carries a tooltip line (X table)")
        legend = "".join(n.toxml() for n in doc.getElementsByTagName("text"))
        if "self share grew" not in legend:
            fail("legend lacks the diff colours")
        if nums[2] != 20:
            fail("root total %d, expected NEW's 20 samples" % nums[2])
    print("check-diff-svg: %d failures" % len(check_svg.failures))
    return 1 if check_svg.failures else 0


if __name__ == "__main__":
    sys.exit(main())
