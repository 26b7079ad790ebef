/*
 * SKU handlers: PUT /api/v1/skus/{sku}, GET, POST .../restock, DELETE. A PUT bumps the SKU's
 * version first (inv:{S}:meta) and then resets each segment to that version; an order that
 * began under the old version fails its version check at commit and is retried under the new
 * one (order.c), so a PUT is safe while orders are in flight.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "log.h"
#include "metrics.h"
#include "skucache.h"
#include "stock.h"
#include "store.h"
#include "validate.h"

int stock_sku_param(const struct request *req, struct response *res, char *sku)
{
    if (!req->param || !validate_sku(req->param, req->param_len)) {
        response_error(res, ERROR_INVALID_REQUEST,
                       "sku: must be 1..64 characters of [A-Za-z0-9_.:-]");
        return -1;
    }
    memcpy(sku, req->param, req->param_len);
    sku[req->param_len] = '\0';
    return 0;
}

/* Answers 503 for a Redis failure. */
static void redis_down(struct response *res)
{
    log_msg(CONFIG_LOG_WARN, "redis_error", "%s", lc_errmsg());
    metrics_redis_error();
    response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
}

/* The fixed-width text of v (for script arguments). */
static void i64s(char *buf, int64_t v)
{
    snprintf(buf, 24, "%" PRId64, v);
}

int stock_status(struct app *app, const char *sku, json_t **out)
{
    *out = NULL;
    int64_t version;
    int nseg;
    int found = store_sku_meta(app->store, sku, &version, &nseg);
    if (found <= 0)
        return found;
    lc_client *c = store_client(app->store);
    if (!c)
        return -1;
    int n = nseg * 2;
    struct seg_keys *keys = malloc(sizeof(*keys) * (size_t)nseg);
    int *argcs = malloc(sizeof(*argcs) * (size_t)n);
    const char ***cmds = malloc(sizeof(*cmds) * (size_t)n);
    const char **flat = malloc(sizeof(*flat) * 5 * (size_t)n);
    redisReply **rep = calloc((size_t)n, sizeof(*rep));
    int rc = -1;
    if (!keys || !argcs || !cmds || !flat || !rep)
        goto out;
    for (int k = 0; k < nseg; k++) {
        store_seg_keys(sku, k, &keys[k]);
        const char **a = flat + 10 * k;
        a[0] = "GET";
        a[1] = keys[k].stock;
        a[5] = "HMGET";
        a[6] = keys[k].cnt;
        a[7] = "t";
        a[8] = "s";
        a[9] = "o";
        cmds[2 * k] = a;
        argcs[2 * k] = 2;
        cmds[2 * k + 1] = a + 5;
        argcs[2 * k + 1] = 5;
    }
    if (lc_client_pipeline(c, n, argcs, (const char **const *)cmds, NULL, rep) != LC_OK)
        goto out;
    json_t *segs = json_array();
    long long total = 0, remaining = 0, sold = 0, orders = 0;
    for (int k = 0; k < nseg; k++) {
        long long rem = store_reply_int(rep[2 * k], 0);
        const redisReply *h = rep[2 * k + 1];
        long long t = 0, s = 0, o = 0;
        if (h && h->type == REDIS_REPLY_ARRAY && h->elements == 3) {
            t = store_reply_int(h->element[0], 0);
            s = store_reply_int(h->element[1], 0);
            o = store_reply_int(h->element[2], 0);
        }
        total += t;
        remaining += rem;
        sold += s;
        orders += o;
        json_array_append_new(segs, json_pack("{s:i, s:I, s:I}", "index", k, "remaining",
                                              (json_int_t)rem, "sold", (json_int_t)s));
    }
    *out = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:b, s:o}", "sku", sku, "version",
                     (json_int_t)version, "stock_total", (json_int_t)total, "remaining",
                     (json_int_t)remaining, "sold", (json_int_t)sold, "orders",
                     (json_int_t)orders, "sold_out", remaining == 0, "segments", segs);
    rc = *out ? 1 : -1;
