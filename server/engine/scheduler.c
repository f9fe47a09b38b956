/* scheduler.c — one model's compute: a decode loop for stream steps (session
 * appends, chunked when long) and dynamic batching for stateless requests,
 * both run by the model's worker threads as one attn_forward per batch.
 *
 * Queues. One mutex guards two FIFOs: `steps` (requests with a stream key:
 * session appends; and chunked one-shots, below) and `oneshot` (everything
 * else). Both count towards max_queue.
 *
 * Stateless batching. A one-shot batch is the longest FIFO prefix of live
 * requests with count <= max_batch_requests, rows <= max_batch_tokens and
 * kv_bytes <= max_batch_kv_bytes (the first request always goes in, so an
 * oversized one runs alone). rows are the positions the batch's projection
 * GEMM computes (query rows, plus the key rows of cross-attention); kv_bytes
 * the keys and values its attention reads. It is cut when full, when its
 * oldest request has waited max_queue_delay_us, or when draining.
 *
 * The decode loop (vLLM's iteration-level scheduling). At most one batch of
 * steps computes at a time per model: an *iteration*. When none computes and
 * steps are queued, the next iteration starts at once with every queued step
 * that fits the three budgets (the oldest always goes in; a step that does not
 * fit waits for the next iteration, where it is older than the newcomers) plus
 * at most one *piece* of one long append: an append of more than
 * prefill_chunk_rows rows (self-attention over the session's cache, no
 * weights or masks asked) is computed in pieces that each cost what
 * prefill_chunk_rows rows at the start of a sequence cost (rows deeper in a
 * long prefill attend to more positions, so its later pieces are fewer rows,
 * down to a quarter of prefill_chunk_rows),
 * one piece per iteration, the oldest such append first; it stays queued between
 * its pieces, each piece appending its rows to the cache and attending to
 * everything before it, which is what the whole append computes (for an INT8
 * cache a piece ends on a block boundary, so each block is quantised once, as
 * the whole append would). A causal one-shot of one sequence of more than
 * prefill_chunk_rows rows (no masks, no weights, K/V within ONESHOT_KV_MAX)
 * is a prefill without a session: it joins the steps FIFO and is chunked the
 * same way, its pieces appending to a contiguous F32 cache of its own
 * (piece_kv, allocated at its first piece, freed in finish_all; computed whole
 * when that allocation fails). So is a non-causal one (no window, a layer
 * without rotary positions): its first pieces project its keys and values
 * into piece_kv (key_rows rows each, no query row), then each piece's query
 * rows attend to all of them as a fixed memory (attnd_piece_rows_all_keys). Only the oldest chunked request advances, so a
 * model holds at most one such buffer. Steps that arrive while an iteration computes join
 * the next one, which starts the moment this one ends. An iteration with both
 * steps and a piece computes its steps first and answers them (while the loop
 * stays busy), then its piece: a closed-loop stream's next step then arrives
 * while the piece computes and joins the very next iteration, instead of
 * missing it and waiting through two pieces. So no timer waits for a
 * stream, a lone step on an idle model starts at once, and a decode step waits
 * behind at most the piece of the iteration in flight, never a whole
 * prefill. Waits are opt-in only: max_queue_delay_us (0 by default) holds an
 * iteration as it holds a stateless batch, until its oldest step has waited
 * that long or max_batch_requests steps are queued; max_stream_wait_us (0 by
 * default) holds one that would have fewer steps than the streams active
 * lately (streams.h) up to that long after its oldest step's arrival (many
 * independent closed-loop clients then merge their steps; a client that
 * interleaves its own sessions would wait for itself).
 *
 * Sharing. Workers take turns as the single *collector*, which cuts the next
 * batch; the others compute or wait for the role (cv_lead). With two or more
 * workers one can compute stateless batches while another runs the loop, so
 * neither kind waits for the other; with one worker, when both are ready the
 * one whose oldest request is older goes first, so neither starves. Cores: an
 * iteration runs on the workspace with one thread per core (the library's
 * pool); a stateless batch does too when nothing else of the model computes,
 * else it runs on its worker's own thread (the two then share the cores).
 *
 * Deadlines. A request whose deadline passes while queued (or between two
 * pieces) is finished with ATTND_DONE_TIMEOUT at its deadline by the reaper
 * thread, which sleeps until the earliest deadline queued; never computed.
 *
 * Every on_done, and the batch hook, runs with the mutex released.
 */
#include "engine/scheduler.h"

#include "engine/streams.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Threads beyond this are a configuration mistake, not a plan. */
#define SCHED_MAX_WORKERS 256
/* Likewise a batching delay beyond an hour (also keeps ns arithmetic far from overflow). */
#define SCHED_MAX_DELAY_US INT64_C(3600000000)
/* Pieces beyond this many rows are a configuration mistake. */
#define SCHED_MAX_CHUNK_ROWS (1 << 20)
/* A causal one-shot is chunked only if its keys and values fit this (the
 * bound a workspace's scratch has by default, attn_workspace_options); a
 * larger one runs whole, in the library's streamed plan. */
#define ONESHOT_KV_MAX ((size_t)64 << 20)
/* A stream counts as active for this long after its last step was cut into a
 * batch (at least: three batch durations when batches take longer). */
#define STREAM_WINDOW_NS INT64_C(100000000)

/* A worker's private state: its thread, its scratch, and the growable array
 * into which it concatenates a batch's sequences. */
typedef struct sched_worker {
    attnd_scheduler *s;
    pthread_t thread;
    attn_workspace *ws;      /* owned: the calling thread only                */
    attn_workspace *ws_wide; /* owned: every core (NULL with one core)        */
    attn_seq *seqs;          /* owned, seq_cap entries */
    int seq_cap;
} sched_worker;

/* A singly linked list of requests, through attnd_request.next. */
typedef struct req_list {
    attnd_request *head, *tail;
    int count;
    size_t tokens; /* sum of n_tokens (for the batch hook and metrics) */
} req_list;

/* What the collector hands a worker. */
typedef struct sched_job {
    req_list batch;        /* whole requests                                  */
    attnd_request *piece;  /* a chunked append's piece this iteration, or NULL */
    int piece_rows;
    int piece_keys;        /* the piece projects keys and values of piece_rows
                              rows only (a non-causal one-shot's first pieces) */
    int loop;              /* an iteration of the decode loop                  */
    int64_t iteration;
    req_list expired;
} sched_job;

struct attnd_scheduler {
    const attn_layer *layer; /* borrowed: for requests that name none          */
    attnd_sched_config cfg;
    attnd_batch_hook hook;
    void *hook_ctx;

