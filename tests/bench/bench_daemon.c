/* bench_daemon.c — attnd against what it replaces and against its HTTP ceiling, for small
 * requests (T=32, demo model E=64, 8 heads), 16 connections, closed loop, every target driven
 * the same way by wrk (Debian's package; a generated Lua script posts the request files in
 * turn): requests/s, p50, p99 and the ratios attnd/python and attnd/ceiling, with issue 18's
 * small-request targets (>= 50 % of the ceiling, >= 20x the faster PyTorch peer) and issue 28's
 * (>= 25 % of the ceiling with JSON, >= 40 % through v2 binary against its own ceiling; and,
 * from scripts/callgrind-small.sh [--binary] 100 when valgrind is there, <= 0.7M instructions
 * per JSON request and <= 0.35M per binary one — load-independent, unlike the wrk figures).
 *
 * Targets (started at once, measured one after another; each on 127.0.0.1, a free port):
 *   attnd            $BUILD/attnd --model demo=config/demo.safetensors (its defaults)
 *   python           tests/bench/peer_server.py --impl stdlib: ThreadingHTTPServer around
 *                    torch nn.MultiheadAttention(batch_first=True) fed (1, T, E) under eval()
 *                    and inference_mode, PyTorch's fast path (_native_multi_head_attention)
 *   fastapi          the same model behind FastAPI on uvicorn (Debian python3-fastapi/-uvicorn)
 *   ceiling          this binary with --ceiling FILE: libmicrohttpd configured as attnd's
 *                    (epoll, internal thread pool of 2) reading each body and answering a canned
 *                    real attnd response captured at start — no JSON, no compute
 *   attnd v2 binary  the same attnd, POST /v2/models/demo/infer with binary tensors both ways
 *                    (query FP32 [1,32,64] as raw bytes after the JSON header, its length in
 *                    Inference-Header-Content-Length; binary_data_output)
 *   ceiling (binary) the ceiling server answering attnd's canned binary v2 answer to those bodies
 * Each target is measured ROUNDS times, interleaved; the table shows per-target medians of the
 * rounds and the req/s range, and the 1-minute load average before and after (the machine is
 * shared: a busy box shows up there first). Every target gets the same pool of request files
 * (all with id "bench"); each target's answer is checked once by a probe (the peers' output
 * against attnd's within PEER_TOL), and wrk counts non-2xx answers as errors.
 * OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=1 for every child (attnd's per-batch thread count under
 * load), and the peer sets torch.set_num_threads from OPENBLAS_NUM_THREADS.
 * Missing torch/fastapi/uvicorn are installed with scripts/deps.sh when possible, else the row
 * says "not measured: ...". Children die with this process (PR_SET_PDEATHSIG, signal handler).
 *
 * Usage: bench_daemon [seconds-per-round]   (whole seconds, wrk's unit; default
 *        $BENCH_DAEMON_SECONDS, else 2; the section takes about 4 x 3 x (that + 1 s warm-up)
 *        + ~5 s of start-up)
 *        bench_daemon --ceiling RESPONSE_FILE (the ceiling server; prints "PORT n")
 * Binaries: $BUILD/attnd (BUILD defaults to build) and wrk on PATH; the peers run on
 * $BENCH_DAEMON_PYTHON (default /usr/bin/python3, the Debian one with python3-torch).
 */
#include "benchutil.h"
#include "daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SEQ_LEN 32
#define EMBED 64
#define CONCURRENCY 16
#define N_BODIES 8
#define WARMUP_S 1 /* wrk takes whole seconds */
#define ROUNDS 3 /* targets measured round-robin, so background load drifts hit all alike */
#define PEER_START_S 60 /* torch import on a loaded 2-core box can take a while */
#define PEER_TOL 1e-4   /* peer vs attnd output, absolute, as tests/integration compares */

/* ------------------------------------------------------------ children and cleanup */

static volatile pid_t children[8];
static volatile int n_children;

static void track(pid_t pid)
{
    if (n_children < (int)(sizeof children / sizeof children[0])) children[n_children++] = pid;
}

static void untrack(pid_t pid)
{
    for (int i = 0; i < n_children; i++)
        if (children[i] == pid) children[i] = 0;
}

static char work_dir[] = "/tmp/attnd-bench-daemon-XXXXXX"; /* mkdtemp'd in main */

/* SIGINT/SIGTERM/SIGHUP: kill every child still running, say where the logs are, die.
 * Async-signal-safe (kill, write, _exit). */
