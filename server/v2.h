/* v2.h — the Open Inference Protocol (KServe v2) REST routes beside /v1: path matching,
 * the GET answers (server/model metadata, liveness, readiness), the POST header check
 * (JSON, or binary tensors with Inference-Header-Content-Length), and the infer reply.
 * http.c calls these where the route is a v2 one; bodies are codec_v2's.
 */
#ifndef ATTND_V2_H
#define ATTND_V2_H

#include <stddef.h>

#include "codec_v2.h"
#include "routes.h"

/* 1 for the ATTND_ROUTE_V2_* routes (their errors use the v2 {"error": "..."} form;
 * paths under /v2 that match no route answer 404 in the /v1 form, like any unknown path). */
int attnd_v2_route(attnd_route route);

/* Matches the v2 paths (including /v2/models/{name}/versions/1/...). Returns 1 with
 * t->route, t->is_post and the model name's span (*name NULL for routes without a
 * model), or 0 when url is no v2 route. */
int attnd_v2_match(const char *url, attnd_target *t, const char **name, size_t *len);

/* Header checks for POST .../infer: as attnd_route_check_post, except that the body may
 * be application/octet-stream (or any type) when Inference-Header-Content-Length (ihcl,
 * NULL when absent) is given, which must then be a decimal integer. Returns 0 or -1
 * with *err. */
int attnd_v2_check_post(const attnd_app *app, const char *content_length,
                        const char *transfer_encoding, const char *content_type,
                        const char *ihcl, attnd_http_error *err);

/* The Inference-Header-Content-Length value (checked by attnd_v2_check_post), or -1. */
long long attnd_v2_header_length(const char *ihcl);

/* Answers a v2 GET route. */
void attnd_v2_get(attnd_app *app, const attnd_target *t, attnd_reply *out);

/* The response for err as v2 wants it: {"error": "..."} with err->status. */
void attnd_v2_reply_error(attnd_reply *out, const attnd_http_error *err);

/* The response for a finished infer request (any outcome). Borrows req and call. */
void attnd_v2_finish(attnd_app *app, const attnd_model *model, const attnd_request *req,
                     const attnd_v2_call *call, attnd_reply *out);

#endif
