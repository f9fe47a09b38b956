/* load_runner.h — runs one level of load against attnd over libcurl's multi interface on the
 * calling thread (no thread per connection): closed loop with N requests always in flight, or
 * open loop on a fixed schedule of R requests/s (latency counted from the scheduled time). */
#ifndef ATTND_LOAD_RUNNER_H
#define ATTND_LOAD_RUNNER_H

#include <stddef.h>

#include "load_args.h"
#include "load_reqgen.h"
#include "load_stats.h"

typedef struct load_runner load_runner;

/* Asks GET {url}/v1/models/{model} (or, without --model, the one model of GET /v1/models)
 * for the model's widths. Returns 0, or -1 with err set. */
int load_fetch_model(const load_opts *o, load_model *m, char *err, size_t el);

/* Sets up curl and the connection slots. o and pool are borrowed for the runner's life.
 * Returns NULL with err set on failure. Free with load_runner_free. */
load_runner *load_runner_new(const load_opts *o, const load_pool *pool, char *err, size_t el);
void load_runner_free(load_runner *r);

/* Runs one level: warm-up (not recorded), then the measured window (--duration or --requests),
 * then waits for the window's requests to finish. level is a concurrency, or a rate when
 * o->is_rate. Fills *st (zeroed first; caller frees with load_stats_free) including the derived
 * fields. label names the level on the progress line. Returns 0, -1 on a setup failure
 * (err set), or 1 when interrupted by load_runner_stop (st then holds what was measured). */
int load_run_level(load_runner *r, double level, load_stats *st, char *err, size_t el);

/* Async-signal-safe: asks the running level to stop issuing and finish. */
void load_runner_stop(void);

#endif
