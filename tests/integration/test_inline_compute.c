/* test_inline_compute.c — small stateless requests computed on the HTTP
 * thread that read them (--inline-max-macs), through the real daemon:
 *  - the same requests (self-attention, causal, ragged with padding, with
 *    attention weights, cross-attention) answer to the bit
 *    what a daemon that hands every request to a worker (--inline-max-macs 0)
 *    answers, and /metrics counts them inline there and not here;
 *  - the bound is the request's multiply-adds: at exactly the bound inline,
 *    one row more to a worker; session appends never inline;
 *  - many clients at once: every answer right, inline and worker-computed
 *    requests together as many as were sent.
 * (The v2 binary path goes through the same submit_decoded: test_examples
 * runs every v2 example with the default, so inline.)
 */
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#define E 64 /* the demo model: E 64, 8 heads of 8 */
#define INLINE_METRIC "attnd_inline_requests_total{model=\"demo\"} "
#define BATCHES_METRIC "attnd_batch_size_count{model=\"demo\"} "

/* t rows of E numbers of stream `seed` as a JSON array. */
static void put_rows(sbuf *b, int seed, int t)
{
    sb_rows(b, seed, 0, t, E);
}

/* {"query": t rows} (a single sequence), with extra members before it. */
static char *one_seq(const char *extra, int seed, int t)
{
    sbuf b = {0};
    sb_printf(&b, "{%s\"query\":", extra);
    put_rows(&b, seed, t);
    sb_printf(&b, "}");
    return b.p;
}

/* The requests both daemons answer: every small kind the scheduler batches. */
enum { N_KINDS = 5 };
static char *kind_body(int k)
{
    sbuf b = {0};
    switch (k) {
    case 0: return one_seq("", 1, 32);
    case 1: return one_seq("\"is_causal\":true,", 2, 24);
    case 2: return one_seq("\"need_weights\":true,\"average_attn_weights\":false,", 3, 12);
    case 3: /* ragged: two sequences, the second's last keys padded */
        sb_printf(&b, "{\"query\":[");
        put_rows(&b, 4, 10);
        sb_printf(&b, ",");
        put_rows(&b, 5, 6);
        sb_printf(&b, "],\"key_padding_mask\":[[false,false,false,false,false,false,false,false,false,false],"
                      "[false,false,false,false,true,true]]}");
        return b.p;
    default: /* cross-attention: 8 query rows against 20 keys and values */
        sb_printf(&b, "{\"query\":");
        put_rows(&b, 6, 8);
        sb_printf(&b, ",\"key\":");
        put_rows(&b, 7, 20);
        sb_printf(&b, ",\"value\":");
        put_rows(&b, 8, 20);
        sb_printf(&b, "}");
        return b.p;
    }
}

/* POST body to p's demo attention route: the status, and the answer in *out. */
static long attend(const attnd_proc *p, const char *body, json_t **out)
{
    char url[256];
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", p->base_url);
    long status = -1;
    *out = attnd_http_json("POST", url, body, &status);
    return status;
}

/* The same small requests to a daemon that computes them inline (the
 * default) and to one that hands each to a worker: equal answers, to the
 * bit; counted inline only on the first. */
TEST(inline_answers_equal_workers)
{
    attnd_proc in, wk;
    const char *no_inline[] = {"--inline-max-macs", "0", NULL};
    if (attnd_proc_start(&in, NULL) != 0 || attnd_proc_start(&wk, no_inline) != 0) {
        CHECK_MSG(0, "daemons did not start");
        return;
    }
    for (int k = 0; k < N_KINDS; k++) {
        char *body = kind_body(k);
        json_t *a = NULL, *b = NULL;
        long sa = attend(&in, body, &a), sb = attend(&wk, body, &b);
        CHECK_MSG(sa == 200 && sb == 200, "kind %d: %ld inline, %ld worker", k, sa, sb);
        CHECK_MSG(a && b && json_equal(json_object_get(a, "output"), json_object_get(b, "output")),
                  "kind %d: outputs differ", k);
        json_t *wa = json_object_get(a, "weights"), *wb = json_object_get(b, "weights");
        CHECK_MSG(k == 2 ? wa && wb && json_equal(wa, wb) : !wa && !wb, "kind %d: weights differ", k);
        json_decref(a);
        json_decref(b);
        free(body);
    }
    printf("inline: %.0f of %.0f batches; worker daemon: %.0f of %.0f\n", attnd_proc_metric(&in, INLINE_METRIC),
           attnd_proc_metric(&in, BATCHES_METRIC), attnd_proc_metric(&wk, INLINE_METRIC),
           attnd_proc_metric(&wk, BATCHES_METRIC));
    CHECK(attnd_proc_metric(&in, INLINE_METRIC) == N_KINDS);
    CHECK(attnd_proc_metric(&in, BATCHES_METRIC) == N_KINDS); /* each a batch of one */
    CHECK(attnd_proc_metric(&wk, INLINE_METRIC) == 0);
    CHECK(attnd_proc_metric(&wk, BATCHES_METRIC) >= 1);
    CHECK_INT_EQ(attnd_proc_stop(&in), 0);
    CHECK_INT_EQ(attnd_proc_stop(&wk), 0);
}

/* The demo model's t-row self-attention costs t * 16384 (Q, K, V and W_O
 * projections, 4 * 64 * 64 a row) + t * t * 128 (8 heads of Q·K and P·V of 8)
 * multiply-adds: 32 rows 655360, 33 rows 680064. At a bound of 655360, 32 rows
 * are computed inline and 33 go to a worker; a one-row session append (a
 * stream step, the decode loop's) never is. */
