/* half.h — exact conversion of IEEE binary16 (F16) and bfloat16 (BF16) to float32.
 * Both are widenings, so every value (±0, subnormals, ±inf, NaN payloads) maps to
 * exactly one float32 with no rounding. Also the rounding the other way (for
 * layers that keep F16 / BF16 weights) and the widening of whole weight rows.
 * Library-internal (attn__ prefix). */
#ifndef ATTN_HALF_H
#define ATTN_HALF_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

/* binary16 bits -> float32: subnormals become normal floats, inf stays inf,
 * NaN stays NaN (quiet bit and payload kept in the top mantissa bits). */
float attn__f16_to_f32(uint16_t h);

/* bfloat16 bits -> float32: the 16 bits become the top half of the float. */
float attn__bf16_to_f32(uint16_t b);

/* float32 -> bits, for tests and writers; same value bit pattern (no rounding). */
uint32_t attn__f32_bits(float f);

/* float32 -> bfloat16 / binary16 bits, round to nearest even, finite inputs.
 * BF16: finite inputs below FLT_MAX's last ulp stay finite. F16: |f| that rounds
 * beyond 65504 becomes +-inf (the caller refuses those: attn__f16_fits). */
uint16_t attn__f32_to_bf16(float f);
uint16_t attn__f32_to_f16(float f);
/* 1 when the finite f rounds to a finite binary16 (|f| < 65520). */
int attn__f16_fits(float f);

/* Weights kept as an attn_weight_dtype (attn.h): F32 (float), F16 or BF16
 * (uint16_t bits). Element i of w widened to float32. */
float attn__w_get(const void *w, int wdtype, size_t i);

/* dst (rows, cols) = rows of w (element type wdtype, row stride ld elements)
 * widened to float32 (AVX2/F16C when the CPU has them; the same values). */
void attn__widen_rows(float *dst, const void *w, int wdtype, size_t rows, size_t cols, size_t ld);

#endif
