/* test_properties.c — properties attn_forward must have on random layers:
 * distributions, exact zeros where masked, causality, permutation invariance,
 * batching independence, fully masked rows, input rejection with outputs left
 * alone, argument errors, weights modes, window/key_length, workspaces, threads.
 */
#include "attn.h"
#include "check.h"
#include "core_util.h"
#include "layer_internal.h" /* attn__layer_set_source_dtype */

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#define SENTINEL 12345.0f

static const layer_shape SQUARE = {.h = 4, .d_k = 8, .d_v = 8, .e_q = 32, .e_k = 32, .e_v = 32,
                                   .e_out = 32, .bias = 1, .out_proj = 1};

/* A workspace with default options; NULL on failure. */
static attn_workspace *default_ws(void)
{
    attn_workspace *ws = NULL;
    attn_workspace_create(NULL, &ws, NULL);
    return ws;
}

static attn_layer_info info_of(const attn_layer *l)
{
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    return li;
}

/* Test-side visibility rule (a third statement of the mask semantics). */
static int visible(const attn_seq *s, int head, int t, int j)
{
    if (s->key_padding_mask && s->key_padding_mask[j]) return 0;
    if (s->key_length > 0 && j >= s->key_length) return 0;
    if (s->is_causal && j > t) return 0;
    if (s->window > 0 && (s->is_causal ? t - j >= s->window : abs(t - j) >= s->window)) return 0;
    size_t at = (size_t)(s->attn_mask_per_head ? head : 0) * s->t * s->s + (size_t)t * s->s + j;
    if (s->attn_mask_kind == ATTN_MASK_BOOL && ((const uint8_t *)s->attn_mask)[at]) return 0;
    if (s->attn_mask_kind == ATTN_MASK_FLOAT && isinf(((const float *)s->attn_mask)[at])) return 0;
    return 1;
}

/* Every mask kind at once; per-head weights: masked weights are exactly 0, rows
 * with a visible key sum to 1, rows without one are all 0. */
TEST(rows_and_masked_zeros)
{
    test_rng r = {1};
    attn_layer *l = make_layer(&r, &SQUARE);
    attn_layer_info li = info_of(l);
    const int T = 12, S = 10;
    for (int variant = 0; variant < 4; variant++) {
        seq_case c;
        seq_case_init(&c, &r, &li, T, S, 1, ATTN_WEIGHTS_PER_HEAD);
        c.kpm = calloc(S, 1);
        c.kpm[3] = c.kpm[7] = 1;
        c.seq.key_padding_mask = c.kpm;
        c.seq.key_length = variant == 1 ? 9 : 0;
        c.seq.is_causal = variant >= 2;
        c.seq.window = variant == 3 ? 3 : (variant == 1 ? 4 : 0);
        size_t plane = (size_t)T * S;
        if (variant % 2 == 0) { /* per-head float mask with some -inf */
            c.fmask = rand_floats(&r, plane * li.num_heads, 2.0f);
            for (size_t i = 0; i < plane * li.num_heads; i += 5) c.fmask[i] = -INFINITY;
            c.seq.attn_mask_kind = ATTN_MASK_FLOAT;
            c.seq.attn_mask_per_head = 1;
            c.seq.attn_mask = c.fmask;
        } else { /* shared bool mask */
            c.bmask = calloc(plane, 1);
            for (size_t i = 0; i < plane; i++) c.bmask[i] = (rng_next(&r) % 4) == 0;
            c.seq.attn_mask_kind = ATTN_MASK_BOOL;
            c.seq.attn_mask = c.bmask;
        }
        CHECK_INT_EQ(attn_forward(l, &c.seq, 1, NULL, NULL, NULL), ATTN_OK);
        int masked_nonzero = 0, bad_rows = 0, empty_rows = 0;
        for (int h = 0; h < li.num_heads; h++)
            for (int t = 0; t < T; t++) {
                double sum = 0;
                int any = 0;
                for (int j = 0; j < S; j++) {
                    float w = c.weights[(size_t)h * plane + (size_t)t * S + j];
                    if (!visible(&c.seq, h, t, j)) masked_nonzero += w != 0.0f;
                    else any = 1;
                    sum += w;
                }
                empty_rows += !any;
                if (fabs(sum - (any ? 1.0 : 0.0)) > 1e-5) bad_rows++;
            }
        CHECK_MSG(masked_nonzero == 0, "variant %d: %d masked weights not exactly 0", variant, masked_nonzero);
        CHECK_MSG(bad_rows == 0, "variant %d: %d rows do not sum to 1 (or 0 when empty)", variant, bad_rows);
        if (variant == 3) CHECK(empty_rows > 0); /* causal+window+padding empties some rows */
        CHECK(max_abs(c.output, (size_t)T * li.embed_out) < 100.0); /* finite, sane */
        seq_case_free(&c);
    }
    attn_layer_free(l);
}

