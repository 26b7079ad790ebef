/*
 * The unlock listener: one thread and one pub/sub connection per client, shared by every waiter.
 * A waiter subscribes to its lock's NAME:unlock channel and is told once Redis has confirmed the
 * subscription, so its next acquire attempt and the subscription leave no gap for an unlock to
 * slip through. Channels are reference counted: the first waiter subscribes, the last one
 * unsubscribes. After a reconnect every live channel is subscribed again and all waiters are
 * woken to retry, since a message may have been lost during the outage.
 *
 * Redis confirms every SUBSCRIBE and UNSUBSCRIBE of a channel, in the order they were sent. A
 * channel counts its requests not yet confirmed and is subscribed only when all are confirmed
 * and the last one was a SUBSCRIBE: the confirmation of an earlier SUBSCRIBE, with an UNSUBSCRIBE
 * sent after it still on its way, does not count for a waiter that came later. A channel is
 * forgotten only when it has no waiter and no request on its way.
 *
 * A service of the client (client_internal.h): the first lc_notify_subscribe starts it, and
 * lc_client_free stops it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base_internal.h"
#include "client_internal.h"
#include "conn_internal.h"
#include "notify_internal.h"

typedef struct chan {
    char *name;
    int refs;            /* waiters */
    int inflight;        /* SUBSCRIBEs and UNSUBSCRIBEs queued or sent, not yet confirmed */
    int want;            /* the last one queued was a SUBSCRIBE (1) or an UNSUBSCRIBE/none (0) */
    int subscribed;      /* all confirmed, and the last one was a SUBSCRIBE */
    uint64_t seq;        /* messages (and reconnects) seen */
    pthread_cond_t cond; /* subscribed or seq changed */
    struct chan *next;
} chan;

typedef struct pending {
    int subscribe; /* 1 SUBSCRIBE, 0 UNSUBSCRIBE */
    char *name;
} pending;

struct lc_notify {
    const lc_endpoint *ep; /* borrowed from the client; NULL when detached */
    pthread_t thread;
    pthread_mutex_t mu;
    int stop;
    int has_thread; /* 0: detached (unit tests) */
    int connected;  /* ctx is up (detached: always 1); guarded by mu */
    int wakefd[2];
    redisContext *ctx; /* used by the listener thread only */
    chan *chans;
    pending *queue;
    int nqueue, capqueue;
};

struct lc_sub {
    lc_notify *n;
    chan *ch;
    uint64_t seen;
};

static void cond_init_mono(pthread_cond_t *c)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
}

static void notify_poke(lc_notify *n)
{
    char b = 1;
    ssize_t w = write(n->wakefd[1], &b, 1);
    (void)w; /* a full pipe already means "wake up" */
}

/* Queues a (un)subscribe for the thread. Called with n->mu held. 0 or -1 (out of memory). */
static int enqueue(lc_notify *n, int subscribe, const char *name)
{
    if (n->nqueue == n->capqueue) {
        int cap = n->capqueue ? n->capqueue * 2 : 16;
        pending *q = realloc(n->queue, sizeof(*q) * (size_t)cap);
        if (!q)
            return -1;
        n->queue = q;
        n->capqueue = cap;
    }
    char *copy = strdup(name);
    if (!copy)
        return -1;
    n->queue[n->nqueue].subscribe = subscribe;
    n->queue[n->nqueue].name = copy;
    n->nqueue++;
    notify_poke(n);
    return 0;
}

static void clear_queue(lc_notify *n)
{
    for (int i = 0; i < n->nqueue; i++)
        free(n->queue[i].name);
    n->nqueue = 0;
}

