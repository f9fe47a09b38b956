/* test_load_sessions.c — attnd-load --sessions, the real binary ($ATTND_LOAD_BIN) as a
 * subprocess:
 *   1. against the real attnd on the demo model (tests/common/daemon.h): --sessions 8 --prefix
 *      64 --steps 20 gives 8 x 20 decode tokens, 0 errors, ordered percentiles, measured prefill,
 *      server timing, and every session deleted (GET /metrics attnd_sessions back to 0); chunked
 *      prefill into windowed sessions too; JSON, CSV and SVG well formed; --interleave 4 (one
 *      client, one request at a time: every append alone) and the decode mix --prefill-every
 *      (prefills timed as TTFT, their sessions deleted);
 *   2. --duration caps the decode phase and SIGINT stops it: steps cut, sessions deleted;
 *   3. an attnd with --max-seq-len 70: the appends past it fail (413), each stream ends, and its
 *      session is still deleted;
 *   4. failing setups: an unknown model exits 3 with a message; usage errors exit 2;
 *   4b. a model group (--model llama=...,layers=all): each stream one sequence session, a step
 *      one append per layer in order, every session deleted; one-shot mode on a group refused;
 *   5. a fake server (libmicrohttpd, in this process) injecting faults: 503 + Retry-After is
 *      retried and counted, never an error; without Retry-After it is one; a wrong length, a
 *      short output and a failed delete are each counted under their phase and kind, and every
 *      created session gets its DELETE. */
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

/* ---- running attnd-load ------------------------------------------------------------------------ */

static char tmpdir[64];

static const char *tmp_path(const char *name)
{
    static char buf[8][160];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
    return p;
}

/* Starts $ATTND_LOAD_BIN with args (NULL-terminated); stdout to out.txt, stderr to err.txt. */
static pid_t spawn_load(const char *const *args)
{
    const char *bin = getenv("ATTND_LOAD_BIN") ? getenv("ATTND_LOAD_BIN") : "build/attnd-load";
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)bin;
    for (; *args && argc < 63; args++) argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(tmp_path("out.txt"), "w", stdout) || !freopen(tmp_path("err.txt"), "w", stderr))
            _exit(127);
        execv(bin, argv);
        perror(bin);
        _exit(127);
    }
    return pid;
}

/* Waits for pid up to 30 s (then SIGKILL). The exit status, or -1 if it did not exit. */
static int wait_load(pid_t pid)
{
    int st = 0;
    if (pid < 0) return -1;
    for (int waited = 0; waited < 3000; waited++) {
        if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        attnd_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    fprintf(stderr, "attnd-load did not finish in 30 s\n");
    return -1;
}

static int run_load(const char *const *args) { return wait_load(spawn_load(args)); }

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
    return s ? s : strdup("");
}

static json_t *load_json(const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK_MSG(root != NULL, "%s: %s", path, je.text);
    return root;
}

static long jint(json_t *o, const char *k) { return (long)json_integer_value(json_object_get(o, k)); }
static double jnum(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }
static long jkind(json_t *l, const char *obj, const char *k)
{
    return jint(json_object_get(l, obj), k);
}

/* The one level of a report, after the invariants every report keeps. */
static json_t *level0(json_t *root)
{
    json_t *levels = json_object_get(root, "levels"), *l = json_array_get(levels, 0);
    CHECK_INT_EQ(json_array_size(levels), 1);
    long by_kind = 0, by_phase = 0;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(l, "errors_by_kind"), k, v) by_kind += (long)json_integer_value(v);
    json_object_foreach(json_object_get(l, "errors_by_phase"), k, v) by_phase += (long)json_integer_value(v);
    CHECK_INT_EQ(by_kind, jint(l, "errors"));
    CHECK_INT_EQ(by_phase, jint(l, "errors"));
    CHECK_INT_EQ(jint(l, "ok") + jint(l, "errors"), jint(l, "requests"));
    CHECK_INT_EQ(jint(l, "deleted") + jint(l, "already_gone") + jint(l, "leaked"), jint(l, "created"));
    /* each stream completed, failed, or was cut short by --duration / SIGINT */
    CHECK(jint(l, "completed") + jint(l, "failed") <= jint(l, "sessions"));
    if (!jint(l, "steps_cut")) CHECK_INT_EQ(jint(l, "completed") + jint(l, "failed"), jint(l, "sessions"));
    if (jint(l, "decode_tokens") > 0) {
        CHECK(jnum(l, "tpot_min_ms") > 0);
        CHECK(jnum(l, "tpot_min_ms") <= jnum(l, "tpot_p50_ms"));
        CHECK(jnum(l, "tpot_p50_ms") <= jnum(l, "tpot_p90_ms"));
        CHECK(jnum(l, "tpot_p90_ms") <= jnum(l, "tpot_p99_ms"));
        CHECK(jnum(l, "tpot_p99_ms") <= jnum(l, "tpot_max_ms"));
        CHECK(jnum(l, "decode_tokens_per_s") > 0 && jnum(l, "decode_elapsed_s") > 0);
    }
    json_t *total = json_object_get(root, "total");
    CHECK_INT_EQ(jint(total, "requests"), jint(l, "requests"));
    CHECK_INT_EQ(jint(total, "errors"), jint(l, "errors"));
    return l;
}

