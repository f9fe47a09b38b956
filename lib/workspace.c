/* workspace.c — per-thread scratch for attn_forward: grows on demand, is kept
 * across calls so steady-state forwards do not allocate.
 */
#include "workspace.h"

#include <stdlib.h>

attn_workspace *attn_workspace_create(void)
{
    return calloc(1, sizeof(attn_workspace)); /* empty: grows on first use */
}

void attn_workspace_free(attn_workspace *ws)
{
    if (ws == NULL) return;
    free(ws->buf);
    free(ws);
}

int attn__ws_plan(size_t *total, size_t count, size_t elem, size_t *offset)
{
    size_t bytes, start;
    if (!attn__mul_size(count, elem, &bytes)) return 0;
    if (!attn__add_size(*total, ATTN__WS_ALIGN - 1, &start)) return 0;
    start &= ~(ATTN__WS_ALIGN - 1);
    if (!attn__add_size(start, bytes, total)) return 0;
    *offset = start;
    return 1;
}

attn_status attn__ws_reserve(attn_workspace *ws, size_t bytes, attn_error *err)
{
    if (bytes <= ws->cap) return ATTN_OK;
    /* Grow by at least 1.5x so a slowly growing batch size does not realloc
     * every call; round to the alignment aligned_alloc requires. */
    size_t want = bytes;
    if (ws->cap <= SIZE_MAX / 3 && ws->cap + ws->cap / 2 > want) want = ws->cap + ws->cap / 2;
    if (want > SIZE_MAX - (ATTN__WS_ALIGN - 1))
        return attn__set_error(err, ATTN_ERR_LIMIT, "scratch of %zu bytes is too large", bytes);
    want = (want + ATTN__WS_ALIGN - 1) & ~(ATTN__WS_ALIGN - 1);
    void *p = aligned_alloc(ATTN__WS_ALIGN, want);
    if (p == NULL)
        return attn__set_error(err, ATTN_ERR_NOMEM, "allocating %zu bytes of scratch", want);
    free(ws->buf);
    ws->buf = p;
    ws->cap = want;
    return ATTN_OK;
}
