/* test_ops.c — what an operator and a browser app see, through the real daemon:
 * request ids (taken, generated, refused; on every response, error body and
 * log line), the access log (text and JSON, escaping, reopened on SIGHUP),
 * --log-format json, CORS (off by default, preflights before auth, allowed and
 * refused origins), --listen PORT, and the first-day rough edges: a 404 that
 * lists the models, an unknown field with a suggestion, NaN/Infinity tokens.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"

static const char *demo(void)
{
    const char *m = getenv("ATTND_DEMO_MODEL");
    return m && *m ? m : "config/demo.safetensors";
}

/* A /v1 body of t rows of 64 numbers, each text (e.g. "0.25", "NaN"). */
static char *rows_body(int t, const char *first, const char *rest)
{
    size_t cap = (size_t)t * 64 * 16 + 64, n = 0;
    char *b = malloc(cap);
    n += (size_t)snprintf(b + n, cap - n, "{\"query\":[");
    for (int i = 0; i < t; i++) {
        n += (size_t)snprintf(b + n, cap - n, "%s[", i ? "," : "");
        for (int k = 0; k < 64; k++)
            n += (size_t)snprintf(b + n, cap - n, "%s%s", k ? "," : "",
                                  i == t - 1 && k == 63 ? first : rest);
        n += (size_t)snprintf(b + n, cap - n, "]");
    }
    snprintf(b + n, cap - n, "]}");
    return b;
}

static int request(const attnd_proc *p, const char *method, const char *path, const char *body,
                   const char *const *headers, http_result *r)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", p->base_url, path);
    return http_do_ex(method, url, body, body ? strlen(body) : 0, NULL, headers, NULL, r);
}

/* 1 when s is 16 lowercase hex digits (a generated id). */
static int generated_id(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!isxdigit((unsigned char)s[n]) || isupper((unsigned char)s[n]))
            return 0;
    return n == 16;
}

/* The error object's request_id of a /v1 error body, or of v2's top level. */
static const char *body_request_id(json_t *j)
{
    json_t *err = json_object_get(j, "error");
    return json_string_value(json_object_get(json_is_object(err) ? err : j, "request_id"));
}

/* Every answer carries X-Request-Id, and an error body the same id. */
static void expect_id(const char *what, const http_result *r, const char *want)
{
    char id[256];
    CHECK_MSG(http_header(r, "X-Request-Id", id, sizeof id), "%s: no X-Request-Id", what);
    if (want)
        CHECK_MSG(strcmp(id, want) == 0, "%s: X-Request-Id %s, want %s", what, id, want);
    else
        CHECK_MSG(generated_id(id), "%s: X-Request-Id '%s' is not 16 hex digits", what, id);
    if (r->status < 400)
        return;
    json_t *j = json_loads(r->body ? r->body : "", 0, NULL);
    const char *in_body = body_request_id(j);
    CHECK_MSG(in_body && strcmp(in_body, id) == 0, "%s: body %s lacks request_id %s", what,
              r->body ? r->body : "", id);
    json_decref(j);
}

