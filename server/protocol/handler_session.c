/* handler_session.c — the streaming-session routes (handler_session.h): the
 * create body (jansson: it is read once per session), GET/DELETE answers, the
 * append's two halves around the scheduler, and the one table that turns the
 * store's results into statuses. Every session keeps a reference to the model
 * version it was created on, so a SIGHUP reload never changes the layer under
 * a cache.
 */
#include "protocol/handler_session.h"

#include <assert.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/codec.h"
#include "protocol/codec_v2.h"
#include "protocol/jsonbuf.h"
#include "core/jsonload.h"
#include "protocol/jsonnum.h"
#include "protocol/jsonscan.h"
#include "engine/kvlayout.h"
#include "engine/kvpool.h"
#include "core/log.h"

/* An append's state from decode to end (the exchange's state). */
typedef struct attnd_session_call {
    attnd_session *sess;  /* the append slot, held from decode until finish/end */
    float *weights;       /* owned: (h or 1, T, S) when need_weights            */
    int64_t *positions;   /* owned: (T) absolute positions, rotary models only  */
    int binary;           /* a v2 binary-tensor append: answer the same way     */
    attnd_v2_call v2;     /* its outputs (binary only)                          */
    int t;                /* positions this append adds                         */
    int64_t start_ns;
} attnd_session_call;

/* ------------------------------------------------------------ results and store */

/* The store's results on the wire. */
static const struct {
    int status;
    const char *code;
} wire[] = {
    [ATTND_SESSION_OK] = {200, ""},
    [ATTND_SESSION_NOT_FOUND] = {404, "session_not_found"},
    [ATTND_SESSION_EXPIRED] = {410, "session_expired"},
    [ATTND_SESSION_BUSY] = {409, "session_busy"},
    [ATTND_SESSION_INVALID] = {400, "invalid_value"},
    [ATTND_SESSION_TOO_LARGE] = {413, "limit_exceeded"},
    [ATTND_SESSION_CACHE_FULL] = {503, "kv_cache_full"},
    [ATTND_SESSION_TOO_MANY] = {503, "too_many_sessions"},
    [ATTND_SESSION_INTERNAL] = {500, "internal"},
    [ATTND_SESSION_OUT_OF_ORDER] = {409, "layer_out_of_order"},
};

/* *e for a store result other than OK. Returns -1. */
static int store_error(const attnd_session_error *se, attnd_http_error *e)
{
    unsigned r = (unsigned)se->result;
    if (r >= sizeof wire / sizeof wire[0] || r == ATTND_SESSION_OK)
        return attnd_http_fail(e, 500, "internal", "", "session store: result %u", r);
    return attnd_http_fail(e, wire[r].status, wire[r].code, se->field, "%s", se->message);
}

static void release_model(void *m) { attnd_model_release(m); }
static void retain_model(void *m) { attnd_model_retain(m); }

/* The page size: --kv-page-bytes, or the largest the loaded models wish for. */
static size_t page_size(const attnd_config *cfg, attnd_models *models)
{
    if (cfg->kv_page_bytes > 0) return (size_t)cfg->kv_page_bytes;
    size_t page = 0;
    for (int i = 0; i < models->n; i++) {
        attnd_model *m = attnd_models_acquire(models, i);
        size_t want = m ? attnd_kv_page_wish(m->layer, m->kv_dtype) : 0;
        if (want > page) page = want;
        attnd_model_release(m);
    }
    return page ? page : ATTND_KV_MIN_PAGE;
}

/* Logs the pool and each model's blocks on it. */
static void log_pool(attnd_sessions *st, attnd_models *models, size_t limit, const char *from)
{
    size_t cap = 0, page = attnd_sessions_page_bytes(st);
    attnd_sessions_stats(st, NULL, NULL, &cap);
    if (limit)
        attnd_log(ATTND_LOG_INFO, "KV cache: %.1f MiB page pool (1/%d of %.1f GiB, %s; --kv-cache-bytes "
                  "sets it), %zu pages of %zu bytes", (double)cap / 1048576.0, ATTND_KVPOOL_DEFAULT_SHARE,
                  (double)limit / 1073741824.0, from, cap / page, page);
    else
        attnd_log(ATTND_LOG_INFO, "KV cache: %.1f MiB page pool (--kv-cache-bytes), %zu pages of %zu bytes",
                  (double)cap / 1048576.0, cap / page, page);
    static const char *const dtypes[] = {"f32", "f16", "bf16", "int8"};
    for (int i = 0; i < models->n; i++) {
        attnd_model *m = attnd_models_acquire(models, i);
        attnd_kv_geometry g;
        size_t row = 0;
        if (m && attnd_kv_geometry_fit(m->layer, m->kv_dtype, page, &g, &row) == 0)
            attnd_log(ATTND_LOG_INFO, "KV cache: model %s: %d rows of K and V (%s) per page, %.0f%% of it used",
                      m->name, g.block_rows, dtypes[m->kv_dtype],
                      100.0 * (double)(g.v_offset + g.v_bytes) / (double)page);
        else if (m)
            attnd_log(ATTND_LOG_WARN, "KV cache: model %s: one row of K and V (%zu bytes) is larger than a page "
                      "(%zu bytes): it cannot open sessions (set --kv-page-bytes)", m->name, row, page);
        attnd_model_release(m);
    }
}

attnd_sessions *attnd_session_store_create(const attnd_config *cfg, attnd_models *models,
                                           attnd_metrics *metrics, char *err, size_t errlen)
{
    size_t limit = 0;
    const char *from = "";
    size_t pool = cfg->kv_cache_bytes > 0 ? (size_t)cfg->kv_cache_bytes : attnd_kvpool_default_bytes(&limit, &from);
    attnd_sessions_config sc = {
        .budget_bytes = pool,
        .page_bytes = page_size(cfg, models),
        .max_sessions = cfg->max_sessions,
        .ttl_s = cfg->session_ttl_s,
        .max_length = cfg->max_seq_len,
        .release_model = release_model,
        .retain_model = retain_model,
        .metrics = metrics,
        .replica_name = cfg->replica_name,
    };
    attnd_sessions *st = attnd_sessions_create(&sc, err, errlen);
    if (st && attnd_sessions_start_sweeper(st, 1000) != 0) {
        attnd_sessions_free(st);
        snprintf(err, errlen, "cannot start the session sweeper thread");
        st = NULL;
    }
    if (st) {
        log_pool(st, models, limit, from);
        if (metrics) {
            size_t cap = 0;
            attnd_sessions_stats(st, NULL, NULL, &cap);
            attnd_metrics_sessions_set(metrics, 0, 0);
            attnd_metrics_kv_capacity_set(metrics, (int64_t)cap);
        }
    }
    return st;
}

/* The {id} of a /v1/sessions/{id}[/append] path, copied (at most cap - 1 bytes). */
static void path_id(const attnd_exchange *x, char *id, size_t cap)
{
    size_t n = x->param_len;
    snprintf(id, cap, "%.*s", (int)(n < cap ? n : cap - 1), x->param ? x->param : "");
}

