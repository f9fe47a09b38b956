/* config.c — attnd's option table and the four sources that fill attnd_config:
 * defaults (the table), a JSON file, ATTND_* environment variables, flags.
 * Every option is one row below; flag --foo-bar, env ATTND_FOO_BAR, file key
 * foo_bar all derive from its name.
 */
#include "core/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attn.h"

typedef enum opt_kind {
    OPT_STR,    /* char *                                   */
    OPT_INT,    /* int, decimal                             */
    OPT_I64,    /* int64_t, decimal                         */
    OPT_SIZE,   /* int64_t, decimal with optional K/M/G (binary multiples) */
    OPT_LEVEL,  /* attnd_log_level                          */
    OPT_MODELS, /* the model list (repeatable flag)         */
    OPT_LIST    /* char *, comma-separated; a repeated flag (or env/file at the
                   same level) adds to the list, a higher level replaces it */
} opt_kind;

enum { SRC_DEFAULT = 0, SRC_FILE = 1, SRC_ENV = 2, SRC_FLAG = 3 };
static const char *const source_names[] = {"default", "file", "env", "flag"};

typedef struct option {
    const char *name;    /* flag spelling without "--"                         */
    const char *env;     /* environment variable; NULL = ATTND_<NAME>         */
    const char *file;    /* key in the JSON file; NULL = name with '_', ""=none */
    opt_kind kind;
    size_t off;          /* field in attnd_config                             */
    const char *def;     /* default, as text (parsed like any other source)   */
    int64_t min, max;    /* for numbers                                       */
    const char *metavar;
    const char *help;
} option;

#define F(field) offsetof(attnd_config, field)
#define BIG INT64_C(1) << 50

static const option options[] = {
    {"config", "ATTND_CONFIG", "", OPT_STR, F(config_file), "", 0, 0, "FILE",
     "JSON configuration file (keys are option names with '_'; keys starting with '_' are comments)"},
    {"listen", NULL, NULL, OPT_STR, F(listen), "0.0.0.0:8080", 0, 0, "HOST:PORT",
     "address to serve HTTP on ([::1]:PORT for IPv6, :PORT for every interface)"},
    {"model", "ATTND_MODELS", "models", OPT_MODELS, F(models), "", 0, 0, "NAME=PATH[,key=value]",
     "load a safetensors attention layer as NAME (repeatable; env: NAME=PATH;NAME=PATH...)"},
    {"default-model", NULL, NULL, OPT_STR, F(default_model), "", 0, 0, "NAME",
     "model served by POST /v1/attention (default: the only model, if just one)"},
    {"log-level", NULL, NULL, OPT_LEVEL, F(log_level), "info", 0, 0, "LEVEL",
     "debug, info, warn or error"},
    {"workers", NULL, NULL, OPT_INT, F(workers), "2", 1, 256, "N",
     "compute threads per model (each runs whole batches)"},
    {"max-batch-requests", NULL, NULL, OPT_INT, F(max_batch_requests), "16", 1, 65536, "N",
     "requests per batch at most (1 turns batching off)"},
    {"max-batch-tokens", NULL, NULL, OPT_I64, F(max_batch_tokens), "8192", 1, BIG, "N",
     "positions to project per batch at most: query rows, plus key rows of cross-attention "
     "(a session's cached positions count as kv bytes instead)"},
    {"max-batch-kv-bytes", NULL, NULL, OPT_SIZE, F(max_batch_kv_bytes), "1G", 1, BIG, "BYTES",
     "key/value bytes a batch's attention may read (cached positions of session appends, and "
     "every request's keys); a decode step's cost is reading its cache, not its one row"},
    {"max-queue-delay-us", NULL, NULL, OPT_I64, F(max_queue_delay_us), "0", 0, 60000000, "US",
     "longest a request waits for its batch to fill (a session append: its iteration of the decode "
     "loop), in microseconds"},
    {"max-stream-wait-us", NULL, NULL, OPT_I64, F(max_stream_wait_us), "0", 0, 60000000, "US",
     "opt-in: an iteration of the decode loop holding fewer session appends than the streams "
     "active lately waits up to this long for the others, in microseconds; 0 = never (a client "
     "interleaving its own sessions would wait for itself)"},
    {"prefill-chunk-rows", NULL, NULL, OPT_INT, F(prefill_chunk_rows), "128", 0, 1 << 20, "N",
     "a session append (or a one-shot self-attention of one sequence: causal, or non-causal "
     "without rotary positions or a window) of more rows is computed in pieces, "
     "one per iteration of the decode loop, each costing what this many rows at the start of a "
     "sequence cost (later pieces, whose rows see more positions, are fewer rows), so decode steps "
     "never wait for a whole prefill; 0 = whole appends and one-shots"},
    {"inline-max-macs", NULL, NULL, OPT_I64, F(inline_max_macs), "1000000", 0, BIG, "N",
     "a stateless request of at most this many multiply-adds (projections and attention) is "
     "computed on the HTTP thread that read it when its model is idle (nothing queued or computing) and --max-queue-delay-us is 0, "
     "instead of going to a worker and back (two thread wake-ups cost more than its arithmetic); "
     "0 = every request goes to a worker"},
    {"max-queue", NULL, NULL, OPT_INT, F(max_queue), "256", 1, 1 << 24, "N",
     "requests waiting per model; beyond that: 503 queue_full"},
    {"max-body-bytes", NULL, NULL, OPT_SIZE, F(max_body_bytes), "64M", 1, BIG, "BYTES",
     "largest request body (K/M/G suffixes); beyond that: 413"},
    {"max-seq-len", NULL, NULL, OPT_INT, F(max_seq_len), "4096", 1, 1 << 24, "N",
     "longest sequence (T and S) in a request"},
    {"max-batch-seqs", NULL, NULL, OPT_INT, F(max_batch_seqs), "256", 1, 1 << 24, "N",
     "sequences in one request at most"},
    {"max-weights-elems", NULL, NULL, OPT_SIZE, F(max_weights_elems), "16M", 1, BIG, "N",
     "attention-weight numbers one request may ask for"},
    {"max-json-depth", NULL, NULL, OPT_INT, F(max_json_depth), "64", 4, 4096, "N",
     "deepest nesting of a request body"},
    {"max-connections", NULL, NULL, OPT_INT, F(max_connections), "1024", 1, 1 << 20, "N",
     "concurrent HTTP connections at most"},
    {"connection-timeout-s", NULL, NULL, OPT_INT, F(connection_timeout_s), "30", 0, 86400, "S",
     "idle connection timeout in seconds (0 = none)"},
    {"drain-grace-ms", NULL, NULL, OPT_INT, F(drain_grace_ms), "0", 0, 600000, "MS",
     "after SIGTERM, keep serving requests that arrive for MS ms (each answer then says "
     "Connection: close) before new ones get 503 draining: for load balancers that stop "
     "sending some time after the signal (0: the shipped Kubernetes manifest's preStop sleep "
     "does that wait before the signal)"},
    {"http-threads", NULL, NULL, OPT_INT, F(http_threads), "2", 1, 1024, "N",
     "HTTP threads (libmicrohttpd thread pool size)"},
    {"offload-codec-bytes", NULL, NULL, OPT_SIZE, F(offload_codec_bytes), "64K", 0, BIG, "BYTES",
     "a request body or an answer of at least BYTES is decoded or encoded on a codec thread "
     "(as many as --http-threads), not on the HTTP thread that serves its connection, so a "
     "large prefill does not hold up the other connections of that thread (0 = never)"},
    {"request-read-timeout-s", NULL, NULL, OPT_INT, F(request_read_timeout_s), "60", 0, 86400,
     "S", "headers + body must arrive within S s, else the connection closes (0 = none)"},
    {"max-inflight-bytes", NULL, NULL, OPT_SIZE, F(max_inflight_bytes), "1G", 1, BIG, "BYTES",
     "bytes all requests in flight may hold; beyond that: 503 overloaded"},
    {"api-key-file", NULL, NULL, OPT_STR, F(api_key_file), "", 0, 0, "FILE",
     "API keys, one per line, # comments (with any key set, routes need a Bearer key)"},
    {"api-keys", NULL, "", OPT_STR, F(api_keys), "", 0, 0, "KEY,KEY",
     "API keys, comma-separated (prefer the env or file: argv shows in ps; never printed)"},
    {"admin-key-file", NULL, NULL, OPT_STR, F(admin_key_file), "", 0, 0, "FILE",
     "admin keys (format of --api-key-file) for /v2/repository load and unload; none: 403"},
    {"metrics-require-key", NULL, NULL, OPT_INT, F(metrics_require_key), "0", 0, 1, "0|1",
     "1: GET /metrics needs an API key too"},
    {"ui", NULL, NULL, OPT_INT, F(ui), "1", 0, 1, "0|1",
     "serve the playground page at / and /ui/ (0 or --no-ui: off, those paths then 404)"},
    {"tls-cert", NULL, NULL, OPT_STR, F(tls_cert), "", 0, 0, "FILE",
     "serve HTTPS with this PEM certificate chain (with --tls-key)"},
    {"tls-key", NULL, NULL, OPT_STR, F(tls_key), "", 0, 0, "FILE",
     "the PEM private key for --tls-cert"},
    {"kv-dtype", NULL, NULL, OPT_STR, F(kv_dtype_name), "f32", 0, 0, "f32|f16|bf16|int8",
     "how sessions' KV caches store keys and values (per model: kv_dtype= in --model); f16 "
     "and bf16 halve the bytes each decode step reads, int8 (a scale per block and KV head) "
     "quarters them; f32 is exact"},
    {"kv-cache-bytes", NULL, NULL, OPT_SIZE, F(kv_cache_bytes), "0", 0, BIG, "BYTES",
     "the KV page pool of all streaming sessions (0: a quarter of physical memory, or of the "
     "cgroup's limit when lower); when full the least recently used idle sessions go"},
    {"max-retired-bytes", NULL, NULL, OPT_SIZE, F(max_retired_bytes), "1G", 0, BIG, "BYTES",
     "weights of replaced or unloaded model versions that sessions may keep alive; beyond it "
     "the sessions on the oldest are evicted (410)"},
    {"kv-page-bytes", NULL, NULL, OPT_SIZE, F(kv_page_bytes), "0", 0, 1 << 26, "BYTES",
     "one KV page: a block of K and V rows of one session (0: fitted to the models at "
     "start-up, >= 16 rows and >= 32K of the widest)"},
    {"session-ttl-s", NULL, NULL, OPT_INT, F(session_ttl_s), "600", 1, 604800, "S",
     "an idle streaming session expires after S s (a session's own ttl_s may be shorter)"},
    {"max-sessions", NULL, NULL, OPT_INT, F(max_sessions), "4096", 1, 1 << 20, "N",
     "streaming sessions held at once; beyond it the least recently used go"},
    {"log-format", NULL, NULL, OPT_STR, F(log_format_name), "text", 0, 0, "text|json",
     "log records as text lines or as one JSON object a line (the access log too)"},
    {"access-log", NULL, NULL, OPT_STR, F(access_log), "", 0, 0, "PATH|-",
     "one line per answered request to PATH (appended; reopened on SIGHUP) or - for stdout"},
    {"cors-origin", NULL, NULL, OPT_LIST, F(cors_origin), "", 0, 0, "ORIGIN",
     "let browser pages from ORIGIN (scheme://host[:port], or *) call attnd: CORS headers and "
     "OPTIONS preflights (repeatable or comma-separated; default: off)"},
    {"replica-name", NULL, NULL, OPT_STR, F(replica_name), "", 0, 0, "NAME",
     "this replica's name behind a gateway: session ids become NAME.<32 hex> so the gateway "
     "routes each session's calls here; [a-z0-9-], 1..40, a letter or digit at each end"},
    {"session-dir", NULL, NULL, OPT_STR, F(session_dir), "", 0, 0, "DIR",
     "on a graceful stop write every live session to DIR; at start-up read back those whose "
     "model weights are unchanged, under the same ids (default: off)"},
    {"session-dir-max-bytes", NULL, NULL, OPT_SIZE, F(session_dir_max_bytes), "0", 0, BIG, "BYTES",
     "what --session-dir may hold: sessions beyond it (least recently used first) are not "
     "saved (0 = no bound)"},
};
#define N_OPTIONS (sizeof options / sizeof options[0])
_Static_assert(N_OPTIONS <= sizeof(((attnd_config *)0)->source), "source[] too small");

