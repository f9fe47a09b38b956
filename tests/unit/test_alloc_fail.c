/* test_alloc_fail.c — allocation-failure injection (SQLite's malloc fault
 * simulation) over the library, the codecs and the request path. This binary
 * is linked with -Wl,--wrap=malloc,calloc,realloc,free,strdup,strndup,
 * aligned_alloc (see the Makefile), so every allocation made by lib/, server/
 * and the tests goes through the wrappers below; jansson's go through them
 * too (json_set_alloc_funcs). Each operation runs once to count the
 * allocations K it makes on this thread; then, for every N in 1..K, again
 * with the N-th allocation failing (transient), and again with every
 * allocation from the N-th on failing (persistent). Each run must end with
 * the operation's right answer (an allocation it could do without) or its
 * clean out-of-memory error (ATTN_ERR_NOMEM, a 500 "internal"), and with every
 * allocation it made freed. Allocations of other threads (the scheduler's
 * workers, the library's pool) are never failed, but their frees are seen.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "protocol/codec.h"
#include "protocol/codec_v2.h"
#include "core_util.h"
#include "inproc.h"
#include "core/jsonload.h"
#include "sbuf.h"
#include "engine/sessions.h"

/* ------------------------------------------------------------ the wrappers */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);

/* The allocations made while armed and not yet freed: an open-addressing set
 * of pointers (tombstones on removal), guarded by mu. */
#define FA_SLOTS (1u << 18)
#define FA_TOMB ((void *)1)
static void *live[FA_SLOTS];
static long n_live;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static _Thread_local int armed; /* this thread's allocations count (and fail) */
static long n_allocs, fail_at, n_failed; /* guarded by mu; fail_at 0 = never */
static int persistent;

static size_t slot_of(const void *p) { return ((uintptr_t)p >> 4) * 2654435761u % FA_SLOTS; }

static void track(void *p)
{
    size_t i = slot_of(p);
    while (live[i] && live[i] != FA_TOMB)
        i = (i + 1) % FA_SLOTS;
    live[i] = p;
    n_live++;
}

static void untrack(void *p)
{
    if (!p || !n_live)
        return;
    for (size_t i = slot_of(p); live[i]; i = (i + 1) % FA_SLOTS)
        if (live[i] == p) {
            live[i] = FA_TOMB;
            n_live--;
            return;
        }
}

/* 1 when this allocation is to fail; counts it. */
static int next_fails(void)
{
    if (!armed)
        return 0;
    pthread_mutex_lock(&mu);
    long k = ++n_allocs;
    int fail = fail_at > 0 && (k == fail_at || (persistent && k > fail_at));
    n_failed += fail;
    pthread_mutex_unlock(&mu);
    return fail;
}

static void *tracked(void *p)
{
    if (p && armed) {
        pthread_mutex_lock(&mu);
        track(p);
        pthread_mutex_unlock(&mu);
    }
    return p;
}

void *__wrap_malloc(size_t n) { return next_fails() ? NULL : tracked(__real_malloc(n)); }
void *__wrap_calloc(size_t n, size_t size)
{
    return next_fails() ? NULL : tracked(__real_calloc(n, size));
}
char *__wrap_strdup(const char *s) { return next_fails() ? NULL : tracked(__real_strdup(s)); }
char *__wrap_strndup(const char *s, size_t n)
{
    return next_fails() ? NULL : tracked(__real_strndup(s, n));
}
void *__wrap_aligned_alloc(size_t align, size_t n)
{
    return next_fails() ? NULL : tracked(__real_aligned_alloc(align, n));
}

void __wrap_free(void *p)
{
    if (p) {
        pthread_mutex_lock(&mu);
        untrack(p);
        pthread_mutex_unlock(&mu);
    }
    __real_free(p);
}

void *__wrap_realloc(void *p, size_t n)
{
    if (next_fails())
        return NULL;
    void *q = __real_realloc(p, n);
    if (q || n == 0) {
        pthread_mutex_lock(&mu);
        int was = 0;
        long before = n_live;
        untrack(p);
        was = n_live < before;
        pthread_mutex_unlock(&mu);
        if (q && (armed || was)) { /* a block we tracked stays tracked when it moves */
            pthread_mutex_lock(&mu);
            track(q);
            pthread_mutex_unlock(&mu);
        }
    }
    return q;
}

