/*
 * Unit tests of service/src/rules.c: RFC 3339 times parsed to ms since the epoch (valid forms,
 * offsets, fractions, and a table of garbage, impossible dates and out-of-range instants that
 * must be refused), formatted back ("YYYY-MM-DDTHH:MM:SS.mmmZ"), checked against libc's
 * gmtime_r over many random instants, and the rules as JSON.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "rules.h"

static int64_t parse_ok(const char *s)
{
    int64_t ms = -7;
    if (rules_parse_time(s, strlen(s), &ms) != 0)
        fail_msg("refused \"%s\"", s);
    return ms;
}

static void test_parse_valid(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int64_t ms;
    } cases[] = {
        {"2026-11-25T18:00:00Z", 1795629600000LL},
        {"2026-11-25t18:00:00z", 1795629600000LL},
        {"2026-11-25T18:00:00.5Z", 1795629600500LL},
        {"2026-11-25T18:00:00.123Z", 1795629600123LL},
        {"2026-11-25T18:00:00.123999999Z", 1795629600123LL}, /* cut, not rounded */
        {"2026-11-25T20:00:00+02:00", 1795629600000LL},
        {"2026-11-25T12:30:00-05:30", 1795629600000LL},
        {"2026-11-25T18:00:00+00:00", 1795629600000LL},
        {"2026-11-25T18:00:00-00:00", 1795629600000LL},
        {"1970-01-01T00:00:00.001Z", 1},
        {"1970-01-01T00:00:01Z", 1000},
        {"1970-01-01T00:00:00-00:01", 60000}, /* local 1970, UTC a minute later */
        {"2000-02-29T00:00:00Z", 951782400000LL},
        {"2024-02-29T23:59:59.999Z", 1709251199999LL},
        {"9999-12-31T23:59:59.999Z", RULES_TIME_MAX},
        {"9999-12-31T23:59:59.999+01:00", RULES_TIME_MAX - 3600000},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t ms = parse_ok(cases[i].s);
        if (ms != cases[i].ms)
            fail_msg("\"%s\": %lld, expected %lld", cases[i].s, (long long)ms,
                     (long long)cases[i].ms);
    }
}

static void test_parse_invalid(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "now",
        "2026-11-25",                      /* a date alone */
        "2026-11-25T18:00:00",             /* no zone */
        "2026-11-25 18:00:00Z",            /* space for T */
        "2026-11-25T18:00Z",               /* no seconds */
        "2026-11-25T18:00:00.Z",           /* empty fraction */
        "2026-11-25T18:00:00.1234567890Z", /* 10 fraction digits */
        "2026-11-25T18:00:00,5Z",
        "2026-11-25T18:00:00+0200", /* offset without ':' */
        "2026-11-25T18:00:00+02",
        "2026-11-25T18:00:00+24:00",
        "2026-11-25T18:00:00+02:60",
        "2026-11-25T18:00:00ZZ", /* trailing data */
        "2026-11-25T18:00:00Z ",
        " 2026-11-25T18:00:00Z",
        "+2026-11-25T18:00:00Z",
        "2026-1-25T18:00:00Z",
        "20261-11-25T18:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-11-00T00:00:00Z",
        "2026-11-31T00:00:00Z",
        "2026-02-29T00:00:00Z", /* not a leap year */
        "1900-02-29T00:00:00Z", /* nor is 1900 */
        "2026-11-25T24:00:00Z",
        "2026-11-25T23:60:00Z",
        "2026-11-25T23:59:60Z", /* no leap seconds */
        "1969-12-31T23:59:59Z", /* before 1970 */
        "1970-01-01T00:00:00Z", /* the epoch itself: 0 means "none" */
        "1970-01-01T00:30:00+01:00",
        "0000-01-01T00:00:00Z",
        "9999-12-31T23:59:59-01:00", /* past 9999 in UTC */
        "2026-11-25T18:00:00\xc2\xa0Z",
        "2026-11-25T18:0a:00Z",
        "-026-11-25T18:00:00Z",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t ms = 42;
        if (rules_parse_time(bad[i], strlen(bad[i]), &ms) == 0)
            fail_msg("accepted \"%s\" as %lld", bad[i], (long long)ms);
        assert_int_equal(ms, 42);
    }
    int64_t ms = 42;
    assert_int_equal(rules_parse_time(NULL, 0, &ms), -1);
    /* The length bounds the text: no read past it, no NUL needed. */
    const char s[] = "2026-11-25T18:00:00Zjunk";
    assert_int_equal(rules_parse_time(s, 20, &ms), 0);
    assert_int_equal(ms, 1795629600000LL);
    assert_int_equal(rules_parse_time(s, 19, &ms), -1);
    const char nul[] = "2026-11-25T18:00:00Z\0";
    assert_int_equal(rules_parse_time(nul, sizeof(nul) - 1, &ms), -1);
}

static void test_format_time(void **state)
{
    (void)state;
    char buf[32];
    rules_format_time(1795629600000LL, buf);
    assert_string_equal(buf, "2026-11-25T18:00:00.000Z");
    rules_format_time(1795629600123LL, buf);
    assert_string_equal(buf, "2026-11-25T18:00:00.123Z");
    rules_format_time(1, buf);
    assert_string_equal(buf, "1970-01-01T00:00:00.001Z");
    rules_format_time(951782400000LL, buf);
    assert_string_equal(buf, "2000-02-29T00:00:00.000Z");
    rules_format_time(RULES_TIME_MAX, buf);
    assert_string_equal(buf, "9999-12-31T23:59:59.999Z");
    rules_format_time(RULES_TIME_MAX + 1000, buf); /* clamped */
    assert_string_equal(buf, "9999-12-31T23:59:59.999Z");
    rules_format_time(-5, buf);
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
}

/* Random instants: the format agrees with gmtime_r field by field, and parses back. */
static void test_round_trip_against_gmtime(void **state)
{
    (void)state;
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int64_t ms = (int64_t)(x % (uint64_t)RULES_TIME_MAX) + 1;
        if (i < 1000) /* near the ends and the leap days too */
            ms = i % 2 ? RULES_TIME_MAX - (int64_t)(x % 400000000000ULL)
                       : 1 + (int64_t)(x % 1000000000000ULL);
        char buf[32], want[80];
        rules_format_time(ms, buf);
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        assert_non_null(gmtime_r(&t, &tm));
        snprintf(want, sizeof(want), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
        if (strcmp(buf, want) != 0)
            fail_msg("%lld: %s, gmtime_r says %s", (long long)ms, buf, want);
        assert_int_equal(parse_ok(buf), ms);
    }
}

static void test_json(void **state)
{
    (void)state;
    struct sku_rules r = {.limit_per_user = 2, .sale_start_ms = 1795629600000LL, .ttl_s = 600};
    json_t *o = json_object();
    assert_int_equal(rules_to_json(&r, o), 0);
    char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(text, "{\"limit_per_user\":2,\"reservation_ttl_s\":600,"
                              "\"sale_end\":null,\"sale_start\":\"2026-11-25T18:00:00.000Z\"}");
    free(text);
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid), cmocka_unit_test(test_parse_invalid),
        cmocka_unit_test(test_format_time), cmocka_unit_test(test_round_trip_against_gmtime),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests_name("rules", tests, NULL, NULL);
}
