/* streams.c — the recent-stream counter (see streams.h): open addressing with
 * linear probing over a fixed table; stale keys are dropped when counted, by
 * rebuilding the table from the live ones (tombstone-free). */
#include "engine/streams.h"

#include <string.h>

static unsigned slot_of(uint64_t key)
{
    key ^= key >> 33; /* a pointer's low bits are alignment: mix the high ones in */
    key *= UINT64_C(0xff51afd7ed558ccd);
    key ^= key >> 33;
    return (unsigned)key & (ATTND_STREAMS_CAP - 1);
}

void attnd_streams_init(attnd_streams *t) { memset(t, 0, sizeof *t); }

void attnd_streams_seen(attnd_streams *t, uint64_t key, int64_t now_ns)
{
    if (key == 0) return;
    for (unsigned i = slot_of(key), n = 0; n < ATTND_STREAMS_CAP; i = (i + 1) & (ATTND_STREAMS_CAP - 1), n++) {
        if (t->key[i] == key) {
            t->seen_ns[i] = now_ns;
            return;
        }
        if (t->key[i] == 0) {
            if (t->used >= ATTND_STREAMS_CAP - ATTND_STREAMS_CAP / 4) return; /* keep probes short */
            t->key[i] = key;
            t->seen_ns[i] = now_ns;
            t->used++;
            return;
        }
    }
}

int attnd_streams_active(attnd_streams *t, int64_t now_ns, int64_t window_ns)
{
    uint64_t live_key[ATTND_STREAMS_CAP];
    int64_t live_ns[ATTND_STREAMS_CAP];
    int live = 0;
    for (int i = 0; i < ATTND_STREAMS_CAP; i++)
        if (t->key[i] != 0 && now_ns - t->seen_ns[i] <= window_ns) {
            live_key[live] = t->key[i];
            live_ns[live++] = t->seen_ns[i];
        }
    if (live == t->used) return live; /* nothing to forget */
    attnd_streams_init(t);
    for (int i = 0; i < live; i++) attnd_streams_seen(t, live_key[i], live_ns[i]);
    return live;
}
