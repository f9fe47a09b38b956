/* test_jsonnum.c — the float32 printer against strtof and a naive oracle:
 * every printed float reads back to the same bits (via strtof, via
 * attnd_json_parse_float, and via strtod + attnd_json_double_to_float), is no
 * longer than %.9g, and has no more significant digits than the shortest %.Ng
 * that round-trips; the batch printer (AVX2 where the CPU has it) gives the
 * same texts joined by ','. The parser against strtof on many kinds of text (shortest,
 * %.9g, %.17g, random decimals, ties, range edges) and the JSON grammar; the
 * nest parser's layout and refusals; the double -> float range check.
 */
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "protocol/jsonnum.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint32_t rng32(void)
{
    /* xorshift64*: fixed seed, so a failure reproduces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Du) >> 32);
}

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* Significant digits in a printed number: digits after leading zeros, up to
 * the exponent, without trailing zeros of the fraction/integer part. */
static int sig_digits(const char *s)
{
    char d[64];
    int n = 0;
    for (; *s && *s != 'e' && *s != 'E'; s++)
        if (*s >= '0' && *s <= '9' && (n > 0 || *s != '0'))
            d[n++] = *s;
    while (n > 1 && d[n - 1] == '0')
        n--;
    return n;
}

/* The naive oracle: the fewest %.Ng digits that strtof back to v. */
static int oracle_digits(float v)
{
    char buf[64];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)v);
        if (to_bits(strtof(buf, NULL)) == to_bits(v))
            return sig_digits(buf);
    }
    return 99; /* unreachable for finite v: %.9g always round-trips */
}

/* The closest-digits oracle: with n the printed significant digits, glibc's
 * exact "%.{n-1}e" is the n-digit decimal closest to v (exact ties to even).
 * When it reads back to v, the printed text must be that decimal; when it
 * does not (the interval of a power of two is lopsided), any n-digit text
 * that reads back is right. */
static int closest_digits(float v, const char *printed, int n)
{
    char ref[64];
    snprintf(ref, sizeof ref, "%.*e", n - 1, (double)v);
    if (to_bits(strtof(ref, NULL)) != to_bits(v))
        return 1;
    return strtod(ref, NULL) == strtod(printed, NULL);
}

static int failures_reported = 0;

/* Checks one finite value; with_oracle also compares digit counts. */
static void check_one(float v, int with_oracle)
{
    char buf[ATTND_FLOAT_TEXT_MAX + 1];
    memset(buf, 'x', sizeof buf);
    int n = attnd_json_print_float(v, buf);
    int ok = n > 0 && n <= 15;
    if (ok) {
        buf[n] = '\0';
        float back = strtof(buf, NULL);
        float via_double = 0.0f;
        int dok = attnd_json_double_to_float(strtod(buf, NULL), &via_double);
        char ref[64];
        int ref_len = snprintf(ref, sizeof ref, "%.9g", (double)v);
        float fast = 0.0f;
        const char *fend = attnd_json_parse_float(buf, buf + n, &fast);
        ok = to_bits(back) == to_bits(v) && dok == 0 && fend == buf + n &&
             to_bits(fast) == to_bits(v) &&
             (to_bits(via_double) == to_bits(v) || (to_bits(v) & 0x7fffffffu) == 0x15ae43fdu) &&
             (n <= ref_len || (v == 0.0f && signbit(v)));
        if (ok && with_oracle)
            ok = sig_digits(buf) <= oracle_digits(v) && closest_digits(v, buf, sig_digits(buf));
    }
    check_count++;
    if (!ok) {
        check_failed++;
        if (failures_reported++ < 20)
            fprintf(stderr, "bits 0x%08x (%.9g): printed \"%s\" (len %d)\n", (unsigned)to_bits(v),
                    (double)v, n > 0 ? buf : "(error)", n);
    }
}

