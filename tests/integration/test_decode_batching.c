/* test_decode_batching.c — the decode loop through the daemon.
 *  - decode steps batch across sessions: 24 streams each hold 1000 cached
 *    positions and append one position at a time from their own threads; the
 *    batch budget counts a step's one projected row apart from the cache it
 *    reads, so the steps of many streams run together; --max-batch-kv-bytes
 *    bounds the bytes an iteration reads (4 streams' worth: at most 4);
 *  - one client interleaving 4 sessions, one request at a time, never waits
 *    for itself: every step runs in the iteration after those started when it
 *    queued, alone, and its queue time is a fraction of a millisecond (with
 *    the old 2 ms stream wait every step waited it out);
 *  - chunked prefill: appends computed 3 rows per iteration answer what the
 *    whole appends answer (1e-6), for f32 / f16 / bf16 / int8 caches, windows,
 *    and a RoPE + GQA Llama layer;
 *  - pieces cost alike: the same 64 rows take more (smaller) pieces appended
 *    after 1000 cached rows than onto an empty session, as the rows deep in a
 *    prefill attend to more positions;
 *  - a 4000-row prefill computed one row per iteration never holds a decode
 *    step of another session beyond one iteration; nor does a 4000-row causal
 *    one-shot, which the loop computes in pieces too;
 *  - chunked causal one-shots answer what whole ones answer (1e-6, windows,
 *    RoPE + GQA);
 *  - deadlines: a step and a request queued behind a long batch are answered
 *    504 at their timeout_ms, while that batch still computes (or, the
 *    request, computed if the batch ended before its deadline).
 */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#define E 64          /* the demo model's width */
#define STREAMS 24
#define CACHED 1000
#define STEPS 6

typedef struct stream {
    const attnd_proc *p;
    int seed;         /* its rows' values */
    char id[64];
    int steps;        /* STEPS unless set */
    int ok;           /* steps answered 200 with a well-formed body */
    int max_batch;
    int batch[32];    /* each step's batch_size */
    long queue_us[32]; /* each step's timing.queue_us */
    int bad_length;   /* session.length not advancing by one */
} stream;

static float val(int s, int i, int j) { return (float)sin(0.37 * s + 0.011 * i + 0.7 * j); }

static char *rows_body(int s, int from, int n)
{
    sbuf b = {0};
    sb_printf(&b, "{\"query\":[");
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < E; j++)
            sb_printf(&b, "%s%.6g", j ? "," : "", val(s, from + i, j));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]}");
    return b.p;
}

static long post(const attnd_proc *p, const char *path, const char *body, json_t **out)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", p->base_url, path);
    http_result r;
    if (http_do("POST", url, body, strlen(body), NULL, &r) != 0)
        return -1;
    json_error_t je;
    *out = json_loads(r.body, 0, &je);
    long st = r.status;
    http_result_free(&r);
    return st;
}

