/* forward.c — attn_forward on OpenBLAS: validate, project Q/K/V for the whole
 * ragged batch with one GEMM each (K and V g heads wide), rotate Q and K at
 * their positions (RoPE layers), store appended rows into KV caches, run the
 * head jobs (fused or materialised kernel, one per KV head and query block;
 * on the calling thread or the workspace's pool), then apply W_O with one
 * GEMM. Numerics follow torch.nn.MultiheadAttention and, for GQA and RoPE,
 * Hugging Face's Llama attention. Also attn_project_kv, the same K/V
 * projection on its own.
 */
#include "forward.h"

#include "decode.h"
#include "kvcache.h"
#include "skinny.h"
#include "mask.h"
#include "rope.h"
#include "softmax.h"
#include "validate.h"
#include "workspace.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Calls smaller than this many flops stay on the calling thread: waking the
 * pool and joining it costs ~10-30 us, which is the whole of such a call. */
#define POOL_MIN_FLOPS 2e6

/* Where the buffers of one call live (byte offsets into the workspace), which
 * caller buffers are used in place, and how the heads are run. */
typedef struct fwd_plan {
    size_t n_q, n_kv; /* total query rows, total key/value rows projected */
    int n_jobs;
    int n_workers;    /* 1: everything on the calling thread; else the pool's size */
    int pack_q;       /* queries of several sequences are copied together */
    int pack_kv;      /* key/value sources differ from the packed queries */
    int out_scratch;  /* W_O result goes to scratch, then to each output */
    int z_in_q;       /* the head concat reuses Q's buffer (d_k == d_v) */
    size_t worker_floats; /* head-kernel scratch per worker */
    int block_q, block_k; /* fused tile: the workspace's, capped at the longest T / S */
    int decode_seqs;      /* sequences that run the decode kernel */
    size_t part_floats;   /* split-KV partials of the decode jobs */
    size_t off_parts;
    size_t off_xq, off_xk, off_xv, off_q, off_k, off_v, off_z, off_out, off_scratch, off_jobs;
    size_t bytes;
} fwd_plan;

/* The key/value inputs of a sequence are its queries: ordinary
 * self-attention, or an append to a KV cache. */
static int keys_from_query(const attn_seq *s)
{
    return s->key == NULL && (s->cache_k == NULL || s->cache_append);
}

/* Rows of K/V this call projects for a sequence: all S without a cache, the T
 * new ones when appending to a cache, none for a fixed cache. */
static int kv_rows(const attn_seq *s)
{
    if (s->cache_k == NULL) return s->s;
    return s->cache_append ? s->t : 0;
}

static int seq_fused(const attn_workspace *ws, const attn_seq *s)
{
    return ws->opt.kernel != ATTN_KERNEL_MATERIALIZED && s->weights_mode == ATTN_WEIGHTS_NONE;
}

/* Fused sequences with few query rows over a cache take the decode kernel. */
static int seq_decode(const attn_workspace *ws, const attn_seq *s)
{
    return seq_fused(ws, s) && attn__decode_applies(s);
}

static int ceil_div(int a, int b) { return a / b + (a % b != 0); }

static uint64_t count_flops(const attn_layer *l, const attn_seq *seqs, int n, size_t n_q,
                            size_t n_kv)
{
    uint64_t f = 2 * (uint64_t)n_q * l->e_q * l->qk_dim + 2 * (uint64_t)n_kv * l->e_k * l->kv_k_dim +
                 2 * (uint64_t)n_kv * l->e_v * l->kv_v_dim;
    for (int i = 0; i < n; i++) /* QKᵀ, αV, and ~5 per score for scale/mask/softmax */
        f += (uint64_t)seqs[i].t * seqs[i].s * l->h * (2u * l->d_k + 2u * l->d_v + 5u);
    if (l->w_o) f += 2 * (uint64_t)n_q * l->v_dim * l->e_out;
    return f;
}

size_t attn__blas_scratch_floats(int r, int t, int s, int d_k, int d_v, int gather)
{
    /* validated: r*t*s fits (h*t*s floats are indexable) */
    size_t rows = (size_t)r * (size_t)t, n = (rows * (size_t)s + 15) / 16 * 16;
    if (r > 1) n += (rows * (size_t)d_k + 15) / 16 * 16 + (rows * (size_t)d_v + 15) / 16 * 16; /* stacked Q, Z */
    if (gather) n += ((size_t)s * (size_t)d_k + 15) / 16 * 16 + (size_t)s * (size_t)d_v; /* K_j, V_j */
    return n;
}

