/* load_session.c — the --sessions engine of attnd-load (see load_session.h): a state machine
 * per stream (create -> prefill -> barrier -> decode -> delete -> done) driven by one CURLM;
 * the decode mix's prefill client (--prefill-every) on a thread of its own (mixer).
 * Completion times are taken once per curl_multi_perform, before any answer is checked; the
 * next request of a stream is sent after the completions of that perform are handled. */
#include "load_session.h"

#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "load_http.h"
#include "load_stats.h"

#define MAX_BODY (64u << 20)       /* answers above this count as transport errors */
#define MAX_RETRY_WAIT_S 5.0       /* a longer Retry-After is cut to this */
#define PROGRESS_NS 200000000LL
#define CHUNK_VALUES (4u << 20)    /* numbers held in distinct prefill bodies, at most */

static volatile sig_atomic_t stop_requested;

void load_sess_stop(void) { stop_requested = 1; }

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- tallies ------------------------------------------------------------------------------- */

const char *load_phase_name(load_phase p)
{
    static const char *const names[LOAD_PHASE_COUNT] = {"create", "prefill", "decode", "delete"};
    return (unsigned)p < LOAD_PHASE_COUNT ? names[p] : "?";
}

void load_counts_add(load_counts *c, const char *name, long n)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->v[i].name, name)) {
            c->v[i].n += n;
            return;
        }
    if (c->n == LOAD_COUNTS_MAX) {
        c->other += n;
        return;
    }
    snprintf(c->v[c->n].name, sizeof c->v[c->n].name, "%s", name);
    c->v[c->n++].n = n;
}

long load_counts_get(const load_counts *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->v[i].name, name)) return c->v[i].n;
    return 0;
}

/* The error object of an attnd error body (NULL when it is not one); json_decref(*root). */
static json_t *error_object(const char *body, size_t len, json_t **root)
{
    *root = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *e = json_object_get(*root, "error");
    return json_is_object(e) ? e : NULL;
}

void load_sess_kind(char *buf, size_t n, int curl_code, long status, const char *body,
                    size_t len, int bad_response)
{
    if (curl_code) {
        snprintf(buf, n, "%s", load_kind_from_curl(curl_code) == LOAD_ERR_TIMEOUT ? "timeout"
                                                                                  : "transport");
        return;
    }
    if (bad_response) {
        snprintf(buf, n, "bad_response");
        return;
    }
    json_t *root, *e = error_object(body, len, &root);
    const char *code = json_string_value(json_object_get(e, "code"));
    int ok = code && *code && strlen(code) <= 32;
    for (const char *p = code; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_';
    if (ok) snprintf(buf, n, "http_%ld_%s", status, code);
    else snprintf(buf, n, "http_%ld", status);
    json_decref(root);
}

static int push2(double **a, double **b, size_t *n, size_t *cap, double x, double y)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 1024;
        double *na = realloc(*a, c * sizeof *na);
        if (na) *a = na;
        double *nb = b && na ? realloc(*b, c * sizeof *nb) : NULL;
        if (nb) *b = nb;
        if (!na || (b && !nb)) return -1;
        *cap = c;
    }
    (*a)[*n] = x;
    if (b) (*b)[*n] = y;
    (*n)++;
    return 0;
}

void load_sess_add_step(load_sess_stats *s, double lat_ms, double at_s, const load_timing *t)
{
    s->decode_tokens++;
    if (push2(&s->step_ms, &s->step_at_s, &s->n_steps, &s->cap_steps, lat_ms, at_s)) s->oom = 1;
    if (t && t->has) {
        s->n_timing++;
        s->sum_queue_ms += t->queue_us / 1000.0;
        s->sum_compute_ms += t->compute_us / 1000.0;
        s->sum_batch += t->batch_size;
    }
}

void load_sess_add_prefill(load_sess_stats *s, double ms)
{
    s->prefilled++;
    if (push2(&s->prefill_ms, NULL, &s->n_prefill, &s->cap_prefill, ms, 0)) s->oom = 1;
}

void load_sess_add_ttft(load_sess_stats *s, int rows, double ms)
{
    s->mix_prefill_rows += rows;
    s->mix_prefill_s += ms / 1000.0;
    if (push2(&s->ttft_ms, NULL, &s->n_ttft, &s->cap_ttft, ms, 0)) s->oom = 1;
}

void load_sess_add_error(load_sess_stats *s, load_phase ph, const char *kind, const char *detail)
{
    s->errors++;
    if ((unsigned)ph < LOAD_PHASE_COUNT) s->errors_by_phase[ph]++;
    load_counts_add(&s->errors_by_kind, kind, 1);
    if (!s->first_error[0]) {
        snprintf(s->first_error, sizeof s->first_error, "%s: %s", load_phase_name(ph),
                 detail && *detail ? detail : kind);
        for (char *p = s->first_error; *p; p++) /* ASCII only: it goes into JSON and a table */
            if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) *p = '?';
    }
}

