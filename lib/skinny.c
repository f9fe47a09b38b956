/* skinny.c — few-row projections (skinny.h): for each weight row, the dot
 * products with up to four rows of x at a time, eight lanes wide (AVX2 + FMA
 * when the CPU has them, checked at run time; a portable loop otherwise). The
 * weight row is read from memory once and from L1 for the next group of four;
 * x (at most 16 rows) stays in L1/L2. For 5..16 rows on AVX2 CPUs two
 * weight rows share each pass over x, in k blocks that keep both weight
 * rows in L1 (PAIRS_AVX2: x from L2 at half the rate; 16 rows 1.1-1.3x
 * faster on a Zen 3 core, same bits). On CPUs with AVX-512VL (32 vector
 * registers) four weight rows share each pass over x, in sixteen-lane
 * registers whose two halves are the eight-lane kernel's two accumulators
 * (DOTS4_ZMM: half the instructions and a quarter of the x traffic from L2
 * that bounds the one-weight-row kernel at 16 rows; the two-weight-row
 * DOTS2_VL takes the last rows of W); the arithmetic per output is the
 * one-row kernel's, so the bits do not change (test_skinny). A lone row
 * (a single decode step) goes four weight rows (eight of 2-byte weights) a
 * pass the same way on those CPUs (DOT1XN_ZMM: that many weight streams and
 * independent FMA chains); four rows made bench_decode's 16-layer step
 * 10 % (F32) to 17 % (BF16 weights) faster where its weights come from
 * DRAM; one layer's weights in L3 measured the same. F16 / BF16 weights are read as stored
 * (half the bytes) and widened in registers — BF16: the zero-extended 16-bit
 * words shifted left by 16; F16: vcvtph2ps (F16C) — then summed exactly as
 * float32 weights are, so the results are bit-identical to those of a float32
 * layer holding the widened values. */
#include "skinny.h"

#include "half.h"

#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SKINNY_AVX2 1
#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
/* The same eight-lane arithmetic with AVX-512VL's 32 vector registers: room
 * for two weight rows' accumulators at once (no 512-bit instruction used; the
 * AVX2 helpers inline into it, their target being a subset of this one). */
#define VL_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512vl")))
/* Sixteen-lane registers (AVX-512F): four weight rows a pass, each pair's
 * two eight-lane accumulators the halves of one register. */
#define ZMM_FN __attribute__((target("avx2,fma,f16c,avx512f")))
#endif

/* Portable: out[r] = dot(w, x + r * n_in) for r < nr (nr <= 4), eight
 * partial sums per row added in a fixed order. The weights, of type wdtype,
 * are widened eight at a time (exact), so every dtype sums the same floats. */
