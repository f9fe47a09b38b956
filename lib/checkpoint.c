/* checkpoint.c — a checkpoint on disk as the layer loaders see it: a .safetensors
 * file or a Hugging Face model directory (config.json + model.safetensors, or
 * model.safetensors.index.json and its shards), PyTorch pickles recognised and
 * refused with the command that converts them, FIFOs and devices refused without
 * blocking. Reads headers, then exactly the chosen layer's tensors (pread), and
 * builds the layer: attn_layer_load, attn_checkpoint_inspect, and the 0.1
 * attn_layer_load_safetensors[_mem]. Tensor names and shapes: family.c.
 */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "family.h"
#include "hfconfig.h"
#include "layer_internal.h"
#include "safetensors.h"

#define PATH_CAP 4096

/* One safetensors file of the checkpoint, opened (header only) on first use. */
typedef struct shard {
    char *file;        /* as named (index) or the path itself */
    char *path;        /* where it is opened from */
    attn__st_file st;
    int opened;
} shard;

/* A name of the shard index and the shard holding it. */
typedef struct indexed {
    char *name;
    int shard;
} indexed;

typedef struct ckpt {
    attn__hfcfg cfg;
    shard *shards;
    int n_shards, cap_shards;
    indexed *names; /* sharded: every weight_map name, sorted; else NULL */
    size_t n_names;
    const char *index_file; /* "model.safetensors.index.json" when sharded */
} ckpt;

static void ckpt_free(ckpt *ck)
{
    attn__hfcfg_free(&ck->cfg);
    for (int i = 0; i < ck->n_shards; i++) {
        attn__st_free(&ck->shards[i].st);
        free(ck->shards[i].file);
        free(ck->shards[i].path);
    }
    free(ck->shards);
    for (size_t i = 0; i < ck->n_names; i++) free(ck->names[i].name);
    free(ck->names);
    memset(ck, 0, sizeof *ck);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static attn_status join(const char *dir, const char *file, char *out, attn_error *err)
{
    int n = snprintf(out, PATH_CAP, "%s/%s", dir, file);
    if (n < 0 || n >= PATH_CAP)
        return attn__set_error(err, ATTN_ERR_LIMIT, "path '%.60s/%.60s' is too long", dir, file);
    return ATTN_OK;
}

/* 1 when path exists (following links) and is a regular file. */
static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* ------------------------------------------------------------ pickles */

/* The refusal of a PyTorch checkpoint, with the command that converts it. */
static attn_status pickle_error(const char *path, attn_error *err)
{
    const char *name = base_name(path);
    const char *cmd = "export it: python3 -c \"import torch;from safetensors.torch import "
                      "save_file as s;s({k:v.contiguous().clone()for k,v in "
                      "torch.load('%.64s').items()},'model.safetensors')\"";
    char tail[ATTN_ERROR_MESSAGE_MAX];
    int n = snprintf(tail, sizeof tail, cmd, name);
    if (n < 0 || (size_t)n >= sizeof tail) snprintf(tail, sizeof tail, cmd, "FILE");
    const char *full = "%s is a PyTorch pickle/zip checkpoint, not safetensors: %s";
    n = snprintf(NULL, 0, full, name, tail);
    if (n > 0 && n < ATTN_ERROR_MESSAGE_MAX)
        return attn__set_error(err, ATTN_ERR_UNSUPPORTED, full, name, tail);
    return attn__set_error(err, ATTN_ERR_UNSUPPORTED, "a PyTorch pickle/zip checkpoint: %s", tail);
}

/* Looks at the first bytes of the regular file path: a zip (torch.save since
 * 1.6) or a pickle (older torch.save, protocol 2..5) that cannot be a
 * safetensors file is refused with pickle_error; JSON with a hint. Anything else
 * is left to the safetensors parser. Never blocks (O_NONBLOCK). */
static attn_status sniff(const char *path, attn_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path, strerror(errno));
    uint8_t b[9] = {0};
    struct stat sb;
    ssize_t got = 0;
    attn_status st = ATTN_OK;
    if (fstat(fd, &sb) != 0)
        st = attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = attn__set_error(err, ATTN_ERR_IO, "%.160s: not a regular file", path);
    else
        do got = pread(fd, b, sizeof b, 0);
        while (got < 0 && errno == EINTR);
    close(fd);
    if (st != ATTN_OK) return st;
    if (got < 0) return attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path, strerror(errno));
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    uint64_t size = (uint64_t)sb.st_size;
    int plausible = got >= 9 && size >= 8 && hlen <= size - 8 && hlen <= ATTN__ST_MAX_HEADER &&
                    (b[8] == '{' || b[8] == ' ');
    if (plausible) return ATTN_OK;
    if (got >= 4 && memcmp(b, "PK\x03\x04", 4) == 0) return pickle_error(path, err);
    if (got >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5) return pickle_error(path, err);
    if (got >= 1 && b[0] == '{')
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "%.160s is JSON, not safetensors: pass the model directory", path);
    return ATTN_OK;
}

