/* request.c — the small helpers every server module shares: freeing a
 * request, filling an HTTP error, the monotonic clock.
 */
#include "request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void attnd_request_free(attnd_request *req)
{
    if (!req)
        return;
    /* The codec places the request itself at the start of its storage block
     * (one allocation). A request built by hand (tests) may own a separate
     * storage block, or none. */
    if (req->storage != (void *)req)
        free(req->storage);
    free(req);
}

attnd_http_error *attnd_http_error_set(attnd_http_error *e, int status, const char *code,
                                       const char *field, const char *fmt, ...)
{
    if (!e)
        return e;
    e->status = status;
    snprintf(e->code, sizeof e->code, "%s", code ? code : "internal");
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return e;
}

int64_t attnd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
