/* sessions.c — the streaming-session store (sessions.h): a hash table of
 * sessions by id, an LRU list, the byte budget, TTL expiry and a ring of
 * tombstones.
 *
 * Locking. One mutex guards the table, the LRU list, the counters, every
 * session's store-private fields and the (slot) fields' writes. Cache buffers
 * are touched without the lock, only by the holder of the session's append slot
 * (busy = 1), and a busy session is never evicted, expired or freed by anyone
 * else. Freeing (buffers, model reference) happens after the lock is dropped:
 * releasing the last reference to a model version joins its workers.
 */
#include "sessions.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "request.h" /* attnd_now_ns */

#define DEFAULT_TOMBSTONES 1024

struct attnd_sessions {
    attnd_sessions_config cfg;
    pthread_mutex_t mu;
    attnd_session **buckets;   /* n_buckets chains through hash_next           */
    size_t n_buckets;          /* a power of two                               */
    attnd_session *lru_head;   /* most recently used                           */
    attnd_session *lru_tail;   /* least recently used: evicted first           */
    int count;
    size_t bytes;
    char (*tomb)[ATTND_SESSION_ID_LEN]; /* ring of evicted ids                 */
    int tomb_cap, tomb_next, tomb_count;

    pthread_mutex_t sweep_mu;  /* guards stop; sweep_cv waits on it            */
    pthread_cond_t sweep_cv;
    int sweep_stop;
    int sweep_started;
    int sweep_interval_ms;
    pthread_t sweeper;
};

typedef enum unlink_reason { GONE_DELETE, GONE_LRU, GONE_TTL } unlink_reason;

/* ------------------------------------------------------------ small helpers */

/* Fills *err (which may be NULL) and returns r. */
__attribute__((format(printf, 4, 5))) static attnd_session_result
session_fail(attnd_session_error *err, attnd_session_result r, const char *field,
             const char *fmt, ...)
{
    if (!err)
        return r;
    err->result = r;
    snprintf(err->field, sizeof err->field, "%s", field);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return r;
}

/* Bytes of one cached element for params p (4 when unset: float32). */
static int elem_of(const attnd_session_params *p) { return p->elem_bytes > 0 ? p->elem_bytes : 4; }

/* The result a public function returns for rc (0 or -1 with *err filled). */
static attnd_session_result result_of(int rc, const attnd_session_error *err)
{
    return rc == 0 ? ATTND_SESSION_OK : err->result;
}

static int64_t now_ns(const attnd_sessions *st)
{
    return st->cfg.clock_ns ? st->cfg.clock_ns(st->cfg.clock_ctx) : attnd_now_ns();
}

/* 1 when id is exactly ATTND_SESSION_ID_LEN lowercase hex digits. */
static int id_valid(const char *id)
{
    size_t n = 0;
    for (; id[n] && n <= ATTND_SESSION_ID_LEN; n++)
        if (!((id[n] >= '0' && id[n] <= '9') || (id[n] >= 'a' && id[n] <= 'f')))
            return 0;
    return n == ATTND_SESSION_ID_LEN;
}

/* Ids are uniform random: their first 16 hex digits are a fine hash. */
static size_t id_hash(const attnd_sessions *st, const char *id)
{
    uint64_t h = 0;
    for (int i = 0; i < 16; i++)
        h = h << 4 | (uint64_t)(id[i] <= '9' ? id[i] - '0' : id[i] - 'a' + 10);
    return (size_t)h & (st->n_buckets - 1);
}

static size_t session_bytes(int cap, int row_k, int row_v, int elem)
{
    return sizeof(attnd_session) + (size_t)cap * ((size_t)row_k + (size_t)row_v) * (size_t)elem;
}

static void publish(attnd_sessions *st)
{
    if (st->cfg.metrics)
        attnd_metrics_sessions_set(st->cfg.metrics, st->count, (int64_t)st->bytes);
}

