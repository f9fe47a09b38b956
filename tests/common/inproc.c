/* inproc.c — attnd's request path without sockets (inproc.h). The app is built
 * the way server/main.c builds it; a call runs the phases of server/http.c
 * (begin, take_body, respond, submit, finish, on_completed) in one thread,
 * waiting on a condition variable where http.c suspends the connection.
 * Keep the two in step when http.c's order of checks changes.
 */
#include "inproc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/auth.h"
#include "protocol/handler_session.h"
#include "core/jsonload.h"
#include "http/route.h"
#include "engine/scheduler.h"

struct inproc {
    attnd_config cfg;
    attnd_models models;
    attnd_app app;
    const char **names;
};

/* One call's transport state (http.c's conn). */
typedef struct call_state {
    const inproc_call *call;
    const char *query;            /* after '?', or NULL                       */
    char length[24];              /* the body's length, as text               */
    int64_t reserved, budget;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} call_state;

attnd_app *inproc_app(inproc *p) { return &p->app; }

static int make_app(inproc *p, char *err, size_t errlen)
{
    attnd_config *cfg = &p->cfg;
    const int n_slots = attnd_models_capacity(cfg); /* as main.c sizes them */
    p->names = calloc((size_t)n_slots, sizeof *p->names);
    if (!p->names)
        return snprintf(err, errlen, "out of memory"), -1;
    for (int i = 0; i < cfg->n_models; i++)
        p->names[i] = cfg->models[i].name;
    p->app.metrics = attnd_metrics_create(n_slots, p->names, ATTND_ROUTE_COUNT,
                                          attnd_route_labels());
    if (!p->app.metrics)
        return snprintf(err, errlen, "cannot create metrics"), -1;
    p->app.auth = attnd_auth_create(cfg, err, errlen);
    if (!p->app.auth)
        return -1;
    p->app.limits = (attnd_decode_limits){
        .max_seq_len = cfg->max_seq_len, .max_batch_seqs = cfg->max_batch_seqs,
        .max_weights_elems = (size_t)cfg->max_weights_elems,
        .max_json_depth = cfg->max_json_depth};
    if (attnd_models_load(&p->models, cfg, p->app.metrics, err, errlen) != 0)
        return -1;
    p->app.sessions = attnd_session_store_create(cfg, &p->models, p->app.metrics, err, errlen);
    if (!p->app.sessions)
        return -1;
    atomic_store(&p->app.state, ATTND_STATE_READY);
    return 0;
}

inproc *inproc_start(int argc, char **argv, char *err, size_t errlen)
{
    inproc *p = calloc(1, sizeof *p);
    if (!p)
        return snprintf(err, errlen, "out of memory"), NULL;
    if (attnd_config_load(&p->cfg, argc, argv, err, errlen) != ATTND_CONFIG_RUN) {
        attnd_config_free(&p->cfg);
        free(p);
        return NULL;
    }
    attnd_json_install_alloc(); /* as main.c does */
    p->app.cfg = &p->cfg;
    p->app.models = &p->models;
    atomic_init(&p->app.state, ATTND_STATE_STARTING);
    if (attnd_models_expand(&p->cfg, err, errlen) != 0 || make_app(p, err, errlen) != 0) {
        inproc_stop(p);
        return NULL;
    }
    return p;
}

void inproc_stop(inproc *p)
{
    if (!p)
        return;
    attnd_models_drain(&p->models);
    attnd_sessions_free(p->app.sessions);
    attnd_models_free(&p->models);
    attnd_auth_free(p->app.auth);
    attnd_metrics_free(p->app.metrics);
    free(p->names);
    attnd_config_free(&p->cfg);
    free(p);
}

void inproc_reply_free(attnd_reply *r)
{
    if (!r->body_static)
        free(r->body);
    r->body = NULL;
}

/* ------------------------------------------------------------ the exchange */

/* The value of the last header called name, or NULL. */
static const char *header_of(const inproc_call *c, const char *name)
{
    const char *v = NULL;
    for (int i = 0; i < c->n_headers; i++)
        if (strcasecmp(c->headers[i].name, name) == 0)
            v = c->headers[i].value;
    return v;
}

/* A header; Content-Length defaults to the body's length for a POST without
 * one (and without Transfer-Encoding), as a client sends it. */
static const char *exchange_header(const attnd_exchange *x, const char *name)
{
    const call_state *cs = x->transport;
    const char *v = header_of(cs->call, name);
    if (!v && strcasecmp(name, "Content-Length") == 0 && strcmp(cs->call->method, "POST") == 0 &&
        !header_of(cs->call, "Transfer-Encoding"))
        v = cs->length;
    return v;
}

/* A query argument's value (not unescaped), in a static buffer: the handlers
 * read it at once. */
static const char *exchange_query(const attnd_exchange *x, const char *name)
{
    static _Thread_local char value[256];
    const char *q = ((const call_state *)x->transport)->query;
    size_t n = strlen(name);
    for (; q && *q; q = strchr(q, '&') ? strchr(q, '&') + 1 : NULL) {
        if (strncmp(q, name, n) != 0 || (q[n] != '=' && q[n] != '&' && q[n] != '\0'))
            continue;
        const char *v = q[n] == '=' ? q + n + 1 : q + n;
        size_t len = strcspn(v, "&");
        snprintf(value, sizeof value, "%.*s", (int)(len < 255 ? len : 255), v);
        return value;
    }
    return NULL;
}

