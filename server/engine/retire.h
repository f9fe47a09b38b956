/* retire.h — the bound on what retired model versions (replaced by a reload or a
 * repository load, or unloaded) keep alive through streaming sessions that
 * still use them: --max-retired-bytes of their weights. Knows the registry's
 * retired list (models.h) and the session store (sessions.h); no HTTP.
 */
#ifndef ATTND_RETIRE_H
#define ATTND_RETIRE_H

#include <stddef.h>

#include "engine/models.h"
#include "engine/sessions.h"

/* Bounds what retired model versions pin (--max-retired-bytes): while their
 * weights exceed bound, the sessions holding the oldest ones are evicted (busy
 * ones when their append ends; their ids then answer 410), one pass, each
 * version once: it never waits for a busy session (the version goes when its
 * last holder lets go). Call after every reload, repository load or unload.
 * Returns the sessions evicted. */
int attnd_retired_bound(attnd_sessions *st, attnd_models *models, size_t bound);

#endif
