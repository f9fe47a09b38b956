/* softmax.c — row softmax for the attention kernels (see softmax.h). exp is the
 * Cephes single-precision polynomial evaluated four lanes at a time with SSE2,
 * which x86-64 always has, or eight at a time with AVX2 when the CPU has it
 * (chosen at run time, same rounding); libm's scalar expf was most of the BLAS
 * path's time at long sequences (32M exps per 2048-token forward).
 */
#include "softmax.h"

#include <math.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>

/* exp(x) for 4 lanes, x <= 0 (or NaN-free and <= 88). Cephes expf: x = n ln2 + r,
 * |r| <= ln2/2, exp(r) by a degree-6 polynomial, times 2^n via the exponent bits. */
static inline __m128 exp4(__m128 x)
{
    const __m128 lo = _mm_set1_ps(-87.33654f); /* below: exp(x) < FLT_MIN -> 0 */
    __m128 underflow = _mm_cmplt_ps(x, lo);
    x = _mm_min_ps(_mm_max_ps(x, lo), _mm_set1_ps(88.37626f));
    __m128i n = _mm_cvtps_epi32(_mm_mul_ps(x, _mm_set1_ps(1.44269504088896341f)));
    __m128 nf = _mm_cvtepi32_ps(n);
    __m128 r = _mm_sub_ps(x, _mm_mul_ps(nf, _mm_set1_ps(0.693359375f)));
    r = _mm_add_ps(r, _mm_mul_ps(nf, _mm_set1_ps(2.12194440e-4f)));
    __m128 p = _mm_set1_ps(1.9875691500e-4f);
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.3981999507e-3f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(8.3334519073e-3f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(4.1665795894e-2f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.6666665459e-1f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(5.0000001201e-1f));
    p = _mm_add_ps(_mm_mul_ps(_mm_mul_ps(p, r), r), _mm_add_ps(r, _mm_set1_ps(1.0f)));
    __m128 pow2n = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(n, _mm_set1_epi32(127)), 23));
    return _mm_andnot_ps(underflow, _mm_mul_ps(p, pow2n));
}

static float exp_sum_sse(const float *x, float shift, float *y, int n)
{
    __m128 acc = _mm_setzero_ps(), m = _mm_set1_ps(shift);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        __m128 e = exp4(_mm_sub_ps(_mm_loadu_ps(x + j), m));
        _mm_storeu_ps(y + j, e);
        acc = _mm_add_ps(acc, e);
    }
    float lanes[4];
    _mm_storeu_ps(lanes, acc);
    float sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    if (j < n) { /* tail through the same polynomial, so every entry agrees */
        float tx[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, ty[4];
        memcpy(tx, x + j, (size_t)(n - j) * sizeof *tx);
        _mm_storeu_ps(ty, exp4(_mm_sub_ps(_mm_loadu_ps(tx), m)));
        for (int k = 0; k < n - j; k++) y[j + k] = ty[k], sum += ty[k];
    }
    return sum;
}

static float row_max_sse(const float *x, int n)
{
    __m128 m4 = _mm_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 4 <= n; j += 4) m4 = _mm_max_ps(m4, _mm_loadu_ps(x + j));
    float lanes[4];
    _mm_storeu_ps(lanes, m4);
    float m = fmaxf(fmaxf(lanes[0], lanes[1]), fmaxf(lanes[2], lanes[3]));
    for (; j < n; j++) m = fmaxf(m, x[j]);
    return m;
}

static void scale_sse(float *x, float a, int n)
{
    __m128 a4 = _mm_set1_ps(a);
    int j = 0;
    for (; j + 4 <= n; j += 4) _mm_storeu_ps(x + j, _mm_mul_ps(_mm_loadu_ps(x + j), a4));
    for (; j < n; j++) x[j] *= a;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same Cephes polynomial eight lanes at a time with AVX2 (vexp.h), compiled for AVX2
 * by attribute (the build has no -march) and chosen at run time. Plain mul/add,
 * no FMA, in the same order: every exp rounds exactly as exp4's does; only the
 * order of the returned sum differs (8 partial sums instead of 4). */
#include "vexp.h"
#define ATTN__AVX2 __attribute__((target("avx2")))

/* Eight lanes at a time from entry j on, added to the eight partial sums
 * acc holds; then those reduced in a fixed order and the tail (< 8) by
 * exp_sum_sse. */
ATTN__AVX2 static float exp_sum8_from(const float *x, float shift, float *y, int n, int j, __m256 acc)
{
    const __m256 m = _mm256_set1_ps(shift);
    for (; j + 8 <= n; j += 8) {
        __m256 e = attn__exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), m));
        _mm256_storeu_ps(y + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    float sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
                ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    return j < n ? sum + exp_sum_sse(x + j, shift, y + j, n - j) : sum;
}

