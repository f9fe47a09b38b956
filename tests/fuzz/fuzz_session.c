/* fuzz_session.c — libFuzzer target: arbitrary bytes as a --session-dir file
 * through attnd_persist_parse, as they are and resealed (fuzz_session_entry.h).
 * See README.md.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_session_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char bug[FUZZ_BUG_MAX];
    if (fuzz_session_one(data, size, NULL, bug)) {
        fprintf(stderr, "fuzz_session: invariant broken: %s\n", bug);
        abort(); /* libFuzzer saves the input as a crash */
    }
    return 0;
}
