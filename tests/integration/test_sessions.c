/* test_sessions.c — streaming sessions through the real daemon: appends step by
 * step equal the one-shot causal (and windowed) request over the whole sequence,
 * weights included; cross sessions equal one-shot cross-attention; eviction under
 * a tiny --kv-cache-bytes, TTL expiry, one append in flight per session (409),
 * many sessions batching together, GET/DELETE, 404/410, bad bodies, limits, API
 * keys, a SIGHUP reload to another model under a live session (which keeps its
 * version), and the metrics that count all this.
 *
 * The reference is POST /v1/models/demo/attention (demo model: E = 64, 8 heads)
 * over the whole sequence, which the library's parity tests tie to PyTorch.
 */
#include "benchutil.h"
#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define E 64
#define TOL 1e-5
#define ID_CAP 96 /* a session id: up to 40 + 1 + 32 characters, and a NUL */

/* ------------------------------------------------------------ text and numbers */

/* A xorshift stream per caller (threads each own one). */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static int rng_int(uint64_t *s, int lo, int hi)
{
    return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

/* rows × E floats in [-1, 1), exactly representable as printed with %.9g. */
static float *rand_rows(uint64_t *s, int rows)
{
    float *m = malloc((size_t)rows * E * sizeof *m);
    for (int i = 0; i < rows * E; i++)
        m[i] = (float)((double)(rng_next(s) >> 11) / 9007199254740992.0 * 2 - 1);
    return m;
}

/* ------------------------------------------------------------ HTTP + JSON */

static const char *err_code(json_t *j)
{
    return json_string_value(json_object_get(json_object_get(j, "error"), "code"));
}
static const char *err_field(json_t *j)
{
    return json_string_value(json_object_get(json_object_get(j, "error"), "field"));
}

/* Creates a session on demo with body; copies its id. Returns the status. */
static long create(const attnd_proc *p, const char *body, char id[ID_CAP])
{
    char url[160];
    long st;
    snprintf(url, sizeof url, "%s/v1/models/demo/sessions", p->base_url);
    json_t *j = attnd_http_json("POST", url, body, &st);
    const char *s = json_string_value(json_object_get(j, "id"));
    snprintf(id, ID_CAP, "%s", s ? s : "");
    if (st != 201)
        fprintf(stderr, "create %s -> %ld %s\n", body, st, err_code(j) ? err_code(j) : "");
    json_decref(j);
    return st;
}

static json_t *append(const attnd_proc *p, const char *id, const float *q, int t, int weights,
                      long *status)
{
    char url[200];
    sbuf b = {0};
    snprintf(url, sizeof url, "%s/v1/sessions/%s/append", p->base_url, id);
    sb_printf(&b, "{\"query\":");
    sb_matrix(&b, q, t, E);
    sb_printf(&b, ",\"need_weights\":%s}", weights ? "true" : "false");
    json_t *j = attnd_http_json("POST", url, b.p, status);
    free(b.p);
    return j;
}

/* Fills dst (rows × cols) from a JSON matrix. Returns 0, or -1 on a shape mismatch. */
static int read_matrix(json_t *m, float *dst, int rows, int cols)
{
    if (!json_is_array(m) || (int)json_array_size(m) != rows) return -1;
    for (int i = 0; i < rows; i++) {
        json_t *row = json_array_get(m, (size_t)i);
        if (!json_is_array(row) || (int)json_array_size(row) != cols) return -1;
        for (int k = 0; k < cols; k++)
            dst[(size_t)i * cols + k] = (float)json_number_value(json_array_get(row, (size_t)k));
    }
    return 0;
}

/* The one-shot answer: output (n × E) and averaged weights (n × s). */
typedef struct oneshot {
    float *out, *w;
    int n, s;
} oneshot;

/* Self (key NULL: is_causal, window) or cross (key/value s rows) over all n queries. */
static int oneshot_run(const attnd_proc *p, const float *q, int n, int window, const float *key,
                       const float *value, int s, oneshot *o)
{
    char url[160];
    sbuf b = {0};
    long st;
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", p->base_url);
    sb_printf(&b, "{\"query\":");
    sb_matrix(&b, q, n, E);
    if (key) {
        sb_printf(&b, ",\"key\":");
        sb_matrix(&b, key, s, E);
        sb_printf(&b, ",\"value\":");
        sb_matrix(&b, value, s, E);
    } else {
        s = n;
        sb_printf(&b, ",\"is_causal\":true,\"window\":%d", window);
    }
    sb_printf(&b, ",\"need_weights\":true}");
    json_t *j = attnd_http_json("POST", url, b.p, &st);
    free(b.p);
    o->n = n;
    o->s = s;
    o->out = malloc((size_t)n * E * sizeof(float));
    o->w = malloc((size_t)n * s * sizeof(float));
    int rc = st == 200 && read_matrix(json_object_get(j, "output"), o->out, n, E) == 0 &&
                     read_matrix(json_object_get(j, "weights"), o->w, n, s) == 0
                 ? 0
                 : -1;
    if (rc) fprintf(stderr, "one-shot failed: %ld\n", st);
    json_decref(j);
    return rc;
}

static void oneshot_free(oneshot *o)
{
    free(o->out);
    free(o->w);
}

/* Largest |output - reference| and |weights - reference| of one append that
 * added rows [pos, pos+t) (self: weights columns are the last `cached`
 * positions; cross: all s memory rows), plus any reference weight a cached
 * column does not cover. -1 on a malformed answer. */
typedef struct diff {
    double out, w;
    int ok;
} diff;

static diff compare_append(json_t *j, const oneshot *ref, int pos, int t, int self)
{
    diff d = {0, 0, 0};
    json_t *sess = json_object_get(j, "session");
    int length = (int)json_integer_value(json_object_get(sess, "length"));
    int cached = (int)json_integer_value(json_object_get(sess, "cached"));
    int cols = self ? cached : ref->s;
    float *out = malloc((size_t)t * E * sizeof(float));
    float *w = malloc((size_t)t * (size_t)(cols > 0 ? cols : 1) * sizeof(float));
    if ((self && (length != pos + t || cached < 1 || cached > length)) ||
        read_matrix(json_object_get(j, "output"), out, t, E) ||
        read_matrix(json_object_get(j, "weights"), w, t, cols)) {
        fprintf(stderr, "bad append answer: length %d (want %d), cached %d\n", length, pos + t,
                cached);
        goto done;
    }
    for (int i = 0; i < t; i++) {
        const float *ro = ref->out + (size_t)(pos + i) * E;
        const float *rw = ref->w + (size_t)(self ? pos + i : pos + i) * ref->s;
        for (int k = 0; k < E; k++) d.out = fmax(d.out, fabs(out[i * E + k] - ro[k]));
        int first = self ? length - cached : 0;
        for (int k = 0; k < ref->s; k++) {
            double got = k >= first && k < first + cols ? w[(size_t)i * cols + (k - first)] : 0.0;
            d.w = fmax(d.w, fabs(got - rw[k]));
        }
    }
    d.ok = 1;
done:
    free(out);
    free(w);
    return d;
}

/* ------------------------------------------------------------ streams */

/* Streams n positions of q into a new self session (window w) in steps from
 * step() and checks every append against the one-shot causal answer. */
static void stream_self(const attnd_proc *p, int n, int window, int fixed_step, uint64_t seed)
{
    uint64_t s = seed;
    float *q = rand_rows(&s, n);
    oneshot ref;
    char id[ID_CAP], body[64];
    CHECK(oneshot_run(p, q, n, window, NULL, NULL, 0, &ref) == 0);
    snprintf(body, sizeof body, "{\"window\":%d}", window);
    CHECK_INT_EQ(create(p, body, id), 201);
    double worst_out = 0, worst_w = 0;
    int appends = 0, bad = 0;
    for (int pos = 0; pos < n;) {
        int t = fixed_step ? fixed_step : rng_int(&s, 1, 9);
        if (t > n - pos) t = n - pos;
        long st;
        json_t *j = append(p, id, q + (size_t)pos * E, t, 1, &st);
        diff d = st == 200 ? compare_append(j, &ref, pos, t, 1) : (diff){0, 0, 0};
        if (!d.ok) {
            bad++;
            fprintf(stderr, "append at %d (t=%d) -> %ld\n", pos, t, st);
        }
        worst_out = fmax(worst_out, d.out);
        worst_w = fmax(worst_w, d.w);
        json_decref(j);
        pos += t;
        appends++;
    }
    printf("self n=%d window=%d step=%d: %d appends, max |out diff| %.3g, max |w diff| %.3g\n",
           n, window, fixed_step, appends, worst_out, worst_w);
    CHECK_INT_EQ(bad, 0);
    CHECK_NEAR(worst_out, 0, TOL);
    CHECK_NEAR(worst_w, 0, TOL);
    oneshot_free(&ref);
    free(q);
}

TEST_WITH(self_streams, const attnd_proc *p)
{
    stream_self(p, 48, 0, 1, 11);
    stream_self(p, 48, 0, 3, 12);
    stream_self(p, 60, 0, 0, 13);
    stream_self(p, 48, 5, 1, 14);
    stream_self(p, 48, 5, 3, 15);
    stream_self(p, 64, 7, 0, 16);
    stream_self(p, 40, 1, 2, 17); /* window 1: each position sees only itself */
}

TEST_WITH(cross, const attnd_proc *p)
{
    uint64_t s = 21;
    int mem = 9, n = 20;
    float *key = rand_rows(&s, mem), *value = rand_rows(&s, mem), *q = rand_rows(&s, n);
    oneshot ref;
    CHECK(oneshot_run(p, q, n, 0, key, value, mem, &ref) == 0);
    sbuf b = {0};
    sb_printf(&b, "{\"key\":");
    sb_matrix(&b, key, mem, E);
    sb_printf(&b, ",\"value\":");
    sb_matrix(&b, value, mem, E);
    sb_printf(&b, "}");
    char id[ID_CAP];
    CHECK_INT_EQ(create(p, b.p, id), 201);
    double worst = 0, worst_w = 0;
    int bad = 0;
    for (int pos = 0; pos < n;) {
        int t = rng_int(&s, 1, 6);
        if (t > n - pos) t = n - pos;
        long st;
        json_t *j = append(p, id, q + (size_t)pos * E, t, 1, &st);
        diff d = st == 200 ? compare_append(j, &ref, pos, t, 0) : (diff){0, 0, 0};
        bad += !d.ok;
        worst = fmax(worst, d.out);
        worst_w = fmax(worst_w, d.w);
        CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(j, "session"), "cached")),
                     mem);
        json_decref(j);
        pos += t;
    }
    printf("cross memory=%d n=%d: max |out diff| %.3g, max |w diff| %.3g\n", mem, n, worst,
           worst_w);
    CHECK_INT_EQ(bad, 0);
    CHECK_NEAR(worst, 0, TOL);
    CHECK_NEAR(worst_w, 0, TOL);
    free(b.p);
    oneshot_free(&ref);
    free(key);
    free(value);
    free(q);
}

