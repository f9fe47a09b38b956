/* test_safetensors.c — the safetensors loader and the F16/BF16 conversion: good
 * files (tests/fixtures/good, config/demo.safetensors) load with the right dims and
 * values; every file of tests/fixtures/broken is rejected with the expected code
 * through both entry points; truncations and byte flips never crash. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "half.h"
#include "layer_internal.h"
#include "safetensors.h"

#define GOOD "tests/fixtures/good/"
#define BROKEN "tests/fixtures/broken/"

/* ------------------------------------------------------------ helpers */

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "cannot open %s (run from the repository root)", path);
    if (f == NULL) return NULL;
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap = cap * 2 + 4096);
            if (nb == NULL) break;
            buf = nb;
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    fclose(f);
    *len = n;
    return buf;
}

/* gen_broken.py's values: the i-th element of the k-th tensor of a file. */
static float fixture_value(int k, size_t i)
{
    return (float)((int)((i * 5 + (size_t)k * 3) % 17) - 8) / 16.0f;
}

static int values_match(const float *got, int k, size_t offset, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != fixture_value(k, offset + i)) return 0;
    return 1;
}

/* The same for a projection matrix, kept as l->wdtype (F16 / BF16 files: as stored). */
static int weights_match(const attn_layer *l, const void *got, int k, size_t offset, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (attn__w_get(got, l->wdtype, i) != fixture_value(k, offset + i)) return 0;
    return 1;
}

/* ------------------------------------------------------------ half */

/* Independent oracle: the value a binary16 / bfloat16 pattern denotes, by formula. */
static double f16_oracle(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    if (e == 31) v = m ? NAN : INFINITY;
    return s ? -v : v;
}

static double bf16_oracle(uint16_t b)
{
    int s = b >> 15, e = (b >> 7) & 255, m = b & 127;
    double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
    if (e == 255) v = m ? NAN : INFINITY;
    return s ? -v : v;
}

TEST(half)
{
    int bad16 = 0, badbf = 0;
    for (uint32_t u = 0; u <= 0xffff; u++) {
        double want = f16_oracle((uint16_t)u);
        float got = attn__f16_to_f32((uint16_t)u);
        if (isnan(want) ? !isnan(got) : ((double)got != want || !signbit(got) != !signbit(want)))
            bad16++;
        want = bf16_oracle((uint16_t)u);
        got = attn__bf16_to_f32((uint16_t)u);
        if (isnan(want) ? !isnan(got) : ((double)got != want || !signbit(got) != !signbit(want)))
            badbf++;
    }
    CHECK_INT_EQ(bad16, 0); /* all 65536 F16 patterns, against the formula */
    CHECK_INT_EQ(badbf, 0); /* all 65536 BF16 patterns */

    CHECK_INT_EQ(attn__f32_bits(attn__f16_to_f32(0x0000)), 0x00000000);        /* +0 */
    CHECK_INT_EQ(attn__f32_bits(attn__f16_to_f32(0x8000)), 0x80000000);        /* -0 */
    CHECK(attn__f16_to_f32(0x0001) == 0x1p-24f);                              /* min subnormal */
    CHECK(attn__f16_to_f32(0x03ff) == 1023 * 0x1p-24f);                       /* max subnormal */
    CHECK(attn__f16_to_f32(0x8001) == -0x1p-24f);
    CHECK(attn__f16_to_f32(0x0400) == 0x1p-14f);                              /* min normal */
    CHECK(attn__f16_to_f32(0x3c00) == 1.0f);
    CHECK(attn__f16_to_f32(0xc000) == -2.0f);
    CHECK(attn__f16_to_f32(0x7bff) == 65504.0f);                              /* max */
    CHECK(attn__f16_to_f32(0x3555) == 0.333251953125f);
    CHECK(isinf(attn__f16_to_f32(0x7c00)) && attn__f16_to_f32(0x7c00) > 0);
    CHECK(isinf(attn__f16_to_f32(0xfc00)) && attn__f16_to_f32(0xfc00) < 0);
    CHECK(isnan(attn__f16_to_f32(0x7e00)));
    CHECK_INT_EQ(attn__f32_bits(attn__f16_to_f32(0x7c01)), 0x7f802000);        /* sNaN payload kept */
    CHECK_INT_EQ(attn__f32_bits(attn__f16_to_f32(0xfe00)), 0xffc00000);

    CHECK_INT_EQ(attn__f32_bits(attn__bf16_to_f32(0x8000)), 0x80000000);       /* -0 */
    CHECK(attn__bf16_to_f32(0x3f80) == 1.0f);
    CHECK(attn__bf16_to_f32(0x0001) == 0x1p-133f);                            /* min subnormal */
    CHECK(attn__bf16_to_f32(0x7f7f) == 0x1.fep127f);                          /* max */
    /* torch.tensor(1/3).bfloat16(): 0x3eaaaaab rounds to nearest even -> 0x3eab */
    CHECK(attn__bf16_to_f32(0x3eab) == 0.333984375f);
    CHECK(isinf(attn__bf16_to_f32(0xff80)) && attn__bf16_to_f32(0xff80) < 0);
    CHECK(isnan(attn__bf16_to_f32(0x7fc0)));
}

