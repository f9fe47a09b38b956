/* reference.c — attention by the definition, one sequence and one head at a
 * time, in double: the oracle the fast paths are tested against (see reference.h).
 * Deliberately shares no compute or mask code with forward.c / mask.c / rope.c.
 * GQA: query head i reads KV head i / (h / g). RoPE: each head's q and k rows
 * rotated in double at their positions, with HF's float32 inverse frequencies.
 */
#include "reference.h"

#include "half.h"
#include "layer_internal.h"
#include "validate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* y (rows, n_out) = x (rows, n_in) Wᵀ + b in double; W as the layer keeps it
 * (l->wdtype: F16 / BF16 weights widened one by one). */
static void ref_linear_dt(const float *x, int rows, int n_in, const void *w, int wdtype, const float *b,
                          int n_out, double *y)
{
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < n_out; o++) {
            double acc = b ? b[o] : 0.0;
            for (int i = 0; i < n_in; i++)
                acc += (double)x[(size_t)r * n_in + i] * attn__w_get(w, wdtype, (size_t)o * n_in + i);
            y[(size_t)r * n_out + o] = acc;
        }
}

/* HF's inverse frequencies, spelt out in float32 as modeling_rope_utils.py
 * writes them (1 / base^(2i/dim), then linear or llama3 scaling). */
#define ref_linear(x, rows, n_in, w, b, n_out, y) ref_linear_dt(x, rows, n_in, w, l->wdtype, b, n_out, y)

static void ref_inv_freq(const attn_rope *r, float *inv)
{
    const int dim = r->rotary_dim;
    for (int i = 0; i < dim / 2; i++) {
        float e = (float)(2 * i) / (float)dim;
        inv[i] = 1.0f / powf((float)r->theta, e);
        if (r->scaling == ATTN_ROPE_SCALING_LINEAR) inv[i] = inv[i] / (float)r->factor;
        if (r->scaling != ATTN_ROPE_SCALING_LLAMA3) continue;
        float f = (float)r->factor, wl = (1.0f / inv[i]) * (float)(2.0 * 3.14159265358979323846);
        float low_wl = (float)(r->original_max_position / r->low_freq_factor);
        float high_wl = (float)(r->original_max_position / r->high_freq_factor);
        float x = wl > low_wl ? inv[i] / f : inv[i];
        float sm = ((1.0f / wl) * (float)r->original_max_position - (float)r->low_freq_factor) /
                   (float)(r->high_freq_factor - r->low_freq_factor);
        if (!(wl < high_wl) && !(wl > low_wl)) x = (1.0f - sm) * x / f + sm * x;
        inv[i] = x;
    }
}

/* Position of query row t: position_ids[t], else t (+ cache_len when appending). */
static int64_t ref_pos(const attn_seq *s, int t)
{
    if (s->position_ids) return s->position_ids[t];
    return (int64_t)t + (s->cache_k && s->cache_append ? s->cache_len : 0);
}

