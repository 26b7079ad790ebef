/*
 * The order path (SPEC §6) as one explicit state machine on a worker's event loop.
 *
 * For the segmented strategy:
 *   1. validate; replay or claim the Idempotency-Key (on Redis's clock);
 *   2. answer 409 at once when this instance knows the SKU's current version is sold out
 *      (re-checked against Redis at most sold_out_recheck_ms later);
 *   3. walk the segments from a random start, skipping known-empty ones, try-locking the others;
 *      the acquire script returns the segment's stock and version in the same round trip;
 *   4. with enough stock: the critical section (--hold-ms, a loop timer), then the fenced commit
 *      script, which checks the lock is still ours, decrements, writes the order and counters
 *      and releases the lock in one step: 2 round trips in all when uncontended;
 *   5. when every segment with stock was busy: wait for one of them up to --lock-wait-ms, then
 *      503 lock_timeout; all empty: 409 sold_out; stock left but no segment with enough: 409
 *      insufficient_stock. The wait is local when an order of this loop is on that segment
 *      already (seggate.h: queued behind it, woken by its release, which hands the gate over
 *      with the next acquire pipelined right behind the commit), else lockcore's asynchronous
 *      acquire, woken by the unlock message.
 * Per loop, at most one order is in Redis for a segment at a time (its gate, seggate.h): the
 * walk passes segments whose gate is taken, so it never sends a try bound to find the segment
 * held by its own loop.
 * A lost lock (stale fencing token) changes nothing and the walk goes on elsewhere. A segment
 * whose version differs from the cached one means a PUT happened: the layout is re-read and the
 * walk starts again under the new version.
 *
 * Shape. One struct order per in-flight order holds all of its state; o->state names what it
 * waits for, one wait per state, and on_<state> is what the order does when that wait ends;
 * step(o, ev) runs it. Every change of state goes through set_state(), checked against the
 * table `states` (the states each may go to, and the functions that take it there), which
 * also deletes a timed state's timer and keeps the critical-section gauge. The callbacks
 * (order_on_reply in order_io.c, on_acquired, ...) only translate a lockcore result into an
 * event. Two sub-protocols are machines of their own, with their own states and tables: the
 * Idempotency-Key claim (order_claim.c) and the per-user limit (order_limit.c); the order hands
 * itself over to them (OS_CLAIM, OS_LIMIT, ...: every event goes to them) with the table of its
 * hand-back functions (claim_hand_back, limit_hand_back), and they hand it back with a result
 * through it (order_claimed, order_limited, ...), never by name. The order's record, its Redis
 * I/O and call budget, which all three use, are order_io.c's (order_io.h): the calls run one
 * way, this file -> the sub-machines -> order_io.c, whose events reach step() through the
 * hooks set in o->io (io_hooks). The decisions that need no I/O are in order_walk.c and
 * order_idem.c. The strategies are a table (struct
 * strategy): how one segment is tried, and whether there is a walk at all.
 *
 * Ownership. order_create_async allocates the order; it owns itself until answer(), which
 * hands the areq back (areq_done) and frees it. At most one asynchronous operation is in flight
 * per order (a batch of pipelined reads counts as one: it completes when its last reply is
 * in), so answer() is only ever reached with nothing in flight and no timer armed; set_state
 * deletes a timer with the state it belongs to. A lockcore callback always comes (exactly once,
 * with LC_ESTATE when the client is freed at shutdown), so an order whose HTTP request was
 * abandoned (deadline, shutdown) still runs to answer() and is freed there; its late replies
 * are harmless. The areq's lc and base are the loop's; the order never leaves its loop.
 */
#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <event2/event.h>

#include "areq.h"
#include "clock.h"
#include "faultpoint.h"
#include "gate_store.h"
#include "handlers.h"
#include "hash.h"
#include "identity.h"
#include "ids.h"
#include "layout.h"
#include "log.h"
#include "metrics.h"
#include "order.h"
#include "order_cart.h"
#include "order_claim.h"
#include "order_idem.h"
#include "order_io.h"
#include "order_limit.h"
#include "order_multi.h"
#include "order_outcome.h"
#include "order_walk.h"
#include "rclock.h"
#include "rules.h"
#include "seggate.h"
#include "userrate.h"
#include "seglock.h"
#include "skucache.h"
#include "order_status.h"
#include "store.h"
#include "store_scripts.h"
#include "ticket.h"
#include "validate.h"

/* A strategy: how one segment is tried during a walk (NULL: the strategy has no walk and
 * starts the whole order its own way). */
struct strategy {
    const char *name;
    void (*try_segment)(struct order *o, int k);
    void (*start)(struct order *o);
};

static void step(struct order *o, enum oevent ev, lc_status st, const redisReply *r);
static void order_claimed(struct order *o, enum order_outcome out);
static void order_claim_settled(struct order *o);
static void order_limited(struct order *o, enum order_outcome out);
static void order_limit_released(struct order *o);

/* The hand-back tables the sub-machines get at the hand-over (order_claim.h, order_limit.h):
 * they return the order through these, never by name. */
static const struct claim_back claim_hand_back = {order_claimed, order_claim_settled};
static const struct limit_back limit_hand_back = {order_limited, order_limit_released};
static void order_group_limited(struct order *o, enum order_outcome out);
/* a limit group's reservation (docs/design.md "Limit groups"): the same machine, its own end */
static const struct limit_back group_hand_back = {order_group_limited, order_limit_released};
static int group_begin(struct order *o);
/* a cart's reservations in its groups, on its home item (order_item_groups) */
static void item_group_limited(struct order *o, enum order_outcome out);
static const struct limit_back item_group_hand_back = {item_group_limited, order_limit_released};
static void limits_passed(struct order *o);
static void set_state(struct order *o, enum ostate next);
static void on_hold(struct order *o, const struct oev *e);
static void place_done(struct order *o, enum order_outcome out);
static int multi_start(struct order *o);
static long long seen_total(const struct order *o);
static void note_seen(struct order *o, int k, long long stock);

/* ---- small helpers ---- */

/* Enters the timed state next with its timer armed for ms. */
static void set_state_timed(struct order *o, enum ostate next, int ms)
{
    set_state(o, next);
    order_timer_arm(o, ms);
}

/* Takes what the cache knows now into o->view when the cache still holds o->view's version.
 * 1 taken, 0 not. */
static int view_refresh(struct order *o)
{
    struct sku_view v;
    skucache_get(o->app->cache, o->in.sku, &v);
    if (v.version != o->view.version || v.segments != o->view.segments)
        return 0;
    o->view = v;
    return 1;
}

/* Makes the order id and record for segment k; returns the record's JSON text (kept in
 * o->record, sent as the 201 body as it is, so the order is serialised once). The id's random
 * part is the request's (o->token), the same on every segment it tries: at most one commit of a
 * request can succeed (the walk ends with the first that may have run), and a user's entry
 * names the order by it. A SKU with holds makes a "reserved" record: its commit adds
 * expires_at, on Redis's clock. */
/* The record's "grp" member: the limit groups the order reserved in, {"<group>": units},
 * so the script that ends it queues their give-backs (hold_end.lua). Out of memory: the
 * record is dropped (the commit is then not tried: OUT_UNAVAILABLE, as for the record). */
static void record_add_groups(struct order *o)
{
    free(o->grp_text);
    o->grp_text = group_record_member(o);
    size_t n = o->record ? strlen(o->record) : 0;
    if (!o->grp_text || n < 2)
        return;
    size_t g = strlen(o->grp_text);
    char *rec = malloc(n + g + 16);
    if (rec)
        snprintf(rec, n + g + 16, "%.*s,\"grp\":%s}", (int)(n - 1), o->record, o->grp_text);
    free(o->record);
    o->record = rec;
}

static const char *make_record(struct order *o, int k)
{
    free(o->record);
    o->record = NULL;
    snprintf(o->order_id, sizeof(o->order_id), "%s-%d-%s", o->token, k, o->in.sku);
    char created[32];
    rules_format_time(clock_wall_ms(), created);
    const char *user = o->has_user ? o->user : o->in.has_user_id ? o->in.user_id : NULL;
    o->record = order_record_text(
        o->order_id, o->in.sku, (long long)o->in.quantity, k, user, created,
        order_status_name(o->view.rules.ttl_s > 0 ? ORDER_STATUS_RESERVED : ORDER_STATUS_CREATED));
    record_add_groups(o);
    return o->record;
}

/*
 * Segment k is at version sver, not at o->view.version (the healing rules, docs/design.md):
 *   - behind (older, or no version at all): a PUT is rolling out, or the segment's reset was
 *     lost (a failover of its master). The order heals the layout once (layout_heal_async:
 *     every segment's reset again, each guarded by its version) and comes back to it
 *     (SEG_NOTREADY); still behind after that, the segment is left out (SEG_ERROR);
 *   - ahead: the cached layout is stale (SEG_STALE: re-read it), unless it was just re-read and
 *     the meta still has that version: then the meta write of a later PUT was lost and the
 *     segment is ahead of the meta itself. Its units are neither sold nor reset (their orders
 *     were answered 201); the SKU's version counter is raised past it so that the next PUT
 *     brings it back, and the order goes on without it (SEG_ERROR: never "sold out" while
 *     its stock is unknown).
 */
static enum seg_result version_differs(struct order *o, int k, long long sver)
{
    switch (order_walk_version(sver, o->view.version, o->healed, o->stale_from)) {
    case VV_NOTREADY: return SEG_NOTREADY;
    case VV_LEFT_OUT:
        log_msg(CONFIG_LOG_ERROR, "segment_behind",
                "sku %s segment %d: at version %lld after the layout %" PRId64
                " was rolled out again; left out",
                o->in.sku, k, sver, o->view.version);
        return SEG_ERROR;
    case VV_STALE: o->stale_from = o->view.version; return SEG_STALE;
    case VV_AHEAD: break;
    }
    if (!order_over_budget(o, 1)) { /* else the next reader raises the counter */
        order_spend(o, 1);
        layout_note_ahead(o->app->store, o->lc, o->in.sku, k, sver, o->view.version);
    }
    return SEG_ERROR;
}

/* Segment k refused the order's sale rules as older than its rules version seen (a PATCH's,
 * docs/design.md "The sale rules' version"): re-read them, as a stale layout is (SEG_STALE);
 * refused again at the same rules version just read from the meta, the meta lost the PATCH
 * (a failover): the rules get a new version and the segment is left out of this order. */
static enum seg_result rules_differ(struct order *o, int k, long long seen)
{
    if (o->rules_stale_from != o->view.rules.version) {
        o->rules_stale_from = o->view.rules.version;
        return SEG_STALE;
    }
    if (!order_over_budget(o, 1)) { /* else the next reader does it */
        order_spend(o, 1);
        layout_note_rules_ahead(o->app->store, o->lc, o->in.sku, k, seen, o->view.rules.version);
    }
    return SEG_ERROR;
}

/* Acts on a segment's verdict (order_walk.h): marks it empty in the cache, logs a damaged one,
 * decides a version that differs; returns the segment's result. */
static enum seg_result take_verdict(struct order *o, int k, const struct seg_verdict *v)
{
    if (v->empty)
        skucache_mark_empty(o->app->cache, o->in.sku, o->view.version, k);
    if (v->damaged) {
        log_msg(CONFIG_LOG_ERROR, "segment_damaged",
                "sku %s segment %d: stock or counters missing or not numbers (or the user's "
                "limit entries damaged); nothing written",
                o->in.sku, k);
        snprintf(o->why, sizeof(o->why), "segment %d damaged", k);
    }
    if (v->rules)
        return rules_differ(o, k, v->at);
    return v->differs ? version_differs(o, k, v->sver) : v->r;
}

