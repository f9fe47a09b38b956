#!/usr/bin/env bash
# soak.sh — what `make soak` runs (not in CI, not in make test): attnd under
# SOAK_SECONDS (600) of mixed traffic, then its resources and answers checked.
#
# Traffic, all at once for the whole time:
#   - attnd-load v1 JSON (closed loop, 8 clients, T 1..64, weights),
#     v2 binary (4 clients) and session streams (4 at a time, prefill + appends);
#   - overload (the daemon's queue holds 8): every 20 s a burst of 256 clients
#     for 3 s; 503s are expected, any other error fails the soak;
#   - a SIGHUP every 7 s (reloads under load);
#   - disconnects: clients that send half a body and hang up, and clients that
#     hang up before reading their (large, per-head weights) answer;
#   - replays: every proto/examples request of the demo model, sent again and
#     again, whose answer must equal the one the idle daemon gave it alone at
#     the start: same status and fields, numbers within 1e-5 (a request
#     batched with others is computed in other GEMM shapes: ~3e-7 apart); 503s
#     under overload are counted apart.
# At the end, after a 3 s settle (default timeouts: connections of clients that
# hung up must be gone by then): RSS within SOAK_RSS_TOLERANCE_MB (64) of the
# start (after warm-up), thread count and open fds at most 2 above the start.
# Prints a summary table; exits 1 if a check failed. Needs curl and Debian's
# /usr/bin/python3 (answer comparison).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SOAK_SECONDS=${SOAK_SECONDS:-600}
RSS_TOL_MB=${SOAK_RSS_TOLERANCE_MB:-64}
PORT=${SOAK_PORT:-$((20000 + RANDOM % 20000))}
URL=http://127.0.0.1:$PORT
work=$(mktemp -d /tmp/attnd-soak.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    if [ -n "${daemon:-}" ]; then kill "$daemon" 2>/dev/null || true; fi
    wait 2>/dev/null || true
}
trap cleanup EXIT
log() { printf 'soak: %s\n' "$*" >&2; }

proc_stat() { # pid -> "rss_kb threads fds"
    local rss thr
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$1/status")
    thr=$(awk '/^Threads/ {print $2}' "/proc/$1/status")
    echo "$rss $thr $(find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l)"
}

"$BUILD/attnd" --model demo=config/demo.safetensors --listen "127.0.0.1:$PORT" --workers 2 \
    --max-queue 8 --log-level warn >"$work/attnd.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do curl -sf "$URL/readyz" >/dev/null && break; sleep 0.1; done
curl -sf "$URL/readyz" >/dev/null || { log "attnd did not start"; cat "$work/attnd.log"; exit 1; }

