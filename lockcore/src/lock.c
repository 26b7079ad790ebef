/*
 * One owner of one lock name: acquire (try, with deadline, with reads), release, extend, and
 * scripts guarded by the current hold's fencing token. All state changes on the server are
 * single Lua scripts (scripts.h), whose calls and replies are hold.c's; this file runs them on
 * the client, keeps the owner's local view in step with them, registers each fresh hold with the
 * watchdog (watchdog.c) and waits for unlocks through the listener (notify.c).
 *
 * The handle's hold count is the truth: every script that changes the count in Redis is sent
 * the handle's count and sets Redis' from it. When a reply is lost (LC_EIO once the request was
 * sent) the request may or may not have run: an acquire is then undone on another connection
 * (undo_acquire) and counts as not taken, a release counts as done.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base_internal.h"
#include "hold_internal.h"
#include "lock_internal.h"
#include "notify_internal.h"
#include "script_internal.h"
#include "watchdog_internal.h"

struct lc_lock {
    lc_client *client;
    pthread_mutex_t mu; /* serialises this owner's calls */
    lc_hold h;          /* name, token, hold count, fence (hold.c) */
    lc_watch wd;        /* the hold's watchdog registration (watchdog.c) */
    int last_wake;      /* how the last wait of the last acquire ended (enum lc_wake) */
    char errstr[128];
};

/* Records st/the thread's message into lock->errstr and returns st. */
static lc_status lc_lock_note(lc_lock *lock, lc_status st)
{
    if (st != LC_OK)
        snprintf(lock->errstr, sizeof(lock->errstr), "%s", lc_errmsg());
    return st;
}

lc_status lc_lock_new(lc_client *client, const char *name, const lc_lock_opts *opts, lc_lock **out)
{
    if (out)
        *out = NULL;
    if (!client || !name || !out)
        return lc_fail(LC_EINVAL, "lock: NULL argument");
    lc_lock *l = calloc(1, sizeof(*l));
    if (!l)
        return lc_fail(LC_ENOMEM, "lock: out of memory");
    lc_status st = lc_hold_init(&l->h, name, opts);
    if (st != LC_OK) {
        free(l);
        return st;
    }
    l->client = client;
    pthread_mutex_init(&l->mu, NULL);
    *out = l;
    return LC_OK;
}

/* Forgets the local hold (after a release of the last hold, or when found lost). */
static void drop_hold(lc_lock *l)
{
    lc_watchdog_remove(l->client, &l->wd);
    lc_hold_drop(&l->h);
}

/* Runs the release script for a handle holding `holds` (the count before this release):
 * Redis' count becomes holds - 1, or the lock is deleted and the unlock published at 0. Status,
 * reply and *sent as for lc_call_run. */
static lc_status run_release(lc_lock *l, int holds, redisReply **r, int *sent)
{
    lc_call call;
    lc_status st = lc_call_release(&call, &l->h, holds);
    if (st == LC_OK)
        st = lc_call_run(l->client, &call, r, sent);
    lc_call_done(&call);
    return st;
}

/* After an acquire that failed with LC_EIO once it was sent: it may have run, and nobody would
 * renew or release what it took. Undoes it on another connection (the failed one was dropped)
 * with the release script for one hold more than the handle counts: a fresh hold of this owner
 * is deleted (and its waiters woken), a re-entered count is set back to the handle's, and when
 * the acquire did not run (or another owner holds the lock) nothing changes. Best effort: if the
 * undo fails too, a re-entered count is set right by the handle's next call, and a fresh hold
 * runs out with its lease. An acquire that reaches Redis only after its undo is not undone.
 * Keeps the acquire's message as this thread's lc_errmsg(). Called with l->mu held. */
static void undo_acquire(lc_lock *l)
{
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", lc_errmsg());
    redisReply *r = NULL;
    run_release(l, l->h.count + 1, &r, NULL);
    if (r)
        freeReplyObject(r);
    lc_fail(LC_EIO, "%s", msg);
}