/* ------------------------------------------------------------ opening */

static attn_status add_shard(ckpt *ck, const char *file, const char *path, attn_error *err)
{
    if (ck->n_shards == ck->cap_shards) { /* doubling: O(1) per shard, amortised */
        int cap = ck->cap_shards ? 2 * ck->cap_shards : 4;
        shard *v = realloc(ck->shards, (size_t)cap * sizeof *v);
        if (v == NULL) return attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
        ck->shards = v;
        ck->cap_shards = cap;
    }
    shard *s = &ck->shards[ck->n_shards];
    memset(s, 0, sizeof *s);
    s->file = strdup(file);
    s->path = strdup(path);
    ck->n_shards++;
    if (s->file == NULL || s->path == NULL) return attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
    return ATTN_OK;
}

/* Opens shard i's header (once). Errors name the shard and the index. */
static attn_status open_shard(ckpt *ck, int i, attn_error *err)
{
    shard *s = &ck->shards[i];
    if (s->opened) return ATTN_OK;
    attn_status st = ATTN_OK;
    if (ck->index_file != NULL) st = sniff(s->path, err);
    if (st == ATTN_OK) st = attn__st_open(s->path, &s->st, err);
    if (st == ATTN_OK) {
        s->opened = 1;
        return ATTN_OK;
    }
    if (ck->index_file == NULL || err == NULL) return st;
    char msg[ATTN_ERROR_MESSAGE_MAX];
    memcpy(msg, err->message, sizeof msg);
    if (access(s->path, F_OK) != 0)
        return attn__set_error(err, ATTN_ERR_IO, "shard '%.80s' named by %s is missing: %s", s->file,
                               ck->index_file, strerror(errno));
    return attn__set_error(err, st, "shard '%.60s': %s", s->file, msg);
}

static int indexed_cmp(const void *a, const void *b)
{
    return strcmp(((const indexed *)a)->name, ((const indexed *)b)->name);
}

/* A shard file name from the index: a plain name in the directory. */
static int safe_file_name(const char *f)
{
    return f[0] != '\0' && strchr(f, '/') == NULL && strcmp(f, ".") != 0 && strcmp(f, "..") != 0 &&
           strlen(f) < 256;
}

/* The shards named so far, by file name: open addressing over a power-of-two
 * table of shard numbers + 1 (0 = empty), kept under half full, so each
 * weight_map entry costs O(1) and an index of n entries O(n) (it was a linear
 * search per entry, O(n * shards): minutes at 80k distinct names). */
typedef struct shard_set {
    int *slot;
    size_t mask;
} shard_set;

static size_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)(h ^ h >> 29);
}

/* Room for n names at most half full. Returns 0 on allocation failure. */
static int shard_set_init(shard_set *set, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    set->slot = calloc(cap, sizeof *set->slot);
    set->mask = cap - 1;
    return set->slot != NULL;
}

/* The slot where file is, or the empty slot where it would go. */
static int *shard_set_find(const shard_set *set, const ckpt *ck, const char *file)
{
    size_t i = name_hash(file) & set->mask;
    while (set->slot[i] != 0 && strcmp(ck->shards[set->slot[i] - 1].file, file) != 0)
        i = (i + 1) & set->mask;
    return &set->slot[i];
}

