/* pool.c — the worker pool behind threaded workspaces (see pool.h). Workers
 * claim tasks with an atomic counter, so uneven tasks (causal query blocks)
 * balance themselves. Between the calls of one forward they watch for the
 * next call for a few tens of microseconds (SPIN_ROUNDS pauses), then sleep
 * on a condition variable; the caller waits for the last worker the same way.
 * A forward runs several calls back to back (projections, positions,
 * attention, output): a wake-up through the kernel costs ~50-100 us in a VM,
 * more than many of those calls, so a short watch saves it. After a forward's
 * last call (attn__pool_rest) they sleep at once, leaving the cores to others
 * (the HTTP threads, other processes) when no call may follow for long.
 */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Pauses a watch lasts (~30-60 us: a pause is 40-140 cycles, by CPU). */
#define SPIN_ROUNDS 2048

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

struct attn__pool {
    int n_threads;         /* the caller + workers */
    int n_started;         /* workers actually running (for cleanup) */
    pthread_t *threads;    /* n_threads - 1 */
    pthread_mutex_t mu;
    pthread_cond_t wake;   /* a new generation of work, or shutdown */
    pthread_cond_t idle;   /* the last worker of a generation finished */
    _Atomic unsigned long gen; /* bumped by every attn__pool_run; written under mu */
    _Atomic int busy;      /* workers still inside the current generation; written under mu */
    _Atomic int resting;   /* no call follows soon (attn__pool_rest): workers sleep at once */
    int stop;
    /* the current parallel-for (written under mu before gen is bumped) */
    attn__task_fn fn;
    void *arg;
    int n_tasks;
    atomic_int next;       /* next unclaimed task */
    unsigned long runs;    /* attn__pool_run calls so far (caller's thread only) */
    int col_split;         /* attn__pool_col_split_memo's cell (caller's thread only) */
};

typedef struct worker_arg { attn__pool *pool; int id; } worker_arg;

static void drain(attn__pool *p, attn__task_fn fn, void *arg, int n_tasks, int worker)
{
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n_tasks) return;
        fn(arg, t, worker);
    }
}

static void *worker_main(void *v)
{
    worker_arg wa = *(worker_arg *)v;
    free(v);
    attn__pool *p = wa.pool;
    unsigned long seen = 0;
    for (;;) {
        for (int i = 0; i < SPIN_ROUNDS && atomic_load_explicit(&p->gen, memory_order_relaxed) == seen &&
                        !atomic_load_explicit(&p->resting, memory_order_relaxed);
             i++)
            cpu_relax();
        pthread_mutex_lock(&p->mu); /* the caller's unlock published the call */
        while (!p->stop && p->gen == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        attn__task_fn fn = p->fn;
        void *arg = p->arg;
        int n = p->n_tasks;
        pthread_mutex_unlock(&p->mu);
        drain(p, fn, arg, n, wa.id);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->idle);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void stop_workers(attn__pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    p->n_started = 0;
}

/* Starts the workers with all signals blocked (they inherit the creator's mask). */
static attn_status start_workers(attn__pool *p, attn_error *err)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    attn_status st = ATTN_OK;
    for (int i = 0; i < p->n_threads - 1; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa == NULL) {
            st = attn__set_error(err, ATTN_ERR_NOMEM, "allocating a pool worker");
            break;
        }
        *wa = (worker_arg){p, i + 1};
        int rc = pthread_create(&p->threads[i], NULL, worker_main, wa);
        if (rc != 0) {
            free(wa);
            st = attn__set_error(err, rc == EAGAIN ? ATTN_ERR_NOMEM : ATTN_ERR_INTERNAL,
                                 "starting pool thread %d of %d failed (error %d)", i + 1,
                                 p->n_threads - 1, rc);
            break;
        }
        p->n_started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return st;
}

attn_status attn__pool_create(int n_threads, attn__pool **out, attn_error *err)
{
    *out = NULL;
    if (n_threads < 2) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "pool of %d threads", n_threads);
    attn_status st;
    int have_mu = 0, have_wake = 0, have_idle = 0;
    attn__pool *p = calloc(1, sizeof *p);
    if (p == NULL) goto nomem;
    p->n_threads = n_threads;
    if ((p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads)) == NULL) goto nomem;
    if (!(have_mu = pthread_mutex_init(&p->mu, NULL) == 0)) goto nomem;
    if (!(have_wake = pthread_cond_init(&p->wake, NULL) == 0)) goto nomem;
    if (!(have_idle = pthread_cond_init(&p->idle, NULL) == 0)) goto nomem;
    atomic_init(&p->next, 0);
    if ((st = start_workers(p, err)) != ATTN_OK) goto fail;
    *out = p;
    return ATTN_OK;

nomem:
    st = attn__set_error(err, ATTN_ERR_NOMEM, "allocating a pool of %d threads", n_threads);
fail:
    if (p != NULL) {
        if (p->n_started > 0) stop_workers(p);
        if (have_idle) pthread_cond_destroy(&p->idle);
        if (have_wake) pthread_cond_destroy(&p->wake);
        if (have_mu) pthread_mutex_destroy(&p->mu);
        free(p->threads);
        free(p);
    }
    return st;
}

void attn__pool_free(attn__pool *p)
{
    if (p == NULL) return;
    stop_workers(p);
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

int attn__pool_threads(const attn__pool *p) { return p->n_threads; }

unsigned long attn__pool_runs(const attn__pool *p) { return p->runs; }

int *attn__pool_col_split_memo(attn__pool *p) { return &p->col_split; }

void attn__pool_run(attn__pool *p, int n_tasks, attn__task_fn fn, void *arg)
{
    if (n_tasks <= 0) return;
    p->runs++;
    atomic_store_explicit(&p->resting, 0, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->busy = p->n_started;
    p->gen++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    drain(p, fn, arg, n_tasks, 0);

    for (int i = 0; i < SPIN_ROUNDS && atomic_load_explicit(&p->busy, memory_order_relaxed) > 0; i++)
        cpu_relax();
    pthread_mutex_lock(&p->mu); /* the workers' unlock publishes their writes */
    while (p->busy > 0) pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void attn__pool_rest(attn__pool *p)
{
    atomic_store_explicit(&p->resting, 1, memory_order_relaxed);
}
