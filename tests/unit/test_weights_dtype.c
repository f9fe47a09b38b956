/* test_weights_dtype.c — layers that keep F16 / BF16 projection weights
 * (attn_weight_dtype) compute what a float32 layer holding the same widened
 * values computes: bit for bit where the few-row (skinny) kernel runs, within
 * 1e-6 (relative to max(1, max|out|)) where the widened-tile GEMM runs — for
 * every checkpoint family (mha, explicit, llama with GQA + RoPE, qwen2 biases,
 * mistral stored BF16, bert, gpt2), one-shot forwards, KV-cache session steps,
 * decode batches, attn_project_kv, threaded workspaces and the streamed plan;
 * the loader's default keeps the stored dtype; weights memory halves
 * (attn_layer_info.weights_bytes); bad options and F16-range overflow are
 * refused with a message naming the culprit.
 */
#include "attn.h"
#include "check.h"
#include "core_util.h"
#include "half.h"
#include "layer_internal.h"
#include "skinny.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOOD "tests/fixtures/good/"
#define CKPT "tests/fixtures/ckpt/"

static double worst_gemm_err; /* largest GEMM-path difference seen, printed */
static int gemm_cases, gemm_exact;

/* The float32 layer holding a's widened weights (a's biases, rope, heads). */
static attn_layer *twin_of(const attn_layer *a)
{
    const size_t nq = (size_t)a->qk_dim * a->e_q, nk = (size_t)a->kv_k_dim * a->e_k,
                 nv = (size_t)a->kv_v_dim * a->e_v, no = a->w_o ? (size_t)a->e_out * a->v_dim : 0;
    float *w = malloc((nq + nk + nv + no + 1) * sizeof *w);
    if (w == NULL) return NULL;
    for (size_t i = 0; i < nq; i++) w[i] = attn__w_get(a->w_q, a->wdtype, i);
    for (size_t i = 0; i < nk; i++) w[nq + i] = attn__w_get(a->w_k, a->wdtype, i);
    for (size_t i = 0; i < nv; i++) w[nq + nk + i] = attn__w_get(a->w_v, a->wdtype, i);
    for (size_t i = 0; i < no; i++) w[nq + nk + nv + i] = attn__w_get(a->w_o, a->wdtype, i);
    attn_layer_desc d = {.num_heads = a->h, .head_dim_k = a->d_k, .head_dim_v = a->d_v, .embed_q = a->e_q,
                         .embed_k = a->e_k, .embed_v = a->e_v, .embed_out = a->e_out, .w_q = w,
                         .w_k = w + nq, .w_v = w + nq + nk, .w_o = a->w_o ? w + nq + nk + nv : NULL,
                         .b_q = a->b_q, .b_k = a->b_k, .b_v = a->b_v, .b_o = a->b_o, .num_kv_heads = a->g,
                         .rope = a->rope, .weights_dtype = ATTN_WDTYPE_F32};
    attn_layer *l = NULL;
    attn_error err = {0};
    attn_status st = attn_layer_create(&d, &l, &err);
    CHECK_MSG(st == ATTN_OK, "twin: %s", err.message);
    free(w);
    return l;
}

/* got vs want: bit for bit when exact, else within 1e-6 relative. */
static void compare(const float *got, const float *want, size_t n, int exact, const char *what)
{
    const int same = memcmp(got, want, n * sizeof *got) == 0;
    if (exact) {
        CHECK_MSG(same, "%s: not bit-identical (max diff %g)", what, max_abs_diff(got, want, n));
        return;
    }
    const double e = rel_err(got, want, n);
    CHECK_MSG(e <= 1e-6, "%s: rel err %g > 1e-6", what, e);
    keep_max(&worst_gemm_err, e);
    gemm_cases++;
    gemm_exact += same;
}

/* Layers whose key/value widths differ from the query's: cross-attention only. */
static int cross_only(const attn_layer *l) { return l->e_k != l->e_q || l->e_v != l->e_q; }

