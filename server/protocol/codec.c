/* codec.c — the /v1 JSON wire format (proto/README.md) to and from attnd_request.
 *
 * Decoding a body:
 *  1. a byte pre-scan bounds the nesting depth (max_json_depth), so a deeply
 *     nested body never reaches a recursive parser;
 *  2. fast path: a scan of the top-level members parses the big numeric
 *     arrays (query, key, value, a numeric attn_mask) straight from the text
 *     into flat float arrays (attnd_json_parse_float_nest: correctly rounded,
 *     no object per number) and replaces each by a bare 0 in a copy of the
 *     body; a member the fast parser declines (any surprise at all) is left
 *     for jansson;
 *  3. jansson parses the rest (syntax, duplicate keys; its error positions are
 *     mapped back to line/column/byte of the body the client sent);
 *  4. pass 1 checks every field's type and every array's shape against the
 *     model and sums the sizes; pass 2 makes ONE allocation (the request, its
 *     attn_seq array, every input, mask, output and weights buffer) and
 *     copies the values in, checking numbers fit float32 and booleans are
 *     booleans. Both passes walk a `node`, which is either a jansson value or
 *     a position in a fast-parsed nest, so every error names the same field
 *     whichever parser read it.
 * Encoding writes the response straight into a growing byte buffer with the
 * shortest round-trip float printer.
 */
#include "protocol/codec.h"

#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/jsonbuf.h"
#include "core/jsonload.h"
#include "protocol/jsonnum.h"
#include "protocol/jsonscan.h"

/* ================================================================ errors */

/* A position in the request, printed as name[i][j]...; name alone when n = 0. */
typedef struct path {
    const char *name;
    int n;
    int idx[6];
} path;

static void path_format(const path *p, char *out, size_t cap)
{
    int len = snprintf(out, cap, "%s", p->name);
    for (int i = 0; i < p->n && len >= 0 && (size_t)len < cap; i++)
        len += snprintf(out + len, cap - (size_t)len, "[%d]", p->idx[i]);
}

/* The same with the field taken from a path. */
__attribute__((format(printf, 5, 6))) static int fail_at(attnd_http_error *e, int status,
                                                         const char *code, const path *p,
                                                         const char *fmt, ...)
{
    char field[sizeof e->field];
    path_format(p, field, sizeof field);
    va_list ap;
    va_start(ap, fmt);
    attnd_http_error_setv(e, status, code, field, fmt, ap);
    va_end(ap);
    return -1;
}

/* ================================================================ nodes */

/* A JSON value seen by the decoder: a jansson value, or a position in a
 * fast-parsed nest (an array at `level`, or the number values[idx] when level
 * == depth). The zero node is "absent". */
typedef struct node {
    const json_t *j;
    const attnd_float_nest *f;
    int level;
    size_t idx;
} node;

static int node_present(node n) { return n.j != NULL || n.f != NULL; }

static int node_is_array(node n) { return n.f ? n.level < n.f->depth : json_is_array(n.j); }

static size_t node_size(node n)
{
    if (n.f)
        return n.level < n.f->depth ? n.f->size[n.level][n.idx] : 0;
    return json_array_size(n.j);
}

/* Element k of an array node; the absent node when out of range. */
static node node_at(node n, size_t k)
{
    node c = {0};
    if (k >= node_size(n))
        return c;
    if (n.f) {
        c.f = n.f;
        c.level = n.level + 1;
        c.idx = n.f->start[n.level][n.idx] + k;
    } else {
        c.j = json_array_get(n.j, k);
    }
    return c;
}

static int node_is_number(node n) { return n.f ? n.level == n.f->depth : json_is_number(n.j); }

static int node_is_bool(node n) { return !n.f && json_is_boolean(n.j); }

/* ================================================================ decode state */

typedef enum leaf_kind { LEAF_FLOAT, LEAF_BOOL } leaf_kind;

/* Members the fast path parsed, by name; nests owned here. */
#define MAX_FAST 8
typedef struct fast_set {
    int n;
    const char *name[MAX_FAST];
    const char *begin[MAX_FAST], *end[MAX_FAST]; /* the value's bytes in the body */
    attnd_float_nest nest[MAX_FAST];
} fast_set;

/* Everything the passes share. Nodes borrow from the jansson tree / fast set. */
typedef struct decoder {
    const attn_layer_info *info;
    attnd_decode_limits lim;
    attnd_http_error *err;
    const fast_set *fast;
    attnd_decode_opts opts;

    /* top-level fields (absent / defaults when missing or null) */
    node query, key, value, kpm, mask, pos;
    int is_causal, window, need_weights, average;
    int64_t timeout_ms;
    const char *id;
    size_t id_len;

    /* shape found by pass 1 */
    int batched, n_seqs;
    int mask_shared;         /* batch with one T×S mask for every sequence      */
    int mask_per_head;       /* (h, T, S) per sequence                          */
    leaf_kind mask_kind;
    size_t n_floats;         /* every float in storage                          */
    size_t n_bytes;          /* every uint8_t in storage                        */
    size_t n_ints;           /* every int64_t in storage (position ids)         */
    size_t n_inputs;         /* query + key + value numbers                     */
    size_t n_weights;        /* weights elements returned                       */
    size_t n_tokens;
} decoder;

/* The node holding sequence b of a query/key/value/mask field. */
static node seq_node(const decoder *d, node field, int b)
{
    return d->batched ? node_at(field, (size_t)b) : field;
}

static int seq_t(const decoder *d, int b) { return (int)node_size(seq_node(d, d->query, b)); }

static int seq_s(const decoder *d, int b)
{
    return node_present(d->key) ? (int)node_size(seq_node(d, d->key, b)) : seq_t(d, b);
}

/* A path for field name, at sequence b when batched. */
static path seq_path(const decoder *d, const char *name, int b)
{
    path p = {.name = name, .n = 0};
    if (d->batched)
        p.idx[p.n++] = b;
    return p;
}

/* acc += a * b * c, or -1 on size_t overflow. */
static int acc_mul(size_t *acc, size_t a, size_t b, size_t c)
{
    size_t ab, abc;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc) ||
        __builtin_add_overflow(*acc, abc, acc))
        return -1;
    return 0;
}

