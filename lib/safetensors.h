/* safetensors.h — library-internal reader for the safetensors container: a file
 * parsed in memory, or opened header-only with single tensors read by pread.
 * (The layer loaders built on it are in checkpoint.c.)
 *
 * File layout: u64 little-endian header length N | N bytes of JSON header | data.
 * The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]}
 * (offsets relative to the start of the data) plus an optional "__metadata__"
 * object of string values. attn__st_parse validates all of it before returning:
 * afterwards every tensor's bytes lie inside the buffer, do not overlap another
 * tensor, and have exactly shape-product * dtype-size bytes. Gaps between tensors
 * and trailing bytes are tolerated (never read); the header may end in spaces.
 *
 * Error codes (each message names the tensor / offset / field):
 *   ATTN_ERR_FORMAT   shorter than 8 bytes, header length past the end, header not
 *                     JSON or not an object, a field missing or of the wrong type,
 *                     offsets reversed / outside the data / overlapping, bad metadata
 *   ATTN_ERR_LIMIT    header over ATTN__ST_MAX_HEADER, more than ATTN__ST_MAX_DIMS
 *                     dimensions, a size computation that would overflow
 *   ATTN_ERR_DTYPE    dtype string not a safetensors dtype, or end - begin differs
 *                     from shape-product * dtype-size
 *   ATTN_ERR_NOMEM    allocation failed
 *   ATTN_ERR_IO       (attn__st_read_file, attn__st_open, attn__st_read_f32) the
 *                     file could not be opened or read, or is not a regular file
 *                     (never blocks: FIFOs are opened O_NONBLOCK and refused)
 */
#ifndef ATTN_SAFETENSORS_H
#define ATTN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

#define ATTN__ST_MAX_HEADER ((uint64_t)100 * 1024 * 1024) /* bytes of JSON header */
#define ATTN__ST_MAX_DIMS 8

/* All dtypes of the safetensors format; only F32/F16/BF16 can hold weights. */
typedef enum attn__st_dtype {
    ATTN__ST_BOOL, ATTN__ST_U8, ATTN__ST_I8, ATTN__ST_U16, ATTN__ST_I16,
    ATTN__ST_F16, ATTN__ST_BF16, ATTN__ST_U32, ATTN__ST_I32, ATTN__ST_F32,
    ATTN__ST_U64, ATTN__ST_I64, ATTN__ST_F64, ATTN__ST_F8_E4M3, ATTN__ST_F8_E5M2
} attn__st_dtype;

typedef struct attn__st_tensor {
    char *name;              /* owned by the attn__st_file */
    attn__st_dtype dtype;
    int ndim;                /* 0 (scalar) .. ATTN__ST_MAX_DIMS */
    size_t shape[ATTN__ST_MAX_DIMS];
    size_t numel;            /* product of shape (1 for a scalar) */
    const uint8_t *data;     /* numel * dtype size bytes, little-endian, unaligned;
                                NULL when the file was opened header-only */
    size_t nbytes;
    uint64_t offset;         /* of the bytes, from the start of the data section */
} attn__st_tensor;

typedef struct attn__st_meta {
    char *key, *value; /* owned by the attn__st_file */
} attn__st_meta;

typedef struct attn__st_file {
    attn__st_tensor *tensors; /* in header order */
    size_t n_tensors;
    attn__st_meta *meta;      /* __metadata__ entries, in header order */
    size_t n_meta;
    void *owned;              /* file bytes when read by attn__st_read_file, else NULL */
    uint64_t data_start;      /* file offset of the data section (8 + header length) */
    int fd, has_fd;           /* attn__st_open: the open file (fd valid iff has_fd) */
    char *path;               /* attn__st_open: the path, for messages; else NULL */
    uint64_t bytes_read;      /* bytes read from the file so far: all of it for
                                 attn__st_read_file; 8 + header, then each
                                 attn__st_read_f32, for attn__st_open */
} attn__st_file;

/* Parses and validates bytes[0..len). Tensors point INTO bytes, which must outlive
 * *out (the caller keeps ownership). On success *out must be released with
 * attn__st_free; on failure *out is zeroed, nothing is allocated, err is filled. */
attn_status attn__st_parse(const void *bytes, size_t len, attn__st_file *out,
                           attn_error *err);

/* Reads a whole file and parses it; *out owns the bytes (freed by attn__st_free).
 * Failure as for attn__st_parse, plus ATTN_ERR_IO naming the path. */
attn_status attn__st_read_file(const char *path, attn__st_file *out, attn_error *err);

/* Opens path and reads ONLY its 8-byte length and JSON header (validated as by
 * attn__st_parse against the file's size); tensors have data == NULL and are read
 * one at a time with attn__st_read_f32, so a multi-GB file costs its header.
 * On success *out holds the open file (attn__st_free closes it); on failure *out
 * is zeroed, nothing is open, err is filled (ATTN_ERR_IO naming the path). */
attn_status attn__st_open(const char *path, attn__st_file *out, attn_error *err);

/* Converts tensor t of f (F32, F16 or BF16) to float32 in dst (t->numel floats):
 * from memory when t->data is set, else by one pread of exactly t->nbytes at its
 * offset (added to f->bytes_read). Other dtypes: ATTN_ERR_DTYPE; a failed or
 * short read: ATTN_ERR_IO naming the file. Does not check finiteness. */
attn_status attn__st_read_f32(attn__st_file *f, const attn__st_tensor *t, float *dst,
                              attn_error *err);

/* Releases what *f owns (closing its file, if open) and zeroes it. NULL and zeroed files are allowed. */
void attn__st_free(attn__st_file *f);

/* Returns the tensor called name, or NULL. Borrowed from f. */
const attn__st_tensor *attn__st_find(const attn__st_file *f, const char *name);

/* Returns the __metadata__ value for key, or NULL. Borrowed from f. */
const char *attn__st_meta_get(const attn__st_file *f, const char *key);

/* "F32", "BF16", ...; never NULL. */
const char *attn__st_dtype_name(attn__st_dtype dtype);
size_t attn__st_dtype_size(attn__st_dtype dtype);

/* Converts an F32, F16 or BF16 tensor to float32 in dst (t->numel floats, caller
 * owned). Other dtypes: ATTN_ERR_DTYPE. Writes dst in full either way; does not
 * check finiteness. */
attn_status attn__st_to_f32(const attn__st_tensor *t, float *dst, attn_error *err);

#endif
