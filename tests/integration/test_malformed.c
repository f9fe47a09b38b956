/* test_malformed.c — hostile and broken clients against the real daemon: bad
 * JSON of every kind, limits (deep nesting, a 100 MB body streamed, attention
 * weights of 134M numbers), transport abuse (chunked bodies, slow-loris, a
 * client vanishing mid-body and one mid-queue). Each gets its documented
 * status; afterwards the daemon still answers correctly and its RSS is back
 * within RSS_TOLERANCE_KB of the baseline taken after warm-up.
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"

#define RSS_TOLERANCE_KB (32 * 1024) /* allocator caching, thread arenas */

static attnd_proc proc;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A body with T rows of `width` numbers each (valid for width 64), extra
 * appended inside the object. Caller frees. */
static char *rows(int T, int width, const char *extra)
{
    size_t cap = (size_t)T * (size_t)width * 6 + 256 + (extra ? strlen(extra) : 0);
    char *b = malloc(cap);
    size_t n = (size_t)snprintf(b, cap, "{\"query\": [");
    for (int t = 0; t < T; t++) {
        n += (size_t)snprintf(b + n, cap - n, "%s[", t ? "," : "");
        for (int e = 0; e < width; e++)
            n += (size_t)snprintf(b + n, cap - n, "%s%d", e ? "," : "", (t + e) % 3 - 1);
        n += (size_t)snprintf(b + n, cap - n, "]");
    }
    snprintf(b + n, cap - n, "]%s}", extra ? extra : "");
    return b;
}

/* POSTs body; checks status and error code ("" = success expected). */
static void expect(const char *what, const char *body, size_t len, const char *ctype,
                   long status, const char *code)
{
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", proc.base_url);
    http_result r;
    if (http_do("POST", url, body, len, ctype, &r) != 0) {
        CHECK_MSG(0, "%s: no response", what);
        return;
    }
    json_t *j = json_loads(r.body, 0, NULL);
    const char *got = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    CHECK_MSG(r.status == status, "%s: status %ld, want %ld (%.200s)", what, r.status, status,
              r.body);
    CHECK_MSG(strcmp(got ? got : "", code) == 0, "%s: code '%s', want '%s'", what,
              got ? got : "", code);
    printf("  %-44s -> %ld %s\n", what, r.status, got ? got : "");
    json_decref(j);
    http_result_free(&r);
}

/* A valid 1-row body whose first number is replaced by text. Caller frees. */
static char *first_number(const char *text)
{
    char *b = rows(1, 64, NULL), *p = strstr(b, "[[") + 2; /* the first number is "-1" */
    size_t tl = strlen(text);
    char *out = malloc(strlen(b) + tl + 1);
    size_t head = (size_t)(p - b);
    memcpy(out, b, head);
    memcpy(out + head, text, tl);
    strcpy(out + head + tl, p + 2);
    free(b);
    return out;
}

static void expect_str(const char *what, const char *body, long status, const char *code)
{
    expect(what, body, strlen(body), NULL, status, code);
}

static void still_serving(const char *after)
{
    char *b = rows(2, 64, NULL);
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", proc.base_url);
    http_result r;
    CHECK_MSG(http_do("POST", url, b, strlen(b), NULL, &r) == 0 && r.status == 200 &&
                  strstr(r.body, "\"output\""),
              "after %s: a valid request failed", after);
    http_result_free(&r);
    free(b);
}

