/* family.c — the checkpoint families' tensor names and shapes: detection, layer
 * enumeration and selection, one layer's tensors checked against each other and
 * against config.json, and their assembly into an attn_layer_desc. See family.h.
 */
#include "family.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer_internal.h"

#define TRY(expr)                                                                  \
    do {                                                                           \
        attn_status try_st_ = (expr);                                              \
        if (try_st_ != ATTN_OK) return try_st_;                                    \
    } while (0)

const char *attn_family_name(attn_family family)
{
    switch (family) {
    case ATTN_FAMILY_AUTO: return "auto";
    case ATTN_FAMILY_MHA: return "mha";
    case ATTN_FAMILY_EXPLICIT: return "explicit";
    case ATTN_FAMILY_LLAMA: return "llama";
    case ATTN_FAMILY_BERT: return "bert";
    case ATTN_FAMILY_GPT2: return "gpt2";
    }
    return "unknown";
}

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* out = a + b (+ c), cut to fit ATTN__NAME_MAX; returns 0 when it had to cut. */
static int join_name(char out[ATTN__NAME_MAX], const char *a, const char *b, const char *c)
{
    const char *parts[3] = {a, b, c};
    size_t n = 0;
    int whole = 1;
    for (int i = 0; i < 3; i++) {
        size_t m = parts[i] ? strlen(parts[i]) : 0;
        if (m > ATTN__NAME_MAX - 1 - n) {
            m = ATTN__NAME_MAX - 1 - n;
            whole = 0;
        }
        if (m) memcpy(out + n, parts[i], m);
        n += m;
    }
    out[n] = '\0';
    return whole;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* ------------------------------------------------------------ nearest names */

/* Levenshtein distance of a and b (each cut at ATTN__NAME_MAX). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t n = strnlen(a, ATTN__NAME_MAX), m = strnlen(b, ATTN__NAME_MAX);
    size_t row[ATTN__NAME_MAX + 1];
    for (size_t j = 0; j <= m; j++) row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[m];
}

static size_t common_prefix(const char *a, const char *b)
{
    size_t i = 0;
    while (a[i] != '\0' && a[i] == b[i]) i++;
    return i;
}

/* a is a better suggestion for want than b: smaller distance, then longer shared prefix. */
static int better(size_t da, size_t pa, const char *a, size_t db, size_t pb, const char *b)
{
    if (da != db) return da < db;
    if (pa != pb) return pa > pb;
    return strcmp(a, b) < 0;
}

/* ATTN_ERR_MISSING_TENSOR: "tensor 'want' not found<note> (nearest: 'a', 'b', 'c')". */
static attn_status missing(const attn__tsrc *src, const char *want, const char *note,
                           attn_error *err)
{
    enum { K = 3 };
    const char *best[K] = {0};
    size_t bd[K] = {0}, bp[K] = {0};
    for (size_t i = 0; i < src->n_names; i++) {
        const char *n = src->name(src->ctx, i);
        size_t d = edit_distance(want, n), p = common_prefix(want, n);
        for (int k = 0; k < K; k++) {
            if (best[k] == NULL || better(d, p, n, bd[k], bp[k], best[k])) {
                for (int j = K - 1; j > k; j--) {
                    best[j] = best[j - 1];
                    bd[j] = bd[j - 1];
                    bp[j] = bp[j - 1];
                }
                best[k] = n;
                bd[k] = d;
                bp[k] = p;
                break;
            }
        }
    }
    if (best[0] == NULL)
        return attn__set_error(err, ATTN_ERR_MISSING_TENSOR,
                               "tensor '%.100s' not found%s (the checkpoint has no tensors)", want,
                               note);
    /* as many of the nearest names as fit in the message */
    char msg[ATTN_ERROR_MESSAGE_MAX];
    int len = snprintf(msg, sizeof msg, "tensor '%.100s' not found%s (nearest: ", want, note);
    if (len < 0 || (size_t)len >= sizeof msg) len = (int)sizeof msg - 1;
    for (int k = 0; k < K && best[k] != NULL; k++) {
        size_t room = sizeof msg - (size_t)len;
        int w = snprintf(msg + len, room, "%s'%.80s'", k ? ", " : "", best[k]);
        if (w < 0 || (size_t)w + 2 > room) { /* keep room for ")" */
            msg[len] = '\0';
            if (k == 0) len += snprintf(msg + len, room, "...");
            break;
        }
        len += w;
    }
    if ((size_t)len + 1 < sizeof msg) msg[len++] = ')', msg[len] = '\0';
    return attn__set_error(err, ATTN_ERR_MISSING_TENSOR, "%s", msg);
}

/* ------------------------------------------------------------ layers */

/* Where a family's layer i lives: prefix + root + head + i + tail + anchor, with
 * root one of roots (tried in order). Free-form families (MHA, EXPLICIT) have no
 * head: any prefix P whose P + anchor exists is a layer. */
typedef struct layout {
    const char *roots[3]; /* NULL-terminated; {""} when there is none */
    const char *head, *tail;
    const char *anchors[3]; /* NULL-terminated: names that mark a layer */
    const char *pattern;    /* for messages */
} layout;

static const layout layouts[] = {
    [ATTN_FAMILY_MHA] = {{"", NULL}, NULL, NULL, {"in_proj_weight", "q_proj_weight", NULL},
                         "[P]in_proj_weight"},
    [ATTN_FAMILY_EXPLICIT] = {{"", NULL}, NULL, NULL, {"q_proj.weight", NULL}, "[P]q_proj.weight"},
    [ATTN_FAMILY_LLAMA] = {{"model.", "", NULL}, "layers.", ".self_attn.", {"q_proj.weight", NULL},
                           "model.layers.N.self_attn.q_proj.weight"},
    [ATTN_FAMILY_BERT] = {{"bert.", "", NULL}, "encoder.layer.", ".attention.",
                          {"self.query.weight", NULL}, "encoder.layer.N.attention.self.query.weight"},
    [ATTN_FAMILY_GPT2] = {{"transformer.", "", NULL}, "h.", ".attn.", {"c_attn.weight", NULL},
                          "h.N.attn.c_attn.weight"},
};

typedef struct layer_ref {
    long index;
    char base[ATTN__NAME_MAX];
} layer_ref;

typedef struct layer_list {
    layer_ref *v;
    int n, cap;
} layer_list;

/* Parses a layer number (1..9 digits) at *s; advances *s. -1 when there is none. */
static long parse_index(const char **s)
{
    const char *p = *s;
    long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 10) {
        v = v * 10 + (*p - '0');
        p++;
        digits++;
    }
    if (digits == 0 || digits > 9) return -1;
    *s = p;
    return v;
}

/* The first dot-separated component of b that is a layer number: returns it,
 * with the length of what precedes it and what follows it; -1 when none. */
