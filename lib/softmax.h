/* softmax.h — the numerically stable row softmax the kernels share, on a
 * vectorised exp (AVX-512, AVX2 or SSE2 where available, libm expf otherwise).
 */
#ifndef ATTN_SOFTMAX_H
#define ATTN_SOFTMAX_H

/* Stable softmax of row[lo..hi) in place: subtract the row maximum, exponentiate,
 * normalise. -inf entries (blocked keys) get weight exactly 0, and so do entries
 * outside [lo, hi), which are overwritten with 0. A row with no finite entry in
 * [lo, hi) becomes all zeros (never NaN). row has s entries; 0 <= lo, hi <= s.
 * Inputs must not be NaN or +inf (attn_forward's validation guarantees it). */
void attn__softmax_row(float *row, int s, int lo, int hi);

/* y[i] = exp(x[i] - shift) for n entries with x[i] - shift <= 0 (in place
 * allowed); returns the sum of the results. Accurate to ~2 ulp; results below
 * FLT_MIN (x[i] - shift < -87.33, including -inf) are exactly 0. */
float attn__exp_sum(const float *x, float shift, float *y, int n);

/* The same on the eight-lane AVX2 kernel even where the sixteen-lane
 * AVX-512 one exists (SSE2 without AVX2), for tests: attn__exp_sum must give
 * its bits. */
float attn__exp_sum_avx2(const float *x, float shift, float *y, int n);

/* Largest of x[0..n); -INFINITY when n == 0. */
float attn__row_max(const float *x, int n);

/* x[i] *= a for n entries. */
void attn__scale(float *x, float a, int n);

#endif /* ATTN_SOFTMAX_H */
