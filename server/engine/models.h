/* models.h — the model registry: for each model slot (the configured models,
 * then those loaded at run time through the repository API), its current
 * version (layer, facts for GET /v1/models, scheduler) or none (unloaded). A
 * version is reference counted and numbered (1, 2, ... per model): SIGHUP and
 * repository loads validate new versions and swap them in atomically, and an
 * old version is freed when its last in-flight request lets it go.
 */
#ifndef ATTND_MODELS_H
#define ATTND_MODELS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

#include "attn.h"
#include "core/config.h"
#include "core/metrics.h"
#include "engine/scheduler.h"

/* The KV heads of a layer (num_kv_heads; num_heads when that is 0). */
static inline int attnd_kv_heads(const attn_layer_info *in)
{
    return in->num_kv_heads > 0 ? in->num_kv_heads : in->num_heads;
}

/* One loaded version of a model. Immutable once published; freed (scheduler
 * drained, layer freed) when refs drops to 0. */
typedef struct attnd_model {
    int index;                 /* position in the registry (metrics slot)      */
    char name[80];
    char *path;                /* owned                                        */
    attn_layer *layer;         /* owned                                        */
    attn_layer_info info;
    attn_family family;        /* the checkpoint family it was read as         */
    int layer_index;           /* its layer in the checkpoint, -1 = a bare layer */
    int sliding_window;        /* config.json's, reported only; 0 = none       */
    attn_kv_dtype kv_dtype;    /* how its sessions' KV caches store elements   */
    attnd_scheduler *sched;    /* borrowed: its model slot's, which every version
                                  of the model shares (a reload adds no threads) */
    char loaded_at[32];        /* ISO-8601 UTC, e.g. "2026-11-30T13:25:29Z"    */
    double load_ms;
    attnd_metrics *metrics;    /* borrowed, for the batch hook                 */
    _Atomic int refs;          /* the registry's 1 + one per holder            */
    /* Retired: replaced by a newer version or unloaded, alive only for the
     * requests and sessions still holding it (under the registry's retired_mu). */
    struct attnd_models *registry;          /* borrowed                         */
    int retired;
    struct attnd_model *retired_prev, *retired_next;
    int version;               /* 1 for its model's first load, +1 per load    */
    attnd_sched_config sched_cfg; /* what its (the slot's) scheduler runs with  */
} attnd_model;

/* Models the repository API may add beyond the configured ones. Only a model
 * that loaded takes a slot; the slot of an added model that was unloaded goes
 * to a new name once nothing holds its versions (its metrics series restart). */
#define ATTND_MODELS_ADDED_MAX 32
/* Failed loads of new names the index remembers (the latest), slots or not. */
#define ATTND_MODELS_FAILED_MAX 8

/* What one configured model keeps across its versions: the scheduler every
 * version submits to (each request names its version's layer), and what the
 * scheduler's batch hook needs. */
typedef struct attnd_model_slot {
    int index;
    attnd_metrics *metrics;    /* borrowed                                     */
    attnd_scheduler *sched;    /* owned; made with the slot's first version     */
    attnd_sched_config sc;     /* sched's settings (the global ones, or the
                                  model's own from its spec at the first load) */
    attnd_model_spec spec;     /* owned: the source a load without one reads   */
    int configured;            /* 1: a configured model (SIGHUP reloads it)     */
    int version;               /* the number of the last version loaded, 0 = none */
    int loading;               /* under mu: a repository load is under way      */
    char reason[256];          /* under mu: why it is unavailable, or why its
                                  last load failed; "" = none                  */
} attnd_model_slot;

typedef struct attnd_models {
    _Atomic int n;             /* slots in use: configured first, then added   */
    int n_config;              /* the configured ones                          */
    int cap;                   /* slots and items allocated                    */
    attnd_model_slot *slots;   /* cap, owned; slot i is initialised before n
                                  passes i                                     */
    attnd_model **items;       /* cap: slot i's current version, NULL when it
                                  is unloaded; read or swap only under mu      */
    pthread_mutex_t mu;
    pthread_mutex_t repo_mu;   /* one load, unload or reload at a time        */
    /* Retired versions still alive, oldest first: what sessions and requests
     * pin beyond the current models (their weights: retired_bytes). */
    pthread_mutex_t retired_mu;
    attnd_model *retired_head, *retired_tail;
    int retired_count;
    size_t retired_bytes;
    int mu_ready;
    attnd_metrics *metrics;    /* borrowed                                     */
    struct attnd_model_group *groups; /* n_groups, owned; fixed once loaded     */
    int n_groups;
    /* Under mu: the new name a repository load is loading ("" = none), and the
     * last failed loads of new names (name "" = unused), for the index. */
    char loading_name[80];
    struct {
        char name[80];
        char reason[256];
        unsigned long long seq;
    } failed[ATTND_MODELS_FAILED_MAX];
    unsigned long long failed_seq;
    /* The session store's KV page (set once the store exists; 0 before): a
     * version whose one row of K and V is wider is refused at load. */
    size_t kv_page_bytes;
} attnd_models;

