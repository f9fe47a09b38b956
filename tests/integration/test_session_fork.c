/* test_session_fork.c — POST /v1/sessions/{id}/fork and GET /v1/sessions through
 * the real daemon: a fork continues exactly as its parent would (each answer
 * equals one causal request over its own whole sequence), appends to one never
 * change the other's answers, windowed sessions fork too, errors name what is
 * wrong, and the list pages through every session in id order. Pages of
 * 2 KiB hold 4 rows of the demo layer's K and V, so a fork of 9 rows shares
 * two full blocks and a partly filled one: the shared pages count once, and
 * each side's first append copies only that tail page.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#define E 64 /* the demo model */

static attnd_proc proc;

static float val(int seq, int i, int j) { return (float)cos(0.29 * seq + 0.13 * i + 0.05 * j); }

/* rows [from, from + n) of sequence seq as {"query": ...} (plus extra). */
static char *rows_json(int seq, int from, int n, const char *extra)
{
    sbuf b = {0};
    sb_printf(&b, "{\"query\":[");
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < E; j++)
            sb_printf(&b, "%s%.7g", j ? "," : "", val(seq, from + i, j));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]%s}", extra ? extra : "");
    return b.p;
}

static long call(const char *method, const char *path, const char *body, json_t **out)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", proc.base_url, path);
    http_result r;
    if (out)
        *out = NULL;
    if (http_do(method, url, body, body ? strlen(body) : 0, NULL, &r) != 0)
        return -1;
    json_error_t je;
    if (out)
        *out = r.body_len ? json_loads(r.body, 0, &je) : NULL;
    long st = r.status;
    http_result_free(&r);
    return st;
}

static void create(const char *body, char *id)
{
    json_t *j = NULL;
    CHECK_INT_EQ(call("POST", "/v1/models/demo/sessions", body, &j), 201);
    snprintf(id, 64, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
}

/* Appends rows [from, from+n) of sequence seq to session id; returns the last
 * output row (E floats, caller frees). */
static float *append(const char *id, int seq, int from, int n)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s/append", id);
    char *body = rows_json(seq, from, n, NULL);
    json_t *j = NULL;
    CHECK_INT_EQ(call("POST", path, body, &j), 200);
    free(body);
    float *row = calloc(E, sizeof *row);
    json_t *last = json_array_get(json_object_get(j, "output"), (size_t)n - 1);
    for (int k = 0; k < E; k++)
        row[k] = (float)json_number_value(json_array_get(last, (size_t)k));
    json_decref(j);
    return row;
}

/* The last output row of one causal request over rows 0..n-1 of the sequence
 * whose row i is val(seq_of(i), i, .) — seq_a below split, seq_b after. */
static float *one_shot(int seq_a, int split, int seq_b, int n, int window)
{
    sbuf b = {0};
    sb_printf(&b, "{\"query\":[");
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < E; j++)
            sb_printf(&b, "%s%.7g", j ? "," : "", val(i < split ? seq_a : seq_b, i, j));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "],\"is_causal\":true,\"window\":%d}", window);
    json_t *j = NULL;
    CHECK_INT_EQ(call("POST", "/v1/models/demo/attention", b.p, &j), 200);
    free(b.p);
    float *row = calloc(E, sizeof *row);
    json_t *last = json_array_get(json_object_get(j, "output"), (size_t)n - 1);
    for (int k = 0; k < E; k++)
        row[k] = (float)json_number_value(json_array_get(last, (size_t)k));
    json_decref(j);
    return row;
}

static double diff(const float *a, const float *b)
{
    double d = 0;
    for (int k = 0; k < E; k++)
        d = fmax(d, fabs((double)a[k] - (double)b[k]));
    return d;
}

/* An integer member of GET /v1/sessions/{id}, or of a /metrics line (name "m:<series> "). */
static long long session_field(const char *id, const char *field)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s", id);
    json_t *j = NULL;
    long long v = call("GET", path, NULL, &j) == 200 ? json_integer_value(json_object_get(j, field)) : -1;
    json_decref(j);
    return v;
}

static long long kv_cache_bytes(void)
{
    char url[256];
    snprintf(url, sizeof url, "%s/metrics", proc.base_url);
    http_result r;
    long long v = -1;
    if (http_do("GET", url, NULL, 0, NULL, &r) == 0) {
        const char *at = r.body ? strstr(r.body, "\nattnd_kv_cache_bytes ") : NULL;
        if (at) v = strtoll(at + strlen("\nattnd_kv_cache_bytes "), NULL, 10);
        http_result_free(&r);
    }
    return v;
}

/* Parent and child share rows 0..P-1 of sequence 1; then the parent goes on
 * with sequence 1 and the child with sequence 2. */
