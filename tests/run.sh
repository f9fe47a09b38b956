#!/usr/bin/env bash
# run.sh — runs the whole test suite: every unit and integration test binary under
# $BUILD/tests, then every tests/scripts/test_*.sh. One line per test, then the
# closing "N passed, N failed". Exits non-zero if anything failed.
# TEST_FILTER=substring runs only matching tests. Each test is bounded by TEST_TIMEOUT s.
set -u
BUILD=${BUILD:-build}
export BUILD
export ATTND_BIN=${ATTND_BIN:-$BUILD/attnd}
export ATTND_LOAD_BIN=${ATTND_LOAD_BIN:-$BUILD/attnd-load}
timeout_s=${TEST_TIMEOUT:-600}
logdir=$BUILD/test-logs
mkdir -p "$logdir"

passed=0; failed=0; failures=()
run_one() {
    local name=$1; shift
    case "$name" in *"${TEST_FILTER:-}"*) ;; *) return ;; esac
    local log="$logdir/$(basename "$name").log" start end rc
    start=$(date +%s%N)
    timeout --kill-after=10 "$timeout_s" "$@" >"$log" 2>&1 </dev/null
    rc=$?
    end=$(date +%s%N)
    local ms=$(( (end - start) / 1000000 )) secs
    secs=$(printf '%d.%d' $((ms / 1000)) $(((ms % 1000) / 100)))
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1)); printf 'PASS %-48s %6ss\n' "$name" "$secs"
    else
        failed=$((failed + 1)); failures+=("$name")
        printf 'FAIL %-48s %6ss (exit %d)\n' "$name" "$secs" "$rc"
        echo "---- last lines of $log"; tail -n 40 "$log"; echo "----"
    fi
}

for t in "$BUILD"/tests/unit/test_* "$BUILD"/tests/integration/test_*; do
    [ -x "$t" ] && [ -f "$t" ] || continue
    case "$t" in *.d|*.o) continue ;; esac
    run_one "$t" "$t"
done
for s in tests/scripts/test_*.sh; do
    [ -f "$s" ] || continue
    run_one "$s" bash "$s"
done

[ ${#failures[@]} -gt 0 ] && printf 'failed: %s\n' "${failures[*]}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ] && [ $passed -gt 0 ]
