/*
 * The per-user limit (SPEC §11; docs/design.md "Per-user limits" and "The order path as a state
 * machine") as its own state machine, after SQLite's pager: its states with their meaning,
 * the table of legal moves, and one move function, lm_move(), that checks every change against
 * it. The order machine (order_fsm.c) hands an order of a SKU with a limit over to it in state
 * OS_LIMIT (limit_reserve: the units against the user's count) and passes it every event of the
 * order until it hands the order back with a result (back->limited); an order that then fails
 * gives its units back in OS_LIMIT_RELEASE (limit_release, then back->released). The hand-back
 * is the table of the order machine's functions given at the hand-over (struct limit_back), so
 * this file never calls order_fsm.c by name. Its Redis calls go through the order's I/O
 * (order_io.h), which counts them against the order's budget.
 *
 *   IDLE -> RESERVE <-> VERIFY -> RESOLVE -> RESERVE (once)
 *              |  (reserved)
 *              v
 *            WAIT (--redis-replica-acks) -> BACK (handed back: reserved, or the answer)
 *   BACK -> RESERVE (a PUT since, or the parts of a multi-segment order) | RELEASE -> RELEASED
 *
 * A limit group's reservation (docs/design.md "Limit groups") runs the same states on its own
 * struct user_resv (o->gv[i]) with the group's script (group_reserve.lua) and hash: o->lm is the
 * reservation the machine works on, set by the function that takes the order (limit_reserve,
 * group_reserve, limit_release, group_release). A group's entries name their SKU and its
 * segments, so the look-up of a refusal reads each entry's order where that entry says.
 */
#include "order_limit.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "app.h"
#include "log.h"
#include "metrics.h"
#include "order.h"
#include "order_claim.h"
#include "store.h"
#include "validate.h"

static void on_user_reserve(struct order *o, const struct oev *e);
static void on_user_verify(struct order *o, const struct oev *e);
static void entries_settle(struct order *o);
static void on_user_resolve(struct order *o, const struct oev *e);
static void on_user_wait(struct order *o, const struct oev *e);
static void on_user_release(struct order *o, const struct oev *e);

#define LTO(s) (1u << (s))
/* Each state: its name, its handler, and the states it may go to, with the functions that take
 * it there. No state is timed. */
static const struct lstate_row {
    const char *name;
    void (*on)(struct order *o, const struct oev *e);
    uint32_t next;
} lstates[LM_COUNT] = {
    /* limit_reserve */
    [LM_IDLE] = {"idle", NULL, LTO(LM_RESERVE)},
    /* on_user_reserve: user_reserved (the WAIT, or back), user_verify, back */
    [LM_RESERVE] = {"reserve", on_user_reserve, LTO(LM_WAIT) | LTO(LM_VERIFY) | LTO(LM_BACK)},
    /* on_user_verify: the USER_RESOLVE script, or back */
    [LM_VERIFY] = {"verify", on_user_verify, LTO(LM_RESOLVE) | LTO(LM_BACK)},
    /* on_user_resolve: limit_reserve again, or back */
    [LM_RESOLVE] = {"resolve", on_user_resolve, LTO(LM_RESERVE) | LTO(LM_BACK)},
    /* on_user_wait: back (reserved, or not durable) */
    [LM_WAIT] = {"wait", on_user_wait, LTO(LM_BACK)},
    /* limit_reserve again (a PUT since, or a multi-segment order), limit_release */
    [LM_BACK] = {"back", NULL, LTO(LM_RESERVE) | LTO(LM_RELEASE)},
    /* on_user_release: released */
    [LM_RELEASE] = {"release", on_user_release, LTO(LM_RELEASED)},
    [LM_RELEASED] = {"released", NULL, 0},
};
_Static_assert(LM_COUNT <= 32, "a state's next states are a 32-bit mask");

/* The one way the limit changes state: the move must be in the table (an assertion in debug
 * builds, an error line in release builds). */
static void lm_move(struct order *o, enum lstate next)
{
    struct user_resv *uv = o->lm;
    if (!(lstates[uv->state].next & LTO(next))) {
        log_msg(CONFIG_LOG_ERROR, "limit_bad_transition",
                "sku %s: state %s to %s is not in the table of order_limit.c", o->in.sku,
                lstates[uv->state].name, lstates[next].name);
        assert(!"a per-user limit's state change that is not in the table");
    }
    uv->state = next;
}

