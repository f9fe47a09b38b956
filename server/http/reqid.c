/* reqid.c — X-Request-Id validation and generation (reqid.h). */
#include "http/reqid.h"

#include <stdint.h>
#include <string.h>
#include <sys/random.h>

#include "core/request.h"

const char attnd_reqid_header[] = "X-Request-Id";

int attnd_reqid_valid(const char *s)
{
    size_t n = 0;
    if (!s)
        return 0;
    for (; s[n]; n++) {
        unsigned char ch = (unsigned char)s[n];
        if (n >= ATTND_REQID_MAX || ch < 0x21 || ch > 0x7e || ch == '"' || ch == '\\')
            return 0;
    }
    return n > 0;
}

/* 64 random bits: getrandom(2), which does not block once the kernel's pool is
 * initialised (always, long before a server runs); should it fail, the clock
 * mixed with a counter keeps ids distinct within this process. */
static uint64_t random_bits(void)
{
    static _Atomic uint64_t fallback_counter;
    uint64_t v;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v)
        return v;
    v = (uint64_t)attnd_now_ns() ^ (fallback_counter++ * UINT64_C(0x9e3779b97f4a7c15));
    return v;
}

int attnd_reqid_take(const char *client, char *out)
{
    if (attnd_reqid_valid(client)) {
        memcpy(out, client, strlen(client) + 1);
        return 1;
    }
    /* "%016llx" without printf: 16 lowercase hex digits, most significant first. */
    static const char hex[] = "0123456789abcdef";
    uint64_t v = random_bits();
    for (int i = 15; i >= 0; i--, v >>= 4)
        out[i] = hex[v & 15];
    out[16] = '\0';
    return 0;
}