static void dots_portable(const void *w, int wdtype, const float *x, int n_in, int nr, float out[4])
{
    float acc[4][8] = {{0}}, wf[8];
    int i = 0;
    for (; i + 8 <= n_in; i += 8) {
        for (int j = 0; j < 8; j++) wf[j] = attn__w_get(w, wdtype, (size_t)i + j);
        for (int r = 0; r < nr; r++)
            for (int j = 0; j < 8; j++) acc[r][j] += wf[j] * x[(size_t)r * n_in + i + j];
    }
    for (int r = 0; r < nr; r++) {
        float s = ((acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3])) +
                  ((acc[r][4] + acc[r][5]) + (acc[r][6] + acc[r][7]));
        for (int k = i; k < n_in; k++) s += attn__w_get(w, wdtype, (size_t)k) * x[(size_t)r * n_in + k];
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

/* Eight weights from w + i, widened. */
AVX2_FN static inline __m256 load_f32(const void *w, int i) { return _mm256_loadu_ps((const float *)w + i); }
AVX2_FN static inline __m256 load_bf16(const void *w, int i)
{
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
AVX2_FN static inline __m256 load_f16(const void *w, int i)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
}

/* The same with FMA, two accumulators per row (16 weights a step); one copy
 * per weight dtype, differing only in how eight weights are loaded. */
#define DOTS_AVX2(NAME, LOAD)                                                                              \
    AVX2_FN static void NAME(const void *w, int wdtype, const float *x, int n_in, int nr, float out[4])    \
    {                                                                                                      \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;    \
        const float *x0 = x, *x1 = x + (nr > 1) * (size_t)n_in, *x2 = x + (nr > 2) * 2 * (size_t)n_in,     \
                    *x3 = x + (nr > 3) * 3 * (size_t)n_in; /* rows past nr alias row 0: computed, unused */ \
        int i = 0;                                                                                         \
        for (; i + 16 <= n_in; i += 16) {                                                                  \
            const __m256 w0 = LOAD(w, i), w1 = LOAD(w, i + 8);                                             \
            a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x0 + i), a0);                                         \
            a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x0 + i + 8), a1);                                     \
            b0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x1 + i), b0);                                         \
            b1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x1 + i + 8), b1);                                     \
            c0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x2 + i), c0);                                         \
            c1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x2 + i + 8), c1);                                     \
            d0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x3 + i), d0);                                         \
            d1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x3 + i + 8), d1);                                     \
        }                                                                                                  \
        const float sums[4] = {hsum(_mm256_add_ps(a0, a1)), hsum(_mm256_add_ps(b0, b1)),                   \
                               hsum(_mm256_add_ps(c0, c1)), hsum(_mm256_add_ps(d0, d1))};                  \
        for (int r = 0; r < nr; r++) {                                                                     \
            float s = sums[r];                                                                             \
            for (int k = i; k < n_in; k++) s += attn__w_get(w, wdtype, (size_t)k) * x[(size_t)r * n_in + k]; \
            out[r] = s;                                                                                    \
        }                                                                                                  \
    }

/* One row (a lone decode step): row 0's arithmetic of the above, exactly
 * (same two accumulators, same order), without the three aliased rows. */
#define DOT1_AVX2(NAME, LOAD)                                                                              \
    AVX2_FN static void NAME(const void *w, int wdtype, const float *x, int n_in, int nr, float out[4])    \
    {                                                                                                      \
        (void)nr;                                                                                          \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;                                                          \
        int i = 0;                                                                                         \
        for (; i + 16 <= n_in; i += 16) {                                                                  \
            a0 = _mm256_fmadd_ps(LOAD(w, i), _mm256_loadu_ps(x + i), a0);                                  \
            a1 = _mm256_fmadd_ps(LOAD(w, i + 8), _mm256_loadu_ps(x + i + 8), a1);                          \
        }                                                                                                  \
        float s = hsum(_mm256_add_ps(a0, a1));                                                             \
        for (int k = i; k < n_in; k++) s += attn__w_get(w, wdtype, (size_t)k) * x[k];                      \
        out[0] = s;                                                                                        \
    }

/* Two weight rows (w and w + wstride elements) against up to four rows of x:
 * out[0][r], out[1][r]. Each (weight row, x row) pair is summed exactly as
 * DOTS_AVX2 sums it (the same two accumulators, the same FMAs in the same
 * order, the same tail), so the bits are those of two calls of it; but x is
 * read once for both weight rows, which halves the x traffic from L1/L2 that
 * bounds the one-row kernel at 16 rows. Needs 16 accumulators: AVX-512VL. */
