#!/usr/bin/env python3
"""Check the json, speedscope and pprof writers' output with real parsers.

Runs test-flamegraph-formats with a temporary directory (it saves its
outputs there as NAME.json, NAME.speedscope.json and NAME.pb.gz), then:
  - json: strict UTF-8 and json.loads; every stack's frame ids in range,
    counts summing to "samples", hostile names decoding back exactly
    (invalid UTF-8 as U+FFFD, as Python's "replace" decodes it);
  - speedscope: the schema's required fields and types, frame indices in
    range, one weight per sample, weights summing to the sample count (or
    to it divided by the rate when the unit is seconds), the same stacks as
    the json file once the process and thread roots are stripped;
  - pprof: gunzips, decodes with the small protobuf reader below;
    string_table[0] is "", every id referenced exists, names as the
    terminal escaper (common/term.h) writes them, location ids are
    leaf first, the "samples" values sum to the sample count, the
    wall/nanoseconds values are count * period;
  - `go tool pprof -top` lists the hot function, when go is installed.

Usage: check-formats.py PATH/TO/test-flamegraph-formats
"""
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HOSTILE = [
    b"</text><script>alert(1)</script>",
    b"\"'><g onload=alert(1)>",
    b"x\\\";alert(3);//",
    b"line\nbreak\r\ttab\x01\x7f",
    b"sep\xe2\x80\xa8ara\xe2\x80\xa9tor",
    b"bad \xff\xfe utf8 \xc0\xaf \xed\xa0\x80 trunc \xe2\x82",
    b"astral \xf0\x9f\x94\xa5 \xef\xbf\xbd &amp;",
]
HOSTILE_TEXT = {n.decode("utf-8", "replace") for n in HOSTILE}
BIDI = set(range(0x202a, 0x202f)) | set(range(0x2066, 0x206a)) | {0x061c, 0x200e, 0x200f, 0x2028, 0x2029}


def term_escape(b):
    """common/term.c in Python: what pprof's string table holds for b."""
    out = []
    for c in b.decode("utf-8", "backslashreplace"):
        o = ord(c)
        if o < 0x20 or o == 0x7f:
            out.append("\\x%02x" % o)
        elif 0x80 <= o <= 0x9f or o in BIDI:
            out.append("\\u%04x" % o)
        else:
            out.append(c)
    return "".join(out)


# pprof is read in terminals: its strings are the terminal escaper's.
PPROF_TEXT = {n.decode("utf-8", "replace"): term_escape(n) for n in HOSTILE}


def pprof_name(text):
    return PPROF_TEXT.get(text, term_escape(text.encode("utf-8")))

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def load_json(path):
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        fail("%s: %s" % (path, e))
        return None


def is_root(frame, prefix):
    return frame["kind"] == "synthetic" and frame["func"].startswith(prefix)


def check_json(name, doc):
    for key in ("format", "version", "metadata", "samples", "frames", "threads", "stacks"):
        if key not in doc:
            fail("%s.json: no %r" % (name, key))
            return
    frames = doc["frames"]
    for i, fr in enumerate(frames):
        if set(fr) != {"func", "file", "line", "kind"} or fr["kind"] not in (
                "python", "native", "synthetic"):
            fail("%s.json: frame %d is %r" % (name, i, fr))
    total = 0
    for st in doc["stacks"]:
        if not st["frames"] or any(not 0 <= i < len(frames) for i in st["frames"]):
            fail("%s.json: stack %r out of range" % (name, st))
        total += st["count"]
    if total != doc["samples"]:
        fail("%s.json: counts sum to %d, samples %d" % (name, total, doc["samples"]))
    for t in doc["threads"]:
        if not is_root(frames[t["frame"]], "thread ") or frames[t["frame"]]["func"] != t["name"]:
            fail("%s.json: bad thread %r" % (name, t))
    if name == "hostile":
        funcs = {fr["func"] for fr in frames}
        files = {fr["file"] for fr in frames} - {None}
        if funcs != HOSTILE_TEXT or not files <= HOSTILE_TEXT:
            fail("hostile.json: names do not round-trip: %r" % (funcs ^ HOSTILE_TEXT))
        if doc["metadata"].get("command") != "\"q\" \\ </script>":
            fail("hostile.json: command is %r" % doc["metadata"].get("command"))


