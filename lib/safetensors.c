/* safetensors.c — the safetensors container reader (validated, see safetensors.h)
 * and the layer loader behind attn_layer_load_safetensors[_mem]: it maps PyTorch
 * nn.MultiheadAttention state_dict names, or the explicit q_proj./k_proj./v_proj./
 * o_proj. names, onto an attn_layer_desc and builds the layer.
 *
 * Loader decisions (documented in attn.h's terms):
 *  - Unknown tensor names are rejected (ATTN_ERR_FORMAT): a typo such as
 *    "out_proj.bais" would otherwise silently drop a bias.
 *  - Mixing the two naming schemes in one file is rejected (ATTN_ERR_FORMAT).
 *  - A weight holding NaN or +-inf (possible in F16/BF16/F32 alike) is rejected
 *    with ATTN_ERR_NONFINITE naming the tensor and element.
 *  - num_heads: argument > 0 wins; 0 reads __metadata__["num_heads"] (a plain
 *    decimal string); missing -> ATTN_ERR_INVALID_ARG, malformed -> ATTN_ERR_FORMAT,
 *    not dividing the projection width -> ATTN_ERR_SHAPE; every such message says
 *    to pass heads=N.
 *  - Files are read into memory with read(2), not mmap'ed: a file truncated by
 *    someone else while mapped would raise SIGBUS, and the weights are copied
 *    (converted to float32) anyway.
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "half.h"
#include "layer_internal.h"

/* ------------------------------------------------------------ dtypes */

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [ATTN__ST_BOOL] = {"BOOL", 1}, [ATTN__ST_U8] = {"U8", 1},
    [ATTN__ST_I8] = {"I8", 1},     [ATTN__ST_U16] = {"U16", 2},
    [ATTN__ST_I16] = {"I16", 2},   [ATTN__ST_F16] = {"F16", 2},
    [ATTN__ST_BF16] = {"BF16", 2}, [ATTN__ST_U32] = {"U32", 4},
    [ATTN__ST_I32] = {"I32", 4},   [ATTN__ST_F32] = {"F32", 4},
    [ATTN__ST_U64] = {"U64", 8},   [ATTN__ST_I64] = {"I64", 8},
    [ATTN__ST_F64] = {"F64", 8},   [ATTN__ST_F8_E4M3] = {"F8_E4M3", 1},
    [ATTN__ST_F8_E5M2] = {"F8_E5M2", 1},
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

const char *attn__st_dtype_name(attn__st_dtype dtype)
{
    return (size_t)dtype < N_DTYPES ? dtypes[dtype].name : "?";
}

size_t attn__st_dtype_size(attn__st_dtype dtype)
{
    return (size_t)dtype < N_DTYPES ? dtypes[dtype].size : 0;
}

static int dtype_from_name(const char *s, attn__st_dtype *out)
{
    for (size_t i = 0; i < N_DTYPES; i++) {
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (attn__st_dtype)i;
            return 1;
        }
    }
    return 0;
}

/* Little-endian loads from possibly unaligned bytes, whatever the host order. */
static uint16_t load_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t load_le64(const uint8_t *p)
{
    return (uint64_t)load_le32(p) | (uint64_t)load_le32(p + 4) << 32;
}

attn_status attn__st_to_f32(const attn__st_tensor *t, float *dst, attn_error *err)
{
    const uint8_t *p = t->data;
    size_t n = t->numel;

    switch (t->dtype) {
    case ATTN__ST_F32:
        for (size_t i = 0; i < n; i++) {
            uint32_t u = load_le32(p + 4 * i);
            memcpy(&dst[i], &u, sizeof u);
        }
        return ATTN_OK;
    case ATTN__ST_F16:
        for (size_t i = 0; i < n; i++) dst[i] = attn__f16_to_f32(load_le16(p + 2 * i));
        return ATTN_OK;
    case ATTN__ST_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = attn__bf16_to_f32(load_le16(p + 2 * i));
        return ATTN_OK;
    default:
        return attn__set_error(err, ATTN_ERR_DTYPE,
                               "tensor '%.64s' has dtype %s; weights must be F32, F16 or BF16",
                               t->name, attn__st_dtype_name(t->dtype));
    }
}