static long split_index(const char *b, size_t *head_len, const char **tail)
{
    for (const char *p = b; *p != '\0'; p++) {
        if (!(*p >= '0' && *p <= '9') || (p != b && p[-1] != '.')) continue;
        const char *q = p;
        long idx = parse_index(&q);
        if (idx >= 0 && (*q == '.' || *q == '\0')) {
            *head_len = (size_t)(p - b);
            *tail = q;
            return idx;
        }
    }
    *head_len = 0;
    *tail = "";
    return -1;
}

static attn_status push_layer(layer_list *l, long index, const char *base, size_t base_len,
                              attn_error *err)
{
    for (int i = 0; i < l->n; i++)
        if (strncmp(l->v[i].base, base, base_len) == 0 && l->v[i].base[base_len] == '\0')
            return ATTN_OK; /* q_proj_weight next to in_proj_weight: one layer */
    if (base_len >= ATTN__NAME_MAX)
        return attn__set_error(err, ATTN_ERR_LIMIT, "tensor prefix '%.64s...' is too long", base);
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        layer_ref *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (v == NULL) return attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n].index = index;
    memcpy(l->v[l->n].base, base, base_len);
    l->v[l->n].base[base_len] = '\0';
    l->n++;
    return ATTN_OK;
}

static int layer_cmp(const void *a, const void *b)
{
    const layer_ref *x = a, *y = b;
    if (x->index != y->index) return x->index < y->index ? -1 : 1;
    return strcmp(x->base, y->base);
}

/* Structural families: every name prefix + root + head + INT + tail + anchor. */
static attn_status find_structured(const attn__tsrc *src, const layout *lo, const char *prefix,
                                   layer_list *l, attn_error *err)
{
    int root_used = -1;
    for (size_t i = 0; i < src->n_names; i++) {
        const char *name = src->name(src->ctx, i);
        if (!starts_with(name, prefix)) continue;
        const char *rest = name + strlen(prefix);
        for (int r = 0; lo->roots[r] != NULL; r++) {
            const char *p = rest;
            if (!starts_with(p, lo->roots[r])) continue;
            p += strlen(lo->roots[r]);
            if (!starts_with(p, lo->head)) continue;
            p += strlen(lo->head);
            long idx = parse_index(&p);
            if (idx < 0 || !starts_with(p, lo->tail)) continue;
            p += strlen(lo->tail);
            int is_anchor = 0;
            for (int a = 0; lo->anchors[a] != NULL; a++) is_anchor |= strcmp(p, lo->anchors[a]) == 0;
            if (!is_anchor) continue;
            if (root_used >= 0 && root_used != r)
                return attn__set_error(err, ATTN_ERR_FORMAT,
                                       "the checkpoint has layers both under '%s%s%s' and '%s%s%s'; "
                                       "pick one with prefix=",
                                       prefix, lo->roots[root_used], lo->head, prefix, lo->roots[r],
                                       lo->head);
            root_used = r;
            TRY(push_layer(l, idx, name, (size_t)(p - name), err));
            break;
        }
    }
    return ATTN_OK;
}

/* Free-form families: every P (empty or ending in '.') with P + anchor present,
 * P starting with prefix. Several P must differ only by one layer number. */
static attn_status find_free(const attn__tsrc *src, const layout *lo, const char *prefix,
                             layer_list *l, attn_error *err)
{
    for (size_t i = 0; i < src->n_names; i++) {
        const char *name = src->name(src->ctx, i);
        if (!starts_with(name, prefix)) continue;
        for (int a = 0; lo->anchors[a] != NULL; a++) {
            if (!ends_with(name, lo->anchors[a])) continue;
            size_t base_len = strlen(name) - strlen(lo->anchors[a]);
            if (base_len < strlen(prefix)) continue;
            if (base_len > 0 && name[base_len - 1] != '.') continue;
            TRY(push_layer(l, 0, name, base_len, err));
        }
    }
    if (l->n == 0) return ATTN_OK;
    if (l->n == 1) { /* its number, if it has one: "layers.3.self_attn." is layer 3 */
        size_t head_len;
        const char *tail;
        long idx = split_index(l->v[0].base + strlen(prefix), &head_len, &tail);
        l->v[0].index = idx >= 0 ? idx : 0;
        return ATTN_OK;
    }
    /* several: head + INT + tail, the same head and tail for all */
    const char *b0 = l->v[0].base + strlen(prefix), *tail0 = NULL;
    size_t head_len0 = 0;
    for (int k = 0; k < l->n; k++) {
        const char *b = l->v[k].base + strlen(prefix), *tail;
        size_t head_len;
        long idx = split_index(b, &head_len, &tail);
        if (k == 0) {
            head_len0 = head_len;
            tail0 = tail;
        } else if (idx >= 0 && (head_len != head_len0 || strncmp(b, b0, head_len) != 0 ||
                                strcmp(tail, tail0) != 0)) {
            idx = -1;
        }
        if (idx < 0)
            return attn__set_error(err, ATTN_ERR_INVALID_ARG,
                                   "the checkpoint has %d attention layers under different "
                                   "prefixes ('%.60s', '%.60s', ...): choose one with prefix=",
                                   l->n, l->v[0].base, l->v[1].base);
        l->v[k].index = idx;
    }
    return ATTN_OK;
}

static attn_status find_layers(const attn__tsrc *src, attn_family fam, const char *prefix,
                               layer_list *l, attn_error *err)
{
    const layout *lo = &layouts[fam];
    attn_status st = lo->head ? find_structured(src, lo, prefix, l, err)
                              : find_free(src, lo, prefix, l, err);
    if (st != ATTN_OK) return st;
    if (l->n > 1) qsort(l->v, (size_t)l->n, sizeof *l->v, layer_cmp);
    for (int i = 1; i < l->n; i++)
        if (l->v[i].index == l->v[i - 1].index)
            return attn__set_error(err, ATTN_ERR_FORMAT, "two layers numbered %ld: '%.80s' and '%.80s'",
                                   l->v[i].index, l->v[i - 1].base, l->v[i].base);
    return ATTN_OK;
}

/* "4 layers (0..3)", "1 layer (5)", "3 layers (0, 2, 7)" */
static void describe_layers(const layer_list *l, char *buf, size_t cap)
{
    int contiguous = 1;
    for (int i = 1; i < l->n; i++) contiguous &= l->v[i].index == l->v[i - 1].index + 1;
    if (l->n == 1) {
        snprintf(buf, cap, "1 layer (%ld)", l->v[0].index);
    } else if (contiguous) {
        snprintf(buf, cap, "%d layers (%ld..%ld)", l->n, l->v[0].index, l->v[l->n - 1].index);
    } else {
        size_t n = (size_t)snprintf(buf, cap, "%d layers (", l->n);
        for (int i = 0; i < l->n && i < 6 && n < cap; i++)
            n += (size_t)snprintf(buf + n, cap - n, "%s%ld", i ? ", " : "", l->v[i].index);
        if (n < cap) snprintf(buf + n, cap - n, "%s)", l->n > 6 ? ", ..." : "");
    }
}

/* ------------------------------------------------------------ family */

