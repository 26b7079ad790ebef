/*
 * lockcore async example: on a libevent loop, take one stock segment's lock (waiting up to 2 s)
 * and read the segment in the same step, decrement it in a fenced script that also releases the
 * lock, then stop. Shows the async client, a lock with renewal and a lost-lock callback, the
 * chain of callbacks, and who owns what: replies given to callbacks are borrowed, handles are
 * freed by the program, each callback runs exactly once.
 *
 * Build (from the repository root, after `cmake -S . -B build && cmake --build build`):
 *     cc -Ilockcore/include lockcore/examples/async_example.c build/lib/liblockcore.a \
 *        -lhiredis -levent -lpthread -o async_example
 * Run:  ./async_example [redis://127.0.0.1:6379]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>

#include "lockcore/lockcore_async.h"

static const char DECREMENT_BODY[] = "local left = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
                                     "if left < tonumber(ARGV[1]) then return -1 end\n"
                                     "return redis.call('DECRBY', KEYS[1], ARGV[1])\n";

static const char *const SEGMENT[1] = {"example:sku42:seg3"};

/* Everything one order needs, alive until its last callback. */
typedef struct order {
    struct event_base *base;
    lc_script *decrement;
    int rc;
} order;

static void on_lost(lc_async_lock *lock, void *arg)
{
    (void)arg;
    /* Runs on the loop: the fenced script will refuse to write with LC_ELOST anyway. */
    fprintf(stderr, "lock %s lost\n", lc_async_lock_name(lock));
}

/* Last step: the decrement ran (or not) and the lock is released in the same script. */
static void on_decremented(lc_async_lock *lock, lc_status st, const redisReply *reply, void *arg)
{
    order *o = arg;
    if (st == LC_OK && reply && reply->type == REDIS_REPLY_INTEGER && reply->integer >= 0) {
        printf("sold one, %lld left\n", reply->integer);
        o->rc = 0;
    } else if (st == LC_OK) {
        printf("segment empty\n");
        o->rc = 0;
    } else {
        /* LC_ELOST: nothing written. LC_EIO: unknown outcome, reconcile before retrying. */
        fprintf(stderr, "decrement: %s: %s\n", lc_status_name(st), lc_async_lock_errmsg(lock));
    }
    event_base_loopbreak(o->base);
}

/* The lock is ours (or not): values holds the segment's stock read in the same script. */
static void on_locked(lc_async_lock *lock, lc_status st, uint64_t fence, const redisReply *values,
                      void *arg)
{
    order *o = arg;
    if (st != LC_OK) {
        /* the message travels with the handle: lc_errmsg() is any request's last failure */
        fprintf(stderr, "acquire: %s: %s\n", lc_status_name(st), lc_async_lock_errmsg(lock));
        event_base_loopbreak(o->base);
        return;
    }
    const redisReply *stock = values->element[0]; /* borrowed: valid in this callback only */
    printf("locked %s with fencing token %" PRIu64 ", stock %s\n", lc_async_lock_name(lock), fence,
           stock->type == REDIS_REPLY_STRING ? stock->str : "(none)");
    const char *args[1] = {"1"};
    st = lc_async_eval(lock, o->decrement, LC_EVAL_RELEASE, 1, (const char **)SEGMENT, NULL, 1,
                       args, NULL, on_decremented, o);
    if (st != LC_OK) { /* not started: no callback will come */
        fprintf(stderr, "eval: %s: %s\n", lc_status_name(st), lc_errmsg());
        event_base_loopbreak(o->base);
    }
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    order o = {.base = event_base_new(), .rc = 1};
    lc_async_client *client = NULL;
    lc_async_lock *lock = NULL;
    lc_status st;
    if (!o.base)
        return 1;
    lc_lock_opts opts;
    lc_lock_opts_init(&opts);
    opts.lease_ms = 5000; /* renewed every ~1.7 s on a loop timer while held */
    if ((st = lc_async_client_new(o.base, url, NULL, &client)) != LC_OK ||
        (st = lc_async_lock_new(client, "example:sku42:seg3:lock", &opts, on_lost, NULL, &lock)) !=
            LC_OK ||
        (st = lc_fenced_script_new(DECREMENT_BODY, &o.decrement)) != LC_OK ||
        (st = lc_async_lock_acquire(lock, 2000, 1, SEGMENT, NULL, on_locked, &o)) != LC_OK) {
        fprintf(stderr, "setup: %s: %s\n", lc_status_name(st), lc_errmsg());
    } else {
        event_base_dispatch(o.base); /* until on_decremented or a failure breaks it */
    }
    lc_async_lock_free(lock);     /* releases a hold still held (not the case here) */
    lc_async_client_free(client); /* any operation still running ends with LC_ESTATE */
    lc_script_free(o.decrement);
    event_base_free(o.base);
    return o.rc;
}
