/* attn.h — the public API of libattn: one multi-head attention layer, computed
 * exactly as PyTorch's torch.nn.MultiheadAttention computes it, on OpenBLAS.
 *
 * This is the only header a user of the library includes. Every public symbol
 * starts with attn_ / ATTN_. Types are opaque where they own memory; every
 * function says who allocates and who frees. Errors are values: a status code
 * plus, when the caller passes an attn_error, a message naming the problem.
 * Nothing here calls exit() or abort(), and there is no global state.
 *
 * Shapes use the names of the maths:
 *   h      number of (query) heads    g    number of key/value heads (GQA/MQA:
 *                                          g divides h; query head i reads KV
 *                                          head i / (h / g); g = h is plain MHA)
 *          d_k  per-head query/key width
 *   d_v    per-head value width       E_q  query embedding width
 *   E_k    key embedding width        E_v  value embedding width
 *   E_out  output width (rows of W_O, or h*d_v when the layer has no W_O)
 *   T      query length of one sequence, S its key length
 * All matrices are dense, row-major float32.
 */

/* Example: causal self-attention of T tokens through the demo layer (E = 64).
 * tests/unit/test_header_example.c compiles and runs this code verbatim and
 * checks what it computes, so it stays true: change the two together.
 *
 *   #include <stdio.h>
 *   #include "attn.h" // link build/libattn.a -lopenblas -ljansson -lm -pthread
 *
 *   // x: (T, 64) query rows, out: (T, 64). Returns 0, or -1 with the error printed.
 *   int demo_self_attention(const float *x, int T, float *out)
 *   {
 *       attn_layer *layer = NULL;
 *       attn_workspace *ws = NULL; // one per thread, reused across calls
 *       attn_error err;
 *       attn_status st = attn_layer_load_safetensors("config/demo.safetensors", 0, &layer, &err);
 *       if (st == ATTN_OK)
 *           st = attn_workspace_create(NULL, &ws, &err);
 *       if (st == ATTN_OK) {
 *           attn_seq seq = {.t = T, .s = T, .query = x, .is_causal = 1, .output = out};
 *           st = attn_forward(layer, &seq, 1, ws, NULL, &err);
 *       }
 *       if (st != ATTN_OK)
 *           fprintf(stderr, "%s: %s\n", attn_status_name(st), err.message);
 *       attn_workspace_free(ws);
 *       attn_layer_free(layer);
 *       return st == ATTN_OK ? 0 : -1;
 *   }
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_VERSION_STRING "0.2.0"

/* Status codes. Append-only: never renumber. */
typedef enum attn_status {
    ATTN_OK = 0,
    ATTN_ERR_INVALID_ARG = 1,    /* NULL where a pointer is needed, a bad option   */
    ATTN_ERR_SHAPE = 2,          /* dimensions disagree with each other / layer    */
    ATTN_ERR_NONFINITE = 3,      /* NaN or infinity in an input                    */
    ATTN_ERR_NOMEM = 4,          /* allocation failed                              */
    ATTN_ERR_IO = 5,             /* a file could not be opened or read             */
    ATTN_ERR_FORMAT = 6,         /* malformed safetensors file                     */
    ATTN_ERR_MISSING_TENSOR = 7, /* a tensor the layer needs is absent             */
    ATTN_ERR_DTYPE = 8,          /* unsupported dtype or size that disagrees       */
    ATTN_ERR_LIMIT = 9,          /* a size limit would be exceeded (overflow)      */
    ATTN_ERR_INTERNAL = 10,      /* a bug: please report                           */
    ATTN_ERR_UNSUPPORTED = 11    /* a valid checkpoint or request this library does
                                    not serve (rope type, pickle file, cross-attention
                                    over a rotary layer); the message says which    */
} attn_status;

/* Returns a static, never-NULL description of a status code ("shape mismatch"). */
const char *attn_strerror(attn_status status);

/* Returns the enumerator's name as a static, never-NULL string: "ATTN_OK",
 * "ATTN_ERR_SHAPE", ... for every status above, and "ATTN_UNKNOWN" (never the
 * name of a status) for a value outside the enum. For logs and test output. */
const char *attn_status_name(attn_status status);

/* Error detail. Functions taking an attn_error* fill it on failure when it is
 * not NULL (code + a message naming the field/tensor/offset that is wrong),
 * and leave it untouched on success. */
#define ATTN_ERROR_MESSAGE_MAX 256
typedef struct attn_error {
    attn_status code;
    char message[ATTN_ERROR_MESSAGE_MAX];
} attn_error;

/* ---------------------------------------------------------------- layers */

typedef struct attn_layer attn_layer; /* opaque, immutable once built */

