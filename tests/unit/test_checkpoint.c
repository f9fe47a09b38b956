/* test_checkpoint.c — the checkpoint loader (attn_layer_load, attn_checkpoint_inspect)
 * on the fixtures of tests/fixtures/ckpt (written by gen_checkpoints.py from torch):
 * every family's info, its chosen layer's output and per-head weights against the
 * torch reference through attn_forward (max diff printed, tol 1e-5 * max(1,
 * |expected|)), layer selection, config.json variants, every broken checkpoint of
 * tests/fixtures/ckpt_broken (table-driven; every entry must be in the table), only
 * the selected tensors read (the loader's own count, the kernel's read count from
 * /proc/self/io, and a 4 GiB sparse tensor that a whole-file read could not skip),
 * and FIFOs refused without blocking. Run from the repository root. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn.h"
#include "check.h"
#include "checkpoint.h"
#include "safetensors.h"

#define CKPT "tests/fixtures/ckpt/"
#define BROKEN "tests/fixtures/ckpt_broken/"
#define TOL 1e-5

/* ------------------------------------------------------------ helpers */

static attn_load_options opts_layer(int layer)
{
    attn_load_options o = {.family = ATTN_FAMILY_AUTO, .layer = layer};
    return o;
}

static float *to_f32(const attn__st_tensor *t)
{
    float *p = malloc((t->numel ? t->numel : 1) * sizeof *p);
    if (p && attn__st_to_f32(t, p, NULL) != ATTN_OK) {
        free(p);
        p = NULL;
    }
    return p;
}

static const attn__st_tensor *find_i(const attn__st_file *f, const char *key, int i)
{
    char name[32];
    snprintf(name, sizeof name, "%s.%d", key, i);
    return attn__st_find(f, name);
}

/* max |got - want| and max |want| over n floats */
static void max_diff(const float *got, const float *want, size_t n, double *diff, double *scale)
{
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)want[i];
        if (d < 0) d = -d;
        if (d > *diff || d != d) *diff = d != d ? 1e30 : d;
        double a = want[i] < 0 ? -(double)want[i] : (double)want[i];
        if (a > *scale) *scale = a;
    }
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) return -1;
    fputs(text, f);
    return fclose(f);
}

/* A fresh directory under /tmp; the caller removes it with rm_tree. */
static int make_tmp(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/attn_ckpt_XXXXXX");
    return mkdtemp(dir) != NULL ? 0 : -1;
}

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[512];
    while (d && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* Bytes this process has read through read/pread (the kernel's count), or -1. */
static long long rchar(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    if (f == NULL) return -1;
    char line[128];
    long long v = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "rchar: %lld", &v) == 1) break;
    fclose(f);
    return v;
}

/* ------------------------------------------------------------ inspect */

typedef struct info_case {
    const char *path, *prefix;
    int heads_arg; /* opts.num_heads: a bare state_dict does not say */
    attn_family family;
    const char *model_type;
    int n_layers, heads, kv_heads, head_dim, hidden;
    attn_rope_scaling scaling;
    double theta, factor;
    int rotary_dim, sliding_window;
    const char *dtype;
    int n_shards;
    size_t n_tensors;
} info_case;

static const info_case infos[] = {
    {CKPT "llama_gqa", NULL, 0, ATTN_FAMILY_LLAMA, "llama", 2, 4, 2, 16, 64, ATTN_ROPE_SCALING_LLAMA3,
     500000.0, 8.0, 16, 0, "F32", 1, 21},
    {CKPT "llama_gqa/model.safetensors", NULL, 0, ATTN_FAMILY_LLAMA, "llama", 2, 4, 2, 16, 64,
     ATTN_ROPE_SCALING_LLAMA3, 500000.0, 8.0, 16, 0, "F32", 1, 21},
    {CKPT "mistral_mqa", NULL, 0, ATTN_FAMILY_LLAMA, "mistral", 2, 4, 1, 16, 64, ATTN_ROPE_SCALING_NONE,
     10000.0, 0, 16, 4, "BF16", 1, 21},
    {CKPT "qwen2_bias", NULL, 0, ATTN_FAMILY_LLAMA, "qwen2", 2, 4, 2, 12, 48, ATTN_ROPE_SCALING_LINEAR,
     1000000.0, 2.0, 12, 0, "F32", 1, 27},
    {CKPT "sharded", NULL, 0, ATTN_FAMILY_LLAMA, "llama", 2, 4, 4, 8, 32, ATTN_ROPE_SCALING_NONE,
     10000.0, 0, 8, 0, "F32", 2, 21},
    {CKPT "bert", NULL, 0, ATTN_FAMILY_BERT, "bert", 2, 4, 4, 8, 32, ATTN_ROPE_SCALING_NONE, 0, 0, 0, 0,
     "F32", 1, 37},
    {CKPT "gpt2", NULL, 0, ATTN_FAMILY_GPT2, "gpt2", 2, 4, 4, 8, 32, ATTN_ROPE_SCALING_NONE, 0, 0, 0, 0,
     "F32", 1, 32},
    {CKPT "tel_prefix.safetensors", "self_attn.", 4, ATTN_FAMILY_MHA, "", 1, 4, 4, 8, 32,
     ATTN_ROPE_SCALING_NONE, 0, 0, 0, 0, "F32", 1, 12},
    {CKPT "tel_prefix.safetensors", NULL, 4, ATTN_FAMILY_MHA, "", 1, 4, 4, 8, 32, /* prefix found */
     ATTN_ROPE_SCALING_NONE, 0, 0, 0, 0, "F32", 1, 12},
};

