#!/usr/bin/env python3
"""spy record --push: continuous mode into Pyroscope, checked by a receiver
on loopback (pushrecv.py) against the documented contracts of its push.v1
API (the default; over TLS with a test CA made here, and mutual TLS) and
its legacy /ingest API (--push-api ingest, over http).

On three interpreters (the oldest, one between and the newest found
outside the Debian root; the loop under test is the engine's, the same for
every version), for each API:
  - contract: every request is what the API documents (pushrecv.py checks
    it: a PushRequest decoded by the protobuf library, or the ingest form),
    with the tenant and bearer token headers (token from SPY_PUSH_TOKEN);
    labels exactly __name__=process_cpu, service_name, host, pid, python
    and --label's; windows of --push-every 1 s are contiguous (until of one
    = from of the next); their samples add up to what the parallel -o
    recording holds; each pprof is read by `go tool pprof`;
  - the target's argument --db-password=hunter2 is in no request (its raw
    bytes, and each pprof unzipped), and is with --push-command;
  - launch mode with -s: windows arrive, labelled with the launched pid.
Once (the newest interpreter):
  - TLS: no --push-ca (the test CA is not the system's) or no client
    certificate for a server that requires one: pushes fail, saying why;
    a dead proxy in https_proxy is used, and skipped with NO_PROXY;
  - refused: a 400 is shown with its status, reason (escaped) and message;
  - outage: the receiver answers 500, then is stopped and started again on
    the same port, then hangs every request for 12 s (past spy's 10 s
    request timeout), then recovers: no window is lost, and the sampling
    rate in the windows taken while it hung is not below the rate while it
    answered;
  - Ctrl-C: the open window is pushed before spy exits; with the receiver
    down, spy exits within its bounded wait, saying what was not sent.
Usage errors (no interpreter needed): bad URLs refused without quoting
them, bad labels, options without --push, TLS files with http, a
credential given twice.

Run by Debian's /usr/bin/python3 (meson.build), which sees python3-protobuf.
"""

import gzip
import os
import re
import socket
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


SECRET = "hunter2"


def check_labels(r, pid, interp, extra, app):
    p = []
    want = dict(extra, pid=str(pid), python=interp.vstring, host=r.labels.get("host") or "?")
    if r.labels != want:
        p.append("labels %r, expected %r" % (r.labels, want))
    if r.app != app:
        p.append("application %r, expected %r" % (r.app, app))
    if r.api == "push" and [k for k, _ in r.label_list] != sorted(list(want) + ["__name__", "service_name"]):
        p.append("push labels %r" % r.label_list)
    return p


def secret_in(recv, reqs):
    """Where SECRET is: a request's raw bytes, or a window's pprof unzipped."""
    where = []
    for i, raw in enumerate(recv.raw):
        if SECRET.encode() in raw:
            where.append("request %d's bytes" % i)
    for i, r in enumerate(reqs):
        if SECRET.encode() in gzip.decompress(r.pprof_gz):
            where.append("window %d's pprof" % i)
    return where