#define FIELD(cfg, o, type) ((type *)((char *)(cfg) + (o)->off))

/* ------------------------------------------------------------ small helpers */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* "max-batch-tokens" -> "ATTND_MAX_BATCH_TOKENS" or "max_batch_tokens". */
static void env_name(const option *o, char *buf, size_t cap)
{
    if (o->env) {
        snprintf(buf, cap, "%s", o->env);
        return;
    }
    size_t n = (size_t)snprintf(buf, cap, "ATTND_");
    for (const char *p = o->name; *p && n + 1 < cap; p++)
        buf[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    buf[n] = '\0';
}

static void file_key(const option *o, char *buf, size_t cap)
{
    if (o->file) {
        snprintf(buf, cap, "%s", o->file);
        return;
    }
    size_t n = 0;
    for (const char *p = o->name; *p && n + 1 < cap; p++)
        buf[n++] = *p == '-' ? '_' : *p;
    buf[n] = '\0';
}

static int parse_int64(const char *s, int allow_suffix, int64_t *out)
{
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno)
        return -1;
    int64_t mult = 1;
    if (allow_suffix && *end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': mult = INT64_C(1) << 10; break;
        case 'M': mult = INT64_C(1) << 20; break;
        case 'G': mult = INT64_C(1) << 30; break;
        default: return -1;
        }
        end++;
        if (*end == 'i' || *end == 'I') /* "64MiB" */
            end++;
        if (*end == 'b' || *end == 'B')
            end++;
    }
    if (*end)
        return -1;
    if ((v > 0 && v > INT64_MAX / mult) || (v < 0 && v < INT64_MIN / mult))
        return -1; /* out of range: refused, never wrapped */
    *out = (int64_t)v * mult;
    return 0;
}

