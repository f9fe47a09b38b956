/* test_seed.c — the worked numbers of the seed text (/work/shared/seed), reproduced
 * by attn_forward itself through layers with identity projections, plus the
 * seed's layer shapes (d_k != d_v; per-head d_k scaling).
 */
#include "attn.h"
#include "check.h"
#include "core_util.h"
#include "reference.h"

#include <stdlib.h>

/* A one-kind-of-everything layer: W_q (h*d_k, e_q), W_k (h*d_k, e_k), W_v (h*d_v, e_v)
 * all "identity" (1 where row == column), no biases, no W_O. */
static attn_layer *identity_layer(int h, int d_k, int d_v, int e_q, int e_k, int e_v)
{
    int qk = h * d_k, vd = h * d_v;
    float *wq = calloc((size_t)qk * e_q, sizeof(float));
    float *wk = calloc((size_t)qk * e_k, sizeof(float));
    float *wv = calloc((size_t)vd * e_v, sizeof(float));
    attn_layer *l = NULL;
    if (wq && wk && wv) {
        for (int i = 0; i < qk && i < e_q; i++) wq[i * e_q + i] = 1.0f;
        for (int i = 0; i < qk && i < e_k; i++) wk[i * e_k + i] = 1.0f;
        for (int i = 0; i < vd && i < e_v; i++) wv[i * e_v + i] = 1.0f;
        attn_layer_desc d = {.num_heads = h, .head_dim_k = d_k, .head_dim_v = d_v, .embed_q = e_q,
                             .embed_k = e_k, .embed_v = e_v, .w_q = wq, .w_k = wk, .w_v = wv};
        attn_error err = {0};
        if (attn_layer_create(&d, &l, &err) != ATTN_OK) fprintf(stderr, "layer: %s\n", err.message);
    }
    free(wq); free(wk); free(wv);
    return l;
}

/* Softmax of raw logits [8, 4, 0] at d_k = 1 (no cooling) and the same dot
 * products at d_k = 64, divided by sqrt(64) = 8 into [1, 0.5, 0]. */
TEST(softmax_numbers)
{
    attn_layer *l1 = identity_layer(1, 1, 1, 1, 1, 1);
    CHECK(l1 != NULL);
    float q1[1] = {1}, k1[3] = {8, 4, 0}, v1[3] = {0, 0, 0}, out1[1], w1[3];
    attn_seq s1 = {.t = 1, .s = 3, .query = q1, .key = k1, .value = v1, .output = out1,
                   .weights_mode = ATTN_WEIGHTS_PER_HEAD, .weights = w1};
    CHECK_INT_EQ(attn_forward(l1, &s1, 1, NULL, NULL, NULL), ATTN_OK);
    CHECK_NEAR(w1[0], 0.982, 1e-3);
    CHECK_NEAR(w1[1], 0.018, 1e-3);
    CHECK_NEAR(w1[2], 0.000, 1e-3);

    attn_layer *l64 = identity_layer(1, 64, 1, 64, 64, 1);
    CHECK(l64 != NULL);
    float q[64] = {0}, k[3 * 64] = {0}, v[3] = {0}, out[1], w[3];
    q[0] = 1.0f;
    k[0] = 8.0f;      /* q.k1 = 8 */
    k[64] = 4.0f;     /* q.k2 = 4 */
    attn_seq s = {.t = 1, .s = 3, .query = q, .key = k, .value = v, .output = out,
                  .weights_mode = ATTN_WEIGHTS_PER_HEAD, .weights = w};
    CHECK_INT_EQ(attn_forward(l64, &s, 1, NULL, NULL, NULL), ATTN_OK);
    CHECK_NEAR(w[0], 0.506, 1e-3);
    CHECK_NEAR(w[1], 0.307, 1e-3);
    CHECK_NEAR(w[2], 0.186, 1e-3);
    attn_layer_free(l1);
    attn_layer_free(l64);
}

/* d_k = 4, q = [1,0,1,0], three keys and 2-d values: alpha = [0.506, 0.186, 0.307],
 * z = [1.32, 0.68]. Checked on the BLAS path and the reference. */
