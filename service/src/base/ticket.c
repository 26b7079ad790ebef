/*
 * ticket — the waiting room's signed admission tickets; see ticket.h. The base64url codec here
 * only spells bytes in URL-safe letters (RFC 4648 §5, no padding); the MAC is OpenSSL's.
 */
#include "ticket.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "config.h"

#define MAC_LEN 32 /* HMAC-SHA256 */
#define PREFIX "t1"

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Spells len bytes of in as base64url without padding into out (cap bytes, NUL included).
 * Returns the length written, or -1 when cap is too small. */
static int b64url_encode(const unsigned char *in, size_t len, char *out, size_t cap)
{
    size_t need = (len / 3) * 4 + (len % 3 ? len % 3 + 1 : 0);
    if (need + 1 > cap)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = b64url[(v >> 18) & 63];
        out[o++] = b64url[(v >> 12) & 63];
        if (i + 1 < len)
            out[o++] = b64url[(v >> 6) & 63];
        if (i + 2 < len)
            out[o++] = b64url[v & 63];
    }
    out[o] = '\0';
    return (int)o;
}

static int b64url_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

/* Decodes len letters of base64url at in into out (cap bytes). Returns the bytes written, or -1
 * on a letter outside the alphabet, a length no encoding has (len % 4 == 1), non-zero bits left
 * over (so every byte string has exactly one spelling), or no room. */
static int b64url_decode(const char *in, size_t len, unsigned char *out, size_t cap)
{
    if (len % 4 == 1)
        return -1;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64url_value(in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o >= cap)
                return -1;
            out[o++] = (unsigned char)((acc >> bits) & 0xff);
        }
    }
    if (bits > 0 && (acc & ((1u << bits) - 1)) != 0)
        return -1;
    return (int)o;
}

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