/* Causal: changing key/value rows j > t0 (and query rows > t0) leaves rows <= t0
 * of the output bit-identical. Self- and cross-attention. */
TEST(causal_no_future)
{
    test_rng r = {2};
    attn_layer *l = make_layer(&r, &SQUARE);
    attn_layer_info li = info_of(l);
    const int T = 9, t0 = 4;
    for (int cross = 0; cross < 2; cross++) {
        seq_case a, b;
        seq_case_init(&a, &r, &li, T, T, cross, ATTN_WEIGHTS_AVERAGE);
        seq_case_init(&b, &r, &li, T, T, cross, ATTN_WEIGHTS_AVERAGE);
        memcpy(b.query, a.query, (size_t)T * li.embed_q * sizeof(float));
        if (cross) {
            memcpy(b.key, a.key, (size_t)T * li.embed_k * sizeof(float));
            memcpy(b.value, a.value, (size_t)T * li.embed_v * sizeof(float));
        }
        for (int row = t0 + 1; row < T; row++)
            for (int e = 0; e < li.embed_q; e++) {
                b.query[row * li.embed_q + e] += 0.5f;
                if (cross) b.key[row * li.embed_k + e] -= 0.7f, b.value[row * li.embed_v + e] *= 3.0f;
            }
        a.seq.is_causal = b.seq.is_causal = 1;
        CHECK_INT_EQ(attn_forward(l, &a.seq, 1, NULL, NULL, NULL), ATTN_OK);
        CHECK_INT_EQ(attn_forward(l, &b.seq, 1, NULL, NULL, NULL), ATTN_OK);
        size_t n = (size_t)(t0 + 1) * li.embed_out;
        CHECK_MSG(memcmp(a.output, b.output, n * sizeof(float)) == 0, "cross=%d: past rows changed", cross);
        CHECK(memcmp(a.weights, b.weights, (size_t)(t0 + 1) * T * sizeof(float)) == 0);
        /* and the future rows did change, so the test can fail */
        CHECK(memcmp(a.output + n, b.output + n, (T - t0 - 1) * (size_t)li.embed_out * sizeof(float)) != 0);
        seq_case_free(&a);
        seq_case_free(&b);
    }
    attn_layer_free(l);
}

/* Cross-attention without masks: permuting key and value rows together leaves the
 * output unchanged and permutes the weights columns. */
TEST(permutation_invariance)
{
    test_rng r = {3};
    layer_shape sh = {.h = 3, .d_k = 5, .d_v = 7, .e_q = 16, .e_k = 12, .e_v = 20, .e_out = 10,
                      .bias = 1, .out_proj = 1};
    attn_layer *l = make_layer(&r, &sh);
    attn_layer_info li = info_of(l);
    const int T = 6, S = 11;
    int perm[11];
    for (int j = 0; j < S; j++) perm[j] = j;
    for (int j = S - 1; j > 0; j--) {
        int k = rng_int(&r, 0, j), tmp = perm[j];
        perm[j] = perm[k], perm[k] = tmp;
    }
    seq_case a, b;
    seq_case_init(&a, &r, &li, T, S, 1, ATTN_WEIGHTS_PER_HEAD);
    seq_case_init(&b, &r, &li, T, S, 1, ATTN_WEIGHTS_PER_HEAD);
    memcpy(b.query, a.query, (size_t)T * li.embed_q * sizeof(float));
    for (int j = 0; j < S; j++) {
        memcpy(b.key + j * li.embed_k, a.key + perm[j] * li.embed_k, li.embed_k * sizeof(float));
        memcpy(b.value + j * li.embed_v, a.value + perm[j] * li.embed_v, li.embed_v * sizeof(float));
    }
    CHECK_INT_EQ(attn_forward(l, &a.seq, 1, NULL, NULL, NULL), ATTN_OK);
    CHECK_INT_EQ(attn_forward(l, &b.seq, 1, NULL, NULL, NULL), ATTN_OK);
    double d = max_abs_diff(a.output, b.output, (size_t)T * li.embed_out);
    printf("permutation: max |out - out_perm| = %.3g\n", d);
    CHECK(d <= 1e-5);
    double dw = 0;
    for (int h = 0; h < li.num_heads; h++)
        for (int t = 0; t < T; t++)
            for (int j = 0; j < S; j++) {
                size_t base = ((size_t)h * T + t) * S;
                double x = fabs(b.weights[base + j] - a.weights[base + perm[j]]);
                if (x > dw) dw = x;
            }
    CHECK(dw <= 1e-6);
    seq_case_free(&a);
    seq_case_free(&b);
    attn_layer_free(l);
}

