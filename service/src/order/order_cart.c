/*
 * A cart: one order of several SKUs, all or nothing (order_cart.h; SPEC §17; docs/design.md
 * "Carts (SPEC §17)" says why each step). Each item is an order of the order machine
 * (order_fsm.c) in item mode: its layout, its Idempotency-Key claim (the home item's alone: a
 * replay answers the stored cart), its waiting room's ticket, its sale window and its per-user
 * limit (the reservation path) run as for an order of one SKU; then, instead of walking, it
 * hands itself to the cart (OS_CART), which plans it in its lock turn (order_multi.h, probe). The
 * cart then:
 *
 *   CT_ITEMS    every item's order runs up to its hand-over (or answers: the cart's refusal);
 *               again for one item when its SKU turned out to be at another layout version
 *               (replan: every lock dropped, its layout and stock re-read)
 *   CT_LOCK     each item's locks, one item after the other in sorted SKU order, each item's
 *               segments as a multi-segment order takes them (order_multi.c, multi_lock)
 *   CT_INTENT   cart_begin.lua on the home SKU's slot, then its WAIT
 *   CT_HOLD     --hold-ms under every lock (critical)
 *   CT_PARTS    every item's parts but the primary (multi_commit, all items at once), their
 *               WAITs
 *   CT_PRIMARY  the primary's commit and its WAIT (multi_cart_primary)
 *   CT_UNDO     multi_cart_undo on every item with parts made (the primary not written)
 *   CT_END      HDEL of the intent (left when a part may still exist, or the primary's outcome
 *               is unknown: the healer ends it)
 *   CT_SETTLE   each item ended with the cart's outcome (order_item_end: its reservation
 *               released on a failure, its claims settled), then the answer
 *   CT_DONE     answered
 *
 * Locks are only ever waited for in the global order (SKU, segment): a cart holds the locks of
 * the items before the one it is taking, all of lower SKUs, and an item waits in index order
 * after dropping its own (order_multi.c); single orders never hold two locks. So no deadlock
 * between carts, multi-segment orders and single orders.
 */
#include "order_cart.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "app.h"
#include "areq.h"
#include "clock.h"
#include "faultpoint.h"
#include "ids.h"
#include "log.h"
#include "metrics.h"
#include "order_io.h"
#include "order_limit.h"
#include "order_multi.h"
#include "order_outcome.h"
#include "order_status.h"
#include "orderlog.h"
#include "rules.h"
#include "skucache.h"
#include "store.h"
#include "store_scripts.h"
#include "validate.h"

enum ctstate {
    CT_IDLE,
    CT_ITEMS,
    CT_LOCK,
    CT_INTENT,
    CT_HOLD,
    CT_PARTS,
    CT_PRIMARY,
    CT_UNDO,
    CT_END,
    CT_SETTLE,
    CT_DONE,
    CT_COUNT
};

#define CTO(s) (1u << (s))
/* Each state's name and the states a cart may go to from it (the functions that take it there
 * in the comments); ct_move() checks every change against it. */
static const struct ctstate_row {
    const char *name;
    uint32_t next;
} ctstates[CT_COUNT] = {
    /* order_cart_async: the items start, or the answer (settle: an item refused at once) */
    [CT_IDLE] = {"idle", CTO(CT_ITEMS) | CTO(CT_SETTLE)},
    /* items_back: lock_next, or settle (an item refused, or a replay) */
    [CT_ITEMS] = {"items", CTO(CT_LOCK) | CTO(CT_SETTLE)},
    /* lock_next: intent_begin; on_item_multi: settle (an item's locks failed), replan (an
     * item's SKU at another layout version) */
    [CT_LOCK] = {"lock", CTO(CT_INTENT) | CTO(CT_SETTLE) | CTO(CT_ITEMS)},
    /* on_intent_acked: hold; on_intent: end_intent (nothing made) */
    /* ...; on_intent: replan, or settle (the home SKU's layout changed: nothing written) */
    [CT_INTENT] = {"intent", CTO(CT_HOLD) | CTO(CT_END) | CTO(CT_SETTLE) | CTO(CT_ITEMS)},
    /* on_hold: parts_begin */
    [CT_HOLD] = {"hold", CTO(CT_PARTS)},
    /* parts_back: the primary, undo_begin (an item refused), end_intent (nothing made) */
    [CT_PARTS] = {"parts", CTO(CT_PRIMARY) | CTO(CT_UNDO) | CTO(CT_END)},
    /* primary_back: end_intent, undo_begin (refused), settle (outcome unknown: intent left) */
    [CT_PRIMARY] = {"primary", CTO(CT_END) | CTO(CT_UNDO) | CTO(CT_SETTLE)},
    /* undo_back: end_intent, or settle (a part may remain: the intent left for the healer) */
    [CT_UNDO] = {"undo", CTO(CT_END) | CTO(CT_SETTLE)},
    /* on_intent_gone: settle */
    [CT_END] = {"end", CTO(CT_SETTLE)},
    /* item_answered: respond */
    [CT_SETTLE] = {"settle", CTO(CT_DONE)},
    [CT_DONE] = {"done", 0},
};
_Static_assert(CT_COUNT <= 32, "a state's next states are a 32-bit mask");

