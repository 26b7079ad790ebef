/*
 * seglock — a segment's lock for the order path: lockcore's lc_async_lock, or its Redlock or
 * MySQL lock or ZooKeeper lock with the stock read and the commit fenced on the data Redis (see
 * seglock.h). This file is only the adapter; all lock logic is lockcore's.
 */
#include "seglock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The MGET of the stock after a Redlock acquire, detachable: freed by its reply callback. */
struct mget {
    struct seglock *sl; /* NULL once the seglock was freed */
};

struct seglock {
    struct seglock_env env;
    lc_async_lock *plain; /* without --lock-redis */
    lc_async_redlock *rl; /* with it */
    lc_mysql_lock *my;    /* with --lock-mysql */
    lc_zk_lock *zk;       /* with --lock-zookeeper */
    lc_redlock_opts ro;
    char *name, *seen; /* seen: "<name>:seen" on the data Redis */
    seglock_acquired_fn acb;
    seglock_eval_fn ecb;
    void *arg;
    int nread;
    char **reads;
    struct mget *pending;
    char why[256]; /* the last operation's failure (seglock_errmsg) */
    int freeing;
    struct seglock **live, *prev, *next; /* in the loop's list of live Redlock seglocks */
};

static void unlink_live(struct seglock *sl)
{
    if (!sl->live)
        return;
    if (sl->prev)
        sl->prev->next = sl->next;
    else
        *sl->live = sl->next;
    if (sl->next)
        sl->next->prev = sl->prev;
    sl->live = NULL;
    sl->prev = sl->next = NULL;
}

void seglock_close_all(struct seglock **live)
{
    while (*live) {
        struct seglock *sl = *live;
        unlink_live(sl);
        lc_async_redlock *rl = sl->rl;
        lc_zk_lock *zk = sl->zk;
        sl->rl = NULL;
        sl->zk = NULL;
        lc_async_redlock_free(rl); /* may call back into the owner, which may free sl */
        lc_zk_lock_free(zk);
    }
}

static void free_reads(struct seglock *sl)
{
    for (int i = 0; i < sl->nread; i++)
        free(sl->reads[i]);
    free(sl->reads);
    sl->reads = NULL;
    sl->nread = 0;
}

lc_status seglock_new(const struct seglock_env *env, const char *name, const lc_lock_opts *lo,
                      struct seglock **out)
{
    *out = NULL;
    struct seglock *sl = calloc(1, sizeof(*sl));
    if (!sl)
        return LC_ENOMEM;
    sl->env = *env;
    lc_status st;
    if (env->n == 0 && !env->mysql && !env->zk) {
        st = lc_async_lock_new(env->data, name, lo, NULL, NULL, &sl->plain);
    } else {
        lc_redlock_opts_init(&sl->ro);
        sl->ro.lease_ms = lo->lease_ms;
        sl->ro.watchdog = lo->watchdog;
        sl->ro.max_hold_ms = lo->max_hold_ms;
        sl->ro.node_timeout_ms = env->node_timeout_ms;
        size_t len = strlen(name);
        sl->name = strdup(name);
        sl->seen = malloc(len + sizeof(":seen"));
        if (!sl->name || !sl->seen) {
            seglock_free(sl);
            return LC_ENOMEM;
        }
        memcpy(sl->seen, name, len);
        memcpy(sl->seen + len, ":seen", sizeof(":seen"));
        if (env->mysql)
            st = lc_mysql_lock_new(env->mysql, name, NULL, NULL, &sl->my);
        else if (env->zk)
            st = lc_zk_lock_new(env->zk, name, NULL, NULL, &sl->zk);
        else
            st = lc_async_redlock_new(env->n, env->nodes, name, &sl->ro, NULL, NULL, &sl->rl);
        if (st == LC_OK && (sl->rl || sl->zk) && env->live) {
            sl->live = env->live;
            sl->next = *env->live;
            if (sl->next)
                sl->next->prev = sl;
            *env->live = sl;
        }
    }
    if (st != LC_OK) {
        seglock_free(sl);
        return st;
    }
    *out = sl;
    return LC_OK;
}

