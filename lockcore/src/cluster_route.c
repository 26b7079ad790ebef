/*
 * The routing table of one asynchronous cluster client (cluster_internal.h): the nodes seen so
 * far, each with a stable index (async_cluster.c keeps one connection per index), and the master of
 * each of the 16384 slots. Filled from CLUSTER SLOTS (lc_route_apply) and corrected slot by
 * slot by MOVED (lc_route_set_slot). No I/O; one thread (the client's loop).
 */
#include <stdlib.h>
#include <string.h>

#include "cluster_internal.h"

enum { NODES_MAX = 4096 };

typedef struct rnode {
    char host[LC_CLUSTER_HOST_MAX];
    int port;
} rnode;

struct lc_route {
    rnode *nodes;
    int n, cap;
    int16_t slot[LC_CLUSTER_SLOTS]; /* node index, -1 unknown */
};

lc_route *lc_route_new(int n, const char *const *hosts, const int *ports)
{
    if (n < 1)
        return NULL;
    lc_route *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return NULL;
    for (int s = 0; s < LC_CLUSTER_SLOTS; s++)
        rt->slot[s] = -1;
    for (int i = 0; i < n; i++)
        if (lc_route_node(rt, hosts[i], ports[i]) < 0) {
            lc_route_free(rt);
            return NULL;
        }
    return rt;
}

void lc_route_free(lc_route *rt)
{
    if (!rt)
        return;
    free(rt->nodes);
    free(rt);
}

int lc_route_nodes(const lc_route *rt)
{
    return rt->n;
}

const char *lc_route_host(const lc_route *rt, int node)
{
    return rt->nodes[node].host;
}

int lc_route_port(const lc_route *rt, int node)
{
    return rt->nodes[node].port;
}

int lc_route_node(lc_route *rt, const char *host, int port)
{
    for (int i = 0; i < rt->n; i++)
        if (rt->nodes[i].port == port && strcmp(rt->nodes[i].host, host) == 0)
            return i;
    if (rt->n >= NODES_MAX || strlen(host) >= LC_CLUSTER_HOST_MAX)
        return -1;
    if (rt->n == rt->cap) {
        int cap = rt->cap ? rt->cap * 2 : 8;
        rnode *nodes = realloc(rt->nodes, sizeof(*nodes) * (size_t)cap);
        if (!nodes)
            return -1;
        rt->nodes = nodes;
        rt->cap = cap;
    }
    rnode *nd = &rt->nodes[rt->n];
    strcpy(nd->host, host);
    nd->port = port;
    return rt->n++;
}

int lc_route_slot(const lc_route *rt, int slot)
{
    if (slot < 0 || slot >= LC_CLUSTER_SLOTS)
        return -1;
    return rt->slot[slot];
}

void lc_route_set_slot(lc_route *rt, int slot, int node)
{
    if (slot >= 0 && slot < LC_CLUSTER_SLOTS && node >= -1 && node < rt->n)
        rt->slot[slot] = (int16_t)node;
}

int lc_route_apply(lc_route *rt, const lc_slotmap *m)
{
    /* Resolve every range's node first, so that a failure leaves the map as it was. */
    int *idx = m->n ? malloc(sizeof(*idx) * (size_t)m->n) : NULL;
    if (m->n && !idx)
        return -1;
    for (int i = 0; i < m->n; i++)
        if ((idx[i] = lc_route_node(rt, m->ranges[i].host, m->ranges[i].port)) < 0) {
            free(idx);
            return -1;
        }
    int16_t next[LC_CLUSTER_SLOTS];
    for (int s = 0; s < LC_CLUSTER_SLOTS; s++)
        next[s] = -1;
    for (int i = 0; i < m->n; i++)
        for (int s = m->ranges[i].start; s <= m->ranges[i].end; s++)
            next[s] = (int16_t)idx[i];
    free(idx);
    int changed = 0;
    for (int s = 0; s < LC_CLUSTER_SLOTS; s++)
        changed += next[s] != rt->slot[s];
    memcpy(rt->slot, next, sizeof(next));
    return changed;
}

int lc_route_master_slots(const lc_route *rt, int *slots, int max)
{
    int n = 0;
    for (int node = 0; node < rt->n && n < max; node++) {
        for (int s = 0; s < LC_CLUSTER_SLOTS; s++) {
            if (rt->slot[s] == node) {
                slots[n++] = s;
                break;
            }
        }
    }
    return n;
}

int lc_route_known(const lc_route *rt)
{
    int n = 0;
    for (int s = 0; s < LC_CLUSTER_SLOTS; s++)
        n += rt->slot[s] >= 0;
    return n;
}