/* ------------------------------------------------------------ good files */

static int same(const float *a, const float *b, size_t n)
{
    if (a == NULL || b == NULL) return a == b;
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* Projection matrices of n weights, kept as layer a's wdtype. */
static int same_w(const attn_layer *a, const void *x, const void *y, size_t n)
{
    if (x == NULL || y == NULL) return x == y;
    return memcmp(x, y, n * attn__w_size(a)) == 0;
}

static attn_layer *load_both(const char *path, int heads, attn_error *err)
{
    attn_layer *a = NULL, *b = NULL;
    attn_status st = attn_layer_load_safetensors(path, heads, &a, err);
    CHECK_MSG(st == ATTN_OK, "%s: %s", path, err->message);
    size_t len = 0;
    unsigned char *buf = slurp(path, &len);
    st = attn_layer_load_safetensors_mem(buf, len, heads, &b, err);
    CHECK_MSG(st == ATTN_OK, "%s (mem): %s", path, err->message);
    if (a && b) { /* both entry points build the same layer */
        CHECK_INT_EQ(a->param_count, b->param_count);
        CHECK_INT_EQ(a->wdtype, b->wdtype);
        CHECK(same_w(a, a->w_q, b->w_q, (size_t)a->qk_dim * (size_t)a->e_q));
        CHECK(same_w(a, a->w_k, b->w_k, (size_t)a->qk_dim * (size_t)a->e_k));
        CHECK(same_w(a, a->w_v, b->w_v, (size_t)a->v_dim * (size_t)a->e_v));
        CHECK(same_w(a, a->w_o, b->w_o, (size_t)a->e_out * (size_t)a->v_dim));
        CHECK(same(a->b_q, b->b_q, (size_t)a->qk_dim));
        CHECK(same(a->b_o, b->b_o, (size_t)a->e_out));
    }
    attn_layer_free(b);
    free(buf);
    return a;
}

static void check_pt_layer(const char *file, const char *dtype)
{
    attn_error err = {.code = (attn_status)99, .message = "untouched"};
    char path[128];
    snprintf(path, sizeof path, GOOD "%s", file);
    attn_layer *l = load_both(path, 0, &err);
    if (l == NULL) return;
    CHECK_INT_EQ(err.code, 99); /* success leaves err alone */
    CHECK_STR_EQ(err.message, "untouched");
    attn_layer_info in;
    attn_layer_get_info(l, &in);
    CHECK_INT_EQ(in.num_heads, 2);
    CHECK_INT_EQ(in.head_dim_k, 2);
    CHECK_INT_EQ(in.head_dim_v, 2);
    CHECK_INT_EQ(in.embed_q, 4);
    CHECK_INT_EQ(in.embed_k, 4);
    CHECK_INT_EQ(in.embed_v, 4);
    CHECK_INT_EQ(in.embed_out, 4);
    CHECK(in.has_out_proj && in.has_bias_q && in.has_bias_k && in.has_bias_v && in.has_bias_out);
    CHECK_STR_EQ(in.source_dtype, dtype);
    CHECK_INT_EQ(in.param_count, 48 + 12 + 16 + 4);
    /* in_proj_weight (tensor 0) rows 0..3 are W_Q, 4..7 W_K, 8..11 W_V */
    CHECK_MSG(weights_match(l, l->w_q, 0, 0, 16), "%s w_q", file);
    CHECK_MSG(weights_match(l, l->w_k, 0, 16, 16), "%s w_k", file);
    CHECK_MSG(weights_match(l, l->w_v, 0, 32, 16), "%s w_v", file);
    CHECK_MSG(values_match(l->b_q, 1, 0, 4), "%s b_q", file);
    CHECK_MSG(values_match(l->b_k, 1, 4, 4), "%s b_k", file);
    CHECK_MSG(values_match(l->b_v, 1, 8, 4), "%s b_v", file);
    CHECK_MSG(weights_match(l, l->w_o, 2, 0, 16), "%s w_o", file);
    CHECK_MSG(values_match(l->b_o, 3, 0, 4), "%s b_o", file);
    attn_layer_free(l);
}

TEST(good_files)
{
    check_pt_layer("pt_f32.safetensors", "F32");
    check_pt_layer("pt_f16.safetensors", "F16");
    check_pt_layer("pt_bf16.safetensors", "BF16");
    check_pt_layer("unaligned_reordered.safetensors", "F32");

    attn_error err = {0};
    attn_layer_info in;
    attn_layer *l = load_both(GOOD "kdim_vdim.safetensors", 0, &err);
    if (l) {
        attn_layer_get_info(l, &in);
        CHECK_INT_EQ(in.embed_q, 4);
        CHECK_INT_EQ(in.embed_k, 3);
        CHECK_INT_EQ(in.embed_v, 5);
        CHECK_INT_EQ(in.embed_out, 4);
        CHECK_INT_EQ(in.has_bias_out, 0);
        CHECK(weights_match(l, l->w_q, 0, 0, 16));
        CHECK(weights_match(l, l->w_k, 1, 0, 12));
        CHECK(weights_match(l, l->w_v, 2, 0, 20));
        CHECK(values_match(l->b_k, 3, 4, 4));
        CHECK(weights_match(l, l->w_o, 4, 0, 16));
        attn_layer_free(l);
    }
    l = load_both(GOOD "explicit_no_wo.safetensors", 0, &err);
    if (l) {
        attn_layer_get_info(l, &in);
        CHECK_INT_EQ(in.num_heads, 2);
        CHECK_INT_EQ(in.head_dim_k, 3);
        CHECK_INT_EQ(in.head_dim_v, 2);
        CHECK_INT_EQ(in.embed_q, 5);
        CHECK_INT_EQ(in.embed_k, 4);
        CHECK_INT_EQ(in.embed_v, 7);
        CHECK_INT_EQ(in.embed_out, 4);
        CHECK_INT_EQ(in.has_out_proj, 0);
        CHECK(in.has_bias_q && !in.has_bias_k && in.has_bias_v && !in.has_bias_out);
        CHECK(weights_match(l, l->w_v, 2, 0, 28));
        CHECK(values_match(l->b_v, 4, 0, 4));
        attn_layer_free(l);
    }
    /* num_heads: the argument overrides __metadata__; without either, say heads=N */
    l = load_both(GOOD "pt_f32.safetensors", 4, &err);
    if (l) {
        attn_layer_get_info(l, &in);
        CHECK_INT_EQ(in.num_heads, 4);
        CHECK_INT_EQ(in.head_dim_k, 1);
        attn_layer_free(l);
    }
    l = load_both(GOOD "no_metadata.safetensors", 2, &err);
    attn_layer_free(l);
    CHECK(l != NULL);
    CHECK_INT_EQ(attn_layer_load_safetensors(GOOD "no_metadata.safetensors", 0, &l, &err),
                 ATTN_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "heads=N") != NULL);
    CHECK_INT_EQ(attn_layer_load_safetensors(GOOD "no_metadata.safetensors", 3, &l, &err),
                 ATTN_ERR_SHAPE);
    CHECK(strstr(err.message, "heads=N") != NULL);
    CHECK_INT_EQ(attn_layer_load_safetensors(GOOD "pt_f32.safetensors", -1, &l, &err),
                 ATTN_ERR_INVALID_ARG);
    CHECK(l == NULL);
}

