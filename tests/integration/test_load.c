/* test_load.c — runs the real attnd-load binary ($ATTND_LOAD_BIN) as a subprocess:
 *   1. against a small fake server (libmicrohttpd, in this process) that answers correctly with
 *      known timing: exit 0, counts add up, the timing means are exactly the fake's;
 *   2. against a fake server answering 500s, 503s, malformed JSON, short and missing outputs:
 *      each counted under the right kind, exit 1;
 *   3. open loop: exactly rate x duration requests; a slow server gives timeouts;
 *      bad usage exits 2, an unreachable server exits 3; a server slower than the offered
 *      rate is reported SHORT with its late fraction, --max-late-fraction turns that into
 *      exit 4, and the SVG has ticks at the offered rates and the offered = achieved line;
 *   4. a tiny sweep against the real attnd (tests/common/daemon.h): zero errors, rps > 0,
 *      0 < p50 <= p90 <= p95 <= p99 <= max, and the JSON, CSV and SVG files are well formed;
 *      then --protocol v2 --binary against it: zero errors, timing read from the answers. */
#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"

#define FAKE_E 8 /* the fake model's widths */

/* ---- fake server ---------------------------------------------------------------------------- */

enum { FAKE_GOOD, FAKE_BAD, FAKE_SLOW, FAKE_20MS };

typedef struct fake {
    struct MHD_Daemon *d;
    int port, mode;
    atomic_long posts;
} fake;

typedef struct upload {
    char *buf;
    size_t len;
} upload;

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, char *body /* owned */)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

/* The correct answer to an attention request: zeros of shape T x FAKE_E (per sequence),
 * the id echoed, timing 100 us queue / 50 us compute / batch 1. short_by drops rows. */
static char *good_answer(const char *req_body, size_t len, int short_by)
{
    json_t *req = json_loadb(req_body, len, 0, NULL), *q = json_object_get(req, "query");
    int batched = json_is_array(json_array_get(json_array_get(q, 0), 0));
    size_t nseq = batched ? json_array_size(q) : 1;
    json_t *outs = json_array();
    for (size_t b = 0; b < nseq; b++) {
        json_t *qb = batched ? json_array_get(q, b) : q, *o = json_array();
        size_t t = json_array_size(qb);
        for (size_t i = 0; i + (size_t)short_by < t; i++) {
            json_t *row = json_array();
            for (int e = 0; e < FAKE_E; e++) json_array_append_new(row, json_integer(0));
            json_array_append_new(o, row);
        }
        json_array_append_new(outs, o);
    }
    json_t *resp = json_pack("{s:s, s:O?, s:O, s:{s:i, s:i, s:i}}", "model", "x", "id",
                             json_object_get(req, "id"), "output",
                             batched ? outs : json_array_get(outs, 0), "timing", "queue_us", 100,
                             "compute_us", 50, "batch_size", 1);
    char *s = resp ? json_dumps(resp, JSON_COMPACT) : strdup("{}");
    json_decref(resp);
    json_decref(outs);
    json_decref(req);
    return s;
}

