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
#include "jsontext.h"
#include "log.h"
#include "metrics.h"
#include "order.h"
#include "order_io.h"
#include "skucache.h"
#include "order_status.h"
#include "store.h"
#include "store_scripts.h"
#include "sweep.h"
#include "validate.h"

void order_answer_parts(json_t *order)
{
    json_t *seg = json_object_get(order, "segment"), *q = json_object_get(order, "quantity");
    if (!json_is_object(order) || json_object_get(order, "parts") || !json_is_integer(seg) ||
        !json_is_integer(q))
        return;
    json_t *parts = json_pack("[{s:I, s:I}]", "segment", json_integer_value(seg), "quantity",
                              json_integer_value(q));
    if (parts)
        json_object_set_new(order, "parts", parts);
}

char *order_answer_text(const char *record, int segment, long long quantity)
{
    size_t n = strlen(record);
    if (n < 2 || record[n - 1] != '}' || strstr(record, "\"parts\":"))
        return strdup(record);
    char tail[96];
    int t = snprintf(tail, sizeof(tail), ",\"parts\":[{\"segment\":%d,\"quantity\":%lld}]}",
                     segment, quantity);
    char *out = malloc(n + (size_t)t);
    if (!out)
        return NULL;
    memcpy(out, record, n - 1);
    memcpy(out + n - 1, tail, (size_t)t + 1);
    return out;
}

char *order_record_text(const char *id, const char *sku, long long quantity, int segment,
                        const char *user, const char *created, const char *status)
{
    /* Room for the worst case, every byte of every string escaped as \u00XX (6 bytes), and the
     * names, punctuation and two numbers: the text always fits, so a failure is bad UTF-8. */
    size_t cap = 6 * (strlen(id) + strlen(sku) + (user ? strlen(user) : 0) + strlen(created) +
                      strlen(status)) +
                 160;
    char stack[2048], *buf = cap <= sizeof(stack) ? stack : malloc(cap);
    if (!buf)
        return NULL;
    struct jsontext w;
    jsontext_init(&w, buf, cap);
    jsontext_raw(&w, "{\"order_id\":");
    jsontext_string(&w, id);
    jsontext_raw(&w, ",\"sku\":");
    jsontext_string(&w, sku);
    jsontext_raw(&w, ",\"quantity\":");
    jsontext_int(&w, quantity);
    jsontext_raw(&w, ",\"segment\":");
    jsontext_int(&w, segment);
    jsontext_raw(&w, ",\"user_id\":");
    if (user)
        jsontext_string(&w, user);
    else
        jsontext_raw(&w, "null");
    jsontext_raw(&w, ",\"created_at\":");
    jsontext_string(&w, created);
    jsontext_raw(&w, ",\"status\":");
    jsontext_string(&w, status);
    jsontext_raw(&w, "}");
    int n = jsontext_end(&w);
    char *out = n < 0 ? NULL : malloc((size_t)n + 1);
    if (out)
        memcpy(out, buf, (size_t)n + 1);
    if (buf != stack)
        free(buf);
    return out;
}

/* The answer to GET /api/v1/orders/{id} from the HGET of the order (st: lockcore's status). A
 * part of a multi-segment order (part_of) is not an order: 404 as for none. */
static void get_answer(lc_status st, const redisReply *r, struct response *res)
{
    json_t *order = NULL;
    if (st == LC_OK && r && r->type == REDIS_REPLY_STRING &&
        !(order = json_loadb(r->str, r->len, 0, NULL)))
        st = LC_EREDIS; /* not an order record */
    if (st != LC_OK) {
        metrics_redis_error();
        response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
    } else if (!order || json_object_get(order, "part_of")) {
        json_decref(order);
        response_error(res, ERROR_UNKNOWN_ORDER, "no such order");
    } else {
        order_answer_parts(order);
        response_json(res, 200, order);
    }
}

/* What a by_id request does to the order. */
enum by_id_op { BY_ID_GET, BY_ID_CANCEL, BY_ID_CONFIRM, BY_ID_EXTEND };

