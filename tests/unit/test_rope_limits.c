/* test_rope_limits.c — hostile RoPE parameters and non-finite results (issue 27,
 * defect 5). Every range and derived-quantity check of attn__rope_check refuses
 * its field by name, through attn_layer_create (desc.rope.*, INVALID_ARG) and
 * through a model directory's config.json (rope_scaling.* / rope_parameters.* /
 * rope_theta, FORMAT, for attn_checkpoint_inspect and attn_layer_load alike);
 * the accepted configurations still load; every inverse frequency of an
 * accepted rope is finite and > 0. And attn_forward's last check: a forward
 * whose output would hold inf (a fixed KV cache with value rows too large for
 * W_O: rows the library trusts without rescanning) returns LIMIT naming the
 * output, for the decode, fused and materialised kernels, never ATTN_OK.
 */
#include "attn.h"
#include "check.h"
#include "rope.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CKPT "tests/fixtures/ckpt/"

/* ------------------------------------------------------------ desc fields */

/* A 1-head layer of head width 16 with rope, identity-ish weights. */
static attn_layer_desc rope_desc(attn_rope rope, float *w)
{
    for (int i = 0; i < 16 * 16; i++)
        w[i] = (i % 17 == 0) ? 1.0f : 0.0f;
    attn_layer_desc d = {.num_heads = 1, .head_dim_k = 16, .head_dim_v = 16, .embed_q = 16,
                         .embed_k = 16, .embed_v = 16, .embed_out = 16, .w_q = w, .w_k = w,
                         .w_v = w, .w_o = w, .rope = rope};
    return d;
}

/* attn_layer_create refuses rope with code, the message naming says[0] and
 * (when not NULL) says[1]. */
static void refused(attn_rope rope, attn_status code, const char *says, const char *also)
{
    float w[256];
    attn_layer_desc d = rope_desc(rope, w);
    attn_layer *l = NULL;
    attn_error err = {0};
    attn_status st = attn_layer_create(&d, &l, &err);
    CHECK_MSG(st == code, "expected %s naming %s, got %s: %s", attn_status_name(code), says,
              attn_status_name(st), err.message);
    CHECK_MSG(strstr(err.message, says) != NULL, "\"%s\" does not name %s", err.message, says);
    if (also)
        CHECK_MSG(strstr(err.message, also) != NULL, "\"%s\" lacks %s", err.message, also);
    CHECK(l == NULL);
    attn_layer_free(l);
}

static const attn_rope linear = {.style = ATTN_ROPE_HALF, .theta = 10000.0,
                                 .scaling = ATTN_ROPE_SCALING_LINEAR, .factor = 2.0};
static const attn_rope llama3 = {.style = ATTN_ROPE_HALF, .theta = 500000.0,
                                 .scaling = ATTN_ROPE_SCALING_LLAMA3, .factor = 8.0,
                                 .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                                 .original_max_position = 8192};

