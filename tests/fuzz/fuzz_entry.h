/* fuzz_entry.h — the bodies of the fuzz targets, shared by the libFuzzer binaries
 * (tests/fuzz/fuzz_*.c, built by clang in scripts/fuzz.sh) and their replay test
 * (tests/unit/test_fuzz_replay.c, built by gcc in every `make test`).
 *
 * Each entry takes one input and returns 0 when every invariant held, or -1 with
 * a sentence in bug[] naming the broken one. Memory errors are the sanitizers'
 * job; these functions check what a sanitizer cannot see: a failed call that
 * still hands out an object, an error without a message, a successful decode
 * the library then calls malformed, an output that is not finite, a response
 * body that is not the JSON it claims to be.
 */
#ifndef ATTN_FUZZ_ENTRY_H
#define ATTN_FUZZ_ENTRY_H

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "protocol/codec.h"
#include "core/request.h"

#define FUZZ_BUG_MAX 320

/* The heads override the safetensors target tries after the metadata's own (0).
 * 2 divides the E of every fixture in tests/fixtures/good and of the demo. */
#define FUZZ_ST_HEADS 2

/* Writes the broken invariant into bug and returns -1 from the caller. */
#define FUZZ_REQUIRE(cond, bug, ...)                                                    \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fuzz_set_bug((bug), __VA_ARGS__);                                           \
            return -1;                                                                  \
        }                                                                               \
    } while (0)

__attribute__((format(printf, 2, 3))) static inline void fuzz_set_bug(char *bug, const char *fmt,
                                                                      ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bug, FUZZ_BUG_MAX, fmt, ap);
    va_end(ap);
}

/* A message is a non-empty, NUL-terminated string inside its array. */
static inline int fuzz_message_ok(const char *m, size_t cap)
{
    return m[0] != '\0' && memchr(m, '\0', cap) != NULL;
}

/* ================================================================ forward helpers */

/* Fills x[0..n) with small finite values that differ from element to element. */
static inline void fuzz_fill(float *x, size_t n, unsigned salt)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((int)((i * 37u + salt * 11u) % 17u) - 8) / 16.0f;
}

static inline int fuzz_all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

/* Rows of attention weights: each entry in [0, 1], each row summing to 1, or
 * to 0 when every key of the row is masked. w is (rows, s). */
static inline int fuzz_check_weights(const float *w, size_t rows, size_t s, char *bug)
{
    for (size_t r = 0; r < rows; r++) {
        double sum = 0;
        for (size_t c = 0; c < s; c++) {
            float v = w[r * s + c];
            FUZZ_REQUIRE(v >= 0.0f && v <= 1.0f + 1e-6f, bug,
                         "attention weight row %zu col %zu is %g, outside [0, 1]", r, c,
                         (double)v);
            sum += v;
        }
        FUZZ_REQUIRE(fabs(sum - 1.0) < 1e-4 || sum == 0.0, bug,
                     "attention weight row %zu sums to %.9g, not 1 (or 0 if fully masked)", r,
                     sum);
    }
    return 0;
}

/* Library statuses a forward may legitimately return on inputs that passed the
 * codec (or, for a loaded layer, on small finite inputs): OK, or LIMIT when the
 * magnitudes would overflow float32. Anything else means two validators disagree. */
static inline int fuzz_forward_status_ok(attn_status st)
{
    return st == ATTN_OK || st == ATTN_ERR_LIMIT;
}

/* ================================================================ safetensors */