    pthread_mutex_t mu;
    pthread_cond_t cv_queue; /* the collector waits here: submit, delay, loop end, drain */
    pthread_cond_t cv_lead;  /* idle workers wait here to become collector    */
    pthread_cond_t cv_reap;  /* the reaper waits here for the earliest deadline */
    req_list oneshot;        /* stateless requests, FIFO (mu)                 */
    req_list steps;          /* stream steps, FIFO; a chunked append stays here
                                between its pieces (mu)                        */
    int collecting;          /* a worker holds the collector role (mu)        */
    int closing;             /* drain started: no submits, no delay (mu)      */
    int sync_ready;          /* mutexes and condvars initialised              */
    int loop_busy;           /* an iteration computes (mu)                    */
    int64_t iterations;      /* iterations started (mu)                       */
    int64_t reap_wake_ns;    /* when the reaper wakes next; INT64_MAX: never (mu) */
    int reap_stop;           /* (mu)                                          */
    int reaper_started;
    pthread_t reaper;

    attnd_streams streams;   /* streams whose steps were cut lately (mu)     */
    _Atomic int64_t last_batch_ns; /* the last iteration's compute time        */
    _Atomic int computing;   /* workers inside run_batch now, and a request
                                computed inline                               */
    pthread_mutex_t drain_mu; /* serialises drain; guards joined              */
    int joined;
    sched_worker *workers;   /* cfg.workers entries                          */
    int n_started;           /* threads actually created                     */
    attn_workspace *ws_inline; /* owned: a small request run on its caller's
                                thread (attnd_scheduler_run_inline)            */
    _Atomic int inline_busy;   /* ws_inline is in use                             */
};

/* ------------------------------------------------------------ small helpers */

static void list_push(req_list *l, attnd_request *r)
{
    r->next = NULL;
    if (l->tail) l->tail->next = r;
    else l->head = r;
    l->tail = r;
    l->count++;
    l->tokens += r->n_tokens;
}

/* Unlinks r, whose predecessor in l is prev (NULL when r is the head). */
static void list_unlink(req_list *l, attnd_request *prev, attnd_request *r)
{
    if (prev) prev->next = r->next;
    else l->head = r->next;
    if (l->tail == r) l->tail = prev;
    r->next = NULL;
    l->count--;
    l->tokens -= r->n_tokens;
}

/* Unlinks r from l, finding its predecessor. */
static void list_remove(req_list *l, attnd_request *r)
{
    attnd_request *prev = NULL;
    for (attnd_request *p = l->head; p && p != r; p = p->next) prev = p;
    list_unlink(l, prev, r);
}

static int64_t us_between(int64_t from_ns, int64_t to_ns)
{
    return to_ns > from_ns ? (to_ns - from_ns) / 1000 : 0;
}

static struct timespec mono_timespec(int64_t ns)
{
    struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };
    return ts;
}

static int expired_at(const attnd_request *r, int64_t now)
{
    return r->deadline_ns != 0 && now >= r->deadline_ns;
}

/* Calls on_done for every request of l. Each request may be freed by its
 * callback, so next is read first. Called without the mutex. */
static void finish_all(req_list *l)
{
    attnd_request *r = l->head;
    while (r) {
        attnd_request *next = r->next;
        r->next = NULL;
        free(r->piece_kv);
        r->piece_kv = NULL;
        r->on_done(r, r->on_done_ctx);
        r = next;
    }
    memset(l, 0, sizeof *l);
}

/* Answers requests whose deadline passed while queued. */
static void finish_expired(req_list *expired)
{
    int64_t now = attnd_now_ns();
    for (attnd_request *r = expired->head; r; r = r->next) {
        r->outcome = ATTND_DONE_TIMEOUT;
        if (r->iterations == 0) r->queue_us = us_between(r->enqueued_ns, now);
        r->batch_size = 0;
    }
    finish_all(expired);
}

/* ------------------------------------------------------------ measuring */

/* The layer req computes with: its own (a model version), or the default. */
static const attn_layer *layer_of(const attnd_scheduler *s, const attnd_request *r)
{
    return r->layer ? r->layer : s->layer;
}

/* The layer's KV heads (g; h without GQA). */
static size_t kv_heads(const attn_layer_info *in)
{
    return (size_t)(in->num_kv_heads > 0 ? in->num_kv_heads : in->num_heads);
}

/* Bytes of one position's keys and values (g * (d_k + d_v) floats). */
static size_t kv_row_bytes(const attn_layer_info *in)
{
    return kv_heads(in) * (size_t)(in->head_dim_k + in->head_dim_v) * sizeof(float);
}

/* The keys and values a one-shot of t rows projects, in bytes: what a
 * chunked one-shot keeps in piece_kv between its pieces. */
static size_t oneshot_kv_bytes(const attn_layer_info *in, int t)
{
    return (size_t)t * kv_row_bytes(in);
}

/* What req costs a batch: the positions projected for it (its query rows, and
 * the key rows of cross-attention; a cache's rows are projected already) and
 * the key/value bytes its attention reads (every key it attends to, g * (d_k +
 * d_v) floats each); and whether it is computed in pieces. */
static void measure(const attnd_scheduler *s, attnd_request *req)
{
    attn_layer_info in;
    attn_layer_get_info(layer_of(s, req), &in);
    const size_t row_bytes = kv_row_bytes(&in);
    size_t rows = 0, keys = 0;
    for (int i = 0; i < req->n_seqs; i++) {
        const attn_seq *q = &req->seqs[i];
        rows += (size_t)q->t + (q->key ? (size_t)q->s : 0);
        keys += (size_t)q->s;
    }
    req->rows = rows;
    req->kv_bytes = keys > SIZE_MAX / row_bytes ? SIZE_MAX : keys * row_bytes;
    const attn_seq *q = &req->seqs[0];
    int plain = s->cfg.prefill_chunk_rows > 0 && req->n_seqs == 1 && q->t > s->cfg.prefill_chunk_rows &&
                q->key == NULL && q->weights == NULL && q->attn_mask_kind == ATTN_MASK_NONE &&
                q->key_padding_mask == NULL && q->key_length == 0;
    int append = req->stream != 0 && q->cache_k != NULL && q->cache_append;
    /* a one-shot over keys of its own: causal (its pieces append them), or
     * attending to all of them, projected first (no positions: non-rotary,
     * no window) */
    int oneshot = req->stream == 0 && q->cache_k == NULL && oneshot_kv_bytes(&in, q->t) <= ONESHOT_KV_MAX &&
                  (q->is_causal || (q->window == 0 && in.rope.style == ATTN_ROPE_NONE));
    req->chunked = plain && (append || oneshot);
    req->done_rows = 0;
    req->keys_done = 0;
    req->in_batch = 0;
    req->iter_first = req->iter_last = 0;
    req->iterations = 0;
    req->compute_us = 0;
}