static attn_status read_index(ckpt *ck, const char *dir, const char *index_path, attn_error *err)
{
    shard_set set = {0};
    char *text = NULL;
    size_t len = 0;
    char path[PATH_CAP];
    attn_status st = attn__read_small_file(index_path, ATTN__INDEX_MAX, &text, &len, err);
    if (st != ATTN_OK) return st;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    ck->index_file = "model.safetensors.index.json";
    if (root == NULL)
        return attn__set_error(err, ATTN_ERR_FORMAT, "%s is not valid JSON (line %d, column %d): %.80s",
                               ck->index_file, jerr.line, jerr.column, jerr.text);
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        st = attn__set_error(err, ATTN_ERR_FORMAT, "%s has no \"weight_map\" object", ck->index_file);
        goto done;
    }
    if (json_object_size(map) > ATTN__INDEX_MAX_ENTRIES) {
        st = attn__set_error(err, ATTN_ERR_LIMIT,
                             "%s: weight_map has %zu entries, over the limit of %d (a checkpoint "
                             "names a few thousand tensors, a large mixture of experts ~100k)",
                             ck->index_file, json_object_size(map), ATTN__INDEX_MAX_ENTRIES);
        goto done;
    }
    ck->names = calloc(json_object_size(map) + 1, sizeof *ck->names);
    if (ck->names == NULL || !shard_set_init(&set, json_object_size(map))) {
        st = attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(map, key, val) {
        if (!json_is_string(val) || !safe_file_name(json_string_value(val))) {
            st = attn__set_error(err, ATTN_ERR_FORMAT,
                                 "%s: weight_map[\"%.80s\"] is not a file name in the directory",
                                 ck->index_file, key);
            goto done;
        }
        const char *file = json_string_value(val);
        int *slot = shard_set_find(&set, ck, file);
        int s = *slot - 1;
        if (s < 0) {
            s = ck->n_shards;
            if ((st = join(dir, file, path, err)) != ATTN_OK) goto done;
            if ((st = add_shard(ck, file, path, err)) != ATTN_OK) goto done;
            *slot = s + 1;
        }
        ck->names[ck->n_names].name = strdup(key);
        ck->names[ck->n_names].shard = s;
        if (ck->names[ck->n_names].name == NULL) {
            st = attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
            goto done;
        }
        ck->n_names++;
    }
    if (ck->n_names == 0) {
        st = attn__set_error(err, ATTN_ERR_FORMAT, "%s: weight_map is empty", ck->index_file);
        goto done;
    }
    qsort(ck->names, ck->n_names, sizeof *ck->names, indexed_cmp);
done:
    free(set.slot);
    json_decref(root);
    return st;
}

/* A Hugging Face model directory. */
static attn_status open_dir(ckpt *ck, const char *dir, attn_error *err)
{
    char st_path[PATH_CAP], index_path[PATH_CAP], cfg_path[PATH_CAP], bin[PATH_CAP];
    attn_status st;
    if ((st = join(dir, "model.safetensors", st_path, err)) ||
        (st = join(dir, "model.safetensors.index.json", index_path, err)) ||
        (st = join(dir, "config.json", cfg_path, err)))
        return st;
    int has_st = is_file(st_path), has_index = is_file(index_path);
    if (!has_st && !has_index) {
        static const char *const pickles[] = {"pytorch_model.bin", "pytorch_model.bin.index.json",
                                              "model.pt", "model.bin"};
        for (size_t i = 0; i < sizeof pickles / sizeof pickles[0]; i++) {
            if ((st = join(dir, pickles[i], bin, err)) != ATTN_OK) return st;
            if (is_file(bin))
                return attn__set_error(err, ATTN_ERR_UNSUPPORTED,
                                       "%.100s holds %s (PyTorch pickle), no model.safetensors: "
                                       "export it to safetensors (safetensors.torch.save_file) first",
                                       dir, pickles[i]);
        }
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "directory %.120s has no model.safetensors or "
                               "model.safetensors.index.json",
                               dir);
    }
    if (!is_file(cfg_path))
        return attn__set_error(err, ATTN_ERR_FORMAT,
                               "directory %.120s has no config.json (to load the file alone, pass "
                               "its .safetensors path)",
                               dir);
    if ((st = attn__hfcfg_read(cfg_path, &ck->cfg, err)) != ATTN_OK) return st;
    if (has_st) {
        if ((st = add_shard(ck, "model.safetensors", st_path, err)) != ATTN_OK) return st;
        if ((st = sniff(st_path, err)) != ATTN_OK) return st;
        return open_shard(ck, 0, err);
    }
    return read_index(ck, dir, index_path, err);
}

