/* sbuf.h — a growing text buffer for tests and benches that build request
 * bodies with printf-style appends. */
#ifndef ATTN_TEST_SBUF_H
#define ATTN_TEST_SBUF_H

#include <stddef.h>

typedef struct sbuf {
    char *p;          /* NUL-terminated once anything was written; free() it */
    size_t len, cap;
} sbuf;               /* start as {0} */

/* Appends formatted text. Aborts on allocation failure: a test cannot go on
 * with a body it did not build. */
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends a rows × cols float matrix as nested JSON arrays ("%.9g": every
 * float32 round-trips). */
void sb_matrix(sbuf *b, const float *m, int rows, int cols);

/* A deterministic number in [-2, 2) with three decimals for (seed, row, col):
 * test inputs that any process can rebuild. */
double sb_value(int seed, int row, int col);

/* Appends rows [from, from + n) of `seed` (sb_value), cols numbers each, as
 * nested JSON arrays ("%.3f": exact in the JSON a daemon parses). */
void sb_rows(sbuf *b, int seed, int from, int n, int cols);

#endif
