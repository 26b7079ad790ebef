/*
 * The Idempotency-Key claim (SPEC §6; docs/design.md "Idempotency-Key" and "The order path as a
 * state machine") as its own state machine, after SQLite's pager: its states with their
 * meaning, the table of legal moves, and one move function, cl_move(), that checks every change
 * against it. The order machine (order_fsm.c) hands a request with a key over to it in state
 * OS_CLAIM (claim_begin) and passes it every event of the order until it hands the order back
 * with a result (back->claimed); after the order, in OS_CLAIM_SETTLE, it settles the claim
 * (claim_settle, then back->settled). The hand-back is the table of the order machine's
 * functions given at the hand-over (struct claim_back), so this file never calls order_fsm.c by
 * name. What a reply means is decided by order_idem.c (pure, unit-tested); this file sends the
 * scripts and acts. Its Redis calls go through the order's I/O (order_io.h), which counts them
 * against the order's budget.
 *
 *   IDLE -> CLAIM <-> FETCH / FIND [-> PEEK [-> DECIDE]] -> ADOPT / TAKEOVER / PAUSE
 *             |  (owned)
 *             v
 *           WAIT (--redis-replica-acks) -> BACK (handed back: owned, or the answer)
 *   (after the order) BACK -> SETTLE -> SETTLED
 */
#include "order_claim.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "app.h"
#include "areq.h"
#include "clock.h"
#include "errors.h"
#include "handlers.h"
#include "log.h"
#include "metrics.h"
#include "order.h"
#include "order_idem.h"
#include "order_multi.h"
#include "store.h"

/* The claim's states: what it waits for (the event in brackets). */
enum cstate {
    CL_IDLE,     /* nothing yet: the order has not handed its key over */
    CL_CLAIM,    /* [reply] the IDEM_CLAIM script: claimed for this request, or its answer */
    CL_FETCH,    /* [reply] HGET of the order a finished claim names (replay), then its WAITs */
    CL_FIND,     /* [batch] HGET of the key in every segment's idem hash (an expired claim) */
    CL_PEEK,     /* [reply] HGET of the record the find found: gone, a cart's part, or an order */
    CL_DECIDE,   /* [reply] part_undo.lua "primary" on the cart's primary a found part names */
    CL_ADOPT,    /* [reply] IDEM_TAKEOVER making the claim final with the order found */
    CL_TAKEOVER, /* [reply] IDEM_TAKEOVER taking the claim for this request */
    CL_PAUSE,    /* [timer] a claim still pending elsewhere: look again after a pause */
    CL_WAIT,     /* [reply] WAIT on the claim's connection: the claim on replicas first */
    CL_BACK,     /* handed back to the order (back->claimed): owned, or the answer */
    CL_SETTLE,   /* [reply] IDEM_SWAP settling the claim after the order */
    CL_SETTLED,  /* handed back (back->settled): the order answers */
    CL_COUNT
};

/* The longest token: 32 hex of randomness, and for a ticket "." and the key in hex. */
#define CLAIM_TOKEN_MAX (32 + 1 + 2 * VALIDATE_PRINTABLE_MAX + 2)
/* The longest value: "pending:<expiry>:<token>", or "<order id> <key hex>". */
#define CLAIM_VALUE_MAX (ORDER_ID_MAX + CLAIM_TOKEN_MAX + 32)

/* The claim: its state and strings, allocated for a request with a key only, so an order in
 * flight without one (most; 10,000 of them at once with 10,000 connections) does not carry
 * them. */
struct idem_claim {
    enum cstate state;
    const struct claim_back *back; /* the order machine's (claim_begin, claim_settle) */
    char claim[STORE_KEY_MAX + VALIDATE_PRINTABLE_MAX + 8];
    char claim_value[CLAIM_VALUE_MAX];
    char bound[24], ttl[24], margin[24], token[CLAIM_TOKEN_MAX];
    /* a ticket's claim (o->tk_mode): the ticket's expiry for the scripts, and the client's
     * Idempotency-Key in hex ("-" none), which the claim's value carries */
    int ticket;
    char texp[24];
    char khex[2 * VALIDATE_PRINTABLE_MAX + 2];
    char seen[CLAIM_VALUE_MAX];   /* the claim's value as the reply gave it (a replay: the id) */
    char expect[CLAIM_VALUE_MAX]; /* the claim's value as stored: what a takeover compares */
    char found[ORDER_ID_MAX + 1]; /* the order an idem find batch found */
    char cart[ORDER_ID_MAX + 1];  /* the cart (part_of) of the part the find found */
    int64_t give_up;
    int pause_ms; /* the next look at a claim pending elsewhere: 20 ms, doubling up to 160 */
};

