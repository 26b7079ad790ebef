/*
 * Who the user is, end to end over HTTP (SPEC §11; service/src/loop/identity.c):
 *   - with --jwt-key-file, POST /api/v1/orders without a token, with a token of another key,
 *     an expired one, alg none, or a token for another audience answers 401 {"error":
 *     "unauthorized", "message": ...} with WWW-Authenticate: Bearer, never echoing the token,
 *     and sells nothing (GET the SKU: sold 0); a good token (HS256, and RS256 with a key made
 *     here) answers 201 and sells;
 *   - --user-header: a bad header value (sent twice, too long) from a trusted proxy is a 401;
 *     from a peer that is no trusted proxy the header is ignored (201);
 *   - a key file inventoryd cannot use (missing, a private key, a short secret) refuses the
 *     start with a message naming jwt_key_file; --trust-body-user-id is warned at start.
 * Tokens are signed here with libjwt's encoder; keys are made with OpenSSL.
 */
#include "svc_test.h"

#include <time.h>
#include <unistd.h>

#include <jwt.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

static const char SECRET[] = "it-identity-hs256-secret-0123456789abcdefghij";
static char dir[64], hs_file[128], rsa_file[128], rsa_priv_file[128];
static char *rsa_priv;

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    SF_ASSERT(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static char *pem(EVP_PKEY *k, int private_key)
{
    BIO *b = BIO_new(BIO_s_mem());
    SF_ASSERT(b != NULL, "%s", "BIO_new");
    int ok = private_key ? PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL)
                         : PEM_write_bio_PUBKEY(b, k);
    SF_ASSERT(ok == 1, "%s", "PEM_write");
    char *data;
    long n = BIO_get_mem_data(b, &data);
    char *out = calloc(1, (size_t)n + 1);
    memcpy(out, data, (size_t)n);
    BIO_free(b);
    return out;
}

static int setup(void **state)
{
    if (gf_group_setup(state) != 0)
        return -1;
    snprintf(dir, sizeof dir, "/tmp/it_identity-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(hs_file, sizeof hs_file, "%s/hs.key", dir);
    snprintf(rsa_file, sizeof rsa_file, "%s/rsa.pub", dir);
    snprintf(rsa_priv_file, sizeof rsa_priv_file, "%s/rsa.pem", dir);
    char text[128];
    snprintf(text, sizeof text, "%s\n", SECRET);
    write_text(hs_file, text);
    EVP_PKEY *k = EVP_RSA_gen(2048);
    if (!k)
        return -1;
    char *pub = pem(k, 0);
    rsa_priv = pem(k, 1);
    EVP_PKEY_free(k);
    write_text(rsa_file, pub);
    write_text(rsa_priv_file, rsa_priv);
    free(pub);
    return 0;
}

static int teardown(void **state)
{
    free(rsa_priv);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    int rc = system(cmd);
    return sf_group_teardown(state) == 0 && rc == 0 ? 0 : -1;
}

/* A token for sub, expiring exp_in seconds from now, with extra claims (",..." JSON members),
 * signed by libjwt with alg and key. */
static char *token(jwt_alg_t alg, const char *key, const char *sub, long exp_in, const char *extra)
{
    char claims[512];
    snprintf(claims, sizeof claims, "{\"sub\":\"%s\",\"exp\":%ld%s}", sub,
             (long)time(NULL) + exp_in, extra ? extra : "");
    jwt_t *j = NULL;
    SF_ASSERT(jwt_new(&j) == 0, "%s", "jwt_new");
    SF_ASSERT(jwt_add_grants_json(j, claims) == 0, "grants %s", claims);
    SF_ASSERT(jwt_set_alg(j, alg, (const unsigned char *)key, key ? (int)strlen(key) : 0) == 0,
              "%s", "jwt_set_alg");
    char *t = jwt_encode_str(j);
    jwt_free(j);
    SF_ASSERT(t != NULL, "%s", "jwt_encode_str");
    return t;
}

/* POST an order of 1 of sku with token (NULL: no Authorization) and extra header lines. */
static void order(int port, const char *sku, const char *tok, const char *const *extra, sf_resp *r)
{
    char body[160], auth[4096];
    snprintf(body, sizeof body, "{\"sku\":\"%s\",\"quantity\":1,\"user_id\":\"body-user\"}", sku);
    const char *headers[8] = {"Content-Type: application/json"};
    int n = 1;
    if (tok) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", tok);
        headers[n++] = auth;
    }
    for (int i = 0; extra && extra[i] && n < 7; i++)
        headers[n++] = extra[i];
    headers[n] = NULL;
    sf_http(port, "POST", "/api/v1/orders", headers, body, strlen(body), r);
}

