/* route.c — the route table (route.h) and resolution: pattern match, method
 * check (405 + Allow), readiness (503 while models load), and the model a
 * route works on. Every path attnd answers is a row below.
 */
#include "http/route.h"

#include <stdio.h>
#include <string.h>

#include "protocol/handler_ops.h"
#include "protocol/handler_repo.h"
#include "protocol/handler_session.h"
#include "protocol/handler_v1.h"
#include "protocol/handler_v2.h"

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
    [ATTND_ROUTE_REPO_INDEX] = "/v2/repository/index",
    [ATTND_ROUTE_REPO_LOAD] = "/v2/repository/models/{name}/load",
    [ATTND_ROUTE_REPO_UNLOAD] = "/v2/repository/models/{name}/unload",
};

#define GET "GET, HEAD"
#define POST "POST"
#define NONE ATTND_NO_MODEL
#define NAMED ATTND_PATH_MODEL
#define DEFAULT ATTND_DEFAULT_MODEL

static int ui_serves(const attnd_app *app, const char *path);
static int is_group(const attnd_app *app, const char *path)
{
    return attnd_handler_session_is_group(app, path);
}

/* Every route. Patterns overlap only where a row's accepts picks (the group
 * rows before the model rows): otherwise the order is only for reading. */
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
    /* /v1 model groups (--model NAME=DIR,layers=...): before the model rows,
     * which would answer 404 for a group's name */
    {ATTND_ROUTE_MODEL,            "/v1/models/{name}",            GET,     NONE,    1, is_group,
     &attnd_handler_group_info},
    {ATTND_ROUTE_SESSIONS,         "/v1/models/{name}/sessions",   POST,    NONE,    1, is_group,
     &attnd_handler_group_session_create},
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
    {ATTND_ROUTE_SESSION_APPEND,   "/v1/sessions/{id}/layers/{layer}/append",
                                                                   POST,    NONE,    1, NULL,
     &attnd_handler_session_append}, /* a sequence's layer: the handler reads {layer} */
    {ATTND_ROUTE_SESSION_LIST,     "/v1/sessions",                 GET,     NONE,    1, NULL,
     &attnd_handler_session_list},
    {ATTND_ROUTE_SESSION_FORK,     "/v1/sessions/{id}/fork",       POST,    NONE,    1, NULL,
     &attnd_handler_session_fork},
    /* /v2: Open Inference Protocol (KServe v2); /versions/{version} must name the
     * loaded version (404 otherwise) */
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
    {ATTND_ROUTE_V2_MODEL,         "/v2/models/{name}/versions/{version}",
                                                                   GET,     NAMED,   1, NULL,
     &attnd_handler_v2_model},
    {ATTND_ROUTE_V2_MODEL_READY,   "/v2/models/{name}/ready",      GET,     NAMED,   1, NULL,
     &attnd_handler_v2_model_ready},
    {ATTND_ROUTE_V2_MODEL_READY,   "/v2/models/{name}/versions/{version}/ready",
                                                                   GET,     NAMED,   1, NULL,
     &attnd_handler_v2_model_ready},
    {ATTND_ROUTE_V2_INFER,         "/v2/models/{name}/infer",      POST,    NAMED,   1, NULL,
     &attnd_handler_v2_infer},
    {ATTND_ROUTE_V2_INFER,         "/v2/models/{name}/versions/{version}/infer",
                                                                   POST,    NAMED,   1, NULL,
     &attnd_handler_v2_infer},
    /* /v2 model repository extension: the handler finds the model (load and
     * unload need an admin key) */
    {ATTND_ROUTE_REPO_INDEX,       "/v2/repository/index",         "GET, HEAD, POST",
                                                                            NONE,    1, NULL,
     &attnd_handler_repo_index},
    {ATTND_ROUTE_REPO_LOAD,        "/v2/repository/models/{name}/load",
                                                                   POST,    NONE,    1, NULL,
     &attnd_handler_repo_load},
    {ATTND_ROUTE_REPO_UNLOAD,      "/v2/repository/models/{name}/unload",
                                                                   POST,    NONE,    1, NULL,
     &attnd_handler_repo_unload},
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

/* The spans a pattern's placeholders matched: {name}/{id}, and {version}. */
typedef struct captures {
    const char *param, *version;
    size_t len, version_len;
} captures;

static const char version_token[] = "{version}";

/* Matches path against pattern. Returns 1 with the placeholders' spans in *c
 * (NULL, 0 for those the pattern has not), or 0. */
static int match(const char *pattern, const char *path, captures *c)
{
    *c = (captures){0};
    while (*pattern) {
        if (pattern[0] == '*' && pattern[1] == '\0')
            return 1;
        if (*pattern == '{') {
            const char *close = strchr(pattern, '}');
            size_t n = strcspn(path, "/");
            if (!close || n == 0)
                return 0;
            int is_version = strncmp(pattern, version_token, sizeof version_token - 1) == 0;
            if (is_version || !c->param) { /* a later one ({layer}): its handler reads it */
                *(is_version ? &c->version : &c->param) = path;
                *(is_version ? &c->version_len : &c->len) = n;
            }
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

static const attnd_route_def *find(const attnd_app *app, const char *path, captures *c)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (match(routes[i].pattern, path, c) &&
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
    int loaded = 0;
    attnd_model *m = attnd_models_sole(app->models, &loaded);
    if (!m)
        attnd_http_error_set(err, 404, "model_not_found", "",
                             "%d models are loaded and none is the default: use POST "
                             "/v1/models/{name}/attention, or start attnd with --default-model",
                             loaded);
    return m;
}

/* 404 model_not_found for name[0..len), naming the models that are loaded. */
static int no_model(attnd_app *app, const char *name, size_t len, attnd_http_error *err)
{
    char loaded[200];
    attnd_models_loaded_names(app->models, loaded, sizeof loaded);
    return attnd_http_fail(err, 404, "model_not_found", "",
                           "no model named \"%.*s\" is loaded (loaded: %s)",
                           (int)(len > 80 ? 80 : len), name, loaded);
}

/* 0 when the path's {version} (if any) is x->model's; else 404 and the model
 * reference given back. */
static int check_version(attnd_exchange *x, attnd_http_error *err)
{
    if (!x->version)
        return 0;
    char want[16];
    int n = snprintf(want, sizeof want, "%d", x->model->version);
    if ((size_t)n == x->version_len && memcmp(want, x->version, x->version_len) == 0)
        return 0;
    attnd_http_fail(err, 404, "model_not_found", "",
                    "model %s has no version \"%.*s\": version %d is loaded", x->model->name,
                    (int)(x->version_len > 20 ? 20 : x->version_len), x->version,
                    x->model->version);
    attnd_model_release(x->model);
    x->model = NULL;
    return -1;
}

const char *attnd_route_methods(const attnd_app *app, const char *path)
{
    captures c;
    const attnd_route_def *r = find(app, path, &c);
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
    captures c;
    const attnd_route_def *r = *route = find(app, path, &c);
    x->param = c.param;
    x->param_len = c.len;
    x->version = c.version;
    x->version_len = c.version_len;
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
            return no_model(app, x->param, x->param_len, err);
        return check_version(x, err);
    }
    return 0;
}