static int fail_overflow(decoder *d)
{
    return attnd_http_fail(d->err, 413, "limit_exceeded", "", "request too large (size overflows)");
}

/* ================================================================ top-level fields */

static int get_bool(decoder *d, const char *name, const json_t *v, int *out)
{
    if (!json_is_boolean(v))
        return attnd_http_fail(d->err, 400, "invalid_type", name, "%s must be true or false", name);
    *out = json_is_true(v);
    return 0;
}

static int get_nonneg_int(decoder *d, const char *name, const json_t *v, long long max,
                          long long *out)
{
    if (!json_is_integer(v))
        return attnd_http_fail(d->err, 400, "invalid_type", name, "%s must be an integer", name);
    long long x = json_integer_value(v);
    if (x < 0)
        return attnd_http_fail(d->err, 400, "invalid_value", name, "%s must be >= 0, got %lld",
                               name, x);
    if (x > max)
        return attnd_http_fail(d->err, 400, "invalid_value", name, "%s must be <= %lld, got %lld",
                               name, max, x);
    *out = x;
    return 0;
}

/* An array field: the fast-parsed nest of that name, else the jansson array. */
static int get_array(decoder *d, const char *name, const json_t *v, node *out)
{
    for (int i = 0; i < d->fast->n; i++)
        if (strcmp(d->fast->name[i], name) == 0) {
            out->f = &d->fast->nest[i];
            return 0;
        }
    if (!json_is_array(v))
        return attnd_http_fail(d->err, 400, "invalid_type", name, "%s must be an array", name);
    out->j = v;
    return 0;
}

/* The members a /v1 body takes, and the few a session append takes. */
static const char *const v1_fields[] = {"query", "key", "value", "key_padding_mask", "attn_mask",
                                        "is_causal", "window", "position_ids", "need_weights",
                                        "average_attn_weights", "timeout_ms", "id"};
static const char *const append_fields[] = {"query", "position_ids", "need_weights",
                                            "average_attn_weights", "timeout_ms", "id"};

/* Levenshtein distance of a and b (each cut at 63 bytes). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t n = strnlen(a, 63), m = strnlen(b, 63), row[64];
    for (size_t j = 0; j <= m; j++)
        row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[m];
}

/* The known name nearest to k when it is close enough to be a typo (at most
 * 2 edits, or a third of k's length), else NULL. */
static const char *nearest_field(const char *k, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1, len = strlen(k), limit = len / 3 > 2 ? len / 3 : 2;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(k, names[i]);
        if (d < best_d)
            best = names[i], best_d = d;
    }
    return best_d <= limit ? best : NULL;
}

/* 400 unknown_field for k: the nearest known name when one is close, and the
 * names this body takes. */
static int unknown_field(decoder *d, const char *k)
{
    const char *const *names = d->opts.query_only ? append_fields : v1_fields;
    size_t n = d->opts.query_only ? sizeof append_fields / sizeof *append_fields
                                  : sizeof v1_fields / sizeof *v1_fields;
    char list[256];
    size_t w = 0;
    for (size_t i = 0; i < n && w < sizeof list; i++)
        w += (size_t)snprintf(list + w, sizeof list - w, "%s%s", i ? ", " : "", names[i]);
    const char *near = nearest_field(k, names, n);
    if (near)
        return attnd_http_fail(d->err, 400, "unknown_field", k, "unknown field \"%.64s\": did "
                               "you mean \"%s\"? This body takes %s", k, near, list);
    return attnd_http_fail(d->err, 400, "unknown_field", k,
                           "unknown field \"%.64s\"; this body takes %s", k, list);
}

/* One top-level member. A JSON null means "absent" for every optional field. */
static int read_field(decoder *d, const char *k, json_t *v)
{
    long long x;
    if (d->opts.query_only && strcmp(k, "query") && strcmp(k, "position_ids") &&
        strcmp(k, "need_weights") &&
        strcmp(k, "average_attn_weights") && strcmp(k, "timeout_ms") && strcmp(k, "id"))
        return unknown_field(d, k);
    if (strcmp(k, "query") == 0)
        return get_array(d, k, v, &d->query);
    if (json_is_null(v))
        return 0;
    if (strcmp(k, "key") == 0)
        return get_array(d, k, v, &d->key);
    if (strcmp(k, "value") == 0)
        return get_array(d, k, v, &d->value);
    if (strcmp(k, "key_padding_mask") == 0)
        return get_array(d, k, v, &d->kpm);
    if (strcmp(k, "attn_mask") == 0)
        return get_array(d, k, v, &d->mask);
    if (strcmp(k, "position_ids") == 0)
        return get_array(d, k, v, &d->pos);
    if (strcmp(k, "is_causal") == 0)
        return get_bool(d, k, v, &d->is_causal);
    if (strcmp(k, "need_weights") == 0)
        return get_bool(d, k, v, &d->need_weights);
    if (strcmp(k, "average_attn_weights") == 0)
        return get_bool(d, k, v, &d->average);
    if (strcmp(k, "window") == 0) {
        if (get_nonneg_int(d, k, v, INT_MAX, &x))
            return -1;
        d->window = (int)x;
        return 0;
    }
    if (strcmp(k, "timeout_ms") == 0) {
        if (get_nonneg_int(d, k, v, INT64_MAX / 1000000, &x))
            return -1;
        d->timeout_ms = x;
        return 0;
    }
    if (strcmp(k, "id") == 0) {
        if (!json_is_string(v))
            return attnd_http_fail(d->err, 400, "invalid_type", k, "id must be a string");
        d->id = json_string_value(v);
        d->id_len = json_string_length(v);
        if (d->id_len > 127)
            return attnd_http_fail(d->err, 400, "invalid_value", k,
                                   "id is %zu bytes, at most 127 allowed", d->id_len);
        return 0;
    }
    return unknown_field(d, k);
}

static int read_fields(decoder *d, json_t *root)
{
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (read_field(d, k, v))
            return -1;
    }
    if (!node_present(d->query))
        return attnd_http_fail(d->err, 400, "invalid_value", "query", "query is required");
    if (node_present(d->value) && !node_present(d->key))
        return attnd_http_fail(d->err, 400, "invalid_value", "value", "value given without key");
    return 0;
}