/* Interprets a commit script result {code, value}. */
static enum seg_result commit_result(struct order *o, int k, const redisReply *r)
{
    struct seg_verdict v;
    order_walk_commit_verdict(r, &v);
    if (v.r == SEG_DONE && !v.differs && r->elements > 2 &&
        r->element[2]->type == REDIS_REPLY_STRING) {
        /* a hold: its record as stored, with expires_at */
        char *rec = strndup(r->element[2]->str, r->element[2]->len);
        if (rec) {
            free(o->record);
            o->record = rec;
        }
    }
    if (v.r == SEG_NOT_STARTED || v.r == SEG_ENDED)
        o->sale_at = v.at;
    if (v.r == SEG_SHORT || v.r == SEG_EMPTY)
        /* the stock the commit found, for the plan of an order from several segments: a commit
         * handed the hold on a gate read none before (the segment stays out of the walk) */
        note_seen(o, k, store_reply_int(r->element[1], 0));
    if (v.r == SEG_LIMIT && o->uv) {
        o->uv->limit = v.at;
        o->uv->held = r->elements > 2 ? store_reply_int(r->element[2], 0) : 0;
        o->uv->open = r->elements > 3 ? store_reply_int(r->element[3], 0) : 0;
    }
    if (v.r == SEG_ERROR && v.at > 0) {
        /* the order log is full (order_walk.c: STORE_COMMIT_LOG_FULL): the sink is behind */
        metrics_order_log_full();
        log_msg(CONFIG_LOG_ERROR, "order_log_full",
                "sku %s segment %d: the order log holds %lld entries (--order-log-cap %d): new "
                "orders are refused until inventory-sink catches up",
                o->in.sku, k, v.at, o->app->cfg.order_log_cap);
        snprintf(o->why, sizeof(o->why), "segment %d: the order log is full", k);
    }
    return take_verdict(o, k, &v);
}

/* The commit's keys and args for segment o->k (record made). */
static void commit_args(struct order *o, struct store_commit_call *c)
{
    struct store_commit_in in = {
        .sku = o->in.sku,
        .k = o->k,
        .version = o->view.version,
        .qty = o->in.quantity,
        .id = o->order_id,
        .record = o->record,
        .idem = o->idem,
        .expiry = o->claim_expiry,
        .rules = &o->view.rules,
        .log_cap = o->app->cfg.order_log ? o->app->cfg.order_log_cap : 0,
        .user = o->has_user         ? o->user
                : o->in.has_user_id ? o->in.user_id
                                    : "",
        .hold_index = !config_redis_cluster(&o->app->cfg), /* issue 29: the sweeper's index */
    };
    if (o->uv && o->uv->in_commit) {
        in.users = o->uv->users;
        in.meta = o->uv->meta;
        in.hex = o->token;
    }
    store_commit_call(&in, c);
}

/* The options of every order lock: the configured lease, renewed on loop timers unless
 * lock_renewal is 0. */
static void lock_opts(const struct order *o, lc_lock_opts *lo)
{
    lc_lock_opts_init(lo);
    lo->lease_ms = o->app->cfg.lock_lease_ms;
    lo->watchdog = o->app->cfg.lock_renewal;
}

/* Frees the order's lock handle (a hold still held is released in the background). */
static void drop_lock(struct order *o)
{
    struct seglock *l = o->lock;
    o->lock = NULL; /* before the free, which may call back into this order */
    seglock_free(l);
}

/* Where the order's locks live: the loop's Redis, --lock-redis's nodes or --lock-mysql's server
 * (seglock.h). */
static void lock_env(const struct order *o, struct seglock_env *env)
{
    env->data = o->lc;
    env->n = areq_lock_nodes(o->ar, &env->nodes);
    env->mysql = areq_lock_mysql(o->ar);
    env->live = areq_live_seglocks(o->ar);
    env->zk = areq_lock_zk(o->ar);
    /* A silent node costs every attempt this much: a fraction of the lease, at most the Redis
     * timeout. */
    int t = o->app->cfg.lock_lease_ms / 10, most = o->app->cfg.redis_timeout_ms;
    env->node_timeout_ms = t < 1 ? 1 : t > most ? most : t;
}

/* Most orders of one loop served under one hold of a segment's lock. While orders of the loop
 * are queued on the segment's gate, the holder commits without releasing and hands the hold
 * (and the gate) to the first of them, whose commit then follows in the same write; the last
 * of a chain commits with the release. Each commit is fenced on its own. After a release the
 * gate passes on only when the commit is answered, when other loops and instances, woken by
 * the same unlock message, have an even chance at the segment. */
#define GATE_CHAIN_MAX 8

/* Wakes an order the gate was just handed to: on its timer, so on this loop turn, but after
 * the current step (whose commit is already in the output buffer). */
static void gate_wake(struct order *o)
{
    evtimer_del(o->timer);
    o->woken = 1;
    o->gate_k = o->k;
    event_active(o->timer, EV_TIMEOUT, 1);
    o->timer_on = 1;
}

/* The order is done with the gate it owns (if any): the next queued order owns it now. */
static void gate_leave(struct order *o)
{
    if (o->gate_k < 0)
        return;
    struct seggate_waiter *w = seggate_leave(o->gates, o->in.sku, o->gate_k);
    if (w)
        gate_wake(w->owner);
    else
        skucache_set_held(o->app->cache, o->in.sku, o->gate_k, 0);
    o->gate_k = -1;
}

/* ---- lockcore callbacks: each turns a result into an event ---- */

/* The order's I/O (order_io.c) asks: did the call just answered carry a write a WAIT must vouch
 * for? A claim's or a per-user reservation's (the sub-machine holding the order says), or a
 * commit. */
static int io_carries_write(const struct order *o)
{
    return (o->state == OS_CLAIM && claim_carries_write(o->ic)) ||
           (o->state == OS_LIMIT && limit_carries_write(o->lm)) || o->state == OS_COMMIT ||
           o->state == OS_ATOMIC_COMMIT || o->state == OS_SINGLE_COMMIT;
}

/* A batch's reply i, answered (o->batch_ints[i] is its integer): the per-user limit's
 * verification reads records, the claim's find takes the first order id. */
static void io_batch_reply(struct order *o, int i, const redisReply *r)
{
    if (o->state == OS_LIMIT && limit_verifying(o->lm)) /* a record: 1 live, 2 ended, 0 none */
        /* (a part of a multi-segment order is not its order: its primary is, SPEC §13) */
        o->batch_ints[i] = r && r->type == REDIS_REPLY_STRING && !strstr(r->str, "\"part_of\"")
                               ? (strstr(r->str, "\"status\":\"cancelled\"") ||
                                          strstr(r->str, "\"status\":\"expired\"")
                                      ? 2
                                      : 1)
                               : 0;
    else if (o->ic && !o->batch_found && r && r->type == REDIS_REPLY_STRING) {
        claim_note_found(o->ic, r->str);
        o->batch_found = 1;
    }
}

/* What the order's I/O hands back to this machine (o->io). */
static const struct order_io_hooks io_hooks = {
    .event = step,
    .carries_write = io_carries_write,
    .batch_reply = io_batch_reply,
};

static void on_acquired(struct seglock *lock, lc_status st, const redisReply *v, void *arg)
{
    order_note_why(arg, st, seglock_errmsg(lock));
    step(arg, EV_ACQUIRED, st, v);
}

static void on_evaluated(struct seglock *lock, lc_status st, const redisReply *r, void *arg)
{
    order_note_ref(arg);
    order_note_why(arg, st, seglock_errmsg(lock));
    step(arg, EV_EVAL, st, r);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ((struct order *)arg)->timer_on = 0;
    step(arg, EV_TIMER, LC_OK, NULL);
}

/* Sends a batch in state next (order_batch). */
static void run_batch(struct order *o, enum ostate next, int n, const char *const (*argvs)[3],
                      int argc)
{
    set_state(o, next);
    order_batch(o, n, argvs, argc);
}

/* With --redis-replica-acks N: enters state (waiting for EV_REPLY) and WAITs N on the
 * connection that carried the order's last reply (o->ref: its claim, reservation or commit),
 * which is where the write to vouch for went (lc_async_wait); a connection not known answers
 * LC_EIO. 1 when the WAIT is under way, 0 when there is nothing to wait for (acks 0). */
static int replicas_wait(struct order *o, enum ostate state)
{
    int acks = o->app->cfg.redis_replica_acks;
    if (acks <= 0)
        return 0;
    set_state(o, state);
    order_replicas_wait(o);
    return 1;
}

/* ---- layout steps (layout.c's asynchronous read and settle) ---- */

/* Takes a layout read into o->view and the cache. 1 found, 0 unknown SKU, -1 error. */
static int take_layout(struct order *o, int found, const struct layout *l)
{
    if (found == 0)
        skucache_forget(o->app->cache, o->in.sku);
    if (found <= 0)
        return found;
    if (l->segments > SKUCACHE_MAX_SEGMENTS)
        return -1;
    skucache_set_layout(o->app->cache, o->in.sku, l->version, l->segments, &l->rules, l->read_ms);
    /* The layout as read, not as re-read from the cache: another request may drop or replace
     * the cache entry at any moment (a restock, cancel or DELETE on this instance). */
    memset(&o->view, 0, sizeof(o->view));
    o->view.version = l->version;
    o->view.segments = l->segments;
    o->view.rules = l->rules;
    view_refresh(o);
    return 1;
}

/* o->off_rc for the state: OS_LAYOUT / OS_CLAIM_LAYOUT 1, 0 or -1 (take_layout); OS_ROLLOUT the
 * settle's result; OS_RECHECK_LAYOUT 2 the layout changed (reloaded), -2 the SKU is gone, -1
 * error, 1 still sold out (nothing pending). */
static void on_layout_back(void *arg, int found, struct layout *l)
{
    struct order *o = arg;
    order_spend(o, l->calls);
    if (found < 0)
        order_note_why(o, LC_EIO, l->why);
    switch (o->layout_job) {
    case LJ_LOAD: o->off_rc = take_layout(o, found, l); break;
    case LJ_RELOAD:
        found = take_layout(o, found, l);
        o->off_rc = found > 0 ? 2 : found == 0 ? -2 : -1;
        break;
    case LJ_CHECK_PENDING:
        if (found < 0) {
            o->off_rc = -1;
        } else if (layout_unsettled(l)) {
            /* A restock (or PUT) cut off half-way: complete it, then walk afresh. */
            skucache_forget(o->app->cache, o->in.sku);
            o->layout_job = LJ_RELOAD;
            layout_read_settled_async(o->app->store, o->lc, o->in.sku, on_layout_back, o);
            return;
        } else {
            o->off_rc = 1;
        }
        break;
    case LJ_SETTLE:
        o->off_rc = found;
        o->healed = found > 0;
        break;
    }
    step(o, EV_LAYOUT, LC_OK, NULL);
}

/* Starts a layout step: LJ_LOAD, LJ_RELOAD and LJ_SETTLE read and settle; LJ_CHECK_PENDING
 * reads, and settles and reloads only when something is pending. */
static void run_layout(struct order *o, enum ostate next, enum layout_job job)
{
    /* A settle may take a script per segment; a heal does. */
    int cost = job == LJ_SETTLE ? 3 + o->view.segments : 1;
    if (order_over_budget(o, cost)) {
        place_done(o, OUT_OVER_BUDGET);
        return;
    }
    set_state(o, next);
    o->layout_job = job;
    o->off_rc = -1;
    if (job == LJ_CHECK_PENDING)
        layout_read_async(o->app->store, o->lc, o->in.sku, on_layout_back, o);
    else if (job == LJ_SETTLE)
        layout_heal_async(o->app->store, o->lc, o->in.sku, on_layout_back, o);
    else
        layout_read_settled_async(o->app->store, o->lc, o->in.sku, on_layout_back, o);
}

/* ---- the walk ---- */

static void place_done(struct order *o, enum order_outcome out);
static void round_begin(struct order *o);
static void segment_done(struct order *o, enum seg_result r);
static void walk_next(struct order *o);
static void round_end(struct order *o);
static void wait_for_busy(struct order *o, int64_t left);

/* Starts the commit of segment k under o->lock (OS_COMMIT, out of the critical section: Redis
 * releases the lock in the commit itself, so the next holder may enter before its reply is back
 * here), or the atomic script (OS_ATOMIC_COMMIT, inside it until the reply). */
