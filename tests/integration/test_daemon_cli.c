/* test_daemon_cli.c — attnd as a program: --help, --version, --print-config and
 * the precedence defaults < file < environment < flags, config files with
 * comments, ATTND_MODELS, start-up failures (exit codes, the file named in the
 * message), and the SIGTERM drain (every queued request answered, exit 0).
 */
#include <jansson.h>
#include <pthread.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"

static const char *demo(void)
{
    const char *m = getenv("ATTND_DEMO_MODEL");
    return m && *m ? m : "config/demo.safetensors";
}

/* The value printed by --print-config for name ("name = value  (source)"). */
static int config_line(const char *out, const char *name, const char *value, const char *src)
{
    char want[256];
    snprintf(want, sizeof want, "\n%s = %s  (%s)\n", name, value, src);
    return strstr(out, want) != NULL || (strncmp(out, want + 1, strlen(want) - 1) == 0);
}

TEST(help_version)
{
    char *out = NULL;
    const char *help[] = {"--help", NULL};
    CHECK_INT_EQ(attnd_run(help, 10, &out), 0);
    static const char *const opts[] = {"--listen", "--model", "--config", "--default-model",
                                       "--log-level", "--workers", "--max-batch-requests",
                                       "--max-batch-tokens", "--max-queue-delay-us",
                                       "--max-queue", "--max-body-bytes", "--max-seq-len",
                                       "--max-batch-seqs", "--max-weights-elems",
                                       "--max-json-depth", "--max-connections",
                                       "--connection-timeout-s", "--http-threads", "--version"};
    for (size_t i = 0; out && i < sizeof opts / sizeof opts[0]; i++)
        CHECK_MSG(strstr(out, opts[i]) != NULL, "--help lacks %s", opts[i]);
    CHECK(out && strstr(out, "[default: 256] [env: ATTND_MAX_QUEUE]"));
    CHECK(out && strstr(out, "[default: 0.0.0.0:8080] [env: ATTND_LISTEN]"));
    CHECK(out && strstr(out, "[env: ATTND_MODELS]"));
    free(out);

    const char *version[] = {"--version", NULL};
    CHECK_INT_EQ(attnd_run(version, 10, &out), 0);
    CHECK(out && strncmp(out, "attnd 0.", 8) == 0);
    CHECK(out && strstr(out, "libmicrohttpd"));
    free(out);
}

TEST(startup_failures)
{
    char *out = NULL;
    const char *missing[] = {"--model", "x=/nonexistent/dir/missing.safetensors", "--listen",
                             "127.0.0.1:0", NULL};
    CHECK_INT_EQ(attnd_run(missing, 10, &out), 1);
    CHECK_MSG(out && strstr(out, "/nonexistent/dir/missing.safetensors") && strstr(out, "ERROR"),
              "missing model message: %s", out ? out : "(null)");
    free(out);

    char path[] = "/tmp/attnd-cli-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, "not a model", 11) == 11);
    close(fd);
    char spec[128];
    snprintf(spec, sizeof spec, "bad=%s", path);
    const char *corrupt[] = {"--model", spec, "--listen", "127.0.0.1:0", NULL};
    CHECK_INT_EQ(attnd_run(corrupt, 10, &out), 1);
    CHECK_MSG(out && strstr(out, path), "corrupt model message: %s", out ? out : "(null)");
    free(out);
    unlink(path);

    const char *unknown[] = {"--model", "a=b", "--frobnicate", NULL};
    CHECK_INT_EQ(attnd_run(unknown, 10, &out), 2);
    CHECK(out && strstr(out, "--frobnicate"));
    free(out);
    const char *bad_value[] = {"--model", "a=b", "--workers", "0", NULL};
    CHECK_INT_EQ(attnd_run(bad_value, 10, &out), 2);
    CHECK(out && strstr(out, "workers"));
    free(out);
    const char *no_model[] = {"--listen", "127.0.0.1:0", NULL};
    CHECK_INT_EQ(attnd_run(no_model, 10, &out), 2);
    CHECK(out && strstr(out, "--model"));
    free(out);
    const char *bad_default[] = {"--model", "a=b", "--default-model", "zz", NULL};
    CHECK_INT_EQ(attnd_run(bad_default, 10, &out), 2);
    CHECK(out && strstr(out, "zz"));
    free(out);
    const char *bad_listen[] = {"--model", "a=b", "--listen", "nonsense", NULL};
    CHECK(attnd_run(bad_listen, 10, &out) != 0);
    free(out);
}

static char *write_config(const char *json)
{
    static char path[64];
    strcpy(path, "/tmp/attnd-cfg-XXXXXX");
    int fd = mkstemp(path);
    size_t n = strlen(json);
    CHECK(fd >= 0 && write(fd, json, n) == (ssize_t)n);
    close(fd);
    return path;
}