#define DOTS2_VL(NAME, LOAD, WSIZE)                                                                        \
    VL_FN static void NAME(const void *w, size_t wstride, int wdtype, const float *x, int n_in, int nr,    \
                           float out[2][4])                                                                \
    {                                                                                                      \
        const void *v = (const char *)w + wstride * (WSIZE);                                               \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;    \
        __m256 e0 = a0, e1 = a0, f0 = a0, f1 = a0, g0 = a0, g1 = a0, h0 = a0, h1 = a0;                     \
        const float *x0 = x, *x1 = x + (nr > 1) * (size_t)n_in, *x2 = x + (nr > 2) * 2 * (size_t)n_in,     \
                    *x3 = x + (nr > 3) * 3 * (size_t)n_in; /* rows past nr alias row 0: computed, unused */ \
        int i = 0;                                                                                         \
        for (; i + 16 <= n_in; i += 16) {                                                                  \
            const __m256 w0 = LOAD(w, i), w1 = LOAD(w, i + 8), v0 = LOAD(v, i), v1 = LOAD(v, i + 8);       \
            __m256 p = _mm256_loadu_ps(x0 + i), q = _mm256_loadu_ps(x0 + i + 8);                           \
            a0 = _mm256_fmadd_ps(w0, p, a0);                                                               \
            a1 = _mm256_fmadd_ps(w1, q, a1);                                                               \
            e0 = _mm256_fmadd_ps(v0, p, e0);                                                               \
            e1 = _mm256_fmadd_ps(v1, q, e1);                                                               \
            p = _mm256_loadu_ps(x1 + i), q = _mm256_loadu_ps(x1 + i + 8);                                  \
            b0 = _mm256_fmadd_ps(w0, p, b0);                                                               \
            b1 = _mm256_fmadd_ps(w1, q, b1);                                                               \
            f0 = _mm256_fmadd_ps(v0, p, f0);                                                               \
            f1 = _mm256_fmadd_ps(v1, q, f1);                                                               \
            p = _mm256_loadu_ps(x2 + i), q = _mm256_loadu_ps(x2 + i + 8);                                  \
            c0 = _mm256_fmadd_ps(w0, p, c0);                                                               \
            c1 = _mm256_fmadd_ps(w1, q, c1);                                                               \
            g0 = _mm256_fmadd_ps(v0, p, g0);                                                               \
            g1 = _mm256_fmadd_ps(v1, q, g1);                                                               \
            p = _mm256_loadu_ps(x3 + i), q = _mm256_loadu_ps(x3 + i + 8);                                  \
            d0 = _mm256_fmadd_ps(w0, p, d0);                                                               \
            d1 = _mm256_fmadd_ps(w1, q, d1);                                                               \
            h0 = _mm256_fmadd_ps(v0, p, h0);                                                               \
            h1 = _mm256_fmadd_ps(v1, q, h1);                                                               \
        }                                                                                                  \
        const float sums[2][4] = {{hsum(_mm256_add_ps(a0, a1)), hsum(_mm256_add_ps(b0, b1)),               \
                                   hsum(_mm256_add_ps(c0, c1)), hsum(_mm256_add_ps(d0, d1))},              \
                                  {hsum(_mm256_add_ps(e0, e1)), hsum(_mm256_add_ps(f0, f1)),               \
                                   hsum(_mm256_add_ps(g0, g1)), hsum(_mm256_add_ps(h0, h1))}};             \
        for (int r = 0; r < nr; r++) {                                                                     \
            float s = sums[0][r], t = sums[1][r];                                                          \
            for (int k = i; k < n_in; k++) {                                                               \
                s += attn__w_get(w, wdtype, (size_t)k) * x[(size_t)r * n_in + k];                          \
                t += attn__w_get(v, wdtype, (size_t)k) * x[(size_t)r * n_in + k];                          \
            }                                                                                              \
            out[0][r] = s;                                                                                 \
            out[1][r] = t;                                                                                 \
        }                                                                                                  \
    }

/* Elements of x per block of PAIRS_AVX2: 16 rows of a block (16 KiB
 * of float32) and two weight rows of it (2 KiB) stay in L1 together. */
#define PAIRS_KBLOCK 256

/* Keeps two loaded vectors in registers: without it GCC folds the x (or
 * the weight) loads into both FMAs that use each, 12 loads an iteration
 * where 8 do. */
#define IN_REGISTERS(p, q) __asm__("" : "+x"(p), "+x"(q))

/* Columns [o, o1) of y, two weight rows at a time, for 1..16 rows of x on
 * AVX2 (pick uses it for 5..16); returns the first column not done (o1 - 1 when their number is
 * odd). Each (weight row, x row) pair is summed exactly as DOTS_AVX2 sums it
 * — the same two accumulators, the same FMAs in the same order, the same
 * reduction and tail — so the bits are DOTS_AVX2's. What changes is the
 * traffic: DOTS_AVX2 reads all of x (128 KiB at 16 rows and n_in 2048,
 * from L2) once per weight row, and L2 delivers one 32-byte vector a cycle,
 * half the FMA rate; here two weight rows share each x load (two rows of x
 * a pass: 8 accumulators, 4 weight and 2 x registers of AVX2's 16), and the
 * k range goes in blocks of PAIRS_KBLOCK elements, the accumulators of
 * every row pair kept in memory between blocks, so the two weight rows'
 * block stays in L1 for all the row pairs and only x comes from L2. */