static void commit_segment(struct order *o)
{
    if (!make_record(o, o->k)) {
        /* No id or record (no randomness, no memory): nothing may be committed. */
        set_state(o, OS_COMMIT);
        if (o->lock)
            drop_lock(o);
        segment_done(o, SEG_ERROR);
        return;
    }
    struct store_commit_call c;
    commit_args(o, &c);
    order_spend(o, 1);
    /* A commit that does not start was never sent: its status (never LC_EIO) says nothing
     * changed. */
    lc_status st;
    if (o->app->cfg.strategy == STRATEGY_ATOMIC) {
        set_state(o, OS_ATOMIC_COMMIT);
        st = lc_async_script(o->lc, store_script(o->app->store, SCRIPT_COMMIT_ATOMIC), c.nkeys,
                             c.keys, NULL, c.nargs, c.args, NULL, order_on_reply, o);
        if (st != LC_OK) {
            order_note_why(o, st, lc_errmsg()); /* not started: the message just recorded */
            step(o, EV_REPLY, st, NULL);
        }
        return;
    }
    set_state(o, OS_COMMIT);
    if (o->gate_k >= 0 && o->chain + 1 < GATE_CHAIN_MAX &&
        seggate_queued(o->gates, o->in.sku, o->gate_k) > 0 && !seglock_lost(o->lock) &&
        seglock_eval_detached(o->lock, store_script(o->app->store, SCRIPT_COMMIT), c.nkeys, c.keys,
                              c.nargs, (const char **)c.args, order_on_reply, o) == LC_OK) {
        /* The next queued order of the loop takes over the hold and the gate. */
        struct seggate_waiter *w = seggate_leave(o->gates, o->in.sku, o->gate_k);
        struct order *n = w->owner;
        n->lock = o->lock;
        n->chain = o->chain + 1;
        o->lock = NULL;
        o->gate_k = -1;
        gate_wake(n);
        return;
    }
    st = seglock_eval(o->lock, store_script(o->app->store, SCRIPT_COMMIT), LC_EVAL_RELEASE, c.nkeys,
                      c.keys, c.nargs, (const char **)c.args, on_evaluated, o);
    if (st != LC_OK) {
        order_note_why(o, st, "the lock operation did not start"); /* seglock sets no message */
        step(o, EV_EVAL, st, NULL);
    }
}

/* Enters the critical section (OS_HOLD): --hold-ms on a loop timer, then the commit (with no
 * hold at once, from the same state). */
static void critical_section(struct order *o)
{
    if (o->app->cfg.hold_ms > 0) {
        set_state_timed(o, OS_HOLD, o->app->cfg.hold_ms);
        return;
    }
    set_state(o, OS_HOLD);
    struct oev e = {EV_TIMER, LC_OK, NULL};
    on_hold(o, &e);
}

/* How long a segment found held elsewhere is walked past at first: about the rest of the
 * holder's critical section (--hold-ms, the same on every instance of a deployment), at least
 * 1 ms (a commit's round trip); found held again, longer, up to --busy-hint-max-ms. */
static int busy_hint_ms(const struct order *o)
{
    int h = o->app->cfg.hold_ms, max = o->app->cfg.busy_hint_max_ms;
    return h < 1 ? 1 : h > max ? max : h;
}

/* Segmented: lock segment k (waiting up to o->waiting ms), check it and commit. */
static void try_segment_locked(struct order *o, int k)
{
    struct seglock_env env;
    lock_env(o, &env);
    /* the acquire (on each lock node and the data Redis with --lock-redis), and its release
     * when the segment cannot serve */
    int cost = (env.n > 0 ? env.n + 1 : 1) + 1;
    if (order_over_budget(o, cost)) {
        gate_leave(o);
        place_done(o, OUT_OVER_BUDGET);
        return;
    }
    order_spend(o, cost - 1);
    o->k = k;
    if (o->gate_k != k) {
        gate_leave(o); /* never owned here: one segment at a time */
        if (seggate_enter(o->gates, o->in.sku, k) == 0) {
            o->gate_k = k;
            /* The instance-wide hint: the other loops walk past the segment while a gate of
             * this loop is on it, instead of sending a try bound to find it busy. */
            skucache_set_held(o->app->cache, o->in.sku, k, 1);
        }
    }
    struct seg_keys sk;
    store_seg_keys(o->in.sku, k, &sk);
    lc_lock_opts lo;
    lock_opts(o, &lo);
    o->chain = 0;
    set_state(o, OS_ACQUIRE);
    if (seglock_new(&env, sk.lock, &lo, &o->lock) != LC_OK) {
        o->lock = NULL;
        order_note_why(o, LC_ENOMEM, "lock handle: out of memory");
        step(o, EV_ACQUIRED, LC_EIO, NULL);
        return;
    }
    const char *reads[2] = {sk.stock, sk.sver};
    o->t0 = clock_mono_ms();
    lc_status st = seglock_acquire(o->lock, o->waiting, 2, reads, on_acquired, o);
    if (st != LC_OK) {
        order_note_why(o, st, "the lock operation did not start"); /* seglock sets no message */
        step(o, EV_ACQUIRED, LC_EIO, NULL);
    }
}

/* Atomic: one lock-free script on segment k. */
static void try_segment_atomic(struct order *o, int k)
{
    if (order_over_budget(o, 1)) {
        place_done(o, OUT_OVER_BUDGET);
        return;
    }
    o->k = k;
    critical_section(o);
}

/* Single-lock (the baseline): the SKU's one lock, taken with waiting, then the segments are
 * tried under it. */
static void single_start(struct order *o)
{
    char name[STORE_KEY_MAX];
    store_sku_key(name, o->in.sku, "slock");
    lc_lock_opts lo;
    lock_opts(o, &lo);
    struct seglock_env env;
    lock_env(o, &env);
    o->any_short = 0;
    set_state(o, OS_SINGLE_ACQUIRE);
    if (seglock_new(&env, name, &lo, &o->lock) != LC_OK) {
        o->lock = NULL;
        order_note_why(o, LC_ENOMEM, "lock handle: out of memory");
        step(o, EV_ACQUIRED, LC_EIO, NULL);
        return;
    }
    int64_t wait = o->deadline_ms - clock_mono_ms();
    order_spend(o, (env.n > 0 ? env.n + 1 : 1) + 1); /* the acquire, and the release at the end */
    o->t0 = clock_mono_ms();
    lc_status st = seglock_acquire(o->lock, wait > 0 ? (int)wait : 0, 0, NULL, on_acquired, o);
    if (st != LC_OK) {
        order_note_why(o, st, "the lock operation did not start"); /* seglock sets no message */
        step(o, EV_ACQUIRED, LC_EIO, NULL);
    }
}

static const struct strategy strategies[] = {
    [STRATEGY_SEGMENTED] = {"segmented", try_segment_locked, NULL},
    [STRATEGY_SINGLE_LOCK] = {"single-lock", NULL, single_start},
    [STRATEGY_ATOMIC] = {"atomic", try_segment_atomic, NULL},
};

/* Single-lock: commits on the next non-empty segment under the SKU's lock, or ends. */
static void single_next(struct order *o)
{
    int nseg = o->view.segments;
    for (; o->i < nseg; o->i++) {
        int k = (o->start + o->i) % nseg;
        if (skucache_is_empty(&o->view, k))
            continue;
        o->k = k;
        if (order_over_budget(o, 1) || !make_record(o, k)) {
            o->sres = SEG_ERROR;
            break;
        }
        struct store_commit_call c;
        commit_args(o, &c);
        o->i++;
        set_state(o, OS_SINGLE_COMMIT);
        order_spend(o, 1);
        lc_status st = seglock_eval(o->lock, store_script(o->app->store, SCRIPT_COMMIT), 0, c.nkeys,
                                    c.keys, c.nargs, (const char **)c.args, on_evaluated, o);
        if (st != LC_OK) { /* not sent: never LC_EIO, so not "unknown" */
            order_note_why(o, st, "the lock operation did not start"); /* seglock sets no message */
            step(o, EV_EVAL, st, NULL);
        }
        return;
    }
    /* The end of the single-lock attempt (the critical section ends with the next state). */
    enum order_outcome out = OUT_UNAVAILABLE;
    enum single_end end = order_walk_single_end(o->sres, o->any_short, o->settled, &out);
    drop_lock(o); /* released in the background, pipelined before anything sent next */
    switch (end) {
    case SE_ANSWER: place_done(o, out); return;
    case SE_SETTLE:
        o->settled = 1;
        run_layout(o, OS_ROLLOUT, LJ_SETTLE);
        return;
    case SE_PAUSE: set_state_timed(o, OS_ROLLOUT_PAUSE, 2); return;
    case SE_RELOAD:
        skucache_forget(o->app->cache, o->in.sku);
        o->need_layout = 1;
        break;
    case SE_AGAIN: break;
    }
    round_begin(o);
}

static unsigned process_salt;
static pthread_once_t process_salt_once = PTHREAD_ONCE_INIT;

static void process_salt_init(void)
{
    if (getrandom(&process_salt, sizeof(process_salt), 0) != sizeof(process_salt))
        process_salt = (unsigned)clock_wall_ms();
}

/* The shift of the loops' shares of sku's segments (own_segment). */
static unsigned own_salt(const char *sku)
{
    pthread_once(&process_salt_once, process_salt_init);
    return (hash_str(HASH_FNV_BASIS, sku) ^ process_salt) & 0xffffu;
}

/* Whether segment k is a first choice of the order's loop: with several loops, each walks its
 * own share of the segments first (their gates are on that loop, so their waits are local) and
 * the others' after, which keeps the loops of one instance out of each other's way (a segment
 * a gate of another loop is on is passed by the instance-wide hint). The
 * share is shifted per SKU and per process, so the instances of a cluster do not all start on
 * the same segments either. */
static int own_segment(const struct order *o, int k)
{
    return (int)(((unsigned)k + o->own_salt) % (unsigned)o->nloops) == o->loop;
}

/* The walk itself: tries the next segment that may serve, or ends the round. Segmented with
 * several loops: two passes, the loop's own segments, then the others. */
static void walk_next(struct order *o)
{
    int nseg = o->view.segments;
    int passes = o->app->cfg.strategy == STRATEGY_SEGMENTED && o->nloops > 1 ? 2 : 1;
    int64_t now = clock_mono_ms();
    for (; o->i < passes * nseg && !o->need_layout; o->i++) {
        int k = (o->start + o->i % nseg) % nseg;
        if (passes > 1 && (o->i < nseg) != own_segment(o, k))
            continue;
        /* The other loops' segments only when no segment of this loop's share is on one of its
         * gates: waiting behind an order of this loop (its gate, then the hold it hands on)
         * costs less than meeting another loop's chain of holds in Redis, which kept 1.5 % of
         * the orders over 5 ms (docs/performance.md "Where the time goes"). A share busy only
         * elsewhere (other instances) still sends the walk on. */
        if (passes > 1 && o->i >= nseg && o->gate_seen)
            break;
        if (skucache_is_empty(&o->view, k) || ((o->w.done[k / 64] >> (k % 64)) & 1))
            continue;
        if (o->app->cfg.strategy == STRATEGY_SEGMENTED &&
            (seggate_busy(o->gates, o->in.sku, k) || skucache_is_held(&o->view, k) ||
             seggate_hinted_busy(o->gates, o->in.sku, k, now))) {
            /* this instance holds it, or another one did a moment ago: no round trip */
            o->gate_seen |= seggate_busy(o->gates, o->in.sku, k);
            order_walk_busy(&o->w, k);
            continue;
        }
        /* A request paused or slowed past its deadline takes no new lock. */
        if ((o->tried++ > 0 || !o->first) && clock_mono_ms() >= o->deadline_ms) {
            place_done(o, order_walk_end(&o->w, 1));
            return;
        }
        o->i++;
        o->waiting = 0;
        o->strat->try_segment(o, k);
        return;
    }
    round_end(o);
}

/* The round is over: what order_walk_round_end says. */
static void round_end(struct order *o)
{
    o->first = 0;
    int64_t left = o->deadline_ms - clock_mono_ms();
    switch (order_walk_round_end(&o->w, o->need_layout, left, o->settled)) {
    case RE_RELOAD:
        skucache_forget(o->app->cache, o->in.sku);
        round_begin(o);
        return;
    case RE_ANSWER: place_done(o, order_walk_end(&o->w, 0)); return;
    case RE_TIMEOUT: place_done(o, order_walk_end(&o->w, 1)); return;
    case RE_AGAIN: round_begin(o); return;
    case RE_SETTLE:
        o->settled = 1;
        run_layout(o, OS_ROLLOUT, LJ_SETTLE);
        return;
    case RE_PAUSE: set_state_timed(o, OS_ROLLOUT_PAUSE, 2); return;
    case RE_WAIT:
        /* the segments not busy hold less each, but enough together: take from them rather
         * than wait (SPEC §13) */
        if (o->w.any_short && multi_start(o))
            return;
        wait_for_busy(o, left);
        return;
    }
}

