/* bench_decode_loop.c — issue 25's decode-loop targets through the daemon, on a
 * Llama-shaped E=512 layer (8 query heads, 2 KV heads, d=64, RoPE):
 *  1. one client interleaving K = 1, 2, 4 sequences over 4 layers (4 models of
 *     the same layer, one session per sequence and layer), one request at a time,
 *     one-row appends over 128 cached rows: median append time for K = 2 and 4
 *     against K = 1, the best median of 3 interleaved rounds each (target <=
 *     1.2x: the client never waits for itself);
 *  2. 4 and 16 decode streams (512 cached rows each, closed loop, attnd-load's
 *     engine in process) for BENCH_LOOP_SECONDS (3) alone and while a 2048-row
 *     prefill arrives every 0.5 s (--prefill-every): decode p99 with prefills
 *     against alone (target <= 2x), and the prefills' rows/s against the same
 *     prefills with nothing else running (target >= 0.8x; with the cores the
 *     daemon and the clients keep busy in each phase, /proc and getrusage, and
 *     the bound they set: cpu_bound), and the longest
 *     step with prefills against the longest alone (<= 2x: a step waits for
 *     one piece, never a whole prefill; a closed-loop stream has one step in
 *     flight, so a whole prefill delays one step per stream, too few for p99
 *     to see at 4 streams), for each
 *     --prefill-chunk-rows in BENCH_LOOP_CHUNKS (default "64,128,256,0": a
 *     smaller piece, the default, a larger one, and whole appends; "-" runs the daemon's
 *     defaults without the flag, e.g. an older attnd through ATTND_BIN), with
 *     JSON bodies and with v2 binary-tensor bodies (BENCH_LOOP_TRANSPORTS,
 *     default "json,binary"): a 2048-row JSON prefill is ~1M numbers parsed
 *     and ~1M printed on an HTTP thread, core time the loop then lacks on a
 *     2-core machine; binary bodies take that cost away;
 *  2b. the same 4 and 16 binary streams while a 2048-row causal ONE-SHOT
 *     (v2 binary infer, no session) arrives every 0.5 s: the loop computes a
 *     long causal one-shot in pieces too (its keys and values kept with the
 *     request), so the same three targets apply; with chunk 0 it runs whole
 *     on a worker of its own beside the loop (BENCH_LOOP_ONESHOT=0 skips 2b);
 *  3. stateless requests beside the loop: one client's T=32 causal requests
 *     alone and while 16 streams decode, and the streams' p50 with and without
 *     them (how the two share the cores; no target).
 * Every target is printed with its value and met / not met (bench_target).
 */
#include "benchutil.h"
#include "daemon.h"
#include "load_args.h"
#include "load_reqgen.h"
#include "load_session.h"

#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define E 512
#define H 8
#define G 2
#define D 64
#define LAYERS 4

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------ the cores' share */

/* CPU seconds used so far by the daemon (its /proc stat: every thread) and by
 * this process (the clients, attnd-load's engine among them): both run on the
 * machine's cores. -1 when the daemon's cannot be read. */
static double cpu_seconds(pid_t daemon)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)daemon);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return -1;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK) + (double)ru.ru_utime.tv_sec +
           ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

/* Cores the daemon and the clients kept busy between start() and cores(). */
typedef struct meter {
    pid_t pid;
    double cpu, wall;
} meter;

static meter meter_start(pid_t pid) { return (meter){pid, cpu_seconds(pid), now_s()}; }

static double cores(const meter *m)
{
    const double cpu = cpu_seconds(m->pid), wall = now_s() - m->wall;
    return cpu >= 0 && m->cpu >= 0 && wall > 0 ? (cpu - m->cpu) / wall : -1;
}

/* The prefills' rows/s beside the streams against alone can be at most the
 * cores the streams leave them over the cores the prefills use alone: with
 * the streams at half their rate (p99 <= 2x lets a closed-loop stream slow
 * about that much) they still keep half the cores they keep alone. The
 * clients count: they share the machine. -1 when unmeasured. */
