/*
 * Unit tests of service/src/base/ticket.c, the waiting room's tickets (SPEC §16): a minted
 * ticket checks for its SKU and user and only for them; any change to any byte, a ticket of
 * another key, a truncated or padded one, non-canonical numbers and a second spelling of the
 * same bytes are refused; the key file's rules; and an HMAC computed here independently (with
 * OpenSSL's one-shot HMAC over the documented message) equals the ticket's MAC. < 1 s.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ticket.h"

static struct ticket_key ticket_key_of(const char *secret)
{
    struct ticket_key k;
    memset(&k, 0, sizeof(k));
    memcpy(k.bytes, secret, strlen(secret));
    k.len = strlen(secret);
    return k;
}

#define SECRET "0123456789abcdef0123456789abcdef-a-test-key"

static void test_round_trip(void **state)
{
    (void)state;
    struct ticket_key k = ticket_key_of(SECRET);
    char text[TICKET_TEXT_MAX];
    int n = ticket_mint(&k, "shoe:42", "user-7", 1234, 1795629600000LL, text, sizeof(text));
    assert_true(n > 0);
    assert_int_equal((int)strlen(text), n);
    assert_true(strncmp(text, "t1.", 3) == 0);
    struct ticket t;
    assert_int_equal(ticket_check(&k, text, "shoe:42", "user-7", &t), ERROR_NONE);
    assert_string_equal(t.sku, "shoe:42");
    assert_string_equal(t.user, "user-7");
    assert_true(t.n == 1234);
    assert_true(t.exp_ms == 1795629600000LL);
    /* Deterministic: the same fields mint the same text. */
    char again[TICKET_TEXT_MAX];
    ticket_mint(&k, "shoe:42", "user-7", 1234, 1795629600000LL, again, sizeof(again));
    assert_string_equal(text, again);
    /* Bindings: another SKU, another user. */
    assert_int_equal(ticket_check(&k, text, "shoe:43", "user-7", NULL), ERROR_TICKET_WRONG_SKU);
    assert_int_equal(ticket_check(&k, text, "shoe:42", "user-8", NULL), ERROR_TICKET_WRONG_USER);
    assert_int_equal(ticket_check(&k, text, "shoe:42", NULL, NULL), ERROR_TICKET_WRONG_USER);
}

static void test_every_byte_matters(void **state)
{
    (void)state;
    struct ticket_key k = ticket_key_of(SECRET);
    char text[TICKET_TEXT_MAX];
    ticket_mint(&k, "sku-a", "u1", 7, 1000, text, sizeof(text));
    size_t len = strlen(text);
    const char swaps[] = "Aa0-_.x";
    for (size_t i = 0; i < len; i++) {
        for (const char *c = swaps; *c; c++) {
            if (text[i] == *c)
                continue;
            char bad[TICKET_TEXT_MAX];
            memcpy(bad, text, len + 1);
            bad[i] = *c;
            enum error_code e = ticket_check(&k, bad, "sku-a", "u1", NULL);
            if (e == ERROR_NONE)
                fail_msg("byte %zu changed to '%c' still checks: %s", i, *c, bad);
        }
    }
    /* Truncated, extended, empty. */
    for (size_t cut = 0; cut < len; cut++) {
        char bad[TICKET_TEXT_MAX];
        memcpy(bad, text, cut);
        bad[cut] = '\0';
        assert_int_not_equal(ticket_check(&k, bad, "sku-a", "u1", NULL), ERROR_NONE);
    }
    char longer[TICKET_TEXT_MAX + 8];
    snprintf(longer, sizeof(longer), "%sA", text);
    assert_int_equal(ticket_check(&k, longer, "sku-a", "u1", NULL), ERROR_TICKET_INVALID);
    snprintf(longer, sizeof(longer), "%s.", text);
    assert_int_equal(ticket_check(&k, longer, "sku-a", "u1", NULL), ERROR_TICKET_INVALID);
}

static void test_forgeries(void **state)
{
    (void)state;
    struct ticket_key k = ticket_key_of(SECRET);
    struct ticket_key other = ticket_key_of("another-key-of-32-bytes-or-more-xxxxxxxx");
    char text[TICKET_TEXT_MAX];
    ticket_mint(&other, "sku-a", "u1", 7, 1000, text, sizeof(text));
    assert_int_equal(ticket_check(&k, text, "sku-a", "u1", NULL), ERROR_TICKET_INVALID);
    /* A forged ticket for another SKU is invalid, not "wrong SKU": the MAC comes first. */
    assert_int_equal(ticket_check(&k, text, "sku-b", "u1", NULL), ERROR_TICKET_INVALID);
    /* No key loaded: nothing checks, nothing mints. */
    struct ticket_key none;
    memset(&none, 0, sizeof(none));
    assert_int_equal(ticket_check(&none, text, "sku-a", "u1", NULL), ERROR_TICKET_INVALID);
    assert_int_equal(ticket_mint(&none, "sku-a", "u1", 7, 1000, text, sizeof(text)), -1);
    assert_string_equal(text, "");
    /* Garbage. */
    const char *junk[] = {"", "t1", "t1.....", "t2.c2t1LWE.dTE.7.1000.AAAA", "x", NULL};
    for (int i = 0; junk[i]; i++)
        assert_int_equal(ticket_check(&k, junk[i], "sku-a", "u1", NULL), ERROR_TICKET_INVALID);
    assert_int_equal(ticket_check(&k, NULL, "sku-a", "u1", NULL), ERROR_TICKET_INVALID);
}

