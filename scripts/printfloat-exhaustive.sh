#!/usr/bin/env bash
# printfloat-exhaustive.sh — compares attnd_json_print_float of the work tree with the
# one of git revision REV (default d1f59db: Ryu's algorithm with the division-based digit
# writer) over all 2^32 float bit patterns: same return value, same bytes. The batch printer
# attnd_json_print_floats (AVX2, eight at a time, where the CPU has it) is compared too, on
# every aligned block of 8 patterns: the old texts joined by ',', or -1 when one is NaN or
# infinite. An offline check (minutes of one core), run once whenever the printer changes;
# CI runs the random and edge cases of tests/unit/test_jsonnum.
#   scripts/printfloat-exhaustive.sh [REV] [FIRST_BITS] [LAST_BITS]
set -euo pipefail
REV=${1:-d1f59db}
FIRST=${2:-0}
LAST=${3:-4294967295}
dir=$(mktemp -d "${TMPDIR:-/tmp}/attnd-printfloat.XXXXXX")
trap 'rm -rf "$dir"' EXIT
syms="attnd_json_print_float attnd_json_parse_float attnd_json_double_to_float
      attnd_json_parse_float_nest attnd_float_nest_free"
renames=()
for s in $syms; do renames+=("-D$s=old_$s"); done
# Revisions before the layer folders kept it at server/jsonnum.c (and include "jsonnum.h").
{ git show "$REV:server/protocol/jsonnum.c" 2>/dev/null || git show "$REV:server/jsonnum.c"; } > "$dir/old.c"
cat > "$dir/main.c" <<'C'
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "protocol/jsonnum.h"
int old_attnd_json_print_float(float v, char *out);
int main(int argc, char **argv)
{
    const uint64_t first = strtoull(argv[1], NULL, 0), last = strtoull(argv[2], NULL, 0);
    uint64_t differ = 0, batch_differ = 0;
    float block[8];
    char joined[8 * (ATTND_FLOAT_TEXT_MAX + 1)], batch[ATTND_FLOATS_TEXT_MAX(8)];
    size_t joined_len = 0;
    int joined_bad = 0;
    for (uint64_t b = first; b <= last; b++) {
        const uint32_t bits = (uint32_t)b;
        float v;
        memcpy(&v, &bits, sizeof v);
        char a[ATTND_FLOAT_TEXT_MAX], o[ATTND_FLOAT_TEXT_MAX];
        const int na = attnd_json_print_float(v, a), no = old_attnd_json_print_float(v, o);
        if (na != no || (na > 0 && memcmp(a, o, (size_t)na) != 0)) {
            if (differ++ < 20)
                printf("0x%08" PRIx32 ": new \"%.*s\" (%d), old \"%.*s\" (%d)\n", bits,
                       na > 0 ? na : 0, a, na, no > 0 ? no : 0, o, no);
        }
        if ((bits & 7) == 0) {
            joined_len = 0;
            joined_bad = 0;
        }
        block[bits & 7] = v;
        joined_bad |= no < 0;
        if (no > 0) {
            memcpy(joined + joined_len, o, (size_t)no);
            joined_len += (size_t)no;
            joined[joined_len++] = ',';
        }
        if ((bits & 7) == 7 && b - first >= 7) {
            const ptrdiff_t nb = attnd_json_print_floats(block, 8, batch);
            const ptrdiff_t want = joined_bad ? -1 : (ptrdiff_t)joined_len - 1;
            if (nb != want || (nb > 0 && memcmp(batch, joined, (size_t)nb) != 0)) {
                if (batch_differ++ < 20)
                    printf("block 0x%08" PRIx32 ": batch \"%.*s\" (%td), old \"%.*s\" (%td)\n",
                           bits - 7, nb > 0 ? (int)nb : 0, batch, nb, want > 0 ? (int)want : 0,
                           joined, want);
            }
        }
    }
    differ += batch_differ;
    printf("%" PRIu64 " bit patterns 0x%" PRIx64 "..0x%" PRIx64 ": %" PRIu64 " differ (%" PRIu64 " blocks of 8 in the batch printer)\n",
           last - first + 1, first, last, differ, batch_differ);
    return differ != 0;
}
C
cc -std=c11 -O2 -D_GNU_SOURCE -Iserver -Iserver/protocol "${renames[@]}" -c "$dir/old.c" -o "$dir/old.o"
cc -std=c11 -O2 -D_GNU_SOURCE -Iserver -c server/protocol/jsonnum.c -o "$dir/new.o"
cc -std=c11 -O2 -Iserver "$dir/main.c" "$dir/old.o" "$dir/new.o" -lm -o "$dir/compare"
"$dir/compare" "$FIRST" "$LAST"
