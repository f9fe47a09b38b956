/* rope.c — rotary position embedding as Hugging Face transformers computes it
 * (modeling_rope_utils.py, LlamaRotaryEmbedding, apply_rotary_pos_emb): see
 * rope.h. The inverse frequencies are HF's float32 vector, computed with the
 * same float32 operations; the angles are computed more exactly than HF does
 * (below).
 */
#include "rope.h"

#include <float.h>
#include <math.h>

#define PI_DOUBLE 3.14159265358979323846

static int finite_pos(double v) { return v > 0.0 && v <= DBL_MAX; }

static const attn__rope_names desc_names = {
    ATTN_ERR_INVALID_ARG,       "desc.rope.theta",           "desc.rope.rotary_dim",
    "desc.rope.factor",         "desc.rope.low_freq_factor", "desc.rope.high_freq_factor",
    "desc.rope.original_max_position",
};

/* A scaling parameter in [ATTN__ROPE_MIN_FACTOR, ATTN__ROPE_MAX_FACTOR]. */
static int factor_ok(double v) { return v >= ATTN__ROPE_MIN_FACTOR && v <= ATTN__ROPE_MAX_FACTOR; }

static attn_status bad_factor(const attn__rope_names *nm, const char *name, double v, const char *kind,
                              attn_error *err)
{
    return attn__set_error(err, nm->code, "%s = %g, %s scaling needs a value in [%g, %g]", name, v, kind,
                           ATTN__ROPE_MIN_FACTOR, ATTN__ROPE_MAX_FACTOR);
}

static float freq_at(const attn_rope *rope, int i, float *unscaled);

/* Every inverse frequency of r (resolved, not NONE) is a finite float32 > 0,
 * so every angle p * inv_freq (p <= 2^53) and its cos/sin are finite. The
 * error blames the base when the unscaled frequency already fails, else the
 * scaling factor. */
static attn_status check_freqs(const attn_rope *r, const attn__rope_names *nm, attn_error *err)
{
    const int half = r->rotary_dim / 2;
    for (int i = 0; i < half; i++) {
        float raw;
        const float f = freq_at(r, i, &raw);
        if (!(raw > 0.0f) || !(raw <= FLT_MAX))
            return attn__set_error(err, nm->code,
                                   "%s = %g gives inverse frequency %d of %d = %g (rotary_dim %d), not a "
                                   "finite float32 > 0", nm->theta, r->theta, i, half, (double)raw,
                                   r->rotary_dim);
        if (!(f > 0.0f) || !(f <= FLT_MAX))
            return attn__set_error(err, nm->code,
                                   "%s = %g (with %s = %g) gives inverse frequency %d of %d = %g, not a "
                                   "finite float32 > 0", nm->factor, r->factor, nm->theta, r->theta, i,
                                   half, (double)f);
    }
    return ATTN_OK;
}

