/*
 * sink_records — what both of inventory-sink's commands read of a SKU in Redis
 * (sink_records.h). The keys come from store.c, which builds every key; a segment's order
 * records are read with one HGETALL of its orders hash.
 */
#include "sink_records.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "orderlog.h"
#include "store.h"
#include "validate.h"

void sink_log_key(char *buf, size_t cap, const char *sku, int k)
{
    struct seg_keys sk; /* store.c builds every key */
    store_seg_keys(sku, k, &sk);
    snprintf(buf, cap, "%s", sk.log);
}

int sink_sku_ok(const char *s)
{
    return validate_sku(s, strlen(s));
}

/* The text "k:q,k:q,..." of a parts list [{"segment":k,"quantity":q},...] into out; "(bad)"
 * when parts is not such a list. */
static void parts_text(const json_t *parts, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    if (!json_is_array(parts) || json_array_size(parts) == 0) {
        snprintf(out, cap, "(bad)");
        return;
    }
    for (size_t i = 0; i < json_array_size(parts); i++) {
        const json_t *p = json_array_get(parts, i);
        const json_t *k = json_object_get(p, "segment"), *q = json_object_get(p, "quantity");
        /* cjson may write a whole number as 2.0 */
        if (!json_is_number(k) || !json_is_number(q)) {
            snprintf(out, cap, "(bad)");
            return;
        }
        int n = snprintf(out + used, cap - used, "%s%lld:%lld", i ? "," : "",
                         (long long)json_number_value(k), (long long)json_number_value(q));
        if (n < 0 || (size_t)n >= cap - used) {
            snprintf(out, cap, "(too long)");
            return;
        }
        used += (size_t)n;
    }
}

int sink_parts_normalise(struct sink_db_order *x)
{
    char buf[SINK_PARTS_MAX + 16];
    if (x->parts == NULL) {
        snprintf(buf, sizeof buf, "%d:%lld", x->segment, x->quantity);
    } else {
        json_t *j = json_loads(x->parts, 0, NULL);
        parts_text(j, buf, sizeof buf);
        json_decref(j);
    }
    free(x->parts);
    x->parts = strdup(buf);
    return x->parts != NULL ? 0 : -1;
}

/* The items text of a cart's record (orderlog.h: "<sku>:<k>:<q>,..." of every part of every
 * item, as the scripts' items_text spells it) as a new string; NULL when it has none or they
 * are not what the scripts write. */
static char *items_text(const json_t *items)
{
    if (!json_is_array(items) || json_array_size(items) == 0)
        return NULL;
    char *buf = malloc(ORDERLOG_ITEMS_MAX + 1);
    if (buf == NULL)
        return NULL;
    buf[0] = '\0';
    for (size_t i = 0; i < json_array_size(items); i++) {
        const json_t *it = json_array_get(items, i), *parts = json_object_get(it, "parts");
        const char *sku = json_string_value(json_object_get(it, "sku"));
        if (sku == NULL || !json_is_array(parts) || json_array_size(parts) == 0)
            goto bad;
        for (size_t j = 0; j < json_array_size(parts); j++) {
            const json_t *p = json_array_get(parts, j);
            const json_t *k = json_object_get(p, "segment"), *q = json_object_get(p, "quantity");
            /* cjson may write a whole number as 2.0 */
            if (!json_is_number(k) || !json_is_number(q) ||
                orderlog_items_add(buf, ORDERLOG_ITEMS_MAX + 1, sku, (int)json_number_value(k),
                                   (long long)json_number_value(q)) != 0)
                goto bad;
        }
    }
    return buf;
bad:
    free(buf);
    return NULL;
}

/* The items text of a single-SKU order: each part of pt ("k:q,...") in sku. NULL: no memory
 * or pt not that. */
static char *sku_items_text(const char *sku, const char *pt)
{
    size_t cap = strlen(pt) * (strlen(sku) + 2) + 2;
    char *buf = malloc(cap);
    if (buf == NULL)
        return NULL;
    size_t used = 0;
    buf[0] = '\0';
    for (const char *c = pt; *c != '\0';) {
        long long k, q;
        int n;
        if (sscanf(c, "%lld:%lld%n", &k, &q, &n) != 2) {
            free(buf);
            return NULL;
        }
        int w = snprintf(buf + used, cap - used, "%s%s:%lld:%lld", used ? "," : "", sku, k, q);
        if (w < 0 || (size_t)w >= cap - used) {
            free(buf);
            return NULL;
        }
        used += (size_t)w;
        c += n;
        if (*c == ',')
            c++;
    }
    return buf;
}

/* A record's units in segment k (units.lua): a primary's (parts) its part there, any other
 * record's its quantity; -1 when it does not say. */
static long long record_units(const json_t *j, int k)
{
    const json_t *parts = json_object_get(j, "parts");
    if (parts == NULL) {
        const json_t *q = json_object_get(j, "quantity");
        return json_is_number(q) ? (long long)json_number_value(q) : -1;
    }
    for (size_t i = 0; i < json_array_size(parts); i++) {
        const json_t *p = json_array_get(parts, i);
        const json_t *s = json_object_get(p, "segment"), *q = json_object_get(p, "quantity");
        if (json_is_number(s) && (long long)json_number_value(s) == k && json_is_number(q))
            return (long long)json_number_value(q);
    }
    return -1;
}

