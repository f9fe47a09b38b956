/* test_seq_sessions.c — sequence sessions of a model group (--model
 * NAME=DIR,layers=...), through the daemon: GET /v1/models/NAME describes the
 * group; one sequence session answers every layer's appends bit for bit as L
 * single-layer sessions on NAME.0 .. NAME.{L-1} do (JSON and v2 binary, every
 * KV dtype, GQA + RoPE, a window); an append past the layer before is 409;
 * the KV budget and LRU eviction take whole sequences; a fork shares every
 * layer's pages and copies on write.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#define CKPT "tests/fixtures/ckpt/"
#define E 64 /* hidden_size of the llama_gqa and mistral_mqa fixtures */

static float val(int seed, int i, int j) { return (float)sin(0.37 * seed + 0.21 * i - 0.09 * j); }

/* Creates a session on model (a group or a layer model) with body; its id into id. */
static int create(const attnd_proc *p, const char *model, const char *body, char *id)
{
    char url[512];
    snprintf(url, sizeof url, "%s/v1/models/%s/sessions", p->base_url, model);
    long st;
    json_t *j = attnd_http_json("POST", url, body, &st);
    CHECK_MSG(st == 201, "create on %s: %ld", model, st);
    const char *s = json_string_value(json_object_get(j, "id"));
    snprintf(id, 96, "%s", s ? s : "");
    json_decref(j);
    return st == 201 ? 0 : -1;
}

/* The JSON body of rows [from, from+n) of stream seed. */
static char *rows_body(int seed, int from, int n)
{
    sbuf b = {0};
    sb_printf(&b, "{\"query\":[");
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < E; j++)
            sb_printf(&b, "%s%.9g", j ? "," : "", (double)val(seed, from + i, j));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]}");
    return b.p;
}

/* Appends rows (JSON) to url; the answer's output as float32 into out (n×E).
 * Returns the status; *body (may be NULL) gets the parsed answer. */
static long append_json(const char *url, int seed, int from, int n, float *out, json_t **body)
{
    char *b = rows_body(seed, from, n);
    long st;
    json_t *j = attnd_http_json("POST", url, b, &st);
    free(b);
    const json_t *o = json_object_get(j, "output");
    for (int i = 0; st == 200 && i < n; i++)
        for (int k = 0; k < E; k++)
            out[i * E + k] =
                (float)json_number_value(json_array_get(json_array_get(o, (size_t)i), (size_t)k));
    if (body)
        *body = j;
    else
        json_decref(j);
    return st;
}

/* The same as a v2 binary append (binary output). */
static long append_binary(const char *url, int seed, int from, int n, float *out)
{
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,%d,%d],\"datatype\":\"FP32\","
                      "\"parameters\":{\"binary_data_size\":%d}}],\"outputs\":[{\"name\":"
                      "\"output\",\"parameters\":{\"binary_data\":true}}]}",
                      n, E, n * E * 4);
    size_t len = (size_t)hl + (size_t)n * E * 4;
    char *body = malloc(len);
    memcpy(body, head, (size_t)hl);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < E; j++) {
            float v = val(seed, from + i, j);
            memcpy(body + hl + ((size_t)i * E + (size_t)j) * 4, &v, 4);
        }
    char ihcl[80];
    snprintf(ihcl, sizeof ihcl, "Inference-Header-Content-Length: %d", hl);
    const char *hdrs[] = {ihcl, NULL};
    http_result r;
    long st = http_do_ex("POST", url, body, len, "application/octet-stream", hdrs, NULL, &r) == 0
                  ? r.status
                  : -1;
    free(body);
    if (st == 200) {
        json_error_t je;
        json_t *j = json_loadb(r.body, r.body_len, JSON_DISABLE_EOF_CHECK, &je);
        size_t at = (size_t)je.position;
        CHECK_INT_EQ(r.body_len - at, (size_t)n * E * 4);
        if (r.body_len - at == (size_t)n * E * 4)
            memcpy(out, r.body + at, (size_t)n * E * 4);
        json_decref(j);
    }
    if (st >= 0)
        http_result_free(&r);
    return st;
}

