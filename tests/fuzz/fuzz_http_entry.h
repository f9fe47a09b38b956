/* fuzz_http_entry.h — the body of the HTTP fuzz target, shared by the libFuzzer
 * binary (tests/fuzz/fuzz_http.c, scripts/fuzz.sh) and its replay
 * (tests/unit/test_fuzz_replay.c). An input is a whole request as text:
 *
 *     METHOD SP PATH[?QUERY] LF          (the request line; CR before LF allowed)
 *     Name: value LF ...                 (headers, up to FUZZ_HTTP_MAX_HEADERS)
 *     LF
 *     body bytes ...                     (everything after the blank line)
 *
 * run in-process (tests/common/inproc) through the daemon's route table, the
 * handler's header checks, decode/answer, the scheduler and finish on the demo
 * model. Inputs that do not parse into a request line are skipped. Invariants
 * besides the sanitizers': a status in 200..599; a body unless the answer is
 * 500 for want of memory; every 4xx/5xx error is JSON, and every JSON answer
 * parses; an error carries a code and a message (v2: {"error": "..."}); a 405
 * carries Allow.
 */
#ifndef ATTN_FUZZ_HTTP_ENTRY_H
#define ATTN_FUZZ_HTTP_ENTRY_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_entry.h"
#include "inproc.h"

#define FUZZ_HTTP_MAX_HEADERS 16

/* The daemon the target answers with: the demo model and small limits. */
static inline inproc *fuzz_http_start(const char *demo_path, char *why)
{
    char model[512];
    snprintf(model, sizeof model, "demo=%s", demo_path);
    char *argv[] = {"attnd", "--model", model, "--workers", "1", "--max-queue-delay-us", "0",
                    "--log-level", "error", "--max-seq-len", "64", "--max-batch-seqs", "16",
                    "--max-weights-elems", "4096", "--max-sessions", "8",
                    "--max-body-bytes", "65536", NULL};
    inproc *p = inproc_start((int)(sizeof argv / sizeof argv[0]) - 1, argv, why, FUZZ_BUG_MAX);
    return p;
}

/* One line of s (up to LF, without a CR before it) into a NUL-terminated copy
 * in out; advances *pos. Returns 0, or -1 at the end of the input. */
static inline int fuzz_http_line(const char *s, size_t n, size_t *pos, char *out, size_t cap)
{
    if (*pos >= n)
        return -1;
    const char *lf = memchr(s + *pos, '\n', n - *pos);
    size_t end = lf ? (size_t)(lf - s) : n, len = end - *pos;
    if (len && s[end - 1] == '\r')
        len--;
    if (len >= cap || memchr(s + *pos, '\0', len))
        return -1; /* too long, or a NUL: no request line or header has one */
    memcpy(out, s + *pos, len);
    out[len] = '\0';
    *pos = lf ? end + 1 : n;
    return 0;
}

/* The request an input spells; 0, or -1 when it spells none. lines holds the
 * text the call's strings point into. */
typedef struct fuzz_http_req {
    char lines[FUZZ_HTTP_MAX_HEADERS + 1][512];
    inproc_header headers[FUZZ_HTTP_MAX_HEADERS];
    inproc_call call;
} fuzz_http_req;

static inline int fuzz_http_parse(const uint8_t *data, size_t size, fuzz_http_req *r)
{
    const char *s = (const char *)data;
    size_t pos = 0;
    memset(&r->call, 0, sizeof r->call);
    if (fuzz_http_line(s, size, &pos, r->lines[0], sizeof r->lines[0]) != 0)
        return -1;
    char *sp = strchr(r->lines[0], ' ');
    if (!sp || sp == r->lines[0] || sp[1] != '/')
        return -1;
    *sp = '\0';
    r->call.method = r->lines[0];
    r->call.path = sp + 1;
    for (int i = 1; i <= FUZZ_HTTP_MAX_HEADERS; i++) {
        char *line = r->lines[i];
        if (fuzz_http_line(s, size, &pos, line, sizeof r->lines[i]) != 0 || !line[0])
            break;
        char *colon = strchr(line, ':');
        if (!colon || colon == line)
            return -1;
        *colon = '\0';
        const char *v = colon + 1;
        while (*v == ' ')
            v++;
        r->headers[r->call.n_headers++] = (inproc_header){line, v};
    }
    r->call.headers = r->headers;
    r->call.body = s + pos;
    r->call.body_len = size - pos;
    return 0;
}

/* The reply's invariants (see the top). */
static inline int fuzz_http_check(const attnd_reply *a, char *bug)
{
    FUZZ_REQUIRE(a->status >= 200 && a->status <= 599, bug, "status %d", a->status);
    FUZZ_REQUIRE(a->body || a->status == 500, bug, "a %d without a body", a->status);
    if (!a->body)
        return 0;
    FUZZ_REQUIRE(a->status != 405 || a->allow, bug, "a 405 without Allow");
    int json = a->content_type && strcmp(a->content_type, "application/json") == 0;
    FUZZ_REQUIRE(json || a->status < 400, bug, "a %d that is not JSON (%s)", a->status,
                 a->content_type ? a->content_type : "no type");
    if (!json || a->header_name) /* v2 binary answers: a JSON header, then tensors */
        return 0;
    json_error_t je;
    json_t *root = json_loadb(a->body, a->len, 0, &je);
    FUZZ_REQUIRE(root, bug, "a %d whose JSON body does not parse: %s: %.120s", a->status,
                 je.text, a->body);
    const json_t *err = json_object_get(root, "error");
    int ok = a->status < 400 || json_is_string(err) ||
             (json_is_string(json_object_get(err, "code")) &&
              json_is_string(json_object_get(err, "message")));
    json_decref(root);
    FUZZ_REQUIRE(ok, bug, "a %d without an error code and message: %.160s", a->status, a->body);
    return 0;
}

/* One input: 0 when every invariant held (or it spells no request). */
static inline int fuzz_http_one(inproc *p, const uint8_t *data, size_t size, char *bug)
{
    fuzz_http_req *r = malloc(sizeof *r);
    FUZZ_REQUIRE(r, bug, "out of memory");
    int rc = 0;
    if (fuzz_http_parse(data, size, r) == 0) {
        attnd_reply a;
        inproc_run(p, &r->call, &a);
        rc = fuzz_http_check(&a, bug);
        inproc_reply_free(&a);
    }
    free(r);
    return rc;
}

#endif