/* ------------------------------------------------------------ container */

void attn__st_free(attn__st_file *f)
{
    if (f == NULL) return;
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->tensors);
    free(f->meta);
    free(f->owned);
    memset(f, 0, sizeof *f);
}

const attn__st_tensor *attn__st_find(const attn__st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *attn__st_meta_get(const attn__st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

/* Reads a non-negative JSON integer into *out; 0 if v is anything else. */
static int json_size(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

static attn_status parse_metadata(json_t *obj, attn__st_file *f, attn_error *err)
{
    if (!json_is_object(obj))
        return attn__set_error(err, ATTN_ERR_FORMAT, "__metadata__ is not a JSON object");
    f->meta = calloc(json_object_size(obj) + 1, sizeof *f->meta);
    if (f->meta == NULL) return attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val) {
        if (!json_is_string(val))
            return attn__set_error(err, ATTN_ERR_FORMAT,
                                   "__metadata__[\"%.64s\"] is not a string", key);
        attn__st_meta *m = &f->meta[f->n_meta];
        m->key = strdup(key);
        m->value = strdup(json_string_value(val));
        f->n_meta++;
        if (m->key == NULL || m->value == NULL)
            return attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
    }
    return ATTN_OK;
}

/* Fills t->ndim, shape, numel and nbytes from the JSON shape array. */
static attn_status parse_shape(const char *name, const json_t *jshape, attn__st_tensor *t,
                               attn_error *err)
{
    size_t ndim = json_array_size(jshape);
    if (ndim > ATTN__ST_MAX_DIMS)
        return attn__set_error(err, ATTN_ERR_LIMIT, "tensor '%.64s' has %zu dimensions (max %d)",
                               name, ndim, ATTN__ST_MAX_DIMS);
    t->ndim = (int)ndim;
    t->numel = 1;
    for (size_t d = 0; d < ndim; d++) {
        uint64_t dim;
        if (!json_size(json_array_get(jshape, d), &dim))
            return attn__set_error(err, ATTN_ERR_FORMAT,
                                   "tensor '%.64s': shape[%zu] is not a non-negative integer",
                                   name, d);
        t->shape[d] = (size_t)dim;
        if (!attn__mul_size(t->numel, (size_t)dim, &t->numel))
            return attn__set_error(err, ATTN_ERR_LIMIT,
                                   "tensor '%.64s': shape product overflows", name);
    }
    if (!attn__mul_size(t->numel, attn__st_dtype_size(t->dtype), &t->nbytes))
        return attn__set_error(err, ATTN_ERR_LIMIT, "tensor '%.64s': byte size overflows", name);
    return ATTN_OK;
}

/* Checks data_offsets [b, e] against the data section and t->nbytes; sets t->data. */
static attn_status parse_offsets(const char *name, const json_t *joff, const uint8_t *data,
                                 size_t data_len, attn__st_tensor *t, uint64_t *begin,
                                 attn_error *err)
{
    uint64_t b, e;
    if (!json_size(json_array_get(joff, 0), &b) || !json_size(json_array_get(joff, 1), &e))
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "tensor '%.64s': data_offsets are not non-negative integers", name);
    if (b > e)
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "tensor '%.64s': data_offsets [%llu, %llu] are reversed", name,
                               (unsigned long long)b, (unsigned long long)e);
    if (e > data_len)
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "tensor '%.64s': data_offsets [%llu, %llu] run past the data "
                               "section (%zu bytes)",
                               name, (unsigned long long)b, (unsigned long long)e, data_len);
    if (e - b != t->nbytes)
        return attn__set_error(err, ATTN_ERR_DTYPE,
                               "tensor '%.64s': %zu elements of %s need %zu bytes, "
                               "data_offsets [%llu, %llu] hold %llu",
                               name, t->numel, attn__st_dtype_name(t->dtype), t->nbytes,
                               (unsigned long long)b, (unsigned long long)e,
                               (unsigned long long)(e - b));
    t->data = data + b;
    *begin = b;
    return ATTN_OK;
}