static void layer_url(const attnd_proc *p, const char *id, int l, char *url, size_t cap)
{
    snprintf(url, cap, "%s/v1/sessions/%.95s/layers/%d/append", p->base_url, id, l);
}

static void plain_url(const attnd_proc *p, const char *id, char *url, size_t cap)
{
    snprintf(url, cap, "%s/v1/sessions/%.95s/append", p->base_url, id);
}

static int n_layers_of(const char *path)
{
    attn_checkpoint_info ci;
    attn_load_options o = {.layer = -1};
    return attn_checkpoint_inspect(path, &o, &ci, NULL) == ATTN_OK ? ci.n_layers : 0;
}

/* The fixture's group against its layer models: for each chunk, every layer
 * in order, the sequence's answer equals the single-layer session's bit for
 * bit (binary appends on odd chunks). */
static void group_vs_layers(const char *ckpt, const char *kv_dtype, const char *create_body)
{
    const int L = n_layers_of(ckpt);
    CHECK(L >= 2);
    char spec[256], dt[64];
    snprintf(spec, sizeof spec, "m=%s,layers=all", ckpt);
    snprintf(dt, sizeof dt, "%s", kv_dtype);
    const char *args[] = {"--model", spec, "--kv-dtype", dt, NULL};
    attnd_proc p;
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char seq[96], single[8][96];
    CHECK(create(&p, "m", create_body, seq) == 0);
    for (int l = 0; l < L && l < 8; l++) {
        char name[32];
        snprintf(name, sizeof name, "m.%d", l);
        CHECK(create(&p, name, create_body, single[l]) == 0);
    }
    static const int chunks[] = {3, 1, 2, 1, 1, 4, 1};
    int at = 0, compared = 0, differing = 0;
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        const int n = chunks[c], binary = c % 2 == 1;
        for (int l = 0; l < L && l < 8; l++) {
            float want[8 * E], got[8 * E];
            char u1[512], u2[512];
            layer_url(&p, seq, l, u1, sizeof u1);
            plain_url(&p, single[l], u2, sizeof u2);
            /* each layer its own rows (seed l), as a real decode loop's hidden states */
            long s1 = binary ? append_binary(u1, l, at, n, got) : append_json(u1, l, at, n, got, NULL);
            long s2 = binary ? append_binary(u2, l, at, n, want) : append_json(u2, l, at, n, want, NULL);
            CHECK_MSG(s1 == 200 && s2 == 200, "%s chunk %zu layer %d: %ld %ld", kv_dtype, c, l, s1, s2);
            if (s1 == 200 && s2 == 200) {
                compared++;
                differing += memcmp(want, got, (size_t)n * E * sizeof(float)) != 0;
            }
        }
        at += n;
    }
    CHECK_INT_EQ(differing, 0);
    CHECK_INT_EQ(compared, (int)(sizeof chunks / sizeof chunks[0]) * L);
    /* GET reports each layer's length */
    char url[512];
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p.base_url, seq);
    long st;
    json_t *j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 200);
    const json_t *layers = json_object_get(j, "layers");
    CHECK_INT_EQ(json_array_size(layers), (size_t)L);
    for (int l = 0; l < L; l++)
        CHECK_INT_EQ(json_integer_value(json_object_get(json_array_get(layers, (size_t)l), "length")), at);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "length")), at);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "model")), "m");
    json_decref(j);
    fprintf(stderr, "  %s %s %s: %d appends compared, all bit-identical\n", ckpt, kv_dtype,
            create_body, compared);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* GQA + RoPE (llama_gqa), every KV dtype; MQA + RoPE with a window (mistral_mqa). */
TEST(group_equals_layers)
{
    static const char *const dtypes[] = {"f32", "f16", "bf16", "int8"};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        group_vs_layers(CKPT "llama_gqa", dtypes[d], "{}");
    group_vs_layers(CKPT "mistral_mqa", "f32", "{\"window\":4}");
    group_vs_layers(CKPT "mistral_mqa", "int8", "{\"window\":4}");
}

/* GET /v1/models/NAME of a group; layers=1 (a list) makes a group of one
 * layer whose layer models stay addressable; a bad list is refused at start. */
