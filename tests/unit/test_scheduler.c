/* test_scheduler.c — the batching scheduler against the real library: results
 * of batched requests equal the same requests computed alone; batch limits,
 * queue bound, deadlines, drain and the bad-request fallback behave as
 * server/engine/scheduler.h promises; the decode loop: chunked appends equal
 * whole ones, a step waits for one iteration (one piece) at most, deadlines
 * are answered while the workers are held, the older kind goes first.
 *
 * Requests are built by hand here (not by the codec) and freed by this file.
 * Tests that need a batch to form deterministically block the only worker in
 * the batch hook (a "gate") while they fill the queue.
 */
#include "check.h"
#include "core/request.h"
#include "engine/scheduler.h"
#include "engine/streams.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define E 32     /* every embedding width of the test layer */
#define HEADS 4
#define MAX_LEN 12

/* ------------------------------------------------------------ random */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static int rng_int(uint64_t *s, int lo, int hi) /* [lo, hi] */
{
    return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

static float rng_float(uint64_t *s) /* [-1, 1) */
{
    return (float)((double)(rng_next(s) >> 11) / 4503599627370496.0 - 1.0);
}

static float *rand_floats(uint64_t *s, size_t n)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = rng_float(s);
    return p;
}

/* ------------------------------------------------------------ layer */

/* Weights scaled as PyTorch initialises nn.MultiheadAttention (xavier-uniform
 * in_proj, 1/sqrt(E) out_proj) so outputs are O(1) like a real layer's, and an
 * absolute tolerance of 1e-6 means float32 rounding. */
static float *scaled_floats(uint64_t *s, size_t n, float bound)
{
    float *p = rand_floats(s, n);
    for (size_t i = 0; i < n; i++) p[i] *= bound;
    return p;
}

static attn_layer *make_layer(uint64_t seed)
{
    uint64_t s = seed;
    const float in_b = sqrtf(6.0f / (4 * E)), out_b = 1.0f / sqrtf(E);
    float *wq = scaled_floats(&s, E * E, in_b), *wk = scaled_floats(&s, E * E, in_b);
    float *wv = scaled_floats(&s, E * E, in_b), *wo = scaled_floats(&s, E * E, out_b);
    float *bq = scaled_floats(&s, E, 0.1f), *bk = scaled_floats(&s, E, 0.1f);
    float *bv = scaled_floats(&s, E, 0.1f), *bo = scaled_floats(&s, E, 0.1f);
    attn_layer_desc d = { .num_heads = HEADS, .head_dim_k = E / HEADS, .head_dim_v = E / HEADS,
                          .embed_q = E, .embed_k = E, .embed_v = E, .embed_out = E,
                          .w_q = wq, .w_k = wk, .w_v = wv, .w_o = wo,
                          .b_q = bq, .b_k = bk, .b_v = bv, .b_o = bo };
    attn_layer *layer = NULL;
    attn_error err = { 0 };
    attn_status st = attn_layer_create(&d, &layer, &err);
    CHECK_MSG(st == ATTN_OK, "attn_layer_create: %s", err.message);
    free(wq); free(wk); free(wv); free(wo);
    free(bq); free(bk); free(bv); free(bo);
    return layer;
}

/* ------------------------------------------------------------ requests */

/* A hand-made request: every array malloc'd separately, storage NULL, freed by
 * test_request_free (not attnd_request_free: the codec owns that layout). */
typedef struct test_request {
    attnd_request req; /* first member: callbacks cast back */
    int done_calls;    /* on_done calls seen (guarded by the completion mutex) */
    int64_t done_ns;   /* when on_done was called (the last time)              */
    int cross;
} test_request;

typedef enum { SEQ_SELF, SEQ_CROSS, SEQ_RANDOM } seq_kind;

static void fill_seq(uint64_t *s, attn_seq *q, seq_kind kind, int t, int need_weights,
                     int per_head)
{
    int cross = kind == SEQ_CROSS || (kind == SEQ_RANDOM && rng_int(s, 0, 1));
    q->t = t;
    q->s = cross ? rng_int(s, 1, MAX_LEN) : t;
    q->query = rand_floats(s, (size_t)t * E);
    if (cross) {
        q->key = rand_floats(s, (size_t)q->s * E);
        q->value = rand_floats(s, (size_t)q->s * E);
    }
    if (rng_int(s, 0, 3) == 0) { /* key padding, never hiding key 0 */
        uint8_t *m = calloc((size_t)q->s, 1);
        for (int j = 1; j < q->s; j++) m[j] = rng_int(s, 0, 3) == 0;
        q->key_padding_mask = m;
    }
    if (!cross && rng_int(s, 0, 2) == 0) q->is_causal = 1;
    if (rng_int(s, 0, 4) == 0) q->window = rng_int(s, 1, 4);
    if (rng_int(s, 0, 3) == 0) {
        q->attn_mask_kind = ATTN_MASK_FLOAT;
        q->attn_mask = rand_floats(s, (size_t)t * q->s);
    }
    q->output = malloc((size_t)t * E * sizeof(float));
    if (need_weights) {
        q->weights_mode = per_head ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_AVERAGE;
        q->weights = malloc((size_t)(per_head ? HEADS : 1) * t * q->s * sizeof(float));
    }
}

/* Builds a request of n_seqs sequences with query lengths in [t_lo, t_hi]. */
static test_request *make_request(uint64_t *s, int n_seqs, int t_lo, int t_hi, seq_kind kind)
{
    test_request *tr = calloc(1, sizeof *tr);
    attnd_request *r = &tr->req;
    r->n_seqs = n_seqs;
    r->batched = n_seqs > 1;
    r->seqs = calloc((size_t)n_seqs, sizeof *r->seqs);
    r->need_weights = rng_int(s, 0, 2) == 0;
    r->average_attn_weights = rng_int(s, 0, 1);
    for (int i = 0; i < n_seqs; i++) {
        attn_seq *q = &r->seqs[i];
        fill_seq(s, q, kind, rng_int(s, t_lo, t_hi), r->need_weights, !r->average_attn_weights);
        r->n_tokens += (size_t)q->t + (q->key ? (size_t)q->s : 0);
        tr->cross |= q->key != NULL;
    }
    return tr;
}

static void test_request_free(test_request *tr)
{
    if (tr == NULL) return;
    for (int i = 0; i < tr->req.n_seqs; i++) {
        attn_seq *q = &tr->req.seqs[i];
        free((void *)q->query);
        free((void *)q->key);
        free((void *)q->value);
        free((void *)q->key_padding_mask);
        free((void *)q->attn_mask);
        free(q->output);
        free(q->weights);
    }
    free(tr->req.seqs);
    free(tr);
}

static size_t seq_weights_len(const attn_seq *q)
{
    size_t n = (size_t)q->t * (size_t)q->s;
    return q->weights_mode == ATTN_WEIGHTS_PER_HEAD ? n * HEADS : n;
}

/* Largest |difference| between the request's outputs (and weights) and the
 * same request computed alone; returns INFINITY if the reference fails. */
static double diff_vs_alone(const attn_layer *layer, const attnd_request *r)
{
    attn_seq *ref = malloc((size_t)r->n_seqs * sizeof *ref);
    memcpy(ref, r->seqs, (size_t)r->n_seqs * sizeof *ref);
    for (int i = 0; i < r->n_seqs; i++) {
        ref[i].output = malloc((size_t)ref[i].t * E * sizeof(float));
        ref[i].weights = ref[i].weights ? malloc(seq_weights_len(&ref[i]) * sizeof(float)) : NULL;
    }
    attn_error err = { 0 };
    double worst = 0;
    if (attn_forward(layer, ref, r->n_seqs, NULL, NULL, &err) != ATTN_OK) {
        fprintf(stderr, "reference forward failed: %s\n", err.message);
        worst = INFINITY;
    }
    for (int i = 0; i < r->n_seqs && isfinite(worst); i++) {
        for (size_t k = 0; k < (size_t)ref[i].t * E; k++)
            worst = fmax(worst, fabs((double)ref[i].output[k] - r->seqs[i].output[k]));
        for (size_t k = 0; ref[i].weights && k < seq_weights_len(&ref[i]); k++)
            worst = fmax(worst, fabs((double)ref[i].weights[k] - r->seqs[i].weights[k]));
    }
    for (int i = 0; i < r->n_seqs; i++) {
        free(ref[i].output);
        free(ref[i].weights);
    }
    free(ref);
    return worst;
}

/* ------------------------------------------------------------ completion */

static pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static int done_total;