/* Starts counting (and failing the fail_at-th allocation, or every one from it
 * on) on this thread. */
static void arm(long at, int from_on)
{
    pthread_mutex_lock(&mu);
    n_allocs = 0;
    n_failed = 0;
    fail_at = at;
    persistent = from_on;
    pthread_mutex_unlock(&mu);
    armed = 1;
}

static void disarm(void) { armed = 0; }

/* The allocations still live from the armed runs (and forgets them). */
static long leaked(void)
{
    pthread_mutex_lock(&mu);
    long n = n_live;
    memset(live, 0, sizeof live);
    n_live = 0;
    pthread_mutex_unlock(&mu);
    return n;
}

/* ------------------------------------------------------------ the driver */

typedef enum { OP_OK, OP_NOMEM, OP_BAD } op_result;

/* One operation: does its work, compares a success with its reference (made
 * when ref is set: the first, unfailed run) and says how it ended; why names
 * what was wrong with an OP_BAD. Everything it allocates is freed before it
 * returns, except a reference. */
typedef op_result (*op_fn)(void *ctx, int ref, char *why, size_t cap);

/* Runs op for its reference (not counted), then counted and unfailed (it
 * must succeed), then failing each allocation in turn, both ways. Returns K. */
static long inject(const char *name, op_fn op, void *ctx)
{
    char why[512] = "";
    op_result r = op(ctx, 1, why, sizeof why);
    CHECK_MSG(r == OP_OK, "%s: the reference run: %s", name, why);
    arm(0, 0);
    r = op(ctx, 0, why, sizeof why);
    disarm();
    long k = n_allocs;
    CHECK_MSG(r == OP_OK, "%s: the unfailed run: %s", name, why);
    CHECK_MSG(leaked() == 0, "%s: the unfailed run leaks", name);
    CHECK_MSG(k > 0, "%s makes no allocation on this thread", name);
    long bad = 0, leaks = 0, nomem = 0, format = 0;
    for (int from_on = 0; from_on < 2; from_on++)
        for (long n = 1; n <= k; n++) {
            why[0] = '\0';
            unsigned long jansson = attnd_json_alloc_failures();
            arm(n, from_on);
            r = op(ctx, 0, why, sizeof why);
            disarm();
            long l = leaked();
            if (r == OP_BAD && strncmp(why, "ATTN_ERR_FORMAT", 15) == 0 &&
                attnd_json_alloc_failures() != jansson) {
                /* Known: the library's JSON parses (config.json, safetensors
                 * headers) cannot tell jansson's lack of memory from bad JSON. */
                r = OP_NOMEM;
                format++;
            }
            nomem += r == OP_NOMEM;
            if (r == OP_BAD && bad++ < 5)
                CHECK_MSG(0, "%s: allocation %ld%s failing: %s", name, n,
                          from_on ? " and on" : "", why);
            if (l && leaks++ < 5)
                CHECK_MSG(0, "%s: allocation %ld%s failing leaks %ld block(s)", name, n,
                          from_on ? " and on" : "", l);
        }
    CHECK_MSG(bad == 0 && leaks == 0, "%s: %ld bad endings, %ld leaking runs of %ld", name, bad,
              leaks, 2 * k);
    CHECK_MSG(nomem > 0, "%s: no run ended out of memory", name);
    printf("  %-30s %5ld allocations, %5ld of %5ld runs out of memory", name, k, nomem, 2 * k);
    printf(format ? " (%ld of them reported as ATTN_ERR_FORMAT: jansson)\n" : "\n", format);
    return k;
}

/* ------------------------------------------------------------ the library */

static op_result lib_status(attn_status st, const attn_error *e, char *why, size_t cap)
{
    if (st == ATTN_OK)
        return OP_OK;
    if (st == ATTN_ERR_NOMEM && e->message[0])
        return OP_NOMEM;
    snprintf(why, cap, "%s: %s", attn_status_name(st), e->message);
    return OP_BAD;
}