static void on_idem_claim(struct order *o, const struct oev *e);
static void on_idem_fetch(struct order *o, const struct oev *e);
static void on_idem_find(struct order *o, const struct oev *e);
static void on_idem_peek(struct order *o, const struct oev *e);
static void on_idem_decide(struct order *o, const struct oev *e);
static void on_idem_adopt(struct order *o, const struct oev *e);
static void on_idem_takeover(struct order *o, const struct oev *e);
static void on_idem_pause(struct order *o, const struct oev *e);
static void on_idem_claim_wait(struct order *o, const struct oev *e);
static void on_settle(struct order *o, const struct oev *e);

#define CTO(s) (1u << (s))
/* Each state: its name, its handler, whether it waits on the order's timer (timed: cl_move
 * disarms it when the state is left, and EV_CANCEL ends the wait at once), and the states it
 * may go to, with the functions that take it there. */
static const struct cstate_row {
    const char *name;
    void (*on)(struct order *o, const struct oev *e);
    unsigned timed : 1;
    uint32_t next;
} cstates[CL_COUNT] = {
    /* claim_begin: idem_claim */
    [CL_IDLE] = {"idle", NULL, 0, CTO(CL_CLAIM)},
    /* on_idem_claim: idem_owned (the WAIT, or back), idem_fetch, idem_takeover, idem_find,
     * idem_pause, or back (unavailable, over budget) */
    [CL_CLAIM] = {"claim", on_idem_claim, 0,
                  CTO(CL_WAIT) | CTO(CL_FETCH) | CTO(CL_TAKEOVER) | CTO(CL_FIND) | CTO(CL_PAUSE) |
                      CTO(CL_BACK)},
    /* on_idem_fetch: the replay (back), or idem_takeover (the order is gone) */
    [CL_FETCH] = {"fetch", on_idem_fetch, 0, CTO(CL_TAKEOVER) | CTO(CL_BACK)},
    /* on_idem_find: idem_peek (found), idem_adopt (an id that is no order id), idem_takeover */
    [CL_FIND] = {"find", on_idem_find, 0,
                 CTO(CL_PEEK) | CTO(CL_ADOPT) | CTO(CL_TAKEOVER) | CTO(CL_BACK)},
    /* on_idem_peek: idem_adopt (an order), idem_decide (a cart's part), idem_takeover (gone) */
    [CL_PEEK] = {"peek", on_idem_peek, 0,
                 CTO(CL_ADOPT) | CTO(CL_DECIDE) | CTO(CL_TAKEOVER) | CTO(CL_BACK)},
    /* on_idem_decide: idem_adopt (the cart is whole), idem_takeover (it never will be) */
    [CL_DECIDE] = {"decide", on_idem_decide, 0, CTO(CL_ADOPT) | CTO(CL_TAKEOVER) | CTO(CL_BACK)},
    /* on_idem_adopt: idem_claim again (to replay) */
    [CL_ADOPT] = {"adopt", on_idem_adopt, 0, CTO(CL_CLAIM) | CTO(CL_BACK)},
    /* on_idem_takeover: idem_owned, or idem_claim again */
    [CL_TAKEOVER] = {"takeover", on_idem_takeover, 0, CTO(CL_CLAIM) | CTO(CL_WAIT) | CTO(CL_BACK)},
    /* on_idem_pause: idem_claim again */
    [CL_PAUSE] = {"pause", on_idem_pause, 1, CTO(CL_CLAIM) | CTO(CL_BACK)},
    /* on_idem_claim_wait: back (owned, or not durable) */
    [CL_WAIT] = {"wait", on_idem_claim_wait, 0, CTO(CL_BACK)},
    /* claim_settle */
    [CL_BACK] = {"back", NULL, 0, CTO(CL_SETTLE)},
    /* on_settle: settled */
    [CL_SETTLE] = {"settle", on_settle, 0, CTO(CL_SETTLED)},
    [CL_SETTLED] = {"settled", NULL, 0, 0},
};
_Static_assert(CL_COUNT <= 32, "a state's next states are a 32-bit mask");

