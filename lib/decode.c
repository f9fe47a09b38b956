/* decode.c — the decode kernel (see decode.h): one job computes the R =
 * heads * (h/g) * T stacked query rows of its KV heads against the cache in
 * tiles of DECODE_TILE keys. Per tile: the scores by dot products that read
 * each K row once (all the job's heads, adjacent in the row, before the next
 * row) and convert its elements in registers; the online softmax of every
 * row (running max and sum, accumulator rescaled when the max grows); then
 * axpys that read each V row once the same way, in sub-blocks of
 * DECODE_SUB keys small enough to stay in L1 while every head uses them.
 * The tiles are pipelined: the axpys of tile i run sub-block by sub-block
 * interleaved with the scores of tile i + 1, so K and V are read as two
 * steady streams, each pass bringing its stream DECODE_AHEAD_BYTES ahead
 * into L2 a slice at a time (a burst of prefetches stalls the core until
 * memory delivers them).
 * A tile's keys are walked in runs inside one cache block, but a key's
 * arithmetic never depends on where a run starts, and tiles start at the
 * same keys for every layout, so a paged float32 cache gives results
 * bit-identical to the contiguous one. INT8 scales are folded in per run and
 * head: into the scores (q . k_int * s_k) and into the probabilities before
 * the axpys (p * s_v). An INT8 cache's scores are exact integer dot
 * products instead, of the int8 keys with the queries rounded to int8 once
 * a job (per row, max|q| / 127: qk8), keys transposed in registers so a
 * register holds 16 (AVX-512 VNNI: vpdpbusd) or 8 (AVX2: vpmaddubsw)
 * keys' sums: every CPU gets the same bits; the rounding of the queries is
 * far below that of the cache (test_decode bounds the difference to float
 * queries; attn.h states it).
 */
#include "decode.h"

#include "kvcache.h"
#include "mask.h"
#include "softmax.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define DECODE_AVX2 1
#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) static inline
#define AVX512_FN __attribute__((target("avx2,fma,f16c,avx512f")))
#define AVX512_INLINE __attribute__((target("avx2,fma,f16c,avx512f"), always_inline)) static inline
#define AVX512VL_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512vl")))
#define AVX512VL_INLINE __attribute__((target("avx2,fma,f16c,avx512f,avx512vl"), always_inline)) static inline
#endif

/* Keys per online-softmax step: the R x tile scores stay in L2, and the
 * max/rescale work is amortised over many keys. Chunks of a split job are
 * whole tiles. DECODE_SUB: keys per axpy sub-block (all heads of DECODE_SUB
 * V rows stay in L1). */
#define DECODE_TILE 128
#define DECODE_SUB 16
#define DECODE_SUB_BYTES (1 << 30) /* no cap: 8 KiB measured no better (docs/performance.md) */
#define DECODE_K_AHEAD 4 /* the three-phase tiles: own K rows prefetched this many keys ahead */
/* The pipelined tiles: how far ahead each pass brings its stream into L2,
 * in bytes of the job's rows (all its KV heads), as keys within [16, 128].
 * 8 KiB: rows of 8 KV heads x 64 (512 B INT8 to 2 KiB F32) then go one
 * sub-block (DECODE_SUB keys) ahead, which took 0.91-0.95 of the step time
 * of the 64 KiB distance before it (32 keys of F32, 64 of F16/BF16, 128 of
 * INT8) for every dtype on a Zen 5 (in-run A/B, 16 sessions, P = 8192, two
 * runs of five rounds); 12 keys 0.85-1.05, 24 keys 1.01-1.03. */
#define DECODE_AHEAD_BYTES (8 << 10)
#define DECODE_AHEAD_MIN 16
#define DECODE_AHEAD_MAX 128

int attn__decode_portable_only = 0;
int attn__decode_no_avx512 = 0;
int attn__decode_sub_bytes = 0, attn__decode_k_ahead = 0, attn__decode_cross = 0;
int attn__decode_three_phase = 0;
int attn__decode_int8_queries = 0;

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }
static size_t round_up64(size_t n) { return (n + 63) / 64 * 64; }

int attn__decode_applies(const attn_seq *s) { return s->cache_k != NULL && s->t <= ATTN__DECODE_MAX_T; }

static int ceil_div(int a, int b) { return a / b + (a % b != 0); }

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

/* Each sequence in `parts` = n_threads / gcd(n_seqs, n_threads) jobs, so the
 * batch is a whole number of equal jobs per thread (one session on two
 * threads: 2; two: 1; three: 2, three jobs a thread): key chunks of every KV
 * head, which read whole cache rows, or groups of KV heads as well when the
 * keys are too few. One session, two threads, BF16 K/V, ms a step of the
 * kernel alone: P = 2048 0.161 -> 0.142, P = 8192 0.46 -> 0.43, P = 32768
 * 1.92 -> 1.63, against the previous cut into about four jobs a thread. */
void attn__decode_split(const attn_layer *l, const attn_seq *s, int n_seqs, int n_threads, int *heads,
                        int *chunks)
{
    *heads = l->g;
    *chunks = 1;
    if (n_threads < 2 || n_seqs < 1 || n_seqs >= 2 * n_threads) return;
    const int parts = n_threads / gcd(n_seqs, n_threads);
    const int most = s->s / ATTN__DECODE_SPLIT_MIN;
    *chunks = parts < most ? parts : most > 1 ? most : 1;
    if (*chunks >= parts) return;
    const int groups = ceil_div(parts, *chunks);
    *heads = groups >= l->g ? 1 : ceil_div(l->g, groups);
}

size_t attn__decode_part_floats(const attn_layer *l, int t, int heads)
{
    const size_t rows = (size_t)heads * (size_t)(l->h / l->g) * (size_t)t;
    return round16(rows * (2 + (size_t)l->d_v));
}

/* Scratch floats of a job's int8 queries (INT8 caches): rows
 * of d_k int8 padded to whole 64-byte blocks, and each row's scale and sum. */
static size_t q8_floats(const attn_layer *l, size_t rows)
{
    const size_t pad = round_up64((size_t)l->d_k);
    return round16(rows * pad / 4) + 2 * round16(rows);
}

size_t attn__decode_scratch_floats(const attn_layer *l, int t, int heads)
{
    const size_t rows = (size_t)heads * (size_t)(l->h / l->g) * (size_t)t;
    return round16(rows * (size_t)l->d_k) + 2 * round16(rows * DECODE_TILE) + attn__decode_part_floats(l, t, heads) +
           2 * round16((size_t)t) + q8_floats(l, rows);
}

/* ------------------------------------------------------- element loads */

static float f32_of_bits(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }
static uint32_t bits_of_f32(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }

/* Element i of a row of dtype dt as float32 (INT8 unscaled). Exact. */
static inline float load1(const void *p, size_t i, int dt)
{
    switch (dt) {
    case ATTN_KV_F32: return ((const float *)p)[i];
    case ATTN_KV_F16: {
        const uint32_t h = ((const uint16_t *)p)[i];
        const float m = f32_of_bits((h & 0x7fffu) << 13) * 0x1p112f; /* finite halves */
        return f32_of_bits(bits_of_f32(m) | ((h & 0x8000u) << 16));
    }
    case ATTN_KV_BF16: return f32_of_bits((uint32_t)((const uint16_t *)p)[i] << 16);
    default: return (float)((const int8_t *)p)[i];
    }
}

static size_t elem_bytes(int dt) { return dt == ATTN_KV_F32 ? 4 : dt == ATTN_KV_INT8 ? 1 : 2; }

/* The shapes every kernel below works on: rows of KV head jh of the job are
 * rows [jh*rh, (jh+1)*rh) of q / out / p / acc; keys are m rows of the
 * cache, `stride` elements apart, KV head jh's d elements at + jh*d. */
typedef struct dims {
    int rh, nh, d, m;
    size_t stride;
    int dt;
    /* The other stream's rows this pass brings into L2 as it goes (row j of
     * the pass asks for row j of it), or pf NULL: V of the same keys during
     * the scores, K of the next tile during P.V, so memory stays busy while
     * the core computes the softmax and the other pass. */
    const void *pf;
    size_t pf_stride, pf_elems;
    int pf_m;
    int own; /* 1: the pass also prefetches its own next rows (the three-phase tiles) */
} dims;

/* ------------------------------------------------------ portable kernels */

/* out[row*ldo + j] = s_k[jh] * (q_row . k_j, head jh's columns). */
static void qk_portable(const float *q, const dims *x, const void *k, const float *sk, float *out, int ldo)
{
    for (int j = 0; j < x->m; j++)
        for (int jh = 0; jh < x->nh; jh++)
            for (int rr = 0; rr < x->rh; rr++) {
                const int row = jh * x->rh + rr;
                const float *qr = q + (size_t)row * x->d;
                const size_t kj = (size_t)j * x->stride + (size_t)jh * x->d;
                float a = 0.0f;
                for (int c = 0; c < x->d; c++) a += qr[c] * load1(k, kj + c, x->dt);
                out[(size_t)row * ldo + j] = a * (sk ? sk[jh] : 1.0f);
            }
}

/* acc[row*d + c] += p[row*ldp + j] * v_j[head jh's column c]. */
static void pv_portable(const float *p, int ldp, const dims *x, const void *v, float *acc)
{
    for (int jh = 0; jh < x->nh; jh++)
        for (int rr = 0; rr < x->rh; rr++) {
            const int row = jh * x->rh + rr;
            float *a = acc + (size_t)row * x->d;
            for (int j = 0; j < x->m; j++) {
                const float pj = p[(size_t)row * ldp + j];
                const size_t vj = (size_t)j * x->stride + (size_t)jh * x->d;
                for (int c = 0; c < x->d; c++) a[c] += pj * load1(v, vj + c, x->dt);
            }
        }
}

/* ---------------------------------------------------------- AVX2 kernels */

#ifdef DECODE_AVX2
AVX2_INLINE __m256 load8(const void *p, size_t i, int dt)
{
    switch (dt) {
    case ATTN_KV_F32: return _mm256_loadu_ps((const float *)p + i);
    case ATTN_KV_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
    case ATTN_KV_BF16: {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
    default: return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)p + i))));
    }
}

/* Asks for `n` elements from element i on: the rows a kernel reads next.
 * Prefetches never fault, so running past the cache's end is harmless. */
AVX2_INLINE void prefetch(const void *p, size_t i, size_t n, int dt)
{
    if (attn__decode_k_ahead < 0) return; /* benches: no software prefetch */
    const char *b = (const char *)p + i * elem_bytes(dt);
    const size_t bytes = n * elem_bytes(dt);
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(b + o, _MM_HINT_T0);
}

