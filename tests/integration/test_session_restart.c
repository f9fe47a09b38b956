/* test_session_restart.c — sessions survive a restart (--session-dir): a
 * sequence session of a model group, a single-layer one, a windowed one (past
 * its first block), a cross one and a fork are saved on SIGTERM and read back
 * at start-up under the same ids, and their continuations equal what copies
 * (forks made before the stop) answered, bit for bit; a changed model drops
 * its sessions with a log line; truncated, corrupt and foreign files are
 * skipped with a log line each and removed; --session-dir-max-bytes keeps the
 * most recent. And the reader (attnd_persist_parse) refuses every truncation
 * of a real file and every single flipped byte.
 */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"
#include "engine/persist.h"
#include "sbuf.h"

#define CKPT "tests/fixtures/ckpt/"
#define E 64

static char dir[256];

static float val(int seed, int i, int j) { return (float)sin(0.41 * seed + 0.23 * i - 0.11 * j); }

static json_t *call(const attnd_proc *p, const char *method, const char *path, const char *body,
                    long *status)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", p->base_url, path);
    return attnd_http_json(method, url, body, status);
}

static void create(const attnd_proc *p, const char *model, const char *body, char *id)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/models/%s/sessions", model);
    long st;
    json_t *j = call(p, "POST", path, body, &st);
    CHECK_MSG(st == 201, "create on %s: %ld", model, st);
    const char *s = json_string_value(json_object_get(j, "id"));
    snprintf(id, 96, "%s", s ? s : "");
    json_decref(j);
}

static void fork_of(const attnd_proc *p, const char *id, char *kid)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/sessions/%s/fork", id);
    long st;
    json_t *j = call(p, "POST", path, NULL, &st);
    CHECK_INT_EQ(st, 201);
    const char *s = json_string_value(json_object_get(j, "id"));
    snprintf(kid, 96, "%s", s ? s : "");
    json_decref(j);
}

/* Appends rows [from, from+n) of seed to path (layer < 0: the plain append);
 * the output into out (n×E). Returns the status. */
static long append(const attnd_proc *p, const char *id, int layer, int seed, int from, int n,
                   float *out)
{
    sbuf b = {0};
    sb_printf(&b, "{\"query\":[");
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s[", i ? "," : "");
        for (int j = 0; j < E; j++)
            sb_printf(&b, "%s%.9g", j ? "," : "", (double)val(seed, from + i, j));
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]}");
    char path[256];
    if (layer >= 0)
        snprintf(path, sizeof path, "/v1/sessions/%s/layers/%d/append", id, layer);
    else
        snprintf(path, sizeof path, "/v1/sessions/%s/append", id);
    long st;
    json_t *j = call(p, "POST", path, b.p, &st);
    free(b.p);
    const json_t *o = json_object_get(j, "output");
    for (int i = 0; st == 200 && out && i < n; i++)
        for (int k = 0; k < E; k++)
            out[i * E + k] = (float)json_number_value(json_array_get(json_array_get(o, (size_t)i), (size_t)k));
    json_decref(j);
    return st;
}

/* A sequence's step on both layers; outputs into out (2 × n × E). */
static int seq_step(const attnd_proc *p, const char *id, int seed, int from, int n, float *out)
{
    int bad = 0;
    for (int l = 0; l < 2; l++)
        bad += append(p, id, l, seed + l, from, n, out ? out + (size_t)l * n * E : NULL) != 200;
    return bad;
}

static int start(attnd_proc *p, const char *one_layer, const char *extra)
{
    char one[256];
    snprintf(one, sizeof one, "one=" CKPT "llama_gqa,layer=%s", one_layer);
    const char *args[] = {"--model", "llama=" CKPT "llama_gqa,layers=all", "--model", one,
                          "--model", "demo=config/demo.safetensors", "--session-dir", dir,
                          "--replica-name", "r1", extra ? "--session-dir-max-bytes" : NULL,
                          extra, NULL};
    return attnd_proc_start(p, args);
}