/* Jobs and the head-kernel scratch one worker needs (max over the jobs). */
static attn_status plan_jobs(const attn_layer *l, const attn_seq *seqs, int n,
                             const attn_workspace *ws, fwd_plan *p, attn_error *err)
{
    const int r = l->h / l->g;
    size_t jobs = 0, need = 0;
    int max_t = 1, max_s = 1; /* tiles never larger than the longest sequence */
    for (int i = 0; i < n; i++)
        if (seq_fused(ws, &seqs[i])) {
            if (seqs[i].t > max_t) max_t = seqs[i].t;
            if (seqs[i].s > max_s) max_s = seqs[i].s;
        }
    p->block_q = ws->opt.block_q < max_t ? ws->opt.block_q : max_t;
    p->block_k = ws->opt.block_k < max_s ? ws->opt.block_k : max_s;
    /* r*block_q*block_k <= h * 4096 * 65536 floats: checked below as a size */
    size_t tile;
    if (!attn__mul_size((size_t)r * (size_t)p->block_q, (size_t)p->block_k, &tile) ||
        tile > SIZE_MAX / 64)
        return attn__set_error(err, ATTN_ERR_LIMIT, "fused tile of %d heads x %d x %d overflows", r,
                               p->block_q, p->block_k);
    p->decode_seqs = 0;
    for (int i = 0; i < n; i++) p->decode_seqs += seq_decode(ws, &seqs[i]);
    for (int i = 0; i < n; i++) {
        const int gather = !attn__kv_is_plain(&seqs[i]);
        if (seq_decode(ws, &seqs[i])) {
            int heads, chunks;
            attn__decode_split(l, &seqs[i], p->decode_seqs, ws->opt.n_threads, &heads, &chunks);
            const size_t groups = (size_t)ceil_div(l->g, heads);
            jobs += groups * (size_t)chunks;
            if (chunks > 1) p->part_floats += groups * chunks * attn__decode_part_floats(l, seqs[i].t, heads);
            size_t ds = attn__decode_scratch_floats(l, seqs[i].t, heads);
            if (ds > need) need = ds;
        } else if (seq_fused(ws, &seqs[i])) {
            jobs += (size_t)l->g * (size_t)ceil_div(seqs[i].t, p->block_q);
            size_t fs = attn__fused_scratch_floats(r, p->block_q, p->block_k, l->d_k, l->d_v, 0);
            if (gather) /* room for a converted K and V tile at attn__kv_tile_ld strides */
                fs = attn__fused_scratch_floats(r, p->block_q, p->block_k, attn__kv_tile_ld(l, 0),
                                                attn__kv_tile_ld(l, 1), 1);
            if (fs > need) need = fs;
        } else {
            jobs += seqs[i].weights_mode == ATTN_WEIGHTS_AVERAGE ? 1 : (size_t)l->g;
            size_t ts = attn__blas_scratch_floats(r, seqs[i].t, seqs[i].s, l->d_k, l->d_v, 0);
            if (gather)
                ts += attn__blas_scratch_floats(1, 0, seqs[i].s, attn__kv_tile_ld(l, 0),
                                                attn__kv_tile_ld(l, 1), 1);
            if (ts > need) need = ts;
        }
        if (jobs > INT_MAX)
            return attn__set_error(err, ATTN_ERR_LIMIT, "more than %d head jobs in one call", INT_MAX);
    }
    if (l->rope.style != ATTN_ROPE_NONE && (size_t)l->rope.rotary_dim > need)
        need = (size_t)l->rope.rotary_dim; /* a row's cos/sin, before the heads run */
    p->n_jobs = (int)jobs;
    p->worker_floats = (need + 15) / 16 * 16; /* keep each worker's slice 64-byte aligned */
    return ATTN_OK;
}

static attn_status plan_call(const attn_layer *l, const attn_seq *seqs, int n,
                             const attn_workspace *ws, fwd_plan *p, attn_error *err)
{
    memset(p, 0, sizeof *p);
    int all_self = 1;
    for (int i = 0; i < n; i++) {
        p->n_q += (size_t)seqs[i].t;
        p->n_kv += (size_t)kv_rows(&seqs[i]);
        all_self &= keys_from_query(&seqs[i]);
    }
    attn_status st = plan_jobs(l, seqs, n, ws, p, err);
    if (st != ATTN_OK) return st;
    p->n_workers = 1;
    if (ws->pool != NULL && openblas_get_num_threads() == 1 &&
        (double)count_flops(l, seqs, n, p->n_q, p->n_kv) >= POOL_MIN_FLOPS)
        p->n_workers = attn__pool_threads(ws->pool);
    p->pack_q = n > 1;
    p->pack_kv = n > 1 && !all_self;
    p->out_scratch = l->w_o != NULL && n > 1;
    p->z_in_q = l->w_o != NULL && l->d_k == l->d_v;

    size_t t = 0, f = sizeof(float), scratch;
    int ok = 1;
    if (!attn__mul_size(p->worker_floats, (size_t)p->n_workers, &scratch))
        return attn__set_error(err, ATTN_ERR_LIMIT, "scratch size for this batch overflows");
    if (p->pack_q) ok &= attn__ws_plan(&t, p->n_q, (size_t)l->e_q * f, &p->off_xq);
    if (p->pack_kv) {
        ok &= attn__ws_plan(&t, p->n_kv, (size_t)l->e_k * f, &p->off_xk);
        ok &= attn__ws_plan(&t, p->n_kv, (size_t)l->e_v * f, &p->off_xv);
    }
    ok &= attn__ws_plan(&t, p->n_q, (size_t)l->qk_dim * f, &p->off_q);
    ok &= attn__ws_plan(&t, p->n_kv, (size_t)l->kv_k_dim * f, &p->off_k);
    ok &= attn__ws_plan(&t, p->n_kv, (size_t)l->kv_v_dim * f, &p->off_v);
    if (p->z_in_q) p->off_z = p->off_q;
    else if (l->w_o) ok &= attn__ws_plan(&t, p->n_q, (size_t)l->v_dim * f, &p->off_z);
    if (p->out_scratch) ok &= attn__ws_plan(&t, p->n_q, (size_t)l->e_out * f, &p->off_out);
    ok &= attn__ws_plan(&t, scratch, f, &p->off_scratch);
    ok &= attn__ws_plan(&t, (size_t)p->n_jobs, sizeof(attn__head_job), &p->off_jobs);
    ok &= attn__ws_plan(&t, p->part_floats, f, &p->off_parts);
    if (!ok) return attn__set_error(err, ATTN_ERR_LIMIT, "scratch size for this batch overflows");
    p->bytes = t;
    return ATTN_OK;
}