/* ================================================================ pass 1: shapes */

/* Checks that j is an array nest of exactly dims[0] × ... × dims[n-1] entries
 * (nouns name each level). Leaves are checked in pass 2. */
static int check_nest(decoder *d, node j, const int *dims, int n, const char *const *nouns,
                      path *p)
{
    if (!node_is_array(j))
        return fail_at(d->err, 400, "invalid_type", p, "expected an array of %d %s", dims[0],
                       nouns[0]);
    size_t got = node_size(j);
    if (got != (size_t)dims[0])
        return fail_at(d->err, 400, "invalid_shape", p, "expected %d %s, got %zu", dims[0],
                       nouns[0], got);
    if (n == 1)
        return 0;
    for (size_t i = 0; i < got; i++) {
        p->idx[p->n++] = (int)i;
        int rc = check_nest(d, node_at(j, i), dims + 1, n - 1, nouns + 1, p);
        p->n--;
        if (rc)
            return rc;
    }
    return 0;
}

/* The outer array of key/value/masks in a batch: B sequences (B from query). */
static int check_outer(decoder *d, const char *name, node field)
{
    if (node_size(field) == 0)
        return attnd_http_fail(d->err, 400, "invalid_shape", name, "%s is empty", name);
    if (d->batched && node_size(field) != (size_t)d->n_seqs)
        return attnd_http_fail(d->err, 400, "invalid_shape", name,
                               "expected %d sequences (as query), got %zu", d->n_seqs,
                               node_size(field));
    return 0;
}

/* Sequence b of query/key/value: rows × width numbers, rows >= 1. rows_want
 * < 0 takes the rows from the array (query, key); value must match key. */
static int check_matrix(decoder *d, const char *name, node field, int b, int rows_want,
                        int width)
{
    static const char *const nouns[] = {"rows", "numbers"};
    node m = seq_node(d, field, b);
    path p = seq_path(d, name, b);
    if (!node_is_array(m))
        return fail_at(d->err, 400, "invalid_type", &p, "expected an array of rows");
    size_t rows = node_size(m);
    if (rows == 0)
        return fail_at(d->err, 400, "invalid_shape", &p, "empty sequence");
    if (rows > INT_MAX || (d->lim.max_seq_len > 0 && rows > (size_t)d->lim.max_seq_len))
        return fail_at(d->err, 413, "limit_exceeded", &p,
                       "sequence length %zu exceeds max_seq_len %d", rows, d->lim.max_seq_len);
    int dims[2] = {rows_want < 0 ? (int)rows : rows_want, width};
    if (check_nest(d, m, dims, 2, nouns, &p))
        return -1;
    if (acc_mul(&d->n_inputs, rows, (size_t)width, 1))
        return fail_overflow(d);
    return 0;
}

/* Decides single vs batch from query's nesting and checks query/key/value. */
static int check_inputs(decoder *d)
{
    const attn_layer_info *in = d->info;
    const int has_key = node_present(d->key), has_value = node_present(d->value);
    if (node_size(d->query) == 0)
        return attnd_http_fail(d->err, 400, "invalid_shape", "query", "query is empty");
    node q0 = node_at(d->query, 0);
    path p0 = {.name = "query", .n = 1, .idx = {0}};
    if (!node_is_array(q0))
        return fail_at(d->err, 400, "invalid_type", &p0, "expected an array");
    if (node_size(q0) == 0)
        return fail_at(d->err, 400, "invalid_shape", &p0, "empty sequence");
    d->batched = node_is_array(node_at(q0, 0));
    if (d->batched && d->opts.query_only)
        return attnd_http_fail(d->err, 400, "invalid_shape", "query",
                               "query must be one T×E_q sequence here, not a batch");
    size_t n = d->batched ? node_size(d->query) : 1;
    if (n > INT_MAX || (d->lim.max_batch_seqs > 0 && n > (size_t)d->lim.max_batch_seqs))
        return attnd_http_fail(d->err, 413, "limit_exceeded", "query",
                               "%zu sequences exceed max_batch_seqs %d", n, d->lim.max_batch_seqs);
    d->n_seqs = (int)n;

    if (!has_key && !d->opts.query_only &&
        (in->embed_k != in->embed_q || in->embed_v != in->embed_q))
        return attnd_http_fail(d->err, 400, "invalid_value", "key",
                               "this model needs key (and value): E_q=%d, E_k=%d, E_v=%d",
                               in->embed_q, in->embed_k, in->embed_v);
    if (has_key && !has_value && in->embed_k != in->embed_v)
        return attnd_http_fail(
            d->err, 400, "invalid_value", "value",
            "value is required: the model's key width E_k=%d differs from E_v=%d", in->embed_k,
            in->embed_v);
    if ((has_key && check_outer(d, "key", d->key)) ||
        (has_value && check_outer(d, "value", d->value)))
        return -1;
    for (int b = 0; b < d->n_seqs; b++) {
        if (check_matrix(d, "query", d->query, b, -1, in->embed_q))
            return -1;
        if (has_key && check_matrix(d, "key", d->key, b, -1, in->embed_k))
            return -1;
        if (has_value && check_matrix(d, "value", d->value, b, seq_s(d, b), in->embed_v))
            return -1;
        d->n_tokens += (size_t)seq_t(d, b) + (has_key ? (size_t)seq_s(d, b) : 0);
    }
    if (d->lim.max_request_elems > 0 && d->n_inputs > d->lim.max_request_elems)
        return attnd_http_fail(d->err, 413, "limit_exceeded", "query",
                               "request holds %zu input numbers, max_request_elems is %zu",
                               d->n_inputs, d->lim.max_request_elems);
    return 0;
}

static int check_kpm(decoder *d)
{
    static const char *const nouns[] = {"booleans"};
    if (!node_present(d->kpm))
        return 0;
    if (d->batched && check_outer(d, "key_padding_mask", d->kpm))
        return -1;
    for (int b = 0; b < d->n_seqs; b++) {
        path p = seq_path(d, "key_padding_mask", b);
        int dims[1] = {seq_s(d, b)};
        if (check_nest(d, seq_node(d, d->kpm, b), dims, 1, nouns, &p))
            return -1;
        d->n_bytes += (size_t)dims[0];
    }
    return 0;
}

