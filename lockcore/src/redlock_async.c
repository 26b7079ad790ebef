/*
 * Redlock on an event loop (lockcore_async.h): one lock over N independent masters, each an
 * lc_async_client. This is lockcore's one implementation of Redlock; the blocking face
 * (redlock.c) runs it on a loop thread of its own.
 *
 * Every step is a *round*: the same lockcore script (hold.c builds the arguments, as for
 * lc_lock) sent to every node at once, each answer or a per-node deadline (node_timeout_ms)
 * recorded in node[i], and the round's end decides the next step:
 *
 *   acquire:  ACQUIRE round (the acquire script, each granting node INCRs its NAME:fence)
 *             -> majority granted: token T = max of their fences; nodes behind T get a RAISE
 *                round (LC_LUA_FENCE_RAISE) until a majority carries T (usually none is needed)
 *             -> validity = lease - elapsed - drift > 0: held, renewal armed
 *             -> otherwise an UNLOCK round (the release script) on every node that granted or
 *                did not answer, then a jittered pause and the next attempt, until the deadline.
 *   renewal:  RENEW round (the renew script) every lease/3; a majority renewed: validity starts
 *             again; a majority gone: lost; no answer: retried until the validity ends.
 *   extend:   a RENEW round with the new lease, answered to the caller.
 *   release:  UNLOCK round on every node.
 *
 * Ownership: one round at a time per handle (an operation's round replaces a renewal's). Each
 * request is an rslot, freed by its reply callback (lc_async_script calls it exactly once); a
 * round that ends without a node's answer (deadline, abort, free) detaches that slot (rl NULL)
 * so the late reply is dropped. A late acquire that took a node is harmless: the UNLOCK round
 * that follows a failed attempt, or the release of a held lock, goes to that node on the same
 * connection after it, and renewal and release address every node anyway.
 *
 * Why the raise: the maximum over one majority need not exceed every earlier token (an earlier
 * holder's maximum may sit on a node outside the next majority), so the token is written back
 * to a majority before it is handed out; any later majority then meets a node at T or above.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <event2/event.h>

#include "anylock_internal.h"
#include "async_internal.h"
#include "base_internal.h"
#include "hold_internal.h"

typedef enum rl_round { R_NONE, R_ACQUIRE, R_RAISE, R_UNLOCK, R_RENEW } rl_round;
typedef enum rl_op { RL_OP_NONE, RL_OP_ACQUIRE, RL_OP_RELEASE, RL_OP_EXTEND, RL_OP_EVAL } rl_op;

/* One request to one node, freed by its reply callback. */
typedef struct rslot {
    lc_async_redlock *rl; /* NULL once the round ended without this answer */
    int node;
} rslot;

/* One node in the current round. */
typedef struct rl_node {
    rslot *slot;  /* request in flight, or NULL */
    int sent;     /* a request of this round went to the node */
    lc_status st; /* its answer: LC_OK, LC_EBUSY, LC_ELOST (renew: not the owner), LC_EIO... */
    int64_t val;  /* acquire: the node's fence (OK) or the holder's pttl (busy); else the reply */
    int granted;  /* this attempt holds the lock on the node */
    int at_token; /* ... and the node's counter is at the quorum's token */
    int gone;     /* its client answered LC_ESTATE (being freed): never used again */
} rl_node;

struct lc_async_redlock {
    int n, quorum;
    lc_async_client **nodes;
    struct event_base *base;
    lc_hold h; /* name, owner token, lease; count 0 or 1; fence = the quorum's token */
    lc_redlock_opts o;
    lc_async_redlock_lost_fn on_lost;
    void *on_lost_arg;
    rl_node *node;
    rl_round round;
    int pending;
    int64_t round_ms; /* when the round was sent */
    int round_lease;  /* RENEW: the lease it sets */
    struct event *round_timer;
    /* the operation in flight */
    rl_op op;
    lc_async_redlock_fn cb;
    lc_async_redlock_eval_fn eval_cb; /* RL_OP_EVAL */
    void *arg;
    lc_fenced *eval_slot; /* RL_OP_EVAL: the store's answer in flight */
    int eval_release;
    int wait_ms;
    int64_t deadline_ms;
    int64_t attempt_ms; /* when the current attempt began */
    uint64_t token;     /* the current attempt's token */
    unsigned acquired;  /* acquisitions so far: owner's suffix */
    char owner[48];     /* "<owner token>-<acquisition>": sent beside the fencing token */
    lc_status last;     /* why the last attempt failed */
    char why[LC_ERRSTR_MAX];
    struct event *retry_timer;
    /* renewal */
    struct event *renew_timer;
    _Atomic int64_t valid_until_ms; /* 0 when not held; read from any thread */
    int freeing;
};

enum { RENEW_RETRY_MS = 50 };

