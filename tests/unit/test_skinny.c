/* test_skinny.c — the few-row projection kernel (lib/skinny.c) alone: against a
 * double-precision reference for rows 1..16, widths with and without a tail
 * (n_in not a multiple of 16 or 8), with and without a bias, into a strided
 * y; and any split of the output columns (as the thread pool makes) gives
 * bit-identical results to one call over all of them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "skinny.h"

static float frand(unsigned long long *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

TEST(against_reference)
{
    static const int widths[] = {1, 7, 8, 15, 16, 17, 64, 129, 2048};
    unsigned long long s = 42;
    double worst = 0;
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
        for (int rows = 1; rows <= ATTN__SKINNY_MAX; rows += rows < 6 ? 1 : 5) {
            const int n_in = widths[wi], n_out = 37, ldy = n_out + 3;
            float *x = malloc((size_t)rows * n_in * sizeof *x), *w = malloc((size_t)n_out * n_in * sizeof *w);
            float *b = malloc(n_out * sizeof *b), *y = malloc((size_t)rows * ldy * sizeof *y);
            for (int i = 0; i < rows * n_in; i++) x[i] = frand(&s);
            for (int i = 0; i < n_out * n_in; i++) w[i] = frand(&s);
            for (int i = 0; i < n_out; i++) b[i] = frand(&s);
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                for (int i = 0; i < rows * ldy; i++) y[i] = NAN; /* the padding must stay untouched */
                attn__skinny_linear(x, rows, n_in, w, ATTN_WDTYPE_F32, with_bias ? b : NULL, 0, n_out, y, ldy);
                int pad_ok = 1;
                for (int r = 0; r < rows; r++) {
                    for (int o = 0; o < n_out; o++) {
                        double ref = with_bias ? b[o] : 0.0;
                        for (int k = 0; k < n_in; k++) ref += (double)x[r * n_in + k] * w[o * n_in + k];
                        double d = fabs(y[r * ldy + o] - ref) / (1.0 + sqrt((double)n_in));
                        if (d > worst) worst = d;
                    }
                    for (int o = n_out; o < ldy; o++) pad_ok &= isnan(y[r * ldy + o]);
                }
                CHECK_MSG(pad_ok, "rows %d n_in %d: wrote past n_out", rows, n_in);
            }
            free(x); free(w); free(b); free(y);
        }
    printf("max |y - reference| / (1 + sqrt(n_in)): %.3g\n", worst);
    CHECK(worst < 1e-6);
}

TEST(column_splits_are_bit_identical)
{
    unsigned long long s = 7;
    const int rows = 13, n_in = 300, n_out = 101;
    float *x = malloc((size_t)rows * n_in * sizeof *x), *w = malloc((size_t)n_out * n_in * sizeof *w);
    float *whole = malloc((size_t)rows * n_out * sizeof *whole), *split = malloc((size_t)rows * n_out * sizeof *split);
    for (int i = 0; i < rows * n_in; i++) x[i] = frand(&s);
    for (int i = 0; i < n_out * n_in; i++) w[i] = frand(&s);
    attn__skinny_linear(x, rows, n_in, w, ATTN_WDTYPE_F32, NULL, 0, n_out, whole, n_out);
    for (int chunk = 1; chunk <= n_out; chunk += 9) { /* chunk 1: the one-weight-row kernel only */
        memset(split, 0, (size_t)rows * n_out * sizeof *split);
        for (int o = 0; o < n_out; o += chunk)
            attn__skinny_linear(x, rows, n_in, w, ATTN_WDTYPE_F32, NULL, o, o + chunk < n_out ? o + chunk : n_out, split, n_out);
        CHECK_MSG(memcmp(whole, split, (size_t)rows * n_out * sizeof *split) == 0, "chunks of %d differ", chunk);
    }
    /* a row's answer does not depend on which other rows share the call */
    float *alone = malloc(n_out * sizeof *alone);
    attn__skinny_linear(x + 5 * n_in, 1, n_in, w, ATTN_WDTYPE_F32, NULL, 0, n_out, alone, n_out);
    CHECK(memcmp(alone, whole + 5 * n_out, n_out * sizeof *alone) == 0);
    free(alone); free(x); free(w); free(whole); free(split);
}

/* Weights of each dtype: float32, or the 16-bit words of finite F16 / BF16 values. */
static void *weights(int wdtype, size_t n, unsigned long long *s)
{
    if (wdtype == ATTN_WDTYPE_F32) {
        float *w = malloc(n * sizeof *w);
        for (size_t i = 0; i < n; i++) w[i] = frand(s);
        return w;
    }
    unsigned short *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        float f = frand(s);
        unsigned bits;
        memcpy(&bits, &f, sizeof bits);
        /* BF16: the float's top half; F16: its sign and mantissa bits under an exponent of 10..19 */
        h[i] = wdtype == ATTN_WDTYPE_BF16 ? (unsigned short)(bits >> 16)
                                          : (unsigned short)((bits >> 16 & 0x8000) | (bits & 0x3ff) |
                                                             (10 + (bits >> 10) % 10) << 10);
    }
    return h;
}

/* The kernels that take two or four weight rows a pass (AVX2's pairs for
 * 5..16 rows; with AVX-512 the zmm ones, also for one row) give the
 * one-weight-row AVX2 kernels' bits: every row count 1..16, widths with and
 * without tails, every weight dtype, with a bias. (On a CPU without AVX-512
 * the calls of 1..4 rows run the same kernel on both sides.) */
TEST(multirow_kernels_equal_avx2)
{
    static const int widths[] = {7, 16, 17, 100, 528, 2048};
    static const int dtypes[] = {ATTN_WDTYPE_F32, ATTN_WDTYPE_BF16, ATTN_WDTYPE_F16};
    unsigned long long s = 99;
    int differ = 0, cases = 0;
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
        for (size_t di = 0; di < 3; di++)
            for (int rows = 1; rows <= ATTN__SKINNY_MAX; rows++) {
                const int n_in = widths[wi], n_out = 23;
                float *x = malloc((size_t)rows * n_in * sizeof *x), *b = malloc(n_out * sizeof *b);
                float *y = malloc((size_t)rows * n_out * sizeof *y), *y2 = malloc((size_t)rows * n_out * sizeof *y2);
                void *w = weights(dtypes[di], (size_t)n_out * n_in, &s);
                for (int i = 0; i < rows * n_in; i++) x[i] = frand(&s);
                for (int i = 0; i < n_out; i++) b[i] = frand(&s);
                attn__skinny_linear(x, rows, n_in, w, dtypes[di], b, 0, n_out, y, n_out);
                attn__skinny_linear_avx2(x, rows, n_in, w, dtypes[di], b, 0, n_out, y2, n_out);
                differ += memcmp(y, y2, (size_t)rows * n_out * sizeof *y) != 0;
                cases++;
                free(x), free(b), free(y), free(y2), free(w);
            }
    printf("multi-row vs one-row AVX2 skinny kernels: %d of %d cases differ\n", differ, cases);
    CHECK_INT_EQ(differ, 0);
}

int main(void)
{
    RUN(against_reference);
    RUN(column_splits_are_bit_identical);
    RUN(multirow_kernels_equal_avx2);
    return check_summary();
}