TEST(desc_fields_named)
{
    attn_rope r = linear;
    r.factor = 1e-40; /* subnormal: passed before, inv_freq became inf */
    refused(r, ATTN_ERR_INVALID_ARG, "desc.rope.factor", "1e-40");
    r.factor = 1e-4;
    refused(r, ATTN_ERR_INVALID_ARG, "desc.rope.factor", NULL);
    r.factor = 1e7;
    refused(r, ATTN_ERR_INVALID_ARG, "desc.rope.factor", NULL);
    r.factor = NAN;
    refused(r, ATTN_ERR_INVALID_ARG, "desc.rope.factor", NULL);

    r = llama3;
    r.factor = 1e-40;
    refused(r, ATTN_ERR_INVALID_ARG, "desc.rope.factor", "llama3");
    r = llama3;
    r.low_freq_factor = 1e-40;
    refused(r, ATTN_ERR_INVALID_ARG, "desc.rope.low_freq_factor", NULL);
    r = llama3;
    r.high_freq_factor = 1e-40;
    refused(r, ATTN_ERR_INVALID_ARG, "desc.rope.high_freq_factor", NULL);
    r = llama3;
    r.high_freq_factor = 2e6;
    refused(r, ATTN_ERR_INVALID_ARG, "desc.rope.high_freq_factor", NULL);
    r = llama3;
    r.high_freq_factor = 0.5; /* below low_freq_factor 1 */
    refused(r, ATTN_ERR_INVALID_ARG, "desc.rope.high_freq_factor", "desc.rope.low_freq_factor");
    r = llama3;
    r.original_max_position = 0;
    refused(r, ATTN_ERR_INVALID_ARG, "desc.rope.original_max_position", NULL);
    r = llama3;
    r.original_max_position = ATTN__ROPE_MAX_ORIGINAL + 1;
    refused(r, ATTN_ERR_INVALID_ARG, "desc.rope.original_max_position", NULL);

    /* derived: a base so small that 1 / theta^(2i/d) overflows float32 */
    r = (attn_rope){.style = ATTN_ROPE_HALF, .theta = 1e-45};
    refused(r, ATTN_ERR_INVALID_ARG, "desc.rope.theta", "inverse frequency");

    /* the edges of the ranges are accepted */
    float w[256];
    const double ok_factors[] = {ATTN__ROPE_MIN_FACTOR, 1.0, 64.0, ATTN__ROPE_MAX_FACTOR};
    for (size_t i = 0; i < sizeof ok_factors / sizeof ok_factors[0]; i++) {
        r = linear;
        r.factor = ok_factors[i];
        attn_layer_desc d = rope_desc(r, w);
        attn_layer *l = NULL;
        attn_error err = {0};
        CHECK_MSG(attn_layer_create(&d, &l, &err) == ATTN_OK, "factor %g: %s", ok_factors[i],
                  err.message);
        attn_layer_free(l);
    }
    attn_layer_desc d = rope_desc(llama3, w);
    attn_layer *l = NULL;
    CHECK_INT_EQ(attn_layer_create(&d, &l, NULL), ATTN_OK);
    attn_layer_free(l);
}

/* Every accepted rope over a grid of theta, factor and rotary_dim has finite,
 * positive inverse frequencies (what attn__rope_check promises). */
TEST(accepted_freqs_finite)
{
    const double thetas[] = {1.0, 10000.0, 5e6, 1e30, FLT_MAX};
    const double factors[] = {ATTN__ROPE_MIN_FACTOR, 1.0, 32.0, 1e4, ATTN__ROPE_MAX_FACTOR};
    const int dims[] = {2, 16, 128, 256};
    int accepted = 0;
    for (int kind = 0; kind < 3; kind++)
        for (size_t a = 0; a < 5; a++)
            for (size_t b = 0; b < 5; b++)
                for (size_t c = 0; c < 4; c++) {
                    attn_rope in = kind == 2 ? llama3 : linear, out;
                    if (kind == 0) in.scaling = ATTN_ROPE_SCALING_NONE;
                    in.theta = thetas[a];
                    in.factor = factors[b];
                    in.rotary_dim = dims[c];
                    if (attn__rope_resolve(&in, dims[c], &out, NULL) != ATTN_OK) continue;
                    accepted++;
                    float f[128];
                    attn__rope_inv_freq(&out, f);
                    int ok = 1;
                    for (int i = 0; i < dims[c] / 2; i++)
                        ok &= f[i] > 0.0f && f[i] <= FLT_MAX;
                    CHECK_MSG(ok, "kind %d theta %g factor %g dim %d: a frequency is not finite "
                              "and > 0", kind, thetas[a], factors[b], dims[c]);
                }
    CHECK(accepted > 200); /* most of the 300 are fine */
    printf("accepted %d of 300 rope configurations, every frequency finite and > 0\n", accepted);
}

/* ------------------------------------------------------------ config.json */

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* The llama_gqa fixture's config with its rope keys replaced by rope (a JSON
 * fragment: "rope_theta": ..., "rope_scaling": ...). */
