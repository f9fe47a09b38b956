/* route.c — the route table (route.h) and resolution: pattern match, method
 * check (405 + Allow), readiness (503 while models load), and the model a
 * route works on. Every path attnd answers is a row below.
 */
#include "route.h"

#include <stdio.h>
#include <string.h>

#include "handler_ops.h"
#include "handler_session.h"
#include "handler_v1.h"
#include "handler_v2.h"

/* The metrics labels, one per route id. */
static const char *const labels[ATTND_ROUTE_COUNT] = {
    [ATTND_ROUTE_MODEL_ATTENTION] = "/v1/models/{name}/attention",
    [ATTND_ROUTE_ATTENTION] = "/v1/attention",
    [ATTND_ROUTE_MODELS] = "/v1/models",
    [ATTND_ROUTE_MODEL] = "/v1/models/{name}",
    [ATTND_ROUTE_HEALTHZ] = "/healthz",
    [ATTND_ROUTE_READYZ] = "/readyz",
    [ATTND_ROUTE_METRICS] = "/metrics",
    [ATTND_ROUTE_OTHER] = "other",
    [ATTND_ROUTE_UI] = "/ui",
    [ATTND_ROUTE_V2_SERVER] = "/v2",
    [ATTND_ROUTE_V2_LIVE] = "/v2/health/live",
    [ATTND_ROUTE_V2_READY] = "/v2/health/ready",
    [ATTND_ROUTE_V2_MODEL] = "/v2/models/{name}",
    [ATTND_ROUTE_V2_MODEL_READY] = "/v2/models/{name}/ready",
    [ATTND_ROUTE_V2_INFER] = "/v2/models/{name}/infer",
    [ATTND_ROUTE_SESSIONS] = "/v1/models/{name}/sessions",
    [ATTND_ROUTE_SESSION] = "/v1/sessions/{id}",
    [ATTND_ROUTE_SESSION_APPEND] = "/v1/sessions/{id}/append",
    [ATTND_ROUTE_SESSION_LIST] = "/v1/sessions",
    [ATTND_ROUTE_SESSION_FORK] = "/v1/sessions/{id}/fork",
};

#define GET "GET, HEAD"
#define POST "POST"
#define NONE ATTND_NO_MODEL
#define NAMED ATTND_PATH_MODEL
#define DEFAULT ATTND_DEFAULT_MODEL

static int ui_serves(const attnd_app *app, const char *path);