static float *rand_rows(test_rng *r, int rows, int width)
{
    return rand_floats(r, (size_t)rows * width, 1.0f);
}

/* One attn_forward of self-attention sequences of lengths t[0..n) (causal),
 * the same inputs on both layers, outputs compared. */
static void one_shot(const attn_layer *a, const attn_layer *b, attn_workspace *wa, attn_workspace *wb,
                     const int *t, int n, int exact, const char *what)
{
    test_rng r = {7};
    attn_seq sa[4], sb[4];
    float *x[4], *oa[4], *ob[4], *kv[4] = {0};
    const int cross = cross_only(a);
    memset(sa, 0, sizeof sa);
    for (int i = 0; i < n; i++) {
        x[i] = rand_rows(&r, t[i], a->e_q);
        oa[i] = calloc((size_t)t[i] * a->e_out, sizeof(float));
        ob[i] = calloc((size_t)t[i] * a->e_out, sizeof(float));
        sa[i] = (attn_seq){.t = t[i], .s = t[i], .query = x[i], .is_causal = !cross, .output = oa[i]};
        if (cross) { /* keys and values of their own widths, one buffer */
            kv[i] = rand_rows(&r, t[i], a->e_k > a->e_v ? a->e_k : a->e_v);
            sa[i].key = sa[i].value = kv[i];
        }
        sb[i] = sa[i];
        sb[i].output = ob[i];
    }
    attn_error err = {0};
    attn_status st = attn_forward(a, sa, n, wa, NULL, &err);
    CHECK_MSG(st == ATTN_OK, "%s: %s", what, err.message);
    st = attn_forward(b, sb, n, wb, NULL, &err);
    CHECK_MSG(st == ATTN_OK, "%s (f32): %s", what, err.message);
    for (int i = 0; i < n; i++) {
        compare(oa[i], ob[i], (size_t)t[i] * a->e_out, exact, what);
        free(x[i]);
        free(kv[i]);
        free(oa[i]);
        free(ob[i]);
    }
}

/* A KV-cache session: a prefill of `prefill` rows, then `steps` steps of one
 * row, on both layers; every output and the final caches compared. The
 * prefill is exact when it has <= 16 rows; the steps always are. */
static void session(const attn_layer *a, const attn_layer *b, attn_workspace *wa, attn_workspace *wb,
                    int prefill, int steps, const char *what)
{
    test_rng r = {11};
    const int cap = prefill + steps;
    const size_t kw = (size_t)a->kv_k_dim, vw = (size_t)a->kv_v_dim, ew = (size_t)a->e_out;
    float *ka = calloc(cap * kw, 4), *va = calloc(cap * vw, 4), *kb = calloc(cap * kw, 4), *vb = calloc(cap * vw, 4);
    float *x = rand_rows(&r, cap, a->e_q), *oa = calloc(cap * ew, 4), *ob = calloc(cap * ew, 4);
    int len = 0;
    char label[128];
    for (int step = 0; step <= steps; step++) {
        const int t = step == 0 ? prefill : 1;
        attn_seq s = {.t = t, .s = len + t, .query = x + (size_t)len * a->e_q, .is_causal = 1,
                      .output = oa + (size_t)len * ew, .cache_k = ka, .cache_v = va, .cache_len = len,
                      .cache_append = 1};
        attn_error err = {0};
        CHECK_MSG(attn_forward(a, &s, 1, wa, NULL, &err) == ATTN_OK, "%s: %s", what, err.message);
        s.output = ob + (size_t)len * ew;
        s.cache_k = kb;
        s.cache_v = vb;
        CHECK_MSG(attn_forward(b, &s, 1, wb, NULL, &err) == ATTN_OK, "%s (f32): %s", what, err.message);
        snprintf(label, sizeof label, "%s step %d", what, step);
        compare(oa + (size_t)len * ew, ob + (size_t)len * ew, (size_t)t * ew, step > 0 || t <= 16, label);
        len += t;
    }
    snprintf(label, sizeof label, "%s cache", what);
    compare(ka, kb, cap * kw, prefill <= 16, label);
    compare(va, vb, cap * vw, prefill <= 16, label);
    free(ka); free(va); free(kb); free(vb); free(x); free(oa); free(ob);
}

