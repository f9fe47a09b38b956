/* metrics.c — the Prometheus registry: per-model counters and histograms in
 * plain arrays of relaxed atomics, rendered to text on scrape.
 * Histograms store integer observations (ns or counts) and a scale for output.
 */
#include "core/metrics.h"

#include <dirent.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_BUCKETS 20

/* A family of histograms sharing bucket bounds. Bounds are in the unit the
 * observations arrive in (ns for durations); scale turns them into the
 * exported unit (seconds). */
typedef struct hist_def {
    const char *name, *help;
    int n_bounds;
    int64_t bounds[MAX_BUCKETS];
    double scale;
} hist_def;

#define MS INT64_C(1000000)
static const hist_def duration_buckets = {
    NULL, NULL, 16,
    {100000, 250000, 500000, 1 * MS, 2500000, 5 * MS, 10 * MS, 25 * MS, 50 * MS, 100 * MS,
     250 * MS, 500 * MS, 1000 * MS, 2500 * MS, 5000 * MS, 10000 * MS},
    1e-9};

enum { H_REQUEST, H_QUEUE, H_COMPUTE, H_BATCH_SIZE, H_BATCH_TOKENS, H_SESSION_APPEND, H_COUNT };

static hist_def hist_defs[H_COUNT];

static void init_defs(void)
{
    hist_defs[H_REQUEST] = duration_buckets;
    hist_defs[H_REQUEST].name = "attnd_request_duration_seconds";
    hist_defs[H_REQUEST].help = "Time from request arrival to response, attention routes.";
    hist_defs[H_QUEUE] = duration_buckets;
    hist_defs[H_QUEUE].name = "attnd_queue_duration_seconds";
    hist_defs[H_QUEUE].help = "Time a computed request waited in the queue for its batch.";
    hist_defs[H_COMPUTE] = duration_buckets;
    hist_defs[H_COMPUTE].name = "attnd_compute_duration_seconds";
    hist_defs[H_COMPUTE].help = "Compute time of the batch each request ran in, per request.";
    hist_defs[H_BATCH_SIZE] = (hist_def){"attnd_batch_size",
                                         "Requests per computed batch.",
                                         10,
                                         {1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
                                         1.0};
    hist_defs[H_BATCH_TOKENS] = (hist_def){"attnd_batch_tokens",
                                           "Tokens (query + key positions) per computed batch.",
                                           9,
                                           {16, 64, 256, 1024, 4096, 16384, 65536, 262144,
                                            1048576},
                                           1.0};
    hist_defs[H_SESSION_APPEND] = duration_buckets;
    hist_defs[H_SESSION_APPEND].name = "attnd_session_append_duration_seconds";
    hist_defs[H_SESSION_APPEND].help = "Session appends: decode, queue, compute and commit.";
}

typedef struct hist {
    _Atomic uint64_t buckets[MAX_BUCKETS + 1]; /* non-cumulative; last is +Inf */
    _Atomic uint64_t sum;
} hist;

/* Status codes with their own requests_total slot; others count as "other". */
static const int statuses[] = {200, 400, 401, 403, 404, 405, 408, 411, 413,
                               415, 422, 429, 500, 501, 503, 504, 201, 204, 409, 410};
#define N_STATUS (sizeof statuses / sizeof statuses[0] + 1)


/* The scheduler's per-model counters: the decode loop's
 * (attnd_metrics_decode_iteration), and requests computed inline. */
enum { L_ITERATIONS, L_BUSY_US, L_STEPS, L_PIECES, L_PIECE_ROWS, L_INLINE, L_COUNT };
static const struct {
    const char *name, *help;
    double scale; /* the family's unit per count */
} sched_defs[L_COUNT] = {
    {"attnd_decode_iterations_total",
     "Iterations of the model's decode loop (batches of session appends, with at most one prefill piece each).", 1},
    {"attnd_decode_busy_seconds_total",
     "Compute time of those iterations: its rate is the share of time the loop computes.", 1e-6},
    {"attnd_decode_steps_total",
     "Whole session appends those iterations computed (steps / iterations is the mean iteration's).", 1},
    {"attnd_prefill_pieces_total",
     "Pieces of chunked prefills (long appends and long causal one-shots, --prefill-chunk-rows) computed.", 1},
    {"attnd_prefill_piece_rows_total", "Rows computed in those pieces.", 1},
    {"attnd_inline_requests_total",
     "Small stateless requests computed on the HTTP thread that read them (--inline-max-macs), not by a worker.", 1},
};

typedef struct model_slot {
    char name[80];
    _Atomic int named;            /* 0: a reserved slot, not rendered yet        */
    _Atomic int loaded;
    attn_layer_info info;
    hist h[H_COUNT];
    _Atomic uint64_t sched[L_COUNT]; /* the scheduler's counters (sched_defs) */
} model_slot;

struct attnd_metrics {
    int n_models;
    int n_routes;
    const char *const *route_labels; /* n_routes, borrowed (static)            */
    model_slot *models;           /* n_models                                   */
    _Atomic uint64_t *requests;   /* [(n_models+1) * n_routes * N_STATUS]       */
    _Atomic int64_t in_flight;
    _Atomic uint64_t reloads[2];  /* [0] error, [1] ok                          */
    _Atomic uint64_t offloaded[2]; /* codec work off the HTTP threads: [0] decode, [1] encode */
    _Atomic int64_t sessions;     /* streaming sessions held                    */
    _Atomic int64_t kv_bytes;     /* their KV cache bytes (pages in use)        */
    _Atomic int64_t kv_capacity;  /* the page pool's bytes                      */
    _Atomic int64_t retired_versions, retired_bytes; /* old versions still held */
    _Atomic uint64_t evictions[ATTND_EVICT_COUNT]; /* by attnd_eviction         */
    _Atomic uint64_t repo[2][2];  /* [0 unload, 1 load][0 error, 1 ok]          */
    double start_time_s;
};

attnd_metrics *attnd_metrics_create(int n_models, const char *const *names, int n_routes,
                                    const char *const *route_labels)
{
    static pthread_once_t defs_once = PTHREAD_ONCE_INIT;
    pthread_once(&defs_once, init_defs);
    attnd_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->n_models = n_models;
    m->n_routes = n_routes > 0 ? n_routes : 0;
    m->route_labels = route_labels;
    m->models = calloc((size_t)(n_models > 0 ? n_models : 1), sizeof *m->models);
    m->requests = calloc((size_t)(n_models + 1) * (size_t)(m->n_routes ? m->n_routes : 1) *
                             N_STATUS, sizeof *m->requests);
    if (!m->models || !m->requests)
        goto fail;
    for (int i = 0; i < n_models; i++)
        if (names[i])
            attnd_metrics_name_model(m, i, names[i]);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    m->start_time_s = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return m;
fail:
    attnd_metrics_free(m);
    return NULL;
}

void attnd_metrics_free(attnd_metrics *m)
{
    if (!m)
        return;
    free(m->models);
    free(m->requests);
    free(m);
}

void attnd_metrics_name_model(attnd_metrics *m, int model, const char *name)
{
    if (model < 0 || model >= m->n_models || atomic_load(&m->models[model].named))
        return;
    snprintf(m->models[model].name, sizeof m->models[model].name, "%s", name);
    atomic_store_explicit(&m->models[model].named, 1, memory_order_release);
}

void attnd_metrics_rename_model(attnd_metrics *m, int model, const char *name)
{
    if (model < 0 || model >= m->n_models)
        return;
    model_slot *ms = &m->models[model];
    atomic_store_explicit(&ms->named, 0, memory_order_release); /* not rendered meanwhile */
    atomic_store_explicit(&ms->loaded, 0, memory_order_release);
    for (int h = 0; h < H_COUNT; h++) {
        for (int k = 0; k <= MAX_BUCKETS; k++)
            atomic_store_explicit(&ms->h[h].buckets[k], 0, memory_order_relaxed);
        atomic_store_explicit(&ms->h[h].sum, 0, memory_order_relaxed);
    }
    for (int k = 0; k < L_COUNT; k++)
        atomic_store_explicit(&ms->sched[k], 0, memory_order_relaxed);
    size_t row = (size_t)(model + 1) * (size_t)m->n_routes * N_STATUS;
    for (size_t i = 0; i < (size_t)m->n_routes * N_STATUS; i++)
        atomic_store_explicit(&m->requests[row + i], 0, memory_order_relaxed);
    snprintf(ms->name, sizeof ms->name, "%s", name);
    atomic_store_explicit(&ms->named, 1, memory_order_release);
}

void attnd_metrics_model_unloaded(attnd_metrics *m, int model)
{
    if (model >= 0 && model < m->n_models)
        atomic_store_explicit(&m->models[model].loaded, 0, memory_order_release);
}

void attnd_metrics_repository(attnd_metrics *m, int load, int ok)
{
    if (m)
        atomic_fetch_add_explicit(&m->repo[load ? 1 : 0][ok ? 1 : 0], 1, memory_order_relaxed);
}

/* 1 when model slot i has a name (is rendered). */
static int named(const attnd_metrics *m, int i)
{
    return atomic_load_explicit(&((attnd_metrics *)m)->models[i].named, memory_order_acquire);
}

void attnd_metrics_set_model_info(attnd_metrics *m, int model, const attn_layer_info *info)
{
    if (model < 0 || model >= m->n_models)
        return;
    m->models[model].info = *info;
    atomic_store_explicit(&m->models[model].loaded, 1, memory_order_release);
}

static void observe(hist *h, const hist_def *d, int64_t v)
{
    if (v < 0)
        v = 0;
    int b = 0;
    while (b < d->n_bounds && v > d->bounds[b])
        b++;
    atomic_fetch_add_explicit(&h->buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, (uint64_t)v, memory_order_relaxed);
}

static int status_slot(int status)
{
    for (size_t i = 0; i < N_STATUS - 1; i++)
        if (statuses[i] == status)
            return (int)i;
    return (int)N_STATUS - 1;
}

void attnd_metrics_request_done(attnd_metrics *m, int model, int route, int attention,
                                int status, int64_t duration_ns)
{
    if (model < -1 || model >= m->n_models || route < 0 || route >= m->n_routes)
        return;
    size_t i = ((size_t)(model + 1) * (size_t)m->n_routes + (size_t)route) * N_STATUS +
               (size_t)status_slot(status);
    atomic_fetch_add_explicit(&m->requests[i], 1, memory_order_relaxed);
    if (model >= 0 && attention)
        observe(&m->models[model].h[H_REQUEST], &hist_defs[H_REQUEST], duration_ns);
}

void attnd_metrics_request_timing(attnd_metrics *m, int model, int64_t queue_us,
                                  int64_t compute_us)
{
    if (model < 0 || model >= m->n_models)
        return;
    observe(&m->models[model].h[H_QUEUE], &hist_defs[H_QUEUE], queue_us * 1000);
    observe(&m->models[model].h[H_COMPUTE], &hist_defs[H_COMPUTE], compute_us * 1000);
}

void attnd_metrics_batch(attnd_metrics *m, int model, int n_requests, size_t n_tokens)
{
    if (model < 0 || model >= m->n_models)
        return;
    observe(&m->models[model].h[H_BATCH_SIZE], &hist_defs[H_BATCH_SIZE], n_requests);
    observe(&m->models[model].h[H_BATCH_TOKENS], &hist_defs[H_BATCH_TOKENS],
            (int64_t)n_tokens);
}

void attnd_metrics_inline_request(attnd_metrics *m, int model)
{
    if (model >= 0 && model < m->n_models)
        atomic_fetch_add_explicit(&m->models[model].sched[L_INLINE], 1, memory_order_relaxed);
}

void attnd_metrics_decode_iteration(attnd_metrics *m, int model, int iterations, int steps,
                                    int piece_rows, int64_t compute_us)
{
    if (model < 0 || model >= m->n_models)
        return;
    _Atomic uint64_t *c = m->models[model].sched;
    atomic_fetch_add_explicit(&c[L_ITERATIONS], (uint64_t)(iterations > 0 ? iterations : 0),
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&c[L_BUSY_US], (uint64_t)(compute_us > 0 ? compute_us : 0),
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&c[L_STEPS], (uint64_t)(steps > 0 ? steps : 0), memory_order_relaxed);
    if (piece_rows > 0) {
        atomic_fetch_add_explicit(&c[L_PIECES], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c[L_PIECE_ROWS], (uint64_t)piece_rows, memory_order_relaxed);
    }
}

void attnd_metrics_reload(attnd_metrics *m, int ok)
{
    if (m)
        atomic_fetch_add_explicit(&m->reloads[ok ? 1 : 0], 1, memory_order_relaxed);
}

void attnd_metrics_offloaded(attnd_metrics *m, int encode)
{
    if (m)
        atomic_fetch_add_explicit(&m->offloaded[encode ? 1 : 0], 1, memory_order_relaxed);
}

void attnd_metrics_sessions_set(attnd_metrics *m, int sessions, int64_t kv_bytes)
{
    atomic_store_explicit(&m->sessions, sessions, memory_order_relaxed);
    atomic_store_explicit(&m->kv_bytes, kv_bytes, memory_order_relaxed);
}

void attnd_metrics_retired_set(attnd_metrics *m, int versions, int64_t bytes)
{
    atomic_store_explicit(&m->retired_versions, versions, memory_order_relaxed);
    atomic_store_explicit(&m->retired_bytes, bytes, memory_order_relaxed);
}

void attnd_metrics_kv_capacity_set(attnd_metrics *m, int64_t bytes)
{
    atomic_store_explicit(&m->kv_capacity, bytes, memory_order_relaxed);
}

void attnd_metrics_session_evicted(attnd_metrics *m, attnd_eviction why)
{
    atomic_fetch_add_explicit(&m->evictions[why < ATTND_EVICT_COUNT ? why : ATTND_EVICT_LRU], 1,
                              memory_order_relaxed);
}

void attnd_metrics_session_append(attnd_metrics *m, int model, int64_t duration_ns)
{
    if (model < 0 || model >= m->n_models)
        return;
    observe(&m->models[model].h[H_SESSION_APPEND], &hist_defs[H_SESSION_APPEND], duration_ns);
}

void attnd_metrics_in_flight_add(attnd_metrics *m, int delta)
{
    atomic_fetch_add_explicit(&m->in_flight, delta, memory_order_relaxed);
}

/* ------------------------------------------------------------ rendering */

typedef struct buf {
    char *p;
    size_t len, cap;
    int failed;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
    for (int tries = 0; !b->failed && tries < 2; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n) * 2;
        char *g = realloc(b->p, cap);
        if (!g) {
            b->failed = 1;
            return;
        }
        b->p = g;
        b->cap = cap;
    }
}

