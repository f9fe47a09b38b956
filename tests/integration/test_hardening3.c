/* test_hardening3.c — issue 27's server-side defects and weak spots through the
 * real daemon: the retired-version bound with a busy session (it used to spin
 * forever on an HTTP thread), slot reuse after failed repository loads, model
 * names "." and "..", failed-load reasons shown only to admin keys, the
 * --kv-page-bytes minimum and K/V rows wider than a page, K/V values a
 * session's dtype cannot hold, and libmicrohttpd's own error answers logged
 * with a request id.
 */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#define E 64
#define CLIENT_KEY "client-key-27a1f3"
#define ADMIN_KEY "admin-key-27c9d0"
#define CLIENT "Bearer " CLIENT_KEY
#define ADMIN "Bearer " ADMIN_KEY

static char client_file[] = "/tmp/attnd-h3-client-XXXXXX";
static char admin_file[] = "/tmp/attnd-h3-admin-XXXXXX";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, 0600);
}

/* {"query": [[...] x t]} with E values a row, each scale * a small pattern. */
static char *rows_body(const char *key, int t, double scale)
{
    sbuf b = {0};
    sb_printf(&b, "{\"%s\":[", key);
    for (int i = 0; i < t; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < E; j++)
            sb_printf(&b, "%s%.6g", j ? "," : "", scale * (0.01 * ((i * 7 + j * 3) % 17) - 0.08));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]}");
    return b.p;
}

/* A new session on model (201), its id into id. */
static int open_session(const attnd_proc *p, const char *model, const char *body, char id[64])
{
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s/sessions", model);
    http_result r;
    long st = attnd_call(p, "POST", path, CLIENT, body ? body : "{}", &r);
    json_error_t je;
    json_t *j = st == 201 && r.body ? json_loads(r.body, 0, &je) : NULL;
    const char *s = json_string_value(json_object_get(j, "id"));
    snprintf(id, 64, "%s", s ? s : "");
    if (st != 201)
        printf("session create on %s: %ld %s\n", model, st, r.body ? r.body : "");
    json_decref(j);
    http_result_free(&r);
    return st == 201 && *id ? 0 : -1;
}

static long append(const attnd_proc *p, const char *id, const char *body, http_result *keep)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s/append", id);
    return attnd_call(p, "POST", path, CLIENT, body, keep);
}

/* A raw request with the admin key and Connection: close; the status, or -1
 * when no answer came within timeout_ms. */
static int raw_post(const attnd_proc *p, const char *path, const char *body, int timeout_ms)
{
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: " ADMIN "\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     path, strlen(body), body);
    char *reply = http_raw(p->port, req, (size_t)n, timeout_ms);
    int st = reply ? http_raw_status(reply) : -1;
    free(reply);
    return st;
}

/* Lines of the daemon's log holding text. */
static int log_count(const attnd_proc *p, const char *text)
{
    char *log = attnd_slurp(p->log_path);
    int n = 0;
    for (const char *at = log; at && (at = strstr(at, text)); at++)
        n++;
    free(log);
    return n;
}