/* One run of the acquire script. LC_OK (held; *values stolen from the reply when asked),
 * LC_EBUSY with *pttl the holder's remaining lease, or an error. waiting: the caller is
 * subscribed to the unlock channel and will sleep on it (lc_call_acquire). Called with l->mu
 * held. */
static lc_status acquire_once(lc_lock *l, const lc_acquire_opts *o, int waiting, int64_t *pttl,
                              redisReply **values)
{
    lc_call call;
    redisReply *r = NULL;
    int sent = 0;
    lc_status st = lc_call_acquire(&call, &l->h, waiting, o->nread, o->read_keys, o->read_keylens);
    if (st == LC_OK)
        st = lc_call_run(l->client, &call, &r, &sent);
    lc_call_done(&call);
    if (st == LC_EIO && sent)
        undo_acquire(l);
    lc_acquired a;
    st = lc_hold_on_acquire(&l->h, st, r, o->nread, &a);
    *pttl = a.pttl;
    if (st != LC_OK)
        goto out;
    if (a.fresh) {
        lc_watchdog_remove(l->client, &l->wd);
        lc_hold_start(&l->h, &a);
        if (l->h.opts.watchdog) {
            st = lc_watchdog_add(l->client, &l->wd, &l->h, l);
            if (st != LC_OK)
                goto out; /* hold kept; its lease runs out unless released */
        }
    }
    l->h.count = a.count;
    if (values) {
        /* Hand the caller only the read values. */
        *values = lc_acquire_values(r);
        r = NULL;
    }
out:
    if (r)
        freeReplyObject(r);
    return st;
}

