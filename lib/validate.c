/* validate.c — argument, shape, finiteness and overflow checks for a forward
 * call (see validate.h). Runs before any output is touched.
 */
#include "validate.h"

#include "kvcache.h"
#include "rope.h"

#include <float.h>
#include <limits.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <math.h>
#include <stdbool.h>
#include <stdio.h>

/* Results must stay below this; the slack covers rounding in long sums. */
#define MAGNITUDE_LIMIT ((double)FLT_MAX / 4.0)

static bool is_self(const attn_seq *s) { return s->key == NULL && s->value == NULL; }

/* Keys come from the query: ordinary self-attention or a cache being appended to. */
static bool keys_from_query(const attn_seq *s)
{
    return is_self(s) && (s->cache_k == NULL || s->cache_append);
}

/* The KV-cache fields: both caches or neither, no key/value beside them, a
 * valid mode, and nothing cache-like set when there is no cache. */
static attn_status check_cache_pointers(const attn_seq *s, int i, attn_error *err)
{
    if (s->cache_k == NULL && s->cache_v == NULL) {
        if (s->cache_len != 0 || s->cache_append != 0)
            return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                                   "seqs[%d]: cache_len = %d / cache_append = %d set but cache_k is NULL",
                                   i, s->cache_len, s->cache_append);
        if (s->cache_block_rows != 0 || s->cache_block_table != NULL || s->cache_dtype != 0 ||
            s->cache_block_stride != 0)
            return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                                   "seqs[%d]: cache_block_rows / cache_block_table / cache_dtype / cache_block_stride set but "
                                   "cache_k is NULL", i);
        return ATTN_OK;
    }
    if (s->cache_k == NULL || s->cache_v == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "seqs[%d].%s is NULL but %s is set", i,
                               s->cache_k ? "cache_v" : "cache_k", s->cache_k ? "cache_k" : "cache_v");
    if (s->key != NULL || s->value != NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "seqs[%d]: key and value must be NULL when cache_k is set", i);
    if (s->cache_append != 0 && s->cache_append != 1)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "seqs[%d].cache_append = %d, must be 0 or 1",
                               i, s->cache_append);
    if (s->cache_dtype < ATTN_KV_F32 || s->cache_dtype > ATTN_KV_INT8)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "seqs[%d].cache_dtype = %d is not a known attn_kv_dtype", i, s->cache_dtype);
    const int b = s->cache_block_rows;
    if (b < 0 || b > 65536 || (b & (b - 1)) != 0)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "seqs[%d].cache_block_rows = %d, must be 0 (contiguous) or a power of two "
                               "in [1, 65536]", i, b);
    if (b > 0 && s->cache_block_table == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "seqs[%d].cache_block_table is NULL but cache_block_rows = %d", i, b);
    if (b == 0 && s->cache_block_table != NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "seqs[%d].cache_block_table is set but cache_block_rows = 0 (contiguous)", i);
    if (b == 0 && s->cache_dtype == ATTN_KV_INT8)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "seqs[%d].cache_dtype = INT8 needs a paged cache (cache_block_rows > 0)", i);
    return ATTN_OK;
}

/* A paged cache's table: ceil(s / block_rows) entries, each >= 0, each
 * block's bytes addressable. (Shape already checked.) */
static attn_status check_block_table(const attn_layer *l, const attn_seq *s, int i, attn_error *err)
{
    if (s->cache_k == NULL || s->cache_block_rows == 0) return ATTN_OK;
    size_t kb, vb, end;
    if (!attn__kv_sizes(l, s->cache_dtype, s->cache_block_rows, &kb, &vb))
        return attn__set_error(err, ATTN_ERR_LIMIT, "seqs[%d]: a block of %d rows overflows", i,
                               s->cache_block_rows);
    char name[48];
    snprintf(name, sizeof name, "seqs[%d].cache_block_stride", i);
    attn_status st = attn__kv_check_stride(l, s->cache_dtype, s->cache_block_rows, s->cache_block_stride, name, err);
    if (st != ATTN_OK) return st;
    if (s->cache_block_stride > 0) kb = vb = s->cache_block_stride;
    const int n = (s->s + s->cache_block_rows - 1) / s->cache_block_rows;
    for (int b = 0; b < n; b++) {
        const int32_t e = s->cache_block_table[b];
        if (e < 0)
            return attn__set_error(err, ATTN_ERR_INVALID_ARG, "seqs[%d].cache_block_table[%d] = %d, must be >= 0",
                                   i, b, (int)e);
        if (!attn__mul_size((size_t)e + 1, kb > vb ? kb : vb, &end))
            return attn__set_error(err, ATTN_ERR_LIMIT, "seqs[%d].cache_block_table[%d] = %d: offset overflows",
                                   i, b, (int)e);
    }
    return ATTN_OK;
}

