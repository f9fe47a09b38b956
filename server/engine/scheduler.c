/* scheduler.c — cross-client dynamic batching: a bounded FIFO per model, worker
 * threads that cut batches from it and run each batch as one attn_forward.
 *
 * Design. One mutex guards the queue. Workers take turns as the single
 * *collector*: the collector watches the queue and cuts the next batch; the
 * others either compute or wait for the collector role (cv_lead). So with two
 * workers one computes while the other is already collecting the next batch,
 * and a submit wakes exactly one thread (cv_queue has one waiter at most).
 *
 * The batch is the longest FIFO prefix of live requests with
 *   count <= max_batch_requests, rows <= max_batch_tokens and
 *   kv_bytes <= max_batch_kv_bytes
 * (the first request always goes in, so an oversized one runs alone). rows are
 * the positions the batch's one projection GEMM computes (query rows, plus the
 * key rows of cross-attention); kv_bytes the keys and values its attention
 * reads (a session append reads its whole cache but projects one row: counting
 * both as "tokens" kept decode batches at a handful of requests). It is cut
 * when it is full (request cap reached, or the next request would not fit), when
 * its oldest request has waited max_queue_delay_us, or when draining. Requests
 * whose deadline has passed are unlinked as the queue is scanned and finished
 * with ATTND_DONE_TIMEOUT, never computed. No thread waits busily: the collector
 * sleeps on cv_queue until a submit or the oldest request's delay expires.
 *
 * Streams. A session append carries its stream's key (attnd_request.stream).
 * Closed-loop streams send their next step as soon as they have their answer,
 * so the steps of N active streams arrive within a client round trip of each
 * other, and two batches of N/2 read every weight twice where one batch of N
 * reads them once. So a batch made only of stream steps, fewer than the
 * streams active lately (distinct keys cut into batches within the last
 * STREAM_WINDOW_NS, or three of the last batch's durations if longer), waits
 * for the rest: while another batch of stream steps computes (its streams come
 * back when it ends), then up to max_stream_wait_us after the later of its
 * oldest step's arrival and that batch's end. Two half-batches so merge into
 * one within a step; a lone stream never waits. Anything else in the batch, a
 * full batch, or draining cuts it as before.
 *
 * Every on_done, and the batch hook, runs with the mutex released.
 *
 * Cores. Each worker computes on its own thread, so under load W workers keep
 * W cores busy without oversubscribing them. A batch that starts while no other
 * worker is computing runs on a workspace with one thread per core instead (the
 * library's pool, with single-threaded OpenBLAS), so a lone large request uses
 * every idle core. If another worker starts meanwhile, the two share the cores
 * for the rest of that batch.
 */
#include "engine/scheduler.h"

#include "engine/streams.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Threads beyond this are a configuration mistake, not a plan. */
#define SCHED_MAX_WORKERS 256
/* Likewise a batching delay beyond an hour (also keeps ns arithmetic far from overflow). */
#define SCHED_MAX_DELAY_US INT64_C(3600000000)
/* A stream counts as active for this long after its last step was cut into a
 * batch (at least: three batch durations when batches take longer). */
#define STREAM_WINDOW_NS INT64_C(100000000)

/* A worker's private state: its thread, its scratch, and the growable array
 * into which it concatenates a batch's sequences (no malloc per batch once it
 * has grown to the largest batch seen). */
typedef struct sched_worker {
    attnd_scheduler *s;
    pthread_t thread;
    attn_workspace *ws; /* owned: the calling thread only                     */
    attn_workspace *ws_wide; /* owned: every core, for a batch that runs while no
                                other worker computes (a lone large request);
                                NULL with one core                             */
    attn_seq *seqs;     /* owned, seq_cap entries */
    int seq_cap;
} sched_worker;

/* A singly linked list of requests, through attnd_request.next. */
typedef struct req_list {
    attnd_request *head, *tail;
    int count;
    size_t tokens;   /* sum of n_tokens (for the batch hook and metrics) */
} req_list;

