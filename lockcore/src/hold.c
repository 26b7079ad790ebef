/*
 * The lock logic shared by the blocking face (lock.c) and the asynchronous face (async_op.c): one
 * owner's hold state (lc_hold), the arguments of every lock script built from it (lc_call), and
 * what each script's reply means for the hold. Neither face builds a script argument or reads a
 * script reply by itself; they only add their own transport (a pooled or multiplexed blocking
 * connection, or a hiredis async context on an event loop) and their own renewal (the watchdog
 * thread, or a loop timer).
 *
 * The handle's hold count is the truth: every script that changes the count in Redis is sent
 * the handle's count and sets Redis' from it. When a reply is lost (LC_EIO once the request was
 * sent) the request may or may not have run: an acquire is then undone (the release script for
 * one hold more than the handle counts) and counts as not taken, a release counts as done.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"
#include "hold_internal.h"
#include "script_internal.h"
#include "scripts.h"

/* ---- the built-in scripts, made once per process ---- */

static lc_script builtin[LC_S_COUNT];
static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;

static void builtin_init(void)
{
    static const char *const src[LC_S_COUNT] = {LC_LUA_ACQUIRE, LC_LUA_RELEASE, LC_LUA_RENEW,
                                                LC_LUA_FORCE, LC_LUA_FENCE_RAISE};
    for (int i = 0; i < LC_S_COUNT; i++)
        lc_script_init_static(&builtin[i], src[i]);
}

/* Static storage over the string literals: nothing to allocate, so nothing can fail, and they
 * live as long as the process (a watchdog thread still running at exit may use them). */
const lc_script *lc_builtin_script(lc_builtin which)
{
    pthread_once(&builtin_once, builtin_init);
    return &builtin[which];
}

/* ---- hold state ---- */

void lc_lock_opts_init(lc_lock_opts *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof(*opts));
    opts->lease_ms = 30000;
    opts->watchdog = 1;
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

lc_status lc_hold_init(lc_hold *h, const char *name, const lc_lock_opts *opts)
{
    memset(h, 0, sizeof(*h));
    if (!name)
        return lc_fail(LC_EINVAL, "lock: NULL name");
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
    h->opts = o;
    h->name_len = len;
    h->name = strdup(name);
    h->fence_key = concat(name, ":fence");
    h->channel = concat(name, ":unlock");
    if (!h->name || !h->fence_key || !h->channel) {
        lc_hold_clear(h);
        return lc_fail(LC_ENOMEM, "lock: out of memory");
    }
    atomic_init(&h->lost, 0);
    lc_token_new(h->token);
    return LC_OK;
}

void lc_hold_clear(lc_hold *h)
{
    free(h->name);
    free(h->fence_key);
    free(h->channel);
    h->name = h->fence_key = h->channel = NULL;
}

void lc_hold_start(lc_hold *h, const lc_acquired *a)
{
    h->fence = a->fence;
    h->count = a->count;
    h->held_since_ms = lc_now_ms();
    atomic_store(&h->lost, 0);
}

void lc_hold_drop(lc_hold *h)
{
    h->count = 0;
    h->fence = 0;
}

lc_status lc_hold_need(const lc_hold *h)
{
    if (h->count == 0)
        return lc_fail(LC_ENOTHELD, "lock %s: not held by this owner", h->name);
    return LC_OK;
}

/* ---- script arguments ---- */

static void put_key(lc_call *c, int i, const char *s, size_t len)
{
    c->keys[i] = s;
    c->keylens[i] = len;
}

static void put_arg(lc_call *c, int i, const char *s)
{
    c->args[i] = s;
    c->arglens[i] = strlen(s);
}

lc_status lc_call_acquire(lc_call *c, const lc_hold *h, int waiting, int nread,
                          const char *const *read_keys, const size_t *read_keylens)
{
    lc_status st = lc_call_init(c, lc_builtin_script(LC_S_ACQUIRE), 2 + nread, 4);
    if (st != LC_OK)
        return st;
    put_key(c, 0, h->name, h->name_len);
    put_key(c, 1, h->fence_key, strlen(h->fence_key));
    for (int i = 0; i < nread; i++)
        put_key(c, 2 + i, read_keys[i], read_keylens ? read_keylens[i] : strlen(read_keys[i]));
    snprintf(c->lease, sizeof(c->lease), "%d", h->opts.lease_ms);
    snprintf(c->held, sizeof(c->held), "%d", h->count);
    put_arg(c, 0, h->token);
    put_arg(c, 1, c->lease);
    put_arg(c, 2, c->held);
    put_arg(c, 3, waiting ? "1" : "0");
    return LC_OK;
}

