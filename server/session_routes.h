/* session_routes.h — the streaming-session routes on the wire: path matching,
 * POST /v1/models/{name}/sessions (create), GET and DELETE /v1/sessions/{id},
 * and POST /v1/sessions/{id}/append, which goes through the model's scheduler
 * like any attention request with its attn_seq pointing into the session's KV
 * cache. The store itself (ids, budget, eviction) is sessions.c; JSON bodies are
 * decoded here (create) or by codec.c (append, attnd_codec_decode_request_ex).
 */
#ifndef ATTND_SESSION_ROUTES_H
#define ATTND_SESSION_ROUTES_H

#include <stddef.h>
#include <stdint.h>

#include "routes.h"
#include "sessions.h"

/* An append's state across its life in http.c (zero-initialised there). */
typedef struct attnd_session_call {
    attnd_session *sess;  /* the append slot, held from begin until finish/end */
    float *weights;       /* owned: (h or 1, T, S) when need_weights          */
    int t;                /* positions this append adds                       */
    int64_t start_ns;
} attnd_session_call;

/* Creates the store from cfg's kv_cache_bytes / max_sessions / session_ttl_s /
 * max_seq_len, releasing model versions with attnd_model_release, and starts its
 * 1 s TTL sweep. Returns NULL on failure. Free with attnd_sessions_free. */
attnd_sessions *attnd_session_store_create(const attnd_config *cfg, attnd_metrics *metrics);

/* 1 for the three session routes. */
int attnd_session_route(attnd_route route);

/* Matches /v1/sessions/{id} (GET, DELETE) and /v1/sessions/{id}/append (POST):
 * sets t->route and t->is_post. Returns 1, or 0 when url is neither. */
int attnd_session_match(const char *url, attnd_target *t);

/* Answers create (POST .../sessions, body + len) and GET/DELETE (method) at once,
 * on the HTTP thread. A cross session's key/value are projected here
 * (attn_project_kv, once). */
void attnd_session_answer(attnd_app *app, const attnd_target *t, const char *method,
                          const char *body, size_t len, attnd_reply *out);

/* Append, part 1: takes the session's append slot, decodes the body against the
 * session's model, makes room in the cache and builds the request whose one
 * sequence reads and writes the cache. On success returns 0, *out (the caller
 * submits it to t->model->sched and frees it with attnd_request_free) and sets
 * t->model to a new reference to the session's model version (the caller
 * releases it). On failure -1 with *err; the slot is already given back. */
int attnd_session_append_begin(attnd_app *app, attnd_target *t, const char *body, size_t len,
                               attnd_session_call *call, attnd_request **out,
                               attnd_http_error *err);

/* Append, part 2, once the scheduler finished req: commits the new positions if
 * the compute succeeded (else the cache is as before), gives the slot back,
 * and builds the response (the /v1 attention response plus
 * "session": {"id","length","cached"}). */
void attnd_session_append_finish(attnd_app *app, const attnd_model *model,
                                 attnd_session_call *call, const attnd_request *req,
                                 attnd_reply *out);

/* Gives back whatever call still holds (slot without committing, weights).
 * Idempotent. */
void attnd_session_call_end(attnd_app *app, attnd_session_call *call);

#endif
