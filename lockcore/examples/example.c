/*
 * lockcore example: take one stock segment's lock, decrement the segment's stock in a script
 * that runs only while this owner still holds the lock with its fencing token, and release the
 * lock in that same script. Shows the client, lock options, a lost-lock callback, waiting with a
 * deadline, lc_lock_eval with LC_EVAL_RELEASE, and how to read the status and its message.
 *
 * Build (from the repository root, after `cmake -S . -B build && cmake --build build`):
 *     cc -Ilockcore/include lockcore/examples/example.c build/lib/liblockcore.a \
 *        -lhiredis -lpthread -o example
 * Run:  ./example [redis://127.0.0.1:6379]
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>

#include "lockcore/lockcore.h"

/* Decrements KEYS[1] by ARGV[1] if that much is left; returns what is left, or -1. The fencing
 * guard that lc_fenced_script_new wraps around it has already checked the lock. */
static const char DECREMENT_BODY[] = "local left = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
                                     "local want = tonumber(ARGV[1])\n"
                                     "if left < want then return -1 end\n"
                                     "return redis.call('DECRBY', KEYS[1], want)\n";

static atomic_int lost_seen;

/* Runs on the watchdog thread: keep it short, only note the fact. */
static void on_lost(lc_lock *lock, void *arg)
{
    (void)lock;
    (void)arg;
    atomic_store(&lost_seen, 1);
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    lc_client *client = NULL;
    lc_lock *lock = NULL;
    lc_script *decrement = NULL;
    int rc = 1;

    lc_status st = lc_client_new(url, NULL, &client);
    if (st != LC_OK) {
        fprintf(stderr, "connect %s: %s: %s\n", url, lc_status_name(st), lc_errmsg());
        return 1;
    }

    /* Seed the demo stock once (plain command; a real service does this at preheat). */
    const char *set[4] = {"SET", "example:sku42:seg3", "10", "NX"};
    if (lc_client_command(client, 4, set, NULL, NULL) != LC_OK) {
        fprintf(stderr, "seed: %s\n", lc_errmsg());
        goto out;
    }

    lc_lock_opts opts;
    lc_lock_opts_init(&opts); /* 30 s lease, watchdog renewing every 10 s */
    opts.lease_ms = 5000;
    opts.max_hold_ms = 60000; /* never hold longer than a minute, whatever happens */
    opts.on_lost = on_lost;
    if ((st = lc_lock_new(client, "example:sku42:seg3:lock", &opts, &lock)) != LC_OK ||
        (st = lc_fenced_script_new(DECREMENT_BODY, &decrement)) != LC_OK) {
        fprintf(stderr, "setup: %s: %s\n", lc_status_name(st), lc_errmsg());
        goto out;
    }

    uint64_t fence = 0;
    st = lc_lock_acquire(lock, 2000, &fence); /* wait up to 2 s */
    if (st == LC_ETIMEOUT) {
        fprintf(stderr, "segment busy, try another one\n");
        goto out;
    } else if (st != LC_OK) {
        fprintf(stderr, "acquire: %s: %s\n", lc_status_name(st), lc_errmsg());
        goto out;
    }
    printf("locked %s with fencing token %" PRIu64 "\n", lc_lock_name(lock), fence);

    /* The check, the decrement and the release are one atomic script on the server. */
    const char *keys[1] = {"example:sku42:seg3"};
    const char *args[1] = {"1"};
    redisReply *reply = NULL;
    st = lc_lock_eval(lock, decrement, LC_EVAL_RELEASE, 1, keys, NULL, 1, args, NULL, &reply);
    switch (st) {
    case LC_OK:
        if (reply && reply->type == REDIS_REPLY_INTEGER && reply->integer >= 0)
            printf("sold one, %lld left\n", reply->integer);
        else
            printf("segment empty\n");
        rc = 0;
        break;
    case LC_ELOST: /* the lease ran out (pause, partition): nothing was written */
        fprintf(stderr, "lock lost before the write: %s\n", lc_errmsg());
        break;
    case LC_EIO: /* the outcome is unknown: the script may or may not have run */
        fprintf(stderr, "unknown outcome, reconcile before retrying: %s\n", lc_errmsg());
        break;
    default: fprintf(stderr, "eval: %s: %s\n", lc_status_name(st), lc_errmsg()); break;
    }
    freeReplyObject(reply); /* NULL-safe */
    if (atomic_load(&lost_seen))
        fprintf(stderr, "the watchdog reported the lock lost\n");

out:
    lc_script_free(decrement);
    lc_lock_free(lock);     /* releases a hold still held (not the case here) */
    lc_client_free(client); /* locks first, then their client */
    return rc;
}