TEST(group_info)
{
    const int L = n_layers_of(CKPT "llama_gqa");
    attnd_proc p;
    const char *args[] = {"--model", "llama=" CKPT "llama_gqa,layers=all", "--model",
                          "top=" CKPT "llama_gqa,layers=1", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char url[512];
    snprintf(url, sizeof url, "%s/v1/models/llama", p.base_url);
    long st;
    json_t *j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 200);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "kind")), "group");
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "num_layers")), L);
    const json_t *layers = json_object_get(j, "layers");
    json_int_t sum = 0;
    for (int l = 0; l < L; l++) {
        const json_t *o = json_array_get(layers, (size_t)l);
        char want[32];
        snprintf(want, sizeof want, "llama.%d", l);
        CHECK_STR_EQ(json_string_value(json_object_get(o, "model")), want);
        CHECK_INT_EQ(json_integer_value(json_object_get(o, "num_kv_heads")), 2);
        /* f32, 2 KV heads of 16: K and V rows of 32 floats */
        CHECK_INT_EQ(json_integer_value(json_object_get(o, "kv_bytes_per_position")), 2 * 32 * 4);
        sum += json_integer_value(json_object_get(o, "kv_bytes_per_position"));
    }
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "kv_bytes_per_position")), sum);
    json_decref(j);
    snprintf(url, sizeof url, "%s/v1/models/top", p.base_url);
    j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 200);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "num_layers")), 1);
    CHECK_INT_EQ(json_integer_value(json_object_get(json_array_get(json_object_get(j, "layers"), 0),
                                                    "checkpoint_layer")), 1);
    json_decref(j);
    snprintf(url, sizeof url, "%s/v1/models/top.1", p.base_url); /* a layer model, as before */
    j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 200);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "layer")), 1);
    json_decref(j);
    snprintf(url, sizeof url, "%s/v1/models/top.0", p.base_url);
    j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 404);
    json_decref(j);
    /* a group session takes no key */
    snprintf(url, sizeof url, "%s/v1/models/llama/sessions", p.base_url);
    j = attnd_http_json("POST", url, "{\"key\":[[1]]}", &st);
    CHECK_INT_EQ(st, 400);
    json_decref(j);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);

    static const char *const bad[] = {"x=" CKPT "llama_gqa,layers=0-9", "x=" CKPT "llama_gqa,layers=1,1",
                                      "x=" CKPT "llama_gqa,layers=1-0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *a[] = {"--listen", "127.0.0.1:0", "--model", bad[i], NULL};
        char *out = NULL;
        int rc = attnd_run(a, 30, &out);
        CHECK_MSG(rc != 0 && out && strstr(out, "layers="), "%s: rc %d: %s", bad[i], rc,
                  out ? out : "");
        free(out);
    }
}

/* Out of order: layer l may not pass layer l-1 (409 naming both lengths);
 * the wrong route for the session, or a layer it has not, is 400 "layer". */
