/*
 * SKU handlers: PUT /api/v1/skus/{sku}, PATCH, POST .../restock, DELETE, on a worker loop. The
 * status they answer with, or vouch for, is the exact read's (exact.h).
 *
 * Each request is a struct admin, owned by itself from its handler to admin_end (which hands
 * the areq back and frees it); its steps are chained callbacks (on_<what came back>) over the
 * asynchronous store and layout.c's asynchronous settle, one Redis step in flight at a time.
 *
 * PATCH changes the SKU's sale rules alone (rules.h), in one script that merges, checks and
 * writes them: nothing else of the SKU moves. PUT registers the SKU in the registry
 * (store_registry_key) before its meta write, DELETE unregisters it after its roll-out, unless
 * order logs of its segments are left (inventory-sink unregisters it once it drained them).
 *
 * PUT, DELETE and restock write their intent to the SKU's meta in one atomic step and then
 * settle the segments (layout.c); an interrupted one is completed by whoever next meets it. An
 * order that began under an older version fails its version check at commit and is retried
 * under the new one (order.c), so a PUT is safe while orders are in flight. PUT and restock
 * take an Idempotency-Key: the answer is stored with it and a retry gets it back, applying
 * nothing twice.
 *
 * What a 503 of PUT, restock and DELETE means (docs/api.md): plain, nothing changed (the intent
 * script was refused by Redis, which checks before it writes, or never sent); with
 * "outcome":"unknown" (admin_unknown), the intent was sent and its reply lost, or it is
 * recorded and a later step failed: it may be applied, and a recorded one is completed by the
 * next reader of the SKU.
 */
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "areq.h"
#include "exact.h"
#include "handlers.h"
#include "faultpoint.h"
#include "gate_store.h"
#include "layout.h"
#include "log.h"
#include "metrics.h"
#include "rules.h"
#include "skucache.h"
#include "statsnap.h"
#include "stock.h"
#include "store.h"
#include "store_scripts.h"
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

