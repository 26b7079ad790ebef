/*
 * Unit tests of service/src/base/pow.c, the waiting room's proof of work: a challenge minted,
 * solved at low difficulty and verified (the round trip); every refusal (malformed challenges
 * and nonces, a forged or altered MAC, another user, another SKU, expired either way, too few
 * bits in the hash or in the challenge); the leading-zero-bit count on a table of digests and
 * against sha256.c's digest; the per-thread key cache under changing keys. Runs in well under a
 * second (the solves are at 1..10 bits).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pow.h"
#include "sha256.h"

static const unsigned char key[] = "0123456789abcdef0123456789abcdef";
#define KEYLEN (sizeof(key) - 1)
static const unsigned char other_key[] = "fedcba9876543210fedcba9876543210";

#define T0 1700000000000LL

static void mint(const char *sku, const char *user, int64_t at, int bits, char *out)
{
    int n = pow_mint(key, KEYLEN, sku, user, at, bits, out, POW_CHALLENGE_MAX);
    assert_true(n > 0);
    assert_int_equal((size_t)n, strlen(out));
}

static void solve(const char *c, int bits, char *nonce)
{
    assert_true(pow_solve(c, bits, 0, 1u << 24, nonce) >= 1);
    assert_true(pow_work_bits(c, nonce) >= bits);
}

/* A nonce whose hash has fewer than bits leading zero bits. */
static void unsolve(const char *c, int bits, char *nonce)
{
    for (int i = 0; i < 1000; i++) {
        snprintf(nonce, POW_NONCE_MAX + 1, "miss%d", i);
        if (pow_work_bits(c, nonce) < bits)
            return;
    }
    fail_msg("no nonce below %d bits in 1000 tries", bits);
}

static void test_pow_round_trip(void **state)
{
    (void)state;
    char c[POW_CHALLENGE_MAX], nonce[POW_NONCE_MAX + 1];
    for (int bits = 1; bits <= 10; bits++) {
        mint("SKU-1", "alice", T0, bits, c);
        solve(c, bits, nonce);
        assert_int_equal(pow_verify(key, KEYLEN, c, nonce, "SKU-1", "alice", T0 + 1, bits), POW_OK);
        /* the last millisecond of its life; a lower current difficulty also passes */
        assert_int_equal(
            pow_verify(key, KEYLEN, c, nonce, "SKU-1", "alice", T0 + POW_TTL_MS - 1, 0), POW_OK);
        int64_t issued = 0;
        int b = 0;
        assert_int_equal(pow_parse(c, &issued, &b), 0);
        assert_int_equal(issued, T0);
        assert_int_equal(b, bits);
    }
    /* users and SKUs of every byte the API lets in (printable, '|' in a user, 128 long) */
    char user[129];
    memset(user, '|', 128);
    user[128] = '\0';
    user[5] = '.';
    mint("abc_DEF-9", user, 0, 4, c);
    solve(c, 4, nonce);
    assert_int_equal(pow_verify(key, KEYLEN, c, nonce, "abc_DEF-9", user, 5, 4), POW_OK);
    /* different starts give different solvers' nonces, each good */
    char n2[POW_NONCE_MAX + 1];
    assert_true(pow_solve(c, 4, 1000000, 1u << 20, n2) >= 1);
    assert_string_not_equal(nonce, n2);
    assert_int_equal(pow_verify(key, KEYLEN, c, n2, "abc_DEF-9", user, 5, 4), POW_OK);
}