static attn_status family_from_model_type(const char *mt, attn_family *fam, attn_error *err)
{
    static const struct {
        const char *type;
        attn_family fam;
    } map[] = {{"llama", ATTN_FAMILY_LLAMA}, {"mistral", ATTN_FAMILY_LLAMA},
               {"qwen2", ATTN_FAMILY_LLAMA}, {"bert", ATTN_FAMILY_BERT},
               {"gpt2", ATTN_FAMILY_GPT2}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcmp(mt, map[i].type) == 0) {
            *fam = map[i].fam;
            return ATTN_OK;
        }
    }
    return attn__set_error(err, ATTN_ERR_UNSUPPORTED,
                           "config.json model_type \"%.31s\" is not one attnd knows (llama, "
                           "mistral, qwen2, bert, gpt2); if its attention is one of those, "
                           "choose the family (attnd: format=llama|bert|gpt2)",
                           mt);
}

/* The family and its layers. AUTO: model_type, else the first family whose
 * names are present (Llama before explicit: its names end in q_proj.weight too). */
static attn_status resolve_family(const attn__tsrc *src, const attn__hfcfg *cfg,
                                  const attn_load_options *opts, const char *prefix,
                                  attn_family *fam, layer_list *l, attn_error *err)
{
    *fam = opts->family;
    if ((int)*fam < ATTN_FAMILY_AUTO || *fam > ATTN_FAMILY_GPT2)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "opts.family = %d is not an attn_family",
                               (int)*fam);
    if (*fam == ATTN_FAMILY_AUTO && cfg->model_type[0] != '\0')
        TRY(family_from_model_type(cfg->model_type, fam, err));
    if (*fam != ATTN_FAMILY_AUTO) {
        TRY(find_layers(src, *fam, prefix, l, err));
        if (l->n > 0) return ATTN_OK;
        char want[ATTN__NAME_MAX];
        const layout *lo = &layouts[*fam];
        char mid[64];
        if (lo->head != NULL) snprintf(mid, sizeof mid, "%s%s0%s", lo->roots[0], lo->head, lo->tail);
        else mid[0] = '\0';
        join_name(want, prefix, mid, lo->anchors[0]);
        char note[96];
        snprintf(note, sizeof note, " (%s checkpoint)", attn_family_name(*fam));
        return missing(src, want, note, err);
    }
    static const attn_family order[] = {ATTN_FAMILY_LLAMA, ATTN_FAMILY_BERT, ATTN_FAMILY_GPT2,
                                        ATTN_FAMILY_MHA, ATTN_FAMILY_EXPLICIT};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        TRY(find_layers(src, order[i], prefix, l, err));
        if (l->n > 0) {
            *fam = order[i];
            return ATTN_OK;
        }
    }
    if (src->n_names == 0)
        return attn__set_error(err, ATTN_ERR_MISSING_TENSOR, "the checkpoint has no tensors");
    return attn__set_error(err, ATTN_ERR_MISSING_TENSOR,
                           "no attention layer found under prefix '%.40s': none of "
                           "model.layers.N.self_attn.*, encoder.layer.N.attention.*, h.N.attn.*, "
                           "in_proj_weight, q_proj.weight (first tensor: '%.60s')",
                           prefix, src->name(src->ctx, 0));
}

/* ------------------------------------------------------------ one layer */

/* Everything the per-family checks share. */
typedef struct ctx {
    const attn__tsrc *src;
    const attn__hfcfg *cfg;
    const attn_load_options *opts;
    attn__plan_mode mode;
    attn__plan *plan;
    attn_error *err;
} ctx;

static void fmt_shape(const attn__st_tensor *t, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%zu", d ? ", " : "", t->shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Looks up base + suffix; adds it to the plan (role, xf) when present.
 * Returns the tensor or NULL (absent, or an error: then *st is set). */
static const attn__st_tensor *take(ctx *c, const char *suffix, int role, attn__xf xf,
                                   attn_status *st)
{
    attn__plan *p = c->plan;
    char name[ATTN__NAME_MAX];
    *st = ATTN_OK;
    if (!join_name(name, p->base, suffix, NULL)) {
        *st = attn__set_error(c->err, ATTN_ERR_LIMIT, "tensor name '%.64s...' is too long", p->base);
        return NULL;
    }
    const attn__st_tensor *t = NULL;
    *st = c->src->find(c->src->ctx, name, &t, c->err);
    if (*st != ATTN_OK || t == NULL) return NULL;
    if (p->n_src == ATTN__N_ROLES) { /* cannot happen: no family names more than 8 */
        *st = attn__set_error(c->err, ATTN_ERR_INTERNAL, "too many tensors for one layer");
        return NULL;
    }
    attn__src *s = &p->src[p->n_src++];
    memcpy(s->name, name, sizeof name);
    s->t = t;
    s->role = role;
    s->xf = xf;
    return t;
}

/* Refuses a tensor under the layer's prefix that the family does not know. */
static attn_status check_known(ctx *c, const char *const *known, const char *hint)
{
    const char *base = c->plan->base;
    for (size_t i = 0; i < c->src->n_names; i++) {
        const char *name = c->src->name(c->src->ctx, i);
        if (!starts_with(name, base)) continue;
        const char *rest = name + strlen(base);
        int ok = 0;
        for (int k = 0; known[k] != NULL && !ok; k++) ok = strcmp(rest, known[k]) == 0;
        if (!ok)
            return attn__set_error(c->err, ATTN_ERR_FORMAT,
                                   "unknown tensor '%.100s' in %s attention layer %d (expected %s)",
                                   name, attn_family_name(c->plan->family), c->plan->layer, hint);
    }
    return ATTN_OK;
}

/* A bias set that is all-or-none: refuses a partial one naming the missing tensor. */
static attn_status bias_set(ctx *c, const char *const *suffixes, const attn__st_tensor *const *got,
                            int n, const char *why)
{
    int present = -1, absent = -1;
    for (int i = 0; i < n; i++) {
        if (got[i] != NULL && present < 0) present = i;
        if (got[i] == NULL && absent < 0) absent = i;
    }
    if (present < 0 || absent < 0) return ATTN_OK;
    char want[ATTN__NAME_MAX], note[160];
    join_name(want, c->plan->base, suffixes[absent], NULL);
    snprintf(note, sizeof note, ", but '%.40s' is: %s", suffixes[present], why);
    return missing(c->src, want, note, c->err);
}

/* Checks t is [d0] (d1 < 0) or [d0, d1]; sym names the expected shape in
 * symbols ("[3*E, E]"), why says where the numbers come from (may be ""). */
static attn_status want_shape(ctx *c, const attn__st_tensor *t, size_t d0, long d1,
                              const char *sym, const char *why)
{
    if (t == NULL) return ATTN_OK;
    int ndim = d1 < 0 ? 1 : 2;
    if (t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == (size_t)d1))
        return ATTN_OK;
    char got[96];
    fmt_shape(t, got, sizeof got);
    if (ndim == 1)
        return attn__set_error(c->err, ATTN_ERR_SHAPE, "%s is %s, expected %s = [%zu]%s", t->name,
                               got, sym, d0, why);
    return attn__set_error(c->err, ATTN_ERR_SHAPE, "%s is %s, expected %s = [%zu, %ld]%s", t->name,
                           got, sym, d0, d1, why);
}

