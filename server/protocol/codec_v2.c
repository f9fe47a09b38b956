/* codec_v2.c — Open Inference Protocol (KServe v2) infer bodies to and from attnd_request.
 *
 * Decoding: split the body at Inference-Header-Content-Length (JSON header, then raw
 * tensors in input order), parse the header with jansson, check every input's name,
 * datatype, shape and byte size against the model and the body, then make ONE allocation
 * (request, its attn_seq array, inputs, masks, outputs, weights; the same layout the /v1
 * codec uses, so attnd_request_free frees it) and copy the tensors in. v2 tensors are
 * rectangular, so sequence b of query [B,T,E] is the contiguous slice b*T*E.
 * Encoding: outputs as flat row-major "data", or as raw little-endian bytes after the
 * JSON header when the caller asked for binary_data.
 */
#include "protocol/codec_v2.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/jsonbuf.h"
#include "core/jsonload.h"
#include "protocol/jsonnum.h"
#include "protocol/jsonscan.h"

/* ================================================================ errors */

/* v2 errors carry only a message on the wire; the code is for the log. */
#define V2_CODE(status)                                                                  \
    ((status) == 413 ? "limit_exceeded" : (status) == 500 ? "internal" : "invalid_request")
#define v2_fail(e, status, ...) attnd_http_fail((e), (status), V2_CODE(status), __VA_ARGS__)

/* ================================================================ inputs */

typedef enum dtype { DT_FP32, DT_BOOL, DT_INT64 } dtype;

enum { IN_QUERY, IN_KEY, IN_VALUE, IN_KPM, IN_MASK, IN_POS, IN_COUNT };
static const char *const input_names[IN_COUNT] = {"query", "key", "value", "key_padding_mask",
                                                  "attn_mask", "position_ids"};

static const char *dtype_name(dtype t)
{
    return t == DT_FP32 ? "FP32" : t == DT_BOOL ? "BOOL" : "INT64";
}

/* Largest position id accepted: every integer up to it is exact in a double. */
#define MAX_POSITION (INT64_C(1) << 53)

/* One input tensor as the header described it. */
typedef struct tensor {
    int present;
    dtype type;
    int rank;
    int64_t dim[4];
    size_t count;              /* product of dims                                 */
    const json_t *data;        /* JSON data, or NULL when binary                  */
    const unsigned char *raw;  /* binary bytes in the body (count * element size) */
} tensor;

typedef struct v2dec {
    const attn_layer_info *info;
    attnd_decode_limits lim;
    attnd_http_error *err;
    tensor in[IN_COUNT];
    int is_causal, window, need_weights, average, binary_output;
    int64_t timeout_ms;
    const char *id;
    size_t id_len;
    attnd_v2_call *call;
    int b, t, s;
} v2dec;

static size_t elem_size(dtype t) { return t == DT_FP32 ? 4 : t == DT_INT64 ? 8 : 1; }

static void shape_text(const tensor *x, char *out, size_t cap)
{
    int n = snprintf(out, cap, "[");
    for (int i = 0; i < x->rank && n > 0 && (size_t)n < cap; i++)
        n += snprintf(out + n, cap - (size_t)n, "%s%lld", i ? "," : "", (long long)x->dim[i]);
    if (n > 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, "]");
}

static int read_shape(v2dec *d, const char *name, const json_t *shape, tensor *x)
{
    if (!json_is_array(shape))
        return v2_fail(d->err, 400, name, "input \"%s\": shape must be an array of integers", name);
    size_t rank = json_array_size(shape);
    if (rank < 1 || rank > 4)
        return v2_fail(d->err, 400, name, "input \"%s\": shape has %zu dimensions", name, rank);
    x->rank = (int)rank;
    x->count = 1;
    for (size_t i = 0; i < rank; i++) {
        const json_t *v = json_array_get(shape, i);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT_MAX)
            return v2_fail(d->err, 400, name,
                           "input \"%s\": shape[%zu] must be an integer in 1..%d", name, i,
                           INT_MAX);
        x->dim[i] = json_integer_value(v);
        if (__builtin_mul_overflow(x->count, (size_t)x->dim[i], &x->count) ||
            x->count > SIZE_MAX / 16)
            return v2_fail(d->err, 413, name, "input \"%s\": shape too large", name);
    }
    return 0;
}

static int read_datatype(v2dec *d, const char *name, const json_t *v, tensor *x)
{
    const char *s = json_string_value(v);
    if (!s)
        return v2_fail(d->err, 400, name, "input \"%s\": datatype must be a string", name);
    if (strcmp(s, "FP32") == 0)
        x->type = DT_FP32;
    else if (strcmp(s, "BOOL") == 0)
        x->type = DT_BOOL;
    else if (strcmp(s, "INT64") == 0)
        x->type = DT_INT64;
    else
        return v2_fail(d->err, 400, name,
                       "input \"%s\": datatype %.32s is not supported (FP32, BOOL, INT64)", name,
                       s);
    return 0;
}

/* Binary data for x: the next binary_data_size bytes after *cursor. */
static int take_binary(v2dec *d, const char *name, const json_t *size, tensor *x,
                       const char *bin, size_t bin_len, size_t *cursor)
{
    if (!json_is_integer(size) || json_integer_value(size) < 0)
        return v2_fail(d->err, 400, name,
                       "input \"%s\": binary_data_size must be a non-negative integer", name);
    unsigned long long n = (unsigned long long)json_integer_value(size);
    size_t want = x->count * elem_size(x->type); /* count <= body bytes: no overflow below */
    if (n != want) {
        char sh[96];
        shape_text(x, sh, sizeof sh);
        return v2_fail(d->err, 400, name,
                       "input \"%s\": binary_data_size %llu does not match shape %s of %s "
                       "(%zu bytes)",
                       name, n, sh, dtype_name(x->type), want);
    }
    if (n > bin_len - *cursor)
        return v2_fail(d->err, 400, name,
                       "input \"%s\": binary data of %llu bytes runs past the end of the body "
                       "(%zu bytes left after the JSON header)",
                       name, n, bin_len - *cursor);
    x->raw = (const unsigned char *)bin + *cursor;
    *cursor += (size_t)n;
    return 0;
}

/* Leaves (non-arrays) of a JSON array nest. */
static size_t count_leaves(const json_t *a)
{
    if (!json_is_array(a))
        return 1;
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(a); i++)
        n += count_leaves(json_array_get(a, i));
    return n;
}

