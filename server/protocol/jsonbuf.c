/* jsonbuf.c — the growing JSON text writer shared by the /v1 and /v2 codecs
 * (see jsonbuf.h). */
#include "protocol/jsonbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/jsonnum.h"

int attnd_jb_reserve(attnd_jsonbuf *b, size_t n)
{
    if (b->failed)
        return -1;
    if (b->cap - b->len >= n)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) {
        if (cap > SIZE_MAX / 2) {
            b->failed = 1;
            return -1;
        }
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

void attnd_jb_put(attnd_jsonbuf *b, const void *s, size_t n)
{
    if (attnd_jb_reserve(b, n) == 0) {
        memcpy(b->p + b->len, s, n);
        b->len += n;
    }
}

void attnd_jb_puts(attnd_jsonbuf *b, const char *s) { attnd_jb_put(b, s, strlen(s)); }

void attnd_jb_putc(attnd_jsonbuf *b, char c) { attnd_jb_put(b, &c, 1); }

void attnd_jb_i64(attnd_jsonbuf *b, long long v)
{
    char tmp[24], *p = tmp + sizeof tmp; /* digits from the right; no printf */
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    attnd_jb_put(b, p, (size_t)(tmp + sizeof tmp - p));
}

void attnd_jb_printf(attnd_jsonbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        b->failed = 1;
    else
        attnd_jb_put(b, tmp, (size_t)n);
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 if invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    unsigned cp = c & (0x3fu >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

void attnd_jb_string(attnd_jsonbuf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)(s ? s : "");
    size_t n = strlen((const char *)u);
    attnd_jb_putc(b, '"');
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t l = utf8_seq_len(u + i, n - i);
        if (l == 0) {
            attnd_jb_puts(b, "\\ufffd");
            i++;
        } else if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            attnd_jb_put(b, e, 2);
            i++;
        } else if (c < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            attnd_jb_put(b, e, 6);
            i++;
        } else {
            attnd_jb_put(b, u + i, l);
            i += l;
        }
    }
    attnd_jb_putc(b, '"');
}

int attnd_jb_floats(attnd_jsonbuf *b, const float *x, size_t n)
{
    if (n > (SIZE_MAX - 64) / (ATTND_FLOAT_TEXT_MAX + 1) || attnd_jb_reserve(b, ATTND_FLOATS_TEXT_MAX(n) + 2)) {
        b->failed = 1;
        return -1;
    }
    char *p = b->p + b->len;
    *p++ = '[';
    const ptrdiff_t w = attnd_json_print_floats(x, n, p);
    if (w < 0) {
        b->failed = 1;
        return -1;
    }
    p[w] = ']';
    b->len += (size_t)w + 2;
    return 0;
}

char *attnd_jb_finish(attnd_jsonbuf *b, size_t *len)
{
    attnd_jb_putc(b, '\0');
    char *text = b->p;
    if (b->failed) {
        free(text);
        text = NULL;
    } else if (len) {
        *len = b->len - 1;
    }
    *b = (attnd_jsonbuf){0};
    return text;
}
