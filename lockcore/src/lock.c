/*
 * One owner of one lock name: acquire (try, with deadline, with reads), release, extend, and
 * scripts guarded by the current hold's fencing token. All state changes on the server are
 * single Lua scripts (scripts.h); this file keeps the owner's local view in step with them.
 *
 * The handle's hold count is the truth: every script that changes the count in Redis is sent
 * the handle's count and sets Redis' from it. When a reply is lost (LC_EIO once the request was
 * sent) the request may or may not have run: an acquire is then undone on another connection
 * (undo_acquire) and counts as not taken, a release counts as done.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lockcore_internal.h"
#include "scripts.h"

const char LC_LUA_FENCE_ACCEPT[] = LC_LUA_FENCE_ACCEPT_SRC;

/* Fallback poll interval bounds while waiting: with the unlock listener the poll only covers a
 * lost message, so it is slow; without it the poll is all there is, so it starts fast. */
enum { POLL_SUBSCRIBED_MIN_MS = 200, POLL_SUBSCRIBED_MAX_MS = 1000,
       POLL_ALONE_MIN_MS = 10, POLL_ALONE_MAX_MS = 200 };

void lc_lock_opts_init(lc_lock_opts *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof(*opts));
    opts->lease_ms = 30000;
    opts->watchdog = 1;
}

lc_status lc_lock_note(lc_lock *lock, lc_status st)
{
    if (st != LC_OK)
        snprintf(lock->errstr, sizeof(lock->errstr), "%s", lc_errmsg());
    return st;
}

static char *concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

lc_status lc_lock_new(lc_client *client, const char *name, const lc_lock_opts *opts,
                      lc_lock **out)
{
    if (out)
        *out = NULL;
    if (!client || !name || !out)
        return lc_fail(LC_EINVAL, "lock: NULL argument");
    size_t len = strnlen(name, LC_NAME_MAX + 1);
    if (len == 0 || len > LC_NAME_MAX)
        return lc_fail(LC_EINVAL, "lock: name must be 1..%d bytes", LC_NAME_MAX);
    lc_lock_opts o;
    lc_lock_opts_init(&o);
    if (opts)
        o = *opts;
    if (o.lease_ms <= 0)
        return lc_fail(LC_EINVAL, "lock: lease_ms must be > 0, got %d", o.lease_ms);
    if (o.max_hold_ms < 0)
        return lc_fail(LC_EINVAL, "lock: max_hold_ms must be >= 0, got %d", o.max_hold_ms);
    lc_lock *l = calloc(1, sizeof(*l));
    if (!l)
        return lc_fail(LC_ENOMEM, "lock: out of memory");
    l->client = client;
    l->opts = o;
    l->name_len = len;
    l->name = strdup(name);
    l->fence_key = concat(name, ":fence");
    l->channel = concat(name, ":unlock");
    if (!l->name || !l->fence_key || !l->channel) {
        lc_lock_free(l);
        return lc_fail(LC_ENOMEM, "lock: out of memory");
    }
    pthread_mutex_init(&l->mu, NULL);
    atomic_init(&l->lost, 0);
    lc_token_new(l->token);
    *out = l;
    return LC_OK;
}

/* Forgets the local hold (after a release of the last hold, or when found lost). */
static void drop_hold(lc_lock *l)
{
    lc_watchdog_remove(l->client, l);
    l->count = 0;
    l->fence = 0;
}

/* Runs the release script for a handle holding `holds` (the count before this release):
 * Redis' count becomes holds - 1, or the lock is deleted and the unlock published at 0. Status,
 * reply and *sent as for lc_script_call. */
static lc_status run_release(lc_lock *l, int holds, redisReply **r, int *sent)
{
    char lease[16], held[16];
    snprintf(lease, sizeof(lease), "%d", l->opts.lease_ms);
    snprintf(held, sizeof(held), "%d", holds);
    const char *keys[1] = {l->name};
    const char *args[4] = {l->token, lease, l->channel, held};
    size_t klen[1] = {l->name_len};
    return lc_script_call(l->client, l->client->s_release, 1, keys, klen, 4, args, NULL, r, sent);
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
    run_release(l, l->count + 1, &r, NULL);
    if (r)
        freeReplyObject(r);
    lc_fail(LC_EIO, "%s", msg);
}

/* One run of the acquire script. LC_OK (held; *values stolen from the reply when asked),
 * LC_EBUSY with *pttl the holder's remaining lease, or an error. Called with l->mu held. */
