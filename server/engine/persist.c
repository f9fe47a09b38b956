/* persist.c — session files (persist.h): the encoder the stop writes with, the
 * parser that trusts nothing, the matching of a parsed session against the
 * models now loaded, and the directory walk of start-up and stop. Files are
 * named NNNNNNNN-<id>.sess, NNNNNNNN the session's rank by recent use (0 =
 * most recent), so a sorted listing restores the most recent first.
 */
#include "engine/persist.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/request.h" /* attnd_now_ns */
#include "engine/kvlayout.h"

static const char magic[8] = {'A', 'T', 'T', 'N', 'D', 'S', 'E', 'S'};

#define MAX_BLOCK_BYTES ((size_t)1 << 26) /* --kv-page-bytes' bound */
#define MAX_LENGTH ((int64_t)1 << 40)

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    return h;
}
#define FNV_START UINT64_C(0xcbf29ce484222325)

/* ------------------------------------------------------------ encoding */

typedef struct wbuf {
    unsigned char *p;
    size_t len, cap;
    int nomem;
} wbuf;

static unsigned char *w_room(wbuf *b, size_t n)
{
    if (b->nomem) return NULL;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            b->nomem = 1;
            return NULL;
        }
        b->p = q;
        b->cap = cap;
    }
    unsigned char *at = b->p + b->len;
    b->len += n;
    return at;
}

static void w_le(wbuf *b, uint64_t v, int bytes)
{
    unsigned char *at = w_room(b, (size_t)bytes);
    for (int i = 0; at && i < bytes; i++)
        at[i] = (unsigned char)(v >> (8 * i));
}

static void w_str(wbuf *b, const char *s)
{
    size_t n = strlen(s);
    w_le(b, n, 2);
    unsigned char *at = w_room(b, n);
    if (at) memcpy(at, s, n);
}

static void w_cache(wbuf *b, const attnd_sessions *st, const attnd_session *c,
                    uint64_t (*hash)(void *ctx, const attnd_model *m), void *ctx)
{
    const attnd_model *m = c->model;
    w_str(b, c->model_name);
    w_le(b, m ? hash(ctx, m) : 0, 8);
    w_le(b, m ? (uint64_t)m->kv_dtype : 0, 4);
    w_le(b, (uint64_t)c->block_rows, 4);
    w_le(b, c->k_block_bytes, 8);
    w_le(b, c->block_bytes, 8);
    w_le(b, (uint64_t)c->length, 8);
    w_le(b, (uint64_t)c->rows, 4);
    w_le(b, (uint64_t)c->n_blocks, 4);
    attnd_session_kv kv;
    attnd_sessions_kv(st, c, &kv);
    for (int i = 0; i < c->n_blocks; i++) {
        unsigned char *at = w_room(b, c->block_bytes);
        if (at) memcpy(at, (const char *)kv.k + (size_t)kv.table[i] * kv.stride, c->block_bytes);
    }
}

unsigned char *attnd_persist_encode(const attnd_sessions *st, const attnd_session *s,
                                    int64_t idle_ns, const char *replica,
                                    uint64_t (*hash)(void *ctx, const attnd_model *m), void *ctx,
                                    size_t *len)
{
    wbuf b = {0};
    unsigned char *at = w_room(&b, sizeof magic);
    if (at) memcpy(at, magic, sizeof magic);
    w_le(&b, ATTND_PERSIST_VERSION, 4);
    w_le(&b, 0, 4);
    w_str(&b, s->id);
    w_str(&b, replica ? replica : "");
    w_str(&b, s->model_name);
    w_le(&b, (uint64_t)s->kind, 4);
    w_le(&b, (uint64_t)(uint32_t)s->window, 4);
    w_le(&b, (uint64_t)(uint32_t)s->ttl_s, 4);
    w_le(&b, (uint64_t)idle_ns, 8);
    uint32_t ql;
    memcpy(&ql, &s->query_limit, sizeof ql);
    w_le(&b, ql, 4);
    w_le(&b, (uint64_t)s->n_layers, 4);
    w_le(&b, (uint64_t)(s->n_layers ? s->n_layers : 1), 4);
    if (s->n_layers)
        for (int l = 0; l < s->n_layers; l++)
            w_cache(&b, st, &s->layers[l], hash, ctx);
    else
        w_cache(&b, st, s, hash, ctx);
    if (!b.nomem)
        w_le(&b, fnv(FNV_START, b.p, b.len), 8);
    if (b.nomem) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

/* ------------------------------------------------------------ parsing */

typedef struct rbuf {
    const unsigned char *p;
    size_t len, at;
    char *why;
    size_t whylen;
    int bad;
} rbuf;

__attribute__((format(printf, 2, 3))) static int r_fail(rbuf *r, const char *fmt, ...)
{
    if (!r->bad) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->why, r->whylen, fmt, ap);
        va_end(ap);
    }
    r->bad = 1;
    return -1;
}

