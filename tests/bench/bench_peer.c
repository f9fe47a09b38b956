/* bench_peer.c — attnd's side of the peer comparisons scripts/bench_peers.sh
 * runs: ONNX Runtime (tests/bench/peers/ort_peer.js drives this program as a
 * server, one measurement of each side after the other, shape by shape) and
 * llama.cpp's ggml (tests/bench/peers/ggml_decode.c, whole processes in turn).
 *
 *   layer   bench_core's "fused" column on its five (B,T,E,h) shapes plus a
 *           causal (1,2048,512,8): attn_forward, self-attention, biases + W_O,
 *           workspace {n_threads = 2, ATTN_KERNEL_FUSED}, OpenBLAS 1 thread,
 *           bench_core's LCG weights and inputs (the same draws, so the same
 *           numbers as `bench_core` without $BENCH_DATA).
 *   decode  bench_decode's F32 step: Llama-3.2-1B attention (E 2048, 32 query /
 *           8 KV heads, d 64, RoPE half / theta 500000, no biases, W_O), n
 *           sessions in ONE attn_forward, each appending one position at P to a
 *           paged F32 pool (256-row pages, K block and V block side by side,
 *           sessions' pages interleaved); workspace n_threads = 2.
 *   attn    the decode attention alone, for ggml: a layer as thin as the API
 *           allows (64-wide query embedding, no RoPE, no W_O), each sequence's
 *           contiguous cache of P rows read as a fixed memory (cache_append 0),
 *           no mask, F32 or F16 K/V: what ggml_flash_attn_ext computes.
 *
 * Usage (scripts/bench_peers.sh runs it; bench.sh skips it in its loop):
 *   bench_peer export DIR   writes DIR/manifest.txt (the rows: "layer B T E h causal",
 *                           "decode P n") and every weight and input the rows use as
 *                           raw little-endian float32 (layer_B_T_E_h.f32: W_Q, W_K,
 *                           W_V, W_O (out, in), b_q, b_k, b_v, b_o; x_B_T_E_h.f32;
 *                           decode_w.f32: W_Q, W_K, W_V, W_O; decode_kv.f32: the
 *                           8192 cached K rows (8 heads x 64), then the V rows;
 *                           decode_x.f32: 16 x 2048), so the peer runs the same numbers.
 *   bench_peer serve        one command a line on stdin, each answered by its line(s)
 *                           and "DONE" (OUT: a file for the outputs, or -):
 *                             layer B T E h causal SECONDS OUT
 *                             decode P n SECONDS OUT
 *                             attn P n f32|f16 SECONDS
 *                             bw | sgemm | peak | quit
 * Timing: one timed warm-up, then runs until SECONDS are spent and at least 3
 * ran (2 when the warm-up took over a second; decode and attn: at least 2),
 * median and fastest; the peers follow the same rule. Answers:
 *   RESULT <what> <row> <median ms> min_ms=<fastest> reps=<runs> [...]
 *   ERROR <message>
 */
#include "attn.h"
#include "benchutil.h"
#include "forward.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 2

/* bench_core's shapes, then the causal row the targets ask for. */
typedef struct layer_row { int b, t, e, h, causal; } layer_row;
static const layer_row layer_rows[] = {{1, 32, 64, 8, 0},    {8, 128, 256, 8, 0},  {8, 512, 512, 8, 0},
                                       {1, 2048, 512, 8, 0}, {1, 8192, 512, 8, 0}, {1, 2048, 512, 8, 1}};
enum { N_LAYER_ROWS = sizeof layer_rows / sizeof layer_rows[0] };

/* The decode rows (P, n). */
static const int decode_rows[][2] = {{2048, 1}, {2048, 16}, {8192, 1}, {8192, 16}};
enum { N_DECODE_ROWS = sizeof decode_rows / sizeof decode_rows[0] };

#define DE 2048
#define DH 32
#define DG 8
#define DD 64
#define BLOCK 256
#define MAX_SESS 16
#define MAX_P 8192
#define ATTN_EQ 64 /* the thin layer's query embedding */
#define ATTN_MAX_SESS 64

typedef struct timing { double med, min; int reps; } timing;

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One timed warm-up, then runs until `secs` are spent and at least min_reps
 * ran (min_reps < 0: bench_core's rule, 3, or 2 when the warm-up took over a
 * second). med < 0 when a call fails (its message printed as an ERROR line). */
