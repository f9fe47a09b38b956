/* test_decode.c — the decode kernel (lib/decode.c: T <= 8 query rows over a
 * KV cache): against the naive reference (lib/reference.c) on a contiguous
 * float32 copy of the cache, and against the fused kernel (the same rows
 * appended with 8 more: causal rows never see later ones, and T + 8 > 8
 * takes the fused path), across dtypes, GQA ratios, RoPE, windows, masks,
 * block sizes (1 .. 256, block and tile boundaries crossed), pages holding K
 * and V side by side, T = 1..8; paged float32 bit-identical to contiguous
 * over long caches; split-KV and head groups (2 threads) equal to the
 * unsplit job (1 thread) within float rounding; a ragged batch equal to its
 * sequences one by one; the portable kernel equal to the AVX2 one; the K/V
 * bytes the bench counts.
 */
#include "attn.h"
#include "check.h"
#include "core_util.h"
#include "decode.h"
#include "forward.h"
#include "reference.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t fsz(size_t n) { return n * sizeof(float); }

static const char *const dtype_name[] = {"F32", "F16", "BF16", "INT8"};
static const double dtype_bound[] = {1e-5, 1e-3, 1e-2, 3e-2}; /* attn.h's, vs float32 */

static struct { double ref[4], fused[4], split, portable; } worst;

/* ------------------------------------------------------------ caches */

/* A cache of up to `rows` rows: contiguous (block_rows 0), or pages in a
 * shuffled table, K and V in separate pools or side by side in one. */
typedef struct dcache {
    attn_kv_cache c;
    char *mem;
    size_t bytes;
    int32_t *table;
} dcache;

static void dcache_init(dcache *d, test_rng *r, const attn_layer *l, int rows, int dtype, int B, int side_by_side)
{
    memset(d, 0, sizeof *d);
    size_t kb, vb;
    CHECK_INT_EQ(attn_kv_block_bytes(l, (attn_kv_dtype)dtype, B, &kb, &vb, NULL), ATTN_OK);
    d->c.dtype = (attn_kv_dtype)dtype;
    d->c.block_rows = B;
    const size_t units = B ? (size_t)(rows + B - 1) / B + 1 : (size_t)rows;
    if (B) {
        d->table = malloc(units * sizeof *d->table);
        for (size_t i = 0; i < units; i++) d->table[i] = (int32_t)i;
        for (size_t i = units - 1; i > 0; i--) {
            size_t j = (size_t)rng_int(r, 0, (int)i);
            int32_t x = d->table[i];
            d->table[i] = d->table[j];
            d->table[j] = x;
        }
        d->c.block_table = d->table;
    }
    if (B && side_by_side) {
        d->c.block_stride = kb + vb + 4 * (size_t)rng_int(r, 0, 3);
        d->bytes = units * d->c.block_stride;
        d->mem = calloc(1, d->bytes);
        d->c.k = d->mem;
        d->c.v = d->mem + kb;
    } else {
        d->bytes = units * (kb + vb);
        d->mem = calloc(1, d->bytes);
        d->c.k = d->mem;
        d->c.v = d->mem + units * kb;
    }
}

/* A byte copy of src (its own memory, the same table). */
static void dcache_copy(dcache *d, const dcache *src)
{
    *d = *src;
    d->mem = malloc(src->bytes);
    memcpy(d->mem, src->mem, src->bytes);
    d->c.k = d->mem + ((char *)src->c.k - src->mem);
    d->c.v = d->mem + ((char *)src->c.v - src->mem);
    d->table = NULL; /* borrowed */
}

static void dcache_free(dcache *d)
{
    free(d->mem);
    free(d->table);
}

static void seq_on_cache(attn_seq *s, const dcache *d)
{
    s->cache_k = d->c.k;
    s->cache_v = d->c.v;
    s->cache_dtype = (int)d->c.dtype;
    s->cache_block_rows = d->c.block_rows;
    s->cache_block_table = d->c.block_table;
    s->cache_block_stride = d->c.block_stride;
}

/* ------------------------------------------------------------- masks */

/* The masks of one case, as functions of (query position, key) so calls of
 * different T see the same mask: key padding, a bool (T, S) plane, a float one. */
typedef struct masks {
    int kpm, boolean, flt, window;
    uint64_t seed;
} masks;

static uint64_t mix(uint64_t a, uint64_t b) { test_rng r = {a * 0x9e3779b97f4a7c15ull ^ b}; return rng_next(&r); }

