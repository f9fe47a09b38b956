/* load_app.c — attnd-load's top level: options -> model widths -> request pool -> one run per
 * level -> table, JSON, CSV, SVG -> exit status; --sessions goes through load_session.c. */
#include "load_app.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load_args.h"
#include "load_report.h"
#include "load_reqgen.h"
#include "load_runner.h"
#include "load_sess_report.h"
#include "load_session.h"
#include "load_svg.h"

static void on_sigint(int sig)
{
    (void)sig;
    load_runner_stop();
}

/* --sessions: the first Ctrl-C stops the streams and deletes their sessions; a second one
 * quits at once (the server's TTL ends what is left). */
static void on_sigint_sessions(int sig)
{
    (void)sig;
    load_sess_stop();
    signal(SIGINT, SIG_DFL);
}

/* --sessions: one level per session count; every session deleted at the end of its level.
 * Returns the exit status. */
static int sessions_mode(const load_opts *o, const load_model *m)
{
    char err[512] = "", sub[256];
    load_sess_runner *r = load_sess_new(o, m, err, sizeof err);
    load_sess_stats *lv = r ? calloc(o->n_levels, sizeof *lv) : NULL;
    size_t done = 0;
    int status = LOAD_EXIT_SETUP;
    if (r && !lv) snprintf(err, sizeof err, "out of memory");
    if (!lv) goto fail;
    signal(SIGINT, on_sigint_sessions);
    for (; done < o->n_levels; done++) {
        int rc = load_sess_run_level(r, (int)o->levels[done], &lv[done], err, sizeof err);
        if (rc < 0) {
            done++; /* report what it measured, then fail */
            break;
        }
        if (rc > 0) {
            fprintf(stderr, "attnd-load: interrupted; reporting %zu level(s)\n", done + 1);
            done++;
            break;
        }
    }
    load_sess_report_table(stdout, lv, done);
    if (m->layers)
        printf("model %s is a model group of %d layers: each stream is one sequence session, a "
               "token (and a prefill chunk) one append to every layer in order; tpot spans them "
               "all, queue/compute are the last layer's\n", o->model, m->layers);
    fflush(stdout);
    snprintf(sub, sizeof sub, "model %s, E %d, prefix %d%s, %d steps per stream%s%s", o->model,
             m->embed_q, o->prefix, o->prefill_chunk ? " in chunks" : "", o->steps,
             o->window ? ", windowed" : "", m->layers ? ", every layer of a group" : "");
    if (err[0]) goto fail;
    if ((o->json_path && load_sess_report_json(o->json_path, o, m, lv, done, err, sizeof err)) ||
        (o->csv_path && load_sess_report_csv(o->csv_path, lv, done, err, sizeof err)) ||
        (o->svg_path && load_svg_sessions_write(o->svg_path, lv, done, sub, err, sizeof err)))
        goto fail;
    long ok = 0, leaked = 0;
    for (size_t i = 0; i < done; i++) {
        ok += o->steps ? (long)lv[i].decode_tokens : lv[i].prefilled;
        leaked += lv[i].leaked;
    }
    double rate = load_sess_error_rate(lv, done);
    status = LOAD_EXIT_OK;
    if (!ok || rate > o->max_error_rate) {
        fprintf(stderr, "attnd-load: error rate %.4f (%s) above --max-error-rate %g\n", rate,
                ok ? "some calls failed" : o->steps ? "no decode step succeeded"
                                                    : "no prefill succeeded",
                o->max_error_rate);
        for (size_t i = 0; i < done; i++)
            if (lv[i].first_error[0])
                fprintf(stderr, "attnd-load: sessions %d, first error: %s\n", lv[i].sessions,
                        lv[i].first_error);
        status = LOAD_EXIT_ERRORS;
    }
    if (leaked)
        fprintf(stderr, "attnd-load: %ld session(s) could not be deleted; the server's TTL "
                        "will end them\n", leaked);
    goto out;
fail:
    fprintf(stderr, "attnd-load: %s\n", err);
    status = LOAD_EXIT_SETUP;
out:
    for (size_t i = 0; lv && i < o->n_levels; i++) load_sess_stats_free(&lv[i]);
    free(lv);
    load_sess_free(r);
    return status;
}

/* "model demo, T 16:64, E 64, batch 4, 4 s per level" for the chart. */
static void describe(char *buf, size_t n, const load_opts *o, const load_model *m)
{
    int k = snprintf(buf, n, "model %s, ", o->model ? o->model : "(default)");
    if (o->n_request_files)
        k += snprintf(buf + k, n - (size_t)k, "%zu request file(s)", o->n_request_files);
    else if (o->seq_dist_n)
        k += snprintf(buf + k, n - (size_t)k, "T from file (%zu lengths), E %d", o->seq_dist_n,
                      m->embed_q);
    else
        k += snprintf(buf + k, n - (size_t)k, "T %d:%d, E %d", o->seq_min, o->seq_max, m->embed_q);
    if (o->cross && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, ", cross S %d:%d", o->key_min, o->key_max);
    if (o->batch && (size_t)k < n) k += snprintf(buf + k, n - (size_t)k, ", batch %d", o->batch);
    if (o->protocol == 2 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, ", v2%s", o->binary ? " binary" : "");
    if ((size_t)k < n) {
        if (o->requests)
            snprintf(buf + k, n - (size_t)k, ", %ld requests per level", o->requests);
        else
            snprintf(buf + k, n - (size_t)k, ", %g s per level", o->duration_s);
    }
}

