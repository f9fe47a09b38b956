/* test_ops_modules.c — the small modules behind request ids, CORS, the access
 * log and non-finite tokens, alone: reqid (what is taken, what is replaced),
 * cors (origin parsing and matching), access_log (both line formats, escaping,
 * a cut line still ending in '\n'), jsonscan (paths, tokens inside strings,
 * structure errors before the token, depth).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/access_log.h"
#include "check.h"
#include "http/cors.h"
#include "protocol/jsonscan.h"
#include "http/reqid.h"

TEST(reqid)
{
    char out[ATTND_REQID_MAX + 1], long_id[ATTND_REQID_MAX + 2];
    CHECK_INT_EQ(attnd_reqid_take("abc-123_x.y:z/42", out), 1);
    CHECK_STR_EQ(out, "abc-123_x.y:z/42");
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[ATTND_REQID_MAX] = '\0'; /* exactly the maximum: taken */
    CHECK_INT_EQ(attnd_reqid_take(long_id, out), 1);
    long_id[ATTND_REQID_MAX] = 'x';
    long_id[ATTND_REQID_MAX + 1] = '\0'; /* one more: replaced */
    const char *refused[] = {NULL, "", "a b", "tab\there", "quo\"te", "back\\slash", "nl\n",
                             "\x7f", "caf\xc3\xa9", long_id};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK_MSG(attnd_reqid_take(refused[i], out) == 0, "case %zu taken", i);
        CHECK_MSG(strlen(out) == 16 && strspn(out, "0123456789abcdef") == 16, "generated '%s'",
                  out);
    }
    char again[ATTND_REQID_MAX + 1];
    attnd_reqid_take(NULL, again);
    CHECK(strcmp(out, again) != 0);
}

TEST(cors)
{
    attnd_cors *c = NULL;
    char err[256];
    CHECK_INT_EQ(attnd_cors_create("", &c, err, sizeof err), 0);
    CHECK(c == NULL && attnd_cors_allow_origin(c, "http://a.test") == NULL);
    CHECK_INT_EQ(attnd_cors_create(" , ,", &c, err, sizeof err), 0);
    CHECK(c == NULL);
    CHECK_INT_EQ(attnd_cors_create("http://a.test, https://B.test:8443 ", &c, err, sizeof err),
                 0);
    CHECK(c != NULL && attnd_cors_varies(c));
    CHECK_STR_EQ(attnd_cors_allow_origin(c, "http://a.test"), "http://a.test");
    CHECK_STR_EQ(attnd_cors_allow_origin(c, "https://b.test:8443"), "https://b.test:8443");
    CHECK(attnd_cors_allow_origin(c, "https://b.test") == NULL);       /* port differs */
    CHECK(attnd_cors_allow_origin(c, "http://a.test.evil") == NULL);  /* no prefix match */
    CHECK(attnd_cors_allow_origin(c, "https://a.test") == NULL);      /* scheme differs */
    CHECK(attnd_cors_allow_origin(c, "null") == NULL);
    CHECK(attnd_cors_allow_origin(c, NULL) == NULL);
    attnd_cors_free(c);
    CHECK_INT_EQ(attnd_cors_create("http://a.test,*", &c, err, sizeof err), 0);
    CHECK(c && !attnd_cors_varies(c));
    CHECK_STR_EQ(attnd_cors_allow_origin(c, "http://anything.test"), "*");
    CHECK(attnd_cors_allow_origin(c, "") == NULL);
    attnd_cors_free(c);
    const char *bad[] = {"https://a.test/", "a.test", "ftp://a.test", "http://", "http://a b",
                         "https://a.test/path", "http://a.test?x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = (attnd_cors *)1;
        CHECK_MSG(attnd_cors_create(bad[i], &c, err, sizeof err) == -1 && c == NULL,
                  "'%s' accepted", bad[i]);
        CHECK_MSG(strstr(err, bad[i]) != NULL, "error '%s' does not name '%s'", err, bad[i]);
    }
}