/* The one way the claim changes state: the move must be in the table (an assertion in debug
 * builds, an error line in release builds); the timer of a timed state goes with it. */
static void cl_move(struct order *o, enum cstate next)
{
    struct idem_claim *ic = o->ic;
    if (!(cstates[ic->state].next & CTO(next))) {
        log_msg(CONFIG_LOG_ERROR, "claim_bad_transition",
                "sku %s: state %s to %s is not in the table of order_claim.c", o->in.sku,
                cstates[ic->state].name, cstates[next].name);
        assert(!"a claim's state change that is not in the table");
    }
    if (cstates[ic->state].timed)
        order_timer_stop(o);
    ic->state = next;
}

/* The claim is decided: back to the order (no claim at all when it could not be allocated). */
static void claim_back(struct order *o, enum order_outcome out)
{
    cl_move(o, CL_BACK);
    o->ic->back->claimed(o, out);
}

static void idem_unavailable(struct order *o)
{
    log_msg(CONFIG_LOG_WARN, "order_unavailable", "sku %s: Idempotency-Key claim: %s", o->in.sku,
            o->why[0] ? o->why : "unexpected reply");
    metrics_redis_error();
    response_error(&o->ar->res, ERROR_UNAVAILABLE, "the stock store is unavailable, retry later");
    claim_back(o, OUT_IDEM_FAILED);
}

/* Takes a claim result {code, value, expiry} that made this request the owner (IDEM_OWNED:
 * checked by order_idem.c). */
static void idem_own(struct order *o, const redisReply *r)
{
    snprintf(o->ic->claim_value, sizeof(o->ic->claim_value), "%s", r->element[1]->str);
    snprintf(o->claim_expiry, sizeof(o->claim_expiry), "%lld", store_reply_int(r->element[2], 0));
}

/* A ticket's claim: the ticket's outcome (409 ticket_used, 403 ticket_expired), nothing
 * written. */
static void idem_ticket_refused(struct order *o, enum idem_step step)
{
    claim_back(o, step == IDEM_TICKET_USED ? OUT_TICKET_USED : OUT_TICKET_EXPIRED);
}

static void idem_claim(struct order *o)
{
    char meta[STORE_KEY_MAX];
    store_sku_key(meta, o->in.sku, "meta");
    const char *keys[2] = {o->ic->claim, meta};
    const char *args[6] = {o->ic->bound,  o->ic->ttl,  o->ic->token,
                           o->ic->margin, o->ic->texp, o->ic->khex};
    cl_move(o, CL_CLAIM);
    order_script(o, SCRIPT_IDEM_CLAIM, 2, keys, o->ic->ticket ? 6 : 4, args);
}

/* The claim's holder can no longer commit, or its order was removed: take the key (a ticket's
 * claim only before the ticket's expiry: the script judges it). */
static void idem_takeover(struct order *o)
{
    const char *keys[1] = {o->ic->claim};
    const char *args[5] = {o->ic->expect, "", o->ic->bound, o->ic->token, o->ic->texp};
    cl_move(o, CL_TAKEOVER);
    order_script(o, SCRIPT_IDEM_TAKEOVER, 1, keys, o->ic->ticket ? 5 : 4, args);
}

/* The client's Idempotency-Key in lower-case hex ("-" none): a ticket's claim carries it in a
 * form that has no space, dot or colon, whatever the key holds. */
static void key_hex(const char *key, char *out, size_t cap)
{
    static const char digits[] = "0123456789abcdef";
    size_t n = strlen(key);
    if (n == 0 || 2 * n + 1 > cap) {
        snprintf(out, cap, "-");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[(unsigned char)key[i] >> 4];
        out[2 * i + 1] = digits[(unsigned char)key[i] & 15];
    }
    out[2 * n] = '\0';
}

/*
 * Claims the key or replays its order. A claim still pending is waited for up to the longest
 * an order can take; once Redis's clock says it is past its expiry (+ a margin), its request
 * can no longer commit: its order, if it committed in time, is looked for in the segments
 * (written atomically with the order) and the claim is taken over. No instance's clock decides
 * anything. The commit refuses to run after the claim's expiry (claim_expiry).
 */