int attnd_config_model_name_ok(const char *s)
{
    size_t n = strlen(s), dots = 0;
    if (n == 0 || n > 64)
        return 0;
    for (; *s; s++) {
        if (!isalnum((unsigned char)*s) && *s != '.' && *s != '_' && *s != '-')
            return 0;
        dots += *s == '.';
    }
    return dots < n; /* ".", "..": path segments a proxy or client resolves away */
}

/* ------------------------------------------------------------ models */

static void free_spec(attnd_model_spec *m)
{
    free(m->name);
    free(m->path);
    free(m->prefix);
}

static void free_models(attnd_config *cfg)
{
    for (int i = 0; i < cfg->n_models; i++)
        free_spec(&cfg->models[i]);
    free(cfg->models);
    cfg->models = NULL;
    cfg->n_models = 0;
}

/* Appends one model like t (name, path and prefix copied; t keeps its own). */
static int add_model(attnd_config *cfg, const attnd_model_spec *t, char *err, size_t errlen)
{
    if (!attnd_config_model_name_ok(t->name)) {
        set_err(err, errlen, "model name '%.80s' must be 1-64 characters of A-Z a-z 0-9 . _ - "
                "and not dots alone", t->name);
        return -1;
    }
    if (!*t->path) {
        set_err(err, errlen, "model '%s' has an empty path", t->name);
        return -1;
    }
    for (int i = 0; i < cfg->n_models; i++) {
        if (strcmp(cfg->models[i].name, t->name) == 0) {
            set_err(err, errlen, "model '%s' is given twice", t->name);
            return -1;
        }
    }
    attnd_model_spec *grown = realloc(cfg->models, (size_t)(cfg->n_models + 1) * sizeof *grown);
    if (!grown)
        goto nomem;
    cfg->models = grown;
    attnd_model_spec *m = &cfg->models[cfg->n_models];
    *m = *t;
    m->name = strdup(t->name);
    m->path = strdup(t->path);
    m->prefix = t->prefix ? strdup(t->prefix) : NULL;
    if (!m->name || !m->path || (t->prefix && !m->prefix)) {
        free_spec(m);
        goto nomem;
    }
    cfg->n_models++;
    return 0;
nomem:
    set_err(err, errlen, "out of memory");
    return -1;
}

/* The keys a model spec takes after NAME=PATH. */
static const char spec_keys[] = "heads, kv_heads, layer, layers, format, prefix, kv_dtype, weights, "
                                "workers, max_batch_requests, max_batch_tokens, "
                                "max_batch_kv_bytes, max_queue_delay_us, prefill_chunk_rows";

/* The per-model scheduler keys: each overrides the global option of its name
 * (the same range, from the option table). */
typedef struct sched_key {
    const char *key;
    size_t off;                  /* in attnd_model_spec */
    int is_int;                  /* int, else int64_t   */
    int zero_is_set;             /* 0 is a setting; unset is -1 (else 0) */
} sched_key;

#define S(field) offsetof(attnd_model_spec, field)
static const sched_key sched_keys[] = {
    {"workers", S(workers), 1, 0},
    {"max_batch_requests", S(max_batch_requests), 1, 0},
    {"max_batch_tokens", S(max_batch_tokens), 0, 0},
    {"max_batch_kv_bytes", S(max_batch_kv_bytes), 0, 0},
    {"max_queue_delay_us", S(max_queue_delay_us), 0, 1},
    {"prefill_chunk_rows", S(prefill_chunk_rows), 1, 1},
};
#undef S

/* The option whose file key is key, or NULL. */
static const option *find_option_by_key(const char *key)
{
    char k[64];
    for (size_t i = 0; i < N_OPTIONS; i++) {
        file_key(&options[i], k, sizeof k);
        if (strcmp(k, key) == 0)
            return &options[i];
    }
    return NULL;
}

static const char *const kv_dtype_names[] = {"f32", "f16", "bf16", "int8"}; /* attn_kv_dtype order */

/* "f32", "f16", "bf16", "int8" -> an attn_kv_dtype. Returns 0, or -1 with err. */
static int parse_kv_dtype(const char *what, const char *v, int *out, char *err, size_t errlen)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(v, kv_dtype_names[i]) == 0) {
            *out = i;
            return 0;
        }
    set_err(err, errlen, "%s must be f32, f16, bf16 or int8, got '%.40s'", what, v);
    return -1;
}

/* weights=: "f32", "f16", "bf16" -> an attn_weight_dtype. Returns 0 or -1. */
static int parse_weights_dtype(const char *v, int *out)
{
    for (int d = ATTN_WDTYPE_F32; d <= ATTN_WDTYPE_BF16; d++)
        if (strcmp(v, attn_weight_dtype_name((attn_weight_dtype)d)) == 0) {
            *out = d;
            return 0;
        }
    return -1;
}

static int parse_family(const char *v, int *out)
{
    for (int f = ATTN_FAMILY_AUTO; f <= ATTN_FAMILY_GPT2; f++)
        if (strcmp(v, attn_family_name((attn_family)f)) == 0) {
            *out = f;
            return 0;
        }
    return -1;
}

static const sched_key *sched_key_of(const char *key)
{
    for (size_t i = 0; i < sizeof sched_keys / sizeof sched_keys[0]; i++)
        if (strcmp(sched_keys[i].key, key) == 0)
            return &sched_keys[i];
    return NULL;
}

/* Sets a per-model scheduler key, in its global option's range (sizes take
 * K/M/G where the option does). Returns 0, or -1 with err. */
static int set_sched_key(attnd_model_spec *m, const sched_key *k, const char *v, char *err,
                         size_t errlen)
{
    const option *o = find_option_by_key(k->key);
    int64_t n;
    assert(o); /* every per-model key is a global option too */
    if (!o || parse_int64(v, o->kind == OPT_SIZE, &n) != 0 || n < o->min || n > o->max) {
        set_err(err, errlen, "model '%s': %s must be an integer in %lld..%lld, got '%.40s'",
                m->name, k->key, (long long)(o ? o->min : 0), (long long)(o ? o->max : 0), v);
        return -1;
    }
    if (k->is_int)
        *(int *)((char *)m + k->off) = (int)n;
    else
        *(int64_t *)((char *)m + k->off) = n;
    return 0;
}