/* n streams, each with a cache of `len` rows (filled by a float32 prefill on
 * b), one decode step each in one call: the skinny path over n rows. */
static void decode_batch(const attn_layer *a, const attn_layer *b, attn_workspace *wa, attn_workspace *wb,
                         int n, int len, const char *what)
{
    test_rng r = {13};
    const size_t kw = (size_t)a->kv_k_dim, vw = (size_t)a->kv_v_dim, ew = (size_t)a->e_out;
    attn_seq sa[16], sb[16];
    float *ca[16][2], *cb[16][2], *x[16], *oa = calloc((size_t)n * ew, 4), *ob = calloc((size_t)n * ew, 4);
    for (int i = 0; i < n; i++) {
        float *pre = rand_rows(&r, len, a->e_q), *junk = calloc((size_t)len * ew, 4);
        ca[i][0] = calloc((size_t)(len + 1) * kw, 4);
        ca[i][1] = calloc((size_t)(len + 1) * vw, 4);
        attn_seq p = {.t = len, .s = len, .query = pre, .is_causal = 1, .output = junk, .cache_k = ca[i][0],
                      .cache_v = ca[i][1], .cache_append = 1};
        CHECK(attn_forward(b, &p, 1, wb, NULL, NULL) == ATTN_OK);
        cb[i][0] = malloc((size_t)(len + 1) * kw * 4);
        cb[i][1] = malloc((size_t)(len + 1) * vw * 4);
        memcpy(cb[i][0], ca[i][0], (size_t)(len + 1) * kw * 4);
        memcpy(cb[i][1], ca[i][1], (size_t)(len + 1) * vw * 4);
        x[i] = rand_rows(&r, 1, a->e_q);
        sa[i] = (attn_seq){.t = 1, .s = len + 1, .query = x[i], .is_causal = 1, .output = oa + i * ew,
                           .cache_k = ca[i][0], .cache_v = ca[i][1], .cache_len = len, .cache_append = 1};
        sb[i] = sa[i];
        sb[i].output = ob + i * ew;
        sb[i].cache_k = cb[i][0];
        sb[i].cache_v = cb[i][1];
        free(pre);
        free(junk);
    }
    attn_error err = {0};
    CHECK_MSG(attn_forward(a, sa, n, wa, NULL, &err) == ATTN_OK, "%s: %s", what, err.message);
    CHECK_MSG(attn_forward(b, sb, n, wb, NULL, &err) == ATTN_OK, "%s (f32): %s", what, err.message);
    compare(oa, ob, (size_t)n * ew, 1, what);
    for (int i = 0; i < n; i++) {
        compare(ca[i][0], cb[i][0], (size_t)(len + 1) * kw, 1, what);
        compare(ca[i][1], cb[i][1], (size_t)(len + 1) * vw, 1, what);
        free(ca[i][0]); free(ca[i][1]); free(cb[i][0]); free(cb[i][1]); free(x[i]);
    }
    free(oa);
    free(ob);
}

/* attn_project_kv of s rows (non-rotary layers only). */
static void project_kv(const attn_layer *a, const attn_layer *b, int s, const char *what)
{
    test_rng r = {17};
    float *x = rand_rows(&r, s, a->e_k > a->e_v ? a->e_k : a->e_v);
    const size_t kn = (size_t)s * a->kv_k_dim, vn = (size_t)s * a->kv_v_dim;
    float *ka = malloc(kn * 4), *va = malloc(vn * 4), *kb = malloc(kn * 4), *vb = malloc(vn * 4);
    attn_error err = {0};
    CHECK_MSG(attn_project_kv(a, x, x, s, ka, va, &err) == ATTN_OK, "%s: %s", what, err.message);
    CHECK_MSG(attn_project_kv(b, x, x, s, kb, vb, &err) == ATTN_OK, "%s (f32): %s", what, err.message);
    compare(ka, kb, kn, s <= 16, what);
    compare(va, vb, vn, s <= 16, what);
    free(x); free(ka); free(va); free(kb); free(vb);
}

