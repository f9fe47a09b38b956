#!/usr/bin/env bash
# test_ui_browser.sh — the playground in a real browser: starts attnd on the demo model (one
# open, one with an API key), drives headless Chromium with playwright-core
# (tests/browser/ui_test.mjs) and leaves a screenshot in $BUILD/ui-screenshot.png. Installs Debian chromium and npm playwright-core (into
# ${XDG_CACHE_HOME:-$HOME/.cache}/attnd-npm, outside the repo) when missing; never downloads a
# browser. attnd and Chromium are always stopped.
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=${BUILD:-build}
ATTND_BIN=${ATTND_BIN:-$BUILD/attnd}
PLAYWRIGHT_VERSION=1.65.1
cache=${ATTND_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/attnd-npm}

[ -x "$ATTND_BIN" ] || { echo "test_ui_browser: $ATTND_BIN not built" >&2; exit 1; }
[ -x /usr/bin/chromium ] || scripts/deps.sh chromium
installed=$(node -e 'try { console.log(require(process.argv[1] + "/package.json").version) } catch (e) {}' \
    "$cache/node_modules/playwright-core" 2>/dev/null || true)
if [ "$installed" != "$PLAYWRIGHT_VERSION" ]; then
    echo "test_ui_browser: installing playwright-core $PLAYWRIGHT_VERSION into $cache"
    mkdir -p "$cache"
    [ -f "$cache/package.json" ] || echo '{"private": true}' >"$cache/package.json"
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 timeout 300 npm install --prefix "$cache" --no-audit \
        --no-fund --save-exact --loglevel=error "playwright-core@$PLAYWRIGHT_VERSION" >/dev/null
fi

tmp=$(mktemp -d)
attnd_pids=()
node_pid=
cleanup() {
    # node runs in its own process group (setsid), so Chromium goes with it.
    [ -n "$node_pid" ] && kill -TERM -- "-$node_pid" 2>/dev/null || true
    for pid in "${attnd_pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    [ -n "$node_pid" ] && kill -KILL -- "-$node_pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# start_attnd NAME EXTRA-ARGS...: starts attnd on a free port, waits for /readyz, sets $url.
start_attnd() {
    local name=$1 port pid; shift
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$ATTND_BIN" --model demo=config/demo.safetensors --listen "127.0.0.1:$port" --log-level warn \
        "$@" >"$tmp/$name.log" 2>&1 &
    pid=$!
    attnd_pids+=("$pid")
    url="http://127.0.0.1:$port"
    for _ in $(seq 150); do
        curl -fsS -o /dev/null "$url/readyz" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || { echo "attnd ($name) exited:"; cat "$tmp/$name.log"; exit 1; }
        sleep 0.1
    done
    echo "attnd ($name) not ready after 15 s"; cat "$tmp/$name.log"; exit 1
}

test_key=ui-test-$$-$RANDOM
start_attnd open
open_url=$url
ATTND_API_KEYS=$test_key start_attnd keyed
keyed_url=$url
start_attnd gqa --model llama=tests/fixtures/ckpt/llama_gqa,layer=1
gqa_url=$url

mkdir -p "$BUILD"
rc=0
ATTND_URL=$open_url ATTND_KEYED_URL=$keyed_url ATTND_TEST_KEY=$test_key ATTND_GQA_URL=$gqa_url \
    PW_MODULES=$cache \
    USER_DATA_DIR="$tmp/profile" SCREENSHOT="$BUILD/ui-screenshot.png" \
    setsid timeout --kill-after=5 60 node tests/browser/ui_test.mjs &
node_pid=$!
wait "$node_pid" || rc=$?
node_pid=
if [ $rc -ne 0 ]; then
    echo "test_ui_browser: failed (exit $rc); attnd logs:"
    tail -n 20 "$tmp/open.log" "$tmp/keyed.log" "$tmp/gqa.log"
fi
exit $rc