/* Sets key=value on m. Returns 0, or -1 with err. */
static int set_spec_key(attnd_model_spec *m, const char *key, const char *v, char *err,
                        size_t errlen)
{
    int64_t n;
    if (strcmp(key, "heads") == 0 || strcmp(key, "kv_heads") == 0) {
        if (parse_int64(v, 0, &n) != 0 || n < 1 || n > 65536) {
            set_err(err, errlen, "model '%s': %s must be an integer in 1..65536, got '%s'",
                    m->name, key, v);
            return -1;
        }
        *(key[0] == 'h' ? &m->heads : &m->kv_heads) = (int)n;
    } else if (strcmp(key, "layer") == 0) {
        if (parse_int64(v, 0, &n) != 0 || n < 0 || n > 1000000) {
            set_err(err, errlen, "model '%s': layer must be an integer >= 0, got '%s'", m->name,
                    v);
            return -1;
        }
        m->layer = (int)n;
    } else if (strcmp(key, "layers") == 0) {
        int ok = strcmp(v, "all") == 0 || (*v && strlen(v) < sizeof m->layer_sel);
        for (const char *c = v; ok && strcmp(v, "all") != 0 && *c; c++)
            ok = isdigit((unsigned char)*c) || *c == ',' || *c == '-';
        if (!ok) {
            set_err(err, errlen, "model '%s': layers takes only 'all' or a list of layers "
                    "and ranges such as 0-7 or 0,2,4 (one model per layer, named %s.N, and the "
                    "group %s of them); for one layer use layer=N", m->name, m->name, m->name);
            return -1;
        }
        m->all_layers = 1;
        snprintf(m->layer_sel, sizeof m->layer_sel, "%s", strcmp(v, "all") == 0 ? "" : v);
    } else if (strcmp(key, "format") == 0) {
        if (parse_family(v, &m->family) != 0) {
            set_err(err, errlen, "model '%s': format must be auto, mha, explicit, llama, bert "
                    "or gpt2, got '%s'", m->name, v);
            return -1;
        }
    } else if (strcmp(key, "prefix") == 0) {
        m->prefix = (char *)v; /* borrowed from the caller's buffer; add_model copies */
    } else if (strcmp(key, "kv_dtype") == 0) {
        char what[120];
        snprintf(what, sizeof what, "model '%s': kv_dtype", m->name);
        if (parse_kv_dtype(what, v, &m->kv_dtype, err, errlen) != 0)
            return -1;
    } else if (strcmp(key, "weights") == 0) {
        if (parse_weights_dtype(v, &m->weights_dtype) != 0) {
            set_err(err, errlen, "model '%s': weights must be bf16, f16 or f32, got '%.40s'", m->name, v);
            return -1;
        }
    } else if (sched_key_of(key)) {
        return set_sched_key(m, sched_key_of(key), v, err, errlen);
    } else {
        set_err(err, errlen, "model '%s': unknown key '%s' (keys: %s)", m->name, key, spec_keys);
        return -1;
    }
    return 0;
}

/* Where the path ends: at the first ",KEY=" whose KEY is one of spec_keys'
 * shape (letters and '_'), so a path may itself hold commas. */
static char *path_end(char *path)
{
    for (char *c = strchr(path, ','); c; c = strchr(c + 1, ',')) {
        char *k = c + 1;
        while (*k == '_' || (*k >= 'a' && *k <= 'z'))
            k++;
        if (k > c + 1 && *k == '=')
            return c;
    }
    return NULL;
}

/* Checks a spec's keys against each other. */
static int check_spec(const attnd_model_spec *m, char *err, size_t errlen)
{
    if (m->all_layers && m->layer >= 0) {
        set_err(err, errlen, "model '%s': give layer=N or layers=all, not both", m->name);
        return -1;
    }
    if (m->kv_heads && m->heads && m->heads % m->kv_heads != 0) {
        set_err(err, errlen, "model '%s': kv_heads=%d must divide heads=%d", m->name,
                m->kv_heads, m->heads);
        return -1;
    }
    return 0;
}

/* Parses "NAME=PATH[,key=value...]" (len bytes of spec) and appends it. */
static int add_model_spec(attnd_config *cfg, const char *spec, size_t len, char *err,
                          size_t errlen)
{
    char buf[4096];
    if (len >= sizeof buf) {
        set_err(err, errlen, "model spec is too long");
        return -1;
    }
    memcpy(buf, spec, len);
    buf[len] = '\0';
    char *eq = strchr(buf, '=');
    if (!eq) {
        set_err(err, errlen, "model '%s': expected NAME=PATH[,key=value...] (keys: %s)", buf,
                spec_keys);
        return -1;
    }
    *eq = '\0';
    attnd_model_spec m = {.name = buf, .path = eq + 1, .layer = -1, .kv_dtype = -1,
                          .max_queue_delay_us = -1, .prefill_chunk_rows = -1};
    char *rest = path_end(m.path);
    if (rest)
        *rest++ = '\0';
    while (rest && *rest) {
        char *next = path_end(rest); /* a prefix value may hold commas too: same rule */
        if (next)
            *next++ = '\0';
        char *kv = strchr(rest, '=');
        *kv = '\0'; /* path_end found "KEY=" */
        if (set_spec_key(&m, rest, kv + 1, err, errlen) != 0)
            return -1;
        rest = next;
    }
    if (check_spec(&m, err, errlen) != 0)
        return -1;
    return add_model(cfg, &m, err, errlen);
}

int attnd_config_layer_list(const attnd_model_spec *spec, int n_layers, int **out, int *n,
                            char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    int *list = malloc((size_t)(n_layers > 0 ? n_layers : 1) * sizeof *list);
    char *seen = calloc((size_t)(n_layers > 0 ? n_layers : 1), 1);
    int k = 0;
    if (!list || !seen) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    if (!spec->layer_sel[0]) {
        for (k = 0; k < n_layers; k++)
            list[k] = k;
    }
    for (const char *c = spec->layer_sel; *c;) {
        char *end;
        long a = strtol(c, &end, 10), b = a;
        if (end == c || a < 0)
            goto bad;
        if (*end == '-') {
            const char *c2 = end + 1;
            b = strtol(c2, &end, 10);
            if (end == c2 || b < a)
                goto bad;
        }
        if (*end && *end != ',')
            goto bad;
        for (long l = a; l <= b; l++) {
            if (l >= n_layers) {
                set_err(err, errlen, "model '%s': layers=%s names layer %ld; the checkpoint "
                        "has layers 0..%d", spec->name, spec->layer_sel, l, n_layers - 1);
                goto fail;
            }
            if (seen[l]) {
                set_err(err, errlen, "model '%s': layers=%s names layer %ld twice", spec->name,
                        spec->layer_sel, l);
                goto fail;
            }
            seen[l] = 1;
            list[k++] = (int)l;
        }
        c = *end ? end + 1 : end;
        if (*end && !*c)
            goto bad;
    }
    free(seen);
    *out = list;
    *n = k;
    return 0;
bad:
    set_err(err, errlen, "model '%s': layers=%s is not a list of layers and ranges (e.g. "
            "0-7 or 0,2,4)", spec->name, spec->layer_sel);
fail:
    free(list);
    free(seen);
    return -1;
}

int attnd_config_expand_layers(attnd_config *cfg, int i, int n_layers, char *err,
                               size_t errlen)
{
    if (i < 0 || i >= cfg->n_models || n_layers < 1) {
        set_err(err, errlen, "expanding layers: bad arguments");
        return -1;
    }
    int *list = malloc((size_t)n_layers * sizeof *list);
    if (!list) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    for (int k = 0; k < n_layers; k++)
        list[k] = k;
    int rc = attnd_config_expand_layer_list(cfg, i, list, n_layers, err, errlen);
    free(list);
    return rc;
}

