/* skinny.h — the projections of a batch of few rows (decode: a handful of
 * streams, one new position each): y = x Wᵀ (+ b) reading each weight row
 * once for every row of x. OpenBLAS's sgemm packs the whole of W for such
 * shapes (about three times the memory traffic of one read) and its sgemv
 * takes one row, so for rows <= ATTN__SKINNY_MAX the library uses this
 * instead, split over output columns so that each thread streams its own
 * share of W. Each output is one dot product computed the same way however
 * the columns are split: results do not depend on the thread count.
 * Library-internal. */
#ifndef ATTN_SKINNY_H
#define ATTN_SKINNY_H

#include "attn.h"

#define ATTN__SKINNY_MAX 16

/* Columns [o0, o1) of y (rows, ldy) = x (rows, n_in) Wᵀ + b, W: (n_out, n_in)
 * row-major of element type wdtype (an attn_weight_dtype: F32 float, F16 /
 * BF16 uint16_t bits, widened exactly), b: (n_out) or NULL. rows in
 * 1..ATTN__SKINNY_MAX. The same widened weights give the same bits whatever
 * their dtype. */
void attn__skinny_linear(const float *x, int rows, int n_in, const void *w, int wdtype, const float *b,
                         int o0, int o1, float *y, int ldy);

/* The same on the one-weight-row AVX2 kernels even where kernels taking two
 * or four weight rows a pass exist (for tests: those must give these bits);
 * the portable kernel without AVX2. */
void attn__skinny_linear_avx2(const float *x, int rows, int n_in, const void *w, int wdtype, const float *b,
                              int o0, int o1, float *y, int ldy);

/* The same on the portable kernel whatever the CPU (for tests: the path of
 * CPUs without AVX2 / FMA / F16C). */
void attn__skinny_linear_portable(const float *x, int rows, int n_in, const void *w, int wdtype,
                                  const float *b, int o0, int o1, float *y, int ldy);

#endif
