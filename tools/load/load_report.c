/* load_report.c — attnd-load's table, JSON and CSV outputs. */
#include "load_report.h"

#include <jansson.h>
#include <string.h>

double load_error_rate(const load_stats *lv, size_t n)
{
    long req = 0, err = 0;
    for (size_t i = 0; i < n; i++) {
        req += lv[i].requests;
        err += lv[i].requests - lv[i].ok;
    }
    return req ? (double)err / (double)req : 0.0;
}

/* Open loop: what late and achieved mean, and each level that fell short of its offer. */
static void report_rate_notes(FILE *f, const load_stats *lv, size_t n)
{
    fprintf(f, "late: sent more than %g ms after its scheduled time (all --max-inflight were in "
               "flight, or this client was too busy);\n      its latency counts from the "
               "scheduled time. achieved: requests answered per second (ok or not).\n",
            LOAD_LATE_MS);
    for (size_t i = 0; i < n; i++)
        if (lv[i].short_of_offered)
            fprintf(f, "SHORT at rate %g: achieved %.1f req/s, %.0f%% below the offered rate; "
                       "%ld of %ld requests (%.1f%%) started late, their latency including the "
                       "wait: the server or this client could not keep up\n",
                    lv[i].x, lv[i].achieved_rps, 100 * (1 - lv[i].achieved_rps / lv[i].x),
                    lv[i].late, lv[i].requests, 100 * lv[i].late_fraction);
}

void load_report_table(FILE *f, const load_stats *lv, size_t n)
{
    int rate = n && lv[0].is_rate;
    fprintf(f, "%11s %8s %6s %9s %10s %6s %8s %8s %8s %8s %8s %8s %8s %8s%s\n",
            rate ? "rate(req/s)" : "concurrency", "requests", "errors", "rps", "tokens/s",
            "batch", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "max ms", "queue", "compute",
            "client", rate ? "     late   late%  achieved" : "");
    for (size_t i = 0; i < n; i++) {
        const load_stats *s = &lv[i];
        fprintf(f, "%11g %8ld %6ld %9.1f %10.0f %6.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f",
                s->x, s->requests, s->errors, s->rps, s->tokens_per_s, s->mean_batch, s->p50_ms,
                s->p90_ms, s->p95_ms, s->p99_ms, s->max_ms, s->queue_ms, s->compute_ms,
                s->overhead_ms);
        if (rate)
            fprintf(f, " %8ld %7.1f %9.1f%s", s->late, 100 * s->late_fraction, s->achieved_rps,
                    s->short_of_offered ? " SHORT" : "");
        fputc('\n', f);
    }
    fputs("latency: client wall time per successful request; percentiles exact (nearest rank).\n"
          "queue/compute: server-reported means (ms); client = latency - queue - compute (mean).\n",
          f);
    if (rate) report_rate_notes(f, lv, n);
    for (size_t i = 0; i < n; i++) {
        if (!lv[i].errors) continue;
        fprintf(f, "errors at %s %g:", rate ? "rate" : "concurrency", lv[i].x);
        for (int k = 1; k < LOAD_KIND_COUNT; k++)
            if (lv[i].by_kind[k]) fprintf(f, " %s=%ld", load_kind_name((load_kind)k), lv[i].by_kind[k]);
        fputc('\n', f);
    }
}

static json_t *params_json(const load_opts *o, const load_model *m)
{
    json_t *files = json_array();
    for (size_t i = 0; i < o->n_request_files; i++)
        json_array_append_new(files, json_string(o->request_files[i]));
    json_t *levels = json_array();
    for (size_t i = 0; i < o->n_levels; i++) json_array_append_new(levels, json_real(o->levels[i]));
    json_t *p = json_pack(
        "{s:s, s:s?, s:s, s:o, s:i, s:i, s:b, s:b, s:b, s:i, s:f, s:i, s:i, s:I}", "url", o->url,
        "model", o->model, "mode", o->is_rate ? "open_loop_rate" : "closed_loop_concurrency",
        "levels", levels, "seq_len_min", o->seq_min, "seq_len_max", o->seq_max,
        "seq_len_dist", o->seq_dist_n > 0, "cross", o->cross, "need_weights", o->need_weights,
        "window", o->window, "key_padding", o->key_padding, "batch", o->batch, "pool",
        o->n_request_files ? (int)o->n_request_files : o->pool, "seed", (json_int_t)o->seed);
    json_t *q = json_pack(
        "{s:b, s:i, s:i, s:o, s:f, s:I, s:f, s:f, s:i, s:f, s:{s:i, s:i, s:i, s:i, s:i}, s:s}",
        "causal", o->causal, "key_len_min", o->key_min, "key_len_max", o->key_max,
        "request_files", files, "duration_s", o->duration_s, "requests_per_level",
        (json_int_t)o->requests, "warmup_s", o->warmup_s, "timeout_s", o->timeout_s,
        "max_inflight", o->max_inflight, "max_error_rate", o->max_error_rate, "model_dims",
        "embed_q", m->embed_q, "embed_k", m->embed_k, "embed_v", m->embed_v, "embed_out",
        m->embed_out, "num_heads", m->heads, "percentiles", "exact, nearest rank over successes");
    if (q && (json_object_set_new(q, "protocol", json_string(o->protocol == 2 ? "v2" : "v1")) ||
              json_object_set_new(q, "binary", json_boolean(o->binary)))) {
        json_decref(q);
        q = NULL;
    }
    if (!p || !q || json_object_update(p, q)) {
        json_decref(p);
        p = NULL;
    }
    json_decref(q);
    return p;
}

