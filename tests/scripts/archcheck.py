#!/usr/bin/env python3
"""archcheck.py — checks the layering of attnd's C sources (run by test_architecture.sh).

server/ is in layer folders; the request path reads top-down, and each folder may include
only itself and the folders below it:

    main.c        the entry point (the top: may include every folder)
    http/         the HTTP edge: libmicrohttpd glue (http), the route table (route), request
                  ids (reqid), CORS (cors), the access log (access_log); knows no protocol
                  -> may include http/, protocol/, core/ (not engine/)
    protocol/     the protocols: handlers (handler*, app.h), wire codecs (codec*), JSON text
                  (jsonbuf, jsonnum, jsonscan), responses (reply)
                  -> may include protocol/, engine/, core/
    engine/       models, scheduler, streams, sessions, KV pool and layout, retired versions
                  -> may include engine/, core/
    core/         what everything uses: config, log, metrics, request, auth, jsonload,
                  ui_assets -> may include core/ only
    lib/          the attention core; knows nothing of server/

A module is a file stem under server/: foo.c and foo.h are module "foo" (a lone header is a
module too); its layer is the folder it is in. An edge foo -> bar is an `#include "..."` in
foo.c or foo.h that resolves (from the file's own folder, then from server/) to a file under
server/ (<system> includes and lib/ headers such as "attn.h" are not edges).

Rules:
  1 no include cycle among server/ modules (foo.c including foo.h is not one)
  2 http.c includes no protocol handler header (handler_*.h other than handler.h)
  3 http.c names no identifier declared only by a protocol handler header
    (functions, typedef/struct/union/enum names, enum constants, extern objects, macros;
    a name that a shared header such as handler.h declares too is not protocol-only)
  4 http.c has no identifier containing v1_, v2_ or session (any case; comments and
    string literals do not count)
  5 the inner modules (everything in engine/ and core/, and protocol/'s codec* jsonbuf
    jsonnum jsonscan) reach no http, route or handler* header, directly or through others
  6 lib/*.c and lib/*.h include no server/ header
  7 sessions.c/.h and scheduler.c/.h (and models, metrics) speak no HTTP: no attnd_http_*
    identifier (the attnd_http_error type, attnd_http_error_set, attnd_http_fail ...):
    they return their own results and the handlers choose the HTTP status
  8 the folder rule above: every source is main.c or in a layer folder, and each #include
    of a server/ header goes to a folder its own folder may include

Usage: archcheck.py [SERVER_DIR [LIB_DIR]]   (default: server and lib of the repo root)
Prints one ok/FAIL line per rule (details indented below it) and a closing line;
exits 1 when any rule fails, 2 on bad arguments.
"""
import os
import re
import sys

# Which folders each folder may include ("" is server/ itself, where only main.c lives).
MAY_INCLUDE = {
    "": ("", "http", "protocol", "engine", "core"),
    "http": ("http", "protocol", "core"),
    "protocol": ("protocol", "engine", "core"),
    "engine": ("engine", "core"),
    "core": ("core",),
}
TOP_LEVEL = ("main.c",)  # the only sources allowed in server/ itself
INNER_LAYERS = ("engine", "core")
INNER_PROTOCOL = ("jsonbuf", "jsonnum", "jsonscan")  # and every codec*: see is_inner()
HTTP_LAYER = re.compile(r"^(http|route|handler|handler_.*)$")
PROTOCOL_HEADER = re.compile(r"^handler_.+\.h$")  # handler.h itself is the shared interface
PROTOCOL_WORD = re.compile(r"v1_|v2_|session", re.I)
NO_HTTP_IN = ("sessions.c", "sessions.h", "scheduler.c", "scheduler.h", "models.c", "models.h",
              "metrics.c", "metrics.h")
HTTP_WORD = re.compile(r"^attnd_http_")  # attnd_http_error, attnd_http_error_set, _fail ...