static void masks_apply(const masks *m, attn_seq *s, int P, uint8_t **kpm, uint8_t **bm, float **fm)
{
    s->window = m->window;
    if (m->kpm) {
        *kpm = malloc((size_t)s->s);
        for (int j = 0; j < s->s; j++) (*kpm)[j] = mix(m->seed, (uint64_t)j) % 7 == 0;
        s->key_padding_mask = *kpm;
    }
    if (m->boolean || m->flt) {
        const size_t n = (size_t)s->t * s->s;
        if (m->boolean) *bm = malloc(n);
        else *fm = malloc(fsz(n));
        for (int t = 0; t < s->t; t++)
            for (int j = 0; j < s->s; j++) {
                const uint64_t h = mix(m->seed + 1, (uint64_t)(P + t) * 1000003u + (uint64_t)j);
                if (m->boolean) (*bm)[(size_t)t * s->s + j] = h % 5 == 0;
                else (*fm)[(size_t)t * s->s + j] = h % 9 == 0 ? -INFINITY : (float)(h % 1000) / 500.0f - 1.0f;
            }
        s->attn_mask_kind = m->boolean ? ATTN_MASK_BOOL : ATTN_MASK_FLOAT;
        s->attn_mask = m->boolean ? (const void *)*bm : (const void *)*fm;
    }
}

/* Appends t rows x to cache d holding P rows (masks m), output to out. */
static attn_status append(const attn_layer *l, const dcache *d, const float *x, int P, int t, const masks *m,
                          attn_workspace *ws, float *out, int reference)
{
    attn_seq s = {.t = t, .s = P + t, .query = x, .is_causal = 1, .output = out, .cache_len = P, .cache_append = 1};
    seq_on_cache(&s, d);
    uint8_t *kpm = NULL, *bm = NULL;
    float *fm = NULL;
    masks_apply(m, &s, P, &kpm, &bm, &fm);
    attn_error err = {0};
    attn_status st = reference ? attn__forward_reference(l, &s, 1, NULL, NULL, &err)
                               : attn_forward(l, &s, 1, ws, NULL, &err);
    CHECK_MSG(st == ATTN_OK, "append %d rows at %d: %s", t, P, err.message);
    free(kpm);
    free(bm);
    free(fm);
    return st;
}

/* ------------------------------------------------------------- cases */

static gqa_shape random_shape(test_rng *r)
{
    static const int ratios[] = {1, 2, 4, 8};
    static const int dims[] = {2, 4, 8, 12, 16, 24, 64, 66};
    gqa_shape s = {0};
    s.g = (int[]){1, 2, 3, 8}[rng_int(r, 0, 3)];
    s.h = s.g * ratios[rng_int(r, 0, s.g == 8 ? 1 : 3)];
    s.d_k = dims[rng_int(r, 0, 7)];
    s.d_v = rng_int(r, 0, 2) ? s.d_k : rng_int(r, 1, 70);
    s.e = rng_int(r, 4, 40);
    s.bias = rng_int(r, 0, 1);
    s.out_proj = rng_int(r, 0, 3) != 0;
    s.e_out = s.out_proj ? rng_int(r, 1, 24) : s.h * s.d_v;
    if (rng_int(r, 0, 1)) s.rope = (attn_rope){.style = rng_int(r, 0, 1) ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED};
    return s;
}

/* One case: a cache of P rows of dtype dt, then T rows appended by the decode
 * kernel; the same against the reference and against the fused kernel. */
static void compare_case(test_rng *r, int c, int dt, int P, int T, int B, int threads)
{
    gqa_shape sh = random_shape(r);
    attn_layer *l = gqa_layer(r, &sh);
    if (l == NULL) return;
    const int side = B > 0 && rng_int(r, 0, 1);
    masks m = {.seed = rng_next(r)};
    const int mk = rng_int(r, 0, 5);
    m.kpm = mk == 1 || mk == 4;
    m.boolean = mk == 2;
    m.flt = mk == 3 || mk == 4;
    m.window = rng_int(r, 0, 3) == 0 ? rng_int(r, 1, P + T + 5) : 0;
    float *xp = rand_floats(r, (size_t)(P ? P : 1) * sh.e, 1.0f);
    float *xt = rand_floats(r, (size_t)(T + 8) * sh.e, 1.0f); /* T rows, then 8 for the fused run */
    const size_t no = (size_t)(T + 8) * sh.e_out;
    float *o_dec = malloc(fsz(no)), *o_ref = malloc(fsz(no)), *o_fused = malloc(fsz(no)), *o_pre = malloc(
                                                                                             fsz((size_t)(P ? P : 1) * sh.e_out));
    attn_workspace *ws = test_ws(ATTN_KERNEL_AUTO, threads, 0);
    dcache d, d2, f32;
    dcache_init(&d, r, l, P + T + 8, dt, B, side);
    dcache_init(&f32, r, l, P + T + 8, ATTN_KV_F32, 0, 0);
    const masks none = {0};
    if (P > 0) append(l, &d, xp, 0, P, &none, ws, o_pre, 0); /* the prefix, one prefill call */
    dcache_copy(&d2, &d);
    if (P > 0) /* the reference reads what the kernels read: the prefix as float32 */
        CHECK_INT_EQ(attn_kv_load(l, &d.c, 0, P, f32.c.k, f32.c.v, NULL), ATTN_OK);
    const int ok = append(l, &d, xt, P, T, &m, ws, o_dec, 0) == ATTN_OK &&
                   append(l, &f32, xt, P, T, &m, NULL, o_ref, 1) == ATTN_OK &&
                   append(l, &d2, xt, P, T + 8, &m, ws, o_fused, 0) == ATTN_OK;
    const size_t n = (size_t)T * sh.e_out;
    if (ok) {
        const double er = rel_err(o_dec, o_ref, n), ef = rel_err(o_dec, o_fused, n);
        keep_max(&worst.ref[dt], er);
        keep_max(&worst.fused[dt], ef);
        /* vs fused: the same cache, except that INT8 scales of the last block
         * grow with the 8 extra rows; F16 / BF16 read the same halves. */
        const double fb = dt == ATTN_KV_INT8 ? dtype_bound[dt] : 2e-6;
        CHECK_MSG(er <= dtype_bound[dt] && ef <= fb,
                  "case %d %s: vs reference %.3g (<= %.3g), vs fused %.3g (<= %.3g); h=%d g=%d d_k=%d d_v=%d P=%d "
                  "T=%d B=%d side=%d threads=%d rope=%d window=%d masks %d%d%d",
                  c, dtype_name[dt], er, dtype_bound[dt], ef, fb, sh.h, sh.g, sh.d_k, sh.d_v, P, T, B, side, threads,
                  (int)sh.rope.style, m.window, m.kpm, m.boolean, m.flt);
    }
    dcache_free(&d);
    dcache_free(&d2);
    dcache_free(&f32);
    free(xp); free(xt); free(o_dec); free(o_ref); free(o_fused); free(o_pre);
    attn_workspace_free(ws);
    attn_layer_free(l);
}