/* rows × E numbers of magnitude m, signs alternating. Caller frees. */
static float *big_rows(int rows, float m)
{
    float *x = malloc((size_t)rows * E * sizeof *x);
    for (int i = 0; i < rows * E; i++)
        x[i] = (i + i / E) % 2 ? m : -m;
    return x;
}

/* A cross memory and queries whose magnitudes one-shot cross-attention refuses
 * (413) are refused by a session too, never answered with all-zero weights:
 * keys of 1e20 are a fine memory, but a 1e20 query over it would overflow the
 * scores; keys of 1e38 overflow the projected memory itself (creation, 413 as
 * one-shot, not 500). Small queries over the 1e20 memory still work. */
TEST_WITH(cross_magnitudes, const attnd_proc *p)
{
    float *key = big_rows(3, 1e20f), *q = big_rows(2, 1e20f), *huge = big_rows(3, 1e38f);
    char url[160], code[64] = "";
    long st;
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", p->base_url);
    sbuf one = {0};
    sb_printf(&one, "{\"query\":");
    sb_matrix(&one, q, 2, E);
    sb_printf(&one, ",\"key\":");
    sb_matrix(&one, key, 3, E);
    sb_printf(&one, ",\"need_weights\":true}");
    json_t *j = attnd_http_json("POST", url, one.p, &st);
    CHECK_MSG(st == 413 && err_code(j) && !strcmp(err_code(j), "limit_exceeded"),
              "one-shot with 1e20 query and key: %ld %s", st, err_code(j) ? err_code(j) : "");
    json_decref(j);

    sbuf b = {0};
    sb_printf(&b, "{\"key\":");
    sb_matrix(&b, key, 3, E);
    sb_printf(&b, "}");
    char id[ID_CAP];
    CHECK_INT_EQ(create(p, b.p, id), 201);
    j = append(p, id, q, 2, 1, &st);
    snprintf(code, sizeof code, "%s", err_code(j) ? err_code(j) : "");
    CHECK_MSG(st == 413 && !strcmp(code, "limit_exceeded") && err_field(j) &&
                  !strcmp(err_field(j), "query"),
              "append of 1e20 queries to a 1e20 memory: %ld '%s' (all-zero weights?)", st, code);
    printf("cross session, 1e20 keys, 1e20 queries: append -> %ld %s\n", st, code);
    json_decref(j);
    uint64_t seed = 5;
    float *small = rand_rows(&seed, 2);
    j = append(p, id, small, 2, 1, &st);
    CHECK_INT_EQ(st, 200);
    json_t *w = json_array_get(json_object_get(j, "weights"), 0);
    double sum = 0;
    for (size_t k = 0; k < json_array_size(w); k++)
        sum += json_number_value(json_array_get(w, k));
    CHECK_NEAR(sum, 1.0, 1e-4);
    json_decref(j);

    sbuf h = {0};
    sb_printf(&h, "{\"key\":");
    sb_matrix(&h, huge, 3, E);
    sb_printf(&h, "}");
    snprintf(url, sizeof url, "%s/v1/models/demo/sessions", p->base_url);
    j = attnd_http_json("POST", url, h.p, &st);
    snprintf(code, sizeof code, "%s", err_code(j) ? err_code(j) : "");
    CHECK_MSG(st == 413 && !strcmp(code, "limit_exceeded"), "create with 1e38 keys: %ld '%s'",
              st, code);
    printf("cross session, 1e38 keys: create -> %ld %s\n", st, code);
    json_decref(j);
    free(small);
    free(one.p);
    free(b.p);
    free(h.p);
    free(key);
    free(q);
    free(huge);
}