/* Answers 503 for a Redis failure; why: this request's own message of it. */
static void redis_down(struct response *res, const char *why)
{
    exact_read_error(res, why, 0); /* the same 503 as a status read's that Redis failed */
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

struct admin {
    struct areq *ar;
    struct app *app;
    char sku[VALIDATE_SKU_MAX + 1];
    const char *key;                                        /* Idempotency-Key, or NULL */
    char claim[STORE_KEY_MAX + VALIDATE_PRINTABLE_MAX + 8]; /* its Redis name */
    char answer[1024];                                      /* PUT: the stored answer */
    int replay;
    char segs[24], stock[24];
    struct sku_rules rules;              /* PUT: the body's rules; PATCH: the body's, pfields set */
    unsigned pfields;                    /* PATCH: the rules the body sets */
    void (*group_next)(struct admin *a); /* group_check: the write, the group found */
    long long rid, qty;                  /* restock */
    char pending[64];
    int write;                  /* PUT, restock, DELETE: a 2xx waits for --redis-replica-acks */
    int waited;                 /* that WAIT was done */
    int loosen;                 /* PUT, PATCH: a 2xx may end a refusal made from cached rules */
    struct event *loosen_timer; /* the wait for those caches (admin_end), or NULL */
    struct store_conns conns;   /* the connections its commands went on: the WAITs go there */
    char why[LAYOUT_WHY_MAX];   /* this request's last Redis failure, for its log line */
};

/* Keeps the message of a failure of a's own (lockcore's errstr, a layout's why). */
static void admin_why(struct admin *a, const char *why)
{
    snprintf(a->why, sizeof(a->why), "%s", why ? why : "");
}

static struct admin *admin_new(struct areq *ar)
{
    struct admin *a = calloc(1, sizeof(*a));
    if (!a) {
        response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        areq_done(ar);
        return NULL;
    }
    a->ar = ar;
    a->app = ar->app;
    return a;
}

static void on_admin_acked(void *arg, long long got);

/* Sends the answer and frees a. With --redis-replica-acks N, a write's 2xx waits first until N
 * replicas of every master it touched have it (the SKU's meta and its segments live on several
 * masters), as an order's 201 does: a WAIT on each connection its commands went on, which
 * covers what each of them wrote or read there (a replay's reads: the state it vouches for). */
static void admin_end(struct admin *a);

/* The caches have gone stale (or the loop is ending): the answer goes on. */
static void on_caches_stale(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct admin *a = arg;
    event_free(a->loosen_timer);
    a->loosen_timer = NULL;
    a->ar->cancel = NULL;
    admin_end(a);
}

static void admin_cancel_wait(struct areq *ar)
{
    on_caches_stale(-1, 0, ar->handler);
}

/* A rule change that may end a refusal another instance makes from its cached rules (the
 * window's fast answer, user_required: order_fsm.c rules_begin) is answered only once every
 * such copy read before the change reached Redis has gone stale: a copy ages from its read's
 * send (skucache_set_layout), at most CONFIG_RECHECK_MAX_MS on any instance. So a 2xx holds for
 * every order that starts after it (SPEC §11), the refusals included; the commit's rules
 * version covers everything else. 0: waiting; -1: could not arm the timer (answers now). */
static int admin_wait_caches(struct admin *a)
{
    struct areq *ar = a->ar;
    a->loosen_timer = evtimer_new(ar->base, on_caches_stale, a);
    struct timeval tv = {CONFIG_RECHECK_MAX_MS / 1000,
                         (CONFIG_RECHECK_MAX_MS % 1000) * 1000 + 50000};
    if (!a->loosen_timer || evtimer_add(a->loosen_timer, &tv) != 0) {
        if (a->loosen_timer)
            event_free(a->loosen_timer);
        a->loosen_timer = NULL;
        return -1;
    }
    ar->handler = a;
    ar->cancel = admin_cancel_wait;
    return 0;
}

static void admin_end(struct admin *a)
{
    struct areq *ar = a->ar;
    if (a->loosen && ar->res.status / 100 == 2) {
        a->loosen = 0;
        if (admin_wait_caches(a) == 0)
            return;
    }
    int acks = a->app->cfg.redis_replica_acks;
    if (a->write && !a->waited && acks > 0 && ar->res.status / 100 == 2) {
        a->waited = 1;
        store_replica_wait_conns_async(ar->lc, ar, &a->conns, acks, a->app->cfg.redis_timeout_ms,
                                       on_admin_acked, a);
        return;
    }
    if (a->write && a->sku[0])
        statsnap_forget(a->app->snaps, a->sku); /* this instance's next status read is fresh */
    free(a);
    areq_done(ar);
}

/* Fewer acknowledgements than asked: the write is applied on the masters but may not survive
 * a failover, so the answer is 503 with "outcome":"unknown" (a retry with the same
 * Idempotency-Key, or a read, tells). */
static void on_admin_acked(void *arg, long long got)
{
    struct admin *a = arg;
    int want = a->app->cfg.redis_replica_acks;
    if (got < want) {
        log_msg(CONFIG_LOG_WARN, "sku_replica_ack_missing",
                "sku %s: written, but on %lld of %d replicas of some master", a->sku,
                got < 0 ? 0 : got, want);
        response_outcome_unknown(&a->ar->res,
                                 "the change was applied but fewer replicas than "
                                 "--redis-replica-acks confirmed it in time, so a failover "
                                 "could undo it: retry with the same Idempotency-Key, or read "
                                 "the SKU");
    }
    admin_end(a);
}

/* A write's admin (PUT, PATCH, restock, DELETE: its 2xx waits for --redis-replica-acks) with
 * its {sku} checked; NULL when it is already answered (out of memory, a bad name). */
static struct admin *admin_write_new(struct areq *ar)
{
    struct admin *a = admin_new(ar);
    if (!a)
        return NULL;
    a->write = 1;
    if (stock_sku_param(&ar->req, &ar->res, a->sku) != 0) {
        admin_end(a);
        return NULL;
    }
    return a;
}

static void admin_down(struct admin *a)
{
    redis_down(&a->ar->res, a->why);
    admin_end(a);
}

/* ---- the limit group a PUT or PATCH names (docs/design.md "Limit groups") ---- */

static void on_group_exists(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct admin *a = arg;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_INTEGER) {
        admin_why(a, st != LC_OK ? errstr : "EXISTS: unexpected reply");
        admin_down(a);
        return;
    }
    if (r->integer == 0) {
        char msg[320];
        snprintf(msg, sizeof(msg),
                 "limit_group: no group \"%s\" (PUT /api/v1/groups/%s first); nothing was "
                 "changed",
                 a->rules.limit_group, a->rules.limit_group);
        response_error(&a->ar->res, ERROR_UNKNOWN_GROUP, msg);
        admin_end(a);
        return;
    }
    a->group_next(a);
}

/* A PUT's or PATCH's limit_group must name a group a PUT of it made: 422 unknown_group and
 * nothing written, else next(a). The group's meta is in its own slot (another master on a
 * cluster), so this is a read before the SKU's write, not inside it: a DELETE of the group
 * between the two leaves the SKU naming a group that is gone, which caps nothing (the
 * reservation finds no group: group_reserve.lua answers "free"), as a DELETE of a group named
 * by SKUs does by design. "" (none) is always fine. */
static void group_check(struct admin *a, const char *group, void (*next)(struct admin *a))
{
    if (!group[0]) {
        next(a);
        return;
    }
    a->group_next = next;
    char meta[STORE_KEY_MAX];
    store_group_key(meta, group, "meta");
    const char *argv[2] = {"EXISTS", meta};
    store_command_async(a->ar->lc, a->ar, 2, argv, on_group_exists, a);
}

/* True when the intent script whose callback got st may have run: it answered (LC_OK), or it
 * was sent and its reply lost (LC_EIO). An error reply (LC_EREDIS: the scripts check before
 * their first write) or a call that never started changed nothing. */
static int may_have_run(lc_status st)
{
    return st == LC_OK || st == LC_EIO;
}