TEST(decode_vs_reference_and_fused)
{
    test_rng r = {0x6465636fu};
    static const int blocks[] = {0, 1, 4, 16, 128, 256};
    for (int c = 0; c < 64; c++) {
        const int dt = c % 4, B = dt == ATTN_KV_INT8 ? blocks[rng_int(&r, 1, 5)] : blocks[rng_int(&r, 0, 5)];
        const int P = c % 8 == 7 ? rng_int(&r, 2000, 3000) : rng_int(&r, 0, 400), T = rng_int(&r, 1, 8);
        compare_case(&r, c, dt, P, T, B, 1 + c % 2);
    }
    printf("decode vs reference (max rel. error):");
    for (int dt = 0; dt < 4; dt++) printf(" %s %.3g", dtype_name[dt], worst.ref[dt]);
    printf("\ndecode vs fused kernel on the same cache:");
    for (int dt = 0; dt < 4; dt++) printf(" %s %.3g", dtype_name[dt], worst.fused[dt]);
    printf("\n");
}

/* Paged float32 == contiguous float32, bit for bit, over caches that cross
 * tiles (128 keys) and blocks of every size, split or not. */
TEST(paged_f32_bit_identical_long)
{
    test_rng r = {0x62697473u};
    static const int blocks[] = {1, 2, 8, 64, 128, 512};
    for (int c = 0; c < 24; c++) {
        gqa_shape sh = random_shape(&r);
        attn_layer *l = gqa_layer(&r, &sh);
        if (l == NULL) return;
        const int P = rng_int(&r, 100, 2600), T = rng_int(&r, 1, 8), B = blocks[c % 6];
        attn_workspace *ws = test_ws(ATTN_KERNEL_AUTO, 1 + c % 2, 0);
        float *xp = rand_floats(&r, (size_t)P * sh.e, 1.0f), *xt = rand_floats(&r, (size_t)T * sh.e, 1.0f);
        float *pre = malloc(fsz((size_t)P * sh.e_out)), *oc = malloc(fsz((size_t)T * sh.e_out)),
              *op = malloc(fsz((size_t)T * sh.e_out));
        dcache dc, dp;
        dcache_init(&dc, &r, l, P + T, ATTN_KV_F32, 0, 0);
        dcache_init(&dp, &r, l, P + T, ATTN_KV_F32, B, c % 3 == 0);
        masks m = {.window = c % 4 == 1 ? rng_int(&r, 1, P) : 0, .kpm = c % 5 == 2, .seed = rng_next(&r)};
        const masks none = {0};
        const int ok = append(l, &dc, xp, 0, P, &none, ws, pre, 0) == ATTN_OK &&
                       append(l, &dp, xp, 0, P, &none, ws, pre, 0) == ATTN_OK &&
                       append(l, &dc, xt, P, T, &m, ws, oc, 0) == ATTN_OK &&
                       append(l, &dp, xt, P, T, &m, ws, op, 0) == ATTN_OK;
        CHECK_MSG(ok && memcmp(oc, op, fsz((size_t)T * sh.e_out)) == 0,
                  "case %d: paged B=%d != contiguous: %.3g (P=%d T=%d h=%d g=%d d_k=%d)", c, B,
                  max_abs_diff(oc, op, (size_t)T * sh.e_out), P, T, sh.h, sh.g, sh.d_k);
        dcache_free(&dc); dcache_free(&dp);
        free(xp); free(xt); free(pre); free(oc); free(op);
        attn_workspace_free(ws);
        attn_layer_free(l);
    }
}

