/* test_sessions.c — the session store (server/sessions.c) on its own, with an
 * injected clock: ids, LRU eviction under the byte budget and the count cap, busy
 * sessions never evicted, tombstones (EXPIRED) and their bound, TTL on access and by
 * sweep, delete while an append is in flight, the length limit, and the
 * windowed cache keeping the last window-1 rows in order when it wraps, and ids
 * carrying a replica name.
 */
#include "check.h"
#include "sessions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROW 8 /* row_k = row_v: floats per cached row */
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

static size_t bytes_for(int rows)
{
    return sizeof(attnd_session) + (size_t)rows * 2 * ROW * sizeof(float);
}

static attnd_sessions *make(size_t budget, int max_sessions, int max_length, int tombstones)
{
    attnd_sessions_config c = {.budget_bytes = budget, .max_sessions = max_sessions,
                               .ttl_s = 60, .max_length = max_length, .tombstones = tombstones,
                               .clock_ns = fake_clock, .release_model = count_release};
    return attnd_sessions_create(&c);
}

/* Opens a self session (window w) and appends t rows; copies its id. */
static int open_with(attnd_sessions *st, int w, int t, char id[ATTND_SESSION_ID_MAX + 1])
{
    attnd_session_params p = {.kind = ATTND_SESSION_SELF, .window = w, .row_k = ROW,
                              .row_v = ROW, .model_name = "m", .model = &model_token};
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

/* Budget for exactly two sessions of 16 rows and one empty one. */
TEST(lru_and_busy)
{
    const size_t budget = 2 * bytes_for(16) + bytes_for(0) + 64;
    attnd_sessions *st = make(budget, 100, 1000, 0);
    char a[ID], b[ID], c[ID], d[ID], x[ID];
    size_t bytes;
    int count;
    CHECK_INT_EQ(open_with(st, 0, 16, a), 0);
    fake_now += 1000;
    CHECK_INT_EQ(open_with(st, 0, 16, b), 0);
    fake_now += 1000;
    attnd_sessions_stats(st, &count, &bytes);
    CHECK_INT_EQ(count, 2);
    CHECK_INT_EQ(bytes, 2 * bytes_for(16));
    CHECK_INT_EQ(touch(st, a, 0), 0); /* a becomes the most recently used */
    CHECK_INT_EQ(open_with(st, 0, 16, c), 0); /* room for c: b goes */
    CHECK_INT_EQ(touch(st, b, 0), ATTND_SESSION_EXPIRED);
    CHECK_INT_EQ(touch(st, a, 0), 0);
    CHECK_INT_EQ(touch(st, c, 0), 0);
    CHECK_INT_EQ(released, 1);
    attnd_sessions_stats(st, &count, &bytes);
    CHECK_INT_EQ(count, 2);
    CHECK(bytes <= budget);

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
    CHECK_INT_EQ(touch(st, x, 0), 0); /* x exists (its header fitted), just holds no rows */
    attnd_sessions_release(st, sd, 0, NULL, NULL);
    attnd_sessions_release(st, sa, 0, NULL, NULL);
    CHECK_INT_EQ(touch(st, a, 0), 0);
    CHECK_INT_EQ(touch(st, d, 0), 0);

    /* One session alone over the budget: TOO_LARGE, nobody evicted. */
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
    attnd_sessions_stats(st, &count, NULL);
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
    attnd_session_params p = {.kind = ATTND_SESSION_SELF, .ttl_s = 5, .row_k = ROW,
                              .row_v = ROW, .model = &model_token};
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
    attnd_sessions_stats(st, &count, NULL);
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
    attnd_sessions_stats(st, NULL, &bytes);
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
    attnd_session_params p = {.kind = ATTND_SESSION_SELF, .window = 21, .row_k = ROW,
                              .row_v = ROW};
    attnd_session *s;
    CHECK_INT_EQ(attnd_sessions_open(st, &p, &s, &e), ATTND_SESSION_INVALID);
    CHECK_STR_EQ(e.field, "window");
    attnd_sessions_free(st);
    released = 0;
}

/* Window 3, steps of 1 and 2: after every append the cache holds, in order, the
 * positions length-rows .. length-1, and at least the last 2 (window - 1). The
 * "compute" writes each new row as its position number, as the library would. */
TEST(window_wrap)
{
    attnd_sessions *st = make(1 << 20, 16, 100, 0);
    attnd_session_params p = {.kind = ATTND_SESSION_SELF, .window = 3, .row_k = ROW,
                              .row_v = ROW};
    attnd_session *s;
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_open(st, &p, &s, &e), 0);
    char id[ID];
    memcpy(id, s->id, sizeof id);
    attnd_sessions_release(st, s, 0, NULL, NULL);
    int bad = 0, max_rows = 0, wraps = 0;
    for (int step = 0; step < 40; step++) {
        int t = step % 3 == 2 ? 2 : 1;
        CHECK_INT_EQ(attnd_sessions_acquire(st, id, &s, &e), 0);
        int before = s->rows;
        CHECK_INT_EQ(attnd_sessions_reserve(st, s, t, &e), 0);
        wraps += s->rows < before;
        bad += s->rows + t > s->cap;
        for (int i = 0; i < t; i++)
            for (int k = 0; k < ROW; k++) {
                s->cache_k[(size_t)(s->rows + i) * ROW + k] = (float)(s->length + i);
                s->cache_v[(size_t)(s->rows + i) * ROW + k] = (float)-(s->length + i);
            }
        int64_t length;
        int rows;
        attnd_sessions_release(st, s, t, &length, &rows);
        if (rows > max_rows) max_rows = rows;
        bad += rows < (length < 2 ? length : 2);
        for (int i = 0; i < rows; i++)
            bad += s->cache_k[(size_t)i * ROW] != (float)(length - rows + i) ||
                   s->cache_v[(size_t)i * ROW + ROW - 1] != (float)-(length - rows + i);
    }
    CHECK_INT_EQ(bad, 0);
    CHECK(wraps >= 5);
    CHECK(max_rows <= 6); /* 2 * window */
    attnd_sessions_free(st);
}

