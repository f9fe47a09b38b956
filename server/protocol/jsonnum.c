/* jsonnum.c — shortest round-trip printing of float32 (Schubfach, Raffaello
 * Giulietti 2020, binary32 with 64-bit powers of ten; the digits laid out by
 * SWAR; arrays eight floats at a time with AVX2), correctly rounded parsing of
 * JSON numbers to float32 (8-byte digit runs, exact double arithmetic with a
 * midpoint check, strtof as the fallback), and nested number arrays parsed
 * into flat float arrays. The oracles (shortest %.Ng that round-trips, %.*e
 * for the closest digits; strtof) live in tests/unit/test_jsonnum.c;
 * scripts/printfloat-exhaustive.sh compares the printer, one at a time and in
 * blocks of eight, with an earlier one (Ryu) over all 2^32 floats.
 */
#include "protocol/jsonnum.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MANTISSA_BITS 23
#define EXPONENT_BITS 8
#define BIAS 127

/* POW10_G[e + 31] = ceil(10^e / 2^r), r = floor(log2(10^e)) - 63, for
 * e = -31..45: 10^e as a 64-bit significand in [2^63, 2^64), rounded up.
 * Generated with exact rational arithmetic (Python fractions); the same
 * values as Schubfach's float tables (Drachennest schubfach_32). */
static const uint64_t POW10_G[77] = {
    0x81ceb32c4b43fcf5u, 0xa2425ff75e14fc32u, 0xcad2f7f5359a3b3fu, 0xfd87b5f28300ca0eu,
    0x9e74d1b791e07e49u, 0xc612062576589ddbu, 0xf79687aed3eec552u, 0x9abe14cd44753b53u,
    0xc16d9a0095928a28u, 0xf1c90080baf72cb2u, 0x971da05074da7befu, 0xbce5086492111aebu,
    0xec1e4a7db69561a6u, 0x9392ee8e921d5d08u, 0xb877aa3236a4b44au, 0xe69594bec44de15cu,
    0x901d7cf73ab0acdau, 0xb424dc35095cd810u, 0xe12e13424bb40e14u, 0x8cbccc096f5088ccu,
    0xafebff0bcb24aaffu, 0xdbe6fecebdedd5bfu, 0x89705f4136b4a598u, 0xabcc77118461cefdu,
    0xd6bf94d5e57a42bdu, 0x8637bd05af6c69b6u, 0xa7c5ac471b478424u, 0xd1b71758e219652cu,
    0x83126e978d4fdf3cu, 0xa3d70a3d70a3d70bu, 0xcccccccccccccccdu, 0x8000000000000000u,
    0xa000000000000000u, 0xc800000000000000u, 0xfa00000000000000u, 0x9c40000000000000u,
    0xc350000000000000u, 0xf424000000000000u, 0x9896800000000000u, 0xbebc200000000000u,
    0xee6b280000000000u, 0x9502f90000000000u, 0xba43b74000000000u, 0xe8d4a51000000000u,
    0x9184e72a00000000u, 0xb5e620f480000000u, 0xe35fa931a0000000u, 0x8e1bc9bf04000000u,
    0xb1a2bc2ec5000000u, 0xde0b6b3a76400000u, 0x8ac7230489e80000u, 0xad78ebc5ac620000u,
    0xd8d726b7177a8000u, 0x878678326eac9000u, 0xa968163f0a57b400u, 0xd3c21bcecceda100u,
    0x84595161401484a0u, 0xa56fa5b99019a5c8u, 0xcecb8f27f4200f3au, 0x813f3978f8940985u,
    0xa18f07d736b90be6u, 0xc9f2c9cd04674edfu, 0xfc6f7c4045812297u, 0x9dc5ada82b70b59eu,
    0xc5371912364ce306u, 0xf684df56c3e01bc7u, 0x9a130b963a6c115du, 0xc097ce7bc90715b4u,
    0xf0bdc21abb48db21u, 0x96769950b50d88f5u, 0xbc143fa4e250eb32u, 0xeb194f8e1ae525feu,
    0x92efd1b8d0cf37bfu, 0xb7abc627050305aeu, 0xe596b7b0c643c71au, 0x8f7e32ce7bea5c70u,
    0xb35dbf821ae4f38cu};

static const char DIGIT_PAIRS[200] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* floor(x / 2^n) for negative x too (no implementation-defined shift). */
static inline int32_t floor_shift(int32_t x, int n) { return x >= 0 ? x >> n : ~(~x >> n); }

/* floor(log10(2^q)), or floor(log10(3/4 * 2^q)) with three_quarters, for
 * |q| <= 160 (checked exhaustively against exact arithmetic). */
static inline int32_t floor_log10_pow2(int32_t q, int three_quarters)
{
    return floor_shift(q * 1262611 - (three_quarters ? 524031 : 0), 22);
}

/* floor(log2(10^e)) for |e| <= 60. */
static inline int32_t floor_log2_pow10(int32_t e) { return floor_shift(e * 1741647, 19); }

/* cp * g / 2^64 rounded to odd: the integer part with its lowest bit set when
 * the fraction is not (up to the overestimate of g) zero. In 64-bit halves:
 * g * cp / 2^32 = (g >> 32) * cp + ((g mod 2^32) * cp >> 32), floor-exact. */
static inline uint32_t round_to_odd(uint64_t g, uint32_t cp)
{
    const uint64_t lo = (uint64_t)(uint32_t)g * cp, hi = (g >> 32) * cp;
    const uint64_t mid = hi + (lo >> 32);
    const uint32_t y1 = (uint32_t)(mid >> 32), y0 = (uint32_t)mid;
    return y1 | (y0 > 1);
}

/* The shortest decimal d * 10^e in the rounding interval of a finite, nonzero
 * float with biased exponent ieee_exp and fraction ieee_frac, the closest to
 * it among those (ties to even d): Schubfach (Raffaello Giulietti, "The
 * Schubfach way to render doubles", 2020; float32 as in Alexander Bolz's
 * Drachennest). With 10^k <= 2^q < 10^(k+1), the interval holds at most one
 * multiple of 10 * 10^k (tried first: one digit shorter) and one or two of
 * 10^k (then the closer one); trailing zeros are stripped at the end. */