TEST(edges)
{
    const float edges[] = {0.0f, 1.0f, -1.0f, 0.1f, 0.2f, 0.3f, 1e-7f, 1e-5f, 1e-3f, 0.5f, 2.0f,
                           10.0f, 100.0f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f, 1e20f, 1e30f, 1e38f,
                           FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX, FLT_EPSILON, 16777216.0f,
                           16777217.0f, 123456789.0f, 3.14159265f, 1.0f / 3.0f, 2.0f / 3.0f,
                           from_bits(1), from_bits(0x80000001u), from_bits(0x007fffffu),
                           from_bits(0x00800001u), from_bits(0x7f7ffffeu)};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        check_one(edges[i], 1);
    for (int e = -149; e <= 127; e++) {
        check_one(ldexpf(1.0f, e), 1);
        check_one(-ldexpf(1.0f, e), 1);
    }
    for (int e = -45; e <= 38; e++) {
        char s[16];
        snprintf(s, sizeof s, "1e%d", e);
        check_one(strtof(s, NULL), 1);
    }
    /* 64 neighbours on each side of every power of two and of ten (the
     * lopsided intervals, the decimal exponent steps) and the subnormals'
     * first and last 4096. */
    for (int e = -149; e <= 127; e++)
        for (int d = -64; d <= 64; d++) {
            const uint32_t b = to_bits(ldexpf(1.0f, e)) + (uint32_t)d;
            if (((b >> 23) & 0xff) != 0xff && b < 0x80000000u)
                check_one(from_bits(b), 1);
        }
    for (int e = -45; e <= 38; e++) {
        char s[16];
        snprintf(s, sizeof s, "1e%d", e);
        for (int d = -64; d <= 64; d++) {
            const uint32_t b = to_bits(strtof(s, NULL)) + (uint32_t)d;
            if (((b >> 23) & 0xff) != 0xff && b < 0x80000000u)
                check_one(from_bits(b), 1);
        }
    }
    for (uint32_t b = 1; b <= 4096; b++) {
        check_one(from_bits(b), 1);
        check_one(from_bits(0x80000000u | (0x00800000u - b)), 1);
    }
}

/* Exact texts for values whose shortest form is known. */
TEST(exact_texts)
{
    static const struct {
        float v;
        const char *text;
    } cases[] = {
        {0.0f, "0"},         {1.0f, "1"},           {-1.0f, "-1"},       {0.1f, "0.1"},
        {1.5f, "1.5"},       {100.0f, "100"},       {1e10f, "1e10"},     {1e-7f, "1e-7"},
        {0.001f, "1e-3"}, {0.01f, "0.01"}, {1000.0f, "1e3"},   {1.25e-5f, "1.25e-5"}, {123456.7f, "123456.7"},
        {FLT_MAX, "3.4028235e38"}, {FLT_MIN, "1.1754944e-38"}, {16777216.0f, "16777216"},
    };
    char buf[ATTND_FLOAT_TEXT_MAX + 1];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = attnd_json_print_float(cases[i].v, buf);
        CHECK(n > 0);
        buf[n > 0 ? n : 0] = '\0';
        CHECK_STR_EQ(buf, cases[i].text);
    }
    int n = attnd_json_print_float(-0.0f, buf);
    CHECK_INT_EQ(n, 4);
    buf[4] = '\0';
    CHECK_STR_EQ(buf, "-0.0");
    CHECK(signbit(strtof(buf, NULL)));
    n = attnd_json_print_float(from_bits(1), buf);
    buf[n > 0 ? n : 0] = '\0';
    CHECK_STR_EQ(buf, "1e-45");
}

TEST(non_finite)
{
    char buf[ATTND_FLOAT_TEXT_MAX] = "untouched";
    CHECK_INT_EQ(attnd_json_print_float(NAN, buf), -1);
    CHECK_INT_EQ(attnd_json_print_float(INFINITY, buf), -1);
    CHECK_INT_EQ(attnd_json_print_float(-INFINITY, buf), -1);
    CHECK_STR_EQ(buf, "untouched");
}