TEST(cross)
{
    attnd_sessions *st = make(bytes_for(10) + 10, 16, 100, 0);
    attnd_session_params p = {.kind = ATTND_SESSION_CROSS, .rows = 10, .row_k = ROW,
                              .row_v = ROW};
    attnd_session *s;
    attnd_session_error e;
    CHECK_INT_EQ(attnd_sessions_open(st, &p, &s, &e), 0);
    CHECK(s->cache_k && s->cache_v);
    CHECK_INT_EQ(s->rows, 10);
    CHECK_INT_EQ(attnd_sessions_reserve(st, s, 50, &e), 0); /* reads only: no room needed */
    int64_t length;
    int rows;
    attnd_sessions_release(st, s, 7, &length, &rows);
    CHECK_INT_EQ(length, 7);
    CHECK_INT_EQ(rows, 10);
    p.rows = 11; /* alone over the budget */
    CHECK_INT_EQ(attnd_sessions_open(st, &p, &s, &e), ATTND_SESSION_TOO_LARGE);
    CHECK_INT_EQ(e.result, ATTND_SESSION_TOO_LARGE);
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
    attnd_sessions_config c = {.budget_bytes = 1 << 20, .max_sessions = 2, .ttl_s = 60,
                               .max_length = 100, .clock_ns = fake_clock,
                               .replica_name = "R1"};
    CHECK(attnd_sessions_create(&c) == NULL);
    char name[] = "attnd-2";
    c.replica_name = name;
    attnd_sessions *st = attnd_sessions_create(&c);
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

int main(void)
{
    fake_now = INT64_C(1000) * 1000000000;
    RUN(ids);
    RUN(lru_and_busy);
    RUN(max_sessions_and_tombstones);
    RUN(ttl);
    RUN(delete_while_busy);
    RUN(length_limit);
    RUN(window_wrap);
    RUN(cross);
    RUN(replica_ids);
    return check_summary();
}
