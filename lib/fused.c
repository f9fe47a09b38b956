/* fused.c — memory-efficient attention for one (sequence, KV head, query
 * block): the block's rows of every query head that reads the KV head (GQA:
 * r = h/g of them) stacked into one matrix, keys in tiles, the scores of a
 * tile by one sgemm, an online softmax (running max and sum per row, the
 * accumulator rescaled when the max grows), the tile's α·V by a second sgemm
 * (sgemv for a single row, the streamed token's MHA case). Each K/V tile is
 * read once per group of query heads. Scratch is one tile, never T x S.
 * On a CPU with AVX2 and FMA, jobs whose masks are per key (no bool or float
 * attn_mask) and whose d_v is a multiple of 8 run flash.c's micro-kernels
 * instead; these BLAS tiles remain the portable path and the masks' path.
 */
#include "forward.h"

#include "flash.h"
#include "kvcache.h"
#include "mask.h"
#include "softmax.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* Per-job scratch layout, in floats (all offsets multiples of 16 floats so
 * every piece stays 64-byte aligned). Stacked row hh*nt + t is query row
 * t0 + t of query head h0 + hh (h0 = kv_head * r). */
typedef struct fused_scratch {
    float *tile;  /* (r*nt, n) scores / probabilities of one key tile, row stride block_k */
    float *qb;    /* (r*nt, d_k) the group's queries, contiguous */
    float *acc;   /* (r*nt, d_v) the unnormalised mixtures (only when r > 1) */
    float *mx;    /* (r*nt) running max of each row's visible scores */
    float *sum;   /* (r*nt) running sum of exp(score - mx) */
    int *lo, *hi; /* (nt) each query row's visible key interval (same for every head) */
    float *kt, *vt; /* (block_k, d_k), (block_k, d_v): a paged / compact cache's tile
                       converted to float32 (only when the plan asked for them) */
} fused_scratch;

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

size_t attn__fused_scratch_floats(int r, int block_q, int block_k, int d_k, int d_v, int gather)
{
    /* gather: d_k / d_v are the converted tiles' row strides (attn__kv_tile_ld) */
    /* r <= h, r*block_q rows of r*block_q*block_k floats: the caller checks
     * that the total fits (plan_call multiplies with overflow checks). */
    size_t bq = (size_t)block_q, rows = (size_t)r * bq;
    size_t blas = round16(rows * (size_t)block_k) + round16(rows * (size_t)d_k) +
           (r > 1 ? round16(rows * (size_t)d_v) : 0) + 2 * round16(rows) + 2 * round16(bq) +
           (gather ? round16((size_t)block_k * (size_t)d_k) + round16((size_t)block_k * (size_t)d_v) : 0);
    /* the AVX2 path (flash.c) runs in the same scratch when the job allows it */
    size_t flash = attn__flash_scratch_floats(r, block_q, block_k, d_k, d_v, gather);
    return flash > blas ? flash : blas;
}

static fused_scratch carve(float *p, int r, int block_q, int block_k, int d_k, int d_v, int ldkt)
{
    size_t bq = (size_t)block_q, rows = (size_t)r * bq;
    fused_scratch f;
    f.tile = p;
    f.qb = f.tile + round16(rows * (size_t)block_k);
    f.acc = f.qb + round16(rows * (size_t)d_k);
    f.mx = f.acc + (r > 1 ? round16(rows * (size_t)d_v) : 0);
    f.sum = f.mx + round16(rows);
    f.lo = (int *)(f.sum + round16(rows));
    f.hi = (int *)(f.sum + round16(rows) + round16(bq));
    f.kt = f.sum + round16(rows) + 2 * round16(bq);
    f.vt = f.kt + round16((size_t)block_k * (size_t)ldkt);
    return f;
}

/* tile (r*nt, n) = fmask[head, rows t0.., keys s0..] + scale * Qb Kᵀ[:, s0..s0+n) —
 * the materialised path's baddbmm, restricted to the tile, for the r heads
 * at once: K's tile is read by one GEMM for the whole group. */
