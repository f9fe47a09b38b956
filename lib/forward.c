/* forward.c — attn_forward on OpenBLAS: validate, project Q/K/V for the whole
 * ragged batch with one GEMM each (K and V g heads wide), rotate Q and K at
 * their positions (RoPE layers), store appended rows into KV caches, run the
 * head jobs (fused or materialised kernel, one per KV head and query block;
 * on the calling thread or the workspace's pool), then apply W_O with one
 * GEMM. A call whose plan would exceed the workspace's scratch bound runs in
 * pieces of sequences that fit, and a sequence too long for any runs the
 * streamed plan (passes over a few KV heads, query rows in chunks, W_O added
 * per pass). Numerics follow torch.nn.MultiheadAttention and, for GQA and
 * RoPE, Hugging Face's Llama attention. Also attn_project_kv, the same K/V
 * projection on its own.
 */
#include "forward.h"

#include "decode.h"
#include "half.h"
#include "kvcache.h"
#include "skinny.h"
#include "smallgemm.h"
#include "mask.h"
#include "pool.h"
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

/* The fused tile's query rows for sequences of at most max_t queries and
 * max_s keys: the workspace's block_q; by default (the caller left it 0) twice
 * that over 4096 keys or more on an MHA layer, so every K/V tile, read from
 * DRAM at such lengths, serves twice the queries (bench_core, T = 8192:
 * 1333 / 1510 ms against 1651 / 1792 ms, paired runs). GQA groups already
 * stack h/g heads' rows. */
static int query_block(const attn_workspace *ws, const attn_layer *l, int max_t, int max_s)
{
    int bq = ws->opt.block_q;
    if (ws->block_q_auto && max_s >= ATTN__LONG_KEYS && l->h == l->g) bq *= 2;
    return bq < max_t ? bq : max_t;
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
    p->block_q = query_block(ws, l, max_t, max_s);
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

static size_t wide_floats(const attn_layer *l);

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
    if ((p->n_q > ATTN__SKINNY_MAX || p->n_kv > ATTN__SKINNY_MAX) && wide_floats(l) > p->worker_floats)
        p->worker_floats = wide_floats(l); /* F16/BF16 weights: tiles widened for the GEMMs */
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
 * b: (n_out) or NULL. Like torch's addmm: the bias is C's starting value.
 * ldw: W's row stride (0 = n_in; the streamed plan's slice of W_O's columns);
 * add = 1: y += x Wᵀ (y's values are C's starting value, b must be NULL).
 * wdtype: W's element type (the layer's; 0 = F32): F16 / BF16 weights are read
 * as stored by the skinny kernel, else widened a tile (wide_cols rows of W)
 * at a time into a worker's scratch for the GEMM. */
typedef struct linear_op {
    const float *x;
    const void *w;
    const float *b;
    size_t rows;
    int n_in, n_out, ldy;
    float *y;
    int ldw, add;
    int wdtype;
} linear_op;

/* Floats a widened tile of W may take: with n_in = 2048, 128 rows (1 MiB). */
#define WIDE_FLOATS ((size_t)1 << 18)

static int op_half(const linear_op *op) { return op->wdtype == ATTN_WDTYPE_F16 || op->wdtype == ATTN_WDTYPE_BF16; }

/* Rows of W per widened tile: a multiple of 16 (at least 16) of about
 * WIDE_FLOATS floats; depends on the shape only, so a call's tiles, and so its
 * GEMMs, are the same on any number of threads. */
static int wide_cols(const linear_op *op)
{
    size_t c = WIDE_FLOATS / (size_t)op->n_in / 16 * 16;
    if (c < 16) c = 16;
    return c < (size_t)op->n_out ? (int)c : op->n_out;
}

/* Scratch floats one worker needs to widen any tile of l's weights (0: F32). */
static size_t wide_floats(const attn_layer *l)
{
    if (l->wdtype == ATTN_WDTYPE_F32) return 0;
    int n_in = l->e_q;
    if (l->e_k > n_in) n_in = l->e_k;
    if (l->e_v > n_in) n_in = l->e_v;
    if (l->v_dim > n_in) n_in = l->v_dim;
    size_t f = 16 * (size_t)n_in; /* validated: fits */
    return f > WIDE_FLOATS ? f : WIDE_FLOATS;
}

/* 1 when op has few rows in all (a decode batch): skinny.c computes it, split
 * over output columns, reading W once. Only for whole, overwriting W. */
static int linear_skinny(const linear_op *op)
{
    return op->rows >= 1 && op->rows <= ATTN__SKINNY_MAX && op->ldw == 0 && !op->add;
}

/* 1 when op (rows above the skinny bound) runs on smallgemm.c, which
 * computes it without sgemm: float32 weights directly, F16 / BF16 ones after
 * widening (linear_wide), so both give the same bits. Narrow ops (inputs up
 * to ATTN__SMALL_IN: short requests alone or batched) wherever the CPU has
 * AVX2; wider ones where smallgemm is the faster kernel (AVX-512) and
 * OpenBLAS runs single-threaded (threaded OpenBLAS takes the call's GEMMs
 * on all cores: attn_workspace_options). Whole, overwriting ops only. */
static int linear_small(const linear_op *op)
{
    if (op->rows <= ATTN__SKINNY_MAX || op->ldw != 0 || op->add) return 0;
    if (op->n_in <= ATTN__SMALL_IN) return attn__small_available();
    return attn__small_applies(op->n_in) && openblas_get_num_threads() == 1;
}

/* Columns [o0, o1) of a skinny op. */
static void linear_cols(const linear_op *op, int o0, int o1)
{
    attn__skinny_linear(op->x, (int)op->rows, op->n_in, op->w, op->wdtype, op->b, o0, o1, op->y, op->ldy);
}

/* Columns [o0, o1) of op, all rows, by one sgemm over w_cols: W's rows o0..o1
 * as float32 (ldw apart), and the bias of those columns. o0 on a multiple of
 * 16 (see COL_ALIGN) computes each output as the whole op's GEMM does. */
