/* test_codec.c — the /v1 JSON codec: decoding maps every request form (single,
 * batch, ragged, cross, value-defaults-to-key, every mask) into the exact
 * attn_seq fields and values; a table of bad bodies gets the right status,
 * code and field; responses and errors encode to JSON that parses back with
 * jansson to bit-identical floats.
 */
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "protocol/codec.h"
#include "protocol/jsonbuf.h"

/* ------------------------------------------------------------ string helpers */

/* Every string the helpers make is kept here and freed at the end (LSan). */
static char *kept[4096];
static int n_kept;

static char *keep(char *s)
{
    if (!s || n_kept == (int)(sizeof kept / sizeof kept[0])) {
        fprintf(stderr, "test helper out of memory/slots\n");
        exit(2);
    }
    kept[n_kept++] = s;
    return s;
}

__attribute__((format(printf, 1, 2))) static char *fmt(const char *f, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, f);
    if (vasprintf(&s, f, ap) < 0)
        s = NULL;
    va_end(ap);
    return keep(s);
}

static uint32_t hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* A full-precision float in ±[2^-8, 2^8) for element i of tensor `seed`. */
static float val(unsigned seed, size_t i)
{
    uint32_t h = hash32(seed * 1000003u + (uint32_t)i * 2654435761u + 1u);
    uint32_t bits = (h & 0x80000000u) | ((119u + (h >> 23) % 16u) << 23) | (h & 0x7fffffu);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* rows × cols numbers val(seed, r*cols + c) as JSON; row short_row has one
 * number fewer (-1: none). */
static char *mat_short(int rows, int cols, unsigned seed, int short_row)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    fputc('[', f);
    for (int r = 0; r < rows; r++) {
        fputs(r ? ",[" : "[", f);
        int w = r == short_row ? cols - 1 : cols;
        for (int c = 0; c < w; c++)
            fprintf(f, "%s%.9g", c ? "," : "", (double)val(seed, (size_t)r * (size_t)cols + (size_t)c));
        fputc(']', f);
    }
    fputc(']', f);
    fclose(f);
    return keep(s);
}

static char *mat(int rows, int cols, unsigned seed) { return mat_short(rows, cols, seed, -1); }

/* B sequences of ts[b] × cols, sequence b from seed + b. */
static char *bmat(int B, const int *ts, int cols, unsigned seed)
{
    char *s = fmt("[");
    for (int b = 0; b < B; b++)
        s = fmt("%s%s%s", s, b ? "," : "", mat(ts[b], cols, seed + (unsigned)b));
    return fmt("%s]", s);
}

/* rows × cols booleans, element (r, c) true when (r + 2c + seed) % 3 == 0;
 * as_float writes -1e9 / 0 instead. */
static int mask_bit(int r, int c, unsigned seed) { return (r + 2 * c + (int)seed) % 3 == 0; }

static char *mask_mat(int rows, int cols, unsigned seed, int as_float)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    fputc('[', f);
    for (int r = 0; r < rows; r++) {
        fputs(r ? ",[" : "[", f);
        for (int c = 0; c < cols; c++) {
            int bit = mask_bit(r, c, seed);
            fprintf(f, "%s%s", c ? "," : "",
                    as_float ? (bit ? "-1e9" : "0.25") : (bit ? "true" : "false"));
        }
        fputc(']', f);
    }
    fputc(']', f);
    fclose(f);
    return keep(s);
}

static char *bools(int n, unsigned seed)
{
    char *s = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&s, &len);
    fputc('[', f);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%s", i ? "," : "", mask_bit(0, i, seed) ? "true" : "false");
    fputc(']', f);
    fclose(f);
    return keep(s);
}

/* ------------------------------------------------------------ models */

static attn_layer_info self_model(void)
{
    attn_layer_info in = {.num_heads = 8, .head_dim_k = 8, .head_dim_v = 8, .embed_q = 64,
                          .embed_k = 64, .embed_v = 64, .embed_out = 64, .has_out_proj = 1};
    return in;
}

/* Cross model: E_q=32, E_k=48, E_v=24, d_k=16, d_v=8, h=4, E_out=20. */
static attn_layer_info cross_model(void)
{
    attn_layer_info in = {.num_heads = 4, .head_dim_k = 16, .head_dim_v = 8, .embed_q = 32,
                          .embed_k = 48, .embed_v = 24, .embed_out = 20, .has_out_proj = 1};
    return in;
}

static const attnd_decode_limits no_limits = {0};

static attnd_request *decode_ok(const char *body, const attn_layer_info *in)
{
    attnd_request *req = NULL;
    attnd_http_error err = {0};
    int rc = attnd_codec_decode_request(body, strlen(body), in, &no_limits, &req, &err);
    CHECK_MSG(rc == 0 && req, "decode failed: %d %s field=%s: %s", err.status, err.code,
              err.field, err.message);
    return rc == 0 ? req : NULL;
}

/* Every element of a (rows × cols) float tensor equals val(seed, i). */
static int same_values(const float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (bits_of(x[i]) != bits_of(val(seed, i)))
            return 0;
    return 1;
}

/* Buffers of one request must not overlap: [a, a+na) vs [b, b+nb) in bytes. */
static int disjoint(const void *a, size_t na, const void *b, size_t nb)
{
    const char *pa = a, *pb = b;
    return !a || !b || pa + na <= pb || pb + nb <= pa;
}

/* ------------------------------------------------------------ decode: good bodies */

TEST(single)
{
    attn_layer_info in = self_model();
    attnd_request *r = decode_ok(fmt("{\"query\":%s}", mat(3, 64, 7)), &in);
    if (!r)
        return;
    CHECK_INT_EQ(r->n_seqs, 1);
    CHECK_INT_EQ(r->batched, 0);
    const attn_seq *s = &r->seqs[0];
    CHECK_INT_EQ(s->t, 3);
    CHECK_INT_EQ(s->s, 3);
    CHECK(s->key == NULL && s->value == NULL && s->key_padding_mask == NULL);
    CHECK(s->attn_mask == NULL && s->attn_mask_kind == ATTN_MASK_NONE);
    CHECK_INT_EQ(s->is_causal, 0);
    CHECK_INT_EQ(s->window, 0);
    CHECK_INT_EQ(s->key_length, 0);
    CHECK(same_values(s->query, 3 * 64, 7));
    CHECK(s->output != NULL);
    CHECK(disjoint(s->query, 3 * 64 * 4, s->output, 3 * 64 * 4));
    CHECK_INT_EQ(s->weights_mode, ATTN_WEIGHTS_NONE);
    CHECK(s->weights == NULL);
    CHECK_INT_EQ(r->need_weights, 0);
    CHECK_INT_EQ(r->average_attn_weights, 1);
    CHECK_INT_EQ(r->timeout_ms, 0);
    CHECK_INT_EQ(r->n_tokens, 3);
    CHECK(r->bytes >= sizeof *r + 2 * 3 * 64 * sizeof(float));
    CHECK_STR_EQ(r->id, "");
    CHECK_INT_EQ(r->outcome, ATTND_PENDING);
    CHECK_INT_EQ(r->embed_out, 64);
    CHECK_INT_EQ(r->num_heads, 8);
    /* Every output float is writable (ASan would catch an overrun). */
    memset(s->output, 0, 3 * 64 * sizeof(float));
    attnd_request_free(r);
}

