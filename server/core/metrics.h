/* metrics.h — attnd's Prometheus registry: fixed metric families updated with
 * relaxed atomics (no lock anywhere, so a scrape never waits on compute) and
 * rendered in the text exposition format 0.0.4.
 */
#ifndef ATTND_METRICS_H
#define ATTND_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

typedef struct attnd_metrics attnd_metrics;

/* A registry for n_models models named names[i] (copied; NULL reserves slot i
 * for a model named later with attnd_metrics_name_model) and n_routes routes
 * labelled route_labels[i] (borrowed: static strings, e.g. the route table's
 * path templates). model index -1 below means "no model" (label model="").
 * Returns NULL on allocation failure. Free with attnd_metrics_free. */
attnd_metrics *attnd_metrics_create(int n_models, const char *const *names, int n_routes,
                                    const char *const *route_labels);
void attnd_metrics_free(attnd_metrics *m);

/* Names reserved slot i (a model loaded at run time); its series appear from
 * now on. A slot is named once: later calls do nothing. */
void attnd_metrics_name_model(attnd_metrics *m, int model, const char *name);

/* Slot i passes to another model (the repository reuses an unloaded model's
 * slot once nothing holds its versions): named name, its series start at 0. */
void attnd_metrics_rename_model(attnd_metrics *m, int model, const char *name);

/* Model i was unloaded: its attnd_model_info series goes until it loads again. */
void attnd_metrics_model_unloaded(attnd_metrics *m, int model);

/* A repository load (load = 1) or unload (0) finished:
 * attnd_repository_operations_total{operation,result}++. m may be NULL. */
void attnd_metrics_repository(attnd_metrics *m, int load, int ok);

/* Publishes model i's attnd_model_info series (after it loaded). */
void attnd_metrics_set_model_info(attnd_metrics *m, int model, const attn_layer_info *info);

/* A finished HTTP request on route (an index into the labels): counts
 * attnd_requests_total{model,route,status} and, when attention is 1 and a model
 * is known, attnd_request_duration_seconds. */
void attnd_metrics_request_done(attnd_metrics *m, int model, int route, int attention,
                                int status, int64_t duration_ns);

/* Per computed request: its queue wait and its batch's compute time. */
void attnd_metrics_request_timing(attnd_metrics *m, int model, int64_t queue_us,
                                  int64_t compute_us);

/* Per batch (from the scheduler's hook, on a worker thread). */
void attnd_metrics_batch(attnd_metrics *m, int model, int n_requests, size_t n_tokens);

/* A stateless request computed on its HTTP thread (attnd_scheduler_run_inline). */
void attnd_metrics_inline_request(attnd_metrics *m, int model);

/* Model i's decode loop computed `iterations` (1, or 0 for the second part
 * of an iteration reported in two) with `steps` whole stream steps and a
 * piece of piece_rows rows of a chunked prefill (0: none) in compute_us:
 * attnd_decode_iterations_total, attnd_decode_busy_seconds_total,
 * attnd_decode_steps_total, attnd_prefill_pieces_total and
 * attnd_prefill_piece_rows_total. */
void attnd_metrics_decode_iteration(attnd_metrics *m, int model, int iterations, int steps,
                                    int piece_rows, int64_t compute_us);

/* A SIGHUP reload finished: attnd_reloads_total{result="ok"|"error"}++. */
void attnd_metrics_reload(attnd_metrics *m, int ok);

/* A large body decoded (encode 0) or answer encoded (1) on a codec thread:
 * attnd_http_offloaded_total{work="decode"|"encode"}++. */
void attnd_metrics_offloaded(attnd_metrics *m, int encode);

/* attnd_requests_in_flight += delta. */
void attnd_metrics_in_flight_add(attnd_metrics *m, int delta);

/* Why a session was evicted (attnd_session_evictions_total's reason label). */
typedef enum attnd_eviction {
    ATTND_EVICT_LRU = 0,     /* least recently used: the KV pool or max_sessions full */
    ATTND_EVICT_TTL = 1,     /* idle past its TTL                                     */
    ATTND_EVICT_RETIRED = 2, /* it held a retired model version over --max-retired-bytes */
    ATTND_EVICT_COUNT
} attnd_eviction;

/* Streaming sessions: the attnd_sessions and attnd_kv_cache_bytes gauges (set by
 * the session store whenever they change), one eviction (why), and one append's
 * duration (decode, queue, compute, commit) for model i. */
void attnd_metrics_sessions_set(attnd_metrics *m, int sessions, int64_t kv_bytes);
/* The attnd_retired_model_versions / attnd_retired_model_bytes gauges: replaced
 * or unloaded versions that requests or sessions still hold, and their weights. */
void attnd_metrics_retired_set(attnd_metrics *m, int versions, int64_t bytes);

/* The attnd_kv_cache_capacity_bytes gauge: the KV page pool's size (set once). */
void attnd_metrics_kv_capacity_set(attnd_metrics *m, int64_t bytes);
void attnd_metrics_session_evicted(attnd_metrics *m, attnd_eviction why);
void attnd_metrics_session_append(attnd_metrics *m, int model, int64_t duration_ns);

/* Renders every family. queue_depths[i] is model i's current queue depth (or
 * -1 while it is not loaded). Returns a malloc'd NUL-terminated text (caller
 * frees) and its length in *len, or NULL on allocation failure. */
char *attnd_metrics_render(attnd_metrics *m, const int *queue_depths, size_t *len);

#endif