static const char *kind_name(attnd_session_kind k)
{
    return k == ATTND_SESSION_CROSS ? "cross" : "self";
}

static void reply_json(attnd_reply *out, int status, attnd_jsonbuf *b)
{
    size_t len = 0;
    char *body = attnd_jb_finish(b, &len);
    attnd_reply_body(out, status, attnd_json_type, body, len);
}

/* Answers 201 with b, the description of s (acquired: released here). With no
 * memory for the answer, the client would never learn s's id: s is deleted and
 * the answer is 500. */
static void reply_created(attnd_exchange *x, attnd_session *s, attnd_jsonbuf *b,
                          attnd_reply *out)
{
    size_t len = 0;
    char *body = attnd_jb_finish(b, &len);
    char id[ATTND_SESSION_ID_MAX + 1];
    memcpy(id, s->id, sizeof id);
    attnd_sessions_release(x->app->sessions, s, 0, NULL, NULL);
    if (body) {
        attnd_reply_body(out, 201, attnd_json_type, body, len);
        return;
    }
    attnd_sessions_delete(x->app->sessions, id, NULL);
    attnd_http_error e;
    attnd_reply_error(out, attnd_http_error_set(&e, 500, "internal", "",
                                                "out of memory writing the answer"));
}

/* ------------------------------------------------------------ create */

/* The create body, decoded. key/value are malloc'd (rows × width). */
typedef struct create_body {
    long long window, ttl_s;
    float *key, *value;
    int key_rows, value_rows;
} create_body;

static int get_int(const char *name, const json_t *v, long long min, long long max,
                   long long *out, attnd_http_error *e)
{
    if (!json_is_integer(v))
        return attnd_http_fail(e, 400, "invalid_type", name, "%s must be an integer",
                               name);
    long long x = json_integer_value(v);
    if (x < min || x > max)
        return attnd_http_fail(e, 400, "invalid_value", name,
                               "%s must be in %lld..%lld, got %lld", name, min, max, x);
    *out = x;
    return 0;
}

/* A rows × width matrix of numbers (1 <= rows <= max_rows) into *out (malloc'd). */
static int get_matrix(const char *name, const json_t *v, int width, int max_rows, float **out,
                      int *rows, attnd_http_error *e)
{
    if (!json_is_array(v) || json_array_size(v) == 0)
        return attnd_http_fail(e, 400, json_is_array(v) ? "invalid_shape" : "invalid_type",
                               name, "%s must be a non-empty array of rows", name);
    size_t n = json_array_size(v);
    if (n > (size_t)max_rows)
        return attnd_http_fail(e, 413, "limit_exceeded", name,
                               "%s has %zu rows, max_seq_len is %d", name, n, max_rows);
    float *m = malloc(n * (size_t)width * sizeof *m);
    if (!m)
        return attnd_http_fail(e, 500, "internal", "", "out of memory");
    char field[64];
    for (size_t i = 0; i < n; i++) {
        const json_t *row = json_array_get(v, i);
        snprintf(field, sizeof field, "%s[%zu]", name, i);
        if (!json_is_array(row) || json_array_size(row) != (size_t)width) {
            attnd_http_error_set(e, 400, json_is_array(row) ? "invalid_shape" : "invalid_type",
                                 field, "expected an array of %d numbers", width);
            goto fail;
        }
        for (int j = 0; j < width; j++) {
            const json_t *x = json_array_get(row, (size_t)j);
            snprintf(field, sizeof field, "%s[%zu][%d]", name, i, j);
            if (!json_is_number(x)) {
                attnd_http_error_set(e, 400, "invalid_type", field, "expected a number");
                goto fail;
            }
            float *dst = &m[i * (size_t)width + (size_t)j];
            if (attnd_json_double_to_float(json_number_value(x), dst)) {
                attnd_http_error_set(e, 400, "non_finite", field, "%g does not fit in float32",
                                     json_number_value(x));
                goto fail;
            }
        }
    }
    *out = m;
    *rows = (int)n;
    return 0;
fail:
    free(m);
    return -1;
}

static int create_field(attnd_app *app, const attn_layer_info *in, const char *k,
                        const json_t *v, create_body *cb, attnd_http_error *e)
{
    int max = app->cfg->max_seq_len;
    if (json_is_null(v))
        return 0;
    if (strcmp(k, "window") == 0)
        return get_int(k, v, 0, max, &cb->window, e);
    if (strcmp(k, "ttl_s") == 0)
        return get_int(k, v, 1, INT_MAX, &cb->ttl_s, e);
    if (strcmp(k, "key") == 0)
        return get_matrix(k, v, in->embed_k, max, &cb->key, &cb->key_rows, e);
    if (strcmp(k, "value") == 0)
        return get_matrix(k, v, in->embed_v, max, &cb->value, &cb->value_rows, e);
    return attnd_http_fail(e, 400, "unknown_field", k,
                           "unknown field \"%s\": a session takes window, ttl_s, key and "
                           "value", k);
}

/* Parses and checks the create body. Returns 0, or -1 with *e. */
static int decode_create(attnd_exchange *x, const attn_layer_info *in, create_body *cb,
                         attnd_http_error *e)
{
    attnd_app *app = x->app;
    const char *body = x->body;
    size_t len = x->body_len;
    if (x->reserve && x->reserve(x, attnd_json_tree_bound(body, len), e) != 0)
        return -1; /* the tree jansson is about to build counts against the budget */
    json_error_t je;
    int nomem = 0;
    json_t *root = len ? attnd_json_loadb(body, len, JSON_REJECT_DUPLICATES, &je, &nomem)
                       : (nomem = 1, json_object()); /* NULL only for want of memory */
    if (!root && nomem)
        return attnd_http_fail(e, 500, "internal", "", "out of memory parsing the body");
    if (!root && attnd_json_nonfinite_error(body, len, je.position, e) != 0)
        return -1;
    if (!root)
        return attnd_http_fail(e, 400, "invalid_json", "",
                               "invalid JSON at line %d, column %d: %s", je.line, je.column,
                               je.text);
    int rc = 0;
    const char *k;
    json_t *v;
    if (!json_is_object(root)) {
        attnd_http_error_set(e, 400, "invalid_type", "", "the body must be a JSON object");
        rc = -1;
    } else
        json_object_foreach(root, k, v) {
            if ((rc = create_field(app, in, k, v, cb, e)) != 0)
                break;
        }
    json_decref(root);
    if (rc != 0)
        return -1;
    if (cb->value && !cb->key)
        return attnd_http_fail(e, 400, "invalid_value", "value", "value given without key");
    if (cb->key && !cb->value && in->embed_k != in->embed_v)
        return attnd_http_fail(e, 400, "invalid_value", "value",
                               "value is required: the model's E_k=%d differs from E_v=%d",
                               in->embed_k, in->embed_v);
    if (cb->value && cb->value_rows != cb->key_rows)
        return attnd_http_fail(e, 400, "invalid_shape", "value",
                               "value has %d rows, key has %d", cb->value_rows,
                               cb->key_rows);
    if (cb->key && in->rope.style != ATTN_ROPE_NONE)
        return attnd_http_fail(e, 400, "unsupported", "key",
                               "this model has rotary position embeddings: a cross session's "
                               "memory has no positions; create a self session (no key)");
    if (cb->key && cb->window)
        return attnd_http_fail(e, 400, "invalid_value", "window",
                               "window applies to self sessions; a cross session (key "
                               "given) attends to its whole memory");
    if (!cb->key && (in->embed_k != in->embed_q || in->embed_v != in->embed_q))
        return attnd_http_fail(e, 400, "invalid_value", "key",
                               "this model needs key (and value): E_q=%d, E_k=%d, E_v=%d, "
                               "so only cross sessions work with it", in->embed_q,
                               in->embed_k, in->embed_v);
    return 0;
}