/* The keys of an order id's segment; 0, or -1 when id is not an order id. */
struct by_id {
    struct areq *ar;
    char sku[VALIDATE_SKU_MAX + 1];
    char id[ORDER_ID_MAX + 1];
    int k;
    struct seg_keys sk;
    enum by_id_op op;
    int64_t seconds;                                       /* an extension's ("0": the rule's) */
    int rules_reads;                                       /* an extension's meta reads */
    char give[IDS_ORDER_HEX + VALIDATE_PRINTABLE_MAX + 1]; /* the give-back ("": none) */
    char **follows; /* a multi-segment order's follows "<part id>|<status>" to apply */
    int nfollows;
    /* its limit groups' give-backs (ggive members "<hex><user>\x1f<group>"), applied one by
     * one after the SKU's (docs/design.md "Limit groups") */
    char *ggive[LIMIT_GROUPS_MAX];
    int nggive, ggiven;
};

static int by_id_parse(const struct request *req, struct by_id *b)
{
    int k;
    if (!req->param || order_id_parse(req->param, req->param_len, &k, b->sku) != 0)
        return -1;
    memcpy(b->id, req->param, req->param_len);
    b->id[req->param_len] = '\0';
    b->k = k;
    store_seg_keys(b->sku, k, &b->sk);
    return 0;
}

/* A request on the order its path names (GET, cancel, confirm, extend): NULL once answered (404
 * for a path that names no order, 500 out of memory) and ended. */
static struct by_id *by_id_start(struct areq *ar)
{
    struct by_id *b = calloc(1, sizeof(*b));
    if (!b || by_id_parse(&ar->req, b) != 0) {
        if (b)
            response_error(&ar->res, ERROR_UNKNOWN_ORDER, "no such order");
        else
            response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        free(b);
        areq_done(ar);
        return NULL;
    }
    b->ar = ar;
    return b;
}

/* With --redis-replica-acks N, WAITs N on the connection that carried the reply being handled
 * (a new one would vouch for nothing) and calls acked with the WAIT's outcome; with acks 0
 * returns 0 and does nothing. 1 when acked will be called. */
static int by_id_vouch(struct areq *ar, lc_async_reply_fn acked, void *arg)
{
    int want = ar->app->cfg.redis_replica_acks;
    lc_async_conn_ref ref;
    if (want <= 0)
        return 0;
    if (lc_async_reply_conn(ar->lc, &ref) != 0)
        acked(LC_EIO, NULL, "the connection of the reply is not known", arg);
    else
        store_replica_wait_ref_async(ar->lc, &ref, want, ar->app->cfg.redis_timeout_ms, acked, arg);
    return 1;
}

/* GET and DELETE by id: one command each on the loop's client. The by_id is owned by the
 * request from the handler's start to its callback (always called once, in the request's log
 * context: store.h), which frees it. With --redis-replica-acks N a GET's 200 waits until N
 * replicas have what it read, as a repeated confirm's does (end_answer): the 503s of a confirm,
 * a cancel or an extension whose WAIT failed say "GET the order", and what the GET answers must
 * then survive a failover as the 2xx it stands for would. */
static void on_get_acked(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct by_id *b = arg;
    int want = b->ar->app->cfg.redis_replica_acks;
    long long got = store_reply_acks(st, r);
    if (got < want) {
        areq_log_begin(b->ar);
        log_msg(CONFIG_LOG_WARN, "get_replica_ack_missing",
                "order %s: read on %lld of %d replicas (%s)", b->id, got < 0 ? 0 : got, want,
                st == LC_OK ? "WAIT timed out" : errstr);
        areq_log_end();
        response_free(&b->ar->res);
        response_error(&b->ar->res, ERROR_UNAVAILABLE,
                       "the order's state is not on the stock store's replicas yet "
                       "(--redis-replica-acks): GET it again");
    }
    areq_done(b->ar);
    free(b);
}

static void on_get_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr;
    struct by_id *b = arg;
    get_answer(st, r, &b->ar->res);
    if (b->ar->res.status == 200 && by_id_vouch(b->ar, on_get_acked, b))
        return;
    areq_done(b->ar);
    free(b);
}