/* y (rows, n_out; row stride ldy) = x (rows, n_in) Wᵀ + b, W: (n_out, n_in),
 * b: (n_out) or NULL. Like torch's addmm: the bias is C's starting value. */
typedef struct linear_op {
    const float *x, *w, *b;
    size_t rows;
    int n_in, n_out, ldy;
    float *y;
} linear_op;

/* 1 when op has few rows in all (a decode batch): skinny.c computes it, split
 * over output columns, reading W once. */
static int linear_skinny(const linear_op *op) { return op->rows >= 1 && op->rows <= ATTN__SKINNY_MAX; }

/* Columns [o0, o1) of a skinny op. */
static void linear_cols(const linear_op *op, int o0, int o1)
{
    attn__skinny_linear(op->x, (int)op->rows, op->n_in, op->w, op->b, o0, o1, op->y, op->ldy);
}

static void linear_rows(const linear_op *op, size_t r0, size_t nr)
{
    float beta = 0.0f;
    float *y = op->y + r0 * (size_t)op->ldy;
    if (linear_skinny(op)) { /* never a chunk of a longer op: whole ops only */
        linear_cols(op, 0, op->n_out);
        return;
    }
    if (op->b != NULL) {
        for (size_t r = 0; r < nr; r++)
            memcpy(y + r * (size_t)op->ldy, op->b, (size_t)op->n_out * sizeof *op->b);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, op->n_out, op->n_in, 1.0f,
                op->x + r0 * (size_t)op->n_in, op->n_in, op->w, op->n_in, beta, y, op->ldy);
}

/* Row chunks of a threaded projection start at multiples of this: 192 is a
 * multiple of the OpenBLAS sgemm register-tile heights we know of (Haswell's
 * 12 included; splitting at multiples of 64 alone changes some roundings). */
#define ROW_ALIGN ((size_t)192)

/* Up to three linears, each split into row chunks (skinny ones: column
 * chunks), one chunk per pool task. */
typedef struct linear_batch {
    linear_op op[3];
    int n_ops;
    size_t per[3];  /* rows per chunk, a multiple of ROW_ALIGN; skinny: columns, a multiple of 8 */
    int chunks[3];  /* chunks of each op */
} linear_batch;

static void linear_task(void *arg, int task, int worker)
{
    (void)worker;
    const linear_batch *lb = arg;
    int i = 0;
    while (task >= lb->chunks[i]) task -= lb->chunks[i++];
    const linear_op *op = &lb->op[i];
    if (linear_skinny(op)) {
        size_t o0 = (size_t)task * lb->per[i], o1 = o0 + lb->per[i];
        linear_cols(op, (int)o0, o1 < (size_t)op->n_out ? (int)o1 : op->n_out);
        return;
    }
    size_t r0 = (size_t)task * lb->per[i], rows = op->rows;
    linear_rows(op, r0, rows - r0 < lb->per[i] ? rows - r0 : lb->per[i]);
}

/* Runs the linears: one GEMM each on the calling thread, or each split into
 * about 4 chunks per worker (claimed dynamically, so uneven chunks balance)
 * over the pool, with single-threaded OpenBLAS per chunk. Chunks start at
 * multiples of ROW_ALIGN rows: OpenBLAS then computes every row with the same
 * micro-kernel, in the same place of its register tile, as one whole-matrix
 * GEMM does, so results are bit-identical to the single-threaded call
 * (test_threads checks it). */
