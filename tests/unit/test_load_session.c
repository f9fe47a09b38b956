/* test_load_session.c — attnd-load --sessions without a server: error kinds from curl codes,
 * statuses and attnd error bodies; the named-count table; a level's tallies (exact
 * time-per-token percentiles, tokens/s, server timing means, prefill p50/max, errors by phase
 * with the first one kept printable); the table, JSON, CSV and SVG written from them. */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "load_args.h"
#include "load_sess_report.h"
#include "load_session.h"
#include "load_svg.h"

static void kind(char *buf, int cc, long status, const char *body, int bad)
{
    load_sess_kind(buf, 64, cc, status, body, body ? strlen(body) : 0, bad);
}

TEST(kinds)
{
    char k[64];
    kind(k, CURLE_OPERATION_TIMEDOUT, 0, NULL, 0);
    CHECK_STR_EQ(k, "timeout");
    kind(k, CURLE_COULDNT_CONNECT, 0, NULL, 0);
    CHECK_STR_EQ(k, "transport");
    kind(k, CURLE_RECV_ERROR, 200, "{}", 1); /* curl's failure first */
    CHECK_STR_EQ(k, "transport");
    kind(k, 0, 200, "{\"output\":[]}", 1);
    CHECK_STR_EQ(k, "bad_response");
    kind(k, 0, 409, "{\"error\":{\"code\":\"session_busy\",\"message\":\"x\",\"field\":\"\"}}", 0);
    CHECK_STR_EQ(k, "http_409_session_busy");
    kind(k, 0, 503, "{\"error\":{\"code\":\"kv_cache_full\",\"message\":\"x\"}}", 0);
    CHECK_STR_EQ(k, "http_503_kv_cache_full");
    kind(k, 0, 410, "{\"error\":{\"code\":\"session_expired\"}}", 0);
    CHECK_STR_EQ(k, "http_410_session_expired");
    const char *no_code[] = {NULL, "", "not json", "{\"error\":\"queue full\"}", /* v2 style */
                             "{\"error\":{\"code\":\"Bad Code\"}}", "{\"error\":{\"code\":7}}",
                             "{\"error\":{\"code\":\"\"}}",
                             "{\"error\":{\"code\":\"a_very_long_code_name_of_more_than_32\"}}"};
    for (size_t i = 0; i < sizeof no_code / sizeof *no_code; i++) {
        kind(k, 0, 500, no_code[i], 0);
        CHECK_MSG(!strcmp(k, "http_500"), "case %zu: %s", i, k);
    }
}

TEST(counts)
{
    load_counts c = {0};
    load_counts_add(&c, "http_409_session_busy", 1);
    load_counts_add(&c, "timeout", 2);
    load_counts_add(&c, "http_409_session_busy", 3);
    CHECK_INT_EQ(c.n, 2);
    CHECK_INT_EQ(load_counts_get(&c, "http_409_session_busy"), 4);
    CHECK_INT_EQ(load_counts_get(&c, "timeout"), 2);
    CHECK_INT_EQ(load_counts_get(&c, "transport"), 0);
    CHECK_STR_EQ(c.v[0].name, "http_409_session_busy"); /* first-seen order */
    for (int i = 0; i < 2 * LOAD_COUNTS_MAX; i++) {
        char name[16];
        snprintf(name, sizeof name, "k%d", i);
        load_counts_add(&c, name, 1);
    }
    CHECK_INT_EQ(c.n, LOAD_COUNTS_MAX);
    CHECK_INT_EQ(c.other, 2 * LOAD_COUNTS_MAX - (LOAD_COUNTS_MAX - 2));
}

/* 100 steps of 1..100 ms (shuffled) over 2 s by 4 streams; 3 prefills; errors. */
static void fill(load_sess_stats *s)
{
    memset(s, 0, sizeof *s);
    s->sessions = 4;
    s->prefix = 64;
    s->steps = 25;
    s->created = s->deleted = 4;
    s->decoding_streams = 4;
    s->calls = 120;
    for (int i = 0; i < 100; i++) {
        int v = (i * 37) % 100 + 1; /* a permutation of 1..100 */
        load_timing t = {1, 400.0, 1600.0, i % 2 ? 4 : 2};
        load_sess_add_step(s, v, 0.02 * i, i < 50 ? &t : NULL);
    }
    load_sess_add_prefill(s, 30);
    load_sess_add_prefill(s, 10);
    load_sess_add_prefill(s, 20);
    s->prefill_tokens = 192;
    s->prefill_total_s = 0.5;
    s->decode_elapsed_s = 2.0;
    load_sess_add_error(s, LOAD_PHASE_DECODE, "http_409_session_busy",
                        "HTTP 409 session_busy: caf\xc3\xa9\n");
    load_sess_add_error(s, LOAD_PHASE_CREATE, "timeout", NULL);
    load_sess_add_retry(s, "http_503_kv_cache_full");
    s->failed = 1;
    s->steps_lost = 20;
    load_sess_stats_finish(s);
}

