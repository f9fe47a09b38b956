/* test_threads.c — threaded workspaces: results bit-identical to one thread
 * (fused and materialised kernels, weights modes, ragged cross batches), the
 * pool really runs, OpenBLAS with several threads makes the call stay on the
 * caller, several threaded workspaces at once, create/free cycles. Run under
 * ASan, and under helgrind / TSan for races (see the report in scripts).
 */
#include "attn.h"
#include "check.h"
#include "core_util.h"
#include "forward.h"
#include "pool.h"
#include "workspace.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_SEQS 3

/* A workspace with n_threads set and everything else default; NULL on failure. */
static attn_workspace *ws_threads(int n_threads)
{
    attn_workspace_options o = {.n_threads = n_threads};
    attn_workspace *ws = NULL;
    attn_workspace_create(&o, &ws, NULL);
    return ws;
}

typedef struct batch {
    seq_case c[N_SEQS];
    attn_seq s[N_SEQS];
    int n;
} batch;

/* A ragged batch big enough that the pool is used (> 2 MFLOP), with masks. */
static void batch_init(batch *b, test_rng *r, const attn_layer_info *li, attn_weights_mode wm,
                       int cross)
{
    b->n = N_SEQS;
    for (int i = 0; i < b->n; i++) {
        int t = rng_int(r, 60, 200), s = cross ? rng_int(r, 30, 220) : t;
        seq_case_init(&b->c[i], r, li, t, s, cross, wm);
        b->c[i].seq.is_causal = i == 1;
        b->c[i].seq.window = i == 2 ? 50 : 0;
        if (i == 0) {
            b->c[i].kpm = malloc((size_t)s);
            for (int j = 0; j < s; j++) b->c[i].kpm[j] = rng_int(r, 0, 5) == 0;
            b->c[i].seq.key_padding_mask = b->c[i].kpm;
        }
        b->s[i] = b->c[i].seq;
    }
}

static void batch_free(batch *b)
{
    for (int i = 0; i < b->n; i++) seq_case_free(&b->c[i]);
}

/* Runs b on ws and returns copies of every output and weights buffer. */
static float **snapshot(const attn_layer *l, const attn_layer_info *li, batch *b,
                        attn_workspace *ws)
{
    attn_error err = {0};
    attn_status st = attn_forward(l, b->s, b->n, ws, NULL, &err);
    CHECK_MSG(st == ATTN_OK, "attn_forward: %s", err.message);
    float **out = calloc(2 * (size_t)b->n, sizeof *out);
    for (int i = 0; i < b->n; i++) {
        size_t on = (size_t)b->s[i].t * li->embed_out;
        out[2 * i] = malloc(on * sizeof(float));
        memcpy(out[2 * i], b->s[i].output, on * sizeof(float));
        if (b->s[i].weights_mode == ATTN_WEIGHTS_NONE) continue;
        size_t wn = (size_t)b->s[i].t * b->s[i].s *
                    (b->s[i].weights_mode == ATTN_WEIGHTS_PER_HEAD ? li->num_heads : 1);
        out[2 * i + 1] = malloc(wn * sizeof(float));
        memcpy(out[2 * i + 1], b->s[i].weights, wn * sizeof(float));
    }
    return out;
}

static int same(float **a, float **b, const attn_layer_info *li, const batch *bt, double *worst)
{
    int eq = 1;
    for (int i = 0; i < bt->n; i++) {
        size_t on = (size_t)bt->s[i].t * li->embed_out;
        double d = max_abs_diff(a[2 * i], b[2 * i], on);
        if (d > *worst) *worst = d;
        eq &= memcmp(a[2 * i], b[2 * i], on * sizeof(float)) == 0;
        if (a[2 * i + 1]) {
            size_t wn = (size_t)bt->s[i].t * bt->s[i].s *
                        (bt->s[i].weights_mode == ATTN_WEIGHTS_PER_HEAD ? li->num_heads : 1);
            eq &= memcmp(a[2 * i + 1], b[2 * i + 1], wn * sizeof(float)) == 0;
        }
    }
    return eq;
}

