/* sessions.h — the streaming-session store: 128-bit random ids, the KV cache each
 * session holds as a table of blocks in one page pool (kvpool.h), one append
 * slot per session, LRU eviction when the pool or the session count cap is
 * full, TTL expiry (on access and by a sweep thread), copy-on-write forks, and
 * tombstones that tell an evicted id (EXPIRED) from an unknown one
 * (NOT_FOUND). No HTTP and no JSON here: functions return attnd_session_result,
 * and handler_session.c, the wire side, maps results to statuses. Thread-safe.
 *
 * The KV cache of a session: logical row i (of K and of V) is row i % B of
 * block i / B, and block b lives in pool page blocks[b]: its K rows at the
 * page's start, its V rows k_block_bytes further, in the layout attn.h's "KV
 * cache layouts" gives for the model's dtype (attnd_sessions_kv gives the
 * attn_seq view: pool base, stride = page bytes). A session grows a block at
 * a time and never moves a row; only its last block is ever partly filled. A
 * fork copies the table and shares every page (reference counts); whoever
 * first appends into a shared partly filled block copies that one page. A
 * page is counted once however many sessions share it; the pool's pages are
 * the whole budget.
 *
 * Life of a session: attnd_sessions_open registers it with its append slot held
 * by the caller (who fills a cross-attention memory, then releases). Each append
 * acquires the slot (attnd_sessions_acquire: BUSY when taken), makes room
 * (attnd_sessions_reserve), computes into the cache outside any lock, and
 * releases with the number of positions to commit (0 when the compute failed).
 * A session whose slot is held is never evicted or expired; deleting it unlinks
 * it at once and the slot holder's release frees it.
 */
#ifndef ATTND_SESSIONS_H
#define ATTND_SESSIONS_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h" /* ATTND_REPLICA_NAME_MAX, attnd_replica_name_valid */
#include "core/metrics.h"

/* A session id is 128 random bits as 32 lowercase hex digits, after "NAME." when
 * the store has a replica name (a gateway in front of several replicas routes on
 * it): "r1.0f3a…". NAME is 1..ATTND_REPLICA_NAME_MAX of [a-z0-9-], starting and
 * ending with a letter or digit (a DNS label: Kubernetes pod names fit). */
#define ATTND_SESSION_ID_HEX 32
#define ATTND_SESSION_ID_MAX (ATTND_REPLICA_NAME_MAX + 1 + ATTND_SESSION_ID_HEX) /* longest */

typedef enum attnd_session_kind {
    ATTND_SESSION_SELF = 0,  /* causal self-attention stream: appends grow the cache  */
    ATTND_SESSION_CROSS = 1  /* fixed memory projected at creation; appends only read */
} attnd_session_kind;

/* One session. Fields marked (fixed) never change after open; (slot) fields are
 * written only by the holder of the append slot, and read by others only under
 * the store's lock; the rest is store-private. */
typedef struct attnd_session {
    char id[ATTND_SESSION_ID_MAX + 1];       /* (fixed) [NAME.]hex, NUL-terminated      */
    char model_name[80];                     /* (fixed)                                 */
    void *model;                             /* (fixed) the owner's model reference,
                                                given back through cfg.release_model    */
    attnd_session_kind kind;                 /* (fixed)                                 */
    int window;                              /* (fixed) self: keep the last window
                                                positions; 0 = keep all                 */
    int ttl_s;                               /* (fixed) idle seconds before expiry      */
    int block_rows;                          /* (fixed) rows per block, a power of two  */
    size_t k_block_bytes;                    /* (fixed) bytes of a block's K rows: its V
                                                rows start this far into the page      */
    size_t block_bytes;                      /* (fixed) K + V bytes of a block          */
    float query_limit;                       /* (fixed) cross: the largest |query| number an
                                                append may carry, set by the creator before
                                                it releases the slot (0 until then)     */
    int32_t *blocks;                         /* (slot) block table: the page of each block */
    int n_blocks;                            /* (slot) blocks in the table              */
    int blocks_cap;                          /* (slot) entries allocated                */
    int rows;                                /* (slot) rows held in the cache           */
    int64_t length;                          /* (slot) positions appended in total      */

    /* store-private */
    int busy;                                /* the append slot is held                 */
    int removed;                             /* unlinked while busy: release frees it   */
    int evict_on_release;                    /* evicted while busy (retired model)      */
    int64_t last_used_ns;
    struct attnd_session *lru_prev, *lru_next, *hash_next;

    /* A sequence session (a model group's, attnd_sessions_open_group): n_layers
     * member caches in layers[], each an attnd_session of its own for its
     * layer (model, fixed fields, block table, rows, length) that is never in
     * the table or the LRU list. The head (this) holds the id, the TTL, the
     * LRU place and the one append slot of the whole sequence; its own cache
     * is empty and model NULL. Appends name a member (attnd_sessions_layer):
     * reserve and release take a member and act on its head for the rest. */
    struct attnd_session *layers;            /* (fixed) n_layers members, or NULL      */
    int n_layers;                            /* (fixed) 0: a single-layer session      */
    struct attnd_session *group;             /* (fixed) a member's head; NULL: a head  */
    int layer;                               /* (fixed) a member's index in its group  */
} attnd_session;

