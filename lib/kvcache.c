/* kvcache.c — paged and compact KV caches (see kvcache.h and attn.h's "KV
 * cache layouts"): address arithmetic, float32 -> F16/BF16 (round to nearest
 * even) and INT8 (per block and KV head scale) on write, and back on read,
 * plus the public attn_kv_block_bytes / attn_kv_store / attn_kv_load.
 */
#include "kvcache.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* The conversion loops are the decode tier's inner loops: let GCC vectorise
 * them (-O2 alone uses its "very cheap" cost model, which skips loops of
 * unknown trip count). Exact integer/bit arithmetic, so no change in results. */
#if defined(__GNUC__) && !defined(__clang__)
#define HOT_LOOP __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#else
#define HOT_LOOP
#endif

static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }

static size_t elem_size(int dtype)
{
    return dtype == ATTN_KV_F32 ? 4 : dtype == ATTN_KV_INT8 ? 1 : 2;
}

int attn__kv_sizes(const attn_layer *l, int dtype, int block_rows, size_t *k_bytes, size_t *v_bytes)
{
    const size_t rows = block_rows > 0 ? (size_t)block_rows : 1, es = elem_size(dtype);
    size_t k, v;
    if (!attn__mul_size(rows * (size_t)l->kv_k_dim, es, &k) || !attn__mul_size(rows * (size_t)l->kv_v_dim, es, &v))
        return 0;
    if (dtype == ATTN_KV_INT8) { /* g float scales first, padded to 4 bytes */
        k = 4 * (size_t)l->g + (k + 3) / 4 * 4;
        v = 4 * (size_t)l->g + (v + 3) / 4 * 4;
    }
    *k_bytes = k;
    *v_bytes = v;
    return 1;
}

static void kv_init(const attn_layer *l, void *k, void *v, int dtype, int block_rows,
                    const int32_t *table, size_t stride, attn__kv *kv)
{
    kv->k = k;
    kv->v = v;
    kv->dtype = dtype;
    kv->block_rows = block_rows;
    kv->table = table;
    kv->shift = 0;
    while (block_rows > 1 && (1 << kv->shift) < block_rows) kv->shift++;
    kv->blk_k = kv->blk_v = 0;
    if (block_rows > 0) attn__kv_sizes(l, dtype, block_rows, &kv->blk_k, &kv->blk_v);
    if (block_rows > 0 && stride > 0) kv->blk_k = kv->blk_v = stride;
}

void attn__kv_from_seq(const attn_layer *l, const attn_seq *s, attn__kv *kv)
{
    kv_init(l, s->cache_k, s->cache_v, s->cache_dtype, s->cache_block_rows, s->cache_block_table,
            s->cache_block_stride, kv);
}

/* ------------------------------------------------------------ conversions */

/* float32 -> binary16, round to nearest even (F. Giesen's float_to_half_fast3_rtne),
 * finite inputs only; magnitudes that would round to inf become +-65504. */
static uint16_t to_f16(float f)
{
    uint32_t u = bits_of(f), sign = u & 0x80000000u, o;
    u ^= sign;
    if (u >= (127u + 16u) << 23) {
        o = 0x7bffu;
    } else if (u < 113u << 23) { /* subnormal or zero: let the FPU round */
        const float magic = float_of(((127u - 15u) + (23u - 10u) + 1u) << 23);
        o = bits_of(float_of(u) + magic) - bits_of(magic);
    } else {
        uint32_t odd = (u >> 13) & 1u;
        u += ((uint32_t)(15 - 127) << 23) + 0xfffu;
        u += odd;
        o = u >> 13;
        if (o > 0x7bffu) o = 0x7bffu;
    }
    return (uint16_t)(o | (sign >> 16));
}