/* Row j of x's other stream (dims.pf) into L2, if it has one. */
AVX2_INLINE void prefetch_other(const dims *x, int j)
{
    if (x->pf == NULL || j >= x->pf_m) return;
    const char *b = (const char *)x->pf + (size_t)j * x->pf_stride * elem_bytes(x->dt);
    const size_t bytes = x->pf_elems * elem_bytes(x->dt);
    size_t o = 0;
    for (; o + 256 <= bytes; o += 256) {
        _mm_prefetch(b + o, _MM_HINT_T1);
        _mm_prefetch(b + o + 64, _MM_HINT_T1);
        _mm_prefetch(b + o + 128, _MM_HINT_T1);
        _mm_prefetch(b + o + 192, _MM_HINT_T1);
    }
    for (; o < bytes; o += 64) _mm_prefetch(b + o, _MM_HINT_T1);
}

/* Rows [j, j + n) of x's other stream brought into L2 line by line in
 * `parts` steps of (nearly) equal size, one before each KV head's block of
 * work (none when `on` is 0 or x has no target): a pass that spreads its
 * prefetches so keeps a few lines in flight all the time, where a burst
 * stalls the core until the miss buffers drain. One division when a walk
 * starts, none a step or a line. */
typedef struct pf_walk {
    const char *b;
    size_t line, lines, row_bytes, left, per, extra, parts, acc;
} pf_walk;

AVX2_INLINE void pf_walk_init(pf_walk *w, const dims *x, int j, int n, int parts, int on)
{
    *w = (pf_walk){.b = NULL};
    if (!on || x->pf == NULL) return;
    if (j + n > x->pf_m) n = x->pf_m - j;
    if (n <= 0) return;
    const size_t eb = elem_bytes(x->dt);
    w->lines = (x->pf_elems * eb + 63) / 64;
    w->row_bytes = x->pf_stride * eb;
    w->b = (const char *)x->pf + (size_t)j * w->row_bytes;
    w->line = 0;
    w->left = w->lines * (size_t)n;
    w->parts = (size_t)parts;
    w->per = w->left / w->parts;
    w->extra = w->left - w->per * w->parts;
    w->acc = 0;
}

AVX2_INLINE void pf_walk_step(pf_walk *w)
{
    if (w->left == 0) return;
    size_t k = w->per;
    w->acc += w->extra;
    if (w->acc >= w->parts) { /* the remainder spread over the steps */
        w->acc -= w->parts;
        k++;
    }
    if (k > w->left) k = w->left;
    w->left -= k;
    for (; k > 0; k--) {
        _mm_prefetch(w->b + w->line * 64, _MM_HINT_T1);
        if (++w->line == w->lines) {
            w->line = 0;
            w->b += w->row_bytes;
        }
    }
}

/* The four horizontal sums of a0..a3, in order. */
AVX2_INLINE __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* Accumulators of 4 query rows (q0, q0 + ld, ...) x 2 keys (at kj, kj2)
 * over their first n elements (n a multiple of 8), reduced to one vector
 * of the 4 rows' sums per key. Two keys at once give twice the independent
 * FMA chains and load each q vector once for both; a key's arithmetic is
 * the same whichever of the two it is. */
AVX2_INLINE void dot4x2_sums(const float *q0, int ld, int n, const void *k, size_t kj, size_t kj2, int dt, __m128 *s,
                             __m128 *t)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    /* d is 64 or 128 as a constant on the hot paths: unrolled whole, no loop
     * left (callgrind: 4-8 % fewer instructions a decode step, same bits) */
#pragma GCC unroll 16
    for (int c = 0; c < n; c += 8) {
        const __m256 ka = load8(k, kj + (size_t)c, dt), kb = load8(k, kj2 + (size_t)c, dt);
        __m256 q = _mm256_loadu_ps(q0 + c);
        a0 = _mm256_fmadd_ps(q, ka, a0);
        b0 = _mm256_fmadd_ps(q, kb, b0);
        q = _mm256_loadu_ps(q0 + ld + c);
        a1 = _mm256_fmadd_ps(q, ka, a1);
        b1 = _mm256_fmadd_ps(q, kb, b1);
        q = _mm256_loadu_ps(q0 + 2 * ld + c);
        a2 = _mm256_fmadd_ps(q, ka, a2);
        b2 = _mm256_fmadd_ps(q, kb, b2);
        q = _mm256_loadu_ps(q0 + 3 * ld + c);
        a3 = _mm256_fmadd_ps(q, ka, a3);
        b3 = _mm256_fmadd_ps(q, kb, b3);
    }
    *s = hsum4(a0, a1, a2, a3);
    *t = hsum4(b0, b1, b2, b3);
}

/* Scores of 4 query rows (q0, q0 + d, ...) against the d elements at kj and
 * (two = 1) at kj2, into out[i*ldo] and out[i*ldo + 1]: dot4x2_sums over
 * the multiple of 8, the tail in scalars. A key's arithmetic is the same
 * whether it comes first, second or alone (two = 0: kj2 must be kj, its
 * result is not stored). */
AVX2_INLINE void dot4x2(const float *q0, int d, const void *k, size_t kj, size_t kj2, int two, int dt, float sk,
                        float *out, int ldo)
{
    const int d8 = d & ~7;
    __m128 sv, tv;
    dot4x2_sums(q0, d, d8, k, kj, kj2, dt, &sv, &tv);
    float s[4], t[4];
    _mm_storeu_ps(s, sv);
    _mm_storeu_ps(t, tv);
    for (int c = d8; c < d; c++) {
        const float kc = load1(k, kj + (size_t)c, dt), kc2 = load1(k, kj2 + (size_t)c, dt);
        for (int i = 0; i < 4; i++) {
            s[i] += q0[(size_t)i * d + c] * kc;
            t[i] += q0[(size_t)i * d + c] * kc2;
        }
    }
    for (int i = 0; i < 4; i++) {
        out[(size_t)i * ldo] = s[i] * sk;
        if (two) out[(size_t)i * ldo + 1] = t[i] * sk;
    }
}

AVX2_INLINE void dot1(const float *q, int d, const void *k, size_t kj, int dt, float sk, float *out)
{
    const int d8 = d & ~7;
    __m256 a = _mm256_setzero_ps();
    for (int c = 0; c < d8; c += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), load8(k, kj + (size_t)c, dt), a);
    const __m256 z = _mm256_setzero_ps();
    float s = _mm_cvtss_f32(hsum4(a, z, z, z));
    for (int c = d8; c < d; c++) s += q[c] * load1(k, kj + (size_t)c, dt);
    *out = s * sk;
}

/* Scores of 4 query rows against 4 keys (kj, kj + stride, ...), d a
 * multiple of 8: two dot4x2_sums, the product by s_k in a vector and a 4x4
 * transpose so each row's four scores are one store, where dot4x2 stores
 * 16 scalars a call. Each score is the bits dot4x2 gives it. */
AVX2_INLINE void dot4x4_avx2(const float *q0, int d, const void *k, size_t kj, size_t stride, int dt, float sk,
                             float *out, int ldo)
{
    __m128 r0, r1, r2, r3;
    dot4x2_sums(q0, d, d, k, kj, kj + stride, dt, &r0, &r1);
    dot4x2_sums(q0, d, d, k, kj + 2 * stride, kj + 3 * stride, dt, &r2, &r3);
    const __m128 s = _mm_set1_ps(sk);
    r0 = _mm_mul_ps(r0, s);
    r1 = _mm_mul_ps(r1, s);
    r2 = _mm_mul_ps(r2, s);
    r3 = _mm_mul_ps(r3, s);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3); /* now r_i = row i's four keys */
    _mm_storeu_ps(out, r0);
    _mm_storeu_ps(out + ldo, r1);
    _mm_storeu_ps(out + 2 * (size_t)ldo, r2);
    _mm_storeu_ps(out + 3 * (size_t)ldo, r3);
}

AVX2_INLINE void qk_pairs_t(const float *q, const dims *x, const void *k, const float *sk, float *out, int ldo,
                            const int dt);

/* Keys KEYS at a time by DOT4X4 (dot4x4_avx2 or AVX-512VL's dot4x4_zmm,
 * four keys; dot4x8_zmm, eight: rows in fours, d = dc, a constant 64 or 128
 * the compiler unrolls, or x->d when dc is 0; d a multiple of 8), the rest
 * by REST (qk_pairs_t, or the four-key kernel). The prefetches are
 * qk_pairs_t's, KEYS keys at a time. One body for both ISAs: an AVX2
 * function cannot inline an AVX-512 kernel, so each gets its own copy. */
#define QK_FOURS(NAME, FN_ATTR, DOT4X4, KEYS, REST)                                                              \
    FN_ATTR void NAME(const float *q, const dims *x, const void *k, const float *sk, float *out, int ldo,        \
                      const int dc, const int dt)                                                                \
    {                                                                                                            \
        const int rh = x->rh, d = dc ? dc : x->d;                                                                \
        const size_t row_elems = (size_t)x->nh * (size_t)d;                                                      \
        const int ahead = attn__decode_k_ahead > 0 ? attn__decode_k_ahead : DECODE_K_AHEAD;                      \
        int j = 0;                                                                                               \
        for (; d % 8 == 0 && j + (KEYS) <= x->m; j += (KEYS)) {                                                  \
            for (int i = 0; x->own && i < (KEYS); i++) prefetch(k, (size_t)(j + ahead + i) * x->stride, row_elems, dt); \
            for (int i = 0; x->own && i < (KEYS); i++) prefetch_other(x, j + i);                                 \
            pf_walk w;                                                                                           \
            pf_walk_init(&w, x, j, (KEYS), x->nh, !x->own);                                                      \
            for (int jh = 0; jh < x->nh; jh++) {                                                                 \
                pf_walk_step(&w);                                                                                \
                const size_t kj = (size_t)j * x->stride + (size_t)jh * d;                                        \
                const float s = sk ? sk[jh] : 1.0f;                                                              \
                const float *qh = q + (size_t)jh * rh * d;                                                       \
                float *oh = out + (size_t)jh * rh * ldo + j;                                                     \
                int r = 0;                                                                                       \
                for (; r + 4 <= rh; r += 4)                                                                      \
                    DOT4X4(qh + (size_t)r * d, d, k, kj, x->stride, dt, s, oh + (size_t)r * ldo, ldo);           \
                for (; r < rh; r++)                                                                              \
                    for (int i = 0; i < (KEYS); i++)                                                             \
                        dot1(qh + (size_t)r * d, d, k, kj + (size_t)i * x->stride, dt, s, oh + (size_t)r * ldo + i); \
            }                                                                                                    \
        }                                                                                                        \
        if (j < x->m) {                                                                                          \
            dims rest = *x;                                                                                      \
            rest.m = x->m - j;                                                                                   \
            rest.pf = x->pf == NULL || j >= x->pf_m ? NULL                                                       \
                                                    : (const char *)x->pf + (size_t)j * x->pf_stride * elem_bytes(dt); \
            rest.pf_m = x->pf_m - j;                                                                             \
            REST(q, &rest, (const char *)k + (size_t)j * x->stride * elem_bytes(dt), sk, out + j, ldo, dt);      \
        }                                                                                                        \
    }

QK_FOURS(qk_avx2_t, AVX2_INLINE, dot4x4_avx2, 4, qk_pairs_t)

