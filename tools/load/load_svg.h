/* load_svg.h — attnd-load's --svg chart, drawn by hand: throughput (req/s, left axis) and p99
 * latency (ms, right axis) against concurrency or offered rate on a log2 x axis. */
#ifndef ATTND_LOAD_SVG_H
#define ATTND_LOAD_SVG_H

#include <stdio.h>

#include "load_session.h"
#include "load_stats.h"

/* Writes a standalone SVG document for the n levels to f. subtitle (may be NULL) is shown
 * under the title, XML-escaped. */
void load_svg_print(FILE *f, const load_stats *lv, size_t n, const char *subtitle);

/* load_svg_print into a file; 0, or -1 with err set. */
int load_svg_write(const char *path, const load_stats *lv, size_t n, const char *subtitle,
                   char *err, size_t el);

/* --sessions: decode tokens/s (left axis, solid) and mean time per output token (right axis,
 * dashed) against time since the decode phase began, in LOAD_SVG_BINS bins, one colour per
 * level. A bin only partly covered by a level's decode phase counts if at least half is. */
#define LOAD_SVG_BINS 40
void load_svg_sessions_print(FILE *f, const load_sess_stats *lv, size_t n, const char *subtitle);
int load_svg_sessions_write(const char *path, const load_sess_stats *lv, size_t n,
                            const char *subtitle, char *err, size_t el);

/* A "nice" axis step (1, 2 or 5 times a power of ten) giving about `ticks` steps up to max. */
double load_nice_step(double max, int ticks);

#endif