int attnd_config_expand_layer_list(attnd_config *cfg, int i, const int *layers, int n_layers,
                                   char *err, size_t errlen)
{
    if (i < 0 || i >= cfg->n_models || n_layers < 1) {
        set_err(err, errlen, "expanding layers: bad arguments");
        return -1;
    }
    attnd_model_spec base = cfg->models[i];
    attnd_model_spec *rest = NULL;
    int n_rest = cfg->n_models - i - 1;
    if (n_rest && !(rest = malloc((size_t)n_rest * sizeof *rest))) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    if (n_rest)
        memcpy(rest, cfg->models + i + 1, (size_t)n_rest * sizeof *rest);
    cfg->n_models = i; /* the specs after i are held in rest, base is held here */
    int rc = 0;
    for (int k = 0; k < n_layers && rc == 0; k++) {
        char name[96];
        snprintf(name, sizeof name, "%s.%d", base.name, layers[k]);
        attnd_model_spec one = base;
        one.name = name;
        one.layer = layers[k];
        one.all_layers = 0;
        one.layer_sel[0] = '\0';
        rc = add_model(cfg, &one, err, errlen);
    }
    if (rc == 0) { /* the group of them: one more name, which no model may have */
        attnd_model_group_spec *g = realloc(cfg->groups, (size_t)(cfg->n_groups + 1) * sizeof *g);
        int *copy = malloc((size_t)n_layers * sizeof *copy);
        if (g)
            cfg->groups = g;
        if (!g || !copy) {
            free(copy);
            set_err(err, errlen, "out of memory");
            rc = -1;
        } else {
            g = &cfg->groups[cfg->n_groups++];
            snprintf(g->name, sizeof g->name, "%s", base.name);
            memcpy(copy, layers, (size_t)n_layers * sizeof *copy);
            g->layers = copy;
            g->n_layers = n_layers;
        }
    }
    for (int k = 0; k < n_rest; k++) { /* back after the new ones, names checked again */
        if (rc == 0)
            rc = add_model(cfg, &rest[k], err, errlen);
        free_spec(&rest[k]);
    }
    free_spec(&base);
    free(rest);
    return rc;
}

/* ------------------------------------------------------------ setting values */

/* An OPT_LIST's new value: text, or (append) the old list, a comma, text. */
static int append_list(attnd_config *cfg, const option *o, const char *text, int append,
                       char *err, size_t errlen)
{
    char **field = FIELD(cfg, o, char *);
    const char *old = append && *field && **field ? *field : NULL;
    size_t n = (old ? strlen(old) + 1 : 0) + strlen(text) + 1;
    char *v = malloc(n);
    if (!v) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    snprintf(v, n, "%s%s%s", old ? old : "", old && *text ? "," : "", text);
    free(*field);
    *field = v;
    return 0;
}

/* Sets option o from text at source level src. */
static int set_option(attnd_config *cfg, const option *o, const char *text, int src, char *err,
                      size_t errlen)
{
    size_t idx = (size_t)(o - options);
    int64_t v;
    switch (o->kind) {
    case OPT_STR: {
        char *copy = strdup(text);
        if (!copy) {
            set_err(err, errlen, "out of memory");
            return -1;
        }
        free(*FIELD(cfg, o, char *));
        *FIELD(cfg, o, char *) = copy;
        break;
    }
    case OPT_LIST:
        if (append_list(cfg, o, text, cfg->source[idx] == src && src != SRC_DEFAULT, err,
                        errlen) != 0)
            return -1;
        break;
    case OPT_INT:
    case OPT_I64:
    case OPT_SIZE:
        if (parse_int64(text, o->kind == OPT_SIZE, &v) != 0 || v < o->min || v > o->max) {
            set_err(err, errlen, "%s: expected an integer in %lld..%lld%s, got '%s'", o->name,
                    (long long)o->min, (long long)o->max,
                    o->kind == OPT_SIZE ? " (K/M/G suffixes allowed)" : "", text);
            return -1;
        }
        if (o->kind == OPT_INT)
            *FIELD(cfg, o, int) = (int)v;
        else
            *FIELD(cfg, o, int64_t) = v;
        break;
    case OPT_LEVEL:
        if (attnd_log_level_parse(text, FIELD(cfg, o, attnd_log_level)) != 0) {
            set_err(err, errlen, "%s: expected debug, info, warn or error, got '%s'", o->name,
                    text);
            return -1;
        }
        break;
    case OPT_MODELS:
        /* A higher source replaces the list; the same source appends (repeats). */
        if (cfg->source[idx] < src)
            free_models(cfg);
        if (src != SRC_DEFAULT && *text && add_model_spec(cfg, text, strlen(text), err, errlen))
            return -1;
        break;
    }
    cfg->source[idx] = (unsigned char)src;
    return 0;
}

static const option *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0)
            return &options[i];
    return NULL;
}

/* ------------------------------------------------------------ the sources */

static int load_env(attnd_config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option *o = &options[i];
        char name[64];
        env_name(o, name, sizeof name);
        const char *v = getenv(name);
        if (!v || !*v || o->off == F(config_file))
            continue;
        if (o->kind != OPT_MODELS) {
            if (set_option(cfg, o, v, SRC_ENV, err, errlen))
                goto fail;
            continue;
        }
        set_option(cfg, o, "", SRC_ENV, err, errlen); /* clears the file's list */
        for (const char *p = v; *p;) {
            size_t n = strcspn(p, ";");
            if (n && add_model_spec(cfg, p, n, err, errlen))
                goto fail;
            p += n + (p[n] == ';');
        }
    }
    return 0;
fail: {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", err);
    set_err(err, errlen, "environment: %s", tmp);
    return -1;
}
}

/* A model object's keys into cfg's model list; where names it in err
 * ("models[2]"), name (when not NULL) is its name and "name" is then refused. */
static int object_model(attnd_config *cfg, json_t *m, const char *where, const char *name,
                        char *err, size_t errlen)
{
    attnd_model_spec spec = {.name = "", .path = "", .layer = -1, .kv_dtype = -1,
                             .max_queue_delay_us = -1, .prefill_chunk_rows = -1};
    int named = name != NULL;
    const char *path = NULL;
    const char *key;
    json_t *v;
    json_object_foreach(m, key, v) {
        char text[64];
        if (key[0] == '_')
            continue;
        if (strcmp(key, "name") == 0 && json_is_string(v) && !named) {
            name = json_string_value(v);
        } else if (strcmp(key, "path") == 0 && json_is_string(v)) {
            path = json_string_value(v);
        } else if ((strcmp(key, "format") == 0 || strcmp(key, "prefix") == 0 ||
                    strcmp(key, "layers") == 0 || strcmp(key, "kv_dtype") == 0 ||
                    strcmp(key, "weights") == 0) &&
                   json_is_string(v)) {
            spec.name = (char *)(name ? name : "");
            if (set_spec_key(&spec, key, json_string_value(v), err, errlen) != 0)
                return -1;
        } else if (sched_key_of(key) && (json_is_integer(v) || json_is_string(v))) {
            spec.name = (char *)(name ? name : "");
            if (json_is_integer(v))
                snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
            if (set_spec_key(&spec, key, json_is_string(v) ? json_string_value(v) : text, err,
                             errlen) != 0)
                return -1;
        } else if ((strcmp(key, "heads") == 0 || strcmp(key, "kv_heads") == 0 ||
                    strcmp(key, "layer") == 0) && json_is_integer(v)) {
            snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
            spec.name = (char *)(name ? name : "");
            if (json_integer_value(v) == 0 && strcmp(key, "layer") != 0)
                continue; /* 0 = from the checkpoint, as when absent */
            if (set_spec_key(&spec, key, text, err, errlen) != 0)
                return -1;
        } else {
            set_err(err, errlen, "%s.%s: unknown key or wrong type (%spath, format, prefix, "
                    "kv_dtype, weights and layers (\"all\") are strings; heads, kv_heads, layer, workers, "
                    "max_batch_requests, max_batch_tokens, max_queue_delay_us, prefill_chunk_rows integers; "
                    "max_batch_kv_bytes either)", where, key, named ? "" : "name, ");
            return -1;
        }
    }
    if (!name || !path) {
        set_err(err, errlen, named ? "%s: needs \"path\"" : "%s: needs \"name\" and \"path\"",
                where);
        return -1;
    }
    spec.name = (char *)name;
    spec.path = (char *)path;
    if (check_spec(&spec, err, errlen) != 0)
        return -1;
    return add_model(cfg, &spec, err, errlen);
}

