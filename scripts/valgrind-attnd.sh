#!/usr/bin/env bash
# valgrind-attnd.sh — runs the real attnd ($VALGRIND_ATTND) under memcheck, so the
# integration tests can use it as ATTND_BIN. A memory error or a definite/indirect
# leak makes attnd exit 99, which every integration test checks on stop.
exec valgrind -q --leak-check=full --show-leak-kinds=definite,indirect \
    --errors-for-leak-kinds=definite,indirect --error-exitcode=99 \
    --log-file="${VALGRIND_LOG_DIR:-/tmp}/attnd.%p.vg.log" "$VALGRIND_ATTND" "$@"