/* Rotary position embedding (RoPE), applied to each head's queries and keys
 * after the projections (and before keys enter a KV cache), at the sequence's
 * integer positions (attn_seq.position_ids). Computed as Hugging Face does:
 * inv_freq[i] = 1 / theta^(2i / rotary_dim) in float32, then scaled; the angle
 * of position p is p * inv_freq[i]. Zero-initialised = no rotary embedding. */
typedef enum attn_rope_style {
    ATTN_ROPE_NONE = 0,
    ATTN_ROPE_HALF = 1,        /* HF rotate_half: dims i and i + rotary_dim/2 pair up   */
    ATTN_ROPE_INTERLEAVED = 2  /* GPT-J / original Meta layout: dims 2i and 2i+1 pair up */
} attn_rope_style;

typedef enum attn_rope_scaling {
    ATTN_ROPE_SCALING_NONE = 0,   /* HF "default"                                   */
    ATTN_ROPE_SCALING_LINEAR = 1, /* HF "linear": inv_freq / factor                 */
    ATTN_ROPE_SCALING_LLAMA3 = 2  /* HF "llama3": low/high-frequency bands (below)   */
} attn_rope_scaling;

typedef struct attn_rope {
    attn_rope_style style;      /* NONE: the layer has no rotary embedding          */
    double theta;               /* base (rope_theta), > 0; 0 = 10000                 */
    int rotary_dim;             /* leading dims of each head that rotate: even,
                                   2..d_k; 0 = d_k (HF: head_dim *
                                   partial_rotary_factor, floored to an int)        */
    attn_rope_scaling scaling;
    double factor;              /* LINEAR, LLAMA3: in [1e-3, 1e6]                    */
    double low_freq_factor;     /* LLAMA3: in [1e-3, 1e6]                            */
    double high_freq_factor;    /* LLAMA3: in [1e-3, 1e6], > low_freq_factor          */
    int original_max_position;  /* LLAMA3: original_max_position_embeddings, 1..2^24 */
    /* attn_layer_create also refuses a rope whose inverse frequencies are not
     * all finite float32 > 0 (e.g. theta 1e-45), naming theta or factor. */
} attn_rope;

/* How a layer keeps its projection matrices W_Q, W_K, W_V and W_O (biases,
 * being tiny, are always float32). Append-only.
 *   F32   4 bytes a weight: what every path computes with.
 *   F16   IEEE binary16 / BF16 bfloat16, 2 bytes a weight: half the memory.
 *         Projections of at most 16 rows in all (decode steps) read the
 *         2-byte weights directly, widened to float32 in registers (AVX2 +
 *         F16C when the CPU has them, portable C otherwise); longer ones widen
 *         a tile of W (about 1 MiB of float32) at a time into the workspace's
 *         scratch and run the same GEMM on it. Widening is exact, so the
 *         results are those of a float32 layer holding the widened values:
 *         bit for bit in the few-row path (same accumulation order), to float
 *         rounding (~1e-6 relative; in practice equal) in the GEMM path.
 * DEFAULT means float32 in attn_layer_desc (a layer built from floats), and
 * "as the checkpoint stores them" in attn_load_options (BF16 or F16 when every
 * attention tensor of the layer is stored so, F32 for F32 or mixed files). */
typedef enum attn_weight_dtype {
    ATTN_WDTYPE_DEFAULT = 0,
    ATTN_WDTYPE_F32 = 1,
    ATTN_WDTYPE_F16 = 2,
    ATTN_WDTYPE_BF16 = 3
} attn_weight_dtype;

/* "default", "f32", "f16", "bf16"; "unknown" otherwise. */
const char *attn_weight_dtype_name(attn_weight_dtype dtype);

/* Weights of a layer, as the caller hands them to attn_layer_create.
 * Pointers are borrowed for the duration of the call only (the layer copies).
 * A NULL bias means "no bias"; a NULL w_o means "no output projection"
 * (then E_out = h*d_v). */
typedef struct attn_layer_desc {
    int num_heads;  /* h   >= 1 */
    int head_dim_k; /* d_k >= 1 (need not be E_q / h) */
    int head_dim_v; /* d_v >= 1 */
    int embed_q;    /* E_q >= 1 */
    int embed_k;    /* E_k >= 1 */
    int embed_v;    /* E_v >= 1 */
    int embed_out;  /* E_out >= 1; ignored (taken as h*d_v) when w_o is NULL */
    const float *w_q; /* (h*d_k, E_q) */
    const float *w_k; /* (g*d_k, E_k) */
    const float *w_v; /* (g*d_v, E_v) */
    const float *w_o; /* (E_out, h*d_v) or NULL */
    const float *b_q; /* (h*d_k) or NULL */
    const float *b_k; /* (g*d_k) or NULL */
    const float *b_v; /* (g*d_v) or NULL */
    const float *b_o; /* (E_out) or NULL; must be NULL when w_o is NULL */
    /* Appended in 0.2; zero keeps the 0.1 meaning. */
    int num_kv_heads; /* g: 0 = h; otherwise 1 <= g <= h and g divides h */
    attn_rope rope;   /* all zero = no rotary embedding */
    /* Appended in 0.6: how the layer keeps W_Q, W_K, W_V, W_O (see
     * attn_weight_dtype; DEFAULT = F32). F16 / BF16: each float is rounded to
     * nearest even (exact for values that came from F16 / BF16); a weight
     * beyond the F16 range (|w| > 65504) is refused (LIMIT, element named). */
    attn_weight_dtype weights_dtype;
} attn_layer_desc;

