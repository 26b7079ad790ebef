/*
 * The asynchronous face of lockcore (lockcore_async.h): locks driven by a libevent loop over
 * hiredis async connections, a pipelined data connection (one per node on a cluster) and a
 * subscriber connection per client. This file is the client: made and freed, and the bracket
 * of every entry from the loop. How the face is cut into files, and who owns what, is written
 * once in async_internal.h.
 */
#include <stdlib.h>
#include <sys/time.h>

#include <event2/event.h>

#include "async_internal.h"
#include "client_internal.h"

void lc_async_enter(lc_async_client *client)
{
    client->depth++;
    lc_in_loop++;
}

void lc_async_leave(lc_async_client *client)
{
    lc_in_loop--;
    if (--client->depth == 0 && client->free_requested) {
        client->free_requested = 0;
        lc_async_client_free(client);
    }
}

void lc_async_arm(struct event *ev, int64_t ms)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    evtimer_add(ev, &tv);
}

lc_status lc_async_client_new(struct event_base *base, const char *url, const lc_client_opts *opts,
                              lc_async_client **out)
{
    if (out)
        *out = NULL;
    if (!base || !url || !out)
        return lc_fail(LC_EINVAL, "async client: NULL argument");
    lc_async_client *c = calloc(1, sizeof(*c));
    if (!c)
        return lc_fail(LC_ENOMEM, "async client: out of memory");
    lc_client_opts_init(&c->opts);
    if (opts) {
        if (opts->command_timeout_ms <= 0) {
            free(c);
            return lc_fail(LC_EINVAL, "async client: command_timeout_ms must be > 0");
        }
        c->opts = *opts;
    }
    lc_status st = lc_url_parse(url, &c->url);
    if (st != LC_OK) {
        free(c);
        return st;
    }
    c->base = base;
    c->data.client = c->subc.client = c;
    c->data.node = c->subc.node = -1;
    c->subc.sub = 1;
    c->data.reconnect = evtimer_new(base, lc_aconn_on_reconnect_timer, &c->data);
    c->subc.reconnect = evtimer_new(base, lc_aconn_on_reconnect_timer, &c->subc);
    c->probe = evtimer_new(base, lc_asub_on_probe_timer, c);
    int ok = c->data.reconnect && c->subc.reconnect && c->probe && lc_builtin_script(LC_S_ACQUIRE);
    if (ok && c->url.cluster) {
        const char *hosts[LC_URL_SEEDS_MAX];
        int ports[LC_URL_SEEDS_MAX];
        for (int i = 0; i < c->url.nseeds; i++) {
            hosts[i] = c->url.seeds[i].host;
            ports[i] = c->url.seeds[i].port;
        }
        c->route = lc_route_new(c->url.nseeds, hosts, ports);
        c->refresh = evtimer_new(base, lc_acluster_on_refresh_timer, c);
        ok = c->route && c->refresh;
    }
    if (!ok) {
        lc_async_client_free(c);
        return lc_fail(LC_ENOMEM, "async client: out of memory");
    }
    if (c->route) {
        lc_acluster_start(c); /* the slot map; commands sent before it follow MOVED */
    } else {
        lc_aconn_open(&c->data);
    }
    lc_aconn_open(&c->subc);
    lc_async_arm(c->probe, c->opts.command_timeout_ms);
    *out = c;
    return LC_OK;
}

void lc_async_client_free(lc_async_client *client)
{
    if (!client || client->freeing)
        return;
    if (client->depth > 0) {
        client->free_requested = 1; /* inside lockcore's code: finished by lc_async_leave */
        return;
    }
    client->depth++;
    client->freeing = 1;
    while (client->ops)
        lc_aop_finish(client->ops, lc_fail(LC_ESTATE, "async client freed"), NULL);
    for (lc_async_lock *l = client->locks; l; l = l->next) {
        lc_alock_renew_stop(l);
        if (l->renew)
            event_free(l->renew);
        l->renew = NULL;
        l->client = NULL;
    }
    client->locks = NULL;
    client->depth--;
    /* Every command still in flight gets its NULL reply here; none has an operation any more. */
    for (int i = -2; i < client->nnodes; i++) {
        aconn *conn = i == -2 ? &client->data : i == -1 ? &client->subc : client->nodes[i];
        if (!conn)
            continue;
        redisAsyncContext *ac = conn->ac;
        conn->ac = NULL;
        if (ac)
            redisAsyncFree(ac);
        if (conn->reconnect)
            event_free(conn->reconnect);
        if (i >= 0)
            free(conn);
    }
    free(client->nodes);
    while (client->parked) {
        acmd *c = client->parked;
        client->parked = c->next;
        lc_acmd_free(c);
    }
    if (client->refresh)
        event_free(client->refresh);
    if (client->probe)
        event_free(client->probe);
    lc_route_free(client->route);
    while (client->chans)
        lc_achan_free(client, client->chans);
    while (client->deferred) {
        acmd *c = client->deferred;
        client->deferred = c->next;
        lc_acmd_free(c);
    }
    free(client);
}

int lc_async_debug_connected(const lc_async_client *client)
{
    for (int i = 0; i < client->nnodes; i++)
        if (client->nodes[i] && client->nodes[i]->up)
            return 1;
    return client->data.up;
}

struct event_base *lc_async_client_base(const lc_async_client *client)
{
    return client->base;
}

void lc_async_mark_loop_thread(int on)
{
    lc_in_loop += on ? 1 : -1;
}
