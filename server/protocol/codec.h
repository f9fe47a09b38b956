/* codec.h — the /v1 wire format: JSON attention request bodies into
 * attnd_request (a fast float path, jansson for the rest), results and errors
 * into response bodies. Used by the /v1 and session handlers (codec_v2.h is the
 * v2 one). Runs on HTTP threads, never on workers.
 */
#ifndef ATTND_CODEC_H
#define ATTND_CODEC_H

#include <stddef.h>

#include "attn.h"
#include "core/request.h"
#include "protocol/jsonbuf.h"

/* Limits the decoder enforces; 0 means "no limit" for each. */
typedef struct attnd_decode_limits {
    int max_seq_len;            /* T and S per sequence            -> 413 */
    int max_batch_seqs;         /* sequences in one request        -> 413 */
    size_t max_weights_elems;   /* elements of requested weights   -> 413 */
    size_t max_request_elems;   /* floats in query+key+value total -> 413 */
    int max_json_depth;         /* nesting depth of the body       -> 400 */
} attnd_decode_limits;

/* Decodes a native /v1 attention request body for a model described by info.
 * Validates everything: JSON syntax (line/column in the message), duplicate
 * keys, unknown fields, types, shapes against the model's widths, masks'
 * shapes, non-finite numbers, limits. Allocates the output (and weights)
 * buffers too.
 * Returns 0 and *out (free with attnd_request_free) on success; on failure
 * returns -1, sets *out = NULL and fills *err (400/413/422, field named). */
int attnd_codec_decode_request(const char *body, size_t len, const attn_layer_info *info,
                               const attnd_decode_limits *limits, attnd_request **out,
                               attnd_http_error *err);

/* Decoding a body that is not a whole /v1 request: a streaming-session append
 * (handler_session.c). All zeros = attnd_codec_decode_request. */
typedef struct attnd_decode_opts {
    int query_only;     /* 1: only query (ONE T×E_q sequence), position_ids (T),
                           need_weights, average_attn_weights, timeout_ms and id are
                           accepted (any
                           other member is 400 unknown_field) and the model's key/value
                           widths are not asked for: keys come from elsewhere        */
    int caller_weights; /* 1: need_weights sets weights_mode but no weights buffer is
                           allocated (seqs[i].weights NULL): the caller knows S and
                           attaches one, and checks max_weights_elems itself         */
    /* Called once before jansson parses the body's remainder, with the bytes the
     * parse will hold: the fast path's floats plus attnd_json_tree_bound of the
     * text jansson reads. Returns 0, or -1 with *err (the decode fails with it).
     * NULL: nothing is counted.                                                 */
    int (*reserve)(void *ctx, size_t bytes, attnd_http_error *err);
    void *reserve_ctx;
} attnd_decode_opts;

/* An upper bound of the memory jansson takes for a tree of this JSON text
 * (glibc, 64-bit; measured per kind of value: ~42 bytes a number, ~90 a string,
 * ~138 an array, ~234 an object), from a count of its structural bytes, so a
 * body can be refused before it is parsed. */
size_t attnd_json_tree_bound(const char *text, size_t len);

/* attnd_codec_decode_request with opts (NULL = none). */
int attnd_codec_decode_request_ex(const char *body, size_t len, const attn_layer_info *info,
                                  const attnd_decode_limits *limits,
                                  const attnd_decode_opts *opts, attnd_request **out,
                                  attnd_http_error *err);

/* Encodes a finished request (outcome ATTND_DONE_OK) as the response body:
 * {"model","id"?,"output","weights"?,"timing":{queue_us,compute_us,batch_size}}.
 * Returns a malloc'd NUL-terminated body (caller frees) and its length in *len,
 * or NULL on allocation failure or when an output/weight is NaN or infinite
 * (a library bug: answer 500). Floats print as the shortest text that reads
 * back to the same float32; -0 prints as -0.0. */
char *attnd_codec_encode_response(const attnd_request *req, const char *model_name,
                                  size_t *len);

/* The same with more members after "timing": members is NULL, or the text of
 * one or more JSON object members ("session":{...}), written as given. */
char *attnd_codec_encode_response_with(const attnd_request *req, const char *model_name,
                                       const char *members, size_t *len);

/* Encodes {"error":{"code","message","field"}}. Returns a malloc'd body (caller
 * frees), or NULL on allocation failure. */
char *attnd_codec_encode_error(const attnd_http_error *err, size_t *len);

/* The server's timing of req as JSON members, both protocols' (/v1 `timing`,
 * v2 `parameters`): "queue_us":N,"compute_us":N,"batch_size":N, and
 * ,"pieces":N when the decode loop computed it in pieces. No braces. */
void attnd_codec_put_timing(attnd_jsonbuf *b, const attnd_request *req);

/* The same with "request_id": request_id as the error's last member (none when
 * NULL or ""). */
char *attnd_codec_encode_error_id(const attnd_http_error *err, const char *request_id,
                                  size_t *len);

#endif