struct attnd_scheduler {
    const attn_layer *layer; /* borrowed: for requests that name none          */
    attnd_sched_config cfg;
    attnd_batch_hook hook;
    void *hook_ctx;

    pthread_mutex_t mu;
    pthread_cond_t cv_queue; /* the collector waits here: submit, delay, drain */
    pthread_cond_t cv_lead;  /* idle workers wait here to become collector    */
    req_list queue;          /* FIFO, guarded by mu                           */
    int collecting;          /* a worker holds the collector role (mu)        */
    int closing;             /* drain started: no submits, no delay (mu)      */
    int sync_ready;          /* mutexes and condvars initialised              */

    attnd_streams streams;    /* streams whose steps were cut lately (mu)     */
    int steps_computing;      /* stream steps inside running batches (mu)     */
    int64_t steps_done_ns;    /* when the last batch holding steps ended (mu) */
    _Atomic int64_t last_batch_ns; /* the last batch's compute time            */
    _Atomic int computing;    /* workers inside run_batch now                  */
    pthread_mutex_t drain_mu; /* serialises drain; guards joined              */
    int joined;
    sched_worker *workers;    /* cfg.workers entries                          */
    int n_started;            /* threads actually created                     */
};

/* ------------------------------------------------------------ small helpers */

static void list_push(req_list *l, attnd_request *r)
{
    r->next = NULL;
    if (l->tail) l->tail->next = r;
    else l->head = r;
    l->tail = r;
    l->count++;
    l->tokens += r->n_tokens;
}

/* Unlinks r, whose predecessor in l is prev (NULL when r is the head). */
static void list_unlink(req_list *l, attnd_request *prev, attnd_request *r)
{
    if (prev) prev->next = r->next;
    else l->head = r->next;
    if (l->tail == r) l->tail = prev;
    r->next = NULL;
    l->count--;
    l->tokens -= r->n_tokens;
}

static int64_t us_between(int64_t from_ns, int64_t to_ns)
{
    return to_ns > from_ns ? (to_ns - from_ns) / 1000 : 0;
}

static struct timespec mono_timespec(int64_t ns)
{
    struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };
    return ts;
}

/* Calls on_done for every request of l. Each request may be freed by its
 * callback, so next is read first. Called without the mutex. */
static void finish_all(req_list *l)
{
    attnd_request *r = l->head;
    while (r) {
        attnd_request *next = r->next;
        r->next = NULL;
        r->on_done(r, r->on_done_ctx);
        r = next;
    }
    memset(l, 0, sizeof *l);
}

/* ------------------------------------------------------------ batch cutting */

/* The layer req computes with: its own (a model version), or the default. */
static const attn_layer *layer_of(const attnd_scheduler *s, const attnd_request *r)
{
    return r->layer ? r->layer : s->layer;
}

/* What req costs a batch: the positions projected for it (its query rows, and
 * the key rows of cross-attention; a cache's rows are projected already) and
 * the key/value bytes its attention reads (every key it attends to, g * (d_k +
 * d_v) floats each). */
static void measure(const attnd_scheduler *s, attnd_request *req)
{
    attn_layer_info in;
    attn_layer_get_info(layer_of(s, req), &in);
    int g = in.num_kv_heads > 0 ? in.num_kv_heads : in.num_heads;
    size_t row_bytes = (size_t)g * (size_t)(in.head_dim_k + in.head_dim_v) * sizeof(float);
    size_t rows = 0, keys = 0;
    for (int i = 0; i < req->n_seqs; i++) {
        const attn_seq *q = &req->seqs[i];
        rows += (size_t)q->t + (q->key ? (size_t)q->s : 0);
        keys += (size_t)q->s;
    }
    req->rows = rows;
    req->kv_bytes = keys > SIZE_MAX / row_bytes ? SIZE_MAX : keys * row_bytes;
}

/* 1 when a batch of `count` stream steps should wait for more: more streams
 * than that took steps lately (see "Streams" above). mu held. */
