/* request.h — the native form of one inference request inside attnd, the one
 * allocator every codec builds it with, and the wire-level error that codecs
 * and protocol handlers report (attnd_http_error).
 *
 * Life of a request: a protocol handler's codec (codec.c for /v1 and sessions,
 * codec_v2.c for v2) decodes a body into an attnd_request made by
 * attnd_request_alloc, owning all its arrays (inputs AND output buffers, sized
 * from the model); http.c hands it to the model's scheduler; a worker thread
 * fills the outputs and the result fields and calls on_done exactly once; the
 * handler encodes the response and http.c frees the request with
 * attnd_request_free. Nobody else frees it.
 *
 * attnd_http_error is for the edge only (codecs, handlers, http.c): inner
 * modules (scheduler, sessions, models) return their own result enums.
 */
#ifndef ATTND_REQUEST_H
#define ATTND_REQUEST_H

#include <stdarg.h>
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

/* Fills *e (snprintf-style message; e NULL allowed). Returns e for chaining. */
attnd_http_error *attnd_http_error_set(attnd_http_error *e, int status, const char *code,
                                       const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The same with a va_list. */
attnd_http_error *attnd_http_error_setv(attnd_http_error *e, int status, const char *code,
                                        const char *field, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));

/* attnd_http_error_set, returning -1, so decoders can `return attnd_http_fail(...)`. */
int attnd_http_fail(attnd_http_error *e, int status, const char *code, const char *field,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

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
    uint64_t stream;           /* nonzero: a step of this stream (a session's
                                  append): it runs in its model's decode loop
                                  (scheduler.h), a long append in chunks; a
                                  long causal one-shot also runs there, in
                                  chunks                                      */

    /* ---- result (filled by the scheduler / worker) ---- */
    attnd_outcome outcome;
    attn_status lib_status;
    attn_error lib_error;
    int64_t queue_us;          /* enqueue -> batch start                          */
    int64_t compute_us;        /* the batch's compute time                        */
    int batch_size;            /* requests in the batch this one ran in           */
    /* Stream steps and chunked one-shots only (0 otherwise): the decode loop's iterations (its
     * model's batches of steps, numbered from 1) this one computed in, first
     * and last, how many, and how many had started when it was queued (a step
     * that never waits behind more than the batch computing runs in
     * queued_after + 1). */
    int64_t iter_first, iter_last, queued_after;
    int iterations;

    /* ---- completion (set by the HTTP layer before submit) ---- */
    const attn_layer *layer;   /* the version of the model it was decoded for (one
                                  scheduler serves every version of a model; NULL
                                  = the scheduler's default layer)                */
    attnd_done_fn on_done;     /* called once, from a worker thread               */
    void *on_done_ctx;

    /* ---- scheduler-private ---- */
    size_t rows;               /* positions its batch projects for it            */
    size_t kv_bytes;           /* K/V bytes its attention reads                  */
    int64_t enqueued_ns;
    int64_t deadline_ns;
    int chunked;               /* computed in pieces over several iterations     */
    int done_rows;             /* rows of seqs[0] computed so far (chunked)      */
    int keys_done;             /* a non-causal chunked one-shot: rows of seqs[0]
                                  whose keys and values are in piece_kv          */
    int in_batch;              /* a piece of it is computing now (chunked)       */
    float *piece_kv;           /* a chunked one-shot's keys and values between its
                                  pieces (malloc'd by the scheduler at its first
                                  piece, freed before on_done), or NULL          */
    attnd_request *next;

    /* ---- the single allocation owning every array above (attnd_request_alloc) ---- */
    void *storage;
    int embed_out;             /* the model's E_out and h, for encoding the result */
    int num_heads;
};

/* The arrays a codec needs besides the request and its n_seqs attn_seq. */
typedef struct attnd_request_sizes {
    size_t n_ints;   /* int64_t: position ids                             */
    size_t n_floats; /* inputs, float masks, outputs, weights             */
    size_t n_bytes;  /* uint8_t: padding masks, bool masks                */
} attnd_request_sizes;

/* Where those arrays start in the block; each is advanced by the codec as it
 * carves one sequence's buffers after another. */
typedef struct attnd_request_cursor {
    int64_t *ints;
    float *floats;
    uint8_t *bytes;
} attnd_request_cursor;

/* A zero-filled request in ONE allocation, laid out as
 *   [attnd_request][attn_seq x n_seqs][int64_t x n_ints][float x n_floats]
 *   [uint8_t x n_bytes]
 * (the first three parts aligned for max_align_t), with req->seqs and *cur
 * pointing at their parts, req->storage at the block, req->bytes its size and
 * req->n_seqs = n_seqs. The codec fills the rest. Returns the request (free with
 * attnd_request_free), or NULL with *err: 413 limit_exceeded when the sizes
 * overflow, 500 internal on no memory. */
attnd_request *attnd_request_alloc(int n_seqs, const attnd_request_sizes *sizes,
                                   attnd_request_cursor *cur, attnd_http_error *err);

/* Frees a request and every array it owns. NULL allowed. */
void attnd_request_free(attnd_request *req);

/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC). */
int64_t attnd_now_ns(void);

#endif