static timing time_calls(const attn_layer *l, const attn_seq *seqs, int n_seqs, attn_workspace *ws,
                         double secs, int min_reps)
{
    enum { MAX_REPS = 2000 };
    static double t[MAX_REPS];
    timing r = {-1, -1, 0};
    attn_error err = {0};
    const int64_t w0 = bench_now_ns();
    if (attn_forward(l, seqs, n_seqs, ws, NULL, &err) != ATTN_OK) {
        printf("ERROR\tattn_forward: %s\n", err.message);
        return r;
    }
    if (min_reps < 0) min_reps = (double)(bench_now_ns() - w0) * 1e-9 > 1.0 ? 2 : 3;
    int n = 0;
    const int64_t start = bench_now_ns();
    while (n < MAX_REPS && (n < min_reps || (double)(bench_now_ns() - start) * 1e-9 < secs)) {
        const int64_t t0 = bench_now_ns();
        if (attn_forward(l, seqs, n_seqs, ws, NULL, &err) != ATTN_OK) {
            printf("ERROR\tattn_forward: %s\n", err.message);
            return r;
        }
        t[n++] = (double)(bench_now_ns() - t0) * 1e-9;
    }
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    r.med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    r.min = t[0];
    r.reps = n;
    return r;
}

/* Writes n floats to path ("-": nowhere). Returns 0, or -1 (an ERROR line printed). */
static int write_f32(const char *path, const float *p, size_t n)
{
    if (path == NULL || !strcmp(path, "-")) return 0;
    FILE *f = fopen(path, "wb");
    int bad = f == NULL || fwrite(p, sizeof *p, n, f) != n;
    if (f != NULL && fclose(f) != 0) bad = 1;
    if (bad) printf("ERROR\twriting %s: %s\n", path, strerror(errno));
    return bad ? -1 : 0;
}

/* ------------------------------------------------------------ layer forward */

static float *filled(size_t n, unsigned *seed, float scale) /* bench_core's LCG */
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; p && i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = ((float)(*seed >> 8) / (float)(1u << 24) - 0.5f) * 2.0f * scale;
    }
    return p;
}

/* bench_core's draws for a shape (load_inputs without $BENCH_DATA): its sgemm
 * operand first (dropped), then W_Q, W_K, W_V, W_O, the four biases, x.
 * w: 4 E*E, b: 4 E, x: B*T*E. Returns 0, or -1 on allocation failure (all NULL). */
static int layer_draws(const layer_row *r, float **w, float **b, float **x)
{
    const size_t e = (size_t)r->e;
    unsigned seed = 12345;
    free(filled(e * e, &seed, 0.05f));
    *w = filled(4 * e * e, &seed, 1.0f / sqrtf((float)r->e));
    *b = filled(4 * e, &seed, 0.1f);
    *x = filled((size_t)r->b * r->t * e, &seed, 1.0f);
    if (*w && *b && *x) return 0;
    free(*w), free(*b), free(*x);
    *w = *b = *x = NULL;
    return -1;
}

static int layer_cmd(const layer_row *r, double secs, const char *out_path)
{
    const size_t e = (size_t)r->e, rows = (size_t)r->b * r->t;
    float *w = NULL, *b = NULL, *x = NULL, *out = malloc(rows * e * sizeof *out);
    attn_seq *seqs = calloc((size_t)r->b, sizeof *seqs);
    attn_layer *layer = NULL;
    attn_workspace *ws = NULL;
    attn_error err = {0};
    int rc = -1;
    if (layer_draws(r, &w, &b, &x) || !out || !seqs) {
        printf("ERROR\tout of memory\n");
        goto done;
    }
    attn_layer_desc d = {r->h, r->e / r->h, r->e / r->h, r->e, r->e, r->e, r->e, w, w + e * e, w + 2 * e * e,
                         w + 3 * e * e, b, b + e, b + 2 * e, b + 3 * e, 0, {0}, ATTN_WDTYPE_F32};
    attn_workspace_options o = {.n_threads = THREADS, .kernel = ATTN_KERNEL_FUSED};
    if (attn_layer_create(&d, &layer, &err) != ATTN_OK || attn_workspace_create(&o, &ws, &err) != ATTN_OK) {
        printf("ERROR\t%s\n", err.message);
        goto done;
    }
    for (int i = 0; i < r->b; i++)
        seqs[i] = (attn_seq){.t = r->t, .s = r->t, .query = x + (size_t)i * r->t * e, .is_causal = r->causal,
                             .output = out + (size_t)i * r->t * e};
    const timing tm = time_calls(layer, seqs, r->b, ws, secs, -1);
    if (tm.med < 0 || write_f32(out_path, out, rows * e)) goto done;
    printf("RESULT\tlayer\t%d,%d,%d,%d,%s\t%.4f\tmin_ms=%.4f reps=%d\n", r->b, r->t, r->e, r->h,
           r->causal ? "causal" : "nomask", tm.med * 1e3, tm.min * 1e3, tm.reps);
    rc = 0;
done:
    attn_workspace_free(ws);
    attn_layer_free(layer);
    free(w), free(b), free(x), free(out), free(seqs);
    return rc;
}

