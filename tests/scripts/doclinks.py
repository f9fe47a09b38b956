#!/usr/bin/env python3
"""doclinks.py — checks every relative link of attnd's Markdown files (run by
test_doc_links.sh): the file a link names exists, and an anchor (#section) names a heading
of that file, by GitHub's rule (lowercase; punctuation but '-' and '_' dropped; spaces to
'-'; a repeated heading gets -1, -2, ...). Links inside code (fenced blocks, `spans`) are
not links. External links (scheme://, mailto:) are not followed: the machine has no network.

Usage: doclinks.py [ROOT]        every *.md under ROOT (default: the repo), but build*/,
                                 node_modules/ and .git/
       doclinks.py --files F...  only these files (the self-test)
Prints one line per broken link ("FILE:LINE: [text](target): why") and a closing line;
exits 1 when any link is broken.
"""
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`+[^`]*`+")
SKIP_DIRS = ("build", "node_modules", ".git")


def slug(text):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks."""
    out, fenced = [], False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced:
                out.append((n, line.rstrip("\n")))
    return out


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for _, line in prose_lines(path):
            m = HEADING.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            k = seen.get(s, 0)
            seen[s] = k + 1
            found.add(s if k == 0 else "%s-%d" % (s, k))
        for _, line in prose_lines(path):  # explicit <a id="..."> / <a name="...">
            found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
        cache[path] = found
    return cache[path]


def check(path):
    bad = []
    for n, line in prose_lines(path):
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            text, target = (m.group(1), m.group(2)) if m.group(2) else ("image", m.group(3))
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, https:, mailto: ...
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                if file_part else path
            where = "%s:%d: [%s](%s)" % (path, n, text, target)
            if not os.path.exists(dest):
                bad.append("%s: no file %s" % (where, dest))
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                bad.append("%s: %s has no heading #%s" % (where, dest, anchor))
            elif anchor and os.path.isdir(dest):
                bad.append("%s: an anchor on a directory" % where)
    return bad


def markdown_files(root):
    out = []
    for dp, dn, fn in os.walk(root):
        dn[:] = sorted(d for d in dn if not d.startswith(SKIP_DIRS))
        out += [os.path.relpath(os.path.join(dp, f), ".") for f in sorted(fn) if f.endswith(".md")]
    return out


def main(argv):
    if argv[:1] == ["--files"]:
        files = argv[1:]
    else:
        root = argv[0] if argv else os.path.normpath(os.path.join(os.path.dirname(__file__), "../.."))
        os.chdir(root)
        files = markdown_files(".")
    bad, links = [], 0
    for f in files:
        bad += check(f)
        links += sum(len(LINK.findall(CODE_SPAN.sub("", l))) for _, l in prose_lines(f))
    for b in bad:
        print(b)
    print("doclinks: %d files, %d links, %d broken" % (len(files), links, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
