/*
 * Unit tests of service/src/loop/identity.c: who sends an order (SPEC §11).
 *
 * JWT: HS256 (a good token; a bad signature; another secret; expired, not yet valid, each inside
 * and outside the clock-skew allowance; alg none; HS384 with the right secret; no exp; iss;
 * aud as a string and as an array; sub missing, not a string, too long, not printable; not a
 * bearer token, not three parts, too long), and one token built here with OpenSSL's HMAC
 * rather than libjwt, so that a libjwt that agreed only with itself would fail. RS256 and ES256
 * with keys made at test time by OpenSSL (a good token; a token of another key; the other
 * algorithm's token; HS256 keyed with the public key's PEM text: the alg-confusion forgery).
 * With a key, the token alone decides (the user header and the body are ignored). The key and
 * option checks of identity_new (unreadable file, private key, short secret, RSA 1024, EC
 * P-384, a certificate-less PEM of another kind, iss/aud without a key, user_header without
 * trusted proxies, a bad confirm token file). The user header (trusted and untrusted peer, sent
 * twice, bad value), --trust-body-user-id, the default (a label only), and the confirm token.
 * No message ever quotes the token.
 *
 * Tokens are signed with libjwt's encoder (a code path of its own) and OpenSSL; nothing here
 * talks to a network.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jwt.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#include "config.h"
#include "identity.h"
#include "request.h"
#include "validate.h"

static const char SECRET[] = "0123456789abcdef0123456789abcdef-hs256-test-secret";

static char dir[64];
/* PEM texts of the keys made at start: public in files, private in memory for signing. */
static char rsa_pub[256], ec_pub[256], rsa_other_pub[256];
static char *rsa_priv, *rsa_other_priv, *ec_priv, *ec_other_priv;
static char *rsa_pub_pem; /* the RSA public key's PEM text (the alg-confusion secret) */

/* ---- helpers --------------------------------------------------------------------------- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static char *pem_of(EVP_PKEY *k, int private_key)
{
    BIO *b = BIO_new(BIO_s_mem());
    assert_non_null(b);
    if (private_key)
        assert_int_equal(PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL), 1);
    else
        assert_int_equal(PEM_write_bio_PUBKEY(b, k), 1);
    char *data;
    long n = BIO_get_mem_data(b, &data);
    char *out = malloc((size_t)n + 1);
    memcpy(out, data, (size_t)n);
    out[n] = '\0';
    BIO_free(b);
    return out;
}

/* Makes a key: its public PEM in file pub (when not NULL), its private PEM returned. */
static char *make_key(EVP_PKEY *k, const char *pub)
{
    assert_non_null(k);
    if (pub) {
        char *p = pem_of(k, 0);
        write_file(pub, p);
        free(p);
    }
    char *priv = pem_of(k, 1);
    EVP_PKEY_free(k);
    return priv;
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/test_identity-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(rsa_pub, sizeof(rsa_pub), "%s/rsa.pub", dir);
    snprintf(rsa_other_pub, sizeof(rsa_other_pub), "%s/rsa-other.pub", dir);
    snprintf(ec_pub, sizeof(ec_pub), "%s/ec.pub", dir);
    rsa_priv = make_key(EVP_RSA_gen(2048), rsa_pub);
    rsa_other_priv = make_key(EVP_RSA_gen(2048), rsa_other_pub);
    ec_priv = make_key(EVP_EC_gen("P-256"), ec_pub);
    ec_other_priv = make_key(EVP_EC_gen("P-256"), NULL);
    rsa_pub_pem = read_all(rsa_pub);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    free(rsa_priv);
    free(rsa_other_priv);
    free(ec_priv);
    free(ec_other_priv);
    free(rsa_pub_pem);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A token of claims (JSON text) signed by libjwt with alg and key (NULL for none). */
static char *sign(jwt_alg_t alg, const char *key, size_t keylen, const char *claims)
{
    jwt_t *j = NULL;
    assert_int_equal(jwt_new(&j), 0);
    assert_int_equal(jwt_add_grants_json(j, claims), 0);
    assert_int_equal(jwt_set_alg(j, alg, (const unsigned char *)key, (int)keylen), 0);
    char *t = jwt_encode_str(j);
    assert_non_null(t);
    jwt_free(j);
    return t;
}

static char *hs(const char *claims)
{
    return sign(JWT_ALG_HS256, SECRET, strlen(SECRET), claims);
}

/* base64url of data[0..n) without padding, into out. */
static void b64url(const unsigned char *data, size_t n, char *out)
{
    int m = EVP_EncodeBlock((unsigned char *)out, data, (int)n);
    while (m > 0 && out[m - 1] == '=')
        m--;
    out[m] = '\0';
    for (char *p = out; *p; p++)
        *p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
}

/* An HS256 token built here from header and claims (JSON texts) with OpenSSL's HMAC. */
static char *hand_hs256(const char *header, const char *claims, const char *secret)
{
    char *t = malloc(8192);
    char part[4096];
    b64url((const unsigned char *)header, strlen(header), t);
    strcat(t, ".");
    b64url((const unsigned char *)claims, strlen(claims), part);
    strcat(t, part);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)t, strlen(t), mac,
         &maclen);
    b64url(mac, maclen, part);
    strcat(t, ".");
    strcat(t, part);
    return t;
}