TEST(tally)
{
    load_sess_stats s;
    fill(&s);
    CHECK_INT_EQ(s.decode_tokens, 100);
    CHECK_INT_EQ(s.n_steps, 100);
    CHECK_NEAR(s.tpot_p50_ms, 50, 0);
    CHECK_NEAR(s.tpot_p90_ms, 90, 0);
    CHECK_NEAR(s.tpot_p99_ms, 99, 0);
    CHECK_NEAR(s.tpot_max_ms, 100, 0);
    CHECK_NEAR(s.tpot_min_ms, 1, 0);
    CHECK_NEAR(s.tpot_mean_ms, 50.5, 1e-12);
    CHECK_NEAR(s.step_ms[0], 1, 0);             /* completion order kept for the chart */
    CHECK_NEAR(s.step_ms[1], 38, 0);
    CHECK_NEAR(s.decode_tokens_per_s, 50, 1e-12); /* 100 / 2 s */
    CHECK_NEAR(s.stream_tokens_per_s, 12.5, 1e-12);
    CHECK_INT_EQ(s.n_timing, 50);
    CHECK_NEAR(s.queue_ms, 0.4, 1e-12);
    CHECK_NEAR(s.compute_ms, 1.6, 1e-12);
    CHECK_NEAR(s.mean_batch, 3, 1e-12);
    CHECK_INT_EQ(s.prefilled, 3);
    CHECK_NEAR(s.prefill_p50_ms, 20, 0);
    CHECK_NEAR(s.prefill_max_ms, 30, 0);
    CHECK_NEAR(s.prefill_mean_ms, 20, 1e-12);
    CHECK_NEAR(s.prefill_tokens_per_s, 384, 1e-9);
    CHECK_INT_EQ(s.errors, 2);
    CHECK_INT_EQ(s.errors_by_phase[LOAD_PHASE_DECODE], 1);
    CHECK_INT_EQ(s.errors_by_phase[LOAD_PHASE_CREATE], 1);
    CHECK_INT_EQ(load_counts_get(&s.errors_by_kind, "timeout"), 1);
    CHECK_INT_EQ(s.retries, 1);
    CHECK_STR_EQ(s.first_error, "decode: HTTP 409 session_busy: caf???"); /* ASCII only */
    CHECK_STR_EQ(load_phase_name(LOAD_PHASE_DELETE), "delete");
    CHECK_STR_EQ(load_phase_name(LOAD_PHASE_COUNT), "?");
    load_sess_stats_free(&s);
    CHECK(!s.step_ms && !s.tpot_sorted && !s.prefill_ms);

    load_sess_stats empty = {0};
    load_sess_stats_finish(&empty);
    CHECK(empty.tpot_p99_ms == 0 && empty.decode_tokens_per_s == 0 && empty.prefill_p50_ms == 0);
    load_sess_stats_free(&empty);
}

static char *print_to_string(void (*fn)(FILE *, const load_sess_stats *, size_t, const char *),
                             const load_sess_stats *lv, size_t n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fn(f, lv, n, "model demo & <co>");
    fclose(f);
    return buf;
}

static void table(FILE *f, const load_sess_stats *lv, size_t n, const char *sub)
{
    (void)sub;
    load_sess_report_table(f, lv, n);
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++) n++;
    return n;
}

