/* family.h — library-internal: where each checkpoint family keeps one attention
 * layer's tensors and how they become an attn_layer_desc. Given the names of a
 * checkpoint (through attn__tsrc, which hides files and shards), a config.json
 * and the load options, attn__family_plan decides the family, lists the layers,
 * picks one, finds and checks its tensors (names, shapes, bias sets, heads, GQA,
 * RoPE) and returns a plan: which tensors to read and what each becomes. It reads
 * no tensor data; attn__plan_assemble turns the read tensors into weights.
 *
 * Families (attn_family) and the names of layer i, after opts->prefix:
 *   MHA       P + in_proj_weight [3E,E] | {q,k,v}_proj_weight, in_proj_bias [3E],
 *             out_proj.weight [E,E], out_proj.bias [E]; P is found (the only
 *             prefix holding in_proj_weight/q_proj_weight, or one of several that
 *             differ by a layer number: "layers.{i}.self_attn.")
 *   EXPLICIT  P + {q,k,v,o}_proj.{weight,bias} (o_proj optional); GQA when k rows
 *             are a divisor of q rows' head count
 *   LLAMA     [model.]layers.{i}.self_attn.{q,k,v,o}_proj.{weight,bias}
 *   BERT      [bert.]encoder.layer.{i}.attention.{self.{query,key,value},output.dense}.*
 *   GPT2      [transformer.]h.{i}.attn.{c_attn,c_proj}.{weight,bias} (Conv1D [in,out])
 * A bias set is all-or-none where the family has one: MHA (in_proj_bias with
 * out_proj.bias), LLAMA (q/k/v), BERT (all four), GPT2 (both); a partial set is
 * refused naming the missing tensor. Other tensors under the layer's attention
 * prefix that the family does not know are refused (a typo would drop a bias).
 */
#ifndef ATTN_FAMILY_H
#define ATTN_FAMILY_H

#include <stddef.h>

#include "attn.h"
#include "hfconfig.h"
#include "safetensors.h"

#define ATTN__NAME_MAX 256 /* longest tensor name handled, NUL included */

/* The tensors of a checkpoint, by name, wherever they are stored. */
typedef struct attn__tsrc {
    void *ctx;
    size_t n_names;
    const char *(*name)(void *ctx, size_t i); /* i < n_names; borrowed */
    /* Looks name up: ATTN_OK with *t the tensor (borrowed, header only) or NULL
     * when the checkpoint has no such name; an error when the file holding it
     * cannot be opened or does not hold it (sharded checkpoints). */
    attn_status (*find)(void *ctx, const char *name, const attn__st_tensor **t, attn_error *err);
    /* __metadata__ value of the first file, or NULL. */
    const char *(*meta)(void *ctx, const char *key);
} attn__tsrc;

/* What a plan entry's tensor becomes. Roles index the desc's eight weights. */
enum { ATTN__R_WQ, ATTN__R_WK, ATTN__R_WV, ATTN__R_WO,
       ATTN__R_BQ, ATTN__R_BK, ATTN__R_BV, ATTN__R_BO, ATTN__N_ROLES };

typedef enum attn__xf {
    ATTN__XF_PLAIN,   /* the tensor is the role's weight as it is                  */
    ATTN__XF_SPLIT3,  /* rows (or elements) in three equal parts: role, +1, +2     */
    ATTN__XF_T,       /* Conv1D [in, out]: transposed to (out, in)                 */
    ATTN__XF_SPLIT3_T /* Conv1D [E, 3E]: columns in three parts, each transposed   */
} attn__xf;

typedef struct attn__src {
    char name[ATTN__NAME_MAX];
    const attn__st_tensor *t; /* borrowed from the tsrc */
    int role;
    attn__xf xf;
} attn__src;

typedef enum attn__plan_mode {
    ATTN__PLAN_LOAD,    /* attn_layer_load: opts->layer selects                      */
    ATTN__PLAN_INSPECT, /* attn_checkpoint_inspect: the first layer, opts->layer ignored */
    ATTN__PLAN_LEGACY   /* attn_layer_load_safetensors: a bare MHA/explicit layer file,
                           every tensor must be known, biases may be any subset      */
} attn__plan_mode;

typedef struct attn__plan {
    attn_family family;      /* resolved */
    int n_layers;            /* layers of that family found */
    int layer;               /* the chosen layer's number */
    char base[ATTN__NAME_MAX]; /* its tensors' common prefix */
    attn_layer_desc desc;    /* dims, num_kv_heads, rope; weight pointers NULL */
    int n_src;
    attn__src src[ATTN__N_ROLES];
} attn__plan;

/* Fills *plan as described above. opts must not be NULL (use a zeroed struct
 * with layer = -1 for defaults); in LEGACY mode only opts->num_heads is read
 * (0 = __metadata__.num_heads). cfg may be a zeroed (absent) config.
 * Errors name the tensor, the config key or the option to change. */
attn_status attn__family_plan(const attn__tsrc *src, const attn__hfcfg *cfg,
                              const attn_load_options *opts, attn__plan_mode mode,
                              attn__plan *plan, attn_error *err);

/* Points d (a copy of plan->desc) at the weights: f[i] is the float32 content of
 * plan->src[i]. Transposed copies are allocated into aux[0..ATTN__N_ROLES) (NULL
 * when unused; the caller frees them after attn_layer_create). ATTN_ERR_NOMEM
 * on allocation failure (aux entries made so far are still the caller's). */
attn_status attn__plan_assemble(const attn__plan *plan, float *const *f, attn_layer_desc *d,
                                float **aux, attn_error *err);

#endif
