/* smallgemm.c — projections without sgemm (smallgemm.h): for each block of
 * 64 output columns and each block of up to SMALL_KB inputs, W's rows are
 * transposed into a (SMALL_KB, 64) panel on the stack (8 x 8 blocks in AVX
 * registers, 32 KiB: L1), then every row of x runs against it with 8
 * accumulators of 8 lanes: one broadcast of x[r][k] and eight FMAs (the
 * panel read as their memory operands) per k; with AVX-512 four rows at a
 * time share each panel load, sixteen columns a register (then two rows in
 * AVX-512VL's 32 eight-lane registers). Between input blocks a row's
 * accumulators wait in y, so each lane's sum is still the FMA chain over k
 * in order: tiles, tails, padding, the input blocks and the ISA change no
 * bit; the bias is added last. */
#include "smallgemm.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define PANEL 64    /* output columns per panel */
#define SMALL_KB 128 /* inputs per panel: 128 x 64 floats, 32 KiB */

void attn__small_linear_ref(const float *x, int rows, int n_in, const float *w, const float *b, int n_out,
                            float *y, int ldy)
{
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < n_out; o++) {
            float acc = 0.0f;
            for (int k = 0; k < n_in; k++) acc = fmaf(x[(size_t)r * n_in + k], w[(size_t)o * n_in + k], acc);
            y[(size_t)r * ldy + o] = b ? b[o] + acc : acc;
        }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AVX2_FN __attribute__((target("avx2,fma")))
/* The same eight-lane arithmetic with AVX-512VL's 32 vector registers. */
#define VL_FN __attribute__((target("avx2,fma,avx512f,avx512vl")))

int attn__small_available(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* dst[i * ldd + j] = src[j * lds + i] * scale for an 8 x 8 block (named
 * registers: arrays of them are spilled; the products ride on the loads). */
#define LOAD_ROW(i) (scaled ? _mm256_mul_ps(m, _mm256_loadu_ps(src + (i) * lds)) : _mm256_loadu_ps(src + (i) * lds))
AVX2_FN __attribute__((always_inline)) static inline void transpose8(const float *src, size_t lds, int scaled,
                                                                    float scale, float *dst, size_t ldd)
{
    const __m256 m = _mm256_set1_ps(scale);
    const __m256 r0 = LOAD_ROW(0), r1 = LOAD_ROW(1), r2 = LOAD_ROW(2), r3 = LOAD_ROW(3), r4 = LOAD_ROW(4),
                 r5 = LOAD_ROW(5), r6 = LOAD_ROW(6), r7 = LOAD_ROW(7);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
                 t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee),
                 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee),
                 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee),
                 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#undef LOAD_ROW

AVX2_FN static void transpose8_scaled(const float *src, size_t lds, float scale, float *dst, size_t ldd)
{
    transpose8(src, lds, 1, scale, dst, ldd);
}

void attn__transpose8_scaled(const float *src, size_t lds, float scale, float *dst, size_t ldd)
{
    transpose8_scaled(src, lds, scale, dst, ldd);
}

/* panel[k * PANEL + j] = w[j * ldw + k] for the nc (<= PANEL) rows of w and
 * kn (<= SMALL_KB) inputs, zeros in columns nc..PANEL. */
AVX2_FN static void pack_panel(const float *w, size_t ldw, int nc, int kn, float *panel)
{
    int j = 0;
    for (; j + 8 <= nc; j += 8) {
        int k = 0;
        for (; k + 8 <= kn; k += 8) transpose8(w + (size_t)j * ldw + k, ldw, 0, 1.0f, panel + (size_t)k * PANEL + j, PANEL);
        for (; k < kn; k++)
            for (int i = 0; i < 8; i++) panel[(size_t)k * PANEL + j + i] = w[(size_t)(j + i) * ldw + k];
    }
    for (int k = 0; k < kn && j < PANEL; k++)
        for (int i = j; i < PANEL; i++) panel[(size_t)k * PANEL + i] = i < nc ? w[(size_t)i * ldw + k] : 0.0f;
}

/* The PANEL floats a row's accumulators start from: zeros for the first
 * input block, else the nc partial sums the previous block left in y. */
