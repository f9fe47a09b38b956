/* test_gqa_rope.c — grouped-query attention (num_kv_heads) and rotary position
 * embeddings (attn_rope) through attn_forward: both kernels, threaded
 * workspaces and KV-cache streams against lib/reference.c for g = h, h/2, 1
 * and head_dim != E/h; GQA equals the same layer with K/V heads repeated (HF
 * repeat_kv), and its kernels stream h/g times fewer K/V bytes; HALF and
 * INTERLEAVED differ; partial rotary leaves the tail dims alone (checked in
 * the cache rows); inverse frequencies against HF's default / linear / llama3
 * formulas computed by hand; positions 1e5 and 1e6 against double precision;
 * every new error with its status and the field it names.
 */
#include "attn.h"
#include "check.h"
#include "core_util.h"
#include "forward.h"
#include "reference.h"
#include "rope.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct { double ref, stream, expand; } worst;


static double rel_tol(const float *ref, size_t n)
{
    double s = max_abs(ref, n);
    return 1e-5 * (s > 1.0 ? s : 1.0);
}

static size_t fsz(size_t n) { return n * sizeof(float); }

/* ------------------------------------------------------------ layers */

static attn_rope random_rope(test_rng *r, int d_k)
{
    attn_rope rp = {0};
    int pick = rng_int(r, 0, 5);
    if (pick == 0 || d_k < 2) return rp; /* no rotary embedding */
    rp.style = rng_int(r, 0, 1) ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED;
    rp.theta = rng_int(r, 0, 1) ? 0.0 : 500000.0;
    if (d_k % 2 == 0 && rng_int(r, 0, 1)) rp.rotary_dim = 0;
    else rp.rotary_dim = 2 * rng_int(r, 1, d_k / 2); /* partial often */
    if (pick == 4) {
        rp.scaling = ATTN_ROPE_SCALING_LINEAR;
        rp.factor = 4.0;
    } else if (pick == 5) {
        rp.scaling = ATTN_ROPE_SCALING_LLAMA3;
        rp.factor = 8.0;
        rp.low_freq_factor = 1.0;
        rp.high_freq_factor = 4.0;
        rp.original_max_position = 64;
    }
    return rp;
}

static gqa_shape random_shape(test_rng *r, int gmode)
{
    gqa_shape s = {0};
    s.h = 2 * rng_int(r, 1, 4);                             /* even: h/2 exists */
    s.g = gmode == 0 ? s.h : gmode == 1 ? s.h / 2 : 1;      /* MHA, GQA, MQA */
    s.d_k = 2 * rng_int(r, 1, 8);
    s.d_v = rng_int(r, 0, 2) ? s.d_k : rng_int(r, 1, 12);
    s.e = rng_int(r, 0, 1) ? s.h * s.d_k : rng_int(r, 4, 40); /* head_dim != E/h often */
    s.bias = rng_int(r, 0, 1);
    s.out_proj = rng_int(r, 0, 3) != 0;
    s.e_out = s.out_proj ? rng_int(r, 1, 40) : s.h * s.d_v;
    s.rope = random_rope(r, s.d_k);
    return s;
}

static attn_workspace *make_ws(attn_kernel k, int threads, int bq, int bk)
{
    attn_workspace_options o = {.n_threads = threads, .kernel = k, .block_q = bq, .block_k = bk};
    attn_workspace *ws = NULL;
    CHECK_INT_EQ(attn_workspace_create(&o, &ws, NULL), ATTN_OK);
    return ws;
}

/* ------------------------------------------------------------ vs reference */

/* One sequence of a random layer through ws and the reference: outputs and
 * weights agree. Masks (key padding, per-head bool) exercise the stacked
 * rows of a group; positions are default, an offset, or random. */
static void one_vs_reference(test_rng *r, const attn_layer *l, const attn_layer_info *li,
                             attn_workspace *ws, attn_weights_mode wm, const char *what)
{
    const int T = rng_int(r, 1, 70), h = li->num_heads;
    seq_case c, ref;
    seq_case_init(&c, r, li, T, T, 0, wm);
    seq_case_init(&ref, r, li, T, T, 0, wm);
    memcpy(ref.query, c.query, fsz((size_t)T * li->embed_q));
    int64_t *pos = NULL;
    const int pmode = rng_int(r, 0, 2);
    if (pmode) {
        pos = malloc((size_t)T * sizeof *pos);
        int64_t off = rng_int(r, 0, 5000);
        for (int i = 0; i < T; i++) pos[i] = pmode == 1 ? off + i : rng_int(r, 0, 100000);
    }
    uint8_t *bm = NULL, *kpm = NULL;
    attn_seq s = c.seq;
    s.is_causal = rng_int(r, 0, 1);
    s.window = rng_int(r, 0, 3) == 0 ? rng_int(r, 1, T + 1) : 0;
    s.position_ids = pos;
    if (rng_int(r, 0, 3) == 0) {
        kpm = calloc((size_t)T, 1);
        for (int j = 1; j < T; j++) kpm[j] = rng_int(r, 0, 4) == 0;
        s.key_padding_mask = kpm;
    }
    if (rng_int(r, 0, 3) == 0) {
        bm = calloc((size_t)h * T * T, 1);
        for (size_t i = 0; i < (size_t)h * T * T; i++) bm[i] = rng_int(r, 0, 5) == 0;
        for (int hh = 0; hh < h; hh++) /* keep key 0 visible: no all-masked rows */
            for (int t = 0; t < T; t++) bm[((size_t)hh * T + t) * T] = 0;
        s.attn_mask_kind = ATTN_MASK_BOOL;
        s.attn_mask_per_head = 1;
        s.attn_mask = bm;
    }
    attn_seq rs = s;
    rs.query = ref.query;
    rs.output = ref.output;
    rs.weights = ref.weights;
    attn_error err = {0};
    CHECK_MSG(attn_forward(l, &s, 1, ws, NULL, &err) == ATTN_OK, "%s: %s", what, err.message);
    CHECK_MSG(attn__forward_reference(l, &rs, 1, NULL, NULL, &err) == ATTN_OK, "ref: %s", err.message);
    const size_t no = (size_t)T * li->embed_out;
    const double tol = rel_tol(ref.output, no), d = max_abs_diff(c.output, ref.output, no);
    CHECK_MSG(d <= tol, "%s: h=%d g=%d d_k=%d E=%d T=%d rope=%d/%d: output diff %.3g > %.3g", what, h,
              li->num_kv_heads, li->head_dim_k, li->embed_q, T, (int)li->rope.style,
              li->rope.rotary_dim, d, tol);
    keep_max(&worst.ref, d / tol * 1e-5);
    if (wm != ATTN_WEIGHTS_NONE) {
        size_t nw = (size_t)T * T * (wm == ATTN_WEIGHTS_PER_HEAD ? h : 1);
        double dw = max_abs_diff(c.weights, ref.weights, nw);
        CHECK_MSG(dw <= 1e-5, "%s: weights diff %.3g", what, dw);
    }
    free(pos); free(bm); free(kpm);
    seq_case_free(&c);
    seq_case_free(&ref);
}

