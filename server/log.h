/* log.h — one-line, levelled, timestamped log records on stderr for attnd.
 * Thread-safe: each record is formatted in full and written with one write(2).
 */
#ifndef ATTND_LOG_H
#define ATTND_LOG_H

typedef enum attnd_log_level {
    ATTND_LOG_DEBUG = 0,
    ATTND_LOG_INFO = 1,
    ATTND_LOG_WARN = 2,
    ATTND_LOG_ERROR = 3
} attnd_log_level;

/* Records below level are dropped. Default: ATTND_LOG_INFO. Thread-safe. */
void attnd_log_set_level(attnd_log_level level);
int attnd_log_enabled(attnd_log_level level);

/* "debug"/"info"/"warn"/"error" (also "warning"), case-insensitive.
 * Returns 0 and *out, or -1 when s names no level. */
int attnd_log_level_parse(const char *s, attnd_log_level *out);
const char *attnd_log_level_name(attnd_log_level level);

/* Writes "2026-11-30T13:25:29.123Z INFO  message\n" to stderr. Messages longer
 * than ~2 KiB are truncated; control bytes inside the message (newlines, ESC,
 * ...) are written as \xNN, so text from a request can never start a line of
 * its own or reach a terminal raw. */
void attnd_log(attnd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
