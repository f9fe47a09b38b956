/* core_util.h — helpers for the library core's unit tests: a seeded RNG, random
 * layers, and one attn_seq together with the buffers it points to.
 * Header-only (static inline) so each test binary stays one file.
 */
#ifndef ATTN_TEST_CORE_UTIL_H
#define ATTN_TEST_CORE_UTIL_H

#include "attn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: reproducible across platforms, seeded per test. */
typedef struct test_rng { uint64_t s; } test_rng;

static inline uint64_t rng_next(test_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline float rng_float(test_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(rng_next(r) >> 40) / (double)(1ull << 24));
}

/* Uniform integer in [lo, hi]. */
static inline int rng_int(test_rng *r, int lo, int hi)
{
    return lo + (int)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* n floats uniform in [-scale, scale); caller frees; NULL on allocation failure. */
static inline float *rand_floats(test_rng *r, size_t n, float scale)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; p && i < n; i++) p[i] = rng_float(r, -scale, scale);
    return p;
}

typedef struct layer_shape {
    int h, d_k, d_v, e_q, e_k, e_v, e_out;
    int bias;     /* biases on Q, K, V (and O when out_proj) */
    int out_proj; /* has W_O */
} layer_shape;

/* Random layer with torch-like init (uniform ±1/sqrt(fan_in)); biases ±0.1.
 * Returns NULL if attn_layer_create fails. */
static inline attn_layer *make_layer(test_rng *r, const layer_shape *s)
{
    size_t qk = (size_t)s->h * s->d_k, v = (size_t)s->h * s->d_v;
    float *w_q = rand_floats(r, qk * s->e_q, 1.0f / sqrtf((float)s->e_q));
    float *w_k = rand_floats(r, qk * s->e_k, 1.0f / sqrtf((float)s->e_k));
    float *w_v = rand_floats(r, v * s->e_v, 1.0f / sqrtf((float)s->e_v));
    float *w_o = s->out_proj ? rand_floats(r, (size_t)s->e_out * v, 1.0f / sqrtf((float)v)) : NULL;
    float *b_q = s->bias ? rand_floats(r, qk, 0.1f) : NULL;
    float *b_k = s->bias ? rand_floats(r, qk, 0.1f) : NULL;
    float *b_v = s->bias ? rand_floats(r, v, 0.1f) : NULL;
    float *b_o = s->bias && s->out_proj ? rand_floats(r, (size_t)s->e_out, 0.1f) : NULL;
    attn_layer_desc d = {s->h, s->d_k, s->d_v, s->e_q, s->e_k, s->e_v, s->e_out,
                         w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, 0, {0}, 0};
    attn_layer *l = NULL;
    if (attn_layer_create(&d, &l, NULL) != ATTN_OK) l = NULL;
    free(w_q); free(w_k); free(w_v); free(w_o);
    free(b_q); free(b_k); free(b_v); free(b_o);
    return l;
}

/* One sequence and the buffers it owns. */
/* A grouped-query layer with random weights: h query heads sharing g KV heads,
 * optional biases, W_O and RoPE (test_gqa_rope, test_kvpaged). */
typedef struct gqa_shape {
    int h, g, d_k, d_v, e, e_out;
    int bias, out_proj;
    attn_rope rope;
} gqa_shape;

/* Random weights for shape sh (K/V g heads wide); desc points into *buf
 * (caller frees). */
static inline attn_layer_desc gqa_desc(test_rng *r, const gqa_shape *sh, float **buf)
{
    const size_t qk = (size_t)sh->h * sh->d_k, kk = (size_t)sh->g * sh->d_k, kv = (size_t)sh->g * sh->d_v;
    const size_t vd = (size_t)sh->h * sh->d_v, e = (size_t)sh->e, eo = (size_t)sh->e_out;
    const size_t n = qk * e + kk * e + kv * e + eo * vd + qk + kk + kv + eo;
    float *p = malloc(n * sizeof(float));
    const float sw = 1.0f / sqrtf((float)sh->e);
    for (size_t i = 0; i < n; i++) p[i] = rng_float(r, -sw, sw);
    *buf = p;
    attn_layer_desc d = {.num_heads = sh->h, .head_dim_k = sh->d_k, .head_dim_v = sh->d_v,
                         .embed_q = sh->e, .embed_k = sh->e, .embed_v = sh->e,
                         .embed_out = sh->e_out, .num_kv_heads = sh->g, .rope = sh->rope};
    d.w_q = p;
    d.w_k = d.w_q + qk * e;
    d.w_v = d.w_k + kk * e;
    d.w_o = sh->out_proj ? d.w_v + kv * e : NULL;
    const float *b = d.w_v + kv * e + eo * vd;
    if (sh->bias) {
        d.b_q = b;
        d.b_k = b + qk;
        d.b_v = b + qk + kk;
        d.b_o = sh->out_proj ? b + qk + kk + kv : NULL;
    }
    return d;
}