static void run_linears(linear_batch *lb, const attn_workspace *ws, const fwd_plan *p)
{
    if (p->n_workers == 1) {
        for (int i = 0; i < lb->n_ops; i++)
            if (lb->op[i].rows > 0) linear_rows(&lb->op[i], 0, lb->op[i].rows);
        return;
    }
    int tasks = 0;
    for (int i = 0; i < lb->n_ops; i++) {
        size_t rows = lb->op[i].rows, want = 4 * (size_t)p->n_workers;
        if (rows == 0) { /* K/V of a batch of fixed caches only */
            lb->per[i] = ROW_ALIGN;
            lb->chunks[i] = 0;
            continue;
        }
        if (linear_skinny(&lb->op[i])) { /* columns: each thread streams its share of W */
            size_t cols = (size_t)lb->op[i].n_out, per = (cols + want - 1) / want;
            lb->per[i] = (per + 7) / 8 * 8;
            lb->chunks[i] = (int)((cols + lb->per[i] - 1) / lb->per[i]);
            tasks += lb->chunks[i];
            continue;
        }
        size_t per = (rows + want - 1) / want;
        lb->per[i] = (per + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
        lb->chunks[i] = (int)((rows + lb->per[i] - 1) / lb->per[i]); /* <= 4 * n_workers */
        tasks += lb->chunks[i];
    }
    attn__pool_run(ws->pool, tasks, linear_task, lb);
}

static float *copy_rows(float *dst, const float *src, int rows, int cols)
{
    size_t n = (size_t)rows * (size_t)cols;
    memcpy(dst, src, n * sizeof *dst);
    return dst + n;
}

/* Gathers the inputs into contiguous (rows, width) blocks so each projection
 * is one GEMM; a self-attention sequence's keys and values are its queries
 * (also when appended to a cache); a fixed cache contributes no rows. */
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
            const int from_q = keys_from_query(s), rows = kv_rows(s);
            if (rows == 0) continue; /* a fixed cache: key and value are NULL */
            dk = copy_rows(dk, from_q ? s->query : s->key, rows, l->e_k);
            dv = copy_rows(dv, from_q ? s->query : s->value, rows, l->e_v);
        }
    }
}

/* Q = Xq W_qᵀ + b_q, K = Xk W_kᵀ + b_k, V = Xv W_vᵀ + b_v over the whole batch. */
static void project_qkv(const attn_layer *l, const attn_seq *seqs, const attn_workspace *ws,
                        const fwd_plan *p, char *base)
{
    const float *xq = p->pack_q ? (const float *)(base + p->off_xq) : seqs[0].query;
    const float *xk = xq, *xv = xq; /* all self-attention */
    if (p->pack_kv) {
        xk = (const float *)(base + p->off_xk);
        xv = (const float *)(base + p->off_xv);
    } else if (!p->pack_q && !keys_from_query(&seqs[0])) {
        xk = seqs[0].key; /* NULL, with no rows, for a fixed cache */
        xv = seqs[0].value;
    }
    linear_batch lb = {.n_ops = 3};
    lb.op[0] = (linear_op){xq, l->w_q, l->b_q, p->n_q, l->e_q, l->qk_dim, l->qk_dim,
                           (float *)(base + p->off_q)};
    lb.op[1] = (linear_op){xk, l->w_k, l->b_k, p->n_kv, l->e_k, l->kv_k_dim, l->kv_k_dim,
                           (float *)(base + p->off_k)};
    lb.op[2] = (linear_op){xv, l->w_v, l->b_v, p->n_kv, l->e_v, l->kv_v_dim, l->kv_v_dim,
                           (float *)(base + p->off_v)};
    run_linears(&lb, ws, p);
}

/* RoPE: every query row's h heads and the matching key row's g heads rotated
 * at the row's position (position_ids[i], or attn__mask_query_pos: i, or
 * cache_len + i when appending). Validation guarantees that on a rotary layer
 * every sequence's keys are its queries (kv_rows == t), so K row r of the
 * batch belongs to query row r. Rows are split into chunks over the pool;
 * each row's result depends on that row only, so threads change no bit. */
typedef struct rope_run {
    const attn_layer *l;
    const attn_seq *seqs;
    float *q, *k;
    float *scratch;        /* per worker: worker_floats >= rotary_dim */
    size_t worker_floats;
    size_t n_rows, per;    /* rows in all; rows per task */
} rope_run;

static void rope_rows(const rope_run *rr, size_t r0, size_t r1, float *cs)
{
    const attn_layer *l = rr->l;
    const int half = l->rope.rotary_dim / 2;
    size_t start = 0;
    int i = 0;
    while (start + (size_t)rr->seqs[i].t <= r0) start += (size_t)rr->seqs[i++].t;
    for (size_t r = r0; r < r1; r++) {
        while (r >= start + (size_t)rr->seqs[i].t) start += (size_t)rr->seqs[i++].t;
        const attn_seq *s = &rr->seqs[i];
        const int j = (int)(r - start);
        const int64_t pos = s->position_ids ? s->position_ids[j] : (int64_t)attn__mask_query_pos(s, j);
        attn__rope_cos_sin(l->inv_freq, half, pos, cs);
        attn__rope_rotate(l->rope.style, l->rope.rotary_dim, cs, rr->q + r * (size_t)l->qk_dim, l->h, l->d_k);
        attn__rope_rotate(l->rope.style, l->rope.rotary_dim, cs, rr->k + r * (size_t)l->kv_k_dim, l->g,
                          l->d_k);
    }
}

