/* sbuf.c — the growing text buffer of sbuf.h. */
#include "sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        abort();
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            abort();
        b->p = p;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sb_matrix(sbuf *b, const float *m, int rows, int cols)
{
    sb_printf(b, "[");
    for (int r = 0; r < rows; r++) {
        sb_printf(b, "%s[", r ? "," : "");
        for (int c = 0; c < cols; c++)
            sb_printf(b, "%s%.9g", c ? "," : "", m[(size_t)r * cols + c]);
        sb_printf(b, "]");
    }
    sb_printf(b, "]");
}

double sb_value(int seed, int row, int col)
{
    unsigned h = (unsigned)seed * 2654435761u ^ (unsigned)row * 2246822519u ^ (unsigned)col * 3266489917u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return (double)(h % 4000) / 1000.0 - 2.0;
}

void sb_rows(sbuf *b, int seed, int from, int n, int cols)
{
    sb_printf(b, "[");
    for (int i = from; i < from + n; i++) {
        sb_printf(b, "%s[", i > from ? "," : "");
        for (int j = 0; j < cols; j++) sb_printf(b, "%s%.3f", j ? "," : "", sb_value(seed, i, j));
        sb_printf(b, "]");
    }
    sb_printf(b, "]");
}
