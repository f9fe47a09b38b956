/* streams.h — how many streams are active: a set of stream keys (a session's
 * identity, attnd_request.stream) with the time each was last seen, counted
 * over a recent window. Only for the opt-in --max-stream-wait-us: the decode
 * loop then asks it how many steps an iteration may still expect (closed-loop
 * streams send their next step right after their answer, so an iteration of
 * some of them waits briefly for the rest).
 *
 * Fixed capacity, no allocation: past ATTND_STREAMS_CAP keys alive at once the
 * count saturates (a batch's own request cap binds long before). Not
 * thread-safe: the scheduler calls it under its mutex. Knows no HTTP. */
#ifndef ATTND_STREAMS_H
#define ATTND_STREAMS_H

#include <stdint.h>

#define ATTND_STREAMS_CAP 1024 /* a power of two */

typedef struct attnd_streams {
    uint64_t key[ATTND_STREAMS_CAP];     /* 0 = empty slot */
    int64_t seen_ns[ATTND_STREAMS_CAP];
    int used;                            /* non-empty slots */
} attnd_streams;

/* Empties t. */
void attnd_streams_init(attnd_streams *t);

/* Stream `key` (nonzero) took a step at now_ns. A full table drops the key. */
void attnd_streams_seen(attnd_streams *t, uint64_t key, int64_t now_ns);

/* Streams seen within the last window_ns before now_ns; forgets older ones. */
int attnd_streams_active(attnd_streams *t, int64_t now_ns, int64_t window_ns);

#endif /* ATTND_STREAMS_H */