/* Lock rounds of a cart at most: a round whose item read less under its locks than its first
 * read showed (other orders took units meanwhile) drops every lock and starts again from the
 * fresher reads, as a multi-segment order walks on (docs/design.md "Carts (SPEC §17)"). */
#define CART_LOCK_ROUNDS 3

struct cart;

/* One item: its order (until it answered), its shadow request, its multi-segment attempt. */
struct citem {
    struct cart *c;
    int idx;
    struct areq *sh; /* a copy of the cart's areq with the item's own response */
    struct order *o; /* NULL once answered */
    struct multi *m;
    int ready;    /* handed over (OS_CART) */
    int known;    /* o->seen holds every segment's stock as read: planned from it, else probed */
    int answered; /* ended (its answer in sh->res) */
    enum order_outcome out;
    enum multi_phase_end end; /* the last phase its multi ended */
};

struct cart {
    struct areq *ar;
    struct app *app;
    struct validate_cart in;
    enum ctstate state;
    int n;
    int sorted[VALIDATE_CART_MAX]; /* item indexes by SKU name */
    struct citem it[VALIDATE_CART_MAX];
    int pending;
    int li;       /* the position in sorted of the item taking its locks */
    int rounds;   /* lock rounds made (CART_LOCK_ROUNDS at most) */
    int used;     /* the items' own calls when they were last all handed over (items_back) */
    int relocked; /* calls of the cart's steps and lock attempts before its last replan */
    enum order_outcome out;
    int fail_idx; /* the item the cart's refusal is (-1: the cart's own) */
    int named;    /* the item the refusal's "sku" names when not fail_idx's (a group's: -1 none) */
    int grouped;  /* its limit groups added to the home item (groups_add): reserved once */
    char grp[VALIDATE_CART_MAX][VALIDATE_SKU_MAX + 1]; /* each item's limit group ("" none) */
    char items[ORDERLOG_ITEMS_MAX + 1];                /* the primary's log entry's items text */
    int64_t ttl_s;
    int64_t deadline_ms;
    int budget; /* Redis calls the cart may still make */
    int calls;  /* Redis calls of the cart's own steps and its items' attempts */
    int left;   /* a part may remain: the intent stays */
    int cancelled;
    char token[IDS_ORDER_HEX + 1];
    char id[ORDER_ID_MAX + 1];
    char deadline[24];
    char cart_key[STORE_KEY_MAX];
    char *record; /* the primary's record as stored */
    struct store_conns conns;
    struct event *timer;
    char why[256];
};

static void ct_move(struct cart *c, enum ctstate next)
{
    if (!(ctstates[c->state].next & CTO(next))) {
        log_msg(CONFIG_LOG_ERROR, "cart_bad_transition",
                "cart %s: state %s to %s is not in the table of order_cart.c", c->token,
                ctstates[c->state].name, ctstates[next].name);
        assert(!"a cart's state change that is not in the table");
    }
    c->state = next;
}

static void settle(struct cart *c, enum order_outcome out);
static void lock_next(struct cart *c);
static void end_intent(struct cart *c);
static void undo_begin(struct cart *c, enum order_outcome out);

static void cart_why(struct cart *c, const char *what)
{
    if (!c->why[0] && what && *what)
        snprintf(c->why, sizeof(c->why), "%s", what);
}

static void cart_free(struct cart *c)
{
    for (int i = 0; i < c->n; i++) {
        multi_free(c->it[i].m);
        if (c->it[i].sh) {
            response_free(&c->it[i].sh->res);
            free(c->it[i].sh);
        }
    }
    if (c->timer)
        event_free(c->timer);
    free(c->record);
    free(c);
}

/* The answer: the primary's 201 (the home item's answer), or the refusal of the item at fault
 * with "sku" naming it, or the cart's own outcome (the home item's answer of it). */
