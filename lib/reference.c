/* reference.c — attention by the definition, one sequence and one head at a
 * time, in double: the oracle the fast paths are tested against (see reference.h).
 * Deliberately shares no compute or mask code with forward.c / mask.c.
 */
#include "reference.h"

#include "layer_internal.h"
#include "validate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* y (rows, n_out) = x (rows, n_in) Wᵀ + b in double. */
static void ref_linear(const float *x, int rows, int n_in, const float *w, const float *b, int n_out,
                       double *y)
{
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < n_out; o++) {
            double acc = b ? b[o] : 0.0;
            for (int i = 0; i < n_in; i++) acc += (double)x[(size_t)r * n_in + i] * w[(size_t)o * n_in + i];
            y[(size_t)r * n_out + o] = acc;
        }
}

/* The visibility rule spelt out: may query t look at key j under the blocking
 * masks? Causal and window count from the query's position: t, or cache_len + t
 * when the sequence appends to a KV cache (its keys are the cache, then itself). */
static int ref_visible(const attn_layer *l, const attn_seq *s, int head, int t, int j)
{
    (void)l;
    const long long pos = (long long)t + (s->cache_k && s->cache_append ? s->cache_len : 0);
    if (s->key_padding_mask && s->key_padding_mask[j]) return 0;
    if (s->key_length > 0 && j >= s->key_length) return 0;
    if (s->is_causal && j > pos) return 0;
    if (s->window > 0) {
        if (s->is_causal && j < pos - s->window + 1) return 0;
        if (!s->is_causal && llabs(pos - j) >= s->window) return 0;
    }
    size_t plane = (size_t)s->t * s->s, at = (size_t)t * s->s + j;
    size_t off = s->attn_mask_per_head ? (size_t)head * plane : 0;
    if (s->attn_mask_kind == ATTN_MASK_BOOL && ((const uint8_t *)s->attn_mask)[off + at]) return 0;
    if (s->attn_mask_kind == ATTN_MASK_FLOAT && isinf(((const float *)s->attn_mask)[off + at])) return 0;
    return 1;
}

static double ref_float_mask(const attn_seq *s, int head, int t, int j)
{
    if (s->attn_mask_kind != ATTN_MASK_FLOAT) return 0.0;
    size_t plane = (size_t)s->t * s->s;
    size_t off = s->attn_mask_per_head ? (size_t)head * plane : 0;
    return ((const float *)s->attn_mask)[off + (size_t)t * s->s + j];
}

/* K and V (S rows) of a sequence with a KV cache: the cache's cache_len rows,
 * then (appending) the T queries projected, which are also stored, rounded to
 * float, in the cache's rows [cache_len, S). */
static void ref_cache_kv(const attn_layer *l, const attn_seq *s, double *k, double *v)
{
    const size_t nk = (size_t)s->cache_len * l->qk_dim, nv = (size_t)s->cache_len * l->v_dim;
    for (size_t i = 0; i < nk; i++) k[i] = s->cache_k[i];
    for (size_t i = 0; i < nv; i++) v[i] = s->cache_v[i];
    if (!s->cache_append) return;
    ref_linear(s->query, s->t, l->e_k, l->w_k, l->b_k, l->qk_dim, k + nk);
    ref_linear(s->query, s->t, l->e_v, l->w_v, l->b_v, l->v_dim, v + nv);
    for (size_t i = 0; i < (size_t)s->t * l->qk_dim; i++) s->cache_k[nk + i] = (float)k[nk + i];
    for (size_t i = 0; i < (size_t)s->t * l->v_dim; i++) s->cache_v[nv + i] = (float)v[nv + i];
}

/* One sequence. q (T, h*d_k), k (S, h*d_k), v (S, h*d_v), z (T, h*d_v),
 * a (S) one row of weights, all double scratch. */