TEST(request_ids)
{
    attnd_proc p;
    const char *args[] = {"--api-keys", "k1", NULL};
    CHECK(attnd_proc_start(&p, args) == 0);
    if (p.pid <= 0)
        return;
    const char *auth[] = {"Authorization: Bearer k1", "X-Request-Id: trace-42.a:b", NULL};
    const char *plain[] = {"Authorization: Bearer k1", NULL};
    static const struct {
        const char *what, *method, *path, *body;
        int use_id;
        long status;
    } cases[] = {
        {"healthz", "GET", "/healthz", NULL, 0, 200},
        {"model", "GET", "/v1/models/demo", NULL, 1, 200},
        {"v1 404", "GET", "/v1/models/nope", NULL, 1, 404},
        {"v2 404", "GET", "/v2/models/nope", NULL, 1, 404},
        {"no route", "GET", "/nowhere", NULL, 0, 404},
        {"405", "PUT", "/v1/models", NULL, 1, 405},
        {"session 404", "GET", "/v1/sessions/0123456789abcdef", NULL, 1, 404},
        {"v1 bad json", "POST", "/v1/models/demo/attention", "{\"query\":", 1, 400},
        {"v2 bad json", "POST", "/v2/models/demo/infer", "{\"inputs\":", 0, 400},
        {"session bad json", "POST", "/v1/models/demo/sessions", "{", 1, 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http_result r;
        CHECK(request(&p, cases[i].method, cases[i].path, cases[i].body,
                      cases[i].use_id ? auth : plain, &r) == 0);
        CHECK_MSG(r.status == cases[i].status, "%s: status %ld", cases[i].what, r.status);
        expect_id(cases[i].what, &r, cases[i].use_id ? "trace-42.a:b" : NULL);
        http_result_free(&r);
    }
    /* 401 before anything else is read: the id is there too */
    http_result r;
    const char *nokey[] = {"X-Request-Id: who-am-i", NULL};
    CHECK(request(&p, "GET", "/v1/models", NULL, nokey, &r) == 0 && r.status == 401);
    expect_id("401", &r, "who-am-i");
    http_result_free(&r);

    /* ids that cannot be echoed safely are replaced by a generated one */
    char long_id[200];
    memset(long_id, 'a', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    const char *bad_ids[] = {"X-Request-Id: has space", "X-Request-Id: quo\"te", NULL, NULL};
    char long_hdr[256];
    snprintf(long_hdr, sizeof long_hdr, "X-Request-Id: %s", long_id);
    bad_ids[2] = long_hdr;
    for (int i = 0; i < 3; i++) {
        const char *h[] = {"Authorization: Bearer k1", bad_ids[i], NULL};
        CHECK(request(&p, "GET", "/v1/models/nope", NULL, h, &r) == 0 && r.status == 404);
        expect_id(bad_ids[i], &r, NULL);
        http_result_free(&r);
    }
    /* two requests without an id get different ones */
    char a[64], b[64];
    CHECK(request(&p, "GET", "/healthz", NULL, NULL, &r) == 0);
    http_header(&r, "X-Request-Id", a, sizeof a);
    http_result_free(&r);
    CHECK(request(&p, "GET", "/healthz", NULL, NULL, &r) == 0);
    http_header(&r, "X-Request-Id", b, sizeof b);
    http_result_free(&r);
    CHECK_MSG(strcmp(a, b) != 0, "two generated ids are equal: %s", a);

    /* the log line about a refused request names its id */
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    char *log = attnd_slurp(p.log_path);
    CHECK_MSG(log && strstr(log, "[trace-42.a:b] GET /v1/models/nope -> 404 model_not_found"),
              "log lacks the request id: %s", log ? log : "(unreadable)");
    CHECK(log && strstr(log, "[who-am-i] GET /v1/models -> 401"));
    free(log);
    unlink(p.log_path);
}

/* Every line of text is one JSON object; returns how many lines. */
static int json_lines(const char *text, const char *must_have)
{
    int n = 0;
    for (const char *line = text; line && *line;) {
        size_t len = strcspn(line, "\n");
        json_error_t je;
        json_t *j = json_loadb(line, len, 0, &je);
        CHECK_MSG(json_is_object(j), "not a JSON object: %.*s", (int)len, line);
        if (must_have && j)
            CHECK_MSG(json_object_get(j, must_have) != NULL, "no %s in %.*s", must_have,
                      (int)len, line);
        json_decref(j);
        n++;
        line += len + (line[len] == '\n');
    }
    return n;
}

/* The line of text holding needle, copied into out. Returns 1 when found. */
static int line_with(const char *text, const char *needle, char *out, size_t cap)
{
    const char *hit = text ? strstr(text, needle) : NULL;
    if (!hit)
        return 0;
    const char *start = hit;
    while (start > text && start[-1] != '\n')
        start--;
    size_t n = strcspn(start, "\n");
    snprintf(out, cap, "%.*s", (int)n, start);
    return 1;
}

/* The access log at path once it holds needle (a line is written when the
 * response has gone out, which can follow the client's read by a moment), or
 * as it is after 3 s. Caller frees. */
static char *wait_for_line(const char *path, const char *needle)
{
    char *text = NULL;
    for (int i = 0; i < 60; i++) {
        free(text);
        text = attnd_slurp(path);
        if (text && strstr(text, needle))
            break;
        attnd_sleep_ms(50);
    }
    return text;
}

/* Starts attnd with --access-log at a new temporary file (named into path,
 * a mkstemp template) and the extra arguments (NULL-terminated, at most 12).
 * Returns attnd_proc_start's result, or -1 when no file could be made. */
static int start_with_access_log(attnd_proc *p, char *path, const char *const *extra)
{
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return -1;
    close(fd);
    const char *args[16] = {"--access-log", path};
    for (int i = 0; extra[i] && i < 12; i++)
        args[2 + i] = extra[i];
    return attnd_proc_start(p, args);
}

TEST(access_log_text)
{
    char path[] = "/tmp/attnd-access-XXXXXX";
    attnd_proc p;
    const char *args[] = {"--max-batch-requests", "4", NULL};
    CHECK(start_with_access_log(&p, path, args) == 0);
    if (p.pid <= 0)
        return;
    char *body = rows_body(2, "0.5", "0.25");
    const char *h[] = {"X-Request-Id: acc-1", NULL};
    http_result r;
    CHECK(request(&p, "POST", "/v1/models/demo/attention", body, h, &r) == 0 && r.status == 200);
    size_t out_len = r.body_len;
    http_result_free(&r);
    const char *h2[] = {"X-Request-Id: acc-2", NULL};
    CHECK(request(&p, "GET", "/v1/models/x%0Ay%20z", NULL, h2, &r) == 0 && r.status == 404);
    http_result_free(&r);

    char *log = wait_for_line(path, " acc-1 "), line[2048], want[256];
    CHECK_MSG(line_with(log, " acc-1 ", line, sizeof line), "no line for acc-1: %s",
              log ? log : "");
    free(log);
    log = wait_for_line(path, " acc-2 ");
    snprintf(want, sizeof want, " acc-1 127.0.0.1 POST /v1/models/demo/attention 200 in=%zu "
             "out=%zu ms=", strlen(body), out_len);
    CHECK_MSG(strstr(line, want) && strstr(line, " model=demo batch=1"), "line: %s\nwant: %s",
              line, want);
    /* control bytes and spaces from the URL never split or forge a line */
    CHECK_MSG(line_with(log, " acc-2 ", line, sizeof line) &&
                  strstr(line, " GET /v1/models/x\\x0ay\\x20z 404 in=0 ") &&
                  strstr(line, " model=- batch=-"),
              "line: %s", line);

    /* logrotate: the file is moved, SIGHUP, new lines go to a new file */
    char moved[64];
    snprintf(moved, sizeof moved, "%s.1", path);
    CHECK(rename(path, moved) == 0);
    kill(p.pid, SIGHUP);
    char *fresh = NULL;
    for (int i = 0; i < 100 && !fresh; i++) { /* the reopen happens on the main thread */
        attnd_sleep_ms(50);
        if (access(path, F_OK) == 0) {
            const char *h3[] = {"X-Request-Id: after-hup", NULL};
            CHECK(request(&p, "GET", "/healthz", NULL, h3, &r) == 0);
            http_result_free(&r);
            fresh = wait_for_line(path, "after-hup");
        }
    }
    CHECK_MSG(fresh && strstr(fresh, " after-hup 127.0.0.1 GET /healthz 200 "),
              "reopened log: %s", fresh ? fresh : "(no file)");
    char *old = attnd_slurp(moved);
    CHECK(old && strstr(old, " acc-1 ") && !strstr(old, "after-hup"));
    free(old);
    free(fresh);
    free(log);
    free(body);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(moved);
    unlink(path);
    unlink(p.log_path);
}

TEST(log_format_json)
{
    char path[] = "/tmp/attnd-access-XXXXXX";
    attnd_proc p;
    const char *args[] = {"--log-format", "json", "--log-level", "debug", NULL};
    CHECK(start_with_access_log(&p, path, args) == 0);
    if (p.pid <= 0)
        return;
    const char *h[] = {"X-Request-Id: js-1", NULL};
    http_result r;
    CHECK(request(&p, "GET", "/v1/models/bad%01name%22", NULL, h, &r) == 0 && r.status == 404);
    http_result_free(&r);
    char *body = rows_body(1, "0.5", "0.5");
    CHECK(request(&p, "POST", "/v1/models/demo/attention", body, NULL, &r) == 0 &&
          r.status == 200);
    http_result_free(&r);
    free(body);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);

    char *daemon_log = attnd_slurp(p.log_path);
    CHECK_MSG(json_lines(daemon_log, "msg") > 5, "%s", daemon_log ? daemon_log : "");
    char line[2048];
    CHECK(line_with(daemon_log, "\"request_id\":\"js-1\"", line, sizeof line));
    json_t *j = json_loads(line, 0, NULL);
    CHECK(j && strcmp(json_string_value(json_object_get(j, "level")), "warn") == 0);
    CHECK(j && strstr(json_string_value(json_object_get(j, "msg")), "bad\x01name\"") != NULL);
    json_decref(j);

    char *access = attnd_slurp(path);
    CHECK(json_lines(access, "request_id") >= 3); /* /readyz polls, the 404, the POST */
    CHECK(line_with(access, "\"js-1\"", line, sizeof line));
    j = json_loads(line, 0, NULL);
    CHECK(j && json_integer_value(json_object_get(j, "status")) == 404);
    CHECK(j && strcmp(json_string_value(json_object_get(j, "path")), "/v1/models/bad\x01name\"")
                   == 0);
    CHECK(j && json_is_null(json_object_get(j, "model")) &&
          json_is_null(json_object_get(j, "batch_size")));
    json_decref(j);
    CHECK(line_with(access, "\"POST\"", line, sizeof line));
    j = json_loads(line, 0, NULL);
    CHECK(j && strcmp(json_string_value(json_object_get(j, "model")), "demo") == 0);
    CHECK(j && json_integer_value(json_object_get(j, "batch_size")) == 1);
    CHECK(j && json_integer_value(json_object_get(j, "bytes_in")) > 64);
    CHECK(j && json_real_value(json_object_get(j, "duration_ms")) > 0);
    json_decref(j);
    free(access);
    free(daemon_log);
    unlink(path);
    unlink(p.log_path);
}

static void header_is(const char *what, const http_result *r, const char *name,
                      const char *want)
{
    char v[512];
    int has = http_header(r, name, v, sizeof v);
    if (!want)
        CHECK_MSG(!has, "%s: unexpected %s: %s", what, name, v);
    else
        CHECK_MSG(has && strcmp(v, want) == 0, "%s: %s is '%s', want '%s'", what, name, v, want);
}

TEST(cors)
{
    /* off by default: no CORS headers, OPTIONS is just a method not allowed */
    attnd_proc p;
    CHECK(attnd_proc_start(&p, NULL) == 0);
    if (p.pid <= 0)
        return;
    const char *pre[] = {"Origin: http://app.test", "Access-Control-Request-Method: POST",
                         NULL};
    http_result r;
    CHECK(request(&p, "OPTIONS", "/v1/models/demo/attention", NULL, pre, &r) == 0);
    CHECK_INT_EQ(r.status, 405);
    header_is("off", &r, "Access-Control-Allow-Origin", NULL);
    http_result_free(&r);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);

    const char *args[] = {"--cors-origin", "http://app.test, https://other.test:8443",
                          "--cors-origin", "http://third.test", "--api-keys", "k1", NULL};
    CHECK(attnd_proc_start(&p, args) == 0);
    if (p.pid <= 0)
        return;
    /* a preflight needs no key, and says what the route takes */
    CHECK(request(&p, "OPTIONS", "/v1/models/demo/attention", NULL, pre, &r) == 0);
    CHECK_INT_EQ(r.status, 204);
    header_is("preflight", &r, "Access-Control-Allow-Origin", "http://app.test");
    header_is("preflight", &r, "Access-Control-Allow-Methods", "POST");
    header_is("preflight", &r, "Access-Control-Max-Age", "600");
    header_is("preflight", &r, "Vary", "Origin");
    char v[512];
    CHECK(http_header(&r, "Access-Control-Allow-Headers", v, sizeof v));
    const char *need[] = {"Content-Type", "Authorization", "Inference-Header-Content-Length",
                          "X-Request-Id", "X-Session-Id"};
    for (int i = 0; i < 5; i++)
        CHECK_MSG(strstr(v, need[i]), "Allow-Headers '%s' lacks %s", v, need[i]);
    http_result_free(&r);
    const char *pre3[] = {"Origin: http://third.test", "Access-Control-Request-Method: DELETE",
                          NULL};
    CHECK(request(&p, "OPTIONS", "/v1/sessions/abc", NULL, pre3, &r) == 0 && r.status == 204);
    header_is("session preflight", &r, "Access-Control-Allow-Methods", "GET, HEAD, DELETE");
    header_is("session preflight", &r, "Access-Control-Allow-Origin", "http://third.test");
    http_result_free(&r);
    /* an origin not listed: 403, nothing a browser would accept */
    const char *evil[] = {"Origin: http://evil.test", "Access-Control-Request-Method: POST",
                          NULL};
    CHECK(request(&p, "OPTIONS", "/v1/models/demo/attention", NULL, evil, &r) == 0);
    CHECK_INT_EQ(r.status, 403);
    CHECK(r.body && strstr(r.body, "origin_not_allowed"));
    header_is("evil preflight", &r, "Access-Control-Allow-Origin", NULL);
    http_result_free(&r);
    /* the real requests: allowed origin reads the answer (errors too), others do not */
    const char *get_ok[] = {"Origin: https://other.test:8443", "Authorization: Bearer k1", NULL};
    CHECK(request(&p, "GET", "/v1/models", NULL, get_ok, &r) == 0 && r.status == 200);
    header_is("GET", &r, "Access-Control-Allow-Origin", "https://other.test:8443");
    header_is("GET", &r, "Access-Control-Expose-Headers",
              "X-Request-Id, Inference-Header-Content-Length, Retry-After");
    http_result_free(&r);
    const char *no_key[] = {"Origin: http://app.test", NULL};
    CHECK(request(&p, "GET", "/v1/models", NULL, no_key, &r) == 0 && r.status == 401);
    header_is("401", &r, "Access-Control-Allow-Origin", "http://app.test");
    http_result_free(&r);
    const char *get_evil[] = {"Origin: http://evil.test", "Authorization: Bearer k1", NULL};
    CHECK(request(&p, "GET", "/v1/models", NULL, get_evil, &r) == 0 && r.status == 200);
    header_is("evil GET", &r, "Access-Control-Allow-Origin", NULL);
    http_result_free(&r);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);

    /* "*": any origin, and no Vary */
    const char *any[] = {"--cors-origin", "*", NULL};
    CHECK(attnd_proc_start(&p, any) == 0);
    if (p.pid <= 0)
        return;
    CHECK(request(&p, "GET", "/healthz", NULL, get_evil, &r) == 0 && r.status == 200);
    header_is("*", &r, "Access-Control-Allow-Origin", "*");
    header_is("*", &r, "Vary", NULL);
    http_result_free(&r);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);

    /* a bad origin is a usage error naming it */
    char model[300];
    snprintf(model, sizeof model, "demo=%s", demo());
    const char *bad[] = {"--model", model, "--cors-origin", "https://app.test/", NULL};
    char *out = NULL;
    CHECK_INT_EQ(attnd_run(bad, 10, &out), 2);
    CHECK(out && strstr(out, "https://app.test/") && strstr(out, "trailing"));
    free(out);
}

