/* request.h — the native form of one inference request inside attnd, and the
 * HTTP-level error every server module reports.
 *
 * Life of a request: the codec (codec.c) decodes a JSON body into an
 * attnd_request that owns all its arrays (inputs AND output buffers, sized from
 * the model); the HTTP layer hands it to the scheduler; a worker thread fills
 * the outputs and the result fields and calls on_done exactly once; the HTTP
 * layer encodes the response (codec.c again) and frees the request with
 * attnd_request_free. Nobody else frees it.
 */
#ifndef ATTND_REQUEST_H
#define ATTND_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

/* An error as the client will see it:
 *   {"error": {"code": code, "message": message, "field": field}}
 * with HTTP status `status`. field is "" when no single field is to blame. */
typedef struct attnd_http_error {
    int status;         /* 400, 404, 405, 411, 413, 415, 422, 503, 504, 500 */
    char code[40];      /* stable machine-readable code, e.g. "invalid_shape"  */
    char field[160];    /* e.g. "query[1][3]"                                  */
    char message[320];  /* human sentence, e.g. "expected 64 numbers, got 63"  */
} attnd_http_error;

/* Fills *e (snprintf-style message). Returns e for chaining. */
attnd_http_error *attnd_http_error_set(attnd_http_error *e, int status, const char *code,
                                       const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* How a request ended, set by the scheduler before on_done. */
typedef enum attnd_outcome {
    ATTND_PENDING = 0,   /* not finished yet                                    */
    ATTND_DONE_OK = 1,   /* outputs written                                     */
    ATTND_DONE_ERROR = 2,/* the library refused: see lib_status / lib_error     */
    ATTND_DONE_TIMEOUT = 3, /* deadline passed while queued: answer 504         */
    ATTND_DONE_CANCELLED = 4 /* dropped (shutdown without drain)                */
} attnd_outcome;

typedef struct attnd_request attnd_request;
typedef void (*attnd_done_fn)(attnd_request *req, void *ctx);

struct attnd_request {
    /* ---- what was asked (filled by the codec) ---- */
    int n_seqs;                /* >= 1                                            */
    int batched;               /* 1: query was B×T×E (answer nests the same way) */
    attn_seq *seqs;            /* n_seqs entries; outputs/weights preallocated    */
    int need_weights;
    int average_attn_weights;
    int64_t timeout_ms;        /* 0 = no deadline                                 */
    size_t n_tokens;           /* sum over seqs of T (+ S for cross-attention)    */
    size_t bytes;              /* memory this request holds, for accounting       */
    char id[128];              /* optional client "id", echoed; "" when absent    */

    /* ---- result (filled by the scheduler / worker) ---- */
    attnd_outcome outcome;
    attn_status lib_status;
    attn_error lib_error;
    int64_t queue_us;          /* enqueue -> batch start                          */
    int64_t compute_us;        /* the batch's compute time                        */
    int batch_size;            /* requests in the batch this one ran in           */

    /* ---- completion (set by the HTTP layer before submit) ---- */
    attnd_done_fn on_done;     /* called once, from a worker thread               */
    void *on_done_ctx;

    /* ---- scheduler-private ---- */
    int64_t enqueued_ns;
    int64_t deadline_ns;
    attnd_request *next;

    /* ---- codec-private: the single allocation owning every array above ---- */
    void *storage;
    int embed_out;             /* the model's E_out and h, for encoding the result */
    int num_heads;
};

/* Frees a request and every array it owns. NULL allowed. */
void attnd_request_free(attnd_request *req);

/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC). */
int64_t attnd_now_ns(void);

#endif
