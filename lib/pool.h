/* pool.h — a fixed pool of worker threads for attn_forward: created once (per
 * workspace), then reused for every call; the calling thread works too. One
 * parallel-for at a time; tasks are claimed dynamically from a shared counter.
 */
#ifndef ATTN_POOL_H
#define ATTN_POOL_H

#include "layer_internal.h"

typedef struct attn__pool attn__pool;

/* Runs task `task` (0 <= task < n_tasks) on worker `worker` (0 = the caller,
 * 1..n_threads-1 = the pool's threads). Must not fail. */
typedef void (*attn__task_fn)(void *arg, int task, int worker);

/* Starts n_threads - 1 workers (n_threads >= 2), which sleep until work comes.
 * Workers start with every signal blocked, so the application's signal handling
 * is unchanged. On success *out owns the pool (attn__pool_free); on failure
 * *out is NULL, no thread is left running and err says why (NOMEM, INTERNAL). */
attn_status attn__pool_create(int n_threads, attn__pool **out, attn_error *err);

/* Stops and joins every worker, frees the pool. NULL allowed. Must not be
 * called while attn__pool_run is running. */
void attn__pool_free(attn__pool *pool);

int attn__pool_threads(const attn__pool *pool);

/* forward.c's memo, kept per pool: whether column chunks of an sgemm round as
 * the whole sgemm on this OpenBLAS kernel (attn__col_split_exact); 0 until
 * first asked, then 1 or -1. The caller's thread only, like attn__pool_run. */
int *attn__pool_col_split_memo(attn__pool *pool);

/* How many attn__pool_run calls the pool has served (for tests). */
unsigned long attn__pool_runs(const attn__pool *pool);

/* Calls fn(arg, task, worker) once for every task in [0, n_tasks), spread over
 * the caller and the workers; returns when all have finished (the finished
 * tasks' writes are visible to the caller). Tasks are claimed in index order,
 * so put the largest first. One call at a time per pool. */
void attn__pool_run(attn__pool *pool, int n_tasks, attn__task_fn fn, void *arg);

/* No call follows soon (the end of a forward): workers stop watching for one
 * and sleep until the next attn__pool_run. Caller's thread only. */
void attn__pool_rest(attn__pool *p);

#endif /* ATTN_POOL_H */
