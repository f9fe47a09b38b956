/* load_reqgen.c — builds attnd-load's request pool: random attention requests from a seeded
 * PRNG (splitmix64), /v1 JSON or KServe v2 (JSON or binary tensors), or request files sent
 * verbatim; records each one's expected response shape. */
#include "load_reqgen.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable string ---------------------------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_reserve(sbuf *b, size_t extra)
{
    if (b->oom || b->n + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + extra + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->oom = 1;
        return;
    }
    b->s = s;
    b->cap = cap;
}

static void sb_put(sbuf *b, const char *s, size_t n)
{
    sb_reserve(b, n);
    if (b->oom) return;
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt(sbuf *b, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* ---- PRNG ------------------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform integer in [lo, hi]. */
static int rand_int(uint64_t *s, int lo, int hi)
{
    return lo + (int)(splitmix64(s) % (uint64_t)(hi - lo + 1));
}

/* ---- generated requests ---------------------------------------------------------------------- */

/* f as 4 little-endian bytes (the v2 binary tensor encoding). */
static void put_f32_le(sbuf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    char le[4] = {(char)(u & 0xff), (char)(u >> 8 & 0xff), (char)(u >> 16 & 0xff), (char)(u >> 24)};
    sb_put(b, le, 4);
}

/* rows x cols matrix of uniform values in [-1, 1) with 4 decimals. */
static void put_matrix(sbuf *b, uint64_t *rng, int rows, int cols)
{
    sb_str(b, "[");
    for (int r = 0; r < rows; r++) {
        sb_str(b, r ? ",[" : "[");
        for (int c = 0; c < cols; c++) {
            int v = (int)(splitmix64(rng) % 20001) - 10000; /* -1.0000 .. 1.0000 */
            sb_fmt(b, "%s%s%d.%04d", c ? "," : "", v < 0 ? "-" : "", abs(v) / 10000,
                   abs(v) % 10000);
        }
        sb_str(b, "]");
    }
    sb_str(b, "]");
}

static void put_padding(sbuf *b, int s_len, int pad)
{
    sb_str(b, "[");
    for (int j = 0; j < s_len; j++) sb_str(b, j ? (j >= s_len - pad ? ",true" : ",false")
                                                : (j >= s_len - pad ? "true" : "false"));
    sb_str(b, "]");
}

/* Keys to mask: round(P*S), leaving at least one visible. */
static int pad_count(int s_len, double p)
{
    int pad = (int)floor(p * s_len + 0.5);
    return pad >= s_len ? s_len - 1 : pad;
}

/* Writes the comma-separated sequences of one field (query/key/padding) for all B sequences. */
typedef enum { F_QUERY, F_KEY, F_VALUE, F_PAD } field;

static void put_field(sbuf *b, uint64_t *rng, field f, int batched, int nseq, const int *t,
                      const int *s, const load_opts *o, const load_model *m)
{
    if (batched) sb_str(b, "[");
    for (int i = 0; i < nseq; i++) {
        if (i) sb_str(b, ",");
        switch (f) {
        case F_QUERY: put_matrix(b, rng, t[i], m->embed_q); break;
        case F_KEY: put_matrix(b, rng, s[i], m->embed_k); break;
        case F_VALUE: put_matrix(b, rng, s[i], m->embed_v); break;
        case F_PAD: put_padding(b, s[i], pad_count(s[i], o->key_padding)); break;
        }
    }
    if (batched) sb_str(b, "]");
}

/* Expected nesting of output (T x E_out) and averaged weights (T x S) per sequence. */
static int expect_shapes(load_req *r, int batched, int nseq, const int *t, const int *s,
                         int e_out, int weights)
{
    int d = batched ? 1 : 0;
    if (batched && load_shape_push(&r->output, 0, nseq)) return -1;
    if (weights && batched && load_shape_push(&r->weights, 0, nseq)) return -1;
    for (int i = 0; i < nseq; i++) {
        if (load_shape_push_matrix(&r->output, d, t[i], e_out)) return -1;
        if (weights && load_shape_push_matrix(&r->weights, d, t[i], s[i])) return -1;
    }
    return 0;
}

static int seq_len(uint64_t *rng, const load_opts *o)
{
    if (o->seq_dist_n) return o->seq_dist[splitmix64(rng) % o->seq_dist_n];
    return rand_int(rng, o->seq_min, o->seq_max);
}

static int gen_one(load_req *r, size_t idx, uint64_t *rng, const load_opts *o, const load_model *m)
{
    int batched = o->batch > 0, nseq = batched ? o->batch : 1;
    int *t = calloc((size_t)nseq, sizeof *t), *s = calloc((size_t)nseq, sizeof *s);
    sbuf b = {0};
    int rc = -1;
    if (!t || !s) goto done;
    for (int i = 0; i < nseq; i++) {
        t[i] = seq_len(rng, o);
        s[i] = !o->cross ? t[i] : o->key_min ? rand_int(rng, o->key_min, o->key_max) : t[i];
        r->tokens += t[i];
    }
    r->sequences = nseq;
    snprintf(r->id, sizeof r->id, "load-%zu", idx);
    sb_fmt(&b, "{\"id\":\"%s\",\"query\":", r->id);
    put_field(&b, rng, F_QUERY, batched, nseq, t, s, o, m);
    if (o->cross) {
        sb_str(&b, ",\"key\":");
        put_field(&b, rng, F_KEY, batched, nseq, t, s, o, m);
        if (m->embed_v != m->embed_k) { /* value defaults to key only when widths agree */
            sb_str(&b, ",\"value\":");
            put_field(&b, rng, F_VALUE, batched, nseq, t, s, o, m);
        }
    }
    if (o->key_padding > 0) {
        sb_str(&b, ",\"key_padding_mask\":");
        put_field(&b, rng, F_PAD, batched, nseq, t, s, o, m);
    }
    if (o->causal) sb_str(&b, ",\"is_causal\":true");
    if (o->window) sb_fmt(&b, ",\"window\":%d", o->window);
    if (o->need_weights) sb_str(&b, ",\"need_weights\":true");
    sb_str(&b, "}");
    r->want_weights = o->need_weights;
    if (b.oom || expect_shapes(r, batched, nseq, t, s, m->embed_out, o->need_weights)) goto done;
    r->body = b.s;
    r->len = b.n;
    b.s = NULL;
    rc = 0;
done:
    free(b.s);
    free(t);
    free(s);
    return rc;
}

char *load_gen_query_body(unsigned long long *rng, int rows, int cols, size_t *len)
{
    sbuf b = {0};
    uint64_t state = *rng;
    sb_str(&b, "{\"query\":");
    put_matrix(&b, &state, rows, cols);
    sb_str(&b, "}");
    *rng = state;
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *len = b.n;
    return b.s;
}

char *load_gen_query_binary(unsigned long long *rng, int rows, int cols, size_t *len,
                            size_t *header_len)
{
    sbuf b = {0};
    uint64_t state = *rng;
    sb_fmt(&b, "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,%d,%d],", rows, cols);
    sb_fmt(&b, "\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":%zu}}],",
           (size_t)rows * (size_t)cols * 4);
    sb_str(&b, "\"outputs\":[{\"name\":\"output\",\"parameters\":{\"binary_data\":true}}]}");
    *header_len = b.n;
    for (long i = 0; i < (long)rows * cols; i++) /* the values put_matrix would print */
        put_f32_le(&b, (float)((int)(splitmix64(&state) % 20001) - 10000) / 10000.0f);
    *rng = state;
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *len = b.n;
    return b.s;
}

