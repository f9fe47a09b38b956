/* skinny.c — few-row projections (skinny.h): for each weight row, the dot
 * products with up to four rows of x at a time, eight lanes wide (AVX2 + FMA
 * when the CPU has them, checked at run time; a portable loop otherwise). The
 * weight row is read from memory once and from L1 for the next group of four;
 * x (at most 16 rows) stays in L1/L2. */
#include "skinny.h"

#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SKINNY_AVX2 1
#define AVX2_FN __attribute__((target("avx2,fma")))
#endif

/* Portable: out[r] = dot(w, x + r * n_in) for r < nr (nr <= 4), eight
 * partial sums per row added in a fixed order. */
static void dots_portable(const float *w, const float *x, int n_in, int nr, float out[4])
{
    float acc[4][8] = {{0}};
    int i = 0;
    for (; i + 8 <= n_in; i += 8)
        for (int r = 0; r < nr; r++)
            for (int j = 0; j < 8; j++) acc[r][j] += w[i + j] * x[(size_t)r * n_in + i + j];
    for (int r = 0; r < nr; r++) {
        float s = ((acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3])) +
                  ((acc[r][4] + acc[r][5]) + (acc[r][6] + acc[r][7]));
        for (int k = i; k < n_in; k++) s += w[k] * x[(size_t)r * n_in + k];
        out[r] = s;
    }
}

#ifdef SKINNY_AVX2
AVX2_FN static float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* The same with FMA, two accumulators per row (16 floats a step). */
AVX2_FN static void dots_avx2(const float *w, const float *x, int n_in, int nr, float out[4])
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;
    const float *x0 = x, *x1 = x + (nr > 1) * (size_t)n_in, *x2 = x + (nr > 2) * 2 * (size_t)n_in,
                *x3 = x + (nr > 3) * 3 * (size_t)n_in; /* rows past nr alias row 0: computed, unused */
    int i = 0;
    for (; i + 16 <= n_in; i += 16) {
        const __m256 w0 = _mm256_loadu_ps(w + i), w1 = _mm256_loadu_ps(w + i + 8);
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x0 + i), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x0 + i + 8), a1);
        b0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x1 + i), b0);
        b1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x1 + i + 8), b1);
        c0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x2 + i), c0);
        c1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x2 + i + 8), c1);
        d0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x3 + i), d0);
        d1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x3 + i + 8), d1);
    }
    const float sums[4] = {hsum(_mm256_add_ps(a0, a1)), hsum(_mm256_add_ps(b0, b1)), hsum(_mm256_add_ps(c0, c1)),
                           hsum(_mm256_add_ps(d0, d1))};
    for (int r = 0; r < nr; r++) {
        float s = sums[r];
        for (int k = i; k < n_in; k++) s += w[k] * x[(size_t)r * n_in + k];
        out[r] = s;
    }
}

static int have_avx2(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#endif

void attn__skinny_linear(const float *x, int rows, int n_in, const float *w, const float *b, int o0,
                         int o1, float *y, int ldy)
{
#ifdef SKINNY_AVX2
    const int avx2 = have_avx2();
#endif
    for (int o = o0; o < o1; o++) {
        const float *wo = w + (size_t)o * n_in;
        const float bias = b ? b[o] : 0.0f;
        for (int r0 = 0; r0 < rows; r0 += 4) {
            const int nr = rows - r0 < 4 ? rows - r0 : 4;
            float d[4];
#ifdef SKINNY_AVX2
            if (avx2) dots_avx2(wo, x + (size_t)r0 * n_in, n_in, nr, d);
            else
#endif
                dots_portable(wo, x + (size_t)r0 * n_in, n_in, nr, d);
            for (int r = 0; r < nr; r++) y[(size_t)(r0 + r) * ldy + o] = d[r] + bias;
        }
    }
}
