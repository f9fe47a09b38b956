/* mask.h — mask resolution shared by the compute paths: every blocking rule of an
 * attn_seq (key_length, causal, window, key padding, bool attn_mask) reduced to
 * "row t sees keys in [lo, hi) except those a per-key mask blocks".
 * Float attn_mask values are not handled here: kernels add them to the scores.
 */
#ifndef ATTN_MASK_H
#define ATTN_MASK_H

#include "attn.h"

#include <stdint.h>

/* The position of query row t (0 <= t < seq->t) among the keys, which causal
 * and window count from: t itself (top-left alignment, as PyTorch), or
 * cache_len + t when the sequence appends to a KV cache (bottom-right). */
int attn__mask_query_pos(const attn_seq *seq, int t);

/* The interval of keys query row `row` may see under key_length, is_causal and
 * window, counted from attn__mask_query_pos: [*lo, *hi), empty when *hi <= *lo.
 * Requires 0 <= row < seq->t (validated seq). */
void attn__mask_row_range(const attn_seq *seq, int row, int *lo, int *hi);

/* The (T, S) plane of the bool / float attn_mask that applies to `head`, or
 * NULL when the sequence has no mask of that kind. */
const uint8_t *attn__mask_bool_plane(const attn_seq *seq, int head);
const float *attn__mask_float_plane(const attn_seq *seq, int head);

/* row: the S scores of query row t (float mask already added).
 * Sets to -INFINITY every key in [lo, hi) that key_padding_mask or the bool
 * plane (bool_plane may be NULL) blocks; keys outside [lo, hi) are untouched. */
void attn__mask_block_row(const attn_seq *seq, const uint8_t *bool_plane, int t, int lo, int hi,
                          float *row);

/* The same for a span: x[0..hi-lo) holds the scores of keys lo..hi-1. */
void attn__mask_block_span(const attn_seq *seq, const uint8_t *bool_plane, int t, int lo, int hi,
                           float *x);

#endif /* ATTN_MASK_H */
