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
 * A body or an answer of at least offload_codec_bytes is decoded / encoded on
 * a codec thread (offload.h) while the connection stays suspended, and an
 * answer of 1 MiB or more is sent SEND_BLOCK bytes per turn of the thread's
 * loop: no connection waits for another's large request on its HTTP thread.
 * Every response carries the request's id (reqid.h) and, for an allowed
 * Origin, the CORS headers (cors.h; preflights are answered before auth);
 * each answered request is one access-log line (access_log.h).
 * Memory held for a request counts against max_inflight_bytes from the first
 * body byte to the last response byte sent: the body as it grows, a codec's
 * parse tree (the exchange's reserve), the decoded request together with an
 * upper bound of its encoded response, then the response itself until
 * libmicrohttpd reports it sent (on_completed).
 */
#include "http/http.h"

#include <assert.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received (glibc's lacks it) */
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http/access_log.h"
#include "core/auth.h"
#include "http/cors.h"
#include "core/log.h"
#include "http/offload.h"
#include "http/reqid.h"
#include "http/route.h"

struct attnd_http {
    attnd_app *app;              /* borrowed                                    */
    struct MHD_Daemon *daemon;
    int listen_fd;               /* bound by us, owned by MHD (closed at stop)   */
    int port;
    _Atomic int pending;         /* attention requests submitted, not yet sent  */
    _Atomic int suspended;       /* suspended, and not yet answered after resume */
    _Atomic int active;          /* requests begun and not completed (conn)     */
    _Atomic int open_socks;      /* TCP connections open                        */
    _Atomic int64_t inflight_bytes; /* bodies, requests, responses held (budget) */
    /* The drain (attnd_http_drain_begin): requests begun before the deadline
     * (the signal + --drain-grace-ms) are served, and so is the next request
     * of every connection owed one: its bytes had reached attnd at the signal
     * (unread in the socket, or the connection still in the listen queue). */
    _Atomic int64_t drain_began_ns;    /* the signal; 0 = not draining           */
    _Atomic int64_t drain_deadline_ns; /* 0 = not draining                       */
    _Atomic int owed_waiting;    /* owed connections whose request has not begun */
    _Atomic int backlog_owed;    /* queued unaccepted at the signal: owed when accepted */
    _Atomic int unsettled;       /* requests begun, neither submitted nor answered */
    char *tls_cert, *tls_key;    /* PEM text, owned; MHD borrows them           */
    /* The read-timeout reaper: every open socket, and a thread that shuts down
     * those whose request has not fully arrived within request_read_timeout_s. */
    pthread_mutex_t socks_mu;
    pthread_cond_t reaper_cv;
    struct sock_state *socks;    /* doubly linked, guarded by socks_mu          */
    int reaper_stop;             /* guarded by socks_mu                          */
    int reaper_started;
    pthread_t reaper;
    attnd_offload *codec;        /* codec threads for large bodies / answers, or NULL */
};

/* One TCP connection (MHD's socket context), from accept to close. */
typedef struct sock_state {
    struct sock_state *prev, *next;
    int fd;
    _Atomic int64_t phase_ns;    /* connection start, or end of its last request */
    _Atomic int busy;            /* its request fully arrived: computing/answering */
    int64_t gone_ns;             /* reaper's: when it first saw the peer gone with
                                    its request incomplete (0 = not seen); guarded
                                    by socks_mu                                  */
    int64_t gone_phase;          /* phase_ns then: a request since resets it     */
    int shut;                    /* reaper's: shut down already                  */
    _Atomic int in_request;      /* a request on it has begun, not completed      */
    _Atomic int served;          /* a request on it has completed                 */
    _Atomic int owed;            /* its next request is served while draining     */
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
    int must_close;              /* the answer closes the connection            */
    long long declared;          /* Content-Length, or -1 (chunked / none)      */
    size_t discarded;            /* body bytes thrown away since               */
    attnd_http_error err;
    const char *allow;
    char *body;                  /* the body so far (NUL-terminated)            */
    size_t len, cap;
    attnd_request *req;          /* decoded; in the scheduler while submitted   */
    int submitted;
    int in_suspend;              /* counted in http->suspended                   */
    int own_timeout;             /* answer_before_reading's timeout is on        */
    _Atomic int done;            /* set by on_done (worker thread)              */
    int responded;
    int status;
    int64_t reserved;            /* bytes counted in http->inflight_bytes       */
    sock_state *sock;            /* the connection's socket state, or NULL      */
    char rid[ATTND_REQID_MAX + 1]; /* the request id: the client's, or generated */
    const char *cors_origin;     /* Access-Control-Allow-Origin, or NULL        */
    const char *preflight;       /* a CORS preflight's allowed methods, or NULL */
    uint64_t bytes_in, bytes_out;/* body bytes received, response bytes queued  */
    int batch_size;              /* the batch its request ran in; 0 = none      */
    int64_t answered_ns;         /* when the response was queued                */
    int admitted;                /* begun before the drain's deadline, or owed  */
    int unsettled;               /* counted in http->unsettled                   */
    /* Codec work offloaded (offload.h): the body decoded, or the answer encoded,
     * on a codec thread while the connection is suspended; the thread sets
     * `codec` (release) and resumes it, and respond() picks the result up. */
    _Atomic int codec;           /* CODEC_*                                      */
    struct codec_job *job;       /* allocated for the first offloaded work      */
} conn;

/* What a codec thread works on, kept apart from conn so that the requests
 * that never offload (nearly all) do not allocate or clear it. */
typedef struct codec_job {
    attnd_offload_task task;
    int encode;                  /* the answer is encoded on a codec thread     */
    int decode_rc;               /* the offloaded decode's result, its request  */
    attnd_request *decoded;      /* and its error                               */
    attnd_http_error decode_err;
    attnd_reply encoded;         /* the offloaded encode's answer               */
} codec_job;

enum { CODEC_NONE, CODEC_DECODING, CODEC_DECODED, CODEC_ENCODED };

static const char internal_body[] =
    "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\",\"field\":\"\"}}";

/* ------------------------------------------------------------ responses */

static void budget_give(conn *c, int64_t n);
static void budget_force(conn *c, int64_t n);

/* c's request is in a scheduler or answered: the drain need not wait for it
 * to be read any more. */
static void settle(conn *c)
{
    if (c->unsettled) {
        c->unsettled = 0;
        atomic_fetch_sub(&c->http->unsettled, 1);
    }
}

/* The answer is queued: what the request held (body, decoded request, parse
 * and response estimates) is given back, and the response body, which
 * libmicrohttpd holds until it is sent, is counted instead (on_completed
 * releases it). A request a worker may still be writing is never freed here. */
static void hold_response(conn *c, size_t response_bytes)
{
    if (c->req && (!c->submitted || atomic_load_explicit(&c->done, memory_order_acquire))) {
        attnd_request_free(c->req);
        c->req = NULL;
    }
    free(c->body);
    c->body = NULL;
    c->len = c->cap = 0;
    budget_give(c, c->reserved);
    budget_force(c, (int64_t)response_bytes);
}

/* What every response says besides its own headers: the request id, and for
 * an allowed Origin the CORS headers (a preflight's too). */
static void add_common_headers(const conn *c, struct MHD_Response *resp)
{
    MHD_add_response_header(resp, attnd_reqid_header, c->rid);
    if (attnd_cors_varies(c->http->app->cors))
        MHD_add_response_header(resp, "Vary", "Origin");
    if (!c->cors_origin)
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", c->cors_origin);
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", attnd_cors_expose_headers);
    if (c->preflight) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", c->preflight);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", attnd_cors_allow_headers);
        MHD_add_response_header(resp, "Access-Control-Max-Age", attnd_cors_max_age);
    }
}