/* ------------------------------------------------------------ lifecycle and errors */

TEST_WITH(get_delete, const attnd_proc *p)
{
    uint64_t s = 31;
    char id[ID_CAP], url[200];
    long st;
    CHECK_INT_EQ(create(p, "{\"window\":4,\"ttl_s\":30}", id), 201);
    CHECK_INT_EQ(strlen(id), 32);
    float *q = rand_rows(&s, 6);
    json_decref(append(p, id, q, 6, 0, &st));
    CHECK_INT_EQ(st, 200);
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p->base_url, id);
    json_t *j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 200);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "id")), id);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "model")), "demo");
    CHECK_STR_EQ(json_string_value(json_object_get(j, "kind")), "self");
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "length")), 6);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "window")), 4);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "ttl_s")), 30);
    CHECK(json_integer_value(json_object_get(j, "cached")) >= 6);
    CHECK(json_integer_value(json_object_get(j, "bytes")) >= 6 * 2 * E * 4);
    CHECK(json_number_value(json_object_get(j, "idle_s")) >= 0);
    json_decref(j);
    j = attnd_http_json("DELETE", url, NULL, &st);
    CHECK_INT_EQ(st, 204);
    json_decref(j);
    j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 404);
    CHECK_STR_EQ(err_code(j), "session_not_found");
    json_decref(j);
    j = append(p, id, q, 1, 0, &st);
    CHECK_INT_EQ(st, 404);
    json_decref(j);
    j = attnd_http_json("DELETE", url, NULL, &st);
    CHECK_INT_EQ(st, 404);
    json_decref(j);
    /* Unknown ids: well-formed, malformed. */
    snprintf(url, sizeof url, "%s/v1/sessions/0123456789abcdef0123456789abcdef", p->base_url);
    j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 404);
    CHECK_STR_EQ(err_code(j), "session_not_found");
    json_decref(j);
    snprintf(url, sizeof url, "%s/v1/sessions/nope/append", p->base_url);
    j = attnd_http_json("POST", url, "{\"query\":[[1]]}", &st);
    CHECK_INT_EQ(st, 404);
    json_decref(j);
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p->base_url, id);
    j = attnd_http_json("PUT", url, "{}", &st);
    CHECK_INT_EQ(st, 405);
    json_decref(j);
    free(q);
}

static void expect_400(const attnd_proc *p, const char *url, const char *body, const char *field)
{
    long st;
    json_t *j = attnd_http_json("POST", url, body, &st);
    CHECK_MSG(st == 400 && err_field(j) && strcmp(err_field(j), field) == 0,
              "%.80s -> %ld field \"%s\" (want 400 \"%s\")", body, st,
              err_field(j) ? err_field(j) : "", field);
    json_decref(j);
    (void)p;
}

