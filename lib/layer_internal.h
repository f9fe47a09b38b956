/* layer_internal.h — what the library's own files share and users never see:
 * the layout of struct attn_layer, the error helper, and overflow-safe size
 * arithmetic. Symbols here start with attn__ and are not part of the public API.
 */
#ifndef ATTN_LAYER_INTERNAL_H
#define ATTN_LAYER_INTERNAL_H

#include "attn.h"

#include <stddef.h>
#include <stdint.h>

/* A built layer. Immutable after attn_layer_create returns, so any number of
 * threads may read it at once. All weight pointers point into `params` (one
 * 64-byte aligned block owned by the layer); absent biases / W_O are NULL. */
struct attn_layer {
    int h, d_k, d_v;          /* query heads, per-head query/key and value width */
    int g;                    /* key/value heads: g divides h; query head i reads
                                 KV head i / (h / g) (HF repeat_kv); g = h: MHA  */
    int e_q, e_k, e_v, e_out; /* embedding widths; e_out = h*d_v without W_O    */
    int qk_dim, v_dim;        /* h*d_k and h*d_v (checked to fit in int): the
                                 widths of Q and of the head concat Z           */
    int kv_k_dim, kv_v_dim;   /* g*d_k and g*d_v: the widths of K and V, of the
                                 projections and of KV-cache rows              */

    /* The projection matrices, row-major, of element type wdtype: float for
     * F32, uint16_t bits for F16 / BF16 (void, so that no code reads them as
     * float by accident: attn__w_at for offsets, attn__w_get for values). */
    int wdtype;       /* ATTN_WDTYPE_F32, _F16 or _BF16 (never DEFAULT) */
    const void *w_q; /* (qk_dim, e_q)  */
    const void *w_k; /* (kv_k_dim, e_k) */
    const void *w_v; /* (kv_v_dim, e_v) */
    const void *w_o; /* (e_out, v_dim) or NULL */
    float *b_q; /* (qk_dim) or NULL */
    float *b_k; /* (kv_k_dim) or NULL */
    float *b_v; /* (kv_v_dim) or NULL */
    float *b_o; /* (e_out)  or NULL */

    /* Rotary embedding, resolved (theta and rotary_dim filled in; style NONE:
     * none, inv_freq NULL). inv_freq: (rope.rotary_dim / 2) float32 inverse
     * frequencies, owned (see rope.h). */
    attn_rope rope;
    float *inv_freq;

    /* Magnitude bounds used to reject inputs whose result would overflow
     * float32: the largest L1 norm of a row of each projection matrix and the
     * largest |bias| (0 when absent). For W_O the norm is 1 when absent. */
    double l1_q, l1_k, l1_v, l1_o;
    double bmax_q, bmax_k, bmax_v, bmax_o;

    char source_dtype[8]; /* "F32", "F16", "BF16", "mixed" or "" */
    size_t param_count;
    size_t param_bytes;   /* of params as allocated (attn_layer_info.weights_bytes) */
    void *params;         /* owns every weight above */
};

/* Fills err (when not NULL) with code and a printf-style message, truncated to
 * ATTN_ERROR_MESSAGE_MAX. Returns code, so callers can `return attn__set_error(...)`. */
attn_status attn__set_error(attn_error *err, attn_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records which dtype the weights came from ("F32", "F16", "BF16", "mixed").
 * Called by the safetensors loader right after attn_layer_create, before the
 * layer is shared. NULL or an over-long string records "". */
void attn__layer_set_source_dtype(attn_layer *l, const char *dtype);

/* Bytes of one weight of a projection matrix, and w advanced by `elems` weights. */
static inline size_t attn__w_size(const attn_layer *l) { return l->wdtype == ATTN_WDTYPE_F32 ? 4 : 2; }
static inline const void *attn__w_at(const attn_layer *l, const void *w, size_t elems)
{
    return (const char *)w + elems * attn__w_size(l);
}

/* Overflow-checked size_t arithmetic: store a*b (a+b) in *out and return 1, or
 * return 0 on overflow leaving *out untouched. */
static inline int attn__mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static inline int attn__add_size(size_t a, size_t b, size_t *out)
{
    if (b > SIZE_MAX - a) return 0;
    *out = a + b;
    return 1;
}

#endif /* ATTN_LAYER_INTERNAL_H */
