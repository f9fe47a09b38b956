/* test_codec_offload.c — large bodies and answers are decoded and encoded on
 * codec threads (--offload-codec-bytes), not on the HTTP thread that serves
 * their connection, through the real daemon:
 *  - one HTTP thread (--http-threads 1, so every connection shares it): while a
 *    request of 2M numbers is parsed, computed and its answer printed, health
 *    probes on another connection are answered at once; with the codec work on
 *    the HTTP thread each would wait for a whole parse or print;
 *  - a large session append (a prefill) and a large one-shot answer exactly
 *    what they answer with the codec work inline (--offload-codec-bytes 0), a
 *    bad large body gets the same 400, and the session goes on from the
 *    offloaded append; /metrics counts the offloaded work.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#define E 64 /* the demo model's embedding */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Rows [from, from + n) of stream `seed` as a JSON array of E-number rows. */
static void put_rows(sbuf *b, int seed, int from, int n)
{
    sb_rows(b, seed, from, n, E);
}

/* {"query": n_seqs sequences of t rows}, causal when asked. */
static char *oneshot_body(int n_seqs, int t, int causal)
{
    sbuf b = {0};
    sb_printf(&b, "{%s\"query\":[", causal ? "\"is_causal\":true," : "");
    for (int s = 0; s < n_seqs; s++) {
        sb_printf(&b, "%s", s ? "," : "");
        put_rows(&b, s, 0, t);
    }
    sb_printf(&b, "]}");
    return b.p;
}

typedef struct big_call {
    const attnd_proc *p;
    const char *body;
    long status;
    volatile int uploaded, done;
    int64_t uploaded_ns, end_ns;
} big_call;

static size_t discard(char *p, size_t size, size_t n, void *u)
{
    (void)p;
    (void)u;
    return size * n;
}

/* curl's progress: the moment the whole body has been sent. */
static int on_progress(void *v, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    big_call *a = v;
    (void)dltotal;
    (void)dlnow;
    if (!a->uploaded && ultotal > 0 && ulnow == ultotal) {
        a->uploaded_ns = now_ns();
        __atomic_store_n(&a->uploaded, 1, __ATOMIC_RELEASE);
    }
    return 0;
}

static void *run_big(void *v)
{
    big_call *a = v;
    char url[256];
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", a->p->base_url);
    CURL *h = curl_easy_init();
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, a->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(a->body));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, a);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    a->status = -1;
    if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &a->status);
    a->end_ns = now_ns();
    if (!a->uploaded) a->uploaded_ns = a->end_ns;
    __atomic_store_n(&a->uploaded, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return NULL;
}

/* Health probes on one keep-alive connection, one at a time, until *done:
 * how many were answered 200 and the longest one's time. */
static void probe_until(const attnd_proc *p, volatile int *done, int *answered, double *longest_ms)
{
    CURL *h = curl_easy_init();
    char url[256];
    snprintf(url, sizeof url, "%s/healthz", p->base_url);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    *answered = 0;
    *longest_ms = 0;
    while (!__atomic_load_n(done, __ATOMIC_ACQUIRE)) {
        const int64_t t0 = now_ns();
        long code = 0;
        if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        const double ms = (double)(now_ns() - t0) / 1e6;
        if (code == 200) (*answered)++;
        if (ms > *longest_ms) *longest_ms = ms;
    }
    curl_easy_cleanup(h);
}

/* One HTTP thread serves both connections. From the moment the large
 * request's body is sent until its answer arrives, the daemon parses 2M
 * numbers, computes (little: 256 sequences of 128 rows) and prints 2M
 * numbers; the parse and the print run on a codec thread, so each probe sent
 * meanwhile waits for a probe's worth of work (and its share of two cores),
 * never for the parse or the print: the longest probe is under a fifth of
 * that time. (With the codec work on the HTTP thread, a probe sent during
 * the parse waits for all of it: checked by hand with --offload-codec-bytes 0,
 * the longest probe then took about 40 % of it.) */
