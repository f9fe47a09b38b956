/* test_daemon_api.c — the real attnd answering correct requests: health,
 * readiness, model info, and attention results (self, cross, ragged batch,
 * every mask kind, causal, window, weights averaged and per head, concurrent
 * clients) compared with attn_forward on the same layer loaded in-process.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn.h"
#include "check.h"
#include "daemon.h"

#define TOL 1e-5

static attnd_proc proc;
static attn_layer *layer;
static attn_layer_info info;

/* xorshift64*: deterministic inputs, no rand(). */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return (float)((double)(r >> 40) / (double)(1u << 24) * 4.0 - 2.0);
}

static float *random_floats(size_t n)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = uniform();
    return x;
}

/* ------------------------------------------------------------ JSON helpers */

static json_t *json_mat(const float *x, int rows, int cols)
{
    json_t *a = json_array();
    for (int r = 0; r < rows; r++) {
        json_t *row = json_array();
        for (int c = 0; c < cols; c++)
            json_array_append_new(row, json_real(x[(size_t)r * cols + c]));
        json_array_append_new(a, row);
    }
    return a;
}

/* Largest |json - ref| over a rows×cols matrix; 1e30 when the shape differs. */
static double mat_diff(json_t *j, const float *ref, int rows, int cols)
{
    if (!json_is_array(j) || (int)json_array_size(j) != rows)
        return 1e30;
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        json_t *row = json_array_get(j, (size_t)r);
        if (!json_is_array(row) || (int)json_array_size(row) != cols)
            return 1e30;
        for (int c = 0; c < cols; c++) {
            json_t *v = json_array_get(row, (size_t)c);
            if (!json_is_number(v))
                return 1e30;
            double d = fabs(json_number_value(v) - ref[(size_t)r * cols + c]);
            if (d > worst)
                worst = d;
        }
    }
    return worst;
}

/* POSTs body (stolen) to path; returns the parsed response and its status. */
static json_t *post(const char *path, json_t *body, long *status)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", proc.base_url, path);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    http_result r;
    json_t *out = NULL;
    *status = -1;
    if (http_do("POST", url, text, strlen(text), NULL, &r) == 0) {
        *status = r.status;
        out = json_loads(r.body, 0, NULL);
        CHECK_MSG(strncmp(r.content_type, "application/json", 16) == 0, "content type %s",
                  r.content_type);
        if (!out)
            fprintf(stderr, "unparsable response %ld: %s\n", r.status, r.body);
        http_result_free(&r);
    }
    free(text);
    return out;
}

static json_t *get_json(const char *path, long *status)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", proc.base_url, path);
    http_result r;
    json_t *out = NULL;
    *status = -1;
    if (http_do("GET", url, NULL, 0, NULL, &r) == 0) {
        *status = r.status;
        out = json_loads(r.body, 0, NULL);
        CHECK_STR_EQ(r.content_type, "application/json");
        http_result_free(&r);
    }
    return out;
}

/* ------------------------------------------------------------ sequences */

/* One test sequence: inputs, masks, and reference outputs. */
typedef struct tseq {
    attn_seq seq;
    float *q, *k, *v, *mask_f, *ref_out, *ref_w;
    uint8_t *kpm, *mask_b;
} tseq;

static void tseq_init(tseq *t, int T, int S, int cross)
{
    memset(t, 0, sizeof *t);
    t->seq.t = T;
    t->seq.s = cross ? S : T;
    t->q = random_floats((size_t)T * info.embed_q);
    t->seq.query = t->q;
    if (cross) {
        t->k = random_floats((size_t)S * info.embed_k);
        t->v = random_floats((size_t)S * info.embed_v);
        t->seq.key = t->k;
        t->seq.value = t->v;
    }
}

static void tseq_want_weights(tseq *t, attn_weights_mode mode)
{
    t->seq.weights_mode = mode;
}

static void tseq_free(tseq *t)
{
    free(t->q);
    free(t->k);
    free(t->v);
    free(t->mask_f);
    free(t->mask_b);
    free(t->kpm);
    free(t->ref_out);
    free(t->ref_w);
}

