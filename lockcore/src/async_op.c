/*
 * Operations in flight of the asynchronous face (aop, async_internal.h): their life cycle (made,
 * sent, deferred, finished with the user's callback exactly once) and their state machines:
 * acquire (attempt, subscribe, sleep until an unlock, the fallback poll or the deadline), eval
 * (a body that failed releases on its own), release and plain command. lc_aop_on is the one
 * entry of every event: a reply, a subscription confirmed, an unlock, a timer, the deadline.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "async_internal.h"

static void on_op_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    aop *op = arg;
    lc_async_client *client = op->client;
    lc_async_enter(client);
    if (op->state == OPS_ATTEMPT) /* a send that failed, now reported with its own message */
        lc_aop_on(op, EV_REPLY, lc_fail(op->deferred_st, "%s", op->deferred_msg), NULL, 0);
    else
        lc_aop_on(op, EV_TIMER, LC_OK, NULL, 0);
    lc_async_leave(client);
}

void lc_aop_on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    aop *op = arg;
    lc_async_client *client = op->client;
    lc_async_enter(client);
    lc_aop_on(op, EV_DEADLINE, LC_OK, NULL, 0);
    lc_async_leave(client);
}

aop *lc_aop_new(lc_async_client *client, lc_async_lock *l, op_kind kind, void *arg)
{
    aop *op = calloc(1, sizeof(*op));
    if (!op)
        return NULL;
    op->client = client;
    op->lock = l;
    op->kind = kind;
    op->arg = arg;
    op->timer = evtimer_new(client->base, on_op_timer, op);
    if (!op->timer) {
        free(op);
        return NULL;
    }
    op->next = client->ops;
    if (client->ops)
        client->ops->prev = op;
    client->ops = op;
    if (l)
        l->op = op;
    return op;
}

/* The operation's command failed before it left: the failure reaches the operation from the
 * loop, never from inside the call that started it. */
void lc_aop_defer(aop *op, lc_status st)
{
    op->state = OPS_ATTEMPT;
    op->deferred_st = st;
    snprintf(op->deferred_msg, sizeof(op->deferred_msg), "%s", lc_errmsg());
    lc_async_arm(op->timer, 0);
}

/* Sends c for op, or defers the failure. Takes c. */
void lc_aop_send(aop *op, acmd *c)
{
    if (!c) {
        lc_aop_defer(op, lc_fail(LC_ENOMEM, "async: out of memory"));
        return;
    }
    op->state = OPS_ATTEMPT;
    if (lc_acmd_send(c) != 0) {
        lc_acmd_free(c);
        lc_aop_defer(op, lc_fail(LC_EIO, "redis: not connected"));
        return;
    }
    c->op = op;
    op->cmd = c;
}

/* Ends op: timers, channel, command; then its callback, exactly once, and the op is freed.
 * reply: borrowed by the callback (values of an acquire, the body's result of an eval). The
 * message of a failure is the one lc_fail recorded on the way here (in this call chain: the
 * thread's lc_errmsg() is lockcore's scratch, never read across loop turns); it travels with
 * the result: on the lock handle (lc_async_lock_errmsg) and as a reply callback's errstr. */
void lc_aop_finish(aop *op, lc_status st, const redisReply *reply)
{
    lc_async_client *client = op->client;
    lc_async_lock *l = op->lock;
    char msg[LC_ERRSTR_MAX];
    snprintf(msg, sizeof(msg), "%s", st == LC_OK ? "" : lc_errmsg());
    if (l)
        memcpy(l->errstr, msg, sizeof(msg));
    lc_achan_leave(op, op->woken && st != LC_OK);
    event_free(op->timer);
    if (op->deadline)
        event_free(op->deadline);
    if (op->cmd) {
        acmd *c = op->cmd;
        c->op = NULL;
        if (op->kind == OP_ACQUIRE && l && !client->freeing)
            c->undo = lc_alock_undo_cmd(l); /* if Redis runs it anyway, the hold is given back */
    }
    if (op->prev)
        op->prev->next = op->next;
    else
        client->ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    if (l && l->op == op)
        l->op = NULL;
    switch (op->kind) {
    case OP_ACQUIRE:
        if (op->cb.acquire)
            op->cb.acquire(l, st, st == LC_OK && l ? l->h.fence : 0, st == LC_OK ? reply : NULL,
                           op->arg);
        break;
    case OP_EVAL:
        if (op->cb.eval)
            op->cb.eval(l, st, st == LC_OK ? reply : NULL, op->arg);
        break;
    case OP_RELEASE:
        if (op->cb.done)
            op->cb.done(l, st, op->arg);
        break;
    case OP_COMMAND:
        if (op->cb.reply)
            op->cb.reply(st, st == LC_OK ? reply : NULL, msg, op->arg);
        break;
    }
    for (int i = 0; i < op->nread; i++)
        free(op->read_keys[i]);
    free(op->read_keys);
    free(op->read_lens);
    free(op);
}