/* Multiply-adds of one row's key and value projections. */
static double kv_proj_macs(const attn_layer_info *in)
{
    const double g = (double)kv_heads(in);
    return in->embed_k * g * in->head_dim_k + in->embed_v * g * in->head_dim_v;
}

/* Multiply-adds of one query row's projections: Q, and W_O when there is one. */
static double query_proj_macs(const attn_layer_info *in)
{
    const double hd = (double)in->num_heads;
    return in->embed_q * hd * in->head_dim_k + (in->has_out_proj ? hd * in->head_dim_v * in->embed_out : 0);
}

/* Multiply-adds of one query row's attention to one key (Q·K and P·V). */
static double per_key_macs(const attn_layer_info *in)
{
    return (double)in->num_heads * (in->head_dim_k + in->head_dim_v);
}

/* Multiply-adds of n causal rows of a layer appended after `cached` rows (the
 * projections of each row, and each row's attention over the positions it
 * sees: all before it and itself, at most `window` when windowed). */
static double piece_cost(const attn_layer_info *in, int window, long long cached, long long n)
{
    const double proj = query_proj_macs(in) + kv_proj_macs(in);
    const double per_key = per_key_macs(in);
    /* rows i in [0, n) see cached + i + 1 positions, capped at window */
    long long below = window > 0 ? window - cached - 1 : n; /* rows under the cap */
    below = below < 0 ? 0 : below > n ? n : below;
    double seen = (double)below * (double)cached + (double)below * (double)(below + 1) / 2 +
                  (double)(n - below) * (window > 0 ? window : 0);
    return (double)n * proj + per_key * seen;
}

