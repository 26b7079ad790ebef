/*
 * seglock — a segment's lock for the order path: lockcore's lc_anylock, whichever backend the
 * loop's locks live on (see seglock.h). The backend is picked in one place (backend_of); every
 * other call goes through lockcore's table. This file is only the adapter (the owner's
 * callbacks, the loop's list of seglocks to close); all lock logic is lockcore's.
 */
#include "seglock.h"

#include <stdlib.h>

struct seglock {
    lc_anylock *lock;
    seglock_acquired_fn acb;
    seglock_eval_fn ecb;
    void *arg;
    int freeing;
    struct seglock **live, *prev, *next; /* in the loop's list (seglock_close_all) */
};

/* The one place that names the backends: where the loop's locks live (--lock-mysql,
 * --lock-zookeeper, --lock-redis, else the data Redis itself). */
static void backend_of(const struct seglock_env *env, lc_anylock_backend *b)
{
    *b = (lc_anylock_backend){.ops = &lc_anylock_redis, .client = env->data, .store = env->data};
    if (env->mysql) {
        b->ops = &lc_anylock_mysql;
        b->client = env->mysql;
    } else if (env->zk) {
        b->ops = &lc_anylock_zk;
        b->client = env->zk;
    } else if (env->n > 0) {
        b->ops = &lc_anylock_redlock;
        b->client = NULL;
        b->nodes = env->nodes;
        b->n = env->n;
        b->node_timeout_ms = env->node_timeout_ms;
    }
}

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
        lc_anylock_close(sl->lock); /* may call back into the owner, which may free sl */
    }
}

lc_status seglock_new(const struct seglock_env *env, const char *name, const lc_lock_opts *lo,
                      struct seglock **out)
{
    *out = NULL;
    struct seglock *sl = calloc(1, sizeof(*sl));
    if (!sl)
        return LC_ENOMEM;
    lc_anylock_backend b;
    backend_of(env, &b);
    lc_status st = lc_anylock_new(&b, name, lo, &sl->lock);
    if (st != LC_OK) {
        free(sl);
        return st;
    }
    if (b.ops->closed_with_nodes && env->live) {
        sl->live = env->live;
        sl->next = *env->live;
        if (sl->next)
            sl->next->prev = sl;
        *env->live = sl;
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
    lc_anylock_free(sl->lock); /* an operation in flight ends with LC_ESTATE from here */
    free(sl);
}

const char *seglock_errmsg(const struct seglock *sl)
{
    return lc_anylock_errmsg(sl->lock);
}

int seglock_lost(const struct seglock *sl)
{
    return lc_anylock_lost(sl->lock);
}

static void on_lock_acquired(lc_anylock *l, lc_status st, const redisReply *values, void *arg)
{
    (void)l;
    struct seglock *sl = arg;
    seglock_acquired_fn cb = sl->acb;
    sl->acb = NULL;
    cb(sl, st, values, sl->arg);
}

lc_status seglock_acquire(struct seglock *sl, int wait_ms, int nread, const char *const *reads,
                          seglock_acquired_fn cb, void *arg)
{
    if (sl->acb)
        return LC_ESTATE;
    sl->acb = cb;
    sl->arg = arg;
    lc_status st = lc_anylock_acquire(sl->lock, wait_ms, nread, reads, on_lock_acquired, sl);
    if (st != LC_OK)
        sl->acb = NULL;
    return st;
}

static void on_lock_evaluated(lc_anylock *l, lc_status st, const redisReply *reply, void *arg)
{
    (void)l;
    struct seglock *sl = arg;
    seglock_eval_fn cb = sl->ecb;
    sl->ecb = NULL;
    cb(sl, st, reply, sl->arg);
}

lc_status seglock_eval(struct seglock *sl, const lc_script *script, int flags, int nkeys,
                       const char **keys, int nargs, const char **args, seglock_eval_fn cb,
                       void *arg)
{
    if (sl->ecb || sl->acb)
        return LC_ESTATE;
    sl->ecb = cb;
    sl->arg = arg;
    lc_status st =
        lc_anylock_eval(sl->lock, script, flags, nkeys, keys, nargs, args, on_lock_evaluated, sl);
    if (st != LC_OK)
        sl->ecb = NULL;
    return st;
}

lc_status seglock_eval_detached(struct seglock *sl, const lc_script *script, int nkeys,
                                const char **keys, int nargs, const char **args,
                                lc_async_reply_fn cb, void *arg)
{
    return lc_anylock_eval_detached(sl->lock, script, nkeys, keys, nargs, args, cb, arg);
}
