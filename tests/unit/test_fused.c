/* test_fused.c — the fused (blocked online-softmax) kernel against the naive
 * oracle and against the materialised BLAS kernel: every combination of masks
 * (key padding, key_length, causal, window, bool/float attn_mask, per-head) on
 * random shapes, ragged batches and tile sizes from 1 up; fully masked rows and
 * blocks; scratch that does not grow with T*S.
 */
#include "attn.h"
#include "check.h"
#include "core_util.h"
#include "flash.h"
#include "reference.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEQS 3

/* Mask combination `combo` (0..95): bit 0 key padding, 1 key_length, 2 causal,
 * 3 window, then kind (none/bool/float) x per-head. Density varies so that some
 * rows and whole key blocks end up fully blocked. */
static void combo_masks(test_rng *r, seq_case *c, int heads, int combo)
{
    int t = c->seq.t, s = c->seq.s;
    int dense = rng_int(r, 0, 3) == 0; /* block most keys */
    if (combo & 1) {
        c->kpm = malloc((size_t)s);
        for (int j = 0; j < s; j++) c->kpm[j] = rng_int(r, 0, dense ? 1 : 4) == 0;
        c->seq.key_padding_mask = c->kpm;
    }
    if (combo & 2) c->seq.key_length = rng_int(r, 1, s);
    c->seq.is_causal = (combo >> 2) & 1;
    if (combo & 8) c->seq.window = rng_int(r, 1, s + 1);
    int kind = (combo >> 4) % 3, per_head = (combo >> 4) / 3;
    size_t n = (size_t)t * s * (per_head ? heads : 1);
    if (kind == ATTN_MASK_BOOL) {
        c->bmask = malloc(n);
        for (size_t i = 0; i < n; i++) c->bmask[i] = rng_int(r, 0, dense ? 1 : 5) == 0;
        c->seq.attn_mask = c->bmask;
    } else if (kind == ATTN_MASK_FLOAT) {
        c->fmask = rand_floats(r, n, 3.0f);
        for (size_t i = 0; i < n; i++)
            if (rng_int(r, 0, dense ? 1 : 7) == 0) c->fmask[i] = -INFINITY;
        c->seq.attn_mask = c->fmask;
    }
    c->seq.attn_mask_kind = (attn_mask_kind)kind;
    c->seq.attn_mask_per_head = kind ? per_head : 0;
}

static layer_shape random_shape(test_rng *r)
{
    layer_shape s;
    s.h = rng_int(r, 1, 6);
    s.d_k = rng_int(r, 1, 24);
    s.d_v = rng_int(r, 0, 1) ? s.d_k : rng_int(r, 1, 24); /* d_k == d_v reuses Q for Z */
    s.e_q = rng_int(r, 1, 48);
    int square = rng_int(r, 0, 2) != 0;
    s.e_k = square ? s.e_q : rng_int(r, 1, 40);
    s.e_v = square ? s.e_q : rng_int(r, 1, 40);
    s.bias = rng_int(r, 0, 1);
    s.out_proj = rng_int(r, 0, 3) != 0;
    s.e_out = s.out_proj ? rng_int(r, 1, 48) : s.h * s.d_v;
    return s;
}

typedef struct tally { double vs_ref, vs_blas; int cases, rows_zero; } tally;

static attn_workspace *make_ws(attn_kernel k, int bq, int bk)
{
    attn_workspace_options o = {.n_threads = 1, .kernel = k, .block_q = bq, .block_k = bk};
    attn_workspace *ws = NULL;
    CHECK_INT_EQ(attn_workspace_create(&o, &ws, NULL), ATTN_OK);
    return ws;
}

/* One random batch under mask combination `combo`, run three ways; the
 * layer is sh, or random when sh is NULL. */
