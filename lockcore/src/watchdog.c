/*
 * The watchdog: one thread per client that renews the lease of every held lock registered with
 * it, every lease/3, pipelining all renewals due at once on its own connection. A renewal that
 * finds another owner (or no lock) marks the lock lost and calls the owner's callback; renewal
 * stops for good at the lock's max_hold_ms cap. While a renewal of a lock is in flight its entry
 * belongs to the watchdog thread (busy): removal and lease changes wait for it, so once
 * lc_watchdog_remove returns no renewal of that lock can reach Redis, and once
 * lc_watchdog_set_lease returns none with the old lease can.
 *
 * A service of the client (client_internal.h): the first lc_watchdog_add starts it, and
 * lc_client_free stops it. It knows a registered hold by its lc_hold and hands the owner's
 * lc_lock, unread, to the on_lost callback.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base_internal.h"
#include "client_internal.h"
#include "conn_internal.h"
#include "hold_internal.h"
#include "script_internal.h"
#include "watchdog_internal.h"

typedef struct lc_wd_entry wd_entry;

struct lc_wd_entry {
    lc_hold *hold;   /* borrowed from the owner, as are owner and watch */
    lc_lock *owner;  /* for the on_lost callback */
    lc_watch *watch; /* where the owner keeps this entry */
    int lease_ms;
    int64_t next_ms;    /* when the next renewal is due */
    int64_t cap_ms;     /* stop renewing at this time (0: never) */
    int64_t renewed_ms; /* last time Redis confirmed the lease */
    int busy;           /* a renewal (or the lost callback) is in flight: only the watchdog
                           thread touches the entry until it clears this */
    int result;         /* of the last renewal: 1 ok, 0 lost, -1 unknown (I/O) */
    wd_entry *prev, *next;
};

typedef struct lc_watchdog {
    const lc_endpoint *ep; /* borrowed from the client */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* the thread: stop, or an entry was added */
    pthread_cond_t idle; /* removers: a renewal batch finished */
    wd_entry *head;
    int stop;
    redisContext *ctx;  /* used by the watchdog thread only */
    int loaded;         /* the renew script is in ctx's server's script cache */
    int64_t wake_at_ms; /* when the sleeping thread wakes by itself; 0 while it works */
} lc_watchdog;

enum { BATCH_MAX = 256 };

static void timespec_at(struct timespec *ts, int64_t at_ms)
{
    ts->tv_sec = at_ms / 1000;
    ts->tv_nsec = (at_ms % 1000) * 1000000L;
}

static void unlink_entry(lc_watchdog *wd, wd_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        wd->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->watch->entry = NULL;
    free(e);
}

/* Sends one pipelined batch of renewals and fills each entry's result. Runs unlocked. */
static void renew_batch(lc_watchdog *wd, wd_entry **batch, int n, const int *lease)
{
    const lc_script *s = lc_builtin_script(LC_S_RENEW);
    if (!wd->ctx) {
        wd->loaded = 0;
        if (lc_connect(wd->ep, &wd->ctx) != LC_OK)
            wd->ctx = NULL;
    }
    if (wd->ctx && !wd->loaded) {
        const char *argv[3] = {"SCRIPT", "LOAD", lc_script_source(s)};
        redisReply *r = redisCommandArgv(wd->ctx, 3, argv, NULL);
        wd->loaded = r && r->type == REDIS_REPLY_STRING;
        if (r)
            freeReplyObject(r);
    }
    if (!wd->ctx || !wd->loaded) {
        for (int i = 0; i < n; i++)
            batch[i]->result = -1;
        if (wd->ctx && wd->ctx->err) {
            redisFree(wd->ctx);
            wd->ctx = NULL;
        }
        return;
    }
    int sent = 0;
    for (int i = 0; i < n; i++) {
        /* The hold's name and token are immutable while it is registered; the arguments are
         * hold.c's, as for every other script. */
        lc_call call;
        if (lc_call_renew(&call, batch[i]->hold, lease[i]) != LC_OK)
            break;
        const char *argv[3 + 3];
        size_t lens[3 + 3];
        char nk[16];
        int argc = lc_script_argv(&call, 0, argv, lens, nk);
        int rc = redisAppendCommandArgv(wd->ctx, argc, argv, lens);
        lc_call_done(&call);
        if (rc != REDIS_OK)
            break;
        sent++;
    }
    for (int i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (i >= sent || !wd->ctx || redisGetReply(wd->ctx, (void **)&r) != REDIS_OK || !r) {
            batch[i]->result = -1;
            continue;
        }
        if (r->type == REDIS_REPLY_INTEGER) {
            batch[i]->result = r->integer == 1 ? 1 : 0;
        } else {
            batch[i]->result = -1;
            if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0)
                wd->loaded = 0;
        }
        freeReplyObject(r);
    }
    if (wd->ctx->err) {
        redisFree(wd->ctx);
        wd->ctx = NULL;
    }
}

