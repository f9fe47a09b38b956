/* flash.c — the fused kernel's AVX2+FMA path (see flash.h), and its three
 * hot phases again sixteen lanes a register for AVX-512F CPUs (same bits).
 *
 * One job: the C = r*nt stacked query rows (column hh*nt + t is query row
 * t0 + t of head h0 + hh) are the columns, padded to cp = a multiple of 16.
 * Q is packed once, scaled by 1/sqrt(d_k), into panels of 16 columns stored
 * d-major (panel p, element [d][c] at qt + p*16*d_k + d*16 + c). Keys go by
 * sub-tiles of kt rows (the score tile stays near 128 KiB, in L2):
 *   scores   st (n, cp) = K_tile Qᵀ        6 keys x 16 queries per register block
 *   masks    a key outside a column's [lo, hi), or padded, becomes -inf
 *   softmax  per column: running max, exp, running sum, correction factor
 *   mixture  o (cp, d_v) = o * corr + stᵀ V_tile    4 queries x 16 values per block
 * K's tile is copied to contiguous rows and the next tile's K and V rows are
 * prefetched into L2 while this one computes. Then z = o / sum (0 for a
 * column that saw no key). The score tile is stored
 * by panels of 16 columns (st + p*kt*16 + j*16 + c) and V's tile is copied
 * into strips of 16 values (vp + strip*kt*16 + j*16): both kernels then walk
 * memory 64 contiguous bytes per key, where the batch's row strides (a power
 * of two, E floats apart) would map every key of a column onto the same few
 * L1 sets. Scratch never grows with T or S: one sub-tile of scores and of V,
 * the packed queries and the mixtures.
 */
#include "flash.h"

#include "kvcache.h"
#include "mask.h"
#include "smallgemm.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include "vexp.h"

#ifndef FLASH_TILE_FLOATS /* -DFLASH_TILE_FLOATS=N to try other score-tile sizes */
#define FLASH_TILE_FLOATS 32768
#endif
#define FLASH_FN __attribute__((target("avx2,fma")))
#define FLASH_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

enum {
    PANEL = 16,         /* query columns per packed panel and per register block */
    KEY_BLOCK = 6,      /* keys per score register block */
    KEY_BLOCK_512 = 12, /* the same with AVX-512F, by one or two panels */
    PV_ROWS = 4,        /* query columns per mixture register block */
    TILE_FLOATS = FLASH_TILE_FLOATS /* target size of the score tile, floats */
};

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* Keys per sub-tile for cp columns: the tile (kt, cp) near TILE_FLOATS. */
static int tile_keys(int cp, int block_k)
{
    int kt = TILE_FLOATS / cp;
    if (kt < 8) kt = 8;
    return kt < block_k ? kt : block_k;
}

typedef struct flash_scratch {
    float *qt;                 /* cp/16 panels of (d_k, 16): scaled queries, transposed */
    float *st;                 /* cp/16 panels of (kt, 16): a sub-tile's scores, then exps */
    float *vp;                 /* ceil(d_v/16) strips of (kt, 16): the sub-tile's V */
    float *kp;                 /* (kt, d_k): the sub-tile's K, rows contiguous */
    float *o;                  /* (cp, d_v): unnormalised mixtures */
    float *mx, *sum, *corr, *shift, *tsum; /* (cp) per column */
    int *lo, *hi;              /* (cp) each column's visible keys [lo, hi) */
    float *kbuf, *vbuf;        /* (block_k, tile ld): a paged / compact cache's tile */
} flash_scratch;

