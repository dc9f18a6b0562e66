#!/usr/bin/env python3
"""deploy/: the systemd unit passes `systemd-analyze verify` with no
message at all (a directive it cannot parse is only a warning there, so
any output fails), ExecStart pointed at the spy just built; and both the
unit and the DaemonSet grant exactly the capabilities doc/spy-agent.md
justifies, with the hardening it lists; the agent's default --max-memory
is under both's memory limits. Self-test: a mutant unit (a bad
ProtectSystem value) must fail the same check. SKIP (77) when
systemd-analyze is absent, saying so.

Usage: check-deploy.py SOURCE_ROOT SPY
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

CAPS = {"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}
HARDENING = ["NoNewPrivileges=yes", "ProtectSystem=strict", "DynamicUser=yes", "ProtectKernelModules=yes",
             "RestrictNamespaces=yes", "MemoryDenyWriteExecute=yes"]


def verify(text, spy, d):
    path = os.path.join(d, "spy-agent.service")
    with open(path, "w") as f:
        f.write(text.replace("/usr/bin/spy", spy))
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", path], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    out = r.stdout.decode("utf-8", "replace").strip()
    return None if r.returncode == 0 and not out else "exit %d: %s" % (r.returncode, out)


def static_checks(unit, ds):
    p = []
    for key in ("CapabilityBoundingSet", "AmbientCapabilities"):
        m = re.search(r"^%s=(.*)$" % key, unit, re.M)
        if not m or set(m.group(1).split()) != CAPS:
            p.append("unit: %s is not exactly %s" % (key, " ".join(sorted(CAPS))))
    for h in HARDENING:
        if not re.search(r"^%s$" % re.escape(h), unit, re.M):
            p.append("unit: no %s" % h)
    try:
        import yaml
        docs = [d for d in yaml.safe_load_all(ds) if d]
        spec = [d for d in docs if d.get("kind") == "DaemonSet"][0]["spec"]["template"]["spec"]
        sc = spec["containers"][0]["securityContext"]
        if spec.get("hostPID") is not True:
            p.append("DaemonSet: not hostPID")
        if sc.get("readOnlyRootFilesystem") is not True or sc.get("allowPrivilegeEscalation") is not False:
            p.append("DaemonSet: root file system writable or privilege escalation allowed")
        caps = sc.get("capabilities", {})
        if caps.get("drop") != ["ALL"] or set("CAP_" + c for c in caps.get("add", [])) != CAPS:
            p.append("DaemonSet: capabilities %r, expected ALL dropped and %s added" % (caps, sorted(CAPS)))
    except ImportError:
        p.append("python3-yaml is needed to read the DaemonSet")
    return p


def mib(text):
    """A systemd or Kubernetes memory figure (512M, 512Mi, 1G, 1Gi) in MiB, or None."""
    m = re.match(r"^(\d+)(M|Mi|G|Gi)$", text.strip())
    return int(m.group(1)) * (1024 if m and m.group(2).startswith("G") else 1) if m else None


def memory_checks(unit, ds, spy):
    """The agent's own memory budget (--max-memory's default, from its --help) is under both
    backstops, so that they never stop it first (a Restart=on-failure loop of re-attaching)."""
    r = subprocess.run([spy, "agent", "--help"], stdout=subprocess.PIPE, timeout=20)
    m = re.search(r"--max-memory MIB .*\(default (\d+)\)", r.stdout.decode("utf-8", "replace"))
    if not m:
        return ["spy agent --help gives no --max-memory default"]
    budget, p = int(m.group(1)), []
    um = re.search(r"^MemoryMax=(.*)$", unit, re.M)
    if not um or not mib(um.group(1)) or budget >= mib(um.group(1)):
        p.append("unit: MemoryMax=%s is not above --max-memory's default %d MiB" % (um and um.group(1), budget))
    dm = re.search(r"limits:\s*\n(?:\s+cpu: .*\n)?\s+memory: (\S+)", ds)
    if not dm or not mib(dm.group(1)) or budget >= mib(dm.group(1)):
        p.append("DaemonSet: the memory limit %s is not above --max-memory's default %d MiB"
                 % (dm and dm.group(1), budget))
    return p


def main():
    src, spy = sys.argv[1], os.path.abspath(sys.argv[2])
    with open(os.path.join(src, "deploy", "spy-agent.service")) as f:
        unit = f.read()
    with open(os.path.join(src, "deploy", "spy-agent-daemonset.yaml")) as f:
        ds = f.read()
    problems = static_checks(unit, ds) + memory_checks(unit, ds, spy)
    if not shutil.which("systemd-analyze"):
        for p in problems:
            print("FAIL", p)
        print("SKIP systemd-analyze verify: systemd-analyze is not installed (Debian's systemd package has it)")
        sys.exit(1 if problems else 77)
    with tempfile.TemporaryDirectory() as d:
        why = verify(unit, spy, d)
        if why:
            problems.append("systemd-analyze verify: " + why)
        if not verify(unit.replace("ProtectSystem=strict", "ProtectSystem=bogus"), spy, d):
            problems.append("self-test: a unit with ProtectSystem=bogus passed the check")
    for p in problems:
        print("FAIL", p)
    if not problems:
        print("PASS deploy/: systemd-analyze verify, the capabilities and the hardening")
    sys.exit(1 if problems else 0)


main()