static void round_end(lc_async_redlock *rl);
static void attempt(lc_async_redlock *rl);
static void after_undo(lc_async_redlock *rl);

/* The drift allowance of a lease: clock rate differences plus 2 ms for the timer granularity. */
static int64_t drift_ms(const lc_async_redlock *rl, int lease_ms)
{
    return (int64_t)(lease_ms * rl->o.drift_factor) + 2;
}

void lc_redlock_opts_init(lc_redlock_opts *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof(*opts));
    opts->lease_ms = 30000;
    opts->watchdog = 1;
    opts->node_timeout_ms = 100;
    opts->retry_delay_ms = 100;
    opts->drift_factor = 0.01;
}

/* ---- rounds ---- */

static int count(const lc_async_redlock *rl, lc_status st)
{
    int k = 0;
    for (int i = 0; i < rl->n; i++)
        k += rl->node[i].sent && rl->node[i].st == st;
    return k;
}

/* What node i's answer means for the round in flight. */
static void node_answer(lc_async_redlock *rl, int i, lc_status st, const redisReply *r)
{
    rl_node *nd = &rl->node[i];
    if (rl->round == R_ACQUIRE) {
        lc_acquired a;
        nd->st = lc_hold_on_acquire(&rl->h, st, r, 0, &a);
        nd->granted = nd->st == LC_OK;
        nd->val = nd->st == LC_OK ? (int64_t)a.fence : a.pttl;
        return;
    }
    int ok_int = st == LC_OK && r && r->type == REDIS_REPLY_INTEGER;
    nd->val = ok_int ? r->integer : 0;
    if (rl->round == R_RAISE) {
        nd->st = ok_int ? (r->integer == 1 ? LC_OK : LC_ELOST) : (st == LC_OK ? LC_EREDIS : st);
        nd->at_token = nd->st == LC_OK;
        nd->granted = nd->st != LC_ELOST;
    } else if (rl->round == R_RENEW) {
        int res = lc_renew_result(st, r);
        nd->st = res == 1 ? LC_OK : res == 0 ? LC_ELOST : LC_EIO;
    } else {
        /* UNLOCK: the release script answers 0 (deleted), -1 (not ours) */
        nd->st = !ok_int ? (st == LC_OK ? LC_EREDIS : st) : r->integer < 0 ? LC_ELOST : LC_OK;
    }
}

static void on_node_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)errstr; /* a node's failure is summed up in the round's verdict (rl->why) */
    rslot *s = arg;
    lc_async_redlock *rl = s->rl;
    int i = s->node;
    free(s);
    if (!rl)
        return; /* late: its round is over */
    rl->node[i].slot = NULL;
    if (st == LC_ESTATE)
        rl->node[i].gone = 1; /* its client is being freed: its memory goes next */
    node_answer(rl, i, st, r);
    if (--rl->pending == 0) {
        event_del(rl->round_timer);
        round_end(rl);
    }
}

/* Drops every answer still outstanding (their replies will be ignored). */
static void round_detach(lc_async_redlock *rl)
{
    for (int i = 0; i < rl->n; i++)
        if (rl->node[i].slot) {
            rl->node[i].slot->rl = NULL;
            rl->node[i].slot = NULL;
        }
    rl->pending = 0;
    event_del(rl->round_timer);
}

static void on_round_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_async_redlock *rl = arg;
    round_detach(rl); /* the silent nodes keep st = LC_EIO */
    round_end(rl);
}

/* Builds node i's request of a round of kind into call. */
static lc_status round_call(lc_async_redlock *rl, rl_round kind, lc_call *call)
{
    switch (kind) {
    case R_ACQUIRE: return lc_call_acquire(call, &rl->h, 0, NULL, NULL);
    case R_RAISE: return lc_call_raise(call, &rl->h, rl->token);
    case R_RENEW: return lc_call_renew(call, &rl->h, rl->round_lease);
    default: return lc_call_release(call, &rl->h, 1);
    }
}

/* Sends a round of kind to the nodes with to[i] set (NULL: all). Its end (every answer, or the
 * node timeout) always comes from the loop, never from inside this call. */
static void round_start(lc_async_redlock *rl, rl_round kind, const int *to)
{
    rl->round = kind;
    rl->pending = 0;
    rl->round_ms = lc_now_ms();
    for (int i = 0; i < rl->n; i++) {
        rl_node *nd = &rl->node[i];
        nd->slot = NULL;
        nd->sent = !to || to[i];
        if (!nd->sent)
            continue;
        if (nd->gone) {
            nd->st = LC_ESTATE;
            continue;
        }
        nd->st = LC_EIO; /* until it answers */
        nd->val = 0;
        lc_call call;
        rslot *s = malloc(sizeof(*s));
        lc_status st = s ? round_call(rl, kind, &call) : LC_ENOMEM;
        if (st == LC_OK) {
            *s = (rslot){rl, i};
            st = lc_async_script(rl->nodes[i], call.script, call.nkeys,
                                 (const char *const *)call.keys, call.keylens, call.nargs,
                                 (const char *const *)call.args, call.arglens, on_node_reply, s);
            lc_call_done(&call);
        }
        if (st == LC_OK) {
            nd->slot = s;
            rl->pending++;
        } else {
            free(s);
            nd->st = st;
        }
    }
    lc_async_arm(rl->round_timer, rl->pending ? rl->o.node_timeout_ms : 0);
}

