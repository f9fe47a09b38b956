/* workspace.h — internal view of attn_workspace: one growable, 64-byte aligned
 * scratch block carved into named buffers per call, the options it was created
 * with, and (when n_threads > 1) the worker pool that computes with the caller.
 */
#ifndef ATTN_WORKSPACE_H
#define ATTN_WORKSPACE_H

#include "layer_internal.h"
#include "pool.h"

#define ATTN__BLOCK_Q_DEFAULT 128
/* Keys from which a default block_q doubles for an MHA layer. */
#define ATTN__LONG_KEYS 4096
#define ATTN__BLOCK_K_DEFAULT 256
#define ATTN__MAX_SCRATCH_DEFAULT ((size_t)64 << 20) /* attn_workspace_options.max_scratch_bytes */

struct attn_workspace {
    void *buf;   /* owned; 64-byte aligned; contents undefined between calls */
    size_t cap;  /* bytes available at buf */
    attn_workspace_options opt; /* resolved: n_threads >= 1, blocks > 0, max_scratch_bytes > 0 */
    attn__pool *pool;           /* owned; NULL when opt.n_threads == 1 */
    int block_q_auto;           /* the caller left opt.block_q 0: attn_forward may
                                   double it over long key ranges (forward.c) */
};

/* A workspace with default options and no pool, for a call given ws = NULL
 * (the caller frees ws->buf afterwards). */
void attn__ws_init_local(attn_workspace *ws);

#define ATTN__WS_ALIGN ((size_t)64)

/* Reserves room for a buffer of count*elem bytes at the end of a layout being
 * planned: *offset receives its (aligned) start, *total grows past it.
 * Returns 0 on size_t overflow (then *total and *offset are unspecified). */
int attn__ws_plan(size_t *total, size_t count, size_t elem, size_t *offset);

/* Makes ws hold at least `bytes`. The old contents are discarded. Returns
 * ATTN_OK, or ATTN_ERR_NOMEM with ws unchanged (still valid, old size). */
attn_status attn__ws_reserve(attn_workspace *ws, size_t bytes, attn_error *err);

#endif /* ATTN_WORKSPACE_H */
