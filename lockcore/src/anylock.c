/*
 * anylock — one asynchronous lock whichever backend holds it (lockcore_anylock.h): the handle
 * that calls through a backend's table, the Redis backend's table (lc_async_lock), and the one
 * fenced-eval helper (anylock_internal.h) that the token-fenced backends (Redlock, MySQL,
 * ZooKeeper) commit with. A token-fenced backend's acquire is followed here by the MGET of the
 * keys to read on the data store; a read that fails gives the hold back (the handle is freed,
 * which releases it in the background, and a fresh one made for the next try).
 */
#include "anylock_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"

/* ---- the fenced-eval helper ---- */

struct lc_fenced {
    lc_fenced_fn done;
    void *owner; /* NULL once detached */
};

static void on_fenced_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    lc_fenced *f = arg;
    lc_fenced_fn done = f->done;
    void *owner = f->owner;
    free(f);
    if (!owner)
        return;
    lc_fenced_result res = {st, st == LC_OK, NULL, 0, errstr ? errstr : ""};
    if (st == LC_OK)
        res.st = lc_token_reply(r, &res.body);
    if (res.st == LC_ELOST)
        res.seen = lc_token_reply_seen(r);
    done(owner, &res);
}

lc_status lc_fenced_send(lc_async_client *store, const lc_script *script, const char *seen_key,
                         uint64_t token, const char *owner_id, int nkeys, const char *const *keys,
                         const size_t *keylens, int nargs, const char *const *args,
                         const size_t *arglens, lc_fenced_fn done, void *owner, lc_fenced **out)
{
    *out = NULL;
    lc_fenced *f = malloc(sizeof(*f));
    if (!f)
        return lc_fail(LC_ENOMEM, "fenced eval: out of memory");
    *f = (lc_fenced){done, owner};
    lc_status st = lc_async_token_script(store, script, seen_key, token, owner_id, nkeys, keys,
                                         keylens, nargs, args, arglens, on_fenced_reply, f);
    if (st != LC_OK) {
        free(f);
        return st;
    }
    *out = f;
    return LC_OK;
}

void lc_fenced_detach(lc_fenced *f)
{
    if (f)
        f->owner = NULL;
}

void lc_fenced_why(char *why, size_t len, const char *what, const char *name, int name_max,
                   const lc_fenced_result *res, uint64_t fence)
{
    if (res->answered && res->st == LC_EREDIS)
        snprintf(why, len,
                 "%s %.*s: unexpected reply (script not made by lc_token_fenced_script_new?)", what,
                 name_max, name);
    else if (res->st == LC_ELOST)
        snprintf(why, len,
                 "%s %.*s: lost (the store has seen token %" PRIu64 ", ours is %" PRIu64 ")", what,
                 name_max, name, res->seen, fence);
    else if (res->st != LC_OK)
        snprintf(why, len, "%s %.*s: data store: %s", what, name_max, name, res->errstr);
}

/* ---- the handle ---- */

/* The MGET of the keys after a token-fenced acquire, detachable: freed by its reply callback. */
struct anylock_mget {
    lc_anylock *al; /* NULL once the handle was freed */
};

struct lc_anylock {
    lc_anylock_backend b;
    lc_lock_opts opts;
    void *h;           /* the backend's handle; NULL once closed (or not remade) */
    char *name, *seen; /* token-fenced only (else NULL): seen is "<name>:seen" on the data
                          store, in name's block */
    lc_anylock_acquire_fn acb;
    lc_anylock_eval_fn ecb;
    void *arg;
    int nread;
    char **reads;
    struct anylock_mget *pending;
    char why[256]; /* the last operation's failure (lc_anylock_errmsg) */
    int freeing, closed;
};

static void free_reads(lc_anylock *al)
{
    for (int i = 0; i < al->nread; i++)
        free(al->reads[i]);
    free(al->reads);
    al->reads = NULL;
    al->nread = 0;
}

/* Keeps msg as the message of the operation ending now ("" when it succeeded). */
static void set_why(lc_anylock *al, lc_status st, const char *msg)
{
    snprintf(al->why, sizeof(al->why), "%s", st == LC_OK || !msg ? "" : msg);
}