static void shortest(uint32_t ieee_frac, uint32_t ieee_exp, uint32_t *digits, int32_t *exp10)
{
    uint32_t c;
    int32_t q;
    if (ieee_exp == 0) {
        c = ieee_frac;
        q = 1 - BIAS - MANTISSA_BITS;
    } else {
        c = (1u << MANTISSA_BITS) | ieee_frac;
        q = (int32_t)ieee_exp - BIAS - MANTISSA_BITS;
    }
    const int even = (c & 1) == 0; /* a round-half-even reader keeps the bounds */
    const int closer_below = ieee_frac == 0 && ieee_exp > 1; /* 2^n: the gap below is half */
    const uint32_t cbl = 4 * c - 2 + (uint32_t)closer_below, cb = 4 * c, cbr = 4 * c + 2;
    const int32_t k = floor_log10_pow2(q, closer_below);
    const int h = q + floor_log2_pow10(-k) + 1; /* 1..4 */
    const uint64_t g = POW10_G[-k + 31];
    const uint32_t vbl = round_to_odd(g, cbl << h), vb = round_to_odd(g, cb << h),
                   vbr = round_to_odd(g, cbr << h);
    const uint32_t lower = vbl + !even, upper = vbr - !even;

    uint32_t d;
    int32_t e = k;
    const uint32_t s = vb / 4;
    const uint32_t sp = s / 10;
    const int up_in = lower <= 40 * sp, wp_in = 40 * sp + 40 <= upper;
    if (s >= 10 && up_in != wp_in) {
        d = sp + (uint32_t)wp_in;
        e = k + 1;
    } else {
        const int u_in = lower <= 4 * s, w_in = 4 * s + 4 <= upper;
        if (u_in != w_in)
            d = s + (uint32_t)w_in;
        else /* both: the closer, ties (vb at the midpoint 4s + 2) to even */
            d = s + (vb > 4 * s + 2 || (vb == 4 * s + 2 && (s & 1)));
    }
    while (d % 10 == 0) {
        d /= 10;
        e++;
    }
    *digits = d;
    *exp10 = e;
}

/* Decimal digits of v: floor(log10(2) * bit length) estimates within one,
 * one comparison with the power of ten settles it (~6 instructions). */
static const uint32_t POW10_U32[10] = {1u,      10u,      100u,      1000u,      10000u,
                                       100000u, 1000000u, 10000000u, 100000000u, 1000000000u};

static inline int decimal_length(uint32_t v)
{
    const int bits = 32 - __builtin_clz(v | 1);
    const int n = (bits * 1233) >> 12; /* 1233 / 4096 ~ log10(2) */
    return n + (n < 10 && v >= POW10_U32[n]);
}

/* The 8 decimal digits of v < 10^8, zero-padded, as 8 ASCII bytes in memory
 * order (SWAR: two 4-digit halves in 32-bit lanes, /100 by 10486 >> 20 in
 * each, then four 2-digit lanes of 16 bits, /10 by 103 >> 10 in each; both
 * multiplications are exact for the lane's range: < 10^4 and < 100). */
static inline uint64_t eight_digits(uint32_t v)
{
    const uint64_t halves = (uint64_t)(v / 10000) | ((uint64_t)(v % 10000) << 32);
    const uint64_t hundreds = ((halves * 10486u) >> 20) & 0x0000007f0000007fu;
    const uint64_t pairs = hundreds | ((halves - hundreds * 100u) << 16);
    const uint64_t tens = ((pairs * 103u) >> 10) & 0x000f000f000f000fu;
    uint64_t ascii = (tens | ((pairs - tens * 10u) << 8)) | 0x3030303030303030u;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    ascii = __builtin_bswap64(ascii);
#endif
    return ascii;
}

/* The n significant digits of v (n = decimal_length(v) <= 9) left-aligned in
 * dig[0..9), dig[n..16) '0': v * 10^(9-n) as one digit and eight_digits. */
static inline void left_digits(uint32_t v, int n, char dig[16])
{
    const uint32_t v9 = v * POW10_U32[9 - n];
    const uint32_t first = v9 / 100000000u;
    const uint64_t rest = eight_digits(v9 - first * 100000000u);
    dig[0] = (char)('0' + first);
    memcpy(dig + 1, &rest, 8);
    memcpy(dig + 9, "0000000", 7);
}

/* The text of sign, the n significant digits dig[0..n) (dig[n..16) '0') and
 * the decimal exponent exp of the value dig * 10^exp, written at p with
 * fixed-size copies that may write up to 32 bytes (the caller's scratch).
 * Plain notation unless exponent notation is shorter ("d[.ddd]e[-]x[x]",
 * n + (n > 1) + 2 + (sci < 0) + (|sci| >= 10) bytes; plain on a tie):
 * digits.digits always; "0.", -sci - 1 zeros, digits while sci >= -3 (-2 for
 * one digit); digits and exp zeros while exp <= 2 + (n > 1) + (sci >= 10).
 * Returns the length. */
static inline int layout(uint32_t sign, int n, int32_t exp, const char dig[16], char *p)
{
    const int32_t sci = exp + n - 1; /* value = d.ddd * 10^sci */
    int fixed_len = 0;
    if (exp < 0 && sci >= 0)
        fixed_len = n + 1;
    else if (sci < 0 && sci >= -2 - (n > 1))
        fixed_len = n + 1 - sci;
    else if (exp >= 0 && exp <= 2 + (n > 1) + (sci >= 10))
        fixed_len = n + exp;

    char *const start = p;
    *p = '-';
    p += sign;
    if (fixed_len) {
        if (exp >= 0) {
            memcpy(p, dig, 16); /* dig[n..] are the exp trailing zeros */
        } else if (sci >= 0) {
            const int int_len = sci + 1; /* < n <= 9: the tail is <= 8 digits */
            memcpy(p, dig, 16);
            p[int_len] = '.';
            memcpy(p + int_len + 1, dig + int_len, 8);
        } else {
            memcpy(p, "0.00", 4);
            memcpy(p + 1 - sci, dig, 16);
        }
        return (int)sign + fixed_len;
    }
    /* d[.ddd]e[-]x[x] */
    p[0] = dig[0];
    p[1] = '.';
    memcpy(p + 2, dig + 1, 8);
    char *q = p + n + (n > 1);
    *q++ = 'e';
    int32_t e = sci;
    *q = '-';
    q += e < 0;
    e = e < 0 ? -e : e;
    if (e >= 10) {
        memcpy(q, DIGIT_PAIRS + 2 * e, 2);
        q += 2;
    } else {
        *q++ = (char)('0' + e);
    }
    return (int)(q - start);
}

/* attnd_json_print_float's text at p, which may be overwritten for 32 bytes. */
static inline int print_float32(float v, char *p)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    const uint32_t sign = bits >> 31;
    const uint32_t ieee_exp = (bits >> MANTISSA_BITS) & ((1u << EXPONENT_BITS) - 1);
    const uint32_t ieee_frac = bits & ((1u << MANTISSA_BITS) - 1);
    if (ieee_exp == (1u << EXPONENT_BITS) - 1)
        return -1; /* NaN or infinity */
    if (ieee_exp == 0 && ieee_frac == 0) {
        memcpy(p, "-0.0", 4);
        return sign ? 4 : (p[0] = '0', 1);
    }
    uint32_t digits;
    int32_t exp;
    shortest(ieee_frac, ieee_exp, &digits, &exp);
    const int n = decimal_length(digits);
    char dig[16];
    left_digits(digits, n, dig);
    return layout(sign, n, exp, dig, p);
}

