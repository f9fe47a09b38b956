/* reqid.h — request ids: the client's X-Request-Id when it is one we can echo
 * safely, else a fresh random one. Every log line, error body and response of
 * the request carries it.
 */
#ifndef ATTND_REQID_H
#define ATTND_REQID_H

#include <stddef.h>

#define ATTND_REQID_MAX 128 /* bytes of a client's id at most */

extern const char attnd_reqid_header[]; /* "X-Request-Id" */

/* 1 when s (NUL-terminated) is 1..ATTND_REQID_MAX bytes of visible ASCII
 * (0x21-0x7e) without '"' or '\\': safe in a header, a log line and a JSON
 * string as it is. */
int attnd_reqid_valid(const char *s);

/* Fills out (ATTND_REQID_MAX + 1 bytes) with client when attnd_reqid_valid, else
 * with 16 lowercase hex digits from getrandom(2) (never rand()). Returns 1 when
 * the client's id was taken, 0 when one was generated (client NULL, empty or
 * invalid). */
int attnd_reqid_take(const char *client, char *out);

#endif
