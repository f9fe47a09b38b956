/* jsonbuf.h — a growing buffer for writing JSON text directly (no jansson tree
 * for big float arrays): the one writer both codecs (codec.c, codec_v2.c) print
 * responses with. After an allocation failure every write is a no-op and
 * `failed` is set, so callers check once at the end.
 */
#ifndef ATTND_JSONBUF_H
#define ATTND_JSONBUF_H

#include <stddef.h>

typedef struct attnd_jsonbuf {
    char *p;       /* malloc'd; owned by the buffer until attnd_jb_finish */
    size_t len, cap;
    int failed;
} attnd_jsonbuf;  /* start as {0} */

/* Room for n more bytes. Returns 0, or -1 (and sets failed). */
int attnd_jb_reserve(attnd_jsonbuf *b, size_t n);
void attnd_jb_put(attnd_jsonbuf *b, const void *s, size_t n);
void attnd_jb_puts(attnd_jsonbuf *b, const char *s);
void attnd_jb_putc(attnd_jsonbuf *b, char c);
void attnd_jb_i64(attnd_jsonbuf *b, long long v);
/* Formatted text of at most 255 bytes (longer sets failed). */
void attnd_jb_printf(attnd_jsonbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string literal; invalid UTF-8 bytes become U+FFFD. NULL writes "". */
void attnd_jb_string(attnd_jsonbuf *b, const char *s);
/* [x0,x1,...] with the shortest round-trip float32 printer (jsonnum.h).
 * Returns 0, or -1 (and sets failed) if a value is not finite. */
int attnd_jb_floats(attnd_jsonbuf *b, const float *x, size_t n);

/* Appends a NUL and hands the text to the caller (free() it), with its length
 * without the NUL in *len (len may be NULL). On failure frees the buffer and
 * returns NULL. Either way the buffer is left empty. */
char *attnd_jb_finish(attnd_jsonbuf *b, size_t *len);

#endif
