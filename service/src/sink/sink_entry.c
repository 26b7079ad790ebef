/*
 * sink_entry — parses order-log entries (orderlog.h) out of stream replies.
 */
#include "sink_entry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "order_status.h"
#include "orderlog.h"

int sink_entry_parse_id(const char *s, unsigned long long *ms, unsigned long long *seq)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    *ms = strtoull(s, &end, 10);
    if (errno != 0 || *end != '-' || end[1] < '0' || end[1] > '9')
        return -1;
    *seq = strtoull(end + 1, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    return 0;
}

/* A decimal integer lo..hi (no sign but '-', no spaces). */
static int number(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    if (*s == '\0' || *s == '+' || *s == ' ')
        return -1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int copy(char *dst, size_t cap, const redisReply *v)
{
    if (v == NULL || v->type != REDIS_REPLY_STRING || v->len >= cap || memchr(v->str, 0, v->len))
        return -1;
    memcpy(dst, v->str, v->len);
    dst[v->len] = '\0';
    return 0;
}

/* Checks a parts field "k:q,k:q,...": segments strictly increasing from the entry's own,
 * quantities >= 1 summing to the entry's (one part, "segment:quantity", says what no field
 * says: accepted). 0, or -1. */
static int parts_ok(const struct sink_entry *e)
{
    char buf[SINK_PARTS_MAX + 1];
    snprintf(buf, sizeof buf, "%s", e->parts);
    long long sum = 0, prev = -1;
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(t, ':');
        long long k, q;
        if (colon == NULL)
            return -1;
        *colon = '\0';
        if (number(t, 0, 1000000, &k) != 0 || number(colon + 1, 1, 1000000000000LL, &q) != 0 ||
            k <= prev || (n == 0 && k != e->segment))
            return -1;
        prev = k;
        sum += q;
        n++;
    }
    /* strtok_r skips empty tokens: "0:1,,1:2" or a trailing comma are not the format */
    size_t len = strlen(e->parts);
    if (len == 0 || e->parts[0] == ',' || e->parts[len - 1] == ',' || strstr(e->parts, ",,"))
        return -1;
    return n >= 1 && sum == e->quantity ? 0 : -1;
}

/* Checks a cart's items field (orderlog.h): every part well formed, no SKU and segment twice
 * (one order_items row each), the first part the entry's own (its SKU and segment), and the
 * parts of the entry's SKU the entry's parts (or, without the field, its one segment:quantity).
 * 0, or -1. */
static int items_ok(const struct sink_entry *e)
{
    char home[SINK_PARTS_MAX + 1], want[SINK_PARTS_MAX + 1];
    size_t used = 0;
    const char *pos = e->items;
    char sku[SINK_SKU_MAX + 1];
    int k, n = 0, r;
    long long q;
    if (e->parts[0] != '\0')
        snprintf(want, sizeof want, "%s", e->parts);
    else
        snprintf(want, sizeof want, "%d:%lld", e->segment, e->quantity);
    home[0] = '\0';
    while ((r = orderlog_items_next(&pos, sku, sizeof sku, &k, &q)) == 1) {
        if (n == 0 && (strcmp(sku, e->sku) != 0 || k != e->segment))
            return -1;
        /* no (sku, segment) twice: each is one row of the order */
        const char *before = e->items;
        char s2[SINK_SKU_MAX + 1];
        int k2;
        long long q2;
        for (int i = 0; i < n; i++) {
            if (orderlog_items_next(&before, s2, sizeof s2, &k2, &q2) != 1)
                return -1;
            if (k2 == k && strcmp(s2, sku) == 0)
                return -1;
        }
        if (strcmp(sku, e->sku) == 0) {
            int w = snprintf(home + used, sizeof home - used, "%s%d:%lld", used ? "," : "", k, q);
            if (w < 0 || (size_t)w >= sizeof home - used)
                return -1;
            used += (size_t)w;
        }
        n++;
    }
    return r == 0 && n >= 1 && strcmp(home, want) == 0 ? 0 : -1;
}

int sink_entry_next_item(const struct sink_entry *e, const char **pos, char *sku, size_t cap,
                         int *k, long long *q)
{
    if (e->items[0] != '\0') {
        if (*pos == NULL)
            *pos = e->items;
        return orderlog_items_next(pos, sku, cap, k, q);
    }
    if (snprintf(sku, cap, "%s", e->sku) >= (int)cap)
        return -1;
    if (e->parts[0] == '\0') { /* a one-segment order: its one part */
        if (*pos != NULL)
            return 0;
        *pos = "";
        *k = e->segment;
        *q = e->quantity;
        return 1;
    }
    if (*pos == NULL)
        *pos = e->parts;
    if (**pos == '\0')
        return 0;
    char *end;
    long long kk = strtoll(*pos, &end, 10);
    if (*end != ':')
        return -1;
    *q = strtoll(end + 1, &end, 10);
    if (*end != ',' && *end != '\0')
        return -1;
    *k = (int)kk;
    *pos = *end == ',' ? end + 1 : end;
    return 1;
}