#define PAIRS_AVX2(NAME, LOAD, WSIZE)                                                                      \
    AVX2_FN static void NAME##_block(const void *w, const void *v, const float *x0, const float *x1, int i,  \
                                     int end, __m256 acc[8])                                               \
    {                                                                                                      \
        __m256 a0 = acc[0], a1 = acc[1], b0 = acc[2], b1 = acc[3], e0 = acc[4], e1 = acc[5], f0 = acc[6],  \
               f1 = acc[7];                                                                                \
        for (; i < end; i += 16) {                                                                         \
            __m256 w0 = LOAD(w, i), w1 = LOAD(w, i + 8), v0 = LOAD(v, i), v1 = LOAD(v, i + 8);             \
            IN_REGISTERS(w0, w1);                                                                          \
            IN_REGISTERS(v0, v1);                                                                          \
            __m256 p = _mm256_loadu_ps(x0 + i), q = _mm256_loadu_ps(x0 + i + 8);                           \
            IN_REGISTERS(p, q);                                                                            \
            a0 = _mm256_fmadd_ps(w0, p, a0);                                                               \
            a1 = _mm256_fmadd_ps(w1, q, a1);                                                               \
            e0 = _mm256_fmadd_ps(v0, p, e0);                                                               \
            e1 = _mm256_fmadd_ps(v1, q, e1);                                                               \
            p = _mm256_loadu_ps(x1 + i), q = _mm256_loadu_ps(x1 + i + 8);                                  \
            IN_REGISTERS(p, q);                                                                            \
            b0 = _mm256_fmadd_ps(w0, p, b0);                                                               \
            b1 = _mm256_fmadd_ps(w1, q, b1);                                                               \
            f0 = _mm256_fmadd_ps(v0, p, f0);                                                               \
            f1 = _mm256_fmadd_ps(v1, q, f1);                                                               \
        }                                                                                                  \
        acc[0] = a0, acc[1] = a1, acc[2] = b0, acc[3] = b1, acc[4] = e0, acc[5] = e1, acc[6] = f0, acc[7] = f1; \
    }                                                                                                      \
    AVX2_FN static int NAME(const void *w, int wdtype, const float *x, int rows, int n_in, const float *b, \
                            int o, int o1, float *y, int ldy)                                              \
    {                                                                                                      \
        __m256 acc[(ATTN__SKINNY_MAX + 1) / 2][8];                                                         \
        const int pairs = (rows + 1) / 2, n16 = n_in & ~15;                                                \
        for (; o + 1 < o1; o += 2) {                                                                       \
            const void *wo = (const char *)w + (size_t)o * n_in * (WSIZE);                                 \
            const void *vo = (const char *)wo + (size_t)n_in * (WSIZE);                                    \
            for (int pr = 0; pr < pairs; pr++)                                                             \
                for (int j = 0; j < 8; j++) acc[pr][j] = _mm256_setzero_ps();                              \
            for (int i0 = 0; i0 < n16; i0 += PAIRS_KBLOCK) {                                               \
                const int end = n16 - i0 < PAIRS_KBLOCK ? n16 : i0 + PAIRS_KBLOCK;                         \
                for (int pr = 0; pr < pairs; pr++) { /* a lone last row: row 1 aliases it, unused */       \
                    const float *x0 = x + (size_t)(2 * pr) * n_in;                                         \
                    NAME##_block(wo, vo, x0, 2 * pr + 1 < rows ? x0 + n_in : x0, i0, end, acc[pr]);        \
                }                                                                                          \
            }                                                                                              \
            const float b0 = b ? b[o] : 0.0f, b1 = b ? b[o + 1] : 0.0f;                                    \
            for (int r = 0; r < rows; r++) {                                                               \
                const __m256 *a = acc[r / 2] + (r % 2) * 2;                                                \
                const float *xr = x + (size_t)r * n_in;                                                    \
                float s = hsum(_mm256_add_ps(a[0], a[1])), t = hsum(_mm256_add_ps(a[4], a[5]));            \
                for (int k = n16; k < n_in; k++) {                                                         \
                    s += attn__w_get(wo, wdtype, (size_t)k) * xr[k];                                       \
                    t += attn__w_get(vo, wdtype, (size_t)k) * xr[k];                                       \
                }                                                                                          \
                y[(size_t)r * ldy + o] = s + b0;                                                           \
                y[(size_t)r * ldy + o + 1] = t + b1;                                                       \
            }                                                                                              \
        }                                                                                                  \
        return o;                                                                                          \
    }

