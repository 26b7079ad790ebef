/*
 * The client: how every command of the blocking face reaches Redis. Either a pool of
 * connections (each used by one thread at a time, dropped after any I/O error and reopened on
 * demand) or, with lc_client_opts.pipeline, one multiplexed connection (mux.c). It also keeps
 * the services that upper layers start for it (client_internal.h), and stops them when freed.
 */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"
#include "client_internal.h"
#include "conn_internal.h"
#include "mux_internal.h"

_Thread_local int lc_in_loop;

typedef struct lc_conn {
    redisContext *ctx;
    struct lc_conn *next;
} lc_conn;

struct lc_client {
    lc_endpoint ep;
    pthread_mutex_t pool_mu;
    lc_conn *idle; /* LIFO stack of idle connections */
    int nidle;
    lc_mux *mux;                 /* opts.pipeline: the one multiplexed connection */
    pthread_mutex_t services_mu; /* held while a service starts */
    struct {
        const lc_service *kind;
        void *instance;
    } services[LC_CLIENT_SERVICES_MAX]; /* [0, nservices) never change once counted */
    atomic_int nservices;
};

void lc_client_opts_init(lc_client_opts *opts)
{
    if (!opts)
        return;
    opts->connect_timeout_ms = 1000;
    opts->command_timeout_ms = 1000;
    opts->pool_max_idle = 64;
    opts->pipeline = 0;
}

/* Borrows a connection from the pool (opening one when none is idle). LC_OK, LC_ENOMEM,
 * LC_EIO or LC_EREDIS (as lc_connect). */
static lc_status conn_get(lc_client *client, lc_conn **out)
{
    pthread_mutex_lock(&client->pool_mu);
    lc_conn *c = client->idle;
    if (c) {
        client->idle = c->next;
        client->nidle--;
    }
    pthread_mutex_unlock(&client->pool_mu);
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c)
            return lc_fail(LC_ENOMEM, "redis connect: out of memory");
        lc_status st = lc_connect(&client->ep, &c->ctx);
        if (st != LC_OK) {
            free(c);
            return st;
        }
    }
    *out = c;
    return LC_OK;
}

/* Returns a connection to the pool; broken = 1 closes it instead (after any I/O error). */
static void conn_put(lc_client *client, lc_conn *conn, int broken)
{
    if (!broken) {
        pthread_mutex_lock(&client->pool_mu);
        if (client->nidle < client->ep.opts.pool_max_idle) {
            conn->next = client->idle;
            client->idle = conn;
            client->nidle++;
            conn = NULL;
        }
        pthread_mutex_unlock(&client->pool_mu);
    }
    if (conn) {
        redisFree(conn->ctx);
        free(conn);
    }
}

lc_status lc_client_new(const char *url, const lc_client_opts *opts, lc_client **out)
{
    if (out)
        *out = NULL;
    if (!url || !out)
        return lc_fail(LC_EINVAL, "client: NULL argument");
    lc_client *c = calloc(1, sizeof(*c));
    if (!c)
        return lc_fail(LC_ENOMEM, "client: out of memory");
    lc_client_opts_init(&c->ep.opts);
    if (opts) {
        if (opts->connect_timeout_ms <= 0 || opts->command_timeout_ms <= 0 ||
            opts->pool_max_idle < 0) {
            free(c);
            return lc_fail(LC_EINVAL, "client: timeouts must be > 0 and pool_max_idle >= 0");
        }
        c->ep.opts = *opts;
    }
    lc_status st = lc_url_parse(url, &c->ep.url);
    if (st == LC_OK && c->ep.url.cluster)
        st = lc_fail(LC_EINVAL, "redis url: redis-cluster:// needs the asynchronous face "
                                "(lc_async_client_new); the blocking client speaks to one Redis");
    if (st != LC_OK) {
        free(c);
        return st;
    }
    pthread_mutex_init(&c->pool_mu, NULL);
    pthread_mutex_init(&c->services_mu, NULL);
    atomic_init(&c->nservices, 0);
    if (c->ep.opts.pipeline && (st = lc_mux_new(&c->ep, &c->mux)) != LC_OK) {
        lc_client_free(c);
        return st;
    }
    st = lc_client_ping(c);
    if (st != LC_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", lc_errmsg());
        lc_client_free(c);
        return lc_fail(st, "%s", msg);
    }
    *out = c;
    return LC_OK;
}

void lc_client_free(lc_client *client)
{
    if (!client)
        return;
    for (int i = atomic_load(&client->nservices) - 1; i >= 0; i--)
        client->services[i].kind->stop(client->services[i].instance);
    lc_mux_free(client->mux);
    while (client->idle) {
        lc_conn *c = client->idle;
        client->idle = c->next;
        redisFree(c->ctx);
        free(c);
    }
    pthread_mutex_destroy(&client->pool_mu);
    pthread_mutex_destroy(&client->services_mu);
    free(client);
}