/* A loaded layer describes itself consistently. */
static inline int fuzz_check_info(const attn_layer_info *in, int heads, char *bug)
{
    FUZZ_REQUIRE(in->num_heads >= 1 && in->head_dim_k >= 1 && in->head_dim_v >= 1 &&
                     in->embed_q >= 1 && in->embed_k >= 1 && in->embed_v >= 1 &&
                     in->embed_out >= 1,
                 bug, "loaded layer has a dimension < 1 (h=%d d_k=%d d_v=%d E=%d/%d/%d/%d)",
                 in->num_heads, in->head_dim_k, in->head_dim_v, in->embed_q, in->embed_k,
                 in->embed_v, in->embed_out);
    FUZZ_REQUIRE(heads == 0 || in->num_heads == heads, bug,
                 "asked for %d heads, the layer has %d", heads, in->num_heads);
    FUZZ_REQUIRE(in->has_out_proj || in->embed_out == in->num_heads * in->head_dim_v, bug,
                 "no W_O but E_out %d != h*d_v %d", in->embed_out,
                 in->num_heads * in->head_dim_v);
    size_t hk = (size_t)in->num_heads * (size_t)in->head_dim_k;
    size_t hv = (size_t)in->num_heads * (size_t)in->head_dim_v;
    size_t n = hk * ((size_t)in->embed_q + (size_t)in->embed_k) + hv * (size_t)in->embed_v;
    n += in->has_out_proj ? (size_t)in->embed_out * hv : 0;
    n += (in->has_bias_q ? hk : 0) + (in->has_bias_k ? hk : 0) + (in->has_bias_v ? hv : 0);
    n += in->has_bias_out ? (size_t)in->embed_out : 0;
    FUZZ_REQUIRE(in->param_count == n, bug, "param_count %zu, the dimensions say %zu",
                 in->param_count, n);
    const char *dt = in->source_dtype;
    FUZZ_REQUIRE(!strcmp(dt, "F32") || !strcmp(dt, "F16") || !strcmp(dt, "BF16") ||
                     !strcmp(dt, "mixed"),
                 bug, "source_dtype \"%.8s\" is not F32/F16/BF16/mixed", dt);
    return 0;
}

/* Runs a loaded layer once (T = 2, S = 3 for cross-attention) with per-head
 * weights: it must either compute finite outputs and proper weights or refuse
 * with ATTN_ERR_LIMIT (weights so large that float32 would overflow). */
static inline int fuzz_forward_loaded(const attn_layer *l, const attn_layer_info *in, char *bug)
{
    const int self = in->embed_k == in->embed_q && in->embed_v == in->embed_q;
    attn_seq s = {.t = 2, .s = self ? 2 : 3, .weights_mode = ATTN_WEIGHTS_PER_HEAD,
                  .is_causal = 1};
    size_t nq = 2 * (size_t)in->embed_q, nk = (size_t)s.s * (size_t)in->embed_k;
    size_t nv = (size_t)s.s * (size_t)in->embed_v, no = 2 * (size_t)in->embed_out;
    size_t nw = (size_t)in->num_heads * 2 * (size_t)s.s;
    float *buf = malloc((nq + nk + nv + no + nw) * sizeof(float));
    FUZZ_REQUIRE(buf != NULL, bug, "harness out of memory");
    fuzz_fill(buf, nq + nk + nv, 1);
    s.query = buf;
    s.key = self ? NULL : buf + nq;
    s.value = self ? NULL : buf + nq + nk;
    s.output = buf + nq + nk + nv;
    s.weights = s.output + no;
    attn_error err = {0};
    attn_status st = attn_forward(l, &s, 1, NULL, NULL, &err);
    int rc = 0;
    if (!fuzz_forward_status_ok(st)) {
        fuzz_set_bug(bug, "forward on a loaded layer: %s: %s", attn_strerror(st), err.message);
        rc = -1;
    } else if (st == ATTN_OK && !fuzz_all_finite(s.output, no)) {
        fuzz_set_bug(bug, "forward on a loaded layer returned OK with a non-finite output");
        rc = -1;
    } else if (st == ATTN_OK) {
        rc = fuzz_check_weights(s.weights, (size_t)in->num_heads * 2, (size_t)s.s, bug);
    }
    free(buf);
    return rc;
}

/* Loads data as a safetensors file with num_heads = heads; a layer that loads
 * must describe itself consistently and run. *st gets the status. */