static uint64_t r_le(rbuf *r, int bytes, const char *what)
{
    if (r->bad) return 0;
    if (r->len - r->at < (size_t)bytes) {
        r_fail(r, "truncated at byte %zu (reading %s)", r->at, what);
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)r->p[r->at + (size_t)i] << (8 * i);
    r->at += (size_t)bytes;
    return v;
}

/* A string into out (cap bytes with the NUL): printable ASCII only. */
static void r_str(rbuf *r, char *out, size_t cap, const char *what)
{
    size_t n = (size_t)r_le(r, 2, what);
    if (r->bad) return;
    if (n >= cap) {
        r_fail(r, "%s is %zu bytes long, at most %zu", what, n, cap - 1);
        return;
    }
    if (r->len - r->at < n) {
        r_fail(r, "truncated at byte %zu (reading %s)", r->at, what);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (r->p[r->at + i] < 0x21 || r->p[r->at + i] > 0x7e) {
            r_fail(r, "%s holds a byte that is not printable ASCII", what);
            return;
        }
    memcpy(out, r->p + r->at, n);
    out[n] = '\0';
    r->at += n;
}

void attnd_saved_free(attnd_saved_session *s)
{
    if (!s) return;
    free(s->caches);
    memset(s, 0, sizeof *s);
}

static int parse_cache(rbuf *r, attnd_saved_cache *c, int i, int cross)
{
    char what[64];
    snprintf(what, sizeof what, "cache %d's model name", i);
    r_str(r, c->model, sizeof c->model, what);
    c->weights_hash = r_le(r, 8, "a weights hash");
    uint64_t dt = r_le(r, 4, "a kv dtype"), br = r_le(r, 4, "block_rows");
    uint64_t kb = r_le(r, 8, "k_block_bytes"), bb = r_le(r, 8, "block_bytes");
    uint64_t len = r_le(r, 8, "a length"), rows = r_le(r, 4, "rows"), nb = r_le(r, 4, "n_blocks");
    if (r->bad) return -1;
    if (dt > ATTN_KV_INT8) return r_fail(r, "cache %d: kv dtype %llu unknown", i, (unsigned long long)dt);
    if (br < 1 || br > 65536 || (br & (br - 1)) != 0)
        return r_fail(r, "cache %d: block_rows %llu is not a power of two in 1..65536", i,
                      (unsigned long long)br);
    if (bb < 8 || bb > MAX_BLOCK_BYTES || kb < 4 || kb % 4 != 0 || kb >= bb)
        return r_fail(r, "cache %d: block bytes %llu (K %llu) out of range", i,
                      (unsigned long long)bb, (unsigned long long)kb);
    /* self: rows cached of length appended; cross: rows of memory, length queries */
    if (len > (uint64_t)MAX_LENGTH || rows > (uint64_t)INT32_MAX || (!cross && rows > len) ||
        (cross && rows < 1) || nb > (uint64_t)INT32_MAX ||
        rows > nb * br)
        return r_fail(r, "cache %d: length %llu, rows %llu, %llu blocks of %llu rows disagree", i,
                      (unsigned long long)len, (unsigned long long)rows, (unsigned long long)nb,
                      (unsigned long long)br);
    if (nb > (r->len - r->at) / bb)
        return r_fail(r, "truncated: cache %d's %llu blocks of %llu bytes need more than the "
                      "%zu bytes left", i, (unsigned long long)nb, (unsigned long long)bb,
                      r->len - r->at);
    c->kv_dtype = (int)dt;
    c->block_rows = (int)br;
    c->k_block_bytes = (size_t)kb;
    c->block_bytes = (size_t)bb;
    c->length = (int64_t)len;
    c->rows = (int)rows;
    c->n_blocks = (int)nb;
    c->data = r->p + r->at;
    r->at += (size_t)nb * (size_t)bb;
    return 0;
}

int attnd_persist_parse(const void *buf, size_t len, attnd_saved_session *out, char *why,
                        size_t whylen)
{
    memset(out, 0, sizeof *out);
    rbuf r = {.p = buf, .len = len, .why = why, .whylen = whylen};
    if (len < sizeof magic + 8 + 8 || memcmp(buf, magic, sizeof magic) != 0)
        return r_fail(&r, len < sizeof magic ? "truncated: %zu bytes, not a session file"
                                              : "not a session file (%zu bytes, no ATTNDSES magic)",
                      len);
    const unsigned char *p = buf;
    uint64_t want = 0;
    for (int i = 0; i < 8; i++)
        want |= (uint64_t)p[len - 8 + (size_t)i] << (8 * i);
    r.len = len - 8; /* the checksum is not part of the body */
    r.at = sizeof magic;
    uint64_t version = r_le(&r, 4, "the version"), flags = r_le(&r, 4, "the flags");
    if (version != ATTND_PERSIST_VERSION)
        return r_fail(&r, "version %llu, this attnd reads %d", (unsigned long long)version,
                      ATTND_PERSIST_VERSION);
    if (flags != 0)
        return r_fail(&r, "flags %llu unknown", (unsigned long long)flags);
    if (fnv(FNV_START, p, len - 8) != want)
        return r_fail(&r, "checksum mismatch: the file is truncated or corrupt");
    r_str(&r, out->id, sizeof out->id, "the id");
    r_str(&r, out->replica, sizeof out->replica, "the replica name");
    r_str(&r, out->model, sizeof out->model, "the model name");
    uint64_t kind = r_le(&r, 4, "the kind"), window = r_le(&r, 4, "the window");
    uint64_t ttl = r_le(&r, 4, "ttl_s"), idle = r_le(&r, 8, "the idle time");
    uint32_t ql = (uint32_t)r_le(&r, 4, "query_limit");
    uint64_t n_layers = r_le(&r, 4, "the layer count"), n_caches = r_le(&r, 4, "the cache count");
    if (r.bad) goto fail;
    memcpy(&out->query_limit, &ql, sizeof ql);
    if (kind > ATTND_SESSION_CROSS || window > INT32_MAX || ttl < 1 || ttl > INT32_MAX ||
        idle > (uint64_t)INT64_MAX || !(out->query_limit >= 0.0f)) {
        r_fail(&r, "kind %llu, window %llu, ttl_s %llu or query_limit out of range",
               (unsigned long long)kind, (unsigned long long)window, (unsigned long long)ttl);
        goto fail;
    }
    if (n_layers > ATTND_SESSION_LAYERS_MAX || n_caches != (n_layers ? n_layers : 1) ||
        (n_layers && kind != ATTND_SESSION_SELF)) {
        r_fail(&r, "%llu layers with %llu caches (kind %llu)", (unsigned long long)n_layers,
               (unsigned long long)n_caches, (unsigned long long)kind);
        goto fail;
    }
    out->kind = (int)kind;
    out->window = (int)window;
    out->ttl_s = (int)ttl;
    out->idle_ns = (int64_t)idle;
    out->n_layers = (int)n_layers;
    out->n_caches = (int)n_caches;
    out->caches = calloc((size_t)n_caches, sizeof *out->caches);
    if (!out->caches) {
        r_fail(&r, "out of memory");
        goto fail;
    }
    for (int i = 0; i < out->n_caches; i++)
        if (parse_cache(&r, &out->caches[i], i, out->kind == ATTND_SESSION_CROSS) != 0)
            goto fail;
    if (r.at != r.len) {
        r_fail(&r, "%zu bytes after the last cache", r.len - r.at);
        goto fail;
    }
    return 0;
fail:
    attnd_saved_free(out);
    return -1;
}

/* ------------------------------------------------------------ weights hashes */

/* One fingerprint per model version, computed once (a small forward each). */
typedef struct hash_memo {
    const attnd_model **model;
    uint64_t *hash;
    int n, cap;
} hash_memo;

static uint64_t memo_hash(void *ctx, const attnd_model *m)
{
    hash_memo *hm = ctx;
    for (int i = 0; i < hm->n; i++)
        if (hm->model[i] == m) return hm->hash[i];
    uint64_t h = attnd_model_weights_hash(m);
    if (hm->n == hm->cap) {
        int cap = hm->cap ? 2 * hm->cap : 16;
        const attnd_model **mm = realloc(hm->model, (size_t)cap * sizeof *mm);
        if (mm) hm->model = mm;
        uint64_t *hh = mm ? realloc(hm->hash, (size_t)cap * sizeof *hh) : NULL;
        if (hh) hm->hash = hh;
        if (!mm || !hh) return h;
        hm->cap = cap;
    }
    hm->model[hm->n] = m;
    hm->hash[hm->n++] = h;
    return h;
}

static void memo_free(hash_memo *hm)
{
    free(hm->model);
    free(hm->hash);
}

/* ------------------------------------------------------------ save */

typedef struct save_ctx {
    const attnd_config *cfg;
    hash_memo memo;
    int dir_fd;
    int saved, over, failed, rank;
    size_t bytes;
} save_ctx;

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int save_one(void *arg, const attnd_sessions *st, const attnd_session *s, int64_t idle_ns)
{
    save_ctx *c = arg;
    int rank = c->rank++;
    size_t len = 0;
    unsigned char *img = attnd_persist_encode(st, s, idle_ns, c->cfg->replica_name, memo_hash,
                                              &c->memo, &len);
    if (!img) {
        attnd_log(ATTND_LOG_WARN, "session-dir: session %s not saved: out of memory", s->id);
        c->failed++;
        return 0;
    }
    if (c->cfg->session_dir_max_bytes > 0 && c->bytes + len > (size_t)c->cfg->session_dir_max_bytes) {
        c->over++;
        free(img);
        return 0;
    }
    char tmp[ATTND_SESSION_ID_MAX + 32], name[ATTND_SESSION_ID_MAX + 32];
    snprintf(tmp, sizeof tmp, ".%08d-%s.tmp", rank, s->id);
    snprintf(name, sizeof name, "%08d-%s" ATTND_PERSIST_SUFFIX, rank, s->id);
    int fd = openat(c->dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int ok = fd >= 0 && write_all(fd, img, len) == 0 && fsync(fd) == 0;
    if (fd >= 0 && close(fd) != 0) ok = 0;
    if (ok && renameat(c->dir_fd, tmp, c->dir_fd, name) != 0) ok = 0;
    if (!ok) {
        attnd_log(ATTND_LOG_WARN, "session-dir: session %s not saved: %s", s->id, strerror(errno));
        unlinkat(c->dir_fd, tmp, 0);
        c->failed++;
    } else {
        c->saved++;
        c->bytes += len;
    }
    free(img);
    return 0;
}

/* Removes every *.sess and .*.tmp file of the directory (a previous run's). */
static void clear_dir(int dir_fd)
{
    int fd = dup(dir_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name), sl = strlen(ATTND_PERSIST_SUFFIX);
        int sess = n > sl && strcmp(e->d_name + n - sl, ATTND_PERSIST_SUFFIX) == 0;
        int tmp = n > 5 && e->d_name[0] == '.' && strcmp(e->d_name + n - 4, ".tmp") == 0;
        if (sess || tmp) unlinkat(dir_fd, e->d_name, 0);
    }
    closedir(d);
}

/* The directory's fd, made (0700) when missing; -1 with a log line. */
static int open_dir(const char *dir)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        attnd_log(ATTND_LOG_ERROR, "session-dir %s: cannot create it: %s", dir, strerror(errno));
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        attnd_log(ATTND_LOG_ERROR, "session-dir %s: %s", dir, strerror(errno));
    return fd;
}

