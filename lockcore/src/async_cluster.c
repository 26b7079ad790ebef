/*
 * Redis Cluster routing I/O of the asynchronous face: a connection per node, redirections, the
 * slot map (the routing itself, without I/O, is cluster_route.c and cluster_slots.c).
 *
 * In cluster mode (a redis-cluster:// URL) every command goes on the data connection of the
 * node that serves its key's slot (lc_acluster_conn; the key is a script's first key, or the
 * key of a plain command, see lc_command_key), so the commands of one loop turn leave in one
 * write per node. Keyless commands go to any connected node. The map comes from CLUSTER SLOTS,
 * asked at start, after a MOVED, a CLUSTERDOWN, and whenever a node's connection goes (a dead
 * master's replica takes over its slots), at most once per REFRESH_MIN_MS. Redirections
 * (lc_acluster_redirect) are followed inside lockcore, invisibly to the operation: MOVED
 * updates the slot and resends; ASK resends once to the named node after ASKING; TRYAGAIN
 * pauses the command (parked, with a doubling pause) and resends it while its first send's
 * command timeout allows, after which the TRYAGAIN error is reported. A redirected command did
 * not run, so resending it can never apply it twice. CLUSTERDOWN is reported as the error it
 * is (LC_EREDIS).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "async_internal.h"

/* At most one CLUSTER SLOTS per REFRESH_MIN_MS; a command follows at most REDIRECTS_MAX
 * redirections; TRYAGAIN pauses start at TRYAGAIN_MIN_MS and double. */
enum { REFRESH_MIN_MS = 100, REDIRECTS_MAX = 16, TRYAGAIN_MIN_MS = 10 };

static void on_slots_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* The data connection of node (made on first use, not yet connected). NULL when out of memory. */
static aconn *node_conn(lc_async_client *client, int node)
{
    if (node < 0 || node >= lc_route_nodes(client->route))
        return NULL;
    if (node >= client->nnodes) {
        int n = lc_route_nodes(client->route);
        aconn **nodes = realloc(client->nodes, sizeof(*nodes) * (size_t)n);
        if (!nodes)
            return NULL;
        for (int i = client->nnodes; i < n; i++)
            nodes[i] = NULL;
        client->nodes = nodes;
        client->nnodes = n;
    }
    aconn *conn = client->nodes[node];
    if (!conn) {
        conn = calloc(1, sizeof(*conn));
        if (!conn)
            return NULL;
        conn->client = client;
        conn->node = node;
        conn->reconnect = evtimer_new(client->base, lc_aconn_on_reconnect_timer, conn);
        if (!conn->reconnect) {
            free(conn);
            return NULL;
        }
        client->nodes[node] = conn;
    }
    return conn;
}

/* The connection for c: an ASK's node, else the master of c's slot, else (no key, or a slot
 * the map does not know yet: a MOVED will tell) a node whose connection is up, else a seed. */
aconn *lc_acluster_conn(lc_async_client *client, acmd *c)
{
    int node = c->ask ? c->ask - 1 : lc_route_slot(client->route, c->slot);
    if (node < 0) {
        for (int i = 0; i < client->nnodes && node < 0; i++)
            if (client->nodes[i] && client->nodes[i]->up)
                node = i;
        if (node < 0)
            node = 0;
    }
    return node_conn(client, node);
}

/* Sends CLUSTER SLOTS to a node whose connection is up (taking turns), else to the next one
 * in turn (connecting it). When none can be asked now, tries again later. */
static void cluster_refresh_send(lc_async_client *client)
{
    int n = lc_route_nodes(client->route);
    aconn *conn = NULL;
    for (int k = 0; k < n && !conn; k++) {
        int i = (client->refresh_next + k) % n;
        if (i < client->nnodes && client->nodes[i] && client->nodes[i]->up)
            conn = client->nodes[i];
    }
    if (!conn) {
        conn = node_conn(client, client->refresh_next % n);
        client->refresh_next = (client->refresh_next + 1) % n;
        if (conn && !conn->ac)
            lc_aconn_open(conn);
    } else {
        client->refresh_next = (conn->node + 1) % n;
    }
    const char *av[2] = {"CLUSTER", "SLOTS"};
    if (!conn || !conn->ac ||
        redisAsyncCommandArgv(conn->ac, on_slots_reply, client, 2, av, NULL) != REDIS_OK) {
        client->refresh_sent_ms = lc_now_ms();
        lc_acluster_refresh_soon(client);
        return;
    }
    client->refresh_inflight = 1;
    client->refresh_sent_ms = lc_now_ms();
    client->stats.refreshes++;
}

void lc_acluster_start(lc_async_client *client)
{
    client->refresh_sent_ms = lc_now_ms() - REFRESH_MIN_MS;
    cluster_refresh_send(client);
}

void lc_acluster_on_refresh_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lc_async_client *client = arg;
    lc_async_enter(client);
    if (!client->freeing)
        cluster_refresh_send(client);
    lc_async_leave(client);
}

/* Asks for a CLUSTER SLOTS soon: at once unless one was sent less than REFRESH_MIN_MS ago; one
 * in flight (answered within the command timeout) is followed by another when it is answered. */
