/* test_daemon_errors.c — every error attnd answers, through the real daemon:
 * status, code and field for each, the headers that go with them (Allow,
 * Retry-After), raw-socket cases curl will not produce (411, chunked bodies,
 * an announced 413), overload (503 queue_full) and deadlines (504), and that
 * the daemon keeps serving correct requests after each.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"

static attnd_proc proc;

/* A valid one-sequence body with T rows of 64 numbers; the caller frees. */
static char *query_body(int T, const char *extra)
{
    size_t cap = (size_t)T * 64 * 8 + 256;
    char *b = malloc(cap);
    size_t n = (size_t)snprintf(b, cap, "{\"query\": [");
    for (int t = 0; t < T; t++) {
        n += (size_t)snprintf(b + n, cap - n, "%s[", t ? "," : "");
        for (int e = 0; e < 64; e++)
            n += (size_t)snprintf(b + n, cap - n, "%s%.2f", e ? "," : "", (t * 64 + e) % 7 * 0.1);
        n += (size_t)snprintf(b + n, cap - n, "]");
    }
    snprintf(b + n, cap - n, "]%s}", extra ? extra : "");
    return b;
}

/* One request; checks status, error code and field ("" = not checked when
 * NULL). Returns the parsed body (caller decrefs) or NULL. */
static json_t *expect(const char *what, const char *method, const char *path, const char *body,
                      const char *ctype, long status, const char *code, const char *field)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", proc.base_url, path);
    http_result r;
    if (http_do(method, url, body, body ? strlen(body) : 0, ctype, &r) != 0) {
        CHECK_MSG(0, "%s: no response", what);
        return NULL;
    }
    CHECK_MSG(r.status == status, "%s: status %ld, want %ld (%s)", what, r.status, status,
              r.body);
    CHECK_MSG(strcmp(r.content_type, "application/json") == 0, "%s: content type '%s'", what,
              r.content_type);
    json_t *j = json_loads(r.body, 0, NULL);
    json_t *e = json_object_get(j, "error");
    if (code) {
        CHECK_MSG(json_is_string(json_object_get(e, "code")) &&
                      strcmp(json_string_value(json_object_get(e, "code")), code) == 0,
                  "%s: body %s, want code %s", what, r.body, code);
        CHECK_MSG(json_is_string(json_object_get(e, "message")) &&
                      json_string_length(json_object_get(e, "message")) > 0,
                  "%s: no message", what);
    }
    if (field)
        CHECK_MSG(json_is_string(json_object_get(e, "field")) &&
                      strcmp(json_string_value(json_object_get(e, "field")), field) == 0,
                  "%s: body %s, want field %s", what, r.body, field);
    if (status == 405)
        CHECK_MSG(r.allow[0] != '\0', "%s: 405 without Allow", what);
    if (status == 503)
        CHECK_MSG(strcmp(r.retry_after, "1") == 0, "%s: Retry-After '%s'", what, r.retry_after);
    http_result_free(&r);
    return j;
}

/* The daemon still answers health and a correct request. */
static void still_serving(const char *after)
{
    char url[256];
    http_result r;
    snprintf(url, sizeof url, "%s/healthz", proc.base_url);
    CHECK_MSG(http_do("GET", url, NULL, 0, NULL, &r) == 0 && r.status == 200,
              "healthz after %s", after);
    http_result_free(&r);
    char *body = query_body(2, NULL);
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", proc.base_url);
    CHECK_MSG(http_do("POST", url, body, strlen(body), NULL, &r) == 0 && r.status == 200,
              "attention after %s: %ld", after, r.status);
    http_result_free(&r);
    free(body);
}

