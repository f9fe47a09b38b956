/* test_rope_parity.c — replays the Hugging Face-style GQA + RoPE fixtures of
 * tests/fixtures/rope (written by gen_rope_fixtures.py from hf_reference.py, pure
 * torch) through attn_layer_create + attn_forward: each case's layer is built from
 * its plain q/k/v/o weights and the JSON config in its metadata; the layer's
 * inverse frequencies must equal torch's float32 vector bit for bit; the causal
 * self-attention output and per-head weights (materialised kernel) and the output
 * of the fused kernel and of a chunked KV-cache run (explicit position_ids) must
 * be within 1e-5 * max(1, max|expected|) of the float64 expected values. Prints
 * the max difference per case. Reads only the committed files (no torch needed).
 * The reader below is a minimal safetensors parser of its own, so that this test
 * does not depend on the library's loader.
 */
#include "attn.h"
#include "check.h"
#include "layer_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXDIR "tests/fixtures/rope"
#define MIN_CASES 8 /* what gen_rope_fixtures.py writes today */
#define TOL 1e-5

/* ------------------------------------------------------------ a small reader */

typedef struct fixture {
    unsigned char *blob;
    size_t len, data_off;
    json_t *header;  /* tensor name -> {dtype, shape, data_offsets} */
    json_t *config;  /* parsed __metadata__.config */
} fixture;

static void fixture_free(fixture *f)
{
    free(f->blob);
    json_decref(f->header);
    json_decref(f->config);
    memset(f, 0, sizeof *f);
}

static int fixture_open(const char *path, fixture *f)
{
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) return -1;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->blob = n > 8 ? malloc((size_t)n) : NULL;
    int ok = f->blob && fread(f->blob, 1, (size_t)n, fp) == (size_t)n;
    fclose(fp);
    if (!ok) return -1;
    f->len = (size_t)n;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | f->blob[i];
    if (hl > f->len - 8) return -1;
    json_error_t je;
    f->header = json_loadb((const char *)f->blob + 8, (size_t)hl, 0, &je);
    f->data_off = 8 + (size_t)hl;
    if (f->header == NULL) return -1;
    const char *cfg = json_string_value(json_object_get(json_object_get(f->header, "__metadata__"), "config"));
    const char *fmt = json_string_value(json_object_get(json_object_get(f->header, "__metadata__"), "format"));
    if (cfg == NULL || fmt == NULL || strcmp(fmt, "attn-rope-fixture") != 0) return -1;
    f->config = json_loads(cfg, 0, &je);
    return f->config ? 0 : -1;
}

/* The tensor's data (little-endian, as this machine) or NULL; *numel set. */
static const void *tensor(const fixture *f, const char *name, const char *dtype, size_t *numel)
{
    json_t *t = json_object_get(f->header, name);
    if (t == NULL) return NULL;
    if (strcmp(json_string_value(json_object_get(t, "dtype")), dtype) != 0) return NULL;
    json_t *off = json_object_get(t, "data_offsets");
    size_t a = (size_t)json_integer_value(json_array_get(off, 0)), b = (size_t)json_integer_value(json_array_get(off, 1));
    if (b < a || f->data_off + b > f->len) return NULL;
    *numel = (b - a) / (strcmp(dtype, "I64") == 0 ? 8 : 4);
    return f->blob + f->data_off + a;
}

static const float *ftensor(const fixture *f, const char *name, size_t want)
{
    size_t n = 0;
    const float *p = tensor(f, name, "F32", &n);
    if (p != NULL && want != 0 && n != want) return NULL;
    return p;
}

static int cfg_int(const fixture *f, const char *k) { return (int)json_integer_value(json_object_get(f->config, k)); }

/* ------------------------------------------------------------ one case */

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs((double)a[i]) > m ? fabs((double)a[i]) : m;
    return m;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}