static int awaits_streams(attnd_scheduler *s, int64_t now, int count)
{
    if (s->cfg.max_stream_wait_us == 0) return 0;
    int64_t window = 3 * atomic_load(&s->last_batch_ns);
    if (window < STREAM_WINDOW_NS) window = STREAM_WINDOW_NS;
    return attnd_streams_active(&s->streams, now, window) > count;
}

/* When a waiting stream batch is cut anyway: never while other steps compute
 * (INT64_MAX: the end of their batch signals), else max_stream_wait_us after
 * the later of its oldest step and the end of the last batch of steps, or
 * later if max_queue_delay_us says so. */
static int64_t stream_ready_ns(const attnd_scheduler *s, int64_t delay_ready_ns)
{
    if (s->steps_computing > 0) return INT64_MAX;
    int64_t from = s->queue.head->enqueued_ns > s->steps_done_ns ? s->queue.head->enqueued_ns : s->steps_done_ns;
    int64_t t = from + s->cfg.max_stream_wait_us * 1000;
    return t > delay_ready_ns ? t : delay_ready_ns;
}

/* Scans the queue once (mu held). Unlinks expired requests into *expired.
 * Returns 1 when the batch starting at the head should be cut now, and moves it
 * into *batch; returns 0 when it should wait, with *wake_ns set to when the
 * oldest live request's delay ends (or 0 if the queue is empty). */
static int scan_queue(attnd_scheduler *s, int64_t now, req_list *batch, req_list *expired,
                      int64_t *wake_ns)
{
    req_list *q = &s->queue;
    attnd_request *prev = NULL, *r = q->head, *last_in = NULL;
    int count = 0, full = 0, steps = 0; /* steps: requests of a stream */
    size_t tokens = 0, rows = 0, kv_bytes = 0; /* rows, kv_bytes: below each budget */

    *wake_ns = 0;
    while (r) {
        attnd_request *next = r->next;
        if (r->deadline_ns != 0 && now >= r->deadline_ns) {
            list_unlink(q, prev, r);
            list_push(expired, r);
            r = next;
            continue;
        }
        if (count == s->cfg.max_batch_requests ||
            (count > 0 && (layer_of(s, r) != layer_of(s, q->head) || /* one layer a batch */
                           rows >= s->cfg.max_batch_tokens ||
                           r->rows > s->cfg.max_batch_tokens - rows ||
                           kv_bytes >= s->cfg.max_batch_kv_bytes ||
                           r->kv_bytes > s->cfg.max_batch_kv_bytes - kv_bytes))) {
            full = 1;
            break;
        }
        rows += r->rows;
        kv_bytes += r->kv_bytes;
        tokens += r->n_tokens;
        steps += r->stream != 0;
        count++;
        last_in = r;
        prev = r;
        r = next;
    }
    if (count == 0) return 0;
    /* A request at least as big as a budget fills the batch by itself. */
    if (count == s->cfg.max_batch_requests || rows >= s->cfg.max_batch_tokens ||
        kv_bytes >= s->cfg.max_batch_kv_bytes)
        full = 1;

    int64_t ready_ns = q->head->enqueued_ns + s->cfg.max_queue_delay_us * 1000;
    if (!full && !s->closing && steps == count && awaits_streams(s, now, count))
        ready_ns = stream_ready_ns(s, ready_ns);
    if (!full && !s->closing && now < ready_ns) {
        *wake_ns = ready_ns == INT64_MAX ? 0 : ready_ns; /* 0: until signalled */
        return 0;
    }
    /* Detach head..last_in: the prefix scanned above, now free of expired ones. */
    batch->head = q->head;
    batch->tail = last_in;
    batch->count = count;
    batch->tokens = tokens;
    q->head = last_in->next;
    if (q->head == NULL) q->tail = NULL;
    last_in->next = NULL;
    q->count -= count;
    q->tokens -= tokens;
    for (attnd_request *b = batch->head; b; b = b->next) {
        attnd_streams_seen(&s->streams, b->stream, now);
        s->steps_computing += b->stream != 0;
    }
    return 1;
}

/* The collector's job (mu held, collector role held): waits until there is a
 * batch to run or expired requests to answer, or until draining leaves the
 * queue empty. Returns 0 in that last case: the worker should exit. */
