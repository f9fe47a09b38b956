/* jsonload.h — jansson calls that tell bad JSON from no memory. Under
 * allocation failure jansson 2.14 reports most parse failures as syntax errors
 * ("string or '}' expected"), and worse, may succeed with a wrong result: a
 * parse drops characters of a key ("average_attn_wights"), a dump drops a key
 * and answers invalid JSON. attnd therefore gives jansson an allocator that
 * counts its failures per thread, and treats any call during which one failed
 * as out of memory.
 */
#ifndef ATTND_JSONLOAD_H
#define ATTND_JSONLOAD_H

#include <jansson.h>
#include <stddef.h>

/* Makes jansson allocate through the counting allocator (malloc/free). Call
 * once at start-up, before any thread uses jansson. */
void attnd_json_install_alloc(void);

/* Allocations jansson could not get on this thread so far: compare two
 * readings to learn whether jansson calls in between lacked memory. */
unsigned long attnd_json_alloc_failures(void);

/* json_loadb, NULL when an allocation failed during the parse (*nomem = 1: the
 * body may be fine, answer 500) or the text is not valid JSON (*nomem = 0: je
 * says what is wrong). */
json_t *attnd_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *je,
                         int *nomem);

/* json_dumps, NULL when an allocation failed during the dump. */
char *attnd_json_dumps(const json_t *j, size_t flags);

#endif
