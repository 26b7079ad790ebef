/*
 * Unit tests of service/src/base/jsontext.c and of the order record rendered with it
 * (order_record_text, service/src/order/order.c): the text must be the very bytes jansson's
 * json_dumps(JSON_COMPACT) writes for the same values — a table of hostile strings (quotes,
 * backslashes, every control character, DEL, '/', non-ASCII UTF-8 up to U+10FFFF, and invalid
 * UTF-8 that both must refuse), then 100,000 random byte strings biased towards those bytes;
 * numbers at their extremes; a buffer too small fails and stays failed.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "jsontext.h"
#include "order.h"

/* jansson's text of s as a JSON string, or NULL when jansson refuses s (malloc). */
static char *jansson_string(const char *s)
{
    json_t *j = json_string(s);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_decref(j);
    return t;
}

/* jsontext's text of s, or NULL when it refuses s (malloc). */
static char *ours_string(const char *s)
{
    size_t cap = 6 * strlen(s) + 3;
    char *buf = malloc(cap);
    assert_non_null(buf);
    struct jsontext w;
    jsontext_init(&w, buf, cap);
    jsontext_string(&w, s);
    int n = jsontext_end(&w);
    if (n < 0) {
        free(buf);
        return NULL;
    }
    assert_int_equal((size_t)n, strlen(buf));
    return buf;
}

/* Both refuse s, or both write the same text; on a difference, says which bytes. */
static void same_string(const char *s)
{
    char *want = jansson_string(s), *got = ours_string(s);
    if ((want == NULL) != (got == NULL) || (want && strcmp(want, got) != 0)) {
        char hex[3 * 64 + 1] = "";
        for (size_t i = 0; s[i] && i < 64; i++)
            snprintf(hex + 3 * i, 4, "%02x ", (unsigned char)s[i]);
        fail_msg("input [%s]: jansson %s, jsontext %s", hex, want ? want : "(refused)",
                 got ? got : "(refused)");
    }
    free(want);
    free(got);
}

