/* main.c — attnd's entry point: settings, start-up (HTTP first, then models, so
 * /healthz answers while big layers load), a wait on the signal self-pipe
 * (SIGHUP's reload runs on a thread of its own), and the drain on
 * SIGTERM/SIGINT: not ready at once -> serve what was sent before the signal
 * and during --drain-grace-ms -> answer everything queued -> wait for
 * responses -> stop HTTP -> free -> exit 0.
 */
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http/access_log.h"
#include "attn.h"
#include "core/auth.h"
#include "core/config.h"
#include "http/cors.h"
#include "http/http.h"
#include "core/jsonload.h"
#include "core/log.h"
#include "core/metrics.h"
#include "engine/kvlayout.h"
#include "engine/models.h"
#include "engine/persist.h"
#include "protocol/handler_session.h"
#include "engine/retire.h"
#include "http/route.h"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

static void print_version(void)
{
    printf("attnd %s\nlibattn %s, libmicrohttpd %s, jansson %s, OpenBLAS (%s)\n",
           ATTN_VERSION_STRING, ATTN_VERSION_STRING, MHD_get_version(), jansson_version_str(),
           openblas_get_config());
}

/* Shutdown signals go through a self-pipe: the handler only writes the signal
 * number; main() reads it. A handler (rather than sigwait alone) is needed
 * because OpenBLAS starts its threads before main() runs, with every signal
 * unblocked: a blocked-and-sigwait scheme would let such a thread take the
 * default action (terminate) whenever main is not inside sigwait. */
static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t w = write(sig_pipe[1], &b, 1); /* async-signal-safe; full pipe = already told */
    (void)w;
    errno = saved;
}

/* Installs the handler, and blocks the signals in this thread and (by
 * inheritance) in every thread started later, so MHD's and the scheduler's
 * threads never see them; main unblocks them once start-up is done. */
static int setup_signals(sigset_t *set)
{
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, set, NULL);
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* Blocks until a shutdown signal arrives; returns its number. */
static int wait_for_signal(const sigset_t *set)
{
    pthread_sigmask(SIG_UNBLOCK, set, NULL);
    struct pollfd pfd = {.fd = sig_pipe[0], .events = POLLIN};
    unsigned char b = 0;
    for (;;) {
        if (read(sig_pipe[0], &b, 1) == 1)
            return b;
        poll(&pfd, 1, -1); /* EINTR (our own handler ran) just loops */
    }
}

static void decode_limits(const attnd_config *cfg, attnd_decode_limits *l)
{
    l->max_seq_len = cfg->max_seq_len;
    l->max_batch_seqs = cfg->max_batch_seqs;
    l->max_weights_elems = (size_t)cfg->max_weights_elems;
    l->max_request_elems = 0; /* bounded by max_body_bytes already */
    l->max_json_depth = cfg->max_json_depth;
}

/* SIGHUP: reopens the access log (logrotate has moved it), re-reads the
 * settings from the same sources (file, environment, argv), reloads every
 * model (all or nothing, see attnd_models_reload) and the API keys. Other
 * settings keep their start-up values until a restart. A failure keeps what
 * is serving, is logged and counted. */
static void reload(attnd_app *app, int argc, char **argv)
{
    attnd_config cfg;
    char err[1024] = "";
    int64_t t0 = attnd_now_ns();
    if (attnd_access_log_reopen(app->access_log, err, sizeof err) != 0)
        attnd_log(ATTND_LOG_ERROR, "reload: %s; still writing to the old file", err);
    err[0] = '\0';
    int ok = attnd_config_load(&cfg, argc, argv, err, sizeof err) == ATTND_CONFIG_RUN &&
             attnd_models_expand(&cfg, err, sizeof err) == 0 &&
             attnd_models_reload(app->models, &cfg, err, sizeof err) == 0 &&
             attnd_auth_reload(app->auth, &cfg, err, sizeof err) == 0;
    attnd_metrics_reload(app->metrics, ok);
    if (ok)
        attnd_retired_bound(app->sessions, app->models, (size_t)app->cfg->max_retired_bytes);
    if (ok)
        attnd_log(ATTND_LOG_INFO, "reload: %d model(s) and %d API key(s) in %.1f ms; other "
                  "settings change at restart", app->models->n, attnd_auth_key_count(app->auth),
                  (double)(attnd_now_ns() - t0) / 1e6);
    else
        attnd_log(ATTND_LOG_ERROR, "reload failed, still serving what was loaded: %s", err);
    attnd_config_free(&cfg);
}