static int exchange_reserve(attnd_exchange *x, size_t bytes, attnd_http_error *err)
{
    call_state *cs = x->transport;
    if ((int64_t)bytes > cs->budget - cs->reserved)
        return attnd_http_fail(err, 413, "limit_exceeded", "",
                               "parsing this body needs %zu bytes, over max_inflight_bytes",
                               bytes);
    cs->reserved += (int64_t)bytes;
    return 0;
}

/* http.c's check_framing and Expect check: 400 / 417. */
static int check_transport(const inproc_call *c, attnd_http_error *e)
{
    const char *first = NULL, *te = header_of(c, "Transfer-Encoding");
    int n = 0;
    for (int i = 0; i < c->n_headers; i++) {
        if (strcasecmp(c->headers[i].name, "Content-Length") != 0)
            continue;
        if (n++ && strcmp(first, c->headers[i].value) != 0)
            return attnd_http_fail(e, 400, "invalid_header", "Content-Length",
                                   "Content-Length headers with different values");
        first = c->headers[i].value;
    }
    if (te && (n || strcasecmp(te, "chunked") != 0))
        return attnd_http_fail(e, 400, "invalid_header", "Transfer-Encoding",
                               "ambiguous body framing");
    const char *expect = header_of(c, "Expect");
    if (expect && strcasecmp(expect, "100-continue") != 0)
        return attnd_http_fail(e, 417, "expectation_failed", "Expect", "cannot be met");
    return 0;
}

static void on_done(attnd_request *req, void *ctx)
{
    call_state *cs = ctx;
    (void)req;
    pthread_mutex_lock(&cs->mu);
    cs->done = 1;
    pthread_cond_signal(&cs->cv);
    pthread_mutex_unlock(&cs->mu);
}

/* http.c's submit + finish: decode, the scheduler, the handler's reply. */
static void compute(attnd_exchange *x, const attnd_handler *hd, call_state *cs,
                    attnd_reply *out)
{
    attnd_http_error e;
    attnd_request *req = NULL;
    if (hd->decode(x, &req, &e) != 0) {
        hd->error(out, &e);
        return;
    }
    req->on_done = on_done;
    req->on_done_ctx = cs;
    req->layer = x->model->layer;
    attnd_submit_result sr = attnd_scheduler_submit(x->model->sched, req);
    if (sr != ATTND_SUBMIT_OK) {
        attnd_request_free(req);
        if (hd->end)
            hd->end(x);
        hd->error(out, attnd_http_error_set(&e, 503, sr == ATTND_SUBMIT_FULL ? "queue_full"
                                                                             : "draining",
                                            "", "not submitted"));
        return;
    }
    pthread_mutex_lock(&cs->mu);
    while (!cs->done)
        pthread_cond_wait(&cs->cv, &cs->mu);
    pthread_mutex_unlock(&cs->mu);
    hd->finish(x, req, out);
    attnd_request_free(req);
}

/* Everything from the headers to the reply; x is resolved here. */
static void exchange(inproc *p, call_state *cs, attnd_exchange *x, char *body,
                     attnd_reply *out)
{
    const inproc_call *c = cs->call;
    attnd_http_error e;
    const attnd_route_def *route = NULL;
    const char *allow = NULL;
    const attnd_handler *fallback = attnd_route_fallback();
    if (check_transport(c, &e) != 0) {
        fallback->error(out, &e);
        return;
    }
    if (!attnd_auth_allows(p->app.auth, x->path, header_of(c, "Authorization"),
                           p->cfg.metrics_require_key)) {
        fallback->error(out, attnd_http_error_set(&e, 401, "unauthorized", "", "no valid key"));
        return;
    }
    if (attnd_route_resolve(&p->app, c->method, x->path, x, &route, &e, &allow) != 0) {
        (route ? route->handler : fallback)->error(out, &e);
        out->allow = allow;
        return;
    }
    const attnd_handler *hd = route->handler;
    if ((strcmp(c->method, "POST") == 0 && hd->check_headers && hd->check_headers(x, &e) != 0) ||
        (c->body_len > (size_t)p->cfg.max_body_bytes &&
         attnd_http_error_set(&e, 413, "body_too_large", "", "over max_body_bytes"))) {
        hd->error(out, &e);
        return;
    }
    x->body = body;
    x->body_len = c->body_len;
    if (hd->answer)
        hd->answer(x, out);
    else
        compute(x, hd, cs, out);
    if (hd->end)
        hd->end(x);
}

void inproc_run(inproc *p, const inproc_call *c, attnd_reply *out)
{
    memset(out, 0, sizeof *out);
    call_state cs = {.call = c, .budget = p->cfg.max_inflight_bytes};
    snprintf(cs.length, sizeof cs.length, "%zu", c->body_len);
    pthread_mutex_init(&cs.mu, NULL);
    pthread_cond_init(&cs.cv, NULL);
    size_t plen = strcspn(c->path, "?");
    char *path = malloc(plen + 1), *body = malloc(c->body_len + 1);
    if (path && body) {
        memcpy(path, c->path, plen);
        path[plen] = '\0';
        cs.query = c->path[plen] ? c->path + plen + 1 : NULL;
        if (c->body_len)
            memcpy(body, c->body, c->body_len);
        body[c->body_len] = '\0';
        attnd_exchange x = {.method = c->method, .path = path, .header = exchange_header,
                            .query = exchange_query, .reserve = exchange_reserve,
                            .transport = &cs};
        exchange(p, &cs, &x, body, out);
        attnd_model_release(x.model);
    } else {
        out->status = 500; /* http.c: out of memory reading the body */
    }
    free(path);
    free(body);
    pthread_cond_destroy(&cs.cv);
    pthread_mutex_destroy(&cs.mu);
}
