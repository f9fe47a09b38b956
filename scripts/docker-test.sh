#!/usr/bin/env bash
# docker-test.sh — builds the attnd image with podman and tests it for real (make docker-test):
# one container (health check, self/cross attention, a 4xx error, env + mounted model, clean
# SIGTERM stop), then docker/compose.yaml (3 replicas r1..r3 behind nginx, each with its own
# session volume: load spreads; 10 sequences stream through the gateway (6 on demo, 4 on the
# two-layer group of tests/fixtures/ckpt/llama_gqa) while the replica holding most of them is
# restarted (SIGTERM: it writes its sessions to its volume; started again, it reads them back;
# nginx is reloaded for the container's new address) and every one, the other replicas'
# included, continues equal to its one-shot causal answer, by
# tests/scripts/gateway_restart.py; 30 sessions streamed through the gateway each equal their
# one-shot causal answer, and when one replica stops its sessions answer 410
# session_replica_gone while the others go on, by tests/scripts/gateway_sessions.py; stopping
# another replica under load loses no stateless request). Needs root, apt and the Debian
# mirror; no registry.
#
# No container registry is reachable, so debian:bookworm-slim is made here with debootstrap from
# the mirror apt already uses and cached as a tarball in $ATTND_DOCKER_CACHE.
# Env: ATTND_DOCKER_CACHE (default /var/cache/attnd-docker); ATTND_DOCKER_KEEP=1 keeps the built
# images and build cache (warm rebuilds take seconds); ATTND_DOCKER_STEPS="tools base build
# single compose" runs a subset.
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
CACHE=${ATTND_DOCKER_CACHE:-/var/cache/attnd-docker}
KEEP=${ATTND_DOCKER_KEEP:-0}
STEPS=${ATTND_DOCKER_STEPS:-tools base build single compose}
BASE_TAR=$CACHE/debian-bookworm-minbase.tar
BASE_IMAGE=localhost/debian:bookworm-slim
RUN_ID=attnd-dt-$$
IMAGE=localhost/attnd:$RUN_ID
NGINX_IMAGE=localhost/attnd-nginx:$RUN_ID
PROJECT=attnddt$$
WORK=$(mktemp -d /tmp/attnd-docker-test.XXXXXX)
T0=$(date +%s%N)
timings=()

log() { printf '[docker-test %5.1fs] %s\n' "$(elapsed_s "$T0")" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
elapsed_s() { local now; now=$(date +%s%N); echo "$(( (now - $1) / 1000000 ))" | awk '{printf "%.1f", $1/1000}'; }
wants() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# Container ulimits = this machine's hard limits. runc cannot raise a limit above what podman
# itself runs with, and podman caps its own nproc at kernel.pid_max (32768 on many VMs, below
# `ulimit -Hu`): ask for more and every container fails "error setting rlimit type 6".
NOFILE=$(ulimit -Hn)
NPROC=$(ulimit -Hu)
PID_MAX=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo "$NPROC")
[ "$NPROC" = unlimited ] || [ "$NPROC" -gt "$PID_MAX" ] && NPROC=$PID_MAX
[ "$NOFILE" != unlimited ] || NOFILE=$(cat /proc/sys/fs/nr_open)
write_containers_conf() {
    sed -e "s/@NOFILE@/$NOFILE/g" -e "s/@NPROC@/$NPROC/g" docker/containers.conf >"$WORK/containers.conf"
    export CONTAINERS_CONF=$WORK/containers.conf
}
write_containers_conf   # also when the "tools" step is skipped

# run_step NAME FUNCTION: times one step and records it for the summary.
run_step() {
    wants "$1" || { log "skip step $1"; return 0; }
    local s; s=$(date +%s%N)
    log "== step $1"
    "$2"
    timings+=("$(printf '%-8s %6ss' "$1" "$(elapsed_s "$s")")")
}