/* Rows and columns of a present, non-empty 2-D weight. */
static attn_status matrix_dims(ctx *c, const attn__st_tensor *t, const char *suffix, size_t *rows,
                               size_t *cols)
{
    if (t == NULL)
        return attn__set_error(c->err, ATTN_ERR_MISSING_TENSOR, "tensor '%s%s' is missing",
                               c->plan->base, suffix);
    if (t->ndim != 2 || t->shape[0] == 0 || t->shape[1] == 0) {
        char got[96];
        fmt_shape(t, got, sizeof got);
        return attn__set_error(c->err, ATTN_ERR_SHAPE, "%s is %s, expected a non-empty matrix",
                               t->name, got);
    }
    if (t->shape[0] > INT_MAX / 4 || t->shape[1] > INT_MAX / 4)
        return attn__set_error(c->err, ATTN_ERR_LIMIT, "%s is too large", t->name);
    *rows = t->shape[0];
    *cols = t->shape[1];
    return ATTN_OK;
}

/* A required tensor: present, or MISSING_TENSOR with the nearest names. */
static attn_status need(ctx *c, const char *suffix, int role, attn__xf xf,
                        const attn__st_tensor **t)
{
    attn_status st;
    *t = take(c, suffix, role, xf, &st);
    if (st != ATTN_OK) return st;
    if (*t != NULL) return ATTN_OK;
    char want[ATTN__NAME_MAX];
    join_name(want, c->plan->base, suffix, NULL);
    return missing(c->src, want, "", c->err);
}

static attn_status opt(ctx *c, const char *suffix, int role, attn__xf xf, const attn__st_tensor **t)
{
    attn_status st;
    *t = take(c, suffix, role, xf, &st);
    return st;
}

/* Heads: opts.num_heads, else config.json, else __metadata__.num_heads. */
static attn_status resolve_heads(ctx *c, int *h)
{
    int want = c->opts->num_heads;
    if (want < 0)
        return attn__set_error(c->err, ATTN_ERR_INVALID_ARG,
                               "num_heads = %d; pass heads=N with N >= 1", want);
    if (want > 0) {
        *h = want;
        return ATTN_OK;
    }
    if (c->mode != ATTN__PLAN_LEGACY && c->cfg->num_heads > 0) {
        *h = c->cfg->num_heads;
        return ATTN_OK;
    }
    const char *s = c->src->meta(c->src->ctx, "num_heads");
    if (s == NULL)
        return attn__set_error(c->err, ATTN_ERR_INVALID_ARG,
                               c->mode == ATTN__PLAN_LEGACY
                                   ? "number of heads unknown: __metadata__ has no \"num_heads\"; "
                                     "pass heads=N"
                                   : "number of heads unknown: no config.json num_attention_heads "
                                     "and no __metadata__ \"num_heads\"; pass heads=N");
    long v = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9' && v <= 1000000; i++) v = v * 10 + (s[i] - '0');
    if (i == 0 || s[i] != '\0' || v < 1 || v > 1000000)
        return attn__set_error(c->err, ATTN_ERR_FORMAT,
                               "__metadata__ num_heads \"%.32s\" is not a decimal integer in "
                               "[1, 1000000]; pass heads=N",
                               s);
    *h = (int)v;
    return ATTN_OK;
}

static attn_status not_divisible(ctx *c, const char *what, size_t n, int h)
{
    return attn__set_error(c->err, ATTN_ERR_SHAPE,
                           "%s %zu is not divisible by num_heads %d; pass heads=N with N dividing %zu",
                           what, n, h, n);
}

/* Families without GQA: opts.num_kv_heads must be 0 or h. */
static attn_status no_gqa(ctx *c, int h)
{
    int g = c->opts->num_kv_heads;
    if (g == 0 || g == h) return ATTN_OK;
    return attn__set_error(c->err, ATTN_ERR_INVALID_ARG,
                           "num_kv_heads = %d, but a %s layer has one key/value head per query head "
                           "(%d)",
                           g, attn_family_name(c->plan->family), h);
}

/* config.json's hidden_size, when given, must be the tensors' width. */
static attn_status check_hidden(ctx *c, const attn__st_tensor *t, size_t e)
{
    if (c->cfg->hidden_size == 0 || (size_t)c->cfg->hidden_size == e) return ATTN_OK;
    char got[96];
    fmt_shape(t, got, sizeof got);
    return attn__set_error(c->err, ATTN_ERR_SHAPE,
                           "config.json hidden_size is %d, but %s is %s (width %zu)",
                           c->cfg->hidden_size, t->name, got, e);
}

/* ---- MultiheadAttention and explicit names (also the legacy bare-file loader) */

static const char *const mha_known[] = {"in_proj_weight", "in_proj_bias", "q_proj_weight",
                                        "k_proj_weight", "v_proj_weight", "out_proj.weight",
                                        "out_proj.bias", NULL};
static const char *const explicit_known[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight",
                                             "o_proj.weight", "q_proj.bias", "k_proj.bias",
                                             "v_proj.bias", "o_proj.bias", NULL};

/* Every tensor under the base is a MultiheadAttention name or an explicit one,
 * never both (the 0.1 loader's rules and messages). Sets *pytorch. */
static attn_status classify_names(ctx *c, int *pytorch)
{
    int pt = 0, ex = 0;
    const char *base = c->plan->base;
    for (size_t i = 0; i < c->src->n_names; i++) {
        const char *name = c->src->name(c->src->ctx, i);
        if (!starts_with(name, base)) continue;
        const char *rest = name + strlen(base);
        int is_pt = 0, is_ex = 0;
        for (int k = 0; mha_known[k]; k++) is_pt |= strcmp(rest, mha_known[k]) == 0;
        for (int k = 0; explicit_known[k]; k++) is_ex |= strcmp(rest, explicit_known[k]) == 0;
        if (!is_pt && !is_ex) {
            if (strcmp(rest, "bias_k") == 0 || strcmp(rest, "bias_v") == 0)
                return attn__set_error(c->err, ATTN_ERR_FORMAT,
                                       "tensor '%.100s' (add_bias_kv=True) is not supported", name);
            return attn__set_error(c->err, ATTN_ERR_FORMAT,
                                   "unknown tensor '%.100s' (expected PyTorch MultiheadAttention "
                                   "names or q_proj./k_proj./v_proj./o_proj.{weight,bias})",
                                   name);
        }
        pt |= is_pt;
        ex |= is_ex;
    }
    if (pt && ex)
        return attn__set_error(c->err, ATTN_ERR_FORMAT,
                               "file mixes PyTorch names (in_proj_*, out_proj.*) with explicit "
                               "names (q_proj.weight, ...)");
    if (!pt && !ex)
        return attn__set_error(c->err, ATTN_ERR_MISSING_TENSOR,
                               "no attention weights: need in_proj_weight (or q_proj_weight, "
                               "k_proj_weight, v_proj_weight) or q_proj.weight");
    *pytorch = pt;
    return ATTN_OK;
}

