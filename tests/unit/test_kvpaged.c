/* test_kvpaged.c — paged and compact KV caches (attn_seq.cache_block_rows,
 * cache_block_table, cache_dtype; attn_kv_store / attn_kv_load): a paged
 * float32 cache gives bit-identical outputs to the contiguous cache (same
 * kernel, same workspace) across block boundaries, windows, GQA, RoPE and
 * chunked appends of 1 / 3 / random rows, and both agree with the one-shot
 * causal run; forks sharing prefix blocks answer as independent caches do;
 * F16 / BF16 / INT8 stay within the bounds attn.h states (max errors printed);
 * conversions round to nearest even; INT8 scales grow with requantisation
 * within the documented bound; validation errors name the field.
 */
#include "attn.h"
#include "check.h"
#include "core_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t fsz(size_t n) { return n * sizeof(float); }

static struct { double oneshot, f16, bf16, int8; } worst;

/* ------------------------------------------------------------ layers */

static gqa_shape random_shape(test_rng *r)
{
    static const int ratios[] = {1, 2, 4};
    gqa_shape s = {0};
    s.g = rng_int(r, 1, 3);
    s.h = s.g * ratios[rng_int(r, 0, 2)];
    s.d_k = 2 * rng_int(r, 1, 8);
    s.d_v = rng_int(r, 0, 1) ? s.d_k : rng_int(r, 1, 12);
    s.e = rng_int(r, 4, 32);
    s.bias = rng_int(r, 0, 1);
    s.out_proj = rng_int(r, 0, 2) != 0;
    s.e_out = s.out_proj ? rng_int(r, 1, 24) : s.h * s.d_v;
    if (rng_int(r, 0, 1)) s.rope = (attn_rope){.style = rng_int(r, 0, 1) ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED};
    return s;
}

/* ------------------------------------------------------------ caches */

/* A cache of up to L rows: contiguous (block_rows 0) or a pool of n_blocks
 * blocks with the table a random permutation (so logical order != pool order). */
typedef struct tcache {
    attn_kv_cache c;
    int32_t *table;
    int n_blocks;
    size_t kb, vb;
} tcache;

static void tcache_init(tcache *t, test_rng *r, const attn_layer *l, int L, int dtype, int block_rows,
                        int spare)
{
    memset(t, 0, sizeof *t);
    t->c.dtype = (attn_kv_dtype)dtype;
    t->c.block_rows = block_rows;
    CHECK_INT_EQ(attn_kv_block_bytes(l, (attn_kv_dtype)dtype, block_rows, &t->kb, &t->vb, NULL), ATTN_OK);
    size_t rows_or_blocks = (size_t)L;
    if (block_rows > 0) {
        t->n_blocks = (L + block_rows - 1) / block_rows + spare;
        rows_or_blocks = (size_t)t->n_blocks;
        t->table = malloc((size_t)t->n_blocks * sizeof *t->table);
        for (int i = 0; i < t->n_blocks; i++) t->table[i] = i;
        for (int i = t->n_blocks - 1; i > 0; i--) {
            int j = rng_int(r, 0, i), x = t->table[i];
            t->table[i] = t->table[j];
            t->table[j] = x;
        }
        t->c.block_table = t->table;
    }
    t->c.k = calloc(rows_or_blocks, t->kb);
    t->c.v = calloc(rows_or_blocks, t->vb);
}

static void tcache_free(tcache *t)
{
    free(t->c.k);
    free(t->c.v);
    free(t->table);
}

static void seq_use_cache(attn_seq *s, const tcache *t)
{
    s->cache_k = t->c.k;
    s->cache_v = t->c.v;
    s->cache_dtype = (int)t->c.dtype;
    s->cache_block_rows = t->c.block_rows;
    s->cache_block_table = t->c.block_table;
    s->cache_block_stride = t->c.block_stride;
}

