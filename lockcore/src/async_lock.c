/*
 * The lock handle of the asynchronous face (lc_async_lock): made and freed, its renewal on a
 * loop timer, the release and undo commands built from its hold, and the public calls that
 * start an operation on it (acquire, try, eval, detached eval, release) and read it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "async_internal.h"

static void on_lock_renew_timer(evutil_socket_t fd, short what, void *arg);

void lc_alock_renew_stop(lc_async_lock *l)
{
    if (l->renew)
        event_del(l->renew);
    if (l->renew_cmd) {
        l->renew_cmd->renew_of = NULL; /* its reply, if any, changes nothing */
        l->renew_cmd = NULL;
    }
}

void lc_alock_renew_start(lc_async_lock *l)
{
    lc_async_client *client = l->client;
    if (!l->h.opts.watchdog || !client)
        return;
    if (!l->renew)
        l->renew = evtimer_new(client->base, on_lock_renew_timer, l);
    l->renewed_ms = lc_now_ms();
    if (l->renew)
        lc_async_arm(l->renew, lc_renew_period_ms(l->h.opts.lease_ms));
}

void lc_alock_renew_on_reply(lc_async_lock *l, lc_status st, const redisReply *r)
{
    int64_t now = lc_now_ms();
    int verdict = lc_renew_verdict(lc_renew_result(st, r), now, l->renewed_ms, l->h.opts.lease_ms);
    if (verdict == LC_RENEW_OK) {
        l->renewed_ms = now;
        lc_async_arm(l->renew, lc_renew_period_ms(l->h.opts.lease_ms));
    } else if (verdict == LC_RENEW_RETRY) {
        lc_async_arm(l->renew, LC_RENEW_RETRY_MS);
    } else {
        atomic_store(&l->h.lost, 1);
        if (l->on_lost)
            l->on_lost(l, l->on_lost_arg); /* last: it may free the lock */
    }
}

static void on_lock_renew_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_async_lock *l = arg;
    lc_async_client *client = l->client;
    lc_async_enter(client);
    int64_t now = lc_now_ms();
    int lease = l->h.opts.lease_ms;
    int64_t cap = l->h.opts.max_hold_ms ? l->h.held_since_ms + l->h.opts.max_hold_ms : 0;
    if (cap && cap - now <= 0)
        goto out; /* hold cap reached: let the lease run out */
    if (cap && cap - now < lease)
        lease = (int)(cap - now);
    lc_call call;
    acmd *c = NULL;
    if (lc_call_renew(&call, &l->h, lease) == LC_OK)
        c = lc_acmd_new(client, &call, 1);
    lc_call_done(&call);
    if (c && lc_acmd_send(c) == 0) {
        c->renew_of = l;
        l->renew_cmd = c;
    } else {
        lc_acmd_free(c);
        lc_alock_renew_on_reply(l, LC_EIO, NULL);
    }
out:
    lc_async_leave(client);
}

/* The undo of an acquire of l sent while l counted its current holds: the release script for
 * one hold more (hold.c). NULL when out of memory. */
acmd *lc_alock_undo_cmd(lc_async_lock *l)
{
    lc_call call;
    acmd *c = NULL;
    if (lc_call_release(&call, &l->h, l->h.count + 1) == LC_OK)
        c = lc_acmd_new(l->client, &call, 1);
    lc_call_done(&call);
    return c;
}

acmd *lc_alock_release_cmd(lc_async_lock *l, int holds)
{
    lc_call call;
    acmd *c = NULL;
    if (lc_call_release(&call, &l->h, holds) == LC_OK)
        c = lc_acmd_new(l->client, &call, 1);
    lc_call_done(&call);
    return c;
}

lc_status lc_async_lock_new(lc_async_client *client, const char *name, const lc_lock_opts *opts,
                            lc_async_lost_fn on_lost, void *on_lost_arg, lc_async_lock **out)
{
    if (out)
        *out = NULL;
    if (!client || !name || !out)
        return lc_fail(LC_EINVAL, "async lock: NULL argument");
    if (opts && opts->on_lost)
        return lc_fail(LC_EINVAL, "async lock: opts->on_lost must be NULL (pass on_lost)");
    if (client->freeing)
        return lc_fail(LC_ESTATE, "async lock: client is being freed");
    lc_async_lock *l = calloc(1, sizeof(*l));
    if (!l)
        return lc_fail(LC_ENOMEM, "async lock: out of memory");
    lc_status st = lc_hold_init(&l->h, name, opts);
    if (st != LC_OK) {
        free(l);
        return st;
    }
    l->client = client;
    l->on_lost = on_lost;
    l->on_lost_arg = on_lost_arg;
    l->next = client->locks;
    if (client->locks)
        client->locks->prev = l;
    client->locks = l;
    *out = l;
    return LC_OK;
}

