/* test_v2_header.c — the v2 codec's fast header path (codec_v2.c: fast_header and
 * fast_apply, no jansson) against its jansson path: every binary header decoded twice,
 * as written (the fast path takes it) and with its "inputs" key spelled
 * "\u0069nputs" (the same JSON, which the fast scanner declines: jansson reads it),
 * must give the same result — the same request (every field and array the codec
 * fills) and call, or the same error status and message.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "protocol/codec_v2.h"

static const attn_layer_info model = {.num_heads = 2, .head_dim_k = 2, .head_dim_v = 2,
                                      .embed_q = 4, .embed_k = 4, .embed_v = 4,
                                      .embed_out = 4, .has_out_proj = 1};
static const attnd_decode_limits limits = {.max_seq_len = 64, .max_batch_seqs = 8,
                                           .max_json_depth = 16};

/* A header and its binary tail: "f N" N float32 (0.25, 0.5, ...), "i N" N int64
 * (0, 1, ...), "b N" N bytes (0, 1, 0, ...), in order. */
typedef struct hcase {
    const char *header;
    const char *tail;
} hcase;

static size_t make_body(const char *header, const char *tail, char *out, size_t cap)
{
    size_t n = strlen(header);
    memcpy(out, header, n);
    for (const char *t = tail; *t;) {
        char kind = *t;
        int count = atoi(t + 1);
        for (int k = 0; k < count && n + 8 <= cap; k++) {
            if (kind == 'f') {
                float v = 0.25f * (float)(k + 1);
                memcpy(out + n, &v, 4), n += 4;
            } else if (kind == 'i') {
                int64_t v = k;
                memcpy(out + n, &v, 8), n += 8;
            } else {
                out[n++] = (char)(k & 1);
            }
        }
        while (*t && *t != ' ') t++;
        while (*t == ' ') t++;
    }
    return n;
}

/* The header with its first "inputs" key escaped (jansson's path), into out. */
static size_t slow_twin(const char *body, size_t len, size_t hl, char *out, size_t *out_hl)
{
    const char *k = strstr(body, "\"inputs\"");
    size_t at = (size_t)(k - body), n = 0;
    memcpy(out, body, at + 1), n = at + 1;
    memcpy(out + n, "\\u0069", 6), n += 6;
    memcpy(out + n, body + at + 2, len - at - 2), n += len - at - 2;
    *out_hl = hl + 5;
    return n;
}

static int same_floats(const float *a, const float *b, size_t n)
{
    return (!a && !b) || (a && b && memcmp(a, b, n * sizeof *a) == 0);
}

