/* benchutil.c — the clock, PRNG and model-file writer the benchmarks share
 * (see benchutil.h). */
#include "benchutil.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double bench_rng_sym(uint64_t *state)
{
    uint64_t r = *state;
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    *state = r;
    return (double)(r >> 11) / 4503599627370496.0 - 1.0;
}

int bench_write_mha_model(const char *path, int e, int heads, uint64_t *rng)
{
    const size_t sizes[4] = {(size_t)3 * e * e, (size_t)3 * e, (size_t)e * e, (size_t)e};
    const char *names[4] = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"};
    char header[1024], shape[32];
    int len = snprintf(header, sizeof header, "{\"__metadata__\":{\"num_heads\":\"%d\"}", heads);
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        if (i == 0 || i == 2)
            snprintf(shape, sizeof shape, "[%d,%d]", i ? e : 3 * e, e);
        else
            snprintf(shape, sizeof shape, "[%d]", i == 1 ? 3 * e : e);
        len += snprintf(header + len, sizeof header - (size_t)len,
                        ",\"%s\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                        names[i], shape, off, off + sizes[i] * 4);
        off += sizes[i] * 4;
    }
    len += snprintf(header + len, sizeof header - (size_t)len, "}");
    while (len % 8)
        header[len++] = ' '; /* data starts 8-byte aligned */

    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    uint64_t hlen = (uint64_t)len; /* little-endian on every machine we target */
    int ok = fwrite(&hlen, 8, 1, f) == 1 && fwrite(header, 1, (size_t)len, f) == (size_t)len;
    const float bound[4] = {sqrtf(6.0f / (4.0f * e)), 0.05f, 1.0f / sqrtf((float)e), 0.05f};
    for (int i = 0; i < 4 && ok; i++)
        for (size_t k = 0; k < sizes[i] && ok; k++) {
            float v = (float)bench_rng_sym(rng) * bound[i];
            ok = fwrite(&v, 4, 1, f) == 1;
        }
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_time_forward(const attn_layer *l, const attn_seq *seq, attn_workspace *ws,
                          double budget, int min_runs)
{
    return bench_time_batch(l, seq, 1, ws, budget, min_runs);
}

double bench_time_batch(const attn_layer *l, const attn_seq *seqs, int n_seqs, attn_workspace *ws,
                        double budget, int min_runs)
{
    enum { MAX_RUNS = 2000 };
    static double t[MAX_RUNS];
    attn_error err = {0};
    if (attn_forward(l, seqs, n_seqs, ws, NULL, &err) != ATTN_OK) {
        fprintf(stderr, "attn_forward: %s\n", err.message);
        return -1;
    }
    int n = 0;
    const int64_t start = bench_now_ns();
    while (n < MAX_RUNS && (n < min_runs || (double)(bench_now_ns() - start) * 1e-9 < budget)) {
        const int64_t t0 = bench_now_ns();
        if (attn_forward(l, seqs, n_seqs, ws, NULL, NULL) != ATTN_OK)
            return -1;
        t[n++] = (double)(bench_now_ns() - t0) * 1e-9;
    }
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}