static void put_session_head(attnd_jsonbuf *b, const char *id, const char *model,
                             attnd_session_kind kind, int window, int ttl_s)
{
    attnd_jb_puts(b, "{\"id\":");
    attnd_jb_string(b, id);
    attnd_jb_puts(b, ",\"model\":");
    attnd_jb_string(b, model);
    attnd_jb_puts(b, ",\"kind\":");
    attnd_jb_string(b, kind_name(kind));
    attnd_jb_puts(b, ",\"window\":");
    attnd_jb_i64(b, window);
    attnd_jb_puts(b, ",\"ttl_s\":");
    attnd_jb_i64(b, ttl_s);
}

/* The largest |x| of rows × width floats (all finite: the decoder checked). */
static float max_abs(const float *m, size_t n)
{
    float best = 0;
    for (size_t i = 0; i < n; i++)
        best = fabsf(m[i]) > best ? fabsf(m[i]) : best;
    return best;
}

/* One-shot cross-attention over one query row of q's, one key row of k's and
 * one value row of v's: what the library answers is what it answers any
 * one-shot request whose largest |query|, |key|, |value| are q, k, v, since
 * its overflow checks bound every intermediate from those maxima alone
 * (lib/validate.c). Returns its status (ATTN_ERR_LIMIT: would overflow). */
static attn_status probe(const attnd_model *m, float q, float k, float v, attn_error *ae)
{
    const attn_layer_info *in = &m->info;
    size_t n = (size_t)in->embed_q + (size_t)in->embed_k + (size_t)in->embed_v +
               (size_t)in->embed_out;
    float *buf = malloc(n * sizeof *buf);
    if (!buf) {
        snprintf(ae->message, sizeof ae->message, "out of memory checking the memory");
        return ae->code = ATTN_ERR_NOMEM;
    }
    float *qr = buf, *kr = qr + in->embed_q, *vr = kr + in->embed_k, *out = vr + in->embed_v;
    for (int i = 0; i < in->embed_q; i++)
        qr[i] = q;
    for (int i = 0; i < in->embed_k; i++)
        kr[i] = k;
    for (int i = 0; i < in->embed_v; i++)
        vr[i] = v;
    attn_seq s = {.t = 1, .s = 1, .query = qr, .key = kr, .value = vr, .output = out};
    attn_status st = attn_forward(m->layer, &s, 1, NULL, NULL, ae);
    free(buf);
    return st;
}

/* A cross session's memory is checked as one-shot cross-attention with the
 * same key/value would be: refused (the library's status) when even a zero
 * query would overflow (the output, the projected memory); else *limit gets the
 * largest |query| number the one-shot check accepts beside this memory, found
 * by bisection over float32 bit patterns (monotone for positive floats; ~31
 * probes of one row each, once per session). Appends are held to *limit, so
 * their scores cannot overflow where the one-shot request would answer 413. */
static attn_status memory_bound(const attnd_model *m, const create_body *cb, float *limit,
                                attn_error *ae)
{
    const attn_layer_info *in = &m->info;
    float mk = max_abs(cb->key, (size_t)cb->key_rows * (size_t)in->embed_k);
    float mv = cb->value ? max_abs(cb->value, (size_t)cb->value_rows * (size_t)in->embed_v) : mk;
    attn_status st = probe(m, 0.0f, mk, mv, ae);
    if (st != ATTN_OK)
        return st;
    uint32_t lo = 0, hi = 0x7f7fffffu; /* 0 and FLT_MAX */
    float f;
    memcpy(&f, &hi, sizeof f);
    attn_error scratch;
    if (probe(m, f, mk, mv, &scratch) == ATTN_OK)
        lo = hi;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        memcpy(&f, &mid, sizeof f);
        if (probe(m, f, mk, mv, &scratch) == ATTN_OK)
            lo = mid;
        else
            hi = mid;
    }
    memcpy(limit, &lo, sizeof *limit);
    return ATTN_OK;
}

/* ------------------------------------------------------------ what a kv dtype holds */

/* The largest |x| a kv dtype stores as it is: f16 saturates past 65504 (a value
 * stored as +-65504 reached it), bf16 rounds past its largest finite value to
 * infinity; int8 (a float32 scale per block and KV head) and f32 hold every
 * finite value (int8 coarsely, relative to the block's largest). */
static float kv_dtype_max(attn_kv_dtype d)
{
    return d == ATTN_KV_F16 ? 65504.0f : d == ATTN_KV_BF16 ? 0x1.fep127f : FLT_MAX;
}

static const char *kv_dtype_label(attn_kv_dtype d)
{
    return d == ATTN_KV_F16 ? "f16" : d == ATTN_KV_BF16 ? "bf16" : d == ATTN_KV_INT8 ? "int8" : "f32";
}

/* 0 when the projected keys k and values v (rows × the model's K / V row
 * widths) fit the model's kv dtype (reached: what is stored at the limit, an
 * append's read-back), else -1 with a 400 naming field, the dtype and its limit. */
static int kv_check(const attnd_model *m, const float *k, const float *v, size_t rows, int stored,
                    const char *field, const char *what, attnd_http_error *e)
{
    const float lim = kv_dtype_max(m->kv_dtype);
    if (m->kv_dtype != ATTN_KV_F16 && m->kv_dtype != ATTN_KV_BF16)
        return 0;
    const size_t rk = (size_t)attnd_kv_heads(&m->info) * (size_t)m->info.head_dim_k;
    const size_t rv = (size_t)attnd_kv_heads(&m->info) * (size_t)m->info.head_dim_v;
    const float mk = max_abs(k, rows * rk), mv = max_abs(v, rows * rv);
    const int over = stored && m->kv_dtype == ATTN_KV_F16 ? (mk >= lim || mv >= lim)
                                                          : (!(mk <= lim) || !(mv <= lim));
    if (!over)
        return 0;
    char seen[64] = "";
    if (!stored)
        snprintf(seen, sizeof seen, " (largest |%s| %g)", mk >= mv ? "key" : "value",
                 (double)(mk > mv ? mk : mv));
    return attnd_http_fail(e, 400, "invalid_value", field,
                           "%s projected keys or values%s %s the session's kv_dtype %s, which "
                           "holds |x| <= %g; nothing was stored (model %s: use kv_dtype f32%s, "
                           "or smaller inputs)", what, seen, stored ? "reach the limit of" :
                           "overflow", kv_dtype_label(m->kv_dtype), (double)lim, m->name,
                           m->kv_dtype == ATTN_KV_F16 ? " or bf16" : "");
}