TEST(double_to_float)
{
    float f = 7.0f;
    CHECK_INT_EQ(attnd_json_double_to_float(1e39, &f), -1);
    CHECK_INT_EQ(attnd_json_double_to_float(-1e39, &f), -1);
    CHECK_INT_EQ(attnd_json_double_to_float(NAN, &f), -1);
    CHECK_INT_EQ(attnd_json_double_to_float(INFINITY, &f), -1);
    CHECK_INT_EQ(attnd_json_double_to_float(0x1.ffffffp+127, &f), -1); /* ties to 2^128 */
    CHECK(f == 7.0f);
    CHECK_INT_EQ(attnd_json_double_to_float(0x1.fffffefffffffp+127, &f), 0);
    CHECK(f == FLT_MAX);
    CHECK_INT_EQ(attnd_json_double_to_float(-3.4028235e38, &f), 0);
    CHECK(f == -FLT_MAX);
    CHECK_INT_EQ(attnd_json_double_to_float(1e-50, &f), 0); /* underflows to 0: fine */
    CHECK(f == 0.0f);
    CHECK_INT_EQ(attnd_json_double_to_float(0.1, &f), 0);
    CHECK(f == 0.1f);
}

/* attnd_json_parse_float(text) must equal strtof(text), bit for bit. */
static void check_parse_text(const char *text)
{
    float want = strtof(text, NULL), got = 0.0f;
    size_t n = strlen(text);
    const char *end = attnd_json_parse_float(text, text + n, &got);
    int ok = isinf(want) ? end == NULL : end == text + n && to_bits(got) == to_bits(want);
    check_count++;
    if (!ok) {
        check_failed++;
        if (failures_reported++ < 20)
            fprintf(stderr, "parse \"%s\": got %s 0x%08x, strtof 0x%08x\n", text,
                    end ? "" : "(NULL)", (unsigned)to_bits(got), (unsigned)to_bits(want));
    }
}

