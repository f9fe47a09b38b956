/* test_longctx_daemon.c — a long-context request served by the real daemon
 * under its default scratch bound (64 MiB, attn_workspace_options): a v2
 * binary cross-attention of 2 queries over S = 140000 keys of the demo layer,
 * whose ordinary plan needs ~68 MiB of K/V projections, so the library
 * streams it (checked in-process on a default workspace: streamed, peak
 * within 64 MiB); the daemon's answer equals the unbounded ordinary plan
 * within 1e-5 relative.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "daemon.h"

enum { T = 2, S = 140000 };

static attnd_proc proc;

static float *rows(int n, int e, double phase)
{
    float *x = malloc((size_t)n * (size_t)e * sizeof *x);
    for (size_t i = 0; x && i < (size_t)n * (size_t)e; i++) x[i] = (float)sin(0.37 * (double)i + phase);
    return x;
}

/* The library's answer on a workspace with this bound (stats in *st). */
static float *library(const attn_layer *l, const attn_layer_info *li, const float *q, const float *kv,
                      size_t bound, attn_forward_stats *st)
{
    float *out = malloc((size_t)T * li->embed_out * sizeof *out);
    attn_workspace_options o = {.n_threads = 2, .max_scratch_bytes = bound};
    attn_workspace *ws = NULL;
    CHECK_INT_EQ(attn_workspace_create(&o, &ws, NULL), ATTN_OK);
    attn_seq seq = {.t = T, .s = S, .query = q, .key = kv, .value = kv, .output = out};
    attn_error err = {0};
    CHECK_MSG(attn_forward(l, &seq, 1, ws, st, &err) == ATTN_OK, "%s", err.message);
    attn_workspace_free(ws);
    return out;
}

/* POSTs the v2 binary request (query, key, value = kv); the output's floats. */
static float *daemon_answer(const attn_layer_info *li, const float *q, const float *kv)
{
    const size_t qb = (size_t)T * li->embed_q * 4, kb = (size_t)S * li->embed_k * 4;
    char head[1024];
    const char *in = "{\"name\":\"%s\",\"shape\":[1,%d,%d],\"datatype\":\"FP32\","
                     "\"parameters\":{\"binary_data_size\":%zu}}";
    char iq[256], ik[256], iv[256];
    snprintf(iq, sizeof iq, in, "query", T, li->embed_q, qb);
    snprintf(ik, sizeof ik, in, "key", S, li->embed_k, kb);
    snprintf(iv, sizeof iv, in, "value", S, li->embed_v, kb);
    const int hl = snprintf(head, sizeof head, "{\"inputs\":[%s,%s,%s]}", iq, ik, iv);
    const size_t n = (size_t)hl + qb + 2 * kb;
    char *body = malloc(n);
    memcpy(body, head, (size_t)hl);
    memcpy(body + hl, q, qb); /* little-endian host */
    memcpy(body + hl + qb, kv, kb);
    memcpy(body + hl + qb + kb, kv, kb);
    char ihcl[64], url[128];
    snprintf(ihcl, sizeof ihcl, "Inference-Header-Content-Length: %d", hl);
    snprintf(url, sizeof url, "%s/v2/models/demo/infer", proc.base_url);
    const char *hdrs[] = {ihcl, NULL};
    http_result r;
    float *got = calloc((size_t)T * li->embed_out, sizeof *got);
    CHECK(http_do_ex("POST", url, body, n, "application/octet-stream", hdrs, NULL, &r) == 0);
    CHECK_MSG(r.status == 200, "status %ld: %.300s", r.status, r.body ? r.body : "");
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    json_t *data = json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "data");
    CHECK_INT_EQ(json_array_size(data), (size_t)T * li->embed_out);
    for (size_t k = 0; k < json_array_size(data) && k < (size_t)T * li->embed_out; k++)
        got[k] = (float)json_number_value(json_array_get(data, k));
    json_decref(j);
    http_result_free(&r);
    free(body);
    return got;
}

TEST(long_cross_attention_streams)
{
    attn_layer *l = NULL;
    attn_error err = {0};
    const char *model = getenv("ATTND_DEMO_MODEL") ? getenv("ATTND_DEMO_MODEL") : "config/demo.safetensors";
    CHECK_MSG(attn_layer_load_safetensors(model, 0, &l, &err) == ATTN_OK, "%s", err.message);
    if (l == NULL) return;
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    CHECK(li.embed_k == li.embed_v);
    float *q = rows(T, li.embed_q, 0.0), *kv = rows(S, li.embed_k, 1.0);
    attn_forward_stats so = {0}, sd = {0};
    float *want = library(l, &li, q, kv, SIZE_MAX, &so);
    float *dflt = library(l, &li, q, kv, 0, &sd);
    CHECK_MSG(so.streamed == 0 && so.peak_scratch > (size_t)64 << 20, "ordinary plan: %zu bytes",
              so.peak_scratch);
    CHECK_MSG(sd.streamed == 1 && sd.peak_scratch <= (size_t)64 << 20, "default bound: streamed %d, %zu bytes",
              sd.streamed, sd.peak_scratch);
    float *got = daemon_answer(&li, q, kv);
    double worst = 0, scale = 1;
    for (size_t i = 0; i < (size_t)T * li.embed_out; i++) {
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
        const double d = fabs((double)got[i] - want[i]);
        if (!(d <= worst)) worst = d;
    }
    printf("S=%d: ordinary plan %.1f MiB, streamed %.1f MiB; daemon vs ordinary max diff %.3g\n", S,
           so.peak_scratch / 1048576.0, sd.peak_scratch / 1048576.0, worst);
    CHECK_MSG(worst <= 1e-5 * scale, "daemon vs ordinary plan: %.3g", worst);
    free(q); free(kv); free(want); free(dflt); free(got);
    attn_layer_free(l);
}

int main(void)
{
    const char *args[] = {"--max-seq-len", "140000", "--max-body-bytes", "128M", NULL};
    if (attnd_proc_start(&proc, args) != 0) return 1;
    RUN(long_cross_attention_streams);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    return check_summary();
}
