/*
 * sink_reconcile — `inventory-sink reconcile --sku S`: every order record of the SKU in Redis
 * (HGETALL inv:2:{S/k}:orders over k < max(segments, hwm) of its meta) against the orders rows
 * of the SKU in the database. Prints every difference on stdout, one a line:
 *   missing_in_db <order> status=<s> quantity=<q>
 *   missing_in_redis <order> status=<s> quantity=<q>
 *   status <order> redis=<s> db=<s>
 *   quantity <order> redis=<q> db=<q>
 *   user <order> redis=<u> db=<u>
 *   parts <order> redis=<k:q,...> db=<k:q,...>
 *   units <status> redis=<n> db=<n>
 * and a summary on stderr. A multi-segment order is its primary record (the part records, with
 * part_of, are skipped: the database has one row per order); its parts are the record's
 * "parts", a one-segment order's its segment and quantity; a row's parts column NULL (written
 * before the column existed) reads as its segment and quantity. Run it when the sink's lag is 0
 * (inventory_sink_lag_seconds): an entry not yet written shows as a difference.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "log.h"
#include "sink.h"
#include "sink_db.h"
#include "sink_redis.h"
#include "store.h"

static const char *const statuses[] = {"created", "reserved", "confirmed", "expired", "cancelled"};
#define NSTATUS 5

static int status_index(const char *s)
{
    for (int i = 0; i < NSTATUS; i++)
        if (strcmp(s, statuses[i]) == 0)
            return i;
    return -1;
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

/* x->parts := the text of its parts: of the JSON text it holds, or segment:quantity when NULL. */
static int parts_normalise(struct sink_db_order *x)
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

static int by_order_id(const void *a, const void *b)
{
    return strcmp(((const struct sink_db_order *)a)->order,
                  ((const struct sink_db_order *)b)->order);
}

/* Reads the SKU's orders from Redis into a new sorted array. 0, or -1 (message on stderr). */
static int redis_orders(sink_redis *r, const char *sku, struct sink_db_order **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    char meta[STORE_KEY_MAX], err[200];
    store_sku_key(meta, sku, "meta");
    const char *argv[] = {"HMGET", meta, "segments", "hwm"};
    redisReply *m = sink_redis_cmd(r, meta, 4, argv, err, sizeof err);
    if (m == NULL || m->type != REDIS_REPLY_ARRAY || m->elements != 2) {
        fprintf(stderr, "reconcile: HMGET %s: %s\n", meta,
                m && m->type == REDIS_REPLY_ERROR ? m->str : err);
        freeReplyObject(m);
        return -1;
    }
    long long segs = 0;
    for (int i = 0; i < 2; i++)
        if (m->element[i] && m->element[i]->type == REDIS_REPLY_STRING) {
            long long v = strtoll(m->element[i]->str, NULL, 10);
            segs = v > segs ? v : segs;
        }
    freeReplyObject(m);
    if (segs > 4096)
        segs = 4096;
    size_t cap = 64, len = 0;
    struct sink_db_order *o = malloc(cap * sizeof *o);
    if (o == NULL)
        return -1;
    for (int k = 0; k < segs; k++) {
        struct seg_keys keys;
        store_seg_keys(sku, k, &keys);
        const char *a[] = {"HGETALL", keys.orders};
        redisReply *h = sink_redis_cmd(r, keys.orders, 2, a, err, sizeof err);
        if (h == NULL || h->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "reconcile: HGETALL %s: %s\n", keys.orders,
                    h && h->type == REDIS_REPLY_ERROR ? h->str : err);
            freeReplyObject(h);
            sink_db_orders_free(o, len);
            return -1;
        }
        for (size_t i = 0; i + 1 < h->elements; i += 2) {
            if (len == cap) {
                struct sink_db_order *g = realloc(o, cap * 2 * sizeof *o);
                if (g == NULL) {
                    freeReplyObject(h);
                    sink_db_orders_free(o, len);
                    return -1;
                }
                o = g;
                cap *= 2;
            }
            struct sink_db_order *x = &o[len];
            memset(x, 0, sizeof *x);
            snprintf(x->order, sizeof x->order, "%s", h->element[i]->str);
            json_error_t je;
            json_t *j = json_loadb(h->element[i + 1]->str, h->element[i + 1]->len, 0, &je);
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
            char pt[SINK_PARTS_MAX + 16];
            if (json_object_get(j, "parts") != NULL)
                parts_text(json_object_get(j, "parts"), pt, sizeof pt);
            else
                snprintf(pt, sizeof pt, "%d:%lld", k, x->quantity);
            json_decref(j);
            len++; /* counted before strdup: the free below frees it */
            if ((x->parts = strdup(pt)) == NULL) {
                freeReplyObject(h);
                sink_db_orders_free(o, len);
                return -1;
            }
        }
        freeReplyObject(h);
    }
    qsort(o, len, sizeof *o, by_order_id);
    *out = o;
    *n = len;
    return 0;
}

