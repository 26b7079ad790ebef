/*
 * SKU handlers: PUT /api/v1/skus/{sku}, GET, POST .../restock, DELETE.
 *
 * PUT, DELETE and restock write their intent to the SKU's meta in one atomic step and then
 * settle the segments (layout.c); an interrupted one is completed by whoever next meets it. An
 * order that began under an older version fails its version check at commit and is retried
 * under the new one (order.c), so a PUT is safe while orders are in flight. PUT and restock
 * take an Idempotency-Key: the answer is stored with it and a retry gets it back, applying
 * nothing twice.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "layout.h"
#include "log.h"
#include "metrics.h"
#include "skucache.h"
#include "stock.h"
#include "store.h"
#include "validate.h"

/* Admin Idempotency-Keys (and restock results) are kept this long. */
#define STOCK_KEY_TTL_MS "86400000"

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

/* The admin Idempotency-Key of req, checked: 0 with *key (NULL when none) or -1 with the 400
 * in res. claim gets the key's Redis name for op ("put", "restock"). */
static int admin_key(const struct request *req, struct response *res, const char *sku,
                     const char *op, const char **key, char *claim, size_t len)
{
    *key = req->idempotency_key;
    claim[0] = '\0';
    if (!*key)
        return 0;
    if (!validate_printable(*key, strlen(*key))) {
        response_error(res, ERROR_INVALID_REQUEST,
                       "Idempotency-Key: must be 1..128 printable ASCII characters");
        return -1;
    }
    char base[STORE_KEY_MAX];
    char suffix[32];
    snprintf(suffix, sizeof(suffix), "aidem:%s:", op);
    store_sku_key(base, sku, suffix);
    snprintf(claim, len, "%s%s", base, *key);
    return 0;
}

/* Fills res from a stored answer "<status> <json body>". 0, or -1 when it is not one. */
static int stored_answer(struct response *res, const char *stored)
{
    char *end;
    long status = strtol(stored, &end, 10);
    if (end == stored || *end != ' ' || status < 200 || status > 599)
        return -1;
    json_t *body = json_loads(end + 1, 0, NULL);
    if (!body)
        return -1;
    response_json(res, (int)status, body);
    return 0;
}

/* Replaces the admin key's value expected by the final answer in res (best effort: a failure
 * leaves the key pending, and a retry with it then finishes the same restock again). */
static void store_answer(struct app *app, const char *claim, const char *expected,
                         const struct response *res)
{
    char *body = res->body ? json_dumps(res->body, JSON_COMPACT) : NULL;
    if (!body)
        return;
    size_t len = strlen(body) + 8;
    char *value = malloc(len);
    if (value) {
        snprintf(value, len, "%d %s", res->status, body);
        const char *keys[1] = {claim};
        const char *args[2] = {expected, value};
        redisReply *r = NULL;
        store_run_many(app->store, SCRIPT_IDEM_SWAP, 1, 1, keys, 2, args, &r);
        store_free_replies(&r, 1);
    }
    free(value);
    free(body);
}

/* Reads every segment of the current layout with SEG_STATUS (one atomic read per segment, one
 * pipelined round trip) into a status object. 1 done, 0 a segment is not at l's version (a PUT
 * raced: read the layout again), -1 Redis error. */
static int read_segments(struct app *app, const char *sku, const struct layout *l, json_t **out)
{
    int nseg = l->segments;
    struct seg_keys *keys = malloc(sizeof(*keys) * (size_t)nseg);
    const char **kflat = malloc(sizeof(*kflat) * 3 * (size_t)nseg);
    redisReply **rep = calloc((size_t)nseg, sizeof(*rep));
    int rc = -1;
    if (!keys || !kflat || !rep)
        goto out;
    for (int k = 0; k < nseg; k++) {
        store_seg_keys(sku, k, &keys[k]);
        kflat[3 * k] = keys[k].stock;
        kflat[3 * k + 1] = keys[k].sver;
        kflat[3 * k + 2] = keys[k].cnt;
    }
    if (store_run_many(app->store, SCRIPT_SEG_STATUS, nseg, 3, kflat, 0, NULL, rep) != 0)
        goto out;
    long long total = 0, remaining = 0, sold = 0, orders = 0;
    for (int k = 0; k < nseg; k++)
        if (!rep[k] || rep[k]->type != REDIS_REPLY_ARRAY || rep[k]->elements != 5)
            goto out;
    rc = 0;
    for (int k = 0; k < nseg; k++)
        if (store_reply_int(rep[k]->element[1], 0) != l->version)
            goto out;
    json_t *segs = json_array();
    for (int k = 0; k < nseg; k++) {
        redisReply **e = rep[k]->element;
        long long rem = store_reply_int(e[0], 0), t = store_reply_int(e[2], 0),
                  s = store_reply_int(e[3], 0), o = store_reply_int(e[4], 0);
        total += t;
        remaining += rem;
        sold += s;
        orders += o;
        json_array_append_new(segs, json_pack("{s:i, s:I, s:I}", "index", k, "remaining",
                                              (json_int_t)rem, "sold", (json_int_t)s));
    }
    *out = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:b, s:o}", "sku", sku, "version",
                     (json_int_t)l->version, "stock_total", (json_int_t)total, "remaining",
                     (json_int_t)remaining, "sold", (json_int_t)sold, "orders",
                     (json_int_t)orders, "sold_out", remaining == 0, "segments", segs);
    rc = *out ? 1 : -1;