/* One entry of "inputs". */
static int read_input(v2dec *d, const json_t *o, const char *bin, size_t bin_len, size_t *cursor)
{
    const json_t *jname = NULL, *shape = NULL, *type = NULL, *params = NULL, *data = NULL;
    json_error_t je;
    if (json_unpack_ex((json_t *)o, &je, JSON_STRICT, "{s:o, s?o, s?o, s?o, s?o}", "name", &jname,
                       "shape", &shape, "datatype", &type, "parameters", &params, "data",
                       &data) != 0)
        return v2_fail(d->err, 400, "inputs", "inputs: %s", je.text);
    const char *name = json_string_value(jname);
    if (!name)
        return v2_fail(d->err, 400, "inputs", "inputs: name must be a string");
    int k = 0;
    while (k < IN_COUNT && strcmp(input_names[k], name) != 0)
        k++;
    if (k == IN_COUNT)
        return v2_fail(d->err, 400, name,
                       "unknown input \"%.64s\" (inputs: query, key, value, key_padding_mask, "
                       "attn_mask)",
                       name);
    tensor *x = &d->in[k];
    name = input_names[k];
    if (x->present)
        return v2_fail(d->err, 400, name, "input \"%s\" given twice", name);
    x->present = 1;
    if (!shape || !type)
        return v2_fail(d->err, 400, name, "input \"%s\" needs shape and datatype", name);
    if (read_shape(d, name, shape, x) || read_datatype(d, name, type, x))
        return -1;
    const json_t *size = NULL;
    if (params) {
        if (json_unpack_ex((json_t *)params, &je, JSON_STRICT, "{s?o}", "binary_data_size",
                           &size) != 0)
            return v2_fail(d->err, 400, name, "input \"%s\": parameters: %s", name, je.text);
    }
    if (size && data)
        return v2_fail(d->err, 400, name, "input \"%s\" has both data and binary_data_size", name);
    if (size)
        return take_binary(d, name, size, x, bin, bin_len, cursor);
    if (!json_is_array(data))
        return v2_fail(d->err, 400, name, "input \"%s\" has no data array (nor binary_data_size)",
                       name);
    size_t leaves = count_leaves(data);
    if (leaves != x->count) {
        char sh[96];
        shape_text(x, sh, sizeof sh);
        return v2_fail(d->err, 400, name, "input \"%s\": data holds %zu values, shape %s needs %zu",
                       name, leaves, sh, x->count);
    }
    x->data = data;
    return 0;
}

/* ================================================================ parameters, outputs */

static int param_bool(v2dec *d, const char *k, const json_t *v, int *out)
{
    if (!json_is_boolean(v))
        return v2_fail(d->err, 400, k, "parameter %s must be true or false", k);
    *out = json_is_true(v);
    return 0;
}

static int param_int(v2dec *d, const char *k, const json_t *v, long long max, long long *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
        return v2_fail(d->err, 400, k, "parameter %s must be an integer in 0..%lld", k, max);
    *out = json_integer_value(v);
    return 0;
}

static int read_parameters(v2dec *d, const json_t *params)
{
    const char *k;
    json_t *v;
    long long x;
    if (!json_is_object(params))
        return v2_fail(d->err, 400, "parameters", "parameters must be an object");
    json_object_foreach((json_t *)params, k, v) {
        int rc;
        if (strcmp(k, "is_causal") == 0)
            rc = param_bool(d, k, v, &d->is_causal);
        else if (strcmp(k, "need_weights") == 0)
            rc = param_bool(d, k, v, &d->need_weights);
        else if (strcmp(k, "average_attn_weights") == 0)
            rc = param_bool(d, k, v, &d->average);
        else if (strcmp(k, "binary_data_output") == 0)
            rc = param_bool(d, k, v, &d->binary_output);
        else if (strcmp(k, "window") == 0) {
            rc = param_int(d, k, v, INT_MAX, &x);
            d->window = (int)x;
        } else if (strcmp(k, "timeout_ms") == 0) {
            rc = param_int(d, k, v, INT64_MAX / 1000000, &x);
            d->timeout_ms = x;
        } else
            rc = v2_fail(d->err, 400, k, "unknown parameter \"%.64s\"", k);
        if (rc)
            return -1;
    }
    return 0;
}

static void finish_outputs(v2dec *d, const int explicit_binary[2]);

/* "outputs": which to return and how. Absent or empty: "output", plus "attn_weights"
 * when need_weights. Listing attn_weights turns need_weights on; not listing it off. */
static int read_outputs(v2dec *d, const json_t *outs)
{
    attnd_v2_call *c = d->call;
    int explicit_binary[2] = {-1, -1};
    if (outs && !json_is_array(outs))
        return v2_fail(d->err, 400, "outputs", "outputs must be an array");
    c->n_outputs = 0;
    for (size_t i = 0; outs && i < json_array_size(outs); i++) {
        const json_t *jn = NULL, *params = NULL, *bin = NULL;
        json_error_t je;
        if (json_unpack_ex(json_array_get(outs, i), &je, JSON_STRICT, "{s:o, s?o}", "name", &jn,
                           "parameters", &params) != 0)
            return v2_fail(d->err, 400, "outputs", "outputs[%zu]: %s", i, je.text);
        const char *name = json_string_value(jn);
        int which = !name ? -1 : strcmp(name, "output") == 0 ? ATTND_V2_OUTPUT
                             : strcmp(name, "attn_weights") == 0 ? ATTND_V2_ATTN_WEIGHTS : -1;
        if (which < 0)
            return v2_fail(d->err, 400, name ? name : "outputs",
                           "unknown output \"%.64s\" (outputs: output, attn_weights)",
                           name ? name : "(not a string)");
        for (int j = 0; j < c->n_outputs; j++)
            if ((int)c->outputs[j] == which)
                return v2_fail(d->err, 400, name, "output \"%s\" requested twice", name);
        if (params && json_unpack_ex((json_t *)params, &je, JSON_STRICT, "{s?o}", "binary_data",
                                     &bin) != 0)
            return v2_fail(d->err, 400, name, "output \"%s\": parameters: %s", name, je.text);
        if (bin && !json_is_boolean(bin))
            return v2_fail(d->err, 400, name, "output \"%s\": binary_data must be true or false",
                           name);
        explicit_binary[c->n_outputs] = bin ? json_is_true(bin) : -1;
        c->outputs[c->n_outputs++] = (attnd_v2_output)which;
    }
    finish_outputs(d, explicit_binary);
    return 0;
}

/* The outputs' defaults once d->call lists the requested ones (none: "output", and
 * "attn_weights" when need_weights) and need_weights follows the list; binary per
 * output: explicit_binary[j] (-1: not said) or binary_data_output. */
static void finish_outputs(v2dec *d, const int explicit_binary[2])
{
    attnd_v2_call *c = d->call;
    if (c->n_outputs == 0) {
        c->outputs[c->n_outputs++] = ATTND_V2_OUTPUT;
        if (d->need_weights)
            c->outputs[c->n_outputs++] = ATTND_V2_ATTN_WEIGHTS;
    } else {
        d->need_weights = 0;
        for (int j = 0; j < c->n_outputs; j++)
            d->need_weights |= c->outputs[j] == ATTND_V2_ATTN_WEIGHTS;
    }
    for (int j = 0; j < c->n_outputs; j++)
        c->binary[j] = explicit_binary[j] >= 0 ? explicit_binary[j] : d->binary_output;
}

