/* load_http.c — the libcurl plumbing both runners share (load_http.h). */
#include "load_http.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

size_t load_http_append(char **buf, size_t *len, size_t *cap, const char *data, size_t n,
                        size_t max)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 16384;
        while (c < *len + n + 1) c *= 2;
        if (c > max) return 0;
        char *b = realloc(*buf, c);
        if (!b) return 0;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = 0;
    return n;
}

int load_http_header_value(const char *data, size_t n, const char *name, char *out, size_t cap)
{
    size_t k = strlen(name);
    if (n <= k || strncasecmp(data, name, k) != 0) return 0;
    size_t v = n - k;
    if (v >= cap) v = cap - 1;
    memcpy(out, data + k, v);
    out[v] = 0;
    return 1;
}

char *load_http_base_url(const char *url)
{
    char *b = strdup(url);
    if (b)
        for (size_t n = strlen(b); n && b[n - 1] == '/'; n--) b[n - 1] = 0;
    return b;
}

void load_http_raise_fd_limit(size_t n)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= n + 64) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > n + 64 ? n + 64 : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}