/* path: a file or a directory. legacy: a bare layer file (no config.json). */
static attn_status ckpt_open(ckpt *ck, const char *path, int legacy, attn_error *err)
{
    memset(ck, 0, sizeof *ck);
    struct stat sb;
    if (stat(path, &sb) != 0) return attn__set_error(err, ATTN_ERR_IO, "%.160s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        if (legacy) return attn__set_error(err, ATTN_ERR_IO, "%.160s: not a regular file", path);
        return open_dir(ck, path, err);
    }
    if (!S_ISREG(sb.st_mode))
        return attn__set_error(err, ATTN_ERR_IO,
                               "%.160s is not a regular file or a directory (a FIFO or device?)",
                               path);
    attn_status st = sniff(path, err);
    if (st == ATTN_OK) st = add_shard(ck, path, path, err);
    if (st == ATTN_OK) st = open_shard(ck, 0, err);
    /* model.safetensors inside a model directory: its config.json applies */
    if (st == ATTN_OK && !legacy && strcmp(base_name(path), "model.safetensors") == 0) {
        char cfg_path[PATH_CAP];
        size_t dir_len = strlen(path) - strlen("model.safetensors");
        int n = snprintf(cfg_path, sizeof cfg_path, "%.*sconfig.json", (int)dir_len, path);
        if (n > 0 && n < PATH_CAP && is_file(cfg_path)) st = attn__hfcfg_read(cfg_path, &ck->cfg, err);
    }
    return st;
}

/* ------------------------------------------------------------ tensor source */

static size_t n_names(const ckpt *ck)
{
    return ck->names ? ck->n_names : ck->shards[0].st.n_tensors;
}

static const char *src_name(void *p, size_t i)
{
    ckpt *ck = p;
    return ck->names ? ck->names[i].name : ck->shards[0].st.tensors[i].name;
}

/* The shard holding name, or -1. */
static int shard_of(const ckpt *ck, const char *name)
{
    if (ck->names == NULL) return attn__st_find(&ck->shards[0].st, name) ? 0 : -1;
    indexed key = {(char *)name, 0};
    const indexed *hit = bsearch(&key, ck->names, ck->n_names, sizeof key, indexed_cmp);
    return hit ? hit->shard : -1;
}

static attn_status src_find(void *p, const char *name, const attn__st_tensor **t, attn_error *err)
{
    ckpt *ck = p;
    *t = NULL;
    int s = shard_of(ck, name);
    if (s < 0) return ATTN_OK;
    attn_status st = open_shard(ck, s, err);
    if (st != ATTN_OK) return st;
    *t = attn__st_find(&ck->shards[s].st, name);
    if (*t == NULL)
        return attn__set_error(err, ATTN_ERR_FORMAT, "%s maps '%.90s' to '%.60s', which has no such "
                                                     "tensor",
                               ck->index_file, name, ck->shards[s].file);
    return ATTN_OK;
}

static const char *src_meta(void *p, const char *key)
{
    ckpt *ck = p;
    for (int i = 0; i < ck->n_shards; i++)
        if (ck->shards[i].opened) return attn__st_meta_get(&ck->shards[i].st, key);
    return NULL;
}

static attn__tsrc tsrc_of(ckpt *ck)
{
    attn__tsrc s = {ck, n_names(ck), src_name, src_find, src_meta};
    return s;
}

/* ------------------------------------------------------------ building */

/* Reads plan's tensors as float32 (f[i], owned by the caller) and rejects
 * non-finite weights naming the tensor and element. */