static enum MHD_Result answer_post(fake *f, struct MHD_Connection *c, upload *u)
{
    long n = atomic_fetch_add(&f->posts, 1);
    if (f->mode == FAKE_SLOW) {
        struct timespec ts = {0, 300000000}; /* 300 ms: past the client's timeout */
        nanosleep(&ts, NULL);
    }
    if (f->mode == FAKE_20MS) { /* one polling thread: at most 50 answers/s */
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    if (f->mode != FAKE_BAD) return reply(c, 200, good_answer(u->buf, u->len, 0));
    switch (n % 6) { /* one of each, in turn */
    case 0: return reply(c, 500, strdup("{\"error\":{\"code\":\"internal\",\"message\":\"x\"}}"));
    case 1: return reply(c, 200, strdup("{\"output\": [[0,0"));
    case 2: return reply(c, 200, good_answer(u->buf, u->len, 1)); /* one row short */
    case 3: return reply(c, 503, strdup("{\"error\":{\"code\":\"queue_full\",\"message\":\"x\"}}"));
    case 4: return reply(c, 200, strdup("{\"model\":\"x\"}"));    /* no output */
    default: return reply(c, 200, good_answer(u->buf, u->len, 0));
    }
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *data,
                               size_t *data_size, void **con_cls)
{
    fake *f = cls;
    (void)version;
    if (!*con_cls) {
        *con_cls = calloc(1, sizeof(upload));
        return *con_cls ? MHD_YES : MHD_NO;
    }
    upload *u = *con_cls;
    if (*data_size) {
        char *b = realloc(u->buf, u->len + *data_size + 1);
        if (!b) return MHD_NO;
        memcpy(b + u->len, data, *data_size);
        u->buf = b;
        u->len += *data_size;
        b[u->len] = 0;
        *data_size = 0;
        return MHD_YES;
    }
    if (!strcmp(method, "GET") && !strcmp(url, "/v1/models/x")) {
        char *info;
        if (asprintf(&info, "{\"name\":\"x\",\"num_heads\":2,\"embed_q\":%d,\"embed_k\":%d,"
                            "\"embed_v\":%d,\"embed_out\":%d}", FAKE_E, FAKE_E, FAKE_E, FAKE_E) < 0)
            return MHD_NO;
        return reply(c, 200, info);
    }
    if (!strcmp(method, "POST") && !strcmp(url, "/v1/models/x/attention") && u->buf)
        return answer_post(f, c, u);
    return reply(c, 404, strdup("{\"error\":{\"code\":\"not_found\",\"message\":\"x\"}}"));
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    upload *u = *con_cls;
    if (u) free(u->buf);
    free(u);
    *con_cls = NULL;
}

static int fake_start(fake *f, int mode)
{
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    f->mode = mode;
    atomic_init(&f->posts, 0);
    f->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL,
                            handler, f, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
    if (!f->d) return -1;
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(f->d, MHD_DAEMON_INFO_BIND_PORT);
    f->port = i ? i->port : 0;
    return f->port ? 0 : -1;
}

/* Starts a fake in mode and writes its base URL into url. */
static int fake_open(fake *f, int mode, char *url, size_t n)
{
    if (fake_start(f, mode) != 0) return -1;
    snprintf(url, n, "http://127.0.0.1:%d", f->port);
    return 0;
}

/* ---- running attnd-load ----------------------------------------------------------------------- */

static char tmpdir[64];

static const char *tmp_path(const char *name)
{
    static char buf[8][160];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
    return p;
}

/* Runs $ATTND_LOAD_BIN with args (NULL-terminated) and output files in tmpdir, bounded by
 * 60 s. Returns the exit status, or -1 if it did not exit normally. stdout goes to out.txt. */
static int run_load(const char *const *args)
{
    const char *bin = getenv("ATTND_LOAD_BIN") ? getenv("ATTND_LOAD_BIN") : "build/attnd-load";
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)bin;
    for (; *args && argc < 63; args++) argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (!freopen(tmp_path("out.txt"), "w", stdout)) _exit(127);
        execv(bin, argv);
        perror(bin);
        _exit(127);
    }
    int st = 0;
    for (int waited = 0; waited < 6000; waited++) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    fprintf(stderr, "attnd-load did not finish in 60 s\n");
    return -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    size_t n = 0, cap = 0, r;
    char chunk[4096];
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (n + r + 1 > cap) {
            cap = 2 * (n + r + 1);
            char *t = realloc(s, cap);
            if (!t) break;
            s = t;
        }
        memcpy(s + n, chunk, r);
        n += r;
        s[n] = 0;
    }
    fclose(f);
    return s;
}