/* position_ids: per sequence T integers (the rotary positions of its queries). */
static int check_pos(decoder *d)
{
    static const char *const nouns[] = {"integers"};
    if (!node_present(d->pos))
        return 0;
    if (d->batched && check_outer(d, "position_ids", d->pos))
        return -1;
    for (int b = 0; b < d->n_seqs; b++) {
        path p = seq_path(d, "position_ids", b);
        int dims[1] = {seq_t(d, b)};
        if (check_nest(d, seq_node(d, d->pos, b), dims, 1, nouns, &p))
            return -1;
        d->n_ints += (size_t)dims[0];
    }
    return 0;
}

/* Array levels of attn_mask along its first elements (or -1), and the kind of
 * its first leaf (boolean or number), which fixes the kind of the whole mask. */
static int mask_depth(decoder *d)
{
    path p = {.name = "attn_mask", .n = 0};
    node j = d->mask;
    int depth = 0;
    while (node_is_array(j)) {
        if (node_size(j) == 0)
            return fail_at(d->err, 400, "invalid_shape", &p, "empty array in attn_mask");
        if (++depth > 4)
            return attnd_http_fail(d->err, 400, "invalid_shape", "attn_mask",
                                   "attn_mask nests deeper than B×h×T×S");
        j = node_at(j, 0);
        p.idx[p.n++] = 0;
    }
    if (node_is_bool(j))
        d->mask_kind = LEAF_BOOL;
    else if (node_is_number(j))
        d->mask_kind = LEAF_FLOAT;
    else
        return fail_at(d->err, 400, "invalid_type", &p,
                       "attn_mask entries must be booleans or numbers");
    return depth;
}

/* Single: T×S or h×T×S. Batch: T×S shared, B×T×S, or B×h×T×S. */
static int check_mask(decoder *d)
{
    static const char *const nouns3[] = {"heads", "rows", "values"};
    if (!node_present(d->mask))
        return 0;
    int depth = mask_depth(d);
    if (depth < 0)
        return -1;
    int base = d->batched ? 3 : 2; /* levels of a per-sequence (T, S) mask */
    d->mask_shared = d->batched && depth == 2;
    d->mask_per_head = depth == base + 1;
    if (depth != base && depth != base + 1 && !d->mask_shared)
        return attnd_http_fail(d->err, 400, "invalid_shape", "attn_mask",
                               "attn_mask has %d levels; expected %s", depth,
                               d->batched ? "T×S (shared), B×T×S or B×h×T×S" : "T×S or h×T×S");
    size_t *acc = d->mask_kind == LEAF_FLOAT ? &d->n_floats : &d->n_bytes;
    if (d->mask_shared) {
        for (int b = 1; b < d->n_seqs; b++)
            if (seq_t(d, b) != seq_t(d, 0) || seq_s(d, b) != seq_s(d, 0))
                return attnd_http_fail(
                    d->err, 400, "invalid_shape", "attn_mask",
                    "a shared T×S attn_mask needs every sequence to have the same T "
                    "and S; sequence %d differs from sequence 0",
                    b);
        path p = {.name = "attn_mask", .n = 0};
        int dims[2] = {seq_t(d, 0), seq_s(d, 0)};
        if (check_nest(d, d->mask, dims, 2, nouns3 + 1, &p))
            return -1;
        return acc_mul(acc, (size_t)dims[0], (size_t)dims[1], 1) ? fail_overflow(d) : 0;
    }
    if (d->batched && check_outer(d, "attn_mask", d->mask))
        return -1;
    for (int b = 0; b < d->n_seqs; b++) {
        path p = seq_path(d, "attn_mask", b);
        int dims[3] = {d->info->num_heads, seq_t(d, b), seq_s(d, b)};
        int skip = d->mask_per_head ? 0 : 1;
        if (check_nest(d, seq_node(d, d->mask, b), dims + skip, 3 - skip, nouns3 + skip, &p))
            return -1;
        size_t heads = d->mask_per_head ? (size_t)dims[0] : 1;
        if (acc_mul(acc, heads, (size_t)dims[1], (size_t)dims[2]))
            return fail_overflow(d);
    }
    return 0;
}

/* Sums floats for inputs, outputs and weights; checks the weights limit. */
static int size_buffers(decoder *d)
{
    const attn_layer_info *in = d->info;
    size_t heads = d->average ? 1 : (size_t)in->num_heads;
    if (__builtin_add_overflow(d->n_floats, d->n_inputs, &d->n_floats))
        return fail_overflow(d);
    for (int b = 0; b < d->n_seqs; b++) {
        size_t t = (size_t)seq_t(d, b), s = (size_t)seq_s(d, b);
        if (acc_mul(&d->n_floats, t, (size_t)in->embed_out, 1))
            return fail_overflow(d);
        if (d->need_weights && !d->opts.caller_weights && acc_mul(&d->n_weights, heads, t, s))
            return fail_overflow(d);
    }
    if (d->lim.max_weights_elems > 0 && d->n_weights > d->lim.max_weights_elems)
        return attnd_http_fail(d->err, 413, "limit_exceeded", "need_weights",
                               "weights would hold %zu numbers, max_weights_elems is %zu",
                               d->n_weights, d->lim.max_weights_elems);
    if (__builtin_add_overflow(d->n_floats, d->n_weights, &d->n_floats))
        return fail_overflow(d);
    return 0;
}

/* ================================================================ pass 2: copy */

static int read_leaf_float(decoder *d, node v, path *p, float *out)
{
    if (v.f && v.level == v.f->depth) {
        *out = v.f->values[v.idx]; /* range-checked by the fast parser */
        return 0;
    }
    if (json_is_real(v.j)) {
        if (attnd_json_double_to_float(json_real_value(v.j), out) == 0)
            return 0;
        return fail_at(d->err, 400, "non_finite", p, "%g does not fit in float32",
                       json_real_value(v.j));
    }
    if (json_is_integer(v.j)) {
        *out = (float)json_integer_value(v.j); /* |x| < 2^63 always fits */
        return 0;
    }
    return fail_at(d->err, 400, "invalid_type", p, "expected a number");
}

