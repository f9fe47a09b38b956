/* test_checkpoints.c — real checkpoints through the real daemon: Hugging Face
 * style directories (Llama GQA + RoPE, Mistral MQA, Qwen2 biases, BERT, GPT-2,
 * a sharded one) and a prefixed TransformerEncoderLayer state_dict, loaded with
 * --model NAME=PATH,key=value... The daemon's answers (/v1 one-shot with
 * position_ids, v2 with INT64 positions, sessions appended in chunks, windowed
 * sessions) are compared with attn_forward on the same layer loaded in-process
 * by attn_layer_load; the library's own PyTorch parity on these fixtures is
 * test_checkpoint / test_rope_parity, so together the daemon answers as PyTorch.
 * Also: model metadata, layers=all, --inspect, and the errors a user meets.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#define CKPT "tests/fixtures/ckpt/"

typedef struct served {
    const char *name;  /* the daemon's model name          */
    const char *path;  /* as given after NAME=              */
    attn_load_options opts;
} served;

static const served models[] = {
    {"llama", CKPT "llama_gqa", {.layer = 1}},
    {"mistral", CKPT "mistral_mqa", {.layer = 0}},
    {"qwen", CKPT "qwen2_bias", {.layer = 1}},
    {"bert", CKPT "bert", {.layer = 1}},
    {"gpt2", CKPT "gpt2", {.layer = 0}},
    {"sharded", CKPT "sharded", {.layer = 1}},
    {"tel", CKPT "tel_prefix.safetensors", {.layer = -1, .prefix = "self_attn.", .num_heads = 4}},
};
#define N_MODELS (int)(sizeof models / sizeof models[0])

static attn_layer *layers[N_MODELS];
static attn_layer_info infos[N_MODELS];

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static float *random_rows(int rows, int cols)
{
    float *m = malloc((size_t)rows * (size_t)cols * sizeof *m);
    for (int i = 0; m && i < rows * cols; i++)
        m[i] = frand();
    return m;
}

/* The output of model i on x (T rows) through the library, causal, at positions
 * pos (NULL = 0..T-1) and window w. Caller frees. */
static float *expected(int i, const float *x, int t, const int64_t *pos, int w)
{
    float *out = calloc((size_t)t * (size_t)infos[i].embed_out, sizeof *out);
    attn_seq s = {.t = t, .s = t, .query = x, .is_causal = 1, .window = w, .output = out,
                  .position_ids = pos};
    attn_error err = {0};
    attn_status st = attn_forward(layers[i], &s, 1, NULL, NULL, &err);
    CHECK_MSG(st == ATTN_OK, "attn_forward on %s: %s", models[i].name, err.message);
    return out;
}

/* max |a - b| over n, relative to max(1, max |b|). */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, m = 1;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

/* "output" of a /v1 response (rows × cols) into out. Returns 0 or -1. */
static int parse_output(const char *body, const char *member, int rows, int cols, float *out)
{
    json_error_t je;
    json_t *j = json_loads(body, 0, &je), *o = j ? json_object_get(j, member) : NULL;
    int ok = o && json_array_size(o) == (size_t)rows;
    for (int r = 0; ok && r < rows; r++) {
        json_t *row = json_array_get(o, (size_t)r);
        ok = json_array_size(row) == (size_t)cols;
        for (int c = 0; ok && c < cols; c++)
            out[r * cols + c] = (float)json_number_value(json_array_get(row, (size_t)c));
    }
    json_decref(j);
    return ok ? 0 : -1;
}

static attnd_proc proc;

static char *url(const char *path)
{
    static char u[512];
    snprintf(u, sizeof u, "%s%s", proc.base_url, path);
    return u;
}

/* POST body to path; returns the status, *out the response (free). */
static long post(const char *path, const char *body, http_result *out)
{
    if (http_do("POST", url(path), body, strlen(body), NULL, out) != 0)
        return -1;
    return out->status;
}