static op_result same_floats(const float *got, const float *want, size_t n, char *why,
                             size_t cap)
{
    if (memcmp(got, want, n * sizeof *got) == 0)
        return OP_OK;
    snprintf(why, cap, "a success with a different answer");
    return OP_BAD;
}

enum { T = 5, PAGE = 4 };

/* A GQA layer with rotary embeddings (h 4, g 2) and one causal sequence of T
 * with per-head weights. */
typedef struct lib_ctx {
    attn_layer_desc desc;
    float *weights_buf;
    attn_layer *layer;          /* built from desc, outside the armed runs */
    attn_layer_info info;
    float query[T * 16];
    float out[T * 16], w[4 * T * T], ref_out[T * 16], ref_w[4 * T * T];
    float *pool_k, *pool_v;     /* paged KV cache: 2 blocks of PAGE rows */
    int32_t table[2];
} lib_ctx;

static void lib_ctx_init(lib_ctx *c)
{
    test_rng r = {42};
    gqa_shape sh = {.h = 4, .g = 2, .d_k = 4, .d_v = 4, .e = 16, .e_out = 16, .bias = 1,
                    .out_proj = 1, .rope = {.style = ATTN_ROPE_HALF, .theta = 10000}};
    c->desc = gqa_desc(&r, &sh, &c->weights_buf);
    attn_error e;
    CHECK_INT_EQ(attn_layer_create(&c->desc, &c->layer, &e), ATTN_OK);
    attn_layer_get_info(c->layer, &c->info);
    for (int i = 0; i < T * 16; i++)
        c->query[i] = rng_float(&r, -1, 1);
    c->pool_k = calloc(2 * PAGE * 8, sizeof(float));
    c->pool_v = calloc(2 * PAGE * 8, sizeof(float));
    c->table[0] = 1;
    c->table[1] = 0;
}

static void lib_ctx_free(lib_ctx *c)
{
    attn_layer_free(c->layer);
    free(c->weights_buf);
    free(c->pool_k);
    free(c->pool_v);
}

/* attn_layer_create, then attn_forward with no workspace (scratch per call). */
static op_result op_create_forward(void *ctx, int ref, char *why, size_t cap)
{
    lib_ctx *c = ctx;
    attn_layer *l = NULL;
    attn_error e = {0};
    attn_status st = attn_layer_create(&c->desc, &l, &e);
    if (st != ATTN_OK)
        return l ? (snprintf(why, cap, "a failed create gave a layer"), OP_BAD)
                 : lib_status(st, &e, why, cap);
    attn_seq s = {.t = T, .s = T, .query = c->query, .is_causal = 1, .output = c->out,
                  .weights_mode = ATTN_WEIGHTS_PER_HEAD, .weights = c->w};
    st = attn_forward(l, &s, 1, NULL, NULL, &e);
    attn_layer_free(l);
    if (st != ATTN_OK)
        return lib_status(st, &e, why, cap);
    if (ref) {
        memcpy(c->ref_out, c->out, sizeof c->out);
        memcpy(c->ref_w, c->w, sizeof c->w);
    }
    if (memcmp(c->w, c->ref_w, sizeof c->w) != 0)
        return snprintf(why, cap, "a success with other weights"), OP_BAD;
    return same_floats(c->out, c->ref_out, T * 16, why, cap);
}

/* A workspace with two threads, then an append of T rows to a paged cache. */
static op_result op_paged_forward(void *ctx, int ref, char *why, size_t cap)
{
    lib_ctx *c = ctx;
    attn_workspace *ws = NULL;
    attn_error e = {0};
    attn_workspace_options o = {.n_threads = 2};
    attn_status st = attn_workspace_create(&o, &ws, &e);
    if (st != ATTN_OK)
        return lib_status(st, &e, why, cap);
    attn_seq s = {.t = T, .s = T, .query = c->query, .is_causal = 1, .output = c->out,
                  .cache_k = c->pool_k, .cache_v = c->pool_v, .cache_append = 1,
                  .cache_block_rows = PAGE, .cache_block_table = c->table};
    st = attn_forward(c->layer, &s, 1, ws, NULL, &e);
    attn_workspace_free(ws);
    if (st != ATTN_OK)
        return lib_status(st, &e, why, cap);
    if (ref)
        memcpy(c->ref_out, c->out, sizeof c->out);
    return same_floats(c->out, c->ref_out, T * 16, why, cap);
}