/* Checks one tensor entry {"dtype", "shape", "data_offsets"} (no other fields) and
 * fills *t (name not set) and *begin. data/data_len: the data section. */
static attn_status parse_tensor(const char *name, json_t *v, const uint8_t *data,
                                size_t data_len, attn__st_tensor *t, uint64_t *begin,
                                attn_error *err)
{
    if (!json_is_object(v))
        return attn__set_error(err, ATTN_ERR_FORMAT, "tensor '%.64s' is not a JSON object", name);
    json_t *jdtype = NULL, *jshape = NULL, *joff = NULL;
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        if (strcmp(key, "dtype") == 0) jdtype = val;
        else if (strcmp(key, "shape") == 0) jshape = val;
        else if (strcmp(key, "data_offsets") == 0) joff = val;
        else
            return attn__set_error(err, ATTN_ERR_FORMAT, "tensor '%.64s' has unknown field \"%.32s\"",
                                   name, key);
    }
    if (!json_is_string(jdtype))
        return attn__set_error(err, ATTN_ERR_FORMAT, "tensor '%.64s': \"dtype\" %s", name,
                               jdtype ? "is not a string" : "is missing");
    if (!json_is_array(jshape))
        return attn__set_error(err, ATTN_ERR_FORMAT, "tensor '%.64s': \"shape\" %s", name,
                               jshape ? "is not an array" : "is missing");
    if (!json_is_array(joff) || json_array_size(joff) != 2)
        return attn__set_error(err, ATTN_ERR_FORMAT, "tensor '%.64s': \"data_offsets\" %s", name,
                               joff ? "is not an array of 2 integers" : "is missing");
    if (!dtype_from_name(json_string_value(jdtype), &t->dtype))
        return attn__set_error(err, ATTN_ERR_DTYPE, "tensor '%.64s' has unknown dtype \"%.16s\"",
                               name, json_string_value(jdtype));
    attn_status st = parse_shape(name, jshape, t, err);
    return st != ATTN_OK ? st : parse_offsets(name, joff, data, data_len, t, begin, err);
}

typedef struct span {
    uint64_t begin, end;
    size_t index;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Rejects two tensors sharing bytes. Empty tensors overlap nothing. */
static attn_status check_overlap(const attn__st_file *f, const uint64_t *begins, attn_error *err)
{
    if (f->n_tensors < 2) return ATTN_OK;
    span *s = malloc(f->n_tensors * sizeof *s);
    if (s == NULL) return attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        if (f->tensors[i].nbytes == 0) continue;
        s[n++] = (span){begins[i], begins[i] + f->tensors[i].nbytes, i};
    }
    qsort(s, n, sizeof *s, span_cmp);
    attn_status st = ATTN_OK;
    for (size_t i = 1; i < n && st == ATTN_OK; i++) {
        if (s[i].begin < s[i - 1].end)
            st = attn__set_error(err, ATTN_ERR_FORMAT,
                                 "tensors '%.64s' and '%.64s' overlap at data offset %llu",
                                 f->tensors[s[i - 1].index].name, f->tensors[s[i].index].name,
                                 (unsigned long long)s[i].begin);
    }
    free(s);
    return st;
}

