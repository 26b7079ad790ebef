/*
 * pow — the proof-of-work challenge and its check; see pow.h.
 *
 * Speed matters on the checking side (SPEC §16: at least 100,000 checks per second per core, so
 * a bot's junk costs the server less than it costs the bot): each thread keeps its keyed HMAC
 * context and a fetched SHA-256 between calls. OpenSSL 3's one-shot HMAC() and EVP_Digest()
 * look the algorithm up and key the MAC anew on every call, which is most of their cost on
 * inputs this short; EVP_MAC_init with a NULL key re-starts the context with the key it holds.
 * The cache is keyed by the key's bytes, so a caller changing keys stays correct.
 */
#include "pow.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "b64url.h"

#define MAC_LEN 32
#define MAC_B64_LEN 43    /* 32 bytes in base64url without padding */
#define FIELD_MAX 128     /* a SKU or user: at most 128 bytes */
#define KEY_CACHE_MAX 256 /* longer keys are keyed on every call (no cache) */

/* ---- per-thread libcrypto state ---- */

struct pow_tls {
    EVP_MAC *mac;
    EVP_MAC_CTX *macctx; /* keyed with key[0..keylen) when keylen > 0 */
    unsigned char key[KEY_CACHE_MAX];
    size_t keylen;
    EVP_MD *md;
    EVP_MD_CTX *mdctx;
};

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_free(void *p)
{
    struct pow_tls *t = p;
    if (!t)
        return;
    EVP_MAC_CTX_free(t->macctx);
    EVP_MAC_free(t->mac);
    EVP_MD_CTX_free(t->mdctx);
    EVP_MD_free(t->md);
    OPENSSL_cleanse(t->key, sizeof(t->key));
    free(t);
}

static void tls_make_key(void)
{
    (void)pthread_key_create(&tls_key, tls_free);
}

/* This thread's state, made on first use; NULL when out of memory or libcrypto lacks SHA-256. */
static struct pow_tls *tls_get(void)
{
    pthread_once(&tls_once, tls_make_key);
    struct pow_tls *t = pthread_getspecific(tls_key);
    if (t)
        return t;
    t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    t->md = EVP_MD_fetch(NULL, "SHA256", NULL);
    t->mdctx = EVP_MD_CTX_new();
    if (!t->mac || !t->md || !t->mdctx || pthread_setspecific(tls_key, t) != 0) {
        tls_free(t);
        return NULL;
    }
    return t;
}

/* HMAC-SHA256(key, msg[0..len)) into out. 0, or -1 when libcrypto failed. */
static int hmac_sha256(const unsigned char *key, size_t keylen, const char *msg, size_t len,
                       unsigned char out[MAC_LEN])
{
    struct pow_tls *t = tls_get();
    if (!t)
        return -1;
    bool cached = t->macctx && keylen <= KEY_CACHE_MAX && keylen == t->keylen &&
                  memcmp(key, t->key, keylen) == 0;
    if (cached) {
        if (EVP_MAC_init(t->macctx, NULL, 0, NULL) != 1)
            return -1;
    } else {
        EVP_MAC_CTX_free(t->macctx);
        t->keylen = 0;
        t->macctx = EVP_MAC_CTX_new(t->mac);
        if (!t->macctx)
            return -1;
        OSSL_PARAM params[] = {
            OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
            OSSL_PARAM_construct_end()};
        if (EVP_MAC_init(t->macctx, key, keylen, params) != 1) {
            EVP_MAC_CTX_free(t->macctx);
            t->macctx = NULL;
            return -1;
        }
        if (keylen <= KEY_CACHE_MAX) {
            memcpy(t->key, key, keylen);
            t->keylen = keylen;
        }
    }
    size_t n = 0;
    if (EVP_MAC_update(t->macctx, (const unsigned char *)msg, len) != 1 ||
        EVP_MAC_final(t->macctx, out, &n, MAC_LEN) != 1 || n != MAC_LEN)
        return -1;
    if (!cached && keylen > KEY_CACHE_MAX) {
        EVP_MAC_CTX_free(t->macctx); /* not reusable: its key is not remembered */
        t->macctx = NULL;
    }
    return 0;
}

/* SHA-256(challenge "." nonce) into out. 0, or -1 when libcrypto failed. */
static int work_digest(const char *challenge, const char *nonce, uint8_t out[32])
{
    struct pow_tls *t = tls_get();
    unsigned int n = 0;
    if (!t || EVP_DigestInit_ex2(t->mdctx, t->md, NULL) != 1 ||
        EVP_DigestUpdate(t->mdctx, challenge, strlen(challenge)) != 1 ||
        EVP_DigestUpdate(t->mdctx, ".", 1) != 1 ||
        EVP_DigestUpdate(t->mdctx, nonce, strlen(nonce)) != 1 ||
        EVP_DigestFinal_ex(t->mdctx, out, &n) != 1 || n != 32)
        return -1;
    return 0;
}

