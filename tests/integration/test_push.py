#!/usr/bin/env python3
"""spy record --push: continuous mode into Pyroscope's ingest API, checked
by a receiver on loopback (pushrecv.py) against the documented contract.

On two interpreters (the oldest and the newest found outside the Debian
root; the loop under test is the engine's, the same for every version):
  - contract: every request is POST BASE/ingest with name APP{labels},
    from, until, format=pprof, sampleRate, spyName, a multipart body with
    the gzip'd pprof and the sample type configuration, the tenant and
    bearer token headers (token from SPY_PUSH_TOKEN); labels host, pid,
    python and --label's; windows of --push-every 1 s are contiguous
    (until of one = from of the next); their samples add up to what the
    parallel -o recording holds; each pprof is read by `go tool pprof`;
  - launch mode with -s: windows arrive, labelled with the launched pid.
Once (the newest interpreter):
  - outage: the receiver answers 500, then refuses connections, then
    hangs every request for 12 s (past spy's 10 s request timeout), then
    recovers: no window is lost, and the
    sampling rate in the windows taken while it hung is not below the
    rate while it answered;
  - Ctrl-C: the open window is pushed before spy exits; with the receiver
    down, spy exits within its bounded wait, saying what was not sent.
Usage errors (no interpreter needed): https, bad labels, options without
--push, a credential given twice.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import harness
import pushrecv

TOKEN = "s3cret-token"
# The outage run: a hang longer than spy's request timeout (10 s), so that
# one request times out and the next waits again; then 6 s of recovery.
HANG_S = 12
OUTAGE_S = 4 + 3 + 3 + HANG_S + 6


def spy_env(extra=None):
    env = harness.spy_env(keep_log=False)
    for k in ("SPY_PUSH_TOKEN", "SPY_PUSH_BASIC_AUTH"):
        env.pop(k, None)
    env.update(extra or {})
    return env


def folded_total(path):
    total = 0
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            total += int(line.rsplit(" ", 1)[1])
    return total


def empty_windows(err):
    """How many windows spy's summary says had no samples (those are not sent)."""
    m = re.search(r"\((\d+) empty, not sent\)", err)
    return int(m.group(1)) if m else 0


def contiguity(reqs, err, every=1):
    """Each window starts where the one before ends, but for the windows
    spy says were empty (a loaded machine can starve a 1 s window)."""
    p = []
    gaps = 0
    for a, b in zip(reqs, reqs[1:]):
        if a.until > b.frm or (b.frm - a.until) % every:
            p.append("window %d-%d followed by %d-%d" % (a.frm, a.until, b.frm, b.until))
        gaps += (b.frm - a.until) // every
    if gaps > empty_windows(err):
        p.append("%d windows missing between those pushed, %d said empty: %s"
                 % (gaps, empty_windows(err), " ".join("%d-%d" % (r.frm, r.until) for r in reqs)))
    return p