/* A model group (--model NAME=DIR,layers=...): the layer models NAME.k, in
 * group order, served together as the model NAME whose sessions are sequences
 * (a cache for every layer). Fixed at start-up: the table never changes while
 * the registry lives (a member's versions do, as any model's). */
typedef struct attnd_model_group {
    char name[72];
    int n_layers;
    int *slots;                /* owned: each layer's model slot               */
    int *checkpoint_layers;    /* owned: each layer's layer in the checkpoint  */
} attnd_model_group;

/* Builds the registry's groups from cfg->groups (attnd_models_load calls it
 * once the configured models loaded) and frees them (attnd_models_free).
 * Build returns 0, or -1 with err (a member not loaded, no memory). */
int attnd_models_groups_build(attnd_models *ms, const attnd_config *cfg, char *err, size_t errlen);
void attnd_models_groups_free(attnd_models *ms);

/* The group named name[0..len), or NULL. The pointer lives as the registry. */
const attnd_model_group *attnd_models_group(attnd_models *ms, const char *name, size_t len);

/* The current version of every layer of g into out[0..g->n_layers), each with
 * a reference taken (release each with attnd_model_release). Returns 0, or -1
 * when some layer is unloaded (*missing gets its group index; nothing held). */
int attnd_models_group_acquire(attnd_models *ms, const attnd_model_group *g, attnd_model **out,
                               int *missing);

/* GET /v1/models/{group}: {"name","kind":"group","num_layers","layers":[...],
 * "kv_bytes_per_position"} with each layer's model description. malloc'd JSON
 * (caller frees) and its length; NULL on allocation failure or an unloaded layer. */
char *attnd_models_group_info_json(attnd_models *ms, const attnd_model_group *g, size_t *len);

/* K + V bytes one cached position of m takes in its kv dtype (block of 1 row;
 * int8: a 16-row block's bytes / 16). 0 when it cannot say. */
size_t attnd_model_kv_row_bytes(const attnd_model *m);

/* A 64-bit FNV-1a hash of m's weights as the library holds them, and its shape
 * and kv dtype: a saved session is read back only onto the same model. */
uint64_t attnd_model_weights_hash(const attnd_model *m);

/* The weights a version holds in memory (float parameters). */
static inline size_t attnd_model_weight_bytes(const attnd_model *m)
{
    return m->info.param_count * sizeof(float);
}

/* Retired versions still alive (replaced or unloaded, held by requests or
 * sessions) and the bytes of their weights. */
void attnd_models_retired(attnd_models *ms, int *versions, size_t *bytes);

/* A reference to the oldest retired version still alive (release it with
 * attnd_model_release), or NULL when there is none. */
attnd_model *attnd_models_oldest_retired(attnd_models *ms);

/* A reference to the retired version after m (which the caller holds, so it is
 * still listed), or NULL when m is the newest. */
attnd_model *attnd_models_next_retired(attnd_models *ms, attnd_model *m);

/* How many model slots a registry for cfg has room for (configured + added):
 * the metrics registry reserves as many. */
int attnd_models_capacity(const attnd_config *cfg);

/* Replaces each layers=all spec of cfg by one spec per layer of its checkpoint
 * (NAME.0, NAME.1, ...), inspecting the checkpoints. Call before the registry
 * and metrics are made. Returns 0, or -1 with err naming the model. */
int attnd_models_expand(attnd_config *cfg, char *err, size_t errlen);

/* --inspect: prints what path holds and what attnd would serve from it. Returns
 * 0, or -1 with err (path unreadable, not a checkpoint). */
int attnd_models_inspect(FILE *out, const char *path, char *err, size_t errlen);

/* Loads every model of cfg and starts one scheduler per model (knobs from cfg,
 * batch hook feeding metrics, which may be NULL). Logs one line per model.
 * Returns 0; or -1 with err naming the model, file and problem and *ms left
 * empty (everything loaded so far is freed). */