void lc_acluster_refresh_soon(lc_async_client *client)
{
    if (client->freeing || !client->refresh)
        return;
    int64_t since = lc_now_ms() - client->refresh_sent_ms;
    if (client->refresh_inflight && since < client->opts.command_timeout_ms) {
        client->refresh_wanted = 1;
        return;
    }
    client->refresh_inflight = 0;
    if (evtimer_pending(client->refresh, NULL))
        return;
    lc_async_arm(client->refresh, since >= REFRESH_MIN_MS ? 0 : REFRESH_MIN_MS - since);
}

static void on_slots_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    lc_async_client *client = privdata;
    const redisReply *r = reply;
    if (client->freeing)
        return;
    aconn *conn = ac->data;
    client->refresh_inflight = 0;
    lc_slotmap m;
    int ok = 0;
    if (r && lc_slotmap_parse(r, lc_route_host(client->route, conn->node), &m) == LC_OK) {
        /* A node that answers with no slot at all (not joined yet, or reset) is no map. */
        if (m.n > 0) {
            int changed = lc_route_apply(client->route, &m);
            ok = changed >= 0;
            if (changed > 0)
                client->stats.refresh_changes++;
        }
        lc_slotmap_clear(&m);
    }
    if (!ok || client->refresh_wanted) {
        client->refresh_wanted = 0;
        lc_acluster_refresh_soon(client);
    }
}

/* Removes c from the parked list and resends it (or drops it when nobody needs it any more). */
void lc_acluster_unpark(acmd *c)
{
    lc_async_client *client = c->client;
    for (acmd **p = &client->parked; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    c->next = NULL;
    c->parked = 0;
    if (!c->op && !c->renew_of && !c->detached) {
        lc_acmd_free(c); /* it did not run (TRYAGAIN): an acquire's undo is not needed either */
        return;
    }
    if (lc_acmd_send(c) == 0)
        return;
    if (c->detached) {
        lc_acmd_free(c);
        return;
    }
    /* Cannot be resent now: fail it as a command that did not leave. */
    lc_status st = lc_fail(LC_EIO, "redis cluster: not connected to the node after TRYAGAIN");
    if (c->renew_of) {
        lc_async_lock *l = c->renew_of;
        c->renew_of = NULL;
        l->renew_cmd = NULL;
        lc_alock_renew_on_reply(l, st, NULL);
    } else {
        aop *op = c->op;
        c->op = NULL;
        op->cmd = NULL;
        lc_aop_on(op, EV_REPLY, st, NULL, 0);
    }
    lc_acmd_free(c);
}

/* Handles an error reply r to c (from conn's node) that is a cluster redirection. Returns 0:
 * not one to follow (report r); 1: followed (c resent, parked, or freed when nobody needs it);
 * -1: it should be resent but cannot be now (c did not run: report LC_EIO, not sent). */
int lc_acluster_redirect(acmd *c, const redisReply *r, aconn *conn)
{
    lc_async_client *client = c->client;
    lc_redirect rd;
    lc_redirect_kind kind =
        lc_redirect_parse(r->str, r->len, lc_route_host(client->route, conn->node), &rd);
    if (kind == LC_REDIRECT_NONE)
        return 0;
    if (kind == LC_REDIRECT_CLUSTERDOWN) {
        client->stats.clusterdown++;
        lc_acluster_refresh_soon(client);
        return 0;
    }
    if (!c->op && !c->renew_of && !c->detached) {
        lc_acmd_free(c); /* nobody waits, and it did not run (an acquire needs no undo) */
        return 1;
    }
    if (++c->redirects > REDIRECTS_MAX)
        return 0;
    int node;
    switch (kind) {
    case LC_REDIRECT_MOVED:
        client->stats.moved++;
        if ((node = lc_route_node(client->route, rd.host, rd.port)) < 0)
            return 0;
        lc_route_set_slot(client->route, rd.slot, node);
        lc_acluster_refresh_soon(client); /* one slot moved: others may have too */
        break;
    case LC_REDIRECT_ASK:
        client->stats.ask++;
        if ((node = lc_route_node(client->route, rd.host, rd.port)) < 0)
            return 0;
        c->ask = node + 1;
        break;
    case LC_REDIRECT_TRYAGAIN: {
        client->stats.tryagain++;
        int64_t pause = (int64_t)TRYAGAIN_MIN_MS << (c->redirects < 7 ? c->redirects - 1 : 6);
        int64_t left = c->deadline_ms - lc_now_ms();
        if (left <= pause || !c->timer)
            return 0; /* the command timeout ends the retries: report TRYAGAIN */
        c->parked = 1;
        c->next = client->parked;
        client->parked = c;
        lc_async_arm(c->timer, lc_jitter_ms((int)pause / 2 > 0 ? (int)pause / 2 : 1));
        return 1;
    }
    default: return 0;
    }
    return lc_acmd_send(c) == 0 ? 1 : -1;
}

void lc_async_debug_cluster(const lc_async_client *client, lc_cluster_stats *out)
{
    *out = client->stats;
    out->known_slots = client->route ? lc_route_known(client->route) : 0;
}

int lc_async_debug_slot_port(const lc_async_client *client, int slot)
{
    int node = client->route ? lc_route_slot(client->route, slot) : -1;
    return node < 0 ? -1 : lc_route_port(client->route, node);
}