/* Claims with sub and exp/nbf relative to now (a field omitted when its offset is 0 / sub
 * NULL), plus extra JSON members (",..."). */
static char *claims(const char *sub, long exp_in, long nbf_in, const char *extra)
{
    static char buf[4096];
    long now = (long)time(NULL);
    int n = snprintf(buf, sizeof(buf), "{\"iat\":%ld", now);
    if (sub)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, ",\"sub\":\"%s\"", sub);
    if (exp_in)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, ",\"exp\":%ld", now + exp_in);
    if (nbf_in)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, ",\"nbf\":%ld", now + nbf_in);
    snprintf(buf + n, sizeof(buf) - (size_t)n, "%s}", extra ? extra : "");
    return buf;
}

/* An identity of cfg (or a failure: NULL with err). */
static struct identity *make(const struct config *cfg, char *err, size_t errlen)
{
    struct identity *id = NULL;
    if (identity_new(cfg, &id, err, errlen) != 0)
        return NULL;
    return id;
}

static struct config cfg_key(const char *key_file)
{
    struct config c;
    config_defaults(&c);
    snprintf(c.jwt_key_file, sizeof(c.jwt_key_file), "%s", key_file);
    return c;
}

static char hs_file[256];

static struct identity *hs_identity(const char *iss, const char *aud)
{
    snprintf(hs_file, sizeof(hs_file), "%s/hs.key", dir);
    char text[128];
    snprintf(text, sizeof(text), "%s\n", SECRET); /* the newline is not part of the secret */
    write_file(hs_file, text);
    struct config c = cfg_key(hs_file);
    if (iss)
        snprintf(c.jwt_issuer, sizeof(c.jwt_issuer), "%s", iss);
    if (aud)
        snprintf(c.jwt_audience, sizeof(c.jwt_audience), "%s", aud);
    char err[256];
    struct identity *id = make(&c, err, sizeof(err));
    if (!id)
        fail_msg("identity_new: %s", err);
    return id;
}

/* The verdict for a request bearing token (NULL: no Authorization); user / why filled. */
static char user[VALIDATE_PRINTABLE_MAX + 1], why[256];

static enum identity_verdict of_auth(const struct identity *id, const char *authorization)
{
    struct request req = {.method = HTTP_POST, .path = "/api/v1/orders"};
    req.authorization = authorization;
    struct validate_order in = {.quantity = 1, .has_user_id = true};
    snprintf(in.sku, sizeof(in.sku), "sku");
    snprintf(in.user_id, sizeof(in.user_id), "body-user");
    user[0] = '\0';
    why[0] = '\0';
    return identity_of(id, &req, &in, user, sizeof(user), why, sizeof(why));
}

/* The verdict of "Bearer <token>"; frees token. Checks that why never quotes the token. */
static enum identity_verdict of_token(const struct identity *id, char *token)
{
    char *auth = malloc(strlen(token) + 8);
    sprintf(auth, "Bearer %s", token);
    enum identity_verdict v = of_auth(id, auth);
    if (v == IDENTITY_UNAUTHORIZED) {
        if (!why[0])
            fail_msg("401 without a reason");
        if (strlen(token) >= 8 && strstr(why, token))
            fail_msg("the reason quotes the token: %s", why);
        const char *sig = strrchr(token, '.');
        if (sig && strlen(sig) > 8 && strstr(why, sig + 1))
            fail_msg("the reason quotes the signature: %s", why);
    }
    free(auth);
    free(token);
    return v;
}