static long long sold(int port, const char *sku)
{
    json_t *s = sf_sku_status(port, sku);
    SF_ASSERT(s != NULL, "GET %s", sku);
    long long v = sf_json_int(s, "sold", -1);
    json_decref(s);
    return v;
}

/* A 401 unauthorized with WWW-Authenticate: Bearer that does not echo tok. */
static void assert_401(const sf_resp *r, const char *tok)
{
    SF_ASSERT_ERROR(r, 401, "unauthorized");
    const char *www = sf_header(r, "WWW-Authenticate");
    SF_ASSERT(www && strncmp(www, "Bearer", 6) == 0, "WWW-Authenticate: %s", www ? www : "-");
    if (tok)
        SF_ASSERT(strstr(r->body, tok) == NULL, "the 401 echoes the token: %s", r->body);
}

static void test_jwt_hs256(void **state)
{
    (void)state;
    const char *args[] = {"--jwt-key-file", hs_file, "--jwt-audience", "inventory", NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start with an HS256 key");
    int port = sf_port(svc);
    char sku[64];
    tu_unique_name(sku, sizeof sku, "jwt");
    sf_resp r = {0};
    SF_ASSERT(sf_put_sku(port, NULL, sku, 10, 2, &r) == 201, "PUT: %s", sf_resp_summary(&r));

    const char *aud = ",\"aud\":[\"x\",\"inventory\"]";
    char *bad[] = {
        NULL, /* no token */
        token(JWT_ALG_HS256, "another-secret-of-32-bytes-or-more-xxxx", "alice", 300, aud),
        token(JWT_ALG_HS256, SECRET, "alice", -60, aud),              /* expired */
        token(JWT_ALG_NONE, NULL, "alice", 300, aud),                 /* alg none */
        token(JWT_ALG_HS256, SECRET, "alice", 300, ",\"aud\":\"x\""), /* another audience */
        strdup("not.a.jwt"),
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        order(port, sku, bad[i], NULL, &r);
        assert_401(&r, bad[i]);
        free(bad[i]);
    }
    SF_ASSERT(sold(port, sku) == 0, "%s", "a refused order sold");

    char *good = token(JWT_ALG_HS256, SECRET, "alice", 300, aud);
    order(port, sku, good, NULL, &r);
    SF_ASSERT_STATUS(&r, 201);
    free(good);
    SF_ASSERT(sold(port, sku) == 1, "%s", "the good token's order did not sell");
    SF_ASSERT(sf_log_contains(svc, "orders need Authorization: Bearer <JWT> (HS256"), "%s",
              "no start line saying orders need a token");
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

static void test_jwt_rs256(void **state)
{
    (void)state;
    const char *args[] = {"--jwt-key-file", rsa_file, NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start with an RSA public key");
    int port = sf_port(svc);
    char sku[64];
    tu_unique_name(sku, sizeof sku, "rsa");
    sf_resp r = {0};
    SF_ASSERT(sf_put_sku(port, NULL, sku, 10, 1, &r) == 201, "PUT: %s", sf_resp_summary(&r));
    /* HS256 keyed with the public key's PEM text: the alg-confusion forgery */
    char *pub = NULL;
    FILE *f = fopen(rsa_file, "r");
    SF_ASSERT(f != NULL, "%s", "rsa.pub");
    pub = calloc(1, 4096);
    SF_ASSERT(fread(pub, 1, 4095, f) > 0, "%s", "read rsa.pub");
    fclose(f);
    char *forged = token(JWT_ALG_HS256, pub, "mallory", 300, NULL);
    free(pub);
    order(port, sku, forged, NULL, &r);
    assert_401(&r, forged);
    free(forged);
    SF_ASSERT(sold(port, sku) == 0, "%s", "the forged token's order sold");
    char *good = token(JWT_ALG_RS256, rsa_priv, "bob", 300, NULL);
    order(port, sku, good, NULL, &r);
    SF_ASSERT_STATUS(&r, 201);
    free(good);
    SF_ASSERT(sold(port, sku) == 1, "%s", "the RS256 order did not sell");
    sf_resp_free(&r);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

/* --user-header: judged from a trusted proxy (this test's 127.0.0.1 peer), ignored otherwise. */
static void test_user_header_over_http(void **state)
{
    (void)state;
    char longest[200] = "X-User: ";
    memset(longest + 8, 'u', 129);
    const char *twice[] = {"X-User: bob", "x-user: eve", NULL};
    const char *too_long[] = {longest, NULL};
    const char *one[] = {"X-User: bob", NULL};
    for (int trusted = 1; trusted >= 0; trusted--) {
        const char *args[] = {"--user-header", "X-User", "--trusted-proxies",
                              trusted ? "127.0.0.1" : "10.9.9.9", NULL};
        sf_service *svc = sf_start(rf_url(gf_redis), args);
        SF_ASSERT(svc != NULL, "%s", "inventoryd did not start with a user header");
        int port = sf_port(svc);
        char sku[64];
        tu_unique_name(sku, sizeof sku, "hdr");
        sf_resp r = {0};
        SF_ASSERT(sf_put_sku(port, NULL, sku, 10, 1, &r) == 201, "PUT: %s", sf_resp_summary(&r));
        order(port, sku, NULL, twice, &r);
        if (trusted)
            assert_401(&r, NULL);
        else
            SF_ASSERT_STATUS(&r, 201);
        order(port, sku, NULL, too_long, &r);
        if (trusted)
            assert_401(&r, NULL);
        else
            SF_ASSERT_STATUS(&r, 201);
        order(port, sku, NULL, one, &r);
        SF_ASSERT_STATUS(&r, 201);
        SF_ASSERT(sold(port, sku) == (trusted ? 1 : 3), "sold %lld", sold(port, sku));
        sf_resp_free(&r);
        SF_ASSERT_EQ(sf_stop(svc), 0);
    }
}

static void test_start_refused_and_warned(void **state)
{
    (void)state;
    char missing[160], short_key[160];
    snprintf(missing, sizeof missing, "%s/missing.key", dir);
    snprintf(short_key, sizeof short_key, "%s/short.key", dir);
    write_text(short_key, "short\n");
    const char *files[] = {missing, rsa_priv_file, short_key};
    const char *why[] = {"cannot read", "private key", "32 or more"};
    for (int i = 0; i < 3; i++) {
        const char *args[] = {"--port", "1", "--jwt-key-file", files[i], NULL};
        char out[256], err[4096];
        int rc = sf_run(args, 10000, out, sizeof out, err, sizeof err);
        SF_ASSERT(rc != 0 && rc != -1, "started with %s (exit %d)", files[i], rc);
        SF_ASSERT(strstr(err, "jwt_key_file") && strstr(err, why[i]), "%s: %s", files[i], err);
        SF_ASSERT(strstr(err, "BEGIN") == NULL && strstr(err, "short\\n") == NULL,
                  "the key file's contents in the message: %s", err);
    }
    const char *args[] = {"--trust-body-user-id", NULL};
    sf_service *svc = sf_start(rf_url(gf_redis), args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd did not start with --trust-body-user-id");
    SF_ASSERT(sf_log_contains(svc, "\"level\":\"warn\",\"event\":\"identity\"") &&
                  sf_log_contains(svc, "for development only"),
              "%s", "no warning at start for --trust-body-user-id");
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jwt_hs256),
        cmocka_unit_test(test_jwt_rs256),
        cmocka_unit_test(test_user_header_over_http),
        cmocka_unit_test(test_start_refused_and_warned),
    };
    return SF_RUN_GROUP_TESTS(tests, setup, teardown);
}