static attn_rope parse_rope(const fixture *f)
{
    json_t *r = json_object_get(f->config, "rope");
    attn_rope rp = {0};
    const char *style = json_string_value(json_object_get(r, "style"));
    rp.style = style && strcmp(style, "interleaved") == 0 ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF;
    rp.theta = json_number_value(json_object_get(r, "theta"));
    rp.rotary_dim = (int)json_integer_value(json_object_get(r, "rotary_dim"));
    json_t *sc = json_object_get(r, "scaling");
    if (json_is_object(sc)) {
        const char *type = json_string_value(json_object_get(sc, "rope_type"));
        rp.factor = json_number_value(json_object_get(sc, "factor"));
        if (type && strcmp(type, "linear") == 0) {
            rp.scaling = ATTN_ROPE_SCALING_LINEAR;
        } else if (type && strcmp(type, "llama3") == 0) {
            rp.scaling = ATTN_ROPE_SCALING_LLAMA3;
            rp.low_freq_factor = json_number_value(json_object_get(sc, "low_freq_factor"));
            rp.high_freq_factor = json_number_value(json_object_get(sc, "high_freq_factor"));
            rp.original_max_position =
                (int)json_integer_value(json_object_get(sc, "original_max_position_embeddings"));
        } else {
            CHECK_MSG(0, "unknown rope_scaling type %s", type ? type : "(null)");
        }
    }
    return rp;
}

static double worst_all;