void order_get_async(struct areq *ar)
{
    struct by_id *b = by_id_start(ar);
    if (!b)
        return;
    const char *argv[3] = {"HGET", b->sk.orders, b->id};
    store_command_async(ar->lc, ar, 3, argv, on_get_reply, b);
}

/*
 * Cancel (DELETE /api/v1/orders/{id}) and confirm (POST /api/v1/orders/{id}/confirm): one
 * script each on the order's segment (lua/cancel.lua, lua/confirm.lua), then, with
 * --redis-replica-acks N, a WAIT N on the connection that carried it (else a failover could
 * bring back an order its client was told was cancelled or confirmed), then, when the order
 * ended now (cancelled, or a hold found expired) and has a user, the give-back of its units to
 * the user's count (sweep.h; queued in the same script, so a failure here only delays it to
 * the sweeper's next pass), then, for a multi-segment order's primary that is now cancelled,
 * expired or confirmed, the follows of its other parts (sweep.h follow_async: part_follow.lua
 * on each part's segment; queued in the same script, so one that fails is applied by the
 * sweeper later): the answer comes after them, so the client sees every part's units back.
 */

/* Notes the follows of the primary whose record (parsed: order, may be NULL) the script
 * answered with: one per part in another segment, with the record's status when it is one a
 * part follows. Running them again (a repeat cancel) is harmless: part_follow.lua is
 * idempotent. */
static void note_follows(struct by_id *b, const json_t *order)
{
    const char *status = json_string_value(json_object_get(order, "status"));
    json_t *parts = json_object_get(order, "parts");
    json_t *own = json_object_get(order, "segment");
    if (!status || !json_is_array(parts) || !json_is_integer(own) ||
        !order_status_reached(order_status_parse(status, strlen(status))))
        return;
    /* a cart (docs/design.md "Ending and healing a cart"): every part of every item, each in
     * its own SKU (hold_end.lua's order_follow queued the same members) */
    json_t *items = json_object_get(order, "items");
    size_t n = json_array_size(parts), nitems = json_is_array(items) ? json_array_size(items) : 0;
    for (size_t j = 0; j < nitems; j++)
        n += json_array_size(json_object_get(json_array_get(items, j), "parts"));
    b->follows = calloc(n + 1, sizeof(*b->follows));
    for (size_t j = 0; b->follows && j < (nitems ? nitems : 1); j++) {
        json_t *it = nitems ? json_array_get(items, j) : NULL;
        const char *sku = it ? json_string_value(json_object_get(it, "sku")) : b->sku;
        json_t *ps = it ? json_object_get(it, "parts") : parts;
        if (!sku || !validate_sku(sku, strlen(sku)))
            continue;
        for (size_t i = 0; i < json_array_size(ps); i++) {
            json_t *k = json_object_get(json_array_get(ps, i), "segment");
            if (!json_is_integer(k) ||
                (json_integer_value(k) == json_integer_value(own) && strcmp(sku, b->sku) == 0))
                continue;
            char m[ORDER_ID_MAX + 16];
            snprintf(m, sizeof(m), "%.*s-%d-%s|%s", IDS_ORDER_HEX, b->id,
                     (int)json_integer_value(k), sku, status);
            if ((b->follows[b->nfollows] = strdup(m)))
                b->nfollows++;
        }
    }
}

/* Notes the give-back of the order whose record (parsed: order, may be NULL) ended, and of
 * each limit group its record names ("grp"; the same members hold_end.lua queued). */
static void note_give(struct by_id *b, const json_t *order)
{
    b->give[0] = '\0';
    const char *user = json_string_value(json_object_get(order, "user_id"));
    if (user && strlen(b->id) > IDS_ORDER_HEX)
        snprintf(b->give, sizeof(b->give), "%.*s%s", IDS_ORDER_HEX, b->id, user);
    const char *g;
    json_t *v;
    json_object_foreach(json_object_get(order, "grp"), g, v)
    {
        if (!b->give[0] || b->nggive >= LIMIT_GROUPS_MAX)
            break;
        size_t n = strlen(b->give) + strlen(g) + 2;
        if ((b->ggive[b->nggive] = malloc(n)))
            snprintf(b->ggive[b->nggive++], n, "%s\x1f%s", b->give, g);
    }
}

