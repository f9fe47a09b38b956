/* test_forward_vs_reference.c — the BLAS path (attn_forward) against the naive
 * double-precision oracle (attn__forward_reference) on many random layers and
 * ragged batches: every head count, d_k != d_v, E_k/E_v != E_q, T != S, T = 1,
 * with and without biases and W_O, every mask kind (per-head float masks too),
 * both weights modes. Prints the largest differences seen.
 */
#include "attn.h"
#include "check.h"
#include "core_util.h"
#include "reference.h"

#include <stdio.h>
#include <stdlib.h>

#define N_CASES 300
#define MAX_SEQS 4

static layer_shape random_shape(test_rng *r, int big)
{
    layer_shape s;
    s.h = rng_int(r, 1, 8);
    s.d_k = rng_int(r, 1, big ? 64 : 16);
    s.d_v = rng_int(r, 1, big ? 64 : 16);
    s.e_q = rng_int(r, 1, big ? 256 : 40);
    int square = rng_int(r, 0, 2) != 0; /* self-attention needs E_k = E_v = E_q */
    s.e_k = square ? s.e_q : rng_int(r, 1, 40);
    s.e_v = square ? s.e_q : rng_int(r, 1, 40);
    s.bias = rng_int(r, 0, 1);
    s.out_proj = rng_int(r, 0, 1);
    s.e_out = s.out_proj ? rng_int(r, 1, big ? 256 : 40) : s.h * s.d_v;
    return s;
}

/* Random masks of every kind on c (t queries, s keys). */
static void random_masks(test_rng *r, seq_case *c, int heads)
{
    int t = c->seq.t, s = c->seq.s;
    if (rng_int(r, 0, 2) == 0) {
        c->kpm = malloc((size_t)s);
        for (int j = 0; j < s; j++) c->kpm[j] = rng_int(r, 0, 4) == 0;
        c->seq.key_padding_mask = c->kpm;
    }
    if (rng_int(r, 0, 3) == 0) c->seq.key_length = rng_int(r, 0, s);
    c->seq.is_causal = rng_int(r, 0, 2) == 0;
    if (rng_int(r, 0, 3) == 0) c->seq.window = rng_int(r, 1, s + 1);
    int kind = rng_int(r, 0, 2), per_head = rng_int(r, 0, 1);
    size_t n = (size_t)t * s * (per_head ? heads : 1);
    if (kind == ATTN_MASK_BOOL) {
        c->bmask = malloc(n);
        for (size_t i = 0; i < n; i++) c->bmask[i] = rng_int(r, 0, 5) == 0;
        c->seq.attn_mask = c->bmask;
    } else if (kind == ATTN_MASK_FLOAT) {
        c->fmask = rand_floats(r, n, 3.0f);
        for (size_t i = 0; i < n; i++)
            if (rng_int(r, 0, 7) == 0) c->fmask[i] = -INFINITY;
        c->seq.attn_mask = c->fmask;
    }
    c->seq.attn_mask_kind = (attn_mask_kind)kind;
    c->seq.attn_mask_per_head = kind ? per_head : 0;
}

typedef struct diff_tally { double out, out_rel, w; int cases; } diff_tally;