TEST(metadata)
{
    http_result r;
    CHECK(http_do("GET", url("/v1/models/llama"), NULL, 0, NULL, &r) == 0 && r.status == 200);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "family")), "llama");
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "layer")), 1);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "num_kv_heads")), infos[0].num_kv_heads);
    CHECK(infos[0].num_kv_heads < infos[0].num_heads); /* the fixture really is GQA */
    json_t *rope = json_object_get(j, "rope");
    CHECK_STR_EQ(json_string_value(json_object_get(rope, "style")), "half");
    CHECK_NEAR(json_number_value(json_object_get(rope, "theta")), infos[0].rope.theta, 1e-6);
    json_decref(j);
    http_result_free(&r);

    CHECK(http_do("GET", url("/v1/models/tel"), NULL, 0, NULL, &r) == 0 && r.status == 200);
    j = json_loads(r.body, 0, &je);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "family")), "mha");
    CHECK(json_is_null(json_object_get(j, "rope")));
    CHECK(json_is_null(json_object_get(j, "layer")));
    json_decref(j);
    http_result_free(&r);

    CHECK(http_do("GET", url("/v1/models/mistral"), NULL, 0, NULL, &r) == 0 && r.status == 200);
    j = json_loads(r.body, 0, &je);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "num_kv_heads")), 1);
    CHECK(json_integer_value(json_object_get(j, "sliding_window")) > 0);
    json_decref(j);
    http_result_free(&r);
}

/* Every model, one request, positions from an offset: equal to the library. */
TEST(one_shot_positions)
{
    const int t = 5;
    for (int i = 0; i < N_MODELS; i++) {
        int e = infos[i].embed_q, eo = infos[i].embed_out;
        float *x = random_rows(t, e), *got = calloc((size_t)t * (size_t)eo, sizeof *got);
        /* Not a shift of 0..T-1 (RoPE answers a uniform shift alike): gaps too. */
        int64_t pos[5] = {3, 1000, 1001, 5000, 5002};
        sbuf b = {0};
        sb_printf(&b, "{\"query\":");
        sb_matrix(&b, x, t, e);
        sb_printf(&b, ",\"is_causal\":true,\"position_ids\":[3,1000,1001,5000,5002]}");
        char path[128];
        snprintf(path, sizeof path, "/v1/models/%s/attention", models[i].name);
        http_result r;
        CHECK_INT_EQ(post(path, b.p, &r), 200);
        CHECK(parse_output(r.body, "output", t, eo, got) == 0);
        float *want = expected(i, x, t, pos, 0);
        double d = rel_diff(got, want, (size_t)t * (size_t)eo);
        printf("one-shot %-8s (positions 3,1000,1001,5000,5002): max rel diff %.3g\n",
               models[i].name, d);
        CHECK_MSG(d <= 1e-6, "%s: %.3g", models[i].name, d);
        if (infos[i].rope.style != ATTN_ROPE_NONE) { /* positions matter for RoPE models */
            float *zero = expected(i, x, t, NULL, 0);
            CHECK_MSG(rel_diff(zero, want, (size_t)t * (size_t)eo) > 1e-4,
                      "%s: those positions answer like 0..T-1", models[i].name);
            free(zero);
        }
        free(want);
        free(b.p);
        free(x);
        free(got);
        http_result_free(&r);
    }
}

/* v2 with binary INT64 position ids equals /v1 (the library). */
TEST(v2_binary_positions)
{
    const int t = 3, e = infos[0].embed_q, eo = infos[0].embed_out;
    float *x = random_rows(t, e);
    int64_t pos[3] = {7, 8, 9};
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,%d,%d],\"datatype\":"
                      "\"FP32\",\"parameters\":{\"binary_data_size\":%d}},{\"name\":"
                      "\"position_ids\",\"shape\":[1,%d],\"datatype\":\"INT64\",\"parameters\":"
                      "{\"binary_data_size\":%d}}],\"parameters\":{\"is_causal\":true}}",
                      t, e, t * e * 4, t, t * 8);
    size_t n = (size_t)hl + (size_t)(t * e * 4) + (size_t)t * 8;
    char *body = malloc(n);
    memcpy(body, head, (size_t)hl);
    memcpy(body + hl, x, (size_t)(t * e) * 4);
    memcpy(body + hl + t * e * 4, pos, (size_t)t * 8); /* little-endian host */
    char ihcl[64];
    snprintf(ihcl, sizeof ihcl, "Inference-Header-Content-Length: %d", hl);
    const char *hdrs[] = {ihcl, NULL};
    http_result r;
    CHECK(http_do_ex("POST", url("/v2/models/llama/infer"), body, n, "application/octet-stream",
                     hdrs, NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    json_t *data = json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "data");
    float *got = calloc((size_t)t * (size_t)eo, sizeof *got);
    CHECK_INT_EQ(json_array_size(data), (size_t)t * (size_t)eo);
    for (size_t k = 0; k < json_array_size(data); k++)
        got[k] = (float)json_number_value(json_array_get(data, k));
    float *want = expected(0, x, t, pos, 0);
    double d = rel_diff(got, want, (size_t)t * (size_t)eo);
    printf("v2 binary positions: max rel diff %.3g\n", d);
    CHECK(d <= 1e-6);
    json_decref(j);
    http_result_free(&r);
    free(body);
    free(x);
    free(got);
    free(want);
}