/* Copies the leaves of an n-level nest (shape checked in pass 1) to *dst,
 * advancing it; leaves must be numbers (LEAF_FLOAT) or booleans (LEAF_BOOL). */
static int copy_nest(decoder *d, node j, int n, leaf_kind kind, path *p, void **dst)
{
    size_t len = node_size(j);
    if (n == 1 && j.f && kind == LEAF_FLOAT && j.level == j.f->depth - 1) {
        /* A fast-parsed row: its values are contiguous and already checked. */
        memcpy(*dst, j.f->values + j.f->start[j.level][j.idx], len * sizeof(float));
        *dst = (float *)*dst + len;
        return 0;
    }
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0; i++) {
        node v = node_at(j, i);
        p->idx[p->n++] = (int)i;
        if (n > 1) {
            rc = copy_nest(d, v, n - 1, kind, p, dst);
        } else if (kind == LEAF_FLOAT) {
            rc = read_leaf_float(d, v, p, (float *)*dst + i);
        } else if (node_is_bool(v)) {
            ((uint8_t *)*dst)[i] = (uint8_t)json_is_true(v.j);
        } else {
            rc = fail_at(d->err, 400, "invalid_type", p,
                         "expected true or false (attn_mask/key_padding_mask booleans; a "
                         "numeric attn_mask must be numbers throughout)");
        }
        p->n--;
    }
    if (rc == 0 && n == 1)
        *dst = kind == LEAF_FLOAT ? (void *)((float *)*dst + len) : (void *)((uint8_t *)*dst + len);
    return rc;
}

/* Sequence b's position ids into *cur (advanced): integers in 0..2^53. */
static int copy_pos(decoder *d, int b, int64_t **cur)
{
    node j = seq_node(d, d->pos, b);
    path p = seq_path(d, "position_ids", b);
    for (size_t i = 0; i < node_size(j); i++) {
        node v = node_at(j, i);
        p.idx[p.n] = (int)i;
        p.n++;
        if (v.f || !json_is_integer(v.j) || json_integer_value(v.j) < 0 ||
            json_integer_value(v.j) > (INT64_C(1) << 53))
            return fail_at(d->err, 400, v.f || !json_is_integer(v.j) ? "invalid_type"
                                                                      : "invalid_value",
                           &p, "expected an integer position in 0..2^53");
        p.n--;
        (*cur)[i] = json_integer_value(v.j);
    }
    *cur += node_size(j);
    return 0;
}

/* Copies one sequence's part of a field (query, key, ...) into *dst. */
static int copy_seq(decoder *d, const char *name, node field, int b, int levels, leaf_kind kind,
                    void **dst)
{
    path p = seq_path(d, name, b);
    return copy_nest(d, seq_node(d, field, b), levels, kind, &p, dst);
}

static int copy_mask(decoder *d, int b, attn_seq *s, float **fcur, uint8_t **bcur,
                     const void *shared)
{
    if (!node_present(d->mask))
        return 0;
    s->attn_mask_kind = d->mask_kind == LEAF_FLOAT ? ATTN_MASK_FLOAT : ATTN_MASK_BOOL;
    s->attn_mask_per_head = d->mask_per_head;
    if (d->mask_shared && b > 0) {
        s->attn_mask = shared;
        return 0;
    }
    void **cur = d->mask_kind == LEAF_FLOAT ? (void **)fcur : (void **)bcur;
    s->attn_mask = *cur;
    if (d->mask_shared) {
        path p = {.name = "attn_mask", .n = 0};
        return copy_nest(d, d->mask, 2, d->mask_kind, &p, cur);
    }
    return copy_seq(d, "attn_mask", d->mask, b, d->mask_per_head ? 3 : 2, d->mask_kind, cur);
}

/* Fills seqs[b] and copies its inputs, carving buffers from *cur. */
static int fill_seq(decoder *d, int b, attn_seq *seqs, attnd_request_cursor *cur)
{
    float **fcur = &cur->floats;
    uint8_t **bcur = &cur->bytes;
    attn_seq *s = &seqs[b];
    const attn_layer_info *in = d->info;
    s->t = seq_t(d, b);
    s->s = seq_s(d, b);
    s->query = *fcur;
    if (copy_seq(d, "query", d->query, b, 2, LEAF_FLOAT, (void **)fcur))
        return -1;
    if (node_present(d->key)) {
        s->key = *fcur;
        if (copy_seq(d, "key", d->key, b, 2, LEAF_FLOAT, (void **)fcur))
            return -1;
        s->value = s->key; /* value defaults to key */
    }
    if (node_present(d->value)) {
        s->value = *fcur;
        if (copy_seq(d, "value", d->value, b, 2, LEAF_FLOAT, (void **)fcur))
            return -1;
    }
    if (node_present(d->kpm)) {
        s->key_padding_mask = *bcur;
        if (copy_seq(d, "key_padding_mask", d->kpm, b, 1, LEAF_BOOL, (void **)bcur))
            return -1;
    }
    if (copy_mask(d, b, s, fcur, bcur, b > 0 ? seqs[0].attn_mask : NULL))
        return -1;
    if (node_present(d->pos)) {
        s->position_ids = cur->ints;
        if (copy_pos(d, b, &cur->ints))
            return -1;
    }
    s->is_causal = d->is_causal;
    s->window = d->window;
    s->output = *fcur;
    *fcur += (size_t)s->t * (size_t)in->embed_out;
    s->weights_mode = !d->need_weights ? ATTN_WEIGHTS_NONE
                      : d->average     ? ATTN_WEIGHTS_AVERAGE
                                       : ATTN_WEIGHTS_PER_HEAD;
    if (d->need_weights && !d->opts.caller_weights) {
        s->weights = *fcur;
        *fcur += (d->average ? 1 : (size_t)in->num_heads) * (size_t)s->t * (size_t)s->s;
    }
    return 0;
}

/* Pass 2: one request (attnd_request_alloc) holding every array:
 *   [attnd_request][attn_seq x n][ints: position ids][floats: per sequence
 *    query, key, value, float mask, output, weights][bytes: padding masks,
 *    bool masks] */
