/*
 * The servers a test file shares for its cmocka group (see group_fixture.h).
 */
#include "group_fixture.h"

#include <stdio.h>

rf_server *gf_redis;
lc_client *gf_client;
rf_server *gf_node[GF_NODES];
const char *gf_node_url[GF_NODES];
cf_cluster *gf_cluster;

int gf_start(const char *const *extra_args, const lc_client_opts *client_opts)
{
    if (!(gf_redis = rf_start(extra_args)))
        goto fail;
    if (client_opts != NULL) {
        lc_status st = lc_client_new(rf_url(gf_redis), client_opts, &gf_client);
        if (st != LC_OK) {
            fprintf(stderr, "group_fixture: lc_client_new(%s): %s (%s)\n", rf_url(gf_redis),
                    lc_status_name(st), lc_errmsg());
            goto fail;
        }
    }
    return 0;
fail:
    gf_group_teardown(NULL);
    return -1;
}

int gf_start_nodes(const char *const *extra_args)
{
    for (int i = 0; i < GF_NODES; i++) {
        if (!(gf_node[i] = rf_start(extra_args))) {
            gf_group_teardown(NULL);
            return -1;
        }
        gf_node_url[i] = rf_url(gf_node[i]);
    }
    return 0;
}

int gf_start_cluster(int masters, int replicas)
{
    if (!(gf_cluster = cf_start(masters, replicas))) {
        gf_group_teardown(NULL);
        return -1;
    }
    return 0;
}

int gf_group_setup(void **state)
{
    (void)state;
    return gf_start(NULL, NULL);
}

int gf_group_teardown(void **state)
{
    (void)state;
    lc_client_free(gf_client);
    gf_client = NULL;
    rf_stop(gf_redis);
    gf_redis = NULL;
    for (int i = 0; i < GF_NODES; i++) {
        rf_stop(gf_node[i]);
        gf_node[i] = NULL;
        gf_node_url[i] = NULL;
    }
    cf_stop(gf_cluster);
    gf_cluster = NULL;
    return 0;
}

int gf_flush(void **state)
{
    (void)state;
    return rf_flushall(gf_redis);
}
