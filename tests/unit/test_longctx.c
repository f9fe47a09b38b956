/* test_longctx.c — the streamed (long-context) plan of attn_forward
 * (attn_workspace_options.max_scratch_bytes): with the bound forced tiny it
 * equals the ordinary plan (bound SIZE_MAX) within 1e-5 relative for MHA,
 * GQA and MQA, RoPE, causal / window / key padding / key_length / (T, S)
 * bool and float masks, biases, W_O present and absent, d_k != d_v, self and
 * cross attention, ragged batches, one and two threads, chunks of one block
 * and of several; a bound between the floor and the ordinary plan is kept;
 * sequences that cannot stream (weights, per-head masks, KV caches, the
 * materialised kernel) keep the ordinary plan, in a piece of their own; a
 * batch above the bound runs in pieces that fit; the default bound (64 MiB)
 * streams a call whose ordinary plan is 128 MiB and stays within it.
 */
#include "attn.h"
#include "check.h"
#include "core_util.h"

#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double worst; /* largest streamed-vs-ordinary difference / tolerance */

static attn_workspace *bound_ws(int threads, int bq, int bk, size_t bound)
{
    attn_workspace_options o = {.n_threads = threads, .block_q = bq, .block_k = bk,
                                .max_scratch_bytes = bound};
    attn_workspace *ws = NULL;
    CHECK_INT_EQ(attn_workspace_create(&o, &ws, NULL), ATTN_OK);
    return ws;
}

static gqa_shape random_shape(test_rng *r, int gmode, int rope)
{
    gqa_shape s = {0};
    s.h = 2 * rng_int(r, 1, 4);
    s.g = gmode == 0 ? s.h : gmode == 1 ? s.h / 2 : 1; /* MHA, GQA, MQA */
    s.d_k = 2 * rng_int(r, 1, 8);
    s.d_v = rng_int(r, 0, 1) ? s.d_k : rng_int(r, 1, 12);
    s.e = rng_int(r, 4, 40);
    s.bias = rng_int(r, 0, 1);
    s.out_proj = rng_int(r, 0, 2) != 0;
    s.e_out = s.out_proj ? rng_int(r, 1, 40) : s.h * s.d_v;
    if (rope) {
        s.rope.style = rng_int(r, 0, 1) ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED;
        s.rope.rotary_dim = 2 * rng_int(r, 1, s.d_k / 2);
    }
    return s;
}

/* A sequence's inputs and both outputs (streamed, ordinary). */
typedef struct long_case {
    attn_seq seq;
    float *x, *kx, *vx, *out, *ref, *fmask;
    uint8_t *kpm, *bmask;
    int64_t *pos;
} long_case;

/* Random masks (never all keys of a row blocked by kpm / bool mask: key 0
 * stays visible), positions and lengths; cross-attention when cross. */
static void long_case_init(long_case *c, test_rng *r, const attn_layer_info *li, int cross)
{
    memset(c, 0, sizeof *c);
    const int T = rng_int(r, 1, 60), S = cross ? rng_int(r, 1, 70) : T;
    c->x = rand_floats(r, (size_t)T * li->embed_q, 1.0f);
    if (cross) {
        c->kx = rand_floats(r, (size_t)S * li->embed_k, 1.0f);
        c->vx = rand_floats(r, (size_t)S * li->embed_v, 1.0f);
    }
    c->out = malloc((size_t)T * li->embed_out * sizeof(float));
    c->ref = malloc((size_t)T * li->embed_out * sizeof(float));
    attn_seq *s = &c->seq;
    *s = (attn_seq){.t = T, .s = S, .query = c->x, .key = c->kx, .value = c->vx, .output = c->out};
    s->is_causal = rng_int(r, 0, 1);
    s->window = rng_int(r, 0, 3) == 0 ? rng_int(r, 1, S + 1) : 0;
    if (rng_int(r, 0, 3) == 0) s->key_length = rng_int(r, 1, S);
    if (rng_int(r, 0, 2) == 0) {
        c->kpm = calloc((size_t)S, 1);
        for (int j = 1; j < S; j++) c->kpm[j] = rng_int(r, 0, 4) == 0;
        s->key_padding_mask = c->kpm;
    }
    const int mk = rng_int(r, 0, 3);
    if (mk == 1) {
        c->bmask = calloc((size_t)T * S, 1);
        for (size_t i = 0; i < (size_t)T * S; i++) c->bmask[i] = i % (size_t)S != 0 && rng_int(r, 0, 4) == 0;
        s->attn_mask_kind = ATTN_MASK_BOOL;
        s->attn_mask = c->bmask;
    } else if (mk == 2) {
        c->fmask = rand_floats(r, (size_t)T * S, 2.0f);
        s->attn_mask_kind = ATTN_MASK_FLOAT;
        s->attn_mask = c->fmask;
    }
    if (li->rope.style != ATTN_ROPE_NONE && rng_int(r, 0, 1)) {
        c->pos = malloc((size_t)T * sizeof *c->pos);
        for (int i = 0; i < T; i++) c->pos[i] = rng_int(r, 0, 3) ? 100 + i : rng_int(r, 0, 5000);
        s->position_ids = c->pos;
    }
}