/* Every field of two layer infos (not their padding or string tails). */
static int info_equal(const attn_layer_info *a, const attn_layer_info *b)
{
    return a->num_heads == b->num_heads && a->head_dim_k == b->head_dim_k &&
           a->head_dim_v == b->head_dim_v && a->embed_q == b->embed_q &&
           a->embed_k == b->embed_k && a->embed_v == b->embed_v &&
           a->embed_out == b->embed_out && a->has_out_proj == b->has_out_proj &&
           a->has_bias_q == b->has_bias_q && a->has_bias_k == b->has_bias_k &&
           a->has_bias_v == b->has_bias_v && a->has_bias_out == b->has_bias_out &&
           strcmp(a->source_dtype, b->source_dtype) == 0 && a->param_count == b->param_count &&
           a->num_kv_heads == b->num_kv_heads && a->rope.style == b->rope.style &&
           a->rope.theta == b->rope.theta && a->rope.rotary_dim == b->rope.rotary_dim &&
           a->rope.scaling == b->rope.scaling && a->rope.factor == b->rope.factor;
}

static op_result same_info(attn_layer *l, attn_layer_info *want, int ref, char *why, size_t cap)
{
    attn_layer_info got;
    memset(&got, 0, sizeof got); /* padding too: compared with memcmp */
    attn_layer_get_info(l, &got);
    attn_layer_free(l);
    if (ref)
        memcpy(want, &got, sizeof got);
    if (info_equal(&got, want))
        return OP_OK;
    snprintf(why, cap, "a load that succeeded with another layer");
    return OP_BAD;
}

/* A Llama GQA checkpoint directory (config.json + safetensors). */
static op_result op_load_checkpoint(void *ctx, int ref, char *why, size_t cap)
{
    attn_layer *l = NULL;
    attn_error e = {0};
    attn_load_options o = {.layer = 0};
    attn_status st = attn_layer_load("tests/fixtures/ckpt/llama_gqa", &o, &l, &e);
    if (st != ATTN_OK)
        return l ? (snprintf(why, cap, "a failed load gave a layer"), OP_BAD)
                 : lib_status(st, &e, why, cap);
    return same_info(l, ctx, ref, why, cap);
}

/* The demo layer, a bare safetensors file. */
static op_result op_load_safetensors(void *ctx, int ref, char *why, size_t cap)
{
    attn_layer *l = NULL;
    attn_error e = {0};
    attn_status st = attn_layer_load_safetensors("config/demo.safetensors", 0, &l, &e);
    if (st != ATTN_OK)
        return l ? (snprintf(why, cap, "a failed load gave a layer"), OP_BAD)
                 : lib_status(st, &e, why, cap);
    return same_info(l, ctx, ref, why, cap);
}

TEST(library)
{
    lib_ctx c = {0};
    lib_ctx_init(&c);
    attn_layer_info ck = {0}, st = {0};
    inject("attn_layer_create+forward", op_create_forward, &c);
    inject("paged GQA/RoPE forward", op_paged_forward, &c);
    inject("attn_layer_load checkpoint", op_load_checkpoint, &ck);
    inject("load_safetensors demo", op_load_safetensors, &st);
    lib_ctx_free(&c);
}

/* ------------------------------------------------------------ the codecs */

/* Appends n raw bytes to a (unarmed). */
static void append_bytes(sbuf *b, const void *p, size_t n)
{
    char *grown = realloc(b->p, b->len + n + 1);
    CHECK(grown != NULL);
    if (!grown)
        return;
    memcpy(grown + b->len, p, n);
    b->p = grown;
    b->len += n;
    b->p[b->len] = '\0';
    b->cap = b->len + 1;
}

