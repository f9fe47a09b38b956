/* handler_ops.h — the operational routes: liveness, readiness, Prometheus
 * metrics and the playground's static files. Answered on the HTTP thread,
 * never waiting for a queue; errors in the /v1 form.
 */
#ifndef ATTND_HANDLER_OPS_H
#define ATTND_HANDLER_OPS_H

#include "protocol/handler.h"

extern const attnd_handler attnd_handler_ops_healthz;  /* GET /healthz  */
extern const attnd_handler attnd_handler_ops_readyz;   /* GET /readyz   */
extern const attnd_handler attnd_handler_ops_metrics;  /* GET /metrics  */
extern const attnd_handler attnd_handler_ops_ui;       /* GET /, /ui/.. */

/* 1 when path is one of the playground's files. */
int attnd_handler_ops_ui_has(const char *path);

#endif