/* Every segment that might serve was busy: wait for one, up to left ms. Behind an order of
 * this loop when there is one (the shortest queue), woken by its release; else in Redis, woken
 * by the unlock message. */
static void wait_for_busy(struct order *o, int64_t left)
{
    int nseg = o->view.segments;
    metrics_lock_wait();
    int at = order_walk_busy_nth(&o->w, (int)(order_rnd64() % (uint64_t)o->w.nbusy)), best = -1,
        best_q = 0;
    for (int j = 0; j < nseg; j++) {
        int k = (at + j) % nseg;
        if (!((o->w.busy[k / 64] >> (k % 64)) & 1))
            continue;
        if (!seggate_busy(o->gates, o->in.sku, k))
            continue;
        int q = seggate_queued(o->gates, o->in.sku, k);
        if (best < 0 || q < best_q) {
            best = k;
            best_q = q;
        }
    }
    if (best >= 0) {
        o->k = best;
        o->woken = 0;
        o->gw.owner = o;
        seggate_queue(o->gates, o->in.sku, best, &o->gw);
        set_state_timed(o, OS_GATE, (int)left);
        return;
    }
    o->waiting = (int)left;
    try_segment_locked(o, at);
}

/* Queued on segment o->k's gate: handed the gate (o->woken), or the deadline passed. */
static void gate_on_timer(struct order *o)
{
    if (!o->woken) {
        seggate_unqueue(o->gates, o->in.sku, o->k, &o->gw);
        place_done(o, order_walk_end(&o->w, 1));
        return;
    }
    o->woken = 0;
    o->gate_seen = 0; /* its turn came: a walk that goes on may try the other loops' share */
    int64_t left = o->deadline_ms - clock_mono_ms();
    if (left <= 0 || o->cancelled) {
        if (o->lock)
            drop_lock(o); /* an inherited hold: released in the background */
        gate_leave(o);
        place_done(o, o->cancelled ? OUT_UNAVAILABLE : order_walk_end(&o->w, 1));
        return;
    }
    if (o->lock) {
        /* Handed the hold too (GATE_CHAIN_MAX): straight into the critical section; the commit
         * finds out whether the segment still has enough. */
        if (order_over_budget(o, 1)) {
            drop_lock(o); /* released in the background */
            gate_leave(o);
            place_done(o, OUT_OVER_BUDGET);
            return;
        }
        critical_section(o);
        return;
    }
    o->waiting = (int)left;
    try_segment_locked(o, o->k);
}

/* A segment's result during a walk (o->waiting: the wait after a round) or its wait. */
static void segment_done(struct order *o, enum seg_result r)
{
    gate_leave(o); /* the segment's turn is over for this order */
    if (o->cancelled) {
        place_done(o, order_walk_settles(r) ? order_walk_settled_outcome(r) : OUT_UNAVAILABLE);
        return;
    }
    if (r == SEG_LIMIT && o->uv && o->uv->open > 0) {
        /* Over the limit counting entries whose orders may never commit (a reservation's on
         * the two-step path, cut off): that path looks for them, frees those without an order
         * and reserves again (docs/design.md "Per-user limits"). */
        o->uv->in_commit = 0;
        set_state(o, OS_LIMIT);
        limit_reserve(o, &limit_hand_back);
        return;
    }
    if (order_walk_settles(r)) {
        place_done(o, order_walk_settled_outcome(r));
        return;
    }
    if (r == SEG_NOTREADY && !o->settled) {
        /* Behind the layout: bring the segments to it now (a PUT rolling out, or a reset lost
         * in a failover), then walk again; the busy segments are still there afterwards. */
        o->waiting = 0;
        o->settled = 1;
        run_layout(o, OS_ROLLOUT, LJ_SETTLE);
        return;
    }
    if (!o->waiting) {
        if (r == SEG_STALE)
            o->need_layout = 1;
        else if (order_walk_note(&o->w, o->k, r))
            metrics_failover();
        /* The short segments read so far hold the quantity together: take it from them now
         * (SPEC §13) rather than walk every other segment first. Near the end of a sale this
         * folds the remainders of near-empty segments into orders. */
        if (r == SEG_SHORT && multi_start(o))
            return;
        walk_next(o);
        return;
    }
    o->waiting = 0;
    if (r == SEG_BUSY) {
        place_done(o, order_walk_end(&o->w, 1));
        return;
    }
    if (r == SEG_STALE) {
        skucache_forget(o->app->cache, o->in.sku);
        o->need_layout = 1;
    } else {
        int nbusy = o->w.nbusy;
        if (order_walk_note(&o->w, o->k, r))
            metrics_failover();
        o->w.nbusy = nbusy;
    }
    round_begin(o);
}

/* Starts the walk of this round (the layout is known). */
static void recheck_start(struct order *o);

static void walk_start(struct order *o)
{
    int nseg = o->view.segments;
    if (nseg <= 0 || nseg > SKUCACHE_MAX_SEGMENTS) {
        place_done(o, OUT_UNAVAILABLE); /* never: a layout read always has segments */
        return;
    }
    if (o->item) {
        /* a cart's item reads nothing here: the cart's lock turn plans it (order_multi.h,
         * probe: one segment's try-lock, whose acquire reads its stock, and the other segments
         * read only when it falls short), so an item costs what a one-segment order does. The
         * sold-out re-check's reads (item_read) are planned from as read. */
        if (o->item_read && seen_total(o) < o->in.quantity) {
            place_done(o, OUT_INSUFFICIENT);
            return;
        }
        if (!o->seen && !(o->seen = calloc(SKUCACHE_MAX_SEGMENTS, sizeof(*o->seen)))) {
            place_done(o, OUT_UNAVAILABLE);
            return;
        }
        set_state(o, OS_CART);
        o->item->ready(o->item_arg, o);
        return;
    }
    if (o->strat->start) {
        o->strat->start(o);
        return;
    }
    o->w.nbusy = 0;
    o->gate_seen = 0;
    memset(o->w.busy, 0, sizeof(o->w.busy));
    o->w.retry = o->w.notready = 0;
    o->start = (int)(order_rnd64() % (uint64_t)nseg);
    o->i = 0;
    o->tried = 0;
    walk_next(o);
}

/* The sold-out re-check: every segment's stock and version in one pipelined batch. */
static void recheck_start(struct order *o)
{
    int nseg = o->view.segments;
    /* a cart's item reads the stock alone: the version is read under each lock it takes
     * (order_multi.c), and the cart's budget is one for all its items */
    int per = o->item ? 1 : 2;
    if (order_over_budget(o, per * nseg)) {
        place_done(o, OUT_OVER_BUDGET);
        return;
    }
    struct seg_keys *keys = malloc(sizeof(*keys) * (size_t)nseg);
    const char *(*argvs)[3] = malloc(sizeof(*argvs) * 2 * (size_t)nseg);
    if (!keys || !argvs) {
        free(keys);
        free(argvs);
        place_done(o, OUT_UNAVAILABLE);
        return;
    }
    for (int k = 0; k < nseg; k++) {
        store_seg_keys(o->in.sku, k, &keys[k]);
        argvs[per * k][0] = "GET";
        argvs[per * k][1] = keys[k].stock;
        if (per == 2) {
            argvs[2 * k + 1][0] = "GET";
            argvs[2 * k + 1][1] = keys[k].sver;
        }
    }
    run_batch(o, OS_RECHECK, per * nseg, (const char *const(*)[3])argvs, 2);
    free(argvs);
    free(keys);
}

static void rules_begin(struct order *o);
static void ticket_claim_start(struct order *o);

/* The sale rules hold for the layout of o->view's version. */
static void rules_applied(struct order *o)
{
    o->rules_done = 1;
    o->rules_version = o->view.version;
    o->rules_rver = o->view.rules.version;
}

/* The layout is known (o->view): the sale rules (once per layout and rules version), the
 * sold-out answers, then
 * the walk. A PUT since the rules were applied replaced the users' counts with its orders: the
 * reservation is made again for the new layout (user_reserve.lua keeps an entry this request
 * still has, so that costs one round trip), else the order could commit into it uncounted. */
static void layout_known(struct order *o)
{
    if (o->rules_done &&
        (o->rules_version != o->view.version || o->rules_rver != o->view.rules.version))
        o->rules_done = 0; /* a PUT, or a PATCH (the rules re-read after a commit refused them) */
    if (o->view.sold_out && !o->view.recheck_due) {
        place_done(o, OUT_SOLD_OUT_FAST);
        return;
    }
    if (!o->rules_done) {
        rules_begin(o);
        return;
    }
    if (o->view.sold_out) {
        recheck_start(o);
        return;
    }
    walk_start(o);
}

/* The top of a round: every round is bounded by the deadline, checked before every lock
 * attempt; "unavailable" is only ever the answer to a Redis failure. Segments found empty,
 * short or failing stay excluded for the rest of this request. */
static void round_begin(struct order *o)
{
    if (o->cancelled) {
        place_done(o, OUT_UNAVAILABLE);
        return;
    }
    if (!o->first && clock_mono_ms() >= o->deadline_ms) {
        place_done(o, order_walk_end(&o->w, 1));
        return;
    }
    if (o->need_layout) {
        o->need_layout = 0;
        memset(&o->w, 0, sizeof(o->w));
        if (o->seen)
            memset(o->seen, 0, SKUCACHE_MAX_SEGMENTS * sizeof(*o->seen));
        o->item_read = 0; /* a cart's item: nothing read of the new layout */
        skucache_get(o->app->cache, o->in.sku, &o->view);
        if (!o->view.version) {
            run_layout(o, OS_LAYOUT, LJ_LOAD);
            return;
        }
        layout_known(o);
        return;
    }
    /* Fresh knowledge of empty and held segments for the next walk. */
    int64_t version = o->view.version;
    skucache_get(o->app->cache, o->in.sku, &o->view);
    if (o->view.version != version) {
        o->need_layout = 1;
        round_begin(o);
        return;
    }
    walk_start(o);
}

/* ---- the sale rules (SPEC §11): the window and the per-user limit ---- */

/* How far (ms) from the sale's start or end an answer is left to Redis even when this
 * instance's estimate of Redis's clock says which side it is on (beyond the estimate's own
 * error bound, rclock.h). */
#define SALE_FAST_MARGIN_MS 50

/* The sale window by this instance's estimate of Redis's clock: OUT_NOT_STARTED or OUT_ENDED
 * when the estimate is sure of it (o->sale_at set), else OUT_CREATED (go on: Redis decides, in
 * the reservation or the commit). No Redis round trip: the thousands of requests that come
 * before a sale's start are answered here (docs/design.md "The sale window"). */
static enum order_outcome window_fast(struct order *o, const struct sku_rules *ru)
{
    int64_t now, err;
    if ((ru->sale_start_ms <= 0 && ru->sale_end_ms <= 0) || rclock_now(&now, &err) != 0)
        return OUT_CREATED;
    if (ru->sale_start_ms > 0 && now + err + SALE_FAST_MARGIN_MS < ru->sale_start_ms) {
        o->sale_at = ru->sale_start_ms;
        return OUT_NOT_STARTED;
    }
    if (ru->sale_end_ms > 0 && now - err - SALE_FAST_MARGIN_MS >= ru->sale_end_ms) {
        o->sale_at = ru->sale_end_ms;
        return OUT_ENDED;
    }
    return OUT_CREATED;
}

/* Whether the per-user limit is checked inside the commit (docs/design.md "Per-user limits"):
 * on one Redis, where the commit script can read the user's entries beside the segment, for
 * the strategies whose commit ends the order (segmented, atomic); not on a Redis Cluster (the
 * entries and the segment are in different slots), not with --limit-two-step. */
static int limit_in_commit(const struct order *o)
{
    const struct config *cfg = &o->app->cfg;
    /* a cart's item: its parts commit before the cart exists (as a multi-segment order's) */
    return !cfg->limit_two_step && cfg->strategy != STRATEGY_SINGLE_LOCK &&
           !config_redis_cluster(cfg) && !o->item;
}

/* The reservation is settled (a round trip or two after the view was taken): the walk, with
 * fresh knowledge of the segments this instance holds and found empty meanwhile, as every later
 * round has (round_begin). Walking on the older copy tried segments another loop of this
 * instance had taken since, each a lost lock attempt and often a wait in Redis
 * (docs/performance.md, "Sale rules"). */