static chan *find_chan(lc_notify *n, const char *name)
{
    for (chan *c = n->chans; c; c = c->next)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

static void free_chan(lc_notify *n, chan *c)
{
    for (chan **p = &n->chans; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    pthread_cond_destroy(&c->cond);
    free(c->name);
    free(c);
}

/* Queues a SUBSCRIBE (1) or UNSUBSCRIBE (0) of c. Called with n->mu held. 0, or -1 when out
 * of memory (nothing changed). */
static int request(lc_notify *n, chan *c, int subscribe)
{
    if (enqueue(n, subscribe, c->name) != 0)
        return -1;
    c->inflight++;
    c->want = subscribe;
    c->subscribed = 0;
    return 0;
}

/* After (re)connecting: subscribe again to every channel with waiters, forget the others, and
 * wake every waiter. Nothing queued or sent before is confirmed on the new connection. Called
 * with n->mu held. */
static void resubscribe_all(lc_notify *n)
{
    clear_queue(n);
    for (chan *c = n->chans, *next; c; c = next) {
        next = c->next;
        if (c->refs == 0) {
            free_chan(n, c);
            continue;
        }
        c->inflight = 0;
        c->want = 0;
        c->subscribed = 0;
        c->seq++;
        pthread_cond_broadcast(&c->cond);
        request(n, c, 1);
    }
}

/* Applies one push message from the pub/sub connection. Called with n->mu held. */
static void handle_push(lc_notify *n, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    chan *c = find_chan(n, r->element[1]->str);
    if (!c)
        return;
    if (strcmp(kind, "message") == 0) {
        c->seq++;
        pthread_cond_broadcast(&c->cond);
    } else if (strcmp(kind, "subscribe") == 0 || strcmp(kind, "unsubscribe") == 0) {
        /* Confirmations come in the order the requests were sent: only the last one's decides
         * the state, an earlier one may be followed by the opposite request. */
        if (c->inflight == 0 || --c->inflight > 0)
            return;
        c->subscribed = c->want;
        if (c->subscribed)
            pthread_cond_broadcast(&c->cond);
        else if (c->refs == 0)
            free_chan(n, c);
    }
}

static void drop_connection(lc_notify *n)
{
    if (n->ctx) {
        redisFree(n->ctx);
        n->ctx = NULL;
    }
    n->connected = 0;
}

static void *notify_main(void *arg)
{
    lc_notify *n = arg;
    pthread_mutex_lock(&n->mu);
    while (!n->stop) {
        if (!n->ctx) {
            pthread_mutex_unlock(&n->mu);
            redisContext *ctx = NULL;
            if (lc_connect(n->ep, &ctx) != LC_OK)
                ctx = NULL;
            pthread_mutex_lock(&n->mu);
            if (!ctx) {
                pthread_mutex_unlock(&n->mu);
                struct pollfd p = {n->wakefd[0], POLLIN, 0};
                poll(&p, 1, 100);
                pthread_mutex_lock(&n->mu);
                continue;
            }
            n->ctx = ctx;
            n->connected = 1;
            resubscribe_all(n);
        }
        for (int i = 0; i < n->nqueue; i++) {
            const char *argv[2] = {n->queue[i].subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE",
                                   n->queue[i].name};
            redisAppendCommandArgv(n->ctx, 2, argv, NULL);
        }
        clear_queue(n);
        pthread_mutex_unlock(&n->mu);

        int done = 0, failed = 0;
        while (!done && !failed)
            failed = redisBufferWrite(n->ctx, &done) != REDIS_OK;
        struct pollfd p[2] = {{n->wakefd[0], POLLIN, 0}, {n->ctx->fd, POLLIN, 0}};
        if (!failed && poll(p, 2, 1000) < 0 && errno != EINTR)
            failed = 1;
        if (p[0].revents & POLLIN) {
            char buf[64];
            while (read(n->wakefd[0], buf, sizeof(buf)) > 0)
                ;
        }
        if (!failed && (p[1].revents & (POLLIN | POLLERR | POLLHUP)))
            failed = redisBufferRead(n->ctx) != REDIS_OK;

        pthread_mutex_lock(&n->mu);
        void *reply = NULL;
        while (!failed && redisGetReplyFromReader(n->ctx, &reply) == REDIS_OK && reply) {
            handle_push(n, reply);
            freeReplyObject(reply);
            reply = NULL;
        }
        if (failed || n->ctx->err)
            drop_connection(n);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

/* A listener without its thread: mutex and wake-up pipe. NULL when out of memory or pipes. */
static lc_notify *notify_alloc(const lc_endpoint *ep)
{
    lc_notify *n = calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    n->ep = ep;
    if (pipe(n->wakefd) != 0) {
        free(n);
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(n->wakefd[i], F_SETFL, O_NONBLOCK);
        fcntl(n->wakefd[i], F_SETFD, FD_CLOEXEC);
    }
    pthread_mutex_init(&n->mu, NULL);
    return n;
}

/* The service's start (client_internal.h): a listener for client with its thread running; NULL
 * when it cannot be started. */
static void *notify_start(lc_client *client)
{
    lc_notify *n = notify_alloc(lc_client_endpoint(client));
    if (!n)
        return NULL;
    n->has_thread = pthread_create(&n->thread, NULL, notify_main, n) == 0;
    if (!n->has_thread) {
        lc_notify_free(n);
        return NULL;
    }
    return n;
}

/* The service's stop: called by lc_client_free. */
static void notify_stop(void *instance)
{
    lc_notify_free(instance);
}

static const lc_service notify_service = {notify_start, notify_stop};

lc_notify *lc_notify_new_detached(void)
{
    lc_notify *n = notify_alloc(NULL);
    if (n)
        n->connected = 1;
    return n;
}

lc_sub *lc_notify_sub_begin(lc_notify *n, const char *channel)
{
    lc_sub *sub = calloc(1, sizeof(*sub));
    if (!sub)
        return NULL;
    pthread_mutex_lock(&n->mu);
    chan *c = find_chan(n, channel);
    if (!c && (c = calloc(1, sizeof(*c)))) {
        if (!(c->name = strdup(channel))) {
            free(c);
            c = NULL;
        } else {
            cond_init_mono(&c->cond);
            c->next = n->chans;
            n->chans = c;
        }
    }
    if (!c) {
        pthread_mutex_unlock(&n->mu);
        free(sub);
        return NULL;
    }
    c->refs++;
    if (!c->want)
        request(n, c, 1); /* neither subscribed nor a SUBSCRIBE on its way */
    sub->n = n;
    sub->ch = c;
    sub->seen = c->seq;
    pthread_mutex_unlock(&n->mu);
    return sub;
}

int lc_notify_sub_ready(lc_sub *sub)
{
    pthread_mutex_lock(&sub->n->mu);
    int ready = sub->ch->subscribed;
    pthread_mutex_unlock(&sub->n->mu);
    return ready;
}

lc_sub *lc_notify_subscribe(lc_client *client, const char *channel, int timeout_ms)
{
    lc_notify *n = lc_client_service(client, &notify_service);
    lc_sub *sub = n ? lc_notify_sub_begin(n, channel) : NULL;
    if (!sub)
        return NULL;
    chan *c = sub->ch;
    struct timespec ts;
    int command_timeout_ms = n->ep->opts.command_timeout_ms;
    int wait = timeout_ms < command_timeout_ms ? timeout_ms : command_timeout_ms;
    int64_t until = lc_now_ms() + wait;
    ts.tv_sec = until / 1000;
    ts.tv_nsec = (until % 1000) * 1000000L;
    pthread_mutex_lock(&n->mu);
    while (!c->subscribed && !n->stop)
        if (pthread_cond_timedwait(&c->cond, &n->mu, &ts) == ETIMEDOUT)
            break;
    int ready = c->subscribed;
    sub->seen = c->seq;
    pthread_mutex_unlock(&n->mu);
    if (!ready) {
        lc_notify_unsubscribe(sub);
        return NULL;
    }
    return sub;
}

int lc_notify_wait(lc_sub *sub, int timeout_ms)
{
    lc_notify *n = sub->n;
    chan *c = sub->ch;
    int64_t until = lc_now_ms() + timeout_ms;
    struct timespec ts = {until / 1000, (until % 1000) * 1000000L};
    pthread_mutex_lock(&n->mu);
    while (c->seq == sub->seen && !n->stop)
        if (pthread_cond_timedwait(&c->cond, &n->mu, &ts) == ETIMEDOUT)
            break;
    int woken = c->seq != sub->seen;
    sub->seen = c->seq;
    pthread_mutex_unlock(&n->mu);
    return woken;
}

void lc_notify_unsubscribe(lc_sub *sub)
{
    if (!sub)
        return;
    lc_notify *n = sub->n;
    chan *c = sub->ch;
    pthread_mutex_lock(&n->mu);
    if (--c->refs == 0) {
        if (c->want) {
            /* Subscribed, or a SUBSCRIBE on its way: unsubscribe. Without a connection there
             * is nothing to send (a reconnect forgets channels without waiters); out of memory
             * it stays subscribed, which is harmless. */
            if (n->connected)
                request(n, c, 0);
        } else if (c->inflight == 0) {
            free_chan(n, c);
        }
    }
    pthread_mutex_unlock(&n->mu);
    free(sub);
}

void lc_notify_free(lc_notify *n)
{
    if (!n)
        return;
    pthread_mutex_lock(&n->mu);
    n->stop = 1;
    pthread_mutex_unlock(&n->mu);
    notify_poke(n);
    if (n->has_thread)
        pthread_join(n->thread, NULL);
    drop_connection(n);
    clear_queue(n);
    free(n->queue);
    while (n->chans)
        free_chan(n, n->chans);
    close(n->wakefd[0]);
    close(n->wakefd[1]);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

void lc_notify_push(lc_notify *n, const redisReply *r)
{
    pthread_mutex_lock(&n->mu);
    handle_push(n, r);
    pthread_mutex_unlock(&n->mu);
}

int lc_notify_take(lc_notify *n, int *subscribe, char *name, size_t size)
{
    pthread_mutex_lock(&n->mu);
    int got = n->nqueue > 0;
    if (got) {
        *subscribe = n->queue[0].subscribe;
        snprintf(name, size, "%s", n->queue[0].name);
        free(n->queue[0].name);
        memmove(n->queue, n->queue + 1, sizeof(*n->queue) * (size_t)(n->nqueue - 1));
        n->nqueue--;
    }
    pthread_mutex_unlock(&n->mu);
    return got;
}
