/* route.h — attnd's route table: every path the server answers, in one place.
 * A row names a path pattern, the methods it takes, whether it needs a model
 * (and where the model comes from), and the protocol handler that serves it.
 * Adding a route is one row here plus its handler; http.c does not change.
 */
#ifndef ATTND_ROUTE_H
#define ATTND_ROUTE_H

#include <stddef.h>

#include "protocol/handler.h"

/* A route's identity: the metrics label slot. Append-only (the order is the
 * order /metrics prints). */
typedef enum attnd_route {
    ATTND_ROUTE_MODEL_ATTENTION = 0, /* POST /v1/models/{name}/attention */
    ATTND_ROUTE_ATTENTION,           /* POST /v1/attention               */
    ATTND_ROUTE_MODELS,              /* GET /v1/models                   */
    ATTND_ROUTE_MODEL,               /* GET /v1/models/{name}            */
    ATTND_ROUTE_HEALTHZ,
    ATTND_ROUTE_READYZ,
    ATTND_ROUTE_METRICS,
    ATTND_ROUTE_OTHER,               /* anything unknown (404)           */
    ATTND_ROUTE_UI,                  /* GET /, /ui/... (the playground)  */
    ATTND_ROUTE_V2_SERVER,           /* GET /v2 (server metadata)        */
    ATTND_ROUTE_V2_LIVE,             /* GET /v2/health/live              */
    ATTND_ROUTE_V2_READY,            /* GET /v2/health/ready             */
    ATTND_ROUTE_V2_MODEL,            /* GET /v2/models/{name}            */
    ATTND_ROUTE_V2_MODEL_READY,      /* GET /v2/models/{name}/ready      */
    ATTND_ROUTE_V2_INFER,            /* POST /v2/models/{name}/infer     */
    ATTND_ROUTE_SESSIONS,            /* POST /v1/models/{name}/sessions  */
    ATTND_ROUTE_SESSION,             /* GET, DELETE /v1/sessions/{id}    */
    ATTND_ROUTE_SESSION_APPEND,      /* POST /v1/sessions/{id}/append    */
    ATTND_ROUTE_SESSION_LIST,        /* GET /v1/sessions                 */
    ATTND_ROUTE_SESSION_FORK,        /* POST /v1/sessions/{id}/fork      */
    ATTND_ROUTE_REPO_INDEX,          /* GET, POST /v2/repository/index   */
    ATTND_ROUTE_REPO_LOAD,           /* POST /v2/repository/models/{name}/load   */
    ATTND_ROUTE_REPO_UNLOAD,         /* POST /v2/repository/models/{name}/unload */
    ATTND_ROUTE_COUNT
} attnd_route;

/* Where a route's model comes from. */
typedef enum attnd_route_model {
    ATTND_NO_MODEL = 0,        /* none (or the handler finds one: sessions)     */
    ATTND_PATH_MODEL,          /* the {name} segment: 404 model_not_found       */
    ATTND_DEFAULT_MODEL        /* --default-model, or the only one loaded       */
} attnd_route_model;

typedef struct attnd_route_def {
    attnd_route id;
    const char *pattern;       /* literal segments, at most one {name} or {id}
                                  (one non-empty segment) and one {version} (a
                                  model version: resolution checks it is the
                                  loaded one); a final "*" matches any rest      */
    const char *methods;       /* e.g. "GET, HEAD": matched by token, and the
                                  Allow header of a 405                          */
    attnd_route_model model;
    int needs_models;          /* 503 not_ready while models load               */
    int (*accepts)(const attnd_app *app, const char *path); /* NULL = any match  */
    const attnd_handler *handler;
} attnd_route_def;

/* Resolves method + path: fills x (app, method, path, param, and a model
 * reference the caller releases with attnd_model_release) and *route.
 * Returns 0; or -1 with *err: 404 not_found (no row: *route NULL, its error is
 * attnd_route_fallback's), 405 method_not_allowed (with *allow), 503 not_ready
 * while starting, 404 model_not_found (naming the loaded models; also for a
 * {version} other than the loaded one). */
int attnd_route_resolve(attnd_app *app, const char *method, const char *path, attnd_exchange *x,
                        const attnd_route_def **route, attnd_http_error *err,
                        const char **allow);

/* The methods of the row path matches ("GET, HEAD"), or NULL when none does:
 * what a CORS preflight for path may ask for. */
const char *attnd_route_methods(const attnd_app *app, const char *path);

/* Who answers requests that matched no row (their errors are /v1's). */
const attnd_handler *attnd_route_fallback(void);

/* The metrics label of a route: its path template ("/v1/models/{name}/attention").
 * Labels for every id, ATTND_ROUTE_COUNT of them, in id order. */
const char *attnd_route_label(attnd_route id);
const char *const *attnd_route_labels(void);

/* 1 for routes whose end-to-end duration is an attention request's
 * (attnd_request_duration_seconds). */
int attnd_route_is_attention(attnd_route id);

/* 1 for the routes monitoring must always reach (/healthz, /readyz,
 * /v2/health/live, /v2/health/ready, /metrics): http.c answers them on the
 * connections it keeps above --max-connections. */
int attnd_route_is_probe(attnd_route id);

#endif