void seglock_free(struct seglock *sl)
{
    if (!sl || sl->freeing)
        return;
    sl->freeing = 1;
    unlink_live(sl);
    if (sl->pending) {
        /* The MGET after the acquire: its reply will be dropped; the hold goes with rl. */
        seglock_acquired_fn cb = sl->acb;
        void *arg = sl->arg;
        sl->pending->sl = NULL;
        sl->pending = NULL;
        sl->acb = NULL;
        if (cb)
            cb(sl, LC_ESTATE, NULL, arg);
    }
    lc_async_lock_free(sl->plain);
    lc_async_redlock_free(sl->rl);
    lc_mysql_lock_free(sl->my);
    lc_zk_lock_free(sl->zk);
    free_reads(sl);
    free(sl->name);
    free(sl->seen);
    free(sl);
}

/* Keeps msg as the message of the operation ending now ("" when it succeeded). */
static void set_why(struct seglock *sl, lc_status st, const char *msg)
{
    snprintf(sl->why, sizeof(sl->why), "%s", st == LC_OK || !msg ? "" : msg);
}

const char *seglock_errmsg(const struct seglock *sl)
{
    return sl->why;
}

int seglock_lost(const struct seglock *sl)
{
    return sl->plain ? lc_async_lock_lost(sl->plain)
           : sl->rl  ? lc_async_redlock_lost(sl->rl)
           : sl->my  ? lc_mysql_lock_lost(sl->my)
           : sl->zk  ? lc_zk_lock_lost(sl->zk)
                     : 1;
}

/* Gives the hold back at once (in the background) and takes a fresh handle for the next try;
 * none once seglock_close_all has closed this seglock. */
static void replace_redlock(struct seglock *sl)
{
    if (sl->my) { /* freeing it closes its session, which frees the lock on the server */
        lc_mysql_lock *old = sl->my;
        sl->my = NULL;
        lc_mysql_lock_new(sl->env.mysql, sl->name, NULL, NULL, &sl->my);
        lc_mysql_lock_free(old);
        return;
    }
    lc_async_redlock *old = sl->rl;
    lc_zk_lock *oldzk = sl->zk;
    sl->rl = NULL;
    sl->zk = NULL;
    if ((sl->live || !sl->env.live) && oldzk)
        lc_zk_lock_new(sl->env.zk, sl->name, NULL, NULL, &sl->zk);
    else if (sl->live || !sl->env.live)
        lc_async_redlock_new(sl->env.n, sl->env.nodes, sl->name, &sl->ro, NULL, NULL, &sl->rl);
    lc_async_redlock_free(old);
    lc_zk_lock_free(oldzk);
}

/* ---- acquire ---- */

static void on_plain_acquired(lc_async_lock *l, lc_status st, uint64_t fence, const redisReply *v,
                              void *arg)
{
    (void)fence;
    struct seglock *sl = arg;
    seglock_acquired_fn cb = sl->acb;
    sl->acb = NULL;
    set_why(sl, st, lc_async_lock_errmsg(l));
    cb(sl, st, v, sl->arg);
}

static void on_mget(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct mget *m = arg;
    struct seglock *sl = m->sl;
    free(m);
    if (!sl)
        return;
    sl->pending = NULL;
    seglock_acquired_fn cb = sl->acb;
    sl->acb = NULL;
    free_reads(sl);
    if (st == LC_OK && (!r || r->type != REDIS_REPLY_ARRAY)) {
        st = LC_EREDIS;
        errstr = "MGET of the stock: unexpected reply";
    }
    set_why(sl, st, errstr);
    if (st != LC_OK) {
        /* The lock is held but the stock is unknown: give the hold back, and report the
         * acquire as failed. */
        replace_redlock(sl);
        cb(sl, st == LC_ESTATE ? LC_ESTATE : LC_EIO, NULL, sl->arg);
        return;
    }
    cb(sl, LC_OK, r, sl->arg);
}

/* The Redlock, MySQL or ZooKeeper lock answered its acquire (why: its message): the MGET of
 * the reads. */
static void remote_acquired(struct seglock *sl, lc_status st, const char *why)
{
    if (st == LC_OK && sl->nread > 0) {
        struct mget *m = malloc(sizeof(*m));
        const char **argv = malloc(sizeof(*argv) * (size_t)(sl->nread + 1));
        lc_status sst = LC_ENOMEM;
        if (m && argv) {
            m->sl = sl;
            argv[0] = "MGET";
            for (int i = 0; i < sl->nread; i++)
                argv[1 + i] = sl->reads[i];
            sst = lc_async_command(sl->env.data, sl->nread + 1, argv, NULL, on_mget, m);
        }
        /* not started: the message just recorded, or no memory to start it */
        set_why(sl, sst, m && argv ? lc_errmsg() : "out of memory");
        free(argv);
        if (sst == LC_OK) {
            sl->pending = m;
            return;
        }
        free(m);
        st = sst;
        replace_redlock(sl);
    } else {
        set_why(sl, st, why);
    }
    seglock_acquired_fn cb = sl->acb;
    sl->acb = NULL;
    free_reads(sl);
    cb(sl, st, NULL, sl->arg);
}