TEST(precedence)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"_comment\": \"comments are keys starting with _\",\n"
             " \"workers\": 3, \"max_queue\": 7, \"max_batch_requests\": 5,\n"
             " \"max_body_bytes\": \"2M\", \"log_level\": \"warn\",\n"
             " \"models\": [{\"name\": \"f\", \"path\": \"%s\", \"_why\": \"demo\"}]}",
             demo());
    char *cfg = write_config(json);
    setenv("ATTND_MAX_QUEUE", "9", 1);
    setenv("ATTND_MAX_BATCH_REQUESTS", "6", 1);
    setenv("ATTND_MODELS", "e1=/x/one.safetensors;e2=/x/two.safetensors,heads=4", 1);
    const char *args[] = {"--config", cfg, "--max-batch-requests", "8", "--print-config", NULL};
    char *out = NULL;
    CHECK_INT_EQ(attnd_run(args, 10, &out), 0);
    if (out) {
        CHECK_MSG(config_line(out, "workers", "3", "file"), "%s", out);
        CHECK(config_line(out, "max-body-bytes", "2M", "file"));
        CHECK(config_line(out, "log-level", "warn", "file"));
        CHECK(config_line(out, "max-queue", "9", "env"));
        CHECK(config_line(out, "max-batch-requests", "8", "flag"));
        CHECK(config_line(out, "listen", "0.0.0.0:8080", "default"));
        CHECK(config_line(out, "max-batch-tokens", "8192", "default"));
        CHECK(config_line(out, "model",
                          "e1=/x/one.safetensors;e2=/x/two.safetensors,heads=4", "env"));
    }
    free(out);

    /* --model on the command line replaces the env's list */
    const char *flag_model[] = {"--config", cfg, "--model", "m=/p.safetensors", "--model",
                                "n=/q.safetensors", "--print-config", NULL};
    CHECK_INT_EQ(attnd_run(flag_model, 10, &out), 0);
    CHECK(out && config_line(out, "model", "m=/p.safetensors;n=/q.safetensors", "flag"));
    free(out);
    unsetenv("ATTND_MAX_QUEUE");
    unsetenv("ATTND_MAX_BATCH_REQUESTS");
    unsetenv("ATTND_MODELS");

    /* the file alone serves its model */
    attnd_proc p;
    const char *run_cfg[] = {"--config", cfg, "--log-level", "info", NULL};
    CHECK(attnd_proc_start(&p, run_cfg) == 0);
    if (p.pid > 0) {
        char url[128];
        http_result r;
        snprintf(url, sizeof url, "%s/v1/models/f", p.base_url);
        CHECK(http_do("GET", url, NULL, 0, NULL, &r) == 0 && r.status == 200);
        http_result_free(&r);
        CHECK_INT_EQ(attnd_proc_stop(&p), 0);
        unlink(p.log_path);
    }
    unlink(cfg);

    /* the shipped example parses, and says what make run serves */
    const char *example[] = {"--config", "config/attnd.json", "--print-config", NULL};
    CHECK_INT_EQ(attnd_run(example, 10, &out), 0);
    CHECK(out && config_line(out, "model", "demo=config/demo.safetensors", "file"));
    CHECK(out && config_line(out, "max-body-bytes", "64M", "file, = default"));
    free(out);

    cfg = write_config("{\"workers\": 2, \"wrokers\": 3}");
    const char *typo[] = {"--config", cfg, "--print-config", NULL};
    CHECK_INT_EQ(attnd_run(typo, 10, &out), 2);
    CHECK(out && strstr(out, "wrokers"));
    free(out);
    unlink(cfg);
    cfg = write_config("{\"workers\": 2,,}");
    CHECK_INT_EQ(attnd_run(typo, 10, &out), 2);
    CHECK_MSG(out && strstr(out, cfg) && strstr(out, ":1:"), "bad JSON config: %s",
              out ? out : "(null)");
    free(out);
    unlink(cfg);
}

/* ------------------------------------------------------------ SIGTERM */

typedef struct call {
    char url[128];
    const char *body;
    long status;
} call;

static void *post_one(void *arg)
{
    call *c = arg;
    http_result r;
    c->status = -1;
    if (http_do("POST", c->url, c->body, strlen(c->body), NULL, &r) == 0) {
        c->status = r.status;
        http_result_free(&r);
    }
    return NULL;
}

TEST(sigterm_drain)
{
    attnd_proc p;
    const char *args[] = {"--max-queue-delay-us", "3000000", "--max-batch-requests", "64", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return;
    }
    char body[1024] = "{\"query\": [[";
    for (int e = 0; e < 64; e++)
        strcat(body, e ? ",0.5" : "0.5");
    strcat(body, "]]}");
    call calls[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        snprintf(calls[i].url, sizeof calls[i].url, "%s/v1/models/demo/attention", p.base_url);
        calls[i].body = body;
        pthread_create(&th[i], NULL, post_one, &calls[i]);
    }
    struct timespec ts = {0, 300 * 1000000L}; /* they are queued for 3 s */
    nanosleep(&ts, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int status = attnd_proc_stop(&p);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(calls[i].status == 200, "queued request %d answered %ld during drain", i,
                  calls[i].status);
    }
    CHECK_INT_EQ(status, 0);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    CHECK_MSG(secs < 2.5, "drain took %.2f s: it should not wait out the batch delay", secs);
    FILE *f = fopen(p.log_path, "r");
    char log[16384] = "";
    size_t n = f ? fread(log, 1, sizeof log - 1, f) : 0;
    log[n] = '\0';
    if (f)
        fclose(f);
    CHECK_MSG(strstr(log, "INFO") && strstr(log, "draining") && strstr(log, "stopped"),
              "log: %s", log);
    CHECK(strstr(log, "OpenBLAS set to 1 thread") != NULL);
    unlink(p.log_path);
}