/* What each write's "outcome unknown" tells its client to do. */
static const char *const unknown_put =
    "the stock store failed after the PUT reached it: it may be applied (a recorded PUT is "
    "completed by the next read of the SKU); retry with the same Idempotency-Key, or read the "
    "SKU's version, to find out";
static const char *const unknown_restock =
    "the stock store failed after the restock reached it: it may be applied or pending (a "
    "pending restock is completed by the next read of the SKU); retry with the same "
    "Idempotency-Key, or read the SKU, to find out: a retry without the key may add the units "
    "twice";
static const char *const unknown_delete =
    "the stock store failed after the DELETE reached it: it may be applied; read the SKU, or "
    "delete again (404 once it is gone)";

/* Fills the 503 with "outcome":"unknown" (why: what the client does); does not end a. */
static void admin_unknown(struct admin *a, const char *why)
{
    log_msg(CONFIG_LOG_WARN, "sku_outcome_unknown", "sku %s: %s", a->sku,
            a->why[0] ? a->why : "no reply");
    metrics_redis_error();
    response_outcome_unknown(&a->ar->res, why);
}

/* ---- PUT ---- */

static void put_end(struct admin *a);

/* A replay's check of the segments (--redis-replica-acks): every segment read at the layout's
 * version, on the connections the 2xx's WAITs then go on. */
static void put_on_replay_checked(void *arg, int found, json_t *st, const char *why,
                                  int out_of_step)
{
    (void)out_of_step;
    struct admin *a = arg;
    json_decref(st);
    if (found < 0) {
        /* A segment is not at the layout (its master lost its part in a failover, and it is
         * not healed yet) or Redis failed: the stored 2xx would vouch for what is not there. */
        log_msg(CONFIG_LOG_WARN, "sku_put",
                "sku %s: Idempotency-Key replay: segments not confirmed (%s)", a->sku, why);
        struct response *res = &a->ar->res;
        response_error(res, ERROR_UNAVAILABLE,
                       "the PUT was recorded but its segments could not be confirmed: retry "
                       "with the same Idempotency-Key, or read the SKU");
        if (res->body)
            json_object_set_new(res->body, "outcome", json_string("unknown"));
        admin_end(a);
        return;
    }
    log_msg(CONFIG_LOG_INFO, "sku_put", "sku %s: %s segments, stock %s (Idempotency-Key replay)",
            a->sku, a->segs, a->stock);
    put_end(a);
}

static void on_reregistered(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)r;
    struct admin *a = arg;
    store_conns_note(&a->conns, a->ar->lc);
    if (st != LC_OK)
        log_msg(CONFIG_LOG_WARN, "sku_registry",
                "sku %s: adding it to the registry again after its write: %s", a->sku, errstr);
    admin_end(a);
}

/* SADD of a->sku to the registry, then cb. */
static void registry_add(struct admin *a, lc_async_reply_fn cb)
{
    const char *argv[3] = {"SADD", store_registry_key(), a->sku};
    store_command_async(a->ar->lc, a->ar, 3, argv, cb, a);
}

/* A PUT that wrote the SKU adds it to the registry once more, best effort: a DELETE that
 * unregistered it between the PUT's first SADD and its meta write (the registry is another
 * slot, so nothing orders the two) would otherwise leave a live SKU out of it. */
static void put_end(struct admin *a)
{
    if (a->ar->res.status / 100 != 2) {
        admin_end(a);
        return;
    }
    registry_add(a, on_reregistered);
}

static void put_on_settled(void *arg, int found, struct layout *l)
{
    struct admin *a = arg;
    if (found < 0) {
        admin_why(a, l->why);
        /* The new layout is in meta: the next reader rolls it out. */
        admin_unknown(a, unknown_put);
        admin_end(a);
        return;
    }
    if (a->replay && a->app->cfg.redis_replica_acks > 0 && found > 0 &&
        stored_answer(&a->ar->res, a->answer) == 0 && a->ar->res.status / 100 == 2) {
        /* A replay reads only the SKU's master: read every segment too, so that the WAITs
         * before the stored 2xx cover the segments as they are now. */
        exact_read_async(a->ar, a->sku, &a->conns, put_on_replay_checked, a);
        return;
    }
    if (stored_answer(&a->ar->res, a->answer) != 0) {
        response_error(&a->ar->res, ERROR_INVALID_REQUEST,
                       "Idempotency-Key: already used by another kind of request");
        admin_end(a);
        return;
    }
    log_msg(CONFIG_LOG_INFO, "sku_put", "sku %s: %s segments, stock %s%s", a->sku, a->segs,
            a->stock, a->replay ? " (Idempotency-Key replay)" : "");
    put_end(a);
}