static void respond(struct cart *c)
{
    ct_move(c, CT_DONE);
    int pick = c->fail_idx >= 0 ? c->fail_idx : 0;
    struct response *res = &c->ar->res;
    response_free(res);
    memset(res, 0, sizeof(*res));
    /* one count of inventory_orders_total per cart, its outcome (the items answer uncounted) */
    enum order_outcome counted = c->fail_idx >= 0 ? c->it[c->fail_idx].out : c->out;
    if (c->it[pick].sh && c->it[pick].sh->res.status) {
        struct response tmp = {0};
        order_outcome_respond(&tmp, counted, c->ttl_s > 0);
        response_free(&tmp);
        *res = c->it[pick].sh->res;
        memset(&c->it[pick].sh->res, 0, sizeof(c->it[pick].sh->res));
    } else {
        order_outcome_respond(res, c->out, c->ttl_s > 0);
    }
    if (c->fail_idx >= 0 && res->body && json_is_object(res->body))
        json_object_set_new(res->body, "sku",
                            json_string(c->in.items[c->named >= 0 ? c->named : c->fail_idx].sku));
    if (c->out == OUT_UNAVAILABLE || c->out == OUT_OUTCOME_UNKNOWN)
        log_msg(CONFIG_LOG_WARN, "cart_unavailable", "cart %s: %s", c->id[0] ? c->id : c->token,
                c->why[0] ? c->why : "see the items' lines");
    metrics_order_redis_calls(c->calls);
    struct areq *ar = c->ar;
    ar->cancel = NULL;
    ar->handler = NULL;
    cart_free(c);
    areq_done(ar);
}

/* ---- the items (order_fsm.c in item mode) ---- */

static void items_back(struct cart *c);

static void item_ready(void *arg, struct order *o)
{
    struct cart *c = arg;
    struct citem *ci = &c->it[o->item_idx];
    ci->ready = 1;
    ci->known = o->item_read;
    if (--c->pending == 0)
        items_back(c);
}

static void item_answered(void *arg, int idx, enum order_outcome out)
{
    struct cart *c = arg;
    struct citem *ci = &c->it[idx];
    ci->o = NULL;
    ci->answered = 1;
    ci->out = out;
    if (c->state == CT_SETTLE) {
        if (--c->pending == 0)
            respond(c);
        return;
    }
    /* CT_ITEMS: the item refused (or replayed) before its hand-over */
    if (--c->pending == 0)
        items_back(c);
}

static const struct item_back item_back = {item_ready, item_answered};

/* The cart's limit groups (docs/design.md "Limit groups", "Carts (SPEC §17)"): one reservation
 * per group its items touch, with the sum of their units there, added to the home item (the
 * entry names the home SKU and its segments, so a refusal's look-up finds the cart's primary,
 * "<hex>-<k1>-<home>", and the primary's "grp" gives it back once). Before, each item reserved
 * in its group under the cart's one hex: the second item of a group found "its" entry there
 * (group_reserve.lua keeps an entry the request already has) and a cart of two sizes counted 1,
 * and the primary named no group, so its end gave nothing back. 1 when there is one to reserve,
 * 0 none, -1 out of memory (or more groups than LIMIT_GROUPS_MAX). */
static int groups_add(struct cart *c)
{
    struct order *h = c->it[0].o;
    int n = 0;
    for (int i = 0; i < c->n; i++) {
        const char *g = c->it[i].o->view.rules.limit_group;
        snprintf(c->grp[i], sizeof(c->grp[i]), "%s", g);
        if (!g[0])
            continue;
        if (group_add(h, g, h->in.sku, h->view.segments, (long long)c->in.items[i].quantity) < 0)
            return -1;
        n++;
    }
    return n > 0;
}

/* The item a refusal names: a group's (the home item's answer carrying "limit_group") is the
 * first item in that group; else the item that answered. The answer stays the home item's. */
static int fail_item(const struct cart *c, int fail)
{
    const json_t *body = c->it[fail].sh ? c->it[fail].sh->res.body : NULL;
    const char *g = json_string_value(json_object_get(body, "limit_group"));
    for (int i = 0; g && fail == 0 && c->grouped && i < c->n; i++)
        if (strcmp(c->grp[i], g) == 0)
            return i;
    return fail;
}

/* Every item handed over or answered: a refusal (the first item's, in the client's order) or a
 * replay ends the cart; else its limit groups (once), then its locks. */
static void items_back(struct cart *c)
{
    int fail = -1;
    for (int i = 0; i < c->n && fail < 0; i++)
        if (c->it[i].answered)
            fail = i;
    if (fail >= 0) {
        enum order_outcome out = c->it[fail].out;
        /* a replay: the home item's answer (the stored cart), no "sku" */
        c->fail_idx = out == OUT_REPLAYED ? -1 : fail;
        c->named = fail_item(c, fail);
        settle(c, out);
        return;
    }
    if (c->cancelled) {
        settle(c, OUT_UNAVAILABLE);
        return;
    }
    if (!c->grouped) {
        c->grouped = 1;
        int g = groups_add(c);
        if (g < 0) {
            cart_why(c, "out of memory, or more limit groups than a cart may touch");
            settle(c, OUT_UNAVAILABLE);
            return;
        }
        if (g > 0) { /* the home item reserves them, then is ready again (item_ready) */
            c->it[0].ready = 0;
            c->pending = 1;
            order_item_groups(c->it[0].o);
            return;
        }
    }
    int used = 0, end = 0;
    c->ttl_s = 0;
    for (int i = 0; i < c->n; i++) {
        struct order *o = c->it[i].o;
        used += o->calls;
        end += order_end_calls(o);
        int64_t t = o->view.rules.ttl_s;
        if (t > 0 && (c->ttl_s == 0 || t < c->ttl_s))
            c->ttl_s = t;
        if (o->deadline_ms < c->deadline_ms || c->deadline_ms == 0)
            c->deadline_ms = o->deadline_ms;
    }
    /* the cart's own calls: the intent, its WAIT, the HDEL; and what rounds before a replan
     * spent */
    c->used = used;
    c->calls = used + c->relocked;
    c->budget = c->app->cfg.order_redis_call_budget - used - end - 3 - c->relocked;
    if (c->budget < 0) {
        settle(c, OUT_OVER_BUDGET);
        return;
    }
    ct_move(c, CT_LOCK);
    c->li = 0;
    lock_next(c);
}