/* A ragged batch (self and cross mixed, masks, both weight modes) gives what each
 * sequence gives alone. */
TEST(ragged_batch)
{
    test_rng r = {4};
    attn_layer *l = make_layer(&r, &SQUARE);
    attn_layer_info li = info_of(l);
    enum { N = 5 };
    const int ts[N] = {7, 1, 13, 4, 9}, ss[N] = {7, 5, 13, 16, 9}, cross[N] = {0, 1, 0, 1, 0};
    seq_case batch[N], alone[N];
    attn_seq seqs[N];
    for (int i = 0; i < N; i++) {
        attn_weights_mode wm = (attn_weights_mode)(i % 3);
        seq_case_init(&batch[i], &r, &li, ts[i], ss[i], cross[i], wm);
        seq_case_init(&alone[i], &r, &li, ts[i], ss[i], cross[i], wm);
        memcpy(alone[i].query, batch[i].query, (size_t)ts[i] * li.embed_q * sizeof(float));
        if (cross[i]) {
            memcpy(alone[i].key, batch[i].key, (size_t)ss[i] * li.embed_k * sizeof(float));
            memcpy(alone[i].value, batch[i].value, (size_t)ss[i] * li.embed_v * sizeof(float));
        }
        batch[i].seq.is_causal = alone[i].seq.is_causal = i == 2;
        batch[i].seq.key_length = alone[i].seq.key_length = i == 3 ? 10 : 0;
        batch[i].seq.window = alone[i].seq.window = i == 4 ? 3 : 0;
        seqs[i] = batch[i].seq;
    }
    attn_workspace *ws = default_ws();
    CHECK(ws != NULL);
    CHECK_INT_EQ(attn_forward(l, seqs, N, ws, NULL, NULL), ATTN_OK);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        CHECK_INT_EQ(attn_forward(l, &alone[i].seq, 1, ws, NULL, NULL), ATTN_OK);
        double d = max_abs_diff(batch[i].output, alone[i].output, (size_t)ts[i] * li.embed_out);
        if (batch[i].weights) {
            size_t wn = (size_t)ts[i] * ss[i] * (batch[i].seq.weights_mode == ATTN_WEIGHTS_PER_HEAD ? li.num_heads : 1);
            double dw = max_abs_diff(batch[i].weights, alone[i].weights, wn);
            if (dw > d) d = dw;
        }
        if (d > worst) worst = d;
    }
    printf("ragged batch vs alone: max diff %.3g\n", worst);
    CHECK(worst <= 1e-6);
    for (int i = 0; i < N; i++) seq_case_free(&batch[i]), seq_case_free(&alone[i]);
    attn_workspace_free(ws);
    attn_layer_free(l);
}

/* A row that sees no key: zero weights and zero mixture (output = b_o with W_O,
 * exactly 0 without), never NaN; other rows unaffected. */
