/* fused.c — memory-efficient attention for one (sequence, head, query block):
 * keys in tiles, scores of a tile by one sgemm, an online softmax (running max
 * and sum per row, the accumulator rescaled when the max grows), the tile's
 * α·V by a second sgemm into z (sgemv for a block of one query, the streamed
 * token's case). Scratch is one tile, never T x S.
 */
#include "forward.h"

#include "mask.h"
#include "softmax.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* Per-job scratch layout, in floats (all offsets multiples of 16 floats so
 * every piece stays 64-byte aligned). */
typedef struct fused_scratch {
    float *tile; /* (nt, n) scores / probabilities of one key tile, row stride block_k */
    float *qb;   /* (nt, d_k) this block's queries, contiguous */
    float *mx;   /* (nt) running max of each row's visible scores */
    float *sum;  /* (nt) running sum of exp(score - mx) */
    int *lo, *hi; /* (nt) each row's visible key interval */
} fused_scratch;

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

size_t attn__fused_scratch_floats(int block_q, int block_k, int d_k)
{
    size_t bq = (size_t)block_q; /* <= 4096, block_k <= 65536, d_k < INT_MAX: no overflow */
    return round16(bq * (size_t)block_k) + round16(bq * (size_t)d_k) + 4 * round16(bq);
}

static fused_scratch carve(float *p, int block_q, int block_k, int d_k)
{
    size_t bq = (size_t)block_q;
    fused_scratch f;
    f.tile = p;
    f.qb = f.tile + round16(bq * (size_t)block_k);
    f.mx = f.qb + round16(bq * (size_t)d_k);
    f.sum = f.mx + round16(bq);
    f.lo = (int *)(f.sum + round16(bq));
    f.hi = (int *)(f.sum + 2 * round16(bq));
    return f;
}

/* tile (nt, n) = fmask[rows t0.., keys s0..] + scale * Qb Kᵀ[:, s0..s0+n) —
 * the materialised path's baddbmm, restricted to the tile. */
static void score_tile(const attn__fwd_ctx *ctx, const attn_seq *s, const float *fmask,
                       const fused_scratch *f, const float *k, int t0, int nt, int s0, int n)
{
    const int dk = ctx->layer->d_k, ld = ctx->block_k;
    if (fmask != NULL)
        for (int r = 0; r < nt; r++)
            memcpy(f->tile + (size_t)r * ld, fmask + (size_t)(t0 + r) * s->s + s0,
                   (size_t)n * sizeof(float));
    const float *ks = k + (size_t)s0 * ctx->ldk;
    if (nt == 1) { /* one query (a streamed token): GEMV, several times faster than a 1-row
                      GEMM. Zero y first: whether beta = 0 ignores NaN garbage in y
                      differs between OpenBLAS versions. */
        if (fmask == NULL) memset(f->tile, 0, (size_t)n * sizeof(float));
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, dk, ctx->scale, ks, ctx->ldk, f->qb, 1,
                    fmask ? 1.0f : 0.0f, f->tile, 1);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nt, n, dk, ctx->scale, f->qb, dk, ks,
                    ctx->ldk, fmask ? 1.0f : 0.0f, f->tile, ld);
    }
}

/* z (nt, d_v) (+)= P (nt, n) V (n, d_v): beta 0 for the first tile, then 1. */
static void accumulate_pv(const attn__fwd_ctx *ctx, const float *p, const float *v, int nt, int n,
                          float beta, float *z, int ldz)
{
    const int dv = ctx->layer->d_v;
    if (nt == 1) { /* as in score_tile; z may hold Q (it can alias q) or garbage */
        if (beta == 0.0f) memset(z, 0, (size_t)dv * sizeof *z);
        cblas_sgemv(CblasRowMajor, CblasTrans, n, dv, 1.0f, v, ctx->ldv, p, 1, beta, z, 1);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nt, dv, n, 1.0f, p, ctx->block_k, v,
                    ctx->ldv, beta, z, ldz);
    }
}

/* Turns one tile row (n scores for keys s0..s0+n) into unnormalised
 * probabilities exp(score - running max), updating the row's max and sum and
 * rescaling its accumulator z_row (d_v) when the max grows. Keys the row may
 * not see become 0. Returns 1 if the row has a visible key in this tile. */
