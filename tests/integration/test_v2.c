/* test_v2.c — the Open Inference Protocol (KServe v2) routes through the real daemon on the
 * demo model (E = 64, 8 heads): metadata and health, infer with flat and nested JSON data,
 * binary request and binary response (Triton's binary_tensor_data), outputs filtering, id
 * echo, every size/shape/datatype mismatch -> 400 {"error": "..."} naming the tensor,
 * bit-identical answers across JSON, binary and /v1, and v1 + v2 requests batched together.
 */
#include "check.h"
#include "daemon.h"

#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define E 64
#define HEADS 8

/* ------------------------------------------------------------ text and HTTP */

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_put(sbuf *b, const void *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) abort();
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

typedef struct reply {
    long status;
    sbuf body;
    char ctype[128];
    long long ihcl; /* Inference-Header-Content-Length, -1 when absent */
} reply;

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    sb_put(&((reply *)ud)->body, p, sz * n);
    return sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
    reply *r = ud;
    static const char h[] = "inference-header-content-length:";
    if (sz * n > sizeof h && strncasecmp(p, h, sizeof h - 1) == 0)
        r->ihcl = strtoll(p + sizeof h - 1, NULL, 10);
    return sz * n;
}

/* POST (body != NULL) or GET; ihcl >= 0 sends Inference-Header-Content-Length. */
static int request(const char *url, const char *body, size_t len, long long ihcl,
                   const char *ctype, reply *r)
{
    memset(r, 0, sizeof *r);
    r->ihcl = -1;
    sb_put(&r->body, "", 0);
    CURL *c = curl_easy_init();
    struct curl_slist *hs = NULL;
    char line[160];
    if (!c) return -1;
    snprintf(line, sizeof line, "Content-Type: %s", ctype ? ctype : "application/json");
    hs = curl_slist_append(hs, line);
    if (ihcl >= 0) {
        snprintf(line, sizeof line, "Inference-Header-Content-Length: %lld", ihcl);
        hs = curl_slist_append(hs, line);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) {
        char *ct = NULL;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
        curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
        snprintf(r->ctype, sizeof r->ctype, "%s", ct ? ct : "");
    }
    curl_slist_free_all(hs);
    curl_easy_cleanup(c);
    return rc == CURLE_OK ? 0 : -1;
}

static void reply_free(reply *r) { free(r->body.p); }

static char base[80];

static int post(const char *path, const char *body, size_t len, long long ihcl, reply *r)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", base, path);
    return request(url, body, len, ihcl, ihcl >= 0 ? "application/octet-stream" : NULL, r);
}

static json_t *get_json(const char *path, long *status)
{
    char url[256];
    reply r;
    snprintf(url, sizeof url, "%s%s", base, path);
    if (request(url, NULL, 0, -1, NULL, &r)) return NULL;
    *status = r.status;
    json_t *j = json_loads(r.body.p, 0, NULL);
    reply_free(&r);
    return j;
}

/* ------------------------------------------------------------ tensors */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

typedef struct tensor {
    const char *name, *dtype;
    int rank;
    int dim[4];
    const float *f;      /* FP32 values, or NULL */
    const uint8_t *u8;   /* BOOL values */
} tensor;

static size_t count(const tensor *t)
{
    size_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= (size_t)t->dim[i];
    return n;
}

static void put_value(sbuf *b, const tensor *t, size_t i)
{
    if (t->f) sb_printf(b, "%.9g", (double)t->f[i]);
    else sb_printf(b, "%s", t->u8[i] ? "true" : "false");
}

static void put_nested(sbuf *b, const tensor *t, int lvl, size_t *i)
{
    sb_printf(b, "[");
    for (int k = 0; k < t->dim[lvl]; k++) {
        if (k) sb_printf(b, ",");
        if (lvl + 1 < t->rank) put_nested(b, t, lvl + 1, i);
        else put_value(b, t, (*i)++);
    }
    sb_printf(b, "]");
}

typedef enum { FLAT, NESTED, BINARY } mode;