int attnd_piece_rows(const attn_layer_info *in, int window, long long cached, int left, int budget)
{
    const int hi0 = left < budget ? left : budget, min_rows = (budget + 3) / 4;
    int lo = min_rows < hi0 ? min_rows : hi0, hi = hi0;
    const double allowed = piece_cost(in, window, 0, budget);
    while (lo < hi) { /* the most rows within the cost: cost grows with rows */
        int mid = lo + (hi - lo + 1) / 2;
        if (piece_cost(in, window, cached, mid) <= allowed) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int attnd_piece_rows_all_keys(const attn_layer_info *in, long long keys, int left, int budget)
{
    const int hi = left < budget ? left : budget, min_rows = (budget + 3) / 4;
    /* a row that sees all `keys` costs what one causal row after keys - 1 does */
    long long n = (long long)(piece_cost(in, 0, 0, budget) / piece_cost(in, 0, keys - 1, 1));
    if (n < min_rows) n = min_rows;
    return n < hi ? (int)n : hi;
}

/* Multiply-adds of a whole request (its rows' projections, the key rows of
 * cross-attention, every query row against every key; masks ignored, so an
 * upper bound): what decides whether it may run on its caller's thread. */
static double request_macs(const attnd_scheduler *s, const attnd_request *req)
{
    attn_layer_info in;
    attn_layer_get_info(layer_of(s, req), &in);
    double macs = 0;
    for (int i = 0; i < req->n_seqs; i++) {
        const attn_seq *q = &req->seqs[i];
        const double kv_rows = q->key ? q->s : q->t; /* cross-attention's keys, or its own rows */
        macs += q->t * query_proj_macs(&in) + kv_rows * kv_proj_macs(&in) + (double)q->t * q->s * per_key_macs(&in);
    }
    return macs;
}

/* A chunked one-shot that is not causal: every piece attends to all of its
 * keys, so its first pieces project keys and values only (key_rows rows
 * each), then its query pieces follow. */
static int keys_first(const attnd_request *r) { return r->stream == 0 && !r->seqs[0].is_causal; }

/* keys_first, with keys still to project: its next piece is a keys piece. */
static int keys_pending(const attnd_request *r) { return keys_first(r) && r->keys_done < r->seqs[0].t; }

/* Where the values start in a chunked one-shot's piece_kv: after its t rows
 * of keys. */
static float *piece_values(const attnd_request *r, const attn_layer_info *in)
{
    return r->piece_kv + (size_t)r->seqs[0].t * kv_heads(in) * (size_t)in->head_dim_k;
}

/* Rows of keys and values a piece projects: those costing no more than
 * `budget` rows at the start of a sequence (all of a row's projections and
 * attention), at least a quarter of `budget`, at most the `left` rows left. */
static int key_rows(const attn_layer_info *in, int left, int budget)
{
    const double kv = kv_proj_macs(in);
    long long n = (long long)(piece_cost(in, 0, 0, budget) / (kv > 0 ? kv : 1));
    const int min_rows = (budget + 3) / 4;
    if (n < min_rows) n = min_rows;
    return n < left ? (int)n : left;
}

/* The rows of r's next piece (attnd_piece_rows), and for an INT8 paged cache
 * ending on a block boundary unless it is the last (each block then quantised
 * once, as by the whole append; a piece may so exceed its cost by a block). */
static int piece_rows(const attnd_scheduler *s, const attnd_request *r, int budget)
{
    const attn_seq *q = &r->seqs[0];
    attn_layer_info in;
    attn_layer_get_info(layer_of(s, r), &in);
    const long long start = (long long)q->cache_len + r->done_rows;
    const int left = q->t - r->done_rows;
    if (keys_pending(r)) return key_rows(&in, q->t - r->keys_done, budget);
    if (keys_first(r)) return attnd_piece_rows_all_keys(&in, q->t, left, budget);
    const int n = attnd_piece_rows(&in, q->window, start, left, budget);
    int b = q->cache_block_rows;
    if (n == left || b <= 0 || q->cache_dtype != ATTN_KV_INT8) return n;
    long long end = start + n;
    long long aligned = end / b * b;
    if (aligned <= start) aligned = (start / b + 1) * b; /* budget < a block: one block */
    long long m = aligned - start;
    return m < left ? (int)m : left;
}

/* Piece [done_rows, done_rows + n) of r's append as a sequence of its own:
 * its query and output rows, the cache as it stands before them (the earlier
 * pieces' rows included), and their positions. */
static attn_seq piece_view(const attnd_scheduler *s, const attnd_request *r, int n)
{
    attn_layer_info in;
    attn_layer_get_info(layer_of(s, r), &in);
    const attn_seq *q = &r->seqs[0];
    const int c0 = r->done_rows;
    attn_seq v = *q;
    v.t = n;
    v.query = q->query + (size_t)c0 * (size_t)in.embed_q;
    v.output = q->output + (size_t)c0 * (size_t)in.embed_out;
    if (r->piece_kv) { /* a one-shot: its own contiguous F32 cache of its rows */
        v.cache_k = r->piece_kv;
        v.cache_v = piece_values(r, &in);
        v.cache_append = 1;
    }
    if (r->piece_kv && keys_first(r)) { /* every key there already: a fixed memory */
        v.cache_append = 0;
        v.cache_len = v.s = q->t;
        return v;
    }
    v.cache_len = q->cache_len + c0;
    v.s = v.cache_len + n;
    if (q->position_ids) v.position_ids = q->position_ids + c0;
    return v;
}

/* ------------------------------------------------------------ batch cutting */

/* Expires dead requests of l into *expired, skipping a computing piece. */
static void reap_list(req_list *l, int64_t now, req_list *expired, int64_t *earliest)
{
    attnd_request *prev = NULL, *r = l->head;
    while (r) {
        attnd_request *next = r->next;
        if (!r->in_batch && expired_at(r, now)) {
            list_unlink(l, prev, r);
            list_push(expired, r);
        } else {
            if (!r->in_batch && r->deadline_ns != 0 && r->deadline_ns < *earliest)
                *earliest = r->deadline_ns;
            prev = r;
        }
        r = next;
    }
}

/* Does a one-shot batch start now? Scans the oneshot queue once (mu held):
 * expired ones go into *expired. Returns 1 with the batch moved into *batch,
 * or 0 with *ready_ns set to when the head's delay ends (INT64_MAX: empty). */
static int cut_oneshot(attnd_scheduler *s, int64_t now, req_list *batch, req_list *expired,
                       int64_t *ready_ns)
{
    req_list *q = &s->oneshot;
    attnd_request *prev = NULL, *r = q->head, *last_in = NULL;
    int count = 0, full = 0;
    size_t tokens = 0, rows = 0, kv_bytes = 0;

    *ready_ns = INT64_MAX;
    while (r) {
        attnd_request *next = r->next;
        if (expired_at(r, now)) {
            list_unlink(q, prev, r);
            list_push(expired, r);
            r = next;
            continue;
        }
        if (count == s->cfg.max_batch_requests ||
            (count > 0 && (layer_of(s, r) != layer_of(s, q->head) || /* one layer a batch */
                           rows >= s->cfg.max_batch_tokens ||
                           r->rows > s->cfg.max_batch_tokens - rows ||
                           kv_bytes >= s->cfg.max_batch_kv_bytes ||
                           r->kv_bytes > s->cfg.max_batch_kv_bytes - kv_bytes))) {
            full = 1;
            break;
        }
        rows += r->rows;
        kv_bytes += r->kv_bytes;
        tokens += r->n_tokens;
        count++;
        last_in = r;
        prev = r;
        r = next;
    }
    if (count == 0) return 0;
    if (count == s->cfg.max_batch_requests || rows >= s->cfg.max_batch_tokens ||
        kv_bytes >= s->cfg.max_batch_kv_bytes)
        full = 1;
    int64_t ready = q->head->enqueued_ns + s->cfg.max_queue_delay_us * 1000;
    if (!full && !s->closing && now < ready) {
        *ready_ns = ready;
        return 0;
    }
    batch->head = q->head;
    batch->tail = last_in;
    batch->count = count;
    batch->tokens = tokens;
    q->head = last_in->next;
    if (q->head == NULL) q->tail = NULL;
    last_in->next = NULL;
    q->count -= count;
    q->tokens -= tokens;
    return 1;
}

/* The oldest step not computing now, or NULL. */
static attnd_request *first_step(const attnd_scheduler *s)
{
    for (attnd_request *r = s->steps.head; r; r = r->next)
        if (!r->in_batch) return r;
    return NULL;
}

/* When the next iteration may start (mu held, loop idle, steps queued): now,
 * unless opted into waits: max_queue_delay_us after its oldest step's arrival
 * (as for stateless batches) until max_batch_requests steps are queued, and
 * with max_stream_wait_us, until the streams active lately have all queued a
 * step or that long after the oldest one's arrival. */
static int64_t loop_ready_ns(attnd_scheduler *s, int64_t now, const attnd_request *oldest)
{
    if (s->closing || (s->cfg.max_queue_delay_us == 0 && s->cfg.max_stream_wait_us == 0)) return now;
    int queued = 0;
    for (const attnd_request *r = s->steps.head; r; r = r->next) queued++;
    if (queued >= s->cfg.max_batch_requests) return now;
    int64_t ready = oldest->enqueued_ns + s->cfg.max_queue_delay_us * 1000;
    if (s->cfg.max_stream_wait_us == 0) return ready;
    int64_t window = 3 * atomic_load(&s->last_batch_ns);
    if (window < STREAM_WINDOW_NS) window = STREAM_WINDOW_NS;
    if (attnd_streams_active(&s->streams, now, window) <= queued) return ready;
    int64_t streams = oldest->enqueued_ns + s->cfg.max_stream_wait_us * 1000;
    return streams > ready ? streams : ready;
}

/* Cuts the next iteration (mu held, loop idle): every queued step that fits
 * the budgets, in FIFO order (one layer an iteration: the oldest step's), and
 * one piece of the oldest chunked append. */
static void cut_iteration(attnd_scheduler *s, int64_t now, sched_job *job)
{
    req_list *q = &s->steps;
    const attn_layer *layer = NULL;
    attnd_request *prev = NULL, *r = q->head;
    size_t rows = 0, kv_bytes = 0;
    int count = 0;
    while (r) {
        attnd_request *next = r->next;
        if (r->in_batch) {
            prev = r;
            r = next;
            continue;
        }
        if (expired_at(r, now)) {
            list_unlink(q, prev, r);
            list_push(&job->expired, r);
            r = next;
            continue;
        }
        int take = 0;
        if (layer == NULL) layer = layer_of(s, r);
        if (layer_of(s, r) != layer) {
            take = 0;
        } else if (r->chunked) {
            if (job->piece == NULL) {
                job->piece = r;
                job->piece_rows = piece_rows(s, r, s->cfg.prefill_chunk_rows);
                job->piece_keys = keys_pending(r);
                r->in_batch = 1;
            }
        } else if (count == 0 || (count < s->cfg.max_batch_requests &&
                                  r->rows <= s->cfg.max_batch_tokens - rows &&
                                  rows < s->cfg.max_batch_tokens &&
                                  kv_bytes < s->cfg.max_batch_kv_bytes &&
                                  r->kv_bytes <= s->cfg.max_batch_kv_bytes - kv_bytes)) {
            take = 1;
        }
        if (take) {
            list_unlink(q, prev, r);
            list_push(&job->batch, r);
            rows += r->rows;
            kv_bytes += r->kv_bytes;
            count++;
        } else {
            prev = r;
        }
        r = next;
    }
    if (job->batch.count == 0 && job->piece == NULL) return; /* everything expired */
    job->loop = 1;
    job->iteration = ++s->iterations;
    s->loop_busy = 1;
    for (attnd_request *b = job->batch.head; b; b = b->next) attnd_streams_seen(&s->streams, b->stream, now);
    if (job->piece) attnd_streams_seen(&s->streams, job->piece->stream, now);
}

/* The collector's job (mu held, collector role held): waits until there is a
 * batch to run or expired requests to answer, or until draining leaves both
 * queues empty. Returns 0 in that last case: the worker should exit. */
static int collect(attnd_scheduler *s, sched_job *job)
{
    for (;;) {
        int64_t now = attnd_now_ns(), one_ready = INT64_MAX, loop_ready = INT64_MAX;
        attnd_request *oldest = s->loop_busy ? NULL : first_step(s);
        if (oldest) loop_ready = loop_ready_ns(s, now, oldest);
        int one = cut_oneshot(s, now, &job->batch, &job->expired, &one_ready);
        int loop = oldest && now >= loop_ready;
        if (one && loop && oldest->enqueued_ns < job->batch.head->enqueued_ns) {
            /* Both ready: the older head goes first; the batch goes back. */
            job->batch.tail->next = s->oneshot.head;
            s->oneshot.head = job->batch.head;
            if (s->oneshot.tail == NULL) s->oneshot.tail = job->batch.tail;
            s->oneshot.count += job->batch.count;
            s->oneshot.tokens += job->batch.tokens;
            memset(&job->batch, 0, sizeof job->batch);
            one = 0;
        }
        if (one) return 1;
        if (loop) {
            cut_iteration(s, now, job);
            if (job->loop || job->expired.count) return 1;
            continue;
        }
        if (job->expired.count > 0) return 1;
        if (s->closing && s->oneshot.count == 0 && s->steps.count == 0) return 0;
        int64_t wake = one_ready < loop_ready ? one_ready : loop_ready;
        if (wake == INT64_MAX) {
            pthread_cond_wait(&s->cv_queue, &s->mu);
        } else {
            struct timespec ts = mono_timespec(wake);
            pthread_cond_timedwait(&s->cv_queue, &s->mu, &ts);
        }
    }
}

/* ------------------------------------------------------------ running */

/* Makes room for n sequences in w->seqs. Returns 0, or -1 on allocation
 * failure (the old array is kept). */
static int reserve_seqs(sched_worker *w, long n)
{
    if (n <= w->seq_cap) return 0;
    if (n > INT_MAX / 2) return -1;
    int cap = w->seq_cap ? w->seq_cap : 16;
    while (cap < n) cap *= 2;
    attn_seq *p = realloc(w->seqs, (size_t)cap * sizeof *p);
    if (p == NULL) return -1;
    w->seqs = p;
    w->seq_cap = cap;
    return 0;
}

static void set_result(attnd_request *r, attn_status st)
{
    r->lib_status = st;
    r->outcome = st == ATTN_OK ? ATTND_DONE_OK : ATTND_DONE_ERROR;
}

/* Runs every request of the batch (and piece, when not NULL) alone: the fallback when
 * the joint forward failed, so one bad request cannot fail the others, and
 * each error names a sequence index of its own request. */
static void run_each_alone(sched_worker *w, attn_workspace *ws, sched_job *job, const attn_seq *piece)
{
    for (attnd_request *r = job->batch.head; r; r = r->next)
        set_result(r, attn_forward(layer_of(w->s, r), r->seqs, r->n_seqs, ws, NULL, &r->lib_error));
    if (piece)
        set_result(job->piece, attn_forward(layer_of(w->s, job->piece), piece, 1, ws, NULL,
                                            &job->piece->lib_error));
}

/* The iteration ended (mu taken here): the loop is free, the piece advanced;
 * a finished piece's request (done, failed, or past its deadline) goes into
 * *done. */
static void iteration_ended(attnd_scheduler *s, sched_job *job, req_list *done)
{
    pthread_mutex_lock(&s->mu);
    s->loop_busy = 0;
    attnd_request *p = job->piece;
    if (p) {
        p->in_batch = 0;
        if (p->outcome == ATTND_DONE_OK && job->piece_keys) p->keys_done += job->piece_rows;
        else if (p->outcome == ATTND_DONE_OK) p->done_rows += job->piece_rows;
        int end = p->outcome != ATTND_DONE_OK || p->done_rows >= p->seqs[0].t;
        if (!end && expired_at(p, attnd_now_ns())) {
            p->outcome = ATTND_DONE_TIMEOUT;
            end = 1;
        }
        if (end) {
            list_remove(&s->steps, p);
            list_push(done, p);
        } else {
            p->outcome = ATTND_PENDING;
            if (p->deadline_ns != 0 && p->deadline_ns < s->reap_wake_ns) pthread_cond_signal(&s->cv_reap);
        }
    }
    pthread_cond_signal(&s->cv_queue);
    pthread_mutex_unlock(&s->mu);
}

static void computed_whole(attnd_request *r, sched_job *job);

/* Before a chunked one-shot's first piece: its keys and values get a buffer
 * of their own (piece_kv), which a causal one's pieces append to as a
 * session's append does to the session's cache, and a non-causal one's first
 * pieces fill (project_keys). Returns 1, or 0 when that buffer cannot be had:
 * the request is then computed whole in this iteration. */
static int first_piece_ready(const attnd_scheduler *s, sched_job *job)
{
    attnd_request *r = job->piece;
    if (r->stream != 0 || r->piece_kv != NULL) return 1;
    attn_layer_info in;
    attn_layer_get_info(layer_of(s, r), &in);
    r->piece_kv = malloc(oneshot_kv_bytes(&in, r->seqs[0].t));
    if (r->piece_kv) return 1;
    computed_whole(r, job);
    return 0;
}

/* The piece is the whole of r after all (no buffer for its keys, or they
 * could not be projected). */
static void computed_whole(attnd_request *r, sched_job *job)
{
    free(r->piece_kv);
    r->piece_kv = NULL;
    job->piece_keys = 0;
    job->piece_rows = r->seqs[0].t - r->done_rows; /* done_rows is 0: the whole request */
}

/* A keys piece: rows [keys_done, keys_done + piece_rows) of r's keys and
 * values into piece_kv (on this thread). 0, or -1 (then computed whole). */
static int project_keys(const attnd_scheduler *s, sched_job *job)
{
    attnd_request *r = job->piece;
    const attn_seq *q = &r->seqs[0];
    attn_layer_info in;
    attn_layer_get_info(layer_of(s, r), &in);
    const size_t kw = kv_heads(&in) * (size_t)in.head_dim_k, vw = kv_heads(&in) * (size_t)in.head_dim_v;
    const size_t r0 = (size_t)r->keys_done;
    const float *x = q->query + r0 * (size_t)in.embed_q;
    float *k = r->piece_kv + r0 * kw, *v = piece_values(r, &in) + r0 * vw;
    if (attn_project_kv(layer_of(s, r), x, x, job->piece_rows, k, v, NULL) == ATTN_OK) return 0;
    computed_whole(r, job);
    return -1;
}

/* Stamps what the job's requests report: queue time (a piece's at its first
 * iteration), batch size, and for an iteration its number. */
static void stamp_job(sched_job *job, int64_t start, int members)
{
    for (attnd_request *r = job->batch.head; r; r = r->next) {
        r->queue_us = us_between(r->enqueued_ns, start);
        r->batch_size = members;
        if (job->loop) {
            r->iter_first = r->iter_last = job->iteration;
            r->iterations = 1;
        }
    }
    attnd_request *p = job->piece;
    if (p == NULL) return;
    if (p->iterations == 0) p->queue_us = us_between(p->enqueued_ns, start);
    p->batch_size = members;
    if (job->loop) {
        if (p->iterations++ == 0) p->iter_first = job->iteration;
        p->iter_last = job->iteration;
    }
}

/* Readies the job's piece (a keys piece's projection, answered here; its
 * buffer: `buffered` is first_piece_ready's answer, or -1 when it has not
 * run yet). Returns the view its forward computes, in *view, or NULL when no
 * query rows of it are in the forward (no piece, or a keys piece). */
static const attn_seq *prepare_piece(const attnd_scheduler *s, sched_job *job, int buffered, attn_seq *view)
{
    if (job->piece == NULL) return NULL;
    if (buffered < 0) buffered = first_piece_ready(s, job);
    int ready = buffered && (!job->piece_keys || project_keys(s, job) == 0);
    if (ready && job->piece_keys) {
        set_result(job->piece, ATTN_OK); /* its keys: no query rows in this forward */
        return NULL;
    }
    *view = ready ? piece_view(s, job->piece, job->piece_rows) : job->piece->seqs[0];
    return view;
}

/* One attn_forward of every sequence of the job's batch and of own (a piece's
 * view, or NULL); each alone if that fails or cannot be packed. */
static void compute_seqs(sched_worker *w, attn_workspace *ws, sched_job *job, const attn_seq *own)
{
    attnd_scheduler *s = w->s;
    req_list *batch = &job->batch;
    long n_seqs = own != NULL;
    for (attnd_request *r = batch->head; r; r = r->next) n_seqs += r->n_seqs;
    if (n_seqs == 0) return; /* a keys piece alone: projected already */
    if (batch->count + (own != NULL) == 1 || reserve_seqs(w, n_seqs) != 0) {
        run_each_alone(w, ws, job, own); /* one request; or no memory to pack: still answer */
        return;
    }
    int k = 0;
    for (attnd_request *r = batch->head; r; r = r->next) {
        memcpy(w->seqs + k, r->seqs, (size_t)r->n_seqs * sizeof *r->seqs);
        k += r->n_seqs;
    }
    if (own) w->seqs[k++] = *own;
    const attn_layer *layer = layer_of(s, batch->head ? batch->head : job->piece);
    attn_error err;
    if (attn_forward(layer, w->seqs, k, ws, NULL, &err) != ATTN_OK) {
        run_each_alone(w, ws, job, own);
        return;
    }
    for (attnd_request *r = batch->head; r; r = r->next) set_result(r, ATTN_OK);
    if (own) set_result(job->piece, ATTN_OK);
}

static void report(const attnd_scheduler *s, const sched_job *job, attnd_report_part part, int members,
                   int64_t compute_us)
{
    if (s->hook == NULL) return;
    const int rows = job->piece ? job->piece_rows : 0;
    const attnd_batch_report r = {
        .n_requests = part == ATTND_REPORT_PIECE ? 1 : members,
        .n_tokens = (part == ATTND_REPORT_PIECE ? 0 : job->batch.tokens) + (size_t)rows,
        .compute_us = compute_us,
        .loop = job->loop,
        .steps = part == ATTND_REPORT_PIECE ? 0 : job->batch.count,
        .piece_rows = part == ATTND_REPORT_STEPS ? 0 : rows,
        .part = part,
    };
    s->hook(s->hook_ctx, &r);
}

/* The steps of an iteration that also has a piece: computed and answered
 * first, while the loop stays busy, so their clients send their next steps
 * while the piece computes and those join the very next iteration (answered
 * after the piece, a closed-loop stream would miss it and wait two pieces). */
static void run_steps_first(sched_worker *w, attn_workspace *ws, sched_job *job, int members, int64_t start)
{
    compute_seqs(w, ws, job, NULL);
    int64_t compute_us = us_between(start, attnd_now_ns());
    for (attnd_request *r = job->batch.head; r; r = r->next) r->compute_us = compute_us;
    report(w->s, job, ATTND_REPORT_STEPS, members, compute_us); /* counted before answered */
    finish_all(&job->batch);
}

/* Runs one job: its batch (and piece) in one attn_forward, or for an
 * iteration with both, its steps then its piece (run_steps_first); fills
 * every result field, calls the hook, then every on_done. */
static void run_batch(sched_worker *w, sched_job *job)
{
    attnd_scheduler *s = w->s;
    int64_t start = attnd_now_ns(), part_start = start;
    const int members = job->batch.count + (job->piece != NULL);
    const int split = job->loop && job->batch.count > 0 && job->piece != NULL;
    stamp_job(job, start, members);

    /* The loop: every core; stateless alone: every core; else this worker's thread. */
    int others = atomic_fetch_add(&s->computing, 1);
    attn_workspace *ws = (job->loop || others == 0) && w->ws_wide ? w->ws_wide : w->ws;
    int buffered = -1; /* a piece's buffer first: the STEPS report counts its final rows */
    if (split) {
        buffered = first_piece_ready(s, job);
        run_steps_first(w, ws, job, members, start);
        part_start = attnd_now_ns();
    }
    attn_seq view;
    compute_seqs(w, ws, job, prepare_piece(s, job, buffered, &view));
    atomic_fetch_sub(&s->computing, 1);

    int64_t end = attnd_now_ns();
    int64_t compute_us = us_between(part_start, end);
    for (attnd_request *r = job->batch.head; r; r = r->next) r->compute_us = compute_us;
    if (job->piece) job->piece->compute_us += compute_us;
    /* The hook first: once iteration_ended frees the loop, the next piece of
     * the same request may compute and be answered on another worker, and this
     * iteration's report must already be in (the metrics a client reads after
     * its answer count every piece of it). */
    report(s, job, split ? ATTND_REPORT_PIECE : ATTND_REPORT_WHOLE, members, compute_us);
    req_list done = { 0 };
    if (job->loop) {
        atomic_store(&s->last_batch_ns, end - start);
        iteration_ended(s, job, &done);
    }
    finish_all(&job->batch);
    if (done.count) {
        if (done.head->outcome == ATTND_DONE_TIMEOUT) done.head->batch_size = 0;
        finish_all(&done);
    }
}

static void *worker_main(void *arg)
{
    sched_worker *w = arg;
    attnd_scheduler *s = w->s;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->collecting) pthread_cond_wait(&s->cv_lead, &s->mu);
        s->collecting = 1;
        sched_job job = { 0 };
        int more = collect(s, &job);
        s->collecting = 0;
        pthread_cond_signal(&s->cv_lead); /* the next idle worker takes over */
        if (!more) break;

        pthread_mutex_unlock(&s->mu);
        if (job.expired.count) finish_expired(&job.expired);
        if (job.batch.count || job.piece) run_batch(w, &job);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Answers queued requests at their deadline (see "Deadlines" above). */
static void *reaper_main(void *arg)
{
    attnd_scheduler *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->reap_stop) {
        req_list expired = { 0 };
        int64_t earliest = INT64_MAX, now = attnd_now_ns();
        reap_list(&s->oneshot, now, &expired, &earliest);
        reap_list(&s->steps, now, &expired, &earliest);
        if (expired.count) {
            s->reap_wake_ns = INT64_MAX; /* it rescans after answering */
            pthread_mutex_unlock(&s->mu);
            finish_expired(&expired);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        s->reap_wake_ns = earliest;
        if (earliest == INT64_MAX) {
            pthread_cond_wait(&s->cv_reap, &s->mu);
        } else {
            struct timespec ts = mono_timespec(earliest);
            pthread_cond_timedwait(&s->cv_reap, &s->mu, &ts);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ------------------------------------------------------------ public API */

static int check_config(const attnd_sched_config *c, char *err, size_t errlen)
{
    const char *field = NULL, *rule = NULL;
    long long v = 0;
    if (c->max_batch_requests < 1) {
        field = "max_batch_requests"; rule = "at least 1"; v = c->max_batch_requests;
    } else if (c->max_batch_tokens < 1) {
        field = "max_batch_tokens"; rule = "at least 1"; v = (long long)c->max_batch_tokens;
    } else if (c->max_queue_delay_us < 0 || c->max_queue_delay_us > SCHED_MAX_DELAY_US) {
        field = "max_queue_delay_us"; rule = "between 0 and 3600000000 (one hour)";
        v = c->max_queue_delay_us;
    } else if (c->max_stream_wait_us < 0 || c->max_stream_wait_us > SCHED_MAX_DELAY_US) {
        field = "max_stream_wait_us"; rule = "between 0 and 3600000000 (one hour)";
        v = c->max_stream_wait_us;
    } else if (c->prefill_chunk_rows < 0 || c->prefill_chunk_rows > SCHED_MAX_CHUNK_ROWS) {
        field = "prefill_chunk_rows"; rule = "between 0 and 1048576"; v = c->prefill_chunk_rows;
    } else if (c->inline_max_macs < 0) {
        field = "inline_max_macs"; rule = "at least 0"; v = c->inline_max_macs;
    } else if (c->max_queue < 1) {
        field = "max_queue"; rule = "at least 1"; v = c->max_queue;
    } else if (c->workers < 1 || c->workers > SCHED_MAX_WORKERS) {
        field = "workers"; rule = "between 1 and 256"; v = c->workers;
    }
    if (field == NULL) return 0;
    if (err)
        snprintf(err, errlen, "scheduler: %s must be %s, got %lld", field, rule, v);
    return -1;
}

/* Stops the workers and then the reaper, and joins them (drain_mu held). */
static void stop_and_join(attnd_scheduler *s)
{
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    pthread_cond_broadcast(&s->cv_queue);
    pthread_cond_broadcast(&s->cv_lead);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_started; i++) pthread_join(s->workers[i].thread, NULL);
    s->n_started = 0;
    if (s->reaper_started) {
        pthread_mutex_lock(&s->mu);
        s->reap_stop = 1;
        pthread_cond_signal(&s->cv_reap);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->reaper, NULL);
        s->reaper_started = 0;
    }
    s->joined = 1;
}

static void free_workers(attnd_scheduler *s)
{
    if (s->workers == NULL) return;
    for (int i = 0; i < s->cfg.workers; i++) {
        attn_workspace_free(s->workers[i].ws);
        attn_workspace_free(s->workers[i].ws_wide);
        free(s->workers[i].seqs);
    }
    free(s->workers);
    s->workers = NULL;
    attn_workspace_free(s->ws_inline);
    s->ws_inline = NULL;
}

static int init_sync(attnd_scheduler *s)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return -1;
    int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&s->cv_queue, &ca);
    if (rc == 0 && (rc = pthread_cond_init(&s->cv_reap, &ca)) != 0)
        pthread_cond_destroy(&s->cv_queue);
    if (rc == 0 && (rc = pthread_cond_init(&s->cv_lead, NULL)) != 0) {
        pthread_cond_destroy(&s->cv_queue);
        pthread_cond_destroy(&s->cv_reap);
    }
    pthread_condattr_destroy(&ca);
    if (rc != 0) return -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->drain_mu, NULL);
    return 0;
}