static int file_model(attnd_config *cfg, json_t *m, size_t idx, char *err, size_t errlen)
{
    if (json_is_string(m))
        return add_model_spec(cfg, json_string_value(m), json_string_length(m), err, errlen);
    char where[32];
    snprintf(where, sizeof where, "models[%zu]", idx);
    if (!json_is_object(m)) {
        set_err(err, errlen, "%s: expected \"NAME=PATH[,key=value...]\" or an object", where);
        return -1;
    }
    return object_model(cfg, m, where, NULL, err, errlen);
}

int attnd_config_spec_from_json(attnd_model_spec *out, const char *name, const void *json,
                                const char *where, char *err, size_t errlen)
{
    attnd_config one = {0};
    json_t *obj = (json_t *)(uintptr_t)json;
    memset(out, 0, sizeof *out);
    if (!json_is_object(obj)) {
        set_err(err, errlen, "%s: expected an object of model keys (path, layer, format, ...)",
                where);
        return -1;
    }
    if (object_model(&one, obj, where, name, err, errlen) != 0) {
        free_models(&one);
        return -1;
    }
    *out = one.models[0]; /* moved: one gives up its only spec */
    free(one.models);
    return 0;
}

int attnd_config_spec_copy(attnd_model_spec *dst, const attnd_model_spec *src)
{
    attnd_config one = {0};
    char err[256];
    memset(dst, 0, sizeof *dst);
    if (add_model(&one, src, err, sizeof err) != 0) {
        free(one.models); /* grown before a copy of a name failed */
        return -1;
    }
    *dst = one.models[0];
    free(one.models);
    return 0;
}

void attnd_config_spec_free(attnd_model_spec *m)
{
    free_spec(m);
    memset(m, 0, sizeof *m);
}

static int file_value(attnd_config *cfg, const option *o, json_t *v, char *err, size_t errlen)
{
    char text[64];
    if (o->kind == OPT_MODELS) {
        if (!json_is_array(v)) {
            set_err(err, errlen, "models: expected an array");
            return -1;
        }
        set_option(cfg, o, "", SRC_FILE, err, errlen);
        size_t i;
        json_t *m;
        json_array_foreach(v, i, m) {
            if (file_model(cfg, m, i, err, errlen))
                return -1;
        }
        return 0;
    }
    if (o->kind == OPT_LIST && json_is_array(v)) {
        size_t i;
        json_t *item;
        set_option(cfg, o, "", SRC_FILE, err, errlen);
        json_array_foreach(v, i, item) {
            if (!json_is_string(item)) {
                set_err(err, errlen, "%s[%zu]: expected a string", o->name, i);
                return -1;
            }
            if (set_option(cfg, o, json_string_value(item), SRC_FILE, err, errlen))
                return -1;
        }
        return 0;
    }
    if (json_is_string(v))
        return set_option(cfg, o, json_string_value(v), SRC_FILE, err, errlen);
    if (json_is_integer(v) && o->kind != OPT_STR && o->kind != OPT_LIST &&
        o->kind != OPT_LEVEL) {
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return set_option(cfg, o, text, SRC_FILE, err, errlen);
    }
    set_err(err, errlen, "%s: wrong JSON type", o->name);
    return -1;
}

/* Refuses a file anyone may write: whoever can edit it controls the server
 * (models, keys). Group-writable files are allowed (deployment groups). */
int attnd_config_check_file_mode(const char *what, const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        set_err(err, errlen, "%s %s: %s", what, path, strerror(errno));
        return -1;
    }
    if (st.st_mode & S_IWOTH) {
        set_err(err, errlen, "%s %s is world-writable (mode %03o): refusing to use it; "
                "chmod o-w it", what, path, (unsigned)(st.st_mode & 0777));
        return -1;
    }
    return 0;
}

static int load_file(attnd_config *cfg, const char *path, char *err, size_t errlen)
{
    if (attnd_config_check_file_mode("config", path, err, errlen))
        return -1;
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    char inner[512] = "";
    int rc = -1;
    if (!root) {
        set_err(err, errlen, "config %s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
        return -1;
    }
    if (!json_is_object(root)) {
        set_err(err, errlen, "config %s: expected a JSON object at the top", path);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (key[0] == '_')
            continue; /* "_comment": ... */
        const option *o = NULL;
        for (size_t i = 0; i < N_OPTIONS && !o; i++) {
            char fk[64];
            file_key(&options[i], fk, sizeof fk);
            if (*fk && strcmp(fk, key) == 0)
                o = &options[i];
        }
        if (!o) {
            snprintf(inner, sizeof inner, "unknown key \"%s\"", key);
            goto bad;
        }
        if (file_value(cfg, o, v, inner, sizeof inner))
            goto bad;
    }
    rc = 0;
    goto done;
bad:
    set_err(err, errlen, "config %s: %s", path, inner);
done:
    json_decref(root);
    return rc;
}

/* --listen PORT (digits only) means PORT on the default host: "8080" becomes
 * "0.0.0.0:8080", as ":8080" is every interface. Returns 0, or -1 on no memory. */
static int normalize_listen(attnd_config *cfg, char *err, size_t errlen)
{
    const char *v = cfg->listen;
    if (!*v || strspn(v, "0123456789") != strlen(v))
        return 0;
    const option *o = find_flag("listen", 6);
    const char *def_colon = strrchr(o->def, ':');
    size_t n = (size_t)(def_colon - o->def) + 1 + strlen(v) + 1;
    char *full = malloc(n);
    if (!full) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    snprintf(full, n, "%.*s:%s", (int)(def_colon - o->def), o->def, v);
    free(cfg->listen);
    cfg->listen = full;
    return 0;
}

/* ------------------------------------------------------------ argv */

typedef struct flag_value {
    const option *opt;
    const char *value;
} flag_value;

/* Checks argv's syntax and collects (option, value) pairs. Returns the action
 * HELP/VERSION/PRINT if one of those flags is present, RUN, or ERROR. */
static attnd_config_action scan_argv(int argc, char *const *argv, flag_value *out, int *n_out,
                                     const char **inspect, char *err, size_t errlen)
{
    attnd_config_action action = ATTND_CONFIG_RUN;
    *n_out = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return ATTND_CONFIG_HELP;
        if (!strcmp(a, "--inspect") || !strncmp(a, "--inspect=", 10)) {
            *inspect = a[9] == '=' ? a + 10 : i + 1 < argc ? argv[++i] : NULL;
            if (!*inspect || !**inspect) {
                set_err(err, errlen, "--inspect needs a PATH (a .safetensors file or a model "
                        "directory)");
                return ATTND_CONFIG_ERROR;
            }
            action = ATTND_CONFIG_INSPECT;
            continue;
        }
        if (!strcmp(a, "--version") || !strcmp(a, "-V")) {
            action = ATTND_CONFIG_VERSION;
            continue;
        }
        if (!strcmp(a, "--print-config")) {
            if (action == ATTND_CONFIG_RUN)
                action = ATTND_CONFIG_PRINT;
            continue;
        }
        if (!strcmp(a, "--no-ui")) { /* the one flag without a value: --ui 0 */
            out[(*n_out)++] = (flag_value){find_flag("ui", 2), "0"};
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            set_err(err, errlen, "unexpected argument '%s' (see --help)", a);
            return ATTND_CONFIG_ERROR;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        const option *o = find_flag(name, eq ? (size_t)(eq - name) : strlen(name));
        if (!o) {
            set_err(err, errlen, "unknown option '%s' (see --help)", a);
            return ATTND_CONFIG_ERROR;
        }
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!value) {
            set_err(err, errlen, "option --%s needs a value (%s)", o->name, o->metavar);
            return ATTND_CONFIG_ERROR;
        }
        out[(*n_out)++] = (flag_value){o, value};
    }
    return action;
}