/* What a built layer looks like, for servers describing their models. */
typedef struct attn_layer_info {
    int num_heads, head_dim_k, head_dim_v;
    int embed_q, embed_k, embed_v, embed_out;
    int has_out_proj;
    int has_bias_q, has_bias_k, has_bias_v, has_bias_out;
    char source_dtype[8]; /* "F32", "F16", "BF16", "mixed", or "" if built in memory */
    size_t param_count;   /* number of float parameters */
    int num_kv_heads;     /* g (= num_heads for plain multi-head attention) */
    attn_rope rope;       /* as built: theta and rotary_dim resolved (style NONE: none) */
    /* Appended in 0.6: how the layer keeps its projection matrices ("F32",
     * "F16", "BF16": attn_weight_dtype, resolved) and the bytes its parameters
     * take (matrices at 4 or 2 bytes a weight, biases at 4, each tensor padded
     * to 64 bytes): about half for F16 / BF16. */
    char weights_dtype[8];
    size_t weights_bytes;
} attn_layer_info;

/* Builds a layer from caller-owned weights, which are copied.
 * On success *out owns a new layer: free it with attn_layer_free.
 * On failure *out is set to NULL and nothing is allocated. */
attn_status attn_layer_create(const attn_layer_desc *desc, attn_layer **out,
                              attn_error *err);

/* Loads a layer from a safetensors file. Accepted tensor names:
 *  - PyTorch nn.MultiheadAttention state_dict: in_proj_weight [3E,E] and
 *    in_proj_bias [3E], or q_proj_weight/k_proj_weight/v_proj_weight (kdim/vdim),
 *    out_proj.weight, out_proj.bias;
 *  - explicit naming, for layers PyTorch cannot express (d_k != d_v, no W_O):
 *    q_proj.weight, k_proj.weight, v_proj.weight, o_proj.weight and the
 *    matching .bias tensors (o_proj.* optional).
 * Dtypes F32, F16, BF16 (BF16 / F16 layers keep them so: see
 * attn_weight_dtype). num_heads: 0 means "take it from
 * __metadata__.num_heads"; a positive value overrides the metadata.
 * On success *out owns a new layer (attn_layer_free); on failure *out is NULL,
 * the file is closed and err names the problem (tensor, offset, shape). */
attn_status attn_layer_load_safetensors(const char *path, int num_heads,
                                        attn_layer **out, attn_error *err);

/* The same from a buffer in memory (borrowed for the call). Used by fuzzers. */
attn_status attn_layer_load_safetensors_mem(const void *data, size_t len, int num_heads,
                                            attn_layer **out, attn_error *err);

/* ------------------------------------------------------ model checkpoints */

/* Where the tensor names (and config.json keys) of a layer come from. */
typedef enum attn_family {
    ATTN_FAMILY_AUTO = 0,     /* config.json's model_type, else the tensor names     */
    ATTN_FAMILY_MHA = 1,      /* nn.MultiheadAttention: in_proj_weight, out_proj.*
                                 (also under a prefix: TransformerEncoderLayer's
                                 self_attn., DecoderLayer's multihead_attn.)          */
    ATTN_FAMILY_EXPLICIT = 2, /* q_proj.weight, k_proj.weight, v_proj.weight, o_proj.* */
    ATTN_FAMILY_LLAMA = 3,    /* Llama, Mistral, Qwen2: model.layers.{i}.self_attn.
                                 {q,k,v,o}_proj.{weight,bias}; GQA, RoPE              */
    ATTN_FAMILY_BERT = 4,     /* [bert.]encoder.layer.{i}.attention.self.{query,key,
                                 value} + attention.output.dense                     */
    ATTN_FAMILY_GPT2 = 5      /* [transformer.]h.{i}.attn.{c_attn,c_proj}: Conv1D
                                 layout [E, 3E], y = x W + b                          */
} attn_family;

/* "auto", "mha", "explicit", "llama", "bert", "gpt2"; "unknown" otherwise. */
const char *attn_family_name(attn_family family);