out:
    if (rep)
        store_free_replies(rep, nseg);
    free(rep);
    free(kflat);
    free(keys);
    return rc;
}

int stock_status(struct app *app, const char *sku, json_t **out)
{
    *out = NULL;
    /* Settled first, so the answer is one layout's, complete; a PUT racing the read shows as a
     * segment of another version, and the read starts again. */
    for (int attempt = 0; attempt < 5; attempt++) {
        struct layout l;
        int found = layout_read_settled(app->store, sku, &l);
        if (found <= 0)
            return found;
        int rc = read_segments(app, sku, &l, out);
        if (rc != 0)
            return rc;
    }
    return -1;
}

/* The answer of a PUT: the stored "<status> <body>" of the meta script. */
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
    const char *key;
    char claim[STORE_KEY_MAX + VALIDATE_PRINTABLE_MAX + 8];
    if (admin_key(req, res, sku, "put", &key, claim, sizeof(claim)) != 0)
        return;
    char meta[STORE_KEY_MAX], ver[STORE_KEY_MAX], rst[STORE_KEY_MAX], segs[24], stock[24];
    store_sku_key(meta, sku, "meta");
    store_sku_key(ver, sku, "ver");
    store_sku_key(rst, sku, "rst");
    snprintf(segs, sizeof(segs), "%" PRId64, body.segments);
    snprintf(stock, sizeof(stock), "%" PRId64, body.stock);
    const char *keys[4] = {meta, ver, rst, key ? claim : meta};
    const char *args[5] = {segs, stock, sku, key ? "1" : "0", STOCK_KEY_TTL_MS};
    redisReply *r = NULL;
    if (store_run_many(app->store, SCRIPT_PUT_META, 1, 4, keys, 5, args, &r) != 0 || !r ||
        r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_STRING) {
        store_free_replies(&r, 1);
        redis_down(res);
        return;
    }
    int replay = r->element[0]->integer == 0;
    char answer[512];
    snprintf(answer, sizeof(answer), "%s", r->element[1]->str);
    store_free_replies(&r, 1);
    skucache_forget(app->cache, sku);
    /* Roll the layout out (a replay too: the first try may have been cut off before). */
    struct layout l;
    if (layout_read_settled(app->store, sku, &l) < 0) {
        redis_down(res);
        return;
    }
    if (stored_answer(res, answer) != 0) {
        response_error(res, ERROR_INVALID_REQUEST,
                       "Idempotency-Key: already used by another kind of request");
        return;
    }
    log_msg(CONFIG_LOG_INFO, "sku_put", "sku %s: %s segments, stock %s%s", sku, segs, stock,
            replay ? " (Idempotency-Key replay)" : "");
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

/* Settles sku (which applies restock rid with everything else pending) and answers: 200 with
 * the status and "added" when rid reached every segment, 409 sku_changed when a PUT or DELETE
 * came first, 503 when Redis failed (the restock stays pending: a retry with the same key, or
 * the next reader, completes it). */
