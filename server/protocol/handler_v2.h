/* handler_v2.h — the Open Inference Protocol (KServe v2) REST routes beside
 * /v1: server and model metadata, liveness and readiness, and infer (a JSON
 * body, or a JSON header followed by binary tensors as Triton's
 * binary_tensor_data extension defines). Bodies are codec_v2's; errors are
 * {"error": "<message>"}.
 */
#ifndef ATTND_HANDLER_V2_H
#define ATTND_HANDLER_V2_H

#include "protocol/handler.h"

extern const attnd_handler attnd_handler_v2_server;      /* GET /v2                       */
extern const attnd_handler attnd_handler_v2_live;        /* GET /v2/health/live           */
extern const attnd_handler attnd_handler_v2_ready;       /* GET /v2/health/ready          */
extern const attnd_handler attnd_handler_v2_model;       /* GET /v2/models/{name}         */
extern const attnd_handler attnd_handler_v2_model_ready; /* GET /v2/models/{name}/ready   */
extern const attnd_handler attnd_handler_v2_infer;       /* POST /v2/models/{name}/infer  */

/* The v2 error form, {"error": "<message>"}: every /v2 handler's error(). */
void attnd_handler_v2_error(attnd_reply *out, const attnd_http_error *err);

#endif