TEST(json_errors)
{
    const char *path = "/v1/models/demo/attention";
    json_t *j = expect("invalid_json", "POST", path, "{\n  \"query\": [\n    [1, 2,]\n}", NULL,
                       400, "invalid_json", "");
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    CHECK_MSG(msg && strstr(msg, "line 3") && strstr(msg, "column"),
              "invalid_json message lacks line/column: %s", msg ? msg : "(null)");
    json_decref(j);
    still_serving("invalid_json");

    char *b = query_body(2, ", \"need_weight\": true");
    json_decref(expect("unknown_field", "POST", path, b, NULL, 400, "unknown_field",
                       "need_weight"));
    free(b);
    still_serving("unknown_field");

    b = query_body(3, NULL);
    char *row1 = strstr(strstr(b, "],[") + 3, "],[") + 3; /* start of row 2 */
    char *comma = strchr(row1, ',');
    memmove(row1, comma + 1, strlen(comma + 1) + 1); /* row 2 loses one number */
    json_decref(expect("invalid_shape", "POST", path, b, NULL, 400, "invalid_shape", "query[2]"));
    free(b);
    /* batched: sequence 1, row 3 has 63 numbers */
    b = malloc(64 * 1024);
    size_t n = (size_t)snprintf(b, 64 * 1024, "{\"query\": [[");
    for (int t = 0; t < 2; t++) {
        n += (size_t)snprintf(b + n, 64 * 1024 - n, "%s[", t ? "," : "");
        for (int e = 0; e < 64; e++)
            n += (size_t)snprintf(b + n, 64 * 1024 - n, "%s0.5", e ? "," : "");
        n += (size_t)snprintf(b + n, 64 * 1024 - n, "]");
    }
    n += (size_t)snprintf(b + n, 64 * 1024 - n, "],[");
    for (int t = 0; t < 4; t++) {
        n += (size_t)snprintf(b + n, 64 * 1024 - n, "%s[", t ? "," : "");
        for (int e = 0; e < (t == 3 ? 63 : 64); e++)
            n += (size_t)snprintf(b + n, 64 * 1024 - n, "%s0.25", e ? "," : "");
        n += (size_t)snprintf(b + n, 64 * 1024 - n, "]");
    }
    snprintf(b + n, 64 * 1024 - n, "]]}");
    json_decref(expect("invalid_shape batched", "POST", path, b, NULL, 400, "invalid_shape",
                       "query[1][3]"));
    free(b);
    still_serving("invalid_shape");

    b = query_body(1, NULL);
    char *five = b + strlen("{\"query\": [[");
    for (int i = 0; i < 5; i++)
        five = strchr(five, ',') + 1;
    char *end = strchr(five, ',');
    char *nb = malloc(strlen(b) + 16);
    sprintf(nb, "%.*s1e39%s", (int)(five - b), b, end);
    json_decref(expect("non_finite", "POST", path, nb, NULL, 400, "non_finite", "query[0][5]"));
    free(nb);
    free(b);
    still_serving("non_finite");

    json_decref(expect("duplicate_field", "POST", path, "{\"query\": [[1]], \"query\": [[2]]}",
                       NULL, 400, "duplicate_field", NULL));
    json_decref(expect("invalid_type", "POST", path, "{\"query\": \"abc\"}", NULL, 400,
                       "invalid_type", "query"));
    b = query_body(2, ", \"window\": -1");
    json_decref(expect("invalid_value", "POST", path, b, NULL, 400, "invalid_value", "window"));
    free(b);
    b = query_body(17, NULL); /* --max-seq-len 16 */
    json_decref(expect("limit_exceeded", "POST", path, b, NULL, 413, "limit_exceeded", NULL));
    free(b);
    still_serving("400s");
}

