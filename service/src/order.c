/*
 * Orders by id: GET and cancel (DELETE), and the order id's format. The order path itself
 * (POST /api/v1/orders) is the state machine of order_fsm.c, on the worker loops.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "ids.h"
#include "log.h"
#include "metrics.h"
#include "order.h"
#include "skucache.h"
#include "store.h"
#include "validate.h"

int order_id_parse(const char *id, size_t len, int *segment, char *sku)
{
    if (len < IDS_ORDER_HEX + 1 + 1 + 1 + 1 || len > ORDER_ID_MAX)
        return -1;
    for (int i = 0; i < IDS_ORDER_HEX; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return -1;
    if (id[IDS_ORDER_HEX] != '-')
        return -1;
    size_t i = IDS_ORDER_HEX + 1;
    int k = 0, digits = 0;
    while (i < len && id[i] >= '0' && id[i] <= '9' && digits < 5) {
        k = k * 10 + (id[i++] - '0');
        digits++;
    }
    if (digits == 0 || digits > 4 || (digits > 1 && id[IDS_ORDER_HEX + 1] == '0') || i >= len ||
        id[i] != '-' || k >= SKUCACHE_MAX_SEGMENTS)
        return -1;
    i++;
    if (!validate_sku(id + i, len - i))
        return -1;
    memcpy(sku, id + i, len - i);
    sku[len - i] = '\0';
    *segment = k;
    return 0;
}

/* Fetches order id of sku/segment; 1 found (*out new reference), 0 not found, -1 error. */
static int fetch_order(struct app *app, const char *id, size_t idlen, json_t **out)
{
    int k;
    char sku[VALIDATE_SKU_MAX + 1];
    *out = NULL;
    if (order_id_parse(id, idlen, &k, sku) != 0)
        return 0;
    lc_client *c = store_client(app->store);
    if (!c)
        return -1;
    struct seg_keys sk;
    store_seg_keys(sku, k, &sk);
    const char *argv[3] = {"HGET", sk.orders, id};
    size_t lens[3] = {4, strlen(sk.orders), idlen};
    redisReply *r = NULL;
    if (lc_client_command(c, 3, argv, lens, &r) != LC_OK) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    int found = 0;
    if (r->type == REDIS_REPLY_STRING) {
        *out = json_loadb(r->str, r->len, 0, NULL);
        found = *out ? 1 : -1;
    }
    freeReplyObject(r);
    return found;
}

/* POST /api/v1/orders is taken by order_create_async (order_fsm.c) on a worker loop; the
 * router's synchronous table keeps this entry for completeness only. */
void order_create(struct app *app, const struct request *req, struct response *res)
{
    (void)app;
    (void)req;
    response_error(res, ERROR_INTERNAL, "orders are taken on a worker loop");
}

void order_get(struct app *app, const struct request *req, struct response *res)
{
    json_t *order;
    int found = req->param ? fetch_order(app, req->param, req->param_len, &order) : 0;
    if (found < 0) {
        metrics_redis_error();
        response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
    } else if (found == 0) {
        response_error(res, ERROR_UNKNOWN_ORDER, "no such order");
    } else {
        response_json(res, 200, order);
    }
}

void order_cancel(struct app *app, const struct request *req, struct response *res)
{
    int k;
    char sku[VALIDATE_SKU_MAX + 1];
    if (!req->param || order_id_parse(req->param, req->param_len, &k, sku) != 0) {
        response_error(res, ERROR_UNKNOWN_ORDER, "no such order");
        return;
    }
    struct seg_keys sk;
    store_seg_keys(sku, k, &sk);
    char id[ORDER_ID_MAX + 1];
    memcpy(id, req->param, req->param_len);
    id[req->param_len] = '\0';
    const char *keys[3] = {sk.stock, sk.cnt, sk.orders};
    const char *args[1] = {id};
    redisReply *r = NULL;
    if (store_run_many(app->store, SCRIPT_CANCEL, 1, 3, keys, 1, args, &r) != 0 || !r ||
        r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        store_free_replies(&r, 1);
        metrics_redis_error();
        response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
        return;
    }
    long long code = r->element[0]->integer;
    json_t *order = code != 0 && r->elements > 1
                        ? json_loadb(r->element[1]->str, r->element[1]->len, 0, NULL)
                        : NULL;
    store_free_replies(&r, 1);
    if (code == 0) {
        response_error(res, ERROR_UNKNOWN_ORDER, "no such order");
    } else if (code < 0) {
        json_decref(order);
        response_error(res, ERROR_ALREADY_CANCELLED, "the order was already cancelled");
    } else {
        skucache_forget(app->cache, sku); /* its units are back: not sold out any more */
        response_json(res, 200, order ? order : json_object());
    }
}
