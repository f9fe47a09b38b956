/* reply.h — a response about to be sent, and what every protocol handler
 * shares to build one: the /v1 error form, the JSON POST header checks, and the
 * one mapping from a finished request's outcome (scheduler, library) to a wire
 * error. No libmicrohttpd here: http.c turns an attnd_reply into bytes.
 */
#ifndef ATTND_REPLY_H
#define ATTND_REPLY_H

#include <stddef.h>

#include "core/request.h"

/* A response about to be sent. body is NULL only when allocation failed (the
 * transport then sends a fixed 500). */
typedef struct attnd_reply {
    int status;
    char *body;                /* malloc'd, or static when body_static      */
    size_t len;
    int body_static;
    const char *content_type;
    const char *allow;         /* Allow header, or NULL                       */
    int retry_after;           /* seconds; 0 = no Retry-After header          */
    char code[40];             /* error code, for the log ("" on success)     */
    char log_detail[512];      /* "field: message" for the log                */
    const char *header_name;   /* one more response header a protocol needs
                                  (v2: Inference-Header-Content-Length), or NULL */
    char header_value[32];
    const char *request_id;    /* set by the transport before any handler runs:
                                  error bodies carry it ("request_id")          */
} attnd_reply;

extern const char attnd_json_type[]; /* "application/json" */

/* out answers err with body (malloc'd by a protocol's error encoder; NULL on no
 * memory): status, JSON type, Retry-After: 1 on 503s, code and detail for the
 * log. Takes body. */
void attnd_reply_error_body(attnd_reply *out, const attnd_http_error *err, char *body,
                            size_t len);

/* The /v1 error form: {"error":{"code","message","field","request_id"}}
 * (attnd_reply_error_body; request_id is out->request_id, omitted when NULL). */
void attnd_reply_error(attnd_reply *out, const attnd_http_error *err);

/* A copy of text as the body. */
void attnd_reply_text(attnd_reply *out, int status, const char *type, const char *text);

/* A body built elsewhere (malloc'd, taken; NULL = out of memory). */
void attnd_reply_body(attnd_reply *out, int status, const char *type, char *body, size_t len);

/* Header checks for a JSON POST before its body is read: 411 without a length,
 * 413 when Content-Length is over max_body_bytes, 415 for a non-JSON type.
 * content_length/transfer_encoding/content_type may be NULL (header absent).
 * Returns 0, or -1 with *err. */
int attnd_check_json_post(long long max_body_bytes, const char *content_length,
                          const char *transfer_encoding, const char *content_type,
                          attnd_http_error *err);

/* The wire error for a library refusal (st != ATTN_OK) with its message: 400
 * invalid_value (non-finite, invalid argument), 400 invalid_shape, 413
 * limit_exceeded (sizes, or magnitudes that would overflow float32), 400
 * unsupported, else 500 internal. field names the culprit ("" when none). */
void attnd_lib_error(attn_status st, const attn_error *ae, const char *field,
                     attnd_http_error *e);

/* The error a finished request that is not ATTND_DONE_OK answers with: 504
 * timeout, 400/413/500 from the library's status, 503 draining. */
void attnd_outcome_error(const attnd_request *req, attnd_http_error *e);

#endif