static void run_case(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, FIXDIR "/%s.safetensors", name);
    fixture f;
    int opened = fixture_open(path, &f) == 0;
    CHECK_MSG(opened, "%s: cannot read the fixture", path);
    if (!opened) { fixture_free(&f); return; }
    const int h = cfg_int(&f, "num_heads"), g = cfg_int(&f, "num_kv_heads"), d = cfg_int(&f, "head_dim");
    const int E = cfg_int(&f, "hidden_size");
    size_t nx = 0, np = 0;
    const float *x = ftensor(&f, "x", 0);
    tensor(&f, "x", "F32", &nx);
    const int T = E > 0 ? (int)(nx / (size_t)E) : 0;
    const int64_t *pos = tensor(&f, "position_ids", "I64", &np);
    const float *want = ftensor(&f, "out", (size_t)T * E), *want_w = ftensor(&f, "w_head", (size_t)h * T * T);
    attn_rope rope = parse_rope(&f);
    attn_layer_desc desc = {.num_heads = h, .head_dim_k = d, .head_dim_v = d, .embed_q = E, .embed_k = E,
                            .embed_v = E, .embed_out = E, .num_kv_heads = g, .rope = rope,
                            .w_q = ftensor(&f, "q_proj.weight", (size_t)h * d * E),
                            .w_k = ftensor(&f, "k_proj.weight", (size_t)g * d * E),
                            .w_v = ftensor(&f, "v_proj.weight", (size_t)g * d * E),
                            .w_o = ftensor(&f, "o_proj.weight", (size_t)E * h * d),
                            .b_q = ftensor(&f, "q_proj.bias", (size_t)h * d),
                            .b_k = ftensor(&f, "k_proj.bias", (size_t)g * d),
                            .b_v = ftensor(&f, "v_proj.bias", (size_t)g * d),
                            .b_o = ftensor(&f, "o_proj.bias", (size_t)E)};
    CHECK_MSG(x && pos && np == (size_t)T && want && want_w && desc.w_q && desc.w_k && desc.w_v && desc.w_o,
              "%s: tensors missing or of the wrong size", name);
    attn_layer *l = NULL;
    attn_error err = {0};
    if (x && pos && want && want_w && desc.w_q && desc.w_k && desc.w_v && desc.w_o)
        CHECK_MSG(attn_layer_create(&desc, &l, &err) == ATTN_OK, "%s: %s", name, err.message);
    if (l == NULL) { fixture_free(&f); return; }

    /* inverse frequencies: torch's float32 vector, bit for bit */
    size_t ni = 0;
    const float *inv = tensor(&f, "inv_freq", "F32", &ni);
    int inv_bad = 0;
    CHECK_MSG(inv && ni == (size_t)(l->rope.rotary_dim / 2), "%s: inv_freq has %zu entries, layer %d", name, ni,
              l->rope.rotary_dim / 2);
    for (size_t i = 0; inv && i < ni && i < (size_t)(l->rope.rotary_dim / 2); i++) inv_bad += inv[i] != l->inv_freq[i];
    CHECK_MSG(inv_bad == 0, "%s: %d of %zu inv_freq entries differ from torch's", name, inv_bad, ni);

    const size_t no = (size_t)T * E, nw = (size_t)h * T * T;
    const double tol = TOL * (max_abs(want, no) > 1.0 ? max_abs(want, no) : 1.0);
    float *out = malloc(no * sizeof *out), *w = malloc(nw * sizeof *w);
    double d_mat = INFINITY, d_w = INFINITY, d_fused = INFINITY, d_cache = 0;
    for (int kern = ATTN_KERNEL_MATERIALIZED; kern <= ATTN_KERNEL_FUSED; kern++) {
        attn_workspace_options o = {.kernel = (attn_kernel)kern, .block_q = 5, .block_k = 7};
        attn_workspace *ws = NULL;
        CHECK_INT_EQ(attn_workspace_create(&o, &ws, NULL), ATTN_OK);
        const int mat = kern == ATTN_KERNEL_MATERIALIZED;
        attn_seq s = {.t = T, .s = T, .query = x, .is_causal = 1, .output = out, .position_ids = pos,
                      .weights_mode = mat ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_NONE, .weights = mat ? w : NULL};
        CHECK_MSG(attn_forward(l, &s, 1, ws, NULL, &err) == ATTN_OK, "%s: %s", name, err.message);
        if (mat) {
            d_mat = max_diff(out, want, no);
            d_w = max_diff(w, want_w, nw);
        } else {
            d_fused = max_diff(out, want, no);
        }
        /* the chunked KV-cache run, as a session appends */
        float *ck = malloc((size_t)T * g * d * sizeof *ck), *cv = malloc((size_t)T * g * d * sizeof *cv);
        json_t *chunks = json_object_get(f.config, "chunks");
        int p = 0;
        for (size_t c = 0; c < json_array_size(chunks); c++) {
            int t = (int)json_integer_value(json_array_get(chunks, c));
            if (t < 1 || t > T - p) break;
            attn_seq a = {.t = t, .s = p + t, .query = x + (size_t)p * E, .is_causal = 1,
                          .output = out + (size_t)p * E, .cache_k = ck, .cache_v = cv, .cache_len = p,
                          .cache_append = 1, .position_ids = pos + p};
            CHECK_MSG(attn_forward(l, &a, 1, ws, NULL, &err) == ATTN_OK, "%s chunk %zu: %s", name, c, err.message);
            p += t;
        }
        CHECK_MSG(p == T, "%s: chunks cover %d of %d rows", name, p, T);
        double dc = p == T ? max_diff(out, want, no) : INFINITY;
        if (dc > d_cache) d_cache = dc;
        free(ck);
        free(cv);
        attn_workspace_free(ws);
    }
    CHECK_MSG(d_mat <= tol, "%s: materialised output diff %.3g > %.3g", name, d_mat, tol);
    CHECK_MSG(d_w <= TOL, "%s: per-head weights diff %.3g > %g", name, d_w, TOL);
    CHECK_MSG(d_fused <= tol, "%s: fused output diff %.3g > %.3g", name, d_fused, tol);
    CHECK_MSG(d_cache <= tol, "%s: KV-cache chunks output diff %.3g > %.3g", name, d_cache, tol);
    double worst = fmax(fmax(d_mat, d_fused), d_cache) / (tol / TOL);
    if (worst > worst_all) worst_all = worst;
    printf("  %-18s h=%d g=%d d=%d rotary=%d/%s T=%d pos %lld..: out %.2e (materialised) %.2e (fused) "
           "%.2e (KV-cache chunks), weights %.2e, tol %.2e; HF float32 rel. err %.2e\n",
           name, h, g, d, l->rope.rotary_dim, l->rope.style == ATTN_ROPE_HALF ? "half" : "interleaved", T,
           (long long)pos[0], d_mat, d_fused, d_cache, d_w, tol,
           json_number_value(json_object_get(f.config, "torch_f32_err")));
    free(out);
    free(w);
    attn_layer_free(l);
    fixture_free(&f);
}

TEST(fixtures)
{
    FILE *m = fopen(FIXDIR "/MANIFEST", "r");
    CHECK_MSG(m != NULL, "cannot open " FIXDIR "/MANIFEST (run from the repository root)");
    if (m == NULL) return;
    char line[256];
    int n = 0;
    while (fgets(line, sizeof line, m)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] == 0) continue;
        run_case(line);
        n++;
    }
    fclose(m);
    CHECK_MSG(n >= MIN_CASES, "MANIFEST lists %d cases, expected >= %d", n, MIN_CASES);
    printf("  %d cases, worst output diff relative to max(1, |expected|): %.2e (tolerance %g)\n", n,
           worst_all, TOL);
}

int main(void)
{
    RUN(fixtures);
    return check_summary();
}
