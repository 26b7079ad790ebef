/*
 * orderlog — the items text of a cart's order log entries (orderlog.h): built by the cart's
 * commit path, read back by inventory-sink. One spelling for both ends, so what the commit
 * writes the sink parses; the scripts spell the same text from the record (log.lua items_text).
 */
#include "orderlog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_scripts.h"
#include "validate.h"

/* The longest units count a part may carry (as the scripts check: 1e15). */
#define ITEM_QTY_MAX 1000000000000000LL

int orderlog_items_add(char *buf, size_t cap, const char *sku, int k, long long q)
{
    if (buf == NULL || sku == NULL || !validate_sku(sku, strlen(sku)) || k < 0 ||
        k >= STORE_SEGMENTS_MAX || q < 1 || q > ITEM_QTY_MAX)
        return -1;
    size_t used = strnlen(buf, cap);
    if (used >= cap)
        return -1;
    size_t limit = cap - 1 < ORDERLOG_ITEMS_MAX ? cap - 1 : ORDERLOG_ITEMS_MAX;
    char part[128];
    int n = snprintf(part, sizeof part, "%s%s:%d:%lld", used ? "," : "", sku, k, q);
    if (n < 0 || (size_t)n >= sizeof part || used + (size_t)n > limit)
        return -1;
    memcpy(buf + used, part, (size_t)n + 1);
    return 0;
}

/* The decimal integer in s[0..len) within lo..hi (digits only). 0, or -1. */
static int digits(const char *s, size_t len, long long lo, long long hi, long long *out)
{
    if (len == 0 || len > 16)
        return -1;
    long long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int orderlog_items_next(const char **pos, char *sku, size_t skucap, int *k, long long *q)
{
    const char *p = *pos;
    if (*p == '\0')
        return 0;
    const char *end = strchr(p, ',');
    if (end == NULL)
        end = p + strlen(p);
    else if (end[1] == '\0')
        return -1; /* a trailing ',' */
    /* the last two ':' of the part: a SKU name may hold ':' itself, the numbers cannot */
    const char *c1 = NULL, *c2 = NULL;
    for (const char *c = end; c > p; c--)
        if (c[-1] == ':') {
            if (c1 == NULL)
                c1 = c - 1;
            else {
                c2 = c - 1;
                break;
            }
        }
    long long kk, qq;
    size_t slen = c2 ? (size_t)(c2 - p) : 0;
    if (c2 == NULL || slen == 0 || slen >= skucap || !validate_sku(p, slen) ||
        digits(c2 + 1, (size_t)(c1 - c2 - 1), 0, STORE_SEGMENTS_MAX - 1, &kk) != 0 ||
        digits(c1 + 1, (size_t)(end - c1 - 1), 1, ITEM_QTY_MAX, &qq) != 0)
        return -1;
    memcpy(sku, p, slen);
    sku[slen] = '\0';
    *k = (int)kk;
    *q = qq;
    *pos = *end == ',' ? end + 1 : end;
    return 1;
}
