/* test_shutdown.c — SIGTERM with requests computing and queued: every one gets
 * its full, correct answer (compared with the library), /readyz answers 503
 * "draining" on an open connection while the queue drains, a new connection's
 * request gets 503 "draining", and attnd exits 0.
 * A 10 s batch delay holds all N requests in the queue until SIGTERM; the drain
 * then computes them (one worker, T = 2048, one batch), which takes long
 * enough to watch /readyz. drain_keepalive: requests written on idle
 * keep-alive connections just after SIGTERM are all answered, never dropped.
 * Issue 27: requests wholly written before SIGTERM but not yet read are
 * computed (drain_answers_sent_requests), --drain-grace-ms serves new ones for
 * a while (drain_grace), and a SIGTERM behind a SIGHUP that waits for a
 * repository load turns /readyz 503 at once (sigterm_after_sighup_during_load).
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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

/* ------------------------------------------------------------ issue 27 */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads one whole response (headers + Content-Length body) from fd, keeping
 * only the head in head (cap bytes). Returns the status, or -1. */
static int read_big(int fd, char *head, size_t cap, size_t *body_len, int timeout_ms)
{
    size_t len = 0, want = 0, got_body = 0;
    int have_head = 0;
    char chunk[65536];
    head[0] = '\0';
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, timeout_ms) <= 0)
            return -1;
        ssize_t r = recv(fd, chunk, sizeof chunk, 0);
        if (r <= 0)
            return -1;
        size_t off = 0;
        if (!have_head) {
            size_t prev = len, take = (size_t)r < cap - 1 - len ? (size_t)r : cap - 1 - len;
            memcpy(head + len, chunk, take);
            len += take;
            head[len] = '\0';
            char *end = strstr(head, "\r\n\r\n");
            if (!end) {
                if (len + 1 >= cap)
                    return -1;
                continue;
            }
            const char *cl = strcasestr(head, "\r\nContent-Length:");
            if (!cl)
                return -1;
            want = strtoul(cl + 17, NULL, 10);
            have_head = 1;
            size_t head_len = (size_t)(end + 4 - head);
            off = head_len - prev; /* where the body starts in chunk */
            head[head_len] = '\0';
        }
        got_body += (size_t)r - off;
        if (got_body >= want) {
            *body_len = got_body;
            return http_raw_status(head);
        }
    }
}

enum { W = 24, WT = 1000 };

/* A whole POST of a ~350 KB body (WT rows) whose answer, with the averaged
 * attention weights, is ~13 MB. Caller frees. */
static char *big_request(size_t *len)
{
    size_t cap = (size_t)WT * E * 8 + 256, n = 0;
    char *body = malloc(cap);
    n += (size_t)snprintf(body + n, cap - n, "{\"need_weights\": true, \"query\": [");
    for (int t = 0; t < WT; t++)
        for (int e = 0; e < E; e++)
            n += (size_t)snprintf(body + n, cap - n, "%s%.2f", e ? "," : t ? "],[" : "[",
                                  (double)((t * 3 + e) % 11 - 5) / 4.0);
    n += (size_t)snprintf(body + n, cap - n, "]]}");
    size_t req_cap = n + 512;
    char *req = malloc(req_cap);
    int hl = snprintf(req, req_cap,
                      "POST /v1/models/demo/attention HTTP/1.1\r\nHost: x\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", n);
    memcpy(req + hl, body, n);
    free(body);
    *len = (size_t)hl + n;
    return req;
}

static int send_all(int fd, const char *p, size_t n)
{
    size_t off = 0;
    while (fd >= 0 && off < n) {
        ssize_t r = send(fd, p + off, n - off, MSG_NOSIGNAL);
        if (r <= 0)
            return -1;
        off += (size_t)r;
    }
    return fd >= 0 ? 0 : -1;
}

typedef struct written {
    int fd;
    int status;
    size_t body_len;
    char head[2048];
} written;