static const float *row_start(const float *y, int nc, int from_y, float tmp[PANEL])
{
    static const float zeros[PANEL];
    if (!from_y) return zeros;
    if (nc == PANEL) return y;
    memset(tmp, 0, PANEL * sizeof *tmp);
    memcpy(tmp, y, (size_t)nc * sizeof *y);
    return tmp;
}

/* Declares r0..r7, a row's eight accumulators, loaded from the PANEL
 * floats at s (row_start). */
#define YMM_START(r, s)                                                                                    \
    const float *r##_start = (s);                                                                          \
    __m256 r##0 = _mm256_loadu_ps(r##_start), r##1 = _mm256_loadu_ps(r##_start + 8),                       \
           r##2 = _mm256_loadu_ps(r##_start + 16), r##3 = _mm256_loadu_ps(r##_start + 24),                 \
           r##4 = _mm256_loadu_ps(r##_start + 32), r##5 = _mm256_loadu_ps(r##_start + 40),                 \
           r##6 = _mm256_loadu_ps(r##_start + 48), r##7 = _mm256_loadu_ps(r##_start + 56)

/* One row's eight accumulators (PANEL columns) to y: nc columns, plus the
 * bias (bias: PANEL floats, or NULL). */
AVX2_FN __attribute__((always_inline)) static inline void store_row(const __m256 a[8], const float *bias, int nc, float *y)
{
    float tmp[PANEL];
    float *d = nc == PANEL ? y : tmp;
    for (int v = 0; v < 8; v++)
        _mm256_storeu_ps(d + 8 * v, bias ? _mm256_add_ps(_mm256_loadu_ps(bias + 8 * v), a[v]) : a[v]);
    if (d == tmp) memcpy(y, tmp, (size_t)nc * sizeof *y);
}

/* Row x against a panel: eight accumulators in named registers (arrays of
 * them are spilled), one broadcast and eight FMAs reading the panel a k. */
AVX2_FN static void one_row(const float *x, const float *panel, int n_in, const float *bias, int nc, float *y,
                            int from_y)
{
    float tmp[PANEL];
    YMM_START(a, row_start(y, nc, from_y, tmp));
#define SMALL_STEP(K)                                                                                      \
    do {                                                                                                   \
        const float *p = panel + (size_t)(K) * PANEL;                                                      \
        const __m256 xb = _mm256_broadcast_ss(x + (K));                                                    \
        a0 = _mm256_fmadd_ps(xb, _mm256_load_ps(p), a0);                                                   \
        a1 = _mm256_fmadd_ps(xb, _mm256_load_ps(p + 8), a1);                                               \
        a2 = _mm256_fmadd_ps(xb, _mm256_load_ps(p + 16), a2);                                              \
        a3 = _mm256_fmadd_ps(xb, _mm256_load_ps(p + 24), a3);                                              \
        a4 = _mm256_fmadd_ps(xb, _mm256_load_ps(p + 32), a4);                                              \
        a5 = _mm256_fmadd_ps(xb, _mm256_load_ps(p + 40), a5);                                              \
        a6 = _mm256_fmadd_ps(xb, _mm256_load_ps(p + 48), a6);                                              \
        a7 = _mm256_fmadd_ps(xb, _mm256_load_ps(p + 56), a7);                                              \
    } while (0)
    int k = 0;
    for (; k + 8 <= n_in; k += 8) { /* k in order: eight steps a pass, fewer loop branches */
        SMALL_STEP(k);
        SMALL_STEP(k + 1);
        SMALL_STEP(k + 2);
        SMALL_STEP(k + 3);
        SMALL_STEP(k + 4);
        SMALL_STEP(k + 5);
        SMALL_STEP(k + 6);
        SMALL_STEP(k + 7);
    }
    for (; k < n_in; k++) SMALL_STEP(k);
#undef SMALL_STEP
    const __m256 a[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
    store_row(a, bias, nc, y);
}

/* Two rows against a panel with AVX-512VL's 32 vector registers (no 512-bit
 * instruction): sixteen accumulators, each panel vector loaded once for both
 * rows, which halves the panel loads that bound one_row. Each lane sums
 * exactly as one_row's does, so the bits are the same. */
VL_FN static void two_rows_vl(const float *x0, const float *x1, const float *panel, int n_in, const float *bias,
                              int nc, float *y0, float *y1, int from_y)
{
    float t0[PANEL], t1[PANEL];
    YMM_START(a, row_start(y0, nc, from_y, t0));
    YMM_START(c, row_start(y1, nc, from_y, t1));
#define VL_PAIR(i, W)                                                                                      \
    do {                                                                                                   \
        const __m256 w_ = _mm256_load_ps(p + 8 * (i));                                                     \
        a##i = _mm256_fmadd_ps(xa, w_, a##i);                                                              \
        c##i = _mm256_fmadd_ps(xc, w_, c##i);                                                              \
    } while (0)
    for (int k = 0; k < n_in; k++) {
        const float *p = panel + (size_t)k * PANEL;
        const __m256 xa = _mm256_broadcast_ss(x0 + k), xc = _mm256_broadcast_ss(x1 + k);
        VL_PAIR(0, p);
        VL_PAIR(1, p);
        VL_PAIR(2, p);
        VL_PAIR(3, p);
        VL_PAIR(4, p);
        VL_PAIR(5, p);
        VL_PAIR(6, p);
        VL_PAIR(7, p);
    }
#undef VL_PAIR
    const __m256 a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}, c[8] = {c0, c1, c2, c3, c4, c5, c6, c7};
    store_row(a, bias, nc, y0);
    store_row(c, bias, nc, y1);
}

