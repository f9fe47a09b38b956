/* test_reload.c — SIGHUP through the real daemon: the file behind a model's
 * path is replaced, SIGHUP, and answers change to exactly the new layer's
 * (computed here with the library), while a request queued before the reload
 * finishes on the old layer; /v1/models shows the new loaded_at; a corrupt file
 * and a file with a NaN weight are refused (old version keeps serving) and
 * counted in attnd_reloads_total{result="error"}.
 */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attn.h"
#include "check.h"
#include "daemon.h"

enum { T = 3, E = 64 };
static float query[T * E];
static char body[T * E * 16 + 64];
static attnd_proc proc;

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len);
    if (b && fread(b, 1, *len, f) != *len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static int write_all(const char *path, const void *data, size_t len)
{
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, len, f) == len;
    ok &= fclose(f) == 0;
    return ok ? rename(tmp, path) : -1; /* the swap is atomic, as a deploy would do it */
}

/* Layer `path`'s output for the query, computed by the library. */
static int reference(const char *path, float *out)
{
    attn_layer *l = NULL;
    attn_error err;
    if (attn_layer_load_safetensors(path, 0, &l, &err) != ATTN_OK)
        return -1;
    attn_seq s = {.t = T, .s = T, .query = query, .output = out};
    attn_status st = attn_forward(l, &s, 1, NULL, NULL, &err);
    attn_layer_free(l);
    return st == ATTN_OK ? 0 : -1;
}

/* POSTs the query; fills out (T*E) from the answer. Returns the status. */
static long ask(float *out)
{
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models/demo/attention", proc.base_url);
    http_result r;
    if (http_do("POST", url, body, strlen(body), NULL, &r) != 0)
        return -1;
    long st = r.status;
    json_t *j = json_loads(r.body, 0, NULL);
    json_t *o = json_object_get(j, "output");
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++)
            out[t * E + e] = (float)json_number_value(json_array_get(json_array_get(o, t), e));
    json_decref(j);
    http_result_free(&r);
    return st;
}