/* Every check above on the pair (a kept half, b its float32 twin). */
static void same_results(const attn_layer *a, const attn_layer *b, attn_workspace *wa, attn_workspace *wb,
                         const char *name)
{
    char what[128];
    const int t1[1] = {5}, t3[3] = {7, 9, 11};
    snprintf(what, sizeof what, "%s one-shot T=5", name);
    one_shot(a, b, wa, wb, t1, 1, 1, what);
    snprintf(what, sizeof what, "%s one-shot 3 seqs (27 rows)", name);
    one_shot(a, b, wa, wb, t3, 3, 0, what);
    if (cross_only(a)) goto memory; /* no self-attention sessions */
    snprintf(what, sizeof what, "%s session prefill 6", name);
    session(a, b, wa, wb, 6, 5, what);
    snprintf(what, sizeof what, "%s session prefill 20", name);
    session(a, b, wa, wb, 20, 3, what);
    snprintf(what, sizeof what, "%s decode batch of 4", name);
    decode_batch(a, b, wa, wb, 4, 9, what);
memory:
    if (a->rope.style == ATTN_ROPE_NONE) {
        snprintf(what, sizeof what, "%s project_kv 3", name);
        project_kv(a, b, 3, what);
        snprintf(what, sizeof what, "%s project_kv 20", name);
        project_kv(a, b, 20, what);
    }
}

/* Bytes the layer's parameters take as kept: matrices at wsize, biases at 4,
 * each padded to 64. */
static size_t expected_bytes(const attn_layer *l, size_t wsize)
{
    const size_t m[4] = {(size_t)l->qk_dim * l->e_q, (size_t)l->kv_k_dim * l->e_k, (size_t)l->kv_v_dim * l->e_v,
                         l->w_o ? (size_t)l->e_out * l->v_dim : 0};
    const size_t b[4] = {l->b_q ? (size_t)l->qk_dim : 0, l->b_k ? (size_t)l->kv_k_dim : 0,
                         l->b_v ? (size_t)l->kv_v_dim : 0, l->b_o ? (size_t)l->e_out : 0};
    size_t n = 0;
    for (int i = 0; i < 4; i++) n += (m[i] * wsize + 63) / 64 * 64 + (b[i] * 4 + 63) / 64 * 64;
    return n;
}

typedef struct fixture {
    const char *name, *path;
    int layer;
    attn_weight_dtype ask;    /* what the load asks for */
    const char *expect;       /* attn_layer_info.weights_dtype */
} fixture;

static const fixture FIXTURES[] = {
    {"mha stored bf16", GOOD "pt_bf16.safetensors", -1, ATTN_WDTYPE_DEFAULT, "BF16"},
    {"mha stored f16", GOOD "pt_f16.safetensors", -1, ATTN_WDTYPE_DEFAULT, "F16"},
    {"mha f32 -> bf16", GOOD "pt_f32.safetensors", -1, ATTN_WDTYPE_BF16, "BF16"},
    {"explicit bf16", GOOD "explicit_no_wo.safetensors", -1, ATTN_WDTYPE_BF16, "BF16"},
    {"explicit f16", GOOD "explicit_no_wo.safetensors", -1, ATTN_WDTYPE_F16, "F16"},
    {"llama gqa bf16", CKPT "llama_gqa", 1, ATTN_WDTYPE_BF16, "BF16"},
    {"llama gqa f16", CKPT "llama_gqa", 0, ATTN_WDTYPE_F16, "F16"},
    {"mistral mqa stored bf16", CKPT "mistral_mqa", 0, ATTN_WDTYPE_DEFAULT, "BF16"},
    {"qwen2 bias bf16", CKPT "qwen2_bias", 1, ATTN_WDTYPE_BF16, "BF16"},
    {"bert bf16", CKPT "bert", 1, ATTN_WDTYPE_BF16, "BF16"},
    {"bert f16", CKPT "bert", 0, ATTN_WDTYPE_F16, "F16"},
    {"gpt2 bf16", CKPT "gpt2", 1, ATTN_WDTYPE_BF16, "BF16"},
    {"gpt2 f16", CKPT "gpt2", 0, ATTN_WDTYPE_F16, "F16"},
};

