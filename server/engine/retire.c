/* retire.c — evicting the sessions that pin retired model versions beyond
 * --max-retired-bytes (retire.h), oldest version first. */
#include "engine/retire.h"

#include "core/log.h"

/* One pass over the retired versions, oldest first, each visited once: its
 * sessions are evicted (idle ones now, busy ones marked to go when their
 * append ends), and its bytes count as going, since what still holds it then
 * (requests in flight, appends finishing) lets go by itself. The pass stops
 * once what stays is within bound. A version that cannot be freed now is never
 * retried here (that used to spin forever on a busy session's version); its
 * last holder frees it. */
int attnd_retired_bound(attnd_sessions *st, attnd_models *models, size_t bound)
{
    int evicted = 0, versions = 0;
    size_t bytes = 0;
    attnd_models_retired(models, &versions, &bytes);
    size_t staying = bytes;
    attnd_model *m = staying > bound ? attnd_models_oldest_retired(models) : NULL;
    while (m) {
        int n = attnd_sessions_evict_model(st, m);
        evicted += n;
        if (n > 0)
            attnd_log(ATTND_LOG_INFO, "retired model %s version %d: %d session(s) evicted, "
                      "busy ones when their append ends (retired versions held %zu bytes, over "
                      "--max-retired-bytes %zu)", m->name, m->version, n, staying, bound);
        size_t mb = attnd_model_weight_bytes(m);
        staying = mb < staying ? staying - mb : 0;
        attnd_model *next = staying > bound ? attnd_models_next_retired(models, m) : NULL;
        attnd_model_release(m); /* may free it, unretiring it */
        m = next;
    }
    attnd_models_retired(models, &versions, &bytes);
    if (bytes > bound)
        attnd_log(ATTND_LOG_INFO, "retired model versions hold %zu bytes (over "
                  "--max-retired-bytes %zu) for requests in flight or appends finishing: freed "
                  "when they end", bytes, bound);
    return evicted;
}
