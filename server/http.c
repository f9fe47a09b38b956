/* http.c — libmicrohttpd glue for attnd: listening socket, thread pool, the
 * access handler's per-request state machine, the in-flight byte budget, the
 * read-timeout reaper, completion cleanup. It knows no protocol: the route
 * table (route.c) names the handler for a URL, and this file drives any
 * handler through its callbacks (handler.h):
 *   headers: auth, attnd_route_resolve, handler->check_headers (POST)
 *   body:    accumulated under max_body_bytes and max_inflight_bytes
 *   then:    handler->answer, or handler->decode -> suspend -> scheduler ->
 *            on_done resumes -> handler->finish
 *   end:     handler->end, the model reference released, the request freed.
 */
#include "http.h"

#include <assert.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "log.h"
#include "route.h"

struct attnd_http {
    attnd_app *app;              /* borrowed                                    */
    struct MHD_Daemon *daemon;
    int listen_fd;               /* ours after quiesce, else MHD's               */
    int quiesced;
    int port;
    _Atomic int pending;         /* attention requests submitted, not yet sent  */
    _Atomic int64_t inflight_bytes; /* bodies + decoded requests held (budget)  */
    char *tls_cert, *tls_key;    /* PEM text, owned; MHD borrows them           */
    /* The read-timeout reaper: every open socket, and a thread that shuts down
     * those whose request has not fully arrived within request_read_timeout_s. */
    pthread_mutex_t socks_mu;
    pthread_cond_t reaper_cv;
    struct sock_state *socks;    /* doubly linked, guarded by socks_mu          */
    int reaper_stop;             /* guarded by socks_mu                          */
    int reaper_started;
    pthread_t reaper;
};

/* One TCP connection (MHD's socket context), from accept to close. */
typedef struct sock_state {
    struct sock_state *prev, *next;
    int fd;
    _Atomic int64_t phase_ns;    /* connection start, or end of its last request */
    _Atomic int busy;            /* its request fully arrived: computing/answering */
} sock_state;

/* One request's state, hung on MHD's con_cls pointer. Created on the first
 * access-handler call, freed in on_completed. */
typedef struct conn {
    attnd_http *http;
    struct MHD_Connection *mc;
    const char *method, *url;    /* MHD's, valid for the request's lifetime     */
    int64_t start_ns;
    const attnd_route_def *route;/* the matched row, or NULL (no route)         */
    attnd_route route_id;        /* for metrics: route->id, or ATTND_ROUTE_OTHER */
    attnd_exchange x;            /* what the handler sees                       */
    int has_err;                 /* err is the answer; any body is discarded    */
    size_t discarded;            /* body bytes thrown away since               */
    attnd_http_error err;
    const char *allow;
    char *body;                  /* the body so far (NUL-terminated)            */
    size_t len, cap;
    attnd_request *req;          /* decoded; in the scheduler while submitted   */
    int submitted;
    _Atomic int done;            /* set by on_done (worker thread)              */
    int responded;
    int status;
    int64_t reserved;            /* bytes counted in http->inflight_bytes       */
    sock_state *sock;            /* the connection's socket state, or NULL      */
} conn;

static const char internal_body[] =
    "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\",\"field\":\"\"}}";

/* ------------------------------------------------------------ responses */

/* Queues r (taking its body). Returns 0, or -1 when MHD refused it now. */
static int queue_reply(conn *c, attnd_reply *r)
{
    struct MHD_Response *resp;
    if (r->body && r->body_static) {
        resp = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_PERSISTENT);
    } else if (r->body) {
        resp = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
        if (!resp)
            free(r->body);
    } else {
        r->status = 500;
        r->content_type = "application/json";
        snprintf(r->code, sizeof r->code, "internal");
        snprintf(r->log_detail, sizeof r->log_detail, "out of memory building the response");
        resp = MHD_create_response_from_buffer(sizeof internal_body - 1, (void *)internal_body,
                                               MHD_RESPMEM_PERSISTENT);
    }
    r->body = NULL;
    if (!resp)
        return -1;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->content_type ? r->content_type : "application/json");
    if (r->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer realm=\"attnd\"");
    if (r->header_name)
        MHD_add_response_header(resp, r->header_name, r->header_value);
    if (r->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", r->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    enum MHD_Result ok = MHD_queue_response(c->mc, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    if (ok != MHD_YES)
        return -1;
    c->responded = 1;
    c->status = r->status;
    if (c->sock)
        atomic_store_explicit(&c->sock->busy, 1, memory_order_relaxed);
    if (r->status >= 400)
        attnd_log(r->status >= 500 && r->status != 503 && r->status != 504 ? ATTND_LOG_ERROR
                                                                           : ATTND_LOG_WARN,
                  "%s %s -> %d %s: %s", c->method, c->url, r->status, r->code, r->log_detail);
    else if (attnd_log_enabled(ATTND_LOG_DEBUG))
        attnd_log(ATTND_LOG_DEBUG, "%s %s -> %d in %.3f ms", c->method, c->url, r->status,
                  (double)(attnd_now_ns() - c->start_ns) / 1e6);
    return 0;
}

