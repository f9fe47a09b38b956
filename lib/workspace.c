/* workspace.c — scratch and threads for attn_forward: the buffer grows on
 * demand and is kept across calls so steady-state forwards do not allocate; the
 * pool (threaded workspaces) is started once, here, and stopped on free.
 */
#include "workspace.h"

#include <stdlib.h>
#include <unistd.h>

/* Fills in defaults; returns 0 with err set when an option is out of range. */
static int resolve_options(attn_workspace_options *o, attn_error *err)
{
    if (o->n_threads == -1) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->n_threads = n < 1 ? 1 : n > 256 ? 256 : (int)n;
    }
    if (o->n_threads == 0) o->n_threads = 1;
    if (o->block_q == 0) o->block_q = ATTN__BLOCK_Q_DEFAULT;
    if (o->block_k == 0) o->block_k = ATTN__BLOCK_K_DEFAULT;
    if (o->max_scratch_bytes == 0) o->max_scratch_bytes = ATTN__MAX_SCRATCH_DEFAULT;
    if (o->n_threads < 1 || o->n_threads > 1024) {
        attn__set_error(err, ATTN_ERR_INVALID_ARG, "opts.n_threads = %d, must be -1 or 0..1024",
                        o->n_threads);
        return 0;
    }
    if (o->kernel < ATTN_KERNEL_AUTO || o->kernel > ATTN_KERNEL_FUSED) {
        attn__set_error(err, ATTN_ERR_INVALID_ARG, "opts.kernel = %d is not an attn_kernel",
                        (int)o->kernel);
        return 0;
    }
    if (o->block_q < 1 || o->block_q > 4096 || o->block_k < 1 || o->block_k > 65536) {
        attn__set_error(err, ATTN_ERR_INVALID_ARG,
                        "opts.block_q = %d / block_k = %d out of range (1..4096 / 1..65536)",
                        o->block_q, o->block_k);
        return 0;
    }
    return 1;
}

void attn__ws_init_local(attn_workspace *ws)
{
    *ws = (attn_workspace){0};
    resolve_options(&ws->opt, NULL); /* all defaults: cannot fail */
    ws->block_q_auto = 1;
}

attn_status attn_workspace_create(const attn_workspace_options *opts, attn_workspace **out,
                                  attn_error *err)
{
    if (out == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    attn_workspace_options o = {0};
    if (opts != NULL) o = *opts;
    if (!resolve_options(&o, err)) return ATTN_ERR_INVALID_ARG;
    attn_workspace *ws = calloc(1, sizeof *ws); /* empty buffer: grows on first use */
    if (ws == NULL) return attn__set_error(err, ATTN_ERR_NOMEM, "allocating a workspace");
    ws->opt = o;
    ws->block_q_auto = opts == NULL || opts->block_q == 0;
    if (o.n_threads > 1) {
        attn_status st = attn__pool_create(o.n_threads, &ws->pool, err);
        if (st != ATTN_OK) {
            free(ws);
            return st;
        }
    }
    *out = ws;
    return ATTN_OK;
}

void attn_workspace_get_options(const attn_workspace *ws, attn_workspace_options *opts)
{
    *opts = ws->opt;
}

void attn_workspace_free(attn_workspace *ws)
{
    if (ws == NULL) return;
    attn__pool_free(ws->pool);
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