TEST(dk4_example)
{
    attn_layer *l = identity_layer(1, 4, 2, 4, 4, 2);
    CHECK(l != NULL);
    const float q[4] = {1, 0, 1, 0};
    const float k[3 * 4] = {1, 0, 1, 0, /**/ 0, 1, 0, 1, /**/ 1, 1, 0, 0};
    const float v[3 * 2] = {2, 0, /**/ 0, 2, /**/ 1, 1};
    attn_status (*paths[2])(const attn_layer *, const attn_seq *, int, attn_workspace *,
                            attn_forward_stats *, attn_error *) = {attn_forward, attn__forward_reference};
    for (int p = 0; p < 2; p++) {
        float z[2] = {0}, a[3] = {0};
        attn_seq s = {.t = 1, .s = 3, .query = q, .key = k, .value = v, .output = z,
                      .weights_mode = ATTN_WEIGHTS_AVERAGE, .weights = a};
        CHECK_INT_EQ(paths[p](l, &s, 1, NULL, NULL, NULL), ATTN_OK);
        CHECK_NEAR(a[0], 0.506, 1e-3);
        CHECK_NEAR(a[1], 0.186, 1e-3);
        CHECK_NEAR(a[2], 0.307, 1e-3);
        CHECK_NEAR(z[0], 1.32, 1e-3);
        CHECK_NEAR(z[1], 0.68, 1e-3);
    }
    attn_layer_free(l);
}

/* Scaling is by the per-head d_k (2 here), not by the model width (4):
 * each head sees dots [2, 0] / sqrt(2); scaling by sqrt(4) would give 0.731. */
TEST(per_head_scaling)
{
    attn_layer *l = identity_layer(2, 2, 2, 4, 4, 4);
    CHECK(l != NULL);
    const float q[4] = {1, 0, 1, 0};
    const float kv[2 * 4] = {2, 0, 0, 0, /**/ 0, 0, 2, 0};
    float z[4], w[2 * 2];
    attn_seq s = {.t = 1, .s = 2, .query = q, .key = kv, .value = kv, .output = z,
                  .weights_mode = ATTN_WEIGHTS_PER_HEAD, .weights = w};
    CHECK_INT_EQ(attn_forward(l, &s, 1, NULL, NULL, NULL), ATTN_OK);
    double big = 1.0 / (1.0 + exp(-sqrt(2.0))); /* softmax([sqrt2, 0])[0] = 0.8044 */
    CHECK_NEAR(w[0], big, 1e-6);     /* head 0 prefers key 0 */
    CHECK_NEAR(w[1], 1 - big, 1e-6);
    CHECK_NEAR(w[2], 1 - big, 1e-6); /* head 1 prefers key 1 */
    CHECK_NEAR(w[3], big, 1e-6);
    attn_layer_free(l);
}

/* The seed's projections: d_model 64, d_k 16, d_v 64, one head, no biases, no
 * output projection; x (2, 6, 64) as a batch of two self-attention sequences. */
TEST(seed_layer_shape)
{
    test_rng r = {42};
    layer_shape sh = {.h = 1, .d_k = 16, .d_v = 64, .e_q = 64, .e_k = 64, .e_v = 64};
    attn_layer *l = make_layer(&r, &sh);
    CHECK(l != NULL);
    if (!l) return;
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    CHECK_INT_EQ(li.head_dim_k, 16);
    CHECK_INT_EQ(li.head_dim_v, 64);
    CHECK_INT_EQ(li.embed_out, 64);
    CHECK_INT_EQ(li.has_out_proj, 0);
    CHECK_INT_EQ(li.param_count, 16 * 64 * 2 + 64 * 64);

    seq_case c[2], ref[2];
    attn_seq seqs[2], rseqs[2];
    for (int i = 0; i < 2; i++) {
        seq_case_init(&c[i], &r, &li, 6, 6, 0, ATTN_WEIGHTS_PER_HEAD);
        seq_case_init(&ref[i], &r, &li, 6, 6, 0, ATTN_WEIGHTS_PER_HEAD);
        memcpy(ref[i].query, c[i].query, 6 * 64 * sizeof(float));
        seqs[i] = c[i].seq;
        rseqs[i] = ref[i].seq;
    }
    CHECK_INT_EQ(attn_forward(l, seqs, 2, NULL, NULL, NULL), ATTN_OK);
    CHECK_INT_EQ(attn__forward_reference(l, rseqs, 2, NULL, NULL, NULL), ATTN_OK);
    for (int i = 0; i < 2; i++) {
        double d = max_abs_diff(c[i].output, ref[i].output, 6 * 64);
        printf("seed shape seq %d: max |blas - reference| = %.3g\n", i, d);
        CHECK(d <= 1e-5);
        for (int t = 0; t < 6; t++) {
            double sum = 0;
            for (int j = 0; j < 6; j++) sum += c[i].weights[t * 6 + j];
            CHECK_NEAR(sum, 1.0, 1e-5);
        }
        seq_case_free(&c[i]);
        seq_case_free(&ref[i]);
    }
    attn_layer_free(l);
}

int main(void)
{
    RUN(softmax_numbers);
    RUN(dk4_example);
    RUN(per_head_scaling);
    RUN(seed_layer_shape);
    return check_summary();
}
