/* test_hardening.c — the HTTP layer against hostile framing and resource abuse
 * (issue 17), through the real daemon over raw sockets: request smuggling with
 * two Content-Lengths, a list value, or Content-Length beside chunked (one 400,
 * the rest of the stream never runs); %00 in a path; control bytes from URLs
 * and JSON keys in the log; Expect other than 100-continue (417); clients that
 * declare huge bodies and send one byte (they hold little of
 * --max-inflight-bytes); clients that never read big answers (the answers count
 * against the budget, later requests get 503 overloaded, RSS stays bounded);
 * and idle connections up to --max-connections (probes still answered).
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"

#define E 64

/* A connected socket to 127.0.0.1:port (rcvbuf bytes of receive buffer when
 * > 0: a client that never reads should not let the kernel absorb answers). */
static int connect_port(int port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n)
{
    for (size_t sent = 0; sent < n;) {
        ssize_t w = send(fd, p + sent, n - sent, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        sent += (size_t)w;
    }
    return 0;
}

/* How many HTTP responses a raw reply holds (status lines), and how many of
 * them have a status other than `status` (*other, may be NULL). */
static int count_responses(const char *reply, int status, int *other)
{
    int n = 0, o = 0;
    for (const char *p = reply; p && (p = strstr(p, "HTTP/1.")); p++)
        if (http_raw_status(p) >= 100) { /* a body ends without a newline: any position */
            n++;
            o += http_raw_status(p) != status;
        }
    if (other)
        *other = o;
    return n;
}

static int has_header(const char *reply, const char *name, const char *value)
{
    const char *end = strstr(reply, "\r\n\r\n");
    size_t n = strlen(name);
    for (const char *p = reply; p && (!end || p < end); p = strstr(p, "\r\n")) {
        p += p == reply ? 0 : 2;
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ')
                v++;
            return strncasecmp(v, value, strlen(value)) == 0;
        }
        if (p == reply)
            p++;
    }
    return 0;
}