static attn_status parse_header(json_t *root, const uint8_t *data, size_t data_len,
                                attn__st_file *f, attn_error *err)
{
    size_t n = json_object_size(root);
    uint64_t *begins = calloc(n + 1, sizeof *begins);
    f->tensors = calloc(n + 1, sizeof *f->tensors);
    if (begins == NULL || f->tensors == NULL) {
        free(begins);
        return attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
    }
    attn_status st = ATTN_OK;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            st = parse_metadata(val, f, err);
        } else {
            attn__st_tensor *t = &f->tensors[f->n_tensors];
            st = parse_tensor(key, val, data, data_len, t, &begins[f->n_tensors], err);
            if (st == ATTN_OK) {
                t->name = strdup(key);
                f->n_tensors++;
                if (t->name == NULL) st = attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
            }
        }
        if (st != ATTN_OK) break;
    }
    if (st == ATTN_OK) st = check_overlap(f, begins, err);
    free(begins);
    return st;
}

attn_status attn__st_parse(const void *bytes, size_t len, attn__st_file *out, attn_error *err)
{
    if (out == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "out is NULL");
    memset(out, 0, sizeof *out);
    if (bytes == NULL && len > 0)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "data is NULL");
    if (len < 8)
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "file is %zu bytes, shorter than the 8-byte header length", len);
    const uint8_t *p = bytes;
    uint64_t hlen = load_le64(p);
    if (hlen > len - 8)
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "header length %llu exceeds the %zu bytes after it",
                               (unsigned long long)hlen, len - 8);
    if (hlen > ATTN__ST_MAX_HEADER)
        return attn__set_error(err, ATTN_ERR_LIMIT, "header length %llu exceeds the %llu-byte cap",
                               (unsigned long long)hlen, (unsigned long long)ATTN__ST_MAX_HEADER);

    json_error_t jerr;
    json_t *root = json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return attn__set_error(err, ATTN_ERR_FORMAT, "header is not valid JSON (line %d, column %d): %s",
                               jerr.line, jerr.column, jerr.text);
    attn_status st;
    if (!json_is_object(root))
        st = attn__set_error(err, ATTN_ERR_FORMAT, "header is not a JSON object");
    else
        st = parse_header(root, p + 8 + hlen, len - 8 - (size_t)hlen, out, err);
    json_decref(root);
    if (st != ATTN_OK) attn__st_free(out);
    return st;
}

attn_status attn__st_read_file(const char *path, attn__st_file *out, attn_error *err)
{
    if (out == NULL || path == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "path or out is NULL");
    memset(out, 0, sizeof *out);
    uint8_t *buf = NULL;
    attn_status st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = attn__set_error(err, ATTN_ERR_IO, "%.160s: not a regular file", path);
        goto fail;
    }
    size_t size = (size_t)sb.st_size;
    buf = malloc(size ? size : 1);
    if (buf == NULL) {
        st = attn__set_error(err, ATTN_ERR_NOMEM, "%.160s: cannot allocate %zu bytes", path, size);
        goto fail;
    }
    for (size_t got = 0; got < size;) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            st = attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path,
                                 r < 0 ? strerror(errno) : "file shrank while being read");
            goto fail;
        }
        got += (size_t)r;
    }
    close(fd);
    fd = -1;
    st = attn__st_parse(buf, size, out, err);
    if (st != ATTN_OK) goto fail;
    out->owned = buf;
    return ATTN_OK;
fail:
    if (fd >= 0) close(fd);
    free(buf);
    return st;
}

/* ------------------------------------------------------------ layer loader */

/* Every tensor name a layer file may hold. PT_* are PyTorch state_dict names,
 * EX_* the explicit scheme. */
enum slot {
    PT_IN_W, PT_IN_B, PT_Q_W, PT_K_W, PT_V_W, PT_OUT_W, PT_OUT_B,
    EX_Q_W, EX_K_W, EX_V_W, EX_O_W, EX_Q_B, EX_K_B, EX_V_B, EX_O_B,
    N_SLOTS
};
#define FIRST_EX EX_Q_W

