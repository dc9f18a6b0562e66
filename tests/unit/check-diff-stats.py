#!/usr/bin/env python3
"""The statistics of spy diff's gate on synthetic profiles drawn from a
known multinomial (seeded: the same draws on every run), through the real
`spy diff --fail-over 2`:

  - null: 50 pairs of 200 samples each of one distribution: the gate with
    significance fails at most 3 of 50 (its level is 5%, family-wise);
    the plain gate (--no-significance) is reported beside it, as the
    figure of what the gate did before significance (it fails most pairs);
  - power: one function made 5 points heavier, 5,000 samples each: the
    gate fails in at least 49 of 50 pairs, and always names that function;
  - the json says both for each function: the change and its p-value, and
    the table marks exactly the significant rows.

Usage: check-diff-stats.py SPY
"""

import json
import os
import random
import subprocess
import sys
import tempfile

# Self shares, in percent, of the functions under main: a long tail, as a
# real program's, so the gate is asked about large and small shares.
SHARES = [30, 20, 15, 10, 8, 6, 4, 3, 2, 1, 1]
PAIRS = 50


def draw(rnd, shares, n):
    """n samples of main;fK, K drawn with the given weights: folded text."""
    counts = [0] * len(shares)
    cum = []
    t = 0
    for s in shares:
        t += s
        cum.append(t)
    for _ in range(n):
        u = rnd.random() * t
        k = 0
        while cum[k] <= u:
            k += 1
        counts[k] += 1
    return "".join("process;main (app.py:1);f%d (app.py:%d) %d\n" % (k, 10 + k, c)
                   for k, c in enumerate(counts) if c)


def diff(spy, d, base, new, *args):
    b, n = os.path.join(d, "b.folded"), os.path.join(d, "n.folded")
    with open(b, "w") as f:
        f.write(base)
    with open(n, "w") as f:
        f.write(new)
    return subprocess.run([spy, "diff", "-f", "json", "--fail-over", "2", *args, b, n],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=30)


def main():
    spy = sys.argv[1]
    problems = []
    d = tempfile.mkdtemp(prefix="spy-diff-stats-")
    rnd = random.Random(40)
    sig_fails = exact_fails = plain_fails = 0
    for _ in range(PAIRS):
        base, new = draw(rnd, SHARES, 200), draw(rnd, SHARES, 200)
        r = diff(spy, d, base, new)
        if r.returncode not in (0, 1):
            problems.append("null: exit %d: %s" % (r.returncode, r.stderr))
            break
        sig_fails += r.returncode
        # These draws are independent: --dispersion 1 is the test's exact
        # model, where the level must hold without the default's margin.
        exact_fails += diff(spy, d, base, new, "--dispersion", "1").returncode
        plain_fails += diff(spy, d, base, new, "--no-significance").returncode
    print("null, 50 pairs of 200 samples, --fail-over 2: %d fail with significance "
          "(dispersion 3), %d with --dispersion 1, %d with --no-significance"
          % (sig_fails, exact_fails, plain_fails))
    for label, n in (("default", sig_fails), ("--dispersion 1", exact_fails)):
        if n > 3:
            problems.append("null, %s: %d of %d pairs failed the gate (at most 3)" % (label, n, PAIRS))
    # The plain gate is what significance is for: it must fail far more.
    if plain_fails <= sig_fails:
        problems.append("null: --no-significance failed %d, no more than the test's %d"
                        % (plain_fails, sig_fails))

    heavy = list(SHARES)
    heavy[3] += 5          # f3: 10% -> 15% of the weight...
    heavy[0] -= 5          # ...taken from f0, so the total stays 100
    power = 0
    for i in range(PAIRS):
        r = diff(spy, d, draw(rnd, SHARES, 5000), draw(rnd, heavy, 5000))
        doc = json.loads(r.stdout)
        failed = sorted(f["func"] for f in doc["failed"])
        if r.returncode == 1:
            power += 1
            if failed != ["f3"]:
                problems.append("power: pair %d failed on %s, expected only f3" % (i, failed))
        if i == 0:
            problems += check_doc(doc)
    print("planted +5 points in f3, 50 pairs of 5000 samples: %d fail" % power)
    if power < 49:
        problems.append("power: only %d of %d pairs failed the gate (at least 49)" % (power, PAIRS))

    r = subprocess.run([spy, "diff", os.path.join(d, "b.folded"), os.path.join(d, "n.folded")],
                       stdout=subprocess.PIPE, universal_newlines=True, timeout=30)
    problems += check_table(r.stdout)
    for p in problems:
        print("  " + p)
    print("%s diff-stats" % ("FAIL" if problems else "PASS"))
    return 1 if problems else 0


def check_doc(doc):
    p = []
    g = doc["gate"]
    if g.get("significance") is not True or g.get("level") != 0.05:
        p.append("json: gate %r" % g)
    f3 = [f for f in doc["functions"] if f["func"] == "f3"]
    if not f3 or not f3[0]["total_significant"] or not f3[0]["total_p"] <= 0.05 \
            or not f3[0]["total_delta"] > 2:
        p.append("json: f3 %r" % f3)
    for f in doc["functions"]:
        if f["total_significant"] != (f["total_p"] <= 0.05) or not 0 <= f["self_p"] <= 1:
            p.append("json: p-value and verdict disagree: %r" % f)
    return p


def check_table(out):
    """A row's total delta carries '*' when it is significant: f3 (+5 points
    of 5000 samples) is, main (100% on both sides) is not."""
    p = []
    rows = {l.split()[-2]: l for l in out.splitlines() if "(app.py)" in l}
    for name, want in (("f3", True), ("main", False)):
        line = rows.get(name)
        if line is None or (line.split()[2].endswith("*") != want):
            p.append("table: %s row %r, significant expected %s" % (name, line, want))
    if "*: a significant change at 5%" not in out:
        p.append("table: no legend line: %r" % out[:300])
    return p


if __name__ == "__main__":
    sys.exit(main())