TEST(inspect)
{
    for (size_t i = 0; i < sizeof infos / sizeof infos[0]; i++) {
        const info_case *c = &infos[i];
        attn_load_options o = opts_layer(7); /* ignored by inspect */
        o.prefix = c->prefix;
        o.num_heads = c->heads_arg;
        attn_checkpoint_info in;
        attn_error err = {0};
        attn_status st = attn_checkpoint_inspect(c->path, &o, &in, &err);
        CHECK_MSG(st == ATTN_OK, "%s: %s", c->path, err.message);
        if (st != ATTN_OK) continue;
        CHECK_MSG(in.family == c->family, "%s: family %s", c->path, attn_family_name(in.family));
        CHECK_STR_EQ(in.model_type, c->model_type);
        CHECK_INT_EQ(in.n_layers, c->n_layers);
        CHECK_INT_EQ(in.num_heads, c->heads);
        CHECK_INT_EQ(in.num_kv_heads, c->kv_heads);
        CHECK_INT_EQ(in.head_dim, c->head_dim);
        CHECK_INT_EQ(in.hidden_size, c->hidden);
        int rotary = c->family == ATTN_FAMILY_LLAMA;
        CHECK_INT_EQ(in.rope.style, rotary ? ATTN_ROPE_HALF : ATTN_ROPE_NONE);
        CHECK_INT_EQ(in.rope.scaling, c->scaling);
        CHECK(in.rope.theta == c->theta);
        CHECK(in.rope.factor == c->factor);
        CHECK_INT_EQ(in.rope.rotary_dim, c->rotary_dim);
        CHECK_INT_EQ(in.sliding_window, c->sliding_window);
        CHECK_STR_EQ(in.dtype, c->dtype);
        CHECK_INT_EQ(in.n_shards, c->n_shards);
        CHECK_INT_EQ(in.n_tensors, c->n_tensors);
        if (c->scaling == ATTN_ROPE_SCALING_LLAMA3) {
            CHECK(in.rope.low_freq_factor == 1.0 && in.rope.high_freq_factor == 4.0);
            CHECK_INT_EQ(in.rope.original_max_position, 64);
        }
    }
    CHECK_STR_EQ(attn_family_name(ATTN_FAMILY_AUTO), "auto");
    CHECK_STR_EQ(attn_family_name(ATTN_FAMILY_MHA), "mha");
    CHECK_STR_EQ(attn_family_name(ATTN_FAMILY_EXPLICIT), "explicit");
    CHECK_STR_EQ(attn_family_name(ATTN_FAMILY_LLAMA), "llama");
    CHECK_STR_EQ(attn_family_name(ATTN_FAMILY_BERT), "bert");
    CHECK_STR_EQ(attn_family_name(ATTN_FAMILY_GPT2), "gpt2");
    CHECK_STR_EQ(attn_family_name((attn_family)42), "unknown");
}

/* ------------------------------------------------------------ parity */

/* Replays NAME.io.safetensors through the layer its metadata names. */
static void replay(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, CKPT "%s.io.safetensors", name);
    attn__st_file io;
    attn_error err = {0};
    attn_status st = attn__st_read_file(path, &io, &err);
    CHECK_MSG(st == ATTN_OK, "%s: %s", path, err.message);
    if (st != ATTN_OK) return;
    CHECK_STR_EQ(attn__st_meta_get(&io, "format"), "attn-ckpt-fixture");
    const char *ck = attn__st_meta_get(&io, "checkpoint"), *prefix = attn__st_meta_get(&io, "prefix");
    int layer = atoi(attn__st_meta_get(&io, "layer")), n = atoi(attn__st_meta_get(&io, "n_seqs"));
    int causal = atoi(attn__st_meta_get(&io, "is_causal"));
    int window = atoi(attn__st_meta_get(&io, "window"));
    attn_load_options o = opts_layer(layer);
    o.prefix = prefix;
    o.num_heads = atoi(attn__st_meta_get(&io, "heads_arg"));
    attn_layer *l = NULL;
    st = attn_layer_load(ck, &o, &l, &err);
    CHECK_MSG(st == ATTN_OK, "%s layer %d: %s %s", ck, layer, attn_status_name(st), err.message);
    if (st != ATTN_OK) {
        attn__st_free(&io);
        return;
    }
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    for (int i = 0; i < n; i++) {
        const attn__st_tensor *tx = find_i(&io, "x", i), *tout = find_i(&io, "out", i),
                              *tw = find_i(&io, "w_head", i), *tpos = find_i(&io, "pos", i),
                              *tkpm = find_i(&io, "kpm", i);
        CHECK(tx && tout && tw);
        if (!tx || !tout || !tw) continue;
        int t = (int)tx->shape[0];
        float *x = to_f32(tx), *want = to_f32(tout), *want_w = to_f32(tw);
        float *out = calloc(tout->numel, sizeof *out), *w = calloc(tw->numel, sizeof *w);
        int64_t *pos = NULL;
        if (tpos != NULL) {
            pos = malloc((size_t)t * sizeof *pos);
            memcpy(pos, tpos->data, (size_t)t * sizeof *pos); /* little-endian host */
        }
        attn_seq s = {.t = t, .s = t, .query = x, .is_causal = causal, .window = window,
                      .key_padding_mask = tkpm ? tkpm->data : NULL, .output = out,
                      .weights_mode = ATTN_WEIGHTS_PER_HEAD, .weights = w, .position_ids = pos};
        CHECK_INT_EQ(tw->shape[0], li.num_heads);
        st = attn_forward(l, &s, 1, NULL, NULL, &err);
        CHECK_MSG(st == ATTN_OK, "%s seq %d: %s", name, i, err.message);
        double d_out = 0, s_out = 0, d_w = 0, s_w = 0;
        max_diff(out, want, tout->numel, &d_out, &s_out);
        max_diff(w, want_w, tw->numel, &d_w, &s_w);
        printf("  %-12s layer %d seq %d (T=%d%s%s): max |out - torch| %.3g, max |w_head - torch| %.3g\n",
               name, layer, i, t, pos ? ", positions" : "", tkpm ? ", key padding" : "", d_out, d_w);
        CHECK_MSG(d_out <= TOL * (s_out > 1 ? s_out : 1), "%s seq %d out diff %g", name, i, d_out);
        CHECK_MSG(d_w <= TOL * (s_w > 1 ? s_w : 1), "%s seq %d w_head diff %g", name, i, d_w);
        free(x);
        free(want);
        free(want_w);
        free(out);
        free(w);
        free(pos);
    }
    attn_layer_free(l);
    attn__st_free(&io);
}

