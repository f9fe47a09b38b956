/* test_auth.c — API keys through the real daemon: 401 (with WWW-Authenticate)
 * without a key or with a wrong one, 200 with a key from the file or from
 * ATTND_API_KEYS, open health routes and playground, /metrics per
 * --metrics-require-key, keys never in the log or --print-config, and refusal
 * to start on a world-writable key or config file.
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"

#define FILE_KEY "file-key-7f3a9c2e41"
#define ENV_KEY "env-key-b5d81f0c99"

static const char body[] = "{\"query\": [[0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0,"
                           " 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25,"
                           " 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5,"
                           " -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0,"
                           " 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0]]}";

/* Status of one request to path with "Authorization: auth" (NULL: no header);
 * a POST sends body. */
static long call(const attnd_proc *p, const char *method, const char *path, const char *auth,
                 http_result *keep)
{
    return attnd_call(p, method, path, auth, strcmp(method, "POST") == 0 ? body : NULL, keep);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = calloc(1, 1 << 20);
    if (buf)
        buf[fread(buf, 1, (1 << 20) - 1, f)] = '\0';
    fclose(f);
    return buf;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, mode);
}

TEST_WITH(keys, const char *key_file)
{
    attnd_proc p;
    setenv("ATTND_API_KEYS", " " ENV_KEY " ,", 1);
    const char *args[] = {"--api-key-file", key_file, NULL};
    int started = attnd_proc_start(&p, args) == 0;
    unsetenv("ATTND_API_KEYS");
    if (!started) {
        CHECK_MSG(0, "attnd with keys did not start");
        return;
    }
    http_result r;
    CHECK_INT_EQ(call(&p, "GET", "/v1/models", NULL, &r), 401);
    CHECK(strstr(r.body, "\"unauthorized\"") != NULL);
    CHECK_STR_EQ(r.content_type, "application/json");
    CHECK_MSG(strncmp(r.www_authenticate, "Bearer", 6) == 0, "WWW-Authenticate '%s'",
              r.www_authenticate);
    http_result_free(&r);
    CHECK_INT_EQ(call(&p, "POST", "/v1/models/demo/attention", NULL, NULL), 401);
    CHECK_INT_EQ(call(&p, "POST", "/v1/attention", "Bearer wrong-key", NULL), 401);
    CHECK_INT_EQ(call(&p, "GET", "/v1/models", "Bearer " FILE_KEY "x", NULL), 401);
    CHECK_INT_EQ(call(&p, "GET", "/v1/models", "Bearer file-key-7f3a9c2e4", NULL), 401);
    CHECK_INT_EQ(call(&p, "GET", "/v1/models", "Basic " FILE_KEY, NULL), 401);
    CHECK_INT_EQ(call(&p, "GET", "/v1/models", "Bearer " , NULL), 401);
    CHECK_INT_EQ(call(&p, "GET", "/v1/models", "Bearer second-key-in-file", NULL), 200);
    CHECK_INT_EQ(call(&p, "GET", "/nowhere", NULL, NULL), 401); /* routes are not revealed */
    CHECK_INT_EQ(call(&p, "GET", "/v1/models", "Bearer # not-a-key", NULL), 401);

    CHECK_INT_EQ(call(&p, "GET", "/v1/models", "Bearer " FILE_KEY, NULL), 200);
    CHECK_INT_EQ(call(&p, "GET", "/v1/models", "bearer " ENV_KEY, NULL), 200);
    CHECK_INT_EQ(call(&p, "POST", "/v1/models/demo/attention", "Bearer " FILE_KEY, &r), 200);
    CHECK(strstr(r.body, "\"output\"") != NULL);
    http_result_free(&r);
    CHECK_INT_EQ(call(&p, "POST", "/v1/attention", "Bearer " ENV_KEY, NULL), 200);

    CHECK_INT_EQ(call(&p, "GET", "/healthz", NULL, NULL), 200);
    CHECK_INT_EQ(call(&p, "GET", "/readyz", NULL, NULL), 200);
    CHECK_INT_EQ(call(&p, "GET", "/metrics", NULL, NULL), 200);
    CHECK_INT_EQ(call(&p, "GET", "/", NULL, NULL), 200); /* playground page; its calls need a key */

    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    char *log = slurp(p.log_path);
    CHECK(log && strstr(log, "401 unauthorized"));
    CHECK_MSG(log && !strstr(log, FILE_KEY) && !strstr(log, ENV_KEY) &&
                  !strstr(log, "second-key-in-file") && !strstr(log, "wrong-key"),
              "a key appears in the log");
    free(log);
    unlink(p.log_path);

    /* --print-config and the debug config log hide the keys too. */
    char *out = NULL;
    setenv("ATTND_API_KEYS", ENV_KEY, 1);
    const char *pargs[] = {"--model", "demo=config/demo.safetensors", "--print-config", NULL};
    CHECK_INT_EQ(attnd_run(pargs, 10, &out), 0);
    unsetenv("ATTND_API_KEYS");
    CHECK(out && strstr(out, "api-keys = (set, hidden)"));
    CHECK(out && !strstr(out, ENV_KEY));
    free(out);
}