static void on_put_meta(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct admin *a = arg;
    store_conns_note(&a->conns, a->ar->lc);
    if (st != LC_OK)
        admin_why(a, errstr);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->elements > 3 ||
        r->element[1]->type != REDIS_REPLY_STRING) {
        if (may_have_run(st)) {
            admin_unknown(a, unknown_put);
            admin_end(a);
        } else {
            admin_down(a);
        }
        return;
    }
    a->replay = r->element[0]->integer == 0;
    /* a rule that was set changed: it may end a refusal made from cached rules */
    a->loosen = r->elements == 3 && r->element[2]->type == REDIS_REPLY_INTEGER &&
                r->element[2]->integer == 1;
    snprintf(a->answer, sizeof(a->answer), "%s", r->element[1]->str);
    skucache_forget(a->app->cache, a->sku);
    faultpoint("put_meta"); /* tests: the new layout in meta, not yet rolled out */
    /* Roll the layout out (a replay too: the first try may have been cut off before). */
    layout_settle_for_async(a->app->store, a->ar->lc, a->ar, a->sku, 0, &a->conns, put_on_settled,
                            a);
}

/* The PUT's meta write (PUT_META), once the SKU is in the registry. */
static void on_registered(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)r;
    struct admin *a = arg;
    store_conns_note(&a->conns, a->ar->lc);
    if (st != LC_OK) {
        /* Nothing of the SKU is written (at most a registry entry of a SKU that may not
         * exist, which every reader of the registry expects): a plain 503. */
        admin_why(a, errstr);
        admin_down(a);
        return;
    }
    char meta[STORE_KEY_MAX], ver[STORE_KEY_MAX], rst[STORE_KEY_MAX], users[STORE_KEY_MAX];
    store_sku_key(meta, a->sku, "meta");
    store_sku_key(ver, a->sku, "ver");
    store_sku_key(rst, a->sku, "rst");
    store_sku_key(users, a->sku, "users");
    char members[1024] = "", vals[RULES_N][RULES_STR_MAX + 1];
    const struct sku_rules *ru = &a->rules;
    /* The answer's rule members, as rules_to_json writes them ('{' and '}' cut off). */
    json_t *o = json_object();
    char *text =
        o && rules_to_json(ru, o) == 0 ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    size_t n = text ? strlen(text) : 0;
    if (n < 2 || n - 2 >= sizeof(members)) {
        free(text);
        admin_why(a, "out of memory");
        admin_down(a);
        return;
    }
    memcpy(members, text + 1, n - 2);
    members[n - 2] = '\0';
    free(text);
    char multi[STORE_KEY_MAX];
    store_sku_key(multi, a->sku, "multi");
    const char *keys[6] = {meta, ver, rst, a->key ? a->claim : meta, users, multi};
    const char *args[6 + 2 * RULES_N] = {a->segs,          a->stock, a->sku, a->key ? "1" : "0",
                                         STOCK_KEY_TTL_MS, members};
    for (int i = 0; i < RULES_N; i++) { /* each rule's meta field and value */
        rules_meta_text(ru, i, vals[i], sizeof(vals[i]));
        args[6 + 2 * i] = rules_script_field(i);
        args[7 + 2 * i] = vals[i];
    }
    store_script_async(a->app->store, a->ar->lc, a->ar, SCRIPT_PUT_META, 6, keys, 6 + 2 * RULES_N,
                       args, on_put_meta, a);
}

/* PUT's first write, the limit group (if any) found. */
static void put_register(struct admin *a)
{
    registry_add(a, on_registered);
}

/* The answer of a PUT: the stored "<status> <body>" of the meta script. The SKU goes into the
 * registry first, so that a SKU in meta is always in the registry (docs/design.md). */
void stock_put_async(struct areq *ar)
{
    const struct request *req = &ar->req;
    struct admin *a = admin_write_new(ar);
    if (!a)
        return;
    struct validate_put_sku body;
    struct validate_error verr;
    if (validate_put_sku_body(req->body, req->body_len, &body, &verr) != 0) {
        response_error(&ar->res, verr.code, verr.message);
        admin_end(a);
        return;
    }
    if (admin_key(req, &ar->res, a->sku, "put", &a->key, a->claim, sizeof(a->claim)) != 0) {
        admin_end(a);
        return;
    }
    snprintf(a->segs, sizeof(a->segs), "%" PRId64, body.segments);
    snprintf(a->stock, sizeof(a->stock), "%" PRId64, body.stock);
    a->rules = body.rules;
    group_check(a, a->rules.limit_group, put_register);
}

/* ---- PATCH (the sale rules) ---- */

static const char *const unknown_patch =
    "the stock store failed after the PATCH reached it: it may be applied; read the SKU, or "
    "send the same PATCH again (it sets the same rules)";

/* Every segment holds the new rules version: the PATCH's answer (docs/design.md "The sale
 * rules' version": an order judged by older rules is refused by its commit from now on). */
static void on_rules_pushed(void *arg, const char *failed, const struct store_item *items, int n)
{
    (void)items;
    (void)n;
    struct admin *a = arg;
    struct response *res = &a->ar->res;
    const struct sku_rules *ru = &a->rules;
    if (failed) {
        admin_why(a, failed);
        admin_unknown(a, unknown_patch); /* written to meta: stale instances may judge by old */
        admin_end(a);
        return;
    }
    json_t *body = json_pack("{s:s}", "sku", a->sku);
    if (!body || rules_to_json(ru, body) != 0) {
        json_decref(body);
        response_error(res, ERROR_INTERNAL, "out of memory");
    } else {
        char *text = json_dumps(body, JSON_COMPACT);
        log_msg(CONFIG_LOG_INFO, "sku_patch", "sku %s: rules %s (version %" PRId64 ")", a->sku,
                text ? text : "(out of memory)", ru->version);
        free(text);
        response_json(res, 200, body);
    }
    admin_end(a);
}

