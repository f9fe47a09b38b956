/* benchutil.c — the clock, PRNG, model-file writers, forward timer, read
 * bandwidth probe, environment header, sgemm probe and target lines the
 * benchmarks share (see benchutil.h). */
#include "benchutil.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* One F32 tensor of a safetensors file: rows x cols (cols 0: a vector of rows),
 * values uniform in [-bound, bound). */
typedef struct st_tensor {
    const char *name;
    int rows, cols;
    float bound;
} st_tensor;

/* Writes a safetensors file of n F32 tensors (metadata: a JSON object body
 * such as "\"num_heads\":\"8\"", or ""), values from *rng. 0 or -1. */
static int write_safetensors(const char *path, const char *metadata, const st_tensor *t, int n,
                             uint64_t *rng)
{
    char header[2048], shape[48];
    int len = snprintf(header, sizeof header, "{\"__metadata__\":{%s}", metadata);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const size_t count = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1);
        if (t[i].cols) snprintf(shape, sizeof shape, "[%d,%d]", t[i].rows, t[i].cols);
        else snprintf(shape, sizeof shape, "[%d]", t[i].rows);
        len += snprintf(header + len, sizeof header - (size_t)len,
                        ",\"%s\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                        t[i].name, shape, off, off + count * 4);
        off += count * 4;
    }
    len += snprintf(header + len, sizeof header - (size_t)len, "}");
    while (len % 8)
        header[len++] = ' '; /* data starts 8-byte aligned */

    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    uint64_t hlen = (uint64_t)len; /* little-endian on every machine we target */
    int ok = fwrite(&hlen, 8, 1, f) == 1 && fwrite(header, 1, (size_t)len, f) == (size_t)len;
    for (int i = 0; i < n && ok; i++) {
        const size_t count = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1);
        for (size_t k = 0; k < count && ok; k++) {
            float v = (float)bench_rng_sym(rng) * t[i].bound;
            ok = fwrite(&v, 4, 1, f) == 1;
        }
    }
    return fclose(f) == 0 && ok ? 0 : -1;
}

int bench_write_mha_model(const char *path, int e, int heads, uint64_t *rng)
{
    const st_tensor t[4] = {
        {"in_proj_weight", 3 * e, e, sqrtf(6.0f / (4.0f * e))},
        {"in_proj_bias", 3 * e, 0, 0.05f},
        {"out_proj.weight", e, e, 1.0f / sqrtf((float)e)},
        {"out_proj.bias", e, 0, 0.05f},
    };
    char meta[48];
    snprintf(meta, sizeof meta, "\"num_heads\":\"%d\"", heads);
    return write_safetensors(path, meta, t, 4, rng);
}

int bench_write_llama_layer(const char *dir, int e, int h, int g, int d, uint64_t *rng)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
               "\"hidden_size\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
               "\"head_dim\": %d, \"num_hidden_layers\": 1, \"rope_theta\": 500000.0, "
               "\"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-05, "
               "\"torch_dtype\": \"float32\"}\n", e, h, g, d);
    if (fclose(f) != 0) return -1;
    const float in = 1.0f / sqrtf((float)e), out = 1.0f / sqrtf((float)(h * d));
    const st_tensor t[4] = {
        {"model.layers.0.self_attn.q_proj.weight", h * d, e, in},
        {"model.layers.0.self_attn.k_proj.weight", g * d, e, in},
        {"model.layers.0.self_attn.v_proj.weight", g * d, e, in},
        {"model.layers.0.self_attn.o_proj.weight", e, h * d, out},
    };
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return write_safetensors(path, "\"format\":\"pt\"", t, 4, rng);
}