void lc_async_lock_free(lc_async_lock *lock)
{
    if (!lock)
        return;
    lc_async_client *client = lock->client;
    if (lock->op)
        lc_aop_finish(lock->op, lc_fail(LC_ESTATE, "async lock freed"), NULL);
    lc_alock_renew_stop(lock);
    if (lock->renew)
        event_free(lock->renew);
    if (client) {
        if (lock->h.count > 0 && !client->freeing)
            lc_acmd_send_detached(
                lc_alock_release_cmd(lock, 1)); /* all holds at once: the lock is deleted */
        if (lock->prev)
            lock->prev->next = lock->next;
        else if (client->locks == lock)
            client->locks = lock->next;
        if (lock->next)
            lock->next->prev = lock->prev;
    }
    lc_hold_clear(&lock->h);
    free(lock);
}

/* Common checks of an operation's start: LC_OK, or LC_EINVAL/LC_ESTATE. */
static lc_status can_start(lc_async_lock *lock)
{
    if (!lock)
        return lc_fail(LC_EINVAL, "async: NULL lock");
    if (!lock->client || lock->client->freeing)
        return lc_fail(LC_ESTATE, "async lock %s: its client was freed", lock->h.name);
    if (lock->op)
        return lc_fail(LC_ESTATE, "async lock %s: another operation is in flight", lock->h.name);
    return LC_OK;
}

lc_status lc_async_lock_acquire(lc_async_lock *lock, int wait_ms, int nread,
                                const char *const *read_keys, const size_t *read_keylens,
                                lc_async_acquire_fn cb, void *arg)
{
    lc_status st = can_start(lock);
    if (st != LC_OK)
        return st;
    if (wait_ms < 0 || nread < 0 || (nread && !read_keys))
        return lc_fail(LC_EINVAL, "acquire: wait_ms and nread must be >= 0");
    for (int i = 0; i < nread; i++)
        if (!read_keys[i])
            return lc_fail(LC_EINVAL, "acquire: read key %d is NULL", i);
    aop *op = lc_aop_new(lock->client, lock, OP_ACQUIRE, arg);
    if (!op)
        return lc_fail(LC_ENOMEM, "async: out of memory");
    op->cb.acquire = cb;
    op->wait_ms = wait_ms;
    op->deadline_ms = lc_now_ms() + wait_ms;
    if (nread > 0) {
        op->read_keys = calloc((size_t)nread, sizeof(*op->read_keys));
        op->read_lens = calloc((size_t)nread, sizeof(*op->read_lens));
        int ok = op->read_keys && op->read_lens;
        for (int i = 0; ok && i < nread; i++) {
            size_t len = read_keylens ? read_keylens[i] : strlen(read_keys[i]);
            if (!(op->read_keys[i] = malloc(len + 1))) {
                ok = 0;
                break;
            }
            memcpy(op->read_keys[i], read_keys[i], len);
            op->read_keys[i][len] = '\0';
            op->read_lens[i] = len;
            op->nread = i + 1;
        }
        if (!ok) {
            op->cb.acquire = NULL; /* not started: no callback */
            lc_aop_finish(op, LC_ENOMEM, NULL);
            return lc_fail(LC_ENOMEM, "async: out of memory");
        }
    }
    if (wait_ms > 0) {
        op->deadline = evtimer_new(lock->client->base, lc_aop_on_deadline, op);
        if (!op->deadline) {
            op->cb.acquire = NULL;
            lc_aop_finish(op, LC_ENOMEM, NULL);
            return lc_fail(LC_ENOMEM, "async: out of memory");
        }
        lc_async_arm(op->deadline, wait_ms);
    }
    lc_aop_attempt(op);
    return LC_OK;
}

lc_status lc_async_lock_try(lc_async_lock *lock, int nread, const char *const *read_keys,
                            const size_t *read_keylens, lc_async_acquire_fn cb, void *arg)
{
    return lc_async_lock_acquire(lock, 0, nread, read_keys, read_keylens, cb, arg);
}