/* Reads a whole file (unarmed). */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    sbuf b = {0};
    char chunk[4096];
    size_t n;
    CHECK_MSG(f != NULL, "cannot open %s", path);
    while (f && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        append_bytes(&b, chunk, n);
    if (f)
        fclose(f);
    *len = b.len;
    return b.p;
}

typedef struct codec_ctx {
    attn_layer *layer;
    attn_layer_info info;
    attnd_decode_limits lim;
    char *body;
    size_t len;
    long long header_len;       /* v2: -1 = all JSON */
    char *ref;                  /* the reference response */
    size_t ref_len;
} codec_ctx;

/* A decode error: 500 internal is out of memory; anything else is wrong for a
 * body that decodes when nothing fails. */
static op_result http_error_result(const attnd_http_error *e, char *why, size_t cap)
{
    if (e->status == 500 && strcmp(e->code, "internal") == 0)
        return OP_NOMEM;
    snprintf(why, cap, "%d %s: %s", e->status, e->code, e->message);
    return OP_BAD;
}

/* The response body against the reference (taken when ref). */
static op_result same_body(codec_ctx *c, char *body, size_t len, int ref, char *why, size_t cap)
{
    if (!body)
        return OP_NOMEM;
    if (ref) {
        c->ref = body;
        c->ref_len = len;
        return OP_OK;
    }
    op_result r = len == c->ref_len && memcmp(body, c->ref, len) == 0 ? OP_OK : OP_BAD;
    if (r == OP_BAD)
        snprintf(why, cap, "a response that differs from the reference");
    free(body);
    return r;
}

/* Runs the decoded request on the library (unarmed: only the codec is under
 * test here); 0 on success. */
static int compute(codec_ctx *c, attnd_request *req)
{
    int armed_before = armed;
    disarm();
    attn_error e;
    attn_status st = attn_forward(c->layer, req->seqs, req->n_seqs, NULL, NULL, &e);
    req->outcome = ATTND_DONE_OK;
    armed = armed_before;
    return st == ATTN_OK ? 0 : -1;
}

static op_result op_codec_v1(void *ctx, int ref, char *why, size_t cap)
{
    codec_ctx *c = ctx;
    attnd_request *req = NULL;
    attnd_http_error e;
    if (attnd_codec_decode_request(c->body, c->len, &c->info, &c->lim, &req, &e) != 0)
        return req ? (snprintf(why, cap, "a failed decode gave a request"), OP_BAD)
                   : http_error_result(&e, why, cap);
    if (compute(c, req) != 0) {
        attnd_request_free(req);
        return snprintf(why, cap, "the library refused a decoded request"), OP_BAD;
    }
    size_t len = 0;
    char *body = attnd_codec_encode_response(req, "demo", &len);
    attnd_request_free(req);
    return same_body(c, body, len, ref, why, cap);
}

static op_result op_codec_v2(void *ctx, int ref, char *why, size_t cap)
{
    codec_ctx *c = ctx;
    attnd_request *req = NULL;
    attnd_v2_call call;
    attnd_http_error e;
    if (attnd_codec_v2_decode(c->body, c->len, c->header_len, &c->info, &c->lim, &req, &call,
                              &e) != 0)
        return req ? (snprintf(why, cap, "a failed decode gave a request"), OP_BAD)
                   : http_error_result(&e, why, cap);
    if (compute(c, req) != 0) {
        attnd_request_free(req);
        return snprintf(why, cap, "the library refused a decoded request"), OP_BAD;
    }
    size_t len = 0, hl = 0;
    char *body = attnd_codec_v2_encode_response(req, &call, "demo", 1, &len, &hl);
    attnd_request_free(req);
    return same_body(c, body, len, ref, why, cap);
}

