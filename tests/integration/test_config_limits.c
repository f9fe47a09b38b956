/* test_config_limits.c — every size, count and duration option refuses values
 * out of its range with exit 2 and a message naming it, never wrapping: a
 * negative size with a suffix (once signed overflow, 1 GiB in release builds),
 * sizes past int64, counts past their cap (--workers 257..1024 once passed the
 * option check and failed later at start-up).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    CHECK_MSG(out && strstr(out, "max-body-bytes = 67108864") && strstr(out, "workers = 256"),
              "%s", out ? out : "");
    free(out);
}

int main(void)
{
    RUN(out_of_range_values);
    RUN(in_range_values_still_start);
    return check_summary();
}