/* The log record of an answer: errors as warnings (5xx but 503/504 as errors),
 * the rest at debug level. */
static void log_answer(const conn *c, const attnd_reply *r)
{
    if (r->status >= 400)
        attnd_log_req(r->status >= 500 && r->status != 503 && r->status != 504 ? ATTND_LOG_ERROR
                                                                                : ATTND_LOG_WARN,
                      c->rid, "%s %s -> %d %s: %s", c->method, c->url, r->status, r->code,
                      r->log_detail);
    else if (attnd_log_enabled(ATTND_LOG_DEBUG))
        attnd_log_req(ATTND_LOG_DEBUG, c->rid, "%s %s -> %d in %.3f ms", c->method, c->url,
                      r->status, (double)(attnd_now_ns() - c->start_ns) / 1e6);
}

/* libmicrohttpd 0.9.75 keeps a suspended connection's read interest, so when
 * it resumes one it reads the socket before it answers, unless the
 * connection is the oldest on its HTTP thread. A client that half-closed
 * after sending its request (shutdown(SHUT_WR)) then looks gone: the read
 * sees the end of the stream and the request is closed unanswered. A
 * connection with a timeout of its own is on the list libmicrohttpd's epoll
 * loop visits whole every turn, before any read, so it is answered first.
 * on: from before the suspension until the answer is queued, when the
 * default timeout comes back (a keep-alive connection must not stay on that
 * list). The poll(2) loop (no epoll) reads first regardless. */
static void answer_before_reading(conn *c, int on)
{
    unsigned base = (unsigned)c->http->app->cfg->connection_timeout_s;
    unsigned own = base ? base + 1 : 86400; /* any other value; 0 means none */
    MHD_set_connection_option(c->mc, MHD_CONNECTION_OPTION_TIMEOUT, on ? own : base);
    c->own_timeout = on;
}

/* A large answer goes out SEND_BLOCK bytes per turn of its HTTP thread's
 * loop, so the other connections of that thread are served in between:
 * libmicrohttpd sends a buffer response in one go for as long as the socket
 * takes it, which over loopback to a fast reader is the whole answer (~30 ms
 * for 20 MB, every other connection of the thread waiting). */
#define SEND_BLOCK (256 * 1024)

typedef struct blockwise {
    char *body;
    size_t len;
} blockwise;

static ssize_t read_block(void *cls, uint64_t pos, char *buf, size_t max)
{
    const blockwise *b = cls;
    if (pos >= b->len)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = b->len - (size_t)pos < max ? b->len - (size_t)pos : max;
    memcpy(buf, b->body + pos, n);
    return (ssize_t)n;
}

static void free_blockwise(void *cls)
{
    blockwise *b = cls;
    free(b->body);
    free(b);
}

/* A response that sends body (taken: freed with the response) blockwise, or
 * NULL (body freed). */
static struct MHD_Response *blockwise_response(char *body, size_t len)
{
    blockwise *b = malloc(sizeof *b);
    struct MHD_Response *resp =
        b ? MHD_create_response_from_callback(len, SEND_BLOCK, read_block, b, free_blockwise) : NULL;
    if (!resp) {
        free(b);
        free(body);
        return NULL;
    }
    *b = (blockwise){body, len};
    return resp;
}

/* Queues r (taking its body). Returns 0, or -1 when MHD refused it now.
 * While draining, and for answers that end the connection (framing errors,
 * 417, connection limit), the response says Connection: close. */
