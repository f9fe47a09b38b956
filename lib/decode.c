/* decode.c — the decode kernel (see decode.h): one (sequence, KV head[, key
 * chunk]) job computes the R = (h/g) * T stacked query rows against the
 * cache in tiles of DECODE_TILE keys. Per tile: the scores by dot products
 * that read each K row once and convert its elements in registers, the
 * online softmax of every row (running max and sum, accumulator rescaled
 * when the max grows), then axpys that read each V row once the same way.
 * A tile's keys are walked in runs that stay inside one cache block, but a
 * key's arithmetic never depends on where a run starts, and tiles start at
 * the same keys for every layout, so a paged float32 cache gives results
 * bit-identical to the contiguous one. INT8 scales are folded in per run:
 * into the scores (q . k_int * s_k) and into the probabilities before the
 * axpys (p * s_v).
 */
#include "decode.h"

#include "kvcache.h"
#include "mask.h"
#include "softmax.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DECODE_AVX2 1
#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) static inline
#endif

/* Keys per online-softmax step: the R x tile scores stay in L1/L2, and the
 * max/rescale work is amortised over many keys. Chunks of a split job are
 * whole tiles. */
#define DECODE_TILE 128

int attn__decode_portable_only = 0;

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

int attn__decode_applies(const attn_seq *s) { return s->cache_k != NULL && s->t <= ATTN__DECODE_MAX_T; }

int attn__decode_chunks(const attn_seq *s, int n_jobs, int n_threads)
{
    if (n_threads < 2 || n_jobs < 1 || n_jobs >= 2 * n_threads) return 1;
    const int want = (4 * n_threads + n_jobs - 1) / n_jobs; /* about 4 jobs per thread */
    const int most = s->s / ATTN__DECODE_SPLIT_MIN;
    return want < most ? want : most > 1 ? most : 1;
}

size_t attn__decode_part_floats(const attn_layer *l, int t)
{
    const size_t rows = (size_t)(l->h / l->g) * (size_t)t;
    return round16(rows * (2 + (size_t)l->d_v));
}

size_t attn__decode_scratch_floats(const attn_layer *l, int t)
{
    const size_t rows = (size_t)(l->h / l->g) * (size_t)t;
    return round16(rows * (size_t)l->d_k) + round16(rows * DECODE_TILE) + attn__decode_part_floats(l, t) +
           2 * round16((size_t)t);
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

/* ------------------------------------------------------ portable kernels */

/* out[r*ldo + j] = sk * (q_r . k_j) for R rows of q (R, dk) and m keys. */
static inline void qk_portable_t(const float *q, int R, int dk, const void *k, size_t stride, int m, int dt,
                                 float sk, float *out, int ldo)
{
    for (int j = 0; j < m; j++)
        for (int r = 0; r < R; r++) {
            const float *qr = q + (size_t)r * dk;
            float a = 0.0f;
            for (int c = 0; c < dk; c++) a += qr[c] * load1(k, (size_t)j * stride + c, dt);
            out[(size_t)r * ldo + j] = a * sk;
        }
}

/* acc[r*dv + c] += p[r*ldp + j] * v_j[c] for R rows and m keys. */
static inline void pv_portable_t(const float *p, int ldp, int R, const void *v, size_t stride, int m, int dt,
                                 float *acc, int dv)
{
    for (int r = 0; r < R; r++)
        for (int j = 0; j < m; j++) {
            const float pj = p[(size_t)r * ldp + j];
            float *a = acc + (size_t)r * dv;
            for (int c = 0; c < dv; c++) a[c] += pj * load1(v, (size_t)j * stride + c, dt);
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

/* The four horizontal sums of a0..a3, in order. */
AVX2_INLINE __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* Scores of 4 query rows (q0, stride dk) against key row kj: the same
 * arithmetic for every key, however the keys are grouped into calls. */
AVX2_INLINE void dot4(const float *q0, int dk, const void *k, size_t kj, int dt, float sk, float *out, int ldo)
{
    const int d8 = dk & ~7;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int c = 0; c < d8; c += 8) {
        const __m256 kv = load8(k, kj + (size_t)c, dt);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + c), kv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + dk + c), kv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 2 * dk + c), kv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 3 * dk + c), kv, a3);
    }
    float s[4];
    _mm_storeu_ps(s, hsum4(a0, a1, a2, a3));
    for (int c = d8; c < dk; c++) {
        const float kc = load1(k, kj + (size_t)c, dt);
        for (int i = 0; i < 4; i++) s[i] += q0[(size_t)i * dk + c] * kc;
    }
    for (int i = 0; i < 4; i++) out[(size_t)i * ldo] = s[i] * sk;
}