static int start(attnd_proc *p, const char *const *extra)
{
    const char *args[48];
    int n = 0;
    args[n++] = "--api-key-file";
    args[n++] = client_file;
    args[n++] = "--admin-key-file";
    args[n++] = admin_file;
    for (int i = 0; extra && extra[i] && n < 46; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    if (attnd_proc_start(p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ defect 1 */

typedef struct bg_append {
    const attnd_proc *p;
    const char *id;
    const char *body;
    long status;
} bg_append;

static void *append_main(void *arg)
{
    bg_append *a = arg;
    a->status = append(a->p, a->id, a->body, NULL);
    return NULL;
}

/* One HTTP thread; a session on demo's version 1 appends (its batch waits
 * 1.5 s to fill) while a repository load makes version 2 and, with
 * --max-retired-bytes 0, the bound must evict the session. Its append is
 * running, so the session can only be marked: the bound used to retry that
 * forever on the HTTP thread (neither request answered, a log line each turn,
 * SIGTERM never done). Now: the load answers, the append answers 200 (it was
 * accepted), the session is gone after it (410), one log line. */
TEST(retired_bound_busy_session)
{
    const char *args[] = {"--http-threads", "1", "--max-retired-bytes", "0",
                          "--max-queue-delay-us", "1500000", "--workers", "1", NULL};
    attnd_proc p;
    if (start(&p, args) != 0)
        return;
    char *body = rows_body("query", 2, 1.0);
    char id[64];
    CHECK(open_session(&p, "demo", NULL, id) == 0);
    bg_append a = {.p = &p, .id = id, .body = body};
    pthread_t th;
    pthread_create(&th, NULL, append_main, &a);
    attnd_sleep_ms(400); /* the append waits in demo's queue */
    int load = raw_post(&p, "/v2/repository/models/demo/load", "{}", 6000);
    printf("repository load while the session appends: %d\n", load);
    CHECK_INT_EQ(load, 200);
    if (load != 200) { /* spinning: do not let it fill the disk */
        kill(p.pid, SIGKILL);
        pthread_join(th, NULL);
        attnd_proc_stop(&p);
        free(body);
        return;
    }
    pthread_join(th, NULL);
    CHECK_INT_EQ(a.status, 200);
    CHECK_INT_EQ(append(&p, id, body, NULL), 410);
    int lines = log_count(&p, "retired model demo version 1");
    printf("log lines about the retired version: %d\n", lines);
    CHECK(lines >= 1 && lines <= 2);
    free(body);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* The same through an unload and through SIGHUP (its reload runs on the main
 * thread: SIGTERM used to be ignored behind the spin). */
TEST(retired_bound_busy_session_unload_and_sighup)
{
    const char *args[] = {"--max-retired-bytes", "0", "--max-queue-delay-us", "1500000",
                          "--workers", "1", "--http-threads", "1", NULL};
    attnd_proc p;
    if (start(&p, args) != 0)
        return;
    char *body = rows_body("query", 2, 1.0);
    char id[64];
    CHECK(open_session(&p, "demo", NULL, id) == 0);
    bg_append a = {.p = &p, .id = id, .body = body};
    pthread_t th;
    pthread_create(&th, NULL, append_main, &a);
    attnd_sleep_ms(400);
    int st = raw_post(&p, "/v2/repository/models/demo/unload", "{}", 6000);
    CHECK_INT_EQ(st, 200);
    if (st != 200) {
        kill(p.pid, SIGKILL);
        pthread_join(th, NULL);
        attnd_proc_stop(&p);
        free(body);
        return;
    }
    pthread_join(th, NULL);
    CHECK_INT_EQ(a.status, 200);
    CHECK_INT_EQ(append(&p, id, body, NULL), 410);
    CHECK_INT_EQ(raw_post(&p, "/v2/repository/models/demo/load", "{}", 6000), 200);
    /* SIGHUP: a session on the current version appends while the reload
     * replaces it */
    CHECK(open_session(&p, "demo", NULL, id) == 0);
    a.status = 0;
    pthread_create(&th, NULL, append_main, &a);
    attnd_sleep_ms(400);
    kill(p.pid, SIGHUP);
    pthread_join(th, NULL);
    CHECK_INT_EQ(a.status, 200);
    attnd_sleep_ms(300);
    CHECK_INT_EQ(append(&p, id, body, NULL), 410);
    int rc = attnd_proc_stop(&p);
    CHECK_INT_EQ(rc, 0);
    free(body);
}

/* ------------------------------------------------------------ defect 6, names, reasons */

static long load(const attnd_proc *p, const char *name, const char *body, http_result *keep)
{
    char path[160];
    snprintf(path, sizeof path, "/v2/repository/models/%s/load", name);
    return attnd_call(p, "POST", path, ADMIN, body, keep);
}

static long unload(const attnd_proc *p, const char *name)
{
    char path[160];
    snprintf(path, sizeof path, "/v2/repository/models/%s/unload", name);
    return attnd_call(p, "POST", path, ADMIN, NULL, NULL);
}

/* The index (with auth) as text, or NULL. Caller frees. */
static char *index_text(const attnd_proc *p, const char *auth)
{
    http_result r;
    long st = attnd_call(p, "GET", "/v2/repository/index", auth, NULL, &r);
    char *s = st == 200 && r.body ? strdup(r.body) : NULL;
    http_result_free(&r);
    return s;
}

/* 40 failed loads of new names (typos, a missing file), then a good one: it
 * loads (was 409 repository_full after 32); the index remembers the last few
 * failures, not all 40. 40 loads and unloads of new names: each takes the
 * slot the one before left, and a 41st still loads. */
TEST(failed_loads_take_no_slot)
{
    attnd_proc p;
    if (start(&p, NULL) != 0)
        return;
    int failed = 0;
    for (int k = 0; k < 40; k++) {
        char name[32];
        snprintf(name, sizeof name, "typo%d", k);
        failed += load(&p, name, "{\"parameters\": {\"path\": \"/nonexistent/m.safetensors\"}}",
                       NULL) == 400;
    }
    CHECK_INT_EQ(failed, 40);
    http_result r;
    long st = load(&p, "good", "{\"parameters\": {\"path\": \"config/demo.safetensors\"}}", &r);
    printf("a good load after 40 failed ones: %ld %.200s\n", st, r.body ? r.body : "");
    http_result_free(&r);
    CHECK_INT_EQ(st, 200);
    char *idx = index_text(&p, ADMIN);
    int listed = 0;
    for (const char *at = idx; at && (at = strstr(at, "\"typo")); at++)
        listed++;
    CHECK(idx && strstr(idx, "\"typo39\"") && !strstr(idx, "\"typo0\""));
    CHECK(listed >= 1 && listed <= 8);
    free(idx);
    int cycles = 0;
    for (int k = 0; k < 40; k++) {
        char name[32];
        snprintf(name, sizeof name, "cycle%d", k);
        cycles += load(&p, name, "{\"parameters\": {\"path\": \"config/demo.safetensors\"}}",
                       NULL) == 200 && unload(&p, name) == 200;
    }
    CHECK_INT_EQ(cycles, 40);
    CHECK_INT_EQ(load(&p, "last", "{\"parameters\": {\"path\": \"config/demo.safetensors\"}}",
                      NULL), 200);
    CHECK_INT_EQ(attnd_call(&p, "POST", "/v1/models/last/attention", CLIENT,
                      "{\"query\": [[0.5,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                      "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]]}",
                      NULL), 200);
    http_result m;
    CHECK_INT_EQ(attnd_call(&p, "GET", "/metrics", CLIENT, NULL, &m), 200);
    CHECK(m.body && strstr(m.body, "attnd_model_info{model=\"last\""));
    CHECK(m.body && !strstr(m.body, "model=\"cycle0\""));
    http_result_free(&m);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* A model named "." or ".." (or dots alone): refused 400 naming the name, on
 * the repository routes and in the configuration; nothing is loaded. */
TEST(dot_names_refused)
{
    attnd_proc p;
    if (start(&p, NULL) != 0)
        return;
    const char *names[] = {".", "..", "..."};
    for (int k = 0; k < 3; k++) {
        char path[128];
        snprintf(path, sizeof path, "/v2/repository/models/%s/load", names[k]);
        char req[512];
        const char *body = "{\"parameters\": {\"path\": \"config/demo.safetensors\"}}";
        int n = snprintf(req, sizeof req,
                         "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: " ADMIN "\r\n"
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\n\r\n%s", path, strlen(body), body);
        char *reply = http_raw(p.port, req, (size_t)n, 3000);
        int st = reply ? http_raw_status(reply) : -1;
        printf("load of \"%s\": %d %.160s\n", names[k], st,
               reply && strstr(reply, "\r\n\r\n") ? strstr(reply, "\r\n\r\n") + 4 : "");
        CHECK_INT_EQ(st, 400);
        CHECK(reply && strstr(reply, "name"));
        free(reply);
    }
    char *idx = index_text(&p, ADMIN);
    CHECK(idx && !strstr(idx, "\"name\":\".\"") && !strstr(idx, "\"name\":\"..\""));
    free(idx);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    const char *args[] = {"--model", "..=config/demo.safetensors", "--listen", "127.0.0.1:0",
                          NULL};
    char *out = NULL;
    CHECK(attnd_run(args, 15, &out) == 2);
    CHECK_MSG(out && strstr(out, "model name '..'"), "output: %s", out ? out : "");
    free(out);
}

/* Why a load failed (a file path, parser text) is in the index for an admin
 * key only; a client key sees that it failed. */
TEST(load_reasons_admin_only)
{
    attnd_proc p;
    if (start(&p, NULL) != 0)
        return;
    CHECK_INT_EQ(load(&p, "broken", "{\"parameters\": {\"path\": \"/secret/dir/m.safetensors\"}}",
                      NULL), 400);
    CHECK_INT_EQ(load(&p, "demo", "{\"parameters\": {\"path\": \"/secret/dir/d.safetensors\"}}",
                      NULL), 400); /* a loaded model's failed reload */
    char *client = index_text(&p, CLIENT), *admin = index_text(&p, ADMIN);
    printf("index for a client key: %s\n", client ? client : "(none)");
    CHECK(client && !strstr(client, "/secret/"));
    CHECK(client && strstr(client, "\"broken\"") && strstr(client, "load failed"));
    CHECK(admin && strstr(admin, "/secret/dir/m.safetensors") &&
          strstr(admin, "/secret/dir/d.safetensors"));
    free(client);
    free(admin);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* ------------------------------------------------------------ KV pages */

/* --kv-page-bytes 4 (and anything under 1024): refused at start naming the
 * minimum. It used to start (with the default pool: ~6 GB of bookkeeping) and
 * answer every session create 500. */
TEST(kv_page_minimum)
{
    const char *sizes[] = {"4", "512", "1020"};
    for (int k = 0; k < 3; k++) {
        const char *args[] = {"--model", "demo=config/demo.safetensors", "--listen",
                              "127.0.0.1:0", "--kv-cache-bytes", "1M", "--kv-page-bytes",
                              sizes[k], NULL};
        char *out = NULL;
        int rc = attnd_run(args, 5, &out);
        printf("--kv-page-bytes %s: exit %d\n", sizes[k], rc);
        CHECK_INT_EQ(rc, 2);
        CHECK_MSG(out && strstr(out, "--kv-page-bytes") && strstr(out, "at least 1024"),
                  "output: %.300s", out ? out : "");
        free(out);
    }
}

/* A model whose one row of K and V is wider than the KV page: a repository
 * load is refused 400 naming the model and the page (it used to load, then
 * answer every session create 500); at start-up, attnd exits 2 naming it. */
TEST(wide_rows_refused)
{
    char wide[] = "/tmp/attnd-h3-wide-XXXXXX";
    int fd = mkstemp(wide);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    CHECK_INT_EQ(attnd_write_zero_mha(wide, 1024), 0); /* a row: 2 x 1024 x 4 = 8 KiB */
    const char *args[] = {"--kv-page-bytes", "4096", NULL};
    attnd_proc p;
    if (start(&p, args) == 0) {
        char body[256];
        snprintf(body, sizeof body, "{\"parameters\": {\"path\": \"%s\", \"heads\": 8}}", wide);
        http_result r;
        long st = load(&p, "wide", body, &r);
        printf("load of a model with 8 KiB rows on 4 KiB pages: %ld %.240s\n", st,
               r.body ? r.body : "");
        CHECK_INT_EQ(st, 400);
        CHECK(r.body && strstr(r.body, "'wide'") && strstr(r.body, "KV page"));
        http_result_free(&r);
        CHECK_INT_EQ(attnd_call(&p, "POST", "/v1/models/wide/sessions", CLIENT, "{}", NULL), 404);
        char id[64];
        CHECK(open_session(&p, "demo", NULL, id) == 0); /* demo's 512-byte rows fit */
        CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    }
    char spec[300];
    snprintf(spec, sizeof spec, "wide=%s,heads=8", wide);
    const char *boot[] = {"--model", "demo=config/demo.safetensors", "--model", spec,
                          "--kv-page-bytes", "4096", "--kv-cache-bytes", "1M", "--listen",
                          "127.0.0.1:0", NULL};
    char *out = NULL;
    int rc = attnd_run(boot, 10, &out);
    CHECK_INT_EQ(rc, 2);
    CHECK_MSG(out && strstr(out, "model 'wide'") && strstr(out, "--kv-page-bytes"),
              "output: %.400s", out ? out : "");
    free(out);
    unlink(wide);
}

/* ------------------------------------------------------------ KV dtype overflow */

/* The "output" of an append answer as floats (malloc'd, *n of them), or NULL. */
static float *output_of(const char *body, size_t *n)
{
    json_error_t je;
    json_t *j = body ? json_loads(body, 0, &je) : NULL, *o = json_object_get(j, "output");
    size_t rows = json_array_size(o), w = json_array_size(json_array_get(o, 0));
    float *out = rows && w ? malloc(rows * w * sizeof *out) : NULL;
    for (size_t r = 0; out && r < rows; r++)
        for (size_t c = 0; c < w; c++)
            out[r * w + c] = (float)json_number_value(json_array_get(json_array_get(o, r), c));
    *n = out ? rows * w : 0;
    json_decref(j);
    return out;
}

/* A session's length (GET), or -1. */
static long long session_length(const attnd_proc *p, const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s", id);
    http_result r;
    long long len = -1;
    if (attnd_call(p, "GET", path, CLIENT, NULL, &r) == 200 && r.body) {
        json_t *j = json_loads(r.body, 0, NULL);
        json_t *l = json_object_get(j, "length");
        len = json_is_integer(l) ? json_integer_value(l) : -1;
        json_decref(j);
    }
    http_result_free(&r);
    return len;
}

/* An f16 session fed rows whose projected K/V pass 65504: 400 naming the dtype
 * and its limit, nothing appended (the length stays); rows it holds still
 * append. It used to answer 200, the cache saturated at 65504 (87 % off the
 * f32 answer at |x| ~ 1e5). A cross session's memory likewise, at create.
 * Then the error each dtype gives against f32, as inputs grow (printed for
 * the README's dtype table): int8's grows with a sharp softmax. */
TEST(kv_dtype_overflow)
{
    const char *args[] = {"--model", "f32=config/demo.safetensors",
                          "--model", "f16=config/demo.safetensors,kv_dtype=f16",
                          "--model", "bf16=config/demo.safetensors,kv_dtype=bf16",
                          "--model", "int8=config/demo.safetensors,kv_dtype=int8", NULL};
    attnd_proc p;
    if (start(&p, args) != 0)
        return;
    char id[64];
    CHECK(open_session(&p, "f16", NULL, id) == 0);
    char *huge = rows_body("query", 2, 1e6);
    http_result r;
    long st = append(&p, id, huge, &r);
    printf("f16 append of |x| ~ 1e6 rows: %ld %.300s\n", st, r.body ? r.body : "");
    CHECK_INT_EQ(st, 400);
    CHECK(r.body && strstr(r.body, "f16") && strstr(r.body, "65504") && strstr(r.body, "query"));
    http_result_free(&r);
    CHECK_INT_EQ(session_length(&p, id), 0);
    char *small = rows_body("query", 2, 1.0);
    CHECK_INT_EQ(append(&p, id, small, NULL), 200);
    CHECK_INT_EQ(session_length(&p, id), 2);
    CHECK_INT_EQ(append(&p, id, huge, NULL), 400);
    CHECK_INT_EQ(session_length(&p, id), 2);
    /* a cross session's memory, at create */
    char *key = rows_body("key", 3, 1e6);
    st = attnd_call(&p, "POST", "/v1/models/f16/sessions", CLIENT, key, &r);
    printf("f16 cross session with a |x| ~ 1e6 memory: %ld %.300s\n", st, r.body ? r.body : "");
    CHECK_INT_EQ(st, 400);
    CHECK(r.body && strstr(r.body, "f16") && strstr(r.body, "65504"));
    http_result_free(&r);
    CHECK(open_session(&p, "bf16", NULL, id) == 0); /* bf16 has float32's range */
    CHECK_INT_EQ(append(&p, id, huge, NULL), 200);
    /* the error against f32 as |x| grows, one fresh session per (dtype, scale) */
    const char *dtypes[] = {"f16", "bf16", "int8"};
    const double scales[] = {1, 10, 100, 1000, 3000};
    double int8_at_1 = -1;
    printf("dtype  |x|~1    |x|~10   |x|~100  |x|~1e3  |x|~3e3 (max |out - f32| / max |f32|, "
           "8 rows then 8 more; -1: refused)\n");
    for (int d = 0; d < 3; d++) {
        printf("%-5s", dtypes[d]);
        for (int k = 0; k < 5; k++) {
            char *a = rows_body("query", 8, scales[k]);
            double rel = -1;
            char ida[64], idb[64];
            if (open_session(&p, "f32", NULL, ida) == 0 &&
                open_session(&p, dtypes[d], NULL, idb) == 0) {
                http_result ra, rb;
                append(&p, ida, a, NULL);
                append(&p, idb, a, NULL);
                long sa = append(&p, ida, a, &ra), sb = append(&p, idb, a, &rb);
                size_t na = 0, nb = 0;
                float *oa = sa == 200 ? output_of(ra.body, &na) : NULL;
                float *ob = sb == 200 ? output_of(rb.body, &nb) : NULL;
                if (oa && ob && na == nb) {
                    double worst = 0, ref = 0;
                    for (size_t i = 0; i < na; i++) {
                        worst = fmax(worst, fabs((double)oa[i] - (double)ob[i]));
                        ref = fmax(ref, fabs((double)oa[i]));
                    }
                    rel = ref > 0 ? worst / ref : 0;
                }
                free(oa);
                free(ob);
                http_result_free(&ra);
                http_result_free(&rb);
            }
            if (d == 2 && k == 0)
                int8_at_1 = rel;
            printf("  %7.3g", rel);
            free(a);
        }
        printf("\n");
    }
    CHECK(int8_at_1 >= 0 && int8_at_1 < 0.05);
    free(key);
    free(huge);
    free(small);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* ------------------------------------------------------------ libmicrohttpd's own answers */

/* A header over libmicrohttpd's memory (431) and a malformed header line
 * (400) are answered by libmicrohttpd before attnd sees a request. Each now
 * has a log line with a request id of its own and an access-log line (they
 * had neither: only libmicrohttpd's message, HTML and all). */
TEST(mhd_answers_logged)
{
    char access[] = "/tmp/attnd-h3-access-XXXXXX";
    int fd = mkstemp(access);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    const char *args[] = {"--access-log", access, NULL};
    attnd_proc p;
    if (start(&p, args) != 0) {
        unlink(access);
        return;
    }
    size_t big = 70000;
    char *req = malloc(big + 128);
    int n = snprintf(req, big + 128, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(req + n, 'a', big);
    n += (int)big;
    n += snprintf(req + n, 128, "\r\n\r\n");
    char *reply = http_raw(p.port, req, (size_t)n, 3000);
    CHECK_INT_EQ(reply ? http_raw_status(reply) : -1, 431);
    free(reply);
    free(req);
    static const char bad[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n";
    reply = http_raw(p.port, bad, sizeof bad - 1, 3000);
    CHECK_INT_EQ(reply ? http_raw_status(reply) : -1, 400);
    free(reply);
    attnd_sleep_ms(200);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    char *log = attnd_slurp(p.log_path), *acc = attnd_slurp(access);
    const char *l431 = log ? strstr(log, "libmicrohttpd answered 431") : NULL;
    const char *l400 = log ? strstr(log, "libmicrohttpd answered 400") : NULL;
    /* "... WARN  [<16 hex>] libmicrohttpd answered ...": the id stands before it */
    int id_ok = 0;
    if (l431 && l431 - log > 20) {
        const char *id = l431 - 18;
        id_ok = id[-1] == '[' && id[16] == ']';
        for (int i = 0; i < 16 && id_ok; i++)
            id_ok = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f');
    }
    printf("log: %.160s\n", l431 ? l431 - 19 : "(no line)");
    CHECK(l431 && l400);
    CHECK_MSG(id_ok, "no request id before the 431 line");
    CHECK_MSG(acc && strstr(acc, " 431 ") && strstr(acc, " 400 "), "access log: %s",
              acc ? acc : "(none)");
    free(log);
    free(acc);
    unlink(access);
}

int main(void)
{
    int fds[] = {mkstemp(client_file), mkstemp(admin_file)};
    for (int i = 0; i < 2; i++) {
        CHECK(fds[i] >= 0);
        close(fds[i]);
    }
    write_file(client_file, CLIENT_KEY "\n");
    write_file(admin_file, ADMIN_KEY "\n");
    RUN(retired_bound_busy_session);
    RUN(retired_bound_busy_session_unload_and_sighup);
    RUN(failed_loads_take_no_slot);
    RUN(dot_names_refused);
    RUN(load_reasons_admin_only);
    RUN(kv_page_minimum);
    RUN(wide_rows_refused);
    RUN(kv_dtype_overflow);
    RUN(mhd_answers_logged);
    unlink(client_file);
    unlink(admin_file);
    return check_summary();
}