static int queue_reply(conn *c, attnd_reply *r)
{
    struct MHD_Response *resp;
    size_t held = r->body && !r->body_static ? r->len : 0;
    c->bytes_out = r->body ? r->len : sizeof internal_body - 1;
    if (r->body && r->body_static) {
        resp = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_PERSISTENT);
    } else if (r->body && r->len >= SEND_BLOCK * 4) {
        resp = blockwise_response(r->body, r->len);
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
    if (r->status != 204)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                r->content_type ? r->content_type : "application/json");
    add_common_headers(c, resp);
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
    if (c->must_close || attnd_app_state(c->http->app) == ATTND_STATE_DRAINING)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(c->mc, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    if (ok != MHD_YES)
        return -1;
    c->responded = 1;
    if (c->own_timeout)
        answer_before_reading(c, 0);
    settle(c);
    c->status = r->status;
    c->answered_ns = attnd_now_ns();
    hold_response(c, held);
    if (c->sock)
        atomic_store_explicit(&c->sock->busy, 1, memory_order_relaxed);
    log_answer(c, r);
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
    attnd_reply r = {.request_id = c->rid};
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

/* attnd_exchange.query: the URL's query arguments. */
static const char *exchange_query(const attnd_exchange *x, const char *name)
{
    const conn *c = x->transport;
    return MHD_lookup_connection_value(c->mc, MHD_GET_ARGUMENT_KIND, name);
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

/* Counts n bytes that are held already (a response built): never refused. */
static void budget_force(conn *c, int64_t n)
{
    atomic_fetch_add_explicit(&c->http->inflight_bytes, n, memory_order_relaxed);
    c->reserved += n;
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

/* Counts n bytes for c, needed for `what`. Returns 0; or -1 with *e: 413
 * limit_exceeded when n alone is over max_inflight_bytes (it can never fit),
 * 503 overloaded when the requests in flight leave no room now. */
static int charge(conn *c, int64_t n, const char *what, attnd_http_error *e)
{
    int64_t max = c->http->app->cfg->max_inflight_bytes;
    if (n > max)
        return attnd_http_fail(e, 413, "limit_exceeded", "",
                               "%s would hold about %lld bytes, over max_inflight_bytes (%lld)",
                               what, (long long)n, (long long)max);
    if (budget_take(c, n) != 0) {
        overloaded(c, e, n);
        return -1;
    }
    return 0;
}

/* attnd_exchange.reserve: a codec's parse memory (handler.h). */
static int exchange_reserve(attnd_exchange *x, size_t bytes, attnd_http_error *err)
{
    return charge(x->transport, bytes > INT64_MAX ? INT64_MAX : (int64_t)bytes,
                  "parsing this body", err);
}

/* An upper bound of the bytes req's response takes as JSON (the largest
 * encoding; binary v2 outputs are smaller): every output and weight as the
 * longest float32 text ("-1.17549435e-38", 15 bytes) and a separator, 8 bytes
 * of brackets per row, and room for the members around them. */
static int64_t response_bound(const attnd_request *req)
{
    double floats = 0, rows = 0;
    for (int i = 0; i < req->n_seqs; i++) {
        const attn_seq *s = &req->seqs[i];
        floats += (double)s->t * req->embed_out;
        rows += s->t;
        if (s->weights_mode == ATTN_WEIGHTS_PER_HEAD) {
            floats += (double)req->num_heads * s->t * s->s;
            rows += (double)req->num_heads * s->t;
        } else if (s->weights_mode == ATTN_WEIGHTS_AVERAGE) {
            floats += (double)s->t * s->s;
            rows += s->t;
        }
    }
    double n = floats * 16 + rows * 8 + 1024 + (double)req->n_seqs * 64;
    return n > (double)INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)n;
}

/* Every Content-Length value (duplicates included), for framing checks. */
typedef struct lengths {
    int n, differ;
    const char *first;
} lengths;

static enum MHD_Result collect_length(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    lengths *l = cls;
    (void)kind;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0)
        return MHD_YES;
    value = value ? value : "";
    if (l->n++ == 0)
        l->first = value;
    else if (strcmp(l->first, value) != 0)
        l->differ = 1;
    return MHD_YES;
}

/* The request's body framing is unambiguous (RFC 9112 6.3): at most one
 * Content-Length value (repeats of the same value are allowed), never with
 * Transfer-Encoding, and a Transfer-Encoding only of "chunked". Anything else
 * could make attnd and a proxy in front of it split the stream into different
 * requests (request smuggling), so it is 400 and the connection is closed
 * without reading the body. A list value ("5, 6") never gets here:
 * libmicrohttpd itself refuses it (400) and closes. Returns 0, or -1 with *e. */
static int check_framing(conn *c, attnd_http_error *e)
{
    lengths l = {0};
    MHD_get_connection_values(c->mc, MHD_HEADER_KIND, collect_length, &l);
    const char *te = header(c, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if (l.differ)
        return attnd_http_fail(e, 400, "invalid_header", "Content-Length",
                               "%d Content-Length headers with different values: the body's "
                               "length is ambiguous", l.n);
    if (te && l.n)
        return attnd_http_fail(e, 400, "invalid_header", "Content-Length",
                               "Content-Length together with Transfer-Encoding: the body's "
                               "length is ambiguous");
    if (te && strcasecmp(te, "chunked") != 0)
        return attnd_http_fail(e, 400, "invalid_header", "Transfer-Encoding",
                               "Transfer-Encoding %.60s: only chunked is accepted", te);
    c->declared = l.n ? (long long)strtoull(l.first, NULL, 10) : -1;
    return 0;
}

/* A CORS preflight (OPTIONS with Access-Control-Request-Method) when CORS is
 * on: answered 204 with the route's methods, before any API key is asked for
 * (browsers send preflights without credentials); 403 origin_not_allowed for
 * an Origin not listed, 404 for a path no route serves. */
static int is_preflight(conn *c)
{
    return c->http->app->cors && strcmp(c->method, MHD_HTTP_METHOD_OPTIONS) == 0 &&
           header(c, "Access-Control-Request-Method");
}

static enum MHD_Result answer_preflight(conn *c)
{
    const char *methods = attnd_route_methods(c->http->app, c->url);
    if (!methods)
        return send_error(c, attnd_http_error_set(&c->err, 404, "not_found", "",
                                                  "no route %.200s", c->url));
    if (!c->cors_origin)
        return send_error(c, attnd_http_error_set(
                                 &c->err, 403, "origin_not_allowed", "Origin",
                                 "Origin %.100s is not in --cors-origin",
                                 header(c, "Origin") ? header(c, "Origin") : "(none)"));
    c->preflight = methods;
    attnd_reply r = {.request_id = c->rid, .status = 204, .body = "", .body_static = 1};
    return send_reply(c, &r);
}

/* First call: headers are in. Decides the route and everything the headers
 * alone can refuse. Answered at once (the body is never read, the connection
 * closes): bad framing (400), an expectation other than 100-continue (417),
 * no API key (401), over the connection limit (503), a body over
 * max_body_bytes (413). Other refusals wait until the body has been read and
 * discarded, so the connection stays usable. */
static enum MHD_Result begin(conn *c)
{
    attnd_app *app = c->http->app;
    c->x.header = exchange_header;
    c->x.query = exchange_query;
    c->x.reserve = exchange_reserve;
    c->x.transport = c;
    attnd_reqid_take(header(c, attnd_reqid_header), c->rid);
    c->cors_origin = attnd_cors_allow_origin(app->cors, header(c, "Origin"));
    if (check_framing(c, &c->err) != 0) {
        c->must_close = 1;
        return send_error(c, &c->err);
    }
    const char *expect = header(c, MHD_HTTP_HEADER_EXPECT);
    if (expect && strcasecmp(expect, "100-continue") != 0) {
        /* libmicrohttpd answers 100-continue itself; nothing else can be met. */
        c->must_close = 1;
        return send_error(c, attnd_http_error_set(&c->err, 417, "expectation_failed", "Expect",
                                                  "Expect: %.60s cannot be met; only "
                                                  "100-continue is supported", expect));
    }
    if (is_preflight(c))
        return answer_preflight(c);
    if (!attnd_auth_allows(app->auth, c->url, header(c, MHD_HTTP_HEADER_AUTHORIZATION),
                           app->cfg->metrics_require_key)) {
        /* At once: no body is read from a client without a key. */
        attnd_http_error_set(&c->err, 401, "unauthorized", "",
                             "this route needs 'Authorization: Bearer <API key>' with a "
                             "valid key");
        return send_error(c, &c->err);
    }
    int rc = attnd_route_resolve(app, c->method, c->url, &c->x, &c->route, &c->err, &c->allow);
    c->route_id = c->route ? c->route->id : ATTND_ROUTE_OTHER;
    if (atomic_load(&c->http->open_socks) > app->cfg->max_connections &&
        !attnd_route_is_probe(c->route_id)) {
        /* A connection in the probes' headroom (attnd_http_start): refused, closed. */
        c->must_close = 1;
        return send_error(c, attnd_http_error_set(
                                 &c->err, 503, "too_many_connections", "",
                                 "%d connections are open, max_connections is %d: this one "
                                 "only serves health probes; retry later",
                                 atomic_load(&c->http->open_socks), app->cfg->max_connections));
    }
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
    return MHD_YES;
}

/* A chunk of body. Keeps at most max_body_bytes, in a buffer that grows
 * geometrically from 64 KiB (never past the declared length) as bytes arrive,
 * each growth counted against max_inflight_bytes: a client that declares a
 * large body and sends little holds little. Past max_body_bytes the answer is
 * 413: at once if libmicrohttpd allows a response mid-body (0.9.75 does not),
 * else when the body ends. A refused body is read and dropped so the
 * connection can carry the answer, but a client that sends another
 * max_body_bytes after the refusal is disconnected: discarding is bounded too. */
static enum MHD_Result take_body(conn *c, const char *data, size_t *size)
{
    size_t n = *size, max = (size_t)c->http->app->cfg->max_body_bytes;
    *size = 0;
    c->bytes_in += n;
    if (c->has_err) {
        c->discarded += n;
        if (c->discarded <= max)
            return MHD_YES;
        attnd_log_req(ATTND_LOG_WARN, c->rid, "%s %s: closing the connection: %zu more body "
                      "bytes after a %d answer", c->method, c->url, c->discarded, c->err.status);
        return MHD_NO;
    }
    if (n > max - c->len) {
        attnd_http_error_set(&c->err, 413, "body_too_large", "",
                             "body is over max_body_bytes (%zu)", max);
        free(c->body);
        c->body = NULL;
        budget_give(c, (int64_t)c->cap);
        c->len = c->cap = 0;
        c->has_err = 1;
        attnd_reply r = {.request_id = c->rid};
        error_reply(c, &r, &c->err);
        queue_reply(c, &r); /* if MHD will not answer mid-body, the rest is discarded */
        return MHD_YES;
    }
    if (c->len + n + 1 > c->cap) {
        size_t limit = max + 1;
        if (c->declared >= 0 && (size_t)c->declared < max)
            limit = (size_t)c->declared + 1;
        size_t cap = c->cap ? c->cap : 65536;
        while (cap < c->len + n + 1)
            cap *= 2;
        if (cap > limit && c->len + n + 1 <= limit)
            cap = limit;
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
            budget_give(c, (int64_t)(cap - c->cap));
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

static void encode_task(void *arg);

/* Worker thread, once per submitted request: wake the connection up, or for
 * a large answer have a codec thread encode it first (it then wakes it). */
static void on_done(attnd_request *req, void *ctx)
{
    conn *c = ctx;
    (void)req;
    struct MHD_Connection *mc = c->mc;
    atomic_store_explicit(&c->done, 1, memory_order_release);
    if (c->job && c->job->encode) {
        c->job->task = (attnd_offload_task){.run = encode_task, .arg = c};
        if (attnd_offload_post(c->http->codec, &c->job->task) == 0)
            return;
    }
    MHD_resume_connection(mc); /* c may be gone once this returns */
}

/* c's suspension is over and its answer queued (or it never will be): no
 * longer a reason for attnd_http_stop to wait. */
static void unsuspended(conn *c)
{
    if (c->in_suspend) {
        c->in_suspend = 0;
        atomic_fetch_sub(&c->http->suspended, 1);
    }
}

/* Suspends c until a codec thread or a worker resumes it (counted for
 * attnd_http_stop). */
static void suspend(conn *c)
{
    c->in_suspend = 1;
    atomic_fetch_add(&c->http->suspended, 1);
    answer_before_reading(c, 1);
    MHD_suspend_connection(c->mc);
}

/* Whether a body or an answer of n bytes is decoded or encoded on a codec
 * thread (--offload-codec-bytes): then c->job is there for it. */
static int offloads(conn *c, double n)
{
    const int64_t min = c->http->app->cfg->offload_codec_bytes;
    if (!c->http->codec || min <= 0 || n < (double)min)
        return 0;
    if (!c->job)
        c->job = calloc(1, sizeof *c->job); /* none: the work stays here */
    return c->job != NULL;
}

/* Codec thread: the body decoded, the result left for respond(). */
static void decode_task(void *arg)
{
    conn *c = arg;
    struct MHD_Connection *mc = c->mc;
    codec_job *j = c->job;
    j->decode_rc = c->route->handler->decode(&c->x, &j->decoded, &j->decode_err);
    attnd_metrics_offloaded(c->http->app->metrics, 0);
    atomic_store_explicit(&c->codec, CODEC_DECODED, memory_order_release);
    MHD_resume_connection(mc); /* respond() goes on with submit_decoded */
}

/* A large body is decoded on a codec thread, c suspended meanwhile (when the
 * threads refuse it, here, the same way: resumed at once). Returns 1, or 0: not
 * large, c is not suspended, and its body is decoded here. */
static int decode_elsewhere(conn *c)
{
    if (!offloads(c, (double)c->len))
        return 0;
    atomic_store_explicit(&c->codec, CODEC_DECODING, memory_order_relaxed);
    suspend(c);
    c->job->task = (attnd_offload_task){.run = decode_task, .arg = c};
    if (attnd_offload_post(c->http->codec, &c->job->task) != 0)
        decode_task(c);
    return 1;
}

static void encode_answer(conn *c, attnd_reply *r);

/* c->req was computed on this thread (attnd_scheduler_run_inline): answered
 * at once, never suspended. */
static enum MHD_Result answer_inline(conn *c)
{
    attnd_reply r;
    encode_answer(c, &r);
    return send_reply(c, &r);
}

/* The body decoded into req: it goes to the scheduler of the exchange's model
 * and the connection is suspended. The decoded request and an upper bound of
 * its response are counted before anything is computed. */
static enum MHD_Result submit_decoded(conn *c, attnd_request *req)
{
    attnd_app *app = c->http->app;
    const attnd_handler *hd = c->route->handler;
    attnd_http_error e;
    attnd_model *m = c->x.model; /* decode may have picked it (a session's version) */
    assert(m && req);
    free(c->body); /* the request owns native copies now */
    c->body = NULL;
    c->x.body = NULL;
    c->len = c->cap = 0;
    budget_give(c, c->reserved);
    const int64_t bound = response_bound(req);
    if (charge(c, (int64_t)req->bytes + bound, "this request and its response", &e) != 0) {
        attnd_request_free(req);
        return send_error(c, &e);
    }
    req->on_done = on_done;
    req->on_done_ctx = c;
    req->layer = m->layer; /* one scheduler serves every version of the model */
    c->req = req;
    if (offloads(c, (double)bound))
        c->job->encode = 1;
    else if (attnd_scheduler_run_inline(m->sched, req)) /* small: computed on this thread */
        return answer_inline(c);
    c->submitted = 1;
    atomic_fetch_add(&c->http->pending, 1);
    suspend(c); /* before submitting: on_done may resume us at any moment after */
    attnd_submit_result sr = attnd_scheduler_submit(m->sched, req);
    if (sr == ATTND_SUBMIT_OK) {
        settle(c);
        return MHD_YES;
    }
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
    unsuspended(c);
    return MHD_YES;
}

/* The body is complete: the handler decodes it (on a codec thread when it
 * is large), then submit_decoded hands it to the scheduler. */
static enum MHD_Result submit(conn *c)
{
    attnd_http_error e;
    if (!c->admitted) /* it arrived after the signal and the grace */
        return send_error(c, attnd_http_error_set(&e, 503, "draining", "",
                                                  "attnd is shutting down"));
    if (decode_elsewhere(c))
        return MHD_YES;
    attnd_request *req = NULL;
    if (c->route->handler->decode(&c->x, &req, &e) != 0)
        return send_error(c, &e);
    return submit_decoded(c, req);
}

/* Back from the codec thread with the body decoded. */
static enum MHD_Result decoded(conn *c)
{
    atomic_store_explicit(&c->codec, CODEC_NONE, memory_order_relaxed);
    unsuspended(c);
    attnd_request *req = c->job->decoded;
    c->job->decoded = NULL;
    if (c->job->decode_rc != 0)
        return send_error(c, &c->job->decode_err);
    return submit_decoded(c, req);
}

/* The scheduler finished c->req: the handler encodes the answer into r and
 * gives back what decode held (its end is idempotent). */
static void encode_answer(conn *c, attnd_reply *r)
{
    *r = (attnd_reply){.request_id = c->rid};
    c->batch_size = c->req->outcome == ATTND_DONE_OK ? c->req->batch_size : 0;
    c->route->handler->finish(&c->x, c->req, r);
    if (c->route->handler->end)
        c->route->handler->end(&c->x);
}

/* Codec thread: a large answer encoded, left for respond() to send. */
static void encode_task(void *arg)
{
    conn *c = arg;
    struct MHD_Connection *mc = c->mc;
    encode_answer(c, &c->job->encoded);
    attnd_metrics_offloaded(c->http->app->metrics, 1);
    atomic_store_explicit(&c->codec, CODEC_ENCODED, memory_order_release);
    MHD_resume_connection(mc);
}

/* Resumed after the scheduler finished c->req (and a codec thread encoded
 * its answer, when large): the answer is sent. */
static enum MHD_Result finish(conn *c)
{
    int done = atomic_load_explicit(&c->done, memory_order_acquire);
    assert(done); /* we were suspended until on_done resumed us */
    if (!done)
        return MHD_YES; /* release builds: not ours to answer yet */
    attnd_reply r;
    if (atomic_load_explicit(&c->codec, memory_order_acquire) == CODEC_ENCODED) {
        atomic_store_explicit(&c->codec, CODEC_NONE, memory_order_relaxed);
        r = c->job->encoded;
    } else {
        encode_answer(c, &r);
    }
    enum MHD_Result ok = send_reply(c, &r);
    unsuspended(c);
    return ok;
}

/* The request is complete (headers, and the body if any): answer it. */
static enum MHD_Result respond(conn *c)
{
    if (c->sock) /* fully arrived: neither read timeout nor hang-up applies now */
        atomic_store_explicit(&c->sock->busy, 1, memory_order_relaxed);
    if (atomic_load_explicit(&c->codec, memory_order_acquire) == CODEC_DECODED)
        return decoded(c);
    if (c->has_err)
        return send_error(c, &c->err);
    if (c->req)
        return finish(c);
    c->x.body = c->body ? c->body : "";
    c->x.body_len = c->len;
    const attnd_handler *hd = c->route->handler;
    if (hd->answer) { /* reads, session create and delete: answered now */
        attnd_reply r = {.request_id = c->rid};
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
        c->declared = -1;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        c->sock = ci ? ci->socket_context : NULL;
        *con_cls = c;
        int64_t deadline = atomic_load(&h->drain_deadline_ns);
        c->admitted = deadline == 0 || c->start_ns < deadline;
        if (c->sock) {
            atomic_store(&c->sock->in_request, 1);
            if (atomic_exchange(&c->sock->owed, 0)) {
                c->admitted = 1;
                atomic_fetch_sub(&h->owed_waiting, 1);
            }
        }
        c->unsettled = 1;
        atomic_fetch_add(&h->unsettled, 1);
        atomic_fetch_add(&h->active, 1);
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

/* The client's address as text ("127.0.0.1", "::1"), "-" when unknown. */
static void remote_addr(struct MHD_Connection *mc, char *buf, size_t cap)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    socklen_t len = !sa ? 0 : sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                        : sizeof(struct sockaddr_in);
    if (!sa || getnameinfo(sa, len, buf, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(buf, cap, "-");
}

/* The access log line of an answered request (access_log.h). */
static void write_access_log(const conn *c, struct MHD_Connection *mc)
{
    attnd_access_log *log = c->http->app->access_log;
    if (!log)
        return;
    char remote[INET6_ADDRSTRLEN + 8];
    remote_addr(mc, remote, sizeof remote);
    attnd_access_entry e = {
        .request_id = c->rid, .remote = remote, .method = c->method, .path = c->url,
        .status = c->status, .bytes_in = c->bytes_in, .bytes_out = c->bytes_out,
        .duration_ms = (double)(c->answered_ns - c->start_ns) / 1e6,
        .model = c->x.model ? c->x.model->name : NULL, .batch_size = c->batch_size};
    attnd_access_log_write(log, &e);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    attnd_http *h = cls;
    conn *c = *con_cls;
    if (!c)
        return;
    *con_cls = NULL;
    attnd_app *app = h->app;
    int model = c->x.model ? c->x.model->index : -1;
    if (c->responded)
        attnd_metrics_request_done(app->metrics, model, (int)c->route_id,
                                   attnd_route_is_attention(c->route_id), c->status,
                                   attnd_now_ns() - c->start_ns);
    if (c->responded)
        write_access_log(c, mc);
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        attnd_log_req(ATTND_LOG_DEBUG, c->rid, "%s %s: connection ended early (code %d)",
                      c->method, c->url, (int)toe);
    attnd_metrics_in_flight_add(app->metrics, -1);
    settle(c);
    if (c->sock) { /* the next request on this connection starts its clock now */
        atomic_store_explicit(&c->sock->phase_ns, attnd_now_ns(), memory_order_relaxed);
        atomic_store_explicit(&c->sock->busy, 0, memory_order_relaxed);
        atomic_store(&c->sock->in_request, 0);
        atomic_store(&c->sock->served, 1);
    }
    int computing = c->submitted && !atomic_load_explicit(&c->done, memory_order_acquire);
    assert(!computing); /* libmicrohttpd never closes a suspended connection */
    if (computing) {
        /* Release builds: a request still in a scheduler must not be freed
         * under a worker: leak it. */
        attnd_log_req(ATTND_LOG_ERROR, c->rid, "%s %s: connection closed while computing",
                      c->method, c->url);
        free(c->body);
        atomic_fetch_sub(&h->active, 1);
        return;
    }
    if (c->submitted)
        atomic_fetch_sub(&h->pending, 1);
    unsuspended(c); /* resumed, then closed before it was answered */
    if (c->route && c->route->handler->end)
        c->route->handler->end(&c->x);
    budget_give(c, c->reserved); /* the response, now sent (or dropped) */
    attnd_model_release(c->x.model);
    attnd_request_free(c->req);
    if (c->job)
        attnd_request_free(c->job->decoded); /* NULL: respond() took it */
    free(c->job);
    free(c->body);
    free(c);
    atomic_fetch_sub(&h->active, 1);
}

/* ------------------------------------------------------------ read timeout */

/* When fd last received data, by the kernel's count (in jiffies: a few ms
 * coarse), on attnd_now_ns's clock; 0 when TCP_INFO cannot be read. *ti
 * gets the rest of TCP_INFO. */
static int64_t last_data_ns(int fd, int64_t now, struct tcp_info *ti, socklen_t *len)
{
    *len = sizeof *ti;
    memset(ti, 0, sizeof *ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, ti, len) != 0)
        return 0;
    return now - (int64_t)ti->tcpi_last_data_recv * 1000000;
}

/* While draining, whether a connection just accepted is owed its next
 * request: accepted in order, the first ones after the signal were in the
 * listen queue then (attnd_http_drain_begin counted them); past those, one
 * whose bytes had all arrived by the signal (the kernel's time of the last
 * data received counts in jiffies: within 10 ms of the signal counts as
 * before) was accepted by libmicrohttpd while the count was being taken.
 * Under socks_mu. */
static int owed_at_accept(attnd_http *h, int fd)
{
    int64_t began = atomic_load(&h->drain_began_ns);
    if (!began)
        return 0;
    int left = atomic_load(&h->backlog_owed);
    while (left > 0 && !atomic_compare_exchange_weak(&h->backlog_owed, &left, left - 1))
        ;
    if (left > 0)
        return 1;
    int unread = 0;
    if (ioctl(fd, FIONREAD, &unread) != 0 || unread <= 0)
        return 0;
    struct tcp_info ti;
    socklen_t len;
    const int64_t last = last_data_ns(fd, attnd_now_ns(), &ti, &len);
    return last != 0 && last <= began + 10000000;
}

/* MHD_OPTION_NOTIFY_CONNECTION: tracks every socket for the reaper. MHD calls
 * CLOSED before it closes the socket, so under socks_mu a listed fd is open. */
static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    attnd_http *h = cls;
    sock_state *ss = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED)
        atomic_fetch_add(&h->open_socks, 1);
    else
        atomic_fetch_sub(&h->open_socks, 1);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        ss = ci ? calloc(1, sizeof *ss) : NULL;
        if (!ss)
            return; /* untracked: only the idle timeout applies to it */
        ss->fd = ci->connect_fd;
        atomic_init(&ss->phase_ns, attnd_now_ns());
        atomic_init(&ss->busy, 0);
        atomic_init(&ss->in_request, 0);
        atomic_init(&ss->owed, 0);
        atomic_init(&ss->served, 0);
        pthread_mutex_lock(&h->socks_mu); /* one side of attnd_http_drain_begin's count */
        if (owed_at_accept(h, ss->fd)) {
            atomic_store(&ss->owed, 1);
            atomic_fetch_add(&h->owed_waiting, 1);
        }
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
    if (atomic_exchange(&ss->owed, 0))
        atomic_fetch_sub(&h->owed_waiting, 1);
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

/* 1 when the peer of fd has hung up (FIN or reset) and no byte it sent is
 * left unread: the request in progress on it can never complete. */
static int peer_gone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    int unread = 0;
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) &&
           ioctl(fd, FIONREAD, &unread) == 0 && unread == 0;
}

/* A connection whose client hung up before its request was complete (or
 * between requests): libmicrohttpd does not notice the hang-up while it waits
 * for bytes, so the socket would hold a connection slot until
 * request_read_timeout_s. Shut down when the reaper sees it twice, 250 ms
 * apart, with no request begun or finished in between (a half-closing client
 * whose whole request arrived is answered first: it is busy by then, or its
 * request done). */
static int hung_up(sock_state *ss, int64_t now)
{
    int64_t phase = atomic_load_explicit(&ss->phase_ns, memory_order_relaxed);
    if (!peer_gone(ss->fd)) {
        ss->gone_ns = 0;
        return 0;
    }
    if (!ss->gone_ns || ss->gone_phase != phase) {
        ss->gone_ns = now;
        ss->gone_phase = phase;
        return 0;
    }
    return now - ss->gone_ns >= 200000000;
}

/* Shuts down (does not close: MHD owns the fd) every socket whose request has
 * been arriving for longer than the limit, or whose client hung up before its
 * request was complete. MHD then sees the end of the stream and cleans the
 * connection up as usual. Idle-timeout alone cannot do this: a client sending
 * one byte a second is never idle. */
static void *reaper_main(void *arg)
{
    attnd_http *h = arg;
    int64_t limit_ns = (int64_t)h->app->cfg->request_read_timeout_s * 1000000000;
    pthread_mutex_lock(&h->socks_mu);
    while (!h->reaper_stop) {
        int64_t now = attnd_now_ns();
        for (sock_state *ss = h->socks; ss; ss = ss->next) {
            if (atomic_load_explicit(&ss->busy, memory_order_relaxed))
                continue;
            if (ss->shut)
                continue;
            if (hung_up(ss, now)) {
                attnd_log(ATTND_LOG_DEBUG, "closing a connection: its client hung up");
                shutdown(ss->fd, SHUT_RDWR);
                ss->shut = 1;
                continue;
            }
            if (limit_ns <= 0 ||
                now - atomic_load_explicit(&ss->phase_ns, memory_order_relaxed) <= limit_ns)
                continue;
            attnd_log(ATTND_LOG_WARN, "closing a connection: its request did not arrive within "
                      "request_read_timeout_s (%d s)", h->app->cfg->request_read_timeout_s);
            shutdown(ss->fd, SHUT_RDWR);
            ss->shut = 1;
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

static int hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* MHD_OPTION_UNESCAPE_CALLBACK: %HH decoding as libmicrohttpd's own, except
 * that %00 stays as the three characters: a NUL would silently cut the path
 * short ("/healthz%00x" answering as /healthz); kept, the path matches no
 * route and is answered 404 not_found. Returns the new length. */
static size_t unescape(void *cls, struct MHD_Connection *mc, char *s)
{
    (void)cls;
    (void)mc;
    char *r = s, *w = s;
    while (*r) {
        int hi = r[0] == '%' && r[1] ? hex_digit(r[1]) : -1;
        int lo = hi >= 0 && r[2] ? hex_digit(r[2]) : -1;
        if (lo >= 0 && (hi | lo) != 0) {
            *w++ = (char)(hi * 16 + lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

/* libmicrohttpd's own answers (a malformed request line or header, headers
 * over its memory, ...) are sent before attnd sees a request: no handler, no
 * request id header. It says so through its logger, once per answer, with the
 * status first: that line gets a request id of its own, the access-log line
 * and the request counter every answer has. */
static const char mhd_error_fmt[] = "Error processing request (HTTP response code is %u";

static void mhd_own_answer(attnd_http *h, unsigned status, const char *message)
{
    char rid[ATTND_REQID_MAX + 1], title[96] = "";
    attnd_reqid_take(NULL, rid);
    const char *t = message ? strstr(message, "<title>") : NULL, *end;
    if (t && (end = strstr(t += 7, "</title>")) && end - t < (long)sizeof title)
        snprintf(title, sizeof title, "%.*s", (int)(end - t), t);
    attnd_log_req(ATTND_LOG_WARN, rid, "libmicrohttpd answered %u (%s) before attnd saw a "
                  "request (malformed or oversized request line or headers), closing the "
                  "connection", status, title[0] ? title : "no reason given");
    attnd_metrics_request_done(h->app->metrics, -1, ATTND_ROUTE_OTHER, 0, (int)status, 0);
    if (h->app->access_log) {
        attnd_access_entry e = {.request_id = rid, .remote = "-", .method = "-", .path = "-",
                                .status = (int)status};
        attnd_access_log_write(h->app->access_log, &e);
    }
}

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    attnd_http *h = cls;
    if (strncmp(fmt, mhd_error_fmt, sizeof mhd_error_fmt - 1) == 0) {
        va_list copy;
        va_copy(copy, ap);
        unsigned status = va_arg(copy, unsigned);
        const char *message = va_arg(copy, const char *);
        va_end(copy);
        mhd_own_answer(h, status, message);
        return;
    }
    char msg[512];
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

/* Connections accepted beyond max_connections, for probes only (see
 * attnd_http_start): 1/16 of the limit, at least 4, at most 64. */
static unsigned probe_headroom(int max_connections)
{
    unsigned n = (unsigned)max_connections / 16;
    return n < 4 ? 4 : n > 64 ? 64 : n;
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
    /* Probes stay answerable when clients hold every connection: libmicrohttpd
     * accepts a few more than max_connections (probe_headroom), and begin()
     * answers any request but a health/readiness/metrics probe on a
     * connection beyond max_connections with 503 too_many_connections and
     * closes it. A per-IP cap would not help behind a proxy (one address), and
     * closing idle connections early would cut well-behaved keep-alive pools;
     * the headroom costs a few sockets. Idle connections still close after
     * connection_timeout_s. */
    unsigned limit = (unsigned)cfg->max_connections + probe_headroom(cfg->max_connections);
    h->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, h,
        MHD_OPTION_ARRAY, h->tls_cert ? tls_opts : tls_opts + 2,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
        MHD_OPTION_LISTEN_SOCKET, h->listen_fd, MHD_OPTION_UNESCAPE_CALLBACK, unescape, h,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->http_threads, MHD_OPTION_CONNECTION_LIMIT,
        limit, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)cfg->connection_timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_END);
    if (!h->daemon) {
        snprintf(err, errlen, "libmicrohttpd failed to start on %s (see the log above)",
                 cfg->listen);
        close(h->listen_fd);
        goto fail;
    }
    if (pthread_create(&h->reaper, NULL, reaper_main, h) != 0) {
        snprintf(err, errlen, "cannot start the read-timeout thread");
        MHD_stop_daemon(h->daemon);
        goto fail;
    }
    h->reaper_started = 1;
    if (cfg->offload_codec_bytes > 0 && !(h->codec = attnd_offload_start(cfg->http_threads, err, errlen))) {
        attnd_http_stop(h);
        return NULL;
    }
    attnd_log(ATTND_LOG_INFO,
              "listening on %s (port %d, %s): libmicrohttpd %s, %s, %d HTTP threads, "
              "max %d connections (+%u for probes), %d s idle timeout, %d s request read "
              "timeout",
              cfg->listen, h->port, h->tls_cert ? "HTTPS" : "HTTP", MHD_get_version(),
              epoll ? "epoll" : "poll", cfg->http_threads, cfg->max_connections,
              probe_headroom(cfg->max_connections),
              cfg->connection_timeout_s, cfg->request_read_timeout_s);
    return h;
fail:
    free_http(h);
    return NULL;
}

int attnd_http_port(const attnd_http *h) { return h->port; }

/* After the last answer, how long open keep-alive connections may still send
 * a request during a drain (it is answered, with Connection: close). */
#define DRAIN_LINGER_MS 250
/* attnd_http_stop waits at most this long for suspended connections. */
#define STOP_WAIT_MS 30000

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* 1 when bytes arrived on ss since its last request ended (or it opened) and
 * no request on it has begun: unread in the socket, or read by libmicrohttpd
 * and not yet parsed: on a connection that has served no request, any byte
 * received; after one, the kernel's time of the last data received (it
 * counts in jiffies, so data within 10 ms of the last request's end is taken
 * for that request's). */
static int bytes_waiting(const sock_state *ss, int64_t now)
{
    if (atomic_load(&ss->in_request))
        return 0; /* begun before the signal: admitted already */
    int unread = 0;
    if (ioctl(ss->fd, FIONREAD, &unread) == 0 && unread > 0)
        return 1;
    struct tcp_info ti;
    socklen_t len;
    const int64_t last_ns = last_data_ns(ss->fd, now, &ti, &len);
    if (last_ns == 0)
        return 0;
    if (!atomic_load(&ss->served) &&
        len >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
        return ti.tcpi_bytes_received > 0;
    return last_ns > atomic_load_explicit(&ss->phase_ns, memory_order_relaxed) + 10000000;
}

void attnd_http_drain_begin(attnd_http *h, int grace_ms)
{
    int64_t now = attnd_now_ns();
    int owed = 0, queued = 0;
    /* Under socks_mu, against on_connection: a connection accepted now is in
     * h->socks before the scan, or decides after the queue is counted
     * (owed_at_accept); one libmicrohttpd accepted from the queue before the
     * count but tracks only after it is owed by its bytes' time. */
    atomic_store(&h->drain_began_ns, now);
    pthread_mutex_lock(&h->socks_mu);
    for (sock_state *ss = h->socks; ss; ss = ss->next)
        if (!ss->shut && bytes_waiting(ss, now) && !atomic_exchange(&ss->owed, 1)) {
            atomic_fetch_add(&h->owed_waiting, 1);
            owed++;
        }
    /* A listening socket's TCP_INFO holds its accept queue's length (Linux). */
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(h->listen_fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
        ti.tcpi_state == 10 /* TCP_LISTEN */)
        queued = (int)ti.tcpi_unacked;
    atomic_store(&h->backlog_owed, queued);
    pthread_mutex_unlock(&h->socks_mu);
    atomic_store(&h->drain_deadline_ns, now + (int64_t)grace_ms * 1000000 + 1);
    attnd_log(ATTND_LOG_INFO, "draining: %d open connection(s) and %d queued unaccepted hold "
              "requests sent before the signal: they are answered%s", owed, queued,
              grace_ms > 0 ? "; requests arriving during --drain-grace-ms are too" : "");
}

/* How long after the grace the drain waits for owed connections to begin
 * their request (they are read as the HTTP threads get to them; a client that
 * had sent part of a request and stopped must not hold the stop longer). */
#define OWED_WAIT_MS 5000

int attnd_http_drain_admitted(attnd_http *h, int timeout_ms)
{
    int64_t owed_until = atomic_load(&h->drain_deadline_ns) + (int64_t)OWED_WAIT_MS * 1000000;
    for (int waited = 0; waited < timeout_ms; waited += 5) {
        int64_t now = attnd_now_ns();
        int owed = atomic_load(&h->owed_waiting) > 0 || atomic_load(&h->backlog_owed) > 0;
        if (now >= atomic_load(&h->drain_deadline_ns) && (!owed || now >= owed_until) &&
            atomic_load(&h->unsettled) <= 0)
            return 0;
        sleep_ms(5);
    }
    return atomic_load(&h->owed_waiting) + atomic_load(&h->backlog_owed) +
           atomic_load(&h->unsettled);
}

/* Draining: every request that reaches attnd is answered, none is cut off by
 * the stop that follows. Waits until nothing is in a scheduler or being
 * answered, then keeps serving while connections are open, until none has
 * begun a request for DRAIN_LINGER_MS (each answer closes its connection, so
 * this ends at once when clients go away). */
int attnd_http_wait_idle(attnd_http *h, int timeout_ms)
{
    int quiet = 0;
    for (int waited = 0; waited < timeout_ms; waited += 5) {
        int busy = atomic_load(&h->pending) + atomic_load(&h->active);
        if (busy == 0 && (atomic_load(&h->open_socks) == 0 || quiet >= DRAIN_LINGER_MS))
            return 0;
        quiet = busy ? 0 : quiet + 5;
        sleep_ms(5);
    }
    return atomic_load(&h->pending) + atomic_load(&h->active);
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
    /* libmicrohttpd aborts when stopped with a suspended connection: first let
     * every submitted request be resumed and its answer queued (bounded; a
     * client that never reads its answer does not hold the stop up). */
    for (int waited = 0; waited < STOP_WAIT_MS && atomic_load(&h->suspended) > 0; waited += 5)
        sleep_ms(5);
    if (atomic_load(&h->suspended) > 0) {
        attnd_log(ATTND_LOG_ERROR, "stopping HTTP: %d connections still wait for a worker "
                  "after %d ms; libmicrohttpd cannot stop under them, leaving it running",
                  atomic_load(&h->suspended), STOP_WAIT_MS);
        return; /* the process is exiting: leak h rather than abort */
    }
    MHD_stop_daemon(h->daemon);
    attnd_offload_stop(h->codec); /* idle (each task holds a suspended connection), and no
                                     HTTP thread is left to post to it */
    free_http(h);
}