static void run_case(test_rng *r, int combo, const layer_shape *fixed, tally *ty)
{
    static const int blocks[] = {1, 2, 3, 5, 8, 16, 64, 128, 256};
    const int nb = (int)(sizeof blocks / sizeof blocks[0]);
    layer_shape sh = fixed ? *fixed : random_shape(r);
    attn_layer *l = make_layer(r, &sh);
    CHECK(l != NULL);
    if (!l) return;
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    int square = li.embed_k == li.embed_q && li.embed_v == li.embed_q;
    int n = rng_int(r, 1, MAX_SEQS);
    seq_case c[MAX_SEQS];
    attn_seq fs[MAX_SEQS], bs[MAX_SEQS], rs[MAX_SEQS];
    float *bout[MAX_SEQS], *rout[MAX_SEQS];
    for (int i = 0; i < n; i++) {
        int t = rng_int(r, 0, 5) == 0 ? 1 : rng_int(r, 1, 70);
        int cross = !square || rng_int(r, 0, 1);
        int s = cross ? rng_int(r, 1, 90) : t;
        seq_case_init(&c[i], r, &li, t, s, cross, ATTN_WEIGHTS_NONE);
        combo_masks(r, &c[i], li.num_heads, combo);
        size_t on = (size_t)t * li.embed_out;
        bout[i] = malloc(on * sizeof(float));
        rout[i] = malloc(on * sizeof(float));
        fs[i] = bs[i] = rs[i] = c[i].seq;
        bs[i].output = bout[i];
        rs[i].output = rout[i];
    }
    attn_workspace *fw = make_ws(ATTN_KERNEL_FUSED, blocks[rng_int(r, 0, nb - 1)],
                                 blocks[rng_int(r, 0, nb - 1)]);
    attn_workspace *bw = make_ws(ATTN_KERNEL_MATERIALIZED, 0, 0);
    attn_error err = {0};
    attn_status a = attn_forward(l, fs, n, fw, NULL, &err);
    CHECK_MSG(a == ATTN_OK, "fused: %s", err.message);
    attn_status b = attn_forward(l, bs, n, bw, NULL, &err);
    CHECK_MSG(b == ATTN_OK, "blas: %s", err.message);
    attn_status e = attn__forward_reference(l, rs, n, NULL, NULL, &err);
    CHECK_MSG(e == ATTN_OK, "reference: %s", err.message);
    for (int i = 0; i < n && a == ATTN_OK && b == ATTN_OK && e == ATTN_OK; i++) {
        size_t on = (size_t)fs[i].t * li.embed_out;
        double scale = max_abs(rout[i], on);
        scale = scale > 1.0 ? scale : 1.0;
        double dr = max_abs_diff(c[i].output, rout[i], on) / scale;
        double db = max_abs_diff(c[i].output, bout[i], on) / scale;
        if (dr > ty->vs_ref) ty->vs_ref = dr;
        if (db > ty->vs_blas) ty->vs_blas = db;
        CHECK_MSG(dr <= 1e-5 && db <= 1e-5,
                  "combo %d seq %d h=%d d_k=%d d_v=%d T=%d S=%d: fused-ref %.3g fused-blas %.3g",
                  combo, i, li.num_heads, li.head_dim_k, li.head_dim_v, fs[i].t, fs[i].s, dr, db);
        for (int t = 0; t < fs[i].t && !li.has_out_proj; t++) { /* zero rows stay exactly 0 */
            int zr = 1;
            for (int o = 0; o < li.embed_out; o++) zr &= rout[i][(size_t)t * li.embed_out + o] == 0.0f;
            if (!zr) continue;
            ty->rows_zero++;
            for (int o = 0; o < li.embed_out; o++)
                CHECK(c[i].output[(size_t)t * li.embed_out + o] == 0.0f);
        }
    }
    for (int i = 0; i < n; i++) {
        free(bout[i]);
        free(rout[i]);
        seq_case_free(&c[i]);
    }
    attn_workspace_free(fw);
    attn_workspace_free(bw);
    attn_layer_free(l);
    ty->cases++;
}

/* Causal with T much larger than the tiles: most key blocks are skipped and
 * the last query blocks see every key; window leaves a band. */