def go_pprof(reqs, d, want):
    """`go tool pprof -raw` reads each window's profile and finds want in one of them."""
    go = shutil.which("go")
    if not go:
        return ["go not installed (.ci/install-deps installs it): the pprof cannot be read by go tool pprof"]
    p, seen = [], False
    for i, r in enumerate(reqs):
        path = os.path.join(d, "w%d.pb.gz" % i)
        with open(path, "wb") as f:
            f.write(r.pprof_gz)
        try:
            out = subprocess.run([go, "tool", "pprof", "-raw", path], capture_output=True,
                                 text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return ["go tool pprof -raw %s timed out" % path]
        if out.returncode != 0:
            p.append("go tool pprof -raw window %d: rc %d: %s" % (i, out.returncode, out.stderr.strip()[:200]))
        seen = seen or want in out.stdout
    if not seen and not p:
        p.append("go tool pprof shows no %s in any window" % want)
    return p


def check_labels(r, pid, interp, extra):
    p = []
    want = dict(extra, pid=str(pid), python=interp.vstring)
    for k, v in want.items():
        if r.labels.get(k) != v:
            p.append("label %s=%r, expected %r" % (k, r.labels.get(k), v))
    if not r.labels.get("host"):
        p.append("no host label")
    return p


def contract(interp):
    recv = pushrecv.Receiver(base_path="/pyro",
                             expect_headers={"X-Scope-OrgID": "team-a",
                                             "Authorization": "Bearer " + TOKEN})
    d = tempfile.mkdtemp(prefix="spy-push-")
    p = []
    try:
        with harness.Target(interp, harness.target_path("record_target.py"), ["split"]) as t:
            out = os.path.join(d, "run.folded")
            res = harness.run_spy(["record", "--pid", str(t.pid), "--push", recv.url() + "/",
                                   "--push-every", "1", "-d", "4.5", "--label", "env=ci",
                                   "--label=team=perf", "--tenant", "team-a", "-q", "-o", out],
                                  timeout=60, env=spy_env({"SPY_PUSH_TOKEN": TOKEN}))
            if res.rc != 0:
                return [res.describe()]
            reqs, problems, attempts = recv.snapshot()
            p += problems
            if len(reqs) < 4:
                return p + ["%d windows received in 4.5 s of 1 s windows" % len(reqs)]
            if attempts != len(reqs):
                p.append("%d requests for %d windows (the receiver never failed)" % (attempts, len(reqs)))
            p += contiguity(reqs, res.err)
            for r in reqs:
                p += check_labels(r, t.pid, interp, {"env": "ci", "team": "perf"})
                if r.app != "record_target":
                    p.append("application %r, expected record_target (the script's name)" % r.app)
                if r.query["sampleRate"] != "100" or r.query["spyName"] != "spy":
                    p.append("sampleRate %s spyName %s" % (r.query["sampleRate"], r.query["spyName"]))
                c = r.comments()
                if c.get("window", "").split()[1:] != [str(r.frm), str(r.until)]:
                    p.append("the pprof's window %r is not the request's %d-%d" % (c.get("window"), r.frm, r.until))
                if r.config.get("samples", {}).get("display-name") != "cpu":
                    p.append("sample_type_config %r" % r.config)
            pushed = sum(r.sample_count() for r in reqs)
            local = folded_total(out)
            if pushed != local or local == 0:
                p.append("windows hold %d samples, the -o recording %d" % (pushed, local))
            if "pushed %d windows" % len(reqs) not in res.err:
                p.append("summary does not say %d windows were pushed: %s" % (len(reqs), res.err.strip()))
            p += go_pprof(reqs, d, "work_a")
    finally:
        recv.close()
        shutil.rmtree(d, ignore_errors=True)
    return p


def launched(interp):
    if interp.root:
        raise harness.SkipInterp("launch mode is tested outside the root")
    recv = pushrecv.Receiver()
    try:
        # The program ends by itself (its lifetime), and spy with it.
        res = harness.run_spy(["record", "-s", "--push", recv.url(), "--push-every", "1",
                               "-q", "--app", "launched-app", "--"]
                              + interp.argv([harness.target_path("record_target.py"), "parent"]),
                              timeout=60, env=spy_env({"SPY_TARGET_LIFETIME": "3.5"}))
        reqs, problems, _ = recv.snapshot()
        p = list(problems)
        if res.rc != 0 or "wrote" in res.err:
            p.append(res.describe())
        if len(reqs) < 2:
            return p + ["%d windows received: %s" % (len(reqs), res.err.strip())]
        p += contiguity(reqs, res.err)
        pids = {r.labels.get("pid") for r in reqs}
        if len(pids) != 1 or reqs[0].app != "launched-app":
            p.append("pids %r app %r" % (pids, reqs[0].app))
        names = set()
        for r in reqs:
            st = r.prof["string_table"]
            names |= {st[f["name"]] for f in r.prof["function"]}
        if "child_work" not in names or "parent_work" not in names:
            p.append("-s: child_work and parent_work not both in the windows")
    finally:
        recv.close()
    return p


def window_rate(r):
    c = r.comments()
    return float(c["samples"]) / (r.until - r.frm)


def outage(interp):
    """500 for 3 s, refused for 3 s, hung for HANG_S, then fine: nothing lost, no slower sampling."""
    recv = pushrecv.Receiver()
    p = []
    try:
        with harness.Target(interp, harness.target_path("record_target.py"), ["split"]) as t:
            spy = harness.start_spy(["record", "--pid", str(t.pid), "--push", recv.url(),
                                     "--push-every", "1", "-d", str(OUTAGE_S)], env=spy_env())
            phases = [("ok", 4), ("fail", 3), ("down", 3), ("hang", HANG_S), ("ok", 0)]
            spans = []
            for mode, secs in phases:
                recv.set_mode(mode)
                start = time.time()
                spans.append((mode, start, start + secs))
                time.sleep(secs)
            try:
                _, err = spy.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                harness.kill(spy)
                return ["spy did not end"]
            err = err.decode("utf-8", "replace")
            reqs, problems, attempts = recv.snapshot()
            p += problems
            if spy.returncode != 0:
                p.append("spy exited %s: %s" % (spy.returncode, err.strip()[-300:]))
            reqs.sort(key=lambda r: r.frm)
            froms = [r.frm for r in reqs]
            if len(set(froms)) != len(froms):
                p.append("a window was accepted twice")
            p += contiguity(reqs, err)
            if len(reqs) + empty_windows(err) < OUTAGE_S - 2:
                p.append("%d windows over a %d s run of 1 s windows" % (len(reqs), OUTAGE_S))
            if "lost" in err or "failed" not in err or "works again" not in err:
                p.append("stderr: %s" % err.strip()[-400:])
            # The rate: windows wholly inside the hang against those before the trouble.
            hang = [s for s in spans if s[0] == "hang"][0]
            during = [window_rate(r) for r in reqs if r.frm >= hang[1] + 1 and r.until <= hang[2] - 1]
            before = [window_rate(r) for r in reqs if r.until <= spans[0][2] and r.frm >= spans[0][1]]
            if len(during) < HANG_S - 4 or not before:
                p.append("%d windows inside the hang, %d before" % (len(during), len(before)))
            else:
                d, b = sum(during) / len(during), sum(before) / len(before)
                print("    rate while answering %.1f Hz, while hung %.1f Hz (%d windows)" % (b, d, len(during)))
                if d < 0.85 * b:
                    p.append("sampling slowed while the receiver hung: %.1f Hz, %.1f before" % (d, b))
    finally:
        recv.close()
    return p


def interrupted(interp):
    """Ctrl-C: the open window goes out; with the receiver down, spy still exits soon."""
    p = []
    for down in (False, True):
        recv = pushrecv.Receiver()
        try:
            with harness.Target(interp, harness.target_path("record_target.py"), ["split"]) as t:
                if down:
                    recv.set_mode("down")
                spy = harness.start_spy(["record", "--pid", str(t.pid), "--push", recv.url(),
                                         "--push-every", "60"], env=spy_env())
                time.sleep(2)
                spy.send_signal(signal.SIGINT)
                start = time.time()
                try:
                    _, err = spy.communicate(timeout=20)
                except subprocess.TimeoutExpired:
                    harness.kill(spy)
                    p.append("down=%s: spy did not exit after SIGINT" % down)
                    continue
                took = time.time() - start
                err = err.decode("utf-8", "replace")
                reqs, problems, _ = recv.snapshot()
                p += problems
                # One window, or two when the run crossed a minute (windows align to it).
                if not down and (len(reqs) not in (1, 2) or reqs[-1].sample_count() == 0
                                 or reqs[-1].until < int(start)
                                 or (len(reqs) == 2 and reqs[0].until % 60)):
                    p.append("SIGINT: windows %s pushed, expected the open one"
                             % [(r.frm, r.until, r.sample_count()) for r in reqs])
                # A stop signal ends any command within a second (the last window waits 0.5 s at most).
                if down and (took > 1.5 or "1 not sent in time" not in err):
                    p.append("SIGINT, receiver down: exit after %.1f s, stderr %r" % (took, err.strip()[-300:]))
        finally:
            recv.close()
    return p


def usage(rep):
    cases = [
        (["--push", "https://x:4040"], "https is not supported"),
        (["--push", "ftp://x"], "expected http://"),
        (["--push", "http://x:4040", "--label", "9bad=v"], "label key"),
        (["--push", "http://x:4040", "--label", "k=a b"], "label value"),
        (["--push", "http://x:4040", "--label", "__name__=v"], "reserved"),
        (["--push", "http://x:4040", "--label", "novalue"], "KEY=VALUE"),
        (["--push", "http://x:4040", "--app", "my app"], "application name"),
        (["--push", "http://x:4040", "--push-every", "0"], "--push-every"),
        (["--app", "x"], "--app goes with --push"),
        (["--label", "a=b"], "--label goes with --push"),
    ]
    for args, want in cases:
        r = harness.run_spy(["record", "--pid", "1"] + args, env=spy_env())
        ok = r.rc == 2 and want in r.err and len(r.err_lines()) <= 2
        rep.check("usage: %s" % " ".join(args), [] if ok else ["exit %s, stderr %r" % (r.rc, r.err)])
    d = tempfile.mkdtemp(prefix="spy-push-")
    try:
        f = os.path.join(d, "token")
        with open(f, "w") as fh:
            fh.write("tok\n")
        r = harness.run_spy(["record", "--pid", "1", "--push", "http://127.0.0.1:9", "--token-file", f],
                            env=spy_env({"SPY_PUSH_TOKEN": "x"}))
        rep.check("usage: a token from the environment and a file",
                  [] if r.rc == 2 and "not several" in r.err else ["exit %s, stderr %r" % (r.rc, r.err)])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def pick(interps):
    """The oldest and the newest interpreter outside the root (or SPY_PYTHONS's first two)."""
    outside = [i for i in interps if not i.root] or interps
    if os.environ.get("SPY_PYTHONS", "").strip():
        return outside[:2]
    outside.sort(key=lambda i: i.version)
    return [outside[0], outside[-1]] if len(outside) > 1 else outside


def main():
    rep = harness.reporter("push")
    usage(rep)
    interps, problems = harness.discover()
    harness.report_problems(rep, problems)
    no_ptrace = harness.ptrace_problem()
    chosen = pick(interps)
    if not chosen or no_ptrace:
        rep.skip("push", no_ptrace or "no Python interpreter found (searched %s)" % harness.searched_where())
        rep.finish()
    for interp in chosen:
        rep.run("contract %s" % interp.label, contract, interp)
        rep.run("launch -s %s" % interp.label, launched, interp)
    rep.run("outage %s" % chosen[-1].label, outage, chosen[-1])
    rep.run("ctrl-c %s" % chosen[-1].label, interrupted, chosen[-1])
    rep.finish()


if __name__ == "__main__":
    main()
