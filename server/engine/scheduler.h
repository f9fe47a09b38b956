/* scheduler.h — one model's compute: a decode loop for stream steps and
 * dynamic batching for stateless requests (scheduler.c says how).
 *
 * Stateless requests wait in a bounded FIFO. A batch is cut when it holds
 * max_batch_requests requests, max_batch_tokens positions to project or
 * max_batch_kv_bytes of keys and values to read, or when its oldest request
 * has waited max_queue_delay_us. Stream steps (requests with a stream key:
 * session appends) run in the model's decode loop instead: one batch of steps
 * (an iteration) at a time, the next starting the moment the last ends, with
 * every step queued meanwhile plus at most one piece of prefill_chunk_rows
 * rows of one long append (or of one long causal one-shot, which runs in the
 * loop too, its keys and values kept with it between pieces). Worker threads run each batch as ONE attn_forward
 * over the concatenated (ragged) sequences of all its requests, fill each
 * request's result fields and call its on_done. Workers only do maths: no
 * JSON, no HTTP. A request whose deadline passes while queued is finished
 * with ATTND_DONE_TIMEOUT at its deadline and never computed.
 */
#ifndef ATTND_SCHEDULER_H
#define ATTND_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "core/request.h"

typedef struct attnd_sched_config {
    int max_batch_requests;      /* >= 1; 1 turns batching off               */
    size_t max_batch_tokens;     /* >= 1: positions projected (query rows, and
                                    the key rows of cross-attention)          */
    size_t max_batch_kv_bytes;   /* K/V bytes the batch's attention reads (keys
                                    of every sequence, cached or not); 0 = no
                                    limit                                     */
    int64_t max_queue_delay_us;  /* >= 0                                      */
    int64_t max_stream_wait_us;  /* >= 0; 0 = steps never wait (the default);
                                    opt-in: an iteration of fewer steps than
                                    the streams active lately waits this long */
    int prefill_chunk_rows;      /* 0..1048576: a longer append (or causal
                                    one-shot) is computed in pieces of this
                                    many rows' cost; 0 = whole                */
    int64_t inline_max_macs;       /* >= 0: a stateless request of at most this
                                    many multiply-adds may be computed on the
                                    submitting thread (run_inline); 0 = never   */
    int max_queue;               /* requests waiting, >= 1; beyond -> FULL    */
    int workers;                 /* worker threads, >= 1                      */
} attnd_sched_config;

/* Which part of a batch a report covers. An iteration with both steps and a
 * piece computes (and answers) its steps first, then its piece: two reports. */
typedef enum attnd_report_part {
    ATTND_REPORT_WHOLE = 0, /* the whole batch or iteration                   */
    ATTND_REPORT_STEPS = 1, /* an iteration's steps: counts the iteration, its
                               requests and tokens (the piece's included) */
    ATTND_REPORT_PIECE = 2  /* the same iteration's piece: its rows and time  */
} attnd_report_part;

/* What a worker reports after each batch (for metrics). */
typedef struct attnd_batch_report {
    int n_requests;     /* requests in it, a chunked request's piece included */
    size_t n_tokens;    /* positions it projected for them                    */
    int64_t compute_us; /* compute time of the part reported                  */
    int loop;           /* 1: an iteration of the decode loop                 */
    int steps;          /* the iteration's whole stream steps (loop only)     */
    int piece_rows;     /* rows of the chunked prefill's piece in it, or 0
                           (0 in a STEPS report: the PIECE report has them)   */
    attnd_report_part part;
    int inline_run;     /* 1: one request computed on its caller's thread
                           (attnd_scheduler_run_inline), not a worker's         */
} attnd_batch_report;

/* Called by a worker after each batch or part (a STEPS part before its steps
 * are answered; the last part of a decode-loop iteration before the loop may
 * start its next one); may be NULL. */
typedef void (*attnd_batch_hook)(void *ctx, const attnd_batch_report *report);

typedef struct attnd_scheduler attnd_scheduler;

typedef enum attnd_submit_result {
    ATTND_SUBMIT_OK = 0,     /* queued: on_done will be called exactly once   */
    ATTND_SUBMIT_FULL = 1,   /* max_queue requests are waiting                */
    ATTND_SUBMIT_CLOSED = 2  /* draining: accepts nothing more                */
} attnd_submit_result;

/* Starts the workers. layer is the default for requests that name none
 * (attnd_request.layer); a request naming its own (one model's versions share a
 * scheduler) runs with that one, and a batch holds requests of one layer only.
 * Every layer a request names must outlive the request; the default one is
 * borrowed and only read for requests without a layer.
 * Returns NULL on failure (bad config, allocation, thread creation) with a
 * sentence naming the problem in err[errlen] when err is non-NULL (the
 * start-up convention). */
attnd_scheduler *attnd_scheduler_create(const attn_layer *layer, const attnd_sched_config *cfg,
                                        attnd_batch_hook hook, void *hook_ctx, char *err,
                                        size_t errlen);

/* Queues req (which must have on_done set). On anything but ATTND_SUBMIT_OK the
 * request is untouched and still the caller's. Thread-safe. */
attnd_submit_result attnd_scheduler_submit(attnd_scheduler *s, attnd_request *req);

/* Computes req now on the calling thread, if that is what a worker would do
 * at once and it is small: stateless (no stream key, not chunked), at most
 * inline_max_macs multiply-adds, on an idle model (no request queued, no
 * worker computing: under load requests queue and batch as before) with no
 * batching delay (max_queue_delay_us 0: a worker would wait), not draining, and no other caller computing here for this scheduler (one
 * workspace, one thread at a time). Returns 1 with req's results filled
 * (outcome, batch_size 1, queue_us 0, compute_us; the batch hook called) and
 * on_done NOT called: the caller answers it. Returns 0 otherwise, req as it
 * was: submit it. Saves a small request the hand-off to a worker and back
 * (two thread wake-ups, costing more than its arithmetic). Thread-safe. */
int attnd_scheduler_run_inline(attnd_scheduler *s, attnd_request *req);

/* Requests waiting (not yet in a batch). Thread-safe, never blocks on compute. */
int attnd_scheduler_queue_depth(attnd_scheduler *s);

/* Stops accepting, finishes every queued and running request (each gets its
 * on_done), joins the workers. Idempotent. */
void attnd_scheduler_drain(attnd_scheduler *s);

/* Drains (if not yet) and frees. NULL allowed. */
void attnd_scheduler_free(attnd_scheduler *s);

/* The rows of the next piece of a chunked prefill of `layer`: `left` rows still
 * to compute, after `cached` rows in the cache (window as in attn_seq): the
 * most rows, at most `budget`, whose multiply-adds (projections, and each
 * causal row's attention over the positions it sees) are no more than `budget`
 * rows at the start of a sequence cost. A piece deep in a long prefill is so
 * fewer rows, and every piece holds the steps beside it about as long; but
 * never fewer than a quarter of `budget` (nor than the rows left), so a long
 * prefill takes at most four times the pieces of fixed `budget`-row pieces and
 * their per-iteration overhead. (An INT8 cache's pieces are then fitted to
 * its blocks.) */
int attnd_piece_rows(const attn_layer_info *layer, int window, long long cached, int left, int budget);

/* The same for a piece whose every row attends to all `keys` keys (a
 * non-causal one-shot over its own keys): the most rows, at most `budget`,
 * costing no more than `budget` rows at the start of a sequence, never fewer
 * than a quarter of `budget` (nor than the `left` rows left). */
int attnd_piece_rows_all_keys(const attn_layer_info *layer, long long keys, int left, int budget);

#endif