IDENT = re.compile(r"\b[A-Za-z_]\w*")
C_WORDS = set("""auto break case char const continue default do double else enum extern float
for goto if inline int long register restrict return short signed sizeof static struct switch
typedef union unsigned void volatile while _Bool _Atomic _Noreturn bool size_t""".split())


def is_inner(stem, layer):
    return layer in INNER_LAYERS or stem in INNER_PROTOCOL or stem.startswith("codec")


# ---- reading C text --------------------------------------------------------------------

LEXEME = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def strip(text, keep_strings=False):
    """Blanks comments (and string/char literals unless keep_strings), keeping line numbers."""
    def blank(m):
        s = m.group(0)
        if s[0] in "\"'" and keep_strings:
            return s
        return s[0] * 2 if s[0] in "\"'" else re.sub(r"[^\n]", " ", s)
    return LEXEME.sub(blank, text)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def includes(path):
    """[(line number, "name.h")] for each #include "..." in path."""
    text = strip(read(path), keep_strings=True)
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in INCLUDE.finditer(text)]


def resolve(name, from_dir, search):
    """The file an #include "name" in from_dir opens: its own directory first, then -I dirs."""
    for d in (from_dir,) + tuple(search):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return os.path.realpath(p)
    return None


def words(path):
    """[(line number, identifier)] in code: comments and string literals removed."""
    text = strip(read(path))
    return [(n, m.group(0)) for n, line in enumerate(text.split("\n"), 1)
            for m in IDENT.finditer(line)]


def declared(path):
    """The identifiers a header declares at file scope (a small parser, not a compiler)."""
    text = strip(read(path)).replace("\\\n", " ")
    names = set(re.findall(r"^\s*#\s*define\s+(\w+)", text, re.M))
    text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)
    text = re.sub(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)", " ", text)
    stmts, cur, depth, head = [], [], 0, ""
    for ch in text:  # split into file-scope statements (a function body ends one too)
        if ch == "{":
            head = "".join(cur) if depth == 0 else head
            depth += 1
        elif ch == "}":
            depth -= 1
        cur.append(ch)
        if depth == 0 and (ch == ";" or (ch == "}" and head.rstrip().endswith(")"))):
            stmts.append("".join(cur))
            cur = []
    for s in stmts:
        names.update(re.findall(r"\b(?:struct|union|enum)\s+(\w+)\s*\{", s))
        m = re.fullmatch(r"\s*(?:struct|union|enum)\s+(\w+)\s*;\s*", s)
        names.update([m.group(1)] if m else [])
        for body in re.findall(r"\benum\b[^{;]*\{([^}]*)\}", s):
            names.update(re.findall(r"(?:^|,)\s*(\w+)", body))
        flat = s
        while re.search(r"\{[^{}]*\}", flat):
            flat = re.sub(r"\{[^{}]*\}", " ", flat)
        flat = re.sub(r"\[[^\]]*\]|=[^,;]*", " ", flat).rstrip("; \n\t")
        if flat.lstrip().startswith("typedef"):  # typedef struct tag name: both names
            names.update(re.findall(r"\b(?:struct|union|enum)\s+(\w+)", flat))
        fnptr = re.match(r"[^(]*\(\s*\*\s*(\w+)\s*\)", flat)  # int (*name)(...)
        if fnptr:
            names.add(fnptr.group(1))
        elif "(" in flat:  # a function (or function type): the name before the first (
            names.update(re.findall(r"(\w+)\s*$", flat.split("(")[0]))
        else:
            for part in flat.split(","):
                names.update(re.findall(r"\w+", part)[-1:])
    return {n for n in names if n not in C_WORDS and not n[0].isdigit()}


# ---- the module graph ------------------------------------------------------------------

def stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def c_files(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith((".c", ".h")))


