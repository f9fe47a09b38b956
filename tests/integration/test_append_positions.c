/* test_append_positions.c — position_ids on session appends (a Hugging Face
 * decode loop with left padding passes them), through the daemon on a RoPE +
 * GQA checkpoint: explicit default positions answer bit for bit as none; other
 * positions change the answer and equal a one-shot causal request with the
 * same positions (and the rows appended in chunks equal it too); the binary
 * form equals the JSON one; a sequence layer takes them; a wrong count, a
 * negative, fractional or too large id is a 400 naming position_ids and
 * leaves the session as it was.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#define CKPT "tests/fixtures/ckpt/"
#define E 64
#define T 6

static attnd_proc proc;

static float val(int i, int j) { return (float)sin(0.31 * i - 0.07 * j + 0.2); }

static json_t *post(const char *path, const char *body, long *status)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", proc.base_url, path);
    return attnd_http_json("POST", url, body, status);
}

static void create(const char *model, char *id)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/models/%s/sessions", model);
    long st;
    json_t *j = post(path, "{}", &st);
    CHECK_INT_EQ(st, 201);
    snprintf(id, 96, "%s", json_string_value(json_object_get(j, "id")) ? json_string_value(json_object_get(j, "id")) : "");
    json_decref(j);
}

/* {"query": rows [from, from+n), "position_ids": pos (n of them, or none)} + extra. */
static char *body_of(int from, int n, const long long *pos, int n_pos, const char *extra)
{
    sbuf b = {0};
    sb_printf(&b, "{\"query\":[");
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < E; j++)
            sb_printf(&b, "%s%.9g", j ? "," : "", (double)val(from + i, j));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]");
    if (pos) {
        sb_printf(&b, ",\"position_ids\":[");
        for (int i = 0; i < n_pos; i++)
            sb_printf(&b, "%s%lld", i ? "," : "", pos[i]);
        sb_printf(&b, "]");
    }
    sb_printf(&b, "%s}", extra ? extra : "");
    return b.p;
}

/* POSTs body to path; the output (n×E) into out. Returns the status. */
static long run(const char *path, char *body, int n, float *out, json_t **answer)
{
    long st;
    json_t *j = post(path, body, &st);
    free(body);
    const json_t *o = json_object_get(j, "output");
    for (int i = 0; st == 200 && i < n; i++)
        for (int k = 0; k < E; k++)
            out[i * E + k] = (float)json_number_value(json_array_get(json_array_get(o, (size_t)i), (size_t)k));
    if (answer)
        *answer = j;
    else
        json_decref(j);
    return st;
}

static void append_path(const char *id, char *path, size_t cap)
{
    snprintf(path, cap, "/v1/sessions/%.95s/append", id);
}