/* ---- the challenge ---- */

const char *pow_result_string(enum pow_result r)
{
    switch (r) {
    case POW_OK: return "ok";
    case POW_MALFORMED: return "malformed";
    case POW_BAD_MAC: return "bad_mac";
    case POW_WRONG_USER: return "wrong_user";
    case POW_WRONG_SKU: return "wrong_sku";
    case POW_EXPIRED: return "expired";
    case POW_TOO_FEW_BITS: return "too_few_bits";
    }
    return "malformed";
}

/* The MAC's message "p1|sku|user|issued|bits" into msg; its length, or -1 when too long. */
static int mac_message(const char *sku, size_t skulen, const char *user, size_t userlen,
                       int64_t issued_ms, int bits, char *msg, size_t cap)
{
    int n = snprintf(msg, cap, "p1|%.*s|%.*s|%lld|%d", (int)skulen, sku, (int)userlen, user,
                     (long long)issued_ms, bits);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

int pow_mint(const unsigned char *key, size_t keylen, const char *sku, const char *user,
             int64_t issued_ms, int bits, char *out, size_t cap)
{
    if (cap > 0)
        out[0] = '\0';
    size_t skulen = sku ? strlen(sku) : 0, userlen = user ? strlen(user) : 0;
    if (!key || keylen == 0 || skulen < 1 || skulen > FIELD_MAX || userlen < 1 ||
        userlen > FIELD_MAX || memchr(sku, '|', skulen) || issued_ms < 0 || bits < POW_BITS_MIN ||
        bits > POW_BITS_MAX)
        return -1;
    char msg[2 * FIELD_MAX + 64];
    unsigned char mac[MAC_LEN];
    int mlen = mac_message(sku, skulen, user, userlen, issued_ms, bits, msg, sizeof(msg));
    if (mlen < 0 || hmac_sha256(key, keylen, msg, (size_t)mlen, mac) != 0)
        return -1;
    char s64[4 * FIELD_MAX / 3 + 4], u64[4 * FIELD_MAX / 3 + 4], m64[MAC_B64_LEN + 2];
    /* the buffers fit FIELD_MAX-byte fields and the MAC: these cannot fail */
    b64url_encode((const unsigned char *)sku, skulen, s64, sizeof(s64));
    b64url_encode((const unsigned char *)user, userlen, u64, sizeof(u64));
    b64url_encode(mac, MAC_LEN, m64, sizeof(m64));
    int n = snprintf(out, cap, "p1.%s.%s.%lld.%d.%s", s64, u64, (long long)issued_ms, bits, m64);
    if (n < 0 || (size_t)n >= cap) {
        if (cap > 0)
            out[0] = '\0';
        return -1;
    }
    return n;
}

/* A challenge taken apart. */
struct parsed {
    char sku[FIELD_MAX + 1], user[FIELD_MAX + 1];
    size_t skulen, userlen;
    int64_t issued_ms;
    int bits;
    unsigned char mac[MAC_LEN];
};

/* Reads digits s[0..len) (1..maxdigits of them, no sign, no leading zero but "0") into *v. */
static int read_uint(const char *s, size_t len, size_t maxdigits, int64_t *v)
{
    if (len < 1 || len > maxdigits || (len > 1 && s[0] == '0'))
        return -1;
    int64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        x = x * 10 + (s[i] - '0');
    }
    *v = x;
    return 0;
}

static int parse(const char *c, struct parsed *p)
{
    if (!c || strnlen(c, POW_CHALLENGE_MAX) >= POW_CHALLENGE_MAX || strncmp(c, "p1.", 3) != 0)
        return -1;
    const char *f[5];
    size_t len[5];
    const char *s = c + 3;
    for (int i = 0; i < 5; i++) {
        const char *dot = strchr(s, '.');
        if ((i < 4) != (dot != NULL))
            return -1; /* exactly five fields after "p1." */
        f[i] = s;
        len[i] = dot ? (size_t)(dot - s) : strlen(s);
        s = dot ? dot + 1 : s + len[i];
    }
    int n = b64url_decode(f[0], len[0], (unsigned char *)p->sku, FIELD_MAX);
    if (n < 1 || memchr(p->sku, '|', (size_t)n) || memchr(p->sku, '\0', (size_t)n))
        return -1;
    p->skulen = (size_t)n;
    p->sku[n] = '\0';
    n = b64url_decode(f[1], len[1], (unsigned char *)p->user, FIELD_MAX);
    if (n < 1 || memchr(p->user, '\0', (size_t)n))
        return -1;
    p->userlen = (size_t)n;
    p->user[n] = '\0';
    int64_t bits = 0;
    if (read_uint(f[2], len[2], 18, &p->issued_ms) != 0 || read_uint(f[3], len[3], 2, &bits) != 0 ||
        bits < POW_BITS_MIN || bits > POW_BITS_MAX)
        return -1;
    p->bits = (int)bits;
    if (len[4] != MAC_B64_LEN || b64url_decode(f[4], len[4], p->mac, MAC_LEN) != MAC_LEN)
        return -1;
    return 0;
}