/* The MAC is HMAC-SHA256(key, "t1|<len>:<sku>|<len>:<user>|<n>|<exp>"), recomputed here with
 * OpenSSL, and numbers are canonical: "07" for 7 is not the same ticket. */
static void test_mac_is_documented_hmac(void **state)
{
    (void)state;
    struct ticket_key k = ticket_key_of(SECRET);
    char text[TICKET_TEXT_MAX];
    ticket_mint(&k, "sku-a", "u1", 7, 1000, text, sizeof(text));
    const char *msg = "t1|5:sku-a|2:u1|7|1000";
    unsigned char mac[32];
    unsigned int maclen = 0;
    HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET), (const unsigned char *)msg, strlen(msg), mac,
         &maclen);
    assert_int_equal(maclen, 32);
    unsigned char b64[64];
    int n = EVP_EncodeBlock(b64, mac, 32); /* standard base64, padded */
    while (n > 0 && b64[n - 1] == '=')
        n--;
    for (int i = 0; i < n; i++)
        b64[i] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : b64[i];
    b64[n] = '\0';
    const char *last = strrchr(text, '.');
    assert_non_null(last);
    assert_string_equal(last + 1, (const char *)b64);
    /* "c2t1LWE" is base64url("sku-a"), "dTE" is "u1": the same ticket with n spelled "07". */
    char padded[TICKET_TEXT_MAX];
    snprintf(padded, sizeof(padded), "t1.c2t1LWE.dTE.07.1000.%s", b64);
    assert_int_equal(ticket_check(&k, padded, "sku-a", "u1", NULL), ERROR_TICKET_INVALID);
    snprintf(padded, sizeof(padded), "t1.c2t1LWE.dTE.7.1000.%s", b64);
    assert_int_equal(ticket_check(&k, padded, "sku-a", "u1", NULL), ERROR_NONE);
    /* A second spelling of the SKU's bytes ("c2t1LWF": other left-over bits) is refused. */
    snprintf(padded, sizeof(padded), "t1.c2t1LWF.dTE.7.1000.%s", b64);
    assert_int_equal(ticket_check(&k, padded, "sku-a", "u1", NULL), ERROR_TICKET_INVALID);
}

static void test_fields_bounds(void **state)
{
    (void)state;
    struct ticket_key k = ticket_key_of(SECRET);
    char big[TICKET_FIELD_MAX + 2];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    char text[TICKET_TEXT_MAX];
    assert_int_equal(ticket_mint(&k, big, "u", 1, 1, text, sizeof(text)), -1);
    assert_int_equal(ticket_mint(&k, "", "u", 1, 1, text, sizeof(text)), -1);
    big[TICKET_FIELD_MAX] = '\0'; /* exactly the longest */
    assert_true(ticket_mint(&k, big, big, UINT64_MAX, INT64_MAX, text, sizeof(text)) > 0);
    assert_int_equal(ticket_check(&k, text, big, big, NULL), ERROR_NONE);
    char small[16];
    assert_int_equal(ticket_mint(&k, "s", "u", 1, 1, small, sizeof(small)), -1);
    assert_string_equal(small, "");
}

static void test_key_file(void **state)
{
    (void)state;
    char path[] = "/tmp/test_ticket_keyXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *shortkey = "too-short\n";
    assert_int_equal(write(fd, shortkey, strlen(shortkey)), (ssize_t)strlen(shortkey));
    close(fd);
    struct ticket_key k;
    char err[256] = "";
    assert_int_equal(ticket_key_load(&k, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "queue_key_file"));
    assert_null(strstr(err, "too-short")); /* never the contents */
    FILE *f = fopen(path, "w");
    fprintf(f, "%s\n", SECRET);
    fclose(f);
    assert_int_equal(ticket_key_load(&k, path, err, sizeof(err)), 0);
    assert_int_equal(k.len, strlen(SECRET)); /* the newline dropped */
    assert_memory_equal(k.bytes, SECRET, k.len);
    ticket_key_wipe(&k);
    assert_int_equal(k.len, 0);
    unlink(path);
    assert_int_equal(ticket_key_load(&k, path, err, sizeof(err)), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),    cmocka_unit_test(test_every_byte_matters),
        cmocka_unit_test(test_forgeries),     cmocka_unit_test(test_mac_is_documented_hmac),
        cmocka_unit_test(test_fields_bounds), cmocka_unit_test(test_key_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
