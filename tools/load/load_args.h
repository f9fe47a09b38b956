/* load_args.h — attnd-load's command line: the options struct, its parser, and the parsers
 * for the small value syntaxes (sweeps "1,8,64" / "1:64:x2", ranges "16:128", durations "5s"). */
#ifndef ATTND_LOAD_ARGS_H
#define ATTND_LOAD_ARGS_H

#include <stddef.h>
#include <stdio.h>

typedef struct load_opts {
    const char *url;        /* base URL, no trailing slash needed */
    const char *model;      /* NULL: POST /v1/attention (the only/default model) */

    int seq_min, seq_max;   /* query length T, uniform in [min, max] */
    int *seq_dist;          /* --seq-len-dist: lengths sampled uniformly from these (owned) */
    size_t seq_dist_n;
    int embed;              /* E of query rows; 0 = ask GET /v1/models/{name} */
    int cross;              /* send key (and value when its width differs) */
    int key_min, key_max;   /* S for --cross; 0 = same as T */
    int need_weights, causal, window;
    double key_padding;     /* fraction of keys masked, in [0, 1) */
    int batch;              /* sequences per request; 0 = one unbatched sequence (T x E) */
    const char **request_files; /* --request-file, repeatable (owned array, borrowed strings) */
    size_t n_request_files;
    int pool;               /* distinct pre-generated request bodies */
    unsigned long long seed;

    double *levels;         /* concurrencies, or rates with is_rate (owned) */
    size_t n_levels;
    int is_rate;
    double duration_s;      /* per level; ignored when requests > 0 */
    long requests;          /* per level; 0 = use duration */
    double warmup_s;
    double timeout_s;       /* per request */
    int max_inflight;       /* open loop: most requests in flight at once */

    const char *json_path, *csv_path, *svg_path;
    int quiet;
    double max_error_rate;
    double max_late_fraction; /* --rate: exit 4 above this late fraction; < 0 = no limit */
    int help;               /* --help was given (usage already printed) */
    int protocol;           /* 1: POST /v1 attention (default); 2: KServe v2 infer */
    int binary;             /* v2 only: tensors as binary data, both ways */

    /* --sessions: streaming-session decode mode, a mode of its own. levels holds the session
     * counts (one level per count); window is the sessions' window (0 = unbounded);
     * duration_s caps each level's decode phase (0 = no cap: --steps ends it). */
    int sessions;           /* 1: --sessions mode */
    int prefix;             /* positions each stream prefills (0: none) */
    int steps;              /* one-position appends per stream */
    int prefill_chunk;      /* most rows per prefill append; 0 = all --prefix rows at once */
    int max_retries;        /* 503 with Retry-After: retries per call before it counts as an error */
    int interleave;         /* sessions one closed-loop client drives in turn, one request at a
                             * time (1: every stream is its own client) */
    double prefill_every_s; /* > 0: during the decode phase a prefill client starts a new
                             * session of --prefill-rows rows this often (0: none) */
    int prefill_rows;       /* rows of each such prefill (one append); 0 = --prefix */
} load_opts;

/* Parses argv into *o (defaults first). Returns 0, or -1 with a one-line reason in err.
 * On --help prints the usage to stdout and sets o->help. Free with load_opts_free either way.
 * Not thread-safe: getopt_long keeps its state in globals (optind); parse on one thread. */
int load_opts_parse(load_opts *o, int argc, char **argv, char *err, size_t errlen);
void load_opts_free(load_opts *o);
void load_usage(FILE *f);

/* "1,8,64", "1:64:x2" (geometric), "10:40:+10" (arithmetic), or a comma list mixing them.
 * integer: values must be whole numbers. Values in (0, 1e6]; at most 256 levels.
 * Returns 0 with *out (caller frees) and *n, or -1 with err set (nothing allocated). */
int load_parse_sweep(const char *s, int integer, double **out, size_t *n, char *err, size_t errlen);

/* "32" or "16:128" -> [lo, hi], 1 <= lo <= hi <= max. 0 / -1 (err set). */
int load_parse_range(const char *s, int max, int *lo, int *hi, char *err, size_t errlen);

/* "5s", "500ms", "2m", "1.5" (seconds) -> seconds >= 0. 0 / -1 (err set). */
int load_parse_duration(const char *s, double *secs, char *err, size_t errlen);

#endif