/* Sends the release script to every node (no answer awaited): the background release of a
 * handle freed while it held the lock or was taking it. */
static void release_everywhere(lc_async_redlock *rl)
{
    for (int i = 0; i < rl->n; i++) {
        lc_call call;
        if (rl->node[i].gone || lc_call_release(&call, &rl->h, 1) != LC_OK)
            continue;
        lc_async_script(rl->nodes[i], call.script, call.nkeys, (const char *const *)call.keys,
                        call.keylens, call.nargs, (const char *const *)call.args, call.arglens,
                        NULL, NULL);
        lc_call_done(&call);
    }
}

/* ---- operations ---- */

/* Ends the operation: its callback, last (it may free the handle). reply: RL_OP_EVAL's. */
static void op_finish_reply(lc_async_redlock *rl, lc_status st, uint64_t fence,
                            const redisReply *reply)
{
    lc_async_redlock_fn cb = rl->cb;
    lc_async_redlock_eval_fn eval_cb = rl->eval_cb;
    void *arg = rl->arg;
    rl_op op = rl->op;
    rl->op = RL_OP_NONE;
    rl->cb = NULL;
    rl->eval_cb = NULL;
    rl->arg = NULL;
    event_del(rl->retry_timer);
    lc_fenced_detach(rl->eval_slot); /* its late answer is dropped */
    rl->eval_slot = NULL;
    if (st != LC_OK)
        lc_fail(st, "%s", rl->why);
    if (op == RL_OP_EVAL) {
        if (eval_cb)
            eval_cb(rl, st, st == LC_OK ? reply : NULL, arg);
    } else if (cb) {
        cb(rl, st, fence, arg);
    }
}

static void op_finish(lc_async_redlock *rl, lc_status st, uint64_t fence)
{
    op_finish_reply(rl, st, fence, NULL);
}

static void fail_why(lc_async_redlock *rl, const char *what)
{
    int granted = 0, busy = 0, silent = 0;
    for (int i = 0; i < rl->n; i++) {
        granted += rl->node[i].granted;
        busy += rl->node[i].st == LC_EBUSY;
        silent += rl->node[i].st == LC_EIO;
    }
    snprintf(rl->why, sizeof(rl->why),
             "redlock %s: %s (%d of %d nodes granted, %d needed; %d busy, %d no answer)",
             rl->h.name, what, granted, rl->n, rl->quorum, busy, silent);
}

/* ---- renewal ---- */

static void renew_stop(lc_async_redlock *rl)
{
    event_del(rl->renew_timer);
    if (rl->round == R_RENEW && rl->op == RL_OP_NONE) {
        round_detach(rl);
        rl->round = R_NONE;
    }
}

static void renew_arm(lc_async_redlock *rl, int64_t ms)
{
    if (rl->o.watchdog)
        lc_async_arm(rl->renew_timer, ms);
}

/* The renewal's lease: the handle's, cut at the hold cap; 0 when the cap is reached. */
static int renew_lease(const lc_async_redlock *rl)
{
    int lease = rl->h.opts.lease_ms;
    if (rl->o.max_hold_ms > 0) {
        int64_t left = rl->h.held_since_ms + rl->o.max_hold_ms - lc_now_ms();
        if (left <= 0)
            return 0;
        if (left < lease)
            lease = (int)left;
    }
    return lease;
}

static void on_renew_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_async_redlock *rl = arg;
    if (rl->h.count == 0 || atomic_load(&rl->h.lost))
        return;
    if (rl->round != R_NONE) {
        renew_arm(rl, RENEW_RETRY_MS);
        return;
    }
    rl->round_lease = renew_lease(rl);
    if (rl->round_lease > 0)
        round_start(rl, R_RENEW, NULL);
}