static size_t weights_len(const tseq *t)
{
    size_t ts = (size_t)t->seq.t * t->seq.s;
    return t->seq.weights_mode == ATTN_WEIGHTS_PER_HEAD ? ts * info.num_heads
           : t->seq.weights_mode == ATTN_WEIGHTS_AVERAGE ? ts
                                                         : 0;
}

/* Runs the reference (one attn_forward per sequence, as an unbatched client). */
static void reference(tseq *ts, int n)
{
    for (int i = 0; i < n; i++) {
        tseq *t = &ts[i];
        free(t->ref_out);
        free(t->ref_w);
        t->ref_out = calloc((size_t)t->seq.t * info.embed_out, sizeof(float));
        t->ref_w = weights_len(t) ? calloc(weights_len(t), sizeof(float)) : NULL;
        attn_seq s = t->seq;
        s.output = t->ref_out;
        s.weights = t->ref_w;
        attn_error err = {0};
        attn_status st = attn_forward(layer, &s, 1, NULL, NULL, &err);
        CHECK_MSG(st == ATTN_OK, "reference forward: %s", err.message);
    }
}

/* The fields of one sequence in its JSON form. */
static json_t *seq_field(const tseq *t, const char *field)
{
    const attn_seq *s = &t->seq;
    if (!strcmp(field, "query"))
        return json_mat(t->q, s->t, info.embed_q);
    if (!strcmp(field, "key") && t->k)
        return json_mat(t->k, s->s, info.embed_k);
    if (!strcmp(field, "value") && t->v)
        return json_mat(t->v, s->s, info.embed_v);
    if (!strcmp(field, "key_padding_mask") && t->kpm) {
        json_t *a = json_array();
        for (int j = 0; j < s->s; j++)
            json_array_append_new(a, json_boolean(t->kpm[j]));
        return a;
    }
    if (!strcmp(field, "attn_mask") && (t->mask_b || t->mask_f)) {
        int heads = s->attn_mask_per_head ? info.num_heads : 1;
        json_t *hs = json_array();
        for (int h = 0; h < heads; h++) {
            json_t *m = json_array();
            for (int r = 0; r < s->t; r++) {
                json_t *row = json_array();
                for (int c = 0; c < s->s; c++) {
                    size_t i = ((size_t)h * s->t + r) * s->s + c;
                    json_array_append_new(row, t->mask_b ? json_boolean(t->mask_b[i])
                                                         : json_real(t->mask_f[i]));
                }
                json_array_append_new(m, row);
            }
            if (!s->attn_mask_per_head) {
                json_decref(hs);
                return m;
            }
            json_array_append_new(hs, m);
        }
        return hs;
    }
    return NULL;
}

/* Builds the request for n sequences (batched: B-level nesting). Options that
 * are per request (is_causal, window, need_weights) come from ts[0]. */
static json_t *build_request(const tseq *ts, int n, int batched)
{
    static const char *const fields[] = {"query", "key", "value", "key_padding_mask",
                                         "attn_mask"};
    json_t *req = json_object();
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
        json_t *first = seq_field(&ts[0], fields[f]);
        if (!first)
            continue;
        if (!batched) {
            json_object_set_new(req, fields[f], first);
            continue;
        }
        json_t *b = json_array();
        json_array_append_new(b, first);
        for (int i = 1; i < n; i++)
            json_array_append_new(b, seq_field(&ts[i], fields[f]));
        json_object_set_new(req, fields[f], b);
    }
    if (ts[0].seq.is_causal)
        json_object_set_new(req, "is_causal", json_true());
    if (ts[0].seq.window)
        json_object_set_new(req, "window", json_integer(ts[0].seq.window));
    if (ts[0].seq.weights_mode != ATTN_WEIGHTS_NONE) {
        json_object_set_new(req, "need_weights", json_true());
        json_object_set_new(req, "average_attn_weights",
                            json_boolean(ts[0].seq.weights_mode == ATTN_WEIGHTS_AVERAGE));
    }
    return req;
}