/* Streams x (L, E) through cache t in appends of `step` rows (0 = random
 * 1..7, drawn from a generator seeded by `seed` so two runs chunk alike),
 * writing every output row to out (L, E_out). Returns 0 on success. */
static int stream_from(const attn_layer *l, const tcache *t, const float *x, int pos0, int L, int step,
                       uint64_t seed, int window, attn_workspace *ws, float *out)
{
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    test_rng r = {seed};
    for (int pos = pos0; pos < L;) {
        int n = step ? step : rng_int(&r, 1, 7);
        if (n > L - pos) n = L - pos;
        attn_seq s = {.t = n, .s = pos + n, .query = x + (size_t)pos * li.embed_q, .is_causal = 1,
                      .window = window, .output = out + (size_t)pos * li.embed_out, .cache_len = pos,
                      .cache_append = 1};
        seq_use_cache(&s, t);
        attn_error err = {0};
        attn_status st = attn_forward(l, &s, 1, ws, NULL, &err);
        CHECK_MSG(st == ATTN_OK, "append at %d: %s", pos, err.message);
        if (st != ATTN_OK) return -1;
        pos += n;
    }
    return 0;
}

static int stream(const attn_layer *l, const tcache *t, const float *x, int L, int step, uint64_t seed,
                  int window, attn_workspace *ws, float *out)
{
    return stream_from(l, t, x, 0, L, step, seed, window, ws, out);
}

/* ------------------------------------------------------------ cases */

TEST(paged_f32_bit_identical)
{
    test_rng r = {0x70616765ull};
    static const int blocks[] = {1, 2, 4, 16, 64};
    for (int c = 0; c < 40; c++) {
        gqa_shape sh = random_shape(&r);
        attn_layer *l = gqa_layer(&r, &sh);
        if (l == NULL) return;
        const int L = rng_int(&r, 1, 70), step = (int[]){1, 3, 0}[c % 3];
        const int window = rng_int(&r, 0, 2) ? 0 : rng_int(&r, 1, 20);
        const int B = blocks[rng_int(&r, 0, 4)];
        const attn_kernel kern = c % 4 == 0 ? ATTN_KERNEL_MATERIALIZED : ATTN_KERNEL_FUSED;
        const int bk = (int[]){0, 5, 8, 32}[rng_int(&r, 0, 3)];
        attn_workspace *ws = test_ws(kern, 1 + c % 2, bk);
        float *x = rand_floats(&r, (size_t)L * sh.e, 1.0f);
        const size_t no = (size_t)L * sh.e_out;
        float *oc = malloc(fsz(no)), *op = malloc(fsz(no)), *o1 = malloc(fsz(no));
        tcache tc, tp;
        tcache_init(&tc, &r, l, L, ATTN_KV_F32, 0, 0);
        tcache_init(&tp, &r, l, L, ATTN_KV_F32, B, 3);
        const uint64_t seed = rng_next(&r);
        int ok = stream(l, &tc, x, L, step, seed, window, ws, oc) == 0 &&
                 stream(l, &tp, x, L, step, seed, window, ws, op) == 0;
        CHECK_MSG(ok && memcmp(oc, op, fsz(no)) == 0,
                  "case %d: paged (B=%d) != contiguous: diff %.3g (h=%d g=%d L=%d step=%d window=%d "
                  "kernel=%d block_k=%d rope=%d d_k=%d d_v=%d)", c, B, max_abs_diff(oc, op, no), sh.h, sh.g, L, step,
                  window, (int)kern, bk, (int)sh.rope.style, sh.d_k, sh.d_v);
        /* the paged cache holds what the contiguous one holds */
        const size_t nk = (size_t)L * sh.g * sh.d_k, nv = (size_t)L * sh.g * sh.d_v;
        float *lk = malloc(fsz(nk)), *lv = malloc(fsz(nv));
        CHECK_INT_EQ(attn_kv_load(l, &tp.c, 0, L, lk, lv, NULL), ATTN_OK);
        CHECK(memcmp(lk, tc.c.k, fsz(nk)) == 0 && memcmp(lv, tc.c.v, fsz(nv)) == 0);
        /* and the stream equals the one-shot causal run */
        attn_seq one = {.t = L, .s = L, .query = x, .is_causal = 1, .window = window, .output = o1};
        CHECK_INT_EQ(attn_forward(l, &one, 1, ws, NULL, NULL), ATTN_OK);
        const double d = rel_err(op, o1, no);
        keep_max(&worst.oneshot, d);
        CHECK_MSG(d <= 1e-5, "case %d: paged stream vs one-shot %.3g", c, d);
        free(lk); free(lv);
        tcache_free(&tc); tcache_free(&tp);
        free(x); free(oc); free(op); free(o1);
        attn_workspace_free(ws);
        attn_layer_free(l);
    }
}

