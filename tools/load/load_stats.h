/* load_stats.h — per-level tallies for attnd-load: outcome counts by kind, exact latency
 * percentiles (every success's latency kept and sorted; nearest-rank definition), means of the
 * server's timing fields, throughput. */
#ifndef ATTND_LOAD_STATS_H
#define ATTND_LOAD_STATS_H

#include <stddef.h>

#include "load_check.h"

/* One level of a sweep (a concurrency or an offered rate). Zero-initialise, add, finish,
 * then read the derived fields; free with load_stats_free. */
typedef struct load_stats {
    double x;       /* concurrency, or offered rate in req/s */
    int is_rate;    /* x is a rate (open loop) */

    long requests;  /* sent in the measured window = ok + errors */
    long ok;
    long by_kind[LOAD_KIND_COUNT]; /* by_kind[LOAD_OK] == ok */
    long late;      /* open loop: sent more than LOAD_LATE_MS after their scheduled time */
    double max_late_ms;
    double elapsed_s;    /* first send of the window to its last completion */
    long long tokens;    /* query tokens of successful requests */
    long connects;       /* new TCP connections the measured requests needed (keep-alive: ~0) */

    double *lat_ms;      /* successes' latencies (owned) */
    size_t n_lat, cap_lat;
    long n_timing;       /* successes that carried timing */
    double sum_queue_ms, sum_compute_ms, sum_batch, sum_lat_timed_ms;
    int oom;             /* a latency could not be stored (it still counts in ok) */

    /* Derived by load_stats_finish (0 when there were no successes). */
    long errors;
    double rps, tokens_per_s, mean_ms, p50_ms, p90_ms, p95_ms, p99_ms, max_ms, min_ms;
    double mean_batch, queue_ms, compute_ms, overhead_ms;
    /* Open loop only (0 otherwise): requests answered (ok or not) per second of the level,
     * against the offered x; short_of_offered when that is more than LOAD_SHORT_FRACTION
     * below x (the server or this client did not keep up); late / requests. */
    double achieved_rps, late_fraction;
    int short_of_offered;
} load_stats;

/* A request is late when it is sent more than LOAD_LATE_MS after its scheduled time (all
 * --max-inflight requests were in flight, or this client was too busy to send on time). */
#define LOAD_LATE_MS 1.0
#define LOAD_SHORT_FRACTION 0.05

/* Records a success: latency, query tokens, server timing (may have has == 0). */
void load_stats_add_ok(load_stats *s, double lat_ms, long tokens, const load_timing *t);
/* Records a failure of kind k (k != LOAD_OK). */
void load_stats_add_error(load_stats *s, load_kind k);
/* Sorts the latencies and fills the derived fields; elapsed_s must be set. */
void load_stats_finish(load_stats *s);
void load_stats_free(load_stats *s);

/* Nearest-rank percentile of an ascending array: the value at 1-based rank ceil(p/100 * n),
 * rank clamped to [1, n] (so p = 0 gives the minimum, p = 100 the maximum). 0 when n == 0. */
double load_percentile(const double *sorted, size_t n, double p);

#endif
