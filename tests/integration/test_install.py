#!/usr/bin/env python3
"""What `meson install` puts on a machine, and that --help, the man pages,
the completions and the reference pages of doc/ agree (issue 16). Installs the build into a
scratch DESTDIR, then checks:

- every file: the binary, spy(1) and spy-COMMAND(1) for each command `spy
  help` lists, the bash and zsh completions, at the prefix-relative places
  the build options name, and nothing else;
- each man page renders with groff without a warning, and `man` finds it;
- `man spy-COMMAND` shows every option `spy COMMAND --help` lists, with its
  argument and its help text, and no option --help lacks;
- doc/spy-COMMAND.md's Options table has one row for every option `spy
  COMMAND --help` lists, and none for an option it does not list;
- the bash completion (its function called as bash would) and the zsh
  completion (TAB in a real interactive zsh, through zpty) offer exactly the
  --help options of each command, and the command names after `spy`.

Needs SPY (the built binary), SPY_MESON, SPY_BUILD_ROOT, SPY_SOURCE_ROOT
(tests/integration/meson.build sets them).
"""
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import harness

BUILD = os.environ.get("SPY_BUILD_ROOT", "build")
SOURCE = os.environ.get("SPY_SOURCE_ROOT", ".")
MESON = os.environ.get("SPY_MESON", "meson")

# How groff -Tutf8 may spell ASCII punctuation; compared as ASCII.
TYPOGRAPHY = str.maketrans({"\u2010": "-", "\u2011": "-", "\u2212": "-", "\u2019": "'",
                            "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u00b4": "'"})
HELP_LEFT_ONLY = re.compile(r"^    (?:-\S, |    )--[a-z0-9-]+(?: \[?[A-Z][A-Z_=]*\]?)?$")
HELP_ROW = re.compile(r"^    ((?:-(\S), |    )--([a-z0-9-]+)(?: (\[?[A-Z][A-Z_=]*\]?))?) +(\S.*)$")


def gen_docs():
    """tools/gen-docs as a module: which doc/ pages each man page is made
    of, and how a page's Options table is read."""
    path = os.path.join(SOURCE, "tools", "gen-docs")
    loader = importlib.machinery.SourceFileLoader("gen_docs", path)
    spec = importlib.util.spec_from_loader("gen_docs", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def run(cmd, env=None, input_=None):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=env, input=input_, timeout=60)


def help_options(spy, cmd):
    """(left column, short, long, argh, help) for each row --help prints."""
    r = run([spy, cmd, "--help"])
    if r.returncode != 0:
        raise harness.HarnessError("spy %s --help exited %d" % (cmd, r.returncode))
    # An option too long for the column has its help on the next line,
    # under the column: joined back into one row here.
    lines = []
    for line in r.stdout.splitlines():
        if re.match(r"^ {29}\S", line) and lines and HELP_LEFT_ONLY.match(lines[-1]):
            lines[-1] = "%-28s %s" % (lines[-1], line.strip())
        elif re.match(r"^ {4}(?: {4})?-", line):
            lines.append(line)
    rows = [HELP_ROW.match(line) for line in lines]
    if not rows or not all(rows):
        raise harness.HarnessError("spy %s --help: rows not understood: %r" % (cmd, r.stdout))
    return [(m.group(1).strip(), m.group(2), m.group(3), m.group(4), m.group(5)) for m in rows]


def commands(spy):
    r = run([spy, "help"])
    names = re.findall(r"^    ([a-z]+) ", r.stdout.split("commands:", 1)[-1], re.M)
    if r.returncode != 0 or not names:
        raise harness.HarnessError("spy help lists no commands: %r" % r.stdout)
    return names


def build_options():
    r = run([MESON, "introspect", BUILD, "--buildoptions"])
    if r.returncode != 0:
        raise harness.HarnessError("meson introspect --buildoptions: %s" % r.stderr.strip())
    return {o["name"]: o["value"] for o in json.loads(r.stdout)}


def expected_files(opts, names):
    """Installed path -> what it is, from the build options (prefix-relative)."""
    prefix = opts["prefix"]
    out = {os.path.join(prefix, opts["bindir"], "spy"): "binary"}
    man1 = os.path.join(prefix, opts["mandir"], "man1")
    if opts.get("man-pages"):
        for page in ["spy"] + ["spy-" + c for c in names]:
            out[os.path.join(man1, page + ".1")] = "man"
    data = os.path.join(prefix, opts["datadir"])
    if opts.get("bash-completions"):
        out[os.path.join(data, "bash-completion", "completions", "spy")] = "bash"
    if opts.get("zsh-completions"):
        out[os.path.join(data, "zsh", "site-functions", "_spy")] = "zsh"
    return out