lc_status lc_lock_acquire_ex(lc_lock *lock, const lc_acquire_opts *opts, uint64_t *fence,
                             redisReply **values)
{
    if (values)
        *values = NULL;
    if (!lock || !opts)
        return lc_fail(LC_EINVAL, "acquire: NULL argument");
    if (opts->wait_ms < 0 || opts->nread < 0 || (opts->nread && !opts->read_keys))
        return lc_fail(LC_EINVAL, "acquire: wait_ms and nread must be >= 0");
    for (int i = 0; i < opts->nread; i++)
        if (!opts->read_keys[i])
            return lc_fail(LC_EINVAL, "acquire: read key %d is NULL", i);
    pthread_mutex_lock(&lock->mu);
    lock->last_wake = LC_WAKE_NONE;
    int64_t deadline = lc_now_ms() + opts->wait_ms;
    int64_t pttl = 0;
    lc_status st = acquire_once(lock, opts, 0, &pttl, values);
    if (st == LC_EBUSY && opts->wait_ms > 0) {
        /* Subscribe first, then retry: an unlock published after the retry failed must reach
         * us, and one published before it is seen by the retry itself. The retries mark the
         * hold they find as waited for, so that its end publishes (scripts.h). */
        int64_t left = deadline - lc_now_ms();
        lc_sub *sub =
            left > 0 ? lc_notify_subscribe(lock->client, lock->h.channel, (int)left) : NULL;
        int poll = sub ? LC_POLL_SUBSCRIBED_MIN_MS : LC_POLL_ALONE_MIN_MS;
        int poll_max = sub ? LC_POLL_SUBSCRIBED_MAX_MS : LC_POLL_ALONE_MAX_MS;
        for (;;) {
            st = acquire_once(lock, opts, sub != NULL, &pttl, values);
            if (st != LC_EBUSY && st != LC_EIO)
                break;
            int64_t remaining = deadline - lc_now_ms();
            if (remaining <= 0) {
                if (st == LC_EBUSY)
                    st = lc_fail(LC_ETIMEOUT, "lock %s: not acquired within %d ms", lock->h.name,
                                 opts->wait_ms);
                break;
            }
            int64_t wait = lc_jitter_ms(poll);
            poll = poll * 2 > poll_max ? poll_max : poll * 2;
            if (st == LC_EBUSY && pttl >= 0 && pttl + 1 < wait)
                wait = pttl + 1; /* the holder's lease ends first */
            if (wait > remaining)
                wait = remaining;
            if (sub)
                lock->last_wake = lc_notify_wait(sub, (int)wait) ? LC_WAKE_UNLOCK : LC_WAKE_POLL;
            else {
                lock->last_wake = LC_WAKE_POLL;
                struct timespec ts = {wait / 1000, (wait % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
        }
        lc_notify_unsubscribe(sub);
    }
    if (st == LC_OK && fence)
        *fence = lock->h.fence;
    lc_lock_note(lock, st);
    pthread_mutex_unlock(&lock->mu);
    return st;
}

int lc_lock_last_wake(lc_lock *lock)
{
    pthread_mutex_lock(&lock->mu);
    int w = lock->last_wake;
    pthread_mutex_unlock(&lock->mu);
    return w;
}

lc_status lc_lock_acquire(lc_lock *lock, int wait_ms, uint64_t *fence)
{
    lc_acquire_opts o = {.wait_ms = wait_ms};
    return lc_lock_acquire_ex(lock, &o, fence, NULL);
}

lc_status lc_lock_try(lc_lock *lock, uint64_t *fence)
{
    return lc_lock_acquire(lock, 0, fence);
}

/* Drops one hold. Called with l->mu held. */
static lc_status release_locked(lc_lock *l)
{
    lc_status st = lc_hold_need(&l->h);
    if (st != LC_OK)
        return st;
    if (l->h.count == 1)
        lc_watchdog_remove(l->client, &l->wd); /* renewal stops before the release is sent */
    redisReply *r = NULL;
    int dropped;
    st = run_release(l, l->h.count, &r, NULL);
    st = lc_hold_on_release(&l->h, st, r, &dropped);
    if (dropped)
        lc_watchdog_remove(l->client, &l->wd);
    if (r)
        freeReplyObject(r);
    return st;
}

lc_status lc_lock_release(lc_lock *lock)
{
    if (!lock)
        return lc_fail(LC_EINVAL, "release: NULL lock");
    pthread_mutex_lock(&lock->mu);
    lc_status st = lc_lock_note(lock, release_locked(lock));
    pthread_mutex_unlock(&lock->mu);
    return st;
}

lc_status lc_lock_extend(lc_lock *lock, int lease_ms)
{
    if (!lock)
        return lc_fail(LC_EINVAL, "extend: NULL lock");
    pthread_mutex_lock(&lock->mu);
    lc_status st;
    if (lease_ms <= 0) {
        st = lc_fail(LC_EINVAL, "extend: lease_ms must be > 0");
    } else if (lock->h.count == 0) {
        st = lc_fail(LC_ENOTHELD, "lock %s: not held by this owner", lock->h.name);
    } else {
        lc_call call;
        redisReply *r = NULL;
        /* Before the extend is sent, so that no renewal with the old lease can land after it
         * (its TTL could end before the first renewal with the new lease). */
        lc_watchdog_set_lease(lock->client, &lock->wd, lease_ms);
        int64_t sent_ms = lc_now_ms();
        st = lc_call_renew(&call, &lock->h, lease_ms);
        if (st == LC_OK)
            st = lc_call_run(lock->client, &call, &r, NULL);
        lc_call_done(&call);
        if (st == LC_OK && (r->type != REDIS_REPLY_INTEGER || r->integer != 1)) {
            st = lc_fail(LC_ELOST, "lock %s: lost before extend", lock->h.name);
            atomic_store(&lock->h.lost, 1);
            drop_hold(lock);
        } else if (st == LC_OK) {
            lock->h.opts.lease_ms = lease_ms;
            lc_watchdog_renewed(lock->client, &lock->wd, sent_ms);
        } else {
            /* Outcome unknown: Redis holds the old lease or the new one; renew with the old. */
            lc_watchdog_set_lease(lock->client, &lock->wd, lock->h.opts.lease_ms);
        }
        if (r)
            freeReplyObject(r);
    }
    lc_lock_note(lock, st);
    pthread_mutex_unlock(&lock->mu);
    return st;
}

void lc_lock_free(lc_lock *lock)
{
    if (!lock)
        return;
    pthread_mutex_lock(&lock->mu);
    while (lock->h.count > 0 && release_locked(lock) == LC_OK)
        ;
    drop_hold(lock);
    pthread_mutex_unlock(&lock->mu);
    pthread_mutex_destroy(&lock->mu);
    lc_hold_clear(&lock->h);
    free(lock);
}

int lc_lock_held(lc_lock *lock)
{
    if (!lock)
        return 0;
    pthread_mutex_lock(&lock->mu);
    int n = lock->h.count;
    pthread_mutex_unlock(&lock->mu);
    return n;
}

int lc_lock_lost(lc_lock *lock)
{
    return lock ? atomic_load(&lock->h.lost) : 0;
}

uint64_t lc_lock_fence(lc_lock *lock)
{
    if (!lock)
        return 0;
    pthread_mutex_lock(&lock->mu);
    uint64_t f = lock->h.fence;
    pthread_mutex_unlock(&lock->mu);
    return f;
}

const char *lc_lock_name(const lc_lock *lock)
{
    return lock ? lock->h.name : "";
}

const char *lc_lock_token(const lc_lock *lock)
{
    return lock ? lock->h.token : "";
}

const char *lc_lock_errmsg(lc_lock *lock)
{
    return lock ? lock->errstr : "";
}

lc_status lc_lock_force_unlock(lc_client *client, const char *name)
{
    if (!client || !name)
        return lc_fail(LC_EINVAL, "force unlock: NULL argument");
    size_t len = strnlen(name, LC_NAME_MAX + 1);
    if (len == 0 || len > LC_NAME_MAX)
        return lc_fail(LC_EINVAL, "force unlock: name must be 1..%d bytes", LC_NAME_MAX);
    char *channel = malloc(len + sizeof(":unlock"));
    if (!channel)
        return lc_fail(LC_ENOMEM, "force unlock: out of memory");
    memcpy(channel, name, len);
    memcpy(channel + len, ":unlock", sizeof(":unlock"));
    lc_call call;
    redisReply *r = NULL;
    lc_status st = lc_call_force(&call, name, channel);
    if (st == LC_OK)
        st = lc_call_run(client, &call, &r, NULL);
    lc_call_done(&call);
    if (st == LC_OK && (r->type != REDIS_REPLY_INTEGER || r->integer != 1))
        st = lc_fail(LC_ENOTHELD, "force unlock: lock %s was not held", name);
    if (r)
        freeReplyObject(r);
    free(channel);
    return st;
}

lc_status lc_lock_eval(lc_lock *lock, const lc_script *script, int flags, int nkeys,
                       const char **keys, const size_t *keylens, int nargs, const char **args,
                       const size_t *arglens, redisReply **reply)
{
    if (reply)
        *reply = NULL;
    if (!lock)
        return lc_fail(LC_EINVAL, "eval: bad argument");
    lc_status st = lc_eval_check(script, flags, nkeys, keys, nargs, args);
    if (st != LC_OK)
        return st;
    pthread_mutex_lock(&lock->mu);
    redisReply *r = NULL;
    int release = flags & LC_EVAL_RELEASE;
    if ((st = lc_hold_need(&lock->h)) != LC_OK)
        goto out;
    lc_call call;
    st = lc_call_eval(&call, &lock->h, script, release, nkeys, keys, keylens, nargs, args, arglens);
    if (st != LC_OK)
        goto out;
    if (release && lock->h.count == 1)
        lc_watchdog_remove(lock->client, &lock->wd); /* renewal stops before the release is sent */
    st = lc_call_run(lock->client, &call, &r, NULL);
    lc_call_done(&call);
    int dropped, release_alone;
    st = lc_hold_on_eval(&lock->h, release, st, r, reply, &dropped, &release_alone);
    if (dropped)
        lc_watchdog_remove(lock->client, &lock->wd);
    if (release_alone) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", lc_errmsg());
        release_locked(lock);
        lc_fail(st, "%s", msg);
    }
out:
    if (r)
        freeReplyObject(r);
    lc_lock_note(lock, st);
    pthread_mutex_unlock(&lock->mu);
    return st;
}
