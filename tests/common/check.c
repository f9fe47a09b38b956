/* check.c — tallies for the assertion macros in check.h, and the named cases:
 * which run (TEST_CASE), one line per case, and the closing summary.
 */
#include "check.h"

#include <stdlib.h>

int check_count = 0;
int check_failed = 0;

#define MAX_CASES 256
#define MAX_WANTED 64

static const char *case_names[MAX_CASES]; /* every case main reached, in order */
static int n_cases;
static int n_ran;
static int case_dup; /* a name registered twice (TEST_CASE could not tell them apart) */
static const char *current;       /* the running case, or NULL (main, setup) */
static int current_count0, current_failed0;

/* TEST_CASE, split at commas (spaces around names ignored). */
static char wanted_buf[1024];
static const char *wanted[MAX_WANTED];
static int n_wanted = -1; /* -1: not parsed yet; 0: TEST_CASE unset or empty */
static int wanted_bad;    /* TEST_CASE too long or with too many names */

static void parse_wanted(void)
{
    if (n_wanted >= 0) return;
    n_wanted = 0;
    const char *env = getenv("TEST_CASE");
    if (env == NULL || *env == '\0') return;
    if (strlen(env) >= sizeof wanted_buf) {
        wanted_bad = 1;
        return;
    }
    strcpy(wanted_buf, env);
    for (char *p = wanted_buf; *p != '\0';) {
        char *end = p + strcspn(p, ",");
        int last = *end == '\0';
        *end = '\0';
        while (*p == ' ' || *p == '\t') p++;
        for (char *q = end; q > p && (q[-1] == ' ' || q[-1] == '\t');) *--q = '\0';
        if (*p != '\0') {
            if (n_wanted == MAX_WANTED) {
                wanted_bad = 1;
                return;
            }
            wanted[n_wanted++] = p;
        }
        if (last) break;
        p = end + 1;
    }
}

static int is_wanted(const char *name)
{
    for (int i = 0; i < n_wanted; i++)
        if (strcmp(wanted[i], name) == 0) return 1;
    return 0;
}

int check_case_begin(const char *name)
{
    parse_wanted();
    for (int i = 0; i < n_cases; i++)
        if (strcmp(case_names[i], name) == 0) {
            fprintf(stderr, "case %s: a second case with this name (case names must be unique)\n",
                    name);
            case_dup = 1;
        }
    if (n_cases < MAX_CASES) case_names[n_cases++] = name;
    if (wanted_bad || (n_wanted > 0 && !is_wanted(name))) return 0;
    fflush(stdout);
    current = name;
    current_count0 = check_count;
    current_failed0 = check_failed;
    n_ran++;
    return 1;
}

void check_case_end(void)
{
    int count = check_count - current_count0, failed = check_failed - current_failed0;
    if (count == 0) {
        check_failed++;
        failed = 1;
    }
    fflush(stdout);
    if (failed == 0)
        printf("case %s: ok (%d checks)\n", current, count);
    else if (count == 0)
        printf("case %s: FAILED (no checks ran: a case that checks nothing fails)\n", current);
    else
        printf("case %s: FAILED (%d of %d checks failed)\n", current, failed, count);
    fflush(stdout);
    current = NULL;
}

void check_fail_at(const char *file, int line, const char *cond)
{
    check_failed++;
    fflush(stdout); /* what the case printed so far comes first */
    fprintf(stderr, "%s:%d: [%s] CHECK failed: %s", file, line, current ? current : "main", cond);
}

/* The binary's case names, for a TEST_CASE that matched none. */
static void list_cases(void)
{
    fprintf(stderr, "this binary's cases (%d):", n_cases);
    for (int i = 0; i < n_cases; i++) fprintf(stderr, "%s %s", i ? "," : "", case_names[i]);
    fputc('\n', stderr);
}

int check_summary(void)
{
    parse_wanted();
    int bad_filter = 0;
    if (wanted_bad) {
        fprintf(stderr, "TEST_CASE is too long or names more than %d cases\n", MAX_WANTED);
        bad_filter = 1;
    }
    for (int i = 0; i < n_wanted; i++) {
        int found = 0;
        for (int j = 0; j < n_cases && !found; j++) found = strcmp(wanted[i], case_names[j]) == 0;
        if (!found) {
            fprintf(stderr, "TEST_CASE: no case named \"%s\" in this binary\n", wanted[i]);
            bad_filter = 1;
        }
    }
    if (bad_filter) list_cases();
    printf("%d cases, %d checks, %d failed\n", n_ran, check_count, check_failed);
    if (check_count == 0) {
        fprintf(stderr, "no checks ran: a test that checks nothing fails\n");
        return 1;
    }
    return check_failed == 0 && !bad_filter && !case_dup ? 0 : 1;
}