TEST_WITH(bad_bodies, const attnd_proc *p)
{
    char url[200], id[ID_CAP];
    snprintf(url, sizeof url, "%s/v1/models/demo/sessions", p->base_url);
    expect_400(p, url, "{\"window\":-1}", "window");
    expect_400(p, url, "{\"window\":\"3\"}", "window");
    expect_400(p, url, "{\"ttl_s\":0}", "ttl_s");
    expect_400(p, url, "{\"colour\":1}", "colour");
    expect_400(p, url, "{\"key\":[[1,2]]}", "key[0]");
    expect_400(p, url, "{\"key\":[]}", "key");
    expect_400(p, url, "[1]", "");
    expect_400(p, url, "{\"window\":", "");
    sbuf b = {0};
    uint64_t s = 41;
    float *k = rand_rows(&s, 2);
    sb_printf(&b, "{\"window\":3,\"key\":");
    sb_matrix(&b, k, 2, E);
    sb_printf(&b, "}");
    expect_400(p, url, b.p, "window");
    b.len = 0;
    sb_printf(&b, "{\"key\":");
    sb_matrix(&b, k, 2, E);
    sb_printf(&b, ",\"value\":");
    sb_matrix(&b, k, 1, E);
    sb_printf(&b, "}");
    expect_400(p, url, b.p, "value");

    CHECK_INT_EQ(create(p, "{}", id), 201);
    snprintf(url, sizeof url, "%s/v1/sessions/%s/append", p->base_url, id);
    b.len = 0;
    sb_printf(&b, "{\"query\":");
    sb_matrix(&b, k, 1, E);
    sb_printf(&b, ",\"key\":");
    sb_matrix(&b, k, 1, E);
    sb_printf(&b, "}");
    expect_400(p, url, b.p, "key");
    b.len = 0;
    sb_printf(&b, "{\"query\":");
    sb_matrix(&b, k, 1, E);
    sb_printf(&b, ",\"is_causal\":true}");
    expect_400(p, url, b.p, "is_causal");
    expect_400(p, url, "{\"query\":[[1,2,3]]}", "query[0]");
    expect_400(p, url, "{\"query\":[[[1]]]}", "query");
    expect_400(p, url, "{}", "query");
    expect_400(p, url, "{\"query\":[[1]],\"need_weights\":1}", "need_weights");
    /* None of the refused appends moved the session. */
    long st;
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p->base_url, id);
    json_t *j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "length")), 0);
    json_decref(j);
    free(b.p);
    free(k);
}

/* --max-seq-len 64 in this daemon: an unbounded session stops at 64 positions. */
TEST_WITH(length_limit, const attnd_proc *p)
{
    uint64_t s = 51;
    char id[ID_CAP];
    long st;
    float *q = rand_rows(&s, 64);
    CHECK_INT_EQ(create(p, "{}", id), 201);
    json_decref(append(p, id, q, 60, 0, &st));
    CHECK_INT_EQ(st, 200);
    json_t *j = append(p, id, q, 5, 0, &st);
    CHECK_INT_EQ(st, 413);
    CHECK_STR_EQ(err_code(j), "limit_exceeded");
    json_decref(j);
    j = append(p, id, q, 4, 0, &st);
    CHECK_INT_EQ(st, 200);
    CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(j, "session"), "length")), 64);
    json_decref(j);
    /* A windowed session streams past max_seq_len. */
    CHECK_INT_EQ(create(p, "{\"window\":8}", id), 201);
    int fails = 0;
    for (int i = 0; i < 5; i++) {
        json_decref(append(p, id, q, 40, 0, &st));
        fails += st != 200;
    }
    CHECK_INT_EQ(fails, 0);
    free(q);
}

TEST_WITH(ttl, const attnd_proc *p)
{
    uint64_t s = 61;
    char id[ID_CAP], id2[ID_CAP], url[200];
    long st;
    float *q = rand_rows(&s, 2);
    CHECK_INT_EQ(create(p, "{\"ttl_s\":1}", id), 201);
    CHECK_INT_EQ(create(p, "{\"ttl_s\":1}", id2), 201);
    json_decref(append(p, id, q, 2, 0, &st));
    CHECK_INT_EQ(st, 200);
    struct timespec nap = {1, 600 * 1000000L};
    nanosleep(&nap, NULL);
    json_t *j = append(p, id, q, 1, 0, &st); /* on access */
    CHECK_INT_EQ(st, 410);
    CHECK_STR_EQ(err_code(j), "session_expired");
    json_decref(j);
    nanosleep(&nap, NULL); /* the sweep has taken id2 by now (and remembers it) */
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p->base_url, id2);
    j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 410);
    json_decref(j);
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p->base_url, id);
    j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 410);
    json_decref(j);
    free(q);
}

/* ------------------------------------------------------------ metrics */

TEST_WITH(metrics, const attnd_proc *p)
{
    CHECK(attnd_proc_metric(p, "attnd_sessions ") >= 1);
    CHECK(attnd_proc_metric(p, "attnd_kv_cache_bytes ") > 0);
    CHECK(attnd_proc_metric(p, "attnd_session_evictions_total{reason=\"ttl\"} ") >= 2);
    CHECK(attnd_proc_metric(p, "attnd_session_append_duration_seconds_count{model=\"demo\"} ") >= 50);
    CHECK(attnd_proc_metric(p, "attnd_requests_total{model=\"demo\",route=\"/v1/sessions/{id}/append\","
                    "status=\"200\"} ") >= 50);
    CHECK(attnd_proc_metric(p, "attnd_requests_total{model=\"demo\",route=\"/v1/models/{name}/sessions\","
                    "status=\"201\"} ") >= 10);
}

/* ------------------------------------------------------------ eviction */

/* A pool of 3 pages of 4 KiB (8 rows of the demo layer's f32 K and V each):
 * a (9 rows, 2 pages) and b (8 rows, 1 page) fill it; c needs a page, so the
 * least recently used, b, goes (410); a stays correct and grows into the
 * room. */