static int cpu_has_avx2_fma(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

int attn__flash_applies(const attn_layer *l, const attn_seq *s)
{
    return s->attn_mask_kind == ATTN_MASK_NONE && l->d_v % 8 == 0 && cpu_has_avx2_fma();
}

/* Room for n floats at *off, 16-float (64-byte) aligned; returns its offset. */
static size_t take(size_t *off, size_t n)
{
    size_t at = *off;
    *off += round_up(n, 16);
    return at;
}

/* The scratch of one job, for any nt <= block_q: pieces sized for r*block_q
 * columns and the most keys a sub-tile holds, then a K and a V tile converted
 * from a paged / compact cache when ldk_tile / ldv_tile (their row strides)
 * are nonzero. Returns its size in floats; with f, also carves it from p.
 * attn__flash_scratch_floats sizes with it and attn__flash_job carves with
 * it, so the two cannot disagree. */
static size_t layout(float *p, int r, int block_q, int block_k, int d_k, int d_v, int ldk_tile, int ldv_tile,
                     flash_scratch *f)
{
    const size_t cmax = round_up((size_t)r * (size_t)block_q, PANEL);
    const size_t kt = (size_t)tile_keys(PANEL, block_k); /* cp >= 16: the most keys */
    size_t st = (size_t)TILE_FLOATS > 8 * cmax ? (size_t)TILE_FLOATS : 8 * cmax; /* kt(cp) * cp <= st */
    if ((size_t)block_k * cmax < st) st = (size_t)block_k * cmax;
    size_t off = 0, at[13];
    at[0] = take(&off, cmax * (size_t)d_k);                   /* qt */
    at[1] = take(&off, st);                                   /* st */
    at[2] = take(&off, kt * round_up((size_t)d_v, PANEL));    /* vp */
    at[3] = take(&off, round_up(kt, KEY_BLOCK_512) * (size_t)d_k); /* kp, padded to whole 12-key blocks */
    at[4] = take(&off, cmax * (size_t)d_v);                   /* o */
    for (int i = 5; i < 12; i++) at[i] = take(&off, cmax);    /* mx sum corr shift tsum lo hi */
    at[12] = off;
    if (ldk_tile) off += round_up((size_t)block_k * (size_t)ldk_tile, 16) + round_up((size_t)block_k * (size_t)ldv_tile, 16);
    if (f) {
        *f = (flash_scratch){.qt = p + at[0], .st = p + at[1], .vp = p + at[2], .kp = p + at[3], .o = p + at[4],
                             .mx = p + at[5], .sum = p + at[6], .corr = p + at[7], .shift = p + at[8],
                             .tsum = p + at[9], .lo = (int *)(p + at[10]), .hi = (int *)(p + at[11])};
        if (ldk_tile) {
            f->kbuf = p + at[12];
            f->vbuf = f->kbuf + round_up((size_t)block_k * (size_t)ldk_tile, 16);
        }
    }
    return off;
}

size_t attn__flash_scratch_floats(int r, int block_q, int block_k, int d_k, int d_v, int gather)
{
    /* gather: d_k / d_v are the converted tiles' row strides (attn__kv_tile_ld) */
    if (d_v % 8 != 0 || !cpu_has_avx2_fma()) return 0; /* the path never runs */
    return layout(NULL, r, block_q, block_k, d_k, d_v, gather ? d_k : 0, gather ? d_v : 0, NULL);
}

/* ---- packing ------------------------------------------------------------ */

static void pack_queries(const attn__fwd_ctx *ctx, const attn__head_job *job, int h0, int r, int cp,
                         float *qt)
{
    const int dk = ctx->layer->d_k, nt = job->nt, columns = r * nt;
    const float scale = ctx->scale;
    if (columns < cp) /* the last panel's padded columns score 0 */
        memset(qt + (size_t)(columns / PANEL) * PANEL * dk, 0, (size_t)PANEL * dk * sizeof *qt);
    for (int hh = 0, c = 0; hh < r; hh++)
        for (int t = 0; t < nt;) {
            const float *q = ctx->q + (size_t)(job->q_row + job->t0 + t) * ctx->ldq + (size_t)(h0 + hh) * dk;
            float *p = qt + (size_t)(c / PANEL) * PANEL * dk + c % PANEL;
            if (dk % 8 == 0 && c % 8 == 0 && t + 8 <= nt) { /* 8 columns of one panel: 8 x 8 blocks */
                for (int d = 0; d < dk; d += 8)
                    attn__transpose8_scaled(q + d, ctx->ldq, scale, p + (size_t)d * PANEL, PANEL);
                t += 8, c += 8;
                continue;
            }
            for (int d = 0; d < dk; d++) p[(size_t)d * PANEL] = q[d] * scale;
            t++, c++;
        }
}

/* The n rows of a K tile (stride ldk) into kp, d_k floats apart, then
 * copies of the last up to a multiple of `block` rows: KEY_BLOCK_512 for the
 * AVX-512 scores, which run their last block whole and store only its real
 * keys (a copy's score folded into a column's max changes nothing); 1 for
 * the AVX2 ones, which need no copies. */
FLASH_FN static void pack_keys(const float *k, int ldk, int n, int dk, int block, float *kp)
{
    const int padded = (int)round_up((size_t)n, (size_t)block);
    for (int j = 0; j < padded; j++) {
        const float *src = k + (size_t)(j < n ? j : n - 1) * ldk;
        float *dst = kp + (size_t)j * dk;
        int d = 0;
        for (; d + 8 <= dk; d += 8) _mm256_storeu_ps(dst + d, _mm256_loadu_ps(src + d));
        for (; d < dk; d++) dst[d] = src[d];
    }
}

/* Asks for rows [0, n) of a matrix (stride ld, `width` floats each) to be
 * brought into cache: the next tile's K and V while this one is computed
 * (a long sequence's K and V live in DRAM, a row every ld floats, which the
 * hardware prefetchers do not follow). */
static void prefetch_rows(const float *p, int ld, int n, int width)
{
    for (int j = 0; j < n; j++)
        for (int c = 0; c < width; c += 16) _mm_prefetch((const char *)(p + (size_t)j * ld + c), _MM_HINT_T1);
}

/* ---- scores: st (n, cp) = K_tile (n, d_k) · Qᵀ ---------------------------- */

#define SCORE_ROW(i)                                                                  \
    a = _mm256_broadcast_ss(k + (size_t)(i) * ldk + d);                               \
    c##i##0 = _mm256_fmadd_ps(a, b0, c##i##0);                                        \
    c##i##1 = _mm256_fmadd_ps(a, b1, c##i##1)
#define SCORE_STORE(i)                                                                \
    _mm256_storeu_ps(st + (size_t)(i) * ldst, c##i##0);                               \
    _mm256_storeu_ps(st + (size_t)(i) * ldst + 8, c##i##1)

/* cmax[0..16) = max(cmax, a, b): the panel's running column max. */
FLASH_INLINE void fold_max(float *cmax, __m256 a, __m256 b)
{
    _mm256_storeu_ps(cmax, _mm256_max_ps(_mm256_loadu_ps(cmax), a));
    _mm256_storeu_ps(cmax + 8, _mm256_max_ps(_mm256_loadu_ps(cmax + 8), b));
}

/* Six keys x one panel of 16 query columns, all d_k in registers; cmax (16
 * floats, or NULL) gathers the columns' maxima. */
FLASH_INLINE void score_6x16(const float *panel, const float *k, int ldk, int dk, float *st, int ldst,
                             float *cmax)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, a;
    for (int d = 0; d < dk; d++) {
        const __m256 b0 = _mm256_loadu_ps(panel + (size_t)d * PANEL);
        const __m256 b1 = _mm256_loadu_ps(panel + (size_t)d * PANEL + 8);
        SCORE_ROW(0); SCORE_ROW(1); SCORE_ROW(2); SCORE_ROW(3); SCORE_ROW(4); SCORE_ROW(5);
    }
    SCORE_STORE(0); SCORE_STORE(1); SCORE_STORE(2); SCORE_STORE(3); SCORE_STORE(4); SCORE_STORE(5);
    if (cmax)
        fold_max(cmax, _mm256_max_ps(_mm256_max_ps(_mm256_max_ps(c00, c10), _mm256_max_ps(c20, c30)), _mm256_max_ps(c40, c50)),
                 _mm256_max_ps(_mm256_max_ps(_mm256_max_ps(c01, c11), _mm256_max_ps(c21, c31)), _mm256_max_ps(c41, c51)));
}

/* One key x one panel (the sub-tile's last n % 6 keys). */
FLASH_INLINE void score_1x16(const float *panel, const float *k, int ldk, int dk, float *st, int ldst,
                             float *cmax)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, a;
    for (int d = 0; d < dk; d++) {
        const __m256 b0 = _mm256_loadu_ps(panel + (size_t)d * PANEL);
        const __m256 b1 = _mm256_loadu_ps(panel + (size_t)d * PANEL + 8);
        SCORE_ROW(0);
    }
    SCORE_STORE(0);
    if (cmax) fold_max(cmax, c00, c01);
}

/* cmax (cp floats) or NULL: max-folds every column's scores (a tile no mask
 * touches: then its maxima come free with the scores). */
FLASH_FN static void scores(const float *qt, const float *k, int ldk, int n, int kt, int cp, int dk, float *st,
                            float *cmax)
{
    for (int p = 0; p < cp / PANEL; p++) {
        const float *panel = qt + (size_t)p * PANEL * dk;
        float *sp = st + (size_t)p * kt * PANEL, *pm = cmax ? cmax + (size_t)p * PANEL : NULL;
        int j = 0;
        if (pm)
            for (; j + KEY_BLOCK <= n; j += KEY_BLOCK)
                score_6x16(panel, k + (size_t)j * ldk, ldk, dk, sp + (size_t)j * PANEL, PANEL, pm);
        else
            for (; j + KEY_BLOCK <= n; j += KEY_BLOCK)
                score_6x16(panel, k + (size_t)j * ldk, ldk, dk, sp + (size_t)j * PANEL, PANEL, NULL);
        for (; j < n; j++) score_1x16(panel, k + (size_t)j * ldk, ldk, dk, sp + (size_t)j * PANEL, PANEL, pm);
    }
}

/* ---- masks ---------------------------------------------------------------- */

/* Keys s0..s0+n of the tile outside each column's [lo, hi) become -inf, and
 * so does every padded key (key_padding_mask). */
FLASH_FN static void mask_tile(const attn_seq *s, const flash_scratch *f, int s0, int n, int kt, int cp,
                               int by_column)
{
    const __m256 neg = _mm256_set1_ps(-INFINITY);
    const uint8_t *kpm = s->key_padding_mask;
    for (int p = 0; p < cp / PANEL; p++) {
        const int c0 = p * PANEL;
        const __m256i lo0 = _mm256_loadu_si256((const __m256i *)(f->lo + c0));
        const __m256i lo1 = _mm256_loadu_si256((const __m256i *)(f->lo + c0 + 8));
        const __m256i hi0 = _mm256_loadu_si256((const __m256i *)(f->hi + c0));
        const __m256i hi1 = _mm256_loadu_si256((const __m256i *)(f->hi + c0 + 8));
        float *panel = f->st + (size_t)p * kt * PANEL;
        for (int j = 0; j < n; j++) {
            float *row = panel + (size_t)j * PANEL;
            if (kpm != NULL && kpm[s0 + j]) {
                _mm256_storeu_ps(row, neg);
                _mm256_storeu_ps(row + 8, neg);
                continue;
            }
            if (!by_column) continue;
            const __m256i key = _mm256_set1_epi32(s0 + j);
            const __m256i vis0 = _mm256_andnot_si256(_mm256_cmpgt_epi32(lo0, key), _mm256_cmpgt_epi32(hi0, key));
            const __m256i vis1 = _mm256_andnot_si256(_mm256_cmpgt_epi32(lo1, key), _mm256_cmpgt_epi32(hi1, key));
            _mm256_storeu_ps(row, _mm256_blendv_ps(neg, _mm256_loadu_ps(row), _mm256_castsi256_ps(vis0)));
            _mm256_storeu_ps(row + 8, _mm256_blendv_ps(neg, _mm256_loadu_ps(row + 8), _mm256_castsi256_ps(vis1)));
        }
    }
}

/* ---- online softmax, eight columns per vector ------------------------------ */

/* For eight columns with old running max `old` and new max m: the shift their
 * exps use (0 for a column that has seen no key, so -inf - shift stays -inf,
 * never NaN) and the factor corr = exp(old - shift) that rescales their sums
 * and mixtures. */
FLASH_INLINE void new_max(const flash_scratch *f, int c, __m256 m)
{
    const __m256 neg = _mm256_set1_ps(-INFINITY);
    const __m256 old = _mm256_loadu_ps(f->mx + c);
    const __m256 shift = _mm256_blendv_ps(m, _mm256_setzero_ps(), _mm256_cmp_ps(m, neg, _CMP_EQ_OQ));
    _mm256_storeu_ps(f->mx + c, m);
    _mm256_storeu_ps(f->shift + c, shift);
    _mm256_storeu_ps(f->corr + c, attn__exp8_fma(_mm256_sub_ps(old, shift)));
}

/* Per panel: the tile's column maxima folded into the running max (new_max;
 * have_max: scores already left them in shift), then st = exp(st - shift) in
 * place and sum = sum * corr + the column sums. */
FLASH_FN static void tile_softmax(const flash_scratch *f, int n, int kt, int cp, int have_max)
{
    for (int p = 0; p < cp / PANEL; p++) {
        const int c0 = p * PANEL;
        float *panel = f->st + (size_t)p * kt * PANEL;
        const float *m = have_max ? f->shift : f->mx;
        __m256 m0 = _mm256_loadu_ps(m + c0), m1 = _mm256_loadu_ps(m + c0 + 8);
        for (int j = 0; j < n && !have_max; j++) {
            m0 = _mm256_max_ps(m0, _mm256_loadu_ps(panel + (size_t)j * PANEL));
            m1 = _mm256_max_ps(m1, _mm256_loadu_ps(panel + (size_t)j * PANEL + 8));
        }
        new_max(f, c0, m0);
        new_max(f, c0 + 8, m1);
        const __m256 sh0 = _mm256_loadu_ps(f->shift + c0), sh1 = _mm256_loadu_ps(f->shift + c0 + 8);
        __m256 s0 = _mm256_setzero_ps(), s1 = s0;
        for (int j = 0; j < n; j++) {
            float *row = panel + (size_t)j * PANEL;
            const __m256 e0 = attn__exp8_fma(_mm256_sub_ps(_mm256_loadu_ps(row), sh0));
            const __m256 e1 = attn__exp8_fma(_mm256_sub_ps(_mm256_loadu_ps(row + 8), sh1));
            _mm256_storeu_ps(row, e0);
            _mm256_storeu_ps(row + 8, e1);
            s0 = _mm256_add_ps(s0, e0);
            s1 = _mm256_add_ps(s1, e1);
        }
        _mm256_storeu_ps(f->sum + c0, _mm256_fmadd_ps(_mm256_loadu_ps(f->sum + c0), _mm256_loadu_ps(f->corr + c0), s0));
        _mm256_storeu_ps(f->sum + c0 + 8,
                         _mm256_fmadd_ps(_mm256_loadu_ps(f->sum + c0 + 8), _mm256_loadu_ps(f->corr + c0 + 8), s1));
    }
}

/* ---- mixture: o (cp, d_v) = o * corr + stᵀ · V_tile (n, d_v) ---------------- */

/* V's n rows (stride ldv) into strips of 16 values, each (kt, 16); of the
 * last, only 8 when d_v is 8 mod 16. */
FLASH_FN static void pack_values(const float *v, int ldv, int n, int kt, int dv, float *vp)
{
    for (int c0 = 0; c0 < dv; c0 += PANEL) {
        float *strip = vp + (size_t)(c0 / PANEL) * kt * PANEL;
        const float *src = v + c0;
        if (dv - c0 >= PANEL)
            for (int j = 0; j < n; j++) {
                _mm256_storeu_ps(strip + (size_t)j * PANEL, _mm256_loadu_ps(src + (size_t)j * ldv));
                _mm256_storeu_ps(strip + (size_t)j * PANEL + 8, _mm256_loadu_ps(src + (size_t)j * ldv + 8));
            }
        else /* the last 8 values; pv_4xw reads only these */
            for (int j = 0; j < n; j++)
                _mm256_storeu_ps(strip + (size_t)j * PANEL, _mm256_loadu_ps(src + (size_t)j * ldv));
    }
}

#define PV_ROW(i)                                                                     \
    a = _mm256_broadcast_ss(p + (size_t)j * PANEL + (i));                             \
    x##i##0 = _mm256_fmadd_ps(a, v0, x##i##0);                                        \
    x##i##1 = _mm256_fmadd_ps(a, v1, x##i##1)
#define PV_STORE(i)                                                                   \
    a = _mm256_broadcast_ss(corr + (i));                                              \
    _mm256_storeu_ps(o + (size_t)(i) * ldo,                                           \
                     _mm256_fmadd_ps(_mm256_loadu_ps(o + (size_t)(i) * ldo), a, x##i##0)); \
    if (w > 1)                                                                        \
        _mm256_storeu_ps(o + (size_t)(i) * ldo + 8,                                   \
                         _mm256_fmadd_ps(_mm256_loadu_ps(o + (size_t)(i) * ldo + 8), a, x##i##1))

/* Four query columns (of a score panel p, rows 16 apart) x 8*w values (w = 2,
 * or 1 for the last 8 of a d_v that is 8 mod 16; strip v, rows 16 apart),
 * summed over the tile's n keys in registers. */
FLASH_INLINE void pv_4xw(const float *p, const float *v, int n, const float *corr, float *o, int ldo, int w)
{
    __m256 x00 = _mm256_setzero_ps(), x01 = x00, x10 = x00, x11 = x00, x20 = x00, x21 = x00;
    __m256 x30 = x00, x31 = x00, a;
    for (int j = 0; j < n; j++) {
        const __m256 v0 = _mm256_loadu_ps(v + (size_t)j * PANEL);
        const __m256 v1 = w > 1 ? _mm256_loadu_ps(v + (size_t)j * PANEL + 8) : v0;
        PV_ROW(0); PV_ROW(1); PV_ROW(2); PV_ROW(3);
    }
    PV_STORE(0); PV_STORE(1); PV_STORE(2); PV_STORE(3);
}

FLASH_FN static void mixture(const flash_scratch *f, int n, int kt, int cp, int dv)
{
    for (int c0 = 0; c0 < dv; c0 += PANEL) {
        const float *strip = f->vp + (size_t)(c0 / PANEL) * kt * PANEL;
        for (int i0 = 0; i0 < cp; i0 += PV_ROWS) {
            const float *p = f->st + (size_t)(i0 / PANEL) * kt * PANEL + i0 % PANEL;
            float *o = f->o + (size_t)i0 * dv + c0;
            if (dv - c0 >= PANEL) pv_4xw(p, strip, n, f->corr + i0, o, dv, 2);
            else pv_4xw(p, strip, n, f->corr + i0, o, dv, 1);
        }
    }
}

/* ---- AVX-512F: the same three phases, one panel a register ---------------- */

/* On CPUs with AVX-512F (unless attn__flash_no_avx512, the test hook) the
 * scores, the online softmax and the mixture run sixteen lanes a register,
 * twice the AVX2 blocks' work per instruction. Every lane gets the very
 * operations of the AVX2 kernels, in the same order — a score's FMAs over
 * d, a mixture's over the keys, the same exp — so the outputs are the same
 * bits (test_fused's avx512_equals_avx2). Masks, packing and the last 8
 * values of a d_v that is 8 mod 16 stay AVX2. */
int attn__flash_no_avx512 = 0;

static int use_avx512(void) { return !attn__flash_no_avx512 && __builtin_cpu_supports("avx512f"); }

#define FLASH512_FN __attribute__((target("avx2,fma,avx512f")))
#define FLASH512_INLINE __attribute__((target("avx2,fma,avx512f"), always_inline)) static inline

enum { PV_ROWS_512 = 8 /* query columns per mixture register block */ };

#define S2_ROW(i)                                                                     \
    a = _mm512_set1_ps(k[(size_t)(i) * dk + d]);                                      \
    c##i##0 = _mm512_fmadd_ps(a, b0, c##i##0);                                        \
    c##i##1 = _mm512_fmadd_ps(a, b1, c##i##1)
#define S2_STORE(i)                                                                   \
    if ((i) < nk) {                                                                   \
        _mm512_storeu_ps(st + (size_t)(i) * PANEL, c##i##0);                          \
        _mm512_storeu_ps(st + ldp + (size_t)(i) * PANEL, c##i##1);                    \
    }
#define S2_MAX(x)                                                                     \
    _mm512_max_ps(_mm512_max_ps(_mm512_max_ps(c0##x, c1##x), _mm512_max_ps(c2##x, c3##x)), \
                  _mm512_max_ps(_mm512_max_ps(c4##x, c5##x), _mm512_max_ps(c6##x, c7##x)))
#define S2_MAX_HI(x)                                                                  \
    _mm512_max_ps(_mm512_max_ps(c8##x, c9##x), _mm512_max_ps(c10##x, c11##x))

/* cmax[0..16) = max(cmax, a). */
FLASH512_INLINE void fold_max_512(float *cmax, __m512 a)
{
    _mm512_storeu_ps(cmax, _mm512_max_ps(_mm512_loadu_ps(cmax), a));
}

/* Twelve keys (rows of kp, d_k apart; the first nk are stored) x two
 * panels (32 query columns; the second panel ldq floats after the first in
 * qt, ldp in st), all d_k in registers: 24 accumulators. d_k a constant
 * (64, 128) makes every key's broadcast one base register plus a fixed
 * displacement: no index registers, no spills. */
FLASH512_INLINE void score_12x32(const float *panel, int ldq, const float *k, const int dk, float *st, int ldp,
                                 float *cmax, int nk)
{
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
    __m512 c80 = c00, c81 = c00, c90 = c00, c91 = c00, c100 = c00, c101 = c00, c110 = c00, c111 = c00, a;
    for (int d = 0; d < dk; d++) {
        const __m512 b0 = _mm512_loadu_ps(panel + (size_t)d * PANEL);
        const __m512 b1 = _mm512_loadu_ps(panel + ldq + (size_t)d * PANEL);
        S2_ROW(0); S2_ROW(1); S2_ROW(2); S2_ROW(3); S2_ROW(4); S2_ROW(5);
        S2_ROW(6); S2_ROW(7); S2_ROW(8); S2_ROW(9); S2_ROW(10); S2_ROW(11);
    }
    S2_STORE(0); S2_STORE(1); S2_STORE(2); S2_STORE(3); S2_STORE(4); S2_STORE(5);
    S2_STORE(6); S2_STORE(7); S2_STORE(8); S2_STORE(9); S2_STORE(10); S2_STORE(11);
    if (cmax) {
        fold_max_512(cmax, _mm512_max_ps(S2_MAX(0), S2_MAX_HI(0)));
        fold_max_512(cmax + PANEL, _mm512_max_ps(S2_MAX(1), S2_MAX_HI(1)));
    }
}

#define S1_ROW(i) c##i = _mm512_fmadd_ps(_mm512_set1_ps(k[(size_t)(i) * dk + d]), b, c##i)
#define S1_STORE(i)                                                                   \
    if ((i) < nk) _mm512_storeu_ps(st + (size_t)(i) * PANEL, c##i)

/* Twelve keys x one panel (a job's last panel when it has an odd count). */
FLASH512_INLINE void score_12x16(const float *panel, const float *k, const int dk, float *st, float *cmax, int nk)
{
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    __m512 c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
    for (int d = 0; d < dk; d++) {
        const __m512 b = _mm512_loadu_ps(panel + (size_t)d * PANEL);
        S1_ROW(0); S1_ROW(1); S1_ROW(2); S1_ROW(3); S1_ROW(4); S1_ROW(5);
        S1_ROW(6); S1_ROW(7); S1_ROW(8); S1_ROW(9); S1_ROW(10); S1_ROW(11);
    }
    S1_STORE(0); S1_STORE(1); S1_STORE(2); S1_STORE(3); S1_STORE(4); S1_STORE(5);
    S1_STORE(6); S1_STORE(7); S1_STORE(8); S1_STORE(9); S1_STORE(10); S1_STORE(11);
    if (cmax)
        fold_max_512(cmax, _mm512_max_ps(_mm512_max_ps(_mm512_max_ps(_mm512_max_ps(c0, c1), _mm512_max_ps(c2, c3)),
                                                       _mm512_max_ps(_mm512_max_ps(c4, c5), _mm512_max_ps(c6, c7))),
                                         _mm512_max_ps(_mm512_max_ps(c8, c9), _mm512_max_ps(c10, c11))));
}

/* scores() sixteen lanes a register: panels in pairs, keys in twelves, the
 * last block whole over pack_keys' copies; k is kp (rows d_k apart), d_k is
 * dkc when that is not 0. */
FLASH512_INLINE void scores_512_t(const float *qt, const float *k, int n, int kt, int cp, int dk, float *st,
                                  float *cmax, const int dkc)
{
    const int panels = cp / PANEL, d = dkc ? dkc : dk;
    const size_t ldq = (size_t)PANEL * d, ldp = (size_t)kt * PANEL;
    for (int p = 0; p < panels;) {
        const int two = p + 1 < panels;
        const float *panel = qt + (size_t)p * ldq;
        float *sp = st + (size_t)p * ldp, *pm = cmax ? cmax + (size_t)p * PANEL : NULL;
        for (int j = 0; j < n; j += KEY_BLOCK_512) {
            const float *kj = k + (size_t)j * d;
            float *sj = sp + (size_t)j * PANEL;
            const int nk = n - j < KEY_BLOCK_512 ? n - j : KEY_BLOCK_512;
            if (two) score_12x32(panel, (int)ldq, kj, d, sj, (int)ldp, pm, nk);
            else score_12x16(panel, kj, d, sj, pm, nk);
        }
        p += 1 + two;
    }
}

FLASH512_FN static void scores_512(const float *qt, const float *kp, int n, int kt, int cp, int dk, float *st,
                                   float *cmax)
{
    switch (dk) {
    case 64: scores_512_t(qt, kp, n, kt, cp, dk, st, cmax, 64); break;
    case 128: scores_512_t(qt, kp, n, kt, cp, dk, st, cmax, 128); break;
    default: scores_512_t(qt, kp, n, kt, cp, dk, st, cmax, 0); break;
    }
}

/* new_max for the sixteen columns from c. */
FLASH512_INLINE void new_max_512(const flash_scratch *f, int c, __m512 m)
{
    const __m512 old = _mm512_loadu_ps(f->mx + c);
    const __mmask16 unseen = _mm512_cmp_ps_mask(m, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
    const __m512 shift = _mm512_mask_mov_ps(m, unseen, _mm512_setzero_ps());
    _mm512_storeu_ps(f->mx + c, m);
    _mm512_storeu_ps(f->shift + c, shift);
    _mm512_storeu_ps(f->corr + c, attn__exp16_fma(_mm512_sub_ps(old, shift)));
}

/* tile_softmax() a panel a register. */
FLASH512_FN static void tile_softmax_512(const flash_scratch *f, int n, int kt, int cp, int have_max)
{
    for (int p = 0; p < cp / PANEL; p++) {
        const int c0 = p * PANEL;
        float *panel = f->st + (size_t)p * kt * PANEL;
        __m512 m = _mm512_loadu_ps((have_max ? f->shift : f->mx) + c0);
        for (int j = 0; j < n && !have_max; j++) m = _mm512_max_ps(m, _mm512_loadu_ps(panel + (size_t)j * PANEL));
        new_max_512(f, c0, m);
        const __m512 sh = _mm512_loadu_ps(f->shift + c0);
        __m512 s = _mm512_setzero_ps();
        for (int j = 0; j < n; j++) {
            float *row = panel + (size_t)j * PANEL;
            const __m512 e = attn__exp16_fma(_mm512_sub_ps(_mm512_loadu_ps(row), sh));
            _mm512_storeu_ps(row, e);
            s = _mm512_add_ps(s, e);
        }
        _mm512_storeu_ps(f->sum + c0, _mm512_fmadd_ps(_mm512_loadu_ps(f->sum + c0), _mm512_loadu_ps(f->corr + c0), s));
    }
}

#define PV2_ROW(i)                                                                    \
    a = _mm512_set1_ps(p[(size_t)j * PANEL + (i)]);                                   \
    x##i##0 = _mm512_fmadd_ps(a, v0, x##i##0);                                        \
    x##i##1 = _mm512_fmadd_ps(a, v1, x##i##1)
#define PV2_STORE(i)                                                                  \
    a = _mm512_set1_ps(corr[i]);                                                      \
    _mm512_storeu_ps(o + (size_t)(i) * ldo, _mm512_fmadd_ps(_mm512_loadu_ps(o + (size_t)(i) * ldo), a, x##i##0)); \
    _mm512_storeu_ps(o + (size_t)(i) * ldo + PANEL,                                   \
                     _mm512_fmadd_ps(_mm512_loadu_ps(o + (size_t)(i) * ldo + PANEL), a, x##i##1))

/* Eight query columns x two strips (32 values; the second strip lds floats
 * after the first), over the tile's n keys: 16 accumulators. */
FLASH512_INLINE void pv_8x32(const float *p, const float *v, size_t lds, int n, const float *corr, float *o, int ldo)
{
    __m512 x00 = _mm512_setzero_ps(), x01 = x00, x10 = x00, x11 = x00, x20 = x00, x21 = x00, x30 = x00, x31 = x00;
    __m512 x40 = x00, x41 = x00, x50 = x00, x51 = x00, x60 = x00, x61 = x00, x70 = x00, x71 = x00, a;
    for (int j = 0; j < n; j++) {
        const __m512 v0 = _mm512_loadu_ps(v + (size_t)j * PANEL), v1 = _mm512_loadu_ps(v + lds + (size_t)j * PANEL);
        PV2_ROW(0); PV2_ROW(1); PV2_ROW(2); PV2_ROW(3); PV2_ROW(4); PV2_ROW(5); PV2_ROW(6); PV2_ROW(7);
    }
    PV2_STORE(0); PV2_STORE(1); PV2_STORE(2); PV2_STORE(3); PV2_STORE(4); PV2_STORE(5); PV2_STORE(6); PV2_STORE(7);
}

#define PV1_ROW(i) x##i = _mm512_fmadd_ps(_mm512_set1_ps(p[(size_t)j * PANEL + (i)]), v0, x##i)
#define PV1_STORE(i)                                                                  \
    _mm512_storeu_ps(o + (size_t)(i) * ldo,                                           \
                     _mm512_fmadd_ps(_mm512_loadu_ps(o + (size_t)(i) * ldo), _mm512_set1_ps(corr[i]), x##i))

/* Eight query columns x one strip of 16 values. */
FLASH512_INLINE void pv_8x16(const float *p, const float *v, int n, const float *corr, float *o, int ldo)
{
    __m512 x0 = _mm512_setzero_ps(), x1 = x0, x2 = x0, x3 = x0, x4 = x0, x5 = x0, x6 = x0, x7 = x0;
    for (int j = 0; j < n; j++) {
        const __m512 v0 = _mm512_loadu_ps(v + (size_t)j * PANEL);
        PV1_ROW(0); PV1_ROW(1); PV1_ROW(2); PV1_ROW(3); PV1_ROW(4); PV1_ROW(5); PV1_ROW(6); PV1_ROW(7);
    }
    PV1_STORE(0); PV1_STORE(1); PV1_STORE(2); PV1_STORE(3); PV1_STORE(4); PV1_STORE(5); PV1_STORE(6); PV1_STORE(7);
}

/* mixture() with strips in pairs and eight query columns a block; the last
 * 8 values of a d_v that is 8 mod 16 by the AVX2 block. */
FLASH512_FN static void mixture_512(const flash_scratch *f, int n, int kt, int cp, int dv)
{
    const size_t lds = (size_t)kt * PANEL;
    for (int c0 = 0; c0 < dv;) {
        const float *strip = f->vp + (size_t)(c0 / PANEL) * lds;
        const int left = dv - c0, width = left >= 2 * PANEL ? 2 * PANEL : left >= PANEL ? PANEL : left;
        for (int i0 = 0; i0 < cp; i0 += PV_ROWS_512) {
            const float *p = f->st + (size_t)(i0 / PANEL) * lds + i0 % PANEL;
            float *o = f->o + (size_t)i0 * dv + c0;
            if (width == 2 * PANEL) pv_8x32(p, strip, lds, n, f->corr + i0, o, dv);
            else if (width == PANEL) pv_8x16(p, strip, n, f->corr + i0, o, dv);
            else
                for (int i = 0; i < PV_ROWS_512; i += PV_ROWS)
                    pv_4xw(p + i, strip, n, f->corr + i0 + i, o + (size_t)i * dv, dv, 1);
        }
        c0 += width;
    }
}

/* ---- the job --------------------------------------------------------------- */

/* Each column's visible keys (padded columns see none) and the keys any row
 * of the block may see, [*klo, *khi); *all_lo / *all_hi: the keys every row
 * sees (a tile inside needs no per-column mask). */
static void column_ranges(const attn_seq *s, const attn__head_job *job, int r, int cp, const flash_scratch *f,
                          int *klo, int *khi, int *all_lo, int *all_hi)
{
    const int nt = job->nt;
    *klo = s->s, *khi = 0, *all_lo = 0, *all_hi = s->s;
    if (!s->is_causal && s->window <= 0) { /* every row sees keys [0, key_length or S) */
        const int hi = s->key_length > 0 && s->key_length < s->s ? s->key_length : s->s;
        for (int c = 0; c < r * nt; c++) f->lo[c] = 0, f->hi[c] = hi;
        for (int c = r * nt; c < cp; c++) f->lo[c] = f->hi[c] = 0;
        *all_hi = hi;
        if (hi > 0) *klo = 0, *khi = hi;
        return;
    }
    for (int t = 0; t < nt; t++) {
        int lo, hi;
        attn__mask_row_range(s, job->t0 + t, &lo, &hi);
        for (int hh = 0; hh < r; hh++) f->lo[hh * nt + t] = lo, f->hi[hh * nt + t] = hi;
        if (lo > *all_lo) *all_lo = lo;
        if (hi < *all_hi) *all_hi = hi;
        if (hi <= lo) continue;
        if (lo < *klo) *klo = lo;
        if (hi > *khi) *khi = hi;
    }
    for (int c = r * nt; c < cp; c++) f->lo[c] = f->hi[c] = 0;
}

/* 1 when some column sees a key of [s0, s0 + n). */
static int tile_visible(const flash_scratch *f, int columns, int s0, int n)
{
    for (int c = 0; c < columns; c++) {
        const int a = f->lo[c] > s0 ? f->lo[c] : s0, b = f->hi[c] < s0 + n ? f->hi[c] : s0 + n;
        if (a < b) return 1;
    }
    return 0;
}

/* z rows = o / sum: column hh*nt + t goes to z row t, head hh's columns
 * (d_v is a multiple of 8). */
FLASH_FN static void finish(const flash_scratch *f, const attn__head_job *job, int h0, int r, int dv, float *z0)
{
    const int nt = job->nt;
    for (int c = 0; c < r * nt; c++) {
        const int hh = c / nt, t = c % nt;
        float *zr = z0 + (size_t)t * job->ldz + (size_t)(h0 + hh) * dv;
        const float *orow = f->o + (size_t)c * dv;
        if (f->sum[c] > 0.0f) {
            const __m256 inv = _mm256_set1_ps(1.0f / f->sum[c]);
            for (int k = 0; k < dv; k += 8) _mm256_storeu_ps(zr + k, _mm256_mul_ps(_mm256_loadu_ps(orow + k), inv));
        } else {
            memset(zr, 0, (size_t)dv * sizeof *zr);
        }
    }
}

void attn__flash_job(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch)
{
    const attn_layer *l = ctx->layer;
    const attn_seq *s = &ctx->seqs[job->seq];
    const int r = l->h / l->g, kvh = job->kv_head, h0 = kvh * r, dk = l->d_k, dv = l->d_v;
    const int cp = (int)round_up((size_t)r * (size_t)job->nt, PANEL), kt = tile_keys(cp, ctx->block_k);
    const int plain = attn__kv_is_plain(s), wide = use_avx512();
    flash_scratch f;
    layout(scratch, r, ctx->block_q, ctx->block_k, dk, dv, plain ? 0 : attn__kv_tile_ld(l, 0),
           plain ? 0 : attn__kv_tile_ld(l, 1), &f);
    float *z0 = job->z + (size_t)job->t0 * job->ldz;
    int klo, khi, all_lo, all_hi;
    column_ranges(s, job, r, cp, &f, &klo, &khi, &all_lo, &all_hi);
    for (int c = 0; c < cp; c++) f.mx[c] = -INFINITY, f.sum[c] = 0.0f;
    if (khi <= klo) {
        finish(&f, job, h0, r, dv, z0);
        return;
    }
    pack_queries(ctx, job, h0, r, cp, f.qt); /* before z is written: z may alias q */
    memset(f.o, 0, (size_t)cp * (size_t)dv * sizeof *f.o);
    attn__kv kv;
    if (!plain) attn__kv_from_seq(l, s, &kv);
    for (int s0 = klo; s0 < khi; s0 += kt) {
        const int n = khi - s0 < kt ? khi - s0 : kt;
        const int by_column = !(all_lo <= s0 && all_hi >= s0 + n);
        if (by_column && !tile_visible(&f, r * job->nt, s0, n)) continue;
        int ldk = ctx->ldk, ldv = ctx->ldv;
        const float *k = plain ? job->k + (size_t)kvh * dk + (size_t)s0 * ctx->ldk
                               : attn__kv_rows(l, &kv, 0, kvh, s0, n, f.kbuf, &ldk);
        const int masked = by_column || s->key_padding_mask != NULL;
        if (!masked) memcpy(f.shift, f.mx, (size_t)cp * sizeof *f.shift);
        pack_keys(k, ldk, n, dk, wide ? KEY_BLOCK_512 : 1, f.kp);
        if (plain && s0 + kt < khi) { /* the next tile's rows, while this one computes */
            const int n2 = khi - s0 - kt < kt ? khi - s0 - kt : kt;
            prefetch_rows(k + (size_t)kt * ldk, ldk, n2, dk);
            prefetch_rows(job->v + (size_t)kvh * dv + (size_t)(s0 + kt) * ctx->ldv, ctx->ldv, n2, dv);
        }
        if (wide) scores_512(f.qt, f.kp, n, kt, cp, dk, f.st, masked ? NULL : f.shift);
        else scores(f.qt, f.kp, dk, n, kt, cp, dk, f.st, masked ? NULL : f.shift);
        if (masked) mask_tile(s, &f, s0, n, kt, cp, by_column);
        if (wide) tile_softmax_512(&f, n, kt, cp, !masked);
        else tile_softmax(&f, n, kt, cp, !masked);
        const float *v = plain ? job->v + (size_t)kvh * dv + (size_t)s0 * ctx->ldv
                               : attn__kv_rows(l, &kv, 1, kvh, s0, n, f.vbuf, &ldv);
        pack_values(v, ldv, n, kt, dv, f.vp);
        if (wide) mixture_512(&f, n, kt, cp, dv);
        else mixture(&f, n, kt, cp, dv);
    }
    finish(&f, job, h0, r, dv, z0);
}

#else /* no AVX2 path in this build: attn__head_fused keeps its BLAS tiles */

int attn__flash_applies(const attn_layer *l, const attn_seq *s)
{
    (void)l, (void)s;
    return 0;
}

size_t attn__flash_scratch_floats(int r, int block_q, int block_k, int d_k, int d_v, int gather)
{
    (void)r, (void)block_q, (void)block_k, (void)d_k, (void)d_v, (void)gather;
    return 0;
}

void attn__flash_job(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch)
{
    (void)ctx, (void)job, (void)scratch;
}

#endif
