/* load_runner.c — the event loop of attnd-load: one thread, one CURLM, one reusable easy handle
 * per connection slot, a timerfd for the open-loop schedule. Completion times are taken once per
 * curl_multi_perform, before any response is checked, so checking never inflates latency. */
#include "load_runner.h"

#include <curl/curl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "load_http.h"

#define MAX_BODY (256u << 20) /* responses above this count as transport errors */
#define PROGRESS_NS 200000000LL

static volatile sig_atomic_t stop_requested;

void load_runner_stop(void) { stop_requested = 1; }

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* One connection: a reusable easy handle and its response buffer. */
typedef struct slot {
    CURL *easy;
    char *buf; /* owned response body */
    size_t len, cap;
    const load_req *req;
    int64_t sched_ns, start_ns;
    int measured, busy;
    long long header_len; /* response's Inference-Header-Content-Length; -1 when absent */
} slot;

struct load_runner {
    const load_opts *o;
    const load_pool *pool;
    CURLM *multi;
    struct curl_slist *headers;
    struct curl_slist **req_headers; /* --binary: one list per pool entry (owned), else NULL */
    char *url;           /* the attention endpoint (owned) */
    slot *slots;         /* nslots, owned */
    size_t nslots, *free_idx, nfree;
    size_t next_req;
    int timer_fd;
    int tty;
};

/* Per-level state of the loop. */
typedef struct level_run {
    load_stats *st;
    double level;   /* the concurrency or rate, as given */
    long cap;       /* most requests in flight: the concurrency, or --max-inflight */
    int64_t t0, warm_end, meas_end; /* meas_end unused with --requests */
    int64_t first_meas_ns, last_end_ns;
    long sent_meas, inflight, done_meas;
    int64_t next_sched; /* open loop */
    double period_ns;
    long sched_i;
    int issuing;
    int64_t last_progress;
} level_run;

static size_t on_write(char *data, size_t size, size_t nmemb, void *ud)
{
    slot *s = ud;
    return load_http_append(&s->buf, &s->len, &s->cap, data, size * nmemb, MAX_BODY);
}

/* Records Inference-Header-Content-Length (v2 binary responses); ignores other headers. */
static size_t on_header(char *data, size_t size, size_t nmemb, void *ud)
{
    slot *s = ud;
    size_t n = size * nmemb;
    char buf[32];
    if (load_http_header_value(data, n, "inference-header-content-length:", buf, sizeof buf)) {
        char *end;
        long long v = strtoll(buf, &end, 10);
        while (*end == ' ' || *end == '\r' || *end == '\n') end++;
        s->header_len = *end || v < 0 ? LLONG_MAX : v; /* unparseable: beyond any body */
    }
    return n;
}

/* ---- model info --------------------------------------------------------------------------------- */

static int get_json(const char *url, double timeout_s, json_t **out, char *err, size_t el)
{
    slot s = {0};
    long status = 0;
    CURL *c = curl_easy_init();
    CURLcode cc;
    json_error_t je;
    *out = NULL;
    if (!c) return snprintf(err, el, "curl_easy_init failed"), -1;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    if (cc != CURLE_OK) snprintf(err, el, "GET %s: %s", url, curl_easy_strerror(cc));
    else if (status != 200) snprintf(err, el, "GET %s: HTTP %ld: %.200s", url, status, s.buf ? s.buf : "");
    else if (!(*out = json_loadb(s.buf ? s.buf : "", s.len, 0, &je)))
        snprintf(err, el, "GET %s: bad JSON: %s", url, je.text);
    free(s.buf);
    return *out ? 0 : -1;
}

static int int_field(json_t *o, const char *name, int *v)
{
    json_t *x = json_object_get(o, name);
    if (!json_is_integer(x) || json_integer_value(x) < 1 || json_integer_value(x) > (1 << 20))
        return -1;
    *v = (int)json_integer_value(x);
    return 0;
}

