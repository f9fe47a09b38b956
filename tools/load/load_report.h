/* load_report.h — attnd-load's outputs: the table on stdout, and per-level results with the
 * run's parameters as JSON (--json) and CSV (--csv). */
#ifndef ATTND_LOAD_REPORT_H
#define ATTND_LOAD_REPORT_H

#include <stdio.h>

#include "load_args.h"
#include "load_reqgen.h"
#include "load_stats.h"

/* Prints one row per level, then the errors by kind when there were any. */
void load_report_table(FILE *f, const load_stats *lv, size_t n);

/* Write the files; 0, or -1 with err set (a partial file may remain). */
int load_report_json(const char *path, const load_opts *o, const load_model *m,
                     const load_stats *lv, size_t n, char *err, size_t el);
int load_report_csv(const char *path, const load_stats *lv, size_t n, char *err, size_t el);

/* errors / requests over all levels (0 when no requests). */
double load_error_rate(const load_stats *lv, size_t n);

#endif