/* The limit is decided: back to the order. */
static void limit_back(struct order *o, enum order_outcome out)
{
    lm_move(o, LM_BACK);
    o->lm->back->limited(o, out);
}

/* The reservation o->lm: the SKU's (user_reserve.lua) or a group's (group_reserve.lua). */
static void lm_reserve(struct order *o, const struct limit_back *back)
{
    struct user_resv *uv = o->lm;
    uv->back = back;
    const char *keys[2] = {uv->users, uv->meta};
    const char *args[7] = {o->user, o->token, uv->qty, uv->bound, uv->margin, uv->sku, uv->nsegs};
    lm_move(o, LM_RESERVE);
    order_script(o, uv->group ? SCRIPT_GROUP_RESERVE : SCRIPT_USER_RESERVE, 2, keys,
                 uv->group ? 7 : 5, args);
}

void limit_reserve(struct order *o, const struct limit_back *back)
{
    o->lm = o->uv;
    lm_reserve(o, back);
}

void group_reserve(struct order *o, int i, const struct limit_back *back)
{
    o->lm = o->gv[i];
    lm_reserve(o, back);
}

/* The reservation holds: the commit must run before its expiry (the earlier of it and the
 * claim's). With --redis-replica-acks N the entry is first on N replicas of the SKU's master,
 * as an Idempotency-Key claim is: a failover that lost it would let the user past the limit. */
static void user_reserved(struct order *o, long long expiry)
{
    long long claim = atoll(o->claim_expiry);
    if (claim == 0 || expiry < claim)
        snprintf(o->claim_expiry, sizeof(o->claim_expiry), "%lld", expiry);
    if (o->app->cfg.redis_replica_acks > 0) {
        lm_move(o, LM_WAIT);
        order_replicas_wait(o);
        return;
    }
    limit_back(o, OUT_CREATED);
}

/* Looks for the orders of the user's entries past their deadline in every segment that may
 * hold them (their segment is not known until then): one batch of HGETs. */
static void user_verify(struct order *o)
{
    struct user_resv *uv = o->lm;
    /* the entries known committed or within their deadline (issue 29: their orders may have
     * ended) only as far as the budget allows: without them the refusal is as it was */
    for (int x = uv->n - 1; x >= 0 && order_over_budget(o, uv->n * uv->nseg + 2); x--) {
        if (uv->past[x] && strcmp(uv->exp[x], "0") != 0)
            continue;
        uv->n--;
        memmove(uv->hex[x], uv->hex[x + 1], sizeof(uv->hex[0]) * (size_t)(uv->n - x));
        memmove(uv->exp[x], uv->exp[x + 1], sizeof(uv->exp[0]) * (size_t)(uv->n - x));
        memmove(&uv->past[x], &uv->past[x + 1], sizeof(uv->past[0]) * (size_t)(uv->n - x));
        memmove(uv->esku[x], uv->esku[x + 1], sizeof(uv->esku[0]) * (size_t)(uv->n - x));
        memmove(&uv->ens[x], &uv->ens[x + 1], sizeof(uv->ens[0]) * (size_t)(uv->n - x));
    }
    /* each entry's orders: segments [0, ens[e]) of SKU esku[e] (a SKU's limit: its own) */
    int n = 0, most = 0;
    for (int e = 0; e < uv->n; e++) {
        if (!uv->group) {
            snprintf(uv->esku[e], sizeof(uv->esku[e]), "%s", o->in.sku);
            uv->ens[e] = uv->nseg;
        }
        if (uv->ens[e] < 0 || uv->ens[e] > SKUCACHE_MAX_SEGMENTS || !uv->esku[e][0])
            uv->ens[e] = 0; /* not what the scripts write: never found, settled as gone */
        n += uv->ens[e];
        most = uv->ens[e] > most ? uv->ens[e] : most;
    }
    if (n <= 0 && uv->group && uv->n > 0) {
        /* a group's entries none of which names where its order may be (not what the scripts
         * write): nothing to read, each is settled as not found */
        lm_move(o, LM_VERIFY);
        entries_settle(o);
        return;
    }
    if (n <= 0 || uv->nseg > SKUCACHE_MAX_SEGMENTS || order_over_budget(o, n + 2)) {
        limit_back(o, n <= 0 ? OUT_LIMIT : OUT_OVER_BUDGET);
        return;
    }
    struct seg_keys *keys = malloc(sizeof(*keys));
    char(*ids)[ORDER_ID_MAX + 1] = malloc(sizeof(*ids) * (size_t)n);
    char(*orders)[STORE_KEY_MAX] = malloc(sizeof(*orders) * (size_t)n);
    const char *(*argvs)[3] = malloc(sizeof(*argvs) * (size_t)n);
    if (!keys || !ids || !orders || !argvs) {
        free(keys);
        free(ids);
        free(orders);
        free(argvs);
        order_note_why(o, LC_ENOMEM, "out of memory");
        limit_back(o, OUT_UNAVAILABLE);
        return;
    }
    int i = 0;
    for (int e = 0; e < uv->n; e++)
        for (int k = 0; k < uv->ens[e]; k++, i++) {
            store_seg_keys(uv->esku[e], k, keys);
            snprintf(orders[i], sizeof(orders[i]), "%s", keys->orders);
            snprintf(ids[i], sizeof(ids[i]), "%s-%d-%s", uv->hex[e], k, uv->esku[e]);
            argvs[i][0] = "HGET";
            argvs[i][1] = orders[i];
            argvs[i][2] = ids[i];
        }
    (void)most;
    o->batch_failed = 0;
    lm_move(o, LM_VERIFY);
    order_batch(o, n, (const char *const(*)[3])argvs, 3);
    free(argvs);
    free(orders);
    free(ids);
    free(keys);
}