/* ---- KServe v2 requests ----------------------------------------------------------------------- */

/* One input tensor of a v2 request: JSON data, or (binary) its bytes appended to raw. */
typedef struct v2_input {
    const char *name, *datatype;
    int rank;
    int dim[3];
    int pad;             /* BOOL key_padding_mask: keys >= S - pad are masked */
} v2_input;

static void put_v2_input(sbuf *h, sbuf *raw, uint64_t *rng, const v2_input *in, int first,
                         int binary)
{
    size_t count = 1;
    int is_bool = in->datatype[0] == 'B';
    sb_fmt(h, "%s{\"name\":\"%s\",", first ? "" : ",", in->name);
    sb_fmt(h, "\"datatype\":\"%s\",\"shape\":[", in->datatype);
    for (int i = 0; i < in->rank; i++) {
        sb_fmt(h, "%s%d", i ? "," : "", in->dim[i]);
        count *= (size_t)in->dim[i];
    }
    if (binary)
        sb_fmt(h, "],\"parameters\":{\"binary_data_size\":%zu}}", count * (is_bool ? 1 : 4));
    else
        sb_str(h, "],\"data\":[");
    sbuf *out = binary ? raw : h;
    for (size_t i = 0; i < count; i++) {
        if (is_bool) { /* [B,S]: element i is key i % S */
            int j = (int)(i % (size_t)in->dim[1]), masked = j >= in->dim[1] - in->pad;
            if (binary) sb_put(out, masked ? "\1" : "\0", 1);
            else sb_str(out, masked ? (i ? ",true" : "true") : (i ? ",false" : "false"));
            continue;
        }
        int v = (int)(splitmix64(rng) % 20001) - 10000; /* -1.0000 .. 1.0000 */
        if (!binary) {
            sb_fmt(out, "%s%s%d.%04d", i ? "," : "", v < 0 ? "-" : "", abs(v) / 10000,
                   abs(v) % 10000);
            continue;
        }
        put_f32_le(out, (float)v / 10000.0f);
    }
    if (!binary) sb_str(h, "]}");
}