lc_status lc_call_release(lc_call *c, const lc_hold *h, int holds)
{
    lc_status st = lc_call_init(c, lc_builtin_script(LC_S_RELEASE), 1, 4);
    if (st != LC_OK)
        return st;
    put_key(c, 0, h->name, h->name_len);
    snprintf(c->lease, sizeof(c->lease), "%d", h->opts.lease_ms);
    snprintf(c->held, sizeof(c->held), "%d", holds);
    put_arg(c, 0, h->token);
    put_arg(c, 1, c->lease);
    put_arg(c, 2, h->channel);
    put_arg(c, 3, c->held);
    return LC_OK;
}

lc_status lc_call_renew(lc_call *c, const lc_hold *h, int lease_ms)
{
    lc_status st = lc_call_init(c, lc_builtin_script(LC_S_RENEW), 1, 2);
    if (st != LC_OK)
        return st;
    put_key(c, 0, h->name, h->name_len);
    snprintf(c->lease, sizeof(c->lease), "%d", lease_ms);
    put_arg(c, 0, h->token);
    put_arg(c, 1, c->lease);
    return LC_OK;
}

lc_status lc_call_force(lc_call *c, const char *name, const char *channel)
{
    lc_status st = lc_call_init(c, lc_builtin_script(LC_S_FORCE), 1, 1);
    if (st != LC_OK)
        return st;
    put_key(c, 0, name, strlen(name));
    put_arg(c, 0, channel);
    return LC_OK;
}

lc_status lc_call_raise(lc_call *c, const lc_hold *h, uint64_t fence)
{
    lc_status st = lc_call_init(c, lc_builtin_script(LC_S_RAISE), 2, 2);
    if (st != LC_OK)
        return st;
    put_key(c, 0, h->name, h->name_len);
    put_key(c, 1, h->fence_key, strlen(h->fence_key));
    snprintf(c->fence, sizeof(c->fence), "%" PRIu64, fence);
    put_arg(c, 0, h->token);
    put_arg(c, 1, c->fence);
    return LC_OK;
}

lc_status lc_eval_check(const lc_script *script, int flags, int nkeys, const char **keys, int nargs,
                        const char **args)
{
    if (!script || nkeys < 0 || nargs < 0 || (nkeys && !keys) || (nargs && !args) ||
        (flags & ~LC_EVAL_RELEASE))
        return lc_fail(LC_EINVAL, "eval: bad argument");
    for (int i = 0; i < nkeys; i++)
        if (!keys[i])
            return lc_fail(LC_EINVAL, "eval: key %d is NULL", i);
    for (int i = 0; i < nargs; i++)
        if (!args[i])
            return lc_fail(LC_EINVAL, "eval: arg %d is NULL", i);
    return LC_OK;
}

enum { GUARD_ARGS = 5 };

lc_status lc_call_eval(lc_call *c, const lc_hold *h, const lc_script *script, int release,
                       int nkeys, const char **keys, const size_t *keylens, int nargs,
                       const char **args, const size_t *arglens)
{
    lc_status st = lc_call_init(c, script, nkeys + 1, nargs + GUARD_ARGS);
    if (st != LC_OK)
        return st;
    snprintf(c->fence, sizeof(c->fence), "%" PRIu64, h->fence);
    snprintf(c->lease, sizeof(c->lease), "%d", h->opts.lease_ms);
    snprintf(c->held, sizeof(c->held), "%d", release ? h->count : 0);
    put_key(c, 0, h->name, h->name_len);
    for (int i = 0; i < nkeys; i++)
        put_key(c, 1 + i, keys[i], keylens ? keylens[i] : strlen(keys[i]));
    put_arg(c, 0, h->token);
    put_arg(c, 1, c->fence);
    put_arg(c, 2, c->held);
    put_arg(c, 3, c->lease);
    put_arg(c, 4, h->channel);
    for (int i = 0; i < nargs; i++) {
        c->args[GUARD_ARGS + i] = args[i];
        c->arglens[GUARD_ARGS + i] = arglens ? arglens[i] : strlen(args[i]);
    }
    return LC_OK;
}

/* ---- replies ---- */