/* ---- the locks, item after item in sorted SKU order ---- */

static void on_item_multi(void *arg, enum multi_phase_end end);

/* The multi-segment attempt of item ci: its order's view and reads, the cart's token, TTL and
 * deadline. NULL when out of memory. */
static struct multi *item_multi(struct cart *c, struct citem *ci)
{
    struct order *o = ci->o;
    struct multi_req rq;
    order_multi_req(o, &rq); /* its idem: the home item's key or ticket; another's ticket, or "" */
    rq.lc = c->ar->lc;
    rq.ar = c->ar;
    rq.token = c->token;
    rq.rules.ttl_s = c->ttl_s; /* the cart's: every part reserved when the cart is a hold */
    rq.deadline_ms = c->deadline_ms;
    rq.budget = c->budget;
    rq.cart = 1;
    rq.cart_home = ci->idx == 0;
    rq.cart_id = c->id;
    rq.lim_user = ci->idx != 0 && o->view.rules.limit_per_user > 0 ? rq.user : NULL;
    rq.probe = !ci->known;
    return multi_new(&rq, on_item_multi, ci);
}

static void intent_begin(struct cart *c);

/* Item ci's SKU turned out to be at another layout version under its lock, or the home SKU at
 * the intent (a PUT since this instance cached the layout; nothing written yet): every lock
 * goes, the item re-reads its layout and stock (order_item_replan) and the cart takes its locks
 * again from items_back, within the request's time and CART_LOCK_ROUNDS, as a one-SKU order
 * re-reads a stale layout. Before, the cart answered 503 with the layout forgotten, so a PUT of
 * one SKU mid-sale turned carts that could succeed into 503s. 0 when it cannot (the rounds or
 * the time are up, the loop ending): the caller answers 503. */
static int replan(struct cart *c, struct citem *ci)
{
    if (c->cancelled || c->rounds + 1 >= CART_LOCK_ROUNDS || clock_mono_ms() >= c->deadline_ms)
        return 0;
    c->rounds++;
    int spent = c->calls - c->used;
    for (int i = 0; i < c->n; i++) {
        if (c->it[i].m) {
            spent += multi_result(c->it[i].m)->calls;
            multi_free(c->it[i].m); /* its locks go */
            c->it[i].m = NULL;
        }
    }
    c->relocked = spent;
    ct_move(c, CT_ITEMS);
    ci->ready = 0;
    c->pending = 1;
    order_item_replan(ci->o);
    return 1;
}

static void lock_next(struct cart *c)
{
    if (c->li == c->n) {
        intent_begin(c);
        return;
    }
    struct citem *ci = &c->it[c->sorted[c->li]];
    if (c->cancelled || !ci->o->seen || clock_mono_ms() >= c->deadline_ms) {
        settle(c, c->cancelled ? OUT_UNAVAILABLE : OUT_LOCK_TIMEOUT);
        return;
    }
    ci->m = item_multi(c, ci);
    if (!ci->m) {
        cart_why(c, "out of memory");
        settle(c, OUT_UNAVAILABLE);
        return;
    }
    faultpoint("cart_lock"); /* tests: the items handed over, no lock yet */
    multi_lock(ci->m);
}

static void parts_back(struct cart *c);
static void primary_back(struct cart *c);
static void undo_back(struct cart *c);