/* A thread of p that does not block SIGTERM, other than the main thread (an
 * OpenBLAS thread started before main() runs); 0 if there is none. */
static pid_t unblocked_thread(pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    pid_t found = 0;
    struct dirent *e;
    while (d && !found && (e = readdir(d))) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid <= 0 || tid == pid)
            continue;
        char path[128], line[256];
        snprintf(path, sizeof path, "%s/%d/status", dir, (int)tid);
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof line, f)) {
            unsigned long long mask;
            if (sscanf(line, "SigBlk: %llx", &mask) == 1 && !(mask & (1ull << (SIGTERM - 1))))
                found = tid;
        }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return found;
}

/* SIGTERM delivered to whichever thread the kernel picks must still drain:
 * aim it at a thread that has not blocked it. */
TEST(sigterm_any_thread)
{
    attnd_proc p;
    if (attnd_proc_start(&p, NULL) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return;
    }
    pid_t tid = unblocked_thread(p.pid);
    fprintf(stderr, "SIGTERM to thread %d of %d\n", (int)(tid ? tid : p.pid), (int)p.pid);
    syscall(SYS_tgkill, p.pid, tid ? tid : p.pid, SIGTERM);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0); /* a second SIGTERM then a wait: exit 0 */
    unlink(p.log_path);
}

/* --no-ui (and ATTND_UI=0) switch the playground off: / and /ui/ then 404,
 * while the API still answers. */
TEST(no_ui)
{
    const char *args[] = {"--no-ui", NULL};
    attnd_proc p;
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "attnd --no-ui did not start");
        return;
    }
    const char *paths[] = {"/", "/ui/", "/ui/app.js"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        char url[160];
        http_result r;
        snprintf(url, sizeof url, "%s%s", p.base_url, paths[i]);
        CHECK(http_do("GET", url, NULL, 0, NULL, &r) == 0);
        CHECK_MSG(r.status == 404, "GET %s with --no-ui: %ld", paths[i], r.status);
        http_result_free(&r);
    }
    char url[160];
    http_result r;
    snprintf(url, sizeof url, "%s/v1/models", p.base_url);
    CHECK(http_do("GET", url, NULL, 0, NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    http_result_free(&r);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);
}

/* --replica-name: a bad name stops start-up with exit 2 and a message naming the
 * option; a good one comes from the file, the environment or a flag like every
 * option (the session ids it shapes are tested in test_sessions). */
TEST(replica_name)
{
    static const char *const bad[] = {"R1", "r_1", "-r1", "r1-", "r1.x", "r 1",
                                      "a23456789012345678901234567890123456789012"};
    char *out = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *args[] = {"--model", "a=b", "--replica-name", bad[i], NULL};
        CHECK_MSG(attnd_run(args, 10, &out) == 2, "--replica-name '%s' accepted", bad[i]);
        CHECK_MSG(out && strstr(out, "--replica-name"), "message: %s", out ? out : "(null)");
        free(out);
    }
    const char *max_len[] = {"--model", "a=b", "--replica-name",
                             "a234567890123456789012345678901234567890", "--print-config", NULL};
    CHECK_INT_EQ(attnd_run(max_len, 10, &out), 0);
    CHECK(out && config_line(out, "replica-name", "a234567890123456789012345678901234567890",
                             "flag"));
    free(out);

    char *cfg = write_config("{\"replica_name\": \"from-file\", \"models\": "
                             "[{\"name\": \"a\", \"path\": \"b\"}]}");
    const char *from_file[] = {"--config", cfg, "--print-config", NULL};
    CHECK_INT_EQ(attnd_run(from_file, 10, &out), 0);
    CHECK_MSG(out && config_line(out, "replica-name", "from-file", "file"), "%s", out);
    free(out);
    setenv("ATTND_REPLICA_NAME", "from-env", 1);
    CHECK_INT_EQ(attnd_run(from_file, 10, &out), 0);
    CHECK(out && config_line(out, "replica-name", "from-env", "env"));
    free(out);
    setenv("ATTND_REPLICA_NAME", "Not_Valid", 1); /* checked before any model loads */
    const char *run_file[] = {"--config", cfg, "--listen", "127.0.0.1:0", NULL};
    CHECK_INT_EQ(attnd_run(run_file, 10, &out), 2);
    CHECK(out && strstr(out, "Not_Valid"));
    free(out);
    unsetenv("ATTND_REPLICA_NAME");
    unlink(cfg);
}

int main(void)
{
    RUN(help_version);
    RUN(startup_failures);
    RUN(precedence);
    RUN(sigterm_drain);
    RUN(sigterm_any_thread);
    RUN(no_ui);
    RUN(replica_name);
    return check_summary();
}
