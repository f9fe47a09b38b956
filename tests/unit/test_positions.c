/* test_positions.c — position_ids (the rotary positions of a sequence's queries)
 * in both wire formats: /v1 JSON (per sequence, ragged batches), v2 INT64
 * tensors as JSON data and as binary data; every malformed form gets its 400
 * naming the field; requests without position_ids carry none.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "protocol/codec.h"
#include "protocol/codec_v2.h"

static const attn_layer_info model = {.num_heads = 2, .head_dim_k = 2, .head_dim_v = 2,
                                      .embed_q = 4, .embed_k = 4, .embed_v = 4,
                                      .embed_out = 4, .has_out_proj = 1};
static const attnd_decode_limits limits = {.max_seq_len = 64, .max_batch_seqs = 8,
                                           .max_json_depth = 16};

static attnd_request *v1(const char *body, attnd_http_error *e)
{
    attnd_request *r = NULL;
    memset(e, 0, sizeof *e);
    if (attnd_codec_decode_request(body, strlen(body), &model, &limits, &r, e) != 0)
        return NULL;
    return r;
}

TEST(v1_single)
{
    attnd_http_error e;
    attnd_request *r = v1("{\"query\":[[1,2,3,4],[5,6,7,8],[9,1,2,3]],"
                          "\"position_ids\":[100,101,100000]}", &e);
    CHECK_MSG(r != NULL, "%s: %s", e.field, e.message);
    if (!r)
        return;
    CHECK(r->seqs[0].position_ids != NULL);
    CHECK_INT_EQ(r->seqs[0].position_ids[0], 100);
    CHECK_INT_EQ(r->seqs[0].position_ids[1], 101);
    CHECK_INT_EQ(r->seqs[0].position_ids[2], 100000);
    CHECK_NEAR(r->seqs[0].query[4], 5.0, 0); /* the floats still land where they did */
    attnd_request_free(r);
}

TEST(v1_absent)
{
    attnd_http_error e;
    attnd_request *r = v1("{\"query\":[[1,2,3,4]]}", &e);
    CHECK(r != NULL && r->seqs[0].position_ids == NULL);
    attnd_request_free(r);
}

TEST(v1_ragged_batch)
{
    attnd_http_error e;
    attnd_request *r = v1("{\"query\":[[[1,2,3,4]],[[1,2,3,4],[5,6,7,8]]],"
                          "\"position_ids\":[[7],[0,9]]}", &e);
    CHECK_MSG(r != NULL, "%s: %s", e.field, e.message);
    if (!r)
        return;
    CHECK_INT_EQ(r->n_seqs, 2);
    CHECK_INT_EQ(r->seqs[0].position_ids[0], 7);
    CHECK_INT_EQ(r->seqs[1].position_ids[0], 0);
    CHECK_INT_EQ(r->seqs[1].position_ids[1], 9);
    attnd_request_free(r);
}

