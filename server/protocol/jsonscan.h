/* jsonscan.h — a structural walk over JSON text that jansson refused, to say
 * what the client meant: the bare NaN / Infinity / -Infinity tokens Python's
 * json.dumps writes for non-finite floats (JSON has no such values), named by
 * the path of the value they stand in.
 */
#ifndef ATTND_JSONSCAN_H
#define ATTND_JSONSCAN_H

#include <stddef.h>

#include "core/request.h"

/* Finds the first bare NaN, Infinity or -Infinity (also +Infinity) standing
 * as a value in text[0..len). Returns its byte offset and writes its path
 * into field (cap bytes): object members by name, ".name" below the top,
 * array elements "[i]": "query[0][3]", "inputs[0].data[7]". Returns -1 (field
 * "") when there is none before the text's first structural error, or it
 * nests deeper than 256 levels. Reads nothing past len; no allocation. */
long attnd_json_find_nonfinite(const char *text, size_t len, char *field, size_t cap);

/* For a parser that gave up at byte error_byte of text: when the reason is a
 * non-finite token (one at or before error_byte), fills *err with 400
 * non_finite naming the value's path and returns -1; else returns 0 and
 * leaves *err alone (the caller reports its own invalid_json). */
int attnd_json_nonfinite_error(const char *text, size_t len, long error_byte,
                               attnd_http_error *err);

#endif