TEST(fully_masked_row)
{
    test_rng r = {5};
    for (int with_o = 0; with_o < 2; with_o++) {
        layer_shape sh = SQUARE;
        sh.out_proj = with_o;
        sh.e_out = with_o ? 32 : sh.h * sh.d_v;
        attn_layer *l = make_layer(&r, &sh);
        attn_layer_info li = info_of(l);
        const int T = 5, S = 6;
        seq_case c;
        seq_case_init(&c, &r, &li, T, S, 1, ATTN_WEIGHTS_PER_HEAD);
        c.bmask = calloc((size_t)T * S, 1);
        for (int j = 0; j < S; j++) c.bmask[2 * S + j] = 1; /* row 2 blocked entirely */
        c.seq.attn_mask_kind = ATTN_MASK_BOOL;
        c.seq.attn_mask = c.bmask;
        CHECK_INT_EQ(attn_forward(l, &c.seq, 1, NULL, NULL, NULL), ATTN_OK);
        int nan = 0, nonzero_w = 0;
        for (size_t i = 0; i < (size_t)T * li.embed_out; i++) nan += isnan(c.output[i]);
        for (int h = 0; h < li.num_heads; h++)
            for (int j = 0; j < S; j++) nonzero_w += c.weights[((size_t)h * T + 2) * S + j] != 0.0f;
        CHECK_INT_EQ(nan, 0);
        CHECK_INT_EQ(nonzero_w, 0);
        if (!with_o) { /* no W_O: the blocked row's output is the zero mixture itself */
            int wrong = 0;
            for (int e = 0; e < li.embed_out; e++) wrong += c.output[2 * li.embed_out + e] != 0.0f;
            CHECK_INT_EQ(wrong, 0);
        }
        if (with_o) { /* every blocked row has the same output: W_O·0 + b_o */
            seq_case d;
            seq_case_init(&d, &r, &li, 1, 1, 1, ATTN_WEIGHTS_NONE);
            uint8_t pad = 1;
            d.seq.key_padding_mask = &pad;
            CHECK_INT_EQ(attn_forward(l, &d.seq, 1, NULL, NULL, NULL), ATTN_OK);
            CHECK(memcmp(d.output, c.output + 2 * li.embed_out, li.embed_out * sizeof(float)) == 0);
            CHECK(max_abs(d.output, li.embed_out) > 0); /* b_o is random, not zero */
            seq_case_free(&d);
        }
        seq_case_free(&c);
        attn_layer_free(l);
    }
}

/* Non-finite inputs: ATTN_ERR_NONFINITE naming the sequence and index; no
 * output (of any sequence) or weights written. */