def rate_of(doc):
    try:
        r = float(doc["metadata"].get("rate-hz", "0"))
    except ValueError:
        return 0
    return r if 0 < r < 1e9 else 0


def stripped_stacks(doc):
    """The json stacks as speedscope should hold them: {(profile, stack): count}."""
    frames = doc["frames"]
    out = {}
    for st in doc["stacks"]:
        ids = list(st["frames"])
        roots = []
        if ids and is_root(frames[ids[0]], "process "):
            roots.append(frames[ids.pop(0)]["func"])
        if ids and is_root(frames[ids[0]], "thread "):
            roots.append(frames[ids.pop(0)]["func"])
        key = (" / ".join(roots) or "spy", tuple(ids))
        out[key] = out.get(key, 0) + st["count"]
    return out


def check_speedscope(name, ss, doc):
    if ss is None:
        return
    for key, typ in (("$schema", str), ("shared", dict), ("profiles", list),
                     ("name", str), ("activeProfileIndex", int), ("exporter", str)):
        if not isinstance(ss.get(key), typ):
            fail("%s.speedscope.json: %r missing or not %s" % (name, key, typ.__name__))
            return
    if ss["$schema"] != "https://www.speedscope.app/file-format-schema.json":
        fail("%s.speedscope.json: $schema is %r" % (name, ss["$schema"]))
    frames = ss["shared"].get("frames")
    if not isinstance(frames, list) or any(not isinstance(f.get("name"), str) for f in frames):
        fail("%s.speedscope.json: bad shared.frames" % name)
        return
    for f in frames:
        if "line" in f and not isinstance(f["line"], int):
            fail("%s.speedscope.json: bad line in %r" % (name, f))
    if not ss["profiles"] or not 0 <= ss["activeProfileIndex"] < len(ss["profiles"]):
        fail("%s.speedscope.json: no profile / bad activeProfileIndex" % name)
    rate = rate_of(doc)
    got = {}
    for prof in ss["profiles"]:
        for key in ("type", "name", "unit", "startValue", "endValue", "samples", "weights"):
            if key not in prof:
                fail("%s.speedscope.json: profile without %r" % (name, key))
                return
        if prof["type"] != "sampled" or prof["unit"] != ("seconds" if rate else "none"):
            fail("%s.speedscope.json: type %r unit %r" % (name, prof["type"], prof["unit"]))
        if len(prof["samples"]) != len(prof["weights"]):
            fail("%s.speedscope.json: %d samples, %d weights" % (
                name, len(prof["samples"]), len(prof["weights"])))
        wsum = sum(prof["weights"])
        if not math.isclose(prof["endValue"] - prof["startValue"], wsum, rel_tol=1e-9):
            fail("%s.speedscope.json: endValue %r, weights sum %r" % (name, prof["endValue"], wsum))
        for s, w in zip(prof["samples"], prof["weights"]):
            if any(not (isinstance(i, int) and 0 <= i < len(frames)) for i in s):
                fail("%s.speedscope.json: sample %r out of range" % (name, s))
                continue
            count = round(w * rate) if rate else w
            if rate and not math.isclose(count, w * rate, rel_tol=1e-9):
                fail("%s.speedscope.json: weight %r is not a whole sample count" % (name, w))
            key = (prof["name"], tuple(s))
            got[key] = got.get(key, 0) + count
    want = stripped_stacks(doc)
    if got != want:
        fail("%s.speedscope.json: stacks differ from the json's: %r vs %r" % (name, got, want))
    if sum(got.values()) != doc["samples"]:
        fail("%s.speedscope.json: weights sum to %d samples, not %d" % (
            name, sum(got.values()), doc["samples"]))
    if name == "threaded" and len(ss["profiles"]) != 2:
        fail("threaded.speedscope.json: %d profiles, want one per thread" % len(ss["profiles"]))
    if name == "hostile":
        names = {f["name"] for f in frames}
        if names != HOSTILE_TEXT:
            fail("hostile.speedscope.json: names do not round-trip")