static enum MHD_Result send_reply(conn *c, attnd_reply *r)
{
    return queue_reply(c, r) == 0 ? MHD_YES : MHD_NO;
}

/* The handler that speaks for c: its route's, or the fallback's. */
static const attnd_handler *handler_of(const conn *c)
{
    return c->route ? c->route->handler : attnd_route_fallback();
}

/* The error body in the form of the request's protocol. */
static void error_reply(const conn *c, attnd_reply *r, const attnd_http_error *e)
{
    handler_of(c)->error(r, e);
}

static enum MHD_Result send_error(conn *c, const attnd_http_error *e)
{
    attnd_reply r = {0};
    error_reply(c, &r, e);
    r.allow = c->allow;
    return send_reply(c, &r);
}

/* ------------------------------------------------------------ the phases */

static const char *header(conn *c, const char *name)
{
    return MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, name);
}

/* attnd_exchange.header: the handlers' view of the request headers. */
static const char *exchange_header(const attnd_exchange *x, const char *name)
{
    return header(x->transport, name);
}

/* Counts n more bytes against max_inflight_bytes for c. Returns 0, or -1 (and
 * counts nothing) when that would go over the budget. */
static int budget_take(conn *c, int64_t n)
{
    attnd_http *h = c->http;
    int64_t max = h->app->cfg->max_inflight_bytes;
    int64_t now = atomic_fetch_add_explicit(&h->inflight_bytes, n, memory_order_relaxed) + n;
    if (n > 0 && now > max) {
        atomic_fetch_sub_explicit(&h->inflight_bytes, n, memory_order_relaxed);
        return -1;
    }
    c->reserved += n;
    return 0;
}

static void budget_give(conn *c, int64_t n)
{
    atomic_fetch_sub_explicit(&c->http->inflight_bytes, n, memory_order_relaxed);
    c->reserved -= n;
}

static attnd_http_error *overloaded(conn *c, attnd_http_error *e, int64_t want)
{
    return attnd_http_error_set(e, 503, "overloaded", "",
                                "requests in flight hold %lld bytes; %lld more would exceed "
                                "max_inflight_bytes (%lld): retry later",
                                (long long)atomic_load(&c->http->inflight_bytes),
                                (long long)want, (long long)c->http->app->cfg->max_inflight_bytes);
}

/* First call: headers are in. Decides the route and everything the headers
 * alone can refuse. Only 413 is answered at once (never read a body known to
 * be too large); other refusals wait until the body has been read and
 * discarded, so the connection stays usable. */
static enum MHD_Result begin(conn *c)
{
    attnd_app *app = c->http->app;
    if (!attnd_auth_allows(app->auth, c->url, header(c, MHD_HTTP_HEADER_AUTHORIZATION),
                           app->cfg->metrics_require_key)) {
        /* At once: no body is read from a client without a key. */
        attnd_http_error_set(&c->err, 401, "unauthorized", "",
                             "this route needs 'Authorization: Bearer <API key>' with a "
                             "valid key");
        return send_error(c, &c->err);
    }
    c->x.header = exchange_header;
    c->x.transport = c;
    int rc = attnd_route_resolve(app, c->method, c->url, &c->x, &c->route, &c->err, &c->allow);
    c->route_id = c->route ? c->route->id : ATTND_ROUTE_OTHER;
    if (rc != 0) {
        c->has_err = 1;
        return MHD_YES;
    }
    if (strcmp(c->method, MHD_HTTP_METHOD_POST) != 0)
        return MHD_YES;
    const attnd_handler *hd = c->route->handler;
    if (hd->check_headers && hd->check_headers(&c->x, &c->err) != 0) {
        if (c->err.status == 413)
            return send_error(c, &c->err);
        c->has_err = 1;
        return MHD_YES;
    }
    const char *cl = header(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) { /* exact allocation up front; the check above bounded it */
        size_t n = (size_t)strtoull(cl, NULL, 10);
        if (budget_take(c, (int64_t)n + 1) != 0) /* at once, as for 413 */
            return send_error(c, overloaded(c, &c->err, (int64_t)n + 1));
        c->body = malloc(n + 1);
        c->cap = c->body ? n + 1 : 0;
    }
    return MHD_YES;
}

