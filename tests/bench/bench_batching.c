/* bench_batching.c — what cross-client batching buys: requests/s and p50/p99
 * latency at concurrency 1, 8 and 64, for small (T=32, demo model E=64) and
 * medium (T=128, E=256, a model written here) self-attention requests, with
 * batching on with a 1 ms wait for batches to fill, on with no wait (the
 * daemon's default), and off (--max-batch-requests 1), side by side with the
 * throughput ratios against off.
 *
 * A deliberately simple closed-loop libcurl-multi client: `conc` transfers in
 * flight, each re-sent as soon as it completes, for a fixed time per cell
 * after a short warm-up. The full load generator is attnd-load.
 *
 * Then a sweep: layer width E = 64, 256, 1024, 2048 (head_dim 64, 8 heads at
 * E = 64) and query length T = 1, 8, 32, 128, batching on (no delay) vs off at
 * concurrency 64, with the ratio: where cross-client batching pays, and by how
 * much (docs/performance.md's advice quotes it). Target: T = 1 on the 2048-wide layer at
 * concurrency 64 reaches >= 6x batching off.
 * Usage: bench_batching [seconds-per-cell]  (default $BENCH_SECONDS, else 2).
 * The daemon is $ATTND_BIN, else $BUILD/attnd, else build/attnd.
 */
#include "benchutil.h"
#include "daemon.h"

#include <curl/curl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MEDIUM_E 256
#define MEDIUM_HEADS 8
#define N_BODIES 8
#define MAX_CONC 64

static uint64_t rng = 0x853c49e6748fea9bULL; /* bench_rng_sym state */

/* ------------------------------------------------------------ bodies */

typedef struct body {
    char *p;
    size_t len;
} body;

/* {"query": T×E numbers in [-1, 1)} */
static body make_body(int t, int e)
{
    size_t cap = (size_t)t * e * 12 + 64, len = 0;
    char *p = malloc(cap);
    len += (size_t)snprintf(p, cap, "{\"query\":[");
    for (int r = 0; r < t; r++) {
        if (r) p[len++] = ',';
        p[len++] = '[';
        for (int c = 0; c < e; c++)
            len += (size_t)snprintf(p + len, cap - len, "%s%.5f", c ? "," : "", bench_rng_sym(&rng));
        p[len++] = ']';
    }
    len += (size_t)snprintf(p + len, cap - len, "]}");
    return (body){ p, len };
}

/* ------------------------------------------------------------ closed-loop client */

typedef struct slot {
    CURL *h;
    int64_t start_ns;
    long errors;
} slot;

typedef struct cell {
    double rps, p50_ms, p99_ms;
    long done, errors;
} cell;

static size_t discard(char *d, size_t s, size_t n, void *u)
{
    (void)d;
    (void)u;
    return s * n;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void slot_send(CURLM *m, slot *s, const char *url, const body *b,
                      struct curl_slist *hdrs)
{
    curl_easy_setopt(s->h, CURLOPT_URL, url);
    curl_easy_setopt(s->h, CURLOPT_POSTFIELDS, b->p);
    curl_easy_setopt(s->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)b->len);
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(s->h, CURLOPT_PRIVATE, s);
    s->start_ns = bench_now_ns();
    curl_multi_add_handle(m, s->h);
}

/* Keeps conc requests in flight for `seconds`, then lets them finish. Latency
 * percentiles and throughput count 200 answers only; anything else is an error. */
static cell run_cell(const char *url, const body *bodies, int conc, double seconds)
{
    CURLM *m = curl_multi_init();
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)conc);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    hdrs = curl_slist_append(hdrs, "Expect:");
    slot slots[MAX_CONC];
    size_t cap = 4096, n = 0;
    int64_t *lat = malloc(cap * sizeof *lat);
    long errors = 0, sent = 0;
    int64_t t0 = bench_now_ns(), end = t0 + (int64_t)(seconds * 1e9), last = t0;
    for (int i = 0; i < conc; i++) {
        slots[i].h = curl_easy_init();
        slot_send(m, &slots[i], url, &bodies[sent++ % N_BODIES], hdrs);
    }
    int running = conc;
    while (running > 0) {
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE) continue;
            slot *s;
            long status = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
            int64_t t = bench_now_ns();
            curl_multi_remove_handle(m, s->h);
            if (msg->data.result == CURLE_OK && status == 200) {
                if (n == cap) lat = realloc(lat, (cap *= 2) * sizeof *lat);
                lat[n++] = t - s->start_ns;
                last = t;
            } else {
                errors++;
            }
            if (t < end) {
                slot_send(m, s, url, &bodies[sent++ % N_BODIES], hdrs);
                running++;
            }
        }
        if (running > 0) curl_multi_poll(m, NULL, 0, 50, NULL);
    }
    for (int i = 0; i < conc; i++) curl_easy_cleanup(slots[i].h);
    curl_slist_free_all(hdrs);
    curl_multi_cleanup(m);

    cell c = { .done = (long)n, .errors = errors };
    if (n > 0) {
        qsort(lat, n, sizeof *lat, cmp_i64);
        c.rps = (double)n / ((double)(last - t0) / 1e9);
        c.p50_ms = (double)lat[(n - 1) / 2] / 1e6;
        c.p99_ms = (double)lat[(size_t)((double)(n - 1) * 0.99)] / 1e6;
    }
    free(lat);
    return c;
}