static attn_layer *load(const fixture *f, attn_weight_dtype dt)
{
    attn_load_options o = {.layer = f->layer, .weights_dtype = dt};
    attn_layer *l = NULL;
    attn_error err = {0};
    attn_status st = attn_layer_load(f->path, &o, &l, &err);
    CHECK_MSG(st == ATTN_OK, "%s: %s", f->name, err.message);
    return l;
}

TEST(families)
{
    attn_workspace *ws = NULL;
    CHECK(attn_workspace_create(NULL, &ws, NULL) == ATTN_OK);
    for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) {
        const fixture *f = &FIXTURES[i];
        attn_layer *a = load(f, f->ask), *wide = load(f, ATTN_WDTYPE_F32);
        if (a == NULL || wide == NULL) {
            attn_layer_free(a);
            attn_layer_free(wide);
            continue;
        }
        attn_layer_info ia, iw;
        attn_layer_get_info(a, &ia);
        attn_layer_get_info(wide, &iw);
        CHECK_MSG(strcmp(ia.weights_dtype, f->expect) == 0, "%s: %s", f->name, ia.weights_dtype);
        CHECK_STR_EQ(iw.weights_dtype, "F32");
        CHECK_INT_EQ(ia.param_count, iw.param_count);
        CHECK_INT_EQ(ia.weights_bytes, expected_bytes(a, 2));
        CHECK_INT_EQ(iw.weights_bytes, expected_bytes(wide, 4));
        CHECK_MSG(ia.weights_bytes <= iw.weights_bytes, "%s: %zu vs %zu bytes", f->name, ia.weights_bytes,
                  iw.weights_bytes);
        /* the twin from a's widened values; for stored-half files that is what
         * weights=f32 loads (the widening at load is exact): same bits */
        attn_layer *b = twin_of(a);
        if (b != NULL && f->ask == ATTN_WDTYPE_DEFAULT) {
            const size_t n = (size_t)a->qk_dim * a->e_q;
            CHECK_MSG(memcmp(b->w_q, wide->w_q, n * 4) == 0, "%s: weights=f32 is the widened values", f->name);
        }
        if (b != NULL) same_results(a, b, ws, ws, f->name);
        attn_layer_free(a);
        attn_layer_free(b);
        attn_layer_free(wide);
    }
    attn_workspace_free(ws);
}

/* A larger layer in memory (E 1024, h 16, g 4, d 64, RoPE, biases: the GEMM
 * path widens several tiles per matrix), kept as dt, on 1 and 2 threads, and
 * through the streamed plan. Values drawn as floats then rounded to dt, so
 * the float32 twin is built from the very same floats. */
