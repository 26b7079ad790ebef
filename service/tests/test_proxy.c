/*
 * Unit tests of service/src/base/proxy.c: trusted-proxy CIDR lists (IPv4, IPv6, IPv4-mapped) and
 * the client address behind them (rightmost untrusted X-Forwarded-For hop, X-Real-IP, forged and
 * malformed headers), issue #10.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "proxy.h"

static void addr(const char *s, unsigned char out[PROXY_ADDR_LEN])
{
    if (!proxy_parse_addr(s, strlen(s), out))
        fail_msg("not an address: %s", s);
}

static struct proxy_list list(const char *text)
{
    struct proxy_list l;
    char why[128];
    if (proxy_parse_list(text, &l, why, sizeof(why)) != 0)
        fail_msg("%s: %s", text, why);
    return l;
}

/* The client proxy_client finds, as text. */
static const char *client(const struct proxy_list *l, const char *peer, const char *xff,
                          const char *real_ip)
{
    static char buf[64];
    unsigned char p[PROXY_ADDR_LEN], out[PROXY_ADDR_LEN];
    addr(peer, p);
    proxy_client(l, p, xff, real_ip, out);
    proxy_addr_text(out, buf, sizeof(buf));
    return buf;
}

static void test_parse_addr(void **state)
{
    (void)state;
    unsigned char a[PROXY_ADDR_LEN], b[PROXY_ADDR_LEN];
    addr("192.0.2.7", a);
    addr(" ::ffff:192.0.2.7 ", b);
    assert_memory_equal(a, b, PROXY_ADDR_LEN); /* one form for IPv4 */
    addr("[2001:db8::1]", a);
    addr("2001:db8::1", b);
    assert_memory_equal(a, b, PROXY_ADDR_LEN);
    const char *bad[] = {"",      " ",    "192.0.2.7:80",      "unknown",
                         "1.2.3", "[::1", "2001:db8::1%eth0x", "192.0.2.7 1.2.3.4"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (proxy_parse_addr(bad[i], strlen(bad[i]), a))
            fail_msg("accepted \"%s\"", bad[i]);

    struct sockaddr_in in4 = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &in4.sin_addr);
    assert_true(proxy_addr_of((struct sockaddr *)&in4, a));
    assert_true(proxy_is_loopback(a));
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
    in6.sin6_addr = in6addr_loopback;
    assert_true(proxy_addr_of((struct sockaddr *)&in6, a));
    assert_true(proxy_is_loopback(a));
    addr("::ffff:127.0.0.9", a);
    assert_true(proxy_is_loopback(a));
    addr("10.0.0.1", a);
    assert_false(proxy_is_loopback(a));
    addr("::2", a);
    assert_false(proxy_is_loopback(a));
    assert_false(proxy_addr_of(NULL, a));
}