/* A session over model i fed in chunks equals one causal request over it all;
 * window w (0 = none). */
static void session_chunks(int i, int w)
{
    const int chunks[] = {1, 3, 2, 1, 4, 1};
    int total = 0;
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++)
        total += chunks[c];
    int e = infos[i].embed_q, eo = infos[i].embed_out;
    float *x = random_rows(total, e), *got = calloc((size_t)total * (size_t)eo, sizeof *got);
    char path[128], body[64];
    snprintf(path, sizeof path, "/v1/models/%s/sessions", models[i].name);
    snprintf(body, sizeof body, "{\"window\":%d}", w);
    http_result r;
    CHECK_INT_EQ(post(path, body, &r), 201);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    char id[64];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    http_result_free(&r);
    int at = 0;
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        sbuf b = {0};
        sb_printf(&b, "{\"query\":");
        sb_matrix(&b, x + (size_t)at * (size_t)e, chunks[c], e);
        sb_printf(&b, "}");
        snprintf(path, sizeof path, "/v1/sessions/%s/append", id);
        CHECK_INT_EQ(post(path, b.p, &r), 200);
        CHECK(parse_output(r.body, "output", chunks[c], eo, got + (size_t)at * (size_t)eo) == 0);
        http_result_free(&r);
        free(b.p);
        at += chunks[c];
    }
    float *want = expected(i, x, total, NULL, w);
    double d = rel_diff(got, want, (size_t)total * (size_t)eo);
    printf("session %-8s window %d, chunks 1,3,2,1,4,1: max rel diff %.3g\n", models[i].name, w,
           d);
    CHECK_MSG(d <= 1e-5, "%s window %d: %.3g", models[i].name, w, d);
    free(want);
    free(x);
    free(got);
}

TEST(sessions_equal_one_shot)
{
    session_chunks(0, 0); /* Llama GQA + RoPE  */
    session_chunks(0, 3); /* a window drops rows: positions stay absolute */
    session_chunks(1, 0); /* Mistral MQA       */
    session_chunks(2, 2); /* Qwen2 biases      */
    session_chunks(3, 0); /* BERT (no RoPE)    */
}

TEST(rotary_refuses_cross)
{
    const int e = infos[0].embed_q;
    float *x = random_rows(2, e);
    sbuf b = {0};
    sb_printf(&b, "{\"query\":");
    sb_matrix(&b, x, 2, e);
    sb_printf(&b, ",\"key\":");
    sb_matrix(&b, x, 2, e);
    sb_printf(&b, "}");
    http_result r;
    CHECK_INT_EQ(post("/v1/models/llama/attention", b.p, &r), 400);
    CHECK(strstr(r.body, "\"unsupported\"") && strstr(r.body, "\"field\":\"key\""));
    http_result_free(&r);
    free(b.p);
    b = (sbuf){0};
    sb_printf(&b, "{\"key\":");
    sb_matrix(&b, x, 2, e);
    sb_printf(&b, "}");
    CHECK_INT_EQ(post("/v1/models/llama/sessions", b.p, &r), 400);
    CHECK(strstr(r.body, "\"unsupported\"") != NULL);
    http_result_free(&r);
    free(b.p);
    free(x);
    const int eb = infos[3].embed_k; /* BERT has no RoPE: a cross session works */
    x = random_rows(2, eb);
    b = (sbuf){0};
    sb_printf(&b, "{\"key\":");
    sb_matrix(&b, x, 2, eb);
    sb_printf(&b, "}");
    CHECK_INT_EQ(post("/v1/models/bert/sessions", b.p, &r), 201);
    if (r.status != 201)
        fprintf(stderr, "bert cross session: %s\n", r.body);
    http_result_free(&r);
    free(b.p);
    free(x);
}

