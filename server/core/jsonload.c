/* jsonload.c — jansson's counting allocator and the calls that use it
 * (jsonload.h). */
#include "core/jsonload.h"

#include <stdlib.h>

/* Allocations jansson could not get on this thread, ever. */
static _Thread_local unsigned long failures;

static void *counting_malloc(size_t n)
{
    void *p = malloc(n);
    failures += p == NULL;
    return p;
}

static void plain_free(void *p) { free(p); }

void attnd_json_install_alloc(void) { json_set_alloc_funcs(counting_malloc, plain_free); }

unsigned long attnd_json_alloc_failures(void) { return failures; }

json_t *attnd_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *je,
                         int *nomem)
{
    unsigned long before = failures;
    json_t *root = json_loadb(buf, len, flags, je);
    *nomem = failures != before || (!root && json_error_code(je) == json_error_out_of_memory);
    if (*nomem) {
        json_decref(root); /* it may hold mangled keys or strings */
        root = NULL;
    }
    return root;
}

char *attnd_json_dumps(const json_t *j, size_t flags)
{
    unsigned long before = failures;
    char *s = json_dumps(j, flags);
    if (s && failures != before) {
        free(s);
        s = NULL;
    }
    return s;
}