static long jint(json_t *o, const char *k) { return (long)json_integer_value(json_object_get(o, k)); }
static double jnum(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

/* Per-level invariants that hold for any successful run; returns the levels array (borrowed). */
static json_t *check_report(json_t *root, size_t want_levels, long *total_ok)
{
    json_t *levels = json_object_get(root, "levels");
    CHECK_INT_EQ(json_array_size(levels), want_levels);
    long req = 0, err = 0;
    *total_ok = 0;
    for (size_t i = 0; i < json_array_size(levels); i++) {
        json_t *l = json_array_get(levels, i), *kinds = json_object_get(l, "errors_by_kind");
        long by_kind = 0;
        const char *k;
        json_t *v;
        json_object_foreach(kinds, k, v) by_kind += (long)json_integer_value(v);
        CHECK_INT_EQ(jint(l, "ok") + jint(l, "errors"), jint(l, "requests"));
        CHECK_INT_EQ(by_kind, jint(l, "errors"));
        CHECK_INT_EQ(json_object_size(kinds), 9);
        if (jint(l, "ok") > 0) {
            CHECK(jnum(l, "rps") > 0);
            CHECK(jnum(l, "p50_ms") > 0);
            CHECK(jnum(l, "p50_ms") <= jnum(l, "p90_ms"));
            CHECK(jnum(l, "p90_ms") <= jnum(l, "p95_ms"));
            CHECK(jnum(l, "p95_ms") <= jnum(l, "p99_ms"));
            CHECK(jnum(l, "p99_ms") <= jnum(l, "max_ms"));
            CHECK(jnum(l, "tokens_per_s") >= jnum(l, "rps")); /* >= 1 token per request */
        }
        req += jint(l, "requests");
        err += jint(l, "errors");
        *total_ok += jint(l, "ok");
    }
    json_t *total = json_object_get(root, "total");
    CHECK_INT_EQ(jint(total, "requests"), req);
    CHECK_INT_EQ(jint(total, "errors"), err);
    return levels;
}

static json_t *load_json(const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK_MSG(root != NULL, "%s: %s", path, je.text);
    return root;
}

static void check_svg(const char *path)
{
    char *s = slurp(path);
    CHECK_MSG(s != NULL, "no SVG at %s", path);
    if (!s) return;
    const char *svg = strstr(s, "<svg");
    CHECK(!strncmp(s, "<svg", 4) || (!strncmp(s, "<?xml", 5) && svg && svg - s < 100));
    CHECK(strstr(s, "<polyline") != NULL);
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ')) n--;
    CHECK(n >= 6 && !strncmp(s + n - 6, "</svg>", 6));
    int open = 0, close = 0;
    for (const char *p = s; (p = strstr(p, "<text")); p++) open++;
    for (const char *p = s; (p = strstr(p, "</text>")); p++) close++;
    CHECK(open > 5 && open == close);
    CHECK(strchr(s, '&') == NULL || strstr(s, "&amp;") || strstr(s, "&lt;"));
    free(s);
}

/* ---- the tests -------------------------------------------------------------------------------- */

TEST(fake_good)
{
    fake f;
    char url[64];
    CHECK(fake_open(&f, FAKE_GOOD, url, sizeof url) == 0);
    const char *args[] = {"--url", url, "--model", "x", "--concurrency", "1,4", "--duration",
                          "500ms", "--warmup", "100ms", "--seq-len", "2:9", "--batch", "2",
                          "--json", tmp_path("good.json"), "--csv", tmp_path("good.csv"),
                          "--svg", tmp_path("good.svg"), "--max-error-rate", "0", NULL};
    CHECK_INT_EQ(run_load(args), 0);
    json_t *root = load_json(tmp_path("good.json"));
    long ok;
    json_t *levels = check_report(root, 2, &ok);
    CHECK(ok > 0);
    CHECK(ok <= atomic_load(&f.posts)); /* warm-up requests were sent but not counted */
    for (size_t i = 0; i < json_array_size(levels); i++) {
        json_t *l = json_array_get(levels, i);
        CHECK_NEAR(jnum(l, "concurrency"), i ? 4 : 1, 0);
        CHECK_INT_EQ(jint(l, "errors"), 0);
        CHECK(jint(l, "connects") <= (i ? 4 : 1));    /* keep-alive: connections reused */
        CHECK_NEAR(jnum(l, "queue_ms"), 0.1, 1e-9);   /* the fake's timing, exactly */
        CHECK_NEAR(jnum(l, "compute_ms"), 0.05, 1e-9);
        CHECK_NEAR(jnum(l, "mean_batch_size"), 1, 1e-12);
        CHECK(jnum(l, "tokens_per_s") >= 4 * jnum(l, "rps")); /* 2 sequences of >= 2 rows */
    }
    CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(root, "params"), "model")), "x");
    json_decref(root);
    char *csv = slurp(tmp_path("good.csv"));
    CHECK(csv && !strncmp(csv, "concurrency,requests,ok,errors,", 31));
    int lines = 0;
    for (const char *p = csv; p && *p; p++) lines += *p == '\n';
    CHECK_INT_EQ(lines, 3);
    free(csv);
    check_svg(tmp_path("good.svg"));
    MHD_stop_daemon(f.d);
}