static int extend_answer(struct by_id *b, long long code, const redisReply *r, json_t *order);

/* The answer from the script's reply {code[, record[, 1 when it expired the hold now]]}; 1
 * when a WAIT is due: the answer states what a change made, now or before (a repeat's 200
 * confirmed or 409 already_cancelled: the first attempt's WAIT may have failed, and a failover
 * would take the state back). A WAIT after a script that only read covers what it read: Redis
 * counts a connection's offset from its last command, read or write (it_cluster
 * test_repeat_waits_for_replicas). */
static int end_answer(struct by_id *b, lc_status st, const redisReply *r)
{
    struct response *res = &b->ar->res;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        metrics_redis_error();
        /* The script is one atomic step that checks before it writes: an error reply changed
         * nothing; a lost reply (LC_EIO) or an odd one may follow a change that was made. */
        if (st == LC_OK || st == LC_EIO)
            response_outcome_unknown(
                res, b->op == BY_ID_CONFIRM  ? "the stock store failed after the confirm "
                                               "reached it: it may be applied; confirm again "
                                               "or GET the order"
                     : b->op == BY_ID_EXTEND ? "the stock store failed after the extension "
                                               "reached it: it may be applied; GET the order "
                                               "(its expires_at and extensions) before "
                                               "extending again"
                                             : "the stock store failed after the cancel reached "
                                               "it: it may be applied; GET the order, or cancel "
                                               "again (409 already_cancelled once it is)");
        else
            response_error(res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
        return 0;
    }
    long long code = r->element[0]->integer;
    const redisReply *rec = r->elements > 1 ? r->element[1] : NULL;
    if (r->elements > 2 && r->element[2]->type == REDIS_REPLY_INTEGER &&
        r->element[2]->integer == 1)
        metrics_holds_expired(1); /* due, and expired by this very call */
    json_t *order =
        rec && rec->type == REDIS_REPLY_STRING ? json_loadb(rec->str, rec->len, 0, NULL) : NULL;
    note_follows(b, order);
    order_answer_parts(order);
    int wrote = 0;
    if (b->op == BY_ID_EXTEND) {
        wrote = extend_answer(b, code, r, order);
    } else if (b->op == BY_ID_CANCEL) {
        switch (code) {
        case STORE_CANCEL_NONE: response_error(res, ERROR_UNKNOWN_ORDER, "no such order"); break;
        case STORE_CANCEL_ALREADY:
            wrote = 1; /* a repeat: vouch for the cancel it found */
            response_error(res, ERROR_ALREADY_CANCELLED, "the order was already cancelled");
            break;
        case STORE_CANCEL_EXPIRED:
            note_give(b, order);
            wrote = 1;
            response_error(res, ERROR_RESERVATION_EXPIRED,
                           "the hold expired: its units are back in stock already");
            break;
        default:
            note_give(b, order);
            wrote = 1;
            if (order && json_object_get(order, "expires_at"))
                metrics_hold_cancelled();
            /* its units are back: not sold out any more */
            skucache_forget(b->ar->app->cache, b->sku);
            response_json(res, 200, order ? json_incref(order) : json_object());
            break;
        }
    } else {
        switch (code) {
        case STORE_CONFIRM_NONE: response_error(res, ERROR_UNKNOWN_ORDER, "no such order"); break;
        case STORE_CONFIRM_DONE: metrics_hold_confirmed(); __attribute__((fallthrough));
        case STORE_CONFIRM_ALREADY: /* a repeat: vouch for the confirm it found */
            wrote = 1;
            response_json(res, 200, order ? json_incref(order) : json_object());
            break;
        case STORE_CONFIRM_CANCELLED:
            wrote = 1;
            response_error(res, ERROR_ALREADY_CANCELLED, "the order was cancelled");
            break;
        case STORE_CONFIRM_EXPIRED:
            note_give(b, order);
            wrote = 1;
            response_error(res, ERROR_RESERVATION_EXPIRED,
                           "the hold expired before it was confirmed: its units are back in "
                           "stock");
            break;
        default:
            response_error(res, ERROR_NOT_RESERVED,
                           "the order was never a hold: there is nothing to confirm");
            break;
        }
    }
    json_decref(order);
    return wrote;
}

