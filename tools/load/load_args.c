/* load_args.c — attnd-load's command-line parser and the parsers of its value syntaxes.
 * Every bad value is reported with the option's name and what was expected. */
#include "load_args.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LEVELS 256
#define MAX_LEVEL 1e6
#define MAX_SEQ (1 << 20)
#define MAX_CONCURRENCY 65536

static int errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Whole string is a finite double. */
static int parse_double(const char *s, double *v)
{
    char *end;
    if (!*s) return -1;
    errno = 0;
    *v = strtod(s, &end);
    return (*end || errno || !isfinite(*v)) ? -1 : 0;
}

static int parse_long(const char *s, long lo, long hi, long *v)
{
    char *end;
    if (!*s) return -1;
    errno = 0;
    *v = strtol(s, &end, 10);
    return (*end || errno || *v < lo || *v > hi) ? -1 : 0;
}

static int push_level(double **v, size_t *n, double x, int integer, char *err, size_t errlen)
{
    if (!(x > 0) || x > MAX_LEVEL) return errf(err, errlen, "level %g out of range (0, 1e6]", x);
    if (integer && x != floor(x)) return errf(err, errlen, "level %g is not a whole number", x);
    if (*n >= MAX_LEVELS) return errf(err, errlen, "more than %d levels", MAX_LEVELS);
    (*v)[(*n)++] = x;
    return 0;
}

/* One comma item: "a" or "a:b:xK" or "a:b:+K". */
static int parse_sweep_item(char *item, int integer, double **v, size_t *n, char *err,
                            size_t errlen)
{
    char *c1 = strchr(item, ':');
    double a, b, k;
    if (!c1) {
        if (parse_double(item, &a)) return errf(err, errlen, "'%s' is not a number", item);
        return push_level(v, n, a, integer, err, errlen);
    }
    char *c2 = strchr(c1 + 1, ':');
    if (!c2) return errf(err, errlen, "range '%s' needs a step: A:B:xK or A:B:+K", item);
    *c1 = *c2 = 0;
    char op = c2[1];
    if (parse_double(item, &a) || parse_double(c1 + 1, &b) || (op != 'x' && op != '+') ||
        parse_double(c2 + 2, &k))
        return errf(err, errlen, "bad range; expected A:B:xK or A:B:+K");
    if (!(a > 0) || b < a) return errf(err, errlen, "range %g:%g: need 0 < A <= B", a, b);
    if (op == 'x' ? !(k > 1) : !(k > 0))
        return errf(err, errlen, "range step %c%g must be %s", op, k, op == 'x' ? "> 1" : "> 0");
    for (double x = a; x <= b * (1 + 1e-12); x = op == 'x' ? x * k : x + k)
        if (push_level(v, n, x, integer, err, errlen)) return -1;
    return 0;
}

int load_parse_sweep(const char *s, int integer, double **out, size_t *n, char *err, size_t errlen)
{
    double *v = malloc(MAX_LEVELS * sizeof *v);
    char *copy = strdup(s ? s : "");
    size_t count = 0;
    if (!v || !copy) {
        errf(err, errlen, "out of memory");
        goto fail;
    }
    if (!*copy) {
        errf(err, errlen, "empty list");
        goto fail;
    }
    for (char *item = copy, *next; item; item = next) {
        next = strchr(item, ',');
        if (next) *next++ = 0;
        if (!*item) {
            errf(err, errlen, "empty item in '%s'", s);
            goto fail;
        }
        if (parse_sweep_item(item, integer, &v, &count, err, errlen)) goto fail;
    }
    free(copy);
    *out = v;
    *n = count;
    return 0;
fail:
    free(v);
    free(copy);
    return -1;
}

int load_parse_range(const char *s, int max, int *lo, int *hi, char *err, size_t errlen)
{
    char buf[64];
    long a, b;
    if (strlen(s) >= sizeof buf) return errf(err, errlen, "'%s' too long", s);
    strcpy(buf, s);
    char *colon = strchr(buf, ':');
    if (colon) *colon = 0;
    if (parse_long(buf, 1, max, &a) || (colon && parse_long(colon + 1, 1, max, &b)))
        return errf(err, errlen, "'%s': expected N or A:B with 1 <= A <= B <= %d", s, max);
    if (!colon) b = a;
    if (b < a) return errf(err, errlen, "'%s': A must not exceed B", s);
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}