lc_status lc_anylock_new(const lc_anylock_backend *b, const char *name, const lc_lock_opts *opts,
                         lc_anylock **out)
{
    *out = NULL;
    if (!b || !b->ops || !name || !opts)
        return lc_fail(LC_EINVAL, "anylock: bad argument");
    lc_anylock *al = calloc(1, sizeof(*al));
    if (!al)
        return lc_fail(LC_ENOMEM, "anylock: out of memory");
    if (b->ops->token_fenced) {
        /* Only a token-fenced backend names the lock again (a fresh handle, the detached
         * commit) and commits against "<name>:seen": one block holds both. The lock on the
         * data store (the default, on every order) needs neither. */
        size_t len = strlen(name);
        al->name = malloc(2 * len + sizeof(":seen") + 1);
        if (!al->name) {
            free(al);
            return lc_fail(LC_ENOMEM, "anylock: out of memory");
        }
        memcpy(al->name, name, len + 1);
        al->seen = al->name + len + 1;
        memcpy(al->seen, name, len);
        memcpy(al->seen + len, ":seen", sizeof(":seen"));
    }
    al->b = *b;
    al->opts = *opts;
    lc_status st = b->ops->make(&al->b, name, opts, &al->h);
    if (st != LC_OK) {
        lc_anylock_free(al);
        return st;
    }
    *out = al;
    return LC_OK;
}

void lc_anylock_free(lc_anylock *al)
{
    if (!al || al->freeing)
        return;
    al->freeing = 1;
    if (al->pending) {
        /* The MGET after the acquire: its reply will be dropped; the hold goes with h. */
        lc_anylock_acquire_fn cb = al->acb;
        void *arg = al->arg;
        al->pending->al = NULL;
        al->pending = NULL;
        al->acb = NULL;
        if (cb)
            cb(al, LC_ESTATE, NULL, arg);
    }
    if (al->h)
        al->b.ops->free(al->h);
    free_reads(al);
    free(al->name); /* and seen, in the same block */
    free(al);
}

void lc_anylock_close(lc_anylock *al)
{
    if (!al || !al->b.ops->closed_with_nodes)
        return;
    void *h = al->h;
    al->h = NULL;
    al->closed = 1;
    if (h)
        al->b.ops->free(h); /* may call back into the owner, which may free al */
}

/* Gives the hold back at once (in the background) and takes a fresh handle for the next try;
 * none once closed. */
static void replace_handle(lc_anylock *al)
{
    void *old = al->h;
    al->h = NULL;
    if (!al->closed)
        al->b.ops->make(&al->b, al->name, &al->opts, &al->h);
    if (old)
        al->b.ops->free(old);
}

/* ---- acquire ---- */

static void on_anylock_mget(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct anylock_mget *m = arg;
    lc_anylock *al = m->al;
    free(m);
    if (!al)
        return;
    al->pending = NULL;
    lc_anylock_acquire_fn cb = al->acb;
    al->acb = NULL;
    free_reads(al);
    if (st == LC_OK && (!r || r->type != REDIS_REPLY_ARRAY)) {
        st = LC_EREDIS;
        errstr = "MGET of the stock: unexpected reply";
    }
    set_why(al, st, errstr);
    if (st != LC_OK) {
        /* The lock is held but the keys are unknown: give the hold back, and report the
         * acquire as failed. */
        replace_handle(al);
        cb(al, st == LC_ESTATE ? LC_ESTATE : LC_EIO, NULL, al->arg);
        return;
    }
    cb(al, LC_OK, r, al->arg);
}

/* A token-fenced backend took the lock: the MGET of the reads on the store. */
static void read_after_acquire(lc_anylock *al)
{
    struct anylock_mget *m = malloc(sizeof(*m));
    const char **argv = malloc(sizeof(*argv) * (size_t)(al->nread + 1));
    lc_status st = LC_ENOMEM;
    if (m && argv) {
        m->al = al;
        argv[0] = "MGET";
        for (int i = 0; i < al->nread; i++)
            argv[1 + i] = al->reads[i];
        st = lc_async_command(al->b.store, al->nread + 1, argv, NULL, on_anylock_mget, m);
    }
    /* not started: the message just recorded, or no memory to start it */
    set_why(al, st, m && argv ? lc_errmsg() : "out of memory");
    free(argv);
    if (st == LC_OK) {
        al->pending = m;
        return;
    }
    free(m);
    replace_handle(al);
    lc_anylock_acquire_fn cb = al->acb;
    al->acb = NULL;
    free_reads(al);
    cb(al, st, NULL, al->arg);
}