static double max_diff(const float *a, const float *b, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

TEST(default_positions_are_explicit_defaults)
{
    char a[96], b[96], pa[256], pb[256];
    create("llama.0", a);
    create("llama.0", b);
    append_path(a, pa, sizeof pa);
    append_path(b, pb, sizeof pb);
    float x[T * E], y[T * E];
    const long long p0[] = {0, 1, 2}, p1[] = {3, 4, 5};
    CHECK_INT_EQ(run(pa, body_of(0, 3, NULL, 0, NULL), 3, x, NULL), 200);
    CHECK_INT_EQ(run(pb, body_of(0, 3, p0, 3, NULL), 3, y, NULL), 200);
    CHECK_INT_EQ(run(pa, body_of(3, 3, NULL, 0, NULL), 3, x + 3 * E, NULL), 200);
    CHECK_INT_EQ(run(pb, body_of(3, 3, p1, 3, NULL), 3, y + 3 * E, NULL), 200);
    CHECK(memcmp(x, y, sizeof x) == 0);
}

/* Hugging Face's positions for a prompt left-padded by 2 (the pads at 1, then
 * 0, 1, 2, 3; a uniform shift would change nothing under RoPE) in one append
 * and in chunks vs the one-shot causal request with the same positions. */
TEST(custom_positions_equal_one_shot)
{
    const long long pos[T] = {1, 1, 0, 1, 2, 3};
    float shot[T * E], whole[T * E], chunks[T * E], plain[T * E];
    CHECK_INT_EQ(run("/v1/models/llama.0/attention", body_of(0, T, pos, T, ",\"is_causal\":true"), T,
                     shot, NULL), 200);
    char a[96], b[96], c[96], pa[256], pb[256], pc[256];
    create("llama.0", a);
    create("llama.0", b);
    create("llama.0", c);
    append_path(a, pa, sizeof pa);
    append_path(b, pb, sizeof pb);
    append_path(c, pc, sizeof pc);
    CHECK_INT_EQ(run(pa, body_of(0, T, pos, T, NULL), T, whole, NULL), 200);
    CHECK_INT_EQ(run(pb, body_of(0, 2, pos, 2, NULL), 2, chunks, NULL), 200);
    CHECK_INT_EQ(run(pb, body_of(2, 1, pos + 2, 1, NULL), 1, chunks + 2 * E, NULL), 200);
    CHECK_INT_EQ(run(pb, body_of(3, 3, pos + 3, 3, NULL), 3, chunks + 3 * E, NULL), 200);
    CHECK_INT_EQ(run(pc, body_of(0, T, NULL, 0, NULL), T, plain, NULL), 200);
    double d_whole = max_diff(shot, whole, T * E), d_chunks = max_diff(shot, chunks, T * E);
    double d_plain = max_diff(shot, plain, T * E);
    printf("positions 1,1,0,1,2,3: session vs one-shot max |diff| %.3g (one append), %.3g (chunks); "
           "default positions differ by %.3g\n", d_whole, d_chunks, d_plain);
    CHECK(d_whole <= 1e-6);
    CHECK(d_chunks <= 1e-6);
    CHECK(d_plain > 1e-4); /* the positions were used */
}

/* A layer of a sequence takes them as a single-layer session does. */
TEST(sequence_layer_positions)
{
    const long long pos[] = {4, 4, 5}; /* repeated ids are allowed (padding) */
    char seq[96], one[96], path[256];
    create("llama", seq);
    create("llama.1", one);
    float a[3 * E], b[3 * E], z[3 * E];
    snprintf(path, sizeof path, "/v1/sessions/%s/layers/0/append", seq);
    CHECK_INT_EQ(run(path, body_of(0, 3, pos, 3, NULL), 3, z, NULL), 200);
    snprintf(path, sizeof path, "/v1/sessions/%s/layers/1/append", seq);
    CHECK_INT_EQ(run(path, body_of(0, 3, pos, 3, NULL), 3, a, NULL), 200);
    append_path(one, path, sizeof path);
    CHECK_INT_EQ(run(path, body_of(0, 3, pos, 3, NULL), 3, b, NULL), 200);
    CHECK(memcmp(a, b, sizeof a) == 0);
}

/* The v2 binary form carries position_ids as an INT64 [1,T] input. */
TEST(binary_positions)
{
    char a[96], b[96], pa[256];
    create("llama.0", a);
    create("llama.0", b);
    append_path(a, pa, sizeof pa);
    const long long pos[] = {9, 10, 11};
    float want[3 * E], got[3 * E];
    CHECK_INT_EQ(run(pa, body_of(0, 3, pos, 3, NULL), 3, want, NULL), 200);
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,3,%d],\"datatype\":\"FP32\","
                      "\"parameters\":{\"binary_data_size\":%d}},{\"name\":\"position_ids\","
                      "\"shape\":[1,3],\"datatype\":\"INT64\",\"data\":[9,10,11]}],\"outputs\":"
                      "[{\"name\":\"output\",\"parameters\":{\"binary_data\":true}}]}",
                      E, 3 * E * 4);
    size_t len = (size_t)hl + 3 * E * 4;
    char *body = malloc(len);
    memcpy(body, head, (size_t)hl);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < E; j++) {
            float v = val(i, j);
            memcpy(body + hl + ((size_t)i * E + (size_t)j) * 4, &v, 4);
        }
    char ihcl[80], url[512];
    snprintf(ihcl, sizeof ihcl, "Inference-Header-Content-Length: %d", hl);
    snprintf(url, sizeof url, "%s/v1/sessions/%s/append", proc.base_url, b);
    const char *hdrs[] = {ihcl, NULL};
    http_result r;
    CHECK(http_do_ex("POST", url, body, len, "application/octet-stream", hdrs, NULL, &r) == 0);
    free(body);
    CHECK_INT_EQ(r.status, 200);
    json_error_t je;
    json_t *j = json_loadb(r.body, r.body_len, JSON_DISABLE_EOF_CHECK, &je);
    size_t at = (size_t)je.position;
    CHECK_INT_EQ(r.body_len - at, sizeof got);
    if (r.status == 200 && r.body_len - at == sizeof got) {
        memcpy(got, r.body + at, sizeof got);
        CHECK(memcmp(want, got, sizeof got) == 0);
    }
    json_decref(j);
    http_result_free(&r);
}

TEST(bad_positions)
{
    static const struct {
        const char *ids, *field;
    } bad[] = {
        {"[1,2,3]", "position_ids"},           /* 3 ids for 2 rows */
        {"[1]", "position_ids"},               /* 1 for 2 */
        {"[-1,2]", "position_ids[0]"},         /* negative */
        {"[1,2.5]", "position_ids[1]"},        /* not an integer */
        {"[9007199254740993,1]", "position_ids[0]"}, /* past 2^53 */
        {"[[1],[2]]", "position_ids[0]"},      /* nested */
        {"\"0,1\"", "position_ids"},           /* not an array */
    };
    char id[96], path[256];
    create("llama.0", id);
    append_path(id, path, sizeof path);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *b = body_of(0, 2, NULL, 0, NULL), extra[128];
        free(b);
        snprintf(extra, sizeof extra, ",\"position_ids\":%s", bad[i].ids);
        json_t *j = NULL;
        float out[2 * E];
        CHECK_INT_EQ(run(path, body_of(0, 2, NULL, 0, extra), 2, out, &j), 400);
        const json_t *e = json_object_get(j, "error");
        CHECK_MSG(json_string_value(json_object_get(e, "field")) &&
                      strcmp(json_string_value(json_object_get(e, "field")), bad[i].field) == 0,
                  "%s: %s", bad[i].ids, json_string_value(json_object_get(e, "message")));
        json_decref(j);
    }
    /* untouched: the next append is at length 0 */
    json_t *j = NULL;
    float out[2 * E];
    CHECK_INT_EQ(run(path, body_of(0, 2, NULL, 0, NULL), 2, out, &j), 200);
    CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(j, "session"), "length")), 2);
    json_decref(j);
}

int main(void)
{
    const char *args[] = {"--model", "llama=" CKPT "llama_gqa,layers=all", NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return check_summary();
    }
    RUN(default_positions_are_explicit_defaults);
    RUN(custom_positions_equal_one_shot);
    RUN(sequence_layer_positions);
    RUN(binary_positions);
    RUN(bad_positions);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    return check_summary();
}