int load_parse_duration(const char *s, double *secs, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double unit = !strcmp(end, "") || !strcmp(end, "s") ? 1
                  : !strcmp(end, "ms")                  ? 1e-3
                  : !strcmp(end, "m")                   ? 60
                                                        : -1;
    if (end == s || errno || unit < 0 || !isfinite(v) || v < 0 || v * unit > 86400)
        return errf(err, errlen, "'%s': expected a duration like 5s, 500ms, 2m", s);
    *secs = v * unit;
    return 0;
}

static int read_seq_dist(load_opts *o, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    char line[128];
    size_t cap = 0, lineno = 0;
    if (!f) return errf(err, errlen, "--seq-len-dist: cannot open %s", path);
    while (fgets(line, sizeof line, f)) {
        long v;
        lineno++;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        if (parse_long(line, 1, MAX_SEQ, &v)) {
            fclose(f);
            return errf(err, errlen, "--seq-len-dist %s:%zu: '%s' is not a length in 1..%d",
                        path, lineno, line, MAX_SEQ);
        }
        if (o->seq_dist_n == cap) {
            cap = cap ? 2 * cap : 64;
            int *d = realloc(o->seq_dist, cap * sizeof *d);
            if (!d) {
                fclose(f);
                return errf(err, errlen, "out of memory");
            }
            o->seq_dist = d;
        }
        o->seq_dist[o->seq_dist_n++] = (int)v;
    }
    fclose(f);
    if (!o->seq_dist_n) return errf(err, errlen, "--seq-len-dist %s: no lengths", path);
    return 0;
}

