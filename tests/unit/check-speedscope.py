#!/usr/bin/env python3
"""Check spy's speedscope files against speedscope's own file-format schema.

The schema is the one the speedscope npm package ships
(dist/release/file-format-schema.json, JSON Schema draft-07), installed by
.ci/install-deps into $SPY_NPM_DIR (default ~/.cache/spy/npm). It is
applied by the small validator below, which knows the keywords that schema
uses ($ref, type, const, enum, required, properties, items, anyOf) and
fails on any other, so a newer schema cannot be half-checked silently.
On top of the schema, what speedscope's importer relies on: every frame
index of a sample is a frame, samples and weights pair up, a profile's
weights add up to endValue - startValue, activeProfileIndex names a
profile.

Run with the spy binary: it writes a folded profile (two threads with
-t roots, a hostile name), has `spy report -f speedscope` convert it,
checks the result, then checks that broken copies of it are rejected.

Usage: check-speedscope.py PATH/TO/spy
       check-speedscope.py --file FILE.speedscope.json
Exits 77 (skip) when the package is not installed, saying so.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

NPM_DIR = os.environ.get("SPY_NPM_DIR") or os.path.expanduser("~/.cache/spy/npm")
PACKAGE = os.path.join(NPM_DIR, "node_modules", "speedscope")
SCHEMA = os.path.join(PACKAGE, "dist", "release", "file-format-schema.json")

TYPES = {
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}
IGNORED = {"title", "description", "$schema", "definitions"}
KNOWN = IGNORED | {"$ref", "type", "const", "enum", "required", "properties", "items", "anyOf"}


class Validator:
    def __init__(self, schema):
        self.root = schema

    def resolve(self, ref):
        if not ref.startswith("#/"):
            raise ValueError("schema: non-local $ref %r" % ref)
        node = self.root
        for part in ref[2:].split("/"):
            node = node[part]
        return node

    def errors(self, value, schema, where="$"):
        """Every way value breaks schema, as "path: what" strings."""
        unknown = set(schema) - KNOWN
        if unknown:
            raise ValueError("schema uses unsupported keywords %s" % sorted(unknown))
        out = []
        if "$ref" in schema:
            out += self.errors(value, self.resolve(schema["$ref"]), where)
        if "type" in schema and not TYPES[schema["type"]](value):
            return out + ["%s: not a %s" % (where, schema["type"])]
        if "const" in schema and value != schema["const"]:
            out.append("%s: %r is not %r" % (where, value, schema["const"]))
        if "enum" in schema and value not in schema["enum"]:
            out.append("%s: %r not in %r" % (where, value, schema["enum"]))
        if "anyOf" in schema:
            alts = [self.errors(value, alt, where) for alt in schema["anyOf"]]
            if all(alts):
                out.append("%s: matches none of %d choices (closest: %s)"
                           % (where, len(alts), min(alts, key=len)[0]))
        if isinstance(value, dict):
            for key in schema.get("required", []):
                if key not in value:
                    out.append("%s: lacks %r" % (where, key))
            for key, sub in schema.get("properties", {}).items():
                if key in value:
                    out += self.errors(value[key], sub, "%s.%s" % (where, key))
        if isinstance(value, list) and "items" in schema:
            for i, item in enumerate(value):
                out += self.errors(item, schema["items"], "%s[%d]" % (where, i))
        return out


def importer_errors(doc):
    """What speedscope's importer assumes beyond the schema."""
    out = []
    nframes = len(doc["shared"]["frames"])
    profiles = doc["profiles"]
    if not 0 <= doc.get("activeProfileIndex", 0) < max(len(profiles), 1):
        out.append("activeProfileIndex %r names no profile" % doc["activeProfileIndex"])
    for n, pr in enumerate(profiles):
        if pr["type"] != "sampled":
            continue
        if len(pr["samples"]) != len(pr["weights"]):
            out.append("profile %d: %d samples, %d weights"
                       % (n, len(pr["samples"]), len(pr["weights"])))
        for i, stack in enumerate(pr["samples"]):
            bad = [f for f in stack if not (isinstance(f, int) and 0 <= f < nframes)]
            if bad:
                out.append("profile %d sample %d: frame indices %r out of range" % (n, i, bad[:3]))
        if any(w < 0 for w in pr["weights"]):
            out.append("profile %d: negative weight" % n)
        span = pr["endValue"] - pr["startValue"]
        if abs(sum(pr["weights"]) - span) > 1e-9 * max(1.0, abs(span)):
            out.append("profile %d: weights add up to %r, endValue - startValue is %r"
                       % (n, sum(pr["weights"]), span))
    return out


def check_doc(validator, doc):
    out = validator.errors(doc, validator.root)
    if not out:
        out = importer_errors(doc)
    return out


# Each: (what is broken, how), applied to a deep copy of a good file.
def _drop_schema(d):
    del d["$schema"]


def _bad_unit(d):
    d["profiles"][0]["unit"] = "hours"


def _string_weight(d):
    d["profiles"][0]["weights"][0] = "1"


def _frame_out_of_range(d):
    d["profiles"][0]["samples"][0].append(len(d["shared"]["frames"]))


def _nameless_frame(d):
    del d["shared"]["frames"][0]["name"]


def _extra_weight(d):
    d["profiles"][0]["weights"].append(0)


def _wrong_type(d):
    d["profiles"][0]["type"] = "sample"


MUTANTS = [_drop_schema, _bad_unit, _string_weight, _frame_out_of_range, _nameless_frame,
           _extra_weight, _wrong_type]

FOLDED = (
    "# rate-hz: 100\n"
    "# command: app.py\n"
    'process 9 "app.py";thread 9 "main";main (app.py:1);work (app.py:5) 30\n'
    'process 9 "app.py";thread 9 "main";main (app.py:1);</x>"\\\\ (evil.py:2) 5\n'
    'process 9 "app.py";thread 10 "pool";worker (pool.py:3);spin (libspin.so) 15\n'
)


def main():
    if not os.path.exists(SCHEMA):
        print("SKIP: speedscope's schema not found at %s (.ci/install-deps installs the "
              "npm package there; SPY_NPM_DIR picks another directory)" % SCHEMA)
        return 77
    with open(os.path.join(PACKAGE, "package.json")) as f:
        version = json.load(f).get("version")
    with open(SCHEMA) as f:
        validator = Validator(json.load(f))
    bad = []
    with tempfile.TemporaryDirectory(prefix="spy-speedscope-") as d:
        if sys.argv[1:2] == ["--file"]:
            path = sys.argv[2]
        else:
            folded = os.path.join(d, "p.folded")
            path = os.path.join(d, "p.speedscope.json")
            with open(folded, "w") as f:
                f.write(FOLDED)
            r = subprocess.run([sys.argv[1], "report", "-f", "speedscope", "-o", path, folded],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            if r.returncode:
                print("FAIL: spy report exited %d: %s" % (r.returncode, r.stdout.decode()))
                return 1
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        bad += check_doc(validator, doc)
        if len(doc.get("profiles", [])) != 2 and sys.argv[1:2] != ["--file"]:
            bad.append("expected one profile per thread (2), got %d" % len(doc["profiles"]))
        for mutate in MUTANTS:
            broken = copy.deepcopy(doc)
            mutate(broken)
            if not check_doc(validator, broken):
                bad.append("a file broken by %s passed" % mutate.__name__)
    for m in bad:
        print("FAIL: " + m)
    print("check-speedscope: speedscope %s schema, 1 file and %d broken copies, %d failures"
          % (version, len(MUTANTS), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