TEST(config_edges)
{
    char model[300], port[16];
    snprintf(model, sizeof model, "demo=%s", demo());
    snprintf(port, sizeof port, "%d", attnd_free_port());
    /* --listen PORT: that port on the default host */
    const char *print[] = {"--model", model, "--listen", port, "--max-body-bytes", "1536K",
                           "--cors-origin", "http://a.test", "--cors-origin", "*",
                           "--print-config", NULL};
    char *out = NULL, want[128];
    CHECK_INT_EQ(attnd_run(print, 10, &out), 0);
    snprintf(want, sizeof want, "\nlisten = 0.0.0.0:%s  (flag)\n", port);
    CHECK_MSG(out && strstr(out, want), "%s", out ? out : "");
    CHECK(out && strstr(out, "\nmax-body-bytes = 1536K  (flag)\n"));
    CHECK(out && strstr(out, "\nmax-inflight-bytes = 1G  (default)\n"));
    CHECK(out && strstr(out, "\nkv-cache-bytes = 0  (default)\n")); /* auto: sized at start-up */
    CHECK(out && strstr(out, "\ncors-origin = http://a.test,*  (flag)\n"));
    free(out);
    const char *same[] = {"--model", model, "--workers", "2", "--print-config", NULL};
    CHECK_INT_EQ(attnd_run(same, 10, &out), 0);
    CHECK(out && strstr(out, "\nworkers = 2  (flag, = default)\n"));
    free(out);
    /* in a config file: a list as a JSON array, and the flag replaces the file's list */
    char cfg[] = "/tmp/attnd-cfg-XXXXXX";
    int fd = mkstemp(cfg);
    CHECK(fd >= 0);
    dprintf(fd, "{\"models\": [\"%s\"], \"cors_origin\": [\"http://a.test\", "
            "\"https://b.test:8443\"], \"max_body_bytes\": \"64M\"}", model);
    close(fd);
    const char *file[] = {"--config", cfg, "--print-config", NULL};
    CHECK_INT_EQ(attnd_run(file, 10, &out), 0);
    CHECK_MSG(out && strstr(out, "\ncors-origin = http://a.test,https://b.test:8443  (file)\n"),
              "%s", out ? out : "");
    CHECK(out && strstr(out, "\nmax-body-bytes = 64M  (file, = default)\n"));
    free(out);
    const char *file_flag[] = {"--config", cfg, "--cors-origin", "http://c.test",
                               "--print-config", NULL};
    CHECK_INT_EQ(attnd_run(file_flag, 10, &out), 0);
    CHECK(out && strstr(out, "\ncors-origin = http://c.test  (flag)\n"));
    free(out);
    unlink(cfg);
    const char *badfmt[] = {"--model", model, "--log-format", "xml", NULL};
    CHECK_INT_EQ(attnd_run(badfmt, 10, &out), 2);
    CHECK(out && strstr(out, "--log-format must be text or json"));
    free(out);
    const char *badlog[] = {"--model", model, "--access-log", "/nonexistent-dir/access.log",
                            NULL};
    CHECK_INT_EQ(attnd_run(badlog, 10, &out), 2);
    CHECK_MSG(out && strstr(out, "access log /nonexistent-dir/access.log: No such file"), "%s",
              out ? out : "");
    free(out);

    /* and it really serves there */
    pid_t pid = fork();
    if (pid == 0) {
        const char *bin = getenv("ATTND_BIN") ? getenv("ATTND_BIN") : "build/attnd";
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl(bin, bin, "--model", model, "--listen", port, (char *)NULL);
        _exit(127);
    }
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%s/healthz", port);
    long status = 0;
    for (int i = 0; i < 150 && status != 200; i++) {
        http_result r;
        if (http_do("GET", url, NULL, 0, NULL, &r) == 0)
            status = r.status;
        http_result_free(&r);
        if (status != 200)
            attnd_sleep_ms(100);
    }
    CHECK_MSG(status == 200, "--listen %s: /healthz on 127.0.0.1:%s answered %ld", port, port,
              status);
    kill(pid, SIGTERM);
    int ws = 0;
    waitpid(pid, &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

/* The /v1 error of r: code and field, and the message checked for needle. */
static void expect_error(const char *what, const http_result *r, long status, const char *code,
                         const char *field, const char *needle)
{
    json_t *j = json_loads(r->body ? r->body : "", 0, NULL), *e = json_object_get(j, "error");
    const char *c = json_string_value(json_object_get(e, "code"));
    const char *f = json_string_value(json_object_get(e, "field"));
    const char *m = json_string_value(json_object_get(e, "message"));
    CHECK_MSG(r->status == status && c && strcmp(c, code) == 0 && f && strcmp(f, field) == 0 &&
                  m && strstr(m, needle),
              "%s: %ld %s", what, r->status, r->body ? r->body : "");
    json_decref(j);
}

TEST(rough_edges)
{
    char second[300];
    snprintf(second, sizeof second, "other=%s", demo());
    char first[300];
    snprintf(first, sizeof first, "demo=%s", demo());
    const char *args[] = {"--model", first, "--model", second, NULL};
    attnd_proc p;
    CHECK(attnd_proc_start(&p, args) == 0);
    if (p.pid <= 0)
        return;
    http_result r;
    CHECK(request(&p, "GET", "/v1/models/dmeo", NULL, NULL, &r) == 0);
    expect_error("404", &r, 404, "model_not_found", "", "loaded: demo, other");
    http_result_free(&r);
    CHECK(request(&p, "POST", "/v1/models/nope/attention", "{}", NULL, &r) == 0);
    expect_error("404 POST", &r, 404, "model_not_found", "", "loaded: demo, other");
    http_result_free(&r);

    /* a typo gets the nearest name; a stranger name the list */
    CHECK(request(&p, "POST", "/v1/models/demo/attention",
                  "{\"query\":[[1]],\"need_weight\":true}", NULL, &r) == 0);
    expect_error("typo", &r, 400, "unknown_field", "need_weight",
                 "did you mean \"need_weights\"?");
    http_result_free(&r);
    CHECK(request(&p, "POST", "/v1/models/demo/attention",
                  "{\"query\":[[1]],\"attention_mask\":[[0]]}", NULL, &r) == 0);
    expect_error("far", &r, 400, "unknown_field", "attention_mask", "takes query, key, value");
    CHECK(r.body && !strstr(r.body, "did you mean"));
    http_result_free(&r);

    /* what json.dumps writes for float('nan') and float('inf') */
    char *nan = rows_body(2, "NaN", "0.5");
    CHECK(request(&p, "POST", "/v1/models/demo/attention", nan, NULL, &r) == 0);
    expect_error("NaN", &r, 400, "non_finite", "query[1][63]", "NaN");
    http_result_free(&r);
    free(nan);
    char *inf = rows_body(3, "-Infinity", "1e-3");
    CHECK(request(&p, "POST", "/v1/models/demo/attention", inf, NULL, &r) == 0);
    expect_error("-Infinity", &r, 400, "non_finite", "query[2][63]", "-Infinity");
    http_result_free(&r);
    free(inf);
    CHECK(request(&p, "POST", "/v2/models/demo/infer",
                  "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,1,2],\"datatype\":\"FP32\","
                  "\"data\":[0.5,Infinity]}]}", NULL, &r) == 0);
    CHECK_MSG(r.status == 400 && r.body && strstr(r.body, "inputs[0].data[1]") &&
                  strstr(r.body, "Infinity"),
              "v2: %ld %s", r.status, r.body ? r.body : "");
    http_result_free(&r);
    /* a session append decodes with the same codec */
    CHECK(request(&p, "POST", "/v1/models/demo/sessions", "{}", NULL, &r) == 0);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    const char *sid = json_string_value(json_object_get(j, "id"));
    CHECK_MSG(r.status == 201 && sid, "session create: %ld %s", r.status, r.body ? r.body : "");
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s/append", sid ? sid : "x");
    http_result_free(&r);
    char *step = rows_body(1, "NaN", "0.5");
    CHECK(request(&p, "POST", path, step, NULL, &r) == 0);
    expect_error("append NaN", &r, 400, "non_finite", "query[0][63]", "NaN");
    http_result_free(&r);
    CHECK(request(&p, "POST", path, "{\"query\":[[1]],\"need_weigths\":true}", NULL, &r) == 0);
    expect_error("append typo", &r, 400, "unknown_field", "need_weigths", "need_weights");
    http_result_free(&r);
    free(step);
    json_decref(j);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);
}

int main(void)
{
    RUN(request_ids);
    RUN(access_log_text);
    RUN(log_format_json);
    RUN(cors);
    RUN(config_edges);
    RUN(rough_edges);
    return check_summary();
}