/* Frees a session and gives its model back. Called without the lock. */
static void destroy(attnd_sessions *st, attnd_session *s)
{
    free(s->cache_k);
    free(s->cache_v);
    if (st->cfg.release_model && s->model)
        st->cfg.release_model(s->model);
    free(s);
}

/* Destroys a list linked through hash_next (sessions unlinked under the lock). */
static void destroy_list(attnd_sessions *st, attnd_session *list)
{
    while (list) {
        attnd_session *next = list->hash_next;
        destroy(st, list);
        list = next;
    }
}

/* ------------------------------------------------------------ table, LRU, tombstones (mu held) */

static attnd_session *table_find(attnd_sessions *st, const char *id)
{
    for (attnd_session *s = st->buckets[id_hash(st, id)]; s; s = s->hash_next)
        if (memcmp(s->id, id, ATTND_SESSION_ID_LEN) == 0)
            return s;
    return NULL;
}

static void lru_unlink(attnd_sessions *st, attnd_session *s)
{
    if (s->lru_prev) s->lru_prev->lru_next = s->lru_next;
    else st->lru_head = s->lru_next;
    if (s->lru_next) s->lru_next->lru_prev = s->lru_prev;
    else st->lru_tail = s->lru_prev;
    s->lru_prev = s->lru_next = NULL;
}

static void lru_push_front(attnd_sessions *st, attnd_session *s)
{
    s->lru_prev = NULL;
    s->lru_next = st->lru_head;
    if (st->lru_head) st->lru_head->lru_prev = s;
    else st->lru_tail = s;
    st->lru_head = s;
}

static void tomb_add(attnd_sessions *st, const char *id)
{
    memcpy(st->tomb[st->tomb_next], id, ATTND_SESSION_ID_LEN);
    st->tomb_next = (st->tomb_next + 1) % st->tomb_cap;
    if (st->tomb_count < st->tomb_cap) st->tomb_count++;
}

static int tomb_has(const attnd_sessions *st, const char *id)
{
    for (int i = 0; i < st->tomb_count; i++)
        if (memcmp(st->tomb[i], id, ATTND_SESSION_ID_LEN) == 0)
            return 1;
    return 0;
}

/* Takes s out of the table, the LRU list and the counts. Evictions leave a
 * tombstone and count in the metrics. Returns s when the caller should destroy
 * it (after unlocking), NULL when its busy slot holder will. */
static attnd_session *unlink_session(attnd_sessions *st, attnd_session *s, unlink_reason why)
{
    attnd_session **pp = &st->buckets[id_hash(st, s->id)];
    while (*pp != s) pp = &(*pp)->hash_next;
    *pp = s->hash_next;
    s->hash_next = NULL;
    lru_unlink(st, s);
    st->count--;
    st->bytes -= s->bytes;
    if (why != GONE_DELETE) {
        tomb_add(st, s->id);
        if (st->cfg.metrics) attnd_metrics_session_evicted(st->cfg.metrics, why == GONE_TTL);
    }
    publish(st);
    if (s->busy) {
        s->removed = 1;
        return NULL;
    }
    return s;
}

static void push_free(attnd_session **list, attnd_session *s)
{
    if (!s) return;
    s->hash_next = *list;
    *list = s;
}

static int expired(const attnd_session *s, int64_t now)
{
    return !s->busy && now - s->last_used_ns > (int64_t)s->ttl_s * 1000000000;
}

/* Evicts the least recently used idle session other than keep. Returns 0, or
 * -1 when every other session is busy. */
static int evict_one(attnd_sessions *st, const attnd_session *keep, attnd_session **freelist)
{
    for (attnd_session *s = st->lru_tail; s; s = s->lru_prev) {
        if (s->busy || s == keep) continue;
        push_free(freelist, unlink_session(st, s, GONE_LRU));
        return 0;
    }
    return -1;
}