TEST(parse_known)
{
    static const char *const texts[] = {
        "0", "-0", "-0.0", "0.0e10", "1", "-1", "0.1", "1.5e3", "1E3", "1e+3", "1e-3",
        "16777217", "16777219", "16777216.5", "33554435", "3.4028235e38", "3.40282357e38",
        "-3.4028235e38", "1.17549435e-38", "1.4e-45", "1.401298464324817e-45",
        "7.006492321624085e-46", "7.006492321624087e-46", "1e-46", "1e-400", "7.038531e-26",
        "-7.038531e-26", "0.30000001192092896", "0.12345678901234567890123", "123456789012345678",
        "1234567890123456789012345", "0.000000000000000000000000000000000000001",
        "4.7019774e-38", "9.8607613e-32", "1e22", "1e23", "5e-23", "8388608.5", "8388609.5",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        check_parse_text(texts[i]);
    float f = 0.0f;
    const char *t = "7.038531e-26";
    CHECK(attnd_json_parse_float(t, t + strlen(t), &f) && to_bits(f) == 0x15ae43fdu);
    t = "-0";
    CHECK(attnd_json_parse_float(t, t + 2, &f) && f == 0.0f && signbit(f));
    /* Beyond float32: refused. */
    static const char *const range[] = {"1e39", "-1e39", "3.4028236e38", "1e400",
                                        "340282356779733661637539395458142568448"};
    for (size_t i = 0; i < sizeof range / sizeof range[0]; i++)
        CHECK_MSG(attnd_json_parse_float(range[i], range[i] + strlen(range[i]), &f) == NULL,
                  "%s accepted", range[i]);
    /* Not JSON numbers. */
    static const char *const bad[] = {"", "-", "+1", ".5", "1.", "1e", "1e+", "--1", "NaN",
                                      "Infinity", "-Infinity", "e5", "-.5", "1.e5", "x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(attnd_json_parse_float(bad[i], bad[i] + strlen(bad[i]), &f) == NULL,
                  "\"%s\" accepted", bad[i]);
    /* The number ends where the grammar does; the caller checks what follows. */
    t = "01";
    CHECK(attnd_json_parse_float(t, t + 2, &f) == t + 1 && f == 0.0f);
    t = "0x10";
    CHECK(attnd_json_parse_float(t, t + 4, &f) == t + 1);
    t = "12,3";
    CHECK(attnd_json_parse_float(t, t + 4, &f) == t + 2 && f == 12.0f);
    /* end is respected: "123" cut to 2 bytes is 12. */
    t = "123";
    CHECK(attnd_json_parse_float(t, t + 2, &f) == t + 2 && f == 12.0f);
    t = "1.5e3";
    CHECK(attnd_json_parse_float(t, t + 4, &f) == NULL); /* "1.5e" */
}

/* The digit runs are read 8 bytes at a time: every prefix of texts with runs
 * around 8 digits, each cut at the end of an exactly sized heap block (the
 * sanitizer build catches a read past end), parses as strtof reads that
 * prefix, or is refused where the prefix is no number ("-", "12.", "1e"). */
TEST(parse_cut)
{
    static const char *const texts[] = {"-1234567.890123456", "12345678.12345678",
                                        "0.1234567", "0.12345678", "0.123456789",
                                        "123456789012345678", "-0.00000001234567e-3"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        const size_t n = strlen(texts[i]);
        for (size_t len = 0; len <= n; len++) {
            char *block = malloc(len ? len : 1);
            memcpy(block, texts[i], len);
            char prefix[32];
            memcpy(prefix, texts[i], len);
            prefix[len] = '\0';
            const char last = len ? prefix[len - 1] : '-';
            const int valid = last >= '0' && last <= '9';
            float f = 0.0f;
            const char *end = attnd_json_parse_float(block, block + len, &f);
            if (valid)
                CHECK_MSG(end == block + len && to_bits(f) == to_bits(strtof(prefix, NULL)),
                          "\"%s\" parsed wrong", prefix);
            else
                CHECK_MSG(end == NULL, "\"%s\" accepted", prefix);
            free(block);
        }
    }
    /* Every byte value after a digit run: only '0'..'9' continue the number
     * ('e' and 'E' start an exponent: 0.123e4567890 is beyond float32). */
    for (int c = 0; c < 256; c++) {
        char text[16] = "0.123";
        text[5] = (char)c;
        memcpy(text + 6, "4567890", 7);
        const int digit = c >= '0' && c <= '9';
        float f = 0.0f;
        const char *end = attnd_json_parse_float(text, text + 13, &f);
        if (c == 'e' || c == 'E') {
            CHECK(end == NULL);
            continue;
        }
        text[digit ? 13 : 5] = '\0';
        CHECK_MSG(end == text + (digit ? 13 : 5) && to_bits(f) == to_bits(strtof(text, NULL)),
                  "byte 0x%02x after \"0.123\"", c);
    }
}

/* Random texts of every shape against strtof. */
TEST_WITH(parse_random, int n)
{
    char buf[96];
    for (int i = 0; i < n; i++) {
        uint32_t b = rng32();
        if (((b >> 23) & 0xff) == 0xff)
            continue;
        float v = from_bits(b);
        snprintf(buf, sizeof buf, "%.9g", (double)v);
        check_parse_text(buf);
        snprintf(buf, sizeof buf, "%.17g", (double)v);
        check_parse_text(buf);
        snprintf(buf, sizeof buf, "%.*g", 1 + (int)(rng32() % 12), (double)v);
        check_parse_text(buf);
        /* A random decimal: [-]d[.ddd] or [-]0.000ddd, 1-24 digits, an exponent. */
        int nd = 1 + (int)(rng32() % 24), point = 1 + (int)(rng32() % (unsigned)nd);
        char *p = buf;
        if (rng32() & 1)
            *p++ = '-';
        if (rng32() % 4 == 0) {
            p += sprintf(p, "0.%0*d", (int)(rng32() % 5), 0);
            point = nd; /* no second point */
        }
        for (int k = 0; k < nd; k++) {
            if (k == point)
                *p++ = '.';
            *p++ = (char)(k == 0 ? '1' + rng32() % 9 : '0' + rng32() % 10);
        }
        sprintf(p, "e%d", (int)(rng32() % 101) - 50);
        check_parse_text(buf);
    }
}

/* Plain decimals without an exponent, the shape of most request bodies and of
 * the float-division fast path: 1-9 digits with 0-12 after the point (so both
 * sides of w < 2^24 and of 10 fraction digits), and the exact boundaries. */
TEST_WITH(parse_plain, int n)
{
    static const char *const edges[] = {
        "16777215", "16777216", "16777217", "1677721.5", "1677721.7", "0.16777217",
        "0.0000000001", "0.00000000001", "1.6777215", "-0.0000016777215", "-0", "0.0",
        "9999999", "0.1234567891", "4294967296.5"};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        check_parse_text(edges[i]);
    char buf[40];
    for (int i = 0; i < n; i++) {
        int nd = 1 + (int)(rng32() % 9), nf = (int)(rng32() % 13), k = 0;
        char *p = buf;
        if (rng32() & 1)
            *p++ = '-';
        int ni = nd > nf ? nd - nf : 1; /* integer digits; "0" when all are fraction */
        for (; k < ni; k++)
            *p++ = (char)(nd > nf && k == 0 ? '1' + rng32() % 9 : nd > nf ? '0' + rng32() % 10 : '0');
        if (nf) {
            *p++ = '.';
            for (int f = 0; f < nf; f++)
                *p++ = (char)('0' + rng32() % 10);
        }
        *p = 0;
        check_parse_text(buf);
    }
}

/* The numbers of a jansson array nest in document order, rounded to float
 * (attnd_json_double_to_float), with the depth of its leaves: 0, or -1 for
 * anything the nest parser must refuse (empty arrays, mixed depths, non-numbers,
 * values beyond float32). */
static int jansson_leaves(const json_t *j, int depth, float *out, size_t *n, size_t cap, int *leaf)
{
    if (json_is_array(j)) {
        if (json_array_size(j) == 0)
            return -1;
        for (size_t i = 0; i < json_array_size(j); i++)
            if (jansson_leaves(json_array_get(j, i), depth + 1, out, n, cap, leaf))
                return -1;
        return 0;
    }
    if (!json_is_number(j) || (*leaf && *leaf != depth) || *n == cap ||
        attnd_json_double_to_float(json_number_value(j), &out[*n]))
        return -1;
    *leaf = depth;
    (*n)++;
    return 0;
}

/* Random bodies of digits, signs, points, exponents, separators, brackets and
 * blanks, each in an exactly sized heap block: whatever prefix the nest parser
 * accepts, jansson reads as the same numbers at the same depth (the one
 * difference by design: "-0" keeps its sign here, jansson reads the integer 0). */
TEST_WITH(nest_vs_jansson, int n)
{
    static const char alpha[] = "0123456789012345678901234567890123456789.-eE+,,,[]] \t";
    int accepted = 0;
    for (int it = 0; it < n; it++) {
        const int len = 2 + (int)(rng32() % 60);
        char *body = malloc((size_t)len);
        body[0] = '[';
        for (int k = 1; k < len; k++)
            body[k] = k == 1 && (rng32() & 1) ? '[' : alpha[rng32() % (sizeof alpha - 1)];
        attnd_float_nest nest = {0};
        const char *end = attnd_json_parse_float_nest(body, body + len, &nest);
        if (end) {
            accepted++;
            json_error_t err;
            json_t *j = json_loadb(body, (size_t)(end - body), 0, &err);
            float want[64];
            size_t got = 0;
            int leaf = 0;
            int ok = j && jansson_leaves(j, 0, want, &got, 64, &leaf) == 0 &&
                     got == nest.n_values && leaf == nest.depth;
            for (size_t i = 0; ok && i < got; i++)
                ok = to_bits(want[i]) == to_bits(nest.values[i]) ||
                     (want[i] == 0.0f && nest.values[i] == 0.0f);
            CHECK_MSG(ok, "nest parser and jansson differ on %.*s", (int)(end - body), body);
            json_decref(j);
            attnd_float_nest_free(&nest);
        }
        free(body);
    }
    CHECK_MSG(accepted > n / 50, "only %d of %d random bodies accepted", accepted, n);
}

TEST(nest)
{
    attnd_float_nest n;
    memset(&n, 0, sizeof n);
    const char *t = " [[1, 2] ,\n[3,4.5,-0 ] ]x";
    const char *end = attnd_json_parse_float_nest(t + 1, t + strlen(t), &n);
    CHECK(end == t + strlen(t) - 1);
    CHECK_INT_EQ(n.depth, 2);
    CHECK_INT_EQ(n.count[0], 1);
    CHECK_INT_EQ(n.count[1], 2);
    if (end && n.depth == 2) {
        CHECK_INT_EQ(n.size[0][0], 2);
        CHECK_INT_EQ(n.size[1][0], 2);
        CHECK_INT_EQ(n.size[1][1], 3);
        CHECK_INT_EQ(n.start[0][0], 0);
        CHECK_INT_EQ(n.start[1][0], 0);
        CHECK_INT_EQ(n.start[1][1], 2);
        CHECK_INT_EQ(n.n_values, 5);
        CHECK(n.values[0] == 1.0f && n.values[3] == 4.5f && signbit(n.values[4]));
    }
    attnd_float_nest_free(&n);
    CHECK(n.values == NULL && n.depth == 0);

    /* Four levels, ragged: [[[[1],[2,3]]],[[[4]]]]. */
    t = "[[[[1],[2,3]]],[[[4]]]]";
    memset(&n, 0, sizeof n);
    end = attnd_json_parse_float_nest(t, t + strlen(t), &n);
    CHECK(end == t + strlen(t));
    CHECK_INT_EQ(n.depth, 4);
    CHECK_INT_EQ(n.count[3], 3);
    if (end && n.depth == 4) {
        CHECK_INT_EQ(n.start[3][2], 3);
        CHECK(n.values[3] == 4.0f);
    }
    attnd_float_nest_free(&n);

    static const char *const refused[] = {
        "[]", "[[1],[]]", "[[1],2]", "[1,[2]]", "[[[[[1]]]]]", "[1,true]", "[1,]", "[1 2]",
        "[1e39]", "[12345678901234567890]", "[[1,2]", "[1,\"2\"]", "[01]", "[1,null]",
        "[[1],[2]],", "{\"a\":1}", "[NaN]", "[1,2",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        memset(&n, 0, sizeof n);
        const char *r = attnd_json_parse_float_nest(refused[i], refused[i] + strlen(refused[i]),
                                                    &n);
        /* "[[1],[2]]," parses up to its ']' — the caller sees the ','. */
        if (strcmp(refused[i], "[[1],[2]],") == 0)
            CHECK(r == refused[i] + 9);
        else
            CHECK_MSG(r == NULL, "%s accepted", refused[i]);
        CHECK(r != NULL || (n.values == NULL && n.size[0] == NULL));
        attnd_float_nest_free(&n);
    }
    /* Short decimals followed by an exponent, a blank, ']' or another '.', each with
     * 32 bytes or more after it (the run loop's own paths): the values strtof gives. */
    t = "[0.5e3,-0.25E-1,1.5e+1,-0.0,0.125 ,-7.5,0.5,0.75]                                ";
    static const float want[] = {500.0f, -0.025f, 15.0f, -0.0f, 0.125f, -7.5f, 0.5f, 0.75f};
    memset(&n, 0, sizeof n);
    end = attnd_json_parse_float_nest(t, t + strlen(t), &n);
    CHECK(end == strchr(t, ']') + 1);
    CHECK(end && n.n_values == 8);
    for (size_t i = 0; end && i < 8; i++)
        CHECK_MSG(to_bits(n.values[i]) == to_bits(want[i]), "value %zu: %.9g", i, (double)n.values[i]);
    attnd_float_nest_free(&n);
    t = "[0.5.5,1]                                        ";
    memset(&n, 0, sizeof n);
    CHECK(attnd_json_parse_float_nest(t, t + strlen(t), &n) == NULL);
    attnd_float_nest_free(&n);
    memset(&n, 0, sizeof n);
    t = "[123456789012345678]"; /* 18 digits: fine */
    CHECK(attnd_json_parse_float_nest(t, t + strlen(t), &n) != NULL);
    CHECK(n.values && n.values[0] == 123456789012345678.0f);
    attnd_float_nest_free(&n);
}

/* Leaf numbers far enough from the end of the body for the short-decimal fast
 * path (32 bytes): each text as the first element of a long array gives the
 * float attnd_json_parse_float gives (bit for bit), or the nest is refused
 * when the text is not a JSON number; then random plain decimals in long
 * arrays, every element against attnd_json_parse_float. */
TEST_WITH(nest_long, int n)
{
    static const char *const texts[] = {
        "0.5", "-0.5", "-0.0", "0.0", "0.1234", "-0.9999", "1.5", "12.25", "1234567.1234567",
        "9999999.9999999", "1677721.5", "1677721.7", "16777.216", "0.1677721", "0.16777216",
        "12345678.5", "0.12345678", "0.1234567", "1.5e3", "1.5E-3", "-2.5e+1", "7", "-7",
        "0", "123456789012345678", "1e39", "0.00000001", "3.0000001"};
    static const char *const refused[] = {"01.5", "-.5", "1.", "-", ".5", "1.5.5", "--1.5",
                                          "1.5,", "00.5", "-01.25", "+1.5", "1.5x"};
    static const char tail[] = ",0.25,-0.75,0.125,0.5,0.25,0.75,0.5,0.25]";
    char body[256];
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        snprintf(body, sizeof body, "[%s%s", texts[i], tail);
        float want = 0.0f;
        const char *t_end = attnd_json_parse_float(texts[i], texts[i] + strlen(texts[i]), &want);
        attnd_float_nest nest = {0};
        const char *end = attnd_json_parse_float_nest(body, body + strlen(body), &nest);
        if (t_end == texts[i] + strlen(texts[i])) {
            CHECK_MSG(end == body + strlen(body) && nest.n_values == 9 &&
                          to_bits(nest.values[0]) == to_bits(want) && nest.values[2] == -0.75f,
                      "%s: nest %s, values[0] %a, want %a", body, end ? "accepted" : "refused",
                      nest.n_values ? nest.values[0] : 0.0f, want);
        } else {
            CHECK_MSG(end == NULL, "%s accepted", body); /* 1e39: beyond float32 */
        }
        attnd_float_nest_free(&nest);
    }
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(body, sizeof body, "[%s%s", refused[i], tail);
        attnd_float_nest nest = {0};
        CHECK_MSG(attnd_json_parse_float_nest(body, body + strlen(body), &nest) == NULL,
                  "%s accepted", body);
        attnd_float_nest_free(&nest);
        snprintf(body, sizeof body, "[0.5,%s%s", refused[i], tail); /* not the first */
        CHECK_MSG(attnd_json_parse_float_nest(body, body + strlen(body), &nest) == NULL,
                  "%s accepted", body);
        attnd_float_nest_free(&nest);
    }
    /* Blanks around the separators, on the fast path's side of the body too. */
    const char *blank = "[0.5 , -1.25,\t2.75 ,\n0.125,0.25,0.5,0.75,0.875,0.5,0.25,0.125]";
    attnd_float_nest nest = {0};
    CHECK(attnd_json_parse_float_nest(blank, blank + strlen(blank), &nest) == blank + strlen(blank));
    CHECK(nest.n_values == 11 && nest.values[1] == -1.25f && nest.values[2] == 2.75f &&
          nest.values[3] == 0.125f);
    attnd_float_nest_free(&nest);

    char *big = malloc(64 * 24 + 8), text[64][24];
    for (int it = 0; it < n; it++) {
        size_t len = 0;
        big[len++] = '[';
        for (int k = 0; k < 64; k++) {
            char *p = text[k];
            if (rng32() & 1)
                *p++ = '-';
            const int ni = 1 + (int)(rng32() % 9), nf = 1 + (int)(rng32() % 9);
            for (int d = 0; d < ni; d++)
                *p++ = (char)(d == 0 ? (ni == 1 ? '0' + rng32() % 10 : '1' + rng32() % 9)
                                     : '0' + rng32() % 10);
            *p++ = '.';
            for (int d = 0; d < nf; d++)
                *p++ = (char)('0' + rng32() % 10);
            *p = 0;
            len += (size_t)sprintf(big + len, "%s%s", k ? "," : "", text[k]);
        }
        big[len++] = ']';
        attnd_float_nest nn = {0};
        const char *end = attnd_json_parse_float_nest(big, big + len, &nn);
        int ok = end == big + len && nn.n_values == 64;
        for (int k = 0; ok && k < 64; k++) {
            float want = 0.0f;
            ok = attnd_json_parse_float(text[k], text[k] + strlen(text[k]), &want) != NULL &&
                 to_bits(want) == to_bits(nn.values[k]);
            CHECK_MSG(ok, "element %d (%s) of a long array: %a", k, text[k], nn.values[k]);
        }
        CHECK_MSG(end == big + len && nn.n_values == 64, "a long array of decimals refused");
        attnd_float_nest_free(&nn);
    }
    free(big);
}

