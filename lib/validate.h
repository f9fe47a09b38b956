/* validate.h — every check attn_forward (and the reference) makes before any
 * arithmetic: pointers, enum values, shapes against the layer, finiteness of
 * every input, and that no intermediate can overflow float32. KV-cache rows
 * are trusted, not rescanned (see check_values in validate.c).
 */
#ifndef ATTN_VALIDATE_H
#define ATTN_VALIDATE_H

#include "layer_internal.h"

/* Returns ATTN_OK when layer and seqs[0..n_seqs) form a valid forward call;
 * otherwise the first problem's code, with err naming the sequence and field
 * ("seqs[1].query[4][7] is not finite"). Reads the inputs, writes nothing else.
 * Error codes: INVALID_ARG (NULLs, bad enum/flag values, mask pointer vs kind,
 * a rotary layer's position_ids[j] outside [0, 2^53],
 * weights pointer vs mode, cache_k without cache_v or beside key/value,
 * cache_append not 0/1, cache_len/cache_append set without a cache), SHAPE
 * (t/s < 1, self-attention with s != t or embed widths that differ, a cache
 * whose s is not cache_len + t (append) or not cache_len >= 1 (fixed),
 * key_length > s), NONFINITE (NaN/inf in query, key, value; NaN or +inf in a
 * float mask), LIMIT (sizes overflow, or input
 * magnitudes so large that a projection, score or output would overflow),
 * UNSUPPORTED (cross-attention or a fixed cache over a rotary layer). */
attn_status attn__validate_forward(const attn_layer *layer, const attn_seq *seqs, int n_seqs,
                                   attn_error *err);

/* The checks of attn_project_kv: non-NULL pointers (INVALID_ARG), a rotary
 * layer (UNSUPPORTED), s >= 1
 * (SHAPE), sizes (LIMIT), finite key/value (NONFINITE, element named) and
 * projections that cannot overflow (LIMIT). Writes nothing but err. */
attn_status attn__validate_project_kv(const attn_layer *l, const float *key, const float *value, int s,
                                      const float *k_out, const float *v_out, attn_error *err);

/* The last check of attn_forward, after the compute: every output (and
 * weights) element is finite. The checks above bound every intermediate from
 * the inputs, so this never fires on a correct library and checked inputs; it
 * keeps a defect (or cache rows outside those bounds) from becoming an answer
 * of NaN or garbage. Cost: one pass over T * E_out (+ the weights), against
 * the forward's O(T * E * (E + S)). Error: LIMIT when the sequence reads a KV
 * cache (trusted rows, see check_values), else INTERNAL; the message names the
 * sequence, the array and the element ("non-finite values in the output:
 * seqs[0].output[2][5] ..."). The outputs then hold the garbage. */
attn_status attn__check_results(const attn_layer *l, const attn_seq *seqs, int n_seqs, attn_error *err);

/* The same for attn_project_kv's k_out (n_k floats) and v_out (n_v): INTERNAL. */
attn_status attn__check_projected(const float *k_out, size_t n_k, const float *v_out, size_t n_v,
                                  attn_error *err);

#endif /* ATTN_VALIDATE_H */