int attnd_persist_save(attnd_sessions *st, const attnd_config *cfg)
{
    int64_t t0 = attnd_now_ns();
    save_ctx c = {.cfg = cfg, .dir_fd = open_dir(cfg->session_dir)};
    if (c.dir_fd < 0) return -1;
    clear_dir(c.dir_fd);
    attnd_sessions_foreach(st, save_one, &c);
    fsync(c.dir_fd); /* the renames */
    close(c.dir_fd);
    memo_free(&c.memo);
    attnd_log(ATTND_LOG_INFO, "session-dir %s: saved %d session(s), %.2f MiB in %.0f ms%s", cfg->session_dir,
              c.saved, (double)c.bytes / 1048576.0, (double)(attnd_now_ns() - t0) / 1e6,
              c.over ? " (some over --session-dir-max-bytes not saved)" : "");
    if (c.over)
        attnd_log(ATTND_LOG_WARN, "session-dir %s: %d least recently used session(s) not saved: "
                  "--session-dir-max-bytes %lld reached", cfg->session_dir, c.over,
                  (long long)cfg->session_dir_max_bytes);
    return c.saved;
}

/* ------------------------------------------------------------ load */

/* The session params of cache c on model m, checked against m now: same
 * name, weights, kv dtype and page geometry. Returns 0, or -1 with why. */