static void test_hostile_strings(void **state)
{
    (void)state;
    static const char *const cases[] = {
        "",
        "plain",
        "\"",
        "\\",
        "a\"b\\c\"",
        "\\\"\\\\\"",
        "/slash/",
        "</script>",
        "\b\f\n\r\t",
        "\x01\x02\x1f\x7f",
        "tab\there",
        "\x1b[31mred",
        "caf\xc3\xa9",              /* é */
        "\xe2\x82\xac 10",          /* € */
        "\xf0\x9f\x98\x80",         /* U+1F600 */
        "\xf4\x8f\xbf\xbf",         /* U+10FFFF, the last code point */
        "\xef\xbb\xbf bom",         /* U+FEFF */
        "\xed\x9f\xbf",             /* U+D7FF, just below the surrogates */
        "\xee\x80\x80",             /* U+E000, just above */
        "\xc2\x80\xdf\xbf",         /* U+0080, U+07FF */
        "\xe0\xa0\x80\xef\xbf\xbf", /* U+0800, U+FFFF */
        "\xf0\x90\x80\x80",         /* U+10000 */
        "\xe2\x80\xa8\xe2\x80\xa9", /* U+2028, U+2029: jansson leaves them as they are */
        "\x80",                     /* a continuation byte alone */
        "a\xbf",                    /* and after ASCII */
        "\xc0\xaf",                 /* overlong '/' */
        "\xc1\xbf",                 /* overlong */
        "\xe0\x80\xaf",             /* overlong, 3 bytes */
        "\xf0\x80\x80\xaf",         /* overlong, 4 bytes */
        "\xed\xa0\x80",             /* U+D800, a surrogate */
        "\xed\xbf\xbf",             /* U+DFFF */
        "\xf4\x90\x80\x80",         /* U+110000 */
        "\xf5\x80\x80\x80",         /* 0xF5 lead */
        "\xff",                     /* never in UTF-8 */
        "\xfe\xff",
        "\xc3", /* cut short at the end */
        "\xe2\x82",
        "\xf0\x9f\x98",
        "\xc3(", /* a lead followed by ASCII */
        "\xe2\x28\xa1",
        "ok\xc3\xa9\x22\\\x01\xe2\x82\xac\x7f", /* a mix that is valid */
        "user \"O'Brien\" \\ 42",
        "sku-\xd0\x96\xd0\xb8\xd0\xb2", /* Cyrillic */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        same_string(cases[i]);
    /* Every control character alone and between letters. */
    for (int c = 1; c < 0x20; c++) {
        char s[4] = {'a', (char)c, 'b', '\0'};
        same_string(s);
        same_string(s + 1);
    }
    /* Every lone byte from 0x80 up (all refused) and every two-byte lead with one continuation. */
    for (int c = 0x80; c < 0x100; c++) {
        char one[2] = {(char)c, '\0'}, two[3] = {(char)c, (char)0x80, '\0'};
        same_string(one);
        same_string(two);
    }
}

/* xorshift64*: the same strings on every run. */
static unsigned long long rnd_state = 0x9E3779B97F4A7C15ULL;
static unsigned rnd(void)
{
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return (unsigned)((rnd_state * 0x2545F4914F6CDD1DULL) >> 32);
}

static void test_random_strings(void **state)
{
    (void)state;
    /* Bytes that matter more often than 1/255: quotes, backslash, controls, leads and
     * continuations at the edges of the valid ranges. */
    static const unsigned char hot[] = {'"',  '\\', '/',  '\n', '\t', 0x01, 0x1f, 0x7f, 0x80,
                                        0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0,
                                        0xf4, 0xf5, 0xff, 0xa0, 0x9f, 0x8f, 0x90};
    char s[40];
    for (int round = 0; round < 100000; round++) {
        size_t n = rnd() % (sizeof(s) - 1);
        for (size_t i = 0; i < n; i++) {
            unsigned r = rnd();
            unsigned char b = (r & 3) == 0   ? hot[(r >> 2) % sizeof(hot)]
                              : (r & 3) == 1 ? (unsigned char)(0x80 | ((r >> 2) & 0x3f))
                                             : (unsigned char)(r >> 8);
            s[i] = b ? (char)b : 'x';
        }
        s[n] = '\0';
        same_string(s);
    }
}

static void test_numbers_and_raw(void **state)
{
    (void)state;
    static const long long nums[] = {
        0, 1, -1, 9, 10, 99, 100, 123456789, -987654321, LLONG_MAX, LLONG_MIN, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        json_t *j = json_integer(nums[i]);
        char *want = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
        json_decref(j);
        char buf[32];
        struct jsontext w;
        jsontext_init(&w, buf, sizeof(buf));
        jsontext_int(&w, nums[i]);
        assert_int_equal(jsontext_end(&w), (int)strlen(want));
        assert_string_equal(buf, want);
        free(want);
    }
}

static void test_too_small(void **state)
{
    (void)state;
    char buf[8];
    struct jsontext w;
    jsontext_init(&w, buf, sizeof(buf)); /* 7 characters and the NUL */
    jsontext_raw(&w, "1234567");
    assert_int_equal(jsontext_end(&w), 7);
    assert_string_equal(buf, "1234567");
    jsontext_init(&w, buf, sizeof(buf));
    jsontext_raw(&w, "123");
    jsontext_string(&w, "abcd"); /* 6 more: past the end */
    jsontext_raw(&w, "x");       /* would fit, but the error stays */
    assert_int_equal(jsontext_end(&w), -1);
    jsontext_init(&w, buf, sizeof(buf));
    jsontext_string(&w, "\xff");
    jsontext_raw(&w, "x");
    assert_int_equal(jsontext_end(&w), -1);
}

/* The record as make_record built it before issue 23: json_pack + json_dumps. */
static char *jansson_record(const char *id, const char *sku, long long q, int k, const char *user,
                            const char *created, const char *status)
{
    json_t *u = user ? json_string(user) : json_null();
    json_t *j = json_pack("{s:s, s:s, s:I, s:i, s:o, s:s, s:s}", "order_id", id, "sku", sku,
                          "quantity", (json_int_t)q, "segment", k, "user_id", u, "created_at",
                          created, "status", status);
    char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return t;
}

static void same_record(const char *id, const char *sku, long long q, int k, const char *user,
                        const char *created, const char *status)
{
    char *want = jansson_record(id, sku, q, k, user, created, status);
    char *got = order_record_text(id, sku, q, k, user, created, status);
    if ((want == NULL) != (got == NULL) || (want && strcmp(want, got) != 0))
        fail_msg("record: jansson %s, ours %s", want ? want : "(refused)", got ? got : "(refused)");
    free(want);
    free(got);
}

static void test_record(void **state)
{
    (void)state;
    const char *id = "0123456789abcdef0123456789abcdef-13-lc";
    const char *at = "2026-11-25T23:36:37.061Z";
    same_record(id, "lc", 1, 13, NULL, at, "created");
    same_record(id, "lc", 7, 0, "alice", at, "reserved");
    same_record(id, "sku.with-dots_1", 1000000000000LL, 1023, "u\"q\\b\x01\xc3\xa9", at, "created");
    same_record(id, "lc", 1, 5, "\xed\xa0\x80", at, "created"); /* refused by both */
    same_record(id, "\xc3\x28", 1, 5, NULL, at, "created");
    /* A user of 128 characters, each one escaped six bytes wide, and a longer one than any
     * that validation lets through (the heap path). */
    char user[4001];
    memset(user, 0x01, sizeof(user) - 1);
    user[128] = '\0';
    same_record(id, "lc", 1, 2, user, at, "created");
    user[128] = 0x01;
    user[sizeof(user) - 1] = '\0';
    same_record(id, "lc", 1, 2, user, at, "created");
    /* Random printable user ids, as validation admits them (quotes and backslashes included). */
    for (int round = 0; round < 2000; round++) {
        char u[129];
        size_t n = 1 + rnd() % 128;
        for (size_t i = 0; i < n; i++)
            u[i] = (char)(0x20 + rnd() % 95);
        u[n] = '\0';
        same_record(id, "lc", 1 + rnd() % 100, (int)(rnd() % 1024), u, at,
                    rnd() & 1 ? "created" : "reserved");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_strings), cmocka_unit_test(test_random_strings),
        cmocka_unit_test(test_numbers_and_raw), cmocka_unit_test(test_too_small),
        cmocka_unit_test(test_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
