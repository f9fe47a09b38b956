/* jsonnum.h — float32 <-> JSON number text for the codec's hot paths: the
 * shortest round-tripping printer (the Schubfach algorithm for binary32), a correctly
 * rounding text -> float32 parser, nested number arrays parsed straight into
 * float arrays (no object per number), and the double -> float32 check used
 * for numbers jansson parsed.
 */
#ifndef ATTND_JSONNUM_H
#define ATTND_JSONNUM_H

#include <stddef.h>
#include <stdint.h>

/* Longest text attnd_json_print_float writes: "-1.17549435e-38" is 15 bytes. */
#define ATTND_FLOAT_TEXT_MAX 16

/* Writes into out (at least ATTND_FLOAT_TEXT_MAX bytes, all of which it may
 * overwrite: the bytes past the returned length are scratch; no NUL) the
 * shortest decimal text that a correctly rounding reader (strtof, JSON parsers
 * reading into float32) turns back into exactly v, choosing among the digit
 * strings of that length the one closest to v. Between plain ("0.001") and
 * exponent ("1e-3") notation the shorter wins, plain on a tie. +0 prints "0";
 * -0 prints "-0.0" so that parsers reading "-0" as the integer 0 keep the sign.
 * Returns the length (1..15), or -1 without writing when v is NaN or infinite
 * (JSON has no text for them). Thread-safe, no allocation. */
int attnd_json_print_float(float v, char *out);

/* Bytes attnd_json_print_floats may overwrite for n numbers. */
#define ATTND_FLOATS_TEXT_MAX(n) ((n) * (ATTND_FLOAT_TEXT_MAX + 1) + 32)

/* Writes x[0..n) into out (ATTND_FLOATS_TEXT_MAX(n) bytes, all of which it may
 * overwrite; no NUL) as attnd_json_print_float's texts joined by ',' (no
 * brackets). Returns the length (0 for n = 0), or -1 when a value is NaN or
 * infinite. Eight numbers at a time with AVX2 where the CPU has it. */
ptrdiff_t attnd_json_print_floats(const float *x, size_t n, char *out);

/* Parses the JSON number (RFC 8259 grammar: no '+', no leading zeros, digits
 * on both sides of '.') starting at s, reading no byte at or past end, and
 * rounds it correctly to the nearest float32 (ties to even), as strtof would.
 * Returns the first byte after the longest number there (the caller checks
 * what follows: "01" stops after "0") and *out, or NULL (out untouched) when
 * no JSON number starts at s, its value rounds beyond FLT_MAX, or it is longer
 * than 63 bytes and needs the strtof fallback.
 * Fast paths: plain decimals "-?d+(.d+)?" with w < 2^24 significant value and
 * at most 10 fraction digits are one float division of two exact floats (IEEE
 * division rounds correctly); up to 15 significant digits with a decimal
 * exponent in ±22 are
 * computed exactly in double arithmetic with one rounding, rejecting the rare
 * case where that rounding lands on a float midpoint; longer digit strings are
 * bracketed [w, w+1)·10^e and accepted when both ends round alike; the rest
 * (huge exponents, ties) falls back to strtof on a copy of the text. */
const char *attnd_json_parse_float(const char *s, const char *end, float *out);

/* Rounds a double (as jansson reads a JSON number) to the nearest float32.
 * Returns 0 and *out, or -1 (out untouched) when d is NaN, infinite, or so
 * large it would round to infinity (|d| >= FLT_MAX + half an ulp).
 * Note: text -> double -> float rounds twice; for a decimal whose nearest
 * double is exactly the midpoint between two floats this can give the
 * neighbour of the correctly rounded float (1 ulp). Of the 2^32 float32 values
 * exactly one pair, ±0x15ae43fd printed "7.038531e-26", hits this with
 * attnd_json_print_float's text; the codec's fast path (attnd_json_parse_float)
 * has no such case, and the jansson path is only taken for bodies it declines. */
int attnd_json_double_to_float(double d, float *out);

/* Deepest nest attnd_json_parse_float_nest takes: B×h×T×S masks. */
#define ATTND_NEST_MAX_DEPTH 4

/* A nest of JSON arrays whose leaves are all numbers at one depth, such as
 * [[1,2],[3,4,5]], held as flat arrays (like Arrow's list offsets): level d
 * (0 = outermost) holds count[d] arrays in document order; array i of level d
 * has size[d][i] children, which are the arrays start[d][i] ... of level d+1,
 * or, at the last level (d = depth-1), values[start[d][i]] ... */
typedef struct attnd_float_nest {
    int depth;                              /* array levels, 1..4 */
    size_t count[ATTND_NEST_MAX_DEPTH];
    uint32_t *size[ATTND_NEST_MAX_DEPTH];
    size_t *start[ATTND_NEST_MAX_DEPTH];
    float *values;
    size_t n_values;
    size_t cap[ATTND_NEST_MAX_DEPTH];       /* private: allocated entries */
    size_t cap_values;
} attnd_float_nest;

/* Parses the array starting at s ('[') into *nest (zero it first), reading
 * nothing at or past end. Returns the byte after the closing ']', or NULL when
 * the text is anything but such a nest of valid JSON numbers (a syntax error,
 * an empty array, a non-number leaf, leaves at mixed depths, deeper than 4, a
 * number beyond float32, an integer of more than 18 digits, which jansson
 * refuses) or memory ran out: callers then fall back to a general parser,
 * which finds and names the problem. On NULL the nest is already freed.
 * Otherwise the caller frees it with attnd_float_nest_free. */
const char *attnd_json_parse_float_nest(const char *s, const char *end, attnd_float_nest *nest);

/* Frees the arrays of a nest and zeroes it. NULL allowed. */
void attnd_float_nest_free(attnd_float_nest *nest);

#endif