static int count_files(const char *suffix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t a = strlen(e->d_name), b = strlen(suffix);
        n += a > b && strcmp(e->d_name + a - b, suffix) == 0;
    }
    if (d) closedir(d);
    return n;
}

/* The first file of dir ending in suffix, read whole (caller frees). */
static unsigned char *first_file(size_t *len, char *name, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    unsigned char *buf = NULL;
    while (d && !buf && (e = readdir(d)) != NULL) {
        size_t a = strlen(e->d_name);
        if (a < 6 || strcmp(e->d_name + a - 5, ".sess") != 0) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(name, cap, "%s", e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *len = (size_t)n;
        fclose(f);
    }
    if (d) closedir(d);
    return buf;
}

static void put_file(const char *name, const void *data, size_t len)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK(fwrite(data, 1, len, f) == len);
        fclose(f);
    }
}

static int log_has(const attnd_proc *p, const char *what)
{
    char *log = attnd_slurp(p->log_path);
    int has = log && strstr(log, what) != NULL;
    free(log);
    return has;
}

/* Every truncation of a real file, and each of a spread of flipped bytes, is refused. */
static void reader_refuses_damage(const unsigned char *file, size_t len)
{
    attnd_saved_session ss;
    char why[400];
    CHECK(attnd_persist_parse(file, len, &ss, why, sizeof why) == 0);
    int good_caches = ss.n_caches;
    attnd_saved_free(&ss);
    CHECK(good_caches >= 1);
    int accepted = 0;
    for (size_t k = 0; k < len; k++) { /* every truncation point */
        if (attnd_persist_parse(file, k, &ss, why, sizeof why) == 0) {
            accepted++;
            attnd_saved_free(&ss);
        } else {
            CHECK(why[0] != '\0');
        }
    }
    CHECK_INT_EQ(accepted, 0);
    /* truncated bodies with a checksum that fits them: the structure itself
     * must refuse each (every point in the header, then every 61st byte) */
    unsigned char *copy = malloc(len);
    accepted = 0;
    int resealed = 0;
    for (size_t k = 0; k + 8 < len; k += k < 1024 ? 1 : 61) {
        uint64_t h = UINT64_C(0xcbf29ce484222325);
        for (size_t i = 0; i < k; i++)
            h = (h ^ file[i]) * UINT64_C(0x100000001b3);
        memcpy(copy, file, k);
        for (int i = 0; i < 8; i++)
            copy[k + (size_t)i] = (unsigned char)(h >> (8 * i));
        if (attnd_persist_parse(copy, k + 8, &ss, why, sizeof why) == 0) {
            accepted++;
            attnd_saved_free(&ss);
        }
        resealed++;
    }
    CHECK_INT_EQ(accepted, 0);
    memcpy(copy, file, len);
    int flips = 0;
    accepted = 0;
    for (size_t k = 0; k < len; k += 1 + len / 4096) {
        copy[k] ^= 0x5a;
        if (attnd_persist_parse(copy, len, &ss, why, sizeof why) == 0) {
            accepted++;
            attnd_saved_free(&ss);
        }
        copy[k] ^= 0x5a;
        flips++;
    }
    free(copy);
    CHECK_INT_EQ(accepted, 0);
    printf("reader: %zu truncations, %d resealed truncations and %d flipped bytes of a %zu-byte "
           "file refused\n", len, resealed, flips, len);
}