/* The fixtures' F16/BF16 weight files from torch, and the demo model. */
TEST(torch_and_demo_files)
{
    attn_error err = {0};
    attn_layer_info in;
    attn_layer *l = load_both("tests/fixtures/parity/weights_f16.layer.safetensors", 0, &err);
    if (l) {
        attn_layer_get_info(l, &in);
        CHECK_STR_EQ(in.source_dtype, "F16");
        CHECK_INT_EQ(in.embed_q, 32);
        attn_layer_free(l);
    }
    l = load_both("tests/fixtures/parity/weights_mixed.layer.safetensors", 0, &err);
    if (l) {
        attn_layer_get_info(l, &in);
        CHECK_STR_EQ(in.source_dtype, "mixed");
        attn_layer_free(l);
    }
    l = load_both("config/demo.safetensors", 0, &err);
    CHECK(l != NULL);
    if (l) {
        attn_layer_get_info(l, &in);
        CHECK_INT_EQ(in.num_heads, 8);
        CHECK_INT_EQ(in.head_dim_k, 8);
        CHECK_INT_EQ(in.head_dim_v, 8);
        CHECK_INT_EQ(in.embed_q, 64);
        CHECK_INT_EQ(in.embed_k, 64);
        CHECK_INT_EQ(in.embed_v, 64);
        CHECK_INT_EQ(in.embed_out, 64);
        CHECK(in.has_out_proj && in.has_bias_q && in.has_bias_k && in.has_bias_v && in.has_bias_out);
        CHECK_STR_EQ(in.source_dtype, "F32");
        CHECK_INT_EQ(in.param_count, 4 * 64 * 64 + 4 * 64);
        attn_layer_free(l);
    }
    attn__st_file f;
    CHECK_INT_EQ(attn__st_read_file("config/demo.safetensors", &f, &err), ATTN_OK);
    CHECK_STR_EQ(attn__st_meta_get(&f, "num_heads"), "8");
    const char *desc = attn__st_meta_get(&f, "description");
    CHECK(desc != NULL && strncmp(desc, "attnd demo model", 16) == 0);
    CHECK_INT_EQ(f.n_tensors, 4);
    const attn__st_tensor *t = attn__st_find(&f, "in_proj_weight");
    CHECK(t != NULL && t->ndim == 2 && t->shape[0] == 192 && t->shape[1] == 64 &&
          t->dtype == ATTN__ST_F32);
    CHECK(attn__st_find(&f, "nope") == NULL);
    attn__st_free(&f);
}