/* Compares one sequence's output (and weights) in JSON with the reference. */
static void check_seq(const char *what, const tseq *t, json_t *out, json_t *w)
{
    double d = mat_diff(out, t->ref_out, t->seq.t, info.embed_out);
    CHECK_MSG(d <= TOL, "%s: output differs from attn_forward by %g", what, d);
    if (t->seq.weights_mode == ATTN_WEIGHTS_AVERAGE) {
        d = mat_diff(w, t->ref_w, t->seq.t, t->seq.s);
        CHECK_MSG(d <= TOL, "%s: averaged weights differ by %g", what, d);
    } else if (t->seq.weights_mode == ATTN_WEIGHTS_PER_HEAD) {
        CHECK_MSG(json_is_array(w) && (int)json_array_size(w) == info.num_heads,
                  "%s: weights not h×T×S", what);
        for (int h = 0; h < info.num_heads && json_is_array(w); h++) {
            d = mat_diff(json_array_get(w, (size_t)h),
                         t->ref_w + (size_t)h * t->seq.t * t->seq.s, t->seq.t, t->seq.s);
            CHECK_MSG(d <= TOL, "%s: head %d weights differ by %g", what, h, d);
        }
    } else {
        CHECK_MSG(w == NULL, "%s: weights present though not asked for", what);
    }
}

/* Sends ts as one request to path, checks status 200 and every result. */
static void run_case(const char *what, const char *path, tseq *ts, int n, int batched)
{
    reference(ts, n);
    long status;
    json_t *resp = post(path, build_request(ts, n, batched), &status);
    CHECK_MSG(status == 200, "%s: status %ld", what, status);
    if (!resp || status != 200) {
        json_decref(resp);
        return;
    }
    CHECK_STR_EQ(json_string_value(json_object_get(resp, "model")), "demo");
    json_t *timing = json_object_get(resp, "timing");
    CHECK(json_is_integer(json_object_get(timing, "batch_size")));
    json_t *out = json_object_get(resp, "output"), *w = json_object_get(resp, "weights");
    if (!batched) {
        check_seq(what, &ts[0], out, w);
    } else {
        CHECK_MSG(json_is_array(out) && (int)json_array_size(out) == n, "%s: B = %zu", what,
                  json_array_size(out));
        for (int i = 0; i < n && (int)json_array_size(out) == n; i++)
            check_seq(what, &ts[i], json_array_get(out, (size_t)i),
                      w ? json_array_get(w, (size_t)i) : NULL);
    }
    json_decref(resp);
}

/* ------------------------------------------------------------ the cases */

static const char *const model_path = "/v1/models/demo/attention";

TEST(self_single)
{
    tseq t;
    tseq_init(&t, 5, 0, 0);
    run_case("self single", model_path, &t, 1, 0);
    tseq_free(&t);
    tseq_init(&t, 3, 0, 0);
    run_case("default route", "/v1/attention", &t, 1, 0);
    tseq_free(&t);
}

TEST(cross)
{
    tseq t;
    tseq_init(&t, 3, 7, 1);
    run_case("cross", model_path, &t, 1, 0);
    tseq_free(&t);
}

TEST(ragged_batch)
{
    tseq ts[3];
    int lens[3] = {2, 6, 3};
    for (int i = 0; i < 3; i++)
        tseq_init(&ts[i], lens[i], 0, 0);
    run_case("ragged self batch", model_path, ts, 3, 1);
    for (int i = 0; i < 3; i++)
        tseq_free(&ts[i]);
    int s_lens[2] = {4, 9};
    for (int i = 0; i < 2; i++)
        tseq_init(&ts[i], lens[i], s_lens[i], 1);
    run_case("ragged cross batch", model_path, ts, 2, 1);
    for (int i = 0; i < 2; i++)
        tseq_free(&ts[i]);
}