static void free_snap(float **s, int n)
{
    for (int i = 0; i < 2 * n; i++) free(s[i]);
    free(s);
}

/* Every kernel x weights mode x self/cross, threads 2..4: bit-identical. */
TEST(identical)
{
    test_rng r = {31};
    layer_shape shapes[] = {{4, 16, 16, 64, 64, 64, 64, 1, 1},  /* Z reuses Q */
                            {3, 8, 12, 40, 24, 32, 50, 1, 1},   /* d_k != d_v, cross only */
                            {2, 16, 16, 48, 48, 48, 32, 0, 0}}; /* no W_O */
    double worst = 0;
    int runs = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        attn_layer *l = make_layer(&r, &shapes[si]);
        attn_layer_info li;
        attn_layer_get_info(l, &li);
        int square = li.embed_k == li.embed_q && li.embed_v == li.embed_q;
        for (int kernel = ATTN_KERNEL_AUTO; kernel <= ATTN_KERNEL_FUSED; kernel++)
            for (int wm = 0; wm <= 2; wm++)
                for (int cross = !square; cross <= 1; cross++) {
                    batch b;
                    batch_init(&b, &r, &li, (attn_weights_mode)wm, cross);
                    attn_workspace_options o1 = {.n_threads = 1, .kernel = kernel, .block_q = 32};
                    attn_workspace *w1 = NULL;
                    CHECK_INT_EQ(attn_workspace_create(&o1, &w1, NULL), ATTN_OK);
                    float **ref = snapshot(l, &li, &b, w1);
                    for (int th = 2; th <= 4; th++) {
                        attn_workspace_options on = o1;
                        on.n_threads = th;
                        attn_workspace *wn = NULL;
                        CHECK_INT_EQ(attn_workspace_create(&on, &wn, NULL), ATTN_OK);
                        for (int rep = 0; rep < 2; rep++) { /* reuse: the pool wakes again */
                            float **got = snapshot(l, &li, &b, wn);
                            CHECK_MSG(same(ref, got, &li, &b, &worst),
                                      "shape %zu kernel %d weights %d cross %d threads %d differ",
                                      si, kernel, wm, cross, th);
                            free_snap(got, b.n);
                        }
                        CHECK(attn__pool_runs(wn->pool) >= 4); /* projections + heads + W_O, twice */
                        attn_workspace_free(wn);
                        runs++;
                    }
                    free_snap(ref, b.n);
                    attn_workspace_free(w1);
                    batch_free(&b);
                }
        attn_layer_free(l);
    }
    printf("threaded vs single-threaded: %d configurations, max |diff| %.3g (bit-identical "
           "required)\n", runs, worst);
}

/* b on 2, 3 and 4 threads answers, bit for bit, what it answers on w1 (one
 * thread), each run using the pool (projections, heads, W_O); what names the
 * case in a failure. */
static void threads_equal_one(const attn_layer *l, const attn_layer_info *li, batch *b, attn_workspace *w1,
                              const char *what)
{
    float **ref = snapshot(l, li, b, w1);
    for (int th = 2; th <= 4; th++) {
        attn_workspace *wn = ws_threads(th);
        CHECK(wn != NULL);
        if (wn == NULL) continue;
        float **got = snapshot(l, li, b, wn);
        double worst = 0;
        CHECK_MSG(same(ref, got, li, b, &worst), "%s, threads %d: max |diff| %.3g", what, th, worst);
        CHECK(attn__pool_runs(wn->pool) >= 3);
        free_snap(got, b->n);
        attn_workspace_free(wn);
    }
    free_snap(ref, b->n);
}

