/* decode.h — the decode kernel: a sequence with a few query rows (T <=
 * ATTN__DECODE_MAX_T) over a KV cache. One job covers a group of KV heads
 * (all g unless the batch is too small to keep the threads busy) and a key
 * chunk (all keys unless split); it goes through the cache in one pass, each
 * K and V row read once and whole (the group's heads are adjacent in a row:
 * one KV head alone would be a strided read the prefetchers follow poorly),
 * computing the r = h/g query heads of every KV head for the T rows, with
 * F16 / BF16 / INT8 converted in registers inside the dot products and axpys
 * (AVX2 + FMA + F16C when the CPU has them, portable C otherwise) and an
 * online softmax. Split-KV: a chunk leaves a partial (max, sum, accumulator
 * per row) that attn__decode_merge combines exactly (log-sum-exp).
 * Library-internal.
 */
#ifndef ATTN_DECODE_H
#define ATTN_DECODE_H

#include "forward.h"

#define ATTN__DECODE_MAX_T 8

/* 1 when seq s (already known to take the fused path) runs the decode kernel:
 * it reads a KV cache and has at most ATTN__DECODE_MAX_T query rows. */
int attn__decode_applies(const attn_seq *s);

/* How decode sequence s is cut into jobs, given the decode sequences of the
 * whole batch and the workspace's threads: *heads KV heads per job (g, or
 * fewer) and *chunks key chunks (each >= ATTN__DECODE_SPLIT_MIN keys). One
 * job per sequence unless n_seqs < 2 * n_threads; then each sequence in
 * n_threads / gcd(n_seqs, n_threads) jobs, so every thread gets as many:
 * keys are split first (rows stay whole), heads only if the keys are too
 * few. Depends on the batch and n_threads only, never on timing, so a
 * workspace's results are reproducible. */
#define ATTN__DECODE_SPLIT_MIN 256
void attn__decode_split(const attn_layer *l, const attn_seq *s, int n_seqs, int n_threads, int *heads,
                        int *chunks);

/* Scratch floats of one decode job (t rows, `heads` KV heads); floats of
 * the partial one chunk of a split job leaves (a multiple of 16). */
size_t attn__decode_scratch_floats(const attn_layer *l, int t, int heads);
size_t attn__decode_part_floats(const attn_layer *l, int t, int heads);

/* The kernel (an attn__head_kernel). job->t0 = 0, nt = T, KV heads
 * [kv_head, kv_head + heads); n_chunks > 1: computes key chunk job->chunk
 * into job->part (z is written by attn__decode_merge). */
void attn__head_decode(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch);

/* The keys [*lo, *hi) a decode job reads (its chunk's share of the keys its
 * rows may see); empty when *hi <= *lo. */
void attn__decode_keys(const attn_seq *s, const attn__head_job *job, int *lo, int *hi);

/* After every job has run: each split job's chunk partials combined into
 * its z rows (chunk 0 of each group does it; other jobs are ignored). */
void attn__decode_merge(const attn__fwd_ctx *ctx, const attn__head_job *jobs, int n_jobs);

/* Tests only: nonzero forces the portable kernel on CPUs with AVX2. */
extern int attn__decode_portable_only;

/* Tests only: nonzero keeps the AVX2 kernel on CPUs with AVX-512. */
extern int attn__decode_no_avx512;

/* Benches and tests only (0: the defaults): bytes of V rows (all the job's
 * heads) per axpy sub-block, and how many keys ahead the passes prefetch
 * (the pipelined tiles: each its own stream into L2; the three-phase ones:
 * the K rows; < 0: no software prefetch), and (attn__decode_cross < 0: off)
 * whether the passes prefetch into L2 at all. None changes any result: a
 * key's arithmetic does not depend on its sub-block. */
extern int attn__decode_sub_bytes, attn__decode_k_ahead, attn__decode_cross;

/* Tests and benches only: 0 (the default) computes an INT8 cache's scores
 * on int8 queries, by the best integer kernel the CPU has (AVX-512 VNNI,
 * AVX2, portable: the same bits); > 0 by the portable one; < 0 on float
 * queries (the float kernels the other dtypes use, for A/B). */
extern int attn__decode_int8_queries;

/* Benches and tests only: nonzero runs the previous kernel (three phases per
 * tile, burst prefetches, two-key scores), for in-run A/B; same results. */
extern int attn__decode_three_phase;

#endif /* ATTN_DECODE_H */