/* An infer body: JSON header (inputs in order, data flat/nested or binary_data_size), then
 * the raw tensors when BINARY. extra: more top-level members ("" or ",\"outputs\":..."). */
static sbuf infer_body(const tensor *ts, int n, mode m, const char *extra, size_t *header_len)
{
    sbuf b = {0};
    sb_printf(&b, "{\"inputs\":[");
    for (int k = 0; k < n; k++) {
        const tensor *t = &ts[k];
        sb_printf(&b, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[", k ? "," : "",
                  t->name, t->dtype);
        for (int d = 0; d < t->rank; d++) sb_printf(&b, "%s%d", d ? "," : "", t->dim[d]);
        sb_printf(&b, "]");
        size_t cnt = count(t), i = 0;
        if (m == BINARY) {
            sb_printf(&b, ",\"parameters\":{\"binary_data_size\":%zu}}", cnt * (t->f ? 4 : 1));
            continue;
        }
        sb_printf(&b, ",\"data\":");
        if (m == NESTED) {
            put_nested(&b, t, 0, &i);
        } else {
            sb_printf(&b, "[");
            for (i = 0; i < cnt; i++) {
                if (i) sb_printf(&b, ",");
                put_value(&b, t, i);
            }
            sb_printf(&b, "]");
        }
        sb_printf(&b, "}");
    }
    sb_printf(&b, "]%s}", extra);
    *header_len = b.len;
    for (int k = 0; m == BINARY && k < n; k++) /* x86/ARM hosts: little-endian already */
        sb_put(&b, ts[k].f ? (const void *)ts[k].f : (const void *)ts[k].u8,
               count(&ts[k]) * (ts[k].f ? 4 : 1));
    return b;
}

/* A decoded v2 response: the JSON header and the named output's floats. */
typedef struct v2out {
    json_t *hdr;
    float *out, *w;
    size_t n_out, n_w;
    json_t *out_shape, *w_shape;
} v2out;

static void v2out_free(v2out *o)
{
    json_decref(o->hdr);
    free(o->out);
    free(o->w);
    memset(o, 0, sizeof *o);
}

/* Reads outputs from r (JSON data or binary after the header). Returns 0 or -1. */
static int parse_v2(const reply *r, v2out *o)
{
    memset(o, 0, sizeof *o);
    size_t hl = r->ihcl >= 0 ? (size_t)r->ihcl : r->body.len;
    if (hl > r->body.len) return -1;
    o->hdr = json_loadb(r->body.p, hl, 0, NULL);
    if (!o->hdr) return -1;
    size_t off = hl, i;
    json_t *x;
    json_array_foreach(json_object_get(o->hdr, "outputs"), i, x) {
        const char *name = json_string_value(json_object_get(x, "name"));
        int is_w = name && strcmp(name, "attn_weights") == 0;
        json_t *data = json_object_get(x, "data");
        json_t *size = json_object_get(json_object_get(x, "parameters"), "binary_data_size");
        size_t n = data ? json_array_size(data) : (size_t)json_integer_value(size) / 4;
        float *v = calloc(n ? n : 1, sizeof *v);
        if (!v) return -1;
        if (data) {
            for (size_t k = 0; k < n; k++) v[k] = (float)json_number_value(json_array_get(data, k));
        } else {
            if (off + n * 4 > r->body.len) { free(v); return -1; }
            memcpy(v, r->body.p + off, n * 4);
            off += n * 4;
        }
        if (is_w) o->w = v, o->n_w = n, o->w_shape = json_object_get(x, "shape");
        else o->out = v, o->n_out = n, o->out_shape = json_object_get(x, "shape");
    }
    return off == r->body.len ? 0 : -1;
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return a && b && memcmp(a, b, n * sizeof *a) == 0;
}

static int shape_is(const json_t *s, int rank, const int *dims)
{
    if (json_array_size(s) != (size_t)rank) return 0;
    for (int i = 0; i < rank; i++)
        if (json_integer_value(json_array_get(s, (size_t)i)) != dims[i]) return 0;
    return 1;
}

/* ------------------------------------------------------------ tests */

TEST(metadata)
{
    long st = 0;
    json_t *j = get_json("/v2", &st);
    CHECK_INT_EQ(st, 200);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "name")), "attnd");
    CHECK(json_is_string(json_object_get(j, "version")));
    json_t *ext = json_object_get(j, "extensions");
    int has_bin = 0;
    for (size_t i = 0; i < json_array_size(ext); i++)
        has_bin |= strcmp(json_string_value(json_array_get(ext, i)), "binary_tensor_data") == 0;
    CHECK(has_bin);
    json_decref(j);

    j = get_json("/v2/health/live", &st);
    CHECK_INT_EQ(st, 200);
    json_decref(j);
    j = get_json("/v2/health/ready", &st);
    CHECK_INT_EQ(st, 200);
    json_decref(j);
    j = get_json("/v2/models/demo/ready", &st);
    CHECK_INT_EQ(st, 200);
    json_decref(j);
    j = get_json("/v2/models/demo/versions/1/ready", &st);
    CHECK_INT_EQ(st, 200);
    json_decref(j);

    const char *paths[] = {"/v2/models/demo", "/v2/models/demo/versions/1"};
    for (int p = 0; p < 2; p++) {
        j = get_json(paths[p], &st);
        CHECK_INT_EQ(st, 200);
        CHECK_STR_EQ(json_string_value(json_object_get(j, "name")), "demo");
        CHECK(json_is_string(json_object_get(j, "platform")));
        json_t *in0 = json_array_get(json_object_get(j, "inputs"), 0);
        CHECK_STR_EQ(json_string_value(json_object_get(in0, "name")), "query");
        CHECK_STR_EQ(json_string_value(json_object_get(in0, "datatype")), "FP32");
        CHECK(shape_is(json_object_get(in0, "shape"), 3, (int[]){-1, -1, E}));
        json_t *out0 = json_array_get(json_object_get(j, "outputs"), 0);
        CHECK_STR_EQ(json_string_value(json_object_get(out0, "name")), "output");
        CHECK(shape_is(json_object_get(out0, "shape"), 3, (int[]){-1, -1, E}));
        CHECK_INT_EQ(json_array_size(json_object_get(j, "inputs")), 6);
        json_t *in5 = json_array_get(json_object_get(j, "inputs"), 5);
        CHECK_STR_EQ(json_string_value(json_object_get(in5, "name")), "position_ids");
        CHECK_STR_EQ(json_string_value(json_object_get(in5, "datatype")), "INT64");
        json_t *params = json_object_get(j, "parameters");
        CHECK_INT_EQ(json_integer_value(json_object_get(params, "num_kv_heads")), 8);
        CHECK(json_is_null(json_object_get(params, "rope"))); /* the demo layer has no RoPE */
        json_decref(j);
    }
    /* Unknown model: 404 in the v2 error form; unknown version or path: 404. */
    j = get_json("/v2/models/nope", &st);
    CHECK_INT_EQ(st, 404);
    CHECK(json_is_string(json_object_get(j, "error")) && json_object_size(j) == 2);
    CHECK(json_is_string(json_object_get(j, "request_id"))); /* beside KServe's "error" */
    CHECK(strstr(json_string_value(json_object_get(j, "error")), "loaded: demo") != NULL);
    json_decref(j);
    const char *missing[] = {"/v2/models/demo/versions/2", "/v2/nothing"};
    for (int p = 0; p < 2; p++) {
        j = get_json(missing[p], &st);
        CHECK_INT_EQ(st, 404);
        json_decref(j);
    }
    j = get_json("/v2/models/demo/infer", &st); /* GET on a POST route */
    CHECK_INT_EQ(st, 405);
    CHECK(json_is_string(json_object_get(j, "error")));
    json_decref(j);
}

