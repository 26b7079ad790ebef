/*
 * The one-script status read (status_read.h). Each read is a struct quick, owned by itself
 * from status_read_async to its answer or its hand-over to the exact read.
 */
#include "status_read.h"

#include <stdio.h>
#include <stdlib.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "app.h"
#include "areq.h"
#include "config.h"
#include "layout.h"
#include "rules.h"
#include "skucache.h"
#include "store.h"
#include "store_scripts.h"
#include "validate.h"

struct quick {
    struct areq *ar;
    char sku[VALIDATE_SKU_MAX + 1];
    exact_read_fn done;
    void *arg;
    int tries; /* layout-only reads (the segment count learnt) */
};

/* Answers the caller and frees q. */
static void quick_end(struct quick *q, int rc, json_t *status, const char *why)
{
    exact_read_fn done = q->done;
    void *arg = q->arg;
    free(q);
    done(arg, rc, status, why, 0);
}

/* The slow way: the exact read answers the caller. */
static void quick_exact(struct quick *q)
{
    struct areq *ar = q->ar;
    char sku[VALIDATE_SKU_MAX + 1];
    snprintf(sku, sizeof(sku), "%s", q->sku);
    exact_read_fn done = q->done;
    void *arg = q->arg;
    free(q);
    exact_read_async(ar, sku, NULL, done, arg);
}

static void quick_script(struct quick *q, int n);

static void on_script(lc_status st, const redisReply *rp, const char *errstr, void *arg)
{
    struct quick *q = arg;
    if (st != LC_OK || !rp || rp->type != REDIS_REPLY_ARRAY || rp->elements < 1) {
        quick_end(q, -1, NULL, st != LC_OK ? errstr : "unexpected reply from Redis");
        return;
    }
    struct layout l;
    int found = layout_parse_reply(rp->element[0], &l);
    if (found < 0) {
        quick_end(q, -1, NULL, "unexpected reply from Redis");
        return;
    }
    if (layout_unsettled(&l)) {
        quick_exact(q); /* a PUT, DELETE or restock to complete first */
        return;
    }
    if (found == 0) {
        quick_end(q, 0, NULL, NULL);
        return;
    }
    int n = (int)rp->elements - 1;
    if (n != l.segments) {
        if (n == 0 && q->tries++ == 0) /* the first read of the SKU, or a new layout */
            quick_script(q, l.segments);
        else
            quick_exact(q); /* a segment at another version: the exact read heals */
        return;
    }
    struct store_item *items = calloc((size_t)n, sizeof(*items));
    if (!items) {
        quick_end(q, -1, NULL, "out of memory");
        return;
    }
    for (int k = 0; k < n; k++)
        store_item_of(rp->element[1 + k], &items[k]);
    json_t *out = NULL;
    int off = 0;
    int rc = exact_status_json(q->sku, &l, items, n, &out, &off);
    free(items);
    if (rc == 1)
        quick_end(q, 1, out, NULL);
    else
        quick_exact(q);
}

/* lua/status_read.lua over n segments (0: the layout alone, to learn n). */
static void quick_script(struct quick *q, int n)
{
    if (n < 0 || n > STORE_SEGMENTS_MAX) {
        quick_exact(q);
        return;
    }
    struct seg_keys *sk = calloc((size_t)n + 1, sizeof(*sk));
    const char **keys = calloc(2 + 3 * (size_t)n, sizeof(*keys));
    char meta[STORE_KEY_MAX], rst[STORE_KEY_MAX];
    if (!sk || !keys) {
        free(sk);
        free(keys);
        quick_end(q, -1, NULL, "out of memory");
        return;
    }
    store_sku_key(meta, q->sku, "meta");
    store_sku_key(rst, q->sku, "rst");
    keys[0] = meta;
    keys[1] = rst;
    for (int k = 0; k < n; k++) {
        store_seg_keys(q->sku, k, &sk[k]);
        keys[2 + 3 * k] = sk[k].stock;
        keys[3 + 3 * k] = sk[k].sver;
        keys[4 + 3 * k] = sk[k].cnt;
    }
    const char *fields[RULES_N];
    for (int i = 0; i < RULES_N; i++)
        fields[i] = rules_script_field(i);
    /* lockcore copies keys and args when the call starts */
    store_script_async(q->ar->app->store, q->ar->lc, q->ar, SCRIPT_STATUS_READ, 2 + 3 * n, keys,
                       RULES_N, fields, on_script, q);
    free(sk);
    free(keys);
}

void status_read_async(struct areq *ar, const char *sku, int segments, exact_read_fn done,
                       void *arg)
{
    if (config_redis_cluster(&ar->app->cfg)) {
        exact_read_async(ar, sku, NULL, done, arg);
        return;
    }
    struct quick *q = calloc(1, sizeof(*q));
    if (!q) {
        done(arg, -1, NULL, "out of memory", 0);
        return;
    }
    *q = (struct quick){.ar = ar, .done = done, .arg = arg};
    snprintf(q->sku, sizeof(q->sku), "%s", sku);
    if (segments <= 0) { /* the orders' cache may know it */
        struct sku_view v;
        skucache_get(ar->app->cache, sku, &v);
        segments = v.segments;
    }
    quick_script(q, segments);
}