/* A chunk of body. Keeps at most max_body_bytes. Past that the answer is 413:
 * at once if libmicrohttpd allows a response mid-body (0.9.75 does not), else
 * when the body ends. A refused body is read and dropped so the connection
 * can carry the answer, but a client that sends another max_body_bytes after
 * the refusal is disconnected: discarding is bounded too. */
static enum MHD_Result take_body(conn *c, const char *data, size_t *size)
{
    size_t n = *size, max = (size_t)c->http->app->cfg->max_body_bytes;
    *size = 0;
    if (c->has_err) {
        c->discarded += n;
        if (c->discarded <= max)
            return MHD_YES;
        attnd_log(ATTND_LOG_WARN, "%s %s: closing the connection: %zu more body bytes after "
                  "a %d answer", c->method, c->url, c->discarded, c->err.status);
        return MHD_NO;
    }
    if (n > max - c->len) {
        attnd_http_error_set(&c->err, 413, "body_too_large", "",
                             "body is over max_body_bytes (%zu)", max);
        free(c->body);
        c->body = NULL;
        c->len = c->cap = 0;
        c->has_err = 1;
        attnd_reply r = {0};
        error_reply(c, &r, &c->err);
        queue_reply(c, &r); /* if MHD will not answer mid-body, the rest is discarded */
        return MHD_YES;
    }
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 65536;
        while (cap < c->len + n + 1)
            cap *= 2;
        if (cap > max + 1)
            cap = max + 1;
        if (budget_take(c, (int64_t)(cap - c->cap)) != 0) {
            overloaded(c, &c->err, (int64_t)(cap - c->cap));
            c->has_err = 1;
            free(c->body);
            c->body = NULL;
            budget_give(c, (int64_t)c->cap);
            c->len = c->cap = 0;
            return MHD_YES;
        }
        char *grown = realloc(c->body, cap);
        if (!grown) {
            attnd_http_error_set(&c->err, 500, "internal", "", "out of memory reading the body");
            c->has_err = 1;
            return MHD_YES;
        }
        c->body = grown;
        c->cap = cap;
    }
    memcpy(c->body + c->len, data, n);
    c->len += n;
    c->body[c->len] = '\0';
    return MHD_YES;
}

/* Worker thread, once per submitted request: just wake the connection up. */
static void on_done(attnd_request *req, void *ctx)
{
    conn *c = ctx;
    (void)req;
    struct MHD_Connection *mc = c->mc;
    atomic_store_explicit(&c->done, 1, memory_order_release);
    MHD_resume_connection(mc); /* c may be gone once this returns */
}

/* The body is complete: the handler decodes it, then it goes to the scheduler
 * of the exchange's model and the connection is suspended. */
