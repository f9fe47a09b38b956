#!/usr/bin/env bash
# test_monitoring.sh — the monitoring kit in docker/monitoring/ works against the real daemon:
#   1. promtool check config / check rules, and promtool test rules alerts.test.yml (each alert
#      fires on a sick synthetic instance and never on the healthy one next to it);
#   2. every metric name in the alerts' and the Grafana dashboard's PromQL appears in a live
#      attnd's /metrics (only `up`, which Prometheus writes itself, is exempt, in alerts only);
#      the ServiceMonitor selects the Service of docker/k8s/service.yaml by label and port name;
#   3. a real Prometheus on 127.0.0.1 scrapes that attnd every 1 s with alerts.yml loaded:
#      its API returns attnd's series within ~20 s, every rule evaluates healthy, and every
#      dashboard expression is accepted by its query API.
# Installs Debian's prometheus package (promtool + prometheus) via scripts/deps.sh when missing;
# fails, never skips, when it cannot. Everything is bounded in time and stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
ATTND_BIN=${ATTND_BIN:-$BUILD/attnd}
MODEL=${ATTND_DEMO_MODEL:-config/demo.safetensors}
KIT=docker/monitoring
PY=/usr/bin/python3

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    echo "promtool/prometheus missing: installing Debian package prometheus" >&2
    timeout 300 scripts/deps.sh prometheus >&2 ||
        { echo "FAIL: could not install Debian package prometheus (scripts/deps.sh prometheus)" >&2; exit 1; }
fi
command -v promtool >/dev/null || { echo "FAIL: promtool not available after installing prometheus" >&2; exit 1; }
command -v prometheus >/dev/null || { echo "FAIL: prometheus not available after installing prometheus" >&2; exit 1; }
"$PY" -c 'import yaml' 2>/dev/null || { echo "FAIL: $PY has no yaml module (scripts/deps.sh installs python3-yaml)" >&2; exit 1; }

