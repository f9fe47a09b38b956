/* auth.c — API keys and admin keys: loading (files + environment), the
 * open-route list, and a comparison whose time depends on neither the keys nor
 * the presented token.
 */
#include "core/auth.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/ui_assets.h"

#define KEY_CAP 256 /* a key is at most KEY_CAP - 1 bytes */

/* One immutable key set. Keys are stored zero-padded to KEY_CAP bytes so a
 * comparison always reads KEY_CAP bytes of every key. */
typedef struct keyset {
    int n;
    unsigned char (*keys)[KEY_CAP];
    size_t *lens;
} keyset;

struct attnd_auth {
    pthread_rwlock_t lock; /* guards cur and admin: readers check, reload swaps */
    keyset *cur;
    keyset *admin;         /* --admin-key-file's; empty = repository changes off */
};

static void keyset_free(keyset *k)
{
    if (!k)
        return;
    if (k->keys) /* wipe: keys should not linger in freed memory */
        memset(k->keys, 0, (size_t)k->n * KEY_CAP);
    free(k->keys);
    free(k->lens);
    free(k);
}

/* Appends the key s[0..len) after trimming blanks; empty keys are skipped. */
static int keyset_add(keyset *k, const char *s, size_t len, char *err, size_t errlen)
{
    while (len && (*s == ' ' || *s == '\t'))
        s++, len--;
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\r' ||
                   s[len - 1] == '\n'))
        len--;
    if (len == 0)
        return 0;
    if (len >= KEY_CAP) {
        snprintf(err, errlen, "an API key is %zu bytes long; at most %d allowed", len,
                 KEY_CAP - 1);
        return -1;
    }
    void *keys = realloc(k->keys, (size_t)(k->n + 1) * KEY_CAP);
    if (keys)
        k->keys = keys;
    size_t *lens = realloc(k->lens, (size_t)(k->n + 1) * sizeof *lens);
    if (lens)
        k->lens = lens;
    if (!keys || !lens) {
        snprintf(err, errlen, "out of memory reading API keys");
        return -1;
    }
    memset(k->keys[k->n], 0, KEY_CAP);
    memcpy(k->keys[k->n], s, len);
    k->lens[k->n++] = len;
    return 0;
}

/* Reads the keys of a key file (what: "API key file", "admin key file"). */
static int load_key_file(keyset *k, const char *what, const char *path, char *err,
                         size_t errlen)
{
    if (attnd_config_check_file_mode(what, path, err, errlen))
        return -1;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno));
        return -1;
    }
    char line[1024];
    int rc = 0, lineno = 0, before = k->n;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '#')
            continue;
        if (keyset_add(k, p, strlen(p), err, errlen) != 0) {
            char tmp[256];
            snprintf(tmp, sizeof tmp, "%s", err);
            snprintf(err, errlen, "%s %s line %d: %s", what, path, lineno, tmp);
            rc = -1;
        }
    }
    fclose(f);
    if (rc == 0 && k->n == before) {
        /* A file named but holding no key is a mistake (a truncated or not yet
         * written file), never a request to switch authentication off. */
        snprintf(err, errlen, "%s %s has no key (it is empty, or only comments and "
                 "blank lines); to run without such keys, do not name a key file", what, path);
        rc = -1;
    }
    return rc;
}

static keyset *keyset_load(const attnd_config *cfg, char *err, size_t errlen)
{
    keyset *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(err, errlen, "out of memory reading API keys");
        return NULL;
    }
    if (cfg->api_key_file && *cfg->api_key_file &&
        load_key_file(k, "API key file", cfg->api_key_file, err, errlen) != 0)
        goto fail;
    for (const char *p = cfg->api_keys ? cfg->api_keys : ""; *p;) {
        size_t n = strcspn(p, ",");
        if (keyset_add(k, p, n, err, errlen) != 0)
            goto fail;
        p += n + (p[n] == ',');
    }
    return k;
fail:
    keyset_free(k);
    return NULL;
}

static int match_any(const keyset *k, const char *tok, size_t len);

/* The admin keys of cfg (none when no file is named). An admin key that is also
 * a client key is refused: a client key must never grant admin. */
static keyset *admin_load(const attnd_config *cfg, const keyset *clients, char *err,
                          size_t errlen)
{
    keyset *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(err, errlen, "out of memory reading admin keys");
        return NULL;
    }
    if (cfg->admin_key_file && *cfg->admin_key_file &&
        load_key_file(k, "admin key file", cfg->admin_key_file, err, errlen) != 0)
        goto fail;
    for (int i = 0; i < k->n; i++)
        if (match_any(clients, (const char *)k->keys[i], k->lens[i])) {
            snprintf(err, errlen, "admin key file %s: key %d is also an API key; admin keys "
                     "must differ from client keys", cfg->admin_key_file, i + 1);
            goto fail;
        }
    return k;
fail:
    keyset_free(k);
    return NULL;
}

