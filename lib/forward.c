/* forward.c — attn_forward on OpenBLAS: validate, project Q/K/V for the whole
 * ragged batch with one GEMM each, run one head kernel per (sequence, head),
 * then apply W_O with one GEMM. Numerics follow torch.nn.MultiheadAttention.
 */
#include "forward.h"

#include "mask.h"
#include "softmax.h"
#include "validate.h"
#include "workspace.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Where the buffers of one call live (byte offsets into the workspace) and
 * which caller buffers are used in place. */
typedef struct fwd_plan {
    size_t n_q, n_kv; /* total query rows, total key/value rows */
    size_t max_ts;    /* largest T*S: the head kernel's scratch */
    int n_jobs;
    int pack_q;       /* queries of several sequences are copied together */
    int pack_kv;      /* key/value sources differ from the packed queries */
    int out_scratch;  /* W_O result goes to scratch, then to each output */
    size_t off_xq, off_xk, off_xv, off_q, off_k, off_v, off_z, off_out, off_scores, off_jobs;
    size_t bytes;
} fwd_plan;

static int is_self(const attn_seq *s) { return s->key == NULL; }

static attn_status plan_call(const attn_layer *l, const attn_seq *seqs, int n, fwd_plan *p,
                             attn_error *err)
{
    memset(p, 0, sizeof *p);
    int all_self = 1;
    for (int i = 0; i < n; i++) {
        p->n_q += (size_t)seqs[i].t;
        p->n_kv += (size_t)seqs[i].s;
        size_t ts = (size_t)seqs[i].t * (size_t)seqs[i].s; /* validated: no overflow */
        if (ts > p->max_ts) p->max_ts = ts;
        all_self &= is_self(&seqs[i]);
    }
    if ((long long)n * l->h > INT_MAX)
        return attn__set_error(err, ATTN_ERR_LIMIT, "n_seqs * num_heads exceeds %d", INT_MAX);
    p->n_jobs = n * l->h;
    p->pack_q = n > 1;
    p->pack_kv = n > 1 && !all_self;
    p->out_scratch = l->w_o != NULL && n > 1;

    size_t t = 0, f = sizeof(float);
    int ok = 1;
    if (p->pack_q) ok &= attn__ws_plan(&t, p->n_q, (size_t)l->e_q * f, &p->off_xq);
    if (p->pack_kv) {
        ok &= attn__ws_plan(&t, p->n_kv, (size_t)l->e_k * f, &p->off_xk);
        ok &= attn__ws_plan(&t, p->n_kv, (size_t)l->e_v * f, &p->off_xv);
    }
    ok &= attn__ws_plan(&t, p->n_q, (size_t)l->qk_dim * f, &p->off_q);
    ok &= attn__ws_plan(&t, p->n_kv, (size_t)l->qk_dim * f, &p->off_k);
    ok &= attn__ws_plan(&t, p->n_kv, (size_t)l->v_dim * f, &p->off_v);
    if (l->w_o) ok &= attn__ws_plan(&t, p->n_q, (size_t)l->v_dim * f, &p->off_z);
    if (p->out_scratch) ok &= attn__ws_plan(&t, p->n_q, (size_t)l->e_out * f, &p->off_out);
    ok &= attn__ws_plan(&t, p->max_ts, f, &p->off_scores);
    ok &= attn__ws_plan(&t, (size_t)p->n_jobs, sizeof(attn__head_job), &p->off_jobs);
    if (!ok) return attn__set_error(err, ATTN_ERR_LIMIT, "scratch size for this batch overflows");
    p->bytes = t;
    return ATTN_OK;
}

/* y (rows, n_out; row stride ldy) = x (rows, n_in) Wᵀ + b, W: (n_out, n_in),
 * b: (n_out) or NULL. Like torch's addmm: the bias is C's starting value. */
static void linear(const float *x, size_t rows, int n_in, const float *w, const float *b, int n_out,
                   float *y, int ldy)
{
    float beta = 0.0f;
    if (b != NULL) {
        for (size_t r = 0; r < rows; r++) memcpy(y + r * (size_t)ldy, b, (size_t)n_out * sizeof *b);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, n_out, n_in, 1.0f, x, n_in, w,
                n_in, beta, y, ldy);
}

static float *copy_rows(float *dst, const float *src, int rows, int cols)
{
    size_t n = (size_t)rows * (size_t)cols;
    memcpy(dst, src, n * sizeof *dst);
    return dst + n;
}

/* Gathers the inputs into contiguous (rows, width) blocks so each projection
 * is one GEMM; a self-attention sequence's keys and values are its queries. */