/* How to pick one attention layer out of a checkpoint. Zero-initialise. */
typedef struct attn_load_options {
    attn_family family;   /* AUTO = decide from config.json / tensor names          */
    int layer;            /* which layer; -1 = the only one (an error names how many
                             there are when there are several)                      */
    const char *prefix;   /* state_dict prefix before the family's names, e.g.
                             "layers.0.self_attn."; NULL or "" = none                */
    int num_heads;        /* 0 = from config.json / __metadata__.num_heads           */
    int num_kv_heads;     /* 0 = from config.json, else num_heads                    */
    /* Appended in 0.6: how the layer keeps its projection weights; DEFAULT =
     * as stored (see attn_weight_dtype). F32 widens BF16 / F16 files at load
     * (exact); F16 / BF16 round F32 files (and BF16 -> F16 / F16 -> BF16)
     * to nearest even, refusing weights beyond the F16 range. */
    attn_weight_dtype weights_dtype;
} attn_load_options;

/* What a checkpoint holds, as attn_checkpoint_inspect reports it. */
typedef struct attn_checkpoint_info {
    attn_family family;        /* resolved (never AUTO)                              */
    char model_type[32];       /* config.json's model_type, or ""                    */
    int n_layers;              /* attention layers found (1 for a bare layer file)   */
    int num_heads, num_kv_heads, head_dim;
    int hidden_size;           /* E                                                   */
    attn_rope rope;
    int sliding_window;        /* config.json's sliding_window, 0 = none             */
    char dtype[8];             /* of the attention tensors: "F32", "F16", "BF16", "mixed" */
    int n_shards;              /* safetensors files (1 unless sharded)               */
    size_t n_tensors;          /* tensors in the whole checkpoint                    */
} attn_checkpoint_info;

/* Loads one attention layer from path: a .safetensors file (any family), or a
 * model directory in the Hugging Face hub's layout (config.json plus
 * model.safetensors, or model.safetensors.index.json and its shards). Only the
 * selected layer's attention tensors are read (pread at the offsets the header
 * gives); the rest of the checkpoint is never loaded. opts NULL = all defaults.
 * Errors say what to do: a PyTorch pickle (.pt/.bin) is recognised (UNSUPPORTED,
 * "export it to safetensors with ..."), a missing tensor names the name looked
 * for and the nearest names present, a bias present for some projections but
 * missing for others is refused, an unknown rope_scaling type is refused by name.
 * On success *out owns a new layer (attn_layer_free); on failure *out is NULL. */
attn_status attn_layer_load(const char *path, const attn_load_options *opts, attn_layer **out,
                            attn_error *err);

/* Describes what path holds (family, layers, heads, shapes, RoPE) without
 * building a layer; opts as for attn_layer_load (layer ignored). */
attn_status attn_checkpoint_inspect(const char *path, const attn_load_options *opts,
                                    attn_checkpoint_info *info, attn_error *err);

/* Frees a layer. NULL is allowed. The caller must ensure no forward is running. */
void attn_layer_free(attn_layer *layer);

/* Fills *info. Both pointers must be non-NULL. */
void attn_layer_get_info(const attn_layer *layer, attn_layer_info *info);

/* ---------------------------------------------------------------- forward */

typedef enum attn_mask_kind {
    ATTN_MASK_NONE = 0,
    ATTN_MASK_BOOL = 1,  /* uint8_t, nonzero = blocked (PyTorch's bool convention) */
    ATTN_MASK_FLOAT = 2  /* float, added to the scaled scores (-inf blocks)         */
} attn_mask_kind;

typedef enum attn_weights_mode {
    ATTN_WEIGHTS_NONE = 0,     /* weights not returned                    */
    ATTN_WEIGHTS_PER_HEAD = 1, /* weights: (h, T, S)                      */
    ATTN_WEIGHTS_AVERAGE = 2   /* weights: (T, S), mean over heads        */
} attn_weights_mode;

/* One sequence of a (ragged) batch. All pointers are borrowed; outputs are
 * caller-allocated and written only when attn_forward returns ATTN_OK.
 * ZERO-INITIALISE every attn_seq (attn_seq s = {0}; designated initialisers;
 * calloc or memset): every field, including fields added in later versions,
 * means "off" / "none" at zero (no mask, no weights, no cache), so code that
 * sets only the fields it knows keeps working. Uninitialised fields are
 * garbage and attn_forward may reject or obey them.
 * Self-attention: key == value == NULL and S = T (keys come from the query).
 * Cross-attention: key (S, E_k) and value (S, E_v) both non-NULL; they may
 * point to the same buffer when E_k == E_v. */