static inline int fuzz_safetensors_heads(const uint8_t *data, size_t size, int heads,
                                         attn_status *st, char *bug)
{
    attn_layer *l = (attn_layer *)(uintptr_t)1; /* must be reset either way */
    attn_error err = {0};
    *st = attn_layer_load_safetensors_mem(data, size, heads, &l, &err);
    if (*st != ATTN_OK) {
        FUZZ_REQUIRE(l == NULL, bug, "heads=%d: failed (%s) but *out is not NULL", heads,
                     attn_strerror(*st));
        FUZZ_REQUIRE(err.code == *st, bug, "heads=%d: returned %d but err.code is %d", heads,
                     (int)*st, (int)err.code);
        FUZZ_REQUIRE(fuzz_message_ok(err.message, sizeof err.message), bug,
                     "heads=%d: %s with an empty message", heads, attn_strerror(*st));
        FUZZ_REQUIRE(*st != ATTN_ERR_INTERNAL && *st != ATTN_ERR_IO, bug, "heads=%d: %s from a buffer: %s", heads, attn_strerror(*st),
                     err.message);
        return 0;
    }
    FUZZ_REQUIRE(l != NULL, bug, "heads=%d: ATTN_OK but *out is NULL", heads);
    attn_layer_info info;
    attn_layer_get_info(l, &info);
    int rc = fuzz_check_info(&info, heads, bug);
    if (rc == 0)
        rc = fuzz_forward_loaded(l, &info, bug);
    attn_layer_free(l);
    return rc;
}

/* The safetensors target: the metadata's head count (0), then FUZZ_ST_HEADS.
 * st[0], st[1] get the two statuses (for the replay test's expectations). */
static inline int fuzz_safetensors_one(const uint8_t *data, size_t size, attn_status st[2],
                                       char *bug)
{
    if (fuzz_safetensors_heads(data, size, 0, &st[0], bug))
        return -1;
    return fuzz_safetensors_heads(data, size, FUZZ_ST_HEADS, &st[1], bug);
}

/* ================================================================ decode */

enum { FUZZ_MODEL_DEMO = 0, FUZZ_MODEL_CROSS = 1, FUZZ_N_MODELS = 2 };

/* Two real layers the decoded requests run on: the demo model (E=64, h=8) from
 * config/demo.safetensors, and a small cross-attention layer built in memory
 * whose every width differs (E_q=6, E_k=4, E_v=5, h=2, d_k=3, d_v=2, E_out=7)
 * so that mixing the widths up cannot go unnoticed. */
typedef struct fuzz_decode_ctx {
    attn_layer *layer[FUZZ_N_MODELS];
    attn_layer_info info[FUZZ_N_MODELS];
    attn_workspace *ws; /* reused by every forward, as a server worker does */
    attnd_decode_limits lim;
} fuzz_decode_ctx;

static const char *const fuzz_model_name[FUZZ_N_MODELS] = {"demo", "cross"};

static inline attn_status fuzz_make_cross_layer(attn_layer **out, attn_error *err)
{
    enum { H = 2, DK = 3, DV = 2, EQ = 6, EK = 4, EV = 5, EO = 7 };
    float w[H * DK * EQ + H * DK * EK + H * DV * EV + EO * H * DV + 2 * H * DK +
            H * DV + EO]; /* copied by attn_layer_create */
    fuzz_fill(w, sizeof w / sizeof w[0], 3);
    attn_layer_desc d = {.num_heads = H, .head_dim_k = DK, .head_dim_v = DV, .embed_q = EQ,
                         .embed_k = EK, .embed_v = EV, .embed_out = EO};
    d.w_q = w;
    d.w_k = d.w_q + H * DK * EQ;
    d.w_v = d.w_k + H * DK * EK;
    d.w_o = d.w_v + H * DV * EV;
    d.b_q = d.w_o + EO * H * DV;
    d.b_k = d.b_q + H * DK;
    d.b_v = d.b_k + H * DK;
    d.b_o = d.b_v + H * DV;
    return attn_layer_create(&d, out, err);
}

/* Loads both layers and a workspace. Returns 0, or -1 with why[] filled (and
 * everything released). demo_path: config/demo.safetensors, relative to the
 * repository root. */
