/* test_batching.c — cross-client batching through the real daemon: concurrent
 * clients get the same answers as when alone, batches form (and show in the
 * responses and /metrics), batching can be turned off, and the queue bound,
 * deadlines and vanished clients are handled.
 *
 * Requests are made here from a fixed seed for the demo model (E = 64, 8 heads):
 * self and cross (key width 64), single and B×T×E, with masks and weights.
 */
#include "check.h"
#include "daemon.h"
#include "sbuf.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define E 64
#define N_CLIENTS 48

/* ------------------------------------------------------------ text buffer */

/* ------------------------------------------------------------ request bodies */

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;
static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int rng_int(int lo, int hi) { return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1)); }
static double rng_unit(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }

static void put_matrix(sbuf *b, int rows, int cols)
{
    sb_printf(b, "[");
    for (int r = 0; r < rows; r++) {
        sb_printf(b, "%s[", r ? "," : "");
        for (int c = 0; c < cols; c++) sb_printf(b, "%s%.6g", c ? "," : "", 2 * rng_unit() - 1);
        sb_printf(b, "]");
    }
    sb_printf(b, "]");
}

static void put_bools(sbuf *b, int n, int one_in) /* never blocks element 0 */
{
    sb_printf(b, "[");
    for (int i = 0; i < n; i++)
        sb_printf(b, "%s%s", i ? "," : "", i > 0 && rng_int(1, one_in) == 1 ? "true" : "false");
    sb_printf(b, "]");
}

typedef struct req_case {
    char *body;
    size_t len;
} req_case;

/* One request: B sequences (B = 0: the single T×E form), each with its own T
 * and, for cross-attention, S. Masks and weights chosen at random. */
static req_case make_case(int idx, int t_max)
{
    int cross = idx % 2, b_count = rng_int(0, 3) == 0 ? rng_int(1, 3) : 0;
    int n = b_count ? b_count : 1;
    int t[3], s[3], same = rng_int(0, 2) == 0; /* same T: eligible for a shared mask */
    for (int i = 0; i < n; i++) {
        t[i] = same && i ? t[0] : rng_int(1, t_max);
        s[i] = cross ? (same && i ? s[0] : rng_int(1, t_max)) : t[i];
    }
    const char *open = b_count ? "[" : "", *close = b_count ? "]" : "";
    sbuf b = { 0 };
    sb_printf(&b, "{\"id\":\"case-%d\",\"query\":%s", idx, open);
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s", i ? "," : "");
        put_matrix(&b, t[i], E);
    }
    sb_printf(&b, "%s", close);
    if (cross) {
        const char *kv[2] = { "key", "value" };
        for (int f = 0; f < (rng_int(0, 1) ? 2 : 1); f++) { /* value defaults to key */
            sb_printf(&b, ",\"%s\":%s", kv[f], open);
            for (int i = 0; i < n; i++) {
                sb_printf(&b, "%s", i ? "," : "");
                put_matrix(&b, s[i], E);
            }
            sb_printf(&b, "%s", close);
        }
    }
    if (rng_int(0, 2) == 0) {
        sb_printf(&b, ",\"key_padding_mask\":%s", open);
        for (int i = 0; i < n; i++) {
            sb_printf(&b, "%s", i ? "," : "");
            put_bools(&b, s[i], 3);
        }
        sb_printf(&b, "%s", close);
    }
    if (rng_int(0, 3) == 0) {
        sb_printf(&b, ",\"attn_mask\":%s", open);
        for (int i = 0; i < n; i++) {
            sb_printf(&b, "%s[", i ? "," : "");
            for (int r = 0; r < t[i]; r++) {
                sb_printf(&b, "%s", r ? "," : "");
                put_bools(&b, s[i], 4);
            }
            sb_printf(&b, "]");
        }
        sb_printf(&b, "%s", close);
    }
    if (rng_int(0, 2) == 0) sb_printf(&b, ",\"is_causal\":true");
    if (rng_int(0, 2) == 0)
        sb_printf(&b, ",\"need_weights\":true,\"average_attn_weights\":%s",
                  rng_int(0, 1) ? "true" : "false");
    sb_printf(&b, "}");
    return (req_case){ b.p, b.len };
}

/* ------------------------------------------------------------ responses */

typedef struct reply {
    long status;
    int transport_error;
    double *out, *w; /* every number of "output" / "weights", flattened */
    size_t n_out, n_w, cap_out, cap_w;
    int batch_size;
    char code[48];
    char retry_after[32];
} reply;

static void flatten(json_t *j, double **v, size_t *n, size_t *cap)
{
    if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j); i++) flatten(json_array_get(j, i), v, n, cap);
        return;
    }
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 1024;
        *v = realloc(*v, *cap * sizeof **v);
    }
    (*v)[(*n)++] = json_number_value(j);
}