/* ------------------------------------------------------------ broken files */

static const struct broken_case {
    const char *file;
    attn_status code;
    const char *says; /* a substring the message must contain */
} broken[] = {
    {"empty", ATTN_ERR_FORMAT, "shorter than the 8-byte"},
    {"short_7_bytes", ATTN_ERR_FORMAT, "7 bytes"},
    {"header_len_past_end", ATTN_ERR_FORMAT, "header length"},
    {"header_len_huge", ATTN_ERR_FORMAT, "header length"},
    {"header_len_zero", ATTN_ERR_FORMAT, "not valid JSON"},
    {"header_not_json", ATTN_ERR_FORMAT, "line 1"},
    {"header_array", ATTN_ERR_FORMAT, "not a JSON object"},
    {"header_trailing_garbage", ATTN_ERR_FORMAT, "not valid JSON"},
    {"header_duplicate_key", ATTN_ERR_FORMAT, "duplicate"},
    {"header_nul_in_name", ATTN_ERR_FORMAT, "not valid JSON"},
    {"header_invalid_utf8", ATTN_ERR_FORMAT, "not valid JSON"},
    {"no_tensors", ATTN_ERR_MISSING_TENSOR, "in_proj_weight"},
    {"tensor_not_object", ATTN_ERR_FORMAT, "in_proj_bias"},
    {"missing_dtype", ATTN_ERR_FORMAT, "\"dtype\" is missing"},
    {"missing_shape", ATTN_ERR_FORMAT, "\"shape\" is missing"},
    {"missing_offsets", ATTN_ERR_FORMAT, "\"data_offsets\" is missing"},
    {"dtype_not_string", ATTN_ERR_FORMAT, "not a string"},
    {"shape_not_array", ATTN_ERR_FORMAT, "not an array"},
    {"shape_negative", ATTN_ERR_FORMAT, "shape[0]"},
    {"shape_float", ATTN_ERR_FORMAT, "shape[0]"},
    {"offsets_three", ATTN_ERR_FORMAT, "data_offsets"},
    {"offsets_negative", ATTN_ERR_FORMAT, "data_offsets"},
    {"offsets_huge", ATTN_ERR_FORMAT, "past the data"},
    {"extra_field", ATTN_ERR_FORMAT, "\"stride\""},
    {"unknown_dtype", ATTN_ERR_DTYPE, "F33"},
    {"int_dtype_weight", ATTN_ERR_DTYPE, "I32"},
    {"wrong_dtype_size", ATTN_ERR_DTYPE, "need 24 bytes"},
    {"offsets_reversed", ATTN_ERR_FORMAT, "reversed"},
    {"offsets_past_end", ATTN_ERR_FORMAT, "out_proj.bias"},
    {"offsets_overlap", ATTN_ERR_FORMAT, "overlap"},
    {"truncated_data", ATTN_ERR_FORMAT, "past the data"},
    {"shape_overflow", ATTN_ERR_LIMIT, "overflow"},
    {"too_many_dims", ATTN_ERR_LIMIT, "10 dimensions"},
    {"metadata_not_object", ATTN_ERR_FORMAT, "__metadata__"},
    {"metadata_non_string", ATTN_ERR_FORMAT, "num_heads"},
    {"missing_in_proj", ATTN_ERR_MISSING_TENSOR, "in_proj_weight"},
    {"missing_out_proj", ATTN_ERR_MISSING_TENSOR, "out_proj.weight"},
    {"missing_v_proj_weight", ATTN_ERR_MISSING_TENSOR, "v_proj_weight"},
    {"missing_explicit_v", ATTN_ERR_MISSING_TENSOR, "v_proj.weight"},
    {"o_bias_without_o", ATTN_ERR_MISSING_TENSOR, "o_proj.weight"},
    {"unknown_tensor_name", ATTN_ERR_FORMAT, "out_proj.bais"},
    {"mixed_naming", ATTN_ERR_FORMAT, "mixes"},
    {"bias_k_unsupported", ATTN_ERR_FORMAT, "add_bias_kv"},
    {"in_proj_and_q_proj_weight", ATTN_ERR_FORMAT, "q/k/v_proj_weight"},
    {"in_proj_rows_bad", ATTN_ERR_SHAPE, "in_proj_weight is [11, 4], expected [3*E, E] = [12, 4]"},
    {"in_proj_1d", ATTN_ERR_SHAPE, "in_proj_weight is [48]"},
    {"in_proj_zero_dim", ATTN_ERR_SHAPE, "[0, 0]"},
    {"in_proj_bias_bad", ATTN_ERR_SHAPE, "in_proj_bias is [11], expected [3*E] = [12]"},
    {"out_proj_shape_bad", ATTN_ERR_SHAPE, "out_proj.weight is [4, 3]"},
    {"k_proj_weight_rows_bad", ATTN_ERR_SHAPE, "k_proj_weight is [3, 3], expected [E, kdim]"},
    {"explicit_k_rows_bad", ATTN_ERR_SHAPE, "k_proj.weight is [5, 4]"},
    {"heads_missing", ATTN_ERR_INVALID_ARG, "heads=N"},
    {"heads_not_number", ATTN_ERR_FORMAT, "heads=N"},
    {"heads_zero", ATTN_ERR_FORMAT, "heads=N"},
    {"heads_negative", ATTN_ERR_FORMAT, "heads=N"},
    {"heads_trailing_space", ATTN_ERR_FORMAT, "heads=N"},
    {"heads_huge", ATTN_ERR_FORMAT, "heads=N"},
    {"heads_not_dividing", ATTN_ERR_SHAPE, "not divisible by num_heads 3"},
    {"nan_f32", ATTN_ERR_NONFINITE, "out_proj.weight[1][1] is not finite (nan)"},
    {"inf_f16", ATTN_ERR_NONFINITE, "out_proj.weight[1][1] is not finite (inf)"},
    {"nan_bf16", ATTN_ERR_NONFINITE, "out_proj.weight[1][1]"},
};
#define N_BROKEN (sizeof broken / sizeof broken[0])

