/* checkpoint.h — library-internal side of the checkpoint loader (checkpoint.c):
 * attn_layer_load / attn_checkpoint_inspect / attn_layer_load_safetensors[_mem]
 * with a report of what was read, for the tests that prove only the selected
 * layer's tensors are read (STYLE rule 18).
 */
#ifndef ATTN_CHECKPOINT_H
#define ATTN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

#define ATTN__INDEX_MAX ((size_t)64 * 1024 * 1024) /* bytes of model.safetensors.index.json */
/* Entries of its weight_map: more is refused (ATTN_ERR_LIMIT naming the file
 * and the limit). A dense checkpoint names a few hundred to a few thousand
 * tensors (Llama 3.1 405B: 126 layers x 9 ~ 1.1k); mixtures of experts name
 * each expert's matrices: 61 layers x 256 experts x 3, x 2 with FP8 scales
 * ~ 94k (DeepSeek-V3 sized). 2^19 leaves over 5x headroom on that, while an
 * index at the byte cap (~14 bytes an entry) could hold ~4.8M. */
#define ATTN__INDEX_MAX_ENTRIES (1 << 19)

/* What one load read. */
typedef struct attn__load_stats {
    uint64_t st_bytes;     /* safetensors bytes read: 8 + header of each file opened,
                              plus the bytes of each tensor converted             */
    uint64_t tensor_bytes; /* of which the tensors' bytes                          */
    int files_opened;      /* safetensors files whose header was read              */
    int tensors_read;      /* tensors whose bytes were read                        */
} attn__load_stats;

/* attn_layer_load, filling *stats (when not NULL) on success and failure alike. */
attn_status attn__layer_load_stats(const char *path, const attn_load_options *opts,
                                   attn_layer **out, attn__load_stats *stats, attn_error *err);

#endif
