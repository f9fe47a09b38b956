/* routes.h — what attnd answers: route resolution, the GET handlers, request
 * pre-checks (length, media type, size), and mapping a finished attention
 * request to a response. No libmicrohttpd here; http.c does the transport.
 */
#ifndef ATTND_ROUTES_H
#define ATTND_ROUTES_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "codec.h"
#include "config.h"
#include "metrics.h"
#include "models.h"
#include "request.h"

typedef enum attnd_state {
    ATTND_STATE_STARTING = 0,  /* listening, models loading: /readyz 503 not_ready */
    ATTND_STATE_READY = 1,
    ATTND_STATE_DRAINING = 2   /* shutting down: /readyz 503 draining               */
} attnd_state;

/* What the handlers share. models is filled before state becomes READY and is
 * read only after an acquire load of state sees READY (or DRAINING). */
typedef struct attnd_app {
    const attnd_config *cfg;
    attnd_models *models;
    attnd_metrics *metrics;
    attnd_decode_limits limits;
    _Atomic int state;         /* attnd_state */
    struct attnd_auth *auth;   /* API keys; NULL = no authentication          */
    struct attnd_sessions *sessions; /* streaming sessions (session_routes.c)  */
} attnd_app;

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
    size_t inference_header_length; /* v2 binary body: its JSON header's bytes
                                       (Inference-Header-Content-Length); 0 = none */
} attnd_reply;

/* The request's target after resolution. */
typedef struct attnd_target {
    attnd_route route;
    attnd_model *model;        /* for model routes and /v1/attention: a
                                  reference (attnd_models_find); whoever holds
                                  the target releases it (attnd_model_release) */
    int is_post;               /* the route takes POST (a body)               */
    const char *path;          /* the request path (borrowed)                 */
} attnd_target;

/* Resolves method + path. Returns 0 with *t filled, or -1 with *t->route set
 * (for metrics) and *err (404 not_found/model_not_found, 405 + *allow,
 * 503 not_ready while starting). */
int attnd_route_resolve(attnd_app *app, const char *method, const char *url, attnd_target *t,
                        attnd_http_error *err, const char **allow);

/* Header checks for a POST before its body is read: 411 without a length, 413
 * when Content-Length is over max_body_bytes, 415 for a non-JSON type.
 * content_length/transfer_encoding/content_type may be NULL (header absent).
 * Returns 0, or -1 with *err. */
int attnd_route_check_post(const attnd_app *app, const char *content_length,
                           const char *transfer_encoding, const char *content_type,
                           attnd_http_error *err);

/* Answers a GET route (models, health, readiness, metrics). */
void attnd_route_get(attnd_app *app, const attnd_target *t, attnd_reply *out);

/* The response for a finished attention request (any outcome). Borrows req. */
void attnd_route_finish(attnd_app *app, const attnd_model *model, const attnd_request *req,
                        attnd_reply *out);

/* The error a finished request that is not ATTND_DONE_OK answers with (504 timeout,
 * 400/413/500 from the library, 503 draining). */
void attnd_route_outcome_error(const attnd_request *req, attnd_http_error *e);

/* The response for err (Retry-After: 1 on 503s). */
void attnd_reply_error(attnd_reply *out, const attnd_http_error *err);

#endif
