/* test_load_check.c — attnd-load's response checker: a good body passes and yields its timing;
 * wrong status, non-JSON, truncated JSON, missing or misshapen output/weights and a wrong id are
 * each counted as the right error kind; the same for KServe v2 responses, JSON and binary
 * (outputs[], shapes, data lengths, binary_data_size against the header length and body).
 * Also: every generated pool request (v1, v2 JSON, v2 binary) is well formed and its
 * expectation accepts the answer attnd would give. */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "load_args.h"
#include "load_check.h"
#include "load_reqgen.h"

static load_kind check_str(long status, const char *body, const load_expect *w, load_timing *t)
{
    return load_check_response(status, body, body ? strlen(body) : 0, w, t);
}

#define GOOD_2x3 "[[0.5,-1,2e-3],[1,2,3]]"
#define TIMING ",\"timing\":{\"queue_us\":412,\"compute_us\":180,\"batch_size\":6}"

TEST(single)
{
    load_shape out = {0}, w = {0};
    load_timing t;
    CHECK_INT_EQ(load_shape_push_matrix(&out, 0, 2, 3), 0); /* T=2, E_out=3 */
    CHECK_INT_EQ(load_shape_push_matrix(&w, 0, 2, 4), 0);   /* T=2, S=4 */
    load_expect plain = {.output = &out, .id = "r1"}, weights = {.output = &out, .weights = &w};

    const char *good = "{\"model\":\"demo\",\"id\":\"r1\",\"output\":" GOOD_2x3 TIMING "}";
    CHECK_INT_EQ(check_str(200, good, &plain, &t), LOAD_OK);
    CHECK(t.has && t.queue_us == 412 && t.compute_us == 180 && t.batch_size == 6);
    CHECK_INT_EQ(check_str(200, " \n{\"output\" : [ [1 , 2,3] ,[4,5,6] ] , \"id\":\"r1\"}\n", &plain, &t), LOAD_OK);
    CHECK(!t.has);

    /* status classes first, whatever the body */
    CHECK_INT_EQ(check_str(500, good, &plain, &t), LOAD_ERR_HTTP_5XX);
    CHECK_INT_EQ(check_str(503, "{\"error\":{}}", &plain, &t), LOAD_ERR_HTTP_503);
    CHECK_INT_EQ(check_str(504, "", &plain, &t), LOAD_ERR_HTTP_504);
    CHECK_INT_EQ(check_str(400, "{\"error\":{\"code\":\"invalid_shape\"}}", &plain, &t), LOAD_ERR_HTTP_4XX);
    CHECK_INT_EQ(check_str(404, NULL, &plain, &t), LOAD_ERR_HTTP_4XX);
    CHECK_INT_EQ(check_str(204, "", &plain, &t), LOAD_ERR_HTTP_OTHER);
    CHECK_INT_EQ(check_str(302, "", &plain, &t), LOAD_ERR_HTTP_OTHER);
    CHECK(!t.has);

    /* not JSON, or not one complete object */
    const char *bad_json[] = {
        "", "   ", "not json", "[1,2]", "{\"output\":" GOOD_2x3,            /* truncated */
        "{\"output\":" GOOD_2x3 "} extra", "{\"output\":[[1,2,3],[4,5,6],]}",
        "{\"output\":[[01,2,3],[4,5,6]]}", "{\"output\":[[1.,2,3],[4,5,6]]}",
        "{\"output\":[[1,2,3],[4,5,6]],\"x\":tru}", "{\"id\":\"r1\\q\",\"output\":" GOOD_2x3 "}",
        "{\"id\":\"r1\n\",\"output\":" GOOD_2x3 "}", "{output:" GOOD_2x3 "}",
        "{\"output\":[[NaN,2,3],[4,5,6]]}", "{\"output\":[[1,2,3],[4,5,6]],}",
        "{\"a\":\"\\u12\"}", "{\"a\" 1}",
    };
    for (size_t i = 0; i < sizeof bad_json / sizeof *bad_json; i++)
        CHECK_MSG(check_str(200, bad_json[i], &plain, &t) == LOAD_ERR_BAD_JSON, "body %zu: %s", i, bad_json[i]);
    char deep[400];
    memset(deep, '[', 200);
    memset(deep + 200, ']', 200);
    memcpy(deep, "{\"a\":", 5);
    deep[399] = 0;
    CHECK_INT_EQ(check_str(200, deep, &plain, &t), LOAD_ERR_BAD_JSON); /* nesting bound, no crash */

    /* JSON, but the wrong content */
    const char *bad_shape[] = {
        "{\"id\":\"r1\"}",                                            /* no output */
        "{\"id\":\"r1\",\"output\":[[1,2,3]]}",                       /* T short */
        "{\"id\":\"r1\",\"output\":[[1,2,3],[4,5]]}",                 /* a short row */
        "{\"id\":\"r1\",\"output\":[[1,2,3],[4,5,6],[7,8,9]]}",       /* T long */
        "{\"id\":\"r1\",\"output\":[1,2,3,4,5,6]}",                   /* flat */
        "{\"id\":\"r1\",\"output\":[[[1],[2],[3]],[4,5,6]]}",         /* too deep */
        "{\"id\":\"r1\",\"output\":[[1,\"2\",3],[4,5,6]]}",           /* a string */
        "{\"id\":\"r1\",\"output\":[[1,null,3],[4,5,6]]}",
        "{\"id\":\"r1\",\"output\":{\"a\":1}}",
        "{\"id\":\"r1\",\"output\":[[1,2,3],[4,5,6]],\"output\":[[1,2,3],[4,5,6]]}",
        "{\"id\":\"r2\",\"output\":" GOOD_2x3 "}",                    /* someone else's answer */
        "{\"output\":" GOOD_2x3 "}",                                  /* id not echoed */
        "{\"id\":\"r1\",\"output\":" GOOD_2x3 ",\"weights\":[[1]]}",  /* weights not asked for */
    };
    for (size_t i = 0; i < sizeof bad_shape / sizeof *bad_shape; i++)
        CHECK_MSG(check_str(200, bad_shape[i], &plain, &t) == LOAD_ERR_BAD_SHAPE, "body %zu: %s", i, bad_shape[i]);

    /* weights asked for */
    CHECK_INT_EQ(check_str(200, "{\"output\":" GOOD_2x3 ",\"weights\":[[0.25,0.25,0.25,0.25],[1,0,0,0]]}", &weights, &t), LOAD_OK);
    CHECK_INT_EQ(check_str(200, "{\"output\":" GOOD_2x3 "}", &weights, &t), LOAD_ERR_BAD_SHAPE);
    CHECK_INT_EQ(check_str(200, "{\"output\":" GOOD_2x3 ",\"weights\":[[1,0,0],[1,0,0,0]]}", &weights, &t), LOAD_ERR_BAD_SHAPE);
    load_shape_free(&out);
    load_shape_free(&w);
}

