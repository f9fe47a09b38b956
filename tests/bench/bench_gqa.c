/* bench_gqa.c — what grouped-query attention buys decoding: one new position
 * (a T = 1 append) against KV caches of P = 2048 and 8192 positions, on a
 * Llama-like GQA layer (E = 2048, h = 32 query heads, g = 8 KV heads, d = 64,
 * RoPE, W_O) versus the same layer expanded to g = h (its K/V heads repeated,
 * HF repeat_kv: the same outputs). Per step: median time, the K/V bytes the
 * head kernels stream (from the job plan, attn__forward_kv_bytes) and the
 * ratios; the step time includes the projections (W_Q, W_K, W_V, W_O), so the
 * K/V-dependent part is also shown as the slope between the two cache sizes.
 * OpenBLAS threads as the environment sets them (scripts/bench.sh:
 * OPENBLAS_NUM_THREADS); the kernel OpenBLAS picked is printed.
 * BENCH_SECONDS (default 0.5) is the time per measurement; figures are medians.
 */
#include "attn.h"
#include "benchutil.h"
#include "forward.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E 2048
#define H 32
#define G 8
#define D 64

char *openblas_get_corename(void); /* OpenBLAS extension, not in every cblas.h */

/* The GQA layer (g = G) or its expansion (g = H, KV head i = GQA head i / (H/G)). */
static attn_layer *make_layer(const float *w, int expanded)
{
    const size_t ee = (size_t)E * E, kv = (size_t)G * D * E;
    const float *wq = w, *wk = w + ee, *wv = wk + kv, *wo = wv + kv;
    float *xk = NULL, *xv = NULL;
    if (expanded) {
        xk = malloc(ee * sizeof *xk);
        xv = malloc(ee * sizeof *xv);
        if (!xk || !xv) { free(xk); free(xv); return NULL; }
        for (int i = 0; i < H; i++) {
            memcpy(xk + (size_t)i * D * E, wk + (size_t)(i / (H / G)) * D * E, (size_t)D * E * sizeof *xk);
            memcpy(xv + (size_t)i * D * E, wv + (size_t)(i / (H / G)) * D * E, (size_t)D * E * sizeof *xv);
        }
    }
    attn_layer_desc d = {.num_heads = H, .head_dim_k = D, .head_dim_v = D, .embed_q = E, .embed_k = E,
                         .embed_v = E, .embed_out = E, .w_q = wq, .w_k = expanded ? xk : wk,
                         .w_v = expanded ? xv : wv, .w_o = wo, .num_kv_heads = expanded ? H : G,
                         .rope = {.style = ATTN_ROPE_HALF, .theta = 500000.0}};
    attn_layer *l = NULL;
    attn_error err = {0};
    if (attn_layer_create(&d, &l, &err) != ATTN_OK) fprintf(stderr, "layer: %s\n", err.message);
    free(xk);
    free(xv);
    return l;
}

typedef struct step_result { double t; uint64_t bytes; } step_result;

/* One decode step against a cache of p rows: the GQA cache holds G heads, the
 * expanded one the same rows repeated to H heads (so both compute the same
 * thing). out gets the new row. */
static int run_step(const attn_layer *l, int g, const float *ck8, const float *cv8, int p, const float *x,
                    attn_workspace *ws, double budget, float *out, step_result *res)
{
    const size_t rows = (size_t)p + 1, w = (size_t)g * D;
    float *ck = malloc(rows * w * sizeof *ck), *cv = malloc(rows * w * sizeof *cv);
    if (!ck || !cv) { free(ck); free(cv); return -1; }
    for (size_t r = 0; r < (size_t)p; r++)
        for (int i = 0; i < g; i++) {
            int src = g == G ? i : i / (H / G);
            memcpy(ck + r * w + (size_t)i * D, ck8 + r * G * D + (size_t)src * D, D * sizeof *ck);
            memcpy(cv + r * w + (size_t)i * D, cv8 + r * G * D + (size_t)src * D, D * sizeof *cv);
        }
    attn_seq s = {.t = 1, .s = p + 1, .query = x, .is_causal = 1, .output = out,
                  .cache_k = ck, .cache_v = cv, .cache_len = p, .cache_append = 1};
    attn_error err = {0};
    int rc = attn__forward_kv_bytes(l, &s, 1, ws, &res->bytes, &err) == ATTN_OK ? 0 : -1;
    if (rc) fprintf(stderr, "kv bytes: %s\n", err.message);
    res->t = rc ? -1 : bench_time_forward(l, &s, ws, budget, 5);
    free(ck);
    free(cv);
    return rc || res->t < 0 ? -1 : 0;
}