TEST(long_causal_window)
{
    test_rng r = {77};
    layer_shape sh = {4, 16, 16, 64, 64, 64, 64, 1, 1};
    attn_layer *l = make_layer(&r, &sh);
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    for (int k = 0; k < 3; k++) {
        seq_case c;
        const int T = 300;
        seq_case_init(&c, &r, &li, T, T, 0, ATTN_WEIGHTS_NONE);
        c.seq.is_causal = k != 1;
        c.seq.window = k ? 37 : 0;
        attn_seq ref = c.seq;
        float *ro = malloc((size_t)T * 64 * sizeof(float));
        ref.output = ro;
        attn_workspace *ws = make_ws(ATTN_KERNEL_FUSED, 32, 48);
        CHECK_INT_EQ(attn_forward(l, &c.seq, 1, ws, NULL, NULL), ATTN_OK);
        CHECK_INT_EQ(attn__forward_reference(l, &ref, 1, NULL, NULL, NULL), ATTN_OK);
        double d = max_abs_diff(c.output, ro, (size_t)T * 64), s = max_abs(ro, (size_t)T * 64);
        printf("T=%d causal=%d window=%d: max |fused - ref| %.3g (scale %.3g)\n", T,
               c.seq.is_causal, c.seq.window, d, s);
        CHECK(d <= 1e-5 * (s > 1 ? s : 1));
        attn_workspace_free(ws);
        free(ro);
        seq_case_free(&c);
    }
    attn_layer_free(l);
}

/* Every key blocked for some rows / blocks: zero mixture (no W_O: exact zeros
 * in the output), never NaN. key_length cuts whole tiles. */
TEST(fully_masked)
{
    test_rng r = {78};
    layer_shape sh = {2, 4, 4, 8, 8, 8, 8, 0, 0};
    attn_layer *l = make_layer(&r, &sh);
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    const int T = 20, S = 40;
    seq_case c;
    seq_case_init(&c, &r, &li, T, S, 1, ATTN_WEIGHTS_NONE);
    c.bmask = calloc((size_t)T * S, 1);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < S; j++) c.bmask[(size_t)t * S + j] = t % 3 == 0 || j < 16;
    c.seq.attn_mask_kind = ATTN_MASK_BOOL;
    c.seq.attn_mask = c.bmask;
    c.seq.key_length = 30;
    attn_workspace *ws = make_ws(ATTN_KERNEL_FUSED, 4, 8);
    CHECK_INT_EQ(attn_forward(l, &c.seq, 1, ws, NULL, NULL), ATTN_OK);
    for (int t = 0; t < T; t++)
        for (int o = 0; o < li.embed_out; o++) {
            float v = c.output[(size_t)t * li.embed_out + o];
            CHECK(isfinite(v));
            if (t % 3 == 0) CHECK(v == 0.0f);
        }
    int nonzero = 0;
    for (int o = 0; o < li.embed_out; o++) nonzero |= c.output[li.embed_out + o] != 0.0f;
    CHECK(nonzero);
    attn_workspace_free(ws);
    seq_case_free(&c);
    attn_layer_free(l);
}

/* The fused path's scratch does not hold T x S scores; stats say so. */
TEST(scratch)
{
    test_rng r = {79};
    layer_shape sh = {2, 8, 8, 16, 16, 16, 16, 1, 1};
    attn_layer *l = make_layer(&r, &sh);
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    const int T = 1024;
    seq_case c;
    seq_case_init(&c, &r, &li, T, T, 0, ATTN_WEIGHTS_NONE);
    attn_workspace *fw = make_ws(ATTN_KERNEL_FUSED, 0, 0), *bw = make_ws(ATTN_KERNEL_MATERIALIZED, 0, 0);
    attn_forward_stats fs = {0}, bs = {0};
    CHECK_INT_EQ(attn_forward(l, &c.seq, 1, fw, &fs, NULL), ATTN_OK);
    CHECK_INT_EQ(attn_forward(l, &c.seq, 1, bw, &bs, NULL), ATTN_OK);
    size_t scores = (size_t)T * T * sizeof(float);
    printf("T=%d: peak scratch fused %zu B, materialised %zu B (scores alone %zu B)\n", T,
           fs.peak_scratch, bs.peak_scratch, scores);
    CHECK(bs.peak_scratch >= scores);
    CHECK(fs.peak_scratch < scores / 8);
    CHECK(fs.flops == bs.flops && fs.flops > 0);
    attn_workspace_free(fw);
    attn_workspace_free(bw);
    seq_case_free(&c);
    attn_layer_free(l);
}