static void on_rl_acquired(lc_async_redlock *rl, lc_status st, uint64_t fence, void *arg)
{
    (void)fence;
    remote_acquired(arg, st, lc_async_redlock_errmsg(rl));
}

static void on_my_acquired(lc_mysql_lock *l, lc_status st, uint64_t fence, void *arg)
{
    (void)fence;
    remote_acquired(arg, st, lc_mysql_lock_errmsg(l));
}

static void on_zk_acquired(lc_zk_lock *zk, lc_status st, uint64_t fence, void *arg)
{
    (void)fence;
    remote_acquired(arg, st, lc_zk_lock_errmsg(zk));
}

lc_status seglock_acquire(struct seglock *sl, int wait_ms, int nread, const char *const *reads,
                          seglock_acquired_fn cb, void *arg)
{
    if (sl->acb || sl->pending)
        return LC_ESTATE;
    sl->acb = cb;
    sl->arg = arg;
    lc_status st;
    if (sl->plain) {
        st = lc_async_lock_acquire(sl->plain, wait_ms, nread, reads, NULL, on_plain_acquired, sl);
    } else if (!sl->rl && !sl->my && !sl->zk) {
        st = LC_ESTATE;
    } else {
        sl->reads = nread > 0 ? calloc((size_t)nread, sizeof(*sl->reads)) : NULL;
        for (int i = 0; i < nread && sl->reads; i++, sl->nread++)
            if (!(sl->reads[i] = strdup(reads[i])))
                break;
        if (nread > 0 && sl->nread != nread)
            st = LC_ENOMEM;
        else if (sl->my)
            st = lc_mysql_lock_acquire(sl->my, wait_ms, on_my_acquired, sl);
        else if (sl->zk)
            st = lc_zk_lock_acquire(sl->zk, wait_ms, on_zk_acquired, sl);
        else
            st = lc_async_redlock_acquire(sl->rl, wait_ms, on_rl_acquired, sl);
        if (st != LC_OK)
            free_reads(sl);
    }
    if (st != LC_OK)
        sl->acb = NULL;
    return st;
}

/* ---- commit ---- */

/* Any kind's fenced eval answered (why: the lock's message): the owner's callback. */
static void eval_done(struct seglock *sl, lc_status st, const redisReply *r, const char *why)
{
    seglock_eval_fn cb = sl->ecb;
    sl->ecb = NULL;
    set_why(sl, st, why);
    cb(sl, st, r, sl->arg);
}

static void on_plain_eval(lc_async_lock *l, lc_status st, const redisReply *r, void *arg)
{
    eval_done(arg, st, r, lc_async_lock_errmsg(l));
}

static void on_rl_eval(lc_async_redlock *rl, lc_status st, const redisReply *r, void *arg)
{
    eval_done(arg, st, r, lc_async_redlock_errmsg(rl));
}

static void on_my_eval(lc_mysql_lock *l, lc_status st, const redisReply *r, void *arg)
{
    eval_done(arg, st, r, lc_mysql_lock_errmsg(l));
}

static void on_zk_eval(lc_zk_lock *zk, lc_status st, const redisReply *r, void *arg)
{
    eval_done(arg, st, r, lc_zk_lock_errmsg(zk));
}

lc_status seglock_eval(struct seglock *sl, const lc_script *script, int flags, int nkeys,
                       const char **keys, int nargs, const char **args, seglock_eval_fn cb,
                       void *arg)
{
    if (sl->ecb || sl->acb)
        return LC_ESTATE;
    sl->ecb = cb;
    sl->arg = arg;
    lc_status st = !sl->plain && !sl->rl && !sl->my && !sl->zk ? LC_ESTATE
                   : sl->my ? lc_mysql_lock_eval(sl->my, sl->env.data, script, sl->seen, flags,
                                                 nkeys, (const char *const *)keys, NULL, nargs,
                                                 (const char *const *)args, NULL, on_my_eval, sl)
                   : sl->zk ? lc_zk_lock_eval(sl->zk, sl->env.data, script, sl->seen, flags, nkeys,
                                              (const char *const *)keys, NULL, nargs,
                                              (const char *const *)args, NULL, on_zk_eval, sl)
                   : sl->plain
                       ? lc_async_eval(sl->plain, script, flags, nkeys, keys, NULL, nargs, args,
                                       NULL, on_plain_eval, sl)
                       : lc_async_redlock_eval(sl->rl, sl->env.data, script, sl->seen, flags, nkeys,
                                               (const char *const *)keys, NULL, nargs,
                                               (const char *const *)args, NULL, on_rl_eval, sl);
    if (st != LC_OK)
        sl->ecb = NULL;
    return st;
}