TEST(masks)
{
    tseq t;
    /* key padding: keys 1 and 4 of 5 are ignored */
    tseq_init(&t, 5, 0, 0);
    t.kpm = calloc(5, 1);
    t.kpm[1] = t.kpm[4] = 1;
    t.seq.key_padding_mask = t.kpm;
    tseq_want_weights(&t, ATTN_WEIGHTS_AVERAGE);
    run_case("key_padding_mask", model_path, &t, 1, 0);
    CHECK_NEAR(t.ref_w[1], 0.0, 0.0); /* the reference really masked */
    tseq_free(&t);

    /* boolean attn_mask T×S (cross, T=3, S=4): a diagonal band is blocked */
    tseq_init(&t, 3, 4, 1);
    t.mask_b = calloc(12, 1);
    for (int r = 0; r < 3; r++)
        t.mask_b[r * 4 + r] = 1;
    t.seq.attn_mask_kind = ATTN_MASK_BOOL;
    t.seq.attn_mask = t.mask_b;
    tseq_want_weights(&t, ATTN_WEIGHTS_AVERAGE);
    run_case("attn_mask bool", model_path, &t, 1, 0);
    tseq_free(&t);

    /* float attn_mask T×S, additive */
    tseq_init(&t, 4, 0, 0);
    t.mask_f = random_floats(16);
    t.seq.attn_mask_kind = ATTN_MASK_FLOAT;
    t.seq.attn_mask = t.mask_f;
    run_case("attn_mask float", model_path, &t, 1, 0);
    tseq_free(&t);

    /* float attn_mask per head h×T×S */
    tseq_init(&t, 3, 0, 0);
    t.mask_f = random_floats((size_t)info.num_heads * 9);
    t.seq.attn_mask_kind = ATTN_MASK_FLOAT;
    t.seq.attn_mask_per_head = 1;
    t.seq.attn_mask = t.mask_f;
    tseq_want_weights(&t, ATTN_WEIGHTS_PER_HEAD);
    run_case("attn_mask per head", model_path, &t, 1, 0);
    tseq_free(&t);
}

TEST(causal_window)
{
    tseq t;
    tseq_init(&t, 6, 0, 0);
    t.seq.is_causal = 1;
    tseq_want_weights(&t, ATTN_WEIGHTS_AVERAGE);
    run_case("causal", model_path, &t, 1, 0);
    CHECK_NEAR(t.ref_w[1], 0.0, 0.0); /* row 0 sees only key 0 */
    tseq_free(&t);

    tseq_init(&t, 7, 0, 0);
    t.seq.window = 2;
    tseq_want_weights(&t, ATTN_WEIGHTS_AVERAGE);
    run_case("window", model_path, &t, 1, 0);
    tseq_free(&t);

    tseq_init(&t, 7, 0, 0);
    t.seq.window = 3;
    t.seq.is_causal = 1;
    run_case("window + causal", model_path, &t, 1, 0);
    tseq_free(&t);
}

TEST(weights)
{
    tseq t;
    tseq_init(&t, 4, 6, 1);
    tseq_want_weights(&t, ATTN_WEIGHTS_AVERAGE);
    run_case("need_weights averaged", model_path, &t, 1, 0);
    tseq_free(&t);

    tseq_init(&t, 4, 0, 0);
    tseq_want_weights(&t, ATTN_WEIGHTS_PER_HEAD);
    run_case("need_weights per head", model_path, &t, 1, 0);
    tseq_free(&t);

    tseq ts[2];
    tseq_init(&ts[0], 2, 0, 0);
    tseq_init(&ts[1], 5, 0, 0);
    tseq_want_weights(&ts[0], ATTN_WEIGHTS_PER_HEAD);
    tseq_want_weights(&ts[1], ATTN_WEIGHTS_PER_HEAD);
    run_case("need_weights per head, ragged batch", model_path, ts, 2, 1);
    tseq_free(&ts[0]);
    tseq_free(&ts[1]);
}

/* Many clients at once: the scheduler batches them together, and each must
 * still get exactly its own answer. */
#define CLIENTS 6
#define PER_CLIENT 5
static int client_failures;
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;