/* Projections 128 wide (16384 multiply-adds a row) split into row chunks of
 * 192 (384 for 1543 rows on 2 threads), with what is left over: 5 rows (389),
 * 100 rows (484), 7 rows (1543). A 5- or 7-row tail alone is a call that
 * OpenBLAS's SkylakeX / Cooperlake small-matrix kernel takes (n_out*rows <=
 * 1200), rounding those rows unlike the whole GEMM: it must join the chunk
 * before it. 100 rows (1.6M multiply-adds) stay a chunk of their own. Self-
 * and cross-attention (K/V rows differ from Q's), outputs and K/V bit for bit. */
TEST(tail_chunks)
{
    test_rng r = {34};
    layer_shape sh = {4, 32, 32, 128, 128, 128, 128, 1, 1};
    attn_layer *l = make_layer(&r, &sh);
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    const int rows[][2] = {{200, 189}, {300, 184}, {800, 743}};
    attn_workspace *w1 = ws_threads(1);
    CHECK(w1 != NULL);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        for (int cross = 0; cross <= 1; cross++) {
            batch b = {.n = 2};
            for (int j = 0; j < 2; j++) { /* cross: as many keys as the other has queries */
                int t = rows[i][j], s = cross ? rows[i][1 - j] : t;
                seq_case_init(&b.c[j], &r, &li, t, s, cross, ATTN_WEIGHTS_NONE);
                b.s[j] = b.c[j].seq;
            }
            char what[64];
            snprintf(what, sizeof what, "%d + %d rows, cross %d", rows[i][0], rows[i][1], cross);
            threads_equal_one(l, &li, &b, w1, what);
            batch_free(&b);
        }
    attn_workspace_free(w1);
    attn_layer_free(l);
}

/* Projections of too few rows for two row chunks (under 384) are split by
 * columns of W at multiples of 64 instead: a 128-row prefill piece on 512-wide
 * projections (8 chunks of 64), a 150-row one on 200-wide projections with
 * 100-wide keys (chunks of 128 and 72 columns: a 64-wide chunk would be under
 * OpenBLAS's small-matrix bound), self- and cross-
 * attention: outputs bit for bit those of one thread. (Only where
 * attn__col_split_exact says the OpenBLAS kernel allows it, col_split_probe;
 * elsewhere those projections run on one thread, which must match too.) */
TEST(column_chunks)
{
    test_rng r = {35};
    const layer_shape shapes[] = {{8, 64, 64, 512, 512, 512, 512, 1, 1}, {4, 50, 25, 200, 100, 100, 200, 1, 1}};
    const int rows[] = {128, 150};
    attn_workspace *w1 = ws_threads(1);
    CHECK(w1 != NULL);
    for (int si = 0; si < 2; si++) {
        attn_layer *l = make_layer(&r, &shapes[si]);
        attn_layer_info li;
        attn_layer_get_info(l, &li);
        for (int cross = si; cross <= 1; cross++) { /* the second shape's K/V are 100 wide: cross only */
            batch b = {.n = 1};
            seq_case_init(&b.c[0], &r, &li, rows[si], cross ? 90 : rows[si], cross, ATTN_WEIGHTS_NONE);
            b.s[0] = b.c[0].seq;
            char what[64];
            snprintf(what, sizeof what, "shape %d, %d rows, cross %d", si, rows[si], cross);
            threads_equal_one(l, &li, &b, w1, what);
            batch_free(&b);
        }
        attn_layer_free(l);
    }
    attn_workspace_free(w1);
}

/* rows x n_in by n_out x n_in, whole and in column chunks of per: 1 when
 * every bit agrees (an independent check of the library's probe). */
static int chunks_exact(test_rng *r, int rows, int n_in, int n_out, int per)
{
    float *x = rand_floats(r, (size_t)rows * n_in, 1.0f), *w = rand_floats(r, (size_t)n_out * n_in, 1.0f);
    float *whole = calloc((size_t)rows * n_out, sizeof *whole), *split = calloc((size_t)rows * n_out, sizeof *split);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n_out, n_in, 1.0f, x, n_in, w, n_in, 0.0f, whole,
                n_out);
    for (int o0 = 0; o0 < n_out; o0 += per) {
        int nc = n_out - o0 < per ? n_out - o0 : per;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nc, n_in, 1.0f, x, n_in, w + (size_t)o0 * n_in,
                    n_in, 0.0f, split + o0, n_out);
    }
    int same = memcmp(whole, split, (size_t)rows * n_out * sizeof *whole) == 0;
    free(x); free(w); free(whole); free(split);
    return same;
}

