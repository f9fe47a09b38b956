/* handler_ops.c — liveness, readiness, metrics and the playground (handler_ops.h). */
#include "protocol/handler_ops.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/ui_assets.h"

static const char metrics_type[] = "text/plain; version=0.0.4; charset=utf-8";

/* {"status":"ok"}, plus "replica" when --replica-name is set (a gateway's probes and
 * an operator see which replica answered). The name is [a-z0-9-]: no escaping. */
static void healthz(attnd_exchange *x, attnd_reply *out)
{
    const char *name = x->app->cfg->replica_name;
    if (!name || !*name) {
        attnd_reply_text(out, 200, attnd_json_type, "{\"status\":\"ok\"}");
        return;
    }
    char body[96];
    snprintf(body, sizeof body, "{\"status\":\"ok\",\"replica\":\"%s\"}", name);
    attnd_reply_text(out, 200, attnd_json_type, body);
}

static void readyz(attnd_exchange *x, attnd_reply *out)
{
    attnd_state state = attnd_app_state(x->app);
    if (state == ATTND_STATE_READY)
        attnd_reply_text(out, 200, attnd_json_type, "{\"status\":\"ready\"}");
    else
        attnd_reply_text(out, 503, attnd_json_type,
                         state == ATTND_STATE_DRAINING ? "{\"status\":\"draining\"}"
                                                       : "{\"status\":\"not_ready\"}");
    out->retry_after = out->status == 503 ? 1 : 0;
}

static void metrics(attnd_exchange *x, attnd_reply *out)
{
    attnd_app *app = x->app;
    int depths[256] = {0};
    int n = attnd_models_capacity(app->cfg); /* the metrics' model slots */
    int ready = attnd_app_state(app) != ATTND_STATE_STARTING;
    int *d = n <= 256 ? depths : malloc((size_t)n * sizeof *d);
    if (!d)
        return; /* body NULL: http.c answers 500 out of memory */
    for (int i = 0; i < n; i++)
        d[i] = ready ? attnd_models_queue_depth(app->models, i) : -1;
    size_t len = 0;
    char *body = attnd_metrics_render(app->metrics, d, &len);
    attnd_reply_body(out, 200, metrics_type, body, len);
    if (d != depths)
        free(d);
}

int attnd_handler_ops_ui_has(const char *path)
{
    const unsigned char *body;
    size_t len;
    const char *type;
    return attnd_ui_lookup(path, &body, &len, &type);
}

static void ui(attnd_exchange *x, attnd_reply *out)
{
    const unsigned char *body;
    if (!attnd_ui_lookup(x->path, &body, &out->len, &out->content_type))
        return; /* the row accepts only paths the lookup has: cannot happen */
    out->status = 200;
    out->body = (char *)(uintptr_t)body; /* static: never freed or written */
    out->body_static = 1;
}

const attnd_handler attnd_handler_ops_healthz = {
    .protocol = "ops", .answer = healthz, .error = attnd_reply_error};
const attnd_handler attnd_handler_ops_readyz = {
    .protocol = "ops", .answer = readyz, .error = attnd_reply_error};
const attnd_handler attnd_handler_ops_metrics = {
    .protocol = "ops", .answer = metrics, .error = attnd_reply_error};
const attnd_handler attnd_handler_ops_ui = {
    .protocol = "ops", .answer = ui, .error = attnd_reply_error};
