/* models.c — loads the configured layers, starts one scheduler per model (its
 * slot's, shared by every version: a reload swaps the layer, not the threads),
 * swaps in new versions on reload and on repository loads (reference counted,
 * numbered), unloads, and describes models as JSON (ModelInfo and the
 * repository index in proto/openapi.yaml).
 */
#include "engine/models.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/jsonload.h"
#include "core/log.h"
#include "core/request.h"
#include "engine/kvlayout.h"

/* Scheduler batch hook: runs on a worker thread after every batch (on an HTTP
 * thread for a request computed inline). */
static void on_batch(void *ctx, const attnd_batch_report *r)
{
    attnd_model_slot *slot = ctx;
    if (!slot->metrics) return;
    if (r->inline_run)
        attnd_metrics_inline_request(slot->metrics, slot->index);
    if (r->part != ATTND_REPORT_PIECE) /* a piece's report: its iteration's second */
        attnd_metrics_batch(slot->metrics, slot->index, r->n_requests, r->n_tokens);
    if (r->loop)
        attnd_metrics_decode_iteration(slot->metrics, slot->index, r->part != ATTND_REPORT_PIECE,
                                       r->steps, r->piece_rows, r->compute_us);
}

/* Frees a version: its layer (the last request on it has finished: each holds
 * a reference; the scheduler is the slot's). */
/* Publishes the retired gauges (retired_mu held). */
static void retired_publish(attnd_models *ms)
{
    if (ms->metrics)
        attnd_metrics_retired_set(ms->metrics, ms->retired_count, (int64_t)ms->retired_bytes);
}

/* Marks old (just replaced or unloaded, the registry's reference not yet
 * dropped) retired: counted until it is freed. NULL allowed. */
static void retire(attnd_models *ms, attnd_model *old)
{
    if (!old)
        return;
    pthread_mutex_lock(&ms->retired_mu);
    old->registry = ms;
    old->retired = 1;
    old->retired_prev = ms->retired_tail;
    old->retired_next = NULL;
    if (ms->retired_tail) ms->retired_tail->retired_next = old;
    else ms->retired_head = old;
    ms->retired_tail = old;
    ms->retired_count++;
    ms->retired_bytes += attnd_model_weight_bytes(old);
    retired_publish(ms);
    pthread_mutex_unlock(&ms->retired_mu);
}

/* Takes a freed retired version out of its registry's count. */
static void unretire(attnd_model *m)
{
    attnd_models *ms = m->registry;
    pthread_mutex_lock(&ms->retired_mu);
    if (m->retired_prev) m->retired_prev->retired_next = m->retired_next;
    else ms->retired_head = m->retired_next;
    if (m->retired_next) m->retired_next->retired_prev = m->retired_prev;
    else ms->retired_tail = m->retired_prev;
    ms->retired_count--;
    ms->retired_bytes -= attnd_model_weight_bytes(m);
    retired_publish(ms);
    pthread_mutex_unlock(&ms->retired_mu);
}

void attnd_models_retired(attnd_models *ms, int *versions, size_t *bytes)
{
    pthread_mutex_lock(&ms->retired_mu);
    if (versions) *versions = ms->retired_count;
    if (bytes) *bytes = ms->retired_bytes;
    pthread_mutex_unlock(&ms->retired_mu);
}

/* One more reference to m unless its last one is already gone (its free is
 * then waiting for retired_mu to unlink it). Returns 1 when taken. */
