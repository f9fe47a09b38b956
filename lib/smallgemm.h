/* smallgemm.h — projections of more than ATTN__SKINNY_MAX rows without
 * sgemm: y = x Wᵀ (+ b) with W packed 64 columns x 128 inputs at a time on
 * the stack, each panel reused by every row, and a register-blocked kernel.
 * For narrow layers (inputs up to 128 wide: one short request, or a batch
 * of them) on any AVX2 CPU, where OpenBLAS's packing and call overhead are
 * most of the cost (T = 32, E = 64: 48k instructions per projection under
 * callgrind, against ~25k here); on AVX-512 CPUs for any width, where its
 * four-row zmm kernel runs at ~95 % of the FMA peak (one thread, 1024 x 512
 * -> 1536: 250 GFLOP/s, against 127 for OpenBLAS's Haswell kernel and ~242
 * for its SkylakeX one). Each output is (b[o] +) the FMA chain over k in
 * order from zero — what OpenBLAS's non-small SkylakeX / Cooperlake kernel
 * computes — whatever the CPU. Library-internal. */
#ifndef ATTN_SMALLGEMM_H
#define ATTN_SMALLGEMM_H

#include <stddef.h>

/* The widest inputs the kernel takes on AVX2-only CPUs: their one- and
 * two-row kernels read the panel once per row, half the rate of OpenBLAS's
 * kernel, which is faster for wider inputs. Any number of rows: callers
 * split the rows of a batch over threads, and a row's bits do not depend on
 * which rows share the call. */
#define ATTN__SMALL_IN 128

/* 1 when this CPU runs the small kernel (AVX2 + FMA); otherwise the caller
 * uses sgemm. */
int attn__small_available(void);

/* 1 when the kernel is the faster one for inputs n_in wide on this CPU:
 * n_in <= ATTN__SMALL_IN with AVX2 + FMA, any n_in with AVX-512F + VL. */
int attn__small_applies(int n_in);

/* y (rows, ldy) = x (rows, n_in) Wᵀ + b, W: (n_out, n_in) float32 row-major,
 * b: (n_out) or NULL; rows >= 1, n_in >= 1.
 * Needs attn__small_available(). */
void attn__small_linear(const float *x, int rows, int n_in, const float *w, const float *b, int n_out,
                        float *y, int ldy);

/* The same on the AVX2 kernel alone whatever the CPU (for tests: the path of
 * CPUs without AVX-512VL). Needs attn__small_available(). */
void attn__small_linear_avx2(const float *x, int rows, int n_in, const float *w, const float *b, int n_out,
                             float *y, int ldy);

/* The same arithmetic in scalar fmaf (the reference of the tests). */
void attn__small_linear_ref(const float *x, int rows, int n_in, const float *w, const float *b, int n_out,
                            float *y, int ldy);

/* dst[i * ldd + j] = src[j * lds + i] * scale for i, j < 8 (an 8 x 8 block
 * in AVX registers; also flash.c's query packing). Needs
 * attn__small_available(). */
void attn__transpose8_scaled(const float *src, size_t lds, float scale, float *dst, size_t ldd);

#endif