/* The cuts attn__decode_split makes for the shapes below. */
TEST(split_policy)
{
    test_rng r = {7};
    gqa_shape sh = {.h = 32, .g = 8, .d_k = 64, .d_v = 64, .e = 16, .e_out = 16, .out_proj = 1};
    attn_layer *l = gqa_layer(&r, &sh);
    if (l == NULL) return;
    attn_seq s = {.t = 1, .s = 32769};
    int heads, chunks;
    attn__decode_split(l, &s, 1, 1, &heads, &chunks); /* one thread: never */
    CHECK(heads == 8 && chunks == 1);
    attn__decode_split(l, &s, 4, 2, &heads, &chunks); /* enough sequences: never */
    CHECK(heads == 8 && chunks == 1);
    /* fewer: n_threads / gcd(n_seqs, n_threads) jobs a sequence, key chunks first */
    attn__decode_split(l, &s, 1, 2, &heads, &chunks); /* one long sequence, two threads: 2 key chunks */
    CHECK(heads == 8 && chunks == 2);
    attn__decode_split(l, &s, 2, 2, &heads, &chunks); /* one sequence a thread: never */
    CHECK(heads == 8 && chunks == 1);
    attn__decode_split(l, &s, 3, 2, &heads, &chunks); /* three: 2 chunks each, three jobs a thread */
    CHECK(heads == 8 && chunks == 2);
    attn__decode_split(l, &s, 1, 4, &heads, &chunks);
    CHECK(heads == 8 && chunks == 4);
    attn__decode_split(l, &s, 6, 4, &heads, &chunks); /* 6 on 4 threads: 2 each, 12 jobs */
    CHECK(heads == 8 && chunks == 2);
    s.s = 1500; /* still enough keys for chunks of >= 256 */
    attn__decode_split(l, &s, 1, 2, &heads, &chunks);
    CHECK(heads == 8 && chunks == 2);
    s.s = 600; /* 2 chunks of >= 256 keys, then the KV heads in 2 groups for 4 threads */
    attn__decode_split(l, &s, 1, 4, &heads, &chunks);
    CHECK(heads == 4 && chunks == 2);
    s.s = 300; /* one chunk: the KV heads in groups instead */
    attn__decode_split(l, &s, 1, 2, &heads, &chunks);
    CHECK(heads == 4 && chunks == 1);
    attn__decode_split(l, &s, 1, 16, &heads, &chunks); /* more groups wanted than KV heads: one each */
    CHECK(heads == 1 && chunks == 1);
    attn_layer_free(l);
}

/* Two equal caches (dtype dt, blocks of B) holding the same P prefix rows
 * of a layer of shape sh, and T rows to append to each in two ways. */
typedef struct twin {
    attn_layer *l;
    gqa_shape sh;
    dcache a, b;
    float *xt, *o1, *o2;
    int P, T;
} twin;

static int twin_init(twin *w, test_rng *r, const gqa_shape *sh, int P, int T, int dt, int B)
{
    memset(w, 0, sizeof *w);
    w->sh = *sh;
    w->P = P;
    w->T = T;
    w->l = gqa_layer(r, sh);
    if (w->l == NULL) return -1;
    float *xp = rand_floats(r, (size_t)P * sh->e, 1.0f), *pre = malloc(fsz((size_t)(P ? P : 1) * sh->e_out));
    w->xt = rand_floats(r, (size_t)T * sh->e, 1.0f);
    w->o1 = malloc(fsz((size_t)T * sh->e_out));
    w->o2 = malloc(fsz((size_t)T * sh->e_out));
    attn_workspace *ws = test_ws(ATTN_KERNEL_AUTO, 1, 0);
    dcache_init(&w->a, r, w->l, P + T, dt, B, 0);
    const masks none = {0};
    append(w->l, &w->a, xp, 0, P, &none, ws, pre, 0);
    dcache_copy(&w->b, &w->a);
    attn_workspace_free(ws);
    free(xp);
    free(pre);
    return 0;
}

/* The appends: cache a on ws1 into o1, cache b on ws2 into o2; the difference. */
static double twin_run(twin *w, const masks *m, attn_workspace *ws1, attn_workspace *ws2, int portable2)
{
    const int ok1 = append(w->l, &w->a, w->xt, w->P, w->T, m, ws1, w->o1, 0) == ATTN_OK;
    attn__decode_portable_only = portable2;
    const int ok2 = append(w->l, &w->b, w->xt, w->P, w->T, m, ws2, w->o2, 0) == ATTN_OK;
    attn__decode_portable_only = 0;
    return ok1 && ok2 ? rel_err(w->o2, w->o1, (size_t)w->T * w->sh.e_out) : 1.0;
}