TEST(large_body_does_not_hold_its_http_thread)
{
    attnd_proc p;
    const char *args[] = {"--http-threads", "1", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char *body = oneshot_body(256, 128, 0); /* 2M numbers, ~14 MB */
    big_call a = {.p = &p, .body = body};
    pthread_t th;
    pthread_create(&th, NULL, run_big, &a);
    int answered;
    double longest;
    while (!__atomic_load_n(&a.uploaded, __ATOMIC_ACQUIRE)) attnd_sleep_ms(1);
    probe_until(&p, &a.done, &answered, &longest);
    pthread_join(th, NULL);
    const double big_ms = (double)(a.end_ns - a.uploaded_ns) / 1e6;
    printf("a %.1f MB request answered %.1f ms after its body was sent; meanwhile %d probes answered, "
           "the longest in %.2f ms\n", (double)strlen(body) / 1e6, big_ms, answered, longest);
    CHECK_INT_EQ(a.status, 200);
    CHECK_MSG(answered >= 10, "only %d probes answered beside a %.1f ms request", answered, big_ms);
    CHECK_MSG(longest < big_ms / 5, "a probe took %.2f ms beside a %.1f ms request", longest, big_ms);
    CHECK(attnd_proc_metric(&p, "attnd_http_offloaded_total{work=\"decode\"}") >= 1);
    CHECK(attnd_proc_metric(&p, "attnd_http_offloaded_total{work=\"encode\"}") >= 1);
    free(body);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* POST path with body to p; *out gets the parsed answer. Returns the status. */
static long post_json(const attnd_proc *p, const char *path, const char *body, json_t **out)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", p->base_url, path);
    long status = -1;
    *out = attnd_http_json("POST", url, body, &status);
    return status;
}

/* A session on p with rows [from, from + n) of `seed` appended: status, answer. */
static long append(const attnd_proc *p, const char *id, int from, int n, json_t **out)
{
    sbuf b = {0};
    sb_printf(&b, "{\"query\":");
    put_rows(&b, 7, from, n);
    sb_printf(&b, "}");
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s/append", id);
    long code = post_json(p, path, b.p, out);
    free(b.p);
    return code;
}

/* The same requests to a daemon that offloads (the 64 KiB default) and one that
 * does not: equal outputs, to the bit, and equal errors. */
TEST(offloaded_answers_equal_inline)
{
    attnd_proc off, in;
    const char *no_offload[] = {"--offload-codec-bytes", "0", NULL};
    if (attnd_proc_start(&off, NULL) != 0 || attnd_proc_start(&in, no_offload) != 0) {
        CHECK_MSG(0, "daemons did not start");
        return;
    }
    const attnd_proc *ps[2] = {&off, &in};
    json_t *ans[2][4] = {{NULL}};
    long st[2][4] = {{0}};
    char *big = oneshot_body(8, 300, 1); /* 154 KB in, ~1.3 MB out */
    char *bad = oneshot_body(8, 300, 0);
    bad[strlen(bad) - 5] = 'x'; /* a large body that is not JSON */
    for (int d = 0; d < 2; d++) {
        json_t *j = NULL;
        char id[64] = "";
        if (post_json(ps[d], "/v1/models/demo/sessions", "{}", &j) == 201)
            snprintf(id, sizeof id, "%s", json_string_value(json_object_get(j, "id")));
        json_decref(j);
        CHECK_MSG(id[0], "daemon %d: no session", d);
        st[d][0] = append(ps[d], id, 0, 1500, &ans[d][0]); /* a prefill: ~130 KB each way */
        st[d][1] = append(ps[d], id, 1500, 1, &ans[d][1]);  /* then a step: small */
        st[d][2] = post_json(ps[d], "/v1/models/demo/attention", big, &ans[d][2]);
        st[d][3] = post_json(ps[d], "/v1/models/demo/attention", bad, &ans[d][3]);
    }
    static const char *const what[4] = {"1500-row append", "the step after it", "large one-shot", "bad body"};
    for (int k = 0; k < 4; k++) {
        CHECK_MSG(st[0][k] == st[1][k], "%s: %ld offloaded, %ld inline", what[k], st[0][k], st[1][k]);
        const char *key = k == 3 ? "error" : "output";
        json_t *a = json_object_get(ans[0][k], key), *b = json_object_get(ans[1][k], key);
        if (k == 3) { /* the message may name nothing that differs */
            a = json_object_get(a, "code");
            b = json_object_get(b, "code");
        }
        CHECK_MSG(a && b && json_equal(a, b), "%s: the answers differ", what[k]);
    }
    CHECK_INT_EQ(st[0][0], 200);
    CHECK_INT_EQ(st[0][1], 200);
    CHECK_INT_EQ(st[0][2], 200);
    CHECK_INT_EQ(st[0][3], 400);
    const double dec = attnd_proc_metric(&off, "attnd_http_offloaded_total{work=\"decode\"}");
    const double enc = attnd_proc_metric(&off, "attnd_http_offloaded_total{work=\"encode\"}");
    printf("offloaded: %.0f decodes, %.0f encodes; inline daemon: %.0f, %.0f\n", dec, enc,
           attnd_proc_metric(&in, "attnd_http_offloaded_total{work=\"decode\"}"),
           attnd_proc_metric(&in, "attnd_http_offloaded_total{work=\"encode\"}"));
    CHECK_MSG(dec == 3 && enc == 2, "offloaded %.0f decodes (want the append, the one-shot and the bad body) "
              "and %.0f encodes (the append's and the one-shot's answers)", dec, enc);
    CHECK(attnd_proc_metric(&in, "attnd_http_offloaded_total{work=\"decode\"}") == 0);
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 4; k++) json_decref(ans[d][k]);
    free(big);
    free(bad);
    CHECK_INT_EQ(attnd_proc_stop(&off), 0);
    CHECK_INT_EQ(attnd_proc_stop(&in), 0);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    RUN(offloaded_answers_equal_inline);
    RUN(large_body_does_not_hold_its_http_thread);
    curl_global_cleanup();
    return check_summary();
}
