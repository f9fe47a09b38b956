/* offload.h — a few threads that run the CPU-heavy parts of large requests
 * (decoding a big body, encoding a big response) away from the HTTP threads.
 *
 * An HTTP thread serves every connection it owns from one event loop: while it
 * parses a 2048-row JSON prefill (a million numbers, tens of milliseconds) the
 * decode steps of the other connections on that thread wait, whatever the
 * scheduler does. http.c suspends such a connection and posts its codec work
 * here; the task resumes the connection when it is done.
 *
 * Tasks are intrusive (the caller embeds an attnd_offload_task in its own
 * state), so posting never allocates and never fails for want of memory. It
 * knows nothing of HTTP: a task is a function and an argument.
 */
#ifndef ATTND_OFFLOAD_H
#define ATTND_OFFLOAD_H

#include <stddef.h>

typedef struct attnd_offload attnd_offload;

typedef struct attnd_offload_task {
    void (*run)(void *arg); /* runs on an offload thread, once           */
    void *arg;
    struct attnd_offload_task *next; /* the queue's; the caller leaves it */
} attnd_offload_task;

/* Starts n_threads (>= 1) threads. Returns NULL (err filled) on failure. */
attnd_offload *attnd_offload_start(int n_threads, char *err, size_t errlen);

/* Queues t (owned by the caller, untouched by it until t->run starts) to
 * run once, first in first out. Returns 0, or -1 when the pool is stopping or
 * NULL: the caller then does the work itself. Any thread. */
int attnd_offload_post(attnd_offload *o, attnd_offload_task *t);

/* Refuses new tasks, runs every queued one, joins the threads, frees o.
 * NULL allowed. */
void attnd_offload_stop(attnd_offload *o);

#endif