lc_status lc_async_eval(lc_async_lock *lock, const lc_script *script, int flags, int nkeys,
                        const char **keys, const size_t *keylens, int nargs, const char **args,
                        const size_t *arglens, lc_async_eval_fn cb, void *arg)
{
    lc_status st = can_start(lock);
    if (st != LC_OK)
        return st;
    if ((st = lc_eval_check(script, flags, nkeys, keys, nargs, args)) != LC_OK)
        return st;
    aop *op = lc_aop_new(lock->client, lock, OP_EVAL, arg);
    if (!op)
        return lc_fail(LC_ENOMEM, "async: out of memory");
    op->cb.eval = cb;
    op->release = flags & LC_EVAL_RELEASE;
    if ((st = lc_hold_need(&lock->h)) != LC_OK) {
        lc_aop_defer(op, st);
        return LC_OK;
    }
    lc_call call;
    acmd *c = NULL;
    if (lc_call_eval(&call, &lock->h, script, op->release, nkeys, keys, keylens, nargs, args,
                     arglens) == LC_OK)
        c = lc_acmd_new(lock->client, &call, 0);
    lc_call_done(&call);
    if (c && op->release && lock->h.count == 1)
        lc_alock_renew_stop(lock); /* renewal stops before the release is sent */
    lc_aop_send(op, c);
    return LC_OK;
}

/* The caller's callback of a detached eval, and the unwrapping of the guard's reply. */
typedef struct detached {
    lc_async_reply_fn cb;
    void *arg;
} detached;

static void detached_on_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    detached d = *(detached *)arg;
    free(arg);
    const redisReply *body = NULL;
    if (st == LC_OK && (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
                        r->element[0]->type != REDIS_REPLY_INTEGER)) {
        st = LC_EREDIS;
        errstr = "eval: unexpected reply (not made by lc_fenced_script_new?)";
    } else if (st == LC_OK && r->element[0]->integer == 0) {
        st = LC_ELOST;
        errstr = "lost (the fencing token is stale): nothing ran";
    } else if (st == LC_OK && r->elements > 1) {
        body = r->element[1];
    }
    d.cb(st, body, errstr, d.arg);
}

lc_status lc_async_eval_detached(lc_async_lock *lock, const lc_script *script, int nkeys,
                                 const char **keys, const size_t *keylens, int nargs,
                                 const char **args, const size_t *arglens, lc_async_reply_fn cb,
                                 void *arg)
{
    if (!lock || !cb)
        return lc_fail(LC_EINVAL, "async: NULL lock or callback");
    if (!lock->client || lock->client->freeing)
        return lc_fail(LC_ESTATE, "async lock %s: its client was freed", lock->h.name);
    lc_status st = lc_eval_check(script, 0, nkeys, keys, nargs, args);
    if (st == LC_OK)
        st = lc_hold_need(&lock->h);
    if (st != LC_OK)
        return st;
    detached *d = malloc(sizeof(*d));
    if (!d)
        return lc_fail(LC_ENOMEM, "async: out of memory");
    d->cb = cb;
    d->arg = arg;
    lc_call call;
    acmd *c = NULL;
    if (lc_call_eval(&call, &lock->h, script, 0, nkeys, keys, keylens, nargs, args, arglens) ==
        LC_OK)
        c = lc_acmd_new(lock->client, &call, 0);
    lc_call_done(&call);
    st = lc_acommand_start(lock->client, c, detached_on_reply, d);
    if (st != LC_OK)
        free(d);
    return st;
}

lc_status lc_async_release(lc_async_lock *lock, lc_async_done_fn cb, void *arg)
{
    lc_status st = can_start(lock);
    if (st != LC_OK)
        return st;
    aop *op = lc_aop_new(lock->client, lock, OP_RELEASE, arg);
    if (!op)
        return lc_fail(LC_ENOMEM, "async: out of memory");
    op->cb.done = cb;
    if ((st = lc_hold_need(&lock->h)) != LC_OK) {
        lc_aop_defer(op, st);
        return LC_OK;
    }
    acmd *c = lc_alock_release_cmd(lock, lock->h.count);
    if (c && lock->h.count == 1)
        lc_alock_renew_stop(lock); /* renewal stops before the release is sent */
    lc_aop_send(op, c);
    return LC_OK;
}

int lc_async_lock_held(const lc_async_lock *lock)
{
    return lock ? lock->h.count : 0;
}

int lc_async_lock_lost(const lc_async_lock *lock)
{
    return lock ? atomic_load(&((lc_async_lock *)lock)->h.lost) : 0;
}

uint64_t lc_async_lock_fence(const lc_async_lock *lock)
{
    return lock ? lock->h.fence : 0;
}

const char *lc_async_lock_name(const lc_async_lock *lock)
{
    return lock ? lock->h.name : "";
}

const char *lc_async_lock_errmsg(const lc_async_lock *lock)
{
    return lock ? lock->errstr : "";
}

const char *lc_async_lock_token(const lc_async_lock *lock)
{
    return lock ? lock->h.token : "";
}