/* Every route. Patterns do not overlap, so the order is only for reading. */
static const attnd_route_def routes[] = {
    /* id                          pattern                        methods  model  ready accepts */
    {ATTND_ROUTE_HEALTHZ,          "/healthz",                     GET,     NONE,    0, NULL,
     &attnd_handler_ops_healthz},
    {ATTND_ROUTE_READYZ,           "/readyz",                      GET,     NONE,    0, NULL,
     &attnd_handler_ops_readyz},
    {ATTND_ROUTE_METRICS,          "/metrics",                     GET,     NONE,    0, NULL,
     &attnd_handler_ops_metrics},
    {ATTND_ROUTE_UI,               "/",                            GET,     NONE,    0, ui_serves,
     &attnd_handler_ops_ui},
    {ATTND_ROUTE_UI,               "/ui/*",                        GET,     NONE,    0, ui_serves,
     &attnd_handler_ops_ui},
    /* /v1: native JSON */
    {ATTND_ROUTE_MODELS,           "/v1/models",                   GET,     NONE,    1, NULL,
     &attnd_handler_v1_models},
    {ATTND_ROUTE_MODEL,            "/v1/models/{name}",            GET,     NAMED,   1, NULL,
     &attnd_handler_v1_model},
    {ATTND_ROUTE_MODEL_ATTENTION,  "/v1/models/{name}/attention",  POST,    NAMED,   1, NULL,
     &attnd_handler_v1_attention},
    {ATTND_ROUTE_ATTENTION,        "/v1/attention",                POST,    DEFAULT, 1, NULL,
     &attnd_handler_v1_attention},
    /* /v1 streaming sessions */
    {ATTND_ROUTE_SESSIONS,         "/v1/models/{name}/sessions",   POST,    NAMED,   1, NULL,
     &attnd_handler_session_create},
    {ATTND_ROUTE_SESSION,          "/v1/sessions/{id}",            "GET, HEAD, DELETE",
                                                                            NONE,    1, NULL,
     &attnd_handler_session},
    {ATTND_ROUTE_SESSION_APPEND,   "/v1/sessions/{id}/append",     POST,    NONE,    1, NULL,
     &attnd_handler_session_append},
    {ATTND_ROUTE_SESSION_LIST,     "/v1/sessions",                 GET,     NONE,    1, NULL,
     &attnd_handler_session_list},
    {ATTND_ROUTE_SESSION_FORK,     "/v1/sessions/{id}/fork",       POST,    NONE,    1, NULL,
     &attnd_handler_session_fork},
    /* /v2: Open Inference Protocol (KServe v2); /versions/1 is the one version */
    {ATTND_ROUTE_V2_SERVER,        "/v2",                          GET,     NONE,    0, NULL,
     &attnd_handler_v2_server},
    {ATTND_ROUTE_V2_SERVER,        "/v2/",                         GET,     NONE,    0, NULL,
     &attnd_handler_v2_server},
    {ATTND_ROUTE_V2_LIVE,          "/v2/health/live",              GET,     NONE,    0, NULL,
     &attnd_handler_v2_live},
    {ATTND_ROUTE_V2_READY,         "/v2/health/ready",             GET,     NONE,    0, NULL,
     &attnd_handler_v2_ready},
    {ATTND_ROUTE_V2_MODEL,         "/v2/models/{name}",            GET,     NAMED,   1, NULL,
     &attnd_handler_v2_model},
    {ATTND_ROUTE_V2_MODEL,         "/v2/models/{name}/versions/1", GET,     NAMED,   1, NULL,
     &attnd_handler_v2_model},
    {ATTND_ROUTE_V2_MODEL_READY,   "/v2/models/{name}/ready",      GET,     NAMED,   1, NULL,
     &attnd_handler_v2_model_ready},
    {ATTND_ROUTE_V2_MODEL_READY,   "/v2/models/{name}/versions/1/ready",
                                                                   GET,     NAMED,   1, NULL,
     &attnd_handler_v2_model_ready},
    {ATTND_ROUTE_V2_INFER,         "/v2/models/{name}/infer",      POST,    NAMED,   1, NULL,
     &attnd_handler_v2_infer},
    {ATTND_ROUTE_V2_INFER,         "/v2/models/{name}/versions/1/infer",
                                                                   POST,    NAMED,   1, NULL,
     &attnd_handler_v2_infer},
};

static const attnd_handler no_route = {.protocol = "none", .error = attnd_reply_error};

const attnd_handler *attnd_route_fallback(void) { return &no_route; }

const char *attnd_route_label(attnd_route id)
{
    return (unsigned)id < ATTND_ROUTE_COUNT ? labels[id] : labels[ATTND_ROUTE_OTHER];
}

const char *const *attnd_route_labels(void) { return labels; }

int attnd_route_is_attention(attnd_route id)
{
    return id == ATTND_ROUTE_MODEL_ATTENTION || id == ATTND_ROUTE_ATTENTION ||
           id == ATTND_ROUTE_V2_INFER;
}

int attnd_route_is_probe(attnd_route id)
{
    return id == ATTND_ROUTE_HEALTHZ || id == ATTND_ROUTE_READYZ || id == ATTND_ROUTE_METRICS ||
           id == ATTND_ROUTE_V2_LIVE || id == ATTND_ROUTE_V2_READY;
}

static int ui_serves(const attnd_app *app, const char *path)
{
    return app->cfg->ui && attnd_handler_ops_ui_has(path);
}

/* Matches path against pattern. Returns 1 with the parameter's span (NULL, 0
 * when the pattern has none), or 0. */