#define EXPECT_USER(v, name)                                                                       \
    do {                                                                                           \
        enum identity_verdict v_ = (v);                                                            \
        if (v_ != IDENTITY_USER)                                                                   \
            fail_msg("line %d: verdict %d (%s), expected user %s", __LINE__, v_, why, name);       \
        assert_string_equal(user, name);                                                           \
    } while (0)
#define EXPECT_401(v)                                                                              \
    do {                                                                                           \
        enum identity_verdict v_ = (v);                                                            \
        if (v_ != IDENTITY_UNAUTHORIZED)                                                           \
            fail_msg("line %d: verdict %d (user %s), expected 401", __LINE__, v_, user);           \
    } while (0)

/* ---- HS256 ----------------------------------------------------------------------------- */

static void test_hs256_good_and_bad(void **state)
{
    (void)state;
    struct identity *id = hs_identity(NULL, NULL);
    EXPECT_USER(of_token(id, hs(claims("alice", 300, 0, NULL))), "alice");
    /* built with OpenSSL's HMAC, not libjwt's encoder */
    EXPECT_USER(of_token(id, hand_hs256("{\"alg\":\"HS256\",\"typ\":\"JWT\"}",
                                        claims("carol", 300, 0, NULL), SECRET)),
                "carol");
    /* a signature of another secret; one bit of the signature changed; claims changed */
    EXPECT_401(of_token(id, hand_hs256("{\"alg\":\"HS256\"}", claims("alice", 300, 0, NULL),
                                       "another-secret-another-secret-another")));
    char *t = hs(claims("alice", 300, 0, NULL));
    char *last = t + strlen(t) - 2;
    *last = *last == 'A' ? 'B' : 'A';
    EXPECT_401(of_token(id, t));
    char *good = hs(claims("alice", 300, 0, NULL));
    char *forged = hand_hs256("{\"alg\":\"HS256\"}", claims("mallory", 300, 0, NULL), "x");
    /* mallory's claims under alice's signature */
    char *swapped = malloc(strlen(good) + strlen(forged) + 1);
    size_t head = (size_t)(strrchr(forged, '.') - forged);
    memcpy(swapped, forged, head);
    strcpy(swapped + head, strrchr(good, '.'));
    EXPECT_401(of_token(id, swapped));
    free(good);
    free(forged);
    identity_free(id);
}

static void test_hs256_times(void **state)
{
    (void)state;
    struct identity *id = hs_identity(NULL, NULL);
    EXPECT_401(of_token(id, hs(claims("alice", -60, 0, NULL))));
    assert_non_null(strstr(why, "expired"));
    EXPECT_USER(of_token(id, hs(claims("alice", -2, 0, NULL))), "alice"); /* within the skew */
    EXPECT_401(of_token(id, hs(claims("alice", 300, 60, NULL))));
    assert_non_null(strstr(why, "not valid yet"));
    EXPECT_USER(of_token(id, hs(claims("alice", 300, 2, NULL))), "alice");
    EXPECT_USER(of_token(id, hs(claims("alice", 300, -60, NULL))), "alice");
    EXPECT_401(of_token(id, hs(claims("alice", 0, 0, NULL)))); /* no exp */
    assert_non_null(strstr(why, "exp"));
    EXPECT_401(of_token(id, hs("{\"sub\":\"alice\",\"exp\":\"tomorrow\"}")));
    EXPECT_401(of_token(id, hs(claims("alice", 300, 0, ",\"nbf\":\"now\""))));
    /* a fractional NumericDate is a number too */
    char frac[128];
    snprintf(frac, sizeof(frac), "{\"sub\":\"alice\",\"exp\":%ld.5}", (long)time(NULL) + 300);
    EXPECT_USER(of_token(id, hs(frac)), "alice");
    identity_free(id);
}