typedef struct attn_seq {
    int t;              /* T >= 1                                               */
    int s;              /* S >= 1; must equal t for self-attention              */
    const float *query; /* (T, E_q)                                             */
    const float *key;   /* (S, E_k) or NULL                                     */
    const float *value; /* (S, E_v) or NULL                                     */

    /* Masks, all optional and combinable (a key is visible only if every mask
     * lets it through). */
    const uint8_t *key_padding_mask; /* (S), nonzero = ignore this key, or NULL */
    int key_length;     /* keys at index >= key_length are padding; 0 = all valid */
    int is_causal;      /* query t sees keys <= t (top-left aligned when T != S) */
    int window;         /* >0: query t sees keys in [t-window+1, t+window-1];
                           with is_causal that is [t-window+1, t]; 0 = none     */
    attn_mask_kind attn_mask_kind;
    int attn_mask_per_head; /* 0: mask is (T, S); 1: mask is (h, T, S)          */
    const void *attn_mask;  /* uint8_t or float, as attn_mask_kind says         */

    float *output;          /* (T, E_out), caller-allocated, required            */
    attn_weights_mode weights_mode;
    float *weights;         /* (h,T,S) or (T,S) per weights_mode, or NULL if NONE */

    /* KV cache: keys and values already projected (bias included), so that a
     * stream can be computed one step at a time in O(S) per new position.
     * Unused when cache_k is NULL (everything above then applies unchanged).
     * Rows are laid out like the K/V projections: cache_k (rows, g*d_k) and
     * cache_v (rows, g*d_v), the g KV heads (g = h without GQA), caller-owned;
     * key and value must be NULL. Rotary layers store keys already rotated.
     *  - cache_append = 1 (self-attention stream): the T query rows are
     *    projected to K/V and WRITTEN to rows [cache_len, cache_len + T) of the
     *    cache (the caller guarantees the room), and the queries attend to all
     *    S = cache_len + T rows. Query i stands at position cache_len + i, so
     *    is_causal lets it see keys j <= cache_len + i (bottom-right aligned)
     *    and window counts from that position. The rows are written only when
     *    attn_forward returns ATTN_OK.
     *  - cache_append = 0 (a fixed memory, e.g. cross-attention keys/values
     *    projected once with attn_project_kv): the queries attend to the
     *    S = cache_len rows as they are; nothing is written; positions as for
     *    ordinary cross-attention.
     * s must equal the S above. Masks (key padding, attn_mask) index those S keys. */
    float *cache_k;         /* (rows, g*d_k): a cache holds the g KV heads       */
    float *cache_v;         /* (rows, g*d_v)                                      */
    int cache_len;          /* rows already in the cache, >= 0                   */
    int cache_append;       /* 1 or 0, as above                                   */

    /* Rotary layers only (ignored otherwise): the position of each query row,
     * (T) integers >= 0, or NULL for the default: 0..T-1, or cache_len + i when
     * appending to a cache. Self-attention keys take the same positions as
     * their rows; cached keys were rotated when they were written. Sessions
     * that drop old rows (windows) pass explicit positions. Cross-attention
     * (key given, or cache_append = 0) over a rotary layer is refused
     * (UNSUPPORTED): the positions of two sequences are undefined. */
    const int64_t *position_ids;

    /* Appended in 0.3: how the KV cache is stored (all zero = the contiguous
     * float32 cache above, unchanged). See "KV cache layouts" below.
     *  - cache_block_rows = 0: contiguous: row i of the cache at row i.
     *  - cache_block_rows = B > 0 (a power of two, 1..65536): paged. cache_k and
     *    cache_v are the bases of caller-owned pools of equal-sized blocks;
     *    logical row i is row i % B of pool block cache_block_table[i / B].
     *    The table has ceil(s / B) entries, each >= 0 (the caller keeps them
     *    inside its pools). Sessions may share blocks (forks of a prefix): the
     *    library only reads rows below cache_len, and an append writes rows
     *    [cache_len, cache_len + t) — plus, for INT8, requantises the earlier
     *    rows of the blocks those rows fall in — so the caller guarantees the
     *    blocks holding rows >= cache_len are its own (copy-on-write a shared
     *    partial last block before appending).
     *  - cache_dtype: what a cached element is (attn_kv_dtype). cache_k and
     *    cache_v point to that storage, cast to float * (the library accesses
     *    it only as cache_dtype says); INT8 needs a paged cache. */
    int cache_block_rows;
    const int32_t *cache_block_table;
    int cache_dtype;        /* an attn_kv_dtype; 0 = ATTN_KV_F32 */

    /* Appended in 0.4, paged caches only: bytes from the start of one pool
     * block to the next, in both cache_k and cache_v (0 = the block bytes of
     * attn_kv_block_bytes, K and V each packed). A larger stride lets one pool
     * of equal pages hold the blocks of layers of different shapes, and K and
     * V side by side: page p's K block at cache_k + p * stride and V block at
     * cache_v + p * stride (e.g. cache_v = cache_k + K block bytes). It must
     * be a multiple of 4 and at least the K and the V block bytes. */
    size_t cache_block_stride;
} attn_seq;