static uint16_t to_bf16(float f)
{
    uint32_t u = bits_of(f); /* finite and < FLT_MAX/4 (validated): no overflow */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* binary16 -> float32 for finite halves: the 15 magnitude bits moved to a
 * float32's place, then scaled by 2^112 (exact, subnormals included). */
HOT_LOOP static void from_f16(const uint16_t *src, int n, float *dst)
{
    const float scale = 0x1p112f;
    for (int i = 0; i < n; i++) {
        uint32_t h = src[i];
        float m = float_of((h & 0x7fffu) << 13) * scale;
        dst[i] = float_of(bits_of(m) | ((h & 0x8000u) << 16));
    }
}

HOT_LOOP static void from_bf16(const uint16_t *src, int n, float *dst)
{
    for (int i = 0; i < n; i++) dst[i] = float_of((uint32_t)src[i] << 16);
}

HOT_LOOP static void from_int8(const int8_t *src, int n, float s, float *dst)
{
    for (int i = 0; i < n; i++) dst[i] = (float)src[i] * s;
}

static int8_t quant(float x, float inv)
{
    float q = nearbyintf(x * inv); /* default rounding mode: half to even */
    return (int8_t)(q > 127.0f ? 127 : q < -127.0f ? -127 : (int)q);
}

/* ---------------------------------------------------------------- layout */

/* Base of the block holding row i (paged), or of the buffer (contiguous). */
static char *block_base(const attn__kv *kv, int which, int i)
{
    char *base = which ? kv->v : kv->k;
    if (kv->block_rows == 0) return base;
    return base + (size_t)kv->table[i >> kv->shift] * (which ? kv->blk_v : kv->blk_k);
}

/* Element (row i, column c of the g*d row) of a non-INT8 cache. */
static char *elem_at(const attn__kv *kv, int which, int width, int i, int c)
{
    const size_t es = elem_size(kv->dtype);
    const size_t r = kv->block_rows ? (size_t)(i & (kv->block_rows - 1)) : (size_t)i;
    return block_base(kv, which, i) + (r * (size_t)width + (size_t)c) * es;
}

/* INT8: the block's g scales and its row r's data. */
static float *int8_scales(const attn__kv *kv, int which, int i) { return (float *)block_base(kv, which, i); }

static int8_t *int8_row(const attn__kv *kv, int which, int g, int width, int i)
{
    const size_t r = (size_t)(i & (kv->block_rows - 1));
    return (int8_t *)(block_base(kv, which, i) + 4 * (size_t)g) + r * (size_t)width;
}

/* ------------------------------------------------------------------ write */

static void write_plain(const attn__kv *kv, int which, int width, int row0, int n, const float *x)
{
    for (int r = 0; r < n; r++) {
        const float *src = x + (size_t)r * width;
        char *dst = elem_at(kv, which, width, row0 + r, 0);
        if (kv->dtype == ATTN_KV_F32) {
            memcpy(dst, src, (size_t)width * sizeof *src);
        } else {
            uint16_t *d16 = (uint16_t *)dst;
            if (kv->dtype == ATTN_KV_F16)
                for (int c = 0; c < width; c++) d16[c] = to_f16(src[c]);
            else
                for (int c = 0; c < width; c++) d16[c] = to_bf16(src[c]);
        }
    }
}

/* INT8: rows [row0, row0+n) of one block (all in the block holding row0),
 * per KV head: the scale set (fresh block) or grown with requantisation. */
static void write_int8_block(const attn__kv *kv, int which, int g, int d, int row0, int n,
                             const float *x)
{
    const int width = g * d, first = row0 & ~(kv->block_rows - 1), old = row0 - first;
    float *scales = int8_scales(kv, which, row0);
    for (int j = 0; j < g; j++) {
        float m = 0.0f;
        for (int r = 0; r < n; r++)
            for (int c = 0; c < d; c++) {
                float a = fabsf(x[(size_t)r * width + (size_t)j * d + c]);
                if (a > m) m = a;
            }
        float s = m / 127.0f;
        if (old > 0) {
            const float s_old = scales[j];
            if (s > s_old) {
                if (s < 2.0f * s_old) s = 2.0f * s_old; /* growth at least doubles: bounded error */
                const double ratio = (double)s_old / (double)s;
                for (int r = first; r < row0; r++) {
                    int8_t *q = int8_row(kv, which, g, width, r) + (size_t)j * d;
                    for (int c = 0; c < d; c++) q[c] = (int8_t)nearbyint((double)q[c] * ratio);
                }
            } else {
                s = s_old;
            }
        }
        scales[j] = s;
        const float inv = s > 0.0f ? 1.0f / s : 0.0f;
        for (int r = 0; r < n; r++) {
            int8_t *q = int8_row(kv, which, g, width, row0 + r) + (size_t)j * d;
            const float *src = x + (size_t)r * width + (size_t)j * d;
            for (int c = 0; c < d; c++) q[c] = quant(src[c], inv);
        }
    }
}

static void write_rows(const attn_layer *l, const attn__kv *kv, int which, int row0, int n, const float *x)
{
    const int d = which ? l->d_v : l->d_k, width = l->g * d;
    if (kv->dtype != ATTN_KV_INT8) {
        write_plain(kv, which, width, row0, n, x);
        return;
    }
    for (int r = row0; r < row0 + n;) { /* block by block */
        const int end = (r & ~(kv->block_rows - 1)) + kv->block_rows, m = end < row0 + n ? end - r : row0 + n - r;
        write_int8_block(kv, which, l->g, d, r, m, x + (size_t)(r - row0) * width);
        r += m;
    }
}

void attn__kv_write(const attn_layer *l, const attn__kv *kv, int row0, int n, const float *k,
                    const float *v)
{
    write_rows(l, kv, 0, row0, n, k);
    write_rows(l, kv, 1, row0, n, v);
}

/* ------------------------------------------------------------------- read */

const float *attn__kv_rows(const attn_layer *l, const attn__kv *kv, int which, int j, int s0, int n,
                           float *buf, int *ld)
{
    const int d = which ? l->d_v : l->d_k, width = l->g * d;
    if (kv->dtype == ATTN_KV_F32 &&
        (kv->block_rows == 0 || (s0 >> kv->shift) == ((s0 + n - 1) >> kv->shift))) {
        *ld = width;
        return (const float *)elem_at(kv, which, width, s0, j * d);
    }
    const int ldb = attn__kv_tile_ld(l, which);
    *ld = ldb;
    for (int r = s0; r < s0 + n;) {
        /* a run of rows inside one block (the whole range when contiguous) */
        int m = s0 + n - r;
        if (kv->block_rows) {
            const int end = (r & ~(kv->block_rows - 1)) + kv->block_rows;
            if (end - r < m) m = end - r;
        }
        float *dst = buf + (size_t)(r - s0) * ldb;
        if (kv->dtype == ATTN_KV_INT8) {
            const float s = int8_scales(kv, which, r)[j];
            for (int i = 0; i < m; i++)
                from_int8(int8_row(kv, which, l->g, width, r + i) + (size_t)j * d, d, s, dst + (size_t)i * ldb);
        } else {
            for (int i = 0; i < m; i++) {
                const char *src = elem_at(kv, which, width, r + i, j * d);
                float *o = dst + (size_t)i * ldb;
                if (kv->dtype == ATTN_KV_F32) memcpy(o, src, (size_t)d * sizeof *o);
                else if (kv->dtype == ATTN_KV_F16) from_f16((const uint16_t *)src, d, o);
                else from_bf16((const uint16_t *)src, d, o);
            }
        }
        r += m;
    }
    return buf;
}

const void *attn__kv_run(const attn_layer *l, const attn__kv *kv, int which, int s0, int n, int *m,
                         size_t *stride, const float **scales)
{
    const int width = l->g * (which ? l->d_v : l->d_k);
    *m = n;
    if (kv->block_rows) {
        const int end = (s0 & ~(kv->block_rows - 1)) + kv->block_rows;
        if (end - s0 < n) *m = end - s0;
    }
    *stride = (size_t)width;
    *scales = NULL;
    if (kv->dtype != ATTN_KV_INT8) return elem_at(kv, which, width, s0, 0);
    *scales = int8_scales(kv, which, s0);
    return int8_row(kv, which, l->g, width, s0);
}

/* ----------------------------------------------------------------- public */

attn_status attn__kv_check_stride(const attn_layer *l, int dtype, int block_rows, size_t stride,
                                  const char *name, attn_error *err)
{
    size_t kb, vb;
    if (stride == 0) return ATTN_OK;
    if (block_rows == 0)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "%s = %zu is set but the cache is contiguous", name,
                               stride);
    if (!attn__kv_sizes(l, dtype, block_rows, &kb, &vb))
        return attn__set_error(err, ATTN_ERR_LIMIT, "a block of %d rows overflows", block_rows);
    if (stride % 4 != 0 || stride < kb || stride < vb)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "%s = %zu, must be a multiple of 4 and >= the block bytes (K %zu, V %zu)", name,
                               stride, kb, vb);
    return ATTN_OK;
}

