/* handler_v1.h — the native /v1 JSON protocol: attention requests (decoded by
 * codec.c, computed by the model's scheduler) and the model listing.
 * Errors are {"error":{"code","message","field"}}.
 */
#ifndef ATTND_HANDLER_V1_H
#define ATTND_HANDLER_V1_H

#include "protocol/handler.h"

extern const attnd_handler attnd_handler_v1_attention; /* POST /v1/[models/{name}/]attention */
extern const attnd_handler attnd_handler_v1_models;    /* GET /v1/models                    */
extern const attnd_handler attnd_handler_v1_model;     /* GET /v1/models/{name}             */

#endif
