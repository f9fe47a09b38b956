/* test_examples.c — sends every example in proto/examples/index.json to a real attnd on the
 * demo model and checks the documented answer: status, then the body against the example
 * response (numbers within the index's tolerance; "illustrative" keys such as timing only by
 * JSON type, plus an entry's own illustrative_keys such as a v2 error's message; keys listed
 * as absent must not appear). /v1 and KServe v2 examples alike. Then sends every 200 example at once from
 * parallel clients, so they are batched together, and checks the same answers again.
 * Expected responses come from PyTorch (proto/examples/make_examples.py). All of it twice:
 * with the default flags, and with every body and answer on a codec thread.
 * Env: ATTND_BIN (daemon), ATTND_EXAMPLES_DIR (default proto/examples).
 */
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "daemon.h"

typedef struct cmp_state {
    double tol;
    const json_t *illustrative; /* array of key names compared by type only */
    const json_t *entry_illustrative; /* the example's own additions (may be NULL) */
    int mismatches;
    char first[512];            /* the first mismatch, for the message      */
    double max_diff;            /* largest |expected - actual| over numbers */
} cmp_state;

typedef struct example {
    const char *name, *method, *path, *content_type, *resp_ctype, *allow;
    char *request;       /* file contents or NULL; owned */
    size_t request_len;
    long status;
    json_t *expected;    /* parsed response file or NULL; owned */
    const json_t *absent;
    const json_t *illustrative; /* the entry's illustrative_keys, or NULL; borrowed */
} example;

/* Returns the malloc'd contents of dir/name (NUL-terminated) and its length, or NULL. */
static char *read_file(const char *dir, const char *name, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0) goto fail;
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) goto fail;
    buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) goto fail;
    buf[n] = '\0';
    *len = (size_t)n;
    fclose(f);
    return buf;
fail:
    free(buf);
    fclose(f);
    return NULL;
}

