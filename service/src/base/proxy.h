/*
 * proxy — who the client is when requests come through a reverse proxy (config trusted_proxies).
 *
 * Behind nginx every connection comes from the proxy's address, so per-client rules (the rate
 * limit, --admin-allow-loopback) would see one client. A proxy listed in trusted_proxies (CIDRs,
 * IPv4 and IPv6) is believed about the client: the client is the rightmost address of
 * X-Forwarded-For that is not itself a trusted proxy (each proxy appends the address it saw, so
 * everything left of the first untrusted hop may be forged by the client); without
 * X-Forwarded-For, X-Real-IP. A peer that is not trusted is the client, whatever it sends.
 *
 * Addresses are 16 bytes, IPv4 as IPv4-mapped IPv6 (::ffff:a.b.c.d), so one comparison serves
 * both families. Pure functions on plain data: no allocation, thread-safe.
 */
#ifndef INVENTORY_PROXY_H
#define INVENTORY_PROXY_H

#include <stdbool.h>
#include <stddef.h>

struct sockaddr;

#define PROXY_MAX_CIDRS 64
#define PROXY_ADDR_LEN 16

struct proxy_cidr {
    unsigned char addr[PROXY_ADDR_LEN]; /* network address, host bits zero */
    int bits;                           /* prefix length over the 16 bytes (IPv4 /n is 96 + n) */
};

struct proxy_list {
    int n;
    struct proxy_cidr cidr[PROXY_MAX_CIDRS];
};

/* Parses a list of CIDRs separated by commas and/or blanks ("10.0.0.0/8, ::1/128 127.0.0.1"; a
 * bare address is a /32 or /128; an IPv4-mapped IPv6 CIDR counts as IPv4). "" gives an empty
 * list. Returns 0, or -1 with a short reason in why (quoting at most the bad entry). */
int proxy_parse_list(const char *text, struct proxy_list *out, char *why, size_t whylen);

/* Parses one address literal s[0..n): IPv4, IPv6 or [IPv6], blanks around it allowed, no port.
 * True with *out filled when it is one. */
bool proxy_parse_addr(const char *s, size_t n, unsigned char out[PROXY_ADDR_LEN]);

/* The address of an AF_INET/AF_INET6 socket address. False for NULL or another family. */
bool proxy_addr_of(const struct sockaddr *sa, unsigned char out[PROXY_ADDR_LEN]);

/* True when addr lies in one of l's CIDRs. */
bool proxy_trusted(const struct proxy_list *l, const unsigned char addr[PROXY_ADDR_LEN]);

/* True for 127.0.0.0/8 and ::1. */
bool proxy_is_loopback(const unsigned char addr[PROXY_ADDR_LEN]);

/* The client behind peer: peer itself unless peer is trusted; then the rightmost untrusted
 * address of xff (all X-Forwarded-For headers joined with ','; NULL when absent), or, when every
 * hop is trusted, the leftmost; an entry that is not an address ends the walk at the hop to its
 * right. Without xff, x_real_ip when it is an address. Writes the result to out (which may be
 * peer). */
void proxy_client(const struct proxy_list *trusted, const unsigned char peer[PROXY_ADDR_LEN],
                  const char *xff, const char *x_real_ip, unsigned char out[PROXY_ADDR_LEN]);

/* Formats addr as text (inet_ntop; IPv4-mapped as plain IPv4) into buf (>= 46 bytes). */
void proxy_addr_text(const unsigned char addr[PROXY_ADDR_LEN], char *buf, size_t len);

#endif
