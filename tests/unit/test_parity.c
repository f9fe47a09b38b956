/* test_parity.c — replays the PyTorch fixtures of tests/fixtures/parity (written by
 * gen_fixtures.py) through attn_layer_load_safetensors + attn_forward and compares
 * every tensor. Tolerance, per tensor: max|got - expected| <= 1e-5 * max(1, max|expected|).
 * Prints the max difference per tensor per case. Run from the repository root. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "safetensors.h"

#define FIXDIR "tests/fixtures/parity"
#define MIN_CASES 35 /* what gen_fixtures.py writes today; the MANIFEST must list at least these */
#define TOL 1e-5

static double worst_rel; /* largest diff / max(1, max|expected|) over everything */

/* One sequence of a fixture: inputs as attn_forward wants them, expected tensors. */
typedef struct fx_seq {
    float *q, *k, *v, *mask_f;
    const attn__st_tensor *out, *w_avg, *w_head;
    attn_seq seq; /* inputs filled; outputs set per run */
} fx_seq;

typedef struct fixture {
    char name[64];
    attn__st_file io;
    attn_layer *layer;
    attn_layer_info info;
    int n;
    fx_seq *s;
} fixture;

/* Float copy of tensor "<key>.<i>" (NULL when absent or not convertible). */
static float *tensor_f32(const attn__st_file *f, const char *key, int i, const attn__st_tensor **tp)
{
    char name[32];
    snprintf(name, sizeof name, "%s.%d", key, i);
    const attn__st_tensor *t = attn__st_find(f, name);
    if (tp) *tp = t;
    if (t == NULL) return NULL;
    float *p = malloc((t->numel ? t->numel : 1) * sizeof *p);
    if (p && attn__st_to_f32(t, p, NULL) != ATTN_OK) {
        free(p);
        p = NULL;
    }
    return p;
}

static int meta_int(const attn__st_file *f, const char *key)
{
    const char *v = attn__st_meta_get(f, key);
    CHECK_MSG(v != NULL, "__metadata__ has no %s", key);
    return v ? atoi(v) : 0;
}

static void fixture_free(fixture *fx)
{
    for (int i = 0; fx->s && i < fx->n; i++) {
        free(fx->s[i].q);
        free(fx->s[i].k);
        free(fx->s[i].v);
        free(fx->s[i].mask_f);
    }
    free(fx->s);
    attn_layer_free(fx->layer);
    attn__st_free(&fx->io);
}

/* The i-th key length from the comma list in __metadata__ key_length, or 0. */
static int key_length_of(const char *list, int i)
{
    if (list == NULL || *list == '\0') return 0;
    for (; i > 0 && list; i--) {
        list = strchr(list, ',');
        if (list) list++;
    }
    return list ? atoi(list) : 0;
}

static int load_seq(fixture *fx, int i)
{
    fx_seq *s = &fx->s[i];
    attn_seq *q = &s->seq;
    const attn__st_tensor *tq, *tk, *tm;
    const char *mask_kind = attn__st_meta_get(&fx->io, "attn_mask");
    s->q = tensor_f32(&fx->io, "q", i, &tq);
    if (s->q == NULL || tq->ndim != 2) return -1;
    q->t = q->s = (int)tq->shape[0];
    q->query = s->q;
    if (meta_int(&fx->io, "self") == 0) {
        s->k = tensor_f32(&fx->io, "k", i, &tk);
        s->v = tensor_f32(&fx->io, "v", i, NULL);
        if (s->k == NULL || s->v == NULL) return -1;
        q->s = (int)tk->shape[0];
        q->key = s->k;
        q->value = s->v;
    }
    char name[32];
    snprintf(name, sizeof name, "kpm.%d", i);
    const attn__st_tensor *kpm = attn__st_find(&fx->io, name);
    q->key_padding_mask = kpm ? kpm->data : NULL;
    q->key_length = key_length_of(attn__st_meta_get(&fx->io, "key_length"), i);
    q->is_causal = meta_int(&fx->io, "is_causal");
    q->window = meta_int(&fx->io, "window");
    q->attn_mask_per_head = meta_int(&fx->io, "attn_mask_per_head");
    if (mask_kind && strcmp(mask_kind, "bool") == 0) {
        snprintf(name, sizeof name, "mask.%d", i);
        tm = attn__st_find(&fx->io, name);
        if (tm == NULL) return -1;
        q->attn_mask_kind = ATTN_MASK_BOOL;
        q->attn_mask = tm->data;
    } else if (mask_kind && strcmp(mask_kind, "float") == 0) {
        s->mask_f = tensor_f32(&fx->io, "mask", i, NULL);
        if (s->mask_f == NULL) return -1;
        q->attn_mask_kind = ATTN_MASK_FLOAT;
        q->attn_mask = s->mask_f;
    }
    snprintf(name, sizeof name, "out.%d", i);
    s->out = attn__st_find(&fx->io, name);
    snprintf(name, sizeof name, "w_avg.%d", i);
    s->w_avg = attn__st_find(&fx->io, name);
    snprintf(name, sizeof name, "w_head.%d", i);
    s->w_head = attn__st_find(&fx->io, name);
    return s->out && s->w_avg && s->w_head ? 0 : -1;
}

