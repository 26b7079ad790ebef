/*
 * The subscriber connection of the asynchronous face: one channel (achan) per lock name with
 * waiters, its (UN)SUBSCRIBEs and their confirmations, the unlock messages that wake the
 * oldest sleeping waiter, the resubscription after a reconnect, and the liveness probe that
 * drops a subscriber connection that stopped answering.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "async_internal.h"

static void on_sub_push(redisAsyncContext *ac, void *reply, void *privdata);

static achan *achan_find(lc_async_client *client, const char *name)
{
    for (achan *c = client->chans; c; c = c->next)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

void lc_achan_free(lc_async_client *client, achan *c)
{
    for (achan **p = &client->chans; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    free(c->name);
    free(c);
}

/* Sends a SUBSCRIBE (1) or UNSUBSCRIBE (0) of c. 0, or -1 when the subscriber connection is
 * down or refused it (nothing changed). */
static int sub_request(lc_async_client *client, achan *c, int subscribe)
{
    redisAsyncContext *ac = client->subc.ac;
    if (!ac || client->freeing)
        return -1;
    const char *av[2] = {subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE", c->name};
    if (redisAsyncCommandArgv(ac, subscribe ? on_sub_push : NULL, client, 2, av, NULL) != REDIS_OK)
        return -1;
    c->inflight++;
    c->want = subscribe;
    c->subscribed = 0;
    return 0;
}

/* Wakes the oldest sleeping waiter of c (one per unlock: no herd); with none asleep, the
 * unlock is kept for the next waiter to fall asleep. */
static void wake_one(lc_async_client *client, achan *c)
{
    for (aop *op = c->head; op; op = op->qnext)
        if (op->state == OPS_SLEEPING) {
            client->wakeups++;
            lc_aop_on(op, EV_UNLOCK, LC_OK, NULL, 0);
            return;
        }
    c->unclaimed++;
}

static void on_sub_push(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    lc_async_client *client = privdata;
    const redisReply *r = reply;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
        return; /* NULL: the connection is going; lc_asub_lost deals with that */
    const char *kind = r->element[0]->str;
    achan *c = achan_find(client, r->element[1]->str);
    if (!c)
        return;
    if (strcmp(kind, "message") == 0) {
        wake_one(client, c);
        return;
    }
    if (strcmp(kind, "subscribe") != 0 && strcmp(kind, "unsubscribe") != 0)
        return;
    /* Confirmations come in the order the requests were sent: only the last one decides. */
    if (c->inflight == 0 || --c->inflight > 0)
        return;
    c->subscribed = c->want;
    if (!c->subscribed) {
        if (c->refs == 0)
            lc_achan_free(client, c);
        return;
    }
    int resync = c->resync;
    c->resync = 0;
    /* Attempts never end an operation synchronously, so the list stays as it is. */
    for (aop *op = c->head, *next; op; op = next) {
        next = op->qnext;
        if (op->state == OPS_SUBSCRIBING) {
            lc_aop_on(op, EV_SUBSCRIBED, LC_OK, NULL, 0);
        } else if (resync && op->state == OPS_SLEEPING) {
            op->poll = LC_POLL_SUBSCRIBED_MIN_MS; /* subscribed again: the unlock wakes it */
            op->poll_max = LC_POLL_SUBSCRIBED_MAX_MS;
            lc_aop_on(op, EV_UNLOCK, LC_OK, NULL, 0); /* an unlock may have been missed meanwhile */
        }
    }
}

/* The subscriber connection went: nothing is subscribed any more. Subscribing waiters go on
 * without (their timer); sleepers poll alone until the subscription is back (the short back-off
 * of a waiter without one, their next poll brought forward to it); channels without waiters
 * go. */
void lc_asub_lost(lc_async_client *client)
{
    client->probe_out = 0;
    for (achan *c = client->chans, *next; c; c = next) {
        next = c->next;
        c->inflight = 0;
        c->want = 0;
        c->subscribed = 0;
        for (aop *op = c->head; op; op = op->qnext) {
            op->poll = LC_POLL_ALONE_MIN_MS;
            op->poll_max = LC_POLL_ALONE_MAX_MS;
            if (op->state == OPS_SLEEPING) {
                int64_t wait = lc_jitter_ms(op->poll), left = op->deadline_ms - lc_now_ms();
                lc_async_arm(op->timer, wait < left ? wait : left > 0 ? left : 0);
            }
        }
        if (c->refs == 0)
            lc_achan_free(client, c);
    }
}

/* The channel the liveness probe subscribes to (nothing is published there). */
static const char PROBE_CHANNEL[] = "lockcore:probe";

/* Redis confirmed a probe's SUBSCRIBE: the subscriber connection answers. NULL: it is going. */
static void on_sub_probe(redisAsyncContext *ac, void *reply, void *privdata)
{
    lc_async_client *client = privdata;
    const redisReply *r = reply;
    if (!r || client->freeing || ac != client->subc.ac)
        return;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "subscribe") == 0)
        client->probe_out = 0;
}

