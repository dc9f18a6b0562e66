#!/usr/bin/env python3
"""Samples linked to the OpenTelemetry span they were taken in, read from
outside the process (pystate/spans.c), against the real SDK: Debian's
python3-opentelemetry-sdk in tools/pyroot's root (tools/pyroot extras),
on its 3.14 and 3.15 (the layouts that differ for the walk: the SDK runs
on no interpreter outside the root).

The target (targets/spans.py) runs two threads that loop over a span
"outer-T-i" (busy in in_outer), its child "inner-T-i" (busy in in_inner)
and no span at all (busy in in_nothing); its own exporter writes every
ended span's ids and name to a file, the ground truth. spy records it
once to json and once to pprof; per format:
  - every label set names a span the exporter wrote, with its trace id
    and its name, of the thread the sample was taken in;
  - of the samples in in_outer, >= 95% carry an outer span's ids and 0
    an inner one's; of those in in_inner, >= 95% an inner span's and 0 an
    outer one's (the current span is the innermost);
  - 0 samples in in_nothing carry a span: none was active there;
  - the pprof's labels are span_id, trace_id and span_name.
"""

import gzip
import json
import os
import time

import harness
import pushrecv

TARGET = harness.target_path("spans.py")
SDK = "/usr/lib/python3/dist-packages/opentelemetry/sdk"
MINORS = ("3.14", "3.15")
SHARE = 95.0


def spy(args, timeout=60):
    r = harness.run_spy(args, timeout=timeout, env=harness.spy_env(keep_log=False))
    if r.rc != 0 or r.timed_out:
        raise harness.SpyFailed(r.describe())
    return r.out


def exported(path):
    spans = {}
    with open(path) as f:
        for line in f:
            if line.endswith("\n"):
                s = json.loads(line)
                spans[s["span_id"]] = s
    return spans


def json_samples(path):
    """[(function names root first, count, labels or None)]."""
    with open(path) as f:
        doc = json.load(f)
    frames = doc["frames"]
    out = []
    for st in doc["stacks"]:
        names = [frames[i]["func"] for i in st["frames"]]
        rest = st["count"]
        for ls in st.get("labelled", []):
            out.append((names, ls["count"], ls["labels"]))
            rest -= ls["count"]
        if rest < 0:
            raise ValueError("a stack's labelled samples outnumber its count: %r" % st)
        if rest:
            out.append((names, rest, None))
    return out


def pprof_samples(path):
    with open(path, "rb") as f:
        prof = pushrecv.decode_profile(gzip.decompress(f.read()))
    st = prof["string_table"]
    funcs = {fn["id"]: st[fn["name"]] for fn in prof["function"]}
    locs = {loc["id"]: funcs.get(loc["line"][0][0], "?") if loc["line"] else "?" for loc in prof["location"]}
    out = []
    for s in prof["sample"]:
        names = [locs[i] for i in reversed(s["location_id"])]
        labels = {st[k]: st[v] for k, v in s["label"]} or None
        out.append((names, s["value"][0], labels))
    return out


def check(fmt, samples, spans):
    probs = []
    seen = {"in_outer": [0, 0, 0], "in_inner": [0, 0, 0], "in_nothing": [0, 0, 0]}
    for names, count, labels in samples:
        thread = next((n for n in names if n.startswith("thread ")), "")
        if labels is not None:
            want_keys = {"span_id", "trace_id", "span_name"}
            if set(labels) != want_keys:
                probs.append("%s: labels %r, want the keys %s" % (fmt, labels, sorted(want_keys)))
                continue
            s = spans.get(labels["span_id"])
            if s is None:
                probs.append("%s: %d samples carry span %s, which the SDK never exported"
                             % (fmt, count, labels["span_id"]))
                continue
            if s["trace_id"] != labels["trace_id"] or s["name"] != labels["span_name"]:
                probs.append("%s: span %s labelled trace %s name %r, the SDK says %s %r"
                             % (fmt, labels["span_id"], labels["trace_id"], labels["span_name"],
                                s["trace_id"], s["name"]))
            if not thread.endswith('"%s"' % s["thread"]):
                probs.append("%s: span %s (thread %s) on a sample of %s" % (fmt, s["name"], s["thread"], thread))
        leaf = next((n for n in reversed(names) if n in seen), None)
        if leaf is None:
            continue
        kind = None if labels is None else labels["span_name"].split("-")[0]
        c = seen[leaf]
        c[0] += count
        if kind == leaf[3:]:
            c[1] += count
        elif kind is not None:
            c[2] += count
    for leaf in ("in_outer", "in_inner"):
        total, right, wrong = seen[leaf]
        if total < 20:
            probs.append("%s: %d samples in %s, want >= 20" % (fmt, total, leaf))
        elif 100.0 * right / total < SHARE or wrong:
            probs.append("%s: of %d samples in %s, %d carry its span (want >= %g%%), %d another"
                         % (fmt, total, leaf, right, SHARE, wrong))
    total, _, wrong = seen["in_nothing"]
    labelled = sum(c for n, c, l in samples if l is not None and "in_nothing" in n)
    if total < 20:
        probs.append("%s: %d samples in in_nothing, want >= 20" % (fmt, total))
    if labelled:
        probs.append("%s: %d of %d samples in in_nothing carry a span; none was active" % (fmt, labelled, total))
    print("note: %s: in_outer %s, in_inner %s, in_nothing %s (samples, right span, other span)"
          % (fmt, seen["in_outer"], seen["in_inner"], [total, 0, labelled]))
    return probs


def run_one(interp):
    if not os.path.isdir(interp.host_path(SDK)):
        raise harness.SkipInterp("the root has no OpenTelemetry SDK (tools/pyroot extras installs it)")
    d = harness.shared_dir("spy-spans-")
    try:
        truth = os.path.join(d, "spans.jsonl")
        js, pb = os.path.join(d, "spans.json"), os.path.join(d, "spans.pb.gz")
        with harness.Target(interp, TARGET, [truth], binds=[d]) as t:
            spy(["record", "-q", "-t", "-r", "100", "-d", "3", "-o", js, "--pid", str(t.pid)])
            spy(["record", "-q", "-t", "-r", "100", "-d", "2", "-o", pb, "--pid", str(t.pid)])
            time.sleep(0.3)  # the spans of the last samples end, and are exported
        spans = exported(interp.host_path(truth) if not os.path.exists(truth) else truth)
        return check("json", json_samples(js), spans) + check("pprof", pprof_samples(pb), spans)
    finally:
        harness.remove_shared_dir(interp, d)


def pick(interps):
    if os.environ.get("SPY_PYTHONS", "").strip():
        return [i for i in interps if i.root]
    return [i for i in interps if i.root and i.mode == "container" and i.minor in MINORS
            and not i.free_threaded and "debug" not in i.origin and not i.nodebug]


def main():
    rep = harness.reporter("spans")
    for interp in harness.picked_interps(rep, "spans", pick):
        rep.run(interp.label, run_one, interp)
    rep.finish()


if __name__ == "__main__":
    main()