static void twin_free(twin *w)
{
    dcache_free(&w->a);
    dcache_free(&w->b);
    free(w->xt); free(w->o1); free(w->o2);
    attn_layer_free(w->l);
}

/* Split jobs (2 threads, one sequence) against the unsplit job (1 thread):
 * the log-sum-exp merge is exact up to float rounding, with chunks the
 * window or masks leave empty, and rows that see no key at all. */
TEST(split_equals_unsplit)
{
    test_rng r = {0x73706c74u};
    attn_workspace *w1 = test_ws(ATTN_KERNEL_AUTO, 1, 0), *w2 = test_ws(ATTN_KERNEL_AUTO, 2, 0);
    for (int c = 0; c < 16; c++) {
        gqa_shape sh = random_shape(&r);
        /* short caches split by KV heads (g > 1), long ones by keys */
        const int P = c < 4 && sh.g > 1 ? rng_int(&r, 300, 1500) : rng_int(&r, 2048, 9000), T = rng_int(&r, 1, 8);
        const int dt = c % 4;
        twin w;
        if (twin_init(&w, &r, &sh, P, T, dt, (int[]){16, 64, 256}[c % 3]) != 0) return;
        attn_seq probe = {.t = T, .s = P + T};
        int heads, chunks;
        attn__decode_split(w.l, &probe, 1, 2, &heads, &chunks);
        CHECK_MSG(heads < sh.g || chunks > 1, "case %d: S=%d g=%d is not split", c, P + T, sh.g);
        masks m = {.seed = rng_next(&r), .kpm = c % 3 == 1, .flt = c % 5 == 2, .boolean = c == 5};
        if (c % 4 == 3) m.window = rng_int(&r, 1, 300); /* most chunks see nothing */
        const double e = twin_run(&w, &m, w1, w2, 0);
        keep_max(&worst.split, e);
        CHECK_MSG(e <= 2e-6, "case %d %s: split (%d heads/job, %d chunks) vs unsplit %.3g (P=%d T=%d g=%d h=%d)", c,
                  dtype_name[dt], heads, chunks, e, P, T, sh.g, sh.h);
        twin_free(&w);
    }
    attn_workspace_free(w1);
    attn_workspace_free(w2);
    printf("split-KV vs unsplit: max rel. difference %.3g\n", worst.split);
}

/* Sessions in one call (decode rows of several dtypes and lengths, and a
 * prefill) answer as each does alone. */
TEST(batch_equals_one_by_one)
{
    test_rng r = {0x62617463u};
    gqa_shape sh = {.h = 8, .g = 2, .d_k = 16, .d_v = 16, .e = 32, .e_out = 32, .bias = 1, .out_proj = 1,
                    .rope = {.style = ATTN_ROPE_HALF}};
    attn_layer *l = gqa_layer(&r, &sh);
    if (l == NULL) return;
    enum { N = 6 };
    static const int Ps[N] = {3000, 10, 700, 0, 1500, 40}, Ts[N] = {1, 4, 8, 20, 1, 9};
    attn_workspace *ws = test_ws(ATTN_KERNEL_AUTO, 2, 0);
    dcache d[N], alone[N];
    float *x[N], *ob[N], *oa[N];
    attn_seq seqs[N];
    const masks none = {0};
    for (int i = 0; i < N; i++) {
        dcache_init(&d[i], &r, l, Ps[i] + Ts[i], i % 4, 32, i % 2);
        x[i] = rand_floats(&r, (size_t)(Ps[i] + Ts[i]) * sh.e, 1.0f);
        ob[i] = malloc(fsz((size_t)(Ps[i] + Ts[i]) * sh.e_out));
        oa[i] = malloc(fsz((size_t)Ts[i] * sh.e_out));
        if (Ps[i] > 0) append(l, &d[i], x[i], 0, Ps[i], &none, ws, ob[i], 0);
        dcache_copy(&alone[i], &d[i]);
        append(l, &alone[i], x[i] + (size_t)Ps[i] * sh.e, Ps[i], Ts[i], &none, ws, oa[i], 0);
        seqs[i] = (attn_seq){.t = Ts[i], .s = Ps[i] + Ts[i], .query = x[i] + (size_t)Ps[i] * sh.e, .is_causal = 1,
                             .output = ob[i], .cache_len = Ps[i], .cache_append = 1};
        seq_on_cache(&seqs[i], &d[i]);
    }
    attn_error err = {0};
    CHECK_MSG(attn_forward(l, seqs, N, ws, NULL, &err) == ATTN_OK, "batch: %s", err.message);
    for (int i = 0; i < N; i++) {
        /* float32: rounding only. Compact dtypes: one GEMM over the batch may
         * round a projected K/V element differently from the lone call, and
         * the stored element then differs by up to one F16/BF16/INT8 step. */
        static const double tol[4] = {2e-6, 1e-4, 1e-3, 1e-2};
        const double e = rel_err(ob[i], oa[i], (size_t)Ts[i] * sh.e_out);
        CHECK_MSG(e <= tol[i % 4], "sequence %d (P=%d T=%d %s): batch vs alone %.3g", i, Ps[i], Ts[i],
                  dtype_name[i % 4], e);
        dcache_free(&d[i]); alone[i].table = NULL; dcache_free(&alone[i]);
        free(x[i]); free(ob[i]); free(oa[i]);
    }
    attn_workspace_free(ws);
    attn_layer_free(l);
}

