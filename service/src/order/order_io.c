/*
 * The order's Redis I/O and bookkeeping, shared by the order's machine (order_fsm.c) and the
 * machines it hands an order over to (order_claim.c, order_limit.c): every Redis call of an order
 * goes out here, is counted against the order's budget (--order-redis-call-budget), and comes
 * back as an event of the order, handed to the order machine through the hooks it set in
 * o->io (order_io.h), which passes it on to the machine holding the order. This file names none
 * of the machines: the arrows run one way, order_fsm.c -> order_claim.c / order_limit.c ->
 * order_io.c (docs/design.md "The order path as a state machine").
 */
#include "order_io.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <event2/event.h>

#include "app.h"
#include "clock.h"
#include "store.h"

/* One reply of a batch: its order and its place. */
struct bslot {
    struct order *o;
    int i;
};

/* Keeps msg as the order's reason when st is a failure (a busy or lost lock and a lock wait's
 * timeout are outcomes, not failures). The message comes with the result (lockcore_async.h),
 * never from lc_errmsg(), which is the last failure of any request of the loop; it is read
 * there only right after a call that failed to start. */
void order_note_why(struct order *o, lc_status st, const char *msg)
{
    if (st != LC_OK && st != LC_EBUSY && st != LC_ETIMEOUT && st != LC_ELOST)
        snprintf(o->why, sizeof(o->why), "%s", msg && *msg ? msg : lc_status_name(st));
}

/* A random number from a per-thread generator (segment choice, claim tokens; order ids come
 * from ids.c). */
uint64_t order_rnd64(void)
{
    static _Thread_local uint64_t s;
    if (s == 0) {
        if (getrandom(&s, sizeof(s), 0) != sizeof(s))
            s = (uint64_t)clock_wall_ms() ^ (uint64_t)(uintptr_t)&s;
        s |= 1;
    }
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s * 0x2545F4914F6CDD1DULL;
}

void order_timer_arm(struct order *o, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(o->timer, &tv);
    o->timer_on = 1;
}

void order_timer_stop(struct order *o)
{
    if (o->timer_on) {
        evtimer_del(o->timer);
        o->timer_on = 0;
    }
}

void order_spend(struct order *o, int n)
{
    o->calls += n;
}

int order_end_calls(const struct order *o)
{
    return (o->app->cfg.redis_replica_acks > 0) + (*o->idem != '\0') + (o->uv != NULL) + o->ngv;
}

int order_over_budget(const struct order *o, int n)
{
    return o->calls + n + order_end_calls(o) > o->app->cfg.order_redis_call_budget;
}

void order_event(struct order *o, enum oevent ev, lc_status st, const redisReply *r)
{
    o->io->event(o, ev, st, r);
}

/* Notes the connection that carried a claim, a per-user reservation or a commit (the machine
 * holding the order says whether its call was one: o->io->carries_write): the WAIT that vouches
 * for it must go on that connection (lockcore_async.h, lc_async_wait). */
void order_note_ref(struct order *o)
{
    if (o->io->carries_write(o))
        o->have_ref = lc_async_reply_conn(o->lc, &o->ref) == 0;
}

void order_on_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    order_note_ref(arg);
    order_note_why(arg, st, errstr);
    order_event(arg, EV_REPLY, st, r);
}

static void on_batch_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    struct bslot *s = arg;
    struct order *o = s->o;
    if (st != LC_OK) {
        order_note_why(o, st, errstr);
        o->batch_failed = 1;
    } else {
        o->batch_ints[s->i] = store_reply_int(r, 0);
        o->io->batch_reply(o, s->i, r);
    }
    if (--o->batch_left == 0)
        order_event(o, EV_BATCH, LC_OK, NULL);
}

void order_script(struct order *o, enum store_script id, int nkeys, const char *const *keys,
                  int nargs, const char *const *args)
{
    order_spend(o, 1);
    lc_status st = lc_async_script(o->lc, store_script(o->app->store, id), nkeys, keys, NULL, nargs,
                                   args, NULL, order_on_reply, o);
    if (st != LC_OK) {
        order_note_why(o, st, lc_errmsg()); /* not started: the message just recorded */
        order_event(o, EV_REPLY, LC_EIO, NULL);
    }
}

void order_command(struct order *o, int argc, const char *const *argv)
{
    order_spend(o, 1);
    if (lc_async_command(o->lc, argc, argv, NULL, order_on_reply, o) != LC_OK)
        order_event(o, EV_REPLY, LC_EIO, NULL);
}

/* A start failure counts as a failed reply. */
void order_batch(struct order *o, int n, const char *const (*argvs)[3], int argc)
{
    order_spend(o, n);
    free(o->batch_ints);
    free(o->slots);
    o->batch_ints = calloc((size_t)n, sizeof(*o->batch_ints));
    o->slots = calloc((size_t)n, sizeof(*o->slots));
    o->batch_n = n;
    o->batch_left = n + 1; /* + 1 for this function: the batch ends after every start */
    o->batch_failed = 0;
    o->batch_found = 0;
    if (!o->batch_ints || !o->slots) {
        order_note_why(o, LC_ENOMEM, "out of memory");
        o->batch_failed = 1;
        o->batch_left = 1;
    } else {
        for (int i = 0; i < n; i++) {
            o->slots[i].o = o;
            o->slots[i].i = i;
            lc_status st =
                lc_async_command(o->lc, argc, argvs[i], NULL, on_batch_reply, &o->slots[i]);
            if (st != LC_OK) {
                order_note_why(o, st, lc_errmsg()); /* not started: the message just recorded */
                o->batch_failed = 1;
                o->batch_left--;
            }
        }
    }
    if (--o->batch_left == 0)
        order_event(o, EV_BATCH, LC_OK, NULL);
}

void order_replicas_wait(struct order *o)
{
    if (!o->have_ref) {
        order_event(o, EV_REPLY, LC_EIO, NULL);
        return;
    }
    order_spend(o, 1);
    store_replica_wait_ref_async(o->lc, &o->ref, o->app->cfg.redis_replica_acks,
                                 o->app->cfg.redis_timeout_ms, order_on_reply, o);
}