TEST(bad_json)
{
    char *ok = rows(2, 64, NULL);
    expect("truncated JSON", ok, strlen(ok) / 2, NULL, 400, "invalid_json");
    free(ok);
    char *dup = rows(1, 64, ", \"is_causal\": true, \"is_causal\": false");
    expect_str("duplicate keys", dup, 400, "duplicate_field");
    free(dup);
    expect_str("query is a string", "{\"query\": \"abc\"}", 400, "invalid_type");
    char *str = first_number("\"1\"");
    expect_str("a number given as a string", str, 400, "invalid_type");
    free(str);
    char *wt = rows(1, 64, ", \"is_causal\": 1");
    expect_str("is_causal is a number", wt, 400, "invalid_type");
    free(wt);
    char *rag = rows(2, 64, NULL);
    char *cut = strstr(rag, "],["), *comma = cut;
    while (*comma != ',')
        comma--;
    memmove(comma, cut, strlen(cut) + 1); /* row 0 loses its last number */
    expect_str("ragged rows", rag, 400, "invalid_shape");
    free(rag);
    char *narrow = rows(1, 63, NULL);
    expect_str("63 numbers for E=64", narrow, 400, "invalid_shape");
    free(narrow);
    char *big = first_number("1e39");
    expect_str("1e39 (over float32)", big, 400, "non_finite");
    free(big);
    char *nan = first_number("NaN");
    expect_str("NaN literal", nan, 400, "non_finite");
    free(nan);
    char *inf = first_number("-Infinity");
    expect_str("Infinity literal", inf, 400, "non_finite");
    free(inf);
    expect_str("empty query", "{\"query\": []}", 400, "invalid_shape");
    expect_str("empty row", "{\"query\": [[]]}", 400, "invalid_shape");
    expect_str("empty object (no query)", "{}", 400, "invalid_value");
    char *tiny = first_number("1e-50");
    expect_str("1e-50 (underflows to 0: accepted)", tiny, 200, "");
    free(tiny);
    char *kpm = rows(3, 64, ", \"key_padding_mask\": [false, true]");
    expect_str("key_padding_mask of 2 for S=3", kpm, 400, "invalid_shape");
    free(kpm);
    char *am = rows(2, 64, ", \"attn_mask\": [[0, 0, 0], [0, 0, 0]]");
    expect_str("attn_mask 2x3 for T=S=2", am, 400, "invalid_shape");
    free(am);
    char *unk = rows(1, 64, ", \"need_weight\": true");
    expect_str("unknown field", unk, 400, "unknown_field");
    free(unk);
    char *utf = rows(1, 64, ", \"id\": \"\xff\xfe\xc3\"");
    expect_str("invalid UTF-8 in a string", utf, 400, "invalid_json");
    free(utf);
    expect_str("top level is an array", "[1, 2]", 400, "invalid_type");
    expect_str("not JSON at all", "hello", 400, "invalid_json");
    expect("NUL byte in the body", "{\"query\"\0: 1}", 13, NULL, 400, "invalid_json");

    size_t depth = 10000;
    char *deep = malloc(2 * depth + 16);
    size_t n = (size_t)sprintf(deep, "{\"query\": ");
    for (size_t i = 0; i < depth; i++)
        deep[n++] = '[';
    for (size_t i = 0; i < depth; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    expect("10,000-deep nesting", deep, n, NULL, 400, "invalid_json");
    free(deep);
    char *ok2 = rows(1, 64, NULL);
    expect("text/plain content type", ok2, strlen(ok2), "text/plain", 415,
           "unsupported_media_type");
    expect("charset=latin1", ok2, strlen(ok2), "application/json; charset=latin1", 415,
           "unsupported_media_type");
    free(ok2);
    still_serving("bad JSON");
}

/* need_weights at T = S = 4096 with 8 heads: 8 * 4096 * 4096 = 134M numbers. */
TEST(weights_limit)
{
    char *b = rows(4096, 64, ", \"need_weights\": true, \"average_attn_weights\": false");
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", proc.base_url);
    http_result r;
    double t0 = now_s();
    CHECK(http_do("POST", url, b, strlen(b), NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 413);
    CHECK(strstr(r.body, "\"limit_exceeded\"") && strstr(r.body, "max_weights_elems") &&
          strstr(r.body, "need_weights"));
    printf("  %-44s -> %ld in %.2f s: %.160s\n", "need_weights T=S=4096, 8 heads", r.status,
           now_s() - t0, r.body);
    http_result_free(&r);
    free(b);
}

/* A chunked body (valid) and a 100 MB body streamed: 413 long before the end. */
TEST(transport)
{
    char *body = rows(2, 64, NULL);
    size_t blen = strlen(body), cap = blen * 2 + 512, n;
    char *req = malloc(cap);
    n = (size_t)snprintf(req, cap, "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
                                   "Content-Type: application/json\r\n"
                                   "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    for (size_t off = 0; off < blen; off += 100) {
        size_t k = blen - off < 100 ? blen - off : 100;
        n += (size_t)snprintf(req + n, cap - n, "%zx\r\n%.*s\r\n", k, (int)k, body + off);
    }
    n += (size_t)snprintf(req + n, cap - n, "0\r\n\r\n");
    char *reply = http_raw(proc.port, req, n, 3000);
    CHECK_INT_EQ(http_raw_status(reply), 200);
    printf("  %-44s -> %d\n", "chunked body (100-byte chunks)", http_raw_status(reply));
    free(reply);
    free(req);
    free(body);

    /* 100 MB announced and streamed 1 MB at a time: the answer comes at once. */
    int fd = attnd_connect_local(proc.port);
    CHECK(fd >= 0);
    const char hdr[] = "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
                       "Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n";
    CHECK(send(fd, hdr, sizeof hdr - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof hdr - 1));
    char *chunk = malloc(1 << 20);
    memset(chunk, '1', 1 << 20);
    size_t sent = 0;
    char buf[2048] = "";
    ssize_t got = 0;
    double t0 = now_s();
    while (sent < 100u << 20 && now_s() - t0 < 10) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 0) > 0 && (got = recv(fd, buf, sizeof buf - 1, 0)) > 0)
            break;
        ssize_t w = send(fd, chunk, 1 << 20, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        sent += (size_t)w;
    }
    if (got <= 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 3000) > 0)
            got = recv(fd, buf, sizeof buf - 1, 0);
    }
    buf[got > 0 ? got : 0] = '\0';
    CHECK_INT_EQ(http_raw_status(buf), 413);
    CHECK(strstr(buf, "body_too_large") != NULL);
    CHECK_MSG(sent < 100u << 20, "the whole 100 MB was accepted before the answer");
    printf("  %-44s -> %d after %zu of 104857600 bytes sent\n", "100 MB body, streamed",
           http_raw_status(buf), sent);
    close(fd);
    free(chunk);
    still_serving("a 100 MB body");
}

