/* test_status.c — attn_status_name and attn_strerror: every status has a
 * distinct name spelled like its enumerator and a description; values outside
 * the enum get "ATTN_UNKNOWN", never NULL.
 */
#include "attn.h"
#include "check.h"

#include <limits.h>
#include <string.h>

/* The last status today. Appending a status makes test_out_of_range fail
 * until this (and the expected names below) are updated. */
#define LAST_STATUS ATTN_ERR_UNSUPPORTED

TEST(names_spelled_like_enumerators)
{
    CHECK_STR_EQ(attn_status_name(ATTN_OK), "ATTN_OK");
    CHECK_STR_EQ(attn_status_name(ATTN_ERR_INVALID_ARG), "ATTN_ERR_INVALID_ARG");
    CHECK_STR_EQ(attn_status_name(ATTN_ERR_SHAPE), "ATTN_ERR_SHAPE");
    CHECK_STR_EQ(attn_status_name(ATTN_ERR_NONFINITE), "ATTN_ERR_NONFINITE");
    CHECK_STR_EQ(attn_status_name(ATTN_ERR_NOMEM), "ATTN_ERR_NOMEM");
    CHECK_STR_EQ(attn_status_name(ATTN_ERR_IO), "ATTN_ERR_IO");
    CHECK_STR_EQ(attn_status_name(ATTN_ERR_FORMAT), "ATTN_ERR_FORMAT");
    CHECK_STR_EQ(attn_status_name(ATTN_ERR_MISSING_TENSOR), "ATTN_ERR_MISSING_TENSOR");
    CHECK_STR_EQ(attn_status_name(ATTN_ERR_DTYPE), "ATTN_ERR_DTYPE");
    CHECK_STR_EQ(attn_status_name(ATTN_ERR_LIMIT), "ATTN_ERR_LIMIT");
    CHECK_STR_EQ(attn_status_name(ATTN_ERR_INTERNAL), "ATTN_ERR_INTERNAL");
    CHECK_STR_EQ(attn_status_name(ATTN_ERR_UNSUPPORTED), "ATTN_ERR_UNSUPPORTED");
}

/* Every value 0..LAST_STATUS: a non-empty "ATTN_" name distinct from every
 * other one and from the unknown name, and a non-empty description. */
TEST(every_status_distinct)
{
    const char *unknown = attn_status_name((attn_status)(LAST_STATUS + 1));
    for (int a = 0; a <= LAST_STATUS; a++) {
        const char *na = attn_status_name((attn_status)a);
        CHECK_MSG(na != NULL && strncmp(na, "ATTN_", 5) == 0 && na[5] != '\0', "status %d: \"%s\"", a,
                  na ? na : "(null)");
        CHECK_MSG(na != NULL && strcmp(na, unknown) != 0, "status %d is named like an unknown one", a);
        const char *d = attn_strerror((attn_status)a);
        CHECK(d != NULL && d[0] != '\0');
        for (int b = a + 1; b <= LAST_STATUS; b++)
            CHECK_MSG(na != NULL && strcmp(na, attn_status_name((attn_status)b)) != 0,
                      "statuses %d and %d share the name \"%s\"", a, b, na ? na : "(null)");
    }
}

TEST(out_of_range)
{
    const int bad[] = {LAST_STATUS + 1, LAST_STATUS + 100, -1, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STR_EQ(attn_status_name((attn_status)bad[i]), "ATTN_UNKNOWN");
        CHECK_STR_EQ(attn_strerror((attn_status)bad[i]), "unknown status");
    }
}

int main(void)
{
    RUN(names_spelled_like_enumerators);
    RUN(every_status_distinct);
    RUN(out_of_range);
    return check_summary();
}