static lc_status acquire_once(lc_lock *l, const lc_acquire_opts *o, int64_t *pttl,
                              redisReply **values)
{
    enum { STACK_KEYS = 8 };
    const char *kv[STACK_KEYS + 2];
    size_t kl[STACK_KEYS + 2];
    const char **keys = kv;
    size_t *lens = kl;
    int nkeys = 2 + o->nread;
    if (o->nread > STACK_KEYS) {
        keys = malloc(sizeof(*keys) * (size_t)nkeys);
        lens = malloc(sizeof(*lens) * (size_t)nkeys);
        if (!keys || !lens) {
            free(keys);
            free(lens);
            return lc_fail(LC_ENOMEM, "acquire: out of memory");
        }
    }
    keys[0] = l->name;
    lens[0] = l->name_len;
    keys[1] = l->fence_key;
    lens[1] = strlen(l->fence_key);
    for (int i = 0; i < o->nread; i++) {
        keys[2 + i] = o->read_keys[i];
        lens[2 + i] = o->read_keylens ? o->read_keylens[i] : strlen(o->read_keys[i]);
    }
    char lease[16], held[16];
    snprintf(lease, sizeof(lease), "%d", l->opts.lease_ms);
    snprintf(held, sizeof(held), "%d", l->count);
    const char *args[3] = {l->token, lease, held};
    redisReply *r = NULL;
    int sent = 0;
    lc_status st = lc_script_call(l->client, l->client->s_acquire, nkeys, keys, lens, 3, args,
                                  NULL, &r, &sent);
    if (keys != kv) {
        free(keys);
        free(lens);
    }
    if (st == LC_EIO && sent)
        undo_acquire(l);
    if (st != LC_OK)
        goto out;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        st = lc_fail(LC_EREDIS, "acquire: unexpected reply from Redis");
        goto out;
    }
    if (r->element[0]->integer == 0) {
        *pttl = r->element[1]->integer;
        st = lc_fail(LC_EBUSY, "lock %s is held by another owner", l->name);
        goto out;
    }
    if (r->elements < 3 + (size_t)o->nread) {
        st = lc_fail(LC_EREDIS, "acquire: short reply from Redis");
        goto out;
    }
    uint64_t fence = (uint64_t)r->element[1]->integer;
    int count = (int)r->element[2]->integer;
    if (l->count == 0 || count == 1) {
        /* A fresh hold: this handle held nothing (the script then made a new hold even if
         * Redis still had a forgotten one of ours), or its previous hold was lost. */
        lc_watchdog_remove(l->client, l);
        l->fence = fence;
        l->held_since_ms = lc_now_ms();
        atomic_store(&l->lost, 0);
        if (l->opts.watchdog) {
            l->count = count;
            st = lc_watchdog_add(l->client, l);
            if (st != LC_OK)
                goto out; /* hold kept; its lease runs out unless released */
        }
    }
    l->count = count;
    if (values) {
        /* Hand the caller only the read values: shift them to the front of the reply. */
        for (int i = 0; i < 3; i++)
            freeReplyObject(r->element[i]);
        memmove(r->element, r->element + 3, sizeof(*r->element) * (r->elements - 3));
        r->elements -= 3;
        *values = r;
        r = NULL;
    }
out:
    if (r)
        freeReplyObject(r);
    return st;
}