/* Session a: a prefix of P rows, then its own rows; fork b shares a's full
 * prefix blocks (and a copy of the partial one) and appends other rows. Each
 * answers as an independent cache of its own rows does, and a's appends never
 * change b's answers (nor b's a's). */
static void fork_case(test_rng *r, int dtype, int B)
{
    gqa_shape sh = {.h = 4, .g = 2, .d_k = 8, .d_v = 6, .e = 16, .e_out = 12, .bias = 1, .out_proj = 1,
                 .rope = {.style = ATTN_ROPE_HALF}};
    attn_layer *l = gqa_layer(r, &sh);
    if (l == NULL) return;
    const int P = 2 * B + B / 2 + 1, A = 9, L = P + A;
    float *xp = rand_floats(r, (size_t)P * sh.e, 1.0f), *xa = rand_floats(r, (size_t)A * sh.e, 1.0f);
    float *xb = rand_floats(r, (size_t)A * sh.e, 1.0f);
    float *sa = malloc(fsz((size_t)L * sh.e)), *sb = malloc(fsz((size_t)L * sh.e));
    memcpy(sa, xp, fsz((size_t)P * sh.e));
    memcpy(sa + (size_t)P * sh.e, xa, fsz((size_t)A * sh.e));
    memcpy(sb, xp, fsz((size_t)P * sh.e));
    memcpy(sb + (size_t)P * sh.e, xb, fsz((size_t)A * sh.e));
    attn_workspace *ws = test_ws(ATTN_KERNEL_FUSED, 2, 4);
    const size_t no = (size_t)L * sh.e_out;
    float *ra = malloc(fsz(no)), *rb = malloc(fsz(no)), *fa = malloc(fsz(no)), *fb = malloc(fsz(no));
    /* independent caches */
    tcache ia, ib;
    tcache_init(&ia, r, l, L, dtype, B, 0);
    tcache_init(&ib, r, l, L, dtype, B, 0);
    stream(l, &ia, sa, P, 3, 1, 0, ws, ra); /* chunked as the forks are: prefix, then threes */
    stream_from(l, &ia, sa, P, L, 3, 1, 0, ws, ra);
    stream(l, &ib, sb, P, 3, 1, 0, ws, rb);
    stream_from(l, &ib, sb, P, L, 3, 1, 0, ws, rb);
    /* one shared pool: a's table, then b's: a's full blocks, its own copy of the partial one */
    const int nb = (L + B - 1) / B, full = P / B;
    tcache pool;
    tcache_init(&pool, r, l, L, dtype, B, nb); /* 2 nb blocks */
    int32_t *ta = pool.table, *tb = pool.table + nb;
    tcache a = pool, b = pool;
    a.c.block_table = ta;
    b.c.block_table = tb;
    stream(l, &a, sa, P, 3, 1, 0, ws, fa); /* the shared prefix, chunked as the independent runs */
    for (int i = 0; i < full; i++) tb[i] = ta[i];
    if (P % B) { /* copy-on-write the partial block */
        memcpy((char *)pool.c.k + (size_t)tb[full] * pool.kb, (char *)pool.c.k + (size_t)ta[full] * pool.kb, pool.kb);
        memcpy((char *)pool.c.v + (size_t)tb[full] * pool.vb, (char *)pool.c.v + (size_t)ta[full] * pool.vb, pool.vb);
    }
    memcpy(fb, fa, fsz((size_t)P * sh.e_out));
    /* interleaved appends, 3 rows at a time like the independent runs */
    for (int pos = P; pos < L; pos += 3) {
        const int n = L - pos < 3 ? L - pos : 3;
        for (int w = 0; w < 2; w++) {
            const float *x = w ? sb : sa;
            attn_seq s = {.t = n, .s = pos + n, .query = x + (size_t)pos * sh.e, .is_causal = 1,
                          .output = (w ? fb : fa) + (size_t)pos * sh.e_out, .cache_len = pos, .cache_append = 1};
            seq_use_cache(&s, w ? &b : &a);
            CHECK_INT_EQ(attn_forward(l, &s, 1, ws, NULL, NULL), ATTN_OK);
        }
    }
    CHECK_MSG(memcmp(fa, ra, fsz(no)) == 0, "fork a (dtype %d, B=%d) differs: %.3g", dtype, B,
              max_abs_diff(fa, ra, no));
    CHECK_MSG(memcmp(fb, rb, fsz(no)) == 0, "fork b (dtype %d, B=%d) differs: %.3g", dtype, B,
              max_abs_diff(fb, rb, no));
    /* the shared blocks still hold a's prefix exactly: b's appends never wrote them */
    const size_t nk = (size_t)P * sh.g * sh.d_k, nv = (size_t)P * sh.g * sh.d_v;
    float *k1 = malloc(fsz(nk)), *v1 = malloc(fsz(nv)), *k2 = malloc(fsz(nk)), *v2 = malloc(fsz(nv));
    const int rows = full * B;
    if (rows > 0) {
        CHECK_INT_EQ(attn_kv_load(l, &a.c, 0, rows, k1, v1, NULL), ATTN_OK);
        CHECK_INT_EQ(attn_kv_load(l, &ia.c, 0, rows, k2, v2, NULL), ATTN_OK);
        CHECK(memcmp(k1, k2, fsz((size_t)rows * sh.g * sh.d_k)) == 0 &&
              memcmp(v1, v2, fsz((size_t)rows * sh.g * sh.d_v)) == 0);
    }
    free(k1); free(v1); free(k2); free(v2);
    free(xp); free(xa); free(xb); free(sa); free(sb);
    free(ra); free(rb); free(fa); free(fb);
    tcache_free(&ia); tcache_free(&ib); tcache_free(&pool);
    attn_workspace_free(ws);
    attn_layer_free(l);
}

