/* sessions.h — the streaming-session store: 128-bit random ids, the KV cache each
 * session owns, one append slot per session, LRU eviction under a global byte
 * budget and a session count cap, TTL expiry (on access and by a sweep thread),
 * and tombstones that tell an evicted id (EXPIRED) from an unknown one
 * (NOT_FOUND). No HTTP and no JSON here: functions return attnd_session_result,
 * and handler_session.c, the wire side, maps results to statuses. Thread-safe.
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

#include "metrics.h"

/* A session id is 128 random bits as 32 lowercase hex digits, after "NAME." when
 * the store has a replica name (a gateway in front of several replicas routes on
 * it): "r1.0f3a…". NAME is 1..ATTND_REPLICA_NAME_MAX of [a-z0-9-], starting and
 * ending with a letter or digit (a DNS label: Kubernetes pod names fit). */
#define ATTND_SESSION_ID_HEX 32
#define ATTND_REPLICA_NAME_MAX 40
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
    int row_k, row_v;                        /* (fixed) elements per cached row: g*d_k, g*d_v */
    int elem_bytes;                          /* (fixed) bytes of an element: 4 (f32) or 2
                                                (f16, bf16), the model's kv dtype; the
                                                caches stay typed float* as attn_seq has */
    float query_limit;                       /* (fixed) cross: the largest |query| number an
                                                append may carry, set by the creator before
                                                it releases the slot (0 until then)     */
    float *cache_k;                          /* (slot) (cap, row_k), owned              */
    float *cache_v;                          /* (slot) (cap, row_v), owned              */
    int rows;                                /* (slot) rows held in the cache           */
    int cap;                                 /* (slot) rows allocated                   */
    int64_t length;                          /* (slot) positions appended in total      */

    /* store-private */
    int busy;                                /* the append slot is held                 */
    int removed;                             /* unlinked while busy: release frees it   */
    int64_t last_used_ns;
    size_t bytes;                            /* counted against the budget             */
    struct attnd_session *lru_prev, *lru_next, *hash_next;
} attnd_session;

typedef struct attnd_sessions_config {
    size_t budget_bytes;       /* KV memory of all sessions together, >= 1           */
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

/* 1 when name is a valid replica name (see ATTND_SESSION_ID_HEX above). */
int attnd_replica_name_valid(const char *name);

typedef struct attnd_sessions attnd_sessions;

/* What a store call answered. Append-only. */
typedef enum attnd_session_result {
    ATTND_SESSION_OK = 0,
    ATTND_SESSION_NOT_FOUND,   /* no session with this id (or it was deleted)        */
    ATTND_SESSION_EXPIRED,     /* evicted, or idle past its TTL                      */
    ATTND_SESSION_BUSY,        /* its append slot is held by another append          */
    ATTND_SESSION_INVALID,     /* a parameter out of range (err->field names it)     */
    ATTND_SESSION_TOO_LARGE,   /* more than the whole budget or max_length alone     */
    ATTND_SESSION_CACHE_FULL,  /* no room now: the budget is held by busy sessions   */
    ATTND_SESSION_TOO_MANY,    /* max_sessions exist and every one is busy           */
    ATTND_SESSION_INTERNAL     /* out of memory, no entropy, or a caller's bug       */
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
    int row_k, row_v;          /* elements per row, >= 1                             */
    int elem_bytes;            /* bytes per element: 0 or 4 = float32, 2 = f16/bf16  */
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
    size_t bytes;
    double idle_s;
    int busy;
} attnd_session_info;

/* Creates a store. Returns NULL on a bad config or no memory. Free with
 * attnd_sessions_free. */
attnd_sessions *attnd_sessions_create(const attnd_sessions_config *cfg);

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

/* Takes the append slot of session id. Returns OK and *out; or NOT_FOUND,
 * EXPIRED (evicted or expired; an idle session past its TTL is expired here),
 * BUSY, with *err. */
attnd_session_result attnd_sessions_acquire(attnd_sessions *st, const char *id,
                                            attnd_session **out, attnd_session_error *err);

/* Makes room for t more rows (slot held). Self windowed sessions first drop all
 * but the last window-1 rows when the buffer would overflow (moved to the front;
 * positions are relative, so causal + window stay right); unbounded ones grow,
 * up to max_length positions in total. Growth counts against the budget and may
 * evict other idle sessions. Cross sessions need no room. Returns OK, or
 * TOO_LARGE, CACHE_FULL, NOT_FOUND (deleted meanwhile), INTERNAL (no memory)
 * with *err; the cache is still valid either way. */
attnd_session_result attnd_sessions_reserve(attnd_sessions *st, attnd_session *s, int t,
                                            attnd_session_error *err);

/* Gives the append slot back. committed > 0: the compute succeeded and wrote t
 * = committed new rows (self: rows and length advance; cross: length advances).
 * *length and *rows (each may be NULL) get the values after the commit. Frees
 * the session if it was deleted meanwhile: s is invalid after this call. */
void attnd_sessions_release(attnd_sessions *st, attnd_session *s, int committed,
                            int64_t *length, int *rows);

/* Snapshot of session id. Returns OK, or NOT_FOUND / EXPIRED as acquire (an
 * expired idle session is expired here too). Does not count as use. */
attnd_session_result attnd_sessions_get(attnd_sessions *st, const char *id,
                                        attnd_session_info *out, attnd_session_error *err);

/* Deletes session id (a busy one is unlinked now and freed by its slot holder).
 * Returns OK, or NOT_FOUND / EXPIRED. */
attnd_session_result attnd_sessions_delete(attnd_sessions *st, const char *id,
                                           attnd_session_error *err);

/* Forks session id: a new session with a copy of its cache, length and
 * settings (kind, window, ttl_s), which then lives on its own — appends to one
 * never change the other's answers. The child holds its own reference to the
 * parent's model (cfg.retain_model). Returns OK and *out with the child's append
 * slot held by the caller (release it with 0); or, with *err, what acquire
 * returns for the parent (NOT_FOUND, EXPIRED, BUSY: the parent is read under its
 * slot) and what open and reserve return for the child (TOO_MANY, CACHE_FULL,
 * TOO_LARGE, INTERNAL). The copy counts against the budget in full. */
attnd_session_result attnd_sessions_fork(attnd_sessions *st, const char *id,
                                         attnd_session **out, attnd_session_error *err);

/* A page of sessions in id order: those with id > after ("" = from the start),
 * at most cap of them, into out; *n gets how many, *total how many exist.
 * Returns OK, or INTERNAL (no memory). Does not count as use. */
attnd_session_result attnd_sessions_list(attnd_sessions *st, const char *after, int cap,
                                         attnd_session_info *out, int *n, int *total,
                                         attnd_session_error *err);

/* Expires every idle session past its TTL. Returns how many. */
int attnd_sessions_sweep(attnd_sessions *st);

/* Sessions and bytes held now. */
void attnd_sessions_stats(attnd_sessions *st, int *count, size_t *bytes);

#endif
