/* vexp.h — exp(x) eight float lanes at a time with AVX2 (sixteen with AVX-512F): the Cephes
 * single-precision polynomial (x = n ln2 + r, |r| <= ln2/2, exp(r) by degree 6,
 * times 2^n through the exponent bits), plain mul/add so every lane rounds as
 * softmax.c's SSE2 exp4 does. Shared by softmax.c and the fused kernel's AVX2
 * path (flash.c); compiled for AVX2 by attribute (the build has no -march),
 * callers choose it at run time. x <= 88.37; below -87.34 (and -inf) gives 0.
 * x86-64 with GCC/Clang only: include it under
 * `#if defined(__x86_64__) && defined(__GNUC__)`. Library-internal. */
#ifndef ATTN_VEXP_H
#define ATTN_VEXP_H

#include <immintrin.h>

/* The polynomial on x already clamped to [-87.34, 88.38], in vectors of the
 * intrinsic prefix PFX (_mm256, _mm512; VF / VI the float and integer
 * vector types, CAST the integer-to-float bit cast), into out: exp(x) =
 * 2^n exp(r), before the underflowed lanes are zeroed. One body, so every
 * width does the same operations in the same order lane by lane. */
#define ATTN__EXP_CEPHES(PFX, VF, VI, CAST, x, out)                                                       \
    do {                                                                                               \
        const VI n_ = PFX##_cvtps_epi32(PFX##_mul_ps(x, PFX##_set1_ps(1.44269504088896341f)));         \
        const VF nf_ = PFX##_cvtepi32_ps(n_);                                                          \
        VF r_ = PFX##_sub_ps(x, PFX##_mul_ps(nf_, PFX##_set1_ps(0.693359375f)));                       \
        r_ = PFX##_add_ps(r_, PFX##_mul_ps(nf_, PFX##_set1_ps(2.12194440e-4f)));                       \
        VF p_ = PFX##_set1_ps(1.9875691500e-4f);                                                       \
        p_ = PFX##_add_ps(PFX##_mul_ps(p_, r_), PFX##_set1_ps(1.3981999507e-3f));                      \
        p_ = PFX##_add_ps(PFX##_mul_ps(p_, r_), PFX##_set1_ps(8.3334519073e-3f));                      \
        p_ = PFX##_add_ps(PFX##_mul_ps(p_, r_), PFX##_set1_ps(4.1665795894e-2f));                      \
        p_ = PFX##_add_ps(PFX##_mul_ps(p_, r_), PFX##_set1_ps(1.6666665459e-1f));                      \
        p_ = PFX##_add_ps(PFX##_mul_ps(p_, r_), PFX##_set1_ps(5.0000001201e-1f));                      \
        p_ = PFX##_add_ps(PFX##_mul_ps(PFX##_mul_ps(p_, r_), r_), PFX##_add_ps(r_, PFX##_set1_ps(1.0f))); \
        const VI e_ = PFX##_slli_epi32(PFX##_add_epi32(n_, PFX##_set1_epi32(127)), 23);                \
        out = PFX##_mul_ps(p_, CAST(e_));                                                              \
    } while (0)

__attribute__((target("avx2"), always_inline)) static inline __m256 attn__exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.37626f));
    __m256 y;
    ATTN__EXP_CEPHES(_mm256, __m256, __m256i, _mm256_castsi256_ps, x, y);
    return _mm256_andnot_ps(underflow, y);
}

/* attn__exp8 sixteen lanes at a time (AVX-512F): the same plain mul/add in
 * the same order lane by lane, so each lane is the bits attn__exp8 gives it
 * (the underflow lanes zeroed by mask instead of andnot: +0 either way). */
__attribute__((target("avx2,avx512f"), always_inline)) static inline __m512 attn__exp16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.33654f);
    const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.37626f));
    __m512 y;
    ATTN__EXP_CEPHES(_mm512, __m512, __m512i, _mm512_castsi512_ps, x, y);
    return _mm512_maskz_mov_ps((__mmask16)~underflow, y);
}

/* The same polynomial with fused multiply-adds (AVX2 + FMA): fewer
 * instructions, each lane within an ulp or so of attn__exp8 but not rounded
 * identically, so only for kernels that need not match softmax.c bit for bit
 * (flash.c). Same range handling: below -87.34 (and -inf) exactly 0. */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256 attn__exp8_fma(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.37626f));
    __m256i n = _mm256_cvtps_epi32(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)));
    __m256 nf = _mm256_cvtepi32_ps(n);
    __m256 r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fmadd_ps(nf, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* attn__exp8_fma sixteen lanes at a time (AVX-512F): the same operations in
 * the same order lane by lane, so each lane is the bits attn__exp8_fma gives
 * it (the underflow lanes zeroed by mask instead of andnot: +0 either way). */
__attribute__((target("avx2,fma,avx512f"), always_inline)) static inline __m512 attn__exp16_fma(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.33654f);
    const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.37626f));
    __m512i n = _mm512_cvtps_epi32(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)));
    __m512 nf = _mm512_cvtepi32_ps(n);
    __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fmadd_ps(nf, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mov_ps((__mmask16)~underflow, _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

#endif /* ATTN_VEXP_H */