static attn_status check_layout(const attn_layer *l, int dtype, int block_rows, const int32_t *table,
                                int check_table, attn_error *err)
{
    if (l == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "layer is NULL");
    if (dtype < ATTN_KV_F32 || dtype > ATTN_KV_INT8)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "dtype = %d is not a known attn_kv_dtype", dtype);
    if (block_rows < 0 || block_rows > 65536 || (block_rows & (block_rows - 1)) != 0)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "block_rows = %d, must be 0 (contiguous) or a power of two in [1, 65536]",
                               block_rows);
    if (dtype == ATTN_KV_INT8 && block_rows == 0)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "dtype INT8 needs a paged cache (block_rows > 0): its scales are per block");
    if (check_table && block_rows > 0 && table == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "block_table is NULL but block_rows = %d", block_rows);
    if (check_table && block_rows == 0 && table != NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "block_table is set but block_rows = 0 (contiguous)");
    size_t kb, vb;
    if (!attn__kv_sizes(l, dtype, block_rows, &kb, &vb))
        return attn__set_error(err, ATTN_ERR_LIMIT, "a block of %d rows overflows", block_rows);
    return ATTN_OK;
}

attn_status attn_kv_block_bytes(const attn_layer *layer, attn_kv_dtype dtype, int block_rows,
                                size_t *k_bytes, size_t *v_bytes, attn_error *err)
{
    attn_status st = check_layout(layer, (int)dtype, block_rows, NULL, 0, err);
    if (st != ATTN_OK) return st;
    if (k_bytes == NULL || v_bytes == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "%s is NULL", k_bytes ? "v_bytes" : "k_bytes");
    attn__kv_sizes(layer, (int)dtype, block_rows, k_bytes, v_bytes);
    return ATTN_OK;
}

