/* bench_v2.c — what the v2 binary tensor extension saves: client-measured latency (median
 * and p90 of N requests, concurrency 1, keep-alive) of POST /v2/models/m/infer for one
 * T=512, E=512 query (8 heads, a model written here) sent as JSON with a JSON answer,
 * binary in with a JSON answer, and binary both ways; beside the server's own compute_us,
 * so the gap between rows is the codec and the transfer, not the maths.
 * Usage: bench_v2 [requests]  (default 50). Daemon: $ATTND_BIN, else $BUILD/attnd.
 */
#include "benchutil.h"
#include "daemon.h"

#include <curl/curl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define T 512
#define EMB 512
#define HEADS 8

static uint64_t rng = 0x853c49e6748fea9bULL; /* bench_rng_sym state */

typedef struct body {
    char *p;
    size_t len, header_len; /* header_len 0: all JSON */
} body;

/* The query as JSON data (shortest-ish %.9g text), or as raw bytes after the header. */
static body make_body(const float *q, int binary, int binary_out)
{
    size_t n = (size_t)T * EMB, cap = n * 18 + 512;
    body b = {malloc(cap), 0, 0};
    b.len = (size_t)snprintf(b.p, cap,
                             "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
                             "\"shape\":[1,%d,%d],",
                             T, EMB);
    if (binary) {
        b.len += (size_t)snprintf(b.p + b.len, cap - b.len,
                                  "\"parameters\":{\"binary_data_size\":%zu}}]%s}", n * 4,
                                  binary_out ? ",\"parameters\":{\"binary_data_output\":true}"
                                             : "");
        b.header_len = b.len;
        memcpy(b.p + b.len, q, n * 4);
        b.len += n * 4;
        return b;
    }
    b.len += (size_t)snprintf(b.p + b.len, cap - b.len, "\"data\":[");
    for (size_t i = 0; i < n; i++)
        b.len += (size_t)snprintf(b.p + b.len, cap - b.len, "%s%.9g", i ? "," : "", (double)q[i]);
    b.len += (size_t)snprintf(b.p + b.len, cap - b.len, "]}]}");
    return b;
}

typedef struct sink {
    char *p;
    size_t len, cap;
} sink;

static size_t on_data(char *d, size_t sz, size_t nm, void *ud)
{
    sink *s = ud;
    size_t n = sz * nm;
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1 << 20;
        while (cap < s->len + n + 1) cap *= 2;
        char *p = realloc(s->p, cap);
        if (!p) return 0;
        s->p = p;
        s->cap = cap;
    }
    memcpy(s->p + s->len, d, n);
    s->len += n;
    return n;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs n requests (after 3 warm-ups); prints median/p90 latency, the median compute_us the
 * server reported, and the request/response sizes. Returns 0 or -1. */
static int run(CURL *c, const char *url, const body *b, const char *title, int n)
{
    struct curl_slist *hs = NULL;
    char line[96];
    hs = curl_slist_append(hs, b->header_len ? "Content-Type: application/octet-stream"
                                             : "Content-Type: application/json");
    if (b->header_len) {
        snprintf(line, sizeof line, "Inference-Header-Content-Length: %zu", b->header_len);
        hs = curl_slist_append(hs, line);
    }
    sink s = {0};
    double *lat = calloc((size_t)n, sizeof *lat), *comp = calloc((size_t)n, sizeof *comp);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, b->p);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)b->len);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    int rc = 0;
    for (int i = -3; i < n && rc == 0; i++) {
        s.len = 0;
        int64_t t0 = bench_now_ns();
        long status = 0;
        if (curl_easy_perform(c) != CURLE_OK ||
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK || status != 200) {
            fprintf(stderr, "bench_v2: %s: request failed (HTTP %ld)\n", title, status);
            rc = -1;
            break;
        }
        if (i < 0) continue;
        lat[i] = (double)(bench_now_ns() - t0) / 1e6;
        const char *cu = s.p ? strstr(s.p, "\"compute_us\":") : NULL;
        comp[i] = cu ? atof(cu + 13) / 1e3 : NAN;
    }
    if (rc == 0) {
        qsort(lat, (size_t)n, sizeof *lat, cmp_d);
        qsort(comp, (size_t)n, sizeof *comp, cmp_d);
        printf("%-28s %10.2f %10.2f %14.2f %12.2f %12.2f\n", title, lat[n / 2],
               lat[(n * 9) / 10], comp[n / 2], (double)b->len / 1e6, (double)s.len / 1e6);
    }
    free(lat);
    free(comp);
    free(s.p);
    curl_slist_free_all(hs);
    return rc;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 50;
    const char *build = getenv("BUILD");
    char bin[512], model[] = "/tmp/attnd-bench-v2-XXXXXX", arg[600];
    if (n < 1 || n > 10000) {
        fprintf(stderr, "usage: %s [requests, 1..10000]\n", argv[0]);
        return 2;
    }
    if (!getenv("ATTND_BIN") && build) {
        snprintf(bin, sizeof bin, "%s/attnd", build);
        setenv("ATTND_BIN", bin, 1);
    }
    int fd = mkstemp(model);
    if (fd >= 0) close(fd);
    if (fd < 0 || bench_write_mha_model(model, EMB, HEADS, &rng) != 0) {
        fprintf(stderr, "bench_v2: cannot write %s\n", model);
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    snprintf(arg, sizeof arg, "m=%s", model);
    const char *args[] = {"--model", arg, "--max-batch-requests", "1", NULL};
    attnd_proc p;
    int rc = 1;
    if (attnd_proc_start(&p, args) != 0) {
        fprintf(stderr, "bench_v2: attnd did not start\n");
        goto done_model;
    }
    float *q = malloc((size_t)T * EMB * sizeof *q);
    for (size_t i = 0; i < (size_t)T * EMB; i++) q[i] = (float)bench_rng_sym(&rng);
    body bodies[3] = {make_body(q, 0, 0), make_body(q, 1, 0), make_body(q, 1, 1)};
    const char *titles[3] = {"JSON in, JSON out", "binary in, JSON out", "binary in, binary out"};
    char url[256];
    snprintf(url, sizeof url, "%s/v2/models/m/infer", p.base_url);
    printf("POST /v2/models/m/infer, one query [1,%d,%d], %d heads, %d requests each, "
           "concurrency 1\n", T, EMB, HEADS, n);
    printf("%-28s %10s %10s %14s %12s %12s\n", "encoding", "p50 ms", "p90 ms",
           "compute p50 ms", "request MB", "response MB");
    CURL *c = curl_easy_init();
    rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = run(c, url, &bodies[i], titles[i], n) ? 1 : 0;
    curl_easy_cleanup(c);
    for (int i = 0; i < 3; i++) free(bodies[i].p);
    free(q);
    if (attnd_proc_stop(&p) != 0) rc = 1;
done_model:
    unlink(model);
    curl_global_cleanup();
    return rc;
}
