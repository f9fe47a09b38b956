/* rope.h — rotary position embedding (RoPE) as Hugging Face computes it: the
 * checks and defaults of an attn_rope, a layer's float32 inverse frequencies
 * (default, "linear", "llama3"), and the rotation of one row's heads at one
 * integer position. Nothing here grows with position: a layer keeps only its
 * rotary_dim / 2 frequencies; cos/sin are computed per row and call.
 */
#ifndef ATTN_ROPE_H
#define ATTN_ROPE_H

#include "layer_internal.h"

#include <stdint.h>

/* Largest position accepted (2^53: every integer up to it is a double). */
#define ATTN__ROPE_MAX_POSITION ((int64_t)1 << 53)

/* The accepted range of every scaling parameter (factor, low_freq_factor,
 * high_freq_factor): real checkpoints use 1..64 (Llama 3.1: 8, 1, 4); a value
 * outside this range is a broken file, and a subnormal one (1e-40) would make
 * the inverse frequencies infinite. */
#define ATTN__ROPE_MIN_FACTOR 1e-3
#define ATTN__ROPE_MAX_FACTOR 1e6
/* Largest llama3 original_max_position (Llama 3.1: 8192). */
#define ATTN__ROPE_MAX_ORIGINAL (1 << 24)

/* How the fields of an attn_rope are named in errors, and the code an error
 * gets: desc.rope.* / INVALID_ARG for attn_layer_create, the config.json keys
 * / FORMAT for hfconfig.c. */
typedef struct attn__rope_names {
    attn_status code;
    const char *theta, *rotary_dim, *factor, *low_freq_factor, *high_freq_factor,
        *original_max_position;
} attn__rope_names;

/* Checks rope parameters for a layer whose heads are d_k wide and writes the
 * resolved form to *out: theta 0 -> 10000, rotary_dim 0 -> d_k. style NONE
 * resolves to all zeros (the other fields are ignored). Checks every field's
 * range (theta > 0 and finite in float32; rotary_dim even, 2..d_k; factors in
 * [ATTN__ROPE_MIN_FACTOR, ATTN__ROPE_MAX_FACTOR], high_freq_factor >
 * low_freq_factor also in float32; original_max_position in [1,
 * ATTN__ROPE_MAX_ORIGINAL]) and then the derived quantities: every one of the
 * rotary_dim / 2 inverse frequencies attn__rope_inv_freq computes must be a
 * finite float32 > 0 (so every angle and cos/sin is finite). An error has
 * nm->code and names the field as nm says ("desc.rope.factor = 1e-40, ...");
 * *out is untouched then. O(rotary_dim), no allocation. */
attn_status attn__rope_check(const attn_rope *in, int d_k, const attn__rope_names *nm, attn_rope *out,
                             attn_error *err);

/* attn__rope_check with the desc.rope.* names and INVALID_ARG. */
attn_status attn__rope_resolve(const attn_rope *in, int d_k, attn_rope *out, attn_error *err);

/* The rope.rotary_dim / 2 inverse frequencies of a resolved, non-NONE rope,
 * bit for bit the float32 vector of HF's _compute_default_rope_parameters
 * (1 / theta^(2i / dim)), then "linear" (/ factor) or "llama3" scaling,
 * evaluated with the same float32 operations in the same order. */
void attn__rope_inv_freq(const attn_rope *rope, float *inv_freq);

/* cs[0 .. half) = cos, cs[half .. 2 half) = sin of the angles
 * pos * inv_freq[i], i < half: the angle in double from the float32
 * frequency, cos/sin in double, rounded to float (see rope.c). */
void attn__rope_cos_sin(const float *inv_freq, int half, int64_t pos, float *cs);

/* Rotates n_heads consecutive heads of one row in place: x holds head j at
 * x + j * d_k; the first rotary_dim dims of each rotate (pairs as style says),
 * the rest pass through. cs from attn__rope_cos_sin for this row's position. */
void attn__rope_rotate(attn_rope_style style, int rotary_dim, const float *cs, float *x,
                       int n_heads, int d_k);

#endif /* ATTN_ROPE_H */