static void pack_inputs(const attn_layer *l, const attn_seq *seqs, int n, const fwd_plan *p,
                        char *base)
{
    if (p->pack_q) {
        float *d = (float *)(base + p->off_xq);
        for (int i = 0; i < n; i++) d = copy_rows(d, seqs[i].query, seqs[i].t, l->e_q);
    }
    if (p->pack_kv) {
        float *dk = (float *)(base + p->off_xk), *dv = (float *)(base + p->off_xv);
        for (int i = 0; i < n; i++) {
            const attn_seq *s = &seqs[i];
            dk = copy_rows(dk, is_self(s) ? s->query : s->key, s->s, l->e_k);
            dv = copy_rows(dv, is_self(s) ? s->query : s->value, s->s, l->e_v);
        }
    }
}

/* Q = Xq W_qᵀ + b_q, K = Xk W_kᵀ + b_k, V = Xv W_vᵀ + b_v over the whole batch. */
static void project_qkv(const attn_layer *l, const attn_seq *seqs, const fwd_plan *p, char *base)
{
    const float *xq = p->pack_q ? (const float *)(base + p->off_xq) : seqs[0].query;
    const float *xk = xq, *xv = xq; /* all self-attention */
    if (p->pack_kv) {
        xk = (const float *)(base + p->off_xk);
        xv = (const float *)(base + p->off_xv);
    } else if (!p->pack_q && !is_self(&seqs[0])) {
        xk = seqs[0].key;
        xv = seqs[0].value;
    }
    linear(xq, p->n_q, l->e_q, l->w_q, l->b_q, l->qk_dim, (float *)(base + p->off_q), l->qk_dim);
    linear(xk, p->n_kv, l->e_k, l->w_k, l->b_k, l->qk_dim, (float *)(base + p->off_k), l->qk_dim);
    linear(xv, p->n_kv, l->e_v, l->w_v, l->b_v, l->v_dim, (float *)(base + p->off_v), l->v_dim);
}

/* One job per (sequence, head). Without W_O each head writes straight into
 * its columns of the caller's output; with W_O into the scratch concat Z. */
static void make_jobs(const attn_layer *l, const attn_seq *seqs, int n, const fwd_plan *p,
                      char *base, attn__head_job *jobs)
{
    float *z = l->w_o ? (float *)(base + p->off_z) : NULL;
    int q_row = 0, kv_row = 0, j = 0;
    for (int i = 0; i < n; i++) {
        for (int h = 0; h < l->h; h++, j++) {
            jobs[j].seq = i;
            jobs[j].head = h;
            jobs[j].q_row = q_row;
            jobs[j].kv_row = kv_row;
            jobs[j].z = (z ? z + (size_t)q_row * l->v_dim : seqs[i].output) + (size_t)h * l->d_v;
            jobs[j].ldz = l->v_dim;
        }
        q_row += seqs[i].t;
        kv_row += seqs[i].s;
    }
}

static size_t weights_len(const attn_layer *l, const attn_seq *s)
{
    size_t n = (size_t)s->t * (size_t)s->s;
    return s->weights_mode == ATTN_WEIGHTS_PER_HEAD ? n * (size_t)l->h : n;
}

/* Runs every job, in order, on the calling thread. The one place a thread pool
 * (one scratch per worker; AVERAGE jobs of a sequence kept on one worker) or a
 * per-job choice of kernel (fused online softmax when no weights are wanted)
 * plugs in. */
static void run_heads(const attn__fwd_ctx *ctx, const attn__head_job *jobs, int n_jobs,
                      float *scratch, int n_seqs)
{
    const attn_layer *l = ctx->layer;
    const attn__head_kernel kernel = attn__head_blas;
    for (int i = 0; i < n_seqs; i++)
        if (ctx->seqs[i].weights_mode == ATTN_WEIGHTS_AVERAGE)
            memset(ctx->seqs[i].weights, 0, weights_len(l, &ctx->seqs[i]) * sizeof(float));
    for (int j = 0; j < n_jobs; j++) kernel(ctx, &jobs[j], scratch);
    for (int i = 0; i < n_seqs; i++) {
        if (ctx->seqs[i].weights_mode != ATTN_WEIGHTS_AVERAGE) continue;
        float *w = ctx->seqs[i].weights, hf = (float)l->h;
        size_t len = weights_len(l, &ctx->seqs[i]);
        for (size_t k = 0; k < len; k++) w[k] /= hf; /* torch: mean = sum / h */
    }
}

/* out = Z W_oᵀ + b_o for all rows; then each sequence's rows to its output. */
static void project_out(const attn_layer *l, const attn_seq *seqs, int n, const fwd_plan *p,
                        char *base)
{
    if (l->w_o == NULL) return; /* heads already wrote the outputs */
    const float *z = (const float *)(base + p->off_z);
    if (!p->out_scratch) {
        linear(z, p->n_q, l->v_dim, l->w_o, l->b_o, l->e_out, seqs[0].output, l->e_out);
        return;
    }
    float *o = (float *)(base + p->off_out);
    linear(z, p->n_q, l->v_dim, l->w_o, l->b_o, l->e_out, o, l->e_out);
    for (int i = 0; i < n; i++) {
        size_t len = (size_t)seqs[i].t * (size_t)l->e_out;
        memcpy(seqs[i].output, o, len * sizeof *o);
        o += len;
    }
}

