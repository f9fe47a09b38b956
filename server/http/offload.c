/* offload.c — the codec threads of offload.h: one mutex, one FIFO of
 * intrusive tasks, threads that sleep on a condition variable until a task is
 * queued or the pool stops (it then runs what is queued before they exit).
 */
#include "http/offload.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct attnd_offload {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    attnd_offload_task *head, *tail; /* guarded by mu */
    int stopping;                    /* guarded by mu */
    int n_threads;                   /* started       */
    pthread_t *threads;
};

/* The next task, or NULL once stopping with nothing queued. */
static attnd_offload_task *take(attnd_offload *o)
{
    pthread_mutex_lock(&o->mu);
    while (!o->head && !o->stopping)
        pthread_cond_wait(&o->cv, &o->mu);
    attnd_offload_task *t = o->head;
    if (t) {
        o->head = t->next;
        if (!o->head)
            o->tail = NULL;
    }
    pthread_mutex_unlock(&o->mu);
    return t;
}

static void *offload_main(void *arg)
{
    attnd_offload *o = arg;
    for (attnd_offload_task *t; (t = take(o)) != NULL;) {
        t->next = NULL;
        t->run(t->arg); /* t may be freed by its own run: not touched after */
    }
    return NULL;
}

static void free_pool(attnd_offload *o)
{
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    free(o->threads);
    free(o);
}

attnd_offload *attnd_offload_start(int n_threads, char *err, size_t errlen)
{
    attnd_offload *o = calloc(1, sizeof *o);
    pthread_t *th = n_threads > 0 ? calloc((size_t)n_threads, sizeof *th) : NULL;
    if (!o || !th) {
        snprintf(err, errlen, n_threads > 0 ? "out of memory" : "offload threads must be >= 1");
        free(o);
        free(th);
        return NULL;
    }
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->threads = th;
    for (; o->n_threads < n_threads; o->n_threads++)
        if (pthread_create(&th[o->n_threads], NULL, offload_main, o) != 0) {
            snprintf(err, errlen, "cannot start offload thread %d of %d", o->n_threads + 1, n_threads);
            attnd_offload_stop(o);
            return NULL;
        }
    return o;
}

int attnd_offload_post(attnd_offload *o, attnd_offload_task *t)
{
    if (!o)
        return -1;
    pthread_mutex_lock(&o->mu);
    int ok = !o->stopping;
    if (ok) {
        t->next = NULL;
        if (o->tail)
            o->tail->next = t;
        else
            o->head = t;
        o->tail = t;
        pthread_cond_signal(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return ok ? 0 : -1;
}

void attnd_offload_stop(attnd_offload *o)
{
    if (!o)
        return;
    pthread_mutex_lock(&o->mu);
    o->stopping = 1;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    for (int i = 0; i < o->n_threads; i++)
        pthread_join(o->threads[i], NULL);
    free_pool(o);
}