/* attnd's gauge of live sessions, or -1. */
static long live_sessions(const attnd_proc *p)
{
    char url[128];
    http_result r;
    long n = -1;
    snprintf(url, sizeof url, "%s/metrics", p->base_url);
    if (http_do("GET", url, NULL, 0, NULL, &r) != 0) return -1;
    for (const char *s = r.body; s && (s = strstr(s, "attnd_sessions ")); s++)
        if (s == r.body || s[-1] == '\n') {
            n = strtol(s + strlen("attnd_sessions "), NULL, 10);
            break;
        }
    http_result_free(&r);
    return n;
}

static void check_svg(const char *path)
{
    char *s = slurp(path);
    CHECK_MSG(s && strstr(s, "<svg"), "no SVG at %s", path);
    if (!s) return;
    CHECK(strstr(s, "<polyline") != NULL);
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ')) n--;
    CHECK(n >= 6 && !strncmp(s + n - 6, "</svg>", 6));
    int open = 0, close = 0;
    for (const char *p = s; (p = strstr(p, "<text")); p++) open++;
    for (const char *p = s; (p = strstr(p, "</text>")); p++) close++;
    CHECK(open > 5 && open == close);
    free(s);
}

/* ---- against the real attnd --------------------------------------------------------------------- */

TEST_WITH(demo, const attnd_proc *p)
{
    const char *args[] = {"--url", p->base_url, "--model", "demo", "--sessions", "8", "--prefix",
                          "64", "--steps", "20", "--json", tmp_path("demo.json"), "--csv",
                          tmp_path("demo.csv"), "--svg", tmp_path("demo.svg"), "--max-error-rate",
                          "0", NULL};
    CHECK_INT_EQ(run_load(args), 0);
    json_t *root = load_json(tmp_path("demo.json"));
    json_t *l = level0(root);
    CHECK_INT_EQ(jint(l, "sessions"), 8);
    CHECK_INT_EQ(jint(l, "decode_tokens"), 8 * 20);
    CHECK_INT_EQ(jint(l, "errors"), 0);
    CHECK_INT_EQ(jint(l, "retries"), 0);
    CHECK_INT_EQ(jint(l, "requests"), 8 * (1 + 1 + 20 + 1)); /* create, prefill, steps, delete */
    CHECK_INT_EQ(jint(l, "created"), 8);
    CHECK_INT_EQ(jint(l, "completed"), 8);
    CHECK_INT_EQ(jint(l, "deleted"), 8);
    CHECK_INT_EQ(jint(l, "leaked") + jint(l, "already_gone") + jint(l, "steps_cut") + jint(l, "steps_lost"), 0);
    CHECK_INT_EQ(jint(l, "decoding_streams"), 8);
    CHECK_INT_EQ(jint(l, "prefilled"), 8);
    CHECK_INT_EQ(jint(l, "prefill_tokens"), 8 * 64);
    CHECK(jnum(l, "prefill_p50_ms") > 0 && jnum(l, "prefill_p50_ms") <= jnum(l, "prefill_max_ms"));
    CHECK(jnum(l, "prefill_total_s") > 0 && jnum(l, "prefill_total_s") * 1000 >= jnum(l, "prefill_max_ms") * 0.999);
    CHECK_INT_EQ(jint(l, "with_timing"), 160); /* every decode answer carried timing */
    CHECK(jnum(l, "mean_batch_size") >= 1 && jnum(l, "mean_batch_size") <= 8);
    CHECK(jnum(l, "compute_ms") > 0 && jnum(l, "queue_ms") >= 0);
    double tps = jnum(l, "decode_tokens_per_s"); /* JSON keeps 10 significant digits */
    CHECK_NEAR(jnum(l, "stream_tokens_per_s") * 8, tps, tps * 1e-8);
    CHECK_NEAR(160 / jnum(l, "decode_elapsed_s"), tps, tps * 1e-8);
    json_t *params = json_object_get(root, "params");
    CHECK_STR_EQ(json_string_value(json_object_get(params, "mode")), "sessions");
    CHECK_INT_EQ(jint(json_object_get(params, "model_dims"), "embed_q"), 64);
    json_decref(root);
    CHECK_INT_EQ(live_sessions(p), 0);

    char *out = slurp(tmp_path("out.txt"));
    CHECK(out && strstr(out, "tokens/s") && strstr(out, "tpot p50") && strstr(out, "prefill50"));
    CHECK(out && strstr(out, "sessions 8: 8 created, 8 prefilled, 8 completed, 0 failed, 8 deleted"));
    free(out);
    char *csv = slurp(tmp_path("demo.csv"));
    CHECK(csv && !strncmp(csv, "sessions,prefix,steps,", 22) && strstr(csv, "\n8,64,20,8,8,8,0,8,0,0,184,0,0,160,"));
    free(csv);
    check_svg(tmp_path("demo.svg"));

    /* Chunked prefill (16+16+16+2) into windowed sessions: each answer's length still advances
     * by exactly the rows sent while the cache holds fewer. */
    const char *chunked[] = {"--url", p->base_url, "--model", "demo", "--sessions", "3",
                             "--prefix", "50", "--prefill-chunk", "16", "--window", "24",
                             "--steps", "10", "--seed", "9", "--quiet", "--json",
                             tmp_path("chunked.json"), "--max-error-rate", "0", NULL};
    CHECK_INT_EQ(run_load(chunked), 0);
    root = load_json(tmp_path("chunked.json"));
    l = level0(root);
    CHECK_INT_EQ(jint(l, "requests"), 3 * (1 + 4 + 10 + 1));
    CHECK_INT_EQ(jint(l, "prefill_tokens"), 150);
    CHECK_INT_EQ(jint(l, "decode_tokens"), 30);
    CHECK_INT_EQ(jint(l, "errors"), 0);
    CHECK_INT_EQ(jint(l, "deleted"), 3);
    CHECK_INT_EQ(jint(json_object_get(root, "params"), "window"), 24);
    json_decref(root);
    CHECK_INT_EQ(live_sessions(p), 0);
}