static void gemm_cols(const linear_op *op, int o0, int o1, const float *w_cols, size_t ldw)
{
    const size_t nc = (size_t)(o1 - o0);
    float beta = op->add ? 1.0f : 0.0f;
    float *y = op->y + o0;
    if (op->b != NULL) {
        for (size_t r = 0; r < op->rows; r++) memcpy(y + r * (size_t)op->ldy, op->b + o0, nc * sizeof *op->b);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)op->rows, (int)nc, op->n_in, 1.0f, op->x,
                op->n_in, w_cols, (int)ldw, beta, y, op->ldy);
}

/* Columns [o0, o1) of an F16 / BF16 op, all rows: W's rows o0..o1 widened
 * into wide, then the GEMM a float32 W would run on them. */
static void linear_wide(const linear_op *op, int o0, int o1, float *wide)
{
    const size_t ldw = op->ldw ? (size_t)op->ldw : (size_t)op->n_in, nc = (size_t)(o1 - o0);
    attn__widen_rows(wide, (const uint16_t *)op->w + (size_t)o0 * ldw, op->wdtype, nc, (size_t)op->n_in, ldw);
    if (linear_small(op)) {
        attn__small_linear(op->x, (int)op->rows, op->n_in, wide, op->b ? op->b + o0 : NULL, (int)nc, op->y + o0,
                           op->ldy);
        return;
    }
    gemm_cols(op, o0, o1, wide, (size_t)op->n_in);
}

/* wide: one worker's widening scratch (F16 / BF16 ops that are not skinny). */
static void linear_rows(const linear_op *op, size_t r0, size_t nr, float *wide)
{
    float beta = op->add ? 1.0f : 0.0f;
    float *y = op->y + r0 * (size_t)op->ldy;
    if (linear_skinny(op)) { /* never a chunk of a longer op: whole ops only */
        linear_cols(op, 0, op->n_out);
        return;
    }
    if (!op_half(op) && linear_small(op)) { /* half: in linear_wide */
        attn__small_linear(op->x + r0 * (size_t)op->n_in, (int)nr, op->n_in, op->w, op->b, op->n_out, y, op->ldy);
        return;
    }
    if (op_half(op)) { /* whole ops only, tile by tile as run_linears splits them */
        const int per = wide_cols(op);
        for (int o0 = 0; o0 < op->n_out; o0 += per)
            linear_wide(op, o0, op->n_out - o0 < per ? op->n_out : o0 + per, wide);
        return;
    }
    if (op->b != NULL) {
        for (size_t r = 0; r < nr; r++)
            memcpy(y + r * (size_t)op->ldy, op->b, (size_t)op->n_out * sizeof *op->b);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, op->n_out, op->n_in, 1.0f,
                op->x + r0 * (size_t)op->n_in, op->n_in, op->w, op->ldw ? op->ldw : op->n_in, beta, y,
                op->ldy);
}

/* Row chunks of a threaded projection start at multiples of ROW_ALIGN: 192 is
 * a multiple of the OpenBLAS sgemm register-tile heights we know of (Haswell's
 * 12 included; splitting at multiples of 64 alone changes some roundings).
 *
 * Alignment is not enough: OpenBLAS built with SMALL_MATRIX_OPT (every x86_64
 * build, Debian's 0.3.21 too) hands a call its small-matrix permit accepts to
 * a separate kernel that rounds differently, and the permit looks at the
 * call's M, N, K. Our calls are column-major TN with M = n_out, N = rows,
 * K = n_in; 0.3.21's SkylakeX permit (also Cooperlake's, which AVX-512 Zen
 * auto-detects as) takes them when M*N <= 1200 and K >= 32, so a tail chunk
 * of a few rows took it while the same rows of the whole GEMM did not. Every
 * permit up to 0.3.28 (SkylakeX, POWER10, ARM SVE) refuses M*N*K > 100^3, so
 * each chunk of a split op does more multiply-adds than SMALL_GEMM_MNK: an
 * op with no more is not split, chunks are made taller until they exceed it,
 * and a tail that does not joins the chunk before it. Ops with n_out*n_in
 * over 100^3 split exactly as by alignment alone (bench_core's shapes all do:
 * 512 x 512 moves only a tail of at most 3 rows). */
#define ROW_ALIGN ((size_t)192)
/* Column chunks (ops of too few rows for row chunks) start at multiples of
 * COL_ALIGN columns of W: in OpenBLAS's column-major view those are rows of
 * the M dimension, along which its register tiles run (16 on the AVX2 and
 * AVX-512 kernels), so every output falls in the same place of the same tile
 * as in the whole GEMM, and K (n_in) is not split: the same FMA chain. The
 * F16 / BF16 tiles (wide_cols, multiples of 16) rely on this too, and
 * test_weights_dtype checks their bits against float32 layers. That holds
 * for OpenBLAS's AVX-512 kernels only: attn__col_split_exact asks the kernel
 * in use, and where it says no, float32 ops are not split by columns (their
 * threads then give one thread's bits; a kept-half layer's tiles equal its
 * float32 twin to rounding only). */
#define COL_ALIGN ((size_t)64)
#define SMALL_GEMM_MNK (100.0 * 100.0 * 100.0)

/* Up to three linears, each split into row chunks (skinny ones: column
 * chunks), one chunk per pool task. */
typedef struct linear_batch {
    linear_op op[3];
    int n_ops;
    size_t per[3];  /* rows per chunk, a multiple of ROW_ALIGN (the last one takes the rest);
                       skinny: columns, a multiple of 8 */
    int chunks[3];  /* chunks of each op */
    int by_cols[3]; /* a float32 op of too few rows to split: split by columns instead */
    float *wide;    /* F16 / BF16 weights: wide_floats of widening scratch per worker */
    size_t wide_floats;
} linear_batch;

