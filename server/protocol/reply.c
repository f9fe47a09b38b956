/* reply.c — building responses (reply.h): the /v1 error form, the JSON POST
 * header checks, and the outcome -> wire error mapping all handlers share.
 */
#include "protocol/reply.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "protocol/codec.h"

const char attnd_json_type[] = "application/json";

void attnd_reply_error_body(attnd_reply *out, const attnd_http_error *err, char *body,
                            size_t len)
{
    out->status = err->status;
    out->content_type = attnd_json_type;
    out->body = body;
    out->len = body ? len : 0;
    out->retry_after = err->status == 503 ? 1 : 0;
    snprintf(out->code, sizeof out->code, "%s", err->code);
    snprintf(out->log_detail, sizeof out->log_detail, "%s%s%s", err->field,
             err->field[0] ? ": " : "", err->message);
}

void attnd_reply_error(attnd_reply *out, const attnd_http_error *err)
{
    size_t len = 0;
    char *body = attnd_codec_encode_error_id(err, out->request_id, &len);
    attnd_reply_error_body(out, err, body, len);
}

void attnd_reply_text(attnd_reply *out, int status, const char *type, const char *text)
{
    out->status = status;
    out->content_type = type;
    out->body = strdup(text);
    out->len = out->body ? strlen(text) : 0;
}

void attnd_reply_body(attnd_reply *out, int status, const char *type, char *body, size_t len)
{
    out->status = status;
    out->content_type = type;
    out->body = body;
    out->len = body ? len : 0;
}

/* application/json, optionally followed by parameters; a charset must be UTF-8. */
static int json_media_type(const char *ct)
{
    static const char want[] = "application/json";
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (strncasecmp(ct, want, sizeof want - 1) != 0)
        return 0;
    ct += sizeof want - 1;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (*ct == '\0')
        return 1;
    if (*ct != ';')
        return 0;
    const char *cs = strcasestr(ct, "charset=");
    if (!cs)
        return 1;
    cs += 8;
    if (*cs == '"')
        cs++;
    return strncasecmp(cs, "utf-8", 5) == 0 || strncasecmp(cs, "utf8", 4) == 0;
}

int attnd_check_json_post(long long max_body_bytes, const char *content_length,
                          const char *transfer_encoding, const char *content_type,
                          attnd_http_error *err)
{
    int chunked = transfer_encoding && strcasestr(transfer_encoding, "chunked");
    if (!chunked && !content_length)
        return attnd_http_fail(err, 411, "length_required", "",
                               "POST needs a Content-Length (or chunked Transfer-Encoding)");
    if (content_length) {
        errno = 0;
        char *end;
        unsigned long long n = strtoull(content_length, &end, 10);
        if (!errno && end != content_length && n > (unsigned long long)max_body_bytes)
            return attnd_http_fail(err, 413, "body_too_large", "",
                                   "body of %llu bytes is over max_body_bytes (%lld)", n,
                                   max_body_bytes);
    }
    if (!content_type || !json_media_type(content_type))
        return attnd_http_fail(err, 415, "unsupported_media_type", "",
                               "the body must be application/json, not %.100s",
                               content_type ? content_type : "(no Content-Type)");
    return 0;
}

void attnd_lib_error(attn_status st, const attn_error *ae, const char *field,
                     attnd_http_error *e)
{
    const char *msg = ae && ae->message[0] ? ae->message : attn_strerror(st);
    switch (st) {
    case ATTN_ERR_NONFINITE:
        attnd_http_error_set(e, 400, "invalid_value", field, "%s", msg);
        break;
    case ATTN_ERR_SHAPE:
        attnd_http_error_set(e, 400, "invalid_shape", field, "%s", msg);
        break;
    case ATTN_ERR_LIMIT:
        attnd_http_error_set(e, 413, "limit_exceeded", field, "%s", msg);
        break;
    case ATTN_ERR_UNSUPPORTED:
        attnd_http_error_set(e, 400, "unsupported", field, "%s", msg);
        break;
    case ATTN_ERR_INVALID_ARG:
        attnd_http_error_set(e, 400, "invalid_value", field, "%s", msg);
        break;
    default:
        attnd_http_error_set(e, 500, "internal", field, "computation failed: %s: %s",
                             attn_strerror(st), msg);
        break;
    }
}

/* DONE_ERROR: the library refused a request the codec accepted. */
static void lib_error(const attnd_request *req, attnd_http_error *e)
{
    attnd_lib_error(req->lib_status, &req->lib_error, "", e);
}

void attnd_outcome_error(const attnd_request *req, attnd_http_error *e)
{
    switch (req->outcome) {
    case ATTND_DONE_TIMEOUT:
        attnd_http_error_set(e, 504, "timeout", "timeout_ms",
                             "not started within timeout_ms = %lld (waited %lld us in the queue)",
                             (long long)req->timeout_ms, (long long)req->queue_us);
        break;
    case ATTND_DONE_ERROR:
        lib_error(req, e);
        break;
    default:
        attnd_http_error_set(e, 503, "draining", "", "attnd is shutting down");
        break;
    }
}
