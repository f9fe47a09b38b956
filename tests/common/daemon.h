/* daemon.h — test helpers that start a real attnd process and talk HTTP to it
 * (libcurl for ordinary requests, a raw socket for malformed ones).
 * Used by the integration tests and any test that needs a live daemon.
 */
#ifndef ATTND_TEST_DAEMON_H
#define ATTND_TEST_DAEMON_H

#include <stddef.h>
#include <sys/types.h>

typedef struct attnd_proc {
    pid_t pid;
    int port;
    char base_url[64];   /* "http://127.0.0.1:<port>"                      */
    char log_path[256];  /* stdout+stderr; kept after stop, removed at exit */
} attnd_proc;

/* Starts $ATTND_BIN (default build/attnd) on 127.0.0.1:<free port> with
 * --model demo=$ATTND_DEMO_MODEL (default config/demo.safetensors) plus
 * extra_args (NULL-terminated, may be NULL; if extra_args contains "--model" or
 * "--config" the default model is not added), logs to a temp file (removed when
 * the test process exits, kept with ATTND_TEST_KEEP_LOGS=1), waits up to
 * 15 s for GET /readyz == 200. Returns 0, or -1 (the log's tail is printed to
 * stderr and the process, if any, is killed). */
int attnd_proc_start(attnd_proc *p, const char *const *extra_args);

/* SIGTERM, wait up to 10 s, then SIGKILL. Returns the exit status (0..255),
 * 128+signal if it died of a signal, or -1 when it had to be killed / on error. */
int attnd_proc_stop(attnd_proc *p);

/* Runs $ATTND_BIN with args (NULL-terminated, used verbatim: no defaults added)
 * to completion, bounded by timeout_s seconds (then SIGKILL and -1).
 * Returns the exit status as attnd_proc_stop does; *output (may be NULL) gets
 * the malloc'd NUL-terminated stdout+stderr, which the caller frees. */
int attnd_run(const char *const *args, int timeout_s, char **output);

typedef struct http_result {
    long status;
    char *body;              /* NUL-terminated, malloc'd                    */
    size_t body_len;
    size_t body_cap;         /* bytes allocated for body (it grows by doubling) */
    char content_type[128];
    char retry_after[32];
    char allow[64];          /* the Allow header, "" when absent            */
    char www_authenticate[64]; /* the WWW-Authenticate header, "" when absent */
    char headers[4096];      /* every header line of the final response, raw  */
} http_result;

/* The value of response header name (case-insensitive) copied into out (cap
 * bytes). Returns 1, or 0 (out "") when r has no such header. */
int http_header(const http_result *r, const char *name, char *out, size_t cap);

/* One blocking libcurl request (30 s timeout); body may be NULL.
 * content_type NULL = application/json. Returns 0 if a response came back (any
 * status), -1 on transport error. Free with http_result_free. */
int http_do(const char *method, const char *url, const char *body, size_t body_len,
            const char *content_type, http_result *out);
void http_result_free(http_result *r);

/* http_do with extra request headers ("Name: value", NULL-terminated, may be
 * NULL) and, for https URLs, a CA certificate file to trust (NULL = system). */
int http_do_ex(const char *method, const char *url, const char *body, size_t body_len,
               const char *content_type, const char *const *headers, const char *ca_file,
               http_result *out);

/* The value of p's first /metrics sample line starting with prefix (e.g.
 * "attnd_sessions " or "attnd_prefill_pieces_total{model=\"demo\"} "), or -1
 * when none does or the scrape fails. */
double attnd_proc_metric(const attnd_proc *p, const char *prefix);

/* One request to p at path with "Authorization: auth" (auth NULL: no header)
 * and body (NULL: none). Returns the status, -1 on transport error; *keep (may
 * be NULL) gets the result, which the caller frees with http_result_free. */
long attnd_call(const attnd_proc *p, const char *method, const char *path, const char *auth,
                const char *body, http_result *keep);

/* Writes an nn.MultiheadAttention checkpoint of embed e whose weights are all
 * zeros, as a sparse file (only the header is written: a large e costs no disk
 * but takes the loader its full read). Returns 0, or -1 on an I/O error. */
int attnd_write_zero_mha(const char *path, int e);

/* One http_do request (body NULL: none) whose answer is parsed as JSON; *status
 * gets the HTTP status (-1 on transport error). Returns the JSON (the caller
 * json_decrefs it), or NULL when the answer had no body or no JSON. */
struct json_t *attnd_http_json(const char *method, const char *url, const char *body,
                               long *status);

/* Sends raw bytes to 127.0.0.1:port, reads until the peer closes or timeout_ms
 * of silence, and returns the malloc'd NUL-terminated reply (caller frees) or
 * NULL on connection failure. For requests curl will not send (no length,
 * hand-made chunking). The status is parsed by http_raw_status. */
char *http_raw(int port, const char *request, size_t len, int timeout_ms);
/* The status code of a raw "HTTP/1.1 NNN ..." reply, or -1. */
int http_raw_status(const char *reply);

/* A TCP connection to 127.0.0.1:port, or -1. */
int attnd_connect_local(int port);

/* A TCP port free on 127.0.0.1 right now, or -1. */
int attnd_free_port(void);

/* The whole file at path, malloc'd and NUL-terminated (caller frees), or NULL
 * when it cannot be read. */
char *attnd_slurp(const char *path);

/* Sleeps ms milliseconds. */
void attnd_sleep_ms(int ms);

/* The number after "field:" in /proc/PID/status ("VmRSS" in kB, "Threads"),
 * or -1 when the process or the field is not there. */
long attnd_proc_status(pid_t pid, const char *field);

#endif