int main(void)
{
    bench_start("bench_gqa");
    static const int prefixes[] = {2048, 8192};
    const char *bs = getenv("BENCH_SECONDS");
    const double budget = bs ? atof(bs) : 0.5;
    uint64_t rng = 0x67716162656e6368ull;
    const size_t nw = 2 * (size_t)E * E + 2 * (size_t)G * D * E;
    float *w = malloc(nw * sizeof *w);
    const int pmax = prefixes[1];
    float *ck8 = malloc((size_t)pmax * G * D * sizeof *ck8), *cv8 = malloc((size_t)pmax * G * D * sizeof *cv8);
    float *x = malloc(E * sizeof *x), out_g[E], out_m[E];
    if (!w || !ck8 || !cv8 || !x) return 1;
    const double sw = 1.0 / sqrt((double)E);
    for (size_t i = 0; i < nw; i++) w[i] = (float)(sw * bench_rng_sym(&rng));
    for (size_t i = 0; i < (size_t)pmax * G * D; i++) ck8[i] = (float)bench_rng_sym(&rng);
    for (size_t i = 0; i < (size_t)pmax * G * D; i++) cv8[i] = (float)bench_rng_sym(&rng);
    for (int i = 0; i < E; i++) x[i] = (float)bench_rng_sym(&rng);
    attn_layer *lg = make_layer(w, 0), *lm = make_layer(w, 1);
    attn_workspace *ws = NULL;
    if (!lg || !lm || attn_workspace_create(NULL, &ws, NULL) != ATTN_OK) return 1;

    const char *env = getenv("OPENBLAS_NUM_THREADS");
    printf("decode (T=1 append) on a GQA layer: E=%d, h=%d query heads, d=%d, RoPE, W_O; GQA g=%d vs the same "
           "layer expanded to g=h=%d\n", E, H, D, G, H);
    printf("OpenBLAS: core %s, %d thread(s) (OPENBLAS_NUM_THREADS=%s); AUTO kernel (fused), one workspace\n",
           openblas_get_corename(), openblas_get_num_threads(), env ? env : "unset");
    printf("%8s %12s %12s %8s %14s %14s %8s %10s\n", "cache P", "GQA (us)", "g=h (us)", "time x", "GQA K/V MB",
           "g=h K/V MB", "bytes x", "rel diff");
    step_result rg[2], rm[2];
    int rc = 0;
    double bytes_ratio_min = 1e30;
    for (int k = 0; k < 2; k++) {
        const int p = prefixes[k];
        if (run_step(lg, G, ck8, cv8, p, x, ws, budget, out_g, &rg[k]) ||
            run_step(lm, H, ck8, cv8, p, x, ws, budget, out_m, &rm[k])) {
            rc = 1;
            break;
        }
        double diff = 0, scale = 1;
        for (int c = 0; c < E; c++) {
            diff = fmax(diff, fabs((double)out_g[c] - out_m[c]));
            scale = fmax(scale, fabs((double)out_m[c]));
        }
        const double br = (double)rm[k].bytes / (double)rg[k].bytes;
        bytes_ratio_min = fmin(bytes_ratio_min, br);
        printf("%8d %12.1f %12.1f %7.2fx %14.2f %14.2f %7.2fx %10.2g\n", p, rg[k].t * 1e6, rm[k].t * 1e6,
               rm[k].t / rg[k].t, rg[k].bytes / 1e6, rm[k].bytes / 1e6, br, diff / scale);
        if (diff / scale > 1e-5) {
            fprintf(stderr, "bench_gqa: GQA and expanded layers differ (%.3g)\n", diff / scale);
            rc = 1;
        }
    }
    if (rc == 0) {
        const double dp = (double)(prefixes[1] - prefixes[0]) / 1000.0;
        const double sg = (rg[1].t - rg[0].t) / dp, sm = (rm[1].t - rm[0].t) / dp;
        printf("K/V-dependent cost (slope from P=%d to %d): GQA %.1f us, g=h %.1f us per 1000 cached positions: "
               "%.2fx\n", prefixes[0], prefixes[1], sg * 1e6, sm * 1e6, sm / sg);
        printf("target: K/V bytes drop by h/g (%dx): %s (measured %.2fx); step time ratio %.2fx at P=%d, "
               "%.2fx at P=%d\n", H / G, bytes_ratio_min >= (double)(H / G) - 1e-9 ? "met" : "not met",
               bytes_ratio_min, rm[0].t / rg[0].t, prefixes[0], rm[1].t / rg[1].t, prefixes[1]);
    }
    attn_workspace_free(ws);
    attn_layer_free(lg);
    attn_layer_free(lm);
    free(w); free(ck8); free(cv8); free(x);
    return rc;
}