static void destroy_sync(attnd_scheduler *s)
{
    pthread_cond_destroy(&s->cv_queue);
    pthread_cond_destroy(&s->cv_lead);
    pthread_cond_destroy(&s->cv_reap);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->drain_mu);
}

attnd_scheduler *attnd_scheduler_create(const attn_layer *layer, const attnd_sched_config *cfg,
                                        attnd_batch_hook hook, void *hook_ctx, char *err,
                                        size_t errlen)
{
    if (layer == NULL || cfg == NULL) {
        if (err) snprintf(err, errlen, "scheduler: no layer or config");
        return NULL;
    }
    if (check_config(cfg, err, errlen) != 0) return NULL;

    char why[128] = "out of memory";
    attnd_scheduler *s = calloc(1, sizeof *s);
    if (s == NULL) goto fail;
    s->layer = layer;
    s->cfg = *cfg;
    if (s->cfg.max_batch_kv_bytes == 0) s->cfg.max_batch_kv_bytes = SIZE_MAX;
    s->reap_wake_ns = INT64_MAX;

    s->hook = hook;
    s->hook_ctx = hook_ctx;
    if (init_sync(s) != 0) {
        snprintf(why, sizeof why, "cannot initialise its locks");
        goto fail;
    }
    s->sync_ready = 1;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int cores = online > 1 && online <= SCHED_MAX_WORKERS ? (int)online : 1;
    s->workers = calloc((size_t)cfg->workers, sizeof *s->workers);
    if (s->workers == NULL) goto fail;
    for (int i = 0; i < cfg->workers; i++) {
        s->workers[i].s = s;
        if (attn_workspace_create(NULL, &s->workers[i].ws, NULL) != ATTN_OK) goto fail;
        if (cores > 1) {
            attn_workspace_options wide = {.n_threads = cores};
            if (attn_workspace_create(&wide, &s->workers[i].ws_wide, NULL) != ATTN_OK)
                goto fail;
        }
    }
    if (cfg->inline_max_macs > 0 && attn_workspace_create(NULL, &s->ws_inline, NULL) != ATTN_OK) goto fail;
    int rc = pthread_create(&s->reaper, NULL, reaper_main, s);
    if (rc != 0) {
        snprintf(why, sizeof why, "cannot start the deadline thread: %s", strerror(rc));
        goto fail;
    }
    s->reaper_started = 1;
    for (int i = 0; i < cfg->workers; i++) {
        rc = pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]);
        if (rc != 0) {
            snprintf(why, sizeof why, "cannot start worker thread %d: %s", i, strerror(rc));
            goto fail;
        }
        s->n_started++;
    }
    return s;