/* The streaming sum. A scalar loop (even with 16 sums, which GCC's -O2
 * turns into SSE) is bound by its loads and adds, not by memory, on a CPU
 * whose memory outruns 16-byte loads: on the 2-core Zen 5 of round 3's last
 * session it read 43 GB/s where eight zmm sums read 80. So the sum runs with
 * the widest vectors CPUID offers, eight independent accumulators. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SUM_WIDE(NAME, TARGET, VEC, LANES, ZERO, LOAD, ADD, STORE)                                          \
    __attribute__((target(TARGET))) static float NAME(const float *p, size_t n)                             \
    {                                                                                                      \
        VEC a0 = ZERO(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;                     \
        size_t i = 0;                                                                                      \
        for (; i + 8 * (LANES) <= n; i += 8 * (LANES)) {                                                   \
            a0 = ADD(a0, LOAD(p + i)), a1 = ADD(a1, LOAD(p + i + (LANES)));                                \
            a2 = ADD(a2, LOAD(p + i + 2 * (LANES))), a3 = ADD(a3, LOAD(p + i + 3 * (LANES)));              \
            a4 = ADD(a4, LOAD(p + i + 4 * (LANES))), a5 = ADD(a5, LOAD(p + i + 5 * (LANES)));              \
            a6 = ADD(a6, LOAD(p + i + 6 * (LANES))), a7 = ADD(a7, LOAD(p + i + 7 * (LANES)));              \
        }                                                                                                  \
        a0 = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));                            \
        float lanes[LANES], t = 0;                                                                         \
        STORE(lanes, a0);                                                                                  \
        for (int j = 0; j < (LANES); j++) t += lanes[j];                                                   \
        for (; i < n; i++) t += p[i];                                                                      \
        return t;                                                                                          \
    }
SUM_WIDE(sum_avx512, "avx512f", __m512, 16, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_add_ps, _mm512_storeu_ps)
SUM_WIDE(sum_avx2, "avx2", __m256, 8, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_add_ps, _mm256_storeu_ps)
#endif

#if defined(__x86_64__) && defined(__GNUC__)
/* FMAs on ten independent chains of registers only (no memory): the
 * compute roof of one core in this ISA. 2 FLOPs a lane an FMA. */
#define FMA_LOOP(NAME, TARGET, VEC, LANES, SET1, FMA, ADD, STORE)                                             \
    __attribute__((target(TARGET))) static double NAME(long iters)                                          \
    {                                                                                                      \
        const VEC m = SET1(0.999999f), c = SET1(1e-7f);                                                    \
        VEC a0 = SET1(1.0f), a1 = SET1(1.1f), a2 = SET1(1.2f), a3 = SET1(1.3f), a4 = SET1(1.4f);          \
        VEC a5 = SET1(1.5f), a6 = SET1(1.6f), a7 = SET1(1.7f), a8 = SET1(1.8f), a9 = SET1(1.9f);          \
        for (long i = 0; i < iters; i++) {                                                                 \
            a0 = FMA(a0, m, c), a1 = FMA(a1, m, c), a2 = FMA(a2, m, c), a3 = FMA(a3, m, c);                \
            a4 = FMA(a4, m, c), a5 = FMA(a5, m, c), a6 = FMA(a6, m, c), a7 = FMA(a7, m, c);                \
            a8 = FMA(a8, m, c), a9 = FMA(a9, m, c);                                                        \
            __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4));                       \
        }                                                                                                  \
        a0 = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(ADD(a6, a7), ADD(a8, a9))));        \
        float lanes[LANES];                                                                                \
        STORE(lanes, a0);                                                                                  \
        return (double)lanes[0];                                                                           \
    }
FMA_LOOP(fma_avx512, "avx512f", __m512, 16, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps)
FMA_LOOP(fma_avx2, "avx2,fma", __m256, 8, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps)
#endif

typedef struct fma_arg {
    long iters;
    int lanes;
    double sink;
} fma_arg;

static void *fma_thread(void *arg)
{
    fma_arg *a = arg;
#if defined(__x86_64__) && defined(__GNUC__)
    a->sink = a->lanes == 16 ? fma_avx512(a->iters) : fma_avx2(a->iters);
#endif
    return NULL;
}

double bench_fma_peak_gflops(int threads, const char **kind)
{
    enum { MAX_THREADS = 64 };
    int lanes = 0;
    *kind = "no vector FMA";
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f")) lanes = 16, *kind = "zmm FMAs (AVX-512F)";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) lanes = 8, *kind = "ymm FMAs (AVX2)";
#endif
    if (lanes == 0) return -1;
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    const long iters = 20L * 1000 * 1000; /* 10 FMAs each: ~50 ms a thread at 4 GHz */
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        fma_arg a[MAX_THREADS];
        pthread_t th[MAX_THREADS];
        int started[MAX_THREADS] = {0};
        const int64_t t0 = bench_now_ns();
        for (int i = 0; i < threads; i++) {
            a[i] = (fma_arg){iters, lanes, 0};
            if (i > 0) started[i] = pthread_create(&th[i], NULL, fma_thread, &a[i]) == 0;
        }
        fma_thread(&a[0]);
        for (int i = 1; i < threads; i++)
            if (started[i]) pthread_join(th[i], NULL);
            else fma_thread(&a[i]);
        const double s = (double)(bench_now_ns() - t0) * 1e-9;
        double sink = 0;
        for (int i = 0; i < threads; i++) sink += a[i].sink;
        if (sink < -1) printf("?"); /* keep the chains live */
        const double gflops = 2.0 * 10 * lanes * (double)iters * threads / s * 1e-9;
        if (gflops > best) best = gflops;
    }
    return best;
}

