/* hfconfig.c — config.json of a Hugging Face model directory: read (bounded,
 * never blocking), checked key by key, RoPE parameters resolved as transformers
 * resolves them. See hfconfig.h.
 */
#include "hfconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "layer_internal.h"
#include "rope.h"

#define INT_CAP (1 << 24) /* widths, heads, layers: anything larger is a broken file */

attn_status attn__read_small_file(const char *path, size_t cap, char **out, size_t *len,
                                  attn_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path, strerror(errno));
    attn_status st = ATTN_OK;
    char *buf = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = attn__set_error(err, ATTN_ERR_IO, "%.160s: not a regular file", path);
        goto done;
    }
    if ((uint64_t)sb.st_size > cap) {
        st = attn__set_error(err, ATTN_ERR_LIMIT, "%.160s is %lld bytes, over the %zu-byte cap",
                             path, (long long)sb.st_size, cap);
        goto done;
    }
    size_t size = (size_t)sb.st_size;
    buf = malloc(size + 1);
    if (buf == NULL) {
        st = attn__set_error(err, ATTN_ERR_NOMEM, "%.160s: cannot allocate %zu bytes", path, size);
        goto done;
    }
    for (size_t got = 0; got < size;) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            st = attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path,
                                 r < 0 ? strerror(errno) : "file shrank while being read");
            goto done;
        }
        got += (size_t)r;
    }
    buf[size] = '\0';
    *out = buf;
    *len = size;
    buf = NULL;
done:
    free(buf);
    close(fd);
    return st;
}

/* An integer key in [1, INT_CAP], or absent / null (*out untouched). */
static attn_status get_int(json_t *root, const char *key, int *out, attn_error *err)
{
    json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) return ATTN_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT_CAP)
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "config.json: \"%s\" is not an integer in [1, %d]", key, INT_CAP);
    *out = (int)json_integer_value(v);
    return ATTN_OK;
}

static attn_status get_bool(json_t *root, const char *key, int *out, attn_error *err)
{
    json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) return ATTN_OK;
    if (!json_is_boolean(v))
        return attn__set_error(err, ATTN_ERR_FORMAT, "config.json: \"%s\" is not true or false", key);
    *out = json_is_true(v);
    return ATTN_OK;
}

static attn_status get_string(json_t *root, const char *key, char *out, size_t cap,
                              attn_error *err)
{
    json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) return ATTN_OK;
    if (!json_is_string(v) || json_string_length(v) >= cap)
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "config.json: \"%s\" is not a string of under %zu characters", key,
                               cap);
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return ATTN_OK;
}

#define TRY(expr)                                                                  \
    do {                                                                           \
        attn_status try_st_ = (expr);                                              \
        if (try_st_ != ATTN_OK) return try_st_;                                    \
    } while (0)

static attn_status read_keys(json_t *root, attn__hfcfg *c, attn_error *err)
{
    TRY(get_string(root, "model_type", c->model_type, sizeof c->model_type, err));
    TRY(get_int(root, "n_embd", &c->hidden_size, err));
    TRY(get_int(root, "hidden_size", &c->hidden_size, err)); /* wins over n_embd */
    TRY(get_int(root, "n_head", &c->num_heads, err));
    TRY(get_int(root, "num_attention_heads", &c->num_heads, err));
    TRY(get_int(root, "num_key_value_heads", &c->num_kv_heads, err));
    TRY(get_int(root, "head_dim", &c->head_dim, err));
    TRY(get_int(root, "n_layer", &c->n_layers, err));
    TRY(get_int(root, "num_hidden_layers", &c->n_layers, err));
    TRY(get_int(root, "sliding_window", &c->sliding_window, err));
    int use_sw = 1;
    TRY(get_bool(root, "use_sliding_window", &use_sw, err));
    if (!use_sw) c->sliding_window = 0;
    TRY(get_string(root, "position_embedding_type", c->position_embedding_type,
                   sizeof c->position_embedding_type, err));
    c->scale_attn_weights = 1;
    TRY(get_bool(root, "scale_attn_weights", &c->scale_attn_weights, err));
    TRY(get_bool(root, "scale_attn_by_inverse_layer_idx", &c->scale_attn_by_inverse_layer_idx, err));
    return ATTN_OK;
}