/* A RENEW round ended (a renewal, or an extend when rl->op says so). */
static void after_renew(lc_async_redlock *rl)
{
    int ok = count(rl, LC_OK), gone = count(rl, LC_ELOST);
    int64_t now = lc_now_ms();
    int verdict;
    if (ok >= rl->quorum)
        verdict = LC_RENEW_OK;
    else if (gone > rl->n - rl->quorum || now >= atomic_load(&rl->valid_until_ms))
        verdict = LC_RENEW_LOST;
    else
        verdict = LC_RENEW_RETRY;
    if (verdict == LC_RENEW_OK) {
        atomic_store(&rl->valid_until_ms,
                     rl->round_ms + rl->round_lease - drift_ms(rl, rl->round_lease));
        if (rl->op == RL_OP_EXTEND)
            rl->h.opts.lease_ms = rl->round_lease;
        renew_arm(rl, lc_renew_period_ms(rl->h.opts.lease_ms));
        if (rl->op == RL_OP_EXTEND)
            op_finish(rl, LC_OK, 0);
        return;
    }
    if (verdict == LC_RENEW_RETRY) {
        renew_arm(rl, RENEW_RETRY_MS);
        if (rl->op == RL_OP_EXTEND) {
            fail_why(rl, "extension not confirmed by a majority (lease unchanged where unknown)");
            op_finish(rl, LC_EIO, 0);
        }
        return;
    }
    atomic_store(&rl->h.lost, 1);
    atomic_store(&rl->valid_until_ms, 0);
    event_del(rl->renew_timer);
    snprintf(rl->why, sizeof(rl->why), "redlock %s: lost (%d of %d nodes renewed, %d needed)",
             rl->h.name, ok, rl->n, rl->quorum);
    if (rl->op == RL_OP_EXTEND) {
        op_finish(rl, LC_ELOST, 0);
        return;
    }
    if (rl->on_lost)
        rl->on_lost(rl, rl->on_lost_arg);
}

/* ---- acquire ---- */

static void on_retry_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    attempt(arg);
}

static void attempt(lc_async_redlock *rl)
{
    for (int i = 0; i < rl->n; i++)
        rl->node[i].granted = rl->node[i].at_token = 0;
    rl->token = 0;
    rl->attempt_ms = lc_now_ms();
    round_start(rl, R_ACQUIRE, NULL);
}

/* The attempt failed: undo it on every node that granted it or did not answer. */
static void attempt_failed(lc_async_redlock *rl, const char *what)
{
    fail_why(rl, what);
    rl->last = count(rl, LC_EBUSY) > 0 ? LC_EBUSY : LC_EIO;
    int to[LC_REDLOCK_MAX_NODES], any = 0;
    for (int i = 0; i < rl->n; i++) {
        rl_node *nd = &rl->node[i];
        to[i] = nd->granted || nd->st == LC_EIO;
        any |= to[i];
    }
    if (any)
        round_start(rl, R_UNLOCK, to);
    else
        after_undo(rl);
}

/* The undo of a failed attempt is done: pause and try again, or give up. */
static void after_undo(lc_async_redlock *rl)
{
    int gone = 0;
    for (int i = 0; i < rl->n; i++)
        gone += rl->node[i].gone;
    if (gone > rl->n - rl->quorum) {
        snprintf(rl->why, sizeof(rl->why), "redlock %s: %d of %d node clients were freed",
                 rl->h.name, gone, rl->n);
        op_finish(rl, LC_ESTATE, 0);
        return;
    }
    int64_t left = rl->deadline_ms - lc_now_ms();
    if (rl->wait_ms > 0 && left > 0) {
        int64_t pause = lc_jitter_ms(rl->o.retry_delay_ms);
        lc_async_arm(rl->retry_timer, pause < left ? pause : left);
        return;
    }
    if (rl->wait_ms > 0) {
        char why[sizeof(rl->why)];
        snprintf(why, sizeof(why), "%s", rl->why);
        snprintf(rl->why, sizeof(rl->why), "not acquired within %d ms; last attempt: %.140s",
                 rl->wait_ms, why);
        op_finish(rl, LC_ETIMEOUT, 0);
        return;
    }
    op_finish(rl, rl->last, 0);
}

/* A majority carries the token: held if the validity is still positive. */
static void attempt_won(lc_async_redlock *rl)
{
    int lease = rl->h.opts.lease_ms;
    int64_t valid_until = rl->attempt_ms + lease - drift_ms(rl, lease);
    if (valid_until <= lc_now_ms()) {
        attempt_failed(rl, "the attempt took longer than the lease allows (validity <= 0)");
        return;
    }
    lc_acquired a = {.fence = rl->token, .count = 1, .fresh = 1};
    lc_hold_start(&rl->h, &a);
    snprintf(rl->owner, sizeof(rl->owner), "%s-%u", rl->h.token, ++rl->acquired);
    atomic_store(&rl->valid_until_ms, valid_until);
    renew_arm(rl, lc_renew_period_ms(lease));
    op_finish(rl, LC_OK, rl->token);
}

/* Counts the granting nodes whose counter is at the token; raises the others (once, may_raise)
 * if that is short of a majority. */
