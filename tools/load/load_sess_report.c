/* load_sess_report.c — attnd-load --sessions: table, JSON and CSV. */
#include "load_sess_report.h"

#include <jansson.h>
#include <string.h>

double load_sess_error_rate(const load_sess_stats *lv, size_t n)
{
    long calls = 0, errs = 0;
    for (size_t i = 0; i < n; i++) {
        calls += lv[i].calls;
        errs += lv[i].errors;
    }
    return calls ? (double)errs / (double)calls : 0.0;
}

static void put_counts(FILE *f, const load_counts *c)
{
    for (size_t k = 0; k < c->n; k++) fprintf(f, " %s=%ld", c->v[k].name, c->v[k].n);
    if (c->other) fprintf(f, " other=%ld", c->other);
}

void load_sess_report_table(FILE *f, const load_sess_stats *lv, size_t n)
{
    fprintf(f, "%8s %6s %6s %10s %8s %8s %8s %8s %8s %7s %7s %6s %9s %8s %8s %6s\n", "sessions",
            "prefix", "steps", "tokens/s", "/stream", "tpot p50", "p90 ms", "p99 ms", "max ms",
            "queue", "compute", "batch", "prefill50", "max ms", "total s", "errors");
    for (size_t i = 0; i < n; i++) {
        const load_sess_stats *s = &lv[i];
        fprintf(f,
                "%8d %6d %6d %10.1f %8.1f %8.2f %8.2f %8.2f %8.2f %7.2f %7.2f %6.2f %9.2f %8.2f "
                "%8.3f %6ld\n",
                s->sessions, s->prefix, s->steps, s->decode_tokens_per_s, s->stream_tokens_per_s,
                s->tpot_p50_ms, s->tpot_p90_ms, s->tpot_p99_ms, s->tpot_max_ms, s->queue_ms,
                s->compute_ms, s->mean_batch, s->prefill_p50_ms, s->prefill_max_ms,
                s->prefill_total_s, s->errors);
    }
    fputs("tokens/s: successful one-position appends of all streams per second of the decode\n"
          "  phase (from when every stream has prefilled to the last answer); /stream: per stream.\n"
          "tpot: time per output token, client wall time of each decode append (one in flight\n"
          "  per stream; retries included); percentiles exact (nearest rank).\n"
          "queue/compute (ms), batch: server-reported means over the decode appends.\n"
          "prefill50/max: per-stream time to append --prefix positions (ms); total: the prefill\n"
          "  phase, first prefill send to last prefill answer (s).\n",
          f);
    for (size_t i = 0; i < n; i++) {
        const load_sess_stats *s = &lv[i];
        if (s->interleave > 1)
            fprintf(f, "sessions %d: %d per client (--interleave), one request in flight per client\n",
                    s->sessions, s->interleave);
        if (s->prefill_rows)
            fprintf(f, "sessions %d: decode mix: %zu prefills of %d rows during the decode phase: "
                       "ttft p50 %.2f ms, p99 %.2f ms, max %.2f ms; prefill %.1f rows/s while one ran\n",
                    s->sessions, s->n_ttft, s->prefill_rows, s->ttft_p50_ms, s->ttft_p99_ms,
                    s->ttft_max_ms, s->mix_prefill_rows_per_s);
    }
    for (size_t i = 0; i < n; i++) {
        const load_sess_stats *s = &lv[i];
        fprintf(f, "sessions %d: %ld created, %ld prefilled, %ld completed, %ld failed, %ld deleted",
                s->sessions, s->created, s->prefilled, s->completed, s->failed, s->deleted);
        if (s->gone) fprintf(f, ", %ld already gone (evicted/expired)", s->gone);
        if (s->leaked) fprintf(f, ", %ld NOT deleted", s->leaked);
        fprintf(f, "; %lld decode tokens", s->decode_tokens);
        if (s->steps_cut) fprintf(f, ", %ld steps cut (--duration or interrupted)", s->steps_cut);
        if (s->steps_lost) fprintf(f, ", %ld steps not sent (failed streams)", s->steps_lost);
        fprintf(f, "; %ld calls, %ld retries\n", s->calls, s->retries);
        if (s->errors) {
            fprintf(f, "errors at sessions %d:", s->sessions);
            for (int p = 0; p < LOAD_PHASE_COUNT; p++)
                if (s->errors_by_phase[p])
                    fprintf(f, " %s=%ld", load_phase_name((load_phase)p), s->errors_by_phase[p]);
            fputs(" |", f);
            put_counts(f, &s->errors_by_kind);
            fprintf(f, "\n  first: %s\n", s->first_error);
        }
        if (s->retries) {
            fprintf(f, "retries at sessions %d:", s->sessions);
            put_counts(f, &s->retries_by_kind);
            fputc('\n', f);
        }
    }
}

static json_t *counts_json(const load_counts *c)
{
    json_t *o = json_object();
    for (size_t k = 0; o && k < c->n; k++)
        json_object_set_new(o, c->v[k].name, json_integer(c->v[k].n));
    if (o && c->other) json_object_set_new(o, "other", json_integer(c->other));
    return o;
}