static void linear_task(void *arg, int task, int worker)
{
    const linear_batch *lb = arg;
    int i = 0;
    while (task >= lb->chunks[i]) task -= lb->chunks[i++];
    const linear_op *op = &lb->op[i];
    if (lb->by_cols[i]) {
        const size_t o0 = (size_t)task * lb->per[i]; /* the last chunk takes the rest */
        const size_t o1 = task == lb->chunks[i] - 1 ? (size_t)op->n_out : o0 + lb->per[i];
        const size_t ldw = op->ldw ? (size_t)op->ldw : (size_t)op->n_in;
        gemm_cols(op, (int)o0, (int)o1, (const float *)op->w + o0 * ldw, ldw);
        return;
    }
    if (linear_skinny(op) || op_half(op)) {
        size_t o0 = (size_t)task * lb->per[i], o1 = o0 + lb->per[i];
        o1 = o1 < (size_t)op->n_out ? o1 : (size_t)op->n_out;
        if (linear_skinny(op)) linear_cols(op, (int)o0, (int)o1);
        else linear_wide(op, (int)o0, (int)o1, lb->wide + (size_t)worker * lb->wide_floats);
        return;
    }
    size_t r0 = (size_t)task * lb->per[i];
    linear_rows(op, r0, task == lb->chunks[i] - 1 ? op->rows - r0 : lb->per[i], NULL);
}

/* Chunks of `total` units (rows, or columns of W) for about `want` tasks:
 * *per units each, a multiple of align, each chunk over SMALL_GEMM_MNK
 * multiply-adds at macs per unit, a short last one joining the one before (the
 * last chunk takes the rest). Returns the number of chunks. */
static size_t split_units(size_t total, size_t want, size_t align, double macs, size_t *per)
{
    size_t p = (total + want - 1) / want;
    p = (p + align - 1) / align * align;
    while ((double)p * macs <= SMALL_GEMM_MNK && p < total) p += align;
    size_t chunks = (total + p - 1) / p;
    if (chunks > 1 && (double)(total - (chunks - 1) * p) * macs <= SMALL_GEMM_MNK) chunks--;
    *per = p;
    return chunks;
}

/* A fixed pseudo-random fill in [-1, 1) (the probe's inputs). */
static void probe_fill(float *v, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = (float)(seed >> 8) * (1.0f / 8388608.0f) - 1.0f;
    }
}

/* One probe: y = x Wᵀ (rows x n_in by n_out x n_in) whole, and again in
 * column chunks of `per`; 1 when every bit agrees. */
static int probe_cols(int rows, int n_in, int n_out, int per, float *buf)
{
    float *x = buf, *w = x + (size_t)rows * n_in, *whole = w + (size_t)n_out * n_in,
          *split = whole + (size_t)rows * n_out;
    probe_fill(x, (size_t)rows * n_in, 1u);
    probe_fill(w, (size_t)n_out * n_in, 2u);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n_out, n_in, 1.0f, x, n_in, w, n_in, 0.0f, whole,
                n_out);
    for (int o0 = 0; o0 < n_out; o0 += per) {
        const int nc = n_out - o0 < per ? n_out - o0 : per;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nc, n_in, 1.0f, x, n_in, w + (size_t)o0 * n_in,
                    n_in, 0.0f, split + o0, n_out);
    }
    return memcmp(whole, split, (size_t)rows * n_out * sizeof *whole) == 0;
}

/* Column chunks are exact on OpenBLAS's AVX-512 sgemm kernels (SkylakeX,
 * Cooperlake: every output in the same place of the same register tile, see
 * COL_ALIGN), not on its AVX2 ones (Haswell, Zen: the last columns of a chunk
 * round unlike the same columns of the whole GEMM; seen on an AVX-512 EPYC
 * that Debian's 0.3.21 runs as Haswell). Two shapes that catch the AVX2
 * kernels, chunks of 128 columns over the small-matrix bound: the answer
 * holds for the kernel, not for these shapes alone. */
int attn__col_split_exact(void)
{
    static const int shapes[2][4] = {{32, 256, 256, 128}, {48, 192, 320, 128}}; /* rows, n_in, n_out, per */
    float *buf = malloc(((size_t)48 * 192 + (size_t)320 * 192 + 2 * (size_t)48 * 320) * sizeof *buf);
    if (buf == NULL) return 0;
    int exact = 1;
    for (int i = 0; i < 2 && exact; i++) exact = probe_cols(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], buf);
    free(buf);
    return exact;
}

/* attn__col_split_exact, asked once per pool. */
static int col_split_ok(attn__pool *pool)
{
    int *memo = attn__pool_col_split_memo(pool);
    if (*memo == 0) *memo = attn__col_split_exact() ? 1 : -1;
    return *memo > 0;
}

/* Op i of lb, float32, whose rows give one chunk (a prefill piece of a few
 * hundred rows: all on one thread, the others idle): split by columns of W
 * instead, about `want` chunks starting at multiples of COL_ALIGN (left whole
 * when that leaves one). */
static void split_columns(linear_batch *lb, int i, size_t want)
{
    const linear_op *op = &lb->op[i];
    size_t per;
    const size_t chunks = split_units((size_t)op->n_out, want, COL_ALIGN, (double)op->rows * op->n_in, &per);
    if (chunks < 2) return;
    lb->per[i] = per;
    lb->chunks[i] = (int)chunks;
    lb->by_cols[i] = 1;
}

/* Runs the linears: one GEMM each on the calling thread, or each split into
 * about 4 chunks per worker (claimed dynamically, so uneven chunks balance)
 * over the pool, with single-threaded OpenBLAS per chunk. Chunks start at
 * multiples of ROW_ALIGN rows and are never small enough for OpenBLAS's
 * small-matrix kernel (see ROW_ALIGN): OpenBLAS then computes every row with
 * the same micro-kernel, in the same place of its register tile, as one
 * whole-matrix GEMM does, so results are bit-identical to the single-threaded
 * call for any number of workers (test_threads checks it). */