/* One random case: returns 0 if within tolerance. */
static int run_case(test_rng *r, int big, diff_tally *tally)
{
    layer_shape sh = random_shape(r, big);
    attn_layer *l = make_layer(r, &sh);
    CHECK(l != NULL);
    if (!l) return 1;
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    int square = li.embed_k == li.embed_q && li.embed_v == li.embed_q;
    int n = rng_int(r, 1, MAX_SEQS);
    seq_case fast[MAX_SEQS], ref[MAX_SEQS];
    attn_seq fs[MAX_SEQS], rs[MAX_SEQS];
    for (int i = 0; i < n; i++) {
        int t = rng_int(r, 0, 4) == 0 ? 1 : rng_int(r, 1, big ? 96 : 20);
        int cross = !square || rng_int(r, 0, 1);
        int s = cross ? rng_int(r, 1, big ? 128 : 24) : t;
        attn_weights_mode wm = (attn_weights_mode)rng_int(r, 0, 2);
        seq_case_init(&fast[i], r, &li, t, s, cross, wm);
        random_masks(r, &fast[i], li.num_heads);
        /* the oracle gets the same inputs and masks, its own outputs */
        ref[i] = fast[i];
        ref[i].output = malloc((size_t)t * li.embed_out * sizeof(float));
        size_t wn = (size_t)t * s * (wm == ATTN_WEIGHTS_PER_HEAD ? li.num_heads : 1);
        ref[i].weights = wm ? malloc(wn * sizeof(float)) : NULL;
        ref[i].seq.output = ref[i].output;
        ref[i].seq.weights = ref[i].weights;
        fs[i] = fast[i].seq;
        rs[i] = ref[i].seq;
    }
    attn_error err = {0};
    attn_status a = attn_forward(l, fs, n, NULL, NULL, &err);
    CHECK_MSG(a == ATTN_OK, "attn_forward: %s", err.message);
    attn_status b = attn__forward_reference(l, rs, n, NULL, NULL, &err);
    CHECK_MSG(b == ATTN_OK, "reference: %s", err.message);
    int bad = 0;
    for (int i = 0; i < n && a == ATTN_OK && b == ATTN_OK; i++) {
        size_t on = (size_t)fs[i].t * li.embed_out;
        double scale = max_abs(ref[i].output, on);
        double d = max_abs_diff(fast[i].output, ref[i].output, on);
        double tol = 1e-5 * (scale > 1.0 ? scale : 1.0);
        double dw = 0;
        if (fs[i].weights_mode) {
            size_t wn = (size_t)fs[i].t * fs[i].s *
                        (fs[i].weights_mode == ATTN_WEIGHTS_PER_HEAD ? li.num_heads : 1);
            dw = max_abs_diff(fast[i].weights, ref[i].weights, wn);
        }
        if (d > tally->out) tally->out = d;
        if (d / (scale > 1.0 ? scale : 1.0) > tally->out_rel) tally->out_rel = d / (scale > 1.0 ? scale : 1.0);
        if (dw > tally->w) tally->w = dw;
        if (d > tol || dw > 1e-5) {
            bad = 1;
            fprintf(stderr, "case %d seq %d: h=%d d_k=%d d_v=%d E=(%d,%d,%d,%d) T=%d S=%d out diff %.3g "
                            "(tol %.3g) weights diff %.3g\n", tally->cases, i, li.num_heads,
                    li.head_dim_k, li.head_dim_v, li.embed_q, li.embed_k, li.embed_v, li.embed_out,
                    fs[i].t, fs[i].s, d, tol, dw);
        }
    }
    CHECK(!bad);
    for (int i = 0; i < n; i++) {
        free(ref[i].output);
        free(ref[i].weights);
        seq_case_free(&fast[i]); /* owns the shared inputs and masks */
    }
    attn_layer_free(l);
    tally->cases++;
    return bad;
}

/* N_CASES small random shapes, then 12 large ones, from one seed. */
TEST(random_shapes)
{
    test_rng r = {20240601};
    diff_tally small = {0}, big = {0};
    for (int k = 0; k < N_CASES; k++) run_case(&r, 0, &small);
    for (int k = 0; k < 12; k++) run_case(&r, 1, &big);
    printf("small shapes (%d cases): max |blas - ref| output %.3g (relative %.3g), weights %.3g\n",
           small.cases, small.out, small.out_rel, small.w);
    printf("large shapes (%d cases): max |blas - ref| output %.3g (relative %.3g), weights %.3g\n",
           big.cases, big.out, big.out_rel, big.w);
}

int main(void)
{
    RUN(random_shapes);
    return check_summary();
}