TEST(parity_llama_gqa) { replay("llama_gqa"); }
TEST(parity_mistral_mqa) { replay("mistral_mqa"); }
TEST(parity_qwen2_bias) { replay("qwen2_bias"); }
TEST(parity_sharded) { replay("sharded"); }
TEST(parity_bert) { replay("bert"); }
TEST(parity_gpt2) { replay("gpt2"); }
TEST(parity_tel_prefix) { replay("tel_prefix"); }

/* ------------------------------------------------------------ layer selection */

static void expect(attn_status st, attn_status want, const attn_error *err, const char *what,
                   const char *says)
{
    CHECK_MSG(st == want, "%s: got %s \"%s\", want %s", what, attn_status_name(st), err->message,
              attn_status_name(want));
    CHECK_MSG(says == NULL || strstr(err->message, says) != NULL, "%s: \"%s\" lacks \"%s\"", what,
              err->message, says);
}

TEST(layer_selection)
{
    attn_layer *l = (attn_layer *)&l;
    attn_error err = {0};
    attn_load_options o = opts_layer(-1);
    expect(attn_layer_load(CKPT "llama_gqa", &o, &l, &err), ATTN_ERR_INVALID_ARG, &err, "layer -1",
           "the checkpoint has 2 layers (0..1): choose one with layer=N");
    CHECK(l == NULL);
    expect(attn_layer_load(CKPT "llama_gqa", NULL, &l, &err), ATTN_ERR_INVALID_ARG, &err,
           "opts NULL", "choose one with layer=N");
    o.layer = 5;
    expect(attn_layer_load(CKPT "bert", &o, &l, &err), ATTN_ERR_INVALID_ARG, &err, "layer 5",
           "layer 5 not found: the checkpoint has 2 layers (0..1)");
    o.layer = -2;
    expect(attn_layer_load(CKPT "gpt2", &o, &l, &err), ATTN_ERR_INVALID_ARG, &err, "layer -2",
           "layer=N");
    /* the two layers of a checkpoint are different layers */
    attn_layer *a = NULL, *b = NULL;
    o.layer = 0;
    CHECK_INT_EQ(attn_layer_load(CKPT "llama_gqa", &o, &a, &err), ATTN_OK);
    o.layer = 1;
    CHECK_INT_EQ(attn_layer_load(CKPT "llama_gqa", &o, &b, &err), ATTN_OK);
    if (a && b) {
        float x[3 * 64], ya[3 * 64], yb[3 * 64];
        for (int i = 0; i < 3 * 64; i++) x[i] = (float)((i * 7) % 13 - 6) / 8.0f;
        attn_seq s = {.t = 3, .s = 3, .query = x, .is_causal = 1, .output = ya};
        CHECK_INT_EQ(attn_forward(a, &s, 1, NULL, NULL, &err), ATTN_OK);
        s.output = yb;
        CHECK_INT_EQ(attn_forward(b, &s, 1, NULL, NULL, &err), ATTN_OK);
        CHECK(memcmp(ya, yb, sizeof ya) != 0);
        attn_layer_info in;
        attn_layer_get_info(b, &in);
        CHECK_INT_EQ(in.num_kv_heads, 2);
        CHECK_INT_EQ(in.rope.style, ATTN_ROPE_HALF);
        CHECK_STR_EQ(in.source_dtype, "F32");
    }
    attn_layer_free(a);
    attn_layer_free(b);
    /* a single layer: -1 and its number both pick it */
    o.layer = -1;
    o.prefix = "self_attn.";
    expect(attn_layer_load(CKPT "tel_prefix.safetensors", &o, &l, &err), ATTN_ERR_INVALID_ARG, &err,
           "tel without heads", "pass heads=N");
    o.num_heads = 4;
    CHECK_INT_EQ(attn_layer_load(CKPT "tel_prefix.safetensors", &o, &a, &err), ATTN_OK);
    attn_layer_free(a);
    o.prefix = "self_attn"; /* the dot is implied */
    CHECK_INT_EQ(attn_layer_load(CKPT "tel_prefix.safetensors", &o, &a, &err), ATTN_OK);
    attn_layer_free(a);
    o.prefix = "self_attn.";
    o.layer = 0;
    CHECK_INT_EQ(attn_layer_load(CKPT "tel_prefix.safetensors", &o, &a, &err), ATTN_OK);
    attn_layer_free(a);
    /* a family forced on the wrong checkpoint names what it looked for */
    attn_load_options f = {.family = ATTN_FAMILY_GPT2, .layer = 0};
    expect(attn_layer_load(CKPT "llama_gqa", &f, &l, &err), ATTN_ERR_MISSING_TENSOR, &err,
           "family gpt2 on llama", "h.0.attn.c_attn.weight");
    f.family = (attn_family)9;
    expect(attn_layer_load(CKPT "llama_gqa", &f, &l, &err), ATTN_ERR_INVALID_ARG, &err,
           "family 9", "opts.family");
    /* heads overridden by the options */
    attn_load_options h = {.layer = 0, .num_heads = 8, .num_kv_heads = 4};
    CHECK_INT_EQ(attn_layer_load(CKPT "llama_gqa", &h, &a, &err), ATTN_OK); /* head_dim 16 stays */
    attn_layer_free(a);
    h.num_kv_heads = 3;
    expect(attn_layer_load(CKPT "llama_gqa", &h, &l, &err), ATTN_ERR_SHAPE, &err, "kv 3 of 8",
           "does not divide");
    expect(attn_layer_load(CKPT "llama_gqa", &o, NULL, &err), ATTN_ERR_INVALID_ARG, &err, "out NULL",
           "out");
    attn_checkpoint_info in;
    expect(attn_checkpoint_inspect(NULL, NULL, &in, &err), ATTN_ERR_INVALID_ARG, &err, "path NULL",
           "path");
}

