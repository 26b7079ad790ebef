/*
 * Redis Cluster routing, private to lockcore: the pure parts (cluster_slots.c: key slots,
 * CLUSTER SLOTS replies, redirection errors, which argument of a command is its key) and the
 * routing table of one asynchronous client (cluster_route.c: the nodes seen so far and which
 * node serves each slot). Neither does any I/O; async_cluster.c sends and resends the commands.
 * See docs/lockcore.md, "Redis Cluster".
 */
#ifndef LOCKCORE_CLUSTER_INTERNAL_H
#define LOCKCORE_CLUSTER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "lockcore/lockcore.h"

enum { LC_CLUSTER_SLOTS = 16384, LC_CLUSTER_HOST_MAX = 256 };

/* ---- cluster_slots.c ---- */

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the checksum Redis Cluster uses. */
uint16_t lc_crc16(const char *buf, size_t len);

/* The slot (0..16383) of key[0..len): CRC16 of the hash tag (the bytes between the first '{'
 * and the first '}' after it, when that is not empty), else of the whole key, mod 16384. */
int lc_key_slot(const char *key, size_t len);

/* One range of a CLUSTER SLOTS reply: slots [start, end] are served by the master host:port. */
typedef struct lc_slot_range {
    int start, end;
    char host[LC_CLUSTER_HOST_MAX];
    int port;
} lc_slot_range;

/* A parsed CLUSTER SLOTS reply (masters only; replicas are not routed to). */
typedef struct lc_slotmap {
    int n;
    lc_slot_range *ranges; /* malloc'd; lc_slotmap_clear frees it */
} lc_slotmap;

/* Parses a CLUSTER SLOTS reply r into *out (which it fills from empty). A master whose host is
 * empty or "?" (an endpoint the node does not know, Redis 7) gets from_host, the host of the
 * node that answered. LC_OK; LC_EINVAL (with a message) for a reply of the wrong shape, a
 * slot outside 0..16383, start > end, or a port outside 1..65535; LC_ENOMEM. On failure *out
 * is empty. */
lc_status lc_slotmap_parse(const redisReply *r, const char *from_host, lc_slotmap *out);
void lc_slotmap_clear(lc_slotmap *m);

/* What an error reply asks of a cluster client. */
typedef enum lc_redirect_kind {
    LC_REDIRECT_NONE,       /* an ordinary error: report it */
    LC_REDIRECT_MOVED,      /* the slot lives on host:port now: update the map, send there */
    LC_REDIRECT_ASK,        /* this once, ASKING + the command on host:port (slot migrating) */
    LC_REDIRECT_TRYAGAIN,   /* multi-key command during a migration: retry after a pause */
    LC_REDIRECT_CLUSTERDOWN /* the cluster (or this slot) is not served now: report it */
} lc_redirect_kind;

typedef struct lc_redirect {
    lc_redirect_kind kind;
    int slot;                       /* MOVED, ASK */
    char host[LC_CLUSTER_HOST_MAX]; /* MOVED, ASK */
    int port;                       /* MOVED, ASK */
} lc_redirect;

/* Classifies the error text err[0..len) ("MOVED 3999 127.0.0.1:6381", "ASK …", "TRYAGAIN …",
 * "CLUSTERDOWN …"). An empty host in MOVED/ASK (a node that does not know its own endpoint)
 * becomes from_host. A MOVED or ASK that cannot be parsed is LC_REDIRECT_NONE (reported as the
 * error it is). Returns out->kind. */
lc_redirect_kind lc_redirect_parse(const char *err, size_t len, const char *from_host,
                                   lc_redirect *out);

/* The index in argv of the key that decides where a command goes: the first key of
 * EVAL/EVALSHA/EVAL_RO/EVALSHA_RO/FCALL/FCALL_RO (argv[3] when numkeys > 0), -1 for commands
 * with no key (PING, INFO, TIME, WAIT, CLUSTER, PUBLISH, SCRIPT, FLUSHALL, …, and scripts with
 * numkeys 0), else 1. lens may be NULL (NUL-terminated strings). */
int lc_command_key(int argc, const char *const *argv, const size_t *lens);

/* ---- cluster_route.c ---- */

/* The routing table of one client: the nodes met so far (seeds, CLUSTER SLOTS, MOVED/ASK;
 * indexes are stable, a node is never removed) and the master of every slot, when known. */
typedef struct lc_route lc_route;

/* A table starting with the n seed nodes hosts[i]:ports[i] (n >= 1). NULL when out of memory. */
lc_route *lc_route_new(int n, const char *const *hosts, const int *ports);
void lc_route_free(lc_route *rt);

int lc_route_nodes(const lc_route *rt);
const char *lc_route_host(const lc_route *rt, int node);
int lc_route_port(const lc_route *rt, int node);

/* The index of host:port, added when new. -1 when out of memory or the table is full. */
int lc_route_node(lc_route *rt, const char *host, int port);

/* The node serving slot, or -1 when the map does not know. */
int lc_route_slot(const lc_route *rt, int slot);

/* Records that slot is served by node (a MOVED). */
void lc_route_set_slot(lc_route *rt, int slot, int node);

/* Replaces the whole map by m (slots m does not cover become unknown). Returns how many slots
 * changed node, or -1 when out of memory (the map is then unchanged). */
int lc_route_apply(lc_route *rt, const lc_slotmap *m);

/* Number of slots with a known node (16384 once a full CLUSTER SLOTS was applied). */
int lc_route_known(const lc_route *rt);

/* One slot of each node that serves any (the masters the map knows), at most max of them, in
 * node order: slots[i] is the first slot node i serves. Returns how many were written. */
int lc_route_master_slots(const lc_route *rt, int *slots, int max);

#endif
