/* load_reqgen.h — the pool of pre-built request bodies attnd-load sends, each with the shape
 * its response must have. Built once before the run (seeded PRNG), so generating JSON is never
 * part of what is measured. */
#ifndef ATTND_LOAD_REQGEN_H
#define ATTND_LOAD_REQGEN_H

#include <stddef.h>

#include "load_args.h"
#include "load_check.h"

/* Widths of the target model (ModelInfo's embed_q/k/v/out, num_heads); layers > 0 for a
 * model group (GET /v1/models/NAME says kind "group": its first layer's widths), whose
 * sessions are sequences: --sessions appends to every layer per step. */
typedef struct load_model {
    int embed_q, embed_k, embed_v, embed_out, heads;
    int layers;
} load_model;

typedef struct load_req {
    char *body;          /* owned, NUL-terminated */
    size_t len;
    load_shape output;   /* expected output nesting */
    load_shape weights;  /* expected weights nesting, when want_weights */
    int want_weights;
    long tokens;         /* query rows (sum of T over the batch) */
    int sequences;
    char id[40];         /* expected echoed id; "" = not checked */
    /* --protocol v2 */
    struct {
        int on;
        size_t header_len;   /* --binary: JSON header bytes (Inference-Header-Content-Length) */
        load_expect_v2 expect; /* its id points into id[] above */
    } v2;
} load_req;

typedef struct load_pool {
    load_req *reqs;      /* owned */
    size_t n;
} load_pool;

/* Builds o->pool random requests (or, with --request-file, one per file) for model m.
 * Returns 0, or -1 with err set and *p empty. Free with load_pool_free. */
int load_pool_build(load_pool *p, const load_opts *o, const load_model *m, char *err, size_t el);
void load_pool_free(load_pool *p);

/* A session append body {"query": rows x cols} of uniform values in [-1, 1] (4 decimals)
 * drawn from *rng (splitmix64 state, advanced). Returns the malloc'd NUL-terminated body
 * with *len, or NULL when out of memory. */
char *load_gen_query_body(unsigned long long *rng, int rows, int cols, size_t *len);

/* The same rows as a v2 binary-tensor append (--sessions --binary): a JSON header naming
 * query FP32 [1,rows,cols] and asking for the output as binary, then the rows as raw
 * little-endian float32. *header_len gets the header's bytes (Inference-Header-Content-
 * Length). NULL when out of memory. */
char *load_gen_query_binary(unsigned long long *rng, int rows, int cols, size_t *len,
                            size_t *header_len);

/* The load_expect for one pool entry (borrows from r). */
load_expect load_req_expect(const load_req *r);

/* The same for a --protocol v2 entry (r->v2.on). Borrows from r. */
load_expect_v2 load_req_expect_v2(const load_req *r);

#endif