/* Creates stream s and prefills CACHED positions. Returns 0 or -1. */
static int open_stream(stream *st)
{
    json_t *j = NULL;
    if (post(st->p, "/v1/models/demo/sessions", "{}", &j) != 201 || !j)
        return json_decref(j), -1;
    snprintf(st->id, sizeof st->id, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s/append", st->id);
    char *body = rows_body(st->seed, 0, CACHED);
    long code = post(st->p, path, body, &j);
    free(body);
    json_decref(j);
    return code == 200 ? 0 : -1;
}

static void *run_steps(void *arg)
{
    stream *st = arg;
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s/append", st->id);
    const int steps = st->steps ? st->steps : STEPS;
    for (int k = 0; k < steps && k < 32; k++) {
        char *body = rows_body(st->seed, CACHED + k, 1);
        json_t *j = NULL;
        long code = post(st->p, path, body, &j);
        free(body);
        json_t *timing = json_object_get(j, "timing"), *sess = json_object_get(j, "session");
        if (code == 200 && json_array_size(json_object_get(j, "output")) == 1) {
            st->ok++;
            int b = (int)json_integer_value(json_object_get(timing, "batch_size"));
            if (b > st->max_batch)
                st->max_batch = b;
            st->batch[k] = b;
            st->queue_us[k] = (long)json_integer_value(json_object_get(timing, "queue_us"));
            if (json_integer_value(json_object_get(sess, "length")) != CACHED + k + 1)
                st->bad_length++;
        }
        json_decref(j);
    }
    return NULL;
}

/* n streams opened on p step `steps` times each, all at once (threads). */
static void step_streams(const attnd_proc *p, stream *st, int n, int steps)
{
    for (int s = 0; s < n; s++) {
        memset(&st[s], 0, sizeof st[s]);
        st[s].p = p;
        st[s].seed = s;
        st[s].steps = steps;
        CHECK_MSG(open_stream(&st[s]) == 0, "stream %d did not open", s);
    }
    pthread_t th[STREAMS];
    for (int s = 0; s < n; s++) pthread_create(&th[s], NULL, run_steps, &st[s]);
    for (int s = 0; s < n; s++) {
        pthread_join(th[s], NULL);
        CHECK_INT_EQ(st[s].ok, steps);
        CHECK_INT_EQ(st[s].bad_length, 0);
    }
}

/* Opens STREAMS streams on p, steps them all at once; returns the largest
 * batch any step ran in (a failed step is reported by step_streams' checks). */
static int largest_batch(const attnd_proc *p)
{
    static stream st[STREAMS];
    step_streams(p, st, STREAMS, STEPS);
    int largest = 0;
    for (int s = 0; s < STREAMS; s++)
        if (st[s].max_batch > largest)
            largest = st[s].max_batch;
    return largest;
}

TEST(decode_steps_batch_together)
{
    attnd_proc p;
    /* A 5 ms queue delay lets a batch fill whatever the machine's load: the test
     * is about the budget (8 steps when a step counted its cache), not timing. */
    /* The opt-in stream wait lets an iteration fill whatever the machine's
     * load: the test is about the budget (8 steps when a step counted its
     * cache), not timing. */
    const char *args[] = {"--workers", "1", "--max-batch-requests", "64",
                          "--max-stream-wait-us", "50000", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    int largest = largest_batch(&p);
    printf("%d streams x %d cached positions, one-row steps: largest batch %d\n", STREAMS,
           CACHED, largest);
    CHECK_MSG(largest > 16, "largest decode batch %d (a step's cache must not count as "
              "tokens)", largest);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

TEST(kv_bytes_bound_a_batch)
{
    /* One stream's cache at a step: (CACHED + STEPS) rows x (8 heads x (8 + 8)) floats. */
    char budget[32];
    snprintf(budget, sizeof budget, "%d", 4 * (CACHED + STEPS) * 8 * 16 * 4);
    attnd_proc p;
    const char *args[] = {"--workers", "1", "--max-batch-requests", "64",
                          "--max-stream-wait-us", "50000", "--max-batch-kv-bytes", budget, NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    int largest = largest_batch(&p);
    printf("--max-batch-kv-bytes %s (4 streams): largest batch %d\n", budget, largest);
    CHECK_MSG(largest >= 2 && largest <= 4, "largest batch %d under a 4-stream budget", largest);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* ------------------------------------------------------------ the loop */

/* Creates a session of model on p ({"window": W} when window > 0) into id. */
static int create_session(const attnd_proc *p, const char *model, int window, char *id, size_t cap)
{
    char path[128], body[64];
    snprintf(path, sizeof path, "/v1/models/%s/sessions", model);
    snprintf(body, sizeof body, window > 0 ? "{\"window\":%d}" : "{}", window);
    json_t *j = NULL;
    long code = post(p, path, body, &j);
    const char *v = json_string_value(json_object_get(j, "id"));
    snprintf(id, cap, "%s", v ? v : "");
    json_decref(j);
    return code == 201 && v ? 0 : -1;
}

/* Appends rows [from, from + n) of stream `seed` to session id (E wide);
 * returns the status and *out the answer. extra: more body members or "". */
static long append_rows(const attnd_proc *p, const char *id, int seed, int from, int n, int e,
                        const char *extra, json_t **out)
{
    sbuf b = {0};
    sb_printf(&b, "{%s\"query\":[", extra);
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < e; j++)
            sb_printf(&b, "%s%.6g", j ? "," : "", val(seed, from + i, j));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]}");
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s/append", id);
    long code = post(p, path, b.p, out);
    free(b.p);
    return code;
}

static long long member(json_t *j, const char *obj, const char *key)
{
    return (long long)json_integer_value(json_object_get(json_object_get(j, obj), key));
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? -1 : x > y;
}

/* One client, four sessions, one request at a time: round after round it
 * appends one row to each session in turn. Nothing else reaches the daemon,
 * so no step has anything to wait for: each runs in the iteration after those
 * started when it queued (decode.first == decode.queued_after + 1), alone,
 * and the median queue time is well under a millisecond (the old default
 * stream wait held every step 2 ms for the client's other sessions). */
TEST(interleaved_client_never_waits)
{
    enum { K = 4, ROUNDS = 30, PREFIX = 32 };
    attnd_proc p;
    if (attnd_proc_start(&p, NULL) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char id[K][64];
    json_t *j = NULL;
    for (int k = 0; k < K; k++) {
        CHECK_INT_EQ(create_session(&p, "demo", 0, id[k], sizeof id[k]), 0);
        CHECK_INT_EQ(append_rows(&p, id[k], k, 0, PREFIX, E, "", &j), 200);
        json_decref(j);
    }
    static long queue[K * ROUNDS];
    int n = 0, wrong_iter = 0, not_alone = 0;
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < K; k++) {
            long code = append_rows(&p, id[k], k, PREFIX + r, 1, E, "", &j);
            CHECK_INT_EQ(code, 200);
            if (code == 200) {
                queue[n++] = (long)member(j, "timing", "queue_us");
                wrong_iter += member(j, "decode", "first") != member(j, "decode", "queued_after") + 1 ||
                              member(j, "decode", "iterations") != 1;
                not_alone += member(j, "timing", "batch_size") != 1;
            }
            json_decref(j);
        }
    qsort(queue, (size_t)n, sizeof *queue, cmp_long);
    long median = n ? queue[n / 2] : -1, worst = n ? queue[n - 1] : -1;
    printf("one client, %d sessions interleaved, %d steps: queue_us median %ld, max %ld\n", K, n,
           median, worst);
    CHECK_INT_EQ(n, K * ROUNDS);
    CHECK_INT_EQ(wrong_iter, 0);
    CHECK_INT_EQ(not_alone, 0);
    CHECK_MSG(median < 500, "median queue_us %ld: a step waited for the client's own next one", median);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* The models both chunked-prefill daemons serve: (name, E). */
static const struct { const char *name; int e; } chunk_models[] = {
    {"demo", 64}, {"half", 64}, {"brain", 64}, {"small", 64}, {"llama", 64}, {"llama8", 64},
};

static int start_chunk_daemon(attnd_proc *p, const char *chunk)
{
    const char *args[] = {"--prefill-chunk-rows", chunk, "--kv-page-bytes", "4096",
                          "--model", "demo=config/demo.safetensors",
                          "--model", "half=config/demo.safetensors,kv_dtype=f16",
                          "--model", "brain=config/demo.safetensors,kv_dtype=bf16",
                          "--model", "small=config/demo.safetensors,kv_dtype=int8",
                          "--model", "llama=tests/fixtures/ckpt/llama_gqa,layer=1",
                          "--model", "llama8=tests/fixtures/ckpt/llama_gqa,layer=1,kv_dtype=int8",
                          NULL};
    return attnd_proc_start(p, args);
}

/* The daemon computing appends 3 rows per iteration (*ch) and the one
 * computing them whole (*wh). 0, or -1 (a failed check) when one did not start. */
static int start_chunk_pair(attnd_proc *ch, attnd_proc *wh)
{
    if (start_chunk_daemon(ch, "3") == 0 && start_chunk_daemon(wh, "0") == 0) return 0;
    CHECK_MSG(0, "daemons did not start");
    return -1;
}

/* Largest |a - b| over two equally shaped output matrices; INFINITY when
 * their shapes differ. */
static double max_diff(json_t *a, json_t *b)
{
    if (!json_is_array(a) || !json_is_array(b) || json_array_size(a) != json_array_size(b)) return INFINITY;
    double worst = 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *ra = json_array_get(a, i), *rb = json_array_get(b, i);
        if (json_array_size(ra) != json_array_size(rb)) return INFINITY;
        for (size_t k = 0; k < json_array_size(ra); k++)
            worst = fmax(worst, fabs(json_number_value(json_array_get(ra, k)) -
                                     json_number_value(json_array_get(rb, k))));
    }
    return worst;
}

/* The same stream on a daemon computing appends 3 rows per iteration and one
 * computing them whole: a 5-row prefix, a 40-row append, a 1-row step; every
 * answer agrees to 1e-6 (f32, f16, bf16 and int8 caches, no window and a
 * 7-row window, RoPE + GQA), and the 40 rows took several iterations on the
 * first daemon and one on the second. */
TEST(chunked_prefill_equals_whole)
{
    attnd_proc ch, wh;
    if (start_chunk_pair(&ch, &wh) != 0) return;
    const int lens[] = {5, 40, 1};
    for (size_t m = 0; m < sizeof chunk_models / sizeof chunk_models[0]; m++)
        for (int window = 0; window <= 7; window += 7) {
            char a[64], b[64];
            CHECK_INT_EQ(create_session(&ch, chunk_models[m].name, window, a, sizeof a), 0);
            CHECK_INT_EQ(create_session(&wh, chunk_models[m].name, window, b, sizeof b), 0);
            double worst = 0;
            int from = 0, pieces = 0;
            for (int i = 0; i < 3; i++) {
                json_t *ja = NULL, *jb = NULL;
                CHECK_INT_EQ(append_rows(&ch, a, 3, from, lens[i], chunk_models[m].e, "", &ja), 200);
                CHECK_INT_EQ(append_rows(&wh, b, 3, from, lens[i], chunk_models[m].e, "", &jb), 200);
                worst = fmax(worst, max_diff(json_object_get(ja, "output"), json_object_get(jb, "output")));
                CHECK_INT_EQ(member(jb, "decode", "iterations"), 1);
                if (lens[i] == 40) pieces = (int)member(ja, "decode", "iterations");
                json_decref(ja);
                json_decref(jb);
                from += lens[i];
            }
            printf("%-6s window %d: 40 rows in %d iterations of <= 3 rows (or one block): max diff vs whole %.3g\n",
                   chunk_models[m].name, window, pieces, worst);
            CHECK_MSG(worst <= 1e-6, "%s window %d: chunked differs from whole by %g", chunk_models[m].name,
                      window, worst);
            CHECK_MSG(pieces > 1, "%s: the 40-row append took %d iteration(s)", chunk_models[m].name, pieces);
        }
    CHECK_INT_EQ(attnd_proc_stop(&ch), 0);
    CHECK_INT_EQ(attnd_proc_stop(&wh), 0);
}

/* POSTs rows [0, n) of stream `seed` (e wide) to /v1/models/<model>/attention
 * as one sequence, with more body members `extra` ("" or ending in ','). */
static long oneshot_rows(const attnd_proc *p, const char *model, int seed, int n, int e, const char *extra,
                         json_t **out)
{
    sbuf b = {0};
    sb_printf(&b, "{%s\"query\":[", extra);
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < e; j++) sb_printf(&b, "%s%.6g", j ? "," : "", val(seed, i, j));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]}");
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s/attention", model);
    long code = post(p, path, b.p, out);
    free(b.p);
    return code;
}

