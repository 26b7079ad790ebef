/*
 * identity — who sends an order, and the confirm token; see identity.h.
 *
 * The JWT path: the header segment is decoded here only to refuse a token whose alg is not the
 * key's before anything is verified (so no HMAC is ever keyed with a public key's PEM text);
 * libjwt's jwt_decode then verifies the signature with the key, and the claims it returns
 * (jwt_get_grants_json) are checked with jansson: exp, nbf, iss, aud, sub. No signature or
 * digest is computed by hand: libjwt does it with OpenSSL.
 */
#include "identity.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <jwt.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>

#include "config.h"
#include "log.h"
#include "request.h"
#include "sha256.h"
#include "validate.h"

/* Largest key file read (an 8192-bit RSA public key's PEM is under 1.5 KiB). */
#define KEY_FILE_MAX 16384
/* An HS256 secret shorter than SHA-256's output is refused (RFC 7518 §3.2). */
#define HS256_SECRET_MIN 32
#define RSA_BITS_MIN 2048

struct identity {
    jwt_alg_t alg;      /* the key's algorithm; JWT_ALG_NONE: no --jwt-key-file */
    unsigned char *key; /* the secret, or the PEM text (NUL-terminated), key_len bytes */
    int key_len;
    char issuer[CONFIG_JWT_CLAIM_MAX + 1];   /* "" when not checked */
    char audience[CONFIG_JWT_CLAIM_MAX + 1]; /* "" when not checked */
    int user_header;                         /* --user-header is set */
    int trust_body;                          /* --trust-body-user-id */
    int has_confirm;
    uint8_t confirm_digest[SHA256_DIGEST_LEN]; /* SHA-256 of the confirm token */
};

