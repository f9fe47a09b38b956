/* forward.h — the structure of attn_forward, shared with the compute kernels:
 * one batch context (projected Q, K, V and the concatenated head outputs) and
 * a list of jobs, each (sequence, head, block of query rows) with the kernel to
 * run it. attn_forward projects with three GEMMs, runs the jobs (on the
 * calling thread or the workspace's pool), then applies W_O with one GEMM.
 * Two kernels: attn__head_blas (materialised scores, the simple path; needed
 * when weights are returned) and attn__head_fused (blocked online softmax).
 */
#ifndef ATTN_FORWARD_H
#define ATTN_FORWARD_H

#include "layer_internal.h"

/* Everything a head kernel reads or writes, for the whole batch.
 *   q: (N_q, h*d_k), row stride ldq (N_q = sum of t, sequences in order)
 *   keys and values: per job (attn__head_job.k / .v), row strides ldk = h*d_k
 *   and ldv = h*d_v, both for the batch's projections and for KV caches
 *   z: concat of heads, see attn__head_job */
typedef struct attn__fwd_ctx {
    const attn_layer *layer;
    const attn_seq *seqs;
    const float *q;
    int ldq, ldk, ldv;
    float scale; /* 1/sqrt(d_k) */
    int block_q, block_k; /* fused tile: query rows per job, keys per tile */
} attn__fwd_ctx;

typedef struct attn__head_job attn__head_job;

/* A head kernel computes softmax(mask(Q_h K_hᵀ * scale)) V_h for one job (one
 * head; the driver loops over a job's n_heads). scratch: the floats
 * attn__blas_scratch_floats / attn__fused_scratch_floats asks for, 64-byte
 * aligned, private to the calling thread. Never fails (the call was validated). */
typedef void (*attn__head_kernel)(const attn__fwd_ctx *ctx, const attn__head_job *job,
                                  float *scratch);

/* Heads [head, head + n_heads) of one sequence, query rows [t0, t0 + nt).
 *   z: (T, d_v) with row stride ldz — head `head`'s columns of the concatenated
 *      output from row 0 (either scratch for W_O, or the caller's output when
 *      there is no W_O); head head+i is at z + i*d_v.
 * Jobs write disjoint parts of z, so any two may run at once, except that
 * AVERAGE weights are summed across heads: the driver gives such a sequence one
 * job with all its heads. Weights: PER_HEAD writes seq->weights + head*T*S;
 * AVERAGE adds into seq->weights (zeroed before, divided by h after). */
struct attn__head_job {
    attn__head_kernel kernel;
    int seq;     /* index into ctx->seqs */
    int head, n_heads;
    int t0, nt;  /* query rows; the materialised kernel always does all T */
    int q_row;   /* first row of this sequence in ctx->q */
    const float *k, *v; /* the sequence's key 0, head 0: (S, h*d_k) and (S, h*d_v),
                           in the batch's projections or the sequence's KV cache */
    float *z;
    int ldz;
    double cost; /* estimated work, to start the largest jobs first */
};

/* The materialised-scores kernel: scores (T, S) by sgemm, masks, stable
 * softmax per row, then sgemm with V_h. Needs T*S floats of scratch. Reads
 * all of its Q_h before it writes z, so z may alias q (same columns). */
void attn__head_blas(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch);

/* The fused kernel: rows [t0, t0+nt) (nt <= block_q) against key tiles of
 * block_k with an online softmax, accumulating into z; key tiles no row of the
 * block can see are never computed. Copies its Q block first, so z may alias q.
 * Never returns weights (jobs asking for weights use attn__head_blas). */
void attn__head_fused(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch);

/* Scratch floats a fused job needs, for any nt <= block_q. */
size_t attn__fused_scratch_floats(int block_q, int block_k, int d_k);

#endif /* ATTN_FORWARD_H */