static int fixture_load(fixture *fx, const char *name)
{
    char path[256];
    attn_error err = {0};
    memset(fx, 0, sizeof *fx);
    snprintf(fx->name, sizeof fx->name, "%s", name);
    snprintf(path, sizeof path, FIXDIR "/%s.io.safetensors", name);
    attn_status st = attn__st_read_file(path, &fx->io, &err);
    CHECK_MSG(st == ATTN_OK, "%s: %s", path, err.message);
    if (st != ATTN_OK) return -1;
    CHECK_STR_EQ(attn__st_meta_get(&fx->io, "format"), "attn-fixture");
    CHECK_STR_EQ(attn__st_meta_get(&fx->io, "version"), "1");
    const char *layer_path = attn__st_meta_get(&fx->io, "layer_path"); /* repo-relative */
    if (layer_path) snprintf(path, sizeof path, "%s", layer_path);
    else snprintf(path, sizeof path, FIXDIR "/%s.layer.safetensors", name);
    st = attn_layer_load_safetensors(path, meta_int(&fx->io, "heads_arg"), &fx->layer, &err);
    CHECK_MSG(st == ATTN_OK, "%s: %s", path, err.message);
    if (st != ATTN_OK) return -1;
    attn_layer_get_info(fx->layer, &fx->info);
    fx->n = meta_int(&fx->io, "n_seqs");
    fx->s = calloc(fx->n > 0 ? (size_t)fx->n : 1, sizeof *fx->s);
    if (fx->s == NULL) return -1;
    for (int i = 0; i < fx->n; i++) {
        int rc = load_seq(fx, i);
        CHECK_MSG(rc == 0, "%s: sequence %d is incomplete", name, i);
        if (rc != 0) return -1;
    }
    return 0;
}

/* max|got - exp| over t's elements; checks the tolerance; returns the diff. */
static double compare(const char *cs, const char *what, int i, const float *got,
                      const attn__st_tensor *t)
{
    float *exp = malloc(t->numel * sizeof *exp);
    if (exp == NULL || attn__st_to_f32(t, exp, NULL) != ATTN_OK) {
        free(exp);
        CHECK_MSG(0, "%s: cannot read expected %s.%d", cs, what, i);
        return 1e30;
    }
    double diff = 0, scale = 1;
    for (size_t j = 0; j < t->numel; j++) {
        double d = fabs((double)got[j] - exp[j]);
        if (!(d <= diff)) diff = d; /* NaN propagates */
        if (fabs(exp[j]) > scale) scale = fabs(exp[j]);
    }
    free(exp);
    CHECK_MSG(diff <= TOL * scale, "%s: %s.%d max diff %.3g > %.3g", cs, what, i, diff, TOL * scale);
    if (!(diff / scale <= worst_rel)) worst_rel = diff / scale;
    return diff;
}

