/*
 * sink_reconcile — `inventory-sink reconcile --sku S [--repair]`: every order record of the SKU
 * in Redis (HGETALL inv:2:{S/k}:orders over k < max(segments, hwm) of its meta) against the
 * orders rows of the SKU's current layout in the database (rows none of whose order_events
 * carries an older version: a PUT or DELETE reset the older orders out of Redis), and every log
 * stream of the SKU (k < max(segments, hwm, lhwm): dropped segments' logs included) against the
 * sink's consumer group. Prints every difference on stdout, one a line:
 *   missing_in_db <order> status=<s> quantity=<q>
 *   missing_in_redis <order> status=<s> quantity=<q>
 *   status <order> redis=<s> db=<s>
 *   quantity <order> redis=<q> db=<q>
 *   user <order> redis=<u> db=<u>
 *   parts <order> redis=<k:q,...> db=<k:q,...>
 *   units <status> redis=<n> db=<n>
 *   sold segment=<k> redis=<n> db=<n>   (units in live orders of the SKU's segment k: every
 *     record there, a cart's parts whose order is another SKU's too, against order_items
 *     joined with the live orders rows; segment=(other): rows of no current segment)
 *   log_unread <stream> entries=<n> (no group sink: ...)
 *   log_unacknowledged <stream> pending=<n> undelivered=<n>
 * and a summary on stderr. A multi-segment order is its primary record (the part records, with
 * part_of, are skipped: the database has one row per order); its parts are the record's
 * "parts", a one-segment order's its segment and quantity; a row's parts column NULL (written
 * before the column existed) reads as its segment and quantity. Run it when the sink's lag is 0
 * (inventory_sink_lag_seconds): an entry not yet written shows as a difference. --repair first
 * writes the records into the database (sink_db_backfill: missing rows added, statuses moved
 * up), so what Redis has the database has; then compares.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sink.h"
#include "sink_db.h"
#include "sink_records.h"
#include "sink_redis.h"
#include "order_status.h"
#include "orderlog.h"
#include "store.h"

/* The stored statuses (order_status.h), in the table's order. */
#define NSTATUS ORDER_STATUS_N

static int status_index(const char *s)
{
    return order_status_parse(s, strlen(s));
}

static int by_order_id(const void *a, const void *b)
{
    return strcmp(((const struct sink_db_order *)a)->order,
                  ((const struct sink_db_order *)b)->order);
}

/* The SKU's meta: segments, hwm, lhwm and version (0 when missing). 0, or -1 (on stderr). */
static int read_meta(sink_redis *r, const char *sku, long long v[4])
{
    char meta[STORE_KEY_MAX], err[200];
    store_sku_key(meta, sku, "meta");
    const char *argv[] = {"HMGET", meta, "segments", "hwm", "lhwm", "version"};
    redisReply *m = sink_redis_cmd(r, meta, 6, argv, err, sizeof err);
    if (m == NULL || m->type != REDIS_REPLY_ARRAY || m->elements != 4) {
        fprintf(stderr, "reconcile: HMGET %s: %s\n", meta,
                m && m->type == REDIS_REPLY_ERROR ? m->str : err);
        freeReplyObject(m);
        return -1;
    }
    for (int i = 0; i < 4; i++) {
        v[i] = 0;
        if (m->element[i] && m->element[i]->type == REDIS_REPLY_STRING)
            v[i] = strtoll(m->element[i]->str, NULL, 10);
        if (v[i] < 0)
            v[i] = 0;
    }
    freeReplyObject(m);
    for (int i = 0; i < 3; i++)
        if (v[i] > 4096)
            v[i] = 4096;
    return 0;
}

/* Reads the SKU's orders from Redis (segments [0, segs)) into a new sorted array. 0, or -1
 * (message on stderr). json_parts as for sink_segment_records. */
static int redis_orders(sink_redis *r, const char *sku, long long segs, int json_parts,
                        struct sink_db_order **out, size_t *n, long long *sold)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0, len = 0;
    struct sink_db_order *o = NULL;
    char err[300];
    for (int k = 0; k < segs; k++)
        if (sink_segment_records(r, sku, k, json_parts, &o, &len, &cap, sold ? &sold[k] : NULL, err,
                                 sizeof err) != 0) {
            fprintf(stderr, "reconcile: %s\n", err);
            sink_db_orders_free(o, len);
            return -1;
        }
    if (len > 0)
        qsort(o, len, sizeof *o, by_order_id);
    *out = o;
    *n = len;
    return 0;
}

