/* load_session.h — attnd-load's --sessions mode: N streaming sessions at once against one
 * model, on the calling thread over libcurl's multi interface (one reused connection per
 * stream). Each stream creates a session, prefills --prefix positions (appends of at most
 * --prefill-chunk rows), waits until every stream has prefilled, sends --steps one-position
 * appends in a closed loop (the next one when the last answer came: never two in flight on
 * a session), and deletes its session, whatever happened before. A 503 carrying Retry-After
 * is retried up to --max-retries times; any other failure ends the stream (its session is
 * still deleted). Per level: decode tokens/s, exact time-per-token percentiles, prefill
 * times, the server's timing of the decode appends, and errors by phase and kind.
 * --interleave K makes each K consecutive streams one client's: one request in flight among
 * them, the sessions in turn (a decode loop over a batch of sequences, or over a model's
 * layers). --prefill-every D adds a prefill client during the decode phase (one more stream,
 * index N): every D it creates a session, appends --prefill-rows rows in one append (its time
 * is the TTFT), and deletes it. */
#ifndef ATTND_LOAD_SESSION_H
#define ATTND_LOAD_SESSION_H

#include <stddef.h>

#include "load_args.h"
#include "load_check.h"
#include "load_reqgen.h"

typedef enum load_phase {
    LOAD_PHASE_CREATE,
    LOAD_PHASE_PREFILL,
    LOAD_PHASE_DECODE,
    LOAD_PHASE_DELETE,
    LOAD_PHASE_COUNT
} load_phase;

/* "create", "prefill", "decode", "delete"; "?" out of range. */
const char *load_phase_name(load_phase p);

/* A small table of named counts (error kinds, retried kinds), in first-seen order. Names
 * beyond LOAD_COUNTS_MAX distinct ones are added to `other`. */
#define LOAD_COUNTS_MAX 24
typedef struct load_counts {
    struct {
        char name[48];
        long n;
    } v[LOAD_COUNTS_MAX];
    size_t n;
    long other;
} load_counts;

void load_counts_add(load_counts *c, const char *name, long n);
/* The count under name (0 when absent). */
long load_counts_get(const load_counts *c, const char *name);

/* The kind of a failed exchange, into buf: "timeout" or "transport" for a curl failure
 * (curl_code != 0), "bad_response" when bad_response (the status was right, the answer was
 * not), else "http_<status>" plus "_<code>" when body is an attnd error
 * {"error":{"code":"..."}} with a code of [a-z0-9_] (at most 32 characters). */
void load_sess_kind(char *buf, size_t n, int curl_code, long status, const char *body,
                    size_t len, int bad_response);

/* One level of --sessions (a number of streams). Zero-initialise, add, finish, read; free
 * with load_sess_stats_free. */
typedef struct load_sess_stats {
    int sessions, prefix, steps; /* the level and the plan of each stream */

    long created;   /* sessions created (201 with an id) */
    long prefilled; /* streams whose prefill completed */
    long completed; /* streams that did all their steps (or prefilled, with --steps 0) */
    long failed;    /* streams ended by an error */
    long deleted;   /* sessions deleted (204) */
    long gone;      /* sessions already gone when deleted (404/410: evicted or expired);
                     * not an error: the stream's own failure, if any, was counted */
    long leaked;    /* sessions whose delete failed otherwise: they may remain on the server */

    long calls;     /* HTTP exchanges, each retried call counted once */
    long errors;    /* calls that failed (after their retries) */
    long retries;   /* retries sent */
    long errors_by_phase[LOAD_PHASE_COUNT];
    load_counts errors_by_kind, retries_by_kind;
    char first_error[320]; /* "decode: HTTP 409 session_busy: ..." of the first error; "" */

    long long prefill_tokens;  /* rows committed by successful prefill appends */
    double *prefill_ms;        /* per stream that prefilled: first send to last answer (owned) */
    size_t n_prefill, cap_prefill;
    double prefill_total_s;    /* the level's first prefill send to its last prefill answer */

    long long decode_tokens;   /* successful one-position appends */
    long steps_cut;            /* steps not sent: --duration ran out, or interrupted */
    long steps_lost;           /* steps not sent: their stream had failed */
    double decode_elapsed_s;   /* decode start (every stream prefilled) to the last answer */
    double *step_ms, *step_at_s; /* per successful step, in completion order: latency
                                  * (first send to answer, retries included) and the time of
                                  * the answer in s since decode start (owned) */
    size_t n_steps, cap_steps;
    long n_timing;             /* steps whose answer carried timing */
    double sum_queue_ms, sum_compute_ms, sum_batch;
    long n_create, n_delete;
    double sum_create_ms, max_create_ms, sum_delete_ms, max_delete_ms;
    int oom;                   /* a latency could not be stored (it still counts) */

    /* Derived by load_sess_stats_finish (0 when nothing to derive from). */
    double *tpot_sorted;       /* step_ms, ascending (owned) */
    double decode_tokens_per_s, stream_tokens_per_s; /* all streams / per stream that decoded */
    long decoding_streams;     /* streams with at least one successful step */
    double tpot_mean_ms, tpot_min_ms, tpot_p50_ms, tpot_p90_ms, tpot_p99_ms, tpot_max_ms;
    double queue_ms, compute_ms, mean_batch;
    double prefill_mean_ms, prefill_p50_ms, prefill_max_ms, prefill_tokens_per_s;
    double create_mean_ms, delete_mean_ms;

    /* The decode mix (--prefill-every): prefills of --prefill-rows rows during the decode
     * phase, each one append to a session of its own. */
    int interleave, prefill_rows;
    double *ttft_ms;            /* per prefill that succeeded: its append's time (owned) */
    size_t n_ttft, cap_ttft;
    long long mix_prefill_rows; /* rows of those prefills */
    double mix_prefill_s;       /* the sum of their times */
    double ttft_p50_ms, ttft_p99_ms, ttft_max_ms; /* derived */
    double mix_prefill_rows_per_s; /* mix_prefill_rows / mix_prefill_s (derived) */
} load_sess_stats;

void load_sess_add_step(load_sess_stats *s, double lat_ms, double at_s, const load_timing *t);
void load_sess_add_prefill(load_sess_stats *s, double ms);
/* A prefill of the decode mix: rows appended in ms. */
void load_sess_add_ttft(load_sess_stats *s, int rows, double ms);
/* Counts a failed call of phase ph and kind; detail (may be NULL) describes it. */
void load_sess_add_error(load_sess_stats *s, load_phase ph, const char *kind, const char *detail);
void load_sess_add_retry(load_sess_stats *s, const char *kind);
/* Sorts and derives; decode_elapsed_s and prefill_total_s must be set. */
void load_sess_stats_finish(load_sess_stats *s);
void load_sess_stats_free(load_sess_stats *s);

typedef struct load_sess_runner load_sess_runner;

/* Pre-generates every body (seeded) for model m and sets up one connection per stream of
 * the largest level. o is borrowed for the runner's life. NULL with err set on failure. */
load_sess_runner *load_sess_new(const load_opts *o, const load_model *m, char *err, size_t el);
void load_sess_free(load_sess_runner *r);

/* Runs one level with n streams; fills *st (zeroed first; free with load_sess_stats_free),
 * derived fields included. Returns 0, -1 on a local failure (err set; st holds what was
 * measured), or 1 when interrupted by load_sess_stop (every session still deleted). */
int load_sess_run_level(load_sess_runner *r, int n, load_sess_stats *st, char *err, size_t el);

/* Async-signal-safe: stop sending creates, prefills and steps; delete what exists. */
void load_sess_stop(void);

#endif