TEST(out_of_order)
{
    attnd_proc p;
    const char *args[] = {"--model", "llama=" CKPT "llama_gqa,layers=all", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char seq[96], url[512];
    CHECK(create(&p, "llama", "{}", seq) == 0);
    float out[4 * E];
    json_t *j = NULL;
    layer_url(&p, seq, 1, url, sizeof url);
    CHECK_INT_EQ(append_json(url, 0, 0, 1, out, &j), 409); /* layer 1 before layer 0 */
    const json_t *err = json_object_get(j, "error");
    CHECK_STR_EQ(json_string_value(json_object_get(err, "code")), "layer_out_of_order");
    CHECK_STR_EQ(json_string_value(json_object_get(err, "field")), "layer");
    json_decref(j);
    layer_url(&p, seq, 0, url, sizeof url);
    CHECK_INT_EQ(append_json(url, 0, 0, 2, out, NULL), 200);
    layer_url(&p, seq, 1, url, sizeof url);
    CHECK_INT_EQ(append_json(url, 0, 0, 3, out, &j), 409); /* 3 > layer 0's 2 */
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    CHECK_MSG(msg && strstr(msg, "3 positions") && strstr(msg, "layer 0's 2"), "%s", msg ? msg : "");
    json_decref(j);
    CHECK_INT_EQ(append_json(url, 0, 0, 2, out, &j), 200); /* caught up: fine */
    const json_t *sess = json_object_get(j, "session");
    CHECK_INT_EQ(json_integer_value(json_object_get(sess, "layer")), 1);
    CHECK_INT_EQ(json_integer_value(json_object_get(sess, "length")), 2);
    json_decref(j);
    /* the refusals changed nothing: both layers hold 2 */
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p.base_url, seq);
    long st;
    j = attnd_http_json("GET", url, NULL, &st);
    const json_t *layers = json_object_get(j, "layers");
    CHECK_INT_EQ(json_integer_value(json_object_get(json_array_get(layers, 0), "length")), 2);
    CHECK_INT_EQ(json_integer_value(json_object_get(json_array_get(layers, 1), "length")), 2);
    json_decref(j);
    static const char *const bad_layer[] = {"2", "-1", "x", "99999999"};
    for (size_t i = 0; i < sizeof bad_layer / sizeof bad_layer[0]; i++) {
        snprintf(url, sizeof url, "%s/v1/sessions/%s/layers/%s/append", p.base_url, seq, bad_layer[i]);
        CHECK_INT_EQ(append_json(url, 0, 0, 1, out, &j), 400);
        CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"), "field")), "layer");
        json_decref(j);
    }
    plain_url(&p, seq, url, sizeof url); /* a sequence has no plain append */
    CHECK_INT_EQ(append_json(url, 0, 0, 1, out, &j), 400);
    CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"), "field")), "layer");
    json_decref(j);
    char single[96];
    CHECK(create(&p, "llama.0", "{}", single) == 0);
    layer_url(&p, single, 0, url, sizeof url); /* a single-layer session has no layers */
    CHECK_INT_EQ(append_json(url, 0, 0, 1, out, &j), 400);
    json_decref(j);
    plain_url(&p, single, url, sizeof url);
    CHECK_INT_EQ(append_json(url, 0, 0, 1, out, NULL), 200);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

static long get_status(const attnd_proc *p, const char *id, json_t **body)
{
    char url[512];
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p->base_url, id);
    long st;
    json_t *j = attnd_http_json("GET", url, NULL, &st);
    if (body)
        *body = j;
    else
        json_decref(j);
    return st;
}

/* Appends n rows to every layer of seq. Returns 0 when all answered 200. */
static int step_all(const attnd_proc *p, const char *seq, int L, int from, int n)
{
    int bad = 0;
    for (int l = 0; l < L; l++) {
        char url[512];
        float out[16 * E];
        layer_url(p, seq, l, url, sizeof url);
        bad += append_json(url, l, from, n, out, NULL) != 200;
    }
    return bad;
}

/* A pool of 2.5 sequences' pages: a third sequence evicts the least recently
 * used one whole (every layer's pages, its id 410), never a layer of it; the
 * other stays complete. A sequence larger than the pool alone is 413. */
