/* sessions.c — the streaming-session store (sessions.h): a hash table of
 * sessions by id, an LRU list, the page pool with each session's block table,
 * TTL expiry and a ring of tombstones.
 *
 * Locking. One mutex guards the table, the LRU list, the counters, the page
 * pool (allocation and reference counts), every session's store-private
 * fields and the (slot) fields' writes. Page contents are touched without the
 * lock: a session's compute (by the holder of its append slot, busy = 1) reads
 * its pages and writes only rows past its length, into blocks it alone
 * references (reserve copies a shared one first); a busy session is never
 * evicted, expired or freed by anyone else. Freeing the table and the model
 * reference happens after the lock is dropped: releasing the last reference to
 * a model version joins its workers.
 */
#include "engine/sessions.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "engine/kvpool.h"
#include "core/request.h" /* attnd_now_ns */

#define DEFAULT_TOMBSTONES 1024

struct attnd_sessions {
    attnd_sessions_config cfg;
    pthread_mutex_t mu;
    attnd_session **buckets;   /* n_buckets chains through hash_next           */
    size_t n_buckets;          /* a power of two                               */
    attnd_session *lru_head;   /* most recently used                           */
    attnd_session *lru_tail;   /* least recently used: evicted first           */
    int count;
    attnd_kvpool *pool;
    char (*tomb)[ATTND_SESSION_ID_MAX + 1]; /* ring of evicted ids             */
    char prefix[ATTND_REPLICA_NAME_MAX + 2]; /* "NAME." or "": every id's start */
    size_t prefix_len;
    int tomb_cap, tomb_next, tomb_count;

    pthread_mutex_t sweep_mu;  /* guards stop; sweep_cv waits on it            */
    pthread_cond_t sweep_cv;
    int sweep_stop;
    int sweep_started;
    int sweep_interval_ms;
    pthread_t sweeper;
};

typedef enum unlink_reason { GONE_DELETE, GONE_LRU, GONE_TTL, GONE_RETIRED } unlink_reason;

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

/* The result a public function returns for rc (0 or -1 with *err filled). */
static attnd_session_result result_of(int rc, const attnd_session_error *err)
{
    return rc == 0 ? ATTND_SESSION_OK : err->result;
}

static int64_t now_ns(const attnd_sessions *st)
{
    return st->cfg.clock_ns ? st->cfg.clock_ns(st->cfg.clock_ctx) : attnd_now_ns();
}

/* 1 when id is this store's prefix then exactly ATTND_SESSION_ID_HEX lowercase
 * hex digits (an id another replica made is not valid here). */
static int id_valid(const attnd_sessions *st, const char *id)
{
    if (strncmp(id, st->prefix, st->prefix_len) != 0)
        return 0;
    id += st->prefix_len;
    size_t n = 0;
    for (; id[n] && n <= ATTND_SESSION_ID_HEX; n++)
        if (!((id[n] >= '0' && id[n] <= '9') || (id[n] >= 'a' && id[n] <= 'f')))
            return 0;
    return n == ATTND_SESSION_ID_HEX;
}

/* The random part is uniform: its first 16 hex digits are a fine hash. */
static size_t id_hash(const attnd_sessions *st, const char *id)
{
    uint64_t h = 0;
    id += st->prefix_len;
    for (int i = 0; i < 16; i++)
        h = h << 4 | (uint64_t)(id[i] <= '9' ? id[i] - '0' : id[i] - 'a' + 10);
    return (size_t)h & (st->n_buckets - 1);
}

/* Pool bytes referenced by sessions (mu held). */
static size_t used_bytes(const attnd_sessions *st)
{
    return (size_t)(attnd_kvpool_pages(st->pool) - attnd_kvpool_free_pages(st->pool)) *
           attnd_kvpool_page_bytes(st->pool);
}

static void publish(attnd_sessions *st)
{
    if (st->cfg.metrics)
        attnd_metrics_sessions_set(st->cfg.metrics, st->count, (int64_t)used_bytes(st));
}

/* Blocks needed for rows rows of s. */
static int blocks_for(const attnd_session *s, int64_t rows)
{
    return (int)((rows + s->block_rows - 1) / s->block_rows);
}

/* Gives back the pages of s's blocks [from, n_blocks) (mu held). */
static void drop_blocks(attnd_sessions *st, attnd_session *s, int from)
{
    for (int b = from; b < s->n_blocks; b++)
        attnd_kvpool_release(st->pool, s->blocks[b]);
    if (from < s->n_blocks) s->n_blocks = from;
}

/* Gives back every page of s: its own, and each of its layers' (mu held). */
static void drop_all(attnd_sessions *st, attnd_session *s)
{
    drop_blocks(st, s, 0);
    for (int l = 0; l < s->n_layers; l++)
        drop_blocks(st, &s->layers[l], 0);
}

/* Pages s and its layers reference (mu held). */
static int n_pages(const attnd_session *s)
{
    int n = s->n_blocks;
    for (int l = 0; l < s->n_layers; l++)
        n += s->layers[l].n_blocks;
    return n;
}

