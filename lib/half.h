/* half.h — exact conversion of IEEE binary16 (F16) and bfloat16 (BF16) to float32.
 * Both are widenings, so every value (±0, subnormals, ±inf, NaN payloads) maps to
 * exactly one float32 with no rounding. Library-internal (attn__ prefix). */
#ifndef ATTN_HALF_H
#define ATTN_HALF_H

#include <stddef.h>
#include <stdint.h>

/* binary16 bits -> float32: subnormals become normal floats, inf stays inf,
 * NaN stays NaN (quiet bit and payload kept in the top mantissa bits). */
float attn__f16_to_f32(uint16_t h);

/* bfloat16 bits -> float32: the 16 bits become the top half of the float. */
float attn__bf16_to_f32(uint16_t b);

/* float32 -> bits, for tests and writers; same value bit pattern (no rounding). */
uint32_t attn__f32_bits(float f);

#endif