/* Evicts until `more` bytes fit in the budget. Returns 0, or -1 (with what was
 * evicted so far gone: the budget was over anyway). */
static int make_room(attnd_sessions *st, size_t more, const attnd_session *keep,
                     attnd_session **freelist)
{
    while (st->bytes + more > st->cfg.budget_bytes)
        if (evict_one(st, keep, freelist) != 0)
            return -1;
    return 0;
}

/* The live session id, or NULL with *err (404, or 410 for a tombstoned or now
 * expired one, which is unlinked into *freelist). */
static attnd_session *lookup(attnd_sessions *st, const char *id, int64_t now,
                             attnd_session **freelist, attnd_session_error *err)
{
    attnd_session *s = id_valid(id) ? table_find(st, id) : NULL;
    if (s && expired(s, now)) {
        push_free(freelist, unlink_session(st, s, GONE_TTL));
        s = NULL;
        session_fail(err, ATTND_SESSION_EXPIRED, "id",
                     "session %.32s expired (idle longer than its ttl_s)", id);
        return NULL;
    }
    if (s) return s;
    if (id_valid(id) && tomb_has(st, id))
        session_fail(err, ATTND_SESSION_EXPIRED, "id",
                     "session %.32s was evicted (idle past its ttl_s, or least recently "
                     "used when the KV cache budget or max_sessions was reached)", id);
    else
        session_fail(err, ATTND_SESSION_NOT_FOUND, "id", "no session %.40s", id);
    return NULL;
}

/* ------------------------------------------------------------ public API */

attnd_sessions *attnd_sessions_create(const attnd_sessions_config *cfg)
{
    if (!cfg || cfg->budget_bytes < 1 || cfg->max_sessions < 1 || cfg->ttl_s < 1 ||
        cfg->max_length < 1 || cfg->tombstones < 0)
        return NULL;
    attnd_sessions *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->cfg = *cfg;
    st->n_buckets = 64;
    while (st->n_buckets < (size_t)cfg->max_sessions * 2 && st->n_buckets < ((size_t)1 << 24))
        st->n_buckets *= 2;
    st->tomb_cap = cfg->tombstones ? cfg->tombstones : DEFAULT_TOMBSTONES;
    st->buckets = calloc(st->n_buckets, sizeof *st->buckets);
    st->tomb = calloc((size_t)st->tomb_cap, sizeof *st->tomb);
    if (!st->buckets || !st->tomb) goto fail;
    pthread_mutex_init(&st->mu, NULL);
    pthread_mutex_init(&st->sweep_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->sweep_cv, &ca);
    pthread_condattr_destroy(&ca);
    return st;
fail:
    free(st->buckets);
    free(st->tomb);
    free(st);
    return NULL;
}

void attnd_sessions_free(attnd_sessions *st)
{
    if (!st) return;
    if (st->sweep_started) {
        pthread_mutex_lock(&st->sweep_mu);
        st->sweep_stop = 1;
        pthread_cond_signal(&st->sweep_cv);
        pthread_mutex_unlock(&st->sweep_mu);
        pthread_join(st->sweeper, NULL);
    }
    attnd_session *s = st->lru_head;
    while (s) {
        attnd_session *next = s->lru_next;
        destroy(st, s);
        s = next;
    }
    st->count = 0;
    st->bytes = 0;
    publish(st);
    pthread_cond_destroy(&st->sweep_cv);
    pthread_mutex_destroy(&st->sweep_mu);
    pthread_mutex_destroy(&st->mu);
    free(st->buckets);
    free(st->tomb);
    free(st);
}

static void *sweeper_main(void *arg)
{
    attnd_sessions *st = arg;
    pthread_mutex_lock(&st->sweep_mu);
    while (!st->sweep_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t ns = (int64_t)ts.tv_nsec + (int64_t)st->sweep_interval_ms * 1000000;
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&st->sweep_cv, &st->sweep_mu, &ts);
        if (st->sweep_stop) break;
        pthread_mutex_unlock(&st->sweep_mu);
        attnd_sessions_sweep(st);
        pthread_mutex_lock(&st->sweep_mu);
    }
    pthread_mutex_unlock(&st->sweep_mu);
    return NULL;
}