static void on_item_multi(void *arg, enum multi_phase_end end)
{
    struct citem *ci = arg;
    struct cart *c = ci->c;
    ci->end = end;
    areq_log_begin(c->ar);
    struct multi_result *r = multi_result(ci->m);
    if (r->why[0])
        cart_why(c, r->why);
    switch (c->state) {
    case CT_LOCK:
        if (end == MULTI_READY) {
            c->budget -= r->calls; /* one budget for the cart: the next item gets what is left */
            c->li++;
            lock_next(c);
        } else if (r->out == OUT_INSUFFICIENT) {
            /* every candidate read short under its lock: other orders took units since the
             * item's read. insufficient_stock only when the fresher reads total less than the
             * item (SPEC §13), every segment read; else every lock goes and the cart takes them
             * again, each item planned from what its attempt read */
            ci->known = multi_seen(ci->m, ci->o->seen);
            long long total = 0;
            for (int k = 0; k < ci->o->view.segments; k++)
                total += ci->o->seen[k] > 0 ? ci->o->seen[k] : 0;
            c->calls += r->calls;
            c->budget -= r->calls;
            for (int i = 0; i < c->n; i++) {
                if (c->it[i].m && c->it[i].m != ci->m) {
                    struct multi_result *o = multi_result(c->it[i].m);
                    c->calls += o->calls; /* READY: counted from the budget already */
                    c->it[i].known |= multi_seen(c->it[i].m, c->it[i].o->seen);
                }
                multi_free(c->it[i].m); /* their locks go */
                c->it[i].m = NULL;
            }
            c->fail_idx = ci->idx;
            if (total < ci->o->in.quantity && ci->known) {
                settle(c, OUT_INSUFFICIENT);
            } else if (c->budget < 0) {
                c->fail_idx = -1;
                settle(c, OUT_OVER_BUDGET);
            } else if (++c->rounds >= CART_LOCK_ROUNDS) {
                settle(c, OUT_LOCK_TIMEOUT); /* contention, not a shortage: retry */
            } else {
                c->fail_idx = -1;
                c->li = 0;
                lock_next(c);
            }
        } else if (!(r->reload && r->again && replan(c, ci))) {
            c->fail_idx = r->out == OUT_UNAVAILABLE || r->out == OUT_OVER_BUDGET ? -1 : ci->idx;
            if (r->reload)
                skucache_forget(c->app->cache, ci->o->in.sku);
            settle(c, r->out);
        }
        break;
    case CT_PARTS:
        if (--c->pending == 0)
            parts_back(c);
        break;
    case CT_PRIMARY: primary_back(c); break;
    case CT_UNDO:
        if (--c->pending == 0)
            undo_back(c);
        break;
    default: break;
    }
    areq_log_end();
}

/* ---- the intent ---- */

static void on_intent_acked(void *arg, long long acks);

static void on_intent(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct cart *c = arg;
    store_conns_note(&c->conns, c->ar->lc);
    if (st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 2) {
        /* it may have been written: with no part made, its healing only deletes it */
        cart_why(c, errstr && *errstr ? errstr : "the intent failed");
        c->out = OUT_UNAVAILABLE;
        end_intent(c);
        return;
    }
    long long d = store_reply_int(r->element[0], 0);
    if (d < 0) { /* the home SKU is at another layout: nothing written */
        if (replan(c, &c->it[0]))
            return;
        skucache_forget(c->app->cache, c->in.items[0].sku);
        cart_why(c, "the home SKU's layout changed: retry");
        settle(c, OUT_UNAVAILABLE);
        return;
    }
    /* every commit refuses after the intent's deadline and every claim's and reservation's */
    for (int i = 0; i < c->n; i++) {
        long long e = atoll(c->it[i].o->claim_expiry);
        if (e > 0 && e < d)
            d = e;
    }
    snprintf(c->deadline, sizeof(c->deadline), "%lld", d);
    int acks = c->app->cfg.redis_replica_acks;
    if (acks <= 0) {
        on_intent_acked(c, 0);
        return;
    }
    c->calls += c->conns.n;
    store_replica_wait_conns_async(c->ar->lc, c->ar, &c->conns, acks, c->app->cfg.redis_timeout_ms,
                                   on_intent_acked, c);
}

static void parts_begin(struct cart *c);

static void on_hold(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cart *c = arg;
    areq_log_begin(c->ar);
    metrics_cs_leave();
    parts_begin(c);
    areq_log_end();
}

/* The intent is on the replicas (or not: nothing made, it goes): the critical section. */
static void on_intent_acked(void *arg, long long acks)
{
    struct cart *c = arg;
    if (acks < c->app->cfg.redis_replica_acks) {
        snprintf(c->why, sizeof(c->why), "the intent is on %lld of %d replicas: no part was made",
                 acks < 0 ? 0 : acks, c->app->cfg.redis_replica_acks);
        c->out = OUT_UNAVAILABLE;
        end_intent(c);
        return;
    }
    faultpoint("cart_intent");
    ct_move(c, CT_HOLD);
    metrics_cs_enter();
    struct timeval tv = {c->app->cfg.hold_ms / 1000, (c->app->cfg.hold_ms % 1000) * 1000};
    if (c->cancelled || c->app->cfg.hold_ms <= 0 || evtimer_add(c->timer, &tv) != 0) {
        metrics_cs_leave();
        parts_begin(c);
    }
}