static inline int fuzz_decode_ctx_init(fuzz_decode_ctx *c, const char *demo_path, char *why)
{
    attn_error err = {0};
    memset(c, 0, sizeof *c);
    /* small enough that a fuzzed body (<= 16 KiB) can reach every limit */
    c->lim = (attnd_decode_limits){.max_seq_len = 64, .max_batch_seqs = 16,
                                   .max_weights_elems = 4096, .max_request_elems = 4096,
                                   .max_json_depth = 16};
    if (attn_layer_load_safetensors(demo_path, 0, &c->layer[FUZZ_MODEL_DEMO], &err) ||
        fuzz_make_cross_layer(&c->layer[FUZZ_MODEL_CROSS], &err)) {
        fuzz_set_bug(why, "loading the fuzz models: %s", err.message);
        goto fail;
    }
    if (attn_workspace_create(NULL, &c->ws, &err) != ATTN_OK) {
        fuzz_set_bug(why, "attn_workspace_create: %s", err.message);
        goto fail;
    }
    for (int m = 0; m < FUZZ_N_MODELS; m++)
        attn_layer_get_info(c->layer[m], &c->info[m]);
    return 0;
fail:
    for (int m = 0; m < FUZZ_N_MODELS; m++)
        attn_layer_free(c->layer[m]);
    memset(c, 0, sizeof *c);
    return -1;
}

static inline void fuzz_decode_ctx_free(fuzz_decode_ctx *c)
{
    for (int m = 0; m < FUZZ_N_MODELS; m++)
        attn_layer_free(c->layer[m]);
    attn_workspace_free(c->ws);
    memset(c, 0, sizeof *c);
}

/* A decoded request is what the codec promises: shapes within the limits,
 * buffers where the model needs them. */
static inline int fuzz_check_request(const fuzz_decode_ctx *c, const attn_layer_info *in,
                                     const attnd_request *r, char *bug)
{
    FUZZ_REQUIRE(r != NULL && r->seqs != NULL, bug, "decode returned 0 without a request");
    FUZZ_REQUIRE(r->n_seqs >= 1 && r->n_seqs <= c->lim.max_batch_seqs, bug,
                 "n_seqs %d outside [1, %d]", r->n_seqs, c->lim.max_batch_seqs);
    FUZZ_REQUIRE(r->batched || r->n_seqs == 1, bug, "unbatched request with %d seqs",
                 r->n_seqs);
    FUZZ_REQUIRE(r->embed_out == in->embed_out && r->num_heads == in->num_heads, bug,
                 "request says E_out=%d h=%d, the model %d, %d", r->embed_out, r->num_heads,
                 in->embed_out, in->num_heads);
    FUZZ_REQUIRE(r->outcome == ATTND_PENDING && memchr(r->id, '\0', sizeof r->id), bug,
                 "fresh request not PENDING or id not terminated");
    size_t tokens = 0;
    for (int i = 0; i < r->n_seqs; i++) {
        const attn_seq *s = &r->seqs[i];
        FUZZ_REQUIRE(s->t >= 1 && s->t <= c->lim.max_seq_len && s->s >= 1 &&
                         s->s <= c->lim.max_seq_len,
                     bug, "seqs[%d]: T=%d S=%d outside [1, %d]", i, s->t, s->s,
                     c->lim.max_seq_len);
        FUZZ_REQUIRE(s->query && s->output, bug, "seqs[%d]: no query or output buffer", i);
        FUZZ_REQUIRE((s->key == NULL) == (s->value == NULL), bug,
                     "seqs[%d]: key and value not both set or both NULL", i);
        FUZZ_REQUIRE(s->key || s->s == s->t, bug, "seqs[%d]: self-attention with S %d != T %d",
                     i, s->s, s->t);
        FUZZ_REQUIRE((s->weights != NULL) == (r->need_weights != 0) &&
                         (s->weights_mode != ATTN_WEIGHTS_NONE) == (r->need_weights != 0),
                     bug, "seqs[%d]: weights buffer/mode disagree with need_weights=%d", i,
                     r->need_weights);
        tokens += (size_t)s->t + (s->key ? (size_t)s->s : 0);
    }
    FUZZ_REQUIRE(r->n_tokens == tokens, bug, "n_tokens %zu, the sequences hold %zu",
                 r->n_tokens, tokens);
    return 0;
}