static int write_outputs(const load_opts *o, const load_model *m, const load_stats *lv, size_t n)
{
    char err[512], sub[256];
    int rc = 0;
    describe(sub, sizeof sub, o, m);
    if (o->json_path && load_report_json(o->json_path, o, m, lv, n, err, sizeof err)) rc = -1;
    if (!rc && o->csv_path && load_report_csv(o->csv_path, lv, n, err, sizeof err)) rc = -1;
    if (!rc && o->svg_path && load_svg_write(o->svg_path, lv, n, sub, err, sizeof err)) rc = -1;
    if (rc) fprintf(stderr, "attnd-load: %s\n", err);
    return rc;
}

/* --max-late-fraction: whether a level started too many requests late (said on stderr). */
static int too_late(const load_opts *o, const load_stats *lv, size_t n)
{
    int bad = 0;
    for (size_t i = 0; o->max_late_fraction >= 0 && i < n; i++) {
        if (lv[i].late_fraction <= o->max_late_fraction) continue;
        fprintf(stderr, "attnd-load: rate %g: %.1f%% of requests started late (above "
                        "--max-late-fraction %g); achieved %.1f req/s\n",
                lv[i].x, 100 * lv[i].late_fraction, o->max_late_fraction, lv[i].achieved_rps);
        bad = 1;
    }
    return bad;
}

int load_app_main(int argc, char **argv)
{
    load_opts o;
    load_model m = {0};
    load_pool pool = {0};
    load_runner *r = NULL;
    load_stats *lv = NULL;
    size_t done = 0;
    char err[512] = "";
    int status = LOAD_EXIT_SETUP;

    if (load_opts_parse(&o, argc, argv, err, sizeof err)) {
        fprintf(stderr, "attnd-load: %s\n", err);
        load_opts_free(&o);
        return LOAD_EXIT_USAGE;
    }
    if (o.help) {
        load_opts_free(&o);
        return LOAD_EXIT_OK;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "attnd-load: curl_global_init failed\n");
        load_opts_free(&o);
        return LOAD_EXIT_SETUP;
    }
    if (o.embed)
        m = (load_model){o.embed, o.embed, o.embed, o.embed, 1, 0};
    else if (load_fetch_model(&o, &m, err, sizeof err))
        goto fail;
    if (o.sessions) {
        status = sessions_mode(&o, &m);
        goto out;
    }
    if (m.layers) {
        snprintf(err, sizeof err, "model %s is a model group (%d layers): it serves sequence "
                 "sessions only; use --sessions, or one of its layer models %s.N", o.model,
                 m.layers, o.model);
        goto fail;
    }
    if (load_pool_build(&pool, &o, &m, err, sizeof err)) goto fail;
    if (!(r = load_runner_new(&o, &pool, err, sizeof err))) goto fail;
    if (!(lv = calloc(o.n_levels, sizeof *lv))) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    signal(SIGINT, on_sigint);
    for (; done < o.n_levels; done++) {
        int rc = load_run_level(r, o.levels[done], &lv[done], err, sizeof err);
        if (rc < 0) goto fail;
        if (rc > 0) {
            fprintf(stderr, "attnd-load: interrupted; reporting %zu level(s)\n", done + 1);
            done++;
            break;
        }
    }
    load_report_table(stdout, lv, done);
    fflush(stdout);
    if (write_outputs(&o, &m, lv, done)) goto out;
    long ok = 0;
    for (size_t i = 0; i < done; i++) ok += lv[i].ok;
    double rate = load_error_rate(lv, done);
    status = LOAD_EXIT_OK;
    if (!ok || rate > o.max_error_rate) {
        fprintf(stderr, "attnd-load: error rate %.4f (%s) above --max-error-rate %g\n", rate,
                ok ? "some requests failed" : "no request succeeded", o.max_error_rate);
        status = LOAD_EXIT_ERRORS;
    } else if (too_late(&o, lv, done)) {
        status = LOAD_EXIT_LATE;
    }
    goto out;
fail:
    fprintf(stderr, "attnd-load: %s\n", err);
    status = LOAD_EXIT_SETUP;
out:
    for (size_t i = 0; lv && i < o.n_levels; i++) load_stats_free(&lv[i]);
    free(lv);
    load_runner_free(r);
    load_pool_free(&pool);
    load_opts_free(&o);
    curl_global_cleanup();
    return status;
}