static void explain(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void explain(char *why, size_t whylen, const char *fmt, ...)
{
    if (!why || whylen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
}

/* A bearer token's characters (RFC 6750 b64token plus '='), 1..256 visible ASCII: the rule of
 * the admin token, kept for the confirm token. */
static bool token_chars_ok(const char *s, size_t n)
{
    if (n == 0 || n > CONFIG_ADMIN_TOKEN_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

/* ---- start: the key and the confirm token ------------------------------------------------ */

/* A file's path for a message: its first cap - 1 bytes, those outside printable ASCII as '?'. */
static void shown_path(const char *path, char *buf, size_t cap)
{
    size_t i = 0;
    for (; path[i] && i + 1 < cap; i++)
        buf[i] = (unsigned char)path[i] < 0x20 || (unsigned char)path[i] > 0x7e ? '?' : path[i];
    buf[i] = '\0';
}

/* What the PEM public key in pem[0..len) is for: JWT_ALG_RS256 (RSA, >= RSA_BITS_MIN bits),
 * JWT_ALG_ES256 (EC on P-256), or JWT_ALG_INVAL with a reason in why. */
static jwt_alg_t pem_alg(const char *pem, int len, char *why, size_t whylen)
{
    BIO *bio = BIO_new_mem_buf(pem, len);
    EVP_PKEY *pkey = bio ? PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    if (!pkey) {
        explain(why, whylen, "holds no readable PEM public key (\"BEGIN PUBLIC KEY\")");
        return JWT_ALG_INVAL;
    }
    jwt_alg_t alg = JWT_ALG_INVAL;
    if (EVP_PKEY_base_id(pkey) == EVP_PKEY_RSA) {
        int bits = EVP_PKEY_get_bits(pkey);
        if (bits >= RSA_BITS_MIN)
            alg = JWT_ALG_RS256;
        else
            explain(why, whylen, "holds an RSA key of %d bits; RS256 needs %d or more", bits,
                    RSA_BITS_MIN);
    } else if (EVP_PKEY_base_id(pkey) == EVP_PKEY_EC) {
        char curve[64] = "";
        size_t n = 0;
        EVP_PKEY_get_utf8_string_param(pkey, "group", curve, sizeof(curve), &n);
        if (strcmp(curve, SN_X9_62_prime256v1) == 0)
            alg = JWT_ALG_ES256;
        else
            explain(why, whylen, "holds an EC key on curve %s; ES256 needs P-256 (prime256v1)",
                    curve[0] ? curve : "(unknown)");
    } else {
        explain(why, whylen, "holds a public key of a kind other than RSA or EC");
    }
    EVP_PKEY_free(pkey);
    return alg;
}

/* Reads and checks --jwt-key-file into id. 0, or -1 with err. */
static int load_key(struct identity *id, const char *path, char *err, size_t errlen)
{
    char *buf = malloc(KEY_FILE_MAX + 2);
    if (!buf) {
        explain(err, errlen, "jwt_key_file: out of memory");
        return -1;
    }
    char shown[256];
    shown_path(path, shown, sizeof(shown));
    const char *problem = config_read_secret(path, buf, KEY_FILE_MAX);
    if (problem) {
        explain(err, errlen, "jwt_key_file: cannot read %s: %s", shown, problem);
        free(buf);
        return -1;
    }
    size_t n = strlen(buf);
    char why[160] = "";
    if (strncmp(buf, "-----BEGIN ", 11) == 0) {
        /* The trailing newline the reader took off ends the PEM's last line again. */
        buf[n++] = '\n';
        buf[n] = '\0';
        if (strncmp(buf, "-----BEGIN PUBLIC KEY-----", 26) != 0)
            snprintf(why, sizeof(why), "%s",
                     strstr(buf, "PRIVATE KEY")
                         ? "holds a private key: give inventoryd the public key only "
                           "(openssl pkey -pubout)"
                         : "holds a PEM block other than \"BEGIN PUBLIC KEY\" (a certificate or "
                           "a PKCS#1 key: convert it with openssl pkey -pubout / x509 -pubkey)");
        else
            id->alg = pem_alg(buf, (int)n, why, sizeof(why));
    } else if (n < HS256_SECRET_MIN) {
        snprintf(
            why, sizeof(why),
            "holds an HS256 secret of %zu bytes; it needs %d or more (openssl rand -base64 48)", n,
            HS256_SECRET_MIN);
    } else {
        id->alg = JWT_ALG_HS256;
    }
    if (why[0]) {
        explain(err, errlen, "jwt_key_file: %s %s", shown, why);
        OPENSSL_cleanse(buf, KEY_FILE_MAX + 2);
        free(buf);
        id->alg = JWT_ALG_NONE;
        return -1;
    }
    id->key = (unsigned char *)buf;
    id->key_len = (int)n;
    return 0;
}

/* Reads --confirm-token-file: only its digest is kept. 0, or -1 with err. */
static int load_confirm(struct identity *id, const struct config *cfg, char *err, size_t errlen)
{
    char buf[CONFIG_ADMIN_TOKEN_MAX + 2];
    char shown[256];
    shown_path(cfg->confirm_token_file, shown, sizeof(shown));
    const char *problem = config_read_secret(cfg->confirm_token_file, buf, sizeof(buf));
    if (problem) {
        explain(err, errlen, "confirm_token_file: cannot read %s: %s", shown, problem);
        return -1;
    }
    size_t n = strlen(buf);
    int rc = 0;
    if (!token_chars_ok(buf, n)) {
        explain(err, errlen,
                "confirm_token_file: %s must hold 1 to %d visible ASCII characters (no spaces or "
                "control characters; a trailing newline is allowed)",
                shown, CONFIG_ADMIN_TOKEN_MAX);
        rc = -1;
    } else {
        sha256_digest(buf, n, id->confirm_digest);
        id->has_confirm = 1;
        if (strcmp(buf, cfg->admin_token) == 0)
            log_msg(CONFIG_LOG_WARN, "identity",
                    "the confirm token is the admin token: the payment service holds admin "
                    "rights; give it a token of its own");
    }
    OPENSSL_cleanse(buf, sizeof(buf));
    return rc;
}

/* Says once how orders' users are established. */
static void log_mode(const struct identity *id, const struct config *cfg)
{
    if (id->alg != JWT_ALG_NONE) {
        log_msg(CONFIG_LOG_INFO, "identity",
                "orders need Authorization: Bearer <JWT> (%s, key %s%s%s%s%s); the user is its "
                "sub claim",
                jwt_alg_str(id->alg), cfg->jwt_key_file, id->issuer[0] ? ", iss " : "", id->issuer,
                id->audience[0] ? ", aud " : "", id->audience);
        if (id->user_header || id->trust_body)
            log_msg(CONFIG_LOG_WARN, "identity",
                    "%s ignored: with jwt_key_file the token alone decides who the user is",
                    id->user_header && id->trust_body ? "user_header and trust_body_user_id are"
                    : id->user_header                 ? "user_header is"
                                                      : "trust_body_user_id is");
        return;
    }
    if (id->user_header)
        log_msg(CONFIG_LOG_INFO, "identity",
                "the user of an order is header %s, believed from trusted_proxies only",
                cfg->user_header);
    if (id->trust_body)
        log_msg(CONFIG_LOG_WARN, "identity",
                "trust_body_user_id: an order's user is its body's user_id%s; any client may claim "
                "any user and so pass per-user limits: for development only",
                id->user_header ? " when the user header is absent" : "");
    if (!id->user_header && !id->trust_body)
        log_msg(CONFIG_LOG_INFO, "identity",
                "no user authentication configured (jwt_key_file, user_header): an order's "
                "user_id is a label only, and SKUs with limit_per_user refuse orders (401)");
}

int identity_new(const struct config *cfg, struct identity **out, char *err, size_t errlen)
{
    *out = NULL;
    struct identity *id = calloc(1, sizeof(*id));
    if (!id) {
        explain(err, errlen, "identity: out of memory");
        return -1;
    }
    id->alg = JWT_ALG_NONE;
    id->user_header = cfg->user_header[0] != '\0';
    id->trust_body = cfg->trust_body_user_id != 0;
    snprintf(id->issuer, sizeof(id->issuer), "%s", cfg->jwt_issuer);
    snprintf(id->audience, sizeof(id->audience), "%s", cfg->jwt_audience);
    if (!cfg->jwt_key_file[0] && (id->issuer[0] || id->audience[0])) {
        explain(err, errlen, "%s: needs jwt_key_file (the key that verifies the token)",
                id->issuer[0] ? "jwt_issuer" : "jwt_audience");
        goto fail;
    }
    if (id->user_header && cfg->trusted_proxies.n == 0) {
        explain(err, errlen,
                "user_header: needs trusted_proxies (the proxies whose %s header is believed); "
                "from any other peer it is ignored",
                cfg->user_header);
        goto fail;
    }
    if (cfg->jwt_key_file[0] && load_key(id, cfg->jwt_key_file, err, errlen) != 0)
        goto fail;
    if (cfg->confirm_token_file[0] && load_confirm(id, cfg, err, errlen) != 0)
        goto fail;
    log_mode(id, cfg);
    *out = id;
    return 0;
fail:
    identity_free(id);
    return -1;
}

void identity_free(struct identity *id)
{
    if (!id)
        return;
    if (id->key) {
        OPENSSL_cleanse(id->key, (size_t)id->key_len);
        free(id->key);
    }
    OPENSSL_cleanse(id, sizeof(*id));
    free(id);
}

/* ---- a request: the JWT -------------------------------------------------------------------- */

/* Longest JWT header looked at (base64url characters; a real one is under 100). */
#define HEADER_MAX 1024

/* The JSON object of base64url text s[0..n) (a JWT's header), or NULL. A new reference. */
static json_t *b64url_json(const char *s, size_t n)
{
    if (n == 0 || n > HEADER_MAX || n % 4 == 1)
        return NULL;
    char b64[HEADER_MAX + 4];
    unsigned char raw[HEADER_MAX];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '-')
            c = '+';
        else if (c == '_')
            c = '/';
        else if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
            return NULL; /* '+', '/' and '=' are not base64url */
        b64[m++] = c;
    }
    size_t pad = (4 - m % 4) % 4;
    for (size_t i = 0; i < pad; i++)
        b64[m++] = '=';
    int got = EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)m);
    if (got < 0 || (size_t)got < pad)
        return NULL;
    json_t *j = json_loadb((const char *)raw, (size_t)got - pad, JSON_REJECT_DUPLICATES, NULL);
    if (j && !json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* Checks the claims (a JSON object) against id at time now; the user into user. */
static enum identity_verdict check_claims(const struct identity *id, json_t *claims, double now,
                                          char *user, size_t cap, char *why, size_t whylen)
{
    json_t *exp = json_object_get(claims, "exp");
    json_t *nbf = json_object_get(claims, "nbf");
    if (!json_is_number(exp)) {
        explain(why, whylen, "the token has no exp claim (a NumericDate)");
        return IDENTITY_UNAUTHORIZED;
    }
    if (now > json_number_value(exp) + IDENTITY_JWT_LEEWAY_S) {
        explain(why, whylen, "the token has expired");
        return IDENTITY_UNAUTHORIZED;
    }
    if (nbf && !json_is_number(nbf)) {
        explain(why, whylen, "the token's nbf claim is not a NumericDate");
        return IDENTITY_UNAUTHORIZED;
    }
    if (nbf && now < json_number_value(nbf) - IDENTITY_JWT_LEEWAY_S) {
        explain(why, whylen, "the token is not valid yet (nbf)");
        return IDENTITY_UNAUTHORIZED;
    }
    if (id->issuer[0]) {
        const char *iss = json_string_value(json_object_get(claims, "iss"));
        if (!iss || strcmp(iss, id->issuer) != 0) {
            explain(why, whylen, "the token's issuer (iss) is not the one accepted");
            return IDENTITY_UNAUTHORIZED;
        }
    }
    if (id->audience[0]) {
        json_t *aud = json_object_get(claims, "aud");
        bool ok = json_is_string(aud) && strcmp(json_string_value(aud), id->audience) == 0;
        size_t i;
        json_t *v;
        if (json_is_array(aud))
            json_array_foreach(aud, i, v) ok =
                ok || (json_is_string(v) && strcmp(json_string_value(v), id->audience) == 0);
        if (!ok) {
            explain(why, whylen, "the token is not for this audience (aud)");
            return IDENTITY_UNAUTHORIZED;
        }
    }
    json_t *sub = json_object_get(claims, "sub");
    if (!json_is_string(sub)) {
        explain(why, whylen, "the token has no sub claim (a string: the user)");
        return IDENTITY_UNAUTHORIZED;
    }
    size_t n = json_string_length(sub);
    const char *s = json_string_value(sub);
    if (n != strlen(s) || !validate_printable(s, n) || n >= cap) {
        explain(why, whylen, "the token's sub must be 1..%d printable ASCII characters",
                VALIDATE_PRINTABLE_MAX);
        return IDENTITY_UNAUTHORIZED;
    }
    memcpy(user, s, n + 1);
    return IDENTITY_USER;
}

/* The user of the bearer JWT of authorization. */
static enum identity_verdict jwt_user(const struct identity *id, const char *authorization,
                                      char *user, size_t cap, char *why, size_t whylen)
{
    size_t len = 0;
    const char *tok = request_bearer_token(authorization, &len);
    if (!tok) {
        explain(why, whylen, "a bearer token (JWT) is required");
        return IDENTITY_UNAUTHORIZED;
    }
    if (len > IDENTITY_TOKEN_MAX) {
        explain(why, whylen, "the token is longer than %d bytes", IDENTITY_TOKEN_MAX);
        return IDENTITY_UNAUTHORIZED;
    }
    const char *dot1 = memchr(tok, '.', len);
    const char *dot2 = dot1 ? memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - tok)) : NULL;
    if (!dot2 || memchr(dot2 + 1, '.', len - (size_t)(dot2 + 1 - tok))) {
        explain(why, whylen, "the token is not a JWT (three base64url parts)");
        return IDENTITY_UNAUTHORIZED;
    }
    /* The alg first, read from the header: a token for another algorithm never reaches a
     * verification (alg "none"; HS256 keyed with an RSA key's PEM text...). */
    json_t *head = b64url_json(tok, (size_t)(dot1 - tok));
    const char *alg = json_string_value(json_object_get(head, "alg"));
    bool alg_ok = alg && jwt_str_alg(alg) == id->alg && strcmp(alg, jwt_alg_str(id->alg)) == 0;
    json_decref(head);
    if (!alg_ok) {
        explain(why, whylen, "the token's header must name alg %s", jwt_alg_str(id->alg));
        return IDENTITY_UNAUTHORIZED;
    }
    char buf[IDENTITY_TOKEN_MAX + 1];
    memcpy(buf, tok, len);
    buf[len] = '\0';
    jwt_t *jwt = NULL;
    if (jwt_decode(&jwt, buf, id->key, id->key_len) != 0 || !jwt) {
        explain(why, whylen, "the token is malformed or its signature does not verify");
        return IDENTITY_UNAUTHORIZED;
    }
    /* libjwt verified with the algorithm of the token's header: it must be the key's. */
    if (jwt_get_alg(jwt) != id->alg) {
        jwt_free(jwt);
        explain(why, whylen, "the token's header must name alg %s", jwt_alg_str(id->alg));
        return IDENTITY_UNAUTHORIZED;
    }
    char *text = jwt_get_grants_json(jwt, NULL);
    jwt_free(jwt);
    json_t *claims = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    enum identity_verdict v;
    if (!json_is_object(claims)) {
        explain(why, whylen, "the token's claims are not a JSON object");
        v = IDENTITY_UNAUTHORIZED;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = check_claims(id, claims, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9, user, cap, why,
                         whylen);
    }
    json_decref(claims);
    return v;
}

