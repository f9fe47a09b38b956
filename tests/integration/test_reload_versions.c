/* test_reload_versions.c — model versions across SIGHUP: one scheduler serves
 * every version of a model, so reloads while a session pins an old version add
 * no threads (50 reloads used to add two workers each), the pinned session
 * keeps answering on its own layer, and a request still queued on a replaced
 * version at SIGTERM is answered 200 before attnd exits 0 (drain used to cover
 * only the current versions, and libmicrohttpd then aborted). What retired
 * versions pin is counted (attnd_retired_model_*) and bounded by
 * --max-retired-bytes: the sessions on the oldest go (410) when it is passed.
 */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#define E 64

/* attnd_reloads_total{result="ok"} now, or -1. */
static long reloads_ok(const attnd_proc *p)
{
    char url[128];
    snprintf(url, sizeof url, "%s/metrics", p->base_url);
    http_result r;
    long n = -1;
    if (http_do("GET", url, NULL, 0, NULL, &r) == 0 && r.body) {
        const char *at = strstr(r.body, "attnd_reloads_total{result=\"ok\"} ");
        if (at)
            n = strtol(at + strlen("attnd_reloads_total{result=\"ok\"} "), NULL, 10);
        else
            n = 0;
    }
    http_result_free(&r);
    return n;
}

static int reload_and_wait(const attnd_proc *p, long want)
{
    kill(p->pid, SIGHUP);
    for (int i = 0; i < 100; i++) {
        if (reloads_ok(p) >= want)
            return 0;
        attnd_sleep_ms(50);
    }
    return -1;
}

static char *query_body(int t)
{
    sbuf b = {0};
    sb_printf(&b, "{\"query\":[");
    for (int i = 0; i < t; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < E; j++)
            sb_printf(&b, "%s%.5f", j ? "," : "", 0.01 * ((i * 7 + j * 3) % 17));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]}");
    return b.p;
}

static long post(const attnd_proc *p, const char *path, const char *body)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", p->base_url, path);
    http_result r;
    long st = http_do("POST", url, body, strlen(body), NULL, &r) == 0 ? r.status : -1;
    http_result_free(&r);
    return st;
}

TEST(reloads_add_no_threads)
{
    attnd_proc p;
    if (attnd_proc_start(&p, NULL) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models/demo/sessions", p.base_url);
    http_result r;
    CHECK(http_do("POST", url, "{}", 2, NULL, &r) == 0 && r.status == 201);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    char append[128];
    snprintf(append, sizeof append, "/v1/sessions/%s/append",
             json_string_value(json_object_get(j, "id")));
    json_decref(j);
    http_result_free(&r);
    char *body = query_body(2);
    CHECK_INT_EQ(post(&p, append, body), 200);
    int before = (int)attnd_proc_status(p.pid, "Threads");
    int failed = 0;
    for (int k = 1; k <= 50 && !failed; k++)
        failed = reload_and_wait(&p, k) != 0;
    CHECK_MSG(!failed, "a reload was not counted");
    int after = (int)attnd_proc_status(p.pid, "Threads");
    printf("threads: %d before, %d after 50 reloads with a session pinning a version\n", before,
           after);
    CHECK_MSG(after <= before + 1, "threads %d -> %d", before, after);
    CHECK_INT_EQ(post(&p, append, body), 200); /* the pinned session still answers */
    CHECK_INT_EQ(post(&p, "/v1/models/demo/attention", body), 200);
    free(body);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* A /metrics series' value ("name " or "name{...} " as it appears), or -1. */
static long long metric(const attnd_proc *p, const char *series)
{
    char url[128];
    snprintf(url, sizeof url, "%s/metrics", p->base_url);
    http_result r;
    long long v = -1;
    if (http_do("GET", url, NULL, 0, NULL, &r) == 0 && r.body) {
        for (const char *at = r.body; (at = strstr(at, series)); at++)
            if (at == r.body || at[-1] == '\n') {
                v = strtoll(at + strlen(series), NULL, 10);
                break;
            }
    }
    http_result_free(&r);
    return v;
}

/* A new session's append path (/v1/sessions/ID/append) into path, after one append. */
static void open_session(const attnd_proc *p, const char *body, char path[128])
{
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models/demo/sessions", p->base_url);
    http_result r;
    CHECK(http_do("POST", url, "{}", 2, NULL, &r) == 0 && r.status == 201);
    json_error_t je;
    json_t *j = r.body ? json_loads(r.body, 0, &je) : NULL;
    snprintf(path, 128, "/v1/sessions/%s/append", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    http_result_free(&r);
    CHECK_INT_EQ(post(p, path, body), 200);
}

/* The demo layer's weights are 16640 floats = 66560 bytes: a bound of 100K
 * lets one retired version live, not two. */
TEST(retired_versions_bounded)
{
    const char *args[] = {"--max-retired-bytes", "100K", NULL};
    attnd_proc p;
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char *body = query_body(2);
    char a[128], b[128];
    open_session(&p, body, a);                        /* a: version 1 */
    CHECK_INT_EQ(reload_and_wait(&p, 1), 0);          /* a pins version 1 */
    CHECK_INT_EQ(metric(&p, "attnd_retired_model_versions "), 1);
    CHECK_INT_EQ(metric(&p, "attnd_retired_model_bytes "), 66560);
    CHECK_INT_EQ(post(&p, a, body), 200);
    open_session(&p, body, b);                        /* b: version 2 */
    CHECK_INT_EQ(reload_and_wait(&p, 2), 0);          /* 2 x 66560 > 100K: a goes */
    CHECK_INT_EQ(post(&p, a, body), 410);
    CHECK_INT_EQ(post(&p, b, body), 200);
    CHECK_INT_EQ(metric(&p, "attnd_retired_model_versions "), 1);
    CHECK_INT_EQ(metric(&p, "attnd_session_evictions_total{reason=\"retired\"} "), 1);
    for (int k = 3; k <= 12; k++)                      /* unpinned versions go at once */
        CHECK_INT_EQ(reload_and_wait(&p, k), 0);
    CHECK_INT_EQ(metric(&p, "attnd_retired_model_bytes "), 66560);
    CHECK_INT_EQ(post(&p, b, body), 200);
    free(body);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

typedef struct inflight {
    const attnd_proc *p;
    long status;
} inflight;

static void *send_slow(void *arg)
{
    inflight *f = arg;
    char *body = query_body(3);
    f->status = post(f->p, "/v1/models/demo/attention", body);
    free(body);
    return NULL;
}

TEST(sigterm_answers_a_replaced_version)
{
    attnd_proc p;
    const char *args[] = {"--connection-timeout-s", "1", "--max-queue-delay-us", "3000000",
                          "--max-batch-requests", "16", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    inflight f = {.p = &p, .status = 0};
    pthread_t th;
    pthread_create(&th, NULL, send_slow, &f);
    attnd_sleep_ms(300); /* queued: its batch waits 3 s to fill */
    CHECK(reload_and_wait(&p, 1) == 0);
    int rc = attnd_proc_stop(&p); /* SIGTERM while the old version's request waits */
    pthread_join(th, NULL);
    printf("request on the replaced version: %ld; attnd exit %d\n", f.status, rc);
    CHECK_INT_EQ(f.status, 200);
    CHECK_INT_EQ(rc, 0);
}

int main(void)
{
    RUN(reloads_add_no_threads);
    RUN(sigterm_answers_a_replaced_version);
    RUN(retired_versions_bounded);
    return check_summary();
}