/* nn.MultiheadAttention: in_proj_weight [3E, E] or q/k/v_proj_weight [E,E]/[E,kdim]/
 * [E,vdim]; in_proj_bias [3E]; out_proj.weight [E, E]; out_proj.bias [E]. */
static attn_status plan_mha(ctx *c)
{
    attn_layer_desc *d = &c->plan->desc;
    const attn__st_tensor *in_w, *q_w, *k_w, *v_w, *in_b, *out_w, *out_b;
    size_t e, rows, cols, kdim, vdim;
    int h;
    TRY(resolve_heads(c, &h));
    TRY(opt(c, "in_proj_weight", ATTN__R_WQ, ATTN__XF_SPLIT3, &in_w));
    if (in_w != NULL) {
        TRY(opt(c, "q_proj_weight", ATTN__R_WQ, ATTN__XF_PLAIN, &q_w));
        TRY(opt(c, "k_proj_weight", ATTN__R_WK, ATTN__XF_PLAIN, &k_w));
        TRY(opt(c, "v_proj_weight", ATTN__R_WV, ATTN__XF_PLAIN, &v_w));
        if (q_w || k_w || v_w)
            return attn__set_error(c->err, ATTN_ERR_FORMAT,
                                   "file has both %sin_proj_weight and q/k/v_proj_weight",
                                   c->plan->base);
        TRY(matrix_dims(c, in_w, "in_proj_weight", &rows, &cols));
        e = kdim = vdim = cols;
        TRY(want_shape(c, in_w, 3 * e, (long)e, "[3*E, E]", ""));
    } else {
        TRY(opt(c, "q_proj_weight", ATTN__R_WQ, ATTN__XF_PLAIN, &q_w));
        TRY(opt(c, "k_proj_weight", ATTN__R_WK, ATTN__XF_PLAIN, &k_w));
        TRY(opt(c, "v_proj_weight", ATTN__R_WV, ATTN__XF_PLAIN, &v_w));
        if (!q_w && !k_w && !v_w)
            return attn__set_error(c->err, ATTN_ERR_MISSING_TENSOR,
                                   "tensor '%sin_proj_weight' (or q_proj_weight, k_proj_weight, "
                                   "v_proj_weight) is missing",
                                   c->plan->base);
        TRY(matrix_dims(c, q_w, "q_proj_weight", &e, &cols));
        TRY(want_shape(c, q_w, e, (long)e, "[E, E]", ""));
        TRY(matrix_dims(c, k_w, "k_proj_weight", &rows, &kdim));
        TRY(want_shape(c, k_w, e, (long)kdim, "[E, kdim]", ""));
        TRY(matrix_dims(c, v_w, "v_proj_weight", &rows, &vdim));
        TRY(want_shape(c, v_w, e, (long)vdim, "[E, vdim]", ""));
    }
    if (e > INT_MAX / 3)
        return attn__set_error(c->err, ATTN_ERR_LIMIT, "embed_dim %zu is too large", e);
    TRY(opt(c, "in_proj_bias", ATTN__R_BQ, ATTN__XF_SPLIT3, &in_b));
    TRY(opt(c, "out_proj.weight", ATTN__R_WO, ATTN__XF_PLAIN, &out_w));
    TRY(opt(c, "out_proj.bias", ATTN__R_BO, ATTN__XF_PLAIN, &out_b));
    TRY(want_shape(c, in_b, 3 * e, -1, "[3*E]", ""));
    if (out_w == NULL)
        return attn__set_error(c->err, ATTN_ERR_MISSING_TENSOR, "tensor '%sout_proj.weight' is missing",
                               c->plan->base);
    TRY(want_shape(c, out_w, e, (long)e, "[E, E]", ""));
    TRY(want_shape(c, out_b, e, -1, "[E]", ""));
    if (c->mode != ATTN__PLAN_LEGACY) {
        static const char *const names[] = {"in_proj_bias", "out_proj.bias"};
        const attn__st_tensor *got[] = {in_b, out_b};
        TRY(bias_set(c, names, got, 2,
                     "nn.MultiheadAttention has both biases or neither (bias=False)"));
        TRY(check_hidden(c, in_w ? in_w : q_w, e));
    }
    if (e % (size_t)h != 0) return not_divisible(c, "embed_dim", e, h);
    TRY(no_gqa(c, h));
    d->num_heads = h;
    d->head_dim_k = d->head_dim_v = (int)(e / (size_t)h);
    d->embed_q = d->embed_out = (int)e;
    d->embed_k = (int)kdim;
    d->embed_v = (int)vdim;
    return ATTN_OK;
}

/* Explicit names: q_proj.weight [h*d_k, E_q], k_proj.weight [g*d_k, E_k],
 * v_proj.weight [g*d_v, E_v], o_proj.weight [E_out, h*d_v] (optional), biases to
 * match (any subset). g = h in the legacy loader. */