/* The reservation's answer. */
static void on_user_reserve(struct order *o, const struct oev *e)
{
    const redisReply *r = e->r;
    struct user_resv *uv = o->lm;
    if (e->st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        /* An error reply wrote nothing; a lost one may have written the entry, which then
         * counts until it is found not to have committed (docs/design.md). */
        if (e->st == LC_OK && r && r->type == REDIS_REPLY_ERROR)
            order_note_why(o, LC_EREDIS, r->str);
        metrics_redis_error();
        limit_back(o, OUT_UNAVAILABLE);
        return;
    }
    long long code = r->element[0]->integer;
    long long v1 = r->elements > 1 ? store_reply_int(r->element[1], 0) : 0;
    switch (code) {
    case STORE_RESERVE_OK:
        uv->reserved = 1;
        user_reserved(o, v1);
        return;
    case STORE_RESERVE_FREE: /* the limit was PATCHed away since this instance read it */
        limit_back(o, OUT_CREATED);
        return;
    case STORE_RESERVE_NO_SKU: limit_back(o, OUT_UNKNOWN_SKU); return;
    case STORE_RESERVE_NOT_STARTED:
        o->sale_at = v1;
        limit_back(o, OUT_NOT_STARTED);
        return;
    case STORE_RESERVE_ENDED:
        o->sale_at = v1;
        limit_back(o, OUT_ENDED);
        return;
    case STORE_RESERVE_OVER:
        uv->limit = v1;
        uv->held = r->elements > 2 ? store_reply_int(r->element[2], 0) : 0;
        uv->nseg = r->elements > 3 ? (int)store_reply_int(r->element[3], 0) : 0;
        uv->n = 0;
        /* each entry: hex, expiry, past (and a group's: its SKU and segments) */
        for (size_t i = 4, w = uv->group ? 5 : 3;
             i + w - 1 < r->elements && uv->n < USER_UNCERTAIN_MAX; i += w) {
            const redisReply *h = r->element[i], *x = r->element[i + 1], *p = r->element[i + 2];
            if (h->type != REDIS_REPLY_STRING || h->len != IDS_ORDER_HEX ||
                x->type != REDIS_REPLY_STRING || x->len >= sizeof(uv->exp[0]) ||
                p->type != REDIS_REPLY_STRING)
                continue;
            if (uv->group) {
                const redisReply *s = r->element[i + 3];
                uv->esku[uv->n][0] = '\0';
                if (s->type == REDIS_REPLY_STRING && validate_sku(s->str, s->len))
                    memcpy(uv->esku[uv->n], s->str, s->len + 1);
                uv->ens[uv->n] = (int)store_reply_int(r->element[i + 4], 0);
            }
            memcpy(uv->hex[uv->n], h->str, IDS_ORDER_HEX + 1);
            memcpy(uv->exp[uv->n], x->str, x->len + 1);
            uv->past[uv->n] = strcmp(p->str, "1") == 0;
            uv->n++;
        }
        if (uv->n == 0 || uv->verified) {
            limit_back(o, OUT_LIMIT);
            return;
        }
        uv->verified = 1;
        user_verify(o);
        return;
    default: break;
    }
    metrics_redis_error();
    limit_back(o, OUT_UNAVAILABLE);
}

