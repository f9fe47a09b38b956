/* bench_json.c — cost of the JSON edge for a T×E float request/response: the
 * shortest float printer vs snprintf("%.9g"), response encoding, and request
 * parsing (full decode on the fast path and on the jansson path, jansson's
 * parse alone, and a bare strtof loop over the same text as the floor), in
 * ns/float and MB/s of JSON text.
 * Each of the 16 measurements runs for BENCH_SECONDS/2 (BENCH_SECONDS defaults
 * to 1.0), so the whole run takes about 8 x BENCH_SECONDS.
 */
#include "benchutil.h"
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/codec.h"
#include "protocol/jsonnum.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double bench_seconds(void)
{
    const char *s = getenv("BENCH_SECONDS");
    double v = s ? atof(s) : 1.0;
    return (v > 0 ? v : 1.0) / 2;
}

/* Activations-like values: full-precision floats, mostly in ±[0.01, 4). */
static float *make_floats(size_t n)
{
    float *x = malloc(n * sizeof *x);
    uint64_t st = 0x2545F4914F6CDD1Du;
    for (size_t i = 0; x && i < n; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        uint32_t bits = (uint32_t)(st >> 32);
        bits = (bits & 0x80000000u) | ((120u + (bits >> 23) % 9u) << 23) | (bits & 0x7fffffu);
        memcpy(&x[i], &bits, sizeof x[i]);
    }
    return x;
}

/* {"query":[[...],...]} with each float written by our printer (digits17 = 0)
 * or as %.17g of its double value (what numpy .tolist() + json.dumps sends). */
static char *make_body(const float *x, int t, int e, int digits17, size_t *len)
{
    size_t cap = (size_t)t * (size_t)e * 26 + 64, n = 0;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    n += (size_t)sprintf(s, "{\"query\":[");
    for (int r = 0; r < t; r++) {
        s[n++] = r ? ',' : '\n', s[n++] = '[';
        for (int c = 0; c < e; c++) {
            float v = x[(size_t)r * (size_t)e + (size_t)c];
            if (c)
                s[n++] = ',';
            n += digits17 ? (size_t)sprintf(s + n, "%.17g", (double)v)
                          : (size_t)attnd_json_print_float(v, s + n);
        }
        s[n++] = ']';
    }
    n += (size_t)sprintf(s + n, "]}");
    *len = n;
    return s;
}

/* Runs fn(ctx) until BENCH_SECONDS have passed (at least twice); returns the
 * mean seconds per call. */
static double timeit(void (*fn)(void *), void *ctx)
{
    double budget = bench_seconds(), t0, t;
    long iters = 0;
    fn(ctx); /* warm-up */
    t0 = now_s();
    do {
        fn(ctx);
        iters++;
        t = now_s();
    } while (t - t0 < budget || iters < 2);
    return (t - t0) / (double)iters;
}

typedef struct job {
    const float *x;
    size_t n;
    char *out;
    const char *body;
    size_t body_len;
    const attn_layer_info *info;
    attnd_request *req;
    size_t sink;
} job;

static void run_print_ours(void *p)
{
    job *j = p;
    char *o = j->out;
    for (size_t i = 0; i < j->n; i++) {
        o += attnd_json_print_float(j->x[i], o);
        *o++ = ',';
    }
    j->sink += (size_t)(o - j->out);
}

static void run_print_snprintf(void *p)
{
    job *j = p;
    char *o = j->out;
    for (size_t i = 0; i < j->n; i++) {
        o += snprintf(o, 32, "%.9g", (double)j->x[i]);
        *o++ = ',';
    }
    j->sink += (size_t)(o - j->out);
}

static void run_encode(void *p)
{
    job *j = p;
    size_t len = 0;
    char *b = attnd_codec_encode_response(j->req, "demo", &len);
    j->sink += len;
    free(b);
}

/* The floor: strtof over the numbers of the body, no structure, no objects. */
static void run_strtof(void *p)
{
    job *j = p;
    const char *s = j->body, *end = j->body + j->body_len;
    float acc = 0;
    while (s < end) {
        if ((*s >= '0' && *s <= '9') || *s == '-') {
            char *e;
            acc += strtof(s, &e);
            s = e;
        } else {
            s++;
        }
    }
    j->sink += (size_t)(acc != 0);
}

static void run_jansson(void *p)
{
    job *j = p;
    json_t *root = json_loadb(j->body, j->body_len, JSON_REJECT_DUPLICATES, NULL);
    j->sink += root != NULL;
    json_decref(root);
}