# ---- cleanup: whatever happens, nothing of this run is left behind -----------------------
cleanup() {
    local rc=$?
    set +e
    if command -v podman >/dev/null 2>&1; then
        if [ -n "${COMPOSE_UP:-}" ]; then
            podman-compose -p "$PROJECT" -f docker/compose.yaml down -t 5 >"$WORK/down.log" 2>&1
        fi
        podman ps -aq --filter "label=io.podman.compose.project=$PROJECT" | xargs -r podman rm -f -v -t 0 >/dev/null 2>&1
        podman ps -aq --filter "name=^$RUN_ID" | xargs -r podman rm -f -v -t 0 >/dev/null 2>&1
        podman pod ls -q --filter "label=io.podman.compose.project=$PROJECT" | xargs -r podman pod rm -f >/dev/null 2>&1
        podman network ls -q --filter "label=io.podman.compose.project=$PROJECT" | xargs -r podman network rm -f >/dev/null 2>&1
        # The replicas' session volumes (compose names them PROJECT_sessions-rN).
        podman volume ls --format '{{.Name}}' | grep "^${PROJECT}_" | xargs -r podman volume rm -f >/dev/null 2>&1
        if [ "$KEEP" != 1 ]; then
            podman rmi -f "$IMAGE" "$NGINX_IMAGE" >/dev/null 2>&1
            # Intermediate images of the multi-stage build (the build stage, layer cache).
            podman image prune -f >/dev/null 2>&1
        else
            log "kept images $IMAGE $NGINX_IMAGE (ATTND_DOCKER_KEEP=1)"
        fi
    fi
    rm -rf "$WORK"
    if [ ${#timings[@]} -gt 0 ]; then
        printf '[docker-test] timings:\n' >&2
        printf '  %s\n' "${timings[@]}" >&2
    fi
    [ $rc -eq 0 ] && log "docker-test: OK" || log "docker-test: FAILED (exit $rc)"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" -eq 0 ] || die "run as root (podman, debootstrap and apt need it)"

# ---- 1. tools -------------------------------------------------------------------------------
step_tools() {
    # iptables: netavark (podman's network backend) runs it to set up every container
    # network, and without it `podman run -p` fails with "netavark: No such file or directory
    # (os error 2)"; Debian's podman only Suggests it, so --no-install-recommends leaves it out.
    local need=(podman runc podman-compose debootstrap netavark aardvark-dns iptables curl jq
                python3 debian-archive-keyring) missing=() p
    for p in "${need[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends "${missing[@]}" >"$WORK/apt.log" 2>&1 ||
            { tail -n 20 "$WORK/apt.log" >&2; die "apt-get install failed"; }
    fi
    write_containers_conf
    podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.NetworkBackend}} cgroup {{.Host.CgroupsVersion}}' \
        >"$WORK/info" 2>&1 || { cat "$WORK/info" >&2; die "podman info failed"; }
    log "podman $(podman version --format '{{.Client.Version}}'): $(cat "$WORK/info")"
}

# ---- 2. base image --------------------------------------------------------------------------
# debian_mirror SUITE: the first deb URI apt uses for SUITE (one-line or deb822 sources).
debian_mirror() {
    local suite=$1 f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk -v s="$suite" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++;
             if ($2 ~ /^\[/) i++; if ($(i+1) == s) { print $i; exit } }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v s="$suite" 'function flush() { if (deb && en && uri != "" && (" " suites " ") ~ (" " s " ")) { print uri; exit }
                                             deb = 0; en = 1; uri = ""; suites = "" }
            BEGIN { en = 1 }
            /^[ \t]*$/ { flush(); next }
            /^Types:/ { deb = ($0 ~ /[: ]deb( |$)/) }
            /^URIs:/ { uri = $2 }
            /^Suites:/ { $1 = ""; suites = $0 }
            /^Enabled:/ { en = ($2 != "no") }
            END { flush() }' "$f"
    done
}