TEST(nonfinite_rejected)
{
    test_rng r = {6};
    attn_layer *l = make_layer(&r, &SQUARE);
    attn_layer_info li = info_of(l);
    struct { int field; float bad; const char *msg; } cases[] = {
        {0, NAN, "seqs[1].query[4][7] is not finite"},
        {1, INFINITY, "seqs[1].key[2][5] is not finite"},
        {2, -INFINITY, "seqs[1].value[3][0] is not finite"},
        {3, NAN, "seqs[1].attn_mask[2][1][3] is NaN"},
        {3, INFINITY, "seqs[1].attn_mask[2][1][3] is +inf (only -inf may block)"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        seq_case c[2];
        seq_case_init(&c[0], &r, &li, 3, 3, 0, ATTN_WEIGHTS_PER_HEAD);
        seq_case_init(&c[1], &r, &li, 6, 4, 1, ATTN_WEIGHTS_AVERAGE);
        c[1].fmask = rand_floats(&r, (size_t)li.num_heads * 6 * 4, 1.0f);
        c[1].fmask[0] = -INFINITY; /* allowed */
        c[1].seq.attn_mask_kind = ATTN_MASK_FLOAT;
        c[1].seq.attn_mask_per_head = 1;
        c[1].seq.attn_mask = c[1].fmask;
        switch (cases[k].field) {
        case 0: c[1].query[4 * li.embed_q + 7] = cases[k].bad; break;
        case 1: c[1].key[2 * li.embed_k + 5] = cases[k].bad; break;
        case 2: c[1].value[3 * li.embed_v + 0] = cases[k].bad; break;
        default: c[1].fmask[2 * 24 + 1 * 4 + 3] = cases[k].bad; break;
        }
        attn_seq seqs[2] = {c[0].seq, c[1].seq};
        attn_error err = {0};
        CHECK_INT_EQ(attn_forward(l, seqs, 2, NULL, NULL, &err), ATTN_ERR_NONFINITE);
        CHECK_INT_EQ(err.code, ATTN_ERR_NONFINITE);
        CHECK_STR_EQ(err.message, cases[k].msg);
        int touched = 0;
        for (int i = 0; i < 2; i++) {
            for (size_t e = 0; e < (size_t)c[i].seq.t * li.embed_out; e++) touched += c[i].output[e] != SENTINEL;
            size_t wn = i == 0 ? 3 * 3 * (size_t)li.num_heads : 6 * 4;
            for (size_t e = 0; e < wn; e++) touched += c[i].weights[e] != SENTINEL;
        }
        CHECK_INT_EQ(touched, 0);
        seq_case_free(&c[0]);
        seq_case_free(&c[1]);
    }
    attn_layer_free(l);
}

static attn_status run1(const attn_layer *l, const attn_seq *s, attn_error *err)
{
    return attn_forward(l, s, 1, NULL, NULL, err);
}

/* Bad arguments give the documented codes and touch nothing. */
TEST(bad_args)
{
    test_rng r = {7};
    attn_layer *l = make_layer(&r, &SQUARE);
    attn_layer_info li = info_of(l);
    seq_case c;
    seq_case_init(&c, &r, &li, 4, 4, 0, ATTN_WEIGHTS_NONE);
    attn_error err;
    attn_seq s;
    uint8_t bm[16] = {0};
    float wbuf[4 * 4 * 4];

    CHECK_INT_EQ(attn_forward(NULL, &c.seq, 1, NULL, NULL, &err), ATTN_ERR_INVALID_ARG);
    CHECK_INT_EQ(attn_forward(l, NULL, 1, NULL, NULL, &err), ATTN_ERR_INVALID_ARG);
    CHECK_INT_EQ(attn_forward(l, &c.seq, -1, NULL, NULL, &err), ATTN_ERR_INVALID_ARG);
    CHECK_INT_EQ(attn_forward(l, NULL, 0, NULL, NULL, &err), ATTN_OK); /* empty batch */
    s = c.seq; s.query = NULL;
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_INVALID_ARG);
    CHECK_STR_EQ(err.message, "seqs[0].query is NULL");
    s = c.seq; s.output = NULL;
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_INVALID_ARG);
    s = c.seq; s.key = c.query; /* key without value */
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_INVALID_ARG);
    s = c.seq; s.s = 5; /* self-attention with s != t */
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_SHAPE);
    s = c.seq; s.t = 0; s.s = 0;
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_SHAPE);
    CHECK_STR_EQ(err.message, "seqs[0].t = 0, must be >= 1");
    s = c.seq; s.key_length = 5;
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_SHAPE);
    s = c.seq; s.key_length = -1;
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_SHAPE);
    s = c.seq; s.window = -2;
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_INVALID_ARG);
    s = c.seq; s.attn_mask_kind = (attn_mask_kind)7; s.attn_mask = bm;
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_INVALID_ARG);
    s = c.seq; s.attn_mask_kind = ATTN_MASK_BOOL; /* kind without a mask */
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_INVALID_ARG);
    s = c.seq; s.attn_mask = bm; /* mask without a kind */
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_INVALID_ARG);
    s = c.seq; s.attn_mask_kind = ATTN_MASK_BOOL; s.attn_mask = bm; s.attn_mask_per_head = 2;
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_INVALID_ARG);
    s = c.seq; s.weights_mode = ATTN_WEIGHTS_PER_HEAD; /* no buffer */
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_INVALID_ARG);
    s = c.seq; s.weights = wbuf; /* buffer but mode NONE */
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_INVALID_ARG);
    s = c.seq; s.weights_mode = (attn_weights_mode)9; s.weights = wbuf;
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_INVALID_ARG);
    /* second sequence bad: error names it, the first one's output untouched */
    attn_seq two[2] = {c.seq, c.seq};
    two[1].t = -3;
    CHECK_INT_EQ(attn_forward(l, two, 2, NULL, NULL, &err), ATTN_ERR_SHAPE);
    CHECK_STR_EQ(err.message, "seqs[1].t = -3, must be >= 1");
    CHECK(c.output[0] == SENTINEL);
    /* magnitudes that would overflow float32 in the scores */
    float *big = malloc((size_t)4 * li.embed_q * sizeof(float));
    for (int i = 0; i < 4 * li.embed_q; i++) big[i] = 1e25f;
    s = c.seq; s.query = big;
    CHECK_INT_EQ(run1(l, &s, &err), ATTN_ERR_LIMIT);
    CHECK(c.output[0] == SENTINEL);
    free(big);
    /* self-attention on a layer whose key width differs from the query width */
    layer_shape kd = SQUARE;
    kd.e_k = 16;
    attn_layer *lk = make_layer(&r, &kd);
    CHECK_INT_EQ(run1(lk, &c.seq, &err), ATTN_ERR_SHAPE);
    attn_layer_free(lk);
    /* err untouched on success */
    err.code = ATTN_ERR_INTERNAL;
    CHECK_INT_EQ(run1(l, &c.seq, &err), ATTN_OK);
    CHECK_INT_EQ(err.code, ATTN_ERR_INTERNAL);
    CHECK(c.output[0] != SENTINEL);
    seq_case_free(&c);
    attn_layer_free(l);
}