/* Sets every (key, value) pair; the values are consumed either way. 0, or -1 when one failed
 * (a NULL value, no object, no memory). */
static int set_all(json_t *o, const char *const *keys, json_t **vals, size_t n)
{
    int rc = o ? 0 : -1;
    for (size_t i = 0; i < n; i++) {
        if (!vals[i]) rc = -1;
        else if (!o) json_decref(vals[i]);
        else if (json_object_set_new(o, keys[i], vals[i])) rc = -1;
    }
    return rc;
}

#define R(x) json_real(x)
#define I(x) json_integer((json_int_t)(x))

static json_t *level_json(const load_sess_stats *s)
{
    json_t *phases = json_object();
    for (int p = 0; phases && p < LOAD_PHASE_COUNT; p++)
        json_object_set_new(phases, load_phase_name((load_phase)p), I(s->errors_by_phase[p]));
    const char *keys[] = {
        "sessions", "prefix", "steps", "created", "prefilled", "completed", "failed", "deleted",
        "already_gone", "leaked", "requests", "ok", "errors", "errors_by_phase", "errors_by_kind",
        "retries", "retries_by_kind", "first_error", "decode_tokens", "decode_elapsed_s",
        "decode_tokens_per_s", "stream_tokens_per_s", "decoding_streams", "tpot_mean_ms",
        "tpot_min_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "tpot_max_ms", "queue_ms",
        "compute_ms", "mean_batch_size", "with_timing", "steps_cut", "steps_lost",
        "prefill_tokens", "prefill_total_s", "prefill_tokens_per_s", "prefill_mean_ms",
        "prefill_p50_ms", "prefill_max_ms", "create_mean_ms", "create_max_ms", "delete_mean_ms",
        "delete_max_ms", "interleave", "mix_prefill_rows", "mix_prefill_rows_total", "mix_prefills", "ttft_p50_ms",
        "ttft_p99_ms", "ttft_max_ms", "mix_prefill_rows_per_s",
    };
    json_t *vals[] = {
        I(s->sessions), I(s->prefix), I(s->steps), I(s->created), I(s->prefilled),
        I(s->completed), I(s->failed), I(s->deleted), I(s->gone), I(s->leaked), I(s->calls),
        I(s->calls - s->errors), I(s->errors), phases, counts_json(&s->errors_by_kind),
        I(s->retries), counts_json(&s->retries_by_kind),
        s->first_error[0] ? json_string(s->first_error) : json_null(), I(s->decode_tokens),
        R(s->decode_elapsed_s), R(s->decode_tokens_per_s), R(s->stream_tokens_per_s),
        I(s->decoding_streams), R(s->tpot_mean_ms), R(s->tpot_min_ms), R(s->tpot_p50_ms),
        R(s->tpot_p90_ms), R(s->tpot_p99_ms), R(s->tpot_max_ms), R(s->queue_ms),
        R(s->compute_ms), R(s->mean_batch), I(s->n_timing), I(s->steps_cut), I(s->steps_lost),
        I(s->prefill_tokens), R(s->prefill_total_s), R(s->prefill_tokens_per_s),
        R(s->prefill_mean_ms), R(s->prefill_p50_ms), R(s->prefill_max_ms), R(s->create_mean_ms),
        R(s->max_create_ms), R(s->delete_mean_ms), R(s->max_delete_ms), I(s->interleave),
        I(s->prefill_rows), I(s->mix_prefill_rows), I(s->n_ttft), R(s->ttft_p50_ms), R(s->ttft_p99_ms), R(s->ttft_max_ms),
        R(s->mix_prefill_rows_per_s),
    };
    _Static_assert(sizeof keys / sizeof *keys == sizeof vals / sizeof *vals, "keys and values");
    json_t *l = json_object();
    if (set_all(l, keys, vals, sizeof keys / sizeof *keys)) {
        json_decref(l);
        return NULL;
    }
    return l;
}

static json_t *params_json(const load_opts *o, const load_model *m)
{
    json_t *levels = json_array();
    for (size_t i = 0; levels && i < o->n_levels; i++)
        json_array_append_new(levels, I(o->levels[i]));
    const char *keys[] = {"url", "model", "mode", "levels", "prefix", "steps", "prefill_chunk",
                          "window", "seed", "pool", "duration_s", "timeout_s", "max_retries",
                          "max_error_rate", "model_dims", "protocol", "binary", "percentiles",
                          "interleave", "prefill_every_s", "prefill_rows"};
    json_t *vals[] = {
        json_string(o->url), json_string(o->model), json_string("sessions"), levels,
        I(o->prefix), I(o->steps), I(o->prefill_chunk), I(o->window), I(o->seed), I(o->pool),
        o->duration_s > 0 ? R(o->duration_s) : json_null(), R(o->timeout_s), I(o->max_retries),
        R(o->max_error_rate),
        json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "embed_q", m->embed_q, "embed_k", m->embed_k,
                  "embed_v", m->embed_v, "embed_out", m->embed_out, "num_heads", m->heads,
                  "layers", m->layers),
        json_string("v1"), json_boolean(o->binary),
        json_string("exact, nearest rank over successful decode appends"), I(o->interleave),
        o->prefill_every_s > 0 ? R(o->prefill_every_s) : json_null(),
        I(o->prefill_every_s > 0 ? o->prefill_rows : 0),
    };
    _Static_assert(sizeof keys / sizeof *keys == sizeof vals / sizeof *vals, "keys and values");
    json_t *p = json_object();
    if (set_all(p, keys, vals, sizeof keys / sizeof *keys)) {
        json_decref(p);
        return NULL;
    }
    return p;
}