/* Every item holds its locks: the cart's id (the home item's lowest part), its intent. */
static void intent_begin(struct cart *c)
{
    struct citem *home = &c->it[0];
    int k1 = -1;
    json_t *hp = multi_cart_parts(home->m, &k1);
    json_decref(hp);
    snprintf(c->id, sizeof(c->id), "%s-%d-%s", c->token, k1, c->in.items[0].sku);
    char *parts = calloc(1, 16384);
    int bad = !parts;
    for (int i = 0; !bad && i < c->n; i++)
        bad = multi_cart_intent_parts(c->it[i].m, parts, 16384) != 0;
    if (bad) {
        free(parts);
        cart_why(c, "the cart's parts do not fit its intent");
        settle(c, OUT_OVER_BUDGET);
        return;
    }
    ct_move(c, CT_INTENT);
    /* the intent's deadline: the request's time left, plus the critical section and one Redis
     * timeout for the commits under way (as a multi-segment order's, SPEC §13) */
    int64_t left = c->deadline_ms - clock_mono_ms();
    char budget[24], meta[STORE_KEY_MAX], version[24];
    snprintf(budget, sizeof(budget), "%" PRId64,
             (left > 0 ? left : 0) + c->app->cfg.hold_ms + c->app->cfg.redis_timeout_ms);
    store_sku_key(meta, c->in.items[0].sku, "meta");
    snprintf(version, sizeof(version), "%" PRId64, home->o->view.version);
    const char *keys[2] = {c->cart_key, meta};
    const char *args[6] = {c->token, c->id, parts, budget, version, c->ttl_s > 0 ? "1" : "0"};
    c->calls++;
    store_script_async(c->app->store, c->ar->lc, c->ar, SCRIPT_CART_BEGIN, 2, keys, 6, args,
                       on_intent, c);
    free(parts);
}

/* ---- the commits ---- */

static void parts_begin(struct cart *c)
{
    ct_move(c, CT_PARTS);
    /* one count of the cart's own until every item has started: an item whose phase ends inside
     * multi_commit (an abort) cannot end the cart's step while the loop still reads it */
    int n = c->n;
    c->pending = n + 1;
    for (int i = 0; i < n; i++) {
        multi_cart_deadline(c->it[i].m, c->deadline);
        multi_commit(c->it[i].m, c->cancelled);
    }
    if (--c->pending == 0)
        parts_back(c);
}

/* The order log's items text of the cart (orderlog.h): every part of every item of the record's
 * items, in their order, as the scripts rebuild it from the record for its later entries
 * (log.lua items_text). -1 when it does not fit ORDERLOG_ITEMS_MAX. */
static int items_text(const json_t *items, char *buf, size_t cap)
{
    buf[0] = '\0';
    size_t i, j;
    const json_t *it, *p;
    json_array_foreach(items, i, it)
    {
        const char *sku = json_string_value(json_object_get(it, "sku"));
        json_array_foreach(json_object_get(it, "parts"), j, p)
        {
            if (!sku || orderlog_items_add(
                            buf, cap, sku, (int)json_integer_value(json_object_get(p, "segment")),
                            (long long)json_integer_value(json_object_get(p, "quantity"))) != 0)
                return -1;
        }
    }
    return 0;
}

/* The primary's record: the home item's as a multi-segment primary's, with every item, and its
 * order log entry's items text in c->items. NULL when out of memory or the text does not fit. */
static char *primary_record(struct cart *c)
{
    struct order *h = c->it[0].o;
    json_t *items = json_array(), *hparts = NULL;
    int k1 = -1;
    for (int i = 0; items && i < c->n; i++) {
        int first;
        json_t *p = multi_cart_parts(c->it[i].m, &first);
        if (i == 0) {
            k1 = first;
            hparts = json_incref(p);
        }
        json_array_append_new(items,
                              json_pack("{s:s, s:I, s:o}", "sku", c->in.items[i].sku, "quantity",
                                        (json_int_t)c->in.items[i].quantity, "parts", p));
    }
    char created[32];
    rules_format_time(clock_wall_ms(), created);
    const char *user = h->has_user ? h->user : h->in.has_user_id ? h->in.user_id : "";
    json_t *j = json_pack(
        "{s:s, s:s, s:I, s:i, s:o, s:s, s:s, s:o, s:o}", "order_id", c->id, "sku",
        c->in.items[0].sku, "quantity", (json_int_t)c->in.items[0].quantity, "segment", k1,
        "user_id", *user ? json_string(user) : json_null(), "created_at", created, "status",
        order_status_name(c->ttl_s > 0 ? ORDER_STATUS_RESERVED : ORDER_STATUS_CREATED), "parts",
        hparts ? hparts : json_array(), "items", items ? items : json_array());
    /* its limit groups, {"<group>": units}: the end of the cart (hold_end.lua) queues one
     * give-back per group, so the cart's one entry in each goes once */
    char *grp = group_record_member(h);
    if (j && grp) {
        json_t *g = json_loads(grp, 0, NULL);
        if (!g || json_object_set_new(j, "grp", g) != 0) {
            json_decref(j);
            j = NULL;
        }
    }
    free(grp);
    if (j && items_text(json_object_get(j, "items"), c->items, sizeof c->items) != 0) {
        cart_why(c, "the cart's parts pass the order log's items text (ORDERLOG_ITEMS_MAX)");
        json_decref(j);
        return NULL;
    }
    char *rec = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return rec;
}

