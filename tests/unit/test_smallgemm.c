/* test_smallgemm.c — the small-call projection kernel (lib/smallgemm.c)
 * alone (the dispatched kernel, AVX-512VL's two-row one where the CPU has
 * it, and the AVX2 one): bit for bit the scalar fmaf chain
 * (attn__small_linear_ref) for rows 1..32 and batches of hundreds, odd
 * widths (n_in and n_out not multiples of 8, one panel and more; n_in over
 * one 128-input panel, whose partial sums wait in y), with and without a
 * bias, into a strided y whose padding stays untouched; and within the
 * rounding bound of a sum of n_in + 1 terms of the path it replaced
 * (cblas_sgemm with the bias copied into y and beta 1), which it matches
 * bit for bit where OpenBLAS runs the SkylakeX / Cooperlake kernel
 * (printed, not checked: the kernel depends on the CPU).
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "smallgemm.h"

static float frand(unsigned long long *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

typedef struct shape { int rows, n_in, n_out; } shape;

static const shape SHAPES[] = {{32, 64, 64}, {17, 64, 64}, {32, 64, 192}, {1, 1, 1},   {2, 7, 5},
                               {31, 37, 53}, {25, 8, 8},   {32, 128, 65}, {19, 65, 63}, {32, 9, 129},
                               {20, 100, 8}, {3, 128, 200}, {100, 64, 64}, {515, 128, 96}, {200, 33, 70},
                               /* wider than one panel of inputs (128): the partial sums wait in y */
                               {40, 129, 64}, {33, 300, 70}, {21, 257, 130}, {64, 512, 96}, {6, 1000, 17}};

/* y = x Wᵀ + b as the forward ran it before: the bias copied in, sgemm with beta 1. */
static void old_path(const float *x, const shape *sh, const float *w, const float *b, float *y, int ldy)
{
    for (int r = 0; r < sh->rows; r++) memcpy(y + (size_t)r * ldy, b, (size_t)sh->n_out * sizeof *b);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sh->rows, sh->n_out, sh->n_in, 1.0f, x, sh->n_in, w,
                sh->n_in, 1.0f, y, ldy);
}

TEST(kernel_vs_reference_and_old_path)
{
    unsigned long long s = 42;
    double worst = 0;
    size_t same_as_old = 0, outputs = 0;
    const int fast = attn__small_available();
    if (!fast) printf("no AVX2 + FMA: only the reference is checked against sgemm\n");
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        const shape *sh = &SHAPES[i];
        const int ldy = sh->n_out + 3;
        const size_t ny = (size_t)sh->rows * ldy;
        float *x = malloc((size_t)sh->rows * sh->n_in * sizeof *x), *w = malloc((size_t)sh->n_out * sh->n_in * sizeof *w);
        float *b = malloc((size_t)sh->n_out * sizeof *b), *y = malloc(ny * sizeof *y), *ref = malloc(ny * sizeof *ref),
              *old = malloc(ny * sizeof *old);
        for (int j = 0; j < sh->rows * sh->n_in; j++) x[j] = frand(&s);
        for (int j = 0; j < sh->n_out * sh->n_in; j++) w[j] = frand(&s);
        for (int j = 0; j < sh->n_out; j++) b[j] = frand(&s);
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            const float *bias = with_bias ? b : NULL;
            for (size_t j = 0; j < ny; j++) y[j] = ref[j] = NAN; /* the padding must stay untouched */
            attn__small_linear_ref(x, sh->rows, sh->n_in, w, bias, sh->n_out, ref, ldy);
            for (int avx2_only = 0; fast && avx2_only < 2; avx2_only++) {
                (avx2_only ? attn__small_linear_avx2 : attn__small_linear)(x, sh->rows, sh->n_in, w, bias, sh->n_out,
                                                                           y, ldy);
                CHECK_MSG(memcmp(y, ref, ny * sizeof *y) == 0, "%dx%dx%d bias %d avx2-only %d: kernel != fmaf chain",
                          sh->rows, sh->n_in, sh->n_out, with_bias, avx2_only);
            }
            if (!with_bias) continue;
            old_path(x, sh, w, b, old, ldy);
            for (int r = 0; r < sh->rows; r++)
                for (int o = 0; o < sh->n_out; o++) {
                    const float a = ref[(size_t)r * ldy + o], c = old[(size_t)r * ldy + o];
                    /* both sums are within n u (sum of |terms|) of the exact one (u = 2^-24,
                     * recursive summation's bound): d <= 1 is within twice that */
                    double mag = fabs((double)b[o]);
                    for (int k = 0; k < sh->n_in; k++)
                        mag += fabs((double)x[(size_t)r * sh->n_in + k] * w[(size_t)o * sh->n_in + k]);
                    const double d = fabs((double)a - c) / (2.0 * (sh->n_in + 1) * 0x1p-24 * mag + 1e-30);
                    if (d > worst) worst = d;
                    same_as_old += a == c;
                    outputs++;
                }
        }
        free(x); free(w); free(b); free(y); free(ref); free(old);
    }
    printf("max |new - sgemm| / (2 (n_in + 1) 2^-24 sum |terms|): %.3g; bit-identical to sgemm: %zu of %zu outputs\n",
           worst, same_as_old, outputs);
    CHECK(worst <= 1.0);
}

/* A row's answer does not depend on which other rows share the call. */
TEST(rows_are_independent)
{
    if (!attn__small_available()) {
        CHECK(1);
        return;
    }
    unsigned long long s = 7;
    const int rows = 29, n_in = 77, n_out = 101;
    float *x = malloc((size_t)rows * n_in * sizeof *x), *w = malloc((size_t)n_out * n_in * sizeof *w);
    float *whole = malloc((size_t)rows * n_out * sizeof *whole), *alone = malloc((size_t)n_out * sizeof *alone);
    for (int i = 0; i < rows * n_in; i++) x[i] = frand(&s);
    for (int i = 0; i < n_out * n_in; i++) w[i] = frand(&s);
    attn__small_linear(x, rows, n_in, w, NULL, n_out, whole, n_out);
    for (int r = 0; r < rows; r += 7) {
        attn__small_linear(x + (size_t)r * n_in, 1, n_in, w, NULL, n_out, alone, n_out);
        CHECK_MSG(memcmp(alone, whole + (size_t)r * n_out, (size_t)n_out * sizeof *alone) == 0, "row %d", r);
    }
    free(x); free(w); free(whole); free(alone);
}

int main(void)
{
    RUN(kernel_vs_reference_and_old_path);
    RUN(rows_are_independent);
    return check_summary();
}
