/* test_sessions.c — the session store (server/engine/sessions.c) on its own, with an
 * injected clock: ids, LRU eviction when the page pool or the count cap is
 * full, exact page accounting, busy sessions never evicted, tombstones
 * (EXPIRED) and their bound, TTL on access and by sweep, delete while an
 * append is in flight, the length limit, the windowed cache giving back dead
 * leading blocks and keeping the last window-1 rows in order, and forks
 * sharing pages copy-on-write (counted once, the shared tail copied on the
 * first append, neither side ever seeing the other's rows), and ids carrying a
 * replica name. Sequence sessions (one session, a cache per layer): layers
 * appended in order (OUT_OF_ORDER otherwise), evicted, forked and counted
 * whole; sessions walked (foreach) and restored under their ids, rows intact.
 */
#include "check.h"
#include "engine/sessions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROW 8   /* floats per cached row of K and of V */
#define BLOCK 4 /* rows per block */
#define KB ((size_t)BLOCK * ROW * sizeof(float)) /* bytes of a block of K (and of V) */
#define PAGE (2 * KB)
#define ID (ATTND_SESSION_ID_MAX + 1)

static int64_t fake_now;
static int64_t fake_clock(void *ctx)
{
    (void)ctx;
    return fake_now;
}

static int released;
static void count_release(void *model)
{
    (void)model;
    released++;
}

static int model_token; /* any non-NULL pointer stands for a model reference */

/* Pool bytes for n pages. */
static size_t pages(int n) { return (size_t)n * PAGE; }

static attnd_sessions *make(size_t budget, int max_sessions, int max_length, int tombstones)
{
    attnd_sessions_config c = {.budget_bytes = budget, .page_bytes = PAGE, .max_sessions = max_sessions,
                               .ttl_s = 60, .max_length = max_length, .tombstones = tombstones,
                               .clock_ns = fake_clock, .release_model = count_release};
    char err[200];
    attnd_sessions *st = attnd_sessions_create(&c, err, sizeof err);
    CHECK_MSG(st != NULL, "create: %s", err);
    return st;
}

/* Params of a session of the test geometry. */
static attnd_session_params params(attnd_session_kind kind, int window)
{
    return (attnd_session_params){.kind = kind, .window = window, .block_rows = BLOCK, .k_block_bytes = KB,
                                  .v_block_bytes = KB, .model_name = "m", .model = &model_token};
}

/* Row i of session s's K (which 0) or V cache, as the library would address it. */
static float *row_of(attnd_sessions *st, const attnd_session *s, int which, int i)
{
    attnd_session_kv kv;
    attnd_sessions_kv(st, s, &kv);
    char *base = which ? kv.v : kv.k;
    return (float *)(base + (size_t)kv.table[i / kv.block_rows] * kv.stride) + (size_t)(i % kv.block_rows) * ROW;
}

/* The "compute" of an append: rows [s->rows, s->rows + t) get their position
 * (and its negation in V), as the library would write them. */
static void write_rows(attnd_sessions *st, attnd_session *s, int t, float tag)
{
    for (int i = 0; i < t; i++)
        for (int k = 0; k < ROW; k++) {
            row_of(st, s, 0, s->rows + i)[k] = tag + (float)(s->length + i);
            row_of(st, s, 1, s->rows + i)[k] = -(tag + (float)(s->length + i));
        }
}

/* Opens a self session (window w) and appends t rows; copies its id. */
static int open_with(attnd_sessions *st, int w, int t, char id[ATTND_SESSION_ID_MAX + 1])
{
    attnd_session_params p = params(ATTND_SESSION_SELF, w);
    attnd_session *s;
    attnd_session_error e;
    if (attnd_sessions_open(st, &p, &s, &e) != 0) {
        fprintf(stderr, "open: %d %s %s\n", (int)e.result, e.field, e.message);
        return (int)e.result;
    }
    memcpy(id, s->id, sizeof s->id);
    int rc = t ? attnd_sessions_reserve(st, s, t, &e) : 0;
    attnd_sessions_release(st, s, rc == 0 ? t : 0, NULL, NULL);
    return rc == 0 ? 0 : (int)e.result;
}

/* Acquires and releases id (one append of t rows). Returns 0 (OK) or the store's result. */
static int touch(attnd_sessions *st, const char *id, int t)
{
    attnd_session *s;
    attnd_session_error e;
    if (attnd_sessions_acquire(st, id, &s, &e) != 0) return (int)e.result;
    int rc = t ? attnd_sessions_reserve(st, s, t, &e) : 0;
    attnd_sessions_release(st, s, rc == 0 ? t : 0, NULL, NULL);
    return rc == 0 ? 0 : (int)e.result;
}

