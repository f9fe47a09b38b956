/* test_hostile_checkpoints.c — hostile checkpoint directories through the real
 * daemon (issue 27, defects 4 and 5). Each directory is written by the test
 * into a temp dir from the committed fixtures (tests/fixtures/ckpt/):
 *   - a shard index whose weight_map has one entry over the limit (2^19) is
 *     refused at start (exit 1) and by the repository load route (400), the
 *     message naming model.safetensors.index.json and the limit;
 *   - an index of 200k entries each naming its own shard file (the old
 *     de-duplication was quadratic in them: minutes) loads within the 15 s
 *     start-up wait and serves the same answers as the plain sharded fixture;
 *   - a config.json whose rope_scaling factor is 1e-40 (linear and llama3) is
 *     refused at start and by the repository load, naming rope_scaling.factor;
 *     other bad RoPE fields likewise, each named;
 *   - a query so large (finite) that the attention would overflow float32 is
 *     an error (413), never a 200, for one-shot requests and session appends.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attn.h"
#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#define CKPT "tests/fixtures/ckpt/"
#define ADMIN_KEY "admin-key-hostile-5d21"
#define INDEX_LIMIT 524288 /* ATTN__INDEX_MAX_ENTRIES in lib/checkpoint.h */

/* ------------------------------------------------------------ files */

static int write_bytes(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int write_text(const char *path, const char *text)
{
    return write_bytes(path, text, strlen(text));
}

/* Copies file name of fixture directory src into dir. */
static int copy_in(const char *src, const char *name, const char *dir)
{
    char from[512], to[512];
    snprintf(from, sizeof from, "%s/%s", src, name);
    snprintf(to, sizeof to, "%s/%s", dir, name);
    FILE *f = fopen(from, "rb");
    if (f == NULL)
        return -1;
    sbuf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.cap < b.len + n + 1) {
            b.cap = (b.len + n + 1) * 2;
            b.p = realloc(b.p, b.cap);
            if (b.p == NULL) {
                fclose(f);
                return -1;
            }
        }
        memcpy(b.p + b.len, chunk, n);
        b.len += n;
    }
    fclose(f);
    int rc = write_bytes(to, b.p ? b.p : "", b.len);
    free(b.p);
    return rc;
}

/* A fresh directory under /tmp (dir: a buffer of at least 64). */
static int temp_dir(char *dir, const char *tag)
{
    snprintf(dir, 64, "/tmp/attnd-hostile-%s-XXXXXX", tag);
    return mkdtemp(dir) != NULL ? 0 : -1;
}