static int retain_if_alive(attnd_model *m)
{
    int r = atomic_load_explicit(&m->refs, memory_order_relaxed);
    while (r > 0)
        if (atomic_compare_exchange_weak_explicit(&m->refs, &r, r + 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return 1;
    return 0;
}

attnd_model *attnd_models_oldest_retired(attnd_models *ms)
{
    pthread_mutex_lock(&ms->retired_mu);
    attnd_model *m = ms->retired_head;
    while (m && !retain_if_alive(m))
        m = m->retired_next;
    pthread_mutex_unlock(&ms->retired_mu);
    return m;
}

attnd_model *attnd_models_next_retired(attnd_models *ms, attnd_model *m)
{
    pthread_mutex_lock(&ms->retired_mu);
    attnd_model *n = m->retired_next;
    while (n && !retain_if_alive(n))
        n = n->retired_next;
    pthread_mutex_unlock(&ms->retired_mu);
    return n;
}

static void version_free(attnd_model *m)
{
    if (!m)
        return;
    if (m->retired)
        unretire(m);
    attn_layer_free(m->layer);
    free(m->path);
    free(m);
}

/* A 2-token cross-attention forward on small inputs: the outputs must be
 * finite. Catches NaN/Inf weights a file may carry. Returns 0 or -1 with err. */
static int smoke_forward(const attnd_model *m, char *err, size_t errlen)
{
    const attn_layer_info *in = &m->info;
    enum { T = 2 };
    size_t nq = (size_t)T * (size_t)in->embed_q, nk = (size_t)T * (size_t)in->embed_k,
           nv = (size_t)T * (size_t)in->embed_v, no = (size_t)T * (size_t)in->embed_out;
    float *buf = calloc(nq + nk + nv + no, sizeof *buf);
    if (!buf) {
        snprintf(err, errlen, "model '%s': out of memory validating", m->name);
        return -1;
    }
    for (size_t i = 0; i < nq + nk + nv; i++)
        buf[i] = (float)((int)(i % 7) - 3) * 0.125f;
    /* Self-attention where the widths allow (a rotary layer takes nothing else),
     * else cross-attention with the key/value widths. */
    int self = in->embed_k == in->embed_q && in->embed_v == in->embed_q;
    attn_seq seq = {.t = T, .s = T, .query = buf, .key = self ? NULL : buf + nq,
                    .value = self ? NULL : buf + nq + nk, .output = buf + nq + nk + nv};
    attn_error lerr = {0};
    attn_status st = attn_forward(m->layer, &seq, 1, NULL, NULL, &lerr);
    int rc = st == ATTN_OK ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < no; i++)
        if (!isfinite(seq.output[i]))
            rc = -1;
    if (st == ATTN_ERR_NOMEM) /* the layer may be fine: say what happened */
        snprintf(err, errlen, "model '%s': out of memory validating %s: %s", m->name, m->path,
                 lerr.message);
    else if (rc)
        snprintf(err, errlen, "model '%s': %s fails validation: %s", m->name, m->path,
                 st != ATTN_OK ? (lerr.message[0] ? lerr.message : attn_strerror(st))
                               : "a test forward gives non-finite numbers");
    free(buf);
    return rc;
}

/* Loads, validates and starts one version of spec as registry slot index.
 * Returns it (refs = 1) or NULL with err. */
static const char *rope_style_name(attn_rope_style s)
{
    return s == ATTN_ROPE_HALF ? "half" : s == ATTN_ROPE_INTERLEAVED ? "interleaved" : "none";
}

static attn_load_options load_options(const attnd_model_spec *spec)
{
    attn_load_options lo = {.family = (attn_family)spec->family,
                            .layer = spec->layer,
                            .prefix = spec->prefix,
                            .num_heads = spec->heads,
                            .num_kv_heads = spec->kv_heads,
                            .weights_dtype = (attn_weight_dtype)spec->weights_dtype};
    return lo;
}

/* A model's scheduler settings: its spec's own where it sets them, else cfg's. */
static attnd_sched_config sched_config(const attnd_model_spec *spec, const attnd_config *cfg)
{
    attnd_sched_config sc = {
        .max_batch_requests = spec->max_batch_requests > 0 ? spec->max_batch_requests
                                                           : cfg->max_batch_requests,
        .max_batch_tokens = (size_t)(spec->max_batch_tokens > 0 ? spec->max_batch_tokens
                                                                : cfg->max_batch_tokens),
        .max_batch_kv_bytes = (size_t)(spec->max_batch_kv_bytes > 0 ? spec->max_batch_kv_bytes
                                                                    : cfg->max_batch_kv_bytes),
        .max_queue_delay_us = spec->max_queue_delay_us >= 0 ? spec->max_queue_delay_us
                                                            : cfg->max_queue_delay_us,
        .max_stream_wait_us = cfg->max_stream_wait_us,
        .prefill_chunk_rows = spec->prefill_chunk_rows >= 0 ? spec->prefill_chunk_rows
                                                            : cfg->prefill_chunk_rows,
        .inline_max_macs = cfg->inline_max_macs,
        .max_queue = cfg->max_queue,
        .workers = spec->workers > 0 ? spec->workers : cfg->workers,
    };
    return sc;
}

/* 0 when one row of m's K and V (in its kv dtype) fits a KV page of page
 * bytes (0: not known yet, at start-up), else -1 with err naming the model. */
static int fits_page(const attnd_model *m, size_t page, char *err, size_t errlen)
{
    static const char *const dtypes[] = {"f32", "f16", "bf16", "int8"};
    attnd_kv_geometry g;
    size_t row = 0;
    if (page == 0 || attnd_kv_geometry_fit(m->layer, m->kv_dtype, page, &g, &row) == 0)
        return 0;
    snprintf(err, errlen, "model '%s': one row of its K and V (%zu bytes in kv_dtype %s) is "
             "wider than a KV page (%zu bytes, fixed at start-up: --kv-page-bytes): its sessions "
             "could not be opened; restart with --kv-page-bytes >= %zu", m->name, row,
             dtypes[m->kv_dtype], page, row);
    return -1;
}

static attnd_model *version_load(attnd_model_slot *slot, const attnd_model_spec *spec,
                                 const attnd_config *cfg, attnd_metrics *metrics, size_t page,
                                 char *err, size_t errlen)
{
    attn_error lerr = {0};
    char serr[256] = "";
    attnd_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(spec->path))) {
        snprintf(err, errlen, "out of memory");
        free(m);
        return NULL;
    }
    m->index = slot->index;
    m->metrics = metrics;
    atomic_init(&m->refs, 1);
    snprintf(m->name, sizeof m->name, "%s", spec->name);
    int64_t t0 = attnd_now_ns();
    attn_load_options lo = load_options(spec);
    attn_checkpoint_info ci;
    unsigned long json_failures = attnd_json_alloc_failures();
    attn_status st = attn_layer_load(spec->path, &lo, &m->layer, &lerr);
    if (st == ATTN_OK)
        st = attn_checkpoint_inspect(spec->path, &lo, &ci, &lerr);
    if (attnd_json_alloc_failures() != json_failures) {
        /* jansson lacked memory reading config.json or a safetensors header: the
         * library calls that a syntax error, or reads a mangled key and succeeds */
        st = ATTN_ERR_NOMEM;
        snprintf(lerr.message, sizeof lerr.message, "out of memory parsing its JSON");
    }
    if (st != ATTN_OK) {
        snprintf(err, errlen, "model '%s': cannot load %s: %s%s%s", spec->name, spec->path,
                 attn_strerror(st), lerr.message[0] ? ": " : "", lerr.message);
        goto fail;
    }
    m->family = ci.family;
    /* -1 for a bare layer file (MHA, explicit names); the checkpoint's index otherwise */
    m->layer_index = spec->layer >= 0                 ? spec->layer
                     : ci.family >= ATTN_FAMILY_LLAMA ? 0 /* the only layer */
                                                      : -1;
    m->sliding_window = ci.sliding_window;
    m->kv_dtype = (attn_kv_dtype)(spec->kv_dtype >= 0 ? spec->kv_dtype : cfg->kv_dtype);
    m->load_ms = (double)(attnd_now_ns() - t0) / 1e6;
    attn_layer_get_info(m->layer, &m->info);
    if (smoke_forward(m, err, errlen) || fits_page(m, page, err, errlen))
        goto fail;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(m->loaded_at, sizeof m->loaded_at, "%Y-%m-%dT%H:%M:%SZ", &tm);

    if (!slot->sched) { /* the first version: its layer is only the default */
        slot->sc = sched_config(spec, cfg);
        slot->sched =
            attnd_scheduler_create(m->layer, &slot->sc, on_batch, slot, serr, sizeof serr);
    }
    if (!slot->sched) {
        snprintf(err, errlen, "model '%s': cannot start its scheduler: %s", spec->name,
                 serr[0] ? serr : "unknown error");
        goto fail;
    }
    m->sched = slot->sched;
    m->sched_cfg = slot->sc;
    const attn_layer_info *in = &m->info;
    char layer[24] = "";
    if (m->layer_index >= 0)
        snprintf(layer, sizeof layer, " layer %d", m->layer_index);
    attnd_log(ATTND_LOG_INFO,
              "model %s loaded from %s (%s%s) in %.1f ms: heads=%d kv_heads=%d d_k=%d d_v=%d "
              "E_q=%d E_k=%d E_v=%d E_out=%d out_proj=%s rope=%s dtype=%s params=%zu "
              "weights=%s (%zu bytes); scheduler: %d workers",
              m->name, m->path, attn_family_name(m->family), layer, m->load_ms, in->num_heads,
              attnd_kv_heads(in), in->head_dim_k, in->head_dim_v, in->embed_q, in->embed_k,
              in->embed_v, in->embed_out, in->has_out_proj ? "yes" : "no",
              rope_style_name(in->rope.style), in->source_dtype[0] ? in->source_dtype : "F32",
              in->param_count, in->weights_dtype, in->weights_bytes, slot->sc.workers);
    return m;