static void end_done(struct by_id *b)
{
    areq_done(b->ar);
    for (int i = 0; i < b->nggive; i++)
        free(b->ggive[i]);
    for (int i = 0; i < b->nfollows; i++)
        free(b->follows[i]);
    free(b->follows);
    free(b);
}

static void on_part_followed(void *arg, int ok)
{
    (void)ok; /* logged by follow_async; the sweeper applies what is left queued */
    end_done(arg);
}

/* The follows of a multi-segment order's other parts, if any; then the answer goes. */
static void end_follow(struct by_id *b)
{
    if (b->nfollows == 0) {
        end_done(b);
        return;
    }
    follow_async(b->ar->app->store, b->ar->lc, b->ar, b->sku, b->k, (const char *const *)b->follows,
                 b->nfollows, b->ar->app->cfg.redis_replica_acks, b->ar->app->cfg.redis_timeout_ms,
                 on_part_followed, b);
}

static void on_given(void *arg, int ok)
{
    (void)ok; /* logged by giveback_async / ggive_async; the sweeper applies it later */
    struct by_id *b = arg;
    if (b->ggiven < b->nggive) { /* the next limit group's */
        const char *members[1] = {b->ggive[b->ggiven++]};
        ggive_async(b->ar->app->store, b->ar->lc, b->ar, b->sku, b->k, members, 1,
                    b->ar->app->cfg.redis_replica_acks, b->ar->app->cfg.redis_timeout_ms, on_given,
                    b);
        return;
    }
    end_follow(b);
}

/* The give-back, when the order ended now; then the follows. */
static void end_give(struct by_id *b)
{
    if (!b->give[0]) {
        end_follow(b);
        return;
    }
    const char *members[1] = {b->give};
    giveback_async(b->ar->app->store, b->ar->lc, b->ar, b->sku, b->k, members, 1,
                   b->ar->app->cfg.redis_replica_acks, b->ar->app->cfg.redis_timeout_ms, on_given,
                   b);
}

static void on_end_acked(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct by_id *b = arg;
    int want = b->ar->app->cfg.redis_replica_acks;
    long long got = store_reply_acks(st, r);
    areq_log_begin(b->ar);
    if (got < want) {
        static const char *const what[][3] = {
            [BY_ID_CANCEL] = {"cancel_replica_ack_missing", "cancelled",
                              "the cancel was applied but may not survive a failover of the "
                              "stock store: cancel again (409 already_cancelled if it held) or "
                              "GET the order"},
            [BY_ID_CONFIRM] = {"confirm_replica_ack_missing", "changed by a confirm",
                               "the confirm was applied but may not survive a failover of the "
                               "stock store: confirm again or GET the order"},
            [BY_ID_EXTEND] = {"extend_replica_ack_missing", "changed by an extension",
                              "the extension was applied but may not survive a failover of the "
                              "stock store: GET the order (its expires_at and extensions) "
                              "before extending again"},
        };
        log_msg(CONFIG_LOG_WARN, what[b->op][0], "order %s: %s, but on %lld of %d replicas (%s)",
                b->id, what[b->op][1], got < 0 ? 0 : got, want,
                st == LC_OK ? "WAIT timed out" : errstr);
        response_free(&b->ar->res);
        response_outcome_unknown(&b->ar->res, what[b->op][2]);
    }
    areq_log_end();
    end_give(b);
}

static void on_end_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr;
    struct by_id *b = arg;
    if (end_answer(b, st, r) && by_id_vouch(b->ar, on_end_acked, b))
        return;
    end_give(b);
}