/* Keys in pairs by dot4x2 (any d). */
AVX2_INLINE void qk_pairs_t(const float *q, const dims *x, const void *k, const float *sk, float *out, int ldo,
                            const int dt)
{
    const int rh = x->rh, d = x->d;
    const size_t row_elems = (size_t)x->nh * (size_t)d;
    const int ahead = attn__decode_k_ahead > 0 ? attn__decode_k_ahead : DECODE_K_AHEAD;
    for (int j = 0; j < x->m; j += 2) {
        const int two = j + 1 < x->m;
        if (x->own) {
            prefetch(k, (size_t)(j + ahead) * x->stride, row_elems, dt);
            if (two) prefetch(k, (size_t)(j + ahead + 1) * x->stride, row_elems, dt);
            prefetch_other(x, j);
            prefetch_other(x, j + 1);
        }
        pf_walk w;
        pf_walk_init(&w, x, j, 1 + two, x->nh, !x->own);
        for (int jh = 0; jh < x->nh; jh++) {
            pf_walk_step(&w);
            const size_t kj = (size_t)j * x->stride + (size_t)jh * d;
            const float s = sk ? sk[jh] : 1.0f;
            const float *qh = q + (size_t)jh * rh * d;
            float *oh = out + (size_t)jh * rh * ldo + j;
            int r = 0;
            for (; r + 4 <= rh; r += 4)
                dot4x2(qh + (size_t)r * d, d, k, kj, two ? kj + x->stride : kj, two, dt, s, oh + (size_t)r * ldo, ldo);
            for (; r < rh; r++) {
                dot1(qh + (size_t)r * d, d, k, kj, dt, s, oh + (size_t)r * ldo);
                if (two) dot1(qh + (size_t)r * d, d, k, kj + x->stride, dt, s, oh + (size_t)r * ldo + 1);
            }
        }
    }
}

/* acc rows 0..3 (stride d), columns [c, c + 16), over m keys at v (stride
 * elements apart); the accumulators stay in registers. */
AVX2_INLINE void axpy4x16(const float *p, int ldp, const void *v, size_t stride, int m, int dt, float *acc, int d,
                          int c)
{
    float *a0 = acc + c, *a1 = a0 + d, *a2 = a1 + d, *a3 = a2 + d;
    __m256 x0 = _mm256_loadu_ps(a0), y0 = _mm256_loadu_ps(a0 + 8), x1 = _mm256_loadu_ps(a1),
           y1 = _mm256_loadu_ps(a1 + 8), x2 = _mm256_loadu_ps(a2), y2 = _mm256_loadu_ps(a2 + 8),
           x3 = _mm256_loadu_ps(a3), y3 = _mm256_loadu_ps(a3 + 8);
    for (int j = 0; j < m; j++) {
        const size_t vj = (size_t)j * stride + (size_t)c;
        const __m256 lo = load8(v, vj, dt), hi = load8(v, vj + 8, dt);
        __m256 pb = _mm256_broadcast_ss(p + j);
        x0 = _mm256_fmadd_ps(pb, lo, x0);
        y0 = _mm256_fmadd_ps(pb, hi, y0);
        pb = _mm256_broadcast_ss(p + ldp + j);
        x1 = _mm256_fmadd_ps(pb, lo, x1);
        y1 = _mm256_fmadd_ps(pb, hi, y1);
        pb = _mm256_broadcast_ss(p + 2 * (size_t)ldp + j);
        x2 = _mm256_fmadd_ps(pb, lo, x2);
        y2 = _mm256_fmadd_ps(pb, hi, y2);
        pb = _mm256_broadcast_ss(p + 3 * (size_t)ldp + j);
        x3 = _mm256_fmadd_ps(pb, lo, x3);
        y3 = _mm256_fmadd_ps(pb, hi, y3);
    }
    _mm256_storeu_ps(a0, x0);
    _mm256_storeu_ps(a0 + 8, y0);
    _mm256_storeu_ps(a1, x1);
    _mm256_storeu_ps(a1 + 8, y1);
    _mm256_storeu_ps(a2, x2);
    _mm256_storeu_ps(a2 + 8, y2);
    _mm256_storeu_ps(a3, x3);
    _mm256_storeu_ps(a3 + 8, y3);
}

AVX2_INLINE void axpy1(const float *p, const void *v, size_t stride, int m, int dt, float *acc, int c)
{
    __m256 a = _mm256_loadu_ps(acc + c);
    for (int j = 0; j < m; j++)
        a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), load8(v, (size_t)j * stride + (size_t)c, dt), a);
    _mm256_storeu_ps(acc + c, a);
}

/* Rows r..rh of all d8 columns, and the last d % 8 columns of every row. */
AVX2_INLINE void pv_tail(const float *p, int ldp, int rh, int r, const void *v, size_t stride, int m, int dt,
                         float *acc, int d)
{
    const int d8 = d & ~7;
    for (; r < rh; r++)
        for (int c = 0; c < d8; c += 8) axpy1(p + (size_t)r * ldp, v, stride, m, dt, acc + (size_t)r * d, c);
    if (d8 < d) /* the last d % 8 columns */
        for (int rr = 0; rr < rh; rr++)
            for (int j = 0; j < m; j++) {
                const float pj = p[(size_t)rr * ldp + j];
                for (int c = d8; c < d; c++) acc[(size_t)rr * d + c] += pj * load1(v, (size_t)j * stride + c, dt);
            }
}

/* One KV head's rh rows, m keys, columns from 0 to d. */
AVX2_INLINE void pv_head(const float *p, int ldp, int rh, const void *v, size_t stride, int m, int dt, float *acc,
                         int d)
{
    const int d8 = d & ~7;
    int r = 0;
    for (; r + 4 <= rh; r += 4) {
        const float *pr = p + (size_t)r * ldp;
        float *ar = acc + (size_t)r * d;
        int c = 0;
        for (; c + 16 <= d8; c += 16) axpy4x16(pr, ldp, v, stride, m, dt, ar, d, c);
        if (c < d8) /* 8 columns left */
            for (int i = 0; i < 4; i++) axpy1(pr + (size_t)i * ldp, v, stride, m, dt, ar + (size_t)i * d, c);
    }
    pv_tail(p, ldp, rh, r, v, stride, m, dt, acc, d);
}

/* Keys per V sub-block for rows of row_elems elements of dtype dt: DECODE_SUB,
 * fewer when a bench caps the sub-block's bytes (attn__decode_sub_bytes), at
 * least 1. Both the AVX2 and the AVX-512 P.V loops use it. */
static int sub_keys(size_t row_elems, int dt)
{
    const size_t cap = attn__decode_sub_bytes > 0 ? (size_t)attn__decode_sub_bytes : DECODE_SUB_BYTES;
    const size_t fit = cap / (row_elems * elem_bytes(dt));
    return fit >= DECODE_SUB ? DECODE_SUB : fit < 1 ? 1 : (int)fit;
}

/* Sub-blocks of up to DECODE_SUB keys (and attn__decode_sub_bytes of V
 * rows when a bench sets it): every head's axpys on them while they are
 * near, the next sub-block prefetched. 16 F32 rows of 8 heads x 64 are
 * 32 KiB, more than L1, but an 8 KiB cap measured no faster. */
AVX2_INLINE void pv_avx2_t(const float *p, int ldp, const dims *x, const void *v, float *acc, const int dt)
{
    const size_t row_elems = (size_t)x->nh * (size_t)x->d;
    const int sub = sub_keys(row_elems, dt);
    for (int j0 = 0; j0 < x->m; j0 += sub) {
        const int n = x->m - j0 < sub ? x->m - j0 : sub;
        for (int j = 0; x->own && j < sub; j++) prefetch(v, (size_t)(j0 + sub + j) * x->stride, row_elems, dt);
        for (int j = 0; x->own && j < n; j++) prefetch_other(x, j0 + j);
        pf_walk w;
        pf_walk_init(&w, x, j0, n, x->nh, !x->own);
        for (int jh = 0; jh < x->nh; jh++) {
            pf_walk_step(&w);
            pv_head(p + (size_t)jh * x->rh * ldp + j0, ldp, x->rh,
                    (const char *)v + ((size_t)j0 * x->stride + (size_t)jh * x->d) * elem_bytes(dt), x->stride, n,
                    dt, acc + (size_t)jh * x->rh * x->d, x->d);
        }
    }
}
/* AVX-512 (CPUs with avx512f): the same axpys with 16 columns a register,
 * the probability broadcast folded into the FMA; each acc lane gets the very
 * FMAs, in the same order, of the AVX2 kernel, so the results are the same
 * bits. Everything but the 4-row, 16-column blocks is the AVX2 code. */
AVX512_INLINE __m512 load16(const void *p, size_t i, int dt)
{
    switch (dt) {
    case ATTN_KV_F32: return _mm512_loadu_ps((const float *)p + i);
    case ATTN_KV_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
    case ATTN_KV_BF16: {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
    default: return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((const int8_t *)p + i))));
    }
}

AVX512_INLINE void axpy4x16_512(const float *p, int ldp, const void *v, size_t stride, int m, int dt, float *acc,
                                int d, int c)
{
    float *a0 = acc + c, *a1 = a0 + d, *a2 = a1 + d, *a3 = a2 + d;
    const float *p1 = p + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
    __m512 x0 = _mm512_loadu_ps(a0), x1 = _mm512_loadu_ps(a1), x2 = _mm512_loadu_ps(a2), x3 = _mm512_loadu_ps(a3);
    for (int j = 0; j < m; j++) {
        const __m512 w = load16(v, (size_t)j * stride + (size_t)c, dt);
        x0 = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), w, x0);
        x1 = _mm512_fmadd_ps(_mm512_set1_ps(p1[j]), w, x1);
        x2 = _mm512_fmadd_ps(_mm512_set1_ps(p2[j]), w, x2);
        x3 = _mm512_fmadd_ps(_mm512_set1_ps(p3[j]), w, x3);
    }
    _mm512_storeu_ps(a0, x0);
    _mm512_storeu_ps(a1, x1);
    _mm512_storeu_ps(a2, x2);
    _mm512_storeu_ps(a3, x3);
}

/* axpy4x16_512 over 64 columns at once (16 accumulators): each key's four
 * probabilities are broadcast once for all 64 columns, where four calls of
 * axpy4x16_512 broadcast them four times (20 loads for 16 FMAs a key; here
 * 8). Each acc lane gets the same FMAs in the same order: the same bits. */
#define AXPY4_ROW(r, pr)                                                                                         \
    do {                                                                                                         \
        const __m512 b = _mm512_set1_ps((pr)[j]);                                                                \
        x##r##0 = _mm512_fmadd_ps(b, w0, x##r##0);                                                               \
        x##r##1 = _mm512_fmadd_ps(b, w1, x##r##1);                                                               \
        x##r##2 = _mm512_fmadd_ps(b, w2, x##r##2);                                                               \
        x##r##3 = _mm512_fmadd_ps(b, w3, x##r##3);                                                               \
    } while (0)
