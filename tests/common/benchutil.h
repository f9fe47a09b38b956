/* benchutil.h — what the benchmark programs share: a monotonic clock, a small
 * seeded PRNG, writers for a PyTorch-named attention model file and a Hugging
 * Face Llama attention layer, a timer for one attn_forward, the machine's
 * streaming read bandwidth, the environment header every bench prints first
 * (OpenBLAS kernel, load average, what an AVX-512 sgemm would do), an sgemm
 * GFLOP/s probe, and the issue-18 target lines `make bench` tabulates. */
#ifndef ATTN_TEST_BENCHUTIL_H
#define ATTN_TEST_BENCHUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t bench_now_ns(void);

/* xorshift64: the next value in [-1, 1) from *state (any nonzero seed). */
double bench_rng_sym(uint64_t *state);

/* Writes an nn.MultiheadAttention safetensors file (E=e, `heads` heads, F32,
 * in_proj/out_proj weights and biases, PyTorch-like init scales), its values
 * drawn from *rng. Returns 0, or -1 if the file cannot be written. */
int bench_write_mha_model(const char *path, int e, int heads, uint64_t *rng);

/* Writes a Hugging Face Llama checkpoint directory holding one decoder layer's
 * attention: dir/config.json (hidden e, h query heads, g KV heads, head_dim d,
 * rope_theta 500000) and dir/model.safetensors with
 * model.layers.0.self_attn.{q,k,v,o}_proj.weight (F32, no biases), values from
 * *rng at nn.Linear's init scale. dir must exist. Returns 0 or -1. */
int bench_write_llama_layer(const char *dir, int e, int h, int g, int d, uint64_t *rng);

/* The best of 5 passes of `threads` threads (1..64) each summing its share of
 * a 1 GiB float buffer: the read bandwidth a memory-bound kernel can hope
 * for, in bytes/s; -1 when out of memory. The sums use the widest vectors
 * the CPU has (bench_stream_kind), so the loop outruns memory. */
double bench_read_bandwidth(int threads);

/* The best of `reps` such passes over p (n floats), bytes/s. */
double bench_stream_sum(const float *p, size_t n, int threads, int reps);

/* How the streaming sum runs on this CPU ("8 zmm sums", ...), for headers. */
const char *bench_stream_kind(void);

/* Median seconds of attn_forward(l, seq, 1, ws) over about `budget` seconds,
 * at least min_runs runs (at most 2000) after one warm-up; -1 on error (the
 * warm-up's message printed). */
double bench_time_forward(const attn_layer *l, const attn_seq *seq, attn_workspace *ws,
                          double budget, int min_runs);

/* The same for one call over a batch of n_seqs sequences. */
double bench_time_batch(const attn_layer *l, const attn_seq *seqs, int n_seqs, attn_workspace *ws,
                        double budget, int min_runs);

/* Call first in main(). Prints the environment the figures depend on: the
 * kernel OpenBLAS chose (openblas_get_corename/config), OPENBLAS_CORETYPE and
 * OPENBLAS_NUM_THREADS, the load average, and one-thread sgemm GFLOP/s of this
 * kernel beside the same product run with OPENBLAS_CORETYPE=SkylakeX (AVX-512)
 * in a child (this program re-executed), or why that could not be measured.
 * In that child it measures, prints "SGEMM <GF/s>" and exits instead. */
void bench_start(const char *bench_name);

/* GFLOP/s of an n x n x n cblas_sgemm on `threads` OpenBLAS threads: the best
 * of a few runs after a warm-up (the OpenBLAS thread count is restored). */
double bench_sgemm_gflops(int n, int threads);

/* GFLOP/s of `threads` threads each running FMAs on registers alone, the
 * widest the CPU has (*kind names them): the compute roof a GEMM-bound
 * kernel cannot pass, whatever library it uses; -1 without vector FMAs.
 * Best of 3, about 0.2 s. */
double bench_fma_peak_gflops(int threads, const char **kind);

/* One issue-18 target: printed as "TARGET  <target> | <measured> | <verdict>"
 * and appended as a tab-separated line to $BENCH_TARGETS when set (scripts/
 * bench.sh prints that file as the closing table). met: 1 met, 0 not met,
 * -1 not measured (measured then says why). */
void bench_target(const char *target, const char *measured, int met);

/* The 1-minute load average, or -1. */
double bench_loadavg(void);

#endif