/* After a self session's append was computed, before it is committed: the K
 * and V rows it wrote, read back, must not have reached the dtype's limit (the
 * library stores f16 overflow as +-65504 and answers 200 on it: 87 % off at
 * |x| ~ 1e5). Returns 0, or -1 with a 400 (the append is then not committed:
 * nothing appended). */
static int append_kv_check(attnd_app *app, const attnd_model *m, attnd_session *s,
                           const attn_seq *q, int t, attnd_http_error *e)
{
    if ((m->kv_dtype != ATTN_KV_F16 && m->kv_dtype != ATTN_KV_BF16) || !q->cache_append || t <= 0)
        return 0;
    const size_t rk = (size_t)attnd_kv_heads(&m->info) * (size_t)m->info.head_dim_k;
    const size_t rv = (size_t)attnd_kv_heads(&m->info) * (size_t)m->info.head_dim_v;
    float *k = malloc((size_t)t * rk * sizeof *k), *v = malloc((size_t)t * rv * sizeof *v);
    attnd_session_kv kv;
    attnd_sessions_kv(app->sessions, s, &kv);
    attn_kv_cache cache = {.k = kv.k, .v = kv.v, .dtype = m->kv_dtype, .block_rows = kv.block_rows,
                           .block_table = kv.table, .block_stride = kv.stride};
    attn_error ae = {0};
    int rc = 0;
    if (!k || !v)
        rc = attnd_http_fail(e, 500, "internal", "", "out of memory checking the KV rows");
    else if (attn_kv_load(m->layer, &cache, q->cache_len, t, k, v, &ae) != ATTN_OK)
        rc = attnd_http_fail(e, 500, "internal", "", "reading the KV rows back: %s", ae.message);
    else
        rc = kv_check(m, k, v, (size_t)t, 1, "query", "this append's", e);
    free(k);
    free(v);
    return rc;
}

/* A cross session's memory: projected once, then stored on its pages in the
 * model's kv dtype. */
static attn_status project_memory(attnd_sessions *st, const attnd_model *m, const create_body *cb,
                                  attnd_session *s, attn_error *ae)
{
    const float *value = cb->value ? cb->value : cb->key;
    const size_t rk = (size_t)attnd_kv_heads(&m->info) * (size_t)m->info.head_dim_k;
    const size_t rv = (size_t)attnd_kv_heads(&m->info) * (size_t)m->info.head_dim_v;
    float *k = malloc((size_t)cb->key_rows * rk * sizeof *k);
    float *v = malloc((size_t)cb->key_rows * rv * sizeof *v);
    attn_status status = k && v ? attn_project_kv(m->layer, cb->key, value, cb->key_rows, k, v, ae)
                                : ATTN_ERR_NOMEM;
    attnd_session_kv kv;
    attnd_sessions_kv(st, s, &kv);
    attn_kv_cache cache = {.k = kv.k, .v = kv.v, .dtype = m->kv_dtype, .block_rows = kv.block_rows,
                           .block_table = kv.table, .block_stride = kv.stride};
    attnd_http_error he;
    if (status == ATTN_OK && kv_check(m, k, v, (size_t)cb->key_rows, 0, "key", "the memory's",
                                      &he) != 0) {
        snprintf(ae->message, sizeof ae->message, "%.*s", (int)sizeof ae->message - 1,
                 he.message);
        status = ATTN_ERR_INVALID_ARG; /* 400 */
    }
    if (status == ATTN_OK)
        status = attn_kv_store(m->layer, &cache, 0, cb->key_rows, k, v, ae);
    free(k);
    free(v);
    return status;
}

/* The open parameters of a session on model m, its blocks fitted to the
 * store's pages. Returns 0, or -1 with *e (a row larger than a page). */
static int session_params(attnd_app *app, attnd_model *m, const create_body *cb,
                          attnd_session_params *p, attnd_http_error *e)
{
    attnd_kv_geometry g;
    size_t row = 0, page = attnd_sessions_page_bytes(app->sessions);
    if (attnd_kv_geometry_fit(m->layer, m->kv_dtype, page, &g, &row) != 0)
        return attnd_http_fail(e, 500, "internal", "",
                               "model %s: one row of K and V (%zu bytes) is larger than a KV page "
                               "(%zu bytes): restart with --kv-page-bytes >= %zu", m->name, row, page, row);
    *p = (attnd_session_params){
        .kind = cb->key ? ATTND_SESSION_CROSS : ATTND_SESSION_SELF,
        .window = (int)cb->window,
        .ttl_s = (int)cb->ttl_s,
        .block_rows = g.block_rows,
        .k_block_bytes = g.v_offset,
        .v_block_bytes = g.v_bytes,
        .rows = cb->key_rows,
        .model_name = m->name,
        .model = m,
    };
    return 0;
}

static void create(attnd_exchange *x, attnd_reply *out)
{
    attnd_app *app = x->app;
    attnd_model *m = x->model;
    const attn_layer_info *in = &m->info;
    create_body cb = {0};
    attnd_http_error e;
    attnd_session_error se;
    attnd_session *s = NULL;
    attnd_session_params p;
    if (decode_create(x, in, &cb, &e) != 0 || session_params(app, m, &cb, &p, &e) != 0)
        goto fail;
    attnd_model_retain(m);
    if (attnd_sessions_open(app->sessions, &p, &s, &se) != ATTND_SESSION_OK) {
        attnd_model_release(m);
        store_error(&se, &e);
        goto fail;
    }
    if (cb.key) { /* once, here on the HTTP thread: creation is rare, appends are many */
        attn_error ae = {0};
        attn_status st = memory_bound(m, &cb, &s->query_limit, &ae);
        if (st == ATTN_OK)
            st = project_memory(app->sessions, m, &cb, s, &ae);
        if (st != ATTN_OK) { /* the statuses one-shot cross-attention answers with */
            char id[ATTND_SESSION_ID_MAX + 1];
            memcpy(id, s->id, sizeof id);
            attnd_sessions_release(app->sessions, s, 0, NULL, NULL);
            attnd_sessions_delete(app->sessions, id, NULL);
            attnd_lib_error(st, &ae, "key", &e);
            goto fail;
        }
    }
    attnd_jsonbuf b = {0};
    put_session_head(&b, s->id, m->name, s->kind, s->window, s->ttl_s);
    attnd_jb_puts(&b, ",\"length\":0,\"max_length\":");
    if (s->kind == ATTND_SESSION_SELF && s->window == 0)
        attnd_jb_i64(&b, app->cfg->max_seq_len);
    else
        attnd_jb_puts(&b, "null");
    attnd_jb_puts(&b, ",\"cached\":");
    attnd_jb_i64(&b, s->rows);
    attnd_jb_putc(&b, '}');
    reply_created(x, s, &b, out);
    free(cb.key);
    free(cb.value);
    return;
fail:
    free(cb.key);
    free(cb.value);
    attnd_reply_error(out, &e);
}