static int build_request(decoder *d, attnd_request **out)
{
    attnd_request_cursor cur;
    attnd_request_sizes sizes = {.n_ints = d->n_ints, .n_floats = d->n_floats,
                                 .n_bytes = d->n_bytes};
    attnd_request *req = attnd_request_alloc(d->n_seqs, &sizes, &cur, d->err);
    if (!req)
        return -1;
    for (int b = 0; b < d->n_seqs; b++)
        if (fill_seq(d, b, req->seqs, &cur))
            goto fail;
    req->batched = d->batched;
    req->need_weights = d->need_weights;
    req->average_attn_weights = d->average;
    req->timeout_ms = d->timeout_ms;
    req->n_tokens = d->n_tokens;
    if (d->id)
        memcpy(req->id, d->id, d->id_len); /* NUL: the block is zeroed; id_len <= 127 */
    req->embed_out = d->info->embed_out;
    req->num_heads = d->info->num_heads;
    *out = req;
    return 0;
fail:
    attnd_request_free(req);
    return -1;
}

/* ================================================================ text scans */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

/* p at '"': the byte after the closing quote, or NULL. */
static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

/* Skips one value loosely (jansson validates it later): a string, a bracketed
 * nest, or a scalar up to the next delimiter. NULL at the end of the text. */
static const char *skip_value(const char *p, const char *end)
{
    int depth = 0;
    while (p < end) {
        char c = *p;
        if (c == '"') {
            p = skip_string(p, end);
            if (!p)
                return NULL;
            if (depth == 0)
                return p;
            continue;
        }
        if (c == '[' || c == '{') {
            depth++;
        } else if (c == ']' || c == '}') {
            if (depth == 0)
                return p;
            if (--depth == 0)
                return p + 1;
        } else if (depth == 0 && (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r')) {
            return p;
        }
        p++;
    }
    return NULL;
}

/* Returns 1 when the text nests [ / { deeper than limit, outside strings. The
 * text is the compact copy when fs holds fast-parsed members (each a bare 0
 * there): those arrays were measured while parsing, one level below the
 * top-level object, so only the small rest is scanned byte by byte. */
static int nesting_exceeds(const char *s, size_t len, const fast_set *fs, int limit)
{
    for (int i = 0; i < fs->n; i++)
        if (1 + fs->nest[i].depth > limit)
            return 1;
    int depth = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '"') {
            for (i++; i < len && s[i] != '"'; i++)
                if (s[i] == '\\')
                    i++;
        } else if (c == '[' || c == '{') {
            if (++depth > limit)
                return 1;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return 0;
}

/* The member names whose array values the fast path takes (raw bytes). */
static const char *fast_name(const char *k, size_t n)
{
    static const char *const names[] = {"query", "key", "value", "attn_mask"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == n && memcmp(names[i], k, n) == 0)
            return names[i];
    return NULL;
}

/* Walks the top-level object's members, fast-parsing the numeric arrays of
 * query/key/value/attn_mask into fs. Stops quietly at anything unexpected:
 * jansson will report it. */
static void scan_fast(const char *body, size_t len, fast_set *fs)
{
    const char *end = body + len, *p = skip_ws(body, end);
    if (p >= end || *p != '{')
        return;
    p = skip_ws(p + 1, end);
    while (p < end && *p == '"') {
        const char *k = p + 1;
        p = skip_string(p, end);
        if (!p)
            return;
        const char *name = fast_name(k, (size_t)(p - 1 - k));
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            return;
        p = skip_ws(p + 1, end);
        const char *vend = NULL;
        if (name && p < end && *p == '[' && fs->n < MAX_FAST) {
            attnd_float_nest *nest = &fs->nest[fs->n];
            memset(nest, 0, sizeof *nest);
            vend = attnd_json_parse_float_nest(p, end, nest);
            const char *next = vend ? skip_ws(vend, end) : NULL;
            if (vend && (next >= end || (*next != ',' && *next != '}'))) {
                /* Not followed by a member delimiter: leave the whole text to
                 * jansson (whose number lexer accepts "0\0}" but not "]\0}"). */
                attnd_float_nest_free(nest);
                return;
            }
            if (vend) {
                fs->name[fs->n] = name;
                fs->begin[fs->n] = p;
                fs->end[fs->n] = vend;
                fs->n++;
            }
        }
        if (!vend)
            vend = skip_value(p, end);
        if (!vend)
            return;
        p = skip_ws(vend, end);
        if (p >= end || *p != ',')
            return;
        p = skip_ws(p + 1, end);
    }
}

/* The body with every fast-parsed value replaced by a bare 0, so jansson never
 * reads the big arrays (its lexer costs ~5 ns a byte even for blanks). Error
 * positions are mapped back with map_position. NULL on no memory. */
static char *compact_fast(const char *body, size_t len, const fast_set *fs, size_t *out_len)
{
    char *copy = malloc(len ? len : 1);
    if (!copy)
        return NULL;
    const char *from = body;
    char *to = copy;
    for (int i = 0; i < fs->n; i++) {
        size_t keep = (size_t)(fs->begin[i] - from);
        memcpy(to, from, keep);
        to += keep;
        *to++ = '0';
        from = fs->end[i];
    }
    memcpy(to, from, (size_t)(body + len - from));
    to += body + len - from;
    *out_len = (size_t)(to - copy);
    return copy;
}

/* Where byte pos of the compact text is in the body: byte offset, line
 * (from 1) and column (characters since the line start), as jansson counts. */
static void map_position(const char *body, size_t len, const fast_set *fs, int pos, int *line,
                         int *column, int *offset)
{
    size_t p = pos > 0 ? (size_t)pos : 0, shift = 0;
    for (int i = 0; i < fs->n; i++) {
        size_t placeholder = (size_t)(fs->begin[i] - body) - shift;
        if (p <= placeholder)
            break;
        shift += (size_t)(fs->end[i] - fs->begin[i]) - 1;
    }
    size_t orig = p + shift < len ? p + shift : len;
    int l = 1, c = 0;
    for (size_t k = 0; k < orig; k++) {
        if (body[k] == '\n')
            l++, c = 0;
        else if (((unsigned char)body[k] & 0xc0) != 0x80)
            c++;
    }
    *line = l;
    *column = c;
    *offset = orig > INT_MAX ? INT_MAX : (int)orig;
}

static void fast_free(fast_set *fs)
{
    for (int i = 0; i < fs->n; i++)
        attnd_float_nest_free(&fs->nest[i]);
    fs->n = 0;
}

/* ================================================================ parse */

/* "duplicate object key near '"name"'" -> name, for the error's field. */
static void duplicate_key_name(const char *text, char *out, size_t cap)
{
    const char *a = strstr(text, "near '\"");
    const char *z = a ? strrchr(text, '"') : NULL;
    out[0] = '\0';
    if (a && z && z > a + 7)
        snprintf(out, cap, "%.*s", (int)(z - (a + 7)), a + 7);
}

/* Maps a jansson error to the client's error; line/column/byte are positions
 * in the body the client sent. */
static int parse_error(const json_error_t *je, const char *body, size_t len, int line,
                       int column, int byte, attnd_http_error *err)
{
    char key[sizeof err->field];
    switch (json_error_code(je)) {
    case json_error_duplicate_key:
        duplicate_key_name(je->text, key, sizeof key);
        return attnd_http_fail(err, 400, "duplicate_field", key,
                               "duplicate key \"%s\" at line %d, column %d", key, line, column);
    case json_error_numeric_overflow:
        return attnd_http_fail(err, 400, "non_finite", "",
                               "number out of range at line %d, column %d (byte %d): %s", line,
                               column, byte, je->text);
    case json_error_out_of_memory:
        return attnd_http_fail(err, 500, "internal", "", "out of memory while parsing JSON");
    default:
        if (attnd_json_nonfinite_error(body, len, byte, err) != 0)
            return -1;
        return attnd_http_fail(err, 400, "invalid_json", "",
                               "invalid JSON at line %d, column %d (byte %d): %s", line, column,
                               byte, je->text);
    }
}

/* Steps 3-4 once the fast set is known: parse text (the body, or its compact
 * copy when fs holds fast-parsed members), check, build. */
static int decode_parsed(decoder *d, const char *body, size_t len, const char *text,
                         size_t text_len, attnd_request **out)
{
    json_error_t je;
    int nomem = 0;
    json_t *root = attnd_json_loadb(text, text_len, JSON_REJECT_DUPLICATES, &je, &nomem);
    if (!root && nomem)
        return attnd_http_fail(d->err, 500, "internal", "", "out of memory while parsing JSON");
    if (!root) {
        int line = je.line, column = je.column, byte = je.position;
        if (d->fast->n)
            map_position(body, len, d->fast, je.position, &line, &column, &byte);
        return parse_error(&je, body, len, line, column, byte, d->err);
    }
    int rc = -1;
    if (!json_is_object(root))
        attnd_http_fail(d->err, 400, "invalid_type", "", "the body must be a JSON object");
    else if (read_fields(d, root) == 0 && check_inputs(d) == 0 && check_kpm(d) == 0 &&
             check_pos(d) == 0 && check_mask(d) == 0 && size_buffers(d) == 0 &&
             build_request(d, out) == 0)
        rc = 0;
    json_decref(root);
    return rc;
}

size_t attnd_json_tree_bound(const char *text, size_t len)
{
    /* Per structural byte, at least what jansson allocates for what it opens:
     * every value is preceded by '[', '{', ',' or ':' (or starts the text), a
     * string adds a pair of quotes, a container its own struct. */
    size_t values = 1, quotes = 0, arrays = 0, objects = 0;
    for (size_t i = 0; i < len; i++) {
        switch (text[i]) {
        case '[': arrays++, values++; break;
        case '{': objects++, values++; break;
        case ',': case ':': values++; break;
        case '"': quotes++; break;
        default: break;
        }
    }
    double n = 48.0 * (double)values + 48.0 * (double)(quotes / 2) + 160.0 * (double)arrays +
               256.0 * (double)objects + (double)len;
    return n >= (double)SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)n;
}