static float sum_portable(const float *p, size_t n)
{
    float s[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) s[j] += p[i + j];
    float t = 0;
    for (int j = 0; j < 16; j++) t += s[j];
    for (; i < n; i++) t += p[i];
    return t;
}

/* The widest sum this CPU runs, and its name for the headers. */
typedef float (*sum_fn)(const float *p, size_t n);

static sum_fn stream_sum_of_cpu(const char **kind)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f")) {
        *kind = "8 zmm sums";
        return sum_avx512;
    }
    if (__builtin_cpu_supports("avx2")) {
        *kind = "8 ymm sums";
        return sum_avx2;
    }
#endif
    *kind = "16 scalar sums";
    return sum_portable;
}

const char *bench_stream_kind(void)
{
    const char *kind;
    stream_sum_of_cpu(&kind);
    return kind;
}

static float stream_sum(const float *p, size_t n)
{
    const char *kind;
    return stream_sum_of_cpu(&kind)(p, n);
}

typedef struct sum_arg {
    const float *p;
    size_t n;
    float sum;
} sum_arg;

static void *sum_thread(void *arg)
{
    sum_arg *a = arg;
    a->sum = stream_sum(a->p, a->n);
    return NULL;
}

double bench_stream_sum(const float *p, size_t n, int threads, int reps)
{
    enum { MAX_THREADS = 64 };
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    double best = 0;
    for (int rep = 0; rep < reps; rep++) {
        sum_arg a[MAX_THREADS];
        pthread_t th[MAX_THREADS];
        int started[MAX_THREADS] = {0};
        const size_t share = n / (size_t)threads;
        const int64_t t0 = bench_now_ns();
        for (int i = 0; i < threads; i++) {
            a[i] = (sum_arg){p + (size_t)i * share, share, 0};
            if (i > 0) started[i] = pthread_create(&th[i], NULL, sum_thread, &a[i]) == 0;
        }
        sum_thread(&a[0]);
        for (int i = 1; i < threads; i++)
            if (started[i]) pthread_join(th[i], NULL);
            else sum_thread(&a[i]);
        const double s = (double)(bench_now_ns() - t0) * 1e-9;
        float total = 0;
        for (int i = 0; i < threads; i++) total += a[i].sum;
        if (total < 0) printf("?"); /* keep the sums live */
        const double bytes = (double)(share * (size_t)threads) * sizeof *p;
        if (bytes / s > best) best = bytes / s;
    }
    return best;
}