static double cpu_bound(double prefill_cores, double stream_cores)
{
    const double ncpu = (double)sysconf(_SC_NPROCESSORS_ONLN), left = ncpu - stream_cores / 2;
    if (prefill_cores <= 0 || stream_cores < 0) return -1;
    return left >= prefill_cores ? 1.0 : left / prefill_cores;
}

static double env_double(const char *name, double dflt)
{
    const char *v = getenv(name);
    return v && atof(v) > 0 ? atof(v) : dflt;
}

/* ------------------------------------------------------------ a keep-alive client */

typedef struct client {
    CURL *c;
    struct curl_slist *h;
    char *buf;
    size_t len, cap;
} client;

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
    client *c = ud;
    size_t k = sz * n;
    if (c->len + k + 1 > c->cap) {
        size_t cap = (c->len + k + 1) * 2;
        char *b = realloc(c->buf, cap);
        if (!b) return 0;
        c->buf = b;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, p, k);
    c->len += k;
    c->buf[c->len] = 0;
    return k;
}

static void client_init(client *c)
{
    memset(c, 0, sizeof *c);
    c->c = curl_easy_init();
    c->h = curl_slist_append(NULL, "Content-Type: application/json");
    c->h = curl_slist_append(c->h, "Expect:");
    curl_easy_setopt(c->c, CURLOPT_HTTPHEADER, c->h);
    curl_easy_setopt(c->c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c->c, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c->c, CURLOPT_TIMEOUT, 300L);
}

static void client_free(client *c)
{
    curl_easy_cleanup(c->c);
    curl_slist_free_all(c->h);
    free(c->buf);
}

/* The request set up on c, sent; its status (0 on a transport error). */
static long perform(client *c)
{
    long st = 0;
    if (curl_easy_perform(c->c) == CURLE_OK) curl_easy_getinfo(c->c, CURLINFO_RESPONSE_CODE, &st);
    return st;
}