static attn_status check_pointers(const attn_seq *s, int i, attn_error *err)
{
    if (s->query == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "seqs[%d].query is NULL", i);
    if (s->output == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "seqs[%d].output is NULL", i);
    if ((s->key == NULL) != (s->value == NULL))
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "seqs[%d]: cross-attention needs both key and value "
                               "(self-attention needs neither)", i);
    if (s->attn_mask_kind != ATTN_MASK_NONE && s->attn_mask_kind != ATTN_MASK_BOOL &&
        s->attn_mask_kind != ATTN_MASK_FLOAT)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "seqs[%d].attn_mask_kind = %d is not valid",
                               i, (int)s->attn_mask_kind);
    if ((s->attn_mask_kind == ATTN_MASK_NONE) != (s->attn_mask == NULL))
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "seqs[%d].attn_mask is %s but attn_mask_kind is %s", i,
                               s->attn_mask ? "set" : "NULL",
                               s->attn_mask_kind == ATTN_MASK_NONE ? "NONE" : "BOOL/FLOAT");
    if (s->attn_mask_per_head != 0 && s->attn_mask_per_head != 1)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "seqs[%d].attn_mask_per_head = %d, must be 0 or 1",
                               i, s->attn_mask_per_head);
    if (s->weights_mode != ATTN_WEIGHTS_NONE && s->weights_mode != ATTN_WEIGHTS_PER_HEAD &&
        s->weights_mode != ATTN_WEIGHTS_AVERAGE)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "seqs[%d].weights_mode = %d is not valid",
                               i, (int)s->weights_mode);
    if ((s->weights_mode == ATTN_WEIGHTS_NONE) != (s->weights == NULL))
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "seqs[%d].weights is %s but weights_mode is %s", i,
                               s->weights ? "set" : "NULL",
                               s->weights_mode == ATTN_WEIGHTS_NONE ? "NONE" : "not NONE");
    return check_cache_pointers(s, i, err);
}

/* s against cache_len: S = cache_len + T when appending, S = cache_len for a
 * fixed memory. (Pointers already checked.) */
static attn_status check_cache_shape(const attn_seq *s, int i, attn_error *err)
{
    if (s->cache_len < 0)
        return attn__set_error(err, ATTN_ERR_SHAPE, "seqs[%d].cache_len = %d, must be >= 0", i,
                               s->cache_len);
    if (s->cache_append) {
        if ((long long)s->s != (long long)s->cache_len + s->t)
            return attn__set_error(err, ATTN_ERR_SHAPE,
                                   "seqs[%d]: appending to a cache needs s == cache_len + t "
                                   "(s = %d, cache_len = %d, t = %d)", i, s->s, s->cache_len, s->t);
    } else {
        if (s->cache_len < 1)
            return attn__set_error(err, ATTN_ERR_SHAPE,
                                   "seqs[%d].cache_len = %d, a fixed cache (cache_append = 0) needs >= 1",
                                   i, s->cache_len);
        if (s->s != s->cache_len)
            return attn__set_error(err, ATTN_ERR_SHAPE,
                                   "seqs[%d]: a fixed cache needs s == cache_len (s = %d, cache_len = %d)",
                                   i, s->s, s->cache_len);
    }
    return ATTN_OK;
}