void load_usage(FILE *f)
{
    fputs(
        "attnd-load — drive a running attnd with attention requests and measure it.\n"
        "\n"
        "usage: attnd-load [options]\n"
        "\n"
        "target\n"
        "  --url URL              base URL (default http://127.0.0.1:8080)\n"
        "  --model NAME           POST URL/v1/models/NAME/attention (default: /v1/attention)\n"
        "  --protocol v1|v2       v2: KServe v2, POST URL/v2/models/NAME/infer (needs --model);\n"
        "                         query FP32 [B,T,E] (B = --batch or 1, one T per request;\n"
        "                         --seq-len A:B still varies T across requests), key/value\n"
        "                         with --cross, is_causal/window/need_weights as parameters\n"
        "  --binary               v2: send tensors as binary data (Inference-Header-Content-\n"
        "                         Length) and ask for binary outputs; checks their sizes\n"
        "                         (--sessions: appends as v2 binary tensors, no JSON floats)\n"
        "requests (bodies are pre-generated into a pool, seeded; generation is not measured)\n"
        "  --seq-len N|A:B        query length T, fixed or uniform in [A,B] (default 32)\n"
        "  --seq-len-dist FILE    T sampled from FILE's lines (one length per line)\n"
        "  --embed E              query width (default: asked from GET /v1/models/NAME)\n"
        "  --cross                cross-attention: send key (and value) rows\n"
        "  --key-len N|A:B        key length S with --cross (default: same as T)\n"
        "  --need-weights         ask for (head-averaged) attention weights; checks their shape\n"
        "  --causal               is_causal: true\n"
        "  --window N             sliding window\n"
        "  --key-padding P        mask the last fraction P of every sequence's keys (0 <= P < 1)\n"
        "  --batch B              B sequences per request (B x T x E; each T drawn separately\n"
        "                         in v1, one T for all B in v2)\n"
        "  --request-file FILE    send FILE as is (repeatable: a pool of files)\n"
        "  --pool N               distinct generated bodies (default 64)\n"
        "  --seed S               PRNG seed (default 1)\n"
        "load\n"
        "  --concurrency LIST     closed loop, LIST = 1,8,64 or 1:64:x2 or 10:40:+10 (default 1)\n"
        "  --rate LIST            open loop at R requests/s per level (same LIST syntax);\n"
        "                         latency counts from the scheduled send time. A request\n"
        "                         is late when sent more than 1 ms after that time (all\n"
        "                         --max-inflight were in flight, or this client was too\n"
        "                         busy); the table gives late, late% and the achieved\n"
        "                         rate, marked SHORT when more than 5% below the offer\n"
        "  --max-late-fraction F  --rate: exit 4 when more than F of a level's requests\n"
        "                         started late (default: never)\n"
        "  --duration D           measured time per level (default 5s; also 500ms, 2m, or 1.5\n"
        "                         meaning seconds)\n"
        "  --requests N           measure N requests per level instead of a duration\n"
        "  --warmup D             unmeasured load before each level (default 1s)\n"
        "  --timeout D            per-request timeout (default 30s)\n"
        "  --max-inflight N       open loop: cap on requests in flight (default 1024)\n",
        f);
    fputs(
        "streaming sessions (decode): a mode of its own, needs --model\n"
        "  --sessions LIST        N streams at once (LIST as for --concurrency: one level per N);\n"
        "                         each stream: create a session, prefill --prefix positions,\n"
        "                         --steps one-position appends (the next sent when the last\n"
        "                         answer came: one in flight per session), then delete it.\n"
        "                         Decoding starts when every stream has prefilled.\n"
        "                         A model group (--model NAME=DIR,layers=all on the server):\n"
        "                         each stream is one sequence session, and every append goes\n"
        "                         to each layer in turn (a token = one append per layer).\n"
        "  --prefix P             positions prefilled per stream (default 128; 0 = none)\n"
        "  --steps K              one-position appends per stream (default 32)\n"
        "  --prefill-chunk C      prefill in appends of at most C rows (default: all at once)\n"
        "  --window W             the sessions' window (default: unbounded)\n"
        "  --max-retries N        503 with Retry-After: retry each call up to N times, waiting\n"
        "                         as told (at most 5 s), before it counts (default 3)\n"
        "  --duration D           caps each level's decode phase (default: no cap)\n"
        "  --interleave K         one closed-loop client drives K sessions in turn, one request\n"
        "                         at a time (as a decode loop over a batch of sequences or over\n"
        "                         the layers of a model does); N/K clients (default 1)\n"
        "  --prefill-every D      during the decode phase a prefill client creates a session,\n"
        "                         appends --prefill-rows rows in one append (its time is the\n"
        "                         TTFT), deletes it, and starts the next D after the last began\n"
        "                         (or at once when late): a decode mix (default: none)\n"
        "  --prefill-rows R       rows of each such prefill (default: --prefix)\n"
        "  also: --url --model --embed --seed --pool --timeout --binary, the output options; other\n"
        "  request and load options are refused\n"
        "output\n"
        "  --json FILE, --csv FILE, --svg FILE   results per level; SVG chart of rps and p99\n"
        "                         (--sessions: decode tokens/s and time per token over time)\n"
        "  --quiet                no progress line on stderr\n"
        "  --max-error-rate F     exit 1 when errors/requests > F (default 0.01)\n"
        "  --help\n"
        "\n"
        "Latency is wall time per request on the client; percentiles are exact nearest-rank\n"
        "over every successful request of the level (value at rank ceil(p/100*n)).\n"
        "Exit status: 0 ok; 1 error rate above --max-error-rate, or no request succeeded;\n"
        "2 bad usage; 3 could not start (server unreachable, model unknown, unreadable file);\n"
        "4 late fraction above --max-late-fraction (requests not sent on schedule).\n"
        "\n"
        "examples\n"
        "  attnd-load --model demo --concurrency 1:64:x2 --duration 5s --seq-len 16:128\n"
        "  attnd-load --model demo --rate 200,400,800 --duration 10s --json r.json --svg r.svg\n"
        "  attnd-load --model demo --cross --key-len 256 --need-weights --batch 4\n"
        "  attnd-load --model demo --request-file proto/examples/self_single.request.json\n"
        "  attnd-load --model demo --protocol v2 --binary --batch 8 --seq-len 16:128\n"
        "  attnd-load --model demo --sessions 1,8,32 --prefix 512 --steps 64 --svg s.svg\n",
        f);
}

