/* test_softmax.c — the vectorised exp and the row softmax the kernels share:
 * accuracy against libm in double, exact zeros for blocked and out-of-range
 * keys, all-zero rows when nothing is visible, huge spreads without overflow.
 */
#include "check.h"
#include "softmax.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

TEST(exp_accuracy)
{
    enum { N = 100003 }; /* odd: exercises the vector tail */
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (int i = 0; i < N; i++) x[i] = -87.3f * (float)i / (float)(N - 1);
    float sum = attn__exp_sum(x, 0.0f, y, N);
    double worst = 0, dsum = 0;
    for (int i = 0; i < N; i++) {
        double want = exp((double)x[i]);
        dsum += want;
        double rel = fabs(y[i] - want) / want;
        if (rel > worst) worst = rel;
    }
    printf("exp: max relative error %.3g over [-87.3, 0]\n", worst);
    CHECK(worst <= 3e-7); /* ~2.5 ulp */
    CHECK_NEAR(sum, dsum, dsum * 1e-4); /* float accumulation over 1e5 terms */
    double d_short = 0; /* a row-sized sum is accurate to a few ulp */
    for (int i = 0; i < 1003; i++) d_short += y[i];
    CHECK_NEAR(attn__exp_sum(x, 0.0f, y, 1003), d_short, d_short * 1e-6);
    float special[6] = {0.0f, -INFINITY, -87.5f, -1000.0f, -FLT_MAX, -1e-30f}, out[6];
    attn__exp_sum(special, 0.0f, out, 6);
    CHECK(out[0] == 1.0f);
    CHECK(out[1] == 0.0f && out[2] == 0.0f && out[3] == 0.0f && out[4] == 0.0f);
    CHECK(out[5] == 1.0f);
    float shifted[3] = {10.0f, 9.0f, -INFINITY}, so[3];
    CHECK_NEAR(attn__exp_sum(shifted, 10.0f, so, 3), 1.0 + exp(-1.0), 1e-6);
    CHECK(so[0] == 1.0f && so[2] == 0.0f);
    free(x);
    free(y);
}

TEST(softmax_rows)
{
    /* range [2, 7) of 9, one blocked key inside */
    float row[9] = {5, 5, 1, 2, -INFINITY, 3, 0, 9, 9};
    attn__softmax_row(row, 9, 2, 7);
    double e[5] = {exp(1 - 3.0), exp(2 - 3.0), 0, 1, exp(-3.0)}, z = e[0] + e[1] + e[3] + e[4];
    CHECK(row[0] == 0.0f && row[1] == 0.0f && row[7] == 0.0f && row[8] == 0.0f);
    CHECK(row[4] == 0.0f);
    for (int j = 0; j < 5; j++) CHECK_NEAR(row[2 + j], e[j] / z, 1e-7);

    float none[5] = {1, -INFINITY, -INFINITY, 4, 4};
    attn__softmax_row(none, 5, 1, 3); /* visible range holds only -inf */
    for (int j = 0; j < 5; j++) CHECK(none[j] == 0.0f);
    float empty[3] = {1, 2, 3};
    attn__softmax_row(empty, 3, 2, 2); /* empty range */
    for (int j = 0; j < 3; j++) CHECK(empty[j] == 0.0f);

    float spread[6] = {3e37f, -3e37f, 0, 3e37f, 1, -INFINITY};
    attn__softmax_row(spread, 6, 0, 6); /* huge logits: no overflow, no NaN */
    CHECK_NEAR(spread[0], 0.5, 1e-7);
    CHECK_NEAR(spread[3], 0.5, 1e-7);
    CHECK(spread[1] == 0.0f && spread[2] == 0.0f && spread[4] == 0.0f && spread[5] == 0.0f);
}

/* The sixteen-lane AVX-512 exp_sum gives the eight-lane AVX2 kernel's bits
 * (each exp and the sum), at every length 0..300 (both tails), with
 * underflowing and blocked (-inf) entries and several shifts. */
TEST(exp_sum_kernels_bit_identical)
{
    enum { N = 300 };
    float x[N], y1[N], y2[N];
    unsigned s = 12345;
    int differ = 0;
    for (int n = 0; n <= N; n++) {
        for (int i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            x[i] = -100.0f * (float)(s >> 8) / 16777216.0f; /* [-100, 0]: some underflow */
            if (s % 31 == 0) x[i] = -INFINITY;
        }
        const float shift = (float)(n % 3) * 0.25f, a = attn__exp_sum(x, shift, y1, n);
        const float b = attn__exp_sum_avx2(x, shift, y2, n);
        differ += memcmp(&a, &b, sizeof a) != 0 || (n && memcmp(y1, y2, (size_t)n * sizeof *y1) != 0);
    }
    printf("exp_sum: %d of %d lengths differ between the dispatched and the AVX2 kernel\n", differ, N + 1);
    CHECK_INT_EQ(differ, 0);
}

int main(void)
{
    RUN(exp_sum_kernels_bit_identical);
    RUN(exp_accuracy);
    RUN(softmax_rows);
    return check_summary();
}