static int read_top(v2dec *d, const json_t *root, const char *bin, size_t bin_len)
{
    const json_t *id = NULL, *params = NULL, *inputs = NULL, *outputs = NULL;
    json_error_t je;
    if (!json_is_object(root))
        return v2_fail(d->err, 400, "", "the body must be a JSON object");
    if (json_unpack_ex((json_t *)root, &je, JSON_STRICT, "{s?o, s?o, s:o, s?o}", "id", &id,
                       "parameters", &params, "inputs", &inputs, "outputs", &outputs) != 0)
        return v2_fail(d->err, 400, "", "%s", je.text);
    if (id) {
        if (!json_is_string(id) || json_string_length(id) > 127)
            return v2_fail(d->err, 400, "id", "id must be a string of at most 127 bytes");
        d->id = json_string_value(id);
        d->id_len = json_string_length(id);
    }
    if (params && read_parameters(d, params))
        return -1;
    if (!json_is_array(inputs))
        return v2_fail(d->err, 400, "inputs", "inputs must be an array");
    size_t cursor = 0;
    for (size_t i = 0; i < json_array_size(inputs); i++)
        if (read_input(d, json_array_get(inputs, i), bin, bin_len, &cursor))
            return -1;
    if (cursor != bin_len)
        return v2_fail(d->err, 400, "", "%zu bytes of binary data follow the JSON header but the "
                       "inputs' binary_data_size account for %zu",
                       bin_len, cursor);
    return read_outputs(d, outputs);
}

/* ================================================================ the fast header path */

/* The usual binary header — {"inputs":[{"name":..,"datatype":..,"shape":[..],
 * "parameters":{"binary_data_size":n}}, ...], "parameters":{..}, "outputs":[..],
 * "id":".."} in any member order — read without jansson: fast_header scans a
 * strict subset of JSON (strings of printable ASCII without escapes, integers of
 * at most 18 digits, true/false, only the members above, each once, inputs
 * binary) and fast_apply applies read_top's rules to it. Either declines (-1)
 * at the first thing outside that subset or any rule read_top would refuse;
 * the caller then parses the header with jansson, which finds and names the
 * problem. Accepted headers leave *d exactly as read_top leaves it. */

typedef struct fast_str {
    const char *p;
    size_t n;
} fast_str;

typedef struct fast_in {
    fast_str name, dtype;
    int rank;
    long long dim[4];
    long long size; /* binary_data_size; -1 when absent */
} fast_in;

typedef struct fast_hdr {
    int has_id, n_in, n_par, has_outputs, n_out;
    fast_str id;
    fast_in in[IN_COUNT];
    struct {
        fast_str key;
        int is_bool;
        long long v;
    } par[8];
    struct {
        fast_str name;
        int binary; /* -1 when not said */
    } out[2];
} fast_hdr;

typedef struct fast_scan {
    const char *p, *end;
} fast_scan;

static int fs_ws(fast_scan *f)
{
    while (f->p < f->end && (*f->p == ' ' || *f->p == '\n' || *f->p == '\t' || *f->p == '\r'))
        f->p++;
    return f->p < f->end;
}

/* The byte c (after blanks), consumed; 0 when something else is there. */
static int fs_eat(fast_scan *f, char c)
{
    if (!fs_ws(f) || *f->p != c)
        return 0;
    f->p++;
    return 1;
}

static int fs_str(fast_scan *f, fast_str *out)
{
    if (!fs_eat(f, '"'))
        return -1;
    const char *s = f->p;
    while (f->p < f->end && *f->p != '"') {
        const unsigned char c = (unsigned char)*f->p;
        if (c < 0x20 || c >= 0x7f || c == '\\')
            return -1; /* escapes, control bytes, UTF-8: jansson's */
        f->p++;
    }
    if (f->p >= f->end)
        return -1;
    out->p = s;
    out->n = (size_t)(f->p - s);
    f->p++;
    return 0;
}

static int fs_int(fast_scan *f, long long *out)
{
    if (!fs_ws(f) || (unsigned)(*f->p - '0') >= 10u)
        return -1;
    const char *s = f->p;
    long long v = 0;
    while (f->p < f->end && (unsigned)(*f->p - '0') < 10u && f->p - s < 18) /* no overflow */
        v = v * 10 + (*f->p++ - '0');
    if ((f->p - s > 1 && *s == '0') || /* a 19th digit, leading zeros, a fraction: jansson's */
        (f->p < f->end && (*f->p == '.' || *f->p == 'e' || *f->p == 'E' ||
                           (unsigned)(*f->p - '0') < 10u)))
        return -1;
    *out = v;
    return 0;
}

static int fs_bool(fast_scan *f, long long *out)
{
    if (!fs_ws(f))
        return -1;
    if (f->end - f->p >= 4 && memcmp(f->p, "true", 4) == 0) {
        f->p += 4;
        *out = 1;
        return 0;
    }
    if (f->end - f->p >= 5 && memcmp(f->p, "false", 5) == 0) {
        f->p += 5;
        *out = 0;
        return 0;
    }
    return -1;
}

static int fs_is(const fast_str *s, const char *lit)
{
    return s->n == strlen(lit) && memcmp(s->p, lit, s->n) == 0;
}

/* Members of an object, '{' next: calls member(f, key, ctx) for each, with the
 * scanner after the ':'; 0 at the '}' consumed, -1 on anything else. */
static int fs_object(fast_scan *f, int (*member)(fast_scan *, const fast_str *, void *), void *ctx)
{
    if (!fs_eat(f, '{'))
        return -1;
    if (fs_eat(f, '}'))
        return 0;
    do {
        fast_str key;
        if (fs_str(f, &key) || !fs_eat(f, ':') || member(f, &key, ctx))
            return -1;
    } while (fs_eat(f, ','));
    return fs_eat(f, '}') ? 0 : -1;
}

/* Bit of each member already seen, for duplicates (jansson refuses them). */
static int fs_once(unsigned *seen, unsigned bit)
{
    if (*seen & bit)
        return -1;
    *seen |= bit;
    return 0;
}

typedef struct fs_in_ctx {
    fast_in *x;
    unsigned seen;
} fs_in_ctx;

static int fs_in_params(fast_scan *f, const fast_str *k, void *ctx)
{
    fs_in_ctx *c = ctx;
    if (!fs_is(k, "binary_data_size") || fs_once(&c->seen, 16))
        return -1;
    return fs_int(f, &c->x->size);
}

static int fs_in_member(fast_scan *f, const fast_str *k, void *ctx)
{
    fs_in_ctx *c = ctx;
    fast_in *x = c->x;
    if (fs_is(k, "name"))
        return fs_once(&c->seen, 1) || fs_str(f, &x->name);
    if (fs_is(k, "datatype"))
        return fs_once(&c->seen, 2) || fs_str(f, &x->dtype);
    if (fs_is(k, "parameters"))
        return fs_once(&c->seen, 8) || fs_object(f, fs_in_params, c);
    if (!fs_is(k, "shape") || fs_once(&c->seen, 4) || !fs_eat(f, '['))
        return -1;
    do {
        if (x->rank == 4 || fs_int(f, &x->dim[x->rank]))
            return -1;
        x->rank++;
    } while (fs_eat(f, ','));
    return fs_eat(f, ']') ? 0 : -1;
}