/* Every item's parts answered: all in (and on the replicas) → the primary; else undo. */
static void parts_back(struct cart *c)
{
    enum order_outcome bad = OUT_CREATED;
    for (int i = 0; i < c->n; i++) {
        struct multi_result *r = multi_result(c->it[i].m);
        if (c->it[i].end != MULTI_PARTS && bad == OUT_CREATED) {
            bad = r->out;
            c->fail_idx = r->out == OUT_UNAVAILABLE ? -1 : i;
        }
    }
    if (bad != OUT_CREATED) {
        undo_begin(c, bad);
        return;
    }
    faultpoint("cart_parts");
    char *rec = primary_record(c);
    if (!rec) {
        if (!c->why[0])
            cart_why(c, "out of memory");
        undo_begin(c, OUT_UNAVAILABLE);
        return;
    }
    ct_move(c, CT_PRIMARY);
    multi_cart_primary(c->it[0].m, rec, c->items);
    free(rec);
}

static void primary_back(struct cart *c)
{
    struct multi_result *r = multi_result(c->it[0].m);
    if (r->out == OUT_CREATED) {
        c->record = r->record;
        r->record = NULL;
        faultpoint("cart_primary");
        c->out = OUT_CREATED;
        end_intent(c);
        return;
    }
    if (r->out == OUT_OUTCOME_UNKNOWN) {
        /* the cart may exist: the intent stays, the healer decides */
        c->left = 1;
        settle(c, OUT_OUTCOME_UNKNOWN);
        return;
    }
    /* refused: the home item undid its own parts; the others' go too */
    c->fail_idx = r->out == OUT_UNAVAILABLE ? -1 : 0;
    undo_begin(c, r->out);
}

/* Undoes the parts of every item whose parts phase ended with parts made (MULTI_PARTS); the
 * others undid their own. */
static void undo_begin(struct cart *c, enum order_outcome out)
{
    ct_move(c, CT_UNDO);
    c->out = out;
    int n = 0;
    for (int i = 0; i < c->n; i++)
        n += c->it[i].end == MULTI_PARTS;
    if (n == 0) {
        undo_back(c);
        return;
    }
    c->pending = n + 1; /* the cart's own count: as in parts_begin */
    for (int i = 0; i < c->n; i++)
        if (c->it[i].end == MULTI_PARTS)
            multi_cart_undo(c->it[i].m, out);
    if (--c->pending == 0)
        undo_back(c);
}

static void undo_back(struct cart *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->it[i].m && multi_result(c->it[i].m)->left)
            c->left = 1;
    if (c->left) { /* a part may still be there: the healer undoes it, then the intent goes */
        settle(c, c->out);
        return;
    }
    end_intent(c);
}

static void on_intent_gone(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)r;
    struct cart *c = arg;
    if (st != LC_OK && st != LC_ESTATE) /* the healer deletes it later */
        cart_why(c, errstr);
    settle(c, c->out);
}

static void end_intent(struct cart *c)
{
    ct_move(c, CT_END);
    faultpoint("cart_hdel");
    const char *argv[3] = {"HDEL", c->cart_key, c->token};
    c->calls++;
    store_command_async(c->ar->lc, c->ar, 3, argv, on_intent_gone, c);
}

/* ---- the end ---- */

/* Ends every item still held with the cart's outcome (each settles its reservation and claims),
 * then the answer. */
static void settle(struct cart *c, enum order_outcome out)
{
    ct_move(c, CT_SETTLE);
    c->out = out;
    for (int i = 0; i < c->n; i++) {
        if (c->it[i].m) {
            c->calls += multi_result(c->it[i].m)->calls;
            multi_free(c->it[i].m); /* locks still held go */
            c->it[i].m = NULL;
        }
    }
    /* the other items of a replayed cart or of a refused key end as failed (their
     * reservations released) */
    enum order_outcome others =
        out == OUT_REPLAYED || out == OUT_IDEM_FAILED ? OUT_UNAVAILABLE : out;
    /* An item may end at once, inside order_item_end (nothing left to settle: its answer), and
     * the last one's answer frees the cart (item_answered → respond): the items to end are taken
     * first, and the cart holds one count of its own until they are all started, so it is never
     * read after it is freed (ASan found settle reading c->n of a freed cart). */
    struct order *todo[VALIDATE_CART_MAX];
    int n = 0;
    for (int i = 0; i < c->n; i++)
        if (c->it[i].o)
            todo[n++] = c->it[i].o;
    c->pending = n + 1;
    const char *id = c->id[0] ? c->id : NULL;
    const char *record = c->record;
    for (int i = 0; i < n; i++)
        order_item_end(todo[i], others, id, record);
    if (--c->pending == 0)
        respond(c);
}

