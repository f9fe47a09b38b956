/* fuzz_decode.c — libFuzzer target: arbitrary bytes as a /v1 attention request
 * body, decoded for the demo model and a small cross-attention model, run
 * through attn_forward on the real layers and encoded back (or the error
 * encoded). See README.md.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_entry.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fuzz_decode_ctx ctx;

static void release(void) { fuzz_decode_ctx_free(&ctx); }

/* Loads the models once per process; ATTND_FUZZ_DEMO overrides the demo's path. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *path = getenv("ATTND_FUZZ_DEMO");
    char why[FUZZ_BUG_MAX];
    if (fuzz_decode_ctx_init(&ctx, path ? path : "config/demo.safetensors", why)) {
        fprintf(stderr, "fuzz_decode: %s (run from the repository root)\n", why);
        exit(2);
    }
    atexit(release);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char bug[FUZZ_BUG_MAX];
    if (fuzz_decode_one(&ctx, data, size, bug)) {
        fprintf(stderr, "fuzz_decode: invariant broken: %s\n", bug);
        abort(); /* libFuzzer saves the input as a crash */
    }
    return 0;
}