TEST(batch_ragged)
{
    load_shape out = {0};
    load_timing t;
    /* B=2: T=1 and T=2, E_out=2 */
    CHECK_INT_EQ(load_shape_push(&out, 0, 2), 0);
    CHECK_INT_EQ(load_shape_push_matrix(&out, 1, 1, 2), 0);
    CHECK_INT_EQ(load_shape_push_matrix(&out, 1, 2, 2), 0);
    load_expect w = {.output = &out};
    CHECK_INT_EQ(check_str(200, "{\"output\":[[[1,2]],[[3,4],[5,6]]]}", &w, &t), LOAD_OK);
    CHECK_INT_EQ(check_str(200, "{\"output\":[[[3,4],[5,6]],[[1,2]]]}", &w, &t), LOAD_ERR_BAD_SHAPE); /* order */
    CHECK_INT_EQ(check_str(200, "{\"output\":[[[1,2]]]}", &w, &t), LOAD_ERR_BAD_SHAPE);
    CHECK_INT_EQ(check_str(200, "{\"output\":[[1,2],[3,4],[5,6]]}", &w, &t), LOAD_ERR_BAD_SHAPE); /* unbatched */
    load_shape_free(&out);
}

/* --sessions appends: the answer's "session" must name the stream and its new length. */
TEST(session_append)
{
    load_shape out = {0};
    load_timing t;
    CHECK_INT_EQ(load_shape_push_matrix(&out, 0, 1, 3), 0); /* one position, E_out=3 */
    load_expect full = {.output = &out, .session_id = "ab12", .session_length = 65,
                        .session_full = 1};
    load_expect windowed = full;
    windowed.session_full = 0;
#define S_OUT "{\"model\":\"demo\",\"output\":[[1,2,3]]" TIMING
    CHECK_INT_EQ(check_str(200, S_OUT ",\"session\":{\"id\":\"ab12\",\"length\":65,\"cached\":65}}", &full, &t), LOAD_OK);
    CHECK(t.has && t.batch_size == 6);
    CHECK_INT_EQ(check_str(200, "{\"session\":{\"cached\":65,\"length\":65,\"id\":\"ab12\",\"x\":[1]},\"output\":[[1,2,3]]}", &full, &t), LOAD_OK);
    /* a windowed session holds fewer positions than its length */
    CHECK_INT_EQ(check_str(200, S_OUT ",\"session\":{\"id\":\"ab12\",\"length\":65,\"cached\":16}}", &windowed, &t), LOAD_OK);
    const char *bad[] = {
        S_OUT "}",                                                                  /* no session */
        S_OUT ",\"session\":{\"id\":\"ab12\",\"length\":64,\"cached\":64}}",      /* did not advance */
        S_OUT ",\"session\":{\"id\":\"ab12\",\"length\":66,\"cached\":66}}",      /* advanced twice */
        S_OUT ",\"session\":{\"id\":\"ab13\",\"length\":65,\"cached\":65}}",      /* another stream */
        S_OUT ",\"session\":{\"length\":65,\"cached\":65}}",                       /* no id */
        S_OUT ",\"session\":{\"id\":\"ab12\",\"cached\":65}}",                    /* no length */
        S_OUT ",\"session\":{\"id\":\"ab12\",\"length\":65}}",                    /* no cached */
        S_OUT ",\"session\":{\"id\":\"ab12\",\"length\":65,\"cached\":16}}",      /* unbounded: all kept */
        S_OUT ",\"session\":{\"id\":\"ab12\",\"length\":65.0,\"cached\":65}}",    /* not an integer */
        S_OUT ",\"session\":{\"id\":\"ab12\",\"length\":\"65\",\"cached\":65}}",
        S_OUT ",\"session\":[65]}",
        S_OUT ",\"session\":{\"id\":\"ab12\",\"length\":65,\"cached\":65},\"session\":{}}",
        "{\"output\":[[1,2]],\"session\":{\"id\":\"ab12\",\"length\":65,\"cached\":65}}", /* short row */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(check_str(200, bad[i], &full, &t) == LOAD_ERR_BAD_SHAPE, "case %zu accepted", i);
    CHECK_INT_EQ(check_str(200, S_OUT ",\"session\":{\"id\":\"ab12\",\"length\":65,\"cached\":66}}", &windowed, &t), LOAD_ERR_BAD_SHAPE);
    CHECK_INT_EQ(check_str(200, S_OUT ",\"session\":{\"id\":\"ab12\",\"length\":65,\"cached\":-1}}", &windowed, &t), LOAD_ERR_BAD_SHAPE);
    CHECK_INT_EQ(check_str(409, "{\"error\":{\"code\":\"session_busy\"}}", &full, &t), LOAD_ERR_HTTP_4XX);
    /* without session_id the member is ignored, as in one-shot answers */
    load_expect plain = {.output = &out};
    CHECK_INT_EQ(check_str(200, S_OUT ",\"session\":7}", &plain, &t), LOAD_OK);
#undef S_OUT
    load_shape_free(&out);
}

TEST(kinds)
{
    CHECK_INT_EQ(load_kind_from_curl(CURLE_OK), LOAD_OK);
    CHECK_INT_EQ(load_kind_from_curl(CURLE_OPERATION_TIMEDOUT), LOAD_ERR_TIMEOUT);
    CHECK_INT_EQ(load_kind_from_curl(CURLE_COULDNT_CONNECT), LOAD_ERR_TRANSPORT);
    CHECK_INT_EQ(load_kind_from_curl(CURLE_RECV_ERROR), LOAD_ERR_TRANSPORT);
    CHECK_STR_EQ(load_kind_name(LOAD_ERR_HTTP_503), "http_503");
    CHECK_STR_EQ(load_kind_name(LOAD_ERR_BAD_SHAPE), "bad_shape");
    CHECK_STR_EQ(load_kind_name(LOAD_KIND_COUNT), "?");
}

/* Builds the response a correct server would give to r (zeros), from the request JSON alone. */
static char *fake_response(const char *body, int e_out, int *nseq_out)
{
    json_t *req = json_loads(body, 0, NULL), *q = json_object_get(req, "query");
    json_t *k = json_object_get(req, "key"), *resp;
    int batched = json_is_array(json_array_get(json_array_get(q, 0), 0));
    size_t nseq = batched ? json_array_size(q) : 1;
    json_t *outs = json_array(), *ws = json_array();
    for (size_t b = 0; b < nseq; b++) {
        json_t *qb = batched ? json_array_get(q, b) : q, *kb = k ? (batched ? json_array_get(k, b) : k) : qb;
        json_t *o = json_array(), *w = json_array();
        for (size_t i = 0; i < json_array_size(qb); i++) {
            json_t *row = json_array(), *wrow = json_array();
            for (int e = 0; e < e_out; e++) json_array_append_new(row, json_real(0));
            for (size_t j = 0; j < json_array_size(kb); j++) json_array_append_new(wrow, json_real(0));
            json_array_append_new(o, row);
            json_array_append_new(w, wrow);
        }
        json_array_append_new(outs, o);
        json_array_append_new(ws, w);
    }
    resp = json_pack("{s:O, s:o}", "id", json_object_get(req, "id"), "output",
                     batched ? json_incref(outs) : json_incref(json_array_get(outs, 0)));
    if (json_is_true(json_object_get(req, "need_weights")))
        json_object_set(resp, "weights", batched ? ws : json_array_get(ws, 0));
    char *s = json_dumps(resp, JSON_COMPACT);
    *nseq_out = (int)nseq;
    json_decref(outs);
    json_decref(ws);
    json_decref(resp);
    json_decref(req);
    return s;
}

static void pool_roundtrip(const char *const *args)
{
    char *argv[32];
    int argc = 0;
    char err[256];
    load_opts o;
    load_pool p;
    argv[argc++] = (char *)"attnd-load";
    for (; *args; args++) argv[argc++] = (char *)*args;
    CHECK_INT_EQ(load_opts_parse(&o, argc, argv, err, sizeof err), 0);
    load_model m = {6, 5, 5, 7, 2, 0}; /* E_q 6, E_k = E_v 5, E_out 7 */
    CHECK_INT_EQ(load_pool_build(&p, &o, &m, err, sizeof err), 0);
    CHECK_INT_EQ(p.n, (size_t)o.pool);
    for (size_t i = 0; i < p.n; i++) {
        const load_req *r = &p.reqs[i];
        json_error_t je;
        json_t *req = json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, &je);
        CHECK_MSG(req != NULL, "pool body %zu is not JSON: %s", i, je.text);
        json_t *q = json_object_get(req, "query");
        json_t *row = o.batch ? json_array_get(json_array_get(q, 0), 0) : json_array_get(q, 0);
        CHECK_INT_EQ(json_array_size(row), 6);
        if (o.cross) {
            json_t *k = json_object_get(req, "key");
            json_t *krow = o.batch ? json_array_get(json_array_get(k, 0), 0) : json_array_get(k, 0);
            CHECK_INT_EQ(json_array_size(krow), 5);
            CHECK(!json_object_get(req, "value")); /* E_k == E_v: value defaults to key */
        }
        json_decref(req);
        int nseq;
        char *resp = fake_response(r->body, 7, &nseq);
        load_expect want = load_req_expect(r);
        load_timing t;
        CHECK_MSG(check_str(200, resp, &want, &t) == LOAD_OK, "request %zu: response rejected", i);
        CHECK_INT_EQ(nseq, r->sequences);
        free(resp);
    }
    load_pool_free(&p);
    load_opts_free(&o);
}