TEST(ids)
{
    attnd_sessions *st = make(1 << 20, 16, 100, 0);
    char a[ID], b[ID];
    CHECK_INT_EQ(open_with(st, 0, 0, a), 0);
    CHECK_INT_EQ(open_with(st, 0, 0, b), 0);
    CHECK_INT_EQ(strlen(a), ATTND_SESSION_ID_HEX); /* no replica name: bare hex */
    CHECK_INT_EQ(strspn(a, "0123456789abcdef"), ATTND_SESSION_ID_HEX);
    CHECK(strcmp(a, b) != 0);
    attnd_session_info info;
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_get(st, "not-an-id", &info, &e), ATTND_SESSION_NOT_FOUND);
    CHECK_INT_EQ(e.result, ATTND_SESSION_NOT_FOUND);
    CHECK_STR_EQ(e.field, "id");
    CHECK_INT_EQ(attnd_sessions_get(st, "0123456789abcdef0123456789abcdef", &info, &e),
                 ATTND_SESSION_NOT_FOUND);
    CHECK_INT_EQ(e.result, ATTND_SESSION_NOT_FOUND);
    attnd_sessions_free(st);
    CHECK_INT_EQ(released, 2);
    released = 0;
}

/* A pool of 8 pages: two sessions of 16 rows (4 pages each) fill it. */
TEST(lru_and_busy)
{
    const size_t budget = pages(8) + PAGE / 2; /* the half page is no page */
    attnd_sessions *st = make(budget, 100, 1000, 0);
    char a[ID], b[ID], c[ID], d[ID], x[ID];
    size_t bytes;
    int count;
    CHECK_INT_EQ(open_with(st, 0, 16, a), 0);
    fake_now += 1000;
    CHECK_INT_EQ(open_with(st, 0, 16, b), 0);
    fake_now += 1000;
    attnd_sessions_stats(st, &count, &bytes, NULL);
    CHECK_INT_EQ(count, 2);
    CHECK_INT_EQ(bytes, pages(8));
    size_t cap;
    attnd_sessions_stats(st, NULL, NULL, &cap);
    CHECK_INT_EQ(cap, pages(8));
    CHECK_INT_EQ(touch(st, a, 0), 0); /* a becomes the most recently used */
    CHECK_INT_EQ(open_with(st, 0, 16, c), 0); /* room for c: b goes */
    CHECK_INT_EQ(touch(st, b, 0), ATTND_SESSION_EXPIRED);
    CHECK_INT_EQ(touch(st, a, 0), 0);
    CHECK_INT_EQ(touch(st, c, 0), 0);
    CHECK_INT_EQ(released, 1);
    attnd_sessions_stats(st, &count, &bytes, NULL);
    CHECK_INT_EQ(count, 2);
    CHECK_INT_EQ(bytes, pages(8));

    /* a is least recently used but busy: c goes instead. */
    attnd_session *sa;
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_acquire(st, a, &sa, &e), 0);
    CHECK_INT_EQ(touch(st, a, 0), ATTND_SESSION_BUSY);
    CHECK_INT_EQ(open_with(st, 0, 16, d), 0);
    CHECK_INT_EQ(touch(st, c, 0), ATTND_SESSION_EXPIRED);
    /* Now a is busy and d is the only other: hold d too, and nothing can be evicted. */
    attnd_session *sd;
    CHECK_INT_EQ(attnd_sessions_acquire(st, d, &sd, &e), 0);
    CHECK_INT_EQ(open_with(st, 0, 16, x), ATTND_SESSION_CACHE_FULL);
    CHECK_INT_EQ(touch(st, x, 0), 0); /* x exists, just holds no rows (no pages) */
    attnd_sessions_release(st, sd, 0, NULL, NULL);
    attnd_sessions_release(st, sa, 0, NULL, NULL);
    CHECK_INT_EQ(touch(st, a, 0), 0);
    CHECK_INT_EQ(touch(st, d, 0), 0);

    /* One session alone over the pool: TOO_LARGE, nobody evicted. */
    CHECK_INT_EQ(touch(st, x, 1000), ATTND_SESSION_TOO_LARGE);
    CHECK_INT_EQ(touch(st, a, 0), 0);
    CHECK_INT_EQ(touch(st, d, 0), 0);
    attnd_sessions_free(st);
    released = 0;
}

TEST(max_sessions_and_tombstones)
{
    attnd_sessions *st = make(1 << 20, 2, 100, 2);
    char id[5][ID];
    for (int i = 0; i < 5; i++) {
        CHECK_INT_EQ(open_with(st, 0, 1, id[i]), 0);
        fake_now += 1000;
    }
    int count;
    attnd_sessions_stats(st, &count, NULL, NULL);
    CHECK_INT_EQ(count, 2);
    CHECK_INT_EQ(touch(st, id[4], 0), 0);
    CHECK_INT_EQ(touch(st, id[3], 0), 0);
    /* id[0..2] were evicted in that order; only the last 2 are remembered. */
    CHECK_INT_EQ(touch(st, id[2], 0), ATTND_SESSION_EXPIRED);
    CHECK_INT_EQ(touch(st, id[1], 0), ATTND_SESSION_EXPIRED);
    CHECK_INT_EQ(touch(st, id[0], 0), ATTND_SESSION_NOT_FOUND);
    attnd_sessions_free(st);
    released = 0;
}

