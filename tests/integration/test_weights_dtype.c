/* test_weights_dtype.c — checkpoint-dtype weights through the real daemon.
 * The BF16 Mistral fixture served as stored ("kept": weights BF16 by default)
 * and widened at load ("wide": weights=f32), the F32 BERT fixture as stored
 * and with weights=bf16 / weights=f16: GET /v1/models/NAME reports
 * weights_dtype and weights_bytes (about half for BF16 / F16); the kept and
 * widened Mistral answer bit-identically (sessions appended in chunks of at
 * most 16 rows: the few-row kernel) and within 1e-6 for a one-shot of 24 rows
 * (the widened-tile GEMM); --inspect and the start-up log name the weights
 * and their bytes;
 * a bad weights= value is refused at start-up naming the key.
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
#define E 64 /* mistral_mqa's hidden size */

static attnd_proc proc;

static long call(const char *method, const char *path, const char *body, json_t **out)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", proc.base_url, path);
    http_result r;
    if (http_do(method, url, body, body ? strlen(body) : 0, NULL, &r) != 0)
        return -1;
    json_error_t je;
    *out = r.body_len ? json_loads(r.body, 0, &je) : NULL;
    long st = r.status;
    http_result_free(&r);
    return st;
}

static char *rows_json(int from, int n, const char *tail)
{
    sbuf b = {0};
    sb_printf(&b, "{\"query\":[");
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < E; j++)
            sb_printf(&b, "%s%.7g", j ? "," : "", sin(0.37 * (from + i) + 0.11 * j));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]%s}", tail);
    return b.p;
}

/* out[i*E + k] = output[i][k] of the reply; returns 0 when the shape is right. */
static int output_of(json_t *j, int n, float *out)
{
    json_t *o = json_object_get(j, "output");
    if (!json_is_array(o) || json_array_size(o) != (size_t)n)
        return -1;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < E; k++)
            out[(size_t)i * E + (size_t)k] =
                (float)json_number_value(json_array_get(json_array_get(o, (size_t)i), (size_t)k));
    return 0;
}

static void model_info(const char *name, char *dtype, long *bytes)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s", name);
    json_t *j = NULL;
    CHECK_INT_EQ(call("GET", path, NULL, &j), 200);
    const char *d = json_string_value(json_object_get(j, "weights_dtype"));
    snprintf(dtype, 8, "%s", d ? d : "?");
    *bytes = (long)json_integer_value(json_object_get(j, "weights_bytes"));
    json_decref(j);
}

TEST(info_reports_weights)
{
    static const struct {
        const char *name, *dtype;
    } want[] = {{"kept", "BF16"}, {"wide", "F32"}, {"bert", "F32"}, {"bert16", "BF16"}, {"bertf16", "F16"}};
    long bytes[5];
    for (int i = 0; i < 5; i++) {
        char d[8];
        model_info(want[i].name, d, &bytes[i]);
        CHECK_MSG(strcmp(d, want[i].dtype) == 0, "%s: weights_dtype %s, want %s", want[i].name, d,
                  want[i].dtype);
        CHECK_MSG(bytes[i] > 0, "%s: weights_bytes %ld", want[i].name, bytes[i]);
    }
    printf("weights_bytes: mistral kept BF16 %ld vs widened %ld; bert F32 %ld, bf16 %ld, f16 %ld\n",
           bytes[0], bytes[1], bytes[2], bytes[3], bytes[4]);
    /* matrices halve; biases (bert: 4 x 32 floats) and 64-byte padding stay */
    CHECK(bytes[0] * 2 <= bytes[1] + 8 * 64 && bytes[0] * 10 < bytes[1] * 6);
    CHECK(bytes[3] * 10 < bytes[2] * 6 && bytes[3] == bytes[4]);
}