TEST(forks_share_prefix_blocks)
{
    test_rng r = {0x666f726bull};
    fork_case(&r, ATTN_KV_F32, 4);
    fork_case(&r, ATTN_KV_F32, 8);
    fork_case(&r, ATTN_KV_INT8, 4);
    fork_case(&r, ATTN_KV_F16, 8);
    fork_case(&r, ATTN_KV_BF16, 2);
}

/* F16 / BF16 / INT8 streams against the float32 stream: within attn.h's bounds. */
TEST(compact_dtypes_error)
{
    test_rng r = {0x64747970ull};
    static const double bound[4] = {0, 1e-3, 1e-2, 3e-2};
    double *slot[4] = {NULL, &worst.f16, &worst.bf16, &worst.int8};
    for (int c = 0; c < 12; c++) {
        gqa_shape sh = c < 3 ? (gqa_shape){.h = 8, .g = 2, .d_k = 64, .d_v = 64, .e = 64, .e_out = 64, .bias = 1,
                                     .out_proj = 1, .rope = {.style = ATTN_ROPE_HALF}}
                          : random_shape(&r);
        attn_layer *l = gqa_layer(&r, &sh);
        if (l == NULL) return;
        const int L = c < 3 ? 300 : rng_int(&r, 1, 80), step = (int[]){1, 3, 0}[c % 3];
        const int B = (int[]){4, 16, 64}[c % 3], window = c % 4 == 3 ? rng_int(&r, 1, 30) : 0;
        attn_workspace *ws = test_ws(c % 5 == 4 ? ATTN_KERNEL_MATERIALIZED : ATTN_KERNEL_FUSED, 2, 0);
        float *x = rand_floats(&r, (size_t)L * sh.e, 1.0f);
        const size_t no = (size_t)L * sh.e_out;
        float *ref = malloc(fsz(no)), *o = malloc(fsz(no));
        tcache tr;
        tcache_init(&tr, &r, l, L, ATTN_KV_F32, 0, 0);
        const uint64_t seed = rng_next(&r);
        stream(l, &tr, x, L, step, seed, window, ws, ref);
        for (int dt = ATTN_KV_F16; dt <= ATTN_KV_INT8; dt++)
            for (int paged = dt == ATTN_KV_INT8; paged < 2; paged++) {
                tcache t;
                tcache_init(&t, &r, l, L, dt, paged ? B : 0, 2);
                if (stream(l, &t, x, L, step, seed, window, ws, o) == 0) {
                    const double e = rel_err(o, ref, no);
                    keep_max(slot[dt], e);
                    CHECK_MSG(e <= bound[dt], "dtype %d paged %d: error %.3g > %.3g (h=%d g=%d d_k=%d L=%d)", dt,
                              paged, e, bound[dt], sh.h, sh.g, sh.d_k, L);
                    if (c < 3 && paged)
                        printf("  dtype %-4s  h=%d g=%d d=%d L=%d step=%d B=%d: max error vs F32 %.3g\n",
                               (const char *[]){"F32", "F16", "BF16", "INT8"}[dt], sh.h, sh.g, sh.d_k, L, step, B, e);
                }
                tcache_free(&t);
            }
        tcache_free(&tr);
        free(x); free(ref); free(o);
        attn_workspace_free(ws);
        attn_layer_free(l);
    }
}