def check_files(destdir, expected):
    p = []
    for path in sorted(expected):
        full = destdir + path
        if not os.path.isfile(full):
            p.append("missing %s" % path)
        elif expected[path] == "binary" and not os.access(full, os.X_OK):
            p.append("%s is not executable" % path)
        elif os.path.getsize(full) == 0:
            p.append("%s is empty" % path)
    found = set()
    for root, _, files in os.walk(destdir):
        for f in files:
            found.add(os.path.join(root, f)[len(destdir):])
    extra = sorted(found - set(expected))
    if extra:
        p.append("installed but not expected: %s" % ", ".join(extra))
    return p


def check_render(page):
    r = run(["groff", "-man", "-Tutf8", "-ww", "-z", page])
    if r.returncode != 0 or r.stderr.strip():
        return ["groff on %s: exit %d, %s" % (os.path.basename(page), r.returncode,
                                                r.stderr.strip()[:500])]
    return []


def man_text(mandir, page):
    """`man PAGE` as a reader sees it, from the installed tree only; wide
    enough that no help text is broken across lines."""
    env = dict(os.environ, MANWIDTH="1000", MANPAGER="cat", PAGER="cat", LANG="C.UTF-8")
    env.pop("MANPATH", None)
    r = run(["man", "-M", mandir, page], env=env)
    if r.returncode != 0 or not r.stdout.strip():
        raise harness.HarnessError("man -M %s %s: exit %d, %s"
                                   % (mandir, page, r.returncode, r.stderr.strip()[:300]))
    return r.stdout.translate(TYPOGRAPHY)


def section(text, head):
    m = re.search(r"^%s\n(.*?)(?=^[A-Z][A-Z ]+$|\Z)" % re.escape(head), text, re.M | re.S)
    return m.group(1) if m else ""


def check_man_options(text, rows):
    p = []
    opts = section(text, "OPTIONS")
    if not opts:
        return ["no OPTIONS section"]
    flat = " ".join(opts.split())
    for left, _, long_, _, help_ in rows:
        want = " ".join(left.split()) + " " + " ".join(help_.split())
        if want not in flat:
            p.append("man lacks %r" % want)
    shown = set(re.findall(r"^ {7}(?:-\S, )?--([a-z0-9-]+)", opts, re.M))
    extra = shown - {r[2] for r in rows}
    if extra:
        p.append("man has options --help lacks: %s" % ", ".join(sorted(extra)))
    return p


def check_doc_options(docs, cmd, rows):
    """The command's doc/ page has a row in its Options table for each
    option --help lists (by its long name), and no row for another."""
    page = docs.PAGES[cmd][0]
    table = docs.option_rows(os.path.join(SOURCE, "doc", page))
    helped = [long_ for _, _, long_, _, _ in rows if long_ != "help"]
    p = []
    missing = [o for o in helped if o not in table]
    if missing:
        p.append("doc/%s has no Options row for %s" % (page, ", ".join("--" + o for o in missing)))
    extra = sorted(set(table) - set(helped))
    if extra:
        p.append("doc/%s documents %s, which spy %s --help does not list"
                 % (page, ", ".join("--" + o for o in extra), cmd))
    return p


def bash_complete(script, words):
    """COMPREPLY for a command line whose last word is being completed."""
    line = "COMP_WORDS=(%s); COMP_CWORD=%d; _spy; printf '%%s\\n' \"${COMPREPLY[@]}\"" % (
        " ".join("'%s'" % w for w in words), len(words) - 1)
    r = run(["bash", "--norc", "--noprofile", "-c", 'source "$1"; ' + line, "bash", script])
    if r.returncode != 0:
        raise harness.HarnessError("bash completion: exit %d, %s" % (r.returncode, r.stderr.strip()))
    return set(r.stdout.split())


def check_bash(script, names, rows_by_cmd):
    p = []
    got = bash_complete(script, ["spy", ""])
    if not set(names) <= got:
        p.append("'spy <TAB>' offers %s" % sorted(got))
    for cmd in names:
        want = set()
        for _, short, long_, _, _ in rows_by_cmd[cmd]:
            want.add("--" + long_)
            if short:
                want.add("-" + short)
        got = bash_complete(script, ["spy", cmd, "-"]) - {"--"}
        if got != want:
            p.append("'spy %s -<TAB>': offers %s beyond --help, lacks %s"
                     % (cmd, sorted(got - want), sorted(want - got)))
    return p


# Drives a real interactive zsh through zpty: TAB at the end of each line
# runs a widget that completes (a compadd wrapper writes every candidate to
# OUT), writes "@@END", clears the line and says DONE, which the driver
# waits for before typing the next line (nothing typed ahead of a TAB).
ZSH_DRIVER = r"""
zmodload zsh/zpty || exit 3
dir=$1 out=$2
shift 2
zpty z zsh -f -i
zpty -w z "PS1=''; unsetopt auto_list auto_menu list_ambiguous beep; fpath=(${(q)dir} \$fpath); autoload -U compinit; compinit -u -D"
zpty -w z "compadd() { local -a _a; builtin compadd -O _a \"\$@\"; print -rl -- \$_a >> ${(q)out}; builtin compadd \"\$@\"; }"
zpty -w z "_t() { zle complete-word; print @@END >> ${(q)out}; BUFFER=; print -n DO''NE > /dev/tty; }; zle -N _t; bindkey '^I' _t; print RE''ADY"
zpty -r -m z chunk '*READY*' || exit 4
for line in "$@"; do
	zpty -w -n z "$line"$'\t'
	zpty -r -m z chunk '*DONE*' || exit 5
done
zpty -w z 'exit'
while zpty -r z chunk 2>/dev/null; do :; done
zpty -d z 2>/dev/null
exit 0
"""