/* ------------------------------------------------------------ GET, DELETE */

/* One session's description (GET /v1/sessions/{id}, and each entry of the
 * list); a sequence's layers when length/rows are given (GET), else its
 * num_layers. */
static void put_info(attnd_jsonbuf *b, const attnd_session_info *si, const int64_t *length,
                     const int *rows)
{
    put_session_head(b, si->id, si->model_name, si->kind, si->window, si->ttl_s);
    attnd_jb_puts(b, ",\"length\":");
    attnd_jb_i64(b, (long long)si->length);
    attnd_jb_puts(b, ",\"cached\":");
    attnd_jb_i64(b, si->rows);
    attnd_jb_puts(b, ",\"bytes\":");
    attnd_jb_i64(b, (long long)si->bytes);
    attnd_jb_puts(b, ",\"blocks\":");
    attnd_jb_i64(b, si->blocks);
    attnd_jb_puts(b, ",\"shared_blocks\":");
    attnd_jb_i64(b, si->shared_blocks);
    attnd_jb_printf(b, ",\"idle_s\":%.3f,\"busy\":%s", si->idle_s,
                    si->busy ? "true" : "false");
    if (si->n_layers > 0) { /* a sequence */
        attnd_jb_printf(b, ",\"num_layers\":%d", si->n_layers);
        if (length) { /* each layer's length */
            attnd_jb_puts(b, ",\"layers\":[");
            for (int l = 0; l < si->n_layers; l++)
                attnd_jb_printf(b, "%s{\"layer\":%d,\"length\":%lld,\"cached\":%d}", l ? "," : "",
                                l, (long long)length[l], rows[l]);
            attnd_jb_putc(b, ']');
        }
    }
    attnd_jb_putc(b, '}');
}

static void get_info(attnd_app *app, const char *id, attnd_reply *out)
{
    attnd_session_info si;
    attnd_session_error se;
    attnd_http_error e;
    int64_t length[ATTND_SESSION_LAYERS_MAX];
    int rows[ATTND_SESSION_LAYERS_MAX];
    if (attnd_sessions_get_layers(app->sessions, id, &si, length, rows, ATTND_SESSION_LAYERS_MAX,
                                  &se) != ATTND_SESSION_OK) {
        store_error(&se, &e);
        attnd_reply_error(out, &e);
        return;
    }
    attnd_jsonbuf b = {0};
    put_info(&b, &si, length, rows);
    reply_json(out, 200, &b);
}

/* ------------------------------------------------------------ list, fork */

#define LIST_DEFAULT 100
#define LIST_MAX 1000

/* GET /v1/sessions[?limit=N&after=ID]: a page in id order, and where the next starts. */
static void list(attnd_exchange *x, attnd_reply *out)
{
    attnd_http_error e;
    const char *limit = x->query(x, "limit"), *after = x->query(x, "after");
    long n_want = LIST_DEFAULT;
    if (limit) {
        char *end;
        n_want = strtol(limit, &end, 10);
        if (end == limit || *end || n_want < 1 || n_want > LIST_MAX) {
            attnd_http_fail(&e, 400, "invalid_value", "limit",
                            "limit must be an integer in 1..%d, got \"%.40s\"", LIST_MAX, limit);
            attnd_reply_error(out, &e);
            return;
        }
    }
    attnd_session_info *page = malloc((size_t)n_want * sizeof *page);
    attnd_session_error se;
    int n = 0, total = 0;
    if (!page || attnd_sessions_list(x->app->sessions, after ? after : "", (int)n_want, page, &n,
                                     &total, &se) != ATTND_SESSION_OK) {
        free(page);
        attnd_http_fail(&e, 500, "internal", "", "out of memory listing sessions");
        attnd_reply_error(out, &e);
        return;
    }
    attnd_jsonbuf b = {0};
    attnd_jb_puts(&b, "{\"sessions\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            attnd_jb_putc(&b, ',');
        put_info(&b, &page[i], NULL, NULL);
    }
    attnd_jb_puts(&b, "],\"total\":");
    attnd_jb_i64(&b, total);
    attnd_jb_puts(&b, ",\"next\":");
    if (n == n_want && n > 0) /* there may be more: the next page starts after this id */
        attnd_jb_string(&b, page[n - 1].id);
    else
        attnd_jb_puts(&b, "null");
    attnd_jb_putc(&b, '}');
    free(page);
    reply_json(out, 200, &b);
}

/* POST /v1/sessions/{id}/fork: a new session with a copy of this one's cache
 * (no body, or an empty JSON object). */
static void fork_session(attnd_exchange *x, attnd_reply *out)
{
    attnd_http_error e;
    attnd_session_error se;
    char id[ATTND_SESSION_ID_MAX + 2]; /* one more: a longer path param cannot fit a valid id */
    if (x->body_len) {
        json_error_t je;
        int nomem = 0;
        json_t *j = attnd_json_loadb(x->body, x->body_len, 0, &je, &nomem);
        int parsed = j != NULL, empty = json_is_object(j) && json_object_size(j) == 0;
        json_decref(j);
        if (nomem) {
            attnd_http_fail(&e, 500, "internal", "", "out of memory parsing the body");
            attnd_reply_error(out, &e);
            return;
        }
        if (!empty) {
            attnd_http_fail(&e, 400, parsed ? "unknown_field" : "invalid_json", "",
                            "a fork takes no body (or {}): it copies the session as it is");
            attnd_reply_error(out, &e);
            return;
        }
    }
    path_id(x, id, sizeof id);
    attnd_session *child = NULL;
    if (attnd_sessions_fork(x->app->sessions, id, &child, &se) != ATTND_SESSION_OK) {
        store_error(&se, &e);
        attnd_reply_error(out, &e);
        return;
    }
    attnd_jsonbuf b = {0};
    const attnd_session *last = child->n_layers ? &child->layers[child->n_layers - 1] : child;
    put_session_head(&b, child->id, child->model_name, child->kind, child->window, child->ttl_s);
    attnd_jb_puts(&b, ",\"length\":");
    attnd_jb_i64(&b, (long long)last->length);
    attnd_jb_puts(&b, ",\"cached\":");
    attnd_jb_i64(&b, last->rows);
    if (child->n_layers) {
        attnd_jb_puts(&b, ",\"num_layers\":");
        attnd_jb_i64(&b, child->n_layers);
    }
    attnd_jb_puts(&b, ",\"forked_from\":");
    attnd_jb_string(&b, id);
    attnd_jb_putc(&b, '}');
    reply_created(x, child, &b, out);
}

