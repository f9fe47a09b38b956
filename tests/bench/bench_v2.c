/* bench_v2.c — what the v2 binary tensor extension saves: client-measured latency (median
 * and p90 of N requests, concurrency 1, keep-alive) of POST /v2/models/m/infer for one
 * T=512, E=512 query (8 heads, a model written here) sent as JSON with a JSON answer,
 * binary in with a JSON answer, and binary both ways; beside the server's own compute_us,
 * so the gap between rows is the codec and the transfer, not the maths.
 * Then issue 18's "every idle core works" target: one lone T=2048 causal request (binary
 * both ways, the same model) at a time, its server-reported compute GFLOP/s (FLOPs a causal
 * mask leaves to do: see causal_flops) over
 * all-core OpenBLAS sgemm on a 2048^3 product measured in this run; target >= 0.75.
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
#define LONE_T 2048 /* the lone request of the all-cores target */
#define LONE_RUNS 7

static uint64_t rng = 0x853c49e6748fea9bULL; /* bench_rng_sym state */

typedef struct body {
    char *p;
    size_t len, header_len; /* header_len 0: all JSON */
} body;

/* The query (t rows) as JSON data (shortest-ish %.9g text), or as raw bytes after the
 * header; causal adds is_causal to the request's parameters (binary only). */
static body make_body(const float *q, int t, int binary, int binary_out, int causal)
{
    size_t n = (size_t)t * EMB, cap = n * 18 + 512;
    body b = {malloc(cap), 0, 0};
    b.len = (size_t)snprintf(b.p, cap,
                             "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
                             "\"shape\":[1,%d,%d],",
                             t, EMB);
    if (binary) {
        b.len += (size_t)snprintf(b.p + b.len, cap - b.len,
                                  "\"parameters\":{\"binary_data_size\":%zu}}]%s%s%s}", n * 4,
                                  binary_out || causal ? ",\"parameters\":{" : "",
                                  binary_out ? "\"binary_data_output\":true" : "",
                                  causal ? (binary_out ? ",\"is_causal\":true}" : "\"is_causal\":true}")
                                         : binary_out ? "}" : "");
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
 * server reported, and the request/response sizes; *compute_ms (may be NULL) gets that
 * median. Returns 0 or -1. */
static int run(CURL *c, const char *url, const body *b, const char *title, int n,
               double *compute_ms)
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
        if (compute_ms) *compute_ms = comp[n / 2];
    }
    free(lat);
    free(comp);
    free(s.p);
    curl_slist_free_all(hs);
    return rc;
}

/* FLOPs of one causal (1, t, EMB) self-attention as the library counts them (the Q, K, V, O
 * projections 8 t E^2, and h t^2 (2 d_k + 2 d_v + 5) for the scores), with the scores cut to
 * the t (t + 1) / 2 a causal mask leaves visible: the work actually needed. *nominal gets
 * the uncut count (lib/forward.c's stats.flops). */
static double causal_flops(int t, double *nominal)
{
    const double d = EMB / HEADS, proj = 8.0 * t * EMB * EMB;
    const double scores = (double)t * t * HEADS * (4 * d + 5);
    *nominal = proj + scores;
    return proj + scores * (t + 1.0) / (2.0 * t);
}

/* The lone large request against all-core sgemm (see the header). Returns 0 or -1. */
static int lone_request(CURL *c, const char *url, const float *q)
{
    body b = make_body(q, LONE_T, 1, 1, 1);
    double ms = 0;
    printf("lone request: (1,%d,%d), %d heads, is_causal, binary both ways, %d requests, "
           "one at a time\n", LONE_T, EMB, HEADS, LONE_RUNS);
    int rc = run(c, url, &b, "lone T=2048 causal", LONE_RUNS, &ms);
    free(b.p);
    double nominal;
    const double flops = causal_flops(LONE_T, &nominal);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const double sgemm = bench_sgemm_gflops(2048, (int)cores);
    const double gf = ms > 0 ? flops / (ms * 1e-3) * 1e-9 : 0;
    printf("lone request compute: %.2f ms, %.3g FLOP causal-visible = %.1f GFLOP/s (%.1f on the "
           "library's uncut count); sgemm 2048^3 on %ld threads: %.1f GFLOP/s\n", ms, flops, gf,
           ms > 0 ? nominal / (ms * 1e-3) * 1e-9 : 0, cores, sgemm);
    char got[96];
    snprintf(got, sizeof got, "%.2f (%.1f / %.1f GFLOP/s)", gf / sgemm, gf, sgemm);
    bench_target("lone T=2048 request compute / all-core sgemm >= 0.75",
                 rc == 0 && gf > 0 && sgemm > 0 ? got : "not measured (request failed)",
                 rc == 0 && gf > 0 && sgemm > 0 ? gf / sgemm >= 0.75 : -1);
    return rc;
}

int main(int argc, char **argv)
{
    bench_start("bench_v2");
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
    float *q = malloc((size_t)LONE_T * EMB * sizeof *q);
    for (size_t i = 0; i < (size_t)LONE_T * EMB; i++) q[i] = (float)bench_rng_sym(&rng);
    body bodies[3] = {make_body(q, T, 0, 0, 0), make_body(q, T, 1, 0, 0), make_body(q, T, 1, 1, 0)};
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
        rc = run(c, url, &bodies[i], titles[i], n, NULL) ? 1 : 0;
    if (rc == 0) rc = lone_request(c, url, q) ? 1 : 0;
    curl_easy_cleanup(c);
    for (int i = 0; i < 3; i++) free(bodies[i].p);
    free(q);
    if (attnd_proc_stop(&p) != 0) rc = 1;
done_model:
    unlink(model);
    curl_global_cleanup();
    return rc;
}