/* A self-attention case of t rows (no masks) for a layer of widths e -> e_out;
 * its output is ref. */
static void self_case_init(long_case *c, test_rng *r, int t, int e, int e_out)
{
    memset(c, 0, sizeof *c);
    c->x = rand_floats(r, (size_t)t * e, 1.0f);
    c->out = malloc((size_t)t * e_out * sizeof(float));
    c->ref = malloc((size_t)t * e_out * sizeof(float));
    c->seq = (attn_seq){.t = t, .s = t, .query = c->x, .output = c->ref};
}

static attn_layer *layer_and_info(test_rng *r, const gqa_shape *sh, attn_layer_info *li)
{
    attn_layer *l = gqa_layer(r, sh);
    if (l) attn_layer_get_info(l, li);
    return l;
}

static void long_case_free(long_case *c)
{
    free(c->x); free(c->kx); free(c->vx); free(c->out); free(c->ref);
    free(c->fmask); free(c->kpm); free(c->bmask); free(c->pos);
}

/* Runs seqs through ws; returns the stats (CHECKs OK). */
static attn_forward_stats forward(const attn_layer *l, attn_seq *seqs, int n, attn_workspace *ws,
                                  const char *what)
{
    attn_forward_stats st = {0, 0, -1};
    attn_error err = {0};
    attn_status rc = attn_forward(l, seqs, n, ws, &st, &err);
    CHECK_MSG(rc == ATTN_OK, "%s: %s: %s", what, attn_status_name(rc), err.message);
    return st;
}

/* The outputs of cs (streamed into out) against ref, 1e-5 relative. */
static void check_outputs(const long_case *cs, int n, const attn_layer_info *li, const char *what)
{
    for (int i = 0; i < n; i++) {
        const size_t no = (size_t)cs[i].seq.t * li->embed_out;
        const double s = max_abs(cs[i].ref, no), tol = 1e-5 * (s > 1.0 ? s : 1.0);
        const double d = max_abs_diff(cs[i].out, cs[i].ref, no);
        CHECK_MSG(d <= tol, "%s: seq %d h=%d g=%d d_k=%d d_v=%d T=%d S=%d rope=%d w_o=%d: diff %.3g > %.3g",
                  what, i, li->num_heads, li->num_kv_heads, li->head_dim_k, li->head_dim_v, cs[i].seq.t,
                  cs[i].seq.s, (int)li->rope.style, li->has_out_proj, d, tol);
        keep_max(&worst, d / tol);
    }
}

/* A lone sequence under a bound halfway between the streamed floor and the
 * ordinary plan: wider passes (several KV heads, the last one narrower when
 * they do not divide g) and longer chunks, still within the bound, still
 * equal. */
static void mid_bound_case(const attn_layer *l, long_case *c, const attn_layer_info *li, size_t floor_bytes,
                           size_t ordinary, const attn_workspace_options *o, const char *what)
{
    if (floor_bytes >= ordinary) return; /* tiny shapes: streaming cannot save anything */
    const size_t bound = floor_bytes + (ordinary - floor_bytes) / 2;
    attn_workspace *mid = bound_ws(o->n_threads, o->block_q, o->block_k, bound);
    for (size_t i = 0; i < (size_t)c->seq.t * li->embed_out; i++) c->out[i] = 12345.0f;
    const attn_forward_stats st = forward(l, &c->seq, 1, mid, what);
    CHECK_MSG(st.streamed == 1 && st.peak_scratch <= bound, "%s: streamed %d, peak %zu > bound %zu", what,
              st.streamed, st.peak_scratch, bound);
    check_outputs(c, 1, li, what);
    attn_workspace_free(mid);
}

