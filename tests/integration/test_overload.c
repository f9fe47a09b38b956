/* test_overload.c — far more clients than the queue holds: 200 concurrent
 * clients against --max-queue 16 and one worker. Every request gets 200, 503
 * (queue_full, Retry-After) or 504 (its timeout_ms passed while queued), none
 * hangs, every 200 equals the library's answer for that client's input,
 * /healthz stays fast throughout, and the daemon survives. Then the memory
 * budget: a body over --max-inflight-bytes gets 503 overloaded at once.
 */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attn.h"
#include "check.h"
#include "daemon.h"

enum { CLIENTS = 200, T = 32, E = 64 };

typedef struct client {
    int id;
    float query[T * E];
    char *body;
    long status;       /* -1: transport error (a hang ends as a curl timeout) */
    double max_diff;   /* against the library, for 200s                       */
    char code[40], retry_after[32];
} client;

static attnd_proc proc;
static attn_layer *layer;
static client clients[CLIENTS];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void make_body(client *c)
{
    size_t cap = (size_t)T * E * 16 + 64, n;
    c->body = malloc(cap);
    /* Every tenth client will not wait more than 50 ms (504 if queued longer). */
    n = (size_t)snprintf(c->body, cap, "{\"timeout_ms\": %d, \"query\": [",
                         c->id % 10 ? 5000 : 50);
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) {
            float v = (float)((c->id * 7 + t * 13 + e) % 17 - 8) / 8.0f;
            c->query[t * E + e] = v;
            n += (size_t)snprintf(c->body + n, cap - n, "%s%g", e ? "," : t ? "],[" : "[",
                                  (double)v);
        }
    snprintf(c->body + n, cap - n, "]]}");
}

static void *run_client(void *arg)
{
    client *c = arg;
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", proc.base_url);
    http_result r;
    c->status = -1;
    if (http_do("POST", url, c->body, strlen(c->body), NULL, &r) != 0)
        return NULL;
    c->status = r.status;
    snprintf(c->retry_after, sizeof c->retry_after, "%s", r.retry_after);
    json_t *j = json_loads(r.body, 0, NULL);
    const char *code = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
    snprintf(c->code, sizeof c->code, "%s", code ? code : "");
    if (r.status == 200) {
        float want[T * E];
        attn_seq s = {.t = T, .s = T, .query = c->query, .output = want};
        attn_error err;
        c->max_diff = attn_forward(layer, &s, 1, NULL, NULL, &err) == ATTN_OK ? 0 : INFINITY;
        json_t *o = json_object_get(j, "output");
        for (int t = 0; t < T; t++)
            for (int e = 0; e < E; e++) {
                json_t *x = json_array_get(json_array_get(o, t), e);
                double d = json_is_number(x)
                               ? fabs(json_number_value(x) - (double)want[t * E + e])
                               : INFINITY;
                c->max_diff = fmax(c->max_diff, d);
            }
    }
    json_decref(j);
    http_result_free(&r);
    return NULL;
}