/* The most layers a sequence session holds. */
#define ATTND_SESSION_LAYERS_MAX 256

/* Member l of sequence session s (0 <= l < s->n_layers), or NULL (s is a
 * single-layer session, or l out of range). */
static inline attnd_session *attnd_sessions_layer(attnd_session *s, int l)
{
    return s->n_layers > 0 && l >= 0 && l < s->n_layers ? &s->layers[l] : NULL;
}

typedef struct attnd_sessions_config {
    size_t budget_bytes;       /* the page pool: KV memory of all sessions together  */
    size_t page_bytes;         /* one page (a block of K and V rows), a multiple of 4 */
    int max_sessions;          /* >= 1                                               */
    int ttl_s;                 /* default and maximum idle time, >= 1                */
    int max_length;            /* unbounded self sessions: total positions, >= 1     */
    int tombstones;            /* evicted ids remembered (answer 410), 0 = 1024      */
    /* Clock (CLOCK_MONOTONIC ns); NULL = attnd_now_ns. Tests inject their own. */
    int64_t (*clock_ns)(void *ctx);
    void *clock_ctx;
    /* Called (outside the lock) with session->model when a session is freed; may be NULL. */
    void (*release_model)(void *model);
    /* Called (under the lock) to take one more reference for a fork; may be NULL. */
    void (*retain_model)(void *model);
    attnd_metrics *metrics;    /* sessions / bytes gauges and eviction counters; may be NULL */
    const char *replica_name;  /* NULL or "": bare hex ids; else ids are NAME.hex (copied) */
} attnd_sessions_config;

typedef struct attnd_sessions attnd_sessions;

/* What a store call answered. Append-only. */
typedef enum attnd_session_result {
    ATTND_SESSION_OK = 0,
    ATTND_SESSION_NOT_FOUND,   /* no session with this id (or it was deleted)        */
    ATTND_SESSION_EXPIRED,     /* evicted, or idle past its TTL                      */
    ATTND_SESSION_BUSY,        /* its append slot is held by another append          */
    ATTND_SESSION_INVALID,     /* a parameter out of range (err->field names it)     */
    ATTND_SESSION_TOO_LARGE,   /* more than the whole pool or max_length alone       */
    ATTND_SESSION_CACHE_FULL,  /* no room now: the pool is held by busy sessions     */
    ATTND_SESSION_TOO_MANY,    /* max_sessions exist and every one is busy           */
    ATTND_SESSION_INTERNAL,    /* out of memory, no entropy, or a caller's bug       */
    ATTND_SESSION_OUT_OF_ORDER /* a sequence's layer would pass the layer before it  */
} attnd_session_result;

/* The detail of a result other than OK: the parameter to blame ("id", "ttl_s",
 * "window", "key" for a memory, "query" for an append; "" when none) and a
 * sentence for the client. Functions taking one fill it on failure (NULL ok). */
typedef struct attnd_session_error {
    attnd_session_result result;
    char field[32];
    char message[320];
} attnd_session_error;

/* What open needs. */
typedef struct attnd_session_params {
    attnd_session_kind kind;
    int window;                /* self only; 0 = unbounded; 0 <= window <= max_length */
    int ttl_s;                 /* 0 = the default; larger than cfg.ttl_s is capped   */
    int block_rows;            /* rows per block: a power of two, >= 1               */
    size_t k_block_bytes;      /* bytes of a block of K rows and of V rows; together */
    size_t v_block_bytes;      /* at most the pool's page bytes                      */
    int rows;                  /* cross: memory rows (allocated now); self: 0        */
    const char *model_name;
    void *model;               /* handed back to release_model when freed            */
} attnd_session_params;

/* A snapshot for GET. */
typedef struct attnd_session_info {
    char id[ATTND_SESSION_ID_MAX + 1];
    char model_name[80];
    attnd_session_kind kind;
    int window, ttl_s;
    int rows;                  /* cached rows                                        */
    int64_t length;
    int blocks;                /* pages its table references                         */
    int shared_blocks;         /* of those, pages another session references too     */
    size_t bytes;              /* blocks * page bytes (shared pages included)        */
    double idle_s;
    int busy;
    /* A sequence session: its layers (0 = a single-layer session); length and
     * rows above are then its last layer's (the positions every layer holds),
     * each layer's come from attnd_sessions_get_layers. */
    int n_layers;
} attnd_session_info;

