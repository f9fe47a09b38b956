#!/usr/bin/env bash
# test_architecture.sh — the layering rules of server/ and lib/, checked on the real tree by
# tests/scripts/archcheck.py (its top comment lists the folders and the eight rules):
#   main.c -> http/ (http, route, ...) -> protocol/ (handler_*, codecs) -> engine/ (models,
#   scheduler, sessions, ...) -> core/ (config, log, metrics, request, ...) -> lib/;
#   each folder includes only itself and the folders below it, no include cycle, http.c
#   knows no protocol, the engine speaks no HTTP status.
# First a self-test, so the check is shown able to fail: small synthetic trees that each
# break one rule must be rejected with the right message, and a clean one accepted.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v python3 >/dev/null || { echo "test_architecture: needs python3 on PATH" >&2; exit 1; }
# The real interpreter (not a pyenv-style shim), isolated and without site: 5x faster startup.
py=("$(python3 -c 'import sys; print(sys.executable)')" -I -S)
check=tests/scripts/archcheck.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

put() { # put FILE LINE... : writes (or, with add, appends) the lines to $tmp/FILE
    local f=$tmp/$1; shift; printf '%s\n' "$@" >"$f"; }
add() { local f=$tmp/$1; shift; printf '%s\n' "$@" >>"$f"; }

clean() { # clean CASE: a tree that keeps every rule (comments/strings may say "session")
    mkdir -p "$tmp/$1/server/"{http,protocol,engine,core} "$tmp/$1/lib"
    put "$1/server/main.c" '#include "http/http.h"' '#include "engine/scheduler.h"'
    put "$1/server/http/http.h" '#include "http/route.h"'
    put "$1/server/http/http.c" '#include "http/http.h"' '#include "protocol/handler.h"' \
        '#include <stdio.h>' \
        '/* a session_x or v2_ call in a comment is fine, and so is a string: */' \
        'int serve(const attnd_handler *h) { puts("session v2_"); return h->answer(); }'
    put "$1/server/http/route.h" '#include "protocol/handler.h"'
    put "$1/server/http/route.c" '#include "http/route.h"' '#include "protocol/handler_v9.h"'
    put "$1/server/protocol/handler.h" '#include "core/request.h"' \
        'typedef struct attnd_handler { int (*answer)(void); } attnd_handler;'
    put "$1/server/protocol/handler_v9.h" '#include "protocol/handler.h"' '#define NINE_MAX 9' \
        'typedef enum nine_mode { NINE_FAST, NINE_SLOW } nine_mode;' 'int nine_answer(void);'
    put "$1/server/protocol/handler_v9.c" '#include "protocol/handler_v9.h"' \
        '#include "engine/scheduler.h"' \
        'int nine_answer(void) { attnd_http_error e; attnd_http_error_set(&e, 404); return 0; }'
    put "$1/server/protocol/codec.h" '#include "core/request.h"'
    put "$1/server/protocol/codec.c" '#include "protocol/codec.h"'
    put "$1/server/engine/scheduler.h" '#include "core/request.h"'
    put "$1/server/engine/scheduler.c" '#include "engine/scheduler.h"' '#include <stdlib.h>'
    put "$1/server/core/request.h" '#include "attn.h"' \
        'typedef struct attnd_http_error { int status; } attnd_http_error;' \
        'void attnd_http_error_set(attnd_http_error *e, int status);'
    put "$1/lib/attn.h" 'int attn_run(void);'
    put "$1/lib/core.c" '#include "attn.h"'
}

bad=0
expect() { # expect CASE EXIT TEXT: the checker on CASE exits EXIT and prints TEXT
    local rc=0 out
    out=$("${py[@]}" "$check" "$tmp/$1/server" "$tmp/$1/lib" 2>&1) || rc=$?
    if [ "$rc" -eq "$2" ] && grep -qF -- "$3" <<<"$out"; then
        echo "self-test $1: ok"
    else
        echo "self-test $1: WRONG (exit $rc, wanted $2 and \"$3\"); it printed:"
        sed 's/^/    /' <<<"$out"
        bad=1
    fi
}

clean clean
expect clean 0 "archcheck: all 8 rules ok"

clean cycle # a.h -> b.h and b.c -> a.h: modules a and b include each other
put cycle/server/engine/a.h '#include "engine/b.h"'
put cycle/server/engine/a.c '#include "engine/a.h"'
put cycle/server/engine/b.h 'int b(void);'
put cycle/server/engine/b.c '#include "engine/b.h"' '#include "engine/a.h"'
expect cycle 1 "cycle: a -> b -> a   (a.h:1, b.c:2)"

clean http_includes_handler
add http_includes_handler/server/http/http.c '#include "protocol/handler_v9.h"'
expect http_includes_handler 1 "http.c:6 includes protocol/handler_v9.h"

clean http_calls_handler
add http_calls_handler/server/http/http.c 'int nine(void) { return nine_answer(); }'
expect http_calls_handler 1 "http.c:6: nine_answer (declared in handler_v9.h)"

clean http_names_protocol
add http_names_protocol/server/http/http.c 'static int session_count;'
expect http_names_protocol 1 "http.c:6: session_count"

clean codec_includes_route
add codec_includes_route/server/protocol/codec.h '#include "http/route.h"'
expect codec_includes_route 1 "codec reaches route: codec -> route   (codec.h:2)"

clean lib_includes_server
add lib_includes_server/lib/core.c '#include "protocol/handler.h"'
expect lib_includes_server 1 "lib/core.c:2 includes server/protocol/handler.h"

clean scheduler_http_error
add scheduler_http_error/server/engine/scheduler.c \
    'void full(attnd_http_error *e) { attnd_http_error_set(e, 503); }'
expect scheduler_http_error 1 "scheduler.c:3: attnd_http_error_set"

clean engine_includes_protocol # the engine reaching up to a codec (no handler involved)
add engine_includes_protocol/server/engine/scheduler.c '#include "protocol/codec.h"'
expect engine_includes_protocol 1 \
    "engine/scheduler.c:3 includes protocol/codec.h (engine/ may include engine/, core/)"

clean core_includes_engine
add core_includes_engine/server/core/request.h '#include "engine/scheduler.h"'
expect core_includes_engine 1 "core/request.h:4 includes engine/scheduler.h (core/ may include core/)"

clean http_includes_engine # the edge skipping the protocols to reach the engine
add http_includes_engine/server/http/route.c '#include "engine/scheduler.h"'
expect http_includes_engine 1 \
    "http/route.c:3 includes engine/scheduler.h (http/ may include http/, protocol/, core/)"

clean stray_file # a module outside any layer folder
put stray_file/server/helpers.c 'int helper(void);'
expect stray_file 1 "helpers.c is in no layer folder (http/, protocol/, engine/, core/)"

if [ "$bad" -ne 0 ]; then
    echo "test_architecture: the checker's self-test failed; not checking the real tree"
    exit 1
fi
echo "--- the real tree (server/, lib/)"
"${py[@]}" "$check"

# Every source says what it is for on its first line ("/* name.c — purpose"), so a
# newcomer can read the tree without opening every file: server/, lib/, tools/load/.
echo "--- opening lines (server/, lib/, tools/load/)"
missing=0
for f in server/main.c server/*/*.[ch] lib/*.[ch] tools/load/*.[ch]; do
    if ! head -n 1 "$f" | grep -qF "/* $(basename "$f") — "; then
        echo "FAIL $f: the first line is not '/* $(basename "$f") — what it is for'"
        missing=1
    fi
done
[ "$missing" -eq 0 ] || exit 1
echo "ok   every file opens with what it is for"
