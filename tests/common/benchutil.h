/* benchutil.h — what the benchmark programs share: a monotonic clock, a small
 * seeded PRNG, and a writer for a PyTorch-named attention model file. */
#ifndef ATTN_TEST_BENCHUTIL_H
#define ATTN_TEST_BENCHUTIL_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t bench_now_ns(void);

/* xorshift64: the next value in [-1, 1) from *state (any nonzero seed). */
double bench_rng_sym(uint64_t *state);

/* Writes an nn.MultiheadAttention safetensors file (E=e, `heads` heads, F32,
 * in_proj/out_proj weights and biases, PyTorch-like init scales), its values
 * drawn from *rng. Returns 0, or -1 if the file cannot be written. */
int bench_write_mha_model(const char *path, int e, int heads, uint64_t *rng);

#endif