TEST(v1_errors)
{
    static const struct {
        const char *body, *code, *field;
    } bad[] = {
        {"{\"query\":[[1,2,3,4],[1,2,3,4]],\"position_ids\":[1]}", "invalid_shape",
         "position_ids"},
        {"{\"query\":[[1,2,3,4]],\"position_ids\":[-1]}", "invalid_value", "position_ids[0]"},
        {"{\"query\":[[1,2,3,4]],\"position_ids\":[1.5]}", "invalid_type", "position_ids[0]"},
        {"{\"query\":[[1,2,3,4]],\"position_ids\":[true]}", "invalid_type", "position_ids[0]"},
        {"{\"query\":[[1,2,3,4]],\"position_ids\":[9007199254740993]}", "invalid_value",
         "position_ids[0]"},
        {"{\"query\":[[1,2,3,4]],\"position_ids\":7}", "invalid_type", "position_ids"},
        {"{\"query\":[[[1,2,3,4]],[[1,2,3,4]]],\"position_ids\":[[0]]}", "invalid_shape",
         "position_ids"},
        {"{\"query\":[[[1,2,3,4]],[[1,2,3,4],[1,2,3,4]]],\"position_ids\":[[0],[0]]}",
         "invalid_shape", "position_ids[1]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        attnd_http_error e;
        attnd_request *r = v1(bad[i].body, &e);
        CHECK_MSG(r == NULL, "case %zu accepted", i);
        attnd_request_free(r);
        CHECK_INT_EQ(e.status, 400);
        CHECK_STR_EQ(e.code, bad[i].code);
        CHECK_STR_EQ(e.field, bad[i].field);
    }
}

/* A v2 infer body: query [1,2,4] and position_ids [1,2], JSON data. */
TEST(v2_json)
{
    const char *body = "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,2,4],\"datatype\":\"FP32\","
                       "\"data\":[1,2,3,4,5,6,7,8]},{\"name\":\"position_ids\",\"shape\":[1,2],"
                       "\"datatype\":\"INT64\",\"data\":[[41,4000000000]]}]}";
    attnd_request *r = NULL;
    attnd_v2_call call;
    attnd_http_error e = {0};
    int rc = attnd_codec_v2_decode(body, strlen(body), -1, &model, &limits, &r, &call, &e);
    CHECK_MSG(rc == 0, "%s", e.message);
    if (rc != 0)
        return;
    CHECK_INT_EQ(r->seqs[0].position_ids[0], 41);
    CHECK_INT_EQ(r->seqs[0].position_ids[1], 4000000000LL);
    attnd_request_free(r);
}

TEST(v2_binary)
{
    const char *head = "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,1,4],\"datatype\":\"FP32\","
                       "\"parameters\":{\"binary_data_size\":16}},{\"name\":\"position_ids\","
                       "\"shape\":[1,1],\"datatype\":\"INT64\",\"parameters\":"
                       "{\"binary_data_size\":8}}]}";
    size_t hl = strlen(head);
    unsigned char body[1024];
    memcpy(body, head, hl);
    float q[4] = {1, 2, 3, 4};
    memcpy(body + hl, q, sizeof q);
    const unsigned char pos[8] = {0x39, 0x30, 0, 0, 1, 0, 0, 0}; /* 2^32 + 12345, LE */
    memcpy(body + hl + 16, pos, 8);
    attnd_request *r = NULL;
    attnd_v2_call call;
    attnd_http_error e = {0};
    int rc = attnd_codec_v2_decode((const char *)body, hl + 24, (long long)hl, &model, &limits,
                                   &r, &call, &e);
    CHECK_MSG(rc == 0, "%s", e.message);
    if (rc != 0)
        return;
    CHECK_INT_EQ(r->seqs[0].position_ids[0], (INT64_C(1) << 32) + 12345);
    attnd_request_free(r);
}

TEST(v2_errors)
{
    static const char *const bad[] = {
        /* FP32 positions */
        "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,1,4],\"datatype\":\"FP32\",\"data\":"
        "[1,2,3,4]},{\"name\":\"position_ids\",\"shape\":[1,1],\"datatype\":\"FP32\","
        "\"data\":[1]}]}",
        /* wrong shape */
        "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,1,4],\"datatype\":\"FP32\",\"data\":"
        "[1,2,3,4]},{\"name\":\"position_ids\",\"shape\":[1,2],\"datatype\":\"INT64\","
        "\"data\":[1,2]}]}",
        /* negative */
        "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,1,4],\"datatype\":\"FP32\",\"data\":"
        "[1,2,3,4]},{\"name\":\"position_ids\",\"shape\":[1,1],\"datatype\":\"INT64\","
        "\"data\":[-3]}]}",
        /* not an integer */
        "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,1,4],\"datatype\":\"FP32\",\"data\":"
        "[1,2,3,4]},{\"name\":\"position_ids\",\"shape\":[1,1],\"datatype\":\"INT64\","
        "\"data\":[2.5]}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        attnd_request *r = NULL;
        attnd_v2_call call;
        attnd_http_error e = {0};
        int rc = attnd_codec_v2_decode(bad[i], strlen(bad[i]), -1, &model, &limits, &r, &call,
                                       &e);
        CHECK_MSG(rc != 0, "case %zu accepted", i);
        attnd_request_free(r);
        CHECK_INT_EQ(e.status, 400);
        CHECK_MSG(strstr(e.message, "position_ids") != NULL, "case %zu: %s", i, e.message);
    }
}

int main(void)
{
    RUN(v1_single);
    RUN(v1_absent);
    RUN(v1_ragged_batch);
    RUN(v1_errors);
    RUN(v2_json);
    RUN(v2_binary);
    RUN(v2_errors);
    return check_summary();
}