TEST_WITH(fast_paths_vs_reference, test_rng *r)
{
    attn_workspace *wss[4] = {
        make_ws(ATTN_KERNEL_MATERIALIZED, 1, 0, 0),
        make_ws(ATTN_KERNEL_FUSED, 1, 0, 0),
        make_ws(ATTN_KERNEL_FUSED, 1, 5, 7), /* many tiles and query blocks */
        make_ws(ATTN_KERNEL_FUSED, 2, 3, 11), /* threaded (pool used when > 2 MFLOP) */
    };
    static const char *names[4] = {"materialized", "fused", "fused tiles", "fused threaded"};
    for (int c = 0; c < 60; c++) {
        gqa_shape sh = random_shape(r, c % 3);
        attn_layer *l = gqa_layer(r, &sh);
        if (l == NULL) continue;
        attn_layer_info li;
        attn_layer_get_info(l, &li);
        CHECK_INT_EQ(li.num_kv_heads, sh.g);
        for (int w = 0; w < 4; w++) {
            attn_weights_mode wm = ATTN_WEIGHTS_NONE;
            if (w == 0) wm = c % 2 ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_AVERAGE;
            one_vs_reference(r, l, &li, wss[w], wm, names[w]);
        }
        attn_layer_free(l);
    }
    for (int w = 0; w < 4; w++) attn_workspace_free(wss[w]);
}

/* ------------------------------------------------------------ KV cache streams */

/* A causal sequence of L rows fed through a cache in steps (1, 3 or random
 * chunks) equals the sequence at once, for every kernel; explicit positions
 * equal to the default change nothing; an offset (positions off + i both
 * ways) agrees too; a 2-thread workspace gives the same bits as one. */
static void stream_case(test_rng *r, const attn_layer *l, const attn_layer_info *li, int L, int step,
                        int64_t off, int explicit_pos, attn_workspace *ws, attn_workspace *ws2)
{
    const int E = li->embed_q, Eo = li->embed_out;
    const int kk = li->num_kv_heads * li->head_dim_k, kv = li->num_kv_heads * li->head_dim_v;
    float *x = rand_floats(r, (size_t)L * E, 1.0f);
    float *full = malloc(fsz((size_t)L * Eo)), *ref = malloc(fsz((size_t)L * Eo));
    float *out = malloc(fsz((size_t)L * Eo)), *out2 = malloc(fsz((size_t)L * Eo));
    float *ck = malloc(fsz((size_t)L * kk)), *cv = malloc(fsz((size_t)L * kv));
    float *ck2 = malloc(fsz((size_t)L * kk)), *cv2 = malloc(fsz((size_t)L * kv));
    int64_t *pos = malloc((size_t)L * sizeof *pos);
    for (int i = 0; i < L; i++) pos[i] = off + i;
    attn_error err = {0};
    attn_seq s = {.t = L, .s = L, .query = x, .is_causal = 1, .output = full,
                  .position_ids = off || explicit_pos ? pos : NULL};
    CHECK_MSG(attn_forward(l, &s, 1, ws, NULL, &err) == ATTN_OK, "full: %s", err.message);
    s.output = ref;
    CHECK_MSG(attn__forward_reference(l, &s, 1, NULL, NULL, &err) == ATTN_OK, "ref: %s", err.message);
    const double tol = rel_tol(ref, (size_t)L * Eo);
    double d_full = max_abs_diff(full, ref, (size_t)L * Eo);
    CHECK_MSG(d_full <= tol, "one-shot vs reference %.3g > %.3g", d_full, tol);
    int p = 0;
    while (p < L) {
        int t = step ? step : rng_int(r, 1, 9);
        if (t > L - p) t = L - p;
        attn_seq a = {.t = t, .s = p + t, .query = x + (size_t)p * E, .is_causal = 1,
                      .output = out + (size_t)p * Eo, .cache_k = ck, .cache_v = cv,
                      .cache_len = p, .cache_append = 1,
                      .position_ids = off || explicit_pos ? pos + p : NULL};
        CHECK_MSG(attn_forward(l, &a, 1, ws, NULL, &err) == ATTN_OK, "append at %d: %s", p, err.message);
        a.output = out2 + (size_t)p * Eo;
        a.cache_k = ck2;
        a.cache_v = cv2;
        CHECK_MSG(attn_forward(l, &a, 1, ws2, NULL, &err) == ATTN_OK, "append (threads): %s", err.message);
        p += t;
    }
    double d = max_abs_diff(out, full, (size_t)L * Eo);
    CHECK_MSG(d <= tol, "stream (step %d, offset %lld) vs one-shot: %.3g > %.3g", step, (long long)off, d, tol);
    keep_max(&worst.stream, d / tol * 1e-5);
    CHECK_MSG(memcmp(out, out2, fsz((size_t)L * Eo)) == 0 && memcmp(ck, ck2, fsz((size_t)L * kk)) == 0,
              "threaded stream differs from one thread");
    free(x); free(full); free(ref); free(out); free(out2);
    free(ck); free(cv); free(ck2); free(cv2); free(pos);
}

