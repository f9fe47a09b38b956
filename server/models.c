/* models.c — loads the configured layers, starts one scheduler per model (its
 * slot's, shared by every version: a reload swaps the layer, not the threads),
 * swaps in new versions on reload (reference counted), and describes models as
 * JSON (ModelInfo in proto/openapi.yaml).
 */
#include "models.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonload.h"
#include "log.h"
#include "request.h"

/* Scheduler batch hook: runs on a worker thread after every batch. */
static void on_batch(void *ctx, int n_requests, size_t n_tokens, int64_t compute_us)
{
    attnd_model_slot *slot = ctx;
    (void)compute_us; /* per-request compute time is recorded from each request */
    if (slot->metrics)
        attnd_metrics_batch(slot->metrics, slot->index, n_requests, n_tokens);
}

/* Frees a version: its layer (the last request on it has finished: each holds
 * a reference; the scheduler is the slot's). */
static void version_free(attnd_model *m)
{
    if (!m)
        return;
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
                            .num_kv_heads = spec->kv_heads};
    return lo;
}

static attnd_model *version_load(attnd_model_slot *slot, const attnd_model_spec *spec,
                                 const attnd_config *cfg, attnd_metrics *metrics, char *err,
                                 size_t errlen)
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
    if (smoke_forward(m, err, errlen))
        goto fail;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(m->loaded_at, sizeof m->loaded_at, "%Y-%m-%dT%H:%M:%SZ", &tm);

    attnd_sched_config sc = {
        .max_batch_requests = cfg->max_batch_requests,
        .max_batch_tokens = (size_t)cfg->max_batch_tokens,
        .max_batch_kv_bytes = (size_t)cfg->max_batch_kv_bytes,
        .max_queue_delay_us = cfg->max_queue_delay_us,
        .max_queue = cfg->max_queue,
        .workers = cfg->workers,
    };
    if (!slot->sched) /* the first version: its layer is only the default */
        slot->sched = attnd_scheduler_create(m->layer, &sc, on_batch, slot, serr, sizeof serr);
    if (!slot->sched) {
        snprintf(err, errlen, "model '%s': cannot start its scheduler: %s", spec->name,
                 serr[0] ? serr : "unknown error");
        goto fail;
    }
    m->sched = slot->sched;
    const attn_layer_info *in = &m->info;
    char layer[24] = "";
    if (m->layer_index >= 0)
        snprintf(layer, sizeof layer, " layer %d", m->layer_index);
    attnd_log(ATTND_LOG_INFO,
              "model %s loaded from %s (%s%s) in %.1f ms: heads=%d kv_heads=%d d_k=%d d_v=%d "
              "E_q=%d E_k=%d E_v=%d E_out=%d out_proj=%s rope=%s dtype=%s params=%zu; "
              "scheduler: %d workers",
              m->name, m->path, attn_family_name(m->family), layer, m->load_ms, in->num_heads,
              attnd_kv_heads(in), in->head_dim_k, in->head_dim_v, in->embed_q, in->embed_k,
              in->embed_v, in->embed_out, in->has_out_proj ? "yes" : "no",
              rope_style_name(in->rope.style), in->source_dtype[0] ? in->source_dtype : "F32",
              in->param_count, cfg->workers);
    return m;
fail:
    version_free(m);
    return NULL;
}