TEST(survive_restart)
{
    attnd_proc p;
    if (start(&p, "0", NULL) != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char seq[96], one[96], win[96], cross[96], kid[96];
    create(&p, "llama", "{\"ttl_s\":500}", seq);
    create(&p, "one", "{}", one);
    create(&p, "demo", "{\"window\":4}", win);
    sbuf kb = {0};
    sb_printf(&kb, "{\"key\":[");
    for (int i = 0; i < 5; i++) {
        sb_printf(&kb, "%s[", i ? "," : "");
        for (int j = 0; j < E; j++)
            sb_printf(&kb, "%s%.9g", j ? "," : "", (double)val(9, i, j));
        sb_printf(&kb, "]");
    }
    sb_printf(&kb, "]}");
    create(&p, "demo", kb.p, cross);
    free(kb.p);
    CHECK(strncmp(seq, "r1.", 3) == 0);
    CHECK_INT_EQ(seq_step(&p, seq, 0, 0, 3, NULL), 0);
    CHECK_INT_EQ(seq_step(&p, seq, 0, 3, 1, NULL), 0);
    CHECK_INT_EQ(append(&p, one, -1, 5, 0, 6, NULL), 200);
    for (int i = 0; i < 12; i++) /* past a window of 4 */
        CHECK_INT_EQ(append(&p, win, -1, 6, 4 * i, 4, NULL), 200);
    CHECK_INT_EQ(append(&p, cross, -1, 7, 0, 2, NULL), 200);
    fork_of(&p, seq, kid);
    CHECK_INT_EQ(seq_step(&p, kid, 20, 4, 2, NULL), 0);
    /* what each continues with: answered now by copies, which then go */
    const char *ids[] = {seq, one, win, cross, kid};
    float want[5][2 * 2 * E];
    for (int s = 0; s < 5; s++) {
        char copy[96], path[256];
        fork_of(&p, ids[s], copy);
        if (s == 0 || s == 4)
            CHECK_INT_EQ(seq_step(&p, copy, 30, s == 0 ? 4 : 6, 2, want[s]), 0);
        else
            CHECK_INT_EQ(append(&p, copy, -1, 30, 100, 2, want[s]), 200);
        snprintf(path, sizeof path, "/v1/sessions/%s", copy);
        long st;
        json_decref(call(&p, "DELETE", path, NULL, &st));
        CHECK_INT_EQ(st, 204);
    }
    json_t *before[5];
    for (int s = 0; s < 5; s++) {
        char path[256];
        long st;
        snprintf(path, sizeof path, "/v1/sessions/%s", ids[s]);
        before[s] = call(&p, "GET", path, NULL, &st);
        CHECK_INT_EQ(st, 200);
    }
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    CHECK(log_has(&p, "saved 5 session(s)"));
    CHECK_INT_EQ(count_files(".sess"), 5);
    CHECK_INT_EQ(count_files(".tmp"), 0);

    /* the reader against a real file */
    char name[300];
    size_t len = 0;
    unsigned char *file = first_file(&len, name, sizeof name);
    CHECK(file != NULL);
    if (file)
        reader_refuses_damage(file, len);

    /* restart: the same ids, lengths, settings and continuations */
    if (start(&p, "0", NULL) != 0) {
        CHECK_MSG(0, "daemon did not restart");
        free(file);
        return;
    }
    CHECK(log_has(&p, "restored 5 session(s), skipped 0"));
    CHECK_INT_EQ(count_files(".sess"), 0); /* read files are removed */
    int differing = 0;
    for (int s = 0; s < 5; s++) {
        char path[256];
        long st;
        snprintf(path, sizeof path, "/v1/sessions/%s", ids[s]);
        json_t *after = call(&p, "GET", path, NULL, &st);
        CHECK_INT_EQ(st, 200);
        static const char *const same[] = {"model", "kind", "window", "ttl_s", "length", "cached",
                                           "blocks", "layers"};
        for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
            CHECK_MSG(json_equal(json_object_get(before[s], same[k]), json_object_get(after, same[k])) ||
                          (!json_object_get(before[s], same[k]) && !json_object_get(after, same[k])),
                      "session %d: %s changed", s, same[k]);
        json_decref(after);
        json_decref(before[s]);
        float got[2 * 2 * E];
        if (s == 0 || s == 4) {
            CHECK_INT_EQ(seq_step(&p, ids[s], 30, s == 0 ? 4 : 6, 2, got), 0);
            differing += memcmp(got, want[s], 2 * 2 * E * sizeof(float)) != 0;
        } else {
            CHECK_INT_EQ(append(&p, ids[s], -1, 30, 100, 2, got), 200);
            differing += memcmp(got, want[s], 2 * E * sizeof(float)) != 0;
        }
    }
    CHECK_INT_EQ(differing, 0);
    printf("restart: 5 sessions back under their ids, %d continuations differ\n", differing);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);

    /* a changed model ("one" now serves layer 1: same shape, other weights)
     * drops its session; damaged and foreign files are skipped */
    CHECK_INT_EQ(count_files(".sess"), 5);
    if (file) {
        put_file("00000090-trunc.sess", file, len / 2);
        file[len / 3] ^= 1;
        put_file("00000091-flip.sess", file, len);
    }
    put_file("00000092-foreign.sess", "hello, not a session\n", 21);
    put_file("00000093-empty.sess", "", 0);
    free(file);
    if (start(&p, "1", NULL) != 0) {
        CHECK_MSG(0, "daemon did not start with damaged files");
        return;
    }
    char line[200];
    snprintf(line, sizeof line, "skipped session %s", one);
    CHECK(log_has(&p, line));
    CHECK(log_has(&p, "model one changed"));
    CHECK(log_has(&p, "skipped 00000090-trunc.sess"));
    CHECK(log_has(&p, "skipped 00000091-flip.sess: checksum mismatch"));
    CHECK(log_has(&p, "skipped 00000092-foreign.sess: not a session file"));
    CHECK(log_has(&p, "skipped 00000093-empty.sess"));
    CHECK(log_has(&p, "restored 4 session(s), skipped 5"));
    CHECK_INT_EQ(count_files(".sess"), 0);
    long st;
    char path[256];
    snprintf(path, sizeof path, "/v1/sessions/%s", one);
    json_decref(call(&p, "GET", path, NULL, &st));
    CHECK_INT_EQ(st, 404);
    snprintf(path, sizeof path, "/v1/sessions/%s", seq);
    json_decref(call(&p, "GET", path, NULL, &st));
    CHECK_INT_EQ(st, 200);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

/* --session-dir-max-bytes: the most recently used sessions that fit are saved. */
TEST(max_bytes)
{
    attnd_proc p;
    if (start(&p, "0", "0") != 0) {
        CHECK_MSG(0, "daemon did not start");
        return;
    }
    char a[96], b[96];
    create(&p, "one", "{}", a);
    create(&p, "one", "{}", b);
    CHECK_INT_EQ(append(&p, a, -1, 1, 0, 3, NULL), 200);
    CHECK_INT_EQ(append(&p, b, -1, 2, 0, 3, NULL), 200); /* b most recent */
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    size_t len = 0;
    char name[300];
    unsigned char *file = first_file(&len, name, sizeof name);
    free(file);
    CHECK(len > 0);
    char bound[32];
    snprintf(bound, sizeof bound, "%zu", len + len / 2); /* one file fits, two do not */
    if (start(&p, "0", bound) != 0) {
        CHECK_MSG(0, "daemon did not restart");
        return;
    }
    CHECK(log_has(&p, "restored 2 session(s)"));
    CHECK_INT_EQ(append(&p, a, -1, 1, 3, 1, NULL), 200); /* a most recent now */
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
    CHECK(log_has(&p, "saved 1 session(s)"));
    CHECK(log_has(&p, "1 least recently used session(s) not saved"));
    CHECK_INT_EQ(count_files(".sess"), 1);
    if (start(&p, "0", NULL) != 0) {
        CHECK_MSG(0, "daemon did not restart");
        return;
    }
    long st;
    char path[256];
    snprintf(path, sizeof path, "/v1/sessions/%s", a);
    json_t *j = call(&p, "GET", path, NULL, &st);
    CHECK_INT_EQ(st, 200);
    CHECK_INT_EQ(json_integer_value(json_object_get(j, "length")), 4);
    json_decref(j);
    snprintf(path, sizeof path, "/v1/sessions/%s", b);
    json_decref(call(&p, "GET", path, NULL, &st));
    CHECK_INT_EQ(st, 404);
    CHECK_INT_EQ(attnd_proc_stop(&p), 0);
}

static void rm_dir(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/attnd-sessdir-%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    rm_dir();
    RUN(survive_restart);
    rm_dir();
    RUN(max_bytes);
    rm_dir();
    return check_summary();
}
