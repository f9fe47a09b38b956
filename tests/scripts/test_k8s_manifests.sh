#!/usr/bin/env bash
# test_k8s_manifests.sh — offline checks of the deployment files: docker/k8s/*.yaml (fields a
# cluster needs and that must agree with each other and with the image: the StatefulSet, its
# headless Service and replica names, the gateway's routing), docker/compose.yaml,
# docker/nginx.conf, the ConfigMap's attnd.json against the real daemon's config parser, and
# the gateway's nginx template rendered and checked by nginx -t. No kubeconform/kubeval in
# Debian 12 (and kubectl --dry-run needs a cluster), so this checks what matters with PyYAML.
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=/usr/bin/python3
"$PY" -c 'import yaml' 2>/dev/null || { echo "FAIL: $PY has no yaml module (apt install python3-yaml)"; exit 1; }
ATTND_BIN=${ATTND_BIN:-${BUILD:-build}/attnd}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$PY" - "$tmp" <<'EOF'
import glob, json, os, re, sys, yaml

tmp = sys.argv[1]
failures = []
def check(cond, what):
    if not cond:
        failures.append(what)
    return cond

def get(d, path, default=None):
    for k in path.split("."):
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d

# ---- parse every manifest; index by (kind, name)
docs = {}
for path in sorted(glob.glob("docker/k8s/*.yaml")):
    for doc in yaml.safe_load_all(open(path)):
        if doc is None:
            continue
        key = (doc.get("kind"), get(doc, "metadata.name"))
        where = f"{path}:{key[0]}/{key[1]}"
        check(isinstance(doc.get("apiVersion"), str), f"{where}: apiVersion")
        check(isinstance(key[1], str), f"{where}: metadata.name")
        check(key not in docs, f"{where}: appears twice")
        docs[key] = doc
want = [("StatefulSet", "attnd"), ("Service", "attnd"), ("Service", "attnd-replicas"),
        ("HorizontalPodAutoscaler", "attnd"), ("ConfigMap", "attnd-config"),
        ("Deployment", "attnd-gateway"), ("ConfigMap", "attnd-gateway"), ("Service", "attnd-gateway")]
for k in want:
    check(k in docs, f"missing {k[0]} {k[1]}")
if failures:
    print("\n".join("FAIL: " + f for f in failures)); sys.exit(1)

dep, svc, headless, hpa, cm, gw, gwcm, gwsvc = (docs[k] for k in want[:2] + want[2:3] + want[3:])
check(dep["apiVersion"] == "apps/v1", "StatefulSet apiVersion apps/v1")
check(hpa["apiVersion"] == "autoscaling/v2", "HPA apiVersion autoscaling/v2")

# ---- StatefulSet
spec, pod = dep["spec"], get(dep, "spec.template.spec")
labels = get(dep, "spec.template.metadata.labels", {})
sel = get(spec, "selector.matchLabels", {})
check(sel and all(labels.get(k) == v for k, v in sel.items()), "StatefulSet selector matches pod labels")
ctrs = pod.get("containers", [])
check(len(ctrs) == 1, "one container")
c = ctrs[0]
ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
check(8080 in ports.values(), "containerPort 8080 (the image's EXPOSE)")
def port_of(p):
    return ports.get(p) if isinstance(p, str) else p
for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
    hg = get(c, probe + ".httpGet", {})
    check(hg.get("path") == path, f"{probe} GET {path}")
    check(port_of(hg.get("port")) == 8080, f"{probe} port is the container's 8080")
for kind in ("requests", "limits"):
    for res in ("cpu", "memory"):
        check(get(c, f"resources.{kind}.{res}") is not None, f"resources.{kind}.{res}")
psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
check(psc.get("runAsNonRoot") is True or csc.get("runAsNonRoot") is True, "runAsNonRoot")
uid = csc.get("runAsUser", psc.get("runAsUser"))
check(isinstance(uid, int) and uid != 0, "runAsUser set and not 0")
check(csc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem")
check(csc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation false")
check("ALL" in get(csc, "capabilities.drop", []), "capabilities drop ALL")
ann = get(dep, "spec.template.metadata.annotations", {})
check(ann.get("prometheus.io/scrape") == "true", "prometheus.io/scrape \"true\" (a string)")
check(ann.get("prometheus.io/path") == "/metrics", "prometheus.io/path /metrics")
check(str(ann.get("prometheus.io/port")) in {str(v) for v in ports.values()}, "prometheus.io/port is a container port")
# Grace period covers preStop plus a drain of at least 10 s.
grace = pod.get("terminationGracePeriodSeconds")
pre = get(c, "lifecycle.preStop.exec.command", [])
pre_s = int(pre[1]) if len(pre) == 2 and pre[0] == "sleep" else 0
check(isinstance(grace, int) and grace >= pre_s + 10, f"terminationGracePeriodSeconds ({grace}) >= preStop ({pre_s}) + 10")
# The --config file is the ConfigMap's key, mounted where the args say.
args = c.get("args", [])
check("--config" in args, "args pass --config")
cfg_path = args[args.index("--config") + 1] if "--config" in args else ""
mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
vols = {v["name"]: v for v in pod.get("volumes", [])}
hit = [n for n, m in mounts.items() if cfg_path.startswith(m["mountPath"].rstrip("/") + "/")]
check(hit and get(vols.get(hit[0], {}), "configMap.name") == get(cm, "metadata.name"),
      f"--config {cfg_path} is inside the ConfigMap volume")
key = os.path.basename(cfg_path)
check(key in cm.get("data", {}), f"ConfigMap has key {key}")
check(any(m["mountPath"] == "/models" and m.get("readOnly") for m in mounts.values()), "/models mounted read-only")
check(any(m["mountPath"] == "/tmp" for m in mounts.values()), "/tmp writable (read-only root)")
claims = {get(t, "metadata.name"): t for t in spec.get("volumeClaimTemplates", [])}
for n in mounts:
    check(n in vols or n in claims, f"volumeMount {n} has a volume or a volumeClaimTemplate")
# Sessions survive a restart: --session-dir on the pod's own claim (persist.c writes there).
cenv = {e["name"]: e for e in c.get("env", [])}
sdir = get(cenv, "ATTND_SESSION_DIR.value")
check(isinstance(sdir, str) and any(n in claims and sdir.startswith(m["mountPath"].rstrip("/") + "/")
                                    for n, m in mounts.items()),
      "ATTND_SESSION_DIR lies on a volumeClaimTemplate's mount")
for n, t in claims.items():
    check(get(t, "spec.resources.requests.storage") is not None, f"claim {n} requests storage")
    check("ReadWriteOnce" in get(t, "spec.accessModes", []), f"claim {n} is ReadWriteOnce")

# Replica names: each pod's own name (a DNS label, the gateway's host name for it).
env = {e["name"]: e for e in c.get("env", [])}
check(get(env.get("ATTND_REPLICA_NAME", {}), "valueFrom.fieldRef.fieldPath") == "metadata.name",
      "ATTND_REPLICA_NAME is the pod name (downward API)")
check(get(spec, "replicas", 0) >= 2, "StatefulSet has several replicas")

# ---- Services (ClusterIP and headless) and HPA point at the StatefulSet
for s_ in (svc, headless):
    n_ = get(s_, "metadata.name")
    check(all(labels.get(k) == v for k, v in get(s_, "spec.selector", {}).items()) and get(s_, "spec.selector"),
          f"Service {n_} selector matches pod labels")
    for p in get(s_, "spec.ports", []):
        check(port_of(p.get("targetPort")) == 8080, f"Service {n_} targetPort {p.get('targetPort')} is 8080")
check(get(headless, "spec.clusterIP") == "None", "attnd-replicas is headless (clusterIP: None)")
check(spec.get("serviceName") == get(headless, "metadata.name"), "StatefulSet serviceName is the headless Service")
check(get(headless, "metadata.labels", {}).get("app.kubernetes.io/name") != "attnd",
      "the headless Service is not labelled like service.yaml's (the ServiceMonitor would scrape twice)")
ref = get(hpa, "spec.scaleTargetRef", {})
check(ref.get("kind") == "StatefulSet" and ref.get("name") == get(dep, "metadata.name"), "HPA targets the StatefulSet")
check(1 <= get(hpa, "spec.minReplicas", 1) <= get(hpa, "spec.maxReplicas", 0), "HPA 1 <= min <= max")
check(get(hpa, "spec.metrics"), "HPA has metrics")

# ---- the gateway: nginx template routing sessions to <pod>.<headless service>
tpl = gwcm.get("data", {}).get("attnd.conf.template", "")
open(os.path.join(tmp, "gateway.conf.template"), "w").write(tpl)
gc = get(gw, "spec.template.spec.containers", [{}])[0]
genv = {e["name"]: e for e in gc.get("env", [])}
used = set(re.findall(r"\$\{([A-Z_]+)\}", tpl))
filt = re.compile(genv.get("NGINX_ENVSUBST_FILTER", {}).get("value", "^$"))
for v in sorted(used):
    check(v in genv, f"gateway template's ${{{v}}} is set in the Deployment's env")
    check(filt.search(v), f"NGINX_ENVSUBST_FILTER lets ${{{v}}} through")
check(get(genv.get("POD_NAMESPACE", {}), "valueFrom.fieldRef.fieldPath") == "metadata.namespace",
      "POD_NAMESPACE from the downward API")
hs = get(headless, "metadata.name")
check(re.search(r"proxy_pass\s+http://\$attnd_replica\." + re.escape(hs) + r"\.\$\{POD_NAMESPACE\}\.svc\.", tpl),
      "sessions proxied to $attnd_replica.<headless service>.<namespace>.svc")
check(re.search(r"server\s+" + re.escape(get(svc, "metadata.name")) + r"\.\$\{POD_NAMESPACE\}\.svc\.", tpl),
      "stateless calls to the ClusterIP Service")
check(re.search(r"^\s*resolver\s", tpl, re.M), "the gateway has a resolver (names resolved per request)")
check("session_replica_gone" in tpl and re.search(r"return 410", tpl), "gateway answers 410 session_replica_gone")
gmounts = {m["mountPath"]: m["name"] for m in gc.get("volumeMounts", [])}
gvols = {v["name"]: v for v in get(gw, "spec.template.spec.volumes", [])}
check(get(gvols.get(gmounts.get("/etc/nginx/templates"), {}), "configMap.name") == get(gwcm, "metadata.name"),
      "the template ConfigMap is mounted at /etc/nginx/templates")
check(gmounts.get("/etc/nginx/conf.d") in gvols, "/etc/nginx/conf.d writable (the rendered config)")
gl = get(gw, "spec.template.metadata.labels", {})
check(get(gwsvc, "spec.selector") and all(gl.get(k) == v for k, v in get(gwsvc, "spec.selector", {}).items()),
      "attnd-gateway Service selects the gateway pods")

# ---- ConfigMap's attnd.json is JSON (the daemon parses it below)
try:
    cfg = json.loads(cm["data"][key])
    open(os.path.join(tmp, "attnd.json"), "w").write(cm["data"][key])
    check(isinstance(cfg.get("models"), list) and cfg["models"], "ConfigMap config names a model")
except Exception as e:
    check(False, f"ConfigMap {key} is not JSON: {e}")

# ---- Dockerfile agrees: non-root uid, port, health check, entrypoint
df = open("docker/Dockerfile").read()
m = re.search(r"^USER (\d+)", df, re.M)
check(m and int(m.group(1)) == uid, "Dockerfile USER uid = runAsUser")
check(re.search(r"^EXPOSE 8080$", df, re.M), "Dockerfile EXPOSE 8080")
check(re.search(r"^HEALTHCHECK ", df, re.M), "Dockerfile HEALTHCHECK")
check(re.search(r"^FROM .* AS build$", df, re.M) and len(re.findall(r"^FROM ", df, re.M)) == 2, "Dockerfile: two stages")

# ---- compose.yaml
comp = yaml.safe_load(open("docker/compose.yaml"))
n = get(comp, "services.nginx", {})
ng = re.sub(r"#.*", "", open("docker/nginx.conf").read())
reps = {k: v for k, v in get(comp, "services", {}).items() if k.startswith("attnd-")}
check(sorted(reps) == ["attnd-r1", "attnd-r2", "attnd-r3"], f"compose: services attnd-r1..r3, got {sorted(reps)}")
for svc_name, a in reps.items():
    r = svc_name[len("attnd-"):]
    check(get(a, "environment.ATTND_REPLICA_NAME") == r, f"compose: {svc_name} has ATTND_REPLICA_NAME {r}")
    check(any(str(v).endswith(":/models:ro") for v in a.get("volumes", [])), f"compose: {svc_name} /models read-only")
    check(svc_name in n.get("depends_on", []), f"compose: nginx starts after {svc_name}")
    # nginx: the replica's own upstream, in the map, and in the stateless pool
    check(re.search(r"upstream\s+attnd_" + r + r"\s*\{\s*server\s+" + svc_name + r":8080", ng),
          f"nginx.conf: upstream attnd_{r} on {svc_name}:8080 alone")
    check(re.search(r"^\s*" + r + r"\s+attnd_" + r + ";", ng, re.M), f"nginx.conf: map {r} -> attnd_{r}")
    check(re.search(r"upstream\s+attnd_any\s*\{[^}]*server\s+" + svc_name + r":8080", ng),
          f"nginx.conf: {svc_name} in the stateless pool")
check(any("nginx.conf:/etc/nginx/nginx.conf" in str(v) for v in n.get("volumes", [])), "compose: nginx.conf mounted")
check(any(str(p).endswith(":8080") for p in n.get("ports", [])), "compose: nginx publishes 8080")
named = get(comp, "volumes", {}) or {}
for a in list(reps.values()) + [n]:
    for v in a.get("volumes", []):
        src = str(v).split(":")[0]
        if src.startswith("$"):
            continue
        if "/" in src or src.startswith("."):
            check(os.path.exists(os.path.join("docker", src)), f"compose: mount source {src} exists")
        else:
            check(src in named, f"compose: named volume {src} declared under the top-level volumes")
# --session-dir: each replica its own writable volume holding ATTND_SESSION_DIR (a replica's
# sessions are its own: their ids name it), like the StatefulSet's claim.
seen_vols = set()
for svc_name, a in reps.items():
    sd = str(get(a, "environment.ATTND_SESSION_DIR", ""))
    mounts = [str(v).split(":") for v in a.get("volumes", [])]
    own = [m for m in mounts if m[0] in named and len(m) >= 2 and sd.startswith(m[1].rstrip("/") + "/")
           and "ro" not in m[2:]]
    check(sd.startswith("/") and len(own) == 1,
          f"compose: {svc_name} ATTND_SESSION_DIR {sd!r} on a writable named volume of its own")
    for m in own:
        check(m[0] not in seen_vols, f"compose: {svc_name}'s session volume {m[0]} is no other replica's")
        seen_vols.add(m[0])
        check(re.search(r"install -d -o %d\b[^\n]*\s%s\b" % (uid, re.escape(m[1].rstrip("/"))), df),
              f"Dockerfile: {m[1]} exists, owned by uid {uid} (an empty named volume takes its owner)")

# ---- nginx.conf: the directives the scale-out relies on
for pat, what in (
                  (r"proxy_next_upstream\s+[^;]*\berror\b[^;]*\btimeout\b[^;]*\bhttp_503\b[^;]*\bnon_idempotent\b", "proxy_next_upstream error timeout http_503 non_idempotent"),
                  (r"proxy_next_upstream_tries\s+[2-9]", "retries > 1"),
                  (r"keepalive\s+\d+;", "upstream keepalive"),
                  (r"proxy_http_version\s+1\.1;", "HTTP/1.1 to upstreams (keepalive needs it)"),
                  (r'proxy_set_header\s+Connection\s+""', "Connection header cleared (keepalive)"),
                  (r"add_header\s+X-Upstream-Addr\s+\$upstream_addr\s+always", "X-Upstream-Addr header"),
                  (r"map\s+\$uri\s+\$attnd_replica", "the replica named in the session id, from the path"),
                  (r"return\s+410\s+\$attnd_gone_body", "410 when a session's replica is gone"),
                  (r"session_replica_gone", "error code session_replica_gone"),
                  (r"error_page\s+502\s*=\s*@upstream_failed", "nginx's 502 turned into JSON / 410")):
    check(re.search(pat, ng), f"nginx.conf: {what}")
check(ng.count("{") == ng.count("}"), "nginx.conf braces balance")

if failures:
    print("\n".join("FAIL: " + f for f in failures)); sys.exit(1)
print("manifests: all checks passed")
EOF

# The ConfigMap's config must be accepted by attnd's own parser.
[ -x "$ATTND_BIN" ] || { echo "FAIL: $ATTND_BIN not built (make all)"; exit 1; }
if ! out=$("$ATTND_BIN" --config "$tmp/attnd.json" --print-config 2>&1); then
    echo "FAIL: attnd rejects the ConfigMap's attnd.json:"; echo "$out"; exit 1
fi
echo "ok: attnd --print-config accepts the ConfigMap's attnd.json"

# The gateway's template as the nginx image's entrypoint renders it (envsubst of the filtered
# variables), inside a minimal http {} like the image's nginx.conf, must pass nginx -t. The
# Service and resolver names only resolve in a cluster: here they become 127.0.0.1.
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
[ -x "$NGINX" ] || { echo "FAIL: no nginx for nginx -t (apt install nginx-light)"; exit 1; }
command -v envsubst >/dev/null || { echo "FAIL: no envsubst (gettext-base)"; exit 1; }
mkdir -p "$tmp/prefix/logs"
POD_NAMESPACE=attnd-ns CLUSTER_DOMAIN=cluster.local RESOLVER=127.0.0.1 \
    envsubst '${POD_NAMESPACE} ${CLUSTER_DOMAIN} ${RESOLVER}' <"$tmp/gateway.conf.template" |
    sed 's/attnd\.attnd-ns\.svc\.cluster\.local:8080/127.0.0.1:8080/' >"$tmp/attnd.conf"
grep -q 'attnd-replicas.attnd-ns.svc.cluster.local:8080' "$tmp/attnd.conf" ||
    { echo "FAIL: the rendered gateway config lacks <pod>.attnd-replicas.<ns>.svc.cluster.local"; exit 1; }
printf 'pid %s/nginx.pid;\nerror_log %s/error.log;\nevents {}\nhttp {\n    include %s/attnd.conf;\n}\n' \
    "$tmp" "$tmp" "$tmp" >"$tmp/nginx.conf"
if ! out=$("$NGINX" -p "$tmp/prefix" -c "$tmp/nginx.conf" -t 2>&1); then
    echo "FAIL: nginx -t rejects the gateway template (docker/k8s/gateway.yaml):"; echo "$out"; exit 1
fi
echo "ok: nginx -t accepts docker/k8s/gateway.yaml's rendered template"