/* Raises the rules version key of segments [0, nseg) to a->rules.version (rules_push.lua, one
 * pipelined batch), then answers. */
static void patch_push(struct admin *a, int nseg)
{
    if (nseg < 1 || nseg > STORE_SEGMENTS_MAX) {
        admin_why(a, "patch_rules: a segment count out of range");
        admin_unknown(a, unknown_patch);
        admin_end(a);
        return;
    }
    char(*names)[STORE_KEY_MAX] = malloc(sizeof(*names) * (size_t)nseg);
    const char **keys = malloc(sizeof(*keys) * (size_t)nseg);
    const char **args = malloc(sizeof(*args) * (size_t)nseg);
    char v[24];
    snprintf(v, sizeof(v), "%" PRId64, a->rules.version);
    if (!names || !keys || !args) {
        free(names);
        free(keys);
        free(args);
        admin_why(a, "out of memory");
        admin_unknown(a, unknown_patch);
        admin_end(a);
        return;
    }
    struct seg_keys sk;
    for (int k = 0; k < nseg; k++) {
        store_seg_keys(a->sku, k, &sk);
        memcpy(names[k], sk.rver, sizeof(names[k]));
        keys[k] = names[k];
        args[k] = v;
    }
    store_batch_async(a->app->store, a->ar->lc, a->ar, SCRIPT_RULES_PUSH, nseg, 1, keys, 1, args,
                      &a->conns, on_rules_pushed, a);
    free(names);
    free(keys);
    free(args);
}

static void on_patch_rules(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct admin *a = arg;
    struct response *res = &a->ar->res;
    store_conns_note(&a->conns, a->ar->lc);
    if (st != LC_OK)
        admin_why(a, errstr);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        if (st == LC_EIO || st == LC_OK)
            admin_unknown(a, unknown_patch);
        else
            redis_down(res, a->why); /* refused (a damaged number) or never sent */
        admin_end(a);
        return;
    }
    long long code = r->element[0]->integer;
    if (code == STORE_PATCH_NONE) {
        response_error(res, ERROR_UNKNOWN_SKU, "no such sku");
    } else if (code == STORE_PATCH_INVALID && r->elements == 3) {
        char start[32], end[32], msg[200];
        rules_format_time(store_reply_int(r->element[1], 0), start);
        rules_format_time(store_reply_int(r->element[2], 0), end);
        snprintf(msg, sizeof(msg),
                 "sale_end: must be after sale_start (with this PATCH the SKU's would be %s and "
                 "%s); nothing was changed",
                 start, end);
        response_error(res, ERROR_INVALID_REQUEST, msg);
    } else if (code == STORE_PATCH_OK && r->elements == 3 + RULES_N) {
        memset(&a->rules, 0, sizeof(a->rules));
        a->rules.version = store_reply_int(r->element[1], 0);
        for (int i = 0; i < RULES_N; i++) {
            const redisReply *e = r->element[3 + i];
            if (rules_rows[i].kind == RULES_KIND_STR)
                rules_set_str(&a->rules, i, e->type == REDIS_REPLY_STRING ? e->str : "",
                              e->type == REDIS_REPLY_STRING ? e->len : 0);
            else
                rules_set(&a->rules, i, store_reply_int(e, 0));
        }
        skucache_forget(a->app->cache, a->sku);
        patch_push(a, (int)store_reply_int(r->element[2], 0));
        return;
    } else {
        admin_why(a, "patch_rules: unexpected reply");
        admin_unknown(a, unknown_patch);
    }
    admin_end(a);
}

static void patch_send(struct admin *a);

/* PATCH /api/v1/skus/{sku}: the given rule fields replace the SKU's, atomically (PATCH_RULES),
 * and the merged rules are the answer. */
void stock_patch_async(struct areq *ar)
{
    const struct request *req = &ar->req;
    struct admin *a = admin_write_new(ar);
    if (!a)
        return;
    struct validate_patch_rules body;
    struct validate_error verr;
    if (validate_patch_rules_body(req->body, req->body_len, &body, &verr) != 0) {
        response_error(&ar->res, verr.code, verr.message);
        admin_end(a);
        return;
    }
    a->rules = body.rules;
    a->pfields = body.fields;
    group_check(a, (body.fields & RULES_BIT(limit_group)) ? a->rules.limit_group : "", patch_send);
}