TEST(bound_is_the_requests_multiply_adds)
{
    attnd_proc p;
    const char *args[] = {"--inline-max-macs", "655360", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char *at = one_seq("", 9, 32), *over = one_seq("", 9, 33);
    json_t *j = NULL;
    CHECK_INT_EQ(attend(&p, at, &j), 200);
    json_decref(j);
    CHECK(attnd_proc_metric(&p, INLINE_METRIC) == 1);
    CHECK_INT_EQ(attend(&p, over, &j), 200);
    json_decref(j);
    CHECK(attnd_proc_metric(&p, INLINE_METRIC) == 1);
    char url[256], id[64] = "";
    snprintf(url, sizeof url, "%s/v1/models/demo/sessions", p.base_url);
    long st = 0;
    j = attnd_http_json("POST", url, "{}", &st);
    CHECK_INT_EQ(st, 201);
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    char *row = one_seq("", 10, 1);
    snprintf(url, sizeof url, "%s/v1/sessions/%s/append", p.base_url, id);
    j = attnd_http_json("POST", url, row, &st);
    CHECK_INT_EQ(st, 200);
    json_decref(j);
    CHECK(attnd_proc_metric(&p, INLINE_METRIC) == 1);
    CHECK(attnd_proc_metric(&p, "attnd_decode_steps_total{model=\"demo\"} ") == 1);
    free(at);
    free(over);
    free(row);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

enum { CLIENTS = 8, PER_CLIENT = 40 };

typedef struct client {
    const attnd_proc *p;
    const json_t *want[N_KINDS]; /* each kind's answer, computed alone */
    char *bodies[N_KINDS];
    int ok, wrong;
    double worst; /* the largest |difference| from the answer alone */
} client;

/* The largest |a - b| over two equally shaped nested arrays of numbers, or
 * INFINITY when their shapes differ. */
static double max_diff(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return fabs(json_number_value(a) - json_number_value(b));
    if (!json_is_array(a) || !json_is_array(b) || json_array_size(a) != json_array_size(b))
        return INFINITY;
    double worst = 0;
    for (size_t i = 0; i < json_array_size(a); i++)
        worst = fmax(worst, max_diff(json_array_get(a, i), json_array_get(b, i)));
    return worst;
}

static void *run_client(void *v)
{
    client *c = v;
    for (int i = 0; i < PER_CLIENT; i++) {
        const int k = i % N_KINDS;
        json_t *a = NULL;
        long st = attend(c->p, c->bodies[k], &a);
        double d = st == 200 ? max_diff(json_object_get(a, "output"), json_object_get(c->want[k], "output")) : INFINITY;
        if (d <= 1e-6) c->ok++;
        else c->wrong++;
        if (d > c->worst) c->worst = d;
        json_decref(a);
    }
    return NULL;
}

/* Many clients at once (a request is computed inline only while the model
 * is idle; the rest queue for the workers and batch): every answer the one computed alone (within
 * 1e-6: a worker's packed batch of several requests may round a last bit
 * differently), and inline + worker-run requests = requests sent. */
TEST(concurrent_clients_inline_and_batched)
{
    attnd_proc p;
    if (attnd_proc_start(&p, NULL) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    client cs[CLIENTS];
    json_t *want[N_KINDS];
    char *bodies[N_KINDS];
    for (int k = 0; k < N_KINDS; k++) {
        bodies[k] = kind_body(k);
        CHECK_INT_EQ(attend(&p, bodies[k], &want[k]), 200);
    }
    const double before = attnd_proc_metric(&p, INLINE_METRIC);
    const double requests_before = attnd_proc_metric(&p, "attnd_batch_size_sum{model=\"demo\"} ");
    pthread_t th[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        cs[i] = (client){.p = &p};
        for (int k = 0; k < N_KINDS; k++) {
            cs[i].want[k] = want[k];
            cs[i].bodies[k] = bodies[k];
        }
        pthread_create(&th[i], NULL, run_client, &cs[i]);
    }
    int ok = 0, wrong = 0;
    double worst = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(th[i], NULL);
        ok += cs[i].ok;
        wrong += cs[i].wrong;
        worst = fmax(worst, cs[i].worst);
    }
    const double inl = attnd_proc_metric(&p, INLINE_METRIC) - before;
    const double requests = attnd_proc_metric(&p, "attnd_batch_size_sum{model=\"demo\"} ") - requests_before;
    printf("%d answers right, %d wrong (largest difference from the answer alone %.3g: a batch of\n"
           "several may round differently); %.0f of %.0f requests computed inline\n", ok, wrong, worst, inl, requests);
    CHECK_INT_EQ(ok, CLIENTS * PER_CLIENT);
    CHECK_INT_EQ(wrong, 0);
    CHECK(requests == CLIENTS * PER_CLIENT); /* each counted once, inline or in a worker's batch */
    CHECK(inl >= 1 && inl <= CLIENTS * PER_CLIENT);
    for (int k = 0; k < N_KINDS; k++) {
        json_decref(want[k]);
        free(bodies[k]);
    }
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    RUN(inline_answers_equal_workers);
    RUN(bound_is_the_requests_multiply_adds);
    RUN(concurrent_clients_inline_and_batched);
    curl_global_cleanup();
    return check_summary();
}
