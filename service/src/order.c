/*
 * Orders by id: GET and cancel (DELETE), and the order id's format. The order path itself
 * (POST /api/v1/orders) is the state machine of order_fsm.c, on the worker loops.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "areq.h"
#include "handlers.h"
#include "ids.h"
#include "log.h"
#include "metrics.h"
#include "order.h"
#include "skucache.h"
#include "store.h"
#include "store_scripts.h"
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

/* The answer to GET /api/v1/orders/{id} from the HGET of the order (st: lockcore's status). */
static void get_answer(lc_status st, const redisReply *r, struct response *res)
{
    json_t *order = NULL;
    if (st == LC_OK && r && r->type == REDIS_REPLY_STRING &&
        !(order = json_loadb(r->str, r->len, 0, NULL)))
        st = LC_EREDIS; /* not an order record */
    if (st != LC_OK) {
        metrics_redis_error();
        response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
    } else if (!order) {
        response_error(res, ERROR_UNKNOWN_ORDER, "no such order");
    } else {
        response_json(res, 200, order);
    }
}

/* The answer to DELETE /api/v1/orders/{id} from the CANCEL script's reply. */
static void cancel_answer(struct app *app, const char *sku, lc_status st, const redisReply *r,
                          struct response *res)
{
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        metrics_redis_error();
        /* The script is one atomic step that checks before it writes: an error reply changed
         * nothing; a lost reply (LC_EIO) or an odd one may follow a cancel that was made. */
        if (st == LC_OK || st == LC_EIO)
            response_outcome_unknown(res, "the stock store failed after the cancel reached it: "
                                          "it may be applied; GET the order, or cancel again "
                                          "(409 already_cancelled once it is)");
        else
            response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
        return;
    }
    long long code = r->element[0]->integer;
    if (code == STORE_CANCEL_NONE) {
        response_error(res, ERROR_UNKNOWN_ORDER, "no such order");
    } else if (code == STORE_CANCEL_ALREADY) {
        response_error(res, ERROR_ALREADY_CANCELLED, "the order was already cancelled");
    } else {
        json_t *order = r->elements > 1 && r->element[1]->type == REDIS_REPLY_STRING
                            ? json_loadb(r->element[1]->str, r->element[1]->len, 0, NULL)
                            : NULL;
        skucache_forget(app->cache, sku); /* its units are back: not sold out any more */
        response_json(res, 200, order ? order : json_object());
    }
}

/* The keys of an order id's segment; 0, or -1 when id is not an order id. */
struct by_id {
    struct areq *ar;
    char sku[VALIDATE_SKU_MAX + 1];
    char id[ORDER_ID_MAX + 1];
    struct seg_keys sk;
};

static int by_id_parse(const struct request *req, struct by_id *b)
{
    int k;
    if (!req->param || order_id_parse(req->param, req->param_len, &k, b->sku) != 0)
        return -1;
    memcpy(b->id, req->param, req->param_len);
    b->id[req->param_len] = '\0';
    store_seg_keys(b->sku, k, &b->sk);
    return 0;
}

/* GET and DELETE by id: one command each on the loop's client. The by_id is owned by the
 * request from the handler's start to its callback (always called once, in the request's log
 * context: store.h), which frees it. */
static void on_get_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr;
    struct by_id *b = arg;
    get_answer(st, r, &b->ar->res);
    areq_done(b->ar);
    free(b);
}

void order_get_async(struct areq *ar)
{
    struct by_id *b = calloc(1, sizeof(*b));
    if (!b || by_id_parse(&ar->req, b) != 0) {
        if (b)
            response_error(&ar->res, ERROR_UNKNOWN_ORDER, "no such order");
        else
            response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        free(b);
        areq_done(ar);
        return;
    }
    b->ar = ar;
    const char *argv[3] = {"HGET", b->sk.orders, b->id};
    store_command_async(ar->lc, ar, 3, argv, on_get_reply, b);
}

/* With --redis-replica-acks N, a cancel is acknowledged only once N replicas have it, as an
 * order is: else a failover could bring back an order its client was told was cancelled. */
static void on_cancel_acked(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct by_id *b = arg;
    int want = b->ar->app->cfg.redis_replica_acks;
    long long got = store_reply_acks(st, r);
    areq_log_begin(b->ar);
    if (got < want) {
        log_msg(CONFIG_LOG_WARN, "cancel_replica_ack_missing",
                "order %s: cancelled, but on %lld of %d replicas (%s)", b->id, got < 0 ? 0 : got,
                want, st == LC_OK ? "WAIT timed out" : errstr);
        response_outcome_unknown(&b->ar->res,
                                 "the cancel was applied but may not survive a failover of the "
                                 "stock store: cancel again (409 already_cancelled if it held) "
                                 "or GET the order");
    }
    areq_log_end();
    areq_done(b->ar);
    free(b);
}

static void on_cancel_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr;
    struct by_id *b = arg;
    cancel_answer(b->ar->app, b->sku, st, r, &b->ar->res);
    lc_async_conn_ref ref;
    if (b->ar->res.status == 200 && b->ar->app->cfg.redis_replica_acks > 0) {
        /* On the connection that carried the cancel (a new one would vouch for nothing). */
        if (lc_async_reply_conn(b->ar->lc, &ref) != 0) {
            on_cancel_acked(LC_EIO, NULL, "the connection of the cancel is not known", b);
            return;
        }
        store_replica_wait_ref_async(b->ar->lc, &ref, b->ar->app->cfg.redis_replica_acks,
                                     b->ar->app->cfg.redis_timeout_ms, on_cancel_acked, b);
        return;
    }
    areq_done(b->ar);
    free(b);
}

void order_cancel_async(struct areq *ar)
{
    struct by_id *b = calloc(1, sizeof(*b));
    if (!b || by_id_parse(&ar->req, b) != 0) {
        if (b)
            response_error(&ar->res, ERROR_UNKNOWN_ORDER, "no such order");
        else
            response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        free(b);
        areq_done(ar);
        return;
    }
    b->ar = ar;
    const char *keys[3] = {b->sk.stock, b->sk.cnt, b->sk.orders};
    const char *args[1] = {b->id};
    store_script_async(ar->app->store, ar->lc, ar, SCRIPT_CANCEL, 3, keys, 1, args, on_cancel_reply,
                       b);
}
