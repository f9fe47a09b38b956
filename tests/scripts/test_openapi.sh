#!/usr/bin/env bash
# test_openapi.sh — lints proto/openapi.yaml (redocly) and validates every proto/examples/ file
# against its schema (ajv, JSON Schema 2020-12), plus deliberately invalid bodies that must be
# rejected, so the check is shown able to fail. Tools are installed on first use into
# ${XDG_CACHE_HOME:-$HOME/.cache}/attnd-npm (outside the repo) with the machine's npm.
set -euo pipefail
cd "$(dirname "$0")/../.."

REDOCLY_VERSION=2.77.0
AJV_CLI_VERSION=5.0.0
AJV_FORMATS_VERSION=3.0.1
cache=${ATTND_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/attnd-npm}
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true NO_UPDATE_NOTIFIER=1

command -v node >/dev/null && command -v npm >/dev/null || {
    echo "test_openapi: needs Node.js (>= 20.19) and npm on PATH" >&2; exit 1; }

installed_version() { # package -> its version in the cache, or nothing
    node -e 'try { console.log(require(process.argv[1] + "/package.json").version) } catch (e) {}' \
        "$cache/node_modules/$1" 2>/dev/null
}
if [ "$(installed_version @redocly/cli)" != "$REDOCLY_VERSION" ] ||
   [ "$(installed_version ajv-cli)" != "$AJV_CLI_VERSION" ] ||
   [ "$(installed_version ajv-formats)" != "$AJV_FORMATS_VERSION" ]; then
    echo "test_openapi: installing redocly and ajv into $cache"
    mkdir -p "$cache"
    [ -f "$cache/package.json" ] || echo '{"private": true}' >"$cache/package.json"
    timeout 300 npm install --prefix "$cache" --no-audit --no-fund --save-exact --loglevel=error \
        "@redocly/cli@$REDOCLY_VERSION" "ajv-cli@$AJV_CLI_VERSION" \
        "ajv-formats@$AJV_FORMATS_VERSION" >/dev/null
fi
redocly=$cache/node_modules/.bin/redocly
ajv=$cache/node_modules/.bin/ajv

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Redocly prints a boxed Node-version notice on stderr; keep the rest.
quiet_box() { grep -v '[║╔╚]' || true; }

echo "== redocly lint"
lint_rc=0
"$redocly" lint --config proto/redocly.yaml --format=stylish proto/openapi.yaml \
    >"$tmp/lint.log" 2>&1 || lint_rc=$?
quiet_box <"$tmp/lint.log"
[ $lint_rc -eq 0 ] || { echo "test_openapi: redocly lint found errors" >&2; exit 1; }

echo "== schemas and examples"
"$redocly" bundle proto/openapi.yaml --ext json -o "$tmp/openapi.json" >/dev/null 2>&1 || {
    echo "test_openapi: redocly bundle failed" >&2; exit 1; }
node tests/scripts/openapi_schemas.js "$tmp/openapi.json" proto/examples "$tmp"

# One ajv run per (schema, expectation); ajv checks each file and fails if any disagrees.
fail=0
checks=0
while IFS=$'\t' read -r schema expect; do
    args=()
    while IFS=$'\t' read -r s e f; do
        [ "$s" = "$schema" ] && [ "$e" = "$expect" ] && args+=(-d "$f")
    done <"$tmp/plan.tsv"
    checks=$((checks + ${#args[@]} / 2))
    if ! "$ajv" test --spec=draft2020 --strict=true --all-errors --errors=text -c ajv-formats \
            -s "$schema" "${args[@]}" "--$expect" >"$tmp/ajv.log" 2>&1; then
        echo "FAIL: some files are not $expect against $(basename "$schema" .json):"
        grep -v 'passed test' "$tmp/ajv.log" | sed 's/^/    /'
        fail=1
    fi
done < <(cut -f1,2 "$tmp/plan.tsv" | sort -u)

[ "$checks" -ge 40 ] || { echo "test_openapi: only $checks files checked" >&2; exit 1; }
if [ $fail -ne 0 ]; then echo "test_openapi: FAILED"; exit 1; fi
echo "test_openapi: lint clean, $checks files validated as expected"