# make_base_tarball: debootstrap --variant=minbase, trimmed as the official -slim image is.
make_base_tarball() {
    local mirror security root=$CACHE/rootfs.$$
    mirror=$(debian_mirror bookworm | head -n 1)
    [ -n "$mirror" ] || die "no Debian bookworm mirror found in /etc/apt/sources.list{,.d}"
    security=$(debian_mirror bookworm-security | head -n 1)
    log "debootstrap --variant=minbase bookworm from the apt mirror (first run only; ~1-3 min)"
    mkdir -p "$CACHE"
    rm -rf "$root"
    debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
        bookworm "$root" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
        { tail -n 30 "$WORK/debootstrap.log" >&2; rm -rf "$root"; die "debootstrap failed"; }
    {
        echo "deb $mirror bookworm main"
        echo "deb $mirror bookworm-updates main"
        [ -z "$security" ] || echo "deb $security bookworm-security main"
    } >"$root/etc/apt/sources.list"
    # What debuerreotype's "slimify" does for the official image: no docs, man pages or
    # locales, and apt that never keeps package caches or lists.
    cat >"$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
    cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
APT::Install-Recommends "false";
EOF
    find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$root"/usr/share/{man,groff,info,lintian,linda}/*
    find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
    rm -f "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old "$root"/etc/hostname
    find "$root/var/log" -type f -delete
    : >"$root/etc/resolv.conf"
    tar --numeric-owner --xattrs -C "$root" -cf "$BASE_TAR.tmp" .
    mv "$BASE_TAR.tmp" "$BASE_TAR"
    rm -rf "$root"
    log "cached $BASE_TAR ($(du -h "$BASE_TAR" | cut -f1))"
}

step_base() {
    [ -s "$BASE_TAR" ] || make_base_tarball
    if ! podman image exists "$BASE_IMAGE" ||
       [ "$(podman image inspect --format '{{index .Labels "attnd.base.tar.mtime"}}' "$BASE_IMAGE" 2>/dev/null)" \
         != "$(stat -c %Y "$BASE_TAR")" ]; then
        log "podman import $BASE_TAR as $BASE_IMAGE"
        podman import -q --change 'CMD ["bash"]' \
            --change "LABEL attnd.base.tar.mtime=$(stat -c %Y "$BASE_TAR")" \
            "$BASE_TAR" "$BASE_IMAGE" >/dev/null
    fi
    # FROM debian:bookworm-slim resolves to a local image under either name; never pulled.
    podman tag "$BASE_IMAGE" docker.io/library/debian:bookworm-slim
}

# ---- 3. build -------------------------------------------------------------------------------
step_build() {
    local s; s=$(date +%s%N)
    for f in config/attnd.json config/demo.safetensors; do
        [ -f "$f" ] || die "$f is missing (the image ships it)"
    done
    # --network=host: the RUN steps reach the Debian mirror exactly as the host does.
    # --ulimit: buildah ignores containers.conf's default_ulimits, and its own nproc default
    # is above the hard limit of many VMs (runc: "error setting rlimit type 6").
    BUILD_OPTS=(--pull=never --format docker --network=host
                --ulimit "nofile=$NOFILE:$NOFILE" --ulimit "nproc=$NPROC:$NPROC")
    podman build "${BUILD_OPTS[@]}" -f docker/Dockerfile -t "$IMAGE" . \
        >"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log" >&2; die "podman build failed"; }
    log "attnd image built in $(elapsed_s "$s")s, size $(image_size "$IMAGE")"
    s=$(date +%s%N)
    podman build "${BUILD_OPTS[@]}" -f docker/nginx.Dockerfile \
        -t "$NGINX_IMAGE" docker >"$WORK/build-nginx.log" 2>&1 ||
        { tail -n 40 "$WORK/build-nginx.log" >&2; die "podman build (nginx) failed"; }
    log "nginx image built in $(elapsed_s "$s")s, size $(image_size "$NGINX_IMAGE")"
}
image_size() { podman image inspect --format '{{.Size}}' "$1" | awk '{printf "%.1f MB", $1/1e6}'; }

# ---- 4. one container -----------------------------------------------------------------------
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# http METHOD URL [BODY]: prints "STATUS" on line 1, then the body; headers to $WORK/headers.
http() {
    local out=$WORK/body status
    status=$(curl -sS -m 10 -o "$out" -D "$WORK/headers" -w '%{http_code}' -X "$1" \
             ${3:+-H 'Content-Type: application/json' --data-binary "$3"} "$2") || status=000
    echo "$status"; cat "$out" 2>/dev/null; echo
}

