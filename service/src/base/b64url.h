/*
 * b64url — base64url without padding (RFC 4648 §5), canonical only: the spelling of the
 * waiting room's signed texts (ticket.c's tickets, pow.c's challenges). One byte string has one
 * spelling, so a signed text cannot be re-spelt around its MAC check. Not cryptography: the
 * MACs are OpenSSL's.
 */
#ifndef INVENTORY_B64URL_H
#define INVENTORY_B64URL_H

#include <stddef.h>

/* Letters b64url_encode writes for len bytes (the NUL not included). */
#define B64URL_LEN(len) (((len) / 3) * 4 + ((len) % 3 ? (len) % 3 + 1 : 0))

/* Spells in[0..len) into out (cap bytes, NUL included). Returns the letters written, or -1
 * (out untouched) when cap < B64URL_LEN(len) + 1. */
int b64url_encode(const unsigned char *in, size_t len, char *out, size_t cap);

/* Decodes in[0..len) into out[0..cap). Returns the bytes written, or -1 on a letter outside the
 * alphabet, a length no encoding has (len % 4 == 1), non-zero left-over bits (not canonical), or
 * more bytes than cap. */
int b64url_decode(const char *in, size_t len, unsigned char *out, size_t cap);

#endif