static uint16_t u16_at(const void *p, size_t i) { uint16_t u; memcpy(&u, (const char *)p + 2 * i, 2); return u; }

/* Rounding to nearest even, the F16 clamp, exact widening on load. */
TEST(conversions_round_to_nearest_even)
{
    test_rng r = {1};
    gqa_shape sh = {.h = 1, .g = 1, .d_k = 8, .d_v = 8, .e = 8, .e_out = 8};
    attn_layer *l = gqa_layer(&r, &sh);
    if (l == NULL) return;
    const float k[8] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 1e6f, -1e6f, 0x1p-24f, 0x1p-25f, -2.5f};
    const uint16_t want16[8] = {0x3c00, 0x3c02, 0x7bff, 0x7bff, 0xfbff, 0x0001, 0x0000, 0xc100};
    const float v[8] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -1.0f, 0.0f, 3.0f, 1e30f, 0x1p-130f, -2.5f};
    const uint16_t wantb[8] = {0x3f80, 0x3f82, 0xbf80, 0x0000, 0x4040, 0x714a, 0x0008, 0xc020};
    uint16_t bk[8], bv[8];
    attn_kv_cache c = {.k = bk, .v = bv, .dtype = ATTN_KV_F16};
    CHECK_INT_EQ(attn_kv_store(l, &c, 0, 1, k, v, NULL), ATTN_OK);
    for (int i = 0; i < 8; i++) CHECK_MSG(u16_at(bk, i) == want16[i], "f16[%d] = %#x, want %#x", i, u16_at(bk, i), want16[i]);
    float lk[8], lv[8];
    CHECK_INT_EQ(attn_kv_load(l, &c, 0, 1, lk, lv, NULL), ATTN_OK);
    CHECK(lk[0] == 1.0f && lk[1] == 1.0f + 4 * 0x1p-11f && lk[2] == 65504.0f && lk[4] == -65504.0f &&
          lk[5] == 0x1p-24f && lk[6] == 0.0f && lk[7] == -2.5f);
    c.dtype = ATTN_KV_BF16;
    CHECK_INT_EQ(attn_kv_store(l, &c, 0, 1, v, v, NULL), ATTN_OK);
    for (int i = 0; i < 8; i++) CHECK_MSG(u16_at(bk, i) == wantb[i], "bf16[%d] = %#x, want %#x", i, u16_at(bk, i), wantb[i]);
    CHECK_INT_EQ(attn_kv_load(l, &c, 0, 1, lk, lv, NULL), ATTN_OK);
    CHECK(lk[0] == 1.0f && lk[1] == 1.0f + 4 * 0x1p-8f && lk[7] == -2.5f);
    attn_layer_free(l);
}