work=$(mktemp -d)
pid=; ppid_=
cleanup() {
    [ -n "$ppid_" ] && kill "$ppid_" 2>/dev/null && wait "$ppid_" 2>/dev/null
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---- 1. promtool on the kit
(cd "$KIT" && timeout 30 promtool check config prometheus.yml && timeout 30 promtool check rules alerts.yml) >"$work/check" 2>&1 ||
    { cat "$work/check" >&2; echo "FAIL: promtool check config/rules on $KIT" >&2; exit 1; }
(cd "$KIT" && timeout 60 promtool test rules alerts.test.yml) >"$work/unit" 2>&1 ||
    { cat "$work/unit" >&2; echo "FAIL: promtool test rules $KIT/alerts.test.yml" >&2; exit 1; }
echo "promtool check config, check rules, test rules: OK"

# ---- a live attnd, with traffic so histograms and request counters hold data
port=$(free_port)
timeout 120 "$ATTND_BIN" --model "demo=$MODEL" --listen "127.0.0.1:$port" >"$work/attnd.log" 2>&1 &
pid=$!
base="http://127.0.0.1:$port"
for _ in $(seq 150); do
    curl -fs -m 2 "$base/readyz" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/attnd.log" >&2; echo "FAIL: attnd exited" >&2; exit 1; }
    sleep 0.1
done
curl -fs -m 2 "$base/readyz" >/dev/null || { echo "FAIL: attnd not ready" >&2; exit 1; }
row=$("$PY" -c 'print(",".join(["0.25"]*64))')
for _ in 1 2 3; do
    curl -fs -m 10 -H 'Content-Type: application/json' -d "{\"query\": [[${row}],[${row}]]}" \
        "$base/v1/models/demo/attention" >/dev/null
done
curl -s -m 5 -o /dev/null "$base/nothing"
curl -fs -m 5 "$base/metrics" >"$work/metrics"

# ---- 2. metric names in the kit vs /metrics; ServiceMonitor vs Service
"$PY" - "$KIT" "$work/metrics" "$work/exprs.json" <<'EOF'
import json, re, sys, yaml
kit, metrics_path, exprs_out = sys.argv[1:]
fail = []

exported = set()
for line in open(metrics_path):
    if line and not line.startswith("#") and line.strip():
        exported.add(re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group(0))

KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "Inf", "NaN"}
def metric_names(expr):
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)            # string literals
    e = re.sub(r"\{[^}]*\}", " ", e)                           # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)                          # range selectors
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)                         # Grafana variables
    e = re.sub(r"(?<![A-Za-z0-9_:])\d+(\.\d+)?([eE][+-]?\d+)?", " ", e)  # numbers
    names = re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*(?![A-Za-z0-9_:])(?!\s*\()", e)
    return {n for n in names if n not in KEYWORDS}

# alerts.yml
rules = [r for g in yaml.safe_load(open(f"{kit}/alerts.yml"))["groups"] for r in g["rules"]]
alert_names = [r["alert"] for r in rules if "alert" in r]
exprs = []
for r in rules:
    names = metric_names(r["expr"])
    if not names:
        fail.append(f"alert {r.get('alert')}: no metric found in its expr (extractor broken?)")
    for n in names - exported - {"up"}:
        fail.append(f"alert {r.get('alert')}: {n} is not in attnd's /metrics")

# alerts.test.yml: every alert fires somewhere, and only ever for the sick instance
fired = set()
for t in yaml.safe_load(open(f"{kit}/alerts.test.yml"))["tests"]:
    for c in t.get("alert_rule_test", []):
        if c.get("exp_alerts"):
            fired.add(c["alertname"])
            for a in c["exp_alerts"]:
                if a.get("exp_labels", {}).get("instance") != "bad:8080":
                    fail.append(f"alerts.test.yml: {c['alertname']} expected on {a.get('exp_labels')}, not only bad:8080")
for a in alert_names:
    if a not in fired:
        fail.append(f"alerts.test.yml: no test where {a} fires")

# grafana-attnd.json
dash = json.load(open(f"{kit}/grafana-attnd.json"))
n_dash = 0
for p in dash["panels"]:
    if not p.get("targets"):
        fail.append(f"panel {p.get('title')!r}: no targets")
    for t in p.get("targets", []):
        n_dash += 1
        names = metric_names(t["expr"])
        if not names:
            fail.append(f"panel {p['title']!r}: no metric in {t['expr']!r}")
        for n in names - exported:
            fail.append(f"panel {p['title']!r}: {n} is not in attnd's /metrics")
        exprs.append(t["expr"])
for v in dash.get("templating", {}).get("list", []):
    q = v.get("query")
    q = q.get("query") if isinstance(q, dict) else q
    m = re.fullmatch(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*(\w+)\s*\)", q or "")
    if v.get("type") == "query":
        if not m:
            fail.append(f"variable {v['name']}: query {q!r} is not label_values(metric, label)")
        elif m.group(1) not in exported:
            fail.append(f"variable {v['name']}: {m.group(1)} is not in attnd's /metrics")
        elif not re.search(r"^%s\{[^}]*%s=" % (m.group(1), m.group(2)), open(metrics_path).read(), re.M) \
                and m.group(2) != "instance":
            fail.append(f"variable {v['name']}: {m.group(1)} has no label {m.group(2)}")

# servicemonitor.yaml selects docker/k8s/service.yaml's Service and names its port
sm = yaml.safe_load(open(f"{kit}/servicemonitor.yaml"))
svc = next(d for d in yaml.safe_load_all(open("docker/k8s/service.yaml")) if d and d.get("kind") == "Service")
if sm.get("apiVersion") != "monitoring.coreos.com/v1" or sm.get("kind") != "ServiceMonitor":
    fail.append("servicemonitor.yaml: not a monitoring.coreos.com/v1 ServiceMonitor")
sel = sm["spec"]["selector"]["matchLabels"]
if not sel or any(svc["metadata"].get("labels", {}).get(k) != v for k, v in sel.items()):
    fail.append(f"servicemonitor.yaml: selector {sel} does not match the Service's labels")
ports = {p.get("name") for p in svc["spec"]["ports"]}
for ep in sm["spec"]["endpoints"]:
    if ep.get("port") not in ports:
        fail.append(f"servicemonitor.yaml: endpoint port {ep.get('port')} is not a Service port name {ports}")
    if ep.get("path", "/metrics") != "/metrics":
        fail.append("servicemonitor.yaml: path is not /metrics")

if fail:
    print("\n".join("FAIL: " + f for f in fail)); sys.exit(1)
json.dump(exprs, open(exprs_out, "w"))
print(f"metric names: {len(alert_names)} alerts and {n_dash} dashboard queries use only exported metrics "
      f"({len(exported)} names exported); ServiceMonitor matches the Service")
EOF

# ---- 3. a real Prometheus scraping that attnd every second, with the kit's rules loaded
pport=$(free_port)
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $PWD/$KIT/alerts.yml
scrape_configs:
  - job_name: attnd
    scrape_timeout: 900ms
    static_configs:
      - targets: ["127.0.0.1:$port"]
EOF
timeout 60 prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$pport" >"$work/prom.log" 2>&1 &
ppid_=$!
papi="http://127.0.0.1:$pport/api/v1"
"$PY" - "$papi" "$work/exprs.json" "$work/prom.log" <<'EOF' || { tail -n 20 "$work/prom.log" >&2; exit 1; }
import json, sys, time, urllib.parse, urllib.request
api, exprs_path, log = sys.argv[1:]
def get(path, **q):
    url = f"{api}/{path}" + ("?" + urllib.parse.urlencode(q) if q else "")
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)
deadline = time.time() + 25
series = []
while time.time() < deadline:
    try:
        res = get("query", query='attnd_requests_total{job="attnd"}')
        series = res["data"]["result"] if res.get("status") == "success" else []
        if series:
            break
    except (OSError, ValueError):
        pass
    time.sleep(0.5)