/* PATCH's write (PATCH_RULES), the limit group (if any) found. */
static void patch_send(struct admin *a)
{
    struct areq *ar = a->ar;
    struct validate_patch_rules body = {.rules = a->rules, .fields = a->pfields};
    char meta[STORE_KEY_MAX], v[RULES_N][RULES_STR_MAX + 2];
    store_sku_key(meta, a->sku, "meta");
    const char *keys[1] = {meta};
    const char *args[1 + 2 * RULES_N] = {"0"}; /* no version to pass; each rule: field, value */
    for (int i = 0; i < RULES_N; i++) {
        v[i][0] = '\0'; /* "": keep the SKU's */
        if ((body.fields & (1u << i)) && rules_rows[i].kind == RULES_KIND_STR)
            /* "=<name>", "=" for none: "" is "keep" (patch_rules.lua) */
            snprintf(v[i], sizeof(v[i]), "=%s", rules_get_str(&body.rules, i));
        else if (body.fields & (1u << i))
            snprintf(v[i], sizeof(v[i]), "%" PRId64, rules_get(&body.rules, i));
        if ((body.fields & (1u << i)) && rules_rows[i].error != ERROR_NONE)
            a->loosen = 1; /* a rule that refuses orders: it may end a cached refusal */
        args[1 + 2 * i] = rules_script_field(i);
        args[2 + 2 * i] = v[i];
    }
    store_script_async(a->app->store, ar->lc, ar, SCRIPT_PATCH_RULES, 1, keys, 1 + 2 * RULES_N,
                       args, on_patch_rules, a);
}

/* ---- restock ---- */

static void on_answer_stored(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)st; /* best effort: a failure leaves the key pending, and a retry with it then
                 finishes the same restock again */
    (void)r;
    (void)errstr;
    struct admin *a = arg;
    store_conns_note(&a->conns, a->ar->lc);
    admin_end(a);
}

static void restock_store_answer(struct admin *a);

/* The restock's writes on every master it touched are on the replicas (or not) before its
 * answer is stored as the key's "done" marker: a stored 2xx is replayed on a read of the SKU's
 * master alone, so it must never name writes a failover of a segment's master could lose. */
static void on_restock_acked(void *arg, long long got)
{
    struct admin *a = arg;
    if (got < a->app->cfg.redis_replica_acks) {
        a->waited = 1;          /* answered now: no second WAIT */
        on_admin_acked(a, got); /* 503 outcome unknown; the key stays pending */
    } else {
        restock_store_answer(a);
    }
}

/* The end of a restock: the answer is stored with the admin key (when there is one and the
 * answer is final), logged, and sent. */
static void restock_end(struct admin *a)
{
    struct response *res = &a->ar->res;
    if (res->status == 200)
        log_msg(CONFIG_LOG_INFO, "sku_restock", "sku %s: %lld units added (restock %lld)", a->sku,
                a->qty, a->rid);
    if (!a->key || (res->status != 200 && res->status != 409) || !res->body) {
        admin_end(a);
        return;
    }
    if (a->app->cfg.redis_replica_acks > 0) {
        store_replica_wait_conns_async(a->ar->lc, a->ar, &a->conns, a->app->cfg.redis_replica_acks,
                                       a->app->cfg.redis_timeout_ms, on_restock_acked, a);
        return;
    }
    restock_store_answer(a);
}

/* Stores the restock's final answer with its key (IDEM_SWAP from the pending value), then
 * answers. */
static void restock_store_answer(struct admin *a)
{
    struct response *res = &a->ar->res;
    char *body = json_dumps(res->body, JSON_COMPACT);
    if (!body) {
        admin_end(a);
        return;
    }
    size_t len = strlen(body) + 8;
    char *value = malloc(len);
    if (!value) {
        free(body);
        admin_end(a);
        return;
    }
    snprintf(value, len, "%d %s", res->status, body);
    const char *keys[1] = {a->claim};
    const char *args[2] = {a->pending, value};
    store_script_async(a->app->store, a->ar->lc, a->ar, SCRIPT_IDEM_SWAP, 1, keys, 2, args,
                       on_answer_stored, a);
    free(value);
    free(body);
}

static void restock_on_status(void *arg, int found, json_t *st, const char *why, int out_of_step)
{
    struct admin *a = arg;
    struct response *res = &a->ar->res;
    if (found < 0) {
        if (!out_of_step)
            admin_why(a, why); /* the log line names Redis's failure (out of step: logged) */
        admin_unknown(a, unknown_restock); /* applied; the status could not be read */
    } else if (found == 0) {
        response_error(res, ERROR_SKU_CHANGED,
                       "the SKU was deleted after the restock: nothing of it is left");
    } else {
        json_object_set_new(st, "added", json_integer((json_int_t)a->qty));
        response_json(res, 200, st);
    }
    restock_end(a);
}

static void on_restock_state(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct admin *a = arg;
    store_conns_note(&a->conns, a->ar->lc);
    if (st != LC_OK)
        admin_why(a, errstr);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_INTEGER ||
        r->integer == STORE_RESTOCK_PENDING) {
        /* Registered, and not yet everywhere (this settle had more to do than it may do, or
         * failed) or unknown: never "nothing was added". */
        admin_unknown(a, unknown_restock);
        restock_end(a);
        return;
    }
    if (r->integer != STORE_RESTOCK_DONE) {
        response_error(&a->ar->res, ERROR_SKU_CHANGED,
                       "the SKU was re-initialised or deleted while restocking: nothing was "
                       "added to its current layout");
        restock_end(a);
        return;
    }
    exact_read_async(a->ar, a->sku, &a->conns, restock_on_status, a);
}