# expect_json DESCRIPTION STATUS JQ-FILTER METHOD URL [BODY]: the answer has STATUS and a body
# for which JQ-FILTER is true.
expect_json() {
    local what=$1 want=$2 filter=$3 resp status body; shift 3
    resp=$(http "$@"); status=$(head -n 1 <<<"$resp"); body=$(tail -n +2 <<<"$resp")
    [ "$status" = "$want" ] || die "$what: HTTP $status, expected $want; body: ${body:0:300}"
    jq -e "$filter" >/dev/null 2>&1 <<<"$body" ||
        die "$what: body fails check '$filter': ${body:0:300}"
    log "ok: $what"
}

wait_healthy() {
    local name=$1 deadline=$((SECONDS + ${2:-40}))
    while [ $SECONDS -lt $deadline ]; do
        if [ "$(podman inspect --format '{{.State.Status}}' "$name" 2>/dev/null)" != running ]; then
            podman logs "$name" 2>&1 | tail -n 20 >&2; die "$name exited"
        fi
        podman healthcheck run "$name" >/dev/null 2>&1 && return 0
        sleep 0.3
    done
    podman logs "$name" 2>&1 | tail -n 20 >&2
    die "$name not healthy within ${2:-40}s"
}

# rows N E SEED: a JSON N×E matrix of small deterministic numbers.
rows() { python3 -c 'import sys, json; n, e, s = map(int, sys.argv[1:])
print(json.dumps([[round(((i * 31 + j * 7 + s) % 17 - 8) / 8.0, 4) for j in range(e)] for i in range(n)]))' "$@"; }

step_single() {
    local port name=$RUN_ID-single port2 name2=$RUN_ID-env q k bad s
    port=$(free_port)
    # (Without systemd, podman logs that it cannot add a health-check timer: harmless here,
    # `podman healthcheck run` below runs the check itself.)
    podman run -d --name "$name" --read-only -p "127.0.0.1:$port:8080" "$IMAGE" \
        >/dev/null 2>"$WORK/run.err" || { cat "$WORK/run.err" >&2; die "podman run failed"; }
    wait_healthy "$name"
    log "container healthy (podman healthcheck run) on 127.0.0.1:$port"
    local base=http://127.0.0.1:$port
    [ "$(podman exec "$name" id -u)" != 0 ] || die "container runs as root"

    q=$(rows 5 64 1); k=$(rows 7 64 2); bad=$(rows 2 63 3)
    expect_json "GET /healthz" 200 '.status == "ok"' GET "$base/healthz"
    expect_json "GET /readyz" 200 '.status == "ready"' GET "$base/readyz"
    expect_json "GET /v1/models lists demo" 200 '[.models[] | select(.name == "demo")] | length == 1' \
        GET "$base/v1/models"
    expect_json "self-attention 5x64 -> 5x64" 200 \
        '.model == "demo" and (.output | length == 5 and all(length == 64)) and
         ([.output[][] | select(isinfinite or isnan)] | length == 0)' \
        POST "$base/v1/models/demo/attention" "{\"query\": $q}"
    expect_json "cross-attention 5x64 over 7 keys, weights rows sum to 1" 200 \
        '(.output | length == 5 and all(length == 64)) and (.weights | length == 5) and
         all(.weights[]; length == 7 and ((add - 1) | fabs) < 1e-4)' \
        POST "$base/v1/models/demo/attention" "{\"query\": $q, \"key\": $k, \"need_weights\": true}"
    expect_json "63-wide query -> 400 invalid_shape JSON" 400 '.error.code == "invalid_shape"' \
        POST "$base/v1/models/demo/attention" "{\"query\": $bad}"
    grep -qi '^content-type: application/json' "$WORK/headers" || die "error answer is not JSON"
    expect_json "unknown model -> 404 JSON" 404 '.error.code == "model_not_found"' \
        POST "$base/v1/models/nope/attention" "{\"query\": $q}"
    local metrics; metrics=$(curl -sf -m 5 "$base/metrics") || die "GET /metrics failed"
    grep -q '^# TYPE attnd_' <<<"$metrics" || die "/metrics is not Prometheus text: ${metrics:0:200}"
    log "ok: /metrics is Prometheus text"

    # Models from a mounted volume, named through the environment.
    port2=$(free_port)
    podman run -d --name "$name2" --read-only -p "127.0.0.1:$port2:8080" \
        -v "$REPO/config:/models:ro" -e ATTND_MODELS="mounted=/models/demo.safetensors" \
        "$IMAGE" >/dev/null 2>"$WORK/run.err" || { cat "$WORK/run.err" >&2; die "podman run failed"; }
    wait_healthy "$name2"
    expect_json "ATTND_MODELS + /models volume serves 'mounted'" 200 \
        '[.models[].name] == ["mounted"]' GET "http://127.0.0.1:$port2/v1/models"

    # SIGTERM to PID 1 drains and exits 0, well inside the stop timeout.
    s=$(date +%s%N)
    podman stop -t 20 "$name" >/dev/null 2>"$WORK/podman.err" || { cat "$WORK/podman.err" >&2; die "podman stop failed"; }
    local code; code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
    [ "$code" = 0 ] || { podman logs "$name" 2>&1 | tail -n 20 >&2; die "attnd exited $code on SIGTERM"; }
    log "ok: SIGTERM -> exit 0 in $(elapsed_s "$s")s"
    podman rm -f -v -t 0 "$name" "$name2" >/dev/null 2>&1
}

# ---- 5. compose -----------------------------------------------------------------------------
# replica_container NAME: the container of compose service attnd-NAME.
replica_container() { podman ps -a --format '{{.Names}}' --filter "label=io.podman.compose.project=$PROJECT" \
    --filter "label=com.docker.compose.service=attnd-$1"; }

step_compose() {
    local port s q; port=$(free_port)
    COMPOSE_UP=1
    # The models: demo, and the llama_gqa fixture as a group (llama, layers llama.0 and
    # llama.1) for sequence sessions; world-readable for the container's user.
    mkdir -p "$WORK/models"
    cp config/demo.safetensors "$WORK/models/"
    cp -r tests/fixtures/ckpt/llama_gqa "$WORK/models/"
    chmod -R a+rX "$WORK/models"
    export ATTND_IMAGE=$IMAGE NGINX_IMAGE ATTND_HTTP_PORT=$port ATTND_MODELS_DIR=$WORK/models
    export ATTND_MODELS="demo=/models/demo.safetensors;llama=/models/llama_gqa,layers=all"
    podman-compose -p "$PROJECT" -f docker/compose.yaml up -d >"$WORK/compose.log" 2>&1 ||
        { tail -n 40 "$WORK/compose.log" >&2; die "podman-compose up failed"; }
    local names r; names=$(for r in r1 r2 r3; do replica_container "$r"; done)
    [ "$(wc -w <<<"$names")" = 3 ] || die "expected 3 attnd replicas (attnd-r1..r3), got: $names"
    for n in $names; do wait_healthy "$n"; done
    local base=http://127.0.0.1:$port deadline=$((SECONDS + 20))
    until curl -sf -m 2 "$base/readyz" >/dev/null; do
        [ $SECONDS -lt $deadline ] || { podman logs "${PROJECT}_nginx_1" 2>&1 | tail >&2; die "nginx not answering"; }
        sleep 0.3
    done
    log "stack up: 3 replicas healthy, nginx on 127.0.0.1:$port"

    # Spread: 60 requests through nginx must reach more than one replica.
    q=$(rows 3 64 4)
    printf '{"query": %s}' "$q" >"$WORK/req.json"
    fire "$base" 60 1 "$WORK/spread"
    check_all_ok "$WORK/spread" 60
    local spread; spread=$(per_upstream "$WORK/spread")
    log "spread over replicas: $spread"
    [ "$(awk -F', ' '{print NF}' <<<"$spread")" -ge 2 ] || die "all requests reached one replica"

    restart_replica_test "$base"

    # Sessions: 30 streams through the gateway, each step equal to the one-shot causal answer;
    # then replica r2 stops (SIGTERM, drain): its sessions answer 410 session_replica_gone, the
    # others finish their streams unharmed.
    s=$(date +%s%N)
    timeout 300 /usr/bin/python3 tests/scripts/gateway_sessions.py --base "$base" --sessions 30 \
        --replicas r1,r2,r3 --victim r2 \
        --stop-cmd "podman stop -t 20 $(replica_container r2) >/dev/null" >&2 ||
        die "sessions through the gateway (tests/scripts/gateway_sessions.py) failed"
    local code; code=$(podman inspect --format '{{.State.ExitCode}}' "$(replica_container r2)")
    [ "$code" = 0 ] || die "attnd-r2 exited $code on SIGTERM (expected a clean drain)"
    log "ok: 30 sessions through the gateway, r2 stopped: its sessions 410, the rest equal one-shot ($(elapsed_s "$s")s)"

    # Stop another replica while 200 requests run (4 clients x 50); every request must
    # succeed on the one left.
    local victim; victim=$(replica_container r3)
    fire "$base" 50 4 "$WORK/stop" &
    local loader=$!
    sleep 0.5
    s=$(date +%s%N)
    podman stop -t 20 "$victim" >/dev/null 2>"$WORK/podman.err" || { cat "$WORK/podman.err" >&2; die "podman stop failed"; }
    code=$(podman inspect --format '{{.State.ExitCode}}' "$victim")
    [ "$code" = 0 ] || die "$victim exited $code on SIGTERM (expected a clean drain)"
    log "stopped $victim in $(elapsed_s "$s")s, exit 0"
    wait "$loader"
    check_all_ok "$WORK/stop" 200
    log "ok: 200/200 requests answered 200 while $victim stopped; per replica: $(per_upstream "$WORK/stop"); retried by nginx: $(retried "$WORK/stop")"
}

# restart_replica_test BASE: 10 sequences through the gateway, the replica holding most of them
# restarted in the middle; every sequence continues equal to its one-shot answer
# (tests/scripts/gateway_restart.py). Then the replica's own log: it saved and restored them.
restart_replica_test() {
    local base=$1 s sum=$WORK/restart.json; s=$(date +%s%N)
    # $WORK/replica stop|start NAME: what `podman-compose restart attnd-NAME` does, in two
    # halves: SIGTERM (and exit 0 required), then the same container started again (same
    # name, same session volume) -- on a new address (podman hands out another IP at each
    # start), so the gateway is then reloaded: nginx resolves the replicas' names only when it
    # (re)loads its configuration. A reload is graceful: requests in flight finish on the old
    # workers, which still know only the old address; "start" returns once they are gone.
    cat >"$WORK/replica" <<'EOF'
#!/bin/bash
set -eu
service() { podman ps -a --format '{{.Names}}' --filter "label=com.docker.compose.service=$1" \
                --filter "label=io.podman.compose.project=$ATTND_DT_PROJECT"; }
c=$(service "attnd-$2")
[ -n "$c" ] || { echo "no container for replica $2" >&2; exit 1; }
case $1 in
    stop)  podman stop -t 30 "$c" >/dev/null
           code=$(podman inspect --format '{{.State.ExitCode}}' "$c")
           [ "$code" = 0 ] || { echo "$c exited $code on SIGTERM" >&2; exit 1; } ;;
    start) podman start "$c" >/dev/null
           n=$(service nginx)
           workers() { podman exec "$n" sh -c 'for p in /proc/[0-9]*; do
               tr "\0" " " <"$p/cmdline" 2>/dev/null | grep -q "^nginx: worker" && echo "${p#/proc/}"; done; true'; }
           old=$(workers)
           [ -n "$old" ] || { echo "no nginx worker found in $n" >&2; exit 1; }
           podman exec "$n" nginx -s reload
           for _ in $(seq 150); do
               left=$(podman exec "$n" sh -c "for p in $(echo $old); do [ -d /proc/\$p ] && echo \$p; done; true")
               [ -n "$left" ] || exit 0
               sleep 0.1
           done
           echo "the gateway's old workers ($left) did not exit within 15 s of the reload" >&2; exit 1 ;;
esac
EOF
    chmod +x "$WORK/replica"
    ATTND_DT_PROJECT=$PROJECT timeout 240 /usr/bin/python3 tests/scripts/gateway_restart.py \
        --base "$base" --replicas r1,r2,r3 --sequences 10 --model demo --group llama \
        --group-sequences 4 --stop-cmd "$WORK/replica stop {name}" \
        --start-cmd "$WORK/replica start {name}" --summary "$sum" >&2 ||
        die "sequences across a replica restart (tests/scripts/gateway_restart.py) failed"
    local victim n c logs saved restored t0 t1
    victim=$(jq -r .victim "$sum"); n=$(jq -r .victim_sequences "$sum")
    c=$(replica_container "$victim")
    logs=$(podman logs "$c" 2>&1)
    # The replica's own account: what it wrote at the stop, what it read back at the start.
    [ "$(grep -c 'restored [0-9]* session(s)' <<<"$logs")" = 2 ] ||
        die "attnd-$victim: expected two start-ups in its log, before and after the restart"
    saved=$(grep -o 'saved [0-9]* session(s).*' <<<"$logs" | tail -n 1)
    restored=$(grep -o 'restored [0-9]* session(s).*' <<<"$logs" | tail -n 1)
    [[ $saved == "saved $n session(s)"* ]] || die "attnd-$victim: '$saved', expected $n session(s)"
    [[ $restored == "restored $n session(s), skipped 0"* ]] ||
        die "attnd-$victim: '$restored', expected $n session(s), skipped 0"
    # Its second start-up by its log's timestamps: "starting" to "ready: serving".
    t0=$(grep ' attnd .* starting' <<<"$logs" | tail -n 1 | cut -d' ' -f1)
    t1=$(grep ' ready: serving' <<<"$logs" | tail -n 1 | cut -d' ' -f1)
    log "restart of attnd-$victim, holding $n of the sequences ($(jq -r .victim_group_sequences "$sum") on llama):" \
        "stop (drain + save) $(jq -r .stop_s "$sum")s, $saved;" \
        "start to ready $(( ($(date -d "$t1" +%s%N) - $(date -d "$t0" +%s%N)) / 1000000 )) ms by its log, $restored;" \
        "its sequences answered through the gateway $(jq -r .ready_after_start_s "$sum")s after podman start;" \
        "$(jq -r .appends_during_restart "$sum") appends to the other replicas meanwhile"
    log "ok: 10 sequences through the gateway, attnd-$victim restarted: every one continued" \
        "equal to its one-shot answer, max |diff| $(jq -r .max_diff "$sum") ($(elapsed_s "$s")s)"
}