static uint64_t count_flops(const attn_layer *l, const attn_seq *seqs, int n, const fwd_plan *p)
{
    uint64_t f = 2 * (uint64_t)p->n_q * l->e_q * l->qk_dim + 2 * (uint64_t)p->n_kv * l->e_k * l->qk_dim +
                 2 * (uint64_t)p->n_kv * l->e_v * l->v_dim;
    for (int i = 0; i < n; i++) /* QKᵀ, αV, and ~5 per score for scale/mask/softmax */
        f += (uint64_t)seqs[i].t * seqs[i].s * l->h * (2u * l->d_k + 2u * l->d_v + 5u);
    if (l->w_o) f += 2 * (uint64_t)p->n_q * l->v_dim * l->e_out;
    return f;
}

attn_status attn_forward(const attn_layer *layer, const attn_seq *seqs, int n_seqs,
                         attn_workspace *ws, attn_forward_stats *stats, attn_error *err)
{
    attn_status st = attn__validate_forward(layer, seqs, n_seqs, err);
    if (st != ATTN_OK) return st;
    if (n_seqs == 0) {
        if (stats != NULL) *stats = (attn_forward_stats){0, 0};
        return ATTN_OK;
    }
    fwd_plan plan;
    if ((st = plan_call(layer, seqs, n_seqs, &plan, err))) return st;

    attn_workspace local = {0};
    attn_workspace *w = ws ? ws : &local; /* NULL: scratch for this call only */
    if ((st = attn__ws_reserve(w, plan.bytes, err))) goto done;
    char *base = w->buf;

    pack_inputs(layer, seqs, n_seqs, &plan, base);
    project_qkv(layer, seqs, &plan, base);
    attn__fwd_ctx ctx = {
        .layer = layer, .seqs = seqs,
        .q = (const float *)(base + plan.off_q), .ldq = layer->qk_dim,
        .k = (const float *)(base + plan.off_k), .ldk = layer->qk_dim,
        .v = (const float *)(base + plan.off_v), .ldv = layer->v_dim,
        .scale = (float)(1.0 / sqrt((double)layer->d_k)),
    };
    attn__head_job *jobs = (attn__head_job *)(base + plan.off_jobs);
    make_jobs(layer, seqs, n_seqs, &plan, base, jobs);
    run_heads(&ctx, jobs, plan.n_jobs, (float *)(base + plan.off_scores), n_seqs);
    project_out(layer, seqs, n_seqs, &plan, base);
    if (stats != NULL) {
        stats->flops = count_flops(layer, seqs, n_seqs, &plan);
        stats->peak_scratch = plan.bytes;
    }

done:
    if (w == &local) free(local.buf);
    return st;
}

/* Shapes: q (T, d_k) stride ldq; k (S, d_k) stride ldk; v (S, d_v) stride ldv;
 * scores (T, S) in scratch; z (T, d_v) stride job->ldz. */
void attn__head_blas(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch)
{
    const attn_layer *l = ctx->layer;
    const attn_seq *s = &ctx->seqs[job->seq];
    const int T = s->t, S = s->s, h = job->head;
    const float *q = ctx->q + (size_t)job->q_row * ctx->ldq + (size_t)h * l->d_k;
    const float *k = ctx->k + (size_t)job->kv_row * ctx->ldk + (size_t)h * l->d_k;
    const float *v = ctx->v + (size_t)job->kv_row * ctx->ldv + (size_t)h * l->d_v;
    const size_t ts = (size_t)T * (size_t)S;

    /* scores = float_mask + scale * Q_h K_hᵀ (torch: baddbmm(mask, q/√d_k, kᵀ)) */
    const float *fmask = attn__mask_float_plane(s, h);
    if (fmask) memcpy(scratch, fmask, ts * sizeof *scratch);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, S, l->d_k, ctx->scale, q, ctx->ldq, k,
                ctx->ldk, fmask ? 1.0f : 0.0f, scratch, S);

    const uint8_t *bmask = attn__mask_bool_plane(s, h);
    for (int t = 0; t < T; t++) {
        float *row = scratch + (size_t)t * S;
        int lo, hi;
        attn__mask_row_range(s, t, &lo, &hi);
        attn__mask_block_row(s, bmask, t, lo, hi, row);
        attn__softmax_row(row, S, lo, hi);
    }

    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, l->d_v, S, 1.0f, scratch, S, v,
                ctx->ldv, 0.0f, job->z, job->ldz);

    if (s->weights_mode == ATTN_WEIGHTS_PER_HEAD) {
        memcpy(s->weights + (size_t)h * ts, scratch, ts * sizeof *scratch);
    } else if (s->weights_mode == ATTN_WEIGHTS_AVERAGE) {
        for (size_t i = 0; i < ts; i++) s->weights[i] += scratch[i];
    }
}
