/* http.h — attnd's HTTP transport on libmicrohttpd: a thread pool accepting
 * connections, bodies accumulated chunk by chunk under max_body_bytes, attention
 * requests suspended while the scheduler works (no thread waits per request)
 * and resumed by the worker's completion callback.
 */
#ifndef ATTND_HTTP_H
#define ATTND_HTTP_H

#include <stddef.h>

#include "protocol/app.h"

typedef struct attnd_http attnd_http;

/* Binds app->cfg->listen and starts serving app (borrowed; must outlive the
 * server). Returns NULL with err filled on failure (bad address, bind, MHD). */
attnd_http *attnd_http_start(attnd_app *app, char *err, size_t errlen);

/* The bound TCP port (useful with --listen HOST:0). */
int attnd_http_port(const attnd_http *h);

/* The drain begins (app->state is DRAINING already): requests begun before
 * now + grace_ms are served, and so is the next request of every connection
 * whose bytes reached attnd before now (unread in its socket, or queued
 * unaccepted on the listening socket); any other gets 503 draining. */
void attnd_http_drain_begin(attnd_http *h, int grace_ms);

/* Waits until the grace is over and every request drain_begin admitted has
 * been read and handed to a scheduler or answered (then the schedulers may
 * drain), or timeout_ms passed. Returns how many are still unread. */
int attnd_http_drain_admitted(attnd_http *h, int timeout_ms);

/* Waits until every attention request handed to a scheduler has had its
 * response sent, or timeout_ms passed. Returns how many are still pending. */
int attnd_http_wait_idle(attnd_http *h, int timeout_ms);

/* Stops libmicrohttpd (closing every connection) and frees h. NULL allowed. */
void attnd_http_stop(attnd_http *h);

#endif