static void restock_on_settled(void *arg, int found, struct layout *l)
{
    (void)l;
    struct admin *a = arg;
    if (found < 0) {
        admin_why(a, l->why);
        admin_unknown(a, unknown_restock); /* registered: the next reader applies it */
        restock_end(a);
        return;
    }
    /* Asked of Redis, not looked up in l: l lists only the first LAYOUT_MAX_RESTOCKS. */
    char rst[STORE_KEY_MAX], rres[STORE_KEY_MAX], suffix[40], rid[24];
    store_sku_key(rst, a->sku, "rst");
    snprintf(suffix, sizeof(suffix), "rres:%lld", a->rid);
    store_sku_key(rres, a->sku, suffix);
    snprintf(rid, sizeof(rid), "%lld", a->rid);
    const char *keys[2] = {rst, rres};
    const char *args[1] = {rid};
    store_script_async(a->app->store, a->ar->lc, a->ar, SCRIPT_RESTOCK_STATE, 2, keys, 1, args,
                       on_restock_state, a);
}

/* Settles sku (which applies restock rid with everything else pending) and answers: 200 with
 * the status and "added" when rid reached every segment, 409 sku_changed when a PUT or DELETE
 * came first, 503 with "outcome":"unknown" when it is still pending or Redis failed (a retry
 * with the same key, or the next reader, completes it). */
static void finish_restock(struct admin *a)
{
    layout_settle_for_async(a->app->store, a->ar->lc, a->ar, a->sku, 0, &a->conns,
                            restock_on_settled, a);
}

static void on_restock_begin(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct admin *a = arg;
    store_conns_note(&a->conns, a->ar->lc);
    if (st != LC_OK)
        admin_why(a, errstr);
    struct response *res = &a->ar->res;
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        if (may_have_run(st)) {
            admin_unknown(a, unknown_restock);
            admin_end(a);
        } else {
            admin_down(a);
        }
        return;
    }
    long long code = r->element[0]->integer;
    char stored[1024] = "";
    if (code == 1 && r->elements >= 2)
        a->rid = store_reply_int(r->element[1], 0);
    else if (code == 0 && r->elements >= 2 && r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(stored, sizeof(stored), "%s", r->element[1]->str);
    skucache_forget(a->app->cache, a->sku);
    if (code == -1) {
        response_error(res, ERROR_UNKNOWN_SKU, "no such sku");
        admin_end(a);
        return;
    }
    if (code == 0) {
        /* A replay: the stored answer, or a restock the first try left running. */
        if (sscanf(stored, "P %lld %lld", &a->rid, &a->qty) != 2) {
            if (stored_answer(res, stored) != 0)
                response_error(res, ERROR_INVALID_REQUEST,
                               "Idempotency-Key: already used by another kind of request");
            admin_end(a);
            return;
        }
        snprintf(a->pending, sizeof(a->pending), "%s", stored);
    } else if (a->key) {
        snprintf(a->pending, sizeof(a->pending), "P %lld %lld", a->rid, a->qty);
    }
    finish_restock(a);
}

void stock_restock_async(struct areq *ar)
{
    const struct request *req = &ar->req;
    struct admin *a = admin_write_new(ar);
    if (!a)
        return;
    struct validate_restock body;
    struct validate_error verr;
    if (validate_restock_body(req->body, req->body_len, &body, &verr) != 0) {
        response_error(&ar->res, verr.code, verr.message);
        admin_end(a);
        return;
    }
    if (admin_key(req, &ar->res, a->sku, "restock", &a->key, a->claim, sizeof(a->claim)) != 0) {
        admin_end(a);
        return;
    }
    a->qty = body.quantity;
    char meta[STORE_KEY_MAX], rst[STORE_KEY_MAX], units[24];
    store_sku_key(meta, a->sku, "meta");
    store_sku_key(rst, a->sku, "rst");
    snprintf(units, sizeof(units), "%" PRId64, body.quantity);
    const char *keys[3] = {meta, rst, a->key ? a->claim : meta};
    const char *args[3] = {units, a->key ? "1" : "0", STOCK_KEY_TTL_MS};
    store_script_async(a->app->store, ar->lc, ar, SCRIPT_RESTOCK_BEGIN, 3, keys, 3, args,
                       on_restock_begin, a);
}

/* ---- DELETE ---- */

static void delete_on_readded(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)r;
    struct admin *a = arg;
    store_conns_note(&a->conns, a->ar->lc);
    if (st != LC_OK)
        log_msg(CONFIG_LOG_WARN, "sku_registry",
                "sku %s: a PUT came after the DELETE, and adding it back to the registry "
                "failed: %s",
                a->sku, errstr);
    admin_end(a);
}