static void test_pow_mint_refusals(void **state)
{
    (void)state;
    char c[POW_CHALLENGE_MAX];
    assert_int_equal(pow_mint(key, KEYLEN, "S", "u", T0, 0, c, sizeof(c)), -1);
    assert_int_equal(pow_mint(key, KEYLEN, "S", "u", T0, POW_BITS_MAX + 1, c, sizeof(c)), -1);
    assert_int_equal(pow_mint(key, KEYLEN, "S", "", T0, 8, c, sizeof(c)), -1);
    assert_int_equal(pow_mint(key, KEYLEN, "", "u", T0, 8, c, sizeof(c)), -1);
    assert_int_equal(pow_mint(key, KEYLEN, "S|x", "u", T0, 8, c, sizeof(c)), -1);
    assert_int_equal(pow_mint(key, KEYLEN, "S", "u", -1, 8, c, sizeof(c)), -1);
    assert_int_equal(pow_mint(key, 0, "S", "u", T0, 8, c, sizeof(c)), -1);
    assert_int_equal(pow_mint(key, KEYLEN, "S", "u", T0, 8, c, 20), -1);
    assert_string_equal(c, "");
    char long_user[130];
    memset(long_user, 'u', 129);
    long_user[129] = '\0';
    assert_int_equal(pow_mint(key, KEYLEN, "S", long_user, T0, 8, c, sizeof(c)), -1);
    /* the longest fits POW_CHALLENGE_MAX */
    char sku[129], user[129];
    memset(sku, 'S', 128);
    memset(user, 'u', 128);
    sku[128] = user[128] = '\0';
    assert_true(pow_mint(key, KEYLEN, sku, user, 999999999999999999LL, 32, c, sizeof(c)) > 0);
}

/* Replaces field i (0 = "p1") of challenge c with text into out. */
static void swap_field(const char *c, int i, const char *text, char *out)
{
    char buf[POW_CHALLENGE_MAX];
    snprintf(buf, sizeof(buf), "%s", c);
    char *f[6];
    char *s = buf;
    for (int k = 0; k < 6; k++) {
        f[k] = s;
        char *dot = strchr(s, '.');
        if (dot) {
            *dot = '\0';
            s = dot + 1;
        }
    }
    f[i] = (char *)text;
    snprintf(out, POW_CHALLENGE_MAX, "%s.%s.%s.%s.%s.%s", f[0], f[1], f[2], f[3], f[4], f[5]);
}

