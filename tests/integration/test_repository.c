/* test_repository.c — the v2 model repository extension through the real
 * daemon: the index (names, versions, states, reasons: why a load failed only
 * for an admin key), loading a new model
 * from a checkpoint path, reloading a configured one (its version goes up, and
 * v2 metadata, version routes, /v1/models and infer responses say so),
 * unloading while a request is in flight (it completes 200; then 404 naming
 * the loaded models; a session pinned to the version keeps answering), the
 * admin key (401 without, 403 for a client key or with none configured, an
 * admin key equal to a client key refused at start), per-model scheduler
 * settings from the config file, SIGHUP (versions, admin keys re-read), and the
 * repository metrics.
 */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"

#define CLIENT_KEY "client-key-3c1d9e7a"
#define ADMIN_KEY "admin-key-8b24f0d6"
#define CLIENT "Bearer " CLIENT_KEY
#define ADMIN "Bearer " ADMIN_KEY

static const char query[] = "{\"query\": [[0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0,"
                            " 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25,"
                            " 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5,"
                            " -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0,"
                            " 0.5, -0.25, 1, 0, 0.5, -0.25, 1, 0]]}";

/* The JSON body of a GET (with the client key), or NULL. Caller decrefs. */
static json_t *get_json(const attnd_proc *p, const char *path, long *status)
{
    http_result r;
    *status = attnd_call(p, "GET", path, CLIENT, NULL, &r);
    if (*status < 0)
        return NULL;
    json_error_t je;
    json_t *j = r.body ? json_loads(r.body, 0, &je) : NULL;
    http_result_free(&r);
    return j;
}