static enum MHD_Result submit(conn *c)
{
    attnd_app *app = c->http->app;
    const attnd_handler *hd = c->route->handler;
    attnd_http_error e;
    if (attnd_app_state(app) == ATTND_STATE_DRAINING)
        return send_error(c, attnd_http_error_set(&e, 503, "draining", "",
                                                  "attnd is shutting down"));
    attnd_request *req = NULL;
    if (hd->decode(&c->x, &req, &e) != 0)
        return send_error(c, &e);
    attnd_model *m = c->x.model; /* decode may have picked it (a session's version) */
    assert(m && req);
    free(c->body); /* the request owns native copies now */
    c->body = NULL;
    c->x.body = NULL;
    budget_give(c, c->reserved);
    if (budget_take(c, (int64_t)req->bytes) != 0) {
        attnd_request_free(req);
        return send_error(c, overloaded(c, &e, (int64_t)req->bytes));
    }
    if (c->sock)
        atomic_store_explicit(&c->sock->busy, 1, memory_order_relaxed);
    req->on_done = on_done;
    req->on_done_ctx = c;
    c->req = req;
    c->submitted = 1;
    atomic_fetch_add(&c->http->pending, 1);
    /* Suspend before submitting: on_done may resume us at any moment after. */
    MHD_suspend_connection(c->mc);
    attnd_submit_result sr = attnd_scheduler_submit(m->sched, req);
    if (sr == ATTND_SUBMIT_OK)
        return MHD_YES;
    c->submitted = 0;
    atomic_fetch_sub(&c->http->pending, 1);
    c->req = NULL;
    attnd_request_free(req);
    if (hd->end)
        hd->end(&c->x); /* e.g. a session's append slot is free for a retry now */
    if (sr == ATTND_SUBMIT_FULL)
        attnd_http_error_set(&c->err, 503, "queue_full", "",
                             "model %s has %d requests waiting (max_queue); retry later",
                             m->name, app->cfg->max_queue);
    else
        attnd_http_error_set(&c->err, 503, "draining", "", "attnd is shutting down");
    c->has_err = 1;
    MHD_resume_connection(c->mc); /* called again at once: answers c->err */
    return MHD_YES;
}

/* Resumed after the scheduler finished c->req: the handler answers. */
static enum MHD_Result finish(conn *c)
{
    int done = atomic_load_explicit(&c->done, memory_order_acquire);
    assert(done); /* we were suspended until on_done resumed us */
    if (!done)
        return MHD_YES; /* release builds: not ours to answer yet */
    attnd_reply r = {0};
    c->route->handler->finish(&c->x, c->req, &r);
    return send_reply(c, &r);
}

/* The request is complete (headers, and the body if any): answer it. */
static enum MHD_Result respond(conn *c)
{
    if (c->has_err)
        return send_error(c, &c->err);
    if (c->req)
        return finish(c);
    c->x.body = c->body ? c->body : "";
    c->x.body_len = c->len;
    const attnd_handler *hd = c->route->handler;
    if (hd->answer) { /* reads, session create and delete: answered now */
        attnd_reply r = {0};
        hd->answer(&c->x, &r);
        return send_reply(c, &r);
    }
    return submit(c);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    attnd_http *h = cls;
    conn *c = *con_cls;
    (void)version;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        c->http = h;
        c->mc = mc;
        c->method = method;
        c->url = url;
        c->start_ns = attnd_now_ns();
        c->route_id = ATTND_ROUTE_OTHER;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        c->sock = ci ? ci->socket_context : NULL;
        *con_cls = c;
        attnd_metrics_in_flight_add(h->app->metrics, 1);
        return begin(c);
    }
    if (c->responded) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size)
        return take_body(c, upload_data, upload_size);
    return respond(c);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    attnd_http *h = cls;
    conn *c = *con_cls;
    (void)mc;
    if (!c)
        return;
    *con_cls = NULL;
    attnd_app *app = h->app;
    int model = c->x.model ? c->x.model->index : -1;
    if (c->responded)
        attnd_metrics_request_done(app->metrics, model, (int)c->route_id,
                                   attnd_route_is_attention(c->route_id), c->status,
                                   attnd_now_ns() - c->start_ns);
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        attnd_log(ATTND_LOG_DEBUG, "%s %s: connection ended early (code %d)", c->method,
                  c->url, (int)toe);
    attnd_metrics_in_flight_add(app->metrics, -1);
    if (c->sock) { /* the next request on this connection starts its clock now */
        atomic_store_explicit(&c->sock->phase_ns, attnd_now_ns(), memory_order_relaxed);
        atomic_store_explicit(&c->sock->busy, 0, memory_order_relaxed);
    }
    int computing = c->submitted && !atomic_load_explicit(&c->done, memory_order_acquire);
    assert(!computing); /* libmicrohttpd never closes a suspended connection */
    if (computing) {
        /* Release builds: a request still in a scheduler must not be freed
         * under a worker: leak it. */
        attnd_log(ATTND_LOG_ERROR, "%s %s: connection closed while computing", c->method,
                  c->url);
        free(c->body);
        return;
    }
    if (c->submitted)
        atomic_fetch_sub(&h->pending, 1);
    if (c->route && c->route->handler->end)
        c->route->handler->end(&c->x);
    budget_give(c, c->reserved);
    attnd_model_release(c->x.model);
    attnd_request_free(c->req);
    free(c->body);
    free(c);
}