attn_status attn__hfcfg_read(const char *path, attn__hfcfg *cfg, attn_error *err)
{
    if (cfg == NULL || path == NULL)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "path or cfg is NULL");
    memset(cfg, 0, sizeof *cfg);
    char *text = NULL;
    size_t len = 0;
    attn_status st = attn__read_small_file(path, ATTN__HFCFG_MAX, &text, &len, err);
    if (st != ATTN_OK) return st;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (root == NULL)
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "config.json is not valid JSON (line %d, column %d): %.100s",
                               jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return attn__set_error(err, ATTN_ERR_FORMAT, "config.json is not a JSON object");
    }
    cfg->present = 1;
    cfg->root = root;
    st = read_keys(root, cfg, err);
    if (st != ATTN_OK) attn__hfcfg_free(cfg);
    return st;
}

void attn__hfcfg_free(attn__hfcfg *cfg)
{
    if (cfg == NULL) return;
    json_decref((json_t *)cfg->root);
    memset(cfg, 0, sizeof *cfg);
}

/* ------------------------------------------------------------ RoPE */

/* A number key of obj (integer or real): 1 found, 0 absent/null, -1 wrong type. */
static int get_number(json_t *obj, const char *key, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v)) return 0;
    if (!json_is_number(v)) return -1;
    *out = json_number_value(v);
    return 1;
}

/* A required positive number of the scaling object, named in errors as where.key. */
static attn_status need_positive(json_t *obj, const char *where, const char *key, double *out,
                                 attn_error *err)
{
    int got = get_number(obj, key, out);
    if (got == 0)
        return attn__set_error(err, ATTN_ERR_FORMAT, "config.json: %s has no \"%s\"", where, key);
    if (got < 0 || !(*out > 0) || !isfinite(*out))
        return attn__set_error(err, ATTN_ERR_FORMAT, "config.json: %s.%s is not a positive number",
                               where, key);
    return ATTN_OK;
}

static attn_status rope_scaling(json_t *sc, const char *where, attn_rope *r, attn_error *err)
{
    if (!json_is_object(sc))
        return attn__set_error(err, ATTN_ERR_FORMAT, "config.json: %s is not an object", where);
    json_t *jt = json_object_get(sc, "rope_type");
    if (jt == NULL || json_is_null(jt)) jt = json_object_get(sc, "type");
    if (jt == NULL || json_is_null(jt)) {
        /* transformers 5's per-layer-type form: {"full_attention": {...}, ...} */
        const char *key;
        json_t *val;
        json_object_foreach(sc, key, val) {
            if (json_is_object(val))
                return attn__set_error(err, ATTN_ERR_UNSUPPORTED,
                                       "config.json: %s holds per-layer-type parameters "
                                       "(\"%.40s\": {...}); attnd reads one set",
                                       where, key);
        }
        return attn__set_error(err, ATTN_ERR_FORMAT, "config.json: %s has no \"rope_type\"", where);
    }
    if (!json_is_string(jt))
        return attn__set_error(err, ATTN_ERR_FORMAT, "config.json: %s.rope_type is not a string",
                               where);
    const char *type = json_string_value(jt);
    if (strcmp(type, "default") == 0) {
        r->scaling = ATTN_ROPE_SCALING_NONE;
    } else if (strcmp(type, "linear") == 0) {
        r->scaling = ATTN_ROPE_SCALING_LINEAR;
        TRY(need_positive(sc, where, "factor", &r->factor, err));
    } else if (strcmp(type, "llama3") == 0) {
        double omax = 0;
        r->scaling = ATTN_ROPE_SCALING_LLAMA3;
        TRY(need_positive(sc, where, "factor", &r->factor, err));
        TRY(need_positive(sc, where, "low_freq_factor", &r->low_freq_factor, err));
        TRY(need_positive(sc, where, "high_freq_factor", &r->high_freq_factor, err));
        TRY(need_positive(sc, where, "original_max_position_embeddings", &omax, err));
        if (omax != floor(omax) || omax > INT_CAP)
            return attn__set_error(err, ATTN_ERR_FORMAT,
                                   "config.json: %s.original_max_position_embeddings is not an "
                                   "integer in [1, %d]",
                                   where, INT_CAP);
        if (!(r->high_freq_factor > r->low_freq_factor))
            return attn__set_error(err, ATTN_ERR_FORMAT,
                                   "config.json: %s: high_freq_factor %g must exceed "
                                   "low_freq_factor %g",
                                   where, r->high_freq_factor, r->low_freq_factor);
        r->original_max_position = (int)omax;
    } else {
        return attn__set_error(err, ATTN_ERR_UNSUPPORTED,
                               "config.json: %s type \"%.40s\" is not supported (attnd implements "
                               "\"default\", \"linear\" and \"llama3\")",
                               where, type);
    }
    return ATTN_OK;
}