static void run_linears(linear_batch *lb, const attn_workspace *ws, int n_workers)
{
    if (n_workers == 1) {
        for (int i = 0; i < lb->n_ops; i++)
            if (lb->op[i].rows > 0) linear_rows(&lb->op[i], 0, lb->op[i].rows, lb->wide);
        return;
    }
    int tasks = 0;
    for (int i = 0; i < lb->n_ops; i++) {
        size_t rows = lb->op[i].rows, want = 4 * (size_t)n_workers;
        lb->by_cols[i] = 0;
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
        if (op_half(&lb->op[i])) { /* widened tiles of W, all rows each */
            lb->per[i] = (size_t)wide_cols(&lb->op[i]);
            lb->chunks[i] = (int)(((size_t)lb->op[i].n_out + lb->per[i] - 1) / lb->per[i]);
            tasks += lb->chunks[i];
            continue;
        }
        size_t per; /* at most 4 * n_workers chunks */
        const size_t chunks = split_units(rows, want, ROW_ALIGN, (double)lb->op[i].n_out * lb->op[i].n_in, &per);
        lb->per[i] = per;
        lb->chunks[i] = (int)chunks;
        if (chunks == 1 && !lb->op[i].add && !linear_small(&lb->op[i]) && col_split_ok(ws->pool))
            split_columns(lb, i, want);
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
    linear_batch lb = {.n_ops = 3, .wide = (float *)(base + p->off_scratch), .wide_floats = p->worker_floats};
    lb.op[0] = (linear_op){xq, l->w_q, l->b_q, p->n_q, l->e_q, l->qk_dim, l->qk_dim,
                           (float *)(base + p->off_q), 0, 0, l->wdtype};
    lb.op[1] = (linear_op){xk, l->w_k, l->b_k, p->n_kv, l->e_k, l->kv_k_dim, l->kv_k_dim,
                           (float *)(base + p->off_k), 0, 0, l->wdtype};
    lb.op[2] = (linear_op){xv, l->w_v, l->b_v, p->n_kv, l->e_v, l->kv_v_dim, l->kv_v_dim,
                           (float *)(base + p->off_v), 0, 0, l->wdtype};
    run_linears(&lb, ws, p->n_workers);
}

/* RoPE: every query row's heads and the matching key row's heads rotated at
 * the row's position (position_ids[i], or attn__mask_query_pos: i, or
 * cache_len + i when appending). Validation guarantees that on a rotary layer
 * every sequence's keys are its queries (kv_rows == t), so K row r of the
 * batch belongs to query row r. Buffer row r is row row0 + r of the batch;
 * q and k hold q_heads / k_heads heads per row (either may be NULL: the
 * streamed plan rotates a pass's K, or a chunk of a pass's Q). Rows
 * are split into chunks over the pool; each row's result depends on that row
 * only, so threads change no bit. */
typedef struct rope_run {
    const attn_layer *l;
    const attn_seq *seqs;
    size_t row0;
    float *q, *k;
    int q_heads, k_heads;
    float *scratch;        /* per worker: worker_floats >= rotary_dim */
    size_t worker_floats;
    size_t n_rows, per;    /* rows in all; rows per task */
} rope_run;

static void rope_rows(const rope_run *rr, size_t r0, size_t r1, float *cs)
{
    const attn_layer *l = rr->l;
    const int half = l->rope.rotary_dim / 2, dk = l->d_k;
    size_t start = 0;
    int i = 0;
    while (start + (size_t)rr->seqs[i].t <= rr->row0 + r0) start += (size_t)rr->seqs[i++].t;
    for (size_t r = r0; r < r1; r++) {
        while (rr->row0 + r >= start + (size_t)rr->seqs[i].t) start += (size_t)rr->seqs[i++].t;
        const attn_seq *s = &rr->seqs[i];
        const int j = (int)(rr->row0 + r - start);
        const int64_t pos = s->position_ids ? s->position_ids[j] : (int64_t)attn__mask_query_pos(s, j);
        attn__rope_cos_sin(l->inv_freq, half, pos, cs);
        if (rr->q)
            attn__rope_rotate(l->rope.style, l->rope.rotary_dim, cs, rr->q + r * (size_t)rr->q_heads * dk,
                              rr->q_heads, dk);
        if (rr->k)
            attn__rope_rotate(l->rope.style, l->rope.rotary_dim, cs, rr->k + r * (size_t)rr->k_heads * dk,
                              rr->k_heads, dk);
    }
}

static void rope_task(void *arg, int task, int worker)
{
    const rope_run *rr = arg;
    size_t r0 = (size_t)task * rr->per, r1 = r0 + rr->per < rr->n_rows ? r0 + rr->per : rr->n_rows;
    rope_rows(rr, r0, r1, rr->scratch + (size_t)worker * rr->worker_floats);
}

/* Runs rr's rows on the calling thread or in about 4 chunks per worker. */
static void run_rope(rope_run *rr, const attn_workspace *ws, int n_workers)
{
    if (rr->l->rope.style == ATTN_ROPE_NONE) return;
    if (n_workers == 1 || rr->n_rows < 2) {
        rope_rows(rr, 0, rr->n_rows, rr->scratch);
        return;
    }
    const size_t want = 4 * (size_t)n_workers;
    rr->per = (rr->n_rows + want - 1) / want;
    attn__pool_run(ws->pool, (int)((rr->n_rows + rr->per - 1) / rr->per), rope_task, rr);
}

static void apply_rope(const attn_layer *l, const attn_seq *seqs, const attn_workspace *ws,
                       const fwd_plan *p, char *base)
{
    rope_run rr = {l, seqs, 0, (float *)(base + p->off_q), (float *)(base + p->off_k), l->h, l->g,
                   (float *)(base + p->off_scratch), p->worker_floats, p->n_q, p->n_q};
    run_rope(&rr, ws, p->n_workers);
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

/* Runs n_jobs jobs: in order on the calling thread, or over the pool
 * (largest first). Each job's result does not depend on which thread ran it. */
static void run_job_list(heads_run *hr, attn__head_job *jobs, int n_jobs, const attn_workspace *ws,
                         int n_workers)
{
    if (n_workers == 1) {
        for (int j = 0; j < n_jobs; j++) run_job(hr->ctx, &jobs[j], hr->scratch);
        return;
    }
    qsort(jobs, (size_t)n_jobs, sizeof *jobs, by_cost_desc);
    attn__pool_run(ws->pool, n_jobs, head_task, hr);
}

/* Every job of the call, then the decode merge and the weights' mean. */
static void run_heads(const attn__fwd_ctx *ctx, attn__head_job *jobs, const attn_workspace *ws,
                      const fwd_plan *p, char *base, int n_seqs)
{
    const attn_layer *l = ctx->layer;
    for (int i = 0; i < n_seqs; i++)
        if (ctx->seqs[i].weights_mode == ATTN_WEIGHTS_AVERAGE)
            memset(ctx->seqs[i].weights, 0, weights_len(l, &ctx->seqs[i]) * sizeof(float));
    heads_run hr = {ctx, jobs, (float *)(base + p->off_scratch), p->worker_floats};
    run_job_list(&hr, jobs, p->n_jobs, ws, p->n_workers);
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
    linear_batch lb = {.n_ops = 1, .wide = (float *)(base + p->off_scratch), .wide_floats = p->worker_floats};
    lb.op[0] = (linear_op){z, l->w_o, l->b_o, p->n_q, l->v_dim, l->e_out, l->e_out, o, 0, 0, l->wdtype};
    run_linears(&lb, ws, p->n_workers);
    if (!p->out_scratch) return;
    for (int i = 0; i < n; i++) {
        size_t len = (size_t)seqs[i].t * (size_t)l->e_out;
        memcpy(seqs[i].output, o, len * sizeof *o);
        o += len;
    }
}

/* ------------------------------------------------------------------------
 * The streamed plan (long contexts; attn.h, max_scratch_bytes): per sequence,
 * passes over `heads` KV heads at a time (as many as the bound allows, the
 * last pass may have fewer): their K and V for all S keys, then their query
 * heads in chunks of rows, each chunk's share of the output projection added
 * into the output. The kernels see a pass as a layer of its own heads only:
 * kv_head counts from the pass's first KV head, Q (chunk, nh*r*d_k), K (S,
 * nh*d_k), V (S, nh*d_v), Z (chunk, nh*r*d_v), and the rows are a view of
 * the sequence (chunk_view). */

typedef struct stream_plan {
    int heads;            /* KV heads per pass */
    int chunk;            /* query rows per chunk, a multiple of block_q or all of T */
    int block_q, block_k;
    int n_workers;
    size_t worker_floats; /* fused-kernel scratch (and a row's cos/sin) per worker */
    size_t off_k, off_v, off_q, off_z, off_scratch, off_jobs;
    size_t bytes;
} stream_plan;

/* One pass: KV heads [j0, j0 + nh), query heads [j0*r, (j0 + nh)*r). */
typedef struct kv_pass { int j0, nh; } kv_pass;

/* Whether a sequence may stream: no KV cache, fused kernel (no weights), no
 * per-head attn_mask (its planes are (h, T, S) and the kernels index them by
 * the pass's head numbers). */
static int seq_streams(const attn_workspace *ws, const attn_seq *s)
{
    return seq_fused(ws, s) && s->cache_k == NULL &&
           !(s->attn_mask_kind != ATTN_MASK_NONE && s->attn_mask_per_head);
}

/* The layout for passes of sp->heads KV heads and chunks of sp->chunk rows
 * over keys of up to max_s rows; returns 0 on size_t overflow (or more than
 * INT_MAX jobs in a chunk). Z shares Q's
 * buffer when d_k == d_v (the fused kernel copies its Q block first); without
 * W_O the kernel writes the caller's output. */
static int stream_layout(const attn_layer *l, int max_s, stream_plan *sp)
{
    const size_t f = sizeof(float), nh = (size_t)sp->heads, qh = nh * (size_t)(l->h / l->g);
    const size_t rows = (size_t)sp->chunk, jobs = nh * (size_t)ceil_div(sp->chunk, sp->block_q);
    size_t t = 0, scratch = 0;
    int ok = attn__mul_size(sp->worker_floats, (size_t)sp->n_workers, &scratch);
    ok &= attn__ws_plan(&t, (size_t)max_s, nh * (size_t)l->d_k * f, &sp->off_k);
    ok &= attn__ws_plan(&t, (size_t)max_s, nh * (size_t)l->d_v * f, &sp->off_v);
    ok &= attn__ws_plan(&t, rows, qh * (size_t)l->d_k * f, &sp->off_q);
    sp->off_z = sp->off_q;
    if (l->w_o && l->d_k != l->d_v) ok &= attn__ws_plan(&t, rows, qh * (size_t)l->d_v * f, &sp->off_z);
    ok &= attn__ws_plan(&t, scratch, f, &sp->off_scratch);
    ok &= attn__ws_plan(&t, jobs, sizeof(attn__head_job), &sp->off_jobs);
    sp->bytes = t;
    return ok && jobs <= INT_MAX;
}

/* The widest pass whose layout fits the bound with chunks of one block (one
 * KV head when none does), then the largest chunk (a multiple of block_q, at
 * most T) that still fits. */
static attn_status plan_stream(const attn_layer *l, const attn_seq *s, const attn_workspace *ws,
                               const fwd_plan *ordinary, stream_plan *sp, attn_error *err)
{
    *sp = (stream_plan){.heads = l->g, .n_workers = ordinary->n_workers};
    sp->block_q = query_block(ws, l, s->t, s->s);
    sp->block_k = ws->opt.block_k < s->s ? ws->opt.block_k : s->s;
    size_t need = attn__fused_scratch_floats(l->h / l->g, sp->block_q, sp->block_k, l->d_k, l->d_v, 0);
    if (l->rope.style != ATTN_ROPE_NONE && (size_t)l->rope.rotary_dim > need) need = (size_t)l->rope.rotary_dim;
    if (wide_floats(l) > need) need = wide_floats(l); /* F16/BF16 weights: widened tiles */
    sp->worker_floats = (need + 15) / 16 * 16;
    const size_t bound = ws->opt.max_scratch_bytes;
    sp->chunk = sp->block_q;
    int ok = stream_layout(l, s->s, sp);
    while (sp->heads > 1 && (!ok || sp->bytes > bound)) {
        sp->heads--;
        ok = stream_layout(l, s->s, sp);
    }
    if (ok && sp->bytes < bound && sp->chunk < s->t) {
        const int z_own = l->w_o && l->d_k != l->d_v; /* else Z is Q's buffer, or the output */
        const size_t per_row =
            (size_t)sp->heads * (l->h / l->g) * (size_t)(l->d_k + (z_own ? l->d_v : 0)) * sizeof(float);
        const size_t more = (bound - sp->bytes) / per_row / (size_t)sp->block_q * (size_t)sp->block_q;
        sp->chunk = more < (size_t)(s->t - sp->chunk) ? sp->chunk + (int)more : s->t;
        ok = stream_layout(l, s->s, sp);
        while (ok && sp->bytes > bound && sp->chunk > sp->block_q) { /* jobs, alignment: a block less */
            sp->chunk = (sp->chunk - 1) / sp->block_q * sp->block_q;
            ok = stream_layout(l, s->s, sp);
        }
    }
    if (!ok) return attn__set_error(err, ATTN_ERR_LIMIT, "scratch size of the streamed plan overflows");
    return ATTN_OK;
}

/* K = X_k W_kᵀ + b_k and V likewise for the pass's KV heads (their d_k / d_v
 * rows of the weights are contiguous), the S keys of s; then RoPE on K. */
static void stream_project_kv(const attn_layer *l, const attn_seq *s, kv_pass ps, const attn_workspace *ws,
                              const stream_plan *sp, char *base)
{
    const float *xk = keys_from_query(s) ? s->query : s->key, *xv = keys_from_query(s) ? s->query : s->value;
    const size_t k0 = (size_t)ps.j0 * l->d_k, v0 = (size_t)ps.j0 * l->d_v;
    const int wk = ps.nh * l->d_k, wv = ps.nh * l->d_v;
    float *k = (float *)(base + sp->off_k), *v = (float *)(base + sp->off_v);
    linear_batch lb = {.n_ops = 2, .wide = (float *)(base + sp->off_scratch), .wide_floats = sp->worker_floats};
    lb.op[0] = (linear_op){xk, attn__w_at(l, l->w_k, k0 * l->e_k), l->b_k ? l->b_k + k0 : NULL, (size_t)s->s,
                           l->e_k, wk, wk, k, 0, 0, l->wdtype};
    lb.op[1] = (linear_op){xv, attn__w_at(l, l->w_v, v0 * l->e_v), l->b_v ? l->b_v + v0 : NULL, (size_t)s->s,
                           l->e_v, wv, wv, v, 0, 0, l->wdtype};
    run_linears(&lb, ws, sp->n_workers);
    rope_run rr = {l, s, 0, NULL, k, 0, ps.nh, (float *)(base + sp->off_scratch), sp->worker_floats,
                   (size_t)s->s, (size_t)s->s};
    run_rope(&rr, ws, sp->n_workers);
}

/* Q rows [c0, c0 + nc) of the pass's query heads (columns j0*r*d_k .. of Q),
 * rotated at their positions. */
static void stream_project_q(const attn_layer *l, const attn_seq *s, kv_pass ps, int c0, int nc,
                             const attn_workspace *ws, const stream_plan *sp, char *base)
{
    const int qh = ps.nh * (l->h / l->g), width = qh * l->d_k;
    const size_t col = (size_t)ps.j0 * (l->h / l->g) * l->d_k;
    float *q = (float *)(base + sp->off_q);
    linear_batch lb = {.n_ops = 1, .wide = (float *)(base + sp->off_scratch), .wide_floats = sp->worker_floats};
    lb.op[0] = (linear_op){s->query + (size_t)c0 * l->e_q, attn__w_at(l, l->w_q, col * l->e_q),
                           l->b_q ? l->b_q + col : NULL, (size_t)nc, l->e_q, width, width, q, 0, 0, l->wdtype};
    run_linears(&lb, ws, sp->n_workers);
    rope_run rr = {l, s, (size_t)c0, q, NULL, qh, 0, (float *)(base + sp->off_scratch), sp->worker_floats,
                   (size_t)nc, (size_t)nc};
    run_rope(&rr, ws, sp->n_workers);
}

/* Rows [c0, c0 + nc) of s as a sequence of their own, for the kernels: they
 * stand at positions c0.. among the S keys, which is what an append to a KV
 * cache of c0 rows means to the masks (attn__mask_query_pos: cache_len + t;
 * top-left causal and windows count from the same place), and a (T, S)
 * attn_mask starts at the chunk's first row. The kernels read keys and values
 * from the jobs (cache_k / cache_v point at the pass's K / V, contiguous
 * float32: attn__kv_is_plain), never from the view; it has no output. */
static attn_seq chunk_view(const attn_seq *s, int c0, int nc, float *k, float *v)
{
    attn_seq view = *s;
    view.t = nc;
    view.cache_k = k;
    view.cache_v = v;
    view.cache_len = c0;
    view.cache_append = 1;
    view.position_ids = NULL;
    view.output = NULL;
    if (s->attn_mask_kind != ATTN_MASK_NONE) {
        const size_t elem = s->attn_mask_kind == ATTN_MASK_BOOL ? sizeof(uint8_t) : sizeof(float);
        view.attn_mask = (const char *)s->attn_mask + (size_t)c0 * (size_t)s->s * elem;
    }
    return view;
}

/* One fused job per (KV head of the pass, block_q rows of the chunk). */
static int make_chunk_jobs(const attn_layer *l, const attn_seq *view, const stream_plan *sp, int nh,
                           const float *k, const float *v, float *z, int ldz, attn__head_job *jobs)
{
    const int r = l->h / l->g;
    int n = 0;
    for (int kvh = 0; kvh < nh; kvh++)
        for (int t0 = 0; t0 < view->t; t0 += sp->block_q, n++) {
            const int nt = view->t - t0 < sp->block_q ? view->t - t0 : sp->block_q;
            const int last = attn__mask_query_pos(view, t0 + nt - 1) + 1;
            const int keys = view->is_causal && last < view->s ? last : view->s;
            jobs[n] = (attn__head_job){.kernel = attn__head_fused, .seq = 0, .kv_head = kvh, .n_kv_heads = 1,
                                       .t0 = t0, .nt = nt, .q_row = 0, .k = k, .v = v, .z = z, .ldz = ldz,
                                       .cost = (double)nt * keys * r};
        }
    return n;
}

/* The pass's heads over rows [c0, c0 + nc): into Z (W_O) or straight into
 * their columns of the caller's output. */
static void stream_heads(const attn_layer *l, const attn_seq *s, kv_pass ps, int c0, int nc,
                         const attn_workspace *ws, const stream_plan *sp, char *base)
{
    const int qh = ps.nh * (l->h / l->g);
    float *k = (float *)(base + sp->off_k), *v = (float *)(base + sp->off_v);
    float *z = l->w_o ? (float *)(base + sp->off_z)
                      : s->output + (size_t)c0 * l->v_dim + (size_t)ps.j0 * (l->h / l->g) * l->d_v;
    const int ldz = l->w_o ? qh * l->d_v : l->v_dim;
    const attn_seq view = chunk_view(s, c0, nc, k, v);
    attn__fwd_ctx ctx = {
        .layer = l, .seqs = &view, .q = (const float *)(base + sp->off_q), .ldq = qh * l->d_k,
        .ldk = ps.nh * l->d_k, .ldv = ps.nh * l->d_v, .scale = (float)(1.0 / sqrt((double)l->d_k)),
        .block_q = sp->block_q, .block_k = sp->block_k,
    };
    attn__head_job *jobs = (attn__head_job *)(base + sp->off_jobs);
    const int n_jobs = make_chunk_jobs(l, &view, sp, ps.nh, k, v, z, ldz, jobs);
    heads_run hr = {&ctx, jobs, (float *)(base + sp->off_scratch), sp->worker_floats};
    run_job_list(&hr, jobs, n_jobs, ws, sp->n_workers);
}

/* out[c0 .. c0 + nc) (+)= Z_chunk W_O[:, the pass's columns]ᵀ: the first
 * pass starts from b_O (or zero), later ones add to it. */
static void stream_project_out(const attn_layer *l, const attn_seq *s, kv_pass ps, int c0, int nc,
                               const attn_workspace *ws, const stream_plan *sp, char *base)
{
    if (l->w_o == NULL) return; /* the heads wrote the output */
    const int r = l->h / l->g;
    linear_batch lb = {.n_ops = 1, .wide = (float *)(base + sp->off_scratch), .wide_floats = sp->worker_floats};
    lb.op[0] = (linear_op){(const float *)(base + sp->off_z), attn__w_at(l, l->w_o, (size_t)ps.j0 * r * l->d_v),
                           ps.j0 == 0 ? l->b_o : NULL, (size_t)nc, ps.nh * r * l->d_v, l->e_out, l->e_out,
                           s->output + (size_t)c0 * l->e_out, l->v_dim, ps.j0 > 0, l->wdtype};
    run_linears(&lb, ws, sp->n_workers);
}

static void stream_seq(const attn_layer *l, const attn_seq *s, const attn_workspace *ws,
                       const stream_plan *sp, char *base)
{
    for (int j0 = 0; j0 < l->g; j0 += sp->heads) {
        const kv_pass ps = {j0, l->g - j0 < sp->heads ? l->g - j0 : sp->heads};
        stream_project_kv(l, s, ps, ws, sp, base);
        for (int c0 = 0; c0 < s->t; c0 += sp->chunk) {
            const int nc = s->t - c0 < sp->chunk ? s->t - c0 : sp->chunk;
            stream_project_q(l, s, ps, c0, nc, ws, sp, base);
            stream_heads(l, s, ps, c0, nc, ws, sp, base);
            stream_project_out(l, s, ps, c0, nc, ws, sp, base);
        }
    }
}

/* ------------------------------------------------------------------------ */

/* The ordinary plan, planned: pack, project, rotate, store, heads, W_O. */
static void run_ordinary(const attn_layer *layer, const attn_seq *seqs, int n_seqs, attn_workspace *w,
                         const fwd_plan *plan)
{
    char *base = w->buf;
    pack_inputs(layer, seqs, n_seqs, plan, base);
    project_qkv(layer, seqs, w, plan, base);
    apply_rope(layer, seqs, w, plan, base);
    store_cache_rows(layer, seqs, n_seqs, plan, base);
    attn__fwd_ctx ctx = {
        .layer = layer, .seqs = seqs,
        .q = (const float *)(base + plan->off_q), .ldq = layer->qk_dim,
        .ldk = layer->kv_k_dim, .ldv = layer->kv_v_dim,
        .scale = (float)(1.0 / sqrt((double)layer->d_k)),
        .block_q = plan->block_q, .block_k = plan->block_k,
    };
    attn__head_job *jobs = (attn__head_job *)(base + plan->off_jobs);
    make_jobs(layer, seqs, n_seqs, w, plan, base, jobs);
    run_heads(&ctx, jobs, w, plan, base, n_seqs);
    project_out(layer, seqs, n_seqs, w, plan, base);
}

/* A run of consecutive sequences of the call, planned: ordinary, or (one
 * sequence) streamed. */
typedef struct call_piece {
    int n, streamed;
    fwd_plan plan;
    stream_plan sp;
    size_t bytes;
} call_piece;

static int prefix_fits(const attn_layer *l, const attn_seq *seqs, int n, const attn_workspace *ws,
                       fwd_plan *plan)
{
    return plan_call(l, seqs, n, ws, plan, NULL) == ATTN_OK && plan->bytes <= ws->opt.max_scratch_bytes;
}

/* The next piece from seqs[0] (n sequences left): all of them when their
 * ordinary plan fits the bound (the usual case: one plan), else the longest
 * prefix that fits (binary search; plan bytes grow with the batch, and a
 * prefix found is checked, so a bump only makes pieces shorter), else the
 * first sequence alone: streamed when it may stream, otherwise ordinary above
 * the bound. Deterministic: planning the call twice gives the same pieces. */
static attn_status plan_piece(const attn_layer *l, const attn_seq *seqs, int n, const attn_workspace *ws,
                              call_piece *pc, attn_error *err)
{
    *pc = (call_piece){.n = n};
    if (!prefix_fits(l, seqs, n, ws, &pc->plan)) {
        int lo = 0, hi = n; /* prefix lo fits (0 trivially), hi does not */
        while (hi - lo > 1) {
            const int mid = lo + (hi - lo) / 2;
            if (prefix_fits(l, seqs, mid, ws, &pc->plan)) lo = mid;
            else hi = mid;
        }
        pc->n = lo > 0 ? lo : 1;
        attn_status st = plan_call(l, seqs, pc->n, ws, &pc->plan, err);
        if (st != ATTN_OK) return st;
        pc->streamed = pc->plan.bytes > ws->opt.max_scratch_bytes && seq_streams(ws, &seqs[0]);
        if (pc->streamed && (st = plan_stream(l, &seqs[0], ws, &pc->plan, &pc->sp, err))) return st;
    }
    pc->bytes = pc->streamed ? pc->sp.bytes : pc->plan.bytes;
    return ATTN_OK;
}

static void run_piece(const attn_layer *l, const attn_seq *seqs, attn_workspace *w, const call_piece *pc)
{
    if (pc->streamed) stream_seq(l, &seqs[0], w, &pc->sp, w->buf);
    else run_ordinary(l, seqs, pc->n, w, &pc->plan);
}

/* Plans the call in pieces (plan_piece), reserves the largest, runs them in
 * order; *bytes: the largest piece's scratch, *streamed: whether a piece
 * streamed. Nothing after the reservation can fail. */
static attn_status plan_and_run(const attn_layer *layer, const attn_seq *seqs, int n_seqs,
                                attn_workspace *w, size_t *bytes, int *streamed, attn_error *err)
{
    call_piece pc;
    attn_status st;
    for (int i = 0; i < n_seqs; i += pc.n) {
        if ((st = plan_piece(layer, seqs + i, n_seqs - i, w, &pc, err))) return st;
        if (pc.bytes > *bytes) *bytes = pc.bytes;
        *streamed |= pc.streamed;
    }
    if ((st = attn__ws_reserve(w, *bytes, err))) return st;
    for (int i = 0; i < n_seqs; i += pc.n) {
        if ((st = plan_piece(layer, seqs + i, n_seqs - i, w, &pc, err))) return st; /* as above: OK */
        run_piece(layer, seqs + i, w, &pc);
    }
    return ATTN_OK;
}

attn_status attn_forward(const attn_layer *layer, const attn_seq *seqs, int n_seqs,
                         attn_workspace *ws, attn_forward_stats *stats, attn_error *err)
{
    attn_status st = attn__validate_forward(layer, seqs, n_seqs, err);
    if (st != ATTN_OK) return st;
    if (n_seqs == 0) {
        if (stats != NULL) *stats = (attn_forward_stats){0, 0, 0};
        return ATTN_OK;
    }
    attn_workspace local;
    attn_workspace *w = ws;
    if (w == NULL) { /* scratch for this call only, single-threaded, default options */
        attn__ws_init_local(&local);
        w = &local;
    }
    size_t bytes = 0;
    int streamed = 0;
    st = plan_and_run(layer, seqs, n_seqs, w, &bytes, &streamed, err);
    if (w->pool) attn__pool_rest(w->pool); /* no call of this forward follows */
    if (st == ATTN_OK) st = attn__check_results(layer, seqs, n_seqs, err);
    if (st == ATTN_OK && stats != NULL) {
        size_t n_q = 0, n_kv = 0;
        for (int i = 0; i < n_seqs; i++) {
            n_q += (size_t)seqs[i].t;
            n_kv += (size_t)kv_rows(&seqs[i]);
        }
        *stats = (attn_forward_stats){count_flops(layer, seqs, n_seqs, n_q, n_kv), bytes, streamed};
    }
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
    linear_op k = {key, l->w_k, l->b_k, (size_t)s, l->e_k, l->kv_k_dim, l->kv_k_dim, k_out, 0, 0, l->wdtype};
    linear_op v = {value, l->w_v, l->b_v, (size_t)s, l->e_v, l->kv_v_dim, l->kv_v_dim, v_out, 0, 0, l->wdtype};
    float *wide = NULL; /* F16/BF16 weights over more than a few rows: a widened tile */
    if (s > ATTN__SKINNY_MAX && wide_floats(l) > 0 && (wide = malloc(wide_floats(l) * sizeof *wide)) == NULL)
        return attn__set_error(err, ATTN_ERR_NOMEM, "allocating %zu floats to widen the weights", wide_floats(l));
    linear_rows(&k, 0, k.rows, wide);
    linear_rows(&v, 0, v.rows, wide);
    free(wide);
    return attn__check_projected(k_out, (size_t)s * l->kv_k_dim, v_out, (size_t)s * l->kv_v_dim, err);
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
