/* layer.c — building, describing and freeing an attention layer: dimension
 * checks (overflow-safe), finiteness of the weights, and one owned copy of them.
 */
#include "layer_internal.h"
#include "half.h"
#include "rope.h"

#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* One weight tensor of the descriptor, for checking and copying in a loop. */
typedef struct weight_spec {
    const char *name;
    const float *src;
    size_t rows, cols;  /* cols = 1 for biases */
    const void **dst;   /* where the layer keeps its copy */
    int matrix;         /* 1: kept as the layer's wdtype; 0 (bias): float32 */
} weight_spec;

/* The weights' one allocation. From 2 MiB on it is 2 MiB aligned and its
 * whole 2 MiB pages madvise(MADV_HUGEPAGE)d: transparent huge pages in
 * `madvise` mode (the usual default) then back them with 2 MiB pages, so a
 * projection streams its weights through one TLB entry a 2 MiB page and the
 * hardware prefetchers are not stopped at every 4 KiB (two threads, one row
 * against 2048 x 2048 weights from DRAM on a Zen 5: F32 90 -> 100 GB/s,
 * BF16 75 -> 83). The tail past the last whole page keeps 4 KiB pages, so
 * no more memory is touched than the weights need. A hint: refused, the
 * weights keep 4 KiB pages. Freed with free(). */
#define HUGE_PAGE ((size_t)2 << 20)
static void *alloc_weights(size_t bytes)
{
    if (bytes < HUGE_PAGE || bytes > SIZE_MAX - HUGE_PAGE) return aligned_alloc(64, bytes ? bytes : 64);
    void *p = aligned_alloc(HUGE_PAGE, (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
#ifdef MADV_HUGEPAGE
    if (p != NULL) (void)madvise(p, bytes / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE);
#endif
    return p;
}

static attn_status check_dim(const char *name, int v, attn_error *err)
{
    if (v < 1) return attn__set_error(err, ATTN_ERR_SHAPE, "desc.%s = %d, must be >= 1", name, v);
    return ATTN_OK;
}

static attn_status check_dims(const attn_layer_desc *d, attn_error *err)
{
    attn_status st;
    if ((st = check_dim("num_heads", d->num_heads, err)) ||
        (st = check_dim("head_dim_k", d->head_dim_k, err)) ||
        (st = check_dim("head_dim_v", d->head_dim_v, err)) ||
        (st = check_dim("embed_q", d->embed_q, err)) ||
        (st = check_dim("embed_k", d->embed_k, err)) ||
        (st = check_dim("embed_v", d->embed_v, err)))
        return st;
    if (d->w_o != NULL && (st = check_dim("embed_out", d->embed_out, err))) return st;
    if (d->num_kv_heads < 0)
        return attn__set_error(err, ATTN_ERR_SHAPE, "desc.num_kv_heads = %d, must be >= 0 (0 = num_heads)",
                               d->num_kv_heads);
    if (d->num_kv_heads > d->num_heads || (d->num_kv_heads > 0 && d->num_heads % d->num_kv_heads != 0))
        return attn__set_error(err, ATTN_ERR_SHAPE,
                               "desc.num_kv_heads = %d does not divide desc.num_heads = %d "
                               "(each KV head serves num_heads / num_kv_heads query heads)",
                               d->num_kv_heads, d->num_heads);
    /* h*d_k and h*d_v are BLAS dimensions (int). */
    if ((long long)d->num_heads * d->head_dim_k > INT_MAX ||
        (long long)d->num_heads * d->head_dim_v > INT_MAX)
        return attn__set_error(err, ATTN_ERR_LIMIT, "num_heads * head_dim exceeds %d", INT_MAX);
    return ATTN_OK;
}

static attn_status check_pointers(const attn_layer_desc *d, attn_error *err)
{
    if (d->w_q == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "desc.w_q is NULL");
    if (d->w_k == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "desc.w_k is NULL");
    if (d->w_v == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "desc.w_v is NULL");
    if (d->b_o != NULL && d->w_o == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "desc.b_o is given but desc.w_o is NULL");
    return ATTN_OK;
}

/* Fills specs[0..7] (absent tensors have src == NULL). */
static void describe_weights(const attn_layer_desc *d, attn_layer *l, weight_spec specs[8])
{
    size_t qk = (size_t)l->qk_dim, v = (size_t)l->v_dim, out = (size_t)l->e_out;
    size_t kk = (size_t)l->kv_k_dim, kv = (size_t)l->kv_v_dim; /* g KV heads */
    weight_spec s[8] = {
        {"w_q", d->w_q, qk, (size_t)l->e_q, &l->w_q, 1},
        {"w_k", d->w_k, kk, (size_t)l->e_k, &l->w_k, 1},
        {"w_v", d->w_v, kv, (size_t)l->e_v, &l->w_v, 1},
        {"w_o", d->w_o, out, v, &l->w_o, 1},
        {"b_q", d->b_q, qk, 1, (const void **)&l->b_q, 0},
        {"b_k", d->b_k, kk, 1, (const void **)&l->b_k, 0},
        {"b_v", d->b_v, kv, 1, (const void **)&l->b_v, 0},
        {"b_o", d->b_o, out, 1, (const void **)&l->b_o, 0},
    };
    memcpy(specs, s, sizeof s);
}

/* Bytes of a tensor as kept: matrices at the layer's weight size, biases at 4. */
static size_t elem_bytes(const attn_layer *l, const weight_spec *w)
{
    return w->matrix ? attn__w_size(l) : sizeof(float);
}

/* Sums the sizes: weights, and bytes with each tensor padded to 64 for alignment. */
static attn_status total_size(const attn_layer *l, const weight_spec *specs, size_t *params,
                              size_t *alloc, attn_error *err)
{
    size_t p = 0, a = 0, n, b;
    for (int i = 0; i < 8; i++) {
        if (specs[i].src == NULL) continue;
        if (!attn__mul_size(specs[i].rows, specs[i].cols, &n) || !attn__add_size(p, n, &p) ||
            !attn__mul_size(n, elem_bytes(l, &specs[i]), &b) || !attn__add_size(b, 63, &b) ||
            !attn__add_size(a, b / 64 * 64, &a))
            return attn__set_error(err, ATTN_ERR_LIMIT, "desc.%s is too large (size overflows)",
                                   specs[i].name);
    }
    *params = p;
    *alloc = a;
    return ATTN_OK;
}

/* Copies w into dst as the layer keeps it (F16: every weight must fit). */
static attn_status keep(const attn_layer *l, const weight_spec *w, void *dst, attn_error *err)
{
    const size_t n = w->rows * w->cols;
    if (!w->matrix || l->wdtype == ATTN_WDTYPE_F32) {
        memcpy(dst, w->src, n * sizeof(float));
        return ATTN_OK;
    }
    uint16_t *h = dst;
    for (size_t i = 0; i < n; i++) {
        if (l->wdtype == ATTN_WDTYPE_BF16) {
            h[i] = attn__f32_to_bf16(w->src[i]);
            continue;
        }
        if (!attn__f16_fits(w->src[i]))
            return attn__set_error(err, ATTN_ERR_LIMIT,
                                   "desc.%s[%zu][%zu] = %g is beyond the F16 range (|w| <= 65504): "
                                   "keep this layer's weights as bf16 or f32",
                                   w->name, i / w->cols, i % w->cols, (double)w->src[i]);
        h[i] = attn__f32_to_f16(w->src[i]);
    }
    return ATTN_OK;
}

static attn_status check_finite(const weight_spec *w, attn_error *err)
{
    size_t n = w->rows * w->cols;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(w->src[i])) continue;
        if (w->cols == 1)
            return attn__set_error(err, ATTN_ERR_NONFINITE, "desc.%s[%zu] is not finite", w->name, i);
        return attn__set_error(err, ATTN_ERR_NONFINITE, "desc.%s[%zu][%zu] is not finite",
                               w->name, i / w->cols, i % w->cols);
    }
    return ATTN_OK;
}