static void expect_failure(const char *what, attn_status st, attn_layer *l, const attn_error *err,
                           const struct broken_case *c)
{
    CHECK_MSG(st == c->code, "%s: got %s (%d) \"%s\", want %s", what, attn_strerror(st), (int)st,
              err->message, attn_strerror(c->code));
    CHECK_MSG(err->code == c->code, "%s: err.code %d", what, (int)err->code);
    CHECK_MSG(err->message[0] != '\0', "%s: empty message", what);
    CHECK_MSG(strstr(err->message, c->says) != NULL, "%s: message \"%s\" lacks \"%s\"", what,
              err->message, c->says);
    CHECK_MSG(l == NULL, "%s: *out not NULL on failure", what);
}

TEST(broken_files)
{
    for (size_t i = 0; i < N_BROKEN; i++) {
        char path[160], what[200];
        snprintf(path, sizeof path, BROKEN "%s.safetensors", broken[i].file);
        attn_layer *l = (attn_layer *)&l; /* non-NULL: must be reset */
        attn_error err = {0};
        attn_status st = attn_layer_load_safetensors(path, 0, &l, &err);
        snprintf(what, sizeof what, "%s (file)", path);
        expect_failure(what, st, l, &err, &broken[i]);
        if (st == ATTN_OK) attn_layer_free(l);

        size_t len = 0;
        unsigned char *buf = slurp(path, &len);
        l = (attn_layer *)&l;
        memset(&err, 0, sizeof err);
        st = attn_layer_load_safetensors_mem(len ? buf : NULL, len, 0, &l, &err);
        snprintf(what, sizeof what, "%s (mem)", path);
        expect_failure(what, st, l, &err, &broken[i]);
        if (st == ATTN_OK) attn_layer_free(l);
        free(buf);
    }
    /* every file of the corpus is in the table */
    DIR *d = opendir(BROKEN);
    CHECK(d != NULL);
    struct dirent *de;
    int files = 0;
    while (d && (de = readdir(d)) != NULL) {
        char *dot = strstr(de->d_name, ".safetensors");
        if (dot == NULL) continue;
        files++;
        int found = 0;
        for (size_t i = 0; i < N_BROKEN; i++)
            found |= strlen(broken[i].file) == (size_t)(dot - de->d_name) &&
                     strncmp(broken[i].file, de->d_name, (size_t)(dot - de->d_name)) == 0;
        CHECK_MSG(found, "%s has no expected code in the table", de->d_name);
    }
    if (d) closedir(d);
    CHECK_INT_EQ(files, N_BROKEN);
}