static op_result op_codec_errors(void *ctx, int ref, char *why, size_t cap)
{
    (void)ctx;
    (void)ref;
    attnd_http_error e;
    attnd_http_error_set(&e, 400, "invalid_shape", "query[1]", "expected 64 numbers, got 63");
    size_t len;
    char *a = attnd_codec_encode_error(&e, &len), *b = attnd_codec_v2_encode_error(&e, "", &len);
    op_result r = a && b ? OP_OK : OP_NOMEM;
    if (a && !strstr(a, "invalid_shape"))
        r = (snprintf(why, cap, "a v1 error without its code"), OP_BAD);
    free(a);
    free(b);
    return r;
}

/* The binary form of v2_infer_flat: its query (1 x 3 x 64) as raw FP32. */
static void v2_binary(codec_ctx *c)
{
    sbuf b = {0};
    sb_printf(&b, "{\"id\":\"bin\",\"parameters\":{\"is_causal\":true},\"inputs\":[{\"name\":"
                  "\"query\",\"datatype\":\"FP32\",\"shape\":[1,3,64],\"parameters\":"
                  "{\"binary_data_size\":768}}],\"outputs\":[{\"name\":\"output\","
                  "\"parameters\":{\"binary_data\":true}}]}");
    c->header_len = (long long)b.len;
    for (int i = 0; i < 192; i++) {
        float v = (float)((i * 37) % 17 - 8) / 8.0f;
        append_bytes(&b, &v, sizeof v);
    }
    c->body = b.p;
    c->len = b.len;
}

static void codec_reset(codec_ctx *c)
{
    free(c->body);
    free(c->ref);
    c->body = c->ref = NULL;
}

TEST(codecs)
{
    codec_ctx c = {.lim = {.max_seq_len = 64, .max_batch_seqs = 16, .max_weights_elems = 1 << 20,
                           .max_json_depth = 16},
                   .header_len = -1};
    attn_error e;
    CHECK_INT_EQ(attn_layer_load_safetensors("config/demo.safetensors", 0, &c.layer, &e), ATTN_OK);
    attn_layer_get_info(c.layer, &c.info);
    const char *v1[] = {"need_weights_per_head_batch", "cross", "attn_mask_float",
                        "key_padding_mask"};
    for (size_t i = 0; i < sizeof v1 / sizeof v1[0]; i++) {
        char path[160], name[80];
        snprintf(path, sizeof path, "proto/examples/%s.request.json", v1[i]);
        snprintf(name, sizeof name, "v1 %s", v1[i]);
        c.body = slurp(path, &c.len);
        inject(name, op_codec_v1, &c);
        codec_reset(&c);
    }
    c.body = slurp("proto/examples/v2_infer_nested.request.json", &c.len);
    inject("v2 JSON infer_nested", op_codec_v2, &c);
    codec_reset(&c);
    v2_binary(&c);
    inject("v2 binary infer", op_codec_v2, &c);
    codec_reset(&c);
    inject("error encoders", op_codec_errors, &c);
    attn_layer_free(c.layer);
}

/* ------------------------------------------------------------ the request path */

typedef struct path_ctx {
    inproc *p;
    inproc_call call;
    int want_status;
    char *ref;                 /* the reference body's "output" (v1) / "outputs" (v2) */
} path_ctx;

/* The part of a body that must not vary between runs (no timings, no ids):
 * "output" or "outputs" as JSON text, or the whole body when it has neither. */
static char *stable_part(const char *body, size_t len)
{
    json_t *j = json_loadb(body, len, 0, NULL);
    if (!j)
        return strndup(body, len); /* binary tails, metrics text */
    json_t *o = json_object_get(j, "output");
    o = o ? o : json_object_get(j, "outputs");
    char *s = o ? json_dumps(o, JSON_COMPACT) : strndup(body, len);
    json_decref(j);
    return s;
}

