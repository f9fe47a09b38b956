/* test_load_stats.c — attnd-load's nearest-rank percentiles and per-level tallies against
 * samples whose answers are known by hand. */
#include <stdlib.h>

#include "check.h"
#include "load_stats.h"

TEST(one_to_hundred)
{
    double v[100];
    for (int i = 0; i < 100; i++) v[i] = i + 1;
    /* nearest rank: value at rank ceil(p/100 * 100) = p */
    CHECK_NEAR(load_percentile(v, 100, 50), 50, 0);
    CHECK_NEAR(load_percentile(v, 100, 90), 90, 0);
    CHECK_NEAR(load_percentile(v, 100, 95), 95, 0);
    CHECK_NEAR(load_percentile(v, 100, 99), 99, 0);
    CHECK_NEAR(load_percentile(v, 100, 100), 100, 0);
    CHECK_NEAR(load_percentile(v, 100, 0), 1, 0);
    CHECK_NEAR(load_percentile(v, 100, 99.5), 100, 0); /* ceil(99.5) = 100 */
    CHECK_NEAR(load_percentile(v, 100, 0.5), 1, 0);
}

TEST(small_odd_sets)
{
    double five[] = {15, 20, 35, 40, 50}; /* the textbook nearest-rank example */
    CHECK_NEAR(load_percentile(five, 5, 5), 15, 0);   /* ceil(0.25) = 1 */
    CHECK_NEAR(load_percentile(five, 5, 30), 20, 0);  /* ceil(1.5) = 2 */
    CHECK_NEAR(load_percentile(five, 5, 40), 20, 0);  /* exactly rank 2 */
    CHECK_NEAR(load_percentile(five, 5, 50), 35, 0);  /* ceil(2.5) = 3 */
    CHECK_NEAR(load_percentile(five, 5, 99), 50, 0);
    double one[] = {7.5};
    CHECK_NEAR(load_percentile(one, 1, 50), 7.5, 0);
    CHECK_NEAR(load_percentile(one, 1, 99), 7.5, 0);
    double three[] = {1, 2, 3};
    CHECK_NEAR(load_percentile(three, 3, 50), 2, 0);  /* ceil(1.5) = 2 */
    CHECK_NEAR(load_percentile(three, 3, 90), 3, 0);
    CHECK_NEAR(load_percentile(three, 0, 50), 0, 0);  /* empty -> 0 */
}

TEST(ties)
{
    double v[] = {1, 2, 2, 2, 2, 2, 2, 2, 2, 9};
    CHECK_NEAR(load_percentile(v, 10, 10), 1, 0);
    CHECK_NEAR(load_percentile(v, 10, 11), 2, 0);
    CHECK_NEAR(load_percentile(v, 10, 50), 2, 0);
    CHECK_NEAR(load_percentile(v, 10, 90), 2, 0);
    CHECK_NEAR(load_percentile(v, 10, 91), 9, 0);
}

TEST(level_tally)
{
    load_stats s = {0};
    load_timing t = {1, 2000, 3000, 4}; /* 2 ms queue, 3 ms compute, batch 4 */
    load_timing none = {0};
    /* Add 1..100 ms in a scrambled order; the percentiles must not depend on the order. */
    for (int i = 0; i < 100; i++) load_stats_add_ok(&s, (double)((i * 37) % 100 + 1), 10, i < 50 ? &t : &none);
    load_stats_add_error(&s, LOAD_ERR_HTTP_503);
    load_stats_add_error(&s, LOAD_ERR_BAD_SHAPE);
    load_stats_add_error(&s, LOAD_ERR_BAD_SHAPE);
    s.elapsed_s = 2.0;
    load_stats_finish(&s);
    CHECK_INT_EQ(s.requests, 103);
    CHECK_INT_EQ(s.ok, 100);
    CHECK_INT_EQ(s.errors, 3);
    CHECK_INT_EQ(s.by_kind[LOAD_ERR_HTTP_503], 1);
    CHECK_INT_EQ(s.by_kind[LOAD_ERR_BAD_SHAPE], 2);
    CHECK_NEAR(s.rps, 50, 1e-9);            /* only successes count */
    CHECK_NEAR(s.tokens_per_s, 500, 1e-9);
    CHECK_NEAR(s.p50_ms, 50, 0);
    CHECK_NEAR(s.p99_ms, 99, 0);
    CHECK_NEAR(s.max_ms, 100, 0);
    CHECK_NEAR(s.min_ms, 1, 0);
    CHECK_NEAR(s.mean_ms, 50.5, 1e-9);
    CHECK_INT_EQ(s.n_timing, 50);
    CHECK_NEAR(s.mean_batch, 4, 1e-12);
    CHECK_NEAR(s.queue_ms, 2, 1e-12);
    CHECK_NEAR(s.compute_ms, 3, 1e-12);
    /* overhead over the timed half: their latencies are (i*37)%100+1 for i < 50 */
    double sum = 0;
    for (int i = 0; i < 50; i++) sum += (double)((i * 37) % 100 + 1);
    CHECK_NEAR(s.overhead_ms, sum / 50 - 5, 1e-9);
    load_stats_free(&s);

    load_stats empty = {0};
    load_stats_add_error(&empty, LOAD_ERR_TIMEOUT);
    empty.elapsed_s = 1;
    load_stats_finish(&empty);
    CHECK_INT_EQ(empty.errors, 1);
    CHECK_NEAR(empty.rps, 0, 0);
    CHECK_NEAR(empty.p99_ms, 0, 0);
    load_stats_free(&empty);
}

int main(void)
{
    RUN(one_to_hundred);
    RUN(small_odd_sets);
    RUN(ties);
    RUN(level_tally);
    return check_summary();
}