attn_status attn__rope_check(const attn_rope *in, int d_k, const attn__rope_names *nm, attn_rope *out,
                             attn_error *err)
{
    attn_rope r = *in;
    if (r.style == ATTN_ROPE_NONE) {
        *out = (attn_rope){0};
        return ATTN_OK;
    }
    if (r.style != ATTN_ROPE_HALF && r.style != ATTN_ROPE_INTERLEAVED)
        return attn__set_error(err, nm->code, "desc.rope.style = %d is not an attn_rope_style", (int)r.style);
    if (r.theta == 0.0) r.theta = 10000.0;
    /* HF rounds the base to float32 (torch.tensor(base, dtype=float32) ** x). */
    if (!(r.theta > 0.0) || !(r.theta <= FLT_MAX) || !((float)r.theta > 0.0f))
        return attn__set_error(err, nm->code, "%s = %g, must be > 0 and finite in float32 (0 = 10000)",
                               nm->theta, r.theta);
    if (r.rotary_dim == 0) {
        if (d_k % 2 != 0)
            return attn__set_error(err, nm->code,
                                   "%s = 0 means head_dim_k = %d, which is odd: "
                                   "rotary dims pair up, give an even rotary_dim", nm->rotary_dim, d_k);
        r.rotary_dim = d_k;
    }
    if (r.rotary_dim < 2 || r.rotary_dim % 2 != 0 || r.rotary_dim > d_k)
        return attn__set_error(err, nm->code, "%s = %d, must be even and in 2..head_dim_k (%d)",
                               nm->rotary_dim, r.rotary_dim, d_k);
    switch (r.scaling) {
    case ATTN_ROPE_SCALING_NONE:
        r.factor = r.low_freq_factor = r.high_freq_factor = 0.0;
        r.original_max_position = 0;
        break;
    case ATTN_ROPE_SCALING_LINEAR:
        if (!finite_pos(r.factor) || !factor_ok(r.factor)) return bad_factor(nm, nm->factor, r.factor, "linear", err);
        r.low_freq_factor = r.high_freq_factor = 0.0;
        r.original_max_position = 0;
        break;
    case ATTN_ROPE_SCALING_LLAMA3:
        if (!finite_pos(r.factor) || !factor_ok(r.factor)) return bad_factor(nm, nm->factor, r.factor, "llama3", err);
        if (!finite_pos(r.low_freq_factor) || !factor_ok(r.low_freq_factor))
            return bad_factor(nm, nm->low_freq_factor, r.low_freq_factor, "llama3", err);
        if (!finite_pos(r.high_freq_factor) || !factor_ok(r.high_freq_factor))
            return bad_factor(nm, nm->high_freq_factor, r.high_freq_factor, "llama3", err);
        /* the smoothing divides by (high - low) in float32 */
        if (!(r.high_freq_factor > r.low_freq_factor) ||
            !((float)(r.high_freq_factor - r.low_freq_factor) > 0.0f))
            return attn__set_error(err, nm->code, "%s = %g, llama3 scaling needs a value > %s (%g)",
                                   nm->high_freq_factor, r.high_freq_factor, nm->low_freq_factor,
                                   r.low_freq_factor);
        if (r.original_max_position < 1 || r.original_max_position > ATTN__ROPE_MAX_ORIGINAL)
            return attn__set_error(err, nm->code, "%s = %d, llama3 scaling needs a value in [1, %d]",
                                   nm->original_max_position, r.original_max_position,
                                   ATTN__ROPE_MAX_ORIGINAL);
        break;
    default:
        return attn__set_error(err, nm->code, "desc.rope.scaling = %d is not an attn_rope_scaling",
                               (int)r.scaling);
    }
    attn_status st = check_freqs(&r, nm, err);
    if (st != ATTN_OK) return st;
    *out = r;
    return ATTN_OK;
}

attn_status attn__rope_resolve(const attn_rope *in, int d_k, attn_rope *out, attn_error *err)
{
    return attn__rope_check(in, d_k, &desc_names, out, err);
}

/* Element i of HF's float32 vector (*unscaled: before the scaling),
 * operation by operation. Each line names the torch
 * expression it reproduces; python scalars meet float32 tensors as float32
 * (torch's type promotion keeps the tensor's dtype), and `scalar / tensor` is
 * torch's tensor.reciprocal() * scalar. This file is compiled without
 * -ffast-math and (with -std=c11) without FMA contraction, so every float
 * operation here rounds once, as torch's CPU kernels do.
 *
 * pow: torch evaluates `base ** exponents` with libm's powf for some elements
 * and, in the 16-element chunks its AVX2 kernel vectorises, with SLEEF's
 * powf_u10 (1-ulp), which differs from powf by one ulp for ~1.5% of
 * (theta, dim, i). We use powf throughout: the value torch's scalar path
 * gives, and torch's vectorised value in the other ~98.5%. */