int attnd_sessions_start_sweeper(attnd_sessions *st, int interval_ms)
{
    if (st->sweep_started || interval_ms < 1) return -1;
    st->sweep_interval_ms = interval_ms;
    if (pthread_create(&st->sweeper, NULL, sweeper_main, st) != 0) return -1;
    st->sweep_started = 1;
    return 0;
}

/* 16 bytes from getrandom(2) as 32 hex digits. Returns 0 or -1. */
static int new_id(char out[ATTND_SESSION_ID_LEN + 1])
{
    unsigned char raw[ATTND_SESSION_ID_LEN / 2];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno != EINTR) return -1;
        if (n > 0) got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

static int check_params(const attnd_sessions *st, const attnd_session_params *p,
                        attnd_session_error *err)
{
    if (p->row_k < 1 || p->row_v < 1)
        return session_fail(err, ATTND_SESSION_INTERNAL, "", "session rows need widths"), -1;
    if (p->ttl_s < 0)
        return session_fail(err, ATTND_SESSION_INVALID, "ttl_s",
                            "ttl_s must be >= 1, got %d", p->ttl_s), -1;
    if (p->kind == ATTND_SESSION_SELF && (p->window < 0 || p->window > st->cfg.max_length))
        return session_fail(err, ATTND_SESSION_INVALID, "window",
                            "window must be in 0..%d (max_seq_len), got %d",
                            st->cfg.max_length, p->window), -1;
    if (p->kind == ATTND_SESSION_CROSS && (p->rows < 1 || p->rows > st->cfg.max_length))
        return session_fail(err, ATTND_SESSION_TOO_LARGE, "key",
                            "a cross session's memory holds 1..%d rows (max_seq_len), "
                            "got %d", st->cfg.max_length, p->rows), -1;
    return 0;
}

/* A new session (not yet registered) with its buffers. NULL + *err on no memory. */
static attnd_session *new_session(const attnd_sessions *st, const attnd_session_params *p,
                                  attnd_session_error *err)
{
    attnd_session *s = calloc(1, sizeof *s);
    int rows = p->kind == ATTND_SESSION_CROSS ? p->rows : 0;
    if (s && rows > 0) {
        s->cache_k = malloc((size_t)rows * (size_t)p->row_k * (size_t)elem_of(p));
        s->cache_v = malloc((size_t)rows * (size_t)p->row_v * (size_t)elem_of(p));
    }
    if (!s || (rows > 0 && (!s->cache_k || !s->cache_v))) {
        if (s) {
            free(s->cache_k);
            free(s->cache_v);
        }
        free(s);
        session_fail(err, ATTND_SESSION_INTERNAL, "", "out of memory for a session");
        return NULL;
    }
    snprintf(s->model_name, sizeof s->model_name, "%s", p->model_name ? p->model_name : "");
    s->model = p->model;
    s->kind = p->kind;
    s->window = p->kind == ATTND_SESSION_SELF ? p->window : 0;
    s->ttl_s = p->ttl_s == 0 || p->ttl_s > st->cfg.ttl_s ? st->cfg.ttl_s : p->ttl_s;
    s->row_k = p->row_k;
    s->row_v = p->row_v;
    s->rows = rows;
    s->cap = rows;
    s->elem_bytes = elem_of(p);
    s->bytes = session_bytes(rows, p->row_k, p->row_v, s->elem_bytes);
    return s;
}