static void fork_and_diverge(int window)
{
    enum { P = 9, MORE = 4 };
    char parent[64], child[64], path[128], body[32];
    snprintf(body, sizeof body, "{\"window\":%d}", window);
    create(body, parent);
    free(append(parent, 1, 0, P));
    json_t *j = NULL;
    snprintf(path, sizeof path, "/v1/sessions/%s/fork", parent);
    CHECK_INT_EQ(call("POST", path, NULL, &j), 201);
    snprintf(child, sizeof child, "%s", json_string_value(json_object_get(j, "id")));
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "length")), P);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "forked_from")), parent);
    CHECK(strcmp(child, parent) != 0);
    json_decref(j);
    /* 9 rows = 3 pages, all shared, counted once */
    const long long page = 2048, blocks = session_field(parent, "blocks");
    CHECK_INT_EQ(blocks, 3); /* a window drops blocks only when an append needs room */
    CHECK_INT_EQ(session_field(child, "shared_blocks"), blocks);
    CHECK_INT_EQ(kv_cache_bytes(), blocks * page);
    double worst = 0;
    for (int k = 0; k < MORE; k++) { /* interleaved: each append must see only its own past */
        float *c = append(child, 2, P + k, 1), *p = append(parent, 1, P + k, 1);
        float *want_c = one_shot(1, P, 2, P + k + 1, window);
        float *want_p = one_shot(1, P, 1, P + k + 1, window);
        worst = fmax(worst, fmax(diff(c, want_c), diff(p, want_p)));
        CHECK(diff(want_c, want_p) > 1e-4); /* the two streams really differ */
        free(c);
        free(p);
        free(want_c);
        free(want_p);
    }
    printf("fork (window %d): parent and child vs one-shot, max diff %.3g\n", window, worst);
    if (!window) { /* rows 9..12 went into copies of the shared tail page: 3 + 1 pages each, 2 shared */
        CHECK_INT_EQ(session_field(child, "shared_blocks"), 2);
        CHECK_INT_EQ(session_field(child, "blocks"), 4);
        CHECK_INT_EQ(kv_cache_bytes(), (2 + 2 + 2) * page);
    }
    CHECK(worst <= 1e-5);
    snprintf(path, sizeof path, "/v1/sessions/%s", parent);
    CHECK_INT_EQ(call("DELETE", path, NULL, NULL), 204);
    snprintf(path, sizeof path, "/v1/sessions/%s", child);
    CHECK_INT_EQ(call("GET", path, NULL, &j), 200); /* the child outlives its parent */
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "length")), P + MORE);
    json_decref(j);
    CHECK_INT_EQ(call("DELETE", path, NULL, NULL), 204);
}

TEST(fork_continues_like_its_parent) { fork_and_diverge(0); }

TEST(fork_windowed) { fork_and_diverge(4); }

TEST(fork_errors)
{
    char id[64], path[128];
    create("{}", id);
    snprintf(path, sizeof path, "/v1/sessions/%s/fork", id);
    json_t *j = NULL;
    CHECK_INT_EQ(call("POST", path, "{\"window\":3}", &j), 400);
    CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                 "unknown_field");
    json_decref(j);
    CHECK_INT_EQ(call("POST", path, "{}", NULL), 201);
    CHECK_INT_EQ(call("POST", "/v1/sessions/0123456789abcdef0123456789abcdef/fork", NULL, &j),
                 404);
    CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                 "session_not_found");
    json_decref(j);
    CHECK_INT_EQ(call("GET", path, NULL, NULL), 405);
}

TEST(list_pages_in_id_order)
{
    json_t *j = NULL;
    CHECK_INT_EQ(call("GET", "/v1/sessions", NULL, &j), 200);
    int total = (int)json_integer_value(json_object_get(j, "total"));
    json_decref(j);
    for (int i = 0; i < 5; i++) {
        char id[64];
        create("{}", id);
    }
    /* Pages of 2 cover every session once, in increasing id order. */
    char after[64] = "", last[64] = "";
    int seen = 0, pages = 0, ordered = 1;
    for (;;) {
        char path[160];
        snprintf(path, sizeof path, "/v1/sessions?limit=2%s%s", after[0] ? "&after=" : "", after);
        CHECK_INT_EQ(call("GET", path, NULL, &j), 200);
        json_t *list = json_object_get(j, "sessions");
        CHECK_INT_EQ(json_integer_value(json_object_get(j, "total")), total + 5);
        for (size_t k = 0; k < json_array_size(list); k++) {
            const char *id = json_string_value(json_object_get(json_array_get(list, k), "id"));
            ordered &= strcmp(id, last) > 0;
            snprintf(last, sizeof last, "%s", id);
            seen++;
        }
        json_t *next = json_object_get(j, "next");
        pages++;
        if (!json_is_string(next) || pages > 20) {
            json_decref(j);
            break;
        }
        snprintf(after, sizeof after, "%s", json_string_value(next));
        json_decref(j);
    }
    CHECK_INT_EQ(seen, total + 5);
    CHECK(ordered);
    CHECK(pages >= 3);
    CHECK_INT_EQ(call("GET", "/v1/sessions?limit=0", NULL, &j), 400);
    CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"), "field")),
                 "limit");
    json_decref(j);
}

int main(void)
{
    const char *args[] = {"--kv-page-bytes", "2K", NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return check_summary();
    }
    RUN(fork_continues_like_its_parent);
    RUN(fork_windowed);
    RUN(fork_errors);
    RUN(list_pages_in_id_order);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    return check_summary();
}