/* ------------------------------------------------------------ main */

enum { N_SIZES = 2, N_CONCS = 3, N_MODES = 3 };
static const int concs[N_CONCS] = { 1, 8, 64 };
static const char *size_names[N_SIZES] = { "small", "medium" };
static const char *size_desc[N_SIZES] = { "T=32  E=64 ", "T=128 E=256" };

/* The daemon settings compared; everything not named is attnd's default
 * (2 workers, 8192 tokens, no queue delay, queue 256). */
typedef struct mode {
    const char *title;
    const char *max_batch_requests;
    const char *delay_us; /* NULL: the default (0) */
} mode;
static const mode modes[N_MODES] = {
    { "on (16 req, 1 ms)", "16", "1000" },
    { "on, no delay", "16", NULL },
    { "off (1 req)", "1", NULL },
};

/* Starts attnd with both models, in mode m. */
static int start_mode(const char *model_path, const mode *m, attnd_proc *p)
{
    char medium_arg[600], demo_arg[600];
    const char *demo = getenv("ATTND_DEMO_MODEL");
    snprintf(medium_arg, sizeof medium_arg, "medium=%s,heads=%d", model_path, MEDIUM_HEADS);
    snprintf(demo_arg, sizeof demo_arg, "demo=%s", demo ? demo : "config/demo.safetensors");
    const char *args[] = { "--model", demo_arg, "--model", medium_arg, "--log-level", "warn",
                           "--max-batch-requests", m->max_batch_requests,
                           m->delay_us ? "--max-queue-delay-us" : NULL, m->delay_us, NULL };
    return attnd_proc_start(p, args);
}

/* All daemons run at once (idle ones sleep on condition variables), and each
 * cell is measured for every mode back to back, so slow drifts in the
 * machine's background load hit the modes alike. */
static void measure_all(attnd_proc procs[N_MODES], body bodies[N_SIZES][N_BODIES],
                        double seconds, cell res[N_MODES][N_SIZES][N_CONCS])
{
    for (int s = 0; s < N_SIZES; s++) {
        char url[N_MODES][200];
        for (int m = 0; m < N_MODES; m++) {
            snprintf(url[m], sizeof url[m], "%s/v1/models/%s/attention", procs[m].base_url,
                     s == 0 ? "demo" : "medium");
            run_cell(url[m], bodies[s], 8, 0.2); /* warm-up: connections, workspaces */
        }
        for (int c = 0; c < N_CONCS; c++)
            for (int m = 0; m < N_MODES; m++)
                res[m][s][c] = run_cell(url[m], bodies[s], concs[c], seconds);
    }
}

static int print_table(double seconds, cell res[N_MODES][N_SIZES][N_CONCS])
{
    int rc = 0;
    printf("closed loop, %.1f s per cell, self-attention, JSON over HTTP/1.1 keep-alive\n", seconds);
    printf("%-6s %-11s %4s", "", "", "");
    for (int m = 0; m < N_MODES; m++) printf(" | %-26s", modes[m].title);
    printf(" | %s\n", "ratio req/s vs off");
    printf("%-6s %-11s %4s", "size", "shape", "conc");
    for (int m = 0; m < N_MODES; m++) printf(" | %8s %8s %8s", "req/s", "p50 ms", "p99 ms");
    printf(" | %8s %8s\n", "on", "no delay");
    for (int s = 0; s < N_SIZES; s++)
        for (int c = 0; c < N_CONCS; c++) {
            printf("%-6s %-11s %4d", size_names[s], size_desc[s], concs[c]);
            for (int m = 0; m < N_MODES; m++) {
                cell x = res[m][s][c];
                printf(" | %8.0f %8.2f %8.2f", x.rps, x.p50_ms, x.p99_ms);
                if (x.done == 0 || x.errors) rc = 1;
            }
            double off = res[N_MODES - 1][s][c].rps;
            printf(" | %8.2f %8.2f\n", off > 0 ? res[0][s][c].rps / off : 0.0,
                   off > 0 ? res[1][s][c].rps / off : 0.0);
            for (int m = 0; m < N_MODES; m++)
                if (res[m][s][c].errors)
                    printf("       (%s: %ld failed requests)\n", modes[m].title, res[m][s][c].errors);
        }
    return rc;
}

/* ------------------------------------------------------------ width x T sweep */

enum { N_WIDTHS = 4, N_TS = 4, SWEEP_CONC = 64 };
static const int widths[N_WIDTHS] = { 64, 256, 1024, 2048 };
static const int ts[N_TS] = { 1, 8, 32, 128 };

/* Starts attnd serving a written E-wide layer as "w", batching on (16) or off (1). */
static int start_sweep(const char *path, int e, int on, attnd_proc *p)
{
    char arg[600];
    snprintf(arg, sizeof arg, "w=%s,heads=%d", path, e >= 512 ? e / 64 : e / 32 ? e / 32 : 1);
    const char *args[] = { "--model", arg, "--log-level", "warn", "--max-batch-requests",
                           on ? "16" : "1", NULL };
    return attnd_proc_start(p, args);
}