static void run_decode(void *p)
{
    job *j = p;
    attnd_request *r = NULL;
    attnd_http_error err;
    if (attnd_codec_decode_request(j->body, j->body_len, j->info, NULL, &r, &err) == 0)
        j->sink += r->n_tokens;
    else
        fprintf(stderr, "decode failed: %s\n", err.message);
    attnd_request_free(r);
}

static void report(const char *what, double sec, size_t n_floats, size_t text_bytes)
{
    printf("  %-34s %8.1f ns/float %9.1f MB/s\n", what, 1e9 * sec / (double)n_floats,
           (double)text_bytes / sec / 1e6);
}

static int bench_shape(int t, int e)
{
    size_t n = (size_t)t * (size_t)e, len = 0, len17 = 0;
    attn_layer_info info = {.num_heads = 8, .head_dim_k = e / 8, .head_dim_v = e / 8,
                            .embed_q = e, .embed_k = e, .embed_v = e, .embed_out = e};
    float *x = make_floats(n);
    char *body = x ? make_body(x, t, e, 0, &len) : NULL;
    char *body17 = x ? make_body(x, t, e, 1, &len17) : NULL;
    char *out = malloc(n * 32);
    job j = {.x = x, .n = n, .out = out, .body = body, .body_len = len, .info = &info};
    attnd_http_error err;
    if (!x || !body || !body17 || !out ||
        attnd_codec_decode_request(body, len, &info, NULL, &j.req, &err) != 0) {
        fprintf(stderr, "bench_json: setup failed\n");
        free(x), free(body), free(body17), free(out);
        return -1;
    }
    memcpy(j.req->seqs[0].output, x, n * sizeof *x); /* the response carries T×E floats */

    printf("T=%d E=%d (%zu floats; request %.2f MB shortest, %.2f MB as %%.17g)\n", t, e, n,
           (double)len / 1e6, (double)len17 / 1e6);
    double s_ours = timeit(run_print_ours, &j);
    j.sink = 0;
    run_print_ours(&j);
    size_t ours_bytes = j.sink;
    double s_snp = timeit(run_print_snprintf, &j);
    j.sink = 0;
    run_print_snprintf(&j);
    size_t snp_bytes = j.sink;
    report("print: attnd_json_print_float", s_ours, n, ours_bytes);
    report("print: snprintf %.9g", s_snp, n, snp_bytes);
    printf("  %-34s %8.2fx faster, text %.1f%% shorter\n", "print: ratio", s_snp / s_ours,
           100.0 * (1.0 - (double)ours_bytes / (double)snp_bytes));
    size_t resp_len = 0;
    char *resp = attnd_codec_encode_response(j.req, "demo", &resp_len);
    free(resp);
    report("encode response (T×E output)", timeit(run_encode, &j), n, resp_len);

    double s_floor = timeit(run_strtof, &j), s_jan = timeit(run_jansson, &j);
    double s_dec = timeit(run_decode, &j);
    report("parse floor: strtof loop", s_floor, n, len);
    report("parse: json_loadb alone", s_jan, n, len);
    report("decode request (fast path)", s_dec, n, len);
    printf("  %-34s %8.2fx the strtof floor (jansson alone %.2fx)\n", "decode: ratio",
           s_dec / s_floor, s_jan / s_floor);
    /* The same body with the member name escaped ("\u0071uery" is "query"):
     * the fast scanner compares raw bytes, so this measures the general
     * (jansson) path on the same numbers. */
    size_t len_slow = len + 5;
    char *body_slow = malloc(len_slow);
    if (body_slow) {
        memcpy(body_slow, "{\"\\u0071", 8);
        memcpy(body_slow + 8, body + 3, len - 3);
        j.body = body_slow, j.body_len = len_slow;
        report("decode, jansson path (no fast)", timeit(run_decode, &j), n, len_slow);
        free(body_slow);
    }
    j.body = body17, j.body_len = len17;
    report("decode request, %.17g text", timeit(run_decode, &j), n, len17);
    report("parse floor, %.17g text", timeit(run_strtof, &j), n, len17);

    attnd_request_free(j.req);
    free(x), free(body), free(body17), free(out);
    return 0;
}

int main(void)
{
    bench_start("bench_json");
    printf("bench_json: one thread; %.2f s per measurement\n", bench_seconds());
    if (bench_shape(128, 256) || bench_shape(512, 512))
        return 1;
    return 0;
}
