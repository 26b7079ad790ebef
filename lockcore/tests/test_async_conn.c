/*
 * Unit tests of a command's text (async_conn.c, lc_acmd_format) without Redis: the bytes must be
 * those hiredis's redisFormatCommandArgv writes for the same arguments (the text lockcore sent
 * before issue 23), for no argument, empty ones, binary ones (NUL, CR, LF) and lengths at every
 * change of digit count, then 20,000 random commands; a buffer one byte short is left alone.
 */
#include "lc_test.h"

#include "async_internal.h"

/* lc_acmd_format's text of argv equals hiredis's. */
static void same_text(int argc, const char **argv, const size_t *lens)
{
    char *want = NULL;
    int wn = redisFormatCommandArgv(&want, argc, argv, lens);
    assert_true(wn >= 0);
    size_t n = lc_acmd_format(argc, (const char *const *)argv, lens, NULL, 0);
    assert_int_equal(n, (size_t)wn);
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    buf[n] = '#';
    assert_int_equal(lc_acmd_format(argc, (const char *const *)argv, lens, buf, n), n);
    assert_memory_equal(buf, want, n);
    assert_int_equal(buf[n], '#'); /* nothing past the end */
    if (n > 0) {                   /* one byte short: the length again, nothing written */
        memset(buf, '#', n);
        assert_int_equal(lc_acmd_format(argc, (const char *const *)argv, lens, buf, n - 1), n);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(buf[i], '#');
    }
    free(buf);
    free(want);
}

static void test_edge_cases(void **state)
{
    (void)state;
    same_text(0, NULL, NULL);
    const char *one[] = {"PING"};
    size_t one_l[] = {4};
    same_text(1, one, one_l);
    const char *empty[] = {"SET", "", ""};
    size_t empty_l[] = {3, 0, 0};
    same_text(3, empty, empty_l);
    const char *bin[] = {"EVALSHA", "a\0b\r\n$*", "\r\n"};
    size_t bin_l[] = {7, 8, 2};
    same_text(3, bin, bin_l);
    /* lengths on both sides of each change of digit count */
    static char big[100001];
    memset(big, 'x', sizeof(big));
    static const size_t ls[] = {9,    10,   11,   99,   100,   101,   999,
                                1000, 2047, 2048, 9999, 10000, 100001};
    for (size_t i = 0; i < sizeof(ls) / sizeof(ls[0]); i++) {
        const char *av[] = {"EVAL", big};
        size_t al[] = {4, ls[i]};
        same_text(2, av, al);
    }
    /* argc itself at 9, 10, 11 and 100 */
    const char *many[100];
    size_t many_l[100];
    for (int i = 0; i < 100; i++) {
        many[i] = big;
        many_l[i] = (size_t)i;
    }
    same_text(9, many, many_l);
    same_text(10, many, many_l);
    same_text(11, many, many_l);
    same_text(100, many, many_l);
}

static void test_random_commands(void **state)
{
    (void)state;
    unsigned long long s = 0x2545F4914F6CDD1DULL;
    static char pool[4096];
    for (size_t i = 0; i < sizeof(pool); i++)
        pool[i] = (char)(i * 131 + 7);
    for (int round = 0; round < 20000; round++) {
        const char *av[24];
        size_t al[24];
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        int argc = (int)(s % 24);
        for (int i = 0; i < argc; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            al[i] = (size_t)(s % 300);
            av[i] = pool + (s >> 20) % (sizeof(pool) - 300);
        }
        same_text(argc, av, al);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_random_commands),
    };
    return cmocka_run_group_tests_name("test_async_conn", tests, NULL, NULL);
}