/* A causal one-shot of 40 rows on the daemon computing 3 rows per iteration
 * and on the one computing whole: the same answer (1e-6; the demo layer and a
 * RoPE + GQA Llama layer, no window and a 7-row window), in several pieces
 * (timing.pieces) on the first and whole (no pieces) on the second. A
 * non-causal one on the demo layer is chunked too (its keys projected first,
 * every piece attending to all 40): the same answer; one on the rotary Llama
 * layer, or with a window, is computed whole (no pieces), also the same. */
TEST(chunked_oneshot_equals_whole)
{
    attnd_proc ch, wh;
    if (start_chunk_pair(&ch, &wh) != 0) return;
    const char *models[] = {"demo", "llama"};
    for (int m = 0; m < 2; m++)
        for (int window = 0; window <= 7; window += 7) {
            char extra[64];
            snprintf(extra, sizeof extra, window ? "\"is_causal\":true,\"window\":%d," : "\"is_causal\":true,",
                     window);
            json_t *ja = NULL, *jb = NULL;
            CHECK_INT_EQ(oneshot_rows(&ch, models[m], 5, 40, E, extra, &ja), 200);
            CHECK_INT_EQ(oneshot_rows(&wh, models[m], 5, 40, E, extra, &jb), 200);
            double worst = max_diff(json_object_get(ja, "output"), json_object_get(jb, "output"));
            long long pieces = member(ja, "timing", "pieces");
            printf("one-shot %-5s window %d: 40 causal rows in %lld pieces: max diff vs whole %.3g\n", models[m],
                   window, pieces, worst);
            CHECK_MSG(worst <= 1e-6, "%s window %d: chunked one-shot differs by %g", models[m], window, worst);
            CHECK_MSG(pieces > 1, "%s: the 40-row one-shot took %lld pieces", models[m], pieces);
            CHECK(json_object_get(json_object_get(jb, "timing"), "pieces") == NULL);
            json_decref(ja);
            json_decref(jb);
        }
    const struct { const char *model, *extra; int chunked; } full[] = {
        {"demo", "", 1}, {"llama", "", 0}, {"demo", "\"window\":7,", 0}};
    for (int i = 0; i < 3; i++) {
        json_t *ja = NULL, *jb = NULL;
        CHECK_INT_EQ(oneshot_rows(&ch, full[i].model, 6, 40, E, full[i].extra, &ja), 200);
        CHECK_INT_EQ(oneshot_rows(&wh, full[i].model, 6, 40, E, full[i].extra, &jb), 200);
        double worst = max_diff(json_object_get(ja, "output"), json_object_get(jb, "output"));
        long long pieces = member(ja, "timing", "pieces");
        printf("non-causal one-shot %-5s %s: 40 rows in %lld pieces: max diff vs whole %.3g\n", full[i].model,
               full[i].extra, pieces, worst);
        CHECK_MSG(worst <= 1e-6, "non-causal %s %s: differs by %g", full[i].model, full[i].extra, worst);
        if (full[i].chunked)
            CHECK_MSG(pieces > 1, "non-causal %s: the 40-row one-shot took %lld pieces", full[i].model, pieces);
        else
            CHECK(json_object_get(json_object_get(ja, "timing"), "pieces") == NULL);
        json_decref(ja);
        json_decref(jb);
    }
    CHECK_INT_EQ(attnd_proc_stop(&ch), 0);
    CHECK_INT_EQ(attnd_proc_stop(&wh), 0);
}