static int match_cache(const attnd_sessions *st, const attnd_saved_session *ss,
                       const attnd_saved_cache *c, attnd_model *m, hash_memo *memo,
                       attnd_session_params *p, char *why, size_t whylen)
{
    attnd_kv_geometry g;
    if (strcmp(c->model, m->name) != 0)
        return snprintf(why, whylen, "it was on model %s, now %s", c->model, m->name), -1;
    if (c->weights_hash == 0 || memo_hash(memo, m) != c->weights_hash)
        return snprintf(why, whylen, "model %s changed (its weights are not those the session "
                        "was computed with)", m->name), -1;
    if ((int)m->kv_dtype != c->kv_dtype)
        return snprintf(why, whylen, "model %s's kv_dtype changed", m->name), -1;
    if (attnd_kv_geometry_fit(m->layer, m->kv_dtype, attnd_sessions_page_bytes(st), &g, NULL) != 0 ||
        g.block_rows != c->block_rows || g.v_offset != c->k_block_bytes ||
        g.v_offset + g.v_bytes != c->block_bytes)
        return snprintf(why, whylen, "model %s's KV pages changed (--kv-page-bytes)", m->name), -1;
    *p = (attnd_session_params){
        .kind = (attnd_session_kind)ss->kind,
        .window = ss->window,
        .ttl_s = ss->ttl_s,
        .block_rows = g.block_rows,
        .k_block_bytes = g.v_offset,
        .v_block_bytes = g.v_bytes,
        .rows = ss->kind == ATTND_SESSION_CROSS ? c->rows : 0,
        .model_name = m->name,
        .model = m,
    };
    return 0;
}