static attn_status check_io(const attn_layer *l, const attn_kv_cache *c, int row0, int n, const void *k,
                            const void *v, attn_error *err)
{
    if (c == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "cache is NULL");
    attn_status st = check_layout(l, (int)c->dtype, c->block_rows, c->block_table, 1, err);
    if (st == ATTN_OK) st = attn__kv_check_stride(l, (int)c->dtype, c->block_rows, c->block_stride, "block_stride", err);
    if (st != ATTN_OK) return st;
    if (c->k == NULL || c->v == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "cache->%s is NULL", c->k ? "v" : "k");
    if (k == NULL || v == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "%s is NULL", k ? "v" : "k");
    if (row0 < 0 || n < 1 || (long long)row0 + n > INT32_MAX)
        return attn__set_error(err, ATTN_ERR_SHAPE, "rows [%d, %d + %d) are not a valid range", row0, row0, n);
    if (c->block_rows > 0)
        for (int b = row0 / c->block_rows; b <= (row0 + n - 1) / c->block_rows; b++)
            if (c->block_table[b] < 0)
                return attn__set_error(err, ATTN_ERR_INVALID_ARG, "block_table[%d] = %d, must be >= 0", b,
                                       (int)c->block_table[b]);
    return ATTN_OK;
}

static attn_status check_finite(const float *x, size_t rows, size_t width, const char *name, attn_error *err)
{
    for (size_t i = 0; i < rows * width; i++)
        if (!(fabsf(x[i]) <= FLT_MAX / 4))
            return attn__set_error(err, ATTN_ERR_NONFINITE, "%s[%zu][%zu] is not finite (or > FLT_MAX/4)",
                                   name, i / width, i % width);
    return ATTN_OK;
}

attn_status attn_kv_store(const attn_layer *layer, const attn_kv_cache *cache, int row0, int n,
                          const float *k, const float *v, attn_error *err)
{
    attn_status st = check_io(layer, cache, row0, n, k, v, err);
    if (st == ATTN_OK) st = check_finite(k, (size_t)n, (size_t)layer->kv_k_dim, "k", err);
    if (st == ATTN_OK) st = check_finite(v, (size_t)n, (size_t)layer->kv_v_dim, "v", err);
    if (st != ATTN_OK) return st;
    attn__kv kv;
    kv_init(layer, cache->k, cache->v, (int)cache->dtype, cache->block_rows, cache->block_table,
            cache->block_stride, &kv);
    attn__kv_write(layer, &kv, row0, n, k, v);
    return ATTN_OK;
}

attn_status attn_kv_load(const attn_layer *layer, const attn_kv_cache *cache, int row0, int n, float *k,
                         float *v, attn_error *err)
{
    attn_status st = check_io(layer, cache, row0, n, k, v, err);
    if (st != ATTN_OK) return st;
    attn__kv kv;
    kv_init(layer, cache->k, cache->v, (int)cache->dtype, cache->block_rows, cache->block_table,
            cache->block_stride, &kv);
    for (int w = 0; w < 2; w++) {
        const int d = w ? layer->d_v : layer->d_k, width = layer->g * d;
        float *out = w ? v : k;
        for (int r = 0; r < n; r++) /* row by row: head j's d elements into place */
            for (int j = 0; j < layer->g; j++) {
                int ld;
                float *dst = out + (size_t)r * width + (size_t)j * d;
                const float *src = attn__kv_rows(layer, &kv, w, j, row0 + r, 1, dst, &ld);
                if (src != dst) memcpy(dst, src, (size_t)d * sizeof *dst);
            }
    }
    return ATTN_OK;
}
