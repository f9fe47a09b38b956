/* routes.c — attnd's routes and their answers: resolution with 404/405/503,
 * POST header checks (411/413/415), the GET handlers, and the status a
 * finished attention request maps to. Transport lives in http.c.
 */
#include "routes.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "session_routes.h"
#include "ui_assets.h"
#include "v2.h"

static const char json_type[] = "application/json";
static const char metrics_type[] = "text/plain; version=0.0.4; charset=utf-8";

static int is_get(const char *method)
{
    return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
}

/* Fixed route table: exact paths. */
static const struct {
    const char *path;
    attnd_route route;
    int is_post;
} fixed[] = {
    {"/healthz", ATTND_ROUTE_HEALTHZ, 0},   {"/readyz", ATTND_ROUTE_READYZ, 0},
    {"/metrics", ATTND_ROUTE_METRICS, 0},   {"/v1/models", ATTND_ROUTE_MODELS, 0},
    {"/v1/attention", ATTND_ROUTE_ATTENTION, 1},
};

/* Matches /v1/models/{name}, /v1/models/{name}/attention and
 * /v1/models/{name}/sessions. Returns 1 and the name's span, or 0. */
static int match_model_path(const char *url, attnd_target *t, const char **name, size_t *len)
{
    static const char prefix[] = "/v1/models/", suffix[] = "/attention";
    if (strncmp(url, prefix, sizeof prefix - 1) != 0)
        return 0;
    *name = url + sizeof prefix - 1;
    const char *slash = strchr(*name, '/');
    if (!slash) {
        t->route = ATTND_ROUTE_MODEL;
        t->is_post = 0;
    } else if (strcmp(slash, suffix) == 0) {
        t->route = ATTND_ROUTE_MODEL_ATTENTION;
        t->is_post = 1;
    } else if (strcmp(slash, "/sessions") == 0) {
        t->route = ATTND_ROUTE_SESSIONS;
        t->is_post = 1;
    } else {
        return 0;
    }
    *len = slash ? (size_t)(slash - *name) : strlen(*name);
    return *len > 0;
}

/* Picks the model for POST /v1/attention. */
static attnd_model *default_model(attnd_app *app, attnd_http_error *err)
{
    const char *want = app->cfg->default_model;
    if (want && *want)
        return attnd_models_find(app->models, want, strlen(want));
    if (app->models->n == 1)
        return attnd_models_acquire(app->models, 0);
    attnd_http_error_set(err, 404, "model_not_found", "",
                         "%d models are loaded and none is the default: use POST "
                         "/v1/models/{name}/attention, or start attnd with --default-model",
                         app->models->n);
    return NULL;
}

int attnd_route_resolve(attnd_app *app, const char *method, const char *url, attnd_target *t,
                        attnd_http_error *err, const char **allow)
{
    const char *name = NULL;
    size_t name_len = 0;
    int found = 0;
    memset(t, 0, sizeof *t);
    t->path = url;
    *allow = NULL;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && !found; i++) {
        if (strcmp(url, fixed[i].path) == 0) {
            t->route = fixed[i].route;
            t->is_post = fixed[i].is_post;
            found = 1;
        }
    }
    const unsigned char *ui_body;
    size_t ui_len;
    const char *ui_type;
    if (!found && app->cfg->ui && attnd_ui_lookup(url, &ui_body, &ui_len, &ui_type)) {
        t->route = ATTND_ROUTE_UI;
        found = 1;
    }
    if (!found && attnd_v2_match(url, t, &name, &name_len))
        found = 1;
    if (!found && attnd_session_match(url, t))
        found = 1;
    if (!found && !match_model_path(url, t, &name, &name_len)) {
        t->route = ATTND_ROUTE_OTHER;
        attnd_http_error_set(err, 404, "not_found", "", "no route %s %.200s", method, url);
        return -1;
    }
    int deletable = t->route == ATTND_ROUTE_SESSION;
    if (t->is_post ? strcmp(method, "POST") != 0
                   : !is_get(method) && !(deletable && strcmp(method, "DELETE") == 0)) {
        *allow = t->is_post ? "POST" : deletable ? "GET, HEAD, DELETE" : "GET, HEAD";
        attnd_http_error_set(err, 405, "method_not_allowed", "", "%s on %s: use %s", method,
                             attnd_route_name(t->route), *allow);
        return -1;
    }
    int state = atomic_load_explicit(&app->state, memory_order_acquire);
    int needs_models = t->route == ATTND_ROUTE_MODEL_ATTENTION ||
                       t->route == ATTND_ROUTE_ATTENTION || t->route == ATTND_ROUTE_MODEL ||
                       t->route == ATTND_ROUTE_MODELS || (attnd_v2_route(t->route) && name) ||
                       attnd_session_route(t->route);
    if (needs_models && state == ATTND_STATE_STARTING) {
        attnd_http_error_set(err, 503, "not_ready", "", "models are still loading");
        return -1;
    }
    if (t->route == ATTND_ROUTE_ATTENTION) {
        t->model = default_model(app, err);
        return t->model ? 0 : -1;
    }
    if (name) {
        t->model = attnd_models_find(app->models, name, name_len);
        if (!t->model) {
            attnd_http_error_set(err, 404, "model_not_found", "", "no model named \"%.*s\"",
                                 (int)(name_len > 80 ? 80 : name_len), name);
            return -1;
        }
    }
    return 0;
}