typedef struct fs_out_ctx {
    fast_hdr *h;
    unsigned seen;
} fs_out_ctx;

static int fs_out_params(fast_scan *f, const fast_str *k, void *ctx)
{
    fs_out_ctx *c = ctx;
    long long v;
    if (!fs_is(k, "binary_data") || fs_once(&c->seen, 4) || fs_bool(f, &v))
        return -1;
    c->h->out[c->h->n_out].binary = (int)v;
    return 0;
}

static int fs_out_member(fast_scan *f, const fast_str *k, void *ctx)
{
    fs_out_ctx *c = ctx;
    if (fs_is(k, "name"))
        return fs_once(&c->seen, 1) || fs_str(f, &c->h->out[c->h->n_out].name);
    if (fs_is(k, "parameters"))
        return fs_once(&c->seen, 2) || fs_object(f, fs_out_params, c);
    return -1;
}

static int fs_top_params(fast_scan *f, const fast_str *k, void *ctx)
{
    fast_hdr *h = ctx;
    if (h->n_par == 8)
        return -1;
    for (int i = 0; i < h->n_par; i++)
        if (h->par[i].key.n == k->n && memcmp(h->par[i].key.p, k->p, k->n) == 0)
            return -1;
    h->par[h->n_par].key = *k;
    h->par[h->n_par].is_bool = fs_ws(f) && (*f->p == 't' || *f->p == 'f');
    if (h->par[h->n_par].is_bool ? fs_bool(f, &h->par[h->n_par].v)
                                 : fs_int(f, &h->par[h->n_par].v))
        return -1;
    h->n_par++;
    return 0;
}

typedef struct fs_top_ctx {
    fast_hdr *h;
    unsigned seen;
} fs_top_ctx;

static int fs_top_member(fast_scan *f, const fast_str *k, void *ctx)
{
    fs_top_ctx *c = ctx;
    fast_hdr *h = c->h;
    if (fs_is(k, "id")) {
        h->has_id = 1;
        return fs_once(&c->seen, 1) || fs_str(f, &h->id);
    }
    if (fs_is(k, "parameters"))
        return fs_once(&c->seen, 2) || fs_object(f, fs_top_params, h);
    if (fs_is(k, "inputs")) {
        if (fs_once(&c->seen, 4) || !fs_eat(f, '['))
            return -1;
        do {
            if (h->n_in == IN_COUNT)
                return -1;
            fs_in_ctx ic = {&h->in[h->n_in], 0};
            ic.x->size = -1;
            if (fs_object(f, fs_in_member, &ic) || (ic.seen & 7) != 7 || ic.x->size < 0)
                return -1; /* name, datatype, shape and binary_data_size, or jansson's */
            h->n_in++;
        } while (fs_eat(f, ','));
        return fs_eat(f, ']') ? 0 : -1;
    }
    if (!fs_is(k, "outputs") || fs_once(&c->seen, 8) || !fs_eat(f, '['))
        return -1;
    h->has_outputs = 1;
    if (fs_eat(f, ']'))
        return 0;
    do {
        if (h->n_out == 2)
            return -1;
        fs_out_ctx oc = {h, 0};
        h->out[h->n_out].binary = -1;
        if (fs_object(f, fs_out_member, &oc) || !(oc.seen & 1))
            return -1;
        h->n_out++;
    } while (fs_eat(f, ','));
    return fs_eat(f, ']') ? 0 : -1;
}

static int fast_header(const char *text, size_t len, fast_hdr *h)
{
    fast_scan f = {text, text + len};
    fs_top_ctx c = {h, 0};
    memset(h, 0, sizeof *h);
    if (fs_object(&f, fs_top_member, &c) || !(c.seen & 4))
        return -1;
    return fs_ws(&f) ? -1 : 0; /* only blanks may follow */
}

/* read_top's rules on a fast-scanned header; -1 (declined) where read_top would
 * fail, so that jansson's path names the problem. */
static int fast_apply(v2dec *d, const fast_hdr *h, const char *bin, size_t bin_len)
{
    if (h->has_id) {
        if (h->id.n > 127)
            return -1;
        d->id = h->id.p;
        d->id_len = h->id.n;
    }
    for (int i = 0; i < h->n_par; i++) {
        const fast_str *k = &h->par[i].key;
        const long long v = h->par[i].v;
        const int b = h->par[i].is_bool;
        if (fs_is(k, "is_causal") && b)
            d->is_causal = (int)v;
        else if (fs_is(k, "need_weights") && b)
            d->need_weights = (int)v;
        else if (fs_is(k, "average_attn_weights") && b)
            d->average = (int)v;
        else if (fs_is(k, "binary_data_output") && b)
            d->binary_output = (int)v;
        else if (fs_is(k, "window") && !b && v <= INT_MAX)
            d->window = (int)v;
        else if (fs_is(k, "timeout_ms") && !b && v <= INT64_MAX / 1000000)
            d->timeout_ms = v;
        else
            return -1;
    }
    size_t cursor = 0;
    for (int i = 0; i < h->n_in; i++) {
        const fast_in *fi = &h->in[i];
        int k = 0;
        while (k < IN_COUNT && !fs_is(&fi->name, input_names[k]))
            k++;
        if (k == IN_COUNT || d->in[k].present)
            return -1;
        tensor *x = &d->in[k];
        x->present = 1;
        x->rank = fi->rank;
        x->count = 1;
        for (int r = 0; r < fi->rank; r++) {
            if (fi->dim[r] < 1 || fi->dim[r] > INT_MAX)
                return -1;
            x->dim[r] = fi->dim[r];
            if (__builtin_mul_overflow(x->count, (size_t)x->dim[r], &x->count) ||
                x->count > SIZE_MAX / 16)
                return -1;
        }
        if (fs_is(&fi->dtype, "FP32"))
            x->type = DT_FP32;
        else if (fs_is(&fi->dtype, "BOOL"))
            x->type = DT_BOOL;
        else if (fs_is(&fi->dtype, "INT64"))
            x->type = DT_INT64;
        else
            return -1;
        const unsigned long long n = (unsigned long long)fi->size;
        if (n != x->count * elem_size(x->type) || n > bin_len - cursor)
            return -1;
        x->raw = (const unsigned char *)bin + cursor;
        cursor += (size_t)n;
    }
    if (cursor != bin_len)
        return -1;
    attnd_v2_call *c = d->call;
    int explicit_binary[2] = {-1, -1};
    c->n_outputs = 0;
    for (int i = 0; i < h->n_out; i++) {
        const int which = fs_is(&h->out[i].name, "output")         ? ATTND_V2_OUTPUT
                          : fs_is(&h->out[i].name, "attn_weights") ? ATTND_V2_ATTN_WEIGHTS
                                                                   : -1;
        if (which < 0 || (i == 1 && (int)c->outputs[0] == which))
            return -1;
        explicit_binary[i] = h->out[i].binary;
        c->outputs[c->n_outputs++] = (attnd_v2_output)which;
    }
    finish_outputs(d, explicit_binary);
    return 0;
}