/* ------------------------------------------------------------ odds and ends */

TEST(arguments_and_io)
{
    attn_layer *l = NULL;
    attn_error err = {0};
    CHECK_INT_EQ(attn_layer_load_safetensors("tests/fixtures/no/such.safetensors", 0, &l, &err),
                 ATTN_ERR_IO);
    CHECK(strstr(err.message, "no/such.safetensors") != NULL);
    CHECK_INT_EQ(attn_layer_load_safetensors("tests/fixtures", 0, &l, &err), ATTN_ERR_IO);
    CHECK_INT_EQ(attn_layer_load_safetensors(NULL, 0, &l, &err), ATTN_ERR_INVALID_ARG);
    CHECK_INT_EQ(attn_layer_load_safetensors(GOOD "pt_f32.safetensors", 0, NULL, &err),
                 ATTN_ERR_INVALID_ARG);
    CHECK_INT_EQ(attn_layer_load_safetensors_mem(NULL, 0, 0, &l, &err), ATTN_ERR_FORMAT);
    CHECK_INT_EQ(attn_layer_load_safetensors_mem(NULL, 16, 0, &l, &err), ATTN_ERR_INVALID_ARG);
    CHECK_INT_EQ(attn_layer_load_safetensors(GOOD "pt_f32.safetensors", 0, &l, NULL), ATTN_OK);
    attn_layer_free(l);

    /* a header longer than the cap, in a buffer that really is that long */
    size_t n = 8 + (size_t)ATTN__ST_MAX_HEADER + 1;
    unsigned char *big = calloc(1, n);
    CHECK(big != NULL);
    if (big) {
        uint64_t hl = ATTN__ST_MAX_HEADER + 1;
        for (int i = 0; i < 8; i++) big[i] = (unsigned char)(hl >> (8 * i));
        CHECK_INT_EQ(attn_layer_load_safetensors_mem(big, n, 0, &l, &err), ATTN_ERR_LIMIT);
        CHECK(strstr(err.message, "cap") != NULL);
        free(big);
    }
}