/* Sends the next acquire attempt of op. */
void lc_aop_attempt(aop *op)
{
    lc_async_lock *l = op->lock;
    if (op->client->freeing)
        return;
    if (op->state == OPS_SLEEPING || op->state == OPS_SUBSCRIBING)
        event_del(op->timer);
    lc_call call;
    acmd *c = NULL;
    /* A waiter (joined to its channel) marks the hold it finds as waited for (scripts.h). */
    if (lc_call_acquire(&call, &l->h, op->ch != NULL, op->nread, (const char *const *)op->read_keys,
                        op->read_lens) == LC_OK)
        c = lc_acmd_new(op->client, &call, 1);
    lc_call_done(&call);
    lc_aop_send(op, c);
}

/* Busy (or no answer) while waiting: sleep until an unlock, the fallback poll or the deadline. */
static void op_sleep(aop *op, lc_status st, int64_t pttl)
{
    achan *c = op->ch;
    op->woken = 0;
    op->state = OPS_SLEEPING;
    if (c && c->unclaimed > 0) {
        /* An unlock came while this waiter's attempt was on its way and nobody slept. */
        c->unclaimed--;
        op->client->wakeups++;
        op->woken = 1;
        lc_aop_attempt(op);
        return;
    }
    int64_t wait = lc_jitter_ms(op->poll);
    op->poll = op->poll * 2 > op->poll_max ? op->poll_max : op->poll * 2;
    if (st == LC_EBUSY && pttl >= 0 && pttl + 1 < wait)
        wait = pttl + 1; /* the holder's lease ends first */
    int64_t remaining = op->deadline_ms - lc_now_ms();
    if (wait > remaining)
        wait = remaining;
    lc_async_arm(op->timer, wait);
}

/* Applies an acquire's success to the lock: a fresh hold restarts renewal. */
static void acquired(lc_async_lock *l, const lc_acquired *a)
{
    if (a->fresh) {
        lc_alock_renew_stop(l);
        lc_hold_start(&l->h, a);
        lc_alock_renew_start(l);
    }
    l->h.count = a->count;
}