/* The 0.1 names through the 0.2 loader: same layer as attn_layer_load_safetensors,
 * except that a partial bias set is refused there (the 0.1 loader still takes it). */
TEST(bare_layer_files)
{
    attn_layer *a = NULL, *b = NULL;
    attn_error err = {0};
    attn_load_options o = opts_layer(-1);
    CHECK_INT_EQ(attn_layer_load("config/demo.safetensors", &o, &a, &err), ATTN_OK);
    CHECK_INT_EQ(attn_layer_load_safetensors("config/demo.safetensors", 0, &b, &err), ATTN_OK);
    if (a && b) {
        float x[4 * 64], ya[4 * 64], yb[4 * 64];
        for (int i = 0; i < 4 * 64; i++) x[i] = (float)((i * 5) % 11 - 5) / 8.0f;
        attn_seq s = {.t = 4, .s = 4, .query = x, .output = ya};
        CHECK_INT_EQ(attn_forward(a, &s, 1, NULL, NULL, &err), ATTN_OK);
        s.output = yb;
        CHECK_INT_EQ(attn_forward(b, &s, 1, NULL, NULL, &err), ATTN_OK);
        CHECK(memcmp(ya, yb, sizeof ya) == 0);
    }
    attn_layer_free(a);
    attn_layer_free(b);
    CHECK_INT_EQ(attn_layer_load("tests/fixtures/good/explicit_no_wo.safetensors", &o, &a, &err),
                 ATTN_OK);
    attn_layer_free(a);
    attn_layer *l = NULL;
    expect(attn_layer_load("tests/fixtures/good/kdim_vdim.safetensors", &o, &l, &err),
           ATTN_ERR_MISSING_TENSOR, &err, "kdim_vdim", "'out_proj.bias' not found, but 'in_proj_bias' is");
    CHECK_INT_EQ(attn_layer_load_safetensors("tests/fixtures/good/kdim_vdim.safetensors", 0, &l, &err),
                 ATTN_OK);
    attn_layer_free(l);
    /* a pickle through the 0.1 entry point is recognised too */
    l = NULL;
    expect(attn_layer_load_safetensors(BROKEN "pickle_zip.pt", 0, &l, &err), ATTN_ERR_UNSUPPORTED,
           &err, "0.1 loader on a pickle", "pickle");
    CHECK(l == NULL);
}

