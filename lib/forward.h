/* forward.h — the structure of attn_forward, shared with the compute kernels:
 * one batch context (projected Q, K, V and the concatenated head outputs) and
 * one job per (sequence, head). attn_forward projects with three GEMMs, runs
 * every job through a head kernel, then applies W_O with one GEMM.
 *
 * Adding a compute path (a fused online-softmax kernel, a thread pool) means
 * writing another attn__head_kernel and/or running the job list differently;
 * the projections, validation and output stages stay as they are.
 */
#ifndef ATTN_FORWARD_H
#define ATTN_FORWARD_H

#include "layer_internal.h"

/* Everything a head kernel reads or writes, for the whole batch.
 *   q: (N_q,  h*d_k), row stride ldq     k: (N_kv, h*d_k), row stride ldk
 *   v: (N_kv, h*d_v), row stride ldv     z: concat of heads, see attn__head_job
 * N_q = sum of t, N_kv = sum of s, sequences in order. */
typedef struct attn__fwd_ctx {
    const attn_layer *layer;
    const attn_seq *seqs;
    const float *q, *k, *v;
    int ldq, ldk, ldv;
    float scale; /* 1/sqrt(d_k) */
} attn__fwd_ctx;

/* One (sequence, head) of the batch.
 *   z: (T, d_v) with row stride ldz — this head's columns of the concatenated
 *      output (either scratch for W_O, or the caller's output when there is no W_O).
 * Weights: PER_HEAD writes seq->weights + head*T*S; AVERAGE adds this head's
 * weights into seq->weights (zeroed by the driver, divided by h afterwards), so
 * AVERAGE jobs of one sequence must not run concurrently. */
typedef struct attn__head_job {
    int seq;     /* index into ctx->seqs */
    int head;
    int q_row;   /* first row of this sequence in ctx->q */
    int kv_row;  /* first row of this sequence in ctx->k and ctx->v */
    float *z;
    int ldz;
} attn__head_job;

/* A head kernel computes softmax(mask(Q_h K_hᵀ * scale)) V_h for one job.
 * scratch: at least attn__head_scratch_floats(ctx, job) floats, 64-byte aligned,
 * private to the calling thread. Never fails (the call was validated). */
typedef void (*attn__head_kernel)(const attn__fwd_ctx *ctx, const attn__head_job *job,
                                  float *scratch);

/* The materialised-scores kernel: scores (T, S) by sgemm, masks, stable
 * softmax per row, then sgemm with V_h. Needs T*S floats of scratch. */
void attn__head_blas(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch);

#endif /* ATTN_FORWARD_H */