AVX2_INLINE void dot1(const float *q, int dk, const void *k, size_t kj, int dt, float sk, float *out)
{
    const int d8 = dk & ~7;
    __m256 a = _mm256_setzero_ps();
    for (int c = 0; c < d8; c += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), load8(k, kj + (size_t)c, dt), a);
    const __m256 z = _mm256_setzero_ps();
    float s = _mm_cvtss_f32(hsum4(a, z, z, z));
    for (int c = d8; c < dk; c++) s += q[c] * load1(k, kj + (size_t)c, dt);
    *out = s * sk;
}

AVX2_INLINE void qk_avx2_t(const float *q, int R, int dk, const void *k, size_t stride, int m, int dt, float sk,
                           float *out, int ldo)
{
    int r = 0;
    for (; r + 4 <= R; r += 4) {
        const float *q0 = q + (size_t)r * dk;
        float *o = out + (size_t)r * ldo;
        int j = 0;
        for (; j + 2 <= m; j += 2) { /* two keys in flight: twice the independent FMA chains */
            dot4(q0, dk, k, (size_t)j * stride, dt, sk, o + j, ldo);
            dot4(q0, dk, k, (size_t)(j + 1) * stride, dt, sk, o + j + 1, ldo);
        }
        if (j < m) dot4(q0, dk, k, (size_t)j * stride, dt, sk, o + j, ldo);
    }
    for (; r < R; r++)
        for (int j = 0; j < m; j++)
            dot1(q + (size_t)r * dk, dk, k, (size_t)j * stride, dt, sk, out + (size_t)r * ldo + j);
}

/* acc rows r0..r0+3 (stride dv), columns [c, c+8*nv) for nv = 2 or 1 vectors. */
AVX2_INLINE void axpy4(const float *p, int ldp, const void *v, size_t stride, int m, int dt, float *acc, int dv,
                       int c, int nv)
{
    __m256 a[4][2];
    for (int i = 0; i < 4; i++)
        for (int w = 0; w < nv; w++) a[i][w] = _mm256_loadu_ps(acc + (size_t)i * dv + c + 8 * w);
    for (int j = 0; j < m; j++) {
        __m256 x[2];
        for (int w = 0; w < nv; w++) x[w] = load8(v, (size_t)j * stride + (size_t)(c + 8 * w), dt);
        for (int i = 0; i < 4; i++) {
            const __m256 pb = _mm256_broadcast_ss(p + (size_t)i * ldp + j);
            for (int w = 0; w < nv; w++) a[i][w] = _mm256_fmadd_ps(pb, x[w], a[i][w]);
        }
    }
    for (int i = 0; i < 4; i++)
        for (int w = 0; w < nv; w++) _mm256_storeu_ps(acc + (size_t)i * dv + c + 8 * w, a[i][w]);
}

AVX2_INLINE void axpy1(const float *p, const void *v, size_t stride, int m, int dt, float *acc, int c)
{
    __m256 a = _mm256_loadu_ps(acc + c);
    for (int j = 0; j < m; j++) a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), load8(v, (size_t)j * stride + (size_t)c, dt), a);
    _mm256_storeu_ps(acc + c, a);
}