TEST(eviction)
{
    const char *args[] = {"--kv-cache-bytes", "12K", "--kv-page-bytes", "4K", NULL};
    attnd_proc p;
    if (attnd_proc_start(&p, args) != 0) {
        CHECK(!"daemon with a tiny KV budget started");
        return;
    }
    uint64_t s = 71;
    float *qa = rand_rows(&s, 12), *qb = rand_rows(&s, 8), *qc = rand_rows(&s, 8);
    oneshot ref;
    CHECK(oneshot_run(&p, qa, 12, 0, NULL, NULL, 0, &ref) == 0);
    char a[ID_CAP], b[ID_CAP], c[ID_CAP], url[200];
    long st;
    CHECK_INT_EQ(create(&p, "{}", a), 201);
    CHECK_INT_EQ(create(&p, "{}", b), 201);
    json_t *j = append(&p, a, qa, 8, 1, &st);
    CHECK(st == 200 && compare_append(j, &ref, 0, 8, 1).ok);
    json_decref(j);
    json_decref(append(&p, b, qb, 8, 0, &st));
    CHECK_INT_EQ(st, 200);
    j = append(&p, a, qa + 8 * E, 1, 1, &st); /* a is now the most recently used */
    diff d = st == 200 ? compare_append(j, &ref, 8, 1, 1) : (diff){0, 0, 0};
    CHECK(d.ok);
    json_decref(j);
    CHECK_INT_EQ(create(&p, "{}", c), 201);
    json_decref(append(&p, c, qc, 8, 0, &st)); /* needs room: b goes */
    CHECK_INT_EQ(st, 200);
    j = append(&p, b, qb, 1, 0, &st);
    CHECK_INT_EQ(st, 410);
    CHECK_STR_EQ(err_code(j), "session_expired");
    json_decref(j);
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p.base_url, b);
    j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 410);
    json_decref(j);
    j = append(&p, a, qa + 9 * E, 3, 1, &st);
    d = st == 200 ? compare_append(j, &ref, 9, 3, 1) : (diff){0, 0, 0};
    CHECK(d.ok);
    CHECK_NEAR(d.out, 0, TOL);
    CHECK_NEAR(d.w, 0, TOL);
    json_decref(j);
    CHECK(attnd_proc_metric(&p, "attnd_session_evictions_total{reason=\"lru\"} ") >= 1);
    CHECK_INT_EQ(attnd_proc_metric(&p, "attnd_kv_cache_bytes "), 12 * 1024); /* a: 2 pages, c: 1 */
    CHECK_INT_EQ(attnd_proc_metric(&p, "attnd_kv_cache_capacity_bytes "), 12 * 1024);
    CHECK_INT_EQ(attnd_proc_metric(&p, "attnd_sessions "), 2);
    /* A session that alone would exceed the pool is refused (40 rows = 5
     * pages), without evicting anyone. */
    char d_id[ID_CAP];
    float *qd = rand_rows(&s, 40);
    CHECK_INT_EQ(create(&p, "{}", d_id), 201);
    j = append(&p, d_id, qd, 40, 0, &st);
    CHECK_INT_EQ(st, 413);
    CHECK_STR_EQ(err_code(j), "limit_exceeded");
    json_decref(j);
    CHECK_INT_EQ(attnd_proc_metric(&p, "attnd_sessions "), 3);
    free(qd);
    oneshot_free(&ref);
    free(qa);
    free(qb);
    free(qc);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* A pool of 2 pages (8 rows each) held by session a, whose append sits in a
 * 1.5 s queue delay: b's append needs a page, and the only other session is
 * busy, so b gets 503 kv_cache_full with Retry-After (never a wrong answer);
 * once a's append is answered, b's retry evicts a (then 410). */
typedef struct slow_append {
    const attnd_proc *p;
    const char *id;
    const float *q;
    long status;
} slow_append;

static void *slow_append_main(void *arg)
{
    slow_append *a = arg;
    json_decref(append(a->p, a->id, a->q, 1, 0, &a->status));
    return NULL;
}

