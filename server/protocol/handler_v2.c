/* handler_v2.c — the Open Inference Protocol routes (handler_v2.h): the GET
 * answers, the infer POST's header check, decode and reply. An infer keeps the
 * outputs its caller asked for (attnd_v2_call) in the exchange's state.
 */
#include "protocol/handler_v2.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "protocol/codec_v2.h"

void attnd_handler_v2_error(attnd_reply *out, const attnd_http_error *err)
{
    size_t len = 0;
    char *body = attnd_codec_v2_encode_error(err, out->request_id, &len);
    attnd_reply_error_body(out, err, body, len);
}

static int decode_infer(attnd_exchange *x, attnd_request **out, attnd_http_error *err)
{
    long long hl = attnd_handler_tensor_header_length(x);
    size_t json_len = hl >= 0 && (unsigned long long)hl < x->body_len ? (size_t)hl : x->body_len;
    if (x->reserve && x->reserve(x, attnd_json_tree_bound(x->body, json_len), err) != 0)
        return -1; /* the whole header is parsed by jansson: count its tree first */
    attnd_v2_call *call = calloc(1, sizeof *call);
    if (!call)
        return attnd_http_fail(err, 500, "internal", "", "out of memory");
    if (attnd_codec_v2_decode(x->body, x->body_len, hl,
                              &x->model->info, &x->app->limits, out, call, err) != 0 ||
        attnd_handler_check_request(x, *out, err) != 0) {
        attnd_request_free(*out);
        *out = NULL;
        free(call);
        return -1;
    }
    x->state = call;
    return 0;
}

static void finish_infer(attnd_exchange *x, const attnd_request *req, attnd_reply *out)
{
    if (!attnd_handler_succeeded(x, req, attnd_handler_v2_error, out))
        return;
    size_t header_len = 0;
    out->status = 200;
    out->body =
        attnd_codec_v2_encode_response(req, x->state, x->model->name, x->model->version,
                                       &out->len, &header_len);
    out->content_type = header_len ? attnd_binary_type : attnd_json_type;
    if (header_len) { /* binary tensors follow a JSON header of this many bytes */
        out->header_name = attnd_tensor_header;
        char digits[24], *d = digits + sizeof digits; /* "%zu" without printf */
        *--d = '\0';
        do {
            *--d = (char)('0' + header_len % 10);
            header_len /= 10;
        } while (header_len);
        memcpy(out->header_value, d, (size_t)(digits + sizeof digits - d));
    }
}

static void end_infer(attnd_exchange *x)
{
    free(x->state);
    x->state = NULL;
}

static void server_metadata(attnd_exchange *x, attnd_reply *out)
{
    size_t len = 0;
    (void)x;
    char *body = attnd_codec_v2_server_metadata(&len);
    attnd_reply_body(out, 200, attnd_json_type, body, len);
}

static void model_metadata(attnd_exchange *x, attnd_reply *out)
{
    size_t len = 0;
    char *body = attnd_codec_v2_model_metadata(x->model->name, x->model->version, &x->model->info,
                                               &len);
    attnd_reply_body(out, 200, attnd_json_type, body, len);
}

static void live(attnd_exchange *x, attnd_reply *out)
{
    (void)x;
    attnd_reply_text(out, 200, attnd_json_type, "{\"live\":true}");
}

/* Server and model readiness alike: resolution answered 503 while models load
 * (model routes); a draining server is not ready. */
static void ready(attnd_exchange *x, attnd_reply *out)
{
    int ok = attnd_app_state(x->app) == ATTND_STATE_READY;
    attnd_reply_text(out, ok ? 200 : 503, attnd_json_type,
                     ok ? "{\"ready\":true}" : "{\"ready\":false}");
    out->retry_after = ok ? 0 : 1;
}

const attnd_handler attnd_handler_v2_server = {
    .protocol = "v2", .answer = server_metadata, .error = attnd_handler_v2_error};
const attnd_handler attnd_handler_v2_live = {
    .protocol = "v2", .answer = live, .error = attnd_handler_v2_error};
const attnd_handler attnd_handler_v2_ready = {
    .protocol = "v2", .answer = ready, .error = attnd_handler_v2_error};
const attnd_handler attnd_handler_v2_model = {
    .protocol = "v2", .answer = model_metadata, .error = attnd_handler_v2_error};
const attnd_handler attnd_handler_v2_model_ready = {
    .protocol = "v2", .answer = ready, .error = attnd_handler_v2_error};
const attnd_handler attnd_handler_v2_infer = {
    .protocol = "v2",
    .check_headers = attnd_handler_check_tensor_post,
    .decode = decode_infer,
    .finish = finish_infer,
    .end = end_infer,
    .error = attnd_handler_v2_error,
};