TEST_WITH(kv_cache_streams, test_rng *r)
{
    for (int c = 0; c < 18; c++) {
        gqa_shape sh = random_shape(r, c % 3);
        if (sh.rope.style == ATTN_ROPE_NONE) { /* streams are where positions matter */
            sh.rope.style = c % 2 ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED;
            sh.rope.rotary_dim = 0;
        }
        if (c < 3) { /* big enough to wake the pool (> 2 MFLOP per append) */
            sh.h = 8, sh.g = c == 0 ? 8 : c == 1 ? 2 : 1, sh.d_k = sh.d_v = 32, sh.e = 256;
            sh.e_out = 256, sh.out_proj = 1, sh.rope.rotary_dim = 0;
        }
        attn_layer *l = gqa_layer(r, &sh);
        if (l == NULL) continue;
        attn_layer_info li;
        attn_layer_get_info(l, &li);
        const int L = c < 3 ? 100 : rng_int(r, 1, 60);
        for (int kern = ATTN_KERNEL_MATERIALIZED; kern <= ATTN_KERNEL_FUSED; kern++) {
            attn_workspace *ws = make_ws((attn_kernel)kern, 1, rng_int(r, 1, 9), rng_int(r, 1, 33));
            attn_workspace_options o;
            attn_workspace_get_options(ws, &o);
            attn_workspace *ws2 = make_ws((attn_kernel)kern, 2, o.block_q, o.block_k);
            static const int steps[] = {1, 3, 0};
            for (int k = 0; k < 3; k++) stream_case(r, l, &li, L, steps[k], 0, 0, ws, ws2);
            stream_case(r, l, &li, L, 3, 0, 1, ws, ws2);             /* explicit = default */
            stream_case(r, l, &li, L, 0, 100 + c, 1, ws, ws2);       /* offset positions */
            attn_workspace_free(ws);
            attn_workspace_free(ws2);
        }
        attn_layer_free(l);
    }
}

/* Explicit position_ids equal to the default give the very same bits. */
TEST_WITH(explicit_positions_equal_default, test_rng *r)
{
    gqa_shape sh = {.h = 4, .g = 2, .d_k = 8, .d_v = 8, .e = 32, .e_out = 32, .bias = 1, .out_proj = 1,
                 .rope = {.style = ATTN_ROPE_HALF}};
    attn_layer *l = gqa_layer(r, &sh);
    if (l == NULL) return;
    enum { T = 9, P = 5 };
    float *x = rand_floats(r, (size_t)(T + P) * 32, 1.0f), a[T * 32], b[T * 32], pre_out[P * 32];
    float ck[2][(T + P) * 16], cv[2][(T + P) * 16];
    int64_t pos[T];
    for (int i = 0; i < T; i++) pos[i] = P + i;
    for (int v = 0; v < 2; v++) { /* a cache of P rows, then T rows appended */
        attn_seq pre = {.t = P, .s = P, .query = x, .output = pre_out, .cache_k = ck[v], .cache_v = cv[v],
                        .cache_append = 1};
        CHECK_INT_EQ(attn_forward(l, &pre, 1, NULL, NULL, NULL), ATTN_OK);
        attn_seq s = {.t = T, .s = P + T, .query = x + P * 32, .is_causal = 1, .output = v ? b : a,
                      .cache_k = ck[v], .cache_v = cv[v], .cache_len = P, .cache_append = 1,
                      .position_ids = v ? pos : NULL};
        CHECK_INT_EQ(attn_forward(l, &s, 1, NULL, NULL, NULL), ATTN_OK);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(ck[0], ck[1], sizeof ck[0]) == 0);
    /* and a different position changes the result */
    pos[0] = 0;
    attn_seq s = {.t = T, .s = P + T, .query = x + P * 32, .is_causal = 1, .output = b,
                  .cache_k = ck[1], .cache_v = cv[1], .cache_len = P, .cache_append = 1, .position_ids = pos};
    CHECK_INT_EQ(attn_forward(l, &s, 1, NULL, NULL, NULL), ATTN_OK);
    CHECK(memcmp(a, b, sizeof a) != 0);
    free(x);
    attn_layer_free(l);
}

