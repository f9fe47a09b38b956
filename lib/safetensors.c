/* safetensors.c — the safetensors container reader (validated, see safetensors.h):
 * a whole file parsed in memory (attn__st_parse, attn__st_read_file), or a file
 * opened header-only whose tensors are then read one by one with pread
 * (attn__st_open, attn__st_read_f32), so loading one layer of a multi-GB
 * checkpoint reads that layer's bytes and nothing else (STYLE rule 18).
 * Files are read with pread(2), never mmap'ed: a file truncated by someone else
 * while mapped would raise SIGBUS, and the weights are copied (converted to
 * float32) anyway. Opening never blocks: O_NONBLOCK, and anything but a regular
 * file is refused.
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
    if (f->has_fd) close(f->fd);
    free(f->path);
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
    t->data = data != NULL ? data + b : NULL;
    t->offset = b;
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

/* Checks the 8-byte length against the file size and the cap. */
static attn_status check_header_length(uint64_t hlen, uint64_t len, attn_error *err)
{
    if (hlen > len - 8)
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "header length %llu exceeds the %llu bytes after it",
                               (unsigned long long)hlen, (unsigned long long)(len - 8));
    if (hlen > ATTN__ST_MAX_HEADER)
        return attn__set_error(err, ATTN_ERR_LIMIT, "header length %llu exceeds the %llu-byte cap",
                               (unsigned long long)hlen, (unsigned long long)ATTN__ST_MAX_HEADER);
    return ATTN_OK;
}

/* Parses the JSON header text[0..hlen) of a file whose data section is data_len
 * bytes long (at data, or not in memory when data is NULL). out is zeroed first;
 * on failure it is freed again. */
static attn_status parse_header_text(const char *text, size_t hlen, const uint8_t *data,
                                     size_t data_len, attn__st_file *out, attn_error *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return attn__set_error(err, ATTN_ERR_FORMAT, "header is not valid JSON (line %d, column %d): %s",
                               jerr.line, jerr.column, jerr.text);
    attn_status st;
    if (!json_is_object(root))
        st = attn__set_error(err, ATTN_ERR_FORMAT, "header is not a JSON object");
    else
        st = parse_header(root, data, data_len, out, err);
    json_decref(root);
    if (st != ATTN_OK) attn__st_free(out);
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
    attn_status st = check_header_length(hlen, len, err);
    if (st != ATTN_OK) return st;
    st = parse_header_text((const char *)p + 8, (size_t)hlen, p + 8 + hlen, len - 8 - (size_t)hlen,
                           out, err);
    if (st == ATTN_OK) out->data_start = 8 + hlen;
    return st;
}

/* Opens path for reading without ever blocking (a FIFO or a device never is a
 * checkpoint) and checks it is a regular file. Returns the fd, or -1 with err set. */
static int open_regular(const char *path, uint64_t *size, attn_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        attn__set_error(err, ATTN_ERR_IO, "%.160s: not a regular file", path);
        close(fd);
        return -1;
    }
    *size = (uint64_t)sb.st_size;
    return fd;
}

/* Reads exactly n bytes at offset off (pread, EINTR retried). */
static attn_status pread_all(int fd, void *dst, size_t n, uint64_t off, const char *path,
                             attn_error *err)
{
    uint8_t *p = dst;
    for (size_t got = 0; got < n;) {
        ssize_t r = pread(fd, p + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path,
                                   r < 0 ? strerror(errno) : "file shrank while being read");
        got += (size_t)r;
    }
    return ATTN_OK;
}