/* Creates a store and maps its page pool. Returns NULL with err on a bad
 * config or no memory. Free with attnd_sessions_free. */
attnd_sessions *attnd_sessions_create(const attnd_sessions_config *cfg, char *err, size_t errlen);

/* Stops the sweeper, frees every session (releasing its model). No append may
 * be in flight. NULL allowed. */
void attnd_sessions_free(attnd_sessions *st);

/* Starts a thread that expires idle sessions every interval_ms. Returns 0 or -1. */
int attnd_sessions_start_sweeper(attnd_sessions *st, int interval_ms);

/* Registers a new session with a fresh id (getrandom), its append slot held by
 * the caller, evicting least recently used idle sessions to fit the budget and
 * the count cap. A cross session's memory (p->rows rows) is allocated,
 * uninitialised: fill it, then release with 0. Returns OK and *out; or INVALID
 * (bad params), TOO_LARGE (the session alone is over the budget, or a memory
 * over max_length), CACHE_FULL / TOO_MANY (every other session is busy),
 * INTERNAL (no memory or no entropy), with *err. On failure p->model is NOT
 * released (still the caller's). */
attnd_session_result attnd_sessions_open(attnd_sessions *st, const attnd_session_params *p,
                                         attnd_session **out, attnd_session_error *err);

/* Registers a new sequence session of n_layers layers (1..ATTND_SESSION_LAYERS_MAX)
 * with a fresh id, its append slot held by the caller (release it with 0): p[l]
 * describes layer l's cache (self only; window and ttl_s are p[0]'s for all;
 * model_name = the group's name in group_name). Evicts as open does; the
 * session's budget is the sum of its layers' pages, and it is evicted, expired,
 * forked and deleted whole. Returns as open; on failure no p[l].model is
 * released (still the caller's); on success each member holds its p[l].model. */
attnd_session_result attnd_sessions_open_group(attnd_sessions *st, const attnd_session_params *p,
                                               int n_layers, const char *group_name,
                                               attnd_session **out, attnd_session_error *err);

/* Takes the append slot of session id. Returns OK and *out; or NOT_FOUND,
 * EXPIRED (evicted or expired; an idle session past its TTL is expired here),
 * BUSY, with *err. */
attnd_session_result attnd_sessions_acquire(attnd_sessions *st, const char *id,
                                            attnd_session **out, attnd_session_error *err);

/* Makes room for t more rows (slot held; s a single-layer session, or a
 * member of a sequence whose head's slot is held: then OUT_OF_ORDER when layer
 * l would hold more positions than layer l-1, field "layer"). */
/* Makes room for t more rows (slot held). Self windowed sessions first give
 * back their leading blocks that no new position can see (every row older
 * than the last window-1; positions are relative, so causal + window stay
 * right); unbounded ones grow up to max_length positions in total. New blocks
 * come from the pool, evicting least recently used idle sessions when it is
 * full; a shared last block that the rows will go into is copied first. Cross
 * sessions need no room. Returns OK, or TOO_LARGE, CACHE_FULL, NOT_FOUND
 * (deleted meanwhile), INTERNAL (no memory) with *err; the cache is still
 * valid either way. */
attnd_session_result attnd_sessions_reserve(attnd_sessions *st, attnd_session *s, int t,
                                            attnd_session_error *err);

/* Gives the append slot back (s a session, or a member of a sequence: the
 * commit goes to the member, the slot is its head's). committed > 0: the compute succeeded and wrote t
 * = committed new rows (self: rows and length advance; cross: length advances).
 * *length and *rows (each may be NULL) get the values after the commit. Frees
 * the session if it was deleted meanwhile: s is invalid after this call. */
void attnd_sessions_release(attnd_sessions *st, attnd_session *s, int committed,
                            int64_t *length, int *rows);

/* Snapshot of session id. Returns OK, or NOT_FOUND / EXPIRED as acquire (an
 * expired idle session is expired here too). Does not count as use. */
attnd_session_result attnd_sessions_get(attnd_sessions *st, const char *id,
                                        attnd_session_info *out, attnd_session_error *err);

/* attnd_sessions_get, and a sequence's layers' lengths and cached rows (the
 * first cap of them) into length[] and rows[], read at the same instant. */
attnd_session_result attnd_sessions_get_layers(attnd_sessions *st, const char *id,
                                               attnd_session_info *out, int64_t *length,
                                               int *rows, int cap, attnd_session_error *err);

