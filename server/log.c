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

/* Copies text[0..n) into out (cap bytes, cap >= 5), each control byte (below 0x20, and
 * 0x7f) as \xNN, so a URL or JSON key a client chose can neither forge a line nor
 * send terminal escapes to whoever reads the log. Returns the bytes written. */
static size_t escape_controls(const char *text, size_t n, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)text[i];
        int ctl = ch < 0x20 || ch == 0x7f;
        if (w + (ctl ? 4 : 1) > cap)
            break;
        if (!ctl) {
            out[w++] = (char)ch;
            continue;
        }
        out[w++] = '\\';
        out[w++] = 'x';
        out[w++] = hex[ch >> 4];
        out[w++] = hex[ch & 15];
    }
    return w;
}

void attnd_log(attnd_log_level level, const char *fmt, ...)
{
    if ((unsigned)level > ATTND_LOG_ERROR || !attnd_log_enabled(level))
        return;
    char buf[2048], msg[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(buf + n, sizeof buf - n, ".%03ldZ %s ", ts.tv_nsec / 1000000L,
                          tags[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t mlen = m < 0 ? 0 : (size_t)m < sizeof msg ? (size_t)m : sizeof msg - 1;
    n += escape_controls(msg, mlen, buf + n, sizeof buf - n - 1);
    buf[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, n);
    (void)w; /* nowhere to report a failed log write */
}