AVX512_INLINE void axpy4x64_512(const float *p, int ldp, const void *v, size_t stride, int m, int dt, float *acc,
                                int d, int c)
{
    float *a0 = acc + c, *a1 = a0 + d, *a2 = a1 + d, *a3 = a2 + d;
    const float *p1 = p + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
    __m512 x00 = _mm512_loadu_ps(a0), x01 = _mm512_loadu_ps(a0 + 16), x02 = _mm512_loadu_ps(a0 + 32),
           x03 = _mm512_loadu_ps(a0 + 48), x10 = _mm512_loadu_ps(a1), x11 = _mm512_loadu_ps(a1 + 16),
           x12 = _mm512_loadu_ps(a1 + 32), x13 = _mm512_loadu_ps(a1 + 48), x20 = _mm512_loadu_ps(a2),
           x21 = _mm512_loadu_ps(a2 + 16), x22 = _mm512_loadu_ps(a2 + 32), x23 = _mm512_loadu_ps(a2 + 48),
           x30 = _mm512_loadu_ps(a3), x31 = _mm512_loadu_ps(a3 + 16), x32 = _mm512_loadu_ps(a3 + 32),
           x33 = _mm512_loadu_ps(a3 + 48);
    for (int j = 0; j < m; j++) {
        const size_t at = (size_t)j * stride + (size_t)c;
        const __m512 w0 = load16(v, at, dt), w1 = load16(v, at + 16, dt), w2 = load16(v, at + 32, dt),
                     w3 = load16(v, at + 48, dt);
        AXPY4_ROW(0, p);
        AXPY4_ROW(1, p1);
        AXPY4_ROW(2, p2);
        AXPY4_ROW(3, p3);
    }
    _mm512_storeu_ps(a0, x00), _mm512_storeu_ps(a0 + 16, x01), _mm512_storeu_ps(a0 + 32, x02);
    _mm512_storeu_ps(a0 + 48, x03), _mm512_storeu_ps(a1, x10), _mm512_storeu_ps(a1 + 16, x11);
    _mm512_storeu_ps(a1 + 32, x12), _mm512_storeu_ps(a1 + 48, x13), _mm512_storeu_ps(a2, x20);
    _mm512_storeu_ps(a2 + 16, x21), _mm512_storeu_ps(a2 + 32, x22), _mm512_storeu_ps(a2 + 48, x23);
    _mm512_storeu_ps(a3, x30), _mm512_storeu_ps(a3 + 16, x31), _mm512_storeu_ps(a3 + 32, x32);
    _mm512_storeu_ps(a3 + 48, x33);
}
#undef AXPY4_ROW

AVX512_INLINE void pv_head512(const float *p, int ldp, int rh, const void *v, size_t stride, int m, int dt,
                              float *acc, int d)
{
    const int d8 = d & ~7;
    int r = 0;
    for (; r + 4 <= rh; r += 4) {
        const float *pr = p + (size_t)r * ldp;
        float *ar = acc + (size_t)r * d;
        int c = 0;
        for (; c + 64 <= d8; c += 64) axpy4x64_512(pr, ldp, v, stride, m, dt, ar, d, c);
        for (; c + 16 <= d8; c += 16) axpy4x16_512(pr, ldp, v, stride, m, dt, ar, d, c);
        if (c < d8)
            for (int i = 0; i < 4; i++) axpy1(pr + (size_t)i * ldp, v, stride, m, dt, ar + (size_t)i * d, c);
    }
    if (r < rh || d8 < d) /* the rows and columns the AVX2 code does alone */
        pv_tail(p, ldp, rh, r, v, stride, m, dt, acc, d);
}

AVX512_INLINE void pv_avx512_t(const float *p, int ldp, const dims *x, const void *v, float *acc, const int dt)
{
    const size_t row_elems = (size_t)x->nh * (size_t)x->d;
    const int sub = sub_keys(row_elems, dt);
    for (int j0 = 0; j0 < x->m; j0 += sub) {
        const int n = x->m - j0 < sub ? x->m - j0 : sub;
        for (int j = 0; x->own && j < sub; j++) prefetch(v, (size_t)(j0 + sub + j) * x->stride, row_elems, dt);
        for (int j = 0; x->own && j < n; j++) prefetch_other(x, j0 + j);
        pf_walk w;
        pf_walk_init(&w, x, j0, n, x->nh, !x->own);
        for (int jh = 0; jh < x->nh; jh++) {
            pf_walk_step(&w);
            pv_head512(p + (size_t)jh * x->rh * ldp + j0, ldp, x->rh,
                       (const char *)v + ((size_t)j0 * x->stride + (size_t)jh * x->d) * elem_bytes(dt), x->stride,
                       n, dt, acc + (size_t)jh * x->rh * x->d, x->d);
        }
    }
}

/* Q.K on AVX-512VL CPUs: 4 query rows x 4 keys a call (dot4x4_zmm below,
 * on the helpers that follow). Eight elements of each of two keys (at i
 * and i2) in the low and high halves of one zmm register, widened as load8
 * widens them. */
AVX512VL_INLINE __m512 load8x2(const void *p, size_t i, size_t i2, int dt)
{
    switch (dt) {
    case ATTN_KV_F32: {
        const __m512d lo = _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps((const float *)p + i)));
        return _mm512_castpd_ps(_mm512_insertf64x4(lo, _mm256_castps_pd(_mm256_loadu_ps((const float *)p + i2)), 1));
    }
    case ATTN_KV_F16:
    case ATTN_KV_BF16: {
        const __m256i h = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i))),
            _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i2)), 1);
        if (dt == ATTN_KV_F16) return _mm512_cvtph_ps(h);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    default: {
        const __m128i b = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)((const int8_t *)p + i)),
                                             _mm_loadl_epi64((const __m128i *)((const int8_t *)p + i2)));
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    }
    }
}

/* Eight floats from q in both halves of a zmm register. */
AVX512VL_INLINE __m512 bcast8(const float *q)
{
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(q))));
}

AVX512VL_INLINE __m256 half_lo(__m512 a) { return _mm512_castps512_ps256(a); }
AVX512VL_INLINE __m256 half_hi(__m512 a) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)); }

/* _mm256_hadd_ps on each 256-bit half of two zmm registers at once: per
 * 128-bit lane [x0+x1, x2+x3, y0+y1, y2+y3], the same sums. */
AVX512VL_INLINE __m512 hadd_halves(__m512 x, __m512 y)
{
    return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x88), _mm512_shuffle_ps(x, y, 0xDD));
}

/* dot4x2's two hsum4 trees for 4 rows x 2 keys at once: a0..a3's low
 * halves are the eight-lane accumulators of rows 0..3 with key 0, their
 * high halves those with key 1; returns [the 4 rows' sums of key 0 | of
 * key 1]. Each sum is hsum4's: the same adds of the same pairs (two hadds,
 * then the two 128-bit halves added), done on both keys in one zmm
 * register (the ymm version, six vhaddps and two 128-bit permutes per
 * call, measured 1.02-1.05x slower). */
AVX512VL_INLINE __m256 hsum4x2_zmm(__m512 a0, __m512 a1, __m512 a2, __m512 a3)
{
    const __m512 x = hadd_halves(hadd_halves(a0, a1), hadd_halves(a2, a3)); /* key 0's tree | key 1's */
    const __m512 t = _mm512_shuffle_f32x4(x, x, 0xD8);                      /* lanes 0, 2, 1, 3 */
    return _mm256_add_ps(half_lo(t), half_hi(t));
}

/* 4 query rows x 4 keys, two keys a zmm register: the low and high halves
 * of a_r are dot4x2's eight-lane accumulators of (row r, key 0) and (row r,
 * key 1), b_r those of keys 2 and 3, fed the very FMAs of dot4x2, lane by
 * lane in the same order, reduced by its hsum4 tree (hsum4x2_zmm) and
 * multiplied by s_k the same way: every score has dot4x2's bits (the AVX2
 * kernel's; test_decode's avx512_equals_avx2). One FMA does the work of two
 * eight-lane ones, and each eight floats of q are loaded once for four keys
 * (the ymm version it replaces, 16 accumulators, took 1.00-1.06x its step
 * time for the narrow dtypes, 16 sessions at P = 8192 on a Zen 5). */
AVX512VL_INLINE void store4x4_zmm(__m512 a0, __m512 a1, __m512 a2, __m512 a3, __m512 b0, __m512 b1, __m512 b2,
                                  __m512 b3, float sk, float *out, int ldo)
{
    const __m256 s = _mm256_set1_ps(sk);
    const __m256 z01 = _mm256_mul_ps(hsum4x2_zmm(a0, a1, a2, a3), s); /* rows of keys 0 | 1 */
    const __m256 z23 = _mm256_mul_ps(hsum4x2_zmm(b0, b1, b2, b3), s); /* rows of keys 2 | 3 */
    __m128 r0 = _mm256_castps256_ps128(z01), r1 = _mm256_extractf128_ps(z01, 1), r2 = _mm256_castps256_ps128(z23),
           r3 = _mm256_extractf128_ps(z23, 1);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3); /* now r_i = row i's four keys */
    _mm_storeu_ps(out, r0);
    _mm_storeu_ps(out + ldo, r1);
    _mm_storeu_ps(out + 2 * (size_t)ldo, r2);
    _mm_storeu_ps(out + 3 * (size_t)ldo, r3);
}

AVX512VL_INLINE void dot4x4_zmm(const float *q0, int d, const void *k, size_t kj, size_t stride, int dt, float sk,
                                float *out, int ldo)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
#pragma GCC unroll 16
    for (int c = 0; c < d; c += 8) {
        const __m512 k01 = load8x2(k, kj + (size_t)c, kj + stride + (size_t)c, dt);
        const __m512 k23 = load8x2(k, kj + 2 * stride + (size_t)c, kj + 3 * stride + (size_t)c, dt);
        __m512 q = bcast8(q0 + c);
        a0 = _mm512_fmadd_ps(q, k01, a0);
        b0 = _mm512_fmadd_ps(q, k23, b0);
        q = bcast8(q0 + d + c);
        a1 = _mm512_fmadd_ps(q, k01, a1);
        b1 = _mm512_fmadd_ps(q, k23, b1);
        q = bcast8(q0 + 2 * d + c);
        a2 = _mm512_fmadd_ps(q, k01, a2);
        b2 = _mm512_fmadd_ps(q, k23, b2);
        q = bcast8(q0 + 3 * d + c);
        a3 = _mm512_fmadd_ps(q, k01, a3);
        b3 = _mm512_fmadd_ps(q, k23, b3);
    }
    store4x4_zmm(a0, a1, a2, a3, b0, b1, b2, b3, sk, out, ldo);
}

/* dot4x4_zmm on keys 0-3 and 4-7 at once: each eight floats of q loaded
 * once for eight keys, and sixteen independent FMA chains. Every score
 * gets dot4x4_zmm's operations, so the same bits. */
