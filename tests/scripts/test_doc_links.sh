#!/usr/bin/env bash
# test_doc_links.sh — no broken relative link or anchor in any Markdown file of the repo
# (README.md, docs/, proto/, clients/, tools/, tests/...), checked by tests/scripts/doclinks.py.
# First a self-test on synthetic files, so the check is shown able to fail: a missing file,
# a missing anchor, a repeated heading's -1 anchor, a link inside code (not a link), and a
# clean file must each get the right verdict.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=(python3 -I -S)
check=tests/scripts/doclinks.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/docs"
cat >"$tmp/docs/a.md" <<'MD'
# Title
## Running `attnd` — flags
## Notes
## Notes
See [flags](#running-attnd--flags), [the second notes](#notes-1), [b](b.md#b-heading),
[up](../top.md) and `[not a link](nowhere.md)`.
```sh
[also not a link](nowhere.md)
```
MD
printf '# B heading\n' >"$tmp/docs/b.md"
printf '# Top\nSee [a](docs/a.md#title).\n' >"$tmp/top.md"
printf '# Bad\n[gone](docs/gone.md) and [no anchor](docs/b.md#nope) and [self](#missing)\n' >"$tmp/bad.md"

bad=0
expect() { # expect EXIT TEXT FILE...: the checker on FILEs exits EXIT and prints TEXT
    local want=$1 text=$2 rc=0 out; shift 2
    out=$(cd "$tmp" && "${py[@]}" "$OLDPWD/$check" --files "$@" 2>&1) || rc=$?
    if [ "$rc" -eq "$want" ] && grep -qF -- "$text" <<<"$out"; then
        echo "self-test $*: ok"
    else
        echo "self-test $*: WRONG (exit $rc, wanted $want and \"$text\"):"; sed 's/^/    /' <<<"$out"
        bad=1
    fi
}
expect 0 "3 files, 5 links, 0 broken" docs/a.md docs/b.md top.md
expect 1 "bad.md:2: [gone](docs/gone.md): no file docs/gone.md" bad.md
expect 1 "bad.md:2: [no anchor](docs/b.md#nope): docs/b.md has no heading #nope" bad.md
expect 1 "bad.md:2: [self](#missing): bad.md has no heading #missing" bad.md
[ "$bad" -eq 0 ] || { echo "test_doc_links: the checker's self-test failed"; exit 1; }

echo "--- the repo's Markdown"
"${py[@]}" "$check"