static void test_hs256_alg(void **state)
{
    (void)state;
    struct identity *id = hs_identity(NULL, NULL);
    const char *c = claims("alice", 300, 0, NULL);
    /* alg none: by libjwt, and by hand with an empty or a valid-looking signature */
    EXPECT_401(of_token(id, sign(JWT_ALG_NONE, NULL, 0, c)));
    assert_non_null(strstr(why, "alg HS256"));
    char *none = hand_hs256("{\"alg\":\"none\"}", c, SECRET);
    EXPECT_401(of_token(id, none));
    char *none_empty = hand_hs256("{\"alg\":\"none\"}", c, SECRET);
    strrchr(none_empty, '.')[1] = '\0';
    EXPECT_401(of_token(id, none_empty));
    /* HS384 / HS512 with the right secret: not the key's algorithm */
    EXPECT_401(of_token(id, sign(JWT_ALG_HS384, SECRET, strlen(SECRET), c)));
    EXPECT_401(of_token(id, sign(JWT_ALG_HS512, SECRET, strlen(SECRET), c)));
    /* "alg":"hs256" (case) and no alg at all */
    EXPECT_401(of_token(id, hand_hs256("{\"alg\":\"hs256\"}", c, SECRET)));
    EXPECT_401(of_token(id, hand_hs256("{\"typ\":\"JWT\"}", c, SECRET)));
    EXPECT_401(of_token(id, hand_hs256("[\"HS256\"]", c, SECRET)));
    EXPECT_401(of_token(id, hand_hs256("{\"alg\":\"HS256\",\"typ\":\"JWE\"}", c, SECRET)));
    identity_free(id);
}

static void test_hs256_iss_aud(void **state)
{
    (void)state;
    struct identity *id = hs_identity("https://auth.example", "inventory");
    EXPECT_USER(of_token(id, hs(claims("alice", 300, 0,
                                       ",\"iss\":\"https://auth.example\",\"aud\":\"inventory\""))),
                "alice");
    EXPECT_USER(of_token(id, hs(claims("alice", 300, 0,
                                       ",\"iss\":\"https://auth.example\","
                                       "\"aud\":[\"billing\",\"inventory\"]"))),
                "alice");
    EXPECT_401(of_token(id, hs(claims("alice", 300, 0,
                                      ",\"iss\":\"https://auth.example\","
                                      "\"aud\":[\"billing\",\"shipping\"]"))));
    assert_non_null(strstr(why, "aud"));
    EXPECT_401(of_token(
        id,
        hs(claims("alice", 300, 0, ",\"iss\":\"https://auth.example\",\"aud\":\"inventory-x\""))));
    EXPECT_401(of_token(id, hs(claims("alice", 300, 0, ",\"iss\":\"https://auth.example\""))));
    EXPECT_401(of_token(
        id, hs(claims("alice", 300, 0, ",\"iss\":\"https://auth.example\",\"aud\":[1,2]"))));
    EXPECT_401(of_token(id, hs(claims("alice", 300, 0,
                                      ",\"iss\":\"https://evil.example\",\"aud\":\"inventory\""))));
    assert_non_null(strstr(why, "iss"));
    EXPECT_401(of_token(id, hs(claims("alice", 300, 0, ",\"aud\":\"inventory\""))));
    identity_free(id);

    /* without iss/aud configured, whatever iss and aud the token has */
    id = hs_identity(NULL, NULL);
    EXPECT_USER(of_token(id, hs(claims("alice", 300, 0, ",\"iss\":\"x\",\"aud\":[\"y\"]"))),
                "alice");
    identity_free(id);
}

static void test_hs256_sub(void **state)
{
    (void)state;
    struct identity *id = hs_identity(NULL, NULL);
    EXPECT_401(of_token(id, hs(claims(NULL, 300, 0, NULL))));
    assert_non_null(strstr(why, "sub"));
    EXPECT_401(of_token(id, hs(claims(NULL, 300, 0, ",\"sub\":42"))));
    EXPECT_401(of_token(id, hs(claims("", 300, 0, NULL))));
    char longest[VALIDATE_PRINTABLE_MAX + 2];
    memset(longest, 'u', VALIDATE_PRINTABLE_MAX);
    longest[VALIDATE_PRINTABLE_MAX] = '\0';
    EXPECT_USER(of_token(id, hs(claims(longest, 300, 0, NULL))), longest);
    longest[VALIDATE_PRINTABLE_MAX] = 'u';
    longest[VALIDATE_PRINTABLE_MAX + 1] = '\0';
    EXPECT_401(of_token(id, hs(claims(longest, 300, 0, NULL))));
    EXPECT_401(of_token(id, hs(claims("a\\u0001b", 300, 0, NULL))));
    EXPECT_401(of_token(id, hs(claims("caf\\u00e9", 300, 0, NULL))));
    /* a NUL inside: libjwt's encoder will not make it, so by hand */
    EXPECT_401(
        of_token(id, hand_hs256("{\"alg\":\"HS256\"}", claims("a\\u0000b", 300, 0, NULL), SECRET)));
    identity_free(id);
}