static int collect(attnd_scheduler *s, req_list *batch, req_list *expired)
{
    for (;;) {
        int64_t wake_ns;
        int cut = scan_queue(s, attnd_now_ns(), batch, expired, &wake_ns);
        if (cut || expired->count > 0) return 1;
        if (s->queue.count == 0 && s->closing) return 0;
        if (wake_ns == 0) {
            pthread_cond_wait(&s->cv_queue, &s->mu);
        } else {
            struct timespec ts = mono_timespec(wake_ns);
            pthread_cond_timedwait(&s->cv_queue, &s->mu, &ts);
        }
    }
}

/* ------------------------------------------------------------ running */

/* Makes room for n sequences in w->seqs. Returns 0, or -1 on allocation
 * failure (the old array is kept). */
static int reserve_seqs(sched_worker *w, long n)
{
    if (n <= w->seq_cap) return 0;
    if (n > INT_MAX / 2) return -1;
    int cap = w->seq_cap ? w->seq_cap : 16;
    while (cap < n) cap *= 2;
    attn_seq *p = realloc(w->seqs, (size_t)cap * sizeof *p);
    if (p == NULL) return -1;
    w->seqs = p;
    w->seq_cap = cap;
    return 0;
}

static void set_result(attnd_request *r, attn_status st)
{
    r->lib_status = st;
    r->outcome = st == ATTN_OK ? ATTND_DONE_OK : ATTND_DONE_ERROR;
}

/* Runs every request of the batch alone: the fallback when the joint forward
 * failed, so one bad request cannot fail the others, and each error names a
 * sequence index of its own request. */
static void run_each_alone(sched_worker *w, attn_workspace *ws, req_list *batch)
{
    for (attnd_request *r = batch->head; r; r = r->next)
        set_result(r, attn_forward(layer_of(w->s, r), r->seqs, r->n_seqs, ws, NULL,
                                   &r->lib_error));
}

/* The batch's stream steps are computed: a collector waiting for them to come
 * back (stream_ready_ns) starts its wait now. */
static void steps_finished(attnd_scheduler *s, const req_list *batch, int64_t end_ns)
{
    int steps = 0;
    for (const attnd_request *r = batch->head; r; r = r->next) steps += r->stream != 0;
    if (steps == 0) return;
    pthread_mutex_lock(&s->mu);
    s->steps_computing -= steps;
    s->steps_done_ns = end_ns;
    pthread_cond_signal(&s->cv_queue);
    pthread_mutex_unlock(&s->mu);
}

/* Runs one batch: concatenates the requests' sequences, one attn_forward,
 * fills every result field, calls the hook, then every on_done. */
static void run_batch(sched_worker *w, req_list *batch)
{
    attnd_scheduler *s = w->s;
    int64_t start = attnd_now_ns();
    long n_seqs = 0;
    for (attnd_request *r = batch->head; r; r = r->next) {
        r->queue_us = us_between(r->enqueued_ns, start);
        r->batch_size = batch->count;
        n_seqs += r->n_seqs;
    }

    /* Alone: every core; else this worker's own thread (see "Cores" above). */
    int others = atomic_fetch_add(&s->computing, 1);
    attn_workspace *ws = others == 0 && w->ws_wide ? w->ws_wide : w->ws;
    if (batch->count == 1) {
        run_each_alone(w, ws, batch);
    } else if (reserve_seqs(w, n_seqs) != 0) {
        run_each_alone(w, ws, batch); /* no memory to pack: still answer correctly */
    } else {
        int k = 0;
        for (attnd_request *r = batch->head; r; r = r->next) {
            memcpy(w->seqs + k, r->seqs, (size_t)r->n_seqs * sizeof *r->seqs);
            k += r->n_seqs;
        }
        attn_error err;
        attn_status st = attn_forward(layer_of(s, batch->head), w->seqs, k, ws, NULL, &err);
        if (st == ATTN_OK) {
            for (attnd_request *r = batch->head; r; r = r->next) set_result(r, ATTN_OK);
        } else {
            run_each_alone(w, ws, batch);
        }
    }
    atomic_fetch_sub(&s->computing, 1);

    int64_t end = attnd_now_ns();
    atomic_store(&s->last_batch_ns, end - start);
    steps_finished(s, batch, end);
    int64_t compute_us = us_between(start, end);
    for (attnd_request *r = batch->head; r; r = r->next) r->compute_us = compute_us;
    if (s->hook) s->hook(s->hook_ctx, batch->count, batch->tokens, compute_us);
    finish_all(batch);
}