static void family(buf *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_hist(buf *b, attnd_metrics *m, int which)
{
    const hist_def *d = &hist_defs[which];
    family(b, d->name, "histogram", d->help);
    for (int i = 0; i < m->n_models; i++) {
        if (!named(m, i))
            continue;
        hist *h = &m->models[i].h[which];
        const char *model = m->models[i].name;
        uint64_t cum = 0;
        for (int k = 0; k <= d->n_bounds; k++) {
            cum += atomic_load_explicit(&h->buckets[k], memory_order_relaxed);
            if (k < d->n_bounds)
                put(b, "%s_bucket{model=\"%s\",le=\"%.9g\"} %llu\n", d->name, model,
                    (double)d->bounds[k] * d->scale, (unsigned long long)cum);
            else
                put(b, "%s_bucket{model=\"%s\",le=\"+Inf\"} %llu\n", d->name, model,
                    (unsigned long long)cum);
        }
        double sum = (double)atomic_load_explicit(&h->sum, memory_order_relaxed) * d->scale;
        put(b, "%s_sum{model=\"%s\"} %.9g\n%s_count{model=\"%s\"} %llu\n", d->name, model, sum,
            d->name, model, (unsigned long long)cum);
    }
}

static void render_requests(buf *b, attnd_metrics *m)
{
    family(b, "attnd_requests_total", "counter", "HTTP requests answered, by model, route "
           "template and status code.");
    for (int mi = -1; mi < m->n_models; mi++) {
        if (mi >= 0 && !named(m, mi))
            continue;
        const char *model = mi < 0 ? "" : m->models[mi].name;
        for (int r = 0; r < m->n_routes; r++) {
            for (size_t s = 0; s < N_STATUS; s++) {
                size_t i = ((size_t)(mi + 1) * (size_t)m->n_routes + (size_t)r) * N_STATUS + s;
                uint64_t v = atomic_load_explicit(&m->requests[i], memory_order_relaxed);
                if (!v)
                    continue;
                char status[8];
                if (s < N_STATUS - 1)
                    snprintf(status, sizeof status, "%d", statuses[s]);
                else
                    snprintf(status, sizeof status, "other");
                put(b, "attnd_requests_total{model=\"%s\",route=\"%s\",status=\"%s\"} %llu\n",
                    model, m->route_labels[r], status, (unsigned long long)v);
            }
        }
    }
}

/* The scheduler's counter families, per model. */
static void render_scheduler_counters(buf *b, attnd_metrics *m)
{
    for (int k = 0; k < L_COUNT; k++) {
        family(b, sched_defs[k].name, "counter", sched_defs[k].help);
        for (int i = 0; i < m->n_models; i++)
            if (named(m, i))
                put(b, "%s{model=\"%s\"} %.9g\n", sched_defs[k].name, m->models[i].name,
                    (double)atomic_load_explicit(&m->models[i].sched[k], memory_order_relaxed) *
                        sched_defs[k].scale);
    }
}

static void render_models(buf *b, attnd_metrics *m, const int *queue_depths)
{
    family(b, "attnd_model_info", "gauge", "A loaded model and its dimensions (value 1).");
    for (int i = 0; i < m->n_models; i++) {
        if (!atomic_load_explicit(&m->models[i].loaded, memory_order_acquire))
            continue;
        const attn_layer_info *in = &m->models[i].info;
        put(b, "attnd_model_info{model=\"%s\",heads=\"%d\",embed_dim=\"%d\",kdim=\"%d\","
               "vdim=\"%d\",out_dim=\"%d\",head_dim=\"%d\",dtype=\"%s\"} 1\n",
            m->models[i].name, in->num_heads, in->embed_q, in->embed_k, in->embed_v,
            in->embed_out, in->head_dim_k, in->source_dtype[0] ? in->source_dtype : "F32");
    }
    render_scheduler_counters(b, m);
    family(b, "attnd_queue_depth", "gauge", "Requests waiting for a batch, per model.");
    for (int i = 0; i < m->n_models; i++)
        if (queue_depths && queue_depths[i] >= 0 && named(m, i))
            put(b, "attnd_queue_depth{model=\"%s\"} %d\n", m->models[i].name, queue_depths[i]);
}

/* The standard process_* families (the names Prometheus' client libraries use),
 * read at scrape time from /proc/self (Linux) and getrlimit. A family whose
 * source cannot be read is left out rather than reported as 0. */
static void render_process(buf *b, attnd_metrics *m)
{
    FILE *f = fopen("/proc/self/stat", "r");
    if (f) {
        char line[1024];
        size_t n = fread(line, 1, sizeof line - 1, f);
        fclose(f);
        line[n] = 0;
        /* Fields after "(comm)", which may itself hold spaces or ')': field 3
         * (state) onwards; utime 14, stime 15 (clock ticks), vsize 23 (bytes),
         * rss 24 (pages). */
        char *p = strrchr(line, ')');
        unsigned long long v[24] = {0};
        int got = 0;
        if (p) {
            p++;
            for (int field = 3; field <= 24; field++) {
                while (*p == ' ')
                    p++;
                if (!*p)
                    break;
                char *end;
                v[field - 1] = strtoull(p, &end, 10);
                if (field == 3) /* state is a letter */
                    end = p + 1;
                p = strchr(end, ' ');
                got = field;
                if (!p)
                    break;
            }
        }
        long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
        if (got >= 24 && tick > 0 && page > 0) {
            family(b, "process_cpu_seconds_total", "counter",
                   "Total user and system CPU time spent in seconds.");
            put(b, "process_cpu_seconds_total %.2f\n", (double)(v[13] + v[14]) / (double)tick);
            family(b, "process_virtual_memory_bytes", "gauge",
                   "Virtual memory size in bytes.");
            put(b, "process_virtual_memory_bytes %llu\n", v[22]);
            family(b, "process_resident_memory_bytes", "gauge",
                   "Resident memory size in bytes.");
            put(b, "process_resident_memory_bytes %llu\n", v[23] * (unsigned long long)page);
        }
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long open_fds = 0;
        int self = dirfd(d);
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (e->d_name[0] == '.')
                continue;
            if (atoi(e->d_name) != self) /* not the descriptor reading the list */
                open_fds++;
        }
        closedir(d);
        family(b, "process_open_fds", "gauge", "Number of open file descriptors.");
        put(b, "process_open_fds %ld\n", open_fds);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        family(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        if (rl.rlim_cur == RLIM_INFINITY)
            put(b, "process_max_fds +Inf\n");
        else
            put(b, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
    }
    family(b, "process_start_time_seconds", "gauge",
           "Start time of the process since unix epoch in seconds.");
    put(b, "process_start_time_seconds %.3f\n", m->start_time_s);
}

char *attnd_metrics_render(attnd_metrics *m, const int *queue_depths, size_t *len)
{
    buf b = {malloc(16384), 0, 16384, 0};
    if (!b.p)
        return NULL;
    family(&b, "attnd_build_info", "gauge", "attnd build information (value 1).");
    put(&b, "attnd_build_info{version=\"%s\"} 1\n", ATTN_VERSION_STRING);
    render_process(&b, m);
    render_models(&b, m, queue_depths);
    family(&b, "attnd_requests_in_flight", "gauge", "HTTP requests being handled right now.");
    put(&b, "attnd_requests_in_flight %lld\n",
        (long long)atomic_load_explicit(&m->in_flight, memory_order_relaxed));
    family(&b, "attnd_http_offloaded_total", "counter",
           "Large request bodies decoded and answers encoded on a codec thread instead of the "
           "HTTP thread of their connection (--offload-codec-bytes), by work.");
    put(&b, "attnd_http_offloaded_total{work=\"decode\"} %llu\n",
        (unsigned long long)atomic_load_explicit(&m->offloaded[0], memory_order_relaxed));
    put(&b, "attnd_http_offloaded_total{work=\"encode\"} %llu\n",
        (unsigned long long)atomic_load_explicit(&m->offloaded[1], memory_order_relaxed));
    family(&b, "attnd_reloads_total", "counter",
           "Configuration and model reloads (SIGHUP), by result.");
    put(&b, "attnd_reloads_total{result=\"ok\"} %llu\n",
        (unsigned long long)atomic_load_explicit(&m->reloads[1], memory_order_relaxed));
    put(&b, "attnd_reloads_total{result=\"error\"} %llu\n",
        (unsigned long long)atomic_load_explicit(&m->reloads[0], memory_order_relaxed));
    family(&b, "attnd_repository_operations_total", "counter",
           "Model repository loads and unloads (POST /v2/repository/models/{name}/load, "
           "/unload), by operation and result.");
    for (int op = 1; op >= 0; op--)
        for (int ok = 1; ok >= 0; ok--)
            put(&b, "attnd_repository_operations_total{operation=\"%s\",result=\"%s\"} %llu\n",
                op ? "load" : "unload", ok ? "ok" : "error",
                (unsigned long long)atomic_load_explicit(&m->repo[op][ok],
                                                         memory_order_relaxed));
    family(&b, "attnd_sessions", "gauge", "Streaming sessions held.");
    put(&b, "attnd_sessions %lld\n",
        (long long)atomic_load_explicit(&m->sessions, memory_order_relaxed));
    family(&b, "attnd_kv_cache_bytes", "gauge",
           "Bytes of the KV page pool that sessions hold (a page shared by forks counts once).");
    put(&b, "attnd_kv_cache_bytes %lld\n",
        (long long)atomic_load_explicit(&m->kv_bytes, memory_order_relaxed));
    family(&b, "attnd_retired_model_versions", "gauge",
           "Model versions replaced (reload) or unloaded that requests or sessions still hold.");
    put(&b, "attnd_retired_model_versions %lld\n",
        (long long)atomic_load_explicit(&m->retired_versions, memory_order_relaxed));
    family(&b, "attnd_retired_model_bytes", "gauge",
           "Weight bytes of those versions (bounded by --max-retired-bytes: sessions beyond it are evicted).");
    put(&b, "attnd_retired_model_bytes %lld\n",
        (long long)atomic_load_explicit(&m->retired_bytes, memory_order_relaxed));
    family(&b, "attnd_kv_cache_capacity_bytes", "gauge", "Bytes of the KV page pool (--kv-cache-bytes).");
    put(&b, "attnd_kv_cache_capacity_bytes %lld\n",
        (long long)atomic_load_explicit(&m->kv_capacity, memory_order_relaxed));
    family(&b, "attnd_session_evictions_total", "counter",
           "Sessions evicted: least recently used under the KV budget or max_sessions (lru), "
           "idle past their TTL (ttl), holding a retired model version over --max-retired-bytes "
           "(retired).");
    static const char *const reasons[ATTND_EVICT_COUNT] = {"lru", "ttl", "retired"};
    for (int r = 0; r < ATTND_EVICT_COUNT; r++)
        put(&b, "attnd_session_evictions_total{reason=\"%s\"} %llu\n", reasons[r],
            (unsigned long long)atomic_load_explicit(&m->evictions[r], memory_order_relaxed));
    render_requests(&b, m);
    for (int h = 0; h < H_COUNT; h++)
        render_hist(&b, m, h);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}