static attn_status check_shape(const attn_layer *l, const attn_seq *s, int i, attn_error *err)
{
    if (s->t < 1) return attn__set_error(err, ATTN_ERR_SHAPE, "seqs[%d].t = %d, must be >= 1", i, s->t);
    if (s->s < 1) return attn__set_error(err, ATTN_ERR_SHAPE, "seqs[%d].s = %d, must be >= 1", i, s->s);
    if (s->cache_k != NULL) {
        attn_status st = check_cache_shape(s, i, err);
        if (st != ATTN_OK) return st;
    } else if (is_self(s) && s->s != s->t) {
        return attn__set_error(err, ATTN_ERR_SHAPE,
                               "seqs[%d]: self-attention needs s == t (s = %d, t = %d)", i, s->s, s->t);
    }
    if (keys_from_query(s)) {
        if (l->e_k != l->e_q || l->e_v != l->e_q)
            return attn__set_error(err, ATTN_ERR_SHAPE,
                                   "seqs[%d]: self-attention needs embed_k == embed_v == embed_q "
                                   "(layer has %d, %d, %d); pass key and value", i, l->e_k, l->e_v, l->e_q);
    }
    if (s->key_length < 0 || s->key_length > s->s)
        return attn__set_error(err, ATTN_ERR_SHAPE, "seqs[%d].key_length = %d, must be in [0, s = %d]",
                               i, s->key_length, s->s);
    if (s->window < 0)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "seqs[%d].window = %d, must be >= 0", i, s->window);
    /* Every (T,S) or (h,T,S) array must be indexable with size_t. */
    size_t n;
    if (!attn__mul_size((size_t)s->t, (size_t)s->s, &n) || !attn__mul_size(n, (size_t)l->h, &n) ||
        !attn__mul_size(n, sizeof(float), &n))
        return attn__set_error(err, ATTN_ERR_LIMIT, "seqs[%d]: h*t*s overflows", i);
    return ATTN_OK;
}

/* Rotary layers: keys must come from the query (self-attention, or an append
 * to a cache), since a memory or another sequence has no positions relative
 * to the queries; explicit positions must be integers in [0, 2^53]. Layers
 * without RoPE ignore position_ids. */
static attn_status check_rope(const attn_layer *l, const attn_seq *s, int i, attn_error *err)
{
    if (l->rope.style == ATTN_ROPE_NONE) return ATTN_OK;
    if (s->key != NULL || s->value != NULL)
        return attn__set_error(err, ATTN_ERR_UNSUPPORTED,
                               "seqs[%d]: cross-attention (key/value given) over a rotary (RoPE) layer "
                               "is not supported: the keys have no positions relative to the queries", i);
    if (s->cache_k != NULL && !s->cache_append)
        return attn__set_error(err, ATTN_ERR_UNSUPPORTED,
                               "seqs[%d]: a fixed cache (cache_append = 0) over a rotary (RoPE) layer "
                               "is not supported: append to the cache (cache_append = 1) instead", i);
    if (s->position_ids == NULL) return ATTN_OK;
    for (int j = 0; j < s->t; j++) {
        const int64_t p = s->position_ids[j];
        if (p < 0 || p > ATTN__ROPE_MAX_POSITION)
            return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                                   "seqs[%d].position_ids[%d] = %lld, must be in [0, 2^53]", i, j,
                                   (long long)p);
    }
    return ATTN_OK;
}

/* Largest |m[i]| of n entries, and 1 if all are finite: four lanes at a time
 * with SSE2 (every x86-64 has it), no branch per entry. */
static int max_abs_finite(const float *m, size_t n, float *best)
{
    size_t i = 0;
    float b = 0.0f;
    int ok = 1;
#if defined(__SSE2__)
    const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff)), lim = _mm_set1_ps(FLT_MAX);
    __m128 mx = _mm_setzero_ps(), fin = _mm_castsi128_ps(_mm_set1_epi32(-1));
    for (; i + 4 <= n; i += 4) {
        const __m128 a = _mm_and_ps(_mm_loadu_ps(m + i), abs_mask);
        fin = _mm_and_ps(fin, _mm_cmple_ps(a, lim)); /* false for NaN and inf */
        mx = _mm_max_ps(mx, a);
    }
    float lanes[4];
    _mm_storeu_ps(lanes, mx);
    ok = _mm_movemask_ps(fin) == 0xf;
    b = fmaxf(fmaxf(lanes[0], lanes[1]), fmaxf(lanes[2], lanes[3]));
#endif
    for (; i < n; i++) {
        const float a = fabsf(m[i]);
        ok &= a <= FLT_MAX;
        if (a > b) b = a;
    }
    *best = b;
    return ok;
}

/* Scans a (rows, cols) matrix: returns 1 and sets *maxabs if all finite, else
 * returns 0 with *bad the flat index of the first non-finite value. */