static void on_signal(int sig)
{
    for (int i = 0; i < n_children; i++)
        if (children[i] > 0) kill(children[i], SIGKILL);
    static const char msg[] = "\nbench_daemon: interrupted; servers killed; logs in ";
    ssize_t w = write(2, msg, sizeof msg - 1);
    w += write(2, work_dir, strlen(work_dir));
    w += write(2, "\n", 1);
    (void)w;
    _exit(128 + sig);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* SIGTERM, up to 5 s, then SIGKILL; reaps. */
static void stop_child(pid_t pid)
{
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    for (double end = now_s() + 5; now_s() < end;) {
        if (waitpid(pid, NULL, WNOHANG) == pid) goto done;
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
done:
    untrack(pid);
}

/* Forks and execs argv with stdout to *out_fd (a pipe; NULL: to the log) and stderr to log.
 * The child dies with us. Returns its pid, or -1. */
static pid_t spawn(char *const argv[], const char *log, int *out_fd)
{
    int pfd[2] = { -1, -1 };
    if (out_fd && pipe(pfd) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        if (out_fd) close(pfd[0]), close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (lfd >= 0) dup2(lfd, 2);
        dup2(out_fd ? pfd[1] : lfd, 1);
        if (out_fd) close(pfd[0]), close(pfd[1]);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    track(pid);
    if (out_fd) {
        close(pfd[1]);
        *out_fd = pfd[0];
    }
    return pid;
}

/* Waits up to timeout_s for the child to print "PORT <n>". Returns n, or -1. */
static int read_port(int fd, double timeout_s)
{
    char line[128];
    size_t n = 0;
    for (double end = now_s() + timeout_s; n < sizeof line - 1;) {
        int left = (int)((end - now_s()) * 1000);
        struct pollfd p = { fd, POLLIN, 0 };
        if (left <= 0 || poll(&p, 1, left) <= 0) return -1;
        ssize_t r = read(fd, line + n, 1);
        if (r <= 0) return -1;
        if (line[n] == '\n') break;
        n++;
    }
    line[n] = 0;
    int port;
    return sscanf(line, "PORT %d", &port) == 1 && port > 0 ? port : -1;
}

static void print_log_tail(const char *what, const char *log)
{
    FILE *f = fopen(log, "r");
    if (!f) return;
    char buf[2048];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    fprintf(stderr, "---- %s log (%s), tail ----\n%s\n----\n", what, log, buf);
}

/* Runs argv to completion (bounded by timeout_s), output to log. Returns the exit status,
 * or -1 (could not run, killed, or timed out). */
static int run_child(char *const argv[], const char *log, double timeout_s)
{
    pid_t pid = spawn(argv, log, NULL);
    if (pid < 0) return -1;
    int st = 0;
    for (double end = now_s() + timeout_s;;) {
        if (waitpid(pid, &st, WNOHANG) == pid) break;
        if (now_s() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            untrack(pid);
            return -1;
        }
        usleep(20000);
    }
    untrack(pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ------------------------------------------------------------ the ceiling server */

static struct MHD_Response *canned;
static int conn_marker;

/* Reads the body (and drops it), then answers the canned response. */
static enum MHD_Result ceiling_request(void *cls, struct MHD_Connection *c, const char *url,
                                       const char *method, const char *version,
                                       const char *upload, size_t *upload_size, void **con_cls)
{
    (void)cls, (void)url, (void)method, (void)version, (void)upload;
    if (*con_cls == NULL) {
        *con_cls = &conn_marker;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        return MHD_YES;
    }
    return MHD_queue_response(c, MHD_HTTP_OK, canned);
}

/* Reads a whole file; caller frees. NULL on failure. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
            *len = fread(buf, 1, (size_t)n, f);
            buf[*len] = 0;
        }
    }
    fclose(f);
    return buf;
}

/* attnd's MHD setup (server/http/http.c), minus everything attnd does per request. */
static int ceiling_main(const char *response_file)
{
    size_t len = 0;
    char *body = slurp(response_file, &len);
    if (!body) {
        fprintf(stderr, "ceiling: cannot read %s\n", response_file);
        return 1;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* MHD's threads inherit the mask */
    canned = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_PERSISTENT);
    if (!canned || MHD_add_response_header(canned, "Content-Type", "application/json") != MHD_YES)
        return 1;
    int epoll = MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES;
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC |
            (epoll ? MHD_USE_EPOLL : MHD_USE_POLL),
        0, NULL, NULL, ceiling_request, NULL, MHD_OPTION_SOCK_ADDR,
        &(struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) },
        MHD_OPTION_THREAD_POOL_SIZE, 2u, MHD_OPTION_END);
    const union MHD_DaemonInfo *info = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (!info) {
        fprintf(stderr, "ceiling: libmicrohttpd did not start\n");
        return 1;
    }
    printf("PORT %u\n", (unsigned)info->port);
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    MHD_stop_daemon(d);
    MHD_destroy_response(canned);
    free(body);
    return 0;
}

/* ------------------------------------------------------------ requests */

static uint64_t rng = 0x9e3779b97f4a7c15ULL; /* bench_rng_sym state */

/* Writes {"id":"bench","query": T×E numbers, 4 decimals, as attnd-load generates} to path.
 * Returns the malloc'd body (caller frees), or NULL. */
static char *write_request(const char *path, size_t *len)
{
    size_t cap = (size_t)SEQ_LEN * EMBED * 10 + 64, n = 0;
    char *p = malloc(cap);
    if (!p) return NULL;
    n += (size_t)snprintf(p, cap, "{\"id\":\"bench\",\"query\":[");
    for (int r = 0; r < SEQ_LEN; r++) {
        p[n++] = r ? ',' : '[';
        if (r) p[n++] = '[';
        for (int c = 0; c < EMBED; c++)
            n += (size_t)snprintf(p + n, cap - n, "%s%.4f", c ? "," : "", bench_rng_sym(&rng));
        p[n++] = ']';
    }
    n += (size_t)snprintf(p + n, cap - n, "]}");
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) {
        free(p);
        return NULL;
    }
    *len = n;
    return p;
}

/* The v2 binary request's JSON header: query FP32 [1,T,E] as raw bytes, answer binary too. */
static const char *binary_header(void)
{
    static char h[256];
    if (!h[0])
        snprintf(h, sizeof h,
                 "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,%d,%d],"
                 "\"parameters\":{\"binary_data_size\":%d}}],"
                 "\"parameters\":{\"binary_data_output\":true}}",
                 SEQ_LEN, EMBED, SEQ_LEN * EMBED * 4);
    return h;
}

/* Writes a v2 binary request (binary_header(), then T×E little-endian float32 values of 4
 * decimals, as write_request's) to path. Returns the malloc'd body, or NULL. */
static char *write_binary_request(const char *path, size_t *len)
{
    const size_t hl = strlen(binary_header()), n = hl + (size_t)SEQ_LEN * EMBED * 4;
    char *p = malloc(n);
    if (!p) return NULL;
    memcpy(p, binary_header(), hl);
    for (int i = 0; i < SEQ_LEN * EMBED; i++) {
        char text[32];
        snprintf(text, sizeof text, "%.4f", bench_rng_sym(&rng));
        float v = strtof(text, NULL);
        memcpy(p + hl + 4 * (size_t)i, &v, 4); /* x86-64 and every machine we run: little-endian */
    }
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) {
        free(p);
        return NULL;
    }
    *len = n;
    return p;
}

/* Largest |a - b| over the two answers' "output" (T×E), or INFINITY if either is malformed. */
static double output_diff(const char *a, const char *b)
{
    json_t *ja = json_loads(a, 0, NULL), *jb = json_loads(b, 0, NULL);
    json_t *oa = json_object_get(ja, "output"), *ob = json_object_get(jb, "output");
    double worst = INFINITY;
    if (json_array_size(oa) == SEQ_LEN && json_array_size(ob) == SEQ_LEN) {
        worst = 0;
        for (size_t r = 0; r < SEQ_LEN; r++) {
            json_t *ra = json_array_get(oa, r), *rb = json_array_get(ob, r);
            if (json_array_size(ra) != EMBED || json_array_size(rb) != EMBED) {
                worst = INFINITY;
                break;
            }
            for (size_t c = 0; c < EMBED; c++) {
                double d = fabs(json_number_value(json_array_get(ra, c)) -
                                json_number_value(json_array_get(rb, c)));
                if (!(d <= worst)) worst = d; /* NaN propagates as "worse" */
            }
        }
    }
    json_decref(ja);
    json_decref(jb);
    return worst;
}

/* ------------------------------------------------------------ targets */

enum { T_ATTND, T_PYTHON, T_FASTAPI, T_CEILING, T_BINARY, T_CEILING_BIN, N_TARGETS };

typedef struct target {
    const char *name, *desc;
    pid_t pid;     /* a child we spawned (0 for attnd: see proc) */
    int port;
    char url[64];
    const char *path;   /* what wrk posts to: /v1/attention unless set */
    const char *script; /* the wrk script (set in run) */
    char log[256];
    char why[512]; /* non-empty: not measured, and why */
    size_t resp_bytes;
    double rps[ROUNDS], p50_ms[ROUNDS], p99_ms[ROUNDS], diff;
    long ok, errors; /* summed over rounds */
} target;

static const char *build_dir(void)
{
    const char *b = getenv("BUILD");
    return b && *b ? b : "build";
}

/* The interpreter with torch: $BENCH_DAEMON_PYTHON, else /usr/bin/python3 (Debian's). */
static char *python_bin(void)
{
    char *p = getenv("BENCH_DAEMON_PYTHON");
    return p && *p ? p : "/usr/bin/python3";
}

/* 0 if python_bin() can import every module in `mods` (space-separated). */
static int python_has(const char *mods, const char *dir)
{
    char code[256], log[300];
    snprintf(code, sizeof code, "import %s", mods);
    for (char *s = code + 7; *s; s++)
        if (*s == ' ') *s = ',';
    snprintf(log, sizeof log, "%s/import.log", dir);
    char *argv[] = { python_bin(), "-c", code, NULL };
    return run_child(argv, log, 60) == 0 ? 0 : -1;
}

/* Makes torch (and, best effort, fastapi+uvicorn) importable; fills t->why where it cannot. */
static void ensure_python(target *py, target *fa, const char *dir)
{
    int have_torch = python_has("torch", dir) == 0;
    int have_fa = have_torch && python_has("fastapi uvicorn pydantic", dir) == 0;
    if (!have_torch || !have_fa) {
        char log[300];
        snprintf(log, sizeof log, "%s/deps.log", dir);
        printf("installing python3-torch python3-fastapi python3-uvicorn (scripts/deps.sh)...\n");
        fflush(stdout);
        char *argv[] = { "/bin/bash", "scripts/deps.sh", "python3-torch", "python3-fastapi",
                         "python3-uvicorn", NULL };
        if (run_child(argv, log, 600) != 0) print_log_tail("scripts/deps.sh", log);
        have_torch = python_has("torch", dir) == 0;
        have_fa = have_torch && python_has("fastapi uvicorn pydantic", dir) == 0;
    }
    if (!have_torch) {
        snprintf(py->why, sizeof py->why, "%s cannot import torch (python3-torch)", python_bin());
        snprintf(fa->why, sizeof fa->why, "%s", py->why);
    } else if (!have_fa) {
        snprintf(fa->why, sizeof fa->why,
                 "%s cannot import fastapi/uvicorn (python3-fastapi, python3-uvicorn)",
                 python_bin());
    }
}

/* Spawns a server that prints "PORT n"; fills t->pid, t->port, t->url or t->why. */
static void start_port_server(target *t, char *const argv[])
{
    int fd = -1;
    t->pid = spawn(argv, t->log, &fd);
    if (t->pid < 0) {
        snprintf(t->why, sizeof t->why, "could not start %s", argv[0]);
        return;
    }
    t->port = read_port(fd, PEER_START_S);
    close(fd);
    if (t->port < 0) {
        print_log_tail(t->name, t->log);
        snprintf(t->why, sizeof t->why, "server did not come up (log %s)", t->log);
        stop_child(t->pid);
        t->pid = 0;
        return;
    }
    snprintf(t->url, sizeof t->url, "http://127.0.0.1:%d", t->port);
}

/* One POST of `body` to t; sets t->resp_bytes and t->diff against attnd's answer `ref`,
 * or t->why when the answer is not a 200 that agrees with attnd within PEER_TOL. */
static void probe(target *t, const char *body, size_t len, const char *ref)
{
    char url[128];
    http_result r;
    snprintf(url, sizeof url, "%s/v1/attention", t->url);
    if (http_do("POST", url, body, len, NULL, &r) != 0) {
        snprintf(t->why, sizeof t->why, "no answer to a probe request");
        return;
    }
    t->resp_bytes = r.body_len;
    t->diff = ref ? output_diff(ref, r.body) : 0;
    if (r.status != 200)
        snprintf(t->why, sizeof t->why, "probe answered %ld", r.status);
    else if (!(t->diff <= PEER_TOL))
        snprintf(t->why, sizeof t->why, "output differs from attnd's by %g > %g", t->diff, PEER_TOL);
    http_result_free(&r);
}

/* Writes the wrk script that posts the request files in turn to /v1/attention, or with
 * binary set, to /v2/models/demo/infer with binary_header()'s length. */
static int write_wrk_script(const char *path, char files[N_BODIES][300], int binary)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "-- bench_daemon: POST each request file in turn\nlocal files = {");
    for (int i = 0; i < N_BODIES; i++) fprintf(f, "%s\"%s\"", i ? ", " : "", files[i]);
    /* init(), not the script's top level: wrk.headers has its Host only from then on */
    fprintf(f, "}\nlocal reqs, n = {}, 0\n"
               "function init(args)\n"
               "  wrk.headers[\"Content-Type\"] = \"%s\"\n",
            binary ? "application/octet-stream" : "application/json");
    if (binary)
        fprintf(f, "  wrk.headers[\"Inference-Header-Content-Length\"] = \"%zu\"\n",
                strlen(binary_header()));
    fprintf(f, "  for i, p in ipairs(files) do\n"
               "    local h = assert(io.open(p, \"rb\"))\n"
               "    reqs[i] = wrk.format(\"POST\", \"%s\", nil, h:read(\"*a\"))\n"
               "    h:close()\n  end\nend\n"
               "function request()\n  n = n %% #reqs + 1\n  return reqs[n]\nend\n",
            binary ? "/v2/models/demo/infer" : "/v1/attention");
    return fclose(f) == 0 ? 0 : -1;
}