fail:
    version_free(m);
    return NULL;
}

int attnd_models_capacity(const attnd_config *cfg)
{
    return cfg->n_models + ATTND_MODELS_ADDED_MAX;
}

/* Slot i (not yet counted in n): owns a copy of spec. Returns 0 or -1 (memory). */
static int slot_init(attnd_models *ms, int i, const attnd_model_spec *spec, int configured)
{
    attnd_model_slot *slot = &ms->slots[i];
    *slot = (attnd_model_slot){.index = i, .metrics = ms->metrics, .configured = configured};
    return attnd_config_spec_copy(&slot->spec, spec);
}

/* Makes m slot i's current version (numbered one up) and gives back the one it
 * replaces (NULL when the slot was unloaded): the caller releases that. */
static attnd_model *publish(attnd_models *ms, int i, attnd_model *m)
{
    pthread_mutex_lock(&ms->mu);
    m->version = ++ms->slots[i].version;
    attnd_model *old = ms->items[i];
    ms->items[i] = m;
    ms->slots[i].reason[0] = '\0';
    pthread_mutex_unlock(&ms->mu);
    if (ms->metrics)
        attnd_metrics_set_model_info(ms->metrics, i, &m->info);
    return old;
}

int attnd_models_load(attnd_models *ms, const attnd_config *cfg, attnd_metrics *metrics,
                      char *err, size_t errlen)
{
    memset(ms, 0, sizeof *ms);
    ms->metrics = metrics;
    ms->cap = attnd_models_capacity(cfg);
    ms->items = calloc((size_t)ms->cap, sizeof *ms->items);
    ms->slots = calloc((size_t)ms->cap, sizeof *ms->slots);
    if (!ms->items || !ms->slots || pthread_mutex_init(&ms->mu, NULL) != 0) {
        free(ms->items);
        free(ms->slots);
        ms->items = NULL;
        ms->slots = NULL;
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (pthread_mutex_init(&ms->repo_mu, NULL) != 0) {
        pthread_mutex_destroy(&ms->mu);
        snprintf(err, errlen, "out of memory");
        goto fail_mu;
    }
    if (pthread_mutex_init(&ms->retired_mu, NULL) != 0) {
        pthread_mutex_destroy(&ms->mu);
        pthread_mutex_destroy(&ms->repo_mu);
        snprintf(err, errlen, "out of memory");
        goto fail_mu;
    }
    ms->mu_ready = 1;
    for (int i = 0; i < cfg->n_models; i++) {
        if (slot_init(ms, i, &cfg->models[i], 1) != 0) {
            attnd_config_spec_free(&ms->slots[i].spec);
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        ms->n = ms->n_config = i + 1;
        attnd_model *m = version_load(&ms->slots[i], &cfg->models[i], cfg, metrics, 0, err,
                                      errlen);
        if (!m)
            goto fail;
        publish(ms, i, m); /* the slot was empty: nothing to give back */
    }
    if (attnd_models_groups_build(ms, cfg, err, errlen) != 0)
        goto fail;
    return 0;
fail:
    attnd_models_free(ms);
    return -1;
fail_mu:
    free(ms->items);
    free(ms->slots);
    memset(ms, 0, sizeof *ms);
    return -1;
}

/* 1 when slot i has a current version (under mu). */
static int slot_loaded(attnd_models *ms, int i)
{
    pthread_mutex_lock(&ms->mu);
    int loaded = ms->items[i] != NULL;
    pthread_mutex_unlock(&ms->mu);
    return loaded;
}

/* Checks that cfg names the configured models as they were at start-up. */
static int same_models(const attnd_models *ms, const attnd_config *cfg, char *err,
                       size_t errlen)
{
    if (ms->n_config <= 0 || cfg->n_models != ms->n_config) {
        snprintf(err, errlen, "reload: %d models configured, %d before; adding or removing "
                 "configured models needs a restart (or the repository API)", cfg->n_models,
                 ms->n_config);
        return -1;
    }
    for (int i = 0; i < ms->n_config; i++) {
        if (strcmp(cfg->models[i].name, ms->slots[i].spec.name) != 0) {
            snprintf(err, errlen, "reload: model %d is now '%s', was '%s'; renaming or "
                     "reordering models needs a restart", i, cfg->models[i].name,
                     ms->slots[i].spec.name);
            return -1;
        }
    }
    return 0;
}

/* Replaces slot i's source with a copy of spec (swapped under mu: the index
 * reads its name). Returns 0, or -1 (memory: the old one stays). */
static int slot_set_spec(attnd_models *ms, int i, const attnd_model_spec *spec)
{
    attnd_model_spec copy, old;
    if (attnd_config_spec_copy(&copy, spec) != 0)
        return -1;
    pthread_mutex_lock(&ms->mu);
    old = ms->slots[i].spec;
    ms->slots[i].spec = copy;
    pthread_mutex_unlock(&ms->mu);
    attnd_config_spec_free(&old);
    return 0;
}

int attnd_models_reload(attnd_models *ms, const attnd_config *cfg, char *err, size_t errlen)
{
    pthread_mutex_lock(&ms->repo_mu);
    if (same_models(ms, cfg, err, errlen) != 0) {
        pthread_mutex_unlock(&ms->repo_mu);
        return -1;
    }
    attnd_model **fresh = calloc((size_t)ms->n_config, sizeof *fresh);
    if (!fresh) {
        pthread_mutex_unlock(&ms->repo_mu);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < ms->n_config && rc == 0; i++)
        if (slot_loaded(ms, i) && !(fresh[i] = version_load(&ms->slots[i], &cfg->models[i], cfg,
                                                            ms->metrics, ms->kv_page_bytes, err,
                                                            errlen)))
            rc = -1;
    for (int i = 0; i < ms->n_config && rc == 0; i++) /* swap: fresh[i] now holds the old one */
        if (fresh[i])
            fresh[i] = publish(ms, i, fresh[i]);
    for (int i = 0; i < ms->n_config && rc == 0; i++)
        slot_set_spec(ms, i, &cfg->models[i]); /* out of memory: the old source stays */
    pthread_mutex_unlock(&ms->repo_mu);
    /* Success: drop the registry's references to the old versions (each is
     * freed once its last request finishes; retired until then). Failure:
     * free what was loaded. */
    for (int i = 0; i < ms->n_config; i++) {
        if (rc == 0) retire(ms, fresh[i]);
        attnd_model_release(fresh[i]);
    }
    free(fresh);
    return rc;
}

attnd_model *attnd_models_acquire(attnd_models *ms, int i)
{
    if (i < 0 || i >= ms->n)
        return NULL;
    pthread_mutex_lock(&ms->mu);
    attnd_model *m = ms->items[i];
    if (m)
        attnd_model_retain(m);
    pthread_mutex_unlock(&ms->mu);
    return m;
}

attnd_model *attnd_models_sole(attnd_models *ms, int *loaded)
{
    attnd_model *found = NULL;
    int n = 0;
    pthread_mutex_lock(&ms->mu);
    for (int i = 0; i < ms->n; i++)
        if (ms->items[i] && n++ == 0)
            found = ms->items[i];
    if (n == 1)
        attnd_model_retain(found);
    pthread_mutex_unlock(&ms->mu);
    *loaded = n;
    return n == 1 ? found : NULL;
}

void attnd_models_loaded_names(attnd_models *ms, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    pthread_mutex_lock(&ms->mu);
    for (int i = 0; i < ms->n && len < cap; i++)
        if (ms->items[i])
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "",
                                    ms->items[i]->name);
    pthread_mutex_unlock(&ms->mu);
    if (len >= cap && cap > 4)
        memcpy(buf + cap - 4, "...", 4);
    else if (len == 0)
        snprintf(buf, cap, "none");
}

attnd_model *attnd_models_find(attnd_models *ms, const char *name, size_t len)
{
    attnd_model *found = NULL;
    pthread_mutex_lock(&ms->mu); /* items[i] may be swapped (and freed) by a reload */
    for (int i = 0; i < ms->n && !found; i++) {
        attnd_model *m = ms->items[i];
        if (m && strlen(m->name) == len && memcmp(m->name, name, len) == 0) {
            attnd_model_retain(m);
            found = m;
        }
    }
    pthread_mutex_unlock(&ms->mu);
    return found;
}

void attnd_model_retain(attnd_model *m)
{
    atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
}

void attnd_model_release(attnd_model *m)
{
    if (m && atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1)
        version_free(m);
}

int attnd_models_queue_depth(attnd_models *ms, int i)
{
    if (i < 0 || i >= ms->n)
        return -1;
    pthread_mutex_lock(&ms->mu);
    int d = ms->items[i] ? attnd_scheduler_queue_depth(ms->items[i]->sched) : -1;
    pthread_mutex_unlock(&ms->mu);
    return d;
}

void attnd_models_drain(attnd_models *ms)
{
    for (int i = 0; i < ms->n; i++)
        if (ms->slots[i].sched)
            attnd_scheduler_drain(ms->slots[i].sched);
}

void attnd_models_free(attnd_models *ms)
{
    for (int i = 0; i < ms->n; i++)
        attnd_model_release(ms->items[i]);
    /* The versions pinned by sessions are gone too (main frees the sessions
     * first): no request can reach a scheduler now. */
    for (int i = 0; ms->slots && i < ms->n; i++) {
        attnd_scheduler_free(ms->slots[i].sched);
        attnd_config_spec_free(&ms->slots[i].spec);
    }
    free(ms->slots);
    if (ms->mu_ready) {
        pthread_mutex_destroy(&ms->mu);
        pthread_mutex_destroy(&ms->repo_mu);
        pthread_mutex_destroy(&ms->retired_mu);
    }
    free(ms->items);
    attnd_models_groups_free(ms);
    memset(ms, 0, sizeof *ms);
}

/* ------------------------------------------------------------ JSON */

/* {"style","theta","rotary_dim","scaling":{...}|null}, or JSON null. */
static json_t *rope_object(const attn_rope *r)
{
    if (r->style == ATTN_ROPE_NONE)
        return json_null();
    json_t *scaling = json_null();
    if (r->scaling == ATTN_ROPE_SCALING_LINEAR)
        scaling = json_pack("{s:s, s:f}", "type", "linear", "factor", r->factor);
    else if (r->scaling == ATTN_ROPE_SCALING_LLAMA3)
        scaling = json_pack("{s:s, s:f, s:f, s:f, s:i}", "type", "llama3", "factor", r->factor,
                            "low_freq_factor", r->low_freq_factor, "high_freq_factor",
                            r->high_freq_factor, "original_max_position_embeddings",
                            r->original_max_position);
    return json_pack("{s:s, s:f, s:i, s:o}", "style", rope_style_name(r->style), "theta",
                     r->theta, "rotary_dim", r->rotary_dim, "scaling", scaling);
}

static json_t *int_or_null(int present, int v)
{
    return present ? json_integer(v) : json_null();
}

static json_t *base_info_object(const attnd_model *m);

static const char *kv_dtype_name(attn_kv_dtype d)
{
    return d == ATTN_KV_F16 ? "f16" : d == ATTN_KV_BF16 ? "bf16" : "f32";
}

/* {"workers", "max_batch_requests", ...}: what the model's scheduler runs with. */
static json_t *sched_object(const attnd_sched_config *sc)
{
    return json_pack("{s:i, s:i, s:I, s:I, s:I, s:I, s:i, s:I, s:i}", "workers", sc->workers,
                     "max_batch_requests", sc->max_batch_requests, "max_batch_tokens",
                     (json_int_t)sc->max_batch_tokens, "max_batch_kv_bytes",
                     (json_int_t)sc->max_batch_kv_bytes, "max_queue_delay_us",
                     (json_int_t)sc->max_queue_delay_us, "max_stream_wait_us",
                     (json_int_t)sc->max_stream_wait_us, "prefill_chunk_rows",
                     sc->prefill_chunk_rows, "inline_max_macs", (json_int_t)sc->inline_max_macs,
                     "max_queue", sc->max_queue);
}

static json_t *info_object(const attnd_model *m)
{
    json_t *o = base_info_object(m);
    if (o && (json_object_set_new(o, "version", json_integer(m->version)) != 0 ||
              json_object_set_new(o, "kv_dtype", json_string(kv_dtype_name(m->kv_dtype))) != 0 ||
              json_object_set_new(o, "weights_dtype", json_string(m->info.weights_dtype)) != 0 ||
              json_object_set_new(o, "weights_bytes", json_integer((json_int_t)m->info.weights_bytes)) != 0 ||
              json_object_set_new(o, "scheduler", sched_object(&m->sched_cfg)) != 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *base_info_object(const attnd_model *m)
{
    const attn_layer_info *in = &m->info;
    return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b,"
                     " s:{s:b, s:b, s:b, s:b}, s:s, s:s, s:s, s:I,"
                     " s:s, s:o, s:i, s:o, s:o}",
                     "name", m->name, "num_heads", in->num_heads, "head_dim_k", in->head_dim_k,
                     "head_dim_v", in->head_dim_v, "embed_q", in->embed_q, "embed_k",
                     in->embed_k, "embed_v", in->embed_v, "embed_out", in->embed_out,
                     "has_out_proj", in->has_out_proj, "has_bias", "q", in->has_bias_q, "k",
                     in->has_bias_k, "v", in->has_bias_v, "out", in->has_bias_out, "dtype",
                     in->source_dtype[0] ? in->source_dtype : "F32", "file", m->path,
                     "loaded_at", m->loaded_at, "param_count", (json_int_t)in->param_count,
                     "family", attn_family_name(m->family), "layer",
                     int_or_null(m->layer_index >= 0, m->layer_index), "num_kv_heads", attnd_kv_heads(in),
                     "rope", rope_object(&in->rope), "sliding_window",
                     int_or_null(m->sliding_window > 0, m->sliding_window));
}

static char *dump(json_t *j, size_t *len)
{
    if (!j)
        return NULL;
    char *s = attnd_json_dumps(j, JSON_COMPACT); /* NULL if jansson lacked memory */
    json_decref(j);
    if (s)
        *len = strlen(s);
    return s;
}

char *attnd_models_info_json(const attnd_model *m, size_t *len)
{
    return dump(info_object(m), len);
}

char *attnd_models_list_json(attnd_models *ms, size_t *len)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < ms->n; i++) {
        attnd_model *m = attnd_models_acquire(ms, i);
        if (!m)
            continue; /* unloaded */
        int bad = json_array_append_new(arr, info_object(m)) != 0;
        attnd_model_release(m);
        if (bad) {
            json_decref(arr);
            return NULL;
        }
    }
    return dump(arr ? json_pack("{s:o}", "models", arr) : NULL, len);
}

/* ------------------------------------------------------------ the repository API */

/* The slot named name, or -1 (slots' names never change once counted in n). */
static int slot_of(attnd_models *ms, const char *name)
{
    for (int i = 0; i < ms->n; i++)
        if (strcmp(ms->slots[i].spec.name, name) == 0)
            return i;
    return -1;
}

/* 1 when no version of slot i is alive any more (none in the retired list:
 * every replaced or unloaded version is there until its last holder lets go). */
static int slot_versions_gone(attnd_models *ms, int i)
{
    pthread_mutex_lock(&ms->retired_mu);
    const attnd_model *m = ms->retired_head;
    while (m && m->index != i)
        m = m->retired_next;
    pthread_mutex_unlock(&ms->retired_mu);
    return m == NULL;
}

/* A slot for a new name (repo_mu held): an added model's that was unloaded
 * and whose versions are all gone (*reuse 1), else the next unused one (not
 * counted in n until its model loads). Returns its index, or -1 (FULL). */
static int slot_find_free(attnd_models *ms, int *reuse)
{
    for (int i = ms->n_config; i < ms->n; i++) {
        int unloaded;
        pthread_mutex_lock(&ms->mu);
        unloaded = !ms->items[i] && !ms->slots[i].loading;
        pthread_mutex_unlock(&ms->mu);
        if (unloaded && !ms->slots[i].configured && slot_versions_gone(ms, i)) {
            *reuse = 1;
            return i;
        }
    }
    *reuse = 0;
    return ms->n < ms->cap ? ms->n : -1;
}

static void set_loading(attnd_models *ms, int i, int loading, const char *reason)
{
    pthread_mutex_lock(&ms->mu);
    ms->slots[i].loading = loading;
    if (reason)
        snprintf(ms->slots[i].reason, sizeof ms->slots[i].reason, "%s", reason);
    pthread_mutex_unlock(&ms->mu);
}

/* Remembers (reason non-NULL) or forgets a failed load of the new name name. */
static void failed_note(attnd_models *ms, const char *name, const char *reason)
{
    pthread_mutex_lock(&ms->mu);
    int at = -1, oldest = 0;
    for (int k = 0; k < ATTND_MODELS_FAILED_MAX; k++) {
        if (strcmp(ms->failed[k].name, name) == 0)
            at = k;
        if (ms->failed[k].seq < ms->failed[oldest].seq)
            oldest = k;
    }
    if (reason) {
        if (at < 0)
            at = oldest; /* unused entries have seq 0 */
        snprintf(ms->failed[at].name, sizeof ms->failed[at].name, "%s", name);
        snprintf(ms->failed[at].reason, sizeof ms->failed[at].reason, "%s", reason);
        ms->failed[at].seq = ++ms->failed_seq;
    } else if (at >= 0) {
        ms->failed[at].name[0] = '\0';
        ms->failed[at].seq = 0;
    }
    pthread_mutex_unlock(&ms->mu);
}

/* A new name's first version, into slot i (free: see slot_find_free), only
 * kept when it loads: then the slot is the model's (counted in n, named in
 * the metrics, a reused slot's old scheduler freed). A failure leaves the slot
 * as it was and is remembered for the index. Returns the version or NULL. */
static attnd_model *load_new(attnd_models *ms, const attnd_config *cfg, int i, int reuse,
                             const attnd_model_spec *spec, char *err, size_t errlen)
{
    attnd_model_slot *slot = &ms->slots[i];
    attnd_model_slot old = {0};
    if (reuse)
        old = *slot; /* an unloaded model's, nothing of it alive */
    else
        *slot = (attnd_model_slot){.index = i, .metrics = ms->metrics}; /* past n: unseen */
    attnd_model_spec copy;
    if (attnd_config_spec_copy(&copy, spec) != 0) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_lock(&ms->mu);
    snprintf(ms->loading_name, sizeof ms->loading_name, "%s", spec->name);
    pthread_mutex_unlock(&ms->mu);
    /* the scheduler the version makes keeps &ms->slots[i] for its batch hook */
    attnd_model_slot fresh = {.index = i, .metrics = ms->metrics};
    attnd_scheduler *old_sched = slot->sched;
    slot->sched = NULL;
    attnd_sched_config old_sc = slot->sc;
    attnd_model *m = version_load(slot, spec, cfg, ms->metrics, ms->kv_page_bytes, err, errlen);
    pthread_mutex_lock(&ms->mu);
    ms->loading_name[0] = '\0';
    if (!m) {
        slot->sched = old_sched;
        slot->sc = old_sc;
    } else {
        fresh.sched = slot->sched;
        fresh.sc = slot->sc;
        fresh.spec = copy;
        *slot = fresh; /* version 0: publish makes it 1 */
    }
    pthread_mutex_unlock(&ms->mu);
    if (!m) {
        attnd_config_spec_free(&copy);
        failed_note(ms, spec->name, err);
        return NULL;
    }
    failed_note(ms, spec->name, NULL);
    if (reuse) {
        attnd_log(ATTND_LOG_INFO, "model %s takes the slot of %s (unloaded, nothing holds it)",
                  spec->name, old.spec.name);
        attnd_scheduler_free(old_sched); /* idle: every version on it is gone */
        attnd_config_spec_free(&old.spec);
        if (ms->metrics)
            attnd_metrics_rename_model(ms->metrics, i, spec->name);
    } else {
        if (ms->metrics)
            attnd_metrics_name_model(ms->metrics, i, spec->name);
        pthread_mutex_lock(&ms->mu); /* readers see the slot whole */
        ms->n = i + 1;
        pthread_mutex_unlock(&ms->mu);
    }
    return m;
}

attnd_repo_status attnd_models_repo_load(attnd_models *ms, const attnd_config *cfg,
                                         const char *name, const attnd_model_spec *spec,
                                         int *version, char *err, size_t errlen)
{
    pthread_mutex_lock(&ms->repo_mu);
    int i = slot_of(ms, name), reuse = 0;
    attnd_model *m = NULL;
    if (i < 0 && !spec) {
        snprintf(err, errlen, "no model named \"%.80s\" is configured or was loaded; give "
                 "its source: {\"parameters\": {\"path\": ...}}", name);
        pthread_mutex_unlock(&ms->repo_mu);
        return ATTND_REPO_NOT_FOUND;
    }
    if (i < 0) {
        if ((i = slot_find_free(ms, &reuse)) < 0) {
            snprintf(err, errlen, "%d models added at run time are loaded or held by sessions "
                     "(the most a process takes); unload one, or restart attnd with the "
                     "models configured", ATTND_MODELS_ADDED_MAX);
            pthread_mutex_unlock(&ms->repo_mu);
            return ATTND_REPO_FULL;
        }
        m = load_new(ms, cfg, i, reuse, spec, err, errlen);
        if (!m) {
            pthread_mutex_unlock(&ms->repo_mu);
            return ATTND_REPO_LOAD_FAILED;
        }
    } else {
        attnd_model_slot *slot = &ms->slots[i];
        const attnd_model_spec *from = spec ? spec : &slot->spec;
        set_loading(ms, i, 1, NULL);
        m = version_load(slot, from, cfg, ms->metrics, ms->kv_page_bytes, err, errlen);
        if (!m) {
            set_loading(ms, i, 0, err);
            pthread_mutex_unlock(&ms->repo_mu);
            return ATTND_REPO_LOAD_FAILED;
        }
        if (spec && from != &slot->spec)
            slot_set_spec(ms, i, spec); /* out of memory: the old source stays */
    }
    attnd_model *old = publish(ms, i, m);
    *version = m->version;
    set_loading(ms, i, 0, "");
    pthread_mutex_unlock(&ms->repo_mu);
    attnd_log(ATTND_LOG_INFO, "model %s version %d serving (repository load)%s", name,
              *version, old ? "; requests on the one before finish on it" : "");
    retire(ms, old);
    attnd_model_release(old);
    return ATTND_REPO_OK;
}

attnd_repo_status attnd_models_repo_unload(attnd_models *ms, const char *name)
{
    pthread_mutex_lock(&ms->repo_mu);
    int i = slot_of(ms, name);
    attnd_model *old = NULL;
    if (i >= 0) {
        pthread_mutex_lock(&ms->mu);
        old = ms->items[i];
        ms->items[i] = NULL;
        snprintf(ms->slots[i].reason, sizeof ms->slots[i].reason, "unloaded");
        pthread_mutex_unlock(&ms->mu);
        if (ms->metrics)
            attnd_metrics_model_unloaded(ms->metrics, i);
    }
    pthread_mutex_unlock(&ms->repo_mu);
    if (old)
        attnd_log(ATTND_LOG_INFO, "model %s version %d unloaded; requests and sessions "
                  "holding it finish on it", old->name, old->version);
    retire(ms, old);
    attnd_model_release(old); /* freed when the last request on it lets go */
    return i >= 0 ? ATTND_REPO_OK : ATTND_REPO_NOT_FOUND;
}

/* What the index says of reason (a slot's, or a failed load's) to a caller
 * without an admin key: "unloaded" and "" as they are, a load's error only as
 * a failure (it names files and quotes parsers). */
static const char *shown_reason(const char *reason, int reasons)
{
    if (reasons || !*reason || strcmp(reason, "unloaded") == 0)
        return reason;
    return "the last load failed (an admin key sees why)";
}

/* One index entry of slot i (under mu). */
static json_t *index_entry(attnd_models *ms, int i, int reasons)
{
    const attnd_model_slot *slot = &ms->slots[i];
    const char *state = slot->loading ? "LOADING" : ms->items[i] ? "READY" : "UNAVAILABLE";
    json_t *o = json_pack("{s:s, s:s, s:s}", "name", slot->spec.name, "state", state,
                          "reason", shown_reason(slot->reason, reasons));
    char v[16];
    snprintf(v, sizeof v, "%d", ms->items[i] ? ms->items[i]->version : slot->version);
    if (o && slot->version > 0 && json_object_set_new(o, "version", json_string(v)) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *attnd_models_index_json(attnd_models *ms, int ready_only, int reasons, size_t *len)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&ms->mu);
    for (int i = 0; arr && i < ms->n; i++) {
        if (ready_only && !ms->items[i])
            continue;
        if (json_array_append_new(arr, index_entry(ms, i, reasons)) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    if (arr && !ready_only && ms->loading_name[0] &&
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "name", ms->loading_name,
                                             "state", "LOADING", "reason", "")) != 0) {
        json_decref(arr);
        arr = NULL;
    }
    for (int k = 0; arr && !ready_only && k < ATTND_MODELS_FAILED_MAX; k++) {
        if (!ms->failed[k].name[0])
            continue;
        if (json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "name", ms->failed[k].name,
                                                 "state", "UNAVAILABLE", "reason",
                                                 shown_reason(ms->failed[k].reason,
                                                              reasons))) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    pthread_mutex_unlock(&ms->mu);
    return dump(arr, len);
}

/* ------------------------------------------------------------ expansion, inspection */

int attnd_models_expand(attnd_config *cfg, char *err, size_t errlen)
{
    for (int i = 0; i < cfg->n_models; i++) {
        const attnd_model_spec *spec = &cfg->models[i];
        if (!spec->all_layers)
            continue;
        attn_load_options lo = load_options(spec);
        attn_checkpoint_info ci;
        attn_error lerr = {0};
        attn_status st = attn_checkpoint_inspect(spec->path, &lo, &ci, &lerr);
        if (st != ATTN_OK) {
            snprintf(err, errlen, "model '%s': cannot inspect %s: %s%s%s", spec->name,
                     spec->path, attn_strerror(st), lerr.message[0] ? ": " : "", lerr.message);
            return -1;
        }
        int *layers = NULL, n = 0;
        if (attnd_config_layer_list(spec, ci.n_layers, &layers, &n, err, errlen) != 0)
            return -1;
        if (n < 1) {
            free(layers);
            snprintf(err, errlen, "model '%s': %s holds no layers", spec->name, spec->path);
            return -1;
        }
        int rc = attnd_config_expand_layer_list(cfg, i, layers, n, err, errlen);
        free(layers);
        if (rc != 0)
            return -1;
        i += n - 1; /* past the new NAME.k models */
    }
    return 0;
}

static void print_rope(FILE *out, const attn_rope *r)
{
    if (r->style == ATTN_ROPE_NONE) {
        fprintf(out, "rope: none\n");
        return;
    }
    fprintf(out, "rope: %s, theta %g, rotary_dim %d", rope_style_name(r->style), r->theta,
            r->rotary_dim);
    if (r->scaling == ATTN_ROPE_SCALING_LINEAR)
        fprintf(out, ", scaling linear (factor %g)", r->factor);
    else if (r->scaling == ATTN_ROPE_SCALING_LLAMA3)
        fprintf(out, ", scaling llama3 (factor %g, low_freq_factor %g, high_freq_factor %g, "
                "original_max_position_embeddings %d)", r->factor, r->low_freq_factor,
                r->high_freq_factor, r->original_max_position);
    fprintf(out, "\n");
}

int attnd_models_inspect(FILE *out, const char *path, char *err, size_t errlen)
{
    attn_checkpoint_info ci;
    attn_error lerr = {0};
    attn_load_options lo = {.layer = -1};
    attn_status st = attn_checkpoint_inspect(path, &lo, &ci, &lerr);
    if (st != ATTN_OK) {
        snprintf(err, errlen, "%s: %s%s%s", path, attn_strerror(st), lerr.message[0] ? ": " : "",
                 lerr.message);
        return -1;
    }
    fprintf(out, "path: %s\nfamily: %s%s%s%s\n", path, attn_family_name(ci.family),
            ci.model_type[0] ? " (model_type " : "", ci.model_type,
            ci.model_type[0] ? ")" : "");
    fprintf(out, "layers: %d%s\n", ci.n_layers,
            ci.n_layers > 1 ? " (serve one with layer=N, or each with layers=all)" : "");
    fprintf(out, "hidden_size: %d, heads: %d, kv_heads: %d, head_dim: %d\n", ci.hidden_size,
            ci.num_heads, ci.num_kv_heads, ci.head_dim);
    print_rope(out, &ci.rope);
    if (ci.sliding_window > 0)
        fprintf(out, "sliding_window: %d (reported; requests choose their window)\n",
                ci.sliding_window);
    fprintf(out, "dtype: %s, shards: %d, tensors: %zu\n", ci.dtype, ci.n_shards, ci.n_tensors);
    /* What attnd would serve: build the first layer (reads only its tensors). */
    lo.layer = ci.n_layers > 1 ? 0 : -1;
    attn_layer *layer = NULL;
    st = attn_layer_load(path, &lo, &layer, &lerr);
    if (st != ATTN_OK) {
        fprintf(out, "serves: nothing: %s%s%s\n", attn_strerror(st), lerr.message[0] ? ": " : "",
                lerr.message);
        return 0;
    }
    attn_layer_info in;
    attn_layer_get_info(layer, &in);
    fprintf(out, "serves%s: E_q=%d E_k=%d E_v=%d E_out=%d, heads=%d kv_heads=%d d_k=%d d_v=%d, "
            "out_proj %s, biases q/k/v/out %s/%s/%s/%s, %zu parameters (%s), weights %s (%zu bytes)\n",
            ci.n_layers > 1 ? " (layer 0)" : "", in.embed_q, in.embed_k, in.embed_v,
            in.embed_out, in.num_heads, attnd_kv_heads(&in), in.head_dim_k, in.head_dim_v,
            in.has_out_proj ? "yes" : "no", in.has_bias_q ? "yes" : "no",
            in.has_bias_k ? "yes" : "no", in.has_bias_v ? "yes" : "no",
            in.has_bias_out ? "yes" : "no", in.param_count,
            in.source_dtype[0] ? in.source_dtype : "F32", in.weights_dtype, in.weights_bytes);
    attn_layer_free(layer);
    return 0;
}
