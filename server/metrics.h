/* metrics.h — attnd's Prometheus registry: fixed metric families updated with
 * relaxed atomics (no lock anywhere, so a scrape never waits on compute) and
 * rendered in the text exposition format 0.0.4.
 */
#ifndef ATTND_METRICS_H
#define ATTND_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

/* The route label: path templates, never raw paths (bounded cardinality). */
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
    ATTND_ROUTE_COUNT
} attnd_route;

/* The path template of a route ("/v1/models/{name}/attention", ...). */
const char *attnd_route_name(attnd_route route);

typedef struct attnd_metrics attnd_metrics;

/* A registry for n_models models named names[i] (copied). model index -1 below
 * means "no model" (label model=""). Returns NULL on allocation failure.
 * Free with attnd_metrics_free. */
attnd_metrics *attnd_metrics_create(int n_models, const char *const *names);
void attnd_metrics_free(attnd_metrics *m);

/* Publishes model i's attnd_model_info series (after it loaded). */
void attnd_metrics_set_model_info(attnd_metrics *m, int model, const attn_layer_info *info);

/* A finished HTTP request: counts attnd_requests_total{model,route,status} and,
 * for attention routes with a model, attnd_request_duration_seconds. */
void attnd_metrics_request_done(attnd_metrics *m, int model, attnd_route route, int status,
                                int64_t duration_ns);

/* Per computed request: its queue wait and its batch's compute time. */
void attnd_metrics_request_timing(attnd_metrics *m, int model, int64_t queue_us,
                                  int64_t compute_us);

/* Per batch (from the scheduler's hook, on a worker thread). */
void attnd_metrics_batch(attnd_metrics *m, int model, int n_requests, size_t n_tokens);

/* A SIGHUP reload finished: attnd_reloads_total{result="ok"|"error"}++. */
void attnd_metrics_reload(attnd_metrics *m, int ok);

/* attnd_requests_in_flight += delta. */
void attnd_metrics_in_flight_add(attnd_metrics *m, int delta);

/* Streaming sessions: the attnd_sessions and attnd_kv_cache_bytes gauges (set by
 * the session store whenever they change), one eviction (ttl = 1: expired,
 * 0: least recently used under the budget or max_sessions), and one append's
 * duration (decode, queue, compute, commit) for model i. */
void attnd_metrics_sessions_set(attnd_metrics *m, int sessions, int64_t kv_bytes);
void attnd_metrics_session_evicted(attnd_metrics *m, int ttl);
void attnd_metrics_session_append(attnd_metrics *m, int model, int64_t duration_ns);

/* Renders every family. queue_depths[i] is model i's current queue depth (or
 * -1 while it is not loaded). Returns a malloc'd NUL-terminated text (caller
 * frees) and its length in *len, or NULL on allocation failure. */
char *attnd_metrics_render(attnd_metrics *m, const int *queue_depths, size_t *len);

#endif