#define DOT8_ROW(r)                                                                                                \
    do {                                                                                                           \
        const __m512 q = bcast8(q0 + (size_t)(r) * d + c);                                                        \
        a##r = _mm512_fmadd_ps(q, k01, a##r);                                                                      \
        b##r = _mm512_fmadd_ps(q, k23, b##r);                                                                      \
        e##r = _mm512_fmadd_ps(q, k45, e##r);                                                                      \
        f##r = _mm512_fmadd_ps(q, k67, f##r);                                                                      \
    } while (0)
AVX512VL_INLINE void dot4x8_zmm(const float *q0, int d, const void *k, size_t kj, size_t stride, int dt, float sk,
                                float *out, int ldo)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    __m512 e0 = a0, e1 = a0, e2 = a0, e3 = a0, f0 = a0, f1 = a0, f2 = a0, f3 = a0;
#pragma GCC unroll 16
    for (int c = 0; c < d; c += 8) {
        const __m512 k01 = load8x2(k, kj + (size_t)c, kj + stride + (size_t)c, dt);
        const __m512 k23 = load8x2(k, kj + 2 * stride + (size_t)c, kj + 3 * stride + (size_t)c, dt);
        const __m512 k45 = load8x2(k, kj + 4 * stride + (size_t)c, kj + 5 * stride + (size_t)c, dt);
        const __m512 k67 = load8x2(k, kj + 6 * stride + (size_t)c, kj + 7 * stride + (size_t)c, dt);
        DOT8_ROW(0);
        DOT8_ROW(1);
        DOT8_ROW(2);
        DOT8_ROW(3);
    }
    store4x4_zmm(a0, a1, a2, a3, b0, b1, b2, b3, sk, out, ldo);
    store4x4_zmm(e0, e1, e2, e3, f0, f1, f2, f3, sk, out + 4, ldo);
}
#undef DOT8_ROW

/* qk_avx2_t with dot4x8_zmm, eight keys a pass, then with dot4x4_zmm. */
QK_FOURS(qk_zmm4_t, AVX512VL_INLINE, dot4x4_zmm, 4, qk_pairs_t)
/* The keys after the last eight: four at a time, then in pairs. */
AVX512VL_INLINE void qk_zmm4_pairs(const float *q, const dims *x, const void *k, const float *sk, float *out, int ldo,
                                   const int dt)
{
    qk_zmm4_t(q, x, k, sk, out, ldo, 0, dt);
}
QK_FOURS(qk_zmm_t, AVX512VL_INLINE, dot4x8_zmm, 8, qk_zmm4_pairs)

/* One instance per dtype (dt a constant inside), chosen per run. */
#define DTYPE_SWITCH(fn, dt, ...)                                                                                   \
    switch (dt) {                                                                                                    \
    case ATTN_KV_F32: fn(__VA_ARGS__, ATTN_KV_F32); break;                                                           \
    case ATTN_KV_F16: fn(__VA_ARGS__, ATTN_KV_F16); break;                                                           \
    case ATTN_KV_BF16: fn(__VA_ARGS__, ATTN_KV_BF16); break;                                                         \
    default: fn(__VA_ARGS__, ATTN_KV_INT8); break;                                                                   \
    }

/* A QK_FOURS kernel fn per head size and dtype: 64 and 128 (Llama's, most
 * models') as constants, any other at run time. */
#define QK_BY_HEAD_SIZE(fn, q, x, k, sk, out, ldo)                                                                \
    switch ((x)->d) {                                                                                            \
    case 64: DTYPE_SWITCH(fn, (x)->dt, q, x, k, sk, out, ldo, 64) break;                                         \
    case 128: DTYPE_SWITCH(fn, (x)->dt, q, x, k, sk, out, ldo, 128) break;                                       \
    default: DTYPE_SWITCH(fn, (x)->dt, q, x, k, sk, out, ldo, 0) break;                                          \
    }

AVX2_FN static void qk_avx2(const float *q, const dims *x, const void *k, const float *sk, float *out, int ldo)
{
    QK_BY_HEAD_SIZE(qk_avx2_t, q, x, k, sk, out, ldo)
}

AVX2_FN static void pv_avx2(const float *p, int ldp, const dims *x, const void *v, float *acc)
{
    DTYPE_SWITCH(pv_avx2_t, x->dt, p, ldp, x, v, acc)
}

AVX512_FN static void pv_avx512(const float *p, int ldp, const dims *x, const void *v, float *acc)
{
    DTYPE_SWITCH(pv_avx512_t, x->dt, p, ldp, x, v, acc)
}

AVX512VL_FN static void qk_avx512(const float *q, const dims *x, const void *k, const float *sk, float *out, int ldo)
{
    QK_BY_HEAD_SIZE(qk_zmm_t, q, x, k, sk, out, ldo)
}

/* F16C by CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports knows no
 * "f16c", and `make fuzz` builds lib/ with clang. */
static int cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

/* 0: portable, 1: AVX2, 2: AVX2 with the AVX-512 axpys, 3: and the
 * AVX-512VL scores (dot4x4_zmm). */
static int use_avx2(void)
{
    if (attn__decode_portable_only || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !cpu_has_f16c())
        return 0;
    if (attn__decode_no_avx512 || !__builtin_cpu_supports("avx512f")) return 1;
    return __builtin_cpu_supports("avx512vl") ? 3 : 2;
}
#else
static int use_avx2(void) { return 0; }
#endif

static void qk_run(int avx2, const float *q, const dims *x, const void *k, const float *sk, float *out, int ldo)
{
#ifdef DECODE_AVX2
    if (avx2 == 3 && x->d % 8 == 0 && !attn__decode_three_phase) {
        qk_avx512(q, x, k, sk, out, ldo);
        return;
    }
    if (avx2) {
        qk_avx2(q, x, k, sk, out, ldo);
        return;
    }
#endif
    (void)avx2;
    qk_portable(q, x, k, sk, out, ldo);
}

static void pv_run(int avx2, const float *p, int ldp, const dims *x, const void *v, float *acc)
{
#ifdef DECODE_AVX2
    if (avx2 >= 2) {
        pv_avx512(p, ldp, x, v, acc);
        return;
    }
    if (avx2) {
        pv_avx2(p, ldp, x, v, acc);
        return;
    }
#endif
    (void)avx2;
    pv_portable(p, ldp, x, v, acc);
}

/* ------------------------------------------ INT8 scores on int8 queries */

/* A job's queries for an INT8 cache, quantised once a job: row r is
 * q[r * pad, + d_k) (zeros up to pad, a multiple of 64), each element
 * round_half_even(qb / scale[r]) with scale[r] = max|qb row| / 127, and
 * sum[r] the sum of the row's int8 elements. The score of (row, key) is
 * then the exact integer dot product of two int8 rows, scaled: every kernel
 * below computes the same integer, whatever its order, so they agree to the
 * bit (test_decode's int8_queries_kernels_agree). */
typedef struct qk8 {
    const int8_t *q;
    const float *scale;
    const int32_t *sum;
    size_t pad;
} qk8;

/* The score from the integer dot product, in this order on every kernel. */
static inline float q8_score(int32_t dot, float qs, float sk) { return ((float)dot * qs) * sk; }

/* out[row*ldo + j] = the score of row and key j (head jh's columns). */
static void qk8_portable(const qk8 *q, const dims *x, const void *k, const float *sk, float *out, int ldo)
{
    const int8_t *kb = k;
    for (int j = 0; j < x->m; j++)
        for (int jh = 0; jh < x->nh; jh++)
            for (int rr = 0; rr < x->rh; rr++) {
                const int row = jh * x->rh + rr;
                const int8_t *qr = q->q + (size_t)row * q->pad, *kr = kb + (size_t)j * x->stride + (size_t)jh * x->d;
                int32_t dot = 0;
                for (int c = 0; c < x->d; c++) dot += (int32_t)qr[c] * kr[c];
                out[(size_t)row * ldo + j] = q8_score(dot, q->scale[row], sk ? sk[jh] : 1.0f);
            }
}

#ifdef DECODE_AVX2
#define VNNI_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define VNNI_INLINE __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) static inline
#define Q8_MAX_BLOCKS 8 /* 64-byte blocks of a K row the integer kernels take: d_k <= 512 */

/* The prefetches of the int8 kernels' group of n keys from key j, as
 * QK_FOURS's: the pass's own next rows (the three-phase tiles), or the
 * walk of its other stream into *w (stepped once a KV head). */
AVX2_INLINE void group_prefetch(const dims *x, const void *k, int j, int n, pf_walk *w)
{
    const size_t row_elems = (size_t)x->nh * (size_t)x->d;
    const int ahead = attn__decode_k_ahead > 0 ? attn__decode_k_ahead : DECODE_K_AHEAD;
    for (int i = 0; x->own && i < n; i++) prefetch(k, (size_t)(j + ahead + i) * x->stride, row_elems, x->dt);
    for (int i = 0; x->own && i < n; i++) prefetch_other(x, j + i);
    pf_walk_init(w, x, j, n, x->nh, !x->own);
}

/* r[c] becomes the vector whose lane i is dword c of the old r[i]: a 16 x 16
 * transpose of 32-bit elements (interleave dwords, then qwords, then 128-bit
 * lanes twice). */
VNNI_INLINE void transpose16_epi32(__m512i r[16])
{
    __m512i a[16], b[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) { /* b[4g + e], 128-bit lane L: column 4L + e of rows 4g..4g+3 */
        b[4 * g] = _mm512_unpacklo_epi64(a[4 * g], a[4 * g + 2]);
        b[4 * g + 1] = _mm512_unpackhi_epi64(a[4 * g], a[4 * g + 2]);
        b[4 * g + 2] = _mm512_unpacklo_epi64(a[4 * g + 1], a[4 * g + 3]);
        b[4 * g + 3] = _mm512_unpackhi_epi64(a[4 * g + 1], a[4 * g + 3]);
    }
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) {
        const __m512i x0 = _mm512_shuffle_i32x4(b[e], b[4 + e], 0x44), x1 = _mm512_shuffle_i32x4(b[e], b[4 + e], 0xEE);
        const __m512i x2 = _mm512_shuffle_i32x4(b[8 + e], b[12 + e], 0x44),
                      x3 = _mm512_shuffle_i32x4(b[8 + e], b[12 + e], 0xEE);
        r[e] = _mm512_shuffle_i32x4(x0, x2, 0x88);
        r[4 + e] = _mm512_shuffle_i32x4(x0, x2, 0xDD);
        r[8 + e] = _mm512_shuffle_i32x4(x1, x3, 0x88);
        r[12 + e] = _mm512_shuffle_i32x4(x1, x3, 0xDD);
    }
}

