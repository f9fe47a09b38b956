/* load_http.h — the libcurl plumbing both runners share (load_runner.c for the stateless
 * levels, load_session.c for --sessions): the growable answer buffer their write callbacks
 * fill, header values, the daemon's base URL, and room for many connections. */
#ifndef ATTND_LOAD_HTTP_H
#define ATTND_LOAD_HTTP_H

#include <stddef.h>

/* Appends n bytes of data to *buf (len, cap; *buf NULL to start), keeping it NUL-terminated
 * and growing it by doubling from 16 KiB, never past max. Returns n (curl's "consumed"), or 0
 * when it would pass max or on no memory: curl then fails the transfer. */
size_t load_http_append(char **buf, size_t *len, size_t *cap, const char *data, size_t n,
                        size_t max);

/* When the header line data[0..n) is `name` (lowercase, with its ':'; matched without case),
 * copies its value (at most cap - 1 bytes, NUL-terminated, untrimmed) to out and returns 1;
 * else returns 0. */
int load_http_header_value(const char *data, size_t n, const char *name, char *out, size_t cap);

/* A copy of url without trailing '/' (caller frees), or NULL on no memory. */
char *load_http_base_url(const char *url);

/* Lifts the soft open-files limit towards the hard one so n connections fit. Best effort. */
void load_http_raise_fd_limit(size_t n);

#endif