static int match(const char *pattern, const char *path, const char **param, size_t *len)
{
    *param = NULL;
    *len = 0;
    while (*pattern) {
        if (pattern[0] == '*' && pattern[1] == '\0')
            return 1;
        if (*pattern == '{') {
            const char *close = strchr(pattern, '}');
            size_t n = strcspn(path, "/");
            if (!close || n == 0)
                return 0;
            *param = path;
            *len = n;
            path += n;
            pattern = close + 1;
            continue;
        }
        if (*pattern != *path)
            return 0;
        pattern++;
        path++;
    }
    return *path == '\0';
}

/* 1 when method is one of the comma-separated tokens of methods. */
static int method_allowed(const char *methods, const char *method)
{
    size_t n = strlen(method);
    for (const char *p = methods; (p = strstr(p, method)) != NULL; p += n)
        if ((p == methods || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

static const attnd_route_def *find(const attnd_app *app, const char *path, const char **param,
                                   size_t *len)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (match(routes[i].pattern, path, param, len) &&
            (!routes[i].accepts || routes[i].accepts(app, path)))
            return &routes[i];
    return NULL;
}

/* POST /v1/attention's model. */
static attnd_model *default_model(attnd_app *app, attnd_http_error *err)
{
    const char *want = app->cfg->default_model;
    if (want && *want) {
        attnd_model *m = attnd_models_find(app->models, want, strlen(want));
        if (!m) /* config checks the name at start-up: cannot happen */
            attnd_http_error_set(err, 404, "model_not_found", "",
                                 "the default model \"%.80s\" is not loaded", want);
        return m;
    }
    if (app->models->n == 1)
        return attnd_models_acquire(app->models, 0);
    attnd_http_error_set(err, 404, "model_not_found", "",
                         "%d models are loaded and none is the default: use POST "
                         "/v1/models/{name}/attention, or start attnd with --default-model",
                         app->models->n);
    return NULL;
}

/* The loaded models' names, "demo, other" (", ..." when they do not fit). */
static void model_names(attnd_models *ms, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < ms->n; i++) {
        attnd_model *m = attnd_models_acquire(ms, i);
        if (!m)
            continue;
        int w = snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", m->name);
        attnd_model_release(m);
        if (w < 0 || (size_t)w >= cap - n) {
            snprintf(buf + n, cap - n, "%s", cap - n > 6 ? ", ..." : "");
            return;
        }
        n += (size_t)w;
    }
}

/* 404 model_not_found for the {name} x asked for, naming what is loaded. */
static int no_such_model(attnd_app *app, const attnd_exchange *x, attnd_http_error *err)
{
    char names[200];
    model_names(app->models, names, sizeof names);
    return attnd_http_fail(err, 404, "model_not_found", "",
                           "no model named \"%.*s\"; loaded: %s",
                           (int)(x->param_len > 80 ? 80 : x->param_len), x->param,
                           *names ? names : "none");
}

const char *attnd_route_methods(const attnd_app *app, const char *path)
{
    const char *param;
    size_t len;
    const attnd_route_def *r = find(app, path, &param, &len);
    return r ? r->methods : NULL;
}

int attnd_route_resolve(attnd_app *app, const char *method, const char *path, attnd_exchange *x,
                        const attnd_route_def **route, attnd_http_error *err,
                        const char **allow)
{
    x->app = app;
    x->method = method;
    x->path = path;
    *allow = NULL;
    const attnd_route_def *r = *route = find(app, path, &x->param, &x->param_len);
    if (!r)
        return attnd_http_fail(err, 404, "not_found", "", "no route %s %.200s", method, path);
    if (!method_allowed(r->methods, method)) {
        *allow = r->methods;
        return attnd_http_fail(err, 405, "method_not_allowed", "", "%s on %s: use %s", method,
                               labels[r->id], r->methods);
    }
    if (r->needs_models && attnd_app_state(app) == ATTND_STATE_STARTING)
        return attnd_http_fail(err, 503, "not_ready", "", "models are still loading");
    if (r->model == ATTND_DEFAULT_MODEL) {
        x->model = default_model(app, err);
        return x->model ? 0 : -1;
    }
    if (r->model == ATTND_PATH_MODEL) {
        x->model = attnd_models_find(app->models, x->param, x->param_len);
        if (!x->model)
            return no_such_model(app, x, err);
    }
    return 0;
}