attnd_auth *attnd_auth_create(const attnd_config *cfg, char *err, size_t errlen)
{
    attnd_auth *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    a->cur = keyset_load(cfg, err, errlen);
    a->admin = a->cur ? admin_load(cfg, a->cur, err, errlen) : NULL;
    if (!a->cur || !a->admin || pthread_rwlock_init(&a->lock, NULL) != 0) {
        keyset_free(a->cur);
        keyset_free(a->admin);
        free(a);
        return NULL;
    }
    return a;
}

int attnd_auth_reload(attnd_auth *a, const attnd_config *cfg, char *err, size_t errlen)
{
    keyset *k = keyset_load(cfg, err, errlen);
    keyset *admin = k ? admin_load(cfg, k, err, errlen) : NULL;
    if (!k || !admin) {
        keyset_free(k);
        size_t n = strlen(err);
        if (n < errlen)
            snprintf(err + n, errlen - n, "; keeping the %d API key(s) and %d admin key(s) "
                     "loaded before", attnd_auth_key_count(a), attnd_auth_admin_key_count(a));
        return -1;
    }
    pthread_rwlock_wrlock(&a->lock);
    keyset *old = a->cur, *old_admin = a->admin;
    a->cur = k;
    a->admin = admin;
    pthread_rwlock_unlock(&a->lock);
    keyset_free(old);
    keyset_free(old_admin);
    return 0;
}

int attnd_auth_key_count(attnd_auth *a)
{
    if (!a)
        return 0;
    pthread_rwlock_rdlock(&a->lock);
    int n = a->cur->n;
    pthread_rwlock_unlock(&a->lock);
    return n;
}

int attnd_auth_admin_key_count(attnd_auth *a)
{
    if (!a)
        return 0;
    pthread_rwlock_rdlock(&a->lock);
    int n = a->admin->n;
    pthread_rwlock_unlock(&a->lock);
    return n;
}

/* The repository routes (/v2/repository/...): an admin key opens them too. */
static int repository_route(const char *path)
{
    return strncmp(path, "/v2/repository/", 15) == 0;
}

static int open_route(const char *path, int metrics_require_key)
{
    if (!strcmp(path, "/healthz") || !strcmp(path, "/readyz") ||
        !strncmp(path, "/v2/health/", 11))
        return 1;
    if (!strcmp(path, "/metrics"))
        return !metrics_require_key;
    /* The playground's static files: a browser cannot attach a header to a
     * page load; the API calls the page makes carry the key. */
    const unsigned char *body;
    size_t len;
    const char *type;
    return attnd_ui_lookup(path, &body, &len, &type);
}

/* 1 when tok[0..len) equals one of the keys. Reads KEY_CAP bytes of every key
 * whatever the inputs, with no data-dependent branch. */
static int match_any(const keyset *k, const char *tok, size_t len)
{
    assert(len < KEY_CAP);
    unsigned char t[KEY_CAP] = {0};
    memcpy(t, tok, len);
    unsigned found = 0;
    for (int i = 0; i < k->n; i++) {
        unsigned diff = (unsigned)(k->lens[i] ^ len);
        for (size_t j = 0; j < KEY_CAP; j++)
            diff |= (unsigned)(k->keys[i][j] ^ t[j]);
        found |= (unsigned)(diff == 0);
    }
    memset(t, 0, sizeof t);
    return (int)found;
}

/* The token of "Bearer <token>" (blanks trimmed), or NULL. */
static const char *bearer(const char *authorization, size_t *len)
{
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return NULL;
    const char *tok = authorization + 7;
    while (*tok == ' ')
        tok++;
    size_t n = strlen(tok);
    while (n && tok[n - 1] == ' ')
        n--;
    *len = n;
    return n > 0 && n < KEY_CAP ? tok : NULL;
}

int attnd_auth_allows(attnd_auth *a, const char *path, const char *authorization,
                      int metrics_require_key)
{
    if (!a)
        return 1;
    int ok = 0;
    size_t len = 0;
    const char *tok = bearer(authorization, &len);
    pthread_rwlock_rdlock(&a->lock);
    if (a->cur->n == 0 || open_route(path, metrics_require_key))
        ok = 1;
    else if (tok)
        ok = match_any(a->cur, tok, len) ||
             (repository_route(path) && match_any(a->admin, tok, len));
    pthread_rwlock_unlock(&a->lock);
    return ok;
}

attnd_admin_access attnd_auth_admin(attnd_auth *a, const char *authorization)
{
    if (!a)
        return ATTND_ADMIN_DISABLED;
    size_t len = 0;
    const char *tok = bearer(authorization, &len);
    attnd_admin_access r;
    pthread_rwlock_rdlock(&a->lock);
    if (a->admin->n == 0)
        r = ATTND_ADMIN_DISABLED;
    else if (tok && match_any(a->admin, tok, len))
        r = ATTND_ADMIN_OK;
    else if (tok && match_any(a->cur, tok, len))
        r = ATTND_ADMIN_CLIENT_KEY;
    else
        r = ATTND_ADMIN_MISSING;
    pthread_rwlock_unlock(&a->lock);
    return r;
}

void attnd_auth_free(attnd_auth *a)
{
    if (!a)
        return;
    keyset_free(a->cur);
    keyset_free(a->admin);
    pthread_rwlock_destroy(&a->lock);
    free(a);
}