void claim_begin(struct order *o, const struct claim_back *back)
{
    const struct config *cfg = &o->app->cfg;
    if (!o->ic && !(o->ic = calloc(1, sizeof(*o->ic)))) {
        log_msg(CONFIG_LOG_WARN, "order_unavailable", "sku %s: out of memory", o->in.sku);
        response_error(&o->ar->res, ERROR_UNAVAILABLE, "out of memory, retry later");
        back->claimed(o, OUT_IDEM_FAILED); /* no claim at all */
        return;
    }
    o->ic->back = back;
    char base[STORE_KEY_MAX];
    o->ic->ticket = o->tk_mode;
    if (o->tk_mode) {
        /* The ticket's claim: named by the ticket's number and expiry (one admission), a key
         * no client Idempotency-Key can name. */
        store_sku_key(base, o->in.sku, "tclaim:");
        snprintf(o->ic->claim, sizeof(o->ic->claim), "%s%" PRIu64 ":%" PRId64, base, o->tk_n,
                 o->tk_exp);
        snprintf(o->ic->texp, sizeof(o->ic->texp), "%" PRId64, o->tk_exp);
        key_hex(o->key, o->ic->khex, sizeof(o->ic->khex));
    } else {
        store_sku_key(base, o->in.sku, "idem:");
        snprintf(o->ic->claim, sizeof(o->ic->claim), "%s%s", base, o->idem);
    }
    snprintf(o->ic->bound, sizeof(o->ic->bound), "%d",
             cfg->lock_wait_ms + cfg->hold_ms + cfg->lock_lease_ms + 2 * cfg->redis_timeout_ms);
    snprintf(o->ic->ttl, sizeof(o->ic->ttl), "%d", 24 * 3600 * 1000);
    snprintf(o->ic->margin, sizeof(o->ic->margin), "%d", IDEM_TAKEOVER_MARGIN_MS);
    snprintf(o->ic->token, sizeof(o->ic->token), "%016" PRIx64 "%016" PRIx64 "%s%s", order_rnd64(),
             order_rnd64(), o->tk_mode ? "." : "", o->tk_mode ? o->ic->khex : "");
    o->ic->give_up = clock_mono_ms() + cfg->lock_wait_ms + cfg->hold_ms + 1000;
    o->ic->pause_ms = 20;
    idem_claim(o);
}

/* The key is this request's: the order may begin. With --redis-replica-acks N the claim must
 * first be on N replicas of the SKU's master (a WAIT on the connection that carried it): the
 * commit's WAIT covers only the segment's master, and a failover of the SKU's master that lost
 * the claim would let a retry with the key claim it afresh and place a second order. */
static void idem_owned(struct order *o)
{
    if (o->app->cfg.redis_replica_acks > 0) {
        cl_move(o, CL_WAIT);
        order_replicas_wait(o);
        return;
    }
    claim_back(o, OUT_CREATED);
}

/* The claim WAIT's answer: on enough replicas, the order begins; else nothing was placed, and
 * the claim is left to expire (a retry with the key waits for it, then takes it over). */
static void on_idem_claim_wait(struct order *o, const struct oev *e)
{
    lc_status st = e->st;
    const redisReply *r = e->r;
    long long got = store_reply_acks(st, r);
    if (got >= o->app->cfg.redis_replica_acks) {
        claim_back(o, OUT_CREATED);
        return;
    }
    log_msg(CONFIG_LOG_WARN, "order_replica_ack_missing",
            "sku %s: Idempotency-Key claim on %lld of %d replicas (%s): no order placed", o->in.sku,
            got < 0 ? 0 : got, o->app->cfg.redis_replica_acks,
            st == LC_OK ? "WAIT timed out" : o->why);
    metrics_redis_error();
    response_error(&o->ar->res, ERROR_UNAVAILABLE,
                   "the stock store could not make the Idempotency-Key durable: no order was "
                   "placed, retry later");
    claim_back(o, OUT_IDEM_FAILED);
}

/* Looks for an expired claim's order in the idem hash of segments [0, nseg) (one batch). */
static void idem_find(struct order *o, int nseg)
{
    if (order_over_budget(o, nseg + 2)) {
        claim_back(o, OUT_OVER_BUDGET);
        return;
    }
    struct seg_keys *keys = malloc(sizeof(*keys) * (size_t)nseg);
    const char *(*argvs)[3] = malloc(sizeof(*argvs) * (size_t)nseg);
    if (!keys || !argvs) {
        free(keys);
        free(argvs);
        idem_unavailable(o);
        return;
    }
    for (int k = 0; k < nseg; k++) {
        store_seg_keys(o->in.sku, k, &keys[k]);
        argvs[k][0] = "HGET";
        argvs[k][1] = keys[k].idem;
        argvs[k][2] = o->idem;
    }
    cl_move(o, CL_FIND);
    order_batch(o, nseg, (const char *const(*)[3])argvs, 3);
    free(argvs);
    free(keys);
}