void load_sess_add_retry(load_sess_stats *s, const char *kind)
{
    s->retries++;
    load_counts_add(&s->retries_by_kind, kind, 1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void load_sess_stats_finish(load_sess_stats *s)
{
    size_t n = s->n_steps;
    free(s->tpot_sorted);
    s->tpot_sorted = n ? malloc(n * sizeof *s->tpot_sorted) : NULL;
    if (n && !s->tpot_sorted) {
        s->oom = 1;
        n = 0;
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += s->tpot_sorted[i] = s->step_ms[i];
    if (n) qsort(s->tpot_sorted, n, sizeof *s->tpot_sorted, cmp_double);
    s->tpot_mean_ms = n ? sum / (double)n : 0;
    s->tpot_min_ms = n ? s->tpot_sorted[0] : 0;
    s->tpot_max_ms = n ? s->tpot_sorted[n - 1] : 0;
    s->tpot_p50_ms = load_percentile(s->tpot_sorted, n, 50);
    s->tpot_p90_ms = load_percentile(s->tpot_sorted, n, 90);
    s->tpot_p99_ms = load_percentile(s->tpot_sorted, n, 99);
    s->decode_tokens_per_s =
        s->decode_elapsed_s > 0 ? (double)s->decode_tokens / s->decode_elapsed_s : 0;
    s->stream_tokens_per_s =
        s->decoding_streams ? s->decode_tokens_per_s / (double)s->decoding_streams : 0;
    double k = (double)s->n_timing;
    s->queue_ms = k ? s->sum_queue_ms / k : 0;
    s->compute_ms = k ? s->sum_compute_ms / k : 0;
    s->mean_batch = k ? s->sum_batch / k : 0;

    size_t m = s->n_prefill;
    double psum = 0;
    if (m) qsort(s->prefill_ms, m, sizeof *s->prefill_ms, cmp_double);
    for (size_t i = 0; i < m; i++) psum += s->prefill_ms[i];
    s->prefill_mean_ms = m ? psum / (double)m : 0;
    s->prefill_p50_ms = load_percentile(s->prefill_ms, m, 50);
    s->prefill_max_ms = m ? s->prefill_ms[m - 1] : 0;
    s->prefill_tokens_per_s =
        s->prefill_total_s > 0 ? (double)s->prefill_tokens / s->prefill_total_s : 0;
    size_t f = s->n_ttft;
    if (f) qsort(s->ttft_ms, f, sizeof *s->ttft_ms, cmp_double);
    s->ttft_p50_ms = load_percentile(s->ttft_ms, f, 50);
    s->ttft_p99_ms = load_percentile(s->ttft_ms, f, 99);
    s->ttft_max_ms = f ? s->ttft_ms[f - 1] : 0;
    s->mix_prefill_rows_per_s = s->mix_prefill_s > 0 ? (double)s->mix_prefill_rows / s->mix_prefill_s : 0;
    s->create_mean_ms = s->n_create ? s->sum_create_ms / (double)s->n_create : 0;
    s->delete_mean_ms = s->n_delete ? s->sum_delete_ms / (double)s->n_delete : 0;
}

void load_sess_stats_free(load_sess_stats *s)
{
    free(s->prefill_ms);
    free(s->step_ms);
    free(s->step_at_s);
    free(s->tpot_sorted);
    free(s->ttft_ms);
    s->prefill_ms = s->step_ms = s->step_at_s = s->tpot_sorted = s->ttft_ms = NULL;
    s->n_prefill = s->cap_prefill = s->n_steps = s->cap_steps = s->n_ttft = s->cap_ttft = 0;
}

/* ---- the runner ---------------------------------------------------------------------------- */

typedef enum { ST_CREATE, ST_PREFILL, ST_BARRIER, ST_DECODE, ST_DELETE, ST_DONE } st_state;

typedef struct qbody {
    char *s;
    size_t len;
} qbody;

/* A set of pre-built bodies of one row count, sent round robin, and their answers' shape.
 * With --binary the bodies are v2 binary-tensor appends, all with one header length, sent
 * with their own request headers. */
typedef struct body_set {
    qbody *b;
    size_t n, next;
    int rows;
    load_shape shape;            /* rows x E_out (JSON answers) */
    load_expect_v2 v2;           /* the binary answer (--binary) */
    struct curl_slist *headers;  /* --binary: octet-stream + Inference-Header-Content-Length */
} body_set;

typedef struct stream {
    CURL *easy;
    char *buf;                 /* the answer (owned) */
    size_t len, cap;
    double retry_after_s;      /* the answer's Retry-After in s; -1 when absent */
    long long header_len;      /* the answer's Inference-Header-Content-Length; -1 when absent */
    st_state state;
    int busy;                  /* a request in flight */
    int waiting;               /* a retry is due at send_at */
    int64_t send_at;
    int tries;                 /* retries of the current call so far */
    int64_t call_start;        /* the current call's first send */
    int64_t prefill_start;
    char id[96];               /* the session's id ([NAME.]hex); "" before create */
    char *append_url, *session_url; /* owned */
    char **layer_urls;         /* a model group's sequence: each layer's append URL (owned) */
    int layer;                 /* the layer the current step appends to next (0 = single) */
    int64_t step_start;        /* the current step's (or prefill chunk's) first call */
    long long length;          /* positions the server committed (on every layer) */
    int steps_done;
    int parked;                /* --interleave: decoding, waiting for its client's turn */
    body_set *set;             /* the current append's bodies */
    const qbody *body;
} stream;

struct load_sess_runner {
    const load_opts *o;
    load_model m;
    CURLM *multi;
    struct curl_slist *headers;
    char *create_url;          /* owned */
    char create_body[48];
    stream *streams;           /* nstreams, owned */
    size_t nstreams;
    size_t *ready;             /* FIFO of stream indices whose next request is to go now */
    size_t nready;
    size_t *barrier;           /* streams waiting for the decode phase */
    size_t nbarrier;
    body_set chunk, tail, step; /* prefill appends of `chunk` rows, the last one of `tail` */
    body_set mix;               /* --prefill-every: the prefills of the decode mix */
    int tty, warned_length;
};

/* The decode mix's prefill client (--prefill-every) runs on a thread of its own, one
 * blocking call at a time on its own connection (the runner's last stream): a JSON prefill's
 * answer is megabytes to receive and check, and on the loop's thread that work would hold up
 * every stream's next step, which is what the decode mix measures. Its counts go into stats
 * of its own, added to the level's when it is joined. */
typedef struct mixer {
    load_sess_runner *r;
    stream *s;
    load_sess_stats st;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* signalled by mix_stop */
    int stop;                   /* under mu */
    int started;
    int64_t due;                /* when its next prefill starts */
    size_t next_body;
} mixer;

/* Per-level state. */
typedef struct level {
    load_sess_stats *st;
    long n, active, pre_barrier, waiting;
    int decode_started, stopping;
    int64_t t0, decode_start, decode_cap; /* decode_cap 0: no --duration */
    int64_t first_prefill, last_prefill_end, last_decode_end, last_progress;
    mixer *mix;                 /* the decode mix's prefill client, or NULL */
} level;

static size_t on_write(char *data, size_t size, size_t nmemb, void *ud)
{
    stream *s = ud;
    return load_http_append(&s->buf, &s->len, &s->cap, data, size * nmemb, MAX_BODY);
}

/* Records Retry-After (delay-seconds form; an HTTP date is not retried on). */
static size_t on_header(char *data, size_t size, size_t nmemb, void *ud)
{
    stream *s = ud;
    size_t n = size * nmemb;
    char buf[32];
    if (load_http_header_value(data, n, "retry-after:", buf, sizeof buf)) {
        char *p = buf, *end;
        while (*p == ' ' || *p == '\t') p++;
        long v = strtol(p, &end, 10);
        while (*end == ' ' || *end == '\r' || *end == '\n') end++;
        s->retry_after_s = end != p && !*end && v >= 0 ? (double)v : -1;
    } else if (load_http_header_value(data, n, "inference-header-content-length:", buf, sizeof buf)) {
        char *end;
        long long v = strtoll(buf, &end, 10);
        s->header_len = end != buf && v >= 0 ? v : -1;
    }
    return n;
}

/* The request headers of a binary set whose bodies carry header_len bytes of JSON. */
static struct curl_slist *binary_headers(size_t header_len)
{
    char ihcl[80];
    snprintf(ihcl, sizeof ihcl, "Inference-Header-Content-Length: %zu", header_len);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/octet-stream");
    struct curl_slist *h2 = h ? curl_slist_append(h, ihcl) : NULL;
    struct curl_slist *h3 = h2 ? curl_slist_append(h2, "Expect:") : NULL;
    if (!h3) curl_slist_free_all(h);
    return h3;
}

/* count bodies of rows x E_q from *rng, JSON or (binary) v2 binary tensors. 0 / -1 (no
 * memory). */
static int build_set(body_set *set, size_t count, int rows, const load_model *m, int binary,
                     unsigned long long *rng)
{
    set->rows = rows;
    if (!rows || !count) return 0;
    if (load_shape_push_matrix(&set->shape, 0, rows, m->embed_out)) return -1;
    set->v2 = (load_expect_v2){.binary = 1, .b = 1, .t = rows, .e_out = m->embed_out};
    if (!(set->b = calloc(count, sizeof *set->b))) return -1;
    size_t header_len = 0;
    for (; set->n < count; set->n++) {
        qbody *q = &set->b[set->n];
        q->s = binary ? load_gen_query_binary(rng, rows, m->embed_q, &q->len, &header_len)
                      : load_gen_query_body(rng, rows, m->embed_q, &q->len);
        if (!q->s) return -1;
    }
    if (binary && !(set->headers = binary_headers(header_len))) return -1;
    return 0;
}

static void free_set(body_set *set)
{
    for (size_t i = 0; i < set->n; i++) free(set->b[i].s);
    free(set->b);
    load_shape_free(&set->shape);
    curl_slist_free_all(set->headers);
    memset(set, 0, sizeof *set);
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Distinct bodies of `rows` rows: at most --pool, `uses` (how often they can be sent) and
 * CHUNK_VALUES numbers in all; at least one. */
static size_t set_count(const load_opts *o, const load_model *m, size_t uses, int rows)
{
    size_t per = (size_t)rows * (size_t)m->embed_q, cap = per ? CHUNK_VALUES / per : 1;
    size_t n = min_size(min_size((size_t)o->pool, uses), cap ? cap : 1);
    return n ? n : 1;
}

load_sess_runner *load_sess_new(const load_opts *o, const load_model *m, char *err, size_t el)
{
    load_sess_runner *r = calloc(1, sizeof *r);
    char *base = load_http_base_url(o->url), *name = NULL;
    CURL *esc = curl_easy_init();
    size_t n = 1;
    for (size_t i = 0; i < o->n_levels; i++)
        if ((size_t)o->levels[i] > n) n = (size_t)o->levels[i];
    if (o->prefill_every_s > 0) n++; /* the prefill client */
    if (!r || !base || !esc || !(name = curl_easy_escape(esc, o->model, 0))) goto oom;
    r->o = o;
    r->m = *m;
    r->tty = isatty(STDERR_FILENO);
    if (asprintf(&r->create_url, "%s/v1/models/%s/sessions", base, name) < 0) {
        r->create_url = NULL;
        goto oom;
    }
    if (o->window) snprintf(r->create_body, sizeof r->create_body, "{\"window\":%d}", o->window);
    else snprintf(r->create_body, sizeof r->create_body, "{}");

    int chunk = o->prefill_chunk && o->prefill_chunk < o->prefix ? o->prefill_chunk : o->prefix;
    int full = chunk ? o->prefix / chunk : 0, tail = chunk ? o->prefix % chunk : 0;
    unsigned long long rng = o->seed;
    if (build_set(&r->chunk, set_count(o, m, n * (size_t)full, chunk), chunk, m, o->binary, &rng) ||
        build_set(&r->tail, set_count(o, m, n, tail), tail, m, o->binary, &rng) ||
        build_set(&r->step, set_count(o, m, n * (size_t)o->steps, 1), o->steps ? 1 : 0, m, o->binary,
                  &rng) ||
        build_set(&r->mix, set_count(o, m, 4, o->prefill_rows), o->prefill_every_s > 0 ? o->prefill_rows : 0,
                  m, o->binary, &rng))
        goto oom;

    r->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (r->headers) r->headers = curl_slist_append(r->headers, "Expect:");
    r->multi = curl_multi_init();
    r->streams = calloc(n, sizeof *r->streams);
    r->ready = calloc(n, sizeof *r->ready);
    r->barrier = calloc(n, sizeof *r->barrier);
    if (!r->headers || !r->multi || !r->streams || !r->ready || !r->barrier) goto oom;
    r->nstreams = n;
    load_http_raise_fd_limit(n);
    for (size_t i = 0; i < n; i++) {
        stream *s = &r->streams[i];
        if (!(s->easy = curl_easy_init())) goto oom;
        curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, r->headers);
        curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(s->easy, CURLOPT_TCP_NODELAY, 1L);
        curl_easy_setopt(s->easy, CURLOPT_TIMEOUT_MS, (long)(o->timeout_s * 1000));
        curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_write);
        curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
        curl_easy_setopt(s->easy, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(s->easy, CURLOPT_HEADERDATA, s);
        curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
    }
    curl_multi_setopt(r->multi, CURLMOPT_MAXCONNECTS, (long)n);
    curl_free(name);
    curl_easy_cleanup(esc);
    free(base);
    return r;
oom:
    snprintf(err, el, "out of memory setting up %zu sessions", n);
    curl_free(name);
    if (esc) curl_easy_cleanup(esc);
    free(base);
    load_sess_free(r);
    return NULL;
}

static void reset_stream(stream *s)
{
    for (int l = 0; s->layer_urls && s->layer_urls[l]; l++)
        free(s->layer_urls[l]);
    free(s->layer_urls);
    s->layer_urls = NULL;
    s->layer = 0;
    free(s->append_url);
    free(s->session_url);
    s->append_url = s->session_url = NULL;
}

void load_sess_free(load_sess_runner *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->nstreams; i++) {
        stream *s = &r->streams[i];
        if (s->busy) curl_multi_remove_handle(r->multi, s->easy);
        if (s->easy) curl_easy_cleanup(s->easy);
        free(s->buf);
        reset_stream(s);
    }
    if (r->multi) curl_multi_cleanup(r->multi);
    curl_slist_free_all(r->headers);
    free_set(&r->chunk);
    free_set(&r->tail);
    free_set(&r->step);
    free_set(&r->mix);
    free(r->streams);
    free(r->ready);
    free(r->barrier);
    free(r->create_url);
    free(r);
}

/* ---- one stream ---------------------------------------------------------------------------- */

static int pre_barrier_state(st_state s) { return s == ST_CREATE || s == ST_PREFILL; }

static size_t idx(const load_sess_runner *r, const stream *s) { return (size_t)(s - r->streams); }

/* Starts s's next call in its state: picks the append's body, queues the request. */
static void next_call(load_sess_runner *r, stream *s)
{
    s->tries = 0;
    s->set = NULL;
    s->body = NULL;
    if (s->state == ST_PREFILL)
        s->set = r->o->prefix - s->length >= r->chunk.rows && r->chunk.n ? &r->chunk : &r->tail;
    else if (s->state == ST_DECODE)
        s->set = &r->step;
    if (s->set) {
        s->body = &s->set->b[s->set->next];
        s->set->next = (s->set->next + 1) % s->set->n;
    }
    r->ready[r->nready++] = idx(r, s);
}

/* Moves s to state next; a state that sends queues its first request. */
static void set_state(load_sess_runner *r, level *lv, stream *s, st_state next)
{
    if (pre_barrier_state(s->state) && !pre_barrier_state(next)) lv->pre_barrier--;
    s->state = next;
    if (next == ST_BARRIER) {
        r->barrier[r->nbarrier++] = idx(r, s);
    } else if (next == ST_DONE) {
        lv->active--;
        reset_stream(s);
    } else if (next == ST_DELETE && !s->id[0]) { /* never created: nothing to delete */
        set_state(r, lv, s, ST_DONE);
    } else {
        next_call(r, s);
    }
}

/* Sends s's current call. 0, or -1 when curl refuses the handle. */
static int send_call(load_sess_runner *r, level *lv, stream *s, int64_t now)
{
    CURL *e = s->easy;
    s->len = 0;
    s->retry_after_s = -1;
    s->header_len = -1;
    if (!s->tries) s->call_start = now;
    if (!s->tries && s->layer == 0) s->step_start = now;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->set && s->set->headers ? s->set->headers : r->headers);
    if (s->state == ST_DELETE) {
        curl_easy_setopt(e, CURLOPT_URL, s->session_url);
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
    } else {
        const char *body = s->state == ST_CREATE ? r->create_body : s->body->s;
        size_t len = s->state == ST_CREATE ? strlen(r->create_body) : s->body->len;
        curl_easy_setopt(e, CURLOPT_URL, s->state == ST_CREATE ? r->create_url
                                         : s->layer_urls ? s->layer_urls[s->layer]
                                                         : s->append_url);
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, NULL);
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    if (s->state == ST_PREFILL && !s->tries && s->length == 0 && s->layer == 0) {
        s->prefill_start = now;
        if (!lv->first_prefill) lv->first_prefill = now;
    }
    if (curl_multi_add_handle(r->multi, e) != CURLM_OK) return -1;
    s->busy = 1;
    return 0;
}

/* "HTTP 404 model_not_found: no model named ..." / a curl error / a bad answer, for the
 * first-error line. */
static void describe(char *buf, size_t n, int cc, long status, const stream *s, int bad)
{
    if (cc) {
        snprintf(buf, n, "%s", curl_easy_strerror((CURLcode)cc));
        return;
    }
    if (bad) {
        snprintf(buf, n, "unexpected answer (HTTP %ld): %.160s", status, s->buf ? s->buf : "");
        return;
    }
    json_t *root, *e = error_object(s->buf, s->len, &root);
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    snprintf(buf, n, "HTTP %ld%s%s%s%.200s", status, code ? " " : "", code ? code : "",
             msg ? ": " : "", msg ? msg : "");
    json_decref(root);
}

static void fail_call(load_sess_stats *st, stream *s, load_phase ph, int cc, long status, int bad)
{
    char kind[64], detail[300];
    load_sess_kind(kind, sizeof kind, cc, status, s->buf, s->len, bad);
    describe(detail, sizeof detail, cc, status, s, bad);
    load_sess_add_error(st, ph, kind, detail);
}

/* A delete's answer, counted: deleted, already gone (404/410: evicted or expired, not an
 * error), or failed (the session may still be there). */
static void count_delete(load_sess_stats *st, stream *s, int cc, long status, double ms)
{
    if (!cc && status == 204) {
        st->deleted++;
        st->n_delete++;
        st->sum_delete_ms += ms;
        if (ms > st->max_delete_ms) st->max_delete_ms = ms;
    } else if (!cc && (status == 404 || status == 410)) {
        st->gone++;
    } else {
        fail_call(st, s, LOAD_PHASE_DELETE, cc, status, 0);
        st->leaked++;
    }
}

/* The 201 of a create: takes the id, builds the stream's URLs. 0, or -1 (a bad answer).
 * *warned: the max_length warning was printed (it is, once). */
static int take_session(load_sess_runner *r, stream *s, int *warned)
{
    json_t *root = s->buf ? json_loadb(s->buf, s->len, 0, NULL) : NULL;
    const char *id = json_string_value(json_object_get(root, "id"));
    json_t *max_len = json_object_get(root, "max_length");
    int ok = id && *id && strlen(id) < sizeof s->id &&
             /* it goes into URLs: hex, after a replica's "NAME." ([a-z0-9-]) behind a gateway */
             strspn(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEF.-") == strlen(id);
    if (ok) {
        snprintf(s->id, sizeof s->id, "%s", id);
        char *base = load_http_base_url(r->o->url);
        if (!base || asprintf(&s->append_url, "%s/v1/sessions/%s/append", base, id) < 0)
            s->append_url = NULL;
        if (!base || asprintf(&s->session_url, "%s/v1/sessions/%s", base, id) < 0)
            s->session_url = NULL;
        free(base);
        if (!s->append_url || !s->session_url) ok = 0; /* out of memory: as a bad answer */
        if (ok && r->m.layers > 0) { /* a sequence: one append URL per layer */
            base = load_http_base_url(r->o->url);
            s->layer_urls = base ? calloc((size_t)r->m.layers + 1, sizeof *s->layer_urls) : NULL;
            for (int l = 0; s->layer_urls && l < r->m.layers; l++)
                if (asprintf(&s->layer_urls[l], "%s/v1/sessions/%s/layers/%d/append", base, id, l) < 0) {
                    s->layer_urls[l] = NULL;
                    ok = 0;
                    break;
                }
            if (!s->layer_urls) ok = 0;
            free(base);
        }
        if (!ok) s->id[0] = 0;
    }
    long long total = (long long)r->o->prefix + r->o->steps;
    if (ok && json_is_integer(max_len) && json_integer_value(max_len) < total && !*warned) {
        *warned = 1;
        fprintf(stderr, "attnd-load: --prefix + --steps = %lld is beyond the sessions' max_length "
                        "%lld: appends past it will fail (use --window, or a larger --max-seq-len "
                        "on the server)\n", total, (long long)json_integer_value(max_len));
    }
    json_decref(root);
    return ok ? 0 : -1;
}

static int retryable(const load_sess_runner *r, const level *lv, const stream *s, int cc,
                     long status)
{
    return !cc && status == 503 && s->retry_after_s >= 0 && s->tries < r->o->max_retries &&
           (!lv->stopping || s->state == ST_DELETE);
}

/* After a successful step (or when the decode phase opens, steps_done == 0): the next step,
 * or the end of the stream's decode. */
static void after_step(load_sess_runner *r, level *lv, stream *s, int64_t now)
{
    load_sess_stats *st = lv->st;
    if (s->steps_done >= r->o->steps) {
        st->completed++;
        set_state(r, lv, s, ST_DELETE);
    } else if (lv->stopping || (lv->decode_cap && now >= lv->decode_cap)) {
        st->steps_cut += r->o->steps - s->steps_done;
        set_state(r, lv, s, ST_DELETE);
    } else if (s->state == ST_DECODE) {
        next_call(r, s);
    } else {
        set_state(r, lv, s, ST_DECODE);
    }
}

/* --interleave K: the streams [g0, g0 + K) are one client's, one request in flight at a
 * time. The next of them after `from` (cyclically, `from` itself last) waiting for its turn
 * takes it; one that has no step left passes it on. */
static void pass_turn(load_sess_runner *r, level *lv, size_t from, int64_t now)
{
    size_t k = (size_t)r->o->interleave, g0 = from / k * k;
    size_t g1 = g0 + k < (size_t)lv->n ? g0 + k : (size_t)lv->n, size = g1 - g0;
    for (size_t i = 1; i <= size; i++) {
        stream *j = &r->streams[g0 + (from - g0 + i) % size];
        if (j->state != ST_DECODE || !j->parked) continue;
        j->parked = 0;
        after_step(r, lv, j, now);
        if (j->state == ST_DECODE) return;
    }
}

/* A binary append's answer (already checked as a v2 response) names s's session and the
 * length it should have now among its parameters. */
static int binary_session_ok(const stream *s, long long length)
{
    json_t *root = json_loadb(s->buf, (size_t)s->header_len, 0, NULL);
    json_t *p = json_object_get(root, "parameters");
    const char *id = json_string_value(json_object_get(p, "session_id"));
    json_t *len = json_object_get(p, "session_length");
    int ok = id && strcmp(id, s->id) == 0 && json_is_integer(len) && json_integer_value(len) == length;
    json_decref(root);
    return ok;
}

/* An append's answer (of set's bodies; cc: curl gave up) against what it must be: the
 * output's shape, and s's session at length positions. *t gets its timing. */
static load_kind check_append(const load_sess_runner *r, const stream *s, const body_set *set, int cc,
                              long status, long long length, load_timing *t)
{
    if (cc) return load_kind_from_curl(cc);
    if (r->o->binary) {
        load_kind k = load_check_response_v2(status, s->buf, s->len, s->header_len, &set->v2, t);
        return k == LOAD_OK && !binary_session_ok(s, length) ? LOAD_ERR_BAD_SHAPE : k;
    }
    load_expect want = {.output = &set->shape, .session_id = s->id, .session_length = length,
                        .session_full = r->o->window == 0};
    return load_check_response(status, s->buf, s->len, &want, t);
}

/* An answer to s's call arrived at end (or curl gave up: cc). */
static void complete(load_sess_runner *r, level *lv, stream *s, int cc, int64_t end)
{
    load_sess_stats *st = lv->st;
    const load_opts *o = r->o;
    long status = 0;
    curl_multi_remove_handle(r->multi, s->easy);
    s->busy = 0;
    if (!cc) curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
    if (retryable(r, lv, s, cc, status)) {
        char kind[64];
        load_sess_kind(kind, sizeof kind, cc, status, s->buf, s->len, 0);
        load_sess_add_retry(st, kind);
        s->tries++;
        double wait = s->retry_after_s < MAX_RETRY_WAIT_S ? s->retry_after_s : MAX_RETRY_WAIT_S;
        s->send_at = end + (int64_t)(wait * 1e9);
        s->waiting = 1;
        lv->waiting++;
        return;
    }
    st->calls++;
    double ms = (double)(end - s->call_start) / 1e6;
    load_timing t = {0};
    load_kind k = LOAD_OK;
    if (s->state == ST_PREFILL || s->state == ST_DECODE)
        k = check_append(r, s, s->set, cc, status, s->length + s->set->rows, &t);
    int bad = k == LOAD_ERR_BAD_JSON || k == LOAD_ERR_BAD_SHAPE;
    if ((s->state == ST_PREFILL || s->state == ST_DECODE) && k == LOAD_OK && s->layer_urls &&
        s->layer + 1 < r->m.layers) {
        s->layer++; /* the same rows to the next layer: the step ends with the last one */
        s->tries = 0;
        r->ready[r->nready++] = idx(r, s);
        return;
    }
    s->layer = 0;
    if (s->layer_urls) ms = (double)(end - s->step_start) / 1e6; /* the step over every layer */
    switch (s->state) {
    case ST_CREATE:
        if (!cc && status == 201 && take_session(r, s, &r->warned_length) == 0) {
            st->created++;
            st->n_create++;
            st->sum_create_ms += ms;
            if (ms > st->max_create_ms) st->max_create_ms = ms;
            if (lv->stopping) {
                st->steps_cut += o->steps;
                set_state(r, lv, s, ST_DELETE);
            } else {
                set_state(r, lv, s, o->prefix ? ST_PREFILL : ST_BARRIER);
            }
        } else {
            fail_call(st, s, LOAD_PHASE_CREATE, cc, status, !cc && status == 201);
            st->failed++;
            st->steps_lost += o->steps;
            set_state(r, lv, s, ST_DONE);
        }
        return;
    case ST_PREFILL:
        if (end > lv->last_prefill_end) lv->last_prefill_end = end;
        if (k != LOAD_OK) {
            fail_call(st, s, LOAD_PHASE_PREFILL, cc, status, bad);
            st->failed++;
            st->steps_lost += o->steps;
            set_state(r, lv, s, ST_DELETE);
            return;
        }
        s->length += s->set->rows;
        st->prefill_tokens += s->set->rows;
        if (s->length >= o->prefix) {
            load_sess_add_prefill(st, (double)(end - s->prefill_start) / 1e6);
            set_state(r, lv, s, ST_BARRIER);
        } else if (lv->stopping) {
            st->steps_cut += o->steps;
            set_state(r, lv, s, ST_DELETE);
        } else {
            next_call(r, s);
        }
        return;
    case ST_DECODE:
        if (end > lv->last_decode_end) lv->last_decode_end = end;
        if (k != LOAD_OK) {
            fail_call(st, s, LOAD_PHASE_DECODE, cc, status, bad);
            st->failed++;
            st->steps_lost += o->steps - s->steps_done - 1;
            set_state(r, lv, s, ST_DELETE);
            if (o->interleave > 1) pass_turn(r, lv, idx(r, s), end);
            return;
        }
        if (!s->steps_done) st->decoding_streams++;
        s->length++;
        s->steps_done++;
        load_sess_add_step(st, ms, (double)(end - lv->decode_start) / 1e9, &t);
        if (o->interleave > 1) { /* the client's next session goes next */
            s->parked = 1;
            pass_turn(r, lv, idx(r, s), end);
        } else {
            after_step(r, lv, s, end);
        }
        return;
    case ST_DELETE:
        count_delete(st, s, cc, status, ms);
        set_state(r, lv, s, ST_DONE);
        return;
    default: return;
    }
}

/* ---- the decode mix's prefill client ------------------------------------------------------- */

/* One call of the mixer's, blocking: body (NULL: DELETE) to url. Returns the status (0 on a
 * transport error, *cc). A 503 with Retry-After is retried as the streams' calls are, unless
 * the mixer is stopping (a delete still is). */
static long mix_call(mixer *x, const char *url, const qbody *body, struct curl_slist *headers, int *cc)
{
    stream *s = x->s;
    CURL *e = s->easy;
    for (s->tries = 0;; s->tries++) {
        s->len = 0;
        s->retry_after_s = -1;
        s->header_len = -1;
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
        if (body) {
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, NULL);
            curl_easy_setopt(e, CURLOPT_POST, 1L);
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, body->s);
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
        } else {
            curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
        }
        long status = 0;
        *cc = (int)curl_easy_perform(e);
        if (!*cc) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        pthread_mutex_lock(&x->mu);
        const int stopping = x->stop;
        pthread_mutex_unlock(&x->mu);
        if (*cc || status != 503 || s->retry_after_s < 0 || s->tries >= x->r->o->max_retries ||
            (stopping && body))
            return status;
        char kind[64];
        load_sess_kind(kind, sizeof kind, *cc, status, s->buf, s->len, 0);
        load_sess_add_retry(&x->st, kind);
        const double wait = s->retry_after_s < MAX_RETRY_WAIT_S ? s->retry_after_s : MAX_RETRY_WAIT_S;
        struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* Waits until the next prefill is due (at once when it is late) and sets the one after.
 * Returns 0 once the mixer is stopped. */
static int mix_wait(mixer *x)
{
    const int64_t every = (int64_t)(x->r->o->prefill_every_s * 1e9);
    pthread_mutex_lock(&x->mu);
    int64_t now = now_ns();
    if (x->due <= now) {
        x->due = now + every;
    } else {
        while (!x->stop && (now = now_ns()) < x->due) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            const int64_t left = x->due - now, ns = ts.tv_nsec + left % 1000000000;
            ts.tv_sec += (time_t)(left / 1000000000 + ns / 1000000000);
            ts.tv_nsec = (long)(ns % 1000000000);
            pthread_cond_timedwait(&x->cv, &x->mu, &ts);
        }
        x->due += every;
    }
    const int go = !x->stop;
    pthread_mutex_unlock(&x->mu);
    return go;
}

/* The prefill's appends (one per layer of a model group): 0 with its time, or -1 (counted). */
static int mix_prefill(mixer *x, double *ms)
{
    load_sess_runner *r = x->r;
    stream *s = x->s;
    const body_set *set = &r->mix;
    const qbody *b = &set->b[x->next_body++ % set->n];
    const int layers = s->layer_urls ? r->m.layers : 1;
    const int64_t t0 = now_ns();
    for (int l = 0; l < layers; l++) {
        int cc;
        long status = mix_call(x, s->layer_urls ? s->layer_urls[l] : s->append_url, b,
                               set->headers ? set->headers : r->headers, &cc);
        x->st.calls++;
        load_timing t;
        const load_kind k = check_append(r, s, set, cc, status, set->rows, &t);
        if (k != LOAD_OK) {
            fail_call(&x->st, x->s, LOAD_PHASE_PREFILL, cc, status, k == LOAD_ERR_BAD_JSON || k == LOAD_ERR_BAD_SHAPE);
            return -1;
        }
    }
    *ms = (double)(now_ns() - t0) / 1e6;
    return 0;
}

/* Deletes the prefill's session, as a stream's delete is counted. */
static void mix_delete(mixer *x)
{
    int cc;
    const int64_t t0 = now_ns();
    long status = mix_call(x, x->s->session_url, NULL, x->r->headers, &cc);
    x->st.calls++;
    count_delete(&x->st, x->s, cc, status, (double)(now_ns() - t0) / 1e6);
}

/* Every --prefill-every from the decode's start: a session created, --prefill-rows rows
 * appended in one append (timed: TTFT), the session deleted. A session created as the
 * decode ended gets no prefill, and is deleted all the same. */
static void *mix_main(void *arg)
{
    mixer *x = arg;
    load_sess_runner *r = x->r;
    stream *s = x->s;
    const qbody create = {r->create_body, strlen(r->create_body)};
    int warned = 1; /* the streams' creates warn about max_length */
    while (mix_wait(x)) {
        int cc;
        long status = mix_call(x, r->create_url, &create, r->headers, &cc);
        x->st.calls++;
        if (cc || status != 201 || take_session(r, s, &warned) != 0) {
            fail_call(&x->st, x->s, LOAD_PHASE_CREATE, cc, status, !cc && status == 201);
            reset_stream(s);
            continue;
        }
        x->st.created++;
        pthread_mutex_lock(&x->mu);
        const int stopping = x->stop;
        pthread_mutex_unlock(&x->mu);
        double ms;
        if (!stopping && mix_prefill(x, &ms) == 0) load_sess_add_ttft(&x->st, r->mix.rows, ms);
        mix_delete(x);
        reset_stream(s);
        s->id[0] = 0;
    }
    return NULL;
}

/* Starts the mixer at the decode's start: its first prefill at once. */
static void mix_start(mixer *x, int64_t now)
{
    x->due = now;
    x->started = pthread_create(&x->th, NULL, mix_main, x) == 0;
    if (!x->started) load_sess_add_error(&x->st, LOAD_PHASE_PREFILL, "thread", "cannot start the prefill client");
}

/* Adds m's counts to st and frees m. */
static void mix_merge(load_sess_stats *st, load_sess_stats *m)
{
    st->created += m->created;
    st->deleted += m->deleted;
    st->gone += m->gone;
    st->leaked += m->leaked;
    st->calls += m->calls;
    st->errors += m->errors;
    st->retries += m->retries;
    st->n_delete += m->n_delete;
    st->sum_delete_ms += m->sum_delete_ms;
    if (m->max_delete_ms > st->max_delete_ms) st->max_delete_ms = m->max_delete_ms;
    for (int ph = 0; ph < LOAD_PHASE_COUNT; ph++) st->errors_by_phase[ph] += m->errors_by_phase[ph];
    for (size_t i = 0; i < m->errors_by_kind.n; i++)
        load_counts_add(&st->errors_by_kind, m->errors_by_kind.v[i].name, m->errors_by_kind.v[i].n);
    st->errors_by_kind.other += m->errors_by_kind.other;
    for (size_t i = 0; i < m->retries_by_kind.n; i++)
        load_counts_add(&st->retries_by_kind, m->retries_by_kind.v[i].name, m->retries_by_kind.v[i].n);
    st->retries_by_kind.other += m->retries_by_kind.other;
    if (!st->first_error[0]) memcpy(st->first_error, m->first_error, sizeof st->first_error);
    st->mix_prefill_rows += m->mix_prefill_rows;
    st->mix_prefill_s += m->mix_prefill_s;
    for (size_t i = 0; i < m->n_ttft; i++)
        if (push2(&st->ttft_ms, NULL, &st->n_ttft, &st->cap_ttft, m->ttft_ms[i], 0)) st->oom = 1;
    st->oom |= m->oom;
    load_sess_stats_free(m);
}

/* Stops the mixer (its call in flight finishes, and its session is deleted), joins it and
 * adds its counts to st. */
static void mix_stop(mixer *x, load_sess_stats *st)
{
    pthread_mutex_lock(&x->mu);
    x->stop = 1;
    pthread_cond_signal(&x->cv);
    pthread_mutex_unlock(&x->mu);
    if (x->started) pthread_join(x->th, NULL);
    x->started = 0;
    mix_merge(st, &x->st);
}

/* Every stream has created and prefilled (or failed): the decode phase starts for all. */
static void open_decode(load_sess_runner *r, level *lv, int64_t now)
{
    lv->decode_started = 1;
    lv->decode_start = now;
    lv->decode_cap = r->o->duration_s > 0 ? now + (int64_t)(r->o->duration_s * 1e9) : 0;
    int k = r->o->interleave;
    for (size_t i = 0; i < r->nbarrier; i++) {
        stream *s = &r->streams[r->barrier[i]];
        s->steps_done = 0;
        if (k > 1) { /* waits for its client's turn */
            s->state = ST_DECODE;
            s->parked = 1;
        } else {
            after_step(r, lv, s, now);
        }
    }
    r->nbarrier = 0;
    for (long g0 = 0; k > 1 && g0 < lv->n; g0 += k)
        pass_turn(r, lv, (size_t)(g0 + k < lv->n ? g0 + k : lv->n) - 1, now);
    if (lv->mix) mix_start(lv->mix, now);
}

/* A due retry: sent again, or, once stopping, given up (the steps it carried are cut). */
static int due_retries(load_sess_runner *r, level *lv, int64_t now, int64_t *next_wake)
{
    for (size_t i = 0; lv->waiting && i < (size_t)lv->n; i++) {
        stream *s = &r->streams[i];
        if (!s->waiting) continue;
        if (lv->stopping && s->state != ST_DELETE) {
            s->waiting = 0;
            lv->waiting--;
            lv->st->steps_cut += r->o->steps - s->steps_done;
            set_state(r, lv, s, ST_DELETE);
            if (r->o->interleave > 1) pass_turn(r, lv, i, now);
            continue;
        }
        if (s->send_at > now) {
            if (!*next_wake || s->send_at < *next_wake) *next_wake = s->send_at;
            continue;
        }
        s->waiting = 0;
        lv->waiting--;
        if (send_call(r, lv, s, now)) return -1;
    }
    return 0;
}

static void progress(load_sess_runner *r, level *lv, int64_t now, int final)
{
    const load_sess_stats *st = lv->st;
    if (r->o->quiet) return;
    if (!final && (!r->tty || now - lv->last_progress < PROGRESS_NS)) return;
    lv->last_progress = now;
    double el = (double)(now - lv->t0) / 1e9;
    long want = (long)lv->n * r->o->steps;
    if (!r->tty) {
        fprintf(stderr, "sessions %ld: %ld created, %ld prefilled, %lld/%ld steps, %ld errors, "
                        "%ld deleted, %.1f s\n", lv->n, st->created, st->prefilled,
                st->decode_tokens, want, st->errors, st->deleted, el);
        return;
    }
    fprintf(stderr, "\rsessions %-5ld %6.1fs  created %-5ld prefilled %-5ld steps %lld/%-7ld "
                    "errors %-5ld retries %-5ld deleted %-5ld\033[K", lv->n, el, st->created,
            st->prefilled, st->decode_tokens, want, st->errors, st->retries, st->deleted);
    if (final) fputc('\n', stderr);
}

static int run_loop(load_sess_runner *r, level *lv, char *err, size_t el)
{
    for (;;) {
        int64_t now = now_ns(), wake = 0;
        if (stop_requested && !lv->stopping) lv->stopping = 1;
        if (lv->waiting && due_retries(r, lv, now, &wake))
            return snprintf(err, el, "curl_multi_add_handle failed"), -1;
        if (!lv->decode_started && lv->pre_barrier == 0) open_decode(r, lv, now);
        for (size_t i = 0; i < r->nready; i++)
            if (send_call(r, lv, &r->streams[r->ready[i]], now))
                return snprintf(err, el, "curl_multi_add_handle failed"), -1;
        r->nready = 0;
        if (lv->active == 0) return 0; /* the decode is over: the caller stops the prefills */
        progress(r, lv, now, 0);
        int running = 0, left;
        if (curl_multi_perform(r->multi, &running) != CURLM_OK)
            return snprintf(err, el, "curl_multi_perform failed"), -1;
        int64_t end = now_ns(); /* one completion time for everything this perform finished */
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(r->multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            char *priv = NULL;
            CURL *easy = msg->easy_handle;
            CURLcode cc = msg->data.result;
            curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
            complete(r, lv, (stream *)(void *)priv, (int)cc, end);
        }
        if (r->nready || (!lv->decode_started && lv->pre_barrier == 0)) continue;
        int timeout_ms = 100;
        if (wake) {
            int64_t ms = (wake - now_ns()) / 1000000 + 1;
            if (ms < timeout_ms) timeout_ms = ms < 0 ? 0 : (int)ms;
        }
        if (curl_multi_poll(r->multi, NULL, 0, timeout_ms, NULL) != CURLM_OK)
            return snprintf(err, el, "curl_multi_poll failed"), -1;
    }
}

int load_sess_run_level(load_sess_runner *r, int n, load_sess_stats *st, char *err, size_t el)
{
    const load_opts *o = r->o;
    level lv = {0};
    memset(st, 0, sizeof *st);
    if (n < 1 || (size_t)n + (o->prefill_every_s > 0) > r->nstreams)
        return snprintf(err, el, "bad level %d", n), -1;
    st->sessions = n;
    st->prefix = o->prefix;
    st->steps = o->steps;
    st->interleave = o->interleave;
    lv.st = st;
    lv.n = lv.active = lv.pre_barrier = n;
    mixer mix; /* joined before this returns */
    if (o->prefill_every_s > 0) { /* the prefill client: starts with the decode phase */
        st->prefill_rows = o->prefill_rows;
        mix = (mixer){.r = r, .s = &r->streams[n]};
        pthread_mutex_init(&mix.mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&mix.cv, &ca);
        pthread_condattr_destroy(&ca);
        lv.mix = &mix;
    }
    lv.t0 = now_ns();
    r->nready = r->nbarrier = 0;
    for (int i = 0; i < n; i++) {
        stream *s = &r->streams[i];
        s->state = ST_CREATE;
        s->id[0] = 0;
        s->length = 0;
        s->steps_done = 0;
        s->waiting = 0;
        s->parked = 0;
        next_call(r, s);
    }
    int rc = run_loop(r, &lv, err, el);
    if (lv.mix) {
        mix_stop(lv.mix, st);
        pthread_cond_destroy(&lv.mix->cv);
        pthread_mutex_destroy(&lv.mix->mu);
    }
    progress(r, &lv, now_ns(), 1);
    if (rc) { /* a local failure: give the handles back; the server's TTL ends the sessions */
        for (int i = 0; i < n; i++) {
            stream *s = &r->streams[i];
            if (s->busy) curl_multi_remove_handle(r->multi, s->easy);
            s->busy = 0;
            if (s->state != ST_DONE && s->id[0]) st->leaked++;
            reset_stream(s);
        }
    }
    st->prefill_total_s =
        lv.first_prefill ? (double)(lv.last_prefill_end - lv.first_prefill) / 1e9 : 0;
    st->decode_elapsed_s =
        lv.last_decode_end > lv.decode_start ? (double)(lv.last_decode_end - lv.decode_start) / 1e9
                                             : 0;
    load_sess_stats_finish(st);
    if (rc) return -1;
    return stop_requested ? 1 : 0;
}