/* A reply: the reference status (and the same output), or a clean 500. */
static op_result reply_result(path_ctx *c, attnd_reply *r, int ref, char *why, size_t cap)
{
    int was = armed;
    disarm();
    op_result res = OP_OK;
    if (!r->body || r->status == 500) { /* the v1 "internal" or v2 form */
        res = OP_NOMEM;
    } else if (r->status != c->want_status || !r->body) {
        snprintf(why, cap, "%d %s (want %d)", r->status, r->body ? r->body : "(no body)",
                 c->want_status);
        res = OP_BAD;
    } else if (r->status < 300) {
        size_t skip = r->header_name ? (size_t)strtoull(r->header_value, NULL, 10) : 0;
        char *s = skip ? strndup(r->body + skip, r->len - skip) : stable_part(r->body, r->len);
        if (ref) {
            c->ref = s;
        } else {
            if (!s || strcmp(s, c->ref) != 0)
                res = (snprintf(why, cap, "a %d with another answer: %.200s", r->status,
                                r->body), OP_BAD);
            free(s);
        }
    }
    armed = was;
    return res;
}

static op_result op_request(void *ctx, int ref, char *why, size_t cap)
{
    path_ctx *c = ctx;
    attnd_reply r;
    inproc_run(c->p, &c->call, &r);
    op_result res = reply_result(c, &r, ref, why, cap);
    inproc_reply_free(&r);
    return res;
}

/* The id of a session create's answer (unarmed parse). */
static void session_id(const attnd_reply *r, char *id, size_t cap)
{
    int was = armed;
    disarm();
    json_t *j = r->body ? json_loadb(r->body, r->len, 0, NULL) : NULL;
    snprintf(id, cap, "%s", json_string_value(json_object_get(j, "id")) ?
                                json_string_value(json_object_get(j, "id")) : "");
    json_decref(j);
    armed = was;
}

/* Create a session, append T rows, read it, fork it, delete both: every step
 * either works or is a clean 500, and nothing is left behind. */
static op_result op_session(void *ctx, int ref, char *why, size_t cap)
{
    path_ctx *c = ctx;
    static const inproc_header json[] = {{"Content-Type", "application/json"},
                                         {"Content-Length", "0"}};
    attnd_reply r;
    char id[80] = "", path[160];
    inproc_call create = {"POST", "/v1/models/demo/sessions", json, 1, "{}", 2};
    inproc_run(c->p, &create, &r);
    session_id(&r, id, sizeof id);
    op_result res = r.status == 201 ? OP_OK : reply_result(c, &r, 0, why, cap);
    inproc_reply_free(&r);
    if (!id[0])
        return res == OP_OK ? (snprintf(why, cap, "a 201 without an id"), OP_BAD) : res;
    snprintf(path, sizeof path, "/v1/sessions/%s/append", id);
    c->call.path = path;
    op_result a = op_request(c, ref, why, cap);
    res = a != OP_OK ? a : res;
    snprintf(path, sizeof path, "/v1/sessions/%s", id);
    inproc_call del = {"DELETE", path, NULL, 0, NULL, 0};
    int was = armed;
    for (int tries = 0; tries < 2; tries++) { /* a delete can run out of memory too: */
        inproc_run(c->p, &del, &r);          /* then once more, with memory */
        int st = r.status;
        inproc_reply_free(&r);
        if (st == 204 || st == 200 || st == 404)
            break;
        if (st != 500)
            return snprintf(why, cap, "DELETE -> %d", st), OP_BAD;
        disarm();
    }
    armed = was;
    int n = 0;
    size_t bytes = 0;
    attnd_sessions_stats(inproc_app(c->p)->sessions, &n, &bytes, NULL);
    if (n != 0)
        return snprintf(why, cap, "%d session(s) left behind", n), OP_BAD;
    return res;
}

/* The daemon's start-up as main.c does it (settings, metrics, keys, the session
 * store, the models and their schedulers) and its shutdown: it starts, or
 * fails with a message; the layer it loads is the one an unfailed start loads. */