static void rope_task(void *arg, int task, int worker)
{
    const rope_run *rr = arg;
    size_t r0 = (size_t)task * rr->per, r1 = r0 + rr->per < rr->n_rows ? r0 + rr->per : rr->n_rows;
    rope_rows(rr, r0, r1, rr->scratch + (size_t)worker * rr->worker_floats);
}

static void apply_rope(const attn_layer *l, const attn_seq *seqs, const attn_workspace *ws,
                       const fwd_plan *p, char *base)
{
    if (l->rope.style == ATTN_ROPE_NONE) return;
    rope_run rr = {l, seqs, (float *)(base + p->off_q), (float *)(base + p->off_k),
                   (float *)(base + p->off_scratch), p->worker_floats, p->n_q, p->n_q};
    if (p->n_workers == 1 || p->n_q < 2) {
        rope_rows(&rr, 0, p->n_q, rr.scratch);
        return;
    }
    const size_t want = 4 * (size_t)p->n_workers;
    rr.per = (p->n_q + want - 1) / want;
    attn__pool_run(ws->pool, (int)((p->n_q + rr.per - 1) / rr.per), rope_task, &rr);
}

/* Copies each appending sequence's projected K/V rows to rows [cache_len,
 * cache_len + T) of its cache, where the head kernels then read them. Runs
 * after every check and allocation of the call, so a failed call never gets
 * here; nothing after it can fail. */
static void store_cache_rows(const attn_layer *l, const attn_seq *seqs, int n, const fwd_plan *p,
                             char *base)
{
    const float *k = (const float *)(base + p->off_k), *v = (const float *)(base + p->off_v);
    for (int i = 0; i < n; i++) {
        const attn_seq *s = &seqs[i];
        const size_t rows = (size_t)kv_rows(s);
        if (s->cache_k != NULL && rows > 0 && attn__kv_is_plain(s)) {
            memcpy(s->cache_k + (size_t)s->cache_len * l->kv_k_dim, k, rows * l->kv_k_dim * sizeof *k);
            memcpy(s->cache_v + (size_t)s->cache_len * l->kv_v_dim, v, rows * l->kv_v_dim * sizeof *v);
        } else if (s->cache_k != NULL && rows > 0) { /* paged and/or converted */
            attn__kv kv;
            attn__kv_from_seq(l, s, &kv);
            attn__kv_write(l, &kv, s->cache_len, (int)rows, k, v);
        }
        k += rows * l->kv_k_dim;
        v += rows * l->kv_v_dim;
    }
}

/* Fused sequences: one job per (KV head, block of block_q query rows); the
 * materialised ones: one per KV head, or one for all heads when AVERAGE
 * weights are summed across heads. A job computes every query head of its
 * KV head's group. Without W_O heads write straight into their columns of the
 * caller's output; with W_O into the concat Z. */
/* A decode sequence (index i): one job per (group of KV heads, key chunk),
 * as attn__decode_split cuts it; returns how many. */
static int make_decode_jobs(const attn_layer *l, const attn_seq *s, int i, int q_row, float *zs, int n_seqs,
                            int n_threads, float **part, attn__head_job *jobs)
{
    int heads, chunks, j = 0;
    attn__decode_split(l, s, n_seqs, n_threads, &heads, &chunks);
    for (int g = 0; g < l->g; g += heads) {
        const int nh = l->g - g < heads ? l->g - g : heads;
        const size_t pf = attn__decode_part_floats(l, s->t, nh);
        for (int c = 0; c < chunks; c++, j++)
            jobs[j] = (attn__head_job){.kernel = attn__head_decode, .seq = i, .kv_head = g, .n_kv_heads = 1,
                                       .heads = nh, .t0 = 0, .nt = s->t, .q_row = q_row, .k = s->cache_k,
                                       .v = s->cache_v, .z = zs, .ldz = l->v_dim, .chunk = c, .n_chunks = chunks,
                                       .part = chunks > 1 ? *part + (size_t)c * pf : NULL,
                                       .cost = (double)s->t * s->s * nh * (l->h / l->g) / chunks};
        if (chunks > 1) *part += (size_t)chunks * pf;
    }
    return j;
}