/* GET, HEAD or DELETE /v1/sessions/{id}. */
static void resource(attnd_exchange *x, attnd_reply *out)
{
    char id[ATTND_SESSION_ID_MAX + 2]; /* one more: a longer path param cannot fit a valid id */
    attnd_session_error se;
    attnd_http_error e;
    path_id(x, id, sizeof id);
    if (strcmp(x->method, "DELETE") != 0) {
        get_info(x->app, id, out);
        return;
    }
    if (attnd_sessions_delete(x->app->sessions, id, &se) != ATTND_SESSION_OK) {
        store_error(&se, &e);
        attnd_reply_error(out, &e);
        return;
    }
    out->status = 204;
    out->content_type = attnd_json_type;
    out->body = (char *)(uintptr_t)""; /* static: never freed or written */
    out->body_static = 1;
    out->len = 0;
}

/* ------------------------------------------------------------ append */

/* Points the request's one sequence at the session's cache and attaches the
 * weights buffer (S known now). Returns 0, or -1 with *e. */
static void append_end(attnd_exchange *x);

static int attach_cache(attnd_app *app, const attnd_model *m, attnd_session *s,
                        attnd_session_call *call, attnd_request *req, attnd_http_error *e)
{
    attn_seq *q = &req->seqs[0];
    int self = s->kind == ATTND_SESSION_SELF;
    int t = q->t, keys = self ? s->rows + t : s->rows;
    if (req->need_weights) {
        size_t n = (req->average_attn_weights ? 1 : (size_t)m->info.num_heads) * (size_t)t *
                   (size_t)keys;
        if (app->limits.max_weights_elems && n > app->limits.max_weights_elems)
            return attnd_http_fail(e, 413, "limit_exceeded", "need_weights",
                                   "weights would hold %zu numbers, max_weights_elems is %zu",
                                   n, app->limits.max_weights_elems);
        call->weights = malloc(n * sizeof(float));
        if (!call->weights)
            return attnd_http_fail(e, 500, "internal", "", "out of memory for weights");
        q->weights = call->weights;
        req->bytes += n * sizeof(float);
    }
    if (q->position_ids) {
        /* The append's own (a left-padded batch's), decoded and checked by the
         * codec: T integers in 0..2^53. Without RoPE positions change nothing. */
    } else if (m->info.rope.style != ATTN_ROPE_NONE) {
        /* The stream's absolute positions: a window may have dropped rows, so
         * cache_len + i is not always the position. */
        call->positions = malloc((size_t)t * sizeof *call->positions);
        if (!call->positions)
            return attnd_http_fail(e, 500, "internal", "", "out of memory for positions");
        for (int i = 0; i < t; i++)
            call->positions[i] = s->length + i;
        q->position_ids = call->positions;
    }
    attnd_session_kv kv;
    attnd_sessions_kv(app->sessions, s, &kv);
    q->s = keys;
    q->cache_k = kv.k;
    q->cache_v = kv.v;
    q->cache_block_rows = kv.block_rows;
    q->cache_block_table = kv.table;
    q->cache_block_stride = kv.stride;
    q->cache_dtype = m->kv_dtype;
    q->cache_len = s->rows;
    q->cache_append = self;
    q->is_causal = self;
    q->window = s->window;
    req->n_tokens = (size_t)t + (size_t)s->rows;
    req->stream = (uint64_t)(uintptr_t)s; /* one session, one stream, while it lives */
    call->t = t;
    return 0;
}

/* Append, part 1: takes the session's append slot, decodes the body against the
 * session's model, makes room in the cache and builds the request whose one
 * sequence reads and writes the cache; x->model becomes a reference to the
 * session's model version, x->state the call. On failure nothing is held. */
/* The body's query rows: the JSON form, or a v2 infer body with binary tensors
 * (Inference-Header-Content-Length), which may carry only query [1,T,E_q] and
 * position_ids, and asks for no weights: masks and keys come from the session. */
static int decode_rows(attnd_exchange *x, attnd_session_call *call, const attnd_model *m,
                       const attnd_decode_opts *opts, attnd_request **req,
                       attnd_http_error *err)
{
    long long hl = attnd_handler_tensor_header_length(x);
    if (hl < 0)
        return attnd_codec_decode_request_ex(x->body, x->body_len, &m->info, &x->app->limits,
                                             opts, req, err);
    size_t json_len = (unsigned long long)hl < x->body_len ? (size_t)hl : x->body_len;
    if (x->reserve && x->reserve(x, attnd_json_tree_bound(x->body, json_len), err) != 0)
        return -1;
    call->binary = 1;
    if (attnd_codec_v2_decode(x->body, x->body_len, hl, &m->info, &x->app->limits, req,
                              &call->v2, err) != 0)
        return -1;
    const attn_seq *q = &(*req)->seqs[0];
    const char *bad = (*req)->n_seqs != 1 ? "query"
                      : q->key                               ? "key"
                      : q->key_padding_mask || q->attn_mask ? "attn_mask"
                      : (*req)->need_weights                 ? "attn_weights"
                                                              : NULL;
    if (!bad)
        return 0;
    attnd_request_free(*req);
    *req = NULL;
    return attnd_http_fail(err, 400, "invalid_value", bad,
                           "a binary append carries the next rows of one stream: query "
                           "[1,T,E_q] and optionally position_ids [1,T] (no key or masks: "
                           "the session has them; attention weights: use the JSON form)");
}

/* The layer an append names: /v1/sessions/{id}/layers/{l}/append on a sequence
 * session switches call->sess to its layer l (the head's slot stays held);
 * /v1/sessions/{id}/append is for a single-layer session. Returns 0, or -1
 * with *err (400 naming "layer": the wrong route for the session, l not one
 * of its layers). */
static int pick_layer(const attnd_exchange *x, attnd_session_call *call, attnd_http_error *err)
{
    attnd_session *s = call->sess;
    const char *tail = x->param + x->param_len; /* "/append" or "/layers/{l}/append" */
    if (strncmp(tail, "/layers/", 8) != 0) {
        if (s->n_layers == 0)
            return 0;
        return attnd_http_fail(err, 400, "invalid_value", "layer",
                               "session %s is a sequence of %d layers (model group %s): append "
                               "to each layer with POST /v1/sessions/{id}/layers/{l}/append",
                               s->id, s->n_layers, s->model_name);
    }
    const char *digits = tail + 8;
    size_t n = strcspn(digits, "/");
    long l = -1;
    if (n >= 1 && n <= 6 && strspn(digits, "0123456789") == n)
        l = strtol(digits, NULL, 10);
    if (s->n_layers == 0)
        return attnd_http_fail(err, 400, "invalid_value", "layer",
                               "session %s is a session of the single-layer model %s: append "
                               "with POST /v1/sessions/{id}/append", s->id, s->model_name);
    if (l < 0 || l >= s->n_layers)
        return attnd_http_fail(err, 400, "invalid_value", "layer",
                               "layer must be an integer in 0..%d (session %s holds %d layers), "
                               "got \"%.*s\"", s->n_layers - 1, s->id, s->n_layers,
                               (int)(n > 20 ? 20 : n), digits);
    call->sess = attnd_sessions_layer(s, (int)l);
    return 0;
}

