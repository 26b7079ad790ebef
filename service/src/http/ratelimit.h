/*
 * ratelimit — per-client-IP token buckets for the HTTP edge (config rate_limit_rps,
 * rate_limit_burst). Each peer address has a bucket of `burst` tokens that refills at `rps`
 * tokens per second; a request takes one token or, when the bucket is empty, is refused with
 * the number of seconds until the next token (the 429's Retry-After).
 *
 * Peers are keyed by IPv4 address (/32; an IPv4-mapped IPv6 address counts as IPv4) or by IPv6
 * /64 prefix (one subscriber's allocation: a client rotating through its /64 stays one peer).
 * The table has a fixed size (RATELIMIT_STRIPES x RATELIMIT_WAYS entries, allocated once) split
 * into stripes, each with its own mutex, so threads serving different peers rarely contend.
 * A bucket that has refilled completely holds no information and its entry is reused; when all
 * the entries of a stripe are in use, the least recently seen peer's entry is taken over (that
 * peer starts again with a full bucket). Memory use is therefore bounded whatever the number of
 * peers, at the price of forgetting some when more than RATELIMIT_WAYS peers of one stripe are
 * throttled at once.
 *
 * Thread-safe. Time is passed in (milliseconds of CLOCK_MONOTONIC), so tests need no sleeping.
 */
#ifndef INVENTORY_RATELIMIT_H
#define INVENTORY_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

struct sockaddr;
struct ratelimit;

#define RATELIMIT_STRIPES 64
#define RATELIMIT_WAYS 64
#define RATELIMIT_KEY_LEN 16

/* A new limiter of rps tokens per second (1..1000000) and burst tokens (1..1000000; more than
 * rps is allowed). Returns NULL when a value is out of range or out of memory. Free with
 * ratelimit_free. */
struct ratelimit *ratelimit_new(int rps, int burst);

/* NULL-safe. */
void ratelimit_free(struct ratelimit *rl);

/* The bucket key of a peer address: IPv4 (also IPv4-mapped IPv6) as ::ffff:a.b.c.d, IPv6 with
 * its last 64 bits zeroed. Returns 0, or -1 for another address family or NULL (such peers, a
 * UNIX socket say, are not limited). */
int ratelimit_key(const struct sockaddr *sa, unsigned char key[RATELIMIT_KEY_LEN]);

/* Takes one token from the bucket of key at time now_ms. Returns 0 when the request may go
 * on; otherwise the whole seconds (>= 1) until a token will be there: the Retry-After. */
int ratelimit_take_key(struct ratelimit *rl, const unsigned char key[RATELIMIT_KEY_LEN],
                       int64_t now_ms);

/* The bucket key of a 16-byte address (IPv4 as IPv4-mapped IPv6, as proxy.h has them): the
 * same key ratelimit_key gives for the socket address. */
void ratelimit_key_addr(const unsigned char addr[16], unsigned char key[RATELIMIT_KEY_LEN]);

/* ratelimit_take_key for the peer at sa (0 for peers ratelimit_key does not key). */
int ratelimit_take(struct ratelimit *rl, const struct sockaddr *sa, int64_t now_ms);

/* The number of peers whose bucket is not full at now_ms (entries that still hold state). For
 * tests and diagnostics; takes every stripe's lock in turn. */
size_t ratelimit_tracked(struct ratelimit *rl, int64_t now_ms);

#endif
