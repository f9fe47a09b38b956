/* half.c — F16/BF16 -> F32 widening (see half.h). Pure bit manipulation: no
 * floating-point arithmetic, so the result does not depend on rounding mode,
 * FTZ/DAZ settings or the compiler's use of F16C. */
#include "half.h"

#include <string.h>

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint32_t attn__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float attn__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;

    if (exp == 0x1f) /* inf (man == 0) or NaN: keep the payload */
        return from_bits(sign | 0x7f800000u | (man << 13));
    if (exp != 0) /* normal: rebias 15 -> 127 */
        return from_bits(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) /* signed zero */
        return from_bits(sign);
    /* subnormal: value = man * 2^-24. Normalise so the leading 1 sits at bit 10;
     * each shift lowers the exponent by one, starting from 2^-14. */
    exp = 113u; /* 127 - 14 */
    while ((man & 0x400u) == 0) {
        man <<= 1;
        exp--;
    }
    return from_bits(sign | (exp << 23) | ((man & 0x3ffu) << 13));
}

float attn__bf16_to_f32(uint16_t b)
{
    return from_bits((uint32_t)b << 16);
}