static int append_decode(attnd_exchange *x, attnd_request **out, attnd_http_error *err)
{
    const attnd_decode_opts opts = {.query_only = 1, .caller_weights = 1,
                                    .reserve = attnd_handler_reserve, .reserve_ctx = x};
    attnd_app *app = x->app;
    char id[ATTND_SESSION_ID_MAX + 2]; /* one more: a longer path param cannot fit a valid id */
    attnd_request *req = NULL;
    attnd_session_error se;
    attnd_session_call *call = calloc(1, sizeof *call);
    if (!call)
        return attnd_http_fail(err, 500, "internal", "", "out of memory");
    x->state = call;
    path_id(x, id, sizeof id);
    if (attnd_sessions_acquire(app->sessions, id, &call->sess, &se) != ATTND_SESSION_OK) {
        store_error(&se, err);
        goto fail;
    }
    if (pick_layer(x, call, err) != 0) /* a sequence's: its layer's cache from here on */
        goto fail;
    call->start_ns = attnd_now_ns();
    attnd_session *s = call->sess;
    attnd_model *m = s->model;
    if (decode_rows(x, call, m, &opts, &req, err) != 0)
        goto fail;
    float mq = s->kind == ATTND_SESSION_CROSS
                   ? max_abs(req->seqs[0].query, (size_t)req->seqs[0].t * (size_t)m->info.embed_q)
                   : 0;
    if (mq > s->query_limit) { /* cross only: checked as one-shot cross-attention would be */
        attnd_http_error_set(err, 413, "limit_exceeded", "query",
                             "query magnitudes are so large that the attention scores over "
                             "this session's memory would overflow float32 (largest |query| "
                             "%g; this memory allows %g, as one-shot cross-attention would)",
                             (double)mq, (double)s->query_limit);
        goto fail;
    }
    if (attnd_sessions_reserve(app->sessions, s, req->seqs[0].t, &se) != ATTND_SESSION_OK) {
        store_error(&se, err);
        goto fail;
    }
    if (attach_cache(app, m, s, call, req, err) != 0)
        goto fail;
    assert(!x->model); /* the append route names no model: the session does */
    attnd_model_retain(m);
    x->model = m;
    *out = req;
    return 0;
fail:
    attnd_request_free(req);
    append_end(x);
    return -1;
}

/* The session's state after this append (layer >= 0: the sequence's layer
 * appended to, whose length and rows these are), and where the model's decode
 * loop computed it, as response members. */
static char *session_members(const char *id, int layer, int64_t length, int rows,
                             const attnd_request *req)
{
    attnd_jsonbuf b = {0};
    attnd_jb_puts(&b, "\"session\":{\"id\":");
    attnd_jb_string(&b, id);
    if (layer >= 0) {
        attnd_jb_puts(&b, ",\"layer\":");
        attnd_jb_i64(&b, layer);
    }
    attnd_jb_puts(&b, ",\"length\":");
    attnd_jb_i64(&b, (long long)length);
    attnd_jb_puts(&b, ",\"cached\":");
    attnd_jb_i64(&b, rows);
    attnd_jb_puts(&b, "},\"decode\":{\"queued_after\":");
    attnd_jb_i64(&b, (long long)req->queued_after);
    attnd_jb_puts(&b, ",\"first\":");
    attnd_jb_i64(&b, (long long)req->iter_first);
    attnd_jb_puts(&b, ",\"last\":");
    attnd_jb_i64(&b, (long long)req->iter_last);
    attnd_jb_puts(&b, ",\"iterations\":");
    attnd_jb_i64(&b, req->iterations);
    attnd_jb_putc(&b, '}');
    return attnd_jb_finish(&b, NULL);
}

/* A binary append's answer: the v2 response (outputs as asked, binary or JSON),
 * with the session's state among its parameters. */
static void finish_binary(const attnd_session_call *call, const attnd_request *req,
                          const attnd_model *model, const char *id, int layer, int64_t length,
                          int rows, attnd_reply *out)
{
    char params[416];
    int n = snprintf(params, sizeof params, "\"session_id\":\"%s\",\"session_length\":%lld,"
                     "\"session_cached\":%d,\"decode_queued_after\":%lld,\"decode_first\":%lld,"
                     "\"decode_last\":%lld,\"decode_iterations\":%d", id, (long long)length, rows,
                     (long long)req->queued_after, (long long)req->iter_first,
                     (long long)req->iter_last, req->iterations);
    if (layer >= 0 && n > 0 && (size_t)n < sizeof params)
        snprintf(params + n, sizeof params - (size_t)n, ",\"session_layer\":%d", layer);
    size_t header_len = 0;
    out->status = 200;
    out->body = attnd_codec_v2_encode_response_with(req, &call->v2, model->name, model->version,
                                                    params, &out->len, &header_len);
    out->content_type = header_len ? attnd_binary_type : attnd_json_type;
    if (header_len) {
        out->header_name = attnd_tensor_header;
        snprintf(out->header_value, sizeof out->header_value, "%zu", header_len);
    }
}

/* Append, part 2, once the scheduler finished req: commits the new positions if
 * the compute succeeded (else the cache is as before), gives the slot back,
 * and answers with the /v1 attention response plus "session". */
static void append_finish(attnd_exchange *x, const attnd_request *req, attnd_reply *out)
{
    attnd_app *app = x->app;
    const attnd_model *model = x->model;
    attnd_session_call *call = x->state;
    char id[ATTND_SESSION_ID_MAX + 1];
    int64_t length = 0;
    int rows = 0;
    int ok = req->outcome == ATTND_DONE_OK;
    const int layer = call->sess->group ? call->sess->layer : -1;
    attnd_http_error kv_err;
    int kv_bad = ok && append_kv_check(app, model, call->sess, &req->seqs[0], call->t, &kv_err);
    memcpy(id, call->sess->id, sizeof id);
    attnd_sessions_release(app->sessions, call->sess, ok && !kv_bad ? call->t : 0, &length,
                           &rows);
    call->sess = NULL;
    if (app->metrics)
        attnd_metrics_session_append(app->metrics, model->index,
                                     attnd_now_ns() - call->start_ns);
    if (kv_bad) {
        attnd_reply_error(out, &kv_err);
        return;
    }
    if (!attnd_handler_succeeded(x, req, attnd_reply_error, out))
        return;
    if (call->binary) {
        finish_binary(call, req, model, id, layer, length, rows, out);
        return;
    }
    char *members = session_members(id, layer, length, rows, req);
    size_t len = 0;
    char *body = members ? attnd_codec_encode_response_with(req, model->name, members, &len)
                         : NULL;
    free(members);
    attnd_reply_body(out, 200, attnd_json_type, body, len);
}

/* Gives back whatever the call still holds (the slot without committing, the
 * weights). Idempotent. */
