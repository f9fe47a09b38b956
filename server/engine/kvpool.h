/* kvpool.h — the page pool behind every session's KV cache: one mapping of
 * equal pages (each holds one block of K rows and one of V rows of one
 * session, see sessions.h), handed out and taken back in O(1), each with a
 * reference count so that forks share pages copy-on-write and a shared page
 * is counted once. The pool is the KV budget: --kv-cache-bytes / page bytes
 * pages, no more, no less. Pages are mapped lazily (MAP_NORESERVE): memory is
 * committed when a page is first written, and stays committed after it is
 * freed, so resident KV memory never exceeds the pool.
 *
 * Not thread-safe: the session store calls it under its lock. No HTTP, no
 * sessions: it knows pages and counts only.
 */
#ifndef ATTND_KVPOOL_H
#define ATTND_KVPOOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct attnd_kvpool attnd_kvpool;

/* The default pool: a quarter of the memory this process may use, the
 * smaller of physical memory and the cgroup's limit (cgroup v2 memory.max,
 * or v1 memory.limit_in_bytes). *limit (may be NULL) gets that memory and
 * *from ("physical memory" or "the cgroup's memory limit") its source. */
#define ATTND_KVPOOL_DEFAULT_SHARE 4 /* 1/4 */
size_t attnd_kvpool_default_bytes(size_t *limit, const char **from);

/* A pool of total_bytes / page_bytes pages (page_bytes a multiple of 4, >= 4;
 * at least one page, at most INT32_MAX). Returns NULL with err (no memory, or
 * a size out of range). */
attnd_kvpool *attnd_kvpool_create(size_t total_bytes, size_t page_bytes, char *err, size_t errlen);

/* Unmaps the pool. NULL allowed. Every page pointer dies with it. */
void attnd_kvpool_free(attnd_kvpool *p);

size_t attnd_kvpool_page_bytes(const attnd_kvpool *p);
int attnd_kvpool_pages(const attnd_kvpool *p);      /* pages in all             */
int attnd_kvpool_free_pages(const attnd_kvpool *p); /* pages not referenced     */

/* The start of page 0; page i starts page_bytes * i bytes later. */
char *attnd_kvpool_base(const attnd_kvpool *p);

/* Takes a free page (reference count 1) into *page. Returns 0, or -1 when none is free. */
int attnd_kvpool_alloc(attnd_kvpool *p, int32_t *page);

/* One more reference to a page in use (a fork shares it). */
void attnd_kvpool_retain(attnd_kvpool *p, int32_t page);

/* Drops one reference; the page is free again at zero. Returns the count left. */
int attnd_kvpool_release(attnd_kvpool *p, int32_t page);

/* References to a page (0 = free). */
int attnd_kvpool_refs(const attnd_kvpool *p, int32_t page);

#endif
