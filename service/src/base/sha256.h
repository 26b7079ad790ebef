/*
 * sha256 — SHA-256 of a byte string (OpenSSL libcrypto underneath), for the admin token's
 * fingerprint in the audit log (the first 8 hex digits of the token's digest identify which token
 * was used without revealing it). Pure functions: no allocation, thread-safe.
 */
#ifndef INVENTORY_SHA256_H
#define INVENTORY_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_LEN 32

/* Writes the SHA-256 digest of data[0..len) into out. */
void sha256_digest(const void *data, size_t len, uint8_t out[SHA256_DIGEST_LEN]);

/* Writes the first hexlen (<= 64) lower-case hex digits of the SHA-256 digest of data[0..len)
 * and a NUL into hex, which holds hexlen + 1 bytes. */
void sha256_hex_prefix(const void *data, size_t len, char *hex, size_t hexlen);

#endif
