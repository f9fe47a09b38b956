/* access_log.c — the access log (access_log.h): formatting a line, and the
 * file behind it, swapped under a read-write lock on reopen (writers share
 * the lock; a reopen waits for the writes in progress, then closes the old fd).
 */
#include "http/access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct attnd_access_log {
    char *path;                /* NULL for stdout                              */
    int fd;
    attnd_log_format format;
    pthread_rwlock_t lock;     /* write(2)s read-lock it; a reopen write-locks */
};

static int open_file(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0)
        snprintf(err, errlen, "access log %s: %s", path, strerror(errno));
    return fd;
}

attnd_access_log *attnd_access_log_open(const char *path, attnd_log_format format, char *err,
                                        size_t errlen)
{
    attnd_access_log *a = calloc(1, sizeof *a);
    int to_stdout = strcmp(path, "-") == 0;
    if (!a || (!to_stdout && !(a->path = strdup(path)))) {
        snprintf(err, errlen, "access log: out of memory");
        free(a);
        return NULL;
    }
    a->fd = to_stdout ? STDOUT_FILENO : open_file(path, err, errlen);
    if (a->fd < 0) {
        free(a->path);
        free(a);
        return NULL;
    }
    a->format = format;
    pthread_rwlock_init(&a->lock, NULL);
    return a;
}

int attnd_access_log_reopen(attnd_access_log *a, char *err, size_t errlen)
{
    if (!a || !a->path)
        return 0;
    int fd = open_file(a->path, err, errlen);
    if (fd < 0)
        return -1;
    pthread_rwlock_wrlock(&a->lock);
    int old = a->fd;
    a->fd = fd;
    pthread_rwlock_unlock(&a->lock);
    close(old);
    return 0;
}

/* s escaped for the format; "-" for NULL or "" in text. */
static size_t field(attnd_log_format f, const char *s, char *out, size_t cap)
{
    if ((!s || !*s) && f == ATTND_LOG_TEXT)
        return (size_t)snprintf(out, cap, "-");
    return attnd_log_escape(s ? s : "", s ? strlen(s) : 0, out, cap, f == ATTND_LOG_JSON, 1);
}

size_t attnd_access_log_format(attnd_log_format format, const attnd_access_entry *e, char *buf,
                               size_t cap)
{
    char t[40], rid[300], remote[200], method[64], path[1200], model[200], batch[16];
    int json = format == ATTND_LOG_JSON;
    attnd_log_timestamp(t, sizeof t);
    rid[field(format, e->request_id, rid, sizeof rid - 1)] = '\0';
    remote[field(format, e->remote, remote, sizeof remote - 1)] = '\0';
    method[field(format, e->method, method, sizeof method - 1)] = '\0';
    path[field(format, e->path, path, sizeof path - 1)] = '\0';
    model[field(format, e->model, model, sizeof model - 1)] = '\0';
    snprintf(batch, sizeof batch, "%d", e->batch_size);
    if (!e->batch_size)
        snprintf(batch, sizeof batch, json ? "null" : "-");
    int n;
    if (json)
        n = snprintf(buf, cap,
                     "{\"time\":\"%s\",\"request_id\":\"%s\",\"remote\":\"%s\",\"method\":\"%s\","
                     "\"path\":\"%s\",\"status\":%d,\"bytes_in\":%llu,\"bytes_out\":%llu,"
                     "\"duration_ms\":%.3f,\"model\":%s%s%s,\"batch_size\":%s}\n",
                     t, rid, remote, method, path, e->status, (unsigned long long)e->bytes_in,
                     (unsigned long long)e->bytes_out, e->duration_ms, *model ? "\"" : "",
                     *model ? model : "null", *model ? "\"" : "", batch);
    else
        n = snprintf(buf, cap, "%s %s %s %s %s %d in=%llu out=%llu ms=%.3f model=%s batch=%s\n",
                     t, rid, remote, method, path, e->status, (unsigned long long)e->bytes_in,
                     (unsigned long long)e->bytes_out, e->duration_ms, model, batch);
    if (n < 0)
        return 0;
    if ((size_t)n >= cap) { /* cut, but still one line */
        buf[cap - 2] = '\n';
        return cap - 1;
    }
    return (size_t)n;
}

void attnd_access_log_write(attnd_access_log *a, const attnd_access_entry *e)
{
    if (!a)
        return;
    char line[2560];
    size_t n = attnd_access_log_format(a->format, e, line, sizeof line);
    pthread_rwlock_rdlock(&a->lock);
    ssize_t w = write(a->fd, line, n);
    pthread_rwlock_unlock(&a->lock);
    (void)w; /* nowhere to report a failed log write */
}

void attnd_access_log_close(attnd_access_log *a)
{
    if (!a)
        return;
    if (a->path)
        close(a->fd);
    pthread_rwlock_destroy(&a->lock);
    free(a->path);
    free(a);
}
