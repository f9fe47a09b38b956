/* handler_repo.c — the model repository routes (handler_repo.h): the admin-key
 * check before any body is read, the bodies (JSON at this edge: a load's
 * "parameters" become a model spec), and the one table from the registry's
 * results to HTTP statuses. A load runs on the HTTP thread that answers it.
 */
#include "protocol/handler_repo.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/auth.h"
#include "core/config.h"
#include "engine/retire.h"
#include "protocol/handler_v2.h"

/* The body checks of a repository POST: none when it has no body (no length,
 * or 0: Triton's clients often send none), else a JSON body's. */
static int check_body_headers(attnd_exchange *x, attnd_http_error *err)
{
    const char *cl = x->header(x, "Content-Length");
    const char *te = x->header(x, "Transfer-Encoding");
    if (!te && (!cl || strcmp(cl, "0") == 0))
        return 0;
    return attnd_handler_check_json(x, err);
}

/* Load and unload: an admin key first (401 without one, 403 when none is
 * configured or a client key is shown), then the body's headers. */
static int check_admin(attnd_exchange *x, attnd_http_error *err)
{
    switch (attnd_auth_admin(x->app->auth, x->header(x, "Authorization"))) {
    case ATTND_ADMIN_OK:
        return check_body_headers(x, err);
    case ATTND_ADMIN_DISABLED:
        return attnd_http_fail(err, 403, "forbidden", "",
                               "model repository changes are off: no admin key is configured "
                               "(start attnd with --admin-key-file FILE)");
    case ATTND_ADMIN_CLIENT_KEY:
        return attnd_http_fail(err, 403, "forbidden", "",
                               "an API key does not allow repository changes: use "
                               "'Authorization: Bearer <admin key>'");
    case ATTND_ADMIN_MISSING:
        break;
    }
    return attnd_http_fail(err, 401, "unauthorized", "",
                           "this route needs 'Authorization: Bearer <admin key>' with a valid "
                           "admin key");
}

/* The body as a JSON object (NULL for an empty body: *root stays NULL).
 * Returns 0, or -1 with a 400 naming the parser's line and column. */
static int parse_body(const attnd_exchange *x, json_t **root, attnd_http_error *err)
{
    *root = NULL;
    if (x->body_len == 0)
        return 0;
    json_error_t je;
    *root = json_loadb(x->body, x->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!*root)
        return attnd_http_fail(err, 400, "invalid_json", "", "line %d, column %d: %s", je.line,
                               je.column, je.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return attnd_http_fail(err, 400, "invalid_request", "", "the body must be a JSON object");
    }
    return 0;
}

/* -1 with a 400 naming the first key of obj (at where) that is not in allowed
 * (a comma-separated list); 0 when every key is. */
static int only_keys(json_t *obj, const char *where, const char *allowed, attnd_http_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        const char *p = strstr(allowed, key);
        size_t n = strlen(key);
        if (!p || (p != allowed && p[-1] != ',') || (p[n] != ',' && p[n] != '\0'))
            return attnd_http_fail(err, 400, "unknown_field", key, "%s%s%s is not a known field "
                                   "(known: %s)", where, *where ? "." : "", key, allowed);
    }
    return 0;
}

static void reply_json(attnd_reply *out, int status, json_t *j)
{
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    attnd_reply_body(out, status, attnd_json_type, body, body ? strlen(body) : 0);
}

/* ------------------------------------------------------------ index */

static void answer_index(attnd_exchange *x, attnd_reply *out)
{
    attnd_http_error err;
    json_t *root = NULL;
    int ready_only = 0;
    if (parse_body(x, &root, &err) != 0 || (root && only_keys(root, "", "ready", &err) != 0))
        goto fail;
    json_t *ready = root ? json_object_get(root, "ready") : NULL;
    if (ready && !json_is_boolean(ready)) {
        attnd_http_fail(&err, 400, "invalid_type", "ready", "ready must be true or false");
        goto fail;
    }
    ready_only = ready && json_is_true(ready);
    json_decref(root);
    size_t len = 0;
    /* why loads failed (file paths, parser text) is for admin keys only */
    int reasons = attnd_auth_admin(x->app->auth, x->header(x, "Authorization")) ==
                  ATTND_ADMIN_OK;
    char *body = attnd_models_index_json(x->app->models, ready_only, reasons, &len);
    attnd_reply_body(out, 200, attnd_json_type, body, len);
    return;
fail:
    json_decref(root);
    attnd_handler_v2_error(out, &err);
}