static op_result op_startup(void *ctx, int ref, char *why, size_t cap)
{
    attn_layer_info *want = ctx;
    char err[512] = "";
    char *argv[] = {"attnd", "--model", "gqa=tests/fixtures/ckpt/llama_gqa,layer=1", "--workers", "1",
                    "--log-level", "error", NULL};
    inproc *p = inproc_start(7, argv, err, sizeof err);
    if (!p) {
        if (!err[0])
            return snprintf(why, cap, "start-up failed without a message"), OP_BAD;
        if (strstr(err, "memory") || strstr(err, "NOMEM") || strstr(err, "cannot create"))
            return OP_NOMEM;
        return snprintf(why, cap, "start-up failed: %s", err), OP_BAD;
    }
    attnd_model *m = attnd_models_acquire(inproc_app(p)->models, 0);
    if (ref)
        memcpy(want, &m->info, sizeof *want);
    op_result r = info_equal(&m->info, want) ? OP_OK : OP_BAD;
    if (r == OP_BAD)
        snprintf(why, cap, "started with another layer");
    attnd_model_release(m);
    inproc_stop(p);
    return r;
}

static void run_path(inproc *p, const char *name, const inproc_call *call, int want)
{
    path_ctx c = {.p = p, .call = *call, .want_status = want};
    inject(name, op_request, &c);
    free(c.ref);
}

TEST(request_path)
{
    char err[512] = "";
    char *argv[] = {"attnd", "--model", "demo=config/demo.safetensors", "--workers", "1",
                    "--max-queue-delay-us", "0", "--log-level", "error", NULL};
    inproc *p = inproc_start(9, argv, err, sizeof err);
    CHECK_MSG(p != NULL, "inproc_start: %s", err);
    if (!p)
        return;
    static const inproc_header json[] = {{"Content-Type", "application/json"}};
    size_t len = 0, blen = 0;
    char *v1 = slurp("proto/examples/need_weights_per_head.request.json", &len);
    char *v2 = slurp("proto/examples/v2_infer_flat.request.json", &blen);
    inproc_call calls[] = {
        {"POST", "/v1/attention", json, 1, v1, len},
        {"POST", "/v1/models/demo/attention", json, 1, v1, len},
        {"POST", "/v2/models/demo/infer", json, 1, v2, blen},
        {"GET", "/v1/models", NULL, 0, NULL, 0},
        {"GET", "/v1/models/demo", NULL, 0, NULL, 0},
        {"GET", "/v2/models/demo", NULL, 0, NULL, 0},
        {"GET", "/v1/sessions?limit=5", NULL, 0, NULL, 0},
        {"GET", "/nope", NULL, 0, NULL, 0},
    };
    const int want[] = {200, 200, 200, 200, 200, 200, 200, 404};
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        char name[80];
        snprintf(name, sizeof name, "%s %s", calls[i].method, calls[i].path);
        run_path(p, name, &calls[i], want[i]);
    }
    codec_ctx bin = {0};
    v2_binary(&bin);
    char hl[32];
    snprintf(hl, sizeof hl, "%lld", bin.header_len);
    inproc_header bh[] = {{"Content-Type", "application/octet-stream"},
                          {"Inference-Header-Content-Length", hl}};
    inproc_call binary = {"POST", "/v2/models/demo/infer", bh, 2, bin.body, bin.len};
    run_path(p, "POST v2 binary infer", &binary, 200);
    path_ctx sc = {.p = p, .want_status = 200};
    const char *append = "{\"query\":[[0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.1,0.2,0.3,0.4,0.5,"
                         "0.6,0.7,0.8,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.1,0.2,0.3,0.4,0.5,0.6,"
                         "0.7,0.8,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.1,0.2,0.3,0.4,0.5,0.6,0.7,"
                         "0.8,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.1,0.2,0.3,0.4,0.5,0.6,0.7,"
                         "0.8]],\"need_weights\":true}";
    sc.call = (inproc_call){"POST", "", json, 1, append, strlen(append)};
    inject("session create/append/delete", op_session, &sc);
    free(sc.ref);
    codec_reset(&bin);
    free(v1);
    free(v2);
    inproc_stop(p);
}

TEST(startup)
{
    attn_layer_info info = {0};
    inject("daemon start-up and stop", op_startup, &info);
}

int main(void)
{
    attnd_json_install_alloc(); /* as main.c does; it allocates through the wrappers */
    RUN(library);
    RUN(codecs);
    RUN(request_path);
    RUN(startup);
    return check_summary();
}
