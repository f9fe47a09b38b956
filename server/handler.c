/* handler.c — what the protocol handlers share that needs an exchange. */
#include "handler.h"

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
