/* check.h — named test cases and the few assertion macros every C test uses.
 *
 * A test binary is a list of named cases, run by main in order:
 *
 *     TEST(decode_ragged) { CHECK_INT_EQ(decode(...), 0); ... }
 *     TEST_WITH(streams, const attnd_proc *p) { ... }    // a case taking arguments
 *     int main(void)
 *     {
 *         RUN(decode_ragged);
 *         RUN_WITH(streams, &proc);                        // setup may stay in main
 *         return check_summary();
 *     }
 *
 * Each case prints one line, "case NAME: ok (N checks)" or
 * "case NAME: FAILED (F of N checks failed)"; a case that runs no check fails.
 * Each failed CHECK prints file:line, the running case and what differed.
 * TEST_CASE=name (or a comma-separated list) in the environment runs only those
 * cases; a name that matches no case of the binary fails the run, and the
 * binary's case names are listed. check_summary() prints
 * "N cases, N checks, N failed" and returns the exit status: 0 only when no
 * check failed, at least one check ran, and every TEST_CASE name matched.
 * CHECK may also be used in main (setup) and in helpers; it is not
 * thread-safe (the counters are plain ints).
 */
#ifndef ATTN_TEST_CHECK_H
#define ATTN_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

extern int check_count;  /* defined in check.c */
extern int check_failed;

/* Defines the case `name` (a static function with no arguments / with the
 * given parameters); the body follows in braces. */
#define TEST(name) static void check_case_##name(void)
#define TEST_WITH(name, ...) static void check_case_##name(__VA_ARGS__)

/* Runs the case `name` (with the given arguments) unless TEST_CASE leaves it out. */
#define RUN(name)                                                              \
    do {                                                                       \
        if (check_case_begin(#name)) {                                         \
            check_case_##name();                                               \
            check_case_end();                                                  \
        }                                                                      \
    } while (0)
#define RUN_WITH(name, ...)                                                    \
    do {                                                                       \
        if (check_case_begin(#name)) {                                         \
            check_case_##name(__VA_ARGS__);                                    \
            check_case_end();                                                  \
        }                                                                      \
    } while (0)

/* What RUN uses: begin registers the name and returns 1 when the case is to
 * run (TEST_CASE unset or naming it), 0 when it is skipped; end prints the
 * case's line. */
int check_case_begin(const char *name);
void check_case_end(void);

/* Counts a failure and prints "file:line: [case] CHECK failed: cond" without
 * the newline (the macros add the details and the newline). */
void check_fail_at(const char *file, int line, const char *cond);

#define CHECK(cond)                                                            \
    do {                                                                       \
        check_count++;                                                         \
        if (!(cond)) {                                                         \
            check_fail_at(__FILE__, __LINE__, #cond);                          \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

#define CHECK_MSG(cond, ...)                                                   \
    do {                                                                       \
        check_count++;                                                         \
        if (!(cond)) {                                                         \
            check_fail_at(__FILE__, __LINE__, #cond);                          \
            fputs(": ", stderr);                                               \
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

/* Prints the tally; returns 0 when every check passed, at least one ran, and
 * every name in TEST_CASE matched a case. */
int check_summary(void);

#endif