static int scan(const float *m, size_t rows, size_t cols, double *maxabs, size_t *bad)
{
    size_t n = rows * cols; /* validated not to overflow by check_shape */
    float best;
    if (max_abs_finite(m, n, &best)) {
        *maxabs = best;
        return 1;
    }
    for (size_t i = 0; i < n; i++) /* rare: find the culprit for the message */
        if (!(fabsf(m[i]) <= FLT_MAX)) {
            *bad = i;
            return 0;
        }
    return 0; /* not reached: max_abs_finite saw a non-finite value */
}

static attn_status scan_input(const float *m, int rows, int cols, int i, const char *field,
                              double *maxabs, attn_error *err)
{
    size_t n, bad = 0;
    if (!attn__mul_size((size_t)rows, (size_t)cols, &n))
        return attn__set_error(err, ATTN_ERR_LIMIT, "seqs[%d].%s is too large", i, field);
    if (!scan(m, (size_t)rows, (size_t)cols, maxabs, &bad))
        return attn__set_error(err, ATTN_ERR_NONFINITE, "seqs[%d].%s[%zu][%zu] is not finite", i,
                               field, bad / (size_t)cols, bad % (size_t)cols);
    return ATTN_OK;
}

/* Float mask: NaN and +inf rejected, -inf allowed (it blocks). *maxpos gets the
 * largest positive entry (0 if none). */
static attn_status scan_float_mask(const attn_seq *s, int h, int i, double *maxpos, attn_error *err)
{
    size_t plane = (size_t)s->t * (size_t)s->s;
    size_t n = plane * (size_t)(s->attn_mask_per_head ? h : 1);
    const float *m = s->attn_mask;
    float best = 0.0f;
    for (size_t k = 0; k < n; k++) {
        float v = m[k];
        if (v > best) best = v;
        if (!isnan(v) && v <= FLT_MAX) continue;
        size_t r = (k % plane) / (size_t)s->s, c = k % (size_t)s->s;
        const char *what = isnan(v) ? "is NaN" : "is +inf (only -inf may block)";
        if (s->attn_mask_per_head)
            return attn__set_error(err, ATTN_ERR_NONFINITE, "seqs[%d].attn_mask[%zu][%zu][%zu] %s", i,
                                   k / plane, r, c, what);
        return attn__set_error(err, ATTN_ERR_NONFINITE, "seqs[%d].attn_mask[%zu][%zu] %s", i, r, c, what);
    }
    *maxpos = best;
    return ATTN_OK;
}

static attn_status too_large(int i, const char *where, attn_error *err)
{
    return attn__set_error(err, ATTN_ERR_LIMIT,
                           "seqs[%d]: input magnitudes are so large that the %s would overflow float32",
                           i, where);
}

/* Bounds every intermediate from the largest |input| and the layer's row norms,
 * so the compute paths never meet an infinity they did not get as a mask. */
static attn_status check_magnitudes(const attn_layer *l, int i, double mq, double mk, double mv,
                                    double mask_pos, attn_error *err)
{
    double bq = l->l1_q * mq + l->bmax_q;
    double bk = l->l1_k * mk + l->bmax_k;
    /* RoPE rotates pairs: one element can grow to |pair| <= sqrt(2) max|x|;
     * the score bound below holds as it is (a rotation keeps each pair's
     * dot product within |q_pair| |k_pair| <= 2 max|q| max|k|). */
    const double rot = l->rope.style != ATTN_ROPE_NONE ? sqrt(2.0) : 1.0;
    if (rot * bq > MAGNITUDE_LIMIT || rot * bk > MAGNITUDE_LIMIT)
        return too_large(i, "projections", err);
    double bv = l->l1_v * mv + l->bmax_v;
    if (bq > MAGNITUDE_LIMIT || bk > MAGNITUDE_LIMIT || bv > MAGNITUDE_LIMIT)
        return too_large(i, "projections", err);
    /* |q.k| <= d_k * max|q| * max|k|, times 1/sqrt(d_k) */
    if (sqrt((double)l->d_k) * bq * bk + mask_pos > MAGNITUDE_LIMIT)
        return too_large(i, "attention scores", err);
    if (l->l1_o * bv + l->bmax_o > MAGNITUDE_LIMIT) return too_large(i, "output", err);
    return ATTN_OK;
}