/* A reply's integer field ("12"), 0 when missing or not a number. */
static long long reply_field(const redisReply *r, size_t i)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || i >= r->elements || !r->element[i] ||
        r->element[i]->type != REDIS_REPLY_STRING)
        return 0;
    return strtoll(r->element[i]->str, NULL, 10);
}

static void delete_on_rechecked(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct admin *a = arg;
    store_conns_note(&a->conns, a->ar->lc);
    /* A PUT that came meanwhile (its SADD may have been before the SREM), or no answer: the SKU
     * goes back into the registry, where a reader skips it if it does not exist. */
    if (st != LC_OK || reply_field(r, 0) > 0 || reply_field(r, 1) > 0) {
        (void)errstr;
        registry_add(a, delete_on_readded);
        return;
    }
    admin_end(a);
}

static void on_unregistered(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)r;
    struct admin *a = arg;
    store_conns_note(&a->conns, a->ar->lc);
    if (st != LC_OK) {
        log_msg(CONFIG_LOG_WARN, "sku_registry",
                "sku %s: deleted, but removing it from the registry failed (readers of the "
                "registry skip SKUs that do not exist): %s",
                a->sku, errstr);
        admin_end(a);
        return;
    }
    char meta[STORE_KEY_MAX];
    store_sku_key(meta, a->sku, "meta");
    const char *argv[4] = {"HMGET", meta, "segments", "lhwm"};
    store_command_async(a->ar->lc, a->ar, 4, argv, delete_on_rechecked, a);
}

static void delete_on_logs(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct admin *a = arg;
    store_conns_note(&a->conns, a->ar->lc);
    if (st != LC_OK || reply_field(r, 0) > 0 || reply_field(r, 1) > 0) {
        /* Order logs of its segments are left (lhwm), or a PUT came: it stays in the registry,
         * where inventory-sink finds the logs, and removes it once it has drained them. */
        if (st != LC_OK)
            log_msg(CONFIG_LOG_WARN, "sku_registry",
                    "sku %s: deleted; left in the registry (its meta could not be read: %s)",
                    a->sku, errstr);
        admin_end(a);
        return;
    }
    const char *argv[3] = {"SREM", store_registry_key(), a->sku};
    store_command_async(a->ar->lc, a->ar, 3, argv, on_unregistered, a);
}

static void delete_on_settled(void *arg, int found, struct layout *l)
{
    struct admin *a = arg;
    a->ar->res.status = 204;
    if (found != 0) {
        /* found < 0: keys left for the next settle, and the SKU in the registry; found > 0: a
         * PUT wrote the SKU again after this DELETE, and registered it. */
        if (found < 0)
            log_msg(CONFIG_LOG_WARN, "sku_delete", "sku %s: keys left for the next settle: %s",
                    a->sku, l->why);
        admin_end(a);
        return;
    }
    /* The SKU leaves the registry only once nothing of it is left to find: its dropped
     * segments' order logs (meta's lhwm) stay until inventory-sink drained them (docs/design.md
     * "Streams found and dropped"). */
    char meta[STORE_KEY_MAX];
    store_sku_key(meta, a->sku, "meta");
    const char *argv[4] = {"HMGET", meta, "segments", "lhwm"};
    store_command_async(a->ar->lc, a->ar, 4, argv, delete_on_logs, a);
}

static void on_delete_meta(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct admin *a = arg;
    store_conns_note(&a->conns, a->ar->lc);
    if (st != LC_OK)
        admin_why(a, errstr);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_INTEGER) {
        if (may_have_run(st)) {
            admin_unknown(a, unknown_delete);
            admin_end(a);
        } else {
            admin_down(a);
        }
        return;
    }
    long long version = r->integer;
    skucache_forget(a->app->cache, a->sku);
    if (version == 0) {
        response_error(&a->ar->res, ERROR_UNKNOWN_SKU, "no such sku");
        admin_end(a);
        return;
    }
    /* The SKU is gone from here on (its meta says 0 segments); its keys go now, or with the
     * next settle when this one fails; then its registry entry (delete_on_settled). */
    layout_settle_for_async(a->app->store, a->ar->lc, a->ar, a->sku, 0, &a->conns,
                            delete_on_settled, a);
}

void stock_delete_async(struct areq *ar)
{
    struct admin *a = admin_write_new(ar);
    if (!a)
        return;
    char meta[STORE_KEY_MAX], ver[STORE_KEY_MAX], rst[STORE_KEY_MAX], users[STORE_KEY_MAX],
        multi[STORE_KEY_MAX];
    store_sku_key(meta, a->sku, "meta");
    store_sku_key(ver, a->sku, "ver");
    store_sku_key(rst, a->sku, "rst");
    store_sku_key(users, a->sku, "users");
    store_sku_key(multi, a->sku, "multi");
    struct gate_keys g; /* the waiting room goes with the SKU */
    gate_store_keys(a->sku, &g);
    const char *keys[9] = {meta, ver, rst, users, multi, g.q, g.line, g.adm, g.live};
    store_script_async(a->app->store, ar->lc, ar, SCRIPT_DELETE_META, 9, keys, 0, NULL,
                       on_delete_meta, a);
}
