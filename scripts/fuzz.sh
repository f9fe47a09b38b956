#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer targets of tests/fuzz with clang + ASan + UBSan
# and runs each for FUZZ_SECONDS; what `make fuzz` runs. Fails when a target
# crashes, leaks, times out or runs out of memory, after copying the (minimized)
# input to tests/fuzz/regressions/<target>/, which every `make test` replays.
#
#   scripts/fuzz.sh [target ...]        targets: safetensors decode http session (default: all)
#   scripts/fuzz.sh --build-only        just build $FUZZ_BUILD/fuzz_<target>
#   scripts/fuzz.sh --merge [target]    fold new coverage from the working corpus
#                                       into tests/fuzz/corpus/<target>/ (to commit)
# Environment: FUZZ_SECONDS (60) per target, FUZZ_BUILD (build-fuzz),
# FUZZ_TIMEOUT (10 s per input), FUZZ_MINIMIZE_SECONDS (60), FUZZ_ARGS (extra
# libFuzzer flags). Run from anywhere; works in the repository root.
set -euo pipefail

cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-10}
FUZZ_MINIMIZE_SECONDS=${FUZZ_MINIMIZE_SECONDS:-60}
CC_FUZZ=${CC_FUZZ:-clang}
ALL_TARGETS=(safetensors decode http session)

# Per target: longest input (bytes) and the sources besides lib/*.c.
max_len_of() { case $1 in safetensors) echo 8192 ;; decode | http | session) echo 16384 ;; esac; }
server_srcs_of() {
    case $1 in
    safetensors) ;;
    decode) echo server/protocol/codec.c server/protocol/jsonbuf.c server/core/request.c server/protocol/jsonnum.c server/core/jsonload.c server/protocol/jsonscan.c ;;
    http | session) # the daemon's modules but its entry point and the socket glue
        find server -name '*.c' ! -name main.c ! -name http.c | sort
        echo tests/common/inproc.c ;;
    esac
}

log() { printf 'fuzz: %s\n' "$*" >&2; }

# clang and its runtime libraries (libFuzzer, ASan, UBSan) come from Debian.
ensure_clang() {
    if ! command -v "$CC_FUZZ" >/dev/null ||
        ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n){(void)d;(void)n;return 0;}' |
            "$CC_FUZZ" -fsanitize=fuzzer,address,undefined -x c - -o /dev/null 2>/dev/null; then
        log "installing clang and its libFuzzer/sanitizer runtimes"
        scripts/deps.sh clang libclang-rt-14-dev
    fi
}

# The project's warning flags (see Makefile), sanitizers, and coverage for libFuzzer.
flags() {
    echo -std=c11 -Wall -Wextra -Wpedantic -Werror -D_GNU_SOURCE \
        -O1 -g -fno-omit-frame-pointer \
        -fsanitize=address,undefined -fno-sanitize-recover=undefined \
        -Ilib -Iserver -Itests/common "$(pkg-config --cflags openblas jansson)"
}

compile_one() { # src obj
    mkdir -p "$(dirname "$2")"
    # shellcheck disable=SC2046
    "$CC_FUZZ" $(flags) -fsanitize=fuzzer-no-link -c "$1" -o "$2"
}
export -f compile_one flags
export CC_FUZZ