/* INT8: the layout attn.h defines (scales first, then rows), scale = max/127
 * for a block written at once, growth >= 2x with requantisation, error <= s_final. */
TEST(int8_scales_and_requantisation)
{
    test_rng r = {2};
    gqa_shape sh = {.h = 2, .g = 2, .d_k = 3, .d_v = 3, .e = 8, .e_out = 6};
    attn_layer *l = gqa_layer(&r, &sh);
    if (l == NULL) return;
    const int B = 8, W = 6; /* g*d */
    size_t kb, vb;
    CHECK_INT_EQ(attn_kv_block_bytes(l, ATTN_KV_INT8, B, &kb, &vb, NULL), ATTN_OK);
    CHECK_INT_EQ((int)kb, 4 * 2 + 48);
    int32_t table[2] = {1, 0};
    char *pk = calloc(2, kb), *pv = calloc(2, vb);
    attn_kv_cache c = {.k = pk, .v = pv, .dtype = ATTN_KV_INT8, .block_rows = B, .block_table = table};
    float x[16 * 6];
    for (int i = 0; i < 16 * W; i++) x[i] = rng_float(&r, -1.0f, 1.0f) * (float)(1 + i / W); /* grows by row */
    /* logical block 0 (pool block 1) at once; logical block 1 (pool block 0) one row at a time */
    CHECK_INT_EQ(attn_kv_store(l, &c, 0, 8, x, x, NULL), ATTN_OK);
    for (int row = 8; row < 16; row++) CHECK_INT_EQ(attn_kv_store(l, &c, row, 1, x + row * W, x + row * W, NULL), ATTN_OK);
    float back[16 * 6], vback[16 * 6];
    CHECK_INT_EQ(attn_kv_load(l, &c, 0, 16, back, vback, NULL), ATTN_OK);
    for (int blk = 0; blk < 2; blk++)
        for (int j = 0; j < 2; j++) {
            float m = 0, s;
            for (int rr = 0; rr < 8; rr++)
                for (int e = 0; e < 3; e++) m = fmaxf(m, fabsf(x[(blk * 8 + rr) * W + j * 3 + e]));
            memcpy(&s, pk + (size_t)table[blk] * kb + 4 * (size_t)j, 4);
            double err = 0;
            for (int rr = 0; rr < 8; rr++)
                for (int e = 0; e < 3; e++) {
                    const int idx = (blk * 8 + rr) * W + j * 3 + e;
                    const int8_t q = (int8_t)pk[(size_t)table[blk] * kb + 8 + (size_t)rr * W + (size_t)j * 3 + (size_t)e];
                    CHECK(back[idx] == (float)q * s); /* the layout read by hand */
                    err = fmax(err, fabs((double)back[idx] - x[idx]));
                }
            if (blk == 0) {
                CHECK_MSG(s == m / 127.0f, "one-shot scale %g, want max/127 = %g", s, m / 127.0f);
                CHECK_MSG(err <= 0.5 * s * (1 + 1e-6), "one-shot error %g > s/2 = %g", err, 0.5 * s);
            } else {
                CHECK_MSG(s >= m / 127.0f && s <= 2 * m / 127.0f, "grown scale %g outside [max/127, 2 max/127]", s);
                CHECK_MSG(err <= s * (1 + 1e-6), "requantised error %g > s_final = %g", err, s);
            }
            printf("  int8 block %d head %d: scale %.4g (max/127 = %.4g), max error %.4g\n", blk, j, s,
                   m / 127.0f, err);
        }
    free(pk); free(pv);
    attn_layer_free(l);
}