/* Options are checked; a workspace reports what it runs. */
TEST(options)
{
    attn_workspace *ws = (attn_workspace *)1;
    attn_error err = {0};
    attn_workspace_options bad[] = {{.n_threads = -2}, {.n_threads = 5000}, {.kernel = (attn_kernel)7},
                                    {.block_q = -1}, {.block_k = 70000}, {.block_q = 5000}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_INT_EQ(attn_workspace_create(&bad[i], &ws, &err), ATTN_ERR_INVALID_ARG);
        CHECK(ws == NULL);
        CHECK(err.message[0] != '\0');
    }
    CHECK_INT_EQ(attn_workspace_create(NULL, NULL, &err), ATTN_ERR_INVALID_ARG);
    CHECK_INT_EQ(attn_workspace_create(NULL, &ws, &err), ATTN_OK);
    attn_workspace_options o;
    attn_workspace_get_options(ws, &o);
    CHECK_INT_EQ(o.n_threads, 1);
    CHECK_INT_EQ(o.kernel, ATTN_KERNEL_AUTO);
    CHECK(o.block_q > 0 && o.block_k > 0);
    attn_workspace_free(ws);
}

/* Three random batches under each of the 80 mask combinations. */
TEST(mask_combinations)
{
    test_rng r = {20240602};
    tally ty = {0};
    for (int combo = 0; combo < 96; combo++) {
        if ((combo >> 4) % 3 == 0 && (combo >> 4) / 3 == 1) continue; /* per-head needs a mask */
        for (int k = 0; k < 3; k++) run_case(&r, combo, NULL, &ty);
    }
    printf("%d random cases over 80 mask combinations: max |fused - ref| %.3g, max |fused - blas| "
           "%.3g (relative to max(1, |out|)); %d fully masked rows checked\n",
           ty.cases, ty.vs_ref, ty.vs_blas, ty.rows_zero);
    CHECK(ty.rows_zero > 0);
}

/* The AVX2 path (flash.c: d_v a multiple of 8, per-key masks only) on the
 * shapes its register blocks cut unevenly: d_k from 1 up (6-key blocks with
 * a remainder), d_v 8 mod 16 (the 8-wide mixture tail), column counts
 * r*nt that are not multiples of 16, tiles from 1 key up, head_dim 64/128. */
TEST(flash_shapes)
{
    test_rng r = {20261201};
    tally ty = {0};
    static const int dvs[] = {8, 16, 24, 40, 64, 72, 128};
    for (int k = 0; k < 48; k++) {
        layer_shape sh = random_shape(&r);
        sh.d_v = dvs[rng_int(&r, 0, 6)];
        sh.d_k = rng_int(&r, 0, 2) ? sh.d_v : rng_int(&r, 1, 80);
        if (!sh.out_proj) sh.e_out = sh.h * sh.d_v;
        run_case(&r, k % 16, &sh, &ty); /* key padding, key_length, causal, window */
    }
    printf("%d flash-shaped cases: max |fused - ref| %.3g, max |fused - blas| %.3g\n", ty.cases, ty.vs_ref,
           ty.vs_blas);
    CHECK(ty.cases == 48);
}

/* On a CPU with AVX-512F: its score, softmax and mixture kernels against the
 * AVX2 ones (attn__flash_no_avx512, the test hook), the same bits on the
 * shapes their blocks cut unevenly: odd and even panel counts (query blocks
 * of 1 to 128 rows), tiles whose keys are not a multiple of 12 or 6, d_v 8 /
 * 16 / 24 mod 32, d_k from 1 up, per-key masks (padding, key_length, causal,
 * window) and a long causal sequence. Elsewhere both runs take the AVX2 path
 * (still checked: the same bits twice). */