/* Restores one parsed session. Returns 0, or -1 with why. */
static int restore_one(attnd_sessions *st, attnd_models *ms, const attnd_config *cfg,
                       const attnd_saved_session *ss, hash_memo *memo, char *why, size_t whylen)
{
    if (strcmp(ss->replica, cfg->replica_name) != 0)
        return snprintf(why, whylen, "it was saved by replica \"%s\", this is \"%s\"", ss->replica,
                        cfg->replica_name), -1;
    if (ss->idle_ns >= (int64_t)ss->ttl_s * 1000000000)
        return snprintf(why, whylen, "it had expired (idle past its ttl_s)"), -1;
    const int n = ss->n_caches;
    attnd_model **m = calloc((size_t)n, sizeof *m);
    attnd_session_params *p = calloc((size_t)n, sizeof *p);
    attnd_session_image *img = calloc((size_t)n, sizeof *img);
    int rc = -1, held = 0;
    if (!m || !p || !img) {
        snprintf(why, whylen, "out of memory");
        goto out;
    }
    if (ss->n_layers) {
        const attnd_model_group *g = attnd_models_group(ms, ss->model, strlen(ss->model));
        int missing = 0;
        if (!g || g->n_layers != ss->n_layers) {
            snprintf(why, whylen, "no model group %s of %d layers is served", ss->model, ss->n_layers);
            goto out;
        }
        if (attnd_models_group_acquire(ms, g, m, &missing) != 0) {
            snprintf(why, whylen, "layer %d of model group %s is not loaded", missing, ss->model);
            goto out;
        }
    } else if (!(m[0] = attnd_models_find(ms, ss->model, strlen(ss->model)))) {
        snprintf(why, whylen, "no model %s is loaded", ss->model);
        goto out;
    }
    held = 1;
    for (int i = 0; i < n; i++) {
        if (match_cache(st, ss, &ss->caches[i], m[i], memo, &p[i], why, whylen) != 0)
            goto out;
        img[i] = (attnd_session_image){.length = ss->caches[i].length, .rows = ss->caches[i].rows,
                                       .n_blocks = ss->caches[i].n_blocks, .data = ss->caches[i].data};
    }
    attnd_session_params head = p[0];
    if (ss->n_layers) {
        head.model = NULL;
        head.model_name = ss->model;
    }
    attnd_session_error se;
    if (attnd_sessions_restore(st, ss->id, &head, ss->n_layers ? p : NULL, ss->n_layers, img,
                               ss->query_limit, ss->idle_ns, &se) != ATTND_SESSION_OK) {
        snprintf(why, whylen, "%s", se.message);
        goto out;
    }
    held = 0; /* the store's now */
    rc = 0;
out:
    for (int i = 0; held && i < n; i++)
        attnd_model_release(m[i]);
    free(m);
    free(p);
    free(img);
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The whole regular file name of dir_fd, at most cap bytes, malloc'd; NULL with why. */
static unsigned char *read_file(int dir_fd, const char *name, size_t cap, size_t *len, char *why,
                                size_t whylen)
{
    int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat sb;
    unsigned char *buf = NULL;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(why, whylen, "%s", fd < 0 ? strerror(errno) : "not a regular file");
        goto out;
    }
    if ((uint64_t)sb.st_size > cap) {
        snprintf(why, whylen, "%lld bytes, more than the KV cache could hold", (long long)sb.st_size);
        goto out;
    }
    buf = malloc((size_t)sb.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)sb.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (!buf || got != (size_t)sb.st_size) {
        snprintf(why, whylen, "%s", buf ? "short read" : "out of memory");
        free(buf);
        buf = NULL;
        goto out;
    }
    *len = got;
out:
    if (fd >= 0) close(fd);
    return buf;
}

