/* request.c — the pieces every server module shares about a request: its one
 * allocator (attnd_request_alloc, used by both codecs), freeing it, filling a
 * wire error, the monotonic clock.
 */
#include "core/request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

attnd_request *attnd_request_alloc(int n_seqs, const attnd_request_sizes *sizes,
                                   attnd_request_cursor *cur, attnd_http_error *err)
{
    const size_t a = _Alignof(max_align_t);
    const size_t seqs_off = align_up(sizeof(attnd_request), a);
    /* n_seqs is an int: its seqs cannot overflow a 64-bit size_t */
    const size_t ints_off =
        align_up(seqs_off + (size_t)(n_seqs > 0 ? n_seqs : 0) * sizeof(attn_seq), a);
    size_t ints_bytes, floats_off, floats_bytes, total;
    if (n_seqs < 0 || __builtin_mul_overflow(sizes->n_ints, sizeof(int64_t), &ints_bytes) ||
        __builtin_add_overflow(ints_off, ints_bytes, &floats_off) ||
        __builtin_add_overflow(floats_off, a - 1, &floats_off) ||
        __builtin_mul_overflow(sizes->n_floats, sizeof(float), &floats_bytes) ||
        __builtin_add_overflow(floats_off / a * a, floats_bytes, &total) ||
        __builtin_add_overflow(total, sizes->n_bytes, &total)) {
        attnd_http_fail(err, 413, "limit_exceeded", "", "request too large (size overflows)");
        return NULL;
    }
    floats_off = floats_off / a * a;
    char *block = calloc(1, total);
    if (!block) {
        attnd_http_fail(err, 500, "internal", "", "out of memory (%zu bytes for the request)",
                        total);
        return NULL;
    }
    attnd_request *req = (attnd_request *)(void *)block;
    req->storage = block;
    req->seqs = (attn_seq *)(void *)(block + seqs_off);
    req->n_seqs = n_seqs;
    req->bytes = total;
    req->outcome = ATTND_PENDING;
    cur->ints = (int64_t *)(void *)(block + ints_off);
    cur->floats = (float *)(void *)(block + floats_off);
    cur->bytes = (uint8_t *)(block + floats_off + sizes->n_floats * sizeof(float));
    return req;
}

void attnd_request_free(attnd_request *req)
{
    if (!req)
        return;
    /* attnd_request_alloc places the request at the start of its storage block
     * (one allocation). A request built by hand (tests) may own a separate
     * storage block, or none. */
    if (req->storage != (void *)req)
        free(req->storage);
    free(req);
}

attnd_http_error *attnd_http_error_setv(attnd_http_error *e, int status, const char *code,
                                        const char *field, const char *fmt, va_list ap)
{
    if (!e)
        return e;
    e->status = status;
    snprintf(e->code, sizeof e->code, "%s", code ? code : "internal");
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    return e;
}

attnd_http_error *attnd_http_error_set(attnd_http_error *e, int status, const char *code,
                                       const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    attnd_http_error_setv(e, status, code, field, fmt, ap);
    va_end(ap);
    return e;
}

int attnd_http_fail(attnd_http_error *e, int status, const char *code, const char *field,
                    const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    attnd_http_error_setv(e, status, code, field, fmt, ap);
    va_end(ap);
    return -1;
}

int64_t attnd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