PAIRS_AVX2(pairs_avx2_f32, load_f32, 4)
PAIRS_AVX2(pairs_avx2_bf16, load_bf16, 2)
PAIRS_AVX2(pairs_avx2_f16, load_f16, 2)

DOTS2_VL(dots2_vl_f32, load_f32, 4)
DOTS2_VL(dots2_vl_bf16, load_bf16, 2)
DOTS2_VL(dots2_vl_f16, load_f16, 2)

/* Sixteen weights from w + i, widened, in one zmm register. */
ZMM_FN static inline __m512 load16_f32(const void *w, int i) { return _mm512_loadu_ps((const float *)w + i); }
ZMM_FN static inline __m512 load16_bf16(const void *w, int i)
{
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
ZMM_FN static inline __m512 load16_f16(const void *w, int i)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
}

/* hsum(a0 + a1) of DOTS_AVX2, for the zmm register whose low and high
 * halves are its two accumulators a0 and a1. */
ZMM_FN static inline float hsum_halves(__m512 a)
{
    const __m256 lo = _mm512_castps512_ps256(a);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    return hsum(_mm256_add_ps(lo, hi));
}

/* 2-byte weights: at element i of the four weight rows v[0..3], asks for
 * the same place in the next four rows (once a 64-byte line). Rows of BF16
 * or F16 weights are 4 KiB at n_in 2048, a page each, so the hardware
 * prefetcher, which stops at page ends, restarts four streams every four
 * rows; this keeps the next ones coming (one thread, a 2048 x 2048 BF16
 * projection from DRAM: 16 rows 1.015 -> 0.894 ms; one row, on the
 * four-row kernel DOT1XN_ZMM replaced, 0.262-0.266 -> 0.233-0.234 ms). For
 * F32 weights (8 KiB rows) it measured slower (0.39 -> 0.45 ms): not there. */
#define PREFETCH_NEXT4(v, wstride, i, WSIZE)                                                               \
    do {                                                                                                   \
        if ((WSIZE) == 2 && (i) % 32 == 0)                                                                 \
            for (int k_ = 0; k_ < 4; k_++)                                                                 \
                _mm_prefetch((const char *)(v)[k_] + (4 * (wstride) + (size_t)(i)) * (WSIZE), _MM_HINT_T0); \
    } while (0)

/* Four weight rows (w + k * wstride elements) against up to four rows of
 * x: out[k][r]. DOTS_AVX2's two eight-lane accumulators of a (weight row,
 * x row) pair are the low and high halves of one zmm register here, fed
 * the same FMAs in the same order, and reduced as DOTS_AVX2 reduces them,
 * so the bits are those of DOTS_AVX2; but one instruction does the work of
 * two, and x is read once for four weight rows (16 accumulators). */
#define DOTS4_ROW(r, xr)                                                                                  \
    p = _mm512_loadu_ps((xr) + i);                                                                         \
    a0##r = _mm512_fmadd_ps(w0, p, a0##r);                                                                 \
    a1##r = _mm512_fmadd_ps(w1, p, a1##r);                                                                 \
    a2##r = _mm512_fmadd_ps(w2, p, a2##r);                                                                 \
    a3##r = _mm512_fmadd_ps(w3, p, a3##r)