TEST(batch_ragged)
{
    attn_layer_info in = self_model();
    int ts[3] = {2, 5, 1};
    char *body = fmt("{\"query\":%s,\"is_causal\":true,\"window\":2,\"need_weights\":true,"
                     "\"average_attn_weights\":false,\"timeout_ms\":250,\"id\":\"req-\\\"1\\\"\"}",
                     bmat(3, ts, 64, 100));
    attnd_request *r = decode_ok(body, &in);
    if (!r)
        return;
    CHECK_INT_EQ(r->n_seqs, 3);
    CHECK_INT_EQ(r->batched, 1);
    CHECK_INT_EQ(r->need_weights, 1);
    CHECK_INT_EQ(r->average_attn_weights, 0);
    CHECK_INT_EQ(r->timeout_ms, 250);
    CHECK_STR_EQ(r->id, "req-\"1\"");
    CHECK_INT_EQ(r->n_tokens, 8);
    for (int b = 0; b < 3; b++) {
        const attn_seq *s = &r->seqs[b];
        CHECK_INT_EQ(s->t, ts[b]);
        CHECK_INT_EQ(s->s, ts[b]);
        CHECK(s->key == NULL && s->value == NULL);
        CHECK_INT_EQ(s->is_causal, 1);
        CHECK_INT_EQ(s->window, 2);
        CHECK(same_values(s->query, (size_t)ts[b] * 64, 100u + (unsigned)b));
        CHECK_INT_EQ(s->weights_mode, ATTN_WEIGHTS_PER_HEAD);
        CHECK(s->weights != NULL && s->output != NULL);
        size_t nw = (size_t)8 * (size_t)ts[b] * (size_t)ts[b] * 4, no = (size_t)ts[b] * 64 * 4;
        CHECK(disjoint(s->weights, nw, s->output, no));
        CHECK(disjoint(s->query, no, s->output, no));
        CHECK(disjoint(s->query, no, s->weights, nw));
        memset(s->output, 0, no);
        memset(s->weights, 0, nw);
        for (int c = 0; c < b; c++) {
            const attn_seq *o = &r->seqs[c];
            CHECK(disjoint(s->output, no, o->output, (size_t)o->t * 64 * 4));
            CHECK(disjoint(s->weights, nw, o->weights, (size_t)8 * o->t * o->s * 4));
        }
    }
    attnd_request_free(r);

    /* Averaged weights are (T, S). */
    r = decode_ok(fmt("{\"query\":%s,\"need_weights\":true}", mat(4, 64, 1)), &in);
    if (r) {
        CHECK_INT_EQ(r->seqs[0].weights_mode, ATTN_WEIGHTS_AVERAGE);
        memset(r->seqs[0].weights, 0, 4 * 4 * sizeof(float));
        attnd_request_free(r);
    }
}

TEST(cross)
{
    attn_layer_info in = cross_model();
    attnd_request *r = decode_ok(
        fmt("{\"query\":%s,\"key\":%s,\"value\":%s}", mat(2, 32, 1), mat(4, 48, 2), mat(4, 24, 3)),
        &in);
    if (r) {
        const attn_seq *s = &r->seqs[0];
        CHECK_INT_EQ(s->t, 2);
        CHECK_INT_EQ(s->s, 4);
        CHECK(same_values(s->query, 2 * 32, 1));
        CHECK(s->key && same_values(s->key, 4 * 48, 2));
        CHECK(s->value && same_values(s->value, 4 * 24, 3));
        CHECK_INT_EQ(r->n_tokens, 6);
        CHECK_INT_EQ(r->embed_out, 20);
        memset(s->output, 0, 2 * 20 * sizeof(float));
        attnd_request_free(r);
    }

    /* Batched cross with ragged T and S, weights per head (4, T, S). */
    int ts[2] = {3, 1}, ss[2] = {2, 5};
    r = decode_ok(fmt("{\"query\":%s,\"key\":%s,\"value\":%s,\"need_weights\":true,"
                      "\"average_attn_weights\":false}",
                      bmat(2, ts, 32, 10), bmat(2, ss, 48, 20), bmat(2, ss, 24, 30)),
                  &in);
    if (r) {
        for (int b = 0; b < 2; b++) {
            const attn_seq *s = &r->seqs[b];
            CHECK_INT_EQ(s->t, ts[b]);
            CHECK_INT_EQ(s->s, ss[b]);
            CHECK(same_values(s->key, (size_t)ss[b] * 48, 20u + (unsigned)b));
            CHECK(same_values(s->value, (size_t)ss[b] * 24, 30u + (unsigned)b));
            memset(s->weights, 0, (size_t)4 * ts[b] * ss[b] * sizeof(float));
        }
        CHECK_INT_EQ(r->n_tokens, 3 + 1 + 2 + 5);
        attnd_request_free(r);
    }

    /* value defaults to key (E_k == E_v on the self model). */
    attn_layer_info self = self_model();
    r = decode_ok(fmt("{\"query\":%s,\"key\":%s}", mat(2, 64, 1), mat(3, 64, 2)), &self);
    if (r) {
        CHECK(r->seqs[0].key != NULL);
        CHECK(r->seqs[0].value == r->seqs[0].key);
        CHECK_INT_EQ(r->seqs[0].s, 3);
        CHECK(same_values(r->seqs[0].key, 3 * 64, 2));
        attnd_request_free(r);
    }
    /* JSON null is "absent". */
    r = decode_ok(fmt("{\"query\":%s,\"key\":null,\"attn_mask\":null,\"id\":null}", mat(2, 64, 1)),
                  &self);
    if (r) {
        CHECK(r->seqs[0].key == NULL && r->seqs[0].attn_mask == NULL);
        attnd_request_free(r);
    }
}

/* The bytes/floats of a mask equal mask_bit (bool) or -1e9/0.25 (float). */
static int mask_ok(const void *m, attn_mask_kind kind, int rows, int cols, unsigned seed)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            int bit = mask_bit(r, c, seed);
            size_t i = (size_t)r * (size_t)cols + (size_t)c;
            if (kind == ATTN_MASK_BOOL && ((const uint8_t *)m)[i] != bit)
                return 0;
            if (kind == ATTN_MASK_FLOAT && ((const float *)m)[i] != (bit ? -1e9f : 0.25f))
                return 0;
        }
    return 1;
}