/* Fetches the finished order the claim names (segment k of sku), to replay it. */
static void idem_fetch(struct order *o, int k, const char *sku)
{
    struct seg_keys sk;
    store_seg_keys(sku, k, &sk);
    const char *argv[3] = {"HGET", sk.orders, o->ic->seen};
    cl_move(o, CL_FETCH);
    order_command(o, 3, argv);
}

/* Pending elsewhere: look again shortly, up to the longest an order can take. */
static void idem_pause(struct order *o)
{
    if (clock_mono_ms() > o->ic->give_up) {
        response_error(&o->ar->res, ERROR_UNAVAILABLE,
                       "an order with this Idempotency-Key is still in progress");
        claim_back(o, OUT_IDEM_FAILED);
        return;
    }
    if (order_over_budget(o, 1)) {
        claim_back(o, OUT_OVER_BUDGET);
        return;
    }
    cl_move(o, CL_PAUSE);
    order_timer_arm(o, o->ic->pause_ms);
    if (o->ic->pause_ms < 160)
        o->ic->pause_ms *= 2;
}

/* The claim's answer (order_idem_claim_verdict decides). */
static void on_idem_claim(struct order *o, const struct oev *e)
{
    lc_status st = e->st;
    const redisReply *r = e->r;
    struct idem_verdict v;
    order_idem_claim_verdict(st, r, SKUCACHE_MAX_SEGMENTS, &v);
    if (v.step != IDEM_UNAVAILABLE && v.step != IDEM_OWNED) {
        snprintf(o->ic->seen, sizeof(o->ic->seen), "%s",
                 r->element[1]->type == REDIS_REPLY_STRING ? r->element[1]->str : "");
        /* a ticket's finished claim: {code, order id, the value as stored} */
        int raw = r->elements >= 3 && r->element[2]->type == REDIS_REPLY_STRING;
        snprintf(o->ic->expect, sizeof(o->ic->expect), "%s",
                 raw ? r->element[2]->str : o->ic->seen);
    }
    switch (v.step) {
    case IDEM_OWNED:
        idem_own(o, r);
        idem_owned(o);
        return;
    case IDEM_REPLAY: idem_fetch(o, v.k, v.sku); return;
    case IDEM_TAKEOVER: idem_takeover(o); return;
    case IDEM_FIND: idem_find(o, v.nseg); return;
    case IDEM_PENDING: idem_pause(o); return;
    case IDEM_TICKET_USED:
    case IDEM_TICKET_EXPIRED: idem_ticket_refused(o, v.step); return;
    case IDEM_UNAVAILABLE:
    case IDEM_CLAIM: break;
    }
    idem_unavailable(o);
}

/* issue 29 (multi): a replay's WAITs are answered (multi_replay_vouch). */
static void on_replay_vouched(void *arg, int ok)
{
    struct order *o = arg;
    o->vouched = ok;
    order_event(o, EV_REPLY, LC_OK, NULL);
}

/* The order a finished claim names: replayed, or gone (the key is free again). With
 * --redis-replica-acks, the 200 only once the order and each of its parts are on the replicas
 * of their masters (else 503 "outcome":"unknown": a failover could still lose them). */