/* A v2 infer request: query [B,T,E_q] (one T for all B sequences), key/value [B,S,E],
 * key_padding_mask BOOL [B,S], options as parameters. With --binary the tensors follow the
 * JSON header as raw little-endian bytes and every output is asked for as binary. */
static int gen_one_v2(load_req *r, size_t idx, uint64_t *rng, const load_opts *o,
                      const load_model *m)
{
    int B = o->batch > 0 ? o->batch : 1, T = seq_len(rng, o);
    int S = !o->cross ? T : o->key_min ? rand_int(rng, o->key_min, o->key_max) : T;
    v2_input in[4];
    int n = 0;
    in[n++] = (v2_input){"query", "FP32", 3, {B, T, m->embed_q}, 0};
    if (o->cross) in[n++] = (v2_input){"key", "FP32", 3, {B, S, m->embed_k}, 0};
    if (o->cross && m->embed_v != m->embed_k) /* value defaults to key only when widths agree */
        in[n++] = (v2_input){"value", "FP32", 3, {B, S, m->embed_v}, 0};
    if (o->key_padding > 0)
        in[n++] = (v2_input){"key_padding_mask", "BOOL", 2, {B, S, 0},
                             pad_count(S, o->key_padding)};
    sbuf h = {0}, raw = {0};
    snprintf(r->id, sizeof r->id, "load-%zu", idx);
    sb_fmt(&h, "{\"id\":\"%s\",\"inputs\":[", r->id);
    for (int i = 0; i < n; i++) put_v2_input(&h, &raw, rng, &in[i], i == 0, o->binary);
    sb_str(&h, "]");
    if (o->causal || o->window || o->need_weights || o->binary) {
        sb_str(&h, ",\"parameters\":{");
        int k = 0;
        if (o->causal) sb_str(&h, k++ ? ",\"is_causal\":true" : "\"is_causal\":true");
        if (o->window) sb_fmt(&h, "%s\"window\":%d", k++ ? "," : "", o->window);
        if (o->need_weights) sb_str(&h, k++ ? ",\"need_weights\":true" : "\"need_weights\":true");
        if (o->binary) sb_str(&h, k++ ? ",\"binary_data_output\":true" : "\"binary_data_output\":true");
        sb_str(&h, "}");
    }
    sb_str(&h, "}");
    size_t header_len = h.n;
    if (raw.n) sb_put(&h, raw.s, raw.n);
    int oom = h.oom || raw.oom;
    free(raw.s);
    if (oom) {
        free(h.s);
        return -1;
    }
    r->body = h.s;
    r->len = h.n;
    r->tokens = (long)B * T;
    r->sequences = B;
    r->want_weights = o->need_weights;
    r->v2.on = 1;
    r->v2.header_len = o->binary ? header_len : 0;
    r->v2.expect = (load_expect_v2){.binary = o->binary, .weights = o->need_weights, .b = B,
                                    .t = T, .s = S, .e_out = m->embed_out};
    return 0;
}

/* ---- request files ----------------------------------------------------------------------------- */

static int file_fail(char *err, size_t el, const char *path, const char *why)
{
    snprintf(err, el, "--request-file %s: %s", path, why);
    return -1;
}