/* ------------------------------------------------------------ GQA structure */

/* A GQA layer equals the MHA layer whose K/V heads are HF's repeat_kv of its
 * own (query head i reads KV head i / (h/g), not i % g); and its kernels
 * stream h/g times fewer K/V bytes (decode against a cache, and prefill). */
TEST_WITH(gqa_equals_repeated_heads, test_rng *r)
{
    const int h = 8, E = 48;
    for (int gi = 0; gi < 3; gi++) {
        const int g = gi == 0 ? 4 : gi == 1 ? 2 : 1, rep = h / g;
        gqa_shape sh = {.h = h, .g = g, .d_k = 6, .d_v = 5, .e = E, .e_out = 40, .bias = 1, .out_proj = 1,
                     .rope = {.style = ATTN_ROPE_INTERLEAVED, .rotary_dim = 4}};
        float *buf = NULL;
        attn_layer_desc d = gqa_desc(r, &sh, &buf);
        attn_layer *lg = NULL, *lm = NULL;
        CHECK_INT_EQ(attn_layer_create(&d, &lg, NULL), ATTN_OK);
        /* expanded K/V: MHA row block i = GQA block i / rep */
        float *wk = malloc(fsz((size_t)h * 6 * E)), *wv = malloc(fsz((size_t)h * 5 * E));
        float *bk = malloc(fsz((size_t)h * 6)), *bv = malloc(fsz((size_t)h * 5));
        for (int i = 0; i < h; i++) {
            memcpy(wk + (size_t)i * 6 * E, d.w_k + (size_t)(i / rep) * 6 * E, fsz(6 * (size_t)E));
            memcpy(wv + (size_t)i * 5 * E, d.w_v + (size_t)(i / rep) * 5 * E, fsz(5 * (size_t)E));
            memcpy(bk + i * 6, d.b_k + (i / rep) * 6, fsz(6));
            memcpy(bv + i * 5, d.b_v + (i / rep) * 5, fsz(5));
        }
        attn_layer_desc dm = d;
        dm.num_kv_heads = 0;
        dm.w_k = wk, dm.w_v = wv, dm.b_k = bk, dm.b_v = bv;
        CHECK_INT_EQ(attn_layer_create(&dm, &lm, NULL), ATTN_OK);
        enum { T = 37 };
        float *x = rand_floats(r, (size_t)T * E, 1.0f);
        float og[T * 40], om[T * 40], wg[h * T * T], wm[h * T * T];
        for (int kern = ATTN_KERNEL_MATERIALIZED; kern <= ATTN_KERNEL_FUSED; kern++) {
            attn_workspace *ws = make_ws((attn_kernel)kern, 1, 8, 16);
            attn_weights_mode mode = kern == ATTN_KERNEL_MATERIALIZED ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_NONE;
            attn_seq sg = {.t = T, .s = T, .query = x, .is_causal = 1, .output = og, .weights_mode = mode,
                           .weights = mode ? wg : NULL};
            attn_seq sm = sg;
            sm.output = om;
            sm.weights = mode ? wm : NULL;
            CHECK_INT_EQ(attn_forward(lg, &sg, 1, ws, NULL, NULL), ATTN_OK);
            CHECK_INT_EQ(attn_forward(lm, &sm, 1, ws, NULL, NULL), ATTN_OK);
            double dd = max_abs_diff(og, om, (size_t)T * 40);
            CHECK_MSG(dd <= 1e-6, "g=%d kernel %d: GQA vs repeated heads %.3g", g, kern, dd);
            keep_max(&worst.expand, dd);
            if (mode) CHECK(max_abs_diff(wg, wm, (size_t)h * T * T) <= 1e-6);
            /* K/V traffic of the prefill: 1/rep of the expanded layer's */
            uint64_t bg = 0, bm = 0;
            sg.weights_mode = sm.weights_mode = mode, sg.weights = mode ? wg : NULL;
            CHECK_INT_EQ(attn__forward_kv_bytes(lg, &sg, 1, ws, &bg, NULL), ATTN_OK);
            CHECK_INT_EQ(attn__forward_kv_bytes(lm, &sm, 1, ws, &bm, NULL), ATTN_OK);
            CHECK_MSG(bg > 0 && bg * (uint64_t)rep == bm, "prefill K/V bytes: GQA %llu, MHA %llu, h/g %d",
                      (unsigned long long)bg, (unsigned long long)bm, rep);
            /* decode: one row appended to a cache of T rows */
            float ckg[(T + 1) * 4 * 6], cvg[(T + 1) * 4 * 5], ckm[(T + 1) * 8 * 6], cvm[(T + 1) * 8 * 5];
            attn_seq dg = {.t = 1, .s = T + 1, .query = x, .is_causal = 1, .output = og,
                           .cache_k = ckg, .cache_v = cvg, .cache_len = T, .cache_append = 1};
            attn_seq dmm = dg;
            dmm.cache_k = ckm, dmm.cache_v = cvm;
            CHECK_INT_EQ(attn__forward_kv_bytes(lg, &dg, 1, ws, &bg, NULL), ATTN_OK);
            CHECK_INT_EQ(attn__forward_kv_bytes(lm, &dmm, 1, ws, &bm, NULL), ATTN_OK);
            CHECK_MSG(bg * (uint64_t)rep == bm && bg == (uint64_t)(T + 1) * g * (6 + 5) * 4,
                      "decode K/V bytes: GQA %llu, MHA %llu", (unsigned long long)bg, (unsigned long long)bm);
            attn_workspace_free(ws);
        }
        free(x); free(wk); free(wv); free(bk); free(bv); free(buf);
        attn_layer_free(lg);
        attn_layer_free(lm);
    }
}