/*
 * The subscriber connection's liveness, every command timeout: nothing else is sent on it while
 * waiters sleep, so a node that stops answering (frozen, cut off) would hold every unlock of
 * the client back unnoticed, its waiters left to their slow fallback polls. A SUBSCRIBE of
 * PROBE_CHANNEL (hiredis 0.14 cannot route a PING's answer on a subscribed connection; Redis
 * confirms every SUBSCRIBE) must be confirmed before the next tick, and a connect must have
 * completed by then; otherwise the connection is dropped: its waiters poll alone meanwhile
 * (lc_asub_lost), and it reconnects (on a cluster to the next node), subscribes again and wakes
 * every sleeper once confirmed (an unlock may have been missed).
 */
void lc_asub_on_probe_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_async_client *client = arg;
    aconn *s = &client->subc;
    lc_async_enter(client);
    int timeout = client->opts.command_timeout_ms;
    if (s->ac && (client->probe_out || (!s->up && lc_now_ms() - s->opened_ms >= timeout))) {
        client->sub_drops++;
        lc_aconn_fail(s,
                      "redis: the subscriber connection did not answer within the command timeout");
    } else if (s->ac && s->up) {
        const char *av[2] = {"SUBSCRIBE", PROBE_CHANNEL};
        if (redisAsyncCommandArgv(s->ac, on_sub_probe, client, 2, av, NULL) == REDIS_OK)
            client->probe_out = 1;
    }
    if (!client->freeing)
        lc_async_arm(client->probe, timeout);
    lc_async_leave(client);
}

/* The subscriber connection is (re)opening: subscribe again to every channel with waiters. */
void lc_asub_connected(lc_async_client *client)
{
    for (achan *c = client->chans; c; c = c->next)
        if (c->refs > 0 && !c->want && sub_request(client, c, 1) == 0)
            c->resync = 1;
}

/* Adds op to the waiters of its lock's channel. 1: subscribed already; 0: a subscription is on
 * its way; -1: none possible now (subscriber connection down, out of memory). */
int lc_achan_join(aop *op)
{
    lc_async_client *client = op->client;
    const char *name = op->lock->h.channel;
    achan *c = achan_find(client, name);
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c || !(c->name = strdup(name))) {
            free(c);
            return -1;
        }
        c->next = client->chans;
        client->chans = c;
    }
    op->ch = c;
    op->qnext = NULL;
    op->qprev = c->tail;
    if (c->tail)
        c->tail->qnext = op;
    else
        c->head = op;
    c->tail = op;
    c->refs++;
    if (c->subscribed)
        return 1;
    if (c->want)
        return 0;
    return sub_request(client, c, 1) == 0 ? 0 : -1;
}

/* Removes op from its channel's waiters; a woken waiter that did not take the lock passes the
 * wake-up on, so an unlock is never swallowed. The last waiter unsubscribes. */
void lc_achan_leave(aop *op, int pass)
{
    lc_async_client *client = op->client;
    achan *c = op->ch;
    if (!c)
        return;
    if (op->qprev)
        op->qprev->qnext = op->qnext;
    else
        c->head = op->qnext;
    if (op->qnext)
        op->qnext->qprev = op->qprev;
    else
        c->tail = op->qprev;
    op->ch = NULL;
    op->qprev = op->qnext = NULL;
    c->refs--;
    if (pass && c->refs > 0 && !client->freeing)
        wake_one(client, c);
    if (c->refs > 0)
        return;
    c->unclaimed = 0;
    if (c->want && sub_request(client, c, 0) == 0)
        return;
    if (c->inflight == 0 || !client->subc.ac)
        lc_achan_free(client, c);
}

long lc_async_debug_wakeups(const lc_async_client *client)
{
    return client->wakeups;
}

int lc_async_debug_sleepers(const lc_async_client *client, const char *name)
{
    char channel[LC_NAME_MAX + 16];
    snprintf(channel, sizeof(channel), "%s:unlock", name);
    int n = 0;
    for (achan *c = client->chans; c; c = c->next)
        if (strcmp(c->name, channel) == 0)
            for (aop *op = c->head; op; op = op->qnext)
                n += op->state == OPS_SLEEPING && c->subscribed;
    return n;
}

int lc_async_debug_sub_port(const lc_async_client *client)
{
    if (!client->subc.up)
        return -1;
    if (client->route)
        return lc_route_port(client->route, client->subc.node);
    return client->url.port;
}

long lc_async_debug_sub_drops(const lc_async_client *client)
{
    return client->sub_drops;
}