void lc_anylock_acquired(lc_anylock *al, lc_status st, const redisReply *values, const char *why)
{
    if (st == LC_OK && al->nread > 0) {
        read_after_acquire(al);
        return;
    }
    set_why(al, st, why);
    lc_anylock_acquire_fn cb = al->acb;
    al->acb = NULL;
    free_reads(al);
    cb(al, st, values, al->arg);
}

lc_status lc_anylock_acquire(lc_anylock *al, int wait_ms, int nread, const char *const *reads,
                             lc_anylock_acquire_fn cb, void *arg)
{
    if (al->acb || al->pending)
        return LC_ESTATE;
    al->acb = cb;
    al->arg = arg;
    lc_status st;
    if (!al->h) {
        st = LC_ESTATE;
    } else if (!al->b.ops->token_fenced) {
        st = al->b.ops->acquire(al->h, wait_ms, nread, reads, al);
    } else {
        al->reads = nread > 0 ? calloc((size_t)nread, sizeof(*al->reads)) : NULL;
        for (int i = 0; i < nread && al->reads; i++, al->nread++)
            if (!(al->reads[i] = strdup(reads[i])))
                break;
        st = nread > 0 && al->nread != nread ? LC_ENOMEM
                                             : al->b.ops->acquire(al->h, wait_ms, 0, NULL, al);
        if (st != LC_OK)
            free_reads(al);
    }
    if (st != LC_OK)
        al->acb = NULL;
    return st;
}

/* ---- commit and release ---- */

void lc_anylock_evaluated(lc_anylock *al, lc_status st, const redisReply *reply, const char *why)
{
    lc_anylock_eval_fn cb = al->ecb;
    al->ecb = NULL;
    set_why(al, st, why);
    if (cb)
        cb(al, st, reply, al->arg);
}

lc_status lc_anylock_eval(lc_anylock *al, const lc_script *script, int flags, int nkeys,
                          const char **keys, int nargs, const char **args, lc_anylock_eval_fn cb,
                          void *arg)
{
    if (al->ecb || al->acb)
        return LC_ESTATE;
    al->ecb = cb;
    al->arg = arg;
    lc_status st =
        !al->h ? LC_ESTATE
               : al->b.ops->eval(al->h, al->b.store, al->seen, script, flags, nkeys,
                                 (const char *const *)keys, nargs, (const char *const *)args, al);
    if (st != LC_OK)
        al->ecb = NULL;
    return st;
}

lc_status lc_anylock_release(lc_anylock *al, lc_anylock_eval_fn cb, void *arg)
{
    if (al->ecb || al->acb || al->pending || !al->h)
        return LC_ESTATE;
    al->ecb = cb;
    al->arg = arg;
    lc_status st = al->b.ops->release(al->h, al);
    if (st != LC_OK)
        al->ecb = NULL;
    return st;
}

/* A detached token-fenced commit: the script's {0, seen} / {1, result} as the callback's
 * LC_ELOST / LC_OK, as lc_async_eval_detached answers. The backend's clients outlive the data
 * store's callbacks, the handle may not: what a refusal needs is copied. */
struct anylock_detached {
    lc_async_reply_fn cb;
    void *arg;
    lc_anylock_backend b;
    uint64_t fence;
    char name[];
};

static void on_anylock_detached(void *owner, const lc_fenced_result *res)
{
    struct anylock_detached *d = owner;
    const char *errstr = res->errstr;
    if (res->answered && res->st == LC_EREDIS)
        errstr = "commit: unexpected reply";
    else if (res->st == LC_ELOST)
        errstr = "lost (a later holder's token was seen): nothing ran";
    /* issue 29 item 9: a token source behind the seen token (restored, rebuilt, switched) is
     * raised past it, so the next holder is accepted (the backends' evals do it on their own
     * path) */
    if (res->seen && res->seen >= d->fence)
        d->b.ops->raise(&d->b, d->name, res->seen);
    lc_async_reply_fn cb = d->cb;
    void *cb_arg = d->arg;
    free(d);
    cb(res->st, res->body, errstr, cb_arg);
}