lc_status lc_hold_on_acquire(const lc_hold *h, lc_status st, const redisReply *r, int nread,
                             lc_acquired *out)
{
    memset(out, 0, sizeof(*out));
    if (st != LC_OK)
        return st;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return lc_fail(LC_EREDIS, "acquire: unexpected reply from Redis");
    if (r->element[0]->integer == 0) {
        out->pttl = r->element[1]->integer;
        return lc_fail(LC_EBUSY, "lock %s is held by another owner", h->name);
    }
    if (r->elements < 3 + (size_t)nread)
        return lc_fail(LC_EREDIS, "acquire: short reply from Redis");
    out->fence = (uint64_t)r->element[1]->integer;
    out->count = (int)r->element[2]->integer;
    /* A fresh hold: this handle held nothing (the script then made a new hold even if Redis
     * still had a forgotten one of ours), or its previous hold was lost. */
    out->fresh = h->count == 0 || out->count == 1;
    return LC_OK;
}

redisReply *lc_acquire_values(redisReply *r)
{
    for (int i = 0; i < 3; i++)
        freeReplyObject(r->element[i]);
    memmove(r->element, r->element + 3, sizeof(*r->element) * (r->elements - 3));
    r->elements -= 3;
    return r;
}

/* Counts one release whose outcome is unknown (LC_EIO) as done: the caller will not release
 * that hold again. If it did not run, Redis keeps one hold more than the handle until the
 * handle's next call sets the count, or (the last hold) until the lease runs out. */
static void release_unknown(lc_hold *h, int *dropped)
{
    if (h->count == 1) {
        lc_hold_drop(h);
        *dropped = 1;
    } else {
        h->count--;
    }
}

lc_status lc_hold_on_release(lc_hold *h, lc_status st, const redisReply *r, int *dropped)
{
    *dropped = 0;
    if (st == LC_OK && r->type != REDIS_REPLY_INTEGER)
        st = lc_fail(LC_EREDIS, "release: unexpected reply from Redis");
    if (st == LC_OK && r->integer < 0) {
        st = lc_fail(LC_ELOST, "lock %s: lost before release (expired or taken)", h->name);
        lc_hold_drop(h);
        *dropped = 1;
    } else if (st == LC_OK) {
        h->count = (int)r->integer;
        if (h->count == 0) {
            lc_hold_drop(h);
            *dropped = 1;
        }
    } else if (st == LC_EIO) {
        release_unknown(h, dropped);
    } else if (h->count == 1) {
        /* Renewal has stopped: if the hold is still there, its lease runs out. */
        lc_hold_drop(h);
        *dropped = 1;
    }
    return st;
}

lc_status lc_hold_on_eval(lc_hold *h, int release, lc_status st, redisReply *r, redisReply **reply,
                          int *dropped, int *release_alone)
{
    *dropped = 0;
    *release_alone = 0;
    if (st == LC_OK && (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
                        r->element[0]->type != REDIS_REPLY_INTEGER))
        st = lc_fail(LC_EREDIS, "eval: unexpected reply (not made by lc_fenced_script_new?)");
    if (st == LC_OK && r->element[0]->integer == 0) {
        st = lc_fail(LC_ELOST, "lock %s: lost (fencing token %" PRIu64 " is stale)", h->name,
                     h->fence);
        atomic_store(&h->lost, 1);
        lc_hold_drop(h);
        *dropped = 1;
    } else if (st == LC_OK) {
        if (reply && r->elements > 1) {
            *reply = r->element[1];
            r->element[1] = NULL;
        }
        if (release && --h->count == 0) {
            lc_hold_drop(h);
            *dropped = 1;
        }
    } else if (st == LC_EREDIS && release) {
        /* The script failed before it released (a body error): the face releases on its own. */
        *release_alone = 1;
    } else if (release && st == LC_EIO) {
        release_unknown(h, dropped);
    } else if (release && h->count == 1) {
        lc_hold_drop(h); /* renewal has stopped: if the hold is still there, its lease runs out */
        *dropped = 1;
    }
    return st;
}

int lc_renew_result(lc_status st, const redisReply *r)
{
    if (st == LC_OK && r && r->type == REDIS_REPLY_INTEGER)
        return r->integer == 1 ? 1 : 0;
    return -1;
}

int lc_renew_verdict(int result, int64_t now_ms, int64_t renewed_ms, int lease_ms)
{
    if (result == 1)
        return LC_RENEW_OK;
    if (result < 0 && now_ms - renewed_ms < lease_ms)
        return LC_RENEW_RETRY; /* unknown outcome but the last lease may still run: retry soon */
    return LC_RENEW_LOST;
}

int lc_renew_period_ms(int lease_ms)
{
    /* A third of the lease, so two renewals may fail before it ends. */
    return lease_ms / 3 > 0 ? lease_ms / 3 : 1;
}

int lc_jitter_ms(int base)
{
    return base + (int)lc_rand_below((uint32_t)base + 1);
}