typedef struct prefill_arg {
    const attnd_proc *p;
    char id[64];
    int rows;
    const char *extra; /* a one-shot's extra fields (NULL: causal) */
    long code;
    long long first, last, iterations;
    volatile int done;
} prefill_arg;

static void *run_prefill(void *v)
{
    prefill_arg *a = v;
    json_t *j = NULL;
    a->code = append_rows(a->p, a->id, 7, 0, a->rows, E, "", &j);
    a->first = member(j, "decode", "first");
    a->last = member(j, "decode", "last");
    a->iterations = member(j, "decode", "iterations");
    json_decref(j);
    a->done = 1;
    return NULL;
}

static void *run_oneshot_prefill(void *v)
{
    prefill_arg *a = v;
    json_t *j = NULL;
    a->code = oneshot_rows(a->p, "demo", 7, a->rows, E, a->extra ? a->extra : "\"is_causal\":true,", &j);
    a->iterations = member(j, "timing", "pieces");
    json_decref(j);
    a->done = 1;
    return NULL;
}

/* A daemon computing prefills one row per iteration (--prefill-chunk-rows 1)
 * with k sessions of one row each in id[0..k). 0, or -1 (checks failed). */
static int start_one_row_pieces(attnd_proc *p, char id[][64], int k)
{
    const char *args[] = {"--prefill-chunk-rows", "1", NULL};
    if (attnd_proc_start(p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return -1;
    }
    for (int i = 0; i < k; i++) {
        json_t *j = NULL;
        int ok = create_session(p, "demo", 0, id[i], 64) == 0 && append_rows(p, id[i], i, 0, 1, E, "", &j) == 200;
        json_decref(j);
        CHECK_MSG(ok, "session %d could not be created and stepped", i);
        if (!ok) return -1;
    }
    return 0;
}

/* What one client's steps saw while a prefill ran: each step's decode.
 * queued_after and decode.first, how many were answered 200, how many ran
 * later than the iteration after those started when they queued (or in more
 * than one), and how many were answered while the prefill had no answer yet. */
typedef struct stepped {
    long long queued[20000], first[20000];
    int n, wrong, during;
} stepped;

/* One client steps sessions id[0..k) round after round, one request at a
 * time, until the prefill in *pa is answered (or 20000 steps). */
static void step_until_answered(const attnd_proc *p, char id[][64], int k, const prefill_arg *pa, stepped *st)
{
    st->n = st->wrong = st->during = 0;
    for (int r = 1; !pa->done && st->n < 20000; r++)
        for (int i = 0; i < k && st->n < 20000; i++) {
            json_t *j = NULL;
            long code = append_rows(p, id[i], i, r, 1, E, "", &j);
            CHECK_INT_EQ(code, 200);
            if (code == 200) {
                st->queued[st->n] = member(j, "decode", "queued_after");
                st->first[st->n] = member(j, "decode", "first");
                st->wrong += st->first[st->n] != st->queued[st->n] + 1 || member(j, "decode", "iterations") != 1;
                st->during += !pa->done;
                st->n++;
            }
            json_decref(j);
        }
}

/* start_one_row_pieces, and *pa set for a prefill of `rows` rows on it. */
static int start_prefill_beside_steps(attnd_proc *p, char id[][64], int k, prefill_arg *pa, int rows)
{
    if (start_one_row_pieces(p, id, k) != 0) return -1;
    memset(pa, 0, sizeof *pa);
    pa->p = p;
    pa->rows = rows;
    return 0;
}

/* A 4000-row prefill computed one row per iteration (a slow prefill: 4000
 * iterations) while one client steps three other sessions: every step runs in
 * the iteration after those started when it queued, so a step that queued
 * while the prefill ran was answered while it still ran (first < the
 * prefill's last iteration): it waited for one piece, never for the prefill. */
TEST(prefill_never_holds_a_step)
{
    enum { ROWS = 4000, K = 3 };
    attnd_proc p;
    char id[K][64];
    static prefill_arg pa;
    if (start_prefill_beside_steps(&p, id, K, &pa, ROWS) != 0) return;
    CHECK_INT_EQ(create_session(&p, "demo", 0, pa.id, sizeof pa.id), 0);
    pthread_t th;
    pthread_create(&th, NULL, run_prefill, &pa);
    static stepped st;
    step_until_answered(&p, id, K, &pa, &st);
    pthread_join(th, NULL);
    CHECK_INT_EQ(pa.code, 200);
    CHECK_INT_EQ(pa.iterations, ROWS);
    int during = 0, held = 0;
    for (int i = 0; i < st.n; i++)
        if (st.queued[i] >= pa.first && st.queued[i] < pa.last) {
            during++;
            held += st.first[i] > pa.last;
        }
    printf("prefill of %d rows: iterations %lld..%lld; %d steps, %d queued while it ran, %d held\n", ROWS,
           pa.first, pa.last, st.n, during, held);
    CHECK_INT_EQ(st.wrong, 0);
    CHECK_INT_EQ(held, 0);
    CHECK_MSG(during > 0, "no step queued while the prefill ran (%d steps)", st.n);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* The same with a one-shot of 4000 rows (no session: its keys and values
 * live with the request between pieces): it runs in the decode loop one piece
 * per iteration, every step of the client's sessions still runs in the
 * iteration after those started when it queued, and steps are answered while
 * the one-shot is still computing. Causal: one row per piece. Non-causal: a
 * few rows of keys and values per piece first, then one query row per piece
 * over all 4000 keys. */
TEST(oneshot_prefill_never_holds_a_step)
{
    enum { ROWS = 4000, K = 3 };
    for (int causal = 1; causal >= 0; causal--) {
        attnd_proc p;
        char id[K][64];
        static prefill_arg pa;
        if (start_prefill_beside_steps(&p, id, K, &pa, ROWS) != 0) return;
        pa.extra = causal ? NULL : "";
        pthread_t th;
        pthread_create(&th, NULL, run_oneshot_prefill, &pa);
        static stepped st;
        step_until_answered(&p, id, K, &pa, &st);
        pthread_join(th, NULL);
        printf("%s one-shot of %d rows in %lld pieces; %d steps, %d answered while it computed, %d waited "
               "beyond one iteration\n", causal ? "causal" : "non-causal", ROWS, pa.iterations, st.n,
               st.during, st.wrong);
        CHECK_INT_EQ(pa.code, 200);
        if (causal)
            CHECK_INT_EQ(pa.iterations, ROWS);
        else /* its key pieces, then a piece per row */
            CHECK_MSG(pa.iterations > ROWS && pa.iterations < 2 * ROWS, "%lld pieces", pa.iterations);
        CHECK_INT_EQ(st.wrong, 0);
        CHECK_MSG(st.during > 0, "no step was answered while the one-shot computed (%d steps)", st.n);
        CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    }
}

typedef struct big_arg {
    const attnd_proc *p;
    const char *body;
    long code;
    int64_t start_ns;
    volatile int64_t end_ns; /* 0 until it is answered */
    long compute_us; /* the server's timing of it */
} big_arg;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *run_big(void *v)
{
    big_arg *a = v;
    json_t *j = NULL;
    a->code = post(a->p, "/v1/models/demo/attention", a->body, &j);
    a->end_ns = now_ns();
    a->compute_us = (long)member(j, "timing", "compute_us");
    json_decref(j);
    return NULL;
}

/* The status of an answer and, for a 200, its timing.queue_us (else -1). */
static long queued_us(json_t *j)
{
    json_t *t = json_object_get(j, "timing");
    return t ? (long)json_integer_value(json_object_get(t, "queue_us")) : -1;
}

/* One worker busy with a long batch (8 causal sequences of 4096 rows): a step
 * with timeout_ms 100 and a request with timeout_ms 150 sent while it computes
 * are answered 504 at their deadlines, not when the batch ends. Steps probe
 * the worker every 20 ms from the moment the batch is sent: each answered 200
 * shows the batch was not yet computing when that step was sent, so the
 * batch's compute ends no sooner than the last such send time plus its own
 * compute_us (the batch's send time if none was). The step's 504 must come
 * before that, at least 100 ms after it was sent and well before 300 (the
 * answer may wait for a busy HTTP thread on a loaded machine; ~100 ms on a
 * quiet one). The request: a 504 likewise, or a 200 that started before its
 * deadline. */
TEST(deadlines_while_queued)
{
    attnd_proc p;
    const char *args[] = {"--workers", "1", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char id[64];
    json_t *j = NULL;
    CHECK_INT_EQ(create_session(&p, "demo", 0, id, sizeof id), 0);
    CHECK_INT_EQ(append_rows(&p, id, 1, 0, 4, E, "", &j), 200);
    json_decref(j);
    sbuf b = {0};
    sb_printf(&b, "{\"is_causal\":true,\"query\":[");
    for (int s = 0; s < 8; s++) {
        sb_printf(&b, "%s[", s ? "," : "");
        for (int i = 0; i < 4096; i++) {
            sb_printf(&b, "%s[", i ? "," : "");
            for (int k = 0; k < E; k++) sb_printf(&b, "%s%.3g", k ? "," : "", val(s, i, k));
            sb_printf(&b, "]");
        }
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]}");
    static big_arg big;
    big = (big_arg){.p = &p, .body = b.p, .start_ns = now_ns()};
    pthread_t th;
    pthread_create(&th, NULL, run_big, &big);
    /* Until its body is read and decoded a step is computed at once (200):
     * the test steps again 20 ms later, remembering when the last such step
     * was sent (the batch had not started computing then). */
    struct timespec again = {0, 20000000};
    int64_t t0 = 0, t1 = 0, free_at;
    long step = 0, step_q = -1;
    free_at = big.start_ns;
    for (int k = 0; k < 200 && !big.end_ns; k++) {
        t0 = now_ns();
        step = append_rows(&p, id, 1, 4 + k, 1, E, "\"timeout_ms\":100,", &j);
        t1 = now_ns();
        step_q = queued_us(j);
        json_decref(j);
        if (step != 200) break;
        free_at = t0;
        nanosleep(&again, NULL);
    }
    long one = post(&p, "/v1/models/demo/attention", "{\"timeout_ms\":150,\"query\":[[1,2,3,4,5,6,7,8,"
                    "1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,"
                    "1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]]}", &j);
    int64_t t2 = now_ns();
    long one_q = queued_us(j);
    json_decref(j);
    pthread_join(th, NULL);
    double step_ms = (double)(t1 - t0) / 1e6, one_ms = (double)(t2 - t1) / 1e6;
    printf("behind a long batch: step (timeout 100 ms) answered %ld in %.1f ms, request (150 ms) %ld in "
           "%.1f ms\n", step, step_ms, one, one_ms);
    double before_end = (double)big.compute_us / 1e3 - (double)(t1 - free_at) / 1e6;
    printf("  the step's 504 came %.0f ms after the batch was sent, %.0f ms after the last step that found "
           "the worker free was sent: %.0f ms before the batch's compute (%.0f ms) could have ended\n",
           (double)(t1 - big.start_ns) / 1e6, (double)(t1 - free_at) / 1e6, before_end,
           big.compute_us / 1e3);
    CHECK_INT_EQ(big.code, 200);
    CHECK_INT_EQ(step, 504);
    CHECK_MSG(step_ms >= 99 && step_ms < 300, "the step's 504 came after %.1f ms", step_ms);
    CHECK_MSG(before_end > 0, "the step's 504 came when the batch may have ended (%.0f ms)", before_end);
    if (step == 200) CHECK_MSG(step_q < 100000, "the step started after its deadline (%ld us)", step_q);
    CHECK_MSG(one == 504 || one == 200, "the request answered %ld", one);
    if (one == 504) CHECK_MSG(one_ms >= 149 && one_ms < 350, "the request's 504 came after %.1f ms", one_ms);
    if (one == 200) CHECK_MSG(one_q < 150000, "the request started after its deadline (%ld us)", one_q);
    free(b.p);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* --prefill-chunk-rows 16: 64 rows onto an empty session take at least 64/16
 * pieces; the same 64 rows after 1000 cached rows take more, each a piece of
 * fewer rows (every piece costing about what 16 rows at the start cost); the
 * decode loop's counters in /metrics say so; and a model of its own
 * prefill_chunk_rows=4 takes at least 64/4 pieces. */
TEST(pieces_shrink_deep_in_a_prefill)
{
    attnd_proc p;
    const char *args[] = {"--prefill-chunk-rows", "16", "--model", "demo=config/demo.safetensors", "--model",
                          "fine=config/demo.safetensors,prefill_chunk_rows=4", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char fresh[64], deep[64];
    json_t *j = NULL;
    CHECK_INT_EQ(create_session(&p, "demo", 0, fresh, sizeof fresh), 0);
    CHECK_INT_EQ(create_session(&p, "demo", 0, deep, sizeof deep), 0);
    CHECK_INT_EQ(append_rows(&p, fresh, 1, 0, 64, E, "", &j), 200);
    long long shallow = member(j, "decode", "iterations");
    json_decref(j);
    CHECK_INT_EQ(append_rows(&p, deep, 2, 0, 1000, E, "", &j), 200);
    json_decref(j);
    CHECK_INT_EQ(append_rows(&p, deep, 3, 1000, 64, E, "", &j), 200);
    long long deeper = member(j, "decode", "iterations");
    json_decref(j);
    printf("64 rows at --prefill-chunk-rows 16: %lld pieces onto an empty session, %lld after 1000 rows\n",
           shallow, deeper);
    CHECK(shallow >= 4);
    CHECK_MSG(deeper > shallow, "after 1000 rows: %lld pieces, onto an empty session %lld", deeper, shallow);
    /* The decode loop's counters: the pieces and their rows (64 + 1000 + 64 rows appended in pieces; the
     * one-row first steps of nothing: every append here was chunked), and an iteration for each piece. */
    CHECK_INT_EQ(attnd_proc_metric(&p, "attnd_prefill_piece_rows_total{model=\"demo\"} "), 64 + 1000 + 64);
    const double pieces = attnd_proc_metric(&p, "attnd_prefill_pieces_total{model=\"demo\"} ");
    CHECK_MSG(pieces >= shallow + deeper + 1000 / 16, "attnd_prefill_pieces_total %g", pieces);
    CHECK_INT_EQ(attnd_proc_metric(&p, "attnd_decode_iterations_total{model=\"demo\"} "), pieces);
    CHECK_INT_EQ(attnd_proc_metric(&p, "attnd_decode_steps_total{model=\"demo\"} "), 0);
    CHECK(attnd_proc_metric(&p, "attnd_decode_busy_seconds_total{model=\"demo\"} ") > 0);
    /* A model's own prefill_chunk_rows: 4 there, so the same 64 rows take at least 16 pieces, and
     * GET /v1/models/fine says so. */
    char fine[64];
    CHECK_INT_EQ(create_session(&p, "fine", 0, fine, sizeof fine), 0);
    CHECK_INT_EQ(append_rows(&p, fine, 1, 0, 64, E, "", &j), 200);
    const long long finer = member(j, "decode", "iterations");
    json_decref(j);
    printf("the same 64 rows on a model of prefill_chunk_rows=4: %lld pieces\n", finer);
    CHECK(finer >= 16);
    http_result r;
    char url[160];
    snprintf(url, sizeof url, "%s/v1/models/fine", p.base_url);
    CHECK_INT_EQ(http_do("GET", url, NULL, 0, NULL, &r), 0);
    json_t *info = json_loads(r.body ? r.body : "", 0, NULL);
    CHECK_INT_EQ(member(info, "scheduler", "prefill_chunk_rows"), 4);
    json_decref(info);
    http_result_free(&r);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* A model's own prefill_chunk_rows out of the global option's range stops
 * start-up with a message naming the model, the key and the range. */
TEST(bad_piece_rows_refused)
{
    static const char *const bad[] = {"-1", "1048577", "many"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char spec[128];
        snprintf(spec, sizeof spec, "x=config/demo.safetensors,prefill_chunk_rows=%s", bad[i]);
        const char *args[] = {"--listen", "127.0.0.1:0", "--model", spec, NULL};
        char *out = NULL;
        CHECK_INT_EQ(attnd_run(args, 20, &out), 2);
        CHECK_MSG(out && strstr(out, "model 'x': prefill_chunk_rows must be an integer in 0..1048576"), "%s: %s",
                  bad[i], out ? out : "");
        free(out);
    }
}

int main(void)
{
    RUN(interleaved_client_never_waits);
    RUN(prefill_never_holds_a_step);
    RUN(chunked_prefill_equals_whole);
    RUN(chunked_oneshot_equals_whole);
    RUN(oneshot_prefill_never_holds_a_step);
    RUN(pieces_shrink_deep_in_a_prefill);
    RUN(bad_piece_rows_refused);
    RUN(deadlines_while_queued);
    RUN(decode_steps_batch_together);
    RUN(kv_bytes_bound_a_batch);
    return check_summary();
}