/* Four int8 elements of a query row as one dword, broadcast. */
VNNI_INLINE __m512i bcast_dword(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* The scores of ROWS query rows from `row` against the 16 keys whose
 * transposed 64-byte blocks are t (DW dwords; lanes past n unused), stored
 * for the n keys: vpdpbusd multiplies unsigned by signed bytes, so the keys
 * were offset by 128 (k ^ 0x80) and each row starts from -128 * its sum.
 * Two chains a row (even and odd dwords). */
#define Q8_ROWS(NAME, ROWS)                                                                                      \
    VNNI_INLINE void NAME(const qk8 *q, const __m512i *t, const int dw, int row, float sk, int n, float *out,    \
                          int ldo)                                                                               \
    {                                                                                                            \
        __m512i e[ROWS], o[ROWS];                                                                                \
        const int8_t *qr[ROWS];                                                                                  \
        _Pragma("GCC unroll 4") for (int i = 0; i < (ROWS); i++)                                                 \
        {                                                                                                        \
            e[i] = _mm512_set1_epi32(-128 * q->sum[row + i]);                                                    \
            o[i] = _mm512_setzero_si512();                                                                       \
            qr[i] = q->q + (size_t)(row + i) * q->pad;                                                           \
        }                                                                                                        \
        _Pragma("GCC unroll 16") for (int c = 0; c < dw; c += 2)                                                 \
        {                                                                                                        \
            _Pragma("GCC unroll 4") for (int i = 0; i < (ROWS); i++)                                             \
            {                                                                                                    \
                e[i] = _mm512_dpbusd_epi32(e[i], t[c], bcast_dword(qr[i] + 4 * c));                              \
                o[i] = _mm512_dpbusd_epi32(o[i], t[c + 1], bcast_dword(qr[i] + 4 * c + 4));                      \
            }                                                                                                    \
        }                                                                                                        \
        const __mmask16 keep = (__mmask16)((1u << n) - 1);                                                       \
        _Pragma("GCC unroll 4") for (int i = 0; i < (ROWS); i++)                                                 \
        {                                                                                                        \
            const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(e[i], o[i]));                                 \
            const __m512 z = _mm512_mul_ps(_mm512_mul_ps(dot, _mm512_set1_ps(q->scale[row + i])), _mm512_set1_ps(sk)); \
            _mm512_mask_storeu_ps(out + (size_t)(row + i) * ldo, keep, z);                                       \
        }                                                                                                        \
    }
Q8_ROWS(q8_rows4, 4)
Q8_ROWS(q8_rows1, 1)
#undef Q8_ROWS

/* qk8_portable's scores, 16 keys at a time: each key's row of KV head jh
 * (d bytes, 64 a block, the last one masked; keys past m masked out, read
 * as zeros) offset to unsigned, the 16 rows transposed so lane i holds key
 * i, then one vpdpbusd per four elements and query row gives the 16 keys'
 * dot products in one register (whole 64-byte blocks of 16 keys by plain
 * loads: 3-4 % faster a step than masked ones with a full mask, one
 * thread). Prefetches as QK_FOURS's. dc: d as a
 * constant (64, 128: the loops unroll and t stays in registers) or 0 (any
 * d <= 64 * Q8_MAX_BLOCKS, run time). */
VNNI_INLINE void qk8_vnni_t(const qk8 *q, const dims *x, const void *k, const float *sk, float *out, int ldo,
                            const int dc)
{
    const int d = dc ? dc : x->d, rh = x->rh, nb = (d + 63) / 64;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i t[Q8_MAX_BLOCKS * 16];
    for (int j = 0; j < x->m; j += 16) {
        const int n = x->m - j < 16 ? x->m - j : 16;
        pf_walk w;
        group_prefetch(x, k, j, n, &w);
        for (int jh = 0; jh < x->nh; jh++) {
            pf_walk_step(&w);
            const int8_t *kj = (const int8_t *)k + (size_t)j * x->stride + (size_t)jh * d;
            _Pragma("GCC unroll 2") for (int b = 0; b < nb; b++)
            {
                const int bytes = d - 64 * b < 64 ? d - 64 * b : 64;
                const __mmask64 cols = bytes == 64 ? ~(__mmask64)0 : ((__mmask64)1 << bytes) - 1;
                __m512i *tb = t + 16 * b;
                if (n == 16 && bytes == 64) {
                    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++)
                        tb[i] = _mm512_xor_si512(_mm512_loadu_si512(kj + (size_t)i * x->stride + 64 * (size_t)b), flip);
                } else {
                    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++)
                    {
                        const __mmask64 mask = i < n ? cols : 0; /* masked-out bytes are not read */
                        tb[i] = _mm512_xor_si512(
                            _mm512_maskz_loadu_epi8(mask, kj + (size_t)i * x->stride + 64 * (size_t)b), flip);
                    }
                }
                transpose16_epi32(tb);
            }
            const float s = sk ? sk[jh] : 1.0f;
            float *oh = out + j;
            int r = 0;
            for (; r + 4 <= rh; r += 4) q8_rows4(q, t, 16 * nb, jh * rh + r, s, n, oh, ldo);
            for (; r < rh; r++) q8_rows1(q, t, 16 * nb, jh * rh + r, s, n, oh, ldo);
        }
    }
}

VNNI_FN static void qk8_vnni(const qk8 *q, const dims *x, const void *k, const float *sk, float *out, int ldo)
{
    switch (x->d) {
    case 64: qk8_vnni_t(q, x, k, sk, out, ldo, 64); break;
    case 128: qk8_vnni_t(q, x, k, sk, out, ldo, 128); break;
    default: qk8_vnni_t(q, x, k, sk, out, ldo, 0); break;
    }
}

/* r[c] becomes the vector whose lane i is dword c of the old r[i]: an 8 x 8
 * transpose of 32-bit elements. */