/* A detached Redlock commit: the token-fenced script's {0, seen} / {1, result} as the callback's
 * LC_ELOST / LC_OK, as lc_async_eval_detached answers. The lock clients outlive the data
 * client's callbacks (worker.c frees the data client first), the seglock may not: what a
 * refusal needs is copied. */
struct detached {
    lc_async_reply_fn cb;
    void *arg;
    struct seglock_env env; /* the lock's kind: mysql, zk, else the Redlock nodes */
    uint64_t fence;
    char name[];
};

static void on_detached(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct detached *d = arg;
    const redisReply *body = NULL;
    lc_status parsed = st == LC_OK ? lc_token_reply(r, &body) : st;
    if (st == LC_OK && parsed == LC_EREDIS)
        errstr = "commit: unexpected reply";
    else if (parsed == LC_ELOST)
        errstr = "lost (a later holder's token was seen): nothing ran";
    /* issue 29 item 9: a token source behind the seen token (restored, rebuilt, switched) is
     * raised past it, so the next holder is accepted (lc_*_lock_eval do it on their own path) */
    uint64_t seen = parsed == LC_ELOST ? lc_token_reply_seen(r) : 0;
    if (seen && seen >= d->fence) {
        if (d->env.mysql)
            lc_mysql_client_raise(d->env.mysql, d->name, seen);
        else if (d->env.zk)
            lc_zk_client_raise(d->env.zk, seen);
        else if (d->env.n > 0)
            lc_async_redlock_raise(d->env.n, d->env.nodes, d->name, seen);
    }
    lc_async_reply_fn cb = d->cb;
    void *cb_arg = d->arg;
    free(d);
    cb(parsed, body, errstr, cb_arg);
}

lc_status seglock_eval_detached(struct seglock *sl, const lc_script *script, int nkeys,
                                const char **keys, int nargs, const char **args,
                                lc_async_reply_fn cb, void *arg)
{
    if (sl->plain)
        return lc_async_eval_detached(sl->plain, script, nkeys, keys, NULL, nargs, args, NULL, cb,
                                      arg);
    if (sl->zk && (!lc_zk_lock_held(sl->zk) || lc_zk_lock_lost(sl->zk)))
        return lc_zk_lock_held(sl->zk) ? LC_ELOST : LC_ENOTHELD;
    if (sl->zk && !lc_zk_client_connected(sl->env.zk))
        return LC_EIO; /* the session is suspect: nothing is sent (lc_zk_lock_eval's rule) */
    if (sl->zk && lc_zk_client_validity_ms(sl->env.zk) <= 0)
        return LC_ELOST; /* no answer for a session timeout by our clock: lc_zk_lock_eval's rule */
    int held = sl->zk   ? 1
               : sl->rl ? lc_async_redlock_held(sl->rl)
               : sl->my ? lc_mysql_lock_held(sl->my)
                        : 0;
    if (!held)
        return LC_ENOTHELD;
    uint64_t fence = sl->zk   ? lc_zk_lock_fence(sl->zk)
                     : sl->rl ? lc_async_redlock_fence(sl->rl)
                              : lc_mysql_lock_fence(sl->my);
    const char *owner = sl->zk   ? lc_zk_lock_owner(sl->zk)
                        : sl->rl ? lc_async_redlock_owner(sl->rl)
                                 : lc_mysql_lock_owner(sl->my);
    size_t nlen = strlen(sl->name);
    struct detached *d = malloc(sizeof(*d) + nlen + 1);
    if (!d)
        return LC_ENOMEM;
    d->cb = cb;
    d->arg = arg;
    d->env = sl->env;
    d->fence = fence;
    memcpy(d->name, sl->name, nlen + 1);
    lc_status st = lc_async_token_script(sl->env.data, script, sl->seen, fence, owner, nkeys,
                                         (const char *const *)keys, NULL, nargs,
                                         (const char *const *)args, NULL, on_detached, d);
    if (st != LC_OK)
        free(d);
    return st;
}