/* ------------------------------------------------------------ load, unload */

/* The {name} segment into buf. Returns 0, or -1 with a 400 naming it (too
 * long, a character outside the set, or dots alone: "." and ".." would be
 * resolved away by a proxy in front, so the name could never be reached). */
static int path_name(const attnd_exchange *x, char *buf, size_t cap, attnd_http_error *err)
{
    if (x->param_len == 0 || x->param_len >= cap || x->param_len > 64)
        return attnd_http_fail(err, 400, "invalid_request", "name",
                               "a model name is 1-64 characters of A-Z a-z 0-9 . _ - and not "
                               "dots alone");
    memcpy(buf, x->param, x->param_len);
    buf[x->param_len] = '\0';
    if (!attnd_config_model_name_ok(buf))
        return attnd_http_fail(err, 400, "invalid_request", "name",
                               "model name \"%.64s\": a model name is 1-64 characters of "
                               "A-Z a-z 0-9 . _ - and not dots alone (\".\" and \"..\" are "
                               "path segments)", buf);
    return 0;
}

/* A load body's source: {"parameters": {"path": ..., "layer": ..., ...}} into
 * *spec (*has_spec 0 for an empty body or no parameters). Returns 0, or -1
 * with a 400 naming the field. */
static int load_source(const attnd_exchange *x, const char *name, attnd_model_spec *spec,
                       int *has_spec, attnd_http_error *err)
{
    json_t *root = NULL;
    char msg[512] = "";
    *has_spec = 0;
    if (parse_body(x, &root, err) != 0)
        return -1;
    int rc = root ? only_keys(root, "", "parameters", err) : 0;
    json_t *params = root ? json_object_get(root, "parameters") : NULL;
    if (rc == 0 && params) {
        if (attnd_config_spec_from_json(spec, name, params, "parameters", msg, sizeof msg) != 0)
            rc = attnd_http_fail(err, 400, "invalid_request", "", "%s", msg); /* names it */
        else if (spec->all_layers) {
            attnd_config_spec_free(spec);
            rc = attnd_http_fail(err, 400, "unsupported", "parameters.layers",
                                 "layers=all is for the configuration; load each layer as its "
                                 "own model (layer: N)");
        } else
            *has_spec = 1;
    }
    json_decref(root);
    return rc;
}

/* The one table from the registry's results to HTTP errors. */
static void repo_error(attnd_repo_status st, int had_source, const char *msg,
                       attnd_http_error *err)
{
    switch (st) {
    case ATTND_REPO_NOT_FOUND:
        attnd_http_error_set(err, 404, "model_not_found", "", "%s", msg);
        break;
    case ATTND_REPO_FULL:
        attnd_http_error_set(err, 409, "repository_full", "", "%s", msg);
        break;
    case ATTND_REPO_LOAD_FAILED: /* a source the client gave is its error; ours is ours */
        attnd_http_error_set(err, had_source ? 400 : 500, "load_failed",
                             had_source ? "parameters.path" : "", "%s", msg);
        break;
    case ATTND_REPO_NO_MEMORY:
    case ATTND_REPO_OK:
        attnd_http_error_set(err, 500, "internal", "", "out of memory");
        break;
    }
}