#define ZMM_FN __attribute__((target("avx2,fma,avx512f")))

/* 64 columns of a + bias (or not) into y, nc of them. */
ZMM_FN __attribute__((always_inline)) static inline void store_row_zmm(__m512 a0, __m512 a1, __m512 a2, __m512 a3,
                                                                      const float *bias, int nc, float *y)
{
    float tmp[PANEL];
    float *d = nc == PANEL ? y : tmp;
    const __m512 a[4] = {a0, a1, a2, a3};
    for (int v = 0; v < 4; v++)
        _mm512_storeu_ps(d + 16 * v, bias ? _mm512_add_ps(_mm512_loadu_ps(bias + 16 * v), a[v]) : a[v]);
    if (d == tmp) memcpy(y, tmp, (size_t)nc * sizeof *y);
}

/* Four rows against a panel sixteen columns a register (AVX-512F): sixteen
 * accumulators, each panel vector loaded once for the four rows. A lane is
 * one output column, summed as one_row sums it (the FMA chain over k in
 * order) and the bias added last the same way, so the bits are the same;
 * the panel loads per row and k drop from four (two_rows_vl) to one, the
 * FMAs from eight to four. */
#define ZMM_START(r, s) __m512 r##0 = _mm512_loadu_ps(s), r##1 = _mm512_loadu_ps((s) + 16), \
                               r##2 = _mm512_loadu_ps((s) + 32), r##3 = _mm512_loadu_ps((s) + 48)
ZMM_FN static void four_rows_zmm(const float *x, size_t ldx, int n_in, const float *panel, const float *bias, int nc,
                                 float *y, int ldy, int from_y)
{
    float t[4][PANEL];
    ZMM_START(a, row_start(y, nc, from_y, t[0]));
    ZMM_START(b, row_start(y + ldy, nc, from_y, t[1]));
    ZMM_START(c, row_start(y + 2 * (size_t)ldy, nc, from_y, t[2]));
    ZMM_START(d, row_start(y + 3 * (size_t)ldy, nc, from_y, t[3]));
    const float *x0 = x, *x1 = x + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
#define ZMM_COL(i)                                                                                         \
    do {                                                                                                   \
        const __m512 w_ = _mm512_loadu_ps(p + 16 * (i));                                                   \
        a##i = _mm512_fmadd_ps(xa, w_, a##i);                                                              \
        b##i = _mm512_fmadd_ps(xb, w_, b##i);                                                              \
        c##i = _mm512_fmadd_ps(xc, w_, c##i);                                                              \
        d##i = _mm512_fmadd_ps(xd, w_, d##i);                                                              \
    } while (0)
    for (int k = 0; k < n_in; k++) {
        const float *p = panel + (size_t)k * PANEL;
        const __m512 xa = _mm512_set1_ps(x0[k]), xb = _mm512_set1_ps(x1[k]), xc = _mm512_set1_ps(x2[k]),
                     xd = _mm512_set1_ps(x3[k]);
        ZMM_COL(0);
        ZMM_COL(1);
        ZMM_COL(2);
        ZMM_COL(3);
    }
#undef ZMM_COL
#undef ZMM_START
    store_row_zmm(a0, a1, a2, a3, bias, nc, y);
    store_row_zmm(b0, b1, b2, b3, bias, nc, y + ldy);
    store_row_zmm(c0, c1, c2, c3, bias, nc, y + 2 * (size_t)ldy);
    store_row_zmm(d0, d1, d2, d3, bias, nc, y + 3 * (size_t)ldy);
}