build() {
    local srcs=() objs=() t s
    srcs=(lib/*.c)
    for t in "$@"; do
        # shellcheck disable=SC2207
        srcs+=($(server_srcs_of "$t") "tests/fuzz/fuzz_$t.c")
    done
    # shellcheck disable=SC2207
    srcs=($(printf '%s\n' "${srcs[@]}" | sort -u))
    log "compiling ${#srcs[@]} files with $CC_FUZZ into $FUZZ_BUILD/"
    # shellcheck disable=SC2016 # $0 $1 expand in the child bash, by design
    for s in "${srcs[@]}"; do printf '%s\n%s\n' "$s" "$FUZZ_BUILD/obj/${s%.c}.o"; done |
        xargs -n 2 -P 2 bash -c 'compile_one "$0" "$1"'
    for t in "$@"; do
        objs=()
        for s in lib/*.c $(server_srcs_of "$t") "tests/fuzz/fuzz_$t.c"; do
            objs+=("$FUZZ_BUILD/obj/${s%.c}.o")
        done
        # shellcheck disable=SC2046
        "$CC_FUZZ" -fsanitize=fuzzer,address,undefined "${objs[@]}" \
            $(pkg-config --libs openblas jansson) -lm -pthread -o "$FUZZ_BUILD/fuzz_$t"
    done
}

# Copies the seeds kept elsewhere in the tree into $FUZZ_BUILD/seeds/<target>/.
stage_seeds() {
    local t=$1 dir="$FUZZ_BUILD/seeds/$1"
    rm -rf "$dir"
    mkdir -p "$dir"
    case $t in
    safetensors)
        cp tests/fixtures/good/*.safetensors tests/fixtures/broken/*.safetensors \
            config/demo.safetensors "$dir"/
        ;;
    decode)
        cp proto/examples/*.request.json proto/examples/*.request.txt "$dir"/
        ;;
    session) ;; # its seeds are real files, in tests/fuzz/corpus/session/
    http) # every proto/examples request as a whole request (fuzz_http_entry.h's form)
        /usr/bin/python3 - "$dir" <<'PY'
import json, sys
for ex in json.load(open("proto/examples/index.json"))["examples"]:
    body = open("proto/examples/" + ex["request"], "rb").read() if "request" in ex else b""
    head = "%s %s\nContent-Type: %s\n\n" % (ex["method"], ex["path"],
                                             ex.get("content_type", "application/json"))
    open("%s/%s" % (sys.argv[1], ex["name"]), "wb").write(head.encode() + body)
PY
        ;;
    esac
}

stat_of() { sed -n "s/^stat::$1: *//p" "$2" | tail -n 1; }

# Minimizes each crash/leak input and files it under tests/fuzz/regressions/<t>/.
save_artifacts() {
    local t=$1 bin=$2 art=$3 f kind sum dst saved=0
    mkdir -p "tests/fuzz/regressions/$t"
    for f in "$art"/*; do
        [ -f "$f" ] || continue
        kind=$(basename "$f"); kind=${kind%%-*}
        [ "$kind" = slow ] && continue # slow-unit: a note, not a failure
        if [ "$kind" = crash ] || [ "$kind" = leak ]; then
            log "minimizing $f for up to ${FUZZ_MINIMIZE_SECONDS}s"
            OPENBLAS_NUM_THREADS=1 "$bin" -minimize_crash=1 -runs=100000 \
                -max_total_time="$FUZZ_MINIMIZE_SECONDS" -timeout="$FUZZ_TIMEOUT" \
                -exact_artifact_path="$f.min" "$f" >"$f.minimize.log" 2>&1 || true
            [ -s "$f.min" ] && f="$f.min"
        fi
        sum=$(sha1sum "$f" | cut -c1-12)
        dst="tests/fuzz/regressions/$t/$kind-$sum"
        cp "$f" "$dst"
        log "saved $dst ($(stat -c %s "$dst") bytes)"
        saved=$((saved + 1))
    done
    echo "$saved"
}

run_target() {
    local t=$1 bin="$FUZZ_BUILD/fuzz_$1" corpus="$FUZZ_BUILD/corpus/$1"
    local art="$FUZZ_BUILD/artifacts/$1" logf="$FUZZ_BUILD/logs/$1.log" rc=0
    mkdir -p "$corpus" "$FUZZ_BUILD/logs"
    rm -rf "$art"
    mkdir -p "$art" "tests/fuzz/regressions/$t" # libFuzzer exits on a missing corpus dir
    stage_seeds "$t"
    log "running $t for ${FUZZ_SECONDS}s (log: $logf)"
    # One process, one core (the machine is shared). The first corpus dir is the
    # working corpus libFuzzer adds to; the others are read-only seeds.
    # shellcheck disable=SC2086
    OPENBLAS_NUM_THREADS=1 "$bin" -dict="tests/fuzz/$t.dict" -max_len="$(max_len_of "$t")" \
        -timeout="$FUZZ_TIMEOUT" -rss_limit_mb=2048 -malloc_limit_mb=2048 \
        -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -detect_leaks=1 \
        -artifact_prefix="$art/" ${FUZZ_ARGS:-} \
        "$corpus" "$FUZZ_BUILD/seeds/$t" "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t" \
        >"$logf" 2>&1 || rc=$?
    local execs eps cov
    execs=$(stat_of number_of_executed_units "$logf")
    eps=$(stat_of average_exec_per_sec "$logf")
    cov=$(grep -o 'cov: [0-9]*' "$logf" | tail -n 1 || true)
    printf 'fuzz: %-12s %s execs, %s exec/s, %s, corpus %s files, exit %d\n' "$t" \
        "${execs:-?}" "${eps:-?}" "${cov:-cov: ?}" "$(find "$corpus" -type f | wc -l)" "$rc"
    if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$art")" ]; then
        grep -m 40 -A 30 -E '^==[0-9]+==ERROR|runtime error|invariant broken|ERROR: libFuzzer' \
            "$logf" | head -n 60 >&2 || tail -n 40 "$logf" >&2
        local n
        n=$(save_artifacts "$t" "$bin" "$art")
        log "$t FAILED: $n input(s) saved under tests/fuzz/regressions/$t/ (log: $logf)"
        return 1
    fi
}

# Adds to tests/fuzz/corpus/<t>/ the working-corpus inputs that reach coverage
# the seeds and the committed corpus do not: merges into a scratch copy of both,
# then copies back only the files that are new there.
merge_target() {
    local t=$1 tmp="$FUZZ_BUILD/merge/$1" f before after
    mkdir -p "tests/fuzz/corpus/$t" "$FUZZ_BUILD/corpus/$t" "$FUZZ_BUILD/logs"
    stage_seeds "$t"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    cp -R "$FUZZ_BUILD/seeds/$t/." "tests/fuzz/corpus/$t/." "$tmp"/
    before=$(find "tests/fuzz/corpus/$t" -type f | wc -l)
    OPENBLAS_NUM_THREADS=1 "$FUZZ_BUILD/fuzz_$t" -merge=1 -max_len="$(max_len_of "$t")" \
        -timeout="$FUZZ_TIMEOUT" -rss_limit_mb=2048 "$tmp" "$FUZZ_BUILD/corpus/$t" \
        >"$FUZZ_BUILD/logs/$t.merge.log" 2>&1
    for f in "$tmp"/*; do
        [ -e "$FUZZ_BUILD/seeds/$t/${f##*/}" ] || [ -e "tests/fuzz/corpus/$t/${f##*/}" ] ||
            cp "$f" "tests/fuzz/corpus/$t/"
    done
    after=$(find "tests/fuzz/corpus/$t" -type f | wc -l)
    log "$t: tests/fuzz/corpus/$t: $before -> $after files"
}

main() {
    local mode=run targets=() t failed=0
    while [ $# -gt 0 ]; do
        case $1 in
        --build-only) mode=build ;;
        --merge) mode=merge ;;
        safetensors | decode | http | session) targets+=("$1") ;;
        -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
        *) log "unknown argument $1"; exit 2 ;;
        esac
        shift
    done
    [ ${#targets[@]} -gt 0 ] || targets=("${ALL_TARGETS[@]}")
    ensure_clang
    build "${targets[@]}"
    [ "$mode" = build ] && exit 0
    for t in "${targets[@]}"; do
        if [ "$mode" = merge ]; then merge_target "$t"; else run_target "$t" || failed=1; fi
    done
    [ "$failed" -eq 0 ] || { log "a target failed: see above"; exit 1; }
}

main "$@"