const lc_endpoint *lc_client_endpoint(const lc_client *client)
{
    return &client->ep;
}

void *lc_client_service_running(lc_client *client, const lc_service *kind)
{
    int n = atomic_load_explicit(&client->nservices, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (client->services[i].kind == kind)
            return client->services[i].instance;
    return NULL;
}

void *lc_client_service(lc_client *client, const lc_service *kind)
{
    void *instance = lc_client_service_running(client, kind);
    if (instance)
        return instance;
    pthread_mutex_lock(&client->services_mu);
    instance = lc_client_service_running(client, kind);
    int n = atomic_load_explicit(&client->nservices, memory_order_relaxed);
    if (!instance && n < LC_CLIENT_SERVICES_MAX && (instance = kind->start(client))) {
        client->services[n].kind = kind;
        client->services[n].instance = instance;
        atomic_store_explicit(&client->nservices, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&client->services_mu);
    return instance;
}

lc_status lc_exec(lc_client *client, int n, const int *argcs, const char **const *argvs,
                  const size_t *const *lens, redisReply **replies, int *sent)
{
    assert(lc_in_loop == 0 && "blocking lockcore call on an event-loop thread");
    for (int i = 0; i < n; i++)
        replies[i] = NULL;
    if (sent)
        *sent = 0;
    if (client->mux)
        return lc_mux_exec(client->mux, n, argcs, argvs, lens, replies, sent);
    lc_conn *conn = NULL;
    lc_status st = conn_get(client, &conn);
    if (st != LC_OK)
        return st;
    if (sent)
        *sent = 1; /* from here on a failure may come after the server read the commands */
    int broken = 0;
    if (n == 1) {
        replies[0] = redisCommandArgv(conn->ctx, argcs[0], argvs[0], lens ? lens[0] : NULL);
        broken = replies[0] == NULL;
    } else {
        for (int i = 0; i < n && !broken; i++)
            if (redisAppendCommandArgv(conn->ctx, argcs[i], argvs[i], lens ? lens[i] : NULL) !=
                REDIS_OK)
                broken = 1;
        for (int i = 0; i < n && !broken; i++) {
            void *r = NULL;
            if (redisGetReply(conn->ctx, &r) != REDIS_OK || !r)
                broken = 1;
            replies[i] = r;
        }
    }
    if (broken) {
        st = lc_fail(LC_EIO, "redis: %s", conn->ctx->err ? conn->ctx->errstr : "no reply");
        for (int i = 0; i < n; i++)
            if (replies[i]) {
                freeReplyObject(replies[i]);
                replies[i] = NULL;
            }
    }
    conn_put(client, conn, broken);
    return st;
}

lc_status lc_client_command(lc_client *client, int argc, const char **argv, const size_t *argvlen,
                            redisReply **reply)
{
    if (reply)
        *reply = NULL;
    if (!client || argc <= 0 || !argv)
        return lc_fail(LC_EINVAL, "command: bad argument");
    for (int i = 0; i < argc; i++)
        if (!argv[i])
            return lc_fail(LC_EINVAL, "command: argument %d is NULL", i);
    redisReply *r = NULL;
    const char **const cmds[1] = {argv};
    const size_t *const lv[1] = {argvlen};
    lc_status st = lc_exec(client, 1, &argc, cmds, lv, &r, NULL);
    if (st == LC_OK && r->type == REDIS_REPLY_ERROR)
        st = lc_fail(LC_EREDIS, "redis: %s", r->str);
    if (reply)
        *reply = r;
    else if (r)
        freeReplyObject(r);
    return st;
}

lc_status lc_client_ping(lc_client *client)
{
    const char *argv[1] = {"PING"};
    redisReply *r = NULL;
    lc_status st = lc_client_command(client, 1, argv, NULL, &r);
    if (st == LC_OK && (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "PONG") != 0))
        st = lc_fail(LC_EREDIS, "redis: unexpected PING reply");
    if (r)
        freeReplyObject(r);
    return st;
}

lc_status lc_client_pipeline(lc_client *client, int n, const int *argcs, const char **const *cmds,
                             const size_t *const *lens, redisReply **replies)
{
    if (!client || n <= 0 || !argcs || !cmds || !replies)
        return lc_fail(LC_EINVAL, "pipeline: bad argument");
    for (int i = 0; i < n; i++) {
        replies[i] = NULL;
        if (argcs[i] <= 0 || !cmds[i])
            return lc_fail(LC_EINVAL, "pipeline: command %d is empty", i);
    }
    return lc_exec(client, n, argcs, cmds, lens, replies, NULL);
}
