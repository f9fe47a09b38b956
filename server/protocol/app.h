/* app.h — what every protocol handler shares: the configuration, the model
 * registry, metrics, API keys, the session store, the decode limits and the
 * server's life-cycle state. Filled by main.c, borrowed by everyone else.
 */
#ifndef ATTND_APP_H
#define ATTND_APP_H

#include <stdatomic.h>

#include "protocol/codec.h"
#include "core/config.h"
#include "core/metrics.h"
#include "engine/models.h"

typedef enum attnd_state {
    ATTND_STATE_STARTING = 0,  /* listening, models loading: /readyz 503 not_ready */
    ATTND_STATE_READY = 1,
    ATTND_STATE_DRAINING = 2   /* shutting down: /readyz 503 draining               */
} attnd_state;

/* models is filled before state becomes READY and is read only after an
 * acquire load of state sees READY (or DRAINING). */
typedef struct attnd_app {
    const attnd_config *cfg;
    attnd_models *models;
    attnd_metrics *metrics;
    attnd_decode_limits limits;
    _Atomic int state;         /* attnd_state */
    struct attnd_auth *auth;   /* API keys; NULL = no authentication          */
    struct attnd_sessions *sessions; /* streaming sessions (handler_session.c) */
    struct attnd_access_log *access_log; /* --access-log; NULL = none          */
    struct attnd_cors *cors;   /* --cors-origin allow-list; NULL = CORS off   */
} attnd_app;

/* The state now (acquire load). */
static inline attnd_state attnd_app_state(const attnd_app *app)
{
    return (attnd_state)atomic_load_explicit(&((attnd_app *)app)->state, memory_order_acquire);
}

#endif
