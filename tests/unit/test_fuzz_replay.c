/* test_fuzz_replay.c — replays every fuzz seed, committed corpus file and saved
 * crash (tests/fuzz/regressions/) through the fuzz targets' own entry points
 * (tests/fuzz/fuzz_entry.h), so a fixed crash stays fixed: each input must keep
 * every invariant, and the inputs whose outcome is known must get it (good
 * layers load, broken ones are refused, example requests decode or fail with
 * the status and code the protocol examples give). Run from the repository root.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz/fuzz_entry.h"
#include "../fuzz/fuzz_http_entry.h"
#include "../fuzz/fuzz_session_entry.h"
#include "check.h"
#include "sbuf.h"

/* At least this many inputs per target, so a moved directory cannot pass empty. */
#define MIN_SAFETENSORS_INPUTS 60
#define MIN_DECODE_INPUTS 25

#define MIN_HTTP_INPUTS 50
#define MIN_SESSION_INPUTS 6

static int n_safetensors, n_decode, n_http, n_session;

/* Reads a whole file; NULL on failure. Caller frees. */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Calls fn(path) for each regular file of dir whose name ends with suffix ("" =
 * all), skipping dot files. Returns the number of files, or 0 (and prints) if
 * dir cannot be opened; callers that need the dir CHECK the count. */
static int for_each_file(const char *dir, const char *suffix, void (*fn)(const char *, void *),
                         void *arg)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) {
        fprintf(stderr, "note: cannot open %s\n", dir);
        return 0;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || !ends_with(de->d_name, suffix))
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        fn(path, arg);
        n++;
    }
    closedir(d);
    return n;
}

/* ------------------------------------------------------------ safetensors */

enum st_expect { ST_ANY, ST_LOADS, ST_REFUSED, ST_LOADS_BOTH };

static void replay_safetensors(const char *path, void *arg)
{
    enum st_expect want = *(const enum st_expect *)arg;
    size_t len = 0;
    uint8_t *data = slurp(path, &len);
    CHECK_MSG(data != NULL, "cannot read %s", path);
    if (!data)
        return;
    char bug[FUZZ_BUG_MAX] = "";
    attn_status st[2] = {ATTN_OK, ATTN_OK};
    int rc = fuzz_safetensors_one(data, len, st, bug);
    CHECK_MSG(rc == 0, "%s: %s", path, bug);
    if (want == ST_LOADS) /* good fixtures: some lack metadata, so with heads=2 */
        CHECK_MSG(st[1] == ATTN_OK, "%s: heads=%d gives %s", path, FUZZ_ST_HEADS,
                  attn_strerror(st[1]));
    if (want == ST_LOADS_BOTH)
        CHECK_MSG(st[0] == ATTN_OK && st[1] == ATTN_OK, "%s: %s / %s", path,
                  attn_strerror(st[0]), attn_strerror(st[1]));
    if (want == ST_REFUSED)
        CHECK_MSG(st[0] != ATTN_OK, "%s: a broken file loaded", path);
    free(data);
    n_safetensors++;
}

TEST(safetensors)
{
    enum st_expect loads = ST_LOADS, refused = ST_REFUSED, any = ST_ANY, both = ST_LOADS_BOTH;
    CHECK(for_each_file("tests/fixtures/good", ".safetensors", replay_safetensors, &loads) >= 5);
    CHECK(for_each_file("tests/fixtures/broken", ".safetensors", replay_safetensors, &refused) >=
          50);
    replay_safetensors("config/demo.safetensors", &both);
    for_each_file("tests/fuzz/corpus/safetensors", "", replay_safetensors, &any);
    for_each_file("tests/fuzz/regressions/safetensors", "", replay_safetensors, &any);
    CHECK_MSG(n_safetensors >= MIN_SAFETENSORS_INPUTS, "only %d safetensors inputs replayed",
              n_safetensors);
}

/* ------------------------------------------------------------ decode */