/* attn_layer_create: dimension, pointer, finiteness and overflow checks. */
TEST(layer_create)
{
    float w[64], b[8];
    for (int i = 0; i < 64; i++) w[i] = 0.01f * (float)i;
    for (int i = 0; i < 8; i++) b[i] = 0.5f;
    attn_layer_desc ok = {2, 2, 2, 4, 4, 4, 4, w, w, w, w, b, b, b, b, 0, {0}, 0};
    attn_layer *l = (attn_layer *)&ok; /* poison: must become NULL on failure */
    attn_error err = {0};
    attn_layer_desc d;

    d = ok; d.num_heads = 0;
    CHECK_INT_EQ(attn_layer_create(&d, &l, &err), ATTN_ERR_SHAPE);
    CHECK(l == NULL);
    CHECK_STR_EQ(err.message, "desc.num_heads = 0, must be >= 1");
    d = ok; d.embed_v = -1;
    CHECK_INT_EQ(attn_layer_create(&d, &l, &err), ATTN_ERR_SHAPE);
    d = ok; d.w_k = NULL;
    CHECK_INT_EQ(attn_layer_create(&d, &l, &err), ATTN_ERR_INVALID_ARG);
    d = ok; d.w_o = NULL; /* b_o without w_o */
    CHECK_INT_EQ(attn_layer_create(&d, &l, &err), ATTN_ERR_INVALID_ARG);
    d = ok; d.num_heads = 1 << 16; d.head_dim_k = 1 << 16;
    CHECK_INT_EQ(attn_layer_create(&d, &l, &err), ATTN_ERR_LIMIT);
    d = ok; d.num_heads = 1; d.head_dim_k = INT_MAX; d.embed_q = INT_MAX; d.embed_k = INT_MAX;
    CHECK_INT_EQ(attn_layer_create(&d, &l, &err), ATTN_ERR_LIMIT); /* size_t overflow */
    float wn[16];
    memcpy(wn, w, sizeof wn);
    wn[1 * 4 + 2] = NAN;
    d = ok; d.w_k = wn;
    CHECK_INT_EQ(attn_layer_create(&d, &l, &err), ATTN_ERR_NONFINITE);
    CHECK_STR_EQ(err.message, "desc.w_k[1][2] is not finite");
    CHECK_INT_EQ(attn_layer_create(NULL, &l, &err), ATTN_ERR_INVALID_ARG);
    CHECK_INT_EQ(attn_layer_create(&ok, NULL, &err), ATTN_ERR_INVALID_ARG);

    CHECK_INT_EQ(attn_layer_create(&ok, &l, &err), ATTN_OK);
    attn_layer_info li = info_of(l);
    CHECK_INT_EQ(li.num_heads, 2);
    CHECK_INT_EQ(li.embed_out, 4);
    CHECK_INT_EQ(li.has_out_proj, 1);
    CHECK_INT_EQ(li.has_bias_out, 1);
    CHECK_INT_EQ(li.param_count, 4 * 16 + 4 * 4);
    CHECK_STR_EQ(li.source_dtype, "");
    attn__layer_set_source_dtype(l, "BF16");
    li = info_of(l);
    CHECK_STR_EQ(li.source_dtype, "BF16");
    attn_layer_free(l);

    d = ok; d.w_o = NULL; d.b_o = NULL; d.b_q = NULL; d.embed_out = 999; /* ignored without W_O */
    CHECK_INT_EQ(attn_layer_create(&d, &l, &err), ATTN_OK);
    li = info_of(l);
    CHECK_INT_EQ(li.embed_out, 4);
    CHECK_INT_EQ(li.has_out_proj, 0);
    CHECK_INT_EQ(li.has_bias_q, 0);
    CHECK_INT_EQ(li.param_count, 3 * 16 + 2 * 4);
    attn_layer_free(l);
    attn_layer_free(NULL);

    for (int st = 0; st <= ATTN_ERR_INTERNAL; st++) CHECK(attn_strerror((attn_status)st)[0] != '\0');
    CHECK_STR_EQ(attn_strerror((attn_status)99), "unknown status");
}

/* PER_HEAD and AVERAGE agree (mean over heads) and give identical outputs; NONE
 * too (bit for bit on the materialised kernel, to rounding on the fused one). */
