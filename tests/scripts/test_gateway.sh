#!/usr/bin/env bash
# test_gateway.sh — docker/nginx.conf for real, without containers: three local attnd
# (--replica-name r1, r2, r3 on 127.0.0.1 ports) behind a local nginx running that very file
# (only the replicas' addresses and the listen port rewritten). tests/scripts/gateway_sessions.py
# streams 30 sessions through it, each equal to its one-shot causal answer, kills one replica:
# its sessions answer 410 session_replica_gone, the others go on. Then the gateway's own
# answers: a replica whose address never answers (connect timeout, not refused) is 410 too; a
# bare or foreign id reaches a replica's 404; with every replica down, stateless calls get a
# JSON 502 no_replica. Then docker/k8s/gateway.yaml's nginx template the same way, over three
# replicas named like StatefulSet pods (attnd-0..2 on 127.0.0.1..3) and a stub cluster DNS
# (tests/scripts/dns_stub.py) that stops answering for a pod once it is killed.
# make docker-test runs the same client against the compose stack.
set -euo pipefail
cd "$(dirname "$0")/../.."
ATTND_BIN=${ATTND_BIN:-${BUILD:-build}/attnd}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
PY=/usr/bin/python3
[ -x "$NGINX" ] || { echo "FAIL: no nginx (apt install nginx-light; scripts/deps.sh does)"; exit 1; }
[ -x "$ATTND_BIN" ] || { echo "FAIL: $ATTND_BIN not built (make all)"; exit 1; }
tmp=$(mktemp -d /tmp/attnd-gateway.XXXXXX)
pids=()
cleanup() {
    local rc=$?
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for f in "$tmp"/nginx*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
    wait 2>/dev/null || true
    [ $rc -eq 0 ] || { echo "--- nginx error logs"; tail -n 20 "$tmp"/error*.log 2>/dev/null || true; }
    rm -rf "$tmp"
    exit $rc
}
trap cleanup EXIT

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fail() { echo "FAIL: $*"; exit 1; }

# ---- three replicas
declare -A port pid
for r in r1 r2 r3; do
    port[$r]=$(free_port)
    "$ATTND_BIN" --model demo=config/demo.safetensors --listen "127.0.0.1:${port[$r]}" \
        --replica-name "$r" --workers 1 --http-threads 1 >"$tmp/$r.log" 2>&1 &
    pid[$r]=$!
    pids+=("$!")
done
# wait_replica ADDR NAME: attnd at ADDR is ready and says it is NAME.
wait_replica() {
    for _ in $(seq 100); do
        curl -sf -m 1 "$1/readyz" >/dev/null && break
        sleep 0.1
    done
    curl -sf -m 1 "$1/healthz" | grep -q "\"replica\":\"$2\"" ||
        { tail "$tmp/$2.log"; fail "replica $2 not up at $1"; }
}
for r in r1 r2 r3; do wait_replica "127.0.0.1:${port[$r]}" "$r"; done

# ---- nginx with docker/nginx.conf: local addresses, and r4 = an address that never answers:
# a socket listening with a full backlog, so connect times out (nginx's own 504) instead of
# being refused (502).
"$PY" -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(0)
fill = [socket.socket() for _ in range(3)]
for c in fill:
    c.setblocking(False)
    try: c.connect(s.getsockname())
    except BlockingIOError: pass
print(s.getsockname()[1], flush=True)
time.sleep(120)' >"$tmp/hole.port" &
pids+=("$!")
for _ in $(seq 50); do [ -s "$tmp/hole.port" ] && break; sleep 0.1; done
hole=$(cat "$tmp/hole.port")
gw=$(free_port)
sed -e "s/attnd-r1:8080/127.0.0.1:${port[r1]}/; s/attnd-r2:8080/127.0.0.1:${port[r2]}/" \
    -e "s/attnd-r3:8080/127.0.0.1:${port[r3]}/" \
    -e "s|^pid .*|pid $tmp/nginx.pid;|; s|error_log .*|error_log $tmp/error.log warn;|" \
    -e "s|access_log /dev/stdout|access_log $tmp/access.log|" \
    -e "s/listen 8080 reuseport;/listen 127.0.0.1:$gw;/" \
    -e "s/^worker_processes auto;/worker_processes 1;/" \
    -e "s/^    upstream attnd_r1 {/    upstream attnd_r4 {\n        server 127.0.0.1:$hole;\n    }\n&/" \
    -e "s/^        r1 attnd_r1;/&\n        r4 attnd_r4;/" \
    docker/nginx.conf >"$tmp/nginx.conf"
grep -q "r4 attnd_r4" "$tmp/nginx.conf" && ! grep -q "attnd-r[123]:" "$tmp/nginx.conf" ||
    fail "could not rewrite docker/nginx.conf for local replicas"
mkdir -p "$tmp/prefix/logs"
"$NGINX" -p "$tmp/prefix" -c "$tmp/nginx.conf" -t -q 2>"$tmp/t.err" || { cat "$tmp/t.err"; fail "nginx -t rejects docker/nginx.conf"; }
"$NGINX" -p "$tmp/prefix" -c "$tmp/nginx.conf" -g "error_log $tmp/error.log warn;"
for _ in $(seq 50); do curl -sf -m 1 "127.0.0.1:$gw/nginx-health" >/dev/null && break; sleep 0.1; done
base=http://127.0.0.1:$gw

# ---- 30 sessions, a replica killed
"$PY" tests/scripts/gateway_sessions.py --base "$base" --sessions 30 --replicas r1,r2,r3 \
    --victim r2 --stop-cmd "kill ${pid[r2]} && while kill -0 ${pid[r2]} 2>/dev/null; do sleep 0.05; done"