static void rules_passed(struct order *o)
{
    rules_applied(o);
    view_refresh(o);
    layout_known(o);
}

/* ---- the waiting room's ticket (SPEC §16; docs/design.md "The ticket and the order") ---- */

/* Checks the body's ticket, if any, for the order's SKU and verified user (o->tk_*): once, when
 * the order is made; whether it is needed is the rules' to say (ticket_judged). */
static void ticket_note(struct order *o)
{
    if (!o->in.has_ticket)
        return;
    if (!o->has_user) {
        o->tk_err = ERROR_USER_REQUIRED;
        return;
    }
    struct ticket t;
    o->tk_err = (int)ticket_check(o->app->queue_key, o->in.ticket, o->in.sku, o->user, &t);
    if (o->tk_err != ERROR_NONE)
        return;
    o->tk_n = t.n;
    o->tk_exp = t.exp_ms;
    snprintf(o->tk_field, sizeof(o->tk_field), ORDER_TICKET_FIELD_PREFIX "%" PRIu64 ":%" PRId64,
             t.n, t.exp_ms);
}

/* A SKU with a waiting room (its rules as this order judges them): the order needs a ticket for
 * this SKU and its verified user. OUT_CREATED: it has one (claimed or to claim), else the
 * answer. */
static enum order_outcome ticket_judged(const struct order *o)
{
    if (!o->in.has_ticket)
        return OUT_TICKET_REQUIRED;
    switch (o->tk_err) {
    case ERROR_NONE: return OUT_CREATED;
    case ERROR_USER_REQUIRED: return OUT_TICKET_USER_REQUIRED;
    case ERROR_TICKET_WRONG_SKU: return OUT_TICKET_WRONG_SKU;
    case ERROR_TICKET_WRONG_USER: return OUT_TICKET_WRONG_USER;
    default: return OUT_TICKET_INVALID;
    }
}

/* Whether the order's claim is its ticket's (before its first round): a valid ticket, on a SKU
 * whose rules at hand have a waiting room. A ticket sent to a SKU without one is not looked at,
 * unless the rules re-read say the room is on (rules_begin). */
static int ticket_to_claim(const struct order *o)
{
    return o->in.has_ticket && o->tk_err == ERROR_NONE && !o->tk_claimed &&
           o->view.rules.queue_rate > 0;
}

/* A SKU in a limit group (its rule limit_group, as this order judges the rules): the order's
 * units are reserved in the group (order_limit.h group_reserve: the two-step path, on one Redis
 * too, since the group is in another slot than the segments), once per group; the walk follows
 * (order_group_limited). 1 when the order was taken (reserving, or answered), 0 when there is no
 * group or its reservation is decided already. */
static int group_begin(struct order *o)
{
    const char *g = o->view.rules.limit_group;
    if (!g[0])
        return 0;
    if (!o->has_user) {
        place_done(o, OUT_USER_REQUIRED);
        return 1;
    }
    /* a cart's item: the cart reserves once per group it touches, the sum of its items' units
     * there, on its home item (order_item_groups): items reserving each under the cart's one
     * hex found "their" entry there, and a cart of two SKUs of a group counted 1 */
    if (o->item)
        return 0;
    int i = 0;
    while (i < o->ngv && strcmp(o->gv[i]->name, g) != 0)
        i++;
    if (i < o->ngv && o->gv[i]->state == LM_BACK)
        return 0; /* reserved (or found uncapped) before this walk */
    if (i == o->ngv &&
        group_add(o, g, o->in.sku, o->view.segments, (long long)o->in.quantity) < 0) {
        order_note_why(o, LC_ENOMEM, "out of memory");
        place_done(o, OUT_UNAVAILABLE);
        return 1;
    }
    set_state(o, OS_LIMIT);
    group_reserve(o, i, &group_hand_back);
    return 1;
}

/* The SKU's own limit is settled (or checked by the commit): the group's, then the walk. */
static void limits_passed(struct order *o)
{
    if (!group_begin(o))
        rules_passed(o);
}

/* Applies the SKU's rules before the walk (the layout, so the rules, known; re-read first when
 * this instance's copy is older than sold_out_recheck_ms): the window's fast answer, then, for
 * a SKU with a limit, the reservation against the user's count. */
static void rules_begin(struct order *o)
{
    if (o->view.rules_stale && !o->rules_read) {
        o->rules_read = 1; /* once: with sold_out_recheck_ms 0 they are always stale */
        run_layout(o, OS_LAYOUT, LJ_LOAD);
        return;
    }
    const struct sku_rules *ru = &o->view.rules;
    if (ru->queue_rate > 0) {
        enum order_outcome t = ticket_judged(o);
        if (t == OUT_CREATED && !o->tk_claimed) {
            if (!o->ic) {
                ticket_claim_start(o); /* order_claimed: the rules again, the claim held */
                return;
            }
            /* The rules were judged without a room when the order claimed its key (a PATCH
             * since; nothing was placed: the commit refused the older rules): the key's claim
             * is deleted, then the ticket's is claimed (order_claim_settled), which carries
             * the key. A loop ending meanwhile: 503, retry. */
            o->out = OUT_TICKET_RECLAIM;
            if (claim_to_settle(o)) {
                o->tk_switch = 1;
                set_state(o, OS_CLAIM_SETTLE);
                claim_settle(o, &claim_hand_back);
                return;
            }
            t = OUT_TICKET_RECLAIM;
        }
        if (t != OUT_CREATED) {
            place_done(o, t);
            return;
        }
    }
    enum order_outcome w = window_fast(o, ru);
    if (w != OUT_CREATED) {
        if (!o->rules_read) /* else the rules were just read from Redis: not without Redis */
            metrics_sale_window_fast();
        place_done(o, w);
        return;
    }
    if (ru->limit_per_user <= 0) {
        if (group_begin(o))
            return;
        rules_applied(o);
        layout_known(o);
        return;
    }
    if (!o->has_user) {
        place_done(o, OUT_USER_REQUIRED);
        return;
    }
    const struct config *cfg = &o->app->cfg;
    if (!o->uv && !(o->uv = calloc(1, sizeof(*o->uv)))) {
        order_note_why(o, LC_ENOMEM, "out of memory");
        place_done(o, OUT_UNAVAILABLE);
        return;
    }
    struct user_resv *uv = o->uv;
    store_sku_key(uv->users, o->in.sku, "users");
    store_sku_key(uv->meta, o->in.sku, "meta");
    snprintf(uv->qty, sizeof(uv->qty), "%" PRId64, o->in.quantity);
    /* The longest the order may still commit after the reservation: as an Idempotency-Key
     * claim's (claim_begin), which the commit's deadline shares. */
    snprintf(uv->bound, sizeof(uv->bound), "%d",
             cfg->lock_wait_ms + cfg->hold_ms + cfg->lock_lease_ms + 2 * cfg->redis_timeout_ms);
    snprintf(uv->margin, sizeof(uv->margin), "%d", IDEM_TAKEOVER_MARGIN_MS);
    if (limit_in_commit(o)) {
        uv->in_commit = 1;
        limits_passed(o);
        return;
    }
    set_state(o, OS_LIMIT);
    limit_reserve(o, &limit_hand_back);
}

static void answer(struct order *o);

/* ---- the end ---- */

static void order_free(struct order *o)
{
    gate_leave(o); /* never owned here on any path; a backstop, so a gate cannot stay shut */
    if (o->timer)
        event_free(o->timer);
    drop_lock(o);
    free(o->record);
    free(o->batch_ints);
    free(o->slots);
    free(o->ic);
    free(o->uv);
    for (int i = 0; i < o->ngv; i++)
        free(o->gv[i]);
    free(o->grp_text);
    multi_free(o->multi);
    free(o->seen);
    free(o);
}

/* Fills the response from the outcome, hands the areq back and frees the order. */
static void answer(struct order *o)
{
    struct response *res = &o->ar->res;
    /* the error, message and metric from outcome_table.h; below, what else the answer carries
     * (its extra column) and the log line of a 503 */
    if (o->item) /* a cart's item: the cart counts the cart once */
        order_outcome_answer(res, o->out);
    else
        order_outcome_respond(res, o->out, o->view.rules.ttl_s > 0);
    switch (o->out) {
    case OUT_CREATED:
        (void)response_order_location(res, o->order_id, (int)sizeof(o->order_id));
        res->status = 201;
        /* the answer carries the order's parts (SPEC §13): a one-segment record has none */
        res->text = order_answer_text(o->record, o->k, (long long)o->in.quantity);
        res->content_type = "application/json";
        if (!res->text) {
            res->text = o->record;
            o->record = NULL;
        }
        break;
    case OUT_UNAVAILABLE:
        log_msg(CONFIG_LOG_WARN, "order_unavailable", "sku %s: %s", o->in.sku,
                o->why[0]      ? o->why
                : o->cancelled ? "the loop is ending"
                               : "unexpected reply");
        break;
    case OUT_OVER_BUDGET:
        log_msg(CONFIG_LOG_WARN, "order_over_budget",
                "sku %s: %d Redis calls made, the next step would pass "
                "order_redis_call_budget %d; nothing changed",
                o->in.sku, o->calls, o->app->cfg.order_redis_call_budget);
        break;
    case OUT_OUTCOME_UNKNOWN:
        /* Still 503 unavailable (SPEC §5), marked so a client knows a plain retry could buy
         * twice: the same Idempotency-Key replays the order if it was placed. */
        if (!o->acked) /* else on_replica_wait said why */
            log_msg(CONFIG_LOG_WARN, "order_outcome_unknown", "sku %s: %s", o->in.sku,
                    o->why[0] ? o->why : "unexpected reply");
        if (res->body)
            json_object_set_new(res->body, "outcome", json_string("unknown"));
        break;
    case OUT_NOT_STARTED: {
        char at[32];
        rules_format_time(o->sale_at, at);
        if (res->body)
            json_object_set_new(res->body, "sale_start", json_string(at));
        int64_t now, err;
        int64_t left = rclock_now(&now, &err) == 0 ? o->sale_at - now : 1000;
        res->retry_after = left > 1000 ? (int)((left + 999) / 1000) : 1;
        break;
    }
    case OUT_LIMIT:
        if (res->body && o->glimited) {
            json_object_set_new(res->body, "limit_group", json_string(o->glimited->name));
            json_object_set_new(res->body, "limit_per_user", json_integer(o->glimited->limit));
        } else if (res->body && o->uv) {
            json_object_set_new(res->body, "limit_per_user", json_integer(o->uv->limit));
        }
        break;
    default: break;
    }
    set_state(o, OS_DONE);
    struct areq *ar = o->ar;
    if (o->item) { /* a cart's item: its answer is the cart's to use */
        const struct item_back *ib = o->item;
        void *arg = o->item_arg;
        int idx = o->item_idx;
        enum order_outcome out = o->out;
        order_free(o);
        ib->answered(arg, idx, out);
        return;
    }
    metrics_order_redis_calls(o->calls);
    order_free(o);
    areq_done(ar);
}

/* With --redis-replica-acks N: after a commit, WAIT N on the connection that carried it (so
 * on the committed segment's master, the one that ran it even after an ASK), so the order is
 * on N replicas before the 201. A commit whose connection is unknown gets no 201. */
static void replica_wait(struct order *o)
{
    (void)replicas_wait(o, OS_REPLICA_WAIT);
}

/* WAIT's answer: enough replicas → the 201; fewer (timeout), or no answer → the order is
 * committed on the master but may not survive its failover: 503 with outcome unknown. */
static void on_replica_wait(struct order *o, const struct oev *e)
{
    lc_status st = e->st;
    const redisReply *r = e->r;
    o->acked = 1;
    long long got = store_reply_acks(st, r);
    if (got >= o->app->cfg.redis_replica_acks) {
        place_done(o, OUT_CREATED);
        return;
    }
    log_msg(CONFIG_LOG_WARN, "order_replica_ack_missing",
            "sku %s order %s: committed, but on %lld of %d replicas (%s)", o->in.sku, o->order_id,
            got < 0 ? 0 : got, o->app->cfg.redis_replica_acks,
            st == LC_OK ? "WAIT timed out" : o->why);
    place_done(o, OUT_OUTCOME_UNKNOWN);
}