/* A wrk latency figure ("1.23ms", "850.00us", "1.02s") in milliseconds, or -1. */
static double wrk_ms(const char *text)
{
    double v;
    char unit[4] = "";
    if (sscanf(text, "%lf%3s", &v, unit) != 2) return -1;
    return strcmp(unit, "us") == 0 ? v / 1e3 : strcmp(unit, "ms") == 0 ? v
                                             : strcmp(unit, "s") == 0   ? v * 1e3 : -1;
}

/* Reads wrk's --latency report in log into round `round` of t (requests/s counting only 2xx
 * answers); 0, or -1 if it is not there. */
static int read_wrk(target *t, int round, const char *log)
{
    FILE *f = fopen(log, "r");
    if (!f) return -1;
    char line[512];
    double rps = -1;
    long requests = 0, non2xx = 0, sock[4] = { 0 };
    while (fgets(line, sizeof line, f)) {
        const char *p = line + strspn(line, " ");
        if (strncmp(p, "50%", 3) == 0) t->p50_ms[round] = wrk_ms(p + 3 + strspn(p + 3, " "));
        if (strncmp(p, "99%", 3) == 0) t->p99_ms[round] = wrk_ms(p + 3 + strspn(p + 3, " "));
        sscanf(p, "Requests/sec: %lf", &rps);
        sscanf(p, "%ld requests in", &requests);
        sscanf(p, "Non-2xx or 3xx responses: %ld", &non2xx);
        sscanf(p, "Socket errors: connect %ld, read %ld, write %ld, timeout %ld", &sock[0],
               &sock[1], &sock[2], &sock[3]);
    }
    fclose(f);
    if (!(rps >= 0)) return -1;
    const long errors = non2xx + sock[0] + sock[1] + sock[2] + sock[3];
    t->rps[round] = requests > 0 ? rps * (double)(requests - non2xx) / (double)requests : 0;
    t->ok += requests - non2xx;
    t->errors += errors;
    return 0;
}

