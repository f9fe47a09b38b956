/* load_stats.c — per-level tallies and exact nearest-rank percentiles for attnd-load. */
#include "load_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void load_stats_add_ok(load_stats *s, double lat_ms, long tokens, const load_timing *t)
{
    s->requests++;
    s->ok++;
    s->by_kind[LOAD_OK]++;
    s->tokens += tokens;
    if (s->n_lat == s->cap_lat) {
        size_t cap = s->cap_lat ? 2 * s->cap_lat : 1024;
        double *v = realloc(s->lat_ms, cap * sizeof *v);
        if (!v) {
            s->oom = 1;
            return;
        }
        s->lat_ms = v;
        s->cap_lat = cap;
    }
    s->lat_ms[s->n_lat++] = lat_ms;
    if (t && t->has) {
        s->n_timing++;
        s->sum_queue_ms += t->queue_us / 1000.0;
        s->sum_compute_ms += t->compute_us / 1000.0;
        s->sum_batch += t->batch_size;
        s->sum_lat_timed_ms += lat_ms;
    }
}

void load_stats_add_error(load_stats *s, load_kind k)
{
    if ((unsigned)k >= LOAD_KIND_COUNT || k == LOAD_OK) k = LOAD_ERR_TRANSPORT;
    s->requests++;
    s->by_kind[k]++;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double load_percentile(const double *sorted, size_t n, double p)
{
    if (n == 0) return 0.0;
    double r = ceil(p * (double)n / 100.0); /* p*n first: exact for integer p */
    size_t rank = r < 1.0 ? 1 : r > (double)n ? n : (size_t)r;
    return sorted[rank - 1];
}

void load_stats_finish(load_stats *s)
{
    size_t n = s->n_lat;
    s->errors = s->requests - s->ok;
    if (n) qsort(s->lat_ms, n, sizeof *s->lat_ms, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += s->lat_ms[i];
    s->mean_ms = n ? sum / (double)n : 0;
    s->min_ms = n ? s->lat_ms[0] : 0;
    s->max_ms = n ? s->lat_ms[n - 1] : 0;
    s->p50_ms = load_percentile(s->lat_ms, n, 50);
    s->p90_ms = load_percentile(s->lat_ms, n, 90);
    s->p95_ms = load_percentile(s->lat_ms, n, 95);
    s->p99_ms = load_percentile(s->lat_ms, n, 99);
    s->rps = s->elapsed_s > 0 ? (double)s->ok / s->elapsed_s : 0;
    s->tokens_per_s = s->elapsed_s > 0 ? (double)s->tokens / s->elapsed_s : 0;
    if (s->is_rate) {
        s->achieved_rps = s->elapsed_s > 0 ? (double)s->requests / s->elapsed_s : 0;
        s->late_fraction = s->requests ? (double)s->late / (double)s->requests : 0;
        s->short_of_offered = s->achieved_rps < s->x * (1 - LOAD_SHORT_FRACTION);
    }
    if (s->n_timing > 0) {
        double k = (double)s->n_timing;
        s->mean_batch = s->sum_batch / k;
        s->queue_ms = s->sum_queue_ms / k;
        s->compute_ms = s->sum_compute_ms / k;
        s->overhead_ms = (s->sum_lat_timed_ms - s->sum_queue_ms - s->sum_compute_ms) / k;
    } else {
        s->mean_batch = s->queue_ms = s->compute_ms = s->overhead_ms = 0;
    }
}

void load_stats_free(load_stats *s)
{
    free(s->lat_ms);
    s->lat_ms = NULL;
    s->n_lat = s->cap_lat = 0;
}