/* ---- orders larger than one segment (SPEC §13, order_multi.h) ---- */

/* Notes the stock the walk read in segment k (a short one; 0: empty), for the plan of an order
 * from several segments. */
static void note_seen(struct order *o, int k, long long stock)
{
    if (o->app->cfg.strategy != STRATEGY_SEGMENTED || k < 0 || k >= o->view.segments)
        return;
    if (!o->seen) {
        if (stock <= 0)
            return;
        o->seen = calloc(SKUCACHE_MAX_SEGMENTS, sizeof(*o->seen));
        if (!o->seen)
            return;
    }
    o->seen[k] = stock;
}

/* The units the short segments hold as last read (the walk's reads, or a multi-segment
 * attempt's under its locks). */
static long long seen_total(const struct order *o)
{
    long long total = 0;
    for (int k = 0; o->seen && k < o->view.segments; k++)
        total += o->seen[k] > 0 ? o->seen[k] : 0;
    return total;
}

static void on_multi_cb(void *arg, enum multi_phase_end end)
{
    struct order *o = arg;
    o->multi_end = end;
    step(o, EV_MULTI, LC_OK, NULL);
}

/* The walk found stock, but no segment with enough: serve the order from several segments (the
 * segmented strategy; twice at most per request). 1 started, 0 not: answer as the walk says. */
static int multi_start(struct order *o)
{
    if (o->app->cfg.strategy != STRATEGY_SEGMENTED || !o->seen || o->multi_tries >= 2 ||
        o->cancelled || o->item)
        return 0;
    if (seen_total(o) < o->in.quantity)
        return 0; /* the remaining total is below the quantity: insufficient_stock */
    if (o->uv && o->uv->in_commit) {
        /* The parts commit before the order exists, so the limit cannot wait for a commit:
         * reserve first (the two-step path), then walk again, and the next multi_start goes on
         * under the reservation. */
        o->uv->in_commit = 0;
        set_state(o, OS_LIMIT);
        limit_reserve(o, &limit_hand_back);
        return 1;
    }
    o->multi_tries++;
    struct multi_req rq;
    order_multi_req(o, &rq);
    free(o->grp_text);
    o->grp_text = group_record_member(o);
    rq.grp = o->grp_text; /* the primary's "grp": its groups' give-backs */
    rq.budget = o->app->cfg.order_redis_call_budget - o->calls - order_end_calls(o);
    multi_free(o->multi);
    o->multi = multi_new(&rq, on_multi_cb, o);
    if (!o->multi)
        return 0;
    set_state(o, OS_MULTI);
    faultpoint("multi_lock"); /* tests: the walk's reads taken, no lock yet */
    multi_lock(o->multi);
    return 1;
}

/* A phase of the multi-segment order ended: the critical section (locks held, intent written),
 * or its result. */
static void on_multi(struct order *o, const struct oev *e)
{
    (void)e;
    if (o->multi_end == MULTI_READY) {
        if (o->cancelled) {
            multi_commit(o->multi, 1);
        } else if (o->app->cfg.hold_ms > 0) {
            set_state_timed(o, OS_MULTI_HOLD, o->app->cfg.hold_ms);
        } else {
            set_state(o, OS_MULTI_HOLD);
            set_state(o, OS_MULTI);
            multi_commit(o->multi, 0);
        }
        return;
    }
    struct multi_result *r = multi_result(o->multi);
    order_spend(o, r->calls);
    if (r->why[0])
        snprintf(o->why, sizeof(o->why), "%s", r->why);
    enum order_outcome out = r->out;
    if (out == OUT_OUTCOME_UNKNOWN) /* answer() leaves it to the acks' step, which is here */
        log_msg(CONFIG_LOG_WARN, "order_outcome_unknown", "sku %s order %s: %s", o->in.sku,
                r->order_id, r->why[0] ? r->why : "unexpected reply");
    if (out == OUT_CREATED || out == OUT_OUTCOME_UNKNOWN) {
        snprintf(o->order_id, sizeof(o->order_id), "%s", r->order_id);
        o->acked = 1; /* the WAITs of every part's master were made (or not needed) */
        if (out == OUT_CREATED) {
            free(o->record);
            o->record = r->record;
            r->record = NULL;
            if (r->parts > 1)
                metrics_multi_order(r->parts);
        }
    }
    if (out == OUT_INSUFFICIENT) {
        /* The segments it locked held less than the walk had read them to: other orders took
         * units meanwhile. That says nothing of the segments the walk had not read yet (it
         * starts an attempt as soon as the shorts it read hold the quantity) nor of the ones
         * it found busy: their reads replace the walk's, and the walk goes on (the segments read
         * stay out). insufficient_stock only once every segment was read short or empty
         * (SPEC §13); before, the request answered it here with segments never read. */
        multi_seen(o->multi, o->seen);
        multi_free(o->multi);
        o->multi = NULL;
        round_begin(o);
        return;
    }
    int again = r->again, reload = r->reload;
    o->sale_at = r->sale_at;
    multi_free(o->multi);
    o->multi = NULL;
    if (again && !o->cancelled && clock_mono_ms() < o->deadline_ms) {
        if (reload) {
            skucache_forget(o->app->cache, o->in.sku);
            o->need_layout = 1;
        }
        round_begin(o);
        return;
    }
    place_done(o, out);
}

/* The critical section of a multi-segment order is over (or the loop is ending). */
static void on_multi_hold(struct order *o, const struct oev *e)
{
    set_state(o, OS_MULTI);
    multi_commit(o->multi, e->ev == EV_CANCEL);
}

/* The order attempt is decided: settle the key claim (if any), then answer. */
static void place_done(struct order *o, enum order_outcome out)
{
    if (out == OUT_INSUFFICIENT && multi_start(o))
        return;
    if (out == OUT_INSUFFICIENT && seen_total(o) >= o->in.quantity)
        /* The shorts as last read hold the quantity, but no multi-segment attempt (two at
         * most) could take it: other orders took units before its locks. Contention, not a
         * shortage (SPEC §13): retry. */
        out = OUT_LOCK_TIMEOUT;
    if (out == OUT_CREATED && o->app->cfg.redis_replica_acks > 0 && !o->acked) {
        replica_wait(o);
        return;
    }
    if (limit_to_release(o, out)) {
        o->out = out;
        set_state(o, OS_LIMIT_RELEASE);
        limit_release(o, &limit_hand_back);
        return;
    }
    int gi = group_to_release(o, out);
    if (gi >= 0) { /* each group's reservation in turn (order_limit_released: here again) */
        o->out = out;
        set_state(o, OS_LIMIT_RELEASE);
        group_release(o, gi, &group_hand_back);
        return;
    }
    o->out = out;
    if (*o->idem && out != OUT_REPLAYED && out != OUT_IDEM_FAILED && claim_to_settle(o)) {
        set_state(o, OS_CLAIM_SETTLE);
        claim_settle(o, &claim_hand_back);
        return;
    }
    answer(o);
}

/* ---- the states: one handler each (the event it waits for came: e) ---- */

/* Hands the order to the Idempotency-Key claim's machine (order_claim.c): order_claimed. */
static void claim_start(struct order *o)
{
    set_state(o, OS_CLAIM);
    claim_begin(o, &claim_hand_back);
}

/* The same machine claims the ticket: named in the segments' idem hashes by its own field
 * (o->tk_field, never a client's key), the client's key o->key carried in the claim. */
static void ticket_claim_start(struct order *o)
{
    o->tk_mode = 1;
    o->idem = o->tk_field;
    claim_start(o);
}

/* Before the first round (the layout known): the ticket's claim, the key's, or the round. */
static void claim_or_round(struct order *o)
{
    if (ticket_to_claim(o)) {
        ticket_claim_start(o);
        return;
    }
    if (*o->idem) {
        claim_start(o);
        return;
    }
    o->first = 1;
    o->need_layout = 1;
    round_begin(o);
}

static void order_claimed(struct order *o, enum order_outcome out)
{
    if (out != OUT_CREATED) {
        place_done(o, out);
        return;
    }
    if (o->tk_mode) {
        o->tk_claimed = 1;
        faultpoint("ticket_claimed"); /* tests: the ticket's claim held, no lock yet */
    }
    o->first = 1;
    o->need_layout = 1;
    round_begin(o);
}

/* gate_store_used's answer: a failure is logged (the ticket stays counted live until its
 * expiry), nothing else. */
static void on_ticket_marked(void *arg, lc_status st, const char *why, const struct gate_used *u)
{
    (void)arg;
    (void)u;
    if (st != LC_OK)
        log_msg(CONFIG_LOG_WARN, "ticket_mark_failed", "%s", why ? why : "");
}

static void order_claim_settled(struct order *o)
{
    if (o->tk_switch) {
        /* the key's claim deleted: the ticket's now (rules_begin) */
        o->tk_switch = 0;
        free(o->ic);
        o->ic = NULL;
        ticket_claim_start(o);
        return;
    }
    /* The gate's bookkeeping (issue 32; docs/design.md "The ticket and the order"): a
     * ticket's order made (its claim now final) marks the ticket used in the gate, sent
     * without waiting for it and without the request's context: its loss only keeps the
     * ticket counted live until its expiry (the budget is then conservative). */
    if (o->tk_claimed && o->out == OUT_CREATED)
        gate_store_used(o->app->store, o->lc, NULL, o->in.sku, o->user, o->order_id,
                        on_ticket_marked, NULL);
    answer(o);
}

static void order_limited(struct order *o, enum order_outcome out)
{
    if (out == OUT_CREATED)
        limits_passed(o);
    else
        place_done(o, out);
}

static void order_group_limited(struct order *o, enum order_outcome out)
{
    if (out == OUT_LIMIT)
        o->glimited = o->lm; /* the answer names the group and its limit */
    if (out == OUT_CREATED)
        rules_passed(o);
    else
        place_done(o, out);
}

static void order_limit_released(struct order *o)
{
    place_done(o, o->out);
}

/* The layout before the claim: the claim, or the answer. */
static void on_claim_layout(struct order *o, const struct oev *e)
{
    (void)e;
    if (o->off_rc <= 0) {
        int found = o->off_rc;
        metrics_order(found ? METRICS_ORDER_UNAVAILABLE : METRICS_ORDER_UNKNOWN_SKU);
        response_error(&o->ar->res, found ? ERROR_UNAVAILABLE : ERROR_UNKNOWN_SKU,
                       found ? "the stock store is unavailable" : "no such sku");
        place_done(o, OUT_IDEM_FAILED);
        return;
    }
    claim_or_round(o);
}

static void on_layout(struct order *o, const struct oev *e)
{
    (void)e;
    if (o->off_rc < 0)
        place_done(o, OUT_UNAVAILABLE);
    else if (o->off_rc == 0)
        place_done(o, OUT_UNKNOWN_SKU);
    else
        layout_known(o);
}

/* The batch of a sold-out re-check is in. */
static void on_recheck(struct order *o, const struct oev *e)
{
    (void)e;
    int nseg = o->view.segments;
    if (o->batch_failed) {
        place_done(o, OUT_UNAVAILABLE);
        return;
    }
    uint64_t empty[SKUCACHE_MAX_SEGMENTS / 64] = {0};
    int nempty = 0, stale = 0;
    int per = o->item ? 1 : 2; /* recheck_start: a cart's item read the stock alone */
    o->item_read = o->item != NULL;
    for (int k = 0; k < nseg; k++) {
        if (o->item)
            note_seen(o, k, o->batch_ints[k]);
        else if (o->batch_ints[2 * k + 1] != o->view.version)
            stale = 1;
        if (o->batch_ints[per * k] <= 0) {
            empty[k / 64] |= 1ULL << (k % 64);
            nempty++;
        }
    }
    if (stale) {
        run_layout(o, OS_RECHECK_LAYOUT, LJ_RELOAD);
        return;
    }
    skucache_set_empty(o->app->cache, o->in.sku, o->view.version, empty);
    if (!view_refresh(o)) {
        /* The cache entry went meanwhile: walk with what was just read. */
        memcpy(o->view.empty, empty, sizeof(empty));
        o->view.sold_out = nempty == nseg;
        o->view.recheck_due = 0;
    }
    if (nempty == nseg) {
        /* Before saying sold out again: a restock (or PUT) cut off half-way would never reach
         * the segments if nobody met it. Complete it here, then walk the segments afresh. */
        run_layout(o, OS_RECHECK_LAYOUT, LJ_CHECK_PENDING);
        return;
    }
    walk_start(o);
}