#define DOTS4_ZMM(NAME, LOAD16, WSIZE)                                                                     \
    ZMM_FN static void NAME(const void *w, size_t wstride, int wdtype, const float *x, int n_in, int nr,   \
                            float out[4][4])                                                               \
    {                                                                                                      \
        const char *wb = (const char *)w;                                                                  \
        const void *v[4] = {wb, wb + wstride * (WSIZE), wb + 2 * wstride * (WSIZE), wb + 3 * wstride * (WSIZE)}; \
        const float *x0 = x, *x1 = x + (nr > 1) * (size_t)n_in, *x2 = x + (nr > 2) * 2 * (size_t)n_in,     \
                    *x3 = x + (nr > 3) * 3 * (size_t)n_in; /* rows past nr alias row 0: computed, unused */ \
        __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00; \
        __m512 a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00, a32 = a00;     \
        __m512 a33 = a00, p;                                                                               \
        int i = 0;                                                                                         \
        for (; i + 16 <= n_in; i += 16) {                                                                  \
            PREFETCH_NEXT4(v, wstride, i, WSIZE);                                                          \
            const __m512 w0 = LOAD16(v[0], i), w1 = LOAD16(v[1], i), w2 = LOAD16(v[2], i),                 \
                         w3 = LOAD16(v[3], i);                                                             \
            DOTS4_ROW(0, x0);                                                                              \
            DOTS4_ROW(1, x1);                                                                              \
            DOTS4_ROW(2, x2);                                                                              \
            DOTS4_ROW(3, x3);                                                                              \
        }                                                                                                  \
        const float sums[4][4] = {                                                                         \
            {hsum_halves(a00), hsum_halves(a01), hsum_halves(a02), hsum_halves(a03)},                      \
            {hsum_halves(a10), hsum_halves(a11), hsum_halves(a12), hsum_halves(a13)},                      \
            {hsum_halves(a20), hsum_halves(a21), hsum_halves(a22), hsum_halves(a23)},                      \
            {hsum_halves(a30), hsum_halves(a31), hsum_halves(a32), hsum_halves(a33)}};                     \
        for (int k = 0; k < 4; k++)                                                                        \
            for (int r = 0; r < nr; r++) {                                                                 \
                float s = sums[k][r];                                                                      \
                for (int j = i; j < n_in; j++) s += attn__w_get(v[k], wdtype, (size_t)j) * x[(size_t)r * n_in + j]; \
                out[k][r] = s;                                                                             \
            }                                                                                              \
    }

DOTS4_ZMM(dots4_zmm_f32, load16_f32, 4)
DOTS4_ZMM(dots4_zmm_bf16, load16_bf16, 2)
DOTS4_ZMM(dots4_zmm_f16, load16_f16, 2)

/* NR weight rows against one row of x (a lone decode step): DOT1_AVX2's
 * two accumulators of each row the halves of one zmm register, the same
 * FMAs in the same order, the same reduction and tail, so the bits of NR
 * DOT1_AVX2 calls; NR independent chains of sixteen lanes where DOT1_AVX2
 * has two of eight, and the widening of F16 / BF16 weights sixteen at a
 * time. out[k] for weight row k. F32 takes four rows a pass (32 KiB of
 * rows at n_in 2048), 2-byte weights eight (the same bytes in flight; a
 * BF16 row is one 4 KiB page there, and four pages at a time kept the
 * memory less busy: two threads, 2048 x 2048 BF16 weights from DRAM, 68 ->
 * 73 GB/s, where the four-row kernel with PREFETCH_NEXT4 read 68 and
 * eight rows with it 57). */
#define DOT1XN_ZMM(NAME, LOAD16, WSIZE, NR)                                                                \
    ZMM_FN static void NAME(const void *w, size_t wstride, int wdtype, const float *x, int n_in, float *out) \
    {                                                                                                      \
        const char *v[NR];                                                                                 \
        __m512 a[NR];                                                                                      \
        for (int k = 0; k < (NR); k++) {                                                                   \
            v[k] = (const char *)w + (size_t)k * wstride * (WSIZE);                                        \
            a[k] = _mm512_setzero_ps();                                                                    \
        }                                                                                                  \
        int i = 0;                                                                                         \
        for (; i + 16 <= n_in; i += 16) {                                                                  \
            const __m512 p = _mm512_loadu_ps(x + i);                                                       \
            _Pragma("GCC unroll 8") for (int k = 0; k < (NR); k++) a[k] = _mm512_fmadd_ps(LOAD16(v[k], i), p, a[k]); \
        }                                                                                                  \
        for (int k = 0; k < (NR); k++) {                                                                   \
            float s = hsum_halves(a[k]);                                                                   \
            for (int j = i; j < n_in; j++) s += attn__w_get(v[k], wdtype, (size_t)j) * x[j];               \
            out[k] = s;                                                                                    \
        }                                                                                                  \
    }