attnd_config_action attnd_config_load(attnd_config *cfg, int argc, char *const *argv,
                                      char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    flag_value *flags = calloc((size_t)(argc > 0 ? argc : 1), sizeof *flags);
    attnd_config_action action = ATTND_CONFIG_ERROR;
    int n_flags = 0;
    if (!flags) {
        set_err(err, errlen, "out of memory");
        return ATTND_CONFIG_ERROR;
    }
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (set_option(cfg, &options[i], options[i].def, SRC_DEFAULT, err, errlen))
            goto done; /* a bad default is a bug in the table */

    const char *inspect = NULL;
    action = scan_argv(argc, argv, flags, &n_flags, &inspect, err, errlen);
    if (inspect && !(cfg->inspect_path = strdup(inspect))) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    if (action == ATTND_CONFIG_ERROR || action == ATTND_CONFIG_HELP ||
        action == ATTND_CONFIG_VERSION || action == ATTND_CONFIG_INSPECT)
        goto done;

    /* The file's name itself: flag > env. */
    const char *file = getenv("ATTND_CONFIG");
    if (file && *file)
        set_option(cfg, &options[0], file, SRC_ENV, err, errlen);
    for (int i = 0; i < n_flags; i++)
        if (flags[i].opt->off == F(config_file))
            set_option(cfg, flags[i].opt, flags[i].value, SRC_FLAG, err, errlen);
    if (*cfg->config_file && load_file(cfg, cfg->config_file, err, errlen))
        goto fail;
    if (load_env(cfg, err, errlen))
        goto fail;
    for (int i = 0; i < n_flags; i++) {
        if (flags[i].opt->off == F(config_file))
            continue;
        if (set_option(cfg, flags[i].opt, flags[i].value, SRC_FLAG, err, errlen))
            goto fail;
    }
    if (normalize_listen(cfg, err, errlen) != 0 ||
        attnd_log_format_parse(cfg->log_format_name, (attnd_log_format *)&cfg->log_format)) {
        if (!*err)
            set_err(err, errlen, "--log-format must be text or json, got '%.40s'",
                    cfg->log_format_name);
        goto fail;
    }
    if (action == ATTND_CONFIG_PRINT)
        goto done;

    if (cfg->n_models == 0) {
        set_err(err, errlen, "no model to serve: give --model NAME=PATH (or ATTND_MODELS, or "
                "\"models\" in the config file)");
        goto fail;
    }
    if (parse_kv_dtype("--kv-dtype", cfg->kv_dtype_name, &cfg->kv_dtype, err, errlen) != 0)
        goto fail;
    if (*cfg->replica_name && !attnd_replica_name_valid(cfg->replica_name)) {
        set_err(err, errlen, "--replica-name '%.64s': use 1..%d of [a-z0-9-], starting and "
                "ending with a letter or digit", cfg->replica_name, ATTND_REPLICA_NAME_MAX);
        goto fail;
    }
    if (cfg->kv_page_bytes % 4 != 0 ||
        (cfg->kv_page_bytes > 0 && cfg->kv_page_bytes < ATTND_KV_PAGE_MIN_BYTES) ||
        (cfg->kv_cache_bytes > 0 && cfg->kv_page_bytes > cfg->kv_cache_bytes)) {
        set_err(err, errlen, "--kv-page-bytes %lld must be 0 (fitted to the models) or a multiple "
                "of 4 of at least %d, and at most --kv-cache-bytes", (long long)cfg->kv_page_bytes,
                ATTND_KV_PAGE_MIN_BYTES);
        goto fail;
    }
    if (!*cfg->tls_cert != !*cfg->tls_key) {
        set_err(err, errlen, "--tls-cert and --tls-key go together: give both or neither");
        goto fail;
    }
    if (*cfg->default_model) {
        int found = 0;
        for (int i = 0; i < cfg->n_models; i++)
            found |= strcmp(cfg->models[i].name, cfg->default_model) == 0;
        for (int i = 0; i < cfg->n_models && !found; i++) { /* NAME.N of a layers=all */
            size_t n = strlen(cfg->models[i].name);
            found = cfg->models[i].all_layers &&
                    strncmp(cfg->models[i].name, cfg->default_model, n) == 0 &&
                    cfg->default_model[n] == '.';
        }
        if (!found) {
            set_err(err, errlen, "default model '%s' is not among the loaded models",
                    cfg->default_model);
            goto fail;
        }
    }
    goto done;
fail:
    action = ATTND_CONFIG_ERROR;
done:
    free(flags);
    return action;
}

void attnd_config_free(attnd_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < N_OPTIONS; i++) {
        if (options[i].kind == OPT_STR || options[i].kind == OPT_LIST) {
            free(*FIELD(cfg, &options[i], char *));
            *FIELD(cfg, &options[i], char *) = NULL;
        }
    }
    free_models(cfg);
    for (int i = 0; i < cfg->n_groups; i++)
        free(cfg->groups[i].layers);
    free(cfg->groups);
    cfg->groups = NULL;
    cfg->n_groups = 0;
    free(cfg->inspect_path);
    cfg->inspect_path = NULL;
}

/* ------------------------------------------------------------ printing */

/* A size as the flags take it: 64M, 1G, 512K when a whole multiple, else bytes. */
static void format_size(int64_t v, char *buf, size_t cap)
{
    static const char units[] = "GMK";
    for (int i = 0; i < 3; i++) {
        int64_t m = INT64_C(1) << (10 * (3 - i));
        if (v != 0 && v % m == 0) {
            snprintf(buf, cap, "%lld%c", (long long)(v / m), units[i]);
            return;
        }
    }
    snprintf(buf, cap, "%lld", (long long)v);
}