static void llama_config(char *out, size_t cap, const char *rope)
{
    snprintf(out, cap,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
             "\"model_type\": \"llama\", \"num_attention_heads\": 4, \"num_hidden_layers\": 2, "
             "\"num_key_value_heads\": 2, %s}",
             rope);
}

TEST(config_fields_named)
{
    char dir[] = "/tmp/attn-rope-limits-XXXXXX", p[512], target[512], cfg[1024];
    if (mkdtemp(dir) == NULL) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    char *cwd = getcwd(NULL, 0);
    snprintf(target, sizeof target, "%s/" CKPT "llama_gqa/model.safetensors", cwd ? cwd : ".");
    free(cwd);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK_INT_EQ(symlink(target, p), 0);
    snprintf(p, sizeof p, "%s/config.json", dir);
    static const struct {
        const char *rope, *says, *also;
    } v[] = {
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 1e-40}",
         "rope_scaling.factor", "1e-40"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 1e-40, \"low_freq_factor\": 1, "
         "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}",
         "rope_scaling.factor", "1e-40"},
        {"\"rope_scaling\": {\"type\": \"linear\", \"factor\": 1e9}", "rope_scaling.factor", NULL},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1e-40, "
         "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}",
         "rope_scaling.low_freq_factor", NULL},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, "
         "\"high_freq_factor\": 1e300, \"original_max_position_embeddings\": 8192}",
         "rope_scaling.high_freq_factor", NULL},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, "
         "\"high_freq_factor\": 1, \"original_max_position_embeddings\": 8192}",
         "high_freq_factor", "low_freq_factor"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, "
         "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 0}",
         "rope_scaling.original_max_position_embeddings", NULL},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, "
         "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 1e12}",
         "rope_scaling.original_max_position_embeddings", NULL},
        {"\"rope_theta\": 1e-45", "rope_theta", "inverse frequency"},
        {"\"rope_theta\": 0", "rope_theta", NULL},
        {"\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 1e-40, \"rope_theta\": 1e4}",
         "rope_parameters.factor", NULL},
        {"\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1e-45}",
         "rope_parameters.rope_theta", "inverse frequency"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        llama_config(cfg, sizeof cfg, v[i].rope);
        CHECK_INT_EQ(write_text(p, cfg), 0);
        attn_checkpoint_info in;
        attn_error err = {0};
        attn_status st = attn_checkpoint_inspect(dir, NULL, &in, &err);
        CHECK_MSG(st == ATTN_ERR_FORMAT && strstr(err.message, v[i].says) &&
                      (v[i].also == NULL || strstr(err.message, v[i].also)) &&
                      strncmp(err.message, "config.json: ", 13) == 0,
                  "config %zu: inspect %s \"%s\", wanted FORMAT naming %s", i,
                  attn_status_name(st), err.message, v[i].says);
        attn_load_options o = {.family = ATTN_FAMILY_AUTO, .layer = 0};
        attn_layer *l = NULL;
        err = (attn_error){0};
        st = attn_layer_load(dir, &o, &l, &err);
        CHECK_MSG(st == ATTN_ERR_FORMAT && strstr(err.message, v[i].says),
                  "config %zu: load %s \"%s\", wanted FORMAT naming %s", i, attn_status_name(st),
                  err.message, v[i].says);
        CHECK(l == NULL);
        attn_layer_free(l);
    }
    /* and real configurations still load */
    static const char *const good[] = {
        "\"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 8.0, \"high_freq_factor\": 4.0, "
        "\"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, \"rope_type\": "
        "\"llama3\"}",
        "\"rope_theta\": 10000.0, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}",
        "\"rope_theta\": 1000000.0",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        llama_config(cfg, sizeof cfg, good[i]);
        CHECK_INT_EQ(write_text(p, cfg), 0);
        attn_load_options o = {.family = ATTN_FAMILY_AUTO, .layer = 1};
        attn_layer *l = NULL;
        attn_error err = {0};
        CHECK_MSG(attn_layer_load(dir, &o, &l, &err) == ATTN_OK, "good %zu: %s", i, err.message);
        attn_layer_free(l);
    }
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    rmdir(dir);
}