/* One random batch of 1..3 sequences: streamed (bound 1 byte: chunks of one
 * block, passes of one KV head) and ordinary (no bound) agree; a lone
 * sequence also under a middle bound. */
static void batch_case(test_rng *r, const attn_layer *l, attn_workspace *tiny, attn_workspace *none,
                       const char *what)
{
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    const int n = rng_int(r, 1, 3), cross = li.rope.style == ATTN_ROPE_NONE && rng_int(r, 0, 1);
    long_case cs[3];
    attn_seq seqs[3];
    for (int i = 0; i < n; i++) {
        long_case_init(&cs[i], r, &li, cross);
        seqs[i] = cs[i].seq;
    }
    attn_forward_stats st = forward(l, seqs, n, tiny, what);
    CHECK_MSG(st.streamed == 1, "%s: streamed = %d with a 1-byte bound", what, st.streamed);
    CHECK(st.peak_scratch > 0);
    for (int i = 0; i < n; i++) seqs[i].output = cs[i].ref;
    attn_forward_stats so = forward(l, seqs, n, none, what);
    CHECK_INT_EQ(so.streamed, 0);
    CHECK(so.flops == st.flops);
    check_outputs(cs, n, &li, what);
    attn_workspace_options o;
    attn_workspace_get_options(tiny, &o);
    if (n == 1) mid_bound_case(l, &cs[0], &li, st.peak_scratch, so.peak_scratch, &o, what);
    for (int i = 0; i < n; i++) long_case_free(&cs[i]);
}

TEST_WITH(streamed_equals_ordinary, test_rng *r)
{
    struct { int threads, bq, bk; const char *name; } wss[] = {
        {1, 4, 5, "1 thread, blocks 4x5"}, {1, 1, 3, "1 thread, blocks 1x3"}, {2, 3, 7, "2 threads, blocks 3x7"},
        {1, 0, 0, "1 thread, default blocks"}};
    for (size_t w = 0; w < sizeof wss / sizeof wss[0]; w++) {
        attn_workspace *tiny = bound_ws(wss[w].threads, wss[w].bq, wss[w].bk, 1);
        attn_workspace *none = bound_ws(wss[w].threads, wss[w].bq, wss[w].bk, SIZE_MAX);
        for (int c = 0; c < 36; c++) {
            gqa_shape sh = random_shape(r, c % 3, c % 4 == 1);
            attn_layer *l = gqa_layer(r, &sh);
            if (l == NULL) continue;
            batch_case(r, l, tiny, none, wss[w].name);
            attn_layer_free(l);
        }
        attn_workspace_free(tiny);
        attn_workspace_free(none);
    }
}

/* A layer big enough for the pool (> 2 MFLOP) and several chunks: causal
 * self-attention with RoPE and GQA, bound between the floor and the ordinary
 * plan: peak_scratch within the bound, results equal, two threads equal one
 * within rounding. */