TEST(fake_bad)
{
    fake f;
    char url[64];
    CHECK(fake_open(&f, FAKE_BAD, url, sizeof url) == 0);
    const char *args[] = {"--url", url, "--model", "x", "--embed", "8", "--concurrency", "2",
                          "--requests", "60", "--warmup", "0", "--seq-len", "3:6", "--quiet",
                          "--json", tmp_path("bad.json"), NULL};
    CHECK_INT_EQ(run_load(args), 1);
    json_t *root = load_json(tmp_path("bad.json"));
    long ok;
    json_t *levels = check_report(root, 1, &ok);
    json_t *l = json_array_get(levels, 0), *k = json_object_get(l, "errors_by_kind");
    CHECK_INT_EQ(jint(l, "requests"), 60);
    CHECK_INT_EQ(atomic_load(&f.posts), 60);
    /* Answers cycle through six kinds; with 2 in flight the order interleaves, but the counts
     * per kind are each 10 (60 / 6) since every answer is one of the six. */
    CHECK_INT_EQ(jint(k, "http_5xx"), 10);
    CHECK_INT_EQ(jint(k, "bad_json"), 10);
    CHECK_INT_EQ(jint(k, "http_503"), 10);
    CHECK_INT_EQ(jint(k, "bad_shape"), 20); /* short output + missing output */
    CHECK_INT_EQ(jint(k, "transport") + jint(k, "timeout") + jint(k, "http_4xx"), 0);
    CHECK_INT_EQ(ok, 10);
    CHECK_NEAR(jnum(json_object_get(root, "total"), "error_rate"), 50.0 / 60.0, 1e-9);
    json_decref(root);

    /* The same errors are tolerated when allowed. */
    const char *lenient[] = {"--url", url, "--model", "x", "--embed", "8", "--requests", "12",
                             "--warmup", "0", "--quiet", "--max-error-rate", "0.9", NULL};
    CHECK_INT_EQ(run_load(lenient), 0);
    MHD_stop_daemon(f.d);

    /* Nothing listens there any more: exit 3 (cannot start) when asking for the model... */
    const char *gone[] = {"--url", url, "--model", "x", "--quiet", NULL};
    CHECK_INT_EQ(run_load(gone), 3);
    /* ...and transport errors, exit 1, when the widths are given. */
    const char *gone2[] = {"--url", url, "--embed", "8", "--requests", "3", "--warmup", "0",
                           "--quiet", "--json", tmp_path("gone.json"), NULL};
    CHECK_INT_EQ(run_load(gone2), 1);
    root = load_json(tmp_path("gone.json"));
    CHECK_INT_EQ(jint(json_object_get(json_array_get(json_object_get(root, "levels"), 0), "errors_by_kind"), "transport"), 3);
    json_decref(root);
}

TEST(open_loop_and_timeout)
{
    fake f;
    char url[64];
    CHECK(fake_open(&f, FAKE_GOOD, url, sizeof url) == 0);
    /* 200 req/s for 0.5 s: sends scheduled at 0, 5, ..., 495 ms -> exactly 100 measured */
    const char *args[] = {"--url", url, "--model", "x", "--rate", "200", "--duration", "500ms",
                          "--warmup", "100ms", "--quiet", "--json", tmp_path("rate.json"),
                          "--csv", tmp_path("rate.csv"), "--svg", tmp_path("rate.svg"), NULL};
    CHECK_INT_EQ(run_load(args), 0);
    json_t *root = load_json(tmp_path("rate.json"));
    long ok;
    json_t *l = json_array_get(check_report(root, 1, &ok), 0);
    CHECK_NEAR(jnum(l, "rate"), 200, 0);
    CHECK_INT_EQ(jint(l, "requests"), 100);
    CHECK_INT_EQ(ok, 100);
    CHECK_INT_EQ(atomic_load(&f.posts), 120); /* + 20 warm-up sends */
    CHECK(jnum(l, "elapsed_s") >= 0.495 && jnum(l, "elapsed_s") < 5);
    CHECK(jint(l, "late") >= 0 && jint(l, "late") <= 100);
    CHECK_NEAR(jnum(l, "late_fraction"), jint(l, "late") / 100.0, 1e-9);
    CHECK(jnum(l, "achieved_rps") > 0);
    CHECK(json_is_boolean(json_object_get(l, "short_of_offered")));
    CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(root, "params"), "mode")), "open_loop_rate");
    json_decref(root);
    char *csv = slurp(tmp_path("rate.csv"));
    CHECK(csv && !strncmp(csv, "rate,requests,", 14));
    free(csv);
    check_svg(tmp_path("rate.svg"));
    MHD_stop_daemon(f.d);

    CHECK(fake_open(&f, FAKE_SLOW, url, sizeof url) == 0);
    const char *slow[] = {"--url", url, "--model", "x", "--embed", "8", "--requests", "2",
                          "--warmup", "0", "--timeout", "100ms", "--quiet", "--json",
                          tmp_path("slow.json"), NULL};
    CHECK_INT_EQ(run_load(slow), 1);
    root = load_json(tmp_path("slow.json"));
    l = json_array_get(check_report(root, 1, &ok), 0);
    CHECK_INT_EQ(jint(json_object_get(l, "errors_by_kind"), "timeout"), 2);
    CHECK_INT_EQ(ok, 0);
    json_decref(root);
    MHD_stop_daemon(f.d);
}