/* application/json, optionally followed by parameters; a charset must be UTF-8. */
static int json_media_type(const char *ct)
{
    static const char want[] = "application/json";
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (strncasecmp(ct, want, sizeof want - 1) != 0)
        return 0;
    ct += sizeof want - 1;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (*ct == '\0')
        return 1;
    if (*ct != ';')
        return 0;
    const char *cs = strcasestr(ct, "charset=");
    if (!cs)
        return 1;
    cs += 8;
    if (*cs == '"')
        cs++;
    return strncasecmp(cs, "utf-8", 5) == 0 || strncasecmp(cs, "utf8", 4) == 0;
}

int attnd_route_check_post(const attnd_app *app, const char *content_length,
                           const char *transfer_encoding, const char *content_type,
                           attnd_http_error *err)
{
    int chunked = transfer_encoding && strcasestr(transfer_encoding, "chunked");
    if (!chunked && !content_length) {
        attnd_http_error_set(err, 411, "length_required", "",
                             "POST needs a Content-Length (or chunked Transfer-Encoding)");
        return -1;
    }
    if (content_length) {
        errno = 0;
        char *end;
        unsigned long long n = strtoull(content_length, &end, 10);
        if (!errno && end != content_length &&
            n > (unsigned long long)app->cfg->max_body_bytes) {
            attnd_http_error_set(err, 413, "body_too_large", "",
                                 "body of %llu bytes is over max_body_bytes (%lld)", n,
                                 (long long)app->cfg->max_body_bytes);
            return -1;
        }
    }
    if (!content_type || !json_media_type(content_type)) {
        attnd_http_error_set(err, 415, "unsupported_media_type", "",
                             "the body must be application/json, not %.100s",
                             content_type ? content_type : "(no Content-Type)");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ replies */

static void reply_text(attnd_reply *out, int status, const char *type, const char *text)
{
    out->status = status;
    out->content_type = type;
    out->body = strdup(text);
    out->len = out->body ? strlen(text) : 0;
}

void attnd_reply_error(attnd_reply *out, const attnd_http_error *err)
{
    out->status = err->status;
    out->content_type = json_type;
    out->body = attnd_codec_encode_error(err, &out->len);
    out->retry_after = err->status == 503 ? 1 : 0;
    snprintf(out->code, sizeof out->code, "%s", err->code);
    snprintf(out->log_detail, sizeof out->log_detail, "%s%s%s", err->field,
             err->field[0] ? ": " : "", err->message);
}

static void get_metrics(attnd_app *app, attnd_reply *out)
{
    int depths[256] = {0};
    int n = app->cfg->n_models;
    int ready = atomic_load_explicit(&app->state, memory_order_acquire) != ATTND_STATE_STARTING;
    int *d = n <= 256 ? depths : malloc((size_t)n * sizeof *d);
    if (!d)
        return;
    for (int i = 0; i < n; i++)
        d[i] = ready ? attnd_models_queue_depth(app->models, i) : -1;
    out->status = 200;
    out->content_type = metrics_type;
    out->body = attnd_metrics_render(app->metrics, d, &out->len);
    if (d != depths)
        free(d);
}

void attnd_route_get(attnd_app *app, const attnd_target *t, attnd_reply *out)
{
    int state = atomic_load_explicit(&app->state, memory_order_acquire);
    if (attnd_v2_route(t->route)) {
        attnd_v2_get(app, t, out);
        return;
    }
    out->content_type = json_type;
    switch (t->route) {
    case ATTND_ROUTE_HEALTHZ:
        reply_text(out, 200, json_type, "{\"status\":\"ok\"}");
        break;
    case ATTND_ROUTE_READYZ:
        if (state == ATTND_STATE_READY)
            reply_text(out, 200, json_type, "{\"status\":\"ready\"}");
        else
            reply_text(out, 503, json_type, state == ATTND_STATE_DRAINING
                                                ? "{\"status\":\"draining\"}"
                                                : "{\"status\":\"not_ready\"}");
        out->retry_after = out->status == 503 ? 1 : 0;
        break;
    case ATTND_ROUTE_METRICS:
        get_metrics(app, out);
        break;
    case ATTND_ROUTE_MODELS:
        out->status = 200;
        out->body = attnd_models_list_json(app->models, &out->len);
        break;
    case ATTND_ROUTE_MODEL:
        out->status = 200;
        out->body = attnd_models_info_json(t->model, &out->len);
        break;
    case ATTND_ROUTE_UI: {
        const unsigned char *body;
        if (attnd_ui_lookup(t->path, &body, &out->len, &out->content_type)) {
            out->status = 200;
            out->body = (char *)(uintptr_t)body; /* static: never freed or written */
            out->body_static = 1;
        }
        break;
    }
    default: {
        attnd_http_error e;
        attnd_reply_error(out, attnd_http_error_set(&e, 500, "internal", "",
                                                    "no GET handler for this route"));
        break;
    }
    }
}

/* DONE_ERROR: the library refused a request the codec accepted. */
static void lib_error(const attnd_request *req, attnd_http_error *e)
{
    const char *msg = req->lib_error.message[0] ? req->lib_error.message
                                                : attn_strerror(req->lib_status);
    switch (req->lib_status) {
    case ATTN_ERR_NONFINITE:
        attnd_http_error_set(e, 400, "invalid_value", "", "%s", msg);
        break;
    case ATTN_ERR_SHAPE:
        attnd_http_error_set(e, 400, "invalid_shape", "", "%s", msg);
        break;
    case ATTN_ERR_LIMIT:
        attnd_http_error_set(e, 413, "limit_exceeded", "", "%s", msg);
        break;
    default:
        attnd_http_error_set(e, 500, "internal", "", "computation failed: %s: %s",
                             attn_strerror(req->lib_status), msg);
        break;
    }
}

void attnd_route_outcome_error(const attnd_request *req, attnd_http_error *e)
{
    switch (req->outcome) {
    case ATTND_DONE_TIMEOUT:
        attnd_http_error_set(e, 504, "timeout", "timeout_ms",
                             "not started within timeout_ms = %lld (waited %lld us in the queue)",
                             (long long)req->timeout_ms, (long long)req->queue_us);
        break;
    case ATTND_DONE_ERROR:
        lib_error(req, e);
        break;
    default:
        attnd_http_error_set(e, 503, "draining", "", "attnd is shutting down");
        break;
    }
}

void attnd_route_finish(attnd_app *app, const attnd_model *model, const attnd_request *req,
                        attnd_reply *out)
{
    attnd_http_error e;
    if (req->outcome == ATTND_DONE_OK) {
        out->status = 200;
        out->content_type = json_type;
        out->body = attnd_codec_encode_response(req, model->name, &out->len);
        if (app->metrics)
            attnd_metrics_request_timing(app->metrics, model->index, req->queue_us,
                                         req->compute_us);
        return;
    }
    attnd_route_outcome_error(req, &e);
    attnd_reply_error(out, &e);
}