enum {
    O_URL = 256, O_MODEL, O_SEQ, O_SEQDIST, O_EMBED, O_CROSS, O_KEYLEN, O_WEIGHTS, O_CAUSAL,
    O_WINDOW, O_KPAD, O_BATCH, O_REQFILE, O_POOL, O_SEED, O_CONC, O_RATE, O_DUR, O_REQS,
    O_WARM, O_TIMEOUT, O_INFLIGHT, O_JSON, O_CSV, O_SVG, O_QUIET, O_MAXERR, O_HELP,
    O_PROTOCOL, O_BINARY, O_SESSIONS, O_PREFIX, O_STEPS, O_PCHUNK, O_RETRIES, O_MAXLATE,
    O_INTERLEAVE, O_PEVERY, O_PROWS,
    O_END /* one past the last */
};

static const struct option long_opts[] = {
    {"url", required_argument, 0, O_URL},
    {"model", required_argument, 0, O_MODEL},
    {"seq-len", required_argument, 0, O_SEQ},
    {"seq-len-dist", required_argument, 0, O_SEQDIST},
    {"embed", required_argument, 0, O_EMBED},
    {"cross", no_argument, 0, O_CROSS},
    {"key-len", required_argument, 0, O_KEYLEN},
    {"need-weights", no_argument, 0, O_WEIGHTS},
    {"causal", no_argument, 0, O_CAUSAL},
    {"window", required_argument, 0, O_WINDOW},
    {"key-padding", required_argument, 0, O_KPAD},
    {"batch", required_argument, 0, O_BATCH},
    {"request-file", required_argument, 0, O_REQFILE},
    {"pool", required_argument, 0, O_POOL},
    {"seed", required_argument, 0, O_SEED},
    {"concurrency", required_argument, 0, O_CONC},
    {"rate", required_argument, 0, O_RATE},
    {"duration", required_argument, 0, O_DUR},
    {"requests", required_argument, 0, O_REQS},
    {"warmup", required_argument, 0, O_WARM},
    {"timeout", required_argument, 0, O_TIMEOUT},
    {"max-inflight", required_argument, 0, O_INFLIGHT},
    {"json", required_argument, 0, O_JSON},
    {"csv", required_argument, 0, O_CSV},
    {"svg", required_argument, 0, O_SVG},
    {"quiet", no_argument, 0, O_QUIET},
    {"max-error-rate", required_argument, 0, O_MAXERR},
    {"help", no_argument, 0, O_HELP},
    {"protocol", required_argument, 0, O_PROTOCOL},
    {"binary", no_argument, 0, O_BINARY},
    {"sessions", required_argument, 0, O_SESSIONS},
    {"prefix", required_argument, 0, O_PREFIX},
    {"steps", required_argument, 0, O_STEPS},
    {"prefill-chunk", required_argument, 0, O_PCHUNK},
    {"max-retries", required_argument, 0, O_RETRIES},
    {"max-late-fraction", required_argument, 0, O_MAXLATE},
    {"interleave", required_argument, 0, O_INTERLEAVE},
    {"prefill-every", required_argument, 0, O_PEVERY},
    {"prefill-rows", required_argument, 0, O_PROWS},
    {0, 0, 0, 0},
};

static void set_defaults(load_opts *o)
{
    memset(o, 0, sizeof *o);
    o->url = "http://127.0.0.1:8080";
    o->seq_min = o->seq_max = 32;
    o->pool = 64;
    o->seed = 1;
    o->duration_s = 5;
    o->warmup_s = 1;
    o->timeout_s = 30;
    o->max_inflight = 1024;
    o->max_error_rate = 0.01;
    o->protocol = 1;
    o->prefix = 128;
    o->steps = 32;
    o->max_retries = 3;
    o->interleave = 1;
    o->max_late_fraction = -1;
}

/* The option's name for messages ("--rate"). */
static const char *opt_name(int c) { return long_opts[c - O_URL].name; }