TEST(flash_avx512_equals_avx2)
{
    test_rng r = {20261202};
    static const int dvs[] = {8, 16, 24, 40, 64, 72, 128}, bqs[] = {1, 5, 16, 24, 32, 64, 128},
                     bks[] = {8, 13, 64, 256};
    int compared = 0;
    for (int k = 0; k < 40; k++) {
        layer_shape sh = random_shape(&r);
        sh.d_v = dvs[rng_int(&r, 0, 6)];
        sh.d_k = rng_int(&r, 0, 2) ? sh.d_v : rng_int(&r, 1, 80);
        if (!sh.out_proj) sh.e_out = sh.h * sh.d_v;
        attn_layer *l = make_layer(&r, &sh);
        CHECK(l != NULL);
        if (!l) return;
        attn_layer_info li;
        attn_layer_get_info(l, &li);
        const int square = li.embed_k == li.embed_q && li.embed_v == li.embed_q;
        const int t = k == 39 ? 700 : rng_int(&r, 1, 150), cross = !square || (k != 39 && rng_int(&r, 0, 1));
        seq_case c;
        seq_case_init(&c, &r, &li, t, cross ? rng_int(&r, 1, 400) : t, cross, ATTN_WEIGHTS_NONE);
        combo_masks(&r, &c, li.num_heads, k == 39 ? 4 : k % 16);
        const size_t on = (size_t)t * li.embed_out;
        float *o2 = malloc(on * sizeof *o2);
        attn_seq wide = c.seq;
        wide.output = o2;
        attn_workspace *ws = make_ws(ATTN_KERNEL_FUSED, bqs[rng_int(&r, 0, 6)], bks[rng_int(&r, 0, 3)]);
        attn_error err = {0};
        attn__flash_no_avx512 = 1;
        const attn_status a = attn_forward(l, &c.seq, 1, ws, NULL, &err);
        attn__flash_no_avx512 = 0;
        const attn_status b = attn_forward(l, &wide, 1, ws, NULL, &err);
        CHECK_MSG(a == ATTN_OK && b == ATTN_OK, "%s", err.message);
        CHECK_MSG(memcmp(c.output, o2, on * sizeof *o2) == 0,
                  "case %d h=%d d_k=%d d_v=%d T=%d S=%d: AVX-512 vs AVX2 outputs differ", k, li.num_heads,
                  li.head_dim_k, li.head_dim_v, c.seq.t, c.seq.s);
        compared++;
        attn_workspace_free(ws);
        free(o2);
        seq_case_free(&c);
        attn_layer_free(l);
    }
    printf("%d cases: AVX-512 (%s on this CPU) and AVX2 fused kernels bit-identical\n", compared,
           __builtin_cpu_supports("avx512f") ? "run" : "absent");
    CHECK(compared == 40);
}

/* Over 4096 keys a default workspace doubles block_q for an MHA layer
 * (forward.c, query_block): a cross-attention of 300 queries over 4500 keys
 * (two query blocks of 256 and 44) on default and on explicit options equals
 * the oracle; the default plan's per-worker scratch is the larger. */
TEST(long_keys_default_block)
{
    test_rng r = {91};
    layer_shape sh = {2, 16, 16, 32, 24, 24, 32, 1, 1};
    attn_layer *l = make_layer(&r, &sh);
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    const int T = 300, S = 4500;
    seq_case c;
    seq_case_init(&c, &r, &li, T, S, 1, ATTN_WEIGHTS_NONE);
    attn_seq ref = c.seq, expl = c.seq;
    float *ro = malloc((size_t)T * li.embed_out * sizeof(float)), *eo = malloc((size_t)T * li.embed_out * sizeof(float));
    ref.output = ro;
    expl.output = eo;
    attn_workspace *dflt = make_ws(ATTN_KERNEL_FUSED, 0, 0), *fixed = make_ws(ATTN_KERNEL_FUSED, 128, 0);
    attn_forward_stats sd = {0}, sf = {0};
    CHECK_INT_EQ(attn_forward(l, &c.seq, 1, dflt, &sd, NULL), ATTN_OK);
    CHECK_INT_EQ(attn_forward(l, &expl, 1, fixed, &sf, NULL), ATTN_OK);
    CHECK_INT_EQ(attn__forward_reference(l, &ref, 1, NULL, NULL, NULL), ATTN_OK);
    const size_t n = (size_t)T * li.embed_out;
    double s = max_abs(ro, n), d1 = max_abs_diff(c.output, ro, n), d2 = max_abs_diff(eo, ro, n);
    printf("T=%d S=%d: default block %.3g, block_q 128 %.3g from the oracle; scratch %zu vs %zu B\n", T, S,
           d1, d2, sd.peak_scratch, sf.peak_scratch);
    CHECK(d1 <= 1e-5 * (s > 1 ? s : 1) && d2 <= 1e-5 * (s > 1 ? s : 1));
    CHECK(sd.peak_scratch > sf.peak_scratch);
    attn_workspace_free(dflt);
    attn_workspace_free(fixed);
    free(ro);
    free(eo);
    seq_case_free(&c);
    attn_layer_free(l);
}

int main(void)
{
    RUN(mask_combinations);
    RUN(flash_shapes);
    RUN(flash_avx512_equals_avx2);
    RUN(long_keys_default_block);
    RUN(long_causal_window);
    RUN(fully_masked);
    RUN(scratch);
    RUN(options);
    return check_summary();
}