/* --interleave 4: one client drives the 4 sessions one request at a time, so every decode
 * append computes alone (mean batch exactly 1). --prefill-every: while 2 streams decode, a
 * prefill client creates a session every 5 ms, appends 300 rows, deletes it; each prefill is
 * timed (TTFT) and every one of its sessions deleted too. */
TEST_WITH(decode_mix, const attnd_proc *p)
{
    const char *inter[] = {"--url", p->base_url, "--model", "demo", "--sessions", "4",
                           "--interleave", "4", "--prefix", "16", "--steps", "15", "--quiet",
                           "--json", tmp_path("inter.json"), "--max-error-rate", "0", NULL};
    CHECK_INT_EQ(run_load(inter), 0);
    json_t *root = load_json(tmp_path("inter.json"));
    json_t *l = level0(root);
    CHECK_INT_EQ(jint(l, "decode_tokens"), 4 * 15);
    CHECK_INT_EQ(jint(l, "errors"), 0);
    CHECK_INT_EQ(jint(l, "interleave"), 4);
    CHECK_INT_EQ(jint(l, "with_timing"), 60);
    CHECK_MSG(jnum(l, "mean_batch_size") == 1.0, "mean batch %g: two appends of one client overlapped",
              jnum(l, "mean_batch_size"));
    CHECK_INT_EQ(jint(json_object_get(root, "params"), "interleave"), 4);
    json_decref(root);
    CHECK_INT_EQ(live_sessions(p), 0);

    const char *mix[] = {"--url", p->base_url, "--model", "demo", "--sessions", "2", "--prefix",
                         "16", "--steps", "60", "--prefill-every", "5ms", "--prefill-rows", "300",
                         "--json", tmp_path("mix.json"), "--max-error-rate", "0", NULL};
    CHECK_INT_EQ(run_load(mix), 0);
    root = load_json(tmp_path("mix.json"));
    l = level0(root);
    long prefills = jint(l, "mix_prefills");
    printf("decode mix: %ld prefills of 300 rows, ttft p50 %.2f ms, %.0f rows/s\n", prefills,
           jnum(l, "ttft_p50_ms"), jnum(l, "mix_prefill_rows_per_s"));
    CHECK_INT_EQ(jint(l, "decode_tokens"), 2 * 60);
    CHECK_INT_EQ(jint(l, "errors"), 0);
    CHECK(prefills >= 1);
    CHECK_INT_EQ(jint(l, "mix_prefill_rows"), 300);
    CHECK_INT_EQ(jint(l, "mix_prefill_rows_total"), 300 * prefills);
    /* a prefill whose session was created as the decode ended is not sent; its session is
     * deleted all the same */
    long unsent = jint(l, "created") - 2 - prefills;
    CHECK_MSG(unsent == 0 || unsent == 1, "%ld sessions created, %ld prefills", jint(l, "created"), prefills);
    CHECK_INT_EQ(jint(l, "deleted"), jint(l, "created"));
    CHECK_INT_EQ(jint(l, "requests"), 2 * (1 + 1 + 60 + 1) + 3 * prefills + 2 * unsent);
    CHECK(jnum(l, "ttft_p50_ms") > 0 && jnum(l, "ttft_p50_ms") <= jnum(l, "ttft_p99_ms"));
    CHECK(jnum(l, "ttft_p99_ms") <= jnum(l, "ttft_max_ms"));
    CHECK(jnum(l, "mix_prefill_rows_per_s") > 0);
    CHECK_NEAR(jnum(json_object_get(root, "params"), "prefill_every_s"), 0.005, 1e-9);
    json_decref(root);
    char *out = slurp(tmp_path("out.txt"));
    CHECK(out && strstr(out, "decode mix:") && strstr(out, "prefills of 300 rows"));
    free(out);
    CHECK_INT_EQ(live_sessions(p), 0);
}