TEST(route_errors)
{
    char *b = query_body(2, NULL);
    json_decref(expect("unknown model", "POST", "/v1/models/nope/attention", b, NULL, 404,
                       "model_not_found", NULL));
    json_decref(expect("unknown model info", "GET", "/v1/models/nope", NULL, NULL, 404,
                       "model_not_found", NULL));
    json_decref(expect("unknown route", "GET", "/v2/nothing", NULL, NULL, 404, "not_found", ""));
    json_decref(expect("unknown route under models", "GET", "/v1/models/demo/x", NULL, NULL, 404,
                       "not_found", ""));
    still_serving("404");

    char url[256];
    http_result r;
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", proc.base_url);
    CHECK(http_do("GET", url, NULL, 0, NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 405);
    CHECK_STR_EQ(r.allow, "POST");
    CHECK(strstr(r.body, "\"method_not_allowed\"") != NULL);
    http_result_free(&r);
    snprintf(url, sizeof url, "%s/healthz", proc.base_url);
    CHECK(http_do("POST", url, b, strlen(b), NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 405);
    CHECK(strstr(r.allow, "GET") != NULL);
    http_result_free(&r);
    json_decref(expect("DELETE models", "DELETE", "/v1/models", NULL, NULL, 405,
                       "method_not_allowed", ""));
    still_serving("405");

    json_decref(expect("415 text/plain", "POST", "/v1/models/demo/attention", b, "text/plain",
                       415, "unsupported_media_type", ""));
    json_decref(expect("415 json-ish", "POST", "/v1/models/demo/attention", b,
                       "application/jsonx", 415, "unsupported_media_type", ""));
    json_decref(expect("charset allowed", "POST", "/v1/models/demo/attention", b,
                       "application/json; charset=utf-8", 200, NULL, NULL));
    still_serving("415");
    free(b);
}

/* A raw chunked POST of body to the demo model, in chunks of `chunk` bytes.
 * Returns the malloc'd request and its length in *len. */
static char *chunked_post(const char *body, size_t blen, size_t chunk, size_t *len)
{
    size_t cap = blen + (blen / chunk + 2) * 16 + 256, n;
    char *req = malloc(cap);
    n = (size_t)snprintf(req, cap, "POST /v1/models/demo/attention HTTP/1.1\r\nHost: t\r\n"
                                   "Content-Type: application/json\r\nTransfer-Encoding: chunked"
                                   "\r\nConnection: close\r\n\r\n");
    for (size_t off = 0; off < blen; off += chunk) {
        size_t k = blen - off < chunk ? blen - off : chunk;
        n += (size_t)snprintf(req + n, cap - n, "%zx\r\n%.*s\r\n", k, (int)k, body + off);
    }
    n += (size_t)snprintf(req + n, cap - n, "0\r\n\r\n");
    *len = n;
    return req;
}

/* Raw HTTP for what curl will not send. */
TEST(raw)
{
    static const char no_len[] = "POST /v1/models/demo/attention HTTP/1.1\r\nHost: t\r\n"
                                 "Content-Type: application/json\r\nConnection: close\r\n\r\n";
    char *reply = http_raw(proc.port, no_len, strlen(no_len), 3000);
    CHECK_INT_EQ(http_raw_status(reply), 411);
    CHECK(reply && strstr(reply, "\"length_required\""));
    free(reply);

    /* Announced too large: answered from the headers alone, body never read. */
    static const char big[] = "POST /v1/models/demo/attention HTTP/1.1\r\nHost: t\r\n"
                              "Content-Type: application/json\r\n"
                              "Content-Length: 100000000\r\n\r\n";
    reply = http_raw(proc.port, big, strlen(big), 3000);
    CHECK_INT_EQ(http_raw_status(reply), 413);
    CHECK(reply && strstr(reply, "\"body_too_large\""));
    free(reply);

    /* A chunked body is fine... */
    char *body = query_body(2, NULL);
    size_t n;
    char *req = chunked_post(body, strlen(body), 100, &n);
    reply = http_raw(proc.port, req, n, 3000);
    CHECK_INT_EQ(http_raw_status(reply), 200);
    CHECK(reply && strstr(reply, "\"output\""));
    free(reply);
    free(req);
    free(body);

    /* ...until it grows past --max-body-bytes (32768 here). */
    body = malloc(40001);
    memset(body, ' ', 40000);
    body[40000] = '\0';
    req = chunked_post(body, 40000, 1000, &n);
    reply = http_raw(proc.port, req, n, 3000);
    CHECK_INT_EQ(http_raw_status(reply), 413);
    CHECK(reply && strstr(reply, "\"body_too_large\""));
    free(reply);
    free(req);
    still_serving("raw requests");

    /* A chunked body that never ends is cut off after another max_body_bytes. */
    char *endless = malloc(100000);
    memset(endless, ' ', 100000);
    req = chunked_post(endless, 100000, 1000, &n);
    free(endless);
    n -= 5; /* no terminating 0-chunk: the client is still sending */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    reply = http_raw(proc.port, req, n, 4000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    CHECK_MSG(secs < 3.0, "endless chunked body: connection open for %.1f s", secs);
    CHECK(http_raw_status(reply) != 200);
    free(reply);
    free(req);
    still_serving("endless chunked body");

    /* curl with a real over-limit body (Content-Length known). */
    char url[256];
    http_result r;
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", proc.base_url);
    int got = http_do("POST", url, body, 40000, NULL, &r);
    CHECK_MSG(got == 0 && r.status == 413, "413 via curl: %d %ld", got, r.status);
    if (got == 0)
        http_result_free(&r);
    free(body);
    still_serving("413");
}

/* ------------------------------------------------------------ overload */

typedef struct shot {
    const char *url;
    const char *body;
    long status;
    char retry_after[32];
    char code[40];
} shot;

static void *fire(void *arg)
{
    shot *s = arg;
    http_result r;
    s->status = -1;
    if (http_do("POST", s->url, s->body, strlen(s->body), NULL, &r) == 0) {
        s->status = r.status;
        snprintf(s->retry_after, sizeof s->retry_after, "%s", r.retry_after);
        json_t *j = json_loads(r.body, 0, NULL);
        const char *c = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
        snprintf(s->code, sizeof s->code, "%s", c ? c : "");
        json_decref(j);
        http_result_free(&r);
    }
    return NULL;
}

/* A daemon whose batches wait 1 s and whose queue holds 2: of 5 concurrent
 * requests 2 are answered (200) and 3 refused at once (503 queue_full); a
 * request with timeout_ms 50 in such a queue gets 504. */
TEST(overload)
{
    attnd_proc slow;
    const char *args[] = {"--max-queue", "2", "--max-queue-delay-us", "1000000",
                          "--max-batch-requests", "64", "--workers", "1", NULL};
    if (attnd_proc_start(&slow, args) != 0) {
        CHECK_MSG(0, "slow attnd did not start");
        return;
    }
    char url[256];
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", slow.base_url);
    char *body = query_body(2, NULL);
    shot shots[5];
    pthread_t th[5];
    for (int i = 0; i < 5; i++) {
        shots[i] = (shot){.url = url, .body = body};
        pthread_create(&th[i], NULL, fire, &shots[i]);
    }
    int ok = 0, full = 0;
    for (int i = 0; i < 5; i++) {
        pthread_join(th[i], NULL);
        ok += shots[i].status == 200;
        if (shots[i].status == 503) {
            full++;
            CHECK_STR_EQ(shots[i].code, "queue_full");
            CHECK_STR_EQ(shots[i].retry_after, "1");
        }
    }
    CHECK_INT_EQ(ok, 2);
    CHECK_INT_EQ(full, 3);

    char *tbody = query_body(2, ", \"timeout_ms\": 50");
    shot t = {.url = url, .body = tbody};
    fire(&t);
    CHECK_INT_EQ(t.status, 504);
    CHECK_STR_EQ(t.code, "timeout");
    /* and it still computes what has no deadline */
    shot after = {.url = url, .body = body};
    fire(&after);
    CHECK_INT_EQ(after.status, 200);
    free(tbody);
    free(body);
    CHECK_INT_EQ(attnd_proc_stop(&slow), 0);
    unlink(slow.log_path);
}

/* Two models and no default: /v1/attention cannot choose. */
TEST(ambiguous_default)
{
    attnd_proc two;
    const char *model = getenv("ATTND_DEMO_MODEL") ? getenv("ATTND_DEMO_MODEL")
                                                   : "config/demo.safetensors";
    char a[512], b2[512];
    snprintf(a, sizeof a, "a=%s", model);
    snprintf(b2, sizeof b2, "b=%s,heads=4", model);
    const char *args[] = {"--model", a, "--model", b2, NULL};
    if (attnd_proc_start(&two, args) != 0) {
        CHECK_MSG(0, "two-model attnd did not start");
        return;
    }
    attnd_proc saved = proc;
    proc = two;
    char *body = query_body(2, NULL);
    json_decref(expect("ambiguous default", "POST", "/v1/attention", body, NULL, 404,
                       "model_not_found", NULL));
    json_t *j = expect("model b", "POST", "/v1/models/b/attention", body, NULL, 200, NULL, NULL);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "model")), "b");
    json_decref(j);
    j = expect("model b info", "GET", "/v1/models/b", NULL, NULL, 200, NULL, NULL);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "num_heads")), 4);
    json_decref(j);
    free(body);
    proc = saved;
    CHECK_INT_EQ(attnd_proc_stop(&two), 0);
    unlink(two.log_path);
}

int main(void)
{
    const char *args[] = {"--max-body-bytes", "32768", "--max-seq-len", "16", NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return check_summary();
    }
    RUN(json_errors);
    RUN(route_errors);
    RUN(raw);
    RUN(overload);
    RUN(ambiguous_default);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    unlink(proc.log_path);
    return check_summary();
}
