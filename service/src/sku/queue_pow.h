/*
 * queue_pow — the waiting room's proof of work over HTTP (SPEC §16; docs/api.md "The waiting
 * room's proof of work"): the challenge endpoint, and the check the join runs on its body's
 * "pow" member. The challenge's format and its cryptography are base/pow.h's; the key is the
 * queue key (--queue-key-file, app->queue_key), the clock Redis's (rclock.h).
 */
#ifndef INVENTORY_QUEUE_POW_H
#define INVENTORY_QUEUE_POW_H

#include <jansson.h>

#include "app.h"
#include "request.h"

struct areq;

/* GET /api/v1/skus/{sku}/queue/challenge: for the verified user (identity.h: JWT, the trusted
 * user header, or with --trust-body-user-id a JSON body's "user_id"; none: 401 user_required),
 * held to --user-rps (429 rate_limited), 200 {"sku", "challenge", "bits", "expires_at"} (ms
 * since the epoch, Redis's clock) signed for that user and SKU at the SKU's queue_pow_bits;
 * bits 0 (the SKU asks no proof): 200 with "challenge" and "expires_at" null. 400 for a bad
 * SKU name, 404 unknown_sku, 409 no_waiting_room (queue_rate 0), 503 unavailable without a
 * queue key or when Redis did not answer. The rules come from the SKU cache when fresh, else
 * from one HMGET of the SKU's meta. */
void queue_challenge_get_async(struct areq *ar);

/* The join's proof-of-work check (POST /api/v1/skus/{sku}/queue), contract:
 *   app, sku, user: the request's, user the verified user (non-empty);
 *   bits: the SKU's queue_pow_bits in the rules the join judges by (0: no proof needed);
 *   pow: the body's "pow" member, or NULL when the body has none.
 * Returns 0 when the join may go on: bits <= 0 (pow is then ignored), or pow is
 * {"challenge": string, "nonce": string} with a challenge this service signed for this user and
 * SKU less than 120 s ago (Redis's clock), asking at least bits, whose SHA-256(challenge "."
 * nonce) has that many leading zero bits. Otherwise fills res and returns -1:
 *   403 pow_required  pow absent (or JSON null);
 *   400 invalid_request  pow not an object of two strings;
 *   403 pow_invalid   malformed, not signed with the queue key, another user's, another SKU's,
 *                     or too few bits (the message says which);
 *   403 pow_expired   the challenge's 120 s are over: get a new one;
 *   503 unavailable   no queue key on this instance.
 * A solved challenge may be used again until it expires (a second join of a user gives the same
 * place). No Redis call, no allocation; about 4 µs (loadtest/pow.sh). Any thread. */
int queue_pow_verify_request(struct app *app, const char *sku, const char *user, int bits,
                             const json_t *pow, struct response *res);

#endif
