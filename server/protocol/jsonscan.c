/* jsonscan.c — finding non-finite tokens in refused JSON (jsonscan.h). A
 * recursive descent that checks only structure (brackets, strings, colons and
 * commas), keeping the path of the value it is in. */
#include "protocol/jsonscan.h"

#include <stdio.h>
#include <string.h>

#define MAX_DEPTH 256

typedef struct frame {
    const char *key;           /* a member's name (in the text), or NULL       */
    size_t key_len;
    long index;                /* an element's index when key is NULL          */
} frame;

typedef struct scan {
    const char *p, *end;
    frame path[MAX_DEPTH];
    int depth;
} scan;

enum { SCAN_OK = 0, SCAN_FOUND = 1, SCAN_MORE = 2, SCAN_ERROR = -1 };

static void skip_ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* s->p at the opening quote: moves past the closing one. */
static int skip_string(scan *s)
{
    for (s->p++; s->p < s->end; s->p++) {
        if (*s->p == '\\' && s->p + 1 < s->end)
            s->p++;
        else if (*s->p == '"') {
            s->p++;
            return SCAN_OK;
        }
    }
    return SCAN_ERROR;
}

static int is_token_byte(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '+' || ch == '-' || ch == '.';
}

/* A bare token (number, true, false, null, or a non-finite word). */
static int scan_token(scan *s)
{
    static const char *const words[] = {"NaN", "Infinity", "-Infinity", "+Infinity"};
    const char *t = s->p;
    while (s->p < s->end && is_token_byte(*s->p))
        s->p++;
    size_t n = (size_t)(s->p - t);
    if (n == 0)
        return SCAN_ERROR;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strlen(words[i]) == n && memcmp(words[i], t, n) == 0) {
            s->p = t; /* left at the token: its offset is the answer */
            return SCAN_FOUND;
        }
    return SCAN_OK;
}

static int scan_value(scan *s);

/* One level deeper for a member (key) or an element (index). */
static int scan_child(scan *s, const char *key, size_t key_len, long index)
{
    if (s->depth >= MAX_DEPTH)
        return SCAN_ERROR;
    s->path[s->depth++] = (frame){key, key_len, index};
    int rc = scan_value(s);
    if (rc != SCAN_FOUND)
        s->depth--;
    return rc;
}

/* At '{' or '[': moves past it; 1 when the container is empty (and moves past
 * its close too), else 0. */
static int opens_empty(scan *s, char close)
{
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 1;
    }
    return 0;
}

/* After a member or an element: SCAN_MORE at ',' (another follows), SCAN_OK at the
 * container's close, else SCAN_ERROR; moves past what it found. */
static int next_item(scan *s, char close)
{
    skip_ws(s);
    if (s->p >= s->end || (*s->p != ',' && *s->p != close))
        return SCAN_ERROR;
    return *s->p++ == ',' ? SCAN_MORE : SCAN_OK;
}

static int scan_object(scan *s)
{
    if (opens_empty(s, '}'))
        return SCAN_OK;
    for (int more = SCAN_MORE; more == SCAN_MORE;) {
        skip_ws(s);
        if (s->p >= s->end || *s->p != '"')
            return SCAN_ERROR;
        const char *key = s->p + 1;
        if (skip_string(s) != SCAN_OK)
            return SCAN_ERROR;
        size_t key_len = (size_t)(s->p - 1 - key);
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':')
            return SCAN_ERROR;
        s->p++;
        int rc = scan_child(s, key, key_len, 0);
        if (rc != SCAN_OK)
            return rc;
        more = next_item(s, '}');
        if (more == SCAN_ERROR)
            return SCAN_ERROR;
    }
    return SCAN_OK;
}

static int scan_array(scan *s)
{
    if (opens_empty(s, ']'))
        return SCAN_OK;
    for (long i = 0, more = SCAN_MORE; more == SCAN_MORE; i++) {
        int rc = scan_child(s, NULL, 0, i);
        if (rc != SCAN_OK)
            return rc;
        more = next_item(s, ']');
        if (more == SCAN_ERROR)
            return SCAN_ERROR;
    }
    return SCAN_OK;
}

static int scan_value(scan *s)
{
    skip_ws(s);
    if (s->p >= s->end)
        return SCAN_ERROR;
    switch (*s->p) {
    case '{': return scan_object(s);
    case '[': return scan_array(s);
    case '"': return skip_string(s);
    default: return scan_token(s);
    }
}

static void format_path(const scan *s, char *field, size_t cap)
{
    size_t n = 0;
    field[0] = '\0';
    for (int i = 0; i < s->depth && n < cap; i++) {
        const frame *f = &s->path[i];
        int w = f->key ? snprintf(field + n, cap - n, "%s%.*s", i ? "." : "",
                                  (int)(f->key_len > 64 ? 64 : f->key_len), f->key)
                       : snprintf(field + n, cap - n, "[%ld]", f->index);
        if (w < 0)
            break;
        n += (size_t)w;
    }
}

long attnd_json_find_nonfinite(const char *text, size_t len, char *field, size_t cap)
{
    scan s = {.p = text, .end = text + len, .depth = 0};
    if (cap)
        field[0] = '\0';
    if (scan_value(&s) != SCAN_FOUND)
        return -1;
    if (cap)
        format_path(&s, field, cap);
    return (long)(s.p - text);
}

int attnd_json_nonfinite_error(const char *text, size_t len, long error_byte,
                               attnd_http_error *err)
{
    char field[sizeof err->field];
    long at = attnd_json_find_nonfinite(text, len, field, sizeof field);
    if (at < 0 || at > error_byte)
        return 0;
    size_t n = 0; /* the token's length, within len: text need not end in NUL */
    while ((size_t)at + n < len && n < 9 && strchr("+-NaInfity", text[at + n]) && text[at + n] != '\0') n++;
    return attnd_http_fail(err, 400, "non_finite", field,
                           "%.*s at byte %ld is not a JSON number (Python's json.dumps writes it "
                           "for a non-finite float): every value must be finite",
                           (int)n, text + at, at);
}