/* ---- KServe v2 ------------------------------------------------------------------------------ */

static load_kind check_v2(long status, const char *body, size_t len, long long hl,
                          const load_expect_v2 *w, load_timing *t)
{
    return load_check_response_v2(status, body, len, hl, w, t);
}

#define V2_TIMING "\"parameters\":{\"queue_us\":412,\"compute_us\":180,\"batch_size\":6}"
#define V2_DATA12 "[1,2,3,4,5,6,7,8,9,10,11,-1.5e-3]"

TEST(v2_json)
{
    load_expect_v2 w = {.b = 2, .t = 2, .s = 3, .e_out = 3, .id = "r1"};
    load_expect_v2 ww = {.weights = 1, .b = 2, .t = 2, .s = 3, .e_out = 3};
    load_timing t;
    char buf[1024];
#define V2(outputs) "{\"model_name\":\"demo\",\"model_version\":\"1\",\"id\":\"r1\"," V2_TIMING \
                    ",\"outputs\":[" outputs "]}"
#define OUT(shape, data) "{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":" shape ",\"data\":" data "}"
    const char *good = V2(OUT("[2,2,3]", V2_DATA12));
    CHECK_INT_EQ(check_v2(200, good, strlen(good), -1, &w, &t), LOAD_OK);
    CHECK(t.has && t.queue_us == 412 && t.compute_us == 180 && t.batch_size == 6);
    /* member order is free: data before shape is checked once the shape is known */
    const char *data_first = "{\"outputs\":[{\"data\":" V2_DATA12 ",\"shape\":[2,2,3],"
                             "\"datatype\":\"FP32\",\"name\":\"output\"}],\"id\":\"r1\"}";
    CHECK_INT_EQ(check_v2(200, data_first, strlen(data_first), -1, &w, &t), LOAD_OK);
    CHECK(!t.has);
    const char *with_w = V2(OUT("[2,2,3]", V2_DATA12) ",{\"name\":\"attn_weights\",\"datatype\":"
                            "\"FP32\",\"shape\":[2,2,3],\"data\":" V2_DATA12 "}");
    CHECK_INT_EQ(check_v2(200, with_w, strlen(with_w), -1, &ww, &t), LOAD_OK);

    const char *bad_shape[] = {
        V2(OUT("[2,2,4]", V2_DATA12)),                      /* wrong E_out            */
        V2(OUT("[2,2,3]", "[1,2,3,4,5,6,7,8,9,10,11]")),     /* 11 values for 12       */
        V2(OUT("[2,2,3]", "[[1,2,3,4,5,6],[7,8,9,10,11,12]]")), /* nested, not flat   */
        V2(OUT("[2,2,3]", "[1,2,3,4,5,6,7,8,9,10,11,\"x\"]")),
        V2(OUT("[4,3]", V2_DATA12)),                        /* right count, wrong rank */
        V2(OUT("[2,2,3.0]", V2_DATA12)),
        V2("{\"name\":\"output\",\"datatype\":\"FP16\",\"shape\":[2,2,3],\"data\":" V2_DATA12 "}"),
        V2("{\"name\":\"out\",\"datatype\":\"FP32\",\"shape\":[2,2,3],\"data\":" V2_DATA12 "}"),
        V2("{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":[2,2,3]}"),          /* no data */
        V2("{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":[2,2,3],"
           "\"parameters\":{\"binary_data_size\":48}}"),   /* binary, not asked for  */
        V2(OUT("[2,2,3]", V2_DATA12) "," OUT("[2,2,3]", V2_DATA12)),   /* twice    */
        V2(""),                                             /* no outputs             */
        V2("1"),
        "{\"id\":\"r1\"," V2_TIMING "}",                     /* outputs missing        */
        "{\"id\":\"r2\",\"outputs\":[" OUT("[2,2,3]", V2_DATA12) "]}",   /* wrong id   */
        V2(OUT("[2,2,3]", V2_DATA12) ",{\"name\":\"attn_weights\",\"datatype\":\"FP32\","
           "\"shape\":[2,2,3],\"data\":" V2_DATA12 "}"),   /* weights not asked for  */
    };
    for (size_t i = 0; i < sizeof bad_shape / sizeof *bad_shape; i++)
        CHECK_MSG(check_v2(200, bad_shape[i], strlen(bad_shape[i]), -1, &w, &t) == LOAD_ERR_BAD_SHAPE,
                  "v2 body %zu: %s", i, bad_shape[i]);
    CHECK(!t.has);
    CHECK_INT_EQ(check_v2(200, good, strlen(good), -1, &ww, &t), LOAD_ERR_BAD_SHAPE); /* weights missing */
    /* a JSON-only answer with a header length: trailing bytes are not accounted for */
    snprintf(buf, sizeof buf, "%sXXXX", good);
    CHECK_INT_EQ(check_v2(200, buf, strlen(buf), (long long)strlen(good), &w, &t), LOAD_ERR_BAD_SHAPE);

    const char *bad_json[] = {"", "[]", "{\"outputs\":[" OUT("[2,2,3]", V2_DATA12),
                              "{\"outputs\":[{\"name\":output}]}", "{\"outputs\":[{}],}"};
    for (size_t i = 0; i < sizeof bad_json / sizeof *bad_json; i++)
        CHECK_MSG(check_v2(200, bad_json[i], strlen(bad_json[i]), -1, &w, &t) == LOAD_ERR_BAD_JSON,
                  "v2 body %zu: %s", i, bad_json[i]);
    CHECK_INT_EQ(check_v2(400, "{\"error\":\"input \\\"query\\\": shape\"}", 33, -1, &w, &t),
                 LOAD_ERR_HTTP_4XX);
    CHECK_INT_EQ(check_v2(503, "{\"error\":\"queue full\"}", 22, -1, &w, &t), LOAD_ERR_HTTP_503);
    CHECK_INT_EQ(check_v2(200, NULL, 0, -1, &w, &t), LOAD_ERR_BAD_JSON);
#undef V2
#undef OUT
}

