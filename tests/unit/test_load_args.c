/* test_load_args.c — attnd-load's option parser: sweep syntax, ranges, durations, defaults,
 * --protocol v2 / --binary, --sessions and the options it refuses, and bad input rejected with
 * a message instead of being guessed at. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "load_args.h"

static int sweep(const char *s, int integer, double *out, size_t max)
{
    double *v = NULL;
    size_t n = 0;
    char err[256];
    if (load_parse_sweep(s, integer, &v, &n, err, sizeof err)) return -1;
    for (size_t i = 0; i < n && i < max; i++) out[i] = v[i];
    free(v);
    return (int)n;
}

TEST(sweeps)
{
    double v[64];
    CHECK_INT_EQ(sweep("1,8,64", 1, v, 64), 3);
    CHECK(v[0] == 1 && v[1] == 8 && v[2] == 64);
    CHECK_INT_EQ(sweep("1:64:x2", 1, v, 64), 7);
    CHECK(v[0] == 1 && v[1] == 2 && v[5] == 32 && v[6] == 64);
    CHECK_INT_EQ(sweep("1:100:x4", 1, v, 64), 4); /* 1 4 16 64: stops below the end */
    CHECK(v[3] == 64);
    CHECK_INT_EQ(sweep("10:40:+10", 1, v, 64), 4);
    CHECK(v[0] == 10 && v[3] == 40);
    CHECK_INT_EQ(sweep("1:4:x2,16", 1, v, 64), 4);
    CHECK(v[3] == 16);
    CHECK_INT_EQ(sweep("7", 1, v, 64), 1);
    CHECK(v[0] == 7);
    CHECK_INT_EQ(sweep("12.5,100", 0, v, 64), 2); /* rates may be fractional */
    CHECK(v[0] == 12.5);

    const char *bad[] = {"", ",", "1,,8", "1,8,", "0", "-4", "abc", "1:64", "1:64:2", "1:64:x1",
                         "1:64:x0", "64:1:x2", "1:64:+0", "1:64:y2", "3.5", "1e7", "8 ", "1:x:x2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(sweep(bad[i], 1, v, 64) == -1, "'%s' accepted", bad[i]);
    CHECK_INT_EQ(sweep("1:1000000:+1", 1, v, 64), -1); /* too many levels */
}

TEST(ranges_durations)
{
    int lo, hi;
    char err[256];
    double s;
    CHECK(load_parse_range("32", 1 << 20, &lo, &hi, err, sizeof err) == 0 && lo == 32 && hi == 32);
    CHECK(load_parse_range("16:128", 1 << 20, &lo, &hi, err, sizeof err) == 0 && lo == 16 && hi == 128);
    CHECK(load_parse_range("128:16", 1 << 20, &lo, &hi, err, sizeof err) == -1);
    CHECK(load_parse_range("0", 1 << 20, &lo, &hi, err, sizeof err) == -1);
    CHECK(load_parse_range("16:", 1 << 20, &lo, &hi, err, sizeof err) == -1);
    CHECK(load_parse_range("x", 1 << 20, &lo, &hi, err, sizeof err) == -1);
    CHECK(load_parse_duration("5s", &s, err, sizeof err) == 0 && s == 5);
    CHECK(load_parse_duration("500ms", &s, err, sizeof err) == 0 && s == 0.5);
    CHECK(load_parse_duration("2m", &s, err, sizeof err) == 0 && s == 120);
    CHECK(load_parse_duration("1.5", &s, err, sizeof err) == 0 && s == 1.5);
    CHECK(load_parse_duration("0", &s, err, sizeof err) == 0 && s == 0);
    CHECK(load_parse_duration("5h", &s, err, sizeof err) == -1);
    CHECK(load_parse_duration("-1s", &s, err, sizeof err) == -1);
    CHECK(load_parse_duration("s", &s, err, sizeof err) == -1);
}

/* Parses a NULL-terminated argument list; returns load_opts_parse's result. */
static int parse(load_opts *o, const char *const *args, char *err, size_t el)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)"attnd-load";
    for (; *args; args++) argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    return load_opts_parse(o, argc, argv, err, el);
}