/* ------------------------------------------------------------ non-finite results */

/* A fixed KV cache (cache_append = 0) holds rows the library does not rescan
 * per call (only the queries' projections are bounded). Value rows of 1e37
 * (finite, below the FLT_MAX / 4 attn_kv_store accepts) mixed and projected
 * by a W_O whose rows sum to 80 give an output beyond FLT_MAX: the forward
 * must say so (LIMIT, the output named) instead of answering inf. For each
 * kernel, with and without weights, one and 16 query rows. */
TEST(overflowing_output_is_an_error)
{
    enum { E = 8, S = 4 };
    float w[E * E], wo[E * E];
    for (int i = 0; i < E * E; i++) {
        w[i] = (i % (E + 1) == 0) ? 1.0f : 0.0f;
        wo[i] = 10.0f;
    }
    attn_layer_desc d = {.num_heads = 2, .head_dim_k = 4, .head_dim_v = 4, .embed_q = E,
                         .embed_k = E, .embed_v = E, .embed_out = E, .w_q = w, .w_k = w,
                         .w_v = w, .w_o = wo};
    attn_layer *l = NULL;
    CHECK_INT_EQ(attn_layer_create(&d, &l, NULL), ATTN_OK);
    if (l == NULL)
        return;
    float ck[S * E], cv[S * E], q[16 * E], out[16 * E], wts[2 * 16 * S];
    for (int i = 0; i < S * E; i++) {
        ck[i] = 0.5f;
        cv[i] = 1e37f;
    }
    for (int i = 0; i < 16 * E; i++)
        q[i] = 1.0f;
    static const attn_kernel kernels[] = {ATTN_KERNEL_AUTO, ATTN_KERNEL_FUSED,
                                          ATTN_KERNEL_MATERIALIZED};
    static const int rows[] = {1, 16};
    for (int k = 0; k < 3; k++)
        for (int ti = 0; ti < 2; ti++)
            for (int wm = 0; wm < 2; wm++) {
                attn_workspace_options wo_opts = {.kernel = kernels[k]};
                attn_workspace *ws = NULL;
                CHECK_INT_EQ(attn_workspace_create(&wo_opts, &ws, NULL), ATTN_OK);
                attn_seq s = {.t = rows[ti], .s = S, .query = q, .output = out,
                              .cache_k = ck, .cache_v = cv, .cache_len = S,
                              .weights_mode = wm ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_NONE,
                              .weights = wm ? wts : NULL};
                attn_error err = {0};
                attn_status st = attn_forward(l, &s, 1, ws, NULL, &err);
                CHECK_MSG(st == ATTN_ERR_LIMIT &&
                              strstr(err.message, "non-finite values in the output") &&
                              strstr(err.message, "seqs[0].output[0][0]"),
                          "kernel %d t %d weights %d: %s \"%s\"", (int)kernels[k], rows[ti], wm,
                          attn_status_name(st), err.message);
                attn_workspace_free(ws);
            }
    /* the same cache with smaller values is answered, finite */
    for (int i = 0; i < S * E; i++)
        cv[i] = 1e30f;
    attn_seq s = {.t = 1, .s = S, .query = q, .output = out, .cache_k = ck, .cache_v = cv,
                  .cache_len = S};
    attn_error err = {0};
    CHECK_MSG(attn_forward(l, &s, 1, NULL, NULL, &err) == ATTN_OK, "%s", err.message);
    int finite = 1;
    for (int i = 0; i < E; i++)
        finite &= isfinite(out[i]) && out[i] > 1e31f;
    CHECK(finite);
    attn_layer_free(l);
}

int main(void)
{
    RUN(desc_fields_named);
    RUN(accepted_freqs_finite);
    RUN(config_fields_named);
    RUN(overflowing_output_is_an_error);
    return check_summary();
}