/* The search of the entries' orders is in: each entry is live (an order found, not ended) or
 * not (none found: past its deadline it can no longer commit; or ended: issue 29, a cancelled
 * or expired order whose give-back is still queued counts for nothing, and user_release.lua
 * then finds its entry gone, so the count drops once). An entry within its deadline whose
 * order is not found may still commit, and one known committed and found live is as it was:
 * both are left out. */
static void on_user_verify(struct order *o, const struct oev *e)
{
    (void)e;
    if (o->batch_failed) {
        metrics_redis_error();
        limit_back(o, OUT_UNAVAILABLE);
        return;
    }
    entries_settle(o);
}

/* The verdicts of the search (o->batch_ints, each entry's ens[] replies in turn; none read for
 * an entry of ens 0): the USER_RESOLVE script, or back. */
static void entries_settle(struct order *o)
{
    struct user_resv *uv = o->lm;
    const char *args[1 + 3 * USER_UNCERTAIN_MAX];
    args[0] = o->user;
    int na = 1, at = 0;
    for (int x = 0; x < uv->n; x++) {
        int live = 0, ended = 0;
        for (int k = 0; k < uv->ens[x]; k++, at++) {
            live |= o->batch_ints[at] == 1;
            ended |= o->batch_ints[at] == 2;
        }
        if (live ? strcmp(uv->exp[x], "0") == 0 || !uv->past[x] : !ended && !uv->past[x])
            continue;
        args[na++] = uv->hex[x];
        args[na++] = uv->exp[x];
        args[na++] = live ? "1" : "0";
    }
    if (na == 1) { /* nothing to settle: the user is at the limit */
        limit_back(o, OUT_LIMIT);
        return;
    }
    const char *keys[1] = {uv->users};
    lm_move(o, LM_RESOLVE);
    order_script(o, SCRIPT_USER_RESOLVE, 1, keys, na, args);
}

/* The entries are settled: reserve again (once). */
static void on_user_resolve(struct order *o, const struct oev *e)
{
    if (e->st != LC_OK || !e->r || e->r->type != REDIS_REPLY_INTEGER) {
        metrics_redis_error();
        limit_back(o, OUT_UNAVAILABLE);
        return;
    }
    if (e->r->integer == 0) { /* nothing freed: the user is at the limit */
        limit_back(o, OUT_LIMIT);
        return;
    }
    lm_reserve(o, o->lm->back);
}

/* The reservation's WAIT: on enough replicas, the walk; else no order (the entry is released:
 * nothing was committed). */
static void on_user_wait(struct order *o, const struct oev *e)
{
    long long got = store_reply_acks(e->st, e->r);
    if (got >= o->app->cfg.redis_replica_acks) {
        limit_back(o, OUT_CREATED);
        return;
    }
    log_msg(CONFIG_LOG_WARN, "order_replica_ack_missing",
            "sku %s: per-user reservation on %lld of %d replicas (%s): no order placed", o->in.sku,
            got < 0 ? 0 : got, o->app->cfg.redis_replica_acks,
            e->st == LC_OK ? "WAIT timed out" : o->why);
    metrics_redis_error();
    limit_back(o, OUT_UNAVAILABLE);
}

/* An order that did not commit gives its reservation back at once (else it would count until
 * its deadline passed and a refusal looked for it). Only when nothing may have committed. */
static int resv_to_release(const struct user_resv *uv, enum order_outcome out)
{
    return uv && uv->reserved && out != OUT_CREATED && out != OUT_OUTCOME_UNKNOWN &&
           out != OUT_REPLAYED;
}

int limit_to_release(const struct order *o, enum order_outcome out)
{
    return resv_to_release(o->uv, out);
}