/* attn__col_split_exact says whether this OpenBLAS kernel's column chunks
 * round as its whole GEMM (column_chunks splits by columns only then). Its
 * "exact" must hold for the shapes column_chunks splits; asked twice, it
 * answers the same. */
TEST(col_split_probe)
{
    const int exact = attn__col_split_exact();
    CHECK_INT_EQ(attn__col_split_exact(), exact);
    printf("column chunks on OpenBLAS's %s kernel: %s\n", openblas_get_corename(),
           exact ? "exact (few-row projections split by columns)" : "not exact (not split by columns)");
    if (!exact) return;
    test_rng r = {36};
    CHECK(chunks_exact(&r, 128, 512, 512, 64));
    CHECK(chunks_exact(&r, 150, 200, 200, 128));
    CHECK(chunks_exact(&r, 150, 200, 100, 64));
}

/* With OpenBLAS threaded the workspace must not add its own threads. */
TEST(openblas_threaded)
{
    test_rng r = {32};
    layer_shape sh = {4, 16, 16, 64, 64, 64, 64, 1, 1};
    attn_layer *l = make_layer(&r, &sh);
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    batch b;
    batch_init(&b, &r, &li, ATTN_WEIGHTS_NONE, 0);
    attn_workspace *w1 = ws_threads(1), *w2 = ws_threads(2);
    CHECK(w1 != NULL && w2 != NULL);
    float **ref = snapshot(l, &li, &b, w1);
    openblas_set_num_threads(2);
    unsigned long before = attn__pool_runs(w2->pool);
    float **got = snapshot(l, &li, &b, w2);
    CHECK(attn__pool_runs(w2->pool) == before); /* ran on the caller */
    double worst = 0;
    same(ref, got, &li, &b, &worst);
    CHECK(worst <= 1e-6); /* OpenBLAS' own threading may round differently */
    openblas_set_num_threads(1);
    /* tiny calls stay on the caller too */
    seq_case tiny;
    seq_case_init(&tiny, &r, &li, 2, 2, 0, ATTN_WEIGHTS_NONE);
    before = attn__pool_runs(w2->pool);
    CHECK_INT_EQ(attn_forward(l, &tiny.seq, 1, w2, NULL, NULL), ATTN_OK);
    CHECK(attn__pool_runs(w2->pool) == before);
    seq_case_free(&tiny);
    free_snap(ref, b.n);
    free_snap(got, b.n);
    batch_free(&b);
    attn_workspace_free(w1);
    attn_workspace_free(w2);
    attn_layer_free(l);
}

typedef struct racer {
    const attn_layer *l;
    attn_layer_info li;
    unsigned seed;
    int ok;
} racer;

/* Each thread: its own threaded workspace and batch; the result must equal
 * the same batch run single-threaded afterwards. */
static void *race(void *arg)
{
    racer *rc = arg;
    test_rng r = {rc->seed};
    batch b;
    batch_init(&b, &r, &rc->li, ATTN_WEIGHTS_NONE, 1);
    attn_workspace *wn = ws_threads(2), *w1 = ws_threads(1);
    rc->ok = wn != NULL && w1 != NULL;
    for (int rep = 0; rep < 3 && rc->ok; rep++) {
        rc->ok &= attn_forward(rc->l, b.s, b.n, wn, NULL, NULL) == ATTN_OK;
    }
    float **got = NULL, **ref = NULL;
    if (rc->ok) {
        /* snapshot() uses CHECK, which is not thread-safe: copy by hand */
        got = calloc(2 * (size_t)b.n, sizeof *got);
        for (int i = 0; i < b.n; i++) {
            size_t on = (size_t)b.s[i].t * rc->li.embed_out;
            got[2 * i] = malloc(on * sizeof(float));
            memcpy(got[2 * i], b.s[i].output, on * sizeof(float));
        }
        rc->ok &= attn_forward(rc->l, b.s, b.n, w1, NULL, NULL) == ATTN_OK;
        for (int i = 0; i < b.n && rc->ok; i++) {
            size_t on = (size_t)b.s[i].t * rc->li.embed_out;
            rc->ok &= memcmp(got[2 * i], b.s[i].output, on * sizeof(float)) == 0;
        }
        free_snap(got, b.n);
    }
    (void)ref;
    attn_workspace_free(wn);
    attn_workspace_free(w1);
    batch_free(&b);
    return NULL;
}