static const char *str(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

/* The index entry of model name (borrowed from index, which the caller holds). */
static json_t *index_entry(json_t *index, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(index, i, e) {
        if (strcmp(str(e, "name"), name) == 0)
            return e;
    }
    return NULL;
}


/* 1 when /metrics holds the line text. */
static int metrics_has(const attnd_proc *p, const char *text)
{
    http_result r;
    int found = attnd_call(p, "GET", "/metrics", CLIENT, NULL, &r) == 200 && r.body &&
                strstr(r.body, text);
    http_result_free(&r);
    return found;
}

/* POST /v2/repository/models/{name}/load with the admin key and body. */
static long load(const attnd_proc *p, const char *name, const char *body, http_result *keep)
{
    char path[160];
    snprintf(path, sizeof path, "/v2/repository/models/%s/load", name);
    return attnd_call(p, "POST", path, ADMIN, body, keep);
}

static long unload(const attnd_proc *p, const char *name, const char *auth)
{
    char path[160];
    snprintf(path, sizeof path, "/v2/repository/models/%s/unload", name);
    return attnd_call(p, "POST", path, auth, NULL, NULL);
}

TEST_WITH(index_lists_models, const attnd_proc *p)
{
    long st;
    CHECK_INT_EQ(attnd_call(p, "GET", "/v2/repository/index", NULL, NULL, NULL), 401);
    json_t *idx = get_json(p, "/v2/repository/index", &st);
    CHECK_INT_EQ(st, 200);
    CHECK(json_is_array(idx));
    json_t *demo = index_entry(idx, "demo");
    CHECK_MSG(demo, "demo is not in the index");
    CHECK_STR_EQ(str(demo, "state"), "READY");
    CHECK(*str(demo, "version") >= '1');
    json_decref(idx);
    /* POST with {"ready": true}, as Triton takes it; a wrong type is refused */
    http_result r;
    CHECK_INT_EQ(attnd_call(p, "POST", "/v2/repository/index", CLIENT, "{\"ready\": true}", &r), 200);
    CHECK(r.body && strstr(r.body, "\"demo\""));
    http_result_free(&r);
    CHECK_INT_EQ(attnd_call(p, "POST", "/v2/repository/index", CLIENT, "{\"ready\": 3}", &r), 400);
    CHECK_MSG(r.body && strstr(r.body, "ready"), "the 400 does not name ready: %s",
              r.body ? r.body : "");
    http_result_free(&r);
}

TEST_WITH(admin_key_required, const attnd_proc *p)
{
    http_result r;
    CHECK_INT_EQ(attnd_call(p, "POST", "/v2/repository/models/demo/load", NULL, NULL, NULL), 401);
    CHECK_INT_EQ(attnd_call(p, "POST", "/v2/repository/models/demo/load", "Bearer wrong-key", NULL,
                      NULL), 401);
    CHECK_INT_EQ(attnd_call(p, "POST", "/v2/repository/models/demo/unload", CLIENT, NULL, &r), 403);
    CHECK_MSG(r.body && strstr(r.body, "admin key"), "403 body: %s", r.body ? r.body : "");
    http_result_free(&r);
    long st;
    json_t *idx = get_json(p, "/v2/repository/index", &st); /* nothing changed */
    CHECK_STR_EQ(str(index_entry(idx, "demo"), "state"), "READY");
    json_decref(idx);
    /* an admin key opens the index too, but no other route */
    CHECK_INT_EQ(attnd_call(p, "GET", "/v2/repository/index", ADMIN, NULL, NULL), 200);
    CHECK_INT_EQ(attnd_call(p, "GET", "/v1/models", ADMIN, NULL, NULL), 401);
}

/* The version number the v2 metadata of name reports, or -1. */
static int v2_version(const attnd_proc *p, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/v2/models/%s", name);
    long st;
    json_t *j = get_json(p, path, &st);
    const char *v = json_string_value(json_array_get(json_object_get(j, "versions"), 0));
    int n = st == 200 && v ? atoi(v) : -1;
    json_decref(j);
    return n;
}

TEST_WITH(version_increments, const attnd_proc *p)
{
    int v0 = v2_version(p, "demo");
    CHECK(v0 >= 1);
    http_result r;
    CHECK_INT_EQ(load(p, "demo", NULL, &r), 200); /* its configured source */
    json_error_t je;
    json_t *j = r.body ? json_loads(r.body, 0, &je) : NULL;
    CHECK_INT_EQ(atoi(str(j, "version")), v0 + 1);
    json_decref(j);
    http_result_free(&r);
    CHECK_INT_EQ(load(p, "demo", "", NULL), 200);
    CHECK_INT_EQ(v2_version(p, "demo"), v0 + 2);
    char path[128];
    snprintf(path, sizeof path, "/v2/models/demo/versions/%d", v0 + 2);
    CHECK_INT_EQ(attnd_call(p, "GET", path, CLIENT, NULL, NULL), 200);
    snprintf(path, sizeof path, "/v2/models/demo/versions/%d/ready", v0 + 2);
    CHECK_INT_EQ(attnd_call(p, "GET", path, CLIENT, NULL, NULL), 200);
    snprintf(path, sizeof path, "/v2/models/demo/versions/%d", v0);
    CHECK_INT_EQ(attnd_call(p, "GET", path, CLIENT, NULL, &r), 404);
    CHECK_MSG(r.body && strstr(r.body, "version"), "404 body: %s", r.body ? r.body : "");
    http_result_free(&r);
    long st;
    j = get_json(p, "/v1/models/demo", &st);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "version")), v0 + 2);
    json_decref(j);
    /* an infer response names the version that computed it */
    const char *infer = "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,1,64],"
                        "\"data\":[0.5,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                        "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}";
    CHECK_INT_EQ(attnd_call(p, "POST", "/v2/models/demo/infer", CLIENT, infer, &r), 200);
    char want[48];
    snprintf(want, sizeof want, "\"model_version\":\"%d\"", v0 + 2);
    CHECK_MSG(r.body && strstr(r.body, want), "infer answer lacks %s: %.200s", want,
              r.body ? r.body : "");
    http_result_free(&r);
    j = get_json(p, "/v2/repository/index", &st);
    CHECK_INT_EQ(atoi(str(index_entry(j, "demo"), "version")), v0 + 2);
    json_decref(j);
}

TEST_WITH(load_new_from_path, const attnd_proc *p)
{
    CHECK_INT_EQ(attnd_call(p, "POST", "/v1/models/extra/attention", CLIENT, query, NULL), 404);
    http_result r;
    CHECK_INT_EQ(load(p, "extra", "{\"parameters\": {\"path\": \"config/demo.safetensors\", "
                      "\"format\": \"mha\", \"max_batch_requests\": 2}}", &r), 200);
    CHECK(r.body && strstr(r.body, "\"version\":\"1\"") && strstr(r.body, "READY"));
    http_result_free(&r);
    CHECK_INT_EQ(attnd_call(p, "POST", "/v1/models/extra/attention", CLIENT, query, NULL), 200);
    long st;
    json_t *j = get_json(p, "/v1/models/extra", &st);
    CHECK_INT_EQ(st, 200);
    CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(j, "scheduler"),
                                                    "max_batch_requests")), 2);
    json_decref(j);
    j = get_json(p, "/v2/repository/index", &st);
    CHECK_STR_EQ(str(index_entry(j, "extra"), "state"), "READY");
    json_decref(j);
    CHECK(metrics_has(p, "attnd_model_info{model=\"extra\""));
    CHECK(metrics_has(p, "attnd_repository_operations_total{operation=\"load\",result=\"ok\"}"));
}

