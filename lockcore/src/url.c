/*
 * Redis URL parsing: redis://[[user]:password@]host[:port][/db], unix:///path[?db=N] and
 * redis-cluster://[[user]:password@]host[:port][,host[:port]…] (the seed nodes of a cluster).
 * User and password may be percent-encoded; an IPv6 host is written in brackets.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"

/* Copies src[0..len) into dst (size cap) percent-decoding it. 0 on success, -1 on overflow or a
 * bad escape. */
static int decode(char *dst, size_t cap, const char *src, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = src[i];
        if (ch == '%') {
            if (i + 2 >= len || !isxdigit((unsigned char)src[i + 1]) ||
                !isxdigit((unsigned char)src[i + 2]))
                return -1;
            char hex[3] = {src[i + 1], src[i + 2], 0};
            ch = (char)strtol(hex, NULL, 16);
            i += 2;
        }
        if (o + 1 >= cap)
            return -1;
        dst[o++] = ch;
    }
    dst[o] = '\0';
    return 0;
}

/* Parses a decimal integer in [lo, hi] from s[0..len). 0 on success. */
static int parse_int(const char *s, size_t len, int lo, int hi, int *out)
{
    if (len == 0 || len > 9)
        return -1;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static lc_status parse_unix(const char *url, lc_url *out)
{
    const char *path = url + strlen("unix://");
    const char *q = strchr(path, '?');
    size_t plen = q ? (size_t)(q - path) : strlen(path);
    if (plen == 0 || path[0] != '/')
        return lc_fail(LC_EINVAL, "redis url: unix socket path must be absolute");
    if (plen >= sizeof(out->path))
        return lc_fail(LC_EINVAL, "redis url: unix socket path too long");
    memcpy(out->path, path, plen);
    out->path[plen] = '\0';
    out->unix_socket = 1;
    if (q) {
        if (strncmp(q, "?db=", 4) != 0 || parse_int(q + 4, strlen(q + 4), 0, 100000, &out->db))
            return lc_fail(LC_EINVAL, "redis url: only ?db=N (a number) may follow the path");
    }
    return LC_OK;
}

/* Parses host[:port] from p[0..hostend) into host/port (port left as it is when absent). The
 * host is a name, an IPv4 address or [IPv6]. LC_OK or LC_EINVAL with a message. */
static lc_status parse_hostport(const char *p, const char *hostend, char *host, size_t cap,
                                int *port)
{
    const char *portsep = NULL;
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(hostend - p));
        if (!rb)
            return lc_fail(LC_EINVAL, "redis url: unterminated [IPv6] host");
        if ((size_t)(rb - p - 1) >= cap || rb == p + 1)
            return lc_fail(LC_EINVAL, "redis url: bad IPv6 host");
        memcpy(host, p + 1, (size_t)(rb - p - 1));
        host[rb - p - 1] = '\0';
        if (rb + 1 < hostend) {
            if (rb[1] != ':')
                return lc_fail(LC_EINVAL, "redis url: junk after [IPv6] host");
            portsep = rb + 1;
        }
    } else {
        portsep = memchr(p, ':', (size_t)(hostend - p));
        const char *he = portsep ? portsep : hostend;
        if (he == p)
            return lc_fail(LC_EINVAL, "redis url: missing host");
        if ((size_t)(he - p) >= cap)
            return lc_fail(LC_EINVAL, "redis url: host too long");
        for (const char *s = p; s < he; s++)
            if (!isalnum((unsigned char)*s) && *s != '.' && *s != '-' && *s != '_')
                return lc_fail(LC_EINVAL, "redis url: bad character in host");
        memcpy(host, p, (size_t)(he - p));
        host[he - p] = '\0';
    }
    if (portsep && parse_int(portsep + 1, (size_t)(hostend - portsep - 1), 1, 65535, port))
        return lc_fail(LC_EINVAL, "redis url: port must be a number 1..65535");
    return LC_OK;
}

/* redis-cluster://[[user]:password@]host[:port][,host[:port]…][/0]: the seed nodes. */
static lc_status parse_cluster(const char *p, const char *end, lc_url *out)
{
    const char *slash = memchr(p, '/', (size_t)(end - p));
    if (slash) {
        if (!(end - slash == 1 || (end - slash == 2 && slash[1] == '0')))
            return lc_fail(LC_EINVAL, "redis url: a cluster has only db 0");
        end = slash;
    }
    out->cluster = 1;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *he = comma ? comma : end;
        if (out->nseeds == LC_URL_SEEDS_MAX)
            return lc_fail(LC_EINVAL, "redis url: at most %d cluster nodes", LC_URL_SEEDS_MAX);
        lc_url_seed *sd = &out->seeds[out->nseeds];
        sd->port = 6379;
        lc_status st = parse_hostport(p, he, sd->host, sizeof(sd->host), &sd->port);
        if (st != LC_OK)
            return st;
        out->nseeds++;
        p = comma ? comma + 1 : end;
        if (comma && p == end)
            return lc_fail(LC_EINVAL, "redis url: missing host after ','");
    }
    if (out->nseeds == 0)
        return lc_fail(LC_EINVAL, "redis url: missing host");
    memcpy(out->host, out->seeds[0].host, sizeof(out->host));
    out->port = out->seeds[0].port;
    return LC_OK;
}

lc_status lc_url_parse(const char *url, lc_url *out)
{
    if (!url || !out)
        return lc_fail(LC_EINVAL, "redis url: NULL argument");
    memset(out, 0, sizeof(*out));
    out->port = 6379;
    if (strncmp(url, "unix://", 7) == 0)
        return parse_unix(url, out);
    int cluster = strncmp(url, "redis-cluster://", 16) == 0;
    if (!cluster && strncmp(url, "redis://", 8) != 0)
        return lc_fail(LC_EINVAL,
                       "redis url: must start with redis://, redis-cluster:// or unix://");

    const char *p = url + (cluster ? 16 : 8);
    const char *end = p + strlen(p);
    const char *slash = memchr(p, '/', (size_t)(end - p));
    const char *auth_end = NULL;
    for (const char *s = p; s < (slash ? slash : end); s++)
        if (*s == '@')
            auth_end = s; /* the last '@' before the path ends the credentials */
    if (auth_end) {
        const char *colon = memchr(p, ':', (size_t)(auth_end - p));
        if (!colon)
            return lc_fail(LC_EINVAL, "redis url: credentials must be [user]:password@");
        if (decode(out->user, sizeof(out->user), p, (size_t)(colon - p)) ||
            decode(out->password, sizeof(out->password), colon + 1, (size_t)(auth_end - colon - 1)))
            return lc_fail(LC_EINVAL, "redis url: bad or too long user/password");
        p = auth_end + 1;
    }
    if (cluster)
        return parse_cluster(p, end, out);

    const char *hostend = slash ? slash : end;
    lc_status st = parse_hostport(p, hostend, out->host, sizeof(out->host), &out->port);
    if (st != LC_OK)
        return st;
    if (slash && slash + 1 < end &&
        parse_int(slash + 1, (size_t)(end - slash - 1), 0, 100000, &out->db))
        return lc_fail(LC_EINVAL, "redis url: db must be a number");
    return LC_OK;
}