attnd_session_result attnd_sessions_open(attnd_sessions *st, const attnd_session_params *p,
                                         attnd_session **out, attnd_session_error *err)
{
    attnd_session_error local;
    if (!err)
        err = &local;
    *out = NULL;
    if (check_params(st, p, err) != 0) return err->result;
    int rows = p->kind == ATTND_SESSION_CROSS ? p->rows : 0;
    if (session_bytes(rows, p->row_k, p->row_v, elem_of(p)) > st->cfg.budget_bytes) {
        session_fail(err, ATTND_SESSION_TOO_LARGE, "key",
                     "the session's memory (%zu bytes) is over kv_cache_bytes (%zu)",
                     session_bytes(rows, p->row_k, p->row_v, elem_of(p)), st->cfg.budget_bytes);
        return err->result;
    }
    attnd_session *s = new_session(st, p, err), *freelist = NULL;
    if (!s) return err->result;
    int rc = -1;
    pthread_mutex_lock(&st->mu);
    do { /* ids are 128 random bits: a collision would mean a broken RNG */
        if (new_id(s->id) != 0) {
            session_fail(err, ATTND_SESSION_INTERNAL, "", "getrandom failed: %s",
                         strerror(errno));
            goto unlock;
        }
    } while (table_find(st, s->id));
    while (st->count >= st->cfg.max_sessions) {
        if (evict_one(st, NULL, &freelist) != 0) {
            session_fail(err, ATTND_SESSION_TOO_MANY, "",
                         "%d sessions exist (max_sessions) and every one has an append "
                         "in flight: retry later", st->count);
            goto unlock;
        }
    }
    if (make_room(st, s->bytes, NULL, &freelist) != 0) {
        session_fail(err, ATTND_SESSION_CACHE_FULL, "",
                     "the KV cache budget (%zu bytes) is held by sessions with appends "
                     "in flight: retry later", st->cfg.budget_bytes);
        goto unlock;
    }
    size_t b = id_hash(st, s->id);
    s->hash_next = st->buckets[b];
    st->buckets[b] = s;
    lru_push_front(st, s);
    s->busy = 1;
    s->last_used_ns = now_ns(st);
    st->count++;
    st->bytes += s->bytes;
    publish(st);
    *out = s;
    rc = 0;
unlock:
    pthread_mutex_unlock(&st->mu);
    destroy_list(st, freelist);
    if (rc != 0) {
        s->model = NULL; /* still the caller's */
        destroy(st, s);
    }
    return result_of(rc, err);
}

attnd_session_result attnd_sessions_acquire(attnd_sessions *st, const char *id,
                                            attnd_session **out, attnd_session_error *err)
{
    attnd_session_error local;
    if (!err)
        err = &local;
    attnd_session *freelist = NULL;
    *out = NULL;
    pthread_mutex_lock(&st->mu);
    int64_t now = now_ns(st);
    attnd_session *s = lookup(st, id, now, &freelist, err);
    if (s && s->busy) {
        session_fail(err, ATTND_SESSION_BUSY, "id",
                     "session %s has an append in flight; appends to one session run "
                     "one at a time: wait for its answer", s->id);
        s = NULL;
    }
    if (s) {
        s->busy = 1;
        s->last_used_ns = now;
        lru_unlink(st, s);
        lru_push_front(st, s);
        *out = s;
    }
    pthread_mutex_unlock(&st->mu);
    destroy_list(st, freelist);
    return s ? ATTND_SESSION_OK : err->result;
}

/* Windowed self session: when t more rows would not fit, keeps only the last
 * window-1 rows (all a new position can still see), moved to the front. */
static void compact_window(attnd_sessions *st, attnd_session *s, int t)
{
    if (s->window == 0 || s->rows + t <= s->cap) return;
    int keep = s->rows < s->window - 1 ? s->rows : s->window - 1;
    if (keep < s->rows) {
        size_t from = (size_t)(s->rows - keep), e = (size_t)s->elem_bytes;
        char *k = (char *)s->cache_k, *v = (char *)s->cache_v;
        memmove(k, k + from * (size_t)s->row_k * e, (size_t)keep * (size_t)s->row_k * e);
        memmove(v, v + from * (size_t)s->row_v * e, (size_t)keep * (size_t)s->row_v * e);
    }
    pthread_mutex_lock(&st->mu);
    s->rows = keep;
    pthread_mutex_unlock(&st->mu);
}