/* ------------------------------------------------------------ RoPE maths */

/* HALF and INTERLEAVED pair different dims: same weights, different outputs
 * (each matching the reference, checked above); with positions all 0 both
 * are the identity and agree with the layer without RoPE. */
TEST_WITH(styles_differ, test_rng *r)
{
    gqa_shape sh = {.h = 2, .g = 1, .d_k = 8, .d_v = 8, .e = 16, .e_out = 16, .out_proj = 1};
    float *buf = NULL;
    attn_layer_desc d = gqa_desc(r, &sh, &buf);
    attn_layer *l[3] = {0};
    for (int i = 0; i < 3; i++) {
        d.rope = (attn_rope){.style = (attn_rope_style)i};
        CHECK_INT_EQ(attn_layer_create(&d, &l[i], NULL), ATTN_OK);
    }
    enum { T = 6 };
    float *x = rand_floats(r, (size_t)T * 16, 1.0f), o[3][T * 16];
    int64_t pos[T], zero[T] = {0};
    for (int i = 0; i < T; i++) pos[i] = 3 + 2 * i;
    for (int i = 0; i < 3; i++) {
        attn_seq s = {.t = T, .s = T, .query = x, .output = o[i], .position_ids = pos};
        CHECK_INT_EQ(attn_forward(l[i], &s, 1, NULL, NULL, NULL), ATTN_OK);
    }
    CHECK(max_abs_diff(o[1], o[2], (size_t)T * 16) > 1e-3);
    CHECK(max_abs_diff(o[0], o[1], (size_t)T * 16) > 1e-3);
    for (int i = 1; i < 3; i++) {
        attn_seq s = {.t = T, .s = T, .query = x, .output = o[i], .position_ids = zero};
        CHECK_INT_EQ(attn_forward(l[i], &s, 1, NULL, NULL, NULL), ATTN_OK);
        CHECK(max_abs_diff(o[0], o[i], (size_t)T * 16) <= 1e-6);
    }
    for (int i = 0; i < 3; i++) attn_layer_free(l[i]);
    free(x);
    free(buf);
}

/* With W_K = I (E = g*d_k) the cache rows are the rotated inputs: the first
 * rotary_dim dims of each head rotate by the pairs of the style, the tail is
 * x itself, bit for bit. */
TEST_WITH(partial_rotary_tail, test_rng *r)
{
    enum { g = 2, h = 4, dk = 8, rd = 4, E = g * dk, T = 5 };
    for (int st = ATTN_ROPE_HALF; st <= ATTN_ROPE_INTERLEAVED; st++) {
        float eye[E * E], wq[h * dk * E];
        memset(eye, 0, sizeof eye);
        for (int i = 0; i < E; i++) eye[i * E + i] = 1.0f;
        for (int i = 0; i < h * dk * E; i++) wq[i] = rng_float(r, -0.3f, 0.3f);
        attn_layer_desc d = {.num_heads = h, .head_dim_k = dk, .head_dim_v = dk,
                             .embed_q = E, .embed_k = E, .embed_v = E, .w_q = wq, .w_k = eye, .w_v = eye,
                             .num_kv_heads = g,
                             .rope = {.style = (attn_rope_style)st, .theta = 100.0, .rotary_dim = rd}};
        attn_layer *l = NULL;
        attn_error err = {0};
        CHECK_MSG(attn_layer_create(&d, &l, &err) == ATTN_OK, "%s", err.message);
        if (l == NULL) continue;
        float *x = rand_floats(r, (size_t)T * E, 1.0f), out[T * h * dk], ck[T * E], cv[T * E];
        int64_t pos[T] = {0, 1, 7, 1000, 123456};
        attn_seq s = {.t = T, .s = T, .query = x, .output = out, .cache_k = ck, .cache_v = cv,
                      .cache_append = 1, .position_ids = pos};
        CHECK_INT_EQ(attn_forward(l, &s, 1, NULL, NULL, NULL), ATTN_OK);
        CHECK(memcmp(cv, x, sizeof cv) == 0); /* values are never rotated */
        int tail_ok = 1;
        double worst_rot = 0;
        for (int t = 0; t < T; t++)
            for (int hh = 0; hh < g; hh++) {
                const float *xi = x + (size_t)t * E + hh * dk, *ki = ck + (size_t)t * E + hh * dk;
                for (int c = rd; c < dk; c++) tail_ok &= ki[c] == xi[c];
                for (int i = 0; i < rd / 2; i++) {
                    float inv = 1.0f / powf(100.0f, (float)(2 * i) / (float)rd);
                    double a = (double)pos[t] * inv, co = cos(a), sn = sin(a);
                    int i0 = st == ATTN_ROPE_HALF ? i : 2 * i, i1 = st == ATTN_ROPE_HALF ? i + rd / 2 : 2 * i + 1;
                    keep_max(&worst_rot, fabs(ki[i0] - (xi[i0] * co - xi[i1] * sn)));
                    keep_max(&worst_rot, fabs(ki[i1] - (xi[i1] * co + xi[i0] * sn)));
                }
            }
        CHECK_MSG(tail_ok, "style %d: dims >= rotary_dim changed", st);
        CHECK_MSG(worst_rot <= 1e-6, "style %d: rotated dims off by %.3g", st, worst_rot);
        attn_layer_free(l);
        free(x);
    }
}

