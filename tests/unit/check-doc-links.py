#!/usr/bin/env python3
"""The documentation's links lead somewhere: every relative link in
README.md, doc/*.md, tests/README.md and bench/README.md names a file of
the tree, and a #anchor names a heading of that page (GitHub's rule:
lower case, punctuation dropped, spaces to hyphens). Links to http(s)
addresses are not followed.

    check-doc-links.py SOURCE_ROOT     check the tree; one line per broken link
    check-doc-links.py --self-test     the checker on pages written here
"""
import os
import re
import sys
import tempfile

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    out = set()
    fence = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            m = None if fence else re.match(r"#+ (.*)", line)
            if m:
                out.add(slug(m.group(1)))
    return out


def pages(root):
    out = [os.path.join(root, p) for p in ("README.md", "tests/README.md", "bench/README.md")]
    doc = os.path.join(root, "doc")
    out += sorted(os.path.join(doc, f) for f in os.listdir(doc) if f.endswith(".md"))
    return [p for p in out if os.path.exists(p)]


def broken(root):
    problems = []
    for page in pages(root):
        fence = False
        with open(page, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for n, line in enumerate(lines, 1):
            if line.startswith("```"):
                fence = not fence
            if fence:
                continue
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                where = "%s:%d: %s" % (os.path.relpath(page, root), n, target)
                if not os.path.exists(full):
                    problems.append("%s: no such file" % where)
                elif anchor and full.endswith(".md") and anchor not in anchors(full):
                    problems.append("%s: no heading with that anchor" % where)
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.mkdir(os.path.join(d, "doc"))
        with open(os.path.join(d, "README.md"), "w") as f:
            f.write("# T\n\n[a](doc/x.md#time-windows---slice) [b](doc/x.md#nope) "
                    "[c](doc/missing.md) [d](https://example.com/x) ![p](doc/x.md)\n"
                    "```\n[e](doc/gone.md)\n```\n")
        with open(os.path.join(d, "doc", "x.md"), "w") as f:
            f.write("# X\n\n## Time windows (`--slice`)\n\n[back](../README.md#t)\n")
        got = broken(d)
        want = ["README.md:3: doc/x.md#nope: no heading with that anchor",
                "README.md:3: doc/missing.md: no such file"]
        if got != want:
            print("FAIL self-test: got %r, want %r" % (got, want))
            return 1
    print("PASS check-doc-links self-test")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        sys.exit(__doc__)
    problems = broken(argv[1])
    for p in problems:
        print("FAIL %s" % p)
    if not problems:
        print("PASS every link of README.md, doc/, tests/README.md and bench/README.md resolves")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