/* Counters filled by attn_forward (optional). */
typedef struct attn_forward_stats {
    uint64_t flops;        /* floating point operations performed (approx)   */
    size_t peak_scratch;   /* bytes of workspace scratch the call needed: the
                              whole plan (projections, packed inputs, head
                              concat, kernel scratch, job list; a call run in
                              pieces: the largest piece's); the caller's
                              outputs, weights and KV caches are not scratch */
    /* Appended in 0.5: 1 when a sequence of the call ran the streamed
     * (long-context) plan, 0 when all ran the ordinary one; see
     * attn_workspace_options.max_scratch_bytes. */
    int streamed;
} attn_forward_stats;

/* Opaque scratch (and optionally a worker pool), one per thread: created with
 * attn_workspace_create (below), freed with attn_workspace_free. */
typedef struct attn_workspace attn_workspace;

/* Runs the layer over n_seqs sequences (a ragged batch).
 * ws: a workspace owned by the calling thread, or NULL to allocate scratch for
 * this call only. Safe to call concurrently on one layer with distinct
 * workspaces. On any error no output is written (outputs may hold partial
 * garbage only if ATTN_ERR_INTERNAL, or after the last check below) and err
 * names the sequence and field, e.g. "seqs[2].query[5][3] is not finite".
 * Last check: a result holding inf/NaN is never returned as ATTN_OK; it is
 * LIMIT when the sequence reads a KV cache (rows not rescanned per call, so
 * rows too large for the queries are the caller's), else INTERNAL, the
 * message starting "non-finite values in the output". stats may be NULL. */
attn_status attn_forward(const attn_layer *layer, const attn_seq *seqs, int n_seqs,
                         attn_workspace *ws, attn_forward_stats *stats, attn_error *err);

/* ----------------------------------------- workspaces: kernels and threads */

/* Which head kernel attn_forward runs for a sequence. Results of the kernels
 * agree to float rounding (~1e-6 relative); none is bit-identical to another.
 * Decode: under AUTO or FUSED, a sequence with a KV cache (cache_k set) and at
 * most 8 query rows (a decode step: T = 1, or a few speculative rows) runs the
 * decode kernel instead of the blocked one: one pass over the cache per group
 * of KV heads, each K/V row read once and whole, F16/BF16/INT8 elements
 * converted in registers inside the dot products (AVX2+FMA+F16C when the CPU
 * has them, portable C otherwise; both within the same rounding). It computes
 * every mask, window and dtype the other kernels do. */
typedef enum attn_kernel {
    ATTN_KERNEL_AUTO = 0,         /* FUSED unless the sequence asks for weights   */
    ATTN_KERNEL_MATERIALIZED = 1, /* scores (T, S) per head in scratch, then softmax
                                     and one GEMM with V: the simple path        */
    ATTN_KERNEL_FUSED = 2         /* keys in blocks with an online softmax: scratch
                                     O((h/g) * block_q * block_k) per thread instead
                                     of O(T * S); fully masked blocks are skipped.
                                     A sequence that asks for weights still runs
                                     MATERIALIZED (the weights are T x S anyway). */
} attn_kernel;

/* How a workspace computes. Zero-initialise, then set what you need: all zeros
 * is exactly opts = NULL (one thread, AUTO, default blocks). */