/* Header JSON then n_bytes of zeros; returns the total length. */
static size_t binary_body(char *buf, size_t cap, const char *header, size_t n_bytes)
{
    size_t h = strlen(header);
    if (h + n_bytes > cap) return 0;
    memcpy(buf, header, h);
    memset(buf + h, 0, n_bytes);
    return h + n_bytes;
}

TEST(v2_binary)
{
    load_expect_v2 w = {.binary = 1, .b = 1, .t = 2, .s = 5, .e_out = 3};   /* 24 bytes */
    load_expect_v2 ww = {.binary = 1, .weights = 1, .b = 1, .t = 2, .s = 5, .e_out = 3};
    load_timing t;
    char buf[1024];
#define BOUT(name, shape, size) "{\"name\":\"" name "\",\"datatype\":\"FP32\",\"shape\":" shape \
                                ",\"parameters\":{\"binary_data_size\":" size "}}"
    const char *h = "{\"model_name\":\"demo\"," V2_TIMING ",\"outputs\":[" BOUT("output", "[1,2,3]", "24") "]}";
    long long hl = (long long)strlen(h);
    size_t n = binary_body(buf, sizeof buf, h, 24);
    CHECK_INT_EQ(check_v2(200, buf, n, hl, &w, &t), LOAD_OK);
    CHECK(t.has && t.batch_size == 6);
    CHECK_INT_EQ(check_v2(200, buf, n - 4, hl, &w, &t), LOAD_ERR_BAD_SHAPE);     /* short body  */
    n = binary_body(buf, sizeof buf, h, 28);
    CHECK_INT_EQ(check_v2(200, buf, n, hl, &w, &t), LOAD_ERR_BAD_SHAPE);         /* extra bytes */
    n = binary_body(buf, sizeof buf, h, 24);
    CHECK_INT_EQ(check_v2(200, buf, n, -1, &w, &t), LOAD_ERR_BAD_JSON);          /* no header length */
    CHECK_INT_EQ(check_v2(200, buf, n, (long long)n + 1, &w, &t), LOAD_ERR_BAD_JSON); /* beyond body */
    CHECK_INT_EQ(check_v2(200, buf, n, hl - 1, &w, &t), LOAD_ERR_BAD_JSON);      /* inside the JSON */
    CHECK(!t.has);

    const char *size20 = "{\"outputs\":[" BOUT("output", "[1,2,3]", "20") "]}";
    n = binary_body(buf, sizeof buf, size20, 20);
    CHECK_INT_EQ(check_v2(200, buf, n, (long long)strlen(size20), &w, &t), LOAD_ERR_BAD_SHAPE);
    const char *json_data = "{\"outputs\":[{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":"
                            "[1,2,3],\"data\":[1,2,3,4,5,6]}]}";                 /* not binary */
    CHECK_INT_EQ(check_v2(200, json_data, strlen(json_data), -1, &w, &t), LOAD_ERR_BAD_SHAPE);

    /* two binary outputs: output (24 bytes) then attn_weights [1,2,5] (40 bytes) */
    const char *two = "{\"outputs\":[" BOUT("output", "[1,2,3]", "24") ","
                      BOUT("attn_weights", "[1,2,5]", "40") "]}";
    n = binary_body(buf, sizeof buf, two, 64);
    CHECK_INT_EQ(check_v2(200, buf, n, (long long)strlen(two), &ww, &t), LOAD_OK);
    CHECK_INT_EQ(check_v2(200, buf, n - 40, (long long)strlen(two), &ww, &t), LOAD_ERR_BAD_SHAPE);
    CHECK_INT_EQ(check_v2(200, buf, n, (long long)strlen(two), &w, &t), LOAD_ERR_BAD_SHAPE);
#undef BOUT
}

