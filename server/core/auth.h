/* auth.h — API keys: the key set (from --api-key-file and ATTND_API_KEYS),
 * which routes need one, and a constant-time check of "Authorization: Bearer";
 * and the admin keys (--admin-key-file) that the model repository's changes
 * need. The sets can be replaced at run time (SIGHUP) while requests are checked.
 */
#ifndef ATTND_AUTH_H
#define ATTND_AUTH_H

#include <stddef.h>

#include "core/config.h"

typedef struct attnd_auth attnd_auth;

/* Reads cfg->api_key_file (refused if world-writable) and cfg->api_keys, and
 * cfg->admin_key_file (same format; an admin key equal to a client key is an
 * error).
 * No keys at all (no file named, no ATTND_API_KEYS) = authentication off; a
 * key file that is named but holds no key (empty, comments or blanks only) is
 * an error, never "off". Returns NULL with err filled on a problem (unreadable,
 * world-writable or keyless file, a key over 255 bytes, memory); err names the
 * file. Keys never appear in err or in the log. Free with attnd_auth_free. */
attnd_auth *attnd_auth_create(const attnd_config *cfg, char *err, size_t errlen);

/* Re-reads the keys from cfg and swaps them in atomically. On failure (as for
 * attnd_auth_create: a key file truncated to nothing fails too) the old set
 * stays and err says why and that the old keys are kept. Returns 0 or -1. */
int attnd_auth_reload(attnd_auth *a, const attnd_config *cfg, char *err, size_t errlen);

/* How many keys are configured (0 = every route is open). */
int attnd_auth_key_count(attnd_auth *a);

/* 1 when a request for path with this Authorization header value (NULL when
 * absent) may proceed: authentication is off, the route is open (/healthz,
 * /readyz, /v2/health/..., the playground's static files, /metrics unless
 * metrics_require_key), or the header is "Bearer <a configured key>" (for
 * /v2/repository/... an admin key will do too). */
int attnd_auth_allows(attnd_auth *a, const char *path, const char *authorization,
                      int metrics_require_key);

/* How many admin keys are configured (0 = repository changes are refused). */
int attnd_auth_admin_key_count(attnd_auth *a);

/* Whether a request may change the model repository (load, unload). */
typedef enum attnd_admin_access {
    ATTND_ADMIN_OK = 0,         /* "Bearer <an admin key>"                          */
    ATTND_ADMIN_DISABLED = 1,   /* no admin key configured: nobody may (403)       */
    ATTND_ADMIN_MISSING = 2,    /* no bearer token, or an unknown one (401)        */
    ATTND_ADMIN_CLIENT_KEY = 3  /* a client API key: never admin (403)              */
} attnd_admin_access;

attnd_admin_access attnd_auth_admin(attnd_auth *a, const char *authorization);

void attnd_auth_free(attnd_auth *a);

#endif