TEST(storm)
{
    /* A batch is cut after 1 s (or at 64 requests): the 16-slot queue fills and
     * stays full for a second (less the 50 ms clients in it, answered 504 at their
     * deadline), while /healthz and /metrics are probed. */
    const char *args[] = {"--max-queue", "16", "--workers", "1", "--max-batch-requests", "64",
                          "--max-queue-delay-us", "1000000", "--max-connections", "1024", NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return;
    }
    pthread_t th[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        clients[i].id = i;
        make_body(&clients[i]);
    }
    double t0 = now_s();
    for (int i = 0; i < CLIENTS; i++)
        pthread_create(&th[i], NULL, run_client, &clients[i]);
    /* Health while the storm runs: never behind the queue. */
    char hurl[128];
    snprintf(hurl, sizeof hurl, "%s/healthz", proc.base_url);
    char murl[128];
    snprintf(murl, sizeof murl, "%s/metrics", proc.base_url);
    double worst = 0;
    int probes = 0, healthy = 0, deepest = -1;
    for (; probes < 20; probes++) {
        http_result r;
        double s = now_s();
        healthy += http_do("GET", hurl, NULL, 0, NULL, &r) == 0 && r.status == 200;
        worst = fmax(worst, now_s() - s);
        http_result_free(&r);
        const char *depth = http_do("GET", murl, NULL, 0, NULL, &r) == 0 && r.body
                                ? strstr(r.body, "attnd_queue_depth{model=\"demo\"} ") : NULL;
        if (depth && atoi(depth + strlen("attnd_queue_depth{model=\"demo\"} ")) > deepest)
            deepest = atoi(depth + strlen("attnd_queue_depth{model=\"demo\"} "));
        http_result_free(&r);
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(th[i], NULL);
    double secs = now_s() - t0;

    int ok = 0, full = 0, timeout = 0, other = 0, lost = 0, wrong = 0, no_retry = 0;
    double worst_diff = 0;
    for (int i = 0; i < CLIENTS; i++) {
        client *c = &clients[i];
        if (c->status == 200) {
            ok++;
            worst_diff = fmax(worst_diff, c->max_diff);
            wrong += !(c->max_diff < 1e-4);
        } else if (c->status == 503) {
            full++;
            no_retry += strcmp(c->retry_after, "1") != 0 || strcmp(c->code, "queue_full") != 0;
        } else if (c->status == 504) {
            timeout++;
        } else if (c->status == -1) {
            lost++;
        } else {
            other++;
        }
        free(c->body);
    }
    printf("%d clients in %.2f s: %d x 200, %d x 503, %d x 504, %d other, %d transport "
           "errors; worst |diff| %.2g; /healthz %d/%d ok, slowest %.1f ms (deepest queue seen "
           "%d)\n",
           CLIENTS, secs, ok, full, timeout, other, lost, worst_diff, healthy, probes,
           worst * 1e3, deepest);
    CHECK_INT_EQ(ok + full + timeout, CLIENTS);
    CHECK_INT_EQ(lost, 0);
    CHECK_INT_EQ(other, 0);
    CHECK_INT_EQ(wrong, 0);
    CHECK_INT_EQ(no_retry, 0);
    CHECK(ok + timeout >= 16); /* at least a queue's worth was taken */
    /* Every 503 came at arrival and every 504 left the full queue at its deadline (50 ms), so
     * until the batch is cut (1 s) /metrics reports 16 less the 504s so far: the probes must
     * see at least 16 - (all the 504s), never more than 16. */
    CHECK_MSG(deepest >= 16 - timeout && deepest <= 16, "deepest queue seen while probing: %d (16 slots, %d x 504)",
              deepest, timeout);
    CHECK(full > 0);      /* 200 > 16: some were refused         */
    CHECK(secs < 20);
    CHECK_INT_EQ(healthy, probes);
    CHECK_MSG(worst < 0.5, "/healthz took %.1f ms under load", worst * 1e3);

    client after = {.id = 999};
    make_body(&after);
    run_client(&after);
    CHECK_INT_EQ(after.status, 200);
    CHECK(after.max_diff < 1e-4);
    free(after.body);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    unlink(proc.log_path);
}

/* --max-inflight-bytes 1M: a 1.5 MB body (JSON with leading blanks) is refused
 * with 503 overloaded + Retry-After before it is read; a small one passes. */
TEST(budget)
{
    const char *args[] = {"--max-inflight-bytes", "1M", NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "attnd with a 1 MiB budget did not start");
        return;
    }
    client c = {.id = 1};
    make_body(&c);
    size_t pad = 1536 * 1024, blen = strlen(c.body);
    char *big = malloc(pad + blen + 1);
    memset(big, ' ', pad);
    memcpy(big + pad, c.body, blen + 1);
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", proc.base_url);
    http_result r;
    CHECK(http_do("POST", url, big, pad + blen, NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 503);
    CHECK(strstr(r.body, "\"overloaded\"") && strstr(r.body, "max_inflight_bytes"));
    CHECK_STR_EQ(r.retry_after, "1");
    printf("1.5 MB body, 1 MiB budget -> %ld %.150s\n", r.status, r.body);
    http_result_free(&r);
    run_client(&c);
    CHECK_INT_EQ(c.status, 200);
    free(big);
    free(c.body);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    unlink(proc.log_path);
}

int main(void)
{
    attn_error err;
    if (attn_layer_load_safetensors("config/demo.safetensors", 0, &layer, &err) != ATTN_OK) {
        CHECK_MSG(0, "cannot load the demo layer: %s", err.message);
        return check_summary();
    }
    RUN(storm);
    RUN(budget);
    attn_layer_free(layer);
    return check_summary();
}