# ---- a minimal protobuf reader ---------------------------------------------

def varint(buf, i):
    v, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7f) << shift
        if not b & 0x80:
            return v, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fields(buf):
    """Yield (field, wire type, value): an int for varints, bytes otherwise."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 2:
            n, i = varint(buf, i)
            v = buf[i:i + n]
            if len(v) != n:
                raise ValueError("truncated field %d" % field)
            i += n
        else:
            raise ValueError("unexpected wire type %d" % wt)
        yield field, wt, v


def repeated_ints(wt, v):
    """A repeated integer field element: packed (bytes) or one varint."""
    if wt == 0:
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = varint(v, i)
        out.append(x)
    return out


def decode_profile(data):
    prof = {"sample_type": [], "sample": [], "location": [], "function": [],
            "string_table": [], "comment": [], "period": 0, "period_type": None,
            "duration_nanos": 0, "time_nanos": 0}
    for field, wt, v in fields(data):
        if field in (1, 11):
            vt = {f: x for f, _, x in fields(v)}
            item = (vt.get(1, 0), vt.get(2, 0))
            if field == 1:
                prof["sample_type"].append(item)
            else:
                prof["period_type"] = item
        elif field == 2:
            s = {"location_id": [], "value": [], "label": []}
            for f, w, x in fields(v):
                if f == 1:
                    s["location_id"] += repeated_ints(w, x)
                elif f == 2:
                    s["value"] += repeated_ints(w, x)
                elif f == 3:
                    lb = {g: y for g, _, y in fields(x)}
                    s["label"].append((lb.get(1, 0), lb.get(2, 0)))
            prof["sample"].append(s)
        elif field == 4:
            loc = {"id": 0, "line": []}
            for f, w, x in fields(v):
                if f == 1:
                    loc["id"] = x
                elif f == 4:
                    ln = {g: y for g, _, y in fields(x)}
                    loc["line"].append((ln.get(1, 0), ln.get(2, 0)))
            prof["location"].append(loc)
        elif field == 5:
            fn = {g: y for g, _, y in fields(v)}
            prof["function"].append({"id": fn.get(1, 0), "name": fn.get(2, 0),
                                     "system_name": fn.get(3, 0), "filename": fn.get(4, 0)})
        elif field == 6:
            prof["string_table"].append(v.decode("utf-8"))
        elif field == 13:
            prof["comment"] += repeated_ints(wt, v)
        elif field == 12:
            prof["period"] = v
        elif field == 10:
            prof["duration_nanos"] = v
        elif field == 9:
            prof["time_nanos"] = v
    return prof


def duration_nanos(doc):
    """What pprof.c must write for "# duration-s:": 0 when unset or not in
    (0, 1e15), else nanoseconds saturated at common/util.h's SPY_NS_MAX."""
    try:
        d = float(doc["metadata"].get("duration-s", "0"))
    except ValueError:
        return 0
    if not 0 < d < 1e15:
        return 0
    return min(int(d * 1e9 + 0.5), 1 << 62)