static void test_hs256_not_a_token(void **state)
{
    (void)state;
    struct identity *id = hs_identity(NULL, NULL);
    EXPECT_401(of_auth(id, NULL));
    assert_non_null(strstr(why, "required"));
    EXPECT_401(of_auth(id, ""));
    EXPECT_401(of_auth(id, "Bearer "));
    EXPECT_401(of_auth(id, "Basic YWxpY2U6cHc="));
    EXPECT_401(of_auth(id, "Bearer a.b"));
    EXPECT_401(of_auth(id, "Bearer a.b.c.d.e"));
    EXPECT_401(of_auth(id, "Bearer ..."));
    EXPECT_401(of_auth(id, "Bearer !!!.@@@.###"));
    char *t = hs(claims("alice", 300, 0, NULL));
    char *four = malloc(strlen(t) + 16);
    sprintf(four, "%s.extra", t);
    EXPECT_401(of_token(id, four));
    /* the scheme case-insensitive, blanks around the token */
    char *auth = malloc(strlen(t) + 16);
    sprintf(auth, "bearer   %s  ", t);
    EXPECT_USER(of_auth(id, auth), "alice");
    free(auth);
    free(t);
    /* longer than IDENTITY_TOKEN_MAX: refused without decoding */
    char *huge = malloc(IDENTITY_TOKEN_MAX + 64);
    char *pad = malloc(IDENTITY_TOKEN_MAX + 1);
    memset(pad, 'a', IDENTITY_TOKEN_MAX);
    pad[IDENTITY_TOKEN_MAX] = '\0';
    snprintf(huge, IDENTITY_TOKEN_MAX + 64, "%s", claims("alice", 300, 0, NULL));
    huge[strlen(huge) - 1] = '\0';
    char *big_claims = malloc(2 * IDENTITY_TOKEN_MAX);
    snprintf(big_claims, 2 * IDENTITY_TOKEN_MAX, "%s,\"pad\":\"%s\"}", huge, pad);
    EXPECT_401(of_token(id, hs(big_claims)));
    assert_non_null(strstr(why, "longer"));
    free(huge);
    free(pad);
    free(big_claims);
    identity_free(id);
}

/* With a key the token alone decides: a trusted proxy's user header and the body's user_id
 * (even with --trust-body-user-id) count for nothing. */
static void test_jwt_decides(void **state)
{
    (void)state;
    snprintf(hs_file, sizeof(hs_file), "%s/hs2.key", dir);
    write_file(hs_file, SECRET);
    struct config c = cfg_key(hs_file);
    snprintf(c.user_header, sizeof(c.user_header), "X-User");
    char why2[128];
    assert_int_equal(proxy_parse_list("127.0.0.1", &c.trusted_proxies, why2, sizeof(why2)), 0);
    c.trust_body_user_id = 1;
    char err[256];
    struct identity *id = make(&c, err, sizeof(err));
    assert_non_null(id);
    struct request req = {.method = HTTP_POST,
                          .path = "/api/v1/orders",
                          .peer_trusted = 1,
                          .user_header = "proxy-user",
                          .user_header_n = 1};
    struct validate_order in = {.quantity = 1, .has_user_id = true};
    snprintf(in.user_id, sizeof(in.user_id), "body-user");
    assert_int_equal(identity_of(id, &req, &in, user, sizeof(user), why, sizeof(why)),
                     IDENTITY_UNAUTHORIZED);
    char *t = hs(claims("token-user", 300, 0, NULL));
    char auth[1024];
    snprintf(auth, sizeof(auth), "Bearer %s", t);
    free(t);
    req.authorization = auth;
    assert_int_equal(identity_of(id, &req, &in, user, sizeof(user), why, sizeof(why)),
                     IDENTITY_USER);
    assert_string_equal(user, "token-user");
    identity_free(id);
}

/* ---- RS256 and ES256 ------------------------------------------------------------------- */