/* config.json spellings, on the qwen2_bias tensors (a symlink). */
TEST(config_variants)
{
    char dir[64], p[128], target[512];
    if (make_tmp(dir, sizeof dir) != 0) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    char *cwd = getcwd(NULL, 0);
    snprintf(target, sizeof target, "%s/" CKPT "qwen2_bias/model.safetensors", cwd ? cwd : ".");
    free(cwd);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK_INT_EQ(symlink(target, p), 0);
    snprintf(p, sizeof p, "%s/config.json", dir);
    static const struct {
        const char *json;
        attn_status st;
        attn_rope_scaling scaling;
        double theta, factor;
        int rotary_dim;
        const char *says;
    } v[] = {
        {"{\"model_type\":\"qwen2\",\"hidden_size\":48,\"num_attention_heads\":4,"
         "\"num_key_value_heads\":2,\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":2.0,"
         "\"rope_theta\":1000000.0}}",
         ATTN_OK, ATTN_ROPE_SCALING_LINEAR, 1e6, 2.0, 12, NULL},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":48,\"num_attention_heads\":4,"
         "\"num_key_value_heads\":2,\"rope_scaling\":null,\"partial_rotary_factor\":0.5}",
         ATTN_OK, ATTN_ROPE_SCALING_NONE, 10000.0, 0, 6, NULL},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":48,\"num_attention_heads\":4,"
         "\"num_key_value_heads\":2,\"head_dim\":12,\"rope_theta\":5e5,"
         "\"rope_scaling\":{\"rope_type\":\"default\"}}",
         ATTN_OK, ATTN_ROPE_SCALING_NONE, 5e5, 0, 12, NULL},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":48,\"num_attention_heads\":4,"
         "\"num_key_value_heads\":2,\"partial_rotary_factor\":0.25}",
         ATTN_ERR_UNSUPPORTED, 0, 0, 0, 0, "gives 3 rotary dims"},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":48,\"num_attention_heads\":4,"
         "\"num_key_value_heads\":2,\"rope_theta\":-1}",
         ATTN_ERR_FORMAT, 0, 0, 0, 0, "rope_theta"},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":\"48\"}", ATTN_ERR_FORMAT, 0, 0, 0, 0,
         "\"hidden_size\" is not an integer"},
        {"[1]", ATTN_ERR_FORMAT, 0, 0, 0, 0, "not a JSON object"},
        {"{\"model_type\":\"qwen2\",\"hidden_size\":48,\"num_attention_heads\":4,"
         "\"num_key_value_heads\":2,\"rope_parameters\":{\"full_attention\":{\"rope_type\":"
         "\"default\"}}}",
         ATTN_ERR_UNSUPPORTED, 0, 0, 0, 0, "per-layer-type"},
        /* no model_type: the family comes from the tensor names */
        {"{\"hidden_size\":48,\"num_attention_heads\":4,\"num_key_value_heads\":2}", ATTN_OK,
         ATTN_ROPE_SCALING_NONE, 10000.0, 0, 12, NULL},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        CHECK_INT_EQ(write_text(p, v[i].json), 0);
        attn_checkpoint_info in;
        attn_error err = {0};
        attn_status st = attn_checkpoint_inspect(dir, NULL, &in, &err);
        CHECK_MSG(st == v[i].st, "config %zu: %s \"%s\"", i, attn_status_name(st), err.message);
        if (st != ATTN_OK) {
            CHECK_MSG(strstr(err.message, v[i].says) != NULL, "config %zu: \"%s\" lacks \"%s\"", i,
                      err.message, v[i].says);
            continue;
        }
        CHECK_INT_EQ(in.family, ATTN_FAMILY_LLAMA);
        CHECK_INT_EQ(in.rope.scaling, v[i].scaling);
        CHECK_MSG(in.rope.theta == v[i].theta, "config %zu theta %g", i, in.rope.theta);
        CHECK(in.rope.factor == v[i].factor);
        CHECK_INT_EQ(in.rope.rotary_dim, v[i].rotary_dim);
        CHECK_INT_EQ(in.num_kv_heads, 2);
        attn_load_options o = opts_layer(0);
        attn_layer *l = NULL;
        CHECK_INT_EQ(attn_layer_load(dir, &o, &l, &err), ATTN_OK);
        attn_layer_free(l);
    }
    rm_tree(dir);
}

/* ------------------------------------------------------------ broken */

typedef struct broken_case {
    const char *entry; /* file or directory in ckpt_broken/ */
    attn_family family;
    int layer;
    const char *prefix;
    attn_status code;
    const char *says[3]; /* substrings the message must contain */
} broken_case;

static const broken_case broken[] = {
    {"missing_shard", 0, -1, NULL, ATTN_ERR_IO,
     {"model-00002-of-00002.safetensors", "model.safetensors.index.json", "missing"}},
    {"index_missing_tensor", 0, -1, NULL, ATTN_ERR_FORMAT,
     {"model.layers.0.self_attn.v_proj.weight", "model-00001-of-00001.safetensors", "no such tensor"}},
    {"index_path_escape", 0, -1, NULL, ATTN_ERR_FORMAT, {"weight_map", "not a file name", NULL}},
    {"shape_mismatch", 0, -1, NULL, ATTN_ERR_SHAPE,
     {"k_proj.weight is [4, 16]", "[8, 16]", "config.json: hidden 16, heads 4, kv heads 2"}},
    {"heads_not_dividing", 0, -1, NULL, ATTN_ERR_SHAPE,
     {"hidden_size 16 is not divisible by num_attention_heads 3", NULL, NULL}},
    {"kv_heads_not_dividing", 0, -1, NULL, ATTN_ERR_SHAPE,
     {"num_key_value_heads 3 does not divide num_attention_heads 4", NULL, NULL}},
    {"unknown_rope_type", 0, -1, NULL, ATTN_ERR_UNSUPPORTED, {"rope_scaling", "\"yarn\"", "llama3"}},
    {"unknown_rope_old_key", 0, -1, NULL, ATTN_ERR_UNSUPPORTED, {"\"dynamic\"", NULL, NULL}},
    {"unknown_rope_parameters", 0, -1, NULL, ATTN_ERR_UNSUPPORTED,
     {"rope_parameters", "\"longrope\"", NULL}},
    {"llama3_missing_key", 0, -1, NULL, ATTN_ERR_FORMAT,
     {"original_max_position_embeddings", NULL, NULL}},
    {"unknown_model_type", 0, -1, NULL, ATTN_ERR_UNSUPPORTED, {"\"gemma\"", "format=llama", NULL}},
    {"missing_tensor", 0, -1, NULL, ATTN_ERR_MISSING_TENSOR,
     {"'model.layers.0.self_attn.k_proj.weight' not found", "nearest: ",
      "'model.layers.0.self_attn.q_proj.weight'"}},
    {"typo_tensor", 0, -1, NULL, ATTN_ERR_FORMAT,
     {"unknown tensor 'model.layers.0.self_attn.o_proj.wieght'", NULL, NULL}},
    {"qwen2_partial_bias", 0, -1, NULL, ATTN_ERR_MISSING_TENSOR,
     {"'model.layers.0.self_attn.k_proj.bias' not found", "but 'q_proj.bias' is", NULL}},
    {"mha_partial_bias.safetensors", 0, -1, NULL, ATTN_ERR_MISSING_TENSOR,
     {"'out_proj.bias' not found", "'in_proj_bias' is", "bias=False"}},
    {"no_config", 0, -1, NULL, ATTN_ERR_FORMAT, {"no config.json", ".safetensors path", NULL}},
    {"config_only", 0, -1, NULL, ATTN_ERR_FORMAT,
     {"no model.safetensors or model.safetensors.index.json", NULL, NULL}},
    {"config_bad_json", 0, -1, NULL, ATTN_ERR_FORMAT, {"config.json is not valid JSON", "line", NULL}},
    {"pickle_zip.pt", 0, -1, NULL, ATTN_ERR_UNSUPPORTED,
     {"pickle_zip.pt is a PyTorch pickle/zip checkpoint, not safetensors", "torch.load('pickle_zip.pt')",
      "'model.safetensors')\""}},
    {"pickle_legacy.bin", 0, -1, NULL, ATTN_ERR_UNSUPPORTED,
     {"pickle_legacy.bin is a PyTorch pickle/zip", "torch.load('pickle_legacy.bin')", NULL}},
    {"pytorch_bin_dir", 0, -1, NULL, ATTN_ERR_UNSUPPORTED, {"pytorch_model.bin", "safetensors", NULL}},
    {"bert_relative", 0, -1, NULL, ATTN_ERR_UNSUPPORTED, {"relative_key", "absolute", NULL}},
};
#define N_BROKEN (sizeof broken / sizeof broken[0])

