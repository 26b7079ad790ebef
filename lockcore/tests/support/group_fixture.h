/*
 * The servers a test file shares for its whole cmocka group (prefix gf_): one redis-server
 * (gf_redis, with a client on it when asked, gf_client), the five Redlock nodes (gf_node), or a
 * Redis Cluster (gf_cluster). The group setup starts what the file needs; one group teardown,
 * gf_group_teardown, stops whatever was started. A setup that fails stops again what it had
 * started (cmocka runs no group teardown after a failed group setup), and the process registry
 * (proc_registry.h) stops what a crashed test leaves. The lockcore tests and the service tests
 * (through svc_fixture.h) use it.
 *
 * Not thread-safe: call from the test's main thread (group setup and teardown are).
 */
#ifndef LC_TESTS_GROUP_FIXTURE_H
#define LC_TESTS_GROUP_FIXTURE_H

#include "cluster_fixture.h"
#include "lockcore/lockcore.h"
#include "redis_fixture.h"

#define GF_NODES 5

extern rf_server *gf_redis;          /* the group's redis-server, or NULL */
extern lc_client *gf_client;         /* a client on gf_redis, when gf_start made one */
extern rf_server *gf_node[GF_NODES]; /* the Redlock nodes, when gf_start_nodes ran */
extern const char *gf_node_url[GF_NODES];
extern cf_cluster *gf_cluster; /* the cluster, when gf_start_cluster ran */

/* Starts gf_redis with extra_args (NULL-terminated, may be NULL) and, when client_opts is not
 * NULL, gf_client on it with those options. 0, or -1 with every group server stopped again. */
int gf_start(const char *const *extra_args, const lc_client_opts *client_opts);

/* Starts the GF_NODES Redlock nodes with extra_args (each its own redis-server). 0, or -1 with
 * every group server stopped again. */
int gf_start_nodes(const char *const *extra_args);

/* Starts a Redis Cluster (cf_start). 0, or -1 with every group server stopped again. */
int gf_start_cluster(int masters, int replicas);

/* cmocka group setup: gf_start(NULL, NULL), a plain redis-server. */
int gf_group_setup(void **state);

/* cmocka group teardown: frees gf_client, stops gf_redis, the nodes and the cluster, and sets
 * them all to NULL. Returns 0. */
int gf_group_teardown(void **state);

/* cmocka per-test setup: FLUSHALL on gf_redis, so every test starts from empty. 0 or -1. */
int gf_flush(void **state);

#endif /* LC_TESTS_GROUP_FIXTURE_H */