int load_fetch_model(const load_opts *o, load_model *m, char *err, size_t el)
{
    char *base = load_http_base_url(o->url), *name = NULL, *url = NULL;
    json_t *root = NULL, *info;
    int rc = -1;
    CURL *c = curl_easy_init();
    if (!base || !c) goto oom;
    if (o->model && !(name = curl_easy_escape(c, o->model, 0))) goto oom;
    if (asprintf(&url, "%s/v1/models%s%s", base, name ? "/" : "", name ? name : "") < 0) {
        url = NULL;
        goto oom;
    }
    if (get_json(url, o->timeout_s, &root, err, el)) goto done;
    info = root;
    if (!o->model) {
        json_t *list = json_object_get(root, "models");
        if (json_array_size(list) != 1) {
            snprintf(err, el, "GET %s: %zu models; choose one with --model", url, json_array_size(list));
            goto done;
        }
        info = json_array_get(list, 0);
    }
    const char *kind = json_string_value(json_object_get(info, "kind"));
    if (kind && strcmp(kind, "group") == 0) { /* a model group: its first layer's widths */
        json_t *first = json_array_get(json_object_get(info, "layers"), 0);
        if (int_field(info, "num_layers", &m->layers) || int_field(first, "embed_q", &m->embed_q) ||
            int_field(first, "embed_out", &m->embed_out) || int_field(first, "num_heads", &m->heads)) {
            snprintf(err, el, "GET %s: a model group without num_layers or layers[0]'s embed_q, "
                     "embed_out, num_heads", url);
            goto done;
        }
        m->embed_k = m->embed_v = m->embed_q; /* self-attention on every layer */
        rc = 0;
        goto done;
    }
    if (int_field(info, "embed_q", &m->embed_q) || int_field(info, "embed_k", &m->embed_k) ||
        int_field(info, "embed_v", &m->embed_v) || int_field(info, "embed_out", &m->embed_out) ||
        int_field(info, "num_heads", &m->heads)) {
        snprintf(err, el, "GET %s: ModelInfo lacks embed_q/embed_k/embed_v/embed_out/num_heads", url);
        goto done;
    }
    rc = 0;
    goto done;
oom:
    snprintf(err, el, "out of memory");
done:
    json_decref(root);
    curl_free(name);
    if (c) curl_easy_cleanup(c);
    free(url);
    free(base);
    return rc;
}

/* ---- runner ------------------------------------------------------------------------------------- */

static int setup_slot(load_runner *r, slot *s)
{
    s->easy = curl_easy_init();
    if (!s->easy) return -1;
    curl_easy_setopt(s->easy, CURLOPT_URL, r->url);
    curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(s->easy, CURLOPT_POST, 1L);
    curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->easy, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(s->easy, CURLOPT_TIMEOUT_MS, (long)(r->o->timeout_s * 1000));
    curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
    if (r->o->protocol == 2) {
        curl_easy_setopt(s->easy, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(s->easy, CURLOPT_HEADERDATA, s);
    }
    return 0;
}

/* --binary: each pool body's own headers (its JSON header length differs). 0 / -1 (no memory). */
static int binary_headers(load_runner *r)
{
    r->req_headers = calloc(r->pool->n, sizeof *r->req_headers);
    if (!r->req_headers) return -1;
    for (size_t i = 0; i < r->pool->n; i++) {
        char line[64];
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/octet-stream");
        snprintf(line, sizeof line, "Inference-Header-Content-Length: %zu",
                 r->pool->reqs[i].v2.header_len);
        struct curl_slist *h2 = h ? curl_slist_append(h, line) : NULL;
        struct curl_slist *h3 = h2 ? curl_slist_append(h2, "Expect:") : NULL;
        if (!h3) {
            curl_slist_free_all(h);
            return -1;
        }
        r->req_headers[i] = h3;
    }
    return 0;
}

load_runner *load_runner_new(const load_opts *o, const load_pool *pool, char *err, size_t el)
{
    load_runner *r = calloc(1, sizeof *r);
    char *base = load_http_base_url(o->url), *name = NULL;
    size_t n = o->is_rate ? (size_t)o->max_inflight : 1;
    CURL *esc = curl_easy_init();
    for (size_t i = 0; !o->is_rate && i < o->n_levels; i++)
        if ((size_t)o->levels[i] > n) n = (size_t)o->levels[i];
    if (!r || !base || !esc) goto oom;
    r->o = o;
    r->pool = pool;
    r->timer_fd = -1;
    r->tty = isatty(STDERR_FILENO);
    if (o->model && !(name = curl_easy_escape(esc, o->model, 0))) goto oom;
    if ((o->protocol == 2 ? asprintf(&r->url, "%s/v2/models/%s/infer", base, name)
         : name           ? asprintf(&r->url, "%s/v1/models/%s/attention", base, name)
                          : asprintf(&r->url, "%s/v1/attention", base)) < 0) {
        r->url = NULL;
        goto oom;
    }
    r->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (r->headers) r->headers = curl_slist_append(r->headers, "Expect:"); /* no 100-continue wait */
    r->multi = curl_multi_init();
    r->slots = calloc(n, sizeof *r->slots);
    r->free_idx = calloc(n, sizeof *r->free_idx);
    if (!r->headers || !r->multi || !r->slots || !r->free_idx) goto oom;
    if (o->binary && binary_headers(r)) goto oom;
    r->nslots = n;
    load_http_raise_fd_limit(n);
    for (size_t i = 0; i < n; i++)
        if (setup_slot(r, &r->slots[i])) goto oom;
    curl_multi_setopt(r->multi, CURLMOPT_MAXCONNECTS, (long)n);
    r->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (r->timer_fd < 0) {
        snprintf(err, el, "timerfd_create failed");
        goto fail;
    }
    curl_free(name);
    curl_easy_cleanup(esc);
    free(base);
    return r;
oom:
    snprintf(err, el, "out of memory setting up %zu connections", n);
fail:
    curl_free(name);
    if (esc) curl_easy_cleanup(esc);
    free(base);
    load_runner_free(r);
    return NULL;
}

void load_runner_free(load_runner *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->nslots; i++) {
        if (r->slots[i].busy) curl_multi_remove_handle(r->multi, r->slots[i].easy);
        if (r->slots[i].easy) curl_easy_cleanup(r->slots[i].easy);
        free(r->slots[i].buf);
    }
    if (r->multi) curl_multi_cleanup(r->multi);
    curl_slist_free_all(r->headers);
    for (size_t i = 0; r->req_headers && i < r->pool->n; i++) curl_slist_free_all(r->req_headers[i]);
    free(r->req_headers);
    if (r->timer_fd >= 0) close(r->timer_fd);
    free(r->slots);
    free(r->free_idx);
    free(r->url);
    free(r);
}