/* Answers requests whose deadline passed while queued. */
static void finish_expired(req_list *expired)
{
    int64_t now = attnd_now_ns();
    for (attnd_request *r = expired->head; r; r = r->next) {
        r->outcome = ATTND_DONE_TIMEOUT;
        r->queue_us = us_between(r->enqueued_ns, now);
        r->compute_us = 0;
        r->batch_size = 0;
    }
    finish_all(expired);
}

static void *worker_main(void *arg)
{
    sched_worker *w = arg;
    attnd_scheduler *s = w->s;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->collecting) pthread_cond_wait(&s->cv_lead, &s->mu);
        s->collecting = 1;
        req_list batch = { 0 }, expired = { 0 };
        int more = collect(s, &batch, &expired);
        s->collecting = 0;
        pthread_cond_signal(&s->cv_lead); /* the next idle worker takes over */
        if (!more) break;

        pthread_mutex_unlock(&s->mu);
        if (expired.count) finish_expired(&expired);
        if (batch.count) run_batch(w, &batch);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ------------------------------------------------------------ public API */

static int check_config(const attnd_sched_config *c, char *err, size_t errlen)
{
    const char *field = NULL, *rule = NULL;
    long long v = 0;
    if (c->max_batch_requests < 1) {
        field = "max_batch_requests"; rule = "at least 1"; v = c->max_batch_requests;
    } else if (c->max_batch_tokens < 1) {
        field = "max_batch_tokens"; rule = "at least 1"; v = (long long)c->max_batch_tokens;

    } else if (c->max_queue_delay_us < 0 || c->max_queue_delay_us > SCHED_MAX_DELAY_US) {
        field = "max_queue_delay_us"; rule = "between 0 and 3600000000 (one hour)";
        v = c->max_queue_delay_us;
    } else if (c->max_stream_wait_us < 0 || c->max_stream_wait_us > SCHED_MAX_DELAY_US) {
        field = "max_stream_wait_us"; rule = "between 0 and 3600000000 (one hour)";
        v = c->max_stream_wait_us;
    } else if (c->max_queue < 1) {
        field = "max_queue"; rule = "at least 1"; v = c->max_queue;
    } else if (c->workers < 1 || c->workers > SCHED_MAX_WORKERS) {
        field = "workers"; rule = "between 1 and 256"; v = c->workers;
    }
    if (field == NULL) return 0;
    if (err)
        snprintf(err, errlen, "scheduler: %s must be %s, got %lld", field, rule, v);
    return -1;
}

/* Stops the workers and joins them (drain_mu held). */
static void stop_and_join(attnd_scheduler *s)
{
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    pthread_cond_broadcast(&s->cv_queue);
    pthread_cond_broadcast(&s->cv_lead);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_started; i++) pthread_join(s->workers[i].thread, NULL);
    s->n_started = 0;
    s->joined = 1;
}

static void free_workers(attnd_scheduler *s)
{
    if (s->workers == NULL) return;
    for (int i = 0; i < s->cfg.workers; i++) {
        attn_workspace_free(s->workers[i].ws);
        attn_workspace_free(s->workers[i].ws_wide);
        free(s->workers[i].seqs);
    }
    free(s->workers);
    s->workers = NULL;
}

static int init_sync(attnd_scheduler *s)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return -1;
    int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&s->cv_queue, &ca);
    if (rc == 0 && (rc = pthread_cond_init(&s->cv_lead, NULL)) != 0)
        pthread_cond_destroy(&s->cv_queue);
    pthread_condattr_destroy(&ca);
    if (rc != 0) return -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->drain_mu, NULL);
    return 0;
}