/* ------------------------------------------------------------------- decode */

/* The decode layer and its data: weights w (W_Q (2048, 2048), W_K, W_V (512,
 * 2048), W_O (2048, 2048)), K and V rows kx, vx (MAX_P, 8*64), inputs x
 * (MAX_SESS, 2048); bench_decode's draws. */
typedef struct decode_data {
    attn_layer *l;
    attn_workspace *ws;
    float *w, *kx, *vx, *x;
} decode_data;

static const size_t NQ = (size_t)DH * DD * DE, NK = (size_t)DG * DD * DE, NO = (size_t)DE * DH * DD;

static void decode_free(decode_data *d)
{
    attn_workspace_free(d->ws);
    attn_layer_free(d->l);
    free(d->w), free(d->kx), free(d->vx), free(d->x);
    memset(d, 0, sizeof *d);
}

/* Returns 0, or -1 (an ERROR line printed, d freed). with_ws: also the workspace. */
static int decode_init(decode_data *d, int with_ws)
{
    uint64_t rng = 0x6465636f6465ull;
    attn_error err = {0};
    memset(d, 0, sizeof *d);
    d->w = malloc((NQ + 2 * NK + NO) * sizeof *d->w);
    d->kx = malloc((size_t)MAX_P * DG * DD * sizeof *d->kx);
    d->vx = malloc((size_t)MAX_P * DG * DD * sizeof *d->vx);
    d->x = malloc((size_t)MAX_SESS * DE * sizeof *d->x);
    if (!d->w || !d->kx || !d->vx || !d->x) {
        printf("ERROR\tout of memory\n");
        goto fail;
    }
    const double sw = 1.0 / sqrt((double)DE);
    for (size_t i = 0; i < NQ + 2 * NK + NO; i++) d->w[i] = (float)(sw * bench_rng_sym(&rng));
    for (size_t i = 0; i < (size_t)MAX_P * DG * DD; i++) {
        d->kx[i] = (float)bench_rng_sym(&rng);
        d->vx[i] = (float)bench_rng_sym(&rng);
    }
    for (size_t i = 0; i < (size_t)MAX_SESS * DE; i++) d->x[i] = (float)bench_rng_sym(&rng);
    attn_layer_desc ld = {.num_heads = DH, .head_dim_k = DD, .head_dim_v = DD, .embed_q = DE, .embed_k = DE,
                          .embed_v = DE, .embed_out = DE, .w_q = d->w, .w_k = d->w + NQ, .w_v = d->w + NQ + NK,
                          .w_o = d->w + NQ + 2 * NK, .num_kv_heads = DG,
                          .rope = {.style = ATTN_ROPE_HALF, .theta = 500000.0}};
    attn_workspace_options o = {.n_threads = THREADS};
    if (attn_layer_create(&ld, &d->l, &err) != ATTN_OK ||
        (with_ws && attn_workspace_create(&o, &d->ws, &err) != ATTN_OK)) {
        printf("ERROR\t%s\n", err.message);
        goto fail;
    }
    return 0;
fail:
    decode_free(d);
    return -1;
}