/* Runs the whole batch in one attn_forward with weights mode `mode` and returns
 * the largest output diff; *wdiff gets the weights diff (mode != NONE). */
static double run_batch(fixture *fx, attn_weights_mode mode, double *wdiff)
{
    attn_seq *seqs = calloc((size_t)fx->n, sizeof *seqs);
    float **outs = calloc((size_t)fx->n, sizeof *outs), **ws = calloc((size_t)fx->n, sizeof *ws);
    double odiff = 0;
    *wdiff = 0;
    int ok = seqs && outs && ws;
    for (int i = 0; ok && i < fx->n; i++) {
        fx_seq *s = &fx->s[i];
        seqs[i] = s->seq;
        const attn__st_tensor *w = mode == ATTN_WEIGHTS_PER_HEAD ? s->w_head : s->w_avg;
        outs[i] = malloc(s->out->numel * sizeof(float));
        ws[i] = malloc(w->numel * sizeof(float));
        ok = outs[i] && ws[i];
        CHECK_INT_EQ(s->out->shape[0], s->seq.t);
        CHECK_INT_EQ(s->out->shape[1], fx->info.embed_out);
        CHECK_INT_EQ(w->shape[w->ndim - 1], s->seq.s);
        seqs[i].output = outs[i];
        seqs[i].weights_mode = mode;
        seqs[i].weights = mode == ATTN_WEIGHTS_NONE ? NULL : ws[i];
    }
    attn_error err = {0};
    attn_status st = ok ? attn_forward(fx->layer, seqs, fx->n, NULL, NULL, &err) : ATTN_ERR_NOMEM;
    CHECK_MSG(st == ATTN_OK, "%s: attn_forward (weights mode %d): %s", fx->name, (int)mode,
              err.message);
    for (int i = 0; st == ATTN_OK && i < fx->n; i++) {
        double d = compare(fx->name, "out", i, outs[i], fx->s[i].out);
        if (d > odiff) odiff = d;
        if (mode == ATTN_WEIGHTS_NONE) continue;
        d = compare(fx->name, mode == ATTN_WEIGHTS_AVERAGE ? "w_avg" : "w_head", i, ws[i],
                    mode == ATTN_WEIGHTS_AVERAGE ? fx->s[i].w_avg : fx->s[i].w_head);
        if (d > *wdiff) *wdiff = d;
    }
    for (int i = 0; outs && ws && i < fx->n; i++) {
        free(outs[i]);
        free(ws[i]);
    }
    free(outs);
    free(ws);
    free(seqs);
    return st == ATTN_OK ? odiff : 1e30;
}

static int run_case(const char *name)
{
    fixture fx;
    int rc = fixture_load(&fx, name);
    if (rc == 0) {
        double wa, wh, wn;
        double o_none = run_batch(&fx, ATTN_WEIGHTS_NONE, &wn);
        double o_avg = run_batch(&fx, ATTN_WEIGHTS_AVERAGE, &wa);
        double o_head = run_batch(&fx, ATTN_WEIGHTS_PER_HEAD, &wh);
        printf("%-24s seqs=%d  out %.2e (no weights) %.2e (avg) %.2e (per head)  "
               "w_avg %.2e  w_head %.2e\n",
               name, fx.n, o_none, o_avg, o_head, wa, wh);
    }
    fixture_free(&fx);
    return rc;
}

/* A query row whose keys are all masked: torch 1.13 gives NaN, attnd gives a zero
 * mixture (so the output row is out_proj.bias) and zero weights. */