/* Every biased exponent (so every table entry) with assorted mantissas, then
 * random bit patterns. */
TEST_WITH(random, int n_random)
{
    for (uint32_t e = 0; e < 255; e++) {
        const uint32_t fracs[] = {0, 1, 2, 0x7fffff, 0x400000, rng32() & 0x7fffff,
                                  rng32() & 0x7fffff};
        for (size_t i = 0; i < sizeof fracs / sizeof fracs[0]; i++)
            check_one(from_bits(e << 23 | fracs[i]), 1);
    }
    for (int i = 0; i < n_random; i++) {
        uint32_t b = rng32();
        if (((b >> 23) & 0xff) == 0xff)
            continue; /* NaN / infinity */
        check_one(from_bits(b), i < n_random / 10);
    }
}

/* A value for the batch test: random bits, attention-like outputs (the
 * batch printer's "0.0ddd" shuffle), or the edges (zeros, subnormals, powers of
 * two and ten, exponent notation). Never NaN or infinite. */
static float batch_value(void)
{
    const uint32_t r = rng32();
    switch (r % 6) {
    case 0: {
        const uint32_t b = rng32();
        return ((b >> 23) & 0xff) == 0xff ? 1.0f : from_bits(b);
    }
    case 1:
    case 2:
        return ((float)(rng32() >> 8) / 16777216.0f - 0.5f) * 0.4f;
    case 3:
        return ldexpf((r & 8) ? -1.0f : 1.0f, (int)(rng32() % 277) - 149);
    case 4:
        return from_bits(rng32() & 0x807fffffu); /* zero or subnormal */
    default: {
        char t[16];
        snprintf(t, sizeof t, "%se%d", (r & 8) ? "-1" : "1", (int)(rng32() % 84) - 45);
        return strtof(t, NULL);
    }
    }
}