static void settle_token(lc_async_redlock *rl, int may_raise)
{
    int at = 0, to[LC_REDLOCK_MAX_NODES], any = 0;
    for (int i = 0; i < rl->n; i++) {
        rl_node *nd = &rl->node[i];
        at += nd->granted && nd->at_token;
        to[i] = nd->granted && !nd->at_token;
        any |= to[i];
    }
    if (at >= rl->quorum)
        attempt_won(rl);
    else if (may_raise && any)
        round_start(rl, R_RAISE, to);
    else
        attempt_failed(rl, "the fencing token did not reach a majority");
}

static void after_acquire(lc_async_redlock *rl)
{
    int granted = 0;
    uint64_t t = 0;
    for (int i = 0; i < rl->n; i++)
        if (rl->node[i].granted) {
            granted++;
            if ((uint64_t)rl->node[i].val > t)
                t = (uint64_t)rl->node[i].val;
        }
    if (granted < rl->quorum) {
        attempt_failed(rl, "no majority");
        return;
    }
    rl->token = t;
    for (int i = 0; i < rl->n; i++)
        rl->node[i].at_token = rl->node[i].granted && (uint64_t)rl->node[i].val == t;
    settle_token(rl, 1);
}

/* ---- release ---- */

static void after_release(lc_async_redlock *rl)
{
    int ok = count(rl, LC_OK), gone = count(rl, LC_ELOST);
    int was_lost = atomic_load(&rl->h.lost);
    lc_hold_drop(&rl->h);
    atomic_store(&rl->h.lost, 0);
    atomic_store(&rl->valid_until_ms, 0);
    lc_status st = LC_OK;
    if (was_lost || (ok < rl->quorum && gone > rl->n - rl->quorum)) {
        snprintf(rl->why, sizeof(rl->why),
                 "redlock %s: lost before release (%d of %d nodes still had it)", rl->h.name, ok,
                 rl->n);
        st = LC_ELOST;
    } else if (ok < rl->quorum) {
        snprintf(rl->why, sizeof(rl->why),
                 "redlock %s: release confirmed by %d of %d nodes (%d no longer had it)",
                 rl->h.name, ok, rl->n, gone);
        st = LC_EIO;
    }
    op_finish(rl, st, 0);
}

static void round_end(lc_async_redlock *rl)
{
    rl_round kind = rl->round;
    rl->round = R_NONE;
    switch (kind) {
    case R_ACQUIRE: after_acquire(rl); break;
    case R_RAISE: settle_token(rl, 0); break;
    case R_RENEW: after_renew(rl); break;
    case R_UNLOCK:
        if (rl->op == RL_OP_ACQUIRE)
            after_undo(rl);
        else if (rl->op == RL_OP_RELEASE)
            after_release(rl);
        break;
    case R_NONE: break;
    }
}

/* ---- a data-store script fenced by the token ---- */

/* Gives the hold up: renewal stopped, the release sent to every node, no answer awaited. */
static void release_in_background(lc_async_redlock *rl)
{
    event_del(rl->renew_timer);
    if (rl->round == R_RENEW) { /* a renewal in flight next to the eval: its answer is moot */
        round_detach(rl);
        rl->round = R_NONE;
    }
    release_everywhere(rl);
    lc_hold_drop(&rl->h);
    atomic_store(&rl->h.lost, 0);
    atomic_store(&rl->valid_until_ms, 0);
}

static void on_eval_reply(void *owner, const lc_fenced_result *res)
{
    lc_async_redlock *rl = owner;
    rl->eval_slot = NULL;
    lc_fenced_why(rl->why, sizeof(rl->why), "redlock", rl->h.name, -1, res, rl->h.fence);
    if (res->st == LC_ELOST) {
        if (res->seen >= rl->h.fence && !rl->freeing)
            lc_async_redlock_raise(rl->n, rl->nodes, rl->h.name, res->seen);
        atomic_store(&rl->h.lost, 1);
        atomic_store(&rl->valid_until_ms, 0);
        event_del(rl->renew_timer);
    }
    if (rl->eval_release)
        release_in_background(rl);
    op_finish_reply(rl, res->st, 0, res->body);
}

