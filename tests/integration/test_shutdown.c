/* test_shutdown.c — SIGTERM with requests computing and queued: every one gets
 * its full, correct answer (compared with the library), /readyz answers 503
 * "draining" on an open connection while the queue drains, a new connection's
 * request gets 503 "draining", and attnd exits 0.
 * A 10 s batch delay holds all N requests in the queue until SIGTERM; the drain
 * then computes them (one worker, T = 2048, one batch), which takes long
 * enough to watch /readyz. drain_keepalive: requests written on idle
 * keep-alive connections just after SIGTERM are all answered, never dropped.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "attn.h"
#include "check.h"
#include "daemon.h"

enum { N = 12, T = 2048, E = 64 };

typedef struct job {
    int id;
    float *query;
    char *body;
    long status;
    double max_diff;
} job;

static attnd_proc proc;
static attn_layer *layer;

static void *run_job(void *arg)
{
    job *j = arg;
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", proc.base_url);
    http_result r;
    j->status = -1;
    j->max_diff = INFINITY;
    if (http_do("POST", url, j->body, strlen(j->body), NULL, &r) != 0)
        return NULL;
    j->status = r.status;
    if (r.status == 200) {
        float *want = malloc(sizeof(float) * T * E);
        attn_seq s = {.t = T, .s = T, .query = j->query, .output = want};
        attn_error err;
        json_t *root = json_loads(r.body, 0, NULL), *o = json_object_get(root, "output");
        if (attn_forward(layer, &s, 1, NULL, NULL, &err) == ATTN_OK && json_array_size(o) == T) {
            j->max_diff = 0;
            for (int t = 0; t < T; t++)
                for (int e = 0; e < E; e++) {
                    json_t *x = json_array_get(json_array_get(o, t), e);
                    j->max_diff = fmax(j->max_diff,
                                       json_is_number(x)
                                           ? fabs(json_number_value(x) - (double)want[t * E + e])
                                           : INFINITY);
                }
        }
        json_decref(root);
        free(want);
    }
    http_result_free(&r);
    return NULL;
}

/* A persistent connection: the listening socket closes during the drain, but
 * an open keep-alive connection is still served. */
typedef struct keep {
    CURL *c;
    char buf[65536];
    size_t len;
} keep;

static size_t keep_write(char *d, size_t sz, size_t n, void *ud)
{
    keep *k = ud;
    size_t m = sz * n, room = sizeof k->buf - 1 - k->len;
    memcpy(k->buf + k->len, d, m < room ? m : room);
    k->len += m < room ? m : room;
    k->buf[k->len] = '\0';
    return m;
}