/* Options that do not apply to --sessions, and why. */
static const struct {
    int opt;
    const char *why;
} not_for_sessions[] = {
    {O_CONC, "--sessions N is the concurrency: one append in flight per stream"},
    {O_RATE, "--sessions runs a closed loop per stream, not a schedule"},
    {O_REQS, "--steps sets the appends per stream"},
    {O_WARM, "there is no warm-up: decoding starts once every stream has prefilled"},
    {O_INFLIGHT, "one append in flight per stream"},
    {O_SEQ, "appends are --prefix rows (in --prefill-chunk pieces), then one row per step"},
    {O_SEQDIST, "appends are --prefix rows (in --prefill-chunk pieces), then one row per step"},
    {O_BATCH, "an append carries one stream's rows; the server batches the streams"},
    {O_CROSS, "the streams are self-attention sessions"},
    {O_KEYLEN, "the streams are self-attention sessions"},
    {O_WEIGHTS, "appends ask for the output only"},
    {O_CAUSAL, "a session's appends are causal already"},
    {O_KPAD, "an append takes query rows only"},
    {O_REQFILE, "each stream's bodies are generated"},
};

/* Why option c does not combine with --sessions ("" when it does). */
static const char *sessions_why(int c)
{
    for (size_t i = 0; i < sizeof not_for_sessions / sizeof *not_for_sessions; i++)
        if (not_for_sessions[i].opt == c) return not_for_sessions[i].why;
    return "";
}

