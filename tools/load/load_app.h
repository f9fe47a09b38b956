/* load_app.h — attnd-load as a function: parse, ask the model's widths, build the pool, run the
 * sweep, report. main.c only calls this. */
#ifndef ATTND_LOAD_APP_H
#define ATTND_LOAD_APP_H

/* Exit statuses (documented in --help and README). */
enum {
    LOAD_EXIT_OK = 0,
    LOAD_EXIT_ERRORS = 1, /* error rate above --max-error-rate, or nothing succeeded */
    LOAD_EXIT_USAGE = 2,
    LOAD_EXIT_SETUP = 3,  /* server unreachable, unknown model, unreadable file, cannot write */
    LOAD_EXIT_LATE = 4,   /* a level's late fraction above --max-late-fraction */
};

/* Runs attnd-load with argv; returns the exit status. Output on stdout/stderr. */
int load_app_main(int argc, char **argv);

#endif
