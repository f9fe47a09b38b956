/* fuzz_safetensors.c — libFuzzer target: arbitrary bytes as a safetensors file
 * through attn_layer_load_safetensors_mem (heads from the metadata, then 2); a
 * layer that loads must describe itself consistently and run. See README.md.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char bug[FUZZ_BUG_MAX];
    attn_status st[2];
    if (fuzz_safetensors_one(data, size, st, bug)) {
        fprintf(stderr, "fuzz_safetensors: invariant broken: %s\n", bug);
        abort(); /* libFuzzer saves the input as a crash */
    }
    return 0;
}