attn_status attn__st_read_file(const char *path, attn__st_file *out, attn_error *err)
{
    if (out == NULL || path == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "path or out is NULL");
    memset(out, 0, sizeof *out);
    uint8_t *buf = NULL;
    attn_status st;
    uint64_t size64 = 0;
    int fd = open_regular(path, &size64, err);
    if (fd < 0) return err ? err->code : ATTN_ERR_IO;
    if (size64 > SIZE_MAX - 1) {
        st = attn__set_error(err, ATTN_ERR_LIMIT, "%.160s: too large to read", path);
        goto fail;
    }
    size_t size = (size_t)size64;
    buf = malloc(size ? size : 1);
    if (buf == NULL) {
        st = attn__set_error(err, ATTN_ERR_NOMEM, "%.160s: cannot allocate %zu bytes", path, size);
        goto fail;
    }
    st = pread_all(fd, buf, size, 0, path, err);
    if (st != ATTN_OK) goto fail;
    close(fd);
    fd = -1;
    st = attn__st_parse(buf, size, out, err);
    if (st != ATTN_OK) goto fail;
    out->owned = buf;
    out->bytes_read = size;
    return ATTN_OK;
fail:
    if (fd >= 0) close(fd);
    free(buf);
    return st;
}

attn_status attn__st_open(const char *path, attn__st_file *out, attn_error *err)
{
    if (out == NULL || path == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "path or out is NULL");
    memset(out, 0, sizeof *out);
    char *text = NULL;
    attn_status st;
    uint64_t size = 0;
    uint8_t len8[8];
    int fd = open_regular(path, &size, err);
    if (fd < 0) return err ? err->code : ATTN_ERR_IO;
    if (size < 8) {
        st = attn__set_error(err, ATTN_ERR_FORMAT,
                             "file is %llu bytes, shorter than the 8-byte header length",
                             (unsigned long long)size);
        goto fail;
    }
    if ((st = pread_all(fd, len8, 8, 0, path, err)) != ATTN_OK) goto fail;
    uint64_t hlen = load_le64(len8);
    if ((st = check_header_length(hlen, size, err)) != ATTN_OK) goto fail;
    text = malloc((size_t)hlen + 1);
    if (text == NULL) {
        st = attn__set_error(err, ATTN_ERR_NOMEM, "cannot allocate the %llu-byte header",
                             (unsigned long long)hlen);
        goto fail;
    }
    if ((st = pread_all(fd, text, (size_t)hlen, 8, path, err)) != ATTN_OK) goto fail;
    if (size - 8 - hlen > SIZE_MAX) {
        st = attn__set_error(err, ATTN_ERR_LIMIT, "%.160s: too large", path);
        goto fail;
    }
    st = parse_header_text(text, (size_t)hlen, NULL, (size_t)(size - 8 - hlen), out, err);
    if (st != ATTN_OK) goto fail;
    free(text);
    out->fd = fd;
    out->has_fd = 1;
    out->data_start = 8 + hlen;
    out->bytes_read = 8 + hlen;
    out->path = strdup(path);
    if (out->path == NULL) {
        attn__st_free(out);
        return attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
    }
    return ATTN_OK;
fail:
    close(fd);
    free(text);
    return st;
}

attn_status attn__st_read_f32(attn__st_file *f, const attn__st_tensor *t, float *dst,
                              attn_error *err)
{
    if (t->dtype != ATTN__ST_F32 && t->dtype != ATTN__ST_F16 && t->dtype != ATTN__ST_BF16)
        return attn__st_to_f32(t, dst, err); /* names the dtype */
    if (t->data != NULL || t->nbytes == 0) return attn__st_to_f32(t, dst, err);
    if (!f->has_fd)
        return attn__set_error(err, ATTN_ERR_INTERNAL, "tensor '%.64s' has no bytes to read", t->name);
    /* F32 is read straight into dst (and byte-swapped in place on a big-endian
     * host by attn__st_to_f32); F16/BF16 go through a buffer of their own. */
    uint8_t *raw = t->dtype == ATTN__ST_F32 ? (uint8_t *)dst : malloc(t->nbytes);
    if (raw == NULL)
        return attn__set_error(err, ATTN_ERR_NOMEM, "cannot allocate %zu bytes for '%.64s'",
                               t->nbytes, t->name);
    attn_status st = pread_all(f->fd, raw, t->nbytes, f->data_start + t->offset, f->path, err);
    if (st == ATTN_OK) {
        f->bytes_read += t->nbytes;
        attn__st_tensor view = *t;
        view.data = raw;
        st = attn__st_to_f32(&view, dst, err);
    }
    if (raw != (uint8_t *)dst) free(raw);
    return st;
}
