/* test_kv_dtype.c — compact KV caches through the real daemon: the demo layer
 * served four times, with float32 caches and with kv_dtype=f16 / bf16 / int8,
 * on pages of 2112 bytes (4 rows of f32 K and V, 8 of f16, 16 of int8 with
 * its scales). The same stream appended in chunks to each answers alike within
 * the dtype's rounding (and not bit-identically: the conversion really
 * happens); the f16/bf16 session holds half the pages, the int8 one under a
 * third; cross sessions and forks work; unknown dtype names are refused at
 * start-up.
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

static char *rows_json(const char *member, int from, int n)
{
    sbuf b = {0};
    sb_printf(&b, "{\"%s\":[", member);
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < E; j++)
            sb_printf(&b, "%s%.7g", j ? "," : "", sin(0.31 * (from + i) + 0.17 * j));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]}");
    return b.p;
}

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

static void create(const char *model, const char *body, char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s/sessions", model);
    json_t *j = NULL;
    CHECK_INT_EQ(call("POST", path, body, &j), 201);
    snprintf(id, 64, "%s", j ? json_string_value(json_object_get(j, "id")) : "");
    json_decref(j);
}

/* Appends rows [from, from+n) to session id; adds every output number to out. */
static void append(const char *id, int from, int n, float *out)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s/append", id);
    char *body = rows_json("query", from, n);
    json_t *j = NULL;
    CHECK_INT_EQ(call("POST", path, body, &j), 200);
    free(body);
    json_t *o = json_object_get(j, "output");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < E; k++)
            out[(size_t)i * E + (size_t)k] =
                (float)json_number_value(json_array_get(json_array_get(o, (size_t)i), (size_t)k));
    json_decref(j);
}

static long bytes_of(const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s", id);
    json_t *j = NULL;
    CHECK_INT_EQ(call("GET", path, NULL, &j), 200);
    long b = (long)json_integer_value(json_object_get(j, "bytes"));
    json_decref(j);
    return b;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/* The same chunked stream on "exact" (f32) and "compact"; returns max diff. */
static double stream_diff(const char *compact, long *bytes_exact, long *bytes_compact)
{
    enum { T = 40 };
    static const int chunks[] = {1, 7, 2, 10, 1, 19};
    float *a = calloc((size_t)T * E, sizeof *a), *b = calloc((size_t)T * E, sizeof *b);
    char ida[64], idb[64];
    create("exact", "{}", ida);
    create(compact, "{}", idb);
    int at = 0;
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        append(ida, at, chunks[c], a + (size_t)at * E);
        append(idb, at, chunks[c], b + (size_t)at * E);
        at += chunks[c];
    }
    *bytes_exact = bytes_of(ida);
    *bytes_compact = bytes_of(idb);
    double d = max_diff(a, b, (size_t)T * E);
    free(a);
    free(b);
    return d;
}

TEST(compact_streams)
{
    static const struct {
        const char *model;
        double tol, bytes;
    } cases[] = {{"half", 2e-3, 0.6}, {"brain", 2e-2, 0.6}, {"small", 3e-2, 0.34}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long be = 0, bc = 0;
        double d = stream_diff(cases[i].model, &be, &bc);
        printf("%-5s stream of 40 in chunks vs f32 caches: max diff %.3g (tol %.0e); "
               "session bytes %ld vs %ld\n", cases[i].model, d, cases[i].tol, bc, be);
        CHECK_MSG(d <= cases[i].tol, "%s: %.3g", cases[i].model, d);
        CHECK_MSG(d > 0, "%s answers bit-identically to f32: no conversion happened",
                  cases[i].model);
        CHECK_MSG(bc < be * cases[i].bytes, "%s holds %ld bytes, f32 %ld", cases[i].model, bc, be);
    }
}

TEST(cross_and_fork)
{
    char *mem = rows_json("key", 100, 12);
    char ide[64], idh[64], path[128];
    create("exact", mem, ide);
    create("half", mem, idh);
    free(mem);
    float a[3 * E], b[3 * E];
    append(ide, 0, 3, a);
    append(idh, 0, 3, b);
    double d = max_diff(a, b, 3 * E);
    printf("f16 cross session vs f32: max diff %.3g\n", d);
    CHECK(d <= 2e-3 && d > 0);
    /* A fork of a compact session copies its cache as it is. */
    json_t *j = NULL;
    snprintf(path, sizeof path, "/v1/sessions/%s/fork", idh);
    CHECK_INT_EQ(call("POST", path, NULL, &j), 201);
    char child[64];
    snprintf(child, sizeof child, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    float c[E], p[E];
    append(child, 3, 1, c);
    append(idh, 3, 1, p);
    CHECK(max_diff(c, p, E) == 0); /* same memory, same query: the same answer */
}

TEST(startup_refusals)
{
    static const struct {
        const char *flag, *value, *says;
    } bad[] = {
        {"--kv-dtype", "fp8", "must be f32, f16, bf16 or int8"},
        {"--kv-page-bytes", "2", "multiple of 4"},
        {"--model", "x=config/demo.safetensors,kv_dtype=f64", "kv_dtype must be"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *args[] = {"--listen", "127.0.0.1:0", "--model", "demo=config/demo.safetensors",
                              bad[i].flag, bad[i].value, NULL};
        char *out = NULL;
        CHECK_INT_EQ(attnd_run(args, 20, &out), 2);
        CHECK_MSG(out && strstr(out, bad[i].says), "%s %s: %s", bad[i].flag, bad[i].value,
                  out ? out : "");
        free(out);
    }
}

int main(void)
{
    const char *args[] = {"--model", "exact=config/demo.safetensors",
                          "--model", "half=config/demo.safetensors,kv_dtype=f16",
                          "--model", "brain=config/demo.safetensors,kv_dtype=bf16",
                          "--model", "small=config/demo.safetensors,kv_dtype=int8",
                          "--kv-page-bytes", "2112", NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return check_summary();
    }
    RUN(compact_streams);
    RUN(cross_and_fork);
    RUN(startup_refusals);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    return check_summary();
}
