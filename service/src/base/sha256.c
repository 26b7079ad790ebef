/*
 * sha256 — SHA-256 through OpenSSL's libcrypto (EVP_Digest): no hand-written cryptography. The
 * admin token's fingerprint in the audit log is the first 8 hex digits of its digest.
 */
#include "sha256.h"

#include <openssl/evp.h>
#include <string.h>

void sha256_digest(const void *data, size_t len, uint8_t out[SHA256_DIGEST_LEN])
{
    unsigned int n = 0;
    /* EVP_Digest only fails when libcrypto cannot allocate its context; a zero digest then
     * fingerprints nothing rather than leaving the caller's buffer undefined. */
    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != SHA256_DIGEST_LEN)
        memset(out, 0, SHA256_DIGEST_LEN);
}

void sha256_hex_prefix(const void *data, size_t len, char *hex, size_t hexlen)
{
    static const char digits[] = "0123456789abcdef";
    uint8_t d[SHA256_DIGEST_LEN];
    sha256_digest(data, len, d);
    if (hexlen > 2 * SHA256_DIGEST_LEN)
        hexlen = 2 * SHA256_DIGEST_LEN;
    for (size_t i = 0; i < hexlen; i++)
        hex[i] = digits[(d[i / 2] >> (i % 2 ? 0 : 4)) & 0xf];
    hex[hexlen] = '\0';
}