AVX2_INLINE void pv_avx2_t(const float *p, int ldp, int R, const void *v, size_t stride, int m, int dt,
                           float *acc, int dv)
{
    const int d8 = dv & ~7;
    int r = 0;
    for (; r + 4 <= R; r += 4) {
        const float *pr = p + (size_t)r * ldp;
        float *ar = acc + (size_t)r * dv;
        int c = 0;
        for (; c + 16 <= d8; c += 16) axpy4(pr, ldp, v, stride, m, dt, ar, dv, c, 2);
        if (c < d8) axpy4(pr, ldp, v, stride, m, dt, ar, dv, c, 1);
    }
    for (; r < R; r++)
        for (int c = 0; c < d8; c += 8) axpy1(p + (size_t)r * ldp, v, stride, m, dt, acc + (size_t)r * dv, c);
    if (d8 < dv) /* the last dv % 8 columns */
        for (int rr = 0; rr < R; rr++)
            for (int j = 0; j < m; j++) {
                const float pj = p[(size_t)rr * ldp + j];
                for (int c = d8; c < dv; c++) acc[(size_t)rr * dv + c] += pj * load1(v, (size_t)j * stride + c, dt);
            }
}

/* One instance per dtype (dt a constant inside), chosen per run. */
#define DTYPE_SWITCH(fn, dt, ...)                                                                                   \
    switch (dt) {                                                                                                    \
    case ATTN_KV_F32: fn(__VA_ARGS__, ATTN_KV_F32); break;                                                           \
    case ATTN_KV_F16: fn(__VA_ARGS__, ATTN_KV_F16); break;                                                           \
    case ATTN_KV_BF16: fn(__VA_ARGS__, ATTN_KV_BF16); break;                                                         \
    default: fn(__VA_ARGS__, ATTN_KV_INT8); break;                                                                   \
    }

AVX2_INLINE void qk_avx2_dt(const float *q, int R, int dk, const void *k, size_t stride, int m, float sk, float *out,
                            int ldo, int dt)
{
    qk_avx2_t(q, R, dk, k, stride, m, dt, sk, out, ldo);
}

AVX2_INLINE void pv_avx2_dt(const float *p, int ldp, int R, const void *v, size_t stride, int m, float *acc, int dv,
                            int dt)
{
    pv_avx2_t(p, ldp, R, v, stride, m, dt, acc, dv);
}

AVX2_FN static void qk_avx2(const float *q, int R, int dk, const void *k, size_t stride, int m, int dt, float sk,
                            float *out, int ldo)
{
    DTYPE_SWITCH(qk_avx2_dt, dt, q, R, dk, k, stride, m, sk, out, ldo)
}

AVX2_FN static void pv_avx2(const float *p, int ldp, int R, const void *v, size_t stride, int m, int dt, float *acc,
                            int dv)
{
    DTYPE_SWITCH(pv_avx2_dt, dt, p, ldp, R, v, stride, m, acc, dv)
}

static int use_avx2(void)
{
    return !attn__decode_portable_only && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}
#else
static int use_avx2(void) { return 0; }
#endif

static void qk_run(int avx2, const float *q, int R, int dk, const void *k, size_t stride, int m, int dt, float sk,
                   float *out, int ldo)
{
#ifdef DECODE_AVX2
    if (avx2) {
        qk_avx2(q, R, dk, k, stride, m, dt, sk, out, ldo);
        return;
    }
#endif
    (void)avx2;
    qk_portable_t(q, R, dk, k, stride, m, dt, sk, out, ldo);
}

static void pv_run(int avx2, const float *p, int ldp, int R, const void *v, size_t stride, int m, int dt,
                   float *acc, int dv)
{
#ifdef DECODE_AVX2
    if (avx2) {
        pv_avx2(p, ldp, R, v, stride, m, dt, acc, dv);
        return;
    }
#endif
    (void)avx2;
    pv_portable_t(p, ldp, R, v, stride, m, dt, acc, dv);
}

/* ------------------------------------------------------------ the job */