static void on_recheck_layout(struct order *o, const struct oev *e)
{
    (void)e;
    if (o->off_rc == -2)
        place_done(o, OUT_UNKNOWN_SKU);
    else if (o->off_rc < 0)
        place_done(o, OUT_UNAVAILABLE);
    else if (o->off_rc == 1)
        place_done(o, OUT_SOLD_OUT);
    else
        walk_start(o);
}

/* Queued on segment o->k's gate: handed the gate (o->woken), the deadline passed, or the loop
 * is ending. */
static void on_gate(struct order *o, const struct oev *e)
{
    if (e->ev == EV_CANCEL) {
        if (!o->woken)
            seggate_unqueue(o->gates, o->in.sku, o->k, &o->gw);
        o->woken = 0;
        if (o->lock)
            drop_lock(o);
        gate_leave(o);
        place_done(o, OUT_UNAVAILABLE);
        return;
    }
    gate_on_timer(o);
}

/* The lock acquire of a segment (segmented strategy): with enough stock at the order's version,
 * the critical section. */
static void on_acquire(struct order *o, const struct oev *e)
{
    lc_status st = e->st;
    const redisReply *v = e->r;
    if (st == LC_EBUSY || st == LC_ETIMEOUT) {
        /* A try (not a wait) that found the lock taken: held by another instance, most likely
         * for about a hold more. The loop's next orders walk past it until then. */
        if (st == LC_EBUSY && !o->waiting && o->app->cfg.busy_hint_max_ms > 0)
            seggate_hint_busy(o->gates, o->in.sku, o->k, clock_mono_ms(), busy_hint_ms(o),
                              o->app->cfg.busy_hint_max_ms);
        drop_lock(o);
        segment_done(o, SEG_BUSY);
        return;
    }
    if (st != LC_OK || !v || v->type != REDIS_REPLY_ARRAY || v->elements < 2) {
        metrics_redis_error();
        drop_lock(o);
        segment_done(o, SEG_ERROR);
        return;
    }
    metrics_lock_acquire_seconds((double)(clock_mono_ms() - o->t0) / 1000.0);
    seggate_hint_clear(o->gates, o->in.sku, o->k);
    struct seg_verdict sv;
    order_walk_acquire_verdict(store_reply_int(v->element[0], 0), store_reply_int(v->element[1], 0),
                               o->view.version, o->in.quantity, &sv);
    if (!sv.differs)
        note_seen(o, o->k, store_reply_int(v->element[0], 0));
    if (sv.differs || sv.r != SEG_DONE) {
        order_spend(o, 1); /* the release */
        drop_lock(o);
        segment_done(o, take_verdict(o, o->k, &sv));
        return;
    }
    critical_section(o);
}

/* The end of --hold-ms (or no hold): the commit; single-lock: its walk under the SKU's lock. */
static void on_hold(struct order *o, const struct oev *e)
{
    if (e->ev == EV_CANCEL) {
        segment_done(o, SEG_ERROR);
        return;
    }
    if (o->app->cfg.strategy == STRATEGY_SINGLE_LOCK) {
        o->start = (int)(order_rnd64() % (uint64_t)o->view.segments);
        o->i = 0;
        o->sres = SEG_EMPTY;
        single_next(o);
        return;
    }
    commit_segment(o);
}

/* What a commit's answer came to (fenced: under a lock, whose loss it may report). */
static enum seg_result commit_outcome(struct order *o, const struct oev *e, int fenced)
{
    if (e->st == LC_OK)
        return commit_result(o, o->k, e->r);
    enum seg_result res = order_walk_commit_failed(e->st, fenced);
    if (res == SEG_LOST)
        metrics_lock_lost();
    else
        metrics_redis_error();
    return res;
}

/* A segment's commit under its lock (fenced eval, or detached when the hold was handed on). */
static void on_commit(struct order *o, const struct oev *e)
{
    enum seg_result res = commit_outcome(o, e, 1);
    o->sres = SEG_EMPTY;
    if (o->lock)
        drop_lock(o);
    segment_done(o, res);
}

/* The atomic strategy's commit script. */
static void on_atomic_commit(struct order *o, const struct oev *e)
{
    enum seg_result res = commit_outcome(o, e, 0);
    o->sres = SEG_EMPTY;
    segment_done(o, res);
}

/* Single-lock: the SKU's lock, then the critical section. */
static void on_single_acquire(struct order *o, const struct oev *e)
{
    if (e->st != LC_OK) {
        drop_lock(o);
        if (e->st == LC_ETIMEOUT || e->st == LC_EBUSY) {
            place_done(o, OUT_LOCK_TIMEOUT);
        } else {
            metrics_redis_error();
            place_done(o, OUT_UNAVAILABLE);
        }
        return;
    }
    metrics_lock_acquire_seconds((double)(clock_mono_ms() - o->t0) / 1000.0);
    critical_section(o);
}

/* Single-lock: one segment's commit under the SKU's lock; empty or short: the next one. */
static void on_single_commit(struct order *o, const struct oev *e)
{
    enum seg_result res = commit_outcome(o, e, 1);
    o->sres = res;
    if (res == SEG_SHORT)
        o->any_short = 1;
    if (res != SEG_EMPTY && res != SEG_SHORT)
        o->i = o->view.segments; /* decisive: end the loop */
    else
        metrics_failover();
    if (o->cancelled && o->i < o->view.segments) {
        o->i = o->view.segments;
        o->sres = SEG_ERROR;
    }
    single_next(o);
}

/* A PUT rolling out was settled here (once per request). */
static void on_rollout(struct order *o, const struct oev *e)
{
    (void)e;
    if (o->off_rc < 0) {
        set_state_timed(o, OS_ROLLOUT_PAUSE, 2);
        return;
    }
    if (o->off_rc == 0) {
        /* deleted meanwhile: the reload answers unknown SKU */
        skucache_forget(o->app->cache, o->in.sku);
        o->need_layout = 1;
    }
    round_begin(o);
}

/* ... or given 2 ms. */
static void on_rollout_pause(struct order *o, const struct oev *e)
{
    if (e->ev == EV_CANCEL)
        place_done(o, OUT_UNAVAILABLE);
    else
        round_begin(o);
}

/* ---- the table of states and the dispatcher ---- */

#define TO(s) (UINT64_C(1) << (s))
/* Where the end of an order goes (place_done): the WAIT after a commit, the units given back,
 * the claim's settling, the answer. */
#define TO_END                                                                                     \
    (TO(OS_MULTI) | TO(OS_REPLICA_WAIT) | TO(OS_LIMIT_RELEASE) | TO(OS_CLAIM_SETTLE) | TO(OS_DONE))
/* Where a round can go (round_begin, walk_start, walk_next, round_end, segment_done): the
 * layout, the limit, the re-check, a segment's lock or gate, the critical section, a roll-out,
 * the end. */
#define TO_ROUND                                                                                   \
    (TO(OS_LAYOUT) | TO(OS_LIMIT) | TO(OS_CLAIM) | TO(OS_RECHECK) | TO(OS_ACQUIRE) | TO(OS_GATE) | \
     TO(OS_HOLD) | TO(OS_SINGLE_ACQUIRE) | TO(OS_ROLLOUT) | TO(OS_ROLLOUT_PAUSE) | TO(OS_CART) |   \
     TO_END)

static void on_claim(struct order *o, const struct oev *e)
{
    claim_step(o, e);
}

static void on_limit(struct order *o, const struct oev *e)
{
    limit_step(o, e);
}

/* Each state: its handler, whether it waits on the order's timer (timed: set_state deletes
 * it when the state is left, and EV_CANCEL ends the wait at once), is inside the critical
 * section, or is held by a sub-machine (machine: every event goes to it, EV_CANCEL too, and
 * its own table says whether it is timed), and the states it may go to, with the functions
 * that take it there. */
static const struct state_row {
    const char *name;
    void (*on)(struct order *o, const struct oev *e);
    unsigned timed : 1, critical : 1, machine : 1;
    uint64_t next;
} states[OS_COUNT] = {
    /* order_create_async: run_layout (key, layout unknown), claim_start, round_begin */
    [OS_NEW] = {"new", NULL, 0, 0, 0, TO(OS_CLAIM_LAYOUT) | TO(OS_CLAIM) | TO_ROUND},
    /* on_claim_layout: claim_start, or the answer */
    [OS_CLAIM_LAYOUT] = {"claim_layout", on_claim_layout, 0, 0, 0,
                         TO(OS_CLAIM) | TO(OS_DONE) | TO_ROUND},
    /* order_claimed: round_begin (owned), or place_done (a replay, a failure) */
    [OS_CLAIM] = {"claim", on_claim, 0, 0, 1, TO_ROUND},
    /* order_limited: rules_passed (layout_known: the walk), or place_done */
    [OS_LIMIT] = {"limit", on_limit, 0, 0, 1, TO_ROUND},
    /* on_layout: layout_known (the re-check or the walk) */
    [OS_LAYOUT] = {"layout", on_layout, 0, 0, 0, TO_ROUND},
    /* on_recheck: run_layout (changed, or sold out: anything pending?), walk_start */
    [OS_RECHECK] = {"recheck", on_recheck, 0, 0, 0, TO(OS_RECHECK_LAYOUT) | TO_ROUND},
    /* on_recheck_layout: walk_start */
    [OS_RECHECK_LAYOUT] = {"recheck_layout", on_recheck_layout, 0, 0, 0, TO_ROUND},
    /* on_gate: critical_section (handed the hold), try_segment_locked */
    [OS_GATE] = {"gate", on_gate, 1, 0, 0, TO_ROUND},
    /* on_acquire: critical_section, segment_done */
    [OS_ACQUIRE] = {"acquire", on_acquire, 0, 0, 0, TO_ROUND},
    /* on_hold: commit_segment, single_next; segment_done (cancelled) */
    [OS_HOLD] = {"hold", on_hold, 1, 1, 0,
                 TO(OS_COMMIT) | TO(OS_ATOMIC_COMMIT) | TO(OS_SINGLE_COMMIT) | TO_ROUND},
    /* on_commit: segment_done */
    [OS_COMMIT] = {"commit", on_commit, 0, 0, 0, TO_ROUND},
    /* on_atomic_commit: segment_done */
    [OS_ATOMIC_COMMIT] = {"atomic_commit", on_atomic_commit, 0, 1, 0, TO_ROUND},
    /* on_single_acquire: critical_section, or the answer */
    [OS_SINGLE_ACQUIRE] = {"single_acquire", on_single_acquire, 0, 0, 0, TO(OS_HOLD) | TO_END},
    /* on_single_commit: single_next (the next segment, or the end under the lock) */
    [OS_SINGLE_COMMIT] = {"single_commit", on_single_commit, 0, 1, 0,
                          TO(OS_SINGLE_COMMIT) | TO_ROUND},
    /* on_rollout: round_begin, or a pause */
    [OS_ROLLOUT] = {"rollout", on_rollout, 0, 0, 0, TO(OS_ROLLOUT_PAUSE) | TO_ROUND},
    /* on_rollout_pause: round_begin */
    [OS_ROLLOUT_PAUSE] = {"rollout_pause", on_rollout_pause, 1, 0, 0, TO_ROUND},
    /* on_replica_wait: place_done (the units back, the claim, the answer) */
    [OS_REPLICA_WAIT] = {"replica_wait", on_replica_wait, 0, 0, 0, TO_END},
    /* on_multi: the critical section (MULTI_HOLD), multi_commit, a round again, the answer */
    [OS_MULTI] = {"multi", on_multi, 0, 0, 0, TO(OS_MULTI_HOLD) | TO_ROUND},
    /* on_multi_hold: multi_commit */
    [OS_MULTI_HOLD] = {"multi_hold", on_multi_hold, 1, 1, 0, TO(OS_MULTI) | TO_END},
    /* order_limit_released: place_done again (the next reservation's release: a limit group's
     * after the SKU's, docs/design.md "Limit groups"; the claim, the answer) */
    [OS_LIMIT_RELEASE] = {"limit_release", on_limit, 0, 0, 1,
                          TO(OS_LIMIT_RELEASE) | TO(OS_CLAIM_SETTLE) | TO(OS_DONE)},
    /* order_claim_settled: answer, or the ticket's claim (the key's deleted: rules_begin) */
    [OS_CLAIM_SETTLE] = {"claim_settle", on_claim, 0, 0, 1, TO(OS_CLAIM) | TO(OS_DONE)},
    /* order_item_end: place_done (the units back, the claim settled, the answer);
     * order_item_replan: a round again (the layout re-read) */
    [OS_CART] = {"cart", NULL, 0, 0, 0, TO_ROUND},
    [OS_DONE] = {"done", NULL, 0, 0, 0, 0},
};
_Static_assert(OS_COUNT <= 64, "a state's next states are a 64-bit mask");

