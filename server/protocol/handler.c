/* handler.c — what the protocol handlers share that needs an exchange. */
#include "protocol/handler.h"

#include <errno.h>
#include <stdlib.h>
#include <strings.h>

const char attnd_tensor_header[] = "Inference-Header-Content-Length";
const char attnd_binary_type[] = "application/octet-stream";

int attnd_handler_check_json(attnd_exchange *x, attnd_http_error *err)
{
    return attnd_check_json_post(x->app->cfg->max_body_bytes, x->header(x, "Content-Length"),
                                 x->header(x, "Transfer-Encoding"),
                                 x->header(x, "Content-Type"), err);
}

int attnd_handler_reserve(void *ctx, size_t bytes, attnd_http_error *err)
{
    attnd_exchange *x = ctx;
    return x->reserve ? x->reserve(x, bytes, err) : 0;
}

int attnd_handler_check_request(const attnd_exchange *x, const attnd_request *req,
                                attnd_http_error *err)
{
    if (x->model->info.rope.style == ATTN_ROPE_NONE)
        return 0;
    for (int i = 0; i < req->n_seqs; i++)
        if (req->seqs[i].key)
            return attnd_http_fail(err, 400, "unsupported", "key",
                                   "model %s has rotary position embeddings: cross-attention "
                                   "(key given) has no positions for its keys; send the query "
                                   "alone (self-attention)",
                                   x->model->name);
    return 0;
}

int attnd_handler_succeeded(attnd_exchange *x, const attnd_request *req,
                            void (*error)(attnd_reply *out, const attnd_http_error *err),
                            attnd_reply *out)
{
    if (req->outcome != ATTND_DONE_OK) {
        attnd_http_error e;
        attnd_outcome_error(req, &e);
        error(out, &e);
        return 0;
    }
    if (x->app->metrics)
        attnd_metrics_request_timing(x->app->metrics, x->model->index, req->queue_us,
                                     req->compute_us);
    return 1;
}

long long attnd_handler_tensor_header_length(const attnd_exchange *x)
{
    const char *ihcl = x->header(x, attnd_tensor_header);
    if (!ihcl)
        return -1;
    errno = 0;
    char *end;
    long long n = strtoll(ihcl, &end, 10);
    if (errno || end == ihcl || *end != '\0' || n < 0)
        return -2;
    return n;
}

int attnd_handler_check_tensor_post(attnd_exchange *x, attnd_http_error *err)
{
    const char *content_type = x->header(x, "Content-Type");
    long long hl = attnd_handler_tensor_header_length(x);
    if (hl == -2)
        return attnd_http_fail(err, 400, "invalid_request", attnd_tensor_header,
                               "Inference-Header-Content-Length must be a non-negative "
                               "integer, not %.40s", x->header(x, attnd_tensor_header));
    if (hl >= 0) /* binary tensors follow the JSON header: any media type will do */
        content_type = attnd_json_type;
    else if (content_type &&
             strncasecmp(content_type, attnd_binary_type, sizeof attnd_binary_type - 1) == 0)
        content_type = attnd_json_type; /* then the body must be all JSON: the decoder says so */
    return attnd_check_json_post(x->app->cfg->max_body_bytes, x->header(x, "Content-Length"),
                                 x->header(x, "Transfer-Encoding"), content_type, err);
}
