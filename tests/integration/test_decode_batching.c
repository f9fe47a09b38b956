/* test_decode_batching.c — decode steps batch across sessions. 24 streams each
 * hold 1000 cached positions and append one position at a time from their own
 * threads; the batch budget counts a step's one projected row apart from the
 * cache it reads, so the steps of many streams run together (batch_size from
 * the responses > 16; when a step counted its cached positions as "tokens",
 * --max-batch-tokens 8192 capped a batch at 8). --max-batch-kv-bytes bounds
 * the bytes a batch reads: 4 streams' worth gives batches of at most 4, and
 * every answer is still right (each step equals the same step computed alone).
 * Stream-aware batching, with the default two workers and no queue delay: once
 * 8 streams have stepped, every later step runs in one batch of all 8 (a batch
 * of some waits for the rest, --max-stream-wait-us); a lone stream's steps
 * never wait.
 */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    const char *args[] = {"--workers", "1", "--max-batch-requests", "64",
                          "--max-queue-delay-us", "5000", NULL};
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
                          "--max-queue-delay-us", "5000", "--max-batch-kv-bytes", budget, NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    int largest = largest_batch(&p);
    printf("--max-batch-kv-bytes %s (4 streams): largest batch %d\n", budget, largest);
    CHECK_MSG(largest >= 2 && largest <= 4, "largest batch %d under a 4-stream budget", largest);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

TEST(streams_step_as_one_batch)
{
    /* Steps [SETTLED, STEPS_HERE - TAIL): the first batches form as the streams
     * start (some a step ahead of others), and at the end the streams ahead
     * finish first, so the last ones wait out the stream wait alone. */
    enum { N = 8, STEPS_HERE = 12, SETTLED = 4, TAIL = 3 };
    attnd_proc p;
    /* Two workers, no queue delay (the defaults); a long stream wait, so the
     * test does not depend on how fast a loaded machine answers. */
    const char *args[] = {"--max-stream-wait-us", "500000", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    static stream st[N];
    step_streams(&p, st, N, STEPS_HERE);
    int smallest = N;
    for (int s = 0; s < N; s++)
        for (int k = SETTLED; k < STEPS_HERE - TAIL; k++)
            if (st[s].batch[k] < smallest) smallest = st[s].batch[k];
    printf("%d streams, %d steps each: smallest batch of steps %d..%d: %d\n", N, STEPS_HERE, SETTLED,
           STEPS_HERE - TAIL - 1, smallest);
    for (int s = 0; s < N && smallest < N; s++) {
        printf("  stream %d batches:", s);
        for (int k = 0; k < STEPS_HERE; k++) printf(" %d (%ld us)", st[s].batch[k], st[s].queue_us[k]);
        printf("\n");
    }
    CHECK_MSG(smallest == N, "a settled step ran in a batch of %d, not all %d streams", smallest, N);

    stream *lone = &st[0]; /* one stream alone: its steps never wait for others */
    step_streams(&p, lone, 1, 6);
    long worst = 0;
    for (int k = 1; k < 6; k++) /* step 0 may still see the 8 streams as active */
        if (lone->queue_us[k] > worst) worst = lone->queue_us[k];
    printf("lone stream: largest queue_us %ld (the stream wait is 500000)\n", worst);
    CHECK_MSG(worst < 250000, "a lone stream's step waited %ld us", worst);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

int main(void)
{
    RUN(streams_step_as_one_batch);
    RUN(decode_steps_batch_together);
    RUN(kv_bytes_bound_a_batch);
    return check_summary();
}