static const char *const slot_names[N_SLOTS] = {
    "in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight", "v_proj_weight",
    "out_proj.weight", "out_proj.bias",
    "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
    "q_proj.bias", "k_proj.bias", "v_proj.bias", "o_proj.bias",
};

typedef struct loader {
    const attn__st_file *file;
    const attn__st_tensor *t[N_SLOTS]; /* borrowed from file; NULL = absent */
    float *f[N_SLOTS];                 /* owned float32 copies */
    int heads;
} loader;

static attn_status assign_slots(loader *ld, attn_error *err)
{
    int pt = 0, ex = 0;
    for (size_t i = 0; i < ld->file->n_tensors; i++) {
        const attn__st_tensor *t = &ld->file->tensors[i];
        int s = 0;
        while (s < N_SLOTS && strcmp(t->name, slot_names[s]) != 0) s++;
        if (s == N_SLOTS) {
            if (strcmp(t->name, "bias_k") == 0 || strcmp(t->name, "bias_v") == 0)
                return attn__set_error(err, ATTN_ERR_FORMAT,
                                       "tensor '%s' (add_bias_kv=True) is not supported", t->name);
            return attn__set_error(err, ATTN_ERR_FORMAT,
                                   "unknown tensor '%.64s' (expected PyTorch MultiheadAttention "
                                   "names or q_proj./k_proj./v_proj./o_proj.{weight,bias})",
                                   t->name);
        }
        ld->t[s] = t;
        if (s < FIRST_EX) pt = 1;
        else ex = 1;
    }
    if (pt && ex)
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "file mixes PyTorch names (in_proj_*, out_proj.*) with explicit "
                               "names (q_proj.weight, ...)");
    if (!pt && !ex)
        return attn__set_error(err, ATTN_ERR_MISSING_TENSOR,
                               "no attention weights: need in_proj_weight (or q_proj_weight, "
                               "k_proj_weight, v_proj_weight) or q_proj.weight");
    return ATTN_OK;
}

static attn_status resolve_heads(loader *ld, int num_heads, attn_error *err)
{
    if (num_heads < 0)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "num_heads = %d; pass heads=N with N >= 1",
                               num_heads);
    if (num_heads > 0) {
        ld->heads = num_heads;
        return ATTN_OK;
    }
    const char *s = attn__st_meta_get(ld->file, "num_heads");
    if (s == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "number of heads unknown: __metadata__ has no \"num_heads\"; "
                               "pass heads=N");
    long v = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9' && v <= 1000000; i++) v = v * 10 + (s[i] - '0');
    if (i == 0 || s[i] != '\0' || v < 1 || v > 1000000)
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "__metadata__ num_heads \"%.32s\" is not a decimal integer in "
                               "[1, 1000000]; pass heads=N",
                               s);
    ld->heads = (int)v;
    return ATTN_OK;
}

static void fmt_shape(const attn__st_tensor *t, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%zu", d ? ", " : "", t->shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Checks slot s (if present, or if required) is exactly [d0] (d1 < 0) or [d0, d1].
 * want: the expected shape in symbols, for the message. */
static attn_status want(const loader *ld, int s, int required, size_t d0, long d1,
                        const char *want_sym, attn_error *err)
{
    const attn__st_tensor *t = ld->t[s];
    if (t == NULL)
        return required ? attn__set_error(err, ATTN_ERR_MISSING_TENSOR,
                                          "tensor '%s' is missing", slot_names[s])
                        : ATTN_OK;
    int ndim = d1 < 0 ? 1 : 2;
    if (t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == (size_t)d1))
        return ATTN_OK;
    char got[96];
    fmt_shape(t, got, sizeof got);
    if (ndim == 1)
        return attn__set_error(err, ATTN_ERR_SHAPE, "%s is %s, expected %s = [%zu]",
                               slot_names[s], got, want_sym, d0);
    return attn__set_error(err, ATTN_ERR_SHAPE, "%s is %s, expected %s = [%zu, %ld]",
                           slot_names[s], got, want_sym, d0, d1);
}

