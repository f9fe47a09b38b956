/* cors.h — cross-origin access for browser apps (--cors-origin): which Origin
 * values may read attnd's responses, and the headers a preflight answers with.
 * Off (NULL) unless origins are configured.
 */
#ifndef ATTND_CORS_H
#define ATTND_CORS_H

#include <stddef.h>

typedef struct attnd_cors attnd_cors;

/* The request headers a preflight allows (auth.c reads Authorization; v2's
 * binary tensors, request ids and session affinity use the others). */
extern const char attnd_cors_allow_headers[];
/* The response headers a page may read besides the CORS-safelisted ones. */
extern const char attnd_cors_expose_headers[];
/* How long a browser may cache a preflight, in seconds (as text). */
extern const char attnd_cors_max_age[];

/* Parses a comma-separated list of origins: "*" (any), or
 * scheme://host[:port] exactly as browsers send Origin (no path, no trailing
 * '/'). Returns 0 with *out (NULL for an empty list: CORS off), or -1 with err
 * naming the bad entry. Free with attnd_cors_free. */
int attnd_cors_create(const char *list, attnd_cors **out, char *err, size_t errlen);

/* The Access-Control-Allow-Origin value for a request's Origin header: "*"
 * when any origin may, origin itself (borrowed) when listed, NULL when the
 * origin is not allowed, absent, or c is NULL. Compared exactly (ASCII case
 * aside in scheme and host). */
const char *attnd_cors_allow_origin(const attnd_cors *c, const char *origin);

/* 1 when the answer depends on Origin (listed origins, not only "*"): responses
 * then say Vary: Origin so caches keep them apart. */
int attnd_cors_varies(const attnd_cors *c);

void attnd_cors_free(attnd_cors *c);

#endif