TEST(ttl)
{
    attnd_sessions *st = make(1 << 20, 16, 100, 0);
    attnd_session_params p = params(ATTND_SESSION_SELF, 0);
    p.ttl_s = 5;
    attnd_session *s;
    attnd_session_error e;
    char a[ID], b[ID], c[ID];
    CHECK_INT_EQ(attnd_sessions_open(st, &p, &s, &e), 0);
    CHECK_INT_EQ(s->ttl_s, 5);
    memcpy(a, s->id, sizeof a);
    attnd_sessions_release(st, s, 0, NULL, NULL);
    p.ttl_s = 3600; /* capped at the store's 60 */
    CHECK_INT_EQ(attnd_sessions_open(st, &p, &s, &e), 0);
    CHECK_INT_EQ(s->ttl_s, 60);
    memcpy(b, s->id, sizeof b);
    attnd_sessions_release(st, s, 0, NULL, NULL);
    CHECK_INT_EQ(open_with(st, 0, 0, c), 0);

    fake_now += INT64_C(4) * 1000000000;
    attnd_session_info info;
    CHECK_INT_EQ(attnd_sessions_get(st, a, &info, &e), 0);
    CHECK_NEAR(info.idle_s, 4.0, 1e-9);
    CHECK_INT_EQ(touch(st, a, 0), 0); /* use resets the idle clock */
    fake_now += INT64_C(5) * 1000000000 + 1;
    CHECK_INT_EQ(touch(st, a, 0), ATTND_SESSION_EXPIRED); /* expired on access */
    /* A busy session never expires, however long its append takes. */
    CHECK_INT_EQ(attnd_sessions_acquire(st, b, &s, &e), 0);
    fake_now += INT64_C(120) * 1000000000;
    CHECK_INT_EQ(attnd_sessions_sweep(st), 1); /* c, not b */
    attnd_sessions_release(st, s, 0, NULL, NULL);
    CHECK_INT_EQ(touch(st, b, 0), 0);
    CHECK_INT_EQ(touch(st, c, 0), ATTND_SESSION_EXPIRED);
    fake_now += INT64_C(61) * 1000000000;
    CHECK_INT_EQ(attnd_sessions_sweep(st), 1);
    int count;
    attnd_sessions_stats(st, &count, NULL, NULL);
    CHECK_INT_EQ(count, 0);
    CHECK_INT_EQ(released, 3);
    attnd_sessions_free(st);
    released = 0;
}

TEST(delete_while_busy)
{
    attnd_sessions *st = make(1 << 20, 16, 100, 0);
    char a[ID];
    CHECK_INT_EQ(open_with(st, 0, 4, a), 0);
    attnd_session *s;
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_acquire(st, a, &s, &e), 0);
    CHECK_INT_EQ(attnd_sessions_delete(st, a, &e), 0);
    CHECK_INT_EQ(released, 0); /* the append still runs on it */
    CHECK_INT_EQ(attnd_sessions_reserve(st, s, 50, &e), ATTND_SESSION_NOT_FOUND); /* deleted */
    CHECK_INT_EQ(e.result, ATTND_SESSION_NOT_FOUND);
    attnd_session_info info;
    CHECK_INT_EQ(attnd_sessions_get(st, a, &info, &e), ATTND_SESSION_NOT_FOUND);
    CHECK_INT_EQ(e.result, ATTND_SESSION_NOT_FOUND); /* deleted, not evicted: no tombstone */
    attnd_sessions_release(st, s, 1, NULL, NULL);
    CHECK_INT_EQ(released, 1);
    size_t bytes;
    attnd_sessions_stats(st, NULL, &bytes, NULL);
    CHECK_INT_EQ(bytes, 0);
    attnd_sessions_free(st);
    released = 0;
}

TEST(length_limit)
{
    attnd_sessions *st = make(1 << 20, 16, 20, 0);
    char a[ID];
    CHECK_INT_EQ(open_with(st, 0, 15, a), 0);
    CHECK_INT_EQ(touch(st, a, 6), ATTND_SESSION_TOO_LARGE);
    CHECK_INT_EQ(touch(st, a, 5), 0);
    CHECK_INT_EQ(touch(st, a, 1), ATTND_SESSION_TOO_LARGE);
    attnd_session_info info;
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_get(st, a, &info, &e), 0);
    CHECK_INT_EQ(info.length, 20);
    CHECK_INT_EQ(info.rows, 20);
    attnd_session_params p = params(ATTND_SESSION_SELF, 21);
    attnd_session *s;
    CHECK_INT_EQ(attnd_sessions_open(st, &p, &s, &e), ATTND_SESSION_INVALID);
    CHECK_STR_EQ(e.field, "window");
    attnd_sessions_free(st);
    released = 0;
}

/* Window 6, steps of 1..3: after every append the cache holds, in order, the
 * positions length-rows .. length-1, at least the last 5 (window - 1), and
 * whole dead blocks have gone back to the pool (at most window - 1 + BLOCK - 1
 * + t rows, and pages = blocks in use). */