/* Rotates the n_heads heads (each d_k wide, consecutive) of one double row. */
static void ref_rotate(const attn_layer *l, const float *inv, int64_t pos, double *x, int n_heads)
{
    const int rd = l->rope.rotary_dim, half = rd / 2;
    for (int hh = 0; hh < n_heads; hh++) {
        double *v = x + (size_t)hh * l->d_k;
        for (int i = 0; i < half; i++) {
            double a = (double)pos * (double)inv[i], c = cos(a), sn = sin(a);
            int i0 = l->rope.style == ATTN_ROPE_HALF ? i : 2 * i;
            int i1 = l->rope.style == ATTN_ROPE_HALF ? i + half : 2 * i + 1;
            double x0 = v[i0], x1 = v[i1];
            v[i0] = x0 * c - x1 * sn;
            v[i1] = x1 * c + x0 * sn;
        }
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

/* K and V (S rows) of a sequence with a KV cache: the cache's cache_len rows
 * (already rotated when they were written), then (appending) the T queries
 * projected and rotated at their positions, which are also stored, rounded to
 * float, in the cache's rows [cache_len, S). */
static void ref_cache_kv(const attn_layer *l, const attn_seq *s, const float *inv, double *k, double *v)
{
    const int kd = l->kv_k_dim, vd = l->kv_v_dim;
    const size_t nk = (size_t)s->cache_len * kd, nv = (size_t)s->cache_len * vd;
    for (size_t i = 0; i < nk; i++) k[i] = s->cache_k[i];
    for (size_t i = 0; i < nv; i++) v[i] = s->cache_v[i];
    if (!s->cache_append) return;
    ref_linear(s->query, s->t, l->e_k, l->w_k, l->b_k, kd, k + nk);
    ref_linear(s->query, s->t, l->e_v, l->w_v, l->b_v, vd, v + nv);
    if (inv)
        for (int t = 0; t < s->t; t++) ref_rotate(l, inv, ref_pos(s, t), k + nk + (size_t)t * kd, l->g);
    for (size_t i = 0; i < (size_t)s->t * kd; i++) s->cache_k[nk + i] = (float)k[nk + i];
    for (size_t i = 0; i < (size_t)s->t * vd; i++) s->cache_v[nv + i] = (float)v[nv + i];
}

/* One sequence. q (T, h*d_k), k (S, g*d_k), v (S, g*d_v), z (T, h*d_v),
 * a (S) one row of weights, all double scratch; inv: the rotary frequencies
 * or NULL. */
static void ref_seq(const attn_layer *l, const attn_seq *s, const float *inv, double *q, double *k,
                    double *v, double *z, double *a)
{
    const float *xk = s->key ? s->key : s->query, *xv = s->value ? s->value : s->query;
    const int kd = l->kv_k_dim, vd = l->kv_v_dim, r = l->h / l->g;
    ref_linear(s->query, s->t, l->e_q, l->w_q, l->b_q, l->qk_dim, q);
    if (inv)
        for (int t = 0; t < s->t; t++) ref_rotate(l, inv, ref_pos(s, t), q + (size_t)t * l->qk_dim, l->h);
    if (s->cache_k) {
        ref_cache_kv(l, s, inv, k, v);
    } else {
        ref_linear(xk, s->s, l->e_k, l->w_k, l->b_k, kd, k);
        ref_linear(xv, s->s, l->e_v, l->w_v, l->b_v, vd, v);
        if (inv) /* self-attention: key j is query row j */
            for (int j = 0; j < s->s; j++) ref_rotate(l, inv, ref_pos(s, j), k + (size_t)j * kd, l->g);
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
                    dot += q[(size_t)t * l->qk_dim + h * l->d_k + c] * k[(size_t)j * kd + (h / r) * l->d_k + c];
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
                for (int j = 0; j < s->s; j++) acc += a[j] * v[(size_t)j * vd + (h / r) * l->d_v + c];
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
                for (int c = 0; c < l->v_dim; c++) acc += zr[c] * attn__w_get(l->w_o, l->wdtype, (size_t)o * l->v_dim + c);
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
    size_t nq = max_t * layer->qk_dim, nk = max_s * layer->kv_k_dim, nv = max_s * layer->kv_v_dim,
           nz = max_t * layer->v_dim;
    double *buf = malloc((nq + nk + nv + nz + max_s) * sizeof *buf);
    float *inv = NULL;
    if (layer->rope.style != ATTN_ROPE_NONE) {
        inv = malloc((size_t)layer->rope.rotary_dim / 2 * sizeof *inv);
        if (inv) ref_inv_freq(&layer->rope, inv);
    }
    if (buf == NULL || (layer->rope.style != ATTN_ROPE_NONE && inv == NULL)) {
        free(buf);
        free(inv);
        return attn__set_error(err, ATTN_ERR_NOMEM, "reference scratch");
    }
    for (int i = 0; i < n_seqs; i++)
        ref_seq(layer, &seqs[i], inv, buf, buf + nq, buf + nq + nk, buf + nq + nk + nv,
                buf + nq + nk + nv + nz);
    free(inv);
    if (stats) {
        stats->flops = 0;
        stats->peak_scratch = (nq + nk + nv + nz + max_s) * sizeof *buf;
        stats->streamed = 0;
    }
    free(buf);
    return ATTN_OK;
}