/* layers=all serves NAME.0 .. NAME.n-1, each its own layer. */
TEST(layers_all)
{
    attn_checkpoint_info ci;
    attn_load_options o = {.layer = -1};
    CHECK(attn_checkpoint_inspect(CKPT "llama_gqa", &o, &ci, NULL) == ATTN_OK);
    CHECK(ci.n_layers >= 2);
    attnd_proc p;
    const char *args[] = {"--model", "every=" CKPT "llama_gqa,layers=all", NULL};
    CHECK(attnd_proc_start(&p, args) == 0);
    for (int k = 0; k <= ci.n_layers; k++) {
        char u[256];
        snprintf(u, sizeof u, "%s/v1/models/every.%d", p.base_url, k);
        http_result r;
        CHECK(http_do("GET", u, NULL, 0, NULL, &r) == 0);
        CHECK_INT_EQ(r.status, k < ci.n_layers ? 200 : 404);
        if (k < ci.n_layers) {
            char want[32];
            snprintf(want, sizeof want, "\"layer\":%d", k);
            CHECK_MSG(strstr(r.body, want) != NULL, "every.%d: %s", k, r.body);
        }
        http_result_free(&r);
    }
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* What a user meets when a spec is wrong: a sentence, and exit 2 for a bad
 * flag (the spec's syntax) or 1 for a model that does not load (README). */
TEST(spec_errors)
{
    static const struct {
        const char *spec, *says;
        int rc;
    } bad[] = {
        {"m=" CKPT "llama_gqa", "choose one with layer=N", 1}, /* several layers, none chosen */
        {"m=" CKPT "llama_gqa,layer=99", "layer", 1},
        {"m=" CKPT "llama_gqa,colour=red", "unknown key 'colour'", 2},
        {"m=" CKPT "llama_gqa,format=falcon", "format must be", 2},
        {"m=" CKPT "llama_gqa,layer=0,layers=all", "not both", 2},
        {"m=" CKPT "llama_gqa,layers=some", "layers takes only 'all'", 2},
        {"m=" CKPT "llama_gqa,layer=0,heads=6,kv_heads=4", "must divide", 2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *args[] = {"--listen", "127.0.0.1:0", "--model", bad[i].spec, NULL};
        char *out = NULL;
        int rc = attnd_run(args, 20, &out);
        CHECK_MSG(rc == bad[i].rc, "%s: exit %d, expected %d", bad[i].spec, rc, bad[i].rc);
        CHECK_MSG(out && strstr(out, bad[i].says), "%s: output lacks \"%s\": %s", bad[i].spec,
                  bad[i].says, out ? out : "");
        free(out);
    }
}

TEST(inspect)
{
    const char *args[] = {"--inspect", CKPT "llama_gqa", NULL};
    char *out = NULL;
    CHECK_INT_EQ(attnd_run(args, 20, &out), 0);
    CHECK_MSG(out && strstr(out, "family: llama") && strstr(out, "layers: ") &&
                  strstr(out, "kv_heads: ") && strstr(out, "rope: half") &&
                  strstr(out, "serves"),
              "%s", out ? out : "");
    free(out);
    const char *bad[] = {"--inspect", "tests/fixtures", NULL};
    out = NULL;
    CHECK_INT_EQ(attnd_run(bad, 20, &out), 2);
    free(out);
}

int main(void)
{
    for (int i = 0; i < N_MODELS; i++) {
        attn_error err = {0};
        attn_status st = attn_layer_load(models[i].path, &models[i].opts, &layers[i], &err);
        CHECK_MSG(st == ATTN_OK, "%s: %s", models[i].path, err.message);
        if (st != ATTN_OK)
            return check_summary();
        attn_layer_get_info(layers[i], &infos[i]);
    }
    const char *args[2 * N_MODELS + 1];
    char specs[N_MODELS][256];
    for (int i = 0; i < N_MODELS; i++) {
        int n = snprintf(specs[i], sizeof specs[i], "%s=%s", models[i].name, models[i].path);
        if (models[i].opts.layer >= 0)
            n += snprintf(specs[i] + n, sizeof specs[i] - (size_t)n, ",layer=%d",
                          models[i].opts.layer);
        if (models[i].opts.prefix)
            n += snprintf(specs[i] + n, sizeof specs[i] - (size_t)n, ",prefix=%s",
                          models[i].opts.prefix);
        if (models[i].opts.num_heads)
            snprintf(specs[i] + n, sizeof specs[i] - (size_t)n, ",heads=%d",
                     models[i].opts.num_heads);
        args[2 * i] = "--model";
        args[2 * i + 1] = specs[i];
    }
    args[2 * N_MODELS] = NULL;
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "the daemon did not start with the checkpoint models");
        return check_summary();
    }
    RUN(metadata);
    RUN(one_shot_positions);
    RUN(v2_binary_positions);
    RUN(sessions_equal_one_shot);
    RUN(rotary_refuses_cross);
    RUN(layers_all);
    RUN(spec_errors);
    RUN(inspect);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    for (int i = 0; i < N_MODELS; i++)
        attn_layer_free(layers[i]);
    return check_summary();
}