typedef struct attn_workspace_options {
    /* Threads computing each attn_forward, the caller included: 1 (or 0) = the
     * calling thread only; n > 1 starts n - 1 pool threads now, which live until
     * attn_workspace_free and sleep between calls; -1 = one per online CPU.
     * Work is split over (sequence, KV head, query block) — one job computes
     * the h/g query heads that share a KV head, reading each K/V tile once —
     * and over the rows of the projections. Decode sequences (see attn_kernel)
     * are one job each (all KV heads) when the call has at least 2 * n_threads
     * of them; fewer are split into as many jobs for every thread, first by
     * keys (split-KV: chunks of >= 256 keys on different threads, each giving
     * a partial max, sum and mixture, merged exactly by log-sum-exp), then by
     * KV-head groups when the keys are too few. The cut depends only on the batch and n_threads, so a
     * workspace's results are reproducible, and threads never change a bit of
     * the other kernels' results; but a decode batch smaller than 2 *
     * n_threads is cut differently by workspaces of different n_threads, so
     * their results agree to float rounding (~1e-6 relative), not bit for
     * bit. The pool runs OpenBLAS single-threaded GEMMs, so it is used
     * only while openblas_get_num_threads() == 1 (the application calls
     * openblas_set_num_threads(1) or sets OPENBLAS_NUM_THREADS=1; the library
     * never changes OpenBLAS settings). While OpenBLAS has more threads the call
     * runs on the calling thread and OpenBLAS threads the GEMMs, so the two
     * never oversubscribe the cores. Tiny calls (< ~2 MFLOP) also stay on the
     * calling thread: waking the pool would cost more than it saves. */
    int n_threads;
    attn_kernel kernel;
    int block_q; /* fused tile rows (queries), 0 = default (128; 256 over 4096
                    keys or more when h == g); 1..4096 */
    int block_k; /* fused tile columns (keys), 0 = default (256); 1..65536 */
    /* Appended in 0.5: the scratch bound, in bytes, of one attn_forward call
     * on this workspace; 0 = the default, 64 MiB (64 << 20); SIZE_MAX = no
     * bound (one ordinary plan for the whole batch, as before 0.5). The
     * ordinary plan projects Q, K and V of the whole batch at once (about
     * (T * (h*d_k + h*d_v) + S * (g*d_k + g*d_v)) floats per sequence, plus
     * packed inputs for batches). When that would need more than the bound,
     * the batch runs in pieces, consecutive sequences in order: as many as
     * fit the bound run the ordinary plan together; a sequence that alone
     * exceeds it runs the streamed plan: passes over n KV heads at a time (as
     * many as fit the bound, at least one), each projecting their K and V
     * (S x n*d_k and S x n*d_v, RoPE applied to K), then their n*h/g query
     * heads in chunks of query rows: the chunk's Q (RoPE), the fused kernel,
     * and the chunk's share of the output projection added into the caller's
     * output (out += Z_chunk W_O[:, those heads' columns]^T, b_O added by the
     * first pass). A chunk is as many rows (a multiple of block_q) as fit the
     * bound, at least min(T, block_q); below that floor (one KV head's K and
     * V + kernel scratch + one block) the call still runs and peak_scratch
     * says what it used, then above the bound. Streamed results equal the
     * ordinary plan's to float rounding (~1e-6 relative: the output
     * projection sums per pass), not bit for bit. A sequence streams only
     * when it has no KV cache (cache_k NULL), asks for no weights, has no
     * per-head attn_mask (attn_mask_per_head = 1) and the workspace's kernel
     * is not MATERIALIZED; any other sequence beyond the bound runs the
     * ordinary plan alone, above the bound (stats.peak_scratch says so). A
     * (T, S) attn_mask, key padding, key_length, causal, window, RoPE
     * positions and cross-attention all stream. */
    size_t max_scratch_bytes;
} attn_workspace_options;

/* Creates a workspace as opts says (opts NULL = all defaults: one thread). It
 * starts empty, grows on demand and is reused across calls, so steady-state
 * forwards do not allocate. opts is borrowed for the call only.
 * On success *out owns the workspace: free it with attn_workspace_free, which
 * also stops its threads. Fails with INVALID_ARG (out is NULL, or a bad option:
 * err names it), NOMEM, or INTERNAL (a pool thread could not be started); on
 * failure *out is NULL (when out is not), nothing is allocated and no thread
 * is left running.
 * Thread-safety: one attn_forward at a time per workspace; distinct workspaces
 * (each with its own pool) may run at once, but then their threads share the
 * cores: size n_threads accordingly. */
attn_status attn_workspace_create(const attn_workspace_options *opts, attn_workspace **out,
                                  attn_error *err);

/* Frees a workspace and stops its pool threads. NULL is allowed. No forward
 * may be running on it. */
void attn_workspace_free(attn_workspace *ws);

/* The options a workspace was created with, n_threads resolved (>= 1) and
 * block sizes filled in. ws must not be NULL. */
void attn_workspace_get_options(const attn_workspace *ws, attn_workspace_options *opts);

/* ---------------------------------------------------------------- KV cache */

/* Projects s rows of keys and values the way attn_forward does (bias
 * included), for a KV cache or a cross-attention memory used with
 * attn_seq.cache_k / cache_v and cache_append = 0.
 * key: (s, E_k), value: (s, E_v) (may be the same buffer when E_k == E_v);
 * k_out: (s, g*d_k), v_out: (s, g*d_v), caller-allocated, written only on
 * ATTN_OK. Rejects non-finite inputs (NONFINITE, element named), and rotary
 * layers (UNSUPPORTED: a memory has no positions). Thread-safe. */
attn_status attn_project_kv(const attn_layer *layer, const float *key, const float *value,
                            int s, float *k_out, float *v_out, attn_error *err);