/* Starts the next pool request on a free slot. sched_ns: when it was due (closed loop: now). */
static int issue(load_runner *r, level_run *lr, int64_t sched_ns, int64_t now)
{
    slot *s = &r->slots[r->free_idx[--r->nfree]];
    s->req = &r->pool->reqs[r->next_req];
    if (r->req_headers) curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, r->req_headers[r->next_req]);
    r->next_req = (r->next_req + 1) % r->pool->n;
    s->len = 0;
    s->header_len = -1;
    s->sched_ns = sched_ns;
    s->start_ns = now;
    s->measured = sched_ns >= lr->warm_end;
    s->busy = 1;
    curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, s->req->body);
    curl_easy_setopt(s->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)s->req->len);
    if (curl_multi_add_handle(r->multi, s->easy) != CURLM_OK) {
        s->busy = 0;
        r->free_idx[r->nfree++] = (size_t)(s - r->slots);
        return -1;
    }
    lr->inflight++;
    if (s->measured) {
        if (!lr->sent_meas) lr->first_meas_ns = r->o->is_rate ? sched_ns : now;
        lr->sent_meas++;
        double late_ms = (double)(now - sched_ns) / 1e6;
        if (r->o->is_rate && late_ms > LOAD_LATE_MS) lr->st->late++;
        if (late_ms > lr->st->max_late_ms) lr->st->max_late_ms = late_ms;
    }
    return 0;
}

/* Whether the measured window still takes new requests at time t (the send or schedule time). */
static int window_open(const load_runner *r, const level_run *lr, int64_t t)
{
    if (stop_requested) return 0;
    if (r->o->requests) return lr->sent_meas < r->o->requests;
    return t < lr->meas_end;
}

static void finish_one(load_runner *r, level_run *lr, CURL *easy, CURLcode cc, int64_t end_ns)
{
    char *priv = NULL;
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
    slot *s = (slot *)(void *)priv;
    curl_multi_remove_handle(r->multi, easy);
    s->busy = 0;
    r->free_idx[r->nfree++] = (size_t)(s - r->slots);
    lr->inflight--;
    if (!s->measured) return;
    long connects = 0;
    if (curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK) lr->st->connects += connects;
    load_timing t = {0};
    load_kind k = load_kind_from_curl(cc);
    if (k == LOAD_OK) {
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        if (s->req->v2.on) {
            load_expect_v2 want = load_req_expect_v2(s->req);
            k = load_check_response_v2(status, s->buf, s->len, s->header_len, &want, &t);
        } else {
            load_expect want = load_req_expect(s->req);
            k = load_check_response(status, s->buf, s->len, &want, &t);
        }
    }
    if (k == LOAD_OK) load_stats_add_ok(lr->st, (double)(end_ns - s->sched_ns) / 1e6, s->req->tokens, &t);
    else load_stats_add_error(lr->st, k);
    lr->done_meas++;
    if (end_ns > lr->last_end_ns) lr->last_end_ns = end_ns;
}