static attn_status plan_explicit(ctx *c)
{
    attn_layer_desc *d = &c->plan->desc;
    const attn__st_tensor *qw, *kw, *vw, *ow, *qb, *kb, *vb, *ob;
    size_t qk, eq, krows, ek, v, ev, eout = 0, rows;
    int h, legacy = c->mode == ATTN__PLAN_LEGACY;
    TRY(resolve_heads(c, &h));
    TRY(opt(c, "q_proj.weight", ATTN__R_WQ, ATTN__XF_PLAIN, &qw));
    TRY(opt(c, "k_proj.weight", ATTN__R_WK, ATTN__XF_PLAIN, &kw));
    TRY(opt(c, "v_proj.weight", ATTN__R_WV, ATTN__XF_PLAIN, &vw));
    TRY(opt(c, "o_proj.weight", ATTN__R_WO, ATTN__XF_PLAIN, &ow));
    TRY(opt(c, "q_proj.bias", ATTN__R_BQ, ATTN__XF_PLAIN, &qb));
    TRY(opt(c, "k_proj.bias", ATTN__R_BK, ATTN__XF_PLAIN, &kb));
    TRY(opt(c, "v_proj.bias", ATTN__R_BV, ATTN__XF_PLAIN, &vb));
    TRY(opt(c, "o_proj.bias", ATTN__R_BO, ATTN__XF_PLAIN, &ob));
    TRY(matrix_dims(c, qw, "q_proj.weight", &qk, &eq));
    TRY(matrix_dims(c, kw, "k_proj.weight", &krows, &ek));
    if (legacy) TRY(want_shape(c, kw, qk, (long)ek, "[h*d_k, E_k]", ""));
    TRY(matrix_dims(c, vw, "v_proj.weight", &v, &ev));
    if (ow != NULL) {
        TRY(matrix_dims(c, ow, "o_proj.weight", &eout, &rows));
        if (legacy) TRY(want_shape(c, ow, eout, (long)v, "[E_out, h*d_v]", ""));
    } else if (ob != NULL) {
        return attn__set_error(c->err, ATTN_ERR_MISSING_TENSOR,
                               "tensor '%so_proj.weight' is missing (o_proj.bias needs it)",
                               c->plan->base);
    }
    int g = h;
    if (legacy) {
        TRY(want_shape(c, qb, qk, -1, "[h*d_k]", ""));
        TRY(want_shape(c, kb, qk, -1, "[h*d_k]", ""));
        TRY(want_shape(c, vb, v, -1, "[h*d_v]", ""));
        TRY(want_shape(c, ob, eout, -1, "[E_out]", ""));
        if (qk % (size_t)h != 0) return not_divisible(c, "q_proj.weight rows", qk, h);
        if (v % (size_t)h != 0) return not_divisible(c, "v_proj.weight rows", v, h);
    } else { /* GQA: k rows = g * d_k with g dividing h */
        if (qk % (size_t)h != 0) return not_divisible(c, "q_proj.weight rows", qk, h);
        size_t dk = qk / (size_t)h;
        if (krows % dk != 0 || krows > qk || (size_t)h % (krows / dk) != 0) {
            char got[96];
            fmt_shape(kw, got, sizeof got);
            return attn__set_error(c->err, ATTN_ERR_SHAPE,
                                   "%s is %s: its rows are not g*d_k for a g dividing num_heads %d "
                                   "(d_k %zu from q_proj.weight)",
                                   kw->name, got, h, dk);
        }
        g = (int)(krows / dk);
        if (c->opts->num_kv_heads != 0 && c->opts->num_kv_heads != g)
            return attn__set_error(c->err, ATTN_ERR_SHAPE,
                                   "num_kv_heads = %d, but %s has %zu rows = %d heads of %zu",
                                   c->opts->num_kv_heads, kw->name, krows, g, dk);
        if (v % (size_t)g != 0) return not_divisible(c, "v_proj.weight rows", v, g);
        size_t hdv = (size_t)h * (v / (size_t)g);
        if (hdv > INT_MAX / 4)
            return attn__set_error(c->err, ATTN_ERR_LIMIT, "num_heads * d_v is too large");
        TRY(want_shape(c, ow, eout, (long)hdv, "[E_out, h*d_v]", ""));
        TRY(want_shape(c, qb, qk, -1, "[h*d_k]", ""));
        TRY(want_shape(c, kb, krows, -1, "[g*d_k]", ""));
        TRY(want_shape(c, vb, v, -1, "[g*d_v]", ""));
        TRY(want_shape(c, ob, eout, -1, "[E_out]", ""));
        TRY(check_hidden(c, qw, eq));
    }
    size_t dv = v / (size_t)g;
    d->num_heads = h;
    d->num_kv_heads = g;
    d->head_dim_k = (int)(qk / (size_t)h);
    d->head_dim_v = (int)dv;
    d->embed_q = (int)eq;
    d->embed_k = (int)ek;
    d->embed_v = (int)ev;
    d->embed_out = ow ? (int)eout : (int)((size_t)h * dv);
    return ATTN_OK;
}

static attn_status plan_mha_or_explicit(ctx *c)
{
    int pytorch = 0;
    TRY(classify_names(c, &pytorch));
    if (c->mode != ATTN__PLAN_LEGACY && pytorch != (c->plan->family == ATTN_FAMILY_MHA))
        return attn__set_error(c->err, ATTN_ERR_FORMAT,
                               "layer '%.80s' has %s names, not %s ones: choose format=%s", c->plan->base,
                               pytorch ? "MultiheadAttention" : "explicit q_proj.weight",
                               attn_family_name(c->plan->family), pytorch ? "mha" : "explicit");
    c->plan->family = pytorch ? ATTN_FAMILY_MHA : ATTN_FAMILY_EXPLICIT;
    return pytorch ? plan_mha(c) : plan_explicit(c);
}

/* ---- Llama, Mistral, Qwen2 */

/* Describes where the dims came from, for shape messages. */
static void dims_note(const ctx *c, int e, int h, int g, int dh, char *buf, size_t cap)
{
    int by_opts = c->opts->num_heads > 0 || c->opts->num_kv_heads > 0;
    snprintf(buf, cap, " (%s: hidden %d, heads %d, kv heads %d, head_dim %d)",
             c->cfg->present ? (by_opts ? "config.json and options" : "config.json")
                             : (by_opts ? "tensors and options" : "from the tensors"),
             e, h, g, dh);
}

