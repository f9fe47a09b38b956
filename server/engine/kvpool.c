/* kvpool.c — the KV page pool (kvpool.h): one anonymous mapping, a stack of
 * free page numbers and a reference count per page. The stack hands out the
 * lowest pages first and reuses the most recently freed, so the pages ever
 * touched (the resident part) stay as few as the peak use.
 */
#include "engine/kvpool.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct attnd_kvpool {
    char *base;
    size_t page_bytes, map_bytes;
    int n_pages;
    int n_free;
    int32_t *free_stack; /* free_stack[0 .. n_free) are free; the top is used next */
    uint32_t *refs;
};

/* The mapping, 2 MiB aligned and madvise(MADV_HUGEPAGE)d: with transparent
 * huge pages in `madvise` mode (the usual default) the decode kernel then
 * streams K/V through 2 MiB pages, not 4 KiB ones (fewer TLB misses, and the
 * hardware prefetchers are not stopped at every 4 KiB). Pages are still
 * only backed when first touched, 2 MiB at a time. ATTND_KV_HUGEPAGE=0 keeps
 * 4 KiB pages. NULL when the mapping fails. */
static char *map_pool(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    const char *env = getenv("ATTND_KV_HUGEPAGE");
    const int want = !(env && strcmp(env, "0") == 0) && bytes >= huge && bytes <= SIZE_MAX - huge;
    const size_t span = want ? bytes + huge : bytes;
    char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return NULL;
    if (!want) return m;
    const size_t head = (huge - (uintptr_t)m % huge) % huge;
    if (head) munmap(m, head);
    if (span - head > bytes) munmap(m + head + bytes, span - head - bytes);
    (void)madvise(m + head, bytes, MADV_HUGEPAGE); /* a hint: refused, the pool keeps 4 KiB pages */
    return m + head;
}

attnd_kvpool *attnd_kvpool_create(size_t total_bytes, size_t page_bytes, char *err, size_t errlen)
{
    if (page_bytes < 4 || page_bytes % 4 != 0) {
        snprintf(err, errlen, "KV page size %zu bytes: must be a multiple of 4", page_bytes);
        return NULL;
    }
    size_t n = total_bytes / page_bytes;
    if (n < 1 || n > INT32_MAX) {
        snprintf(err, errlen, "a KV cache of %zu bytes holds %zu pages of %zu bytes: must be 1..%d",
                 total_bytes, n, page_bytes, INT32_MAX);
        return NULL;
    }
    attnd_kvpool *p = calloc(1, sizeof *p);
    if (!p) goto nomem;
    p->page_bytes = page_bytes;
    p->n_pages = p->n_free = (int)n;
    p->map_bytes = n * page_bytes;
    p->free_stack = malloc(n * sizeof *p->free_stack);
    p->refs = calloc(n, sizeof *p->refs);
    p->base = map_pool(p->map_bytes);
    if (!p->free_stack || !p->refs || !p->base) {
        attnd_kvpool_free(p);
        goto nomem;
    }
    for (size_t i = 0; i < n; i++) /* page 0 on top */
        p->free_stack[i] = (int32_t)(n - 1 - i);
    return p;
nomem:
    snprintf(err, errlen, "cannot map a KV cache of %zu bytes (out of memory or address space)", total_bytes);
    return NULL;
}

void attnd_kvpool_free(attnd_kvpool *p)
{
    if (!p) return;
    if (p->base) munmap(p->base, p->map_bytes);
    free(p->free_stack);
    free(p->refs);
    free(p);
}

size_t attnd_kvpool_page_bytes(const attnd_kvpool *p) { return p->page_bytes; }
int attnd_kvpool_pages(const attnd_kvpool *p) { return p->n_pages; }
int attnd_kvpool_free_pages(const attnd_kvpool *p) { return p->n_free; }
char *attnd_kvpool_base(const attnd_kvpool *p) { return p->base; }

int attnd_kvpool_alloc(attnd_kvpool *p, int32_t *page)
{
    if (p->n_free == 0) return -1;
    *page = p->free_stack[--p->n_free];
    p->refs[*page] = 1;
    return 0;
}

void attnd_kvpool_retain(attnd_kvpool *p, int32_t page) { p->refs[page]++; }

int attnd_kvpool_release(attnd_kvpool *p, int32_t page)
{
    if (--p->refs[page] == 0) p->free_stack[p->n_free++] = page;
    return (int)p->refs[page];
}

int attnd_kvpool_refs(const attnd_kvpool *p, int32_t page) { return (int)p->refs[page]; }

/* The number in a cgroup limit file, or 0 when absent / "max" / unreadable. */
static size_t cgroup_limit(const char *path)
{
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    if (!f) return 0;
    if (fscanf(f, "%llu", &v) != 1) v = 0;
    fclose(f);
    return (size_t)v;
}

size_t attnd_kvpool_default_bytes(size_t *limit, const char **from)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t mem = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : (size_t)1 << 30;
    const char *src = "physical memory";
    size_t cg = cgroup_limit("/sys/fs/cgroup/memory.max");
    if (cg == 0) cg = cgroup_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    if (cg > 0 && cg < mem) {
        mem = cg;
        src = "the cgroup's memory limit";
    }
    if (limit) *limit = mem;
    if (from) *from = src;
    return mem / ATTND_KVPOOL_DEFAULT_SHARE;
}
