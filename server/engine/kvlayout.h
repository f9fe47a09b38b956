/* kvlayout.h — how a model's KV cache rows are laid out on the session
 * store's pages: the block of B rows (a power of two) of K and of V that one
 * page holds for a layer and KV dtype, and the page size fitted to a set of
 * models at start-up. Pure arithmetic over attn_kv_block_bytes: no store, no HTTP.
 */
#ifndef ATTND_KVLAYOUT_H
#define ATTND_KVLAYOUT_H

#include <stddef.h>

#include "attn.h"

typedef struct attnd_kv_geometry {
    int block_rows;   /* rows per block                                        */
    size_t v_offset;  /* where the V block starts in a page: the K block's bytes,
                         rounded up to 4                                       */
    size_t v_bytes;   /* the V block's bytes; v_offset + v_bytes <= the page   */
} attnd_kv_geometry;

/* The largest block (B <= 65536 rows) of layer l's K and V in dtype that fits
 * a page of page_bytes. Returns 0, or -1 when not even one row fits (*row_bytes,
 * may be NULL, then gets what one row of K and V needs). */
int attnd_kv_geometry_fit(const attn_layer *l, attn_kv_dtype dtype, size_t page_bytes,
                          attnd_kv_geometry *out, size_t *row_bytes);

/* The page one layer would like: its K + V bytes for the smallest power-of-two
 * block of at least ATTND_KV_MIN_BLOCK_ROWS rows and ATTND_KV_MIN_PAGE bytes
 * (few, large blocks: a long cache is read in long runs). The start-up page is
 * the largest of the models' wishes, so the widest model wastes nothing. */
#define ATTND_KV_MIN_BLOCK_ROWS 16
#define ATTND_KV_MIN_PAGE ((size_t)32 << 10)
size_t attnd_kv_page_wish(const attn_layer *l, attn_kv_dtype dtype);

#endif