TEST(broken_checkpoints)
{
    for (size_t i = 0; i < N_BROKEN; i++) {
        const broken_case *c = &broken[i];
        char path[256];
        snprintf(path, sizeof path, BROKEN "%s", c->entry);
        attn_load_options o = {.family = c->family, .layer = c->layer, .prefix = c->prefix};
        attn_layer *l = (attn_layer *)&l;
        attn_error err = {0};
        attn_status st = attn_layer_load(path, &o, &l, &err);
        printf("  %-30s %-24s %s\n", c->entry, attn_status_name(st), err.message);
        CHECK_MSG(st == c->code, "%s: got %s \"%s\", want %s", c->entry, attn_status_name(st),
                  err.message, attn_status_name(c->code));
        CHECK_MSG(err.code == st, "%s: err.code", c->entry);
        CHECK_MSG(l == NULL, "%s: *out not NULL", c->entry);
        CHECK_MSG(strlen(err.message) < ATTN_ERROR_MESSAGE_MAX - 1, "%s: message cut: %s", c->entry,
                  err.message);
        for (int k = 0; k < 3; k++)
            CHECK_MSG(c->says[k] == NULL || strstr(err.message, c->says[k]) != NULL,
                      "%s: \"%s\" lacks \"%s\"", c->entry, err.message, c->says[k]);
        /* inspect sees the same problem, except where only the tensors' bytes tell */
        attn_checkpoint_info in;
        attn_error e2 = {0};
        attn_status st2 = attn_checkpoint_inspect(path, &o, &in, &e2);
        CHECK_MSG(st2 == c->code, "%s (inspect): got %s \"%s\"", c->entry, attn_status_name(st2),
                  e2.message);
    }
    DIR *d = opendir(BROKEN);
    CHECK(d != NULL);
    struct dirent *de;
    size_t entries = 0;
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        entries++;
        int found = 0;
        for (size_t i = 0; i < N_BROKEN; i++) found |= strcmp(broken[i].entry, de->d_name) == 0;
        CHECK_MSG(found, "ckpt_broken/%s has no expected status in the table", de->d_name);
    }
    if (d) closedir(d);
    CHECK_INT_EQ(entries, N_BROKEN);
}

/* ------------------------------------------------------------ reads */

/* Sum of the byte sizes of the tensors of file whose names start with base. */
static uint64_t tensor_bytes_under(const char *file, const char *base, uint64_t *header)
{
    attn__st_file f;
    uint64_t n = 0;
    if (attn__st_open(file, &f, NULL) != ATTN_OK) return 0;
    for (size_t i = 0; i < f.n_tensors; i++)
        if (strncmp(f.tensors[i].name, base, strlen(base)) == 0) n += f.tensors[i].nbytes;
    *header = f.data_start;
    attn__st_free(&f);
    return n;
}

static uint64_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