static void answer_load(attnd_exchange *x, attnd_reply *out)
{
    attnd_http_error err;
    char name[80], msg[768] = "";
    attnd_model_spec spec;
    int has_spec = 0, version = 0;
    if (attnd_app_state(x->app) == ATTND_STATE_DRAINING) {
        attnd_http_error_set(&err, 503, "draining", "", "attnd is shutting down");
        attnd_handler_v2_error(out, &err);
        return;
    }
    if (path_name(x, name, sizeof name, &err) != 0 ||
        load_source(x, name, &spec, &has_spec, &err) != 0) {
        attnd_metrics_repository(x->app->metrics, 1, 0);
        attnd_handler_v2_error(out, &err);
        return;
    }
    attnd_repo_status st = attnd_models_repo_load(x->app->models, x->app->cfg, name,
                                                  has_spec ? &spec : NULL, &version, msg,
                                                  sizeof msg);
    if (has_spec)
        attnd_config_spec_free(&spec);
    attnd_metrics_repository(x->app->metrics, 1, st == ATTND_REPO_OK);
    if (st == ATTND_REPO_OK)
        attnd_retired_bound(x->app->sessions, x->app->models, (size_t)x->app->cfg->max_retired_bytes);
    if (st != ATTND_REPO_OK) {
        repo_error(st, has_spec, msg, &err);
        attnd_handler_v2_error(out, &err);
        return;
    }
    char v[16];
    snprintf(v, sizeof v, "%d", version);
    reply_json(out, 200, json_pack("{s:s, s:s, s:s}", "name", name, "version", v, "state",
                                   "READY"));
}

/* An unload body may carry Triton's {"parameters": {"unload_dependents": bool}}
 * (attnd models have no dependents: it changes nothing). */
static int check_unload_body(const attnd_exchange *x, attnd_http_error *err)
{
    json_t *root = NULL;
    if (parse_body(x, &root, err) != 0)
        return -1;
    int rc = root ? only_keys(root, "", "parameters", err) : 0;
    json_t *params = root ? json_object_get(root, "parameters") : NULL;
    if (rc == 0 && params && !json_is_object(params))
        rc = attnd_http_fail(err, 400, "invalid_type", "parameters",
                             "parameters must be an object");
    if (rc == 0 && params)
        rc = only_keys(params, "parameters", "unload_dependents", err);
    json_t *deps = rc == 0 && params ? json_object_get(params, "unload_dependents") : NULL;
    if (deps && !json_is_boolean(deps))
        rc = attnd_http_fail(err, 400, "invalid_type", "parameters.unload_dependents",
                             "parameters.unload_dependents must be true or false");
    json_decref(root);
    return rc;
}

static void answer_unload(attnd_exchange *x, attnd_reply *out)
{
    attnd_http_error err;
    char name[80], loaded[200];
    int ok = path_name(x, name, sizeof name, &err) == 0 && check_unload_body(x, &err) == 0;
    if (ok && attnd_models_repo_unload(x->app->models, name) != ATTND_REPO_OK) {
        attnd_models_loaded_names(x->app->models, loaded, sizeof loaded);
        attnd_http_error_set(&err, 404, "model_not_found", "",
                             "no model named \"%s\" is configured or was loaded (loaded: %s)",
                             name, loaded);
        ok = 0;
    }
    attnd_metrics_repository(x->app->metrics, 0, ok);
    if (ok)
        attnd_retired_bound(x->app->sessions, x->app->models, (size_t)x->app->cfg->max_retired_bytes);
    if (!ok) {
        attnd_handler_v2_error(out, &err);
        return;
    }
    reply_json(out, 200, json_pack("{s:s, s:s}", "name", name, "state", "UNAVAILABLE"));
}

const attnd_handler attnd_handler_repo_index = {.protocol = "v2",
                                                .check_headers = check_body_headers,
                                                .answer = answer_index,
                                                .error = attnd_handler_v2_error};
const attnd_handler attnd_handler_repo_load = {.protocol = "v2",
                                               .check_headers = check_admin,
                                               .answer = answer_load,
                                               .error = attnd_handler_v2_error};
const attnd_handler attnd_handler_repo_unload = {.protocol = "v2",
                                                 .check_headers = check_admin,
                                                 .answer = answer_unload,
                                                 .error = attnd_handler_v2_error};