static void destroy_sync(attnd_scheduler *s)
{
    pthread_cond_destroy(&s->cv_queue);
    pthread_cond_destroy(&s->cv_lead);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->drain_mu);
}

attnd_scheduler *attnd_scheduler_create(const attn_layer *layer, const attnd_sched_config *cfg,
                                        attnd_batch_hook hook, void *hook_ctx, char *err,
                                        size_t errlen)
{
    if (layer == NULL || cfg == NULL) {
        if (err) snprintf(err, errlen, "scheduler: no layer or config");
        return NULL;
    }
    if (check_config(cfg, err, errlen) != 0) return NULL;

    char why[128] = "out of memory";
    attnd_scheduler *s = calloc(1, sizeof *s);
    if (s == NULL) goto fail;
    s->layer = layer;
    s->cfg = *cfg;
    if (s->cfg.max_batch_kv_bytes == 0) s->cfg.max_batch_kv_bytes = SIZE_MAX;

    s->hook = hook;
    s->hook_ctx = hook_ctx;
    if (init_sync(s) != 0) {
        snprintf(why, sizeof why, "cannot initialise its locks");
        goto fail;
    }
    s->sync_ready = 1;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int cores = online > 1 && online <= SCHED_MAX_WORKERS ? (int)online : 1;
    s->workers = calloc((size_t)cfg->workers, sizeof *s->workers);
    if (s->workers == NULL) goto fail;
    for (int i = 0; i < cfg->workers; i++) {
        s->workers[i].s = s;
        if (attn_workspace_create(NULL, &s->workers[i].ws, NULL) != ATTN_OK) goto fail;
        if (cores > 1) {
            attn_workspace_options wide = {.n_threads = cores};
            if (attn_workspace_create(&wide, &s->workers[i].ws_wide, NULL) != ATTN_OK)
                goto fail;
        }
    }
    for (int i = 0; i < cfg->workers; i++) {
        int rc = pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]);
        if (rc != 0) {
            snprintf(why, sizeof why, "cannot start worker thread %d: %s", i, strerror(rc));
            goto fail;
        }
        s->n_started++;
    }
    return s;

fail:
    if (s) {
        if (s->sync_ready) stop_and_join(s);
        free_workers(s);
        if (s->sync_ready) destroy_sync(s);
        free(s);
    }
    if (err) snprintf(err, errlen, "scheduler: %s", why);
    return NULL;
}

attnd_submit_result attnd_scheduler_submit(attnd_scheduler *s, attnd_request *req)
{
    int64_t now = attnd_now_ns();
    pthread_mutex_lock(&s->mu);
    if (s->closing) {
        pthread_mutex_unlock(&s->mu);
        return ATTND_SUBMIT_CLOSED;
    }
    if (s->queue.count >= s->cfg.max_queue) {
        pthread_mutex_unlock(&s->mu);
        return ATTND_SUBMIT_FULL;
    }
    measure(s, req);
    req->outcome = ATTND_PENDING;
    req->enqueued_ns = now;
    if (req->timeout_ms <= 0) req->deadline_ns = 0;
    else if (req->timeout_ms > (INT64_MAX - now) / 1000000) req->deadline_ns = 0; /* never */
    else req->deadline_ns = now + req->timeout_ms * 1000000;
    list_push(&s->queue, req);
    pthread_cond_signal(&s->cv_queue); /* only the collector waits there */
    pthread_mutex_unlock(&s->mu);
    return ATTND_SUBMIT_OK;
}

int attnd_scheduler_queue_depth(attnd_scheduler *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->queue.count;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void attnd_scheduler_drain(attnd_scheduler *s)
{
    pthread_mutex_lock(&s->drain_mu);
    if (!s->joined) stop_and_join(s);
    pthread_mutex_unlock(&s->drain_mu);
}

void attnd_scheduler_free(attnd_scheduler *s)
{
    if (s == NULL) return;
    attnd_scheduler_drain(s);
    free_workers(s);
    destroy_sync(s);
    free(s);
}