/* The acquire state machine: (state, event) -> next step. */
static void acquire_on(aop *op, op_event ev, lc_status st, redisReply *r, int sent)
{
    lc_async_lock *l = op->lock;
    switch (ev) {
    case EV_REPLY: {
        if (st == LC_EIO && sent) {
            /* It may have run: undo it (queued until the data connection is back). */
            acmd *undo = lc_alock_undo_cmd(l);
            if (undo)
                lc_acmd_send_detached(undo);
        }
        lc_acquired a;
        st = lc_hold_on_acquire(&l->h, st, r, op->nread, &a);
        if (st == LC_OK) {
            acquired(l, &a);
            lc_aop_finish(op, LC_OK, lc_acquire_values(r));
            return;
        }
        int first = op->attempts++ == 0;
        op->last_st = st;
        if (op->wait_ms == 0 || (st != LC_EBUSY && (first || st != LC_EIO))) {
            lc_aop_finish(op, st, NULL);
            return;
        }
        if (op->deadline_passed || op->deadline_ms - lc_now_ms() <= 0) {
            lc_aop_finish(op,
                          st == LC_EBUSY
                              ? lc_fail(LC_ETIMEOUT, "lock %s: not acquired within %d ms",
                                        l->h.name, op->wait_ms)
                              : st,
                          NULL);
            return;
        }
        if (first) {
            /* Subscribe first, then retry: an unlock published after the retry failed must
             * reach us, and one published before it is seen by the retry itself. */
            int ready = lc_achan_join(op);
            op->poll = ready >= 0 ? LC_POLL_SUBSCRIBED_MIN_MS : LC_POLL_ALONE_MIN_MS;
            op->poll_max = ready >= 0 ? LC_POLL_SUBSCRIBED_MAX_MS : LC_POLL_ALONE_MAX_MS;
            if (ready == 0) {
                op->state = OPS_SUBSCRIBING;
                int64_t wait = op->deadline_ms - lc_now_ms();
                if (wait > op->client->opts.command_timeout_ms)
                    wait = op->client->opts.command_timeout_ms;
                lc_async_arm(op->timer, wait);
                return;
            }
            lc_aop_attempt(op);
            return;
        }
        op_sleep(op, st, a.pttl);
        return;
    }
    case EV_SUBSCRIBED:
        if (op->state == OPS_SUBSCRIBING)
            lc_aop_attempt(op);
        return;
    case EV_TIMER:
        if (op->state == OPS_SUBSCRIBING) {
            /* The subscription is too slow: go on polling alone. */
            op->poll = LC_POLL_ALONE_MIN_MS;
            op->poll_max = LC_POLL_ALONE_MAX_MS;
            lc_aop_attempt(op);
        } else if (op->state == OPS_SLEEPING) {
            lc_aop_attempt(op);
        }
        return;
    case EV_UNLOCK:
        if (op->state == OPS_SLEEPING) {
            op->woken = 1;
            lc_aop_attempt(op);
        }
        return;
    case EV_DEADLINE:
        op->deadline_passed = 1;
        if (op->state == OPS_SUBSCRIBING || op->state == OPS_SLEEPING)
            lc_aop_finish(
                op,
                op->last_st == LC_EIO
                    ? lc_fail(LC_EIO, "lock %s: Redis unreachable until the deadline", l->h.name)
                    : lc_fail(LC_ETIMEOUT, "lock %s: not acquired within %d ms", l->h.name,
                              op->wait_ms),
                NULL);
        return; /* an attempt in flight decides when answered */
    }
}

static void eval_on(aop *op, lc_status st, redisReply *r)
{
    lc_async_lock *l = op->lock;
    int dropped;
    if (op->state == OPS_RELEASING) {
        lc_hold_on_release(&l->h, st, r, &dropped);
        if (dropped)
            lc_alock_renew_stop(l);
        lc_aop_finish(op, lc_fail(op->eval_st, "%s", op->deferred_msg), NULL); /* the body's */
        return;
    }
    int release_alone;
    redisReply *body = NULL;
    st = lc_hold_on_eval(&l->h, op->release, st, r, &body, &dropped, &release_alone);
    if (dropped)
        lc_alock_renew_stop(l);
    if (release_alone && l->h.count > 0) {
        op->eval_st = st;
        snprintf(op->deferred_msg, sizeof(op->deferred_msg),
                 "eval: body failed before the release: %s", lc_errmsg());
        if (l->h.count == 1)
            lc_alock_renew_stop(l);
        lc_aop_send(op, lc_alock_release_cmd(l, l->h.count));
        op->state = op->cmd ? OPS_RELEASING : OPS_ATTEMPT;
        if (op->state == OPS_RELEASING)
            return;
        /* Not sent: report the eval's own failure; the release counts as unknown. */
        lc_hold_on_release(&l->h, LC_EIO, NULL, &dropped);
        event_del(op->timer);
    }
    lc_aop_finish(op, st, body);
    if (body)
        freeReplyObject(body);
}

/* Dispatches an event to op's kind. A command or eval that never left is LC_EDOWN, not
 * LC_EIO: its caller knows nothing changed (the message stays). */
void lc_aop_on(aop *op, op_event ev, lc_status st, redisReply *r, int sent)
{
    if (ev == EV_REPLY && st == LC_EIO && !sent && (op->kind == OP_EVAL || op->kind == OP_COMMAND))
        st = LC_EDOWN;
    switch (op->kind) {
    case OP_ACQUIRE: acquire_on(op, ev, st, r, sent); return;
    case OP_EVAL:
        if (ev == EV_REPLY)
            eval_on(op, st, r);
        return;
    case OP_COMMAND:
        if (ev == EV_REPLY)
            lc_aop_finish(op, st, r);
        return;
    case OP_RELEASE:
        if (ev == EV_REPLY) {
            int dropped;
            st = lc_hold_on_release(&op->lock->h, st, r, &dropped);
            if (dropped)
                lc_alock_renew_stop(op->lock);
            lc_aop_finish(op, st, NULL);
        }
        return;
    }
}
