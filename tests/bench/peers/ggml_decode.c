/* ggml_decode.c — ggml's CPU flash attention (ggml_flash_attn_ext, the kernel
 * llama.cpp runs on the CPU) on one decode step of the Llama-3.2-1B attention
 * shape: 32 query heads, 8 KV heads, head_dim 64, one new query per sequence
 * over P cached positions, n sequences, scale 1/8, no mask. The peer of
 * bench_peer's "attn" rows (scripts/bench_peers_ggml.sh builds this against a
 * ggml tree the user points LLAMA_SRC at; it is not part of the project build).
 *
 * Tensors as llama.cpp passes them: q [64, 1, 32, n] F32; k, v [64, P, 8, n]
 * F32 or F16, viewed (ggml_permute 0,2,1,3) on llama.cpp's cache layout, one
 * row per position holding all 8 heads ([64, 8, P, n] in memory; attnd's row
 * layout too); the n sequences in dim 3 as llama.cpp's per-sequence streams;
 * ggml_flash_attn_ext_set_prec(F32) as llama.cpp sets it. Threads: a persistent
 * ggml threadpool (default 2), ggml_graph_plan + ggml_graph_compute.
 *
 *   ggml_decode --rows PxN,... [--threads T] [--seconds S]
 *       one line per (P, n, dtype): RESULT ggml P,n,dtype <median ms> min_ms= reps= kv_gbs=
 *       (timing as bench_peer: one warm-up, then runs until S seconds (default 0.5)
 *       are spent and at least 2 ran; kv bytes n P 8 64 2 elem, the unique K/V bytes)
 *   ggml_decode --check   numerics vs a double-precision softmax(q k^T / 8) v on
 *       small cases (both of ggml's decode paths); exit 1 if any fails.
 */
#define _GNU_SOURCE
#include "ggml-cpu.h"
#include "ggml.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define H 32
#define G 8
#define D 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float rnd_sym(void) /* xorshift64: uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Fills a contiguous tensor (F32 or F16) with uniform [-1, 1) values. */
static void fill(struct ggml_tensor *t)
{
    const int64_t n = ggml_nelements(t);
    if (t->type == GGML_TYPE_F32) {
        float *p = t->data;
        for (int64_t i = 0; i < n; i++) p[i] = rnd_sym();
        return;
    }
    enum { CH = 4096 };
    float buf[CH];
    ggml_fp16_t *p = t->data;
    for (int64_t i = 0; i < n; i += CH) {
        const int64_t m = n - i < CH ? n - i : CH;
        for (int64_t j = 0; j < m; j++) buf[j] = rnd_sym();
        ggml_fp32_to_fp16_row(buf, p + i, m);
    }
}

typedef struct fa_case {
    struct ggml_context *ctx;
    struct ggml_tensor *q, *k, *v, *out;
    struct ggml_cgraph *gf;
    struct ggml_cplan plan;
    void *work;
    int P, n;
    enum ggml_type kvt;
} fa_case;

static void case_free(fa_case *c)
{
    free(c->work);
    if (c->ctx) ggml_free(c->ctx);
    memset(c, 0, sizeof *c);
}