static void replay_decode(const char *path, void *arg)
{
    fuzz_decode_ctx *c = arg;
    size_t len = 0;
    uint8_t *data = slurp(path, &len);
    CHECK_MSG(data != NULL, "cannot read %s", path);
    if (!data)
        return;
    char bug[FUZZ_BUG_MAX] = "";
    CHECK_MSG(fuzz_decode_one(c, data, len, bug) == 0, "%s: %s", path, bug);
    /* the hand-written seeds for the cross model (tests/fuzz/corpus/decode/xmodel_*)
     * are valid requests for it, except xmodel_*_errNNN.json: refused with status NNN */
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (strncmp(base, "xmodel_", 7) == 0) {
        const char *e_at = strstr(base, "_err");
        int want = e_at ? atoi(e_at + 4) : 0, rc;
        attnd_http_error e;
        fuzz_decode_model(c, FUZZ_MODEL_CROSS, data, len, &rc, &e, bug);
        if (want == 0)
            CHECK_MSG(rc == 0, "%s on the cross model: %d %s: %s", path, e.status, e.code,
                      e.message);
        else
            CHECK_MSG(rc == -1 && e.status == want, "%s on the cross model: rc %d, status %d",
                      path, rc, rc ? e.status : 0);
    }
    free(data);
    n_decode++;
}

/* The outcome proto/examples/index.json gives one example, for the decoder. */
static void check_example(fuzz_decode_ctx *c, const json_t *ex)
{
    const char *req = json_string_value(json_object_get(ex, "request"));
    const char *route = json_string_value(json_object_get(ex, "path"));
    int status = (int)json_integer_value(json_object_get(ex, "status"));
    if (!req || !route || json_object_get(ex, "content_type") ||
        (strcmp(route, "/v1/attention") != 0 && strcmp(route, "/v1/models/demo/attention") != 0))
        return; /* 404 / 415 examples: decided before the body is decoded */
    char path[512];
    snprintf(path, sizeof path, "proto/examples/%s", req);
    size_t len = 0;
    uint8_t *data = slurp(path, &len);
    CHECK_MSG(data != NULL, "cannot read %s", path);
    if (!data)
        return;
    int rc;
    attnd_http_error e;
    char bug[FUZZ_BUG_MAX] = "";
    CHECK_MSG(fuzz_decode_model(c, FUZZ_MODEL_DEMO, data, len, &rc, &e, bug) == 0, "%s: %s",
              path, bug);
    if (status == 200) {
        CHECK_MSG(rc == 0, "%s: want success, got %d %s: %s", path, e.status, e.code,
                  e.message);
    } else {
        snprintf(path, sizeof path, "proto/examples/%s",
                 json_string_value(json_object_get(ex, "response")));
        json_t *resp = json_load_file(path, 0, NULL);
        const char *code =
            json_string_value(json_object_get(json_object_get(resp, "error"), "code"));
        CHECK_MSG(rc == -1 && e.status == status && code && strcmp(e.code, code) == 0,
                  "%s: want %d %s, got rc %d, %d %s", req, status, code ? code : "?", rc,
                  e.status, e.code);
        json_decref(resp);
    }
    free(data);
}

TEST(decode)
{
    fuzz_decode_ctx c;
    char why[FUZZ_BUG_MAX] = "";
    int rc = fuzz_decode_ctx_init(&c, "config/demo.safetensors", why);
    CHECK_MSG(rc == 0, "%s", why);
    if (rc)
        return;
    CHECK(for_each_file("proto/examples", ".request.json", replay_decode, &c) >= 15);
    for_each_file("proto/examples", ".request.txt", replay_decode, &c);
    CHECK(for_each_file("tests/fuzz/corpus/decode", "", replay_decode, &c) >= 5);
    for_each_file("tests/fuzz/regressions/decode", "", replay_decode, &c);
    CHECK_MSG(n_decode >= MIN_DECODE_INPUTS, "only %d decode inputs replayed", n_decode);

    json_t *index = json_load_file("proto/examples/index.json", 0, NULL);
    const json_t *examples = json_object_get(index, "examples");
    CHECK(json_array_size(examples) >= 20);
    size_t i;
    const json_t *ex;
    json_array_foreach(examples, i, ex) check_example(&c, ex);
    json_decref(index);
    fuzz_decode_ctx_free(&c);
}

/* ------------------------------------------------------------ http */