lc_status lc_async_redlock_eval(lc_async_redlock *rl, lc_async_client *store,
                                const lc_script *script, const char *seen_key, int flags, int nkeys,
                                const char *const *keys, const size_t *keylens, int nargs,
                                const char *const *args, const size_t *arglens,
                                lc_async_redlock_eval_fn cb, void *arg)
{
    if (!rl || !store || !script || !seen_key || nkeys < 0 || nargs < 0 || (nkeys && !keys) ||
        (nargs && !args) || (flags & ~LC_EVAL_RELEASE))
        return lc_fail(LC_EINVAL, "redlock eval: bad argument");
    if (rl->h.count == 0)
        return lc_fail(LC_ENOTHELD, "redlock %s: not held by this owner", rl->h.name);
    if (rl->op != RL_OP_NONE || rl->freeing)
        return lc_fail(LC_ESTATE, "redlock %s: another operation is in flight", rl->h.name);
    if (atomic_load(&rl->h.lost) || lc_async_redlock_validity_ms(rl) <= 0) {
        /* The validity (lease - elapsed - drift since the last confirmed acquire or renewal)
         * has run out: another owner may hold the lock now, so nothing is written under it.
         * The store's token check would refuse it only once a later holder had written. */
        int64_t left = lc_async_redlock_validity_ms(rl);
        snprintf(rl->why, sizeof(rl->why),
                 "redlock %s: lost (validity over by %" PRId64 " ms before the eval): not sent",
                 rl->h.name, left < 0 ? -left : 0);
        atomic_store(&rl->h.lost, 1);
        atomic_store(&rl->valid_until_ms, 0);
        renew_stop(rl);
        if (flags & LC_EVAL_RELEASE)
            release_in_background(rl);
        return lc_fail(LC_ELOST, "%s", rl->why);
    }
    lc_fenced *s;
    lc_status st = lc_fenced_send(store, script, seen_key, rl->h.fence, rl->owner, nkeys, keys,
                                  keylens, nargs, args, arglens, on_eval_reply, rl, &s);
    if (st != LC_OK)
        return st;
    rl->op = RL_OP_EVAL;
    rl->eval_cb = cb;
    rl->arg = arg;
    rl->why[0] = '\0';
    rl->eval_slot = s;
    rl->eval_release = flags & LC_EVAL_RELEASE;
    return LC_OK;
}

/* Raises NAME:fence to at least ARGV[1], comparing decimal strings (exact past 2^53). */
static const char RAISE_TO_SEEN[] =
    "local c = redis.call('GET', KEYS[1]) or '0'\n"
    "local t = ARGV[1]\n"
    "if #c < #t or (#c == #t and c < t) then redis.call('SET', KEYS[1], t) return 1 end\n"
    "return 0\n";

static void on_raised(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)st; /* a node that did not take it: the next refusal raises again */
    (void)r;
    (void)errstr;
    (void)arg;
}

lc_status lc_async_redlock_raise(int n, lc_async_client *const *nodes, const char *name,
                                 uint64_t seen)
{
    size_t len = name ? strlen(name) : 0;
    if (n < 1 || !nodes || len == 0 || len > LC_NAME_MAX || seen == 0 || seen > (uint64_t)INT64_MAX)
        return lc_fail(LC_EINVAL, "redlock raise: bad argument");
    char key[LC_NAME_MAX + 8], val[24];
    snprintf(key, sizeof(key), "%s:fence", name);
    snprintf(val, sizeof(val), "%" PRIu64, seen);
    const char *argv[] = {"EVAL", RAISE_TO_SEEN, "1", key, val};
    lc_status first = LC_OK;
    for (int i = 0; i < n; i++) {
        lc_status st =
            nodes[i] ? lc_async_command(nodes[i], 5, argv, NULL, on_raised, NULL) : LC_EINVAL;
        if (st != LC_OK && first == LC_OK)
            first = st;
    }
    return first;
}

const char *lc_async_redlock_owner(const lc_async_redlock *rl)
{
    return rl && rl->h.count > 0 ? rl->owner : "";
}

/* ---- public functions ---- */

lc_status lc_async_redlock_new(int n, lc_async_client *const *nodes, const char *name,
                               const lc_redlock_opts *opts, lc_async_redlock_lost_fn on_lost,
                               void *on_lost_arg, lc_async_redlock **out)
{
    if (out)
        *out = NULL;
    if (!nodes || !out || n < 1 || n > LC_REDLOCK_MAX_NODES)
        return lc_fail(LC_EINVAL, "redlock: NULL argument or node count not in 1..%d",
                       LC_REDLOCK_MAX_NODES);
    for (int i = 0; i < n; i++)
        if (!nodes[i])
            return lc_fail(LC_EINVAL, "redlock: node %d is NULL", i);
    lc_redlock_opts o;
    lc_redlock_opts_init(&o);
    if (opts)
        o = *opts;
    if (o.node_timeout_ms <= 0 || o.retry_delay_ms <= 0 || o.drift_factor < 0 ||
        o.drift_factor >= 1)
        return lc_fail(LC_EINVAL, "redlock: node_timeout_ms and retry_delay_ms must be > 0, "
                                  "drift_factor in [0, 1)");
    lc_lock_opts lo;
    lc_lock_opts_init(&lo);
    lo.lease_ms = o.lease_ms;
    lo.watchdog = o.watchdog;
    lo.max_hold_ms = o.max_hold_ms;
    lc_async_redlock *rl = calloc(1, sizeof(*rl));
    if (!rl)
        return lc_fail(LC_ENOMEM, "redlock: out of memory");
    lc_status st = lc_hold_init(&rl->h, name, &lo);
    if (st != LC_OK) {
        free(rl);
        return st;
    }
    rl->n = n;
    rl->quorum = n / 2 + 1;
    rl->o = o;
    rl->on_lost = on_lost;
    rl->on_lost_arg = on_lost_arg;
    rl->base = lc_async_client_base(nodes[0]);
    rl->nodes = malloc(sizeof(*rl->nodes) * (size_t)n);
    rl->node = calloc((size_t)n, sizeof(*rl->node));
    rl->round_timer = evtimer_new(rl->base, on_round_timer, rl);
    rl->retry_timer = evtimer_new(rl->base, on_retry_timer, rl);
    rl->renew_timer = evtimer_new(rl->base, on_renew_timer, rl);
    atomic_init(&rl->valid_until_ms, 0);
    if (!rl->nodes || !rl->node || !rl->round_timer || !rl->retry_timer || !rl->renew_timer) {
        lc_async_redlock_free(rl);
        return lc_fail(LC_ENOMEM, "redlock: out of memory");
    }
    memcpy(rl->nodes, nodes, sizeof(*rl->nodes) * (size_t)n);
    *out = rl;
    return LC_OK;
}

