/* handler_session.h — the streaming-session routes on the wire:
 * POST /v1/models/{name}/sessions (create), GET and DELETE /v1/sessions/{id},
 * GET /v1/sessions (a page of them), POST /v1/sessions/{id}/fork (a copy that
 * lives on its own), and POST /v1/sessions/{id}/append, which goes through the model's scheduler
 * like any attention request with its attn_seq pointing into the session's KV
 * cache. The store itself (ids, budget, eviction) is sessions.c; bodies are
 * decoded here (create) or by codec.c (append); errors are in the /v1 form.
 */
#ifndef ATTND_HANDLER_SESSION_H
#define ATTND_HANDLER_SESSION_H

#include "protocol/handler.h"
#include "engine/models.h"
#include "engine/sessions.h"

extern const attnd_handler attnd_handler_session_create; /* POST /v1/models/{name}/sessions */
extern const attnd_handler attnd_handler_session;        /* GET, DELETE /v1/sessions/{id}   */
extern const attnd_handler attnd_handler_session_append; /* POST /v1/sessions/{id}/append   */
extern const attnd_handler attnd_handler_session_list;   /* GET /v1/sessions                */
extern const attnd_handler attnd_handler_session_fork;   /* POST /v1/sessions/{id}/fork     */
/* A model group (--model NAME=DIR,layers=...): GET /v1/models/{group} and POST
 * /v1/models/{group}/sessions, a sequence session with a cache on every layer;
 * its appends are POST /v1/sessions/{id}/layers/{l}/append (the append handler). */
extern const attnd_handler attnd_handler_group_info;
extern const attnd_handler attnd_handler_group_session_create;

/* 1 when path is /v1/models/{name}[/...] and name is a model group (a route
 * row's accepts: the group rows come before the model rows). */
int attnd_handler_session_is_group(const attnd_app *app, const char *path);

/* Creates the store from cfg's kv_cache_bytes (0: a quarter of the memory, see
 * attnd_kvpool_default_bytes) / kv_page_bytes (0: the largest page the loaded
 * models wish for, kvlayout.h) / max_sessions / session_ttl_s / max_seq_len,
 * releasing model versions with attnd_model_release, logs the pool and each
 * model's blocks, and starts its 1 s TTL sweep. Call after the models load.
 * Returns NULL with err on failure. Free with attnd_sessions_free. */
attnd_sessions *attnd_session_store_create(const attnd_config *cfg, attnd_models *models,
                                           attnd_metrics *metrics, char *err, size_t errlen);

#endif