TEST(concurrent_workspaces)
{
    test_rng r = {33};
    layer_shape sh = {4, 16, 16, 64, 64, 64, 64, 1, 1};
    attn_layer *l = make_layer(&r, &sh);
    enum { N = 3 };
    racer rc[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        rc[i] = (racer){l, {0}, 100u + (unsigned)i, 0};
        attn_layer_get_info(l, &rc[i].li);
        CHECK(pthread_create(&th[i], NULL, race, &rc[i]) == 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(rc[i].ok, "concurrent workspace %d", i);
    }
    attn_layer_free(l);
}

/* The pool itself: every task of every call runs once and its writes are
 * seen when attn__pool_run returns, whether the calls follow each other (the
 * workers catch them while watching), the workers were told to rest
 * (attn__pool_rest) or have gone to sleep between them after their watch. */
static int pool_slot[8];
static void stamp_task(void *arg, int task, int worker)
{
    (void)worker;
    volatile double x = 1.0;
    for (int i = 0; i < (task == 1 ? 20000 : 200); i++) x *= 1.0000001; /* task 1 the longest, by far */
    pool_slot[task] = *(const int *)arg;
}

TEST(pool_tasks_seen)
{
    attn__pool *p = NULL;
    CHECK(attn__pool_create(3, &p, NULL) == ATTN_OK);
    if (p == NULL) return;
    int stale = 0;
    for (int run = 1; run <= 3000; run++) {
        const int n = 1 + run % 8;
        attn__pool_run(p, n, stamp_task, &run);
        for (int t = 0; t < n; t++) stale += pool_slot[t] != run;
        if (run % 7 == 0) attn__pool_rest(p); /* the workers sleep at once: woken by the next run */
        if (run % 500 == 0) { /* now and then a pause: past the workers' watch */
            struct timespec pause = {0, 200000};
            nanosleep(&pause, NULL);
        }
    }
    CHECK_INT_EQ(stale, 0);
    CHECK_INT_EQ((long)attn__pool_runs(p), 3000);
    attn__pool_free(p);
}

/* Creating and freeing pools, used or not, leaks nothing and never hangs. */
TEST(lifecycle)
{
    for (int i = 0; i < 20; i++) {
        attn_workspace *ws = ws_threads(1 + i % 4);
        CHECK(ws != NULL);
        attn_workspace_options o;
        attn_workspace_get_options(ws, &o);
        CHECK_INT_EQ(o.n_threads, 1 + i % 4);
        CHECK((ws->pool != NULL) == (o.n_threads > 1));
        attn_workspace_free(ws);
    }
    attn_workspace *ws = ws_threads(-1);
    CHECK(ws != NULL);
    attn_workspace_options o;
    attn_workspace_get_options(ws, &o);
    CHECK(o.n_threads >= 1);
    attn_workspace_free(ws);
    attn_workspace_free(NULL);
}

int main(void)
{
    openblas_set_num_threads(1); /* what an application using threaded workspaces does */
    RUN(identical);
    RUN(tail_chunks);
    RUN(column_chunks);
    RUN(col_split_probe);
    RUN(openblas_threaded);
    RUN(concurrent_workspaces);
    RUN(pool_tasks_seen);
    RUN(lifecycle);
    return check_summary();
}
