/* status.c — status codes as text (descriptions and enumerator names), and the one helper every library file uses
 * to report an error (code + message naming the field that is wrong).
 */
#include "layer_internal.h"

#include <stdarg.h>
#include <stdio.h>

const char *attn_strerror(attn_status status)
{
    switch (status) {
    case ATTN_OK: return "success";
    case ATTN_ERR_INVALID_ARG: return "invalid argument";
    case ATTN_ERR_SHAPE: return "shape mismatch";
    case ATTN_ERR_NONFINITE: return "non-finite value in input";
    case ATTN_ERR_NOMEM: return "out of memory";
    case ATTN_ERR_IO: return "I/O error";
    case ATTN_ERR_FORMAT: return "malformed safetensors file";
    case ATTN_ERR_MISSING_TENSOR: return "missing tensor";
    case ATTN_ERR_DTYPE: return "unsupported or inconsistent dtype";
    case ATTN_ERR_LIMIT: return "size limit exceeded";
    case ATTN_ERR_INTERNAL: return "internal error";
    case ATTN_ERR_UNSUPPORTED: return "not supported";
    }
    return "unknown status";
}

/* Each case returns the constant's own spelling, so a name cannot drift from
 * its enumerator; -Wswitch (in -Wall, -Werror) fails the build when a new
 * status is appended without a case here. */
#define ATTN__STATUS_NAME(c) \
    case c: return #c
const char *attn_status_name(attn_status status)
{
    switch (status) {
        ATTN__STATUS_NAME(ATTN_OK);
        ATTN__STATUS_NAME(ATTN_ERR_INVALID_ARG);
        ATTN__STATUS_NAME(ATTN_ERR_SHAPE);
        ATTN__STATUS_NAME(ATTN_ERR_NONFINITE);
        ATTN__STATUS_NAME(ATTN_ERR_NOMEM);
        ATTN__STATUS_NAME(ATTN_ERR_IO);
        ATTN__STATUS_NAME(ATTN_ERR_FORMAT);
        ATTN__STATUS_NAME(ATTN_ERR_MISSING_TENSOR);
        ATTN__STATUS_NAME(ATTN_ERR_DTYPE);
        ATTN__STATUS_NAME(ATTN_ERR_LIMIT);
        ATTN__STATUS_NAME(ATTN_ERR_INTERNAL);
        ATTN__STATUS_NAME(ATTN_ERR_UNSUPPORTED);
    }
    return "ATTN_UNKNOWN";
}
#undef ATTN__STATUS_NAME

attn_status attn__set_error(attn_error *err, attn_status code, const char *fmt, ...)
{
    if (err == NULL) return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    if (n < 0) err->message[0] = '\0';
    return code;
}
