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

uint16_t attn__f32_to_bf16(float f)
{
    uint32_t u = attn__f32_bits(f);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

int attn__f16_fits(float f)
{
    return f > -65520.0f && f < 65520.0f; /* 65520 is the midpoint to 2^16: rounds (even) to inf */
}

/* F. Giesen's float_to_half_fast3_rtne: the subnormal range rounded by the FPU
 * (adding a magic number whose ulp is 2^-24), the normal range by integer
 * arithmetic on the bits. */
uint16_t attn__f32_to_f16(float f)
{
    uint32_t u = attn__f32_bits(f), sign = u & 0x80000000u, o;
    u ^= sign;
    if (u >= (127u + 16u) << 23) {
        o = 0x7c00u; /* inf: callers check attn__f16_fits first */
    } else if (u < 113u << 23) {
        const float magic = from_bits(((127u - 15u) + (23u - 10u) + 1u) << 23);
        o = attn__f32_bits(from_bits(u) + magic) - attn__f32_bits(magic);
    } else {
        uint32_t odd = (u >> 13) & 1u;
        u += ((uint32_t)(15 - 127) << 23) + 0xfffu;
        u += odd;
        o = u >> 13;
    }
    return (uint16_t)(o | (sign >> 16));
}

float attn__w_get(const void *w, int wdtype, size_t i)
{
    if (wdtype == ATTN_WDTYPE_BF16) return attn__bf16_to_f32(((const uint16_t *)w)[i]);
    if (wdtype == ATTN_WDTYPE_F16) return attn__f16_to_f32(((const uint16_t *)w)[i]);
    return ((const float *)w)[i];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HALF_AVX2 1

__attribute__((target("avx2,f16c"))) static void widen_avx2(float *dst, const uint16_t *src, int bf16, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        __m256 f;
        if (bf16) f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        else f = _mm256_cvtph_ps(h);
        _mm256_storeu_ps(dst + i, f);
    }
    for (; i < n; i++) dst[i] = bf16 ? attn__bf16_to_f32(src[i]) : attn__f16_to_f32(src[i]);
}
#endif

void attn__widen_rows(float *dst, const void *w, int wdtype, size_t rows, size_t cols, size_t ld)
{
    if (wdtype != ATTN_WDTYPE_F16 && wdtype != ATTN_WDTYPE_BF16) {
        for (size_t r = 0; r < rows; r++) memcpy(dst + r * cols, (const float *)w + r * ld, cols * sizeof(float));
        return;
    }
    const int bf16 = wdtype == ATTN_WDTYPE_BF16;
#ifdef HALF_AVX2
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
        for (size_t r = 0; r < rows; r++) widen_avx2(dst + r * cols, (const uint16_t *)w + r * ld, bf16, cols);
        return;
    }
#endif
    for (size_t r = 0; r < rows; r++) {
        const uint16_t *s = (const uint16_t *)w + r * ld;
        for (size_t c = 0; c < cols; c++)
            dst[r * cols + c] = bf16 ? attn__bf16_to_f32(s[c]) : attn__f16_to_f32(s[c]);
    }
}