if not series:
    sys.exit("FAIL: Prometheus returned no attnd_requests_total series within ~20 s")
if not any(s["metric"].get("route") == "/v1/models/{name}/attention" and s["metric"].get("status") == "200"
           and float(s["value"][1]) >= 3 for s in series):
    sys.exit(f"FAIL: scraped series lack the 3 attention requests: {series}")
print(f"prometheus: scraped {len(series)} attnd_requests_total series")

# Every rule of alerts.yml loaded and evaluated without error.
rules, t_end = [], time.time() + 10
while time.time() < t_end:
    rules = [r for g in get("rules")["data"]["groups"] for r in g["rules"]]
    if rules and all(r.get("health") == "ok" for r in rules):
        break
    time.sleep(0.5)
bad = [(r["name"], r.get("health"), r.get("lastError")) for r in rules if r.get("health") != "ok"]
if not rules or bad:
    sys.exit(f"FAIL: rules not all healthy in Prometheus: {bad or 'none loaded'}")
firing = [r["name"] for r in rules if r.get("state") == "firing"]
if firing:
    sys.exit(f"FAIL: alerts firing on a healthy daemon: {firing}")

# Every dashboard expression parses and runs (Grafana's variables replaced as Grafana would).
errors = []
for e in json.load(open(exprs_path)):
    q = (e.replace("$__rate_interval", "1m").replace("$__range", "5m")
          .replace("$model", ".*").replace("$instance", ".*"))
    r = get("query", query=q)
    if r.get("status") != "success":
        errors.append(f"{q}: {r.get('error')}")
if errors:
    sys.exit("FAIL: dashboard queries rejected by Prometheus:\n  " + "\n  ".join(errors))
print(f"prometheus: {len(rules)} rules healthy, none firing; "
      f"{len(json.load(open(exprs_path)))} dashboard queries accepted")
EOF
echo "test_monitoring: OK"