static void replay_http(const char *path, void *arg)
{
    size_t len = 0;
    uint8_t *data = slurp(path, &len);
    CHECK_MSG(data != NULL, "cannot read %s", path);
    if (!data)
        return;
    char bug[FUZZ_BUG_MAX] = "";
    CHECK_MSG(fuzz_http_one(arg, data, len, bug) == 0, "%s: %s", path, bug);
    free(data);
    n_http++;
}

/* proto/examples/index.json's example ex as a whole request: it must keep the
 * invariants and get the example's status. */
static void http_example(inproc *p, const json_t *ex)
{
    const char *method = json_string_value(json_object_get(ex, "method"));
    const char *route = json_string_value(json_object_get(ex, "path"));
    const char *req = json_string_value(json_object_get(ex, "request"));
    const char *type = json_string_value(json_object_get(ex, "content_type"));
    int status = (int)json_integer_value(json_object_get(ex, "status"));
    if (!method || !route)
        return;
    char path[512];
    size_t len = 0;
    uint8_t *body = NULL;
    if (req) {
        snprintf(path, sizeof path, "proto/examples/%s", req);
        body = slurp(path, &len);
        CHECK_MSG(body != NULL, "cannot read %s", path);
    }
    sbuf text = {0};
    sb_printf(&text, "%s %s\nContent-Type: %s\n\n", method, route,
              type ? type : "application/json");
    size_t head = text.len;
    uint8_t *input = malloc(head + len + 1);
    memcpy(input, text.p, head);
    if (len)
        memcpy(input + head, body, len);
    char bug[FUZZ_BUG_MAX] = "";
    fuzz_http_req r;
    CHECK(fuzz_http_parse(input, head + len, &r) == 0);
    attnd_reply a;
    inproc_run(p, &r.call, &a);
    CHECK_MSG(fuzz_http_check(&a, bug) == 0, "%s %s: %s", method, route, bug);
    CHECK_MSG(a.status == status, "%s %s (%s): want %d, got %d", method, route,
              req ? req : "no body", status, a.status);
    inproc_reply_free(&a);
    free(input);
    free(text.p);
    free(body);
    n_http++;
}

TEST(http)
{
    char why[FUZZ_BUG_MAX] = "";
    inproc *p = fuzz_http_start("config/demo.safetensors", why);
    CHECK_MSG(p != NULL, "%s", why);
    if (!p)
        return;
    json_t *index = json_load_file("proto/examples/index.json", 0, NULL);
    size_t i;
    const json_t *ex;
    json_array_foreach(json_object_get(index, "examples"), i, ex) http_example(p, ex);
    json_decref(index);
    CHECK(for_each_file("tests/fuzz/corpus/http", "", replay_http, p) >= 10);
    for_each_file("tests/fuzz/regressions/http", "", replay_http, p);
    CHECK_MSG(n_http >= MIN_HTTP_INPUTS, "only %d http inputs replayed", n_http);
    inproc_stop(p);
}

/* ------------------------------------------------------------ session files */

/* arg: 1 = the file is a real one and must parse, 0 = either way. */
static void replay_session(const char *path, void *arg)
{
    size_t len = 0;
    uint8_t *data = slurp(path, &len);
    CHECK_MSG(data != NULL, "cannot read %s", path);
    if (!data)
        return;
    char bug[FUZZ_BUG_MAX] = "";
    int parsed = 0;
    CHECK_MSG(fuzz_session_one(data, len, &parsed, bug) == 0, "%s: %s", path, bug);
    const char *base = strrchr(path, '/');
    int good = *(int *)arg || strncmp(base ? base + 1 : path, "good-", 5) == 0;
    CHECK_MSG(!good || parsed, "%s: a real session file does not parse", path);
    free(data);
    n_session++;
}

TEST(session)
{
    int any = 0;
    CHECK(for_each_file("tests/fuzz/corpus/session", "", replay_session, &any) >= MIN_SESSION_INPUTS);
    for_each_file("tests/fuzz/regressions/session", "", replay_session, &any);
    CHECK_MSG(n_session >= MIN_SESSION_INPUTS, "only %d session inputs replayed", n_session);
}

int main(void)
{
    RUN(safetensors);
    RUN(decode);
    RUN(http);
    RUN(session);
    printf("replayed %d safetensors, %d decode, %d http and %d session inputs\n", n_safetensors,
           n_decode, n_http, n_session);
    return check_summary();
}