/* Sends the same inputs as flat JSON, nested JSON and binary (JSON and binary answers),
 * and as /v1; every output must carry the same bits. */
TEST(infer_equivalence)
{
    enum { B = 2, T = 3 };
    float q[B * T * E];
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) q[i] = rnd();
    tensor t = {"query", "FP32", 3, {B, T, E}, q, NULL};
    size_t hl;
    reply r;
    v2out ref, o;

    sbuf body = infer_body(&t, 1, FLAT, ",\"id\":\"req-42\"", &hl);
    CHECK(post("/v2/models/demo/infer", body.p, body.len, -1, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK(strncmp(r.ctype, "application/json", 16) == 0);
    CHECK(parse_v2(&r, &ref) == 0);
    CHECK_STR_EQ(json_string_value(json_object_get(ref.hdr, "id")), "req-42");
    CHECK_STR_EQ(json_string_value(json_object_get(ref.hdr, "model_name")), "demo");
    CHECK_INT_EQ(ref.n_out, B * T * E);
    CHECK(shape_is(ref.out_shape, 3, (int[]){B, T, E}));
    CHECK(ref.w == NULL); /* not asked for */
    json_t *params = json_object_get(ref.hdr, "parameters");
    CHECK(json_integer_value(json_object_get(params, "batch_size")) >= 1);
    CHECK(json_is_integer(json_object_get(params, "queue_us")));
    CHECK(json_is_integer(json_object_get(params, "compute_us")));
    reply_free(&r);
    free(body.p);

    /* Nested data, and the versioned path. */
    body = infer_body(&t, 1, NESTED, "", &hl);
    CHECK(post("/v2/models/demo/versions/1/infer", body.p, body.len, -1, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK(parse_v2(&r, &o) == 0);
    CHECK(json_object_get(o.hdr, "id") == NULL); /* no id sent, none echoed */
    CHECK_MSG(same_bits(ref.out, o.out, ref.n_out), "nested JSON differs from flat");
    v2out_free(&o);
    reply_free(&r);
    free(body.p);

    /* Binary request, JSON answer. */
    body = infer_body(&t, 1, BINARY, "", &hl);
    CHECK(post("/v2/models/demo/infer", body.p, body.len, (long long)hl, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK(r.ihcl == -1);
    CHECK(parse_v2(&r, &o) == 0);
    CHECK_MSG(same_bits(ref.out, o.out, ref.n_out), "binary request differs from JSON");
    v2out_free(&o);
    reply_free(&r);
    free(body.p);

    /* Binary request, binary answer (request-wide binary_data_output). */
    body = infer_body(&t, 1, BINARY, ",\"parameters\":{\"binary_data_output\":true}", &hl);
    CHECK(post("/v2/models/demo/infer", body.p, body.len, (long long)hl, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK(strncmp(r.ctype, "application/octet-stream", 24) == 0);
    CHECK(r.ihcl > 0 && (size_t)r.ihcl + (size_t)B * T * E * 4 == r.body.len);
    CHECK(parse_v2(&r, &o) == 0);
    json_t *o0 = json_array_get(json_object_get(o.hdr, "outputs"), 0);
    CHECK_INT_EQ(json_integer_value(
                     json_object_get(json_object_get(o0, "parameters"), "binary_data_size")),
                 B * T * E * 4);
    CHECK(json_object_get(o0, "data") == NULL);
    CHECK_MSG(same_bits(ref.out, o.out, ref.n_out), "binary answer differs from JSON");
    v2out_free(&o);
    reply_free(&r);
    free(body.p);

    /* /v1 with the same query (B×T×E nest) gives the same bits. */
    sbuf v1 = {0};
    size_t i = 0;
    sb_printf(&v1, "{\"query\":");
    put_nested(&v1, &t, 0, &i);
    sb_printf(&v1, "}");
    CHECK(post("/v1/models/demo/attention", v1.p, v1.len, -1, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *j = json_loads(r.body.p, 0, NULL);
    float v1out[B * T * E];
    size_t k = 0;
    for (size_t b = 0; b < B; b++)
        for (size_t tt = 0; tt < T; tt++)
            for (size_t e = 0; e < E; e++)
                v1out[k++] = (float)json_number_value(json_array_get(
                    json_array_get(json_array_get(json_object_get(j, "output"), b), tt), e));
    CHECK_MSG(same_bits(ref.out, v1out, ref.n_out), "/v2 differs from /v1");
    json_decref(j);
    reply_free(&r);
    free(v1.p);
    v2out_free(&ref);
}

/* Cross-attention with every optional input, binary BOOL masks, weights and outputs
 * filtering, against /v1 on the same inputs. */
TEST(cross_masks_weights)
{
    enum { B = 2, T = 3, S = 4 };
    float q[B * T * E], k[B * S * E], v[B * S * E], am[T * S];
    uint8_t kpm[B * S] = {0, 0, 0, 1, 0, 1, 0, 0};
    for (size_t i = 0; i < B * T * E; i++) q[i] = rnd();
    for (size_t i = 0; i < B * S * E; i++) k[i] = rnd(), v[i] = rnd();
    for (size_t i = 0; i < T * S; i++) am[i] = i % 5 == 1 ? -1.5f : 0.25f * (float)(i % 3);
    tensor ts[] = {{"query", "FP32", 3, {B, T, E}, q, NULL},
                   {"key", "FP32", 3, {B, S, E}, k, NULL},
                   {"value", "FP32", 3, {B, S, E}, v, NULL},
                   {"key_padding_mask", "BOOL", 2, {B, S}, NULL, kpm},
                   {"attn_mask", "FP32", 2, {T, S}, am, NULL}};
    size_t hl;
    reply r;
    v2out bin, js;

    /* Binary in, weights (asked for by listing them) out as binary, output as JSON. */
    sbuf body = infer_body(ts, 5, BINARY,
                           ",\"parameters\":{\"is_causal\":true},\"outputs\":[{\"name\":"
                           "\"attn_weights\",\"parameters\":{\"binary_data\":true}},{\"name\":"
                           "\"output\"}]",
                           &hl);
    CHECK(post("/v2/models/demo/infer", body.p, body.len, (long long)hl, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK(r.ihcl > 0 && (size_t)r.ihcl + B * T * S * 4 == r.body.len);
    CHECK(parse_v2(&r, &bin) == 0);
    CHECK(bin.w && bin.out);
    CHECK(shape_is(bin.w_shape, 3, (int[]){B, T, S}));
    CHECK_STR_EQ(json_string_value(json_object_get(
                     json_array_get(json_object_get(bin.hdr, "outputs"), 0), "name")),
                 "attn_weights"); /* in the order requested */
    reply_free(&r);
    free(body.p);

    /* The same as JSON, weights per head; then only "output" although need_weights. */
    body = infer_body(ts, 5, NESTED,
                      ",\"parameters\":{\"is_causal\":true,\"need_weights\":true,"
                      "\"average_attn_weights\":false}",
                      &hl);
    CHECK(post("/v2/models/demo/infer", body.p, body.len, -1, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK(parse_v2(&r, &js) == 0);
    CHECK(shape_is(js.w_shape, 4, (int[]){B, HEADS, T, S}));
    CHECK_MSG(same_bits(bin.out, js.out, bin.n_out), "binary and JSON cross outputs differ");
    /* Averaged weights = mean over heads of the per-head ones (within rounding). */
    double worst = 0;
    for (size_t b = 0; b < B; b++)
        for (size_t x = 0; x < T * S; x++) {
            double m = 0;
            for (size_t h = 0; h < HEADS; h++) m += js.w[(b * HEADS + h) * T * S + x];
            double d = m / HEADS - bin.w[b * T * S + x];
            worst = d > worst ? d : -d > worst ? -d : worst;
        }
    CHECK_MSG(worst < 1e-6, "averaged weights off by %g", worst);
    /* Masked keys get zero weight (key 3 of sequence 0 is padding). */
    CHECK(bin.w[0 * T * S + 0 * S + 3] == 0.0f);
    /* Causal: query 0 sees only key 0. */
    CHECK(bin.w[1 * T * S + 0 * S + 1] == 0.0f);
    v2out_free(&js);
    reply_free(&r);
    free(body.p);

    body = infer_body(ts, 5, FLAT,
                      ",\"parameters\":{\"is_causal\":true,\"need_weights\":true},"
                      "\"outputs\":[{\"name\":\"output\"}]",
                      &hl);
    CHECK(post("/v2/models/demo/infer", body.p, body.len, -1, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK(parse_v2(&r, &js) == 0);
    CHECK(js.w == NULL && json_array_size(json_object_get(js.hdr, "outputs")) == 1);
    /* Without weights the library takes its fused kernel: equal to rounding, not bits. */
    worst = 0;
    for (size_t x = 0; js.out && x < bin.n_out; x++) {
        double d = fabs((double)js.out[x] - bin.out[x]);
        worst = d > worst ? d : worst;
    }
    CHECK_MSG(js.out && worst < 1e-5, "filtered output off by %g", worst);
    v2out_free(&js);
    reply_free(&r);
    free(body.p);

    /* /v1: same inputs, shared T×S float mask, weights averaged. */
    sbuf v1 = {0};
    size_t i;
    const char *names[] = {"query", "key", "value", "key_padding_mask", "attn_mask"};
    sb_printf(&v1, "{\"is_causal\":true,\"need_weights\":true");
    for (int n = 0; n < 5; n++) {
        sb_printf(&v1, ",\"%s\":", names[n]);
        i = 0;
        put_nested(&v1, &ts[n], 0, &i);
    }
    sb_printf(&v1, "}");
    CHECK(post("/v1/models/demo/attention", v1.p, v1.len, -1, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    json_t *j = json_loads(r.body.p, 0, NULL);
    int out_same = 1, w_same = 1;
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++) {
            json_t *orow = json_array_get(json_array_get(json_object_get(j, "output"), b), t);
            json_t *wrow = json_array_get(json_array_get(json_object_get(j, "weights"), b), t);
            for (size_t e = 0; e < E; e++)
                out_same &= (float)json_number_value(json_array_get(orow, e)) ==
                            bin.out[(b * T + t) * E + e];
            for (size_t s = 0; s < S; s++)
                w_same &= (float)json_number_value(json_array_get(wrow, s)) ==
                          bin.w[(b * T + t) * S + s];
        }
    CHECK_MSG(out_same, "/v2 cross output differs from /v1");
    CHECK_MSG(w_same, "/v2 weights differ from /v1");
    json_decref(j);
    reply_free(&r);
    free(v1.p);
    v2out_free(&bin);
}

/* A body that must be refused with 400 {"error": "..."} whose message names `needle`. */
static void expect_400(const char *what, const char *body, size_t len, long long ihcl,
                       const char *needle)
{
    reply r;
    CHECK(post("/v2/models/demo/infer", body, len, ihcl, &r) == 0);
    json_t *j = json_loads(r.body.p, 0, NULL);
    const char *msg = json_string_value(json_object_get(j, "error"));
    CHECK_MSG(r.status == 400, "%s: status %ld: %s", what, r.status, r.body.p);
    CHECK_MSG(msg && json_object_size(j) == 2 && json_is_string(json_object_get(j, "request_id")),
              "%s: body %s", what, r.body.p);
    CHECK_MSG(msg && strstr(msg, needle), "%s: message \"%s\" does not name %s", what,
              msg ? msg : "", needle);
    json_decref(j);
    reply_free(&r);
}

TEST(errors)
{
    float q[2 * E];
    for (size_t i = 0; i < 2 * E; i++) q[i] = rnd();
    tensor t = {"query", "FP32", 3, {1, 2, E}, q, NULL};
    size_t hl;
    sbuf ok = infer_body(&t, 1, BINARY, "", &hl);
    char hdr[512];

    /* binary_data_size disagrees with the shape */
    int n = snprintf(hdr, sizeof hdr,
                     "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,%d],"
                     "\"parameters\":{\"binary_data_size\":%d}}]}", E, 2 * E * 4 - 4);
    sbuf b = {0};
    sb_put(&b, hdr, (size_t)n);
    sb_put(&b, q, 2 * E * 4 - 4);
    expect_400("binary size vs shape", b.p, b.len, n, "query");
    free(b.p);

    /* header length beyond the body */
    expect_400("header length beyond body", ok.p, ok.len, (long long)ok.len + 10,
               "Inference-Header-Content-Length");
    /* the body ends inside the query's bytes */
    expect_400("binary past body", ok.p, ok.len - 8, (long long)hl, "query");
    /* bytes left over after the last binary input */
    b = (sbuf){0};
    sb_put(&b, ok.p, ok.len);
    sb_put(&b, "xyz", 3);
    expect_400("trailing bytes", b.p, b.len, (long long)hl, "binary");
    free(b.p);
    /* a non-finite binary value is refused by index, in any 64-value block or the tail */
    const size_t bad_at[] = {0, 63, 70, 2 * E - 1};
    for (size_t i = 0; i < sizeof bad_at / sizeof bad_at[0]; i++) {
        float keep = q[bad_at[i]];
        q[bad_at[i]] = i % 2 ? NAN : -INFINITY;
        sbuf nf = infer_body(&t, 1, BINARY, "", &hl);
        char needle[64];
        snprintf(needle, sizeof needle, "element %zu is not finite", bad_at[i]);
        expect_400("non-finite binary query", nf.p, nf.len, (long long)hl, needle);
        free(nf.p);
        q[bad_at[i]] = keep;
    }
    /* binary_data_size without the header-length header: the body is not JSON */
    expect_400("binary without header length", ok.p, ok.len, -1, "JSON");

    const char *unknown = "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,1,1],"
                          "\"data\":[1]},{\"name\":\"bogus_in\",\"datatype\":\"FP32\","
                          "\"shape\":[1],\"data\":[1]}]}";
    expect_400("unknown input", unknown, strlen(unknown), -1, "bogus_in");

    sbuf j = {0};
    sb_printf(&j, "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"INT32\",\"shape\":[1,1,%d],"
              "\"data\":[", E);
    for (int i = 0; i < E; i++) sb_printf(&j, "%s1", i ? "," : "");
    sb_printf(&j, "]}]}");
    expect_400("unsupported datatype", j.p, j.len, -1, "query");
    free(j.p);

    j = (sbuf){0};
    sb_printf(&j, "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,1,%d],"
              "\"data\":[", E);
    for (int i = 0; i < E; i++) sb_printf(&j, "%s1", i ? "," : "");
    sb_printf(&j, "]},{\"name\":\"key_padding_mask\",\"datatype\":\"FP32\",\"shape\":[1,1],"
              "\"data\":[0]}]}");
    expect_400("wrong datatype (FP32 mask)", j.p, j.len, -1, "key_padding_mask");
    free(j.p);

    j = (sbuf){0};
    sb_printf(&j, "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,%d],"
              "\"data\":[", E - 1);
    for (int i = 0; i < 2 * (E - 1); i++) sb_printf(&j, "%s1", i ? "," : "");
    sb_printf(&j, "]}]}");
    expect_400("wrong shape (E)", j.p, j.len, -1, "query");
    char want[64]; /* the expected shape, written only when the check fails */
    snprintf(want, sizeof want, "input \"query\": shape [1,2,%d], expected [B,T,%d]", E - 1, E);
    expect_400("wrong shape (E), message", j.p, j.len, -1, want);
    free(j.p);

    j = (sbuf){0};
    sb_printf(&j, "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,%d],"
              "\"data\":[", E);
    for (int i = 0; i < 2 * E; i++) sb_printf(&j, "%s1", i ? "," : "");
    sb_printf(&j, "]},{\"name\":\"key_padding_mask\",\"datatype\":\"BOOL\",\"shape\":[1,3],"
              "\"data\":[false,false,true]}]}");
    expect_400("wrong shape (mask S)", j.p, j.len, -1, "key_padding_mask");
    expect_400("wrong shape (mask S), message", j.p, j.len, -1,
               "shape [1,3], expected [1,2] (B,S)");
    free(j.p);

    j = (sbuf){0};
    sb_printf(&j, "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,%d],"
              "\"data\":[1,2,3]}]}", E);
    expect_400("data count vs shape", j.p, j.len, -1, "query");
    free(j.p);

    const char *noq = "{\"inputs\":[{\"name\":\"key\",\"datatype\":\"FP32\",\"shape\":[1,1,1],"
                      "\"data\":[1]}]}";
    expect_400("missing query", noq, strlen(noq), -1, "query");

    sbuf bad_out = infer_body(&t, 1, FLAT, ",\"outputs\":[{\"name\":\"logits\"}]", &hl);
    expect_400("unknown output", bad_out.p, bad_out.len, -1, "logits");
    free(bad_out.p);
    free(ok.p);

    /* A non-JSON media type without the header-length header is 415, v2 form. */
    reply r;
    char url[256];
    snprintf(url, sizeof url, "%s/v2/models/demo/infer", base);
    CHECK(request(url, "{}", 2, -1, "text/plain", &r) == 0);
    CHECK_INT_EQ(r.status, 415);
    json_t *e = json_loads(r.body.p, 0, NULL);
    CHECK(json_is_string(json_object_get(e, "error")));
    json_decref(e);
    reply_free(&r);
}

/* ------------------------------------------------------------ batching */

typedef struct job {
    const char *path;
    sbuf body;
    long long ihcl;
    reply r;
} job;

static void *run_job(void *arg)
{
    job *jb = arg;
    post(jb->path, jb->body.p, jb->body.len, jb->ihcl, &jb->r);
    return NULL;
}

/* One /v1 and one /v2 (binary) request at once, on a daemon that waits up to 2 s for a
 * batch of 2: both must report batch_size 2, i.e. they ran in one batch. */
TEST(batch_with_v1)
{
    attnd_proc p;
    const char *args[] = {"--max-batch-requests", "2", "--max-queue-delay-us", "2000000", NULL};
    CHECK(attnd_proc_start(&p, args) == 0);
    snprintf(base, sizeof base, "%s", p.base_url);
    float q[3 * E];
    for (size_t i = 0; i < 3 * E; i++) q[i] = rnd();
    tensor t = {"query", "FP32", 3, {1, 3, E}, q, NULL};
    size_t hl, i = 0;
    job jobs[2] = {{"/v2/models/demo/infer", infer_body(&t, 1, BINARY, "", &hl), 0, {0}},
                   {"/v1/models/demo/attention", {0}, -1, {0}}};
    jobs[0].ihcl = (long long)hl;
    sb_printf(&jobs[1].body, "{\"query\":");
    put_nested(&jobs[1].body, &t, 0, &i);
    sb_printf(&jobs[1].body, "}");
    pthread_t th[2];
    for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, run_job, &jobs[k]);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    CHECK_INT_EQ(jobs[0].r.status, 200);
    CHECK_INT_EQ(jobs[1].r.status, 200);
    json_t *a = json_loads(jobs[0].r.body.p, 0, NULL), *b = json_loads(jobs[1].r.body.p, 0, NULL);
    CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(a, "parameters"),
                                                    "batch_size")), 2);
    CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(b, "timing"), "batch_size")),
                 2);
    json_decref(a);
    json_decref(b);

    /* The v2 route has its own label in /metrics. A request is counted when
     * libmicrohttpd reports it completed, which can come after its client has
     * read the answer (these two came on their own connections): scrape until
     * it shows, for up to 2 s. */
    char url[256];
    snprintf(url, sizeof url, "%s/metrics", base);
    int counted = 0;
    for (int tries = 0; tries < 200 && !counted; tries++) {
        http_result m;
        if (http_do("GET", url, NULL, 0, NULL, &m) == 0) {
            counted = m.body && strstr(m.body, "route=\"/v2/models/{name}/infer\",status=\"200\"");
            http_result_free(&m);
        }
        if (!counted) nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    CHECK_MSG(counted, "/metrics never counted the /v2 request");
    for (int k = 0; k < 2; k++) {
        reply_free(&jobs[k].r);
        free(jobs[k].body.p);
    }
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    attnd_proc p;
    if (attnd_proc_start(&p, NULL) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return check_summary();
    }
    snprintf(base, sizeof base, "%s", p.base_url);
    RUN(metadata);
    RUN(infer_equivalence);
    RUN(cross_masks_weights);
    RUN(errors);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    RUN(batch_with_v1);
    curl_global_cleanup();
    return check_summary();
}