static int sweep(double seconds)
{
    int rc = 0;
    double ratio_target = 0;
    printf("\nsweep: batching on (16, no delay) vs off (1), concurrency %d, %.1f s per cell\n",
           SWEEP_CONC, seconds);
    printf("%6s %5s | %9s %9s | %6s\n", "E", "T", "on req/s", "off req/s", "ratio");
    for (int w = 0; w < N_WIDTHS && rc == 0; w++) {
        int e = widths[w];
        char path[] = "/tmp/attnd-bench-sweep-XXXXXX";
        int fd = mkstemp(path);
        if (fd >= 0) close(fd);
        int heads = e >= 512 ? e / 64 : e / 32 ? e / 32 : 1;
        if (fd < 0 || bench_write_mha_model(path, e, heads, &rng) != 0) {
            fprintf(stderr, "bench_batching: cannot write %s\n", path);
            return 1;
        }
        attnd_proc on, off;
        if (start_sweep(path, e, 1, &on) != 0) {
            unlink(path);
            return 1;
        }
        if (start_sweep(path, e, 0, &off) != 0) {
            attnd_proc_stop(&on);
            unlink(path);
            return 1;
        }
        char url_on[200], url_off[200];
        snprintf(url_on, sizeof url_on, "%s/v1/models/w/attention", on.base_url);
        snprintf(url_off, sizeof url_off, "%s/v1/models/w/attention", off.base_url);
        for (int k = 0; k < N_TS; k++) {
            body b[N_BODIES];
            for (int i = 0; i < N_BODIES; i++)
                b[i] = make_body(ts[k], e);
            run_cell(url_on, b, 8, 0.2);
            run_cell(url_off, b, 8, 0.2);
            cell x = run_cell(url_on, b, SWEEP_CONC, seconds);
            cell y = run_cell(url_off, b, SWEEP_CONC, seconds);
            double r = y.rps > 0 ? x.rps / y.rps : 0;
            printf("%6d %5d | %9.0f %9.0f | %5.2fx\n", e, ts[k], x.rps, y.rps, r);
            if (x.done == 0 || y.done == 0 || x.errors || y.errors) rc = 1;
            if (e == 2048 && ts[k] == 1) ratio_target = r;
            for (int i = 0; i < N_BODIES; i++)
                free(b[i].p);
        }
        attnd_proc_stop(&on);
        attnd_proc_stop(&off);
        unlink(path);
    }
    printf("target: T=1, E=2048, concurrency %d, batching >= 6x off: %.2fx: %s\n", SWEEP_CONC,
           ratio_target, ratio_target >= 6 ? "met" : "not met");
    return rc;
}

int main(int argc, char **argv)
{
    bench_start("bench_batching");
    const char *env_s = getenv("BENCH_SECONDS"), *build = getenv("BUILD");
    double seconds = argc > 1 ? atof(argv[1]) : env_s ? atof(env_s) : 2.0;
    if (!(seconds > 0 && seconds <= 20)) {
        fprintf(stderr, "usage: %s [seconds-per-cell, 0 < s <= 20]\n", argv[0]);
        return 2;
    }
    char bin[512];
    if (getenv("ATTND_BIN") == NULL && build != NULL) {
        snprintf(bin, sizeof bin, "%s/attnd", build);
        setenv("ATTND_BIN", bin, 1);
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char model_path[] = "/tmp/attnd-bench-medium-XXXXXX";
    int fd = mkstemp(model_path);
    if (fd >= 0) close(fd);
    if (fd < 0 || bench_write_mha_model(model_path, MEDIUM_E, MEDIUM_HEADS, &rng) != 0) {
        fprintf(stderr, "bench_batching: cannot write %s\n", model_path);
        return 1;
    }
    static body bodies[N_SIZES][N_BODIES];
    for (int i = 0; i < N_BODIES; i++) {
        bodies[0][i] = make_body(32, 64);
        bodies[1][i] = make_body(128, MEDIUM_E);
    }
    static cell res[N_MODES][N_SIZES][N_CONCS];
    attnd_proc procs[N_MODES];
    int started = 0, rc = 0;
    for (; started < N_MODES; started++)
        if (start_mode(model_path, &modes[started], &procs[started]) != 0) {
            fprintf(stderr, "bench_batching: attnd did not start (%s)\n", modes[started].title);
            rc = 1;
            break;
        }
    if (rc == 0) {
        measure_all(procs, bodies, seconds, res);
        rc = print_table(seconds, res);
    }
    if (rc == 0 && !getenv("BENCH_BATCHING_NO_SWEEP"))
        rc = sweep(seconds < 1.5 ? seconds : 1.5);
    for (int m = 0; m < started; m++) attnd_proc_stop(&procs[m]);
    for (int s = 0; s < N_SIZES; s++)
        for (int i = 0; i < N_BODIES; i++) free(bodies[s][i].p);
    unlink(model_path);
    curl_global_cleanup();
    return rc;
}