static attn_status check_values(const attn_layer *l, const attn_seq *s, int i, attn_error *err)
{
    attn_status st;
    double mq = 0, mk, mv, mpos = 0;
    if ((st = scan_input(s->query, s->t, l->e_q, i, "query", &mq, err))) return st;
    mk = mv = mq;
    if (!is_self(s) && ((st = scan_input(s->key, s->s, l->e_k, i, "key", &mk, err)) ||
                        (st = scan_input(s->value, s->s, l->e_v, i, "value", &mv, err))))
        return st;
    if (s->attn_mask_kind == ATTN_MASK_FLOAT && (st = scan_float_mask(s, l->h, i, &mpos, err)))
        return st;
    /* Cache rows are not rescanned (that would cost O(S) per streamed step):
     * they are trusted to be what attn_project_kv or an earlier append wrote
     * from checked inputs. A fixed cache projects nothing, so only Q is
     * bounded; an append bounds its new rows as self-attention does. */
    if (s->cache_k != NULL && !s->cache_append)
        return l->l1_q * mq + l->bmax_q > MAGNITUDE_LIMIT ? too_large(i, "projections", err) : ATTN_OK;
    return check_magnitudes(l, i, mq, mk, mv, mpos, err);
}

attn_status attn__validate_forward(const attn_layer *layer, const attn_seq *seqs, int n_seqs,
                                   attn_error *err)
{
    if (layer == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "layer is NULL");
    if (n_seqs < 0) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "n_seqs = %d, must be >= 0", n_seqs);
    if (n_seqs > 0 && seqs == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "seqs is NULL");
    long long rows_q = 0, rows_kv = 0;
    for (int i = 0; i < n_seqs; i++) {
        attn_status st;
        if ((st = check_pointers(&seqs[i], i, err)) || (st = check_rope(layer, &seqs[i], i, err)) ||
            (st = check_shape(layer, &seqs[i], i, err)) ||
            (st = check_block_table(layer, &seqs[i], i, err)))
            return st;
        rows_q += seqs[i].t;
        rows_kv += seqs[i].s;
        if (rows_q > INT_MAX || rows_kv > INT_MAX)
            return attn__set_error(err, ATTN_ERR_LIMIT, "seqs[0..%d]: more than %d rows in one batch",
                                   i, INT_MAX);
    }
    for (int i = 0; i < n_seqs; i++) {
        attn_status st = check_values(layer, &seqs[i], i, err);
        if (st) return st;
    }
    return ATTN_OK;
}

attn_status attn__validate_project_kv(const attn_layer *l, const float *key, const float *value, int s,
                                      const float *k_out, const float *v_out, attn_error *err)
{
    if (l == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "layer is NULL");
    if (key == NULL || value == NULL || k_out == NULL || v_out == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "%s is NULL",
                               key == NULL ? "key" : value == NULL ? "value" : k_out == NULL ? "k_out" : "v_out");
    if (l->rope.style != ATTN_ROPE_NONE)
        return attn__set_error(err, ATTN_ERR_UNSUPPORTED,
                               "attn_project_kv over a rotary (RoPE) layer is not supported: a memory has "
                               "no positions; append rows to a cache with attn_forward instead");
    if (s < 1) return attn__set_error(err, ATTN_ERR_SHAPE, "s = %d, must be >= 1", s);
    size_t n;
    if (!attn__mul_size((size_t)s, (size_t)(l->kv_k_dim > l->kv_v_dim ? l->kv_k_dim : l->kv_v_dim), &n) ||
        !attn__mul_size(n, sizeof(float), &n))
        return attn__set_error(err, ATTN_ERR_LIMIT, "s * h * d overflows");
    double mk, mv;
    size_t bad = 0;
    if (!scan(key, (size_t)s, (size_t)l->e_k, &mk, &bad))
        return attn__set_error(err, ATTN_ERR_NONFINITE, "key[%zu][%zu] is not finite",
                               bad / (size_t)l->e_k, bad % (size_t)l->e_k);
    if (!scan(value, (size_t)s, (size_t)l->e_v, &mv, &bad))
        return attn__set_error(err, ATTN_ERR_NONFINITE, "value[%zu][%zu] is not finite",
                               bad / (size_t)l->e_v, bad % (size_t)l->e_v);
    if (l->l1_k * mk + l->bmax_k > MAGNITUDE_LIMIT || l->l1_v * mv + l->bmax_v > MAGNITUDE_LIMIT)
        return attn__set_error(err, ATTN_ERR_LIMIT,
                               "input magnitudes are so large that the projections would overflow float32");
    return ATTN_OK;
}