TEST(masks_single)
{
    attn_layer_info in = self_model();
    const char *q = mat(3, 64, 1);
    attnd_request *r = decode_ok(
        fmt("{\"query\":%s,\"key_padding_mask\":%s,\"attn_mask\":%s}", q, bools(3, 1),
            mask_mat(3, 3, 2, 0)),
        &in);
    if (r) {
        const attn_seq *s = &r->seqs[0];
        CHECK(s->key_padding_mask != NULL);
        for (int i = 0; s->key_padding_mask && i < 3; i++)
            CHECK_INT_EQ(s->key_padding_mask[i], mask_bit(0, i, 1));
        CHECK_INT_EQ(s->attn_mask_kind, ATTN_MASK_BOOL);
        CHECK_INT_EQ(s->attn_mask_per_head, 0);
        CHECK(mask_ok(s->attn_mask, ATTN_MASK_BOOL, 3, 3, 2));
        attnd_request_free(r);
    }
    r = decode_ok(fmt("{\"query\":%s,\"attn_mask\":%s}", q, mask_mat(3, 3, 5, 1)), &in);
    if (r) {
        CHECK_INT_EQ(r->seqs[0].attn_mask_kind, ATTN_MASK_FLOAT);
        CHECK(mask_ok(r->seqs[0].attn_mask, ATTN_MASK_FLOAT, 3, 3, 5));
        attnd_request_free(r);
    }
    /* Per-head h×T×S, head k from seed k. */
    char *heads = fmt("[");
    for (int k = 0; k < 8; k++)
        heads = fmt("%s%s%s", heads, k ? "," : "", mask_mat(3, 3, (unsigned)k, 0));
    heads = fmt("%s]", heads);
    r = decode_ok(fmt("{\"query\":%s,\"attn_mask\":%s}", q, heads), &in);
    if (r) {
        const attn_seq *s = &r->seqs[0];
        CHECK_INT_EQ(s->attn_mask_per_head, 1);
        CHECK_INT_EQ(s->attn_mask_kind, ATTN_MASK_BOOL);
        for (int k = 0; k < 8; k++)
            CHECK(mask_ok((const uint8_t *)s->attn_mask + k * 9, ATTN_MASK_BOOL, 3, 3,
                          (unsigned)k));
        attnd_request_free(r);
    }
    /* Cross: masks are T×S with S from key. */
    attn_layer_info cx = cross_model();
    r = decode_ok(fmt("{\"query\":%s,\"key\":%s,\"value\":%s,\"key_padding_mask\":%s,"
                      "\"attn_mask\":%s}",
                      mat(2, 32, 1), mat(5, 48, 2), mat(5, 24, 3), bools(5, 4),
                      mask_mat(2, 5, 6, 1)),
                  &cx);
    if (r) {
        CHECK(mask_ok(r->seqs[0].attn_mask, ATTN_MASK_FLOAT, 2, 5, 6));
        for (int i = 0; i < 5; i++)
            CHECK_INT_EQ(r->seqs[0].key_padding_mask[i], mask_bit(0, i, 4));
        attnd_request_free(r);
    }
}

TEST(masks_batch)
{
    attn_layer_info in = self_model();
    int ts[2] = {2, 3};
    const char *q = bmat(2, ts, 64, 1);
    /* B×T×S bool + B×S padding. */
    attnd_request *r = decode_ok(
        fmt("{\"query\":%s,\"attn_mask\":[%s,%s],\"key_padding_mask\":[%s,%s]}", q,
            mask_mat(2, 2, 1, 0), mask_mat(3, 3, 2, 0), bools(2, 3), bools(3, 4)),
        &in);
    if (r) {
        CHECK(mask_ok(r->seqs[0].attn_mask, ATTN_MASK_BOOL, 2, 2, 1));
        CHECK(mask_ok(r->seqs[1].attn_mask, ATTN_MASK_BOOL, 3, 3, 2));
        CHECK_INT_EQ(r->seqs[1].attn_mask_per_head, 0);
        for (int i = 0; i < 3; i++)
            CHECK_INT_EQ(r->seqs[1].key_padding_mask[i], mask_bit(0, i, 4));
        CHECK_INT_EQ(r->seqs[0].key_padding_mask[1], mask_bit(0, 1, 3));
        attnd_request_free(r);
    }
    /* B×h×T×S float. */
    char *m = fmt("[");
    for (int b = 0; b < 2; b++) {
        m = fmt("%s%s[", m, b ? "," : "");
        for (int k = 0; k < 8; k++)
            m = fmt("%s%s%s", m, k ? "," : "", mask_mat(ts[b], ts[b], (unsigned)(b * 8 + k), 1));
        m = fmt("%s]", m);
    }
    m = fmt("%s]", m);
    r = decode_ok(fmt("{\"query\":%s,\"attn_mask\":%s}", q, m), &in);
    if (r) {
        for (int b = 0; b < 2; b++) {
            CHECK_INT_EQ(r->seqs[b].attn_mask_per_head, 1);
            CHECK_INT_EQ(r->seqs[b].attn_mask_kind, ATTN_MASK_FLOAT);
            for (int k = 0; k < 8; k++)
                CHECK(mask_ok((const float *)r->seqs[b].attn_mask + k * ts[b] * ts[b],
                              ATTN_MASK_FLOAT, ts[b], ts[b], (unsigned)(b * 8 + k)));
        }
        attnd_request_free(r);
    }
    /* Shared T×S in a batch of equal shapes: one copy, every sequence points at it. */
    int eq[3] = {2, 2, 2};
    r = decode_ok(fmt("{\"query\":%s,\"attn_mask\":%s}", bmat(3, eq, 64, 1), mask_mat(2, 2, 9, 0)),
                  &in);
    if (r) {
        CHECK(mask_ok(r->seqs[0].attn_mask, ATTN_MASK_BOOL, 2, 2, 9));
        CHECK(r->seqs[1].attn_mask == r->seqs[0].attn_mask);
        CHECK(r->seqs[2].attn_mask == r->seqs[0].attn_mask);
        CHECK_INT_EQ(r->seqs[2].attn_mask_kind, ATTN_MASK_BOOL);
        attnd_request_free(r);
    }
}

/* ------------------------------------------------------------ fast path vs jansson path */

/* rows × cols numbers in an awkward text style: %.17g, integers, -0,
 * exponents, spaces and newlines between tokens. */
static char *mat_styled(int rows, int cols, unsigned seed)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    fputs("[ ", f);
    for (int r = 0; r < rows; r++) {
        fputs(r ? ",\n [" : "[", f);
        for (int c = 0; c < cols; c++) {
            size_t i = (size_t)r * (size_t)cols + (size_t)c;
            float v = val(seed, i);
            if (c)
                fputs(i % 3 ? "," : " ,\t", f);
            switch (i % 5) {
            case 0: fprintf(f, "%.17g", (double)v); break;
            case 1: fprintf(f, "%d", (int)(hash32((uint32_t)i) % 2001) - 1000); break;
            case 2: fprintf(f, "%.6E", (double)v); break;
            case 3: fputs(i % 2 ? "-0.0" : "0e0", f); break; /* jansson reads "-0" as +0 */
            default: fprintf(f, "%.9g", (double)v); break;
            }
        }
        fputs(" ]", f);
    }
    fputs("\n]", f);
    fclose(f);
    return keep(s);
}