static void make_jobs(const attn_layer *l, const attn_seq *seqs, int n, const attn_workspace *ws,
                      const fwd_plan *p, char *base, attn__head_job *jobs)
{
    float *part = (float *)(base + p->off_parts);
    float *z = l->w_o ? (float *)(base + p->off_z) : NULL;
    const float *k = (const float *)(base + p->off_k), *v = (const float *)(base + p->off_v);
    const int bq = p->block_q;
    int q_row = 0, j = 0;
    for (int i = 0; i < n; i++) {
        const attn_seq *s = &seqs[i];
        const int fused = seq_fused(ws, s), avg = s->weights_mode == ATTN_WEIGHTS_AVERAGE;
        const int pos0 = attn__mask_query_pos(s, 0);
        float *zs = z ? z + (size_t)q_row * l->v_dim : s->output;
        const float *ks = s->cache_k ? s->cache_k : k, *vs = s->cache_v ? s->cache_v : v;
        const int decode = seq_decode(ws, s), n_g = decode ? 0 : l->g; /* decode: its own jobs */
        if (decode)
            j += make_decode_jobs(l, s, i, q_row, zs, p->decode_seqs, ws->opt.n_threads, &part, jobs + j);
        for (int g = 0; g < n_g; g += avg && !fused ? l->g : 1) {
            for (int t0 = 0; t0 < s->t; t0 += fused ? bq : s->t, j++) {
                attn__head_job *jb = &jobs[j];
                jb->kernel = fused ? attn__head_fused : attn__head_blas;
                jb->seq = i;
                jb->kv_head = g;
                jb->n_kv_heads = avg && !fused ? l->g : 1;
                jb->t0 = t0;
                jb->nt = fused && s->t - t0 > bq ? bq : s->t - t0;
                jb->q_row = q_row;
                jb->k = ks;
                jb->v = vs;
                jb->z = zs;
                jb->ldz = l->v_dim;
                /* causal query blocks see only keys up to their last row */
                int last = pos0 + t0 + jb->nt, keys = s->is_causal && last < s->s ? last : s->s;
                jb->cost = (double)jb->nt * keys * jb->n_kv_heads * (l->h / l->g);
            }
        }
        q_row += s->t;
        k += (size_t)kv_rows(s) * l->kv_k_dim;
        v += (size_t)kv_rows(s) * l->kv_v_dim;
    }
}

static int by_cost_desc(const void *a, const void *b)
{
    double ca = ((const attn__head_job *)a)->cost, cb = ((const attn__head_job *)b)->cost;
    return (ca < cb) - (ca > cb);
}

static size_t weights_len(const attn_layer *l, const attn_seq *s)
{
    size_t n = (size_t)s->t * (size_t)s->s;
    return s->weights_mode == ATTN_WEIGHTS_PER_HEAD ? n * (size_t)l->h : n;
}

typedef struct heads_run {
    const attn__fwd_ctx *ctx;
    const attn__head_job *jobs;
    float *scratch;       /* n_workers slices of worker_floats */
    size_t worker_floats;
} heads_run;

static void run_job(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch)
{
    attn__head_job one = *job;
    for (int i = 0; i < job->n_kv_heads; i++, one.kv_head++) job->kernel(ctx, &one, scratch);
}

static void head_task(void *arg, int task, int worker)
{
    const heads_run *hr = arg;
    run_job(hr->ctx, &hr->jobs[task], hr->scratch + (size_t)worker * hr->worker_floats);
}

/* Runs every job: in order on the calling thread, or over the pool (largest
 * first). Each job's result does not depend on which thread ran it. */
static void run_heads(const attn__fwd_ctx *ctx, attn__head_job *jobs, const attn_workspace *ws,
                      const fwd_plan *p, char *base, int n_seqs)
{
    const attn_layer *l = ctx->layer;
    for (int i = 0; i < n_seqs; i++)
        if (ctx->seqs[i].weights_mode == ATTN_WEIGHTS_AVERAGE)
            memset(ctx->seqs[i].weights, 0, weights_len(l, &ctx->seqs[i]) * sizeof(float));
    heads_run hr = {ctx, jobs, (float *)(base + p->off_scratch), p->worker_floats};
    if (p->n_workers == 1) {
        for (int j = 0; j < p->n_jobs; j++) run_job(ctx, &jobs[j], hr.scratch);
    } else {
        qsort(jobs, (size_t)p->n_jobs, sizeof *jobs, by_cost_desc);
        attn__pool_run(ws->pool, p->n_jobs, head_task, &hr);
    }
    attn__decode_merge(ctx, jobs, p->n_jobs);
    for (int i = 0; i < n_seqs; i++) {
        if (ctx->seqs[i].weights_mode != ATTN_WEIGHTS_AVERAGE) continue;
        float *w = ctx->seqs[i].weights, hf = (float)l->h;
        size_t len = weights_len(l, &ctx->seqs[i]);
        for (size_t k = 0; k < len; k++) w[k] /= hf; /* torch: mean = sum / h */
    }
}