/* Largest L1 norm over the rows of a (rows, cols) matrix kept as wdtype. */
static double max_row_l1(const void *m, int wdtype, size_t rows, size_t cols)
{
    double best = 0.0;
    for (size_t r = 0; r < rows; r++) {
        double s = 0.0;
        for (size_t c = 0; c < cols; c++) s += fabs((double)attn__w_get(m, wdtype, r * cols + c));
        if (s > best) best = s;
    }
    return best;
}

static double max_abs(const float *v, size_t n)
{
    double best = 0.0;
    for (size_t i = 0; v != NULL && i < n; i++)
        if (fabs((double)v[i]) > best) best = fabs((double)v[i]);
    return best;
}

static void compute_bounds(attn_layer *l)
{
    const int dt = l->wdtype;
    l->l1_q = max_row_l1(l->w_q, dt, (size_t)l->qk_dim, (size_t)l->e_q);
    l->l1_k = max_row_l1(l->w_k, dt, (size_t)l->kv_k_dim, (size_t)l->e_k);
    l->l1_v = max_row_l1(l->w_v, dt, (size_t)l->kv_v_dim, (size_t)l->e_v);
    l->l1_o = l->w_o ? max_row_l1(l->w_o, dt, (size_t)l->e_out, (size_t)l->v_dim) : 1.0;
    l->bmax_q = max_abs(l->b_q, (size_t)l->qk_dim);
    l->bmax_k = max_abs(l->b_k, (size_t)l->kv_k_dim);
    l->bmax_v = max_abs(l->b_v, (size_t)l->kv_v_dim);
    l->bmax_o = max_abs(l->b_o, (size_t)l->e_out);
}