static void progress(load_runner *r, level_run *lr, int64_t now, int final)
{
    if (r->o->quiet) return;
    if (!final && (!r->tty || now - lr->last_progress < PROGRESS_NS)) return;
    lr->last_progress = now;
    double el = (double)(now - lr->t0) / 1e9, warm = r->o->warmup_s;
    const char *what = r->o->is_rate ? "rate" : "concurrency";
    long errs = lr->st->requests - lr->st->ok;
    if (!r->tty) {
        fprintf(stderr, "%s %g: %ld requests, %ld errors, %.1f s\n", what, lr->level,
                lr->st->requests, errs, el);
        return;
    }
    fprintf(stderr, "\r%s %-6g %s %5.1fs  done %-8ld errors %-6ld in flight %-5ld\033[K", what,
            lr->level, el < warm ? "warmup " : "measure", el < warm ? el : el - warm,
            lr->done_meas, errs, lr->inflight);
    if (final) fputc('\n', stderr);
}

/* Arms the timerfd for the next scheduled send (0 = disarm). */
static void arm_timer(load_runner *r, int64_t at_ns)
{
    struct itimerspec its = {0};
    if (at_ns > 0) {
        its.it_value.tv_sec = at_ns / 1000000000LL;
        its.it_value.tv_nsec = at_ns % 1000000000LL;
    }
    timerfd_settime(r->timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* Starts what is due: closed loop fills free slots up to the level; open loop sends every
 * scheduled request whose time has come, while slots last. */
static int issue_due(load_runner *r, level_run *lr, int64_t now)
{
    if (!r->o->is_rate) {
        while (lr->issuing && lr->inflight < lr->cap) {
            if (now >= lr->warm_end && !window_open(r, lr, now)) lr->issuing = 0;
            else if (issue(r, lr, now, now)) return -1;
        }
        return 0;
    }
    while (lr->issuing && lr->next_sched <= now && r->nfree) {
        if (lr->next_sched >= lr->warm_end && !window_open(r, lr, lr->next_sched)) {
            lr->issuing = 0;
            break;
        }
        if (issue(r, lr, lr->next_sched, now)) return -1;
        lr->sched_i++;
        lr->next_sched = lr->t0 + (int64_t)((double)lr->sched_i * lr->period_ns);
    }
    if (lr->issuing && lr->next_sched >= lr->warm_end && !window_open(r, lr, lr->next_sched))
        lr->issuing = 0;
    return 0;
}

static int run_loop(load_runner *r, level_run *lr, char *err, size_t el)
{
    for (;;) {
        int running = 0, left;
        int64_t now = now_ns();
        if (stop_requested) lr->issuing = 0;
        if (issue_due(r, lr, now)) return snprintf(err, el, "curl_multi_add_handle failed"), -1;
        if (!lr->issuing && lr->inflight == 0) return 0;
        progress(r, lr, now, 0);
        if (curl_multi_perform(r->multi, &running) != CURLM_OK)
            return snprintf(err, el, "curl_multi_perform failed"), -1;
        int64_t end = now_ns(); /* one completion time for everything this perform finished */
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(r->multi, &left)))
            if (msg->msg == CURLMSG_DONE) finish_one(r, lr, msg->easy_handle, msg->data.result, end);
        if (lr->inflight < lr->cap && lr->issuing && !r->o->is_rate) continue;
        int wake_for_send = r->o->is_rate && lr->issuing && r->nfree;
        arm_timer(r, wake_for_send ? lr->next_sched : 0);
        struct curl_waitfd wfd = {r->timer_fd, CURL_WAIT_POLLIN, 0};
        if (curl_multi_poll(r->multi, &wfd, 1, 100, NULL) != CURLM_OK)
            return snprintf(err, el, "curl_multi_poll failed"), -1;
        if (wfd.revents) {
            uint64_t ticks;
            ssize_t n = read(r->timer_fd, &ticks, sizeof ticks); /* clears the expiry */
            (void)n;
        }
    }
}

int load_run_level(load_runner *r, double level, load_stats *st, char *err, size_t el)
{
    const load_opts *o = r->o;
    level_run lr = {0};
    memset(st, 0, sizeof *st);
    st->x = level;
    st->is_rate = o->is_rate;
    lr.st = st;
    lr.level = level;
    lr.cap = o->is_rate ? (long)r->nslots : (long)level;
    lr.t0 = now_ns();
    lr.warm_end = lr.t0 + (int64_t)(o->warmup_s * 1e9);
    lr.meas_end = lr.warm_end + (int64_t)(o->duration_s * 1e9);
    lr.period_ns = o->is_rate ? 1e9 / level : 0;
    lr.next_sched = lr.t0;
    lr.issuing = 1;
    r->nfree = 0;
    for (size_t i = r->nslots; i-- > 0;) r->free_idx[r->nfree++] = i;
    int rc = run_loop(r, &lr, err, el);
    progress(r, &lr, now_ns(), 1);
    st->elapsed_s = lr.sent_meas ? (double)(lr.last_end_ns - lr.first_meas_ns) / 1e9 : 0;
    load_stats_finish(st);
    if (rc) return -1;
    return stop_requested ? 1 : 0;
}
