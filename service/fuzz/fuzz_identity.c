/*
 * libFuzzer target: identity.c's token path on arbitrary bytes. The input is the token of an
 * "Authorization: Bearer <input>" header of an order, judged by an identity with an HS256
 * secret (issuer and audience checked). Checks, for every input:
 *   - the verdict is USER or UNAUTHORIZED (with a key, never NONE), and no crash, leak or
 *     undefined behaviour (the sanitizers);
 *   - USER only for a token whose signature a plain re-statement verifies (OpenSSL's HMAC over
 *     the first two parts, compared with the third, base64url-decoded) and whose header's alg
 *     is HS256; then the user is 1..128 printable ASCII characters;
 *   - UNAUTHORIZED always with a reason, which never holds the input (when 8 bytes or more).
 * The seeds (corpus/fuzz_identity) include valid tokens of the secret below, expiring in 2100.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "config.h"
#include "identity.h"
#include "request.h"
#include "validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_identity: %s:%d: check failed: %s\n", __FILE__, __LINE__,        \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static const char SECRET[] = "fuzz-identity-hs256-secret-0123456789abcdef";

static struct identity *make_identity(void)
{
    char path[] = "/tmp/fuzz_identity-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, SECRET, sizeof(SECRET) - 1) == (ssize_t)(sizeof(SECRET) - 1));
    close(fd);
    struct config cfg;
    config_defaults(&cfg);
    snprintf(cfg.jwt_key_file, sizeof(cfg.jwt_key_file), "%s", path);
    snprintf(cfg.jwt_issuer, sizeof(cfg.jwt_issuer), "fuzz-issuer");
    snprintf(cfg.jwt_audience, sizeof(cfg.jwt_audience), "inventory");
    cfg.log_level = CONFIG_LOG_ERROR;
    struct identity *id = NULL;
    char err[256];
    int rc = identity_new(&cfg, &id, err, sizeof(err));
    unlink(path);
    CHECK(rc == 0 && id);
    return id;
}

/* base64url text s[0..n) decoded into out (cap bytes); its length, or -1. */
static int b64url_decode(const char *s, size_t n, unsigned char *out, size_t cap)
{
    if (n % 4 == 1 || n + 4 > 512 || (n + 3) / 4 * 3 > cap)
        return -1;
    char b64[520];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '-')
            c = '+';
        else if (c == '_')
            c = '/';
        else if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
            return -1;
        b64[m++] = c;
    }
    size_t pad = (4 - m % 4) % 4;
    for (size_t i = 0; i < pad; i++)
        b64[m++] = '=';
    int got = EVP_DecodeBlock(out, (const unsigned char *)b64, (int)m);
    return got < 0 ? -1 : got - (int)pad;
}

/* True when tok (NUL-free, blanks trimmed) is "h.p.s" with s the HMAC-SHA256 of "h.p". */
static int signature_verifies(const char *tok, size_t len)
{
    const char *last = NULL;
    for (size_t i = 0; i < len; i++)
        if (tok[i] == '.')
            last = tok + i;
    if (!last)
        return 0;
    unsigned char mac[EVP_MAX_MD_SIZE], sig[512];
    unsigned int maclen = 0;
    HMAC(EVP_sha256(), SECRET, (int)(sizeof(SECRET) - 1), (const unsigned char *)tok,
         (size_t)(last - tok), mac, &maclen);
    int n = b64url_decode(last + 1, len - (size_t)(last + 1 - tok), sig, sizeof(sig));
    return n == (int)maclen && memcmp(sig, mac, maclen) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct identity *id;
    if (!id)
        id = make_identity();
    char *auth = malloc(size + 8);
    CHECK(auth);
    memcpy(auth, "Bearer ", 7);
    memcpy(auth + 7, data, size);
    auth[size + 7] = '\0';
    struct request req = {.method = HTTP_POST, .path = "/api/v1/orders", .authorization = auth};
    struct validate_order in = {.quantity = 1};
    char user[VALIDATE_PRINTABLE_MAX + 1] = "", why[256] = "";
    enum identity_verdict v = identity_of(id, &req, &in, user, sizeof(user), why, sizeof(why));
    CHECK(v == IDENTITY_USER || v == IDENTITY_UNAUTHORIZED);
    if (v == IDENTITY_USER) {
        size_t len = 0;
        const char *tok = request_bearer_token(auth, &len);
        CHECK(tok && signature_verifies(tok, len));
        CHECK(validate_printable(user, strlen(user)));
    } else {
        CHECK(why[0] != '\0');
        size_t n = strnlen((const char *)data, size);
        if (n >= 8) {
            char *copy = strndup((const char *)data, n);
            CHECK(copy);
            CHECK(strstr(why, copy) == NULL);
            free(copy);
        }
    }
    free(auth);
    return 0;
}