out:
    if (rep)
        store_free_replies(rep, n);
    free(rep);
    free(flat);
    free(cmds);
    free(argcs);
    free(keys);
    return rc;
}

/* Runs one segment script over segments [0, nseg) of sku with 2 or 3 of the segment's keys
 * (per `which`) and args from argfn. 0 or -1 (Redis error or a script error reply). */
static int for_segments(struct app *app, enum store_script id, const char *sku, int nseg,
                        int nkeys, const char *const *argv_per_seg, int nargs)
{
    struct seg_keys *keys = malloc(sizeof(*keys) * (size_t)nseg);
    const char **kflat = calloc((size_t)nseg * (size_t)nkeys, sizeof(*kflat));
    redisReply **rep = calloc((size_t)nseg, sizeof(*rep));
    int rc = -1;
    if (!keys || !kflat || !rep)
        goto out;
    for (int k = 0; k < nseg; k++) {
        store_seg_keys(sku, k, &keys[k]);
        const char *all[5] = {keys[k].stock, keys[k].sver, keys[k].cnt, keys[k].orders,
                              keys[k].idem};
        for (int j = 0; j < nkeys; j++)
            kflat[k * nkeys + j] = all[j];
    }
    if (store_run_many(app->store, id, nseg, nkeys, kflat, nargs, argv_per_seg, rep) != 0)
        goto out;
    rc = 0;
    for (int k = 0; k < nseg; k++)
        if (!rep[k] || rep[k]->type == REDIS_REPLY_ERROR)
            rc = -1;
out:
    if (rep)
        store_free_replies(rep, nseg);
    free(rep);
    free(kflat);
    free(keys);
    return rc;
}

/* Deletes every key of segments [from, to) of sku. 0 or -1. */
static int delete_segments(struct app *app, const char *sku, int from, int to)
{
    lc_client *c = store_client(app->store);
    if (!c)
        return -1;
    for (int k = from; k < to; k++) {
        struct seg_keys sk;
        store_seg_keys(sku, k, &sk);
        const char *argv[6] = {"DEL", sk.stock, sk.sver, sk.cnt, sk.orders, sk.idem};
        if (lc_client_command(c, 6, argv, NULL, NULL) != LC_OK)
            return -1;
    }
    return 0;
}

void stock_put(struct app *app, const struct request *req, struct response *res)
{
    char sku[VALIDATE_SKU_MAX + 1];
    if (stock_sku_param(req, res, sku) != 0)
        return;
    struct validate_put_sku body;
    struct validate_error verr;
    if (validate_put_sku_body(req->body, req->body_len, &body, &verr) != 0) {
        response_error(res, verr.code, verr.message);
        return;
    }
    int nseg = (int)body.segments;
    char meta[STORE_KEY_MAX], ver[STORE_KEY_MAX], segs[24];
    store_sku_key(meta, sku, "meta");
    store_sku_key(ver, sku, "ver");
    i64s(segs, nseg);
    const char *keys[2] = {meta, ver};
    const char *args[1] = {segs};
    redisReply *r = NULL;
    if (store_run_many(app->store, SCRIPT_PUT_META, 1, 2, keys, 1, args, &r) != 0 || !r ||
        r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
        store_free_replies(&r, 1);
        redis_down(res);
        return;
    }
    int64_t version = r->element[0]->integer;
    int existed = (int)r->element[1]->integer;
    int old_segments = (int)r->element[2]->integer;
    store_free_replies(&r, 1);

    /* Spread the stock evenly; the first (stock % nseg) segments get one more unit. */
    char(*argbuf)[2][24] = malloc(sizeof(*argbuf) * (size_t)nseg);
    const char **argv = malloc(sizeof(*argv) * 2 * (size_t)nseg);
    int rc = -1;
    if (argbuf && argv) {
        for (int k = 0; k < nseg; k++) {
            i64s(argbuf[k][0], version);
            i64s(argbuf[k][1], body.stock / nseg + (k < body.stock % nseg ? 1 : 0));
            argv[2 * k] = argbuf[k][0];
            argv[2 * k + 1] = argbuf[k][1];
        }
        rc = for_segments(app, SCRIPT_SEG_RESET, sku, nseg, 5, argv, 2);
    }
    free(argbuf);
    free(argv);
    if (rc == 0 && old_segments > nseg)
        rc = delete_segments(app, sku, nseg, old_segments);
    if (rc != 0) {
        redis_down(res);
        return;
    }
    skucache_set_layout(app->cache, sku, version, nseg);
    response_json(res, existed ? 200 : 201,
                  json_pack("{s:s, s:I, s:i, s:I}", "sku", sku, "stock", (json_int_t)body.stock,
                            "segments", nseg, "version", (json_int_t)version));
}

