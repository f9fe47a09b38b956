/* handler_repo.h — the v2 model repository extension (Triton's): the index of
 * every model slot with its version and state, and loading and unloading models
 * at run time. Load and unload need an admin key (--admin-key-file); the index
 * any key that opens /v2. Errors are v2's {"error": "<message>"}.
 */
#ifndef ATTND_HANDLER_REPO_H
#define ATTND_HANDLER_REPO_H

#include "protocol/handler.h"

extern const attnd_handler attnd_handler_repo_index;  /* GET, POST /v2/repository/index */
extern const attnd_handler attnd_handler_repo_load;   /* POST .../models/{name}/load    */
extern const attnd_handler attnd_handler_repo_unload; /* POST .../models/{name}/unload  */

#endif