TEST_WITH(metrics_key, const char *key_file)
{
    attnd_proc p;
    const char *args[] = {"--api-key-file", key_file, "--metrics-require-key", "1", NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "attnd with --metrics-require-key did not start");
        return;
    }
    CHECK_INT_EQ(call(&p, "GET", "/metrics", NULL, NULL), 401);
    CHECK_INT_EQ(call(&p, "GET", "/metrics", "Bearer " FILE_KEY, NULL), 200);
    CHECK_INT_EQ(call(&p, "GET", "/healthz", NULL, NULL), 200);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);
}

/* A file anyone may write is refused at start-up, with the reason. */
TEST_WITH(world_writable, const char *key_file, const char *cfg_file)
{
    char *out = NULL;
    chmod(key_file, 0666);
    const char *a[] = {"--model", "demo=config/demo.safetensors", "--listen", "127.0.0.1:0",
                       "--api-key-file", key_file, NULL};
    CHECK(attnd_run(a, 10, &out) != 0);
    CHECK_MSG(out && strstr(out, "world-writable"), "output: %s", out ? out : "");
    free(out);
    chmod(key_file, 0600);

    write_file(cfg_file, "{\"models\": [\"demo=config/demo.safetensors\"]}", 0666);
    const char *b[] = {"--config", cfg_file, "--listen", "127.0.0.1:0", NULL};
    out = NULL;
    CHECK_INT_EQ(attnd_run(b, 10, &out), 2);
    CHECK_MSG(out && strstr(out, "world-writable"), "output: %s", out ? out : "");
    free(out);
}

/* A key file that is named but holds no key is a start-up error naming the
 * file (exit 2), never "authentication off". */
TEST_WITH(keyless_files, const char *key_file)
{
    static const char *const texts[] = {"", "# only a comment\n# and another\n",
                                        "  \n\t\n\r\n   \n"};
    static const char *const what[] = {"empty", "comments only", "whitespace only"};
    for (int i = 0; i < 3; i++) {
        write_file(key_file, texts[i], 0600);
        char *out = NULL;
        const char *a[] = {"--model", "demo=config/demo.safetensors", "--listen", "127.0.0.1:0",
                           "--api-key-file", key_file, NULL};
        int st = attnd_run(a, 10, &out);
        CHECK_MSG(st == 2, "%s key file: exit %d, want 2", what[i], st);
        CHECK_MSG(out && strstr(out, key_file) && strstr(out, "no key"),
                  "%s key file: output does not name the file: %s", what[i], out ? out : "");
        CHECK_MSG(out && !strstr(out, "authentication off"), "%s key file: auth turned off",
                  what[i]);
        printf("  %-20s key file -> exit %d\n", what[i], st);
        free(out);
    }
}

/* Truncating the key file and sending SIGHUP keeps the old keys: the log says
 * so and the reload counts as failed. */
TEST_WITH(reload_truncated, const char *key_file)
{
    write_file(key_file, FILE_KEY "\n", 0600);
    attnd_proc p;
    const char *args[] = {"--api-key-file", key_file, NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "attnd with a key file did not start");
        return;
    }
    CHECK_INT_EQ(call(&p, "GET", "/v1/models", NULL, NULL), 401);
    write_file(key_file, "", 0600); /* truncated, e.g. by a half-done rewrite */
    kill(p.pid, SIGHUP);
    char *log = NULL;
    for (int tries = 0; tries < 100; tries++) {
        usleep(50 * 1000);
        free(log);
        log = slurp(p.log_path);
        if (log && strstr(log, "reload failed"))
            break;
    }
    CHECK_MSG(log && strstr(log, "reload failed") && strstr(log, key_file) &&
                  strstr(log, "keeping the 1 API key(s)"),
              "the log does not say the reload failed and the keys were kept");
    free(log);
    CHECK_INT_EQ(call(&p, "GET", "/v1/models", NULL, NULL), 401);
    CHECK_INT_EQ(call(&p, "GET", "/v1/models", "Bearer " FILE_KEY, NULL), 200);
    http_result r;
    CHECK_INT_EQ(call(&p, "GET", "/metrics", NULL, &r), 200);
    CHECK_MSG(r.body && strstr(r.body, "attnd_reloads_total{result=\"error\"} 1"),
              "the failed reload is not counted");
    http_result_free(&r);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    unlink(p.log_path);
}

int main(void)
{
    char key_file[] = "/tmp/attnd-keys-XXXXXX", cfg_file[] = "/tmp/attnd-cfg-XXXXXX";
    int fd = mkstemp(key_file), fd2 = mkstemp(cfg_file);
    CHECK(fd >= 0 && fd2 >= 0);
    close(fd);
    close(fd2);
    write_file(key_file, "# attnd API keys\n" FILE_KEY "\n\n  second-key-in-file  \n", 0600);
    RUN_WITH(keys, key_file);
    RUN_WITH(metrics_key, key_file);
    RUN_WITH(world_writable, key_file, cfg_file);
    RUN_WITH(keyless_files, key_file);
    RUN_WITH(reload_truncated, key_file);
    unlink(key_file);
    unlink(cfg_file);
    return check_summary();
}