double bench_read_bandwidth(int threads)
{
    const size_t n = (size_t)1 << 28;
    float *p = malloc(n * sizeof *p);
    if (p == NULL) return -1;
    for (size_t i = 0; i < n; i++) p[i] = (float)(i & 7);
    const double best = bench_stream_sum(p, n, threads, 5);
    free(p);
    return best;
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

/* ------------------------------------------------------------ environment header */

char *openblas_get_corename(void); /* OpenBLAS extensions, not in every cblas.h */
char *openblas_get_config(void);

#define SGEMM_PROBE_ENV "ATTND_BENCH_SGEMM_PROBE"
#define SGEMM_PROBE_N 1024

double bench_sgemm_gflops(int n, int threads)
{
    const size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    double best = -1;
    if (a && b && c) {
        uint64_t rng = 0x2545f4914f6cdd1dULL;
        for (size_t i = 0; i < nn; i++) {
            a[i] = (float)bench_rng_sym(&rng);
            b[i] = (float)bench_rng_sym(&rng);
        }
        const int saved = openblas_get_num_threads();
        openblas_set_num_threads(threads);
        for (int r = 0; r < 4; r++) { /* run 0 warms up */
            const int64_t t0 = bench_now_ns();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f,
                        c, n);
            const double s = (double)(bench_now_ns() - t0) * 1e-9;
            const double gf = 2.0 * (double)nn * (double)n / s * 1e-9;
            if (r > 0 && gf > best)
                best = gf;
        }
        openblas_set_num_threads(saved);
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* Does /proc/cpuinfo list avx512f? 1 yes, 0 no, -1 unreadable. */
static int cpu_has_avx512f(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return -1;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strncmp(line, "flags", 5) == 0 && strstr(line, " avx512f") != NULL;
    fclose(f);
    return found;
}

/* Runs this program again with OPENBLAS_CORETYPE=SkylakeX and the probe variable set;
 * returns its "SGEMM x" figure, or -1 with *why saying what went wrong. */
static double skylakex_sgemm(char *why, size_t why_len)
{
    int pfd[2];
    if (pipe(pfd) != 0) {
        snprintf(why, why_len, "pipe: %s", strerror(errno));
        return -1;
    }
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
        setenv(SGEMM_PROBE_ENV, "1", 1);
        execl("/proc/self/exe", "bench-sgemm-probe", (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    char out[128] = "";
    size_t n = 0;
    ssize_t r;
    while (pid > 0 && n < sizeof out - 1 && (r = read(pfd[0], out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = 0;
    close(pfd[0]);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) {
        snprintf(why, why_len, "could not run the probe child");
        return -1;
    }
    double gf = -1;
    if (WIFSIGNALED(st))
        snprintf(why, why_len, "the SkylakeX child died of signal %d (%s)", WTERMSIG(st),
                 strsignal(WTERMSIG(st)));
    else if (sscanf(out, "SGEMM %lf", &gf) != 1 || !(gf > 0))
        snprintf(why, why_len, "the SkylakeX child printed no figure (exit %d)",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return gf;
}

static void print_avx512_line(void)
{
    const double here = bench_sgemm_gflops(SGEMM_PROBE_N, 1);
    char why[160] = "";
    const double avx512 = skylakex_sgemm(why, sizeof why);
    printf("sgemm %dx%dx%d, 1 thread: %.1f GFLOP/s with the %s kernel; ", SGEMM_PROBE_N,
           SGEMM_PROBE_N, SGEMM_PROBE_N, here, openblas_get_corename());
    if (avx512 > 0) {
        printf("AVX-512 (OPENBLAS_CORETYPE=SkylakeX, measured in a child): %.1f GFLOP/s = %.2fx\n",
               avx512, avx512 / here);
        return;
    }
    const int flag = cpu_has_avx512f();
    printf("AVX-512 ratio NOT measured: %s; /proc/cpuinfo %s avx512f%s\n", why,
           flag == 1 ? "lists" : flag == 0 ? "does not list" : "(unreadable) for",
           flag == 0 ? " (this CPU runs no AVX-512 kernel)" : "");
}

double bench_loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

void bench_start(const char *bench_name)
{
    if (getenv(SGEMM_PROBE_ENV)) {
        printf("SGEMM %.3f\n", bench_sgemm_gflops(SGEMM_PROBE_N, 1));
        exit(0);
    }
    const char *coretype = getenv("OPENBLAS_CORETYPE"), *threads = getenv("OPENBLAS_NUM_THREADS");
    char load[64] = "unreadable";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(load, sizeof load, f))
            snprintf(load, sizeof load, "unreadable");
        load[strcspn(load, "\n")] = 0;
        fclose(f);
    }
    printf("[%s] OpenBLAS kernel %s (%s); OPENBLAS_CORETYPE=%s; OPENBLAS_NUM_THREADS=%s; "
           "load average %s; %ld CPUs\n",
           bench_name, openblas_get_corename(), openblas_get_config(),
           coretype ? coretype : "unset", threads ? threads : "unset", load,
           sysconf(_SC_NPROCESSORS_ONLN));
    print_avx512_line();
    fflush(stdout);
}

/* ------------------------------------------------------------ targets */

void bench_target(const char *target, const char *measured, int met)
{
    const char *verdict = met > 0 ? "met" : met == 0 ? "NOT met" : "not measured";
    printf("TARGET  %s | %s | %s\n", target, measured, verdict);
    fflush(stdout);
    const char *path = getenv("BENCH_TARGETS");
    FILE *f = path && *path ? fopen(path, "a") : NULL;
    if (f) {
        fprintf(f, "%s\t%s\t%s\n", target, measured, verdict);
        fclose(f);
    }
}