fail:
    if (s) {
        if (s->sync_ready) stop_and_join(s);
        free_workers(s);
        if (s->sync_ready) destroy_sync(s);
        free(s);
    }
    if (err) snprintf(err, errlen, "scheduler: %s", why);
    return NULL;
}

attnd_submit_result attnd_scheduler_submit(attnd_scheduler *s, attnd_request *req)
{
    int64_t now = attnd_now_ns();
    pthread_mutex_lock(&s->mu);
    if (s->closing) {
        pthread_mutex_unlock(&s->mu);
        return ATTND_SUBMIT_CLOSED;
    }
    if (s->oneshot.count + s->steps.count >= s->cfg.max_queue) {
        pthread_mutex_unlock(&s->mu);
        return ATTND_SUBMIT_FULL;
    }
    measure(s, req);
    req->outcome = ATTND_PENDING;
    req->enqueued_ns = now;
    req->queued_after = req->stream ? s->iterations : 0;
    if (req->timeout_ms <= 0) req->deadline_ns = 0;
    else if (req->timeout_ms > (INT64_MAX - now) / 1000000) req->deadline_ns = 0; /* never */
    else req->deadline_ns = now + req->timeout_ms * 1000000;
    list_push(req->stream || req->chunked ? &s->steps : &s->oneshot, req);
    pthread_cond_signal(&s->cv_queue); /* only the collector waits there */
    if (req->deadline_ns != 0 && req->deadline_ns < s->reap_wake_ns) pthread_cond_signal(&s->cv_reap);
    pthread_mutex_unlock(&s->mu);
    return ATTND_SUBMIT_OK;
}