ATTN__AVX2 static float exp_sum_avx2(const float *x, float shift, float *y, int n)
{
    return exp_sum8_from(x, shift, y, n, 0, _mm256_setzero_ps());
}

/* exp_sum_avx2 sixteen lanes at a time (AVX-512F): attn__exp16 is
 * attn__exp8 lane by lane, and the two halves of each sixteen are added to
 * the eight-lane sum in exp_sum_avx2's order (lanes j.. then j + 8..), so
 * the results and the sum are its bits, in about half the instructions. */
#define ATTN__AVX512 __attribute__((target("avx2,avx512f")))
ATTN__AVX512 static float exp_sum_avx512(const float *x, float shift, float *y, int n)
{
    __m256 acc = _mm256_setzero_ps();
    const __m512 m = _mm512_set1_ps(shift);
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m512 e = attn__exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), m));
        _mm512_storeu_ps(y + j, e);
        acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
        acc = _mm256_add_ps(acc, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
    }
    return exp_sum8_from(x, shift, y, n, j, acc); /* at most one eight left, then the tail */
}

ATTN__AVX2 static float row_max_avx2(const float *x, int n)
{
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(x + j));
    float lanes[8];
    _mm256_storeu_ps(lanes, m8);
    float m = -INFINITY;
    for (int k = 0; k < 8; k++) m = fmaxf(m, lanes[k]);
    return j < n ? fmaxf(m, row_max_sse(x + j, n - j)) : m;
}

ATTN__AVX2 static void scale_avx2(float *x, float a, int n)
{
    __m256 a8 = _mm256_set1_ps(a);
    int j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), a8));
    for (; j < n; j++) x[j] *= a;
}

static int use_avx2(void) { return __builtin_cpu_supports("avx2"); }
static int use_avx512(void) { return __builtin_cpu_supports("avx512f"); }
#else
static int use_avx2(void) { return 0; }
static int use_avx512(void) { return 0; }
#define exp_sum_avx2 exp_sum_sse
#define exp_sum_avx512 exp_sum_sse
#define row_max_avx2 row_max_sse
#define scale_avx2 scale_sse
#endif

float attn__exp_sum(const float *x, float shift, float *y, int n)
{
    if (use_avx512()) return exp_sum_avx512(x, shift, y, n);
    return use_avx2() ? exp_sum_avx2(x, shift, y, n) : exp_sum_sse(x, shift, y, n);
}

float attn__exp_sum_avx2(const float *x, float shift, float *y, int n)
{
    return use_avx2() ? exp_sum_avx2(x, shift, y, n) : exp_sum_sse(x, shift, y, n);
}

float attn__row_max(const float *x, int n)
{
    return use_avx2() ? row_max_avx2(x, n) : row_max_sse(x, n);
}

void attn__scale(float *x, float a, int n)
{
    if (use_avx2()) scale_avx2(x, a, n);
    else scale_sse(x, a, n);
}

#else /* portable fallback */

float attn__exp_sum(const float *x, float shift, float *y, int n)
{
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
        float d = x[j] - shift;
        y[j] = d < -87.33654f ? 0.0f : expf(d);
        sum += y[j];
    }
    return sum;
}

float attn__exp_sum_avx2(const float *x, float shift, float *y, int n) { return attn__exp_sum(x, shift, y, n); }

float attn__row_max(const float *x, int n)
{
    float m = -INFINITY;
    for (int j = 0; j < n; j++) m = fmaxf(m, x[j]);
    return m;
}

void attn__scale(float *x, float a, int n)
{
    for (int j = 0; j < n; j++) x[j] *= a;
}

#endif

void attn__softmax_row(float *row, int s, int lo, int hi)
{
    float *x = row + lo;
    int n = hi > lo ? hi - lo : 0;
    float m = attn__row_max(x, n);
    if (!(m > -INFINITY)) { /* nothing visible: zero weights, never NaN */
        memset(row, 0, (size_t)s * sizeof *row);
        return;
    }
    /* x - m <= 0 and blocked keys stay -inf; sum >= 1 as the maximum gives exp(0) */
    attn__scale(x, 1.0f / attn__exp_sum(x, m, x, n), n);
    if (lo > 0) memset(row, 0, (size_t)lo * sizeof *row);
    if (hi < s) memset(row + hi, 0, (size_t)(s - hi) * sizeof *row);
}