static attn_status plan_llama(ctx *c)
{
    static const char *const known[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight",
                                        "o_proj.weight", "q_proj.bias", "k_proj.bias",
                                        "v_proj.bias", "o_proj.bias", "rotary_emb.inv_freq", NULL};
    attn_layer_desc *d = &c->plan->desc;
    const attn__st_tensor *qw, *kw, *vw, *ow, *qkv_b[3], *ob;
    size_t rows, cols, krows, kcols;
    TRY(check_known(c, known, "{q,k,v,o}_proj.{weight,bias}"));
    TRY(need(c, "q_proj.weight", ATTN__R_WQ, ATTN__XF_PLAIN, &qw));
    TRY(need(c, "k_proj.weight", ATTN__R_WK, ATTN__XF_PLAIN, &kw));
    TRY(need(c, "v_proj.weight", ATTN__R_WV, ATTN__XF_PLAIN, &vw));
    TRY(need(c, "o_proj.weight", ATTN__R_WO, ATTN__XF_PLAIN, &ow));
    TRY(opt(c, "q_proj.bias", ATTN__R_BQ, ATTN__XF_PLAIN, &qkv_b[0]));
    TRY(opt(c, "k_proj.bias", ATTN__R_BK, ATTN__XF_PLAIN, &qkv_b[1]));
    TRY(opt(c, "v_proj.bias", ATTN__R_BV, ATTN__XF_PLAIN, &qkv_b[2]));
    TRY(opt(c, "o_proj.bias", ATTN__R_BO, ATTN__XF_PLAIN, &ob));
    static const char *const bnames[] = {"q_proj.bias", "k_proj.bias", "v_proj.bias"};
    TRY(bias_set(c, bnames, qkv_b, 3, "q/k/v biases come together (Qwen2) or not at all"));
    TRY(matrix_dims(c, qw, "q_proj.weight", &rows, &cols));
    TRY(matrix_dims(c, kw, "k_proj.weight", &krows, &kcols));

    const attn__hfcfg *cfg = c->cfg;
    int e = cfg->hidden_size ? cfg->hidden_size : (int)cols, h, g, dh;
    TRY(resolve_heads(c, &h));
    if (cfg->head_dim) {
        dh = cfg->head_dim;
    } else if (cfg->hidden_size) {
        if (e % h != 0)
            return attn__set_error(c->err, ATTN_ERR_SHAPE,
                                   "config.json: hidden_size %d is not divisible by "
                                   "num_attention_heads %d (and there is no head_dim)",
                                   e, h);
        dh = e / h;
    } else {
        if (rows % (size_t)h != 0) return not_divisible(c, "q_proj.weight rows", rows, h);
        dh = (int)(rows / (size_t)h);
    }
    g = c->opts->num_kv_heads;
    if (g < 0)
        return attn__set_error(c->err, ATTN_ERR_INVALID_ARG, "num_kv_heads = %d must be >= 0", g);
    if (g == 0) g = cfg->num_kv_heads;
    if (g == 0) g = cfg->present ? h : (int)(krows / (size_t)dh);
    if (g < 1 || h % g != 0)
        return attn__set_error(c->err, ATTN_ERR_SHAPE,
                               "num_key_value_heads %d does not divide num_attention_heads %d", g,
                               h);
    if ((long long)h * dh > INT_MAX / 4)
        return attn__set_error(c->err, ATTN_ERR_LIMIT, "num_heads * head_dim is too large");
    char why[128];
    dims_note(c, e, h, g, dh, why, sizeof why);
    size_t qd = (size_t)h * (size_t)dh, kd = (size_t)g * (size_t)dh;
    TRY(want_shape(c, qw, qd, e, "[h*d, E]", why));
    TRY(want_shape(c, kw, kd, e, "[g*d, E]", why));
    TRY(want_shape(c, vw, kd, e, "[g*d, E]", why));
    TRY(want_shape(c, ow, (size_t)e, (long)qd, "[E, h*d]", why));
    TRY(want_shape(c, qkv_b[0], qd, -1, "[h*d]", why));
    TRY(want_shape(c, qkv_b[1], kd, -1, "[g*d]", why));
    TRY(want_shape(c, qkv_b[2], kd, -1, "[g*d]", why));
    TRY(want_shape(c, ob, (size_t)e, -1, "[E]", why));
    TRY(attn__hfcfg_rope(cfg, dh, &d->rope, c->err));
    d->num_heads = h;
    d->num_kv_heads = g;
    d->head_dim_k = d->head_dim_v = dh;
    d->embed_q = d->embed_k = d->embed_v = d->embed_out = e;
    return ATTN_OK;
}

/* ---- BERT */

static attn_status plan_bert(ctx *c)
{
    static const char *const known[] = {
        "self.query.weight", "self.query.bias", "self.key.weight", "self.key.bias",
        "self.value.weight", "self.value.bias", "output.dense.weight", "output.dense.bias",
        "output.LayerNorm.weight", "output.LayerNorm.bias", NULL};
    const char *pe = c->cfg->position_embedding_type;
    if (pe[0] != '\0' && strcmp(pe, "absolute") != 0)
        return attn__set_error(c->err, ATTN_ERR_UNSUPPORTED,
                               "config.json position_embedding_type \"%.31s\" changes the attention "
                               "scores; attnd serves \"absolute\" only",
                               pe);
    attn_layer_desc *d = &c->plan->desc;
    const attn__st_tensor *w[4], *b[4];
    size_t rows, cols;
    int h;
    TRY(check_known(c, known, "self.{query,key,value}.* and output.dense.*"));
    TRY(need(c, "self.query.weight", ATTN__R_WQ, ATTN__XF_PLAIN, &w[0]));
    TRY(need(c, "self.key.weight", ATTN__R_WK, ATTN__XF_PLAIN, &w[1]));
    TRY(need(c, "self.value.weight", ATTN__R_WV, ATTN__XF_PLAIN, &w[2]));
    TRY(need(c, "output.dense.weight", ATTN__R_WO, ATTN__XF_PLAIN, &w[3]));
    TRY(opt(c, "self.query.bias", ATTN__R_BQ, ATTN__XF_PLAIN, &b[0]));
    TRY(opt(c, "self.key.bias", ATTN__R_BK, ATTN__XF_PLAIN, &b[1]));
    TRY(opt(c, "self.value.bias", ATTN__R_BV, ATTN__XF_PLAIN, &b[2]));
    TRY(opt(c, "output.dense.bias", ATTN__R_BO, ATTN__XF_PLAIN, &b[3]));
    static const char *const bnames[] = {"self.query.bias", "self.key.bias", "self.value.bias",
                                         "output.dense.bias"};
    TRY(bias_set(c, bnames, b, 4, "BERT has all four biases"));
    TRY(matrix_dims(c, w[0], "self.query.weight", &rows, &cols));
    int e = c->cfg->hidden_size ? c->cfg->hidden_size : (int)cols;
    TRY(resolve_heads(c, &h));
    if (e % h != 0)
        return attn__set_error(c->err, ATTN_ERR_SHAPE,
                               "hidden_size %d is not divisible by num_attention_heads %d", e, h);
    TRY(no_gqa(c, h));
    char why[128];
    dims_note(c, e, h, h, e / h, why, sizeof why);
    for (int i = 0; i < 4; i++) {
        TRY(want_shape(c, w[i], (size_t)e, e, "[E, E]", why));
        TRY(want_shape(c, b[i], (size_t)e, -1, "[E]", why));
    }
    d->num_heads = h;
    d->head_dim_k = d->head_dim_v = e / h;
    d->embed_q = d->embed_k = d->embed_v = d->embed_out = e;
    return ATTN_OK;
}

/* ---- GPT-2 */

static attn_status plan_gpt2(ctx *c)
{
    static const char *const known[] = {"c_attn.weight", "c_attn.bias", "c_proj.weight",
                                        "c_proj.bias", "bias", "masked_bias", NULL};
    if (!c->cfg->scale_attn_weights || c->cfg->scale_attn_by_inverse_layer_idx)
        return attn__set_error(c->err, ATTN_ERR_UNSUPPORTED,
                               "config.json: %s changes the attention scale; attnd scales by "
                               "1/sqrt(head_dim) only",
                               c->cfg->scale_attn_weights ? "scale_attn_by_inverse_layer_idx"
                                                          : "scale_attn_weights false");
    attn_layer_desc *d = &c->plan->desc;
    const attn__st_tensor *aw, *ab, *pw, *pb;
    size_t rows, cols;
    int h;
    TRY(check_known(c, known, "c_attn.* and c_proj.*"));
    TRY(need(c, "c_attn.weight", ATTN__R_WQ, ATTN__XF_SPLIT3_T, &aw));
    TRY(need(c, "c_proj.weight", ATTN__R_WO, ATTN__XF_T, &pw));
    TRY(opt(c, "c_attn.bias", ATTN__R_BQ, ATTN__XF_SPLIT3, &ab));
    TRY(opt(c, "c_proj.bias", ATTN__R_BO, ATTN__XF_PLAIN, &pb));
    static const char *const bnames[] = {"c_attn.bias", "c_proj.bias"};
    const attn__st_tensor *b[] = {ab, pb};
    TRY(bias_set(c, bnames, b, 2, "GPT-2 has both biases"));
    TRY(matrix_dims(c, aw, "c_attn.weight", &rows, &cols));
    int e = c->cfg->hidden_size ? c->cfg->hidden_size : (int)rows;
    TRY(resolve_heads(c, &h));
    if (e % h != 0)
        return attn__set_error(c->err, ATTN_ERR_SHAPE, "n_embd %d is not divisible by n_head %d", e,
                               h);
    TRY(no_gqa(c, h));
    char why[128];
    dims_note(c, e, h, h, e / h, why, sizeof why);
    TRY(want_shape(c, aw, (size_t)e, 3L * e, "Conv1D [E, 3*E]", why));
    TRY(want_shape(c, ab, 3 * (size_t)e, -1, "[3*E]", why));
    TRY(want_shape(c, pw, (size_t)e, e, "Conv1D [E, E]", why));
    TRY(want_shape(c, pb, (size_t)e, -1, "[E]", why));
    d->num_heads = h;
    d->head_dim_k = d->head_dim_v = e / h;
    d->embed_q = d->embed_k = d->embed_v = d->embed_out = e;
    return ATTN_OK;
}