int attnd_json_print_float(float v, char *out)
{
    char text[40];
    const int len = print_float32(v, text);
    if (len > 0)
        memcpy(out, text, ATTND_FLOAT_TEXT_MAX);
    return len;
}

/* x[0..n) one at a time, each followed by ','; the length, or -1. */
static ptrdiff_t print_floats_scalar(const float *x, size_t n, char *out)
{
    char *p = out;
    for (size_t i = 0; i < n; i++) {
        const int w = print_float32(x[i], p);
        if (w < 0)
            return -1;
        p += w;
        *p++ = ',';
    }
    return p - out;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* Eight floats at a time with AVX2 (compiled for it by attribute, chosen at run
 * time): the same Schubfach steps as shortest(), decimal_length() and
 * left_digits() in 32-bit lanes, the products with the 64-bit powers of ten in
 * 64-bit lanes (lanes 0,1,4,5 and 2,3,6,7, the order unpack and shuffle_ps
 * give), the digits as 16-byte records like left_digits' dig[], then the texts
 * one at a time. Blocks with a zero, subnormal, infinite or NaN lane go to the
 * scalar path. */
#include <immintrin.h>
#define AVX2_FN __attribute__((target("avx2")))
#define AVX2_INLINE __attribute__((target("avx2"), always_inline)) static inline

/* The vector constants, one 32-byte row each, read as memory operands (see
 * print_floats_avx2: built from registers per use they cost three instructions). */
enum {
    K_EXP_FIELD, K_FRAC_MASK, K_HIDDEN, K_BIAS, K_ONE, K_TWO, K_FOUR, K_NINE, K_FORTY,
    K_NOT_ONE, K_LOG10_2, K_LOG10_3_4, K_LOG2_10, K_G_INDEX, K_LANE_ORDER, K_DIV10_64,
    K_INV5, K_TENTH_MAX, K_POW10_1, K_POW10_2, K_POW10_3, K_POW10_4, K_POW10_5, K_POW10_6,
    K_POW10_7, K_POW10_8, K_DIV1E8_64, K_1E8, K_DIV1E4_64, K_1E4, K_DIV100, K_100,
    K_DIV10_16, K_10_16, K_ASCII0, K_BYTE0, K_PAD, K_MINUS4, K_COUNT
};
#define K8(v) {(int32_t)(v), (int32_t)(v), (int32_t)(v), (int32_t)(v), \
               (int32_t)(v), (int32_t)(v), (int32_t)(v), (int32_t)(v)}
#define K4X2(lo, hi) {(int32_t)(lo), (int32_t)(hi), (int32_t)(lo), (int32_t)(hi), \
                      (int32_t)(lo), (int32_t)(hi), (int32_t)(lo), (int32_t)(hi)}
static const int32_t PRINT8_K[K_COUNT][8] __attribute__((aligned(32))) = {
    [K_EXP_FIELD] = K8(0xff),          [K_FRAC_MASK] = K8((1u << MANTISSA_BITS) - 1),
    [K_HIDDEN] = K8(1u << MANTISSA_BITS), [K_BIAS] = K8(BIAS + MANTISSA_BITS),
    [K_ONE] = K8(1),                   [K_TWO] = K8(2),
    [K_FOUR] = K8(4),                  [K_NINE] = K8(9),
    [K_FORTY] = K8(40),                [K_NOT_ONE] = K8(0xfffffffeu),
    [K_LOG10_2] = K8(1262611),         [K_LOG10_3_4] = K8(524031),
    [K_LOG2_10] = K8(1741647),         [K_G_INDEX] = K8(31),
    [K_LANE_ORDER] = {0, 1, 4, 5, 2, 3, 6, 7},
    [K_DIV10_64] = K4X2(0xcccccccdu, 0), [K_INV5] = K8(0xcccccccdu),
    [K_TENTH_MAX] = K8(0x19999999),
    [K_POW10_1] = K8(10 - 1),          [K_POW10_2] = K8(100 - 1),
    [K_POW10_3] = K8(1000 - 1),        [K_POW10_4] = K8(10000 - 1),
    [K_POW10_5] = K8(100000 - 1),      [K_POW10_6] = K8(1000000 - 1),
    [K_POW10_7] = K8(10000000 - 1),    [K_POW10_8] = K8(100000000 - 1),
    [K_DIV1E8_64] = K4X2(0x55e63b89u, 0), [K_1E8] = K8(100000000),
    [K_DIV1E4_64] = K4X2(0xd1b71759u, 0), [K_1E4] = K8(10000),
    [K_DIV100] = K8(10486),            [K_100] = K8(100),
    [K_DIV10_16] = K8(103 | (103u << 16)), [K_10_16] = K8(10 | (10u << 16)),
    [K_ASCII0] = K8(0x30303030),       [K_BYTE0] = {0xff, 0, 0, 0, 0xff, 0, 0, 0},
    [K_PAD] = K4X2(0x30303030, 0x002e2d30), /* "00000-.": record bytes 9..15 */
    [K_MINUS4] = K8(-4),
};
#define K(name) _mm256_load_si256((const __m256i *)k[name])

/* a <= b as unsigned 32-bit lanes: all ones or zero. */
AVX2_INLINE __m256i le_u32(__m256i a, __m256i b) { return _mm256_cmpeq_epi32(_mm256_max_epu32(a, b), b); }

/* floor(v * m / 2^shift) in 32-bit lanes, m in the even lanes of mm (shift >=
 * 32; m, shift the compiler's constants for an unsigned 32-bit division). */
AVX2_INLINE __m256i mulshift_u32(__m256i v, __m256i mm, int shift)
{
    const __m256i even = _mm256_srli_epi64(_mm256_mul_epu32(v, mm), shift);
    const __m256i odd = _mm256_srli_epi64(_mm256_mul_epu32(_mm256_srli_epi64(v, 32), mm), shift - 32);
    return _mm256_blend_epi32(even, odd, 0xaa);
}