/* Handles one option; returns 0 or -1 (err set). */
static int apply_opt(load_opts *o, int c, const char *arg, int *seen_conc, char *err, size_t el)
{
    long v;
    double d;
    switch (c) {
    case O_URL: o->url = arg; return 0;
    case O_MODEL: o->model = arg; return 0;
    case O_SEQ: return load_parse_range(arg, MAX_SEQ, &o->seq_min, &o->seq_max, err, el);
    case O_SEQDIST: return read_seq_dist(o, arg, err, el);
    case O_KEYLEN: return load_parse_range(arg, MAX_SEQ, &o->key_min, &o->key_max, err, el);
    case O_CROSS: o->cross = 1; return 0;
    case O_WEIGHTS: o->need_weights = 1; return 0;
    case O_CAUSAL: o->causal = 1; return 0;
    case O_QUIET: o->quiet = 1; return 0;
    case O_JSON: o->json_path = arg; return 0;
    case O_CSV: o->csv_path = arg; return 0;
    case O_SVG: o->svg_path = arg; return 0;
    case O_BINARY: o->binary = 1; return 0;
    case O_PROTOCOL:
        if (strcmp(arg, "v1") && strcmp(arg, "v2"))
            return errf(err, el, "--protocol: '%s' is not v1 or v2", arg);
        o->protocol = arg[1] - '0';
        return 0;
    case O_EMBED:
    case O_WINDOW:
    case O_BATCH:
    case O_POOL:
    case O_INFLIGHT: {
        long lo = c == O_WINDOW ? 0 : 1, hi = c == O_POOL ? 1 << 16 : 1 << 20;
        if (parse_long(arg, lo, hi, &v))
            return errf(err, el, "--%s: '%s' is not an integer in %ld..%ld",
                        long_opts[c - O_URL].name, arg, lo, hi);
        *(c == O_EMBED    ? &o->embed
          : c == O_WINDOW ? &o->window
          : c == O_BATCH  ? &o->batch
          : c == O_POOL   ? &o->pool
                          : &o->max_inflight) = (int)v;
        return 0;
    }
    case O_SEED:
        if (parse_long(arg, 0, 0x7fffffffffffffffL, &v))
            return errf(err, el, "--seed: '%s' is not a non-negative integer", arg);
        o->seed = (unsigned long long)v;
        return 0;
    case O_REQS:
        if (parse_long(arg, 1, 1L << 40, &v))
            return errf(err, el, "--requests: '%s' is not a positive integer", arg);
        o->requests = v;
        return 0;
    case O_KPAD:
        if (parse_double(arg, &d) || d < 0 || d >= 1)
            return errf(err, el, "--key-padding: '%s' is not a fraction in [0, 1)", arg);
        o->key_padding = d;
        return 0;
    case O_MAXERR:
    case O_MAXLATE:
        if (parse_double(arg, &d) || d < 0 || d > 1)
            return errf(err, el, "--%s: '%s' is not a fraction in [0, 1]", opt_name(c), arg);
        *(c == O_MAXERR ? &o->max_error_rate : &o->max_late_fraction) = d;
        return 0;
    case O_DUR: return load_parse_duration(arg, &o->duration_s, err, el);
    case O_WARM: return load_parse_duration(arg, &o->warmup_s, err, el);
    case O_TIMEOUT: return load_parse_duration(arg, &o->timeout_s, err, el);
    case O_PEVERY:
        if (load_parse_duration(arg, &o->prefill_every_s, err, el)) return -1;
        if (o->prefill_every_s <= 0) return errf(err, el, "--prefill-every must be > 0");
        return 0;
    case O_PREFIX:
    case O_STEPS:
    case O_PCHUNK:
    case O_INTERLEAVE:
    case O_PROWS:
    case O_RETRIES: {
        long lo = c == O_PCHUNK || c == O_INTERLEAVE || c == O_PROWS ? 1 : 0;
        long hi = c == O_RETRIES ? 100 : c == O_INTERLEAVE ? MAX_CONCURRENCY : MAX_SEQ;
        if (parse_long(arg, lo, hi, &v))
            return errf(err, el, "--%s: '%s' is not an integer in %ld..%ld", opt_name(c), arg,
                        lo, hi);
        *(c == O_PREFIX       ? &o->prefix
          : c == O_STEPS      ? &o->steps
          : c == O_PCHUNK     ? &o->prefill_chunk
          : c == O_INTERLEAVE ? &o->interleave
          : c == O_PROWS      ? &o->prefill_rows
                              : &o->max_retries) = (int)v;
        return 0;
    }
    case O_CONC:
    case O_RATE:
    case O_SESSIONS: {
        if (*seen_conc && (o->sessions || c == O_SESSIONS)) {
            int other = c != O_SESSIONS ? c : o->is_rate ? O_RATE : O_CONC;
            return errf(err, el, "--%s does not combine with --sessions (%s)", opt_name(other),
                        sessions_why(other));
        }
        if (*seen_conc) return errf(err, el, "give one of --concurrency / --rate, once");
        *seen_conc = 1;
        o->is_rate = c == O_RATE;
        o->sessions = c == O_SESSIONS;
        if (load_parse_sweep(arg, !o->is_rate, &o->levels, &o->n_levels, err, el) == 0) return 0;
        char why[200];
        snprintf(why, sizeof why, "%s", err);
        return errf(err, el, "--%s: %s", opt_name(c), why);
    }
    case O_REQFILE: {
        const char **f = realloc(o->request_files, (o->n_request_files + 1) * sizeof *f);
        if (!f) return errf(err, el, "out of memory");
        o->request_files = f;
        f[o->n_request_files++] = arg;
        return 0;
    }
    default: return errf(err, el, "unknown option (see --help)");
    }
}

/* Rules of --sessions mode; given[c - O_URL] says option c was on the command line. */
static int validate_sessions(load_opts *o, const unsigned char *given, char *err, size_t el)
{
    static const int only_sessions[] = {O_PREFIX, O_STEPS, O_PCHUNK, O_RETRIES, O_INTERLEAVE,
                                        O_PEVERY, O_PROWS};
    if (!o->sessions) {
        for (size_t i = 0; i < sizeof only_sessions / sizeof *only_sessions; i++)
            if (given[only_sessions[i] - O_URL])
                return errf(err, el, "--%s needs --sessions", opt_name(only_sessions[i]));
        return 0;
    }
    for (size_t i = 0; i < sizeof not_for_sessions / sizeof *not_for_sessions; i++)
        if (given[not_for_sessions[i].opt - O_URL])
            return errf(err, el, "--%s does not combine with --sessions (%s)",
                        opt_name(not_for_sessions[i].opt), not_for_sessions[i].why);
    if (o->protocol == 2)
        return errf(err, el, "--protocol v2 does not combine with --sessions (sessions are a "
                             "/v1 API)");
    if (!o->model)
        return errf(err, el, "--sessions needs --model (the session path names the model)");
    if (!o->prefix && !o->steps)
        return errf(err, el, "--sessions with --prefix 0 and --steps 0 sends nothing");
    if (given[O_PROWS - O_URL] && !o->prefill_every_s)
        return errf(err, el, "--prefill-rows needs --prefill-every (the prefills it sizes)");
    if (o->prefill_every_s && !o->steps)
        return errf(err, el, "--prefill-every needs --steps > 0 (prefills arrive while the "
                             "streams decode)");
    if (!o->prefill_rows) o->prefill_rows = o->prefix;
    if (o->prefill_every_s && !o->prefill_rows)
        return errf(err, el, "--prefill-every needs rows to prefill: --prefill-rows or --prefix");
    if (!given[O_DUR - O_URL]) o->duration_s = 0; /* no cap unless asked */
    else if (o->duration_s <= 0) return errf(err, el, "--duration must be > 0");
    return 0;
}