TEST(budget_per_sequence)
{
    const int L = n_layers_of(CKPT "llama_gqa");
    const int page = 32768, pages = (5 * L) / 2; /* one page a layer holds 16+ rows */
    char pool[32], pb[32];
    snprintf(pool, sizeof pool, "%d", pages * page);
    snprintf(pb, sizeof pb, "%d", page);
    attnd_proc p;
    const char *args[] = {"--model", "llama=" CKPT "llama_gqa,layers=all", "--kv-page-bytes", pb,
                          "--kv-cache-bytes", pool, NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char a[96], b[96], c[96];
    CHECK(create(&p, "llama", "{}", a) == 0);
    CHECK(create(&p, "llama", "{}", b) == 0);
    CHECK_INT_EQ(step_all(&p, a, L, 0, 2), 0);
    CHECK_INT_EQ(step_all(&p, b, L, 0, 2), 0);
    json_t *j;
    CHECK_INT_EQ(get_status(&p, a, &j), 200);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "blocks")), L); /* one page a layer */
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "bytes")), (json_int_t)L * page);
    json_decref(j);
    CHECK_INT_EQ(get_status(&p, b, NULL), 200); /* b is now more recent than a */
    CHECK(create(&p, "llama", "{}", c) == 0);
    CHECK_INT_EQ(step_all(&p, c, L, 0, 2), 0);
    CHECK_INT_EQ(get_status(&p, a, NULL), 410); /* a went whole */
    CHECK_INT_EQ(get_status(&p, b, &j), 200);
    const json_t *layers = json_object_get(j, "layers");
    for (int l = 0; l < L; l++) /* b complete: every layer has its rows */
        CHECK_INT_EQ(json_integer_value(json_object_get(json_array_get(layers, (size_t)l), "length")), 2);
    json_decref(j);
    CHECK_INT_EQ(get_status(&p, c, &j), 200);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "blocks")), L);
    json_decref(j);
    char url[512];
    snprintf(url, sizeof url, "%s/v1/sessions", p.base_url);
    long st;
    j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "total")), 2);
    json_int_t bytes = 0;
    for (size_t i = 0; i < json_array_size(json_object_get(j, "sessions")); i++)
        bytes += json_integer_value(json_object_get(json_array_get(json_object_get(j, "sessions"), i), "bytes"));
    CHECK_INT_EQ(bytes, (json_int_t)2 * L * page); /* nothing of a held */
    json_decref(j);
    /* b and c continue */
    CHECK_INT_EQ(step_all(&p, b, L, 2, 1), 0);
    CHECK_INT_EQ(step_all(&p, c, L, 2, 1), 0);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* A fork shares every layer's pages; appends to the fork copy its last block
 * on each layer and leave the parent's answers as a never-forked sequence's. */
TEST(fork_copy_on_write)
{
    const int L = n_layers_of(CKPT "llama_gqa");
    attnd_proc p;
    const char *args[] = {"--model", "llama=" CKPT "llama_gqa,layers=all", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char par[96], ref[96], kid[96], url[512];
    CHECK(create(&p, "llama", "{}", par) == 0);
    CHECK(create(&p, "llama", "{}", ref) == 0);
    CHECK_INT_EQ(step_all(&p, par, L, 0, 3), 0);
    CHECK_INT_EQ(step_all(&p, ref, L, 0, 3), 0);
    snprintf(url, sizeof url, "%s/v1/sessions/%s/fork", p.base_url, par);
    long st;
    json_t *j = attnd_http_json("POST", url, NULL, &st);
    CHECK_INT_EQ(st, 201);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "length")), 3);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "num_layers")), L);
    snprintf(kid, sizeof kid, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    CHECK_INT_EQ(get_status(&p, kid, &j), 200);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "shared_blocks")), L); /* every layer's page */
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "blocks")), L);
    json_decref(j);
    /* the fork goes on with other rows (seed 50+l), on every layer */
    for (int l = 0; l < L; l++) {
        float out[E];
        layer_url(&p, kid, l, url, sizeof url);
        CHECK_INT_EQ(append_json(url, 50 + l, 3, 1, out, NULL), 200);
    }
    CHECK_INT_EQ(get_status(&p, kid, &j), 200);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "shared_blocks")), 0); /* copied on write */
    json_decref(j);
    CHECK_INT_EQ(get_status(&p, par, &j), 200);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "shared_blocks")), 0);
    json_decref(j);
    /* the parent answers as the never-forked reference, on every layer */
    int differing = 0;
    for (int l = 0; l < L; l++) {
        float a[2 * E], b[2 * E];
        layer_url(&p, par, l, url, sizeof url);
        CHECK_INT_EQ(append_json(url, l, 3, 2, a, NULL), 200);
        layer_url(&p, ref, l, url, sizeof url);
        CHECK_INT_EQ(append_json(url, l, 3, 2, b, NULL), 200);
        differing += memcmp(a, b, sizeof a) != 0;
    }
    CHECK_INT_EQ(differing, 0);
    /* deleting the parent leaves the fork whole */
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p.base_url, par);
    json_decref(attnd_http_json("DELETE", url, NULL, &st));
    CHECK_INT_EQ(st, 204);
    CHECK_INT_EQ(get_status(&p, par, NULL), 404);
    CHECK_INT_EQ(step_all(&p, kid, L, 4, 1), 0);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

int main(void)
{
    RUN(group_info);
    RUN(out_of_order);
    RUN(budget_per_sequence);
    RUN(fork_copy_on_write);
    RUN(group_equals_layers);
    return check_summary();
}