static void reply_parse(reply *r, const http_result *h)
{
    r->status = h->status;
    snprintf(r->retry_after, sizeof r->retry_after, "%s", h->retry_after);
    json_t *root = json_loadb(h->body ? h->body : "", h->body_len, 0, NULL);
    if (root == NULL) return;
    json_t *out = json_object_get(root, "output"), *w = json_object_get(root, "weights");
    if (out) flatten(out, &r->out, &r->n_out, &r->cap_out);
    if (w) flatten(w, &r->w, &r->n_w, &r->cap_w);
    json_t *bs = json_object_get(json_object_get(root, "timing"), "batch_size");
    r->batch_size = bs ? (int)json_integer_value(bs) : -1;
    const char *code = json_string_value(json_object_get(json_object_get(root, "error"), "code"));
    snprintf(r->code, sizeof r->code, "%s", code ? code : "");
    json_decref(root);
}

static void reply_free(reply *r)
{
    free(r->out);
    free(r->w);
    memset(r, 0, sizeof *r);
}

static void post(const char *url, const req_case *c, reply *r)
{
    http_result h;
    memset(r, 0, sizeof *r);
    if (http_do("POST", url, c->body, c->len, NULL, &h) != 0) {
        r->transport_error = 1;
        http_result_free(&h);
        return;
    }
    reply_parse(r, &h);
    http_result_free(&h);
}

/* Largest |a - b| over outputs and weights; INFINITY if the shapes differ. */
static double reply_diff(const reply *a, const reply *b)
{
    if (a->n_out != b->n_out || a->n_w != b->n_w || a->n_out == 0) return INFINITY;
    double worst = 0;
    for (size_t i = 0; i < a->n_out; i++) worst = fmax(worst, fabs(a->out[i] - b->out[i]));
    for (size_t i = 0; i < a->n_w; i++) worst = fmax(worst, fabs(a->w[i] - b->w[i]));
    return worst;
}

/* ------------------------------------------------------------ concurrency */

typedef struct client_arg {
    const char *url;
    const req_case *c;
    reply *r;
    pthread_barrier_t *go;
} client_arg;

static void *client_main(void *p)
{
    client_arg *a = p;
    pthread_barrier_wait(a->go);
    post(a->url, a->c, a->r);
    return NULL;
}