/* ------------------------------------------------------------ read timeout */

/* MHD_OPTION_NOTIFY_CONNECTION: tracks every socket for the reaper. MHD calls
 * CLOSED before it closes the socket, so under socks_mu a listed fd is open. */
static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    attnd_http *h = cls;
    sock_state *ss = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        ss = ci ? calloc(1, sizeof *ss) : NULL;
        if (!ss)
            return; /* untracked: only the idle timeout applies to it */
        ss->fd = ci->connect_fd;
        atomic_init(&ss->phase_ns, attnd_now_ns());
        atomic_init(&ss->busy, 0);
        pthread_mutex_lock(&h->socks_mu);
        ss->next = h->socks;
        if (h->socks)
            h->socks->prev = ss;
        h->socks = ss;
        pthread_mutex_unlock(&h->socks_mu);
        *socket_context = ss;
        return;
    }
    if (!ss)
        return;
    pthread_mutex_lock(&h->socks_mu);
    if (ss->prev)
        ss->prev->next = ss->next;
    else
        h->socks = ss->next;
    if (ss->next)
        ss->next->prev = ss->prev;
    pthread_mutex_unlock(&h->socks_mu);
    free(ss);
    *socket_context = NULL;
}

/* Shuts down (does not close: MHD owns the fd) every socket whose request has
 * been arriving for longer than the limit. MHD then sees the end of the stream
 * and cleans the connection up as usual. Idle-timeout alone cannot do this: a
 * client sending one byte a second is never idle. */
static void *reaper_main(void *arg)
{
    attnd_http *h = arg;
    int64_t limit_ns = (int64_t)h->app->cfg->request_read_timeout_s * 1000000000;
    pthread_mutex_lock(&h->socks_mu);
    while (!h->reaper_stop) {
        int64_t now = attnd_now_ns();
        for (sock_state *ss = h->socks; ss; ss = ss->next) {
            if (atomic_load_explicit(&ss->busy, memory_order_relaxed) ||
                now - atomic_load_explicit(&ss->phase_ns, memory_order_relaxed) <= limit_ns)
                continue;
            attnd_log(ATTND_LOG_WARN, "closing a connection: its request did not arrive within "
                      "request_read_timeout_s (%d s)", h->app->cfg->request_read_timeout_s);
            shutdown(ss->fd, SHUT_RDWR);
            atomic_store_explicit(&ss->phase_ns, INT64_MAX / 2, memory_order_relaxed); /* once */
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->reaper_cv, &h->socks_mu, &ts);
    }
    pthread_mutex_unlock(&h->socks_mu);
    return NULL;
}

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    attnd_log(ATTND_LOG_WARN, "libmicrohttpd: %s", msg);
}

/* ------------------------------------------------------------ listening */

/* Splits "HOST:PORT", "[V6]:PORT" or ":PORT" (all interfaces). */
static int split_listen(const char *s, char *host, size_t hcap, char *port, size_t pcap)
{
    const char *colon;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return -1;
        snprintf(host, hcap, "%.*s", (int)(close - s - 1), s + 1);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -1;
        snprintf(host, hcap, "%.*s", (int)(colon - s), s);
    }
    snprintf(port, pcap, "%s", colon + 1);
    return *port ? 0 : -1;
}

static int bind_listen(const char *addr, int *port_out, char *err, size_t errlen)
{
    char host[256], port[32];
    if (split_listen(addr, host, sizeof host, port, sizeof port) != 0) {
        snprintf(err, errlen, "listen address '%s': expected HOST:PORT", addr);
        return -1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(*host && strcmp(host, "*") ? host : NULL, port, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "listen address '%s': %s", addr, gai_strerror(gai));
        return -1;
    }
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
            saved = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(saved));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *port_out = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                   : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* Reads a whole PEM file (at most 1 MiB). Returns malloc'd text or NULL + err. */
static char *read_pem(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = f ? malloc(1 << 20) : NULL;
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    int bad = !f || !buf || ferror(f) || n == 0 || !feof(f);
    if (bad) {
        snprintf(err, errlen, "TLS file %s: %s", path,
                 !f ? strerror(errno) : !buf ? "out of memory" : "unreadable, empty or over 1 MiB");
        free(buf);
        buf = NULL;
    } else {
        buf[n] = '\0';
    }
    if (f)
        fclose(f);
    return buf;
}

