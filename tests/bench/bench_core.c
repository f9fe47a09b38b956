/* bench_core.c — throughput of attn_forward (BLAS path, self-attention, biases and
 * W_O, no weights returned) on a few (B, T, E, h) shapes, beside cblas_sgemm on
 * the projection-shaped GEMM (B*T x E x E) measured in the same run, and the ratio.
 * Threads: whatever OpenBLAS was given (scripts/bench.sh sets OPENBLAS_NUM_THREADS).
 * BENCH_SECONDS (default 1.0) is the time spent per measurement.
 */
#include "attn.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct shape { int b, t, e, h; } shape;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *filled(size_t n, unsigned *seed)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; p && i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = ((float)(*seed >> 8) / (float)(1u << 24) - 0.5f) * 0.2f;
    }
    return p;
}

/* Runs fn(arg) once to warm up, then repeatedly for about `budget` seconds
 * (at least 3 times); returns the median seconds per call. */
static double time_it(int (*fn)(void *), void *arg, double budget)
{
    enum { MAX_REPS = 1000 };
    static double t[MAX_REPS];
    if (fn(arg)) return -1;
    int n = 0;
    double start = now_s();
    while (n < MAX_REPS && (n < 3 || now_s() - start < budget)) {
        double t0 = now_s();
        if (fn(arg)) return -1;
        t[n++] = now_s() - t0;
    }
    for (int i = 1; i < n; i++) /* insertion sort: n is small */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    return t[n / 2];
}

typedef struct fwd_arg {
    const attn_layer *layer;
    attn_seq *seqs;
    int n;
    attn_workspace *ws;
    attn_forward_stats stats;
} fwd_arg;

static int run_forward(void *p)
{
    fwd_arg *a = p;
    attn_error err;
    attn_status st = attn_forward(a->layer, a->seqs, a->n, a->ws, &a->stats, &err);
    if (st != ATTN_OK) fprintf(stderr, "bench_core: attn_forward: %s\n", err.message);
    return st != ATTN_OK;
}

typedef struct gemm_arg { int m, n, k; const float *a, *b; float *c; } gemm_arg;

static int run_gemm(void *p)
{
    gemm_arg *g = p; /* C (m, n) = A (m, k) Bᵀ, B (n, k): the shape of a projection */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->m, g->n, g->k, 1.0f, g->a, g->k, g->b,
                g->k, 0.0f, g->c, g->n);
    return 0;
}

static int bench_shape(shape s, double budget)
{
    unsigned seed = 12345;
    size_t e = (size_t)s.e, rows = (size_t)s.b * s.t;
    float *w = filled(4 * e * e, &seed), *bias = filled(4 * e, &seed);
    float *x = filled(rows * e, &seed), *out = malloc(rows * e * sizeof(float));
    float *c = malloc(rows * e * sizeof(float));
    attn_seq *seqs = calloc((size_t)s.b, sizeof *seqs);
    attn_layer *layer = NULL;
    attn_workspace *ws = attn_workspace_create();
    int rc = 1;
    if (!w || !bias || !x || !out || !c || !seqs || !ws) goto done;
    attn_layer_desc d = {s.h, s.e / s.h, s.e / s.h, s.e, s.e, s.e, s.e,
                         w, w + e * e, w + 2 * e * e, w + 3 * e * e,
                         bias, bias + e, bias + 2 * e, bias + 3 * e};
    attn_error err;
    if (attn_layer_create(&d, &layer, &err) != ATTN_OK) {
        fprintf(stderr, "bench_core: layer: %s\n", err.message);
        goto done;
    }
    for (int i = 0; i < s.b; i++) {
        seqs[i].t = seqs[i].s = s.t;
        seqs[i].query = x + (size_t)i * s.t * e;
        seqs[i].output = out + (size_t)i * s.t * e;
    }
    fwd_arg fa = {layer, seqs, s.b, ws, {0, 0}};
    double t_fwd = time_it(run_forward, &fa, budget);
    gemm_arg ga = {(int)rows, s.e, s.e, x, w, c};
    double t_gemm = time_it(run_gemm, &ga, budget / 2);
    if (t_fwd <= 0 || t_gemm <= 0) goto done;
    double gf = (double)fa.stats.flops / t_fwd * 1e-9;
    double gg = 2.0 * (double)rows * e * e / t_gemm * 1e-9;
    printf("%4d %5d %4d %2d | %9.3f %8.2f %8.1f | %6zux%4dx%4d %8.1f | %5.2f | %7.1f\n", s.b, s.t,
           s.e, s.h, t_fwd * 1e3, (double)fa.stats.flops * 1e-9, gf, rows, s.e, s.e, gg, gf / gg,
           (double)fa.stats.peak_scratch / (1024.0 * 1024.0));
    rc = 0;
done:
    attn_layer_free(layer);
    attn_workspace_free(ws);
    free(w); free(bias); free(x); free(out); free(c); free(seqs);
    return rc;
}

int main(void)
{
    const shape shapes[] = {{1, 32, 64, 8}, {8, 128, 256, 8}, {8, 512, 512, 8}, {1, 2048, 512, 8}};
    const char *env = getenv("BENCH_SECONDS");
    double budget = env ? atof(env) : 1.0;
    if (!(budget > 0)) budget = 1.0;
    const char *thr = getenv("OPENBLAS_NUM_THREADS");
    printf("attn_forward (BLAS path, self-attention, biases + W_O, no weights out), "
           "OpenBLAS threads: %d (OPENBLAS_NUM_THREADS=%s), %.1f s per measurement, median\n",
           openblas_get_num_threads(), thr ? thr : "unset", budget);
    printf("   B     T    E  h |  ms/fwd    GFLOP  GFLOP/s |  sgemm M x N x K   GFLOP/s | ratio | scratch MiB\n");
    int rc = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) rc |= bench_shape(shapes[i], budget);
    return rc;
}
