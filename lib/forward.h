/* forward.h — the structure of attn_forward, shared with the compute kernels:
 * one batch context (projected Q, K, V and the concatenated head outputs) and
 * a list of jobs, each (sequence, KV head, block of query rows) with the kernel
 * to run it. attn_forward projects with three GEMMs, rotates Q and K (RoPE
 * layers), runs the jobs (on the calling thread or the workspace's pool), then
 * applies W_O with one GEMM.
 * Three kernels: attn__head_blas (materialised scores, the simple path; needed
 * when weights are returned), attn__head_fused (blocked online softmax) and,
 * for decode steps over a KV cache, attn__head_decode (decode.h: one job per
 * group of KV heads and key chunk, split-KV partials merged after the jobs).
 * Grouped-query attention: a job owns one KV head and computes all r = h/g
 * query heads that read it (HF repeat_kv: query head i reads KV head i / r),
 * their query rows stacked into one GEMM against each K/V block, so every K/V
 * block is read once per group, never once per query head.
 */
#ifndef ATTN_FORWARD_H
#define ATTN_FORWARD_H

#include "layer_internal.h"

/* Everything a head kernel reads or writes, for the whole batch.
 *   q: (N_q, h*d_k), row stride ldq (N_q = sum of t, sequences in order)
 *   keys and values: per job (attn__head_job.k / .v), row strides ldk = g*d_k
 *   and ldv = g*d_v, both for the batch's projections and for KV caches
 *   z: concat of the h query heads, see attn__head_job */
typedef struct attn__fwd_ctx {
    const attn_layer *layer;
    const attn_seq *seqs;
    const float *q;
    int ldq, ldk, ldv;
    float scale; /* 1/sqrt(d_k) */
    int block_q, block_k; /* fused tile: query rows per job, keys per tile */
} attn__fwd_ctx;

/* The streamed plan (forward.c, long contexts) hands the fused kernel one
 * pass of a few KV heads at a time as if the layer had only those: kv_head
 * counts from the pass's first KV head, ctx->q / k / v / z hold only the
 * pass's columns (ldq, ldk, ldv, ldz their widths), and ctx->seqs is a view
 * of a chunk of query rows: t = the chunk's rows, cache_k / cache_v = the
 * pass's K / V (contiguous float32, so attn__kv_is_plain), cache_len = the
 * chunk's first row with cache_append = 1 (attn__mask_query_pos places the
 * rows), a (T, S) attn_mask advanced to that row, never a per-head one. So
 * the fused kernel must read K/V through job->k / job->v, masks and
 * positions through mask.h on its sequence, and use kv_head only as a head
 * offset into q, k, v and z (and the mask plane). */
typedef struct attn__head_job attn__head_job;

/* A head kernel computes softmax(mask(Q_i K_jᵀ * scale)) V_j for the r query
 * heads i of one KV head j (the driver loops over a job's n_kv_heads).
 * scratch: the floats attn__blas_scratch_floats / attn__fused_scratch_floats
 * asks for, 64-byte aligned, private to the calling thread. Never fails (the
 * call was validated). */
typedef void (*attn__head_kernel)(const attn__fwd_ctx *ctx, const attn__head_job *job,
                                  float *scratch);

/* KV heads [kv_head, kv_head + n_kv_heads) of one sequence — query heads
 * [kv_head * r, (kv_head + n_kv_heads) * r) — query rows [t0, t0 + nt).
 *   z: (T, h*d_v) with row stride ldz — query head 0's columns of the
 *      concatenated output from row 0 (either scratch for W_O, or the caller's
 *      output when there is no W_O); query head i is at z + i*d_v.
 * Jobs write disjoint parts of z, so any two may run at once, except that
 * AVERAGE weights are summed across heads: the driver gives such a sequence one
 * job with all its heads. Weights: PER_HEAD writes seq->weights + i*T*S for
 * query head i; AVERAGE adds into seq->weights (zeroed before, divided by h
 * after). */
struct attn__head_job {
    attn__head_kernel kernel;
    int seq;     /* index into ctx->seqs */
    int kv_head, n_kv_heads;
    int t0, nt;  /* query rows; the materialised kernel always does all T */
    int q_row;   /* first row of this sequence in ctx->q */
    const float *k, *v; /* the sequence's key 0, KV head 0: (S, g*d_k) and (S, g*d_v),
                           in the batch's projections or the sequence's KV cache */
    float *z;
    int ldz;
    double cost; /* estimated work, to start the largest jobs first */
    /* The decode kernel (decode.h) only: the job covers KV heads [kv_head,
     * kv_head + heads) (n_kv_heads stays 1: one kernel call) and key chunk
     * `chunk` of n_chunks (1 = unsplit); a split job leaves its partial at
     * part (chunk c's at c * attn__decode_part_floats after chunk 0's). */
    int heads, chunk, n_chunks;
    float *part;
};

/* The materialised-scores kernel: the group's r query heads stacked into one
 * (r*T, d_k) block, scores (r*T, S) by one sgemm against K_j, masks, stable
 * softmax per row, then one sgemm with V_j. Reads all of its Q before it
 * writes z, so z may alias q (same columns). */
void attn__head_blas(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch);

/* Scratch floats a materialised job needs (r = h/g query heads per KV head);
 * gather = 1 adds room for the S keys and values of one KV head, converted
 * from a paged or compact cache. */
size_t attn__blas_scratch_floats(int r, int t, int s, int d_k, int d_v, int gather);

/* The fused kernel: rows [t0, t0+nt) (nt <= block_q) of the group's r query
 * heads, stacked into r*nt rows, against key tiles of block_k with an online
 * softmax; each K/V tile is read once for the whole group. Key tiles no row
 * of the block can see are never computed. Copies its Q block first, so z may
 * alias q. Never returns weights (jobs asking for weights use attn__head_blas). */
void attn__head_fused(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch);

/* Scratch floats a fused job needs, for any nt <= block_q; gather = 1 adds one
 * K and one V tile for sequences whose cache is paged or not float32. */
size_t attn__fused_scratch_floats(int r, int block_q, int block_k, int d_k, int d_v, int gather);

/* For benchmarks and tests: the bytes of K and V the head kernels of this
 * forward call would stream (each job reads each K/V row of the key range it
 * visits once, d_k + d_v elements of the cache's dtype per KV head), without
 * computing anything.
 * Same validation as attn_forward; uses ws (NULL = default options) only to
 * plan. */
attn_status attn__forward_kv_bytes(const attn_layer *layer, const attn_seq *seqs, int n_seqs,
                                   attn_workspace *ws, uint64_t *bytes, attn_error *err);

/* 1 when column chunks of a projection (COL_ALIGN multiples of W's rows,
 * each over OpenBLAS's small-matrix bound) give the bits of the whole sgemm on
 * the OpenBLAS kernel in use, measured by two probe GEMMs on the calling
 * thread (OpenBLAS single-threaded, as the pool's tasks run it); 0 when they
 * do not, or the probe's memory cannot be had. Pure: no state kept. */
int attn__col_split_exact(void);

#endif /* ATTN_FORWARD_H */