static void *watchdog_main(void *arg)
{
    lc_watchdog *wd = arg;
    wd_entry *batch[BATCH_MAX];
    int lease[BATCH_MAX];
    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        int64_t now = lc_now_ms();
        int64_t earliest = now + 1000;
        int n = 0;
        for (wd_entry *e = wd->head, *next; e; e = next) {
            next = e->next;
            if (e->next_ms > now) {
                if (e->next_ms < earliest)
                    earliest = e->next_ms;
                continue;
            }
            int l = e->lease_ms;
            if (e->cap_ms) {
                if (e->cap_ms - now <= 0) {
                    unlink_entry(wd, e); /* hold cap reached: let the lease run out */
                    continue;
                }
                if (e->cap_ms - now < l)
                    l = (int)(e->cap_ms - now);
            }
            if (n == BATCH_MAX) {
                earliest = now;
                break;
            }
            e->busy = 1;
            lease[n] = l;
            batch[n++] = e;
        }
        if (n == 0) {
            struct timespec ts;
            timespec_at(&ts, earliest);
            wd->wake_at_ms = earliest;
            pthread_cond_timedwait(&wd->wake, &wd->mu, &ts);
            wd->wake_at_ms = 0;
            continue;
        }
        pthread_mutex_unlock(&wd->mu);
        renew_batch(wd, batch, n, lease);
        now = lc_now_ms();
        for (int i = 0; i < n; i++) {
            wd_entry *e = batch[i];
            int verdict = lc_renew_verdict(e->result, now, e->renewed_ms, e->lease_ms);
            if (verdict == LC_RENEW_OK) {
                e->renewed_ms = now;
            } else if (verdict == LC_RENEW_RETRY) {
                e->result = 2;
            } else {
                e->result = 0;
                atomic_store(&e->hold->lost, 1);
                if (e->hold->opts.on_lost)
                    e->hold->opts.on_lost(e->owner, e->hold->opts.on_lost_arg);
            }
        }
        pthread_mutex_lock(&wd->mu);
        for (int i = 0; i < n; i++) {
            wd_entry *e = batch[i];
            e->busy = 0;
            if (e->result == 0) {
                unlink_entry(wd, e);
                continue;
            }
            e->next_ms =
                now + (e->result == 2 ? LC_RENEW_RETRY_MS : lc_renew_period_ms(e->lease_ms));
        }
        pthread_cond_broadcast(&wd->idle);
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

/* The service's start (client_internal.h): a watchdog for client with its thread running; NULL
 * when out of memory or threads. */
static void *watchdog_start(lc_client *client)
{
    lc_watchdog *wd = calloc(1, sizeof(*wd));
    if (!wd)
        return NULL;
    wd->ep = lc_client_endpoint(client);
    pthread_mutex_init(&wd->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wd->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&wd->idle, NULL);
    if (pthread_create(&wd->thread, NULL, watchdog_main, wd) != 0) {
        pthread_mutex_destroy(&wd->mu);
        pthread_cond_destroy(&wd->wake);
        pthread_cond_destroy(&wd->idle);
        free(wd);
        return NULL;
    }
    return wd;
}

/* The service's stop: called by lc_client_free. */
static void watchdog_stop(void *instance)
{
    lc_watchdog *wd = instance;
    pthread_mutex_lock(&wd->mu);
    wd->stop = 1;
    pthread_cond_signal(&wd->wake);
    pthread_mutex_unlock(&wd->mu);
    pthread_join(wd->thread, NULL);
    while (wd->head)
        unlink_entry(wd, wd->head);
    if (wd->ctx)
        redisFree(wd->ctx);
    pthread_mutex_destroy(&wd->mu);
    pthread_cond_destroy(&wd->wake);
    pthread_cond_destroy(&wd->idle);
    free(wd);
}

static const lc_service watchdog_service = {watchdog_start, watchdog_stop};

lc_status lc_watchdog_add(lc_client *client, lc_watch *w, lc_hold *h, lc_lock *owner)
{
    lc_watchdog *wd = lc_client_service(client, &watchdog_service);
    wd_entry *e = calloc(1, sizeof(*e));
    if (!wd || !e) {
        free(e);
        return lc_fail(LC_ENOMEM, "watchdog: cannot start (out of memory or threads)");
    }
    int64_t now = lc_now_ms();
    e->hold = h;
    e->owner = owner;
    e->watch = w;
    e->lease_ms = h->opts.lease_ms;
    e->renewed_ms = now;
    e->next_ms = now + lc_renew_period_ms(e->lease_ms);
    e->cap_ms = h->opts.max_hold_ms ? h->held_since_ms + h->opts.max_hold_ms : 0;
    pthread_mutex_lock(&wd->mu);
    e->next = wd->head;
    if (wd->head)
        wd->head->prev = e;
    wd->head = e;
    w->entry = e;
    /* Wake the thread only if it would sleep past this entry's first renewal: most holds are
     * shorter than lease/3 and never need the thread at all. */
    if (wd->wake_at_ms && e->next_ms < wd->wake_at_ms)
        pthread_cond_signal(&wd->wake);
    pthread_mutex_unlock(&wd->mu);
    return LC_OK;
}

/* The registration's entry once no renewal of it is in flight (NULL when it is not registered).
 * Called with wd->mu held; may wait on wd->idle. */
static wd_entry *idle_entry(lc_watchdog *wd, lc_watch *w)
{
    wd_entry *e;
    while ((e = w->entry) && e->busy)
        pthread_cond_wait(&wd->idle, &wd->mu);
    return e;
}

void lc_watchdog_remove(lc_client *client, lc_watch *w)
{
    lc_watchdog *wd = lc_client_service_running(client, &watchdog_service);
    if (!wd)
        return;
    pthread_mutex_lock(&wd->mu);
    wd_entry *e = idle_entry(wd, w);
    if (e)
        unlink_entry(wd, e);
    pthread_mutex_unlock(&wd->mu);
}

void lc_watchdog_set_lease(lc_client *client, lc_watch *w, int lease_ms)
{
    lc_watchdog *wd = lc_client_service_running(client, &watchdog_service);
    if (!wd)
        return;
    pthread_mutex_lock(&wd->mu);
    wd_entry *e = idle_entry(wd, w);
    if (e) {
        e->lease_ms = lease_ms;
        e->next_ms = lc_now_ms() + lc_renew_period_ms(lease_ms);
        pthread_cond_signal(&wd->wake);
    }
    pthread_mutex_unlock(&wd->mu);
}

void lc_watchdog_renewed(lc_client *client, lc_watch *w, int64_t at_ms)
{
    lc_watchdog *wd = lc_client_service_running(client, &watchdog_service);
    if (!wd)
        return;
    pthread_mutex_lock(&wd->mu);
    wd_entry *e = idle_entry(wd, w);
    if (e && at_ms > e->renewed_ms)
        e->renewed_ms = at_ms;
    pthread_mutex_unlock(&wd->mu);
}
