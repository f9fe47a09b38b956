/* fuzz_http.c — libFuzzer target: arbitrary bytes as a whole HTTP request
 * (request line, headers, body) answered in-process by the daemon's handler
 * path on the demo model. See fuzz_http_entry.h and README.md.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_http_entry.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inproc *daemon_in_process;

static void release(void) { inproc_stop(daemon_in_process); }

/* Starts the in-process daemon once; ATTND_FUZZ_DEMO overrides the demo's path. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *path = getenv("ATTND_FUZZ_DEMO");
    char why[FUZZ_BUG_MAX] = "";
    daemon_in_process = fuzz_http_start(path ? path : "config/demo.safetensors", why);
    if (!daemon_in_process) {
        fprintf(stderr, "fuzz_http: %s (run from the repository root)\n", why);
        exit(2);
    }
    atexit(release);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char bug[FUZZ_BUG_MAX];
    if (fuzz_http_one(daemon_in_process, data, size, bug)) {
        fprintf(stderr, "fuzz_http: invariant broken: %s\n", bug);
        abort();
    }
    return 0;
}
