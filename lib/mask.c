/* mask.c — turns the masks of one sequence into per-row visibility (see mask.h).
 * Conventions are PyTorch's: nonzero bool = blocked, key_padding_mask nonzero =
 * ignored, causal is top-left aligned (row t sees keys j <= t even when T != S),
 * except when appending to a KV cache: then row t stands at position
 * cache_len + t (bottom-right aligned) for causal and window alike.
 */
#include "mask.h"

#include <math.h>
#include <stddef.h>

int attn__mask_query_pos(const attn_seq *seq, int t)
{
    return seq->cache_k != NULL && seq->cache_append ? seq->cache_len + t : t;
}

void attn__mask_row_range(const attn_seq *seq, int row, int *lo, int *hi)
{
    const long long t = attn__mask_query_pos(seq, row); /* validated: fits in int */
    long long l = 0, h = seq->s; /* long long: t + window may exceed INT_MAX */
    if (seq->key_length > 0 && seq->key_length < h) h = seq->key_length;
    if (seq->is_causal && t + 1 < h) h = t + 1;
    if (seq->window > 0) {
        if (t - seq->window + 1 > l) l = t - seq->window + 1;
        if (!seq->is_causal && t + seq->window < h) h = t + seq->window;
    }
    *lo = (int)l;
    *hi = (int)(h > l ? h : l);
}

const uint8_t *attn__mask_bool_plane(const attn_seq *seq, int head)
{
    if (seq->attn_mask_kind != ATTN_MASK_BOOL) return NULL;
    const uint8_t *m = seq->attn_mask;
    return seq->attn_mask_per_head ? m + (size_t)head * seq->t * seq->s : m;
}

const float *attn__mask_float_plane(const attn_seq *seq, int head)
{
    if (seq->attn_mask_kind != ATTN_MASK_FLOAT) return NULL;
    const float *m = seq->attn_mask;
    return seq->attn_mask_per_head ? m + (size_t)head * seq->t * seq->s : m;
}

void attn__mask_block_span(const attn_seq *seq, const uint8_t *bool_plane, int t, int lo, int hi,
                           float *x)
{
    const uint8_t *kpm = seq->key_padding_mask;
    const uint8_t *b = bool_plane ? bool_plane + (size_t)t * seq->s : NULL;
    if (kpm)
        for (int j = lo; j < hi; j++)
            if (kpm[j]) x[j - lo] = -INFINITY;
    if (b)
        for (int j = lo; j < hi; j++)
            if (b[j]) x[j - lo] = -INFINITY;
}

void attn__mask_block_row(const attn_seq *seq, const uint8_t *bool_plane, int t, int lo, int hi,
                          float *row)
{
    if (hi > lo) attn__mask_block_span(seq, bool_plane, t, lo, hi, row + lo);
}