TEST_WITH(bound_between_floor_and_ordinary, test_rng *r)
{
    gqa_shape sh = {.h = 8, .g = 2, .d_k = 16, .d_v = 16, .e = 64, .e_out = 64, .bias = 1, .out_proj = 1,
                    .rope = {.style = ATTN_ROPE_HALF}};
    attn_layer_info li;
    attn_layer *l = layer_and_info(r, &sh, &li);
    const int T = 700;
    long_case c;
    self_case_init(&c, r, T, sh.e, sh.e_out);
    c.seq.is_causal = 1;
    attn_workspace *none = bound_ws(2, 32, 64, SIZE_MAX), *floor_ws = bound_ws(2, 32, 64, 1);
    const attn_forward_stats so = forward(l, &c.seq, 1, none, "ordinary");
    c.seq.output = c.out;
    const attn_forward_stats sf = forward(l, &c.seq, 1, floor_ws, "floor");
    CHECK(sf.streamed == 1 && so.streamed == 0);
    CHECK_MSG(sf.peak_scratch < so.peak_scratch / 2, "floor %zu vs ordinary %zu bytes", sf.peak_scratch,
              so.peak_scratch);
    check_outputs(&c, 1, &li, "floor");
    const size_t bound = (sf.peak_scratch + so.peak_scratch) / 2;
    attn_workspace *mid = bound_ws(2, 32, 64, bound), *mid1 = bound_ws(1, 32, 64, bound);
    const attn_forward_stats sm = forward(l, &c.seq, 1, mid, "mid bound");
    CHECK(sm.streamed == 1);
    CHECK_MSG(sm.peak_scratch <= bound && sm.peak_scratch > sf.peak_scratch,
              "peak %zu, bound %zu, floor %zu", sm.peak_scratch, bound, sf.peak_scratch);
    check_outputs(&c, 1, &li, "mid bound");
    float *two = malloc((size_t)T * sh.e_out * sizeof(float));
    memcpy(two, c.out, (size_t)T * sh.e_out * sizeof(float));
    forward(l, &c.seq, 1, mid1, "mid bound, 1 thread");
    const double d = max_abs_diff(two, c.out, (size_t)T * sh.e_out);
    CHECK_MSG(d <= 1e-5 * (max_abs(two, (size_t)T * sh.e_out) + 1.0), "2 threads vs 1: %.3g", d);
    printf("  T=%d: ordinary %zu B, floor %zu B, bound %zu B -> %zu B\n", T, so.peak_scratch,
           sf.peak_scratch, bound, sm.peak_scratch);
    free(two);
    long_case_free(&c);
    attn_workspace_free(none);
    attn_workspace_free(floor_ws);
    attn_workspace_free(mid);
    attn_workspace_free(mid1);
    attn_layer_free(l);
}

/* g = 3 KV heads (h = 6) under bounds that fit one and two KV heads per
 * pass (three: the ordinary plan itself fits): passes of 1+1+1 and 2+1 heads
 * (their scratch says so) equal the ordinary plan. */
TEST_WITH(passes_of_several_kv_heads, test_rng *r)
{
    gqa_shape sh = {.h = 6, .g = 3, .d_k = 8, .d_v = 6, .e = 24, .e_out = 20, .bias = 1, .out_proj = 1};
    attn_layer_info li;
    attn_layer *l = layer_and_info(r, &sh, &li);
    enum { T = 50 };
    long_case c;
    self_case_init(&c, r, T, sh.e, sh.e_out);
    c.seq.is_causal = 1;
    c.seq.window = 9;
    attn_workspace *none = bound_ws(1, T, 16, SIZE_MAX);
    forward(l, &c.seq, 1, none, "ordinary");
    c.seq.output = c.out;
    /* block_q = T: one chunk of all rows, so only the pass width can grow. A
     * pass of n KV heads: K, V, Q and Z (d_k != d_v) of T rows; the kernel's
     * scratch (r = 2, 50 x 16 tile) is 3352 floats. */
    const size_t kernel = 3352 * sizeof(float);
    for (int n = 1; n <= 2; n++) {
        const size_t pass = (size_t)n * T * (8 + 6 + 2 * (8 + 6)) * sizeof(float);
        /* + 1500 for n jobs and alignment: one more head's 8400 bytes do not fit */
        attn_workspace *ws = bound_ws(1, T, 16, pass + kernel + 1500);
        const attn_forward_stats st = forward(l, &c.seq, 1, ws, "passes");
        CHECK(st.streamed == 1 && st.peak_scratch <= pass + kernel + 1500);
        CHECK_MSG(st.peak_scratch >= pass + kernel, "n=%d: %zu < %zu: fewer heads per pass", n,
                  st.peak_scratch, pass + kernel);
        check_outputs(&c, 1, &li, "passes");
        attn_workspace_free(ws);
    }
    long_case_free(&c);
    attn_workspace_free(none);
    attn_layer_free(l);
}

/* Sequences the streamed plan does not take keep the ordinary plan, even
 * under a 1-byte bound; in a batch with a plain sequence they run as pieces
 * of their own, the plain one streams, and both equal the unbounded call. */
