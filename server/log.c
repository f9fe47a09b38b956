/* log.c — levelled log records on stderr, one write(2) per record. */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static atomic_int min_level = ATTND_LOG_INFO;

static const char *const names[] = {"debug", "info", "warn", "error"};
static const char *const tags[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};

void attnd_log_set_level(attnd_log_level level) { atomic_store(&min_level, (int)level); }

int attnd_log_enabled(attnd_log_level level) { return (int)level >= atomic_load(&min_level); }

int attnd_log_level_parse(const char *s, attnd_log_level *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, names[i]) == 0) {
            *out = (attnd_log_level)i;
            return 0;
        }
    }
    if (strcasecmp(s, "warning") == 0) {
        *out = ATTND_LOG_WARN;
        return 0;
    }
    return -1;
}

const char *attnd_log_level_name(attnd_log_level level)
{
    return (unsigned)level < 4 ? names[level] : "?";
}

void attnd_log(attnd_log_level level, const char *fmt, ...)
{
    if ((unsigned)level > ATTND_LOG_ERROR || !attnd_log_enabled(level))
        return;
    char buf[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(buf + n, sizeof buf - n, ".%03ldZ %s ", ts.tv_nsec / 1000000L,
                          tags[level]);
    size_t head = n;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += (size_t)m < sizeof buf - n - 1 ? (size_t)m : sizeof buf - n - 2;
    for (size_t i = head; i < n; i++)
        if (buf[i] == '\n' || buf[i] == '\r')
            buf[i] = ' ';
    buf[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, n);
    (void)w; /* nowhere to report a failed log write */
}