TEST(fully_masked_rows)
{
    fixture fx;
    if (fixture_load(&fx, "self_h2") != 0) {
        fixture_free(&fx);
        return;
    }
    const attn__st_tensor *tb;
    attn__st_file lf;
    attn_error err = {0};
    CHECK(attn__st_read_file(FIXDIR "/self_h2.layer.safetensors", &lf, &err) == ATTN_OK);
    tb = attn__st_find(&lf, "out_proj.bias");
    CHECK(tb != NULL);
    float bias[64];
    if (tb == NULL || tb->numel > 64 || attn__st_to_f32(tb, bias, NULL) != ATTN_OK) goto done;

    attn_seq s = fx.s[0].seq;
    int t = s.t, e = fx.info.embed_out, h = fx.info.num_heads;
    uint8_t *kpm = malloc((size_t)s.s);
    float *mask = malloc((size_t)t * (size_t)s.s * sizeof *mask);
    float *out = malloc((size_t)t * (size_t)e * sizeof *out);
    float *w = malloc((size_t)h * (size_t)t * (size_t)s.s * sizeof *w);
    if (!kpm || !mask || !out || !w) goto free_bufs;

    /* every key padded: every row fully masked */
    memset(kpm, 1, (size_t)s.s);
    s.key_padding_mask = kpm;
    s.output = out;
    s.weights = w;
    s.weights_mode = ATTN_WEIGHTS_PER_HEAD;
    CHECK(attn_forward(fx.layer, &s, 1, NULL, NULL, &err) == ATTN_OK);
    for (int r = 0; r < t; r++)
        for (int c = 0; c < e; c++) CHECK_NEAR(out[r * e + c], bias[c], 1e-6);
    for (int j = 0; j < h * t * s.s; j++) CHECK_INT_EQ(w[j] == 0.0f, 1);

    /* a float mask row of -inf: that row only */
    s.key_padding_mask = NULL;
    for (int j = 0; j < t * s.s; j++) mask[j] = 0.0f;
    for (int j = 0; j < s.s; j++) mask[2 * s.s + j] = -INFINITY;
    s.attn_mask_kind = ATTN_MASK_FLOAT;
    s.attn_mask = mask;
    s.weights_mode = ATTN_WEIGHTS_AVERAGE;
    CHECK(attn_forward(fx.layer, &s, 1, NULL, NULL, &err) == ATTN_OK);
    for (int c = 0; c < e; c++) CHECK_NEAR(out[2 * e + c], bias[c], 1e-6);
    for (int j = 0; j < s.s; j++) CHECK_INT_EQ(w[2 * s.s + j] == 0.0f, 1);
    double row0 = 0;
    for (int j = 0; j < s.s; j++) row0 += w[j];
    CHECK_NEAR(row0, 1.0, 1e-5);
free_bufs:
    free(kpm);
    free(mask);
    free(out);
    free(w);
done:
    attn__st_free(&lf);
    fixture_free(&fx);
}

static int count_io_files(void)
{
    DIR *d = opendir(FIXDIR);
    CHECK_MSG(d != NULL, "cannot open %s (run from the repository root)", FIXDIR);
    if (d == NULL) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name), suf = strlen(".io.safetensors");
        if (len > suf && strcmp(de->d_name + len - suf, ".io.safetensors") == 0) n++;
    }
    closedir(d);
    return n;
}

/* Every fixture the MANIFEST lists, each compared tensor by tensor. */
TEST(fixtures)
{
    FILE *m = fopen(FIXDIR "/MANIFEST", "r");
    CHECK_MSG(m != NULL, "cannot open " FIXDIR "/MANIFEST (run from the repository root)");
    if (m == NULL) return;
    char line[128];
    int listed = 0, ran = 0;
    printf("tolerance: max|got - expected| <= %.0e * max(1, max|expected|) per tensor\n", TOL);
    while (fgets(line, sizeof line, m)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '\0') continue;
        listed++;
        if (run_case(line) == 0) ran++;
    }
    fclose(m);
    int files = count_io_files();
    printf("%d cases listed, %d ran, %d fixture files; worst relative error %.3g\n", listed, ran,
           files, worst_rel);
    CHECK_MSG(listed >= MIN_CASES, "MANIFEST lists %d cases, expected >= %d", listed, MIN_CASES);
    CHECK_INT_EQ(ran, listed);
    CHECK_INT_EQ(files, listed);
}

int main(void)
{
    RUN(fixtures);
    RUN(fully_masked_rows);
    return check_summary();
}
