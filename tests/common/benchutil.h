/* benchutil.h — what the benchmark programs share: a monotonic clock, a small
 * seeded PRNG, a writer for a PyTorch-named attention model file, and a timer
 * for one attn_forward. */
#ifndef ATTN_TEST_BENCHUTIL_H
#define ATTN_TEST_BENCHUTIL_H

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

/* Median seconds of attn_forward(l, seq, 1, ws) over about `budget` seconds,
 * at least min_runs runs (at most 2000) after one warm-up; -1 on error (the
 * warm-up's message printed). */
double bench_time_forward(const attn_layer *l, const attn_seq *seq, attn_workspace *ws,
                          double budget, int min_runs);

/* The same for one call over a batch of n_seqs sequences. */
double bench_time_batch(const attn_layer *l, const attn_seq *seqs, int n_seqs, attn_workspace *ws,
                        double budget, int min_runs);

#endif