static attn_status read_tensors(ckpt *ck, const attn__plan *plan, float **f, char dtype[8],
                                attn__load_stats *stats, attn_error *err)
{
    dtype[0] = '\0';
    for (int i = 0; i < plan->n_src; i++) {
        const attn__src *s = &plan->src[i];
        const attn__st_tensor *t = s->t;
        int sh = shard_of(ck, s->name);
        if (sh < 0) return attn__set_error(err, ATTN_ERR_INTERNAL, "tensor '%.80s' lost", s->name);
        f[i] = malloc((t->numel ? t->numel : 1) * sizeof(float));
        if (f[i] == NULL)
            return attn__set_error(err, ATTN_ERR_NOMEM, "cannot allocate %.80s (%zu floats)", s->name,
                                   t->numel);
        attn_status st = attn__st_read_f32(&ck->shards[sh].st, t, f[i], err);
        if (st != ATTN_OK) return st;
        if (t->data == NULL && stats != NULL) {
            stats->tensor_bytes += t->nbytes;
            stats->tensors_read++;
        }
        for (size_t k = 0; k < t->numel; k++) {
            if (isfinite(f[i][k])) continue;
            const char *what = isnan(f[i][k]) ? "nan" : "inf";
            if (t->ndim == 2)
                return attn__set_error(err, ATTN_ERR_NONFINITE, "%.100s[%zu][%zu] is not finite (%s)",
                                       s->name, k / t->shape[1], k % t->shape[1], what);
            return attn__set_error(err, ATTN_ERR_NONFINITE, "%.100s[%zu] is not finite (%s)", s->name,
                                   k, what);
        }
        const char *name = attn__st_dtype_name(t->dtype);
        if (dtype[0] == '\0') snprintf(dtype, 8, "%s", name);
        else if (strcmp(dtype, name) != 0) snprintf(dtype, 8, "mixed");
    }
    return ATTN_OK;
}

static void plan_dtype(const attn__plan *plan, char dtype[8])
{
    dtype[0] = '\0';
    for (int i = 0; i < plan->n_src; i++) {
        const char *name = attn__st_dtype_name(plan->src[i].t->dtype);
        if (dtype[0] == '\0') snprintf(dtype, 8, "%s", name);
        else if (strcmp(dtype, name) != 0) snprintf(dtype, 8, "mixed");
    }
}

static void collect_stats(const ckpt *ck, attn__load_stats *stats)
{
    if (stats == NULL) return;
    stats->st_bytes = 0;
    stats->files_opened = 0;
    for (int i = 0; i < ck->n_shards; i++) {
        if (!ck->shards[i].opened) continue;
        stats->st_bytes += ck->shards[i].st.bytes_read;
        stats->files_opened++;
    }
}

/* How the layer keeps its weights: as asked, else as stored (the attention
 * tensors all BF16 or all F16), else F32. */
static attn_status keep_dtype(attn_weight_dtype asked, const char *stored, attn_weight_dtype *out,
                              attn_error *err)
{
    if ((int)asked < (int)ATTN_WDTYPE_DEFAULT || (int)asked > (int)ATTN_WDTYPE_BF16)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                               "opts.weights_dtype = %d, must be an attn_weight_dtype (0..3)", (int)asked);
    if (asked != ATTN_WDTYPE_DEFAULT) *out = asked;
    else if (strcmp(stored, "BF16") == 0) *out = ATTN_WDTYPE_BF16;
    else if (strcmp(stored, "F16") == 0) *out = ATTN_WDTYPE_F16;
    else *out = ATTN_WDTYPE_F32;
    return ATTN_OK;
}

/* The plan of ck's layer, its tensors read, the layer built. */
static attn_status build(ckpt *ck, const attn_load_options *opts, attn__plan_mode mode,
                         attn_layer **out, attn__load_stats *stats, attn_error *err)
{
    attn__plan *plan = malloc(sizeof *plan);
    float *f[ATTN__N_ROLES] = {0}, *aux[ATTN__N_ROLES] = {0};
    char dtype[8];
    attn_layer_desc d;
    if (plan == NULL) return attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
    attn__tsrc src = tsrc_of(ck);
    attn_status st = attn__family_plan(&src, &ck->cfg, opts, mode, plan, err);
    if (st == ATTN_OK) st = read_tensors(ck, plan, f, dtype, stats, err);
    if (st == ATTN_OK) st = attn__plan_assemble(plan, f, &d, aux, err);
    if (st == ATTN_OK) st = keep_dtype(opts->weights_dtype, dtype, &d.weights_dtype, err);
    if (st == ATTN_OK) st = attn_layer_create(&d, out, err);
    if (st == ATTN_OK) attn__layer_set_source_dtype(*out, dtype);
    for (int i = 0; i < ATTN__N_ROLES; i++) {
        free(f[i]);
        free(aux[i]);
    }
    free(plan);
    collect_stats(ck, stats);
    return st;
}

