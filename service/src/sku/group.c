/*
 * group — the limit groups' resource (SPEC §17; docs/design.md "Limit groups"):
 * PUT /api/v1/groups/{group} {"limit_per_user": n} makes or changes a group, GET reads it (its
 * limit and how many users hold a count in it), DELETE removes its keys (the SKUs naming it are
 * then capped by it no more: group_reserve.lua finds no group). A group is two keys in its own
 * slot, inv:2:{G=<group>}:meta and :users (store_group_key); the name follows the SKU name rules.
 * Every call is one step on one slot (a script, or one DEL of both keys); with
 * --redis-replica-acks N a write is WAITed for on its connection before its 2xx, and a short
 * WAIT answers 503 "outcome":"unknown" as the SKU's admin writes do.
 */
#include "group.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "areq.h"
#include "errors.h"
#include "log.h"
#include "request.h"
#include "store.h"
#include "validate.h"

struct group_req {
    struct areq *ar;
    char group[VALIDATE_SKU_MAX + 1];
    long long limit;
};

/* The {group} of the path, checked (the SKU name rules): 0, or -1 with the 400 in res. */
static int group_param(const struct request *req, struct response *res, char *group)
{
    if (!req->param || !validate_sku(req->param, req->param_len)) {
        response_error(res, ERROR_INVALID_REQUEST,
                       "group: must be 1..64 characters of [A-Za-z0-9_.:-]");
        return -1;
    }
    memcpy(group, req->param, req->param_len);
    group[req->param_len] = '\0';
    return 0;
}

static struct group_req *group_new(struct areq *ar)
{
    struct group_req *g = calloc(1, sizeof(*g));
    if (!g) {
        response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        areq_done(ar);
        return NULL;
    }
    g->ar = ar;
    if (group_param(&ar->req, &ar->res, g->group) != 0) {
        free(g);
        areq_done(ar);
        return NULL;
    }
    return g;
}

static void group_end(struct group_req *g)
{
    areq_done(g->ar);
    free(g);
}

static void group_down(struct group_req *g, lc_status st, const char *errstr)
{
    log_msg(CONFIG_LOG_WARN, "group_unavailable", "group %s: %s", g->group,
            st != LC_OK && errstr ? errstr : "unexpected reply");
    if (st == LC_EIO)
        response_outcome_unknown(&g->ar->res, "the stock store failed after the change reached "
                                              "it: it may be applied; read the group, or send "
                                              "the same request again");
    else
        response_error(&g->ar->res, ERROR_UNAVAILABLE, "the stock store is unavailable");
    group_end(g);
}

static void on_group_acked(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct group_req *g = arg;
    int want = g->ar->app->cfg.redis_replica_acks;
    long long got = store_reply_acks(st, r);
    if (got < want) {
        log_msg(CONFIG_LOG_WARN, "group_replica_ack_missing",
                "group %s: written, but on %lld of %d replicas (%s)", g->group, got < 0 ? 0 : got,
                want, st == LC_OK ? "WAIT timed out" : errstr);
        response_free(&g->ar->res);
        response_outcome_unknown(&g->ar->res,
                                 "the change was applied but fewer replicas than "
                                 "--redis-replica-acks confirmed it in time, so a failover could "
                                 "undo it: send it again, or read the group");
    }
    group_end(g);
}

/* The write is answered (res filled): with --redis-replica-acks, WAIT on its connection first. */
static void group_written(struct group_req *g)
{
    int acks = g->ar->app->cfg.redis_replica_acks;
    if (acks <= 0) {
        group_end(g);
        return;
    }
    lc_async_conn_ref ref;
    if (lc_async_reply_conn(g->ar->lc, &ref) != 0) {
        on_group_acked(LC_EIO, NULL, "the connection of the write is not known", g);
        return;
    }
    store_replica_wait_ref_async(g->ar->lc, &ref, acks, g->ar->app->cfg.redis_timeout_ms,
                                 on_group_acked, g);
}