/* One job's working state; row hh*T + t is query row t of head h0 + hh. */
typedef struct decode_job {
    const attn_layer *l;
    const attn_seq *s;
    attn__kv kv;
    int kvh, h0, T, R, avx2;
    float *qb;   /* (R, d_k) queries, pre-multiplied by the 1/sqrt(d_k) scale */
    float *tile; /* (R, DECODE_TILE) scores, then probabilities */
    float *mx, *sum, *acc; /* (R), (R), (R, d_v): in scratch, or the chunk's partial */
    int *lo, *hi; /* (T) each row's visible key interval */
} decode_job;

/* Row `row` (query t) of a tile of scores for keys s0..s0+n: float mask
 * added, blocked keys removed, then exp(score - running max) with the row's
 * max, sum and accumulator updated. Returns 1 if the row sees a key here. */
static int online_update(const decode_job *dj, int row, int t, int s0, int n)
{
    const attn_seq *s = dj->s;
    float *x0 = dj->tile + (size_t)row * DECODE_TILE;
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

/* Keys [s0, s0+n) (n <= DECODE_TILE): scores, online softmax, acc += P V. */
static void tile_step(const decode_job *dj, int s0, int n)
{
    const attn_layer *l = dj->l;
    const int dt = dj->kv.dtype;
    for (int j = s0; j < s0 + n;) {
        int m;
        size_t stride;
        float sc;
        const void *k = attn__kv_run(l, &dj->kv, 0, dj->kvh, j, s0 + n - j, &m, &stride, &sc);
        qk_run(dj->avx2, dj->qb, dj->R, l->d_k, k, stride, m, dt, sc, dj->tile + (j - s0), DECODE_TILE);
        j += m;
    }
    int any = 0;
    for (int row = 0; row < dj->R; row++) any |= online_update(dj, row, row % dj->T, s0, n);
    if (!any) return; /* every key of the tile blocked for every row */
    for (int j = s0; j < s0 + n;) {
        int m;
        size_t stride;
        float sc;
        const void *v = attn__kv_run(l, &dj->kv, 1, dj->kvh, j, s0 + n - j, &m, &stride, &sc);
        float *p = dj->tile + (j - s0);
        if (dt == ATTN_KV_INT8) /* p * s_v: the run's V scale folded into the probabilities */
            for (int row = 0; row < dj->R; row++) attn__scale(p + (size_t)row * DECODE_TILE, sc, m);
        pv_run(dj->avx2, p, DECODE_TILE, dj->R, v, stride, m, dt, dj->acc, l->d_v);
        j += m;
    }
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

/* z row of stacked row `row` (query t of head h0 + hh). */
static float *z_row(const attn__head_job *job, int r, int T, int dv, int row)
{
    const int hh = row / T, t = row % T;
    return job->z + (size_t)(job->t0 + t) * job->ldz + (size_t)(job->kv_head * r + hh) * dv;
}

void attn__head_decode(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch)
{
    const attn_layer *l = ctx->layer;
    const int r = l->h / l->g, T = job->nt, dk = l->d_k, dv = l->d_v;
    decode_job dj = {.l = l, .s = &ctx->seqs[job->seq], .kvh = job->kv_head, .h0 = job->kv_head * r, .T = T,
                     .R = r * T, .avx2 = use_avx2()};
    const size_t R = (size_t)dj.R;
    dj.qb = scratch;
    dj.tile = dj.qb + round16(R * (size_t)dk);
    float *state = job->n_chunks > 1 ? job->part : dj.tile + round16(R * DECODE_TILE);
    dj.mx = state;
    dj.sum = state + R;
    dj.acc = state + 2 * R;
    dj.lo = (int *)(dj.tile + round16(R * DECODE_TILE) + attn__decode_part_floats(l, T));
    dj.hi = dj.lo + round16((size_t)T);
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
        for (int s0 = a; s0 < b; s0 += DECODE_TILE) tile_step(&dj, s0, b - s0 < DECODE_TILE ? b - s0 : DECODE_TILE);
    }
    if (job->n_chunks > 1) return; /* attn__decode_merge finishes */
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
    const int r = l->h / l->g, T = job->nt, R = r * T, dv = l->d_v;
    const size_t pf = attn__decode_part_floats(l, T);
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