TEST(window_drops_dead_blocks)
{
    attnd_sessions *st = make(pages(64), 16, 100, 0);
    attnd_session_params p = params(ATTND_SESSION_SELF, 6);
    attnd_session *s;
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_open(st, &p, &s, &e), 0);
    char id[ID];
    memcpy(id, s->id, sizeof id);
    attnd_sessions_release(st, s, 0, NULL, NULL);
    int bad = 0, max_rows = 0, drops = 0;
    for (int step = 0; step < 60; step++) {
        int t = 1 + step % 3;
        CHECK_INT_EQ(attnd_sessions_acquire(st, id, &s, &e), 0);
        int before = s->rows;
        CHECK_INT_EQ(attnd_sessions_reserve(st, s, t, &e), 0);
        drops += s->rows < before;
        bad += s->rows + t > s->n_blocks * BLOCK;
        write_rows(st, s, t, 0);
        int64_t length;
        int rows;
        attnd_sessions_release(st, s, t, &length, &rows);
        if (rows > max_rows) max_rows = rows;
        bad += rows < (length < 5 ? length : 5);
        for (int i = 0; i < rows; i++)
            bad += row_of(st, s, 0, i)[0] != (float)(length - rows + i) ||
                   row_of(st, s, 1, i)[ROW - 1] != (float)-(length - rows + i);
        size_t bytes;
        attnd_sessions_stats(st, NULL, &bytes, NULL);
        bad += bytes != pages(s->n_blocks);
    }
    CHECK_INT_EQ(bad, 0);
    CHECK(drops >= 10);
    CHECK(max_rows <= 5 + BLOCK - 1 + 3);
    attnd_sessions_free(st);
}

/* One append of one row to id, written as tag + position. Returns 0 or the store's result. */
static int append_tagged(attnd_sessions *st, const char *id, float tag)
{
    attnd_session *s;
    attnd_session_error e;
    if (attnd_sessions_acquire(st, id, &s, &e) != 0) return (int)e.result;
    int rc = attnd_sessions_reserve(st, s, 1, &e);
    if (rc == 0) write_rows(st, s, 1, tag);
    attnd_sessions_release(st, s, rc == 0 ? 1 : 0, NULL, NULL);
    return rc;
}

/* A fork shares every page (counted once); the first append to either side
 * copies the shared partly filled tail block, never a full one; neither side
 * then sees the other's rows; deleting the parent keeps the child's pages. */
TEST(fork_copy_on_write)
{
    attnd_sessions *st = make(pages(16), 16, 100, 0);
    char a[ID];
    CHECK_INT_EQ(open_with(st, 0, 0, a), 0);
    attnd_session *s, *c;
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_acquire(st, a, &s, &e), 0);
    CHECK_INT_EQ(attnd_sessions_reserve(st, s, 10, &e), 0); /* 10 rows: 2 full blocks + 2 rows */
    write_rows(st, s, 10, 0);
    attnd_sessions_release(st, s, 10, NULL, NULL);
    size_t bytes;
    attnd_sessions_stats(st, NULL, &bytes, NULL);
    CHECK_INT_EQ(bytes, pages(3));

    CHECK_INT_EQ(attnd_sessions_fork(st, a, &c, &e), 0);
    char b[ID];
    memcpy(b, c->id, sizeof b);
    CHECK_INT_EQ(c->rows, 10);
    CHECK_INT_EQ(c->length, 10);
    attnd_sessions_release(st, c, 0, NULL, NULL);
    attnd_sessions_stats(st, NULL, &bytes, NULL);
    CHECK_INT_EQ(bytes, pages(3)); /* shared: counted once */
    attnd_session_info info;
    CHECK_INT_EQ(attnd_sessions_get(st, b, &info, &e), 0);
    CHECK_INT_EQ(info.blocks, 3);
    CHECK_INT_EQ(info.shared_blocks, 3);

    /* The child appends 1 row: its tail block is copied (one page more). */
    CHECK_INT_EQ(append_tagged(st, b, 1000), 0);
    attnd_sessions_stats(st, NULL, &bytes, NULL);
    CHECK_INT_EQ(bytes, pages(4));
    CHECK_INT_EQ(attnd_sessions_get(st, b, &info, &e), 0);
    CHECK_INT_EQ(info.shared_blocks, 2);
    /* The parent appends 1 row: its tail is its own now, no copy, no new page. */
    CHECK_INT_EQ(append_tagged(st, a, 2000), 0);
    attnd_sessions_stats(st, NULL, &bytes, NULL);
    CHECK_INT_EQ(bytes, pages(4));
    /* Each sees the shared prefix and its own row 10. */
    CHECK_INT_EQ(attnd_sessions_acquire(st, a, &s, &e), 0);
    CHECK_INT_EQ(attnd_sessions_acquire(st, b, &c, &e), 0);
    int bad = 0;
    for (int i = 0; i < 10; i++)
        bad += row_of(st, s, 0, i)[0] != (float)i || row_of(st, c, 0, i)[0] != (float)i ||
               row_of(st, c, 1, i)[3] != (float)-i;
    CHECK_INT_EQ(bad, 0);
    CHECK(row_of(st, s, 0, 10)[0] == 2010.0f);
    CHECK(row_of(st, c, 0, 10)[0] == 1010.0f);
    attnd_sessions_release(st, c, 0, NULL, NULL);
    attnd_sessions_release(st, s, 0, NULL, NULL);
    /* Deleting the parent frees only its own tail page. */
    CHECK_INT_EQ(attnd_sessions_delete(st, a, &e), 0);
    attnd_sessions_stats(st, NULL, &bytes, NULL);
    CHECK_INT_EQ(bytes, pages(3));
    CHECK_INT_EQ(attnd_sessions_acquire(st, b, &c, &e), 0);
    CHECK(row_of(st, c, 0, 9)[0] == 9.0f && row_of(st, c, 0, 10)[0] == 1010.0f);
    attnd_sessions_release(st, c, 0, NULL, NULL);
    attnd_sessions_free(st);
    released = 0;
}

