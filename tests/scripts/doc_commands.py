#!/usr/bin/env python3
"""doc_commands.py — the shell commands of a Markdown file that talk to a running attnd:
every command in its ```sh / ```bash / ``` blocks that runs curl (or the attnd Python
client), and the `NAME=$(...)` assignments beside them (later commands use the names), with
the documented server address rewritten to the test's.

  doc_commands.py extract FILE PORT   -> JSON list of {"section", "line", "text", "expect"}
  doc_commands.py script  FILE PORT   -> a bash script running them one by one, recording
                                         each one's exit status and every HTTP status curl got
  doc_commands.py check   FILE PORT STATUS OUTDIR
                                      -> judges that record: prints one line per command,
                                         exits 1 if any failed

A command is one or more lines joined while a line ends in a backslash or a pipe, or a quote
is still open. The one rewrite (mechanical, nothing else changes): `localhost:8080` and
`127.0.0.1:8080` become `127.0.0.1:PORT`. A command expects 2xx from every curl it runs
unless its comment says `→ NNN` (the documented error status). The sections in SKIP are
not run, each for the reason given there, and listed as not run.
"""
import json
import re
import shlex
import sys

SKIP = {  # (file as given, section heading): why it is not run here
    ("docs/operating.md", "Scale out"):
        "needs three replicas behind nginx (make docker-test checks X-Upstream-Addr)",
}

FENCE = re.compile(r"^```(\w*)\s*$")
TALKS = re.compile(r"(^|[|;&(]\s*|\$\(\s*)curl\s|import attnd|^[A-Za-z_]\w*=\$\(|^[A-Za-z_]\w*=\"[^\"]*\$\(")
EXPECT = re.compile(r"→\s*(\d{3})\b")
ADDRESS = re.compile(r"\b(localhost|127\.0\.0\.1):8080\b")


def complete(text):
    """True when text is a whole shell command (no continuation, quotes closed)."""
    stripped = text.rstrip()
    if stripped.endswith("\\") or stripped.endswith("|") or stripped.endswith("&&"):
        return False
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return False
    return True


def commands(path):
    """(section, first line number, command text) for every command of the shell blocks."""
    section, lang, buf, start = "", None, [], 0
    for n, line in enumerate(open(path, encoding="utf-8").read().split("\n"), 1):
        m = FENCE.match(line)
        if lang is None:
            if m:
                lang = m.group(1) or "sh"
            elif line.startswith("#"):
                section = line.lstrip("#").strip()
            continue
        if m and not m.group(1):
            lang, buf = None, []
            continue
        if lang not in ("sh", "bash", "shell"):
            continue
        if not buf:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = n
        buf.append(line)
        text = "\n".join(buf)
        if complete(text):
            yield section, start, text
            buf = []


def extract(path, port):
    out = []
    for section, line, text in commands(path):
        if not TALKS.search(text):
            continue
        m = EXPECT.search(text)
        out.append({"section": section, "line": line,
                    "text": ADDRESS.sub("127.0.0.1:%s" % port, text),
                    "expect": int(m.group(1)) if m else None,
                    "skip": SKIP.get((path, section))})
    return out


def script(path, port):
    """Runs every command in one shell (so `id=$(...)` carries over), recording into
    $DOC_STATUS: "@@cmd I", the HTTP status of each curl it ran, "@@rc I RC"."""
    lines = ["set -o pipefail",
             "curl() { command curl -w '%{stderr}@@http %{http_code}\\n' \"$@\" 2>>\"$DOC_STATUS\"; }"]
    for i, c in enumerate(extract(path, port)):
        if c["skip"]:
            continue
        lines.append('echo "@@cmd %d" >>"$DOC_STATUS"' % i)
        lines.append("{\n%s\n} >\"$DOC_OUT/%d.out\" 2>\"$DOC_OUT/%d.err\"" % (c["text"], i, i))
        lines.append('echo "@@rc %d $?" >>"$DOC_STATUS"' % i)
    return "\n".join(lines) + "\n"


def parse_status(path):
    """{command index: {"rc": int or None, "http": [codes]}} from the record."""
    runs, cur = {}, None
    for line in open(path, encoding="utf-8", errors="replace"):
        f = line.split()
        if len(f) >= 2 and f[0] == "@@cmd":
            cur = runs.setdefault(int(f[1]), {"rc": None, "http": []})
        elif len(f) >= 2 and f[0] == "@@http" and cur is not None:
            cur["http"].append(int(f[1]))
        elif len(f) >= 3 and f[0] == "@@rc":
            runs.setdefault(int(f[1]), {"rc": None, "http": []})["rc"] = int(f[2])
    return runs


def check(path, port, status, outdir):
    cmds, runs, failed = extract(path, port), parse_status(status), 0
    if not cmds:
        print("FAIL: %s: no command that talks to attnd" % path)
        return 1
    for (file, section) in SKIP:
        if file == path and not any(c["section"] == section for c in cmds):
            print("FAIL: %s: SKIP names section %r, which has no such command" % (path, section))
            failed += 1
    for i, c in enumerate(cmds):
        where = "%s:%d (%s)" % (path, c["line"], c["section"])
        first = c["text"].split("\n")[0][:90]
        if c["skip"]:
            print("not run  %s: %s — %s" % (where, first, c["skip"]))
            continue
        r = runs.get(i, {"rc": None, "http": []})
        want = c["expect"]
        bad = []
        if r["rc"] != 0:
            bad.append("exit status %s" % r["rc"])
        if "curl" in c["text"] and not r["http"]:
            bad.append("no HTTP exchange recorded")
        for code in r["http"]:
            if (want is None and not 200 <= code < 300) or (want is not None and code != want):
                bad.append("HTTP %d (expected %s)" % (code, want or "2xx"))
        if bad:
            failed += 1
            print("FAIL     %s: %s: %s" % (where, first, "; ".join(bad)))
            for ext in ("out", "err"):
                try:
                    text = open("%s/%d.%s" % (outdir, i, ext), errors="replace").read().strip()
                except OSError:
                    text = ""
                if text:
                    print("         %s: %s" % (ext, text[:400]))
        else:
            print("ok       %s: %s -> HTTP %s" % (where, first, ",".join(map(str, r["http"])) or "-"))
    return 1 if failed else 0


if __name__ == "__main__":
    what, path, port = sys.argv[1:4]
    if what == "check":
        sys.exit(check(path, port, sys.argv[4], sys.argv[5]))
    if what == "extract":
        print(json.dumps(extract(path, port), indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(script(path, port))