/* Both requests hold identical floats everywhere (inputs and masks). */
static int same_request(const attnd_request *a, const attnd_request *b, const attn_layer_info *in)
{
    if (a->n_seqs != b->n_seqs || a->batched != b->batched || a->n_tokens != b->n_tokens ||
        a->bytes != b->bytes)
        return 0;
    for (int i = 0; i < a->n_seqs; i++) {
        const attn_seq *x = &a->seqs[i], *y = &b->seqs[i];
        if (x->t != y->t || x->s != y->s || x->attn_mask_kind != y->attn_mask_kind ||
            x->attn_mask_per_head != y->attn_mask_per_head)
            return 0;
        size_t mask_n = (size_t)(x->attn_mask_per_head ? in->num_heads : 1) * x->t * x->s;
        if (memcmp(x->query, y->query, (size_t)x->t * in->embed_q * 4) ||
            (x->key && memcmp(x->key, y->key, (size_t)x->s * in->embed_k * 4)) ||
            (x->value && memcmp(x->value, y->value, (size_t)x->s * in->embed_v * 4)) ||
            (x->attn_mask && memcmp(x->attn_mask, y->attn_mask, mask_n * 4)))
            return 0;
    }
    return 1;
}

TEST(fast_matches_jansson)
{
    attn_layer_info in = cross_model();
    int ts[2] = {3, 1}, ss[2] = {2, 4};
    char *q = fmt("[%s,%s]", mat_styled(3, 32, 1), mat_styled(1, 32, 2));
    char *k = fmt("[%s,%s]", mat_styled(2, 48, 3), mat_styled(4, 48, 4));
    char *v = fmt("[%s,%s]", mat_styled(2, 24, 5), mat_styled(4, 24, 6));
    char *m = fmt("[%s,%s]", mat_styled(ts[0], ss[0], 7), mat_styled(ts[1], ss[1], 8));
    /* Escaped member names are the same JSON names, but the fast scanner
     * compares raw bytes, so the second body takes the jansson path. */
    char *fast = fmt("{\"query\":%s,\"key\":%s,\"value\":%s,\"attn_mask\":%s}", q, k, v, m);
    char *slow = fmt("{\"\\u0071uery\":%s,\"\\u006bey\":%s,\"valu\\u0065\":%s,"
                     "\"attn\\u005fmask\":%s}",
                     q, k, v, m);
    attnd_request *a = decode_ok(fast, &in), *b = decode_ok(slow, &in);
    CHECK(a && b);
    CHECK(a && b && same_request(a, b, &in));
    if (a) {
        CHECK_INT_EQ(a->seqs[1].s, 4);
        CHECK_INT_EQ(a->seqs[0].attn_mask_kind, ATTN_MASK_FLOAT);
        CHECK(bits_of(a->seqs[0].query[3]) == 0x80000000u); /* "-0.0" keeps its sign */
    }
    attnd_request_free(a);
    attnd_request_free(b);

    /* The fast path rounds text correctly where text -> double -> float does
     * not (the one such shortest text of all float32s). */
    attn_layer_info self = self_model();
    char *row = fmt("[7.038531e-26");
    for (int i = 1; i < 64; i++)
        row = fmt("%s,7.038531e-26", row);
    a = decode_ok(fmt("{\"query\":[%s]]}", row), &self);
    CHECK(a && bits_of(a->seqs[0].query[0]) == 0x15ae43fdu && bits_of(a->seqs[0].query[63]) ==
                                                                 0x15ae43fdu);
    attnd_request_free(a);

    /* "-0" is -0.0f on the fast path (jansson's general path reads the
     * integer 0, losing the sign; documented). */
    char *zeros = fmt("[-0");
    for (int i = 1; i < 64; i++)
        zeros = fmt("%s,-0", zeros);
    a = decode_ok(fmt("{\"query\":[%s]]}", zeros), &self);
    CHECK(a && bits_of(a->seqs[0].query[5]) == 0x80000000u);
    attnd_request_free(a);

    /* Blanking keeps jansson's line numbers: the error is on line 4. */
    attnd_http_error err;
    attnd_request *r = NULL;
    char *body = fmt("{\"query\":%s,\n\"is_causal\":tru}", mat_styled(2, 64, 1));
    CHECK_INT_EQ(attnd_codec_decode_request(body, strlen(body), &self, NULL, &r, &err), -1);
    CHECK_STR_EQ(err.code, "invalid_json");
    CHECK_MSG(strstr(err.message, "line 4,") != NULL, "%s", err.message);

    /* Error positions after a fast-parsed member map back to the body sent:
     * the same as the general path's, which reads a 5-byte longer name. */
    const char *tails[] = {",\"is_causal\":tru}", ",\n \"x\u00e9\":1,\"is_causal\":[1,}",
                           "} x", ",\"query\":[[1]]}"};
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        const char *q = i % 2 ? mat_styled(3, 64, 4) : mat(2, 64, 4);
        attnd_http_error e2;
        char *b1 = fmt("{\"query\":%s%s", q, tails[i]);
        char *b2 = fmt("{\"\\u0071uery\":%s%s", q, tails[i]);
        int l1 = 0, c1 = 0, p1 = 0, l2 = 0, c2 = 0, p2 = 0, n1 = 0, n2 = 0;
        attnd_codec_decode_request(b1, strlen(b1), &self, NULL, &r, &err);
        attnd_codec_decode_request(b2, strlen(b2), &self, NULL, &r, &e2);
        CHECK_STR_EQ(err.code, e2.code);
        const char *m1 = strstr(err.message, "line "), *m2 = strstr(e2.message, "line ");
        if (m1)
            n1 = sscanf(m1, "line %d, column %d (byte %d)", &l1, &c1, &p1);
        if (m2)
            n2 = sscanf(m2, "line %d, column %d (byte %d)", &l2, &c2, &p2);
        CHECK_MSG(n1 >= 2 && n2 >= 2 && l1 == l2 && (l1 > 1 || c1 + 5 == c2) &&
                      (n1 < 3 || p1 + 5 == p2),
                  "fast \"%s\" vs general \"%s\"", err.message, e2.message);
    }

    /* A member the fast parser declines (1e39) is named by the general path,
     * next to a fast-parsed one. */
    char *bad_row = fmt("[1e39");
    for (int i = 1; i < 64; i++)
        bad_row = fmt("%s,0", bad_row);
    body = fmt("{\"query\":%s,\"key\":[%s],%s]]}", mat(2, 64, 1), row, bad_row);
    CHECK_INT_EQ(attnd_codec_decode_request(body, strlen(body), &self, NULL, &r, &err), -1);
    CHECK_STR_EQ(err.code, "non_finite");
    CHECK_STR_EQ(err.field, "key[1][0]");
    /* A fast-parsed query with a short row reports like the general path. */
    body = fmt("{\"query\":[%s,%s]}", mat_styled(2, 64, 1), mat_short(5, 64, 2, 3));
    CHECK_INT_EQ(attnd_codec_decode_request(body, strlen(body), &self, NULL, &r, &err), -1);
    CHECK_STR_EQ(err.field, "query[1][3]");
    CHECK_STR_EQ(err.message, "expected 64 numbers, got 63");
    CHECK(r == NULL);
}

/* ------------------------------------------------------------ decode: bad bodies */

typedef struct bad_case {
    const char *what;
    const char *body;
    const attn_layer_info *model;
    attnd_decode_limits limits;
    int status;
    const char *code;
    const char *field;
    const char *message_has; /* substring of the message, or NULL */
} bad_case;