static void *read_written(void *arg)
{
    written *w = arg;
    w->status = read_big(w->fd, w->head, sizeof w->head, &w->body_len, 20000);
    return NULL;
}

/* 24 connections, each with a whole request written (a ~300 KB body whose
 * answer, with the averaged attention weights, is ~12 MB), then SIGTERM: all
 * 24 are computed and answered 200. attnd used to answer 503 draining to the
 * ones it had not read yet (15 of 24), work the clients had already sent. */
TEST(drain_answers_sent_requests)
{
    attnd_proc p;
    const char *args[] = {"--max-body-bytes", "4M", "--max-inflight-bytes", "4G", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return;
    }
    size_t req_len;
    char *req = big_request(&req_len);
    written w[W];
    pthread_t th[W];
    int sent = 0;
    for (int i = 0; i < W; i++) {
        w[i] = (written){.fd = attnd_connect_local(p.port), .status = -1};
        sent += send_all(w[i].fd, req, req_len) == 0;
    }
    kill(p.pid, SIGTERM); /* every request is written */
    for (int i = 0; i < W; i++)
        pthread_create(&th[i], NULL, read_written, &w[i]);
    int ok = 0, draining = 0;
    size_t min_len = (size_t)-1;
    for (int i = 0; i < W; i++) {
        pthread_join(th[i], NULL);
        ok += w[i].status == 200;
        draining += w[i].status == 503;
        if (w[i].status == 200 && w[i].body_len < min_len)
            min_len = w[i].body_len;
        if (w[i].status != 200)
            printf("connection %d: %d %.300s\n", i, w[i].status, w[i].head);
        if (w[i].fd >= 0)
            close(w[i].fd);
    }
    printf("%d requests of %zu bytes written before SIGTERM: %d answered 200 (smallest answer "
           "%zu bytes), %d 503\n", sent, req_len, ok, min_len, draining);
    CHECK_INT_EQ(sent, W);
    CHECK_INT_EQ(ok, W);
    CHECK(min_len > 10000000);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    free(req);
    unlink(p.log_path);
}

/* A request on a new connection; the status, Connection: close into *closes. */
static int one_request(const attnd_proc *p, const char *path, int *closes)
{
    static const char body[] = "{\"query\": [[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                               "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                               "0,0,0,0,0,0,0,0]]}";
    char req[512], buf[8192];
    int n = strcmp(path, "/readyz") == 0
                ? snprintf(req, sizeof req, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
                : snprintf(req, sizeof req,
                           "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Content-Length: %zu\r\n\r\n%s", path, sizeof body - 1, body);
    int fd = attnd_connect_local(p->port);
    if (fd < 0)
        return -1;
    int st = -1;
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) == n && read_one(fd, buf, sizeof buf, 3000) > 0) {
        st = http_raw_status(buf);
        if (closes)
            *closes = strcasestr(buf, "\r\nConnection: close\r\n") != NULL;
    }
    close(fd);
    return st;
}

/* --drain-grace-ms 1500: requests arriving in the 1.5 s after SIGTERM are
 * still computed (200, Connection: close) while /readyz says 503; after it,
 * 503 draining (a big answer left unread keeps attnd draining that long);
 * attnd exits 0. */
TEST(drain_grace)
{
    attnd_proc p;
    const char *args[] = {"--drain-grace-ms", "1500", "--max-body-bytes", "4M", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return;
    }
    size_t big_len;
    char *big = big_request(&big_len);
    double t0 = mono_s();
    kill(p.pid, SIGTERM);
    attnd_sleep_ms(300);
    written slow = {.fd = attnd_connect_local(p.port), .status = -1};
    CHECK_INT_EQ(send_all(slow.fd, big, big_len), 0); /* its answer is not read for now */
    int closes = 0;
    CHECK_INT_EQ(one_request(&p, "/readyz", NULL), 503);
    CHECK_INT_EQ(one_request(&p, "/v1/models/demo/attention", &closes), 200);
    CHECK(closes);
    attnd_sleep_ms(500);
    CHECK_INT_EQ(one_request(&p, "/v1/models/demo/attention", &closes), 200);
    double in_grace = mono_s() - t0;
    while (mono_s() - t0 < 1.8)
        attnd_sleep_ms(20);
    int late = one_request(&p, "/v1/models/demo/attention", &closes);
    CHECK_INT_EQ(late, 503);
    CHECK(closes);
    CHECK_INT_EQ(read_big(slow.fd, slow.head, sizeof slow.head, &slow.body_len, 10000), 200);
    close(slow.fd);
    printf("served during the grace up to %.2f s after SIGTERM; %d at 1.8 s; the unread big "
           "answer: %zu bytes\n", in_grace, late, slow.body_len);
    CHECK(in_grace < 1.5);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    free(big);
    unlink(p.log_path);
}