TEST(reads_only_the_layer)
{
    static const struct {
        const char *ckpt, *file, *base;
        int layer, tensors;
    } v[] = {
        {CKPT "llama_gqa", CKPT "llama_gqa/model.safetensors", "model.layers.1.self_attn.", 1, 4},
        {CKPT "mistral_mqa", CKPT "mistral_mqa/model.safetensors", "model.layers.0.self_attn.", 0, 4},
        {CKPT "qwen2_bias", CKPT "qwen2_bias/model.safetensors", "model.layers.0.self_attn.", 0, 7},
        {CKPT "bert", CKPT "bert/model.safetensors", "bert.encoder.layer.0.attention.self.", 0, 8},
        {CKPT "gpt2", CKPT "gpt2/model.safetensors", "transformer.h.1.attn.c_", 1, 4},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        attn__load_stats stats;
        attn_layer *l = NULL;
        attn_error err = {0};
        attn_load_options o = opts_layer(v[i].layer);
        attn_status st = attn__layer_load_stats(v[i].ckpt, &o, &l, &stats, &err);
        CHECK_MSG(st == ATTN_OK, "%s: %s", v[i].ckpt, err.message);
        attn_layer_free(l);
        uint64_t header = 0, want = tensor_bytes_under(v[i].file, v[i].base, &header);
        if (strstr(v[i].base, "bert")) { /* + attention.output.dense.{weight,bias} */
            uint64_t h2;
            want += tensor_bytes_under(v[i].file, "bert.encoder.layer.0.attention.output.dense.", &h2);
        }
        printf("  %-28s layer %d: read %" PRIu64 " of %" PRIu64 " bytes (%d tensors, header %" PRIu64
               ")\n",
               v[i].ckpt, v[i].layer, stats.st_bytes, file_size(v[i].file), stats.tensors_read,
               header);
        CHECK_INT_EQ(stats.tensors_read, v[i].tensors);
        CHECK_MSG(stats.tensor_bytes == want, "%s: read %" PRIu64 " tensor bytes, the layer has %" PRIu64,
                  v[i].ckpt, stats.tensor_bytes, want);
        CHECK_MSG(stats.st_bytes == header + want, "%s: %" PRIu64 " bytes read", v[i].ckpt, stats.st_bytes);
        CHECK_INT_EQ(stats.files_opened, 1);
    }
    /* sharded: layer 0 spans both shards; layer 1 lives in the second only */
    attn__load_stats stats;
    attn_layer *l = NULL;
    attn_error err = {0};
    attn_load_options o = opts_layer(0);
    CHECK_INT_EQ(attn__layer_load_stats(CKPT "sharded", &o, &l, &stats, &err), ATTN_OK);
    attn_layer_free(l);
    CHECK_INT_EQ(stats.files_opened, 2);
    CHECK_INT_EQ(stats.tensors_read, 4);
    o.layer = 1;
    CHECK_INT_EQ(attn__layer_load_stats(CKPT "sharded", &o, &l, &stats, &err), ATTN_OK);
    attn_layer_free(l);
    CHECK_INT_EQ(stats.files_opened, 1);
    /* inspect reads no tensor at all: the kernel's count stays near the headers' size */
    long long r0 = rchar();
    attn_checkpoint_info in;
    CHECK_INT_EQ(attn_checkpoint_inspect(CKPT "llama_gqa", NULL, &in, &err), ATTN_OK);
    long long r1 = rchar();
    if (r0 >= 0 && r1 >= 0) {
        uint64_t header = 0;
        tensor_bytes_under(CKPT "llama_gqa/model.safetensors", "", &header);
        printf("  inspect llama_gqa: the kernel counted %lld bytes read (header %" PRIu64 ")\n",
               r1 - r0, header);
        CHECK((uint64_t)(r1 - r0) < header + 8192); /* + config.json */
    }
}

/* A checkpoint whose first tensor is a 4 GiB hole: loading layer 1 must read
 * about a header and one layer, by the loader's count and the kernel's. */
TEST(huge_sparse_checkpoint)
{
    char dir[64], p[128];
    if (make_tmp(dir, sizeof dir) != 0) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    attn__st_file src;
    attn_error err = {0};
    CHECK_INT_EQ(attn__st_read_file(CKPT "llama_gqa/model.safetensors", &src, &err), ATTN_OK);
    const uint64_t huge = (uint64_t)1 << 32;
    /* header: the big embedding, then the source tensors, offsets shifted by 4 GiB */
    size_t cap = 1 << 16, n = 0;
    char *h = malloc(cap);
    n += (size_t)snprintf(h + n, cap - n,
                          "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[1048576,1024],"
                          "\"data_offsets\":[0,%" PRIu64 "]}",
                          huge);
    uint64_t off = huge;
    for (size_t i = 0; i < src.n_tensors; i++) {
        const attn__st_tensor *t = &src.tensors[i];
        if (strcmp(t->name, "model.embed_tokens.weight") == 0) continue;
        n += (size_t)snprintf(h + n, cap - n, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name,
                              attn__st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) n += (size_t)snprintf(h + n, cap - n, "%s%zu", d ? "," : "", t->shape[d]);
        n += (size_t)snprintf(h + n, cap - n, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off,
                              off + t->nbytes);
        off += t->nbytes;
    }
    n += (size_t)snprintf(h + n, cap - n, "}");
    CHECK(n < cap);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)n >> (8 * i));
    int ok = fd >= 0 && pwrite(fd, len8, 8, 0) == 8 && pwrite(fd, h, n, 8) == (ssize_t)n;
    off = 8 + n + huge; /* the hole stays unwritten: sparse */
    for (size_t i = 0; ok && i < src.n_tensors; i++) {
        const attn__st_tensor *t = &src.tensors[i];
        if (strcmp(t->name, "model.embed_tokens.weight") == 0) continue;
        ok = pwrite(fd, t->data, t->nbytes, (off_t)off) == (ssize_t)t->nbytes;
        off += t->nbytes;
    }
    if (fd >= 0) close(fd);
    CHECK_MSG(ok, "writing the sparse checkpoint failed");
    free(h);
    /* the same config.json */
    char *text = NULL;
    {
        FILE *f = fopen(CKPT "llama_gqa/config.json", "rb");
        size_t len = 0;
        text = calloc(1, 8192);
        if (f && text) len = fread(text, 1, 8191, f);
        if (f) fclose(f);
        (void)len;
        snprintf(p, sizeof p, "%s/config.json", dir);
        CHECK_INT_EQ(write_text(p, text ? text : ""), 0);
        free(text);
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    printf("  sparse checkpoint: %" PRIu64 " bytes on paper\n", file_size(p));
    CHECK(file_size(p) > huge);

    attn__load_stats stats;
    attn_layer *big = NULL, *ref = NULL;
    attn_load_options o = opts_layer(1);
    long long r0 = rchar();
    attn_status st = attn__layer_load_stats(dir, &o, &big, &stats, &err);
    long long r1 = rchar();
    CHECK_MSG(st == ATTN_OK, "sparse: %s", err.message);
    CHECK_INT_EQ(attn_layer_load(CKPT "llama_gqa", &o, &ref, &err), ATTN_OK);
    uint64_t layer_bytes = 0;
    for (size_t i = 0; i < src.n_tensors; i++)
        if (strncmp(src.tensors[i].name, "model.layers.1.self_attn.", 25) == 0)
            layer_bytes += src.tensors[i].nbytes;
    printf("  sparse checkpoint layer 1: loader read %" PRIu64 " bytes, kernel counted %lld; the layer "
           "is %" PRIu64 " bytes, the header %zu\n",
           stats.st_bytes, r1 - r0, layer_bytes, n + 8);
    CHECK(stats.st_bytes == 8 + n + layer_bytes);
    if (r0 >= 0 && r1 >= 0) CHECK(r1 - r0 < (long long)(8 + n + layer_bytes + 65536));
    if (big && ref) { /* and it is the same layer */
        float x[3 * 64], ya[3 * 64], yb[3 * 64];
        for (int i = 0; i < 3 * 64; i++) x[i] = (float)((i * 3) % 7 - 3) / 4.0f;
        attn_seq s = {.t = 3, .s = 3, .query = x, .is_causal = 1, .output = ya};
        CHECK_INT_EQ(attn_forward(big, &s, 1, NULL, NULL, &err), ATTN_OK);
        s.output = yb;
        CHECK_INT_EQ(attn_forward(ref, &s, 1, NULL, NULL, &err), ATTN_OK);
        CHECK(memcmp(ya, yb, sizeof ya) == 0);
    }
    attn_layer_free(big);
    attn_layer_free(ref);
    attn__st_free(&src);
    rm_tree(dir);
}