static void ref_seq(const attn_layer *l, const attn_seq *s, double *q, double *k, double *v,
                    double *z, double *a)
{
    const float *xk = s->key ? s->key : s->query, *xv = s->value ? s->value : s->query;
    ref_linear(s->query, s->t, l->e_q, l->w_q, l->b_q, l->qk_dim, q);
    if (s->cache_k) {
        ref_cache_kv(l, s, k, v);
    } else {
        ref_linear(xk, s->s, l->e_k, l->w_k, l->b_k, l->qk_dim, k);
        ref_linear(xv, s->s, l->e_v, l->w_v, l->b_v, l->v_dim, v);
    }
    size_t ts = (size_t)s->t * s->s;
    if (s->weights_mode == ATTN_WEIGHTS_AVERAGE) memset(s->weights, 0, ts * sizeof(float));
    for (int h = 0; h < l->h; h++)
        for (int t = 0; t < s->t; t++) {
            double mx = -INFINITY, sum = 0.0;
            for (int j = 0; j < s->s; j++) {
                a[j] = -INFINITY;
                if (!ref_visible(l, s, h, t, j)) continue;
                double dot = 0.0;
                for (int c = 0; c < l->d_k; c++)
                    dot += q[(size_t)t * l->qk_dim + h * l->d_k + c] * k[(size_t)j * l->qk_dim + h * l->d_k + c];
                a[j] = dot / sqrt((double)l->d_k) + ref_float_mask(s, h, t, j);
                if (a[j] > mx) mx = a[j];
            }
            for (int j = 0; j < s->s; j++) {
                a[j] = mx == -INFINITY || a[j] == -INFINITY ? 0.0 : exp(a[j] - mx);
                sum += a[j];
            }
            for (int j = 0; j < s->s; j++) a[j] = sum > 0 ? a[j] / sum : 0.0;
            for (int c = 0; c < l->d_v; c++) {
                double acc = 0.0;
                for (int j = 0; j < s->s; j++) acc += a[j] * v[(size_t)j * l->v_dim + h * l->d_v + c];
                z[(size_t)t * l->v_dim + h * l->d_v + c] = acc;
            }
            for (int j = 0; j < s->s; j++) {
                if (s->weights_mode == ATTN_WEIGHTS_PER_HEAD)
                    s->weights[(size_t)h * ts + (size_t)t * s->s + j] = (float)a[j];
                else if (s->weights_mode == ATTN_WEIGHTS_AVERAGE)
                    s->weights[(size_t)t * s->s + j] += (float)(a[j] / l->h);
            }
        }
    for (int t = 0; t < s->t; t++)
        for (int o = 0; o < l->e_out; o++) {
            const double *zr = z + (size_t)t * l->v_dim;
            double acc;
            if (l->w_o == NULL) {
                acc = zr[o];
            } else {
                acc = l->b_o ? l->b_o[o] : 0.0;
                for (int c = 0; c < l->v_dim; c++) acc += zr[c] * l->w_o[(size_t)o * l->v_dim + c];
            }
            s->output[(size_t)t * l->e_out + o] = (float)acc;
        }
}

attn_status attn__forward_reference(const attn_layer *layer, const attn_seq *seqs, int n_seqs,
                                    attn_workspace *ws, attn_forward_stats *stats, attn_error *err)
{
    (void)ws;
    attn_status st = attn__validate_forward(layer, seqs, n_seqs, err);
    if (st != ATTN_OK) return st;
    size_t max_t = 1, max_s = 1;
    for (int i = 0; i < n_seqs; i++) {
        if ((size_t)seqs[i].t > max_t) max_t = (size_t)seqs[i].t;
        if ((size_t)seqs[i].s > max_s) max_s = (size_t)seqs[i].s;
    }
    /* Test-only code: sizes are small, products of validated ints. */
    size_t nq = max_t * layer->qk_dim, nk = max_s * layer->qk_dim, nv = max_s * layer->v_dim,
           nz = max_t * layer->v_dim;
    double *buf = malloc((nq + nk + nv + nz + max_s) * sizeof *buf);
    if (buf == NULL) return attn__set_error(err, ATTN_ERR_NOMEM, "reference scratch");
    for (int i = 0; i < n_seqs; i++)
        ref_seq(layer, &seqs[i], buf, buf + nq, buf + nq + nk, buf + nq + nk + nv, buf + nq + nk + nv + nz);
    if (stats) {
        stats->flops = 0;
        stats->peak_scratch = (nq + nk + nv + nz + max_s) * sizeof *buf;
    }
    free(buf);
    return ATTN_OK;
}