/* What must hold in the state just entered (debug builds). */
static void assert_order_state(const struct order *o)
{
#ifndef NDEBUG
    int atomic = o->app->cfg.strategy == STRATEGY_ATOMIC;
    switch (o->state) {
    case OS_ACQUIRE:
    case OS_SINGLE_ACQUIRE:
        assert(o->lock == NULL); /* the previous segment's lock was let go */
        break;
    case OS_HOLD:
    case OS_SINGLE_COMMIT: assert(atomic || o->lock != NULL); break;
    case OS_GATE: assert(o->gw.owner == o); break;
    default: break;
    }
#else
    (void)o;
#endif
}

/* The one way an order changes state: the move must be in the table (an assertion in debug
 * builds, an error line in release builds); a timed state's timer goes with it; entering or
 * leaving the critical section moves its gauge. */
static void set_state(struct order *o, enum ostate next)
{
    const struct state_row *from = &states[o->state], *to = &states[next];
    if (!(from->next & TO(next))) {
        log_msg(CONFIG_LOG_ERROR, "order_bad_transition",
                "sku %s: state %s to %s is not in the table of order_fsm.c", o->in.sku, from->name,
                to->name);
        assert(!"an order's state change that is not in the table");
    }
    order_timer_stop(o);
    if (from->critical != to->critical) {
        if (to->critical)
            metrics_cs_enter();
        else
            metrics_cs_leave();
    }
    o->state = next;
    assert_order_state(o);
}

/* Decides the next step from (state, event): the state's handler. EV_CANCEL (the loop is
 * ending) ends a timed state's wait now; any other state waits for its answer, which comes
 * (LC_ESTATE once the client is freed), and o->cancelled ends the order then. */
static void step_in(struct order *o, const struct oev *e)
{
    const struct state_row *s = &states[o->state];
    if (e->ev == EV_CANCEL) {
        o->cancelled = 1;
        if (!s->timed && !s->machine)
            return;
    }
    if (s->on)
        s->on(o, e);
}

/* Every event of an order is handled with the request's id on its log lines. */
static void step(struct order *o, enum oevent ev, lc_status st, const redisReply *r)
{
    struct oev e = {ev, st, r};
    areq_log_begin(o->ar);
    step_in(o, &e);
    areq_log_end();
}

/* ---- the handler ---- */

/* The loop is ending (areq.h: cancel). */
static void order_on_loop_end(struct areq *ar)
{
    step(ar->handler, EV_CANCEL, LC_ESTATE, NULL);
}

/* Who sends the order (identity.h): o->user and o->has_user. 0, or -1 when the request is
 * refused: 401 unauthorized (with WWW-Authenticate: Bearer) already in the areq's response. */
static int order_identity(struct order *o)
{
    char why[160];
    switch (identity_of(o->app->identity, &o->ar->req, &o->in, o->user, sizeof(o->user), why,
                        sizeof(why))) {
    case IDENTITY_USER: o->has_user = 1; return 0;
    case IDENTITY_NONE: return 0;
    case IDENTITY_UNAUTHORIZED: break;
    }
    response_error(&o->ar->res, ERROR_UNAUTHORIZED, why);
    return -1;
}

void order_create_async(struct areq *ar)
{
    struct app *app = ar->app;
    const struct request *req = &ar->req;
    struct order *o = calloc(1, sizeof(*o));
    if (!o) {
        response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        areq_done(ar);
        return;
    }
    o->ar = ar;
    o->app = app;
    o->io = &io_hooks;
    o->lc = ar->lc;
    o->strat = &strategies[app->cfg.strategy];
    o->gates = areq_gates(ar);
    o->gate_k = -1;
    o->loop = areq_loop(ar, &o->nloops);
    snprintf(o->claim_expiry, sizeof(o->claim_expiry), "0");
    struct validate_error verr;
    if (validate_order_body(req->body, req->body ? req->body_len : 0, app->cfg.max_quantity, &o->in,
                            &verr) != 0) {
        metrics_order(METRICS_ORDER_INVALID);
        response_error(&ar->res, verr.code, verr.message);
        order_free(o);
        areq_done(ar);
        return;
    }
    if (o->in.is_cart) { /* SPEC §17: several SKUs, all or nothing (order_cart.c) */
        order_free(o);
        order_cart_async(ar);
        return;
    }
    /* --user-rps holds a waiting room's buyer on the order too: an order with a ticket is one
     * of a SKU with a room (one without is refused 403 from the cached rules, costing nothing). */
    if (order_identity(o) != 0 ||
        (o->in.has_ticket && o->has_user && user_rate_check(app, o->user, &ar->res) != 0)) {
        order_free(o);
        areq_done(ar);
        return;
    }
    o->idem = req->idempotency_key ? req->idempotency_key : "";
    o->key = o->idem;
    if (req->idempotency_key && !validate_printable(o->idem, strlen(o->idem))) {
        metrics_order(METRICS_ORDER_INVALID);
        response_error(&ar->res, ERROR_INVALID_REQUEST,
                       "Idempotency-Key: must be 1..128 printable ASCII characters");
        order_free(o);
        areq_done(ar);
        return;
    }
    if (ids_order_token(o->token, sizeof(o->token)) != 0) {
        /* No randomness: no order id at all rather than a guessable one. */
        response_error(&ar->res, ERROR_UNAVAILABLE, "no randomness for an order id, retry later");
        order_free(o);
        areq_done(ar);
        return;
    }
    o->deadline_ms = clock_mono_ms() + app->cfg.lock_wait_ms;
    o->own_salt = own_salt(o->in.sku);
    /* The sold-out fast path needs no Redis at all. */
    skucache_get(app->cache, o->in.sku, &o->view);
    ticket_note(o);
    /* (a ticket's order may be replayed: its claim is looked at first, as a key's) */
    if (o->view.sold_out && !o->view.recheck_due && !*o->idem && !o->in.has_ticket) {
        order_outcome_respond(&ar->res, OUT_SOLD_OUT_FAST, 0);
        order_free(o);
        areq_done(ar);
        return;
    }
    o->timer = evtimer_new(ar->base, on_timer, o);
    if (!o->timer) {
        response_error(&ar->res, ERROR_INTERNAL, "out of memory");
        order_free(o);
        areq_done(ar);
        return;
    }
    ar->cancel = order_on_loop_end;
    ar->handler = o;
    if (*o->idem || o->in.has_ticket) {
        if (!o->view.version) {
            run_layout(o, OS_CLAIM_LAYOUT, LJ_LOAD);
            return;
        }
        claim_or_round(o);
        return;
    }
    o->first = 1;
    o->need_layout = 1;
    round_begin(o);
}

/* ---- a cart's items (order_io.h; docs/design.md "Carts (SPEC §17)") ---- */

struct order *order_item_new(struct areq *shadow, const struct validate_cart_item *it,
                             const char *user_id, const char *token, const char *key,
                             const struct item_back *back, void *arg, int idx, int *refused)
{
    struct app *app = shadow->app;
    *refused = 0;
    struct order *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->ar = shadow;
    o->app = app;
    o->io = &io_hooks;
    o->lc = shadow->lc;
    o->strat = &strategies[app->cfg.strategy];
    o->gates = areq_gates(shadow);
    o->gate_k = -1;
    o->loop = areq_loop(shadow, &o->nloops);
    o->item = back;
    o->item_arg = arg;
    o->item_idx = idx;
    snprintf(o->claim_expiry, sizeof(o->claim_expiry), "0");
    snprintf(o->in.sku, sizeof(o->in.sku), "%s", it->sku);
    o->in.quantity = it->quantity;
    if (it->has_ticket) {
        memcpy(o->in.ticket, it->ticket, sizeof(o->in.ticket));
        o->in.has_ticket = true;
    }
    if (user_id) {
        snprintf(o->in.user_id, sizeof(o->in.user_id), "%s", user_id);
        o->in.has_user_id = true;
    }
    if (order_identity(o) != 0) {
        *refused = 1;
        order_free(o);
        return NULL;
    }
    o->idem = key ? key : "";
    o->key = o->idem;
    snprintf(o->token, sizeof(o->token), "%s", token);
    o->deadline_ms = clock_mono_ms() + app->cfg.lock_wait_ms;
    o->own_salt = own_salt(o->in.sku);
    o->timer = evtimer_new(shadow->base, on_timer, o);
    if (!o->timer) {
        order_free(o);
        return NULL;
    }
    return o;
}

void order_item_start(struct order *o)
{
    areq_log_begin(o->ar);
    skucache_get(o->app->cache, o->in.sku, &o->view);
    ticket_note(o);
    if (*o->idem || o->in.has_ticket) {
        if (!o->view.version)
            run_layout(o, OS_CLAIM_LAYOUT, LJ_LOAD);
        else
            claim_or_round(o);
    } else {
        o->first = 1;
        o->need_layout = 1;
        round_begin(o);
    }
    areq_log_end();
}

void order_item_end(struct order *o, enum order_outcome out, const char *order_id,
                    const char *record)
{
    areq_log_begin(o->ar);
    if (out == OUT_CREATED || out == OUT_OUTCOME_UNKNOWN) {
        o->acked = 1; /* the cart made the WAITs of every part */
        if (order_id)
            snprintf(o->order_id, sizeof(o->order_id), "%s", order_id);
        if (record) {
            free(o->record);
            o->record = strdup(record);
        }
    }
    place_done(o, out);
    areq_log_end();
}

/* The cart's group reservations on its home item (order_item_groups): the next one not asked
 * yet, or the item handed back to the cart (OS_CART, ready again). */
static void item_groups_next(struct order *o)
{
    for (int i = 0; i < o->ngv; i++)
        if (o->gv[i]->state == LM_IDLE) {
            set_state(o, OS_LIMIT);
            group_reserve(o, i, &item_group_hand_back);
            return;
        }
    set_state(o, OS_CART);
    o->item->ready(o->item_arg, o);
}

/* One of the cart's group reservations is decided: the next, or the item's answer (the cart's
 * refusal: its reservations made so far released by place_done, the answer naming the group). */
static void item_group_limited(struct order *o, enum order_outcome out)
{
    if (out != OUT_CREATED) {
        if (out == OUT_LIMIT)
            o->glimited = o->lm;
        place_done(o, out);
        return;
    }
    item_groups_next(o);
}

void order_item_groups(struct order *o)
{
    areq_log_begin(o->ar);
    item_groups_next(o);
    areq_log_end();
}

void order_item_replan(struct order *o)
{
    areq_log_begin(o->ar);
    skucache_forget(o->app->cache, o->in.sku);
    o->need_layout = 1;
    o->item_read = 0;
    round_begin(o);
    areq_log_end();
}

void order_item_cancel(struct order *o)
{
    step(o, EV_CANCEL, LC_ESTATE, NULL);
}

void order_item_free(struct order *o)
{
    order_free(o);
}

void order_multi_req(const struct order *o, struct multi_req *rq)
{
    memset(rq, 0, sizeof(*rq));
    rq->app = o->app;
    rq->lc = o->lc;
    rq->ar = o->ar;
    lock_env(o, &rq->env);
    lock_opts(o, &rq->lo);
    rq->sku = o->in.sku;
    rq->version = o->view.version;
    rq->nseg = o->view.segments;
    rq->seen = o->seen;
    rq->qty = o->in.quantity;
    rq->token = o->token;
    rq->user = o->has_user ? o->user : o->in.has_user_id ? o->in.user_id : "";
    rq->idem = o->idem;
    rq->claim_expiry = o->claim_expiry;
    rq->rules = o->view.rules;
    rq->deadline_ms = o->deadline_ms;
}