/* ------------------------------------------------------------ FIFOs */

TEST(fifo_does_not_block)
{
    char dir[64], fifo[128], p[128], sub[128];
    if (make_tmp(dir, sizeof dir) != 0) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    snprintf(fifo, sizeof fifo, "%s/model.safetensors", dir);
    CHECK_INT_EQ(mkfifo(fifo, 0600), 0);
    snprintf(p, sizeof p, "%s/config.json", dir);
    CHECK_INT_EQ(write_text(p, "{\"model_type\":\"llama\"}"), 0);
    alarm(20); /* a blocked open would end the process here: the test fails, never hangs */
    attn_layer *l = NULL;
    attn_error err = {0};
    attn_load_options o = opts_layer(-1);
    expect(attn_layer_load(fifo, &o, &l, &err), ATTN_ERR_IO, &err, "fifo", "not a regular file");
    expect(attn_layer_load(dir, &o, &l, &err), ATTN_ERR_FORMAT, &err, "dir with a fifo",
           "no model.safetensors");
    expect(attn_layer_load_safetensors(fifo, 0, &l, &err), ATTN_ERR_IO, &err, "0.1 loader, fifo",
           "not a regular file");
    attn_checkpoint_info in;
    expect(attn_checkpoint_inspect(fifo, NULL, &in, &err), ATTN_ERR_IO, &err, "inspect fifo",
           "not a regular file");
    /* a config.json that is a FIFO, beside a real model file */
    snprintf(sub, sizeof sub, "%s/m", dir);
    CHECK_INT_EQ(mkdir(sub, 0700), 0);
    snprintf(p, sizeof p, "%s/m/config.json", dir);
    CHECK_INT_EQ(mkfifo(p, 0600), 0);
    char *cwd = getcwd(NULL, 0), target[512], link[160];
    snprintf(target, sizeof target, "%s/" CKPT "bert/model.safetensors", cwd ? cwd : ".");
    free(cwd);
    snprintf(link, sizeof link, "%s/m/model.safetensors", dir);
    CHECK_INT_EQ(symlink(target, link), 0);
    expect(attn_layer_load(sub, &o, &l, &err), ATTN_ERR_FORMAT, &err, "config.json fifo",
           "no config.json");
    alarm(0);
    CHECK(l == NULL);
    unlink(p);
    unlink(link);
    rmdir(sub);
    /* a missing path and a plain directory */
    expect(attn_layer_load(BROKEN "no_such_dir", &o, &l, &err), ATTN_ERR_IO, &err, "missing path",
           "No such file");
    expect(attn_layer_load("tests/fixtures", &o, &l, &err), ATTN_ERR_FORMAT, &err, "fixtures dir",
           "no model.safetensors");
    rm_tree(dir);
}

int main(void)
{
    RUN(inspect);
    RUN(parity_llama_gqa);
    RUN(parity_mistral_mqa);
    RUN(parity_qwen2_bias);
    RUN(parity_sharded);
    RUN(parity_bert);
    RUN(parity_gpt2);
    RUN(parity_tel_prefix);
    RUN(layer_selection);
    RUN(bare_layer_files);
    RUN(config_variants);
    RUN(broken_checkpoints);
    RUN(reads_only_the_layer);
    RUN(huge_sparse_checkpoint);
    RUN(fifo_does_not_block);
    return check_summary();
}