TEST(outputs)
{
    load_sess_stats lv[2];
    fill(&lv[0]);
    memset(&lv[1], 0, sizeof lv[1]); /* a level where nothing decoded */
    lv[1].sessions = 64;
    load_sess_stats_finish(&lv[1]);

    char *t = print_to_string(table, lv, 2);
    CHECK(t && strstr(t, "tokens/s") && strstr(t, "tpot p50") && strstr(t, "prefill50"));
    CHECK(t && strstr(t, "errors at sessions 4: create=1 decode=1 |"));
    CHECK(t && strstr(t, "http_409_session_busy=1") && strstr(t, "timeout=1"));
    CHECK(t && strstr(t, "retries at sessions 4: http_503_kv_cache_full=1"));
    CHECK(t && strstr(t, "20 steps not sent (failed streams)"));
    CHECK(t && !strstr(t, "errors at sessions 64"));
    free(t);

    char *svg = print_to_string(load_svg_sessions_print, lv, 2);
    CHECK(svg && !strncmp(svg, "<?xml", 5) && strstr(svg, "<svg"));
    CHECK(svg && count(svg, "<polyline") == 4); /* tokens/s and time per token per level */
    CHECK(svg && count(svg, "<text") == count(svg, "</text>") && count(svg, "<text") > 10);
    CHECK(svg && strstr(svg, "model demo &amp; &lt;co&gt;"));
    CHECK(svg && strstr(svg, "4 sessions: 50.0 tokens/s"));
    free(svg);
    svg = print_to_string(load_svg_sessions_print, &lv[1], 1);
    CHECK(svg && strstr(svg, "no successful decode step") && strstr(svg, "</svg>"));
    free(svg);

    char dir[] = "/tmp/test_load_session.XXXXXX", path[64], csv[64], err[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/s.json", dir);
    snprintf(csv, sizeof csv, "%s/s.csv", dir);
    load_opts o;
    char *argv[] = {"attnd-load", "--model", "demo", "--sessions", "4,64", "--prefix", "64",
                    "--steps", "25", NULL};
    CHECK_INT_EQ(load_opts_parse(&o, 9, argv, err, sizeof err), 0);
    load_model m = {64, 64, 64, 64, 8, 0};
    CHECK_INT_EQ(load_sess_report_json(path, &o, &m, lv, 2, err, sizeof err), 0);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je), *params = json_object_get(root, "params");
    json_t *l0 = json_array_get(json_object_get(root, "levels"), 0);
    CHECK_MSG(root != NULL, "%s", je.text);
    CHECK_STR_EQ(json_string_value(json_object_get(params, "mode")), "sessions");
    CHECK(json_is_null(json_object_get(params, "duration_s")));
    CHECK_INT_EQ(json_integer_value(json_object_get(params, "prefix")), 64);
    CHECK_INT_EQ(json_integer_value(json_object_get(l0, "decode_tokens")), 100);
    CHECK_NEAR(json_number_value(json_object_get(l0, "tpot_p99_ms")), 99, 0);
    CHECK_INT_EQ(json_integer_value(json_object_get(l0, "requests")), 120);
    CHECK_INT_EQ(json_integer_value(json_object_get(l0, "ok")), 118);
    CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(l0, "errors_by_phase"), "decode")), 1);
    CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(l0, "errors_by_kind"), "timeout")), 1);
    CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(l0, "retries_by_kind"), "http_503_kv_cache_full")), 1);
    CHECK_STR_EQ(json_string_value(json_object_get(l0, "first_error")), "decode: HTTP 409 session_busy: caf???");
    CHECK(json_is_null(json_object_get(json_array_get(json_object_get(root, "levels"), 1), "first_error")));
    json_t *total = json_object_get(root, "total");
    CHECK_INT_EQ(json_integer_value(json_object_get(total, "decode_tokens")), 100);
    CHECK_INT_EQ(json_integer_value(json_object_get(total, "errors")), 2);
    json_decref(root);

    CHECK_INT_EQ(load_sess_report_csv(csv, lv, 2, err, sizeof err), 0);
    FILE *f = fopen(csv, "r");
    char line[2048] = "";
    CHECK(f && fgets(line, sizeof line, f));
    CHECK(!strncmp(line, "sessions,prefix,steps,", 22));
    CHECK(strstr(line, ",err_decode,err_delete,err_http_409_session_busy,err_timeout\n") != NULL);
    int rows = 0;
    while (f && fgets(line, sizeof line, f)) rows++;
    if (f) fclose(f);
    CHECK_INT_EQ(rows, 2);
    CHECK(load_sess_report_json("/nonexistent/x.json", &o, &m, lv, 2, err, sizeof err) == -1 &&
          strstr(err, "--json"));
    unlink(path);
    unlink(csv);
    rmdir(dir);
    load_opts_free(&o);
    load_sess_stats_free(&lv[0]);
    load_sess_stats_free(&lv[1]);
}

int main(void)
{
    RUN(kinds);
    RUN(counts);
    RUN(tally);
    RUN(outputs);
    return check_summary();
}