/* A pool of 4 pages: a and its fork share 3; evicting the fork frees nothing,
 * so making room for 2 pages takes the parent as well; busy sessions stay. */
TEST(eviction_counts_shared_pages_once)
{
    attnd_sessions *st = make(pages(4), 16, 100, 0);
    char a[ID], b[ID], c[ID];
    CHECK_INT_EQ(open_with(st, 0, 12, a), 0);
    attnd_session *s;
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_fork(st, a, &s, &e), 0);
    memcpy(b, s->id, sizeof b);
    attnd_sessions_release(st, s, 0, NULL, NULL);
    fake_now += 1000;
    CHECK_INT_EQ(touch(st, b, 0), 0); /* b more recent: a is evicted first... */
    CHECK_INT_EQ(open_with(st, 0, 8, c), 0); /* ...but freeing 2 pages needs both */
    CHECK_INT_EQ(touch(st, a, 0), ATTND_SESSION_EXPIRED);
    CHECK_INT_EQ(touch(st, b, 0), ATTND_SESSION_EXPIRED);
    size_t bytes;
    attnd_sessions_stats(st, NULL, &bytes, NULL);
    CHECK_INT_EQ(bytes, pages(2));
    attnd_sessions_free(st);
    released = 0;
}

TEST(cross)
{
    attnd_sessions *st = make(pages(3), 16, 100, 0);
    attnd_session_params p = params(ATTND_SESSION_CROSS, 0);
    p.rows = 10;
    attnd_session *s;
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_open(st, &p, &s, &e), 0);
    CHECK_INT_EQ(s->n_blocks, 3);
    CHECK_INT_EQ(s->rows, 10);
    CHECK_INT_EQ(attnd_sessions_reserve(st, s, 50, &e), 0); /* reads only: no room needed */
    int64_t length;
    int rows;
    attnd_sessions_release(st, s, 7, &length, &rows);
    CHECK_INT_EQ(length, 7);
    CHECK_INT_EQ(rows, 10);
    p.rows = 13; /* alone over the pool */
    CHECK_INT_EQ(attnd_sessions_open(st, &p, &s, &e), ATTND_SESSION_TOO_LARGE);
    CHECK_INT_EQ(e.result, ATTND_SESSION_TOO_LARGE);
    /* a block that does not fit a page is refused */
    p = params(ATTND_SESSION_SELF, 0);
    p.k_block_bytes = PAGE;
    CHECK_INT_EQ(attnd_sessions_open(st, &p, &s, &e), ATTND_SESSION_INTERNAL);
    attnd_sessions_free(st);
}

/* A replica name: ids are NAME.<32 hex>; a bare hex id or another replica's is
 * NOT_FOUND; an evicted named id is EXPIRED; a bad name refuses the store. */
TEST(replica_ids)
{
    CHECK(attnd_replica_name_valid("r1"));
    CHECK(attnd_replica_name_valid("attnd-0"));
    CHECK(attnd_replica_name_valid("a234567890123456789012345678901234567890"));
    static const char *const bad[] = {"", "R1", "r_1", "-r", "r-", "r.1", "a2345678901234567890123456789012345678901"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(!attnd_replica_name_valid(bad[i]), "'%s' accepted", bad[i]);
    attnd_sessions_config c = {.budget_bytes = 1 << 20, .page_bytes = PAGE, .max_sessions = 2, .ttl_s = 60,
                               .max_length = 100, .clock_ns = fake_clock,
                               .replica_name = "R1"};
    char err[200];
    CHECK(attnd_sessions_create(&c, err, sizeof err) == NULL);
    char name[] = "attnd-2";
    c.replica_name = name;
    attnd_sessions *st = attnd_sessions_create(&c, err, sizeof err);
    CHECK_MSG(st != NULL, "create: %s", err);
    name[0] = 'X'; /* the store keeps its own copy */
    char a[ID], b[ID], c2[ID], other[ID + 8];
    CHECK_INT_EQ(open_with(st, 0, 2, a), 0);
    CHECK_INT_EQ(open_with(st, 0, 0, b), 0);
    CHECK_INT_EQ(strlen(a), 8 + ATTND_SESSION_ID_HEX);
    CHECK(strncmp(a, "attnd-2.", 8) == 0);
    CHECK_INT_EQ(strspn(a + 8, "0123456789abcdef"), ATTND_SESSION_ID_HEX);
    CHECK_INT_EQ(touch(st, a, 1), 0);
    attnd_session_info info;
    CHECK_INT_EQ(attnd_sessions_get(st, a, &info, NULL), ATTND_SESSION_OK);
    CHECK_STR_EQ(info.id, a);
    CHECK_INT_EQ(info.length, 3);
    CHECK_INT_EQ(attnd_sessions_get(st, a + 8, &info, NULL), ATTND_SESSION_NOT_FOUND);
    snprintf(other, sizeof other, "attnd-3.%s", a + 8);
    CHECK_INT_EQ(attnd_sessions_get(st, other, &info, NULL), ATTND_SESSION_NOT_FOUND);
    snprintf(other, sizeof other, "%s0", a);
    CHECK_INT_EQ(attnd_sessions_get(st, other, &info, NULL), ATTND_SESSION_NOT_FOUND);
    attnd_session *child;
    CHECK_INT_EQ(attnd_sessions_fork(st, a, &child, NULL), ATTND_SESSION_OK); /* evicts b */
    if (child) {
        CHECK(strncmp(child->id, "attnd-2.", 8) == 0 && strlen(child->id) == strlen(a));
        attnd_sessions_release(st, child, 0, NULL, NULL);
    }
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_get(st, b, &info, &e), ATTND_SESSION_EXPIRED);
    CHECK_MSG(strstr(e.message, b) != NULL, "message names the whole id: %s", e.message);
    CHECK_INT_EQ(open_with(st, 0, 0, c2), 0);
    CHECK(strcmp(c2, a) != 0);
    attnd_sessions_free(st);
}