static attn_layer *rope_layer(attn_rope rope, int d_k, attn_error *err) /* d_k <= 128 */
{
    float w[4 * 128] = {0}; /* W_Q (d_k, 4) for d_k <= 128 */
    attn_layer_desc d = {.num_heads = 1, .head_dim_k = d_k, .head_dim_v = 1, .embed_q = 4, .embed_k = 4,
                         .embed_v = 4, .w_q = w, .w_k = w, .w_v = w, .rope = rope};
    attn_layer *l = NULL;
    attn_layer_create(&d, &l, err);
    return l;
}

/* inv_freq against HF's formulas written out by hand (in double here; the
 * library's float32 values must be within one float ulp of them), and the
 * resolved parameters in attn_layer_get_info. */
TEST(inv_freq_formulas)
{
    float inv[64];
    /* default: theta 0 -> 10000, rotary_dim 0 -> d_k */
    attn_layer *l = rope_layer((attn_rope){.style = ATTN_ROPE_HALF}, 16, NULL);
    CHECK(l != NULL);
    if (l) {
        attn_layer_info li;
        attn_layer_get_info(l, &li);
        CHECK(li.rope.theta == 10000.0 && li.rope.rotary_dim == 16 && li.rope.style == ATTN_ROPE_HALF);
        attn_layer_free(l);
    }
    attn_rope d = {.style = ATTN_ROPE_HALF, .theta = 10000.0, .rotary_dim = 16};
    attn__rope_inv_freq(&d, inv);
    for (int i = 0; i < 8; i++)
        CHECK_NEAR(inv[i], 1.0 / pow(10000.0, 2.0 * i / 16.0), 1.2e-7 / pow(10000.0, 2.0 * i / 16.0));
    CHECK(inv[0] == 1.0f);
    /* linear: / factor */
    attn_rope lin = d;
    lin.scaling = ATTN_ROPE_SCALING_LINEAR, lin.factor = 4.0;
    float invl[8];
    attn__rope_inv_freq(&lin, invl);
    for (int i = 0; i < 8; i++) CHECK(invl[i] == inv[i] / 4.0f);
    /* llama3 (Llama 3.1: theta 500000, factor 8, low 1, high 4, 8192), head_dim 128 */
    attn_rope l3 = {.style = ATTN_ROPE_HALF, .theta = 500000.0, .rotary_dim = 128,
                    .scaling = ATTN_ROPE_SCALING_LLAMA3, .factor = 8.0, .low_freq_factor = 1.0,
                    .high_freq_factor = 4.0, .original_max_position = 8192};
    attn_rope base = l3;
    base.scaling = ATTN_ROPE_SCALING_NONE;
    float inv3[64], inv0[64];
    attn__rope_inv_freq(&l3, inv3);
    attn__rope_inv_freq(&base, inv0);
    int bands[3] = {0};
    for (int i = 0; i < 64; i++) {
        const double f = inv0[i], wavelen = 2 * M_PI / f;
        const double low_wl = 8192.0 / 1.0, high_wl = 8192.0 / 4.0;
        double want;
        if (wavelen < high_wl) { want = f; bands[0]++; }             /* high frequency: kept */
        else if (wavelen > low_wl) { want = f / 8.0; bands[2]++; }   /* low frequency: / factor */
        else {                                                        /* medium: smoothed */
            const double sm = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
            want = (1 - sm) * f / 8.0 + sm * f;
            bands[1]++;
        }
        CHECK_MSG(fabs(inv3[i] - want) <= 4e-7 * want, "llama3 inv_freq[%d] = %.9g, HF formula %.9g", i,
                  inv3[i], want);
    }
    CHECK_MSG(bands[0] > 0 && bands[1] > 0 && bands[2] > 0, "bands %d %d %d", bands[0], bands[1], bands[2]);
    /* the layer uses these frequencies: get_info echoes the parameters */
    l = rope_layer(l3, 128, NULL);
    CHECK(l != NULL);
    if (l) {
        attn_layer_info li;
        attn_layer_get_info(l, &li);
        CHECK(li.rope.scaling == ATTN_ROPE_SCALING_LLAMA3 && li.rope.factor == 8.0 &&
              li.rope.original_max_position == 8192 && li.rope.rotary_dim == 128 && li.num_kv_heads == 1);
        attn_layer_free(l);
    }
}

/* Positions 1e5 and 1e6: cos/sin within float rounding of the exact angle of
 * the float32 frequency (a float32 angle, as HF computes it, would be off by
 * ~1e-2 there: checked too, so this test can tell the two apart), and a
 * whole layer there against the double-precision reference. */