static void test_rs256(void **state)
{
    (void)state;
    struct config c = cfg_key(rsa_pub);
    char err[256];
    struct identity *id = make(&c, err, sizeof(err));
    if (!id)
        fail_msg("identity_new: %s", err);
    const char *cl = claims("rsa-user", 300, 0, NULL);
    EXPECT_USER(of_token(id, sign(JWT_ALG_RS256, rsa_priv, strlen(rsa_priv), cl)), "rsa-user");
    /* another RSA key; RS512 with the right key; an ES256 token */
    EXPECT_401(of_token(id, sign(JWT_ALG_RS256, rsa_other_priv, strlen(rsa_other_priv), cl)));
    EXPECT_401(of_token(id, sign(JWT_ALG_RS512, rsa_priv, strlen(rsa_priv), cl)));
    EXPECT_401(of_token(id, sign(JWT_ALG_ES256, ec_priv, strlen(ec_priv), cl)));
    /* the alg-confusion forgery: HS256 keyed with the public key's PEM text, as the file holds
     * it (with and without the final newline) */
    EXPECT_401(of_token(id, sign(JWT_ALG_HS256, rsa_pub_pem, strlen(rsa_pub_pem), cl)));
    EXPECT_401(of_token(id, sign(JWT_ALG_HS256, rsa_pub_pem, strlen(rsa_pub_pem) - 1, cl)));
    EXPECT_401(of_token(id, sign(JWT_ALG_NONE, NULL, 0, cl)));
    EXPECT_401(of_token(
        id, sign(JWT_ALG_RS256, rsa_priv, strlen(rsa_priv), claims("rsa-user", -60, 0, NULL))));
    identity_free(id);
}

static void test_es256(void **state)
{
    (void)state;
    struct config c = cfg_key(ec_pub);
    char err[256];
    struct identity *id = make(&c, err, sizeof(err));
    if (!id)
        fail_msg("identity_new: %s", err);
    const char *cl = claims("ec-user", 300, 0, NULL);
    EXPECT_USER(of_token(id, sign(JWT_ALG_ES256, ec_priv, strlen(ec_priv), cl)), "ec-user");
    EXPECT_401(of_token(id, sign(JWT_ALG_ES256, ec_other_priv, strlen(ec_other_priv), cl)));
    EXPECT_401(of_token(id, sign(JWT_ALG_RS256, rsa_priv, strlen(rsa_priv), cl)));
    char *ec_pem = read_all(ec_pub);
    EXPECT_401(of_token(id, sign(JWT_ALG_HS256, ec_pem, strlen(ec_pem), cl)));
    free(ec_pem);
    /* a signature of the wrong length for P-256 */
    char *t = sign(JWT_ALG_ES256, ec_priv, strlen(ec_priv), cl);
    strcpy(strrchr(t, '.') + 1, "AAAA");
    EXPECT_401(of_token(id, t));
    identity_free(id);
}

/* ---- identity_new's checks ------------------------------------------------------------- */

static void expect_refused(const struct config *c, const char *needle)
{
    char err[512] = "";
    struct identity *id = make(c, err, sizeof(err));
    if (id) {
        identity_free(id);
        fail_msg("accepted; expected an error with \"%s\"", needle);
    }
    if (!strstr(err, needle))
        fail_msg("error \"%s\" lacks \"%s\"", err, needle);
}