TEST_WITH(unstreamable_keep_ordinary, test_rng *r)
{
    gqa_shape sh = {.h = 4, .g = 2, .d_k = 4, .d_v = 4, .e = 8, .e_out = 8, .bias = 1, .out_proj = 1};
    attn_layer *l = gqa_layer(r, &sh);
    enum { T = 6, E = 8, N_OUT = 2 * T * E };
    float *x = rand_floats(r, (size_t)2 * T * E, 1.0f), out[N_OUT], ref[N_OUT], w[4 * T * T], wr[4 * T * T];
    float ck[8 * 8], cv[8 * 8], ckr[8 * 8], cvr[8 * 8];
    uint8_t hm[4 * T * T] = {0};
    hm[5] = hm[40] = 1;
    attn_workspace *tiny = bound_ws(1, 2, 2, 1), *none = bound_ws(1, 2, 2, SIZE_MAX), *mat = NULL;
    attn_workspace_options mo = {.kernel = ATTN_KERNEL_MATERIALIZED, .max_scratch_bytes = 1};
    CHECK_INT_EQ(attn_workspace_create(&mo, &mat, NULL), ATTN_OK);
    const attn_seq plain = {.t = T, .s = T, .query = x, .output = out};
    attn_seq cases[4] = {plain, plain, plain, plain};
    cases[0].weights_mode = ATTN_WEIGHTS_PER_HEAD;
    cases[0].weights = w;
    cases[1].attn_mask_kind = ATTN_MASK_BOOL;
    cases[1].attn_mask_per_head = 1;
    cases[1].attn_mask = hm;
    cases[2].cache_k = ck;
    cases[2].cache_v = cv;
    cases[2].cache_append = 1;
    const char *names[4] = {"weights", "per-head mask", "KV cache", "materialised kernel"};
    for (int i = 0; i < 4; i++) {
        attn_seq batch[2] = {cases[i], plain};
        batch[1].query = x + T * E;
        batch[1].output = out + T * E;
        attn_workspace *ws = i == 3 ? mat : tiny;
        CHECK_MSG(forward(l, batch, 1, ws, names[i]).streamed == 0, "%s streamed", names[i]);
        CHECK_MSG(forward(l, batch, 2, ws, names[i]).streamed == (i != 3), "batch with %s", names[i]);
        attn_seq rb[2] = {batch[0], batch[1]};
        rb[0].output = ref;
        rb[1].output = ref + T * E;
        rb[0].weights = i == 0 ? wr : NULL;
        rb[0].cache_k = i == 2 ? ckr : NULL;
        rb[0].cache_v = i == 2 ? cvr : NULL;
        forward(l, rb, 2, i == 3 ? NULL : none, names[i]);
        const double d = max_abs_diff(out, ref, N_OUT), dw = i == 0 ? max_abs_diff(w, wr, 4 * T * T) : 0;
        CHECK_MSG(d <= 1e-5 * (max_abs(ref, N_OUT) + 1.0) && dw <= 1e-6, "%s: diff %.3g, weights %.3g",
                  names[i], d, dw);
    }
    free(x);
    attn_workspace_free(tiny);
    attn_workspace_free(none);
    attn_workspace_free(mat);
    attn_layer_free(l);
}

/* Six sequences whose ordinary plan is three times the bound run as pieces
 * of the ordinary plan (none streams: each piece fits), within the bound,
 * equal to the unbounded call. */
TEST_WITH(batch_split_into_pieces, test_rng *r)
{
    gqa_shape sh = {.h = 4, .g = 4, .d_k = 8, .d_v = 8, .e = 32, .e_out = 32, .bias = 1, .out_proj = 1};
    attn_layer_info li;
    attn_layer *l = layer_and_info(r, &sh, &li);
    enum { N = 6, T = 40 };
    long_case cs[N];
    attn_seq seqs[N];
    for (int i = 0; i < N; i++) {
        self_case_init(&cs[i], r, T, sh.e, sh.e_out);
        cs[i].seq.is_causal = i % 2;
        seqs[i] = cs[i].seq;
    }
    attn_workspace *none = bound_ws(1, 0, 0, SIZE_MAX);
    const attn_forward_stats so = forward(l, seqs, N, none, "unbounded");
    const size_t bound = so.peak_scratch / 3;
    attn_workspace *third = bound_ws(1, 0, 0, bound);
    for (int i = 0; i < N; i++) seqs[i].output = cs[i].out;
    const attn_forward_stats sp = forward(l, seqs, N, third, "a third");
    CHECK_INT_EQ(sp.streamed, 0);
    CHECK_MSG(sp.peak_scratch <= bound && sp.peak_scratch > 0, "peak %zu, bound %zu", sp.peak_scratch, bound);
    CHECK(sp.flops == so.flops);
    check_outputs(cs, N, &li, "pieces");
    for (int i = 0; i < N; i++) long_case_free(&cs[i]);
    attn_workspace_free(none);
    attn_workspace_free(third);
    attn_layer_free(l);
}

