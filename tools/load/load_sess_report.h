/* load_sess_report.h — the outputs of attnd-load --sessions: the table on stdout, and the
 * per-level results with the run's parameters as JSON (--json) and CSV (--csv). The SVG is
 * load_svg_sessions_write (load_svg.h). */
#ifndef ATTND_LOAD_SESS_REPORT_H
#define ATTND_LOAD_SESS_REPORT_H

#include <stdio.h>

#include "load_args.h"
#include "load_reqgen.h"
#include "load_session.h"

/* One row per level, the notes, then per level its streams' fate, errors and retries. */
void load_sess_report_table(FILE *f, const load_sess_stats *lv, size_t n);

/* Write the files; 0, or -1 with err set (a partial file may remain). */
int load_sess_report_json(const char *path, const load_opts *o, const load_model *m,
                          const load_sess_stats *lv, size_t n, char *err, size_t el);
int load_sess_report_csv(const char *path, const load_sess_stats *lv, size_t n, char *err,
                         size_t el);

/* errors / calls over all levels (0 when no calls). */
double load_sess_error_rate(const load_sess_stats *lv, size_t n);

#endif
