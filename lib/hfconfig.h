/* hfconfig.h — library-internal reader of a Hugging Face config.json: the few keys
 * an attention layer needs (widths, heads, KV heads, head_dim, RoPE, sliding
 * window), validated and turned into C values. Nothing else of the file is kept.
 *
 * Keys read (an absent key or JSON null means "not given", 0 below):
 *   model_type; hidden_size | n_embd; num_attention_heads | n_head;
 *   num_key_value_heads; head_dim; num_hidden_layers | n_layer;
 *   sliding_window (+ use_sliding_window: false means none);
 *   position_embedding_type (BERT); scale_attn_weights,
 *   scale_attn_by_inverse_layer_idx (GPT-2);
 *   rope_theta, rope_scaling, rope_parameters, partial_rotary_factor (RoPE).
 *
 * Errors: ATTN_ERR_IO (the file cannot be opened/read, or is not a regular
 * file), ATTN_ERR_LIMIT (over ATTN__HFCFG_MAX bytes), ATTN_ERR_FORMAT (not a JSON
 * object, or a key above of the wrong type or range: the message names the key).
 * RoPE keys are checked only when a rotary family asks for them
 * (attn__hfcfg_rope), so a BERT config is never refused over RoPE keys.
 */
#ifndef ATTN_HFCONFIG_H
#define ATTN_HFCONFIG_H

#include "attn.h"

#define ATTN__HFCFG_MAX ((size_t)16 * 1024 * 1024) /* bytes of config.json */

typedef struct attn__hfcfg {
    int present;                /* 0: no config.json (every field below is 0) */
    char model_type[32];        /* "" when absent */
    int hidden_size;            /* hidden_size, else n_embd */
    int num_heads;              /* num_attention_heads, else n_head */
    int num_kv_heads;           /* num_key_value_heads */
    int head_dim;
    int n_layers;               /* num_hidden_layers, else n_layer */
    int sliding_window;         /* 0 when absent, null, or use_sliding_window false */
    char position_embedding_type[32];
    int scale_attn_weights;     /* GPT-2; 1 when absent */
    int scale_attn_by_inverse_layer_idx; /* GPT-2; 0 when absent */
    void *root;                 /* the parsed JSON (json_t *), for attn__hfcfg_rope */
} attn__hfcfg;

/* Reads and checks path (opened O_NONBLOCK; a FIFO is refused, never waited on).
 * On success *cfg owns the parsed file (attn__hfcfg_free); on failure *cfg is
 * zeroed and err names the file and the key. */
attn_status attn__hfcfg_read(const char *path, attn__hfcfg *cfg, attn_error *err);

/* Reads all of path, a regular file of at most cap bytes (opened O_NONBLOCK; a
 * FIFO or device is ATTN_ERR_IO, a larger file ATTN_ERR_LIMIT), into a new
 * NUL-terminated buffer *out (caller frees) of *len bytes. Also used for the
 * shard index (model.safetensors.index.json). */
attn_status attn__read_small_file(const char *path, size_t cap, char **out, size_t *len,
                                  attn_error *err);

/* Releases *cfg and zeroes it. NULL and zeroed configs are allowed. */
void attn__hfcfg_free(attn__hfcfg *cfg);

/* The rotary embedding config.json describes for heads of width head_dim, as
 * Hugging Face computes it: style HALF (rotate_half), theta from rope_theta
 * (default 10000; rope_parameters.rope_theta wins), rotary_dim =
 * floor(head_dim * partial_rotary_factor) (default: head_dim), and scaling from
 * rope_parameters, else rope_scaling, by "rope_type" (or the older "type"):
 * "default" (none), "linear" (factor), "llama3" (factor, low_freq_factor,
 * high_freq_factor, original_max_position_embeddings). Any other type is
 * ATTN_ERR_UNSUPPORTED naming it; a missing or out-of-range parameter is
 * ATTN_ERR_FORMAT naming it. cfg not present: the defaults. */
attn_status attn__hfcfg_rope(const attn__hfcfg *cfg, int head_dim, attn_rope *rope,
                             attn_error *err);

#endif