static void finish_restock(struct app *app, const char *sku, long long rid, long long units,
                           struct response *res)
{
    struct layout l;
    if (layout_read_settled(app->store, sku, &l) < 0) {
        redis_down(res);
        return;
    }
    lc_client *c = store_client(app->store);
    char rres[STORE_KEY_MAX], suffix[40];
    snprintf(suffix, sizeof(suffix), "rres:%lld", rid);
    store_sku_key(rres, sku, suffix);
    const char *argv[2] = {"EXISTS", rres};
    redisReply *r = NULL;
    if (!c || lc_client_command(c, 2, argv, NULL, &r) != LC_OK || r->type != REDIS_REPLY_INTEGER) {
        if (r)
            freeReplyObject(r);
        redis_down(res);
        return;
    }
    int done = r->integer == 1;
    freeReplyObject(r);
    int still_pending = 0;
    for (int i = 0; i < l.nrestocks; i++)
        still_pending |= l.restocks[i].rid == rid;
    if (!done && still_pending) {
        redis_down(res);
        return;
    }
    if (!done) {
        response_error(res, ERROR_SKU_CHANGED,
                       "the SKU was re-initialised or deleted while restocking: nothing was "
                       "added to its current layout");
        return;
    }
    json_t *st;
    int found = stock_status(app, sku, &st);
    if (found < 0) {
        redis_down(res);
        return;
    }
    if (found == 0) {
        response_error(res, ERROR_SKU_CHANGED,
                       "the SKU was deleted after the restock: nothing of it is left");
        return;
    }
    json_object_set_new(st, "added", json_integer((json_int_t)units));
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
    const char *key;
    char claim[STORE_KEY_MAX + VALIDATE_PRINTABLE_MAX + 8];
    if (admin_key(req, res, sku, "restock", &key, claim, sizeof(claim)) != 0)
        return;
    char meta[STORE_KEY_MAX], rst[STORE_KEY_MAX], units[24];
    store_sku_key(meta, sku, "meta");
    store_sku_key(rst, sku, "rst");
    snprintf(units, sizeof(units), "%" PRId64, body.quantity);
    const char *keys[3] = {meta, rst, key ? claim : meta};
    const char *args[3] = {units, key ? "1" : "0", STOCK_KEY_TTL_MS};
    redisReply *r = NULL;
    if (store_run_many(app->store, SCRIPT_RESTOCK_BEGIN, 1, 3, keys, 3, args, &r) != 0 || !r ||
        r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        store_free_replies(&r, 1);
        redis_down(res);
        return;
    }
    long long code = r->element[0]->integer, rid = 0, qty = body.quantity;
    char stored[1024] = "";
    if (code == 1 && r->elements >= 2)
        rid = store_reply_int(r->element[1], 0);
    else if (code == 0 && r->elements >= 2 && r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(stored, sizeof(stored), "%s", r->element[1]->str);
    store_free_replies(&r, 1);
    skucache_forget(app->cache, sku);
    if (code == -1) {
        response_error(res, ERROR_UNKNOWN_SKU, "no such sku");
        return;
    }
    char pending[64] = "";
    if (code == 0) {
        /* A replay: the stored answer, or a restock the first try left running. */
        if (sscanf(stored, "P %lld %lld", &rid, &qty) != 2) {
            if (stored_answer(res, stored) != 0)
                response_error(res, ERROR_INVALID_REQUEST,
                               "Idempotency-Key: already used by another kind of request");
            return;
        }
        snprintf(pending, sizeof(pending), "%s", stored);
    } else if (key) {
        snprintf(pending, sizeof(pending), "P %lld %lld", rid, qty);
    }
    finish_restock(app, sku, rid, qty, res);
    if (key && (res->status == 200 || res->status == 409))
        store_answer(app, claim, pending, res);
    if (res->status == 200)
        log_msg(CONFIG_LOG_INFO, "sku_restock", "sku %s: %lld units added (restock %lld)", sku,
                qty, rid);
}

void stock_delete(struct app *app, const struct request *req, struct response *res)
{
    char sku[VALIDATE_SKU_MAX + 1];
    if (stock_sku_param(req, res, sku) != 0)
        return;
    char meta[STORE_KEY_MAX], ver[STORE_KEY_MAX], rst[STORE_KEY_MAX];
    store_sku_key(meta, sku, "meta");
    store_sku_key(ver, sku, "ver");
    store_sku_key(rst, sku, "rst");
    const char *keys[3] = {meta, ver, rst};
    redisReply *r = NULL;
    if (store_run_many(app->store, SCRIPT_DELETE_META, 1, 3, keys, 0, NULL, &r) != 0 || !r ||
        r->type != REDIS_REPLY_INTEGER) {
        store_free_replies(&r, 1);
        redis_down(res);
        return;
    }
    long long version = r->integer;
    store_free_replies(&r, 1);
    skucache_forget(app->cache, sku);
    if (version == 0) {
        response_error(res, ERROR_UNKNOWN_SKU, "no such sku");
        return;
    }
    /* The SKU is gone from here on (its meta says 0 segments); its keys go now, or with the
     * next settle when this one fails. */
    struct layout l;
    if (layout_read_settled(app->store, sku, &l) < 0)
        log_msg(CONFIG_LOG_WARN, "sku_delete", "sku %s: keys left for the next settle: %s", sku,
                lc_errmsg());
    res->status = 204;
}
