/* retire.c — evicting the sessions that pin retired model versions beyond
 * --max-retired-bytes (retire.h), oldest version first. */
#include "engine/retire.h"

#include "core/log.h"

int attnd_retired_bound(attnd_sessions *st, attnd_models *models, size_t bound)
{
    int evicted = 0, versions = 0;
    size_t bytes = 0;
    attnd_model *skip = NULL; /* the oldest is held by requests, not sessions: try no further */
    for (attnd_models_retired(models, &versions, &bytes); bytes > bound && !skip;
         attnd_models_retired(models, &versions, &bytes)) {
        attnd_model *m = attnd_models_oldest_retired(models);
        if (!m) break;
        int n = attnd_sessions_evict_model(st, m);
        evicted += n;
        if (n > 0)
            attnd_log(ATTND_LOG_INFO, "retired model %s version %d: %d session(s) evicted (retired "
                      "versions held %zu bytes, over --max-retired-bytes %zu)", m->name, m->version, n,
                      bytes, bound);
        else
            skip = m;
        attnd_model_release(m); /* may free it, unretiring it */
    }
    if (skip)
        attnd_log(ATTND_LOG_WARN, "retired model versions hold %zu bytes (over --max-retired-bytes %zu) for "
                  "requests in flight or appends finishing: freed when they end", bytes, bound);
    return evicted;
}