/* Columns [o0, o0 + nc) and inputs [k0, k0 + kn) against the panel of
 * them, every row: from the partial sums in y unless k0 is 0, the bias
 * (PANEL floats, or NULL) added after the last input. */
AVX2_FN static void rows_on_panel(const float *x, int rows, int n_in, int k0, int kn, const float *panel,
                                  const float *bias, int nc, float *y, int ldy, int vl)
{
    const int from_y = k0 > 0;
    const float *bl = k0 + kn == n_in ? bias : NULL;
    int r = 0;
    for (; vl && r + 4 <= rows; r += 4)
        four_rows_zmm(x + (size_t)r * n_in + k0, (size_t)n_in, kn, panel, bl, nc, y + (size_t)r * ldy, ldy, from_y);
    for (; vl && r + 2 <= rows; r += 2)
        two_rows_vl(x + (size_t)r * n_in + k0, x + (size_t)(r + 1) * n_in + k0, panel, kn, bl, nc,
                    y + (size_t)r * ldy, y + (size_t)(r + 1) * ldy, from_y);
    for (; r < rows; r++) one_row(x + (size_t)r * n_in + k0, panel, kn, bl, nc, y + (size_t)r * ldy, from_y);
}

/* vl: AVX-512 kernels allowed (AVX-512F and VL: four rows in zmm, then two
 * in ymm pairs). */
AVX2_FN static void small_avx2(const float *x, int rows, int n_in, const float *w, const float *b, int n_out,
                               float *y, int ldy, int vl)
{
    _Alignas(32) float panel[SMALL_KB * PANEL];
    float bias[PANEL];
    for (int o0 = 0; o0 < n_out; o0 += PANEL) {
        const int nc = n_out - o0 < PANEL ? n_out - o0 : PANEL;
        if (b != NULL) {
            memset(bias, 0, sizeof bias);
            memcpy(bias, b + o0, (size_t)nc * sizeof *b);
        }
        for (int k0 = 0; k0 < n_in; k0 += SMALL_KB) {
            const int kn = n_in - k0 < SMALL_KB ? n_in - k0 : SMALL_KB;
            pack_panel(w + (size_t)o0 * n_in + k0, (size_t)n_in, nc, kn, panel);
            rows_on_panel(x, rows, n_in, k0, kn, panel, b ? bias : NULL, nc, y + o0, ldy, vl);
        }
    }
}

static int have_vl(void) { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"); }

int attn__small_applies(int n_in) { return attn__small_available() && (n_in <= ATTN__SMALL_IN || have_vl()); }

void attn__small_linear(const float *x, int rows, int n_in, const float *w, const float *b, int n_out,
                        float *y, int ldy)
{
    small_avx2(x, rows, n_in, w, b, n_out, y, ldy, have_vl());
}

void attn__small_linear_avx2(const float *x, int rows, int n_in, const float *w, const float *b, int n_out,
                             float *y, int ldy)
{
    small_avx2(x, rows, n_in, w, b, n_out, y, ldy, 0);
}
#else
int attn__small_available(void) { return 0; }

int attn__small_applies(int n_in)
{
    (void)n_in;
    return 0;
}

void attn__small_linear_avx2(const float *x, int rows, int n_in, const float *w, const float *b, int n_out,
                             float *y, int ldy)
{
    attn__small_linear_ref(x, rows, n_in, w, b, n_out, y, ldy);
}

void attn__transpose8_scaled(const float *src, size_t lds, float scale, float *dst, size_t ldd)
{
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) dst[(size_t)i * ldd + j] = src[(size_t)j * lds + i] * scale;
}

void attn__small_linear(const float *x, int rows, int n_in, const float *w, const float *b, int n_out,
                        float *y, int ldy)
{
    attn__small_linear_ref(x, rows, n_in, w, b, n_out, y, ldy);
}
#endif
