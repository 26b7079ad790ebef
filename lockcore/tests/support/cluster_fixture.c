/*
 * A throwaway Redis Cluster for tests (cluster_fixture.h), built on redis_fixture.c's servers.
 */
#include "cluster_fixture.h"

#include "proc_registry.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

struct cf_cluster {
    int n, masters;
    rf_server *node[CF_MAX_NODES];
    char url[CF_MAX_NODES * 24 + 32];
};

int cf_nodes(const cf_cluster *c)
{
    return c->n;
}

rf_server *cf_node(const cf_cluster *c, int i)
{
    return i >= 0 && i < c->n ? c->node[i] : NULL;
}

void cf_stop(cf_cluster *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        rf_stop(c->node[i]);
    free(c);
}

const char *cf_url(cf_cluster *c, int n)
{
    if (n <= 0 || n > c->n)
        n = c->n;
    int off = snprintf(c->url, sizeof c->url, "redis-cluster://");
    for (int i = 0; i < n; i++)
        off += snprintf(c->url + off, sizeof c->url - (size_t)off, "%s127.0.0.1:%d", i ? "," : "",
                        rf_port(c->node[i]));
    return c->url;
}

/* Runs redis-cli --cluster create over every node; its output goes to node 0's dir. 0 or -1. */
static int create(cf_cluster *c, int replicas)
{
    const char *cli = getenv("RF_REDIS_CLI");
    if (!cli || !*cli)
        cli = "redis-cli";
    char addr[CF_MAX_NODES][32], reps[16], log[512];
    const char *argv[CF_MAX_NODES + 8];
    int argc = 0;
    argv[argc++] = cli;
    argv[argc++] = "--cluster";
    argv[argc++] = "create";
    for (int i = 0; i < c->n; i++) {
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", rf_port(c->node[i]));
        argv[argc++] = addr[i];
    }
    snprintf(reps, sizeof reps, "%d", replicas);
    argv[argc++] = "--cluster-replicas";
    argv[argc++] = reps;
    argv[argc++] = "--cluster-yes";
    argv[argc] = NULL;
    snprintf(log, sizeof log, "%s/cluster-create.log", rf_dir(c->node[0]));
    int out = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    pid_t pid = pr_spawn(argv, out, out);
    if (out >= 0)
        close(out);
    if (pid < 0)
        return -1;
    int status = 0;
    int64_t deadline = tu_now_ms() + 60000;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 || tu_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fprintf(stderr, "cluster_fixture: redis-cli --cluster create did not finish\n");
            return -1;
        }
        tu_sleep_ms(20);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "cluster_fixture: redis-cli --cluster create failed (see %s)\n", log);
        return -1;
    }
    return 0;
}

/* INFO replication says: a replica whose link is up and initial sync over, or a master that
 * (with min-replicas-to-write set) counts enough good replicas to accept writes. */
static int replication_ready(const char *info)
{
    if (strstr(info, "role:master"))
        return !strstr(info, "min_slaves_good_slaves:0");
    return strstr(info, "master_link_status:up") && strstr(info, "master_sync_in_progress:0");
}

/* Node i says cluster_state:ok and knows want nodes, all connected, none failing. */
static int node_formed(const cf_cluster *c, int i, int want)
{
    if (!rf_pid(c->node[i]))
        return 1;
    redisReply *r = rf_command(c->node[i], "CLUSTER INFO");
    int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
    freeReplyObject(r);
    if (!ok)
        return 0;
    r = rf_command(c->node[i], "CLUSTER NODES");
    ok = r && r->type == REDIS_REPLY_STRING;
    int lines = 0, connected = 0;
    for (const char *p = ok ? r->str : ""; *p; p++)
        if (*p == '\n')
            lines++;
    for (const char *p = ok ? r->str : ""; (p = strstr(p, " connected")); p++)
        connected++;
    ok = ok && lines == want && connected == want && !strstr(r->str, "fail");
    freeReplyObject(r);
    if (!ok)
        return 0;
    /* A replica counts once its link is up and its initial sync is over (WAIT needs it). */
    r = rf_command(c->node[i], "INFO replication");
    ok = r && r->type == REDIS_REPLY_STRING && replication_ready(r->str);
    freeReplyObject(r);
    return ok;
}

static int formed(void *arg)
{
    const cf_cluster *c = arg;
    for (int i = 0; i < c->n; i++)
        if (!node_formed(c, i, c->n))
            return 0;
    return 1;
}