attn_status attn_layer_create(const attn_layer_desc *desc, attn_layer **out, attn_error *err)
{
    attn_layer *l = NULL;
    attn_status st;
    weight_spec specs[8];
    size_t n_params = 0, n_alloc = 0;
    attn_rope rope;

    if (out == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (desc == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "desc is NULL");
    if ((st = check_pointers(desc, err)) || (st = check_dims(desc, err)) ||
        (st = attn__rope_resolve(&desc->rope, desc->head_dim_k, &rope, err)))
        return st;

    l = calloc(1, sizeof *l);
    if (l == NULL) return attn__set_error(err, ATTN_ERR_NOMEM, "allocating the layer");
    l->h = desc->num_heads;
    l->g = desc->num_kv_heads ? desc->num_kv_heads : desc->num_heads;
    l->d_k = desc->head_dim_k;
    l->d_v = desc->head_dim_v;
    l->e_q = desc->embed_q;
    l->e_k = desc->embed_k;
    l->e_v = desc->embed_v;
    l->qk_dim = l->h * l->d_k;
    l->v_dim = l->h * l->d_v;
    l->kv_k_dim = l->g * l->d_k; /* g <= h: fits like qk_dim */
    l->kv_v_dim = l->g * l->d_v;
    l->rope = rope;
    l->e_out = desc->w_o ? desc->embed_out : l->v_dim;

    switch (desc->weights_dtype) {
    case ATTN_WDTYPE_DEFAULT:
    case ATTN_WDTYPE_F32: l->wdtype = ATTN_WDTYPE_F32; break;
    case ATTN_WDTYPE_F16:
    case ATTN_WDTYPE_BF16: l->wdtype = desc->weights_dtype; break;
    default:
        st = attn__set_error(err, ATTN_ERR_INVALID_ARG,
                             "desc.weights_dtype = %d, must be an attn_weight_dtype (0..3)",
                             (int)desc->weights_dtype);
        goto fail;
    }

    describe_weights(desc, l, specs);
    if ((st = total_size(l, specs, &n_params, &n_alloc, err))) goto fail;
    /* Allocate before reading the weights: absurd sizes fail here, untouched. */
    l->params = alloc_weights(n_alloc);
    if (l->params == NULL) {
        st = attn__set_error(err, ATTN_ERR_NOMEM, "allocating %zu weights", n_params);
        goto fail;
    }
    char *p = l->params;
    for (int i = 0; i < 8; i++) {
        if (specs[i].src == NULL) continue;
        if ((st = check_finite(&specs[i], err)) || (st = keep(l, &specs[i], p, err))) goto fail;
        *specs[i].dst = p;
        p += (specs[i].rows * specs[i].cols * elem_bytes(l, &specs[i]) + 63) / 64 * 64;
    }
    l->param_count = n_params;
    l->param_bytes = n_alloc;
    compute_bounds(l);
    if (rope.style != ATTN_ROPE_NONE) {
        l->inv_freq = malloc((size_t)(rope.rotary_dim / 2) * sizeof *l->inv_freq);
        if (l->inv_freq == NULL) {
            st = attn__set_error(err, ATTN_ERR_NOMEM, "allocating %d rotary frequencies",
                                 rope.rotary_dim / 2);
            goto fail;
        }
        attn__rope_inv_freq(&rope, l->inv_freq);
    }
    *out = l;
    return ATTN_OK;

fail:
    attn_layer_free(l);
    return st;
}

void attn_layer_free(attn_layer *layer)
{
    if (layer == NULL) return;
    free(layer->params);
    free(layer->inv_freq);
    free(layer);
}

void attn_layer_get_info(const attn_layer *l, attn_layer_info *info)
{
    if (l == NULL || info == NULL) return;
    memset(info, 0, sizeof *info);
    info->num_heads = l->h;
    info->head_dim_k = l->d_k;
    info->head_dim_v = l->d_v;
    info->embed_q = l->e_q;
    info->embed_k = l->e_k;
    info->embed_v = l->e_v;
    info->embed_out = l->e_out;
    info->has_out_proj = l->w_o != NULL;
    info->has_bias_q = l->b_q != NULL;
    info->has_bias_k = l->b_k != NULL;
    info->has_bias_v = l->b_v != NULL;
    info->has_bias_out = l->b_o != NULL;
    memcpy(info->source_dtype, l->source_dtype, sizeof info->source_dtype);
    info->param_count = l->param_count;
    info->num_kv_heads = l->g;
    info->rope = l->rope;
    snprintf(info->weights_dtype, sizeof info->weights_dtype, "%s",
             l->wdtype == ATTN_WDTYPE_BF16 ? "BF16" : l->wdtype == ATTN_WDTYPE_F16 ? "F16" : "F32");
    info->weights_bytes = l->param_bytes;
}

const char *attn_weight_dtype_name(attn_weight_dtype dtype)
{
    switch (dtype) {
    case ATTN_WDTYPE_DEFAULT: return "default";
    case ATTN_WDTYPE_F32: return "f32";
    case ATTN_WDTYPE_F16: return "f16";
    case ATTN_WDTYPE_BF16: return "bf16";
    }
    return "unknown";
}

void attn__layer_set_source_dtype(attn_layer *l, const char *dtype)
{
    if (l == NULL) return;
    memset(l->source_dtype, 0, sizeof l->source_dtype);
    if (dtype != NULL && strlen(dtype) < sizeof l->source_dtype)
        memcpy(l->source_dtype, dtype, strlen(dtype));
}