static void on_idem_fetch(struct order *o, const struct oev *e)
{
    const redisReply *r = e->r;
    if (o->vouching) {
        o->vouching = 0;
        if (!o->vouched) {
            log_msg(CONFIG_LOG_WARN, "order_replica_ack_missing",
                    "sku %s order %s: replayed, but not on %d replicas of every part's master",
                    o->in.sku, o->ic->seen, o->app->cfg.redis_replica_acks);
            response_free(&o->ar->res);
            response_outcome_unknown(&o->ar->res,
                                     "the order of this Idempotency-Key may not survive a "
                                     "failover of the stock store yet: retry with the key");
        }
        claim_back(o, OUT_REPLAYED);
        return;
    }
    if (e->st != LC_OK) {
        idem_unavailable(o);
        return;
    }
    if (r && r->type == REDIS_REPLY_STRING) {
        json_t *order = json_loadb(r->str, r->len, 0, NULL);
        if (!order) {
            idem_unavailable(o);
            return;
        }
        (void)response_order_location(&o->ar->res, o->ic->seen, ORDER_ID_MAX);
        if (o->app->cfg.redis_replica_acks > 0) {
            lc_async_conn_ref ref;
            int known = lc_async_reply_conn(o->lc, &ref) == 0;
            o->vouching = 1;
            multi_replay_vouch(o->app, o->lc, o->ar, o->in.sku, order, known ? &ref : NULL,
                               on_replay_vouched, o);
        }
        order_answer_parts(order);
        response_json(&o->ar->res, 200, order);
        if (!o->vouching)
            claim_back(o, OUT_REPLAYED);
        return;
    }
    /* Its order was removed by a re-PUT or DELETE of the SKU: the key is free again for an
     * order under the current version. */
    idem_takeover(o);
}

/* Makes the claim final with the order found (ic->found), then replays it (on_idem_adopt). */
static void idem_adopt(struct order *o)
{
    /* A ticket's claim keeps the Idempotency-Key of the request that made the order (the end
     * of the pending value's token) with it. */
    char final[CLAIM_VALUE_MAX];
    const char *dot = strrchr(o->ic->expect, '.');
    snprintf(final, sizeof(final), "%s%s%s", o->ic->found, o->ic->ticket ? " " : "",
             !o->ic->ticket ? ""
             : dot          ? dot + 1
                            : "-");
    const char *keys[1] = {o->ic->claim};
    const char *args[4] = {o->ic->expect, final, o->ic->bound, o->ic->token};
    cl_move(o, CL_ADOPT);
    order_script(o, SCRIPT_IDEM_TAKEOVER, 1, keys, 4, args);
}

/* The record the find found is read before the claim is made final with it (issue 33): a
 * cart's other item names its claim (a ticket's) on its first PART, written before the cart's
 * primary and undone when the cart is not made, so the name alone does not say that the
 * claim's order exists. Adopting it blindly left the ticket of a cart healed back used for
 * good (409 ticket_used to every retry), and replayed a part still waiting for its heal as
 * the item's answer (the cart's retry then ended 503). */
static void idem_peek(struct order *o)
{
    int k = -1;
    char sku[VALIDATE_SKU_MAX + 1];
    if (order_id_parse(o->ic->found, strlen(o->ic->found), &k, sku) != 0) {
        idem_adopt(o); /* as before: the replay's fetch judges it */
        return;
    }
    if (order_over_budget(o, 2)) {
        claim_back(o, OUT_OVER_BUDGET);
        return;
    }
    struct seg_keys sk;
    store_seg_keys(sku, k, &sk);
    const char *argv[3] = {"HGET", sk.orders, o->ic->found};
    cl_move(o, CL_PEEK);
    order_command(o, 3, argv);
}

/* The search of an expired claim's order: found, its record is read (idem_peek); else the
 * claim is taken over. */
static void on_idem_find(struct order *o, const struct oev *e)
{
    (void)e;
    if (o->batch_failed)
        idem_unavailable(o);
    else if (o->batch_found)
        idem_peek(o);
    else
        idem_takeover(o);
}

/* The found record: gone (a part undone with its cart, or an order a re-PUT removed): no order
 * holds the claim, taken over; a cart's part: its cart decides (on_idem_decide); an order: the
 * claim is made final with it. */
static void on_idem_peek(struct order *o, const struct oev *e)
{
    const redisReply *r = e->r;
    if (e->st != LC_OK || !r || (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING)) {
        idem_unavailable(o);
        return;
    }
    if (r->type == REDIS_REPLY_NIL) {
        idem_takeover(o);
        return;
    }
    json_t *rec = json_loadb(r->str, r->len, 0, NULL);
    const char *of = rec ? json_string_value(json_object_get(rec, "part_of")) : NULL;
    int k = -1;
    char sku[VALIDATE_SKU_MAX + 1];
    if (!of || order_id_parse(of, strlen(of), &k, sku) != 0) {
        json_decref(rec);
        idem_adopt(o);
        return;
    }
    snprintf(o->ic->cart, sizeof(o->ic->cart), "%s", of);
    json_decref(rec);
    /* The cart exists exactly when its primary does; absent, the primary's id is tombstoned in
     * the same step, so it never will be, whatever the masters' clocks say: the healer's own
     * decision (part_undo.lua "primary"), and the healer then undoes the parts. */
    struct seg_keys sk;
    store_seg_keys(sku, k, &sk);
    char keep[24];
    snprintf(keep, sizeof(keep), "%d", STORE_UNDONE_KEEP_MS);
    const char *keys[4] = {sk.stock, sk.cnt, sk.orders, sk.undone};
    const char *args[3] = {o->ic->cart, keep, "primary"};
    cl_move(o, CL_DECIDE);
    order_script(o, SCRIPT_PART_UNDO, 4, keys, 3, args);
}