static long keep_get(keep *k, const char *path)
{
    char url[128];
    snprintf(url, sizeof url, "%s%s", proc.base_url, path);
    k->len = 0;
    k->buf[0] = '\0';
    curl_easy_setopt(k->c, CURLOPT_URL, url);
    long status = -1;
    if (curl_easy_perform(k->c) == CURLE_OK)
        curl_easy_getinfo(k->c, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

static int queue_depth(keep *k)
{
    if (keep_get(k, "/metrics") != 200)
        return -1;
    static const char pat[] = "attnd_queue_depth{model=\"demo\"} ";
    const char *p = strstr(k->buf, pat);
    return p ? atoi(p + sizeof pat - 1) : -1;
}

/* SIGTERM with N requests queued: /readyz turns 503, every request is answered
 * correctly, attnd exits 0 and logs that every response was sent. */
TEST(sigterm_drain)
{
    attn_error err;
    if (attn_layer_load_safetensors("config/demo.safetensors", 0, &layer, &err) != ATTN_OK) {
        CHECK_MSG(0, "cannot load the demo layer");
        return;
    }
    const char *args[] = {"--workers", "1", "--max-batch-requests", "64", "--max-queue", "64",
                          "--max-queue-delay-us", "10000000", "--max-batch-tokens", "1000000",
                          NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    keep k = {.c = curl_easy_init()};
    curl_easy_setopt(k.c, CURLOPT_WRITEFUNCTION, keep_write);
    curl_easy_setopt(k.c, CURLOPT_WRITEDATA, &k);
    curl_easy_setopt(k.c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(k.c, CURLOPT_NOSIGNAL, 1L);
    CHECK_INT_EQ(keep_get(&k, "/readyz"), 200);

    job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (job){.id = i, .query = malloc(sizeof(float) * T * E)};
        size_t cap = (size_t)T * E * 8 + 64, n = (size_t)snprintf(
            jobs[i].body = malloc(cap), cap, "{\"query\": [");
        for (int t = 0; t < T; t++)
            for (int e = 0; e < E; e++) {
                float v = (float)((i * 5 + t * 3 + e) % 11 - 5) / 4.0f;
                jobs[i].query[t * E + e] = v;
                n += (size_t)snprintf(jobs[i].body + n, cap - n, "%s%g",
                                      e ? "," : t ? "],[" : "[", (double)v);
            }
        snprintf(jobs[i].body + n, cap - n, "]]}");
        pthread_create(&th[i], NULL, run_job, &jobs[i]);
    }
    /* Wait until every request is queued (accepted), none computed yet. */
    int depth = 0;
    for (int tries = 0; tries < 1000 && depth < N; tries++) {
        depth = queue_depth(&k);
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    printf("queue depth %d at SIGTERM\n", depth);
    CHECK_INT_EQ(depth, N);
    kill(proc.pid, SIGTERM);
    {   /* a new connection during the drain is accepted and told so (503 draining) */
        char url[160];
        snprintf(url, sizeof url, "%s/v1/attention", proc.base_url);
        attnd_sleep_ms(50);
        http_result r;
        CHECK_INT_EQ(http_do("POST", url, jobs[0].body, strlen(jobs[0].body), NULL, &r), 0);
        CHECK_INT_EQ(r.status, 503);
        CHECK(r.body && strstr(r.body, "\"draining\""));
        http_result_free(&r);
    }

    int draining = 0, polls = 0;
    for (; polls < 2000; polls++) {
        long st = keep_get(&k, "/readyz");
        if (st == 503 && strstr(k.buf, "draining"))
            draining++;
        else if (st != 200)
            break; /* connection closed: the drain is over */
        struct timespec ts = {0, 1 * 1000000L};
        nanosleep(&ts, NULL);
    }
    printf("/readyz answered 503 draining %d times during the drain\n", draining);
    CHECK(draining > 0);

    int ok = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        ok += jobs[i].status == 200 && jobs[i].max_diff < 1e-4;
        worst = fmax(worst, jobs[i].max_diff);
        free(jobs[i].query);
        free(jobs[i].body);
    }
    printf("%d/%d answered 200 and correct (worst |diff| %.2g)\n", ok, N, worst);
    CHECK_INT_EQ(ok, N);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    FILE *f = fopen(proc.log_path, "r");
    char line[1024];
    int sent_all = 0;
    while (f && fgets(line, sizeof line, f))
        sent_all |= strstr(line, "draining: every response sent") != NULL;
    if (f)
        fclose(f);
    CHECK(sent_all);
    unlink(proc.log_path);
    curl_easy_cleanup(k.c);
    curl_global_cleanup();
    attn_layer_free(layer);
}

/* ------------------------------------------------------------ keep-alive at SIGTERM */

/* Reads one response (headers + Content-Length body) into buf. Returns its
 * length, or -1 when the connection closed or went silent first. */
static int read_one(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t len = 0;
    for (;;) {
        buf[len] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        const char *cl = strcasestr(buf, "\r\nContent-Length:");
        if (end && cl && len >= (size_t)(end + 4 - buf) + strtoul(cl + 17, NULL, 10))
            return (int)len;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (len + 1 >= cap || poll(&pfd, 1, timeout_ms) <= 0)
            return -1;
        ssize_t r = recv(fd, buf + len, cap - 1 - len, 0);
        if (r <= 0)
            return -1;
        len += (size_t)r;
    }
}

/* Idle keep-alive connections whose clients write a request 5-10 ms after
 * SIGTERM: every request is answered (200 or 503 draining) with
 * Connection: close, none is dropped, and attnd exits 0. */
TEST(drain_keepalive)
{
    enum { K = 6 };
    attnd_proc p;
    if (attnd_proc_start(&p, NULL) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return;
    }
    static const char ping[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    static const char body[] = "{\"query\": [[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                               "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                               "0,0,0,0,0,0,0,0]]}";
    char req[512], buf[8192];
    int n = snprintf(req, sizeof req,
                     "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     sizeof body - 1, body);
    int fds[K];
    for (int i = 0; i < K; i++) {
        fds[i] = attnd_connect_local(p.port);
        CHECK(fds[i] >= 0 && send(fds[i], ping, sizeof ping - 1, MSG_NOSIGNAL) > 0);
        CHECK(fds[i] >= 0 && read_one(fds[i], buf, sizeof buf, 2000) > 0); /* kept alive */
    }
    kill(p.pid, SIGTERM);
    struct timespec ts = {0, 5 * 1000000L};
    nanosleep(&ts, NULL);
    int answered = 0, closing = 0;
    for (int i = 0; i < K; i++) { /* 5 ms after SIGTERM and on: one request per connection */
        if (i == K / 2) {
            ts.tv_nsec = 5 * 1000000L; /* the rest 10 ms after */
            nanosleep(&ts, NULL);
        }
        const char *what = i % 2 ? req : ping;
        size_t len = i % 2 ? (size_t)n : sizeof ping - 1;
        if (send(fds[i], what, len, MSG_NOSIGNAL) != (ssize_t)len)
            continue;
    }
    for (int i = 0; i < K; i++) {
        int got = read_one(fds[i], buf, sizeof buf, 3000);
        int st = got > 0 ? http_raw_status(buf) : -1;
        answered += st == 200 || (st == 503 && strstr(buf, "draining"));
        closing += got > 0 && strcasestr(buf, "\r\nConnection: close\r\n") != NULL;
        if (!(st == 200 || st == 503))
            fprintf(stderr, "connection %d: no answer after SIGTERM (%d)\n", i, st);
        close(fds[i]);
    }
    printf("%d/%d requests sent 5-10 ms after SIGTERM answered, %d with Connection: close\n",
           answered, K, closing);
    CHECK_INT_EQ(answered, K);
    CHECK_INT_EQ(closing, K);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);
}

int main(void)
{
    RUN(sigterm_drain);
    RUN(drain_keepalive);
    return check_summary();
}