/* ---- a request ------------------------------------------------------------------------------ */

enum identity_verdict identity_of(const struct identity *id, const struct request *req,
                                  const struct validate_order *in, char *user, size_t cap,
                                  char *why, size_t whylen)
{
    if (why && whylen)
        why[0] = '\0';
    if (!id)
        return IDENTITY_NONE;
    if (id->alg != JWT_ALG_NONE)
        return jwt_user(id, req->authorization, user, cap, why, whylen);
    if (id->user_header && req->peer_trusted && req->user_header_n > 0) {
        const char *v = req->user_header;
        size_t n = v ? strlen(v) : 0;
        if (req->user_header_n > 1) {
            explain(why, whylen, "the user header came more than once");
            return IDENTITY_UNAUTHORIZED;
        }
        if (!v || !validate_printable(v, n) || n >= cap) {
            explain(why, whylen, "the user header must be 1..%d printable ASCII characters",
                    VALIDATE_PRINTABLE_MAX);
            return IDENTITY_UNAUTHORIZED;
        }
        memcpy(user, v, n + 1);
        return IDENTITY_USER;
    }
    if (id->trust_body && in && in->has_user_id) {
        size_t n = strlen(in->user_id);
        if (n >= cap)
            return IDENTITY_NONE;
        memcpy(user, in->user_id, n + 1);
        return IDENTITY_USER;
    }
    return IDENTITY_NONE;
}

int identity_is_confirm_token(const struct identity *id, const char *authorization)
{
    if (!id || !id->has_confirm)
        return 0;
    size_t len = 0;
    const char *tok = request_bearer_token(authorization, &len);
    if (!tok)
        return 0;
    /* Digests of equal length compared with CRYPTO_memcmp: the time depends neither on where
     * the token differs nor on its length. */
    uint8_t d[SHA256_DIGEST_LEN];
    sha256_digest(tok, len, d);
    return CRYPTO_memcmp(d, id->confirm_digest, sizeof(d)) == 0;
}