void stock_get(struct app *app, const struct request *req, struct response *res)
{
    char sku[VALIDATE_SKU_MAX + 1];
    if (stock_sku_param(req, res, sku) != 0)
        return;
    json_t *st;
    int found = stock_status(app, sku, &st);
    if (found < 0)
        redis_down(res);
    else if (found == 0)
        response_error(res, ERROR_UNKNOWN_SKU, "no such sku");
    else
        response_json(res, 200, st);
}

void stock_restock(struct app *app, const struct request *req, struct response *res)
{
    char sku[VALIDATE_SKU_MAX + 1];
    if (stock_sku_param(req, res, sku) != 0)
        return;
    struct validate_restock body;
    struct validate_error verr;
    if (validate_restock_body(req->body, req->body_len, &body, &verr) != 0) {
        response_error(res, verr.code, verr.message);
        return;
    }
    int64_t version;
    int nseg;
    int found = store_sku_meta(app->store, sku, &version, &nseg);
    if (found < 0) {
        redis_down(res);
        return;
    }
    if (found == 0) {
        response_error(res, ERROR_UNKNOWN_SKU, "no such sku");
        return;
    }
    /* Spread like a PUT, so every segment can serve again. */
    char(*argbuf)[2][24] = malloc(sizeof(*argbuf) * (size_t)nseg);
    const char **argv = malloc(sizeof(*argv) * 2 * (size_t)nseg);
    int rc = -1;
    if (argbuf && argv) {
        for (int k = 0; k < nseg; k++) {
            i64s(argbuf[k][0], version);
            i64s(argbuf[k][1], body.quantity / nseg + (k < body.quantity % nseg ? 1 : 0));
            argv[2 * k] = argbuf[k][0];
            argv[2 * k + 1] = argbuf[k][1];
        }
        rc = for_segments(app, SCRIPT_RESTOCK, sku, nseg, 3, argv, 2);
    }
    free(argbuf);
    free(argv);
    skucache_forget(app->cache, sku);
    if (rc != 0) {
        redis_down(res);
        return;
    }
    json_t *st;
    found = stock_status(app, sku, &st);
    if (found < 0)
        redis_down(res);
    else if (found == 0)
        response_error(res, ERROR_UNKNOWN_SKU, "no such sku");
    else
        response_json(res, 200, st);
}

void stock_delete(struct app *app, const struct request *req, struct response *res)
{
    char sku[VALIDATE_SKU_MAX + 1];
    if (stock_sku_param(req, res, sku) != 0)
        return;
    int64_t version;
    int nseg;
    int found = store_sku_meta(app->store, sku, &version, &nseg);
    if (found < 0) {
        redis_down(res);
        return;
    }
    if (found == 0) {
        response_error(res, ERROR_UNKNOWN_SKU, "no such sku");
        return;
    }
    lc_client *c = store_client(app->store);
    char meta[STORE_KEY_MAX];
    store_sku_key(meta, sku, "meta");
    const char *argv[2] = {"DEL", meta};
    if (!c || lc_client_command(c, 2, argv, NULL, NULL) != LC_OK ||
        delete_segments(app, sku, 0, nseg) != 0) {
        redis_down(res);
        return;
    }
    skucache_forget(app->cache, sku);
    res->status = 204;
}