static void test_cidrs(void **state)
{
    (void)state;
    struct proxy_list l = list("10.0.0.0/8, 192.168.1.7 2001:db8::/32,,::1");
    assert_int_equal(l.n, 4);
    unsigned char a[PROXY_ADDR_LEN];
    const char *in[] = {"10.0.0.1",        "10.255.255.255",   "192.168.1.7",
                        "::ffff:10.1.2.3", "2001:db8:ffff::1", "::1"};
    const char *out[] = {"11.0.0.1", "192.168.1.8", "2001:db9::1", "::2", "127.0.0.1"};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        addr(in[i], a);
        if (!proxy_trusted(&l, a))
            fail_msg("%s should be trusted", in[i]);
    }
    for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++) {
        addr(out[i], a);
        if (proxy_trusted(&l, a))
            fail_msg("%s should not be trusted", out[i]);
    }
    /* Host bits set in the CIDR are ignored; /0 is everything of its family view. */
    l = list("10.1.2.3/8");
    addr("10.9.9.9", a);
    assert_true(proxy_trusted(&l, a));
    l = list("0.0.0.0/0");
    addr("203.0.113.5", a);
    assert_true(proxy_trusted(&l, a));
    addr("2001:db8::1", a);
    assert_false(proxy_trusted(&l, a));
    l = list("");
    assert_int_equal(l.n, 0);
    addr("127.0.0.1", a);
    assert_false(proxy_trusted(&l, a));

    struct proxy_list bad;
    char why[128];
    const char *bads[] = {"10.0.0.0/33",  "::/129",       "10.0.0.0/", "10.0.0.0/08",
                          "host.example", "10.0.0.0/8/8", "1.2.3.4/-1"};
    for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
        if (proxy_parse_list(bads[i], &bad, why, sizeof(why)) == 0)
            fail_msg("accepted \"%s\"", bads[i]);
        assert_non_null(strstr(why, "is not an IPv4 or IPv6 address or CIDR"));
    }
    char many[PROXY_MAX_CIDRS * 16 + 32] = "";
    for (int i = 0; i <= PROXY_MAX_CIDRS; i++) {
        char one[16];
        snprintf(one, sizeof(one), "10.0.%d.0/24,", i);
        strcat(many, one);
    }
    assert_int_equal(proxy_parse_list(many, &bad, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "more than"));
}

static void test_client(void **state)
{
    (void)state;
    struct proxy_list none = list("");
    struct proxy_list lb = list("127.0.0.1/32, ::1");
    struct proxy_list two = list("127.0.0.1, 10.0.0.0/8");

    /* Not trusted: the peer, whatever it claims. */
    assert_string_equal(client(&none, "127.0.0.1", "203.0.113.9", "203.0.113.8"), "127.0.0.1");
    assert_string_equal(client(&lb, "198.51.100.1", "203.0.113.9", NULL), "198.51.100.1");
    /* Trusted: the rightmost hop it vouches for. */
    assert_string_equal(client(&lb, "127.0.0.1", "203.0.113.9", NULL), "203.0.113.9");
    assert_string_equal(client(&lb, "::1", " 2001:db8::5 ", NULL), "2001:db8::5");
    /* A client's forged entries sit left of the one the proxy appended. */
    assert_string_equal(client(&lb, "127.0.0.1", "1.1.1.1, 6.6.6.6, 203.0.113.9", NULL),
                        "203.0.113.9");
    /* Chains of trusted proxies are walked through. */
    assert_string_equal(client(&two, "127.0.0.1", "1.1.1.1, 203.0.113.9, 10.0.0.2, 10.1.1.1", NULL),
                        "203.0.113.9");
    /* Every hop trusted: the leftmost. */
    assert_string_equal(client(&two, "127.0.0.1", "10.0.0.3,10.0.0.2", NULL), "10.0.0.3");
    /* Garbage stops the walk at the hop to its right. */
    assert_string_equal(client(&two, "127.0.0.1", "203.0.113.9, unknown, 10.0.0.2", NULL),
                        "10.0.0.2");
    assert_string_equal(client(&lb, "127.0.0.1", "junk", NULL), "127.0.0.1");
    assert_string_equal(client(&lb, "127.0.0.1", "", NULL), "127.0.0.1");
    assert_string_equal(client(&lb, "127.0.0.1", " , ,203.0.113.9, ", NULL), "203.0.113.9");
    /* X-Real-IP only without X-Forwarded-For. */
    assert_string_equal(client(&lb, "127.0.0.1", NULL, "203.0.113.7"), "203.0.113.7");
    assert_string_equal(client(&lb, "127.0.0.1", "203.0.113.9", "203.0.113.7"), "203.0.113.9");
    assert_string_equal(client(&lb, "127.0.0.1", NULL, "nonsense"), "127.0.0.1");
    assert_string_equal(client(&lb, "127.0.0.1", NULL, NULL), "127.0.0.1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_addr),
        cmocka_unit_test(test_cidrs),
        cmocka_unit_test(test_client),
    };
    return cmocka_run_group_tests_name("proxy", tests, NULL, NULL);
}
