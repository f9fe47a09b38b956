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

/* Waits until every attention request handed to a scheduler has had its
 * response sent, or timeout_ms passed. Returns how many are still pending. */
int attnd_http_wait_idle(attnd_http *h, int timeout_ms);

/* Stops libmicrohttpd (closing every connection) and frees h. NULL allowed. */
void attnd_http_stop(attnd_http *h);

#endif