static void on_done(attnd_request *req, void *ctx)
{
    (void)ctx;
    pthread_mutex_lock(&done_mu);
    ((test_request *)req)->done_calls++;
    ((test_request *)req)->done_ns = attnd_now_ns();
    done_total++;
    pthread_cond_broadcast(&done_cv);
    pthread_mutex_unlock(&done_mu);
}

static void reset_done(void)
{
    pthread_mutex_lock(&done_mu);
    done_total = 0;
    pthread_mutex_unlock(&done_mu);
}

/* Waits (at most 20 s) until n requests finished; returns how many did. */
static int wait_done(int n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 20;
    pthread_mutex_lock(&done_mu);
    while (done_total < n)
        if (pthread_cond_timedwait(&done_cv, &done_mu, &ts) != 0) break;
    int got = done_total;
    pthread_mutex_unlock(&done_mu);
    return got;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ batch hook */

#define MAX_BATCHES 4096

/* Records every batch; optionally holds the worker at a gate until opened. */
typedef struct hook_log {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_batches, n_requests, max_requests;
    int sizes[MAX_BATCHES];
    size_t tokens[MAX_BATCHES];
    attnd_report_part parts[MAX_BATCHES];
    int gate_closed; /* while 1, a worker entering the hook waits */
    int first_only;  /* ... but only the one that ran the first batch */
    int hold_piece;  /* while 1, a worker reporting an iteration's PIECE part waits */
    int waiting;     /* workers waiting at the gate */
} hook_log;

static void hook_init(hook_log *h, int gate_closed)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->gate_closed = gate_closed;
}

static void hook_fini(hook_log *h)
{
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
}

static void batch_hook(void *ctx, const attnd_batch_report *r)
{
    hook_log *h = ctx;
    const int n_requests = r->n_requests;
    const size_t n_tokens = r->n_tokens;
    pthread_mutex_lock(&h->mu);
    if (h->n_batches < MAX_BATCHES) {
        h->sizes[h->n_batches] = n_requests;
        h->tokens[h->n_batches] = n_tokens;
        h->parts[h->n_batches] = r->part;
    }
    int first = h->n_batches++ == 0;
    h->n_requests += r->part == ATTND_REPORT_PIECE ? 0 : n_requests; /* a piece's part: counted already */
    if (n_requests > h->max_requests) h->max_requests = n_requests;
    if (h->gate_closed && (first || !h->first_only)) {
        h->waiting++;
        pthread_cond_broadcast(&h->cv);
        while (h->gate_closed) pthread_cond_wait(&h->cv, &h->mu);
        h->waiting--;
    }
    if (h->hold_piece && r->part == ATTND_REPORT_PIECE) {
        h->waiting++;
        pthread_cond_broadcast(&h->cv);
        while (h->hold_piece) pthread_cond_wait(&h->cv, &h->mu);
        h->waiting--;
    }
    pthread_mutex_unlock(&h->mu);
}

/* Waits until a worker is held at the gate. Returns 1 if one is. */
static int hook_wait_blocked(hook_log *h)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    pthread_mutex_lock(&h->mu);
    while (h->waiting == 0)
        if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) != 0) break;
    int ok = h->waiting > 0;
    pthread_mutex_unlock(&h->mu);
    return ok;
}