static json_t *level_json(const load_stats *s)
{
    json_t *kinds = json_object();
    for (int k = 1; k < LOAD_KIND_COUNT; k++)
        json_object_set_new(kinds, load_kind_name((load_kind)k), json_integer(s->by_kind[k]));
    json_t *l = json_pack(
        "{s:f, s:I, s:I, s:I, s:o, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
        s->is_rate ? "rate" : "concurrency", s->x, "requests", (json_int_t)s->requests, "ok",
        (json_int_t)s->ok, "errors", (json_int_t)s->errors, "errors_by_kind", kinds, "elapsed_s",
        s->elapsed_s, "rps", s->rps, "tokens_per_s", s->tokens_per_s, "mean_ms", s->mean_ms,
        "p50_ms", s->p50_ms, "p90_ms", s->p90_ms, "p95_ms", s->p95_ms, "p99_ms", s->p99_ms,
        "max_ms", s->max_ms, "min_ms", s->min_ms);
    json_t *m = json_pack("{s:f, s:f, s:f, s:f, s:I, s:I, s:f, s:I}", "mean_batch_size", s->mean_batch,
                          "queue_ms", s->queue_ms, "compute_ms", s->compute_ms, "overhead_ms",
                          s->overhead_ms, "with_timing", (json_int_t)s->n_timing, "late",
                          (json_int_t)s->late, "max_late_ms", s->max_late_ms, "connects",
                          (json_int_t)s->connects);
    if (!l || !m || json_object_update(l, m)) {
        json_decref(l);
        l = NULL;
    }
    json_decref(m);
    if (l && s->is_rate &&
        (json_object_set_new(l, "achieved_rps", json_real(s->achieved_rps)) ||
         json_object_set_new(l, "late_fraction", json_real(s->late_fraction)) ||
         json_object_set_new(l, "short_of_offered", json_boolean(s->short_of_offered)))) {
        json_decref(l);
        l = NULL;
    }
    return l;
}

int load_report_json(const char *path, const load_opts *o, const load_model *m,
                     const load_stats *lv, size_t n, char *err, size_t el)
{
    json_t *levels = json_array(), *root = NULL;
    long req = 0, errs = 0;
    int rc = -1;
    for (size_t i = 0; levels && i < n; i++) {
        if (json_array_append_new(levels, level_json(&lv[i]))) goto done;
        req += lv[i].requests;
        errs += lv[i].errors;
    }
    root = json_pack("{s:s, s:o, s:o, s:{s:I, s:I, s:f}}", "tool", "attnd-load", "params",
                     params_json(o, m), "levels", levels, "total", "requests", (json_int_t)req,
                     "errors", (json_int_t)errs, "error_rate", load_error_rate(lv, n));
    levels = NULL; /* stolen by json_pack ("o"), even on failure */
    if (root && json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) == 0) rc = 0;
done:
    if (rc) snprintf(err, el, "--json: cannot write %s", path);
    json_decref(levels);
    json_decref(root);
    return rc;
}

int load_report_csv(const char *path, const load_stats *lv, size_t n, char *err, size_t el)
{
    FILE *f = fopen(path, "w");
    if (!f) return snprintf(err, el, "--csv: cannot write %s", path), -1;
    fprintf(f, "%s,requests,ok,errors,elapsed_s,rps,tokens_per_s,mean_ms,p50_ms,p90_ms,p95_ms,"
               "p99_ms,max_ms,mean_batch_size,queue_ms,compute_ms,overhead_ms,late,late_fraction,"
               "achieved_rps",
            n && lv[0].is_rate ? "rate" : "concurrency");
    for (int k = 1; k < LOAD_KIND_COUNT; k++) fprintf(f, ",err_%s", load_kind_name((load_kind)k));
    fputc('\n', f);
    for (size_t i = 0; i < n; i++) {
        const load_stats *s = &lv[i];
        fprintf(f, "%g,%ld,%ld,%ld,%.6f,%.3f,%.3f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%ld,"
                   "%.6f,%.3f",
                s->x, s->requests, s->ok, s->errors, s->elapsed_s, s->rps, s->tokens_per_s,
                s->mean_ms, s->p50_ms, s->p90_ms, s->p95_ms, s->p99_ms, s->max_ms, s->mean_batch,
                s->queue_ms, s->compute_ms, s->overhead_ms, s->late, s->late_fraction,
                s->achieved_rps);
        for (int k = 1; k < LOAD_KIND_COUNT; k++) fprintf(f, ",%ld", s->by_kind[k]);
        fputc('\n', f);
    }
    if (fclose(f) != 0) return snprintf(err, el, "--csv: cannot write %s", path), -1;
    return 0;
}