def tree_files(server):
    """Every .c/.h under server/, sorted (the playground's ui/ holds none)."""
    out = []
    for dp, dn, fn in os.walk(server):
        dn.sort()
        out += [os.path.join(dp, f) for f in sorted(fn) if f.endswith((".c", ".h"))]
    return out


def layer_of(server, path):
    """The layer folder of a file under server/ ("" for server/ itself)."""
    rel = os.path.relpath(os.path.dirname(os.path.realpath(path)), os.path.realpath(server))
    return "" if rel == "." else rel


def find(server, name):
    """The file called name (a basename) anywhere under server/, or None."""
    return next((p for p in tree_files(server) if os.path.basename(p) == name), None)


def under(path, server):
    real = os.path.realpath(server)
    return path is not None and os.path.commonpath([path, real]) == real


def server_includes(server, path):
    """[(line, name, target)] for each #include in path that resolves to a file under server/."""
    out = []
    for n, name in includes(path):
        target = resolve(name, os.path.dirname(path), (server,))
        if under(target, server):
            out.append((n, name, target))
    return out


def graph(server):
    """{module: {included module: "file:line" of the first such #include}}"""
    edges = {stem(p): {} for p in tree_files(server)}
    for p in tree_files(server):
        for n, name, target in server_includes(server, p):
            if stem(target) != stem(p):
                edges[stem(p)].setdefault(stem(target), "%s:%d" % (os.path.basename(p), n))
    return edges


def layers(server):
    """{module: its layer folder}"""
    return {stem(p): layer_of(server, p) for p in tree_files(server)}


def cycles(edges, limit=20):
    """Elementary cycles (at most limit), each once, from its smallest module; sorted."""
    found = []

    def walk(start, node, path):
        for nxt in sorted(edges[node]):
            if len(found) >= limit:
                return
            if nxt == start:
                found.append(path + [start])
            elif nxt > start and nxt not in path:
                walk(start, nxt, path + [nxt])
    for start in sorted(edges):
        walk(start, start, [start])
    return found


def path_to(edges, src, goal):
    """A shortest include path src -> ... -> a module matching goal, or None."""
    seen, queue = {src}, [[src]]
    while queue:
        path = queue.pop(0)
        for nxt in sorted(edges[path[-1]]):
            if goal.match(nxt):
                return path + [nxt]
            if nxt not in seen:
                seen.add(nxt)
                queue.append(path + [nxt])
    return None


# ---- the rules: each returns a list of detail lines (empty = ok) -----------------------

def uses(found):
    """[(file, line, what)] -> "file:line: what (also lines ...)", one per (file, what)."""
    lines = {}
    for f, n, what in found:
        lines.setdefault((f, what), []).append(n)
    return ["%s:%d: %s" % (f, ns[0], what) + (" (also at %s)" % ", ".join(map(str, ns[1:]))
                                            if ns[1:] else "")
            for (f, what), ns in sorted(lines.items(), key=lambda kv: (kv[0][0], kv[1][0]))]


def rule_cycles(server, lib, edges):
    out = []
    for c in cycles(edges):
        via = ", ".join(edges[a][b] for a, b in zip(c, c[1:]))
        out.append("cycle: %s   (%s)" % (" -> ".join(c), via))
    return out


def rule_http_includes(server, lib, edges):
    http = find(server, "http.c")
    if http is None:
        return []
    return ["http.c:%d includes %s" % (n, name) for n, name in includes(http)
            if PROTOCOL_HEADER.match(os.path.basename(name))]


def rule_http_names(server, lib, edges):
    http = find(server, "http.c")
    if http is None:
        return []
    headers = [p for p in tree_files(server) if p.endswith(".h")]
    if not any(PROTOCOL_HEADER.match(os.path.basename(p)) for p in headers):
        return []
    owner, shared = {}, set()
    for p in headers:
        names = declared(p)
        if PROTOCOL_HEADER.match(os.path.basename(p)):
            for name in sorted(names):
                owner.setdefault(name, os.path.basename(p))
        else:
            shared |= names  # also declared by a shared header: not protocol-only
    return uses(("http.c", n, "%s (declared in %s)" % (w, owner[w])) for n, w in words(http)
                if w in owner and w not in shared)


