/* access_log.h — attnd's access log (--access-log PATH|-): one line per
 * answered request, as text or JSON (--log-format), reopened on SIGHUP so
 * logrotate can move the file away. Thread-safe.
 */
#ifndef ATTND_ACCESS_LOG_H
#define ATTND_ACCESS_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "core/log.h"

typedef struct attnd_access_log attnd_access_log;

/* One answered request. Strings are borrowed; model NULL = none. */
typedef struct attnd_access_entry {
    const char *request_id;
    const char *remote;        /* "127.0.0.1", "::1"                         */
    const char *method;
    const char *path;
    int status;
    uint64_t bytes_in;         /* request body bytes received                */
    uint64_t bytes_out;        /* response body bytes                        */
    double duration_ms;        /* headers in to the response queued          */
    const char *model;
    int batch_size;            /* requests in its batch; 0 = not batched     */
} attnd_access_entry;

/* Opens path for appending (created 0640), or stdout for "-". Returns the log,
 * or NULL with err (the path and the reason). Close with attnd_access_log_close. */
attnd_access_log *attnd_access_log_open(const char *path, attnd_log_format format, char *err,
                                        size_t errlen);

/* Opens the path again (a rotated file is left to logrotate) and swaps it in;
 * lines written meanwhile go to the old file or the new one, never lost. On
 * failure the old file stays in use and err says why. stdout is not reopened.
 * Returns 0 or -1. */
int attnd_access_log_reopen(attnd_access_log *a, char *err, size_t errlen);

/* Writes e as one line with one write(2). a NULL = no access log. */
void attnd_access_log_write(attnd_access_log *a, const attnd_access_entry *e);

/* Formats e as the line write would send (with its '\n') into buf (cap >= 256).
 * Returns its length. */
size_t attnd_access_log_format(attnd_log_format format, const attnd_access_entry *e, char *buf,
                               size_t cap);

/* NULL allowed. */
void attnd_access_log_close(attnd_access_log *a);

#endif