TEST(weights_modes)
{
    test_rng r = {8};
    attn_layer *l = make_layer(&r, &SQUARE);
    attn_layer_info li = info_of(l);
    const int T = 7, S = 9;
    seq_case a, b, n;
    seq_case_init(&a, &r, &li, T, S, 1, ATTN_WEIGHTS_PER_HEAD);
    seq_case_init(&b, &r, &li, T, S, 1, ATTN_WEIGHTS_AVERAGE);
    seq_case_init(&n, &r, &li, T, S, 1, ATTN_WEIGHTS_NONE);
    for (seq_case *x = &b; x; x = x == &b ? &n : NULL) {
        memcpy(x->query, a.query, (size_t)T * li.embed_q * sizeof(float));
        memcpy(x->key, a.key, (size_t)S * li.embed_k * sizeof(float));
        memcpy(x->value, a.value, (size_t)S * li.embed_v * sizeof(float));
    }
    CHECK_INT_EQ(attn_forward(l, &a.seq, 1, NULL, NULL, NULL), ATTN_OK);
    CHECK_INT_EQ(attn_forward(l, &b.seq, 1, NULL, NULL, NULL), ATTN_OK);
    CHECK_INT_EQ(attn_forward(l, &n.seq, 1, NULL, NULL, NULL), ATTN_OK);
    double d = 0;
    for (int i = 0; i < T * S; i++) {
        double m = 0;
        for (int h = 0; h < li.num_heads; h++) m += a.weights[(size_t)h * T * S + i];
        m /= li.num_heads;
        if (fabs(m - b.weights[i]) > d) d = fabs(m - b.weights[i]);
    }
    CHECK(d <= 1e-6);
    size_t on = (size_t)T * li.embed_out;
    CHECK(memcmp(a.output, b.output, on * sizeof(float)) == 0);
    /* Without weights the default is the fused kernel: the same maths, rounded
     * differently; the materialised kernel gives the weighted modes' bits. */
    CHECK(max_abs_diff(a.output, n.output, on) <= 1e-6 * (1.0 + max_abs(a.output, on)));
    attn_workspace_options mo = {.kernel = ATTN_KERNEL_MATERIALIZED};
    attn_workspace *mws = NULL;
    CHECK_INT_EQ(attn_workspace_create(&mo, &mws, NULL), ATTN_OK);
    CHECK_INT_EQ(attn_forward(l, &n.seq, 1, mws, NULL, NULL), ATTN_OK);
    CHECK(memcmp(a.output, n.output, on * sizeof(float)) == 0);
    attn_workspace_free(mws);
    seq_case_free(&a); seq_case_free(&b); seq_case_free(&n);
    attn_layer_free(l);
}

/* window and key_length give the same result as the equivalent explicit masks,
 * and weights vanish exactly where they should. */
TEST(window_and_key_length)
{
    test_rng r = {9};
    attn_layer *l = make_layer(&r, &SQUARE);
    attn_layer_info li = info_of(l);
    const int T = 10, S = 10, W = 3, KL = 6;
    for (int causal = 0; causal < 2; causal++) {
        seq_case a, b;
        seq_case_init(&a, &r, &li, T, S, 1, ATTN_WEIGHTS_AVERAGE);
        seq_case_init(&b, &r, &li, T, S, 1, ATTN_WEIGHTS_AVERAGE);
        memcpy(b.query, a.query, (size_t)T * li.embed_q * sizeof(float));
        memcpy(b.key, a.key, (size_t)S * li.embed_k * sizeof(float));
        memcpy(b.value, a.value, (size_t)S * li.embed_v * sizeof(float));
        a.seq.window = W;
        a.seq.key_length = KL;
        a.seq.is_causal = causal;
        b.bmask = calloc((size_t)T * S, 1);
        b.kpm = calloc(S, 1);
        for (int j = KL; j < S; j++) b.kpm[j] = 1;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < S; j++)
                b.bmask[t * S + j] = causal ? (j > t || j <= t - W) : abs(t - j) >= W;
        b.seq.attn_mask_kind = ATTN_MASK_BOOL;
        b.seq.attn_mask = b.bmask;
        b.seq.key_padding_mask = b.kpm;
        CHECK_INT_EQ(attn_forward(l, &a.seq, 1, NULL, NULL, NULL), ATTN_OK);
        CHECK_INT_EQ(attn_forward(l, &b.seq, 1, NULL, NULL, NULL), ATTN_OK);
        double d = max_abs_diff(a.output, b.output, (size_t)T * li.embed_out);
        CHECK_MSG(d <= 1e-7, "causal=%d: window/key_length vs explicit masks differ by %g", causal, d);
        int wrong = 0;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < S; j++) {
                int vis = j < KL && (causal ? (j <= t && t - j < W) : abs(t - j) < W);
                float w = a.weights[t * S + j];
                wrong += vis ? !(w > 0.0f) : w != 0.0f;
            }
        CHECK_INT_EQ(wrong, 0);
        seq_case_free(&a);
        seq_case_free(&b);
    }
    attn_layer_free(l);
}