/* ------------------------------------------------------------ public */

static attn_load_options defaults(const attn_load_options *opts)
{
    if (opts != NULL) return *opts;
    attn_load_options o = {.family = ATTN_FAMILY_AUTO, .layer = -1};
    return o;
}

attn_status attn__layer_load_stats(const char *path, const attn_load_options *opts,
                                   attn_layer **out, attn__load_stats *stats, attn_error *err)
{
    if (stats != NULL) memset(stats, 0, sizeof *stats);
    if (out == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (path == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "path is NULL");
    attn_load_options o = defaults(opts);
    ckpt ck;
    attn_status st = ckpt_open(&ck, path, 0, err);
    if (st == ATTN_OK) st = build(&ck, &o, ATTN__PLAN_LOAD, out, stats, err);
    else collect_stats(&ck, stats);
    ckpt_free(&ck);
    return st;
}

attn_status attn_layer_load(const char *path, const attn_load_options *opts, attn_layer **out,
                            attn_error *err)
{
    return attn__layer_load_stats(path, opts, out, NULL, err);
}

attn_status attn_checkpoint_inspect(const char *path, const attn_load_options *opts,
                                    attn_checkpoint_info *info, attn_error *err)
{
    if (info == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "info is NULL");
    if (path == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "path is NULL");
    attn_load_options o = defaults(opts);
    ckpt ck;
    attn__plan *plan = NULL;
    attn_status st = ckpt_open(&ck, path, 0, err);
    if (st == ATTN_OK && (plan = malloc(sizeof *plan)) == NULL)
        st = attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
    if (st == ATTN_OK) {
        attn__tsrc src = tsrc_of(&ck);
        st = attn__family_plan(&src, &ck.cfg, &o, ATTN__PLAN_INSPECT, plan, err);
    }
    if (st == ATTN_OK) {
        const attn_layer_desc *d = &plan->desc;
        memset(info, 0, sizeof *info);
        info->family = plan->family;
        snprintf(info->model_type, sizeof info->model_type, "%s", ck.cfg.model_type);
        info->n_layers = plan->n_layers;
        info->num_heads = d->num_heads;
        info->num_kv_heads = d->num_kv_heads ? d->num_kv_heads : d->num_heads;
        info->head_dim = d->head_dim_k;
        info->hidden_size = d->embed_q;
        info->rope = d->rope;
        info->sliding_window = ck.cfg.sliding_window;
        plan_dtype(plan, info->dtype);
        info->n_shards = ck.n_shards;
        info->n_tensors = n_names(&ck);
    }
    free(plan);
    ckpt_free(&ck);
    return st;
}

attn_status attn_layer_load_safetensors(const char *path, int num_heads, attn_layer **out,
                                        attn_error *err)
{
    if (out == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (path == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "path is NULL");
    attn_load_options o = {.layer = -1, .num_heads = num_heads};
    ckpt ck;
    attn_status st = ckpt_open(&ck, path, 1, err);
    if (st == ATTN_OK) st = build(&ck, &o, ATTN__PLAN_LEGACY, out, NULL, err);
    ckpt_free(&ck);
    return st;
}

attn_status attn_layer_load_safetensors_mem(const void *data, size_t len, int num_heads,
                                            attn_layer **out, attn_error *err)
{
    if (out == NULL) return attn__set_error(err, ATTN_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    attn_load_options o = {.layer = -1, .num_heads = num_heads};
    ckpt ck;
    memset(&ck, 0, sizeof ck);
    attn_status st = add_shard(&ck, "(memory)", "(memory)", err);
    if (st == ATTN_OK) st = attn__st_parse(data, len, &ck.shards[0].st, err);
    if (st == ATTN_OK) {
        ck.shards[0].opened = 1;
        st = build(&ck, &o, ATTN__PLAN_LEGACY, out, NULL, err);
    }
    ckpt_free(&ck);
    return st;
}