/* One pool of equal pages holding K and V side by side (the server's layout):
 * page p has its K block at p * stride and its V block just after it, with
 * slack at the end of each page. Streams answer exactly as with packed pools,
 * for every dtype, and a stride below the block bytes is refused by name. */
TEST(strided_pages_match_packed)
{
    test_rng r = {0x73747269ull};
    for (int c = 0; c < 16; c++) {
        gqa_shape sh = random_shape(&r);
        attn_layer *l = gqa_layer(&r, &sh);
        if (l == NULL) return;
        const int dtype = c % 4, B = (int[]){1, 4, 16}[rng_int(&r, 0, 2)], L = rng_int(&r, 1, 60);
        tcache tp;
        tcache_init(&tp, &r, l, L, dtype, B, 2);
        const size_t stride = tp.kb + tp.vb + 4 * (size_t)rng_int(&r, 0, 8);
        char *pages = calloc((size_t)tp.n_blocks, stride);
        tcache ts = tp; /* same table, pages instead of packed pools */
        ts.c.k = pages;
        ts.c.v = pages + tp.kb;
        ts.c.block_stride = stride;
        float *x = rand_floats(&r, (size_t)L * sh.e, 1.0f);
        const size_t no = (size_t)L * sh.e_out;
        float *op = malloc(fsz(no)), *os = malloc(fsz(no));
        const uint64_t seed = rng_next(&r);
        attn_workspace *ws = test_ws(ATTN_KERNEL_FUSED, 1, 0);
        int ok = stream(l, &tp, x, L, 0, seed, 0, ws, op) == 0;
        attn_seq probe = {0};
        seq_use_cache(&probe, &ts);
        ok = ok && probe.cache_block_stride == stride && stream(l, &ts, x, L, 0, seed, 0, ws, os) == 0;
        CHECK_MSG(ok && memcmp(op, os, fsz(no)) == 0, "case %d: strided pages (dtype %d, B=%d) != packed: %.3g", c,
                  dtype, B, max_abs_diff(op, os, no));
        attn_kv_cache bad = ts.c;
        bad.block_stride = tp.kb - 4;
        attn_error err = {0};
        float *k1 = calloc((size_t)sh.g * sh.d_k, sizeof(float)), *v1 = calloc((size_t)sh.g * sh.d_v, sizeof(float));
        CHECK_INT_EQ(attn_kv_store(l, &bad, 0, 1, k1, v1, &err), ATTN_ERR_INVALID_ARG);
        CHECK(strstr(err.message, "block_stride") != NULL);
        free(k1); free(v1);
        attn_workspace_free(ws);
        free(pages); free(x); free(op); free(os);
        ts.c.k = ts.c.v = NULL;
        tcache_free(&tp);
        attn_layer_free(l);
    }
}

static void expect_invalid(const attn_layer *l, attn_seq s, const char *field)
{
    attn_error err = {0};
    const attn_status st = attn_forward(l, &s, 1, NULL, NULL, &err);
    CHECK_MSG(st == ATTN_ERR_INVALID_ARG && strstr(err.message, field) != NULL, "want INVALID_ARG naming %s, got %s: %s",
              field, attn_status_name(st), err.message);
}