TEST_WITH(bad_loads, const attnd_proc *p)
{
    http_result r;
    CHECK_INT_EQ(load(p, "broken", "{\"parameters\": {\"path\": \"/nonexistent/x.safetensors\"}}",
                      &r), 400);
    CHECK_MSG(r.body && strstr(r.body, "parameters.path") && strstr(r.body, "nonexistent"),
              "400 body: %s", r.body ? r.body : "");
    http_result_free(&r);
    long st;
    json_t *j = get_json(p, "/v2/repository/index", &st);
    json_t *e = index_entry(j, "broken");
    CHECK_STR_EQ(str(e, "state"), "UNAVAILABLE");
    CHECK(strstr(str(e, "reason"), "nonexistent") == NULL); /* why: for admin keys only */
    CHECK(strstr(str(e, "reason"), "failed") != NULL);
    json_decref(j);
    CHECK_INT_EQ(attnd_call(p, "GET", "/v2/repository/index", ADMIN, NULL, &r), 200);
    j = r.body ? json_loads(r.body, 0, NULL) : NULL;
    CHECK(strstr(str(index_entry(j, "broken"), "reason"), "nonexistent") != NULL);
    json_decref(j);
    http_result_free(&r);
    CHECK_INT_EQ(load(p, "x", "{\"parameters\": {\"path\": \"config/demo.safetensors\", "
                      "\"wrokers\": 2}}", &r), 400);
    CHECK_MSG(r.body && strstr(r.body, "parameters.wrokers"), "400 body: %s",
              r.body ? r.body : "");
    http_result_free(&r);
    CHECK_INT_EQ(load(p, "x", "{\"parameters\": {\"workers\": 2}}", NULL), 400); /* no path */
    CHECK_INT_EQ(load(p, "x", "{\"parameters\": {\"path\": \"config/demo.safetensors\", "
                      "\"workers\": 0}}", NULL), 400);
    CHECK_INT_EQ(load(p, "x", "{\"params\": {}}", NULL), 400);
    CHECK_INT_EQ(load(p, "x", "{\"parameters\": ", NULL), 400);
    CHECK_INT_EQ(load(p, "never-configured", NULL, &r), 404);
    CHECK_MSG(r.body && strstr(r.body, "path"), "404 body: %s", r.body ? r.body : "");
    http_result_free(&r);
    CHECK_INT_EQ(unload(p, "never-configured", ADMIN), 404);
    CHECK_INT_EQ(attnd_call(p, "POST", "/v2/repository/models/demo/unload", ADMIN,
                      "{\"parameters\": {\"unload_dependents\": 1}}", NULL), 400);
    CHECK_INT_EQ(attnd_call(p, "POST", "/v2/repository/models/demo/unload", ADMIN,
                      "{\"parameters\": {\"cascade\": true}}", NULL), 400);
    CHECK_INT_EQ(attnd_call(p, "GET", "/v1/models/demo", CLIENT, NULL, NULL), 200); /* untouched */
    CHECK_INT_EQ(attnd_call(p, "GET", "/v1/models/x", CLIENT, NULL, NULL), 404);
    CHECK(metrics_has(p, "attnd_repository_operations_total{operation=\"load\",result=\"error\"}"));
    CHECK(metrics_has(p, "attnd_repository_operations_total{operation=\"unload\","
                         "result=\"error\"} 3"));
}

typedef struct inflight {
    const attnd_proc *p;
    long status;
} inflight;

static void *send_slow(void *arg)
{
    inflight *f = arg;
    f->status = attnd_call(f->p, "POST", "/v1/models/slow/attention", CLIENT, query, NULL);
    return NULL;
}