/* One request; returns the status (0 on a transport error). */
static long client_do(client *c, const char *method, const char *url, const char *body)
{
    c->len = 0;
    curl_easy_setopt(c->c, CURLOPT_URL, url);
    curl_easy_setopt(c->c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c->c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c->c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    } else {
        curl_easy_setopt(c->c, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(c->c, CURLOPT_CUSTOMREQUEST, method);
    }
    return perform(c);
}

/* One v2 binary-tensor POST of len bytes whose first header_len are its JSON
 * header; returns the status (0 on a transport error). */
static long client_post_binary(client *c, const char *url, const char *body, size_t len, size_t header_len)
{
    char ihcl[80];
    snprintf(ihcl, sizeof ihcl, "Inference-Header-Content-Length: %zu", header_len);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/octet-stream");
    h = curl_slist_append(h, ihcl);
    h = curl_slist_append(h, "Expect:");
    c->len = 0;
    curl_easy_setopt(c->c, CURLOPT_URL, url);
    curl_easy_setopt(c->c, CURLOPT_CUSTOMREQUEST, "POST");
    curl_easy_setopt(c->c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c->c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c->c, CURLOPT_POSTFIELDSIZE, (long)len);
    const long st = perform(c);
    curl_easy_setopt(c->c, CURLOPT_HTTPHEADER, c->h);
    curl_slist_free_all(h);
    return st;
}

/* {"query":[[...] x rows]} of random values. */
static char *rows_body(uint64_t *rng, int rows)
{
    size_t cap = (size_t)rows * E * 12 + 32, n = 0;
    char *b = malloc(cap);
    n += (size_t)snprintf(b + n, cap - n, "{\"query\":[");
    for (int i = 0; i < rows; i++) {
        b[n++] = i ? ',' : '[';
        if (i) b[n++] = '[';
        for (int j = 0; j < E; j++) {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            n += (size_t)snprintf(b + n, cap - n, "%s%.4f", j ? "," : "", (double)(*rng % 2001) / 1000.0 - 1.0);
        }
        b[n++] = ']';
    }
    snprintf(b + n, cap - n, "]}");
    return b;
}

/* Creates a session of model into id (cap bytes); 0 or -1. */
static int create(client *c, const char *base, const char *model, char *id, size_t cap)
{
    char url[2048];
    snprintf(url, sizeof url, "%s/v1/models/%s/sessions", base, model);
    if (client_do(c, "POST", url, "{}") != 201) return -1;
    const char *p = c->buf ? strstr(c->buf, "\"id\":\"") : NULL;
    if (!p) return -1;
    p += 6;
    size_t n = strcspn(p, "\"");
    if (n + 1 > cap) return -1;
    memcpy(id, p, n);
    id[n] = 0;
    return 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* 1: one client, k sequences x LAYERS layers, `tokens` tokens: the median
 * one-row append in ms (-1 on failure). */
static double interleaved_median(const char *base, int k, int prefix, int tokens, uint64_t *rng)
{
    client c;
    client_init(&c);
    char ids[4 * LAYERS][80], url[2048];
    char *pre = rows_body(rng, prefix), *step = rows_body(rng, 1);
    int n = k * LAYERS, bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        char model[8];
        snprintf(model, sizeof model, "l%d", i % LAYERS);
        bad = create(&c, base, model, ids[i], sizeof ids[i]) != 0;
        snprintf(url, sizeof url, "%s/v1/sessions/%s/append", base, ids[i]);
        bad = bad || client_do(&c, "POST", url, pre) != 200;
    }
    double *ms = malloc((size_t)tokens * n * sizeof *ms);
    int m = 0;
    for (int t = 0; t < tokens && !bad; t++)
        for (int s = 0; s < k && !bad; s++)
            for (int l = 0; l < LAYERS && !bad; l++) { /* a decode loop: each layer of each sequence */
                snprintf(url, sizeof url, "%s/v1/sessions/%s/append", base, ids[s * LAYERS + l]);
                double t0 = now_s();
                bad = client_do(&c, "POST", url, step) != 200;
                ms[m++] = (now_s() - t0) * 1e3;
            }
    for (int i = 0; i < n; i++) {
        snprintf(url, sizeof url, "%s/v1/sessions/%s", base, ids[i]);
        client_do(&c, "DELETE", url, NULL);
    }
    qsort(ms, (size_t)m, sizeof *ms, cmp_d);
    double med = bad || !m ? -1 : ms[m / 2];
    free(ms);
    free(pre);
    free(step);
    client_free(&c);
    return med;
}

/* Prefills alone: rows/s of `count` prefills of `rows` rows, one at a time,
 * JSON or (binary) v2 binary-tensor bodies. */
static double prefill_alone(const char *base, int rows, int count, int binary, uint64_t *rng)
{
    client c;
    client_init(&c);
    unsigned long long brng = *rng;
    size_t len = 0, header_len = 0;
    char *body = binary ? load_gen_query_binary(&brng, rows, E, &len, &header_len) : rows_body(rng, rows);
    char id[80], url[2048];
    double busy = 0;
    int ok = 0;
    for (int i = 0; i < count; i++) {
        if (create(&c, base, "l0", id, sizeof id) != 0) break;
        snprintf(url, sizeof url, "%s/v1/sessions/%s/append", base, id);
        double t0 = now_s();
        long st = binary ? client_post_binary(&c, url, body, len, header_len) : client_do(&c, "POST", url, body);
        busy += now_s() - t0;
        ok += st == 200;
        snprintf(url, sizeof url, "%s/v1/sessions/%s", base, id);
        client_do(&c, "DELETE", url, NULL);
    }
    free(body);
    client_free(&c);
    return ok && busy > 0 ? ok * (double)rows / busy : -1;
}

typedef struct mix_result {
    double p50, p99, max, tokens_per_s, prefill_rows_per_s;
    long prefills, errors;
    double busy; /* the share of the wall time the loop computed decode steps' iterations */
} mix_result;

/* 2: n streams on l0 for `seconds`, with a `rows`-row prefill every `every`
 * s (0: none); every body JSON or (binary) v2 binary tensors. */
static int decode_mix(const char *url, int n, int prefix, double seconds, double every, int rows, int binary,
                      mix_result *out)
{
    char sn[16], p[16], dur[32], ev[32], pr[16], steps[16];
    snprintf(steps, sizeof steps, "%d", 16000 - prefix); /* --duration ends it first */
    snprintf(sn, sizeof sn, "%d", n);
    snprintf(p, sizeof p, "%d", prefix);
    snprintf(dur, sizeof dur, "%.3fs", seconds);
    snprintf(ev, sizeof ev, "%.3fs", every);
    snprintf(pr, sizeof pr, "%d", rows);
    char *fixed[] = {"attnd-load", "--url", (char *)url, "--model", "l0", "--sessions", sn, "--prefix", p,
                     "--steps", steps, "--duration", dur, "--embed", "512", "--quiet", "--timeout", "300s"};
    char *argv[32];
    int argc = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) argv[argc++] = fixed[i];
    if (binary) argv[argc++] = "--binary";
    if (every > 0) {
        argv[argc++] = "--prefill-every";
        argv[argc++] = ev;
        argv[argc++] = "--prefill-rows";
        argv[argc++] = pr;
    }
    argv[argc] = NULL;
    load_opts o;
    char err[512];
    if (load_opts_parse(&o, argc, argv, err, sizeof err) != 0) {
        fprintf(stderr, "bench_decode_loop: %s\n", err);
        return -1;
    }
    const load_model m = {.embed_q = E, .embed_k = E, .embed_v = E, .embed_out = E, .heads = H};
    load_sess_runner *r = load_sess_new(&o, &m, err, sizeof err);
    int rc = -1;
    if (r) {
        load_sess_stats st;
        rc = load_sess_run_level(r, n, &st, err, sizeof err) == 0 ? 0 : -1;
        *out = (mix_result){st.tpot_p50_ms, st.tpot_p99_ms, st.tpot_max_ms, st.decode_tokens_per_s,
                            st.mix_prefill_rows_per_s, (long)st.n_ttft, st.errors,
                            /* iterations/s (steps/s over steps per iteration) x each one's compute */
                            st.mean_batch > 0 ? st.decode_tokens_per_s / st.mean_batch * st.compute_ms / 1e3 : 0};
        if (st.errors) fprintf(stderr, "bench_decode_loop: %s\n", st.first_error);
        load_sess_stats_free(&st);
    }
    if (rc) fprintf(stderr, "bench_decode_loop: %s\n", err);
    load_sess_free(r);
    load_opts_free(&o);
    return rc;
}