/* First dimensions of a 2-D weight, or an error naming it. */
static attn_status matrix_dims(const loader *ld, int s, size_t *rows, size_t *cols,
                               attn_error *err)
{
    const attn__st_tensor *t = ld->t[s];
    if (t == NULL) return attn__set_error(err, ATTN_ERR_MISSING_TENSOR, "tensor '%s' is missing",
                                          slot_names[s]);
    if (t->ndim != 2 || t->shape[0] == 0 || t->shape[1] == 0) {
        char got[96];
        fmt_shape(t, got, sizeof got);
        return attn__set_error(err, ATTN_ERR_SHAPE, "%s is %s, expected a non-empty matrix",
                               slot_names[s], got);
    }
    if (t->shape[0] > INT_MAX || t->shape[1] > INT_MAX)
        return attn__set_error(err, ATTN_ERR_LIMIT, "%s is too large", slot_names[s]);
    *rows = t->shape[0];
    *cols = t->shape[1];
    return ATTN_OK;
}

static attn_status not_divisible(const char *what, size_t n, int h, attn_error *err)
{
    return attn__set_error(err, ATTN_ERR_SHAPE,
                           "%s %zu is not divisible by num_heads %d; pass heads=N with N dividing %zu",
                           what, n, h, n);
}

#define TRY(expr)                                                                  \
    do {                                                                           \
        attn_status try_st_ = (expr);                                              \
        if (try_st_ != ATTN_OK) return try_st_;                                    \
    } while (0)

/* PyTorch names: in_proj_weight [3E, E] or q/k/v_proj_weight [E,E]/[E,kdim]/[E,vdim];
 * in_proj_bias [3E]; out_proj.weight [E, E]; out_proj.bias [E]. */
static attn_status shapes_pytorch(const loader *ld, attn_layer_desc *d, attn_error *err)
{
    size_t e, rows, cols, kdim, vdim;
    if (ld->t[PT_IN_W] != NULL) {
        if (ld->t[PT_Q_W] || ld->t[PT_K_W] || ld->t[PT_V_W])
            return attn__set_error(err, ATTN_ERR_FORMAT,
                                   "file has both in_proj_weight and q/k/v_proj_weight");
        TRY(matrix_dims(ld, PT_IN_W, &rows, &cols, err));
        e = kdim = vdim = cols;
        TRY(want(ld, PT_IN_W, 1, 3 * e, (long)e, "[3*E, E]", err));
    } else {
        if (!ld->t[PT_Q_W] && !ld->t[PT_K_W] && !ld->t[PT_V_W])
            return attn__set_error(err, ATTN_ERR_MISSING_TENSOR,
                                   "tensor 'in_proj_weight' (or q_proj_weight, k_proj_weight, "
                                   "v_proj_weight) is missing");
        TRY(matrix_dims(ld, PT_Q_W, &e, &cols, err));
        TRY(want(ld, PT_Q_W, 1, e, (long)e, "[E, E]", err));
        TRY(matrix_dims(ld, PT_K_W, &rows, &kdim, err));
        TRY(want(ld, PT_K_W, 1, e, (long)kdim, "[E, kdim]", err));
        TRY(matrix_dims(ld, PT_V_W, &rows, &vdim, err));
        TRY(want(ld, PT_V_W, 1, e, (long)vdim, "[E, vdim]", err));
    }
    if (e > INT_MAX / 3) return attn__set_error(err, ATTN_ERR_LIMIT, "embed_dim %zu is too large", e);
    TRY(want(ld, PT_IN_B, 0, 3 * e, -1, "[3*E]", err));
    TRY(want(ld, PT_OUT_W, 1, e, (long)e, "[E, E]", err));
    TRY(want(ld, PT_OUT_B, 0, e, -1, "[E]", err));
    if (e % (size_t)ld->heads != 0) return not_divisible("embed_dim", e, ld->heads, err);

    d->num_heads = ld->heads;
    d->head_dim_k = d->head_dim_v = (int)(e / (size_t)ld->heads);
    d->embed_q = d->embed_out = (int)e;
    d->embed_k = (int)kdim;
    d->embed_v = (int)vdim;
    return ATTN_OK;
}