def check_pprof(name, path, doc):
    try:
        with gzip.open(path, "rb") as f:
            prof = decode_profile(f.read())
    except (OSError, ValueError, UnicodeDecodeError, IndexError) as e:
        fail("%s: %s" % (path, e))
        return
    strs = prof["string_table"]
    if not strs or strs[0] != "":
        fail("%s: string_table[0] is not \"\"" % path)
        return

    def s(i):
        if not 0 <= i < len(strs):
            fail("%s: string index %d out of range" % (path, i))
            return ""
        return strs[i]

    types = [(s(t), s(u)) for t, u in prof["sample_type"]]
    rate = rate_of(doc)
    want_types = [("samples", "count")] + ([("wall", "nanoseconds")] if rate else [])
    if types != want_types:
        fail("%s: sample types %r" % (path, types))
    funcs = {f["id"]: f for f in prof["function"]}
    if len(funcs) != len(prof["function"]) or 0 in funcs:
        fail("%s: function ids not unique and nonzero" % path)
    locs = {l["id"]: l for l in prof["location"]}
    if len(locs) != len(prof["location"]) or 0 in locs:
        fail("%s: location ids not unique and nonzero" % path)
    for l in prof["location"]:
        if len(l["line"]) != 1 or l["line"][0][0] not in funcs:
            fail("%s: location %d has lines %r" % (path, l["id"], l["line"]))
    frames = doc["frames"]
    total = 0
    got = {}
    for smp in prof["sample"]:
        if any(i not in locs for i in smp["location_id"]):
            fail("%s: sample with unknown location %r" % (path, smp["location_id"]))
            continue
        if len(smp["value"]) != len(types):
            fail("%s: sample values %r" % (path, smp["value"]))
            continue
        total += smp["value"][0]
        if rate and smp["value"][1] != smp["value"][0] * prof["period"]:
            fail("%s: wall value %r != count * period %d" % (path, smp["value"], prof["period"]))
        # Leaf first: reversed, the ids minus one are the json's root-first frame ids.
        key = tuple(i - 1 for i in reversed(smp["location_id"]))
        got[key] = got.get(key, 0) + smp["value"][0]
    if total != doc["samples"]:
        fail("%s: sample values sum to %d, not %d" % (path, total, doc["samples"]))
    want = {}
    for st in doc["stacks"]:
        want[tuple(st["frames"])] = want.get(tuple(st["frames"]), 0) + st["count"]
    if got != want:
        fail("%s: stacks differ from the json's" % path)
    for l in prof["location"]:
        fr = frames[l["id"] - 1] if 0 < l["id"] <= len(frames) else None
        fn = funcs.get(l["line"][0][0]) if l["line"] else None
        if not fr or not fn or s(fn["name"]) != pprof_name(fr["func"]) \
                or s(fn["filename"]) != pprof_name(fr["file"] or "") \
                or l["line"][0][1] != fr["line"]:
            fail("%s: location %d does not match frame %r" % (path, l["id"], fr))
    if prof["duration_nanos"] != duration_nanos(doc):
        fail("%s: duration_nanos %d, want %d" % (path, prof["duration_nanos"], duration_nanos(doc)))
    if rate and prof["period"] != round(1e9 / rate):
        fail("%s: period %d for rate %g" % (path, prof["period"], rate))
    comments = [s(i) for i in prof["comment"]]
    want_comments = ["%s: %s" % kv for kv in doc["metadata"].items()]
    if comments != want_comments:
        fail("%s: comments %r, want %r" % (path, comments, want_comments))
    if name == "hostile" and {s(f["name"]) for f in prof["function"]} != set(PPROF_TEXT.values()):
        fail("%s: names do not round-trip" % path)


def check_go_pprof(path):
    if not shutil.which("go"):
        print("SKIP go tool pprof: go not installed")
        return
    try:
        r = subprocess.run(["go", "tool", "pprof", "-top", path], capture_output=True,
                           text=True, timeout=120)
    except subprocess.TimeoutExpired:
        fail("go tool pprof -top %s: timed out" % path)
        return
    if r.returncode != 0 or "hot_function" not in r.stdout:
        fail("go tool pprof -top %s: rc %d\n%s%s" % (path, r.returncode, r.stdout, r.stderr))
    else:
        print("go tool pprof -top: hot_function listed")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    d = tempfile.mkdtemp(prefix="spy-formats-")
    try:
        r = subprocess.run([sys.argv[1], d], capture_output=True, text=True, timeout=60)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            fail("%s exited %d" % (sys.argv[1], r.returncode))
        names = sorted(n[:-len(".pb.gz")] for n in os.listdir(d) if n.endswith(".pb.gz"))
        for want in ("threaded", "plain", "hostile", "empty", "longrun"):
            if want not in names:
                fail("no %s outputs" % want)
        for name in names:
            doc = load_json(os.path.join(d, name + ".json"))
            if doc is None:
                continue
            check_json(name, doc)
            check_speedscope(name, load_json(os.path.join(d, name + ".speedscope.json")), doc)
            check_pprof(name, os.path.join(d, name + ".pb.gz"), doc)
        check_go_pprof(os.path.join(d, "threaded.pb.gz"))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("check-formats: %d files checked, %d failures" % (3 * len(names), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