/* Sends n requests at once, one thread each; replies[i] answers cases[i]. */
static void burst(const char *url, const req_case *cases, int n, reply *replies)
{
    pthread_t th[N_CLIENTS];
    client_arg args[N_CLIENTS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        args[i] = (client_arg){ url, &cases[i], &replies[i], &go };
        pthread_create(&th[i], NULL, client_main, &args[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
}

/* ------------------------------------------------------------ metrics */

/* Sum of the *_count samples of every metric whose name mentions batch_size
 * (the batch-size histogram), or -1 if /metrics cannot be read or has none. */
static double batch_hist_count(const attnd_proc *p)
{
    char url[128];
    snprintf(url, sizeof url, "%s/metrics", p->base_url);
    http_result h;
    if (http_do("GET", url, NULL, 0, NULL, &h) != 0 || h.status != 200 || h.body == NULL) {
        http_result_free(&h);
        return -1;
    }
    double sum = -1;
    char *save = NULL;
    for (char *line = strtok_r(h.body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        size_t name_len = strcspn(line, " {");
        if (line[0] == '#' || name_len < 6 || line[name_len] == '\0') continue;
        line[name_len] = '\0';
        int match = strstr(line, "batch_size") && strcmp(line + name_len - 6, "_count") == 0;
        const char *rest = line + name_len + 1, *space = strrchr(rest, ' ');
        if (match) sum = (sum < 0 ? 0 : sum) + strtod(space ? space + 1 : rest, NULL);
    }
    http_result_free(&h);
    return sum;
}

/* ------------------------------------------------------------ scenarios */

static req_case cases[N_CLIENTS];
static reply alone[N_CLIENTS];

static void start(attnd_proc *p, const char *const *args, char *url, size_t cap)
{
    int rc = attnd_proc_start(p, args);
    CHECK_INT_EQ(rc, 0);
    snprintf(url, cap, "%s/v1/models/demo/attention", p->base_url);
}

/* Batching on: answers alone first, then all at once. */
TEST(batching_on)
{
    const char *args[] = { "--workers", "2", "--max-batch-requests", "16",
                           "--max-batch-tokens", "4096", "--max-queue-delay-us", "20000",
                           "--max-queue", "256", NULL };
    attnd_proc p;
    char url[160];
    start(&p, args, url, sizeof url);

    for (int i = 0; i < N_CLIENTS; i++) {
        post(url, &cases[i], &alone[i]);
        CHECK_MSG(alone[i].status == 200, "case %d alone: status %ld", i, alone[i].status);
        CHECK_INT_EQ(alone[i].batch_size, 1);
    }
    double hist_before = batch_hist_count(&p);
    CHECK_MSG(hist_before >= 0, "no batch_size histogram in /metrics");

    reply got[N_CLIENTS];
    burst(url, cases, N_CLIENTS, got);
    int batched = 0, ok = 0;
    double worst = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        ok += got[i].status == 200;
        batched += got[i].batch_size > 1;
        CHECK(got[i].batch_size >= 1 && got[i].batch_size <= 16);
        worst = fmax(worst, reply_diff(&got[i], &alone[i]));
        reply_free(&got[i]);
    }
    CHECK_INT_EQ(ok, N_CLIENTS);
    CHECK_MSG(worst <= 1e-6, "max |concurrent - alone| = %.3g", worst);
    CHECK_MSG(batched > 0, "no response reports batch_size > 1");
    double hist_after = batch_hist_count(&p);
    CHECK_MSG(hist_after > hist_before, "batch_size histogram count %g -> %g", hist_before,
              hist_after);
    printf("batching on: %d/%d responses in batches > 1, max diff %.3g, histogram %g -> %g\n",
           batched, N_CLIENTS, worst, hist_before, hist_after);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* Batching off: every request its own batch, same answers. */
TEST(batching_off)
{
    const char *args[] = { "--workers", "2", "--max-batch-requests", "1",
                           "--max-queue-delay-us", "20000", "--max-queue", "256", NULL };
    attnd_proc p;
    char url[160];
    start(&p, args, url, sizeof url);
    reply got[N_CLIENTS];
    burst(url, cases, N_CLIENTS, got);
    int ones = 0;
    double worst = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        CHECK_INT_EQ(got[i].status, 200);
        ones += got[i].batch_size == 1;
        worst = fmax(worst, reply_diff(&got[i], &alone[i]));
        reply_free(&got[i]);
    }
    CHECK_INT_EQ(ones, N_CLIENTS);
    CHECK_MSG(worst <= 1e-6, "max |unbatched - alone| = %.3g", worst);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

typedef struct give_up_arg {
    const char *url;
    const req_case *c;
    CURLcode rc;
} give_up_arg;

/* A client that hangs up 50 ms into its request (it is still queued then). */
static void client_gives_up(give_up_arg *a)
{
    CURL *c = curl_easy_init();
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, a->url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, a->c->body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)a->c->len);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 50L);
    a->rc = curl_easy_perform(c);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
}

/* Replaces the opening '{' of a body with '{"timeout_ms":N,'. */
static req_case with_timeout(const req_case *c, int ms)
{
    sbuf b = { 0 };
    sb_printf(&b, "{\"timeout_ms\":%d,%s", ms, c->body + 1);
    return (req_case){ b.p, b.len };
}

/* A slow-forming batch (one worker, 300 ms collection delay, queue of 2):
 * timeout_ms 1 -> 504; a client that hangs up while queued harms nobody;
 * a burst over the queue bound -> some 503 with Retry-After, the rest 200. */
TEST(queue_limits)
{
    const char *args[] = { "--workers", "1", "--max-batch-requests", "64",
                           "--max-queue-delay-us", "300000", "--max-queue", "2", NULL };
    attnd_proc p;
    char url[160];
    start(&p, args, url, sizeof url);

    req_case quick = with_timeout(&cases[0], 1), patient = with_timeout(&cases[1], 20000);
    reply r;
    post(url, &quick, &r);
    CHECK_INT_EQ(r.status, 504);
    CHECK_STR_EQ(r.code, "timeout");
    reply_free(&r);
    post(url, &patient, &r);
    CHECK_INT_EQ(r.status, 200);
    CHECK(reply_diff(&r, &alone[1]) <= 1e-6);
    reply_free(&r);
    free(quick.body);
    free(patient.body);

    give_up_arg g = { url, &cases[2], CURLE_OK };
    client_gives_up(&g);
    CHECK_INT_EQ(g.rc, CURLE_OPERATION_TIMEDOUT);
    post(url, &cases[3], &r); /* queued behind (or batched with) the orphan */
    CHECK_INT_EQ(r.status, 200);
    CHECK(reply_diff(&r, &alone[3]) <= 1e-6);
    reply_free(&r);

    enum { BURST = 16 };
    reply got[BURST];
    burst(url, cases, BURST, got);
    int n200 = 0, n503 = 0;
    for (int i = 0; i < BURST; i++) {
        if (got[i].status == 200) {
            n200++;
            CHECK(reply_diff(&got[i], &alone[i]) <= 1e-6);
        } else if (got[i].status == 503) {
            n503++;
            CHECK_STR_EQ(got[i].code, "queue_full");
            CHECK_MSG(got[i].retry_after[0] != '\0', "503 without Retry-After");
        }
        reply_free(&got[i]);
    }
    CHECK_INT_EQ(n200 + n503, BURST);
    CHECK_MSG(n503 > 0 && n200 >= 2, "burst of %d: %d x 200, %d x 503", BURST, n200, n503);
    printf("queue of 2 under a burst of %d: %d x 200, %d x 503\n", BURST, n200, n503);

    post(url, &cases[4], &r); /* still healthy */
    CHECK_INT_EQ(r.status, 200);
    reply_free(&r);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    for (int i = 0; i < N_CLIENTS; i++) cases[i] = make_case(i, 24);
    RUN(batching_on);
    RUN(batching_off);
    RUN(queue_limits);
    for (int i = 0; i < N_CLIENTS; i++) {
        free(cases[i].body);
        reply_free(&alone[i]);
    }
    curl_global_cleanup();
    return check_summary();
}