/* --binary: every append in the v2 binary tensor encoding (prefill chunks and steps), each
 * answer checked as binary output of the right size with the session's length in its
 * parameters. */
TEST_WITH(binary_appends, const attnd_proc *p)
{
    const char *args[] = {"--url", p->base_url, "--model", "demo", "--sessions", "3", "--prefix",
                          "40", "--prefill-chunk", "16", "--window", "24", "--steps", "10",
                          "--binary", "--quiet", "--json", tmp_path("binary.json"),
                          "--max-error-rate", "0", NULL};
    CHECK_INT_EQ(run_load(args), 0);
    json_t *root = load_json(tmp_path("binary.json"));
    json_t *l = level0(root);
    CHECK_INT_EQ(jint(l, "requests"), 3 * (1 + 3 + 10 + 1));
    CHECK_INT_EQ(jint(l, "prefill_tokens"), 120);
    CHECK_INT_EQ(jint(l, "decode_tokens"), 30);
    CHECK_INT_EQ(jint(l, "errors"), 0);
    CHECK_INT_EQ(jint(l, "with_timing"), 30); /* timing came from the binary answers' parameters */
    CHECK(json_is_true(json_object_get(json_object_get(root, "params"), "binary")));
    json_decref(root);
    CHECK_INT_EQ(live_sessions(p), 0);
}

/* A replica with --replica-name (the longest name) makes ids NAME.<32 hex>, as it does behind a
 * gateway: attnd-load takes them, JSON and binary appends alike, and deletes every session. */
