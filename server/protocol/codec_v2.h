/* codec_v2.h — the Open Inference Protocol (KServe v2) REST bodies: an infer request
 * (JSON, optionally followed by raw tensors as Triton's binary_tensor_data extension
 * defines) into the same attnd_request the /v1 codec builds, and back into a v2 response.
 */
#ifndef ATTND_CODEC_V2_H
#define ATTND_CODEC_V2_H

#include <stddef.h>

#include "attn.h"
#include "protocol/codec.h"
#include "core/request.h"

/* The response a v2 caller asked for: which outputs, in which order, which as raw
 * bytes. Filled by the decoder, read by the encoder; plain data, nothing to free. */
typedef enum attnd_v2_output { ATTND_V2_OUTPUT = 0, ATTND_V2_ATTN_WEIGHTS = 1 } attnd_v2_output;

typedef struct attnd_v2_call {
    int n_outputs;                 /* 1 or 2                                       */
    attnd_v2_output outputs[2];    /* in the order the request listed them         */
    int binary[2];                 /* per entry of outputs: send as raw bytes      */
    int batch, t, s;               /* B, T, S of the (rectangular) request          */
} attnd_v2_call;

/* Decodes POST /v2/models/{name}/infer. header_len is the Inference-Header-Content-Length
 * header's value, or -1 when absent (then the whole body is JSON). Every size is checked
 * against shapes and the body; every error names the tensor or parameter.
 * Returns 0 with *out (free with attnd_request_free) and *call; or -1 with *out = NULL and
 * *err (400, 413, 500). */
int attnd_codec_v2_decode(const char *body, size_t len, long long header_len,
                          const attn_layer_info *info, const attnd_decode_limits *limits,
                          attnd_request **out, attnd_v2_call *call, attnd_http_error *err);

/* Encodes a finished (ATTND_DONE_OK) request. *header_len = 0 for a JSON-only body,
 * else the JSON header's length (binary outputs follow it). Returns a malloc'd body
 * (caller frees) and its length, or NULL on allocation failure. */
char *attnd_codec_v2_encode_response(const attnd_request *req, const attnd_v2_call *call,
                                     const char *model_name, int model_version, size_t *len,
                                     size_t *header_len);

/* The same with more members in the response's "parameters" (after queue_us,
 * compute_us, batch_size): parameters is NULL or the text of JSON object members
 * ("session_id":"...","session_length":12), written as given. */
char *attnd_codec_v2_encode_response_with(const attnd_request *req, const attnd_v2_call *call,
                                          const char *model_name, int model_version,
                                          const char *parameters, size_t *len,
                                          size_t *header_len);

/* {"error": "<message>", "request_id": "<id>"} (a field, when set, leads the
 * message; "error" is the one member KServe requires, request_id is omitted
 * when NULL or ""). Malloc'd (caller frees), NULL on allocation failure. */
char *attnd_codec_v2_encode_error(const attnd_http_error *err, const char *request_id,
                                  size_t *len);

/* GET /v2 and GET /v2/models/{name} bodies. Malloc'd (caller frees), NULL on no memory. */
char *attnd_codec_v2_server_metadata(size_t *len);
char *attnd_codec_v2_model_metadata(const char *name, int version, const attn_layer_info *info,
                                    size_t *len);

#endif