void lc_async_redlock_free(lc_async_redlock *rl)
{
    if (!rl || rl->freeing)
        return;
    rl->freeing = 1;
    int taking = rl->op == RL_OP_ACQUIRE;
    if (rl->op != RL_OP_NONE) {
        snprintf(rl->why, sizeof(rl->why), "redlock %s: handle freed", rl->h.name);
        op_finish(rl, LC_ESTATE, 0);
    }
    if (rl->node)
        round_detach(rl);
    if (rl->nodes && (taking || rl->h.count > 0))
        release_everywhere(rl);
    if (rl->round_timer)
        event_free(rl->round_timer);
    if (rl->retry_timer)
        event_free(rl->retry_timer);
    if (rl->renew_timer)
        event_free(rl->renew_timer);
    lc_hold_clear(&rl->h);
    free(rl->nodes);
    free(rl->node);
    free(rl);
}

/* The checks common to every operation start: LC_OK with the operation registered. */
static lc_status op_begin(lc_async_redlock *rl, rl_op op, lc_async_redlock_fn cb, void *arg)
{
    if (!rl)
        return lc_fail(LC_EINVAL, "redlock: NULL handle");
    if (rl->op != RL_OP_NONE || rl->freeing)
        return lc_fail(LC_ESTATE, "redlock %s: another operation is in flight", rl->h.name);
    rl->op = op;
    rl->cb = cb;
    rl->arg = arg;
    rl->why[0] = '\0';
    return LC_OK;
}

lc_status lc_async_redlock_acquire(lc_async_redlock *rl, int wait_ms, lc_async_redlock_fn cb,
                                   void *arg)
{
    if (rl && rl->h.count > 0)
        return lc_fail(LC_ESTATE, "redlock %s: already held by this handle (not reentrant)",
                       rl->h.name);
    if (wait_ms < 0)
        return lc_fail(LC_EINVAL, "redlock: wait_ms must be >= 0");
    lc_status st = op_begin(rl, RL_OP_ACQUIRE, cb, arg);
    if (st != LC_OK)
        return st;
    rl->wait_ms = wait_ms;
    rl->deadline_ms = lc_now_ms() + wait_ms;
    attempt(rl);
    return LC_OK;
}

lc_status lc_async_redlock_release(lc_async_redlock *rl, lc_async_redlock_fn cb, void *arg)
{
    if (rl && rl->h.count == 0)
        return lc_fail(LC_ENOTHELD, "redlock %s: not held by this owner", rl->h.name);
    if (rl && rl->op == RL_OP_NONE)
        renew_stop(rl); /* renewal stops before the release is sent */
    lc_status st = op_begin(rl, RL_OP_RELEASE, cb, arg);
    if (st != LC_OK)
        return st;
    round_start(rl, R_UNLOCK, NULL);
    return LC_OK;
}

lc_status lc_async_redlock_extend(lc_async_redlock *rl, int lease_ms, lc_async_redlock_fn cb,
                                  void *arg)
{
    if (lease_ms <= 0)
        return lc_fail(LC_EINVAL, "redlock: lease_ms must be > 0");
    if (rl && (rl->h.count == 0 || atomic_load(&rl->h.lost)))
        return lc_fail(rl->h.count ? LC_ELOST : LC_ENOTHELD, "redlock %s: not held (%s)",
                       rl->h.name, rl->h.count ? "lost" : "not acquired");
    if (rl && rl->op == RL_OP_NONE)
        renew_stop(rl);
    lc_status st = op_begin(rl, RL_OP_EXTEND, cb, arg);
    if (st != LC_OK)
        return st;
    rl->round_lease = lease_ms;
    round_start(rl, R_RENEW, NULL);
    return LC_OK;
}