# The single-request answers, from the idle daemon.
mapfile -t examples < <(/usr/bin/python3 -c '
import json
for e in json.load(open("proto/examples/index.json"))["examples"]:
    if e.get("request") and e["method"] == "POST" and "/demo/" in e["path"] + "/demo/" \
       and "nope" not in e["path"] and "content_type" not in e:
        print(e["path"] + " " + e["request"])')
post() { # path file out -> status
    curl -s -o "$3" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "@proto/examples/$2" "$URL$1" || echo 000
}
i=0
for ex in "${examples[@]}"; do
    post "${ex% *}" "${ex#* }" "$work/ref.$i" >"$work/ref.$i.status"
    i=$((i + 1))
done
# Warm-up (pools, workspaces, sessions), then the baseline.
"$BUILD/attnd-load" --url "$URL" --duration 3s --warmup 0 --concurrency 8 --quiet >/dev/null 2>&1 || true
sleep 1
read -r rss0 thr0 fd0 < <(proc_stat "$daemon")
log "start: RSS $((rss0 / 1024)) MB, $thr0 threads, $fd0 fds; soaking ${SOAK_SECONDS}s on $URL"

end=$(($(date +%s) + SOAK_SECONDS))
dur=${SOAK_SECONDS}s
"$BUILD/attnd-load" --url "$URL" --concurrency 8 --duration "$dur" --warmup 0 --seq-len 1:64 \
    --need-weights --max-error-rate 1 --quiet --json "$work/v1.json" >"$work/v1.out" 2>&1 &
pids+=($!)
"$BUILD/attnd-load" --url "$URL" --protocol v2 --model demo --binary --concurrency 4 \
    --duration "$dur" --warmup 0 --seq-len 1:32 --max-error-rate 1 --quiet \
    --json "$work/v2.json" >"$work/v2.out" 2>&1 &
pids+=($!)
( while [ "$(date +%s)" -lt "$end" ]; do
    "$BUILD/attnd-load" --url "$URL" --model demo --sessions 4 --prefix 32 --steps 16 \
        --max-retries 5 --max-error-rate 1 --quiet >>"$work/sessions.out" 2>&1 || true
    echo run >>"$work/sessions.runs"
  done ) &
pids+=($!)
( while [ "$(date +%s)" -lt "$end" ]; do sleep 7; kill -HUP "$daemon"; echo hup >>"$work/hups"; done ) &
pids+=($!)
( while [ "$(date +%s)" -lt "$end" ]; do
    sleep 17
    "$BUILD/attnd-load" --url "$URL" --concurrency 256 --duration 3s --warmup 0 --seq-len 64 \
        --max-error-rate 1 --quiet --json "$work/burst.$(date +%s).json" >/dev/null 2>&1 || true
  done ) &
pids+=($!)
( big=$(/usr/bin/python3 -c 'import json; print(json.dumps({"query": [[0.01 * ((i * 7 + j) % 13) for j in range(64)] for i in range(64)], "need_weights": True, "average_attn_weights": False}))')
  while [ "$(date +%s)" -lt "$end" ]; do
    # half a body, then gone
    { exec 3<>"/dev/tcp/127.0.0.1/$PORT"
      printf 'POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"query":[[1,2,' >&3
      exec 3>&-; } 2>/dev/null || true
    # the whole request, gone before the answer
    curl -s -o /dev/null --max-time 0.005 -H 'Content-Type: application/json' --data "$big" \
        "$URL/v1/attention" || true
    echo cut >>"$work/cuts"
    sleep 0.2
  done ) &
pids+=($!)
( n=0; while [ "$(date +%s)" -lt "$end" ]; do
    j=$((n % ${#examples[@]})); ex=${examples[$j]}
    st=$(post "${ex% *}" "${ex#* }" "$work/got")
    want=$(cat "$work/ref.$j.status")
    if [ "$st" = 503 ]; then echo busy >>"$work/replays"
    elif [ "$st" = "$want" ] && /usr/bin/python3 - "$work/ref.$j" "$work/got" \
        "$work/maxdiff" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
timing = ("queue_us", "compute_us", "batch_size", "timing")
worst = [0.0]
def same(x, y):  # structure and every non-float exact; floats within 1e-5
    if isinstance(x, dict):
        keys = [k for k in x if k not in timing]
        return isinstance(y, dict) and keys == [k for k in y if k not in timing] and \
            all(same(x[k], y[k]) for k in keys)
    if isinstance(x, list):
        return isinstance(y, list) and len(x) == len(y) and all(map(same, x, y))
    if isinstance(x, float) or isinstance(y, float):
        worst[0] = max(worst[0], abs(x - y))
        return abs(x - y) <= 1e-5
    return x == y
ok = same(a, b)
open(sys.argv[3], "a").write("%g\n" % worst[0])
sys.exit(0 if ok else 1)
PY
    then echo same >>"$work/replays"
    else echo "differs ${ex#* } $st/$want" >>"$work/replays"
    fi
    n=$((n + 1))
  done ) &
pids+=($!)

wait "${pids[@]}" 2>/dev/null || true
pids=()
log "traffic over; settling 3 s"
sleep 3
kill -0 "$daemon" 2>/dev/null || { log "attnd died"; tail -20 "$work/attnd.log"; exit 1; }
read -r rss1 thr1 fd1 < <(proc_stat "$daemon")
ls -l "/proc/$daemon/fd" >"$work/fds.end" 2>/dev/null || true
ss -tn state established "( sport = :$PORT )" >"$work/conns.end" 2>/dev/null || true

count() { grep -c "$1" "$2" 2>/dev/null || true; }
requests() { # JSON results -> "requests 503s other-errors"
    /usr/bin/python3 -c '
import json, sys
t = busy = other = 0
for f in sys.argv[1:]:
    try:
        for lv in json.load(open(f))["levels"]:
            t += lv.get("requests", 0)
            kinds = lv.get("errors_by_kind", {})
            busy += kinds.get("http_503", 0)
            other += sum(kinds.values()) - kinds.get("http_503", 0)
    except (OSError, ValueError, KeyError):
        pass
print(t, busy, other)' "$@"
}
read -r v1n v1b v1e < <(requests "$work/v1.json")
read -r v2n v2b v2e < <(requests "$work/v2.json")
read -r bn bb be < <(requests "$work"/burst.*.json)
same=$(count same "$work/replays"); busy=$(count busy "$work/replays")
differs=$(count differs "$work/replays")
fail=0
check() { if [ "$1" = ok ]; then echo ok; else echo FAIL; fail=1; fi; }
rss_ok=$([ $(((rss1 - rss0) / 1024)) -le "$RSS_TOL_MB" ] && echo ok || echo no)
thr_ok=$([ "$thr1" -le $((thr0 + 2)) ] && echo ok || echo no)
fd_ok=$([ "$fd1" -le $((fd0 + 2)) ] && echo ok || echo no)
rep_ok=$([ "$differs" -eq 0 ] && [ "$same" -gt 0 ] && echo ok || echo no)
err_ok=$([ $((v1e + v2e + be)) -eq 0 ] && [ "$v1n" -gt 0 ] && [ "$v2n" -gt 0 ] && echo ok || echo no)
printf '\n%-34s %14s %14s  %s\n' "soak ${SOAK_SECONDS}s" start end check
printf '%-34s %14s %14s  %s\n' "RSS (MB, tolerance +$RSS_TOL_MB)" $((rss0 / 1024)) $((rss1 / 1024)) "$(check "$rss_ok")"
printf '%-34s %14s %14s  %s\n' "threads (tolerance +2)" "$thr0" "$thr1" "$(check "$thr_ok")"
printf '%-34s %14s %14s  %s\n' "open fds (tolerance +2)" "$fd0" "$fd1" "$(check "$fd_ok")"
printf '%-34s %14s %14s  %s\n' "replays same / 503 / differing" "$same / $busy" "$differs" "$(check "$rep_ok")"
printf '%-34s %14s\n' "replays: largest difference" "$(sort -g "$work/maxdiff" 2>/dev/null | tail -n 1)"
printf '%-34s %14s %14s\n' "load: requests / 503 / other error" "" ""
printf '%-34s %14s %14s  %s\n' "  v1 JSON (8 clients)" "$v1n / $v1b" "$v1e" "$(check "$err_ok")"
printf '%-34s %14s %14s\n' "  v2 binary (4 clients)" "$v2n / $v2b" "$v2e"
printf '%-34s %14s %14s\n' "  overload bursts (256 clients)" "$bn / $bb" "$be"
read -r s_done s_failed < <(sed -n 's/.* \([0-9]*\) completed, \([0-9]*\) failed.*/\1 \2/p' \
    "$work/sessions.out" | awk '{c += $1; f += $2} END {print c + 0, f + 0}')
sess_ok=$([ "$s_failed" -eq 0 ] && [ "$s_done" -gt 0 ] && echo ok || echo no)
printf '%-34s %14s %14s  %s\n' "session streams completed / failed" "$s_done" "$s_failed" \
    "$(check "$sess_ok")"
printf '%-34s %14s\n' "SIGHUPs" "$(count hup "$work/hups")"
printf '%-34s %14s\n' "client disconnect rounds (2 each)" "$(count cut "$work/cuts")"
printf '%-34s %14s\n' "daemon log errors" "$(count ERROR "$work/attnd.log")"
[ "$differs" -eq 0 ] || grep differs "$work/replays" | sort | uniq -c | head >&2
log "logs and results in $work"
trap - EXIT
cleanup
exit $fail