/* The portable kernel (any CPU) against the AVX2 one. */
TEST(portable_equals_avx2)
{
    test_rng r = {0x706f7274u};
    attn_workspace *ws = test_ws(ATTN_KERNEL_AUTO, 1, 0);
    for (int c = 0; c < 16; c++) {
        const gqa_shape sh = random_shape(&r);
        const int dt = c % 4;
        twin w;
        if (twin_init(&w, &r, &sh, rng_int(&r, 1, 700), rng_int(&r, 1, 8), dt, (int[]){1, 8, 128}[c % 3]) != 0)
            return;
        const masks m = {.seed = rng_next(&r), .kpm = c % 2, .window = c % 3 ? 0 : 50};
        attn__decode_int8_queries = -1; /* INT8: the float kernels (int8 queries: int8_queries_kernels_agree) */
        const double e = twin_run(&w, &m, ws, ws, 1);
        attn__decode_int8_queries = 0;
        keep_max(&worst.portable, e);
        CHECK_MSG(e <= 2e-6, "case %d %s: portable vs AVX2 %.3g", c, dtype_name[dt], e);
        twin_free(&w);
    }
    attn_workspace_free(ws);
    printf("portable vs AVX2 decode kernel: max rel. difference %.3g\n", worst.portable);
}

/* On a CPU with AVX-512: its axpys against the AVX2 kernel's
 * (attn__decode_no_avx512, the test hook), the same bits for every dtype,
 * shapes whose d_v is or is not a multiple of 16 and rows per KV head not a
 * multiple of 4. Elsewhere both runs take the AVX2 path (still checked). */
TEST(avx512_equals_avx2)
{
    test_rng r = {0x61357532u};
    attn_workspace *ws = test_ws(ATTN_KERNEL_AUTO, 1, 0);
    for (int c = 0; c < 16 + 8; c++) {
        gqa_shape sh = random_shape(&r);
        if (c >= 16) /* head sizes 64 and 128 (compiled as constants), four query heads a KV head, every dtype */
            sh = (gqa_shape){.g = 2, .h = 8, .d_k = c < 20 ? 64 : 128, .d_v = c < 20 ? 64 : 128, .e = 32,
                             .bias = c % 2, .out_proj = 1, .e_out = 16};
        const int dt = c % 4;
        twin w;
        if (twin_init(&w, &r, &sh, rng_int(&r, 1, 700), rng_int(&r, 1, 8), dt, (int[]){1, 8, 128}[c % 3]) != 0)
            return;
        const masks m = {.seed = rng_next(&r), .kpm = c % 2, .window = c % 3 ? 0 : 50};
        attn__decode_int8_queries = -1; /* INT8: the float kernels (int8 queries: int8_queries_kernels_agree) */
        attn__decode_no_avx512 = 1;
        const int ok1 = append(w.l, &w.a, w.xt, w.P, w.T, &m, ws, w.o1, 0) == ATTN_OK;
        attn__decode_no_avx512 = 0;
        const int ok2 = append(w.l, &w.b, w.xt, w.P, w.T, &m, ws, w.o2, 0) == ATTN_OK;
        attn__decode_int8_queries = 0;
        CHECK(ok1 && ok2);
        CHECK_MSG(memcmp(w.o1, w.o2, fsz((size_t)w.T * w.sh.e_out)) == 0, "case %d %s (d_v %d): AVX-512 vs AVX2",
                  c, dtype_name[dt], sh.d_v);
        twin_free(&w);
    }
    attn_workspace_free(ws);
}

/* The AVX2 kernel's sub-block size (attn__decode_sub_bytes: from one key
 * per sub-block up to the 16-key cap) and prefetch distance
 * (attn__decode_k_ahead; -1: none) change no bit of the output, every dtype,
 * masks and windows, blocks of 1, 8 and 128 rows. */
