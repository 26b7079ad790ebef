/*
 * The lock logic of both faces (hold.c, fence.c), above the scripts: one owner's hold of one
 * lock name, the arguments of every lock script built from it, what each script's reply means
 * for the hold, and when to renew; fence.c makes the fenced scripts (public: lockcore.h). No
 * I/O: the blocking face (lock.c, with watchdog.c and notify.c) and the asynchronous face
 * (async_op.c, async_lock.c) add their transport and their renewal. Not public API.
 */
#ifndef LOCKCORE_HOLD_INTERNAL_H
#define LOCKCORE_HOLD_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "script_internal.h"

/* The built-in scripts of scripts.h, made once per process in static storage (shared by every
 * client of both faces; never NULL, never freed). */
typedef enum lc_builtin {
    LC_S_ACQUIRE,
    LC_S_RELEASE,
    LC_S_RENEW,
    LC_S_FORCE,
    LC_S_RAISE,
    LC_S_COUNT
} lc_builtin;
const lc_script *lc_builtin_script(lc_builtin which);

/* One owner's view of its hold of one lock name: what both lc_lock and lc_async_lock are
 * built on. Name, token and options are immutable once made; count and fence are the face's
 * (under its mutex, or on its loop thread); lost may be set by a renewer at any time. */
typedef struct lc_hold {
    char *name;
    size_t name_len;
    char *fence_key; /* NAME:fence */
    char *channel;   /* NAME:unlock */
    char token[33];
    lc_lock_opts opts;
    int count;       /* local hold count */
    uint64_t fence;  /* fencing token of the current hold */
    atomic_int lost; /* set by the renewer */
    int64_t held_since_ms;
} lc_hold;

/* Validates name and opts (NULL: defaults) and fills h with copies and a fresh owner token.
 * LC_OK, LC_EINVAL or LC_ENOMEM (h then needs no lc_hold_clear). */
lc_status lc_hold_init(lc_hold *h, const char *name, const lc_lock_opts *opts);
void lc_hold_clear(lc_hold *h);

/* LC_OK when the handle holds the lock, else LC_ENOTHELD with a message. */
lc_status lc_hold_need(const lc_hold *h);

/* Forgets the local hold (the face stops its renewal). */
void lc_hold_drop(lc_hold *h);

/* What a successful acquire reply said. */
typedef struct lc_acquired {
    uint64_t fence;
    int count;
    int fresh;    /* a new hold (not a re-entry): the face (re)starts renewal */
    int64_t pttl; /* LC_EBUSY: the holder's remaining lease */
} lc_acquired;

/* Interprets the acquire script's reply (st is the transport's status; r the reply when
 * LC_OK). LC_OK (taken; *out filled), LC_EBUSY (out->pttl), or an error. Changes nothing:
 * the face stops any old renewal, then calls lc_hold_start (fresh) or sets count. */
lc_status lc_hold_on_acquire(const lc_hold *h, lc_status st, const redisReply *r, int nread,
                             lc_acquired *out);

/* Starts a fresh hold: fence, count, since-when, not lost. */
void lc_hold_start(lc_hold *h, const lc_acquired *a);

/* The values of the read keys of an acquire reply: drops the first three elements of r in
 * place and returns r. */
redisReply *lc_acquire_values(redisReply *r);

/* Applies the release script's reply (or the failure to get one) to the hold and returns the
 * call's status. *dropped = 1 when the hold is gone (the face stops renewal). The face stops
 * renewal *before* sending the release of the last hold. */
lc_status lc_hold_on_release(lc_hold *h, lc_status st, const redisReply *r, int *dropped);

/* Applies a fenced script's reply: LC_ELOST (stale fence: marked lost, dropped), LC_OK
 * (*reply, when asked, stolen from r; one hold dropped with release), ... *release_alone = 1:
 * the body failed (LC_EREDIS) before it released, so the face must run the release itself. */
lc_status lc_hold_on_eval(lc_hold *h, int release, lc_status st, redisReply *r, redisReply **reply,
                          int *dropped, int *release_alone);

/* Arguments of lc_lock_eval/lc_async_eval: LC_OK or LC_EINVAL. */
lc_status lc_eval_check(const lc_script *script, int flags, int nkeys, const char **keys, int nargs,
                        const char **args);

/* A renewal's outcome: 1 renewed, 0 not the owner any more, -1 unknown (no reply / error). */
int lc_renew_result(lc_status st, const redisReply *r);
enum { LC_RENEW_OK, LC_RENEW_RETRY, LC_RENEW_LOST };
/* What to do after a renewal: go on (OK), retry soon (unknown, but the last confirmed lease
 * may still run), or mark the lock lost. */
int lc_renew_verdict(int result, int64_t now_ms, int64_t renewed_ms, int lease_ms);
int lc_renew_period_ms(int lease_ms);
enum { LC_RENEW_RETRY_MS = 50 };

/* Milliseconds from base to base*2 (jitter), for the fallback poll of a waiter. */
int lc_jitter_ms(int base);

/* Fallback poll interval bounds while waiting: with the unlock listener the poll only covers a
 * lost message, so it is slow; without it the poll is all there is, so it starts fast. */
enum {
    LC_POLL_SUBSCRIBED_MIN_MS = 200,
    LC_POLL_SUBSCRIBED_MAX_MS = 1000,
    LC_POLL_ALONE_MIN_MS = 10,
    LC_POLL_ALONE_MAX_MS = 200
};

/* Builders of the lock scripts' calls (script_internal.h) from a hold: the same arguments
 * whichever face sends them. Each fills a call to free with lc_call_done; LC_OK or LC_ENOMEM. */
/* waiting: 1 for the attempts of a waiter once it has (or is getting) its subscription to the
 * unlock channel: the attempt marks the hold it finds, or makes, as waited for, so that the end of
 * that hold publishes the unlock (scripts.h, the wake-up protocol); 0 for a first try, a waiter
 * polling without a subscription, and Redlock (whose waiters poll). */
lc_status lc_call_acquire(lc_call *c, const lc_hold *h, int waiting, int nread,
                          const char *const *read_keys, const size_t *read_keylens);
/* The release script for a handle holding `holds` (its count before this release; count + 1
 * is the undo of an acquire whose reply was lost). */
lc_status lc_call_release(lc_call *c, const lc_hold *h, int holds);
lc_status lc_call_renew(lc_call *c, const lc_hold *h, int lease_ms);
lc_status lc_call_force(lc_call *c, const char *name, const char *channel);
/* Redlock's fence raise (scripts.h LC_LUA_FENCE_RAISE) of the quorum's token on one node. */
lc_status lc_call_raise(lc_call *c, const lc_hold *h, uint64_t fence);
/* The fencing guard's arguments around the caller's keys and args (release: drop one hold). */
lc_status lc_call_eval(lc_call *c, const lc_hold *h, const lc_script *script, int release,
                       int nkeys, const char **keys, const size_t *keylens, int nargs,
                       const char **args, const size_t *arglens);

#endif