lc_status lc_anylock_eval_detached(lc_anylock *al, const lc_script *script, int nkeys,
                                   const char **keys, int nargs, const char **args,
                                   lc_async_reply_fn cb, void *arg)
{
    if (!al->b.ops->token_fenced)
        return al->h ? al->b.ops->eval_detached(al->h, script, nkeys, keys, nargs, args, cb, arg)
                     : LC_ENOTHELD;
    if (!al->h)
        return LC_ENOTHELD;
    lc_status st = al->b.ops->detach_check(&al->b, al->h);
    if (st != LC_OK)
        return st;
    size_t nlen = strlen(al->name);
    struct anylock_detached *d = malloc(sizeof(*d) + nlen + 1);
    if (!d)
        return LC_ENOMEM;
    d->cb = cb;
    d->arg = arg;
    d->b = al->b;
    d->fence = al->b.ops->fence(al->h);
    memcpy(d->name, al->name, nlen + 1);
    lc_fenced *f;
    st = lc_fenced_send(al->b.store, script, al->seen, d->fence, al->b.ops->owner(al->h), nkeys,
                        (const char *const *)keys, NULL, nargs, (const char *const *)args, NULL,
                        on_anylock_detached, d, &f);
    if (st != LC_OK)
        free(d);
    return st;
}

int lc_anylock_held(const lc_anylock *al)
{
    return al && al->h ? al->b.ops->held(al->h) : 0;
}

int lc_anylock_lost(const lc_anylock *al)
{
    return al && al->h ? al->b.ops->lost(al->h) : 1;
}

uint64_t lc_anylock_fence(const lc_anylock *al)
{
    return al && al->h ? al->b.ops->fence(al->h) : 0;
}

const char *lc_anylock_kind(const lc_anylock *al)
{
    return al ? al->b.ops->kind : "";
}

const char *lc_anylock_errmsg(const lc_anylock *al)
{
    return al ? al->why : "";
}

/* ---- the Redis backend: lc_async_lock on the data store (one Redis or a Cluster) ---- */

static lc_status redis_make(const lc_anylock_backend *b, const char *name, const lc_lock_opts *opts,
                            void **h)
{
    return lc_async_lock_new(b->client, name, opts, NULL, NULL, (lc_async_lock **)h);
}

static void redis_free(void *h)
{
    lc_async_lock_free(h);
}

static void on_redis_acquired(lc_async_lock *l, lc_status st, uint64_t fence, const redisReply *v,
                              void *arg)
{
    (void)fence;
    lc_anylock_acquired(arg, st, v, lc_async_lock_errmsg(l));
}

static lc_status redis_acquire(void *h, int wait_ms, int nread, const char *const *reads,
                               lc_anylock *al)
{
    return lc_async_lock_acquire(h, wait_ms, nread, reads, NULL, on_redis_acquired, al);
}

static void on_redis_released(lc_async_lock *l, lc_status st, void *arg)
{
    lc_anylock_evaluated(arg, st, NULL, lc_async_lock_errmsg(l));
}

static lc_status redis_release(void *h, lc_anylock *al)
{
    return lc_async_release(h, on_redis_released, al);
}

static void on_redis_eval(lc_async_lock *l, lc_status st, const redisReply *r, void *arg)
{
    lc_anylock_evaluated(arg, st, r, lc_async_lock_errmsg(l));
}

static lc_status redis_eval(void *h, lc_async_client *store, const char *seen_key,
                            const lc_script *script, int flags, int nkeys, const char *const *keys,
                            int nargs, const char *const *args, lc_anylock *al)
{
    (void)store; /* the lock lives on the store: the owner fences the script */
    (void)seen_key;
    return lc_async_eval(h, script, flags, nkeys, (const char **)keys, NULL, nargs,
                         (const char **)args, NULL, on_redis_eval, al);
}

static lc_status redis_eval_detached(void *h, const lc_script *script, int nkeys, const char **keys,
                                     int nargs, const char **args, lc_async_reply_fn cb, void *arg)
{
    return lc_async_eval_detached(h, script, nkeys, keys, NULL, nargs, args, NULL, cb, arg);
}

static int redis_held(const void *h)
{
    return lc_async_lock_held(h);
}

static int redis_lost(const void *h)
{
    return lc_async_lock_lost(h);
}

static uint64_t redis_fence(const void *h)
{
    return lc_async_lock_fence(h);
}

static const char *redis_owner(const void *h)
{
    return lc_async_lock_token(h);
}

static const char *redis_errmsg(const void *h)
{
    return lc_async_lock_errmsg(h);
}

const lc_anylock_ops lc_anylock_redis = {
    .kind = "redis",
    .make = redis_make,
    .free = redis_free,
    .acquire = redis_acquire,
    .release = redis_release,
    .eval = redis_eval,
    .held = redis_held,
    .lost = redis_lost,
    .fence = redis_fence,
    .owner = redis_owner,
    .errmsg = redis_errmsg,
    .eval_detached = redis_eval_detached,
};