/* Options: 0 resolves to 64 MiB, other values are kept; ws = NULL uses the
 * default too. */
TEST(option_defaults)
{
    attn_workspace *ws = NULL;
    attn_workspace_options o = {0};
    CHECK_INT_EQ(attn_workspace_create(&o, &ws, NULL), ATTN_OK);
    attn_workspace_get_options(ws, &o);
    CHECK(o.max_scratch_bytes == (size_t)64 << 20);
    attn_workspace_free(ws);
    ws = bound_ws(1, 0, 0, 12345);
    attn_workspace_get_options(ws, &o);
    CHECK(o.max_scratch_bytes == 12345);
    attn_workspace_free(ws);
}

/* Cross-attention of 2 queries over 2^20 keys (E = 4, 4 heads of 4): the
 * ordinary plan needs 128 MiB of K/V projections, so under the default
 * bound (workspace and ws = NULL) the call streams, within 64 MiB, and
 * equals the ordinary plan. */
TEST_WITH(default_bound_streams, test_rng *r)
{
    gqa_shape sh = {.h = 4, .g = 4, .d_k = 4, .d_v = 4, .e = 4, .e_out = 4, .bias = 1, .out_proj = 1};
    attn_layer_info li;
    attn_layer *l = layer_and_info(r, &sh, &li);
    const int S = 1 << 20;
    long_case c = {0};
    c.x = rand_floats(r, 2 * 4, 1.0f);
    c.kx = rand_floats(r, (size_t)S * 4, 1.0f);
    c.out = malloc(2 * 4 * sizeof(float));
    c.ref = malloc(2 * 4 * sizeof(float));
    c.seq = (attn_seq){.t = 2, .s = S, .query = c.x, .key = c.kx, .value = c.kx, .output = c.ref,
                       .key_length = S - 7};
    attn_workspace *dflt = bound_ws(2, 0, 0, 0), *none = bound_ws(2, 0, 0, SIZE_MAX);
    const attn_forward_stats so = forward(l, &c.seq, 1, none, "ordinary");
    CHECK(so.streamed == 0 && so.peak_scratch >= (size_t)128 << 20);
    c.seq.output = c.out;
    const attn_forward_stats sd = forward(l, &c.seq, 1, dflt, "default bound");
    CHECK(sd.streamed == 1);
    CHECK_MSG(sd.peak_scratch <= (size_t)64 << 20, "peak %zu B", sd.peak_scratch);
    check_outputs(&c, 1, &li, "default bound");
    const attn_forward_stats sn = forward(l, &c.seq, 1, NULL, "ws = NULL");
    CHECK(sn.streamed == 1 && sn.peak_scratch <= (size_t)64 << 20);
    check_outputs(&c, 1, &li, "ws = NULL");
    printf("  S=%d: ordinary %.1f MiB, streamed %.1f MiB\n", S, so.peak_scratch / 1048576.0,
           sd.peak_scratch / 1048576.0);
    long_case_free(&c);
    attn_workspace_free(dflt);
    attn_workspace_free(none);
    attn_layer_free(l);
}

int main(void)
{
    openblas_set_num_threads(1); /* so threaded workspaces use their pool */
    test_rng r = {0x3c6ef372fe94f82bull};
    RUN_WITH(streamed_equals_ordinary, &r);
    RUN_WITH(bound_between_floor_and_ordinary, &r);
    RUN_WITH(passes_of_several_kv_heads, &r);
    RUN_WITH(unstreamable_keep_ordinary, &r);
    RUN_WITH(batch_split_into_pieces, &r);
    RUN(option_defaults);
    RUN_WITH(default_bound_streams, &r);
    printf("worst streamed vs ordinary difference: %.3g of the 1e-5 tolerance\n", worst);
    return check_summary();
}