static void run_bad(const bad_case *c, size_t len)
{
    attnd_request *req = (attnd_request *)(uintptr_t)1; /* must be set to NULL */
    attnd_http_error err;
    memset(&err, 0x55, sizeof err);
    int rc = attnd_codec_decode_request(c->body, len, c->model, &c->limits, &req, &err);
    CHECK_MSG(rc == -1, "%s: rc %d", c->what, rc);
    CHECK_MSG(req == NULL, "%s: *out not NULL", c->what);
    if (rc == 0 && req && req != (attnd_request *)(uintptr_t)1)
        attnd_request_free(req);
    if (rc != -1)
        return;
    CHECK_MSG(err.status == c->status && strcmp(err.code, c->code) == 0 &&
                  strcmp(err.field, c->field) == 0 &&
                  (!c->message_has || strstr(err.message, c->message_has)),
              "%s: got %d %s field=\"%s\" message=\"%s\"; want %d %s field=\"%s\" (\"%s\")",
              c->what, err.status, err.code, err.field, err.message, c->status, c->code,
              c->field, c->message_has ? c->message_has : "");
}

static char *deep(int n)
{
    char *s = malloc((size_t)n * 2 + 16);
    if (!s)
        exit(2);
    char *p = s;
    p += sprintf(p, "{\"query\":");
    for (int i = 0; i < n; i++)
        *p++ = '[';
    for (int i = 0; i < n; i++)
        *p++ = ']';
    strcpy(p, "}");
    return keep(s);
}