/* attnd_json_print_floats against attnd_json_print_float joined by ',', for
 * arrays of 0..40 values (blocks of eight, mixed or all "0.0ddd", and tails),
 * in a buffer of exactly ATTND_FLOATS_TEXT_MAX(n) bytes; a NaN or infinity
 * anywhere gives -1. */
TEST_WITH(batch, int rounds)
{
    for (int round = 0; round < rounds; round++) {
        float x[40];
        const size_t n = rng32() % 41;
        for (size_t i = 0; i < n; i++) /* every third array all attention-like */
            x[i] = round % 3 ? batch_value() : ((float)(rng32() >> 8) / 16777216.0f - 0.5f) * 0.4f;
        char *got = malloc(ATTND_FLOATS_TEXT_MAX(n));
        char want[40 * (ATTND_FLOAT_TEXT_MAX + 1)];
        size_t want_len = 0;
        for (size_t i = 0; i < n; i++) {
            char one[ATTND_FLOAT_TEXT_MAX];
            const int w = attnd_json_print_float(x[i], one);
            memcpy(want + want_len, one, (size_t)w);
            want_len += (size_t)w;
            want[want_len++] = ',';
        }
        want_len -= n > 0;
        const ptrdiff_t len = attnd_json_print_floats(x, n, got);
        CHECK_MSG(len == (ptrdiff_t)want_len && memcmp(got, want, want_len) == 0,
                  "round %d: %zu values, %td bytes, want %zu: \"%.*s\"", round, n, len, want_len,
                  (int)want_len, want);
        if (n > 0) {
            x[rng32() % n] = (round & 1) ? NAN : -INFINITY;
            CHECK_INT_EQ((int)attnd_json_print_floats(x, n, got), -1);
        }
        free(got);
    }
}

int main(int argc, char **argv)
{
    int n_random = argc > 1 ? atoi(argv[1]) : 2000000;
    RUN(exact_texts);
    RUN(non_finite);
    RUN(double_to_float);
    RUN(edges);
    RUN_WITH(random, n_random);
    RUN_WITH(batch, n_random / 40);
    RUN(parse_known);
    RUN(parse_cut);
    RUN_WITH(parse_random, n_random / 4);
    RUN_WITH(parse_plain, n_random / 4);
    RUN(nest);
    RUN_WITH(nest_vs_jansson, n_random / 4);
    RUN_WITH(nest_long, n_random / 200);
    return check_summary();
}
