/* log.h — one-line, levelled, timestamped log records on stderr for attnd,
 * as text or as one JSON object a line (--log-format), and the escaping and
 * timestamps the access log (access_log.h) shares with them.
 * Thread-safe: each record is formatted in full and written with one write(2).
 */
#ifndef ATTND_LOG_H
#define ATTND_LOG_H

#include <stddef.h>

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

/* attnd_log for a record about one request: the request id (NULL or "" =
 * none) follows the level in text ("... WARN  [3f9a0c] POST /v1/... -> 400")
 * and is the "request_id" member in JSON. */
void attnd_log_req(attnd_log_level level, const char *request_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef enum attnd_log_format {
    ATTND_LOG_TEXT = 0,        /* "TIME LEVEL message"                                */
    ATTND_LOG_JSON = 1         /* {"time":..,"level":..,"request_id":..,"msg":..}      */
} attnd_log_format;

/* Default: ATTND_LOG_TEXT. Thread-safe. */
void attnd_log_set_format(attnd_log_format f);
attnd_log_format attnd_log_get_format(void);

/* "text" or "json". Returns 0 and *out, or -1. */
int attnd_log_format_parse(const char *s, attnd_log_format *out);

/* The current UTC time as "2026-11-30T13:25:29.123Z" into buf (cap >= 32).
 * Returns its length. */
size_t attnd_log_timestamp(char *buf, size_t cap);

/* Copies text[0..n) into out (cap bytes), escaped so that it can neither end
 * the record nor reach a terminal raw. Text: control bytes (and with
 * escape_space, ' ' too, for space-separated fields) as \xNN. JSON: the body
 * of a JSON string: '"' and '\\' backslashed, control bytes and bytes over
 * 0x7e as \u00NN (always valid JSON, whatever the bytes). Stops before a
 * character that does not fit whole. Returns the bytes written (no NUL). */
size_t attnd_log_escape(const char *text, size_t n, char *out, size_t cap, int json,
                        int escape_space);

#endif