/* "YYYY-MM-DDTHH:MM:SS[.mmm]Z" (a record's created_at) as DATETIME text into out; "" when it
 * is not that. */
static void record_time(const char *iso, char out[32])
{
    static const char shape[] = "0000-00-00T00:00:00";
    out[0] = '\0';
    if (iso == NULL)
        return;
    size_t n = strlen(iso);
    if (n < 20 || n > 24 || iso[n - 1] != 'Z' || (n > 20 && iso[19] != '.'))
        return;
    for (size_t i = 0; i + 1 < n; i++) {
        char want = i < 19 ? shape[i] : i == 19 ? '.' : '0';
        if (want == '0' ? (iso[i] < '0' || iso[i] > '9') : iso[i] != want)
            return;
    }
    snprintf(out, 32, "%.*s", (int)(n - 1), iso);
    out[10] = ' ';
}

int sink_segment_records(sink_redis *r, const char *sku, int k, int json_parts,
                         struct sink_db_order **o, size_t *len, size_t *cap, long long *sold,
                         char *err, size_t errlen)
{
    struct seg_keys keys;
    store_seg_keys(sku, k, &keys);
    const char *a[] = {"HGETALL", keys.orders};
    char why[200];
    redisReply *h = sink_redis_cmd(r, keys.orders, 2, a, why, sizeof why);
    if (h == NULL || h->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "HGETALL %s: %s", keys.orders,
                 h && h->type == REDIS_REPLY_ERROR ? h->str : why);
        freeReplyObject(h);
        return -1;
    }
    for (size_t i = 0; i + 1 < h->elements; i += 2) {
        if (*len == *cap) {
            size_t nc = *cap ? *cap * 2 : 64;
            struct sink_db_order *g = realloc(*o, nc * sizeof **o);
            if (g == NULL) {
                freeReplyObject(h);
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            *o = g;
            *cap = nc;
        }
        struct sink_db_order *x = &(*o)[*len];
        memset(x, 0, sizeof *x);
        snprintf(x->order, sizeof x->order, "%s", h->element[i]->str);
        snprintf(x->sku, sizeof x->sku, "%s", sku);
        json_error_t je;
        json_t *j = json_loadb(h->element[i + 1]->str, h->element[i + 1]->len, 0, &je);
        if (sold != NULL) { /* every record's units here, a part's too (cnt's s) */
            const char *st = json_string_value(json_object_get(j, "status"));
            long long u = record_units(j, k);
            if (st != NULL && u > 0 &&
                (strcmp(st, "reserved") == 0 || strcmp(st, "created") == 0 ||
                 strcmp(st, "confirmed") == 0))
                *sold += u;
        }
        if (json_object_get(j, "part_of") != NULL) {
            json_decref(j); /* a part of a multi-segment order: its primary is the order */
            continue;
        }
        const char *st = json_string_value(json_object_get(j, "status"));
        const char *user = json_string_value(json_object_get(j, "user_id"));
        json_t *q = json_object_get(j, "quantity");
        snprintf(x->status, sizeof x->status, "%s", st ? st : "(unreadable)");
        snprintf(x->user, sizeof x->user, "%s", user ? user : "");
        x->quantity = json_is_integer(q) ? (long long)json_integer_value(q) : -1;
        x->segment = k;
        record_time(json_string_value(json_object_get(j, "created_at")), x->created);
        char pt[SINK_PARTS_MAX + 16];
        const json_t *parts = json_object_get(j, "parts");
        if (parts != NULL)
            parts_text(parts, pt, sizeof pt);
        else
            snprintf(pt, sizeof pt, "%d:%lld", k, x->quantity);
        /* its order_items rows: a cart's every SKU from its items, else its own parts */
        const json_t *items = json_object_get(j, "items");
        x->items = items != NULL ? items_text(items) : sku_items_text(sku, pt);
        json_decref(j);
        if (json_parts) {
            /* "k:q,k:q" (checked by parts_text) as the orders table's JSON */
            json_t *arr = json_array();
            for (const char *c = pt; arr != NULL && *c != '\0';) {
                long long seg, uq;
                int used;
                if (sscanf(c, "%lld:%lld%n", &seg, &uq, &used) != 2) {
                    json_decref(arr);
                    arr = NULL;
                    break;
                }
                json_array_append_new(arr, json_pack("{s:I,s:I}", "segment", (json_int_t)seg,
                                                     "quantity", (json_int_t)uq));
                c += used;
                if (*c == ',')
                    c++;
            }
            x->parts = arr ? json_dumps(arr, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
            json_decref(arr);
            if (x->status[0] == '(' || x->quantity < 1 || x->parts == NULL || x->items == NULL) {
                free(x->parts); /* not a record the scripts write: left for reconcile to name */
                free(x->items);
                continue;
            }
            (*len)++;
        } else {
            (*len)++; /* counted before strdup: the free frees it */
            if ((x->parts = strdup(pt)) == NULL) {
                freeReplyObject(h);
                snprintf(err, errlen, "out of memory");
                return -1;
            }
        }
    }
    freeReplyObject(h);
    return 0;
}