int lc_async_redlock_held(const lc_async_redlock *rl)
{
    return rl ? rl->h.count : 0;
}

int lc_async_redlock_lost(const lc_async_redlock *rl)
{
    return rl ? atomic_load(&((lc_async_redlock *)rl)->h.lost) : 0;
}

uint64_t lc_async_redlock_fence(const lc_async_redlock *rl)
{
    return rl ? rl->h.fence : 0;
}

int64_t lc_async_redlock_validity_ms(const lc_async_redlock *rl)
{
    if (!rl)
        return 0;
    int64_t until = atomic_load(&((lc_async_redlock *)rl)->valid_until_ms);
    return until ? until - lc_now_ms() : 0;
}

const char *lc_async_redlock_name(const lc_async_redlock *rl)
{
    return rl ? rl->h.name : "";
}

const char *lc_async_redlock_errmsg(const lc_async_redlock *rl)
{
    return rl ? rl->why : "";
}

const char *lc_async_redlock_token(const lc_async_redlock *rl)
{
    return rl ? rl->h.token : "";
}

/* ---- the anylock backend (lockcore_anylock.h): lc_async_redlock over b->nodes ---- */

static lc_status rl_any_make(const lc_anylock_backend *b, const char *name,
                             const lc_lock_opts *opts, void **h)
{
    lc_redlock_opts ro;
    lc_redlock_opts_init(&ro);
    ro.lease_ms = opts->lease_ms;
    ro.watchdog = opts->watchdog;
    ro.max_hold_ms = opts->max_hold_ms;
    ro.node_timeout_ms = b->node_timeout_ms;
    return lc_async_redlock_new(b->n, b->nodes, name, &ro, NULL, NULL, (lc_async_redlock **)h);
}

static void rl_any_free(void *h)
{
    lc_async_redlock_free(h);
}

static void on_rl_any_acquired(lc_async_redlock *rl, lc_status st, uint64_t fence, void *arg)
{
    (void)fence;
    lc_anylock_acquired(arg, st, NULL, lc_async_redlock_errmsg(rl));
}

static lc_status rl_any_acquire(void *h, int wait_ms, int nread, const char *const *reads,
                                lc_anylock *al)
{
    (void)nread; /* token-fenced: lc_anylock reads the keys after the acquire */
    (void)reads;
    return lc_async_redlock_acquire(h, wait_ms, on_rl_any_acquired, al);
}

static void on_rl_any_released(lc_async_redlock *rl, lc_status st, uint64_t fence, void *arg)
{
    (void)fence;
    lc_anylock_evaluated(arg, st, NULL, lc_async_redlock_errmsg(rl));
}

static lc_status rl_any_release(void *h, lc_anylock *al)
{
    return lc_async_redlock_release(h, on_rl_any_released, al);
}

static void on_rl_any_eval(lc_async_redlock *rl, lc_status st, const redisReply *r, void *arg)
{
    lc_anylock_evaluated(arg, st, r, lc_async_redlock_errmsg(rl));
}

static lc_status rl_any_eval(void *h, lc_async_client *store, const char *seen_key,
                             const lc_script *script, int flags, int nkeys, const char *const *keys,
                             int nargs, const char *const *args, lc_anylock *al)
{
    return lc_async_redlock_eval(h, store, script, seen_key, flags, nkeys, keys, NULL, nargs, args,
                                 NULL, on_rl_any_eval, al);
}

static lc_status rl_any_detach_check(const lc_anylock_backend *b, const void *h)
{
    (void)b;
    return lc_async_redlock_held(h) ? LC_OK : LC_ENOTHELD;
}

static lc_status rl_any_raise(const lc_anylock_backend *b, const char *name, uint64_t seen)
{
    return lc_async_redlock_raise(b->n, b->nodes, name, seen);
}

static int rl_any_held(const void *h)
{
    return lc_async_redlock_held(h);
}

static int rl_any_lost(const void *h)
{
    return lc_async_redlock_lost(h);
}

static uint64_t rl_any_fence(const void *h)
{
    return lc_async_redlock_fence(h);
}

static const char *rl_any_owner(const void *h)
{
    return lc_async_redlock_owner(h);
}

static const char *rl_any_errmsg(const void *h)
{
    return lc_async_redlock_errmsg(h);
}

const lc_anylock_ops lc_anylock_redlock = {
    .kind = "redlock",
    .token_fenced = 1,
    .closed_with_nodes = 1,
    .make = rl_any_make,
    .free = rl_any_free,
    .acquire = rl_any_acquire,
    .release = rl_any_release,
    .eval = rl_any_eval,
    .detach_check = rl_any_detach_check,
    .raise = rl_any_raise,
    .held = rl_any_held,
    .lost = rl_any_lost,
    .fence = rl_any_fence,
    .owner = rl_any_owner,
    .errmsg = rl_any_errmsg,
};