void sink_entry_parts_json(const struct sink_entry *e, char *out, size_t cap)
{
    if (e->parts[0] == '\0') {
        snprintf(out, cap, "[{\"segment\":%d,\"quantity\":%lld}]", e->segment, e->quantity);
        return;
    }
    size_t used = 0;
    const char *p = e->parts;
    out[0] = '\0';
    while (*p != '\0' && used < cap) {
        long long k = strtoll(p, (char **)&p, 10);
        long long q = *p == ':' ? strtoll(p + 1, (char **)&p, 10) : 0;
        int n = snprintf(out + used, cap - used, "%s{\"segment\":%lld,\"quantity\":%lld}",
                         used ? "," : "[", k, q);
        if (n < 0)
            break;
        used += (size_t)n;
        if (*p == ',')
            p++;
    }
    if (used + 2 <= cap) {
        out[used] = ']';
        out[used + 1] = '\0';
    }
}

int sink_entry_parse(const redisReply *item, int stream, const char *sku, int segment,
                     struct sink_entry *e)
{
    memset(e, 0, sizeof *e);
    if (item == NULL || item->type != REDIS_REPLY_ARRAY || item->elements != 2 ||
        copy(e->id, sizeof e->id, item->element[0]) != 0 ||
        sink_entry_parse_id(e->id, &e->ms, &e->seq) != 0)
        return -1;
    e->stream = stream;
    snprintf(e->sku, sizeof e->sku, "%s", sku);
    e->segment = segment;
    const redisReply *f = item->element[1];
    if (f == NULL || f->type != REDIS_REPLY_ARRAY) {
        snprintf(e->why, sizeof e->why, "no fields (deleted from the stream)");
        return 0;
    }
    char tmp[32];
    int have = 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (k == NULL || k->type != REDIS_REPLY_STRING)
            continue;
        const char *name = k->str;
        int bad = 0;
        if (strcmp(name, "event") == 0) {
            bad = copy(e->event, sizeof e->event, v);
            have |= 1;
        } else if (strcmp(name, "order") == 0) {
            bad = copy(e->order, sizeof e->order, v) || e->order[0] == '\0';
            have |= 2;
        } else if (strcmp(name, "user") == 0) {
            bad = copy(e->user, sizeof e->user, v);
            have |= 4;
        } else if (strcmp(name, "quantity") == 0) {
            bad = copy(tmp, sizeof tmp, v) || number(tmp, 0, 1000000000000LL, &e->quantity);
            have |= 8;
        } else if (strcmp(name, "at") == 0) {
            bad = copy(tmp, sizeof tmp, v) || number(tmp, 0, 253402300799999LL, &e->at);
            have |= 16;
        } else if (strcmp(name, "version") == 0) {
            bad = copy(tmp, sizeof tmp, v) || number(tmp, 0, 9000000000000000000LL, &e->version);
            have |= 32;
        } else if (strcmp(name, "parts") == 0) {
            bad = copy(e->parts, sizeof e->parts, v);
            have |= 64;
        } else if (strcmp(name, "expires") == 0) {
            bad = copy(tmp, sizeof tmp, v) || number(tmp, 1, 253402300799999LL, &e->expires);
            have |= 128;
        } else if (strcmp(name, "items") == 0) {
            bad = copy(e->items, sizeof e->items, v) || e->items[0] == '\0';
            have |= 256;
        }
        if (bad) {
            snprintf(e->why, sizeof e->why, "field %.20s is malformed", name);
            return 0;
        }
    }
    if ((have & 59) != 59) { /* every field but user is required */
        snprintf(e->why, sizeof e->why, "a required field is missing");
        return 0;
    }
    if ((have & 64) && parts_ok(e) != 0) {
        snprintf(e->why, sizeof e->why, "field parts is not k:q,k:q,... summing to quantity");
        return 0;
    }
    if ((have & 256) && items_ok(e) != 0) {
        snprintf(e->why, sizeof e->why,
                 "field items is not <sku>:<k>:<q>,... from the entry's own parts");
        return 0;
    }
    /* an event is a stored status's name (orderlog.h), or an extension, which alone carries
     * (and needs) the new expiry */
    int extended = strcmp(e->event, SINK_EVENT_EXTENDED) == 0;
    if (extended != ((have & 128) != 0)) {
        snprintf(e->why, sizeof e->why,
                 extended ? "an extension without its expires field"
                          : "field expires on an event not extended");
        return 0;
    }
    if (extended || order_status_parse(e->event, strlen(e->event)) >= 0)
        e->ok = 1;
    if (!e->ok)
        snprintf(e->why, sizeof e->why, "unknown event \"%.16s\"", e->event);
    return 0;
}

const char *sink_entry_status(const struct sink_entry *e)
{
    return strcmp(e->event, SINK_EVENT_EXTENDED) == 0 ? order_status_name(ORDER_STATUS_RESERVED)
                                                      : e->event;
}
