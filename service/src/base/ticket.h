/*
 * ticket — the waiting room's admission ticket (SPEC §16; docs/design.md "The waiting room"):
 * a text the instance that admits a buyer signs and the instance that takes the order checks,
 * bound to the SKU, the user, the admission's number and its expiry. Any instance can check any
 * ticket because they share one key, the file of --queue-key-file.
 *
 *   t1.<b64url(sku)>.<b64url(user)>.<n>.<exp_ms>.<b64url(HMAC-SHA256(key, "t1|sku|user|n|exp"))>
 *
 * The MAC is OpenSSL's HMAC (no hand-written cryptography), compared in time that does not depend
 * on where the MACs differ. The ticket carries its SKU and user in clear, so a refusal can say
 * which binding failed (another user's ticket, another SKU's) rather than only "invalid". The
 * expiry is not judged here: it is judged on Redis's clock by the script that claims the ticket
 * (no instance's clock decides a sale), so ticket_check leaves exp_ms to its caller. That one
 * ticket makes at most one order is the claim's business (order/), not this file's.
 *
 * The key is read once at start; struct ticket_key is then read-only, so every function here
 * may run on every worker thread at once.
 */
#ifndef INVENTORY_TICKET_H
#define INVENTORY_TICKET_H

#include <stddef.h>
#include <stdint.h>

#include "errors.h"

/* Shortest key the file may hold, bytes (the HMAC's strength is the key's). */
#define TICKET_KEY_MIN 32
/* Longest key read from the file, bytes. */
#define TICKET_KEY_MAX 4096
/* Longest SKU or user a ticket carries (the validators' own bound is lower). */
#define TICKET_FIELD_MAX 256
/* Room for a ticket's text, NUL included: two fields of TICKET_FIELD_MAX in base64url, two
 * numbers and the MAC. */
#define TICKET_TEXT_MAX 800

struct ticket_key {
    unsigned char bytes[TICKET_KEY_MAX];
    size_t len; /* 0: no key loaded (no waiting room can admit on this instance) */
};

/* A ticket's fields as ticket_check found them. */
struct ticket {
    char sku[TICKET_FIELD_MAX + 1];
    char user[TICKET_FIELD_MAX + 1];
    uint64_t n;     /* the admission's number (the place's rank in the line) */
    int64_t exp_ms; /* Redis-clock ms since the epoch after which the ticket is refused */
};

/* Reads the key file at path into key (config_read_secret: the trailing newline dropped).
 * Returns 0, or -1 with a message in err naming the setting queue_key_file and the reason (an
 * unreadable file, fewer than TICKET_KEY_MIN bytes); never the file's contents. */
int ticket_key_load(struct ticket_key *key, const char *path, char *err, size_t errlen);

/* Wipes the key's bytes (OPENSSL_cleanse). NULL-safe. */
void ticket_key_wipe(struct ticket_key *key);

/* Signs a ticket for sku and user (each 1..TICKET_FIELD_MAX bytes), admission number n and
 * expiry exp_ms into out (cap bytes; TICKET_TEXT_MAX is always enough). Returns the text's
 * length, or -1 when key holds no key, a field is empty or too long, or cap is too small (out is
 * then ""). Deterministic: the same arguments give the same text, so an instance can answer a
 * place's ticket again without storing it. */
int ticket_mint(const struct ticket_key *key, const char *sku, const char *user, uint64_t n,
                int64_t exp_ms, char *out, size_t cap);

/* Checks text (NUL-terminated, any bytes) against key, and binds it to sku and user (the order's
 * SKU and verified user):
 *   ERROR_NONE               signed by key, for this SKU and user; *out filled (may be NULL)
 *   ERROR_TICKET_INVALID     not a ticket, or not signed by this key (no key loaded included)
 *   ERROR_TICKET_WRONG_SKU   signed, for another SKU
 *   ERROR_TICKET_WRONG_USER  signed, for this SKU and another user
 * The MAC is checked before the bindings, so a forged ticket never learns which field is
 * wrong. The expiry is the caller's to judge (out->exp_ms), on Redis's clock. */
enum error_code ticket_check(const struct ticket_key *key, const char *text, const char *sku,
                             const char *user, struct ticket *out);

#endif
