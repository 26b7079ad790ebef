/*
 * ticket — the waiting room's signed admission tickets; see ticket.h. Fields are spelt in
 * canonical base64url (b64url.h); the MAC is OpenSSL's.
 */
#include "ticket.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "b64url.h"
#include "config.h"

#define MAC_LEN 32 /* HMAC-SHA256 */
#define PREFIX "t1"

int ticket_key_load(struct ticket_key *key, const char *path, char *err, size_t errlen)
{
    char buf[TICKET_KEY_MAX + 2];
    memset(key, 0, sizeof(*key));
    const char *problem = config_read_secret(path, buf, sizeof(buf));
    if (problem) {
        snprintf(err, errlen, "queue_key_file: cannot read %s: %s", path, problem);
        return -1;
    }
    size_t n = strlen(buf);
    if (n < TICKET_KEY_MIN) {
        OPENSSL_cleanse(buf, sizeof(buf));
        snprintf(err, errlen,
                 "queue_key_file: %s holds %zu bytes; a ticket key needs %d or more "
                 "(openssl rand -base64 48)",
                 path, n, TICKET_KEY_MIN);
        return -1;
    }
    if (n > TICKET_KEY_MAX) {
        OPENSSL_cleanse(buf, sizeof(buf));
        snprintf(err, errlen, "queue_key_file: %s holds more than %d bytes", path, TICKET_KEY_MAX);
        return -1;
    }
    memcpy(key->bytes, buf, n);
    key->len = n;
    OPENSSL_cleanse(buf, sizeof(buf));
    return 0;
}

void ticket_key_wipe(struct ticket_key *key)
{
    if (!key)
        return;
    OPENSSL_cleanse(key->bytes, sizeof(key->bytes));
    key->len = 0;
}

/* The MAC of the ticket's fields: HMAC-SHA256(key, "t1|sku|user|n|exp"). The SKU and user are
 * length-prefixed inside the signed text, so no split of one string into (sku, user) signs the
 * same bytes as another. 0, or -1. */
static int ticket_mac(const struct ticket_key *key, const char *sku, const char *user, uint64_t n,
                      int64_t exp_ms, unsigned char mac[MAC_LEN])
{
    char msg[2 * TICKET_FIELD_MAX + 96];
    int len = snprintf(msg, sizeof(msg), PREFIX "|%zu:%s|%zu:%s|%" PRIu64 "|%" PRId64, strlen(sku),
                       sku, strlen(user), user, n, exp_ms);
    if (len < 0 || (size_t)len >= sizeof(msg))
        return -1;
    unsigned int maclen = 0;
    if (!HMAC(EVP_sha256(), key->bytes, (int)key->len, (const unsigned char *)msg, (size_t)len, mac,
              &maclen) ||
        maclen != MAC_LEN)
        return -1;
    return 0;
}

static bool field_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    return n > 0 && n <= TICKET_FIELD_MAX;
}

int ticket_mint(const struct ticket_key *key, const char *sku, const char *user, uint64_t n,
                int64_t exp_ms, char *out, size_t cap)
{
    if (cap > 0)
        out[0] = '\0';
    if (!key || key->len == 0 || !field_ok(sku) || !field_ok(user) || exp_ms < 0)
        return -1;
    unsigned char mac[MAC_LEN];
    if (ticket_mac(key, sku, user, n, exp_ms, mac) != 0)
        return -1;
    char esku[TICKET_FIELD_MAX * 2], euser[TICKET_FIELD_MAX * 2], emac[64];
    if (b64url_encode((const unsigned char *)sku, strlen(sku), esku, sizeof(esku)) < 0 ||
        b64url_encode((const unsigned char *)user, strlen(user), euser, sizeof(euser)) < 0 ||
        b64url_encode(mac, MAC_LEN, emac, sizeof(emac)) < 0)
        return -1;
    int len = snprintf(out, cap, PREFIX ".%s.%s.%" PRIu64 ".%" PRId64 ".%s", esku, euser, n, exp_ms,
                       emac);
    if (len < 0 || (size_t)len >= cap) {
        if (cap > 0)
            out[0] = '\0';
        return -1;
    }
    return len;
}

/* Parses a canonical decimal (no sign, no leading zero but "0", at most UINT64_MAX) of
 * [s, s + len). 0, or -1. */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20 || (len > 1 && s[0] == '0'))
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Decodes a base64url field of [s, s + len) into a NUL-terminated string without NUL bytes
 * inside. 0, or -1. */
static int decode_field(const char *s, size_t len, char *out, size_t cap)
{
    int n = b64url_decode(s, len, (unsigned char *)out, cap - 1);
    if (n <= 0 || memchr(out, '\0', (size_t)n))
        return -1;
    out[n] = '\0';
    return 0;
}

enum error_code ticket_check(const struct ticket_key *key, const char *text, const char *sku,
                             const char *user, struct ticket *out)
{
    if (!key || key->len == 0 || !text || strnlen(text, TICKET_TEXT_MAX) >= TICKET_TEXT_MAX)
        return ERROR_TICKET_INVALID;
    /* Six fields separated by dots: t1, sku, user, n, exp, mac. */
    const char *f[6];
    size_t flen[6];
    const char *p = text;
    for (int i = 0; i < 6; i++) {
        const char *dot = i < 5 ? strchr(p, '.') : p + strlen(p);
        if (!dot)
            return ERROR_TICKET_INVALID;
        f[i] = p;
        flen[i] = (size_t)(dot - p);
        p = dot + 1;
    }
    if (strchr(f[5], '.') || flen[0] != 2 || memcmp(f[0], PREFIX, 2) != 0)
        return ERROR_TICKET_INVALID;
    struct ticket t;
    uint64_t n = 0, exp = 0;
    unsigned char mac[MAC_LEN + 4], want[MAC_LEN];
    if (decode_field(f[1], flen[1], t.sku, sizeof(t.sku)) != 0 ||
        decode_field(f[2], flen[2], t.user, sizeof(t.user)) != 0 ||
        parse_u64(f[3], flen[3], &n) != 0 || parse_u64(f[4], flen[4], &exp) != 0 ||
        exp > (uint64_t)INT64_MAX || b64url_decode(f[5], flen[5], mac, sizeof(mac)) != MAC_LEN)
        return ERROR_TICKET_INVALID;
    t.n = n;
    t.exp_ms = (int64_t)exp;
    if (ticket_mac(key, t.sku, t.user, t.n, t.exp_ms, want) != 0 ||
        CRYPTO_memcmp(mac, want, MAC_LEN) != 0)
        return ERROR_TICKET_INVALID;
    if (!sku || strcmp(t.sku, sku) != 0)
        return ERROR_TICKET_WRONG_SKU;
    if (!user || strcmp(t.user, user) != 0)
        return ERROR_TICKET_WRONG_USER;
    if (out)
        *out = t;
    return ERROR_NONE;
}