/* 3: stateless requests beside the loop: one client sends T=32 causal one-shot
 * requests to l0, one at a time, until *stop; their latencies (ms). */
typedef struct oneshot_arg {
    const char *base;
    volatile int stop;
    double ms[20000];
    int n;
} oneshot_arg;

static void *oneshot_main(void *v)
{
    oneshot_arg *a = v;
    client c;
    client_init(&c);
    uint64_t rng = 99;
    char *body = rows_body(&rng, 32), url[2048];
    body[strlen(body) - 1] = 0; /* drop the closing brace: add is_causal */
    char *full = malloc(strlen(body) + 32);
    sprintf(full, "%s,\"is_causal\":true}", body);
    snprintf(url, sizeof url, "%s/v1/models/l0/attention", a->base);
    while (!a->stop && a->n < 20000) {
        double t0 = now_s();
        if (client_do(&c, "POST", url, full) != 200) break;
        a->ms[a->n++] = (now_s() - t0) * 1e3;
    }
    free(full);
    free(body);
    client_free(&c);
    return NULL;
}

static double median_of(double *v, int n)
{
    if (n == 0) return -1;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

/* One-shot median alone, then beside 16 decode streams, and the streams' p50 with them. */
static int sharing(const char *base, double seconds)
{
    static oneshot_arg a;
    memset(&a, 0, sizeof a);
    a.base = base;
    pthread_t th;
    pthread_create(&th, NULL, oneshot_main, &a);
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    a.stop = 1;
    pthread_join(th, NULL);
    double alone = median_of(a.ms, a.n);
    int n_alone = a.n;
    mix_result d = {0}, b = {0};
    if (decode_mix(base, 16, 512, seconds, 0, 0, 0, &d) != 0) return -1;
    memset(&a, 0, sizeof a);
    a.base = base;
    pthread_create(&th, NULL, oneshot_main, &a);
    int rc = decode_mix(base, 16, 512, seconds, 0, 0, 0, &b);
    a.stop = 1;
    pthread_join(th, NULL);
    double beside = median_of(a.ms, a.n);
    printf("stateless T=32 requests, one client: median %.2f ms alone (%d), %.2f ms beside 16 decode streams "
           "(%d); the streams' p50 %.2f ms / %.0f tok/s alone, %.2f ms / %.0f tok/s beside them\n",
           alone, n_alone, beside, a.n, d.p50, d.tokens_per_s, b.p50, b.tokens_per_s);
    return rc;
}

/* 2b: causal one-shot prefills (v2 binary infer, no session) of `rows` rows,
 * one every `every` s until *stop (or `count` of them when count > 0, back
 * to back); their rows/s over the time they took. */
typedef struct oneshot_prefills {
    const char *base;
    const load_req *req; /* the v2 binary infer each prefill posts (oneshot_request) */
    int rows, count;
    double every;
    volatile int stop;
    int ok, failed;
    double busy_s;
} oneshot_prefills;

/* One causal v2 binary infer of `rows` rows for l0 into *pool (attnd-load's
 * request generator: --protocol v2 --binary --causal). 0, or -1 (said why). */
static int oneshot_request(const char *base, int rows, load_pool *pool)
{
    char t[16];
    snprintf(t, sizeof t, "%d", rows);
    char *argv[] = {"attnd-load", "--url", (char *)base, "--model", "l0", "--protocol", "v2", "--binary",
                    "--causal", "--seq-len", t, "--pool", "1", "--embed", "512", NULL};
    load_opts o;
    char err[512];
    int rc = load_opts_parse(&o, (int)(sizeof argv / sizeof *argv) - 1, argv, err, sizeof err);
    const load_model m = {.embed_q = E, .embed_k = E, .embed_v = E, .embed_out = E, .heads = H};
    if (rc == 0) rc = load_pool_build(pool, &o, &m, err, sizeof err);
    load_opts_free(&o); /* the pool owns its bodies */
    if (rc != 0) fprintf(stderr, "bench_decode_loop: one-shot request: %s\n", err);
    return rc;
}

static void *oneshot_prefill_main(void *v)
{
    oneshot_prefills *a = v;
    const load_req *req = a->req;
    client c;
    client_init(&c);
    char url[2048];
    snprintf(url, sizeof url, "%s/v2/models/l0/infer", a->base);
    double next = now_s();
    for (int i = 0; !a->stop && (a->count <= 0 || i < a->count); i++) {
        while (a->count <= 0 && !a->stop && now_s() < next) {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
        if (a->stop) break;
        next += a->every;
        double t0 = now_s();
        long st = client_post_binary(&c, url, req->body, req->len, req->v2.header_len);
        a->busy_s += now_s() - t0;
        if (st == 200) a->ok++;
        else a->failed++;
    }
    client_free(&c);
    return NULL;
}

static double oneshot_rows_per_s(const oneshot_prefills *a)
{
    return a->ok && a->busy_s > 0 ? a->ok * (double)a->rows / a->busy_s : -1;
}

/* 2b for one piece size: 4 and 16 binary decode streams alone and while a
 * 2048-row causal one-shot arrives every 0.5 s, against the one-shots alone.
 * Returns the number of failed runs. */
static int oneshot_targets(const char *base, pid_t pid, const char *chunk, double seconds)
{
    /* built here, before any thread: attnd-load's option parser is getopt's,
     * whose state is global (decode_mix parses beside the prefill thread) */
    static load_pool pool;
    memset(&pool, 0, sizeof pool);
    if (oneshot_request(base, 2048, &pool) != 0) return 1;
    static oneshot_prefills alone;
    alone = (oneshot_prefills){.base = base, .req = &pool.reqs[0], .rows = 2048, .count = 6};
    meter mp = meter_start(pid);
    oneshot_prefill_main(&alone);
    const double alone_rps = oneshot_rows_per_s(&alone), prefill_cores = cores(&mp);
    printf("causal one-shots of 2048 rows (v2 binary) alone: %.0f rows/s, %.2f cores busy\n", alone_rps,
           prefill_cores);
    int failures = alone.failed > 0;
    for (int n = 4; n <= 16; n *= 4) {
        mix_result a = {0}, b = {0};
        static oneshot_prefills mix;
        mix = (oneshot_prefills){.base = base, .req = &pool.reqs[0], .rows = 2048, .every = 0.5};
        meter ms = meter_start(pid);
        const int ra = decode_mix(base, n, 512, seconds, 0, 0, 1, &a);
        const double bound = cpu_bound(prefill_cores, cores(&ms));
        if (ra != 0 || a.errors) {
            failures++;
            continue;
        }
        pthread_t th;
        pthread_create(&th, NULL, oneshot_prefill_main, &mix);
        int rc = decode_mix(base, n, 512, seconds, 0, 0, 1, &b);
        mix.stop = 1;
        pthread_join(th, NULL);
        if (rc != 0 || b.errors || mix.failed) {
            failures++;
            continue;
        }
        const double rps = oneshot_rows_per_s(&mix);
        printf("%2d streams (512 cached, binary): alone p50 %.2f p99 %.2f max %.2f ms, loop busy %.0f%% | with a "
               "2048-row causal one-shot every 0.5 s: p50 %.2f p99 %.2f max %.2f ms, %d one-shots at %.0f rows/s\n",
               n, a.p50, a.p99, a.max, 100 * a.busy, b.p50, b.p99, b.max, mix.ok, rps);
        char t[160], m[96];
        const double pr = a.p99 > 0 ? b.p99 / a.p99 : 0, mr = a.max > 0 ? b.max / a.max : 0,
                     tr = alone_rps > 0 ? rps / alone_rps : 0;
        snprintf(t, sizeof t, "decode loop: %d streams, chunk %s, one-shot prefills: p99 <= 2x alone", n, chunk);
        snprintf(m, sizeof m, "%.2fx (%.2f / %.2f ms)", pr, b.p99, a.p99);
        bench_target(t, m, pr > 0 && pr <= 2);
        snprintf(t, sizeof t, "decode loop: %d streams, chunk %s, one-shot prefills: longest step <= 2x alone", n,
                 chunk);
        snprintf(m, sizeof m, "%.2fx (%.2f / %.2f ms)", mr, b.max, a.max);
        bench_target(t, m, mr > 0 && mr <= 2);
        snprintf(t, sizeof t, "decode loop: %d streams, chunk %s, one-shot prefill rows/s >= 0.8x alone", n, chunk);
        snprintf(m, sizeof m, "%.2fx (%.0f / %.0f rows/s; the cores' bound %.2fx)", tr, rps, alone_rps, bound);
        bench_target(t, m, tr >= 0.8);
    }
    load_pool_free(&pool);
    return failures;
}

/* 2 for one piece size and transport: 4 and 16 streams alone and with
 * prefills arriving, against the prefills alone; the targets printed. Returns
 * the number of failed runs. */
static int mix_targets(const char *base, pid_t pid, const char *chunk, int binary, double seconds,
                       uint64_t *rng)
{
    const char *how = binary ? "binary" : "JSON";
    int failures = 0;
    meter mp = meter_start(pid);
    double alone_rps = prefill_alone(base, 2048, 6, binary, rng);
    const double prefill_cores = cores(&mp);
    printf("%s bodies: prefills of 2048 rows alone: %.0f rows/s, %.2f cores busy (daemon and client)\n", how,
           alone_rps, prefill_cores);
    for (int n = 4; n <= 16; n *= 4) {
        mix_result a = {0}, b = {0};
        meter ms = meter_start(pid);
        const int ra = decode_mix(base, n, 512, seconds, 0, 0, binary, &a);
        const double stream_cores = cores(&ms), bound = cpu_bound(prefill_cores, stream_cores);
        if (ra != 0 || decode_mix(base, n, 512, seconds, 0.5, 2048, binary, &b) != 0 || a.errors || b.errors) {
            failures++;
            continue;
        }
        /* A closed-loop stream has one step in flight, so a prefill holding the loop delays one
         * step per stream: few enough (one in ~100 at 16 streams, fewer at 4) that p99 can miss
         * it. The longest step shows the stall itself. */
        printf("%2d streams (512 cached, %s): alone p50 %.2f p99 %.2f max %.2f ms %.0f tok/s, loop busy %.0f%%, "
               "%.2f cores busy | with a 2048-row prefill every 0.5 s: p50 %.2f p99 %.2f max %.2f ms %.0f tok/s, "
               "%ld prefills at %.0f rows/s\n",
               n, how, a.p50, a.p99, a.max, a.tokens_per_s, 100 * a.busy, stream_cores, b.p50, b.p99, b.max,
               b.tokens_per_s, b.prefills, b.prefill_rows_per_s);
        char t[160], m[96];
        double pr = a.p99 > 0 ? b.p99 / a.p99 : 0, tr = alone_rps > 0 ? b.prefill_rows_per_s / alone_rps : 0;
        snprintf(t, sizeof t, "decode loop: %d streams, chunk %s, %s: p99 with prefills <= 2x alone", n, chunk, how);
        snprintf(m, sizeof m, "%.2fx (%.2f / %.2f ms)", pr, b.p99, a.p99);
        bench_target(t, m, pr > 0 && pr <= 2);
        const double mr = a.max > 0 ? b.max / a.max : 0;
        snprintf(t, sizeof t, "decode loop: %d streams, chunk %s, %s: longest step with prefills <= 2x alone", n,
                 chunk, how);
        snprintf(m, sizeof m, "%.2fx (%.2f / %.2f ms)", mr, b.max, a.max);
        bench_target(t, m, mr > 0 && mr <= 2);
        snprintf(t, sizeof t, "decode loop: %d streams, chunk %s, %s: prefill rows/s >= 0.8x alone", n, chunk,
                 how);
        snprintf(m, sizeof m, "%.2fx (%.0f / %.0f rows/s; the cores' bound %.2fx)", tr, b.prefill_rows_per_s,
                 alone_rps, bound);
        bench_target(t, m, tr >= 0.8);
    }
    return failures;
}

static int start(attnd_proc *proc, const char *dir, const char *chunk)
{
    char spec[LAYERS][600];
    const char *args[2 * LAYERS + 16];
    int n = 0;
    for (int l = 0; l < LAYERS; l++) {
        snprintf(spec[l], sizeof spec[l], "l%d=%s,layer=0", l, dir);
        args[n++] = "--model";
        args[n++] = spec[l];
    }
    const char *fixed[] = {"--max-seq-len", "16384", "--kv-cache-bytes", "1G", "--max-body-bytes", "256M",
                           "--log-level", "warn", NULL};
    if (strcmp(chunk, "-") != 0) { /* "-": the daemon's defaults (also an attnd without the flag) */
        args[n++] = "--prefill-chunk-rows";
        args[n++] = chunk;
    }
    for (int i = 0; fixed[i]; i++) args[n++] = fixed[i];
    args[n] = NULL;
    return attnd_proc_start(proc, args);
}

int main(void)
{
    const double seconds = env_double("BENCH_LOOP_SECONDS", 3);
    const char *chunks = getenv("BENCH_LOOP_CHUNKS") ? getenv("BENCH_LOOP_CHUNKS") : "64,128,256,0";
    const char *transports = getenv("BENCH_LOOP_TRANSPORTS") ? getenv("BENCH_LOOP_TRANSPORTS") : "json,binary";
    bench_start("bench_decode_loop");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char dir[] = "/tmp/attnd-bench-loop-XXXXXX";
    uint64_t rng = 0x6c6f6f70ull;
    if (!mkdtemp(dir) || bench_write_llama_layer(dir, E, H, G, D, &rng) != 0) {
        fprintf(stderr, "bench_decode_loop: cannot write the layer in %s\n", dir);
        return 1;
    }
    printf("decode loop: Llama-shaped layer E=%d, %d heads, %d KV heads, d=%d, RoPE; %d models of it\n", E, H, G,
           D, LAYERS);
    int failures = 0;
    char m[96], chunk_list[128];
    snprintf(chunk_list, sizeof chunk_list, "%s", chunks);
    int first = 1;
    for (char *tok = strtok(chunk_list, ","); tok; tok = strtok(NULL, ","), first = 0) {
        attnd_proc proc;
        if (start(&proc, dir, tok) != 0) {
            fprintf(stderr, "bench_decode_loop: attnd did not start\n");
            return 1;
        }
        printf("\n--prefill-chunk-rows %s\n", tok);
        if (first) { /* 1: the interleaved client (chunking plays no part: one-row appends) */
            double med[3] = {-1, -1, -1};
            const int ks[3] = {1, 2, 4};
            for (int round = 0; round < 3; round++) /* interleaved rounds, best median of each */
                for (int i = 0; i < 3; i++) {
                    const double m1 = interleaved_median(proc.base_url, ks[i], 128, 64, &rng);
                    failures += m1 < 0;
                    if (m1 >= 0 && (med[i] < 0 || m1 < med[i])) med[i] = m1;
                }
            for (int i = 0; i < 3; i++)
                printf("one client, %d sequence(s) x %d layers, one request at a time: median append %.3f ms "
                       "(best of 3 interleaved rounds)\n", ks[i], LAYERS, med[i]);
            double r2 = med[0] > 0 ? med[1] / med[0] : 0, r4 = med[0] > 0 ? med[2] / med[0] : 0;
            snprintf(m, sizeof m, "%.2fx (2 seq) / %.2fx (4 seq) of %.3f ms", r2, r4, med[0]);
            bench_target("decode loop: interleaved client median <= 1.2x one sequence", m,
                         r2 > 0 && r2 <= 1.2 && r4 <= 1.2);
            failures += sharing(proc.base_url, seconds) != 0;
        }
        /* 2: decode with prefills arriving vs alone; prefills alone; per transport */
        char tr_list[64];
        snprintf(tr_list, sizeof tr_list, "%s", transports);
        char *save = NULL;
        for (char *tr = strtok_r(tr_list, ",", &save); tr; tr = strtok_r(NULL, ",", &save))
            failures += mix_targets(proc.base_url, proc.pid, tok, strcmp(tr, "binary") == 0, seconds, &rng);
        if (getenv("BENCH_LOOP_ONESHOT") == NULL || atoi(getenv("BENCH_LOOP_ONESHOT")) != 0)
            failures += oneshot_targets(proc.base_url, proc.pid, tok, seconds);
        if (attnd_proc_stop(&proc) != 0) failures++;
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_decode_loop: could not remove %s\n", dir);
    curl_global_cleanup();
    return failures ? 1 : 0;
}