def rule_http_protocol_words(server, lib, edges):
    http = find(server, "http.c")
    if http is None:
        return []
    return uses(("http.c", n, w) for n, w in words(http) if PROTOCOL_WORD.search(w))


def rule_inner(server, lib, edges):
    out, layer = [], layers(server)
    for m in sorted(edges):
        p = is_inner(m, layer[m]) and path_to(edges, m, HTTP_LAYER)
        if p:
            out.append("%s reaches %s: %s   (%s)" % (m, p[-1], " -> ".join(p), ", ".join(
                edges[a][b] for a, b in zip(p, p[1:]))))
    return out


def rule_lib(server, lib, edges):
    if not os.path.isdir(lib):
        return []
    real = os.path.realpath(server)
    out = []
    for p in c_files(lib):
        for n, name in includes(p):
            target = resolve(name, lib, (server,))
            if under(target, server):
                out.append("lib/%s:%d includes server/%s" % (os.path.basename(p), n,
                                                             os.path.relpath(target, real)))
    return out


def rule_no_http_inside(server, lib, edges):
    files = [(f, find(server, f)) for f in NO_HTTP_IN]
    return uses((f, n, w) for f, p in files if p for n, w in words(p) if HTTP_WORD.match(w))


def rule_folders(server, lib, edges):
    out, real = [], os.path.realpath(server)
    for p in tree_files(server):
        rel, here = os.path.relpath(os.path.realpath(p), real), layer_of(server, p)
        if here not in MAY_INCLUDE or (here == "" and rel not in TOP_LEVEL):
            out.append("%s is in no layer folder (%s)" % (rel, ", ".join(
                k + "/" for k in MAY_INCLUDE if k)))
            continue
        for n, name, target in server_includes(server, p):
            there = layer_of(server, target)
            if there not in MAY_INCLUDE[here]:
                out.append("%s:%d includes %s (%s/ may include %s)" % (
                    rel, n, os.path.relpath(target, real), here or "server",
                    ", ".join(k + "/" for k in MAY_INCLUDE[here])))
    return out


RULES = [
    (rule_cycles, "1 no include cycle among server/ modules"),
    (rule_http_includes, "2 http.c includes no protocol handler header (handler_*.h)"),
    (rule_http_names, "3 http.c names nothing declared only in handler_*.h"),
    (rule_http_protocol_words, "4 http.c has no v1_/v2_/session identifier"),
    (rule_inner, "5 inner modules (engine/, core/, codec*, json*) reach no http/route/handler* header"),
    (rule_lib, "6 lib/ includes no server/ header"),
    (rule_no_http_inside, "7 sessions, scheduler, models, metrics use no attnd_http_* (error, setters)"),
    (rule_folders, "8 folders: http/ -> protocol/ -> engine/ -> core/ (each includes only itself and below)"),
]


def main(argv):
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
    if len(argv) > 2:
        print("usage: archcheck.py [SERVER_DIR [LIB_DIR]]", file=sys.stderr)
        return 2
    server = argv[0] if argv else os.path.join(root, "server")
    lib = argv[1] if len(argv) > 1 else os.path.join(root, "lib")
    if not os.path.isdir(server):
        print("archcheck: no directory %s" % server, file=sys.stderr)
        return 2
    edges = graph(server)
    failed = 0
    for rule, title in RULES:
        details = rule(server, lib, edges)
        print("%-4s %s" % ("FAIL" if details else "ok", title))
        for d in details:
            print("       " + d)
        failed += bool(details)
    print("archcheck: %s" % ("%d of %d rules failed" % (failed, len(RULES)) if failed
                             else "all %d rules ok" % len(RULES)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
