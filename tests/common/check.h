/* check.h — the few assertion macros every C test uses.
 *
 * A test binary calls CHECK*(...) as often as it likes; each failed check prints
 * file:line and what differed, and counts. check_summary() prints
 * "N checks, N failed" and returns the exit status (0 only when none failed and
 * at least one check ran), so a test can never pass by checking nothing:
 *     int main(void) { ...; return check_summary(); }
 */
#ifndef ATTN_TEST_CHECK_H
#define ATTN_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

extern int check_count;  /* defined in check.c */
extern int check_failed;

#define CHECK(cond)                                                            \
    do {                                                                       \
        check_count++;                                                         \
        if (!(cond)) {                                                         \
            check_failed++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                      \
    } while (0)

#define CHECK_MSG(cond, ...)                                                   \
    do {                                                                       \
        check_count++;                                                         \
        if (!(cond)) {                                                         \
            check_failed++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

#define CHECK_INT_EQ(a, b)                                                     \
    do {                                                                       \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);        \
        CHECK_MSG(check_a_ == check_b_, "%s = %lld, %s = %lld", #a, check_a_, #b, check_b_); \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                  \
    do {                                                                       \
        double check_a_ = (double)(a), check_b_ = (double)(b);                 \
        CHECK_MSG(fabs(check_a_ - check_b_) <= (tol),                          \
                  "%s = %.9g, %s = %.9g, |diff| %.3g > %.3g", #a, check_a_, #b, \
                  check_b_, fabs(check_a_ - check_b_), (double)(tol));         \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                     \
    do {                                                                       \
        const char *check_a_ = (a), *check_b_ = (b);                           \
        CHECK_MSG(check_a_ && check_b_ && strcmp(check_a_, check_b_) == 0,     \
                  "%s = \"%s\", %s = \"%s\"", #a, check_a_ ? check_a_ : "(null)", \
                  #b, check_b_ ? check_b_ : "(null)");                         \
    } while (0)

/* Prints the tally; returns 0 when every check passed and at least one ran. */
int check_summary(void);

#endif