cf_cluster *cf_start(int masters, int replicas)
{
    return cf_start_ex(masters, replicas, NULL);
}

cf_cluster *cf_start_ex(int masters, int replicas, const char *const *extra_args)
{
    int total = masters * (1 + replicas);
    if (masters < 3 || replicas < 0 || total > CF_MAX_NODES) {
        fprintf(stderr, "cluster_fixture: %d masters x %d replicas not supported\n", masters,
                replicas);
        return NULL;
    }
    cf_cluster *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->masters = masters;
    static const char *const base[] = {"--cluster-enabled",
                                       "yes",
                                       "--cluster-config-file",
                                       "{dir}/nodes.conf",
                                       "--cluster-node-timeout",
                                       "1000",
                                       "--cluster-require-full-coverage",
                                       "no",
                                       "--cluster-replica-validity-factor",
                                       "0"};
    enum { NBASE = sizeof base / sizeof base[0] };
    const char *args[NBASE + 16];
    int nargs = 0;
    for (int i = 0; i < NBASE; i++)
        args[nargs++] = base[i];
    for (int i = 0; extra_args && extra_args[i] && nargs < NBASE + 15; i++)
        args[nargs++] = extra_args[i];
    args[nargs] = NULL;
    for (int i = 0; i < total; i++) {
        /* The cluster bus listens on port + 10000: retry until a node gets a port that allows
         * it (rf_start gives up on a node that exits at start). */
        rf_server *s = NULL;
        for (int attempt = 0; attempt < 10 && !s; attempt++) {
            s = rf_start(args);
            if (s && rf_port(s) > 55535) {
                rf_stop(s);
                s = NULL;
            }
        }
        if (!s) {
            fprintf(stderr, "cluster_fixture: node %d did not start\n", i);
            cf_stop(c);
            return NULL;
        }
        c->node[c->n++] = s;
    }
    if (create(c, replicas) != 0 || !tu_poll_until(formed, c, 30000, 50)) {
        fprintf(stderr, "cluster_fixture: the cluster did not form\n");
        cf_stop(c);
        return NULL;
    }
    return c;
}

/* The port of slot's master per CLUSTER SLOTS of node i, or -1. */
static int slot_port_by(const cf_cluster *c, int i, int slot)
{
    if (!rf_pid(c->node[i]))
        return -1;
    redisReply *r = rf_command(c->node[i], "CLUSTER SLOTS");
    int port = -1;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
        redisReply *e = r->element[k];
        if (e->type == REDIS_REPLY_ARRAY && e->elements >= 3 && e->element[0]->integer <= slot &&
            slot <= e->element[1]->integer)
            port = (int)e->element[2]->element[1]->integer;
    }
    freeReplyObject(r);
    return port;
}

int cf_master_of(const cf_cluster *c, int slot)
{
    for (int i = 0; i < c->n; i++) {
        int port = slot_port_by(c, i, slot);
        if (port < 0)
            continue;
        for (int j = 0; j < c->n; j++)
            if (rf_port(c->node[j]) == port)
                return j;
        return -1;
    }
    return -1;
}

int cf_node_id(const cf_cluster *c, int i, char id[41])
{
    return rf_string(c->node[i], id, 41, "CLUSTER MYID") == 1 && strlen(id) == 40 ? 0 : -1;
}