TEST_WITH(unload_while_in_flight, const attnd_proc *p)
{
    /* its own queue delay: a lone request waits 1.5 s for its batch to fill */
    CHECK_INT_EQ(load(p, "slow", "{\"parameters\": {\"path\": \"config/demo.safetensors\", "
                      "\"max_queue_delay_us\": 1500000}}", NULL), 200);
    http_result r;
    CHECK_INT_EQ(attnd_call(p, "POST", "/v1/models/slow/sessions", CLIENT, "{}", &r), 201);
    json_error_t je;
    json_t *j = r.body ? json_loads(r.body, 0, &je) : NULL;
    char append[128];
    snprintf(append, sizeof append, "/v1/sessions/%s/append", str(j, "id"));
    json_decref(j);
    http_result_free(&r);
    inflight f = {.p = p};
    pthread_t th;
    pthread_create(&th, NULL, send_slow, &f);
    attnd_sleep_ms(400); /* queued on slow's version 1 */
    CHECK_MSG(metrics_has(p, "attnd_queue_depth{model=\"slow\"} 1"),
              "the request is not waiting on slow when it is unloaded");
    CHECK_INT_EQ(unload(p, "slow", ADMIN), 200);
    CHECK_INT_EQ(attnd_call(p, "POST", "/v1/models/slow/attention", CLIENT, query, &r), 404);
    CHECK_MSG(r.body && strstr(r.body, "loaded: ") && strstr(r.body, "demo"),
              "the 404 does not list the loaded models: %s", r.body ? r.body : "");
    CHECK_MSG(r.body && !strstr(r.body, "slow,") && !strstr(r.body, "slow)"),
              "the 404 lists the unloaded model: %s", r.body ? r.body : "");
    http_result_free(&r);
    pthread_join(th, NULL);
    printf("request in flight across the unload: %ld\n", f.status);
    CHECK_INT_EQ(f.status, 200);
    /* a session keeps the version it pinned until it is closed */
    CHECK_INT_EQ(attnd_call(p, "POST", append, CLIENT, query, NULL), 200);
    long st;
    j = get_json(p, "/v2/repository/index", &st);
    json_t *e = index_entry(j, "slow");
    CHECK_STR_EQ(str(e, "state"), "UNAVAILABLE");
    CHECK_STR_EQ(str(e, "reason"), "unloaded");
    json_decref(j);
    CHECK_INT_EQ(attnd_call(p, "GET", "/v2/models/slow", CLIENT, NULL, NULL), 404);
    CHECK_INT_EQ(attnd_call(p, "GET", "/v2/models/slow/ready", CLIENT, NULL, NULL), 404);
    CHECK(!metrics_has(p, "attnd_model_info{model=\"slow\""));
    CHECK(metrics_has(p, "attnd_repository_operations_total{operation=\"unload\","
                         "result=\"ok\"} 1"));
    /* loaded again from the source it was loaded from: version 2 */
    CHECK_INT_EQ(load(p, "slow", NULL, &r), 200);
    CHECK(r.body && strstr(r.body, "\"version\":\"2\""));
    http_result_free(&r);
    CHECK_INT_EQ(attnd_call(p, "GET", "/v2/models/slow/versions/2", CLIENT, NULL, NULL), 200);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, 0600);
}

/* The index's version of name, or -1. */
static int index_version(const attnd_proc *p, const char *name)
{
    long st;
    json_t *j = get_json(p, "/v2/repository/index", &st);
    json_t *e = index_entry(j, name);
    int v = e && *str(e, "version") ? atoi(str(e, "version")) : -1;
    json_decref(j);
    return v;
}

/* SIGHUP: the configured models that are loaded go one version up, an unloaded
 * one stays unloaded, models added at run time keep theirs; the admin keys are
 * re-read (the old one stops working). */
TEST_WITH(sighup_reload, const attnd_proc *p, const char *admin_file)
{
    int demo = index_version(p, "demo"), extra = index_version(p, "extra");
    CHECK(demo >= 1 && extra >= 1);
    CHECK_INT_EQ(unload(p, "other", ADMIN), 200);
    write_file(admin_file, "rotated-admin-key-51e0\n");
    kill(p->pid, SIGHUP);
    int reloaded = 0;
    for (int i = 0; i < 100 && !reloaded; i++) {
        reloaded = metrics_has(p, "attnd_reloads_total{result=\"ok\"} 1");
        if (!reloaded)
            attnd_sleep_ms(50);
    }
    CHECK_MSG(reloaded, "the SIGHUP reload was not counted");
    CHECK_INT_EQ(index_version(p, "demo"), demo + 1);
    CHECK_INT_EQ(index_version(p, "extra"), extra);
    CHECK_INT_EQ(attnd_call(p, "GET", "/v1/models/other", CLIENT, NULL, NULL), 404);
    CHECK_INT_EQ(unload(p, "extra", ADMIN), 401); /* the old admin key is gone */
    CHECK_INT_EQ(attnd_call(p, "POST", "/v2/repository/models/other/load",
                      "Bearer rotated-admin-key-51e0", NULL, NULL), 200);
    CHECK_INT_EQ(index_version(p, "other"), 2);
}