int attnd_models_load(attnd_models *ms, const attnd_config *cfg, attnd_metrics *metrics,
                      char *err, size_t errlen)
{
    memset(ms, 0, sizeof *ms);
    ms->metrics = metrics;
    ms->items = calloc((size_t)cfg->n_models, sizeof *ms->items);
    ms->slots = calloc((size_t)cfg->n_models, sizeof *ms->slots);
    if (!ms->items || !ms->slots || pthread_mutex_init(&ms->mu, NULL) != 0) {
        free(ms->items);
        free(ms->slots);
        ms->items = NULL;
        ms->slots = NULL;
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    ms->mu_ready = 1;
    ms->n_slots = cfg->n_models;
    for (int i = 0; i < cfg->n_models; i++) {
        ms->slots[i] = (attnd_model_slot){.index = i, .metrics = metrics};
        attnd_model *m = version_load(&ms->slots[i], &cfg->models[i], cfg, metrics, err, errlen);
        if (!m)
            goto fail;
        ms->items[i] = m;
        ms->n = i + 1;
        if (metrics)
            attnd_metrics_set_model_info(metrics, i, &m->info);
    }
    return 0;
fail:
    attnd_models_free(ms);
    return -1;
}

int attnd_models_reload(attnd_models *ms, const attnd_config *cfg, char *err, size_t errlen)
{
    if (ms->n <= 0 || cfg->n_models != ms->n) {
        snprintf(err, errlen, "reload: %d models configured, %d served; adding or removing "
                 "models needs a restart", cfg->n_models, ms->n);
        return -1;
    }
    for (int i = 0; i < ms->n; i++) {
        if (strcmp(cfg->models[i].name, ms->items[i]->name) != 0) {
            snprintf(err, errlen, "reload: model %d is now '%s', was '%s'; renaming or "
                     "reordering models needs a restart", i, cfg->models[i].name,
                     ms->items[i]->name);
            return -1;
        }
    }
    attnd_model **fresh = calloc((size_t)ms->n, sizeof *fresh);
    if (!fresh) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < ms->n && rc == 0; i++)
        if (!(fresh[i] = version_load(&ms->slots[i], &cfg->models[i], cfg, ms->metrics, err,
                                      errlen)))
            rc = -1;
    if (rc == 0) {
        pthread_mutex_lock(&ms->mu);
        for (int i = 0; i < ms->n; i++) { /* swap: fresh[i] now holds the old one */
            attnd_model *old = ms->items[i];
            ms->items[i] = fresh[i];
            fresh[i] = old;
        }
        pthread_mutex_unlock(&ms->mu);
        for (int i = 0; i < ms->n; i++)
            if (ms->metrics)
                attnd_metrics_set_model_info(ms->metrics, i, &ms->items[i]->info);
    }
    /* Success: drop the registry's references to the old versions (each is
     * freed once its last request finishes). Failure: free what was loaded. */
    for (int i = 0; i < ms->n; i++)
        attnd_model_release(fresh[i]);
    free(fresh);
    return rc;
}

attnd_model *attnd_models_acquire(attnd_models *ms, int i)
{
    if (i < 0 || i >= ms->n)
        return NULL;
    pthread_mutex_lock(&ms->mu);
    attnd_model *m = ms->items[i];
    attnd_model_retain(m);
    pthread_mutex_unlock(&ms->mu);
    return m;
}

attnd_model *attnd_models_find(attnd_models *ms, const char *name, size_t len)
{
    attnd_model *found = NULL;
    pthread_mutex_lock(&ms->mu); /* items[i] may be swapped (and freed) by a reload */
    for (int i = 0; i < ms->n && !found; i++) {
        attnd_model *m = ms->items[i];
        if (strlen(m->name) == len && memcmp(m->name, name, len) == 0) {
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
    int d = ms->items[i]->sched ? attnd_scheduler_queue_depth(ms->items[i]->sched) : -1;
    pthread_mutex_unlock(&ms->mu);
    return d;
}

void attnd_models_drain(attnd_models *ms)
{
    for (int i = 0; i < ms->n; i++)
        attnd_scheduler_drain(ms->slots[i].sched);
}

void attnd_models_free(attnd_models *ms)
{
    for (int i = 0; i < ms->n; i++)
        attnd_model_release(ms->items[i]);
    /* The versions pinned by sessions are gone too (main frees the sessions
     * first): no request can reach a scheduler now. */
    for (int i = 0; ms->slots && i < ms->n_slots; i++)
        attnd_scheduler_free(ms->slots[i].sched);
    free(ms->slots);
    if (ms->mu_ready)
        pthread_mutex_destroy(&ms->mu);
    free(ms->items);
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

static json_t *info_object(const attnd_model *m)
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
        int bad = json_array_append_new(arr, info_object(m)) != 0;
        attnd_model_release(m);
        if (bad) {
            json_decref(arr);
            return NULL;
        }
    }
    return dump(arr ? json_pack("{s:o}", "models", arr) : NULL, len);
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
        int n = ci.n_layers;
        if (attnd_config_expand_layers(cfg, i, n, err, errlen) != 0)
            return -1;
        i += n - 1; /* past the new NAME.0 .. NAME.n-1 */
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
            "out_proj %s, biases q/k/v/out %s/%s/%s/%s, %zu parameters (%s)\n",
            ci.n_layers > 1 ? " (layer 0)" : "", in.embed_q, in.embed_k, in.embed_v,
            in.embed_out, in.num_heads, attnd_kv_heads(&in), in.head_dim_k, in.head_dim_v,
            in.has_out_proj ? "yes" : "no", in.has_bias_q ? "yes" : "no",
            in.has_bias_k ? "yes" : "no", in.has_bias_v ? "yes" : "no",
            in.has_bias_out ? "yes" : "no", in.param_count,
            in.source_dtype[0] ? in.source_dtype : "F32");
    attn_layer_free(layer);
    return 0;
}