TEST(sub_blocks_and_prefetch_bit_identical)
{
    static const int subs[3] = {1, 300, 1 << 20}, aheads[3] = {-1, 1, 9};
    test_rng r = {0x73756262u};
    attn_workspace *ws = test_ws(ATTN_KERNEL_AUTO, 1, 0);
    for (int c = 0; c < 12; c++) {
        const gqa_shape sh = random_shape(&r);
        const int dt = c % 4;
        twin w;
        if (twin_init(&w, &r, &sh, rng_int(&r, 1, 700), rng_int(&r, 1, 8), dt, (int[]){1, 8, 128}[c % 3]) != 0)
            return;
        const masks m = {.seed = rng_next(&r), .kpm = c % 2, .window = c % 3 ? 0 : 50};
        const int ok1 = append(w.l, &w.a, w.xt, w.P, w.T, &m, ws, w.o1, 0) == ATTN_OK;
        attn__decode_sub_bytes = subs[c % 3];
        attn__decode_k_ahead = aheads[(c / 3) % 3];
        const int ok2 = append(w.l, &w.b, w.xt, w.P, w.T, &m, ws, w.o2, 0) == ATTN_OK;
        attn__decode_sub_bytes = attn__decode_k_ahead = 0;
        CHECK(ok1 && ok2);
        CHECK_MSG(memcmp(w.o1, w.o2, fsz((size_t)w.T * w.sh.e_out)) == 0, "case %d %s: sub %d ahead %d differ", c,
                  dtype_name[dt], subs[c % 3], aheads[(c / 3) % 3]);
        twin_free(&w);
    }
    attn_workspace_free(ws);
}

/* The pipelined tiles (the P.V of a tile interleaved with the next tile's
 * scores, prefetches spread over the passes, and on AVX-512VL CPUs four-key
 * scores) against the previous three-phase kernel (attn__decode_three_phase):
 * the same bits for every dtype, masks and windows, blocks of 1, 8 and 256
 * rows, caches of one to many tiles, 1 to 8 query rows. */
TEST(pipelined_equals_three_phase)
{
    test_rng r = {0x70697065u};
    attn_workspace *ws = test_ws(ATTN_KERNEL_AUTO, 1, 0);
    for (int c = 0; c < 16; c++) {
        const gqa_shape sh = random_shape(&r);
        const int dt = c % 4, P = c < 8 ? rng_int(&r, 1, 700) : rng_int(&r, 700, 3000);
        twin w;
        if (twin_init(&w, &r, &sh, P, rng_int(&r, 1, 8), dt, (int[]){1, 8, 256}[c % 3]) != 0) return;
        const masks m = {.seed = rng_next(&r), .kpm = c % 2, .flt = c % 5 == 2, .window = c % 3 ? 0 : 50};
        attn__decode_three_phase = 1;
        const int ok1 = append(w.l, &w.a, w.xt, w.P, w.T, &m, ws, w.o1, 0) == ATTN_OK;
        attn__decode_three_phase = 0;
        const int ok2 = append(w.l, &w.b, w.xt, w.P, w.T, &m, ws, w.o2, 0) == ATTN_OK;
        CHECK(ok1 && ok2);
        CHECK_MSG(memcmp(w.o1, w.o2, fsz((size_t)w.T * w.sh.e_out)) == 0, "case %d %s (P %d, d_k %d): pipelined vs "
                  "three-phase", c, dtype_name[dt], P, sh.d_k);
        twin_free(&w);
    }
    attn_workspace_free(ws);
}

/* The INT8 scores kernel this CPU runs by default (decode.c's q8_kernel_for). */
static const char *int8_kernel_here(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return "portable";
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni"))
        return "AVX-512 VNNI";
    return "AVX2";
#else
    return "portable";
#endif
}

/* One append of w's rows onto cache d into o with attn__decode_int8_queries
 * = q8 and attn__decode_no_avx512 = no512; 1 if it succeeded. */
static int int8_append(const twin *w, const dcache *d, const masks *m, attn_workspace *ws, float *o, int q8, int no512)
{
    attn__decode_int8_queries = q8;
    attn__decode_no_avx512 = no512;
    const int ok = append(w->l, d, w->xt, w->P, w->T, m, ws, o, 0) == ATTN_OK;
    attn__decode_int8_queries = 0;
    attn__decode_no_avx512 = 0;
    return ok;
}

/* INT8 caches' scores on int8 queries (attn__decode_int8_queries): the
 * default kernel (AVX-512 VNNI where the CPU has it, else AVX2) and the
 * AVX2 one give the portable integer kernel's bits — head sizes with and
 * without whole blocks (2 .. 200), key runs that end inside a group of
 * 16 / 8 keys (blocks of 1, 8, 128), rows per KV head not a multiple of 4,
 * masks, windows, the three-phase tiles — and all stay within a small
 * distance of the float-query kernels (the queries' rounding is far below
 * the cache's own). */