/* The capacity to grow to for need rows: doubling from 16, up to max_length
 * positions (unbounded) or 2 * window rows (a windowed session then moves its
 * last window-1 rows to the front about once per window + 1 positions). */
static int grown_cap(const attnd_sessions *st, const attnd_session *s, int need)
{
    int64_t want = 2 * (int64_t)s->cap;
    if (want < 16) want = 16;
    int64_t most = s->window ? 2 * (int64_t)s->window : st->cfg.max_length;
    if (want > most) want = most;
    if (want < need) want = need;
    if (session_bytes((int)want, s->row_k, s->row_v, s->elem_bytes) > st->cfg.budget_bytes)
        want = need;
    return (int)want;
}

/* Counts s at `bytes` (its size after growing) against the budget, evicting
 * other idle sessions as needed. Returns 0, or -1 with *err. */
static int account_growth(attnd_sessions *st, attnd_session *s, size_t bytes,
                          attnd_session_error *err)
{
    attnd_session *freelist = NULL;
    int rc = -1;
    pthread_mutex_lock(&st->mu);
    if (s->removed) {
        session_fail(err, ATTND_SESSION_NOT_FOUND, "id", "session %s was deleted",
                     s->id);
    } else if (bytes > st->cfg.budget_bytes) {
        session_fail(err, ATTND_SESSION_TOO_LARGE, "query",
                     "the session would need %zu bytes of KV cache, over "
                     "kv_cache_bytes (%zu)", bytes, st->cfg.budget_bytes);
    } else if (make_room(st, bytes - s->bytes, s, &freelist) != 0) {
        session_fail(err, ATTND_SESSION_CACHE_FULL, "",
                     "the KV cache budget (%zu bytes) is held by sessions with appends "
                     "in flight: retry later", st->cfg.budget_bytes);
    } else {
        st->bytes += bytes - s->bytes;
        s->bytes = bytes;
        publish(st);
        rc = 0;
    }
    pthread_mutex_unlock(&st->mu);
    destroy_list(st, freelist);
    return rc;
}

/* Grows s's buffers to cap rows (slot held, growth already counted). On no
 * memory the cache keeps its old capacity and the count goes back: -1 + *err. */
static int grow_buffers(attnd_sessions *st, attnd_session *s, int cap, attnd_session_error *err)
{
    const size_t e = (size_t)s->elem_bytes;
    float *k = realloc(s->cache_k, (size_t)cap * (size_t)s->row_k * e);
    if (k) s->cache_k = k;
    float *v = k ? realloc(s->cache_v, (size_t)cap * (size_t)s->row_v * e) : NULL;
    if (v) s->cache_v = v;
    pthread_mutex_lock(&st->mu);
    if (k && v) {
        s->cap = cap;
    } else { /* the old buffers (or a bigger k) still hold cap rows */
        size_t old = session_bytes(s->cap, s->row_k, s->row_v, s->elem_bytes);
        if (!s->removed) st->bytes -= s->bytes - old;
        s->bytes = old;
        publish(st);
    }
    pthread_mutex_unlock(&st->mu);
    if (k && v) return 0;
    session_fail(err, ATTND_SESSION_INTERNAL, "",
                 "out of memory growing the session's KV cache to %d rows", cap);
    return -1;
}