/* Checks that j is rows arrays of cols numbers that read back as x (float32). */
static inline int fuzz_check_json_matrix(const json_t *j, const float *x, size_t rows,
                                         size_t cols, const char *what, char *bug)
{
    FUZZ_REQUIRE(json_is_array(j) && json_array_size(j) == rows, bug,
                 "response %s: not an array of %zu rows", what, rows);
    for (size_t r = 0; r < rows; r++) {
        const json_t *row = json_array_get(j, r);
        FUZZ_REQUIRE(json_is_array(row) && json_array_size(row) == cols, bug,
                     "response %s[%zu]: not an array of %zu numbers", what, r, cols);
        for (size_t k = 0; k < cols; k++) {
            const json_t *v = json_array_get(row, k);
            float want = x[r * cols + k], got = (float)json_number_value(v);
            /* text -> double -> float may round twice: allow the one-ulp neighbour */
            FUZZ_REQUIRE(json_is_number(v) && (got == want || nextafterf(got, want) == want),
                         bug, "response %s[%zu][%zu] is %.9g, not %.9g", what, r, k,
                         (double)got, (double)want);
        }
    }
    return 0;
}

/* field of the response for sequence i: field[i] when batched, else field. */
static inline const json_t *fuzz_seq_field(const attnd_request *r, const json_t *field, int i)
{
    return r->batched ? json_array_get(field, (size_t)i) : field;
}

/* Encodes the finished request and parses the body back: every output (and
 * weight) must come back as the number it was. */