TEST(int8_queries_kernels_agree)
{
    static const int heads[] = {2, 24, 64, 66, 128, 200};
    test_rng r = {0x71386b72u};
    attn_workspace *ws = test_ws(ATTN_KERNEL_AUTO, 1, 0);
    double worst_q = 0.0;
    for (int c = 0; c < 24; c++) {
        gqa_shape sh = random_shape(&r);
        sh.d_k = heads[c % 6];
        if (c % 4 == 1) sh = (gqa_shape){.g = 2, .h = 8, .d_k = 64, .d_v = 64, .e = 32, .out_proj = 1, .e_out = 16,
                                         .rope = {.style = ATTN_ROPE_HALF}}; /* Llama's four rows a KV head */
        twin w;
        if (twin_init(&w, &r, &sh, rng_int(&r, 1, 700), rng_int(&r, 1, 8), ATTN_KV_INT8, (int[]){1, 8, 128}[c % 3]) != 0)
            return;
        const masks m = {.seed = rng_next(&r), .kpm = c % 2, .window = c % 3 ? 0 : 50};
        dcache f, g; /* two more copies of the prefix: the AVX2 and the float-query kernels */
        dcache_copy(&f, &w.a);
        dcache_copy(&g, &w.a);
        const size_t n = (size_t)w.T * w.sh.e_out;
        float *of = malloc(fsz(n)), *og = malloc(fsz(n));
        attn__decode_three_phase = c % 5 == 4;
        const int ok = int8_append(&w, &w.a, &m, ws, w.o1, 1, 0) && int8_append(&w, &w.b, &m, ws, w.o2, 0, 0) &&
                       int8_append(&w, &g, &m, ws, og, 0, 1) && int8_append(&w, &f, &m, ws, of, -1, 0);
        attn__decode_three_phase = 0;
        CHECK(ok);
        CHECK_MSG(memcmp(w.o1, w.o2, fsz(n)) == 0, "case %d (d_k %d, h %d, g %d, T %d): %s vs portable", c, sh.d_k,
                  sh.h, sh.g, w.T, int8_kernel_here());
        CHECK_MSG(memcmp(w.o1, og, fsz(n)) == 0, "case %d (d_k %d, h %d, g %d, T %d): AVX2 vs portable", c, sh.d_k,
                  sh.h, sh.g, w.T);
        const double e = rel_err(w.o1, of, n);
        keep_max(&worst_q, e);
        CHECK_MSG(e <= 5e-3, "case %d (d_k %d): int8 vs float queries %.3g", c, sh.d_k, e);
        dcache_free(&f);
        dcache_free(&g);
        free(of);
        free(og);
        twin_free(&w);
    }
    attn_workspace_free(ws);
    printf("int8 queries: the %s and AVX2 kernels bit-identical to the portable one; max rel. difference to float "
           "queries %.3g\n",
           int8_kernel_here(), worst_q);
}

/* attn__forward_kv_bytes (bench_decode's K/V byte count): every visible row
 * of every KV head once, in the cache's element size, split or not. */
TEST(kv_bytes)
{
    test_rng r = {0x6b766279u};
    gqa_shape sh = {.h = 8, .g = 4, .d_k = 16, .d_v = 8, .e = 16, .e_out = 16, .out_proj = 1};
    attn_layer *l = gqa_layer(&r, &sh);
    if (l == NULL) return;
    for (int threads = 1; threads <= 2; threads++)
        for (int dt = 0; dt < 4; dt++) {
            attn_workspace *ws = test_ws(ATTN_KERNEL_AUTO, threads, 0);
            dcache d;
            dcache_init(&d, &r, l, 5001, dt, 64, 0);
            float x[16] = {0}, out[16];
            attn_seq s = {.t = 1, .s = 5001, .query = x, .is_causal = 1, .output = out, .cache_len = 5000,
                          .cache_append = 1};
            seq_on_cache(&s, &d);
            uint64_t bytes = 0;
            CHECK_INT_EQ(attn__forward_kv_bytes(l, &s, 1, ws, &bytes, NULL), ATTN_OK);
            const uint64_t es = dt == ATTN_KV_F32 ? 4 : dt == ATTN_KV_INT8 ? 1 : 2;
            CHECK_MSG(bytes == 5001ull * 4 * (16 + 8) * es, "%s, %d threads: %llu bytes", dtype_name[dt], threads,
                      (unsigned long long)bytes);
            s.window = 100; /* only the window's rows */
            CHECK_INT_EQ(attn__forward_kv_bytes(l, &s, 1, ws, &bytes, NULL), ATTN_OK);
            CHECK(bytes == 100ull * 4 * (16 + 8) * es);
            dcache_free(&d);
            attn_workspace_free(ws);
        }
    attn_layer_free(l);
}

int main(void)
{
    RUN(decode_vs_reference_and_fused);
    RUN(paged_f32_bit_identical_long);
    RUN(split_policy);
    RUN(split_equals_unsplit);
    RUN(batch_equals_one_by_one);
    RUN(portable_equals_avx2);
    RUN(sub_blocks_and_prefetch_bit_identical);
    RUN(avx512_equals_avx2);
    RUN(pipelined_equals_three_phase);
    RUN(int8_queries_kernels_agree);
    RUN(kv_bytes);
    return check_summary();
}