static void append_end(attnd_exchange *x)
{
    attnd_session_call *call = x->state;
    if (!call)
        return;
    if (call->sess)
        attnd_sessions_release(x->app->sessions, call->sess, 0, NULL, NULL);
    free(call->weights);
    free(call->positions);
    free(call);
    x->state = NULL;
}

/* ------------------------------------------------------------ model groups */

/* The group a /v1/models/{name}[/...] path names, or NULL (models still
 * loading: none yet). */
static const attnd_model_group *path_group(const attnd_app *app, const char *path)
{
    static const char prefix[] = "/v1/models/";
    if (attnd_app_state((attnd_app *)app) == ATTND_STATE_STARTING ||
        strncmp(path, prefix, sizeof prefix - 1) != 0)
        return NULL;
    const char *name = path + sizeof prefix - 1;
    return attnd_models_group(app->models, name, strcspn(name, "/"));
}

int attnd_handler_session_is_group(const attnd_app *app, const char *path)
{
    return path_group(app, path) != NULL;
}

/* 404 model_not_found for group g whose layer `missing` is unloaded (as for an
 * unloaded model). */
static int group_unavailable(const attnd_model_group *g, int missing, attnd_http_error *e)
{
    return attnd_http_fail(e, 404, "model_not_found", "",
                           "model group %s: its layer %d (model %s.%d) is not loaded", g->name,
                           missing, g->name, g->checkpoint_layers[missing]);
}

/* GET /v1/models/{group}: the group, its layers and a position's KV bytes. */
static void group_info(attnd_exchange *x, attnd_reply *out)
{
    const attnd_model_group *g = path_group(x->app, x->path);
    attnd_http_error e;
    attnd_model **m = g ? calloc((size_t)g->n_layers, sizeof *m) : NULL;
    int missing = 0;
    if (!g || !m) {
        free(m);
        attnd_reply_error(out, attnd_http_error_set(&e, g ? 500 : 404, g ? "internal" : "model_not_found",
                                                    "", g ? "out of memory" : "no such model group"));
        return;
    }
    if (attnd_models_group_acquire(x->app->models, g, m, &missing) != 0) {
        free(m);
        group_unavailable(g, missing, &e);
        attnd_reply_error(out, &e);
        return;
    }
    for (int l = 0; l < g->n_layers; l++)
        attnd_model_release(m[l]);
    free(m);
    size_t len = 0;
    char *body = attnd_models_group_info_json(x->app->models, g, &len);
    if (!body) {
        attnd_reply_error(out, attnd_http_error_set(&e, 500, "internal", "",
                                                    "out of memory describing the group"));
        return;
    }
    attnd_reply_body(out, 200, attnd_json_type, body, len);
}

/* POST /v1/models/{group}/sessions: one sequence session, a self-attention
 * cache on every layer of the group (body: window, ttl_s; no key). */
static void group_create(attnd_exchange *x, attnd_reply *out)
{
    attnd_app *app = x->app;
    const attnd_model_group *g = path_group(app, x->path);
    attnd_http_error e;
    attnd_session_error se;
    create_body cb = {0};
    attnd_session *s = NULL;
    int missing = 0, held = 0;
    attnd_model **m = g ? calloc((size_t)g->n_layers, sizeof *m) : NULL;
    attnd_session_params *p = g ? calloc((size_t)g->n_layers, sizeof *p) : NULL;
    if (!g || !m || !p) {
        attnd_http_error_set(&e, g ? 500 : 404, g ? "internal" : "model_not_found", "",
                             g ? "out of memory" : "no such model group");
        goto fail;
    }
    if (attnd_models_group_acquire(app->models, g, m, &missing) != 0) {
        group_unavailable(g, missing, &e);
        goto fail;
    }
    held = 1;
    if (decode_create(x, &m[0]->info, &cb, &e) != 0)
        goto fail;
    if (cb.key) {
        attnd_http_fail(&e, 400, "unsupported", "key",
                        "a session of model group %s is a sequence: self-attention on every "
                        "layer, no key (cross sessions: create one on a layer model %s.N)",
                        g->name, g->name);
        goto fail;
    }
    for (int l = 0; l < g->n_layers; l++) {
        const attn_layer_info *in = &m[l]->info;
        if (in->embed_k != in->embed_q || in->embed_v != in->embed_q) {
            attnd_http_fail(&e, 400, "invalid_value", "key",
                            "layer %d (%s) has E_q=%d, E_k=%d, E_v=%d: a sequence session needs "
                            "self-attention on every layer", l, m[l]->name, in->embed_q,
                            in->embed_k, in->embed_v);
            goto fail;
        }
        if (session_params(app, m[l], &cb, &p[l], &e) != 0)
            goto fail;
    }
    if (attnd_sessions_open_group(app->sessions, p, g->n_layers, g->name, &s, &se) !=
        ATTND_SESSION_OK) {
        store_error(&se, &e);
        goto fail;
    }
    held = 0; /* each layer of s holds its model now */
    attnd_jsonbuf b = {0};
    put_session_head(&b, s->id, g->name, s->kind, s->window, s->ttl_s);
    attnd_jb_puts(&b, ",\"length\":0,\"max_length\":");
    if (s->window == 0)
        attnd_jb_i64(&b, app->cfg->max_seq_len);
    else
        attnd_jb_puts(&b, "null");
    attnd_jb_puts(&b, ",\"cached\":0,\"num_layers\":");
    attnd_jb_i64(&b, s->n_layers);
    attnd_jb_putc(&b, '}');
    reply_created(x, s, &b, out);
    free(m);
    free(p);
    return;
fail:
    for (int l = 0; held && l < g->n_layers; l++)
        attnd_model_release(m[l]);
    free(m);
    free(p);
    free(cb.key);
    free(cb.value);
    attnd_reply_error(out, &e);
}

const attnd_handler attnd_handler_group_info = {
    .protocol = "v1", .answer = group_info, .error = attnd_reply_error};
const attnd_handler attnd_handler_group_session_create = {
    .protocol = "session",
    .check_headers = attnd_handler_check_json,
    .answer = group_create,
    .error = attnd_reply_error,
};

const attnd_handler attnd_handler_session_create = {
    .protocol = "session",
    .check_headers = attnd_handler_check_json,
    .answer = create,
    .error = attnd_reply_error,
};
const attnd_handler attnd_handler_session = {
    .protocol = "session", .answer = resource, .error = attnd_reply_error};
const attnd_handler attnd_handler_session_list = {
    .protocol = "session", .answer = list, .error = attnd_reply_error};
const attnd_handler attnd_handler_session_fork = {
    .protocol = "session", .answer = fork_session, .error = attnd_reply_error};
const attnd_handler attnd_handler_session_append = {
    .protocol = "session",
    .check_headers = attnd_handler_check_tensor_post, /* JSON, or v2 binary tensors */
    .decode = append_decode,
    .finish = append_finish,
    .end = append_end,
    .error = attnd_reply_error,
};
