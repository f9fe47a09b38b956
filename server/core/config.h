/* config.h — attnd's settings: one struct, one table of options with defaults,
 * filled in order defaults < JSON file < ATTND_* environment < command line.
 * Adding an option: a field here and one row in the table in config.c.
 */
#ifndef ATTND_CONFIG_H
#define ATTND_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/log.h"

/* One --model NAME=PATH[,key=value...]: which layer of which checkpoint. */
typedef struct attnd_model_spec {
    char *name;      /* [A-Za-z0-9._-]{1,64}, unique                              */
    char *path;      /* a .safetensors file or a Hugging Face model directory      */
    int heads;       /* heads=N; 0 = from config.json / the file's metadata        */
    int kv_heads;    /* kv_heads=N; 0 = from config.json, else heads              */
    int layer;       /* layer=N; -1 = the only one                                */
    int all_layers;  /* layers=all: one model per layer, named NAME.N (expanded by
                        attnd_models_expand before anything is served)             */
    char layer_sel[64]; /* with all_layers: which layers, "A-B" ranges and numbers,
                        comma-separated ("0-7", "0,2,4"); "" = every layer         */
    int family;      /* format=: an attn_family (0 = auto)                         */
    char *prefix;    /* prefix=: a state_dict prefix, or NULL                     */
    int kv_dtype;    /* kv_dtype=: an attn_kv_dtype, or -1 = --kv-dtype           */
    int weights_dtype; /* weights=: an attn_weight_dtype, 0 = as the checkpoint stores */
    /* The model's own scheduler settings (Triton's per-model config.pbtxt);
     * 0 (the delay and the piece rows, whose 0 means something: -1) = the
     * global option of the same name. */
    int workers;
    int max_batch_requests;
    int64_t max_batch_tokens;
    int64_t max_batch_kv_bytes;
    int64_t max_queue_delay_us;
    int prefill_chunk_rows;
} attnd_model_spec;

/* A model group: the layer models one --model NAME=DIR,layers=... spec expanded
 * into (NAME.k for each checkpoint layer k in layers[]), also served as one
 * model NAME whose sessions hold a sequence's cache for every layer. */
typedef struct attnd_model_group_spec {
    char name[72];
    int *layers;     /* owned: the checkpoint layers, in group order           */
    int n_layers;
} attnd_model_group_spec;

typedef struct attnd_config {
    char *config_file;           /* --config                                   */
    char *listen;                /* HOST:PORT, [V6]:PORT or :PORT              */
    attnd_model_spec *models;    /* n_models entries                           */
    int n_models;
    char *default_model;         /* "" = none                                  */
    attnd_log_level log_level;
    int workers;                 /* scheduler worker threads per model         */
    int max_batch_requests;
    int64_t max_batch_tokens;    /* positions projected per batch              */
    int64_t max_batch_kv_bytes;  /* K/V bytes a batch's attention reads        */
    int64_t max_queue_delay_us;
    int64_t max_stream_wait_us;  /* opt-in: an iteration waits for the other streams */
    int prefill_chunk_rows;      /* rows of a long append computed per iteration */
    int64_t inline_max_macs;     /* a smaller stateless request runs on its HTTP thread */
    int max_queue;
    int64_t max_body_bytes;
    int max_seq_len;
    int max_batch_seqs;
    int64_t max_weights_elems;
    int max_json_depth;
    int max_connections;
    int connection_timeout_s;
    int http_threads;            /* libmicrohttpd thread pool size             */
    int64_t offload_codec_bytes; /* bodies / answers this large are decoded /
                                    encoded off the HTTP threads; 0 = never     */
    int drain_grace_ms;          /* after SIGTERM, requests arriving are served  */
    int request_read_timeout_s;  /* headers+body must arrive within; 0 = none  */
    int64_t max_inflight_bytes;  /* bodies + decoded requests held at once      */
    char *api_key_file;          /* "" = none                                  */
    char *api_keys;              /* comma-separated; secret: never printed      */
    char *admin_key_file;        /* repository (load/unload) keys; "" = none    */
    int metrics_require_key;     /* 1: /metrics needs a key too                 */
    int ui;                      /* 1: serve the playground at / and /ui/       */
    char *tls_cert;              /* PEM files; both or neither                  */
    char *tls_key;
    char *kv_dtype_name;         /* --kv-dtype: f32, f16, bf16, int8            */
    int kv_dtype;                /* the same as an attn_kv_dtype (set by load)  */
    int64_t kv_cache_bytes;      /* the KV page pool of all sessions; 0 = auto  */
    int64_t kv_page_bytes;       /* one page; 0 = fitted to the models          */
    int64_t max_retired_bytes;   /* weights retired versions may pin via sessions */
    int session_ttl_s;           /* idle session expiry; per-session ttl_s caps at it */
    int max_sessions;            /* streaming sessions held at once             */
    char *log_format_name;       /* --log-format: text or json                  */
    int log_format;              /* the same as an attnd_log_format (set by load) */
    char *access_log;            /* --access-log PATH, "-" = stdout, "" = none  */
    char *cors_origin;           /* --cors-origin: comma-separated (repeats add) */
    char *replica_name;          /* "" = none; else session ids are NAME.hex    */
    char *session_dir;           /* --session-dir: sessions saved at stop, read
                                    back at start; "" = none                    */
    int64_t session_dir_max_bytes; /* what the saved sessions may take; 0 = no bound */
    attnd_model_group_spec *groups; /* made by attnd_config_expand_layers        */
    int n_groups;

    char *inspect_path;          /* --inspect PATH, or NULL                    */

    /* Where each option's value came from (config.c's table order), for
     * --print-config and the start-up log. */
    unsigned char source[48];
} attnd_config;