/* out = Z W_oᵀ + b_o for all rows; then each sequence's rows to its output. */
static void project_out(const attn_layer *l, const attn_seq *seqs, int n,
                        const attn_workspace *ws, const fwd_plan *p, char *base)
{
    if (l->w_o == NULL) return; /* heads already wrote the outputs */
    const float *z = (const float *)(base + p->off_z);
    float *o = p->out_scratch ? (float *)(base + p->off_out) : seqs[0].output;
    linear_batch lb = {.n_ops = 1};
    lb.op[0] = (linear_op){z, l->w_o, l->b_o, p->n_q, l->v_dim, l->e_out, l->e_out, o};
    run_linears(&lb, ws, p);
    if (!p->out_scratch) return;
    for (int i = 0; i < n; i++) {
        size_t len = (size_t)seqs[i].t * (size_t)l->e_out;
        memcpy(seqs[i].output, o, len * sizeof *o);
        o += len;
    }
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
    attn_workspace local;
    attn_workspace *w = ws;
    if (w == NULL) { /* scratch for this call only, single-threaded, default options */
        attn__ws_init_local(&local);
        w = &local;
    }
    fwd_plan plan;
    if ((st = plan_call(layer, seqs, n_seqs, w, &plan, err))) goto done;
    if ((st = attn__ws_reserve(w, plan.bytes, err))) goto done;
    char *base = w->buf;

    pack_inputs(layer, seqs, n_seqs, &plan, base);
    project_qkv(layer, seqs, w, &plan, base);
    apply_rope(layer, seqs, w, &plan, base);
    store_cache_rows(layer, seqs, n_seqs, &plan, base);
    attn__fwd_ctx ctx = {
        .layer = layer, .seqs = seqs,
        .q = (const float *)(base + plan.off_q), .ldq = layer->qk_dim,
        .ldk = layer->kv_k_dim, .ldv = layer->kv_v_dim,
        .scale = (float)(1.0 / sqrt((double)layer->d_k)),
        .block_q = plan.block_q, .block_k = plan.block_k,
    };
    attn__head_job *jobs = (attn__head_job *)(base + plan.off_jobs);
    make_jobs(layer, seqs, n_seqs, w, &plan, base, jobs);
    run_heads(&ctx, jobs, w, &plan, base, n_seqs);
    project_out(layer, seqs, n_seqs, w, &plan, base);
    if (stats != NULL) {
        stats->flops = count_flops(layer, seqs, n_seqs, plan.n_q, plan.n_kv);
        stats->peak_scratch = plan.bytes;
    }

done:
    if (w == &local) free(local.buf);
    return st;
}

/* Shapes (KV head j = job->kv_head, query heads h0 = j*r .. h0+r-1): q (T,
 * d_k) per head, stride ldq; k (S, d_k) stride ldk = g*d_k; v (S, d_v) stride
 * ldv = g*d_v; z (T, d_v) per head, stride job->ldz. The group's queries are
 * stacked (row hh*T + t is query t of head h0 + hh; one head: Q in place), so
 * scores (r*T, S) come from one GEMM over K_j and the mixtures (r*T, d_v)
 * from one GEMM over V_j. Scratch: attn__blas_scratch_floats. */
void attn__head_blas(const attn__fwd_ctx *ctx, const attn__head_job *job, float *scratch)
{
    const attn_layer *l = ctx->layer;
    const attn_seq *s = &ctx->seqs[job->seq];
    const int T = s->t, S = s->s, r = l->h / l->g, kvh = job->kv_head, h0 = kvh * r;
    const int rows = r * T, dk = l->d_k, dv = l->d_v;
    const size_t ts = (size_t)T * (size_t)S;
    const float *k, *v;
    int ldk = ctx->ldk, ldv = ctx->ldv;
    float *z0 = job->z + (size_t)h0 * dv;
    if (attn__kv_is_plain(s)) {
        k = job->k + (size_t)kvh * dk;
        v = job->v + (size_t)kvh * dv;
    } else { /* paged / compact cache: K_j and V_j converted after the kernel's own scratch */
        float *kb = scratch + attn__blas_scratch_floats(r, T, S, dk, dv, 0);
        attn__kv kv;
        attn__kv_from_seq(l, s, &kv);
        k = attn__kv_rows(l, &kv, 0, kvh, 0, S, kb, &ldk);
        v = attn__kv_rows(l, &kv, 1, kvh, 0, S, kb + ((size_t)S * attn__kv_tile_ld(l, 0) + 15) / 16 * 16, &ldv);
    }
    const float *qs = ctx->q + (size_t)job->q_row * ctx->ldq + (size_t)h0 * dk;
    int ldqs = ctx->ldq, ldzs = job->ldz;
    float *zs = z0;
    if (r > 1) { /* stack the group's queries; mixtures go to scratch, then to z */
        float *qb = scratch + (ts * (size_t)r + 15) / 16 * 16;
        for (int hh = 0; hh < r; hh++)
            for (int t = 0; t < T; t++)
                memcpy(qb + ((size_t)hh * T + t) * dk, qs + (size_t)t * ctx->ldq + (size_t)hh * dk,
                       (size_t)dk * sizeof *qb);
        qs = qb;
        ldqs = dk;
        zs = qb + ((size_t)rows * dk + 15) / 16 * 16;
        ldzs = dv;
    }

    /* scores = float_mask + scale * Q_h K_jᵀ (torch: baddbmm(mask, q/√d_k, kᵀ)) */
    const int has_fmask = s->attn_mask_kind == ATTN_MASK_FLOAT;
    if (has_fmask)
        for (int hh = 0; hh < r; hh++)
            memcpy(scratch + (size_t)hh * ts, attn__mask_float_plane(s, h0 + hh), ts * sizeof *scratch);
    else if (rows == 1) memset(scratch, 0, ts * sizeof *scratch); /* see linear_rows on GEMV */
    if (rows == 1) /* one query (a streamed token): GEMV, several times faster than a 1-row GEMM */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, S, dk, ctx->scale, k, ldk, qs, 1, 1.0f,
                    scratch, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, S, dk, ctx->scale, qs, ldqs,
                    k, ldk, has_fmask ? 1.0f : 0.0f, scratch, S);

    for (int hh = 0; hh < r; hh++) {
        const uint8_t *bmask = attn__mask_bool_plane(s, h0 + hh);
        for (int t = 0; t < T; t++) {
            float *row = scratch + ((size_t)hh * T + t) * S;
            int lo, hi;
            attn__mask_row_range(s, t, &lo, &hi);
            attn__mask_block_row(s, bmask, t, lo, hi, row);
            attn__softmax_row(row, S, lo, hi);
        }
    }

    if (rows == 1) {
        memset(zs, 0, (size_t)dv * sizeof *zs);
        cblas_sgemv(CblasRowMajor, CblasTrans, S, dv, 1.0f, v, ldv, scratch, 1, 1.0f, zs, 1);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, dv, S, 1.0f, scratch, S, v,
                    ldv, 0.0f, zs, ldzs);
    }
    if (r > 1)
        for (int hh = 0; hh < r; hh++)
            for (int t = 0; t < T; t++)
                memcpy(z0 + (size_t)t * job->ldz + (size_t)hh * dv, zs + ((size_t)hh * T + t) * dv,
                       (size_t)dv * sizeof *zs);

    if (s->weights_mode == ATTN_WEIGHTS_PER_HEAD) {
        memcpy(s->weights + (size_t)h0 * ts, scratch, (size_t)r * ts * sizeof *scratch);
    } else if (s->weights_mode == ATTN_WEIGHTS_AVERAGE) {
        for (int hh = 0; hh < r; hh++) {
            const float *sp = scratch + (size_t)hh * ts;
            for (size_t i = 0; i < ts; i++) s->weights[i] += sp[i];
        }
    }
}