TEST_WITH(large_positions, test_rng *r)
{
    attn_rope rp = {.style = ATTN_ROPE_HALF, .theta = 10000.0, .rotary_dim = 64};
    float inv[32], cs[64];
    attn__rope_inv_freq(&rp, inv);
    static const int64_t ps[] = {100000, 100003, 1000000, 1234567};
    for (int k = 0; k < 4; k++) {
        attn__rope_cos_sin(inv, 32, ps[k], cs);
        double worst_c = 0, worst_f32 = 0;
        for (int i = 0; i < 32; i++) {
            const double a = (double)ps[k] * (double)inv[i];
            keep_max(&worst_c, fabs(cs[i] - cos(a)));
            keep_max(&worst_c, fabs(cs[32 + i] - sin(a)));
            const float a32 = (float)ps[k] * inv[i]; /* HF's float32 product */
            keep_max(&worst_f32, fabs(cos((double)a32) - cos(a)));
        }
        CHECK_MSG(worst_c <= 6e-8, "position %lld: cos/sin off by %.3g", (long long)ps[k], worst_c);
        CHECK_MSG(worst_f32 > 1e-4, "position %lld: float32 angle error only %.3g?", (long long)ps[k],
                  worst_f32);
    }
    for (int gi = 0; gi < 2; gi++) {
        gqa_shape sh = {.h = 4, .g = gi ? 1 : 2, .d_k = 16, .d_v = 8, .e = 32, .e_out = 32, .bias = 1,
                     .out_proj = 1, .rope = {.style = gi ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF}};
        attn_layer *l = gqa_layer(r, &sh);
        if (l == NULL) continue;
        attn_layer_info li;
        attn_layer_get_info(l, &li);
        for (int k = 0; k < 2; k++) {
            enum { T = 12 };
            int64_t pos[T];
            for (int i = 0; i < T; i++) pos[i] = (k ? 1000000 : 100000) + 7 * i;
            seq_case c, ref;
            seq_case_init(&c, r, &li, T, T, 0, ATTN_WEIGHTS_NONE);
            seq_case_init(&ref, r, &li, T, T, 0, ATTN_WEIGHTS_NONE);
            memcpy(ref.query, c.query, fsz((size_t)T * 32));
            c.seq.position_ids = ref.seq.position_ids = pos;
            c.seq.is_causal = ref.seq.is_causal = 1;
            CHECK_INT_EQ(attn_forward(l, &c.seq, 1, NULL, NULL, NULL), ATTN_OK);
            CHECK_INT_EQ(attn__forward_reference(l, &ref.seq, 1, NULL, NULL, NULL), ATTN_OK);
            const double tol = rel_tol(ref.output, (size_t)T * 32);
            const double dd = max_abs_diff(c.output, ref.output, (size_t)T * 32);
            CHECK_MSG(dd <= tol, "positions %s: %.3g > %.3g", k ? "1e6" : "1e5", dd, tol);
            keep_max(&worst.ref, dd / tol * 1e-5);
            seq_case_free(&c);
            seq_case_free(&ref);
        }
        attn_layer_free(l);
    }
}

/* ------------------------------------------------------------ errors */

static void expect_create(attn_layer_desc d, attn_status want, const char *field)
{
    attn_layer *l = (attn_layer *)&d; /* poison: must become NULL */
    attn_error err = {0};
    attn_status st = attn_layer_create(&d, &l, &err);
    CHECK_MSG(st == want, "want %s for %s, got %s (%s)", attn_status_name(want), field, attn_status_name(st),
              err.message);
    CHECK(l == NULL);
    CHECK_MSG(strstr(err.message, field) != NULL, "message \"%s\" does not name %s", err.message, field);
    if (st == ATTN_OK) attn_layer_free(l);
}

