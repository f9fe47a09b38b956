/* handler.h — the interface every protocol implements, and the exchange it
 * works on. A route table row (route.c) names one handler; http.c drives any
 * handler through these callbacks and knows no protocol (h2o's on_req is the
 * model). A handler knows no sockets: it reads headers through x->header and
 * writes an attnd_reply.
 *
 * One exchange, as http.c drives it:
 *   resolve (route.c fills x)  ->  POST: check_headers  ->  body arrives  ->
 *   answer(x)                           routes answered on the HTTP thread, or
 *   decode(x) -> scheduler -> finish(x) routes that compute on a worker
 *   -> end(x) when the exchange is over, whatever happened.
 * Any refusal on the way is written by error(), in the protocol's own form.
 */
#ifndef ATTND_HANDLER_H
#define ATTND_HANDLER_H

#include <stddef.h>

#include "protocol/app.h"
#include "protocol/reply.h"
#include "core/request.h"

typedef struct attnd_exchange attnd_exchange;

/* A request header's (or query argument's) value, or NULL when absent. */
typedef const char *(*attnd_header_fn)(const attnd_exchange *x, const char *name);

/* Counts bytes of memory the exchange is about to hold (a parse tree) against
 * max_inflight_bytes until it ends. Returns 0, or -1 with *err: 413
 * limit_exceeded (more than the whole budget) or 503 overloaded (no room now). */
typedef int (*attnd_reserve_fn)(attnd_exchange *x, size_t bytes, attnd_http_error *err);

/* One HTTP request/response, protocol-neutral. Zeroed, then filled by
 * attnd_route_resolve (app .. model) and by http.c (header, transport, body). */
struct attnd_exchange {
    attnd_app *app;
    const char *method;        /* "GET", "POST", ... (borrowed)                  */
    const char *path;          /* the request path (borrowed)                    */
    const char *param;         /* the {name} or {id} segment of the path, or NULL */
    size_t param_len;
    const char *version;       /* the {version} segment (/versions/N), or NULL   */
    size_t version_len;
    attnd_model *model;        /* a reference the exchange holds, or NULL: set by
                                  resolution ({name}, or the default model) or by
                                  decode (a session's own version); http.c
                                  releases it when the exchange ends             */
    const char *body;          /* the whole body, NUL-terminated ("" for none):
                                  valid in answer and decode only                */
    size_t body_len;
    attnd_header_fn header;
    attnd_header_fn query;     /* a URL query argument (?name=value), or NULL      */
    attnd_reserve_fn reserve;  /* NULL: nothing is counted                       */
    void *transport;           /* http.c's, for header and reserve               */
    void *state;               /* the handler's own, from decode until end       */
};

typedef struct attnd_handler {
    const char *protocol;      /* "v1", "v2", "session", "ops": for logs and docs */

    /* A POST's headers, before any body byte is read: 400/411/413/415. NULL: no
     * check. Returns 0, or -1 with *err (413 is answered at once). */
    int (*check_headers)(attnd_exchange *x, attnd_http_error *err);

    /* Routes answered on the HTTP thread (reads, session create/delete): fills
     * *out. NULL for routes that compute. */
    void (*answer)(attnd_exchange *x, attnd_reply *out);

    /* Routes that compute: the body into a request for x->model's scheduler.
     * Returns 0 with *out (http.c frees it with attnd_request_free); or -1 with
     * *err, holding nothing new. */
    int (*decode)(attnd_exchange *x, attnd_request **out, attnd_http_error *err);

    /* The reply for a request the scheduler finished, whatever its outcome. */
    void (*finish)(attnd_exchange *x, const attnd_request *req, attnd_reply *out);

    /* Gives back whatever decode left in x->state. Idempotent; NULL = nothing. */
    void (*end)(attnd_exchange *x);

    /* err as this protocol writes errors. Never NULL. */
    void (*error)(attnd_reply *out, const attnd_http_error *err);
} attnd_handler;

/* check_headers for a JSON body (attnd_check_json_post with x's headers and
 * max_body_bytes): the /v1 and session routes use it as it is. */
int attnd_handler_check_json(attnd_exchange *x, attnd_http_error *err);

/* x->reserve for codecs (attnd_decode_opts.reserve, ctx = x): counts nothing
 * when x has no reserve. */
int attnd_handler_reserve(void *x, size_t bytes, attnd_http_error *err);

/* The v2 binary tensor convention (Triton's binary_tensor_data): a JSON header
 * of Inference-Header-Content-Length bytes, then raw tensors. */
extern const char attnd_tensor_header[];   /* "Inference-Header-Content-Length" */
extern const char attnd_binary_type[];     /* "application/octet-stream"        */

/* x's Inference-Header-Content-Length: -1 when absent, -2 when it is not a
 * non-negative decimal integer. */
long long attnd_handler_tensor_header_length(const attnd_exchange *x);

/* check_headers for a body in that convention: as attnd_handler_check_json,
 * except that any media type will do when the header is given (which must then
 * be an integer: 400 naming it), and application/octet-stream without it means
 * an all-JSON body (the decoder says if it is not). */
int attnd_handler_check_tensor_post(attnd_exchange *x, attnd_http_error *err);

/* What a decoded request must also satisfy on its model, whatever the
 * protocol: no cross-attention over a rotary layer (400 unsupported, field
 * "key"). Returns 0, or -1 with *err. */
int attnd_handler_check_request(const attnd_exchange *x, const attnd_request *req,
                                attnd_http_error *err);

/* The common start of finish: when req did not succeed, writes its error (504,
 * 4xx/500 from the library, 503) into *out with error (the protocol's form) and
 * returns 0; when it did, counts its queue and compute time for x->model and
 * returns 1: the handler then encodes the result. */
int attnd_handler_succeeded(attnd_exchange *x, const attnd_request *req,
                            void (*error)(attnd_reply *out, const attnd_http_error *err),
                            attnd_reply *out);

#endif