TEST_WITH(big_layer, attn_weight_dtype dt)
{
    test_rng r = {dt};
    gqa_shape sh = {.h = 16, .g = 4, .d_k = 64, .d_v = 64, .e = 1024, .e_out = 1024, .bias = 1, .out_proj = 1,
                    .rope = {.style = ATTN_ROPE_HALF, .theta = 10000}};
    float *buf = NULL;
    attn_layer_desc d = gqa_desc(&r, &sh, &buf);
    const size_t n = (size_t)(16 * 64 + 4 * 64 + 4 * 64) * 1024 + (size_t)1024 * 1024;
    for (size_t i = 0; i < n; i++) /* the matrices come first in buf */
        buf[i] = dt == ATTN_WDTYPE_BF16 ? attn__bf16_to_f32(attn__f32_to_bf16(buf[i]))
                                        : attn__f16_to_f32(attn__f32_to_f16(buf[i]));
    attn_layer *a = NULL, *b = NULL;
    d.weights_dtype = dt;
    CHECK(attn_layer_create(&d, &a, NULL) == ATTN_OK);
    d.weights_dtype = ATTN_WDTYPE_DEFAULT; /* = F32 for a layer built in memory */
    CHECK(attn_layer_create(&d, &b, NULL) == ATTN_OK);
    free(buf);
    if (a == NULL || b == NULL) goto done;
    attn_layer_info ia, ib;
    attn_layer_get_info(a, &ia);
    attn_layer_get_info(b, &ib);
    CHECK_STR_EQ(ib.weights_dtype, "F32");
    CHECK_STR_EQ(ia.weights_dtype, dt == ATTN_WDTYPE_BF16 ? "BF16" : "F16");
    /* the matrices halve; biases (1024 + 1024 + 256 + 256 floats) stay */
    CHECK_INT_EQ(ib.weights_bytes, n * 4 + 2560 * 4);
    CHECK_INT_EQ(ia.weights_bytes, n * 2 + 2560 * 4);
    /* 2 MiB of weights or more start on a 2 MiB boundary, madvised for huge pages (layer.c) */
    CHECK_MSG((uintptr_t)a->params % (2u << 20) == 0, "%s weights at %p", ia.weights_dtype, a->params);
    CHECK_MSG((uintptr_t)b->params % (2u << 20) == 0, "F32 weights at %p", b->params);
    attn_workspace *w1 = NULL, *w2 = NULL, *wst = NULL;
    attn_workspace_options o2 = {.n_threads = 2}, ost = {.max_scratch_bytes = 1};
    CHECK(attn_workspace_create(NULL, &w1, NULL) == ATTN_OK);
    CHECK(attn_workspace_create(&o2, &w2, NULL) == ATTN_OK);
    CHECK(attn_workspace_create(&ost, &wst, NULL) == ATTN_OK);
    const char *name = dt == ATTN_WDTYPE_BF16 ? "big bf16" : "big f16";
    char what[96];
    const int t1[1] = {3}, t2[2] = {40, 24};
    snprintf(what, sizeof what, "%s 1 thread", name);
    same_results(a, b, w1, w1, what);
    snprintf(what, sizeof what, "%s 2 threads", name);
    same_results(a, b, w2, w2, what);
    /* threads change no bit of a kept-half layer's projections */
    snprintf(what, sizeof what, "%s 2 vs 1 threads, 3 rows", name);
    one_shot(a, a, w2, w1, t1, 1, 1, what);
    snprintf(what, sizeof what, "%s 2 vs 1 threads, 64 rows", name);
    one_shot(a, a, w2, w1, t2, 2, 1, what);
    /* the streamed plan (slices of W, W_O's columns with a stride) */
    snprintf(what, sizeof what, "%s streamed", name);
    one_shot(a, b, wst, wst, t2, 1, 0, what);
    attn_forward_stats st = {0};
    test_rng rx = {5};
    float *x = rand_rows(&rx, 40, 1024), *out = malloc(40 * 1024 * 4);
    attn_seq s = {.t = 40, .s = 40, .query = x, .output = out};
    CHECK(attn_forward(a, &s, 1, wst, &st, NULL) == ATTN_OK);
    CHECK_INT_EQ(st.streamed, 1);
    free(x);
    free(out);
    attn_workspace_free(w1);
    attn_workspace_free(w2);
    attn_workspace_free(wst);
done:
    attn_layer_free(a);
    attn_layer_free(b);
}

TEST(big_bf16) { check_case_big_layer(ATTN_WDTYPE_BF16); }
TEST(big_f16) { check_case_big_layer(ATTN_WDTYPE_F16); }