/* round_to_odd(g, cp) in 8 lanes; ga holds g of lanes 0,1,4,5, gb of 2,3,6,7. */
AVX2_INLINE __m256i round_to_odd8(const int32_t (*k)[8], __m256i ga, __m256i gb, __m256i cp)
{
    const __m256i z = _mm256_setzero_si256();
    const __m256i ca = _mm256_unpacklo_epi32(cp, z), cb = _mm256_unpackhi_epi32(cp, z);
    const __m256i ma = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(ga, 32), ca),
                                        _mm256_srli_epi64(_mm256_mul_epu32(ga, ca), 32));
    const __m256i mb = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(gb, 32), cb),
                                        _mm256_srli_epi64(_mm256_mul_epu32(gb, cb), 32));
    const __m256 fa = _mm256_castsi256_ps(ma), fb = _mm256_castsi256_ps(mb);
    const __m256i y1 = _mm256_castps_si256(_mm256_shuffle_ps(fa, fb, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m256i y0 = _mm256_castps_si256(_mm256_shuffle_ps(fa, fb, _MM_SHUFFLE(2, 0, 2, 0)));
    const __m256i y0_small = _mm256_cmpeq_epi32(_mm256_and_si256(y0, K(K_NOT_ONE)), z);
    return _mm256_or_si256(y1, _mm256_andnot_si256(y0_small, K(K_ONE)));
}

/* The shortest digits (*d) and decimal exponents (*e) of eight normal floats
 * (ieee_exp 1..254) as shortest() computes them. */
AVX2_INLINE void shortest8(const int32_t (*k)[8], __m256i bits, __m256i *d_out, __m256i *e_out)
{
    const __m256i z = _mm256_setzero_si256();
    const __m256i ieee_exp = _mm256_and_si256(_mm256_srli_epi32(bits, MANTISSA_BITS), K(K_EXP_FIELD));
    const __m256i frac = _mm256_and_si256(bits, K(K_FRAC_MASK));
    const __m256i c = _mm256_or_si256(frac, K(K_HIDDEN));
    const __m256i q = _mm256_sub_epi32(ieee_exp, K(K_BIAS));
    const __m256i odd = _mm256_and_si256(c, K(K_ONE)); /* !even */
    const __m256i closer = _mm256_andnot_si256(_mm256_cmpeq_epi32(ieee_exp, K(K_ONE)), _mm256_cmpeq_epi32(frac, z));
    const __m256i cb = _mm256_slli_epi32(c, 2);
    const __m256i cbl = _mm256_sub_epi32(_mm256_sub_epi32(cb, K(K_TWO)), closer);
    const __m256i cbr = _mm256_add_epi32(cb, K(K_TWO));
    const __m256i k10 = _mm256_srai_epi32(_mm256_sub_epi32(_mm256_mullo_epi32(q, K(K_LOG10_2)),
                                                           _mm256_and_si256(closer, K(K_LOG10_3_4))), 22);
    const __m256i h = _mm256_add_epi32(
        _mm256_add_epi32(q, K(K_ONE)),
        _mm256_srai_epi32(_mm256_mullo_epi32(_mm256_sub_epi32(z, k10), K(K_LOG2_10)), 19));
    const __m256i idx = _mm256_permutevar8x32_epi32(_mm256_sub_epi32(K(K_G_INDEX), k10), K(K_LANE_ORDER));
    const long long *table = (const long long *)POW10_G;
    const __m256i ga = _mm256_i32gather_epi64(table, _mm256_castsi256_si128(idx), 8);
    const __m256i gb = _mm256_i32gather_epi64(table, _mm256_extracti128_si256(idx, 1), 8);
    const __m256i vbl = round_to_odd8(k, ga, gb, _mm256_sllv_epi32(cbl, h));
    const __m256i vb = round_to_odd8(k, ga, gb, _mm256_sllv_epi32(cb, h));
    const __m256i vbr = round_to_odd8(k, ga, gb, _mm256_sllv_epi32(cbr, h));
    const __m256i lower = _mm256_add_epi32(vbl, odd), upper = _mm256_sub_epi32(vbr, odd);

    const __m256i s = _mm256_srli_epi32(vb, 2);
    const __m256i sp = mulshift_u32(s, K(K_DIV10_64), 35); /* s / 10 */
    const __m256i sp40 = _mm256_mullo_epi32(sp, K(K_FORTY));
    const __m256i up_in = le_u32(lower, sp40);
    const __m256i wp_in = le_u32(_mm256_add_epi32(sp40, K(K_FORTY)), upper);
    const __m256i shorter = _mm256_and_si256(_mm256_cmpgt_epi32(s, K(K_NINE)), _mm256_xor_si256(up_in, wp_in));
    const __m256i s4 = _mm256_slli_epi32(s, 2);
    const __m256i u_in = le_u32(lower, s4);
    const __m256i w_in = le_u32(_mm256_add_epi32(s4, K(K_FOUR)), upper);
    const __m256i mid = _mm256_add_epi32(s4, K(K_TWO));
    const __m256i s_odd = _mm256_cmpeq_epi32(_mm256_and_si256(s, K(K_ONE)), K(K_ONE));
    const __m256i not_above = le_u32(vb, mid);
    const __m256i round_up = _mm256_or_si256(_mm256_xor_si256(not_above, _mm256_cmpeq_epi32(z, z)),
                                             _mm256_and_si256(_mm256_cmpeq_epi32(vb, mid), s_odd));
    const __m256i inc = _mm256_blendv_epi8(round_up, w_in, _mm256_xor_si256(u_in, w_in));
    __m256i d = _mm256_blendv_epi8(_mm256_sub_epi32(s, inc), _mm256_sub_epi32(sp, wp_in), shorter);
    __m256i e = _mm256_sub_epi32(k10, shorter);

    /* Trailing zeros: d is a multiple of 10 iff ror(d * 5^-1 mod 2^32, 1) <=
     * (2^32 - 1) / 10, and that is then d / 10. */
    for (;;) {
        const __m256i t = _mm256_mullo_epi32(d, K(K_INV5));
        const __m256i r = _mm256_or_si256(_mm256_srli_epi32(t, 1), _mm256_slli_epi32(t, 31));
        const __m256i tens = le_u32(r, K(K_TENTH_MAX));
        if (_mm256_testz_si256(tens, tens))
            break;
        d = _mm256_blendv_epi8(d, r, tens);
        e = _mm256_sub_epi32(e, tens);
    }
    *d_out = d;
    *e_out = e;
}

/* decimal_length(d) in each lane (d < 10^9): 1 + how many of 10 .. 10^8 are <= d. */
AVX2_INLINE __m256i decimal_length8(const int32_t (*k)[8], __m256i d)
{
    const __m256i a = _mm256_add_epi32(_mm256_add_epi32(_mm256_cmpgt_epi32(d, K(K_POW10_1)),
                                                        _mm256_cmpgt_epi32(d, K(K_POW10_2))),
                                       _mm256_add_epi32(_mm256_cmpgt_epi32(d, K(K_POW10_3)),
                                                        _mm256_cmpgt_epi32(d, K(K_POW10_4))));
    const __m256i b = _mm256_add_epi32(_mm256_add_epi32(_mm256_cmpgt_epi32(d, K(K_POW10_5)),
                                                        _mm256_cmpgt_epi32(d, K(K_POW10_6))),
                                       _mm256_add_epi32(_mm256_cmpgt_epi32(d, K(K_POW10_7)),
                                                        _mm256_cmpgt_epi32(d, K(K_POW10_8))));
    return _mm256_sub_epi32(K(K_ONE), _mm256_add_epi32(a, b));
}

/* The 4-digit values in the 32-bit lanes of x (< 10^4 each) as 4 ASCII bytes
 * per lane in memory order: eight_digits' steps, lane by lane. */
AVX2_INLINE __m256i four_digits8(const int32_t (*k)[8], __m256i x)
{
    const __m256i hundreds = _mm256_srli_epi32(_mm256_mullo_epi32(x, K(K_DIV100)), 20);
    const __m256i pairs = _mm256_or_si256(
        hundreds, _mm256_slli_epi32(_mm256_sub_epi32(x, _mm256_mullo_epi32(hundreds, K(K_100))), 16));
    const __m256i tens = _mm256_srli_epi16(_mm256_mullo_epi16(pairs, K(K_DIV10_16)), 10);
    const __m256i ones = _mm256_sub_epi16(pairs, _mm256_mullo_epi16(tens, K(K_10_16)));
    return _mm256_or_si256(_mm256_or_si256(tens, _mm256_slli_epi16(ones, 8)), K(K_ASCII0));
}

/* Two of left_digits' 16-byte records (first digit, 8 more, then "00000-.",
 * which layout() never shows and PLAIN_SHUFFLE takes '0', '-' and '.' from) in
 * the 128-bit halves: the 8 digits from the low (hi = 0) or high 64 bits of
 * each half of rest, the first digits from byte 0 of the halves of first. */
#define DIG_RECORDS(rest, hi, first)                                                               \
    _mm256_or_si256(_mm256_bslli_epi128((hi) ? _mm256_unpackhi_epi64((rest), K(K_PAD))            \
                                             : _mm256_unpacklo_epi64((rest), K(K_PAD)), 1),        \
                    _mm256_and_si256((first), K(K_BYTE0)))

/* layout()'s "0.0ddd" case as one byte shuffle of a record: row 3 * sign +
 * zeros (after the point, 0..2) gives "-"?, "0.", the zeros, then the digits. */
static const uint8_t PLAIN_SHUFFLE[6][16] __attribute__((aligned(16))) = {
    {9, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13},
    {9, 15, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
    {9, 15, 9, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
    {14, 9, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
    {14, 9, 15, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
    {14, 9, 15, 9, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
};

/* The 128-bit halves of x at rec (lane i) and rec + 64 (lane i + 4). */
AVX2_INLINE void store_halves(char *rec, __m256i x)
{
    _mm_store_si128((__m128i *)rec, _mm256_castsi256_si128(x));
    _mm_store_si128((__m128i *)(rec + 64), _mm256_extracti128_si256(x, 1));
}

/* A "0.0ddd" text and its ',' at p from the record at dig: PLAIN_SHUFFLE's row
 * at byte offset row, len bytes before the ','. The byte after the ','. */
AVX2_INLINE char *plain_text(char *p, const char *dig, int32_t row, int32_t len)
{
    const __m128i ctl = _mm_load_si128((const __m128i *)(PLAIN_SHUFFLE[0] + row));
    _mm_storeu_si128((__m128i *)p, _mm_shuffle_epi8(_mm_load_si128((const __m128i *)dig), ctl));
    p[len] = ',';
    return p + len + 1;
}

/* Eight normal floats (bits): digits, lengths, exponents in lanes, then the
 * texts one by one, each followed by ','. Returns the bytes written. */
AVX2_INLINE size_t print8(const int32_t (*k)[8], __m256i bits, char *out)
{
    __m256i d, e;
    shortest8(k, bits, &d, &e);
    const __m256i n = decimal_length8(k, d);
    const __m256i v9 = _mm256_mullo_epi32(
        d, _mm256_i32gather_epi32((const int *)POW10_U32, _mm256_sub_epi32(K(K_NINE), n), 4));
    const __m256i first = mulshift_u32(v9, K(K_DIV1E8_64), 57); /* v9 / 10^8 */
    const __m256i rest = _mm256_sub_epi32(v9, _mm256_mullo_epi32(first, K(K_1E8)));
    const __m256i hi4 = mulshift_u32(rest, K(K_DIV1E4_64), 45); /* rest / 10^4 */
    const __m256i lo4 = _mm256_sub_epi32(rest, _mm256_mullo_epi32(hi4, K(K_1E4)));
    const __m256i a = four_digits8(k, _mm256_unpacklo_epi32(hi4, lo4)); /* lanes 0,1,4,5 */
    const __m256i b = four_digits8(k, _mm256_unpackhi_epi32(hi4, lo4)); /* lanes 2,3,6,7 */
    const __m256i f = _mm256_add_epi32(first, K(K_ASCII0));
    /* rec + 16 * i: the record of lane i (the halves of each pair stored apart) */
    char rec[8 * 16] __attribute__((aligned(32)));
    store_halves(rec, DIG_RECORDS(a, 0, f));
    store_halves(rec + 16, DIG_RECORDS(a, 1, _mm256_bsrli_epi128(f, 4)));
    store_halves(rec + 32, DIG_RECORDS(b, 0, _mm256_bsrli_epi128(f, 8)));
    store_halves(rec + 48, DIG_RECORDS(b, 1, _mm256_bsrli_epi128(f, 12)));
    /* Lanes in layout()'s "0.0ddd" case (-3 <= sci <= -1, -2 <= sci for one
     * digit): the row of PLAIN_SHUFFLE (as a byte offset) and the length. */
    const __m256i z = _mm256_setzero_si256();
    const __m256i sign = _mm256_srli_epi32(bits, 31);
    const __m256i sci = _mm256_sub_epi32(_mm256_add_epi32(e, n), K(K_ONE));
    const __m256i plain = _mm256_and_si256(
        _mm256_cmpgt_epi32(z, sci),
        _mm256_cmpgt_epi32(sci, _mm256_sub_epi32(K(K_MINUS4), _mm256_cmpeq_epi32(n, K(K_ONE)))));
    const __m256i row = _mm256_sub_epi32(_mm256_add_epi32(sign, _mm256_slli_epi32(sign, 1)),
                                         _mm256_add_epi32(sci, K(K_ONE)));
    int32_t n8[8], e8[8], sign8[8], row8[8], len8[8];
    _mm256_storeu_si256((__m256i *)n8, n);
    _mm256_storeu_si256((__m256i *)e8, e);
    _mm256_storeu_si256((__m256i *)sign8, sign);
    _mm256_storeu_si256((__m256i *)row8, _mm256_slli_epi32(row, 4));
    _mm256_storeu_si256((__m256i *)len8, _mm256_add_epi32(_mm256_sub_epi32(_mm256_add_epi32(sign, n), sci), K(K_ONE)));
    const unsigned plain_lanes = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(plain));
    char *p = out;
    if (plain_lanes == 0xff) { /* the usual block */
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            p = plain_text(p, rec + 16 * i, row8[i], len8[i]);
        return (size_t)(p - out);
    }
    for (int i = 0; i < 8; i++) {
        if (plain_lanes >> i & 1) {
            p = plain_text(p, rec + 16 * i, row8[i], len8[i]);
        } else {
            p += layout((uint32_t)sign8[i], n8[i], e8[i], rec + 16 * i, p);
            *p++ = ',';
        }
    }
    return (size_t)(p - out);
}

/* Blocks of eight through print8 unless a lane is zero, subnormal, infinite
 * or NaN; those blocks and the tail (< 8) one at a time. */
AVX2_FN static ptrdiff_t print_floats_avx2(const float *x, size_t n, char *out)
{
    /* The constants' address through an empty asm: GCC cannot fold the loads
     * back into constants (which it would rebuild per use, 3 instructions each). */
    const int32_t (*k)[8] = PRINT8_K;
    __asm__("" : "+r"(k));
    char *p = out;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(x + i));
        const __m256i ieee_exp = _mm256_and_si256(_mm256_srli_epi32(bits, MANTISSA_BITS), K(K_EXP_FIELD));
        const __m256i special = _mm256_or_si256(_mm256_cmpeq_epi32(ieee_exp, _mm256_setzero_si256()),
                                                _mm256_cmpeq_epi32(ieee_exp, K(K_EXP_FIELD)));
        if (_mm256_testz_si256(special, special)) {
            p += print8(k, bits, p);
        } else {
            const ptrdiff_t w = print_floats_scalar(x + i, 8, p);
            if (w < 0)
                return -1;
            p += w;
        }
    }
    const ptrdiff_t w = print_floats_scalar(x + i, n - i, p);
    return w < 0 ? -1 : (p - out) + w;
}
#undef K
#undef K8
#undef K4X2
#undef DIG_RECORDS

static int use_avx2(void) { return __builtin_cpu_supports("avx2"); }
#else
static int use_avx2(void) { return 0; }
#define print_floats_avx2 print_floats_scalar
#endif

ptrdiff_t attnd_json_print_floats(const float *x, size_t n, char *out)
{
    const ptrdiff_t len = use_avx2() ? print_floats_avx2(x, n, out) : print_floats_scalar(x, n, out);
    return len > 0 ? len - 1 : len; /* no ',' after the last */
}

int attnd_json_double_to_float(double d, float *out)
{
    /* FLT_MAX + half an ulp (2^103): from here on, round-to-nearest gives inf.
     * The comparison is false for NaN. */
    if (!(fabs(d) < 0x1.ffffffp+127))
        return -1;
    *out = (float)d;
    return 0;
}

/* ================================================================ parsing */

/* 10^0 .. 10^22: every one exact in double. */
static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

enum { CONV_OK = 0, CONV_UNSURE = 1, CONV_RANGE = 2 };

/* w * 10^e (0 < w < 10^15, |e| <= 22) rounded to float32 through ONE
 * correctly rounded double operation (both operands are exact). Rounding that
 * double to float is then exact unless the double is itself a midpoint between
 * two floats (the text may lie on either side of it: CONV_UNSURE). The result
 * lies in [1e-22, 1e37], where floats are normal: a midpoint is a double whose
 * 29 fraction bits below float precision are exactly 1000...0. */
static int conv_exact(uint64_t w, int e, float *out)
{
    double d = e < 0 ? (double)w / POW10[-e] : (double)w * POW10[e];
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    if ((bits & 0x1fffffffu) == 0x10000000u)
        return CONV_UNSURE;
    *out = (float)d;
    return CONV_OK;
}

/* The JSON number grammar from s: end of the number, or NULL. Collects up to
 * 19 significant digits in *w, the power of ten in *e, and whether nonzero
 * digits were dropped (*inexact). Integer-only literals are flagged. */
static const char *scan_number(const char *s, const char *end, uint64_t *w, int *e,
                               int *inexact, int *neg)
{
    const char *p = s;
    uint64_t m = 0;
    int nd = 0, exp = 0, dropped = 0;
    *neg = p < end && *p == '-';
    p += *neg;
    if (p >= end || *p < '0' || *p > '9')
        return NULL;
    if (*p == '0') {
        p++;
    } else {
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            if (nd < 19) {
                m = m * 10 + (uint64_t)(*p - '0');
                nd++;
            } else {
                exp += exp < 1000000; /* clamped: such text goes to strtof */
                dropped |= *p != '0';
            }
        }
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            if (nd < 19) {
                m = m * 10 + (uint64_t)(*p - '0');
                nd += m != 0; /* leading zeros of 0.000x are not significant */
                exp -= exp > -1000000;
            } else {
                dropped |= *p != '0';
            }
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = p < end && (*p == '-' || *p == '+') ? *p++ == '-' : 0;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        int x = 0;
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if (x < 100000)
                x = x * 10 + (*p - '0');
        exp += eneg ? -x : x;
    }
    *w = m;
    *e = exp;
    *inexact = dropped;
    return p;
}

/* 10^0 .. 10^10: every one exact in float (5^10 < 2^24). */
static const float POW10F[11] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f};

/* 10^0 .. 10^8 as integers, for appending a run of digits to a significand. */
static const uint64_t POW10_U64[9] = {1u,      10u,      100u,      1000u,     10000u,
                                      100000u, 1000000u, 10000000u, 100000000u};

/* 8 bytes from p as a little-endian word: byte 0 is p[0]. */
static inline uint64_t load8(const char *p)
{
    uint64_t x;
    memcpy(&x, p, sizeof x);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = __builtin_bswap64(x);
#endif
    return x;
}

/* How many of the 8 bytes of d = load8 - '0' per byte are digit values
 * (< 10) before the first that is not: a byte has its top bit set in d + 0x76
 * or in d iff it is >= 10 or wrapped below '0'. A carry or borrow leaving a
 * non-digit byte only disturbs the bytes after it. */
static inline int leading_digits8(uint64_t d)
{
    const uint64_t nondigit = ((d + 0x7676767676767676u) | d) & 0x8080808080808080u;
    return nondigit ? __builtin_ctzll(nondigit) >> 3 : 8;
}

/* The value of 8 digit values (0..9, byte 0 the most significant digit):
 * pairs, then quads, then the 8 digits, in three multiplications (Lemire). */
static inline uint32_t digits8_value(uint64_t d)
{
    d = d * 10 + (d >> 8);
    d = ((d & 0x000000ff000000ffu) * (100u + (1000000ull << 32)) +
         ((d >> 16) & 0x000000ff000000ffu) * (1u + (10000ull << 32))) >> 32;
    return (uint32_t)d;
}

/* The digits at p appended to *m (wrapping past 19 digits: the caller counts
 * them): 8 bytes at a time while 8 are readable, then one by one. The first
 * byte after them. */
static inline const char *append_digits(const char *p, const char *end, uint64_t *m)
{
    uint64_t v = *m;
    while (end - p >= 8) {
        const uint64_t d = load8(p) - 0x3030303030303030u;
        const int nd = leading_digits8(d);
        if (nd > 0) /* the nd digits moved to the top: leading zero digits below */
            v = v * POW10_U64[nd] + digits8_value(d << (8 * (8 - nd)));
        p += nd;
        if (nd < 8) {
            *m = v;
            return p;
        }
    }
    for (; p < end && (unsigned)(*p - '0') < 10; p++)
        v = v * 10 + (uint64_t)(*p - '0');
    *m = v;
    return p;
}

/* The common shape, -?int(.frac)? with no exponent and at most 19 digits, as
 * *w * 10^-*nf: the end of the number, or NULL for anything else (scan_number
 * then decides). The digit runs are read 8 bytes at a time (append_digits),
 * none of scan_number's bookkeeping. */
static inline __attribute__((always_inline)) const char *scan_simple(const char *s, const char *end,
                                                                     uint64_t *w, int *nf, int *neg)
{
    const char *p = s;
    uint64_t m = 0;
    *neg = p < end && *p == '-';
    p += *neg;
    const char *first = p;
    if (p < end && *p == '0')
        p++;
    else
        p = append_digits(p, end, &m);
    if (p == first)
        return NULL;
    const char *int_end = p;
    int frac = 0;
    if (p < end && *p == '.') {
        p = append_digits(p + 1, end, &m);
        frac = (int)(p - int_end - 1);
        if (frac == 0)
            return NULL; /* "1." */
    }
    *nf = frac;
    if ((p < end && (*p | 0x20) == 'e') || (int_end - first) + frac > 19)
        return NULL; /* m may have wrapped: unused */
    *w = m;
    return p;
}

/* strtof on a NUL-terminated copy of [s, p): the slow, always-right path. */
static int conv_strtof(const char *s, const char *p, float *out)
{
    char buf[64];
    size_t n = (size_t)(p - s);
    if (n >= sizeof buf)
        return CONV_UNSURE; /* absurdly long: the caller's fallback decides */
    memcpy(buf, s, n);
    buf[n] = '\0';
    float f = strtof(buf, NULL);
    if (isinf(f))
        return CONV_RANGE;
    *out = f;
    return CONV_OK;
}

/* Everything past the plain-decimal fast path; p, w, nf, neg are what
 * scan_simple found (p NULL: it declined). Kept out of line so the fast path
 * needs no stack frame. */
static __attribute__((noinline)) const char *parse_float_slow(const char *s, const char *end,
                                                               const char *p, uint64_t w, int nf,
                                                               int neg, float *out);

/* An integer literal longer than jansson's long long takes (18 digits safe). */
static int big_integer(const char *s, const char *p);

/* The plain-decimal fast path, inlined where a nest reads its numbers; with
 * refuse_big set, integer literals of more than 18 digits are refused (NULL)
 * as jansson would. They never take the fast path (w < 2^24): only the slow
 * path checks. */
static inline __attribute__((always_inline)) const char *
parse_float_fast(const char *s, const char *end, float *out, int refuse_big)
{
    uint64_t w = 0;
    int neg = 0, nf = 0;
    const char *p = scan_simple(s, end, &w, &nf, &neg);
    if (p && w < (1u << 24) && nf <= 10) {
        /* Both operands exact floats: one correctly rounded float division. */
        const float f = (float)w / POW10F[nf];
        *out = neg ? -f : f;
        return p;
    }
    p = parse_float_slow(s, end, p, w, nf, neg, out);
    return refuse_big && p && p - s > 18 && big_integer(s, p) ? NULL : p;
}

const char *attnd_json_parse_float(const char *s, const char *end, float *out)
{
    return parse_float_fast(s, end, out, 0);
}

static const char *parse_float_slow(const char *s, const char *end, const char *p, uint64_t w,
                                    int nf, int neg, float *out)
{
    int e = -nf, inexact = 0;
    if (!p && !(p = scan_number(s, end, &w, &e, &inexact, &neg)))
        return NULL;
    float f = 0.0f;
    int rc = CONV_UNSURE;
    if (w == 0 && !inexact) {
        rc = CONV_OK;
    } else {
        /* Keep at most 15 digits (< 2^53); the value is in [w, w+1) * 10^e. */
        while (w >= 1000000000000000u) {
            inexact |= w % 10 != 0;
            w /= 10;
            e++;
        }
        if (e >= -22 && e <= 22 && w > 0) {
            rc = conv_exact(w, e, &f);
            float hi;
            if (rc == CONV_OK && inexact && (conv_exact(w + 1, e, &hi) != CONV_OK || hi != f))
                rc = CONV_UNSURE;
        }
    }
    if (rc == CONV_UNSURE)
        rc = conv_strtof(s + neg, p, &f); /* the magnitude: sign below */
    if (rc != CONV_OK)
        return NULL;
    *out = neg ? -f : f;
    return p;
}

/* ---------------------------------------------------------------- nests */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    if (c > SIZE_MAX / elem)
        return -1;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static const char *skip_ws(const char *p, const char *end)
{
    /* (unsigned char)*p > ' ': no blank, one test for the usual next byte */
    while (p < end && (unsigned char)*p <= ' ' &&
           (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

static int big_integer(const char *s, const char *p)
{
    size_t digits = 0;
    for (; s < p; s++) {
        if (*s == '.' || *s == 'e' || *s == 'E')
            return 0;
        digits += *s != '-';
    }
    return digits > 18;
}

/* After an array item, at p (blanks skipped): the next item's start past ','
 * and blanks (*closed = 0), or just past the array's ']' (*closed = 1); NULL
 * for anything else or the end of the input. */
static inline const char *next_item(const char *p, const char *end, int *closed)
{
    *closed = 0;
    if (p >= end)
        return NULL;
    if (*p == ']') {
        *closed = 1;
        return p + 1;
    }
    if (*p != ',')
        return NULL;
    p = skip_ws(p + 1, end);
    return p < end ? p : NULL;
}

/* 10^0 .. 10^7 and their negatives: w / -10^nf is -(w / 10^nf), IEEE
 * rounding being symmetric, and 0 / -10^nf is -0. */
static const float POW10F_SIGNED[2][8] = {{1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f},
                                          {-1e0f, -1e1f, -1e2f, -1e3f, -1e4f, -1e5f, -1e6f, -1e7f}};

/* The 1..7 digits at p (8 readable bytes) as *value; how many, or 0 when
 * there are none or more than 7. */
static inline int fraction7(const char *p, uint64_t *value)
{
    const uint64_t d = load8(p) - 0x3030303030303030u;
    const int n = leading_digits8(d);
    if ((unsigned)(n - 1) >= 7)
        return 0;
    *value = digits8_value(d << (8 * (8 - n)));
    return n;
}

/* The usual leaf number, "-?(0|[1-9]d*).d+" with at most 7 digits on each side
 * of the point and a value w * 10^-nf with w < 2^24, read with one 8-byte load
 * per digit run and no bounds checks: the caller guarantees 32 readable bytes
 * at s, and that the byte after the number is no 'e' or 'E' (the number's
 * exponent: it checks the byte it looks at anyway). The same float as
 * parse_float_fast (the same division of the same two exact floats, the sign
 * on the divisor). Returns the byte after the digits, or NULL for anything
 * else (the general path then decides, rejects included). */
static inline __attribute__((always_inline)) const char *short_decimal(const char *s, float *out)
{
    const char *p = s;
    const int neg = *p == '-';
    p += neg;
    uint64_t w;
    int nf;
    if ((load8(p) & 0xffff) == ('0' | '.' << 8)) { /* "0.ddd", the usual query value: w < 10^7 */
        p += 2;
        if (!(nf = fraction7(p, &w)))
            return NULL;
    } else {
        const uint64_t di = load8(p) - 0x3030303030303030u;
        const int ni = leading_digits8(di);
        if (ni == 0 || ni == 8 || (ni > 1 && *p == '0') || p[ni] != '.')
            return NULL;
        const uint64_t ip = ni == 1 ? (di & 0xff) : digits8_value(di << (8 * (8 - ni)));
        p += ni + 1;
        uint64_t fp;
        if (!(nf = fraction7(p, &fp)))
            return NULL;
        w = ip * POW10_U64[nf] + fp;
        if (w >= (1u << 24))
            return NULL;
    }
    *out = (float)w / POW10F_SIGNED[neg][nf];
    return p + nf;
}

/* The numbers of a leaf array, p at the first one: appended to n->values and
 * counted in *size. The byte after its ']', or NULL. The grammar of
 * nest_array's loop, without its per-element dispatch: runs of numbers 32
 * bytes or more before the end, each read by short_decimal and followed
 * straight by ',', go with one check of the room in values and size per run;
 * anything else takes the general path (blanks are skipped before a number as
 * after one, so "[1, 2]" reads as "[1,2]" and "[1,]" still fails). */
static const char *leaf_array(const char *p, const char *end, attnd_float_nest *n, uint32_t *size)
{
    /* The counts live in locals (registers) and are stored back on every exit. */
    size_t nv = n->n_values;
    uint32_t sz = *size;
    const char *ret = NULL;
    for (;;) {
        if (nv == n->cap_values) {
            n->n_values = nv;
            if (grow((void **)&n->values, &n->cap_values, nv + 1, sizeof(float)))
                break;
        }
        if (sz == UINT32_MAX)
            break;
        const size_t room = n->cap_values - nv < UINT32_MAX - sz ? n->cap_values - nv : UINT32_MAX - sz;
        float *const v = n->values + nv;
        size_t i = 0;
        const char *q;
        for (;;) { /* the run: q just past number i - 1, which is stored and counted */
            q = end - p >= 32 ? short_decimal(p, v + i) : NULL;
            if (!q)
                break;
            if (*q != ',') {
                if ((*q | 0x20) == 'e')
                    q = NULL; /* "0.5e3": not short_decimal's, the general path reads it */
                else
                    i++;
                break;
            }
            if (++i == room)
                break;
            p = q + 1;
        }
        nv += i;
        sz += (uint32_t)i;
        if (!q) { /* the number at p is not a short decimal: i < room, a slot is free */
            p = skip_ws(p, end);
            q = parse_float_fast(p, end, &n->values[nv], 1);
            if (!q)
                break;
            nv++;
            sz++;
        }
        if (q < end && *q == ',') {
            p = q + 1;
            continue;
        }
        p = skip_ws(q, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        ret = p < end && *p == ']' ? p + 1 : NULL;
        break;
    }
    n->n_values = nv;
    *size = sz;
    return ret;
}

/* The array at p ('['), at nesting level `level`. */
static const char *nest_array(const char *p, const char *end, attnd_float_nest *n, int level)
{
    if (level >= ATTND_NEST_MAX_DEPTH || (n->depth && level >= n->depth))
        return NULL;
    const size_t idx = n->count[level];
    if (grow((void **)&n->size[level], &n->cap[level], idx + 1, sizeof(uint32_t)))
        return NULL;
    n->size[level][idx] = 0;
    n->count[level]++;
    p = skip_ws(p + 1, end);
    if (p >= end || *p == ']')
        return NULL; /* empty: leave it to the general parser */
    if (*p != '[') { /* numbers: this is the leaf level */
        if (n->depth == 0)
            n->depth = level + 1;
        return n->depth == level + 1 ? leaf_array(p, end, n, &n->size[level][idx]) : NULL;
    }
    for (;;) {
        if (*p == '[') {
            p = nest_array(p, end, n, level + 1);
        } else {
            if (n->depth == 0)
                n->depth = level + 1;
            float v = 0.0f;
            const char *q = n->depth == level + 1 ? parse_float_fast(p, end, &v, 1) : NULL;
            if (!q ||
                grow((void **)&n->values, &n->cap_values, n->n_values + 1, sizeof(float)))
                return NULL;
            n->values[n->n_values++] = v;
            p = q;
        }
        if (!p || n->size[level][idx] == UINT32_MAX)
            return NULL;
        n->size[level][idx]++;
        p = skip_ws(p, end);
        int closed;
        p = next_item(p, end, &closed);
        if (!p || closed)
            return p;
    }
}

const char *attnd_json_parse_float_nest(const char *s, const char *end, attnd_float_nest *nest)
{
    const char *p = s < end && *s == '[' ? nest_array(s, end, nest, 0) : NULL;
    for (int d = 0; p && d < nest->depth; d++) {
        /* start[d][i]: prefix sums of the sizes of level d. */
        nest->start[d] = malloc((nest->count[d] ? nest->count[d] : 1) * sizeof(size_t));
        if (!nest->start[d]) {
            p = NULL;
            break;
        }
        size_t acc = 0;
        for (size_t i = 0; i < nest->count[d]; i++) {
            nest->start[d][i] = acc;
            acc += nest->size[d][i];
        }
    }
    if (!p)
        attnd_float_nest_free(nest);
    return p;
}

void attnd_float_nest_free(attnd_float_nest *nest)
{
    if (!nest)
        return;
    for (int d = 0; d < ATTND_NEST_MAX_DEPTH; d++) {
        free(nest->size[d]);
        free(nest->start[d]);
    }
    free(nest->values);
    memset(nest, 0, sizeof *nest);
}