attn_status attn_project_kv(const attn_layer *layer, const float *key, const float *value,
                            int s, float *k_out, float *v_out, attn_error *err)
{
    attn_status st = attn__validate_project_kv(layer, key, value, s, k_out, v_out, err);
    if (st != ATTN_OK) return st;
    /* The very GEMMs attn_forward runs for a lone cross-attention sequence. */
    const attn_layer *l = layer;
    linear_op k = {key, l->w_k, l->b_k, (size_t)s, l->e_k, l->kv_k_dim, l->kv_k_dim, k_out};
    linear_op v = {value, l->w_v, l->b_v, (size_t)s, l->e_v, l->kv_v_dim, l->kv_v_dim, v_out};
    linear_rows(&k, 0, k.rows);
    linear_rows(&v, 0, v.rows);
    return ATTN_OK;
}

attn_status attn__forward_kv_bytes(const attn_layer *layer, const attn_seq *seqs, int n_seqs,
                                   attn_workspace *ws, uint64_t *bytes, attn_error *err)
{
    attn_status st = attn__validate_forward(layer, seqs, n_seqs, err);
    if (st != ATTN_OK) return st;
    *bytes = 0;
    if (n_seqs == 0) return ATTN_OK;
    attn_workspace local;
    attn_workspace *w = ws;
    if (w == NULL) {
        attn__ws_init_local(&local);
        w = &local;
    }
    fwd_plan plan;
    if ((st = plan_call(layer, seqs, n_seqs, w, &plan, err))) goto done;
    if ((st = attn__ws_reserve(w, plan.bytes, err))) goto done;
    attn__head_job *jobs = (attn__head_job *)((char *)w->buf + plan.off_jobs);
    make_jobs(layer, seqs, n_seqs, w, &plan, w->buf, jobs);
    for (int j = 0; j < plan.n_jobs; j++) {
        const attn__head_job *jb = &jobs[j];
        const attn_seq *s = &seqs[jb->seq];
        /* the cache's element size (INT8's per-block scales not counted) */
        const int dt = s->cache_k ? s->cache_dtype : ATTN_KV_F32;
        const uint64_t row_bytes = (uint64_t)(layer->d_k + layer->d_v) *
                                   (dt == ATTN_KV_F32 ? 4u : dt == ATTN_KV_INT8 ? 1u : 2u);
        int rows = s->s; /* the materialised kernel reads all S keys */
        if (jb->kernel == attn__head_decode) {
            int lo, hi;
            attn__decode_keys(s, jb, &lo, &hi);
            rows = (hi > lo ? hi - lo : 0) * jb->heads;
        } else if (jb->kernel == attn__head_fused) { /* only the key range the block can see */
            int klo = s->s, khi = 0;
            for (int t = jb->t0; t < jb->t0 + jb->nt; t++) {
                int lo, hi;
                attn__mask_row_range(s, t, &lo, &hi);
                if (hi <= lo) continue;
                if (lo < klo) klo = lo;
                if (hi > khi) khi = hi;
            }
            rows = khi > klo ? khi - klo : 0;
        }
        *bytes += (uint64_t)rows * (uint64_t)jb->n_kv_heads * row_bytes;
    }

done:
    if (w == &local) free(local.buf);
    return st;
}
