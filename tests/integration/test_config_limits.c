/* test_config_limits.c — what an operator can get wrong at start-up and reload:
 * every size, count and duration option refuses values out of its range with
 * exit 2 and a message naming it, never wrapping (a negative size with a suffix
 * was signed overflow, 1 GiB in release builds; --workers 257..1024 passed the
 * option check and failed later); a FIFO as a model path is refused at once,
 * and one swapped in before SIGHUP fails that reload without wedging the
 * daemon (open() used to block there, with SIGTERM ignored).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"

TEST(out_of_range_values)
{
    static const struct {
        const char *flag, *value;
    } bad[] = {
        {"--max-body-bytes", "-17179869183G"}, {"--max-body-bytes", "99999999999999G"},
        {"--max-body-bytes", "9223372036854775808"}, {"--kv-cache-bytes", "-1K"},
        {"--max-inflight-bytes", "8589934592G"}, {"--workers", "257"},
        {"--workers", "1024"}, {"--workers", "0"},
        {"--max-queue-delay-us", "-5"}, {"--connection-timeout-s", "99999999999"},
        {"--max-batch-kv-bytes", "0"}, {"--session-ttl-s", "-1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *args[] = {"--model", "demo=config/demo.safetensors", "--listen",
                              "127.0.0.1:0", bad[i].flag, bad[i].value, NULL};
        char *out = NULL;
        int rc = attnd_run(args, 20, &out);
        CHECK_MSG(rc == 2, "%s %s: exit %d", bad[i].flag, bad[i].value, rc);
        CHECK_MSG(out && strstr(out, bad[i].flag + 2), "%s %s: message lacks the option: %s",
                  bad[i].flag, bad[i].value, out ? out : "");
        free(out);
    }
}

TEST(in_range_values_still_start)
{
    const char *args[] = {"--model", "demo=config/demo.safetensors", "--listen", "127.0.0.1:0",
                          "--max-body-bytes", "64MiB", "--workers", "256", "--print-config",
                          NULL};
    char *out = NULL;
    CHECK_INT_EQ(attnd_run(args, 20, &out), 0);
    CHECK_MSG(out && strstr(out, "max-body-bytes = 64M  (flag, = default)") &&
                  strstr(out, "workers = 256"),
              "%s", out ? out : "");
    free(out);
}

/* A temp dir with the demo layer copied in as model.safetensors. */
static void temp_model(char *dir, size_t cap, char *path, size_t pcap)
{
    snprintf(dir, cap, "/tmp/attnd-fifo-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, pcap, "%s/model.safetensors", dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cp config/demo.safetensors %s", path);
    CHECK(system(cmd) == 0);
}

TEST(fifo_model_at_start)
{
    char dir[64], path[128];
    temp_model(dir, sizeof dir, path, sizeof path);
    unlink(path);
    CHECK(mkfifo(path, 0600) == 0);
    char spec[200];
    snprintf(spec, sizeof spec, "x=%s", path);
    const char *args[] = {"--model", spec, "--listen", "127.0.0.1:0", NULL};
    char *out = NULL;
    time_t t0 = time(NULL);
    CHECK_INT_EQ(attnd_run(args, 15, &out), 1); /* a model that does not load: exit 1 */
    CHECK(time(NULL) - t0 < 10);
    CHECK_MSG(out && strstr(out, "not a regular file"), "%s", out ? out : "");
    free(out);
    unlink(path);
    rmdir(dir);
}

TEST(fifo_swapped_in_before_sighup)
{
    char dir[64], path[128], spec[200];
    temp_model(dir, sizeof dir, path, sizeof path);
    snprintf(spec, sizeof spec, "x=%s", path);
    attnd_proc p;
    const char *args[] = {"--model", spec, NULL};
    if (attnd_proc_start(&p, args) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    unlink(path);
    CHECK(mkfifo(path, 0600) == 0);
    kill(p.pid, SIGHUP);
    int answered = 0;
    for (int i = 0; i < 50 && !answered; i++) { /* the failed reload is counted */
        char url[128];
        snprintf(url, sizeof url, "%s/metrics", p.base_url);
        http_result r;
        if (http_do("GET", url, NULL, 0, NULL, &r) == 0 && r.status == 200 &&
            strstr(r.body, "attnd_reloads_total{result=\"error\"} 1"))
            answered = 1;
        if (r.body)
            http_result_free(&r);
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    CHECK_MSG(answered, "no failed reload counted within 5 s");
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models/x", p.base_url);
    http_result r;
    CHECK(http_do("GET", url, NULL, 0, NULL, &r) == 0 && r.status == 200); /* still serving */
    http_result_free(&r);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0); /* SIGTERM still works */
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    RUN(out_of_range_values);
    RUN(in_range_values_still_start);
    RUN(fifo_model_at_start);
    RUN(fifo_swapped_in_before_sighup);
    return check_summary();
}
