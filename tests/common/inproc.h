/* inproc.h — attnd's request path in the test process, without sockets: an
 * attnd_app built as main.c builds it (settings from argv, models, metrics,
 * API keys, the session store), and whole requests (method, path with query,
 * headers, body) run through what http.c does with them — framing and Expect
 * checks, API keys, route resolution, the handler's check_headers, answer or
 * decode -> the model's scheduler -> finish, end — into an attnd_reply.
 * For tests that drive the handlers with no daemon (allocation-failure
 * injection, the HTTP fuzz target). Budgets (max_inflight_bytes) are counted
 * per call, not across calls.
 */
#ifndef ATTND_TEST_INPROC_H
#define ATTND_TEST_INPROC_H

#include <stddef.h>

#include "protocol/app.h"
#include "protocol/reply.h"

typedef struct inproc inproc;

/* argv as attnd's command line (argv[0] included). Returns NULL with err. */
inproc *inproc_start(int argc, char **argv, char *err, size_t errlen);

/* Drains the schedulers and frees everything. NULL allowed. */
void inproc_stop(inproc *p);

/* The app, e.g. to change its state. */
attnd_app *inproc_app(inproc *p);

typedef struct inproc_header {
    const char *name, *value;
} inproc_header;

typedef struct inproc_call {
    const char *method;
    const char *path;              /* may carry "?name=value&..."             */
    const inproc_header *headers;  /* n_headers of them; names match any case */
    int n_headers;
    const char *body;              /* body_len bytes (any bytes), or NULL     */
    size_t body_len;
} inproc_call;

/* Runs one request and fills *out like the handler would for http.c. Always
 * returns with out->status set: out->body is NULL when an allocation for the
 * body failed (http.c then sends a fixed 500). Free with inproc_reply_free. */
void inproc_run(inproc *p, const inproc_call *call, attnd_reply *out);

void inproc_reply_free(attnd_reply *r);

#endif