TEST(kv_cache_full)
{
    const char *args[] = {"--kv-cache-bytes", "8K", "--kv-page-bytes", "4K", "--max-queue-delay-us",
                          "1500000", NULL};
    attnd_proc p;
    if (attnd_proc_start(&p, args) != 0) {
        CHECK(!"daemon with a 2-page KV pool started");
        return;
    }
    uint64_t s = 91;
    float *q = rand_rows(&s, 10);
    char a[ID_CAP], b[ID_CAP], url[200];
    long st;
    CHECK_INT_EQ(create(&p, "{}", a), 201);
    json_decref(append(&p, a, q, 9, 0, &st)); /* 2 pages */
    CHECK_INT_EQ(st, 200);
    CHECK_INT_EQ(create(&p, "{}", b), 201);
    slow_append sa = {.p = &p, .id = a, .q = q + 9 * E};
    pthread_t th;
    pthread_create(&th, NULL, slow_append_main, &sa);
    attnd_sleep_ms(400); /* a's append is queued: a is busy */
    sbuf body = {0};
    sb_printf(&body, "{\"query\":");
    sb_matrix(&body, q, 1, E);
    sb_printf(&body, "}");
    snprintf(url, sizeof url, "%s/v1/sessions/%s/append", p.base_url, b);
    http_result r = {0};
    CHECK_INT_EQ(http_do("POST", url, body.p, strlen(body.p), NULL, &r), 0);
    CHECK_INT_EQ(r.status, 503);
    CHECK_STR_EQ(r.retry_after, "1");
    CHECK(r.body && strstr(r.body, "\"kv_cache_full\"") != NULL);
    http_result_free(&r);
    pthread_join(th, NULL);
    CHECK_INT_EQ(sa.status, 200); /* the busy session was never touched */
    json_decref(append(&p, b, q, 1, 0, &st)); /* now a is idle: evicted for b */
    CHECK_INT_EQ(st, 200);
    json_t *j = append(&p, a, q, 1, 0, &st);
    CHECK_INT_EQ(st, 410);
    CHECK_STR_EQ(err_code(j), "session_expired");
    json_decref(j);
    free(body.p);
    free(q);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* ------------------------------------------------------------ concurrency */

typedef struct busy_arg {
    const attnd_proc *p;
    const char *id;
    const float *q;
    pthread_barrier_t *go;
    long status;
    char code[40];
} busy_arg;

static void *busy_main(void *arg)
{
    busy_arg *a = arg;
    pthread_barrier_wait(a->go);
    json_t *j = append(a->p, a->id, a->q, 4, 0, &a->status);
    snprintf(a->code, sizeof a->code, "%s", err_code(j) ? err_code(j) : "");
    json_decref(j);
    return NULL;
}

/* With --max-queue-delay-us 500000 the first append waits in the queue while
 * the others arrive: exactly one is computed, the rest get 409 session_busy. */
TEST_WITH(one_in_flight, const attnd_proc *p)
{
    enum { N = 6 };
    uint64_t s = 81;
    float *q = rand_rows(&s, 4);
    char id[ID_CAP], url[200];
    CHECK_INT_EQ(create(p, "{}", id), 201);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N);
    busy_arg args[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        args[i] = (busy_arg){.p = p, .id = id, .q = q, .go = &go};
        pthread_create(&th[i], NULL, busy_main, &args[i]);
    }
    int ok = 0, busy = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        ok += args[i].status == 200;
        busy += args[i].status == 409 && strcmp(args[i].code, "session_busy") == 0;
    }
    pthread_barrier_destroy(&go);
    printf("one session, %d concurrent appends: %d x 200, %d x 409\n", N, ok, busy);
    CHECK_INT_EQ(ok, 1);
    CHECK_INT_EQ(busy, N - 1);
    long st;
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p->base_url, id);
    json_t *j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "length")), 4);
    json_decref(j);
    free(q);
}

/* Same daemon (500 ms queue delay): an append whose timeout_ms passes in the
 * queue is never computed (504) and the session does not move. */
TEST_WITH(timeout_keeps_length, const attnd_proc *p)
{
    uint64_t s = 85;
    float *q = rand_rows(&s, 3);
    char id[ID_CAP], url[200];
    long st;
    CHECK_INT_EQ(create(p, "{}", id), 201);
    snprintf(url, sizeof url, "%s/v1/sessions/%s/append", p->base_url, id);
    sbuf b = {0};
    sb_printf(&b, "{\"query\":");
    sb_matrix(&b, q, 3, E);
    sb_printf(&b, ",\"timeout_ms\":20}");
    json_t *j = attnd_http_json("POST", url, b.p, &st);
    CHECK_INT_EQ(st, 504);
    CHECK_STR_EQ(err_code(j), "timeout");
    json_decref(j);
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p->base_url, id);
    j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "length")), 0);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "cached")), 0);
    CHECK(json_is_false(json_object_get(j, "busy")));
    json_decref(j);
    j = append(p, id, q, 3, 0, &st); /* and the next append works from position 0 */
    CHECK_INT_EQ(st, 200);
    CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(j, "session"), "length")), 3);
    json_decref(j);
    free(b.p);
    free(q);
}