/* The fake answers one request per 20 ms (at most 50/s); 100/s is offered. */
TEST(open_loop_short_of_offered)
{
    fake f;
    char url[64];
    CHECK(fake_open(&f, FAKE_20MS, url, sizeof url) == 0);
    const char *args[] = {"--url", url, "--model", "x", "--rate", "25,100", "--duration",
                          "500ms", "--warmup", "0", "--max-inflight", "2", "--quiet", "--json",
                          tmp_path("short.json"), "--svg", tmp_path("short.svg"), NULL};
    CHECK_INT_EQ(run_load(args), 0); /* no limit on lateness: late is reported, not fatal */
    char *out = slurp(tmp_path("out.txt"));
    CHECK(out && strstr(out, "achieved") && strstr(out, "late: sent more than 1 ms after its"));
    CHECK_MSG(out && strstr(out, "SHORT at rate 100: achieved"), "table: %s", out ? out : "");
    free(out);
    json_t *root = load_json(tmp_path("short.json"));
    long ok;
    json_t *fast = json_array_get(check_report(root, 2, &ok), 1);
    CHECK_INT_EQ(jint(fast, "requests"), 50);
    CHECK_MSG(jnum(fast, "achieved_rps") < 70, "achieved %g req/s", jnum(fast, "achieved_rps"));
    CHECK(json_is_true(json_object_get(fast, "short_of_offered")));
    CHECK_MSG(jnum(fast, "late_fraction") > 0.5, "late fraction %g", jnum(fast, "late_fraction"));
    json_decref(root);

    char *svg = slurp(tmp_path("short.svg"));
    CHECK(svg && strstr(svg, "text-anchor=\"middle\">25</text>") &&
          strstr(svg, "text-anchor=\"middle\">100</text>")); /* ticks at the offered rates */
    CHECK(svg && !strstr(svg, "text-anchor=\"middle\">64</text>")); /* not powers of two */
    CHECK(svg && strstr(svg, "class=\"offered\"") && strstr(svg, "offered = achieved"));
    free(svg);
    check_svg(tmp_path("short.svg"));

    const char *strict[] = {"--url", url, "--model", "x", "--rate", "100", "--duration",
                            "300ms", "--warmup", "0", "--max-inflight", "2", "--quiet",
                            "--max-late-fraction", "0.2", NULL};
    CHECK_INT_EQ(run_load(strict), 4);
    const char *lenient[] = {"--url", url, "--model", "x", "--rate", "100", "--duration",
                             "300ms", "--warmup", "0", "--max-inflight", "2", "--quiet",
                             "--max-late-fraction", "1", NULL};
    CHECK_INT_EQ(run_load(lenient), 0);
    MHD_stop_daemon(f.d);
}

TEST(usage)
{
    const char *late_closed[] = {"--concurrency", "2", "--max-late-fraction", "0.1", NULL};
    CHECK_INT_EQ(run_load(late_closed), 2);
    const char *late_bad[] = {"--rate", "10", "--max-late-fraction", "1.5", NULL};
    CHECK_INT_EQ(run_load(late_bad), 2);
    const char *bad[] = {"--concurrency", "1:64", NULL};
    CHECK_INT_EQ(run_load(bad), 2);
    const char *bad2[] = {"--no-such-flag", NULL};
    CHECK_INT_EQ(run_load(bad2), 2);
    const char *help[] = {"--help", NULL};
    CHECK_INT_EQ(run_load(help), 0);
    char *out = slurp(tmp_path("out.txt"));
    CHECK(out && strstr(out, "--concurrency") && strstr(out, "examples"));
    CHECK(out && strstr(out, "--max-late-fraction") && strstr(out, "is late when sent more"));
    CHECK(out && !strstr(out, "work"));
    free(out);
}

