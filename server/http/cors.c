/* cors.c — the --cors-origin allow-list (cors.h). */
#include "http/cors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char attnd_cors_allow_headers[] =
    "Content-Type, Authorization, Inference-Header-Content-Length, X-Request-Id, X-Session-Id";
const char attnd_cors_expose_headers[] =
    "X-Request-Id, Inference-Header-Content-Length, Retry-After";
const char attnd_cors_max_age[] = "600";

struct attnd_cors {
    int any;                   /* "*" was listed                       */
    int n;
    char **origins;            /* n listed origins                     */
};

void attnd_cors_free(attnd_cors *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        free(c->origins[i]);
    free(c->origins);
    free(c);
}

/* An origin as a browser serializes it: http(s)://host[:port], nothing after. */
static int valid_origin(const char *s, size_t n)
{
    size_t scheme = n >= 7 && strncasecmp(s, "http://", 7) == 0    ? 7
                    : n >= 8 && strncasecmp(s, "https://", 8) == 0 ? 8
                                                                    : 0;
    if (!scheme || n == scheme)
        return 0;
    for (size_t i = scheme; i < n; i++)
        if (s[i] == '/' || s[i] == '?' || s[i] == '#' || (unsigned char)s[i] <= ' ')
            return 0;
    return 1;
}

/* Adds the entry s[0..n) (trimmed) to c. Returns 0, or -1 with err. */
static int add_origin(attnd_cors *c, const char *s, size_t n, char *err, size_t errlen)
{
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0)
        return 0;
    if (n == 1 && *s == '*') {
        c->any = 1;
        return 0;
    }
    if (!valid_origin(s, n)) {
        snprintf(err, errlen, "--cors-origin '%.*s': expected * or scheme://host[:port] as a "
                 "browser sends Origin (http or https, no path, no trailing '/')",
                 (int)(n > 200 ? 200 : n), s);
        return -1;
    }
    char **grown = realloc(c->origins, (size_t)(c->n + 1) * sizeof *grown);
    if (!grown || !(grown[c->n] = strndup(s, n))) {
        if (grown)
            c->origins = grown;
        snprintf(err, errlen, "--cors-origin: out of memory");
        return -1;
    }
    c->origins = grown;
    c->n++;
    return 0;
}

int attnd_cors_create(const char *list, attnd_cors **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!list || !*list)
        return 0;
    attnd_cors *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "--cors-origin: out of memory");
        return -1;
    }
    for (const char *p = list;;) {
        size_t n = strcspn(p, ",");
        if (add_origin(c, p, n, err, errlen) != 0) {
            attnd_cors_free(c);
            return -1;
        }
        if (!p[n])
            break;
        p += n + 1;
    }
    if (!c->any && c->n == 0) { /* only commas and blanks */
        attnd_cors_free(c);
        return 0;
    }
    *out = c;
    return 0;
}

/* Scheme and host compare without case (RFC 6454 lowers them); a port is digits. */
const char *attnd_cors_allow_origin(const attnd_cors *c, const char *origin)
{
    if (!c || !origin || !*origin)
        return NULL;
    if (c->any)
        return "*";
    for (int i = 0; i < c->n; i++)
        if (strcasecmp(c->origins[i], origin) == 0)
            return origin;
    return NULL;
}

int attnd_cors_varies(const attnd_cors *c) { return c && !c->any && c->n > 0; }