def contract(interp, api, tls):
    """One recording pushed through api (push over mutual TLS, or ingest over http)."""
    ca = pushrecv.TestCA() if tls else None
    recv = pushrecv.Receiver(base_path="/pyro", tls=ca, client_ca=ca.ca if ca else None,
                             expect_headers={"X-Scope-OrgID": "team-a",
                                             "Authorization": "Bearer " + TOKEN})
    d = tempfile.mkdtemp(prefix="spy-push-")
    p = []
    try:
        with harness.Target(interp, harness.target_path("record_target.py"),
                            ["split", "--db-password=" + SECRET]) as t:
            out = os.path.join(d, "run.folded")
            args = ["record", "--pid", str(t.pid), "--push", recv.url() + "/", "--push-every", "1", "-d", "4.5",
                    "--label", "env=ci", "--label=team=perf", "--tenant", "team-a", "-q", "-o", out]
            if api == "ingest":
                args += ["--push-api", "ingest"]
            if ca:
                args += ["--push-ca", ca.ca, "--push-cert", ca.client, "--push-key", ca.client_key]
            res = harness.run_spy(args, timeout=60, env=spy_env({"SPY_PUSH_TOKEN": TOKEN}))
            if res.rc != 0:
                return [res.describe()]
            reqs, problems, attempts = recv.snapshot()
            p += problems
            if len(reqs) < 4:
                return p + ["%d windows received in 4.5 s of 1 s windows: %s" % (len(reqs), res.err.strip())]
            if attempts != len(reqs):
                p.append("%d requests for %d windows (the receiver never failed)" % (attempts, len(reqs)))
            if any(r.api != api for r in reqs):
                p.append("requests through %r, expected %s" % ({r.api for r in reqs}, api))
            p += contiguity(reqs, res.err)
            for r in reqs:
                p += check_labels(r, t.pid, interp, {"env": "ci", "team": "perf"}, "record_target")
                if api == "ingest" and (r.query["sampleRate"] != "100" or r.query["spyName"] != "spy"):
                    p.append("sampleRate %s spyName %s" % (r.query["sampleRate"], r.query["spyName"]))
                if api == "ingest" and r.config.get("samples", {}).get("display-name") != "cpu":
                    p.append("sample_type_config %r" % r.config)
                if r.prof["period"] != 10000000:
                    p.append("period %r, expected 1e9 / 100 Hz" % r.prof["period"])
                c = r.comments()
                if c.get("window", "").split()[1:] != [str(r.frm), str(r.until)]:
                    p.append("the pprof's window %r is not the request's %d-%d" % (c.get("window"), r.frm, r.until))
                if not c.get("command", "").endswith(" record_target.py"):
                    p.append("command %r, expected the program's name" % c.get("command"))
            pushed = sum(r.sample_count() for r in reqs)
            local = folded_total(out)
            if pushed != local or local == 0:
                p.append("windows hold %d samples, the -o recording %d" % (pushed, local))
            if "pushed %d windows" % len(reqs) not in res.err:
                p.append("summary does not say %d windows were pushed: %s" % (len(reqs), res.err.strip()))
            where = secret_in(recv, reqs)
            if where:
                p.append("the target's argument %s was sent: %s" % (SECRET, ", ".join(where)))
            if SECRET not in open(out).read():
                p.append("the -o recording does not name the command line: the check above proves nothing")
            p += go_pprof(reqs, d, "work_a")
            p += with_command(interp, t, recv, args)
    finally:
        recv.close()
        if ca:
            ca.close()
        shutil.rmtree(d, ignore_errors=True)
    return p


