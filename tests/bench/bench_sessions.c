/* bench_sessions.c — streaming through the daemon: the latency of producing one new
 * position by appending one row to a session whose KV cache holds P positions,
 * against the no-session way of re-sending the whole prefix of P + 1 rows with
 * is_causal (which re-parses, re-computes and re-sends every row), for P = 128
 * and 1024, demo model (E = 64, 8 heads), one client, sequential requests over
 * libcurl (a new connection per request for both ways, as tests/common/daemon.c
 * does). Also checks that both ways give the same new row (1e-5).
 * BENCH_SECONDS (default 1.0) is the time per measurement; figures are medians.
 * Complements bench_kvcache (the library alone, E = 256): this one adds the
 * wire, which is where re-sending a prefix hurts most.
 */
#include "benchutil.h"
#include "daemon.h"
#include "sbuf.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E 64
#define MAX_REPS 400

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* POST body to url; the answer's output row `row` into out (E floats) when out is
 * non-NULL. Returns the seconds taken, or -1 on failure. */
static double post(const char *url, const sbuf *body, int expect, int row, float *out)
{
    http_result r = {0};
    int64_t t0 = bench_now_ns();
    int rc = http_do("POST", url, body->p, body->len, NULL, &r);
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    if (rc != 0 || r.status != expect) {
        fprintf(stderr, "bench_sessions: %s -> %ld %.200s\n", url, r.status, r.body ? r.body : "");
        http_result_free(&r);
        return -1;
    }
    if (out) {
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
        json_t *o = json_array_get(json_object_get(j, "output"), (size_t)row);
        for (int k = 0; k < E; k++) out[k] = (float)json_number_value(json_array_get(o, (size_t)k));
        json_decref(j);
    }
    http_result_free(&r);
    return s;
}

/* Prefills a session with P rows, then alternates one-row appends with one-shot
 * causal requests of P + 1 rows (a sliding window of the same stream: constant
 * size) for `seconds`. Medians into *append_s / *resend_s; *diff is the session's
 * last row against a one-shot over the whole stream. Returns the reps, or -1. */
static int measure(const attnd_proc *p, int prefix, double seconds, double *append_s,
                   double *resend_s, double *diff)
{
    uint64_t rng = 0x51ab1e5eed + (uint64_t)prefix;
    int n = prefix + MAX_REPS + 1;
    float *q = malloc((size_t)n * E * sizeof *q);
    for (int i = 0; i < n * E; i++) q[i] = (float)bench_rng_sym(&rng);
    char url[200], id[64];
    sbuf b = {0};
    snprintf(url, sizeof url, "%s/v1/models/demo/sessions", p->base_url);
    http_result r = {0};
    if (http_do("POST", url, "{}", 2, NULL, &r) != 0 || r.status != 201) return -1;
    json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    http_result_free(&r);

    /* Prefill P positions in one append, then one row at a time. */
    snprintf(url, sizeof url, "%s/v1/sessions/%s/append", p->base_url, id);
    sb_printf(&b, "{\"query\":");
    sb_matrix(&b, q, prefix, E);
    sb_printf(&b, "}");
    if (post(url, &b, 200, 0, NULL) < 0) return -1;
    double t_app[MAX_REPS], t_res[MAX_REPS], spent = 0;
    float row_app[E], row_res[E];
    int reps = 0;
    *diff = 0;
    char attn_url[200];
    snprintf(attn_url, sizeof attn_url, "%s/v1/models/demo/attention", p->base_url);
    while (reps < MAX_REPS && (spent < seconds || reps < 5)) {
        int pos = prefix + reps;
        b.len = 0;
        sb_printf(&b, "{\"query\":");
        sb_matrix(&b, q + (size_t)pos * E, 1, E);
        sb_printf(&b, "}");
        t_app[reps] = post(url, &b, 200, 0, row_app);
        /* The no-session way: P + 1 rows, the last one new. */
        b.len = 0;
        sb_printf(&b, "{\"query\":");
        sb_matrix(&b, q + (size_t)reps * E, prefix + 1, E);
        sb_printf(&b, ",\"is_causal\":true}");
        t_res[reps] = post(attn_url, &b, 200, prefix, row_res);
        if (t_app[reps] < 0 || t_res[reps] < 0) return -1;
        spent += t_app[reps] + t_res[reps];
        reps++;
    }
    /* Equality: the session's last row against a one-shot over the whole stream. */
    int total = prefix + reps;
    b.len = 0;
    sb_printf(&b, "{\"query\":");
    sb_matrix(&b, q, total, E);
    sb_printf(&b, ",\"is_causal\":true}");
    if (post(attn_url, &b, 200, total - 1, row_res) < 0) return -1;
    for (int k = 0; k < E; k++) *diff = fmax(*diff, fabs(row_app[k] - row_res[k]));
    qsort(t_app, (size_t)reps, sizeof *t_app, cmp_double);
    qsort(t_res, (size_t)reps, sizeof *t_res, cmp_double);
    *append_s = t_app[reps / 2];
    *resend_s = t_res[reps / 2];
    free(b.p);
    free(q);
    return reps;
}

int main(void)
{
    bench_start("bench_sessions");
    const char *sec = getenv("BENCH_SECONDS");
    double seconds = sec ? atof(sec) : 1.0;
    char bin[256];
    const char *build = getenv("BUILD");
    snprintf(bin, sizeof bin, "%s/attnd", build && *build ? build : "build");
    setenv("ATTND_BIN", bin, 0);
    attnd_proc p;
    if (attnd_proc_start(&p, NULL) != 0) {
        fprintf(stderr, "bench_sessions: attnd did not start\n");
        return 1;
    }
    printf("Streaming through attnd (demo model E=64, 8 heads): one new position per request,\n"
           "median of sequential requests, new connection each, %.1f s per prefix\n", seconds);
    printf("%8s %6s %16s %22s %8s %10s\n", "prefix P", "reps", "append (ms)",
           "re-send P+1 rows (ms)", "ratio", "|diff|");
    int rc = 0;
    static const int prefixes[] = {128, 1024};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        double a, r, d;
        int reps = measure(&p, prefixes[i], seconds, &a, &r, &d);
        if (reps < 0) {
            rc = 1;
            continue;
        }
        printf("%8d %6d %16.3f %22.3f %7.1fx %10.2g\n", prefixes[i], reps, a * 1e3, r * 1e3,
               r / a, d);
        if (!(d <= 1e-5)) {
            fprintf(stderr, "bench_sessions: session and one-shot disagree (%.3g)\n", d);
            rc = 1;
        }
    }
    if (attnd_proc_stop(&p) != 0) rc = 1;
    return rc;
}