TEST(command_lines)
{
    load_opts o;
    char err[256] = "";
    const char *good[] = {"--url", "http://127.0.0.1:9000/", "--model", "demo", "--seq-len", "16:64",
                          "--concurrency", "1:64:x2", "--duration", "4s", "--warmup", "0",
                          "--cross", "--key-len", "100", "--need-weights", "--causal", "--window", "8",
                          "--key-padding", "0.25", "--batch", "4", "--seed", "42", "--json", "r.json",
                          "--max-error-rate", "0", NULL};
    CHECK_INT_EQ(parse(&o, good, err, sizeof err), 0);
    CHECK_STR_EQ(o.model, "demo");
    CHECK(o.seq_min == 16 && o.seq_max == 64);
    CHECK_INT_EQ(o.n_levels, 7);
    CHECK(!o.is_rate && o.levels[6] == 64);
    CHECK(o.duration_s == 4 && o.warmup_s == 0);
    CHECK(o.cross && o.key_min == 100 && o.key_max == 100 && o.need_weights && o.causal);
    CHECK(o.window == 8 && o.key_padding == 0.25 && o.batch == 4 && o.seed == 42);
    CHECK(o.max_error_rate == 0 && !o.embed);
    CHECK_STR_EQ(o.json_path, "r.json");
    load_opts_free(&o);

    const char *defaults[] = {NULL};
    CHECK_INT_EQ(parse(&o, defaults, err, sizeof err), 0);
    CHECK(o.n_levels == 1 && o.levels[0] == 1 && !o.is_rate);
    CHECK(o.duration_s == 5 && o.warmup_s == 1 && o.max_error_rate == 0.01 && o.pool == 64);
    CHECK_STR_EQ(o.url, "http://127.0.0.1:8080");
    load_opts_free(&o);

    const char *rate[] = {"--rate", "100,200.5", "--requests", "50", NULL};
    CHECK_INT_EQ(parse(&o, rate, err, sizeof err), 0);
    CHECK(o.is_rate && o.n_levels == 2 && o.levels[1] == 200.5 && o.requests == 50);
    load_opts_free(&o);

    const char *const bad[][6] = {
        {"--concurrency", "1:64", NULL},
        {"--concurrency", "0", NULL},
        {"--concurrency", "100000", NULL},     /* above the connection cap */
        {"--concurrency", "1", "--rate", "10", NULL},
        {"--seq-len", "0", NULL},
        {"--seq-len", "64:16", NULL},
        {"--key-len", "8", NULL},              /* needs --cross */
        {"--key-padding", "1", NULL},
        {"--batch", "0", NULL},
        {"--embed", "sixty", NULL},
        {"--duration", "0", NULL},
        {"--duration", "fast", NULL},
        {"--max-error-rate", "2", NULL},
        {"--url", "ftp://x", NULL},
        {"--bogus", NULL},
        {"--model", NULL},                     /* missing value */
        {"stray", NULL},
        {"--request-file", "x.json", "--cross", NULL},
        {"--seq-len-dist", "/nonexistent/lengths.txt", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        int rc = parse(&o, bad[i], err, sizeof err);
        CHECK_MSG(rc == -1 && err[0], "'%s %s' accepted", bad[i][0], bad[i][1] ? bad[i][1] : "");
        load_opts_free(&o);
    }
}

TEST(seq_len_dist)
{
    char path[] = "/tmp/test_load_args.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("16\n# a comment\n\n32\r\n64\n", f);
    fclose(f);
    load_opts o;
    char err[256];
    const char *args[] = {"--seq-len-dist", path, NULL};
    CHECK_INT_EQ(parse(&o, args, err, sizeof err), 0);
    CHECK_INT_EQ(o.seq_dist_n, 3);
    CHECK(o.seq_dist_n == 3 && o.seq_dist[0] == 16 && o.seq_dist[1] == 32 && o.seq_dist[2] == 64);
    load_opts_free(&o);

    f = fopen(path, "w");
    fputs("16\nsixteen\n", f);
    fclose(f);
    err[0] = 0;
    CHECK_INT_EQ(parse(&o, args, err, sizeof err), -1);
    CHECK(strstr(err, ":2:") != NULL); /* names the line */
    load_opts_free(&o);
    unlink(path);
}

/* --protocol v2 / --binary: accepted combinations and the usage errors. */
TEST(protocol)
{
    load_opts o;
    char err[256] = "";
    const char *defaults[] = {NULL};
    CHECK_INT_EQ(parse(&o, defaults, err, sizeof err), 0);
    CHECK(o.protocol == 1 && !o.binary);
    load_opts_free(&o);

    /* v2 with a ragged length range is fine: each request draws one T for its whole batch */
    const char *v2[] = {"--model", "demo", "--protocol", "v2", "--binary", "--seq-len", "16:128",
                        "--batch", "8", "--cross", "--key-len", "4:9", "--need-weights",
                        "--causal", "--window", "4", "--key-padding", "0.5", NULL};
    CHECK_INT_EQ(parse(&o, v2, err, sizeof err), 0);
    CHECK(o.protocol == 2 && o.binary && o.seq_min == 16 && o.seq_max == 128 && o.batch == 8);
    CHECK(o.cross && o.key_min == 4 && o.key_max == 9 && o.need_weights && o.causal);
    load_opts_free(&o);

    const char *v1[] = {"--protocol", "v1", NULL};
    CHECK_INT_EQ(parse(&o, v1, err, sizeof err), 0);
    CHECK(o.protocol == 1 && !o.binary);
    load_opts_free(&o);

    const char *const bad[][7] = {
        {"--binary", NULL},                                      /* needs --protocol v2 */
        {"--binary", "--model", "demo", "--protocol", "v1", NULL},
        {"--protocol", "v3", "--model", "demo", NULL},
        {"--protocol", "2", "--model", "demo", NULL},
        {"--protocol", "v2", NULL},                              /* the v2 path needs a model */
        {"--protocol", "v2", "--model", "demo", "--request-file", "x.json", NULL},
    };
    const char *want[] = {"--binary", "--binary", "--protocol", "--protocol", "--model",
                          "--request-file"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        int rc = parse(&o, bad[i], err, sizeof err);
        CHECK_MSG(rc == -1 && strstr(err, want[i]), "case %zu accepted or unclear: '%s'", i, err);
        load_opts_free(&o);
    }
}

/* --sessions N --prefix P --steps K: its defaults, its options, and every option of the other
 * modes it refuses, each named in the message. */
TEST(sessions)
{
    load_opts o;
    char err[256] = "";
    const char *full[] = {"--url", "http://127.0.0.1:9000", "--model", "demo", "--sessions", "8",
                          "--prefix", "64", "--steps", "20", "--prefill-chunk", "16", "--window",
                          "32", "--max-retries", "5", "--duration", "3s", "--embed", "64",
                          "--seed", "7", "--pool", "8", "--timeout", "2s", "--json", "s.json",
                          "--csv", "s.csv", "--svg", "s.svg", "--quiet", "--max-error-rate", "0",
                          "--protocol", "v1", NULL};
    CHECK_INT_EQ(parse(&o, full, err, sizeof err), 0);
    CHECK(o.sessions && !o.is_rate && o.n_levels == 1 && o.levels[0] == 8);
    CHECK(o.prefix == 64 && o.steps == 20 && o.prefill_chunk == 16 && o.window == 32);
    CHECK(o.max_retries == 5 && o.duration_s == 3 && o.embed == 64 && o.seed == 7);
    CHECK(o.pool == 8 && o.timeout_s == 2 && o.max_error_rate == 0 && o.quiet);
    CHECK_STR_EQ(o.json_path, "s.json");
    load_opts_free(&o);

    /* defaults: prefix 128, steps 32, prefill all at once, 3 retries, decode not capped */
    const char *dflt[] = {"--model", "demo", "--sessions", "1,4:16:x2", NULL};
    CHECK_INT_EQ(parse(&o, dflt, err, sizeof err), 0);
    CHECK(o.sessions && o.n_levels == 4 && o.levels[0] == 1 && o.levels[3] == 16);
    CHECK(o.prefix == 128 && o.steps == 32 && o.prefill_chunk == 0 && o.max_retries == 3);
    CHECK(o.duration_s == 0 && o.window == 0);
    load_opts_free(&o);

    /* prefill only, decode only */
    const char *prefill_only[] = {"--model", "demo", "--sessions", "2", "--steps", "0", NULL};
    CHECK_INT_EQ(parse(&o, prefill_only, err, sizeof err), 0);
    CHECK(o.steps == 0 && o.prefix == 128);
    load_opts_free(&o);
    const char *decode_only[] = {"--model", "demo", "--sessions", "2", "--prefix", "0",
                                 "--max-retries", "0", NULL};
    CHECK_INT_EQ(parse(&o, decode_only, err, sizeof err), 0);
    CHECK(o.prefix == 0 && o.steps == 32 && o.max_retries == 0);
    load_opts_free(&o);

    /* the decode mix: --interleave K, --prefill-every D --prefill-rows R (R defaults to --prefix) */
    const char *mix[] = {"--model", "demo", "--sessions", "8", "--interleave", "4",
                         "--prefill-every", "500ms", "--prefill-rows", "2048", NULL};
    CHECK_INT_EQ(parse(&o, mix, err, sizeof err), 0);
    CHECK(o.interleave == 4 && o.prefill_every_s == 0.5 && o.prefill_rows == 2048);
    load_opts_free(&o);
    const char *mix_dflt[] = {"--model", "demo", "--sessions", "8", "--prefix", "64",
                              "--prefill-every", "2s", NULL};
    CHECK_INT_EQ(parse(&o, mix_dflt, err, sizeof err), 0);
    CHECK(o.interleave == 1 && o.prefill_every_s == 2 && o.prefill_rows == 64);
    load_opts_free(&o);
    CHECK_INT_EQ(parse(&o, dflt, err, sizeof err), 0);
    CHECK(o.interleave == 1 && o.prefill_every_s == 0);
    load_opts_free(&o);

    /* the other modes are untouched: their duration default stays 5 s */
    const char *plain[] = {"--model", "demo", NULL};
    CHECK_INT_EQ(parse(&o, plain, err, sizeof err), 0);
    CHECK(!o.sessions && o.duration_s == 5);
    load_opts_free(&o);

#define S "--model", "demo", "--sessions", "8"
    const char *const bad[][10] = {
        {S, "--rate", "100", NULL},
        {"--rate", "100", S, NULL},
        {S, "--concurrency", "4", NULL},
        {S, "--batch", "4", NULL},
        {S, "--cross", NULL},
        {S, "--key-len", "8", NULL},
        {S, "--protocol", "v2", NULL},
        {"--model", "demo", "--binary", NULL},              /* binary: v2, or session appends */
        {S, "--seq-len", "16", NULL},
        {S, "--seq-len-dist", "/dev/null", NULL},
        {S, "--need-weights", NULL},
        {S, "--causal", NULL},
        {S, "--key-padding", "0.5", NULL},
        {S, "--request-file", "x.json", NULL},
        {S, "--requests", "10", NULL},
        {S, "--warmup", "1s", NULL},
        {S, "--max-inflight", "8", NULL},
        {"--sessions", "8", NULL},                          /* the session path names the model */
        {S, "--prefix", "0", "--steps", "0", NULL},         /* nothing to send */
        {S, "--duration", "0", NULL},
        {S, "--prefix", "-1", NULL},
        {S, "--steps", "many", NULL},
        {S, "--prefill-chunk", "0", NULL},
        {S, "--max-retries", "101", NULL},
        {"--model", "demo", "--sessions", "0", NULL},
        {"--model", "demo", "--sessions", "2.5", NULL},
        {"--model", "demo", "--sessions", "100000", NULL},
        {"--model", "demo", "--sessions", NULL},            /* missing value */
        {"--model", "demo", "--prefix", "64", NULL},        /* session options need --sessions */
        {"--model", "demo", "--steps", "8", NULL},
        {"--model", "demo", "--prefill-chunk", "8", NULL},
        {"--model", "demo", "--max-retries", "1", NULL},
        {S, "--interleave", "0", NULL},
        {S, "--prefill-every", "0", NULL},
        {S, "--prefill-every", "soon", NULL},
        {S, "--prefill-rows", "64", NULL},                  /* without --prefill-every */
        {S, "--prefill-every", "1s", "--steps", "0", NULL}, /* nothing decodes meanwhile */
        {S, "--prefill-every", "1s", "--prefix", "0", NULL}, /* no rows to prefill */
        {S, "--prefill-rows", "0", "--prefill-every", "1s", NULL},
        {"--model", "demo", "--interleave", "2", NULL},
        {"--model", "demo", "--prefill-every", "1s", NULL},
    };
#undef S
    const char *want[] = {
        "--rate", "--sessions", "--concurrency", "--batch", "--cross", "--key-len", "--protocol v2",
        "--binary", "--seq-len", "--seq-len-dist", "--need-weights", "--causal", "--key-padding",
        "--request-file", "--requests", "--warmup", "--max-inflight", "--model", "--steps 0",
        "--duration", "--prefix", "--steps", "--prefill-chunk", "--max-retries", "--sessions",
        "--sessions", "--sessions", "--sessions", "--prefix", "--steps", "--prefill-chunk",
        "--max-retries", "--interleave", "--prefill-every", "soon", "--prefill-rows needs --prefill-every",
        "--steps > 0", "rows to prefill", "--prefill-rows", "--interleave needs --sessions",
        "--prefill-every needs --sessions",
    };
    _Static_assert(sizeof bad / sizeof *bad == sizeof want / sizeof *want, "one message per case");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        int rc = parse(&o, bad[i], err, sizeof err);
        CHECK_MSG(rc == -1 && strstr(err, want[i]), "case %zu (%s %s) accepted or unclear: '%s'", i,
                  bad[i][4] ? bad[i][4] : bad[i][0], bad[i][5] ? bad[i][5] : "", err);
        load_opts_free(&o);
    }
    /* the refusals say why and point at --sessions */
    const char *rate[] = {"--model", "demo", "--sessions", "8", "--rate", "10", NULL};
    CHECK_INT_EQ(parse(&o, rate, err, sizeof err), -1);
    CHECK_MSG(strstr(err, "does not combine with --sessions"), "'%s'", err);
    load_opts_free(&o);
    const char *prefix[] = {"--model", "demo", "--prefix", "64", NULL};
    CHECK_INT_EQ(parse(&o, prefix, err, sizeof err), -1);
    CHECK_STR_EQ(err, "--prefix needs --sessions");
    load_opts_free(&o);
}

int main(void)
{
    RUN(sessions);
    RUN(protocol);
    RUN(sweeps);
    RUN(ranges_durations);
    RUN(command_lines);
    RUN(seq_len_dist);
    return check_summary();
}