static void test_pow_refusals(void **state)
{
    (void)state;
    char c[POW_CHALLENGE_MAX], nonce[POW_NONCE_MAX + 1], x[POW_CHALLENGE_MAX + 16];
    mint("SKU-1", "alice", T0, 6, c);
    solve(c, 6, nonce);
#define V(ch, no, sku, user, now, min) pow_verify(key, KEYLEN, ch, no, sku, user, now, min)
    /* malformed challenges */
    assert_int_equal(V(NULL, nonce, "SKU-1", "alice", T0, 6), POW_MALFORMED);
    assert_int_equal(V("", nonce, "SKU-1", "alice", T0, 6), POW_MALFORMED);
    assert_int_equal(V("t1.a.b.1.2.c", nonce, "SKU-1", "alice", T0, 6), POW_MALFORMED);
    snprintf(x, sizeof(x), "%s.extra", c);
    assert_int_equal(V(x, nonce, "SKU-1", "alice", T0, 6), POW_MALFORMED);
    const char *bad[][2] = {
        {"1", ""},
        {"1", "U0tVLTE="},
        {"1", "U0tVLT"},
        {"1", "U0tVLTF"}, /* unused bits */
        {"1", "U0t*LTE"},
        {"2", ""},
        {"3", "01700000000000"},
        {"3", "-1"},
        {"3", "1234567890123456789"},
        {"4", "0"},
        {"4", "33"},
        {"4", "06"},
        {"4", "x"},
        {"5", "abc"},
        {"5", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        swap_field(c, atoi(bad[i][0]), bad[i][1], x);
        assert_int_equal(V(x, nonce, "SKU-1", "alice", T0, 6), POW_MALFORMED);
        int64_t t;
        int b;
        assert_int_equal(pow_parse(x, &t, &b), -1);
    }
    char big[POW_CHALLENGE_MAX + 10];
    memset(big, 'A', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    memcpy(big, "p1.", 3);
    assert_int_equal(V(big, nonce, "SKU-1", "alice", T0, 6), POW_MALFORMED);
    /* malformed nonces */
    assert_int_equal(V(c, NULL, "SKU-1", "alice", T0, 6), POW_MALFORMED);
    assert_int_equal(V(c, "", "SKU-1", "alice", T0, 6), POW_MALFORMED);
    assert_int_equal(V(c, "a\tb", "SKU-1", "alice", T0, 6), POW_MALFORMED);
    char longn[POW_NONCE_MAX + 2];
    memset(longn, 'n', POW_NONCE_MAX + 1);
    longn[POW_NONCE_MAX + 1] = '\0';
    assert_int_equal(V(c, longn, "SKU-1", "alice", T0, 6), POW_MALFORMED);
    /* bad MAC: another key; each signed field altered (re-encoded, still well formed) */
    assert_int_equal(pow_verify(other_key, KEYLEN, c, nonce, "SKU-1", "alice", T0, 6), POW_BAD_MAC);
    swap_field(c, 2, "Ym9i", x); /* user "bob", alice's MAC */
    assert_int_equal(V(x, nonce, "SKU-1", "bob", T0, 6), POW_BAD_MAC);
    swap_field(c, 1, "U0tVLTI", x); /* SKU-2 */
    assert_int_equal(V(x, nonce, "SKU-2", "alice", T0, 6), POW_BAD_MAC);
    swap_field(c, 3, "1800000000000", x); /* a later issue time */
    assert_int_equal(V(x, nonce, "SKU-1", "alice", T0, 6), POW_BAD_MAC);
    swap_field(c, 4, "1", x); /* an easier difficulty */
    assert_int_equal(V(x, nonce, "SKU-1", "alice", T0, 1), POW_BAD_MAC);
    swap_field(c, 5, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", x);
    assert_int_equal(V(x, nonce, "SKU-1", "alice", T0, 6), POW_BAD_MAC);
    /* another user, another SKU (including prefixes and extensions of the right ones) */
    assert_int_equal(V(c, nonce, "SKU-1", "bob", T0, 6), POW_WRONG_USER);
    assert_int_equal(V(c, nonce, "SKU-1", "alic", T0, 6), POW_WRONG_USER);
    assert_int_equal(V(c, nonce, "SKU-1", "alicea", T0, 6), POW_WRONG_USER);
    assert_int_equal(V(c, nonce, "SKU-2", "alice", T0, 6), POW_WRONG_SKU);
    assert_int_equal(V(c, nonce, "SKU-", "alice", T0, 6), POW_WRONG_SKU);
    /* expired: 120 s after the issue, or as far before it */
    assert_int_equal(V(c, nonce, "SKU-1", "alice", T0 + POW_TTL_MS, 6), POW_EXPIRED);
    assert_int_equal(V(c, nonce, "SKU-1", "alice", T0 + 10 * POW_TTL_MS, 6), POW_EXPIRED);
    assert_int_equal(V(c, nonce, "SKU-1", "alice", T0 - POW_TTL_MS - 1, 6), POW_EXPIRED);
    assert_int_equal(V(c, nonce, "SKU-1", "alice", T0 - POW_TTL_MS, 6), POW_OK);
    /* too few bits: the hash, or the challenge below the SKU's difficulty now */
    char weak[POW_NONCE_MAX + 1];
    unsolve(c, 6, weak);
    assert_int_equal(V(c, weak, "SKU-1", "alice", T0, 6), POW_TOO_FEW_BITS);
    assert_int_equal(V(c, nonce, "SKU-1", "alice", T0, 7), POW_TOO_FEW_BITS);
    /* the order of the checks: a forged challenge for another user is a bad MAC first */
    assert_int_equal(
        pow_verify(other_key, KEYLEN, c, weak, "SKU-2", "bob", T0 + 10 * POW_TTL_MS, 30),
        POW_BAD_MAC);
    assert_int_equal(V(c, weak, "SKU-2", "bob", T0 + 10 * POW_TTL_MS, 30), POW_WRONG_USER);
    assert_int_equal(V(c, weak, "SKU-2", "alice", T0 + 10 * POW_TTL_MS, 30), POW_WRONG_SKU);
    assert_int_equal(V(c, weak, "SKU-1", "alice", T0 + 10 * POW_TTL_MS, 30), POW_EXPIRED);
#undef V
    assert_string_equal(pow_result_string(POW_OK), "ok");
    assert_string_equal(pow_result_string(POW_MALFORMED), "malformed");
    assert_string_equal(pow_result_string(POW_BAD_MAC), "bad_mac");
    assert_string_equal(pow_result_string(POW_WRONG_USER), "wrong_user");
    assert_string_equal(pow_result_string(POW_WRONG_SKU), "wrong_sku");
    assert_string_equal(pow_result_string(POW_EXPIRED), "expired");
    assert_string_equal(pow_result_string(POW_TOO_FEW_BITS), "too_few_bits");
}

static void test_pow_bit_table(void **state)
{
    (void)state;
    static const struct {
        uint8_t head[4]; /* the digest's first bytes; the rest 0xff */
        int bits;
    } rows[] = {
        {{0x80, 0, 0, 0}, 0},        {{0xff, 0, 0, 0}, 0},           {{0x40, 0, 0, 0}, 1},
        {{0x20, 0, 0, 0}, 2},        {{0x10, 0xff, 0, 0}, 3},        {{0x08, 0, 0, 0}, 4},
        {{0x04, 0, 0, 0}, 5},        {{0x02, 0, 0, 0}, 6},           {{0x01, 0, 0, 0}, 7},
        {{0x00, 0x80, 0, 0}, 8},     {{0x00, 0x01, 0, 0}, 15},       {{0x00, 0x00, 0x80, 0}, 16},
        {{0x00, 0x00, 0x0f, 0}, 20}, {{0x00, 0x00, 0x00, 0x01}, 31}, {{0x00, 0x00, 0x00, 0x00}, 32},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t d[32];
        memset(d, 0xff, sizeof(d));
        memcpy(d, rows[i].head, 4);
        assert_int_equal(pow_leading_zero_bits(d), rows[i].bits);
    }
    uint8_t z[32] = {0};
    assert_int_equal(pow_leading_zero_bits(z), 256);
    z[31] = 1;
    assert_int_equal(pow_leading_zero_bits(z), 255);
    z[4] = 0x7f; /* 0111 1111 after four zero bytes */
    assert_int_equal(pow_leading_zero_bits(z), 33);
    /* the work's hash is SHA-256(challenge "." nonce), as sha256.c computes it */
    char c[POW_CHALLENGE_MAX];
    mint("S", "u", T0, 3, c);
    for (int i = 0; i < 200; i++) {
        char nonce[16], text[POW_CHALLENGE_MAX + 20];
        snprintf(nonce, sizeof(nonce), "n%d", i);
        int len = snprintf(text, sizeof(text), "%s.%s", c, nonce);
        uint8_t d[SHA256_DIGEST_LEN];
        sha256_digest(text, (size_t)len, d);
        assert_int_equal(pow_work_bits(c, nonce), pow_leading_zero_bits(d));
    }
}

static void test_pow_key_cache(void **state)
{
    (void)state;
    char c[POW_CHALLENGE_MAX], nonce[POW_NONCE_MAX + 1];
    mint("S", "u", T0, 2, c);
    solve(c, 2, nonce);
    unsigned char longkey[400];
    memset(longkey, 'k', sizeof(longkey));
    for (int round = 0; round < 3; round++) {
        assert_int_equal(pow_verify(key, KEYLEN, c, nonce, "S", "u", T0, 2), POW_OK);
        assert_int_equal(pow_verify(other_key, KEYLEN, c, nonce, "S", "u", T0, 2), POW_BAD_MAC);
        assert_int_equal(pow_verify(key, KEYLEN - 1, c, nonce, "S", "u", T0, 2), POW_BAD_MAC);
        assert_int_equal(pow_verify(longkey, sizeof(longkey), c, nonce, "S", "u", T0, 2),
                         POW_BAD_MAC);
    }
    char lc[POW_CHALLENGE_MAX];
    assert_true(pow_mint(longkey, sizeof(longkey), "S", "u", T0, 2, lc, sizeof(lc)) > 0);
    solve(lc, 2, nonce);
    assert_int_equal(pow_verify(longkey, sizeof(longkey), lc, nonce, "S", "u", T0, 2), POW_OK);
    assert_int_equal(pow_verify(key, KEYLEN, lc, nonce, "S", "u", T0, 2), POW_BAD_MAC);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pow_round_trip), cmocka_unit_test(test_pow_mint_refusals),
        cmocka_unit_test(test_pow_refusals),   cmocka_unit_test(test_pow_bit_table),
        cmocka_unit_test(test_pow_key_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