DOT1XN_ZMM(dot1x4_zmm_f32, load16_f32, 4, 4)
DOT1XN_ZMM(dot1x8_zmm_bf16, load16_bf16, 2, 8)
DOT1XN_ZMM(dot1x8_zmm_f16, load16_f16, 2, 8)

static int have_avx512vl(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
}

DOTS_AVX2(dots_avx2_f32, load_f32)
DOTS_AVX2(dots_avx2_bf16, load_bf16)
DOTS_AVX2(dots_avx2_f16, load_f16)
DOT1_AVX2(dot1_avx2_f32, load_f32)
DOT1_AVX2(dot1_avx2_bf16, load_bf16)
DOT1_AVX2(dot1_avx2_f16, load_f16)

static int have_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
#endif

typedef void (*dots_fn)(const void *w, int wdtype, const float *x, int n_in, int nr, float out[4]);
/* Columns [o, o1) two weight rows at a time (PAIRS_AVX2), returning the
 * first not done, or NULL. */
typedef int (*pairs_fn)(const void *w, int wdtype, const float *x, int rows, int n_in, const float *b, int o,
                        int o1, float *y, int ldy);
/* Two weight rows at once (DOTS2_VL), or NULL. */
typedef void (*dots2_fn)(const void *w, size_t wstride, int wdtype, const float *x, int n_in, int nr,
                         float out[2][4]);
/* Four weight rows at once (DOTS4_ZMM), or NULL. */
typedef void (*dots4_fn)(const void *w, size_t wstride, int wdtype, const float *x, int n_in, int nr,
                         float out[4][4]);
/* dot1xn_rows weight rows against one row of x (DOT1XN_ZMM), or NULL. */
typedef void (*dot1xn_fn)(const void *w, size_t wstride, int wdtype, const float *x, int n_in, float *out);

/* The kernels run uses for one call. */
typedef struct kernels {
    dots_fn dots;
    pairs_fn pairs;
    dots2_fn dots2;
    dots4_fn dots4;
    dot1xn_fn dot1xn;
    int dot1xn_rows;
} kernels;

static void run(const kernels *k, const float *x, int rows, int n_in, const void *w, int wdtype, const float *b,
                int o0, int o1, float *y, int ldy);

void attn__skinny_linear_portable(const float *x, int rows, int n_in, const void *w, int wdtype,
                                  const float *b, int o0, int o1, float *y, int ldy)
{
    const kernels k = {.dots = dots_portable};
    run(&k, x, rows, n_in, w, wdtype, b, o0, o1, y, ldy);
}

/* The kernels for rows on this CPU; wide = 0 keeps to the one-weight-row
 * AVX2 kernels (tests: every other kernel must give their bits). */
static void pick(int rows, int wdtype, int wide, kernels *k)
{
    *k = (kernels){.dots = dots_portable};
#ifdef SKINNY_AVX2
    if (!have_avx2()) return;
    const int bf = wdtype == ATTN_WDTYPE_BF16, hf = wdtype == ATTN_WDTYPE_F16;
    if (rows == 1)
        k->dots = bf ? dot1_avx2_bf16 : hf ? dot1_avx2_f16 : dot1_avx2_f32;
    else
        k->dots = bf ? dots_avx2_bf16 : hf ? dots_avx2_f16 : dots_avx2_f32;
    if (!wide) return;
    if (!have_avx512vl()) {
        if (rows > 4) /* up to 4 rows DOTS_AVX2 reads x once (32 KiB at n_in 2048) */
            k->pairs = bf ? pairs_avx2_bf16 : hf ? pairs_avx2_f16 : pairs_avx2_f32;
        return;
    }
    if (rows == 1) {
        k->dot1xn = bf ? dot1x8_zmm_bf16 : hf ? dot1x8_zmm_f16 : dot1x4_zmm_f32;
        k->dot1xn_rows = bf || hf ? 8 : 4;
    } else {
        k->dots2 = bf ? dots2_vl_bf16 : hf ? dots2_vl_f16 : dots2_vl_f32;
        k->dots4 = bf ? dots4_zmm_bf16 : hf ? dots4_zmm_f16 : dots4_zmm_f32;
    }
#else
    (void)rows, (void)wdtype, (void)wide;
#endif
}