/* Explicit names: q_proj.weight [h*d_k, E_q], k_proj.weight [h*d_k, E_k],
 * v_proj.weight [h*d_v, E_v], o_proj.weight [E_out, h*d_v] (optional), biases to match. */
static attn_status shapes_explicit(const loader *ld, attn_layer_desc *d, attn_error *err)
{
    size_t qk, eq, rows, ek, v, ev, eout = 0;
    TRY(matrix_dims(ld, EX_Q_W, &qk, &eq, err));
    TRY(matrix_dims(ld, EX_K_W, &rows, &ek, err));
    TRY(want(ld, EX_K_W, 1, qk, (long)ek, "[h*d_k, E_k]", err));
    TRY(matrix_dims(ld, EX_V_W, &v, &ev, err));
    if (ld->t[EX_O_W] != NULL) {
        TRY(matrix_dims(ld, EX_O_W, &eout, &rows, err));
        TRY(want(ld, EX_O_W, 1, eout, (long)v, "[E_out, h*d_v]", err));
    } else if (ld->t[EX_O_B] != NULL) {
        return attn__set_error(err, ATTN_ERR_MISSING_TENSOR,
                               "tensor 'o_proj.weight' is missing (o_proj.bias needs it)");
    }
    TRY(want(ld, EX_Q_B, 0, qk, -1, "[h*d_k]", err));
    TRY(want(ld, EX_K_B, 0, qk, -1, "[h*d_k]", err));
    TRY(want(ld, EX_V_B, 0, v, -1, "[h*d_v]", err));
    TRY(want(ld, EX_O_B, 0, eout, -1, "[E_out]", err));
    if (qk % (size_t)ld->heads != 0) return not_divisible("q_proj.weight rows", qk, ld->heads, err);
    if (v % (size_t)ld->heads != 0) return not_divisible("v_proj.weight rows", v, ld->heads, err);

    d->num_heads = ld->heads;
    d->head_dim_k = (int)(qk / (size_t)ld->heads);
    d->head_dim_v = (int)(v / (size_t)ld->heads);
    d->embed_q = (int)eq;
    d->embed_k = (int)ek;
    d->embed_v = (int)ev;
    d->embed_out = ld->t[EX_O_W] ? (int)eout : (int)v;
    return ATTN_OK;
}

/* Converts every present tensor to float32 (ld->f[s], owned by ld) and rejects
 * non-finite weights. Writes the common dtype ("F32", ..., or "mixed") to dtype. */
static attn_status convert_all(loader *ld, char dtype[8], attn_error *err)
{
    dtype[0] = '\0';
    for (int s = 0; s < N_SLOTS; s++) {
        const attn__st_tensor *t = ld->t[s];
        if (t == NULL) continue;
        ld->f[s] = malloc(t->numel ? t->numel * sizeof(float) : 1);
        if (ld->f[s] == NULL)
            return attn__set_error(err, ATTN_ERR_NOMEM, "cannot allocate %s (%zu floats)",
                                   slot_names[s], t->numel);
        TRY(attn__st_to_f32(t, ld->f[s], err));
        for (size_t i = 0; i < t->numel; i++) {
            if (isfinite(ld->f[s][i])) continue;
            size_t cols = t->ndim == 2 ? t->shape[1] : 1;
            if (t->ndim == 2)
                return attn__set_error(err, ATTN_ERR_NONFINITE, "%s[%zu][%zu] is not finite (%s)",
                                       slot_names[s], i / cols, i % cols,
                                       isnan(ld->f[s][i]) ? "nan" : "inf");
            return attn__set_error(err, ATTN_ERR_NONFINITE, "%s[%zu] is not finite (%s)",
                                   slot_names[s], i, isnan(ld->f[s][i]) ? "nan" : "inf");
        }
        const char *name = attn__st_dtype_name(t->dtype);
        if (dtype[0] == '\0') snprintf(dtype, 8, "%s", name);
        else if (strcmp(dtype, name) != 0) snprintf(dtype, 8, "mixed");
    }
    return ATTN_OK;
}