/* Memory the fast path holds for fs: the floats and the nest indexes. */
static size_t fast_bytes(const fast_set *fs)
{
    size_t n = 0;
    for (int i = 0; i < fs->n; i++) {
        const attnd_float_nest *f = &fs->nest[i];
        n += f->cap_values * sizeof(float);
        for (int k = 0; k < ATTND_NEST_MAX_DEPTH; k++)
            n += f->cap[k] * (sizeof(uint32_t) + sizeof(size_t));
    }
    return n;
}

int attnd_codec_decode_request(const char *body, size_t len, const attn_layer_info *info,
                               const attnd_decode_limits *limits, attnd_request **out,
                               attnd_http_error *err)
{
    return attnd_codec_decode_request_ex(body, len, info, limits, NULL, out, err);
}

int attnd_codec_decode_request_ex(const char *body, size_t len, const attn_layer_info *info,
                                  const attnd_decode_limits *limits,
                                  const attnd_decode_opts *opts, attnd_request **out,
                                  attnd_http_error *err)
{
    attnd_http_error scratch;
    fast_set fs = {.n = 0};
    decoder d = {.info = info, .err = err ? err : &scratch, .average = 1, .fast = &fs};
    if (opts)
        d.opts = *opts;
    if (out)
        *out = NULL;
    if (!out || !info || (!body && len > 0))
        return attnd_http_fail(d.err, 500, "internal", "",
                               "attnd_codec_decode_request: bad arguments");
    if (!body)
        body = ""; /* len == 0 */
    if (limits)
        d.lim = *limits;
    /* A raw NUL is never valid JSON, and jansson's number lexer lets "1\0}"
     * through: refuse it here. */
    const char *nul = memchr(body, '\0', len);
    if (nul)
        return attnd_http_fail(d.err, 400, "invalid_json", "", "invalid JSON: NUL byte at byte %zu",
                               (size_t)(nul - body));
    scan_fast(body, len, &fs);
    size_t text_len = len;
    char *text = fs.n ? compact_fast(body, len, &fs, &text_len) : NULL;
    if (fs.n && !text) {
        fast_free(&fs);
        return attnd_http_fail(d.err, 500, "internal", "", "out of memory copying the body");
    }
    int rc = -1;
    if (d.lim.max_json_depth > 0 &&
        nesting_exceeds(text ? text : body, text_len, &fs, d.lim.max_json_depth))
        attnd_http_fail(d.err, 400, "invalid_json", "", "JSON nests deeper than max_json_depth %d",
                        d.lim.max_json_depth);
    else if (!d.opts.reserve ||
        d.opts.reserve(d.opts.reserve_ctx,
                       fast_bytes(&fs) + (text ? text_len : 0) +
                           attnd_json_tree_bound(text ? text : body, text_len),
                       d.err) == 0)
        rc = decode_parsed(&d, body, len, text ? text : body, text_len, out);
    free(text);
    fast_free(&fs);
    return rc;
}