TEST(bad_bodies)
{
    static attn_layer_info self, cross;
    self = self_model();
    cross = cross_model();
    const attn_layer_info *S = &self, *X = &cross;
    const char *q3 = mat(3, 64, 1);
    int ts2[2] = {2, 3}, ts3[3] = {2, 3, 1}, eq2[2] = {2, 2};
    const char *qb = bmat(2, ts2, 64, 1);
    const char *qx = mat(2, 32, 1), *kx = mat(4, 48, 2), *vx = mat(4, 24, 3);
    char *long_id = fmt("%0200d", 7);
    attnd_decode_limits L0 = {0};
    attnd_decode_limits Ldepth = {.max_json_depth = 32};
    attnd_decode_limits Ldepth2 = {.max_json_depth = 2}; /* {"query":[[...]]} nests 3 deep */
    attnd_decode_limits Lseq = {.max_seq_len = 2};
    attnd_decode_limits Lbatch = {.max_batch_seqs = 1};
    attnd_decode_limits Lelems = {.max_request_elems = 100};
    attnd_decode_limits Lw = {.max_weights_elems = 8};

    const bad_case cases[] = {
        {"empty body", "", S, L0, 400, "invalid_json", "", "line 1"},
        {"truncated", fmt("{\"query\":%.*s", 50, q3), S, L0, 400, "invalid_json", "", "column"},
        {"trailing garbage", fmt("{\"query\":%s} x", q3), S, L0, 400, "invalid_json", "", NULL},
        {"not an object", fmt("%s", q3), S, L0, 400, "invalid_type", "", "object"},
        {"scalar body", "42", S, L0, 400, "invalid_json", "", NULL},
        {"NaN literal", "{\"query\":[[NaN]]}", S, L0, 400, "non_finite", "query[0][0]", "NaN"},
        {"Infinity literal", "{\"query\":[[Infinity]]}", S, L0, 400, "non_finite", "query[0][0]",
         "json.dumps"},
        {"-Infinity literal", "{\"query\":[[-Infinity]]}", S, L0, 400, "non_finite", "query[0][0]",
         "-Infinity"},
        {"NaN after a syntax error", "{\"query\":[[1 2, NaN]]}", S, L0, 400, "invalid_json", "",
         NULL},
        {"NaN in a nested key", "{\"query\":[[1],[2]],\"key\":[[0.5],[NaN]]}", S, L0, 400,
         "non_finite", "key[1][0]", NULL},
        {"invalid UTF-8", fmt("{\"query\":%s,\"id\":\"\xff\xfe\"}", q3), S, L0, 400,
         "invalid_json", "", NULL},
        {"duplicate key", fmt("{\"query\":%s,\"query\":%s}", q3, q3), S, L0, 400,
         "duplicate_field", "query", NULL},
        {"duplicate flag", fmt("{\"is_causal\":true,\"query\":%s,\"is_causal\":false}", q3), S, L0,
         400, "duplicate_field", "is_causal", NULL},
        {"unknown field", fmt("{\"query\":%s,\"querry\":1}", q3), S, L0, 400, "unknown_field",
         "querry", "querry"},
        {"unknown model field", fmt("{\"model\":\"demo\",\"query\":%s}", q3), S, L0, 400,
         "unknown_field", "model", NULL},
        {"missing query", "{\"is_causal\":true}", S, L0, 400, "invalid_value", "query", NULL},
        {"query null", "{\"query\":null}", S, L0, 400, "invalid_type", "query", NULL},
        {"query string", "{\"query\":\"abc\"}", S, L0, 400, "invalid_type", "query", NULL},
        {"empty query", "{\"query\":[]}", S, L0, 400, "invalid_shape", "query", NULL},
        {"empty sequence", "{\"query\":[[]]}", S, L0, 400, "invalid_shape", "query[0]", NULL},
        {"empty sequence in batch", fmt("{\"query\":[%s,[]]}", mat(2, 64, 1)), S, L0, 400,
         "invalid_shape", "query[1]", "empty"},
        {"flat query", "{\"query\":[1,2,3]}", S, L0, 400, "invalid_type", "query[0]", NULL},
        {"short row", fmt("{\"query\":%s}", mat_short(3, 64, 1, 1)), S, L0, 400, "invalid_shape",
         "query[1]", "expected 64 numbers, got 63"},
        {"short row in batch",
         fmt("{\"query\":[%s,%s]}", mat(2, 64, 1), mat_short(5, 64, 2, 3)), S, L0, 400,
         "invalid_shape", "query[1][3]", "expected 64 numbers, got 63"},
        {"ragged rows width 65", fmt("{\"query\":[%s,%s]}", mat(1, 64, 1), mat(1, 65, 2)), S, L0,
         400, "invalid_shape", "query[1][0]", "expected 64 numbers, got 65"},
        {"row not array in batch", fmt("{\"query\":[%s,[[1],2]]}", mat(1, 64, 1)), S, L0, 400,
         "invalid_shape", "query[1][0]", NULL},
        {"string in query",
         "{\"query\":[[0,1,2,3,4,\"x\",6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,"
         "3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3]]}",
         S, L0, 400, "invalid_type", "query[0][5]", "number"},
        {"bool in query",
         "{\"query\":[[0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,"
         "3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,true]]}",
         S, L0, 400, "invalid_type", "query[0][63]", NULL},
        {"1e39",
         "{\"query\":[[0,1,1e39,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,"
         "3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3]]}",
         S, L0, 400, "non_finite", "query[0][2]", "float32"},
        {"-1e39 in batch",
         fmt("{\"query\":[%s,[[0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,"
             "1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,-1e39]]]}",
             mat(1, 64, 1)),
         S, L0, 400, "non_finite", "query[1][0][63]", NULL},
        {"1e400", "{\"query\":[[1e400]]}", S, L0, 400, "non_finite", "", NULL},
        {"deep nesting", deep(10000), S, Ldepth, 400, "invalid_json", "", "max_json_depth"},
        {"deep nesting, no limit", deep(10000), S, L0, 400, "invalid_json", "", NULL},
        /* the fast-parsed arrays' depth is counted while parsing, not rescanned */
        {"fast query deeper than the limit", fmt("{\"query\":%s}", mat(2, 64, 1)), S, Ldepth2, 400,
         "invalid_json", "", "max_json_depth 2"},
        {"deep nesting beside a fast query",
         fmt("{\"query\":%s,\"x\":[[[]]]}", mat(2, 64, 1)), S,
         (attnd_decode_limits){.max_json_depth = 3}, 400, "invalid_json", "", "max_json_depth 3"},
        {"is_causal number", fmt("{\"query\":%s,\"is_causal\":1}", q3), S, L0, 400,
         "invalid_type", "is_causal", NULL},
        {"need_weights string", fmt("{\"query\":%s,\"need_weights\":\"yes\"}", q3), S, L0, 400,
         "invalid_type", "need_weights", NULL},
        {"average not bool", fmt("{\"query\":%s,\"average_attn_weights\":0}", q3), S, L0, 400,
         "invalid_type", "average_attn_weights", NULL},
        {"negative window", fmt("{\"query\":%s,\"window\":-1}", q3), S, L0, 400, "invalid_value",
         "window", ">= 0"},
        {"fractional window", fmt("{\"query\":%s,\"window\":1.5}", q3), S, L0, 400,
         "invalid_type", "window", NULL},
        {"huge window", fmt("{\"query\":%s,\"window\":4294967296}", q3), S, L0, 400,
         "invalid_value", "window", NULL},
        {"negative timeout", fmt("{\"query\":%s,\"timeout_ms\":-5}", q3), S, L0, 400,
         "invalid_value", "timeout_ms", NULL},
        {"id too long", fmt("{\"query\":%s,\"id\":\"%s\"}", q3, long_id), S, L0, 400,
         "invalid_value", "id", "127"},
        {"id not string", fmt("{\"query\":%s,\"id\":5}", q3), S, L0, 400, "invalid_type", "id",
         NULL},
        {"value without key", fmt("{\"query\":%s,\"value\":%s}", q3, q3), S, L0, 400,
         "invalid_value", "value", NULL},
        {"key batch mismatch", fmt("{\"query\":%s,\"key\":%s}", qb, bmat(3, ts3, 64, 5)), S, L0,
         400, "invalid_shape", "key", "expected 2 sequences"},
        {"key single in batch", fmt("{\"query\":%s,\"key\":%s}", qb, mat(2, 64, 5)), S, L0, 400,
         "invalid_type", "key[0][0]", NULL},
        {"key empty", fmt("{\"query\":%s,\"key\":[]}", q3), S, L0, 400, "invalid_shape", "key",
         NULL},
        {"key width", fmt("{\"query\":%s,\"key\":%s,\"value\":%s}", qx, mat(4, 47, 2), vx), X, L0,
         400, "invalid_shape", "key[0]", "expected 48 numbers, got 47"},
        {"key/value length", fmt("{\"query\":%s,\"key\":%s,\"value\":%s}", qx, kx, mat(3, 24, 3)),
         X, L0, 400, "invalid_shape", "value", "expected 4 rows, got 3"},
        {"key/value length in batch",
         fmt("{\"query\":%s,\"key\":%s,\"value\":%s}", qb, bmat(2, ts2, 64, 4),
             bmat(2, eq2, 64, 5)),
         S, L0, 400, "invalid_shape", "value[1]", "expected 3 rows, got 2"},
        {"cross model without key", fmt("{\"query\":%s}", qx), X, L0, 400, "invalid_value", "key",
         NULL},
        {"cross model without value", fmt("{\"query\":%s,\"key\":%s}", qx, kx), X, L0, 400,
         "invalid_value", "value", NULL},
        {"query width on cross", fmt("{\"query\":%s,\"key\":%s,\"value\":%s}", q3, kx, vx), X, L0,
         400, "invalid_shape", "query[0]", "expected 32 numbers, got 64"},
        {"padding length", fmt("{\"query\":%s,\"key_padding_mask\":%s}", q3, bools(2, 0)), S, L0,
         400, "invalid_shape", "key_padding_mask", "expected 3 booleans, got 2"},
        {"padding numbers", fmt("{\"query\":%s,\"key_padding_mask\":[0,1,0]}", q3), S, L0, 400,
         "invalid_type", "key_padding_mask[0]", "true or false"},
        {"padding flat in batch", fmt("{\"query\":%s,\"key_padding_mask\":%s}", qb, bools(2, 0)),
         S, L0, 400, "invalid_type", "key_padding_mask[0]", NULL},
        {"padding batch length",
         fmt("{\"query\":%s,\"key_padding_mask\":[%s,%s]}", qb, bools(2, 0), bools(2, 0)), S, L0,
         400, "invalid_shape", "key_padding_mask[1]", "expected 3 booleans, got 2"},
        {"mask rows", fmt("{\"query\":%s,\"attn_mask\":%s}", q3, mask_mat(2, 3, 0, 0)), S, L0,
         400, "invalid_shape", "attn_mask", "expected 3 rows, got 2"},
        {"mask cols", fmt("{\"query\":%s,\"attn_mask\":%s}", q3, mask_mat(3, 4, 0, 1)), S, L0,
         400, "invalid_shape", "attn_mask[0]", "expected 3 values, got 4"},
        {"mask heads", fmt("{\"query\":%s,\"attn_mask\":[%s,%s]}", q3, mask_mat(3, 3, 0, 0),
                           mask_mat(3, 3, 1, 0)),
         S, L0, 400, "invalid_shape", "attn_mask", "expected 8 heads, got 2"},
        {"mask flat", fmt("{\"query\":%s,\"attn_mask\":[true,false,true]}", q3), S, L0, 400,
         "invalid_shape", "attn_mask", "levels"},
        {"mask mixed kinds", fmt("{\"query\":%s,\"attn_mask\":[[true,0,1],[1,1,1],[1,1,1]]}", q3),
         S, L0, 400, "invalid_type", "attn_mask[0][1]", "true or false"},
        {"mask mixed kinds 2", fmt("{\"query\":%s,\"attn_mask\":[[0,true,1],[1,1,1],[1,1,1]]}", q3),
         S, L0, 400, "invalid_type", "attn_mask[0][1]", "number"},
        {"mask strings", fmt("{\"query\":%s,\"attn_mask\":[[\"a\"]]}", q3), S, L0, 400,
         "invalid_type", "attn_mask[0][0]", NULL},
        {"mask batch count",
         fmt("{\"query\":%s,\"attn_mask\":[%s]}", qb, mask_mat(2, 2, 0, 0)), S, L0, 400,
         "invalid_shape", "attn_mask", "expected 2 sequences"},
        {"mask batch shape",
         fmt("{\"query\":%s,\"attn_mask\":[%s,%s]}", qb, mask_mat(2, 2, 0, 0),
             mask_mat(2, 3, 0, 0)),
         S, L0, 400, "invalid_shape", "attn_mask[1]", "expected 3 rows, got 2"},
        {"shared mask in ragged batch", fmt("{\"query\":%s,\"attn_mask\":%s}", qb,
                                            mask_mat(2, 2, 0, 0)),
         S, L0, 400, "invalid_shape", "attn_mask", "same T"},
        {"per-head mask in batch, wrong h",
         fmt("{\"query\":%s,\"attn_mask\":[[%s],[%s]]}", bmat(2, eq2, 64, 1), mask_mat(2, 2, 0, 0),
             mask_mat(2, 2, 0, 0)),
         S, L0, 400, "invalid_shape", "attn_mask[0]", "expected 8 heads, got 1"},
        {"mask too deep", fmt("{\"query\":%s,\"attn_mask\":[[[[[true]]]]]}", q3), S, L0, 400,
         "invalid_shape", "attn_mask", NULL},
        {"max_seq_len query", fmt("{\"query\":%s}", q3), S, Lseq, 413, "limit_exceeded", "query",
         "max_seq_len"},
        {"max_seq_len batch", fmt("{\"query\":%s}", qb), S, Lseq, 413, "limit_exceeded",
         "query[1]", "max_seq_len"},
        {"max_seq_len key", fmt("{\"query\":%s,\"key\":%s,\"value\":%s}", qx, kx, vx), X, Lseq,
         413, "limit_exceeded", "key", "max_seq_len"},
        {"max_batch_seqs", fmt("{\"query\":%s}", qb), S, Lbatch, 413, "limit_exceeded", "query",
         "max_batch_seqs"},
        {"max_request_elems", fmt("{\"query\":%s}", q3), S, Lelems, 413, "limit_exceeded",
         "query", "max_request_elems"},
        {"max_weights_elems", fmt("{\"query\":%s,\"need_weights\":true}", q3), S, Lw, 413,
         "limit_exceeded", "need_weights", "max_weights_elems"},
        {"max_weights_elems per head",
         fmt("{\"query\":%s,\"need_weights\":true,\"average_attn_weights\":false}",
             mat(2, 64, 1)),
         S, Lw, 413, "limit_exceeded", "need_weights", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_bad(&cases[i], strlen(cases[i].body));

    /* A NUL byte inside the body (length-delimited, not a C string). */
    static const char nul_body[] = "{\"query\":[[1]]\0}";
    bad_case nul = {"NUL byte", nul_body, S, L0, 400, "invalid_json", "", "NUL"};
    run_bad(&nul, sizeof nul_body - 1);
    /* jansson alone accepts a NUL right after a number: "{..,"window":1\0}". */
    char *nul2 = fmt("{\"query\":%s,\"window\":1", q3);
    size_t nul2_len = strlen(nul2) + 2;
    char *nul2_body = keep(malloc(nul2_len));
    memcpy(nul2_body, nul2, nul2_len - 2);
    memcpy(nul2_body + nul2_len - 2, "\0}", 2);
    bad_case nul_after_number = {"NUL after a number", nul2_body, S, L0, 400, "invalid_json", "",
                                 "NUL"};
    run_bad(&nul_after_number, nul2_len);

    /* Within limits: the same bodies decode. */
    attnd_request *r = NULL;
    attnd_http_error err;
    const char *ok = fmt("{\"query\":%s,\"need_weights\":true}", mat(2, 64, 1));
    attnd_decode_limits fit = {.max_seq_len = 2, .max_batch_seqs = 1, .max_request_elems = 128,
                               .max_weights_elems = 4, .max_json_depth = 3};
    CHECK_INT_EQ(attnd_codec_decode_request(ok, strlen(ok), S, &fit, &r, &err), 0);
    attnd_request_free(r);
}

/* ------------------------------------------------------------ encode */

/* Fills float buffers with awkward but finite values: -0, subnormals, extremes. */
static float awkward(size_t i)
{
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, FLT_MAX, -FLT_MAX, FLT_MIN,
                                    1e-45f, 0.1f, 1e10f, 123456.7f};
    size_t n = sizeof special / sizeof special[0];
    return i < n ? special[i] : val(99, i);
}

/* a (JSON array nest) holds exactly x[0..n) in order; *k counts leaves. */
static int json_matches(const json_t *a, const float *x, size_t *k, size_t n, int depth)
{
    if (!json_is_array(a))
        return 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        if (depth > 1) {
            if (!json_matches(v, x, k, n, depth - 1))
                return 0;
        } else {
            if (!json_is_number(v) || *k >= n)
                return 0;
            float f = (float)json_number_value(v);
            if (bits_of(f) != bits_of(x[*k]))
                return 0;
            (*k)++;
        }
    }
    return 1;
}

