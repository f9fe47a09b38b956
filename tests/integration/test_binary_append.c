/* test_binary_append.c — session appends in the v2 binary tensor encoding
 * (Inference-Header-Content-Length, as /v2/.../infer): the same rows appended
 * as JSON to one session and as raw float32 to another answer bit for bit alike
 * (binary output, or JSON output when the header asks for it), the answer
 * carries the session's state in its parameters, and what a binary append may
 * not carry (a batch, key, masks, weights; positions of another count) is
 * refused naming it.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#define E 64

static attnd_proc proc;

static float val(int i, int j) { return (float)sin(0.21 * i - 0.09 * j); }

static void create(char *id)
{
    char url[256];
    snprintf(url, sizeof url, "%s/v1/models/demo/sessions", proc.base_url);
    http_result r;
    CHECK(http_do("POST", url, "{}", 2, NULL, &r) == 0 && r.status == 201);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    snprintf(id, 64, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    http_result_free(&r);
}

/* JSON append of rows [from, from+n); their outputs into out. */
static void append_json(const char *id, int from, int n, float *out)
{
    sbuf b = {0};
    sb_printf(&b, "{\"query\":[");
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < E; j++)
            sb_printf(&b, "%s%.9g", j ? "," : "", (double)val(from + i, j));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]}");
    char url[256];
    snprintf(url, sizeof url, "%s/v1/sessions/%s/append", proc.base_url, id);
    http_result r;
    CHECK(http_do("POST", url, b.p, b.len, NULL, &r) == 0 && r.status == 200);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je), *o = json_object_get(j, "output");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < E; k++)
            out[i * E + k] =
                (float)json_number_value(json_array_get(json_array_get(o, (size_t)i), (size_t)k));
    json_decref(j);
    http_result_free(&r);
    free(b.p);
}

/* Binary append of rows [from, from+n) with header JSON head_fmt (%d T, %d E,
 * %d bytes); returns the status, the response in *r (caller frees). */
static long append_binary(const char *id, int from, int n, const char *head_fmt, http_result *r)
{
    char head[1024];
    int hl = snprintf(head, sizeof head, head_fmt, n, E, n * E * 4);
    size_t len = (size_t)hl + (size_t)n * E * 4;
    char *body = malloc(len);
    memcpy(body, head, (size_t)hl);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < E; j++) {
            float v = val(from + i, j);
            memcpy(body + hl + ((size_t)i * E + (size_t)j) * 4, &v, 4); /* little-endian host */
        }
    char ihcl[80], url[256];
    snprintf(ihcl, sizeof ihcl, "Inference-Header-Content-Length: %d", hl);
    snprintf(url, sizeof url, "%s/v1/sessions/%s/append", proc.base_url, id);
    const char *hdrs[] = {ihcl, NULL};
    long st = http_do_ex("POST", url, body, len, "application/octet-stream", hdrs, NULL, r) == 0
                  ? r->status
                  : -1;
    free(body);
    return st;
}

static const char *binary_out =
    "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,%d,%d],\"datatype\":\"FP32\","
    "\"parameters\":{\"binary_data_size\":%d}}],\"outputs\":[{\"name\":\"output\","
    "\"parameters\":{\"binary_data\":true}}]}";
static const char *json_out =
    "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,%d,%d],\"datatype\":\"FP32\","
    "\"parameters\":{\"binary_data_size\":%d}}]}";

TEST(binary_equals_json)
{
    static const int chunks[] = {3, 1, 5, 1};
    char a[64], b[64];
    create(a);
    create(b);
    int at = 0;
    long worst_bits = 0;
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        int n = chunks[c];
        float want[5 * E], got[5 * E];
        append_json(a, at, n, want);
        http_result r;
        CHECK_INT_EQ(append_binary(b, at, n, c % 2 ? json_out : binary_out, &r), 200);
        json_error_t je;
        json_t *j = NULL;
        if (c % 2 == 0) { /* binary output after a JSON header */
            CHECK_STR_EQ(r.content_type, "application/octet-stream");
            /* the JSON header ends where jansson stops reading */
            j = json_loadb(r.body, r.body_len, JSON_DISABLE_EOF_CHECK, &je);
            size_t hl = (size_t)je.position;
            CHECK_INT_EQ(r.body_len - hl, (size_t)n * E * 4);
            if (r.body_len - hl == (size_t)n * E * 4)
                memcpy(got, r.body + hl, (size_t)n * E * 4);
        } else { /* JSON output: the shortest round-trip text of the same floats */
            j = json_loads(r.body, 0, &je);
            json_t *data = json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "data");
            CHECK_INT_EQ(json_array_size(data), (size_t)n * E);
            for (size_t k = 0; k < json_array_size(data) && k < (size_t)n * E; k++)
                got[k] = (float)json_number_value(json_array_get(data, k));
        }
        json_t *params = json_object_get(j, "parameters");
        CHECK_STR_EQ(json_string_value(json_object_get(params, "session_id")), b);
        CHECK_INT_EQ(json_integer_value(json_object_get(params, "session_length")), at + n);
        for (int k = 0; k < n * E; k++)
            worst_bits += memcmp(&got[k], &want[k], 4) != 0;
        json_decref(j);
        http_result_free(&r);
        at += n;
    }
    printf("binary appends vs JSON appends: %ld of %d floats differ\n", worst_bits, at * E);
    CHECK_INT_EQ(worst_bits, 0);
}

TEST(binary_refusals)
{
    static const struct {
        const char *head, *field;
    } bad[] = {
        {"{\"inputs\":[{\"name\":\"query\",\"shape\":[1,%d,%d],\"datatype\":\"FP32\","
         "\"parameters\":{\"binary_data_size\":%d}}],\"parameters\":{\"need_weights\":true}}",
         "attn_weights"},
        {"{\"inputs\":[{\"name\":\"query\",\"shape\":[1,%d,%d],\"datatype\":\"FP32\","
         "\"parameters\":{\"binary_data_size\":%d}},{\"name\":\"position_ids\",\"shape\":[1,2],"
         "\"datatype\":\"INT64\",\"data\":[5,6]}]}",
         "position_ids"}, /* allowed since issue 26, but one per row */
    };
    char id[64];
    create(id);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http_result r;
        CHECK_INT_EQ(append_binary(id, 0, 1, bad[i].head, &r), 400);
        json_error_t je;
        json_t *j = json_loads(r.body, 0, &je);
        CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"), "field")),
                     bad[i].field);
        json_decref(j);
        http_result_free(&r);
    }
    /* The session is untouched by the refusals: its next append is position 0. */
    http_result r;
    CHECK_INT_EQ(append_binary(id, 0, 1, json_out, &r), 200);
    CHECK(strstr(r.body, "\"session_length\":1") != NULL);
    http_result_free(&r);
}

int main(void)
{
    if (attnd_proc_start(&proc, NULL) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return check_summary();
    }
    RUN(binary_equals_json);
    RUN(binary_refusals);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    return check_summary();
}