/* A sequence of n layers, each of the test geometry, its slot held. */
static attnd_session *open_seq(attnd_sessions *st, int n, int window)
{
    attnd_session_params p[4];
    for (int l = 0; l < n; l++)
        p[l] = params(ATTND_SESSION_SELF, window);
    attnd_session *s = NULL;
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_open_group(st, p, n, "g", &s, &e), ATTND_SESSION_OK);
    return s;
}

/* One append of t rows to layer l of sequence id (compute included). Returns 0 or the result. */
static int seq_append(attnd_sessions *st, const char *id, int l, int t)
{
    attnd_session *h, *m;
    attnd_session_error e;
    if (attnd_sessions_acquire(st, id, &h, &e) != 0) return (int)e.result;
    m = attnd_sessions_layer(h, l);
    CHECK(m != NULL && m->group == h && m->layer == l && strcmp(m->id, h->id) == 0);
    int rc = attnd_sessions_reserve(st, m, t, &e);
    if (rc == 0) write_rows(st, m, t, (float)(100 * l));
    attnd_sessions_release(st, m, rc == 0 ? t : 0, NULL, NULL);
    return rc == 0 ? 0 : (int)e.result;
}

TEST(sequence_layers_in_order)
{
    attnd_sessions *st = make(pages(16), 16, 100, 0);
    attnd_session *s = open_seq(st, 3, 0);
    char id[ID];
    memcpy(id, s->id, sizeof id);
    CHECK_INT_EQ(s->n_layers, 3);
    CHECK(attnd_sessions_layer(s, 3) == NULL && attnd_sessions_layer(s, -1) == NULL);
    attnd_sessions_release(st, s, 0, NULL, NULL);
    CHECK_INT_EQ(seq_append(st, id, 1, 1), ATTND_SESSION_OUT_OF_ORDER); /* before layer 0 */
    CHECK_INT_EQ(seq_append(st, id, 0, 2), 0);
    CHECK_INT_EQ(seq_append(st, id, 1, 3), ATTND_SESSION_OUT_OF_ORDER); /* 3 > 2 */
    CHECK_INT_EQ(seq_append(st, id, 1, 2), 0);
    CHECK_INT_EQ(seq_append(st, id, 0, 5), 0); /* layer 0 may run ahead */
    attnd_session_info info;
    int64_t len[4] = {-1, -1, -1, -1};
    int rows[4];
    CHECK_INT_EQ(attnd_sessions_get_layers(st, id, &info, len, rows, 2, NULL), ATTND_SESSION_OK);
    CHECK_INT_EQ(info.n_layers, 3);
    CHECK_INT_EQ(len[0], 7);
    CHECK_INT_EQ(len[1], 2);
    CHECK_INT_EQ(len[2], -1); /* past cap: untouched */
    CHECK_INT_EQ(attnd_sessions_get_layers(st, id, &info, len, rows, 4, NULL), ATTND_SESSION_OK);
    CHECK_INT_EQ(len[2], 0);
    CHECK_INT_EQ(rows[0], 7);
    CHECK_INT_EQ(info.length, 0); /* the last layer's: what every layer holds */
    CHECK_INT_EQ(info.blocks, 2 + 1);
    CHECK_STR_EQ(info.model_name, "g");
    /* a single-layer session has no layers */
    char one[ID];
    CHECK_INT_EQ(open_with(st, 0, 1, one), 0);
    attnd_session *o;
    CHECK_INT_EQ(attnd_sessions_acquire(st, one, &o, NULL), ATTND_SESSION_OK);
    CHECK(attnd_sessions_layer(o, 0) == NULL);
    attnd_sessions_release(st, o, 0, NULL, NULL);
    released = 0;
    attnd_sessions_free(st);
    CHECK_INT_EQ(released, 3 + 1); /* each layer's model reference, and one's */
    released = 0;
}

/* A pool of 5 pages and sequences of 2 one-page layers: a third sequence
 * evicts the least recently used whole; the pool never holds part of one. */