static void order_end_async(struct areq *ar, enum by_id_op op)
{
    struct by_id *b = by_id_start(ar);
    if (!b)
        return;
    b->op = op;
    const char *keys[8] = {b->sk.stock, b->sk.cnt, b->sk.orders, b->sk.due,
                           b->sk.give,  b->sk.log, b->sk.sver,   b->sk.follow};
    const char *args[2] = {b->id, ar->app->cfg.order_log ? "1" : "0"};
    store_script_async(ar->app->store, ar->lc, ar,
                       op == BY_ID_CONFIRM ? SCRIPT_CONFIRM : SCRIPT_CANCEL, 8, keys, 2, args,
                       on_end_reply, b);
}

void order_cancel_async(struct areq *ar)
{
    order_end_async(ar, BY_ID_CANCEL);
}

void order_confirm_async(struct areq *ar)
{
    order_end_async(ar, BY_ID_CONFIRM);
}

/*
 * Extend (POST /api/v1/orders/{id}/extend, docs/design.md "Holds and their expiry"): one
 * script on the order's segment (lua/extend.lua) that checks the status, the SKU's limits and
 * the due time and moves the expiry, or expires a hold found due (then its give-back and
 * follows as a confirm's); then, with --redis-replica-acks N, the WAIT of on_end_reply. On one
 * Redis the script reads the limits from the SKU's meta itself; on a Redis Cluster the meta is
 * another slot, so they are read first (HMGET) and go to the script with the meta's rules
 * version, which the segment refuses when a PATCH pushed a newer one meanwhile (STORE_EXTEND_
 * RULES: read again, at most EXTEND_RULES_READS times).
 */
#define EXTEND_RULES_READS 3

static void extend_run(struct by_id *b, const char *ext_s, const char *ext_max, const char *rver);

/* The answer of an extension from extend.lua's reply (code, the record parsed: order); 1 when
 * it wrote (a WAIT is due). */
static int extend_answer(struct by_id *b, long long code, const redisReply *r, json_t *order)
{
    struct response *res = &b->ar->res;
    long long n =
        r->elements > 2 && r->element[2]->type == REDIS_REPLY_INTEGER   ? r->element[2]->integer
        : r->elements > 1 && r->element[1]->type == REDIS_REPLY_INTEGER ? r->element[1]->integer
                                                                        : 0;
    char msg[160];
    switch (code) {
    case STORE_EXTEND_DONE:
        metrics_hold_extended();
        response_json(res, 200, order ? json_incref(order) : json_object());
        return 1;
    case STORE_EXTEND_NONE: response_error(res, ERROR_UNKNOWN_ORDER, "no such order"); return 0;
    case STORE_EXTEND_CANCELLED:
        response_error(res, ERROR_ALREADY_CANCELLED, "the order was cancelled");
        return 1;
    case STORE_EXTEND_EXPIRED:
        response_error(res, ERROR_RESERVATION_EXPIRED,
                       "the hold expired before it was extended: its units are back in stock");
        if (r->elements > 2 && n == 1) {
            note_give(b, order); /* expired by this very call: its give-back, then follows */
            return 1;
        }
        return 0;
    case STORE_EXTEND_OFF: response_error(res, ERROR_EXTEND_NOT_ALLOWED, NULL); return 0;
    case STORE_EXTEND_LIMIT:
        snprintf(msg, sizeof(msg),
                 "the hold was extended %lld times already, the most its SKU "
                 "allows (hold_extend_max)",
                 n);
        response_error(res, ERROR_EXTEND_LIMIT, msg);
        return 0;
    case STORE_EXTEND_TOO_LONG:
        snprintf(msg, sizeof(msg),
                 "seconds: must be at most the SKU's hold_extend_s, %lld, got "
                 "%lld",
                 n, (long long)b->seconds);
        response_error(res, ERROR_INVALID_REQUEST, msg);
        return 0;
    default:
        response_error(res, ERROR_NOT_RESERVED,
                       "the order is not a live hold (confirmed, or never a hold): there is "
                       "nothing to extend");
        return 0;
    }
}