/* Runs wrk -t2 -c16 against t: a warm-up of WARMUP_S, then `seconds` measured (round
 * `round`), both with the same script. */
static void measure(target *t, int round, const char *dir, const char *script, int seconds)
{
    char log[300], dur[32], warm[32], conc[16], url[128];
    snprintf(log, sizeof log, "%s/%s.wrk.log", dir, t->name);
    snprintf(dur, sizeof dur, "%ds", seconds);
    snprintf(warm, sizeof warm, "%ds", WARMUP_S);
    snprintf(conc, sizeof conc, "%d", CONCURRENCY);
    snprintf(url, sizeof url, "%s%s", t->url, t->path ? t->path : "/v1/attention");
    char *argv[] = { "/usr/bin/wrk", "-t2", "-c", conc, "-d", warm, "--timeout", "10s",
                     "--latency", "-s", (char *)script, url, NULL };
    int rc = run_child(argv, log, WARMUP_S + 30);
    argv[5] = dur;
    if (rc == 0) rc = run_child(argv, log, seconds + 30);
    if (rc != 0 || read_wrk(t, round, log) != 0) {
        print_log_tail("wrk", log);
        snprintf(t->why, sizeof t->why, "wrk failed (exit %d, log %s)", rc, log);
    }
}

/* ------------------------------------------------------------ report */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of the ROUNDS values in v (v is left untouched). */
static double median(const double *v)
{
    double s[ROUNDS];
    memcpy(s, v, sizeof s);
    qsort(s, ROUNDS, sizeof s[0], cmp_double);
    return ROUNDS % 2 ? s[ROUNDS / 2] : (s[ROUNDS / 2 - 1] + s[ROUNDS / 2]) / 2;
}