static void *client(void *arg)
{
    tseq *ts = arg;
    for (int i = 0; i < PER_CLIENT; i++) {
        long status;
        json_t *resp = post(model_path, build_request(&ts[i], 1, 0), &status);
        double d = resp ? mat_diff(json_object_get(resp, "output"), ts[i].ref_out,
                                   ts[i].seq.t, info.embed_out)
                        : 1e30;
        if (status != 200 || d > TOL) {
            pthread_mutex_lock(&fail_lock);
            client_failures++;
            fprintf(stderr, "concurrent client: status %ld, diff %g\n", status, d);
            pthread_mutex_unlock(&fail_lock);
        }
        json_decref(resp);
    }
    return NULL;
}

TEST(concurrent_clients)
{
    static tseq ts[CLIENTS][PER_CLIENT];
    pthread_t th[CLIENTS];
    for (int c = 0; c < CLIENTS; c++)
        for (int i = 0; i < PER_CLIENT; i++) {
            tseq_init(&ts[c][i], 1 + (c * 3 + i) % 8, 0, 0);
            reference(&ts[c][i], 1);
        }
    for (int c = 0; c < CLIENTS; c++)
        pthread_create(&th[c], NULL, client, ts[c]);
    for (int c = 0; c < CLIENTS; c++)
        pthread_join(th[c], NULL);
    CHECK_INT_EQ(client_failures, 0);
    for (int c = 0; c < CLIENTS; c++)
        for (int i = 0; i < PER_CLIENT; i++)
            tseq_free(&ts[c][i]);
}

/* ------------------------------------------------------------ endpoints */

TEST(endpoints)
{
    long status;
    json_t *j = get_json("/healthz", &status);
    CHECK_INT_EQ(status, 200);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "status")), "ok");
    json_decref(j);

    j = get_json("/readyz", &status);
    CHECK_INT_EQ(status, 200);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "status")), "ready");
    json_decref(j);

    j = get_json("/v1/models/demo", &status);
    CHECK_INT_EQ(status, 200);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "name")), "demo");
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "num_heads")), info.num_heads);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "embed_q")), 64);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "embed_out")), info.embed_out);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "param_count")), info.param_count);
    CHECK_STR_EQ(json_string_value(json_object_get(j, "dtype")), "F32");
    CHECK(json_is_true(json_object_get(json_object_get(j, "has_bias"), "q")) ==
          (info.has_bias_q != 0));
    const char *file = json_string_value(json_object_get(j, "file"));
    CHECK(file && strstr(file, "demo.safetensors"));
    const char *at = json_string_value(json_object_get(j, "loaded_at"));
    int y, mo, d, h, mi, s;
    CHECK_MSG(at && sscanf(at, "%4d-%2d-%2dT%2d:%2d:%2dZ", &y, &mo, &d, &h, &mi, &s) == 6 &&
                  strlen(at) == 20,
              "loaded_at %s is not ISO-8601 UTC", at ? at : "(null)");
    json_decref(j);

    j = get_json("/v1/models", &status);
    CHECK_INT_EQ(status, 200);
    json_t *models = json_object_get(j, "models");
    CHECK(json_is_array(models) && json_array_size(models) == 1);
    CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(models, 0), "name")), "demo");
    json_decref(j);

    /* the playground's page */
    char url[128];
    http_result r;
    snprintf(url, sizeof url, "%s/ui/", proc.base_url);
    CHECK(http_do("GET", url, NULL, 0, NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK_MSG(strncmp(r.content_type, "text/html", 9) == 0, "ui type %s", r.content_type);
    CHECK(r.body_len > 100);
    http_result_free(&r);

    /* HEAD answers like GET without a body */
    snprintf(url, sizeof url, "%s/healthz", proc.base_url);
    CHECK(http_do("HEAD", url, NULL, 0, NULL, &r) == 0);
    CHECK_INT_EQ(r.status, 200);
    CHECK_INT_EQ(r.body_len, 0);
    http_result_free(&r);
}

/* ------------------------------------------------------------ metrics */

/* The value of the series whose line starts with `series ` ("" -> 0). */
static double metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return atof(p + n + 1);
    return 0;
}