int pow_parse(const char *challenge, int64_t *issued_ms, int *bits)
{
    struct parsed p;
    if (parse(challenge, &p) != 0)
        return -1;
    *issued_ms = p.issued_ms;
    *bits = p.bits;
    return 0;
}

static bool nonce_ok(const char *nonce)
{
    if (!nonce)
        return false;
    size_t n = strnlen(nonce, POW_NONCE_MAX + 1);
    if (n < 1 || n > POW_NONCE_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (nonce[i] < 0x20 || nonce[i] > 0x7e)
            return false;
    return true;
}

int pow_leading_zero_bits(const uint8_t digest[32])
{
    int bits = 0;
    for (int i = 0; i < 32; i++) {
        if (digest[i] == 0) {
            bits += 8;
            continue;
        }
        for (int b = 7; b >= 0 && !((digest[i] >> b) & 1); b--)
            bits++;
        break;
    }
    return bits;
}

int pow_work_bits(const char *challenge, const char *nonce)
{
    uint8_t d[32];
    if (work_digest(challenge, nonce, d) != 0)
        return 0;
    return pow_leading_zero_bits(d);
}

enum pow_result pow_verify(const unsigned char *key, size_t keylen, const char *challenge,
                           const char *nonce, const char *sku, const char *user, int64_t now_ms,
                           int min_bits)
{
    struct parsed p;
    if (parse(challenge, &p) != 0 || !nonce_ok(nonce) || !key || keylen == 0 || !sku || !user)
        return POW_MALFORMED;
    char msg[2 * FIELD_MAX + 64];
    unsigned char mac[MAC_LEN];
    int mlen =
        mac_message(p.sku, p.skulen, p.user, p.userlen, p.issued_ms, p.bits, msg, sizeof(msg));
    /* A libcrypto failure proves nothing: refused as unsigned. */
    if (mlen < 0 || hmac_sha256(key, keylen, msg, (size_t)mlen, mac) != 0 ||
        CRYPTO_memcmp(mac, p.mac, MAC_LEN) != 0)
        return POW_BAD_MAC;
    if (strlen(user) != p.userlen || memcmp(user, p.user, p.userlen) != 0)
        return POW_WRONG_USER;
    if (strlen(sku) != p.skulen || memcmp(sku, p.sku, p.skulen) != 0)
        return POW_WRONG_SKU;
    if (now_ms >= p.issued_ms + POW_TTL_MS || p.issued_ms > now_ms + POW_TTL_MS)
        return POW_EXPIRED;
    if (p.bits < min_bits)
        return POW_TOO_FEW_BITS;
    uint8_t d[32];
    if (work_digest(challenge, nonce, d) != 0 || pow_leading_zero_bits(d) < p.bits)
        return POW_TOO_FEW_BITS;
    return POW_OK;
}

/* Writes v in base 36 into out (at least 14 bytes); returns the length. */
static size_t base36(uint64_t v, char *out)
{
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    char tmp[16];
    size_t n = 0;
    do {
        tmp[n++] = digits[v % 36];
        v /= 36;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = '\0';
    return n;
}

int64_t pow_solve(const char *challenge, int bits, uint64_t start, uint64_t max_tries,
                  char nonce[POW_NONCE_MAX + 1])
{
    struct pow_tls *t = tls_get();
    if (!t || !challenge || strnlen(challenge, POW_CHALLENGE_MAX) >= POW_CHALLENGE_MAX)
        return -1;
    /* The prefix "challenge." is hashed once; each try copies that state and adds the nonce. */
    EVP_MD_CTX *base = EVP_MD_CTX_new();
    if (!base || EVP_DigestInit_ex2(base, t->md, NULL) != 1 ||
        EVP_DigestUpdate(base, challenge, strlen(challenge)) != 1 ||
        EVP_DigestUpdate(base, ".", 1) != 1) {
        EVP_MD_CTX_free(base);
        return -1;
    }
    int64_t found = -1;
    for (uint64_t i = 0; i < max_tries; i++) {
        char n[16];
        size_t len = base36(start + i, n);
        uint8_t d[32];
        unsigned int dl = 0;
        if (EVP_MD_CTX_copy_ex(t->mdctx, base) != 1 || EVP_DigestUpdate(t->mdctx, n, len) != 1 ||
            EVP_DigestFinal_ex(t->mdctx, d, &dl) != 1)
            break;
        if (pow_leading_zero_bits(d) >= bits) {
            memcpy(nonce, n, len + 1);
            found = (int64_t)(i + 1);
            break;
        }
    }
    EVP_MD_CTX_free(base);
    return found;
}