/* SIGHUP's reload runs on its own thread, so the main thread always waits on
 * the signal pipe: a reload blocked behind a repository load (both take the
 * repository lock) used to hold a SIGTERM back until that load ended, /readyz
 * 200 all along. SIGHUPs that arrive while one runs make one more run. */
typedef struct reloader {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int wanted, stop;          /* under mu */
    int started;
    pthread_t thread;
    attnd_app *app;
    int argc;
    char **argv;
} reloader;

static void *reloader_main(void *arg)
{
    reloader *r = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are main's */
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->wanted && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop)
            break;
        r->wanted = 0;
        pthread_mutex_unlock(&r->mu);
        reload(r->app, r->argc, r->argv);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static int reloader_start(reloader *r, attnd_app *app, int argc, char **argv)
{
    *r = (reloader){.app = app, .argc = argc, .argv = argv};
    if (pthread_mutex_init(&r->mu, NULL) != 0)
        return -1;
    if (pthread_cond_init(&r->cv, NULL) != 0) {
        pthread_mutex_destroy(&r->mu);
        return -1;
    }
    r->started = pthread_create(&r->thread, NULL, reloader_main, r) == 0;
    if (!r->started) {
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        return -1;
    }
    return 0;
}

static void reloader_request(reloader *r)
{
    pthread_mutex_lock(&r->mu);
    r->wanted = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* A reload asked for and not begun is dropped; one running finishes first. */
static void reloader_stop(reloader *r)
{
    if (!r->started)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    r->started = 0;
}

/* The graceful stop. Every request whose bytes reached attnd before the
 * signal, or that arrives during --drain-grace-ms, gets its answer. */
static void drain(attnd_app *app, attnd_http *http, attnd_models *models, reloader *rl)
{
    /* The listening socket stays open until attnd_http_stop: libmicrohttpd
     * 0.9.75's MHD_quiesce_daemon races its epoll workers (one that drops the
     * listen socket from its own set first makes the quiesce's EPOLL_CTL_DEL
     * fail, and MHD aborts). So requests are told apart by when they arrived:
     * those already sent (in a socket or the accept queue at the signal), and
     * those arriving during the grace, are served; later ones are answered 503
     * draining; every answer says Connection: close. */
    atomic_store_explicit(&app->state, ATTND_STATE_DRAINING, memory_order_release);
    int grace = app->cfg->drain_grace_ms;
    attnd_http_drain_begin(http, grace);
    attnd_log(ATTND_LOG_INFO, "draining: /readyz now 503; requests arriving from now%s%.0f ms "
              "on are answered 503 draining", grace > 0 ? " + --drain-grace-ms " : " + ",
              (double)grace);
    reloader_stop(rl); /* a reload under way (behind a repository load) ends first */
    int timeout_ms = (app->cfg->connection_timeout_s > 0 ? app->cfg->connection_timeout_s : 30)
                     * 1000;
    int unread = attnd_http_drain_admitted(http, grace + timeout_ms);
    if (unread)
        attnd_log(ATTND_LOG_WARN, "draining: %d request(s) sent before the signal still not "
                  "read after %d ms", unread, grace + timeout_ms);
    attnd_models_drain(models);
    attnd_log(ATTND_LOG_INFO, "draining: every queued request computed");
    int left = attnd_http_wait_idle(http, timeout_ms);
    if (left)
        attnd_log(ATTND_LOG_WARN, "draining: %d responses still unsent after %d ms", left,
                  timeout_ms);
    else
        attnd_log(ATTND_LOG_INFO, "draining: every response sent");
}

int main(int argc, char **argv)
{
    attnd_config cfg;
    char err[1024] = "";
    int rc = EXIT_RUNTIME;
    attnd_metrics *metrics = NULL;
    attnd_http *http = NULL;
    attnd_models models = {0};
    const char **names = NULL;
    attnd_app app = {.cfg = &cfg, .models = &models};

    switch (attnd_config_load(&cfg, argc, argv, err, sizeof err)) {
    case ATTND_CONFIG_HELP:
        attnd_config_print_help(stdout, argv[0]);
        attnd_config_free(&cfg);
        return 0;
    case ATTND_CONFIG_VERSION:
        print_version();
        attnd_config_free(&cfg);
        return 0;
    case ATTND_CONFIG_PRINT:
        attnd_config_print(stdout, &cfg);
        attnd_config_free(&cfg);
        return 0;
    case ATTND_CONFIG_INSPECT:
        rc = attnd_models_inspect(stdout, cfg.inspect_path, err, sizeof err) == 0 ? 0
                                                                                 : EXIT_USAGE;
        if (rc)
            attnd_log(ATTND_LOG_ERROR, "%s", err);
        attnd_config_free(&cfg);
        return rc;
    case ATTND_CONFIG_ERROR:
        attnd_log(ATTND_LOG_ERROR, "%s", err);
        attnd_config_free(&cfg);
        return EXIT_USAGE;
    case ATTND_CONFIG_RUN:
        break;
    }
    if (attnd_models_expand(&cfg, err, sizeof err) != 0) {
        attnd_log(ATTND_LOG_ERROR, "%s", err);
        attnd_config_free(&cfg);
        return EXIT_USAGE;
    }
    attnd_log_set_level(cfg.log_level);
    attnd_log_set_format((attnd_log_format)cfg.log_format);
    attnd_json_install_alloc();

    sigset_t sigs;
    if (setup_signals(&sigs) != 0) {
        attnd_log(ATTND_LOG_ERROR, "cannot set up signal handling: %s", strerror(errno));
        attnd_config_free(&cfg);
        return EXIT_RUNTIME;
    }
    attnd_log(ATTND_LOG_INFO, "attnd %s starting, pid %d, %d model(s), log level %s",
              ATTN_VERSION_STRING, (int)getpid(), cfg.n_models,
              attnd_log_level_name(cfg.log_level));
    if (attnd_log_enabled(ATTND_LOG_DEBUG))
        attnd_config_log(&cfg);
    /* Parallelism comes from the scheduler's workers (and batching), so each
     * BLAS call stays on its worker's thread. */
    openblas_set_num_threads(1);
    attnd_log(ATTND_LOG_INFO, "OpenBLAS set to 1 thread per call (parallelism comes from "
              "%d workers per model); %s", cfg.workers, openblas_get_config());

    /* Slots past the configured models stay unnamed until the repository API
     * loads a model into them. */
    int n_slots = attnd_models_capacity(&cfg);
    names = calloc((size_t)n_slots, sizeof *names);
    for (int i = 0; names && i < cfg.n_models; i++)
        names[i] = cfg.models[i].name;
    metrics = names ? attnd_metrics_create(n_slots, names, ATTND_ROUTE_COUNT,
                                                   attnd_route_labels()) : NULL;
    if (!metrics) {
        attnd_log(ATTND_LOG_ERROR, "out of memory at start-up");
        goto done;
    }
    app.metrics = metrics;
    app.auth = attnd_auth_create(&cfg, err, sizeof err);
    if (!app.auth) {
        attnd_log(ATTND_LOG_ERROR, "%s", err);
        rc = EXIT_USAGE;
        goto done;
    }
    attnd_log(ATTND_LOG_INFO, "API keys: %d configured%s; admin keys: %d%s",
              attnd_auth_key_count(app.auth),
              attnd_auth_key_count(app.auth) ? "" : " (authentication off)",
              attnd_auth_admin_key_count(app.auth),
              attnd_auth_admin_key_count(app.auth) ? "" : " (repository load/unload off)");
    if (attnd_cors_create(cfg.cors_origin, &app.cors, err, sizeof err) != 0 ||
        (*cfg.access_log &&
         !(app.access_log = attnd_access_log_open(cfg.access_log,
                                                  (attnd_log_format)cfg.log_format, err,
                                                  sizeof err)))) {
        attnd_log(ATTND_LOG_ERROR, "%s", err);
        rc = EXIT_USAGE;
        goto done;
    }
    decode_limits(&cfg, &app.limits);
    atomic_init(&app.state, ATTND_STATE_STARTING);
    http = attnd_http_start(&app, err, sizeof err);
    if (!http) {
        attnd_log(ATTND_LOG_ERROR, "%s", err);
        goto done;
    }
    if (attnd_models_load(&models, &cfg, metrics, err, sizeof err) != 0) {
        attnd_log(ATTND_LOG_ERROR, "%s", err);
        goto done;
    }
    /* Before READY: every session route needs models, so none reads app.sessions sooner. */
    app.sessions = attnd_session_store_create(&cfg, &models, metrics, err, sizeof err);
    if (!app.sessions) {
        attnd_log(ATTND_LOG_ERROR, "%s", err);
        goto done;
    }
    /* A model whose one row of K and V is wider than a page (an explicit
     * --kv-page-bytes) could never open a session: refused, as loads are. */
    models.kv_page_bytes = attnd_sessions_page_bytes(app.sessions);
    for (int i = 0; i < models.n; i++) {
        attnd_model *m = attnd_models_acquire(&models, i);
        attnd_kv_geometry g;
        size_t row = 0;
        int wide = m && attnd_kv_geometry_fit(m->layer, m->kv_dtype, models.kv_page_bytes, &g,
                                              &row) != 0;
        if (wide)
            attnd_log(ATTND_LOG_ERROR, "model '%s': one row of its K and V (%zu bytes) is wider "
                      "than a KV page (--kv-page-bytes %zu): set --kv-page-bytes >= %zu or 0",
                      m->name, row, models.kv_page_bytes, row);
        attnd_model_release(m);
        if (wide) {
            rc = EXIT_USAGE;
            goto done;
        }
    }
    if (*cfg.session_dir) /* sessions a graceful stop saved, under their ids */
        attnd_persist_load(app.sessions, &models, &cfg);
    atomic_store_explicit(&app.state, ATTND_STATE_READY, memory_order_release);
    attnd_log(ATTND_LOG_INFO, "ready: serving %d model(s) on %s", models.n, cfg.listen);

    reloader rl;
    if (reloader_start(&rl, &app, argc, argv) != 0) {
        attnd_log(ATTND_LOG_ERROR, "cannot start the reload thread");
        goto done;
    }
    int sig;
    while ((sig = wait_for_signal(&sigs)) == SIGHUP) {
        attnd_log(ATTND_LOG_INFO, "received SIGHUP: reloading");
        reloader_request(&rl);
    }
    attnd_log(ATTND_LOG_INFO, "received %s: shutting down gracefully", strsignal(sig));
    drain(&app, http, &models, &rl);
    rc = 0;
done:
    attnd_http_stop(http); /* before the models: no handler may touch them after */
    if (rc == 0 && app.sessions && *cfg.session_dir) /* drained: every session idle */
        attnd_persist_save(app.sessions, &cfg);
    attnd_sessions_free(app.sessions); /* gives back the model versions they hold */
    attnd_models_free(&models);
    attnd_auth_free(app.auth);
    attnd_access_log_close(app.access_log);
    attnd_cors_free(app.cors);
    attnd_metrics_free(metrics);
    free(names);
    if (rc == 0)
        attnd_log(ATTND_LOG_INFO, "stopped");
    attnd_config_free(&cfg);
    return rc;
}