/* Milliseconds from base to base*2 (jitter), for the fallback poll. */
static int jitter(int base)
{
    return base + (int)lc_rand_below((uint32_t)base + 1);
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
    lc_status st = acquire_once(lock, opts, &pttl, values);
    if (st == LC_EBUSY && opts->wait_ms > 0) {
        /* Subscribe first, then retry: an unlock published after the retry failed must reach
         * us, and one published before it is seen by the retry itself. */
        int64_t left = deadline - lc_now_ms();
        lc_sub *sub = left > 0 ? lc_notify_subscribe(lock->client, lock->channel, (int)left)
                               : NULL;
        int poll = sub ? POLL_SUBSCRIBED_MIN_MS : POLL_ALONE_MIN_MS;
        int poll_max = sub ? POLL_SUBSCRIBED_MAX_MS : POLL_ALONE_MAX_MS;
        for (;;) {
            st = acquire_once(lock, opts, &pttl, values);
            if (st != LC_EBUSY && st != LC_EIO)
                break;
            int64_t remaining = deadline - lc_now_ms();
            if (remaining <= 0) {
                if (st == LC_EBUSY)
                    st = lc_fail(LC_ETIMEOUT, "lock %s: not acquired within %d ms", lock->name,
                                 opts->wait_ms);
                break;
            }
            int64_t wait = jitter(poll);
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
        *fence = lock->fence;
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

/* Counts one release whose outcome is unknown (LC_EIO) as done: the caller will not release
 * that hold again. If it did not run, Redis keeps one hold more than the handle until the
 * handle's next call sets the count, or (the last hold) until the lease runs out. */
static void release_unknown(lc_lock *l)
{
    if (l->count == 1)
        drop_hold(l);
    else
        l->count--;
}

/* Drops one hold. Called with l->mu held. */
static lc_status release_locked(lc_lock *l)
{
    if (l->count == 0)
        return lc_fail(LC_ENOTHELD, "lock %s: not held by this owner", l->name);
    if (l->count == 1)
        lc_watchdog_remove(l->client, l); /* renewal stops before the release is sent */
    redisReply *r = NULL;
    lc_status st = run_release(l, l->count, &r, NULL);
    if (st == LC_OK && r->type != REDIS_REPLY_INTEGER)
        st = lc_fail(LC_EREDIS, "release: unexpected reply from Redis");
    if (st == LC_OK && r->integer < 0) {
        st = lc_fail(LC_ELOST, "lock %s: lost before release (expired or taken)", l->name);
        drop_hold(l);
    } else if (st == LC_OK) {
        l->count = (int)r->integer;
        if (l->count == 0)
            drop_hold(l);
    } else if (st == LC_EIO) {
        release_unknown(l);
    } else if (l->count == 1) {
        drop_hold(l); /* renewal has stopped: if the hold is still there, its lease runs out */
    }
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
    } else if (lock->count == 0) {
        st = lc_fail(LC_ENOTHELD, "lock %s: not held by this owner", lock->name);
    } else {
        char lease[16];
        snprintf(lease, sizeof(lease), "%d", lease_ms);
        const char *keys[1] = {lock->name};
        const char *args[2] = {lock->token, lease};
        redisReply *r = NULL;
        /* Before the extend is sent, so that no renewal with the old lease can land after it
         * (its TTL could end before the first renewal with the new lease). */
        lc_watchdog_set_lease(lock->client, lock, lease_ms);
        int64_t sent_ms = lc_now_ms();
        st = lc_script_run(lock->client, lock->client->s_renew, 1, keys, NULL, 2, args, NULL, &r);
        if (st == LC_OK && (r->type != REDIS_REPLY_INTEGER || r->integer != 1)) {
            st = lc_fail(LC_ELOST, "lock %s: lost before extend", lock->name);
            atomic_store(&lock->lost, 1);
            drop_hold(lock);
        } else if (st == LC_OK) {
            lock->opts.lease_ms = lease_ms;
            lc_watchdog_renewed(lock->client, lock, sent_ms);
        } else {
            /* Outcome unknown: Redis holds the old lease or the new one; renew with the old. */
            lc_watchdog_set_lease(lock->client, lock, lock->opts.lease_ms);
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
    if (lock->name) {
        pthread_mutex_lock(&lock->mu);
        while (lock->count > 0 && release_locked(lock) == LC_OK)
            ;
        drop_hold(lock);
        pthread_mutex_unlock(&lock->mu);
        pthread_mutex_destroy(&lock->mu);
    }
    free(lock->name);
    free(lock->fence_key);
    free(lock->channel);
    free(lock);
}

int lc_lock_held(lc_lock *lock)
{
    if (!lock)
        return 0;
    pthread_mutex_lock(&lock->mu);
    int n = lock->count;
    pthread_mutex_unlock(&lock->mu);
    return n;
}

int lc_lock_lost(lc_lock *lock)
{
    return lock ? atomic_load(&lock->lost) : 0;
}

uint64_t lc_lock_fence(lc_lock *lock)
{
    if (!lock)
        return 0;
    pthread_mutex_lock(&lock->mu);
    uint64_t f = lock->fence;
    pthread_mutex_unlock(&lock->mu);
    return f;
}

const char *lc_lock_name(const lc_lock *lock)
{
    return lock ? lock->name : "";
}

const char *lc_lock_token(const lc_lock *lock)
{
    return lock ? lock->token : "";
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
    char *channel = concat(name, ":unlock");
    if (!channel)
        return lc_fail(LC_ENOMEM, "force unlock: out of memory");
    const char *keys[1] = {name};
    const char *args[1] = {channel};
    redisReply *r = NULL;
    lc_status st = lc_script_run(client, client->s_force, 1, keys, NULL, 1, args, NULL, &r);
    if (st == LC_OK && (r->type != REDIS_REPLY_INTEGER || r->integer != 1))
        st = lc_fail(LC_ENOTHELD, "force unlock: lock %s was not held", name);
    if (r)
        freeReplyObject(r);
    free(channel);
    return st;
}

/* ---- fenced scripts ---- */

lc_status lc_fenced_script_new(const char *body, lc_script **out)
{
    if (out)
        *out = NULL;
    if (!body || !out)
        return lc_fail(LC_EINVAL, "fenced script: NULL argument");
    char *src = malloc(strlen(LC_LUA_GUARD_HEAD) + strlen(body) + strlen(LC_LUA_GUARD_TAIL) + 1);
    if (!src)
        return lc_fail(LC_ENOMEM, "fenced script: out of memory");
    strcpy(src, LC_LUA_GUARD_HEAD);
    strcat(src, body);
    strcat(src, LC_LUA_GUARD_TAIL);
    lc_status st = lc_script_new(src, out);
    free(src);
    return st;
}

int lc_fence_newer(uint64_t token, uint64_t highest_seen)
{
    return token >= highest_seen;
}

lc_status lc_lock_eval(lc_lock *lock, const lc_script *script, int flags, int nkeys,
                       const char **keys, const size_t *keylens, int nargs, const char **args,
                       const size_t *arglens, redisReply **reply)
{
    if (reply)
        *reply = NULL;
    if (!lock || !script || nkeys < 0 || nargs < 0 || (nkeys && !keys) || (nargs && !args) ||
        (flags & ~LC_EVAL_RELEASE))
        return lc_fail(LC_EINVAL, "eval: bad argument");
    for (int i = 0; i < nkeys; i++)
        if (!keys[i])
            return lc_fail(LC_EINVAL, "eval: key %d is NULL", i);
    for (int i = 0; i < nargs; i++)
        if (!args[i])
            return lc_fail(LC_EINVAL, "eval: arg %d is NULL", i);
    enum { STACK = 16, GUARD_ARGS = 5 };
    const char *kv[STACK], *av[STACK];
    size_t kl[STACK], al[STACK];
    const char **k = kv, **a = av;
    size_t *klen = kl, *alen = al;
    if (nkeys + 1 > STACK || nargs + GUARD_ARGS > STACK) {
        k = malloc(sizeof(*k) * (size_t)(nkeys + 1));
        klen = malloc(sizeof(*klen) * (size_t)(nkeys + 1));
        a = malloc(sizeof(*a) * (size_t)(nargs + GUARD_ARGS));
        alen = malloc(sizeof(*alen) * (size_t)(nargs + GUARD_ARGS));
        if (!k || !klen || !a || !alen) {
            free(k);
            free(klen);
            free(a);
            free(alen);
            return lc_fail(LC_ENOMEM, "eval: out of memory");
        }
    }
    pthread_mutex_lock(&lock->mu);
    lc_status st;
    redisReply *r = NULL;
    int release = flags & LC_EVAL_RELEASE;
    if (lock->count == 0) {
        st = lc_fail(LC_ENOTHELD, "lock %s: not held by this owner", lock->name);
        goto out;
    }
    if (release && lock->count == 1)
        lc_watchdog_remove(lock->client, lock);
    char fence[24], lease[16], held[16];
    snprintf(fence, sizeof(fence), "%" PRIu64, lock->fence);
    snprintf(lease, sizeof(lease), "%d", lock->opts.lease_ms);
    snprintf(held, sizeof(held), "%d", release ? lock->count : 0);
    k[0] = lock->name;
    klen[0] = lock->name_len;
    for (int i = 0; i < nkeys; i++) {
        k[1 + i] = keys[i];
        klen[1 + i] = keylens ? keylens[i] : strlen(keys[i]);
    }
    const char *guard[GUARD_ARGS] = {lock->token, fence, held, lease, lock->channel};
    for (int i = 0; i < GUARD_ARGS; i++) {
        a[i] = guard[i];
        alen[i] = strlen(guard[i]);
    }
    for (int i = 0; i < nargs; i++) {
        a[GUARD_ARGS + i] = args[i];
        alen[GUARD_ARGS + i] = arglens ? arglens[i] : strlen(args[i]);
    }
    st = lc_script_run(lock->client, script, nkeys + 1, k, klen, nargs + GUARD_ARGS, a, alen, &r);
    if (st == LC_OK && (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
                        r->element[0]->type != REDIS_REPLY_INTEGER))
        st = lc_fail(LC_EREDIS, "eval: unexpected reply (not made by lc_fenced_script_new?)");
    if (st == LC_OK && r->element[0]->integer == 0) {
        st = lc_fail(LC_ELOST, "lock %s: lost (fencing token %" PRIu64 " is stale)", lock->name,
                     lock->fence);
        atomic_store(&lock->lost, 1);
        drop_hold(lock);
    } else if (st == LC_OK) {
        if (reply && r->elements > 1) {
            *reply = r->element[1];
            r->element[1] = NULL;
        }
        if (release && --lock->count == 0)
            drop_hold(lock);
    } else if (st == LC_EREDIS && release) {
        /* The script failed before it released (a body error): release on its own. */
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", lc_errmsg());
        release_locked(lock);
        lc_fail(st, "%s", msg);
    } else if (release && st == LC_EIO) {
        release_unknown(lock);
    } else if (release && lock->count == 1) {
        drop_hold(lock); /* renewal has stopped: if the hold is still there, its lease runs out */
    }
out:
    if (r)
        freeReplyObject(r);
    lc_lock_note(lock, st);
    pthread_mutex_unlock(&lock->mu);
    if (k != kv) {
        free(k);
        free(klen);
        free(a);
        free(alen);
    }
    return st;
}