/* The range and derived-quantity checks of rope.c (attn__rope_check) on the
 * parameters read, errors naming the config.json keys. */
typedef struct rope_keys {
    char theta[40], scaling[40];
    int partial; /* partial_rotary_factor given */
} rope_keys;

static attn_status check_ranges(const attn_rope *r, int head_dim, const rope_keys *k, attn_error *err)
{
    char factor[64], low[64], high[64], omax[80];
    snprintf(factor, sizeof factor, "%s.factor", k->scaling);
    snprintf(low, sizeof low, "%s.low_freq_factor", k->scaling);
    snprintf(high, sizeof high, "%s.high_freq_factor", k->scaling);
    snprintf(omax, sizeof omax, "%s.original_max_position_embeddings", k->scaling);
    const attn__rope_names nm = {ATTN_ERR_FORMAT, k->theta,
                                 k->partial ? "rotary dims (head_dim * partial_rotary_factor)" : "head_dim",
                                 factor, low, high, omax};
    attn_rope resolved;
    attn_error e = {0};
    attn_status st = attn__rope_check(r, head_dim, &nm, &resolved, &e);
    if (st != ATTN_OK) return attn__set_error(err, st, "config.json: %s", e.message);
    return ATTN_OK;
}

attn_status attn__hfcfg_rope(const attn__hfcfg *cfg, int head_dim, attn_rope *rope,
                             attn_error *err)
{
    attn_rope r = {.style = ATTN_ROPE_HALF, .theta = 10000.0, .rotary_dim = head_dim};
    rope_keys keys = {"rope_theta", "rope_scaling", 0};
    json_t *root = cfg != NULL ? (json_t *)cfg->root : NULL;
    if (root != NULL) {
        json_t *params = json_object_get(root, "rope_parameters");
        if (params != NULL && json_is_null(params)) params = NULL;
        json_t *scaling = json_object_get(root, "rope_scaling");
        if (scaling != NULL && json_is_null(scaling)) scaling = NULL;
        double theta = 0, partial = 1.0;
        int got = get_number(root, "rope_theta", &theta);
        if (params != NULL && json_is_object(params) && get_number(params, "rope_theta", &theta)) {
            got = 1;
            snprintf(keys.theta, sizeof keys.theta, "rope_parameters.rope_theta");
        }
        if (params != NULL) snprintf(keys.scaling, sizeof keys.scaling, "rope_parameters");
        if (got != 0 && (got < 0 || !(theta > 0) || !isfinite(theta)))
            return attn__set_error(err, ATTN_ERR_FORMAT, "config.json: rope_theta is not a positive "
                                                         "number");
        if (got) r.theta = theta;
        if (params != NULL) TRY(rope_scaling(params, "rope_parameters", &r, err));
        else if (scaling != NULL) TRY(rope_scaling(scaling, "rope_scaling", &r, err));

        int pgot = get_number(root, "partial_rotary_factor", &partial);
        if (params != NULL && json_is_object(params) &&
            get_number(params, "partial_rotary_factor", &partial))
            pgot = 1;
        keys.partial = pgot != 0;
        if (pgot != 0) {
            if (pgot < 0 || !(partial > 0) || partial > 1)
                return attn__set_error(err, ATTN_ERR_FORMAT,
                                       "config.json: partial_rotary_factor is not a number in (0, 1]");
            r.rotary_dim = (int)((double)head_dim * partial);
            if (r.rotary_dim < 2 || r.rotary_dim % 2 != 0)
                return attn__set_error(err, ATTN_ERR_UNSUPPORTED,
                                       "config.json: partial_rotary_factor %g of head_dim %d gives "
                                       "%d rotary dims; attnd needs an even number >= 2",
                                       partial, head_dim, r.rotary_dim);
        }
    }
    if (r.rotary_dim < 2 || r.rotary_dim % 2 != 0)
        return attn__set_error(err, ATTN_ERR_UNSUPPORTED,
                               "head_dim %d is odd or below 2: a rotary embedding needs an even "
                               "number of dims",
                               head_dim);
    TRY(check_ranges(&r, head_dim, &keys, err));
    *rope = r;
    return ATTN_OK;
}