typedef struct bg_load {
    const attnd_proc *p;
    const char *path;
    long status;
    _Atomic int done;
} bg_load;

static void *load_main(void *arg)
{
    bg_load *b = arg;
    char url[160], body[512];
    snprintf(url, sizeof url, "%s/v2/repository/models/big/load", b->p->base_url);
    snprintf(body, sizeof body, "{\"parameters\": {\"path\": \"%s\", \"heads\": 8}}", b->path);
    const char *hdrs[] = {"Authorization: Bearer h3-admin-key", NULL};
    http_result r;
    b->status = http_do_ex("POST", url, body, strlen(body), NULL, hdrs, NULL, &r) == 0
                    ? r.status : -1;
    http_result_free(&r);
    atomic_store(&b->done, 1);
    return NULL;
}

/* A SIGHUP while a repository load runs (its reload waits for that load),
 * then SIGTERM: /readyz turns 503 while the load is still running (it used to
 * stay 200 until the load ended: the main thread was inside the reload), and
 * attnd exits 0. */
TEST(sigterm_after_sighup_during_load)
{
    char admin[] = "/tmp/attnd-shut-admin-XXXXXX", big[] = "/tmp/attnd-shut-big-XXXXXX";
    int fa = mkstemp(admin), fb = mkstemp(big);
    CHECK(fa >= 0 && fb >= 0);
    if (fa < 0 || fb < 0)
        return;
    CHECK(write(fa, "h3-admin-key\n", 13) == 13);
    close(fa);
    close(fb);
    CHECK_INT_EQ(attnd_write_zero_mha(big, 4096), 0);
    attnd_proc p;
    const char *args[] = {"--admin-key-file", admin, NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        unlink(admin);
        unlink(big);
        return;
    }
    bg_load b = {.p = &p, .path = big};
    pthread_t th;
    double t0 = mono_s();
    pthread_create(&th, NULL, load_main, &b);
    attnd_sleep_ms(150);
    kill(p.pid, SIGHUP);
    attnd_sleep_ms(100);
    kill(p.pid, SIGTERM);
    double t_term = mono_s();
    int ready_503 = 0, load_running = 0;
    while (mono_s() - t_term < 5 && !ready_503) {
        ready_503 = one_request(&p, "/readyz", NULL) == 503;
        load_running = !atomic_load(&b.done);
        if (!ready_503)
            attnd_sleep_ms(20);
    }
    double t_ready = mono_s() - t_term;
    pthread_join(th, NULL);
    double t_load = mono_s() - t0;
    printf("/readyz 503 %.2f s after SIGTERM (load still running then: %s; the load took "
           "%.2f s, answered %ld)\n", t_ready, load_running ? "yes" : "no", t_load, b.status);
    CHECK(ready_503);
    CHECK_MSG(load_running, "/readyz turned 503 only once the load had ended");
    CHECK(t_ready < 0.5);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);
    unlink(admin);
    unlink(big);
}

int main(void)
{
    RUN(sigterm_drain);
    RUN(drain_keepalive);
    RUN(drain_answers_sent_requests);
    RUN(drain_grace);
    RUN(sigterm_after_sighup_during_load);
    return check_summary();
}