TEST(validation_names_the_field)
{
    test_rng r = {3};
    gqa_shape sh = {.h = 2, .g = 1, .d_k = 4, .d_v = 4, .e = 8, .e_out = 8};
    attn_layer *l = gqa_layer(&r, &sh);
    if (l == NULL) return;
    float x[8] = {0}, out[8], pool[4 * 16 * 4] = {0}, pool_v[4 * 16 * 4] = {0};
    int32_t table[4] = {0, 1, 2, 3};
    const attn_seq base = {.t = 1, .s = 5, .query = x, .output = out, .cache_k = pool, .cache_v = pool_v,
                           .cache_len = 4, .cache_append = 1, .cache_block_rows = 4, .cache_block_table = table};
    attn_seq s = base;
    s.cache_block_rows = 3;
    expect_invalid(l, s, "cache_block_rows");
    s.cache_block_rows = -4;
    expect_invalid(l, s, "cache_block_rows");
    s.cache_block_rows = 1 << 17;
    expect_invalid(l, s, "cache_block_rows");
    s = base;
    s.cache_block_table = NULL;
    expect_invalid(l, s, "cache_block_table");
    s = base;
    s.cache_block_rows = 0;
    expect_invalid(l, s, "cache_block_table");
    s = base;
    s.cache_dtype = 7;
    expect_invalid(l, s, "cache_dtype");
    s = base;
    s.cache_dtype = ATTN_KV_INT8;
    s.cache_block_rows = 0;
    s.cache_block_table = NULL;
    expect_invalid(l, s, "cache_dtype");
    s = base;
    table[1] = -1;
    expect_invalid(l, s, "cache_block_table[1]");
    table[1] = 1;
    s = (attn_seq){.t = 1, .s = 1, .query = x, .output = out, .cache_dtype = ATTN_KV_F16};
    expect_invalid(l, s, "cache_dtype");
    /* a valid call still works, and writes the appended row into block 1 */
    s = base;
    CHECK_INT_EQ(attn_forward(l, &s, 1, NULL, NULL, NULL), ATTN_OK);
    /* attn_kv_store / attn_kv_block_bytes name their fields too */
    attn_error err = {0};
    size_t kb, vb;
    CHECK_INT_EQ(attn_kv_block_bytes(l, (attn_kv_dtype)9, 16, &kb, &vb, &err), ATTN_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "dtype") != NULL);
    CHECK_INT_EQ(attn_kv_block_bytes(l, ATTN_KV_F16, 12, &kb, &vb, &err), ATTN_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "block_rows") != NULL);
    attn_kv_cache c = {.k = pool, .v = pool_v, .block_rows = 4};
    CHECK_INT_EQ(attn_kv_store(l, &c, 0, 1, x, x, &err), ATTN_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "block_table") != NULL);
    float bad[4] = {0, NAN, 0, 0};
    c.block_table = table;
    CHECK_INT_EQ(attn_kv_store(l, &c, 0, 1, bad, x, &err), ATTN_ERR_NONFINITE);
    CHECK(strstr(err.message, "k[0][1]") != NULL);
    attn_layer_free(l);
}

int main(void)
{
    RUN(paged_f32_bit_identical);
    RUN(forks_share_prefix_blocks);
    RUN(compact_dtypes_error);
    RUN(conversions_round_to_nearest_even);
    RUN(int8_scales_and_requantisation);
    RUN(validation_names_the_field);
    RUN(strided_pages_match_packed);
    printf("max relative difference: paged stream vs one-shot %.3g\n", worst.oneshot);
    printf("max error vs F32 (of max(1, max|out|)): F16 %.3g, BF16 %.3g, INT8 %.3g\n", worst.f16, worst.bf16,
           worst.int8);
    return check_summary();
}