/* a/b in requests/s; goal > 0: say whether it is met; percent: as a share of b. */
static void print_ratio(const char *what, const target *a, const target *b, double goal,
                        int percent)
{
    printf("  %-34s", what);
    if (a->why[0] || b->why[0] || !(median(b->rps) > 0)) {
        printf(" not measured\n");
        return;
    }
    double r = median(a->rps) / median(b->rps);
    printf(" %7.2fx", r);
    if (goal > 0) printf("   (target >= %gx: %s)", goal, r >= goal ? "met" : "NOT met");
    if (percent) printf("   (%.0f%% of the HTTP ceiling)", 100 * r);
    printf("\n");
}

/* Issue 18's small-request targets: attnd >= 50 % of the ceiling and >= 20x the faster of
 * the two PyTorch peers (the one a careful engineer would deploy). */
/* One share-of-the-ceiling target: a's requests/s >= goal x c's. */
static void ceiling_target(const char *what, const target *a, const target *c, double goal)
{
    char got[96];
    const int have = !a->why[0] && !c->why[0] && median(c->rps) > 0;
    snprintf(got, sizeof got, "%.0f%% (%.0f / %.0f req/s)",
             have ? 100 * median(a->rps) / median(c->rps) : 0, median(a->rps), median(c->rps));
    bench_target(what, have ? got : "not measured (see bench_daemon)",
                 have ? median(a->rps) >= goal * median(c->rps) : -1);
}

/* Issue 28's instruction targets: scripts/callgrind-small.sh [--binary] 100 (valgrind),
 * its "callgrind: N instructions per ..." line against the limit. */
