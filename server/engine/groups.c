/* groups.c — the registry's table of model groups (models.h): the layer models
 * a --model NAME=DIR,layers=... spec expanded into, found by the group's name,
 * acquired together for a sequence session, described for GET /v1/models/NAME;
 * and the facts a saved session is checked against (KV bytes of a position, a
 * fingerprint of a model's weights).
 */
#include "engine/models.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsonload.h"

/* Builds ms->groups from cfg->groups (after the configured models loaded).
 * Returns 0, or -1 with err (a member not among the models, no memory). */
int attnd_models_groups_build(attnd_models *ms, const attnd_config *cfg, char *err, size_t errlen)
{
    if (cfg->n_groups == 0)
        return 0;
    ms->groups = calloc((size_t)cfg->n_groups, sizeof *ms->groups);
    if (!ms->groups) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int g = 0; g < cfg->n_groups; g++) {
        const attnd_model_group_spec *gs = &cfg->groups[g];
        attnd_model_group *mg = &ms->groups[g];
        ms->n_groups = g + 1;
        snprintf(mg->name, sizeof mg->name, "%s", gs->name);
        mg->slots = malloc((size_t)gs->n_layers * sizeof *mg->slots);
        mg->checkpoint_layers = malloc((size_t)gs->n_layers * sizeof *mg->checkpoint_layers);
        if (!mg->slots || !mg->checkpoint_layers) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (int l = 0; l < gs->n_layers; l++) {
            char name[96];
            snprintf(name, sizeof name, "%s.%d", gs->name, gs->layers[l]);
            int slot = -1;
            for (int i = 0; i < ms->n_config && slot < 0; i++)
                if (strcmp(ms->slots[i].spec.name, name) == 0)
                    slot = i;
            if (slot < 0) {
                snprintf(err, errlen, "model group %s: its layer model %s is not loaded", gs->name,
                         name);
                return -1;
            }
            mg->slots[l] = slot;
            mg->checkpoint_layers[l] = gs->layers[l];
            mg->n_layers = l + 1;
        }
    }
    return 0;
}

void attnd_models_groups_free(attnd_models *ms)
{
    for (int g = 0; g < ms->n_groups; g++) {
        free(ms->groups[g].slots);
        free(ms->groups[g].checkpoint_layers);
    }
    free(ms->groups);
    ms->groups = NULL;
    ms->n_groups = 0;
}

const attnd_model_group *attnd_models_group(attnd_models *ms, const char *name, size_t len)
{
    for (int g = 0; g < ms->n_groups; g++)
        if (strlen(ms->groups[g].name) == len && memcmp(ms->groups[g].name, name, len) == 0)
            return &ms->groups[g];
    return NULL;
}

int attnd_models_group_acquire(attnd_models *ms, const attnd_model_group *g, attnd_model **out,
                               int *missing)
{
    for (int l = 0; l < g->n_layers; l++) {
        out[l] = attnd_models_acquire(ms, g->slots[l]);
        if (!out[l]) {
            for (int k = 0; k < l; k++)
                attnd_model_release(out[k]);
            if (missing)
                *missing = l;
            return -1;
        }
    }
    return 0;
}

size_t attnd_model_kv_row_bytes(const attnd_model *m)
{
    size_t kb = 0, vb = 0;
    if (attn_kv_block_bytes(m->layer, m->kv_dtype, 16, &kb, &vb, NULL) != ATTN_OK)
        return 0;
    return (kb + vb) / 16;
}

static const char *dtype_name(attn_kv_dtype d)
{
    return d == ATTN_KV_F16 ? "f16" : d == ATTN_KV_BF16 ? "bf16" : d == ATTN_KV_INT8 ? "int8" : "f32";
}

char *attnd_models_group_info_json(attnd_models *ms, const attnd_model_group *g, size_t *len)
{
    attnd_model **m = calloc((size_t)g->n_layers, sizeof *m);
    if (!m || attnd_models_group_acquire(ms, g, m, NULL) != 0) {
        free(m);
        return NULL;
    }
    json_t *layers = json_array();
    size_t per_pos = 0;
    for (int l = 0; layers && l < g->n_layers; l++) {
        const attn_layer_info *in = &m[l]->info;
        size_t row = attnd_model_kv_row_bytes(m[l]);
        per_pos += row;
        json_t *o = json_pack("{s:i, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:I, s:i}",
                              "layer", l, "model", m[l]->name, "checkpoint_layer",
                              g->checkpoint_layers[l], "version", m[l]->version, "num_heads",
                              in->num_heads, "num_kv_heads", attnd_kv_heads(in), "head_dim_k",
                              in->head_dim_k, "head_dim_v", in->head_dim_v, "embed_q", in->embed_q,
                              "kv_dtype", dtype_name(m[l]->kv_dtype), "kv_bytes_per_position",
                              (json_int_t)row, "embed_out", in->embed_out);
        if (!o || json_array_append_new(layers, o) != 0) {
            json_decref(layers);
            layers = NULL;
        }
    }
    json_t *root = layers ? json_pack("{s:s, s:s, s:i, s:I, s:o}", "name", g->name, "kind", "group",
                                      "num_layers", g->n_layers, "kv_bytes_per_position",
                                      (json_int_t)per_pos, "layers", layers)
                          : NULL;
    for (int l = 0; l < g->n_layers; l++)
        attnd_model_release(m[l]);
    free(m);
    if (!root)
        return NULL;
    char *s = attnd_json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (s)
        *len = strlen(s);
    return s;
}

/* FNV-1a over n bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* The library does not hand out its weights; what they compute stands for
 * them: one small self-attention forward over a fixed input (deterministic for
 * a given build and machine) is hashed bit for bit, with the shape and the kv
 * dtype. A different checkpoint changes it; so may another CPU's BLAS kernels,
 * and then saved sessions are dropped, never trusted. 0 when it cannot run
 * (0 matches nothing: persist.c drops a session whose hash is 0). */
uint64_t attnd_model_weights_hash(const attnd_model *m)
{
    const attn_layer_info *in = &m->info;
    enum { T = 3 };
    size_t nq = (size_t)T * (size_t)in->embed_q, nk = (size_t)T * (size_t)in->embed_k,
           nv = (size_t)T * (size_t)in->embed_v, no = (size_t)T * (size_t)in->embed_out;
    float *buf = malloc((nq + nk + nv + no) * sizeof *buf);
    if (!buf)
        return 0;
    float *q = buf, *k = q + nq, *v = k + nk, *out = v + nv;
    uint32_t x = 0x9e3779b9u;
    for (size_t i = 0; i < nq + nk + nv; i++) { /* xorshift: small values in (-1, 1) */
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = (float)((double)(x >> 8) / (double)(1u << 24) * 2.0 - 1.0);
    }
    const int self = in->embed_k == in->embed_q && in->embed_v == in->embed_q;
    attn_seq s = {.t = T, .s = T, .query = q, .key = self ? NULL : k, .value = self ? NULL : v,
                  .output = out, .is_causal = self};
    attn_error ae;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    if (attn_forward(m->layer, &s, 1, NULL, NULL, &ae) != ATTN_OK) {
        free(buf);
        return 0;
    }
    h = fnv(h, out, no * sizeof *out);
    int shape[] = {in->num_heads, attnd_kv_heads(in), in->head_dim_k, in->head_dim_v, in->embed_q,
                   in->embed_k, in->embed_v, in->embed_out, (int)m->kv_dtype, (int)in->rope.style};
    h = fnv(h, shape, sizeof shape);
    h = fnv(h, &in->param_count, sizeof in->param_count);
    free(buf);
    return h ? h : 1;
}
