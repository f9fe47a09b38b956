/* test_header_example.c — keeps the example at the top of lib/attn.h true: the
 * code between the BEGIN/END lines below is that example, copied verbatim (the
 * test also compares the two texts line by line, so an edit to one alone
 * fails here). It runs the example on the demo model and compares its output
 * with the reference implementation run independently on the same input.
 * Run from the repository root (config/demo.safetensors, lib/attn.h).
 */
/* BEGIN lib/attn.h example */
#include <stdio.h>
#include "attn.h" // link build/libattn.a -lopenblas -ljansson -lm -pthread

// x: (T, 64) query rows, out: (T, 64). Returns 0, or -1 with the error printed.
int demo_self_attention(const float *x, int T, float *out)
{
    attn_layer *layer = NULL;
    attn_workspace *ws = NULL; // one per thread, reused across calls
    attn_error err;
    attn_status st = attn_layer_load_safetensors("config/demo.safetensors", 0, &layer, &err);
    if (st == ATTN_OK)
        st = attn_workspace_create(NULL, &ws, &err);
    if (st == ATTN_OK) {
        attn_seq seq = {.t = T, .s = T, .query = x, .is_causal = 1, .output = out};
        st = attn_forward(layer, &seq, 1, ws, NULL, &err);
    }
    if (st != ATTN_OK)
        fprintf(stderr, "%s: %s\n", attn_status_name(st), err.message);
    attn_workspace_free(ws);
    attn_layer_free(layer);
    return st == ATTN_OK ? 0 : -1;
}
/* END lib/attn.h example */

#include "check.h"
#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


enum { E = 64, T_MAX = 12, MAX_LINES = 64, LINE_MAX_ = 160 };

typedef struct text {
    char line[MAX_LINES][LINE_MAX_];
    int n;
} text;

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Appends one line (without its newline); returns 0 when the text is full. */
static int text_add(text *t, const char *s, size_t len)
{
    if (t->n == MAX_LINES || len >= LINE_MAX_) return 0;
    memcpy(t->line[t->n], s, len);
    t->line[t->n][len] = '\0';
    t->n++;
    return 1;
}

/* The example as attn.h shows it: the " *   " lines after the comment that
 * names this test, up to the comment's end, with that prefix removed. */
static int header_example(const char *path, text *t)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    char buf[512];
    int seen = 0, ok = 1, done = 0;
    while (!done && fgets(buf, sizeof buf, f) != NULL) {
        buf[strcspn(buf, "\n")] = '\0';
        if (!seen) {
            seen = strstr(buf, "test_header_example.c") != NULL;
        } else if (starts_with(buf, " */")) {
            done = 1;
        } else if (starts_with(buf, " *   ")) {
            ok &= text_add(t, buf + 5, strlen(buf + 5));
        } else if (strcmp(buf, " *") == 0) {
            if (t->n > 0) ok &= text_add(t, "", 0); /* a blank line inside the code */
        } else if (t->n > 0) {
            ok = 0; /* prose after the code started: not the expected layout */
        }
    }
    fclose(f);
    while (t->n > 0 && t->line[t->n - 1][0] == '\0') t->n--;
    return ok && done && t->n > 0;
}

/* The lines of this file between the BEGIN and END markers. */
static int own_copy(const char *path, text *t)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    char buf[512];
    int in = 0, ok = 1, done = 0;
    while (!done && fgets(buf, sizeof buf, f) != NULL) {
        buf[strcspn(buf, "\n")] = '\0';
        if (strcmp(buf, "/* BEGIN lib/attn.h example */") == 0) in = 1;
        else if (strcmp(buf, "/* END lib/attn.h example */") == 0) done = in;
        else if (in) ok &= text_add(t, buf, strlen(buf));
    }
    fclose(f);
    return ok && done && t->n > 0;
}

TEST(example_matches_header)
{
    static text h, c;
    CHECK_MSG(header_example("lib/attn.h", &h), "no example found in lib/attn.h (run from the repo root)");
    CHECK_MSG(own_copy(__FILE__, &c), "cannot read the example's copy in %s", __FILE__);
    CHECK_INT_EQ(h.n, c.n);
    for (int i = 0; i < h.n && i < c.n; i++)
        CHECK_MSG(strcmp(h.line[i], c.line[i]) == 0, "line %d: attn.h \"%s\" vs test \"%s\"", i + 1,
                  h.line[i], c.line[i]);
}

/* The example's output equals the reference oracle's on the same layer and
 * input, to float rounding; and it is not trivially zero. */
TEST(example_output)
{
    attn_layer *l = NULL;
    attn_error err = {0};
    CHECK_INT_EQ(attn_layer_load_safetensors("config/demo.safetensors", 0, &l, &err), ATTN_OK);
    if (l == NULL) return;
    attn_layer_info li;
    attn_layer_get_info(l, &li);
    CHECK_INT_EQ(li.embed_q, E);
    CHECK_INT_EQ(li.embed_out, E);
    static float x[T_MAX * E], out[T_MAX * E], ref[T_MAX * E];
    for (int T = 1; T <= T_MAX; T += 11) {
        for (int i = 0; i < T * E; i++) x[i] = sinf(0.37f * (float)i) * 0.8f;
        for (int i = 0; i < T * E; i++) out[i] = 12345.0f;
        CHECK_INT_EQ(demo_self_attention(x, T, out), 0);
        attn_seq seq = {.t = T, .s = T, .query = x, .is_causal = 1, .output = ref};
        CHECK_INT_EQ(attn__forward_reference(l, &seq, 1, NULL, NULL, &err), ATTN_OK);
        double worst = 0, norm = 0;
        for (int i = 0; i < T * E; i++) {
            worst = fmax(worst, fabs((double)out[i] - ref[i]));
            norm = fmax(norm, fabs((double)ref[i]));
        }
        printf("T = %d: max |example - reference| = %.3g (max |reference| %.3g)\n", T, worst, norm);
        CHECK(norm > 1e-3);
        CHECK(worst <= 1e-5 * (1.0 + norm));
        /* causal: the first row sees only itself, so it does not depend on the
         * rest (equal to rounding: the GEMMs block T = 1 and T = 12 differently) */
        if (T > 1) {
            float first[E];
            memcpy(first, out, sizeof first);
            CHECK_INT_EQ(demo_self_attention(x, 1, out), 0);
            double d = 0;
            for (int i = 0; i < E; i++) d = fmax(d, fabs((double)first[i] - out[i]));
            CHECK_NEAR(d, 0.0, 1e-6);
        }
    }
    /* the example's failure path: a shape error is reported, -1 returned */
    CHECK_INT_EQ(demo_self_attention(x, 0, out), -1);
    attn_layer_free(l);
}

int main(void)
{
    RUN(example_matches_header);
    RUN(example_output);
    return check_summary();
}