int attnd_models_load(attnd_models *ms, const attnd_config *cfg, attnd_metrics *metrics,
                      char *err, size_t errlen);

/* Reloads every configured model that is loaded from cfg's specs (same names
 * as at start-up; paths and heads may change; an unloaded one only takes its
 * new spec, models added through the repository are left alone): each new
 * version is loaded and validated (a small forward must give finite numbers)
 * before any is published; then all are swapped in at once, each one version
 * up. Requests already holding a version finish on it. All or nothing: on
 * failure the old versions keep serving, -1 and err. Serialised with
 * repository loads and unloads. */
int attnd_models_reload(attnd_models *ms, const attnd_config *cfg, char *err, size_t errlen);

/* The current version of model name[0..len), with a reference taken: the
 * caller releases it with attnd_model_release. NULL when there is none. */
attnd_model *attnd_models_find(attnd_models *ms, const char *name, size_t len);

/* The current version of model i (0 <= i < n), referenced as above; NULL when
 * it is unloaded. */
attnd_model *attnd_models_acquire(attnd_models *ms, int i);

/* The only loaded model, referenced as above; NULL when none or several are
 * loaded (*loaded says how many). */
attnd_model *attnd_models_sole(attnd_models *ms, int *loaded);

/* The loaded models' names, ", "-separated, into buf (truncated to cap with
 * "..."); "none" when there is none. For 404 messages. */
void attnd_models_loaded_names(attnd_models *ms, char *buf, size_t cap);

/* ---- the repository API (Triton's model repository extension) ---- */

typedef enum attnd_repo_status {
    ATTND_REPO_OK = 0,
    ATTND_REPO_NOT_FOUND,      /* no model of that name, and no source given   */
    ATTND_REPO_FULL,           /* ATTND_MODELS_ADDED_MAX names added already    */
    ATTND_REPO_LOAD_FAILED,    /* the source does not load or validate: err    */
    ATTND_REPO_NO_MEMORY
} attnd_repo_status;

/* Loads a new version of model name: from spec when given (a copy is kept as
 * the model's source from then on, once it loads), else from the model's own
 * source (a configured model's spec). A name not known yet takes a new slot
 * (scheduler settings from spec, else cfg's). The version is validated as at
 * start-up, then swapped in one number up (*version); requests on the old one
 * finish on it. On failure what served keeps serving and the reason is kept
 * for the index. Runs the load on the calling thread; serialised with other
 * loads, unloads and SIGHUP. */
attnd_repo_status attnd_models_repo_load(attnd_models *ms, const attnd_config *cfg,
                                         const char *name, const attnd_model_spec *spec,
                                         int *version, char *err, size_t errlen);

/* Stops serving model name: new requests answer 404; requests holding the
 * version (in flight, or sessions pinned to it) finish on it; the version is
 * freed when the last lets go. Unloading an unloaded model is OK. */
attnd_repo_status attnd_models_repo_unload(attnd_models *ms, const char *name);

/* The repository index: [{"name","version","state","reason"}, ...] for every
 * slot, then the last failed loads of new names (ready_only: the loaded ones).
 * state is READY, LOADING or UNAVAILABLE. Why a load failed (file paths, parser
 * text) is shown only with reasons set (an admin key); otherwise such a reason
 * says only that it failed. malloc'd JSON (caller frees) and its length, or
 * NULL on allocation failure. */
char *attnd_models_index_json(attnd_models *ms, int ready_only, int reasons, size_t *len);

/* Takes one more reference to a version the caller already holds (e.g. to keep
 * it beyond the request that found it). Release it with attnd_model_release. */
void attnd_model_retain(attnd_model *m);

/* Drops a reference; the last one frees the version. NULL allowed. */
void attnd_model_release(attnd_model *m);

/* Model i's queue depth now, or -1. Never waits on compute. */
int attnd_models_queue_depth(attnd_models *ms, int i);

/* Stops every model's scheduler, answering everything queued for any version
 * of it, current or pinned by a session (see attnd_scheduler_drain). */
void attnd_models_drain(attnd_models *ms);

/* Releases every current version (the last reference frees it) and the
 * registry. *ms becomes empty. */
void attnd_models_free(attnd_models *ms);

/* GET /v1/models/{name} body (ModelInfo) and GET /v1/models ({"models": [...]}).
 * Return malloc'd JSON (caller frees) and its length, or NULL on allocation failure. */
char *attnd_models_info_json(const attnd_model *m, size_t *len);
char *attnd_models_list_json(attnd_models *ms, size_t *len);

#endif