attnd_session_result attnd_sessions_reserve(attnd_sessions *st, attnd_session *s, int t,
                                            attnd_session_error *err)
{
    attnd_session_error local;
    if (!err)
        err = &local;
    if (s->kind == ATTND_SESSION_CROSS) return ATTND_SESSION_OK;
    if (s->window == 0 && s->length + t > st->cfg.max_length) {
        session_fail(err, ATTND_SESSION_TOO_LARGE, "query",
                     "the session would hold %lld positions; an unbounded session "
                     "holds at most max_seq_len = %d (create it with a window to "
                     "stream further)", (long long)(s->length + t), st->cfg.max_length);
        return err->result;
    }
    compact_window(st, s, t);
    int need = s->rows + t;
    if (need <= s->cap) return ATTND_SESSION_OK;
    int cap = grown_cap(st, s, need);
    if (account_growth(st, s, session_bytes(cap, s->row_k, s->row_v, s->elem_bytes), err) != 0)
        return err->result;
    return result_of(grow_buffers(st, s, cap, err), err);
}

void attnd_sessions_release(attnd_sessions *st, attnd_session *s, int committed,
                            int64_t *length, int *rows)
{
    pthread_mutex_lock(&st->mu);
    if (committed > 0) {
        if (s->kind == ATTND_SESSION_SELF) s->rows += committed;
        s->length += committed;
    }
    if (length) *length = s->length;
    if (rows) *rows = s->rows;
    s->busy = 0;
    s->last_used_ns = now_ns(st);
    int gone = s->removed;
    if (!gone) {
        lru_unlink(st, s);
        lru_push_front(st, s);
    }
    pthread_mutex_unlock(&st->mu);
    if (gone) destroy(st, s);
}

/* The snapshot GET and the list report. */
static void fill_info(const attnd_session *s, int64_t now, attnd_session_info *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->id, s->id, sizeof out->id);
    memcpy(out->model_name, s->model_name, sizeof out->model_name);
    out->kind = s->kind;
    out->window = s->window;
    out->ttl_s = s->ttl_s;
    out->rows = s->rows;
    out->length = s->length;
    out->bytes = s->bytes;
    out->busy = s->busy;
    out->idle_s =
        s->busy || now < s->last_used_ns ? 0.0 : (double)(now - s->last_used_ns) / 1e9;
}

attnd_session_result attnd_sessions_get(attnd_sessions *st, const char *id,
                                        attnd_session_info *out, attnd_session_error *err)
{
    attnd_session_error local;
    if (!err)
        err = &local;
    attnd_session *freelist = NULL;
    pthread_mutex_lock(&st->mu);
    int64_t now = now_ns(st);
    attnd_session *s = lookup(st, id, now, &freelist, err);
    if (s)
        fill_info(s, now, out);
    pthread_mutex_unlock(&st->mu);
    destroy_list(st, freelist);
    return s ? ATTND_SESSION_OK : err->result;
}

attnd_session_result attnd_sessions_delete(attnd_sessions *st, const char *id,
                                           attnd_session_error *err)
{
    attnd_session_error local;
    if (!err)
        err = &local;
    attnd_session *freelist = NULL;
    pthread_mutex_lock(&st->mu);
    attnd_session *s = lookup(st, id, now_ns(st), &freelist, err);
    if (s) push_free(&freelist, unlink_session(st, s, GONE_DELETE));
    pthread_mutex_unlock(&st->mu);
    destroy_list(st, freelist);
    return s ? ATTND_SESSION_OK : err->result;
}