static inline int fuzz_check_response(const attnd_request *r, const char *model, char *bug)
{
    size_t len = 0;
    char *body = attnd_codec_encode_response(r, model, &len);
    FUZZ_REQUIRE(body != NULL, bug, "encode_response returned NULL on a finished request");
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    free(body);
    FUZZ_REQUIRE(root != NULL, bug, "response is not JSON: %s", je.text);
    int rc = -1;
    const json_t *out = json_object_get(root, "output");
    const json_t *w = json_object_get(root, "weights");
    const json_t *id = json_object_get(root, "id");
    if (!json_is_string(json_object_get(root, "model")) ||
        strcmp(json_string_value(json_object_get(root, "model")), model) != 0 ||
        (r->id[0] ? !json_is_string(id) || strcmp(json_string_value(id), r->id) != 0
                  : id != NULL) ||
        (w != NULL) != (r->need_weights != 0) ||
        (r->batched && json_array_size(out) != (size_t)r->n_seqs)) {
        fuzz_set_bug(bug, "response model/id/weights/batch shape wrong");
        goto done;
    }
    for (int i = 0; i < r->n_seqs; i++) {
        const attn_seq *s = &r->seqs[i];
        size_t t = (size_t)s->t, S = (size_t)s->s;
        if (fuzz_check_json_matrix(fuzz_seq_field(r, out, i), s->output, t,
                                   (size_t)r->embed_out, "output", bug))
            goto done;
        if (!r->need_weights)
            continue;
        const json_t *ws = fuzz_seq_field(r, w, i);
        if (s->weights_mode == ATTN_WEIGHTS_AVERAGE) {
            if (fuzz_check_json_matrix(ws, s->weights, t, S, "weights", bug))
                goto done;
            continue;
        }
        if (!json_is_array(ws) || json_array_size(ws) != (size_t)r->num_heads) {
            fuzz_set_bug(bug, "response weights: not %d heads", r->num_heads);
            goto done;
        }
        for (int h = 0; h < r->num_heads; h++)
            if (fuzz_check_json_matrix(json_array_get(ws, (size_t)h),
                                       s->weights + (size_t)h * t * S, t, S, "weights", bug))
                goto done;
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

/* Runs a decoded request on the model's real layer, as a worker does, then
 * encodes it. */
static inline int fuzz_run_request(fuzz_decode_ctx *c, int m, attnd_request *r, char *bug)
{
    attn_error err = {0};
    attn_status st = attn_forward(c->layer[m], r->seqs, r->n_seqs, c->ws, NULL, &err);
    FUZZ_REQUIRE(fuzz_forward_status_ok(st), bug,
                 "the codec accepted a request the library rejects: %s: %s", attn_strerror(st),
                 err.message);
    if (st != ATTN_OK) /* outputs stay the decoder's zeros: still encodable */
        FUZZ_REQUIRE(fuzz_message_ok(err.message, sizeof err.message), bug,
                     "forward failed without a message");
    r->outcome = st == ATTN_OK ? ATTND_DONE_OK : ATTND_DONE_ERROR;
    for (int i = 0; i < r->n_seqs && st == ATTN_OK; i++) {
        const attn_seq *s = &r->seqs[i];
        FUZZ_REQUIRE(fuzz_all_finite(s->output, (size_t)s->t * (size_t)r->embed_out), bug,
                     "seqs[%d]: forward returned OK with a non-finite output", i);
        size_t rows = (size_t)s->t * (s->weights_mode == ATTN_WEIGHTS_PER_HEAD
                                          ? (size_t)r->num_heads
                                          : 1);
        if (s->weights && fuzz_check_weights(s->weights, rows, (size_t)s->s, bug))
            return -1;
    }
    return fuzz_check_response(r, fuzz_model_name[m], bug);
}

/* A refused body gets a client error with a code and message, which encodes
 * to {"error":{"code","message","field"}} with the same code. */
static inline int fuzz_check_error(const attnd_http_error *e, char *bug)
{
    FUZZ_REQUIRE(e->status == 400 || e->status == 413 || e->status == 422, bug,
                 "decode failed with HTTP status %d (%s: %s)", e->status, e->code, e->message);
    FUZZ_REQUIRE(fuzz_message_ok(e->code, sizeof e->code) &&
                     fuzz_message_ok(e->message, sizeof e->message) &&
                     memchr(e->field, '\0', sizeof e->field),
                 bug, "decode error without code or message");
    size_t len = 0;
    char *body = attnd_codec_encode_error(e, &len);
    FUZZ_REQUIRE(body != NULL && strlen(body) == len, bug, "encode_error failed");
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    free(body);
    FUZZ_REQUIRE(root != NULL, bug, "error body is not JSON: %s", je.text);
    const json_t *er = json_object_get(root, "error");
    const json_t *code = json_object_get(er, "code");
    int ok = json_is_string(code) && strcmp(json_string_value(code), e->code) == 0 &&
             json_is_string(json_object_get(er, "message")) &&
             json_is_string(json_object_get(er, "field"));
    json_decref(root);
    FUZZ_REQUIRE(ok, bug, "error body lacks error.code \"%s\", message or field", e->code);
    return 0;
}

/* Decodes data for model m and follows the request through forward and
 * encoding (or the error through encoding). *rc gets the decoder's return and
 * *e its error, for the replay test's expectations. */
static inline int fuzz_decode_model(fuzz_decode_ctx *c, int m, const uint8_t *data, size_t size,
                                    int *rc, attnd_http_error *e, char *bug)
{
    attnd_request *r = (attnd_request *)(uintptr_t)1; /* must be reset either way */
    memset(e, 0, sizeof *e);
    *rc = attnd_codec_decode_request((const char *)data, size, &c->info[m], &c->lim, &r, e);
    if (*rc != 0) {
        FUZZ_REQUIRE(*rc == -1 && r == NULL, bug, "%s: decode failed (%d) but *out is set",
                     fuzz_model_name[m], *rc);
        return fuzz_check_error(e, bug);
    }
    int res = fuzz_check_request(c, &c->info[m], r, bug);
    if (res == 0)
        res = fuzz_run_request(c, m, r, bug);
    attnd_request_free(r);
    return res;
}

/* The decode target: the same body against both models. */
static inline int fuzz_decode_one(fuzz_decode_ctx *c, const uint8_t *data, size_t size,
                                  char *bug)
{
    for (int m = 0; m < FUZZ_N_MODELS; m++) {
        int rc;
        attnd_http_error e;
        if (fuzz_decode_model(c, m, data, size, &rc, &e, bug)) {
            char inner[FUZZ_BUG_MAX];
            memcpy(inner, bug, sizeof inner);
            fuzz_set_bug(bug, "model %s: %s", fuzz_model_name[m], inner);
            return -1;
        }
    }
    return 0;
}

#endif