AVX2_INLINE void transpose8_epi32(__m256i r[8])
{
    const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    const __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    const __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    /* u_e, 128-bit lane L: column 4L + e of rows 0..3 (u0..u3) or 4..7 (u4..u7) */
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    r[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    r[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    r[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    r[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    r[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    r[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    r[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    r[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

/* The sum of four int8 products in each dword lane of k and q (q one
 * dword broadcast), exact: |q| times k with q's sign (vpmaddubsw's pairs
 * stay within int16: 2 * 127 * 127), the pairs then added (vpmaddwd). */
AVX2_INLINE __m256i dot4_epi8(__m256i k, __m256i q)
{
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(k, q));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

/* The scores of ROWS query rows from `row` against the 8 keys whose
 * transposed 32-byte blocks are t (DW dwords), stored for the n keys. */
#define Q8_ROWS_AVX2(NAME, ROWS)                                                                                 \
    AVX2_INLINE void NAME(const qk8 *q, const __m256i *t, const int dw, int row, float sk, int n, float *out,    \
                          int ldo)                                                                               \
    {                                                                                                            \
        __m256i e[ROWS], o[ROWS];                                                                                \
        const int8_t *qr[ROWS];                                                                                  \
        _Pragma("GCC unroll 4") for (int i = 0; i < (ROWS); i++)                                                 \
        {                                                                                                        \
            e[i] = o[i] = _mm256_setzero_si256();                                                                \
            qr[i] = q->q + (size_t)(row + i) * q->pad;                                                           \
        }                                                                                                        \
        _Pragma("GCC unroll 16") for (int c = 0; c < dw; c += 2)                                                 \
        {                                                                                                        \
            _Pragma("GCC unroll 4") for (int i = 0; i < (ROWS); i++)                                             \
            {                                                                                                    \
                int32_t a, b;                                                                                    \
                memcpy(&a, qr[i] + 4 * c, 4);                                                                    \
                memcpy(&b, qr[i] + 4 * c + 4, 4);                                                                \
                e[i] = _mm256_add_epi32(e[i], dot4_epi8(t[c], _mm256_set1_epi32(a)));                            \
                o[i] = _mm256_add_epi32(o[i], dot4_epi8(t[c + 1], _mm256_set1_epi32(b)));                        \
            }                                                                                                    \
        }                                                                                                        \
        _Pragma("GCC unroll 4") for (int i = 0; i < (ROWS); i++)                                                 \
        {                                                                                                        \
            const __m256 dot = _mm256_cvtepi32_ps(_mm256_add_epi32(e[i], o[i]));                                 \
            const __m256 z = _mm256_mul_ps(_mm256_mul_ps(dot, _mm256_set1_ps(q->scale[row + i])), _mm256_set1_ps(sk)); \
            float *dst = out + (size_t)(row + i) * ldo;                                                          \
            if (n == 8) _mm256_storeu_ps(dst, z);                                                                \
            else {                                                                                               \
                float zz[8];                                                                                     \
                _mm256_storeu_ps(zz, z);                                                                         \
                memcpy(dst, zz, (size_t)n * sizeof *zz);                                                         \
            }                                                                                                    \
        }                                                                                                        \
    }
Q8_ROWS_AVX2(q8_rows4_avx2, 4)
Q8_ROWS_AVX2(q8_rows1_avx2, 1)
#undef Q8_ROWS_AVX2

/* qk8_portable's scores on AVX2, 8 keys a register: each key's row of KV
 * head jh in 32-byte blocks (a short last block, or keys past m, copied
 * into zeros first), transposed so lane i holds key i, then per four
 * elements and query row the exact sum of their products (dot4_epi8).
 * Prefetches as QK_FOURS's. d <= 64 * Q8_MAX_BLOCKS. */
AVX2_INLINE void qk8_avx2_t(const qk8 *q, const dims *x, const void *k, const float *sk, float *out, int ldo,
                            const int dc)
{
    const int d = dc ? dc : x->d, rh = x->rh, nb = (d + 31) / 32;
    __m256i t[Q8_MAX_BLOCKS * 2 * 8];
    for (int j = 0; j < x->m; j += 8) {
        const int n = x->m - j < 8 ? x->m - j : 8;
        pf_walk w;
        group_prefetch(x, k, j, n, &w);
        for (int jh = 0; jh < x->nh; jh++) {
            pf_walk_step(&w);
            const int8_t *kj = (const int8_t *)k + (size_t)j * x->stride + (size_t)jh * d;
            _Pragma("GCC unroll 4") for (int b = 0; b < nb; b++)
            {
                const int bytes = d - 32 * b < 32 ? d - 32 * b : 32;
                __m256i *tb = t + 8 * b;
                if (n == 8 && bytes == 32) {
                    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++)
                        tb[i] = _mm256_loadu_si256((const __m256i *)(kj + (size_t)i * x->stride + 32 * (size_t)b));
                } else {
                    int8_t rows[8][32];
                    memset(rows, 0, sizeof rows);
                    for (int i = 0; i < n; i++) memcpy(rows[i], kj + (size_t)i * x->stride + 32 * (size_t)b, (size_t)bytes);
                    for (int i = 0; i < 8; i++) tb[i] = _mm256_loadu_si256((const __m256i *)rows[i]);
                }
                transpose8_epi32(tb);
            }
            const float s = sk ? sk[jh] : 1.0f;
            float *oh = out + j;
            int r = 0;
            for (; r + 4 <= rh; r += 4) q8_rows4_avx2(q, t, 8 * nb, jh * rh + r, s, n, oh, ldo);
            for (; r < rh; r++) q8_rows1_avx2(q, t, 8 * nb, jh * rh + r, s, n, oh, ldo);
        }
    }
}

AVX2_FN static void qk8_avx2(const qk8 *q, const dims *x, const void *k, const float *sk, float *out, int ldo)
{
    switch (x->d) {
    case 64: qk8_avx2_t(q, x, k, sk, out, ldo, 64); break;
    case 128: qk8_avx2_t(q, x, k, sk, out, ldo, 128); break;
    default: qk8_avx2_t(q, x, k, sk, out, ldo, 0); break;
    }
}

/* AVX-512 with VNNI and BW (masked byte loads), and the AVX-512VL kernels. */
static int cpu_has_vnni(void)
{
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
}
#endif

/* Which kernel computes an INT8 cache's scores (decode_job.q8_kernel). */
enum { Q8_FLOAT = 0, Q8_PORTABLE, Q8_AVX2, Q8_VNNI };

/* The scores of an INT8 cache's keys on int8 queries, on `kernel`. */
static void qk8_run(int kernel, const qk8 *q, const dims *x, const void *k, const float *sk, float *out, int ldo)
{
#ifdef DECODE_AVX2
    if (kernel == Q8_VNNI) {
        qk8_vnni(q, x, k, sk, out, ldo);
        return;
    }
    if (kernel == Q8_AVX2) {
        qk8_avx2(q, x, k, sk, out, ldo);
        return;
    }
#endif
    (void)kernel;
    qk8_portable(q, x, k, sk, out, ldo);
}

/* ------------------------------------------------------------ the job */

/* One job's working state. Row (jh*r + hh)*T + t is query row t of query
 * head h0 + jh*r + hh, which reads KV head kvh + jh: query head h0 + row/T. */
typedef struct decode_job {
    const attn_layer *l;
    const attn_seq *s;
    attn__kv kv;
    int kvh, nh, h0, T, R, avx2;
    int q8_kernel; /* an INT8 cache's scores: Q8_FLOAT (float queries), or on int8 queries (q8) */
    qk8 q8;
    int ahead[2]; /* keys ahead the pipelined passes prefetch K (0) and V (1): ahead_keys */
    float *qb;   /* (R, d_k) queries, pre-multiplied by the 1/sqrt(d_k) scale */
    float *tile; /* (R, DECODE_TILE) scores, then probabilities */
    float *tile2; /* the same for the next tile (tiles_pipelined) */
    float *mx, *sum, *acc; /* (R), (R), (R, d_v): in scratch, or the chunk's partial */
    int *lo, *hi; /* (T) each row's visible key interval */
} decode_job;

/* Row `row` (query t) of a tile of scores for keys s0..s0+n: float mask
 * added, blocked keys removed, then exp(score - running max) with the row's
 * max, sum and accumulator updated. Returns 1 if the row sees a key here. */
static int online_update(const decode_job *dj, float *tile, int row, int t, int s0, int n)
{
    const attn_seq *s = dj->s;
    float *x0 = tile + (size_t)row * DECODE_TILE;
    const int a = dj->lo[t] > s0 ? dj->lo[t] : s0, b = dj->hi[t] < s0 + n ? dj->hi[t] : s0 + n;
    if (a >= b) {
        memset(x0, 0, (size_t)n * sizeof *x0);
        return 0;
    }
    const int head = dj->h0 + row / dj->T, len = b - a;
    float *x = x0 + (a - s0);
    const float *fm = attn__mask_float_plane(s, head);
    if (fm != NULL)
        for (int i = 0; i < len; i++) x[i] += fm[(size_t)t * s->s + (size_t)(a + i)];
    attn__mask_block_span(s, attn__mask_bool_plane(s, head), t, a, b, x);
    const float m = attn__row_max(x, len);
    if (!(m > -INFINITY)) {
        memset(x0, 0, (size_t)n * sizeof *x0);
        return 0;
    }
    if (m > dj->mx[row]) {
        if (dj->mx[row] > -INFINITY) { /* earlier tiles were summed against a smaller max */
            const float corr = expf(dj->mx[row] - m);
            dj->sum[row] *= corr;
            attn__scale(dj->acc + (size_t)row * dj->l->d_v, corr, dj->l->d_v);
        }
        dj->mx[row] = m;
    }
    dj->sum[row] += attn__exp_sum(x, dj->mx[row], x, len);
    if (a > s0) memset(x0, 0, (size_t)(a - s0) * sizeof *x0);
    if (b < s0 + n) memset(x0 + (b - s0), 0, (size_t)(s0 + n - b) * sizeof *x0);
    return 1;
}

/* The run of `which` (0 K, 1 V) rows from key j on, at most n, at this
 * job's KV head, as a prefetch target for x (none when n <= 0, or when a
 * bench turned software prefetch or this one off). */
static void other_stream(const decode_job *dj, int which, int j, int n, dims *x)
{
    x->pf = NULL;
    x->pf_m = 0;
    if (n <= 0 || attn__decode_k_ahead < 0 || attn__decode_cross < 0) return;
    const attn_layer *l = dj->l;
    const int d = which ? l->d_v : l->d_k;
    const float *scales; /* unused: a prefetch needs no scales */
    const char *p = attn__kv_run(l, &dj->kv, which, j, n, &x->pf_m, &x->pf_stride, &scales);
    x->pf = p + (size_t)dj->kvh * d * elem_bytes(dj->kv.dtype);
    x->pf_elems = (size_t)dj->nh * (size_t)d;
}

/* The online softmax of every row over the tile's n keys from s0; 0 if
 * every key was blocked for every row (no P.V then). */
static int softmax_tile(const decode_job *dj, float *tile, int s0, int n)
{
    int any = 0;
    for (int row = 0; row < dj->R; row++) any |= online_update(dj, tile, row, row % dj->T, s0, n);
    return any;
}

/* The scores of x's keys at k into out (rows DECODE_TILE apart). */
static void job_scores(const decode_job *dj, const dims *x, const void *k, const float *sk, float *out)
{
    if (dj->q8_kernel != Q8_FLOAT) qk8_run(dj->q8_kernel, &dj->q8, x, k, sk, out, DECODE_TILE);
    else qk_run(dj->avx2, dj->qb, x, k, sk, out, DECODE_TILE);
}

/* acc += P V for x's keys at v, p's rows DECODE_TILE apart; sv: the run's
 * INT8 scales (all KV heads), folded into the probabilities, else NULL. */
static void job_mix(const decode_job *dj, float *p, const dims *x, const void *v, const float *sv)
{
    const int rh = dj->R / dj->nh;
    if (sv != NULL)
        for (int row = 0; row < dj->R; row++) attn__scale(p + (size_t)row * DECODE_TILE, sv[dj->kvh + row / rh], x->m);
    pv_run(dj->avx2, p, DECODE_TILE, x, v, dj->acc);
}

/* The previous kernel's tile, kept for benches' and tests' A/B
 * (attn__decode_three_phase): keys [s0, s0+n) (n <= DECODE_TILE) in three
 * phases, scores, online softmax, acc += P V, each pass prefetching its own
 * next rows and the other stream's in bursts; the next tile's keys start at
 * s1 and are n1 (0: none). */
static void tile_step(const decode_job *dj, int s0, int n, int s1, int n1)
{
    const attn_layer *l = dj->l;
    const int rh = dj->R / dj->nh;
    for (int j = s0; j < s0 + n;) {
        dims x = {.rh = rh, .nh = dj->nh, .d = l->d_k, .dt = dj->kv.dtype, .own = 1};
        const float *sk;
        const char *k = attn__kv_run(l, &dj->kv, 0, j, s0 + n - j, &x.m, &x.stride, &sk);
        k += (size_t)dj->kvh * l->d_k * elem_bytes(x.dt);
        other_stream(dj, 1, j, x.m, &x); /* this run's V, for the P.V pass */
        job_scores(dj, &x, k, sk ? sk + dj->kvh : NULL, dj->tile + (j - s0));
        j += x.m;
    }
    if (!softmax_tile(dj, dj->tile, s0, n)) return; /* every key of the tile blocked for every row */
    for (int j = s0; j < s0 + n;) {
        dims x = {.rh = rh, .nh = dj->nh, .d = l->d_v, .dt = dj->kv.dtype, .own = 1};
        const float *sv;
        const char *v = attn__kv_run(l, &dj->kv, 1, j, s0 + n - j, &x.m, &x.stride, &sv);
        v += (size_t)dj->kvh * l->d_v * elem_bytes(x.dt);
        const int ahead = j - s0; /* the next tile's K, as far into it as this run is into this tile */
        other_stream(dj, 0, s1 + ahead, (n1 - ahead < x.m ? n1 - ahead : x.m), &x);
        job_mix(dj, dj->tile + (j - s0), &x, v, sv);
        j += x.m;
    }
}

/* Keys ahead the passes prefetch: DECODE_AHEAD_BYTES of the job's rows of
 * stream `which`, or attn__decode_k_ahead when a bench sets it (once a
 * job, into dj->ahead, when its cache is known). */
static int ahead_keys(const decode_job *dj, int which)
{
    if (attn__decode_k_ahead > 0) return attn__decode_k_ahead;
    const size_t row = (size_t)dj->nh * (size_t)(which ? dj->l->d_v : dj->l->d_k) * elem_bytes(dj->kv.dtype);
    const size_t keys = DECODE_AHEAD_BYTES / (row ? row : 1);
    return keys < DECODE_AHEAD_MIN ? DECODE_AHEAD_MIN : keys > DECODE_AHEAD_MAX ? DECODE_AHEAD_MAX : (int)keys;
}

/* x's prefetch target: the rows of stream `which` dj->ahead[which] keys
 * past the run of x.m keys from key j, not past key `end`. */
static void ahead_stream(const decode_job *dj, int which, int j, int end, dims *x)
{
    const int at = j + dj->ahead[which];
    other_stream(dj, which, at, end - at < x->m ? end - at : x->m, x);
}

/* Scores of keys [j0, j1) of the tile that starts at s0, into tile; the K
 * rows dj->ahead[0] keys on (up to `end`) brought into L2 meanwhile. */
static void qk_keys(const decode_job *dj, float *tile, int s0, int j0, int j1, int end)
{
    const attn_layer *l = dj->l;
    for (int j = j0; j < j1;) {
        dims x = {.rh = dj->R / dj->nh, .nh = dj->nh, .d = l->d_k, .dt = dj->kv.dtype};
        const float *sk;
        const char *k = attn__kv_run(l, &dj->kv, 0, j, j1 - j, &x.m, &x.stride, &sk);
        k += (size_t)dj->kvh * l->d_k * elem_bytes(x.dt);
        ahead_stream(dj, 0, j, end, &x);
        job_scores(dj, &x, k, sk ? sk + dj->kvh : NULL, tile + (j - s0));
        j += x.m;
    }
}

/* acc += P V over keys [j0, j1) of the tile that starts at s0; the V rows
 * dj->ahead[1] keys on brought into L2 meanwhile. */
static void pv_keys(const decode_job *dj, float *tile, int s0, int j0, int j1, int end)
{
    const attn_layer *l = dj->l;
    const int rh = dj->R / dj->nh;
    for (int j = j0; j < j1;) {
        dims x = {.rh = rh, .nh = dj->nh, .d = l->d_v, .dt = dj->kv.dtype};
        const float *sv;
        const char *v = attn__kv_run(l, &dj->kv, 1, j, j1 - j, &x.m, &x.stride, &sv);
        v += (size_t)dj->kvh * l->d_v * elem_bytes(x.dt);
        ahead_stream(dj, 1, j, end, &x);
        job_mix(dj, tile + (j - s0), &x, v, sv);
        j += x.m;
    }
}

/* Keys [a, b) pipelined over tiles: the P.V of tile i runs in sub-blocks of
 * DECODE_SUB keys interleaved with the scores of tile i + 1, so K and V are
 * read as two steady streams. Every tile's arithmetic, and the order of the
 * updates of acc (P.V of tile i before tile i + 1's softmax rescales it),
 * are those of tile_step. */
static void tiles_pipelined(decode_job *dj, int a, int b)
{
    float *cur = dj->tile, *nxt = dj->tile2;
    int n = b - a < DECODE_TILE ? b - a : DECODE_TILE;
    qk_keys(dj, cur, a, a, a + n, b);
    int any = softmax_tile(dj, cur, a, n);
    for (int s0 = a; s0 < b; s0 += DECODE_TILE) {
        const int s1 = s0 + n, n1 = b - s1 < DECODE_TILE ? b - s1 : DECODE_TILE;
        const int most = n > n1 ? n : n1;
        for (int i = 0; i < most; i += DECODE_SUB) {
            if (i < n1) qk_keys(dj, nxt, s1, s1 + i, s1 + (i + DECODE_SUB < n1 ? i + DECODE_SUB : n1), b);
            if (any && i < n) pv_keys(dj, cur, s0, s0 + i, s0 + (i + DECODE_SUB < n ? i + DECODE_SUB : n), b);
        }
        if (n1 > 0) any = softmax_tile(dj, nxt, s1, n1);
        float *t = cur;
        cur = nxt;
        nxt = t;
        n = n1;
    }
}

/* Which kernel computes dj's scores (decode_job.q8_kernel): for an INT8
 * cache, int8 queries on the VNNI kernel, else the AVX2 one, else the
 * portable one — the same bits on each; attn__decode_int8_queries: tests
 * and benches can force the float kernels, or the portable one. */
static int q8_kernel_for(const decode_job *dj)
{
    if (dj->kv.dtype != ATTN_KV_INT8 || attn__decode_int8_queries < 0) return Q8_FLOAT;
    if (attn__decode_int8_queries > 0 || dj->avx2 == 0) return Q8_PORTABLE;
#ifdef DECODE_AVX2
    if (dj->l->d_k > 64 * Q8_MAX_BLOCKS) return Q8_PORTABLE;
    if (dj->avx2 == 3 && cpu_has_vnni()) return Q8_VNNI;
    return Q8_AVX2;
#else
    return Q8_PORTABLE;
#endif
}

/* dj's queries as int8 (see qk8) into `at` (q8_floats of scratch); 0, and
 * nothing set, when a query element is not finite (the float kernels then
 * take the job and give what they give). */
static int quantize_queries(decode_job *dj, float *at)
{
    const int dk = dj->l->d_k;
    const size_t R = (size_t)dj->R, pad = round_up64((size_t)dk);
    int8_t *q8 = (int8_t *)at;
    float *scale = at + round16(R * pad / 4);
    int32_t *sum = (int32_t *)(scale + round16(R));
    for (size_t row = 0; row < R; row++) {
        const float *qr = dj->qb + row * (size_t)dk;
        float amax = 0.0f;
        for (int c = 0; c < dk; c++) {
            if (!(fabsf(qr[c]) <= FLT_MAX)) return 0;
            amax = fabsf(qr[c]) > amax ? fabsf(qr[c]) : amax;
        }
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        int8_t *o = q8 + row * pad;
        int32_t total = 0;
        for (int c = 0; c < dk; c++) {
            const float v = nearbyintf(qr[c] * inv); /* half to even: the default rounding mode */
            o[c] = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
            total += o[c];
        }
        memset(o + dk, 0, pad - (size_t)dk);
        scale[row] = amax / 127.0f;
        sum[row] = total;
    }
    dj->q8 = (qk8){.q = q8, .scale = scale, .sum = sum, .pad = pad};
    return 1;
}

void attn__decode_keys(const attn_seq *s, const attn__head_job *job, int *lo, int *hi)
{
    int klo = s->s, khi = 0;
    for (int t = job->t0; t < job->t0 + job->nt; t++) {
        int a, b;
        attn__mask_row_range(s, t, &a, &b);
        if (b <= a) continue;
        if (a < klo) klo = a;
        if (b > khi) khi = b;
    }
    *lo = *hi = 0;
    if (khi <= klo) return;
    const long long tiles = (khi - klo + DECODE_TILE - 1) / DECODE_TILE, n = job->n_chunks, c = job->chunk;
    const long long t0 = tiles * c / n, t1 = tiles * (c + 1) / n;
    *lo = klo + (int)(t0 * DECODE_TILE);
    *hi = klo + t1 * DECODE_TILE < khi ? klo + (int)(t1 * DECODE_TILE) : khi;
}

/* z row of stacked row `row`: query row t of query head kv_head*r + row/T. */
static float *z_row(const attn__head_job *job, int r, int T, int dv, int row)
{
    const int hh = row / T, t = row % T;
    return job->z + (size_t)(job->t0 + t) * job->ldz + (size_t)(job->kv_head * r + hh) * dv;
}

void attn__head_decode(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch)
{
    const attn_layer *l = ctx->layer;
    const int r = l->h / l->g, T = job->nt, dk = l->d_k, dv = l->d_v;
    decode_job dj = {.l = l, .s = &ctx->seqs[job->seq], .kvh = job->kv_head, .nh = job->heads,
                     .h0 = job->kv_head * r, .T = T, .R = job->heads * r * T, .avx2 = use_avx2()};
    const size_t R = (size_t)dj.R;
    dj.qb = scratch;
    dj.tile = dj.qb + round16(R * (size_t)dk);
    /* the running max, sum and accumulators stay in this worker's scratch, also
     * for a chunk of a split job, which copies them to its partial at the end:
     * updated in place in the shared partials they made P.V 1.25x slower (one
     * session, P = 2048, two chunks on two threads) */
    float *state = dj.tile + round16(R * DECODE_TILE);
    dj.mx = state;
    dj.sum = state + R;
    dj.acc = state + 2 * R;
    dj.lo = (int *)(dj.tile + round16(R * DECODE_TILE) + attn__decode_part_floats(l, T, job->heads));
    dj.hi = dj.lo + round16((size_t)T);
    dj.tile2 = (float *)(dj.hi + round16((size_t)T));
    for (size_t row = 0; row < R; row++) {
        dj.mx[row] = -INFINITY;
        dj.sum[row] = 0.0f;
    }
    memset(dj.acc, 0, R * (size_t)dv * sizeof *dj.acc);
    for (int t = 0; t < T; t++) attn__mask_row_range(dj.s, job->t0 + t, &dj.lo[t], &dj.hi[t]);
    int a, b;
    attn__decode_keys(dj.s, job, &a, &b);
    if (a < b) {
        for (int row = 0; row < dj.R; row++) { /* copied first: z may alias q */
            const int hh = row / T, t = row % T;
            const float *q = ctx->q + (size_t)(job->q_row + job->t0 + t) * ctx->ldq + (size_t)(dj.h0 + hh) * dk;
            for (int c = 0; c < dk; c++) dj.qb[(size_t)row * dk + c] = q[c] * ctx->scale;
        }
        attn__kv_from_seq(l, dj.s, &dj.kv);
        dj.q8_kernel = q8_kernel_for(&dj);
        if (dj.q8_kernel != Q8_FLOAT && !quantize_queries(&dj, dj.tile2 + round16(R * DECODE_TILE)))
            dj.q8_kernel = Q8_FLOAT;
        dj.ahead[0] = ahead_keys(&dj, 0);
        dj.ahead[1] = ahead_keys(&dj, 1);
        if (!attn__decode_three_phase) tiles_pipelined(&dj, a, b);
        else for (int s0 = a; s0 < b; s0 += DECODE_TILE) {
            const int n = b - s0 < DECODE_TILE ? b - s0 : DECODE_TILE, s1 = s0 + n;
            tile_step(&dj, s0, n, s1, b - s1 < DECODE_TILE ? b - s1 : DECODE_TILE);
        }
    }
    if (job->n_chunks > 1) { /* attn__decode_merge finishes */
        memcpy(job->part, state, (2 * R + R * (size_t)dv) * sizeof *state);
        return;
    }
    for (int row = 0; row < dj.R; row++) { /* z = acc / sum, or 0 for a row that saw no key */
        float *z = z_row(job, r, T, dv, row);
        const float *ar = dj.acc + (size_t)row * dv;
        const float inv = dj.sum[row] > 0.0f ? 1.0f / dj.sum[row] : 0.0f;
        for (int c = 0; c < dv; c++) z[c] = ar[c] * inv;
    }
}

/* z row = sum_c e^(mx_c - M) acc_c / sum_c e^(mx_c - M) sum_c over the chunks
 * c (M = the largest mx_c), or 0 when no chunk saw a key. */
static void merge_group(const attn_layer *l, const attn__head_job *job)
{
    const int r = l->h / l->g, T = job->nt, R = job->heads * r * T, dv = l->d_v;
    const size_t pf = attn__decode_part_floats(l, T, job->heads);
    for (int row = 0; row < R; row++) {
        float *z = z_row(job, r, T, dv, row);
        float mx = -INFINITY, total = 0.0f;
        for (int c = 0; c < job->n_chunks; c++)
            if (job->part[c * pf + (size_t)row] > mx) mx = job->part[c * pf + (size_t)row];
        memset(z, 0, (size_t)dv * sizeof *z);
        if (!(mx > -INFINITY)) continue;
        for (int c = 0; c < job->n_chunks; c++) {
            const float *p = job->part + c * pf;
            if (!(p[row] > -INFINITY)) continue; /* the chunk saw no key of this row */
            const float w = expf(p[row] - mx);
            const float *acc = p + 2 * (size_t)R + (size_t)row * dv;
            total += w * p[R + row];
            for (int i = 0; i < dv; i++) z[i] += w * acc[i];
        }
        const float inv = 1.0f / total;
        for (int i = 0; i < dv; i++) z[i] *= inv;
    }
}

void attn__decode_merge(const attn__fwd_ctx *ctx, const attn__head_job *jobs, int n_jobs)
{
    for (int j = 0; j < n_jobs; j++)
        if (jobs[j].kernel == attn__head_decode && jobs[j].n_chunks > 1 && jobs[j].chunk == 0)
            merge_group(ctx->layer, &jobs[j]);
}