/* The "code" of a JSON error body in a raw reply, copied into out. */
static void reply_code(const char *reply, char *out, size_t cap)
{
    const char *b = reply ? strstr(reply, "\r\n\r\n") : NULL;
    json_t *j = b ? json_loads(b + 4, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    const char *c = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    snprintf(out, cap, "%s", c ? c : "");
    json_decref(j);
}

/* T rows of E numbers as a /v1 body with extra members. Caller frees. */
static char *rows(int T, const char *extra)
{
    size_t cap = (size_t)T * E * 6 + 256 + strlen(extra);
    char *b = malloc(cap);
    size_t n = (size_t)snprintf(b, cap, "{\"query\": [");
    for (int t = 0; t < T; t++) {
        n += (size_t)snprintf(b + n, cap - n, "%s[", t ? "," : "");
        for (int e = 0; e < E; e++)
            n += (size_t)snprintf(b + n, cap - n, "%s%d", e ? "," : "", (t * 7 + e) % 5 - 2);
        n += (size_t)snprintf(b + n, cap - n, "]");
    }
    snprintf(b + n, cap - n, "]%s}", extra);
    return b;
}

static long post(const attnd_proc *p, const char *path, const char *body, char *code, size_t cap)
{
    char url[160];
    snprintf(url, sizeof url, "%s%s", p->base_url, path);
    http_result r;
    if (http_do("POST", url, body, strlen(body), NULL, &r) != 0) {
        snprintf(code, cap, "(no answer)");
        return -1;
    }
    json_t *j = json_loads(r.body, 0, NULL);
    const char *c = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    snprintf(code, cap, "%s", c ? c : "");
    json_decref(j);
    long st = r.status;
    http_result_free(&r);
    return st;
}

static long get(const attnd_proc *p, const char *path)
{
    char url[160];
    snprintf(url, sizeof url, "%s%s", p->base_url, path);
    http_result r;
    if (http_do("GET", url, NULL, 0, NULL, &r) != 0)
        return -1;
    long st = r.status;
    http_result_free(&r);
    return st;
}

/* ------------------------------------------------------------ smuggling */

static const char smuggled[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

/* Sends head + body (a second request hidden in the body) and checks that
 * only a 400 comes back, naming want_field in attnd's JSON form when given
 * (else it is libmicrohttpd's own, which 0.9.75 writes out twice), and that
 * the connection is closed after it (http_raw reads until the close). */
static void one_400(const attnd_proc *p, const char *what, const char *head, const char *body,
                    const char *want_field)
{
    char req[1024];
    int n = snprintf(req, sizeof req, "%s%s", head, body), other = 0;
    char *reply = http_raw(p->port, req, (size_t)n, 1500);
    int answers = count_responses(reply, 400, &other);
    CHECK_MSG(reply && http_raw_status(reply) == 400, "%s: status %d, want 400: %.300s", what,
              http_raw_status(reply), reply ? reply : "(none)");
    CHECK_MSG(other == 0 && (answers == 1 || !want_field),
              "%s: %d answers, %d not the 400: the body ran as another request: %.600s", what,
              answers, other, reply ? reply : "");
    if (want_field) {
        char code[64];
        reply_code(reply, code, sizeof code);
        CHECK_MSG(strcmp(code, "invalid_header") == 0 && strstr(reply, want_field),
                  "%s: code '%s', want invalid_header naming %s", what, code, want_field);
        CHECK_MSG(has_header(reply, "Connection", "close"), "%s: no Connection: close", what);
    }
    printf("  %-52s -> %d, %d answer(s)\n", what, http_raw_status(reply), answers);
    free(reply);
}

TEST_WITH(smuggling_two_lengths, const attnd_proc *p)
{
    char head[512];
    snprintf(head, sizeof head,
             "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
             "Content-Type: application/json\r\nContent-Length: 2\r\nContent-Length: %zu\r\n\r\n",
             2 + strlen(smuggled));
    char body[256];
    snprintf(body, sizeof body, "{}%s", smuggled);
    one_400(p, "two Content-Lengths (2, then 2 + a request)", head, body, "Content-Length");
    /* On one connection, with a request after it: the hidden request must not
     * run (it would answer before the follow-up), nor the follow-up. */
    int fd = connect_port(p->port, 0);
    char req[1024];
    int n = snprintf(req, sizeof req, "%s%s", head, body);
    CHECK(fd >= 0 && send_all(fd, req, (size_t)n) == 0);
    attnd_sleep_ms(300);
    static const char follow[] = "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    send_all(fd, follow, sizeof follow - 1); /* fails once the server has closed: fine */
    char buf[16384];
    size_t len = 0;
    ssize_t got;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    while (len < sizeof buf - 1 && poll(&pfd, 1, 1500) > 0 &&
           (got = recv(fd, buf + len, sizeof buf - 1 - len, 0)) > 0)
        len += (size_t)got;
    buf[len] = '\0';
    int other = 0, answers = count_responses(buf, 400, &other);
    CHECK_MSG(answers == 1 && other == 0, "%d answers on the connection (%d not the 400): %.600s",
              answers, other, buf);
    printf("  %-52s -> %d answer(s)\n", "... then a follow-up request on the connection",
           answers);
    close(fd);
    /* The same value twice is one length (RFC 9110 8.6): served. */
    n = snprintf(req, sizeof req,
                     "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                     "Content-Length: 0\r\nConnection: close\r\n\r\n");
    char *reply = http_raw(p->port, req, (size_t)n, 1500);
    CHECK_INT_EQ(http_raw_status(reply), 200);
    free(reply);
}

TEST_WITH(smuggling_length_list, const attnd_proc *p)
{
    char head[512], body[256];
    snprintf(head, sizeof head,
             "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
             "Content-Type: application/json\r\nContent-Length: 2, %zu\r\n\r\n",
             2 + strlen(smuggled));
    snprintf(body, sizeof body, "{}%s", smuggled);
    /* libmicrohttpd refuses a list itself (its own 400, see README): one answer, closed. */
    one_400(p, "Content-Length: 2, 2 + a request", head, body, NULL);
}

TEST_WITH(smuggling_length_and_chunked, const attnd_proc *p)
{
    char head[512], body[256];
    snprintf(body, sizeof body, "0\r\n\r\n%s", smuggled);
    snprintf(head, sizeof head,
             "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n"
             "Transfer-Encoding: chunked\r\n\r\n",
             strlen(body));
    one_400(p, "Content-Length with Transfer-Encoding: chunked", head, body, "Content-Length");
    snprintf(head, sizeof head,
             "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
             "Content-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
    one_400(p, "Transfer-Encoding: gzip, chunked", head, body, "Transfer-Encoding");
}

/* ------------------------------------------------------------ paths, log, Expect */

TEST_WITH(nul_in_path, const attnd_proc *p)
{
    const char req[] = "GET /healthz%00.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char *reply = http_raw(p->port, req, sizeof req - 1, 1500);
    char code[64];
    reply_code(reply, code, sizeof code);
    CHECK_MSG(http_raw_status(reply) == 404 && strcmp(code, "not_found") == 0,
              "GET /healthz%%00.json answered %d '%s' (the path was cut at the NUL?)",
              http_raw_status(reply), code);
    CHECK(reply && strstr(reply, "application/json"));
    printf("  %-52s -> %d %s\n", "GET /healthz%00.json", http_raw_status(reply), code);
    free(reply);
    const char ok[] = "GET /healthz%3F HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    reply = http_raw(p->port, ok, sizeof ok - 1, 1500); /* other escapes still decode */
    CHECK_INT_EQ(http_raw_status(reply), 404);
    CHECK(reply && strstr(reply, "/healthz?"));
    free(reply);
}

TEST_WITH(log_escapes_controls, const attnd_proc *p)
{
    const char req[] = "GET /x%1b%5b31mRED%0d%0a2026-01-01T00:00:00.000Z%20ERROR%20forged "
                       "HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char *reply = http_raw(p->port, req, sizeof req - 1, 1500);
    CHECK_INT_EQ(http_raw_status(reply), 404);
    free(reply);
    char code[64];
    CHECK_INT_EQ(post(p, "/v1/models/demo/attention", "{\"\\u001b]0;title\\u0007\": 1}", code,
                      sizeof code),
                 400);
    CHECK_STR_EQ(code, "unknown_field");
    attnd_sleep_ms(100);
    FILE *f = fopen(p->log_path, "rb");
    char *log = calloc(1, 1 << 20);
    size_t n = f && log ? fread(log, 1, (1 << 20) - 1, f) : 0;
    if (f)
        fclose(f);
    int raw = 0, forged = 0;
    for (size_t i = 0; i < n; i++)
        raw += (unsigned char)log[i] < 0x20 && log[i] != '\n';
    for (char *l = log; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        forged += strncmp(l, "2026-01-01T00:00:00.000Z ERROR forged", 37) == 0;
    CHECK_MSG(raw == 0, "%d raw control bytes in the log", raw);
    CHECK_MSG(forged == 0, "a forged line starts a log line");
    CHECK(log && strstr(log, "\\x1b[31mRED\\x0d\\x0a"));
    CHECK(log && strstr(log, "\\x1b]0;title\\x07"));
    printf("  %-52s -> %d raw control bytes, %d forged lines\n", "URL and JSON key in the log",
           raw, forged);
    free(log);
}

TEST_WITH(expect_417, const attnd_proc *p)
{
    char *body = rows(1, "");
    char req[8192];
    int n = snprintf(req, sizeof req,
                     "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Expect: 200-ok\r\n\r\n%s",
                     strlen(body), body);
    char *reply = http_raw(p->port, req, (size_t)n, 1500);
    char code[64];
    reply_code(reply, code, sizeof code);
    CHECK_MSG(http_raw_status(reply) == 417 && strcmp(code, "expectation_failed") == 0,
              "Expect: 200-ok answered %d '%s'", http_raw_status(reply), code);
    CHECK(reply && strstr(reply, "\"field\":\"Expect\""));
    printf("  %-52s -> %d %s\n", "Expect: 200-ok", http_raw_status(reply), code);
    free(reply);

    /* 100-continue still works: the interim answer, then the real one. */
    int fd = connect_port(p->port, 0);
    n = snprintf(req, sizeof req,
                 "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
                 "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                 "Expect: 100-continue\r\nConnection: close\r\n\r\n",
                 strlen(body));
    CHECK(fd >= 0 && send_all(fd, req, (size_t)n) == 0);
    char buf[65536];
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    ssize_t got = poll(&pfd, 1, 2000) > 0 ? recv(fd, buf, sizeof buf - 1, 0) : -1;
    buf[got > 0 ? got : 0] = '\0';
    CHECK_MSG(strncmp(buf, "HTTP/1.1 100", 12) == 0, "no 100 Continue: %.100s", buf);
    CHECK(send_all(fd, body, strlen(body)) == 0);
    size_t len = 0;
    while (poll(&pfd, 1, 2000) > 0 && (got = recv(fd, buf + len, sizeof buf - 1 - len, 0)) > 0)
        len += (size_t)got;
    buf[len] = '\0';
    CHECK_MSG(http_raw_status(buf) == 200, "after 100-continue: %.200s", buf);
    close(fd);
    free(body);
}

/* ------------------------------------------------------------ the byte budget */

/* Clients that announce 16 MiB bodies and send one byte hold little: a normal
 * request from another client still gets its 200 (the budget would hold 4 of
 * them if it counted what they announced). */
TEST(slow_bodies_hold_little)
{
    attnd_proc p;
    const char *args[] = {"--max-inflight-bytes", "64M", "--max-body-bytes", "16M", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return;
    }
    enum { N = 8 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        char head[256];
        int n = snprintf(head, sizeof head,
                         "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
                         "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n{",
                         16 * 1024 * 1024 - 1);
        fds[i] = connect_port(p.port, 0);
        CHECK(fds[i] >= 0 && send_all(fds[i], head, (size_t)n) == 0);
    }
    attnd_sleep_ms(300);
    char *body = rows(2, ""), code[64];
    long st = post(&p, "/v1/models/demo/attention", body, code, sizeof code);
    CHECK_MSG(st == 200, "with %d slow 16 MiB bodies begun: %ld %s", N, st, code);
    printf("  %-52s -> %ld %s\n", "8 x 16 MiB announced, 1 byte sent; then a request", st, code);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    free(body);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);
}

/* Clients that never read answers of ~20 MB each (per-head weights, T = S =
 * 512, 8 heads): the answers count against the budget until sent, so later
 * requests get 503 overloaded, the RSS stays within the budget, and once the
 * readers go away the budget is free again. */
TEST(unread_responses_bounded)
{
    attnd_proc p;
    const char *args[] = {"--max-inflight-bytes", "96M", "--connection-timeout-s", "20", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return;
    }
    char *small = rows(2, ""), code[64];
    CHECK_INT_EQ(post(&p, "/v1/models/demo/attention", small, code, sizeof code), 200);
    long base = attnd_proc_status(p.pid, "VmRSS");
    char *body = rows(512, ", \"need_weights\": true, \"average_attn_weights\": false");
    size_t blen = strlen(body);
    char *req = malloc(blen + 256);
    int n = snprintf(req, blen + 256,
                     "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     blen, body);
    enum { N = 8 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = connect_port(p.port, 4096);
        CHECK(fds[i] >= 0 && send_all(fds[i], req, (size_t)n) == 0);
        attnd_sleep_ms(150); /* computed and encoded; its answer waits on a full socket */
    }
    attnd_sleep_ms(500);
    long peak = attnd_proc_status(p.pid, "VmRSS");
    long st = post(&p, "/v1/models/demo/attention", body, code, sizeof code);
    CHECK_MSG(st == 503 && strcmp(code, "overloaded") == 0,
              "with %d unread 20 MB answers: %ld '%s', want 503 overloaded", N, st, code);
    CHECK_INT_EQ(get(&p, "/healthz"), 200);
    long grown = peak - base;
#ifndef __SANITIZE_ADDRESS__
    CHECK_MSG(grown < (96 + 48) * 1024, "RSS grew by %ld kB with a 96 MiB budget", grown);
#else
    /* ASan's quarantine keeps freed blocks (256 MB by default): RSS says nothing here. */
#endif
    printf("  %-52s -> %ld %s, RSS +%ld kB\n", "8 clients never reading ~20 MB answers", st, code,
           grown);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    long after = -1;
    for (int tries = 0; tries < 100 && after != 200; tries++) {
        attnd_sleep_ms(50);
        after = post(&p, "/v1/models/demo/attention", body, code, sizeof code);
    }
    CHECK_MSG(after == 200, "after the readers left: %ld %s", after, code);
    free(req);
    free(body);
    free(small);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);
}

/* ------------------------------------------------------------ connection limit */

/* --max-connections idle connections: /healthz and /readyz still answer; other
 * routes on the extra connections get 503 too_many_connections. */
TEST(probes_past_max_connections)
{
    attnd_proc p;
    const char *args[] = {"--max-connections", "8", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return;
    }
    enum { N = 8 };
    int fds[N];
    for (int i = 0; i < N; i++)
        CHECK((fds[i] = connect_port(p.port, 0)) >= 0);
    attnd_sleep_ms(300);
    CHECK_INT_EQ(get(&p, "/healthz"), 200);
    CHECK_INT_EQ(get(&p, "/readyz"), 200);
    CHECK_INT_EQ(get(&p, "/v2/health/live"), 200);
    char *body = rows(1, ""), code[64];
    long st = post(&p, "/v1/models/demo/attention", body, code, sizeof code);
    CHECK_MSG(st == 503 && strcmp(code, "too_many_connections") == 0, "attention: %ld '%s'",
              st, code);
    printf("  %-52s -> /healthz %ld, attention %ld %s\n", "8 idle connections, max 8",
           get(&p, "/healthz"), st, code);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    attnd_sleep_ms(300);
    CHECK_INT_EQ(post(&p, "/v1/models/demo/attention", body, code, sizeof code), 200);
    free(body);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);
}

int main(void)
{
    attnd_proc p;
    if (attnd_proc_start(&p, NULL) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return check_summary();
    }
    RUN_WITH(smuggling_two_lengths, &p);
    RUN_WITH(smuggling_length_list, &p);
    RUN_WITH(smuggling_length_and_chunked, &p);
    RUN_WITH(nul_in_path, &p);
    RUN_WITH(log_escapes_controls, &p);
    RUN_WITH(expect_417, &p);
    CHECK_INT_EQ(get(&p, "/healthz"), 200);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);
    RUN(slow_bodies_hold_little);
    RUN(unread_responses_bounded);
    RUN(probes_past_max_connections);
    return check_summary();
}
