/* bench_kvcache.c — what the KV cache buys a stream: the time to produce one
 * new position by appending one row to a cache of P rows (O(P)) against
 * recomputing the whole prefix of P + 1 rows causally, the no-cache way
 * (O(P^2)), for P = 128, 1024, 4096, on a demo-like layer (E = 256, 8 heads,
 * biases and W_O), one thread (the bench sets openblas_set_num_threads(1)).
 * Also checks that both ways give the same new output row.
 * BENCH_SECONDS (default 1.0) is the time per measurement; figures are medians.
 */
#include "attn.h"
#include "benchutil.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E 256
#define HEADS 8

static attn_layer *make_layer(uint64_t *rng)
{
    const size_t w = (size_t)E * E;
    float *p = malloc((4 * w + 4 * E) * sizeof *p);
    if (p == NULL) return NULL;
    const double sw = 1.0 / sqrt((double)E);
    for (size_t i = 0; i < 4 * w; i++) p[i] = (float)(sw * bench_rng_sym(rng));
    for (size_t i = 4 * w; i < 4 * w + 4 * E; i++) p[i] = (float)(0.1 * bench_rng_sym(rng));
    const float *b = p + 4 * w;
    attn_layer_desc d = {HEADS, E / HEADS, E / HEADS, E, E, E, E,
                         p, p + w, p + 2 * w, p + 3 * w, b, b + E, b + 2 * E, b + 3 * E, 0, {0}, 0};
    attn_layer *l = NULL;
    attn_error err = {0};
    if (attn_layer_create(&d, &l, &err) != ATTN_OK) fprintf(stderr, "layer: %s\n", err.message);
    free(p);
    return l;
}

/* One prefix length: returns 0, or -1 on error. */
static int bench_prefix(const attn_layer *l, attn_workspace *ws, int p, double budget, uint64_t *rng)
{
    const size_t rows = (size_t)p + 1;
    float *x = malloc(rows * E * sizeof *x), *full = malloc(rows * E * sizeof *full);
    float *ck = malloc(rows * E * sizeof *ck), *cv = malloc(rows * E * sizeof *cv), out[E];
    int rc = -1;
    if (!x || !full || !ck || !cv) goto done;
    for (size_t i = 0; i < rows * E; i++) x[i] = (float)bench_rng_sym(rng);

    /* no cache: the whole prefix plus the new row, causal; the new output is the last row */
    attn_seq whole = {.t = p + 1, .s = p + 1, .query = x, .is_causal = 1, .output = full};
    const double t_full = bench_time_forward(l, &whole, ws, budget, 3);
    /* cache: P rows projected once, then the new row appended at row P (each
     * timed call rewrites that same row, so every call costs the same) */
    if (attn_project_kv(l, x, x, p, ck, cv, NULL) != ATTN_OK) goto done;
    attn_seq step = {.t = 1, .s = p + 1, .query = x + (size_t)p * E, .is_causal = 1, .output = out,
                     .cache_k = ck, .cache_v = cv, .cache_len = p, .cache_append = 1};
    const double t_step = bench_time_forward(l, &step, ws, budget, 3);
    if (t_full < 0 || t_step < 0) goto done;

    double diff = 0, scale = 1;
    for (int c = 0; c < E; c++) {
        double d = fabs((double)out[c] - full[(size_t)p * E + c]);
        if (d > diff) diff = d;
        if (fabs(full[(size_t)p * E + c]) > scale) scale = fabs(full[(size_t)p * E + c]);
    }
    printf("%8d %16.1f %16.1f %10.1fx %14.2g\n", p, t_full * 1e6, t_step * 1e6, t_full / t_step,
           diff / scale);
    rc = diff / scale <= 1e-5 ? 0 : -1;
    if (rc) fprintf(stderr, "bench_kvcache: cached and recomputed rows differ (%.3g)\n", diff / scale);
done:
    free(x); free(full); free(ck); free(cv);
    return rc;
}

int main(void)
{
    bench_start("bench_kvcache");
    static const int prefixes[] = {128, 1024, 4096};
    const char *bs = getenv("BENCH_SECONDS");
    const double budget = bs ? atof(bs) : 1.0;
    openblas_set_num_threads(1); /* single-threaded figures, whatever the environment says */
    uint64_t rng = 0x6b7663616368ull;
    attn_layer *l = make_layer(&rng);
    attn_workspace *ws = NULL;
    if (l == NULL || attn_workspace_create(NULL, &ws, NULL) != ATTN_OK) return 1;
    printf("one new position of a causal stream: E=%d, %d heads, biases + W_O, 1 thread, AUTO kernel\n", E,
           HEADS);
    printf("%8s %16s %16s %11s %14s\n", "prefix P", "no cache (us)", "KV cache (us)", "ratio",
           "rel diff");
    int rc = 0;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        rc |= bench_prefix(l, ws, prefixes[i], budget, &rng);
    attn_workspace_free(ws);
    attn_layer_free(l);
    return rc ? 1 : 0;
}