static int uses_pytorch_names(const loader *ld)
{
    for (int s = 0; s < FIRST_EX; s++)
        if (ld->t[s] != NULL) return 1;
    return 0;
}

/* Points the desc at the converted weights (borrowed from ld). */
static void fill_pointers(const loader *ld, attn_layer_desc *d)
{
    if (uses_pytorch_names(ld)) {
        size_t e = (size_t)d->embed_q;
        if (ld->f[PT_IN_W]) {
            d->w_q = ld->f[PT_IN_W];
            d->w_k = ld->f[PT_IN_W] + e * e;
            d->w_v = ld->f[PT_IN_W] + 2 * e * e;
        } else {
            d->w_q = ld->f[PT_Q_W];
            d->w_k = ld->f[PT_K_W];
            d->w_v = ld->f[PT_V_W];
        }
        if (ld->f[PT_IN_B]) {
            d->b_q = ld->f[PT_IN_B];
            d->b_k = ld->f[PT_IN_B] + e;
            d->b_v = ld->f[PT_IN_B] + 2 * e;
        }
        d->w_o = ld->f[PT_OUT_W];
        d->b_o = ld->f[PT_OUT_B];
    } else {
        d->w_q = ld->f[EX_Q_W];
        d->w_k = ld->f[EX_K_W];
        d->w_v = ld->f[EX_V_W];
        d->w_o = ld->f[EX_O_W];
        d->b_q = ld->f[EX_Q_B];
        d->b_k = ld->f[EX_K_B];
        d->b_v = ld->f[EX_V_B];
        d->b_o = ld->f[EX_O_B];
    }
}

static attn_status build_layer(const attn__st_file *file, int num_heads, attn_layer **out,
                               attn_error *err)
{
    loader ld = {.file = file};
    attn_layer_desc d = {0};
    char dtype[8];
    attn_status st = assign_slots(&ld, err);
    if (st == ATTN_OK) st = resolve_heads(&ld, num_heads, err);
    if (st == ATTN_OK)
        st = uses_pytorch_names(&ld) ? shapes_pytorch(&ld, &d, err) : shapes_explicit(&ld, &d, err);
    if (st == ATTN_OK) st = convert_all(&ld, dtype, err);
    if (st == ATTN_OK) {
        fill_pointers(&ld, &d);
        st = attn_layer_create(&d, out, err);
    }
    if (st == ATTN_OK) attn__layer_set_source_dtype(*out, dtype);
    for (int s = 0; s < N_SLOTS; s++) free(ld.f[s]);
    return st;
}

attn_status attn_layer_load_safetensors_mem(const void *data, size_t len, int num_heads,
                                            attn_layer **out, attn_error *err)
{
    if (out == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    attn__st_file f;
    attn_status st = attn__st_parse(data, len, &f, err);
    if (st != ATTN_OK) return st;
    st = build_layer(&f, num_heads, out, err);
    attn__st_free(&f);
    return st;
}

attn_status attn_layer_load_safetensors(const char *path, int num_heads, attn_layer **out,
                                        attn_error *err)
{
    if (out == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (path == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "path is NULL");
    attn__st_file f;
    attn_status st = attn__st_read_file(path, &f, err);
    if (st != ATTN_OK) return st;
    st = build_layer(&f, num_heads, out, err);
    attn__st_free(&f);
    return st;
}