/* Room in s's table for n blocks (mu held). Returns 0, or -1 (no memory). */
static int table_room(attnd_session *s, int n)
{
    if (n <= s->blocks_cap) return 0;
    int cap = s->blocks_cap ? s->blocks_cap : 8;
    while (cap < n) cap = cap > INT32_MAX / 2 ? n : 2 * cap;
    int32_t *t = realloc(s->blocks, (size_t)cap * sizeof *t);
    if (!t) return -1;
    s->blocks = t;
    s->blocks_cap = cap;
    return 0;
}

/* Frees a session (its pages already given back) and gives its model back.
 * Called without the lock. */
static void destroy(attnd_sessions *st, attnd_session *s)
{
    for (int l = 0; l < s->n_layers; l++) {
        free(s->layers[l].blocks);
        if (st->cfg.release_model && s->layers[l].model)
            st->cfg.release_model(s->layers[l].model);
    }
    free(s->layers);
    free(s->blocks);
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
        if (strcmp(s->id, id) == 0)
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
    snprintf(st->tomb[st->tomb_next], sizeof st->tomb[0], "%s", id);
    st->tomb_next = (st->tomb_next + 1) % st->tomb_cap;
    if (st->tomb_count < st->tomb_cap) st->tomb_count++;
}

static int tomb_has(const attnd_sessions *st, const char *id)
{
    for (int i = 0; i < st->tomb_count; i++)
        if (strcmp(st->tomb[i], id) == 0)
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
    if (!s->busy) drop_all(st, s); /* a busy one's go at its release */
    if (why != GONE_DELETE) {
        tomb_add(st, s->id);
        if (st->cfg.metrics)
            attnd_metrics_session_evicted(st->cfg.metrics, why == GONE_TTL       ? ATTND_EVICT_TTL
                                                           : why == GONE_RETIRED ? ATTND_EVICT_RETIRED
                                                                                 : ATTND_EVICT_LRU);
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

/* Evicts until `pages` pages are free. Returns 0, or -1 (with what was
 * evicted so far gone: the pool was full anyway). Evicting a session whose
 * pages are all shared frees none, so this may take several. */
static int make_room(attnd_sessions *st, int pages, const attnd_session *keep,
                     attnd_session **freelist)
{
    while (attnd_kvpool_free_pages(st->pool) < pages)
        if (evict_one(st, keep, freelist) != 0)
            return -1;
    return 0;
}

static attnd_session_result pool_full(const attnd_sessions *st, attnd_session_error *err)
{
    return session_fail(err, ATTND_SESSION_CACHE_FULL, "",
                        "the KV cache (%d pages of %zu bytes, kv_cache_bytes) is held by sessions "
                        "with appends in flight: retry later", attnd_kvpool_pages(st->pool),
                        attnd_kvpool_page_bytes(st->pool));
}

/* Appends n fresh pages to s's table (mu held, n pages free). Returns 0, or -1
 * with *err (no memory for the table). */
static int take_blocks(attnd_sessions *st, attnd_session *s, int n, attnd_session_error *err)
{
    if (table_room(s, s->n_blocks + n) != 0)
        return session_fail(err, ATTND_SESSION_INTERNAL, "", "out of memory for a block table"), -1;
    for (int i = 0; i < n; i++)
        attnd_kvpool_alloc(st->pool, &s->blocks[s->n_blocks++]);
    return 0;
}

/* The live session id, or NULL with *err (404, or 410 for a tombstoned or now
 * expired one, which is unlinked into *freelist). */
static attnd_session *lookup(attnd_sessions *st, const char *id, int64_t now,
                             attnd_session **freelist, attnd_session_error *err)
{
    attnd_session *s = id_valid(st, id) ? table_find(st, id) : NULL;
    if (s && expired(s, now)) {
        push_free(freelist, unlink_session(st, s, GONE_TTL));
        s = NULL;
        session_fail(err, ATTND_SESSION_EXPIRED, "id",
                     "session %s expired (idle longer than its ttl_s)", id);
        return NULL;
    }
    if (s) return s;
    if (id_valid(st, id) && tomb_has(st, id))
        session_fail(err, ATTND_SESSION_EXPIRED, "id",
                     "session %.80s was evicted (idle past its ttl_s, least recently used "
                     "when the KV cache or max_sessions was full, or its model version was "
                     "replaced and old versions held more than max_retired_bytes)", id);
    else
        session_fail(err, ATTND_SESSION_NOT_FOUND, "id", "no session %.80s", id);
    return NULL;
}

/* ------------------------------------------------------------ public API */

attnd_sessions *attnd_sessions_create(const attnd_sessions_config *cfg, char *err, size_t errlen)
{
    if (!cfg || cfg->max_sessions < 1 || cfg->ttl_s < 1 || cfg->max_length < 1 || cfg->tombstones < 0 ||
        (cfg->replica_name && *cfg->replica_name && !attnd_replica_name_valid(cfg->replica_name))) {
        snprintf(err, errlen, "session store: bad configuration");
        return NULL;
    }
    attnd_sessions *st = calloc(1, sizeof *st);
    if (!st) {
        snprintf(err, errlen, "session store: out of memory");
        return NULL;
    }
    st->cfg = *cfg;
    st->cfg.replica_name = NULL; /* the caller's string: only the copy below stays */
    if (cfg->replica_name && *cfg->replica_name)
        st->prefix_len = (size_t)snprintf(st->prefix, sizeof st->prefix, "%s.", cfg->replica_name);
    st->pool = attnd_kvpool_create(cfg->budget_bytes, cfg->page_bytes, err, errlen);
    if (!st->pool) {
        free(st);
        return NULL;
    }
    st->n_buckets = 64;
    while (st->n_buckets < (size_t)cfg->max_sessions * 2 && st->n_buckets < ((size_t)1 << 24))
        st->n_buckets *= 2;
    st->tomb_cap = cfg->tombstones ? cfg->tombstones : DEFAULT_TOMBSTONES;
    st->buckets = calloc(st->n_buckets, sizeof *st->buckets);
    st->tomb = calloc((size_t)st->tomb_cap, sizeof *st->tomb);
    if (!st->buckets || !st->tomb) {
        snprintf(err, errlen, "session store: out of memory");
        goto fail;
    }
    pthread_mutex_init(&st->mu, NULL);
    pthread_mutex_init(&st->sweep_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->sweep_cv, &ca);
    pthread_condattr_destroy(&ca);
    return st;
fail:
    attnd_kvpool_free(st->pool);
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
        drop_all(st, s);
        destroy(st, s);
        s = next;
    }
    st->count = 0;
    publish(st);
    attnd_kvpool_free(st->pool);
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

/* The store's prefix, then 16 bytes from getrandom(2) as 32 hex digits.
 * Returns 0 or -1. */
static int new_id(const attnd_sessions *st, char out[ATTND_SESSION_ID_MAX + 1])
{
    unsigned char raw[ATTND_SESSION_ID_HEX / 2];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno != EINTR) return -1;
        if (n > 0) got += (size_t)n;
    }
    memcpy(out, st->prefix, st->prefix_len);
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(out + st->prefix_len + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

static int check_params(const attnd_sessions *st, const attnd_session_params *p,
                        attnd_session_error *err)
{
    if (p->block_rows < 1 || (p->block_rows & (p->block_rows - 1)) != 0 || p->k_block_bytes < 4 ||
        p->v_block_bytes < 4 || p->k_block_bytes % 4 != 0 ||
        p->k_block_bytes + p->v_block_bytes > attnd_kvpool_page_bytes(st->pool))
        return session_fail(err, ATTND_SESSION_INTERNAL, "",
                            "a block of %d rows (%zu + %zu bytes) does not fit a KV page of %zu bytes",
                            p->block_rows, p->k_block_bytes, p->v_block_bytes,
                            attnd_kvpool_page_bytes(st->pool)), -1;
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

/* Fills the fixed fields of a zeroed session from p. */
static void init_session(const attnd_sessions *st, attnd_session *s, const attnd_session_params *p)
{
    int rows = p->kind == ATTND_SESSION_CROSS ? p->rows : 0;
    snprintf(s->model_name, sizeof s->model_name, "%s", p->model_name ? p->model_name : "");
    s->model = p->model;
    s->kind = p->kind;
    s->window = p->kind == ATTND_SESSION_SELF ? p->window : 0;
    s->ttl_s = p->ttl_s == 0 || p->ttl_s > st->cfg.ttl_s ? st->cfg.ttl_s : p->ttl_s;
    s->block_rows = p->block_rows;
    s->k_block_bytes = p->k_block_bytes;
    s->block_bytes = p->k_block_bytes + p->v_block_bytes;
    s->rows = rows;
}

/* A new session (not yet registered, no pages yet): with n_layers > 0 (lp[l]
 * each layer's), a sequence named group_name whose head's fields are lp[0]'s.
 * NULL + *err on no memory. */
static attnd_session *new_session(const attnd_sessions *st, const attnd_session_params *p,
                                  const attnd_session_params *lp, int n_layers,
                                  const char *group_name, attnd_session_error *err)
{
    attnd_session *s = calloc(1, sizeof *s);
    attnd_session *layers = n_layers > 0 ? calloc((size_t)n_layers, sizeof *layers) : NULL;
    if (!s || (n_layers > 0 && !layers)) {
        free(s);
        free(layers);
        session_fail(err, ATTND_SESSION_INTERNAL, "", "out of memory for a session");
        return NULL;
    }
    init_session(st, s, p);
    if (n_layers > 0) {
        snprintf(s->model_name, sizeof s->model_name, "%s", group_name ? group_name : "");
        s->model = NULL;
        s->layers = layers;
        s->n_layers = n_layers;
        for (int l = 0; l < n_layers; l++) {
            attnd_session_params one = lp[l];
            one.window = p->window; /* the sequence's, on every layer */
            one.ttl_s = p->ttl_s;
            init_session(st, &layers[l], &one);
            layers[l].group = s;
            layers[l].layer = l;
        }
    }
    return s;
}

/* Opens a session as attnd_sessions_open says; with_pages = 0 (a fork, which
 * will share its parent's) takes no pages for a cross memory. */
static attnd_session_result open_any(attnd_sessions *st, const attnd_session_params *p,
                                     int with_pages, const attnd_session_params *lp, int n_layers,
                                     const char *group_name, attnd_session **out,
                                     attnd_session_error *err)
{
    attnd_session_error local;
    if (!err)
        err = &local;
    *out = NULL;
    if (check_params(st, p, err) != 0) return err->result;
    if (n_layers < 0 || n_layers > ATTND_SESSION_LAYERS_MAX)
        return session_fail(err, ATTND_SESSION_INVALID, "layers",
                            "a sequence session holds 1..%d layers, got %d",
                            ATTND_SESSION_LAYERS_MAX, n_layers);
    for (int l = 0; l < n_layers; l++) {
        if (lp[l].kind != ATTND_SESSION_SELF)
            return session_fail(err, ATTND_SESSION_INVALID, "key",
                                "a sequence session's layers are self-attention streams");
        attnd_session_params one = lp[l];
        one.window = p->window;
        one.ttl_s = p->ttl_s;
        if (check_params(st, &one, err) != 0) return err->result;
    }
    const int rows = p->kind == ATTND_SESSION_CROSS && with_pages ? p->rows : 0;
    const int pages = (int)(((int64_t)rows + p->block_rows - 1) / p->block_rows);
    if (pages > attnd_kvpool_pages(st->pool)) {
        session_fail(err, ATTND_SESSION_TOO_LARGE, "key",
                     "the session's memory needs %d KV pages of %zu bytes; the whole cache "
                     "(kv_cache_bytes) has %d", pages, attnd_kvpool_page_bytes(st->pool),
                     attnd_kvpool_pages(st->pool));
        return err->result;
    }
    attnd_session *s = new_session(st, p, lp, n_layers, group_name, err), *freelist = NULL;
    if (!s) return err->result;
    int rc = -1;
    pthread_mutex_lock(&st->mu);
    do { /* ids are 128 random bits: a collision would mean a broken RNG */
        if (new_id(st, s->id) != 0) {
            session_fail(err, ATTND_SESSION_INTERNAL, "", "getrandom failed: %s",
                         strerror(errno));
            goto unlock;
        }
    } while (table_find(st, s->id));
    for (int l = 0; l < s->n_layers; l++)
        memcpy(s->layers[l].id, s->id, sizeof s->id); /* a member answers in its head's name */
    while (st->count >= st->cfg.max_sessions) {
        if (evict_one(st, NULL, &freelist) != 0) {
            session_fail(err, ATTND_SESSION_TOO_MANY, "",
                         "%d sessions exist (max_sessions) and every one has an append "
                         "in flight: retry later", st->count);
            goto unlock;
        }
    }
    if (make_room(st, pages, NULL, &freelist) != 0) {
        pool_full(st, err);
        goto unlock;
    }
    if (take_blocks(st, s, pages, err) != 0)
        goto unlock;
    size_t b = id_hash(st, s->id);
    s->hash_next = st->buckets[b];
    st->buckets[b] = s;
    lru_push_front(st, s);
    s->busy = 1;
    s->last_used_ns = now_ns(st);
    st->count++;
    publish(st);
    *out = s;
    rc = 0;
unlock:
    if (rc != 0) drop_all(st, s);
    pthread_mutex_unlock(&st->mu);
    destroy_list(st, freelist);
    if (rc != 0) {
        s->model = NULL; /* still the caller's */
        for (int l = 0; l < s->n_layers; l++)
            s->layers[l].model = NULL;
        destroy(st, s);
    }
    return result_of(rc, err);
}

static attnd_session_result open_session(attnd_sessions *st, const attnd_session_params *p,
                                         int with_pages, attnd_session **out, attnd_session_error *err)
{
    return open_any(st, p, with_pages, NULL, 0, NULL, out, err);
}

attnd_session_result attnd_sessions_open_group(attnd_sessions *st, const attnd_session_params *p,
                                               int n_layers, const char *group_name,
                                               attnd_session **out, attnd_session_error *err)
{
    attnd_session_error local;
    if (!err)
        err = &local;
    *out = NULL;
    if (n_layers < 1 || n_layers > ATTND_SESSION_LAYERS_MAX)
        return session_fail(err, ATTND_SESSION_INVALID, "layers",
                            "a sequence session holds 1..%d layers, got %d",
                            ATTND_SESSION_LAYERS_MAX, n_layers);
    attnd_session_params head = p[0];
    head.model = NULL;
    head.model_name = group_name;
    return open_any(st, &head, 1, p, n_layers, group_name, out, err);
}

attnd_session_result attnd_sessions_open(attnd_sessions *st, const attnd_session_params *p,
                                         attnd_session **out, attnd_session_error *err)
{
    return open_session(st, p, 1, out, err);
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

/* Windowed self session: gives back the leading blocks no new position can
 * see. The next query stands at row s->rows and sees rows > rows - window, so
 * every row below rows - window + 1 is dead; whole dead blocks go (mu held). */
static void drop_dead_blocks(attnd_sessions *st, attnd_session *s)
{
    if (s->window == 0 || s->rows - s->window + 1 < s->block_rows) return;
    const int dead = (s->rows - s->window + 1) / s->block_rows;
    for (int b = 0; b < dead; b++)
        attnd_kvpool_release(st->pool, s->blocks[b]);
    memmove(s->blocks, s->blocks + dead, (size_t)(s->n_blocks - dead) * sizeof *s->blocks);
    s->n_blocks -= dead;
    s->rows -= dead * s->block_rows;
}

/* 1 when the rows an append writes start inside a block another session
 * shares (a fork's partly filled last block): it must be copied first. */
static int shared_tail(const attnd_sessions *st, const attnd_session *s)
{
    return s->rows % s->block_rows != 0 &&
           attnd_kvpool_refs(st->pool, s->blocks[s->rows / s->block_rows]) > 1;
}

/* Gives s a page of its own for its partly filled last block, with the same
 * contents (mu held, one page free). Its other sharers only read the old page. */
static void copy_tail(attnd_sessions *st, attnd_session *s)
{
    const int b = s->rows / s->block_rows;
    int32_t fresh;
    attnd_kvpool_alloc(st->pool, &fresh);
    char *base = attnd_kvpool_base(st->pool);
    const size_t page = attnd_kvpool_page_bytes(st->pool);
    memcpy(base + (size_t)fresh * page, base + (size_t)s->blocks[b] * page, s->block_bytes);
    attnd_kvpool_release(st->pool, s->blocks[b]);
    s->blocks[b] = fresh;
}

/* The pages for t more rows of s (mu held): dead blocks back, then new ones
 * (and a private copy of a shared tail), evicting idle sessions to make room.
 * Returns 0, or -1 with *err; the cache is unchanged on failure but for dead
 * blocks given back. */
static int grow_blocks(attnd_sessions *st, attnd_session *s, int t, attnd_session **freelist,
                       attnd_session_error *err)
{
    drop_dead_blocks(st, s);
    const int need = blocks_for(s, (int64_t)s->rows + t), cow = shared_tail(st, s);
    const int pages = need - s->n_blocks + cow;
    if (need > attnd_kvpool_pages(st->pool))
        return session_fail(err, ATTND_SESSION_TOO_LARGE, "query",
                            "the session would need %d KV pages of %zu bytes; the whole cache "
                            "(kv_cache_bytes) has %d", need, attnd_kvpool_page_bytes(st->pool),
                            attnd_kvpool_pages(st->pool)), -1;
    int total = need; /* a sequence's layers are evicted together: they must fit together */
    for (int l = 0; s->group && l < s->group->n_layers; l++)
        if (&s->group->layers[l] != s) total += s->group->layers[l].n_blocks;
    if (total > attnd_kvpool_pages(st->pool))
        return session_fail(err, ATTND_SESSION_TOO_LARGE, "query",
                            "the sequence would need %d KV pages of %zu bytes over its %d layers; "
                            "the whole cache (kv_cache_bytes) has %d", total,
                            attnd_kvpool_page_bytes(st->pool), s->group->n_layers,
                            attnd_kvpool_pages(st->pool)), -1;
    if (pages <= 0) return 0;
    if (table_room(s, need) != 0)
        return session_fail(err, ATTND_SESSION_INTERNAL, "", "out of memory for a block table"), -1;
    if (make_room(st, pages, s, freelist) != 0)
        return pool_full(st, err), -1;
    if (cow) copy_tail(st, s);
    return take_blocks(st, s, need - s->n_blocks, err);
}

attnd_session_result attnd_sessions_reserve(attnd_sessions *st, attnd_session *s, int t,
                                            attnd_session_error *err)
{
    attnd_session_error local;
    if (!err)
        err = &local;
    if (s->kind == ATTND_SESSION_CROSS) return ATTND_SESSION_OK;
    attnd_session *h = s->group ? s->group : s;
    if (s->group && s->layer > 0 && s->length + t > h->layers[s->layer - 1].length) {
        session_fail(err, ATTND_SESSION_OUT_OF_ORDER, "layer",
                     "layer %d would hold %lld positions, more than layer %d's %lld: a "
                     "sequence's layers are appended in order (layer %d first)", s->layer,
                     (long long)(s->length + t), s->layer - 1,
                     (long long)h->layers[s->layer - 1].length, s->layer - 1);
        return err->result;
    }
    if (s->window == 0 && s->length + t > st->cfg.max_length) {
        session_fail(err, ATTND_SESSION_TOO_LARGE, "query",
                     "the session would hold %lld positions; an unbounded session "
                     "holds at most max_seq_len = %d (create it with a window to "
                     "stream further)", (long long)(s->length + t), st->cfg.max_length);
        return err->result;
    }
    attnd_session *freelist = NULL;
    int rc = -1;
    pthread_mutex_lock(&st->mu);
    if (h->removed)
        session_fail(err, ATTND_SESSION_NOT_FOUND, "id", "session %s was deleted", s->id);
    else
        rc = grow_blocks(st, s, t, &freelist, err);
    publish(st);
    pthread_mutex_unlock(&st->mu);
    destroy_list(st, freelist);
    return result_of(rc, err);
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
    if (s->group) s = s->group; /* the slot, the LRU place and the life are the head's */
    s->busy = 0;
    s->last_used_ns = now_ns(st);
    if (s->evict_on_release && !s->removed) { /* its model version was retired meanwhile */
        unlink_session(st, s, GONE_RETIRED);   /* not busy now: its pages go at once */
        s->removed = 1;                        /* and it is freed below */
    }
    int gone = s->removed;
    if (!gone) {
        lru_unlink(st, s);
        lru_push_front(st, s);
    } else {
        drop_all(st, s);
        publish(st);
    }
    pthread_mutex_unlock(&st->mu);
    if (gone) destroy(st, s);
}

/* The snapshot GET and the list report (mu held). */
static void fill_info(const attnd_sessions *st, const attnd_session *s, int64_t now,
                      attnd_session_info *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->id, s->id, sizeof out->id);
    memcpy(out->model_name, s->model_name, sizeof out->model_name);
    out->kind = s->kind;
    out->window = s->window;
    out->ttl_s = s->ttl_s;
    out->rows = s->rows;
    out->length = s->length;
    out->blocks = n_pages(s);
    for (int b = 0; b < s->n_blocks; b++)
        out->shared_blocks += attnd_kvpool_refs(st->pool, s->blocks[b]) > 1;
    out->n_layers = s->n_layers;
    for (int l = 0; l < s->n_layers; l++) {
        const attnd_session *m = &s->layers[l];
        for (int b = 0; b < m->n_blocks; b++)
            out->shared_blocks += attnd_kvpool_refs(st->pool, m->blocks[b]) > 1;
    }
    if (s->n_layers > 0) {
        out->length = s->layers[s->n_layers - 1].length;
        out->rows = s->layers[s->n_layers - 1].rows;
    }
    out->bytes = (size_t)out->blocks * attnd_kvpool_page_bytes(st->pool);
    out->busy = s->busy;
    out->idle_s =
        s->busy || now < s->last_used_ns ? 0.0 : (double)(now - s->last_used_ns) / 1e9;
}

attnd_session_result attnd_sessions_get(attnd_sessions *st, const char *id,
                                        attnd_session_info *out, attnd_session_error *err)
{
    return attnd_sessions_get_layers(st, id, out, NULL, NULL, 0, err);
}

attnd_session_result attnd_sessions_get_layers(attnd_sessions *st, const char *id,
                                               attnd_session_info *out, int64_t *length,
                                               int *rows, int cap, attnd_session_error *err)
{
    attnd_session_error local;
    if (!err)
        err = &local;
    attnd_session *freelist = NULL;
    pthread_mutex_lock(&st->mu);
    int64_t now = now_ns(st);
    attnd_session *s = lookup(st, id, now, &freelist, err);
    if (s)
        fill_info(st, s, now, out);
    for (int l = 0; s && l < s->n_layers && l < cap; l++) {
        length[l] = s->layers[l].length;
        rows[l] = s->layers[l].rows;
    }
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

/* The child shares parent's pages (mu held, child's table has room): its
 * table, rows, length and bound, and a reference to its model. */
static void share_cache(attnd_sessions *st, attnd_session *child, const attnd_session *parent)
{
    for (int b = 0; b < parent->n_blocks; b++)
        attnd_kvpool_retain(st->pool, child->blocks[b] = parent->blocks[b]);
    child->n_blocks = parent->n_blocks;
    child->rows = parent->rows;
    child->length = parent->length;
    child->query_limit = parent->query_limit; /* a cross memory's bound comes along */
    if (st->cfg.retain_model && child->model)
        st->cfg.retain_model(child->model);
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
    attnd_session_params *lp = NULL;
    if (parent->n_layers > 0 && !(lp = calloc((size_t)parent->n_layers, sizeof *lp))) {
        attnd_sessions_release(st, parent, 0, NULL, NULL);
        return session_fail(err, ATTND_SESSION_INTERNAL, "", "out of memory for a fork");
    }
    for (int l = 0; l < parent->n_layers; l++) {
        const attnd_session *m = &parent->layers[l];
        lp[l] = (attnd_session_params){
            .kind = m->kind, .window = m->window, .ttl_s = m->ttl_s, .block_rows = m->block_rows,
            .k_block_bytes = m->k_block_bytes, .v_block_bytes = m->block_bytes - m->k_block_bytes,
            .model_name = m->model_name, .model = m->model};
    }
    attnd_session_params p = {
        .kind = parent->kind,
        .window = parent->window,
        .ttl_s = parent->ttl_s,
        .block_rows = parent->block_rows,
        .k_block_bytes = parent->k_block_bytes,
        .v_block_bytes = parent->block_bytes - parent->k_block_bytes,
        .rows = parent->kind == ATTND_SESSION_CROSS ? parent->rows : 0,
        .model_name = parent->model_name,
        .model = parent->model,
    };
    /* no pages: it shares the parent's */
    r = open_any(st, &p, 0, lp, parent->n_layers, parent->model_name, &child, err);
    free(lp);
    if (r == ATTND_SESSION_OK) {
        pthread_mutex_lock(&st->mu);
        int room = table_room(child, parent->n_blocks) == 0;
        for (int l = 0; l < parent->n_layers && room; l++)
            room = table_room(&child->layers[l], parent->layers[l].n_blocks) == 0;
        if (room) {
            share_cache(st, child, parent);
            for (int l = 0; l < parent->n_layers; l++)
                share_cache(st, &child->layers[l], &parent->layers[l]);
            *out = child;
        } else {
            r = session_fail(err, ATTND_SESSION_INTERNAL, "", "out of memory for a block table");
        }
        pthread_mutex_unlock(&st->mu);
    }
    if (r != ATTND_SESSION_OK && child) {
        char cid[ATTND_SESSION_ID_MAX + 1];
        memcpy(cid, child->id, sizeof cid);
        pthread_mutex_lock(&st->mu);
        child->model = NULL; /* it never took a reference */
        for (int l = 0; l < child->n_layers; l++)
            child->layers[l].model = NULL;
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
        fill_info(st, s, now, &all[k++]);
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

int attnd_sessions_evict_model(attnd_sessions *st, const void *model)
{
    attnd_session *freelist = NULL;
    int n = 0;
    pthread_mutex_lock(&st->mu);
    for (attnd_session *s = st->lru_tail, *prev; s; s = prev) {
        prev = s->lru_prev;
        int holds = s->model == model;
        for (int l = 0; l < s->n_layers && !holds; l++)
            holds = s->layers[l].model == model;
        if (!holds) continue;
        n++;
        if (s->busy) s->evict_on_release = 1;
        else push_free(&freelist, unlink_session(st, s, GONE_RETIRED));
    }
    pthread_mutex_unlock(&st->mu);
    destroy_list(st, freelist);
    return n;
}

void attnd_sessions_stats(attnd_sessions *st, int *count, size_t *bytes, size_t *capacity)
{
    pthread_mutex_lock(&st->mu);
    if (count) *count = st->count;
    if (bytes) *bytes = used_bytes(st);
    if (capacity) *capacity = (size_t)attnd_kvpool_pages(st->pool) * attnd_kvpool_page_bytes(st->pool);
    pthread_mutex_unlock(&st->mu);
}

size_t attnd_sessions_page_bytes(const attnd_sessions *st) { return attnd_kvpool_page_bytes(st->pool); }

void attnd_sessions_kv(const attnd_sessions *st, const attnd_session *s, attnd_session_kv *out)
{
    char *base = attnd_kvpool_base(st->pool);
    out->k = base;
    out->v = base + s->k_block_bytes;
    out->stride = attnd_kvpool_page_bytes(st->pool);
    out->block_rows = s->block_rows;
    out->table = s->blocks;
}

/* ------------------------------------------------------------ saving and restoring */

int attnd_sessions_foreach(attnd_sessions *st,
                           int (*fn)(void *ctx, const attnd_sessions *st, const attnd_session *s,
                                     int64_t idle_ns),
                           void *ctx)
{
    int n = 0;
    pthread_mutex_lock(&st->mu);
    int64_t now = now_ns(st);
    for (attnd_session *s = st->lru_head; s; s = s->lru_next) {
        if (s->busy || s->removed || expired(s, now)) continue;
        n++;
        if (fn(ctx, st, s, now > s->last_used_ns ? now - s->last_used_ns : 0) != 0) break;
    }
    pthread_mutex_unlock(&st->mu);
    return n;
}

const char *attnd_sessions_id_prefix(const attnd_sessions *st) { return st->prefix; }

static void lru_push_back(attnd_sessions *st, attnd_session *s)
{
    s->lru_next = NULL;
    s->lru_prev = st->lru_tail;
    if (st->lru_tail) st->lru_tail->lru_next = s;
    else st->lru_head = s;
    st->lru_tail = s;
}

/* 1 when img fits cache s: its blocks hold its rows, its length holds them,
 * a cross memory keeps its rows. */
static int image_fits(const attnd_session *s, const attnd_session_image *img, int max_length)
{
    if (img->n_blocks < 0 || img->rows < 0 || img->length < 0 || !(img->data || !img->n_blocks) ||
        (s->kind == ATTND_SESSION_SELF && img->length < img->rows))
        return 0;
    if ((int64_t)img->n_blocks * s->block_rows < img->rows) /* more blocks than rows: a failed
                                                                  append's room, kept */
        return 0;
    if (s->kind == ATTND_SESSION_SELF && s->window == 0 && img->length > max_length) return 0;
    if (s->kind == ATTND_SESSION_CROSS && (img->rows != s->rows || img->rows < 1)) return 0;
    return 1;
}

/* Fills cache s from img (mu held, pages free). */
static void fill_image(attnd_sessions *st, attnd_session *s, const attnd_session_image *img)
{
    char *base = attnd_kvpool_base(st->pool);
    const size_t page = attnd_kvpool_page_bytes(st->pool);
    for (int b = 0; b < img->n_blocks; b++) {
        attnd_kvpool_alloc(st->pool, &s->blocks[s->n_blocks]);
        memcpy(base + (size_t)s->blocks[s->n_blocks] * page, img->data + (size_t)b * s->block_bytes,
               s->block_bytes);
        s->n_blocks++;
    }
    s->rows = img->rows;
    s->length = img->length;
}

attnd_session_result attnd_sessions_restore(attnd_sessions *st, const char *id,
                                            const attnd_session_params *p,
                                            const attnd_session_params *lp, int n_layers,
                                            const attnd_session_image *img, float query_limit,
                                            int64_t idle_ns, attnd_session_error *err)
{
    attnd_session_error local;
    if (!err)
        err = &local;
    if (!id_valid(st, id))
        return session_fail(err, ATTND_SESSION_INVALID, "id",
                            "id %.80s is not one of this replica's (prefix \"%s\")", id, st->prefix);
    if (check_params(st, p, err) != 0) return err->result;
    if (n_layers < 0 || n_layers > ATTND_SESSION_LAYERS_MAX)
        return session_fail(err, ATTND_SESSION_INVALID, "layers", "%d layers", n_layers);
    for (int l = 0; l < n_layers; l++) {
        attnd_session_params one = lp[l];
        one.window = p->window;
        one.ttl_s = p->ttl_s;
        if (lp[l].kind != ATTND_SESSION_SELF || check_params(st, &one, err) != 0)
            return session_fail(err, ATTND_SESSION_INVALID, "layers", "layer %d does not fit", l);
    }
    attnd_session *s = new_session(st, p, lp, n_layers, p->model_name, err);
    if (!s) return err->result;
    int pages = 0, rc = -1;
    for (int c = 0; c < (n_layers ? n_layers : 1); c++) {
        attnd_session *m = n_layers ? &s->layers[c] : s;
        if (!image_fits(m, &img[c], st->cfg.max_length) || table_room(m, img[c].n_blocks) != 0) {
            session_fail(err, ATTND_SESSION_INVALID, "layers",
                         "cache %d: %d blocks of %d rows for %d rows and length %lld do not fit "
                         "the session", c, img[c].n_blocks, m->block_rows, img[c].rows,
                         (long long)img[c].length);
            goto out;
        }
        pages += img[c].n_blocks;
    }
    pthread_mutex_lock(&st->mu);
    if (table_find(st, id)) {
        session_fail(err, ATTND_SESSION_INVALID, "id", "session %.80s exists already", id);
    } else if (st->count >= st->cfg.max_sessions) {
        session_fail(err, ATTND_SESSION_TOO_MANY, "", "%d sessions exist (max_sessions)", st->count);
    } else if (attnd_kvpool_free_pages(st->pool) < pages) {
        session_fail(err, ATTND_SESSION_CACHE_FULL, "",
                     "it needs %d KV pages, %d of %d are free (kv_cache_bytes)", pages,
                     attnd_kvpool_free_pages(st->pool), attnd_kvpool_pages(st->pool));
    } else {
        snprintf(s->id, sizeof s->id, "%s", id);
        for (int l = 0; l < s->n_layers; l++)
            memcpy(s->layers[l].id, s->id, sizeof s->id);
        if (n_layers)
            for (int l = 0; l < n_layers; l++)
                fill_image(st, &s->layers[l], &img[l]);
        else
            fill_image(st, s, &img[0]);
        s->query_limit = query_limit;
        size_t b = id_hash(st, s->id);
        s->hash_next = st->buckets[b];
        st->buckets[b] = s;
        lru_push_back(st, s);
        s->last_used_ns = now_ns(st) - idle_ns;
        st->count++;
        publish(st);
        rc = 0;
    }
    pthread_mutex_unlock(&st->mu);
out:
    if (rc != 0) {
        s->model = NULL; /* still the caller's */
        for (int l = 0; l < s->n_layers; l++)
            s->layers[l].model = NULL;
        destroy(st, s);
    }
    return result_of(rc, err);
}
