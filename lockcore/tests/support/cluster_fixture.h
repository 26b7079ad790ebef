/*
 * A throwaway Redis Cluster for tests: N masters with R replicas each, every node an rf_server
 * (redis_fixture.h: free port, temp dir, stopped at exit and on fatal signals, PDEATHSIG) run
 * with --cluster-enabled yes, a short --cluster-node-timeout (1000 ms) and
 * --cluster-require-full-coverage no (so the other masters serve while one is down, as
 * scripts/cluster.sh does), joined with `redis-cli --cluster create` ($RF_REDIS_CLI, default
 * redis-cli). Plus the helpers the tests need to move slots by hand and to watch a failover.
 *
 * Not thread-safe; start and stop from the main thread (as rf_start).
 */
#ifndef LC_TESTS_CLUSTER_FIXTURE_H
#define LC_TESTS_CLUSTER_FIXTURE_H

#include "redis_fixture.h"

typedef struct cf_cluster cf_cluster;

enum { CF_MAX_NODES = 12 };

/* Starts masters * (1 + replicas) nodes (masters >= 3, total <= CF_MAX_NODES), creates the
 * cluster and waits (at most 30 s) until every node reports cluster_state:ok and knows all the
 * others. Nodes 0..masters-1 are the masters at creation. NULL with the reason on stderr. */
cf_cluster *cf_start(int masters, int replicas);

/* cf_start with more redis-server arguments for every node (NULL-terminated, may be NULL), e.g.
 * {"--min-replicas-to-write", "1", "--min-replicas-max-lag", "2", NULL}. */
cf_cluster *cf_start_ex(int masters, int replicas, const char *const *extra_args);

/* Waits (at most timeout_ms) until every running replica's link to its master is up and its
 * initial sync is over, and every running master with a replica has a write acknowledged by
 * one within 250 ms (WAIT; right after the sync, WAITs of 250 ms failed for about a second on a
 * loaded machine, inventoryd's --redis-replica-acks with them). 0, or -1. */
int cf_wait_replicas(const cf_cluster *c, int timeout_ms);

/* Stops every node and frees the cluster. NULL-safe. */
void cf_stop(cf_cluster *c);

int cf_nodes(const cf_cluster *c);
rf_server *cf_node(const cf_cluster *c, int i);

/* "redis-cluster://127.0.0.1:P" with the first n nodes' ports as seeds (n <= 0: all). Borrowed,
 * valid until the next call or cf_stop. */
const char *cf_url(cf_cluster *c, int n);

/* The node (index) whose port the cluster names as the master of slot, asked to any running
 * node; -1 when none answers or the slot has no master. */
int cf_master_of(const cf_cluster *c, int slot);

/* The node id of node i (CLUSTER MYID), into buf (41 bytes). 0, or -1. */
int cf_node_id(const cf_cluster *c, int i, char id[41]);

/* Begins moving slot from node src to node dst (both masters): SETSLOT IMPORTING on dst,
 * MIGRATING on src. 0, or -1. */
int cf_migrate_begin(const cf_cluster *c, int slot, int src, int dst);

/* MIGRATEs the given keys (all in the migrating slot) from src to dst. 0, or -1. */
int cf_migrate_keys(const cf_cluster *c, int src, int dst, int nkeys, const char *const *keys);

/* Ends the move: SETSLOT slot NODE dst on dst, src and every other running master. 0, or -1. */
int cf_migrate_end(const cf_cluster *c, int slot, int src, int dst);

/* Waits (at most timeout_ms) until every running node reports cluster_state:ok and a running
 * master serves slot. 0, or -1. */
int cf_wait_slot_served(const cf_cluster *c, int slot, int timeout_ms);

#endif