def with_command(interp, t, recv, args):
    """--push-command: the argument goes out (what the check without it looks for can be found)."""
    n0 = len(recv.snapshot()[0])
    args = [a for a in args if a not in ("-o",) and not a.endswith("run.folded")]
    args[args.index("-d") + 1] = "2.5"
    res = harness.run_spy(args + ["--push-command"], timeout=60, env=spy_env({"SPY_PUSH_TOKEN": TOKEN}))
    reqs = recv.snapshot()[0][n0:]
    if res.rc != 0 or not reqs:
        return ["--push-command: %s, %d windows" % (res.describe(), len(reqs))]
    c = reqs[0].comments().get("command", "")
    roots = [s for s in reqs[0].strings() if s.startswith("process ")]
    if SECRET not in c or not any(SECRET in r for r in roots):
        return ["--push-command: command %r, roots %r: no %s" % (c, roots, SECRET)]
    return []


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
    """500 for 3 s, stopped for 3 s (then started again on the same port), hung for HANG_S, then
    fine, over https: nothing lost, no slower sampling."""
    ca = pushrecv.TestCA()
    recv = pushrecv.Receiver(tls=ca)
    p = []
    try:
        with harness.Target(interp, harness.target_path("record_target.py"), ["split"]) as t:
            spy = harness.start_spy(["record", "--pid", str(t.pid), "--push", recv.url(), "--push-ca", ca.ca,
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
        ca.close()
    return p


def short_run(interp, recv, extra, env=None, secs="2.5"):
    """A short recording pushed to recv: (spy's result, the windows received)."""
    with harness.Target(interp, harness.target_path("record_target.py"), ["split"]) as t:
        res = harness.run_spy(["record", "--pid", str(t.pid), "--push", recv.url(), "--push-every", "1",
                               "-d", secs, "-q"] + extra, timeout=60, env=spy_env(env))
    return res, recv.snapshot()[0]


def refused(interp):
    """A 400: one line naming the status, the reason (escaped) and the server's message."""
    recv = pushrecv.Receiver()
    try:
        recv.set_mode("refuse")
        res, _ = short_run(interp, recv, [])
        want = "HTTP 400 " + pushrecv.REFUSE_REASON.replace("\x1b", "\\x1b")
        lines = [ln for ln in res.err_lines() if "refused, not sent again" in ln]
        if not lines or want not in lines[0] or pushrecv.REFUSE_MESSAGE not in lines[0] or "\x1b" in res.err:
            return ["refusal lines %r (expected %r and the message), stderr %r" % (lines, want, res.err)]
    finally:
        recv.close()
    return []


def dead_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tls_and_proxy(interp):
    """What fails must fail, saying why: an unknown CA, a missing client certificate, a dead proxy."""
    p = []
    ca = pushrecv.TestCA()
    recv = pushrecv.Receiver(tls=ca, client_ca=ca.ca)
    proxy = "http://127.0.0.1:%d" % dead_port()
    try:
        cases = [
            ("no --push-ca", [], None, "certificate"),
            ("no client certificate", ["--push-ca", ca.ca], None, "failed"),
            ("https_proxy", ["--push-ca", ca.ca, "--push-cert", ca.client, "--push-key", ca.client_key],
             {"https_proxy": proxy, "NO_PROXY": "", "no_proxy": ""}, "port %s" % proxy.rsplit(":", 1)[1]),
        ]
        for name, extra, env, why in cases:
            n0 = len(recv.snapshot()[0])
            res, reqs = short_run(interp, recv, extra, env, secs="2")
            failed = [ln for ln in res.err_lines() if "push to" in ln and "failed" in ln]
            if len(reqs) != n0 or not failed or why not in failed[0]:
                p.append("%s: %d windows accepted, failure lines %r (expected %r)"
                         % (name, len(reqs) - n0, failed, why))
        # The same proxy, skipped for loopback by NO_PROXY: the windows arrive.
        env = {"https_proxy": proxy, "HTTPS_PROXY": proxy, "NO_PROXY": "127.0.0.1,localhost"}
        n0 = len(recv.snapshot()[0])
        res, reqs = short_run(interp, recv, cases[2][1], env)
        if res.rc != 0 or len(reqs) - n0 < 2 or "failed" in res.err:
            p.append("NO_PROXY=127.0.0.1: %d windows, %s" % (len(reqs) - n0, res.describe()))
    finally:
        recv.close()
        ca.close()
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
                # A stop signal ends any command within a second (the last window waits 0.5 s at most);
                # two windows are left unsent when the run crossed a minute, as above.
                if down and (took > 1.5 or not re.search(r"\b[12] not sent in time", err)):
                    p.append("SIGINT, receiver down: exit after %.1f s, stderr %r" % (took, err.strip()[-300:]))
        finally:
            recv.close()
    return p


def usage(rep):
    d = tempfile.mkdtemp(prefix="spy-push-")
    missing = os.path.join(d, "nope.pem")
    cases = [
        (["--push", "ftp://x"], "expected a URL"),
        (["--push", "http://x:4040", "--label", "9bad=v"], "label key"),
        (["--push", "http://x:4040", "--label", "k=a b"], "label value"),
        (["--push", "http://x:4040", "--label", "__name__=v"], "reserved"),
        (["--push", "http://x:4040", "--label", "service_name=v"], "use --app"),
        (["--push", "http://x:4040", "--label", "novalue"], "KEY=VALUE"),
        (["--push", "http://x:4040", "--app", "my app"], "application name"),
        (["--push", "http://x:4040", "--push-every", "0"], "--push-every"),
        (["--push", "http://x:4040", "--push-api", "grpc"], "push or ingest"),
        (["--push", "http://x:4040", "--push-ca", "/etc/hostname"], "goes with an https:// URL"),
        (["--push", "https://x:4040", "--push-key", "/etc/hostname"], "--push-key goes with --push-cert"),
        (["--app", "x"], "--app goes with --push"),
        (["--label", "a=b"], "--label goes with --push"),
        (["--push-command"], "--push-command goes with --push"),
        (["--push-api", "ingest"], "--push-api goes with --push"),
    ]
    # Refused in one line that quotes nothing of the URL: what is refused may be a secret.
    secret = [
        ("http://user:" + SECRET + "@pyro:4040/", "credentials do not go in the URL"),
        ("https://" + SECRET + "@pyro/", "credentials do not go in the URL"),
        ("http://pyro:4040/?token=" + SECRET, "query or fragment"),
        ("http://pyro:4040/" + SECRET + "\x1b[2J", "control character"),
        ("http://pyro:4040/" + SECRET + "\r\nX-Evil: 1", "control character"),
        ("http://pyro:" + SECRET + "/", "port"),
    ]
    try:
        for args, want in cases + [(["--push", u], w) for u, w in secret]:
            r = harness.run_spy(["record", "--pid", "1"] + args, env=spy_env())
            ok = r.rc == 2 and want in r.err and len(r.err_lines()) <= 2
            leak = SECRET in r.err or "pyro" in r.err
            rep.check("usage: %r" % " ".join(args), [] if ok and not leak else ["exit %s, stderr %r" % (r.rc, r.err)])
        r = harness.run_spy(["record", "--pid", "1", "--push", "https://x", "--push-ca", missing], env=spy_env())
        rep.check("a --push-ca that does not exist",
                  [] if r.rc not in (0, 2) and "nope.pem" in r.err else ["exit %s, stderr %r" % (r.rc, r.err)])
        f = os.path.join(d, "token")
        with open(f, "w") as fh:
            fh.write("tok\n")
        r = harness.run_spy(["record", "--pid", "1", "--push", "http://127.0.0.1:9", "--token-file", f],
                            env=spy_env({"SPY_PUSH_TOKEN": "x"}))
        rep.check("usage: a token from the environment and a file",
                  [] if r.rc == 2 and "not several" in r.err else ["exit %s, stderr %r" % (r.rc, r.err)])
        # Credentials cross a network only under TLS: over http:// to a host not loopback, refused,
        # before anything is attached or sent (--pid 1 is never touched).
        for name, env, a in (("a token file", None, ["--token-file", f]),
                             ("SPY_PUSH_BASIC_AUTH", {"SPY_PUSH_BASIC_AUTH": "u:" + SECRET}, [])):
            r = harness.run_spy(["record", "--pid", "1", "--push", "http://pyroscope.example:4040"] + a,
                                env=spy_env(env))
            rep.check("usage: %s over http:// to a host not loopback" % name,
                      [] if r.rc == 2 and "only over https://" in r.err and "--push-insecure" in r.err
                      and len(r.err_lines()) == 1 and SECRET not in r.err
                      else ["exit %s, stderr %r" % (r.rc, r.err)])
        r = harness.run_spy(["record", "--pid", "1", "--push-insecure"], env=spy_env())
        rep.check("usage: --push-insecure goes with --push",
                  [] if r.rc == 2 and "--push-insecure goes with --push" in r.err
                  else ["exit %s, stderr %r" % (r.rc, r.err)])
        # libcurl and its thirty libraries are loaded by a push, not by every command's start.
        out = subprocess.run(["readelf", "-d", harness.spy_path()], capture_output=True, text=True)
        needed = re.findall(r"\(NEEDED\).*\[(.*)\]", out.stdout)
        rep.check("spy does not link libcurl (a push loads it)",
                  [] if needed and not any("curl" in n for n in needed) else ["NEEDED %r %s" % (needed, out.stderr)])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def pick(interps):
    """The oldest, one between and the newest interpreter outside the root (or SPY_PYTHONS's first three)."""
    outside = [i for i in interps if not i.root] or interps
    if os.environ.get("SPY_PYTHONS", "").strip():
        return outside[:3]
    outside.sort(key=lambda i: i.version)
    return [outside[0], outside[len(outside) // 2], outside[-1]] if len(outside) > 2 else outside


def main():
    rep = harness.reporter("push")
    usage(rep)
    pushrecv.require(rep, tls=True)
    chosen = harness.picked_interps(rep, "push", pick)
    for interp in chosen:
        rep.run("contract push.v1 mTLS %s" % interp.label, contract, interp, "push", True)
        rep.run("contract ingest %s" % interp.label, contract, interp, "ingest", False)
        rep.run("launch -s %s" % interp.label, launched, interp)
    newest = chosen[-1]
    rep.run("tls and proxy %s" % newest.label, tls_and_proxy, newest)
    rep.run("refused %s" % newest.label, refused, newest)
    rep.run("outage %s" % newest.label, outage, newest)
    rep.run("ctrl-c %s" % newest.label, interrupted, newest)
    rep.finish()


if __name__ == "__main__":
    main()