/* ================================================================ shapes */

static int want_type(v2dec *d, int k, int allow_bool, int allow_fp32)
{
    const tensor *x = &d->in[k];
    if ((x->type == DT_BOOL && allow_bool) || (x->type == DT_FP32 && allow_fp32))
        return 0;
    return v2_fail(d->err, 400, input_names[k], "input \"%s\": datatype %s, expected %s",
                   input_names[k], dtype_name(x->type),
                   allow_bool && allow_fp32 ? "BOOL or FP32" : allow_bool ? "BOOL" : "FP32");
}

/* x must be exactly `want` (rank n); -1 in want matches anything. The message's
 * expected shape is written only on failure: want[i], or the letter dims[i] where
 * want[i] is -1, then suffix (e.g. "[B,T,64]", "[2,8] (B,S)"). */
static int want_shape(v2dec *d, int k, const int64_t *want, int n, const char *dims,
                      const char *suffix)
{
    const tensor *x = &d->in[k];
    int ok = x->rank == n;
    for (int i = 0; ok && i < n; i++)
        ok = want[i] < 0 || want[i] == x->dim[i];
    if (ok)
        return 0;
    char sh[96], what[96];
    size_t w = 0;
    shape_text(x, sh, sizeof sh);
    what[w++] = '[';
    for (int i = 0; i < n; i++)
        w += (size_t)(want[i] < 0 ? snprintf(what + w, sizeof what - w, "%s%c", i ? "," : "", dims[i])
                                  : snprintf(what + w, sizeof what - w, "%s%lld", i ? "," : "",
                                             (long long)want[i]));
    snprintf(what + w, sizeof what - w, "]%s", suffix);
    return v2_fail(d->err, 400, input_names[k], "input \"%s\": shape %s, expected %s",
                   input_names[k], sh, what);
}

/* *out = a*b*c*e; -1 on size_t overflow. */
static int mul4(size_t *out, size_t a, size_t b, size_t c, size_t e)
{
    return __builtin_mul_overflow(a, b, out) || __builtin_mul_overflow(*out, c, out) ||
           __builtin_mul_overflow(*out, e, out);
}

static int check_limits(v2dec *d)
{
    const attnd_decode_limits *l = &d->lim;
    if (l->max_seq_len > 0 && (d->t > l->max_seq_len || d->s > l->max_seq_len))
        return v2_fail(d->err, 413, d->t > l->max_seq_len ? "query" : "key",
                       "sequence length %d exceeds max_seq_len %d", d->t > d->s ? d->t : d->s,
                       l->max_seq_len);
    if (l->max_batch_seqs > 0 && d->b > l->max_batch_seqs)
        return v2_fail(d->err, 413, "query", "%d sequences exceed max_batch_seqs %d", d->b,
                       l->max_batch_seqs);
    size_t n = d->in[IN_QUERY].count + d->in[IN_KEY].count + d->in[IN_VALUE].count;
    if (l->max_request_elems > 0 && n > l->max_request_elems)
        return v2_fail(d->err, 413, "query",
                       "request holds %zu input numbers, max_request_elems is %zu", n,
                       l->max_request_elems);
    size_t w;
    if (mul4(&w, (size_t)d->b, (size_t)(d->average ? 1 : d->info->num_heads), (size_t)d->t,
             (size_t)d->s) ||
        mul4(&n, (size_t)d->b, (size_t)d->t, (size_t)d->info->embed_out, 1) ||
        w > SIZE_MAX / 16 || n > SIZE_MAX / 16)
        return v2_fail(d->err, 413, "", "request too large (size overflows)");
    if (d->need_weights && l->max_weights_elems > 0 && w > l->max_weights_elems)
        return v2_fail(d->err, 413, "attn_weights",
                       "attn_weights would hold %zu numbers, max_weights_elems is %zu", w,
                       l->max_weights_elems);
    return 0;
}

static int check_shapes(v2dec *d)
{
    const attn_layer_info *in = d->info;
    tensor *q = &d->in[IN_QUERY], *k = &d->in[IN_KEY], *v = &d->in[IN_VALUE];
    if (!q->present)
        return v2_fail(d->err, 400, "query", "missing input \"query\" [B,T,%d] FP32", in->embed_q);
    if (want_type(d, IN_QUERY, 0, 1))
        return -1;
    if (want_shape(d, IN_QUERY, (int64_t[]){-1, -1, in->embed_q}, 3, "BT", ""))
        return -1;
    d->b = (int)q->dim[0];
    d->t = (int)q->dim[1];
    d->s = d->t;
    if (v->present && !k->present)
        return v2_fail(d->err, 400, "value", "input \"value\" given without \"key\"");
    if (!k->present && (in->embed_k != in->embed_q || in->embed_v != in->embed_q))
        return v2_fail(d->err, 400, "key", "this model needs input \"key\" (and \"value\"): "
                       "E_q=%d, E_k=%d, E_v=%d", in->embed_q, in->embed_k, in->embed_v);
    if (k->present) {
        if (want_type(d, IN_KEY, 0, 1))
            return -1;
        if (want_shape(d, IN_KEY, (int64_t[]){d->b, -1, in->embed_k}, 3, "BS", ""))
            return -1;
        d->s = (int)k->dim[1];
        if (!v->present && in->embed_k != in->embed_v)
            return v2_fail(d->err, 400, "value", "input \"value\" is required: the model's E_k=%d "
                           "differs from E_v=%d", in->embed_k, in->embed_v);
    }
    if (v->present) {
        if (want_type(d, IN_VALUE, 0, 1) ||
            want_shape(d, IN_VALUE, (int64_t[]){d->b, d->s, in->embed_v}, 3, "", ""))
            return -1;
    }
    if (d->in[IN_KPM].present) {
        if (want_type(d, IN_KPM, 1, 0) ||
            want_shape(d, IN_KPM, (int64_t[]){d->b, d->s}, 2, "", " (B,S)"))
            return -1;
    }
    if (d->in[IN_MASK].present) {
        if (want_type(d, IN_MASK, 1, 1) ||
            want_shape(d, IN_MASK, (int64_t[]){d->t, d->s}, 2, "", " (T,S)"))
            return -1;
    }
    if (d->in[IN_POS].present) {
        if (d->in[IN_POS].type != DT_INT64)
            return v2_fail(d->err, 400, "position_ids",
                           "input \"position_ids\": datatype %s, expected INT64",
                           dtype_name(d->in[IN_POS].type));
        if (want_shape(d, IN_POS, (int64_t[]){d->b, d->t}, 2, "", " (B,T)"))
            return -1;
    }
    return check_limits(d);
}

/* ================================================================ copying */

