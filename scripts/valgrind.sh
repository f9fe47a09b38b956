#!/usr/bin/env bash
# valgrind.sh — memcheck over the unit tests that exercise the library, codec,
# scheduler and loader, and over integration tests with the daemon itself under
# valgrind (scripts/valgrind-attnd.sh). Left out: test_fused and test_threads
# (minutes under valgrind; ASan covers them in make sanitize) and tests that
# assert timings a valgrind'd daemon cannot meet (shutdown, daemon_api's
# metric-race counts, overload).
# Prints one line per test and "N passed, N failed"; exits non-zero on failure.
set -u
BUILD=${BUILD:-build}
logdir=$BUILD/valgrind-logs
rm -rf "$logdir" && mkdir -p "$logdir"
export OPENBLAS_NUM_THREADS=1
export VALGRIND_ATTND=$PWD/$BUILD/attnd VALGRIND_LOG_DIR=$PWD/$logdir
export ATTND_BIN=$PWD/scripts/valgrind-attnd.sh ATTND_LOAD_BIN=$PWD/$BUILD/attnd-load

unit=(test_seed test_properties test_forward_vs_reference test_softmax test_safetensors
      test_parity test_codec test_jsonnum test_scheduler test_fuzz_replay test_load_check
      test_load_stats test_load_args test_ui_assets test_checkpoint test_ops_modules
      test_rope_limits test_v2_header test_sessions)
integration=(test_examples test_v2 test_daemon_errors test_auth test_malformed test_batching
             test_reload test_tls test_load test_repository test_ops test_seq_sessions
             test_append_positions test_hardening3 test_session_restart)
[ -f "$BUILD/tests/unit/test_kvcache" ] && unit+=(test_kvcache)
[ -f "$BUILD/tests/integration/test_sessions" ] && integration+=(test_sessions)

passed=0; failed=0
report() { # name rc log
    if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "PASS $1";
    else failed=$((failed + 1)); echo "FAIL $1 (exit $2)"; tail -n 30 "$3"; fi
}
for t in "${unit[@]}"; do
    timeout 600 valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect \
        --error-exitcode=99 "$BUILD/tests/unit/$t" >"$logdir/$t.log" 2>&1
    report "valgrind unit/$t" $? "$logdir/$t.log"
done
for t in "${integration[@]}"; do
    timeout 600 "$BUILD/tests/integration/$t" >"$logdir/$t.log" 2>&1
    rc=$?
    if grep -qs . "$logdir"/attnd.*.vg.log; then # any memcheck report fails the run
        cat "$logdir"/attnd.*.vg.log >>"$logdir/$t.log"
        [ "$rc" -eq 0 ] && rc=98
    fi
    rm -f "$logdir"/attnd.*.vg.log
    report "valgrind integration/$t (attnd under memcheck)" $rc "$logdir/$t.log"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