attnd_session_result attnd_sessions_fork(attnd_sessions *st, const char *id,
                                         attnd_session **out, attnd_session_error *err)
{
    attnd_session_error local;
    if (!err)
        err = &local;
    *out = NULL;
    attnd_session *parent = NULL, *child = NULL;
    attnd_session_result r = attnd_sessions_acquire(st, id, &parent, err);
    if (r != ATTND_SESSION_OK)
        return r;
    attnd_session_params p = {
        .kind = parent->kind,
        .window = parent->window,
        .ttl_s = parent->ttl_s,
        .row_k = parent->row_k,
        .row_v = parent->row_v,
        .elem_bytes = parent->elem_bytes,
        .rows = parent->kind == ATTND_SESSION_CROSS ? parent->rows : 0,
        .model_name = parent->model_name,
        .model = parent->model,
    };
    r = attnd_sessions_open(st, &p, &child, err);
    if (r == ATTND_SESSION_OK && parent->kind == ATTND_SESSION_SELF && parent->rows > 0)
        r = attnd_sessions_reserve(st, child, parent->rows, err);
    if (r == ATTND_SESSION_OK) {
        /* Both slots are held: nobody else touches either cache now. (An empty
         * parent has no buffers: memcpy must not see their NULLs.) */
        if (parent->rows > 0) {
            memcpy(child->cache_k, parent->cache_k,
                   (size_t)parent->rows * (size_t)parent->row_k * (size_t)parent->elem_bytes);
            memcpy(child->cache_v, parent->cache_v,
                   (size_t)parent->rows * (size_t)parent->row_v * (size_t)parent->elem_bytes);
        }
        pthread_mutex_lock(&st->mu);
        child->rows = parent->rows;
        child->length = parent->length;
        child->query_limit = parent->query_limit; /* a cross memory's bound comes along */
        if (st->cfg.retain_model && child->model)
            st->cfg.retain_model(child->model);
        pthread_mutex_unlock(&st->mu);
        *out = child;
    } else if (child) {
        char cid[ATTND_SESSION_ID_LEN + 1];
        memcpy(cid, child->id, sizeof cid);
        pthread_mutex_lock(&st->mu);
        child->model = NULL; /* it never took a reference */
        pthread_mutex_unlock(&st->mu);
        attnd_sessions_release(st, child, 0, NULL, NULL);
        attnd_sessions_delete(st, cid, NULL);
    }
    attnd_sessions_release(st, parent, 0, NULL, NULL);
    return r;
}


static int by_id(const void *a, const void *b)
{
    return strcmp(((const attnd_session_info *)a)->id, ((const attnd_session_info *)b)->id);
}

attnd_session_result attnd_sessions_list(attnd_sessions *st, const char *after, int cap,
                                         attnd_session_info *out, int *n, int *total,
                                         attnd_session_error *err)
{
    *n = 0;
    pthread_mutex_lock(&st->mu);
    int count = st->count, k = 0;
    attnd_session_info *all = count ? malloc((size_t)count * sizeof *all) : NULL;
    if (count && !all) {
        pthread_mutex_unlock(&st->mu);
        return session_fail(err, ATTND_SESSION_INTERNAL, "", "out of memory listing sessions");
    }
    int64_t now = now_ns(st);
    for (attnd_session *s = st->lru_head; s && k < count; s = s->lru_next)
        fill_info(s, now, &all[k++]);
    pthread_mutex_unlock(&st->mu);
    if (k > 1) /* all is NULL when there are none: qsort must not see it */
        qsort(all, (size_t)k, sizeof *all, by_id);
    for (int i = 0; i < k && *n < cap; i++)
        if (!after || strcmp(all[i].id, after) > 0)
            out[(*n)++] = all[i];
    *total = k;
    free(all);
    return ATTND_SESSION_OK;
}

int attnd_sessions_sweep(attnd_sessions *st)
{
    attnd_session *freelist = NULL;
    int n = 0;
    pthread_mutex_lock(&st->mu);
    int64_t now = now_ns(st);
    attnd_session *s = st->lru_tail;
    while (s) {
        attnd_session *prev = s->lru_prev;
        if (expired(s, now)) {
            push_free(&freelist, unlink_session(st, s, GONE_TTL));
            n++;
        }
        s = prev;
    }
    pthread_mutex_unlock(&st->mu);
    destroy_list(st, freelist);
    return n;
}

void attnd_sessions_stats(attnd_sessions *st, int *count, size_t *bytes)
{
    pthread_mutex_lock(&st->mu);
    if (count) *count = st->count;
    if (bytes) *bytes = st->bytes;
    pthread_mutex_unlock(&st->mu);
}