static int is_little_endian(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

/* One position id, checked. */
static int put_position(v2dec *d, int64_t v, size_t i, int64_t *dst)
{
    if (v < 0 || v > MAX_POSITION)
        return v2_fail(d->err, 400, "position_ids",
                       "input \"position_ids\": element %zu is %lld, expected 0..2^53", i,
                       (long long)v);
    dst[i] = v;
    return 0;
}

/* 1 when none of x[0..n) is infinite or NaN (exponent bits all ones): the
 * exponents are OR-reduced 64 values at a time, a loop the compiler can
 * vectorise; the caller's exact loop names the culprit otherwise. */
static int all_finite(const float *x, size_t n)
{
    const uint32_t exp_mask = 0x7f800000u;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        uint32_t bad = 0;
        for (size_t j = 0; j < 64; j++) {
            uint32_t u;
            memcpy(&u, &x[i + j], sizeof u);
            bad |= (uint32_t)-((u & exp_mask) == exp_mask);
        }
        if (bad)
            return 0;
    }
    for (; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

/* Raw little-endian FP32 / BOOL / INT64 bytes into dst; FP32 values must be finite. */
static int copy_raw(v2dec *d, int k, void *dst)
{
    const tensor *x = &d->in[k];
    if (x->type == DT_INT64) {
        for (size_t i = 0; i < x->count; i++) {
            uint64_t u = 0;
            for (int b = 7; b >= 0; b--)
                u = u << 8 | x->raw[8 * i + (size_t)b];
            if (put_position(d, (int64_t)u, i, dst))
                return -1;
        }
        return 0;
    }
    if (x->type == DT_BOOL) {
        uint8_t *o = dst;
        for (size_t i = 0; i < x->count; i++)
            o[i] = x->raw[i] != 0;
        return 0;
    }
    float *o = dst;
    if (is_little_endian()) {
        memcpy(o, x->raw, x->count * sizeof(float));
    } else {
        for (size_t i = 0; i < x->count; i++) {
            const unsigned char *p = x->raw + 4 * i;
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                         (uint32_t)p[3] << 24;
            memcpy(&o[i], &u, sizeof u);
        }
    }
    if (k != IN_MASK && all_finite(o, x->count))
        return 0; /* the common case, checked without a branch per value */
    if (k == IN_MASK) /* a float mask may hold -inf */
        for (size_t i = 0; i < x->count; i++) {
            if (isnan(o[i]))
                return v2_fail(d->err, 400, input_names[k], "input \"%s\": element %zu is NaN",
                               input_names[k], i);
        }
    else
        for (size_t i = 0; i < x->count; i++)
            if (!isfinite(o[i]))
                return v2_fail(d->err, 400, input_names[k],
                               "input \"%s\": element %zu is not finite", input_names[k], i);
    return 0;
}

static int copy_leaf(v2dec *d, int k, const json_t *v, void *dst, size_t i)
{
    const tensor *x = &d->in[k];
    if (x->type == DT_INT64) {
        if (!json_is_integer(v))
            return v2_fail(d->err, 400, input_names[k], "input \"%s\": element %zu is not an "
                           "integer", input_names[k], i);
        return put_position(d, json_integer_value(v), i, dst);
    }
    if (x->type == DT_BOOL) {
        if (!json_is_boolean(v))
            return v2_fail(d->err, 400, input_names[k],
                           "input \"%s\": element %zu must be true or false", input_names[k], i);
        ((uint8_t *)dst)[i] = (uint8_t)json_is_true(v);
        return 0;
    }
    float *o = (float *)dst + i;
    if (json_is_integer(v)) {
        *o = (float)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v) && attnd_json_double_to_float(json_real_value(v), o) == 0)
        return 0;
    return v2_fail(d->err, 400, input_names[k], "input \"%s\": element %zu is not a float32 number",
                   input_names[k], i);
}

/* Nested data: level `lvl` of the shape; *i counts leaves written. */
static int copy_nested(v2dec *d, int k, const json_t *a, int lvl, void *dst, size_t *i)
{
    const tensor *x = &d->in[k];
    if (!json_is_array(a) || json_array_size(a) != (size_t)x->dim[lvl])
        return v2_fail(d->err, 400, input_names[k],
                       "input \"%s\": nested data does not match the shape at dimension %d "
                       "(expected %lld entries, near element %zu)",
                       input_names[k], lvl, (long long)x->dim[lvl], *i);
    for (size_t j = 0; j < json_array_size(a); j++) {
        const json_t *e = json_array_get(a, j);
        int rc = lvl + 1 < x->rank ? copy_nested(d, k, e, lvl + 1, dst, i)
                                   : copy_leaf(d, k, e, dst, (*i)++);
        if (rc)
            return -1;
    }
    return 0;
}

/* JSON "data", flat (row-major, prod(shape) values) or nested as the shape. */
static int copy_json(v2dec *d, int k, void *dst)
{
    const tensor *x = &d->in[k];
    const json_t *a = x->data;
    if (json_array_size(a) > 0 && json_is_array(json_array_get(a, 0))) {
        size_t i = 0;
        return copy_nested(d, k, a, 0, dst, &i);
    }
    if (json_array_size(a) != x->count)
        return v2_fail(d->err, 400, input_names[k],
                       "input \"%s\": data has %zu values, its shape holds %zu", input_names[k],
                       json_array_size(a), x->count);
    for (size_t i = 0; i < x->count; i++)
        if (copy_leaf(d, k, json_array_get(a, i), dst, i))
            return -1;
    return 0;
}

static int copy_input(v2dec *d, int k, void *dst)
{
    return d->in[k].raw ? copy_raw(d, k, dst) : copy_json(d, k, dst);
}

/* One request (attnd_request_alloc):
 *   [request][seqs x B][floats: query, key, value, float mask, output, weights]
 *   [bytes: key_padding_mask, bool mask] */
static int build(v2dec *d, attnd_request **out)
{
    const attn_layer_info *in = d->info;
    const size_t B = (size_t)d->b, T = (size_t)d->t, S = (size_t)d->s;
    const tensor *mask = &d->in[IN_MASK];
    size_t heads = d->average ? 1 : (size_t)in->num_heads;
    size_t n_out = B * T * (size_t)in->embed_out, n_w = d->need_weights ? B * heads * T * S : 0;
    size_t n_fmask = mask->present && mask->type == DT_FP32 ? mask->count : 0;
    size_t n_floats = d->in[IN_QUERY].count + d->in[IN_KEY].count + d->in[IN_VALUE].count +
                      n_fmask + n_out + n_w;
    size_t n_bytes = d->in[IN_KPM].count + (mask->present ? mask->count - n_fmask : 0);
    attnd_request_sizes sizes = {.n_ints = d->in[IN_POS].count, .n_floats = n_floats,
                                 .n_bytes = n_bytes};
    attnd_request_cursor cur;
    attnd_request *req = attnd_request_alloc(d->b, &sizes, &cur, d->err);
    if (!req)
        return -1;
    float *f = cur.floats;
    uint8_t *u8 = cur.bytes;
    int64_t *pos = cur.ints;
    float *q = f, *k = q + d->in[IN_QUERY].count, *v = k + d->in[IN_KEY].count;
    float *fm = v + d->in[IN_VALUE].count, *o = fm + n_fmask, *w = o + n_out;
    uint8_t *kpm = u8, *bm = u8 + d->in[IN_KPM].count;
    void *mdst = n_fmask ? (void *)fm : (void *)bm;
    if (copy_input(d, IN_QUERY, q) || (d->in[IN_KEY].present && copy_input(d, IN_KEY, k)) ||
        (d->in[IN_VALUE].present && copy_input(d, IN_VALUE, v)) ||
        (d->in[IN_KPM].present && copy_input(d, IN_KPM, kpm)) ||
        (mask->present && copy_input(d, IN_MASK, mdst)) ||
        (d->in[IN_POS].present && copy_input(d, IN_POS, pos)))
        goto fail;
    for (size_t b = 0; b < B; b++) {
        attn_seq *s = &req->seqs[b];
        s->t = d->t;
        s->s = d->s;
        s->query = q + b * T * (size_t)in->embed_q;
        if (d->in[IN_KEY].present) {
            s->key = k + b * S * (size_t)in->embed_k;
            s->value = d->in[IN_VALUE].present ? v + b * S * (size_t)in->embed_v : s->key;
        }
        if (d->in[IN_KPM].present)
            s->key_padding_mask = kpm + b * S;
        if (d->in[IN_POS].present)
            s->position_ids = pos + b * T;
        if (mask->present) {
            s->attn_mask_kind = n_fmask ? ATTN_MASK_FLOAT : ATTN_MASK_BOOL;
            s->attn_mask = mdst; /* one [T,S] mask shared by every sequence */
        }
        s->is_causal = d->is_causal;
        s->window = d->window;
        s->output = o + b * T * (size_t)in->embed_out;
        s->weights_mode = !d->need_weights ? ATTN_WEIGHTS_NONE
                          : d->average     ? ATTN_WEIGHTS_AVERAGE
                                           : ATTN_WEIGHTS_PER_HEAD;
        s->weights = d->need_weights ? w + b * heads * T * S : NULL;
    }
    req->batched = 1;
    req->need_weights = d->need_weights;
    req->average_attn_weights = d->average;
    req->timeout_ms = d->timeout_ms;
    req->n_tokens = B * (T + (d->in[IN_KEY].present ? S : 0));
    if (d->id)
        memcpy(req->id, d->id, d->id_len); /* NUL: the block is zeroed; id_len <= 127 */
    req->embed_out = in->embed_out;
    req->num_heads = in->num_heads;
    *out = req;
    return 0;
fail:
    attnd_request_free(req);
    return -1;
}

int attnd_codec_v2_decode(const char *body, size_t len, long long header_len,
                          const attn_layer_info *info, const attnd_decode_limits *limits,
                          attnd_request **out, attnd_v2_call *call, attnd_http_error *err)
{
    attnd_http_error scratch;
    attnd_v2_call call_scratch;
    v2dec d = {.info = info, .err = err ? err : &scratch, .average = 1,
               .call = call ? call : &call_scratch};
    if (out)
        *out = NULL;
    if (!out || !info || (!body && len > 0))
        return v2_fail(d.err, 500, "", "attnd_codec_v2_decode: bad arguments");
    if (!body)
        body = ""; /* len == 0 */
    if (limits)
        d.lim = *limits;
    memset(d.call, 0, sizeof *d.call);
    size_t json_len = len;
    if (header_len >= 0) {
        if ((unsigned long long)header_len > len)
            return v2_fail(d.err, 400, "Inference-Header-Content-Length",
                           "Inference-Header-Content-Length %lld is beyond the body (%zu bytes)",
                           header_len, len);
        json_len = (size_t)header_len;
    }
    fast_hdr fh;
    if (header_len >= 0 && fast_header(body, json_len, &fh) == 0 &&
        fast_apply(&d, &fh, body + json_len, len - json_len) == 0) {
        if (check_shapes(&d) != 0 || build(&d, out) != 0)
            return -1; /* shape and limit errors: the same checks as below */
        d.call->batch = d.b;
        d.call->t = d.t;
        d.call->s = d.s;
        return 0;
    }
    /* Declined: the jansson path below starts again from a clean state. */
    memset(d.in, 0, sizeof d.in);
    d.is_causal = d.window = d.need_weights = d.binary_output = 0;
    d.average = 1;
    d.timeout_ms = 0;
    d.id = NULL;
    d.id_len = 0;
    memset(d.call, 0, sizeof *d.call);
    json_error_t je;
    int nomem = 0;
    json_t *root = attnd_json_loadb(body, json_len, JSON_REJECT_DUPLICATES, &je, &nomem);
    if (!root && nomem)
        return v2_fail(d.err, 500, "", "out of memory while parsing JSON");
    if (!root && attnd_json_nonfinite_error(body, json_len, je.position, d.err) != 0)
        return -1;
    if (!root)
        return v2_fail(d.err, 400, "", "invalid JSON at line %d, column %d (byte %d): %s", je.line,
                       je.column, je.position, je.text);
    int rc = -1;
    unsigned long failures = attnd_json_alloc_failures();
    if (read_top(&d, root, body + json_len, len - json_len) == 0 && check_shapes(&d) == 0 &&
        build(&d, out) == 0) {
        d.call->batch = d.b;
        d.call->t = d.t;
        d.call->s = d.s;
        rc = 0;
    } else if (attnd_json_alloc_failures() != failures) {
        /* json_unpack_ex lacked memory: its complaint is not about the body */
        v2_fail(d.err, 500, "", "out of memory reading the request");
    }
    json_decref(root);
    return rc;
}

/* ================================================================ encoding */

static void put_le_floats(attnd_jsonbuf *b, const float *x, size_t n)
{
    if (is_little_endian()) {
        attnd_jb_put(b, x, n * sizeof *x);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        unsigned char le[4] = {(unsigned char)u, (unsigned char)(u >> 8),
                               (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
        attnd_jb_put(b, le, 4);
    }
}

/* The data and shape of output `which` (contiguous: the decoder laid them out so). */
static const float *output_tensor(const attnd_request *req, const attnd_v2_call *c,
                                  attnd_v2_output which, int64_t *shape, int *rank, size_t *n)
{
    if (which == ATTND_V2_OUTPUT) {
        shape[0] = c->batch, shape[1] = c->t, shape[2] = req->embed_out;
        *rank = 3;
        *n = (size_t)c->batch * (size_t)c->t * (size_t)req->embed_out;
        return req->seqs[0].output;
    }
    int per_head = req->seqs[0].weights_mode == ATTN_WEIGHTS_PER_HEAD;
    *rank = 0;
    shape[(*rank)++] = c->batch;
    if (per_head)
        shape[(*rank)++] = req->num_heads;
    shape[(*rank)++] = c->t;
    shape[(*rank)++] = c->s;
    *n = (size_t)c->batch * (per_head ? (size_t)req->num_heads : 1) * (size_t)c->t *
         (size_t)c->s;
    return req->seqs[0].weights;
}

char *attnd_codec_v2_encode_response(const attnd_request *req, const attnd_v2_call *call,
                                     const char *model_name, int model_version, size_t *len,
                                     size_t *header_len)
{
    return attnd_codec_v2_encode_response_with(req, call, model_name, model_version, NULL, len,
                                               header_len);
}

char *attnd_codec_v2_encode_response_with(const attnd_request *req, const attnd_v2_call *call,
                                          const char *model_name, int model_version,
                                          const char *parameters, size_t *len,
                                          size_t *header_len)
{
    attnd_jsonbuf b = {0};
    int any_binary = 0;
    if (!req || !call || req->n_seqs < 1)
        return NULL;
    attnd_jb_puts(&b, "{\"model_name\":");
    attnd_jb_string(&b, model_name);
    attnd_jb_puts(&b, ",\"model_version\":\"");
    attnd_jb_i64(&b, model_version);
    attnd_jb_putc(&b, '"');
    if (req->id[0]) {
        attnd_jb_puts(&b, ",\"id\":");
        attnd_jb_string(&b, req->id);
    }
    attnd_jb_puts(&b, ",\"parameters\":{");
    attnd_codec_put_timing(&b, req);
    if (parameters && *parameters) {
        attnd_jb_putc(&b, ',');
        attnd_jb_puts(&b, parameters);
    }
    attnd_jb_putc(&b, '}');
    attnd_jb_puts(&b, ",\"outputs\":[");
    for (int i = 0; i < call->n_outputs; i++) {
        int64_t shape[4];
        int rank;
        size_t n;
        const float *x = output_tensor(req, call, call->outputs[i], shape, &rank, &n);
        attnd_jb_puts(&b, i ? ",{\"name\":\"" : "{\"name\":\"");
        attnd_jb_puts(&b, call->outputs[i] == ATTND_V2_OUTPUT ? "output" : "attn_weights");
        attnd_jb_puts(&b, "\",\"datatype\":\"FP32\",\"shape\":[");
        for (int r = 0; r < rank; r++) {
            if (r)
                attnd_jb_putc(&b, ',');
            attnd_jb_i64(&b, (long long)shape[r]);
        }
        if (call->binary[i]) {
            attnd_jb_puts(&b, "],\"parameters\":{\"binary_data_size\":");
            attnd_jb_i64(&b, (long long)(n * sizeof(float)));
            attnd_jb_puts(&b, "}}");
            any_binary = 1;
        } else {
            attnd_jb_puts(&b, "],\"data\":");
            attnd_jb_floats(&b, x, n);
            attnd_jb_put(&b, "}", 1);
        }
    }
    attnd_jb_puts(&b, "]}");
    size_t hlen = b.len;
    for (int i = 0; any_binary && i < call->n_outputs; i++) {
        int64_t shape[4];
        int rank;
        size_t n;
        const float *x = output_tensor(req, call, call->outputs[i], shape, &rank, &n);
        if (call->binary[i])
            put_le_floats(&b, x, n);
    }
    if (header_len)
        *header_len = any_binary ? hlen : 0;
    return attnd_jb_finish(&b, len); /* NUL-terminated, for JSON-only bodies */
}

char *attnd_codec_v2_encode_error(const attnd_http_error *err, const char *request_id,
                                  size_t *len)
{
    char msg[sizeof err->field + sizeof err->message + 8];
    snprintf(msg, sizeof msg, "%s%s%s", err && err->field[0] && !strstr(err->message, err->field)
                                            ? err->field : "",
             err && err->field[0] && !strstr(err->message, err->field) ? ": " : "",
             err ? err->message : "unknown error");
    attnd_jsonbuf b = {0};
    attnd_jb_puts(&b, "{\"error\":");
    attnd_jb_string(&b, msg);
    if (request_id && *request_id) {
        attnd_jb_puts(&b, ",\"request_id\":");
        attnd_jb_string(&b, request_id);
    }
    attnd_jb_putc(&b, '}');
    return attnd_jb_finish(&b, len);
}

char *attnd_codec_v2_server_metadata(size_t *len)
{
    attnd_jsonbuf b = {0};
    attnd_jb_printf(&b,
                    "{\"name\":\"attnd\",\"version\":\"%s\",\"extensions\":[\"binary_tensor_data\","
                    "\"model_repository\"]}",
                    ATTN_VERSION_STRING);
    return attnd_jb_finish(&b, len);
}

static void put_meta_tensor(attnd_jsonbuf *b, int first, const char *name, const char *dtype,
                            const int *shape, int rank)
{
    attnd_jb_printf(b, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[", first ? "" : ",",
                    name, dtype);
    for (int i = 0; i < rank; i++)
        attnd_jb_printf(b, "%s%d", i ? "," : "", shape[i]);
    attnd_jb_puts(b, "]}");
}

char *attnd_codec_v2_model_metadata(const char *name, int version, const attn_layer_info *in,
                                    size_t *len)
{
    attnd_jsonbuf b = {0};
    attnd_jb_puts(&b, "{\"name\":");
    attnd_jb_string(&b, name);
    attnd_jb_printf(&b, ",\"versions\":[\"%d\"],\"platform\":\"attnd_multihead_attention\","
                    "\"inputs\":[", version);
    put_meta_tensor(&b, 1, "query", "FP32", (int[]){-1, -1, in->embed_q}, 3);
    put_meta_tensor(&b, 0, "key", "FP32", (int[]){-1, -1, in->embed_k}, 3);
    put_meta_tensor(&b, 0, "value", "FP32", (int[]){-1, -1, in->embed_v}, 3);
    put_meta_tensor(&b, 0, "key_padding_mask", "BOOL", (int[]){-1, -1}, 2);
    put_meta_tensor(&b, 0, "attn_mask", "BOOL", (int[]){-1, -1}, 2);
    put_meta_tensor(&b, 0, "position_ids", "INT64", (int[]){-1, -1}, 2);
    attnd_jb_puts(&b, "],\"outputs\":[");
    put_meta_tensor(&b, 1, "output", "FP32", (int[]){-1, -1, in->embed_out}, 3);
    put_meta_tensor(&b, 0, "attn_weights", "FP32", (int[]){-1, -1, -1}, 3);
    attnd_jb_printf(&b, "],\"parameters\":{\"num_heads\":%d,\"num_kv_heads\":%d,\"head_dim\":%d,"
                    "\"rope\":%s}}",
                    in->num_heads, in->num_kv_heads > 0 ? in->num_kv_heads : in->num_heads,
                    in->head_dim_k,
                    in->rope.style == ATTN_ROPE_HALF          ? "\"half\""
                    : in->rope.style == ATTN_ROPE_INTERLEAVED ? "\"interleaved\""
                                                              : "null");
    return attnd_jb_finish(&b, len);
}