/* The meta's limits (a Redis Cluster): HMGET ext_s ext_max rver. */
static void on_extend_rules(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr;
    struct by_id *b = arg;
    char v[3][24];
    for (int i = 0; i < 3; i++) {
        const redisReply *e =
            r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 ? r->element[i] : NULL;
        if (st != LC_OK || !e || (e->type != REDIS_REPLY_STRING && e->type != REDIS_REPLY_NIL) ||
            (e->type == REDIS_REPLY_STRING && (e->len == 0 || e->len >= sizeof(v[i])))) {
            metrics_redis_error();
            response_error(&b->ar->res, ERROR_UNAVAILABLE,
                           "the stock store is unavailable, retry later");
            end_done(b);
            return;
        }
        snprintf(v[i], sizeof(v[i]), "%.*s", e->type == REDIS_REPLY_STRING ? (int)e->len : 1,
                 e->type == REDIS_REPLY_STRING ? e->str : "0");
        /* the script compares them as numbers: only digits may reach it */
        if (strspn(v[i], "0123456789") != strlen(v[i])) {
            response_error(&b->ar->res, ERROR_INTERNAL, "the SKU's rules are damaged");
            end_done(b);
            return;
        }
    }
    extend_run(b, v[0], v[1], v[2]);
}

static void extend_read_rules(struct by_id *b)
{
    char meta[STORE_KEY_MAX];
    store_sku_key(meta, b->sku, "meta");
    b->rules_reads++;
    const char *argv[5] = {"HMGET", meta, "ext_s", "ext_max", RULES_F_VERSION};
    store_command_async(b->ar->lc, b->ar, 5, argv, on_extend_rules, b);
}

/* extend.lua's reply: a Redis Cluster's STORE_EXTEND_RULES reads the meta again; any other
 * goes on as a confirm's. */
static void on_extend_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct by_id *b = arg;
    if (st == LC_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[0]->integer == STORE_EXTEND_RULES) {
        if (b->rules_reads < EXTEND_RULES_READS) {
            extend_read_rules(b);
            return;
        }
        response_error(&b->ar->res, ERROR_UNAVAILABLE,
                       "the SKU's rules changed while the extension was made: retry");
        end_done(b);
        return;
    }
    on_end_reply(st, r, errstr, b);
}

/* extend.lua: ext_s, ext_max and rver NULL on one Redis (the script reads the meta). */
static void extend_run(struct by_id *b, const char *ext_s, const char *ext_max, const char *rver)
{
    struct areq *ar = b->ar;
    char meta[STORE_KEY_MAX], secs[24], member[STORE_KEY_MAX];
    store_sku_key(meta, b->sku, "meta");
    snprintf(secs, sizeof(secs), "%" PRId64, b->seconds);
    snprintf(member, sizeof(member), "%s/%d", b->sku, b->k);
    const char *keys[11] = {b->sk.stock, b->sk.cnt, b->sk.orders,     b->sk.due,
                            b->sk.give,  b->sk.log, b->sk.sver,       b->sk.follow,
                            b->sk.rver,  meta,      store_holds_key()};
    const char *args[7] = {b->id,
                           ar->app->cfg.order_log ? "1" : "0",
                           secs,
                           ext_s ? ext_s : "",
                           ext_max ? ext_max : "",
                           rver ? rver : "",
                           member};
    store_script_async(ar->app->store, ar->lc, ar, SCRIPT_EXTEND, ext_s ? 9 : 11, keys, 7, args,
                       on_extend_reply, b);
}

void order_extend_async(struct areq *ar)
{
    struct by_id *b = by_id_start(ar);
    struct validate_error verr;
    if (!b)
        return;
    if (validate_extend_body(ar->req.body, ar->req.body_len, &b->seconds, &verr) != 0) {
        response_error(&ar->res, verr.code, verr.message);
        free(b);
        areq_done(ar);
        return;
    }
    b->op = BY_ID_EXTEND;
    if (config_redis_cluster(&ar->app->cfg))
        extend_read_rules(b);
    else
        extend_run(b, NULL, NULL, NULL);
}