/* The answer attnd would give to a v2 pool request: JSON data of zeros, or binary zeros. */
static char *fake_v2_response(const load_expect_v2 *e, size_t *len, long long *hl)
{
    size_t n_out = (size_t)e->b * (size_t)e->t * (size_t)e->e_out;
    size_t n_w = e->weights ? (size_t)e->b * (size_t)e->t * (size_t)e->s : 0;
    size_t cap = 512 + 2 * (n_out + n_w) + 4 * (n_out + n_w);
    char *b = malloc(cap);
    int k = snprintf(b, cap, "{\"model_name\":\"x\",\"id\":\"%s\",\"outputs\":[", e->id);
    for (int o = 0; o < (e->weights ? 2 : 1); o++) {
        size_t cnt = o ? n_w : n_out;
        k += snprintf(b + k, cap - (size_t)k, "%s{\"name\":\"%s\",\"datatype\":\"FP32\",\"shape\":"
                      "[%d,%d,%d]", o ? "," : "", o ? "attn_weights" : "output", e->b, e->t,
                      o ? e->s : e->e_out);
        if (e->binary) {
            k += snprintf(b + k, cap - (size_t)k, ",\"parameters\":{\"binary_data_size\":%zu}}", 4 * cnt);
            continue;
        }
        k += snprintf(b + k, cap - (size_t)k, ",\"data\":[");
        for (size_t i = 0; i < cnt; i++) k += snprintf(b + k, cap - (size_t)k, i ? ",0" : "0");
        k += snprintf(b + k, cap - (size_t)k, "]}");
    }
    k += snprintf(b + k, cap - (size_t)k, "]}");
    *hl = e->binary ? k : -1;
    if (e->binary) {
        memset(b + k, 0, 4 * (n_out + n_w));
        k += (int)(4 * (n_out + n_w));
    }
    *len = (size_t)k;
    return b;
}