static void compare(const char *what, const char *body, size_t len, size_t hl)
{
    char twin[4096];
    size_t thl = 0, tlen = slow_twin(body, len, hl, twin, &thl);
    attnd_request *a = NULL, *b = NULL;
    attnd_v2_call ca, cb;
    attnd_http_error ea = {0}, eb = {0};
    int ra = attnd_codec_v2_decode(body, len, (long long)hl, &model, &limits, &a, &ca, &ea);
    int rb = attnd_codec_v2_decode(twin, tlen, (long long)thl, &model, &limits, &b, &cb, &eb);
    CHECK_MSG(ra == rb, "%s: fast %d (%s), jansson %d (%s)", what, ra, ea.message, rb,
              eb.message);
    if (ra != 0 || rb != 0) {
        /* A syntax error's position moves with the twin's 5 extra bytes: compare the rest. */
        const char *ma = strstr(ea.message, "): "), *mb = strstr(eb.message, "): ");
        int syntax = strncmp(ea.message, "invalid JSON", 12) == 0 && ma && mb;
        CHECK_MSG(ea.status == eb.status &&
                      strcmp(syntax ? ma : ea.message, syntax ? mb : eb.message) == 0 &&
                      strcmp(ea.field, eb.field) == 0,
                  "%s: fast %d %s \"%s\", jansson %d %s \"%s\"", what, ea.status, ea.field,
                  ea.message, eb.status, eb.field, eb.message);
        attnd_request_free(a);
        attnd_request_free(b);
        return;
    }
    CHECK_MSG(ca.n_outputs == cb.n_outputs && ca.batch == cb.batch && ca.t == cb.t &&
                  ca.s == cb.s,
              "%s: calls differ", what);
    for (int i = 0; i < ca.n_outputs && i < 2; i++)
        CHECK_MSG(ca.outputs[i] == cb.outputs[i] && ca.binary[i] == cb.binary[i],
                  "%s: output %d differs", what, i);
    CHECK_MSG(a->n_seqs == b->n_seqs && a->need_weights == b->need_weights &&
                  a->average_attn_weights == b->average_attn_weights &&
                  a->timeout_ms == b->timeout_ms && a->n_tokens == b->n_tokens &&
                  a->batched == b->batched && strcmp(a->id, b->id) == 0 &&
                  a->bytes == b->bytes,
              "%s: requests differ", what);
    for (int i = 0; i < a->n_seqs && i < b->n_seqs; i++) {
        const attn_seq *x = &a->seqs[i], *y = &b->seqs[i];
        const size_t nq = (size_t)x->t * 4, nk = (size_t)x->s * 4;
        int ok = x->t == y->t && x->s == y->s && x->is_causal == y->is_causal &&
                 x->window == y->window && x->weights_mode == y->weights_mode &&
                 x->attn_mask_kind == y->attn_mask_kind &&
                 same_floats(x->query, y->query, nq) && same_floats(x->key, y->key, nk) &&
                 same_floats(x->value, y->value, nk) &&
                 (!x->key_padding_mask) == (!y->key_padding_mask) &&
                 (!x->position_ids) == (!y->position_ids) && (!x->attn_mask) == (!y->attn_mask);
        if (ok && x->key_padding_mask)
            ok = memcmp(x->key_padding_mask, y->key_padding_mask, (size_t)x->s) == 0;
        if (ok && x->position_ids)
            ok = memcmp(x->position_ids, y->position_ids, (size_t)x->t * 8) == 0;
        if (ok && x->attn_mask)
            ok = memcmp(x->attn_mask, y->attn_mask,
                        (size_t)x->t * (size_t)x->s *
                            (x->attn_mask_kind == ATTN_MASK_FLOAT ? 4 : 1)) == 0;
        CHECK_MSG(ok, "%s: sequence %d differs", what, i);
    }
    attnd_request_free(a);
    attnd_request_free(b);
}

/* query [1,t,4] FP32 in n bytes (16 t). */
#define Q(t, n) "{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1," #t ",4]," \
                "\"parameters\":{\"binary_data_size\":" #n "}}"