/* Every truncation of a good file fails cleanly; every single-byte change either
 * loads or fails with a status — never a crash or leak (ASan/UBSan builds). */
TEST(truncate_and_flip)
{
    size_t len = 0;
    unsigned char *buf = slurp(GOOD "kdim_vdim.safetensors", &len);
    if (buf == NULL) return;
    int bad_trunc = 0, bad_flip = 0;
    attn_error err;
    for (size_t cut = 0; cut < len; cut++) {
        attn_layer *l = NULL;
        attn_status st = attn_layer_load_safetensors_mem(buf, cut, 0, &l, &err);
        if (st != ATTN_ERR_FORMAT || l != NULL) bad_trunc++;
        attn_layer_free(l);
    }
    unsigned char *copy = malloc(len);
    for (size_t i = 0; copy && i < len; i++) {
        for (int flip = 1; flip < 256; flip <<= 1) {
            memcpy(copy, buf, len);
            copy[i] ^= (unsigned char)flip;
            attn_layer *l = NULL;
            memset(&err, 0, sizeof err);
            attn_status st = attn_layer_load_safetensors_mem(copy, len, 0, &l, &err);
            if ((st == ATTN_OK) != (l != NULL) || (st != ATTN_OK && err.message[0] == '\0'))
                bad_flip++;
            attn_layer_free(l);
        }
    }
    CHECK_INT_EQ(bad_trunc, 0);
    CHECK_INT_EQ(bad_flip, 0);
    free(copy);
    free(buf);
}

int main(void)
{
    RUN(half);
    RUN(good_files);
    RUN(torch_and_demo_files);
    RUN(broken_files);
    RUN(arguments_and_io);
    RUN(truncate_and_flip);
    return check_summary();
}