TEST(sequence_evicted_whole)
{
    attnd_sessions *st = make(pages(5), 16, 100, 0);
    char a[ID], b[ID], c[ID];
    attnd_session *s = open_seq(st, 2, 0);
    memcpy(a, s->id, sizeof a);
    attnd_sessions_release(st, s, 0, NULL, NULL);
    s = open_seq(st, 2, 0);
    memcpy(b, s->id, sizeof b);
    attnd_sessions_release(st, s, 0, NULL, NULL);
    for (int l = 0; l < 2; l++) {
        CHECK_INT_EQ(seq_append(st, a, l, 3), 0);
        CHECK_INT_EQ(seq_append(st, b, l, 3), 0);
    }
    s = open_seq(st, 2, 0);
    memcpy(c, s->id, sizeof c);
    attnd_sessions_release(st, s, 0, NULL, NULL);
    CHECK_INT_EQ(seq_append(st, c, 0, 1), 0); /* the fifth page */
    size_t used = 0;
    attnd_sessions_stats(st, NULL, &used, NULL);
    CHECK_INT_EQ(used, pages(5));
    CHECK_INT_EQ(seq_append(st, c, 1, 1), 0); /* evicts a, both its pages */
    attnd_session_info info;
    CHECK_INT_EQ(attnd_sessions_get(st, a, &info, NULL), ATTND_SESSION_EXPIRED);
    CHECK_INT_EQ(attnd_sessions_get(st, b, &info, NULL), ATTND_SESSION_OK);
    CHECK_INT_EQ(info.blocks, 2);
    int count = 0;
    attnd_sessions_stats(st, &count, &used, NULL);
    CHECK_INT_EQ(count, 2);
    CHECK_INT_EQ(used, pages(4));
    /* too large alone: a layer of more rows than the pool's pages hold */
    CHECK_INT_EQ(seq_append(st, b, 0, 6 * BLOCK), ATTND_SESSION_TOO_LARGE);
    /* and a sequence whose layers fit one by one but not together: 413, nothing evicted */
    CHECK_INT_EQ(seq_append(st, b, 0, 2 * BLOCK), 0); /* layer 0: 3 pages (c evicted) */
    CHECK_INT_EQ(attnd_sessions_get(st, c, &info, NULL), ATTND_SESSION_EXPIRED);
    attnd_session_error e;
    attnd_session *h;
    CHECK_INT_EQ(attnd_sessions_acquire(st, b, &h, NULL), ATTND_SESSION_OK);
    CHECK_INT_EQ(attnd_sessions_reserve(st, &h->layers[1], 2 * BLOCK, &e), ATTND_SESSION_TOO_LARGE);
    CHECK_MSG(strstr(e.message, "over its 2 layers") != NULL, "%s", e.message);
    attnd_sessions_release(st, &h->layers[1], 0, NULL, NULL);
    attnd_sessions_free(st);
    released = 0;
}

/* A fork shares every layer's pages; appends to it copy each shared tail. */
TEST(sequence_fork)
{
    attnd_sessions *st = make(pages(16), 16, 100, 0);
    attnd_session *s = open_seq(st, 2, 0);
    char a[ID];
    memcpy(a, s->id, sizeof a);
    attnd_sessions_release(st, s, 0, NULL, NULL);
    for (int l = 0; l < 2; l++)
        CHECK_INT_EQ(seq_append(st, a, l, 2), 0);
    attnd_session *k;
    CHECK_INT_EQ(attnd_sessions_fork(st, a, &k, NULL), ATTND_SESSION_OK);
    char kid[ID];
    memcpy(kid, k->id, sizeof kid);
    CHECK_INT_EQ(k->n_layers, 2);
    CHECK_INT_EQ(k->layers[1].length, 2);
    attnd_sessions_release(st, k, 0, NULL, NULL);
    attnd_session_info info;
    CHECK_INT_EQ(attnd_sessions_get(st, kid, &info, NULL), ATTND_SESSION_OK);
    CHECK_INT_EQ(info.shared_blocks, 2);
    size_t used = 0;
    attnd_sessions_stats(st, NULL, &used, NULL);
    CHECK_INT_EQ(used, pages(2)); /* counted once */
    for (int l = 0; l < 2; l++)
        CHECK_INT_EQ(seq_append(st, kid, l, 1), 0);
    CHECK_INT_EQ(attnd_sessions_get(st, kid, &info, NULL), ATTND_SESSION_OK);
    CHECK_INT_EQ(info.shared_blocks, 0);
    attnd_sessions_stats(st, NULL, &used, NULL);
    CHECK_INT_EQ(used, pages(4));
    /* the parent's rows are its own */
    attnd_session *h;
    CHECK_INT_EQ(attnd_sessions_acquire(st, a, &h, NULL), ATTND_SESSION_OK);
    CHECK_INT_EQ(h->layers[1].rows, 2);
    CHECK(row_of(st, &h->layers[1], 0, 1)[0] == 101.0f);
    attnd_sessions_release(st, h, 0, NULL, NULL);
    CHECK_INT_EQ(attnd_sessions_delete(st, a, NULL), ATTND_SESSION_OK);
    CHECK_INT_EQ(seq_append(st, kid, 0, 1), 0); /* the fork lives on */
    attnd_sessions_free(st);
    released = 0;
}

/* What foreach sees, as images; restore brings them back under the same ids. */
typedef struct saved {
    char id[ID];
    int n_layers, n;
    attnd_session_image img[4];
    unsigned char *data[4];
    int64_t idle;
} saved;