static void score_tile(const attn__fwd_ctx *ctx, const attn_seq *s, int h0, int r,
                       const fused_scratch *f, const float *ks, int ldk, int t0, int nt, int s0, int n)
{
    const int dk = ctx->layer->d_k, ld = ctx->block_k, rows = r * nt;
    const int has_fmask = s->attn_mask_kind == ATTN_MASK_FLOAT;
    if (has_fmask)
        for (int hh = 0; hh < r; hh++) {
            const float *fmask = attn__mask_float_plane(s, h0 + hh);
            for (int t = 0; t < nt; t++)
                memcpy(f->tile + (size_t)(hh * nt + t) * ld, fmask + (size_t)(t0 + t) * s->s + s0,
                       (size_t)n * sizeof(float));
        }
    if (rows == 1) { /* one query of one head (a streamed MHA token): GEMV, several times
                        faster than a 1-row GEMM. Zero y first: whether beta = 0 ignores
                        NaN garbage in y differs between OpenBLAS versions. */
        if (!has_fmask) memset(f->tile, 0, (size_t)n * sizeof(float));
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, dk, ctx->scale, ks, ldk, f->qb, 1,
                    has_fmask ? 1.0f : 0.0f, f->tile, 1);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, dk, ctx->scale, f->qb, dk, ks,
                    ldk, has_fmask ? 1.0f : 0.0f, f->tile, ld);
    }
}

/* acc (rows, d_v) (+)= P (rows, n) V (n, d_v): beta 0 for the first tile, then 1. */
static void accumulate_pv(const attn__fwd_ctx *ctx, const float *p, const float *v, int ldv, int rows,
                          int n, float beta, float *acc, int ldacc)
{
    const int dv = ctx->layer->d_v;
    if (rows == 1) { /* as in score_tile; acc may hold Q (z can alias q) or garbage */
        if (beta == 0.0f) memset(acc, 0, (size_t)dv * sizeof *acc);
        cblas_sgemv(CblasRowMajor, CblasTrans, n, dv, 1.0f, v, ldv, p, 1, beta, acc, 1);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, dv, n, 1.0f, p, ctx->block_k, v,
                    ldv, beta, acc, ldacc);
    }
}

/* Turns one tile row (n scores for keys s0..s0+n) into unnormalised
 * probabilities exp(score - running max), updating the row's max and sum and
 * rescaling its accumulator acc_row (d_v) when the max grows. Keys the row may
 * not see become 0. Returns 1 if the row has a visible key in this tile. */
static int online_row(const attn_seq *s, const uint8_t *bplane, int t, int s0, int n, int lo,
                      int hi, float *row, float *mx, float *sum, float *acc_row, int dv)
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
            attn__scale(acc_row, corr, dv);
        }
        *mx = m;
    }
    *sum += attn__exp_sum(x, *mx, x, len);
    if (a > s0) memset(row, 0, (size_t)(a - s0) * sizeof *row);
    if (b < s0 + n) memset(row + (b - s0), 0, (size_t)(s0 + n - b) * sizeof *row);
    return 1;
}

/* z rows = acc / sum, or 0 for a row that saw no key (PyTorch gives NaN there;
 * the library's contract is a zero mixture). Stacked row hh*nt + t goes to
 * z row t, head hh's columns. acc == z (r = 1) is finished in place. */
static void finish_rows(const fused_scratch *f, const float *acc, int ldacc, float *z, int ldz,
                        int r, int nt, int dv, int any_gemm)
{
    for (int hh = 0; hh < r; hh++)
        for (int t = 0; t < nt; t++) {
            const int row = hh * nt + t;
            const float *ar = acc + (size_t)row * ldacc;
            float *zr = z + (size_t)t * ldz + (size_t)hh * dv;
            if (any_gemm && f->sum[row] > 0.0f) {
                const float inv = 1.0f / f->sum[row];
                if (ar == zr) attn__scale(zr, inv, dv);
                else for (int c = 0; c < dv; c++) zr[c] = ar[c] * inv;
            } else {
                memset(zr, 0, (size_t)dv * sizeof *zr);
            }
        }
}

/* Shapes (KV head j = job->kv_head, query heads h0 = j*r .. h0+r-1):
 * q (T, d_k) per head, stride ldq; k (S, d_k) stride ldk = g*d_k; v (S, d_v)
 * stride ldv = g*d_v; z (T, d_v) per head, stride ldz; rows [t0, t0+nt). */
