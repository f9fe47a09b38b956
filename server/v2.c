/* v2.c — the Open Inference Protocol (KServe v2) REST routes: path matching, the GET
 * answers, the POST header check, and the infer reply (JSON, or a JSON header followed by
 * binary tensors). Bodies come from codec_v2.c; transport stays in http.c.
 */
#include "v2.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char json_type[] = "application/json";
static const char binary_type[] = "application/octet-stream";

int attnd_v2_route(attnd_route route)
{
    return route >= ATTND_ROUTE_V2_SERVER && route <= ATTND_ROUTE_V2_INFER;
}

/* What follows /v2/models/{name}: "", "/ready", "/infer", optionally after
 * "/versions/1" (the one version every model has). */
static int match_model_suffix(const char *rest, attnd_target *t)
{
    static const char version[] = "/versions/1";
    if (strncmp(rest, version, sizeof version - 1) == 0 &&
        (rest[sizeof version - 1] == '\0' || rest[sizeof version - 1] == '/'))
        rest += sizeof version - 1;
    t->is_post = 0;
    if (*rest == '\0')
        t->route = ATTND_ROUTE_V2_MODEL;
    else if (strcmp(rest, "/ready") == 0)
        t->route = ATTND_ROUTE_V2_MODEL_READY;
    else if (strcmp(rest, "/infer") == 0) {
        t->route = ATTND_ROUTE_V2_INFER;
        t->is_post = 1;
    } else
        return 0;
    return 1;
}

int attnd_v2_match(const char *url, attnd_target *t, const char **name, size_t *len)
{
    static const char models[] = "/v2/models/";
    *name = NULL;
    *len = 0;
    t->is_post = 0;
    if (strcmp(url, "/v2") == 0 || strcmp(url, "/v2/") == 0) {
        t->route = ATTND_ROUTE_V2_SERVER;
        return 1;
    }
    if (strcmp(url, "/v2/health/live") == 0) {
        t->route = ATTND_ROUTE_V2_LIVE;
        return 1;
    }
    if (strcmp(url, "/v2/health/ready") == 0) {
        t->route = ATTND_ROUTE_V2_READY;
        return 1;
    }
    if (strncmp(url, models, sizeof models - 1) != 0)
        return 0;
    const char *n = url + sizeof models - 1, *slash = strchr(n, '/');
    size_t l = slash ? (size_t)(slash - n) : strlen(n);
    if (l == 0 || !match_model_suffix(n + l, t))
        return 0;
    *name = n;
    *len = l;
    return 1;
}

long long attnd_v2_header_length(const char *ihcl)
{
    if (!ihcl)
        return -1;
    errno = 0;
    char *end;
    long long n = strtoll(ihcl, &end, 10);
    if (errno || end == ihcl || *end != '\0' || n < 0)
        return -2;
    return n;
}

int attnd_v2_check_post(const attnd_app *app, const char *content_length,
                        const char *transfer_encoding, const char *content_type,
                        const char *ihcl, attnd_http_error *err)
{
    long long hl = attnd_v2_header_length(ihcl);
    if (hl == -2) {
        attnd_http_error_set(err, 400, "invalid_request", "Inference-Header-Content-Length",
                             "Inference-Header-Content-Length must be a non-negative integer, "
                             "not %.40s", ihcl);
        return -1;
    }
    if (hl >= 0) /* binary tensors follow the JSON header: any media type will do */
        content_type = json_type;
    else if (content_type && strncasecmp(content_type, binary_type, sizeof binary_type - 1) == 0)
        content_type = json_type; /* then the body must be all JSON: the decoder says so */
    return attnd_route_check_post(app, content_length, transfer_encoding, content_type, err);
}

static void reply_static_json(attnd_reply *out, int status, const char *text)
{
    out->status = status;
    out->content_type = json_type;
    out->body = strdup(text);
    out->len = out->body ? strlen(text) : 0;
}

void attnd_v2_get(attnd_app *app, const attnd_target *t, attnd_reply *out)
{
    int ready = atomic_load_explicit(&app->state, memory_order_acquire) == ATTND_STATE_READY;
    out->content_type = json_type;
    switch (t->route) {
    case ATTND_ROUTE_V2_SERVER:
        out->status = 200;
        out->body = attnd_codec_v2_server_metadata(&out->len);
        break;
    case ATTND_ROUTE_V2_LIVE:
        reply_static_json(out, 200, "{\"live\":true}");
        break;
    case ATTND_ROUTE_V2_READY:
        reply_static_json(out, ready ? 200 : 503, ready ? "{\"ready\":true}" : "{\"ready\":false}");
        out->retry_after = ready ? 0 : 1;
        break;
    case ATTND_ROUTE_V2_MODEL:
        out->status = 200;
        out->body = attnd_codec_v2_model_metadata(t->model->name, &t->model->info, &out->len);
        break;
    case ATTND_ROUTE_V2_MODEL_READY:
        /* Resolution answered 503 while models load; a draining server is not ready. */
        reply_static_json(out, ready ? 200 : 503, ready ? "{\"ready\":true}" : "{\"ready\":false}");
        out->retry_after = ready ? 0 : 1;
        break;
    default: {
        attnd_http_error e;
        attnd_v2_reply_error(out, attnd_http_error_set(&e, 500, "internal", "",
                                                       "no GET handler for this route"));
        break;
    }
    }
}

void attnd_v2_reply_error(attnd_reply *out, const attnd_http_error *err)
{
    out->status = err->status;
    out->content_type = json_type;
    out->body = attnd_codec_v2_encode_error(err, &out->len);
    out->retry_after = err->status == 503 ? 1 : 0;
    snprintf(out->code, sizeof out->code, "%s", err->code);
    snprintf(out->log_detail, sizeof out->log_detail, "%s%s%s", err->field,
             err->field[0] ? ": " : "", err->message);
}

void attnd_v2_finish(attnd_app *app, const attnd_model *model, const attnd_request *req,
                     const attnd_v2_call *call, attnd_reply *out)
{
    if (req->outcome != ATTND_DONE_OK) {
        attnd_http_error e;
        attnd_route_outcome_error(req, &e);
        attnd_v2_reply_error(out, &e);
        return;
    }
    size_t header_len = 0;
    out->status = 200;
    out->body = attnd_codec_v2_encode_response(req, call, model->name, &out->len, &header_len);
    out->inference_header_length = header_len;
    out->content_type = header_len ? binary_type : json_type;
    if (app->metrics)
        attnd_metrics_request_timing(app->metrics, model->index, req->queue_us,
                                     req->compute_us);
}