static void format_value(const attnd_config *cfg, const option *o, char *buf, size_t cap)
{
    if (o->off == F(api_keys)) { /* a secret: never printed or logged */
        const char *k = cfg->api_keys ? cfg->api_keys : "";
        snprintf(buf, cap, "%s", *k ? "(set, hidden)" : "");
        return;
    }
    switch (o->kind) {
    case OPT_STR:
    case OPT_LIST:
        snprintf(buf, cap, "%s", *FIELD(cfg, o, char *) ? *FIELD(cfg, o, char *) : "");
        break;
    case OPT_INT:
        snprintf(buf, cap, "%d", *FIELD(cfg, o, int));
        break;
    case OPT_I64:
        snprintf(buf, cap, "%lld", (long long)*FIELD(cfg, o, int64_t));
        break;
    case OPT_SIZE:
        format_size(*FIELD(cfg, o, int64_t), buf, cap);
        break;
    case OPT_LEVEL:
        snprintf(buf, cap, "%s", attnd_log_level_name(*FIELD(cfg, o, attnd_log_level)));
        break;
    case OPT_MODELS: {
        size_t n = 0;
        buf[0] = '\0';
        for (int i = 0; i < cfg->n_models && n < cap; i++) {
            const attnd_model_spec *m = &cfg->models[i];
            n += (size_t)snprintf(buf + n, cap - n, "%s%s=%s", i ? ";" : "", m->name, m->path);
            if (m->heads && n < cap)
                n += (size_t)snprintf(buf + n, cap - n, ",heads=%d", m->heads);
            if (m->kv_heads && n < cap)
                n += (size_t)snprintf(buf + n, cap - n, ",kv_heads=%d", m->kv_heads);
            if (m->layer >= 0 && n < cap)
                n += (size_t)snprintf(buf + n, cap - n, ",layer=%d", m->layer);
            if (m->all_layers && n < cap)
                n += (size_t)snprintf(buf + n, cap - n, ",layers=%s",
                                      m->layer_sel[0] ? m->layer_sel : "all");
            if (m->family && n < cap)
                n += (size_t)snprintf(buf + n, cap - n, ",format=%s",
                                      attn_family_name((attn_family)m->family));
            if (m->prefix && n < cap)
                n += (size_t)snprintf(buf + n, cap - n, ",prefix=%s", m->prefix);
            if (m->kv_dtype >= 0 && n < cap)
                n += (size_t)snprintf(buf + n, cap - n, ",kv_dtype=%s", kv_dtype_names[m->kv_dtype]);
            if (m->weights_dtype && n < cap)
                n += (size_t)snprintf(buf + n, cap - n, ",weights=%s",
                                      attn_weight_dtype_name((attn_weight_dtype)m->weights_dtype));
            for (size_t k = 0; k < sizeof sched_keys / sizeof sched_keys[0] && n < cap; k++) {
                const char *f = (const char *)m + sched_keys[k].off;
                int64_t v = sched_keys[k].is_int ? *(const int *)f : *(const int64_t *)f;
                if (v > 0 || (v == 0 && sched_keys[k].zero_is_set))
                    n += (size_t)snprintf(buf + n, cap - n, ",%s=%lld", sched_keys[k].key,
                                          (long long)v);
            }
        }
        break;
    }
    }
}

void attnd_config_print_help(FILE *f, const char *prog)
{
    fprintf(f,
            "attnd %s - multi-head attention inference server (HTTP/JSON)\n\n"
            "usage: %s --model NAME=PATH[,key=value...] [options]\n"
            "       %s --inspect PATH\n\n"
            "PATH is a .safetensors file or a Hugging Face model directory (config.json\n"
            "and model.safetensors, or a sharded model.safetensors.index.json). Keys:\n"
            "layer=N (which layer; needed when there are several), layers=all (one model\n"
            "per layer, named NAME.N), format=auto|mha|explicit|llama|bert|gpt2,\n"
            "prefix=P (a state_dict prefix, e.g. self_attn.), heads=N, kv_heads=N,\n"
            "kv_dtype=f32|f16|bf16, weights=bf16|f16|f32 (how W_Q/K/V/O are kept; default:\n"
            "as the checkpoint stores them); the model's own scheduler: workers=N,\n"
            "max_batch_requests=N, max_batch_tokens=N, max_batch_kv_bytes=BYTES,\n"
            "max_queue_delay_us=US, prefill_chunk_rows=N (each overrides the global option\n"
            "for that model).\n\n"
            "Settings come from, in rising precedence: defaults, the --config JSON file,\n"
            "ATTND_* environment variables, command-line flags.\n\n"
            "options:\n",
            ATTN_VERSION_STRING, prog, prog);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option *o = &options[i];
        char flag[64], env[64];
        snprintf(flag, sizeof flag, "--%s %s", o->name, o->metavar);
        env_name(o, env, sizeof env);
        fprintf(f, "  %-36s %s\n  %-36s [default: %s] [env: %s]\n", flag, o->help, "",
                *o->def ? o->def : "none", env);
    }
    fprintf(f, "  %-36s %s\n", "--no-ui", "the same as --ui 0");
    fprintf(f, "  %-36s %s\n", "--inspect PATH",
            "print what a checkpoint file or directory holds and what attnd would serve");
    fprintf(f, "  %-36s %s\n  %-36s %s\n  %-36s %s\n", "--print-config",
            "print the effective settings and their sources, then exit", "--version, -V",
            "print the version and exit", "--help, -h", "print this help and exit");
}

/* Where option i's value came from: "default", "file", "env" or "flag", and
 * ", = default" after the last three when the value is the default anyway (an
 * example config that restates defaults then says so). */
static void source_text(const attnd_config *cfg, size_t i, const char *value, char *buf,
                        size_t cap)
{
    int src = cfg->source[i] & 3;
    char def[1024] = "";
    if (src != SRC_DEFAULT && options[i].kind != OPT_MODELS) {
        attnd_config scratch;
        char err[256];
        memset(&scratch, 0, sizeof scratch);
        if (set_option(&scratch, &options[i], options[i].def, SRC_DEFAULT, err, sizeof err) == 0)
            format_value(&scratch, &options[i], def, sizeof def);
        attnd_config_free(&scratch);
    }
    int same = src != SRC_DEFAULT && options[i].kind != OPT_MODELS && strcmp(def, value) == 0;
    snprintf(buf, cap, "%s%s", source_names[src], same ? ", = default" : "");
}

void attnd_config_print(FILE *f, const attnd_config *cfg)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        char v[1024], src[48];
        format_value(cfg, &options[i], v, sizeof v);
        source_text(cfg, i, v, src, sizeof src);
        fprintf(f, "%s = %s  (%s)\n", options[i].name, v, src);
    }
}

void attnd_config_log(const attnd_config *cfg)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        char v[1024], src[48];
        format_value(cfg, &options[i], v, sizeof v);
        source_text(cfg, i, v, src, sizeof src);
        attnd_log(ATTND_LOG_INFO, "config %s=%s (%s)", options[i].name, v, src);
    }
}

int attnd_replica_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > ATTND_REPLICA_NAME_MAX || name[0] == '-' || name[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
              name[i] == '-'))
            return 0;
    return 1;
}