void attn__head_fused(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch)
{
    const attn_layer *l = ctx->layer;
    const attn_seq *s = &ctx->seqs[job->seq];
    if (attn__flash_applies(l, s)) { /* AVX2+FMA, per-key masks only */
        attn__flash_job(ctx, job, scratch);
        return;
    }
    const int r = l->h / l->g, kvh = job->kv_head, h0 = kvh * r;
    const int t0 = job->t0, nt = job->nt, dk = l->d_k, dv = l->d_v, rows = r * nt;
    const fused_scratch f = carve(scratch, r, ctx->block_q, ctx->block_k, dk, dv, attn__kv_tile_ld(l, 0));
    /* A paged or compact cache is read tile by tile through attn__kv_rows
     * (in place when a float32 tile lies inside one block, else converted
     * into kt / vt); the same tiles as a contiguous cache, so paged float32
     * gives bit-identical results. */
    const int plain = attn__kv_is_plain(s);
    attn__kv kv;
    if (!plain) attn__kv_from_seq(l, s, &kv);
    float *z = job->z + (size_t)t0 * job->ldz + (size_t)h0 * dv;
    /* One head: accumulate straight into z (as before GQA); a group: into acc. */
    float *acc = r == 1 ? z : f.acc;
    const int ldacc = r == 1 ? job->ldz : dv;

    /* The keys any row of the block may see: tiles outside are never computed. */
    int klo = s->s, khi = 0;
    for (int t = 0; t < nt; t++) {
        attn__mask_row_range(s, t0 + t, &f.lo[t], &f.hi[t]);
        if (f.hi[t] <= f.lo[t]) continue;
        if (f.lo[t] < klo) klo = f.lo[t];
        if (f.hi[t] > khi) khi = f.hi[t];
    }
    for (int row = 0; row < rows; row++) {
        f.mx[row] = -INFINITY;
        f.sum[row] = 0.0f;
    }
    if (khi <= klo) {
        finish_rows(&f, acc, ldacc, z, job->ldz, r, nt, dv, 0);
        return;
    }
    /* Copy Q first: z may alias q (forward.c reuses Q's buffer for the concat). */
    for (int hh = 0; hh < r; hh++) {
        const float *q = ctx->q + (size_t)(job->q_row + t0) * ctx->ldq + (size_t)(h0 + hh) * dk;
        for (int t = 0; t < nt; t++)
            memcpy(f.qb + (size_t)(hh * nt + t) * dk, q + (size_t)t * ctx->ldq, (size_t)dk * sizeof(float));
    }

    const float *k = plain ? job->k + (size_t)kvh * dk : NULL;
    const float *v = plain ? job->v + (size_t)kvh * dv : NULL;
    int any_gemm = 0;
    for (int s0 = klo; s0 < khi; s0 += ctx->block_k) {
        const int n = khi - s0 < ctx->block_k ? khi - s0 : ctx->block_k;
        int ldk = ctx->ldk, ldv = ctx->ldv;
        const float *ks = plain ? k + (size_t)s0 * ctx->ldk : attn__kv_rows(l, &kv, 0, kvh, s0, n, f.kt, &ldk);
        score_tile(ctx, s, h0, r, &f, ks, ldk, t0, nt, s0, n);
        int any = 0;
        for (int hh = 0; hh < r; hh++) {
            const uint8_t *bplane = attn__mask_bool_plane(s, h0 + hh);
            for (int t = 0; t < nt; t++) {
                const int row = hh * nt + t;
                any |= online_row(s, bplane, t0 + t, s0, n, f.lo[t], f.hi[t],
                                  f.tile + (size_t)row * ctx->block_k, &f.mx[row], &f.sum[row],
                                  acc + (size_t)row * ldacc, dv);
            }
        }
        if (!any) continue; /* every key of the tile blocked for every row */
        /* acc (+)= P V[s0..s0+n); the first product overwrites */
        const float *vs = plain ? v + (size_t)s0 * ctx->ldv : attn__kv_rows(l, &kv, 1, kvh, s0, n, f.vt, &ldv);
        accumulate_pv(ctx, f.tile, vs, ldv, rows, n, any_gemm ? 1.0f : 0.0f, acc, ldacc);
        any_gemm = 1;
    }
    finish_rows(&f, acc, ldacc, z, job->ldz, r, nt, dv, any_gemm);
}