/* Finds input `name` in a v2 request's JSON header; its shape into dim. Returns the input or NULL. */
static json_t *v2_input(json_t *req, const char *name, int64_t *dim, int *rank)
{
    size_t i;
    json_t *in;
    json_array_foreach(json_object_get(req, "inputs"), i, in) {
        if (strcmp(json_string_value(json_object_get(in, "name")), name) != 0) continue;
        json_t *shape = json_object_get(in, "shape");
        *rank = (int)json_array_size(shape);
        for (int d = 0; d < *rank && d < 4; d++) dim[d] = json_integer_value(json_array_get(shape, (size_t)d));
        return in;
    }
    return NULL;
}

/* Every v2 pool body is a valid infer request (JSON, or JSON header + exactly the binary bytes
 * announced) with one T per request, and its expectation accepts attnd's answer. */
static void v2_pool(const char *const *args)
{
    char *argv[32];
    int argc = 0;
    char err[256];
    load_opts o;
    load_pool p;
    argv[argc++] = (char *)"attnd-load";
    for (; *args; args++) argv[argc++] = (char *)*args;
    CHECK_INT_EQ(load_opts_parse(&o, argc, argv, err, sizeof err), 0);
    load_model m = {6, 5, 5, 7, 2, 0};
    CHECK_INT_EQ(load_pool_build(&p, &o, &m, err, sizeof err), 0);
    CHECK_INT_EQ(p.n, (size_t)o.pool);
    int lengths_seen = 0, last_t = -1;
    for (size_t i = 0; i < p.n; i++) {
        const load_req *r = &p.reqs[i];
        CHECK(r->v2.on);
        size_t hl = o.binary ? r->v2.header_len : r->len;
        CHECK(hl > 0 && hl <= r->len);
        json_error_t je;
        json_t *req = json_loadb(r->body, hl, JSON_REJECT_DUPLICATES, &je);
        CHECK_MSG(req != NULL, "v2 pool body %zu header is not JSON: %s", i, je.text);
        int64_t q[4] = {0}, k[4] = {0};
        int qr = 0, kr = 0;
        int B = o.batch ? o.batch : 1;
        CHECK(v2_input(req, "query", q, &qr) && qr == 3);
        CHECK(q[0] == B && q[1] >= o.seq_min && q[1] <= o.seq_max && q[2] == 6);
        CHECK(q[1] == r->v2.expect.t && r->tokens == B * q[1] && r->sequences == B);
        lengths_seen += q[1] != last_t;
        last_t = (int)q[1];
        if (o.cross) {
            CHECK(v2_input(req, "key", k, &kr) && kr == 3 && k[0] == B && k[2] == 5);
            CHECK(k[1] == r->v2.expect.s);
            CHECK(!v2_input(req, "value", k, &kr)); /* E_k == E_v: value defaults to key */
        }
        json_t *params = json_object_get(req, "parameters");
        CHECK(json_is_true(json_object_get(params, "binary_data_output")) == o.binary);
        CHECK(json_is_true(json_object_get(params, "need_weights")) == o.need_weights);
        size_t bytes = 0, idx;
        json_t *in;
        json_array_foreach(json_object_get(req, "inputs"), idx, in) {
            json_t *size = json_object_get(json_object_get(in, "parameters"), "binary_data_size");
            CHECK((size != NULL) == o.binary && (json_object_get(in, "data") != NULL) == !o.binary);
            bytes += (size_t)json_integer_value(size);
        }
        CHECK_INT_EQ(r->len - hl, bytes);
        json_decref(req);
        size_t len;
        long long rhl;
        load_expect_v2 want = load_req_expect_v2(r);
        char *resp = fake_v2_response(&want, &len, &rhl);
        load_timing t;
        CHECK_MSG(check_v2(200, resp, len, rhl, &want, &t) == LOAD_OK, "v2 request %zu: response rejected", i);
        free(resp);
    }
    CHECK(lengths_seen > 1); /* --seq-len A:B varies T across requests */
    load_pool_free(&p);
    load_opts_free(&o);
}