TEST(refusals)
{
    float w[16], big[16];
    for (int i = 0; i < 16; i++) {
        w[i] = 0.25f * (float)(i - 8);
        big[i] = w[i];
    }
    big[5] = 70000.0f; /* beyond F16's 65504 */
    attn_layer_desc d = {.num_heads = 2, .head_dim_k = 2, .head_dim_v = 2, .embed_q = 4, .embed_k = 4,
                         .embed_v = 4, .embed_out = 4, .w_q = w, .w_k = w, .w_v = big, .w_o = w};
    attn_layer *l = (attn_layer *)&d;
    attn_error err = {0};
    d.weights_dtype = ATTN_WDTYPE_F16;
    CHECK_INT_EQ(attn_layer_create(&d, &l, &err), ATTN_ERR_LIMIT);
    CHECK(l == NULL);
    CHECK_MSG(strstr(err.message, "desc.w_v[1][1] = 70000") != NULL, "%s", err.message);
    CHECK(strstr(err.message, "F16") != NULL);
    d.weights_dtype = ATTN_WDTYPE_BF16; /* fits BF16 */
    CHECK_INT_EQ(attn_layer_create(&d, &l, &err), ATTN_OK);
    attn_layer_info in;
    attn_layer_get_info(l, &in);
    CHECK_STR_EQ(in.weights_dtype, "BF16");
    attn_layer_free(l);
    d.weights_dtype = (attn_weight_dtype)7;
    CHECK_INT_EQ(attn_layer_create(&d, &l, &err), ATTN_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "desc.weights_dtype = 7") != NULL);
    attn_load_options o = {.layer = 0, .weights_dtype = (attn_weight_dtype)-1};
    CHECK_INT_EQ(attn_layer_load(CKPT "bert", &o, &l, &err), ATTN_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "opts.weights_dtype = -1") != NULL);
    CHECK(l == NULL);
    CHECK_STR_EQ(attn_weight_dtype_name(ATTN_WDTYPE_BF16), "bf16");
    CHECK_STR_EQ(attn_weight_dtype_name(ATTN_WDTYPE_F16), "f16");
    CHECK_STR_EQ(attn_weight_dtype_name(ATTN_WDTYPE_F32), "f32");
    CHECK_STR_EQ(attn_weight_dtype_name(ATTN_WDTYPE_DEFAULT), "default");
    CHECK_STR_EQ(attn_weight_dtype_name((attn_weight_dtype)9), "unknown");
    /* in memory from floats, the default stays F32 */
    d.weights_dtype = ATTN_WDTYPE_DEFAULT;
    d.w_v = w;
    CHECK_INT_EQ(attn_layer_create(&d, &l, &err), ATTN_OK);
    attn_layer_get_info(l, &in);
    CHECK_STR_EQ(in.weights_dtype, "F32");
    attn_layer_free(l);
}

/* The rounding helpers: nearest even, exact round trips. */
TEST(rounding)
{
    CHECK_INT_EQ(attn__f32_to_bf16(1.0f), 0x3f80);
    CHECK_INT_EQ(attn__f32_to_bf16(1.0f / 3.0f), 0x3eab);     /* torch: 0x3eaaaaab -> 0x3eab */
    CHECK_INT_EQ(attn__f32_to_f16(1.0f / 3.0f), 0x3555);
    CHECK_INT_EQ(attn__f32_to_f16(65504.0f), 0x7bff);
    CHECK_INT_EQ(attn__f32_to_f16(0x1p-24f), 0x0001);          /* smallest subnormal */
    CHECK_INT_EQ(attn__f32_to_f16(-0.0f), 0x8000);
    CHECK(attn__f16_fits(65519.0f) && !attn__f16_fits(65520.0f) && !attn__f16_fits(-1e6f));
    for (uint32_t h = 0; h < 0x10000; h++) {
        const uint16_t b = (uint16_t)h;
        const float fb = attn__bf16_to_f32(b), fh = attn__f16_to_f32(b);
        if (isfinite(fb)) CHECK_MSG(attn__f32_to_bf16(fb) == b, "bf16 %04x", (unsigned)h);
        if (isfinite(fh)) CHECK_MSG(attn__f32_to_f16(fh) == b, "f16 %04x", (unsigned)h);
    }
    /* the widening of whole rows (F16C / shift) equals the scalar one */
    uint16_t src[37];
    float got[37];
    for (int i = 0; i < 37; i++) src[i] = (uint16_t)(0x3c00 + 977 * i);
    attn__widen_rows(got, src, ATTN_WDTYPE_F16, 1, 37, 37);
    for (int i = 0; i < 37; i++) /* weights are finite (F16C quiets a signalling NaN) */
        if (isfinite(attn__f16_to_f32(src[i])))
            CHECK(attn__f32_bits(got[i]) == attn__f32_bits(attn__f16_to_f32(src[i])));
    attn__widen_rows(got, src, ATTN_WDTYPE_BF16, 1, 37, 37);
    for (int i = 0; i < 37; i++) CHECK(attn__f32_bits(got[i]) == attn__f32_bits(attn__bf16_to_f32(src[i])));
}