/* snprintf that may truncate (diagnostic text only). */
static void fmt(char *dst, size_t size, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
static void fmt(char *dst, size_t size, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    vsnprintf(dst, size, format, ap);
    va_end(ap);
}

static void mismatch(cmp_state *st, const char *path, const char *what, const char *detail) {
    if (st->mismatches++ == 0) fmt(st->first, sizeof st->first, "%s: %s %s", path, what, detail);
}

static int in_list(const json_t *list, const char *key) {
    size_t i;
    const json_t *k;
    json_array_foreach(list, i, k) {
        if (json_is_string(k) && strcmp(json_string_value(k), key) == 0) return 1;
    }
    return 0;
}

/* Global illustrative_keys, plus the example's own (e.g. a v2 error's "error" message). */
static int is_illustrative(const cmp_state *st, const char *key) {
    return in_list(st->illustrative, key) || in_list(st->entry_illustrative, key);
}

static const char *type_name(const json_t *v) {
    static const char *const names[] = {"object", "array",  "string", "integer",
                                        "real",   "true",   "false",  "null"};
    return v ? names[json_typeof(v)] : "absent";
}

/* Compares actual against expected (see the file comment); path names the position. */
static void compare(const json_t *exp, const json_t *act, const char *path, cmp_state *st) {
    char sub[512];
    if (!act) { mismatch(st, path, "missing", ""); return; }
    switch (json_typeof(exp)) {
    case JSON_OBJECT: {
        const char *key;
        const json_t *ev;
        if (!json_is_object(act)) { mismatch(st, path, "expected an object, got", type_name(act)); return; }
        json_object_foreach((json_t *)exp, key, ev) {
            fmt(sub, sizeof sub, "%s.%s", path, key);
            const json_t *av = json_object_get(act, key);
            if (is_illustrative(st, key)) {
                if (!av || json_typeof(av) != json_typeof(ev))
                    mismatch(st, sub, "expected type", type_name(ev));
            } else {
                compare(ev, av, sub, st);
            }
        }
        return;
    }
    case JSON_ARRAY: {
        size_t i;
        const json_t *ev;
        if (!json_is_array(act) || json_array_size(act) != json_array_size(exp)) {
            fmt(sub, sizeof sub, "%zu elements, got %s of %zu", json_array_size(exp),
                     type_name(act), json_is_array(act) ? json_array_size(act) : 0);
            mismatch(st, path, "expected", sub);
            return;
        }
        json_array_foreach(exp, i, ev) {
            fmt(sub, sizeof sub, "%s[%zu]", path, i);
            compare(ev, json_array_get(act, i), sub, st);
        }
        return;
    }
    case JSON_INTEGER:
        if (!json_is_integer(act) || json_integer_value(act) != json_integer_value(exp)) {
            fmt(sub, sizeof sub, "%lld", (long long)json_integer_value(exp));
            mismatch(st, path, "expected the integer", sub);
        }
        return;
    case JSON_REAL: {
        if (!json_is_number(act)) { mismatch(st, path, "expected a number, got", type_name(act)); return; }
        double d = fabs(json_number_value(exp) - json_number_value(act));
        if (!(d <= st->max_diff)) st->max_diff = d; /* NaN-safe */
        if (!(d <= st->tol)) {
            fmt(sub, sizeof sub, "%.9g, got %.9g", json_number_value(exp), json_number_value(act));
            mismatch(st, path, "expected", sub);
        }
        return;
    }
    case JSON_STRING:
        if (!json_is_string(act) || strcmp(json_string_value(act), json_string_value(exp)) != 0) {
            fmt(sub, sizeof sub, "\"%s\", got %s%s%s", json_string_value(exp),
                json_is_string(act) ? "\"" : "", json_is_string(act) ? json_string_value(act) : type_name(act),
                json_is_string(act) ? "\"" : "");
            mismatch(st, path, "expected", sub);
        }
        return;
    default: /* true, false, null */
        if (json_typeof(act) != json_typeof(exp)) mismatch(st, path, "expected", type_name(exp));
        return;
    }
}

/* Loads one index entry's files. Returns 0, or -1 (with a failed CHECK) if a file is unreadable. */
static int load_example(const char *dir, const json_t *e, example *ex) {
    memset(ex, 0, sizeof *ex);
    ex->name = json_string_value(json_object_get(e, "name"));
    ex->method = json_string_value(json_object_get(e, "method"));
    ex->path = json_string_value(json_object_get(e, "path"));
    ex->content_type = json_string_value(json_object_get(e, "content_type"));
    ex->resp_ctype = json_string_value(json_object_get(e, "response_content_type"));
    ex->allow = json_string_value(json_object_get(e, "allow_contains"));
    ex->status = (long)json_integer_value(json_object_get(e, "status"));
    ex->absent = json_object_get(e, "absent");
    ex->illustrative = json_object_get(e, "illustrative_keys");
    const char *req = json_string_value(json_object_get(e, "request"));
    const char *resp = json_string_value(json_object_get(e, "response"));
    CHECK_MSG(ex->name && ex->method && ex->path && ex->status > 0, "index entry incomplete");
    if (!ex->name || !ex->method || !ex->path) return -1;
    if (req) {
        ex->request = read_file(dir, req, &ex->request_len);
        CHECK_MSG(ex->request != NULL, "%s: cannot read %s/%s", ex->name, dir, req);
        if (!ex->request) return -1;
    }
    if (resp) {
        char path[512];
        json_error_t jerr;
        snprintf(path, sizeof path, "%s/%s", dir, resp);
        ex->expected = json_load_file(path, 0, &jerr);
        CHECK_MSG(ex->expected != NULL, "%s: %s: %s", ex->name, path, jerr.text);
        if (!ex->expected) return -1;
    }
    return 0;
}

static void free_example(example *ex) {
    free(ex->request);
    json_decref(ex->expected);
}

/* Checks one response against its example; tag says which pass. */
static void check_response(const example *ex, const http_result *r, const cmp_state *proto,
                           const char *tag) {
    CHECK_MSG(r->status == ex->status, "%s [%s]: status %ld, expected %ld; body: %.300s", ex->name,
              tag, r->status, ex->status, r->body ? r->body : "");
    if (ex->resp_ctype)
        CHECK_MSG(strncmp(r->content_type, ex->resp_ctype, strlen(ex->resp_ctype)) == 0,
                  "%s [%s]: Content-Type \"%s\", expected %s", ex->name, tag, r->content_type,
                  ex->resp_ctype);
    if (ex->allow)
        CHECK_MSG(strstr(r->allow, ex->allow) != NULL, "%s [%s]: Allow \"%s\" lacks %s", ex->name,
                  tag, r->allow, ex->allow);
    if (!ex->expected) return;
    CHECK_MSG(strncmp(r->content_type, "application/json", 16) == 0,
              "%s [%s]: Content-Type \"%s\"", ex->name, tag, r->content_type);
    json_error_t jerr;
    json_t *act = json_loadb(r->body ? r->body : "", r->body_len, 0, &jerr);
    CHECK_MSG(act != NULL, "%s [%s]: response is not JSON (%s): %.200s", ex->name, tag, jerr.text,
              r->body ? r->body : "");
    if (!act) return;
    cmp_state st = *proto;
    st.entry_illustrative = ex->illustrative;
    compare(ex->expected, act, "$", &st);
    CHECK_MSG(st.mismatches == 0, "%s [%s]: %d mismatches; first %s", ex->name, tag,
              st.mismatches, st.first);
    size_t i;
    const json_t *k;
    json_array_foreach(ex->absent, i, k) {
        CHECK_MSG(json_object_get(act, json_string_value(k)) == NULL, "%s [%s]: \"%s\" present",
                  ex->name, tag, json_string_value(k));
    }
    if (json_object_get(ex->expected, "output") || json_object_get(ex->expected, "outputs"))
        printf("%-32s %-10s max |diff| %.3g\n", ex->name, tag, st.max_diff);
    json_decref(act);
}

static http_result send_example(const char *base_url, const example *ex) {
    char url[512];
    http_result r;
    snprintf(url, sizeof url, "%s%s", base_url, ex->path);
    if (http_do(ex->method, url, ex->request, ex->request_len, ex->content_type, &r) != 0) {
        memset(&r, 0, sizeof r);
        r.status = -1;
    }
    return r;
}

typedef struct client_arg {
    const char *base_url;
    const example *ex;
    http_result result;
} client_arg;

static void *client_main(void *p) {
    client_arg *a = p;
    a->result = send_example(a->base_url, a->ex);
    return NULL;
}

/* Every example, one after the other, compared with its PyTorch-computed response. */
TEST_WITH(sequential, const char *base_url, const example *exs, size_t n, const cmp_state *st) {
    for (size_t i = 0; i < n; i++) {
        if (!exs[i].name) continue;
        http_result r = send_example(base_url, &exs[i]);
        check_response(&exs[i], &r, st, "sequential");
        http_result_free(&r);
    }
}

/* Every 200 attention example from its own thread at once: the daemon batches them. */
TEST_WITH(concurrent, const char *base_url, const example *exs, size_t n, const cmp_state *st) {
    client_arg args[64];
    pthread_t th[64];
    size_t m = 0;
    for (size_t i = 0; i < n && m < 64; i++) {
        if (!exs[i].name || exs[i].status != 200 || strcmp(exs[i].method, "POST") != 0) continue;
        args[m] = (client_arg){.base_url = base_url, .ex = &exs[i]};
        m++;
    }
    CHECK(m >= 10);
    size_t started = 0;
    for (; started < m; started++)
        if (pthread_create(&th[started], NULL, client_main, &args[started]) != 0) break;
    CHECK_INT_EQ(started, m);
    json_int_t largest = 0; /* how much batching happened: reported, not asserted (timing) */
    for (size_t i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        check_response(args[i].ex, &args[i].result, st, "concurrent");
        json_t *r = json_loadb(args[i].result.body ? args[i].result.body : "",
                               args[i].result.body_len, 0, NULL);
        const json_t *tm = json_object_get(r, "timing"); /* v2: "parameters" */
        if (!tm) tm = json_object_get(r, "parameters");
        json_int_t b = json_integer_value(json_object_get(tm, "batch_size"));
        if (b > largest) largest = b;
        json_decref(r);
        http_result_free(&args[i].result);
    }
    printf("concurrent pass: %zu clients, largest batch %lld requests\n", started, (long long)largest);
}

/* The same two passes against a daemon that decodes every body and encodes every answer on a
 * codec thread (names of their own: a case name runs once). */
TEST_WITH(sequential_offloaded, const char *base_url, const example *exs, size_t n, const cmp_state *st) {
    check_case_sequential(base_url, exs, n, st);
}
TEST_WITH(concurrent_offloaded, const char *base_url, const example *exs, size_t n, const cmp_state *st) {
    check_case_concurrent(base_url, exs, n, st);
}

int main(void) {
    const char *dir = getenv("ATTND_EXAMPLES_DIR");
    if (!dir || !*dir) dir = "proto/examples";
    char index_path[512];
    json_error_t jerr;
    attnd_proc proc = {0};
    example *exs = NULL;
    snprintf(index_path, sizeof index_path, "%s/index.json", dir);
    json_t *index = json_load_file(index_path, 0, &jerr);
    CHECK_MSG(index != NULL, "%s: %s", index_path, jerr.text);
    if (!index) return check_summary();

    cmp_state st = {.tol = json_number_value(json_object_get(index, "tolerance")),
                    .illustrative = json_object_get(index, "illustrative_keys")};
    CHECK(st.tol > 0 && st.tol <= 1e-3);
    CHECK(json_is_array(st.illustrative));
    const json_t *list = json_object_get(index, "examples");
    size_t n = json_array_size(list);
    CHECK(n >= 20);
    exs = calloc(n ? n : 1, sizeof *exs);
    CHECK(exs != NULL);
    if (!exs) goto done;
    for (size_t i = 0; i < n; i++)
        if (load_example(dir, json_array_get(list, i), &exs[i]) != 0) exs[i].name = NULL; /* skip */

    /* Then with every body decoded and every answer encoded on a codec thread
     * (--offload-codec-bytes 1; by default only large ones are): the same answers,
     * errors included, and the daemon counts the offloaded work. */
    for (int offload = 0; offload < 2; offload++) {
        const char *args[] = {"--offload-codec-bytes", "1", NULL};
        int started = attnd_proc_start(&proc, offload ? args : NULL);
        CHECK_MSG(started == 0, "attnd did not start (ATTND_BIN=%s)", getenv("ATTND_BIN"));
        if (started != 0) goto done;
        if (offload) {
            RUN_WITH(sequential_offloaded, proc.base_url, exs, n, &st);
            RUN_WITH(concurrent_offloaded, proc.base_url, exs, n, &st);
        } else {
            RUN_WITH(sequential, proc.base_url, exs, n, &st);
            RUN_WITH(concurrent, proc.base_url, exs, n, &st);
        }
        const double dec = attnd_proc_metric(&proc, "attnd_http_offloaded_total{work=\"decode\"}");
        const double enc = attnd_proc_metric(&proc, "attnd_http_offloaded_total{work=\"encode\"}");
        printf("offloaded: %.0f decodes, %.0f encodes\n", dec, enc);
        if (offload) /* every example with a body that reaches a scheduler, twice */
            CHECK_MSG(dec >= 20 && enc >= 20, "offloaded %.0f decodes and %.0f encodes", dec, enc);
        else /* the examples are all far below the 64 KiB default */
            CHECK_MSG(dec == 0 && enc == 0, "offloaded %.0f decodes and %.0f encodes", dec, enc);
        CHECK_INT_EQ(attnd_proc_stop(&proc), 0);
    }

done:
    for (size_t i = 0; exs && i < n; i++) free_example(&exs[i]);
    free(exs);
    json_decref(index);
    return check_summary();
}
