#!/usr/bin/env bash
# test_promtool.sh — attnd's /metrics passes `promtool check metrics` (format and
# naming lint) after real traffic: successes, errors, batches. Installs Debian's
# prometheus package (for promtool) when missing; needs root or sudo for that.
set -euo pipefail
BUILD=${BUILD:-build}
ATTND_BIN=${ATTND_BIN:-$BUILD/attnd}
MODEL=${ATTND_DEMO_MODEL:-config/demo.safetensors}

if ! command -v promtool >/dev/null 2>&1; then
    echo "promtool missing: installing Debian package prometheus" >&2
    SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 ||
        { $SUDO apt-get update -q >/dev/null &&
          $SUDO apt-get install -y -q --no-install-recommends prometheus >/dev/null; }
fi
command -v promtool >/dev/null || { echo "FAIL: promtool not available" >&2; exit 1; }

work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$ATTND_BIN" --model "demo=$MODEL" --listen "127.0.0.1:$port" >"$work/log" 2>&1 &
pid=$!
base="http://127.0.0.1:$port"
for _ in $(seq 150); do
    curl -fs "$base/readyz" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/log"; echo "FAIL: attnd exited" >&2; exit 1; }
    sleep 0.1
done
curl -fs "$base/readyz" >/dev/null || { echo "FAIL: attnd not ready" >&2; exit 1; }

row=$(python3 -c 'print(",".join(["0.25"]*64))')
ok="{\"query\": [[${row}],[${row}]], \"need_weights\": true}"
for _ in 1 2 3; do
    curl -fs -H 'Content-Type: application/json' -d "$ok" "$base/v1/models/demo/attention" >/dev/null
done
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"query": 1}' "$base/v1/attention"
curl -s -o /dev/null "$base/v1/models/nope"
curl -s -o /dev/null "$base/nothing"
curl -s -o /dev/null -X DELETE "$base/v1/models"
curl -fs "$base/v1/models" >/dev/null

curl -fs "$base/metrics" >"$work/metrics"
if ! out=$(promtool check metrics <"$work/metrics" 2>&1); then
    echo "FAIL: promtool check metrics:" >&2; echo "$out" >&2; exit 1
fi
if [ -n "$out" ]; then
    echo "FAIL: promtool complained:" >&2; echo "$out" >&2; exit 1
fi
# The traffic above must show in the counters (so we did not lint an empty page).
grep -q '^attnd_requests_total{model="demo",route="/v1/models/{name}/attention",status="200"} 3$' \
    "$work/metrics" || { echo "FAIL: request counter" >&2; cat "$work/metrics" >&2; exit 1; }
grep -q '^attnd_batch_size_count{model="demo"} [1-9]' "$work/metrics" ||
    { echo "FAIL: no batches counted" >&2; exit 1; }
# The standard process_* series, with sane values for this small daemon.
python3 - "$work/metrics" "$pid" <<'EOF'
import os, sys, time
want = ("process_resident_memory_bytes", "process_virtual_memory_bytes", "process_cpu_seconds_total",
        "process_open_fds", "process_max_fds", "process_start_time_seconds")
vals, types = {}, {}
for line in open(sys.argv[1]):
    if line.startswith("# TYPE "):
        _, _, name, typ = line.split()
        types[name] = typ
    elif line.startswith("process_"):
        name, v = line.split()
        vals[name] = float(v)
bad = [n for n in want if n not in vals or n not in types]
if bad:
    sys.exit("FAIL: process series missing (value or TYPE): " + ", ".join(bad))
now = time.time()
checks = [
    ("process_resident_memory_bytes > 1 MB", vals["process_resident_memory_bytes"] > 1 << 20),
    ("process_virtual_memory_bytes >= resident", vals["process_virtual_memory_bytes"] >= vals["process_resident_memory_bytes"]),
    ("process_cpu_seconds_total between 0 and uptime x cores",
     0 <= vals["process_cpu_seconds_total"] <= (now - vals["process_start_time_seconds"] + 1) * (os.cpu_count() or 1)),
    ("process_open_fds >= 3", vals["process_open_fds"] >= 3),
    ("process_max_fds >= process_open_fds", vals["process_max_fds"] >= vals["process_open_fds"]),
    ("process_start_time_seconds within the last hour", now - 3600 < vals["process_start_time_seconds"] <= now + 5),
    ("types", types["process_cpu_seconds_total"] == "counter" and
              all(types[n] == "gauge" for n in want if n != "process_cpu_seconds_total")),
]
# RSS agrees with the kernel's own view of the daemon (VmRSS, kB), within 50 %.
try:
    rss_kb = next(int(l.split()[1]) for l in open(f"/proc/{sys.argv[2]}/status") if l.startswith("VmRSS:"))
    checks.append(("RSS close to /proc VmRSS", abs(vals["process_resident_memory_bytes"] - rss_kb * 1024) < rss_kb * 512))
except (OSError, StopIteration):
    pass
failed = [what for what, ok in checks if not ok]
if failed:
    print({n: vals[n] for n in want}, file=sys.stderr)
    sys.exit("FAIL: " + "; ".join(failed))
EOF
echo "promtool check metrics: OK ($(grep -c '^[a-z]' "$work/metrics") series)"