/* The projection on the kernels pick chooses (wide: the multi-weight-row ones allowed). */
static void linear_on(int wide, const float *x, int rows, int n_in, const void *w, int wdtype, const float *b,
                      int o0, int o1, float *y, int ldy)
{
    kernels k;
    pick(rows, wdtype, wide, &k);
    run(&k, x, rows, n_in, w, wdtype, b, o0, o1, y, ldy);
}

void attn__skinny_linear(const float *x, int rows, int n_in, const void *w, int wdtype, const float *b,
                         int o0, int o1, float *y, int ldy)
{
    linear_on(1, x, rows, n_in, w, wdtype, b, o0, o1, y, ldy);
}

void attn__skinny_linear_avx2(const float *x, int rows, int n_in, const void *w, int wdtype, const float *b,
                              int o0, int o1, float *y, int ldy)
{
    linear_on(0, x, rows, n_in, w, wdtype, b, o0, o1, y, ldy);
}

static void run(const kernels *k, const float *x, int rows, int n_in, const void *w, int wdtype, const float *b,
                int o0, int o1, float *y, int ldy)
{
    const size_t wsize = wdtype == ATTN_WDTYPE_F16 || wdtype == ATTN_WDTYPE_BF16 ? 2 : 4;
    dots2_fn dots2 = k->dots2;
    int o = o0;
    if (k->pairs) o = k->pairs(w, wdtype, x, rows, n_in, b, o, o1, y, ldy);
    for (const int n = k->dot1xn_rows; k->dot1xn && o + n <= o1; o += n) { /* one row of x: n weight rows a pass */
        float d[8];
        k->dot1xn((const char *)w + (size_t)o * n_in * wsize, (size_t)n_in, wdtype, x, n_in, d);
        for (int j = 0; j < n; j++) y[o + j] = d[j] + (b ? b[o + j] : 0.0f);
    }
    for (; k->dots4 && o + 3 < o1; o += 4) { /* four weight rows per pass over x */
        const void *wo = (const char *)w + (size_t)o * n_in * wsize;
        for (int r0 = 0; r0 < rows; r0 += 4) {
            const int nr = rows - r0 < 4 ? rows - r0 : 4;
            float d[4][4];
            k->dots4(wo, (size_t)n_in, wdtype, x + (size_t)r0 * n_in, n_in, nr, d);
            for (int k = 0; k < 4; k++)
                for (int r = 0; r < nr; r++) y[(size_t)(r0 + r) * ldy + o + k] = d[k][r] + (b ? b[o + k] : 0.0f);
        }
    }
    for (; dots2 && o + 1 < o1; o += 2) { /* two weight rows per pass over x */
        const void *wo = (const char *)w + (size_t)o * n_in * wsize;
        const float b0 = b ? b[o] : 0.0f, b1 = b ? b[o + 1] : 0.0f;
        for (int r0 = 0; r0 < rows; r0 += 4) {
            const int nr = rows - r0 < 4 ? rows - r0 : 4;
            float d[2][4];
            dots2(wo, (size_t)n_in, wdtype, x + (size_t)r0 * n_in, n_in, nr, d);
            for (int r = 0; r < nr; r++) {
                y[(size_t)(r0 + r) * ldy + o] = d[0][r] + b0;
                y[(size_t)(r0 + r) * ldy + o + 1] = d[1][r] + b1;
            }
        }
    }
    for (; o < o1; o++) {
        const void *wo = (const char *)w + (size_t)o * n_in * wsize;
        const float bias = b ? b[o] : 0.0f;
        for (int r0 = 0; r0 < rows; r0 += 4) {
            const int nr = rows - r0 < 4 ? rows - r0 : 4;
            float d[4];
            k->dots(wo, wdtype, x + (size_t)r0 * n_in, n_in, nr, d);
            for (int r = 0; r < nr; r++) y[(size_t)(r0 + r) * ldy + o] = d[r] + bias;
        }
    }
}
