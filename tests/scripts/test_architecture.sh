#!/usr/bin/env bash
# test_architecture.sh — the layering rules of server/ and lib/, checked on the real tree by
# tests/scripts/archcheck.py (its top comment lists the layers and the seven rules):
#   http.c -> route -> handler_* (via handler.h) -> codecs -> request, scheduler, sessions,
#   models, metrics, auth, log, config -> lib/; no include cycle, nothing includes upward.
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
    mkdir -p "$tmp/$1/server" "$tmp/$1/lib"
    put "$1/server/http.h" '#include "route.h"'
    put "$1/server/http.c" '#include "http.h"' '#include "handler.h"' '#include <stdio.h>' \
        '/* a session_x or v2_ call in a comment is fine, and so is a string: */' \
        'int serve(const attnd_handler *h) { puts("session v2_"); return h->answer(); }'
    put "$1/server/route.h" '#include "handler.h"'
    put "$1/server/route.c" '#include "route.h"' '#include "handler_v9.h"'
    put "$1/server/handler.h" '#include "request.h"' \
        'typedef struct attnd_handler { int (*answer)(void); } attnd_handler;'
    put "$1/server/handler_v9.h" '#include "handler.h"' '#define NINE_MAX 9' \
        'typedef enum nine_mode { NINE_FAST, NINE_SLOW } nine_mode;' 'int nine_answer(void);'
    put "$1/server/handler_v9.c" '#include "handler_v9.h"' '#include "scheduler.h"' \
        'int nine_answer(void) { attnd_http_error e; attnd_http_error_set(&e, 404); return 0; }'
    put "$1/server/codec.h" '#include "request.h"'
    put "$1/server/codec.c" '#include "codec.h"'
    put "$1/server/scheduler.h" '#include "request.h"'
    put "$1/server/scheduler.c" '#include "scheduler.h"' '#include <stdlib.h>'
    put "$1/server/request.h" '#include "attn.h"' \
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
expect clean 0 "archcheck: all 7 rules ok"

clean cycle # a.h -> b.h and b.c -> a.h: modules a and b include each other
put cycle/server/a.h '#include "b.h"'
put cycle/server/a.c '#include "a.h"'
put cycle/server/b.h 'int b(void);'
put cycle/server/b.c '#include "b.h"' '#include "a.h"'
expect cycle 1 "cycle: a -> b -> a   (a.h:1, b.c:2)"

clean http_includes_handler
add http_includes_handler/server/http.c '#include "handler_v9.h"'
expect http_includes_handler 1 "http.c:6 includes handler_v9.h"

clean http_calls_handler
add http_calls_handler/server/http.c 'int nine(void) { return nine_answer(); }'
expect http_calls_handler 1 "http.c:6: nine_answer (declared in handler_v9.h)"

clean http_names_protocol
add http_names_protocol/server/http.c 'static int session_count;'
expect http_names_protocol 1 "http.c:6: session_count"

clean codec_includes_route
add codec_includes_route/server/codec.h '#include "route.h"'
expect codec_includes_route 1 "codec reaches route: codec -> route   (codec.h:2)"

clean lib_includes_server
add lib_includes_server/lib/core.c '#include "handler.h"'
expect lib_includes_server 1 "lib/core.c:2 includes server/handler.h"

clean scheduler_http_error
add scheduler_http_error/server/scheduler.c \
    'void full(attnd_http_error *e) { attnd_http_error_set(e, 503); }'
expect scheduler_http_error 1 "scheduler.c:3: attnd_http_error_set"

if [ "$bad" -ne 0 ]; then
    echo "test_architecture: the checker's self-test failed; not checking the real tree"
    exit 1
fi
echo "--- the real tree (server/, lib/)"
"${py[@]}" "$check"