static char *scrape(void)
{
    char url[128];
    snprintf(url, sizeof url, "%s/metrics", proc.base_url);
    http_result r;
    if (http_do("GET", url, NULL, 0, NULL, &r) != 0)
        return NULL;
    CHECK_INT_EQ(r.status, 200);
    CHECK_MSG(strncmp(r.content_type, "text/plain; version=0.0.4", 25) == 0, "type %s",
              r.content_type);
    return r.body; /* caller frees */
}

TEST(metrics)
{
    static const char ok[] =
        "attnd_requests_total{model=\"demo\",route=\"/v1/models/{name}/attention\",status=\"200\"}";
    static const char bad[] =
        "attnd_requests_total{model=\"demo\",route=\"/v1/models/{name}/attention\",status=\"400\"}";
    char *before = scrape();
    CHECK(before != NULL);
    if (!before)
        return;
    tseq t;
    tseq_init(&t, 2, 0, 0);
    run_case("metrics 1", model_path, &t, 1, 0);
    run_case("metrics 2", model_path, &t, 1, 0);
    tseq_free(&t);
    long status;
    json_decref(post(model_path, json_pack("{s:[[i]]}", "query", 1), &status));
    CHECK_INT_EQ(status, 400);
    char *after = scrape();
    CHECK(after != NULL);
    if (after) {
        CHECK_NEAR(metric(after, ok) - metric(before, ok), 2, 0);
        CHECK_NEAR(metric(after, bad) - metric(before, bad), 1, 0);
        CHECK(metric(after, "attnd_batch_size_count{model=\"demo\"}") >=
              metric(before, "attnd_batch_size_count{model=\"demo\"}") + 1);
        CHECK(metric(after, "attnd_batch_tokens_sum{model=\"demo\"}") >=
              metric(before, "attnd_batch_tokens_sum{model=\"demo\"}") + 4);
        CHECK_NEAR(metric(after, "attnd_queue_duration_seconds_count{model=\"demo\"}") -
                       metric(before, "attnd_queue_duration_seconds_count{model=\"demo\"}"),
                   2, 0);
        CHECK(metric(after, "attnd_request_duration_seconds_count{model=\"demo\"}") >=
              metric(before, "attnd_request_duration_seconds_count{model=\"demo\"}") + 3);
        CHECK_NEAR(metric(after, "attnd_queue_depth{model=\"demo\"}"), 0, 0);
        CHECK(metric(after, "attnd_requests_in_flight") >= 1); /* this scrape */
        CHECK(strstr(after, "attnd_build_info{version=\"" ATTN_VERSION_STRING "\"} 1") != NULL);
        CHECK(strstr(after, "attnd_model_info{model=\"demo\",heads=\"8\",embed_dim=\"64\"") !=
              NULL);
        CHECK(metric(after, "process_start_time_seconds") > 1.6e9);
        CHECK(strstr(after, "# TYPE attnd_request_duration_seconds histogram") != NULL);
    }
    free(before);
    free(after);
}

int main(void)
{
    attn_error err = {0};
    const char *model = getenv("ATTND_DEMO_MODEL") ? getenv("ATTND_DEMO_MODEL")
                                                   : "config/demo.safetensors";
    if (attn_layer_load_safetensors(model, 0, &layer, &err) != ATTN_OK) {
        fprintf(stderr, "cannot load %s: %s\n", model, err.message);
        return 1;
    }
    attn_layer_get_info(layer, &info);
    CHECK_INT_EQ(info.embed_q, 64);
    CHECK_INT_EQ(info.num_heads, 8);
    /* A short queue delay so batches form across the concurrent clients. */
    const char *args[] = {"--max-queue-delay-us", "2000", "--workers", "2", NULL};
    if (attnd_proc_start(&proc, args) != 0) {
        CHECK_MSG(0, "attnd did not start");
        attn_layer_free(layer);
        return check_summary();
    }
    RUN(endpoints);
    RUN(self_single);
    RUN(cross);
    RUN(ragged_batch);
    RUN(masks);
    RUN(causal_window);
    RUN(weights);
    RUN(concurrent_clients);
    RUN(metrics);
    CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    unlink(proc.log_path);
    attn_layer_free(layer);
    return check_summary();
}