static int decode_cmd(const decode_data *d, int P, int n, double secs, const char *out_path)
{
    size_t kb, vb;
    attn_error err = {0};
    if (attn_kv_block_bytes(d->l, ATTN_KV_F32, BLOCK, &kb, &vb, &err) != ATTN_OK) {
        printf("ERROR\t%s\n", err.message);
        return -1;
    }
    const size_t page = kb + vb;
    const int blocks_per = (P + 1 + BLOCK - 1) / BLOCK;
    const size_t nb = (size_t)n * blocks_per;
    char *mem = malloc(nb * page);
    int32_t *tables = malloc(nb * sizeof *tables);
    float *out = malloc((size_t)n * DE * sizeof *out);
    attn_seq seqs[MAX_SESS];
    int rc = -1;
    if (!mem || !tables || !out) {
        printf("ERROR\tout of memory\n");
        goto done;
    }
    for (int s = 0; s < n; s++)
        for (int b = 0; b < blocks_per; b++) tables[(size_t)s * blocks_per + b] = (int32_t)((size_t)b * n + s);
    attn_kv_cache c = {.k = mem, .v = mem + kb, .dtype = ATTN_KV_F32, .block_rows = BLOCK, .block_table = tables,
                       .block_stride = page};
    if (attn_kv_store(d->l, &c, 0, P, d->kx, d->vx, &err) != ATTN_OK) {
        printf("ERROR\tattn_kv_store: %s\n", err.message);
        goto done;
    }
    for (int s = 1; s < n; s++) /* every session holds session 0's rows */
        for (int b = 0; b < blocks_per; b++)
            memcpy(mem + (size_t)tables[(size_t)s * blocks_per + b] * page, mem + (size_t)tables[b] * page, page);
    for (int i = 0; i < n; i++)
        seqs[i] = (attn_seq){.t = 1, .s = P + 1, .query = d->x + (size_t)i * DE, .is_causal = 1,
                             .output = out + (size_t)i * DE, .cache_k = (float *)mem, .cache_v = (float *)(mem + kb),
                             .cache_len = P, .cache_append = 1, .cache_block_rows = BLOCK,
                             .cache_block_table = tables + (size_t)i * blocks_per, .cache_dtype = ATTN_KV_F32,
                             .cache_block_stride = page};
    const timing tm = time_calls(d->l, seqs, n, d->ws, secs, 2);
    if (tm.med < 0 || write_f32(out_path, out, (size_t)n * DE)) goto done;
    /* K/V bytes as both sides count them: n (P + 1) rows x 8 heads x 64 x 4 B x (K and V) */
    const double kv = (double)n * (P + 1) * DG * DD * 4.0 * 2.0;
    printf("RESULT\tdecode\t%d,%d\t%.4f\tmin_ms=%.4f reps=%d tok_s=%.1f kv_gbs=%.2f\n", P, n, tm.med * 1e3,
           tm.min * 1e3, tm.reps, n / tm.med, kv / tm.med * 1e-9);
    rc = 0;
done:
    free(mem), free(tables), free(out);
    return rc;
}

/* ------------------------------------------------- decode attention alone */

/* n sequences of P rows each, contiguous caches (row = 8 heads x 64) filled
 * through attn_kv_store, one query each through the thin layer. */