static inline attn_layer *gqa_layer(test_rng *r, const gqa_shape *sh)
{
    float *buf = NULL;
    attn_layer_desc d = gqa_desc(r, sh, &buf);
    attn_layer *l = NULL;
    attn_error err = {0};
    attn_status st = attn_layer_create(&d, &l, &err);
    CHECK_MSG(st == ATTN_OK, "create h=%d g=%d d_k=%d: %s", sh->h, sh->g, sh->d_k, err.message);
    free(buf);
    return l;
}

typedef struct seq_case {
    attn_seq seq;
    float *query, *key, *value, *output, *weights, *fmask;
    uint8_t *kpm, *bmask;
} seq_case;

/* Allocates inputs (uniform ±1) and outputs (filled with 12345) for a sequence
 * of t queries and s keys; cross = 0 means self-attention (s must equal t).
 * Masks are left off; weights per weights_mode. */
static inline void seq_case_init(seq_case *c, test_rng *r, const attn_layer_info *li, int t, int s,
                                 int cross, attn_weights_mode wm)
{
    memset(c, 0, sizeof *c);
    c->query = rand_floats(r, (size_t)t * li->embed_q, 1.0f);
    if (cross) {
        c->key = rand_floats(r, (size_t)s * li->embed_k, 1.0f);
        c->value = rand_floats(r, (size_t)s * li->embed_v, 1.0f);
    }
    size_t out_n = (size_t)t * li->embed_out;
    c->output = malloc(out_n * sizeof(float));
    for (size_t i = 0; c->output && i < out_n; i++) c->output[i] = 12345.0f;
    if (wm != ATTN_WEIGHTS_NONE) {
        size_t wn = (size_t)t * s * (wm == ATTN_WEIGHTS_PER_HEAD ? li->num_heads : 1);
        c->weights = malloc(wn * sizeof(float));
        for (size_t i = 0; c->weights && i < wn; i++) c->weights[i] = 12345.0f;
    }
    c->seq.t = t;
    c->seq.s = s;
    c->seq.query = c->query;
    c->seq.key = c->key;
    c->seq.value = c->value;
    c->seq.output = c->output;
    c->seq.weights_mode = wm;
    c->seq.weights = c->weights;
}

static inline void seq_case_free(seq_case *c)
{
    free(c->query); free(c->key); free(c->value); free(c->output);
    free(c->weights); free(c->fmask); free(c->kpm); free(c->bmask);
    memset(c, 0, sizeof *c);
}

/* Largest |a[i] - b[i]|; +inf if either holds a NaN. */
static inline double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}

static inline double max_abs(const float *a, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)a[i]) > m) m = fabs((double)a[i]);
    return m;
}

/* max |a - ref| relative to max(1, max |ref|): the error measure of the KV
 * cache tests. */
static inline double rel_err(const float *a, const float *ref, size_t n)
{
    double s = max_abs(ref, n);
    return max_abs_diff(a, ref, n) / (s > 1.0 ? s : 1.0);
}

static inline void keep_max(double *m, double d)
{
    if (d > *m) *m = d;
}

/* A workspace with these options (the rest default); NULL after a failed CHECK. */
static inline attn_workspace *test_ws(attn_kernel k, int threads, int bk)
{
    attn_workspace_options o = {.n_threads = threads, .kernel = k, .block_k = bk};
    attn_workspace *ws = NULL;
    CHECK_INT_EQ(attn_workspace_create(&o, &ws, NULL), ATTN_OK);
    return ws;
}

#endif /* ATTN_TEST_CORE_UTIL_H */