/* Fills h->tls_* when TLS is configured. Returns 0, or -1 with err. */
static int load_tls(attnd_http *h, const attnd_config *cfg, char *err, size_t errlen)
{
    if (!*cfg->tls_cert)
        return 0;
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(err, errlen, "--tls-cert given, but this libmicrohttpd has no TLS support");
        return -1;
    }
    h->tls_cert = read_pem(cfg->tls_cert, err, errlen);
    h->tls_key = h->tls_cert ? read_pem(cfg->tls_key, err, errlen) : NULL;
    return h->tls_key ? 0 : -1;
}

static void free_http(attnd_http *h)
{
    if (h->tls_key) /* the private key should not linger in freed memory */
        memset(h->tls_key, 0, strlen(h->tls_key));
    free(h->tls_key);
    free(h->tls_cert);
    pthread_cond_destroy(&h->reaper_cv);
    pthread_mutex_destroy(&h->socks_mu);
    free(h);
}

attnd_http *attnd_http_start(attnd_app *app, char *err, size_t errlen)
{
    const attnd_config *cfg = app->cfg;
    attnd_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->app = app;
    pthread_mutex_init(&h->socks_mu, NULL);
    pthread_cond_init(&h->reaper_cv, NULL);
    if (load_tls(h, cfg, err, errlen) != 0)
        goto fail;
    h->listen_fd = bind_listen(cfg->listen, &h->port, err, errlen);
    if (h->listen_fd < 0)
        goto fail;
    int epoll = MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC | (epoll ? MHD_USE_EPOLL : MHD_USE_POLL) |
                     (h->tls_cert ? MHD_USE_TLS : 0);
    struct MHD_OptionItem tls_opts[] = {
        {MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls_key},
        {MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls_cert},
        {MHD_OPTION_END, 0, NULL},
    };
    h->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, h,
        MHD_OPTION_ARRAY, h->tls_cert ? tls_opts : tls_opts + 2,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
        MHD_OPTION_LISTEN_SOCKET, h->listen_fd,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->http_threads, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)cfg->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)cfg->connection_timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_END);
    if (!h->daemon) {
        snprintf(err, errlen, "libmicrohttpd failed to start on %s (see the log above)",
                 cfg->listen);
        close(h->listen_fd);
        goto fail;
    }
    if (cfg->request_read_timeout_s > 0) {
        if (pthread_create(&h->reaper, NULL, reaper_main, h) != 0) {
            snprintf(err, errlen, "cannot start the read-timeout thread");
            MHD_stop_daemon(h->daemon);
            goto fail;
        }
        h->reaper_started = 1;
    }
    attnd_log(ATTND_LOG_INFO,
              "listening on %s (port %d, %s): libmicrohttpd %s, %s, %d HTTP threads, "
              "max %d connections, %d s idle timeout, %d s request read timeout",
              cfg->listen, h->port, h->tls_cert ? "HTTPS" : "HTTP", MHD_get_version(),
              epoll ? "epoll" : "poll", cfg->http_threads, cfg->max_connections,
              cfg->connection_timeout_s, cfg->request_read_timeout_s);
    return h;
fail:
    free_http(h);
    return NULL;
}

int attnd_http_port(const attnd_http *h) { return h->port; }

void attnd_http_quiesce(attnd_http *h)
{
    if (!h || h->quiesced)
        return;
    MHD_socket fd = MHD_quiesce_daemon(h->daemon);
    h->quiesced = 1;
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

int attnd_http_wait_idle(attnd_http *h, int timeout_ms)
{
    struct timespec tick = {0, 5 * 1000000L};
    for (int waited = 0; waited < timeout_ms; waited += 5) {
        if (atomic_load(&h->pending) == 0)
            return 0;
        nanosleep(&tick, NULL);
    }
    return atomic_load(&h->pending);
}

void attnd_http_stop(attnd_http *h)
{
    if (!h)
        return;
    if (h->reaper_started) {
        pthread_mutex_lock(&h->socks_mu);
        h->reaper_stop = 1;
        pthread_cond_signal(&h->reaper_cv);
        pthread_mutex_unlock(&h->socks_mu);
        pthread_join(h->reaper, NULL);
    }
    MHD_stop_daemon(h->daemon);
    free_http(h);
}