/* With API keys configured, session routes need one like every /v1 route. */
TEST(auth)
{
    const char *args[] = {"--api-keys", "sekrit-key-1", NULL};
    attnd_proc p;
    if (attnd_proc_start(&p, args) != 0) {
        CHECK(!"daemon with API keys started");
        return;
    }
    char url[200];
    const char *key[] = {"Authorization: Bearer sekrit-key-1", NULL};
    http_result r = {0};
    snprintf(url, sizeof url, "%s/v1/models/demo/sessions", p.base_url);
    CHECK(http_do("POST", url, "{}", 2, NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 401);
    http_result_free(&r);
    CHECK(http_do_ex("POST", url, "{}", 2, NULL, key, NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 201);
    json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p.base_url,
             json_string_value(json_object_get(j, "id")));
    json_decref(j);
    http_result_free(&r);
    CHECK(http_do("GET", url, NULL, 0, NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 401);
    http_result_free(&r);
    CHECK(http_do("DELETE", url, NULL, 0, NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 401);
    http_result_free(&r);
    CHECK(http_do_ex("GET", url, NULL, 0, NULL, key, NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    http_result_free(&r);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

typedef struct many_arg {
    const attnd_proc *p;
    uint64_t seed;
    int n;
    int window;
    int bad;
    int max_batch;
    double worst;
} many_arg;

static void *many_main(void *arg)
{
    many_arg *a = arg;
    uint64_t s = a->seed;
    float *q = rand_rows(&s, a->n);
    oneshot ref;
    char id[ID_CAP], body[40];
    snprintf(body, sizeof body, "{\"window\":%d}", a->window);
    if (oneshot_run(a->p, q, a->n, a->window, NULL, NULL, 0, &ref) != 0 ||
        create(a->p, body, id) != 201) {
        a->bad++;
        free(q);
        return NULL;
    }
    for (int pos = 0; pos < a->n;) {
        int t = rng_int(&s, 1, 4);
        if (t > a->n - pos) t = a->n - pos;
        long st;
        json_t *j = append(a->p, id, q + (size_t)pos * E, t, 1, &st);
        diff d = st == 200 ? compare_append(j, &ref, pos, t, 1) : (diff){0, 0, 0};
        if (!d.ok) a->bad++;
        a->worst = fmax(a->worst, fmax(d.out, d.w));
        int bs = (int)json_integer_value(
            json_object_get(json_object_get(j, "timing"), "batch_size"));
        if (bs > a->max_batch) a->max_batch = bs;
        json_decref(j);
        pos += t;
    }
    oneshot_free(&ref);
    free(q);
    return NULL;
}

/* 64 streams at once, on pages of 4 rows, windowed and not: every append of
 * every stream equals its one-shot causal answer, and appends batch. */
TEST_WITH(many_sessions, const attnd_proc *p)
{
    enum { N = 64 };
    many_arg args[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        args[i] = (many_arg){.p = p, .seed = 1000 + (uint64_t)i, .n = 14 + i % 8,
                             .window = i % 2 ? 4 + i % 3 : 0};
        pthread_create(&th[i], NULL, many_main, &args[i]);
    }
    int bad = 0, max_batch = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        bad += args[i].bad;
        worst = fmax(worst, args[i].worst);
        if (args[i].max_batch > max_batch) max_batch = args[i].max_batch;
    }
    printf("%d sessions appending at once: max |diff| %.3g, largest batch %d\n", N, worst,
           max_batch);
    CHECK_INT_EQ(bad, 0);
    CHECK_NEAR(worst, 0, TOL);
    CHECK(max_batch > 1);
}

/* Points the config file at model path (the file is rewritten in place). */
static int write_config(const char *cfg, const char *model)
{
    FILE *f = fopen(cfg, "w");
    if (!f) return -1;
    fprintf(f, "{\"models\": [{\"name\": \"demo\", \"path\": \"%s\"}], "
               "\"max_seq_len\": 64}\n", model);
    return fclose(f);
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

/* A reload (SIGHUP) that swaps demo for a different model file: a live session
 * keeps the version it was created on (and its answers), new sessions and
 * one-shot requests get the new one. */
TEST(reload_keeps_version)
{
    char dir[] = "/tmp/attnd-sessions-XXXXXX", cfg[128], other[128];
    uint64_t rng = 0x5eed5eed;
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    snprintf(cfg, sizeof cfg, "%s/attnd.json", dir);
    snprintf(other, sizeof other, "%s/other.safetensors", dir);
    char demo[4096];
    CHECK(realpath("config/demo.safetensors", demo) != NULL);
    CHECK(bench_write_mha_model(other, E, 8, &rng) == 0);
    CHECK(write_config(cfg, demo) == 0);
    const char *args[] = {"--config", cfg, NULL};
    attnd_proc p;
    if (attnd_proc_start(&p, args) != 0) {
        CHECK(!"daemon with a config file started");
        return;
    }
    uint64_t s = 91;
    float *q = rand_rows(&s, 10);
    oneshot before, after;
    char id[ID_CAP], id2[ID_CAP];
    long st;
    CHECK(oneshot_run(&p, q, 10, 0, NULL, NULL, 0, &before) == 0);
    CHECK_INT_EQ(create(&p, "{}", id), 201);
    json_decref(append(&p, id, q, 5, 0, &st));
    CHECK_INT_EQ(st, 200);

    CHECK(write_config(cfg, other) == 0);
    double reloads = attnd_proc_metric(&p, "attnd_reloads_total{result=\"ok\"} ");
    kill(p.pid, SIGHUP);
    for (int i = 0; i < 150 && attnd_proc_metric(&p, "attnd_reloads_total{result=\"ok\"} ") <= reloads; i++) {
        struct timespec nap = {0, 20 * 1000000L};
        nanosleep(&nap, NULL);
    }
    CHECK(attnd_proc_metric(&p, "attnd_reloads_total{result=\"ok\"} ") > reloads);
    CHECK(oneshot_run(&p, q, 10, 0, NULL, NULL, 0, &after) == 0);
    double changed = max_diff(before.out, after.out, (size_t)10 * E);
    printf("reload: one-shot output moved by %.3g (a different model now)\n", changed);
    CHECK(changed > 1e-3);

    json_t *j = append(&p, id, q + 5 * E, 5, 1, &st); /* the old version, still */
    diff d = st == 200 ? compare_append(j, &before, 5, 5, 1) : (diff){0, 0, 0};
    CHECK(d.ok);
    CHECK_NEAR(d.out, 0, TOL);
    CHECK_NEAR(d.w, 0, TOL);
    json_decref(j);
    CHECK_INT_EQ(create(&p, "{}", id2), 201); /* a new session: the new version */
    j = append(&p, id2, q, 10, 1, &st);
    d = st == 200 ? compare_append(j, &after, 0, 10, 1) : (diff){0, 0, 0};
    CHECK(d.ok);
    CHECK_NEAR(d.out, 0, TOL);
    json_decref(j);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    oneshot_free(&before);
    oneshot_free(&after);
    free(q);
    unlink(cfg);
    unlink(other);
    rmdir(dir);
}

/* 1 when id is prefix then exactly 32 lowercase hex digits. */
static int id_has_form(const char *id, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(id, prefix, n) != 0 || strlen(id) != n + 32) return 0;
    return strspn(id + n, "0123456789abcdef") == 32;
}

/* GET /v1/sessions/{id} (path given as is): the status, and the error code in code. */
static long get_status(const attnd_proc *p, const char *id, char code[64])
{
    char url[400];
    long st;
    snprintf(url, sizeof url, "%s/v1/sessions/%s", p->base_url, id);
    json_t *j = attnd_http_json("GET", url, NULL, &st);
    snprintf(code, 64, "%s", err_code(j) ? err_code(j) : "");
    json_decref(j);
    return st;
}

/* --replica-name NAME: every id the replica makes, forks and list cursors included,
 * is NAME.<32 hex>; streams on those ids still equal the one-shot answer; an id
 * without the prefix, another replica's, or a malformed one is 404; an evicted one
 * is 410 (the tombstone holds the whole id); /healthz names the replica. */
static void replica_ids(const char *name)
{
    char max_sessions[] = "3";
    const char *args[] = {"--max-seq-len", "64", "--replica-name", name, "--max-sessions",
                          max_sessions, NULL};
    attnd_proc p;
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "attnd --replica-name %s did not start", name);
        return;
    }
    char prefix[64], id[ID_CAP], other[ID_CAP + 8], code[64], url[300];
    long st;
    snprintf(prefix, sizeof prefix, "%s.", name);
    CHECK_INT_EQ(create(&p, "{}", id), 201);
    CHECK_MSG(id_has_form(id, prefix), "id %s lacks the form %s<32 hex>", id, prefix);
    stream_self(&p, 24, 0, 3, 41); /* one session streamed to its end, against one-shot */

    snprintf(url, sizeof url, "%s/v1/sessions/%s/fork", p.base_url, id);
    json_t *j = attnd_http_json("POST", url, "{}", &st);
    CHECK_INT_EQ(st, 201);
    const char *child = json_string_value(json_object_get(j, "id"));
    CHECK_MSG(child && id_has_form(child, prefix), "fork id %s", child ? child : "(none)");
    CHECK_STR_EQ(json_string_value(json_object_get(j, "forked_from")), id);
    json_decref(j);

    /* The list: every id prefixed, and a prefixed id works as the cursor. */
    snprintf(url, sizeof url, "%s/v1/sessions?limit=1", p.base_url);
    j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 200);
    const char *next = json_string_value(json_object_get(j, "next"));
    CHECK(next && id_has_form(next, prefix));
    snprintf(url, sizeof url, "%s/v1/sessions?limit=10&after=%s", p.base_url, next ? next : "");
    json_decref(j);
    j = attnd_http_json("GET", url, NULL, &st);
    CHECK_INT_EQ(st, 200);
    json_t *list = json_object_get(j, "sessions");
    CHECK_INT_EQ(json_array_size(list), 2); /* 3 sessions, the first page held one */
    for (size_t i = 0; i < json_array_size(list); i++)
        CHECK(id_has_form(json_string_value(json_object_get(json_array_get(list, i), "id")),
                          prefix));
    json_decref(j);

    /* Not this replica's ids: 404 session_not_found, as any unknown id. */
    CHECK_INT_EQ(get_status(&p, id, code), 200);
    CHECK_INT_EQ(get_status(&p, id + strlen(prefix), code), 404); /* the bare hex */
    CHECK_STR_EQ(code, "session_not_found");
    snprintf(other, sizeof other, "x%s", id); /* another replica's name */
    CHECK_INT_EQ(get_status(&p, other, code), 404);
    CHECK_STR_EQ(code, "session_not_found");
    snprintf(other, sizeof other, "%s0", id); /* 33 hex digits */
    CHECK_INT_EQ(get_status(&p, other, code), 404);
    snprintf(other, sizeof other, "%.*sG", (int)strlen(id) - 1, id); /* not hex */
    CHECK_INT_EQ(get_status(&p, other, code), 404);
    snprintf(other, sizeof other, "%.40s.%.40s", name, prefix); /* NAME.NAME. */
    CHECK_INT_EQ(get_status(&p, other, code), 404);
    char longer[300];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    memcpy(longer, prefix, strlen(prefix)); /* prefix + 250 hex digits: truncation cannot fit */
    CHECK_INT_EQ(get_status(&p, longer, code), 404);
    CHECK_STR_EQ(code, "session_not_found");

    /* Eviction (--max-sessions 3): the oldest session's whole id is remembered. */
    char fresh[ID_CAP];
    CHECK_INT_EQ(create(&p, "{}", fresh), 201);
    CHECK_INT_EQ(create(&p, "{}", fresh), 201);
    int gone = get_status(&p, id, code) == 410 && strcmp(code, "session_expired") == 0;
    CHECK_MSG(gone, "the evicted %s answers %s (want 410 session_expired)", id, code);

    http_result r;
    snprintf(url, sizeof url, "%s/healthz", p.base_url);
    CHECK(http_do("GET", url, NULL, 0, NULL, &r) == 0);
    json_t *h = r.body ? json_loads(r.body, 0, NULL) : NULL;
    CHECK_STR_EQ(json_string_value(json_object_get(h, "replica")), name);
    json_decref(h);
    http_result_free(&r);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);
}

TEST(replica_name)
{
    replica_ids("r1");
    replica_ids("a234567890123456789012345678901234567-z9"); /* the longest: 40 */
}

int main(void)
{
    attnd_proc p;
    /* Pages of 2 KiB: 4 rows of the demo layer's K and V, so every stream
     * below crosses many block boundaries. */
    const char *args[] = {"--max-seq-len", "64", "--kv-page-bytes", "2K", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK(!"daemon started");
        return check_summary();
    }
    RUN_WITH(self_streams, &p);
    RUN_WITH(cross, &p);
    RUN_WITH(cross_magnitudes, &p);
    RUN_WITH(get_delete, &p);
    RUN_WITH(bad_bodies, &p);
    RUN_WITH(length_limit, &p);
    RUN_WITH(ttl, &p);
    RUN_WITH(metrics, &p);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);

    RUN(eviction);
    RUN(kv_cache_full);
    RUN(auth);
    RUN(reload_keeps_version);
    RUN(replica_name);

    const char *batching[] = {"--max-queue-delay-us", "500000", NULL};
    if (attnd_proc_start(&p, batching) == 0) {
        RUN_WITH(one_in_flight, &p);
        RUN_WITH(timeout_keeps_length, &p);
        CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    } else {
        CHECK(!"daemon with a queue delay started");
    }
    const char *many[] = {"--max-queue-delay-us", "20000", "--kv-page-bytes", "2K", NULL};
    if (attnd_proc_start(&p, many) == 0) {
        RUN_WITH(many_sessions, &p);
        CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    } else {
        CHECK(!"daemon for many sessions started");
    }
    return check_summary();
}