static float freq_at(const attn_rope *rope, int i, float *unscaled)
{
    const int dim = rope->rotary_dim;
    const float base = (float)rope->theta;
    const float e = (float)(2 * i) / (float)dim;      /* arange(0, dim, 2).float() / dim */
    const float f = 1.0f / powf(base, e);             /* 1.0 / (base ** e)               */
    *unscaled = f;
    if (rope->scaling == ATTN_ROPE_SCALING_LINEAR) return f / (float)rope->factor; /* inv_freq /= factor */
    if (rope->scaling != ATTN_ROPE_SCALING_LLAMA3) return f;
    /* _compute_llama3_parameters */
    const double old = (double)rope->original_max_position;
    const float factor = (float)rope->factor;
    const float low = (float)rope->low_freq_factor;
    const float low_wavelen = (float)(old / rope->low_freq_factor);   /* old / low   (python) */
    const float high_wavelen = (float)(old / rope->high_freq_factor); /* old / high  (python) */
    const float span = (float)(rope->high_freq_factor - rope->low_freq_factor); /* hi - lo */
    const float two_pi = (float)(2.0 * PI_DOUBLE);                     /* 2 * math.pi */
    const float old_f = (float)old;
    const float wavelen = (1.0f / f) * two_pi;                         /* 2π / inv_freq */
    /* where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq) */
    const float llama = wavelen > low_wavelen ? f / factor : f;
    /* (old_context_len / wavelen - low_freq_factor) / (high - low) */
    const float smooth = ((1.0f / wavelen) * old_f - low) / span;
    /* (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama */
    const float smoothed = (1.0f - smooth) * llama / factor + smooth * llama;
    const int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    return medium ? smoothed : llama;
}

void attn__rope_inv_freq(const attn_rope *rope, float *inv_freq)
{
    float raw;
    for (int i = 0; i < rope->rotary_dim / 2; i++) inv_freq[i] = freq_at(rope, i, &raw);
}

/* The angle of position p is p * inv_freq[i]. HF (LlamaRotaryEmbedding.forward)
 * computes that product in float32 (inv_freq @ position_ids.float()), so at
 * p ~ 1e5 its angle is already off by up to half an ulp of the angle (~4e-3
 * rad) and beyond 2^24 the position itself rounds. We compute the exact angle
 * of the float32 frequency instead: p and inv_freq[i] are exact in double,
 * their product is within 1e-16 relative, and cos/sin in double (glibc reduces
 * large arguments exactly) rounded once to float. So position 1e6 is as
 * accurate as position 10; HF's float32 result differs from ours by its own
 * rounding only. */
void attn__rope_cos_sin(const float *inv_freq, int half, int64_t pos, float *cs)
{
    const double p = (double)pos; /* validated: 0 <= pos <= 2^53, exact */
    for (int i = 0; i < half; i++) {
        const double a = p * (double)inv_freq[i];
        cs[i] = (float)cos(a);
        cs[half + i] = (float)sin(a);
    }
}

/* HF: q_embed = (q * cos) + (rotate_half(q) * sin), cos/sin = cat(freqs, freqs):
 *   out[i]        = x[i] cos_i - x[i + half] sin_i
 *   out[i + half] = x[i + half] cos_i + x[i] sin_i
 * Interleaved (GPT-J rotate_every_two, Meta's complex product):
 *   out[2i]   = x[2i] cos_i - x[2i+1] sin_i
 *   out[2i+1] = x[2i+1] cos_i + x[2i] sin_i
 * Dims from rotary_dim on pass through (HF's partial rotary: q_rot, q_pass). */
void attn__rope_rotate(attn_rope_style style, int rotary_dim, const float *cs, float *x,
                       int n_heads, int d_k)
{
    const int half = rotary_dim / 2;
    const float *c = cs, *s = cs + half;
    for (int j = 0; j < n_heads; j++) {
        float *v = x + (size_t)j * d_k;
        if (style == ATTN_ROPE_HALF) {
            for (int i = 0; i < half; i++) {
                const float a = v[i], b = v[i + half];
                v[i] = a * c[i] - b * s[i];
                v[i + half] = b * c[i] + a * s[i];
            }
        } else {
            for (int i = 0; i < half; i++) {
                const float a = v[2 * i], b = v[2 * i + 1];
                v[2 * i] = a * c[i] - b * s[i];
                v[2 * i + 1] = b * c[i] + a * s[i];
            }
        }
    }
}