/* Opens the gate; also_pieces clears hold_piece too (else it stays as set). */
static void hook_release(hook_log *h, int also_pieces)
{
    pthread_mutex_lock(&h->mu);
    h->gate_closed = 0;
    if (also_pieces) h->hold_piece = 0;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void hook_open(hook_log *h) { hook_release(h, 1); }

/* A scheduler on cfg whose batches go to h's hook. */
static attnd_scheduler *sched_with(const attn_layer *layer, const attnd_sched_config *cfg, hook_log *h)
{
    char err[256] = "";
    attnd_scheduler *s = attnd_scheduler_create(layer, cfg, batch_hook, h, err, sizeof err);
    CHECK_MSG(s != NULL, "attnd_scheduler_create: %s", err);
    return s;
}

static attnd_scheduler *make_sched(const attn_layer *layer, int max_req, size_t max_tokens,
                                   int64_t delay_us, int max_queue, int workers, hook_log *h)
{
    attnd_sched_config cfg = { .max_batch_requests = max_req, .max_batch_tokens = max_tokens,
                               .max_queue_delay_us = delay_us, .max_queue = max_queue,
                               .workers = workers };
    return sched_with(layer, &cfg, h);
}

/* Submits and checks it was queued. */
static void submit_ok(attnd_scheduler *s, test_request *tr)
{
    tr->req.on_done = on_done;
    CHECK_INT_EQ(attnd_scheduler_submit(s, &tr->req), ATTND_SUBMIT_OK);
}

/* ------------------------------------------------------------ tests */

enum { MIX_THREADS = 8, MIX_PER_THREAD = 24, MIX_N = MIX_THREADS * MIX_PER_THREAD };

typedef struct mix_arg {
    attnd_scheduler *s;
    test_request **reqs; /* MIX_PER_THREAD entries, already built */
} mix_arg;

static void *mix_submitter(void *p)
{
    mix_arg *a = p;
    for (int i = 0; i < MIX_PER_THREAD; i++) {
        a->reqs[i]->req.on_done = on_done;
        while (attnd_scheduler_submit(a->s, &a->reqs[i]->req) == ATTND_SUBMIT_FULL)
            sleep_ms(1);
        if (i % 5 == 4) sleep_ms(1); /* arrivals come in bursts */
    }
    return NULL;
}

/* Many threads submit a mix; every request ends OK, once, equal to its alone
 * computation; batches formed and the hook saw every request. */
static void run_mixed(const attn_layer *layer, int max_req, int64_t delay_us, int workers)
{
    uint64_t rng = 0x9e3779b97f4a7c15ULL ^ (uint64_t)max_req ^ ((uint64_t)delay_us << 8);
    test_request *all[MIX_N];
    int n_cross = 0, n_self = 0;
    for (int i = 0; i < MIX_N; i++) {
        all[i] = make_request(&rng, rng_int(&rng, 1, 3), 1, MAX_LEN, SEQ_RANDOM);
        if (all[i]->cross) n_cross++;
        else n_self++;
    }
    CHECK(n_cross > 0 && n_self > 0);

    hook_log h;
    hook_init(&h, 0);
    reset_done();
    attnd_scheduler *s = make_sched(layer, max_req, 512, delay_us, 64, workers, &h);
    pthread_t th[MIX_THREADS];
    mix_arg args[MIX_THREADS];
    for (int t = 0; t < MIX_THREADS; t++) {
        args[t] = (mix_arg){ s, all + t * MIX_PER_THREAD };
        pthread_create(&th[t], NULL, mix_submitter, &args[t]);
    }
    for (int t = 0; t < MIX_THREADS; t++) pthread_join(th[t], NULL);
    CHECK_INT_EQ(wait_done(MIX_N), MIX_N);
    attnd_scheduler_free(s);

    int max_seen = 0;
    double worst = 0;
    for (int i = 0; i < MIX_N; i++) {
        attnd_request *r = &all[i]->req;
        CHECK_INT_EQ(all[i]->done_calls, 1);
        CHECK_INT_EQ(r->outcome, ATTND_DONE_OK);
        CHECK(r->batch_size >= 1 && r->batch_size <= max_req);
        CHECK(r->queue_us >= 0 && r->compute_us >= 0);
        if (r->batch_size > max_seen) max_seen = r->batch_size;
        worst = fmax(worst, diff_vs_alone(layer, r));
    }
    CHECK_MSG(worst <= 1e-6, "max |batched - alone| = %.3g", worst);
    CHECK_INT_EQ(h.n_requests, MIX_N);
    CHECK_INT_EQ(h.max_requests, max_seen);
    if (max_req == 1) {
        CHECK_INT_EQ(max_seen, 1);
        CHECK_INT_EQ(h.n_batches, MIX_N);
    } else {
        CHECK_MSG(max_seen > 1, "no batch of more than one request formed");
        CHECK(h.n_batches < MIX_N);
    }
    printf("mixed max_req=%d delay=%lldus workers=%d: %d batches, largest %d, max diff %.3g\n",
           max_req, (long long)delay_us, workers, h.n_batches, max_seen, worst);
    for (int i = 0; i < MIX_N; i++) test_request_free(all[i]);
    hook_fini(&h);
}

/* Fills the queue behind a worker held at the gate, then lets it go. */
static void hold_first(attnd_scheduler *s, hook_log *h, test_request *first)
{
    submit_ok(s, first);
    CHECK(hook_wait_blocked(h));
}

/* Token budget: 8-token requests pack two per batch under a budget of 20; a
 * 40-token request still runs, alone. */
TEST_WITH(token_budget, const attn_layer *layer)
{
    uint64_t rng = 42;
    hook_log h;
    hook_init(&h, 1);
    reset_done();
    attnd_scheduler *s = make_sched(layer, 16, 20, 0, 64, 1, &h);
    test_request *rs[8];
    for (int i = 0; i < 8; i++)
        rs[i] = make_request(&rng, 1, i == 4 ? 40 : 8, i == 4 ? 40 : 8, SEQ_SELF);
    hold_first(s, &h, rs[0]);
    for (int i = 1; i < 8; i++) submit_ok(s, rs[i]);
    CHECK_INT_EQ(attnd_scheduler_queue_depth(s), 7);
    hook_open(&h);
    CHECK_INT_EQ(wait_done(8), 8);
    attnd_scheduler_free(s);
    /* batches: [0] [1 2] [3] [4: 40 tokens alone] [5 6] [7] */
    int pairs = 0;
    for (int b = 0; b < h.n_batches; b++) {
        CHECK_MSG(h.sizes[b] == 1 || h.tokens[b] <= 20, "batch %d: %d requests, %zu tokens", b,
                  h.sizes[b], h.tokens[b]);
        pairs += h.sizes[b] == 2;
    }
    CHECK_INT_EQ(h.n_batches, 6);
    CHECK_INT_EQ(pairs, 2);
    CHECK_INT_EQ(rs[4]->req.batch_size, 1);
    CHECK_INT_EQ(rs[4]->req.outcome, ATTND_DONE_OK);
    CHECK_INT_EQ(rs[1]->req.batch_size, 2);
    for (int i = 0; i < 8; i++) {
        CHECK(diff_vs_alone(layer, &rs[i]->req) <= 1e-6);
        test_request_free(rs[i]);
    }
    hook_fini(&h);
}

/* The request cap: 10 queued with max 4 per batch -> 4, 4, 2. */
TEST_WITH(request_cap, const attn_layer *layer)
{
    uint64_t rng = 7;
    hook_log h;
    hook_init(&h, 1);
    reset_done();
    attnd_scheduler *s = make_sched(layer, 4, 100000, 0, 64, 1, &h);
    test_request *rs[11];
    for (int i = 0; i < 11; i++) rs[i] = make_request(&rng, 1, 2, 6, SEQ_RANDOM);
    hold_first(s, &h, rs[0]);
    for (int i = 1; i < 11; i++) submit_ok(s, rs[i]);
    hook_open(&h);
    CHECK_INT_EQ(wait_done(11), 11);
    attnd_scheduler_free(s);
    CHECK_INT_EQ(h.n_batches, 4);
    CHECK_INT_EQ(h.sizes[1], 4);
    CHECK_INT_EQ(h.sizes[2], 4);
    CHECK_INT_EQ(h.sizes[3], 2);
    for (int i = 0; i < 11; i++) test_request_free(rs[i]);
    hook_fini(&h);
}

/* The queue bound: with the worker held, max_queue requests wait and the next
 * submit is FULL, leaving that request untouched. */
TEST_WITH(queue_full, const attn_layer *layer)
{
    uint64_t rng = 11;
    hook_log h;
    hook_init(&h, 1);
    reset_done();
    attnd_scheduler *s = make_sched(layer, 8, 1000, 0, 3, 1, &h);
    test_request *rs[5];
    for (int i = 0; i < 5; i++) rs[i] = make_request(&rng, 1, 3, 3, SEQ_SELF);
    hold_first(s, &h, rs[0]);
    for (int i = 1; i <= 3; i++) submit_ok(s, rs[i]);
    CHECK_INT_EQ(attnd_scheduler_queue_depth(s), 3);
    rs[4]->req.on_done = on_done;
    rs[4]->req.outcome = ATTND_PENDING;
    CHECK_INT_EQ(attnd_scheduler_submit(s, &rs[4]->req), ATTND_SUBMIT_FULL);
    CHECK_INT_EQ(rs[4]->req.enqueued_ns, 0);
    CHECK_INT_EQ(attnd_scheduler_queue_depth(s), 3);
    hook_open(&h);
    CHECK_INT_EQ(wait_done(4), 4);
    CHECK_INT_EQ(attnd_scheduler_queue_depth(s), 0);
    attnd_scheduler_free(s);
    CHECK_INT_EQ(rs[4]->done_calls, 0);
    CHECK_INT_EQ(rs[4]->req.outcome, ATTND_PENDING);
    for (int i = 0; i < 4; i++) CHECK_INT_EQ(rs[i]->req.outcome, ATTND_DONE_OK);
    for (int i = 0; i < 5; i++) test_request_free(rs[i]);
    hook_fini(&h);
}

/* A request whose deadline passes while queued ends TIMEOUT, uncomputed. */
TEST_WITH(deadline, const attn_layer *layer)
{
    uint64_t rng = 13;
    hook_log h;
    hook_init(&h, 1);
    reset_done();
    attnd_scheduler *s = make_sched(layer, 8, 1000, 0, 16, 1, &h);
    test_request *rs[3];
    for (int i = 0; i < 3; i++) rs[i] = make_request(&rng, 1, 4, 4, SEQ_SELF);
    float *out = rs[1]->req.seqs[0].output;
    for (int k = 0; k < 4 * E; k++) out[k] = 12345.0f;
    rs[1]->req.timeout_ms = 1;
    rs[2]->req.timeout_ms = 60000;
    hold_first(s, &h, rs[0]);
    submit_ok(s, rs[1]);
    submit_ok(s, rs[2]);
    CHECK(rs[1]->req.deadline_ns > rs[1]->req.enqueued_ns);
    sleep_ms(20);
    hook_open(&h);
    CHECK_INT_EQ(wait_done(3), 3);
    attnd_scheduler_free(s);
    CHECK_INT_EQ(rs[1]->req.outcome, ATTND_DONE_TIMEOUT);
    CHECK_INT_EQ(rs[1]->done_calls, 1);
    CHECK(rs[1]->req.queue_us >= 1000);
    int untouched = 1;
    for (int k = 0; k < 4 * E; k++) untouched &= out[k] == 12345.0f;
    CHECK_MSG(untouched, "a timed-out request was computed");
    CHECK_INT_EQ(rs[2]->req.outcome, ATTND_DONE_OK);
    CHECK_INT_EQ(rs[2]->req.batch_size, 1);
    CHECK_INT_EQ(h.n_requests, 2);
    for (int i = 0; i < 3; i++) test_request_free(rs[i]);
    hook_fini(&h);
}

/* One bad request (NaN the codec missed) in a batch: it alone fails, with the
 * library's message; its batch mates (self and cross) are correct. */
TEST_WITH(bad_request_isolated, const attn_layer *layer)
{
    uint64_t rng = 17;
    hook_log h;
    hook_init(&h, 1);
    reset_done();
    attnd_scheduler *s = make_sched(layer, 8, 1000, 0, 16, 1, &h);
    test_request *rs[4];
    rs[0] = make_request(&rng, 1, 3, 3, SEQ_SELF);
    rs[1] = make_request(&rng, 2, 3, 5, SEQ_SELF);
    rs[2] = make_request(&rng, 2, 3, 5, SEQ_CROSS);
    rs[3] = make_request(&rng, 1, 3, 5, SEQ_CROSS);
    ((float *)rs[2]->req.seqs[1].query)[2] = NAN;
    hold_first(s, &h, rs[0]);
    for (int i = 1; i < 4; i++) submit_ok(s, rs[i]);
    hook_open(&h);
    CHECK_INT_EQ(wait_done(4), 4);
    attnd_scheduler_free(s);
    CHECK_INT_EQ(rs[2]->req.outcome, ATTND_DONE_ERROR);
    CHECK_INT_EQ(rs[2]->req.lib_status, ATTN_ERR_NONFINITE);
    CHECK_MSG(strstr(rs[2]->req.lib_error.message, "seqs[1]") != NULL,
              "error does not name the request's own sequence: \"%s\"",
              rs[2]->req.lib_error.message);
    for (int i = 1; i < 4; i += 2) {
        CHECK_INT_EQ(rs[i]->req.outcome, ATTND_DONE_OK);
        CHECK_INT_EQ(rs[i]->req.batch_size, 3);
        CHECK(diff_vs_alone(layer, &rs[i]->req) <= 1e-6);
    }
    for (int i = 0; i < 4; i++) test_request_free(rs[i]);
    hook_fini(&h);
}

/* The delay: an unfilled batch waits for its oldest request's delay, then runs
 * as one batch. */
TEST_WITH(delay_waits, const attn_layer *layer)
{
    uint64_t rng = 19;
    hook_log h;
    hook_init(&h, 0);
    reset_done();
    attnd_scheduler *s = make_sched(layer, 8, 1000, 400000, 16, 2, &h);
    test_request *rs[3];
    for (int i = 0; i < 3; i++) rs[i] = make_request(&rng, 1, 2, 5, SEQ_RANDOM);
    for (int i = 0; i < 3; i++) submit_ok(s, rs[i]);
    sleep_ms(20);
    CHECK_INT_EQ(attnd_scheduler_queue_depth(s), 3); /* still collecting */
    CHECK_INT_EQ(wait_done(3), 3);
    attnd_scheduler_free(s);
    CHECK_INT_EQ(h.n_batches, 1);
    for (int i = 0; i < 3; i++) {
        CHECK_INT_EQ(rs[i]->req.batch_size, 3);
        CHECK(diff_vs_alone(layer, &rs[i]->req) <= 1e-6);
    }
    CHECK_MSG(rs[0]->req.queue_us >= 400000, "queue_us %lld", (long long)rs[0]->req.queue_us);
    for (int i = 0; i < 3; i++) test_request_free(rs[i]);
    hook_fini(&h);
}

/* Drain runs everything queued at once (ignoring a huge delay), calls each
 * on_done once, then refuses submits; drain and free are idempotent. */
TEST_WITH(drain, const attn_layer *layer)
{
    uint64_t rng = 23;
    hook_log h;
    hook_init(&h, 0);
    reset_done();
    attnd_scheduler *s = make_sched(layer, 64, 100000, INT64_C(3600000000), 64, 2, &h);
    enum { N = 20 };
    test_request *rs[N];
    for (int i = 0; i < N; i++) {
        rs[i] = make_request(&rng, 1, 1, MAX_LEN, SEQ_RANDOM);
        submit_ok(s, rs[i]);
    }
    sleep_ms(30);
    CHECK_INT_EQ(attnd_scheduler_queue_depth(s), N); /* held by the one-hour delay */
    int64_t t0 = attnd_now_ns();
    attnd_scheduler_drain(s);
    CHECK((attnd_now_ns() - t0) < INT64_C(5000000000));
    pthread_mutex_lock(&done_mu);
    CHECK_INT_EQ(done_total, N);
    pthread_mutex_unlock(&done_mu);
    CHECK_INT_EQ(attnd_scheduler_queue_depth(s), 0);
    test_request *late = make_request(&rng, 1, 2, 2, SEQ_SELF);
    late->req.on_done = on_done;
    CHECK_INT_EQ(attnd_scheduler_submit(s, &late->req), ATTND_SUBMIT_CLOSED);
    attnd_scheduler_drain(s);
    attnd_scheduler_free(s);
    attnd_scheduler_free(NULL);
    for (int i = 0; i < N; i++) {
        CHECK_INT_EQ(rs[i]->done_calls, 1);
        CHECK_INT_EQ(rs[i]->req.outcome, ATTND_DONE_OK);
        CHECK(diff_vs_alone(layer, &rs[i]->req) <= 1e-6);
        test_request_free(rs[i]);
    }
    CHECK_INT_EQ(late->done_calls, 0);
    CHECK_INT_EQ(h.n_requests, N);
    test_request_free(late);
    hook_fini(&h);
}

/* Two workers: while one is busy (held in the hook after its batch), the other
 * collects and runs the following batches. */
TEST_WITH(second_worker_collects, const attn_layer *layer)
{
    uint64_t rng = 29;
    hook_log h;
    hook_init(&h, 1);
    h.first_only = 1;
    reset_done();
    attnd_scheduler *s = make_sched(layer, 8, 1000, 0, 16, 2, &h);
    test_request *rs[4];
    for (int i = 0; i < 4; i++) rs[i] = make_request(&rng, 1, 2, 6, SEQ_RANDOM);
    hold_first(s, &h, rs[0]);
    for (int i = 1; i < 4; i++) submit_ok(s, rs[i]);
    CHECK_INT_EQ(wait_done(3), 3); /* rs[1..3], with rs[0]'s worker still held */
    CHECK_INT_EQ(rs[0]->done_calls, 0);
    hook_open(&h);
    CHECK_INT_EQ(wait_done(4), 4);
    attnd_scheduler_free(s);
    for (int i = 0; i < 4; i++) {
        CHECK_INT_EQ(rs[i]->done_calls, 1);
        CHECK(diff_vs_alone(layer, &rs[i]->req) <= 1e-6);
        test_request_free(rs[i]);
    }
    hook_fini(&h);
}

enum { RACE_THREADS = 4, RACE_PER_THREAD = 40 };

typedef struct race_arg {
    attnd_scheduler *s;
    test_request **reqs;
    attnd_submit_result res[RACE_PER_THREAD];
} race_arg;

static void *race_submitter(void *p)
{
    race_arg *a = p;
    for (int i = 0; i < RACE_PER_THREAD; i++) {
        a->reqs[i]->req.on_done = on_done;
        a->res[i] = attnd_scheduler_submit(a->s, &a->reqs[i]->req);
        sleep_ms(2); /* ~80 ms of submits: the drain lands early in them */
    }
    return NULL;
}

/* Drain racing with submits: every request was either accepted and finished
 * exactly once, or refused (FULL / CLOSED) and never touched again. */
TEST_WITH(drain_races_submit, const attn_layer *layer)
{
    uint64_t rng = 31;
    hook_log h;
    hook_init(&h, 0);
    reset_done();
    attnd_scheduler *s = make_sched(layer, 64, 100000, 1000000, 64, 2, &h);
    enum { N = RACE_THREADS * RACE_PER_THREAD };
    test_request *all[N];
    for (int i = 0; i < N; i++) all[i] = make_request(&rng, 1, 1, 6, SEQ_RANDOM);
    pthread_t th[RACE_THREADS];
    race_arg *args = calloc(RACE_THREADS, sizeof *args);
    for (int t = 0; t < RACE_THREADS; t++) {
        args[t].s = s;
        args[t].reqs = all + t * RACE_PER_THREAD;
        pthread_create(&th[t], NULL, race_submitter, &args[t]);
    }
    for (int i = 0; i < 5000 && attnd_scheduler_queue_depth(s) < 8; i++) sleep_ms(1);
    CHECK(attnd_scheduler_queue_depth(s) >= 8); /* held by the 1 s delay */
    attnd_scheduler_drain(s);
    for (int t = 0; t < RACE_THREADS; t++) pthread_join(th[t], NULL);
    int accepted = 0, closed = 0, bad = 0;
    for (int t = 0; t < RACE_THREADS; t++)
        for (int i = 0; i < RACE_PER_THREAD; i++) {
            test_request *tr = args[t].reqs[i];
            if (args[t].res[i] == ATTND_SUBMIT_OK) {
                accepted++;
                bad += tr->done_calls != 1 || tr->req.outcome != ATTND_DONE_OK;
            } else {
                closed += args[t].res[i] == ATTND_SUBMIT_CLOSED;
                bad += tr->done_calls != 0;
            }
        }
    CHECK_INT_EQ(bad, 0);
    CHECK(accepted > 0);
    CHECK(closed > 0); /* the drain really raced the submitters */
    pthread_mutex_lock(&done_mu);
    CHECK_INT_EQ(done_total, accepted);
    pthread_mutex_unlock(&done_mu);
    CHECK_INT_EQ(h.n_requests, accepted);
    printf("drain race: %d accepted, %d refused after close\n", accepted, closed);
    attnd_scheduler_free(s);
    for (int i = 0; i < N; i++) test_request_free(all[i]);
    free(args);
    hook_fini(&h);
}

static void expect_bad_config(const attn_layer *layer, attnd_sched_config c, const char *field)
{
    char err[256] = "", want[96];
    CHECK(attnd_scheduler_create(layer, &c, NULL, NULL, err, sizeof err) == NULL);
    snprintf(want, sizeof want, "scheduler: %s must be", field); /* names the field first */
    CHECK_MSG(strncmp(err, want, strlen(want)) == 0, "message \"%s\" does not start \"%s\"",
              err, want);
}

TEST_WITH(config, const attn_layer *layer)
{
    const attnd_sched_config ok = { .max_batch_requests = 4, .max_batch_tokens = 64,
                                    .max_queue_delay_us = 0, .max_queue = 1, .workers = 1 };
    attnd_sched_config c = ok;
    c.max_batch_requests = 0;
    expect_bad_config(layer, c, "max_batch_requests");
    c = ok; c.max_batch_tokens = 0;
    expect_bad_config(layer, c, "max_batch_tokens");
    c = ok; c.max_queue_delay_us = -1;
    expect_bad_config(layer, c, "max_queue_delay_us");
    c = ok; c.max_stream_wait_us = -1;
    expect_bad_config(layer, c, "max_stream_wait_us");
    c = ok; c.prefill_chunk_rows = -1;
    expect_bad_config(layer, c, "prefill_chunk_rows");
    c = ok; c.inline_max_macs = -1;
    expect_bad_config(layer, c, "inline_max_macs");
    c = ok; c.max_queue = 0;
    expect_bad_config(layer, c, "max_queue");
    c = ok; c.workers = 0;
    expect_bad_config(layer, c, "workers");
    attnd_scheduler *s = attnd_scheduler_create(layer, &ok, NULL, NULL, NULL, 0);
    CHECK(s != NULL);
    attnd_scheduler_free(s); /* never used: drain of an idle scheduler */
    CHECK(attnd_scheduler_create(NULL, &ok, NULL, NULL, NULL, 0) == NULL);
}

/* A self-attention request of one sequence of t rows, no cross keys. */
static test_request *self_request(uint64_t *rng, int t)
{
    return make_request(rng, 1, t, t, SEQ_SELF);
}

static attnd_scheduler *make_inline_sched(const attn_layer *layer, int64_t macs, int64_t delay_us, hook_log *h)
{
    attnd_sched_config cfg = {.max_batch_requests = 16, .max_batch_tokens = 1000, .max_queue = 64,
                              .workers = 1, .max_queue_delay_us = delay_us, .inline_max_macs = macs};
    return sched_with(layer, &cfg, h);
}

/* attnd_scheduler_run_inline computes a small stateless request on the
 * calling thread, answers what a worker answers (1e-6: float rounding of the
 * same arithmetic), reports a batch of one and never calls on_done; and
 * refuses (0, the request still the caller's to submit) a stream step, a
 * request of more multiply-adds than inline_max_macs, one that would pass a
 * queued stateless request, any when inline_max_macs is 0, and any once
 * draining. The test layer: E 32, 4 heads of 8, so one query row's
 * projections (Q, W_O) and one key row's (K, V) cost 2048 multiply-adds each
 * and a row's attention to a key 64: a t-row self-attention costs
 * t * 4096 + t * t * 64 (t = 4: 17408, t = 5: 22080). */
TEST_WITH(run_inline_rules, const attn_layer *layer)
{
    uint64_t rng = 77;
    hook_log h;
    hook_init(&h, 0);
    reset_done();
    attnd_scheduler *s = make_inline_sched(layer, 17408, 0, &h);
    test_request *small = self_request(&rng, 4), *over = self_request(&rng, 5), *st = self_request(&rng, 1);
    small->req.on_done = over->req.on_done = st->req.on_done = on_done;
    st->req.stream = 9;
    CHECK_INT_EQ(attnd_scheduler_run_inline(s, &small->req), 1);
    CHECK_INT_EQ(small->req.outcome, ATTND_DONE_OK);
    CHECK_INT_EQ(small->req.batch_size, 1);
    CHECK_INT_EQ(small->req.queue_us, 0);
    CHECK(diff_vs_alone(layer, &small->req) <= 1e-6);
    CHECK_INT_EQ(h.n_batches, 1); /* reported, on this thread */
    CHECK_INT_EQ(h.sizes[0], 1);
    CHECK_INT_EQ(attnd_scheduler_run_inline(s, &over->req), 0); /* 22080 > 17408 */
    CHECK_INT_EQ(attnd_scheduler_run_inline(s, &st->req), 0);   /* a stream step: the loop's */
    submit_ok(s, over);
    submit_ok(s, st);
    CHECK_INT_EQ(wait_done(2), 2);
    CHECK_INT_EQ(small->done_calls, 0);
    CHECK(diff_vs_alone(layer, &over->req) <= 1e-6);
    attnd_scheduler_drain(s);
    test_request *late = self_request(&rng, 4);
    CHECK_INT_EQ(attnd_scheduler_run_inline(s, &late->req), 0); /* draining */
    attnd_scheduler_free(s);
    test_request_free(small);
    test_request_free(over);
    test_request_free(st);

    /* A stateless request queued (held by a 10 s batching delay): none passes it. */
    reset_done();
    s = make_inline_sched(layer, 1000000, 10000000, &h);
    test_request *queued = self_request(&rng, 2), *next = self_request(&rng, 2);
    submit_ok(s, queued);
    CHECK_INT_EQ(attnd_scheduler_run_inline(s, &next->req), 0);
    attnd_scheduler_free(s); /* drains: the queued one is computed, without its delay */
    CHECK_INT_EQ(wait_done(1), 1);
    CHECK_INT_EQ(queued->req.outcome, ATTND_DONE_OK);

    /* inline_max_macs 0: never. */
    s = make_inline_sched(layer, 0, 0, &h);
    CHECK_INT_EQ(attnd_scheduler_run_inline(s, &late->req), 0);
    attnd_scheduler_free(s);
    test_request_free(queued);
    test_request_free(next);
    test_request_free(late);
    hook_fini(&h);
}

/* The recent-stream counter: distinct keys within the window, refreshed by a
 * new step, forgotten after it, 0 ignored, saturating rather than failing. */
TEST(streams_counter)
{
    static attnd_streams t; /* 16 KiB: not on the stack */
    attnd_streams_init(&t);
    const int64_t ms = 1000000;
    CHECK_INT_EQ(attnd_streams_active(&t, 0, 100 * ms), 0);
    for (uint64_t k = 1; k <= 5; k++) attnd_streams_seen(&t, k * 64, 0); /* aligned, like pointers */
    attnd_streams_seen(&t, 0, 0);
    attnd_streams_seen(&t, 64, 10 * ms); /* the same stream again: still one */
    CHECK_INT_EQ(attnd_streams_active(&t, 50 * ms, 100 * ms), 5);
    CHECK_INT_EQ(attnd_streams_active(&t, 105 * ms, 100 * ms), 1); /* only 64, seen at 10 ms */
    CHECK_INT_EQ(attnd_streams_active(&t, 105 * ms, 100 * ms), 1);
    CHECK_INT_EQ(attnd_streams_active(&t, 300 * ms, 100 * ms), 0);
    for (uint64_t k = 1; k <= 2 * ATTND_STREAMS_CAP; k++) attnd_streams_seen(&t, k, 400 * ms);
    int n = attnd_streams_active(&t, 400 * ms, 100 * ms);
    CHECK_MSG(n >= ATTND_STREAMS_CAP / 2 && n < ATTND_STREAMS_CAP, "saturated at %d", n);
    attnd_streams_seen(&t, 1, 401 * ms); /* a known key still refreshes when full */
    CHECK_INT_EQ(attnd_streams_active(&t, 450 * ms, 100 * ms), n);
}

/* Stream steps (attnd_request.stream) with the opt-in max_stream_wait_us: once
 * four streams have taken a step, the next step of one waits for the other
 * three and all four run as one iteration; a step waits no longer than max_stream_wait_us when the others do
 * not come; a lone stream and a request that is no step never wait. */
static test_request *step(uint64_t *rng, uint64_t stream)
{
    test_request *tr = make_request(rng, 1, 1, 1, SEQ_SELF);
    tr->req.stream = stream;
    return tr;
}

static attnd_scheduler *make_stream_sched(const attn_layer *layer, int64_t wait_us, hook_log *h)
{
    attnd_sched_config cfg = {.max_batch_requests = 16, .max_batch_tokens = 1000, .max_queue = 64,
                              .workers = 1, .max_stream_wait_us = wait_us};
    return sched_with(layer, &cfg, h);
}

TEST_WITH(stream_steps_batch, const attn_layer *layer)
{
    enum { N = 4, WAIT_US = 300000 };
    uint64_t rng = 23;
    hook_log h;
    hook_init(&h, 0);
    reset_done();
    attnd_scheduler *s = make_stream_sched(layer, WAIT_US, &h);
    test_request *first[N], *next[N], *late[2];
    for (int i = 0; i < N; i++) submit_ok(s, first[i] = step(&rng, 100 + (uint64_t)i));
    CHECK_INT_EQ(wait_done(N), N); /* four streams have stepped */
    submit_ok(s, next[0] = step(&rng, 100));
    sleep_ms(20);
    CHECK_INT_EQ(attnd_scheduler_queue_depth(s), 1); /* waiting for the other three */
    for (int i = 1; i < N; i++) submit_ok(s, next[i] = step(&rng, 100 + (uint64_t)i));
    CHECK_INT_EQ(wait_done(2 * N), 2 * N);
    for (int i = 0; i < N; i++) CHECK_INT_EQ(next[i]->req.batch_size, N);
    CHECK_MSG(next[0]->req.queue_us >= 20000 && next[0]->req.queue_us < WAIT_US,
              "queue_us %lld", (long long)next[0]->req.queue_us);
    /* Two of the four come back: they run after the wait, together. */
    submit_ok(s, late[0] = step(&rng, 100));
    submit_ok(s, late[1] = step(&rng, 101));
    CHECK_INT_EQ(wait_done(2 * N + 2), 2 * N + 2);
    CHECK_INT_EQ(late[0]->req.batch_size, 2);
    CHECK_MSG(late[0]->req.queue_us >= WAIT_US, "queue_us %lld", (long long)late[0]->req.queue_us);
    attnd_scheduler_free(s);
    for (int i = 0; i < N; i++) {
        CHECK(diff_vs_alone(layer, &next[i]->req) <= 1e-6);
        test_request_free(first[i]);
        test_request_free(next[i]);
    }
    test_request_free(late[0]);
    test_request_free(late[1]);
    hook_fini(&h);
}

TEST_WITH(lone_stream_never_waits, const attn_layer *layer)
{
    enum { STEPS = 5, WAIT_US = 2000000 };
    uint64_t rng = 29;
    hook_log h;
    hook_init(&h, 0);
    reset_done();
    attnd_scheduler *s = make_stream_sched(layer, WAIT_US, &h);
    test_request *st[STEPS], *plain[STEPS];
    for (int i = 0; i < STEPS; i++) { /* one stream, step after step */
        submit_ok(s, st[i] = step(&rng, 7));
        CHECK_INT_EQ(wait_done(i + 1), i + 1);
        CHECK_MSG(st[i]->req.queue_us < WAIT_US / 10, "step %d queue_us %lld", i, (long long)st[i]->req.queue_us);
    }
    for (int i = 0; i < STEPS; i++) { /* requests that are no step, with a stream active */
        submit_ok(s, plain[i] = make_request(&rng, 1, 2, 4, SEQ_SELF));
        CHECK_INT_EQ(wait_done(STEPS + i + 1), STEPS + i + 1);
        CHECK_MSG(plain[i]->req.queue_us < WAIT_US / 10, "request %d queue_us %lld", i,
                  (long long)plain[i]->req.queue_us);
    }
    attnd_scheduler_free(s);
    for (int i = 0; i < STEPS; i++) {
        test_request_free(st[i]);
        test_request_free(plain[i]);
    }
    hook_fini(&h);
}


/* ------------------------------------------------------------ decode loop */

/* A self-attention append of t rows to a contiguous float32 cache holding
 * cache_len rows (room for t more): a step of `stream`. */
static test_request *append_req(uint64_t *rng, float *k, float *v, int cache_len, int t,
                                uint64_t stream, int window)
{
    test_request *tr = calloc(1, sizeof *tr);
    attnd_request *r = &tr->req;
    r->n_seqs = 1;
    r->seqs = calloc(1, sizeof *r->seqs);
    attn_seq *q = &r->seqs[0];
    q->t = t;
    q->s = cache_len + t;
    q->query = rand_floats(rng, (size_t)t * E);
    q->output = malloc((size_t)t * E * sizeof(float));
    q->cache_k = k;
    q->cache_v = v;
    q->cache_len = cache_len;
    q->cache_append = 1;
    q->is_causal = 1;
    q->window = window;
    r->n_tokens = (size_t)q->s;
    r->stream = stream;
    return tr;
}

/* A cache of `rows` rows of random K and V, with room for `room` more. */
static float *cache_of(uint64_t *rng, int rows, int room)
{
    float *c = calloc((size_t)(rows + room) * E, sizeof *c);
    for (size_t i = 0; i < (size_t)rows * E; i++) c[i] = rng_float(rng);
    return c;
}

/* Largest |difference| between r's output and cache rows and the same append
 * computed whole, by the library alone, on copies (k0, v0) of the cache as it
 * was before r. */
static double diff_vs_whole(const attn_layer *layer, const attnd_request *r, float *k0, float *v0)
{
    attn_seq ref = r->seqs[0];
    ref.cache_k = k0;
    ref.cache_v = v0;
    ref.output = malloc((size_t)ref.t * E * sizeof(float));
    attn_error err = { 0 };
    double worst = 0;
    if (attn_forward(layer, &ref, 1, NULL, NULL, &err) != ATTN_OK) {
        fprintf(stderr, "reference forward failed: %s\n", err.message);
        worst = INFINITY;
    }
    for (size_t i = 0; isfinite(worst) && i < (size_t)ref.t * E; i++)
        worst = fmax(worst, fabs((double)ref.output[i] - r->seqs[0].output[i]));
    for (size_t i = 0; isfinite(worst) && i < (size_t)ref.s * E; i++) {
        worst = fmax(worst, fabs((double)k0[i] - r->seqs[0].cache_k[i]));
        worst = fmax(worst, fabs((double)v0[i] - r->seqs[0].cache_v[i]));
    }
    free(ref.output);
    return worst;
}

/* The pieces attnd_piece_rows plans for t rows after `cached` (budget chunk). */
static int planned_pieces(const attn_layer *layer, int window, int cached, int t, int chunk)
{
    attn_layer_info in;
    attn_layer_get_info(layer, &in);
    int pieces = 0;
    for (int done = 0; done < t; pieces++) done += attnd_piece_rows(&in, window, cached + done, t - done, chunk);
    return pieces;
}

/* attnd_piece_rows by hand on a layer of one head of width 1, no output
 * projection: a row's projections are 3 multiply-adds, each position it sees
 * 2 more. Budget 4 rows at the start: 4 x 3 + 2 x (1 + 2 + 3 + 4) = 32. After
 * 2 cached rows, n rows cost 7n + n(n + 1): 2 rows (20; 3 would be 33); after
 * 10, 23n + n(n + 1): 1 row (25; 2 would be 52), never 0. Window 3 (budget
 * 12 + 2 x (1 + 2 + 3 + 3) = 30): after 10 rows each row sees 3, 9n: 3 rows.
 * Never under a quarter of the budget: budget 8 deep in a long cache, 2 rows.
 * Rows that each attend to all k keys (attnd_piece_rows_all_keys) cost
 * 3 + 2k: k = 2, 4 rows (28 of 32); k = 5, 2 (26); k = 10, 1 (23); budget 8
 * over a million keys, 2. And on the test layer: the rows never grow as the cache does, never exceed
 * the rows left, and an empty cache gets the whole budget. */
TEST_WITH(piece_rows_cost, const attn_layer *layer)
{
    attn_layer_info one = {.num_heads = 1, .num_kv_heads = 1, .head_dim_k = 1, .head_dim_v = 1,
                           .embed_q = 1, .embed_k = 1, .embed_v = 1, .embed_out = 1};
    CHECK_INT_EQ(attnd_piece_rows(&one, 0, 0, 100, 4), 4);
    CHECK_INT_EQ(attnd_piece_rows(&one, 0, 2, 100, 4), 2);
    CHECK_INT_EQ(attnd_piece_rows(&one, 0, 10, 100, 4), 1);
    CHECK_INT_EQ(attnd_piece_rows(&one, 0, 1000000, 100, 4), 1);
    CHECK_INT_EQ(attnd_piece_rows(&one, 3, 10, 100, 4), 3);
    CHECK_INT_EQ(attnd_piece_rows(&one, 0, 0, 3, 4), 3);
    CHECK_INT_EQ(attnd_piece_rows(&one, 0, 1000000, 100, 8), 2);
    CHECK_INT_EQ(attnd_piece_rows(&one, 0, 1000000, 1, 8), 1);
    CHECK_INT_EQ(attnd_piece_rows_all_keys(&one, 2, 100, 4), 4);
    CHECK_INT_EQ(attnd_piece_rows_all_keys(&one, 5, 100, 4), 2);
    CHECK_INT_EQ(attnd_piece_rows_all_keys(&one, 10, 100, 4), 1);
    CHECK_INT_EQ(attnd_piece_rows_all_keys(&one, 1000000, 100, 8), 2);
    CHECK_INT_EQ(attnd_piece_rows_all_keys(&one, 2, 3, 4), 3);
    attn_layer_info in;
    attn_layer_get_info(layer, &in);
    int prev = 64;
    for (long long cached = 0; cached <= 100000; cached = cached * 2 + 1) {
        int n = attnd_piece_rows(&in, 0, cached, 1000, 64);
        CHECK_MSG(n >= 1 && n <= prev, "after %lld cached rows a piece of %d rows (before: %d)", cached, n, prev);
        prev = n;
    }
    CHECK_INT_EQ(attnd_piece_rows(&in, 0, 0, 1000, 64), 64);
    CHECK_INT_EQ(attnd_piece_rows(&in, 0, 5, 2, 64), 2);
}

static attnd_scheduler *make_loop_sched(const attn_layer *layer, int chunk, int workers, hook_log *h)
{
    attnd_sched_config cfg = {.max_batch_requests = 16, .max_batch_tokens = 8192, .max_queue = 64,
                              .workers = workers, .prefill_chunk_rows = chunk};
    return sched_with(layer, &cfg, h);
}

/* A long append computed in pieces (prefill_chunk_rows 7) answers what the
 * whole append computes, cache rows included, with and without a window; it
 * took the iterations attnd_piece_rows plans (more than ceil(T / 7): later
 * rows see more positions), one after the other. */
TEST_WITH(chunked_equals_whole, const attn_layer *layer)
{
    enum { L0 = 5, T = 100, CHUNK = 7 };
    const int windows[] = {0, 9};
    for (int w = 0; w < 2; w++) {
        uint64_t rng = 41 + (uint64_t)w;
        hook_log h;
        hook_init(&h, 0);
        reset_done();
        attnd_scheduler *s = make_loop_sched(layer, CHUNK, 2, &h);
        float *k = cache_of(&rng, L0, T), *v = cache_of(&rng, L0, T);
        float *k0 = malloc((size_t)(L0 + T) * E * sizeof *k0), *v0 = malloc((size_t)(L0 + T) * E * sizeof *v0);
        memcpy(k0, k, (size_t)(L0 + T) * E * sizeof *k0);
        memcpy(v0, v, (size_t)(L0 + T) * E * sizeof *v0);
        test_request *r = append_req(&rng, k, v, L0, T, 5, windows[w]);
        submit_ok(s, r);
        CHECK_INT_EQ(wait_done(1), 1);
        attnd_scheduler_free(s);
        CHECK_INT_EQ(r->req.outcome, ATTND_DONE_OK);
        const int plan = planned_pieces(layer, windows[w], L0, T, CHUNK);
        CHECK(plan > (T + CHUNK - 1) / CHUNK);
        CHECK_INT_EQ(r->req.iterations, plan);
        CHECK_INT_EQ(r->req.iter_last - r->req.iter_first + 1, plan);
        CHECK_INT_EQ(h.n_batches, plan);
        double d = diff_vs_whole(layer, &r->req, k0, v0);
        printf("window %d: %d rows in %d pieces of <= %d: max diff vs whole %.3g\n", windows[w], T,
               r->req.iterations, CHUNK, d);
        CHECK_MSG(d <= 1e-6, "chunked append differs from the whole one by %g", d);
        test_request_free(r);
        free(k); free(v); free(k0); free(v0);
        hook_fini(&h);
    }
}

/* While a long append is computed in pieces, steps of other streams that
 * arrive wait for one iteration at most: held at the first iteration (one
 * worker, blocked in the hook), three steps queue; they all run in the next
 * iteration, beside the prefill's second piece, long before its last. A
 * step's iteration is always the one after those started when it queued. */
/* A one-worker decode loop (pieces of chunk rows) computing a T-row
 * prefill of session 1, its worker held in the hook after iteration 1 (the
 * first piece alone); the steps tests queue behind it. */
typedef struct held_prefill {
    hook_log h;
    attnd_scheduler *s;
    float *k, *v;      /* the prefill's rows */
    test_request *pre; /* the prefill */
} held_prefill;

static void held_prefill_start(held_prefill *f, const attn_layer *layer, uint64_t *rng, int T, int chunk)
{
    hook_init(&f->h, 1);
    f->h.first_only = 1;
    reset_done();
    f->s = make_loop_sched(layer, chunk, 1, &f->h);
    f->k = cache_of(rng, 0, T);
    f->v = cache_of(rng, 0, T);
    f->pre = append_req(rng, f->k, f->v, 0, T, 1, 0);
    submit_ok(f->s, f->pre);
    CHECK(hook_wait_blocked(&f->h)); /* iteration 1 (the first piece) is done, its worker held */
}

/* After attnd_scheduler_free(f->s): the prefill equals the unchunked
 * append, in as many iterations as planned_pieces says; then frees it all. */
static void held_prefill_check_free(held_prefill *f, const attn_layer *layer, int T, int chunk)
{
    float *k0 = calloc((size_t)T * E, sizeof *k0), *v0 = calloc((size_t)T * E, sizeof *v0);
    CHECK_INT_EQ(f->pre->req.outcome, ATTND_DONE_OK);
    CHECK_INT_EQ(f->pre->req.iter_first, 1);
    CHECK_INT_EQ(f->pre->req.iterations, planned_pieces(layer, 0, 0, T, chunk));
    CHECK_INT_EQ(f->pre->req.iter_last, f->pre->req.iterations);
    CHECK(diff_vs_whole(layer, &f->pre->req, k0, v0) <= 1e-6);
    test_request_free(f->pre);
    free(f->k), free(f->v), free(k0), free(v0);
    hook_fini(&f->h);
}

TEST_WITH(step_waits_one_piece, const attn_layer *layer)
{
    enum { T = 400, CHUNK = 4, STEPS = 3, L = 20 };
    uint64_t rng = 47;
    held_prefill f;
    held_prefill_start(&f, layer, &rng, T, CHUNK);
    attnd_scheduler *s = f.s;
    test_request *st[STEPS];
    float *sk[STEPS], *sv[STEPS];
    for (int i = 0; i < STEPS; i++) {
        sk[i] = cache_of(&rng, L, 1);
        sv[i] = cache_of(&rng, L, 1);
        submit_ok(s, st[i] = append_req(&rng, sk[i], sv[i], L, 1, 10 + (uint64_t)i, 0));
    }
    hook_open(&f.h);
    CHECK_INT_EQ(wait_done(STEPS + 1), STEPS + 1);
    attnd_scheduler_free(s);
    for (int i = 0; i < STEPS; i++) {
        CHECK_INT_EQ(st[i]->req.outcome, ATTND_DONE_OK);
        CHECK_INT_EQ(st[i]->req.queued_after, 1);
        CHECK_INT_EQ(st[i]->req.iter_first, 2);
        CHECK_INT_EQ(st[i]->req.iterations, 1);
        CHECK_INT_EQ(st[i]->req.batch_size, STEPS + 1); /* the steps and one piece */
        CHECK(diff_vs_alone(layer, &st[i]->req) <= 1e-6);
        test_request_free(st[i]);
        free(sk[i]);
        free(sv[i]);
    }
    CHECK_INT_EQ(f.h.sizes[1], STEPS + 1);
    for (int b = 2; b < f.h.n_batches && b < MAX_BATCHES; b++) CHECK_INT_EQ(f.h.sizes[b], 1);
    held_prefill_check_free(&f, layer, T, CHUNK);
}

/* Holds the next worker that reports a PIECE part (from now on). */
static void hook_hold_piece(hook_log *h)
{
    pthread_mutex_lock(&h->mu);
    h->hold_piece = 1;
    pthread_mutex_unlock(&h->mu);
}

/* An iteration with steps and a piece answers its steps before it computes
 * its piece, so a closed-loop stream's next step is queued in time for the
 * next iteration: held at iteration 1 (the first piece alone), three steps
 * queue; iteration 2 reports its steps (STEPS part, the iteration counted
 * with all four members), answers them, then computes its piece, reported
 * as the PIECE part — held there, every step is answered already and the
 * prefill is not; a step queued meanwhile runs in iteration 3, beside the
 * prefill's third piece. */
TEST_WITH(steps_answered_before_the_piece, const attn_layer *layer)
{
    enum { T = 400, CHUNK = 4, STEPS = 3, L = 20 };
    uint64_t rng = 59;
    held_prefill f;
    held_prefill_start(&f, layer, &rng, T, CHUNK);
    attnd_scheduler *s = f.s;
    hook_log *h = &f.h;
    float *sk[STEPS + 1], *sv[STEPS + 1];
    test_request *st[STEPS + 1];
    for (int i = 0; i <= STEPS; i++) {
        sk[i] = cache_of(&rng, L, 1);
        sv[i] = cache_of(&rng, L, 1);
        st[i] = append_req(&rng, sk[i], sv[i], L, 1, 10 + (uint64_t)i, 0);
    }
    for (int i = 0; i < STEPS; i++) submit_ok(s, st[i]);
    hook_hold_piece(h);
    hook_release(h, 0); /* iteration 2 may run; its PIECE report will hold */
    CHECK_INT_EQ(wait_done(STEPS), STEPS);
    CHECK(hook_wait_blocked(h));
    pthread_mutex_lock(&done_mu);
    int steps_done = 0;
    for (int i = 0; i < STEPS; i++) steps_done += st[i]->done_calls;
    const int pre_done = f.pre->done_calls;
    pthread_mutex_unlock(&done_mu);
    CHECK_INT_EQ(steps_done, STEPS); /* answered while their iteration's piece was held */
    CHECK_INT_EQ(pre_done, 0);
    pthread_mutex_lock(&h->mu);
    const int reports = h->n_batches;
    pthread_mutex_unlock(&h->mu);
    CHECK_INT_EQ(reports, 3); /* iteration 1 WHOLE; iteration 2 STEPS, PIECE */
    CHECK_INT_EQ(h->parts[0], ATTND_REPORT_WHOLE);
    CHECK_INT_EQ(h->parts[1], ATTND_REPORT_STEPS);
    CHECK_INT_EQ(h->parts[2], ATTND_REPORT_PIECE);
    CHECK_INT_EQ(h->sizes[1], STEPS + 1);
    CHECK(h->tokens[1] > STEPS); /* the steps' rows and the piece's */
    submit_ok(s, st[STEPS]); /* queued while iteration 2's piece computes */
    hook_open(h);
    CHECK_INT_EQ(wait_done(STEPS + 2), STEPS + 2);
    attnd_scheduler_free(s);
    for (int i = 0; i <= STEPS; i++) {
        CHECK_INT_EQ(st[i]->req.outcome, ATTND_DONE_OK);
        CHECK_INT_EQ(st[i]->req.iter_first, i < STEPS ? 2 : 3);
        CHECK_INT_EQ(st[i]->req.batch_size, i < STEPS ? STEPS + 1 : 2);
        CHECK(diff_vs_alone(layer, &st[i]->req) <= 1e-6);
        test_request_free(st[i]);
        free(sk[i]);
        free(sv[i]);
    }
    held_prefill_check_free(&f, layer, T, CHUNK);
}

/* A step and a stateless request whose deadlines pass while the only worker
 * is held are answered 504 (TIMEOUT) at their deadline, before the worker is
 * free: the deadline thread answers them, uncomputed. */
TEST_WITH(deadline_while_held, const attn_layer *layer)
{
    uint64_t rng = 53;
    hook_log h;
    hook_init(&h, 1);
    reset_done();
    attnd_scheduler *s = make_loop_sched(layer, 0, 1, &h);
    float *k = cache_of(&rng, 3, 1), *v = cache_of(&rng, 3, 1);
    test_request *first = make_request(&rng, 1, 2, 2, SEQ_SELF);
    test_request *stp = append_req(&rng, k, v, 3, 1, 9, 0), *one = make_request(&rng, 1, 2, 2, SEQ_SELF);
    stp->req.timeout_ms = 50;
    one->req.timeout_ms = 80;
    hold_first(s, &h, first);
    int64_t t0 = attnd_now_ns();
    submit_ok(s, stp);
    submit_ok(s, one);
    CHECK_INT_EQ(wait_done(2), 2);
    pthread_mutex_lock(&done_mu);
    double ms1 = (double)(stp->done_ns - t0) / 1e6, ms2 = (double)(one->done_ns - t0) / 1e6;
    pthread_mutex_unlock(&done_mu);
    printf("deadlines 50 / 80 ms while the worker is held: answered at %.1f / %.1f ms\n", ms1, ms2);
    CHECK_INT_EQ(stp->done_calls, 1);
    CHECK_INT_EQ(one->done_calls, 1);
    CHECK_INT_EQ(first->done_calls, 0); /* still held: nobody computed them */
    CHECK_INT_EQ(stp->req.outcome, ATTND_DONE_TIMEOUT);
    CHECK_INT_EQ(one->req.outcome, ATTND_DONE_TIMEOUT);
    /* At the deadline (+10 ms on a quiet machine; slack here for a loaded one). */
    CHECK_MSG(ms1 >= 49 && ms1 < 100, "the 50 ms step answered at %.1f ms", ms1);
    CHECK_MSG(ms2 >= 79 && ms2 < 130, "the 80 ms request answered at %.1f ms", ms2);
    hook_open(&h);
    CHECK_INT_EQ(wait_done(3), 3);
    attnd_scheduler_free(s);
    CHECK_INT_EQ(h.n_requests, 1);
    test_request_free(first);
    test_request_free(stp);
    test_request_free(one);
    free(k);
    free(v);
    hook_fini(&h);
}

/* One worker, both kinds queued while it is held: the older head goes first,
 * and the other kind runs next (neither waits for the other's newcomers). */
TEST_WITH(oldest_kind_first, const attn_layer *layer)
{
    uint64_t rng = 59;
    hook_log h;
    hook_init(&h, 1);
    h.first_only = 1;
    reset_done();
    attnd_scheduler *s = make_loop_sched(layer, 0, 1, &h);
    float *k = cache_of(&rng, 3, 1), *v = cache_of(&rng, 3, 1);
    test_request *first = make_request(&rng, 1, 2, 2, SEQ_SELF);
    test_request *stp = append_req(&rng, k, v, 3, 1, 9, 0), *one = make_request(&rng, 1, 2, 2, SEQ_SELF);
    hold_first(s, &h, first);
    submit_ok(s, stp);
    sleep_ms(2);
    submit_ok(s, one);
    hook_open(&h);
    CHECK_INT_EQ(wait_done(3), 3);
    attnd_scheduler_free(s);
    CHECK_INT_EQ(h.n_batches, 3);
    CHECK_INT_EQ(stp->req.iter_first, 1);
    int64_t step_start = stp->req.enqueued_ns + stp->req.queue_us * 1000;
    int64_t one_start = one->req.enqueued_ns + one->req.queue_us * 1000;
    CHECK_MSG(step_start <= one_start, "the older step started %lld us after the request",
              (long long)(step_start - one_start) / 1000);
    CHECK(diff_vs_alone(layer, &stp->req) <= 1e-6 && diff_vs_alone(layer, &one->req) <= 1e-6);
    test_request_free(first);
    test_request_free(stp);
    test_request_free(one);
    free(k);
    free(v);
    hook_fini(&h);
}

/* Mixed clients under four batching configurations. */
TEST_WITH(mixed, const attn_layer *layer)
{
    run_mixed(layer, 8, 2000, 2);
    run_mixed(layer, 1, 2000, 2);
    run_mixed(layer, 6, 0, 2); /* a delay of 0 still works */
    run_mixed(layer, 16, 500, 1);
}

int main(void)
{
    attn_layer *layer = make_layer(0x5eed);
    if (layer == NULL) return check_summary();
    RUN_WITH(config, layer);
    RUN_WITH(mixed, layer);
    RUN_WITH(token_budget, layer);
    RUN_WITH(request_cap, layer);
    RUN_WITH(queue_full, layer);
    RUN_WITH(deadline, layer);
    RUN_WITH(bad_request_isolated, layer);
    RUN_WITH(delay_waits, layer);
    RUN_WITH(drain, layer);
    RUN_WITH(second_worker_collects, layer);
    RUN_WITH(drain_races_submit, layer);
    RUN_WITH(run_inline_rules, layer);
    RUN(streams_counter);
    RUN_WITH(stream_steps_batch, layer);
    RUN_WITH(lone_stream_never_waits, layer);
    RUN_WITH(piece_rows_cost, layer);
    RUN_WITH(chunked_equals_whole, layer);
    RUN_WITH(step_waits_one_piece, layer);
    RUN_WITH(steps_answered_before_the_piece, layer);
    RUN_WITH(deadline_while_held, layer);
    RUN_WITH(oldest_kind_first, layer);
    attn_layer_free(layer);
    return check_summary();
}