static void test_new_refuses(void **state)
{
    (void)state;
    char path[256];
    struct config c;

    snprintf(path, sizeof(path), "%s/missing.key", dir);
    c = cfg_key(path);
    expect_refused(&c, "jwt_key_file: cannot read");

    c = cfg_key(dir); /* a directory */
    expect_refused(&c, "not a regular file");

    snprintf(path, sizeof(path), "%s/empty.key", dir);
    write_file(path, "\n");
    c = cfg_key(path);
    expect_refused(&c, "empty");

    snprintf(path, sizeof(path), "%s/short.key", dir);
    write_file(path, "too-short-secret\n");
    c = cfg_key(path);
    expect_refused(&c, "32 or more");

    snprintf(path, sizeof(path), "%s/private.pem", dir);
    write_file(path, rsa_priv);
    c = cfg_key(path);
    expect_refused(&c, "private key");

    snprintf(path, sizeof(path), "%s/rsa1024.pub", dir);
    free(make_key(EVP_RSA_gen(1024), path));
    c = cfg_key(path);
    expect_refused(&c, "1024 bits");

    snprintf(path, sizeof(path), "%s/p384.pub", dir);
    free(make_key(EVP_EC_gen("P-384"), path));
    c = cfg_key(path);
    expect_refused(&c, "P-256");

    snprintf(path, sizeof(path), "%s/garbage.pem", dir);
    write_file(path, "-----BEGIN PUBLIC KEY-----\nnot base64 at all\n-----END PUBLIC KEY-----\n");
    c = cfg_key(path);
    expect_refused(&c, "no readable PEM public key");

    snprintf(path, sizeof(path), "%s/cert.pem", dir);
    write_file(path, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
    c = cfg_key(path);
    expect_refused(&c, "other than");

    config_defaults(&c);
    snprintf(c.jwt_issuer, sizeof(c.jwt_issuer), "iss");
    expect_refused(&c, "jwt_issuer: needs jwt_key_file");
    config_defaults(&c);
    snprintf(c.jwt_audience, sizeof(c.jwt_audience), "aud");
    expect_refused(&c, "jwt_audience: needs jwt_key_file");

    config_defaults(&c);
    snprintf(c.user_header, sizeof(c.user_header), "X-User");
    expect_refused(&c, "user_header: needs trusted_proxies");

    config_defaults(&c);
    snprintf(c.confirm_token_file, sizeof(c.confirm_token_file), "%s/nope", dir);
    expect_refused(&c, "confirm_token_file: cannot read");
    snprintf(path, sizeof(path), "%s/spaced.tok", dir);
    write_file(path, "two words\n");
    snprintf(c.confirm_token_file, sizeof(c.confirm_token_file), "%s", path);
    expect_refused(&c, "confirm_token_file");

    /* and the messages never hold the secret */
    snprintf(path, sizeof(path), "%s/short2.key", dir);
    write_file(path, "SECRETSECRET\n");
    c = cfg_key(path);
    char err[512];
    assert_null(make(&c, err, sizeof(err)));
    assert_null(strstr(err, "SECRETSECRET"));
}

/* ---- the user header, the body, the default -------------------------------------------- */

static struct identity *header_identity(int trust_body)
{
    struct config c;
    config_defaults(&c);
    snprintf(c.user_header, sizeof(c.user_header), "X-User");
    char w[128];
    assert_int_equal(proxy_parse_list("10.0.0.0/8", &c.trusted_proxies, w, sizeof(w)), 0);
    c.trust_body_user_id = trust_body;
    char err[256];
    struct identity *id = make(&c, err, sizeof(err));
    if (!id)
        fail_msg("identity_new: %s", err);
    return id;
}

static enum identity_verdict of_header(const struct identity *id, int trusted, const char *value,
                                       int n, const char *body_user)
{
    struct request req = {.method = HTTP_POST, .path = "/api/v1/orders"};
    req.peer_trusted = trusted;
    req.user_header = value;
    req.user_header_n = n;
    req.authorization = "Bearer not-looked-at";
    struct validate_order in = {.quantity = 1};
    if (body_user) {
        in.has_user_id = true;
        snprintf(in.user_id, sizeof(in.user_id), "%s", body_user);
    }
    user[0] = '\0';
    why[0] = '\0';
    return identity_of(id, &req, &in, user, sizeof(user), why, sizeof(why));
}

static void test_user_header(void **state)
{
    (void)state;
    struct identity *id = header_identity(0);
    EXPECT_USER(of_header(id, 1, "bob", 1, "body-user"), "bob");
    /* from a peer that is no trusted proxy: ignored, as if absent (the body is a label) */
    assert_int_equal(of_header(id, 0, "bob", 1, "body-user"), IDENTITY_NONE);
    assert_string_equal(user, "");
    assert_int_equal(of_header(id, 0, "bad\tvalue", 2, NULL), IDENTITY_NONE);
    /* a trusted proxy that sent no header: no user */
    assert_int_equal(of_header(id, 1, NULL, 0, "body-user"), IDENTITY_NONE);
    /* sent twice, empty, too long, not printable */
    EXPECT_401(of_header(id, 1, "bob", 2, NULL));
    assert_non_null(strstr(why, "more than once"));
    EXPECT_401(of_header(id, 1, "", 1, NULL));
    char longest[VALIDATE_PRINTABLE_MAX + 2];
    memset(longest, 'h', VALIDATE_PRINTABLE_MAX);
    longest[VALIDATE_PRINTABLE_MAX] = '\0';
    EXPECT_USER(of_header(id, 1, longest, 1, NULL), longest);
    longest[VALIDATE_PRINTABLE_MAX] = 'h';
    longest[VALIDATE_PRINTABLE_MAX + 1] = '\0';
    EXPECT_401(of_header(id, 1, longest, 1, NULL));
    EXPECT_401(of_header(id, 1, "b\x01ob", 1, NULL));
    assert_null(strstr(why, "b\x01ob"));
    identity_free(id);

    /* with --trust-body-user-id as well: the header first, then the body */
    id = header_identity(1);
    EXPECT_USER(of_header(id, 1, "bob", 1, "body-user"), "bob");
    EXPECT_USER(of_header(id, 0, "bob", 1, "body-user"), "body-user");
    EXPECT_USER(of_header(id, 1, NULL, 0, "body-user"), "body-user");
    assert_int_equal(of_header(id, 1, NULL, 0, NULL), IDENTITY_NONE);
    identity_free(id);
}

static void test_body_and_default(void **state)
{
    (void)state;
    struct config c;
    config_defaults(&c);
    char err[256];
    struct identity *id = make(&c, err, sizeof(err));
    assert_non_null(id);
    /* the default: the body's user_id is a label, nothing is a user; a token is not looked at */
    assert_int_equal(of_header(id, 1, "bob", 1, "body-user"), IDENTITY_NONE);
    assert_int_equal(of_auth(id, "Bearer x.y.z"), IDENTITY_NONE);
    identity_free(id);
    assert_int_equal(of_auth(NULL, NULL), IDENTITY_NONE);

    c.trust_body_user_id = 1;
    id = make(&c, err, sizeof(err));
    assert_non_null(id);
    EXPECT_USER(of_header(id, 1, "bob", 1, "body-user"), "body-user"); /* no header option */
    assert_int_equal(of_header(id, 0, NULL, 0, NULL), IDENTITY_NONE);
    identity_free(id);
    identity_free(NULL);
}

/* ---- the confirm token ------------------------------------------------------------------ */

static void test_confirm_token(void **state)
{
    (void)state;
    struct config c;
    config_defaults(&c);
    char err[256], path[256];
    snprintf(path, sizeof(path), "%s/confirm.tok", dir);
    write_file(path, "pay-S3cret\n");
    snprintf(c.confirm_token_file, sizeof(c.confirm_token_file), "%s", path);
    struct identity *id = make(&c, err, sizeof(err));
    if (!id)
        fail_msg("identity_new: %s", err);
    assert_int_equal(identity_is_confirm_token(id, "Bearer pay-S3cret"), 1);
    assert_int_equal(identity_is_confirm_token(id, "bearer  pay-S3cret "), 1);
    assert_int_equal(identity_is_confirm_token(id, "Bearer pay-S3cre"), 0);
    assert_int_equal(identity_is_confirm_token(id, "Bearer pay-S3crett"), 0);
    assert_int_equal(identity_is_confirm_token(id, "Bearer PAY-S3CRET"), 0);
    assert_int_equal(identity_is_confirm_token(id, "pay-S3cret"), 0);
    assert_int_equal(identity_is_confirm_token(id, "Basic pay-S3cret"), 0);
    assert_int_equal(identity_is_confirm_token(id, "Bearer "), 0);
    assert_int_equal(identity_is_confirm_token(id, NULL), 0);
    identity_free(id);

    config_defaults(&c); /* none configured */
    id = make(&c, err, sizeof(err));
    assert_int_equal(identity_is_confirm_token(id, "Bearer pay-S3cret"), 0);
    assert_int_equal(identity_is_confirm_token(id, "Bearer "), 0);
    identity_free(id);
    assert_int_equal(identity_is_confirm_token(NULL, "Bearer pay-S3cret"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hs256_good_and_bad),
        cmocka_unit_test(test_hs256_times),
        cmocka_unit_test(test_hs256_alg),
        cmocka_unit_test(test_hs256_iss_aud),
        cmocka_unit_test(test_hs256_sub),
        cmocka_unit_test(test_hs256_not_a_token),
        cmocka_unit_test(test_jwt_decides),
        cmocka_unit_test(test_rs256),
        cmocka_unit_test(test_es256),
        cmocka_unit_test(test_new_refuses),
        cmocka_unit_test(test_user_header),
        cmocka_unit_test(test_body_and_default),
        cmocka_unit_test(test_confirm_token),
    };
    return cmocka_run_group_tests_name("identity", tests, group_setup, group_teardown);
}
