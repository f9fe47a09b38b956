/* persist.h — sessions that survive a restart (--session-dir): on a graceful
 * stop every live session is written to DIR/<id>.sess (its cache pages in
 * their KV dtype, lengths, TTL left, model name and a fingerprint of its
 * weights, the replica's name), each to a temporary name, fsynced and renamed;
 * at start-up the files are read back under the same ids when their models are
 * unchanged, and every other file is skipped with one log line. A file is
 * parsed by attnd_persist_parse alone, which trusts nothing in it (a checksum
 * over the whole, every count bounded by what follows): truncated, corrupt or
 * foreign files are refused with a reason, never a crash. No HTTP here.
 *
 * File layout (little-endian): "ATTNDSES", u32 version (1), u32 flags (0);
 * strings (u16 length, bytes) id, replica, model (a group's name for a
 * sequence); u32 kind, i32 window, i32 ttl_s, i64 idle ns, u32 query_limit
 * (float bits), u32 n_layers (0 = a single-layer session), u32 caches (1, or
 * n_layers); per cache: string model, u64 weights hash, u32 kv dtype, u32
 * block_rows, u64 k_block_bytes, u64 block_bytes, i64 length, u32 rows, u32
 * n_blocks, then n_blocks × block_bytes of pages; last a u64 FNV-1a of every
 * byte before it.
 */
#ifndef ATTND_PERSIST_H
#define ATTND_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "engine/models.h"
#include "engine/sessions.h"

#define ATTND_PERSIST_VERSION 1
#define ATTND_PERSIST_SUFFIX ".sess"

/* One cache of a parsed file; data points into the parsed buffer. */
typedef struct attnd_saved_cache {
    char model[80];
    uint64_t weights_hash;
    int kv_dtype;
    int block_rows;
    size_t k_block_bytes, block_bytes;
    int64_t length;
    int rows, n_blocks;
    const unsigned char *data; /* n_blocks × block_bytes */
} attnd_saved_cache;

/* A parsed session file. Free with attnd_saved_free. */
typedef struct attnd_saved_session {
    char id[ATTND_SESSION_ID_MAX + 1];
    char replica[ATTND_REPLICA_NAME_MAX + 1];
    char model[80];
    int kind, window, ttl_s;
    int64_t idle_ns;
    float query_limit;
    int n_layers;              /* 0: a single-layer session                     */
    int n_caches;              /* 1, or n_layers                                */
    attnd_saved_cache *caches; /* owned                                         */
} attnd_saved_session;

/* Parses len bytes of a session file into *out (its caches' data point into
 * buf, which must outlive *out). Returns 0, or -1 with why (a sentence naming
 * what is wrong: truncated, checksum, an out of range field) and *out empty. */
int attnd_persist_parse(const void *buf, size_t len, attnd_saved_session *out, char *why,
                        size_t whylen);
void attnd_saved_free(attnd_saved_session *s);

/* The file image of session s (idle idle_ns; models' hashes via hash(model)),
 * malloc'd, *len its size; NULL on no memory. Called under the store's lock
 * (attnd_sessions_foreach). */
unsigned char *attnd_persist_encode(const attnd_sessions *st, const attnd_session *s,
                                    int64_t idle_ns, const char *replica,
                                    uint64_t (*hash)(void *ctx, const attnd_model *m), void *ctx,
                                    size_t *len);

/* Writes every live idle session into cfg->session_dir (made when missing;
 * sessions past cfg->session_dir_max_bytes, least recently used first, are
 * not written), each file to a temporary name, fsynced, renamed; logs what it
 * saved. Returns the number saved, or -1 when the directory is unusable. */
int attnd_persist_save(attnd_sessions *st, const attnd_config *cfg);

/* Reads back every DIR/<id>.sess into st: those whose replica, models (name,
 * weights hash, kv dtype, KV page geometry) still match, under the same ids,
 * most recently used first while there is room; every other file is skipped
 * with one log line naming it and why. Each file read is removed. Returns the
 * number restored, or -1 when the directory is unusable. */
int attnd_persist_load(attnd_sessions *st, attnd_models *ms, const attnd_config *cfg);

#endif