/* The loop is ending: the items running get EV_CANCEL, a hold ends now. */
static void cart_on_loop_end(struct areq *ar)
{
    struct cart *c = ar->handler;
    c->cancelled = 1;
    if (c->state == CT_ITEMS) {
        for (int i = 0; i < c->n; i++)
            if (c->it[i].o && !c->it[i].ready)
                order_item_cancel(c->it[i].o);
    } else if (c->state == CT_HOLD) {
        evtimer_del(c->timer);
        metrics_cs_leave();
        parts_begin(c);
    }
}

void order_cart_async(struct areq *ar)
{
    struct app *app = ar->app;
    struct cart *c = calloc(1, sizeof(*c));
    if (!c) {
        response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        areq_done(ar);
        return;
    }
    c->ar = ar;
    c->app = app;
    c->fail_idx = -1;
    c->named = -1;
    struct validate_error verr;
    const struct request *req = &ar->req;
    if (validate_cart_body(req->body, req->body ? req->body_len : 0, app->cfg.max_quantity, &c->in,
                           &verr) != 0) {
        metrics_order(METRICS_ORDER_INVALID);
        response_error(&ar->res, verr.code, verr.message);
        goto out;
    }
    if (app->cfg.strategy != STRATEGY_SEGMENTED) {
        response_error(&ar->res, ERROR_INVALID_REQUEST,
                       "items: carts need --strategy segmented (this instance runs another)");
        goto out;
    }
    if (req->idempotency_key &&
        !validate_printable(req->idempotency_key, strlen(req->idempotency_key))) {
        metrics_order(METRICS_ORDER_INVALID);
        response_error(&ar->res, ERROR_INVALID_REQUEST,
                       "Idempotency-Key: must be 1..128 printable ASCII characters");
        goto out;
    }
    if (ids_order_token(c->token, sizeof(c->token)) != 0) {
        response_error(&ar->res, ERROR_UNAVAILABLE, "no randomness for an order id, retry later");
        goto out;
    }
    c->timer = evtimer_new(ar->base, on_hold, c);
    if (!c->timer) {
        response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        goto out;
    }
    c->n = c->in.n;
    store_sku_key(c->cart_key, c->in.items[0].sku, "cart");
    for (int i = 0; i < c->n; i++)
        c->sorted[i] = i;
    for (int a = 1; a < c->n; a++) { /* by SKU name: the global lock order */
        int t = c->sorted[a], b = a - 1;
        while (b >= 0 && strcmp(c->in.items[c->sorted[b]].sku, c->in.items[t].sku) > 0) {
            c->sorted[b + 1] = c->sorted[b];
            b--;
        }
        c->sorted[b + 1] = t;
    }
    for (int i = 0; i < c->n; i++) {
        struct citem *ci = &c->it[i];
        ci->c = c;
        ci->idx = i;
        ci->sh = malloc(sizeof(*ci->sh));
        if (!ci->sh)
            break;
        *ci->sh = *ar;
        memset(&ci->sh->res, 0, sizeof(ci->sh->res));
        ci->sh->cancel = NULL;
        ci->sh->handler = NULL;
        ci->sh->lprev = ci->sh->lnext = NULL;
        int refused = 0;
        ci->o = order_item_new(ci->sh, &c->in.items[i], c->in.has_user_id ? c->in.user_id : NULL,
                               c->token, i == 0 ? req->idempotency_key : NULL, &item_back, c, i,
                               &refused);
        if (refused) { /* 401: the same identity for every item */
            ar->res = ci->sh->res;
            memset(&ci->sh->res, 0, sizeof(ci->sh->res));
            goto out;
        }
        if (!ci->o)
            break;
        /* Another item claims only its ticket, but that claim carries the cart's key (as a
         * one-SKU order's ticket claim carries its key): a retry with the key waits for it or
         * replays the cart, where a claim carrying none refused the retry 409 ticket_used even
         * when the first attempt sold nothing (docs/design.md "Carts (SPEC §17)"). */
        if (i > 0 && req->idempotency_key)
            ci->o->key = req->idempotency_key;
    }
    for (int i = 0; i < c->n; i++)
        if (!c->it[i].o) {
            for (int j = 0; j < c->n; j++)
                if (c->it[j].o)
                    order_item_free(c->it[j].o), c->it[j].o = NULL;
            response_error(&ar->res, ERROR_INTERNAL, "out of memory");
            goto out;
        }
    ar->cancel = cart_on_loop_end;
    ar->handler = c;
    ct_move(c, CT_ITEMS);
    /* the cart's own count until every item has started (an item may answer at once) */
    int n = c->n;
    c->pending = n + 1;
    for (int i = 0; i < n; i++)
        order_item_start(c->it[i].o);
    if (--c->pending == 0)
        items_back(c);
    return;
out:
    cart_free(c);
    areq_done(ar);
}