int attnd_persist_load(attnd_sessions *st, attnd_models *ms, const attnd_config *cfg)
{
    int dir_fd = open_dir(cfg->session_dir);
    if (dir_fd < 0) return -1;
    int fd = dup(dir_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        close(dir_fd);
        return -1;
    }
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name), sl = strlen(ATTND_PERSIST_SUFFIX);
        if (e->d_name[0] == '.' || len <= sl || strcmp(e->d_name + len - sl, ATTND_PERSIST_SUFFIX) != 0)
            continue;
        if (n == cap) {
            int c2 = cap ? 2 * cap : 64;
            char **nn = realloc(names, (size_t)c2 * sizeof *nn);
            if (!nn) break;
            names = nn;
            cap = c2;
        }
        if (!(names[n] = strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    if (n > 1) qsort(names, (size_t)n, sizeof *names, by_name);
    size_t pool = 0;
    attnd_sessions_stats(st, NULL, NULL, &pool);
    const size_t max_file = pool + ((size_t)1 << 20);
    hash_memo memo = {0};
    int restored = 0, skipped = 0;
    int64_t t0 = attnd_now_ns();
    for (int i = 0; i < n; i++) {
        char why[400] = "";
        size_t len = 0;
        unsigned char *buf = read_file(dir_fd, names[i], max_file, &len, why, sizeof why);
        attnd_saved_session ss;
        if (!buf) {
            attnd_log(ATTND_LOG_WARN, "session-dir: skipped %s: %s", names[i], why);
            skipped++;
        } else if (attnd_persist_parse(buf, len, &ss, why, sizeof why) != 0) {
            attnd_log(ATTND_LOG_WARN, "session-dir: skipped %s: %s", names[i], why);
            skipped++;
        } else {
            if (restore_one(st, ms, cfg, &ss, &memo, why, sizeof why) == 0) {
                restored++;
            } else {
                attnd_log(ATTND_LOG_WARN, "session-dir: skipped session %s (%s): %s", ss.id, names[i], why);
                skipped++;
            }
            attnd_saved_free(&ss);
        }
        free(buf);
        unlinkat(dir_fd, names[i], 0);
        free(names[i]);
    }
    free(names);
    memo_free(&memo);
    clear_dir(dir_fd); /* leftovers: a stop that died mid-write */
    close(dir_fd);
    attnd_log(ATTND_LOG_INFO, "session-dir %s: restored %d session(s), skipped %d, in %.0f ms",
              cfg->session_dir, restored, skipped, (double)(attnd_now_ns() - t0) / 1e6);
    return restored;
}