/* ================================================================ encode */

/* rows × cols matrix as [[...],[...]]. */
static int put_matrix(attnd_jsonbuf *b, const float *x, size_t rows, size_t cols)
{
    attnd_jb_putc(b, '[');
    for (size_t r = 0; r < rows; r++) {
        if (r)
            attnd_jb_putc(b, ',');
        if (attnd_jb_floats(b, x + r * cols, cols))
            return -1;
    }
    attnd_jb_putc(b, ']');
    return b->failed ? -1 : 0;
}

/* Failures below are recorded in b->failed (writes then stop mattering). */
static void put_output(attnd_jsonbuf *b, const attnd_request *req, int embed_out)
{
    if (req->batched)
        attnd_jb_putc(b, '[');
    for (int i = 0; i < req->n_seqs; i++) {
        if (i)
            attnd_jb_putc(b, ',');
        if (put_matrix(b, req->seqs[i].output, (size_t)req->seqs[i].t, (size_t)embed_out))
            return;
    }
    if (req->batched)
        attnd_jb_putc(b, ']');
}

static void put_weights(attnd_jsonbuf *b, const attnd_request *req, int heads)
{
    if (req->batched)
        attnd_jb_putc(b, '[');
    for (int i = 0; i < req->n_seqs; i++) {
        const attn_seq *s = &req->seqs[i];
        size_t ts = (size_t)s->t * (size_t)s->s;
        if (i)
            attnd_jb_putc(b, ',');
        if (s->weights_mode == ATTN_WEIGHTS_PER_HEAD) {
            attnd_jb_putc(b, '[');
            for (int h = 0; h < heads; h++) {
                if (h)
                    attnd_jb_putc(b, ',');
                if (put_matrix(b, s->weights + (size_t)h * ts, (size_t)s->t, (size_t)s->s))
                    return;
            }
            attnd_jb_putc(b, ']');
        } else if (put_matrix(b, s->weights, (size_t)s->t, (size_t)s->s)) {
            return;
        }
    }
    if (req->batched)
        attnd_jb_putc(b, ']');
}

char *attnd_codec_encode_response(const attnd_request *req, const char *model_name, size_t *len)
{
    return attnd_codec_encode_response_with(req, model_name, NULL, len);
}

char *attnd_codec_encode_response_with(const attnd_request *req, const char *model_name,
                                       const char *members, size_t *len)
{
    attnd_jsonbuf b = {0};
    if (!req || req->n_seqs < 1 || !req->seqs)
        return NULL;
    /* One allocation for the whole answer (weights aside): no regrowth copies. */
    size_t rows = 0;
    for (int i = 0; i < req->n_seqs; i++)
        rows += (size_t)req->seqs[i].t;
    attnd_jb_reserve(&b, rows * ((size_t)req->embed_out * (ATTND_FLOAT_TEXT_MAX + 1) + 3) + 512);
    attnd_jb_puts(&b, "{\"model\":");
    attnd_jb_string(&b, model_name);
    if (req->id[0]) {
        attnd_jb_puts(&b, ",\"id\":");
        attnd_jb_string(&b, req->id);
    }
    attnd_jb_puts(&b, ",\"output\":");
    put_output(&b, req, req->embed_out); /* a failure sets b.failed: finish frees */
    if (req->need_weights) {
        attnd_jb_puts(&b, ",\"weights\":");
        put_weights(&b, req, req->num_heads);
    }
    attnd_jb_puts(&b, ",\"timing\":{");
    attnd_codec_put_timing(&b, req);
    attnd_jb_putc(&b, '}');
    if (members && *members) {
        attnd_jb_putc(&b, ',');
        attnd_jb_puts(&b, members);
    }
    attnd_jb_putc(&b, '}');
    return attnd_jb_finish(&b, len);
}

void attnd_codec_put_timing(attnd_jsonbuf *b, const attnd_request *req)
{
    attnd_jb_puts(b, "\"queue_us\":");
    attnd_jb_i64(b, (long long)req->queue_us);
    attnd_jb_puts(b, ",\"compute_us\":");
    attnd_jb_i64(b, (long long)req->compute_us);
    attnd_jb_puts(b, ",\"batch_size\":");
    attnd_jb_i64(b, req->batch_size);
    if (req->iterations > 0) { /* computed in pieces by the decode loop */
        attnd_jb_puts(b, ",\"pieces\":");
        attnd_jb_i64(b, req->iterations);
    }
}

char *attnd_codec_encode_error(const attnd_http_error *err, size_t *len)
{
    return attnd_codec_encode_error_id(err, NULL, len);
}

char *attnd_codec_encode_error_id(const attnd_http_error *err, const char *request_id,
                                  size_t *len)
{
    attnd_jsonbuf b = {0};
    attnd_jb_puts(&b, "{\"error\":{\"code\":");
    attnd_jb_string(&b, err && err->code[0] ? err->code : "internal");
    attnd_jb_puts(&b, ",\"message\":");
    attnd_jb_string(&b, err ? err->message : "unknown error");
    attnd_jb_puts(&b, ",\"field\":");
    attnd_jb_string(&b, err ? err->field : "");
    if (request_id && *request_id) {
        attnd_jb_puts(&b, ",\"request_id\":");
        attnd_jb_string(&b, request_id);
    }
    attnd_jb_puts(&b, "}}");
    return attnd_jb_finish(&b, len);
}