TEST(encode_roundtrip)
{
    attn_layer_info in = self_model();
    int ts[2] = {2, 3};
    attnd_request *r = decode_ok(
        fmt("{\"query\":%s,\"need_weights\":true,\"average_attn_weights\":false,"
            "\"id\":\"a\\\"b\\\\c\\n\\u00e9\"}",
            bmat(2, ts, 64, 1)),
        &in);
    if (!r)
        return;
    /* What the worker would write: outputs then weights, one running index. */
    size_t k = 0;
    for (int b = 0; b < 2; b++) {
        attn_seq *s = &r->seqs[b];
        for (size_t i = 0; i < (size_t)s->t * 64; i++)
            s->output[i] = awkward(k++);
    }
    for (int b = 0; b < 2; b++) {
        attn_seq *s = &r->seqs[b];
        for (size_t i = 0; i < (size_t)8 * s->t * s->s; i++)
            s->weights[i] = awkward(k++);
    }
    r->queue_us = 412;
    r->compute_us = 180;
    r->batch_size = 6;
    r->outcome = ATTND_DONE_OK;
    size_t len = 0;
    char *body = attnd_codec_encode_response(r, "de\"mo\x01\xff", &len);
    CHECK(body != NULL);
    if (!body) {
        attnd_request_free(r);
        return;
    }
    CHECK_INT_EQ(len, strlen(body));
    json_error_t je;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    CHECK_MSG(j != NULL, "response is not JSON: %s at %d", je.text, je.position);
    if (j) {
        CHECK_STR_EQ(json_string_value(json_object_get(j, "model")), "de\"mo\x01\xef\xbf\xbd");
        CHECK_STR_EQ(json_string_value(json_object_get(j, "id")), "a\"b\\c\n\xc3\xa9");
        const json_t *out = json_object_get(j, "output"), *w = json_object_get(j, "weights");
        CHECK(json_array_size(out) == 2 && json_array_size(json_array_get(out, 1)) == 3 &&
              json_array_size(json_array_get(json_array_get(out, 1), 0)) == 64);
        /* Output B × T × E_out and weights B × h × T × S, compared per sequence. */
        size_t seen = 0;
        for (int b = 0; b < 2; b++) {
            seen = 0;
            size_t nb = (size_t)ts[b] * 64;
            CHECK(json_matches(json_array_get(out, (size_t)b), r->seqs[b].output, &seen, nb, 2) &&
                  seen == nb);
        }
        CHECK(json_array_size(w) == 2 && json_array_size(json_array_get(w, 0)) == 8);
        for (int b = 0; b < 2; b++) {
            seen = 0;
            size_t nb = (size_t)8 * ts[b] * ts[b];
            CHECK(json_matches(json_array_get(w, (size_t)b), r->seqs[b].weights, &seen, nb, 3) &&
                  seen == nb);
        }
        const json_t *t = json_object_get(j, "timing");
        CHECK_INT_EQ(json_integer_value(json_object_get(t, "queue_us")), 412);
        CHECK_INT_EQ(json_integer_value(json_object_get(t, "compute_us")), 180);
        CHECK_INT_EQ(json_integer_value(json_object_get(t, "batch_size")), 6);
        CHECK_INT_EQ(json_object_size(j), 5);
        /* -0 keeps its sign through a JSON parser. */
        double z = json_number_value(json_array_get(json_array_get(json_array_get(out, 0), 0), 1));
        CHECK(z == 0.0 && signbit(z));
        json_decref(j);
    }
    free(body);

    /* A NaN in an output (a library bug) is refused, never printed. */
    r->seqs[1].output[5] = NAN;
    CHECK(attnd_codec_encode_response(r, "demo", &len) == NULL);
    attnd_request_free(r);

    /* Single, averaged weights, no id: output T×E_out, weights T×S. */
    r = decode_ok(fmt("{\"query\":%s,\"need_weights\":true}", mat(2, 64, 3)), &in);
    if (!r)
        return;
    for (size_t i = 0; i < 2 * 64; i++)
        r->seqs[0].output[i] = val(5, i);
    for (size_t i = 0; i < 4; i++)
        r->seqs[0].weights[i] = 0.25f * (float)i;
    body = attnd_codec_encode_response(r, "demo", &len);
    j = body ? json_loadb(body, len, 0, &je) : NULL;
    CHECK(j != NULL);
    if (j) {
        CHECK(json_object_get(j, "id") == NULL);
        size_t seen = 0;
        CHECK(json_matches(json_object_get(j, "output"), r->seqs[0].output, &seen, 128, 2) &&
              seen == 128);
        seen = 0;
        CHECK(json_matches(json_object_get(j, "weights"), r->seqs[0].weights, &seen, 4, 2) &&
              seen == 4);
        json_decref(j);
    }
    CHECK(body && strstr(body, "\"weights\":[[0,0.25],[0.5,0.75]]"));
    free(body);
    attnd_request_free(r);

    /* Without need_weights there is no weights member. */
    r = decode_ok(fmt("{\"query\":%s}", mat(1, 64, 3)), &in);
    if (r) {
        body = attnd_codec_encode_response(r, "demo", &len);
        CHECK(body && !strstr(body, "weights") && strstr(body, "\"output\":[[0,0,"));
        free(body);
        attnd_request_free(r);
    }
}

