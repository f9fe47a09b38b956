#!/usr/bin/env bash
# test_k8s_manifests.sh — offline checks of the deployment files: docker/k8s/*.yaml (fields a
# cluster needs and that must agree with each other and with the image), docker/compose.yaml,
# docker/nginx.conf, and the ConfigMap's attnd.json against the real daemon's config parser.
# No kubeconform/kubeval in Debian 12, so this checks what matters for attnd with PyYAML.
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

# ---- parse every manifest; index by kind
docs = {}
for path in sorted(glob.glob("docker/k8s/*.yaml")):
    for doc in yaml.safe_load_all(open(path)):
        if doc is None:
            continue
        where = f"{path}:{doc.get('kind')}"
        check(isinstance(doc.get("apiVersion"), str), f"{where}: apiVersion")
        check(isinstance(get(doc, "metadata.name"), str), f"{where}: metadata.name")
        check(doc.get("kind") not in docs, f"{where}: kind appears twice")
        docs[doc.get("kind")] = doc
for kind in ("Deployment", "Service", "HorizontalPodAutoscaler", "ConfigMap"):
    check(kind in docs, f"missing a {kind}")
if failures:
    print("\n".join("FAIL: " + f for f in failures)); sys.exit(1)

dep, svc, hpa, cm = (docs[k] for k in ("Deployment", "Service", "HorizontalPodAutoscaler", "ConfigMap"))
check(dep["apiVersion"] == "apps/v1", "Deployment apiVersion apps/v1")
check(hpa["apiVersion"] == "autoscaling/v2", "HPA apiVersion autoscaling/v2")

# ---- Deployment
spec, pod = dep["spec"], get(dep, "spec.template.spec")
labels = get(dep, "spec.template.metadata.labels", {})
sel = get(spec, "selector.matchLabels", {})
check(sel and all(labels.get(k) == v for k, v in sel.items()), "Deployment selector matches pod labels")
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
for n in mounts:
    check(n in vols, f"volumeMount {n} has a volume")

# ---- Service and HPA point at the Deployment
check(all(labels.get(k) == v for k, v in get(svc, "spec.selector", {}).items()) and get(svc, "spec.selector"),
      "Service selector matches pod labels")
for p in get(svc, "spec.ports", []):
    check(port_of(p.get("targetPort")) == 8080, f"Service targetPort {p.get('targetPort')} is 8080")
ref = get(hpa, "spec.scaleTargetRef", {})
check(ref.get("kind") == "Deployment" and ref.get("name") == get(dep, "metadata.name"), "HPA targets the Deployment")
check(1 <= get(hpa, "spec.minReplicas", 1) <= get(hpa, "spec.maxReplicas", 0), "HPA 1 <= min <= max")
check(get(hpa, "spec.metrics"), "HPA has metrics")

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
a, n = get(comp, "services.attnd", {}), get(comp, "services.nginx", {})
check(get(a, "deploy.replicas") == 3, "compose: attnd deploy.replicas 3")
check(any(str(v).endswith(":/models:ro") for v in a.get("volumes", [])), "compose: /models mounted read-only")
check(any("nginx.conf:/etc/nginx/nginx.conf" in str(v) for v in n.get("volumes", [])), "compose: nginx.conf mounted")
check("attnd" in n.get("depends_on", []), "compose: nginx starts after attnd")
check(any(str(p).endswith(":8080") for p in n.get("ports", [])), "compose: nginx publishes 8080")
for v in a.get("volumes", []) + n.get("volumes", []):
    src = str(v).split(":")[0]
    if not src.startswith("$"):
        check(os.path.exists(os.path.join("docker", src)), f"compose: mount source {src} exists")

# ---- nginx.conf: the directives the scale-out relies on
ng = re.sub(r"#.*", "", open("docker/nginx.conf").read())
for pat, what in ((r"server\s+attnd:8080", "upstream on the attnd service"),
                  (r"proxy_next_upstream\s+[^;]*\berror\b[^;]*\btimeout\b[^;]*\bhttp_503\b[^;]*\bnon_idempotent\b", "proxy_next_upstream error timeout http_503 non_idempotent"),
                  (r"proxy_next_upstream_tries\s+[2-9]", "retries > 1"),
                  (r"keepalive\s+\d+;", "upstream keepalive"),
                  (r"proxy_http_version\s+1\.1;", "HTTP/1.1 to upstreams (keepalive needs it)"),
                  (r'proxy_set_header\s+Connection\s+""', "Connection header cleared (keepalive)"),
                  (r"add_header\s+X-Upstream-Addr\s+\$upstream_addr\s+always", "X-Upstream-Addr header"),
                  (r"hash\s+\$attnd_session", "sticky hash on the session id"),
                  (r"\$http_x_session_id", "session id from X-Session-Id")):
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
