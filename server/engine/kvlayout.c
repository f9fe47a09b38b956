/* kvlayout.c — KV blocks on pages (kvlayout.h). */
#include "engine/kvlayout.h"

/* K and V bytes of a block of rows rows, the V block aligned to 4. 0 on overflow. */
static size_t block_page_bytes(const attn_layer *l, attn_kv_dtype dtype, int rows, size_t *v_offset,
                               size_t *v_bytes)
{
    size_t kb, vb;
    if (attn_kv_block_bytes(l, dtype, rows, &kb, &vb, NULL) != ATTN_OK) return 0;
    *v_offset = (kb + 3) / 4 * 4;
    *v_bytes = vb;
    return *v_offset + vb;
}

int attnd_kv_geometry_fit(const attn_layer *l, attn_kv_dtype dtype, size_t page_bytes,
                          attnd_kv_geometry *out, size_t *row_bytes)
{
    size_t off, vb;
    if (row_bytes) *row_bytes = block_page_bytes(l, dtype, 1, &off, &vb);
    for (int rows = 65536; rows >= 1; rows /= 2) {
        size_t need = block_page_bytes(l, dtype, rows, &off, &vb);
        if (need > 0 && need <= page_bytes) {
            out->block_rows = rows;
            out->v_offset = off;
            out->v_bytes = vb;
            return 0;
        }
    }
    return -1;
}

size_t attnd_kv_page_wish(const attn_layer *l, attn_kv_dtype dtype)
{
    size_t off, vb, need = 0;
    for (int rows = ATTND_KV_MIN_BLOCK_ROWS; rows <= 65536; rows *= 2) {
        need = block_page_bytes(l, dtype, rows, &off, &vb);
        if (need == 0 || need >= ATTND_KV_MIN_PAGE) break;
    }
    return need;
}