static int attn_cmd(int P, int n, attn_kv_dtype dt, double secs)
{
    uint64_t rng = 0x61747472ull;
    float *wq = malloc((size_t)DH * DD * ATTN_EQ * sizeof *wq), *wk = malloc((size_t)DG * DD * ATTN_EQ * sizeof *wk);
    float *wv = malloc((size_t)DG * DD * ATTN_EQ * sizeof *wv), *x = malloc((size_t)n * ATTN_EQ * sizeof *x);
    float *out = malloc((size_t)n * DH * DD * sizeof *out), *rows = malloc((size_t)1024 * DG * DD * 2 * sizeof *rows);
    char *k = NULL, *v = NULL;
    attn_seq *seqs = calloc((size_t)n, sizeof *seqs);
    attn_layer *l = NULL;
    attn_workspace *ws = NULL;
    attn_error err = {0};
    size_t rb, vb;
    int rc = -1;
    if (!wq || !wk || !wv || !x || !out || !rows || !seqs) {
        printf("ERROR\tout of memory\n");
        goto done;
    }
    for (size_t i = 0; i < (size_t)DH * DD * ATTN_EQ; i++) wq[i] = (float)(0.125 * bench_rng_sym(&rng));
    for (size_t i = 0; i < (size_t)DG * DD * ATTN_EQ; i++) wk[i] = wv[i] = (float)bench_rng_sym(&rng);
    for (size_t i = 0; i < (size_t)n * ATTN_EQ; i++) x[i] = (float)bench_rng_sym(&rng);
    attn_layer_desc d = {.num_heads = DH, .head_dim_k = DD, .head_dim_v = DD, .embed_q = ATTN_EQ,
                         .embed_k = ATTN_EQ, .embed_v = ATTN_EQ, .embed_out = DH * DD, .w_q = wq, .w_k = wk,
                         .w_v = wv, .num_kv_heads = DG};
    attn_workspace_options o = {.n_threads = THREADS};
    if (attn_layer_create(&d, &l, &err) != ATTN_OK || attn_workspace_create(&o, &ws, &err) != ATTN_OK ||
        attn_kv_block_bytes(l, dt, 0, &rb, &vb, &err) != ATTN_OK) {
        printf("ERROR\t%s\n", err.message);
        goto done;
    }
    const size_t per = (size_t)P * rb;
    k = malloc((size_t)n * per);
    v = malloc((size_t)n * per);
    if (!k || !v) {
        printf("ERROR\tout of memory\n");
        goto done;
    }
    for (int s = 0; s < n; s++) {
        attn_kv_cache c = {.k = k + s * per, .v = v + s * per, .dtype = dt};
        for (int r0 = 0; r0 < P; r0 += 1024) {
            const int m = P - r0 < 1024 ? P - r0 : 1024;
            for (size_t i = 0; i < (size_t)m * DG * DD * 2; i++) rows[i] = (float)bench_rng_sym(&rng);
            if (attn_kv_store(l, &c, r0, m, rows, rows + (size_t)m * DG * DD, &err) != ATTN_OK) {
                printf("ERROR\tattn_kv_store: %s\n", err.message);
                goto done;
            }
        }
        seqs[s] = (attn_seq){.t = 1, .s = P, .query = x + (size_t)s * ATTN_EQ, .output = out + (size_t)s * DH * DD,
                             .cache_k = (float *)(k + s * per), .cache_v = (float *)(v + s * per), .cache_len = P,
                             .cache_dtype = (int)dt};
    }
    const timing tm = time_calls(l, seqs, n, ws, secs, 2);
    if (tm.med < 0) goto done;
    /* the unique K/V bytes: n P rows x 8 heads x 64 x element x (K and V) */
    const double kv = (double)n * P * DG * DD * (dt == ATTN_KV_F16 ? 2 : 4) * 2.0;
    printf("RESULT\tattn\t%d,%d,%s\t%.4f\tmin_ms=%.4f reps=%d kv_gbs=%.3f\n", P, n, dt == ATTN_KV_F16 ? "f16" : "f32",
           tm.med * 1e3, tm.min * 1e3, tm.reps, kv / tm.med * 1e-9);
    rc = 0;
done:
    attn_workspace_free(ws);
    attn_layer_free(l);
    free(wq), free(wk), free(wv), free(x), free(out), free(rows), free(k), free(v), free(seqs);
    return rc;
}

/* ------------------------------------------------------------------ export */

static FILE *open_in(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL) fprintf(stderr, "bench_peer: %s: %s\n", path, strerror(errno));
    return f;
}

static int put(FILE *f, const float *p, size_t n) { return f == NULL || fwrite(p, sizeof *p, n, f) != n; }

static int close_ok(FILE *f, int bad)
{
    if (f != NULL && fclose(f) != 0) bad = 1;
    return bad;
}

static int export_all(const char *dir)
{
    char name[128];
    int bad = 0;
    FILE *m = open_in(dir, "manifest.txt");
    if (m == NULL) return 1;
    for (int i = 0; i < N_LAYER_ROWS; i++) {
        const layer_row *r = &layer_rows[i];
        fprintf(m, "layer %d %d %d %d %d\n", r->b, r->t, r->e, r->h, r->causal);
        if (r->causal) continue; /* the same draws as its non-causal row */
        float *w, *b, *x;
        if (layer_draws(r, &w, &b, &x)) return close_ok(m, 1);
        const size_t e = (size_t)r->e;
        snprintf(name, sizeof name, "layer_%d_%d_%d_%d.f32", r->b, r->t, r->e, r->h);
        FILE *f = open_in(dir, name);
        bad |= close_ok(f, put(f, w, 4 * e * e) || put(f, b, 4 * e));
        snprintf(name, sizeof name, "x_%d_%d_%d_%d.f32", r->b, r->t, r->e, r->h);
        f = open_in(dir, name);
        bad |= close_ok(f, put(f, x, (size_t)r->b * r->t * e));
        free(w), free(b), free(x);
    }
    for (int i = 0; i < N_DECODE_ROWS; i++) fprintf(m, "decode %d %d\n", decode_rows[i][0], decode_rows[i][1]);
    bad = close_ok(m, bad);
    decode_data d;
    if (decode_init(&d, 0)) return 1;
    FILE *f = open_in(dir, "decode_w.f32");
    bad |= close_ok(f, put(f, d.w, NQ + 2 * NK + NO));
    f = open_in(dir, "decode_kv.f32");
    bad |= close_ok(f, put(f, d.kx, (size_t)MAX_P * DG * DD) || put(f, d.vx, (size_t)MAX_P * DG * DD));
    f = open_in(dir, "decode_x.f32");
    bad |= close_ok(f, put(f, d.x, (size_t)MAX_SESS * DE));
    decode_free(&d);
    if (bad) fprintf(stderr, "bench_peer: export to %s failed\n", dir);
    return bad;
}