/* ------------------------------------------------------------ entry points */

static attn_status select_layer(ctx *c, const layer_list *l)
{
    attn__plan *p = c->plan;
    int want = c->mode == ATTN__PLAN_LOAD ? c->opts->layer : -1;
    char have[96];
    describe_layers(l, have, sizeof have);
    const layer_ref *pick = NULL;
    if (want < -1)
        return attn__set_error(c->err, ATTN_ERR_INVALID_ARG,
                               "layer = %d; pass layer=N (N >= 0), or -1 for the only one", want);
    if (c->mode == ATTN__PLAN_INSPECT) {
        pick = &l->v[0];
    } else if (want == -1) {
        if (l->n > 1)
            return attn__set_error(c->err, ATTN_ERR_INVALID_ARG,
                                   "the checkpoint has %s: choose one with layer=N", have);
        pick = &l->v[0];
    } else {
        for (int i = 0; i < l->n && pick == NULL; i++)
            if (l->v[i].index == want) pick = &l->v[i];
        if (pick == NULL)
            return attn__set_error(c->err, ATTN_ERR_INVALID_ARG,
                                   "layer %d not found: the checkpoint has %s", want, have);
    }
    p->layer = (int)pick->index;
    p->n_layers = l->n;
    memcpy(p->base, pick->base, sizeof p->base);
    return ATTN_OK;
}

attn_status attn__family_plan(const attn__tsrc *src, const attn__hfcfg *cfg,
                              const attn_load_options *opts, attn__plan_mode mode,
                              attn__plan *plan, attn_error *err)
{
    memset(plan, 0, sizeof *plan);
    ctx c = {src, cfg, opts, mode, plan, err};
    if (mode == ATTN__PLAN_LEGACY) { /* a bare layer file: every tensor is the layer's */
        plan->n_layers = 1;
        return plan_mha_or_explicit(&c);
    }
    /* "self_attn" means "self_attn.": prefixes end at a dot */
    char prefix[ATTN__NAME_MAX / 2];
    size_t plen = opts->prefix ? strlen(opts->prefix) : 0;
    if (plen + 2 > sizeof prefix)
        return attn__set_error(err, ATTN_ERR_INVALID_ARG, "prefix '%.40s...' is too long", opts->prefix);
    if (plen) memcpy(prefix, opts->prefix, plen);
    if (plen && prefix[plen - 1] != '.') prefix[plen++] = '.';
    prefix[plen] = '\0';
    layer_list l = {0};
    attn_status st = resolve_family(src, cfg, opts, prefix, &plan->family, &l, err);
    if (st == ATTN_OK) st = select_layer(&c, &l);
    free(l.v);
    if (st != ATTN_OK) return st;
    switch (plan->family) {
    case ATTN_FAMILY_MHA:
    case ATTN_FAMILY_EXPLICIT: return plan_mha_or_explicit(&c);
    case ATTN_FAMILY_LLAMA: return plan_llama(&c);
    case ATTN_FAMILY_BERT: return plan_bert(&c);
    case ATTN_FAMILY_GPT2: return plan_gpt2(&c);
    case ATTN_FAMILY_AUTO: break;
    }
    return attn__set_error(err, ATTN_ERR_INTERNAL, "family unresolved");
}

/* (rows, cols) block of columns [c0, c0 + n) of m (rows_m, cols_m), transposed:
 * out is (n, rows_m) with out[j][i] = m[i][c0 + j]. */
static float *transpose_cols(const float *m, size_t rows_m, size_t cols_m, size_t c0, size_t n)
{
    float *out = malloc((n * rows_m != 0 ? n * rows_m : 1) * sizeof *out);
    if (out == NULL) return NULL;
    for (size_t i = 0; i < rows_m; i++)
        for (size_t j = 0; j < n; j++) out[j * rows_m + i] = m[i * cols_m + c0 + j];
    return out;
}

attn_status attn__plan_assemble(const attn__plan *plan, float *const *f, attn_layer_desc *d,
                                float **aux, attn_error *err)
{
    float *role[ATTN__N_ROLES] = {0};
    *d = plan->desc;
    for (int i = 0; i < ATTN__N_ROLES; i++) aux[i] = NULL;
    for (int i = 0; i < plan->n_src; i++) {
        const attn__src *s = &plan->src[i];
        const attn__st_tensor *t = s->t;
        size_t rows = t->ndim >= 1 ? t->shape[0] : 1, cols = t->ndim == 2 ? t->shape[1] : 1;
        switch (s->xf) {
        case ATTN__XF_PLAIN: role[s->role] = f[i]; break;
        case ATTN__XF_SPLIT3:
            for (int k = 0; k < 3; k++) role[s->role + k] = f[i] + (size_t)k * (t->numel / 3);
            break;
        case ATTN__XF_T:
            aux[s->role] = role[s->role] = transpose_cols(f[i], rows, cols, 0, cols);
            if (role[s->role] == NULL) return attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
            break;
        case ATTN__XF_SPLIT3_T:
            for (int k = 0; k < 3; k++) {
                size_t n = cols / 3;
                aux[s->role + k] = role[s->role + k] = transpose_cols(f[i], rows, cols, k * n, n);
                if (role[s->role + k] == NULL)
                    return attn__set_error(err, ATTN_ERR_NOMEM, "out of memory");
            }
            break;
        }
    }
    d->w_q = role[ATTN__R_WQ];
    d->w_k = role[ATTN__R_WK];
    d->w_v = role[ATTN__R_WV];
    d->w_o = role[ATTN__R_WO];
    d->b_q = role[ATTN__R_BQ];
    d->b_k = role[ATTN__R_BK];
    d->b_v = role[ATTN__R_BV];
    d->b_o = role[ATTN__R_BO];
    return ATTN_OK;
}