/* Expected shapes of a request read from a file; the JSON is only inspected, sent verbatim. */
static int file_expect(load_req *r, json_t *root, const load_model *m, const char *path,
                       char *err, size_t el)
{
    json_t *q = json_object_get(root, "query"), *k = json_object_get(root, "key");
    json_t *nw = json_object_get(root, "need_weights"), *avg = json_object_get(root, "average_attn_weights");
    json_t *id = json_object_get(root, "id");
    if (!json_is_array(q) || !json_array_size(q) || !json_is_array(json_array_get(q, 0)))
        return file_fail(err, el, path, "no 'query' matrix");
    int batched = json_is_array(json_array_get(json_array_get(q, 0), 0));
    int nseq = batched ? (int)json_array_size(q) : 1;
    int per_head = json_is_false(avg), d = batched ? 1 : 0;
    r->want_weights = json_is_true(nw);
    r->sequences = nseq;
    if (json_is_string(id)) snprintf(r->id, sizeof r->id, "%s", json_string_value(id));
    if (json_is_string(id) && strlen(json_string_value(id)) >= sizeof r->id) r->id[0] = 0;
    if (batched && load_shape_push(&r->output, 0, nseq)) return -1;
    if (r->want_weights && batched && load_shape_push(&r->weights, 0, nseq)) return -1;
    for (int i = 0; i < nseq; i++) {
        json_t *qi = batched ? json_array_get(q, (size_t)i) : q;
        json_t *ki = k ? (batched ? json_array_get(k, (size_t)i) : k) : qi;
        int t = (int)json_array_size(qi), s = (int)json_array_size(ki);
        r->tokens += t;
        if (load_shape_push_matrix(&r->output, d, t, m->embed_out)) return -1;
        if (!r->want_weights) continue;
        if (!per_head) {
            if (load_shape_push_matrix(&r->weights, d, t, s)) return -1;
            continue;
        }
        if (load_shape_push(&r->weights, d, m->heads)) return -1;
        for (int h = 0; h < m->heads; h++)
            if (load_shape_push_matrix(&r->weights, d + 1, t, s)) return -1;
    }
    return 0;
}

static int load_file(load_req *r, const char *path, const load_model *m, char *err, size_t el)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    FILE *f = NULL;
    long n;
    int rc = -1;
    if (!root) {
        snprintf(err, el, "--request-file %s:%d:%d: %s", path, je.line, je.column, je.text);
        return -1;
    }
    if (file_expect(r, root, m, path, err, el)) {
        if (!err[0]) file_fail(err, el, path, "out of memory");
        goto done;
    }
    f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
        file_fail(err, el, path, "cannot read");
        goto done;
    }
    r->body = malloc((size_t)n + 1);
    if (!r->body || fread(r->body, 1, (size_t)n, f) != (size_t)n) {
        file_fail(err, el, path, "cannot read");
        goto done;
    }
    r->body[n] = 0;
    r->len = (size_t)n;
    rc = 0;
done:
    if (f) fclose(f);
    json_decref(root);
    return rc;
}

/* ---- pool -------------------------------------------------------------------------------------- */

int load_pool_build(load_pool *p, const load_opts *o, const load_model *m, char *err, size_t el)
{
    size_t n = o->n_request_files ? o->n_request_files : (size_t)o->pool;
    uint64_t rng = o->seed;
    memset(p, 0, sizeof *p);
    err[0] = 0;
    p->reqs = calloc(n, sizeof *p->reqs);
    if (!p->reqs) goto oom;
    for (p->n = 0; p->n < n; p->n++) {
        load_req *r = &p->reqs[p->n];
        int rc = o->n_request_files ? load_file(r, o->request_files[p->n], m, err, el)
                 : o->protocol == 2 ? gen_one_v2(r, p->n, &rng, o, m)
                                    : gen_one(r, p->n, &rng, o, m);
        if (rc) {
            p->n++; /* so that the partial entry is freed */
            if (!err[0]) goto oom;
            goto fail;
        }
    }
    return 0;
oom:
    snprintf(err, el, "out of memory building the request pool");
fail:
    load_pool_free(p);
    return -1;
}

void load_pool_free(load_pool *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->reqs[i].body);
        load_shape_free(&p->reqs[i].output);
        load_shape_free(&p->reqs[i].weights);
    }
    free(p->reqs);
    memset(p, 0, sizeof *p);
}

load_expect load_req_expect(const load_req *r)
{
    load_expect e = {.output = &r->output, .weights = r->want_weights ? &r->weights : NULL,
                     .id = r->id};
    return e;
}

load_expect_v2 load_req_expect_v2(const load_req *r)
{
    load_expect_v2 e = r->v2.expect;
    e.id = r->id;
    return e;
}