TEST(errors)
{
    float w[8 * 8 * 16];
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) w[i] = 0.01f * (float)(i % 13);
    const attn_layer_desc ok = {.num_heads = 4, .head_dim_k = 4, .head_dim_v = 4, .embed_q = 16,
                                .embed_k = 16, .embed_v = 16, .embed_out = 16, .w_q = w, .w_k = w,
                                .w_v = w, .w_o = w, .num_kv_heads = 2,
                                .rope = {.style = ATTN_ROPE_HALF}};
    attn_layer *l = NULL;
    CHECK_INT_EQ(attn_layer_create(&ok, &l, NULL), ATTN_OK);
    attn_layer_desc d = ok;
    d.num_kv_heads = 3;
    expect_create(d, ATTN_ERR_SHAPE, "num_kv_heads");
    d.num_kv_heads = 8;
    expect_create(d, ATTN_ERR_SHAPE, "num_kv_heads");
    d.num_kv_heads = -1;
    expect_create(d, ATTN_ERR_SHAPE, "num_kv_heads");
    d = ok;
    d.rope.rotary_dim = 3;
    expect_create(d, ATTN_ERR_INVALID_ARG, "rotary_dim");
    d.rope.rotary_dim = 6; /* > d_k */
    expect_create(d, ATTN_ERR_INVALID_ARG, "rotary_dim");
    d.rope.rotary_dim = -2;
    expect_create(d, ATTN_ERR_INVALID_ARG, "rotary_dim");
    d = ok;
    d.head_dim_k = 3, d.num_kv_heads = 0, d.embed_out = 16; /* rotary_dim 0 = d_k = 3: odd */
    expect_create(d, ATTN_ERR_INVALID_ARG, "rotary_dim");
    d = ok;
    d.rope.theta = -1.0;
    expect_create(d, ATTN_ERR_INVALID_ARG, "theta");
    d.rope.theta = NAN;
    expect_create(d, ATTN_ERR_INVALID_ARG, "theta");
    d.rope.theta = 1e300; /* not finite in float32 */
    expect_create(d, ATTN_ERR_INVALID_ARG, "theta");
    d = ok;
    d.rope.style = (attn_rope_style)7;
    expect_create(d, ATTN_ERR_INVALID_ARG, "style");
    d = ok;
    d.rope.scaling = (attn_rope_scaling)9;
    expect_create(d, ATTN_ERR_INVALID_ARG, "scaling");
    d.rope.scaling = ATTN_ROPE_SCALING_LINEAR;
    d.rope.factor = 0.0;
    expect_create(d, ATTN_ERR_INVALID_ARG, "factor");
    d.rope.factor = INFINITY;
    expect_create(d, ATTN_ERR_INVALID_ARG, "factor");
    const attn_rope l3 = {.style = ATTN_ROPE_HALF, .scaling = ATTN_ROPE_SCALING_LLAMA3, .factor = 8.0,
                          .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_position = 8192};
    d = ok;
    d.rope = l3;
    attn_layer *l3l = NULL;
    CHECK_INT_EQ(attn_layer_create(&d, &l3l, NULL), ATTN_OK);
    attn_layer_free(l3l);
    d.rope.factor = -8.0;
    expect_create(d, ATTN_ERR_INVALID_ARG, "factor");
    d.rope = l3, d.rope.low_freq_factor = 0.0;
    expect_create(d, ATTN_ERR_INVALID_ARG, "low_freq_factor");
    d.rope = l3, d.rope.high_freq_factor = 1.0; /* == low */
    expect_create(d, ATTN_ERR_INVALID_ARG, "high_freq_factor");
    d.rope = l3, d.rope.original_max_position = 0;
    expect_create(d, ATTN_ERR_INVALID_ARG, "original_max_position");

    /* forward on the rotary GQA layer */
    float x[3 * 16], kv[3 * 16], out[3 * 16], ck[4 * 8], cv[4 * 8];
    for (int i = 0; i < 48; i++) x[i] = kv[i] = 0.1f * (float)(i % 7);
    for (int i = 0; i < 48; i++) out[i] = 777.0f;
    attn_error err = {0};
    attn_seq cross = {.t = 3, .s = 3, .query = x, .key = kv, .value = kv, .output = out};
    CHECK_INT_EQ(attn_forward(l, &cross, 1, NULL, NULL, &err), ATTN_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.message, "seqs[0]") && strstr(err.message, "cross-attention"), "%s", err.message);
    attn_seq fixed = {.t = 3, .s = 4, .query = x, .output = out, .cache_k = ck, .cache_v = cv, .cache_len = 4};
    CHECK_INT_EQ(attn_forward(l, &fixed, 1, NULL, NULL, &err), ATTN_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.message, "cache_append"), "%s", err.message);
    float pk[3 * 8], pv[3 * 8];
    CHECK_INT_EQ(attn_project_kv(l, kv, kv, 3, pk, pv, &err), ATTN_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.message, "attn_project_kv") && strstr(err.message, "rotary"), "%s", err.message);
    int64_t pos[3] = {4, 5, -1};
    attn_seq neg = {.t = 3, .s = 3, .query = x, .output = out, .position_ids = pos};
    attn_seq batch[2] = {{.t = 3, .s = 3, .query = x, .output = out}, neg};
    CHECK_INT_EQ(attn_forward(l, batch, 2, NULL, NULL, &err), ATTN_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.message, "seqs[1].position_ids[2]"), "%s", err.message);
    pos[2] = ATTN__ROPE_MAX_POSITION + 1;
    CHECK_INT_EQ(attn_forward(l, &neg, 1, NULL, NULL, &err), ATTN_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.message, "seqs[0].position_ids[2]"), "%s", err.message);
    int untouched = 1;
    for (int i = 0; i < 48; i++) untouched &= out[i] == 777.0f;
    CHECK_MSG(untouched, "a failed call wrote its output");
    attn_layer_free(l);

    /* a layer without RoPE ignores position_ids (even invalid ones) and allows
     * cross-attention, GQA or not */
    d = ok;
    d.rope = (attn_rope){0};
    CHECK_INT_EQ(attn_layer_create(&d, &l, NULL), ATTN_OK);
    float o1[3 * 16], o2[3 * 16];
    pos[2] = -5;
    attn_seq a = {.t = 3, .s = 3, .query = x, .output = o1};
    attn_seq b = {.t = 3, .s = 3, .query = x, .output = o2, .position_ids = pos};
    CHECK_INT_EQ(attn_forward(l, &a, 1, NULL, NULL, NULL), ATTN_OK);
    CHECK_INT_EQ(attn_forward(l, &b, 1, NULL, NULL, NULL), ATTN_OK);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
    cross.output = o1;
    CHECK_INT_EQ(attn_forward(l, &cross, 1, NULL, NULL, NULL), ATTN_OK);
    CHECK_INT_EQ(attn_project_kv(l, kv, kv, 3, pk, pv, NULL), ATTN_OK);
    attn_layer_free(l);
}

int main(void)
{
    openblas_set_num_threads(1); /* so threaded workspaces use their pool */
    test_rng r = {0x6a09e667f3bcc908ull};
    RUN_WITH(fast_paths_vs_reference, &r);
    RUN_WITH(kv_cache_streams, &r);
    RUN_WITH(explicit_positions_equal_default, &r);
    RUN_WITH(gqa_equals_repeated_heads, &r);
    RUN_WITH(styles_differ, &r);
    RUN_WITH(partial_rotary_tail, &r);
    RUN(inv_freq_formulas);
    RUN_WITH(large_positions, &r);
    RUN(errors);
    printf("worst (relative to tolerance 1e-5): vs reference %.3g, stream vs one-shot %.3g; "
           "GQA vs repeated heads %.3g\n", worst.ref, worst.stream, worst.expand);
    return check_summary();
}