/* One byte a second: the server closes the connection once
 * --request-read-timeout-s (2 here) has passed, though it is never idle. */
TEST(slow_loris)
{
    int fd = attnd_connect_local(proc.port);
    CHECK(fd >= 0);
    const char req[] = "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
                       "Content-Type: application/json\r\nContent-Length: 50\r\n\r\n{\"query\"";
    double t0 = now_s(), closed_at = -1;
    for (size_t i = 0; i < sizeof req - 1 && now_s() - t0 < 8; i++) {
        if (send(fd, req + i, 1, MSG_NOSIGNAL) != 1) {
            closed_at = now_s() - t0;
            break;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 1000) > 0) {
            char b[512];
            if (recv(fd, b, sizeof b, 0) <= 0) {
                closed_at = now_s() - t0;
                break;
            }
        }
    }
    CHECK_MSG(closed_at > 0 && closed_at < 4.5, "slow-loris connection closed after %.1f s",
              closed_at);
    printf("  %-44s -> closed by the server after %.1f s\n", "slow-loris, 1 byte/s", closed_at);
    close(fd);
    still_serving("slow-loris");
}

/* Clients that vanish: mid-body, and while their request waits for a batch. */
TEST(disconnects)
{
    for (int i = 0; i < 20; i++) {
        int fd = attnd_connect_local(proc.port);
        const char req[] = "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
                           "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                           "{\"query\": [[1, 2, 3";
        CHECK(fd >= 0 && send(fd, req, sizeof req - 1, MSG_NOSIGNAL) > 0);
        close(fd);
    }
    printf("  %-44s -> (no answer possible)\n", "20 clients gone mid-body");
    still_serving("mid-body disconnects");

    char *body = rows(8, 64, NULL);
    size_t blen = strlen(body);
    char *req = malloc(blen + 512);
    int n = sprintf(req, "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                    blen, body);
    for (int i = 0; i < 20; i++) { /* queued (batch delay 200 ms), then gone */
        int fd = attnd_connect_local(proc.port);
        CHECK(fd >= 0 && send(fd, req, (size_t)n, MSG_NOSIGNAL) == n);
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
        close(fd);
    }
    printf("  %-44s -> (computed, answer dropped)\n", "20 clients gone mid-queue");
    free(req);
    free(body);
    struct timespec ts = {0, 500 * 1000000L};
    nanosleep(&ts, NULL);
    still_serving("mid-queue disconnects");
}

int main(void)
{
    const char *args[] = {"--request-read-timeout-s", "2", "--max-queue-delay-us", "200000",
                          "--max-batch-requests", "64", NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return check_summary();
    }
    for (int i = 0; i < 5; i++)
        still_serving("warm-up");
    long base = attnd_proc_status(proc.pid, "VmRSS");
    RUN(bad_json);
    RUN(weights_limit);
    RUN(transport);
    RUN(slow_loris);
    RUN(disconnects);
    for (int i = 0; i < 5; i++)
        still_serving("everything");
    long after = attnd_proc_status(proc.pid, "VmRSS");
    printf("RSS: %ld kB at baseline, %ld kB after (tolerance %d kB)\n", base, after,
           RSS_TOLERANCE_KB);
    CHECK(base > 0 && after > 0);
    CHECK_MSG(after - base < RSS_TOLERANCE_KB, "RSS grew by %ld kB", after - base);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    unlink(proc.log_path);
    return check_summary();
}
