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