def zsh_complete(script, lines):
    """What zsh offers at the end of each line (a set each), through the
    installed _spy."""
    with tempfile.TemporaryDirectory(prefix="spy-zsh-") as d:
        fdir = os.path.join(d, "functions")
        os.mkdir(fdir)
        shutil.copy(script, os.path.join(fdir, "_spy"))
        driver = os.path.join(d, "driver.zsh")
        with open(driver, "w") as f:
            f.write(ZSH_DRIVER)
        out = os.path.join(d, "out")
        r = run(["zsh", "-f", driver, fdir, out] + lines)
        if r.returncode != 0 or not os.path.exists(out):
            raise harness.HarnessError("zsh driver: exit %d, %s" % (r.returncode, r.stderr.strip()))
        with open(out) as f:
            parts = f.read().split("@@END\n")
    if len(parts) != len(lines) + 1:
        raise harness.HarnessError("zsh completed %d of %d lines" % (len(parts) - 1, len(lines)))
    return [set(p.split()) for p in parts[:-1]]


def check_zsh(script, names, rows_by_cmd):
    p = []
    r = run(["zsh", "-n", script])
    if r.returncode != 0:
        return ["zsh -n: %s" % r.stderr.strip()]
    got = zsh_complete(script, ["spy "] + ["spy %s -" % c for c in names])
    if not set(names) <= got[0]:
        p.append("'spy <TAB>' offers %s" % sorted(got[0]))
    for cmd, offered in zip(names, got[1:]):
        want = set()
        for _, short, long_, _, _ in rows_by_cmd[cmd]:
            want.add("--" + long_)
            if short:
                want.add("-" + short)
        offered = {w for w in offered if w.startswith("-")} - {"-", "--"}
        if offered != want:
            p.append("'spy %s -<TAB>': offers %s beyond --help, lacks %s"
                     % (cmd, sorted(offered - want), sorted(want - offered)))
    return p


def main():
    rep = harness.Reporter()
    docs = gen_docs()
    destdir = tempfile.mkdtemp(prefix="spy-destdir-")
    try:
        r = run([MESON, "install", "-C", BUILD, "--no-rebuild", "--destdir", destdir])
        if r.returncode != 0:
            rep.fail("meson install --destdir", (r.stdout + r.stderr).strip()[-800:])
            rep.finish()
        rep.ok("meson install --destdir")
        opts = build_options()
        spy = os.path.join(destdir + opts["prefix"], opts["bindir"], "spy")
        names = commands(spy)
        expected = expected_files(opts, names)
        rep.check("installed files (%d)" % len(expected), check_files(destdir, expected))
        rows_by_cmd = {cmd: help_options(spy, cmd) for cmd in names}

        pages = sorted(p for p, kind in expected.items() if kind == "man")
        if not pages:
            rep.skip("man pages", "built with -Dman-pages=false")
        mandir = os.path.join(destdir + opts["prefix"], opts["mandir"])
        for page in pages:
            rep.run("%s renders without warnings" % os.path.basename(page),
                    check_render, destdir + page)
        if pages:
            rep.run("man spy finds spy(1)",
                    lambda: [] if "spy COMMAND" in man_text(mandir, "spy") else ["no SYNOPSIS"])
        for cmd in names:
            if pages:
                rep.run("man spy-%s shows spy %s --help's options" % (cmd, cmd),
                        lambda c=cmd: check_man_options(man_text(mandir, "spy-" + c),
                                                        rows_by_cmd[c]))
            rep.run("doc/%s has a row for each of spy %s's options" % (docs.PAGES[cmd][0], cmd),
                    check_doc_options, docs, cmd, rows_by_cmd[cmd])

        bash = [p for p, kind in expected.items() if kind == "bash"]
        if not bash:
            rep.skip("bash completion", "built with -Dbash-completions=false")
        elif not shutil.which("bash"):
            rep.skip("bash completion", "no bash here")
        else:
            rep.run("bash completion offers --help's options",
                    check_bash, destdir + bash[0], names, rows_by_cmd)
        zsh = [p for p, kind in expected.items() if kind == "zsh"]
        if not zsh:
            rep.skip("zsh completion", "built with -Dzsh-completions=false")
        elif not shutil.which("zsh"):
            rep.skip("zsh completion", "no zsh here (.ci/install-deps installs it)")
        else:
            rep.run("zsh completion offers --help's options",
                    check_zsh, destdir + zsh[0], names, rows_by_cmd)
    finally:
        shutil.rmtree(destdir, ignore_errors=True)
    rep.finish()


if __name__ == "__main__":
    main()
