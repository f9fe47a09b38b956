/* kvcache.h — the storage of KV caches beyond contiguous float32: paged block
 * tables and compact element types (F16, BF16, INT8 with per-block-per-head
 * scales), as attn.h's "KV cache layouts" defines them. Writes convert float32
 * rows on the way in (appends, attn_kv_store); reads convert a tile of one KV
 * head into float32 scratch for the head kernels. Library-internal. */
#ifndef ATTN_KVCACHE_H
#define ATTN_KVCACHE_H

#include "layer_internal.h"

/* One cache, resolved: base pointers, dtype, paging. block_rows = 0: contiguous. */
typedef struct attn__kv {
    char *k, *v;
    int dtype, block_rows, shift; /* shift = log2(block_rows) when paged */
    const int32_t *table;
    size_t blk_k, blk_v;          /* bytes per block (paged) */
} attn__kv;

/* 1 when s has no cache, or a contiguous float32 one (the original layout). */
static inline int attn__kv_is_plain(const attn_seq *s)
{
    return s->cache_k == NULL || (s->cache_block_rows == 0 && s->cache_dtype == ATTN_KV_F32);
}

/* Block (or, contiguous, row) bytes of K and V; 0 on overflow or bad input.
 * dtype and block_rows must be valid (validated). */
int attn__kv_sizes(const attn_layer *l, int dtype, int block_rows, size_t *k_bytes, size_t *v_bytes);

/* OK when stride is 0, or a paged cache's valid block stride (a multiple of
 * 4, >= the K and V block bytes); name is the field for the message. */
attn_status attn__kv_check_stride(const attn_layer *l, int dtype, int block_rows, size_t stride,
                                  const char *name, attn_error *err);

/* The view of seq s's cache (s->cache_k != NULL, validated). */
void attn__kv_from_seq(const attn_layer *l, const attn_seq *s, attn__kv *kv);

/* Writes n float32 rows k (n, g*d_k), v (n, g*d_v) to rows [row0, row0+n),
 * converting (INT8: scales grow and earlier rows of the first block are
 * requantised as attn.h says). Never fails (validated). */
void attn__kv_write(const attn_layer *l, const attn__kv *kv, int row0, int n, const float *k,
                    const float *v);

/* Row stride of a converted tile of K (which = 0) or V: d, except below 4
 * floats, where OpenBLAS's GEMV rounds differently for lda < 4: there the
 * contiguous cache's own stride g*d, so a paged float32 cache stays
 * bit-identical to a contiguous one. */
static inline int attn__kv_tile_ld(const attn_layer *l, int which)
{
    const int d = which ? l->d_v : l->d_k;
    return d >= 4 ? d : l->g * d;
}

/* Rows [s0, s0+n) of KV head j of K (which = 0, width d_k) or V (which = 1,
 * width d_v) as float32: a pointer into the cache itself when the rows are
 * float32 and contiguous there (contiguous cache, or inside one block), row
 * stride *ld = g*d; otherwise converted into buf (n rows, *ld = attn__kv_tile_ld apart). */
const float *attn__kv_rows(const attn_layer *l, const attn__kv *kv, int which, int j, int s0, int n,
                           float *buf, int *ld);

/* Where rows [s0, s0+n) of K (which = 0) or V start, for kernels that
 * convert in registers (decode.c): a pointer to row s0's g*d elements of the
 * cache's dtype (KV head j's at + j*d), the rows of the run inside one block
 * (*m <= n; all n when contiguous), each *stride = g*d elements after the
 * previous, and for INT8 the block's g scales (*scales; NULL otherwise). */
const void *attn__kv_run(const attn_layer *l, const attn__kv *kv, int which, int s0, int n, int *m,
                         size_t *stride, const float **scales);

#endif /* ATTN_KVCACHE_H */
