/* handler_v1.c — the /v1 JSON protocol (handler_v1.h). */
#include "protocol/handler_v1.h"

#include "protocol/codec.h"

static int decode(attnd_exchange *x, attnd_request **out, attnd_http_error *err)
{
    attnd_decode_opts opts = {.reserve = attnd_handler_reserve, .reserve_ctx = x};
    if (attnd_codec_decode_request_ex(x->body, x->body_len, &x->model->info, &x->app->limits,
                                      &opts, out, err) != 0)
        return -1;
    if (attnd_handler_check_request(x, *out, err) != 0) {
        attnd_request_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

static void finish(attnd_exchange *x, const attnd_request *req, attnd_reply *out)
{
    if (!attnd_handler_succeeded(x, req, attnd_reply_error, out))
        return;
    size_t len = 0;
    char *body = attnd_codec_encode_response(req, x->model->name, &len);
    attnd_reply_body(out, 200, attnd_json_type, body, len);
}

static void models(attnd_exchange *x, attnd_reply *out)
{
    size_t len = 0;
    char *body = attnd_models_list_json(x->app->models, &len);
    attnd_reply_body(out, 200, attnd_json_type, body, len);
}

static void model(attnd_exchange *x, attnd_reply *out)
{
    size_t len = 0;
    char *body = attnd_models_info_json(x->model, &len);
    attnd_reply_body(out, 200, attnd_json_type, body, len);
}

const attnd_handler attnd_handler_v1_attention = {
    .protocol = "v1",
    .check_headers = attnd_handler_check_json,
    .decode = decode,
    .finish = finish,
    .error = attnd_reply_error,
};
const attnd_handler attnd_handler_v1_models = {
    .protocol = "v1", .answer = models, .error = attnd_reply_error};
const attnd_handler attnd_handler_v1_model = {
    .protocol = "v1", .answer = model, .error = attnd_reply_error};