static void callgrind_target(const char *what, int binary, long limit, const char *dir)
{
    char log[300], line[512], got[96];
    snprintf(log, sizeof log, "%s/callgrind-%s.log", dir, binary ? "binary" : "json");
    char *argv[] = { "/bin/bash", "scripts/callgrind-small.sh", binary ? "--binary" : "100",
                     binary ? "100" : NULL, NULL };
    if (access("/usr/bin/valgrind", X_OK) != 0) {
        bench_target(what, "not measured: no valgrind (scripts/deps.sh)", -1);
        return;
    }
    long n = -1;
    if (run_child(argv, log, 900) == 0) {
        FILE *f = fopen(log, "r");
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "callgrind: %ld instructions", &n) == 1) break;
        if (f) fclose(f);
    }
    if (n < 0) {
        print_log_tail("callgrind-small.sh", log);
        bench_target(what, "not measured: callgrind-small.sh failed", -1);
        return;
    }
    printf("callgrind-small.sh%s: %ld instructions per request (log %s)\n",
           binary ? " --binary" : "", n, log);
    snprintf(got, sizeof got, "%.2fM instructions/request", n / 1e6);
    bench_target(what, got, n <= limit);
}

static void report_targets(const target *t)
{
    char got[96];
    const target *a = &t[T_ATTND], *c = &t[T_CEILING];
    const int have_c = !a->why[0] && !c->why[0] && median(c->rps) > 0;
    snprintf(got, sizeof got, "%.0f%% (%.0f / %.0f req/s)",
             have_c ? 100 * median(a->rps) / median(c->rps) : 0, median(a->rps), median(c->rps));
    bench_target("small requests (T=32,E=64,16 conn) >= 50% of MHD ceiling",
                 have_c ? got : "not measured (see bench_daemon)",
                 have_c ? median(a->rps) >= 0.5 * median(c->rps) : -1);
    const target *peer = NULL;
    for (int i = T_PYTHON; i <= T_FASTAPI; i++)
        if (!t[i].why[0] && median(t[i].rps) > 0 && (!peer || median(t[i].rps) > median(peer->rps)))
            peer = &t[i];
    const int have_p = !a->why[0] && peer;
    snprintf(got, sizeof got, "%.1fx (%s %.0f req/s)",
             have_p ? median(a->rps) / median(peer->rps) : 0, peer ? peer->name : "", peer ? median(peer->rps) : 0);
    bench_target("small requests >= 20x the faster PyTorch peer (wrk)",
                 have_p ? got : "not measured (see bench_daemon)",
                 have_p ? median(a->rps) >= 20 * median(peer->rps) : -1);
    ceiling_target("issue 28: small JSON requests >= 25% of MHD ceiling", a, c, 0.25);
    ceiling_target("issue 28: v2 binary requests >= 40% of their ceiling", &t[T_BINARY],
                   &t[T_CEILING_BIN], 0.40);
}