/* The found part's cart: whole, the claim is the cart's (made final with the cart's id, so a
 * replay answers the cart); never to be, the claim is free. */
static void on_idem_decide(struct order *o, const struct oev *e)
{
    const redisReply *r = e->r;
    if (e->st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        idem_unavailable(o);
        return;
    }
    if (r->element[0]->integer == STORE_UNDO_WHOLE) {
        snprintf(o->ic->found, sizeof(o->ic->found), "%s", o->ic->cart);
        idem_adopt(o);
    } else if (r->element[0]->integer == STORE_UNDO_NONE) {
        idem_takeover(o);
    } else {
        idem_unavailable(o);
    }
}

static void on_idem_adopt(struct order *o, const struct oev *e)
{
    if (e->st != LC_OK)
        idem_unavailable(o);
    else
        idem_claim(o); /* replay the now-final claim */
}

static void on_idem_takeover(struct order *o, const struct oev *e)
{
    switch (order_idem_takeover_verdict(e->st, e->r)) {
    case IDEM_OWNED:
        idem_own(o, e->r);
        idem_owned(o);
        return;
    case IDEM_CLAIM:
        idem_claim(o); /* someone else changed it meanwhile: look again */
        return;
    case IDEM_TICKET_EXPIRED: idem_ticket_refused(o, IDEM_TICKET_EXPIRED); return;
    default: idem_unavailable(o); return;
    }
}

static void on_idem_pause(struct order *o, const struct oev *e)
{
    if (e->ev == EV_CANCEL)
        idem_unavailable(o);
    else
        idem_claim(o);
}

int claim_to_settle(const struct order *o)
{
    if (!o->ic || !o->ic->claim_value[0])
        return 0; /* the key was never claimed by this request */
    return order_idem_final(o->out) != IDEM_FINAL_LEAVE && !o->cancelled;
}

/* Settles the claim after the order: the order id on success, deleted on a definite failure
 * (claim_to_settle leaves it pending when the outcome is unknown, when a replay then recovers
 * it, or when the loop is ending). */
void claim_settle(struct order *o, const struct claim_back *back)
{
    o->ic->back = back;
    char final[CLAIM_VALUE_MAX] = "";
    if (order_idem_final(o->out) == IDEM_FINAL_ORDER)
        /* a ticket's claim keeps this request's Idempotency-Key with the order (replays) */
        snprintf(final, sizeof(final), "%s%s%s", o->order_id, o->ic->ticket ? " " : "",
                 o->ic->ticket ? o->ic->khex : "");
    const char *keys[1] = {o->ic->claim};
    const char *args[2] = {o->ic->claim_value, final};
    cl_move(o, CL_SETTLE);
    order_script(o, SCRIPT_IDEM_SWAP, 1, keys, 2, args);
}

/* The settling's answer, whatever it is: the claim expires on its own otherwise. */
static void on_settle(struct order *o, const struct oev *e)
{
    (void)e;
    cl_move(o, CL_SETTLED);
    o->ic->back->settled(o);
}

void claim_step(struct order *o, const struct oev *e)
{
    const struct cstate_row *s = &cstates[o->ic->state];
    if (e->ev == EV_CANCEL && !s->timed)
        return; /* o->cancelled is set: the answer that comes ends the order */
    if (s->on)
        s->on(o, e);
}

int claim_carries_write(const struct idem_claim *ic)
{
    return ic && (ic->state == CL_CLAIM || ic->state == CL_TAKEOVER);
}

void claim_note_found(struct idem_claim *ic, const char *id)
{
    snprintf(ic->found, sizeof(ic->found), "%s", id);
}