/* Cross-option rules. */
static int validate(load_opts *o, const unsigned char *given, char *err, size_t el)
{
    if (validate_sessions(o, given, err, el)) return -1;
    if (strncmp(o->url, "http://", 7) && strncmp(o->url, "https://", 8))
        return errf(err, el, "--url: '%s' must start with http:// or https://", o->url);
    if (o->key_min && !o->cross) return errf(err, el, "--key-len needs --cross");
    if (given[O_MAXLATE - O_URL] && !o->is_rate)
        return errf(err, el, "--max-late-fraction needs --rate (only an open loop has a "
                             "schedule to be late for)");
    if (o->timeout_s <= 0) return errf(err, el, "--timeout must be > 0");
    if (!o->sessions && !o->requests && o->duration_s <= 0)
        return errf(err, el, "--duration must be > 0");
    if (o->n_request_files && (o->cross || o->batch || o->seq_dist || o->need_weights ||
                               o->causal || o->window || o->key_padding > 0))
        return errf(err, el, "--request-file is sent as is; drop the request-shape options");
    if (o->binary && o->protocol != 2 && !o->sessions)
        return errf(err, el, "--binary needs --protocol v2 (or --sessions: binary appends)");
    if (o->protocol == 2 && !o->model)
        return errf(err, el, "--protocol v2 needs --model (the v2 path names the model)");
    if (o->protocol == 2 && o->n_request_files)
        return errf(err, el, "--request-file sends /v1 bodies; it does not mix with --protocol v2");
    for (size_t i = 0; !o->is_rate && i < o->n_levels; i++)
        if (o->levels[i] > MAX_CONCURRENCY)
            return errf(err, el, "--%s: %g is above %d", o->sessions ? "sessions" : "concurrency",
                        o->levels[i], MAX_CONCURRENCY);
    if (!o->levels) {
        o->levels = malloc(sizeof *o->levels);
        if (!o->levels) return errf(err, el, "out of memory");
        o->levels[0] = 1;
        o->n_levels = 1;
    }
    return 0;
}

int load_opts_parse(load_opts *o, int argc, char **argv, char *err, size_t errlen)
{
    int c, seen_conc = 0;
    unsigned char given[O_END - O_URL] = {0};
    set_defaults(o);
    optind = 0; /* GNU: full reinitialisation, so the parser can run more than once */
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        if (c == 'h' || c == O_HELP) {
            o->help = 1;
            load_usage(stdout);
            return 0;
        }
        if (c == '?' || c == ':') {
            const char *bad = argv[optind - 1];
            return errf(err, errlen, "%s: unknown option or missing value (see --help)", bad);
        }
        if (apply_opt(o, c, optarg, &seen_conc, err, errlen)) return -1;
        if (c >= O_URL && c < O_END) given[c - O_URL] = 1;
    }
    if (optind < argc) return errf(err, errlen, "unexpected argument '%s'", argv[optind]);
    return validate(o, given, err, errlen);
}

void load_opts_free(load_opts *o)
{
    free(o->seq_dist);
    free(o->levels);
    free(o->request_files);
    memset(o, 0, sizeof *o);
}