/* The SKU's log streams [0, n) against the sink's group: a stream with entries the group has
 * not acknowledged (or no group at all) holds orders the database may lack. Prints one line
 * per such stream; returns how many, or -1 when Redis could not be read. */
static long log_gaps(sink_redis *r, const char *sku, long long n)
{
    long gaps = 0;
    for (int k = 0; k < n; k++) {
        char key[STORE_KEY_MAX], err[200];
        sink_log_key(key, sizeof key, sku, k);
        const char *xl[] = {"XLEN", key};
        redisReply *l = sink_redis_cmd(r, key, 2, xl, err, sizeof err);
        if (l == NULL || l->type != REDIS_REPLY_INTEGER) {
            fprintf(stderr, "reconcile: XLEN %s: %s\n", key,
                    l && l->type == REDIS_REPLY_ERROR ? l->str : err);
            freeReplyObject(l);
            return -1;
        }
        long long len = l->integer;
        freeReplyObject(l);
        if (len == 0)
            continue;
        const char *xi[] = {"XINFO", "GROUPS", key};
        redisReply *g = sink_redis_cmd(r, key, 3, xi, err, sizeof err);
        if (g == NULL || g->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "reconcile: XINFO GROUPS %s: %s\n", key,
                    g && g->type == REDIS_REPLY_ERROR ? g->str : err);
            freeReplyObject(g);
            return -1;
        }
        const redisReply *ours = NULL;
        for (size_t i = 0; i < g->elements; i++) {
            const redisReply *e = g->element[i];
            for (size_t j = 0; e && e->type == REDIS_REPLY_ARRAY && j + 1 < e->elements; j += 2)
                if (e->element[j]->type == REDIS_REPLY_STRING &&
                    strcmp(e->element[j]->str, "name") == 0 &&
                    e->element[j + 1]->type == REDIS_REPLY_STRING &&
                    strcmp(e->element[j + 1]->str, ORDERLOG_GROUP) == 0)
                    ours = e;
        }
        if (ours == NULL) {
            printf("log_unread %s entries=%lld (no group %s: no sink has read it)\n", key, len,
                   ORDERLOG_GROUP);
            gaps++;
            freeReplyObject(g);
            continue;
        }
        long long pending = 0;
        const char *ld = "0-0";
        for (size_t j = 0; j + 1 < ours->elements; j += 2) {
            const char *name = ours->element[j]->str;
            const redisReply *v = ours->element[j + 1];
            if (strcmp(name, "pending") == 0 && v->type == REDIS_REPLY_INTEGER)
                pending = v->integer;
            else if (strcmp(name, "last-delivered-id") == 0 && v->type == REDIS_REPLY_STRING)
                ld = v->str;
        }
        char from[64];
        snprintf(from, sizeof from, "(%s", ld);
        const char *xr[] = {"XRANGE", key, from, "+", "COUNT", "100000"};
        redisReply *x = sink_redis_cmd(r, key, 6, xr, err, sizeof err);
        long long undelivered = x && x->type == REDIS_REPLY_ARRAY ? (long long)x->elements : -1;
        freeReplyObject(x);
        if (undelivered < 0) {
            fprintf(stderr, "reconcile: XRANGE %s: %s\n", key, err);
            freeReplyObject(g);
            return -1;
        }
        if (pending > 0 || undelivered > 0) {
            printf("log_unacknowledged %s pending=%lld undelivered=%lld\n", key, pending,
                   undelivered);
            gaps++;
        }
        freeReplyObject(g);
    }
    return gaps;
}

/* --repair: Redis's order records of the SKU's layout into the database (sink_db_backfill).
 * 0, or -1 (on stderr). */