TEST(access_log_format)
{
    attnd_access_entry e = {.request_id = "r-1", .remote = "::1", .method = "POST",
                            .path = "/v1/a b\n\x1b[31m\"q\"", .status = 200, .bytes_in = 12,
                            .bytes_out = 345, .duration_ms = 1.25, .model = "demo",
                            .batch_size = 3};
    char line[4096];
    size_t n = attnd_access_log_format(ATTND_LOG_TEXT, &e, line, sizeof line);
    CHECK(n == strlen(line) && line[n - 1] == '\n' && !memchr(line, '\n', n - 1));
    CHECK_MSG(strstr(line, "Z r-1 ::1 POST /v1/a\\x20b\\x0a\\x1b[31m\"q\" 200 in=12 out=345 "
                           "ms=1.250 model=demo batch=3\n"), "%s", line);
    n = attnd_access_log_format(ATTND_LOG_JSON, &e, line, sizeof line);
    CHECK(line[n - 1] == '\n' && !memchr(line, '\n', n - 1));
    json_error_t je;
    json_t *j = json_loadb(line, n, 0, &je);
    CHECK_MSG(j != NULL, "not JSON (%s): %s", je.text, line);
    CHECK(j && strcmp(json_string_value(json_object_get(j, "path")), e.path) == 0);
    CHECK(j && json_integer_value(json_object_get(j, "batch_size")) == 3);
    CHECK(j && strcmp(json_string_value(json_object_get(j, "model")), "demo") == 0);
    json_decref(j);
    /* bytes beyond ASCII stay valid JSON, one line */
    e.path = "/\xff\xc3";
    e.model = NULL;
    e.batch_size = 0;
    n = attnd_access_log_format(ATTND_LOG_JSON, &e, line, sizeof line);
    j = json_loadb(line, n, 0, &je);
    CHECK_MSG(j && json_is_null(json_object_get(j, "model")) &&
                  json_is_null(json_object_get(j, "batch_size")),
              "%s", line);
    json_decref(j);
    n = attnd_access_log_format(ATTND_LOG_TEXT, &e, line, sizeof line);
    CHECK(strstr(line, " model=- batch=-\n"));
    /* a line too long for the buffer is cut but stays one line */
    n = attnd_access_log_format(ATTND_LOG_TEXT, &e, line, 64);
    CHECK(n == 63 && line[62] == '\n');
}

static void expect_nonfinite(const char *text, long at, const char *field)
{
    char got[160];
    long off = attnd_json_find_nonfinite(text, strlen(text), got, sizeof got);
    CHECK_MSG(off == at && (at < 0 || strcmp(got, field) == 0), "%s: at %ld '%s', want %ld '%s'",
              text, off, got, at, field);
}

TEST(jsonscan)
{
    expect_nonfinite("{\"query\":[[1,NaN]]}", 13, "query[0][1]");
    expect_nonfinite("{\"a\":{\"b\":[0,{\"c\":-Infinity}]}}", 18, "a.b[1].c");
    expect_nonfinite(" [ Infinity ]", 3, "[0]");
    expect_nonfinite("NaN", 0, "");
    expect_nonfinite("{\"s\":\"NaN\",\"k\\\"NaN\":[true,null,-1.5e3,+Infinity]}", 38,
                     "k\\\"NaN[3]");
    expect_nonfinite("{\"query\":[[1,2]]}", -1, "");          /* none */
    expect_nonfinite("{\"query\":[[1 2,NaN]]}", -1, "");      /* a syntax error first */
    expect_nonfinite("{\"query\":[[1,Nan]]}", -1, "");        /* not Python's spelling */
    expect_nonfinite("{\"query\":[[1,NaNa]]}", -1, "");
    expect_nonfinite("{\"q\":\"unterminated NaN", -1, "");
    char deep[600];
    memset(deep, '[', 300);
    snprintf(deep + 300, sizeof deep - 300, "NaN");
    expect_nonfinite(deep, -1, ""); /* deeper than 256: given up, no overflow */
    memset(deep, '[', 200);
    snprintf(deep + 200, sizeof deep - 200, "NaN");
    long off = attnd_json_find_nonfinite(deep, strlen(deep), NULL, 0); /* no room for a path */
    CHECK_INT_EQ(off, 200);

    attnd_http_error e = {0};
    CHECK_INT_EQ(attnd_json_nonfinite_error("{\"query\":[[NaN]]}", 17, 14, &e), -1);
    CHECK(e.status == 400 && strcmp(e.code, "non_finite") == 0 &&
          strcmp(e.field, "query[0][0]") == 0 && strstr(e.message, "NaN at byte 11"));
    attnd_http_error untouched = {.status = 7};
    CHECK_INT_EQ(attnd_json_nonfinite_error("{\"query\":[[NaN]]}", 17, 5, &untouched), 0);
    CHECK_INT_EQ(untouched.status, 7); /* the token is past where the parser stopped */
    CHECK_INT_EQ(attnd_json_nonfinite_error("{\"query\":[[1,,NaN]]}", 20, 30, &untouched), 0);
    CHECK_INT_EQ(untouched.status, 7); /* the structure broke before the token */
}

int main(void)
{
    RUN(reqid);
    RUN(cors);
    RUN(access_log_format);
    RUN(jsonscan);
    return check_summary();
}