/* Removes dir and the files named (NULL-terminated) in it. */
static void remove_dir(const char *dir, const char *const *files)
{
    char p[512];
    for (int i = 0; files[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------ daemon helpers */

static char admin_file[64];

/* POST body to path, with "Authorization: Bearer key" when key is not NULL. */
static long post(const attnd_proc *p, const char *path, const char *key, const char *body,
                 http_result *keep)
{
    char auth[128];
    snprintf(auth, sizeof auth, "Bearer %s", key ? key : "");
    return attnd_call(p, "POST", path, key ? auth : NULL, body, keep);
}

/* POST /v2/repository/models/name/load {"parameters": {"path": dir, "layer": 0}}. */
static long repo_load(const attnd_proc *p, const char *name, const char *dir, http_result *keep)
{
    char path[128], body[512];
    snprintf(path, sizeof path, "/v2/repository/models/%s/load", name);
    snprintf(body, sizeof body, "{\"parameters\": {\"path\": \"%s\", \"layer\": 0}}", dir);
    return post(p, path, ADMIN_KEY, body, keep);
}

/* attnd --model m=dir,layer=0 must exit 1 with output naming says and also. */
static void refused_at_start(const char *dir, const char *says, const char *also)
{
    char spec[256];
    snprintf(spec, sizeof spec, "m=%s,layer=0", dir);
    const char *args[] = {"--listen", "127.0.0.1:0", "--model", spec, NULL};
    char *out = NULL;
    double t0 = now_s();
    int rc = attnd_run(args, 60, &out);
    CHECK_MSG(rc == 1, "%s: exit %d, expected 1 (after %.1f s): %s", dir, rc, now_s() - t0,
              out ? out : "");
    CHECK_MSG(out && strstr(out, says) && (also == NULL || strstr(out, also)),
              "start-up output lacks \"%s\"%s%s: %s", says, also ? " / " : "", also ? also : "",
              out ? out : "");
    free(out);
}

/* The repository load of dir must be a 400 naming says. */
static void refused_by_load(const attnd_proc *p, const char *dir, const char *says,
                            const char *also)
{
    http_result r;
    long st = repo_load(p, "hostile", dir, &r);
    CHECK_MSG(st == 400, "load of %s: %ld, expected 400: %s", dir, st, st >= 0 ? r.body : "");
    if (st < 0)
        return;
    CHECK_MSG(r.body && strstr(r.body, says) && (also == NULL || strstr(r.body, also)),
              "load body lacks \"%s\": %s", says, r.body ? r.body : "");
    http_result_free(&r);
}

/* ------------------------------------------------------------ the shard index */

/* The sharded fixture's weight_map entries (its real tensors) plus n_extra
 * more: "x<i>" -> "s" (one shard name) or -> "x-<i>.safetensors" (each its
 * own), as model.safetensors.index.json of dir. The extra shards do not exist:
 * the loader opens a shard only for a tensor it reads. */
static int write_index(const char *dir, int n_extra, int distinct)
{
    char path[512];
    snprintf(path, sizeof path, CKPT "sharded/model.safetensors.index.json");
    json_error_t je;
    json_t *fixture = json_load_file(path, 0, &je);
    json_t *map = fixture ? json_object_get(fixture, "weight_map") : NULL;
    if (!json_is_object(map)) {
        json_decref(fixture);
        return -1;
    }
    sbuf b = {0};
    sb_printf(&b, "{\"metadata\": {\"total_size\": 49792}, \"weight_map\": {");
    const char *key;
    json_t *val;
    int first = 1;
    json_object_foreach(map, key, val) {
        sb_printf(&b, "%s\"%s\":\"%s\"", first ? "" : ",", key, json_string_value(val));
        first = 0;
    }
    for (int i = 0; i < n_extra; i++) {
        if (distinct)
            sb_printf(&b, ",\"x%d\":\"x-%d.safetensors\"", i, i);
        else
            sb_printf(&b, ",\"x%d\":\"s\"", i);
    }
    sb_printf(&b, "}}");
    json_decref(fixture);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    int rc = write_bytes(path, b.p, b.len);
    free(b.p);
    return rc;
}

static const char *const sharded_files[] = {"config.json", "model-00001-of-00002.safetensors",
                                            "model-00002-of-00002.safetensors",
                                            "model.safetensors.index.json", NULL};

/* dir: the sharded fixture with an index of n_extra more entries. */
static int sharded_copy(char *dir, const char *tag, int n_extra, int distinct)
{
    if (temp_dir(dir, tag) != 0)
        return -1;
    for (int i = 0; i < 3; i++)
        if (copy_in(CKPT "sharded", sharded_files[i], dir) != 0)
            return -1;
    return write_index(dir, n_extra, distinct);
}

/* The fixture has 21 real entries; INDEX_LIMIT - 21 + 1 more is one over. */
TEST_WITH(index_entry_limit, const attnd_proc *p)
{
    char dir[64];
    CHECK_INT_EQ(sharded_copy(dir, "limit", INDEX_LIMIT - 21 + 1, 0), 0);
    refused_at_start(dir, "model.safetensors.index.json", "524288");
    refused_by_load(p, dir, "model.safetensors.index.json", "over the limit of 524288");
    /* exactly at the limit: served */
    CHECK_INT_EQ(write_index(dir, INDEX_LIMIT - 21, 0), 0);
    http_result r;
    long st = repo_load(p, "atlimit", dir, &r);
    CHECK_MSG(st == 200, "load at the limit: %ld %s", st, st >= 0 ? r.body : "");
    if (st >= 0)
        http_result_free(&r);
    remove_dir(dir, sharded_files);
}

/* One query row of width e: x[j] = scale * ((j * 7) % 11 - 5) / 5. */
static char *query_body(int e, int rows, double scale, const char *extra)
{
    float *x = malloc((size_t)rows * (size_t)e * sizeof *x);
    for (int i = 0; i < rows * e; i++)
        x[i] = (float)(scale * ((i * 7) % 11 - 5) / 5.0);
    sbuf b = {0};
    sb_printf(&b, "{\"query\":");
    sb_matrix(&b, x, rows, e);
    sb_printf(&b, "%s}", extra ? extra : "");
    free(x);
    return b.p;
}

/* 200k entries, each its own shard name: the old loader compared each with
 * every shard seen so far (2e10 comparisons, minutes); now it starts within
 * attnd_proc_start's 15 s wait, and answers as the plain sharded fixture does. */
TEST(index_many_shards_loads)
{
    char dir[64], spec[128];
    CHECK_INT_EQ(sharded_copy(dir, "shards", 200000, 1), 0);
    snprintf(spec, sizeof spec, "big=%s,layer=1", dir);
    const char *args[] = {"--model", spec, "--model", "plain=" CKPT "sharded,layer=1", NULL};
    attnd_proc d;
    double t0 = now_s();
    int started = attnd_proc_start(&d, args) == 0;
    double took = now_s() - t0;
    printf("200k-entry index (200002 shards): ready in %.2f s\n", took);
    CHECK_MSG(started, "the daemon did not become ready with a 200k-entry index");
    if (started) {
        char *body = query_body(32, 3, 0.5, NULL);
        char url[256];
        http_result a, b;
        snprintf(url, sizeof url, "%s/v1/models/big/attention", d.base_url);
        CHECK(http_do("POST", url, body, strlen(body), NULL, &a) == 0 && a.status == 200);
        snprintf(url, sizeof url, "%s/v1/models/plain/attention", d.base_url);
        CHECK(http_do("POST", url, body, strlen(body), NULL, &b) == 0 && b.status == 200);
        /* the same layer: the same "output" member */
        const char *oa = a.body ? strstr(a.body, "\"output\"") : NULL;
        const char *ob = b.body ? strstr(b.body, "\"output\"") : NULL;
        CHECK(oa && ob);
        if (oa && ob) {
            const char *ea = strstr(oa, "]]"), *eb = strstr(ob, "]]");
            size_t la = ea ? (size_t)(ea - oa) : 0, lb = eb ? (size_t)(eb - ob) : 1;
            CHECK_MSG(la == lb && memcmp(oa, ob, la) == 0, "big and plain differ: %.200s / %.200s",
                      oa, ob);
        }
        http_result_free(&a);
        http_result_free(&b);
        free(body);
        snprintf(url, sizeof url, "%s/v1/models/big", d.base_url);
        CHECK(http_do("GET", url, NULL, 0, NULL, &a) == 0 && a.status == 200);
        http_result_free(&a);
        CHECK_INT_EQ(attnd_proc_stop(&d), 0);
    }
    remove_dir(dir, sharded_files);
}

/* ------------------------------------------------------------ RoPE */

static const char *const llama_files[] = {"config.json", "model.safetensors", NULL};

/* dir: llama_gqa's weights and a config.json with rope (a JSON fragment). */
static int llama_with(char *dir, const char *rope)
{
    if (temp_dir(dir, "rope") != 0 || copy_in(CKPT "llama_gqa", "model.safetensors", dir) != 0)
        return -1;
    char cfg[1024], path[512];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
             "\"max_position_embeddings\": 256, \"model_type\": \"llama\", "
             "\"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"num_key_value_heads\": 2, "
             "\"rope_theta\": 500000.0, %s}",
             rope);
    snprintf(path, sizeof path, "%s/config.json", dir);
    return write_text(path, cfg);
}

static const char linear_1e40[] = "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 1e-40}";
static const char llama3_1e40[] =
    "\"rope_scaling\": {\"factor\": 1e-40, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "
    "\"original_max_position_embeddings\": 64, \"rope_type\": \"llama3\"}";

/* Before: both loaded and answered 200 (zeros with need_weights). */
TEST_WITH(rope_subnormal_factor_refused, const attnd_proc *p)
{
    const char *const kinds[] = {linear_1e40, llama3_1e40};
    for (int k = 0; k < 2; k++) {
        char dir[64];
        CHECK_INT_EQ(llama_with(dir, kinds[k]), 0);
        refused_at_start(dir, "rope_scaling.factor", "1e-40");
        refused_by_load(p, dir, "rope_scaling.factor", "1e-40");
        remove_dir(dir, llama_files);
    }
}

/* Each bad field is named by the repository load's 400. */
TEST_WITH(rope_fields_named, const attnd_proc *p)
{
    static const struct {
        const char *rope, *says;
    } v[] = {
        {"\"rope_scaling\": {\"factor\": 8.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": "
         "1e-40, \"original_max_position_embeddings\": 64, \"rope_type\": \"llama3\"}",
         "rope_scaling.low_freq_factor"},
        {"\"rope_scaling\": {\"factor\": 8.0, \"high_freq_factor\": 0.5, \"low_freq_factor\": "
         "1.0, \"original_max_position_embeddings\": 64, \"rope_type\": \"llama3\"}",
         "high_freq_factor"},
        {"\"rope_scaling\": {\"factor\": 8.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": "
         "1.0, \"original_max_position_embeddings\": 1e9, \"rope_type\": \"llama3\"}",
         "rope_scaling.original_max_position_embeddings"},
        {"\"rope_scaling\": {\"type\": \"linear\", \"factor\": 1e12}", "rope_scaling.factor"},
        {"\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1e-45}",
         "rope_parameters.rope_theta"},
        {"\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 1e-40}",
         "rope_parameters.factor"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char dir[64];
        CHECK_INT_EQ(llama_with(dir, v[i].rope), 0);
        refused_by_load(p, dir, v[i].says, NULL);
        remove_dir(dir, llama_files);
    }
    /* a sound config through the same route is served */
    char dir[64];
    CHECK_INT_EQ(llama_with(dir, "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}"), 0);
    http_result r;
    long st = repo_load(p, "sound", dir, &r);
    CHECK_MSG(st == 200, "sound load: %ld %s", st, st >= 0 ? r.body : "");
    if (st >= 0)
        http_result_free(&r);
    char *body = query_body(64, 2, 0.5, ",\"need_weights\":true");
    CHECK_INT_EQ(post(p, "/v1/models/sound/attention", NULL, body, NULL), 200);
    free(body);
    remove_dir(dir, llama_files);
}

/* ------------------------------------------------------------ overflow */

/* Finite inputs whose attention would overflow float32: 413, never 200. */
TEST_WITH(huge_input_not_200, const attnd_proc *p)
{
    const char *const extras[] = {NULL, ",\"need_weights\":true"};
    for (int e = 0; e < 2; e++) {
        char *body = query_body(64, 3, 1e18, extras[e]);
        http_result r;
        long st = post(p, "/v1/models/llama/attention", NULL, body, &r);
        CHECK_MSG(st == 413 && r.body && strstr(r.body, "limit_exceeded") &&
                      strstr(r.body, "overflow"),
                  "huge query%s: %ld %.300s", extras[e] ? " with weights" : "", st,
                  st >= 0 && r.body ? r.body : "");
        if (st >= 0)
            http_result_free(&r);
        free(body);
    }
    /* a session append: the same */
    http_result r;
    long st = post(p, "/v1/models/llama/sessions", NULL, "{}", &r);
    CHECK_INT_EQ(st, 201);
    if (st < 0)
        return;
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    const char *id = json_string_value(json_object_get(j, "id"));
    CHECK(id != NULL);
    if (id) {
        char path[160];
        snprintf(path, sizeof path, "/v1/sessions/%s/append", id);
        char *small = query_body(64, 2, 0.5, NULL), *huge = query_body(64, 1, 1e18, NULL);
        CHECK_INT_EQ(post(p, path, NULL, small, NULL), 200);
        http_result a;
        long sa = post(p, path, NULL, huge, &a);
        CHECK_MSG(sa == 413 && a.body && strstr(a.body, "overflow"), "huge append: %ld %.300s", sa,
                  sa >= 0 && a.body ? a.body : "");
        if (sa >= 0)
            http_result_free(&a);
        CHECK_INT_EQ(post(p, path, NULL, small, NULL), 200); /* the session goes on */
        free(small);
        free(huge);
    }
    json_decref(j);
    http_result_free(&r);
}

int main(void)
{
    snprintf(admin_file, sizeof admin_file, "/tmp/attnd-hostile-admin-XXXXXX");
    int fd = mkstemp(admin_file);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    CHECK_INT_EQ(write_text(admin_file, ADMIN_KEY "\n"), 0);
    attnd_proc p;
    const char *args[] = {"--admin-key-file", admin_file, "--model", "llama=" CKPT "llama_gqa,layer=0",
                          NULL};
    if (attnd_proc_start(&p, args) == 0) {
        RUN_WITH(rope_subnormal_factor_refused, &p);
        RUN_WITH(rope_fields_named, &p);
        RUN_WITH(huge_input_not_200, &p);
        RUN_WITH(index_entry_limit, &p);
        CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    } else {
        CHECK_MSG(0, "the daemon did not start");
    }
    RUN(index_many_shards_loads);
    unlink(admin_file);
    return check_summary();
}
