/* decode.h — the decode kernel: a sequence with a few query rows (T <=
 * ATTN__DECODE_MAX_T) over a KV cache, one job per (sequence, KV head[, key
 * chunk]). The r = h/g query heads of the KV head and the T rows go through
 * the cache in one pass, each K and V row read once, F16 / BF16 / INT8
 * converted in registers inside the dot products and axpys (AVX2 + FMA +
 * F16C when the CPU has them, portable C otherwise), with an online softmax.
 * Split-KV: when a batch has too few (sequence, KV head) jobs to keep the
 * workspace's threads busy and caches are long, a job's keys are cut into
 * chunks run as separate jobs, each leaving a partial (max, sum, accumulator)
 * that attn__decode_merge combines exactly (log-sum-exp). Library-internal.
 */
#ifndef ATTN_DECODE_H
#define ATTN_DECODE_H

#include "forward.h"

#define ATTN__DECODE_MAX_T 8

/* 1 when seq s (already known to take the fused path) runs the decode kernel:
 * it reads a KV cache and has at most ATTN__DECODE_MAX_T query rows. */
int attn__decode_applies(const attn_seq *s);

/* Key chunks for each (sequence, KV head) job of decode sequence s, given the
 * decode jobs of the whole batch (n_jobs, unsplit) and the workspace's
 * threads: 1 unless n_jobs < 2 * n_threads and s is long enough that every
 * chunk keeps >= ATTN__DECODE_SPLIT_MIN keys. Depends on the batch and
 * n_threads only, never on timing. */
#define ATTN__DECODE_SPLIT_MIN 1024
int attn__decode_chunks(const attn_seq *s, int n_jobs, int n_threads);

/* Scratch floats of one decode job of a sequence with t rows; floats of the
 * partial one chunk of a split job leaves (multiple of 16). */
size_t attn__decode_scratch_floats(const attn_layer *l, int t);
size_t attn__decode_part_floats(const attn_layer *l, int t);

/* The kernel (an attn__head_kernel). job->t0 = 0, nt = T; job->n_chunks > 1:
 * computes chunk job->chunk of the keys into job->part (no z written). */
void attn__head_decode(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch);

/* The keys [*lo, *hi) a decode job reads (its chunk's share of the keys its
 * rows may see); empty when *hi <= *lo. */
void attn__decode_keys(const attn_seq *s, const attn__head_job *job, int *lo, int *hi);

/* After every job has run: each split job's chunk partials combined into
 * its z rows (chunk 0 of each group does it; other jobs are ignored). */
void attn__decode_merge(const attn__fwd_ctx *ctx, const attn__head_job *jobs, int n_jobs);

/* Tests only: nonzero forces the portable kernel on CPUs with AVX2. */
extern int attn__decode_portable_only;

#endif /* ATTN_DECODE_H */