TEST(real_attnd)
{
    attnd_proc p;
    int started = attnd_proc_start(&p, NULL) == 0;
    CHECK_MSG(started, "attnd did not start (ATTND_BIN=%s)", getenv("ATTND_BIN") ? getenv("ATTND_BIN") : "");
    if (!started) return;
    const char *args[] = {"--url", p.base_url, "--model", "demo", "--concurrency", "1,4",
                          "--duration", "1s", "--warmup", "200ms", "--seq-len", "8:32",
                          "--json", tmp_path("real.json"), "--csv", tmp_path("real.csv"),
                          "--svg", tmp_path("real.svg"), "--max-error-rate", "0", NULL};
    CHECK_INT_EQ(run_load(args), 0);
    json_t *root = load_json(tmp_path("real.json"));
    long ok;
    json_t *levels = check_report(root, 2, &ok);
    for (size_t i = 0; i < json_array_size(levels); i++) {
        json_t *l = json_array_get(levels, i);
        CHECK_NEAR(jnum(l, "concurrency"), i ? 4 : 1, 0);
        CHECK_INT_EQ(jint(l, "errors"), 0);
        CHECK(jint(l, "ok") > 0);
        CHECK(jnum(l, "mean_batch_size") >= 1); /* the daemon reports timing */
        CHECK_MSG(jint(l, "connects") <= (i ? 4 : 1), "attnd closed keep-alive connections: %ld new",
                  jint(l, "connects"));
    }
    CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(json_object_get(root, "params"), "model_dims"), "embed_q")), 64);
    json_decref(root);
    char *out = slurp(tmp_path("out.txt"));
    CHECK(out && strstr(out, "concurrency") && strstr(out, "p99 ms"));
    free(out);
    check_svg(tmp_path("real.svg"));

    /* KServe v2 with binary tensors both ways: every answer's header length, shapes and
     * binary_data_size checked by attnd-load; timing read from the response's parameters. */
    const char *v2[] = {"--url", p.base_url, "--model", "demo", "--protocol", "v2", "--binary",
                        "--batch", "3", "--seq-len", "4:24", "--cross", "--key-len", "2:9",
                        "--need-weights", "--key-padding", "0.25", "--causal",
                        "--concurrency", "4", "--requests", "60", "--warmup", "0",
                        "--json", tmp_path("real_v2.json"), "--max-error-rate", "0", NULL};
    CHECK_INT_EQ(run_load(v2), 0);
    root = load_json(tmp_path("real_v2.json"));
    levels = check_report(root, 1, &ok);
    json_t *l = json_array_get(levels, 0);
    CHECK_INT_EQ(jint(l, "errors"), 0);
    CHECK_INT_EQ(jint(l, "ok"), 60);
    CHECK(jnum(l, "mean_batch_size") >= 1);
    CHECK(jnum(l, "tokens_per_s") >= 3 * 4 * jnum(l, "rps")); /* B = 3 sequences of T >= 4 */
    json_t *params = json_object_get(root, "params");
    CHECK_STR_EQ(json_string_value(json_object_get(params, "protocol")), "v2");
    CHECK(json_is_true(json_object_get(params, "binary")));
    json_decref(root);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

static void cleanup(void)
{
    const char *names[] = {"out.txt", "good.json", "good.csv", "good.svg", "bad.json",
                           "gone.json", "rate.json", "rate.csv", "rate.svg", "slow.json", "short.json", "short.svg", "real.json", "real.csv", "real.svg", "real_v2.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) unlink(tmp_path(names[i]));
    rmdir(tmpdir);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_load.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    RUN(usage);
    RUN(fake_good);
    RUN(fake_bad);
    RUN(open_loop_and_timeout);
    RUN(open_loop_short_of_offered);
    RUN(real_attnd);
    cleanup();
    return check_summary();
}