# ---- the gateway's own answers
# expect METHOD PATH STATUS CODE: the answer through the gateway has STATUS and error.code CODE.
expect() {
    local body status code
    body=$(curl -s -m 15 -o - -w '\n%{http_code}' -X "$1" -H 'Content-Type: application/json' \
           ${5:+--data-binary "$5"} "$base$2")
    status=$(tail -n 1 <<<"$body")
    code=$("$PY" -c 'import json,sys; print(json.loads(sys.stdin.read())["error"]["code"])' \
           <<<"$(sed '$d' <<<"$body")" 2>/dev/null || echo "(no JSON error)")
    [ "$status" = "$3" ] && [ "$code" = "$4" ] || fail "$1 $2: HTTP $status $code, want $3 $4"
    echo "ok: $1 $2 -> $3 $4"
}
hex=0123456789abcdef0123456789abcdef
s=$(date +%s%N)
expect GET "/v1/sessions/r4.$hex" 410 session_replica_gone
ms=$(( ($(date +%s%N) - s) / 1000000 ))
[ "$ms" -ge 900 ] || fail "r4 answered in $ms ms: not the connect timeout (1 s) it should test"
echo "    (a replica that never accepts: the connect timeout, ${ms} ms)"
expect POST "/v1/sessions/r2.$hex/append" 410 session_replica_gone '{"query":[[0]]}'
expect GET "/v1/sessions/$hex" 404 session_not_found         # bare id: any replica, its 404
expect GET "/v1/sessions/r9.$hex" 404 session_not_found      # no such replica: the same
expect GET "/v1/sessions/nonsense/append" 405 method_not_allowed
for r in r1 r3; do kill "${pid[$r]}"; done
wait "${pid[r1]}" "${pid[r3]}" 2>/dev/null || true
expect POST /v1/models/demo/attention 502 no_replica '{"query":[[0]]}'
echo "ok: docker/nginx.conf"

# ---- docker/k8s/gateway.yaml: pods attnd-0..2 at 127.0.0.1..3, a stub DNS for their names
ns=attnd-ns
mkdir -p "$tmp/dns" "$tmp/kprefix/logs"
"$PY" tests/scripts/dns_stub.py "$tmp/dns" >"$tmp/dns.port" &
pids+=("$!")
for _ in $(seq 50); do [ -s "$tmp/dns.port" ] && break; sleep 0.1; done
kport=$(free_port)
declare -A kpid
for i in 0 1 2; do
    "$ATTND_BIN" --model demo=config/demo.safetensors --listen "127.0.0.$((i + 1)):$kport" \
        --replica-name "attnd-$i" --workers 1 --http-threads 1 >"$tmp/attnd-$i.log" 2>&1 &
    kpid[$i]=$!
    pids+=("$!")
    echo "127.0.0.$((i + 1))" >"$tmp/dns/attnd-$i.attnd-replicas.$ns.svc.cluster.local"
done
for i in 0 1 2; do wait_replica "127.0.0.$((i + 1)):$kport" "attnd-$i"; done
# The template as the nginx image renders it; the ClusterIP Service (one address kube-proxy
# spreads) becomes the three pods' addresses, port 8080 the local one.
kgw=$(free_port)
"$PY" -c 'import sys, yaml
for d in yaml.safe_load_all(open("docker/k8s/gateway.yaml")):
    if d and d["kind"] == "ConfigMap": sys.stdout.write(d["data"]["attnd.conf.template"])' |
    POD_NAMESPACE=$ns CLUSTER_DOMAIN=cluster.local RESOLVER="127.0.0.1:$(cat "$tmp/dns.port")" \
    envsubst '${POD_NAMESPACE} ${CLUSTER_DOMAIN} ${RESOLVER}' |
    awk -v p="$kport" '/server attnd\.attnd-ns\.svc\.cluster\.local:8080/ { n++; sub(/attnd\.attnd-ns\.svc\.cluster\.local:8080/, "127.0.0." n ":" p) } { print }' |
    sed -e "s/svc\.cluster\.local:8080;/svc.cluster.local:$kport;/" -e "s/listen 8080;/listen 127.0.0.1:$kgw;/" \
    >"$tmp/attnd-k8s.conf"
grep -q "127.0.0.3:$kport" "$tmp/attnd-k8s.conf" && grep -q "cluster.local:$kport;" "$tmp/attnd-k8s.conf" ||
    fail "could not render docker/k8s/gateway.yaml's template for local pods"
printf 'pid %s/nginx-k8s.pid;\nerror_log %s/error-k8s.log warn;\nevents {}\nhttp {\n    access_log %s/access-k8s.log;\n    include %s/attnd-k8s.conf;\n}\n' \
    "$tmp" "$tmp" "$tmp" "$tmp" >"$tmp/nginx-k8s.conf"
"$NGINX" -p "$tmp/kprefix" -c "$tmp/nginx-k8s.conf"
for _ in $(seq 50); do curl -sf -m 1 "127.0.0.1:$kgw/nginx-health" >/dev/null && break; sleep 0.1; done
base=http://127.0.0.1:$kgw
victim_dns=$tmp/dns/attnd-1.attnd-replicas.$ns.svc.cluster.local
"$PY" tests/scripts/gateway_sessions.py --base "$base" --sessions 30 \
    --replicas attnd-0,attnd-1,attnd-2 --victim attnd-1 \
    --stop-cmd "rm $victim_dns && kill ${kpid[1]} && while kill -0 ${kpid[1]} 2>/dev/null; do sleep 0.05; done"
expect GET "/v1/sessions/attnd-7.$hex" 410 session_replica_gone   # no such pod: NXDOMAIN
expect GET "/v1/sessions/$hex" 404 session_not_found
echo "ok: docker/k8s/gateway.yaml"
echo "test_gateway: all checks passed"
