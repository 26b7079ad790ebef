/*
 * pow — the waiting room's proof of work (SPEC §16, docs/design.md "Bot friction"): a challenge
 * the server signs, and the check of a client's answer to it.
 *
 * A challenge is the text
 *
 *     p1.<b64url(sku)>.<b64url(user)>.<issued_ms>.<bits>.<b64url(HMAC-SHA256(key, msg))>
 *
 * with msg = "p1|<sku>|<user>|<issued_ms>|<bits>" (the domain "p1|" keeps it apart from every
 * other MAC made with the queue key, the tickets' "t1|" included; the SKU has no '|' and the two
 * numbers are the last two fields, so msg reads back one way only). It binds the answer to one
 * user, one SKU, one difficulty and one time: it is good for POW_TTL_MS after issued_ms. The
 * client finds a nonce (1..POW_NONCE_MAX printable ASCII characters) such that
 * SHA-256(challenge + "." + nonce) starts with at least bits zero bits, which takes 2^bits
 * hashes on average; checking it takes one hash and one HMAC. The MAC is OpenSSL's HMAC and the
 * hash libcrypto's SHA-256: no cryptography is written here.
 *
 * A solved challenge may be presented again until it expires: it can only ever stand for its
 * own user and SKU, and a second join of a user gives the same place, so a replay gains
 * nothing.
 *
 * Times are passed in (Redis-clock milliseconds, rclock.h, so every instance judges a challenge
 * on the same clock); the key is raw bytes (the queue key file's, loaded by the caller). Pure
 * functions apart from a per-thread cache of the keyed HMAC state: thread-safe.
 */
#ifndef INVENTORY_POW_H
#define INVENTORY_POW_H

#include <stddef.h>
#include <stdint.h>

#define POW_TTL_MS 120000 /* a challenge is good for this long after it was issued */
#define POW_BITS_MIN 1
#define POW_BITS_MAX 32 /* the rule queue_pow_bits stops at 28; a challenge may say up to 32 */
#define POW_NONCE_MAX 64
/* Longest challenge: "p1." + 171 (a 128-byte SKU or user in base64url) * 2 + the numbers and
 * the 43-character MAC, rounded up. */
#define POW_CHALLENGE_MAX 512

enum pow_result {
    POW_OK = 0,
    POW_MALFORMED,   /* not a challenge of this format, or a nonce that is not 1..64 printable */
    POW_BAD_MAC,     /* well formed, but not signed with this key (forged or altered) */
    POW_WRONG_USER,  /* signed for another user */
    POW_WRONG_SKU,   /* signed for another SKU */
    POW_EXPIRED,     /* issued POW_TTL_MS or more before now (or as far in the future) */
    POW_TOO_FEW_BITS /* the hash has fewer leading zero bits than the challenge asks, or the
                        challenge asks fewer than the SKU needs now */
};

/* The result's name ("ok", "malformed", "bad_mac", "wrong_user", "wrong_sku", "expired",
 * "too_few_bits"): static, never NULL. */
const char *pow_result_string(enum pow_result r);

/* Writes the challenge of (sku, user, issued_ms, bits) signed with key[0..keylen) into
 * out[0..cap) with its NUL. sku and user are 1..128 bytes without NUL (sku without '|'),
 * issued_ms >= 0, bits POW_BITS_MIN..POW_BITS_MAX, keylen >= 1. Returns the length, or -1 when
 * an argument is out of range, cap is too small, or libcrypto failed (out is then "").
 * POW_CHALLENGE_MAX bytes are always enough. */
int pow_mint(const unsigned char *key, size_t keylen, const char *sku, const char *user,
             int64_t issued_ms, int bits, char *out, size_t cap);

/* Judges the answer nonce to challenge for (sku, user) at now_ms with key: in this order,
 * malformed (either text), bad MAC, other user, other SKU, expired (now_ms >= issued +
 * POW_TTL_MS, or issued > now_ms + POW_TTL_MS), too few bits (the challenge's bits below
 * min_bits, the SKU's current difficulty, or the hash below the challenge's bits); else POW_OK.
 * NULL texts are malformed. */
enum pow_result pow_verify(const unsigned char *key, size_t keylen, const char *challenge,
                           const char *nonce, const char *sku, const char *user, int64_t now_ms,
                           int min_bits);

/* Reads the issue time and the difficulty of a challenge without checking its MAC (a client
 * learning what to solve; the server's judgement is pow_verify). 0, or -1 when malformed. */
int pow_parse(const char *challenge, int64_t *issued_ms, int *bits);

/* The number of leading zero bits of a SHA-256 digest, 0..256. */
int pow_leading_zero_bits(const uint8_t digest[32]);

/* The leading zero bits of SHA-256(challenge "." nonce), 0..256 (the work's measure). */
int pow_work_bits(const char *challenge, const char *nonce);

/* The client's side: finds a nonce with pow_work_bits(challenge, nonce) >= bits, trying
 * nonces start, start + 1, ... (written in base 36; different starts let several solvers share
 * one challenge), at most max_tries of them. Writes it into nonce (POW_NONCE_MAX + 1 bytes)
 * and returns the number of hashes tried (>= 1), or -1 when none was found within max_tries
 * (or challenge is too long). */
int64_t pow_solve(const char *challenge, int bits, uint64_t start, uint64_t max_tries,
                  char nonce[POW_NONCE_MAX + 1]);

#endif