TEST_WITH(per_model_config, const attnd_proc *p)
{
    long st;
    json_t *j = get_json(p, "/v1/models/demo", &st);
    json_t *sc = json_object_get(j, "scheduler");
    CHECK_INT_EQ(json_integer_value(json_object_get(sc, "workers")), 3);
    CHECK_INT_EQ(json_integer_value(json_object_get(sc, "max_batch_tokens")), 512);
    CHECK_INT_EQ(json_integer_value(json_object_get(sc, "max_batch_requests")), 16); /* global */
    CHECK_INT_EQ(json_integer_value(json_object_get(sc, "prefill_chunk_rows")), 0);    /* its own: whole */
    CHECK(json_integer_value(json_object_get(sc, "prefill_chunk_rows")) == 0 &&
          json_object_get(sc, "prefill_chunk_rows") != NULL);
    CHECK_STR_EQ(str(j, "kv_dtype"), "f16");
    json_decref(j);
    j = get_json(p, "/v1/models/other", &st); /* a string entry's own key; the rest global */
    sc = json_object_get(j, "scheduler");
    CHECK_INT_EQ(json_integer_value(json_object_get(sc, "max_batch_kv_bytes")), 64 << 20);
    CHECK_INT_EQ(json_integer_value(json_object_get(sc, "workers")), 1);
    CHECK_INT_EQ(json_integer_value(json_object_get(sc, "max_batch_tokens")), 8192);
    CHECK_INT_EQ(json_integer_value(json_object_get(sc, "prefill_chunk_rows")), 128); /* global default */
    CHECK_STR_EQ(str(j, "kv_dtype"), "f32");
    json_decref(j);
}


TEST(no_admin_key_configured)
{
    attnd_proc p;
    if (attnd_proc_start(&p, NULL) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    http_result r;
    CHECK_INT_EQ(attnd_call(&p, "POST", "/v2/repository/models/demo/unload", NULL, NULL, &r), 403);
    CHECK_MSG(r.body && strstr(r.body, "--admin-key-file"), "403 body: %s",
              r.body ? r.body : "");
    http_result_free(&r);
    CHECK_INT_EQ(attnd_call(&p, "POST", "/v2/repository/models/demo/load", "Bearer anything", NULL,
                      NULL), 403);
    CHECK_INT_EQ(attnd_call(&p, "GET", "/v2/repository/index", NULL, NULL, NULL), 200);
    CHECK_INT_EQ(attnd_call(&p, "POST", "/v1/attention", NULL, query, NULL), 200); /* still served */
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

TEST_WITH(admin_key_equal_to_client_key, const char *client_file)
{
    const char *args[] = {"--model", "demo=config/demo.safetensors",
                          "--api-key-file", client_file, "--admin-key-file", client_file,
                          "--listen", "127.0.0.1:0", NULL};
    char *out = NULL;
    int rc = attnd_run(args, 15, &out);
    CHECK(rc != 0);
    CHECK_MSG(out && strstr(out, "also an API key"), "output: %s", out ? out : "");
    free(out);
}

int main(void)
{
    char client[] = "/tmp/attnd-client-XXXXXX", admin[] = "/tmp/attnd-admin-XXXXXX",
         cfg[] = "/tmp/attnd-repo-cfg-XXXXXX";
    int fds[] = {mkstemp(client), mkstemp(admin), mkstemp(cfg)};
    for (int i = 0; i < 3; i++) {
        CHECK(fds[i] >= 0);
        close(fds[i]);
    }
    write_file(client, CLIENT_KEY "\n");
    write_file(admin, "# repository admins\n" ADMIN_KEY "\n");
    write_file(cfg, "{\"workers\": 1, \"models\": ["
                    "{\"name\": \"demo\", \"path\": \"config/demo.safetensors\", \"workers\": 3, "
                    "\"max_batch_tokens\": 512, \"kv_dtype\": \"f16\", \"prefill_chunk_rows\": 0},"
                    "\"other=config/demo.safetensors,max_batch_kv_bytes=64M\"]}");
    attnd_proc p;
    const char *args[] = {"--config", cfg, "--api-key-file", client, "--admin-key-file", admin,
                          "--default-model", "demo", NULL};
    if (attnd_proc_start(&p, args) == 0) {
        RUN_WITH(index_lists_models, &p);
        RUN_WITH(admin_key_required, &p);
        RUN_WITH(per_model_config, &p);
        RUN_WITH(version_increments, &p);
        RUN_WITH(load_new_from_path, &p);
        RUN_WITH(bad_loads, &p);
        RUN_WITH(unload_while_in_flight, &p);
        RUN_WITH(sighup_reload, &p, admin);
        CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    } else {
        CHECK_MSG(0, "daemon did not start");
    }
    RUN(no_admin_key_configured);
    RUN_WITH(admin_key_equal_to_client_key, client);
    unlink(client);
    unlink(admin);
    unlink(cfg);
    return check_summary();
}