/* The few-row kernel on its own, both dispatch paths (AVX2 and the portable
 * one CPUs without AVX2/FMA/F16C run): F16 / BF16 weights give the bits the
 * widened F32 weights give, for 1..16 rows and widths with and without a tail. */
TEST(skinny_kernels)
{
    test_rng r = {23};
    static const int widths[] = {8, 16, 37, 64, 200};
    for (int wi = 0; wi < 5; wi++) {
        const int n_in = widths[wi], n_out = 24;
        float *x = rand_floats(&r, (size_t)16 * n_in, 1.0f), *b = rand_floats(&r, n_out, 0.1f);
        float *wf = malloc((size_t)n_out * n_in * 4);
        uint16_t *wh = malloc((size_t)n_out * n_in * 2);
        float *y0 = malloc((size_t)16 * n_out * 4), *y1 = malloc((size_t)16 * n_out * 4);
        for (int dt = ATTN_WDTYPE_F16; dt <= ATTN_WDTYPE_BF16; dt++) {
            for (int i = 0; i < n_out * n_in; i++) {
                const float v = rng_float(&r, -1.0f, 1.0f);
                wh[i] = dt == ATTN_WDTYPE_BF16 ? attn__f32_to_bf16(v) : attn__f32_to_f16(v);
                wf[i] = attn__w_get(wh, dt, (size_t)i);
            }
            for (int rows = 1; rows <= 16; rows++)
                for (int portable = 0; portable < 2; portable++) {
                    if (portable) {
                        attn__skinny_linear_portable(x, rows, n_in, wh, dt, b, 0, n_out, y0, n_out);
                        attn__skinny_linear_portable(x, rows, n_in, wf, ATTN_WDTYPE_F32, b, 0, n_out, y1, n_out);
                    } else {
                        attn__skinny_linear(x, rows, n_in, wh, dt, b, 0, n_out, y0, n_out);
                        attn__skinny_linear(x, rows, n_in, wf, ATTN_WDTYPE_F32, b, 0, n_out, y1, n_out);
                    }
                    CHECK_MSG(memcmp(y0, y1, (size_t)rows * n_out * 4) == 0, "%s %s n_in %d rows %d",
                              portable ? "portable" : "dispatched", dt == ATTN_WDTYPE_BF16 ? "bf16" : "f16",
                              n_in, rows);
                }
            /* the two paths agree to float rounding (different summation orders) */
            attn__skinny_linear_portable(x, 5, n_in, wh, dt, b, 0, n_out, y0, n_out);
            attn__skinny_linear(x, 5, n_in, wh, dt, b, 0, n_out, y1, n_out);
            CHECK(max_abs_diff(y0, y1, (size_t)5 * n_out) <= 1e-5 * n_in);
        }
        free(x); free(b); free(wf); free(wh); free(y0); free(y1);
    }
}

int main(void)
{
    openblas_set_num_threads(1); /* as an application with threaded workspaces does */
    RUN(rounding);
    RUN(skinny_kernels);
    RUN(refusals);
    RUN(families);
    RUN(big_bf16);
    RUN(big_f16);
    printf("GEMM-path comparisons: %d, bit-identical: %d, largest rel err %.3g\n", gemm_cases, gemm_exact,
           worst_gemm_err);
    return check_summary();
}