/* Computes req on this thread with ws_inline (inline_busy held by the caller):
 * what a worker would, for a batch of one that waited for nothing. */
static void compute_inline(attnd_scheduler *s, attnd_request *req)
{
    const int64_t start = attnd_now_ns();
    req->outcome = ATTND_PENDING;
    req->enqueued_ns = start;
    req->deadline_ns = 0;
    req->queue_us = 0;
    req->batch_size = 1;
    set_result(req, attn_forward(layer_of(s, req), req->seqs, req->n_seqs, s->ws_inline, NULL, &req->lib_error));
    req->compute_us = us_between(start, attnd_now_ns());
    if (s->hook == NULL) return;
    const attnd_batch_report r = {
        .n_requests = 1, .n_tokens = req->n_tokens, .compute_us = req->compute_us, .inline_run = 1,
    };
    s->hook(s->hook_ctx, &r);
}

int attnd_scheduler_run_inline(attnd_scheduler *s, attnd_request *req)
{
    if (s->ws_inline == NULL || req->stream != 0 || s->cfg.max_queue_delay_us > 0) return 0; /* a worker would wait */
    measure(s, req);
    if (req->chunked || request_macs(s, req) > (double)s->cfg.inline_max_macs) return 0;
    if (atomic_exchange_explicit(&s->inline_busy, 1, memory_order_acquire)) return 0; /* another's */
    pthread_mutex_lock(&s->mu);
    /* only on an idle model: nothing queued to pass, no worker computing (so
     * under load requests queue and batch as they did, and limits apply) */
    const int now = !s->closing && s->oneshot.count == 0 && s->steps.count == 0 && atomic_load(&s->computing) == 0;
    pthread_mutex_unlock(&s->mu);
    if (now) {
        atomic_fetch_add(&s->computing, 1); /* a worker starting meanwhile keeps to one core */
        compute_inline(s, req);
        atomic_fetch_sub(&s->computing, 1);
    }
    atomic_store_explicit(&s->inline_busy, 0, memory_order_release);
    return now;
}

int attnd_scheduler_queue_depth(attnd_scheduler *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->oneshot.count + s->steps.count;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void attnd_scheduler_drain(attnd_scheduler *s)
{
    pthread_mutex_lock(&s->drain_mu);
    if (!s->joined) stop_and_join(s);
    pthread_mutex_unlock(&s->drain_mu);
}

void attnd_scheduler_free(attnd_scheduler *s)
{
    if (s == NULL) return;
    attnd_scheduler_drain(s);
    free_workers(s);
    destroy_sync(s);
    free(s);
}