static int repair(sink_redis *r, sink_db *db, const char *sku, long long segs)
{
    struct sink_db_order *o = NULL;
    size_t n = 0;
    if (redis_orders(r, sku, segs, 1, &o, &n, NULL) != 0)
        return -1;
    char err[512];
    long long written = 0;
    int rc = 0;
    for (size_t off = 0; off < n && rc == 0; off += 500) {
        long long w = 0;
        size_t m = n - off < 500 ? n - off : 500;
        if (sink_db_backfill(db, o + off, m, &w, err, sizeof err) != 0) {
            fprintf(stderr, "reconcile: repair: %s\n", err);
            rc = -1;
        }
        written += w;
    }
    if (rc == 0)
        fprintf(stderr,
                "reconcile: repair: %zu order records of SKU %s written into the database "
                "(%lld affected rows)\n",
                n, sku, written);
    sink_db_orders_free(o, n);
    return rc;
}

/* Prints a line per segment whose units sold differ (Redis's records r[k], the database's
 * order_items d[k]; beyond: the database's units in no segment below segs). Returns how many. */
static long sold_diffs(const long long *r, const long long *d, long long segs, long long beyond)
{
    long n = 0;
    for (long long k = 0; k < segs; k++)
        if (r[k] != d[k]) {
            printf("sold segment=%lld redis=%lld db=%lld\n", k, r[k], d[k]);
            n++;
        }
    if (beyond != 0) {
        printf("sold segment=(other) redis=0 db=%lld\n", beyond);
        n++;
    }
    return n;
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
    long long *sold_r = NULL, *sold_d = NULL, sold_beyond = 0;
    int rc = 2;
    if (sink_redis_new(cfg->redis, cfg->redis_timeout_ms, &r, err, sizeof err) != 0) {
        fprintf(stderr, "reconcile: Redis: %s\n", err);
        goto out;
    }
    long long meta[4]; /* segments, hwm, lhwm, version */
    if (read_meta(r, cfg->sku, meta) != 0)
        goto out;
    long long segs = meta[0] > meta[1] ? meta[0] : meta[1];
    long long logs = segs > meta[2] ? segs : meta[2];
    if (sink_db_open(cfg->db, cfg->db_timeout_s, &db, err, sizeof err) != 0) {
        fprintf(stderr, "reconcile: database: %s\n", err);
        goto out;
    }
    if (cfg->repair && repair(r, db, cfg->sku, segs) != 0)
        goto out;
    /* units sold per segment: every record's (a cart's parts here too), against order_items */
    sold_r = calloc((size_t)segs + 1, sizeof *sold_r);
    sold_d = calloc((size_t)segs + 1, sizeof *sold_d);
    if (sold_r == NULL || sold_d == NULL) {
        fprintf(stderr, "reconcile: out of memory\n");
        goto out;
    }
    if (redis_orders(r, cfg->sku, segs, 0, &ro, &nr, sold_r) != 0)
        goto out;
    if (sink_db_orders(db, cfg->sku, meta[3], &dbo, &nd, err, sizeof err) != 0 ||
        sink_db_sold(db, cfg->sku, meta[3], sold_d, (int)segs, &sold_beyond, err, sizeof err) !=
            0) {
        fprintf(stderr, "reconcile: database: %s\n", err);
        goto out;
    }
    long gaps = log_gaps(r, cfg->sku, logs);
    if (gaps < 0)
        goto out;
    for (size_t i = 0; i < nd; i++)
        if (sink_parts_normalise(&dbo[i]) != 0) {
            fprintf(stderr, "reconcile: out of memory\n");
            goto out;
        }
    long long units_r[NSTATUS + 1] = {0}, units_d[NSTATUS + 1] = {0};
    long diffs = gaps;
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
            printf("units %s redis=%lld db=%lld\n",
                   s < NSTATUS ? order_status_name((enum order_status)s) : "(other)", units_r[s],
                   units_d[s]);
            diffs++;
        }
    diffs += sold_diffs(sold_r, sold_d, segs, sold_beyond);
    fprintf(stderr,
            "reconcile: SKU %s: %zu orders in Redis, %zu in the database, %ld "
            "difference(s)\n",
            cfg->sku, nr, nd, diffs);
    rc = diffs ? 1 : 0;
out:
    free(sold_r);
    free(sold_d);
    sink_db_orders_free(ro, nr);
    sink_db_orders_free(dbo, nd);
    sink_db_free(db);
    sink_redis_free(r);
    return rc;
}