/* ------------------------------------------------------------------- serve */

static int serve(void)
{
    decode_data d = {0};
    char line[4096], out[4096], dt[8];
    while (fgets(line, sizeof line, stdin)) {
        layer_row r;
        int P, n;
        double secs;
        if (sscanf(line, "layer %d %d %d %d %d %lf %4095s", &r.b, &r.t, &r.e, &r.h, &r.causal, &secs, out) == 7) {
            if (r.b < 1 || r.t < 1 || r.h < 1 || r.e < r.h || r.e % r.h) printf("ERROR\tbad layer row\n");
            else layer_cmd(&r, secs, out);
        } else if (sscanf(line, "decode %d %d %lf %4095s", &P, &n, &secs, out) == 4) {
            if (n < 1 || n > MAX_SESS || P < 0 || P > MAX_P) printf("ERROR\tdecode rows: 1 <= n <= %d, P <= %d\n", MAX_SESS, MAX_P);
            else if (d.l != NULL || decode_init(&d, 1) == 0) decode_cmd(&d, P, n, secs, out);
        } else if (sscanf(line, "attn %d %d %7s %lf", &P, &n, dt, &secs) == 4) {
            if (n < 1 || n > ATTN_MAX_SESS || P < 1 || (strcmp(dt, "f32") && strcmp(dt, "f16")))
                printf("ERROR\tattn rows: 1 <= n <= %d, P >= 1, f32 or f16\n", ATTN_MAX_SESS);
            else attn_cmd(P, n, strcmp(dt, "f16") ? ATTN_KV_F32 : ATTN_KV_F16, secs);
        } else if (!strncmp(line, "sgemm", 5)) { /* the compute roof the layer rows are held against */
            printf("RESULT\tsgemm\t%dthreads\t%.3f\tGFLOP/s (1024^3, OpenBLAS %s, best of 3)\n", THREADS,
                   bench_sgemm_gflops(1024, THREADS), openblas_get_corename());
        } else if (!strncmp(line, "peak", 4)) { /* the FMA roof, which no GEMM library passes */
            const char *kind;
            const double g = bench_fma_peak_gflops(THREADS, &kind);
            printf("RESULT\tpeak\t%dthreads\t%.3f\tGFLOP/s (%s on registers, best of 3)\n", THREADS, g, kind);
        } else if (!strncmp(line, "bw", 2)) {
            printf("RESULT\tbw\t%dthreads\t%.3f\tGB/s (sum of floats over 1 GiB, %s, best of 5)\n", THREADS,
                   bench_read_bandwidth(THREADS) * 1e-9, bench_stream_kind());
        } else if (!strncmp(line, "quit", 4)) {
            break;
        } else {
            printf("ERROR\tbad command: %s", line);
        }
        printf("DONE\n");
        fflush(stdout);
    }
    decode_free(&d);
    return 0;
}

int main(int argc, char **argv)
{
    openblas_set_num_threads(1); /* the library's pool needs single-threaded OpenBLAS (attn.h) */
    if (argc == 3 && !strcmp(argv[1], "export")) return export_all(argv[2]);
    if (argc == 2 && !strcmp(argv[1], "serve")) return serve();
    fprintf(stderr, "usage: %s export DIR | serve\n"
                    "(attnd's side of the ONNX Runtime and ggml comparisons: scripts/bench_peers.sh runs it)\n",
            argv[0]);
    return 2;
}