TEST(kept_equals_widened)
{
    enum { T = 26 };
    static const int chunks[] = {1, 7, 2, 16};
    float a[T * E], b[T * E];
    char ida[64] = "", idb[64] = "";
    json_t *j = NULL;
    CHECK_INT_EQ(call("POST", "/v1/models/kept/sessions", "{}", &j), 201);
    snprintf(ida, sizeof ida, "%s", j ? json_string_value(json_object_get(j, "id")) : "");
    json_decref(j);
    CHECK_INT_EQ(call("POST", "/v1/models/wide/sessions", "{}", &j), 201);
    snprintf(idb, sizeof idb, "%s", j ? json_string_value(json_object_get(j, "id")) : "");
    json_decref(j);
    int at = 0;
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        char *body = rows_json(at, chunks[c], "");
        char path[128];
        snprintf(path, sizeof path, "/v1/sessions/%s/append", ida);
        CHECK_INT_EQ(call("POST", path, body, &j), 200);
        CHECK(output_of(j, chunks[c], a + (size_t)at * E) == 0);
        json_decref(j);
        snprintf(path, sizeof path, "/v1/sessions/%s/append", idb);
        CHECK_INT_EQ(call("POST", path, body, &j), 200);
        CHECK(output_of(j, chunks[c], b + (size_t)at * E) == 0);
        json_decref(j);
        free(body);
        at += chunks[c];
    }
    CHECK_MSG(memcmp(a, b, sizeof a) == 0, "BF16-kept session differs from the widened one");
    double m = 0;
    for (int i = 0; i < T * E; i++)
        m = fmax(m, fabs((double)a[i]));
    CHECK(m > 0.01); /* a real answer, not zeros */

    /* one-shot of 24 rows: the projections widen tiles of W for the GEMM */
    enum { N = 24 };
    float x[N * E], y[N * E];
    char *body = rows_json(100, N, ",\"is_causal\":true");
    CHECK_INT_EQ(call("POST", "/v1/models/kept/attention", body, &j), 200);
    CHECK(output_of(j, N, x) == 0);
    json_decref(j);
    CHECK_INT_EQ(call("POST", "/v1/models/wide/attention", body, &j), 200);
    CHECK(output_of(j, N, y) == 0);
    json_decref(j);
    free(body);
    double d = 0, s = 1;
    for (int i = 0; i < N * E; i++) {
        d = fmax(d, fabs((double)x[i] - (double)y[i]));
        s = fmax(s, fabs((double)y[i]));
    }
    printf("one-shot of %d rows, BF16-kept vs widened: max rel diff %.3g\n", N, d / s);
    CHECK_MSG(d / s <= 1e-6, "%.3g", d / s);
}

/* The start-up log line of each model names its weights. */
TEST(startup_log)
{
    FILE *f = fopen(proc.log_path, "r");
    CHECK(f != NULL);
    if (f == NULL)
        return;
    char line[4096];
    int kept = 0, wide = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "model kept loaded") && strstr(line, "weights=BF16 (20480 bytes)"))
            kept = 1;
        if (strstr(line, "model wide loaded") && strstr(line, "weights=F32 (40960 bytes)"))
            wide = 1;
    }
    fclose(f);
    CHECK_MSG(kept && wide, "log %s: kept %d wide %d", proc.log_path, kept, wide);
}

TEST(inspect_and_refusals)
{
    const char *inspect[] = {"--inspect", CKPT "mistral_mqa", NULL};
    char *out = NULL;
    CHECK_INT_EQ(attnd_run(inspect, 20, &out), 0);
    CHECK_MSG(out && strstr(out, "weights BF16 ("), "%s", out ? out : "");
    free(out);
    const char *bad[] = {"--listen", "127.0.0.1:0", "--model", "x=config/demo.safetensors,weights=fp8", NULL};
    out = NULL;
    CHECK_INT_EQ(attnd_run(bad, 20, &out), 2);
    CHECK_MSG(out && strstr(out, "model 'x': weights must be bf16, f16 or f32, got 'fp8'"), "%s",
              out ? out : "");
    free(out);
}

int main(void)
{
    const char *args[] = {"--model", "kept=" CKPT "mistral_mqa,layer=0",
                          "--model", "wide=" CKPT "mistral_mqa,layer=0,weights=f32",
                          "--model", "bert=" CKPT "bert,layer=1",
                          "--model", "bert16=" CKPT "bert,layer=1,weights=bf16",
                          "--model", "bertf16=" CKPT "bert,layer=1,weights=f16",
                          NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return check_summary();
    }
    RUN(info_reports_weights);
    RUN(kept_equals_widened);
    RUN(startup_log);
    RUN(inspect_and_refusals);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    return check_summary();
}
