/* validate.h — every check attn_forward (and the reference) makes before any
 * arithmetic: pointers, enum values, shapes against the layer, finiteness of
 * every input, and that no intermediate can overflow float32.
 */
#ifndef ATTN_VALIDATE_H
#define ATTN_VALIDATE_H

#include "layer_internal.h"

/* Returns ATTN_OK when layer and seqs[0..n_seqs) form a valid forward call;
 * otherwise the first problem's code, with err naming the sequence and field
 * ("seqs[1].query[4][7] is not finite"). Reads the inputs, writes nothing else.
 * Error codes: INVALID_ARG (NULLs, bad enum/flag values, mask pointer vs kind,
 * weights pointer vs mode), SHAPE (t/s < 1, self-attention with s != t or
 * embed widths that differ, key_length > s), NONFINITE (NaN/inf in query, key,
 * value; NaN or +inf in a float mask), LIMIT (sizes overflow, or input
 * magnitudes so large that a projection, score or output would overflow). */
attn_status attn__validate_forward(const attn_layer *layer, const attn_seq *seqs, int n_seqs,
                                   attn_error *err);

#endif /* ATTN_VALIDATE_H */