/* ------------------------------------------------------- KV cache layouts
 *
 * Element types of a KV cache (attn_seq.cache_dtype). Append-only.
 *   F32   exact (the default).
 *   F16   IEEE binary16, round-to-nearest-even; magnitudes beyond 65504 are
 *         stored as +-65504 (never inf). Relative error per element <= 2^-11
 *         (normal range); absolute <= 2^-25 below 2^-14.
 *   BF16  bfloat16 (the top half of a float32), round-to-nearest-even:
 *         relative error per element <= 2^-8.
 *   INT8  symmetric int8 with one float32 scale per (block, KV head): element
 *         x of KV head j in block b is stored as q = round_half_even(x / s)
 *         clamped to [-127, 127], read as q * s. A block filled in one call
 *         (attn_kv_store, or an append covering it from its first row) gets
 *         s = max|x| / 127 over its rows of that head (0 if all are 0):
 *         |error| <= s/2. When an append adds rows whose max|x| exceeds
 *         127 * s, the scale grows to s' = max(max|x| / 127, 2 s) and the
 *         block's earlier rows of that head are requantised
 *         (q' = round_half_even(q * s / s')). Because every growth at least
 *         doubles s, a block's accumulated error stays <= s_final (the scale
 *         it ends with, <= 2 max|x| / 127 of the block) however the rows
 *         arrived; rows written in one go keep the s/2 bound.
 * A paged F32 cache gives results bit-identical to a contiguous F32 cache
 * holding the same rows (same call, same workspace), whatever the block size.
 * Attention-output error vs F32, as tests/unit/test_kvpaged.c bounds it
 * (random layers incl. GQA/RoPE, inputs |x| <= 1, streams of up to 300 rows,
 * error relative to max(1, max|output|)): F16 <= 1e-3, BF16 <= 1e-2, INT8
 * <= 3e-2. Measured maxima there: F16 2.4e-4, BF16 2.0e-3, INT8 8.2e-3
 * (the test prints them). The decode kernel (at most 8 new rows) computes
 * an INT8 cache's scores on the queries rounded to int8 (per query row and
 * head, scale max|q| / 127), as exact integer dot products, the same bits
 * on every CPU; against float queries that moves outputs by ~1e-3 relative
 * at most (test_decode bounds it by 5e-3), far inside the bound above.
 *
 * Storage of KV head j's d (= d_k for K, d_v for V) elements of row i:
 *   contiguous (F32, F16, BF16): elements [i*g*d + j*d, +d) of the buffer,
 *     each 4 (F32) or 2 (F16, BF16 as uint16_t bits) bytes.
 *   paged, F32/F16/BF16: block bytes = B * g * d * elem_size; row i % B of
 *     the block in the same layout as a contiguous row.
 *   paged, INT8: a block is g float32 scales (KV head 0 first) followed by
 *     B rows of g*d int8 (row-major, as above), the whole padded to a
 *     multiple of 4 bytes: block bytes = 4*g + round_up(B*g*d, 4).
 * Block b of a pool starts at byte b * block bytes of cache_k (cache_v).
 * Pools must be 4-byte aligned. */
typedef enum attn_kv_dtype {
    ATTN_KV_F32 = 0,
    ATTN_KV_F16 = 1,
    ATTN_KV_BF16 = 2,
    ATTN_KV_INT8 = 3
} attn_kv_dtype;

/* Bytes of one block of K and of V for this layer (block_rows > 0), or of one
 * row (block_rows = 0, contiguous; not for INT8). Fails with INVALID_ARG
 * (err names the field: dtype, block_rows) or LIMIT; outputs written only on OK. */
attn_status attn_kv_block_bytes(const attn_layer *layer, attn_kv_dtype dtype, int block_rows,
                                size_t *k_bytes, size_t *v_bytes, attn_error *err);

/* Where a cache lives, for attn_kv_store / attn_kv_load: the same meaning as
 * attn_seq's cache_k, cache_v, cache_dtype, cache_block_rows and
 * cache_block_table (the table must cover every row touched). Zero-initialise. */
typedef struct attn_kv_cache {
    void *k, *v;
    attn_kv_dtype dtype;
    int block_rows;
    const int32_t *block_table;
    size_t block_stride; /* as attn_seq.cache_block_stride; 0 = packed */
} attn_kv_cache;

/* Writes n rows of projected keys k (n, g*d_k) and values v (n, g*d_v) — e.g.
 * from attn_project_kv — to rows [row0, row0 + n) of the cache, converting to
 * its dtype exactly as an append does (INT8: rows [block start, row0) of the
 * first block already hold data and may be requantised, see above; rows past
 * row0 + n in a block are ignored). Inputs must be finite (NONFINITE names
 * the element). Nothing is written on failure. Thread-safe for disjoint blocks. */
attn_status attn_kv_store(const attn_layer *layer, const attn_kv_cache *cache, int row0, int n,
                          const float *k, const float *v, attn_error *err);

/* Reads rows [row0, row0 + n) of the cache back as float32 (what the kernels
 * see): k (n, g*d_k), v (n, g*d_v). For tests and tools. */
attn_status attn_kv_load(const attn_layer *layer, const attn_kv_cache *cache, int row0, int n,
                         float *k, float *v, attn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_H */