/* Builds the graph of one step and fills q, k, v. Returns 0, or -1 (c freed). */
static int case_build(fa_case *c, int P, int n, enum ggml_type kvt, int threads, struct ggml_threadpool *tp)
{
    memset(c, 0, sizeof *c);
    c->P = P, c->n = n, c->kvt = kvt;
    const size_t kv = (size_t)n * P * G * D * ggml_type_size(kvt);
    struct ggml_init_params ip = {.mem_size = 2 * kv + (size_t)n * H * D * sizeof(float) * 2 +
                                              64 * ggml_tensor_overhead() + ggml_graph_overhead() + (1u << 20),
                                  .mem_buffer = NULL, .no_alloc = false};
    if ((c->ctx = ggml_init(ip)) == NULL) return -1;
    c->q = ggml_new_tensor_4d(c->ctx, GGML_TYPE_F32, D, 1, H, n);
    struct ggml_tensor *kb = ggml_new_tensor_4d(c->ctx, kvt, D, G, P, n); /* a row: the 8 heads of a position */
    struct ggml_tensor *vb = ggml_new_tensor_4d(c->ctx, kvt, D, G, P, n);
    c->k = ggml_permute(c->ctx, kb, 0, 2, 1, 3); /* -> [D, P, G, n] */
    c->v = ggml_permute(c->ctx, vb, 0, 2, 1, 3);
    fill(c->q);
    fill(kb);
    fill(vb);
    c->out = ggml_flash_attn_ext(c->ctx, c->q, c->k, c->v, NULL, 1.0f / sqrtf((float)D), 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(c->out, GGML_PREC_F32);
    c->gf = ggml_new_graph(c->ctx);
    ggml_build_forward_expand(c->gf, c->out);
    c->plan = ggml_graph_plan(c->gf, threads, tp);
    if (c->plan.work_size) {
        if ((c->work = malloc(c->plan.work_size)) == NULL) {
            case_free(c);
            return -1;
        }
        c->plan.work_data = c->work;
    }
    return 0;
}

static int case_run(fa_case *c) { return ggml_graph_compute(c->gf, &c->plan) == GGML_STATUS_SUCCESS ? 0 : -1; }

static double kv_at(const fa_case *c, const struct ggml_tensor *t, int d, int pos, int j, int s)
{
    const char *p = (const char *)t->data + d * t->nb[0] + pos * t->nb[1] + j * t->nb[2] + s * t->nb[3];
    return c->kvt == GGML_TYPE_F32 ? *(const float *)p : ggml_fp16_to_fp32(*(const ggml_fp16_t *)p);
}

/* Max |error| of the output vs a double softmax(q k^T / 8) v over the K/V as
 * stored, relative to max(1, max|ref|). out: [64, 32, 1, n]. */
static double case_check(const fa_case *c)
{
    const float *q = c->q->data, *o = c->out->data;
    double *sc = malloc((size_t)c->P * sizeof *sc), err = 0, mx = 1;
    if (sc == NULL) return INFINITY;
    for (int s = 0; s < c->n; s++)
        for (int h = 0; h < H; h++) {
            const int j = h / (H / G);
            const float *qq = q + ((size_t)s * H + h) * D;
            double m = -INFINITY, sum = 0;
            for (int i = 0; i < c->P; i++) {
                double a = 0;
                for (int d = 0; d < D; d++) a += qq[d] * kv_at(c, c->k, d, i, j, s);
                sc[i] = a / 8.0;
                if (sc[i] > m) m = sc[i];
            }
            for (int i = 0; i < c->P; i++) sum += (sc[i] = exp(sc[i] - m));
            for (int d = 0; d < D; d++) {
                double r = 0;
                for (int i = 0; i < c->P; i++) r += sc[i] * kv_at(c, c->v, d, i, j, s);
                r /= sum;
                if (fabs(r) > mx) mx = fabs(r);
                const double e = fabs(o[((size_t)s * H + h) * D + d] - r);
                if (!(e <= err)) err = e;
            }
        }
    free(sc);
    return err / mx;
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One warm-up, then runs for `secs` and at least 2; median (and *min) seconds, -1 on failure. */
static double time_case(fa_case *c, double secs, double *min, int *reps)
{
    enum { MAX_RUNS = 2000 };
    static double t[MAX_RUNS];
    if (case_run(c)) return -1;
    int n = 0;
    const double start = now_s();
    while (n < MAX_RUNS && (n < 2 || now_s() - start < secs)) {
        const double t0 = now_s();
        if (case_run(c)) return -1;
        t[n++] = now_s() - t0;
    }
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    *min = t[0];
    *reps = n;
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

int main(int argc, char **argv)
{
    int threads = 2, check = 0;
    double secs = 0.5;
    const char *rows = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check")) check = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) secs = atof(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = argv[++i];
        else {
            fprintf(stderr, "usage: %s --rows PxN,... [--threads T] [--seconds S] | --check\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || !(secs > 0) || (!check && rows == NULL)) {
        fprintf(stderr, "%s: --rows PxN,... (or --check), --threads >= 1, --seconds > 0\n", argv[0]);
        return 2;
    }
    ggml_cpu_init();
    struct ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
    struct ggml_threadpool *tp = ggml_threadpool_new(&tpp);
    if (tp == NULL) {
        fprintf(stderr, "%s: ggml_threadpool_new failed\n", argv[0]);
        return 1;
    }
    int rc = 0;
    if (check) {
        /* the split-KV decode path (n = 1, P >= 512) and the row path (n > 1 or P < 512) */
        static const int cP[] = {700, 300, 1500, 8192}, cN[] = {1, 3, 2, 1};
        for (int di = 0; di < 2; di++)
            for (int ci = 0; ci < 4; ci++) {
                fa_case c;
                const enum ggml_type t = di ? GGML_TYPE_F16 : GGML_TYPE_F32;
                if (case_build(&c, cP[ci], cN[ci], t, threads, tp) || case_run(&c)) {
                    printf("CHECK\tggml P=%d n=%d: could not run\tFAIL\n", cP[ci], cN[ci]);
                    rc = 1;
                    case_free(&c);
                    continue;
                }
                const double e = case_check(&c), tol = di ? 5e-3 : 1e-5; /* ggml's F16 path accumulates in F16 */
                printf("CHECK\tggml P=%d n=%d %s: max error %.2g (relative to max(1, |ref|)), limit %.0e\t%s\n",
                       cP[ci], cN[ci], di ? "f16" : "f32", e, tol, e <= tol ? "ok" : "FAIL");
                rc |= !(e <= tol);
                case_free(&c);
            }
    }
    while (rows && *rows) {
        int P, n, used;
        if (sscanf(rows, "%dx%d%n", &P, &n, &used) != 2 || P < 1 || n < 1) {
            fprintf(stderr, "%s: bad --rows at \"%s\"\n", argv[0], rows);
            rc = 2;
            break;
        }
        rows += used + (rows[used] == ',');
        for (int di = 0; di < 2; di++) {
            const enum ggml_type t = di ? GGML_TYPE_F16 : GGML_TYPE_F32;
            fa_case c;
            double min = 0, med = -1;
            int reps = 0;
            if (case_build(&c, P, n, t, threads, tp) == 0) med = time_case(&c, secs, &min, &reps);
            case_free(&c);
            if (med < 0) {
                printf("ERROR\tggml %d,%d,%s: could not build or run\n", P, n, di ? "f16" : "f32");
                rc = 1;
                continue;
            }
            const double kv = (double)n * P * G * D * 2 * ggml_type_size(t);
            printf("RESULT\tggml\t%d,%d,%s\t%.4f\tmin_ms=%.4f reps=%d kv_gbs=%.3f\n", P, n, di ? "f16" : "f32",
                   med * 1e3, min * 1e3, reps, kv / med * 1e-9);
            fflush(stdout);
        }
    }
    ggml_threadpool_free(tp);
    return rc;
}
