/* log.c — levelled log records on stderr (text or JSON lines), one write(2)
 * per record, and the escaping the access log shares. */
#include "core/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
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

static atomic_int log_format = ATTND_LOG_TEXT;

void attnd_log_set_format(attnd_log_format f) { atomic_store(&log_format, (int)f); }

attnd_log_format attnd_log_get_format(void) { return (attnd_log_format)atomic_load(&log_format); }

int attnd_log_format_parse(const char *s, attnd_log_format *out)
{
    if (strcasecmp(s, "text") == 0 || strcasecmp(s, "json") == 0) {
        *out = strcasecmp(s, "json") == 0 ? ATTND_LOG_JSON : ATTND_LOG_TEXT;
        return 0;
    }
    return -1;
}

size_t attnd_log_timestamp(char *buf, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    int m = snprintf(buf + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000L);
    return m > 0 && (size_t)m < cap - n ? n + (size_t)m : n;
}

/* How byte ch is written: NULL when as it is, else its escape into esc. */
static const char *escape_of(unsigned char ch, int json, int escape_space, char esc[8])
{
    static const char hex[] = "0123456789abcdef";
    int ctl = ch < 0x20 || ch == 0x7f || (escape_space && ch == ' ');
    if (json && (ch == '"' || ch == '\\')) {
        esc[0] = '\\', esc[1] = (char)ch, esc[2] = '\0';
        return esc;
    }
    if (!ctl && !(json && ch > 0x7e))
        return NULL;
    snprintf(esc, 8, json ? "\\u00%c%c" : "\\x%c%c", hex[ch >> 4], hex[ch & 15]);
    return esc;
}

/* A URL or JSON key a client chose can neither forge a line nor send terminal
 * escapes to whoever reads the log. */
size_t attnd_log_escape(const char *text, size_t n, char *out, size_t cap, int json,
                        int escape_space)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        char esc[8];
        const char *e = escape_of((unsigned char)text[i], json, escape_space, esc);
        size_t k = e ? strlen(e) : 1;
        if (w + k > cap)
            break;
        if (e)
            memcpy(out + w, e, k);
        else
            out[w] = text[i];
        w += k;
    }
    return w;
}

/* Appends s (NUL-terminated) to buf at *n when it fits. */
static void put(char *buf, size_t cap, size_t *n, const char *s)
{
    size_t k = strlen(s);
    if (*n + k < cap) {
        memcpy(buf + *n, s, k);
        *n += k;
    }
}

static void log_record(attnd_log_level level, const char *rid, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void log_record(attnd_log_level level, const char *rid, const char *fmt, va_list ap)
{
    if ((unsigned)level > ATTND_LOG_ERROR || !attnd_log_enabled(level))
        return;
    char buf[4096], msg[2048];
    int json = attnd_log_get_format() == ATTND_LOG_JSON;
    size_t n = 0;
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    size_t mlen = m < 0 ? 0 : (size_t)m < sizeof msg ? (size_t)m : sizeof msg - 1;
    rid = rid && *rid ? rid : NULL;
    put(buf, sizeof buf, &n, json ? "{\"time\":\"" : "");
    n += attnd_log_timestamp(buf + n, sizeof buf - n);
    if (json) {
        put(buf, sizeof buf, &n, "\",\"level\":\"");
        put(buf, sizeof buf, &n, names[level]);
        put(buf, sizeof buf, &n, "\"");
    } else {
        put(buf, sizeof buf, &n, " ");
        put(buf, sizeof buf, &n, tags[level]);
    }
    if (rid) { /* validated ids (reqid.h) need no escaping; escaped anyway */
        put(buf, sizeof buf, &n, json ? ",\"request_id\":\"" : " [");
        n += attnd_log_escape(rid, strlen(rid), buf + n, 200, json, 1);
        put(buf, sizeof buf, &n, json ? "\"" : "]");
    }
    put(buf, sizeof buf, &n, json ? ",\"msg\":\"" : " ");
    n += attnd_log_escape(msg, mlen, buf + n, sizeof buf - n - 4, json, 0);
    put(buf, sizeof buf, &n, json ? "\"}\n" : "\n");
    ssize_t w = write(STDERR_FILENO, buf, n);
    (void)w; /* nowhere to report a failed log write */
}

void attnd_log(attnd_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_record(level, NULL, fmt, ap);
    va_end(ap);
}

void attnd_log_req(attnd_log_level level, const char *request_id, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_record(level, request_id, fmt, ap);
    va_end(ap);
}