static int save_cb(void *ctx, const attnd_sessions *st, const attnd_session *s, int64_t idle)
{
    saved *sv = ctx;
    sv->n++;
    memcpy(sv->id, s->id, sizeof sv->id);
    sv->n_layers = s->n_layers;
    sv->idle = idle;
    for (int c = 0; c < (s->n_layers ? s->n_layers : 1); c++) {
        const attnd_session *m = s->n_layers ? &s->layers[c] : s;
        attnd_session_kv kv;
        attnd_sessions_kv(st, m, &kv);
        sv->data[c] = malloc((size_t)m->n_blocks * m->block_bytes + 1);
        for (int b = 0; b < m->n_blocks; b++)
            memcpy(sv->data[c] + (size_t)b * m->block_bytes, (char *)kv.k + (size_t)kv.table[b] * kv.stride,
                   m->block_bytes);
        sv->img[c] = (attnd_session_image){.length = m->length, .rows = m->rows, .n_blocks = m->n_blocks,
                                           .data = sv->data[c]};
    }
    return 0;
}

TEST(restore)
{
    attnd_sessions *st = make(pages(16), 16, 100, 0);
    attnd_session *s = open_seq(st, 2, 0);
    char a[ID];
    memcpy(a, s->id, sizeof a);
    attnd_sessions_release(st, s, 0, NULL, NULL);
    CHECK_INT_EQ(seq_append(st, a, 0, 6), 0);
    CHECK_INT_EQ(seq_append(st, a, 1, 5), 0);
    fake_now += INT64_C(7) * 1000000000;
    saved sv = {0};
    CHECK_INT_EQ(attnd_sessions_foreach(st, save_cb, &sv), 1);
    CHECK_INT_EQ(sv.n_layers, 2);
    CHECK(sv.idle == INT64_C(7) * 1000000000);
    attnd_sessions_free(st);
    st = make(pages(16), 16, 100, 0);
    attnd_session_params p[2] = {params(ATTND_SESSION_SELF, 0), params(ATTND_SESSION_SELF, 0)};
    attnd_session_params head = p[0];
    head.model = NULL;
    head.model_name = "g";
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_restore(st, "nonsense", &head, p, 2, sv.img, 0, sv.idle, &e),
                 ATTND_SESSION_INVALID);
    attnd_session_image bad[2] = {sv.img[0], sv.img[1]};
    bad[1].rows = 3 * BLOCK; /* more rows than its blocks hold */
    CHECK_INT_EQ(attnd_sessions_restore(st, sv.id, &head, p, 2, bad, 0, sv.idle, &e), ATTND_SESSION_INVALID);
    CHECK_INT_EQ(attnd_sessions_restore(st, sv.id, &head, p, 2, sv.img, 0, sv.idle, &e), ATTND_SESSION_OK);
    CHECK_INT_EQ(attnd_sessions_restore(st, sv.id, &head, p, 2, sv.img, 0, sv.idle, &e),
                 ATTND_SESSION_INVALID); /* the id is taken now */
    attnd_session_info info;
    int64_t len[2];
    int rows[2];
    CHECK_INT_EQ(attnd_sessions_get_layers(st, a, &info, len, rows, 2, NULL), ATTND_SESSION_OK);
    CHECK_INT_EQ(len[0], 6);
    CHECK_INT_EQ(len[1], 5);
    CHECK(info.idle_s > 6.9 && info.idle_s < 7.1);
    attnd_session *h;
    CHECK_INT_EQ(attnd_sessions_acquire(st, a, &h, NULL), ATTND_SESSION_OK);
    int wrong = 0;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < h->layers[l].rows; i++)
            wrong += row_of(st, &h->layers[l], 0, i)[0] != (float)(100 * l + i) ||
                     row_of(st, &h->layers[l], 1, i)[ROW - 1] != -(float)(100 * l + i);
    CHECK_INT_EQ(wrong, 0);
    attnd_sessions_release(st, h, 0, NULL, NULL);
    CHECK_INT_EQ(seq_append(st, a, 1, 1), 0); /* and it goes on */
    /* no room: restore never evicts */
    attnd_sessions *small = make(pages(2), 16, 100, 0);
    attnd_session *t = open_seq(small, 2, 0); /* holds nothing yet */
    attnd_sessions_release(small, t, 0, NULL, NULL);
    CHECK_INT_EQ(attnd_sessions_restore(small, sv.id, &head, p, 2, sv.img, 0, 0, &e), ATTND_SESSION_CACHE_FULL);
    attnd_sessions_free(small);
    for (int c = 0; c < 2; c++)
        free(sv.data[c]);
    attnd_sessions_free(st);
    released = 0;
}

int main(void)
{
    fake_now = INT64_C(1000) * 1000000000;
    RUN(ids);
    RUN(lru_and_busy);
    RUN(max_sessions_and_tombstones);
    RUN(ttl);
    RUN(delete_while_busy);
    RUN(length_limit);
    RUN(window_drops_dead_blocks);
    RUN(fork_copy_on_write);
    RUN(eviction_counts_shared_pages_once);
    RUN(cross);
    RUN(replica_ids);
    RUN(sequence_layers_in_order);
    RUN(sequence_evicted_whole);
    RUN(sequence_fork);
    RUN(restore);
    return check_summary();
}
