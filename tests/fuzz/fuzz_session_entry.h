/* fuzz_session_entry.h — the body of the session-file fuzz target
 * (tests/fuzz/fuzz_session.c), shared with its replay in
 * tests/unit/test_fuzz_replay.c: arbitrary bytes through attnd_persist_parse,
 * the reader of --session-dir files (server/engine/persist.h), as they are and
 * resealed (the last 8 bytes replaced by the checksum of the rest, so that the
 * fuzzer reaches the structure checks behind the checksum).
 */
#ifndef ATTND_FUZZ_SESSION_ENTRY_H
#define ATTND_FUZZ_SESSION_ENTRY_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/persist.h"
#include "fuzz_entry.h"

/* One parse: a refusal has a reason and leaves *out empty; an acceptance is
 * what persist.h promises (caches inside the buffer, in order, counts that
 * agree). *ok gets 1 when it parsed. */
static inline int fuzz_session_parse(const uint8_t *data, size_t size, int *ok, char *bug)
{
    attnd_saved_session s;
    char why[400] = "";
    memset(&s, 0xa5, sizeof s); /* must be reset either way */
    *ok = attnd_persist_parse(data, size, &s, why, sizeof why) == 0;
    if (!*ok) {
        FUZZ_REQUIRE(why[0] != '\0' && memchr(why, '\0', sizeof why), bug,
                     "refused without a reason");
        FUZZ_REQUIRE(s.caches == NULL && s.n_caches == 0, bug, "refused (%s) but *out holds caches",
                     why);
        return 0;
    }
    int rc = -1;
    if (!memchr(s.id, '\0', sizeof s.id) || !memchr(s.model, '\0', sizeof s.model) ||
        !memchr(s.replica, '\0', sizeof s.replica)) {
        fuzz_set_bug(bug, "accepted with a string that is not terminated");
        goto done;
    }
    if (s.n_caches != (s.n_layers ? s.n_layers : 1) || !s.caches || s.ttl_s < 1 || s.window < 0 ||
        s.idle_ns < 0) {
        fuzz_set_bug(bug, "accepted %d caches for %d layers (ttl_s %d, window %d)", s.n_caches,
                     s.n_layers, s.ttl_s, s.window);
        goto done;
    }
    const uint8_t *at = data;
    for (int i = 0; i < s.n_caches; i++) {
        const attnd_saved_cache *c = &s.caches[i];
        size_t bytes = (size_t)c->n_blocks * c->block_bytes;
        if (c->data < at || c->data > data + size || bytes > (size_t)(data + size - c->data) ||
            (int64_t)c->n_blocks * c->block_rows < c->rows || c->k_block_bytes >= c->block_bytes ||
            c->rows < 0 || c->length < 0 || (s.kind == 0 && c->rows > c->length) ||
            !memchr(c->model, '\0', sizeof c->model)) {
            fuzz_set_bug(bug, "accepted cache %d: %d blocks of %zu bytes (%d rows each) for %d "
                         "rows, length %lld, outside or out of order", i, c->n_blocks,
                         c->block_bytes, c->block_rows, c->rows, (long long)c->length);
            goto done;
        }
        at = c->data + bytes;
    }
    rc = 0;
done:
    attnd_saved_free(&s);
    return rc;
}

/* The target: data as it is, then resealed. *parsed (may be NULL) gets
 * whether data itself parsed. */
static inline int fuzz_session_one(const uint8_t *data, size_t size, int *parsed, char *bug)
{
    int ok = 0;
    if (fuzz_session_parse(data, size, &ok, bug) != 0)
        return -1;
    if (parsed)
        *parsed = ok;
    if (size < 8)
        return 0;
    uint8_t *copy = malloc(size);
    FUZZ_REQUIRE(copy != NULL, bug, "harness out of memory");
    memcpy(copy, data, size);
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i + 8 < size; i++)
        h = (h ^ copy[i]) * UINT64_C(0x100000001b3);
    for (int i = 0; i < 8; i++)
        copy[size - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
    int rc = fuzz_session_parse(copy, size, &ok, bug);
    free(copy);
    return rc;
}

#endif
