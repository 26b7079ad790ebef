/*
 * proxy — trusted-proxy CIDR lists and the client address behind them; see proxy.h.
 */
#include "proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static const unsigned char v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

bool proxy_parse_addr(const char *s, size_t n, unsigned char out[PROXY_ADDR_LEN])
{
    while (n > 0 && is_blank(*s)) {
        s++;
        n--;
    }
    while (n > 0 && is_blank(s[n - 1]))
        n--;
    if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
        s++;
        n -= 2;
    }
    char buf[64];
    if (n == 0 || n >= sizeof(buf))
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    unsigned char a4[4];
    if (inet_pton(AF_INET, buf, a4) == 1) {
        memcpy(out, v4_prefix, 12);
        memcpy(out + 12, a4, 4);
        return true;
    }
    return inet_pton(AF_INET6, buf, out) == 1;
}

bool proxy_addr_of(const struct sockaddr *sa, unsigned char out[PROXY_ADDR_LEN])
{
    if (!sa)
        return false;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        memcpy(out, v4_prefix, 12);
        memcpy(out + 12, &in->sin_addr.s_addr, 4);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        memcpy(out, in6->sin6_addr.s6_addr, PROXY_ADDR_LEN);
        return true;
    }
    return false;
}

/* Zeroes the bits of a past the first bits. */
static void mask_bits(unsigned char a[PROXY_ADDR_LEN], int bits)
{
    for (int i = 0; i < PROXY_ADDR_LEN; i++) {
        int keep = bits - i * 8;
        if (keep >= 8)
            continue;
        a[i] = keep <= 0 ? 0 : (unsigned char)(a[i] & (0xff << (8 - keep)));
    }
}

/* Parses one CIDR s[0..n) into *c. 0 or -1. */
static int parse_cidr(const char *s, size_t n, struct proxy_cidr *c)
{
    const char *slash = memchr(s, '/', n);
    size_t alen = slash ? (size_t)(slash - s) : n;
    if (!proxy_parse_addr(s, alen, c->addr))
        return -1;
    /* An IPv4 literal (no ':') takes an IPv4 prefix length; ::ffff:a.b.c.d/n is the IPv6 view. */
    bool v4_literal = memchr(s, ':', alen) == NULL;
    int bits = 128;
    if (slash) {
        const char *p = slash + 1;
        size_t plen = n - alen - 1;
        if (plen == 0 || plen > 3)
            return -1;
        bits = 0;
        for (size_t i = 0; i < plen; i++) {
            if (p[i] < '0' || p[i] > '9')
                return -1;
            bits = bits * 10 + (p[i] - '0');
        }
        if (plen > 1 && p[0] == '0')
            return -1;
        if (v4_literal) {
            if (bits > 32)
                return -1;
            bits += 96;
        } else if (bits > 128) {
            return -1;
        }
    }
    c->bits = bits;
    mask_bits(c->addr, bits);
    return 0;
}

int proxy_parse_list(const char *text, struct proxy_list *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof(*out));
    const char *p = text ? text : "";
    while (*p) {
        while (*p == ',' || is_blank(*p))
            p++;
        if (!*p)
            break;
        const char *start = p;
        while (*p && *p != ',' && !is_blank(*p))
            p++;
        size_t n = (size_t)(p - start);
        if (out->n == PROXY_MAX_CIDRS) {
            if (why && whylen)
                snprintf(why, whylen, "more than %d CIDRs", PROXY_MAX_CIDRS);
            return -1;
        }
        if (parse_cidr(start, n, &out->cidr[out->n]) != 0) {
            if (why && whylen) {
                char q[48];
                size_t qn = n < 40 ? n : 40;
                memcpy(q, start, qn);
                q[qn] = '\0';
                for (char *c = q; *c; c++)
                    if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e || *c == '"')
                        *c = '?';
                snprintf(why, whylen, "\"%s%s\" is not an IPv4 or IPv6 address or CIDR", q,
                         n > 40 ? "..." : "");
            }
            return -1;
        }
        out->n++;
    }
    return 0;
}

bool proxy_trusted(const struct proxy_list *l, const unsigned char addr[PROXY_ADDR_LEN])
{
    if (!l)
        return false;
    for (int i = 0; i < l->n; i++) {
        unsigned char a[PROXY_ADDR_LEN];
        memcpy(a, addr, PROXY_ADDR_LEN);
        mask_bits(a, l->cidr[i].bits);
        if (memcmp(a, l->cidr[i].addr, PROXY_ADDR_LEN) == 0)
            return true;
    }
    return false;
}

bool proxy_is_loopback(const unsigned char addr[PROXY_ADDR_LEN])
{
    static const unsigned char v6_loopback[PROXY_ADDR_LEN] = {0, 0, 0, 0, 0, 0, 0, 0,
                                                              0, 0, 0, 0, 0, 0, 0, 1};
    if (memcmp(addr, v4_prefix, 12) == 0)
        return addr[12] == 127;
    return memcmp(addr, v6_loopback, PROXY_ADDR_LEN) == 0;
}

void proxy_client(const struct proxy_list *trusted, const unsigned char peer[PROXY_ADDR_LEN],
                  const char *xff, const char *x_real_ip, unsigned char out[PROXY_ADDR_LEN])
{
    unsigned char hop[PROXY_ADDR_LEN];
    memcpy(hop, peer, PROXY_ADDR_LEN);
    if (!proxy_trusted(trusted, hop)) {
        memmove(out, hop, PROXY_ADDR_LEN);
        return;
    }
    if (xff) {
        /* Right to left: each trusted hop vouches for the entry to its left. */
        size_t end = strlen(xff);
        while (end > 0) {
            size_t start = end;
            while (start > 0 && xff[start - 1] != ',')
                start--;
            unsigned char a[PROXY_ADDR_LEN];
            bool blank = true;
            for (size_t i = start; i < end; i++)
                blank = blank && is_blank(xff[i]);
            if (!blank) {
                if (!proxy_parse_addr(xff + start, end - start, a))
                    break; /* garbage: the last hop we could read is the best we know */
                memcpy(hop, a, PROXY_ADDR_LEN);
                if (!proxy_trusted(trusted, hop))
                    break;
            }
            end = start > 0 ? start - 1 : 0;
        }
        memmove(out, hop, PROXY_ADDR_LEN);
        return;
    }
    unsigned char a[PROXY_ADDR_LEN];
    if (x_real_ip && proxy_parse_addr(x_real_ip, strlen(x_real_ip), a))
        memcpy(hop, a, PROXY_ADDR_LEN);
    memmove(out, hop, PROXY_ADDR_LEN);
}

void proxy_addr_text(const unsigned char addr[PROXY_ADDR_LEN], char *buf, size_t len)
{
    if (memcmp(addr, v4_prefix, 12) == 0) {
        if (!inet_ntop(AF_INET, addr + 12, buf, (socklen_t)len))
            snprintf(buf, len, "?");
        return;
    }
    if (!inet_ntop(AF_INET6, addr, buf, (socklen_t)len))
        snprintf(buf, len, "?");
}