TEST(encode_error)
{
    attnd_http_error e;
    attnd_http_error_set(&e, 400, "invalid_shape", "query[1][3]", "expected %d numbers, got %d",
                         64, 63);
    CHECK_INT_EQ(e.status, 400);
    size_t len = 0;
    char *body = attnd_codec_encode_error(&e, &len);
    CHECK_STR_EQ(body, "{\"error\":{\"code\":\"invalid_shape\",\"message\":\"expected 64 "
                       "numbers, got 63\",\"field\":\"query[1][3]\"}}");
    CHECK_INT_EQ(len, body ? strlen(body) : 0);
    free(body);

    /* jansson's messages quote raw input: invalid UTF-8 and quotes must still
     * give valid JSON. */
    attnd_http_error_set(&e, 400, "invalid_json", "", "invalid token near '\"\xc3\x28\\\t'");
    body = attnd_codec_encode_error(&e, &len);
    json_error_t je;
    json_t *j = body ? json_loadb(body, len, 0, &je) : NULL;
    CHECK(j != NULL);
    const json_t *err = json_object_get(j, "error");
    CHECK_STR_EQ(json_string_value(json_object_get(err, "message")),
                 "invalid token near '\"\xef\xbf\xbd(\\\t'");
    CHECK_STR_EQ(json_string_value(json_object_get(err, "field")), "");
    json_decref(j);
    free(body);

    /* A decode error encodes too. */
    attnd_request *r = NULL;
    attn_layer_info in = self_model();
    const char *bad = "{\"query\":[[1,2],[3]],}";
    CHECK_INT_EQ(attnd_codec_decode_request(bad, strlen(bad), &in, NULL, &r, &e), -1);
    body = attnd_codec_encode_error(&e, &len);
    j = body ? json_loadb(body, len, 0, &je) : NULL;
    CHECK(j && strcmp(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                      "invalid_json") == 0);
    json_decref(j);
    free(body);
}

TEST(misc)
{
    attnd_request_free(NULL);
    /* A hand-built request with separate storage frees both. */
    attnd_request *r = calloc(1, sizeof *r);
    CHECK(r != NULL);
    if (r) {
        r->storage = malloc(64);
        attnd_request_free(r);
    }
    int64_t a = attnd_now_ns(), b = attnd_now_ns();
    CHECK(a > 0 && b >= a);
    attnd_http_error e;
    char longfield[400];
    memset(longfield, 'f', sizeof longfield - 1);
    longfield[sizeof longfield - 1] = '\0';
    attnd_http_error_set(&e, 413, "limit_exceeded", longfield, "%s", longfield);
    CHECK_INT_EQ(strlen(e.field), sizeof e.field - 1);
    CHECK_INT_EQ(strlen(e.message), sizeof e.message - 1);
}

/* attnd_jb_i64 writes what "%lld" does, at the extremes too. */
TEST(jsonbuf_integers)
{
    const long long v[] = {0, 1, -1, 9, 10, -10, 99, 100, 123456789, -987654321,
                           4294967296LL, LLONG_MAX, LLONG_MIN};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        attnd_jsonbuf b = {0};
        attnd_jb_putc(&b, '[');
        attnd_jb_i64(&b, v[i]);
        attnd_jb_putc(&b, ']');
        size_t len = 0;
        char *text = attnd_jb_finish(&b, &len);
        char want[32];
        snprintf(want, sizeof want, "[%lld]", v[i]);
        CHECK_MSG(text && strcmp(text, want) == 0 && len == strlen(want), "%lld printed as %s",
                  v[i], text ? text : "(null)");
        free(text);
    }
}

int main(void)
{
    RUN(jsonbuf_integers);
    RUN(single);
    RUN(batch_ragged);
    RUN(cross);
    RUN(masks_single);
    RUN(masks_batch);
    RUN(fast_matches_jansson);
    RUN(bad_bodies);
    RUN(encode_roundtrip);
    RUN(encode_error);
    RUN(misc);
    for (int i = 0; i < n_kept; i++)
        free(kept[i]);
    return check_summary();
}
