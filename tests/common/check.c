/* check.c — tallies for the assertion macros in check.h. */
#include "check.h"

int check_count = 0;
int check_failed = 0;

int check_summary(void)
{
    printf("%d checks, %d failed\n", check_count, check_failed);
    if (check_count == 0) {
        fprintf(stderr, "no checks ran: a test that checks nothing fails\n");
        return 1;
    }
    return check_failed == 0 ? 0 : 1;
}
