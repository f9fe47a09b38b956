/* load_check.c — response classification for attnd-load: a strict one-pass JSON scanner that
 * compares the nesting of `output`/`weights` against the expected shape as it goes (no tree,
 * no allocation) and picks up timing.{queue_us,compute_us,batch_size}; the same for KServe v2
 * infer responses (outputs[], parameters, binary outputs after the JSON header). */
#include "load_check.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NESTING 64

const char *load_kind_name(load_kind k)
{
    static const char *const names[LOAD_KIND_COUNT] = {
        "ok", "transport", "timeout", "http_4xx", "http_503", "http_504", "http_5xx",
        "http_other", "bad_json", "bad_shape",
    };
    return (unsigned)k < LOAD_KIND_COUNT ? names[k] : "?";
}

load_kind load_kind_from_curl(int curl_code)
{
    if (curl_code == CURLE_OK) return LOAD_OK;
    return curl_code == CURLE_OPERATION_TIMEDOUT ? LOAD_ERR_TIMEOUT : LOAD_ERR_TRANSPORT;
}

load_kind load_kind_from_status(long status)
{
    if (status == 200) return LOAD_OK;
    if (status == 503) return LOAD_ERR_HTTP_503;
    if (status == 504) return LOAD_ERR_HTTP_504;
    if (status >= 500 && status <= 599) return LOAD_ERR_HTTP_5XX;
    if (status >= 400 && status <= 499) return LOAD_ERR_HTTP_4XX;
    return LOAD_ERR_HTTP_OTHER;
}

int load_shape_push(load_shape *s, int32_t depth, int32_t len)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        int32_t *v = realloc(s->v, cap * 2 * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[2 * s->n] = depth;
    s->v[2 * s->n + 1] = len;
    s->n++;
    return 0;
}

int load_shape_push_matrix(load_shape *s, int32_t d, int32_t rows, int32_t cols)
{
    if (load_shape_push(s, d, rows)) return -1;
    for (int32_t r = 0; r < rows; r++)
        if (load_shape_push(s, d + 1, cols)) return -1;
    return 0;
}