int sink_reconcile(const struct sink_config *cfg)
{
    if (!sink_sku_ok(cfg->sku)) {
        fprintf(stderr, "reconcile: \"%s\" is not a SKU name ([A-Za-z0-9_.:-]{1,64})\n", cfg->sku);
        return 2;
    }
    char err[512];
    sink_redis *r = NULL;
    sink_db *db = NULL;
    struct sink_db_order *ro = NULL, *dbo = NULL;
    size_t nr = 0, nd = 0;
    int rc = 2;
    if (sink_redis_new(cfg->redis, cfg->redis_timeout_ms, &r, err, sizeof err) != 0) {
        fprintf(stderr, "reconcile: Redis: %s\n", err);
        goto out;
    }
    if (redis_orders(r, cfg->sku, &ro, &nr) != 0)
        goto out;
    if (sink_db_open(cfg->db, cfg->db_timeout_s, &db, err, sizeof err) != 0 ||
        sink_db_orders(db, cfg->sku, &dbo, &nd, err, sizeof err) != 0) {
        fprintf(stderr, "reconcile: database: %s\n", err);
        goto out;
    }
    for (size_t i = 0; i < nd; i++)
        if (parts_normalise(&dbo[i]) != 0) {
            fprintf(stderr, "reconcile: out of memory\n");
            goto out;
        }
    long long units_r[NSTATUS + 1] = {0}, units_d[NSTATUS + 1] = {0};
    long diffs = 0;
    size_t i = 0, j = 0;
    while (i < nr || j < nd) {
        int c = i >= nr ? 1 : j >= nd ? -1 : strcmp(ro[i].order, dbo[j].order);
        if (c < 0) {
            printf("missing_in_db %s status=%s quantity=%lld\n", ro[i].order, ro[i].status,
                   ro[i].quantity);
            diffs++;
        } else if (c > 0) {
            printf("missing_in_redis %s status=%s quantity=%lld\n", dbo[j].order, dbo[j].status,
                   dbo[j].quantity);
            diffs++;
        } else {
            if (strcmp(ro[i].status, dbo[j].status) != 0) {
                printf("status %s redis=%s db=%s\n", ro[i].order, ro[i].status, dbo[j].status);
                diffs++;
            }
            if (ro[i].quantity != dbo[j].quantity) {
                printf("quantity %s redis=%lld db=%lld\n", ro[i].order, ro[i].quantity,
                       dbo[j].quantity);
                diffs++;
            }
            if (strcmp(ro[i].user, dbo[j].user) != 0) {
                printf("user %s redis=%s db=%s\n", ro[i].order, ro[i].user, dbo[j].user);
                diffs++;
            }
            if (strcmp(ro[i].parts, dbo[j].parts) != 0) {
                printf("parts %s redis=%s db=%s\n", ro[i].order, ro[i].parts, dbo[j].parts);
                diffs++;
            }
        }
        if (c <= 0) {
            int si = status_index(ro[i].status);
            units_r[si < 0 ? NSTATUS : si] += ro[i].quantity;
            i++;
        }
        if (c >= 0) {
            int si = status_index(dbo[j].status);
            units_d[si < 0 ? NSTATUS : si] += dbo[j].quantity;
            j++;
        }
    }
    for (int s = 0; s <= NSTATUS; s++)
        if (units_r[s] != units_d[s]) {
            printf("units %s redis=%lld db=%lld\n", s < NSTATUS ? statuses[s] : "(other)",
                   units_r[s], units_d[s]);
            diffs++;
        }
    fprintf(stderr,
            "reconcile: SKU %s: %zu orders in Redis, %zu in the database, %ld "
            "difference(s)\n",
            cfg->sku, nr, nd, diffs);
    rc = diffs ? 1 : 0;
out:
    sink_db_orders_free(ro, nr);
    sink_db_orders_free(dbo, nd);
    sink_db_free(db);
    sink_redis_free(r);
    return rc;
}