# fire BASE N CLIENTS OUT: CLIENTS parallel loops of N POSTs; one "status upstream" line each.
fire() {
    local base=$1 n=$2 c=$3 out=$4 i
    : >"$out"
    for i in $(seq "$c"); do
        (for _ in $(seq "$n"); do
            curl -s -m 20 -o /dev/null -w '%{http_code} %header{x-upstream-addr}\n' \
                -H 'Content-Type: application/json' --data-binary @"$WORK/req.json" \
                "$base/v1/models/demo/attention" || echo "000 -"
         done >"$out.client$i") &
    done
    wait
    cat "$out".client* >"$out"
}
check_all_ok() {
    local got ok; got=$(wc -l <"$1"); ok=$(grep -c '^200 ' "$1" || true)
    [ "$got" = "$2" ] && [ "$ok" = "$2" ] ||
        die "$ok of $2 requests answered 200 (got $got answers): $(grep -v '^200 ' "$1" | sort | uniq -c | head)"
}
# per_upstream FILE: "count address" for the replica that finally answered each request.
per_upstream() { awk '{sub(/^[0-9]+ /, ""); n = split($0, a, ", "); print a[n]}' "$1" |
                 sort | uniq -c | sort -rn | awk '{printf "%s%s x%s", sep, $2, $1; sep = ", "} END {print ""}'; }
# retried FILE: how many requests nginx passed to more than one replica.
retried() { grep -c ', ' "$1" || true; }

run_step tools step_tools
run_step base step_base
run_step build step_build
run_step single step_single
run_step compose step_compose