/* 1 when all n floats of m are finite: x - x is 0 for a finite x and NaN for
 * inf or NaN, and a NaN never compares equal, so one subtract and compare per
 * four lanes, eight floats a step (no max, unlike max_abs_finite). */
static int all_finite(const float *m, size_t n)
{
    size_t i = 0;
#if defined(__SSE2__)
    __m128 a0 = _mm_setzero_ps(), a1 = _mm_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        const __m128 x0 = _mm_loadu_ps(m + i), x1 = _mm_loadu_ps(m + i + 4);
        a0 = _mm_add_ps(a0, _mm_sub_ps(x0, x0)); /* stays 0 until a NaN enters */
        a1 = _mm_add_ps(a1, _mm_sub_ps(x1, x1));
    }
    const __m128 z = _mm_add_ps(a0, a1);
    if (_mm_movemask_ps(_mm_cmpeq_ps(z, z)) != 0xf) return 0;
#endif
    float acc = 0.0f;
    for (; i < n; i++) acc += m[i] - m[i];
    return acc == acc;
}

/* The first non-finite entry of m (n floats), or n when all are finite. */
static size_t first_nonfinite(const float *m, size_t n)
{
    if (all_finite(m, n)) return n;
    size_t i = 0;
    while (i < n && fabsf(m[i]) <= FLT_MAX) i++;
    return i;
}

static attn_status nonfinite_result(const attn_seq *s, int i, const char *what, size_t k, size_t cols,
                                    attn_error *err)
{
    /* A sequence reading cache rows the library trusts without rescanning
     * (attn_kv_store, attn_project_kv, earlier appends) may have met rows too
     * large for these queries: the caller's data, LIMIT. Otherwise every
     * input was bounded above, and a non-finite result is a library defect. */
    const attn_status code = s->cache_k != NULL ? ATTN_ERR_LIMIT : ATTN_ERR_INTERNAL;
    return attn__set_error(err, code,
                           "non-finite values in the %s: seqs[%d].%s[%zu][%zu] is not finite after the "
                           "forward (%s); no result is returned",
                           what, i, what, k / cols, k % cols,
                           s->cache_k != NULL ? "the KV cache rows are too large for these queries"
                                              : "an intermediate overflowed float32 although the inputs "
                                                "were bounded: please report");
}

attn_status attn__check_results(const attn_layer *l, const attn_seq *seqs, int n_seqs, attn_error *err)
{
    for (int i = 0; i < n_seqs; i++) {
        const attn_seq *s = &seqs[i];
        const size_t n_out = (size_t)s->t * (size_t)l->e_out; /* sizes validated */
        size_t k = first_nonfinite(s->output, n_out);
        if (k < n_out) return nonfinite_result(s, i, "output", k, (size_t)l->e_out, err);
        if (s->weights_mode == ATTN_WEIGHTS_NONE) continue;
        const size_t n_w = (size_t)s->t * (size_t)s->s * (s->weights_mode == ATTN_WEIGHTS_PER_HEAD ? (size_t)l->h : 1);
        k = first_nonfinite(s->weights, n_w);
        if (k < n_w) return nonfinite_result(s, i, "weights", k, (size_t)s->s, err);
    }
    return ATTN_OK;
}

attn_status attn__check_projected(const float *k_out, size_t n_k, const float *v_out, size_t n_v,
                                  attn_error *err)
{
    size_t bad = first_nonfinite(k_out, n_k);
    if (bad < n_k)
        return attn__set_error(err, ATTN_ERR_INTERNAL,
                               "non-finite values in the projected keys: k_out element %zu is not finite "
                               "although the inputs were bounded: please report", bad);
    bad = first_nonfinite(v_out, n_v);
    if (bad < n_v)
        return attn__set_error(err, ATTN_ERR_INTERNAL,
                               "non-finite values in the projected values: v_out element %zu is not "
                               "finite although the inputs were bounded: please report", bad);
    return ATTN_OK;
}