/* A request file is sent verbatim; its expected shapes come from its own query/key and flags. */
TEST(request_file)
{
    char path[] = "/tmp/test_load_check.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    const char *body = "{\"id\":\"file-1\",\"query\":[[[1,2,3,4],[1,2,3,4]],[[1,2,3,4],[1,2,3,4],[0,0,0,0]]],"
                       "\"key\":[[[1,1,1,1]],[[1,1,1,1],[2,2,2,2]]],\"need_weights\":true,"
                       "\"average_attn_weights\":false}\n";
    fputs(body, f);
    fclose(f);
    char *argv[] = {(char *)"attnd-load", (char *)"--request-file", path, NULL};
    load_opts o;
    load_pool p;
    char err[256];
    CHECK_INT_EQ(load_opts_parse(&o, 3, argv, err, sizeof err), 0);
    load_model m = {4, 4, 4, 6, 2, 0}; /* E_out 6, 2 heads */
    CHECK_INT_EQ(load_pool_build(&p, &o, &m, err, sizeof err), 0);
    CHECK_INT_EQ(p.n, 1);
    if (p.n == 1) {
        const load_req *r = &p.reqs[0];
        CHECK_STR_EQ(r->body, body);
        CHECK_INT_EQ(r->len, strlen(body));
        CHECK_STR_EQ(r->id, "file-1");
        CHECK_INT_EQ(r->tokens, 5);
        CHECK_INT_EQ(r->sequences, 2);
        CHECK(r->want_weights);
        /* output: B=2 x T(2,3) x 6 */
        int32_t out[] = {0, 2, 1, 2, 2, 6, 2, 6, 1, 3, 2, 6, 2, 6, 2, 6};
        CHECK(r->output.n * 2 == sizeof out / sizeof *out && !memcmp(r->output.v, out, sizeof out));
        /* weights per head: B=2 x h=2 x T x S(1,2) */
        int32_t w[] = {0, 2, 1, 2, 2, 2, 3, 1, 3, 1, 2, 2, 3, 1, 3, 1,
                       1, 2, 2, 3, 3, 2, 3, 2, 3, 2, 2, 3, 3, 2, 3, 2, 3, 2};
        CHECK(r->weights.n * 2 == sizeof w / sizeof *w && !memcmp(r->weights.v, w, sizeof w));
    }
    load_pool_free(&p);
    load_opts_free(&o);

    f = fopen(path, "w");
    fputs("{\"query\": [[1,2,3,4]", f); /* truncated */
    fclose(f);
    CHECK_INT_EQ(load_opts_parse(&o, 3, argv, err, sizeof err), 0);
    err[0] = 0;
    CHECK_INT_EQ(load_pool_build(&p, &o, &m, err, sizeof err), -1);
    CHECK(strstr(err, path) != NULL);
    CHECK_INT_EQ(p.n, 0);
    load_opts_free(&o);
    unlink(path);
}

/* /v1 request pools: plain, cross with every option, ragged batches. */
TEST(pool_roundtrips)
{
    const char *plain[] = {"--pool", "8", "--seq-len", "1:9", NULL};
    const char *cross[] = {"--pool", "8", "--seq-len", "3:5", "--cross", "--key-len", "2:11",
                           "--need-weights", "--key-padding", "0.5", "--causal", NULL};
    const char *batch[] = {"--pool", "8", "--seq-len", "1:6", "--batch", "3", "--need-weights",
                           "--cross", "--window", "2", NULL};
    pool_roundtrip(plain);
    pool_roundtrip(cross);
    pool_roundtrip(batch);
}

/* v2 request pools: JSON with every option, binary, binary cross with weights. */
TEST(v2_pools)
{
    const char *v2_json[] = {"--pool", "8", "--model", "m", "--protocol", "v2", "--seq-len", "1:9",
                             "--batch", "3", "--cross", "--key-len", "2:6", "--need-weights",
                             "--key-padding", "0.5", "--causal", NULL};
    const char *v2_bin[] = {"--pool", "8", "--model", "m", "--protocol", "v2", "--binary",
                            "--seq-len", "2:12", "--key-padding", "0.3", "--window", "2", NULL};
    const char *v2_bin_cross[] = {"--pool", "8", "--model", "m", "--protocol", "v2", "--binary",
                                  "--seq-len", "1:5", "--batch", "2", "--cross", "--need-weights",
                                  NULL};
    v2_pool(v2_json);
    v2_pool(v2_bin);
    v2_pool(v2_bin_cross);
}

int main(void)
{
    RUN(single);
    RUN(batch_ragged);
    RUN(kinds);
    RUN(session_append);
    RUN(request_file);
    RUN(pool_roundtrips);
    RUN(v2_json);
    RUN(v2_binary);
    RUN(v2_pools);
    return check_summary();
}
