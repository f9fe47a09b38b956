/* load_check.h — classifies one attention response: transport failure, HTTP status class,
 * malformed JSON, wrong output/weights shape, or success (with the server's timing fields).
 * The JSON is checked by a strict single-pass scanner (RFC 8259 grammar, no tree built),
 * so checking a 100 KB response costs far less than the server spent producing it. */
#ifndef ATTND_LOAD_CHECK_H
#define ATTND_LOAD_CHECK_H

#include <stddef.h>
#include <stdint.h>

/* Outcome of one request. Append only: names go into reports. */
typedef enum load_kind {
    LOAD_OK = 0,
    LOAD_ERR_TRANSPORT,  /* connect/send/receive failed (curl error other than timeout) */
    LOAD_ERR_TIMEOUT,    /* no complete response within --timeout */
    LOAD_ERR_HTTP_4XX,
    LOAD_ERR_HTTP_503,
    LOAD_ERR_HTTP_504,
    LOAD_ERR_HTTP_5XX,   /* 5xx other than 503/504 */
    LOAD_ERR_HTTP_OTHER, /* 1xx, 3xx, 2xx other than 200 */
    LOAD_ERR_BAD_JSON,   /* 200 but the body is not one JSON object */
    LOAD_ERR_BAD_SHAPE,  /* 200, JSON, but output/weights missing or of the wrong shape, or id differs */
    LOAD_KIND_COUNT
} load_kind;

/* "ok", "transport", "timeout", "http_4xx", "http_503", "http_504", "http_5xx",
 * "http_other", "bad_json", "bad_shape"; "?" out of range. */
const char *load_kind_name(load_kind k);

/* Maps a libcurl CURLcode (as int): 0 -> LOAD_OK, CURLE_OPERATION_TIMEDOUT -> timeout,
 * anything else -> transport. */
load_kind load_kind_from_curl(int curl_code);

/* Maps an HTTP status: 200 -> LOAD_OK, others to their error kind. */
load_kind load_kind_from_status(long status);

/* Expected nesting of a JSON array of arrays (ragged allowed), as the (depth, length) of every
 * array in pre-order: a 2x3 matrix is (0,2) (1,3) (1,3). Leaves must all be numbers.
 * v holds 2*n int32 values; owned by whoever built it, freed with load_shape_free. */
typedef struct load_shape {
    int32_t *v;
    size_t n, cap; /* pairs */
} load_shape;

/* Appends one (depth, len) pair. Returns 0, or -1 on allocation failure (shape untouched). */
int load_shape_push(load_shape *s, int32_t depth, int32_t len);
void load_shape_free(load_shape *s);
/* Appends a rows x cols matrix at depth d (one pair for the rows, one per row). 0 / -1. */
int load_shape_push_matrix(load_shape *s, int32_t d, int32_t rows, int32_t cols);

/* The server-reported timing of a successful response (timing.* fields); has == 0 if absent. */
typedef struct load_timing {
    int has;
    double queue_us, compute_us, batch_size;
} load_timing;

/* What a response must look like. weights == NULL means "weights must be absent".
 * id == NULL or "" means "do not check the echoed id". Borrowed by load_check_body.
 * A session append (session_id != NULL) must also carry "session": {"id": session_id,
 * "length": session_length, "cached": C} with 0 <= C <= length, and C == length when
 * session_full (an unbounded session keeps every position). */
typedef struct load_expect {
    const load_shape *output;
    const load_shape *weights;
    const char *id;
    const char *session_id;
    long long session_length;
    int session_full;
} load_expect;

/* What a KServe v2 infer response must hold (--protocol v2): outputs[] with "output" FP32
 * [b,t,e_out], plus "attn_weights" [b,t,s] iff weights, as flat JSON data or, with binary,
 * as raw bytes after the JSON header. id as in load_expect. Borrowed by the checker. */
typedef struct load_expect_v2 {
    int binary, weights;
    int32_t b, t, s, e_out;
    const char *id;
} load_expect_v2;

/* Classifies a finished HTTP exchange: status first, then the body (only for 200).
 * body need not be NUL-terminated. Fills *timing (zeroed when not LOAD_OK). Never allocates
 * more than the shape of the response needs; never fails on hostile input. */
load_kind load_check_response(long status, const char *body, size_t len,
                              const load_expect *want, load_timing *timing);

/* The same for a KServe v2 infer response. header_len: the response's
 * Inference-Header-Content-Length, or -1 when absent (then the whole body is JSON).
 * The JSON header must be one object whose outputs match want (name, FP32, shape, and the
 * data length or binary_data_size); the bytes after it must be exactly the binary outputs.
 * Timing comes from parameters.{queue_us,compute_us,batch_size}. A header_len beyond the
 * body is LOAD_ERR_BAD_JSON; everything else wrong is LOAD_ERR_BAD_SHAPE. */
load_kind load_check_response_v2(long status, const char *body, size_t len, long long header_len,
                                 const load_expect_v2 *want, load_timing *timing);

#endif