int group_to_release(const struct order *o, enum order_outcome out)
{
    for (int i = 0; i < o->ngv; i++)
        if (resv_to_release(o->gv[i], out))
            return i;
    return -1;
}

/* Gives o->lm's units back (user_release.lua on its hash). */
static void lm_release(struct order *o, const struct limit_back *back)
{
    o->lm->back = back;
    o->lm->reserved = 0;
    const char *keys[1] = {o->lm->users};
    const char *args[2] = {o->user, o->token};
    lm_move(o, LM_RELEASE);
    order_script(o, SCRIPT_USER_RELEASE, 1, keys, 2, args);
}

void limit_release(struct order *o, const struct limit_back *back)
{
    o->lm = o->uv;
    lm_release(o, back);
}

void group_release(struct order *o, int i, const struct limit_back *back)
{
    o->lm = o->gv[i];
    lm_release(o, back);
}

int group_add(struct order *o, const char *group, const char *sku, int nseg, long long units)
{
    /* a cart: one reservation per group, its items' units summed (asked once: the entry is
     * keyed by the cart's hex, and group_reserve.lua keeps an entry already there as it is) */
    for (int i = 0; i < o->ngv; i++) {
        struct user_resv *gv = o->gv[i];
        if (gv->state == LM_IDLE && strcmp(gv->name, group) == 0) {
            gv->units += units;
            snprintf(gv->qty, sizeof(gv->qty), "%lld", gv->units);
            return i;
        }
    }
    if (o->ngv >= LIMIT_GROUPS_MAX)
        return -1;
    struct user_resv *gv = calloc(1, sizeof(*gv));
    if (!gv)
        return -1;
    const struct config *cfg = &o->app->cfg;
    gv->group = 1;
    gv->units = units;
    snprintf(gv->name, sizeof(gv->name), "%s", group);
    snprintf(gv->sku, sizeof(gv->sku), "%s", sku);
    snprintf(gv->nsegs, sizeof(gv->nsegs), "%d", nseg);
    gv->nseg = nseg;
    store_group_key(gv->users, group, "users");
    store_group_key(gv->meta, group, "meta");
    snprintf(gv->qty, sizeof(gv->qty), "%lld", units);
    /* the longest the order may still commit after the reservation: as a SKU's (rules_begin) */
    snprintf(gv->bound, sizeof(gv->bound), "%d",
             cfg->lock_wait_ms + cfg->hold_ms + cfg->lock_lease_ms + 2 * cfg->redis_timeout_ms);
    snprintf(gv->margin, sizeof(gv->margin), "%d", IDEM_TAKEOVER_MARGIN_MS);
    o->gv[o->ngv] = gv;
    return o->ngv++;
}

char *group_record_member(const struct order *o)
{
    if (o->ngv == 0) /* every record of a SKU in no group (the hot path): nothing to build */
        return NULL;
    json_t *g = json_object();
    int n = 0;
    for (int i = 0; g && i < o->ngv; i++)
        if (o->gv[i]->reserved) {
            json_object_set_new(g, o->gv[i]->name, json_integer(o->gv[i]->units));
            n++;
        }
    char *text = g && n > 0 ? json_dumps(g, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(g);
    return text;
}

static void on_user_release(struct order *o, const struct oev *e)
{
    if (e->st != LC_OK || !e->r || e->r->type != REDIS_REPLY_ARRAY)
        log_msg(CONFIG_LOG_WARN, "user_release_failed",
                "sku %s: the units of an order that failed stay counted for its user until its "
                "deadline passes (%s)",
                o->in.sku, o->why[0] ? o->why : "unexpected reply");
    lm_move(o, LM_RELEASED);
    o->lm->back->released(o);
}

void limit_step(struct order *o, const struct oev *e)
{
    const struct lstate_row *s = &lstates[o->lm->state];
    if (e->ev == EV_CANCEL)
        return; /* no state is timed: o->cancelled is set, the answer that comes ends it */
    if (s->on)
        s->on(o, e);
}

int limit_carries_write(const struct user_resv *uv)
{
    return uv && uv->state == LM_RESERVE;
}

int limit_verifying(const struct user_resv *uv)
{
    return uv && uv->state == LM_VERIFY;
}