static int online_row(const attn_seq *s, const uint8_t *bplane, int t, int s0, int n, int lo,
                      int hi, float *row, float *mx, float *sum, float *z_row, int dv)
{
    int a = lo > s0 ? lo : s0, b = hi < s0 + n ? hi : s0 + n;
    if (a >= b) {
        memset(row, 0, (size_t)n * sizeof *row);
        return 0;
    }
    float *x = row + (a - s0);
    attn__mask_block_span(s, bplane, t, a, b, x);
    const int len = b - a;
    float m = attn__row_max(x, len);
    if (!(m > -INFINITY)) {
        memset(row, 0, (size_t)n * sizeof *row);
        return 0;
    }
    if (m > *mx) {
        if (*mx > -INFINITY) { /* earlier tiles were summed against a smaller max */
            float corr = expf(*mx - m);
            *sum *= corr;
            attn__scale(z_row, corr, dv);
        }
        *mx = m;
    }
    *sum += attn__exp_sum(x, *mx, x, len);
    if (a > s0) memset(row, 0, (size_t)(a - s0) * sizeof *row);
    if (b < s0 + n) memset(row + (b - s0), 0, (size_t)(s0 + n - b) * sizeof *row);
    return 1;
}

/* z rows = acc / sum, or 0 for a row that saw no key (PyTorch gives NaN there;
 * the library's contract is a zero mixture). */
static void finish_rows(const fused_scratch *f, float *z, int ldz, int nt, int dv, int any_gemm)
{
    for (int r = 0; r < nt; r++) {
        float *zr = z + (size_t)r * ldz;
        if (any_gemm && f->sum[r] > 0.0f) attn__scale(zr, 1.0f / f->sum[r], dv);
        else memset(zr, 0, (size_t)dv * sizeof *zr);
    }
}

/* Shapes (this head's columns): q (T, d_k) stride ldq; k (S, d_k) stride ldk;
 * v (S, d_v) stride ldv; z (T, d_v) stride ldz; this job does rows [t0, t0+nt). */
void attn__head_fused(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch)
{
    const attn_layer *l = ctx->layer;
    const attn_seq *s = &ctx->seqs[job->seq];
    const int h = job->head, t0 = job->t0, nt = job->nt, dk = l->d_k, dv = l->d_v;
    const fused_scratch f = carve(scratch, ctx->block_q, ctx->block_k, dk);
    float *z = job->z + (size_t)t0 * job->ldz;

    /* The keys any row of the block may see: tiles outside are never computed. */
    int klo = s->s, khi = 0;
    for (int r = 0; r < nt; r++) {
        attn__mask_row_range(s, t0 + r, &f.lo[r], &f.hi[r]);
        f.mx[r] = -INFINITY;
        f.sum[r] = 0.0f;
        if (f.hi[r] <= f.lo[r]) continue;
        if (f.lo[r] < klo) klo = f.lo[r];
        if (f.hi[r] > khi) khi = f.hi[r];
    }
    if (khi <= klo) {
        finish_rows(&f, z, job->ldz, nt, dv, 0);
        return;
    }
    /* Copy Q first: z may alias q (forward.c reuses Q's buffer for the concat). */
    const float *q = ctx->q + (size_t)(job->q_row + t0) * ctx->ldq + (size_t)h * dk;
    for (int r = 0; r < nt; r++)
        memcpy(f.qb + (size_t)r * dk, q + (size_t)r * ctx->ldq, (size_t)dk * sizeof(float));

    const float *k = job->k + (size_t)h * dk;
    const float *v = job->v + (size_t)h * dv;
    const float *fmask = attn__mask_float_plane(s, h);
    const uint8_t *bplane = attn__mask_bool_plane(s, h);
    int any_gemm = 0;
    for (int s0 = klo; s0 < khi; s0 += ctx->block_k) {
        const int n = khi - s0 < ctx->block_k ? khi - s0 : ctx->block_k;
        score_tile(ctx, s, fmask, &f, k, t0, nt, s0, n);
        int any = 0;
        for (int r = 0; r < nt; r++)
            any |= online_row(s, bplane, t0 + r, s0, n, f.lo[r], f.hi[r],
                              f.tile + (size_t)r * ctx->block_k, &f.mx[r], &f.sum[r],
                              z + (size_t)r * job->ldz, dv);
        if (!any) continue; /* every key of the tile blocked for every row */
        /* z (+)= P V[s0..s0+n); the first product overwrites */
        accumulate_pv(ctx, f.tile, v + (size_t)s0 * ctx->ldv, nt, n, any_gemm ? 1.0f : 0.0f, z,
                      job->ldz);
        any_gemm = 1;
    }
    finish_rows(&f, z, job->ldz, nt, dv, any_gemm);
}