static double max_diff(const float *a, const float *b)
{
    double d = 0;
    for (int i = 0; i < T * E; i++)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/* The value of attnd_reloads_total{result=...}, or -1. */
static long reloads(const char *result)
{
    char url[128], pat[64];
    snprintf(url, sizeof url, "%s/metrics", proc.base_url);
    snprintf(pat, sizeof pat, "attnd_reloads_total{result=\"%s\"} ", result);
    http_result r;
    if (http_do("GET", url, NULL, 0, NULL, &r) != 0)
        return -1;
    const char *p = strstr(r.body, pat);
    long v = p ? strtol(p + strlen(pat), NULL, 10) : -1;
    http_result_free(&r);
    return v;
}

/* SIGHUP, then waits (up to 10 s) for the counter to move. */
static int hup_and_wait(const char *result, long before)
{
    kill(proc.pid, SIGHUP);
    for (int i = 0; i < 1000; i++) {
        if (reloads(result) > before)
            return 0;
        attnd_sleep_ms(10);
    }
    return -1;
}

static char *loaded_at(void)
{
    char url[128];
    snprintf(url, sizeof url, "%s/v1/models/demo", proc.base_url);
    http_result r;
    if (http_do("GET", url, NULL, 0, NULL, &r) != 0)
        return strdup("");
    json_t *j = json_loads(r.body, 0, NULL);
    const char *s = json_string_value(json_object_get(j, "loaded_at"));
    char *at = strdup(s ? s : "");
    json_decref(j);
    http_result_free(&r);
    return at;
}

typedef struct inflight {
    float out[T * E];
    long status;
} inflight;

static void *ask_thread(void *arg)
{
    inflight *f = arg;
    f->status = ask(f->out);
    return NULL;
}

/* One daemon through a SIGHUP swap with a request in flight, then a truncated
 * file and a NaN weight, both refused (the steps depend on each other). */
TEST(reload_scenario)
{
    size_t n = (size_t)snprintf(body, sizeof body, "{\"query\": [");
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) {
            query[t * E + e] = (float)((t * 31 + e * 7) % 13 - 6) / 8.0f;
            n += (size_t)snprintf(body + n, sizeof body - n, "%s%s%.9g", e ? "," : t ? "],[" : "[",
                                  "", (double)query[t * E + e]);
        }
    snprintf(body + n, sizeof body - n, "]]}");

    char dir[] = "/tmp/attnd-reload-XXXXXX", path[300], a_path[300], b_path[300], spec[320];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(a_path, sizeof a_path, "%s/a.safetensors", dir);
    snprintf(b_path, sizeof b_path, "%s/b.safetensors", dir);
    size_t len = 0;
    unsigned char *a = read_all("config/demo.safetensors", &len);
    CHECK(a != NULL && len > 8);
    if (!a)
        return;
    /* Layer B: every F32 of layer A's data times -0.75 (the header is kept). */
    uint64_t hlen = 0;
    memcpy(&hlen, a, 8);
    unsigned char *b = malloc(len);
    memcpy(b, a, len);
    for (size_t off = 8 + hlen; off + 4 <= len; off += 4) {
        float v;
        memcpy(&v, b + off, 4);
        v *= -0.75f;
        memcpy(b + off, &v, 4);
    }
    CHECK(write_all(a_path, a, len) == 0 && write_all(b_path, b, len) == 0);
    CHECK(write_all(path, a, len) == 0);
    float ref_a[T * E], ref_b[T * E], got[T * E];
    CHECK(reference(a_path, ref_a) == 0 && reference(b_path, ref_b) == 0);
    CHECK(max_diff(ref_a, ref_b) > 1e-2);

    snprintf(spec, sizeof spec, "demo=%s", path);
    const char *args[] = {"--model", spec, "--max-queue-delay-us", "1500000",
                          "--max-batch-requests", "64", "--workers", "1", NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        return;
    }
    char *at0 = loaded_at();
    CHECK_INT_EQ(reloads("ok"), 0);

    /* A request queued on version A (its batch waits 1.5 s), then the swap. */
    inflight f = {.status = 0};
    pthread_t th;
    pthread_create(&th, NULL, ask_thread, &f);
    attnd_sleep_ms(400);
    CHECK(write_all(path, b, len) == 0);
    attnd_sleep_ms(700); /* loaded_at has a one-second resolution */
    CHECK(hup_and_wait("ok", 0) == 0);
    pthread_join(th, NULL);
    CHECK_INT_EQ(f.status, 200);
    CHECK_MSG(max_diff(f.out, ref_a) < 1e-5, "in-flight request: %g from version A",
              max_diff(f.out, ref_a));

    CHECK_INT_EQ(ask(got), 200);
    CHECK_MSG(max_diff(got, ref_b) < 1e-5, "after reload: %g from the new layer",
              max_diff(got, ref_b));
    CHECK(max_diff(got, ref_a) > 1e-2);
    char *at1 = loaded_at();
    CHECK_MSG(strcmp(at0, at1) != 0 && *at1, "loaded_at %s -> %s", at0, at1);

    /* A truncated file: refused, B keeps serving, counted. */
    CHECK(write_all(path, b, len / 2) == 0);
    CHECK(hup_and_wait("error", 0) == 0);
    CHECK_INT_EQ(ask(got), 200);
    CHECK(max_diff(got, ref_b) < 1e-5);
    /* A NaN among the weights: loads, but fails validation. */
    float nan = NAN;
    memcpy(b + 8 + hlen, &nan, 4);
    CHECK(write_all(path, b, len) == 0);
    CHECK(hup_and_wait("error", 1) == 0);
    CHECK_INT_EQ(reloads("ok"), 1);
    CHECK_INT_EQ(ask(got), 200);
    CHECK(max_diff(got, ref_b) < 1e-5);
    char *at2 = loaded_at();
    CHECK_STR_EQ(at1, at2);

    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    FILE *lf = fopen(proc.log_path, "r");
    char line[2048];
    int failed_logged = 0;
    while (lf && fgets(line, sizeof line, lf))
        failed_logged += strstr(line, "reload failed") != NULL;
    if (lf)
        fclose(lf);
    CHECK_INT_EQ(failed_logged, 2);
    unlink(proc.log_path);
    free(at0);
    free(at1);
    free(at2);
    free(a);
    free(b);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    RUN(reload_scenario);
    return check_summary();
}