/* The group as an answer: {"group", "limit_per_user"[, "users"]}. */
static json_t *group_json(const struct group_req *g, long long limit, long long users)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "group", json_string(g->group));
    json_object_set_new(o, "limit_per_user", json_integer(limit));
    if (users >= 0)
        json_object_set_new(o, "users", json_integer(users));
    return o;
}

static void on_group_put(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct group_req *g = arg;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        group_down(g, st == LC_OK ? LC_EIO : st, errstr);
        return;
    }
    json_t *o = group_json(g, g->limit, -1);
    if (o)
        json_object_set_new(o, "version", json_integer(store_reply_int(r->element[1], 0)));
    response_json(&g->ar->res, r->element[0]->integer == 1 ? 201 : 200, o ? o : json_object());
    group_written(g);
}

void group_put_async(struct areq *ar)
{
    struct group_req *g = group_new(ar);
    if (!g)
        return;
    int64_t limit;
    struct validate_error verr;
    if (validate_group_body(ar->req.body, ar->req.body_len, &limit, &verr) != 0) {
        response_error(&ar->res, verr.code, verr.message);
        group_end(g);
        return;
    }
    g->limit = (long long)limit;
    char meta[STORE_KEY_MAX], lim[24];
    store_group_key(meta, g->group, "meta");
    snprintf(lim, sizeof(lim), "%lld", g->limit);
    const char *keys[1] = {meta}, *args[1] = {lim};
    store_script_async(ar->app->store, ar->lc, ar, SCRIPT_GROUP_PUT, 1, keys, 1, args, on_group_put,
                       g);
}

static void on_group_read(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct group_req *g = arg;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING) {
        group_down(g, st == LC_EIO ? LC_EREDIS : st, errstr); /* a read: nothing changed */
        return;
    }
    if (r->element[0]->len == 0) {
        response_error(&g->ar->res, ERROR_NOT_FOUND, "no such group");
        group_end(g);
        return;
    }
    json_t *o = group_json(g, atoll(r->element[0]->str), r->element[1]->integer);
    if (o)
        json_object_set_new(o, "version", json_integer(store_reply_int(r->element[2], 0)));
    response_json(&g->ar->res, 200, o ? o : json_object());
    group_end(g);
}

void group_get_async(struct areq *ar)
{
    struct group_req *g = group_new(ar);
    if (!g)
        return;
    char meta[STORE_KEY_MAX], users[STORE_KEY_MAX];
    store_group_key(meta, g->group, "meta");
    store_group_key(users, g->group, "users");
    const char *keys[2] = {meta, users};
    store_script_async(ar->app->store, ar->lc, ar, SCRIPT_GROUP_READ, 2, keys, 0, NULL,
                       on_group_read, g);
}

static void on_group_deleted(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct group_req *g = arg;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_INTEGER) {
        group_down(g, st == LC_OK ? LC_EIO : st, errstr);
        return;
    }
    if (r->integer == 0) {
        response_error(&g->ar->res, ERROR_NOT_FOUND, "no such group");
        group_end(g);
        return;
    }
    json_t *o = json_object();
    if (o) {
        json_object_set_new(o, "group", json_string(g->group));
        json_object_set_new(o, "deleted", json_true());
    }
    response_json(&g->ar->res, 200, o ? o : json_object());
    group_written(g);
}

void group_delete_async(struct areq *ar)
{
    struct group_req *g = group_new(ar);
    if (!g)
        return;
    char meta[STORE_KEY_MAX], users[STORE_KEY_MAX];
    store_group_key(meta, g->group, "meta");
    store_group_key(users, g->group, "users");
    /* one slot ({G=<group>}): one DEL, both keys at once */
    const char *argv[3] = {"DEL", meta, users};
    store_command_async(ar->lc, ar, 3, argv, on_group_deleted, g);
}
