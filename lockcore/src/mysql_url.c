/*
 * mysql://user[:password]@host[:port]/database, parsed (lockcore_mysql.h): the one parser of the
 * form, used by the MySQL lock backend and by inventory-sink's --db.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"
#include "lockcore/lockcore_mysql.h"

static lc_status url_fail(char *err, size_t errlen, const char *why)
{
    if (err && errlen)
        snprintf(err, errlen, "%s", why);
    return lc_fail(LC_EINVAL, "mysql url: %s", why);
}

/* Copies s[0..n) into out (cap bytes), decoding %XX. -1 when it does not fit or is malformed. */
static int url_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            char hex[3] = {s[i + 1], s[i + 2], 0};
            char *end;
            long v = strtol(hex, &end, 16);
            if (*end != '\0' || v <= 0)
                return -1;
            c = (char)v;
            i += 2;
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

lc_status lc_mysql_url_parse(const char *url, lc_mysql_url *out, char *err, size_t errlen)
{
    if (!url || !out)
        return url_fail(err, errlen, "NULL argument");
    memset(out, 0, sizeof *out);
    static const char scheme[] = "mysql://";
    if (strncmp(url, scheme, sizeof scheme - 1) != 0)
        return url_fail(err, errlen, "must start with mysql://");
    const char *p = url + sizeof scheme - 1;
    const char *at = strrchr(p, '@');
    const char *slash = strchr(at ? at : p, '/');
    if (at == NULL || slash == NULL)
        return url_fail(err, errlen, "expected mysql://user[:password]@host[:port]/database");
    const char *colon = memchr(p, ':', (size_t)(at - p));
    size_t ulen = (size_t)((colon ? colon : at) - p);
    if (ulen == 0 || url_decode(p, ulen, out->user, sizeof out->user) != 0)
        return url_fail(err, errlen, "bad or missing user name");
    if (colon != NULL &&
        url_decode(colon + 1, (size_t)(at - colon - 1), out->password, sizeof out->password) != 0)
        return url_fail(err, errlen, "bad password (too long, or a malformed %XX)");
    const char *host = at + 1;
    const char *hend = slash;
    const char *pc = NULL;
    if (*host == '[') { /* [IPv6]:port */
        const char *rb = memchr(host, ']', (size_t)(slash - host));
        if (rb == NULL)
            return url_fail(err, errlen, "unterminated [IPv6 address]");
        pc = rb[1] == ':' ? rb + 1 : NULL;
        host++;
        hend = rb;
    } else {
        pc = memchr(host, ':', (size_t)(slash - host));
        if (pc != NULL)
            hend = pc;
    }
    size_t hlen = (size_t)(hend - host);
    if (hlen == 0 || hlen >= sizeof out->host)
        return url_fail(err, errlen, "bad or missing host");
    memcpy(out->host, host, hlen);
    out->port = 3306;
    if (pc != NULL) {
        char *end;
        errno = 0;
        long port = strtol(pc + 1, &end, 10);
        if (end != slash || errno != 0 || port < 1 || port > 65535)
            return url_fail(err, errlen, "bad port");
        out->port = (unsigned)port;
    }
    const char *db = slash + 1;
    size_t dlen = strlen(db);
    if (dlen == 0 || dlen >= sizeof out->database ||
        strspn(db, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$") != dlen)
        return url_fail(err, errlen, "bad database name (1..64 of [A-Za-z0-9_$])");
    memcpy(out->database, db, dlen + 1);
    return LC_OK;
}