int load_sess_report_json(const char *path, const load_opts *o, const load_model *m,
                          const load_sess_stats *lv, size_t n, char *err, size_t el)
{
    json_t *levels = json_array(), *root = NULL;
    long calls = 0, errs = 0, leaked = 0;
    long long tokens = 0;
    int rc = -1;
    for (size_t i = 0; levels && i < n; i++) {
        json_t *l = level_json(&lv[i]);
        if (!l || json_array_append_new(levels, l)) goto done;
        calls += lv[i].calls;
        errs += lv[i].errors;
        leaked += lv[i].leaked;
        tokens += lv[i].decode_tokens;
    }
    root = json_pack("{s:s, s:o, s:o, s:{s:I, s:I, s:f, s:I, s:I}}", "tool", "attnd-load",
                     "params", params_json(o, m), "levels", levels, "total", "requests",
                     (json_int_t)calls, "errors", (json_int_t)errs, "error_rate",
                     load_sess_error_rate(lv, n), "decode_tokens", (json_int_t)tokens, "leaked",
                     (json_int_t)leaked);
    levels = NULL; /* stolen by json_pack ("o"), even on failure */
    if (root && json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) == 0) rc = 0;
done:
    if (rc) snprintf(err, el, "--json: cannot write %s", path);
    json_decref(levels);
    json_decref(root);
    return rc;
}

int load_sess_report_csv(const char *path, const load_sess_stats *lv, size_t n, char *err,
                         size_t el)
{
    load_counts kinds = {0}; /* the union of the levels' error kinds, for the columns */
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < lv[i].errors_by_kind.n; k++)
            load_counts_add(&kinds, lv[i].errors_by_kind.v[k].name, 0);
        if (lv[i].errors_by_kind.other) load_counts_add(&kinds, "other", 0);
    }
    FILE *f = fopen(path, "w");
    if (!f) return snprintf(err, el, "--csv: cannot write %s", path), -1;
    fputs("sessions,prefix,steps,created,prefilled,completed,failed,deleted,already_gone,leaked,"
          "requests,"
          "errors,retries,decode_tokens,decode_elapsed_s,decode_tokens_per_s,stream_tokens_per_s,"
          "tpot_mean_ms,tpot_p50_ms,tpot_p90_ms,tpot_p99_ms,tpot_max_ms,queue_ms,compute_ms,"
          "mean_batch_size,steps_cut,steps_lost,prefill_tokens,prefill_total_s,prefill_p50_ms,"
          "prefill_max_ms",
          f);
    for (int p = 0; p < LOAD_PHASE_COUNT; p++) fprintf(f, ",err_%s", load_phase_name((load_phase)p));
    for (size_t k = 0; k < kinds.n; k++) fprintf(f, ",err_%s", kinds.v[k].name);
    fputc('\n', f);
    for (size_t i = 0; i < n; i++) {
        const load_sess_stats *s = &lv[i];
        fprintf(f,
                "%d,%d,%d,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%lld,%.6f,%.3f,%.3f,%.4f,%.4f,%.4f,"
                "%.4f,%.4f,%.4f,%.4f,%.4f,%ld,%ld,%lld,%.6f,%.4f,%.4f",
                s->sessions, s->prefix, s->steps, s->created, s->prefilled, s->completed,
                s->failed, s->deleted, s->gone, s->leaked, s->calls, s->errors, s->retries,
                s->decode_tokens, s->decode_elapsed_s, s->decode_tokens_per_s,
                s->stream_tokens_per_s, s->tpot_mean_ms, s->tpot_p50_ms, s->tpot_p90_ms,
                s->tpot_p99_ms, s->tpot_max_ms, s->queue_ms, s->compute_ms, s->mean_batch,
                s->steps_cut, s->steps_lost, s->prefill_tokens, s->prefill_total_s,
                s->prefill_p50_ms, s->prefill_max_ms);
        for (int p = 0; p < LOAD_PHASE_COUNT; p++) fprintf(f, ",%ld", s->errors_by_phase[p]);
        for (size_t k = 0; k < kinds.n; k++) {
            const char *name = kinds.v[k].name;
            fprintf(f, ",%ld", strcmp(name, "other") ? load_counts_get(&s->errors_by_kind, name)
                                                     : s->errors_by_kind.other);
        }
        fputc('\n', f);
    }
    if (fclose(f) != 0) return snprintf(err, el, "--csv: cannot write %s", path), -1;
    return 0;
}