void load_shape_free(load_shape *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* ---- scanner ---------------------------------------------------------------------------- */

/* Streaming comparison of the arrays met against an expected shape. */
typedef struct shape_cmp {
    const load_shape *want;
    size_t next; /* index of the next expected pair */
    int bad;
} shape_cmp;

typedef struct scan {
    const char *p, *end;
    int nesting;
    int bad_json, bad_shape;
} scan;

enum { V_NUMBER, V_ARRAY, V_OTHER };

static int scan_value(scan *sc, shape_cmp *cmp, int32_t adepth, int *vkind);

static void skip_ws(scan *sc)
{
    while (sc->p < sc->end &&
           (*sc->p == ' ' || *sc->p == '\n' || *sc->p == '\r' || *sc->p == '\t'))
        sc->p++;
}

static int fail(scan *sc)
{
    sc->bad_json = 1;
    return -1;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int is_hex(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* String at sc->p (on the opening quote); *s and *n get the raw bytes between the quotes. */
static int scan_string(scan *sc, const char **s, size_t *n)
{
    const char *p = ++sc->p;
    while (p < sc->end && *p != '"') {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20) return fail(sc);
        if (c != '\\') { p++; continue; }
        if (++p >= sc->end) return fail(sc);
        if (*p == 'u') {
            if (sc->end - p < 5) return fail(sc);
            for (int i = 1; i <= 4; i++)
                if (!is_hex(p[i])) return fail(sc);
            p += 5;
        } else if (*p && strchr("\"\\/bfnrt", *p)) {
            p++;
        } else {
            return fail(sc);
        }
    }
    if (p >= sc->end) return fail(sc);
    if (s) *s = sc->p;
    if (n) *n = (size_t)(p - sc->p);
    sc->p = p + 1;
    return 0;
}

/* -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int scan_number(scan *sc)
{
    const char *p = sc->p, *e = sc->end;
    if (p < e && *p == '-') p++;
    if (p >= e || !is_digit(*p)) return fail(sc);
    if (*p == '0') p++;
    else while (p < e && is_digit(*p)) p++;
    if (p < e && *p == '.') {
        if (++p >= e || !is_digit(*p)) return fail(sc);
        while (p < e && is_digit(*p)) p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || !is_digit(*p)) return fail(sc);
        while (p < e && is_digit(*p)) p++;
    }
    sc->p = p;
    return 0;
}

static int scan_literal(scan *sc, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(sc->end - sc->p) < n || memcmp(sc->p, lit, n) != 0) return fail(sc);
    sc->p += n;
    return 0;
}

static int enter(scan *sc)
{
    if (++sc->nesting > MAX_NESTING) return fail(sc);
    sc->p++; /* past '[' or '{' */
    skip_ws(sc);
    return 0;
}

/* At `close` (']' or '}'): consumes it, leaves the container, returns 1; else 0. */
static int leave_at(scan *sc, char close)
{
    if (sc->p >= sc->end || *sc->p != close) return 0;
    sc->p++;
    sc->nesting--;
    return 1;
}

/* After a container's element: 0 past a ',' (another element follows), 1 past the
 * closing `close`, -1 (bad JSON) at anything else. */
static int next_or_leave(scan *sc, char close)
{
    skip_ws(sc);
    if (leave_at(sc, close)) return 1;
    if (sc->p >= sc->end || *sc->p != ',') return fail(sc);
    sc->p++;
    skip_ws(sc);
    return 0;
}

/* Array at sc->p. With cmp, checks this array's (adepth, length) against the next expected pair
 * and requires its elements to be all numbers or all arrays. */
static int scan_array(scan *sc, shape_cmp *cmp, int32_t adepth)
{
    size_t slot = 0;
    int32_t count = 0;
    int saw_num = 0, saw_arr = 0, saw_other = 0;
    if (cmp) {
        if (cmp->next >= cmp->want->n || cmp->want->v[2 * cmp->next] != adepth) cmp->bad = 1;
        slot = cmp->next++;
    }
    if (enter(sc)) return -1;
    for (int r = leave_at(sc, ']'); !r;) {
        int k;
        if (scan_value(sc, cmp, adepth + 1, &k)) return -1;
        count++;
        saw_num |= k == V_NUMBER;
        saw_arr |= k == V_ARRAY;
        saw_other |= k == V_OTHER;
        if ((r = next_or_leave(sc, ']')) < 0) return -1;
    }
    if (cmp && (saw_other || (saw_num && saw_arr) ||
                (slot < cmp->want->n && cmp->want->v[2 * slot + 1] != count)))
        cmp->bad = 1;
    return 0;
}

/* Calls on_member(sc, key, keylen, ctx) positioned at each member's value; it must consume it. */
typedef int (*member_fn)(scan *sc, const char *key, size_t klen, void *ctx);

static int scan_object(scan *sc, member_fn on_member, void *ctx)
{
    if (enter(sc)) return -1;
    for (int r = leave_at(sc, '}'); !r;) {
        const char *key;
        size_t klen;
        if (sc->p >= sc->end || *sc->p != '"' || scan_string(sc, &key, &klen)) return fail(sc);
        skip_ws(sc);
        if (sc->p >= sc->end || *sc->p != ':') return fail(sc);
        sc->p++;
        skip_ws(sc);
        if (on_member(sc, key, klen, ctx)) return -1;
        if ((r = next_or_leave(sc, '}')) < 0) return -1;
    }
    return 0;
}

static int any_member(scan *sc, const char *key, size_t klen, void *ctx)
{
    (void)key, (void)klen, (void)ctx;
    return scan_value(sc, NULL, 0, NULL);
}

static int scan_value(scan *sc, shape_cmp *cmp, int32_t adepth, int *vkind)
{
    int k = V_OTHER, rc;
    if (sc->p >= sc->end) return fail(sc);
    switch (*sc->p) {
    case '[': k = V_ARRAY; rc = scan_array(sc, cmp, adepth); break;
    case '{': rc = scan_object(sc, any_member, NULL); break;
    case '"': rc = scan_string(sc, NULL, NULL); break;
    case 't': rc = scan_literal(sc, "true"); break;
    case 'f': rc = scan_literal(sc, "false"); break;
    case 'n': rc = scan_literal(sc, "null"); break;
    default: k = V_NUMBER; rc = scan_number(sc); break;
    }
    if (vkind) *vkind = k;
    return rc;
}

static int key_is(const char *key, size_t klen, const char *name)
{
    return klen == strlen(name) && memcmp(key, name, klen) == 0;
}

static int timing_member(scan *sc, const char *key, size_t klen, void *ctx)
{
    load_timing *t = ctx;
    double *dst = key_is(key, klen, "queue_us")     ? &t->queue_us
                  : key_is(key, klen, "compute_us") ? &t->compute_us
                  : key_is(key, klen, "batch_size") ? &t->batch_size
                                                    : NULL;
    const char *start = sc->p;
    int k;
    if (scan_value(sc, NULL, 0, &k)) return -1;
    if (dst && k == V_NUMBER) {
        char buf[64];
        size_t n = (size_t)(sc->p - start);
        if (n >= sizeof buf) n = sizeof buf - 1;
        memcpy(buf, start, n);
        buf[n] = 0;
        *dst = strtod(buf, NULL);
    }
    return 0;
}

/* State for the top-level response object. */
typedef struct top_ctx {
    const load_expect *want;
    load_timing *timing;
    int seen_output, seen_weights, id_ok;
    int seen_session, session_bad; /* session appends: "session" met; its members wrong */
    int session_id_ok, session_len_ok, session_cached_ok;
} top_ctx;

static int scan_int(scan *sc, int64_t *v, int *ok);

/* One member of an append's "session": {"id", "length", "cached"}. */
static int session_member(scan *sc, const char *key, size_t klen, void *ctx)
{
    top_ctx *t = ctx;
    const load_expect *w = t->want;
    if (key_is(key, klen, "id")) {
        const char *s;
        size_t n;
        if (sc->p >= sc->end || *sc->p != '"') {
            t->session_bad = 1;
            return scan_value(sc, NULL, 0, NULL);
        }
        if (scan_string(sc, &s, &n)) return -1;
        t->session_id_ok = n == strlen(w->session_id) && memcmp(s, w->session_id, n) == 0;
        return 0;
    }
    int is_len = key_is(key, klen, "length"), is_cached = key_is(key, klen, "cached");
    if (!is_len && !is_cached) return scan_value(sc, NULL, 0, NULL);
    int64_t v = -1;
    int ok = 1;
    if (scan_int(sc, &v, &ok)) return -1;
    if (!ok) t->session_bad = 1;
    else if (is_len) t->session_len_ok = v == w->session_length;
    else t->session_cached_ok = v >= 0 && v <= w->session_length &&
                                (!w->session_full || v == w->session_length);
    return 0;
}

static int shape_member(scan *sc, const load_shape *want, int *seen)
{
    shape_cmp cmp = {want, 0, 0};
    int k;
    if (scan_value(sc, &cmp, 0, &k)) return -1;
    if (*seen || k != V_ARRAY || cmp.bad || cmp.next != want->n) sc->bad_shape = 1;
    *seen = 1;
    return 0;
}

static int top_member(scan *sc, const char *key, size_t klen, void *ctx)
{
    top_ctx *t = ctx;
    if (key_is(key, klen, "output")) return shape_member(sc, t->want->output, &t->seen_output);
    if (key_is(key, klen, "weights")) {
        if (t->want->weights) return shape_member(sc, t->want->weights, &t->seen_weights);
        t->seen_weights = 1; /* not asked for: a protocol violation */
        return scan_value(sc, NULL, 0, NULL);
    }
    if (key_is(key, klen, "timing") && sc->p < sc->end && *sc->p == '{') {
        t->timing->has = 1;
        return scan_object(sc, timing_member, t->timing);
    }
    if (t->want->session_id && key_is(key, klen, "session")) {
        if (t->seen_session++ || sc->p >= sc->end || *sc->p != '{') {
            t->session_bad = 1;
            return scan_value(sc, NULL, 0, NULL);
        }
        return scan_object(sc, session_member, t);
    }
    if (key_is(key, klen, "id") && sc->p < sc->end && *sc->p == '"') {
        const char *s;
        size_t n;
        if (scan_string(sc, &s, &n)) return -1;
        const char *id = t->want->id;
        t->id_ok = id && n == strlen(id) && memcmp(s, id, n) == 0;
        return 0;
    }
    return scan_value(sc, NULL, 0, NULL);
}

load_kind load_check_response(long status, const char *body, size_t len,
                              const load_expect *want, load_timing *timing)
{
    load_kind k = load_kind_from_status(status);
    memset(timing, 0, sizeof *timing);
    if (k != LOAD_OK) return k;

    scan sc = {body, body + len, 0, 0, 0};
    top_ctx t = {.want = want, .timing = timing};
    skip_ws(&sc);
    if (!body || sc.p >= sc.end || *sc.p != '{' || scan_object(&sc, top_member, &t)) k = LOAD_ERR_BAD_JSON;
    if (k == LOAD_OK) {
        skip_ws(&sc);
        if (sc.p != sc.end) k = LOAD_ERR_BAD_JSON;
    }
    if (k == LOAD_OK) {
        int want_id = want->id && want->id[0];
        if (sc.bad_shape || !t.seen_output || t.seen_weights != (want->weights != NULL) ||
            (want_id && !t.id_ok))
            k = LOAD_ERR_BAD_SHAPE;
        if (want->session_id && (!t.seen_session || t.session_bad || !t.session_id_ok ||
                                 !t.session_len_ok || !t.session_cached_ok))
            k = LOAD_ERR_BAD_SHAPE;
    }
    if (k != LOAD_OK) memset(timing, 0, sizeof *timing);
    return k;
}

/* ---- KServe v2 infer responses --------------------------------------------------------------- */

enum { OUT_OUTPUT, OUT_WEIGHTS, OUT_OTHER };

/* One entry of "outputs" as scanned; checked against the expectation when the object ends. */
typedef struct v2_output {
    int name;                   /* OUT_*                                            */
    int fp32;                   /* datatype is "FP32"                               */
    int64_t dim[4];
    int rank;                   /* 5 = more than 4 dimensions; -1 = no/bad shape    */
    int has_data, data_bad;     /* data present; not a flat array of count numbers  */
    int64_t count;              /* prod(shape), when the shape came before "data"   */
    long long binary_size;      /* parameters.binary_data_size, -1 when absent      */
    const char *data_start;     /* data seen before shape: rescanned at the end     */
} v2_output;

typedef struct v2_ctx {
    const load_expect_v2 *want;
    load_timing *timing;
    int seen[2], outputs_seen, id_ok, bad;
    unsigned long long binary_total;
} v2_ctx;

/* A JSON integer at sc->p into *v (non-integers and huge values are *ok = 0). */
static int scan_int(scan *sc, int64_t *v, int *ok)
{
    const char *start = sc->p;
    int k;
    if (scan_value(sc, NULL, 0, &k)) return -1;
    char buf[32];
    size_t n = (size_t)(sc->p - start);
    if (k != V_NUMBER || n >= sizeof buf || memchr(start, '.', n) || memchr(start, 'e', n) ||
        memchr(start, 'E', n)) {
        *ok = 0;
        return 0;
    }
    memcpy(buf, start, n);
    buf[n] = 0;
    *v = strtoll(buf, NULL, 10);
    return 0;
}

/* "shape": [d0, ...] of positive integers. */
static int scan_dims(scan *sc, v2_output *o)
{
    if (sc->p >= sc->end || *sc->p != '[') {
        o->rank = -1;
        return scan_value(sc, NULL, 0, NULL);
    }
    if (enter(sc)) return -1;
    o->rank = 0;
    int ok = 1;
    for (int r = leave_at(sc, ']'); !r;) {
        int64_t v = 0;
        if (scan_int(sc, &v, &ok)) return -1;
        if (v < 1) ok = 0;
        if (o->rank < 4) o->dim[o->rank] = v;
        if (o->rank < 5) o->rank++;
        if ((r = next_or_leave(sc, ']')) < 0) return -1;
    }
    if (!ok || o->rank == 0) o->rank = -1;
    return 0;
}

/* "data": must be a flat array of exactly count numbers (count < 0: not known yet). */
static int scan_data(scan *sc, v2_output *o, int64_t count)
{
    int32_t pair[2] = {0, count >= 0 && count <= INT32_MAX ? (int32_t)count : -1};
    load_shape one = {pair, 1, 1};
    shape_cmp cmp = {&one, 0, 0};
    int k;
    if (scan_value(sc, &cmp, 0, &k)) return -1;
    o->data_bad = k != V_ARRAY || cmp.bad || cmp.next != 1 || pair[1] < 0;
    return 0;
}

static int64_t dims_count(const v2_output *o)
{
    int64_t n = 1;
    for (int i = 0; i < o->rank && o->rank <= 4; i++) {
        if (o->dim[i] > INT32_MAX || n > INT64_MAX / 4 / o->dim[i]) return -1;
        n *= o->dim[i];
    }
    return o->rank > 0 && o->rank <= 4 ? n : -1;
}

static int binary_member(scan *sc, const char *key, size_t klen, void *ctx)
{
    v2_output *o = ctx;
    if (!key_is(key, klen, "binary_data_size")) return scan_value(sc, NULL, 0, NULL);
    int64_t v = -1;
    int ok = 1;
    if (scan_int(sc, &v, &ok)) return -1;
    o->binary_size = ok && v >= 0 ? v : -2; /* -2: present but not a size */
    return 0;
}

static int output_member(scan *sc, const char *key, size_t klen, void *ctx)
{
    v2_output *o = ctx;
    const char *s;
    size_t n;
    if ((key_is(key, klen, "name") || key_is(key, klen, "datatype")) && sc->p < sc->end &&
        *sc->p == '"') {
        if (scan_string(sc, &s, &n)) return -1;
        if (key_is(key, klen, "datatype")) o->fp32 = key_is(s, n, "FP32");
        else o->name = key_is(s, n, "output") ? OUT_OUTPUT : key_is(s, n, "attn_weights") ? OUT_WEIGHTS : OUT_OTHER;
        return 0;
    }
    if (key_is(key, klen, "shape")) return scan_dims(sc, o);
    if (key_is(key, klen, "data")) {
        o->has_data = 1;
        o->count = dims_count(o);
        if (o->count < 0) o->data_start = sc->p; /* shape not seen yet: check again later */
        return scan_data(sc, o, o->count);
    }
    if (key_is(key, klen, "parameters") && sc->p < sc->end && *sc->p == '{')
        return scan_object(sc, binary_member, o);
    return scan_value(sc, NULL, 0, NULL);
}

/* Checks one finished "outputs" entry against the expectation. */
static void check_output(v2_ctx *c, v2_output *o, const char *end)
{
    const load_expect_v2 *w = c->want;
    int64_t want_dim[3] = {w->b, w->t, o->name == OUT_WEIGHTS ? w->s : w->e_out};
    int ok = o->name != OUT_OTHER && o->fp32 && o->rank == 3 && !c->seen[o->name] &&
             (o->name == OUT_OUTPUT || w->weights);
    for (int i = 0; ok && i < 3; i++) ok = o->dim[i] == want_dim[i];
    if (ok && o->data_start) { /* "data" came before "shape": scan it again, now knowing the count */
        scan again = {o->data_start, end, 0, 0, 0};
        ok = scan_data(&again, o, dims_count(o)) == 0;
    }
    int64_t bytes = ok ? dims_count(o) * 4 : 0;
    if (ok && w->binary)
        ok = !o->has_data && o->binary_size == bytes;
    else if (ok)
        ok = o->has_data && !o->data_bad && o->binary_size == -1;
    if (ok && w->binary) c->binary_total += (unsigned long long)bytes;
    if (!ok) c->bad = 1;
    if (o->name != OUT_OTHER) c->seen[o->name] = 1;
}

static int scan_outputs(scan *sc, v2_ctx *c)
{
    if (c->outputs_seen++ || sc->p >= sc->end || *sc->p != '[') {
        c->bad = 1;
        return scan_value(sc, NULL, 0, NULL);
    }
    if (enter(sc)) return -1;
    for (int r = leave_at(sc, ']'); !r;) {
        v2_output o = {.binary_size = -1, .count = -1, .rank = -1, .name = OUT_OTHER};
        if (sc->p < sc->end && *sc->p == '{') {
            if (scan_object(sc, output_member, &o)) return -1;
            check_output(c, &o, sc->end);
        } else {
            c->bad = 1;
            if (scan_value(sc, NULL, 0, NULL)) return -1;
        }
        if ((r = next_or_leave(sc, ']')) < 0) return -1;
    }
    return 0;
}

static int v2_top_member(scan *sc, const char *key, size_t klen, void *ctx)
{
    v2_ctx *c = ctx;
    if (key_is(key, klen, "outputs")) return scan_outputs(sc, c);
    if (key_is(key, klen, "parameters") && sc->p < sc->end && *sc->p == '{') {
        c->timing->has = 1;
        return scan_object(sc, timing_member, c->timing);
    }
    if (key_is(key, klen, "id") && sc->p < sc->end && *sc->p == '"') {
        const char *s;
        size_t n;
        if (scan_string(sc, &s, &n)) return -1;
        c->id_ok = c->want->id && n == strlen(c->want->id) && memcmp(s, c->want->id, n) == 0;
        return 0;
    }
    return scan_value(sc, NULL, 0, NULL);
}

load_kind load_check_response_v2(long status, const char *body, size_t len, long long header_len,
                                 const load_expect_v2 *want, load_timing *timing)
{
    load_kind k = load_kind_from_status(status);
    memset(timing, 0, sizeof *timing);
    if (k != LOAD_OK) return k;
    if (!body || (header_len >= 0 && (unsigned long long)header_len > len)) return LOAD_ERR_BAD_JSON;
    size_t json_len = header_len >= 0 ? (size_t)header_len : len;
    scan sc = {body, body + json_len, 0, 0, 0};
    v2_ctx c = {.want = want, .timing = timing};
    skip_ws(&sc);
    if (sc.p >= sc.end || *sc.p != '{' || scan_object(&sc, v2_top_member, &c)) k = LOAD_ERR_BAD_JSON;
    if (k == LOAD_OK) {
        skip_ws(&sc);
        if (sc.p != sc.end) k = LOAD_ERR_BAD_JSON;
    }
    if (k == LOAD_OK) {
        int want_id = want->id && want->id[0];
        if (c.bad || !c.seen[OUT_OUTPUT] || c.seen[OUT_WEIGHTS] != (want->weights != 0) ||
            (want_id && !c.id_ok) || c.binary_total != len - json_len)
            k = LOAD_ERR_BAD_SHAPE;
    }
    if (k != LOAD_OK) memset(timing, 0, sizeof *timing);
    return k;
}