/* Deletes session id (a busy one is unlinked now and freed by its slot holder).
 * Returns OK, or NOT_FOUND / EXPIRED. */
attnd_session_result attnd_sessions_delete(attnd_sessions *st, const char *id,
                                           attnd_session_error *err);

/* Forks session id: a new session sharing its cache pages (copy-on-write),
 * with its length and settings (kind, window, ttl_s), which then lives on its
 * own — appends to one never change the other's answers. The child holds its
 * own reference to the parent's model (cfg.retain_model). Returns OK and *out
 * with the child's append slot held by the caller (release it with 0); or,
 * with *err, what acquire returns for the parent (NOT_FOUND, EXPIRED, BUSY:
 * the parent is read under its slot) and what open returns for the child
 * (TOO_MANY, INTERNAL). A fork takes no pages until it appends. */
attnd_session_result attnd_sessions_fork(attnd_sessions *st, const char *id,
                                         attnd_session **out, attnd_session_error *err);

/* A page of sessions in id order: those with id > after ("" = from the start),
 * at most cap of them, into out; *n gets how many, *total how many exist.
 * Returns OK, or INTERNAL (no memory). Does not count as use. */
attnd_session_result attnd_sessions_list(attnd_sessions *st, const char *after, int cap,
                                         attnd_session_info *out, int *n, int *total,
                                         attnd_session_error *err);

/* Evicts every session holding model (a retired version): idle ones now,
 * busy ones when their append releases (their answer still comes). Their ids
 * answer EXPIRED. Returns how many sessions held it. */
int attnd_sessions_evict_model(attnd_sessions *st, const void *model);

/* Expires every idle session past its TTL. Returns how many. */
int attnd_sessions_sweep(attnd_sessions *st);

/* Sessions and pool bytes in use now (pages referenced by any session x page
 * bytes), and the pool's size; each may be NULL. */
void attnd_sessions_stats(attnd_sessions *st, int *count, size_t *bytes, size_t *capacity);

/* The page size of the pool (fixed at creation). */
size_t attnd_sessions_page_bytes(const attnd_sessions *st);

/* Where session s's cache lives, for attn_seq (cache_k = k, cache_v = v,
 * cache_block_stride = stride, cache_block_rows = block_rows,
 * cache_block_table = table). The slot holder's view: valid until its
 * release or next reserve. */
typedef struct attnd_session_kv {
    void *k, *v;
    size_t stride;
    int block_rows;
    const int32_t *table;
} attnd_session_kv;
void attnd_sessions_kv(const attnd_sessions *st, const attnd_session *s, attnd_session_kv *out);

/* ---- saving and restoring (persist.c, --session-dir) ---- */

/* Calls fn for every live idle session, most recently used first, under the
 * store's lock (fn must not call the store; busy and expired ones are left
 * out), with its idle time; fn returns 0 to go on, else the walk stops.
 * Page contents are read through attnd_sessions_kv. Returns how many fn saw. */
int attnd_sessions_foreach(attnd_sessions *st,
                           int (*fn)(void *ctx, const attnd_sessions *st, const attnd_session *s,
                                     int64_t idle_ns),
                           void *ctx);

/* A saved cache, as attnd_sessions_restore takes it back: its length, rows and
 * n_blocks blocks of block_bytes (the params' k + v block bytes) each, K rows
 * then V rows at k_block_bytes, as a page holds them. */
typedef struct attnd_session_image {
    int64_t length;
    int rows;
    int n_blocks;
    const unsigned char *data;
} attnd_session_image;

/* Registers a session read back from disk under its old id (which must be
 * this store's: its replica prefix, not in use): one cache (n_layers = 0,
 * img[0], model p->model) or a sequence (n_layers, lp[l] and img[l] each
 * layer's; p the head's as open_group makes it). It comes idle, idle_ns old,
 * as the least recently used so far (restore the most recent first), and
 * never evicts another: CACHE_FULL / TOO_MANY when the pool or max_sessions
 * has no room. Returns OK (the store holds each model reference now), or what
 * failed with *err (INVALID: a bad id or image, NOT_FOUND never); on failure no
 * model is released. */
attnd_session_result attnd_sessions_restore(attnd_sessions *st, const char *id,
                                            const attnd_session_params *p,
                                            const attnd_session_params *lp, int n_layers,
                                            const attnd_session_image *img, float query_limit,
                                            int64_t idle_ns, attnd_session_error *err);

/* The replica prefix ids of this store start with ("NAME." or ""). */
const char *attnd_sessions_id_prefix(const attnd_sessions *st);

#endif