/* One workspace reused across growing and shrinking batches gives the same bits
 * as a fresh one; stats are filled. */
TEST(workspace_reuse)
{
    test_rng r = {10};
    attn_layer *l = make_layer(&r, &SQUARE);
    attn_layer_info li = info_of(l);
    attn_workspace *ws = default_ws();
    const int sizes[] = {3, 40, 1, 17};
    size_t prev_peak = 0;
    for (size_t k = 0; k < 4; k++) {
        seq_case a, b;
        seq_case_init(&a, &r, &li, sizes[k], sizes[k], 0, ATTN_WEIGHTS_PER_HEAD);
        seq_case_init(&b, &r, &li, sizes[k], sizes[k], 0, ATTN_WEIGHTS_PER_HEAD);
        memcpy(b.query, a.query, (size_t)sizes[k] * li.embed_q * sizeof(float));
        attn_forward_stats st = {0};
        CHECK_INT_EQ(attn_forward(l, &a.seq, 1, ws, &st, NULL), ATTN_OK);
        CHECK_INT_EQ(attn_forward(l, &b.seq, 1, NULL, NULL, NULL), ATTN_OK);
        CHECK(memcmp(a.output, b.output, (size_t)sizes[k] * li.embed_out * sizeof(float)) == 0);
        CHECK(st.flops > 0);
        CHECK(st.peak_scratch > 0);
        if (k == 1) CHECK(st.peak_scratch > prev_peak);
        prev_peak = st.peak_scratch;
        seq_case_free(&a);
        seq_case_free(&b);
    }
    attn_workspace_free(ws);
    attn_workspace_free(NULL);
    attn_layer_free(l);
}

/* Two threads, one layer, distinct workspaces: same bits as one thread. */
typedef struct thread_arg { const attn_layer *l; attn_seq seq; attn_status st; } thread_arg;

static void *thread_main(void *p)
{
    thread_arg *a = p;
    attn_workspace *ws = default_ws();
    for (int rep = 0; rep < 20 && a->st == ATTN_OK; rep++)
        a->st = attn_forward(a->l, &a->seq, 1, ws, NULL, NULL);
    attn_workspace_free(ws);
    return NULL;
}

TEST(concurrent)
{
    test_rng r = {11};
    attn_layer *l = make_layer(&r, &SQUARE);
    attn_layer_info li = info_of(l);
    seq_case c[2], ref[2];
    thread_arg args[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        seq_case_init(&c[i], &r, &li, 24, 24, 0, ATTN_WEIGHTS_PER_HEAD);
        seq_case_init(&ref[i], &r, &li, 24, 24, 0, ATTN_WEIGHTS_PER_HEAD);
        memcpy(ref[i].query, c[i].query, (size_t)24 * li.embed_q * sizeof(float));
        CHECK_INT_EQ(attn_forward(l, &ref[i].seq, 1, NULL, NULL, NULL), ATTN_OK);
        args[i] = (thread_arg){l, c[i].seq, ATTN_OK};
    }
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, thread_main, &args[i]) == 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK_INT_EQ(args[i].st, ATTN_OK);
        CHECK(memcmp(c[i].output, ref[i].output, (size_t)24 * li.embed_out * sizeof(float)) == 0);
        seq_case_free(&c[i]);
        seq_case_free(&ref[i]);
    }
    attn_layer_free(l);
}

int main(void)
{
    RUN(rows_and_masked_zeros);
    RUN(causal_no_future);
    RUN(permutation_invariance);
    RUN(ragged_batch);
    RUN(fully_masked_row);
    RUN(nonfinite_rejected);
    RUN(bad_args);
    RUN(layer_create);
    RUN(weights_modes);
    RUN(window_and_key_length);
    RUN(workspace_reuse);
    RUN(concurrent);
    return check_summary();
}