TEST(fast_vs_jansson)
{
    static const hcase cases[] = {
        /* accepted by both */
        {"{\"inputs\":[" Q(1, 16) "]}", "f4"},
        {"{\"inputs\":[" Q(3, 48) "],\"parameters\":{\"binary_data_output\":true}}", "f12"},
        {" {\n \"id\" : \"req-7\" ,\t\"inputs\" : [ {\"parameters\":{\"binary_data_size\":32},"
         "\"shape\":[2,1,4],\"datatype\":\"FP32\",\"name\":\"query\"} ] } \r\n", "f8"},
        {"{\"parameters\":{\"is_causal\":true,\"window\":2,\"timeout_ms\":500,"
         "\"need_weights\":true,\"average_attn_weights\":false},\"inputs\":[" Q(3, 48) "]}", "f12"},
        {"{\"inputs\":[" Q(2, 32) "],\"outputs\":[{\"name\":\"attn_weights\",\"parameters\":"
         "{\"binary_data\":false}},{\"name\":\"output\"}],\"parameters\":"
         "{\"binary_data_output\":true}}", "f8"},
        {"{\"inputs\":[" Q(2, 32) "],\"outputs\":[]}", "f8"},
        {"{\"inputs\":[" Q(2, 32) ",{\"name\":\"key\",\"datatype\":\"FP32\",\"shape\":[1,3,4],"
         "\"parameters\":{\"binary_data_size\":48}},{\"name\":\"value\",\"datatype\":\"FP32\","
         "\"shape\":[1,3,4],\"parameters\":{\"binary_data_size\":48}},{\"name\":"
         "\"key_padding_mask\",\"datatype\":\"BOOL\",\"shape\":[1,3],\"parameters\":"
         "{\"binary_data_size\":3}}]}", "f8 f12 f12 b3"},
        {"{\"inputs\":[" Q(2, 32) ",{\"name\":\"attn_mask\",\"datatype\":\"BOOL\",\"shape\":[2,2],"
         "\"parameters\":{\"binary_data_size\":4}},{\"name\":\"position_ids\",\"datatype\":"
         "\"INT64\",\"shape\":[1,2],\"parameters\":{\"binary_data_size\":16}}]}", "f8 b4 i2"},
        {"{\"inputs\":[" Q(2, 32) ",{\"name\":\"attn_mask\",\"datatype\":\"FP32\",\"shape\":[2,2],"
         "\"parameters\":{\"binary_data_size\":16}}]}", "f8 f4"},
        /* refused by both, with the same message */
        {"{\"inputs\":[" Q(2, 32) "]}", "f7"},                                 /* bytes left */
        {"{\"inputs\":[" Q(2, 32) "]}", "f9"},
        {"{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,5],"
         "\"parameters\":{\"binary_data_size\":40}}]}", "f10"},            /* E */
        {"{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP16\",\"shape\":[1,2,4],"
         "\"parameters\":{\"binary_data_size\":16}}]}", "f4"},
        {"{\"inputs\":[{\"name\":\"qry\",\"datatype\":\"FP32\",\"shape\":[1,2,4],"
         "\"parameters\":{\"binary_data_size\":32}}]}", "f8"},
        {"{\"inputs\":[" Q(2, 32) "," Q(2, 32) "]}", "f16"},                       /* twice */
        {"{\"inputs\":[" Q(2, 32) "],\"parameters\":{\"is_causal\":1}}", "f8"},
        {"{\"inputs\":[" Q(2, 32) "],\"parameters\":{\"window\":-1}}", "f8"},
        {"{\"inputs\":[" Q(2, 32) "],\"parameters\":{\"window\":2147483648}}", "f8"},
        {"{\"inputs\":[" Q(2, 32) "],\"parameters\":{\"bogus\":true}}", "f8"},
        {"{\"inputs\":[" Q(2, 32) "],\"outputs\":[{\"name\":\"output\"},{\"name\":\"output\"}]}",
         "f8"},
        {"{\"inputs\":[" Q(2, 32) "],\"outputs\":[{\"name\":\"logits\"}]}", "f8"},
        {"{\"inputs\":[" Q(2, 32) "],\"id\":\"" "0123456789012345678901234567890123456789012345678901"
         "2345678901234567890123456789012345678901234567890123456789012345678901234567\"}", "f8"},
        {"{\"inputs\":[" Q(2, 32) "],\"inputs\":[" Q(2, 32) "]}", "f8"},          /* duplicate key */
        {"{\"inputs\":[" Q(2, 32) "]} x", "f8"},                                /* trailing */
        {"{\"inputs\":[" Q(2, 32) "],}", "f8"},
        {"{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,4],"
         "\"parameters\":{\"binary_data_size\":32.0}}]}", "f8"},
        {"{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,0,4],"
         "\"parameters\":{\"binary_data_size\":0}}]}", ""},
        {"{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,4,1,1],"
         "\"parameters\":{\"binary_data_size\":32}}]}", "f8"},
        {"{\"inputs\":[" Q(2, 32) ",{\"name\":\"position_ids\",\"datatype\":\"INT64\","
         "\"shape\":[1,3],\"parameters\":{\"binary_data_size\":24}}]}", "f8 i3"},
        {"{\"inputs\":[" Q(2, 32) "],\"parameters\":{\"timeout_ms\":99999999999999999}}", "f8"},
        {"{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,4],"
         "\"parameters\":{\"binary_data_size\":1234567890123456789}}]}", "f8"}, /* 19 digits */
        {"{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,4],"
         "\"parameters\":{\"binary_data_size\":99999999999999999999}}]}", "f8"},
        {"{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,4],"
         "\"parameters\":{\"binary_data_size\":032}}]}", "f8"},
        {"{\"inputs\":[" Q(2, 32) "],\"parameters\":{\"is_causal\":truex}}", "f8"},
        {"{\"inputs\":[" Q(2, 32) "],\"id\":\"caf\xc3\xa9\"}", "f8"},   /* UTF-8: jansson */
        {"{\"inputs\":[" Q(2, 32) "],\"id\":\"a\\\"b\"}", "f8"},          /* an escape */
    };
    char body[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = make_body(cases[i].header, cases[i].tail, body, sizeof body);
        char what[32];
        snprintf(what, sizeof what, "case %zu", i);
        compare(what, body, len, strlen(cases[i].header));
    }
    /* A non-finite binary value: the same error by either path. */
    size_t hl = strlen("{\"inputs\":[" Q(2, 32) "]}");
    size_t len = make_body("{\"inputs\":[" Q(2, 32) "]}", "f8", body, sizeof body);
    float inf = INFINITY;
    memcpy(body + hl + 4 * 5, &inf, 4);
    compare("infinite query value", body, len, hl);
}

int main(void)
{
    RUN(fast_vs_jansson);
    return check_summary();
}