TEST(replica_ids)
{
    const char *extra[] = {"--replica-name", "a234567890123456789012345678901234567-z9", NULL};
    attnd_proc p;
    if (attnd_proc_start(&p, extra) != 0) {
        CHECK_MSG(0, "attnd --replica-name did not start");
        return;
    }
    for (int binary = 0; binary < 2; binary++) {
        const char *args[] = {"--url", p.base_url, "--model", "demo", "--sessions", "2",
                              "--prefix", "8", "--steps", "4", "--quiet", "--json",
                              tmp_path("replica.json"), "--max-error-rate", "0",
                              binary ? "--binary" : NULL, NULL};
        CHECK_INT_EQ(run_load(args), 0);
        json_t *root = load_json(tmp_path("replica.json")), *l = level0(root);
        CHECK_INT_EQ(jint(l, "errors"), 0);
        CHECK_INT_EQ(jint(l, "decode_tokens"), 2 * 4);
        CHECK_INT_EQ(jint(l, "deleted"), 2);
        json_decref(root);
        CHECK_INT_EQ(live_sessions(&p), 0);
    }
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* --duration caps decoding; SIGINT stops it; either way every session is deleted. */
TEST_WITH(bounded, const attnd_proc *p)
{
    const char *capped[] = {"--url", p->base_url, "--model", "demo", "--sessions", "4", "--prefix",
                            "8", "--steps", "1000000", "--window", "64", "--duration", "300ms",
                            "--quiet", "--json", tmp_path("capped.json"), NULL};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_INT_EQ(run_load(capped), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9 < 10);
    json_t *root = load_json(tmp_path("capped.json"));
    json_t *l = level0(root);
    CHECK(jint(l, "decode_tokens") > 0);
    CHECK_INT_EQ(jint(l, "decode_tokens") + jint(l, "steps_cut"), 4 * 1000000L);
    CHECK_INT_EQ(jint(l, "completed"), 0);
    CHECK_INT_EQ(jint(l, "errors"), 0);
    CHECK_INT_EQ(jint(l, "deleted"), 4);
    CHECK(jnum(l, "decode_elapsed_s") >= 0.3 && jnum(l, "decode_elapsed_s") < 5);
    CHECK_NEAR(jnum(json_object_get(root, "params"), "duration_s"), 0.3, 1e-9);
    json_decref(root);
    CHECK_INT_EQ(live_sessions(p), 0);

    const char *endless[] = {"--url", p->base_url, "--model", "demo", "--sessions", "4",
                             "--prefix", "8", "--steps", "1000000", "--window", "64", "--quiet",
                             "--json", tmp_path("sigint.json"), NULL};
    pid_t pid = spawn_load(endless);
    int seen = 0;
    for (int i = 0; i < 500 && !seen; i++) { /* decoding: all four sessions exist */
        attnd_sleep_ms(10);
        seen = live_sessions(p) == 4;
    }
    CHECK(seen);
    attnd_sleep_ms(200);
    if (pid > 0) kill(pid, SIGINT);
    CHECK_INT_EQ(wait_load(pid), 0);
    root = load_json(tmp_path("sigint.json"));
    l = level0(root);
    CHECK(jint(l, "decode_tokens") > 0 && jint(l, "steps_cut") > 0);
    CHECK_INT_EQ(jint(l, "deleted"), 4);
    CHECK_INT_EQ(jint(l, "errors"), 0);
    json_decref(root);
    CHECK_INT_EQ(live_sessions(p), 0);
    char *err = slurp(tmp_path("err.txt"));
    CHECK(err && strstr(err, "interrupted"));
    free(err);
}

/* Setups that cannot work: a message and a non-zero exit, before any session exists. */
TEST_WITH(failing_setup, const attnd_proc *p)
{
    const char *unknown[] = {"--url", p->base_url, "--model", "no-such-model", "--sessions", "2",
                             "--prefix", "8", "--steps", "2", NULL};
    CHECK_INT_EQ(run_load(unknown), 3);
    char *err = slurp(tmp_path("err.txt"));
    CHECK_MSG(err && strstr(err, "no-such-model") && strstr(err, "404"), "stderr: %s", err ? err : "");
    free(err);
    /* with --embed the model is not asked for: every create fails, exit 1, the reason shown */
    const char *unknown_embed[] = {"--url", p->base_url, "--model", "no-such-model", "--embed",
                                   "64", "--sessions", "2", "--prefix", "8", "--steps", "2",
                                   "--json", tmp_path("unknown.json"), NULL};
    CHECK_INT_EQ(run_load(unknown_embed), 1);
    err = slurp(tmp_path("err.txt"));
    CHECK_MSG(err && strstr(err, "model_not_found"), "stderr: %s", err ? err : "");
    free(err);
    json_t *root = load_json(tmp_path("unknown.json"));
    json_t *l = level0(root);
    CHECK_INT_EQ(jkind(l, "errors_by_kind", "http_404_model_not_found"), 2);
    CHECK_INT_EQ(jkind(l, "errors_by_phase", "create"), 2);
    CHECK_INT_EQ(jint(l, "created"), 0);
    CHECK_INT_EQ(jint(l, "steps_lost"), 4);
    json_decref(root);
    /* nothing listening: exit 3 */
    const char *nobody[] = {"--url", "http://127.0.0.1:9", "--model", "demo", "--sessions", "2",
                            "--timeout", "2s", NULL};
    CHECK_INT_EQ(run_load(nobody), 3);
    /* usage: exit 2 with the reason */
    const char *usage[] = {"--url", p->base_url, "--model", "demo", "--sessions", "8", "--rate",
                           "100", NULL};
    CHECK_INT_EQ(run_load(usage), 2);
    err = slurp(tmp_path("err.txt"));
    CHECK(err && strstr(err, "--rate does not combine with --sessions"));
    free(err);
    CHECK_INT_EQ(live_sessions(p), 0);
}

/* attnd --max-seq-len 70: prefix 64 + 20 steps runs into the limit at the 7th step; every
 * stream ends there (413 limit_exceeded) and its session is deleted all the same. */
TEST(limit)
{
    attnd_proc p;
    const char *extra[] = {"--max-seq-len", "70", NULL};
    int started = attnd_proc_start(&p, extra) == 0;
    CHECK_MSG(started, "attnd --max-seq-len 70 did not start");
    if (!started) return;
    const char *args[] = {"--url", p.base_url, "--model", "demo", "--sessions", "8", "--prefix",
                          "64", "--steps", "20", "--quiet", "--json", tmp_path("limit.json"), NULL};
    CHECK_INT_EQ(run_load(args), 1);
    json_t *root = load_json(tmp_path("limit.json"));
    json_t *l = level0(root);
    CHECK_INT_EQ(jint(l, "decode_tokens"), 8 * 6); /* positions 65..70 */
    CHECK_INT_EQ(jkind(l, "errors_by_kind", "http_413_limit_exceeded"), 8);
    CHECK_INT_EQ(jkind(l, "errors_by_phase", "decode"), 8);
    CHECK_INT_EQ(jint(l, "failed"), 8);
    CHECK_INT_EQ(jint(l, "steps_lost"), 8 * (20 - 6 - 1));
    CHECK_INT_EQ(jint(l, "deleted"), 8);
    CHECK(strstr(json_string_value(json_object_get(l, "first_error")), "decode: HTTP 413 limit_exceeded") != NULL);
    json_decref(root);
    char *err = slurp(tmp_path("err.txt"));
    CHECK(err && strstr(err, "max_length 70") && strstr(err, "first error: decode: HTTP 413"));
    free(err);
    CHECK_INT_EQ(live_sessions(&p), 0);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* ---- a fake server injecting faults -------------------------------------------------------------- */

#define FAKE_E 8
#define FAKE_MAX 64

enum { FAKE_RETRY, FAKE_FAULTS };

typedef struct fake_session {
    long length;
    int flip;    /* FAKE_RETRY: the next request is answered 503 first */
    int deletes; /* DELETEs received */
} fake_session;

typedef struct fake {
    struct MHD_Daemon *d;
    int port, mode;
    fake_session s[FAKE_MAX];
    atomic_int n;               /* sessions created */
    atomic_long appends, deletes, refused;
} fake;

typedef struct upload {
    char *buf;
    size_t len;
} upload;

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, char *body /* owned */,
                             const char *retry_after)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static char *error_body(const char *code)
{
    char *s;
    return asprintf(&s, "{\"error\":{\"code\":\"%s\",\"message\":\"fake %s\",\"field\":\"\"}}",
                    code, code) < 0 ? NULL : s;
}

/* The answer to an append of `rows` rows (of which `out_rows` are answered) at new `length`. */
static char *append_answer(int id, long out_rows, long length)
{
    json_t *out = json_array();
    for (long i = 0; i < out_rows; i++) {
        json_t *row = json_array();
        for (int e = 0; e < FAKE_E; e++) json_array_append_new(row, json_real(0.25));
        json_array_append_new(out, row);
    }
    char sid[40];
    snprintf(sid, sizeof sid, "%032x", id);
    json_t *resp = json_pack("{s:s, s:o, s:{s:i, s:i, s:i}, s:{s:s, s:I, s:I}}", "model", "x",
                             "output", out, "timing", "queue_us", 100, "compute_us", 300,
                             "batch_size", 2, "session", "id", sid, "length", (json_int_t)length,
                             "cached", (json_int_t)length);
    char *s = json_dumps(resp, JSON_COMPACT);
    json_decref(resp);
    return s;
}

/* FAKE_FAULTS, by session (in order of creation): 0 is served right; 1 answers its 3rd step
 * with the length not advanced; 2 answers its 2nd step 503 queue_full without Retry-After;
 * 3 answers its prefill one row short; 4's DELETE fails with 500. */
static enum MHD_Result append(fake *f, struct MHD_Connection *c, int id, upload *u)
{
    fake_session *s = &f->s[id];
    json_t *req = json_loadb(u->buf ? u->buf : "", u->len, 0, NULL);
    long rows = (long)json_array_size(json_object_get(req, "query"));
    json_decref(req);
    if (!rows) return reply(c, 400, error_body("invalid_shape"), NULL);
    if (f->mode == FAKE_RETRY && (s->flip ^= 1)) {
        atomic_fetch_add(&f->refused, 1);
        return reply(c, 503, error_body("kv_cache_full"), "0");
    }
    atomic_fetch_add(&f->appends, 1);
    long step = s->length >= 4 ? s->length - 4 + 1 : 0; /* FAKE_FAULTS: prefix 4 */
    long out_rows = rows, length = s->length + rows;
    if (f->mode == FAKE_FAULTS) {
        if (id == 1 && step == 3) length--;
        if (id == 2 && step == 2) return reply(c, 503, error_body("queue_full"), NULL);
        if (id == 3 && step == 0) out_rows--;
    }
    s->length = length;
    return reply(c, 200, append_answer(id, out_rows, length), NULL);
}

static enum MHD_Result route(fake *f, struct MHD_Connection *c, const char *url,
                             const char *method, upload *u)
{
    if (!strcmp(method, "GET") && !strcmp(url, "/v1/models/x")) {
        char *info;
        if (asprintf(&info, "{\"name\":\"x\",\"num_heads\":2,\"embed_q\":%d,\"embed_k\":%d,"
                            "\"embed_v\":%d,\"embed_out\":%d}", FAKE_E, FAKE_E, FAKE_E, FAKE_E) < 0)
            return MHD_NO;
        return reply(c, 200, info, NULL);
    }
    if (!strcmp(method, "POST") && !strcmp(url, "/v1/models/x/sessions")) {
        int n = atomic_fetch_add(&f->n, 1);
        if (n >= FAKE_MAX) return reply(c, 503, error_body("too_many_sessions"), NULL);
        char *body;
        if (asprintf(&body, "{\"id\":\"%032x\",\"model\":\"x\",\"kind\":\"self\",\"window\":0,"
                            "\"length\":0,\"max_length\":4096,\"cached\":0}", n) < 0)
            return MHD_NO;
        return reply(c, 201, body, NULL);
    }
    /* /v1/sessions/{32 hex digits: 24 zeros and the index}[/append] */
    const char *hex = url + strlen("/v1/sessions/"), *tail = hex + 32;
    if (strncmp(url, "/v1/sessions/", 13) || strspn(hex, "0123456789abcdef") < 32 ||
        strncmp(hex, "000000000000000000000000", 24))
        return reply(c, 404, error_body("session_not_found"), NULL);
    int id = -1;
    if (sscanf(hex + 24, "%8x", (unsigned *)&id) != 1 || id < 0 || id >= atomic_load(&f->n))
        return reply(c, 404, error_body("session_not_found"), NULL);
    if (!strcmp(method, "POST") && !strcmp(tail, "/append")) return append(f, c, id, u);
    if (!strcmp(method, "DELETE") && !tail[0]) {
        fake_session *s = &f->s[id];
        if (f->mode == FAKE_RETRY && (s->flip ^= 1)) {
            atomic_fetch_add(&f->refused, 1);
            return reply(c, 503, error_body("queue_full"), "0");
        }
        s->deletes++;
        atomic_fetch_add(&f->deletes, 1);
        if (f->mode == FAKE_FAULTS && id == 4) return reply(c, 500, error_body("internal"), NULL);
        return reply(c, 204, strdup(""), NULL);
    }
    return reply(c, 405, error_body("method_not_allowed"), NULL);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *data,
                               size_t *data_size, void **con_cls)
{
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
    return route(cls, c, url, method, u);
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
    memset(f, 0, sizeof *f);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    f->mode = mode;
    /* one internal thread: the session table needs no lock */
    f->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL,
                            handler, f, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
    if (!f->d) return -1;
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(f->d, MHD_DAEMON_INFO_BIND_PORT);
    f->port = i ? i->port : 0;
    return f->port ? 0 : -1;
}

/* Every append and DELETE is refused once with 503 + Retry-After: 0 — retried, counted, and
 * never an error; with --max-retries 0 the same refusals are errors and the deletes fail. */
TEST(fake_retry)
{
    static fake f;
    char url[64];
    CHECK(fake_start(&f, FAKE_RETRY) == 0);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", f.port);
    const char *args[] = {"--url", url, "--model", "x", "--sessions", "3", "--prefix", "4",
                          "--prefill-chunk", "2", "--steps", "4", "--quiet", "--json",
                          tmp_path("retry.json"), "--max-error-rate", "0", NULL};
    CHECK_INT_EQ(run_load(args), 0);
    json_t *root = load_json(tmp_path("retry.json"));
    json_t *l = level0(root);
    CHECK_INT_EQ(jint(l, "errors"), 0);
    CHECK_INT_EQ(jint(l, "retries"), 3 * (2 + 4 + 1));
    CHECK_INT_EQ(jkind(l, "retries_by_kind", "http_503_kv_cache_full"), 3 * (2 + 4));
    CHECK_INT_EQ(jkind(l, "retries_by_kind", "http_503_queue_full"), 3);
    CHECK_INT_EQ(jint(l, "requests"), 3 * (1 + 2 + 4 + 1)); /* a retried call counts once */
    CHECK_INT_EQ(jint(l, "decode_tokens"), 12);
    CHECK_INT_EQ(jint(l, "deleted"), 3);
    CHECK_NEAR(jnum(l, "queue_ms"), 0.1, 1e-9); /* the fake's timing, exactly */
    CHECK_NEAR(jnum(l, "compute_ms"), 0.3, 1e-9);
    CHECK_NEAR(jnum(l, "mean_batch_size"), 2, 1e-12);
    json_decref(root);
    CHECK_INT_EQ(atomic_load(&f.refused), 21);
    CHECK_INT_EQ(atomic_load(&f.deletes), 3);
    char *out = slurp(tmp_path("out.txt"));
    CHECK(out && strstr(out, "retries at sessions 3: http_503_kv_cache_full=18 http_503_queue_full=3"));
    free(out);
    MHD_stop_daemon(f.d);

    CHECK(fake_start(&f, FAKE_RETRY) == 0);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", f.port);
    const char *none[] = {"--url", url, "--model", "x", "--sessions", "3", "--prefix", "4",
                          "--steps", "4", "--max-retries", "0", "--quiet", "--json",
                          tmp_path("noretry.json"), NULL};
    CHECK_INT_EQ(run_load(none), 1);
    root = load_json(tmp_path("noretry.json"));
    l = level0(root);
    CHECK_INT_EQ(jint(l, "retries"), 0);
    CHECK_INT_EQ(jkind(l, "errors_by_kind", "http_503_kv_cache_full"), 3); /* the prefills */
    CHECK_INT_EQ(jkind(l, "errors_by_phase", "prefill"), 3);
    CHECK_INT_EQ(jkind(l, "errors_by_phase", "delete"), 0); /* the deletes went through on the flip */
    CHECK_INT_EQ(jint(l, "deleted"), 3);
    CHECK_INT_EQ(jint(l, "decode_tokens"), 0);
    json_decref(root);
    MHD_stop_daemon(f.d);
}

TEST(fake_faults)
{
    static fake f;
    char url[64];
    CHECK(fake_start(&f, FAKE_FAULTS) == 0);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", f.port);
    const char *args[] = {"--url", url, "--model", "x", "--sessions", "5", "--prefix", "4",
                          "--steps", "5", "--quiet", "--json", tmp_path("faults.json"), "--csv",
                          tmp_path("faults.csv"), NULL};
    CHECK_INT_EQ(run_load(args), 1);
    json_t *root = load_json(tmp_path("faults.json"));
    json_t *l = level0(root);
    CHECK_INT_EQ(jint(l, "created"), 5);
    CHECK_INT_EQ(jint(l, "prefilled"), 4);
    CHECK_INT_EQ(jint(l, "completed"), 2);
    CHECK_INT_EQ(jint(l, "failed"), 3);
    CHECK_INT_EQ(jint(l, "deleted"), 4);
    CHECK_INT_EQ(jint(l, "leaked"), 1);
    CHECK_INT_EQ(jint(l, "errors"), 4);
    CHECK_INT_EQ(jkind(l, "errors_by_phase", "prefill"), 1);
    CHECK_INT_EQ(jkind(l, "errors_by_phase", "decode"), 2);
    CHECK_INT_EQ(jkind(l, "errors_by_phase", "delete"), 1);
    CHECK_INT_EQ(jkind(l, "errors_by_kind", "bad_response"), 2);
    CHECK_INT_EQ(jkind(l, "errors_by_kind", "http_503_queue_full"), 1); /* no Retry-After */
    CHECK_INT_EQ(jkind(l, "errors_by_kind", "http_500_internal"), 1);
    CHECK_INT_EQ(jint(l, "retries"), 0);
    CHECK_INT_EQ(jint(l, "decode_tokens"), 5 + 2 + 1 + 5);
    CHECK_INT_EQ(jint(l, "steps_lost"), 2 + 3 + 5);
    CHECK_INT_EQ(jint(l, "requests"), 8 + 6 + 5 + 3 + 8);
    CHECK_INT_EQ(jint(json_object_get(root, "total"), "leaked"), 1);
    json_decref(root);
    /* every created session got its DELETE, the failed streams' too */
    CHECK_INT_EQ(atomic_load(&f.deletes), 5);
    for (int i = 0; i < 5; i++) CHECK_INT_EQ(f.s[i].deletes, 1);
    char *err = slurp(tmp_path("err.txt"));
    CHECK(err && strstr(err, "1 session(s) could not be deleted"));
    free(err);
    char *csv = slurp(tmp_path("faults.csv"));
    CHECK(csv && strstr(csv, ",err_create,err_prefill,err_decode,err_delete,"));
    CHECK(csv && strstr(csv, "err_bad_response") && strstr(csv, "err_http_500_internal"));
    free(csv);
    MHD_stop_daemon(f.d);
}

static void cleanup(void)
{
    const char *names[] = {"out.txt", "err.txt", "demo.json", "demo.csv", "demo.svg",
                           "chunked.json", "capped.json", "sigint.json", "unknown.json",
                           "limit.json", "retry.json", "noretry.json", "faults.json",
                           "faults.csv"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) unlink(tmp_path(names[i]));
    rmdir(tmpdir);
}

/* A model group: each stream one sequence session; a step appends to every layer. */
TEST(group)
{
    attnd_proc g;
    const char *dargs[] = {"--model", "llama=tests/fixtures/ckpt/llama_gqa,layers=all", NULL};
    if (attnd_proc_start(&g, dargs) != 0) {
        CHECK_MSG(0, "attnd with a model group did not start");
        return;
    }
    const char *args[] = {"--url", g.base_url, "--model", "llama", "--sessions", "3", "--prefix",
                          "20", "--prefill-chunk", "8", "--steps", "10", "--json",
                          tmp_path("group.json"), "--max-error-rate", "0", NULL};
    CHECK_INT_EQ(run_load(args), 0);
    json_t *root = load_json(tmp_path("group.json"));
    json_t *l = level0(root);
    CHECK_INT_EQ(jint(l, "decode_tokens"), 3 * 10);
    CHECK_INT_EQ(jint(l, "prefill_tokens"), 3 * 20);
    CHECK_INT_EQ(jint(l, "errors"), 0);
    CHECK_INT_EQ(jint(l, "requests"), 3 * (1 + 2 * 3 + 2 * 10 + 1)); /* 2 layers: chunks 8+8+4 */
    CHECK_INT_EQ(jint(l, "deleted"), 3);
    CHECK(jnum(l, "stream_tokens_per_s") > 0);
    CHECK_INT_EQ(jint(json_object_get(json_object_get(root, "params"), "model_dims"), "layers"), 2);
    json_decref(root);
    char *out = slurp(tmp_path("out.txt"));
    CHECK(out && strstr(out, "model group of 2 layers"));
    free(out);
    CHECK_INT_EQ(live_sessions(&g), 0);
    const char *oneshot[] = {"--url", g.base_url, "--model", "llama", "--requests", "2", NULL};
    CHECK_INT_EQ(run_load(oneshot), 3);
    char *err = slurp(tmp_path("err.txt"));
    CHECK(err && strstr(err, "is a model group"));
    free(err);
    CHECK_INT_EQ(attnd_proc_stop(&g), 0);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_load_sessions.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    RUN(fake_retry);
    RUN(fake_faults);
    attnd_proc p;
    int started = attnd_proc_start(&p, NULL) == 0;
    CHECK_MSG(started, "attnd did not start (ATTND_BIN=%s)", getenv("ATTND_BIN") ? getenv("ATTND_BIN") : "");
    if (started) {
        RUN_WITH(demo, &p);
        RUN_WITH(binary_appends, &p);
        RUN_WITH(decode_mix, &p);
        RUN_WITH(bounded, &p);
        RUN_WITH(failing_setup, &p);
        CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    }
    RUN(limit);
    RUN(replica_ids);
    RUN(group);
    cleanup();
    return check_summary();
}