/* Runs a command on node i that must answer +OK. 0 or -1. */
static int ok_reply(redisReply *r)
{
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (!ok)
        fprintf(stderr, "cluster_fixture: unexpected reply %s\n", r && r->str ? r->str : "(none)");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

int cf_migrate_begin(const cf_cluster *c, int slot, int src, int dst)
{
    char sid[41], did[41];
    if (cf_node_id(c, src, sid) || cf_node_id(c, dst, did))
        return -1;
    if (ok_reply(rf_command(c->node[dst], "CLUSTER SETSLOT %d IMPORTING %s", slot, sid)) ||
        ok_reply(rf_command(c->node[src], "CLUSTER SETSLOT %d MIGRATING %s", slot, did)))
        return -1;
    return 0;
}

int cf_migrate_keys(const cf_cluster *c, int src, int dst, int nkeys, const char *const *keys)
{
    for (int k = 0; k < nkeys; k++) {
        redisReply *r = rf_command(c->node[src], "MIGRATE 127.0.0.1 %d %s 0 5000",
                                   rf_port(c->node[dst]), keys[k]);
        int ok = r && r->type == REDIS_REPLY_STATUS; /* OK, or NOKEY */
        if (!ok)
            fprintf(stderr, "cluster_fixture: MIGRATE %s: %s\n", keys[k],
                    r && r->str ? r->str : "(none)");
        freeReplyObject(r);
        if (!ok)
            return -1;
    }
    return 0;
}

int cf_migrate_end(const cf_cluster *c, int slot, int src, int dst)
{
    char did[41];
    if (cf_node_id(c, dst, did))
        return -1;
    if (ok_reply(rf_command(c->node[dst], "CLUSTER SETSLOT %d NODE %s", slot, did)) ||
        ok_reply(rf_command(c->node[src], "CLUSTER SETSLOT %d NODE %s", slot, did)))
        return -1;
    for (int i = 0; i < c->n; i++) {
        if (i == src || i == dst || !rf_pid(c->node[i]))
            continue;
        redisReply *r = rf_command(c->node[i], "ROLE");
        int master = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                     r->element[0]->type == REDIS_REPLY_STRING &&
                     strcmp(r->element[0]->str, "master") == 0;
        freeReplyObject(r);
        if (master && ok_reply(rf_command(c->node[i], "CLUSTER SETSLOT %d NODE %s", slot, did)))
            return -1;
    }
    return 0;
}

struct served {
    const cf_cluster *c;
    int slot;
};

static int slot_served(void *arg)
{
    struct served *s = arg;
    for (int i = 0; i < s->c->n; i++) {
        if (!rf_pid(s->c->node[i]))
            continue;
        redisReply *r = rf_command(s->c->node[i], "CLUSTER INFO");
        int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
        freeReplyObject(r);
        if (!ok)
            return 0;
    }
    int m = cf_master_of(s->c, s->slot);
    if (m < 0 || !rf_pid(s->c->node[m]))
        return 0;
    redisReply *r = rf_command(s->c->node[m], "ROLE");
    int master = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                 r->element[0]->type == REDIS_REPLY_STRING &&
                 strcmp(r->element[0]->str, "master") == 0;
    freeReplyObject(r);
    return master;
}

int cf_wait_slot_served(const cf_cluster *c, int slot, int timeout_ms)
{
    struct served s = {c, slot};
    return tu_poll_until(slot_served, &s, timeout_ms, 50) ? 0 : -1;
}

/* Master node i takes a write and a replica acknowledges it within CF_ACK_PROBE_MS (WAIT on
 * the write's connection): a key of a slot node i serves, set and deleted again. 1, or 0 (node
 * i is no master with a replica, or the acknowledgement was late). */
enum { CF_ACK_PROBE_MS = 250 };
static int master_acks(const cf_cluster *c, int i)
{
    char key[48];
    long long slot = -1;
    for (int t = 0; t < 1000 && slot < 0; t++) {
        snprintf(key, sizeof key, "cf:ack-probe:{%d}", t);
        long long s = rf_integer(c->node[i], "CLUSTER KEYSLOT %s", key);
        if (s == RF_NOT_INTEGER)
            return 0;
        if (cf_master_of(c, (int)s) == i)
            slot = s;
    }
    redisContext *rc = slot >= 0 ? rf_connect(c->node[i]) : NULL;
    if (rc == NULL)
        return 0;
    redisReply *r = redisCommand(rc, "SET %s 1", key);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    r = ok ? redisCommand(rc, "DEL %s", key) : NULL;
    ok = r && r->type == REDIS_REPLY_INTEGER;
    freeReplyObject(r);
    r = ok ? redisCommand(rc, "WAIT 1 %d", (int)CF_ACK_PROBE_MS) : NULL;
    ok = r && r->type == REDIS_REPLY_INTEGER && r->integer >= 1;
    freeReplyObject(r);
    redisFree(rc);
    return ok;
}

static int replicas_synced(void *arg)
{
    const cf_cluster *c = arg;
    for (int i = 0; i < c->n; i++) {
        if (!rf_pid(c->node[i]))
            continue;
        redisReply *r = rf_command(c->node[i], "INFO replication");
        int ok = r && r->type == REDIS_REPLY_STRING && replication_ready(r->str);
        int master = ok && strstr(r->str, "role:master") && !strstr(r->str, "connected_slaves:0");
        freeReplyObject(r);
        if (!ok || (master && !master_acks(c, i)))
            return 0;
    }
    return 1;
}

int cf_wait_replicas(const cf_cluster *c, int timeout_ms)
{
    return tu_poll_until(replicas_synced, (void *)c, timeout_ms, 50) ? 0 : -1;
}
