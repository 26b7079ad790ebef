/*
 * identity — who sends an order (SPEC §11, "Who the user is"), and the confirm token.
 *
 * A per-user limit is only as good as the user id it counts, so the body's user_id (the client's
 * word: a bot sends a new one with each request) is never the user unless a developer says so.
 * The user comes from the first of these that is configured:
 *
 *   1. --jwt-key-file: every POST /api/v1/orders carries "Authorization: Bearer <JWT>", verified
 *      by libjwt (Debian's libjwt 1.10; no signature code here) with the one key of the file:
 *      an HS256 secret, or a PEM public key, RSA (RS256) or EC P-256 (ES256). The token's alg
 *      must be that key's algorithm (alg "none", or HS256 signed with the public key's PEM
 *      text, is refused); exp is required and checked, nbf when present, each with
 *      IDENTITY_JWT_LEEWAY_S of clock skew; iss and aud when --jwt-issuer / --jwt-audience are
 *      set (aud a string, or an array holding the value). The user is the sub claim, 1..128
 *      printable ASCII characters. Anything else is IDENTITY_UNAUTHORIZED: with a key, the
 *      token decides and neither the user header nor the body is looked at.
 *   2. --user-header NAME: the header's value, when the peer (the connection's own address, not
 *      a forwarded one) is in --trusted-proxies; 1..128 printable ASCII characters, sent once,
 *      else IDENTITY_UNAUTHORIZED. From any other peer the header is ignored, as if absent.
 *   3. --trust-body-user-id (development only, warned at start): the body's user_id.
 *   Otherwise (or when the option that applies finds no user): IDENTITY_NONE, the body's
 *   user_id is a label only.
 *
 * The confirm token (--confirm-token-file) is the payment service's least-privilege secret:
 * router.c's ROUTER_CONFIRM rows accept it besides the admin token (identity_is_confirm_token).
 *
 * Every file is read once, by identity_new; struct identity is then read-only, so identity_of
 * and identity_is_confirm_token may run on every worker thread at once.
 */
#ifndef INVENTORY_IDENTITY_H
#define INVENTORY_IDENTITY_H

#include <stddef.h>

struct identity;
struct config;
struct request;
struct validate_order;

/* Clock skew allowed on exp and nbf, in seconds: a token is accepted until exp + this, and from
 * nbf - this. */
#define IDENTITY_JWT_LEEWAY_S 5
/* Longest token looked at (longer: IDENTITY_UNAUTHORIZED without decoding it). */
#define IDENTITY_TOKEN_MAX 8192

/* Makes the identity of cfg: reads and checks jwt_key_file and confirm_token_file, and logs
 * (event "identity") how orders' users are established, at warn level for
 * trust_body_user_id. Returns 0 with *out set (free it with identity_free), or -1 with a
 * message in err naming the setting (an unreadable file, a key of no accepted kind, a
 * jwt_issuer without jwt_key_file...; never the file's contents). */
int identity_new(const struct config *cfg, struct identity **out, char *err, size_t errlen);

/* Frees id. NULL-safe. */
void identity_free(struct identity *id);

enum identity_verdict {
    IDENTITY_NONE,        /* no user can be established: the body's user_id is a label only */
    IDENTITY_USER,        /* user holds the verified user id */
    IDENTITY_UNAUTHORIZED /* a token (or user header) was required or given, and is bad */
};

/* Who sends order request req; in is its parsed body (has_user_id / user_id: the body's label).
 * IDENTITY_USER: user (cap >= VALIDATE_PRINTABLE_MAX + 1) holds the user id, NUL-terminated.
 * IDENTITY_UNAUTHORIZED: why (whylen bytes; may be NULL when whylen is 0) says what is wrong,
 * for the 401's message; it never quotes the token or the header's value.
 * IDENTITY_NONE: nothing written to user. Thread-safe; allocates only inside libjwt. */
enum identity_verdict identity_of(const struct identity *id, const struct request *req,
                                  const struct validate_order *in, char *user, size_t cap,
                                  char *why, size_t whylen);

/* 1 when authorization (the Authorization header's value, NULL when absent) is "Bearer <the
 * confirm token>", compared in time that does not depend on where they differ; 0 otherwise, or
 * when no confirm token is configured (id NULL included). */
int identity_is_confirm_token(const struct identity *id, const char *authorization);

#endif