static void print_table(const target *t, int seconds, double load0, double load1)
{
    printf("T=%d E=%d (demo model, 8 heads), %d connections (wrk -t2), closed loop, keep-alive; "
           "%d rounds of %d s (+%d s warm-up) per target, interleaved; medians over rounds\n",
           SEQ_LEN, EMBED, CONCURRENCY, ROUNDS, seconds, WARMUP_S);
    printf("%-44s %9s %17s %8s %8s %7s %7s\n", "target", "req/s", "(range)", "p50 ms", "p99 ms",
           "errors", "resp B");
    for (int i = 0; i < N_TARGETS; i++) {
        printf("%-44s", t[i].desc);
        if (t[i].why[0]) {
            printf(" not measured: %s\n", t[i].why);
            continue;
        }
        double lo = t[i].rps[0], hi = t[i].rps[0];
        for (int r = 1; r < ROUNDS; r++) {
            lo = t[i].rps[r] < lo ? t[i].rps[r] : lo;
            hi = t[i].rps[r] > hi ? t[i].rps[r] : hi;
        }
        char range[32];
        snprintf(range, sizeof range, "(%.0f-%.0f)", lo, hi);
        printf(" %9.1f %17s %8.2f %8.2f %7ld %7zu\n", median(t[i].rps), range,
               median(t[i].p50_ms), median(t[i].p99_ms), t[i].errors, t[i].resp_bytes);
    }
    printf("load average (1 min) before/after: %.2f / %.2f on %ld CPUs\n", load0, load1,
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("ratios (requests/s):\n");
    print_ratio("attnd / python http.server+torch", &t[T_ATTND], &t[T_PYTHON], 20, 0);
    print_ratio("attnd / fastapi+uvicorn+torch", &t[T_ATTND], &t[T_FASTAPI], 20, 0);
    print_ratio("attnd / MHD ceiling", &t[T_ATTND], &t[T_CEILING], 0.5, 1);
    print_ratio("attnd v2 binary / its MHD ceiling", &t[T_BINARY], &t[T_CEILING_BIN], 0.4, 1);
    for (int i = T_PYTHON; i <= T_FASTAPI; i++)
        if (!t[i].why[0])
            printf("  %s agrees with attnd: max |output diff| = %.2g\n", t[i].name, t[i].diff);
    report_targets(t);
}

/* The v2 binary pair: attnd's answer to one binary request (must be 200) becomes the canned
 * answer of a second ceiling server; fills their why on failure. */
static void start_binary(target *t, const char *base_url, const char *dir, const char *self,
                         int have_self, const char *body, size_t len)
{
    char url[128], hdr[64], canned[300];
    snprintf(url, sizeof url, "%s/v2/models/demo/infer", base_url);
    snprintf(hdr, sizeof hdr, "Inference-Header-Content-Length: %zu", strlen(binary_header()));
    const char *headers[] = { hdr, NULL };
    http_result r;
    if (http_do_ex("POST", url, body, len, "application/octet-stream", headers, NULL, &r) != 0) {
        snprintf(t[T_BINARY].why, sizeof t[T_BINARY].why, "no answer to a binary probe");
        snprintf(t[T_CEILING_BIN].why, sizeof t[T_CEILING_BIN].why, "no binary answer to can");
        return;
    }
    t[T_BINARY].resp_bytes = r.body_len;
    snprintf(canned, sizeof canned, "%s/canned-v2bin.bin", dir);
    FILE *f = r.status == 200 ? fopen(canned, "wb") : NULL;
    int wrote = f && fwrite(r.body, 1, r.body_len, f) == r.body_len;
    if (f && fclose(f) != 0) wrote = 0;
    if (r.status != 200) {
        snprintf(t[T_BINARY].why, sizeof t[T_BINARY].why, "binary probe answered %ld", r.status);
        snprintf(t[T_CEILING_BIN].why, sizeof t[T_CEILING_BIN].why, "no binary answer to can");
    } else if (!wrote || !have_self) {
        snprintf(t[T_CEILING_BIN].why, sizeof t[T_CEILING_BIN].why, "cannot write %s", canned);
    } else {
        char *ce_argv[] = { (char *)self, "--ceiling", canned, NULL };
        start_port_server(&t[T_CEILING_BIN], ce_argv);
        if (!t[T_CEILING_BIN].why[0]) probe(&t[T_CEILING_BIN], body, len, NULL);
    }
    http_result_free(&r);
}

/* ------------------------------------------------------------ main */

static int run(int seconds, const char *dir)
{
    static target t[N_TARGETS] = {
        [T_ATTND] = { .name = "attnd", .desc = "attnd (defaults: 2 workers, batching on)" },
        [T_PYTHON] = { .name = "python", .desc = "python http.server + torch MHA (1 thread)" },
        [T_FASTAPI] = { .name = "fastapi", .desc = "python FastAPI/uvicorn + torch MHA (1 thr)" },
        [T_CEILING] = { .name = "ceiling", .desc = "HTTP ceiling: MHD, canned attnd answer" },
        [T_BINARY] = { .name = "attnd-v2bin", .desc = "attnd, v2 infer, binary tensors both ways",
                       .path = "/v2/models/demo/infer" },
        [T_CEILING_BIN] = { .name = "ceiling-v2bin", .desc = "HTTP ceiling, canned binary v2 answer" },
    };
    for (int i = 0; i < N_TARGETS; i++)
        snprintf(t[i].log, sizeof t[i].log, "%s/%s.log", dir, t[i].name);
    char files[N_BODIES][300], bfiles[N_BODIES][300], script[300], bscript[300];
    char *bodies[N_BODIES] = { 0 }, *bbodies[N_BODIES] = { 0 };
    size_t lens[N_BODIES], blens[N_BODIES];
    int rc = 1;
    for (int i = 0; i < N_BODIES; i++) {
        snprintf(files[i], sizeof files[i], "%s/request%d.json", dir, i);
        snprintf(bfiles[i], sizeof bfiles[i], "%s/request%d.bin", dir, i);
        if (!(bodies[i] = write_request(files[i], &lens[i])) ||
            !(bbodies[i] = write_binary_request(bfiles[i], &blens[i])))
            goto done;
    }
    snprintf(script, sizeof script, "%s/post.lua", dir);
    snprintf(bscript, sizeof bscript, "%s/post-v2bin.lua", dir);
    if (write_wrk_script(script, files, 0) != 0 || write_wrk_script(bscript, bfiles, 1) != 0)
        goto done;
    for (int i = 0; i < N_TARGETS; i++)
        t[i].script = i == T_BINARY || i == T_CEILING_BIN ? bscript : script;
    ensure_python(&t[T_PYTHON], &t[T_FASTAPI], dir);

    /* The peers first: their torch import overlaps attnd's start. */
    char peer[] = "tests/bench/peer_server.py";
    char *py_argv[] = { python_bin(), peer, "--impl", "stdlib", NULL };
    char *fa_argv[] = { python_bin(), peer, "--impl", "fastapi", NULL };
    if (!t[T_PYTHON].why[0]) start_port_server(&t[T_PYTHON], py_argv);
    if (!t[T_FASTAPI].why[0]) start_port_server(&t[T_FASTAPI], fa_argv);

    attnd_proc ap;
    const char *args[] = { "--log-level", "warn", NULL };
    if (attnd_proc_start(&ap, args) != 0) {
        fprintf(stderr, "bench_daemon: attnd did not start\n");
        goto done;
    }
    track(ap.pid);
    snprintf(t[T_ATTND].url, sizeof t[T_ATTND].url, "%s", ap.base_url);
    snprintf(t[T_BINARY].url, sizeof t[T_BINARY].url, "%s", ap.base_url);

    /* attnd's real answer to request 0: the canned ceiling body and the peers' reference. */
    char url[128], canned_path[300];
    http_result ref;
    snprintf(url, sizeof url, "%s/v1/attention", ap.base_url);
    snprintf(canned_path, sizeof canned_path, "%s/canned.json", dir);
    if (http_do("POST", url, bodies[0], lens[0], NULL, &ref) != 0 || ref.status != 200) {
        fprintf(stderr, "bench_daemon: attnd did not answer the probe request\n");
        goto stop;
    }
    t[T_ATTND].resp_bytes = ref.body_len;
    FILE *f = fopen(canned_path, "wb");
    int wrote = f && fwrite(ref.body, 1, ref.body_len, f) == ref.body_len;
    if (f && fclose(f) != 0) wrote = 0;
    char self[512];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (!wrote || sl <= 0) {
        snprintf(t[T_CEILING].why, sizeof t[T_CEILING].why, "cannot write %s", canned_path);
    } else {
        self[sl] = 0;
        char *ce_argv[] = { self, "--ceiling", canned_path, NULL };
        start_port_server(&t[T_CEILING], ce_argv);
    }
    for (int i = T_PYTHON; i <= T_CEILING; i++)
        if (!t[i].why[0]) probe(&t[i], bodies[0], lens[0], i == T_CEILING ? NULL : ref.body);
    http_result_free(&ref);
    start_binary(t, ap.base_url, dir, self, sl > 0, bbodies[0], blens[0]);

    const int order[N_TARGETS] = { T_ATTND, T_CEILING, T_BINARY, T_CEILING_BIN, T_PYTHON, T_FASTAPI };
    double load0 = bench_loadavg();
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < N_TARGETS; k++)
            if (!t[order[k]].why[0]) measure(&t[order[k]], r, dir, t[order[k]].script, seconds);
    print_table(t, seconds, load0, bench_loadavg());
    callgrind_target("issue 28: <= 0.7M instructions per T=32/E=64 JSON request", 0, 700000, dir);
    callgrind_target("issue 28: <= 0.35M instructions per v2 binary request", 1, 350000, dir);
    rc = t[T_ATTND].why[0] || t[T_ATTND].ok == 0 ? 1 : 0;
stop:
    for (int i = T_PYTHON; i < N_TARGETS; i++) stop_child(t[i].pid);
    untrack(ap.pid);
    attnd_proc_stop(&ap);
done:
    for (int i = 0; i < N_BODIES; i++) free(bodies[i]), free(bbodies[i]);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--ceiling") == 0) return ceiling_main(argv[2]);
    bench_start("bench_daemon");
    const char *env_s = getenv("BENCH_DAEMON_SECONDS");
    int seconds = argc > 1 ? atoi(argv[1]) : env_s ? atoi(env_s) : 2;
    if (!(seconds > 0 && seconds <= 30)) {
        fprintf(stderr, "usage: %s [whole seconds per round, 1..30] | --ceiling FILE\n", argv[0]);
        return 2;
    }
    if (access("/usr/bin/wrk", X_OK) != 0) {
        printf("wrk missing; trying scripts/deps.sh --bench\n");
        fflush(stdout);
        if (system("bash scripts/deps.sh --bench >&2") != 0 || access("/usr/bin/wrk", X_OK) != 0) {
            bench_target("small requests (T=32,E=64,16 conn) >= 50% of MHD ceiling",
                         "not measured: no /usr/bin/wrk (Debian package wrk)", -1);
            return 1;
        }
    }
    char bin[512];
    if (getenv("ATTND_BIN") == NULL) {
        snprintf(bin, sizeof bin, "%s/attnd", build_dir());
        setenv("ATTND_BIN", bin, 1);
    }
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    printf("OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 for every server; the peers set "
           "torch.set_num_threads from it\n");
    fflush(stdout);
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    char *dir = work_dir;
    if (!mkdtemp(dir)) {
        perror("bench_daemon: mkdtemp");
        return 1;
    }
    int rc = run(seconds, dir);
    if (rc == 0) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "bench_daemon: could not remove %s\n", dir);
    } else {
        fprintf(stderr, "bench_daemon: logs kept in %s\n", dir);
    }
    return rc;
}
