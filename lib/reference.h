/* reference.h — the naive oracle: attention with plain loops and double
 * accumulation, written independently of the BLAS path (only validation is
 * shared). Used by tests to check attn_forward; never by the server.
 */
#ifndef ATTN_REFERENCE_H
#define ATTN_REFERENCE_H

#include "attn.h"

/* Same contract as attn_forward (ws is ignored and may be NULL; stats, when not
 * NULL, get flops = 0 and peak_scratch = the bytes this call allocated). */
attn_status attn__forward_reference(const attn_layer *layer, const attn_seq *seqs, int n_seqs,
                                    attn_workspace *ws, attn_forward_stats *stats, attn_error *err);

#endif /* ATTN_REFERENCE_H */