typedef enum attnd_config_action {
    ATTND_CONFIG_RUN = 0,        /* start the daemon                           */
    ATTND_CONFIG_HELP = 1,       /* --help was given                           */
    ATTND_CONFIG_VERSION = 2,    /* --version was given                        */
    ATTND_CONFIG_PRINT = 3,      /* --print-config was given                   */
    ATTND_CONFIG_INSPECT = 4,    /* --inspect PATH: cfg->inspect_path          */
    ATTND_CONFIG_ERROR = -1      /* err holds the reason                       */
} attnd_config_action;

/* Fills *cfg from the defaults, the file named by --config / ATTND_CONFIG, the
 * environment and argv, in rising precedence. A list option (models) set at a
 * level replaces the lower levels' list. On ATTND_CONFIG_ERROR err names the
 * source and option at fault. Whatever it returns, free with attnd_config_free. */
attnd_config_action attnd_config_load(attnd_config *cfg, int argc, char *const *argv,
                                      char *err, size_t errlen);

/* Replaces model i (a layers=all spec) by n_layers models NAME.0 .. NAME.n-1,
 * each with layer=k, in its place. Returns 0, or -1 with err (a clash of the
 * new names with another model's, no memory). */
int attnd_config_expand_layers(attnd_config *cfg, int i, int n_layers, char *err,
                               size_t errlen);

/* The layers spec i selects of a checkpoint with n_layers (its layer_sel, or all
 * of them), into *out (malloc'd, caller frees) and *n. Returns 0, or -1 with err
 * (a layer out of range, repeated, or a malformed list). */
int attnd_config_layer_list(const attnd_model_spec *spec, int n_layers, int **out, int *n,
                            char *err, size_t errlen);

/* As attnd_config_expand_layers for the n given checkpoint layers (NAME.k for
 * each k), and records the group NAME of them in cfg->groups. Returns 0, or -1
 * with err (the group's name taken by a model, a clash, no memory). */
int attnd_config_expand_layer_list(attnd_config *cfg, int i, const int *layers, int n,
                                   char *err, size_t errlen);

/* A model spec from a JSON object of the config file's model keys (path,
 * heads, layer, format, workers, ...; "name" not allowed: name is given), as
 * POST /v2/repository/models/{name}/load sends them. where names the object in
 * err ("parameters"). Fills *out with owned copies (free with
 * attnd_config_spec_free). Returns 0, or -1 with err naming the key. */
int attnd_config_spec_from_json(attnd_model_spec *out, const char *name, const void *json,
                                const char *where, char *err, size_t errlen);

/* Deep copy of src into *dst (free with attnd_config_spec_free). Returns 0, or
 * -1 on allocation failure (*dst then holds nothing). */
int attnd_config_spec_copy(attnd_model_spec *dst, const attnd_model_spec *src);
void attnd_config_spec_free(attnd_model_spec *m);

/* Frees what cfg owns (not cfg itself). Safe on a zeroed or half-filled cfg. */
void attnd_config_free(attnd_config *cfg);

/* --help text: every option, its metavariable, default and environment name. */
void attnd_config_print_help(FILE *f, const char *prog);

/* Every effective setting, one "name = value  (source)" line each. */
void attnd_config_print(FILE *f, const attnd_config *cfg);

/* One INFO log line per setting, for start-up. */
void attnd_config_log(const attnd_config *cfg);

/* A replica name (--replica-name): session ids become NAME.hex. NAME is
 * 1..ATTND_REPLICA_NAME_MAX of [a-z0-9-], starting and ending with a letter or
 * digit (a DNS label: Kubernetes pod names fit). */
#define ATTND_REPLICA_NAME_MAX 40

/* 1 when name is a valid replica name. */
int attnd_replica_name_valid(const char *name);

/* Returns 0 when path exists and is not world-writable; else -1 with err
 * ("<what> <path> is world-writable ..."). For the config and API-key files. */
int attnd_config_check_file_mode(const char *what, const char *path, char *err, size_t errlen);

/* The smallest KV page --kv-page-bytes takes: the pool's bookkeeping is a few
 * bytes a page, so tiny pages cost more than they hold (4 bytes gave ~6 GB). */
#define ATTND_KV_PAGE_MIN_BYTES 1024

/* 1 when s can name a model: 1-64 characters of A-Z a-z 0-9 . _ -, not dots
 * alone ("." and ".." are path segments proxies and clients resolve away). */
int attnd_config_model_name_ok(const char *s);

#endif
